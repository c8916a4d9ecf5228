//! Aggregates only the groups a join can match: a logical optimizer rule run
//! on the coordinating node.
//!
//! TPC-H Q17 compares each lineitem of about 200 parts (one brand, one
//! container) with the average quantity of its part. DataFusion decorrelates
//! the subquery into an aggregate of all six million lineitems grouped by part
//! (200,000 groups, a shuffle of their partial states on a cluster) joined to
//! the outer query on the part key, which then keeps 200 of them. When a join
//! on an aggregate's group key drops the aggregate's unmatched groups, and the
//! other side's key comes from a filtered table, only groups whose key that
//! table still has can matter, and a group's rows all share its key:
//!
//! ```text
//!   X ⋈ Aggregate [k] (R)                 X ⋈ Aggregate [k] (R ⋉ (π key (σ T)) ON R.k = key)
//!   (X's key from σ T, through      ─▶    the same groups where they can match,
//!    projections, filters, joins)          the others never aggregated
//! ```
//! `σ T` is the filter and scan the key comes from (or, past an inner or
//! semi join on it, the other side's key comes from), read once more (T's
//! filter decides what the semi join keeps; an unfiltered T would keep all).
//! The semi join goes to the input of `R` the group key comes from, below
//! inner joins and filters.
//! Joins that keep the aggregate's unmatched rows (outer on its side, anti
//! joins that return it, NOT IN's null-aware anti join, NULL-equal keys) are
//! left alone. `SET foam.group_key_filters = false` turns the rule off.

use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Column, NullEquality, Result};
use datafusion::logical_expr::{
    Aggregate, Expr, Filter, Join, JoinType, LogicalPlan, LogicalPlanBuilder, Projection, SubqueryAlias, TableType,
};
use datafusion::optimizer::optimizer::ApplyOrder;
use datafusion::optimizer::{OptimizerConfig, OptimizerRule};

use crate::options::FoamOptions;
use crate::optimizer::logical::plan_shape::{columns_only, with_input};

/// Alias of the key set a restricted aggregate is semi-joined with; an
/// aggregate whose input has one is not restricted again.
const KEYS_ALIAS: &str = "__foam_group_keys";

/// The optimizer rule (see the module documentation).
#[derive(Debug, Default)]
pub struct GroupKeyFilter;

impl OptimizerRule for GroupKeyFilter {
    fn name(&self) -> &str {
        "foam_group_key_filter"
    }

    fn apply_order(&self) -> Option<ApplyOrder> {
        Some(ApplyOrder::BottomUp)
    }

    fn supports_rewrite(&self) -> bool {
        true
    }

    fn rewrite(&self, plan: LogicalPlan, config: &dyn OptimizerConfig) -> Result<Transformed<LogicalPlan>> {
        let LogicalPlan::Join(join) = &plan else { return Ok(Transformed::no(plan)) };
        if join.null_aware
            || join.null_equality == NullEquality::NullEqualsNull
            || config.options().extensions.get::<FoamOptions>().is_some_and(|o| !o.group_key_filters)
        {
            return Ok(Transformed::no(plan));
        }
        match restrict_join(join)? {
            Some(restricted) => Ok(Transformed::yes(LogicalPlan::Join(restricted))),
            None => Ok(Transformed::no(plan)),
        }
    }
}

/// Whether the join never returns a row of its left (`left`) or right input
/// that matched nothing on the other side (nor lets such a row decide anything).
fn drops_unmatched(join_type: JoinType, left: bool) -> bool {
    use JoinType::*;
    if left {
        matches!(join_type, Inner | Right | LeftSemi | RightSemi | RightAnti)
    } else {
        matches!(join_type, Inner | Left | LeftSemi | RightSemi | LeftAnti | LeftMark)
    }
}

fn restrict_join(join: &Join) -> Result<Option<Join>> {
    for aggregate_left in [true, false] {
        if !drops_unmatched(join.join_type, aggregate_left) {
            continue;
        }
        let (aggregate_side, other_side) = if aggregate_left { (&join.left, &join.right) } else { (&join.right, &join.left) };
        for (left_key, right_key) in &join.on {
            let (aggregate_key, other_key) = if aggregate_left { (left_key, right_key) } else { (right_key, left_key) };
            let (Expr::Column(aggregate_key), Expr::Column(other_key)) = (aggregate_key, other_key) else { continue };
            let Some((keys, key)) = key_source(other_side, other_key) else { continue };
            if let Some(restricted) = restrict(aggregate_side, aggregate_key, &keys, &key)? {
                return Ok(Some(with_input(join, aggregate_left, Arc::new(restricted))?));
            }
        }
    }
    Ok(None)
}

