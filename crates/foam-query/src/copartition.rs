//! Keeps co-partitioned operators honest about *whose* hash made the partitions.
//!
//! A `FoamScanExec` of a hash-distributed table declares `Hash(keys, n)`: its
//! partition `p` holds the rows FoamDB's partition hash sends to `p`. DataFusion
//! treats every `Hash` partitioning as made by its own hash function, so on its
//! own it would also pair a FoamDB-hashed side with a side its `RepartitionExec`
//! hashed, whenever the partition counts happen to match, and lose rows. This
//! rule runs after DataFusion's distribution rules and, for every operator that
//! processes partition `i` of each input together (partitioned hash and
//! sort-merge joins, interleaving unions), checks where each input's
//! partitioning comes from:
//!
//! ```text
//!   both from FoamDB scans with the same layout, keys paired by the join ─▶ co-located: keep
//!   both from DataFusion repartitions                                     ─▶ keep
//!   anything else                                                         ─▶ hash-repartition the
//!                                                                            FoamDB-hashed inputs
//! ```
//! so a join between two tables distributed on the join key with the same
//! placement (TPC-H lineitem and orders on orderkey) runs where the data is,
//! and every other pairing is shuffled as DataFusion would.

use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::config::ConfigOptions;
use datafusion::error::Result;
use datafusion::physical_expr::{Distribution, Partitioning, PhysicalExpr};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::union::InterleaveExec;
use datafusion::physical_plan::{ChildrenPropertiesMode, ExecutionPlan, ExecutionPlanProperties, ReplaceChildrenOptions};
use foam_common::NodeId;

use crate::scan_exec::FoamScanExec;

/// Where an input's hash partitioning comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
enum HashOrigin {
    /// FoamDB's partition hash, as laid out by these owners.
    Foam { owners: Vec<NodeId> },
    /// A DataFusion `RepartitionExec`.
    DataFusion,
    /// Not hash partitioned, or from a mix of sources.
    Unknown,
}

fn origin(plan: &Arc<dyn ExecutionPlan>) -> HashOrigin {
    if !matches!(plan.output_partitioning(), Partitioning::Hash(..)) {
        return HashOrigin::Unknown;
    }
    if let Some(scan) = plan.downcast_ref::<FoamScanExec>() {
        return match &scan.spec().layout {
            Some(layout) => HashOrigin::Foam { owners: layout.owners.clone() },
            None => HashOrigin::Unknown,
        };
    }
    if plan.is::<RepartitionExec>() {
        return HashOrigin::DataFusion;
    }
    let mut hashed = plan
        .children()
        .into_iter()
        .filter(|child| matches!(child.output_partitioning(), Partitioning::Hash(..)))
        .map(origin);
    let Some(first) = hashed.next() else {
        return HashOrigin::Unknown;
    };
    if hashed.all(|other| other == first) { first } else { HashOrigin::Unknown }
}

/// The key expressions an operator requires of each input when it processes
/// equal partition numbers of all inputs together, or `None`.
#[allow(deprecated)] // HashPartitioned is still what DataFusion 55 joins return
fn co_partitioned_keys(plan: &Arc<dyn ExecutionPlan>) -> Option<Vec<Vec<Arc<dyn PhysicalExpr>>>> {
    let required = plan.required_input_distribution();
    if required.len() < 2 {
        return None;
    }
    required
        .into_iter()
        .map(|d| match d {
            Distribution::HashPartitioned(exprs) | Distribution::KeyPartitioned(exprs) => Some(exprs),
            _ => None,
        })
        .collect()
}

