//! What an aggregate over grouping sets, or an outer join, may claim about
//! its output: physical optimizer rules run first, before DataFusion's own,
//! and the plan node they place above such an operator.
//!
//! DataFusion 55 lets two kinds of operator keep claims their NULLs break:
//! - An aggregate derives its output properties by projecting its input's
//!   through the group expressions, also under ROLLUP, CUBE and GROUPING
//!   SETS (apache/datafusion#16965). A group key that is a literal, or a
//!   column the input holds constant or in order, keeps that claim, though
//!   the sets put NULL in it. The final aggregate then takes its keys as
//!   sorted (`ordering_mode=PartiallySorted`) and emits a group each time a
//!   key changes; when rows of one group arrive apart (two tasks, the order
//!   of a shuffle), the group comes out twice. A hash partitioning on a key
//!   the sets null is claimed too.
//! - A LEFT, RIGHT or FULL join keeps the constants of both inputs
//!   (`EquivalenceGroup::join`), so a literal on the side the join pads with
//!   NULL stays "constant". A sort on it is then left out, or a `SortExec`
//!   finds its order already met and passes its input through unsorted.
//! - A filter takes a column for constant when its input's statistics, after
//!   the filter, hold one value for it (min = max), and DataFusion makes
//!   that single value exact whatever the precision of the bounds it came
//!   from. FoamDB's bounds are estimates from the partitions on the planning
//!   node, so `a < 20` over a node whose partitions hold only `a = 6` made
//!   `a` "constant" and `ORDER BY a` came back unsorted (fuzz seed 44055).
//!   A filter gets the node when it claims a constant it would not claim
//!   with its input's bounds hidden; statistics still pass through for the
//!   planner's estimates.
//!
//! ```text
//!   AggregateExec: Final                  AggregateExec: Final      (linear)
//!     AggregateExec: Partial,    ─▶         ClaimsDroppedExec        (claims no
//!       gby=[(a, 1), (NULL, 1)]               AggregateExec: Partial   order or
//!                                                                      constants)
//! ```
//! `ClaimsDroppedExec` passes its input's batches on unchanged and reports
//! no order, no constants and no equivalences. Above an aggregate it keeps
//! a hash partitioning only on keys that no grouping set nulls; above a join
//! it keeps the join's partitioning (rows stay where the join put them). The
//! rules run before DataFusion's distribution and sorting rules, so they
//! plan with the true properties, and every operator above is rebuilt with
//! them. An outer join gets the node only when its padded side claims a
//! constant, so other joins keep their orderings. The filter rule runs
//! again after DataFusion's rules that build filters anew (join selection,
//! filter pushdown).

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
use datafusion::common::stats::Precision;
use datafusion::common::{JoinType, Statistics};
use datafusion::physical_plan::aggregates::AggregateExec;
use datafusion::physical_plan::joins::{HashJoinExec, NestedLoopJoinExec, SortMergeJoinExec, SymmetricHashJoinExec};
use datafusion::physical_plan::filter::{FilterExec, FilterExecBuilder};
use datafusion::physical_plan::statistics::{ChildStats, StatisticsArgs};
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties, PlanProperties};

/// DataFusion's physical optimizer rules, this module's first. The outer
/// join rule runs again right after DataFusion's `join_selection`, which
/// swaps a join's inputs (a LEFT join becomes a RIGHT one that collects its
/// padded side): the swapped join claims the padded side's constants where
/// the join as planned did not, and the sorting rule then dropped an ORDER
/// BY on such a column (fuzz seed 9202 q28).
pub fn datafusion_rules() -> Vec<Arc<dyn PhysicalOptimizerRule + Send + Sync>> {
    let mut rules = PhysicalOptimizer::new().rules;
    if let Some(at) = rules.iter().position(|rule| rule.name() == FILTER_PUSHDOWN_RULE) {
        rules.insert(at + 1, Arc::new(FilterBoundsProperties));
    }
    if let Some(at) = rules.iter().position(|rule| rule.name() == JOIN_SELECTION_RULE) {
        rules.insert(at + 1, Arc::new(FilterBoundsProperties));
        rules.insert(at + 1, Arc::new(OuterJoinProperties));
    }
    rules.insert(0, Arc::new(FilterBoundsProperties));
    rules.insert(0, Arc::new(OuterJoinProperties));
    rules.insert(0, Arc::new(GroupingSetsProperties));
    rules
}

