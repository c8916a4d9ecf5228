//! Names the subquery columns of a select list that DataFusion would refuse
//! as duplicates.
//!
//! DataFusion names every scalar subquery column `(<subquery>)`, and a
//! projection may not hold one name twice, so `SELECT (SELECT count(*) ...),
//! (SELECT max(b) ...) FROM t` fails to plan ("Projections require unique
//! expression names"). PostgreSQL allows duplicate column names and names
//! such a column after the subquery's own column (`count`, `max`), `exists`
//! for EXISTS, `?column?` otherwise. Where a select list holds two or more
//! unnamed items with subqueries, [`name_subquery_columns`] gives those items
//! PostgreSQL's names, made unique with `_2`, `_3` where they repeat (the
//! one departure from PostgreSQL, for a statement that would not plan
//! otherwise). Select lists with at most one such item are left alone.

use std::collections::HashSet;
use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{Expr, Ident, Query, Select, SelectItem, SetExpr, Statement, VisitMut, VisitorMut, visit_expressions};

/// Renames the subquery columns of every select list in `statement` that
/// needs it; whether anything changed.
pub fn name_subquery_columns(statement: &mut Statement) -> bool {
    let mut namer = Namer { changed: false };
    let _ = statement.visit(&mut namer);
    namer.changed
}

struct Namer {
    changed: bool,
}

impl VisitorMut for Namer {
    type Break = ();

    fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        self.changed |= name_in(query.body.as_mut());
        ControlFlow::Continue(())
    }
}

/// Names the items of the select lists in `body` (through set operations).
fn name_in(body: &mut SetExpr) -> bool {
    match body {
        SetExpr::Select(select) => name_items(select),
        SetExpr::SetOperation { left, right, .. } => name_in(left) | name_in(right),
        _ => false,
    }
}

fn holds_subquery(expr: &Expr) -> bool {
    visit_expressions(expr, |e| match e {
        Expr::Subquery(_) | Expr::Exists { .. } | Expr::InSubquery { .. } => ControlFlow::Break(()),
        _ => ControlFlow::Continue(()),
    })
    .is_break()
}

fn name_items(select: &mut Select) -> bool {
    let with_subquery = select.projection.iter().filter(|i| matches!(i, SelectItem::UnnamedExpr(e) if holds_subquery(e))).count();
    if with_subquery < 2 {
        return false;
    }
    let mut taken: HashSet<String> = select
        .projection
        .iter()
        .filter_map(|i| match i {
            SelectItem::ExprWithAlias { alias, .. } => Some(alias.value.clone()),
            _ => None,
        })
        .collect();
    for item in select.projection.iter_mut() {
        let SelectItem::UnnamedExpr(expr) = item else { continue };
        if !holds_subquery(expr) {
            continue;
        }
        let base = postgres_name(expr);
        let mut name = base.clone();
        let mut n = 2;
        while taken.contains(&name) {
            name = format!("{base}_{n}");
            n += 1;
        }
        taken.insert(name.clone());
        *item = SelectItem::ExprWithAlias { expr: expr.clone(), alias: Ident::with_quote('"', name) };
    }
    true
}

/// The column name PostgreSQL gives a select item of this expression.
fn postgres_name(expr: &Expr) -> String {
    match expr {
        Expr::Nested(inner) => postgres_name(inner),
        Expr::Exists { .. } => "exists".into(),
        Expr::Subquery(query) => match query.body.as_ref() {
            SetExpr::Select(select) if select.projection.len() == 1 => match &select.projection[0] {
                SelectItem::ExprWithAlias { alias, .. } => alias.value.clone(),
                SelectItem::UnnamedExpr(inner) => postgres_name(inner),
                _ => "?column?".into(),
            },
            _ => "?column?".into(),
        },
        Expr::Identifier(ident) => ident.value.clone(),
        Expr::CompoundIdentifier(parts) => parts.last().map_or("?column?".into(), |p| p.value.clone()),
        Expr::Function(function) => function.name.0.last().and_then(|p| p.as_ident()).map_or("?column?".into(), |p| p.value.to_lowercase()),
        Expr::Case { .. } => "case".into(),
        _ => "?column?".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;

    fn renamed(sql: &str) -> String {
        let mut statement = Parser::parse_sql(&PostgreSqlDialect {}, sql).unwrap().pop().unwrap();
        name_subquery_columns(&mut statement);
        statement.to_string()
    }

    #[test]
    fn two_subquery_columns_get_postgres_names_made_unique() {
        assert_eq!(
            renamed("SELECT a, (SELECT count(*) FROM t), (SELECT count(*) FROM u), EXISTS (SELECT 1 FROM t), (SELECT x.b FROM t AS x) + 1 FROM t"),
            "SELECT a, (SELECT count(*) FROM t) AS \"count\", (SELECT count(*) FROM u) AS \"count_2\", EXISTS (SELECT 1 FROM t) AS \"exists\", (SELECT x.b FROM t AS x) + 1 AS \"?column?\" FROM t"
        );
    }

    #[test]
    fn one_subquery_column_or_named_ones_stay() {
        let one = "SELECT a, (SELECT count(*) FROM t) FROM t";
        assert_eq!(renamed(one), one);
        let named = "SELECT (SELECT count(*) FROM t) AS n, (SELECT max(b) FROM t) AS m FROM t";
        assert_eq!(renamed(named), named);
    }
}