/// True when the inputs are FoamDB-hashed with one layout and each input's
/// hash keys are the required keys in the same pairing: key `j` of input 0
/// and key `j` of input 1 are the two sides of one join condition.
fn co_located(children: &[&Arc<dyn ExecutionPlan>], required: &[Vec<Arc<dyn PhysicalExpr>>]) -> bool {
    let origins: Vec<HashOrigin> = children.iter().map(|c| origin(c)).collect();
    if !matches!(origins[0], HashOrigin::Foam { .. }) || origins.iter().any(|o| *o != origins[0]) {
        return false;
    }
    let keys: Vec<&Vec<Arc<dyn PhysicalExpr>>> = children
        .iter()
        .filter_map(|c| match c.output_partitioning() {
            Partitioning::Hash(exprs, _) => Some(exprs),
            _ => None,
        })
        .collect();
    if keys.len() != children.len() {
        return false;
    }
    let width = keys[0].len();
    if keys.iter().any(|k| k.len() != width) {
        return false;
    }
    // For each hash key position, the one join condition it belongs to.
    (0..width).all(|j| {
        let Some(condition) = required[0].iter().position(|e| e.eq(&keys[0][j])) else {
            return false;
        };
        let types_match = {
            let first = keys[0][j].data_type(&children[0].schema());
            children.iter().zip(&keys).all(|(child, k)| k[j].data_type(&child.schema()).ok() == first.as_ref().ok().cloned())
        };
        types_match && required.iter().zip(&keys).all(|(req, k)| req.get(condition).is_some_and(|e| e.eq(&k[j])))
    })
}

/// The physical optimizer rule (see the module documentation).
#[derive(Debug, Default)]
pub struct CoPartitioning;

impl PhysicalOptimizerRule for CoPartitioning {
    fn optimize(&self, plan: Arc<dyn ExecutionPlan>, config: &ConfigOptions) -> Result<Arc<dyn ExecutionPlan>> {
        let target = config.execution.target_partitions.max(1);
        plan.transform_up(|node| fix(node, target)).map(|t| t.data)
    }

    fn name(&self) -> &str {
        "foam_co_partitioning"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

fn fix(node: Arc<dyn ExecutionPlan>, target: usize) -> Result<Transformed<Arc<dyn ExecutionPlan>>> {
    let owned: Vec<Arc<dyn ExecutionPlan>> = node.children().into_iter().cloned().collect();
    let children: Vec<&Arc<dyn ExecutionPlan>> = owned.iter().collect();
    if children.len() < 2 || children.iter().all(|c| c.output_partitioning().partition_count() <= 1) {
        return Ok(Transformed::no(node));
    }
    let required: Vec<Vec<Arc<dyn PhysicalExpr>>> = if let Some(keys) = co_partitioned_keys(&node) {
        keys
    } else if node.is::<InterleaveExec>() {
        // Interleaving pairs partition `i` of every input: each must hash its
        // own partitioning keys the same way.
        children
            .iter()
            .map(|c| match c.output_partitioning() {
                Partitioning::Hash(exprs, _) => exprs.clone(),
                _ => Vec::new(),
            })
            .collect()
    } else {
        return Ok(Transformed::no(node));
    };
    let origins: Vec<HashOrigin> = children.iter().map(|c| origin(c)).collect();
    if origins.iter().all(|o| *o == HashOrigin::DataFusion) || co_located(&children, &required) {
        return Ok(Transformed::no(node));
    }
    // Shuffle every input DataFusion did not hash, to the partition count of
    // the inputs it did (or the session's target).
    let count = children
        .iter()
        .zip(&origins)
        .find(|(_, o)| **o == HashOrigin::DataFusion)
        .map(|(c, _)| c.output_partitioning().partition_count())
        .unwrap_or(target);
    let mut new_children = Vec::with_capacity(children.len());
    for ((child, origin), keys) in owned.into_iter().zip(&origins).zip(required) {
        if *origin == HashOrigin::DataFusion || keys.is_empty() {
            new_children.push(child);
        } else {
            let repartition = RepartitionExec::try_new(child, Partitioning::Hash(keys, count))?.with_preserve_order();
            new_children.push(Arc::new(repartition) as Arc<dyn ExecutionPlan>);
        }
    }
    Ok(Transformed::yes(node.replace_children(new_children, ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute))?))
}
