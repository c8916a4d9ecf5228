//! Filter pushdown only where DataFusion 55 places filters right: a guard
//! around its two physical filter pushdowns, the one that moves a
//! `FilterExec`'s predicate down before the plan is final and the one that
//! wires dynamic filters (a join's build-side bounds, a TopK's threshold)
//! to the scans below.
//!
//! DataFusion 55 maps a pushed-down filter's columns into each child by
//! name (apache/datafusion#21246, #25262, #25263, #25296; fixed upstream
//! after 55). Below an operator whose output has two columns of one name —
//! `r1.a` and `r2.a` of a self-join, both `a` — a filter on the second can
//! land on the first: it drops rows that match, or, when the two differ in
//! type, fails the statement (fuzz seed 7008, query 139). The guard skips a
//! pushdown for a plan in which a filter could travel through such an
//! operator: one with a duplicate field name under a `FilterExec` (before
//! the plan is final), or under the probe side of a hash join, a sort with
//! a limit or a partial aggregate without groups (dynamic filters). The plan
//! then keeps its filters where the logical optimizer put them, which only
//! ever costs work.
//!
//! A hash join in partitioned mode also routes each probe row to the bounds
//! of one build partition, by DataFusion's own repartitioning hash. Where
//! the join's partitions are FoamDB's layout instead (a co-located or routed
//! join, partitioned by `foam_route`), rows were checked against another
//! partition's bounds and dropped: a window over such a join lost a third
//! of its rows on 3 nodes (fuzz seed 32006, query 112). Dynamic filters are
//! skipped for a plan with a partitioned hash join whose probe side is not
//! partitioned by a DataFusion hash repartition.
//!
//! ```text
//!   FilterExec  r1.c0 OR r5.c0 = -2             HashJoinExec (semi)
//!     ProjectionExec [c0, c2, c0]  ◀ two `c0`s    build: r3
//!       HashJoinExec r1 ⟖ r5                      probe: ProjectionExec [a, b, a, b] ◀
//! ```

use std::collections::HashSet;
use std::sync::Arc;

use datafusion::config::ConfigOptions;
use datafusion::error::Result;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::filter_pushdown::FilterPushdownPhase;
use datafusion::physical_plan::joins::{HashJoinExec, PartitionMode};
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::Partitioning;

/// One of DataFusion's physical filter pushdowns, skipped for plans where it
/// may misplace a filter (see the module documentation).
#[derive(Debug)]
pub struct GuardedFilterPushdown {
    pub inner: Arc<dyn PhysicalOptimizerRule + Send + Sync>,
    /// Which of the two pushdowns `inner` is.
    pub phase: FilterPushdownPhase,
}

impl PhysicalOptimizerRule for GuardedFilterPushdown {
    fn optimize(&self, plan: Arc<dyn ExecutionPlan>, config: &ConfigOptions) -> Result<Arc<dyn ExecutionPlan>> {
        if filters_may_land_on_namesakes(&plan, self.phase) {
            tracing::debug!(rule = self.inner.name(), "filter pushdown off for a plan with namesake columns below a filter's source");
            return Ok(plan);
        }
        self.inner.optimize(plan, config)
    }

    fn name(&self) -> &str {
        self.inner.name()
    }

    fn schema_check(&self) -> bool {
        self.inner.schema_check()
    }
}

/// Whether some operator that pushes a filter down in `phase` (a
/// `FilterExec` its predicate before the plan is final, the others their
/// dynamic filters after) has, in the subtree the filter enters, an
/// operator whose output names one field twice.
pub fn filters_may_land_on_namesakes(plan: &Arc<dyn ExecutionPlan>, phase: FilterPushdownPhase) -> bool {
    let filtered: Vec<&Arc<dyn ExecutionPlan>> = if phase == FilterPushdownPhase::Pre {
        plan.downcast_ref::<FilterExec>().map(|filter| vec![filter.input()]).unwrap_or_default()
    } else if let Some(join) = plan.downcast_ref::<HashJoinExec>() {
        if *join.partition_mode() == PartitionMode::Partitioned && !hash_repartitioned(join.right()) {
            return true;
        }
        vec![join.right()]
    } else if let Some(sort) = plan.downcast_ref::<SortExec>() {
        if sort.fetch().is_some() { vec![sort.input()] } else { vec![] }
    } else if let Some(aggregate) = plan.downcast_ref::<AggregateExec>() {
        // A partial aggregate without groups pushes its min/max bounds.
        if aggregate.group_expr().is_empty() && *aggregate.mode() == AggregateMode::Partial { vec![aggregate.input()] } else { vec![] }
    } else {
        vec![]
    };
    filtered.into_iter().any(has_namesakes) || plan.children().into_iter().any(|child| filters_may_land_on_namesakes(child, phase))
}

