//! Runs a semi or anti join on the input its keys come from, below inner
//! joins with whole tables: a logical optimizer rule run on the coordinating
//! node.
//!
//! TPC-H Q18 keeps the orders whose lineitems sum to more than 300 (57 of
//! 1.5 million at SF1) with `o_orderkey IN (subquery)`. DataFusion decorrelates
//! that into a semi join above the FROM clause's joins, so every order is
//! first joined with its customer and its lineitems (six million rows, on a
//! cluster with customers broadcast to every node) and only then filtered. A
//! semi (or anti) join decides each row by the columns its condition reads;
//! when those all come from one input of an inner join, it decides the same
//! for that input's rows before the join:
//!
//! ```text
//!   (X ⋈ B) ⋉ S ON x.k = s.k      ─▶   (X ⋉ S ON x.k = s.k) ⋈ B
//! ```
//! and it keeps the schema (a semi join returns its left input's columns).
//! It moves only past an inner join whose other input `B` is a whole table
//! (no filter), as a row of `X` then usually meets rows of `B` (a foreign
//! key): below a join that filters (TPC-H Q21's supplier of one nation) it
//! would test rows that join would have dropped. Left semi and anti joins
//! move (NOT IN's null-aware anti join too: each row's answer depends only on
//! its own key and the subquery); projections of plain columns are passed
//! through. `SET foam.early_semi_joins = false` turns the rule off.

use std::sync::Arc;

use datafusion::common::Result;
use datafusion::common::tree_node::Transformed;
use datafusion::logical_expr::{Join, JoinType, LogicalPlan, Projection};
use datafusion::optimizer::optimizer::ApplyOrder;
use datafusion::optimizer::{OptimizerConfig, OptimizerRule};

use crate::options::FoamOptions;
use crate::optimizer::logical::plan_shape::{columns_only, unfiltered_table, with_input};

/// The optimizer rule (see the module documentation).
#[derive(Debug, Default)]
pub struct EarlySemiJoin;

impl OptimizerRule for EarlySemiJoin {
    fn name(&self) -> &str {
        "foam_early_semi_join"
    }

    fn apply_order(&self) -> Option<ApplyOrder> {
        Some(ApplyOrder::BottomUp)
    }

    fn supports_rewrite(&self) -> bool {
        true
    }

    fn rewrite(&self, plan: LogicalPlan, config: &dyn OptimizerConfig) -> Result<Transformed<LogicalPlan>> {
        let LogicalPlan::Join(semi) = &plan else { return Ok(Transformed::no(plan)) };
        if !matches!(semi.join_type, JoinType::LeftSemi | JoinType::LeftAnti)
            || config.options().extensions.get::<FoamOptions>().is_some_and(|o| !o.early_semi_joins)
        {
            return Ok(Transformed::no(plan));
        }
        match push_into(&semi.left, semi)? {
            Some(moved) => Ok(Transformed::yes(moved)),
            None => Ok(Transformed::no(plan)),
        }
    }
}

/// `target ⋉ S` with the semi join moved below `target`'s inner joins, or
/// `None` when it cannot move past `target`.
fn push_into(target: &Arc<LogicalPlan>, semi: &Join) -> Result<Option<LogicalPlan>> {
    match target.as_ref() {
        LogicalPlan::Projection(projection) if columns_only(projection) => {
            let Some(below) = push_into(&projection.input, semi)? else { return Ok(None) };
            Ok(Some(LogicalPlan::Projection(Projection::try_new(projection.expr.clone(), Arc::new(below))?)))
        }
        LogicalPlan::Join(join) if join.join_type == JoinType::Inner => {
            for into_left in [true, false] {
                let (input, other) = if into_left { (&join.left, &join.right) } else { (&join.right, &join.left) };
                if !decided_by(semi, input) || !unfiltered_table(other) {
                    continue;
                }
                // `input ⋉ S`: the semi join with `input` for its left side.
                let moved = match push_into(input, semi)? {
                    Some(deeper) => deeper,
                    None => LogicalPlan::Join(with_input(semi, true, Arc::clone(input))?),
                };
                return Ok(Some(LogicalPlan::Join(with_input(join, into_left, Arc::new(moved))?)));
            }
            Ok(None)
        }
        _ => Ok(None),
    }
}

