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
//!
//! An integer among a grouping set's keys names a select item, as at the
//! top of GROUP BY (DataFusion read `ROLLUP (1)` as the constant 1): it is
//! replaced by the item's expression.
//!
//! A constant among a grouping set's keys (`CUBE (1)`, the ordinal of a
//! constant select item, or `ROLLUP ('x')`): DataFusion replaces every
//! expression equal to a grouping key with the key's column, constants
//! too, so `HAVING count(*) <= 1` compared the count with the key's NULL in
//! the rows of the sets without it and lost them (fuzz k120, seed 59478
//! query 9). PostgreSQL never replaces a constant that way; only the select
//! item the key names is NULL in those rows. The key and that select item
//! are written `coalesce(c)`, which no other constant equals (DataFusion's
//! simplifier folds it back to `c` after planning):
//!
//! ```text
//!   SELECT 1 AS c0 ... GROUP BY CUBE (1) HAVING count(*) <= 1
//!     ─▶ SELECT coalesce(1) AS c0 ... GROUP BY CUBE (coalesce(1)) HAVING count(*) <= 1
//!   SELECT a, count(*) ... GROUP BY ROLLUP (1)  ─▶  ... GROUP BY ROLLUP (a)
//! ```
//!
//! The empty grouping set `()` at the top of GROUP BY, which DataFusion
//! refuses ("Empty tuple not supported yet"), is the one set of no keys
//! beside the other keys (a query's one group, even over no rows):
//!
//! ```text
//!   GROUP BY ()      ─▶  GROUP BY GROUPING SETS (())
//!   GROUP BY (), a   ─▶  GROUP BY a
//! ```

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{Expr, GroupByExpr, Select, SelectItem, Statement, UnaryOperator, Value, VisitMut, VisitorMut};

/// Most sets a `CUBE` is expanded into (`2^n` for `n` parts): past it the
/// clause is left to DataFusion as written.
const CUBE_PARTS_MAX: usize = 12;

/// Rewrites every grouping-set clause of `statement` that repeats an
/// expression within a set, the constant keys of grouping sets, and the
/// empty set `()` (see the module documentation).
pub fn rewrite(statement: &mut Statement) {
    let _ = statement.visit(&mut Deduplicator);
}

struct Deduplicator;

impl VisitorMut for Deduplicator {
    type Break = ();

