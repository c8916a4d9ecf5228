//! `FoamReplicaJoinExec`: a join whose collected (build) side reads only
//! `DISTRIBUTED REPLICATED` tables runs on every node against that node's own
//! copy, so the replicated rows never cross the network.
//!
//! ```text
//!   datafusion-distributed alone:               with FoamReplicaJoinExec:
//!   HashJoin (CollectLeft)                      FoamReplicaJoinExec   (its only child: the probe)
//!     ├ NetworkBroadcast ◀─ stage: one task       └ HashJoin (CollectLeft)
//!     │    scanning one copy of the table            ├ build: the replicated scan, reading the
//!     └ probe: one task per owner node               │        copy on whichever node runs the task
//!                                                    └ probe: one task per owner node
//! ```
//! The build side is hidden from datafusion-distributed's planner (it sees
//! one child), so no stage boundary is cut for it; it travels inside this
//! node's codec bytes and is collected once per task, where the task runs.
//! Only join types that never emit an unmatched build row qualify (inner,
//! right, right semi, anti and mark): each task then holds the whole build
//! side, exactly what a broadcast would have given it. A task on a node
//! without a live copy (one that joined after the table was filled and is
//! still catching up) reads a replica's copy instead.

use std::fmt;
use std::sync::{Arc, OnceLock};

use datafusion::common::JoinType;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::joins::{HashJoinExec, PartitionMode};
use datafusion::physical_plan::{
    ChildrenPropertiesMode, DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties, ReplaceChildrenOptions, displayable,
};
use foam_catalog::Distribution;

use crate::context::NodeContext;
use crate::exec::scan::{FoamScanExec, PartitionRead};

/// A collected hash join (see the module documentation). `join` is the
/// `HashJoinExec` with both children; only its probe side is a child here.
#[derive(Debug)]
pub struct FoamReplicaJoinExec {
    join: Arc<dyn ExecutionPlan>,
    /// `join` with its build side reading this node's copies, made at the
    /// first `execute` so the build side is collected once per task.
    localized: OnceLock<Arc<dyn ExecutionPlan>>,
}

impl FoamReplicaJoinExec {
    /// Wraps `join`, a collected hash join with two children.
    pub fn try_new(join: Arc<dyn ExecutionPlan>) -> Result<Self> {
        if !join.is::<HashJoinExec>() || join.children().len() != 2 {
            return Err(DataFusionError::Internal(format!("FoamReplicaJoinExec wraps a hash join, not {}", join.name())));
        }
        Ok(FoamReplicaJoinExec { join, localized: OnceLock::new() })
    }

    /// The wrapped join, both children included (what the codec sends).
    pub fn join(&self) -> &Arc<dyn ExecutionPlan> {
        &self.join
    }

    fn build(&self) -> &Arc<dyn ExecutionPlan> {
        self.join.children()[0]
    }

    fn probe(&self) -> &Arc<dyn ExecutionPlan> {
        self.join.children()[1]
    }
}

/// The join as a `FoamReplicaJoinExec` when it qualifies: a collected hash
/// join that emits no unmatched build row, whose build side reads only
/// replicated tables.
pub fn replica_join(node: &Arc<dyn ExecutionPlan>) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let Some(join) = node.downcast_ref::<HashJoinExec>() else { return Ok(None) };
    if join.mode != PartitionMode::CollectLeft || join.null_aware || !emits_only_probe_rows(join.join_type()) {
        return Ok(None);
    }
    if !reads_only_replicated_tables(join.left())? {
        return Ok(None);
    }
    Ok(Some(Arc::new(FoamReplicaJoinExec::try_new(node.clone())?)))
}

/// Join types whose output never includes an unmatched build-side row, so
/// every task may hold the whole build side (the types datafusion-distributed
/// broadcasts).
pub fn emits_only_probe_rows(join_type: &JoinType) -> bool {
    matches!(join_type, JoinType::Inner | JoinType::Right | JoinType::RightSemi | JoinType::RightAnti | JoinType::RightMark)
}