/// The column of `plan`'s input that output column `column` passes on
/// unchanged, for projections and aliases.
fn passed_from(plan: &LogicalPlan, column: &Column) -> Option<Column> {
    let index = plan.schema().index_of_column(column).ok()?;
    match plan {
        LogicalPlan::Projection(projection) => match projection.expr.get(index)? {
            Expr::Column(c) => Some(c.clone()),
            Expr::Alias(alias) => match alias.expr.as_ref() {
                Expr::Column(c) => Some(c.clone()),
                _ => None,
            },
            _ => None,
        },
        LogicalPlan::SubqueryAlias(alias) => Some(Column::from(alias.input.schema().qualified_field(index))),
        _ => None,
    }
}

/// The filtered table `column` of `plan` takes its values from (a filter over
/// a scan, under aliases), and the column there: every non-NULL value of
/// `column` is one of that table's after its filter.
fn key_source(plan: &LogicalPlan, column: &Column) -> Option<(LogicalPlan, Column)> {
    match plan {
        // Read again, a volatile filter (`random() < 0.5`) would keep other rows.
        LogicalPlan::Filter(filter) if table(&filter.input) => (!filter.predicate.is_volatile()).then(|| (plan.clone(), column.clone())),
        LogicalPlan::Filter(filter) => key_source(&filter.input, column),
        LogicalPlan::Projection(_) | LogicalPlan::SubqueryAlias(_) => {
            let input = plan.inputs()[0];
            key_source(input, &passed_from(plan, column)?)
        }
        LogicalPlan::Join(join) => {
            // Semi, anti and mark joins return one input's columns.
            let left = match join.join_type {
                JoinType::LeftSemi | JoinType::LeftAnti | JoinType::LeftMark => true,
                JoinType::RightSemi | JoinType::RightAnti | JoinType::RightMark => false,
                _ => join.left.schema().has_column(column),
            };
            let side = if left { &join.left } else { &join.right };
            if !side.schema().has_column(column) {
                return None;
            }
            // A key of an inner or semi join only has values the other
            // side's key has: TPC-H Q20's partsupp rows are those of parts
            // named 'forest%'.
            let matched_only = matches!(join.join_type, JoinType::Inner | JoinType::LeftSemi | JoinType::RightSemi)
                && join.null_equality == NullEquality::NullEqualsNothing;
            let paired = join.on.iter().find_map(|(l, r)| match (l, r) {
                (Expr::Column(l), Expr::Column(r)) if left && l == column => Some((&join.right, r)),
                (Expr::Column(l), Expr::Column(r)) if !left && r == column => Some((&join.left, l)),
                _ => None,
            });
            paired.filter(|_| matched_only).and_then(|(other, key)| key_source(other, key)).or_else(|| key_source(side, column))
        }
        LogicalPlan::Sort(sort) => key_source(&sort.input, column),
        LogicalPlan::Limit(limit) => key_source(&limit.input, column),
        _ => None,
    }
}

/// A scan of a whole stored table (not a recursive query's work table, not
/// limited), under aliases and projections of plain columns: reading it again
/// gives the same rows.
fn table(plan: &LogicalPlan) -> bool {
    match plan {
        LogicalPlan::TableScan(scan) => scan.source.table_type() == TableType::Base && scan.fetch.is_none(),
        LogicalPlan::SubqueryAlias(alias) => table(&alias.input),
        LogicalPlan::Projection(p) => columns_only(p) && table(&p.input),
        _ => false,
    }
}

