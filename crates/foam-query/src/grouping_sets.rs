//! What an aggregate over grouping sets may claim about its output: a
//! physical optimizer rule run first, before DataFusion's own rules, and the
//! plan node it places above such an aggregate.
//!
//! DataFusion 55 derives an aggregate's output properties by projecting its
//! input's through the group expressions, also under ROLLUP, CUBE and
//! GROUPING SETS (apache/datafusion#16965). A group key that is a literal,
//! or a column the input holds constant or in order, keeps that claim,
//! although the grouping sets put NULL in it for some rows and emit the sets
//! one after another. The final aggregate then takes its keys as sorted
//! (`ordering_mode=PartiallySorted`) and emits a group each time a key
//! changes; when rows of one group arrive apart (two tasks, two partitions,
//! the order of a shuffle), the group is emitted twice. A hash partitioning
//! on a key that the sets null is claimed too, though the NULLed rows are
//! not laid out by it.
//!
//! ```text
//!   AggregateExec: Final                  AggregateExec: Final      (linear)
//!     AggregateExec: Partial,    ─▶         GroupingSetsOutputExec  (claims nothing
//!       gby=[(a, 1), (NULL, 1)]               AggregateExec: Partial   of the kind)
//! ```
//! `GroupingSetsOutputExec` passes its input's batches on unchanged and
//! reports no order, no constants and no equivalences; it keeps a hash
//! partitioning only on keys that no grouping set nulls. The rule runs before
//! DataFusion's distribution and sorting rules, so they plan with the true
//! properties, and rebuilds every aggregate above with them.

use std::fmt;
use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::config::ConfigOptions;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::{EquivalenceProperties, Partitioning, PhysicalExpr};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_optimizer::optimizer::PhysicalOptimizer;
use datafusion::physical_plan::aggregates::AggregateExec;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties, PlanProperties};

/// DataFusion's physical optimizer rules, this one first.
pub fn datafusion_rules() -> Vec<Arc<dyn PhysicalOptimizerRule + Send + Sync>> {
    let mut rules = PhysicalOptimizer::new().rules;
    rules.insert(0, Arc::new(GroupingSetsProperties));
    rules
}

/// The physical optimizer rule (see the module documentation).
#[derive(Debug)]
pub struct GroupingSetsProperties;

impl PhysicalOptimizerRule for GroupingSetsProperties {
    fn optimize(&self, plan: Arc<dyn ExecutionPlan>, _config: &ConfigOptions) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| {
            if let Some(outer) = node.downcast_ref::<GroupingSetsOutputExec>() {
                // Run again over its own output, the rule wraps the aggregate twice.
                if outer.input.is::<GroupingSetsOutputExec>() {
                    return Ok(Transformed::yes(outer.input.clone()));
                }
                return Ok(Transformed::no(node));
            }
            match node.downcast_ref::<AggregateExec>() {
                Some(aggregate) if aggregate.group_expr().has_grouping_set() => {
                    Ok(Transformed::yes(Arc::new(GroupingSetsOutputExec::new(node.clone())) as Arc<dyn ExecutionPlan>))
                }
                _ => Ok(Transformed::no(node)),
            }
        })
        .map(|transformed| transformed.data)
    }

    fn name(&self) -> &str {
        "GroupingSetsProperties"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// The output of an aggregate over grouping sets, with only the properties
/// that hold for it (see the module documentation).
#[derive(Debug)]
pub struct GroupingSetsOutputExec {
    input: Arc<dyn ExecutionPlan>,
    properties: Arc<PlanProperties>,
}

impl GroupingSetsOutputExec {
    /// `input` is an `AggregateExec` with grouping sets (above anything
    /// else, the node claims no partitioning at all).
    pub fn new(input: Arc<dyn ExecutionPlan>) -> Self {
        // Output columns 0..n of an aggregate are its group expressions, in order.
        let never_null: Vec<bool> = match input.downcast_ref::<AggregateExec>() {
            Some(aggregate) => {
                let group_by = aggregate.group_expr();
                (0..group_by.expr().len()).map(|i| group_by.groups().iter().all(|set| !set[i])).collect()
            }
            None => Vec::new(),
        };
        let kept = |expr: &Arc<dyn PhysicalExpr>| {
            expr.downcast_ref::<Column>().is_some_and(|c| never_null.get(c.index()).copied().unwrap_or(false))
        };
        let partitioning = match input.output_partitioning().clone() {
            Partitioning::Hash(keys, n) if !keys.is_empty() && keys.iter().all(kept) => Partitioning::Hash(keys, n),
            other => Partitioning::UnknownPartitioning(other.partition_count()),
        };
        let properties = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(input.schema()),
            partitioning,
            input.pipeline_behavior(),
            input.boundedness(),
        ));
        GroupingSetsOutputExec { input, properties }
    }
}