fn reads_only_replicated_tables(plan: &Arc<dyn ExecutionPlan>) -> Result<bool> {
    let mut only_replicated = true;
    let mut scans = 0;
    plan.apply(|node| {
        if node.children().is_empty() {
            match node.downcast_ref::<FoamScanExec>() {
                Some(scan) if scan.spec().replicated => scans += 1,
                _ => {
                    only_replicated = false;
                    return Ok(TreeNodeRecursion::Stop);
                }
            }
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    Ok(only_replicated && scans > 0)
}

/// `build` with every replicated scan reading the copy on this node, or a
/// replica's when this node holds no live copy.
fn localize(node: &NodeContext, build: &Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    let catalog = node.catalog.current();
    build
        .clone()
        .transform_up(|plan| {
            let Some(scan) = plan.downcast_ref::<FoamScanExec>() else { return Ok(Transformed::no(plan)) };
            let copies = match catalog.table_by_id(scan.spec().table_id).map(|t| &t.distribution) {
                Some(Distribution::Replicated { nodes }) => nodes.clone(),
                // This node's catalog may lag a table created a moment ago
                // (table ids are never reused, so it is the one planned):
                // the scan reads the copy the planning node chose.
                None => return Ok(Transformed::no(plan)),
                Some(Distribution::Hash { .. }) => return Err(DataFusionError::Plan(format!("table {} is no longer replicated", scan.spec().table_name))),
            };
            let owner = if copies.contains(&node.node_id) {
                None
            } else {
                Some(*copies.first().ok_or_else(|| {
                    DataFusionError::Execution(format!("no live copy of replicated table {}", scan.spec().table_name))
                })?)
            };
            let groups: Vec<Vec<PartitionRead>> = scan
                .spec()
                .groups
                .iter()
                .map(|group| group.iter().map(|read| PartitionRead { owner, ..read.clone() }).collect())
                .collect();
            Ok(Transformed::yes(Arc::new(scan.with_groups(groups, scan.spec().home)?) as Arc<dyn ExecutionPlan>))
        })
        .map(|t| t.data)
}

impl DisplayAs for FoamReplicaJoinExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let line = displayable(self.join.as_ref()).one_line().to_string();
        let join = line.split(", projection=").next().unwrap_or(&line);
        let build = displayable(strip_coalesce(self.build()).as_ref()).one_line().to_string();
        write!(f, "FoamReplicaJoinExec: {}; build on each node's own copy: {}", join.trim_end(), build.trim_end())
    }
}

fn strip_coalesce(plan: &Arc<dyn ExecutionPlan>) -> Arc<dyn ExecutionPlan> {
    match plan.downcast_ref::<CoalescePartitionsExec>() {
        Some(coalesce) => coalesce.input().clone(),
        None => plan.clone(),
    }
}

impl ExecutionPlan for FoamReplicaJoinExec {
    fn name(&self) -> &str {
        "FoamReplicaJoinExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.join.properties()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![self.probe()]
    }

    fn apply_expressions(&self, _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(self: Arc<Self>, children: Vec<Arc<dyn ExecutionPlan>>) -> Result<Arc<dyn ExecutionPlan>> {
        let [probe] = children.as_slice() else {
            return Err(DataFusionError::Internal(format!("FoamReplicaJoinExec has one child, given {}", children.len())));
        };
        let join = self.join.clone().replace_children(vec![self.build().clone(), probe.clone()], ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute))?;
        Ok(Arc::new(FoamReplicaJoinExec::try_new(join)?))
    }

    fn execute(&self, partition: usize, context: Arc<TaskContext>) -> Result<SendableRecordBatchStream> {
        let join = match self.localized.get() {
            Some(join) => join.clone(),
            None => {
                let node = NodeContext::from_config(context.session_config())?;
                let build = localize(&node, self.build())?;
                let join = self.join.clone().replace_children(vec![build, self.probe().clone()], ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute))?;
                self.localized.get_or_init(|| join).clone()
            }
        };
        join.execute(partition, context)
    }
}
