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
//! met none gets NULL, which `sum` skips and `coalesce` turns into the 0 the
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
use datafusion::functions::expr_fn::coalesce;
use datafusion::functions_aggregate::expr_fn::{count, sum};
use datafusion::logical_expr::{Aggregate, Expr, Join, JoinType, LogicalPlan, LogicalPlanBuilder, lit};
use datafusion::optimizer::optimizer::ApplyOrder;
use datafusion::optimizer::{OptimizerConfig, OptimizerRule};

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
            coalesce(vec![pre, lit(0i64)])
        };
        output.push(expr.alias_qualified(qualifier.cloned(), field.name()));
    }
    Ok(Some(LogicalPlanBuilder::from(summed).project(output)?.build()?))
}