/// `plan` (projections, aliases and filters over an aggregate grouped by
/// `column`) with the aggregate's input semi-joined with `keys` on the
/// group key, or `None` when `plan` has no such shape.
fn restrict(plan: &LogicalPlan, column: &Column, keys: &LogicalPlan, key: &Column) -> Result<Option<LogicalPlan>> {
    Ok(match plan {
        LogicalPlan::Projection(projection) => {
            let Some(below) = passed_from(plan, column) else { return Ok(None) };
            let Some(input) = restrict(&projection.input, &below, keys, key)? else { return Ok(None) };
            Some(LogicalPlan::Projection(Projection::try_new(projection.expr.clone(), Arc::new(input))?))
        }
        LogicalPlan::SubqueryAlias(alias) => {
            let Some(below) = passed_from(plan, column) else { return Ok(None) };
            let Some(input) = restrict(&alias.input, &below, keys, key)? else { return Ok(None) };
            Some(LogicalPlan::SubqueryAlias(SubqueryAlias::try_new(Arc::new(input), alias.alias.clone())?))
        }
        LogicalPlan::Filter(filter) => {
            let Some(input) = restrict(&filter.input, column, keys, key)? else { return Ok(None) };
            Some(LogicalPlan::Filter(Filter::try_new(filter.predicate.clone(), Arc::new(input))?))
        }
        LogicalPlan::Aggregate(aggregate) => restrict_aggregate(aggregate, column, keys, key)?,
        _ => None,
    })
}

fn restrict_aggregate(aggregate: &Aggregate, column: &Column, keys: &LogicalPlan, key: &Column) -> Result<Option<LogicalPlan>> {
    let Ok(index) = aggregate.schema.index_of_column(column) else { return Ok(None) };
    // Plain group columns only (no grouping sets: a rolled-up row has no key).
    if !aggregate.group_expr.iter().all(|e| matches!(e, Expr::Column(_))) {
        return Ok(None);
    }
    let Some(Expr::Column(grouped)) = aggregate.group_expr.get(index) else { return Ok(None) };
    let restricted_already = aggregate
        .input
        .exists(|p| Ok(matches!(p, LogicalPlan::SubqueryAlias(a) if a.alias.table() == KEYS_ALIAS)))?;
    if restricted_already {
        return Ok(None);
    }
    let key_set = LogicalPlanBuilder::from(keys.clone()).project(vec![Expr::Column(key.clone())])?.alias(KEYS_ALIAS)?.build()?;
    let input = semi_join_at_source(&aggregate.input, grouped, &key_set, &Column::new(Some(KEYS_ALIAS), key.name.clone()))?;
    Ok(Some(LogicalPlan::Aggregate(Aggregate::try_new(Arc::new(input), aggregate.group_expr.clone(), aggregate.aggr_expr.clone())?)))
}

/// `plan ⋉ key_set ON column = key`, placed as deep as the column passes
/// unchanged: through projections, aliases, filters and inner joins to the
/// input it comes from, so fewer rows reach the joins (TPC-H Q2 keeps a
/// partsupp row only for a part of the right size and type before joining
/// suppliers). An inner join's output row has the key of its input's row.
fn semi_join_at_source(plan: &Arc<LogicalPlan>, column: &Column, key_set: &LogicalPlan, key: &Column) -> Result<LogicalPlan> {
    let deeper = match plan.as_ref() {
        LogicalPlan::Projection(projection) => match passed_from(plan, column) {
            Some(below) => Some(LogicalPlan::Projection(Projection::try_new(
                projection.expr.clone(),
                Arc::new(semi_join_at_source(&projection.input, &below, key_set, key)?),
            )?)),
            None => None,
        },
        LogicalPlan::SubqueryAlias(alias) => match passed_from(plan, column) {
            Some(below) => Some(LogicalPlan::SubqueryAlias(SubqueryAlias::try_new(
                Arc::new(semi_join_at_source(&alias.input, &below, key_set, key)?),
                alias.alias.clone(),
            )?)),
            None => None,
        },
        LogicalPlan::Filter(filter) => Some(LogicalPlan::Filter(Filter::try_new(
            filter.predicate.clone(),
            Arc::new(semi_join_at_source(&filter.input, column, key_set, key)?),
        )?)),
        LogicalPlan::Join(join) if join.join_type == JoinType::Inner => {
            let left = join.left.schema().has_column(column);
            let side = if left { &join.left } else { &join.right };
            if side.schema().has_column(column) {
                Some(LogicalPlan::Join(with_input(join, left, Arc::new(semi_join_at_source(side, column, key_set, key)?))?))
            } else {
                None
            }
        }
        _ => None,
    };
    match deeper {
        Some(plan) => Ok(plan),
        None => LogicalPlanBuilder::from(plan.as_ref().clone())
            .join(key_set.clone(), JoinType::LeftSemi, (vec![column.clone()], vec![key.clone()]), None)?
            .build(),
    }
}
