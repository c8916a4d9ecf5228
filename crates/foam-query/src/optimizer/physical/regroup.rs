//! Reads a scan's partitions in fewer, longer streams when nothing above the
//! scan relies on its hash partitioning.
//!
//! A scan of a hash-distributed table has one DataFusion partition per FoamDB
//! partition (see `exec/scan.rs`), which is what lets joins and aggregates on
//! the distribution key run where the data is. Above a scan whose rows are
//! reshuffled anyway, those many partitions only cost: each keeps its own
//! partial-aggregate hash table, so a grouping with many distinct keys sends
//! one partial row per key *per partition* over the network (TPC-H Q17's
//! average per part key sent 3.4 times the rows it needed), and every
//! partition read is a stream of its own.
//!
//! ```text
//!   before: FoamScanExec Hash(l_orderkey, 16)  task on node 1 reads p0 | p4 | p8 | p12
//!   after:  FoamScanExec Unknown(2)            task on node 1 reads p0,p8 | p4,p12
//! ```
//! The rule runs after DataFusion's distribution rules and `copartition.rs`.
//! It regroups only scans whose partitioning no operator needs: none between
//! the scan and the next repartition, coalesce or merge above it requires a
//! hash distribution, pairs its inputs' partitions or declares a FoamDB layout
//! (`unneeded_scans`), so a co-located join, an aggregate grouped by the
//! distribution key or the staying side of a routed join keeps its
//! partitions; DataFusion's plan sanity check must pass as well. Each
//! owner's partitions are dealt round-robin over `target_partitions` groups, so every task still reads its
//! own node's partitions in that many parallel streams. A single node keeps
//! one stream per partition: it has no network traffic to save.

use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::physical_expr::Distribution;
use datafusion::config::ConfigOptions;
use datafusion::error::Result;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::ExecutionPlan;

use crate::exec::scan::{FoamScanExec, PartitionRead};

/// The physical optimizer rule (see the module documentation).
#[derive(Debug)]
pub struct ScanRegrouping {
    /// The node planning. On a single node nothing is shuffled over a
    /// network, and one stream per partition overlaps reading with computing
    /// better, so the rule only acts in a cluster of several nodes.
    pub node: Arc<crate::context::NodeContext>,
}

impl PhysicalOptimizerRule for ScanRegrouping {
    fn optimize(&self, plan: Arc<dyn ExecutionPlan>, config: &ConfigOptions) -> Result<Arc<dyn ExecutionPlan>> {
        if self.node.catalog.current().nodes.len() < 2
            || config.extensions.get::<crate::options::FoamOptions>().is_some_and(|o| !o.regroup_scans)
        {
            return Ok(plan);
        }
        let streams = config.execution.target_partitions.max(1);
        let mut scans: Vec<Arc<dyn ExecutionPlan>> = Vec::new();
        unneeded_scans(&plan, false, &mut scans);
        let mut plan = plan;
        for scan in scans {
            let Some(regrouped) = regrouped(&scan, streams)? else { continue };
            let candidate = plan.clone().transform_up(|node| {
                Ok(if Arc::ptr_eq(&node, &scan) { Transformed::yes(regrouped.clone()) } else { Transformed::no(node) })
            });
            // An operator that needed the scan's partitions rejects the
            // regrouped scan (or cannot be rebuilt over it): keep the scan.
            if let Ok(candidate) = candidate
                && sane(&candidate.data, config)
            {
                plan = candidate.data;
            }
        }
        Ok(plan)
    }

    fn name(&self) -> &str {
        "foam_scan_regrouping"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// The hash-distributed scans in `plan` whose partitioning no operator
/// needs: between the scan and the nearest operator above it that moves rows
/// between partitions (a repartition, a coalesce, a merge), none requires a
/// hash distribution of its input, pairs partitions of its inputs
/// (interleaving unions) or declares a FoamDB layout over it
/// (`FoamRoutedExec`). `needed` says whether an operator above `plan` does.
///
/// DataFusion's plan sanity check alone is not enough: one partition
/// satisfies every distribution requirement, so a scan regrouped into one
/// stream per task passed it under an aggregate grouped by the distribution
/// key below a `FoamRoutedExec`. In each task that one stream held the
/// task's own FoamDB partitions at position 0, while the routed side of the
/// join held partition `p` at position `p`, and the join paired partitions
/// that do not match (a join of two grouped subqueries on 4 nodes lost
/// three quarters of its matches).
#[allow(deprecated)] // required_input_distribution: what DataFusion 55 operators implement
fn unneeded_scans(plan: &Arc<dyn ExecutionPlan>, needed: bool, scans: &mut Vec<Arc<dyn ExecutionPlan>>) {
    use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
    use datafusion::physical_plan::repartition::RepartitionExec;
    use datafusion::physical_plan::sorts::sort_preserving_merge::SortPreservingMergeExec;
    use datafusion::physical_plan::union::InterleaveExec;
    if plan.downcast_ref::<FoamScanExec>().is_some_and(|scan| scan.spec().layout.is_some()) {
        if !needed {
            scans.push(plan.clone());
        }
        return;
    }
    let moves_rows = plan.is::<RepartitionExec>() || plan.is::<CoalescePartitionsExec>() || plan.is::<SortPreservingMergeExec>();
    let pairs_inputs = plan.is::<InterleaveExec>() || plan.is::<crate::exec::route::FoamRoutedExec>();
    let required = plan.required_input_distribution();
    for (index, child) in plan.children().into_iter().enumerate() {
        let child_needed = if moves_rows {
            false
        } else if pairs_inputs {
            true
        } else {
            match required.get(index) {
                Some(d) if crate::optimizer::physical::requirements::hash_keys(d).is_some() => true,
                Some(Distribution::SinglePartition) => false,
                _ => needed,
            }
        };
        unneeded_scans(child, child_needed, scans);
    }
}

/// The scan with each owner's partitions dealt over `streams` groups, or
/// `None` when it already reads no more groups than that.
fn regrouped(plan: &Arc<dyn ExecutionPlan>, streams: usize) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let Some(scan) = plan.downcast_ref::<FoamScanExec>() else { return Ok(None) };
    if scan.spec().groups.iter().filter(|g| !g.is_empty()).count() <= streams {
        return Ok(None);
    }
    let mut groups: Vec<Vec<PartitionRead>> = vec![Vec::new(); streams];
    let mut dealt: std::collections::BTreeMap<Option<foam_common::NodeId>, usize> = Default::default();
    for read in scan.reads() {
        let next = dealt.entry(read.owner).or_default();
        groups[*next % streams].push(read.clone());
        *next += 1;
    }
    groups.retain(|g| !g.is_empty());
    Ok(Some(Arc::new(scan.with_groups(groups, scan.spec().home)?)))
}

/// Whether every operator of `plan` gets the distribution and ordering it requires.
fn sane(plan: &Arc<dyn ExecutionPlan>, config: &ConfigOptions) -> bool {
    plan.apply(|node| {
        datafusion::physical_optimizer::sanity_checker::check_plan_sanity(node, &config.optimizer)?;
        Ok(TreeNodeRecursion::Continue)
    })
    .is_ok()
}