/// True when every column of the semi join's condition that is not the
/// subquery's is a column of `input`.
fn decided_by(semi: &Join, input: &LogicalPlan) -> bool {
    let subquery = semi.right.schema();
    let mut columns = semi.on.iter().flat_map(|(l, r)| [l, r]).flat_map(|e| e.column_refs()).collect::<Vec<_>>();
    if let Some(filter) = &semi.filter {
        columns.extend(filter.column_refs());
    }
    let outer: Vec<_> = columns.into_iter().filter(|c| !subquery.has_column(c)).collect();
    !outer.is_empty() && outer.iter().all(|c| input.schema().has_column(c))
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::prelude::{SessionConfig, SessionContext};

    use crate::optimizer::logical::rule_tests::{self, below, plan, table};

    /// DataFusion's rules, then `EarlySemiJoin` when `with_rule`, over
    /// `x (k, b)` joined to `b (b, v)` and `b` to `c (v, w)`, with NULL,
    /// duplicate and unmatched keys; the subqueries read `s (k, j)`
    /// (duplicate keys, a NULL `j`), `n (k, j)` (a NULL `k`) and the empty
    /// `e (k, j)`.
    fn context(config: SessionConfig, with_rule: bool) -> SessionContext {
        let ctx = rule_tests::session(config, with_rule.then(|| Arc::new(EarlySemiJoin) as _));
        let tables = [
            ("x", table(["k", "b"], &[[Some(1), Some(1)], [Some(2), Some(1)], [Some(2), Some(2)], [Some(3), None], [None, Some(2)], [Some(4), Some(9)], [Some(5), Some(3)], [Some(7), Some(2)]])),
            ("b", table(["b", "v"], &[[Some(1), Some(10)], [Some(2), Some(20)], [Some(2), Some(21)], [None, Some(30)], [Some(3), None]])),
            ("c", table(["v", "w"], &[[Some(10), Some(1)], [Some(20), Some(2)], [Some(21), None], [None, Some(4)], [Some(20), Some(5)]])),
            ("s", table(["k", "j"], &[[Some(1), Some(10)], [Some(2), Some(20)], [Some(2), Some(21)], [Some(7), Some(1)], [Some(4), None], [Some(8), Some(3)]])),
            ("n", table(["k", "j"], &[[Some(1), Some(10)], [None, Some(20)]])),
            ("e", table(["k", "j"], &[])),
        ];
        for (name, table) in tables {
            ctx.register_table(name, table).expect("register");
        }
        ctx
    }

    /// Asserts each query answers the same with the rule as without it, and
    /// that the rule rewrote the plan exactly where marked `true`.
    async fn assert_same_answers(queries: &[(&str, bool)]) {
        rule_tests::assert_same_answers(&context(SessionConfig::new(), true), &context(SessionConfig::new(), false), queries).await;
    }

    #[tokio::test]
    async fn moves_semi_and_anti_joins_below_an_inner_join_to_the_input_their_keys_come_from() {
        let ctx = context(SessionConfig::new(), true);
        // (query, the semi or anti join, the table it moves onto, the other table)
        let cases = [
            ("SELECT x.k, b.v FROM x JOIN b ON x.b = b.b WHERE x.k IN (SELECT k FROM s)", "LeftSemi Join: x.k = __correlated_sq_1.k", "TableScan: x", "TableScan: b"),
            ("SELECT x.k, b.v FROM x JOIN b ON x.b = b.b WHERE x.k NOT IN (SELECT k FROM s)", "LeftAnti Join: x.k = __correlated_sq_1.k null_aware", "TableScan: x", "TableScan: b"),
            ("SELECT x.k, b.v FROM x JOIN b ON x.b = b.b WHERE NOT EXISTS (SELECT 1 FROM s WHERE s.k = x.k AND s.j > x.b)", "LeftAnti Join: x.k = __correlated_sq_1.k Filter: __correlated_sq_1.j > x.b", "TableScan: x", "TableScan: b"),
            ("SELECT x.k, b.v FROM x JOIN b ON x.b = b.b WHERE b.v IN (SELECT j FROM s)", "LeftSemi Join: b.v = __correlated_sq_1.j", "TableScan: b", "TableScan: x"),
        ];
        for (sql, semi, onto, other) in cases {
            let shown = plan(&ctx, sql).await;
            assert!(below(&shown, "Inner Join: x.b = b.b", semi), "{sql}: the join moved below the inner join:\n{shown}");
            assert!(below(&shown, semi, onto) && !below(&shown, semi, other), "{sql}: onto {onto} alone:\n{shown}");
        }
        // Through a projection and a second inner join, down to x.
        let sql = "SELECT x.k, b.v, c.w FROM x JOIN b ON x.b = b.b JOIN c ON b.v = c.v WHERE x.k IN (SELECT k FROM s)";
        let shown = plan(&ctx, sql).await;
        assert!(below(&shown, "Inner Join: b.v = c.v", "Inner Join: x.b = b.b") && below(&shown, "Inner Join: x.b = b.b", "LeftSemi Join"), "{shown}");
        assert!(below(&shown, "LeftSemi Join", "TableScan: x") && !below(&shown, "LeftSemi Join", "TableScan: b"), "{shown}");
    }

    #[tokio::test]
    async fn leaves_a_join_with_a_filtered_table_an_outer_join_and_a_condition_on_both_sides_alone() {
        let with = context(SessionConfig::new(), true);
        let without = context(SessionConfig::new(), false);
        for sql in [
            "SELECT x.k, b.v FROM x JOIN b ON x.b = b.b WHERE b.v > 10 AND x.k IN (SELECT k FROM s)",
            "SELECT x.k, b.v FROM x LEFT JOIN b ON x.b = b.b WHERE x.k IN (SELECT k FROM s)",
            "SELECT x.k, b.v FROM x JOIN b ON x.b = b.b WHERE EXISTS (SELECT 1 FROM s WHERE s.k = x.k AND s.j = b.v)",
            "SELECT x.k, b.v FROM x JOIN b ON x.b = b.b WHERE x.k IN (SELECT k FROM s) OR b.v > 20",
        ] {
            let shown = plan(&with, sql).await;
            assert_eq!(shown, plan(&without, sql).await, "{sql}");
            assert!(!below(&shown, "Join: x.b = b.b", "Join: "), "{sql}:\n{shown}");
        }
        let off = context(SessionConfig::new().with_option_extension(FoamOptions::default()), true);
        off.sql("SET foam.early_semi_joins = false").await.expect("set").collect().await.expect("set");
        let sql = "SELECT x.k, b.v FROM x JOIN b ON x.b = b.b WHERE x.k IN (SELECT k FROM s)";
        assert_eq!(plan(&off, sql).await, plan(&without, sql).await, "SET foam.early_semi_joins = false turns the rule off");
    }

    #[tokio::test]
    async fn answers_the_same_with_semi_and_anti_joins_below_inner_joins() {
        assert_same_answers(&[
            ("SELECT x.k, b.v FROM x JOIN b ON x.b = b.b WHERE x.k IN (SELECT k FROM s)", true),
            ("SELECT x.k, b.v FROM x JOIN b ON x.b = b.b WHERE x.k IN (SELECT k FROM n)", true),
            ("SELECT x.k, b.v FROM x JOIN b ON x.b = b.b WHERE x.k IN (SELECT k FROM e)", true),
            ("SELECT x.k, b.v FROM x JOIN b ON x.b = b.b WHERE x.k NOT IN (SELECT k FROM s)", true),
            ("SELECT x.k, b.v FROM x JOIN b ON x.b = b.b WHERE x.k NOT IN (SELECT k FROM n)", true),
            ("SELECT x.k, b.v FROM x JOIN b ON x.b = b.b WHERE x.k NOT IN (SELECT k FROM e)", true),
            ("SELECT x.k, b.v FROM x JOIN b ON x.b = b.b WHERE EXISTS (SELECT 1 FROM s WHERE s.k = x.k)", true),
            ("SELECT x.k, b.v FROM x JOIN b ON x.b = b.b WHERE NOT EXISTS (SELECT 1 FROM n WHERE n.k = x.k)", true),
            ("SELECT x.k, b.v FROM x JOIN b ON x.b = b.b WHERE NOT EXISTS (SELECT 1 FROM s WHERE s.k = x.k AND s.j > x.b)", true),
            ("SELECT x.k, b.v FROM x JOIN b ON x.b = b.b WHERE EXISTS (SELECT 1 FROM s WHERE s.k = x.k AND s.j >= x.b * 10)", true),
            ("SELECT x.k, b.v FROM x JOIN b ON x.b = b.b WHERE b.v IN (SELECT j FROM s)", true),
            ("SELECT x.k, b.v FROM x JOIN b ON x.b = b.b WHERE b.v NOT IN (SELECT j FROM s)", true),
            ("SELECT x.k, b.v FROM x JOIN b ON x.b = b.b WHERE b.v NOT IN (SELECT j FROM n)", true),
            ("SELECT x.k, b.v FROM x JOIN b ON x.b = b.b WHERE x.k IN (SELECT k FROM s) AND b.v IN (SELECT j FROM s)", true),
            ("SELECT x.k, b.v, c.w FROM x JOIN b ON x.b = b.b JOIN c ON b.v = c.v WHERE x.k IN (SELECT k FROM s)", true),
            ("SELECT x.k, b.v, c.w FROM x JOIN b ON x.b = b.b JOIN c ON b.v = c.v WHERE NOT EXISTS (SELECT 1 FROM s WHERE s.k = x.k AND s.j > 20)", true),
            ("SELECT x.k, b.v, c.w FROM x JOIN b ON x.b = b.b JOIN c ON b.v = c.v WHERE c.w IN (SELECT k FROM s)", false),
            ("SELECT x.k, b.v FROM x JOIN b ON x.b = b.b AND x.k < b.v WHERE x.k IN (SELECT k FROM s)", true),
            ("SELECT x.k, b.v FROM x CROSS JOIN b WHERE x.k NOT IN (SELECT k FROM s)", true),
            ("SELECT x.k, b.v FROM x JOIN b USING (b) WHERE x.k IN (SELECT k FROM s)", true),
            ("SELECT x.k, b.v FROM x JOIN b ON x.b = b.b WHERE x.k > 1 AND x.k IN (SELECT k FROM s)", true),
            ("SELECT p.k, q.b FROM x AS p JOIN x AS q ON p.b = q.k WHERE p.k NOT IN (SELECT k FROM s)", true),
            ("SELECT b.v, count(*) FROM x JOIN b ON x.b = b.b WHERE x.k IN (SELECT k FROM s) GROUP BY b.v", true),
            ("SELECT x.k, b.v FROM x JOIN b ON x.b = b.b WHERE b.v > 10 AND x.k IN (SELECT k FROM s)", false),
            ("SELECT x.k, b.v FROM x LEFT JOIN b ON x.b = b.b WHERE x.k NOT IN (SELECT k FROM s)", false),
        ])
        .await;
    }
}
