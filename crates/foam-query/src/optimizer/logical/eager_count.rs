//! Counts the rows of a join's far side before the join, not after: a
//! logical optimizer rule run on the coordinating node.
//!
//! ```text
//!   Aggregate [L.g..] count(R.x)          Projection [L.g.., coalesce(s, 0) AS "count(R.x)"]
//!     L LEFT|INNER JOIN R ON L.k = R.k  ─▶   Aggregate [L.g..] sum(c) AS s
//!                                              L LEFT|INNER JOIN (Aggregate [R.k] count(R.x) AS c) ON L.k = R.k
//! ```
//! Each L row meets at most one pre-counted row (they are grouped by the join
//! keys, and NULL keys match nothing either way), whose count is the number
//! of R rows with a non-NULL `x` it met before; an L row of a left join that
//! met none gets NULL, which `sum` skips and `coalesce` (as a CASE) turns into the 0 the
//! original count gives. So the answer is the same, and on a cluster the
//! counting runs where R's rows are stored: what crosses the network to L's
//! owners is one row per distinct key and node instead of every R row. TPC-H
//! Q13 counts each customer's orders this way: a customer has about ten.
//!
//! Only plain `count(column of R)` (no DISTINCT, FILTER or ORDER BY) grouped
//! by columns of L over an equi-join without other conditions is rewritten;
//! `count(*)` of a left join counts unmatched L rows as one and is left alone.
//! `SET foam.eager_counts = false` turns the rule off.

use std::sync::Arc;

use datafusion::common::tree_node::Transformed;
use datafusion::common::{Column, NullEquality, Result};
use datafusion::functions_aggregate::expr_fn::count;
use datafusion::logical_expr::{Aggregate, Expr, Join, JoinType, LogicalPlan, LogicalPlanBuilder, lit, when};
use datafusion::optimizer::optimizer::ApplyOrder;
use datafusion::optimizer::{OptimizerConfig, OptimizerRule};

use crate::optimizer::logical::checked_arithmetic::sum;
use crate::options::FoamOptions;
use crate::optimizer::logical::plan_shape::columns_only;

/// Prefix of the pre-counts' column names (internal; never in a result).
pub(crate) const PRE_COUNT_PREFIX: &str = "__foam_pre_count_";

/// The optimizer rule (see the module documentation).
#[derive(Debug, Default)]
pub struct EagerCount;

impl OptimizerRule for EagerCount {
    fn name(&self) -> &str {
        "foam_eager_count"
    }

    fn apply_order(&self) -> Option<ApplyOrder> {
        Some(ApplyOrder::BottomUp)
    }

    fn supports_rewrite(&self) -> bool {
        true
    }

    fn rewrite(&self, plan: LogicalPlan, config: &dyn OptimizerConfig) -> Result<Transformed<LogicalPlan>> {
        if config.options().extensions.get::<FoamOptions>().is_some_and(|o| !o.eager_counts) {
            return Ok(Transformed::no(plan));
        }
        let LogicalPlan::Aggregate(aggregate) = &plan else { return Ok(Transformed::no(plan)) };
        match count_before_join(aggregate)? {
            Some(rewritten) => Ok(Transformed::yes(rewritten)),
            None => Ok(Transformed::no(plan)),
        }
    }
}

/// The join under `aggregate`, directly or under a projection of columns.
fn join_below(aggregate: &Aggregate) -> Option<&Join> {
    match aggregate.input.as_ref() {
        LogicalPlan::Join(join) => Some(join),
        LogicalPlan::Projection(projection) if columns_only(projection) => {
            match projection.input.as_ref() {
                LogicalPlan::Join(join) => Some(join),
                _ => None,
            }
        }
        _ => None,
    }
}

/// The column `count` counts, when `expr` is a plain `count(column)`.
fn counted_column(expr: &Expr) -> Option<&Column> {
    let Expr::AggregateFunction(function) = expr else { return None };
    let params = &function.params;
    if function.func.name() != "count" || params.distinct || params.filter.is_some() || !params.order_by.is_empty() {
        return None;
    }
    match params.args.as_slice() {
        [Expr::Column(column)] => Some(column),
        _ => None,
    }
}

