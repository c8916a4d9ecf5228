//! `ROLLUP`, `CUBE` and `GROUPING SETS` whose sets name an expression
//! twice, which PostgreSQL runs and DataFusion 55 refuses ("Schema contains
//! duplicate qualified field name"). Grouping by `a, a` is grouping by `a`,
//! so each set keeps one of each expression; the sets themselves stay as
//! many as they were (a set that repeats gives its groups twice, in
//! PostgreSQL as in DataFusion):
//!
//! ```text
//!   ROLLUP (a, a, b)  ─▶ GROUPING SETS ((a, b), (a), (a), ())
//!   CUBE (a, a)       ─▶ GROUPING SETS ((a), (a), (a), ())
//! ```
//! A clause without a repeat is left as written.

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{Expr, Statement, VisitMut, VisitorMut};

/// Most sets a `CUBE` is expanded into (`2^n` for `n` parts): past it the
/// clause is left to DataFusion as written.
const CUBE_PARTS_MAX: usize = 12;

/// Rewrites every grouping-set clause of `statement` that repeats an
/// expression within a set (see the module documentation).
pub fn deduplicate(statement: &mut Statement) {
    let _ = statement.visit(&mut Deduplicator);
}

struct Deduplicator;

impl VisitorMut for Deduplicator {
    type Break = ();

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        let sets = match expr {
            Expr::Rollup(parts) => (0..=parts.len()).rev().map(|k| parts[..k].concat()).collect(),
            Expr::Cube(parts) if parts.len() <= CUBE_PARTS_MAX => (0..1usize << parts.len())
                .rev()
                .map(|mask| parts.iter().enumerate().filter(|(i, _)| mask & (1 << (parts.len() - 1 - i)) != 0).flat_map(|(_, p)| p.clone()).collect())
                .collect(),
            Expr::GroupingSets(sets) => sets.clone(),
            _ => return ControlFlow::Continue(()),
        };
        let sets: Vec<Vec<Expr>> = sets;
        if sets.iter().any(|set| has_repeat(set)) {
            *expr = Expr::GroupingSets(sets.into_iter().map(without_repeats).collect());
        }
        ControlFlow::Continue(())
    }
}

fn has_repeat(set: &[Expr]) -> bool {
    set.iter().enumerate().any(|(i, e)| set[..i].contains(e))
}

fn without_repeats(set: Vec<Expr>) -> Vec<Expr> {
    let mut kept: Vec<Expr> = Vec::with_capacity(set.len());
    for expr in set {
        if !kept.contains(&expr) {
            kept.push(expr);
        }
    }
    kept
}

#[cfg(test)]
mod tests {
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;

    fn rewritten(sql: &str) -> String {
        let mut statement = Parser::parse_sql(&PostgreSqlDialect {}, sql).unwrap().remove(0);
        super::deduplicate(&mut statement);
        statement.to_string()
    }

    #[test]
    fn repeats_within_a_set_go_and_the_sets_stay() {
        assert_eq!(rewritten("SELECT 1 FROM t GROUP BY ROLLUP (a, a, b)"), "SELECT 1 FROM t GROUP BY GROUPING SETS ((a, b), (a), (a), ())");
        assert_eq!(rewritten("SELECT 1 FROM t GROUP BY CUBE (a, a)"), "SELECT 1 FROM t GROUP BY GROUPING SETS ((a), (a), (a), ())");
        assert_eq!(
            rewritten("SELECT 1 FROM t GROUP BY GROUPING SETS ((t.b, t.a, t.b), (t.b), ())"),
            "SELECT 1 FROM t GROUP BY GROUPING SETS ((t.b, t.a), (t.b), ())"
        );
        assert_eq!(rewritten("SELECT 1 FROM t GROUP BY x, ROLLUP ((a, b), a)"), "SELECT 1 FROM t GROUP BY x, GROUPING SETS ((a, b), (a, b), ())");
        for unchanged in ["SELECT 1 FROM t GROUP BY ROLLUP (a, b)", "SELECT 1 FROM t GROUP BY CUBE (a, b)", "SELECT 1 FROM t GROUP BY a, a"] {
            assert_eq!(rewritten(unchanged), unchanged);
        }
    }
}
