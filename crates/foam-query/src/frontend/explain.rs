//! What `EXPLAIN` adds below the distributed plan: every exchange of data
//! between nodes and how each join gets its inputs together.
//!
//! ```text
//!   join inputs, each followed down to its first exchange (or its scan):
//!     none on either side            ─▶ co-located   (rows joined where they are stored)
//!     a shuffle on one side only     ─▶ shuffle-one-side
//!     a shuffle on both sides        ─▶ shuffle-both
//!     a broadcast                    ─▶ broadcast
//!     a gather to one task           ─▶ gather
//!   a join collecting only replicated tables, against each node's own copy
//!                                    ─▶ none (replicated)
//!   every network boundary           ─▶ its kind and the tasks on both ends
//! ```
//! The plan snapshot tests pin these lines for the 22 TPC-H queries, so a
//! change that adds a shuffle shows up as a failing test.

use std::sync::Arc;

use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::physical_plan::{ExecutionPlan, displayable};

/// How one input of a join reaches it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Input {
    Local,
    Shuffle,
    Broadcast,
    Gather,
}

fn input_of(plan: &Arc<dyn ExecutionPlan>) -> Input {
    match plan.name() {
        "NetworkShuffleExec" => Input::Shuffle,
        "NetworkBroadcastExec" => Input::Broadcast,
        "NetworkCoalesceExec" => Input::Gather,
        _ => match plan.children().as_slice() {
            [only] => input_of(only),
            _ => Input::Local,
        },
    }
}

/// The exchange kind of a join from how its inputs arrive.
fn join_exchange(inputs: &[Input]) -> &'static str {
    let count = |kind: Input| inputs.iter().filter(|i| **i == kind).count();
    if count(Input::Broadcast) > 0 {
        "broadcast"
    } else if count(Input::Gather) > 0 {
        "gather"
    } else if count(Input::Shuffle) == inputs.len() {
        "shuffle-both"
    } else if count(Input::Shuffle) > 0 {
        "shuffle-one-side"
    } else {
        "co-located"
    }
}

fn is_join(plan: &dyn ExecutionPlan) -> bool {
    matches!(
        plan.name(),
        "HashJoinExec" | "SortMergeJoinExec" | "SymmetricHashJoinExec" | "NestedLoopJoinExec" | "CrossJoinExec"
    )
}

/// The lines describing each join and each network boundary of a
/// distributed plan, in plan order (top down).
pub fn exchanges(plan: &Arc<dyn ExecutionPlan>) -> Vec<String> {
    let mut lines = Vec::new();
    let _ = plan.apply(|node| {
        if node.is::<crate::exec::replica_join::FoamReplicaJoinExec>() {
            let line = displayable(node.as_ref()).one_line().to_string();
            lines.push(format!("{}  ─ exchange: none (replicated, each node's own copy)", line.trim_end()));
        } else if is_join(node.as_ref()) {
            let inputs: Vec<Input> = node.children().into_iter().map(input_of).collect();
            let line = displayable(node.as_ref()).one_line().to_string();
            let line = line.split(", projection=").next().unwrap_or(&line).trim_end().to_string();
            lines.push(format!("{line}  ─ exchange: {}", join_exchange(&inputs)));
        }
        let kind = match node.name() {
            "NetworkShuffleExec" => Some("shuffle"),
            "NetworkBroadcastExec" => Some("broadcast"),
            "NetworkCoalesceExec" => Some("gather"),
            _ => None,
        };
        if let Some(kind) = kind {
            let line = displayable(node.as_ref()).one_line().to_string();
            lines.push(format!("{}  ─ exchange: {kind}", line.trim_end()));
        }
        Ok(TreeNodeRecursion::Continue)
    });
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn join_kinds_follow_from_their_inputs() {
        assert_eq!(join_exchange(&[Input::Local, Input::Local]), "co-located");
        assert_eq!(join_exchange(&[Input::Shuffle, Input::Local]), "shuffle-one-side");
        assert_eq!(join_exchange(&[Input::Shuffle, Input::Shuffle]), "shuffle-both");
        assert_eq!(join_exchange(&[Input::Broadcast, Input::Local]), "broadcast");
        assert_eq!(join_exchange(&[Input::Gather, Input::Local]), "gather");
    }
}
