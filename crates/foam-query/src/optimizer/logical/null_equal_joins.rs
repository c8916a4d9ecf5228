//! Keeps `=` from becoming a NULL-equal join key. DataFusion 55 turns a join
//! condition made only of `l IS NOT DISTINCT FROM r` into keys compared with
//! NULL equal to NULL (`NullEquality::NullEqualsNull`, one flag for every key).
//! Two of its rules then add `=` conditions to those keys under the same
//! flag: `ExtractEquijoinPredicate` when a filter moves into the join (a WHERE
//! over a LEFT JOIN that became an inner join) and `EliminateCrossJoin` when
//! it merges a WHERE over inner joins into their keys. `NULL = NULL` then
//! passes: a correlated subquery unnested on its outer values
//! (`unnest_subqueries.rs`) and compared with `=` kept rows whose answer and
//! value were both NULL (fuzz seed 43061: 12 rows where PostgreSQL returns none).
//!
//! Run just before `ExtractEquijoinPredicate`, this rule writes each
//! `IS NOT DISTINCT FROM` between a join's two sides as two plain
//! equalities, so no join needs NULLs equal:
//!
//! ```text
//!  l IS NOT DISTINCT FROM r
//!    ─▶ (l IS NULL) = (r IS NULL) AND coalesce(l, z) = coalesce(r, z)     z: the type's zero
//! ```
//! A type without a zero value (nested types) is left as it was.
//!
//! Where one side cannot be NULL, DataFusion's simplifier later folds its
//! `IS NULL` to `false`, leaving a join key `false = (r IS NULL)` with no
//! column on one side; `EliminateCrossJoin` drops such keys when it rebuilds
//! inner joins, and `NULL` matched the zero (seed 58090: a count of 0 joined
//! every row whose value was NULL). So [`ConstantJoinKeys`], run before that
//! rule, moves any key a side of which reads no column into the join's
//! filter, where it still holds (`false = (r IS NULL)` then simplifies to
//! `r IS NOT NULL`).

use datafusion::common::tree_node::Transformed;
use datafusion::common::{DFSchema, NullEquality, Result, ScalarValue};
use datafusion::logical_expr::utils::{conjunction, split_conjunction};
use datafusion::logical_expr::{BinaryExpr, Expr, ExprSchemable, Join, LogicalPlan, Operator, lit};
use datafusion::optimizer::optimizer::ApplyOrder;
use datafusion::optimizer::{OptimizerConfig, OptimizerRule};

/// The name of the DataFusion rule this one runs before.
pub const EXTRACT_EQUIJOIN_RULE: &str = "extract_equijoin_predicate";

/// The name of the DataFusion rule that drops join keys without a column
/// on a side, which [`ConstantJoinKeys`] runs before.
pub const ELIMINATE_CROSS_JOIN_RULE: &str = "eliminate_cross_join";

#[derive(Debug, Default)]
pub struct NullEqualJoinKeys;

impl OptimizerRule for NullEqualJoinKeys {
    fn name(&self) -> &str {
        "foam_null_equal_join_keys"
    }

    fn apply_order(&self) -> Option<ApplyOrder> {
        Some(ApplyOrder::BottomUp)
    }

    fn supports_rewrite(&self) -> bool {
        true
    }

    fn rewrite(&self, plan: LogicalPlan, _config: &dyn OptimizerConfig) -> Result<Transformed<LogicalPlan>> {
        let LogicalPlan::Join(join) = plan else { return Ok(Transformed::no(plan)) };
        let Some(filter) = &join.filter else { return Ok(Transformed::no(LogicalPlan::Join(join))) };
        let mut changed = false;
        let mut conjuncts = Vec::new();
        for conjunct in split_conjunction(filter) {
            match as_equalities(conjunct, join.left.schema(), join.right.schema()) {
                Some(equalities) => {
                    conjuncts.extend(equalities);
                    changed = true;
                }
                None => conjuncts.push(conjunct.clone()),
            }
        }
        if !changed {
            return Ok(Transformed::no(LogicalPlan::Join(join)));
        }
        let mut join = join;
        let on = std::mem::take(&mut join.on);
        rebuilt(join, on, conjunction(conjuncts))
    }
}

/// `l IS NOT DISTINCT FROM r` (`l` of one side, `r` of the other) as two
/// equalities that never compare NULLs; `None` for any other conjunct.
fn as_equalities(conjunct: &Expr, left: &DFSchema, right: &DFSchema) -> Option<[Expr; 2]> {
    let Expr::BinaryExpr(BinaryExpr { left: l, op: Operator::IsNotDistinctFrom, right: r }) = conjunct else { return None };
    let reads = |e: &Expr, schema: &DFSchema| {
        let columns = e.column_refs();
        !columns.is_empty() && columns.iter().all(|c| schema.has_column(c))
    };
    let l_schema = if reads(l, left) && reads(r, right) {
        left
    } else if reads(l, right) && reads(r, left) {
        right
    } else {
        return None;
    };
    let zero = ScalarValue::new_default(&l.get_type(l_schema).ok()?).ok()?;
    let nulls = l.clone().is_null().eq(r.clone().is_null());
    let values = coalesce(l.as_ref().clone(), zero.clone()).eq(coalesce(r.as_ref().clone(), zero));
    Some([nulls, values])
}