    fn pre_visit_select(&mut self, select: &mut Select) -> ControlFlow<()> {
        empty_sets(select);
        constant_keys(select);
        ControlFlow::Continue(())
    }

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

/// Drops the empty sets `()` at the top of `select`'s GROUP BY, or makes
/// the clause one empty grouping set when they are all it holds (see the
/// module documentation).
fn empty_sets(select: &mut Select) {
    let GroupByExpr::Expressions(keys, _) = &mut select.group_by else { return };
    let empty = |key: &Expr| matches!(key, Expr::Tuple(parts) if parts.is_empty());
    if !keys.iter().any(empty) {
        return;
    }
    keys.retain(|key| !empty(key));
    if keys.is_empty() {
        keys.push(Expr::GroupingSets(vec![vec![]]));
    }
}

/// Writes the constant keys of `select`'s grouping sets, and the select
/// items they name, as `coalesce(c)` (see the module documentation).
fn constant_keys(select: &mut Select) {
    let Select { group_by, projection, having, .. } = select;
    let GroupByExpr::Expressions(keys, _) = group_by else { return };
    // Positions count every item; after a `*` they cannot be counted here.
    if projection.iter().any(|item| matches!(item, SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..))) {
        return;
    }
    let mut in_sets: Vec<&mut Expr> = Vec::new();
    for key in keys.iter_mut() {
        match key {
            Expr::Rollup(parts) | Expr::Cube(parts) => in_sets.extend(parts.iter_mut().flatten()),
            Expr::GroupingSets(sets) => in_sets.extend(sets.iter_mut().flatten()),
            _ => {}
        }
    }
    let mut items: Vec<&mut Expr> = projection
        .iter_mut()
        .filter_map(|item| match item {
            SelectItem::UnnamedExpr(expr) | SelectItem::ExprWithAlias { expr, .. } => Some(expr),
            _ => None,
        })
        .collect();
    // What each item was before any is wrapped, and the wrapper each
    // wrapped item got: one per item, distinct from every other's, so two
    // items of one constant stay two keys.
    let original: Vec<Expr> = items.iter().map(|item| (**item).clone()).collect();
    let mut wrapped: Vec<Option<Expr>> = vec![None; items.len()];
    let mut wrappers = 0;
    // Each constant key as written, and the wrapper standing for it (for
    // GROUPING() arguments).
    let mut renamed: Vec<(Expr, Expr)> = Vec::new();
    for key in in_sets {
        // An integer names a select item by its position (a negative one
        // none, which DataFusion refuses as PostgreSQL does).
        if let Expr::UnaryOp { expr, .. } = &*key
            && matches!(expr.as_ref(), Expr::Value(value) if matches!(value.value, Value::Number(..)))
        {
            continue;
        }
        let position = match &*key {
            Expr::Value(value) => match &value.value {
                Value::Number(number, _) => Some(number.parse::<usize>().ok()),
                _ => None,
            },
            _ => None,
        };
        let at = match position {
            // One past the select list is left for DataFusion to refuse;
            // an item that calls a function (an aggregate, which PostgreSQL
            // refuses there) is left as DataFusion reads it.
            Some(position) => match position.and_then(|p| p.checked_sub(1)).filter(|at| *at < items.len() && !calls_anything(&original[*at])) {
                Some(at) if !is_constant(&original[at]) => {
                    *key = original[at].clone();
                    continue;
                }
                Some(at) => at,
                None => continue,
            },
            None if is_constant(key) => match original.iter().position(|item| item == key) {
                Some(at) => at,
                None => {
                    let wrapper = wrapper_for(key.clone(), &mut wrappers);
                    renamed.push((std::mem::replace(key, wrapper.clone()), wrapper));
                    continue;
                }
            },
            None => continue,
        };
        let wrapper = wrapped[at].get_or_insert_with(|| wrapper_for(original[at].clone(), &mut wrappers)).clone();
        renamed.push((original[at].clone(), wrapper.clone()));
        *key = wrapper;
    }
    for (at, wrapper) in wrapped.into_iter().enumerate() {
        if let Some(wrapper) = wrapper {
            *items[at] = wrapper;
        }
    }
    // GROUPING(c) names a key by its expression: the wrapper now.
    if !renamed.is_empty() {
        let mut grouping = GroupingArguments { renamed: &renamed };
        for item in items {
            let _ = item.visit(&mut grouping);
        }
        if let Some(having) = having {
            let _ = having.visit(&mut grouping);
        }
    }
}

/// `constant` as `coalesce(constant)`, with one more NULL argument for
/// each wrapper made before it, so that no two wrappers are equal.
fn wrapper_for(constant: Expr, made: &mut usize) -> Expr {
    let mut args = vec![constant];
    args.extend((0..*made).map(|_| Expr::Value(Value::Null.into())));
    *made += 1;
    crate::frontend::array_subquery::call("coalesce", args, Vec::new())
}

/// Rewrites the arguments of `grouping(...)` calls that name a wrapped
/// constant key.
struct GroupingArguments<'a> {
    renamed: &'a [(Expr, Expr)],
}

impl VisitorMut for GroupingArguments<'_> {
    type Break = ();

    fn pre_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        if let Expr::Function(function) = expr
            && function.name.to_string().eq_ignore_ascii_case("grouping")
            && let datafusion::sql::sqlparser::ast::FunctionArguments::List(list) = &mut function.args
        {
            for arg in &mut list.args {
                if let datafusion::sql::sqlparser::ast::FunctionArg::Unnamed(datafusion::sql::sqlparser::ast::FunctionArgExpr::Expr(arg)) = arg
                    && let Some((_, wrapper)) = self.renamed.iter().find(|(written, _)| written == arg)
                {
                    *arg = wrapper.clone();
                }
            }
        }
        ControlFlow::Continue(())
    }
}