/// The name of DataFusion's rule that picks join build sides and swaps inputs.
const JOIN_SELECTION_RULE: &str = "join_selection";

/// The name of DataFusion's rule that moves filters (before the plan is final).
const FILTER_PUSHDOWN_RULE: &str = "FilterPushdown";

/// Places `ClaimsDroppedExec` above each aggregate over grouping sets.
#[derive(Debug)]
pub struct GroupingSetsProperties;

impl PhysicalOptimizerRule for GroupingSetsProperties {
    fn optimize(&self, plan: Arc<dyn ExecutionPlan>, _config: &ConfigOptions) -> Result<Arc<dyn ExecutionPlan>> {
        drop_claims(plan, |node| node.downcast_ref::<AggregateExec>().is_some_and(|a| a.group_expr().has_grouping_set()))
    }

    fn name(&self) -> &str {
        "GroupingSetsProperties"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// Places `ClaimsDroppedExec` above each outer join whose padded side
/// claims a constant in the join's output.
#[derive(Debug)]
pub struct OuterJoinProperties;

impl PhysicalOptimizerRule for OuterJoinProperties {
    fn optimize(&self, plan: Arc<dyn ExecutionPlan>, _config: &ConfigOptions) -> Result<Arc<dyn ExecutionPlan>> {
        drop_claims(plan, pads_a_constant)
    }

    fn name(&self) -> &str {
        "OuterJoinProperties"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// Places `ClaimsDroppedExec` above each filter that claims a column
/// constant only because of its input's estimated bounds.
#[derive(Debug)]
pub struct FilterBoundsProperties;

impl PhysicalOptimizerRule for FilterBoundsProperties {
    fn optimize(&self, plan: Arc<dyn ExecutionPlan>, _config: &ConfigOptions) -> Result<Arc<dyn ExecutionPlan>> {
        drop_claims(plan, constant_by_bounds)
    }

    fn name(&self) -> &str {
        "FilterBoundsProperties"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// Whether `node` is a filter claiming a constant that the same filter
/// over its input with min and max hidden does not claim (a filter that
/// cannot be rebuilt so counts as one).
fn constant_by_bounds(node: &Arc<dyn ExecutionPlan>) -> bool {
    let Some(filter) = node.downcast_ref::<FilterExec>() else { return false };
    let constants = filter.properties().equivalence_properties().constants();
    if constants.is_empty() {
        return false;
    }
    let hidden = Arc::new(BoundsHiddenExec { input: filter.input().clone() });
    let Ok(unbounded) = FilterExecBuilder::from(filter).with_input(hidden).build() else { return true };
    let honest = unbounded.properties().equivalence_properties();
    constants.iter().any(|constant| honest.is_expr_constant(&constant.expr).is_none())
}

/// Its input with min and max taken out of its statistics: built only to
/// ask a filter what it claims without them, never run.
#[derive(Debug)]
struct BoundsHiddenExec {
    input: Arc<dyn ExecutionPlan>,
}

impl DisplayAs for BoundsHiddenExec {
    fn fmt_as(&self, _format: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "BoundsHiddenExec")
    }
}

impl ExecutionPlan for BoundsHiddenExec {
    fn name(&self) -> &str {
        "BoundsHiddenExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.input.properties()
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

    fn with_new_children(self: Arc<Self>, mut children: Vec<Arc<dyn ExecutionPlan>>) -> Result<Arc<dyn ExecutionPlan>> {
        if children.len() != 1 {
            return Err(DataFusionError::Internal("BoundsHiddenExec has one input".into()));
        }
        Ok(Arc::new(BoundsHiddenExec { input: children.remove(0) }))
    }

    fn child_stats_requests(&self, partition: Option<usize>) -> Vec<ChildStats> {
        vec![ChildStats::At(partition)]
    }

    fn statistics_from_inputs(&self, input_stats: &[Arc<Statistics>], _args: &StatisticsArgs) -> Result<Arc<Statistics>> {
        let mut statistics = input_stats[0].as_ref().clone();
        for column in &mut statistics.column_statistics {
            column.min_value = Precision::Absent;
            column.max_value = Precision::Absent;
        }
        Ok(Arc::new(statistics))
    }

    fn execute(&self, _partition: usize, _context: Arc<TaskContext>) -> Result<SendableRecordBatchStream> {
        Err(DataFusionError::Internal("BoundsHiddenExec is never run".into()))
    }
}

/// A join DataFusion 55 may pad with NULLs: its type, the size of its left
/// input, and the projection it may carry (output column `i` is the join's
/// column `projection[i]`, left columns first).
struct OuterJoin {
    join_type: JoinType,
    left_size: usize,
    projection: Option<Arc<[usize]>>,
}

fn outer_join(node: &Arc<dyn ExecutionPlan>) -> Option<OuterJoin> {
    let left_size = node.children().first().map(|c| c.schema().fields().len()).unwrap_or(0);
    let (join_type, projection) = if let Some(join) = node.downcast_ref::<HashJoinExec>() {
        (*join.join_type(), join.projection.clone())
    } else if let Some(join) = node.downcast_ref::<NestedLoopJoinExec>() {
        (*join.join_type(), join.projection().clone())
    } else if let Some(join) = node.downcast_ref::<SortMergeJoinExec>() {
        (join.join_type(), None)
    } else if let Some(join) = node.downcast_ref::<SymmetricHashJoinExec>() {
        (*join.join_type(), None)
    } else {
        return None;
    };
    Some(OuterJoin { join_type, left_size, projection })
}

/// Whether `node` is an outer join claiming one of its padded output
/// columns constant.
fn pads_a_constant(node: &Arc<dyn ExecutionPlan>) -> bool {
    let Some(join) = outer_join(node) else { return false };
    let padded = |joined: usize| match join.join_type {
        JoinType::Left => joined >= join.left_size,
        JoinType::Right => joined < join.left_size,
        JoinType::Full => true,
        _ => false,
    };
    let schema = node.schema();
    let properties = node.equivalence_properties();
    (0..schema.fields().len()).any(|i| {
        let joined = match &join.projection {
            Some(projection) => projection.get(i).copied().unwrap_or(i),
            None => i,
        };
        if !padded(joined) {
            return false;
        }
        let column: Arc<dyn PhysicalExpr> = Arc::new(Column::new(schema.field(i).name(), i));
        properties.is_expr_constant(&column).is_some()
    })
}

/// `plan` with `ClaimsDroppedExec` above every node `wanted` picks.
fn drop_claims(plan: Arc<dyn ExecutionPlan>, wanted: impl Fn(&Arc<dyn ExecutionPlan>) -> bool) -> Result<Arc<dyn ExecutionPlan>> {
    plan.transform_up(|node| {
        if let Some(outer) = node.downcast_ref::<ClaimsDroppedExec>() {
            // Run again over its own output, a rule wraps the node twice.
            if outer.input.is::<ClaimsDroppedExec>() {
                return Ok(Transformed::yes(outer.input.clone()));
            }
            return Ok(Transformed::no(node));
        }
        if wanted(&node) {
            return Ok(Transformed::yes(Arc::new(ClaimsDroppedExec::new(node.clone())) as Arc<dyn ExecutionPlan>));
        }
        Ok(Transformed::no(node))
    })
    .map(|transformed| transformed.data)
}

/// The output of an aggregate over grouping sets or of an outer join, with
/// only the properties that hold for it (see the module documentation).
#[derive(Debug)]
pub struct ClaimsDroppedExec {
    input: Arc<dyn ExecutionPlan>,
    properties: Arc<PlanProperties>,
}

impl ClaimsDroppedExec {
    /// `input` is an aggregate with grouping sets or an outer join.
    pub fn new(input: Arc<dyn ExecutionPlan>) -> Self {
        // Output columns 0..n of an aggregate are its group expressions, in order.
        let never_null: Vec<bool> = match input.downcast_ref::<AggregateExec>() {
            Some(aggregate) => {
                let group_by = aggregate.group_expr();
                (0..group_by.expr().len()).map(|i| group_by.groups().iter().all(|set| !set[i])).collect()
            }
            None => {
                // A join places rows; its NULLs do not move them.
                let properties = Arc::new(PlanProperties::new(
                    EquivalenceProperties::new(input.schema()),
                    input.output_partitioning().clone(),
                    input.pipeline_behavior(),
                    input.boundedness(),
                ));
                return ClaimsDroppedExec { input, properties };
            }
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
        ClaimsDroppedExec { input, properties }
    }
}

impl DisplayAs for ClaimsDroppedExec {
    fn fmt_as(&self, _format: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "ClaimsDroppedExec")
    }
}

impl ExecutionPlan for ClaimsDroppedExec {
    fn name(&self) -> &str {
        "ClaimsDroppedExec"
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
            return Err(DataFusionError::Internal("ClaimsDroppedExec has one input".into()));
        }
        Ok(Arc::new(ClaimsDroppedExec::new(children.remove(0))))
    }

    fn child_stats_requests(&self, partition: Option<usize>) -> Vec<ChildStats> {
        vec![ChildStats::At(partition)]
    }

    /// The input's: the rows are the same, only the claims are fewer.
    fn statistics_from_inputs(&self, input_stats: &[Arc<Statistics>], _args: &StatisticsArgs) -> Result<Arc<Statistics>> {
        Ok(input_stats[0].clone())
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
        assert!(text.contains("ClaimsDroppedExec"), "{text}");
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

    #[tokio::test]
    async fn a_literal_on_the_padded_side_of_a_full_join_is_sorted_on() {
        use datafusion::arrow::array::{Array, Int64Array};
        // Ordered by c0 NULLS FIRST, then a: (NULL, 0), (NULL, 2), ('x', 1).
        let sql = "SELECT r5.a, lag(r5.a) OVER (ORDER BY r4.c0 NULLS FIRST, r5.a) AS prev \
                   FROM (SELECT 'x' AS c0) AS r4 FULL JOIN (SELECT CAST(column1 AS BIGINT) AS a, column2 AS d FROM (VALUES (1, 'x'), (2, 'y'), (0, 'z'))) AS r5 ON r4.c0 = r5.d";
        let ctx = context();
        let batches = ctx.sql(sql).await.unwrap().collect().await.unwrap();
        let mut rows = Vec::new();
        for batch in &batches {
            let a = batch.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
            let prev = batch.column(1).as_any().downcast_ref::<Int64Array>().unwrap();
            for i in 0..batch.num_rows() {
                rows.push((a.value(i), (!prev.is_null(i)).then(|| prev.value(i))));
            }
        }
        rows.sort();
        assert_eq!(rows, vec![(0, None), (1, Some(2)), (2, Some(0))]);
    }

    #[tokio::test]
    async fn a_padded_constant_is_found_behind_a_joins_own_projection() {
        // Stock DataFusion embeds the projection into the join. Whichever
        // side it builds on, the padded literal's output index differs from
        // its index in the join.
        let ctx = SessionContext::new_with_config(SessionConfig::new().with_target_partitions(1));
        let sql = "SELECT l.a, l.b, r.c0 FROM (SELECT column1 AS a, column2 AS b, column3 AS d FROM (VALUES (1, 1, 'x'), (2, 2, 'y'))) AS l \
                   LEFT JOIN (SELECT 'x' AS c0, column1 AS d FROM (VALUES ('x'))) AS r ON l.d = r.d";
        let plan = ctx.sql(sql).await.unwrap().create_physical_plan().await.unwrap();
        let mut joins = Vec::new();
        plan.apply(|node| {
            if node.downcast_ref::<HashJoinExec>().is_some_and(|j| j.contains_projection()) {
                joins.push(node.clone());
            }
            Ok(TreeNodeRecursion::Continue)
        })
        .unwrap();
        let text = displayable(plan.as_ref()).indent(false).to_string();
        assert_eq!(joins.len(), 1, "{text}");
        assert!(pads_a_constant(&joins[0]), "{text}");
    }
}
