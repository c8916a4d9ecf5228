//! Keeps an operator's input requirements true after a FoamDB rule rewrote
//! the input below it.
//!
//! DataFusion's distribution and sorting rules place every coalesce, merge,
//! sort and repartition for the plan as it stands when they run. FoamDB's
//! physical rules run after them and change inputs' properties: a join that
//! collected one side becomes partitioned (its output goes from one
//! partition to the owners' partitions, in no order), a side is routed. An
//! operator above that was planned for the old properties (a window over the
//! whole input, a merge of sorted partitions, a window partitioned by some
//! columns) would then run once per partition or over unsorted rows: a wrong
//! answer or an internal error. [`restore`] checks one operator's inputs
//! against what it requires and puts back what is missing:
//!
//! ```text
//!   one partition required, several arrive ─▶ coalesce (merge when sorted,
//!                                              sort into one when an order
//!                                              is required and missing)
//!   hash on keys required (one input)       ─▶ repartition on those keys
//!   an order required and missing           ─▶ sort each partition
//! ```
//!
//! Hash requirements of operators with several inputs (joins, interleaving
//! unions) pair partitions across inputs; those are the co-partitioning
//! rule's to place (`copartition.rs`), and are left alone here.

use std::sync::Arc;

use datafusion::common::tree_node::Transformed;
use datafusion::error::Result;
use datafusion::physical_expr::{Distribution, LexOrdering, LexRequirement, OrderingRequirements, Partitioning, PartitioningSatisfaction};
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::sorts::sort_preserving_merge::SortPreservingMergeExec;
use datafusion::physical_plan::{ChildrenPropertiesMode, ExecutionPlan, ExecutionPlanProperties, ReplaceChildrenOptions};

