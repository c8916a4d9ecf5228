//! Reads a scan's partitions in fewer, longer streams when nothing above the
//! scan relies on its hash partitioning.
//!
//! A scan of a hash-distributed table has one DataFusion partition per FoamDB
//! partition (see `scan_exec.rs`), which is what lets joins and aggregates on
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
//! For each hash-distributed scan it tries the regrouped scan and keeps it only
//! if every operator's distribution requirement still holds (DataFusion's own
//! plan sanity check), so a co-located join or an aggregate grouped by the
//! distribution key keeps its partitions. Each owner's partitions are dealt
//! round-robin over `target_partitions` groups, so every task still reads its
//! own node's partitions in that many parallel streams. A single node keeps
//! one stream per partition: it has no network traffic to save.

use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::config::ConfigOptions;
use datafusion::error::Result;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::ExecutionPlan;

use crate::scan_exec::{FoamScanExec, PartitionRead};

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
            || config.extensions.get::<crate::distributed::FoamOptions>().is_some_and(|o| !o.regroup_scans)
        {
            return Ok(plan);
        }
        let streams = config.execution.target_partitions.max(1);
        let mut scans: Vec<Arc<dyn ExecutionPlan>> = Vec::new();
        // A scan under a `FoamRoutedExec` has its layout declared there
        // (a join on more keys than the distribution key, copartition.rs),
        // which the sanity check cannot see depends on the scan.
        let mut declared: Vec<Arc<dyn ExecutionPlan>> = Vec::new();
        plan.apply(|node| {
            if node.is::<crate::route::FoamRoutedExec>() {
                declared.extend(node.children().into_iter().cloned());
            }
            if node.downcast_ref::<FoamScanExec>().is_some_and(|scan| scan.spec().layout.is_some())
                && !declared.iter().any(|d| Arc::ptr_eq(d, node))
            {
                scans.push(node.clone());
            }
            Ok(TreeNodeRecursion::Continue)
        })?;
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