impl DisplayAs for GroupingSetsOutputExec {
    fn fmt_as(&self, _format: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "GroupingSetsOutputExec")
    }
}

impl ExecutionPlan for GroupingSetsOutputExec {
    fn name(&self) -> &str {
        "GroupingSetsOutputExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        // Nothing is claimed about the order, so there is nothing to keep.
        vec![false]
    }

    fn with_new_children(self: Arc<Self>, mut children: Vec<Arc<dyn ExecutionPlan>>) -> Result<Arc<dyn ExecutionPlan>> {
        if children.len() != 1 {
            return Err(DataFusionError::Internal("GroupingSetsOutputExec has one input".into()));
        }
        Ok(Arc::new(GroupingSetsOutputExec::new(children.remove(0))))
    }

    fn execute(&self, partition: usize, context: Arc<TaskContext>) -> Result<SendableRecordBatchStream> {
        self.input.execute(partition, context)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::execution::session_state::SessionStateBuilder;
    use datafusion::physical_plan::{collect, displayable};
    use datafusion::prelude::{SessionConfig, SessionContext};

    /// apache/datafusion#16965: two partitions of one literal key, one
    /// input partition for the final aggregate.
    const TWO_PARTITIONS_OF_A_LITERAL: &str =
        "SELECT id FROM (SELECT 'id' AS id UNION ALL SELECT 'id' AS id ORDER BY id) AS t GROUP BY GROUPING SETS ((id), ())";

    fn context() -> SessionContext {
        let config = SessionConfig::new().with_target_partitions(1);
        let state =
            SessionStateBuilder::new().with_config(config).with_default_features().with_physical_optimizer_rules(datafusion_rules()).build();
        SessionContext::new_with_state(state)
    }

    #[tokio::test]
    async fn the_final_aggregate_does_not_stream_on_a_key_the_sets_null() {
        let ctx = context();
        let plan = ctx.sql(TWO_PARTITIONS_OF_A_LITERAL).await.unwrap().create_physical_plan().await.unwrap();
        let text = displayable(plan.as_ref()).indent(false).to_string();
        assert!(text.contains("GroupingSetsOutputExec"), "{text}");
        assert!(!text.contains("ordering_mode"), "{text}");
        let rows: usize = collect(plan, ctx.task_ctx()).await.unwrap().iter().map(|b| b.num_rows()).sum();
        assert_eq!(rows, 2, "one row for ('id'), one for ()");
    }

    #[tokio::test]
    async fn run_twice_the_rule_places_one_node() {
        let ctx = context();
        let plan = ctx.sql(TWO_PARTITIONS_OF_A_LITERAL).await.unwrap().create_physical_plan().await.unwrap();
        let once = displayable(plan.as_ref()).indent(false).to_string();
        let again = GroupingSetsProperties.optimize(plan, &ConfigOptions::default()).unwrap();
        assert_eq!(displayable(again.as_ref()).indent(false).to_string(), once);
    }
}
