//! Aggregates answered from statistics, only for the aggregate they are.
//!
//! DataFusion's `aggregate_statistics` replaces an aggregate without groups
//! whose every value its input's exact statistics give (`count(*)` of an
//! input of known rows, `min` of a column of known bounds) by a row of
//! those values. For a final aggregate it looks down for its partial one,
//! and in DataFusion 55 it looks past a partial aggregate it may not use
//! (one with a `FILTER`) to any aggregate below: the outer aggregate was
//! then replaced by the values of an inner one, a subquery's. Its column
//! names differ, so the plan failed (XX000 "PhysicalExpr Column references
//! column 'count(r4.c0)' at index 1 but input schema only has 1 columns",
//! fuzz seed 58412, query 2; `SELECT max(c0 + 100) FILTER (WHERE true) FROM
//! (SELECT count(*) AS c0 FROM t WHERE false) s` too), or, where no name is
//! checked, the answer would have been the inner aggregate's.
//!
//! This rule stands in for DataFusion's and does what it does, but looks
//! down only as far as the first aggregate below a final one: that is its
//! partial aggregate, or there is none to use.
//!
//! ```text
//!   AggregateExec final: max(c0 + 100) FILTER …      AggregateExec final
//!     AggregateExec partial: max FILTER …  ◀ stop       AggregateExec partial
//!       AggregateExec final: count(*)       ◀ was used    …
//!         AggregateExec partial: count(*)
//! ```

use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::config::ConfigOptions;
use datafusion::error::Result;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateInputMode, AggregateMode};
use datafusion::physical_plan::expressions;
use datafusion::physical_plan::placeholder_row::PlaceholderRowExec;
use datafusion::physical_plan::projection::{ProjectionExec, ProjectionExpr};
use datafusion::physical_plan::statistics::{StatisticsArgs, StatisticsContext};
use datafusion::physical_plan::udaf::StatisticsArgs as AggregateStatisticsArgs;

/// The name of DataFusion's rule, which this one replaces.
pub const AGGREGATE_STATISTICS_RULE: &str = "aggregate_statistics";

/// The rule (see the module documentation).
#[derive(Debug, Default)]
pub struct AggregatesFromStatistics;

impl PhysicalOptimizerRule for AggregatesFromStatistics {
    fn optimize(&self, plan: Arc<dyn ExecutionPlan>, _config: &ConfigOptions) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_down(|node| {
            let Some(raw_plan) = aggregate_of_raw_rows(&node) else { return Ok(Transformed::no(node)) };
            let Some(raw) = raw_plan.downcast_ref::<AggregateExec>() else { return Ok(Transformed::no(node)) };
            let statistics = StatisticsContext::new().compute(raw.input().as_ref(), &StatisticsArgs::new())?;
            let mut values = Vec::with_capacity(raw.aggr_expr().len());
            for aggregate in raw.aggr_expr() {
                let field = aggregate.field();
                let args = aggregate.expressions();
                let from = AggregateStatisticsArgs {
                    statistics: &statistics,
                    return_type: field.data_type(),
                    is_distinct: aggregate.is_distinct(),
                    exprs: args.as_slice(),
                };
                let Some(value) = aggregate.fun().value_from_stats(&from) else { return Ok(Transformed::no(node)) };
                values.push(ProjectionExpr { expr: expressions::lit(value), alias: aggregate.name().to_string() });
            }
            let row = ProjectionExec::try_new(values, Arc::new(PlaceholderRowExec::new(node.schema())))?;
            Ok(Transformed::new(Arc::new(row) as Arc<dyn ExecutionPlan>, true, TreeNodeRecursion::Jump))
        })
        .map(|rewritten| rewritten.data)
    }

    fn name(&self) -> &str {
        AGGREGATE_STATISTICS_RULE
    }

    fn schema_check(&self) -> bool {
        // As DataFusion's: the values' nullability may differ.
        false
    }
}

/// The aggregate over raw rows whose values `plan` (an aggregate without
/// groups or filters) outputs: itself when it takes raw rows, its partial
/// aggregate when it is a final one; `None` otherwise.
fn aggregate_of_raw_rows(plan: &Arc<dyn ExecutionPlan>) -> Option<Arc<dyn ExecutionPlan>> {
    let aggregate = plan.downcast_ref::<AggregateExec>()?;
    let plain = |a: &AggregateExec| a.group_expr().is_empty() && a.filter_expr().iter().all(Option::is_none);
    if !aggregate.group_expr().is_empty() {
        return None;
    }
    if matches!(aggregate.mode(), AggregateMode::Single | AggregateMode::SinglePartitioned) {
        return plain(aggregate).then(|| plan.clone());
    }
    if aggregate.mode().input_mode() != AggregateInputMode::Partial {
        return None;
    }
    let mut child = aggregate.input().clone();
    loop {
        if let Some(partial) = child.downcast_ref::<AggregateExec>() {
            // The first aggregate below is the partial one, or none is.
            return (partial.mode().input_mode() == AggregateInputMode::Raw && plain(partial)).then(|| child.clone());
        }
        let next = match child.children().as_slice() {
            [only] => Arc::clone(only),
            _ => return None,
        };
        child = next;
    }
}