/// Whether `expr` calls a function or holds a subquery.
fn calls_anything(expr: &Expr) -> bool {
    struct Calls;
    impl datafusion::sql::sqlparser::ast::Visitor for Calls {
        type Break = ();
        fn pre_visit_expr(&mut self, expr: &Expr) -> ControlFlow<()> {
            if matches!(expr, Expr::Function(_) | Expr::Subquery(_) | Expr::Exists { .. } | Expr::InSubquery { .. }) { ControlFlow::Break(()) } else { ControlFlow::Continue(()) }
        }
    }
    datafusion::sql::sqlparser::ast::Visit::visit(expr, &mut Calls).is_break()
}

/// Whether `expr` is a constant: literals under casts, signs, operators
/// and parentheses, with no column, function or subquery.
fn is_constant(expr: &Expr) -> bool {
    match expr {
        Expr::Value(_) | Expr::TypedString { .. } => true,
        Expr::Cast { expr, .. } | Expr::Nested(expr) => is_constant(expr),
        Expr::UnaryOp { op: UnaryOperator::Minus | UnaryOperator::Plus, expr } => is_constant(expr),
        Expr::BinaryOp { left, right, .. } => is_constant(left) && is_constant(right),
        _ => false,
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
        super::rewrite(&mut statement);
        statement.to_string()
    }

    #[test]
    fn empty_sets_are_no_keys_beside_the_others() {
        assert_eq!(rewritten("SELECT count(*) FROM t GROUP BY ()"), "SELECT count(*) FROM t GROUP BY GROUPING SETS (())");
        assert_eq!(rewritten("SELECT a, count(*) FROM t GROUP BY (), a, ()"), "SELECT a, count(*) FROM t GROUP BY a");
        assert_eq!(rewritten("SELECT a FROM t GROUP BY (a)"), "SELECT a FROM t GROUP BY (a)");
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

    #[test]
    fn constant_keys_of_grouping_sets_and_their_items_are_no_other_constant() {
        assert_eq!(
            rewritten("SELECT 1 AS c0 FROM t GROUP BY CUBE (1) HAVING count(*) <= 1"),
            "SELECT coalesce(1) AS c0 FROM t GROUP BY CUBE (coalesce(1)) HAVING count(*) <= 1"
        );
        assert_eq!(rewritten("SELECT a, count(*) FROM t GROUP BY ROLLUP (1)"), "SELECT a, count(*) FROM t GROUP BY ROLLUP (a)");
        assert_eq!(rewritten("SELECT a + 1 AS x FROM t GROUP BY GROUPING SETS ((1), ())"), "SELECT a + 1 AS x FROM t GROUP BY GROUPING SETS ((a + 1), ())");
        assert_eq!(
            rewritten("SELECT 'x', a, count(*) + 1 FROM t GROUP BY ROLLUP ('x', a), CAST(1.5 AS DECIMAL(10,2))"),
            "SELECT coalesce('x'), a, count(*) + 1 FROM t GROUP BY ROLLUP (coalesce('x'), a), CAST(1.5 AS DECIMAL(10,2))"
        );
        assert_eq!(
            rewritten("SELECT 1 AS c0, count(*) + 1 FROM t GROUP BY GROUPING SETS ((1), (1), ())"),
            "SELECT coalesce(1) AS c0, count(*) + 1 FROM t GROUP BY GROUPING SETS ((coalesce(1)), (coalesce(1)), ())"
        );
        assert_eq!(
            rewritten("SELECT 1 AS x, 1 AS y, grouping(1) FROM t GROUP BY CUBE (1, 2)"),
            "SELECT coalesce(1) AS x, coalesce(1, NULL) AS y, grouping(coalesce(1)) FROM t GROUP BY CUBE (coalesce(1), coalesce(1, NULL))"
        );
        for unchanged in ["SELECT *, 5 AS k FROM t GROUP BY a, b, ROLLUP (1)", "SELECT a FROM t GROUP BY GROUPING SETS ((a, -2), ()) HAVING count(*) > -2", "SELECT avg(1) AS c0 FROM t GROUP BY CUBE (1)", "SELECT 1 FROM t GROUP BY 1 HAVING count(*) > 1", "SELECT a FROM t GROUP BY CUBE (a, 3)"] {
            assert_eq!(rewritten(unchanged), unchanged);
        }
    }
}
