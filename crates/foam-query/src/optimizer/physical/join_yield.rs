//! Yield points above joins, so a stopped query stops on every node: a
//! physical optimizer rule run on the coordinating node before the plan is
//! cut into stages.
//!
//! A query stops (statement_timeout, a cancel request, a client gone) when
//! its task is dropped, and a task is dropped only where it yields. Scans,
//! exchanges and repartitions yield: they take their batches from tokio
//! channels, which share tokio's cooperative budget. A join does not: from
//! one probe batch whose rows each match thousands of build rows it emits
//! batch after batch without polling its inputs, and the aggregate above it
//! consumes them in the same loop. Before this rule a self-join with many
//! rows per key, stopped by its statement_timeout, kept the cores busy for
//! seconds after the error reached the client (bench/results/design-figures.md).
//!
//! ```text
//!   AggregateExec                     AggregateExec
//!     HashJoinExec          ─▶          CooperativeExec      (spends one unit of the
//!       ...                               HashJoinExec        task's budget per batch)
//! ```
//! DataFusion's `CooperativeExec` spends one unit of the task's budget per
//! batch that passes and returns `Pending` when it is spent, so the task
//! yields every 128 joined batches. A join whose filter drops every pair it
//! forms emits nothing and still runs on until it next polls an input (see
//! `interrupt.rs`).

use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::config::ConfigOptions;
use datafusion::error::Result;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::coop::CooperativeExec;
use datafusion::physical_plan::{ChildrenPropertiesMode, ExecutionPlan, ReplaceChildrenOptions};
use datafusion::physical_plan::joins::{CrossJoinExec, HashJoinExec, NestedLoopJoinExec, SortMergeJoinExec, SymmetricHashJoinExec};

use crate::exec::replica_join::FoamReplicaJoinExec;

/// The physical optimizer rule (see the module documentation).
#[derive(Debug)]
pub struct JoinYielding;

fn is_join(plan: &Arc<dyn ExecutionPlan>) -> bool {
    plan.is::<HashJoinExec>()
        || plan.is::<NestedLoopJoinExec>()
        || plan.is::<CrossJoinExec>()
        || plan.is::<SortMergeJoinExec>()
        || plan.is::<SymmetricHashJoinExec>()
        || plan.is::<FoamReplicaJoinExec>()
}

fn cooperative(plan: Arc<dyn ExecutionPlan>) -> Arc<dyn ExecutionPlan> {
    Arc::new(CooperativeExec::new(plan))
}

impl PhysicalOptimizerRule for JoinYielding {
    fn optimize(&self, plan: Arc<dyn ExecutionPlan>, _config: &ConfigOptions) -> Result<Arc<dyn ExecutionPlan>> {
        // Each join is wrapped by its parent, which sees whether it already is.
        let plan = plan
            .transform_up(|node| {
                if node.is::<CooperativeExec>() || !node.children().into_iter().any(is_join) {
                    return Ok(Transformed::no(node));
                }
                let children = node.children().into_iter().map(|c| if is_join(c) { cooperative(c.clone()) } else { c.clone() }).collect();
                Ok(Transformed::yes(node.replace_children(children, ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute))?))
            })?
            .data;
        Ok(if is_join(&plan) { cooperative(plan) } else { plan })
    }

    fn name(&self) -> &str {
        "FoamJoinYielding"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::{DataType, Field, Schema};
    use datafusion::physical_plan::displayable;
    use datafusion::physical_plan::empty::EmptyExec;

    fn cross_join() -> Arc<dyn ExecutionPlan> {
        let schema = |name: &str| Arc::new(Schema::new(vec![Field::new(name, DataType::Int64, false)]));
        Arc::new(CrossJoinExec::new(Arc::new(EmptyExec::new(schema("a"))), Arc::new(EmptyExec::new(schema("b")))))
    }

    #[test]
    fn every_join_gets_one_yield_point_above_it_and_a_second_pass_adds_none() {
        let inner = cross_join();
        let outer: Arc<dyn ExecutionPlan> = Arc::new(CrossJoinExec::new(inner, Arc::new(EmptyExec::new(cross_join().schema()))));
        let once = JoinYielding.optimize(outer, &ConfigOptions::default()).unwrap();
        let twice = JoinYielding.optimize(once.clone(), &ConfigOptions::default()).unwrap();
        let text = displayable(twice.as_ref()).indent(false).to_string();
        let lines: Vec<&str> = text.lines().map(str::trim).collect();
        assert_eq!(
            lines,
            ["CooperativeExec", "CrossJoinExec", "CooperativeExec", "CrossJoinExec", "EmptyExec", "EmptyExec", "EmptyExec"],
            "{text}"
        );
    }
}