fn count_before_join(aggregate: &Aggregate) -> Result<Option<LogicalPlan>> {
    let Some(join) = join_below(aggregate) else { return Ok(None) };
    if !matches!(join.join_type, JoinType::Inner | JoinType::Left)
        || join.filter.is_some()
        || join.null_equality != NullEquality::NullEqualsNothing
        || join.null_aware
        || join.on.is_empty()
    {
        return Ok(None);
    }
    let (left, right) = (join.left.schema(), join.right.schema());
    let right_keys: Option<Vec<Expr>> = join
        .on
        .iter()
        .map(|(_, r)| match r {
            Expr::Column(c) if right.has_column(c) => Some(r.clone()),
            _ => None,
        })
        .collect();
    let Some(right_keys) = right_keys else { return Ok(None) };
    if !aggregate.group_expr.iter().all(|g| matches!(g, Expr::Column(c) if left.has_column(c))) {
        return Ok(None);
    }
    let counted: Option<Vec<&Column>> = aggregate
        .aggr_expr
        .iter()
        .map(|e| counted_column(e).filter(|c| right.has_column(c) && !left.has_column(c)))
        .collect();
    let Some(counted) = counted.filter(|c| !c.is_empty()) else { return Ok(None) };

    let pre_counts: Vec<Expr> = counted
        .iter()
        .enumerate()
        .map(|(i, column)| count(Expr::Column((*column).clone())).alias(format!("{PRE_COUNT_PREFIX}{i}")))
        .collect();
    let counted_right = LogicalPlanBuilder::from(Arc::clone(&join.right)).aggregate(right_keys, pre_counts)?.build()?;
    let joined = Join::try_new(
        Arc::clone(&join.left),
        Arc::new(counted_right),
        join.on.clone(),
        None,
        join.join_type,
        join.join_constraint,
        join.null_equality,
        false,
    )?;
    let sums: Vec<Expr> = (0..counted.len())
        .map(|i| sum(Expr::Column(Column::new_unqualified(format!("{PRE_COUNT_PREFIX}{i}")))).alias(format!("{PRE_COUNT_PREFIX}{i}")))
        .collect();
    let summed = LogicalPlanBuilder::from(LogicalPlan::Join(joined)).aggregate(aggregate.group_expr.clone(), sums)?.build()?;

    // The original output: the group columns as they were, each count as the
    // sum of its pre-counts (0 where there were none), under its own name.
    let groups = aggregate.group_expr.len();
    let mut output = Vec::with_capacity(aggregate.schema.fields().len());
    for (i, (qualifier, field)) in aggregate.schema.iter().enumerate() {
        let expr = if i < groups {
            Expr::Column(summed.schema().columns()[i].clone())
        } else {
            let pre = Expr::Column(Column::new_unqualified(format!("{PRE_COUNT_PREFIX}{}", i - groups)));
            // coalesce(pre, 0) as the CASE it stands for: DataFusion's
            // coalesce runs only once simplified into a CASE, and this rule
            // may run after the last simplification (seed 30028 q142:
            // "coalesce should have been simplified to case", XX000).
            when(pre.clone().is_not_null(), pre).otherwise(lit(0i64))?
        };
        output.push(expr.alias_qualified(qualifier.cloned(), field.name()));
    }
    Ok(Some(LogicalPlanBuilder::from(summed).project(output)?.build()?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::prelude::{SessionConfig, SessionContext};

    use crate::optimizer::logical::rule_tests::{self, below, plan, table};

    /// DataFusion's rules, then `EagerCount` when `with_rule`, over
    /// `l (k, g)` and `r (k, x)` (NULL, duplicate and unmatched keys, NULL
    /// `g` and `x`, pairs `(k, g)` that equal pairs `(k, x)`) and the empty
    /// `e (k, x)`.
    fn context(config: SessionConfig, with_rule: bool) -> SessionContext {
        let ctx = rule_tests::session(config, with_rule.then(|| Arc::new(EagerCount) as _));
        let l = table(["k", "g"], &[[Some(1), Some(10)], [Some(1), Some(10)], [Some(2), Some(20)], [Some(3), Some(10)], [None, Some(20)], [Some(5), None], [None, None], [Some(2), Some(30)]]);
        let r = table(["k", "x"], &[[Some(1), Some(10)], [Some(1), None], [Some(1), Some(101)], [Some(2), None], [None, Some(7)], [Some(4), Some(8)], [Some(2), Some(20)], [Some(3), None], [Some(2), Some(20)]]);
        ctx.register_table("l", l).expect("register");
        ctx.register_table("r", r).expect("register");
        ctx.register_table("e", table(["k", "x"], &[])).expect("register");
        ctx
    }

    /// Asserts each query answers the same with the rule as without it, and
    /// that the rule rewrote the plan exactly where marked `true`.
    async fn assert_same_answers(queries: &[(&str, bool)]) {
        rule_tests::assert_same_answers(&context(SessionConfig::new(), true), &context(SessionConfig::new(), false), queries).await;
    }

    #[tokio::test]
    async fn counts_per_join_key_before_a_left_or_inner_join() {
        let ctx = context(SessionConfig::new(), true);
        for join in ["Left", "Inner"] {
            let sql = format!("SELECT l.g, count(r.x) FROM l {} JOIN r ON l.k = r.k GROUP BY l.g", join.to_uppercase());
            let shown = plan(&ctx, &sql).await;
            let join_line = format!("{join} Join: l.k = r.k");
            assert!(below(&shown, &join_line, "Aggregate: groupBy=[[r.k]], aggr=[[count(r.x) AS __foam_pre_count_0]]"), "r is counted per key below the join:\n{shown}");
            assert!(below(&shown, "Aggregate: groupBy=[[l.g]], aggr=[[sum(__foam_pre_count_0) AS __foam_pre_count_0]]", &join_line), "the counts are summed per group above it:\n{shown}");
            assert!(shown.starts_with("Projection: l.g AS g, CASE WHEN __foam_pre_count_0 IS NOT NULL THEN __foam_pre_count_0 ELSE Int64(0) END AS count(r.x)"), "{shown}");
        }
    }

    #[tokio::test]
    async fn leaves_other_joins_counts_and_conditions_and_a_switched_off_session_alone() {
        let with = context(SessionConfig::new(), true);
        let without = context(SessionConfig::new(), false);
        for sql in [
            "SELECT l.g, count(r.x) FROM l RIGHT JOIN r ON l.k = r.k GROUP BY l.g",
            "SELECT l.g, count(r.x) FROM l FULL JOIN r ON l.k = r.k GROUP BY l.g",
            "SELECT l.g, count(*) FROM l LEFT JOIN r ON l.k = r.k GROUP BY l.g",
            "SELECT l.g, count(DISTINCT r.x) FROM l LEFT JOIN r ON l.k = r.k GROUP BY l.g",
            "SELECT l.g, count(r.x) FILTER (WHERE r.x > 8) FROM l LEFT JOIN r ON l.k = r.k GROUP BY l.g",
            "SELECT l.g, count(r.x), sum(r.x) FROM l LEFT JOIN r ON l.k = r.k GROUP BY l.g",
            "SELECT l.g, count(l.k) FROM l LEFT JOIN r ON l.k = r.k GROUP BY l.g",
            "SELECT r.x, count(r.k) FROM l LEFT JOIN r ON l.k = r.k GROUP BY r.x",
            "SELECT l.g, count(r.x) FROM l LEFT JOIN r ON l.k = r.k AND r.x > l.g GROUP BY l.g",
        ] {
            let shown = plan(&with, sql).await;
            assert!(!shown.contains(PRE_COUNT_PREFIX), "{sql}:\n{shown}");
            assert_eq!(shown, plan(&without, sql).await, "{sql}");
        }
        let off = context(SessionConfig::new().with_option_extension(FoamOptions::default()), true);
        off.sql("SET foam.eager_counts = false").await.expect("set").collect().await.expect("set");
        let sql = "SELECT l.g, count(r.x) FROM l LEFT JOIN r ON l.k = r.k GROUP BY l.g";
        assert_eq!(plan(&off, sql).await, plan(&without, sql).await, "SET foam.eager_counts = false turns the rule off");
    }

    #[tokio::test]
    async fn answers_the_same_with_counts_before_left_and_inner_joins() {
        assert_same_answers(&[
            ("SELECT l.g, count(r.x) FROM l LEFT JOIN r ON l.k = r.k GROUP BY l.g", true),
            ("SELECT l.g, count(r.x) FROM l JOIN r ON l.k = r.k GROUP BY l.g", true),
            ("SELECT l.k, count(r.x) FROM l LEFT JOIN r ON l.k = r.k GROUP BY l.k", true),
            ("SELECT l.k, l.g, count(r.x), count(r.k) FROM l LEFT JOIN r ON l.k = r.k GROUP BY l.k, l.g", true),
            ("SELECT l.k, count(r.k), count(r.x) FROM l JOIN r ON l.k = r.k GROUP BY l.k", true),
            ("SELECT count(r.x) FROM l LEFT JOIN r ON l.k = r.k", true),
            ("SELECT count(r.x) FROM l JOIN r ON l.k = r.k", true),
            ("SELECT count(r.x) FROM e JOIN r ON e.k = r.k", true),
            ("SELECT count(r.x) FROM e LEFT JOIN r ON e.k = r.k", true),
            ("SELECT e.k, count(r.x) FROM e LEFT JOIN r ON e.k = r.k GROUP BY e.k", true),
            ("SELECT l.g, count(e.x) FROM l LEFT JOIN e ON l.k = e.k GROUP BY l.g", true),
            ("SELECT l.g, count(e.x) FROM l JOIN e ON l.k = e.k GROUP BY l.g", true),
            ("SELECT l.g, count(r.x) FROM l LEFT JOIN r ON l.k = r.k AND l.g = r.x GROUP BY l.g", true),
            ("SELECT l.g, count(r.x) FROM l LEFT JOIN r ON l.k = r.k AND l.g = r.k GROUP BY l.g", true),
            ("SELECT l.g, count(r.x) FROM l LEFT JOIN r ON l.k + 1 = r.k GROUP BY l.g", true),
            ("SELECT l.g, count(r.x) FROM l LEFT JOIN r USING (k) GROUP BY l.g", true),
            ("SELECT a.g, count(b.g) FROM l AS a LEFT JOIN l AS b ON a.k = b.k GROUP BY a.g", true),
            ("SELECT l.g, count(r.x) AS n FROM l LEFT JOIN r ON l.k = r.k GROUP BY l.g HAVING count(r.x) < 3", true),
            ("SELECT l.g, count(r.x) FROM l LEFT JOIN r ON l.k = r.k WHERE l.g > 10 GROUP BY l.g", true),
            ("SELECT l.g, count(r.x) FROM l LEFT JOIN r ON l.k = r.k WHERE r.x > 8 GROUP BY l.g", true),
            ("SELECT l.g, count(u.x) FROM l LEFT JOIN (SELECT k, x FROM r UNION ALL SELECT k, x FROM r) AS u ON l.k = u.k GROUP BY l.g", true),
            ("SELECT n, count(*) FROM (SELECT l.k, count(r.x) AS n FROM l LEFT JOIN r ON l.k = r.k GROUP BY l.k) AS c GROUP BY n", true),
            ("SELECT l.g, count(r.x) FROM l RIGHT JOIN r ON l.k = r.k GROUP BY l.g", false),
            ("SELECT l.g, count(*) FROM l LEFT JOIN r ON l.k = r.k GROUP BY l.g", false),
        ])
        .await;
    }
}