/// Whether `plan`'s partitions are each ordered as one of `required`'s
/// alternatives asks (a soft requirement is always met).
fn ordered(plan: &Arc<dyn ExecutionPlan>, required: &OrderingRequirements) -> Result<bool> {
    let (alternatives, soft) = required.clone().into_alternatives();
    if soft {
        return Ok(true);
    }
    for alternative in alternatives {
        if plan.equivalence_properties().ordering_satisfy_requirement(alternative)? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// The ordering a sort must produce to meet `required`, without the
/// columns that are constant in `plan` (they need no sorting); `None` when
/// nothing is left to sort on.
fn sort_ordering(plan: &Arc<dyn ExecutionPlan>, required: &LexRequirement) -> Option<LexOrdering> {
    let properties = plan.equivalence_properties();
    let kept = required.iter().filter(|r| properties.is_expr_constant(&r.expr).is_none()).cloned().map(Into::into);
    LexOrdering::new(kept)
}

/// The keys of a hash (or key) partitioning requirement.
#[allow(deprecated)] // HashPartitioned is still what DataFusion 55 operators require
pub(crate) fn hash_keys(distribution: &Distribution) -> Option<&Vec<Arc<dyn datafusion::physical_expr::PhysicalExpr>>> {
    match distribution {
        Distribution::HashPartitioned(keys) | Distribution::KeyPartitioned(keys) => Some(keys),
        _ => None,
    }
}

/// `child` brought to what its parent requires of it (see the module
/// documentation); `target` is the partition count of a repartition.
fn restore_input(
    child: Arc<dyn ExecutionPlan>,
    distribution: &Distribution,
    ordering: Option<&OrderingRequirements>,
    only_input: bool,
    target: usize,
) -> Result<Transformed<Arc<dyn ExecutionPlan>>> {
    let partitions = child.output_partitioning().partition_count();
    let required_order = match ordering {
        Some(required) if !ordered(&child, required)? => Some(sort_ordering(&child, required.first())),
        _ => None,
    };
    if matches!(distribution, Distribution::SinglePartition) && partitions > 1 {
        let merged: Arc<dyn ExecutionPlan> = match (ordering, required_order) {
            // Each partition is sorted already: merge them in order.
            (Some(required), None) => match sort_ordering(&child, required.first()) {
                Some(order) => Arc::new(SortPreservingMergeExec::new(order, child)),
                None => Arc::new(CoalescePartitionsExec::new(child)),
            },
            (_, Some(Some(order))) => Arc::new(SortExec::new(order, child)),
            _ => Arc::new(CoalescePartitionsExec::new(child)),
        };
        return Ok(Transformed::yes(merged));
    }
    let mut child = child;
    let mut changed = false;
    if let Some(keys) = hash_keys(distribution)
        && only_input
        && partitions > 1
        && child.output_partitioning().satisfaction(distribution, child.equivalence_properties(), true) == PartitioningSatisfaction::NotSatisfied
    {
        let repartition = RepartitionExec::try_new(child, Partitioning::Hash(keys.clone(), target))?.with_preserve_order();
        child = Arc::new(repartition);
        changed = true;
    }
    if let Some(required) = ordering
        && !ordered(&child, required)?
        && let Some(order) = sort_ordering(&child, required.first())
    {
        let preserve = child.output_partitioning().partition_count() > 1;
        child = Arc::new(SortExec::new(order, child).with_preserve_partitioning(preserve));
        changed = true;
    }
    Ok(if changed { Transformed::yes(child) } else { Transformed::no(child) })
}

/// `node` with every input brought to what `node` requires of it, rebuilt
/// over the new inputs when one changed.
pub fn restore(node: Arc<dyn ExecutionPlan>, target: usize) -> Result<Transformed<Arc<dyn ExecutionPlan>>> {
    let children: Vec<Arc<dyn ExecutionPlan>> = node.children().into_iter().cloned().collect();
    if children.is_empty() {
        return Ok(Transformed::no(node));
    }
    let distributions = node.input_distribution_requirements().into_per_child();
    let orderings = node.required_input_ordering();
    let only_input = children.len() == 1;
    let mut changed = false;
    let mut restored = Vec::with_capacity(children.len());
    for (i, child) in children.into_iter().enumerate() {
        let distribution = distributions.get(i).cloned().unwrap_or(Distribution::UnspecifiedDistribution);
        let ordering = orderings.get(i).and_then(|o| o.as_ref());
        let input = restore_input(child, &distribution, ordering, only_input, target)?;
        changed |= input.transformed;
        restored.push(input.data);
    }
    if !changed {
        return Ok(Transformed::no(node));
    }
    Ok(Transformed::yes(node.replace_children(restored, ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute))?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::{DataType, Field, Schema};
    use datafusion::physical_expr::PhysicalSortExpr;
    use datafusion::physical_expr::expressions::col;
    use datafusion::physical_plan::empty::EmptyExec;
    use datafusion::physical_plan::limit::GlobalLimitExec;

    fn input(partitions: usize) -> Arc<dyn ExecutionPlan> {
        let schema = Arc::new(Schema::new(vec![Field::new("a", DataType::Int64, true)]));
        Arc::new(EmptyExec::new(schema).with_partitions(partitions))
    }

    #[test]
    fn a_single_partition_input_that_became_several_is_coalesced() {
        let limit: Arc<dyn ExecutionPlan> = Arc::new(GlobalLimitExec::new(input(1), 0, Some(3)));
        let rewritten = limit.replace_children(vec![input(4)], ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute)).unwrap();
        let restored = restore(rewritten, 4).unwrap();
        assert!(restored.transformed);
        let child = restored.data.children()[0].clone();
        assert!(child.is::<CoalescePartitionsExec>());
        assert_eq!(child.output_partitioning().partition_count(), 1);
        // What already holds is left as it is.
        assert!(!restore(restored.data, 4).unwrap().transformed);
    }

    #[test]
    fn a_required_order_that_was_lost_is_sorted_again() {
        let schema = input(1).schema();
        let order = LexOrdering::new(vec![PhysicalSortExpr::new_default(col("a", &schema).unwrap())]).unwrap();
        let sorted: Arc<dyn ExecutionPlan> = Arc::new(SortExec::new(order.clone(), input(1)));
        let merge: Arc<dyn ExecutionPlan> = Arc::new(SortPreservingMergeExec::new(order, sorted));
        // The sorted input replaced by an unsorted one of several partitions.
        let rewritten = merge.replace_children(vec![input(3)], ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute)).unwrap();
        let restored = restore(rewritten, 3).unwrap().data;
        let child = restored.children()[0].clone();
        assert!(child.is::<SortExec>(), "{child:?}");
        assert_eq!(child.output_partitioning().partition_count(), 3);
    }
}