/// Whether `plan`'s partitions are those of a DataFusion hash repartition
/// (on every path down to a leaf), as a partitioned hash join's dynamic
/// filter assumes; not when they are a FoamDB layout.
fn hash_repartitioned(plan: &Arc<dyn ExecutionPlan>) -> bool {
    if let Some(repartition) = plan.downcast_ref::<RepartitionExec>() {
        return matches!(repartition.partitioning(), Partitioning::Hash(..));
    }
    let children = plan.children();
    !children.is_empty() && children.into_iter().all(hash_repartitioned)
}

fn has_namesakes(plan: &Arc<dyn ExecutionPlan>) -> bool {
    let schema = plan.schema();
    let mut names = HashSet::new();
    schema.fields().iter().any(|field| !names.insert(field.name())) || plan.children().into_iter().any(has_namesakes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::{DataType, Field, Schema};
    use datafusion::common::NullEquality;
    use datafusion::physical_expr::expressions::{col, is_not_null};
    use FilterPushdownPhase::{Post, Pre};
    use datafusion::physical_plan::empty::EmptyExec;
    use datafusion::physical_plan::joins::PartitionMode;
    use datafusion::logical_expr::JoinType;

    fn table(names: &[&str]) -> Arc<dyn ExecutionPlan> {
        Arc::new(EmptyExec::new(Arc::new(Schema::new(names.iter().map(|n| Field::new(*n, DataType::Int32, true)).collect::<Vec<_>>()))))
    }

    fn join(left: Arc<dyn ExecutionPlan>, right: Arc<dyn ExecutionPlan>, kind: JoinType) -> Arc<dyn ExecutionPlan> {
        let on = vec![(col("a", &left.schema()).unwrap(), col("a", &right.schema()).unwrap())];
        Arc::new(
            HashJoinExec::try_new(left, right, on, None, &kind, None, PartitionMode::CollectLeft, NullEquality::NullEqualsNothing, false)
                .unwrap(),
        )
    }

    #[test]
    fn a_self_join_on_the_probe_side_turns_dynamic_filters_off() {
        // r3 ⋉ (r1 ⋈ r2): the self-join's output names `a` twice.
        let self_join = join(table(&["a", "b"]), table(&["a", "c"]), JoinType::Inner);
        assert!(!filters_may_land_on_namesakes(&self_join, Post), "a join of two leaves filters leaves, not namesakes");
        let semi = join(table(&["a"]), self_join.clone(), JoinType::RightSemi);
        assert!(filters_may_land_on_namesakes(&semi, Post));
        assert!(!filters_may_land_on_namesakes(&semi, Pre), "no FilterExec pushes a predicate");
        // The same self-join as the build side is not filtered.
        let build = join(self_join, table(&["a"]), JoinType::LeftSemi);
        assert!(!filters_may_land_on_namesakes(&build, Post));
    }

    #[test]
    fn a_filter_over_a_self_join_turns_filter_pushdown_off() {
        let self_join = join(table(&["a", "b"]), table(&["a", "c"]), JoinType::Right);
        let predicate = col("b", &self_join.schema()).unwrap();
        let filter: Arc<dyn ExecutionPlan> = Arc::new(FilterExec::try_new(is_not_null(predicate).unwrap(), self_join).unwrap());
        assert!(filters_may_land_on_namesakes(&filter, Pre));
        assert!(!filters_may_land_on_namesakes(&filter, Post), "no operator pushes a dynamic filter");
        let over_a_leaf: Arc<dyn ExecutionPlan> =
            Arc::new(FilterExec::try_new(is_not_null(col("a", &table(&["a"]).schema()).unwrap()).unwrap(), table(&["a"])).unwrap());
        assert!(!filters_may_land_on_namesakes(&over_a_leaf, Pre));
    }

    #[test]
    fn a_partitioned_join_over_a_foamdb_layout_turns_dynamic_filters_off() {
        let partitioned = |left: Arc<dyn ExecutionPlan>, right: Arc<dyn ExecutionPlan>| -> Arc<dyn ExecutionPlan> {
            let on = vec![(col("a", &left.schema()).unwrap(), col("a", &right.schema()).unwrap())];
            Arc::new(
                HashJoinExec::try_new(left, right, on, None, &JoinType::Inner, None, PartitionMode::Partitioned, NullEquality::NullEqualsNothing, false)
                    .unwrap(),
            )
        };
        let hashed = |input: Arc<dyn ExecutionPlan>| -> Arc<dyn ExecutionPlan> {
            let key = col("a", &input.schema()).unwrap();
            Arc::new(RepartitionExec::try_new(input, Partitioning::Hash(vec![key], 4)).unwrap())
        };
        // Leaves standing for partitions laid out by FoamDB, not by DataFusion's hash.
        let co_located = partitioned(table(&["a", "b"]), table(&["a", "c"]));
        assert!(filters_may_land_on_namesakes(&co_located, Post));
        assert!(!filters_may_land_on_namesakes(&co_located, Pre));
        let repartitioned = partitioned(hashed(table(&["a", "b"])), hashed(table(&["a", "c"])));
        assert!(!filters_may_land_on_namesakes(&repartitioned, Post), "DataFusion's own hash partitions route right");
    }
}