fn coalesce(expr: Expr, zero: ScalarValue) -> Expr {
    datafusion::functions::expr_fn::coalesce(vec![expr, lit(zero)])
}

/// Moves join keys one side of which reads no column into the join's
/// filter (see the module documentation).
#[derive(Debug, Default)]
pub struct ConstantJoinKeys;

impl OptimizerRule for ConstantJoinKeys {
    fn name(&self) -> &str {
        "foam_constant_join_keys"
    }

    fn apply_order(&self) -> Option<ApplyOrder> {
        Some(ApplyOrder::BottomUp)
    }

    fn supports_rewrite(&self) -> bool {
        true
    }

    fn rewrite(&self, plan: LogicalPlan, _config: &dyn OptimizerConfig) -> Result<Transformed<LogicalPlan>> {
        let LogicalPlan::Join(join) = plan else { return Ok(Transformed::no(plan)) };
        let constant = |(l, r): &(Expr, Expr)| l.column_refs().is_empty() || r.column_refs().is_empty();
        // A null-aware anti join (NOT IN) needs its key where it is.
        if join.null_aware || !join.on.iter().any(constant) {
            return Ok(Transformed::no(LogicalPlan::Join(join)));
        }
        let mut join = join;
        let (moved, kept): (Vec<(Expr, Expr)>, Vec<(Expr, Expr)>) = std::mem::take(&mut join.on).into_iter().partition(constant);
        let operator = match join.null_equality {
            NullEquality::NullEqualsNothing => Operator::Eq,
            NullEquality::NullEqualsNull => Operator::IsNotDistinctFrom,
        };
        let conditions = moved.into_iter().map(|(l, r)| Expr::BinaryExpr(BinaryExpr::new(Box::new(l), operator, Box::new(r))));
        let filter = conjunction(join.filter.take().into_iter().chain(conditions));
        rebuilt(join, kept, filter)
    }
}

/// `join` with the keys `on` and the filter `filter`, its schema recomputed.
fn rebuilt(join: Join, on: Vec<(Expr, Expr)>, filter: Option<Expr>) -> Result<Transformed<LogicalPlan>> {
    let rewritten =
        Join::try_new(join.left, join.right, on, filter, join.join_type, join.join_constraint, join.null_equality, join.null_aware)?;
    Ok(Transformed::yes(LogicalPlan::Join(rewritten)))
}

#[cfg(test)]
mod tests {
    use datafusion::prelude::SessionConfig;

    use crate::optimizer::logical::rule_tests::{answer, table};

    /// The answers PostgreSQL 15 gives for the same rows, under FoamDB's
    /// rules; DataFusion's own give the NULL-equal answer.
    #[tokio::test]
    async fn an_equality_moved_into_a_null_safe_join_keeps_nulls_unequal() {
        let with_rules = |rules| {
            let mut builder = datafusion::execution::SessionStateBuilder::new().with_default_features().with_config(SessionConfig::new());
            if let Some(rules) = rules {
                builder = builder.with_optimizer_rules(rules);
            }
            let ctx = datafusion::prelude::SessionContext::new_with_state(builder.build());
            let rows = [[Some(1), None], [None, None], [Some(2), Some(2)], [None, Some(3)]];
            ctx.register_table("l", table(["a", "b"], &rows)).expect("l");
            ctx.register_table("r", table(["a", "b"], &rows)).expect("r");
            ctx
        };
        let ctx = with_rules(Some(crate::optimizer::logical_rules()));
        let filtered = "SELECT l.a, l.b FROM l LEFT JOIN r ON l.a IS NOT DISTINCT FROM r.a WHERE l.b = r.b";
        let cases: &[(&str, &[&str])] = &[
            // NULL-safe on a, `=` on b: the rows whose b is NULL never match.
            (filtered, &["2 | 2", " | 3"]),
            ("SELECT count(*) FROM l JOIN r ON l.a IS NOT DISTINCT FROM r.a WHERE l.b = r.b", &["2"]),
            ("SELECT count(*) FROM l JOIN r ON l.a IS NOT DISTINCT FROM r.a", &["6"]),
            ("SELECT count(*) FROM l JOIN r ON (l.a IS NOT DISTINCT FROM r.a) AND (l.b IS NOT DISTINCT FROM r.b)", &["4"]),
            // A side that cannot be NULL (a count) meets only non-NULL values
            // (seed 58090: a NULL r.b matched a count of 0).
            ("SELECT count(*) FROM (SELECT count(*) - 4 AS z FROM l) AS c JOIN r ON c.z IS NOT DISTINCT FROM r.b", &["0"]),
            ("SELECT count(*) FROM (SELECT count(*) - 2 AS two FROM l) AS c JOIN r ON c.two IS NOT DISTINCT FROM r.b", &["1"]),
            ("SELECT count(*) FROM (SELECT count(*) - 4 AS z FROM l) AS c JOIN r ON r.b IS NOT DISTINCT FROM c.z", &["0"]),
        ];
        for (sql, expected) in cases {
            let got = answer(&ctx, sql).await;
            let mut want: Vec<String> = expected.iter().map(|s| s.to_string()).collect();
            want.sort();
            assert_eq!(&got[1..], want.as_slice(), "{sql}");
        }
        let plain = answer(&with_rules(None), filtered).await;
        assert_eq!(plain.len() - 1, 4, "DataFusion 55 alone matches the NULL b's too: {plain:?}");
    }
}
