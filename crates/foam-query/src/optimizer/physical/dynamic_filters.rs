//! Dynamic filters only where DataFusion 55 places them right: a guard
//! around its post-optimization filter pushdown (the rule that wires a
//! join's build-side bounds and a TopK's threshold to the scans below).
//!
//! DataFusion 55 maps a pushed-down filter's columns into each child by
//! name (apache/datafusion#25263, #25296; fixed upstream after 55 by
//! #25259). Below an operator whose output has two columns of one name —
//! `r1.a` and `r2.a` of a self-join, both `a` — a filter on the second can
//! land on the first and drop rows that match. The guard skips the rule for
//! a plan in which a filter could travel through such an operator: one with
//! a duplicate field name under the probe side of a hash join, under a sort
//! with a limit, or under a partial aggregate without groups (min/max). The
//! plan then runs without dynamic filters, which only ever save work.
//!
//! ```text
//!   HashJoinExec (semi)                        probe side:
//!     build: r3                                  ProjectionExec [a, b, a, b]   ◀ two `a`s:
//!     probe: ProjectionExec ─ HashJoinExec r1 ⋈ r2                               guard skips
//! ```

use std::collections::HashSet;
use std::sync::Arc;

use datafusion::config::ConfigOptions;
use datafusion::error::Result;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::joins::HashJoinExec;
use datafusion::physical_plan::sorts::sort::SortExec;

/// DataFusion's post-optimization filter pushdown, skipped for plans where
/// it may misplace a filter (see the module documentation).
#[derive(Debug)]
pub struct GuardedDynamicFilters {
    pub inner: Arc<dyn PhysicalOptimizerRule + Send + Sync>,
}

impl PhysicalOptimizerRule for GuardedDynamicFilters {
    fn optimize(&self, plan: Arc<dyn ExecutionPlan>, config: &ConfigOptions) -> Result<Arc<dyn ExecutionPlan>> {
        if filters_may_land_on_namesakes(&plan) {
            tracing::debug!("dynamic filters off for a plan with namesake columns below a filter's source");
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

/// Whether some operator that pushes a dynamic filter down has, in the
/// subtree the filter enters, an operator whose output names one field twice.
pub fn filters_may_land_on_namesakes(plan: &Arc<dyn ExecutionPlan>) -> bool {
    let filtered: Vec<&Arc<dyn ExecutionPlan>> = if let Some(join) = plan.downcast_ref::<HashJoinExec>() {
        vec![join.right()]
    } else if let Some(sort) = plan.downcast_ref::<SortExec>() {
        if sort.fetch().is_some() { vec![sort.input()] } else { vec![] }
    } else if let Some(aggregate) = plan.downcast_ref::<AggregateExec>() {
        // A partial aggregate without groups pushes its min/max bounds.
        if aggregate.group_expr().is_empty() && *aggregate.mode() == AggregateMode::Partial { vec![aggregate.input()] } else { vec![] }
    } else {
        vec![]
    };
    filtered.into_iter().any(has_namesakes) || plan.children().into_iter().any(filters_may_land_on_namesakes)
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
    use datafusion::physical_expr::expressions::col;
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
        assert!(!filters_may_land_on_namesakes(&self_join), "a join of two leaves filters leaves, not namesakes");
        let semi = join(table(&["a"]), self_join.clone(), JoinType::RightSemi);
        assert!(filters_may_land_on_namesakes(&semi));
        // The same self-join as the build side is not filtered.
        let build = join(self_join, table(&["a"]), JoinType::LeftSemi);
        assert!(!filters_may_land_on_namesakes(&build));
    }
}
