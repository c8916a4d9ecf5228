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
//!   both hashed by DataFusion on the keys the operator pairs              ─▶ keep
//!   anything else                                                         ─▶ hash-repartition the
//!                                                                            FoamDB-hashed inputs
//! ```
//! so a join between two tables distributed on the join key with the same
//! placement (TPC-H lineitem and orders on orderkey) runs where the data is,
//! a join with one such side moves only the other side, and every other
//! pairing is shuffled as DataFusion would. A join DataFusion chose to run by
//! collecting its small side (broadcast) becomes co-located or routed too when
//! that moves less: never more than a broadcast, which copies the small side
//! to every task. One that collects only replicated tables joins each node's
//! own copy (`replica_join.rs`) and moves nothing. An aggregate grouped by
//! the keys such a join left its output partitioned on runs in one step where
//! the rows are, without the shuffle DataFusion planned before the rewrite.

use std::sync::Arc;

use arrow::datatypes::Schema;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::config::ConfigOptions;
use datafusion::error::Result;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::{Distribution, Partitioning, PhysicalExpr, physical_exprs_equal};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode, PhysicalGroupBy};
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::joins::{HashJoinExec, PartitionMode};
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::statistics::{StatisticsArgs, StatisticsContext};
use datafusion::physical_plan::union::InterleaveExec;
use datafusion::physical_plan::{ChildrenPropertiesMode, ExecutionPlan, ExecutionPlanProperties, ReplaceChildrenOptions};
use foam_common::NodeId;

use crate::exec::scan::FoamScanExec;

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
    if let Some(routed) = plan.downcast_ref::<crate::exec::route::FoamRoutedExec>() {
        // Laid out by some of its keys: like no layout on all of them.
        if routed.spec().by_some_keys {
            return HashOrigin::Unknown;
        }
        return HashOrigin::Foam { owners: routed.spec().owners.clone() };
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
#[allow(deprecated)] // required_input_distribution: what DataFusion 55 joins implement
fn co_partitioned_keys(plan: &Arc<dyn ExecutionPlan>) -> Option<Vec<Vec<Arc<dyn PhysicalExpr>>>> {
    let required = plan.required_input_distribution();
    if required.len() < 2 {
        return None;
    }
    required.iter().map(|d| crate::optimizer::physical::requirements::hash_keys(d).cloned()).collect()
}

/// Whether `child` is hash partitioned on exactly `keys` (or on what its
/// equivalences make the same), as an operator pairing partitions needs.
fn partitioned_on(child: &Arc<dyn ExecutionPlan>, keys: &[Arc<dyn PhysicalExpr>]) -> bool {
    #[allow(deprecated)] // HashPartitioned is still what DataFusion 55 joins require
    let required = Distribution::HashPartitioned(keys.to_vec());
    child.output_partitioning().satisfaction(&required, child.equivalence_properties(), false).is_satisfied()
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
    if keys.iter().any(|k| k.len() != width) || required.iter().any(|r| r.len() != width) {
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

/// For each hash key position of `child`, the join condition it belongs to,
/// when every key is one side of a distinct condition. With `subset`, the
/// keys may be some of the join's (see [`route_on_some_keys`]).
fn key_conditions(child: &Arc<dyn ExecutionPlan>, required: &[Arc<dyn PhysicalExpr>], subset: bool) -> Option<Vec<usize>> {
    let Partitioning::Hash(keys, _) = child.output_partitioning() else { return None };
    if keys.is_empty() || keys.len() > required.len() || (!subset && keys.len() != required.len()) {
        return None;
    }
    positions(keys, required.iter())
}

/// For each of `keys`, the position of the one expression of `among` equal
/// to it, when every key has one and no two keys share it.
fn positions<'a>(keys: &[Arc<dyn PhysicalExpr>], among: impl Iterator<Item = &'a Arc<dyn PhysicalExpr>> + Clone) -> Option<Vec<usize>> {
    let found: Vec<usize> = keys.iter().map(|k| among.clone().position(|e| e.eq(k))).collect::<Option<_>>()?;
    let mut sorted = found.clone();
    sorted.sort_unstable();
    sorted.windows(2).all(|w| w[0] != w[1]).then_some(found)
}

/// `positions` of `keys` in `among` when they are all of `among` in another
/// order: the order to list `among` in to match `keys`.
fn reordering<'a>(keys: &[Arc<dyn PhysicalExpr>], among: impl ExactSizeIterator<Item = &'a Arc<dyn PhysicalExpr>> + Clone) -> Option<Vec<usize>> {
    if keys.len() != among.len() {
        return None;
    }
    let order = positions(keys, among)?;
    let in_order = order.iter().enumerate().all(|(i, &o)| i == o);
    (!in_order).then_some(order)
}

/// The input of a hash repartition on keys that include all those its
/// FoamDB-hashed input is already partitioned by (a repartition that only
/// changes the partition count, or hashes on more keys than a join needs).
fn foam_under_repartition(child: &Arc<dyn ExecutionPlan>) -> Option<Arc<dyn ExecutionPlan>> {
    let repartition = child.downcast_ref::<RepartitionExec>()?;
    let Partitioning::Hash(keys, _) = repartition.partitioning() else { return None };
    let input = repartition.input();
    let Partitioning::Hash(input_keys, _) = input.output_partitioning() else { return None };
    let covered = !input_keys.is_empty() && input_keys.iter().all(|k| keys.iter().any(|key| key.eq(k)));
    (covered && matches!(origin(input), HashOrigin::Foam { .. })).then(|| input.clone())
}

/// A partitioned hash join with one input FoamDB-hashed on the join keys and
/// the other hashed by a DataFusion `RepartitionExec`: the latter is replaced
/// by a shuffle that routes its rows to the tasks holding the matching
/// partitions (`route.rs`), so the FoamDB table's rows never move.
fn route_one_side(
    node: &Arc<dyn ExecutionPlan>,
    children: &[Arc<dyn ExecutionPlan>],
    origins: &[HashOrigin],
    required: &[Vec<Arc<dyn PhysicalExpr>>],
    workers: u64,
) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    if children.len() != 2 || !node.is::<HashJoinExec>() {
        return Ok(None);
    }
    for stays in 0..2 {
        let moves = 1 - stays;
        // The staying side may already be wrapped in a repartition on its own
        // keys (DataFusion adds one when partition counts differ): unwrap it.
        let stay_child = match &origins[stays] {
            HashOrigin::Foam { .. } => children[stays].clone(),
            _ => match foam_under_repartition(&children[stays]) {
                Some(input) => input,
                None => continue,
            },
        };
        if origins[moves] != HashOrigin::DataFusion {
            continue;
        }
        // The moving side: DataFusion's repartition of it, or a final
        // aggregate whose own shuffle already partitions it on the keys.
        let repartition = children[moves].downcast_ref::<RepartitionExec>();
        let moving = repartition.map_or(&children[moves], |r| r.input());
        let narrowed = if repartition.is_some() { narrowed_input(node, moves, moving)? } else { None };
        let (moving, move_keys, join) = match &narrowed {
            Some((input, join)) => (input, join_keys(join, moves), join.clone()),
            None => (moving, required[moves].clone(), node.clone()),
        };
        let routed = match route_to_owners(&stay_child, &required[stays], moving, &move_keys, workers, repartition.is_some())? {
            Some(routed) => Some((stay_child, routed)),
            None if repartition.is_some() => route_on_some_keys(&stay_child, &required[stays], moving, &move_keys, workers)?,
            None => None,
        };
        let Some((stay_child, routed)) = routed else {
            continue;
        };
        let mut new_children = children.to_vec();
        new_children[stays] = stay_child;
        new_children[moves] = routed;
        return Ok(Some(join.replace_children(new_children, ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute))?));
    }
    Ok(None)
}

/// A join whose staying input is FoamDB-hashed on some of its keys, not all:
/// rows that match on every condition match on those, so they meet in the
/// partition that holds them (TPC-H partsupp, distributed by `ps_partkey`,
/// joins lineitem on `ps_partkey` and `ps_suppkey`), and the moving input is
/// routed on its side of those keys alone. DataFusion checks that a
/// partitioned join's inputs are hashed on exactly its keys, so both inputs
/// then declare all of them (`FoamRoutedExec` passes rows through and
/// declares the layout): true of both, since rows equal on all the keys are
/// equal on the hashed ones. Both are marked `by_some_keys`, so no operator
/// above takes the join's output for a FoamDB layout on all those keys (a
/// table distributed on two columns with the same owners would otherwise
/// look co-located with it). Returns the staying and the routed input.
fn route_on_some_keys(
    stays: &Arc<dyn ExecutionPlan>,
    stay_keys: &[Arc<dyn PhysicalExpr>],
    moves: &Arc<dyn ExecutionPlan>,
    move_keys: &[Arc<dyn PhysicalExpr>],
    workers: u64,
) -> Result<Option<(Arc<dyn ExecutionPlan>, Arc<dyn ExecutionPlan>)>> {
    use crate::exec::route::{FoamRoutedExec, RouteSpec};
    let Some((owners, routed_keys)) = routing(stays, stay_keys, moves, move_keys, true) else { return Ok(None) };
    if routed_keys.len() == stay_keys.len() {
        return Ok(None);
    }
    let columns = |keys: &[Arc<dyn PhysicalExpr>]| keys.iter().map(|k| k.downcast_ref::<Column>().map(|c| c.index())).collect::<Option<Vec<usize>>>();
    let (Some(stay_columns), Some(move_columns)) = (columns(stay_keys), columns(move_keys)) else { return Ok(None) };
    let Some(routed) = crate::exec::route::routed_shuffle_declaring(moves.clone(), &routed_keys, Some(move_columns), &owners, workers)? else {
        return Ok(None);
    };
    let declared = FoamRoutedExec::try_new(stays.clone(), RouteSpec { key_columns: stay_columns, owners, by_some_keys: true })?;
    Ok(Some((Arc::new(declared), routed)))
}

/// A hash join's key expressions on input `side`.
fn join_keys(join: &Arc<dyn ExecutionPlan>, side: usize) -> Vec<Arc<dyn PhysicalExpr>> {
    match join.downcast_ref::<HashJoinExec>() {
        Some(join) => join.on().iter().map(|(l, r)| if side == 0 { l.clone() } else { r.clone() }).collect(),
        None => Vec::new(),
    }
}

/// When an inner, semi or anti hash join without a filter uses only some
/// columns of its `side` input (its keys and the columns it outputs), that
/// input without the others, and the join rewritten over it (its output
/// unchanged), so routing that input sends no column nobody reads.
/// DataFusion's planner keeps every input column next to an expression key:
/// the self-join `b.row_no = a.row_no + 3` routed `a.row_no` beside
/// `a.row_no + 3`, twice the bytes it needed. A projection input keeps only
/// its used expressions; any other gets a projection of the used columns.
fn narrowed_input(
    join: &Arc<dyn ExecutionPlan>,
    side: usize,
    input: &Arc<dyn ExecutionPlan>,
) -> Result<Option<(Arc<dyn ExecutionPlan>, Arc<dyn ExecutionPlan>)>> {
    use datafusion::common::JoinType;
    use datafusion::physical_plan::projection::{ProjectionExec, ProjectionExpr};
    use std::collections::BTreeSet;
    let Some(hash_join) = join.downcast_ref::<HashJoinExec>() else { return Ok(None) };
    let output_sides: &[usize] = match hash_join.join_type() {
        JoinType::Inner => &[0, 1],
        JoinType::LeftSemi | JoinType::LeftAnti => &[0],
        JoinType::RightSemi | JoinType::RightAnti => &[1],
        _ => return Ok(None),
    };
    // A split aggregate is routed as partial states (`route_to_owners`); a
    // projection over it would hide it from that.
    if hash_join.filter().is_some() || split_aggregate(input).is_some() {
        return Ok(None);
    }
    let left_width = hash_join.left().schema().fields().len();
    let width = input.schema().fields().len();
    let offset = if side == 0 { 0 } else { left_width };
    let mut used: BTreeSet<usize> = BTreeSet::new();
    for key in join_keys(join, side) {
        datafusion::physical_expr::utils::collect_columns(&key).iter().for_each(|c| {
            used.insert(c.index());
        });
    }
    if output_sides.contains(&side) {
        // Output column i of the join's own schema: left columns, then right
        // ones (semi and anti joins output one side, from index 0).
        let side_offset = if output_sides.len() == 2 { offset } else { 0 };
        match &hash_join.projection {
            Some(projection) => projection.iter().filter(|i| **i >= side_offset && **i < side_offset + width).for_each(|i| {
                used.insert(i - side_offset);
            }),
            None => used.extend(0..width),
        }
    }
    if used.len() >= width || used.is_empty() {
        return Ok(None);
    }
    let kept: Vec<usize> = used.into_iter().collect();
    let new_index = |old: usize| kept.binary_search(&old).ok();
    let narrowed: Arc<dyn ExecutionPlan> = match input.downcast_ref::<ProjectionExec>() {
        Some(projection) => {
            Arc::new(ProjectionExec::try_new(kept.iter().map(|i| projection.expr()[*i].clone()), projection.input().clone())?)
        }
        None => {
            let schema = input.schema();
            let exprs = kept.iter().map(|i| ProjectionExpr {
                expr: Arc::new(Column::new(schema.field(*i).name(), *i)) as Arc<dyn PhysicalExpr>,
                alias: schema.field(*i).name().clone(),
            });
            Arc::new(ProjectionExec::try_new(exprs, input.clone())?)
        }
    };
    let remap = |expr: &Arc<dyn PhysicalExpr>| -> Result<Arc<dyn PhysicalExpr>> {
        expr.clone()
            .transform(|e| match e.downcast_ref::<Column>().and_then(|c| new_index(c.index()).map(|i| Column::new(c.name(), i))) {
                Some(column) => Ok(Transformed::yes(Arc::new(column) as Arc<dyn PhysicalExpr>)),
                None => Ok(Transformed::no(e)),
            })
            .map(|t| t.data)
    };
    let on = hash_join
        .on()
        .iter()
        .map(|(l, r)| Ok(if side == 0 { (remap(l)?, r.clone()) } else { (l.clone(), remap(r)?) }))
        .collect::<Result<Vec<_>>>()?;
    // The join's output, as indices into the narrowed inputs' columns.
    let old_output: Vec<usize> = match &hash_join.projection {
        Some(projection) => projection.to_vec(),
        None => (0..hash_join.join_schema().fields().len()).collect(),
    };
    let projection: Option<Vec<usize>> = old_output
        .iter()
        .map(|i| {
            if output_sides.len() == 2 && side == 0 {
                if *i < left_width { new_index(*i) } else { Some(i - left_width + kept.len()) }
            } else if output_sides.len() == 2 {
                if *i < left_width { Some(*i) } else { new_index(i - left_width).map(|n| n + left_width) }
            } else if output_sides[0] == side {
                new_index(*i)
            } else {
                Some(*i)
            }
        })
        .collect();
    let Some(projection) = projection else { return Ok(None) };
    let mut children = vec![hash_join.left().clone(), hash_join.right().clone()];
    children[side] = narrowed.clone();
    let rebuilt = hash_join
        .builder()
        .with_on(on)
        .with_projection(Some(projection))
        .with_new_children(children)?
        .recompute_properties()
        .reset_state()
        .build_exec()?;
    // Parents were planned over the join's output: it must not change.
    if rebuilt.schema().fields() != join.schema().fields() {
        return Ok(None);
    }
    Ok(Some((narrowed, rebuilt)))
}

/// `moves` sent to the tasks that hold `stays`'s partitions. A final
/// aggregate over DataFusion's shuffle of its partial aggregate, joined on
/// group keys, is finished there instead: its partial states are routed to
/// the owners, so they cross the network once (a second shuffle would carry
/// the finished groups). Routing on some of the group keys keeps every group
/// in one partition. TPC-H Q13's per-customer order counts
/// (`eager_count.rs`) travel this way. Anything else is routed as it is when
/// `route_as_is`.
fn route_to_owners(
    stays: &Arc<dyn ExecutionPlan>,
    stay_keys: &[Arc<dyn PhysicalExpr>],
    moves: &Arc<dyn ExecutionPlan>,
    move_keys: &[Arc<dyn PhysicalExpr>],
    workers: u64,
    route_as_is: bool,
) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    if let Some((last, partial, _)) = split_aggregate(moves) {
        // Group column i is column i of both the partial and the final output.
        let groups = last.group_expr().expr().len();
        let partial_schema = partial.schema();
        let keys: Option<Vec<Arc<dyn PhysicalExpr>>> = move_keys
            .iter()
            .map(|key| {
                let column = key.downcast_ref::<Column>()?;
                (column.index() < groups)
                    .then(|| Arc::new(Column::new(partial_schema.field(column.index()).name(), column.index())) as Arc<dyn PhysicalExpr>)
            })
            .collect();
        if let Some(keys) = keys
            && let Some(routed) = route_toward(stays, stay_keys, partial.clone(), &keys, workers)?
        {
            return Ok(Some(moves.clone().replace_children(vec![routed], ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute))?));
        }
    }
    if route_as_is { route_toward(stays, stay_keys, moves.clone(), move_keys, workers) } else { Ok(None) }
}

/// An aggregate DataFusion split into a final aggregate over a hash
/// repartition of its partial aggregate (one grouping, no grouping sets):
/// the final one, the partial plan and the partial aggregate.
fn split_aggregate(plan: &Arc<dyn ExecutionPlan>) -> Option<(&AggregateExec, &Arc<dyn ExecutionPlan>, &AggregateExec)> {
    let last = plan.downcast_ref::<AggregateExec>()?;
    if *last.mode() != AggregateMode::FinalPartitioned {
        return None;
    }
    let partial = last.input().downcast_ref::<RepartitionExec>()?.input();
    let first = partial.downcast_ref::<AggregateExec>()?;
    (*first.mode() == AggregateMode::Partial && first.group_expr().is_single()).then_some((last, partial, first))
}

/// DataFusion collects the smaller input of a join whole when it looks small
/// (and datafusion-distributed then broadcasts it to every task). When both
/// inputs are FoamDB tables distributed on the join keys with one layout,
/// joining partition by partition where they are stored moves nothing:
/// prefer that. When only the probe side is, route the small side to its
/// owners. When only the collected side is and the join emits that side's
/// unmatched rows (left, full, left semi and anti joins), a broadcast would
/// emit them once per task, so datafusion-distributed would shuffle both
/// sides: route the probe side to the collected side's owners instead
/// (TPC-H Q22's `NOT EXISTS` over orders moves only `o_custkey`); for other
/// joins, do so when that moves fewer rows than the broadcast. A single
/// node keeps such a join collected: one process shares the collected side.
fn collect_join_to_co_located(node: &Arc<dyn ExecutionPlan>, workers: u64) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let Some(join) = node.downcast_ref::<HashJoinExec>() else { return Ok(None) };
    if join.mode != PartitionMode::CollectLeft || join.null_aware {
        return Ok(None);
    }
    let left = match join.left().downcast_ref::<CoalescePartitionsExec>() {
        Some(coalesce) if coalesce.fetch().is_none() => coalesce.input().clone(),
        _ => return Ok(None),
    };
    let right = join.right().clone();
    let required: Vec<Vec<Arc<dyn PhysicalExpr>>> =
        vec![join.on().iter().map(|(l, _)| l.clone()).collect(), join.on().iter().map(|(_, r)| r.clone()).collect()];
    // Input `side` routed to the owners of the other, narrowed to the columns
    // the join reads, and the join rewritten over the narrowed input.
    let route = |side: usize, stays: &Arc<dyn ExecutionPlan>, moving: &Arc<dyn ExecutionPlan>| -> Result<Option<(Arc<dyn ExecutionPlan>, Arc<dyn ExecutionPlan>)>> {
        let (moving, keys, join) = match narrowed_input(node, side, moving)? {
            Some((input, join)) => (input, join_keys(&join, side), join),
            None => (moving.clone(), required[side].clone(), node.clone()),
        };
        Ok(route_to_owners(stays, &required[1 - side], &moving, &keys, workers, true)?.map(|routed| (routed, join)))
    };
    let (left, right, join) = if co_located(&[&left, &right], &required) {
        (left, right, node.clone())
    } else if let Some((routed, join)) = route(0, &right, &left)? {
        // Routing the small side to the owners sends each of its rows once,
        // a broadcast sends every row to every task.
        (routed, right, join)
    } else if workers > 1
        && (!crate::exec::replica_join::emits_only_probe_rows(join.join_type()) || routing_moves_less(&left, &right, workers))
        && let Some((routed, join)) = route(1, &left, &right)?
    {
        (left, routed, join)
    } else {
        return Ok(None);
    };
    let Some(join) = join.downcast_ref::<HashJoinExec>() else { return Ok(None) };
    let rebuilt = join
        .builder()
        .with_partition_mode(PartitionMode::Partitioned)
        .with_new_children(vec![left, right])?
        .recompute_properties()
        .reset_state()
        .build_exec()?;
    Ok(Some(rebuilt))
}

/// Whether routing the probe side to the collected side's owners sends fewer
/// rows than broadcasting the collected side: a broadcast copies every
/// collected row to each of the other tasks, routing sends each probe row
/// once, unless it is already on its owner (one time in `workers`). Unknown
/// sizes keep the broadcast DataFusion chose.
fn routing_moves_less(collected: &Arc<dyn ExecutionPlan>, probe: &Arc<dyn ExecutionPlan>, workers: u64) -> bool {
    let rows = |plan: &Arc<dyn ExecutionPlan>| {
        StatisticsContext::new().compute(plan.as_ref(), &StatisticsArgs::new()).ok().and_then(|s| s.num_rows.get_value().copied())
    };
    match (rows(collected), rows(probe)) {
        (Some(collected), Some(probe)) => (probe as u64) * (workers - 1) / workers < (collected as u64) * (workers - 1),
        _ => false,
    }
}

/// `moves` shuffled to the tasks that hold `stays`'s partitions, when
/// `stays` is FoamDB-hashed on its join keys (`stay_keys`, paired with
/// `move_keys` by position) and the keys hash alike.
fn route_toward(
    stays: &Arc<dyn ExecutionPlan>,
    stay_keys: &[Arc<dyn PhysicalExpr>],
    moves: Arc<dyn ExecutionPlan>,
    move_keys: &[Arc<dyn PhysicalExpr>],
    workers: u64,
) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let Some((owners, routed_keys)) = routing(stays, stay_keys, &moves, move_keys, false) else { return Ok(None) };
    crate::exec::route::routed_shuffle(moves, &routed_keys, &owners, workers)
}

/// Where `moves` goes to meet `stays` and on which of its keys it is
/// hashed: the owners of `stays`'s FoamDB layout, and `moves`'s side of each
/// condition `stays` is hashed on (all of them, or with `subset` some), when
/// those keys hash alike.
fn routing(
    stays: &Arc<dyn ExecutionPlan>,
    stay_keys: &[Arc<dyn PhysicalExpr>],
    moves: &Arc<dyn ExecutionPlan>,
    move_keys: &[Arc<dyn PhysicalExpr>],
    subset: bool,
) -> Option<(Vec<NodeId>, Vec<Arc<dyn PhysicalExpr>>)> {
    let HashOrigin::Foam { owners } = origin(stays) else { return None };
    let conditions = key_conditions(stays, stay_keys, subset)?;
    let Partitioning::Hash(hashed_keys, _) = stays.output_partitioning() else { return None };
    let routed_keys: Vec<Arc<dyn PhysicalExpr>> = conditions.iter().map(|c| move_keys[*c].clone()).collect();
    // One expression twice among the moving side's keys (`a.x = b.p AND
    // a.x = b.q`, `b` laid out by `(p, q)`) routes correctly, but DataFusion
    // pairs a partitioned join's inputs key by key and takes the first
    // condition an expression appears in, so it refuses the join as not
    // co-partitioned: leave such a join to the shuffle of both sides.
    let repeated = routed_keys.iter().enumerate().any(|(i, k)| routed_keys[..i].iter().any(|earlier| earlier.eq(k)));
    (!repeated && same_kind(hashed_keys, &stays.schema(), &routed_keys, &moves.schema())).then_some((owners, routed_keys))
}

/// Whether keys hash alike: FoamDB's partition hash is over canonical
/// values, so integers of any width agree; other types must match exactly.
fn same_kind(a: &[Arc<dyn PhysicalExpr>], a_schema: &Schema, b: &[Arc<dyn PhysicalExpr>], b_schema: &Schema) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| match (x.data_type(a_schema), y.data_type(b_schema)) {
            (Ok(x), Ok(y)) => x == y || (x.is_integer() && y.is_integer()),
            _ => false,
        })
}

/// The physical optimizer rule (see the module documentation).
#[derive(Debug)]
pub struct CoPartitioning {
    /// The node planning: every node is a worker, and a routed shuffle must
    /// work for every task count up to the number of workers.
    pub node: Arc<crate::context::NodeContext>,
}

impl PhysicalOptimizerRule for CoPartitioning {
    fn optimize(&self, plan: Arc<dyn ExecutionPlan>, config: &ConfigOptions) -> Result<Arc<dyn ExecutionPlan>> {
        let target = config.execution.target_partitions.max(1);
        let workers = self.node.catalog.current().nodes.len().max(1) as u64;
        plan.transform_up(|node| fix(node, target, workers)).map(|t| t.data)
    }

    fn name(&self) -> &str {
        "foam_co_partitioning"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// An aggregate DataFusion split into partial and final with a hash
/// repartition on the group keys between them, over an input that this
/// rule's join rewrites left hash-partitioned on some of those keys already
/// (a join routed to the owners of its FoamDB side is partitioned like that
/// side): every group's rows are in one partition, so the aggregate runs in
/// one step where they are and the repartition, a network shuffle once
/// distributed, goes. Any hash function will do here, as long as rows with
/// equal keys share a partition. TPC-H Q13 counts each customer's orders on
/// the customer's node.
fn aggregate_in_place(node: &Arc<dyn ExecutionPlan>) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let Some((last, _, first)) = split_aggregate(node) else { return Ok(None) };
    // Order-sensitive aggregates keep DataFusion's plan (their sort
    // requirements were placed for it).
    if first.aggr_expr().iter().any(|a| !a.order_bys().is_empty()) {
        return Ok(None);
    }
    let Partitioning::Hash(keys, _) = first.input().output_partitioning() else { return Ok(None) };
    let groups = first.group_expr().input_exprs();
    if keys.is_empty() || !keys.iter().all(|k| groups.iter().any(|g| g.eq(k))) {
        return Ok(None);
    }
    let same_aggregate = physical_exprs_equal(&first.group_expr().output_exprs(), &last.group_expr().input_exprs())
        && last.aggr_expr().len() == first.aggr_expr().len()
        && last.aggr_expr().iter().zip(first.aggr_expr()).all(|(a, b)| a.eq(b))
        && last.filter_expr().len() == first.filter_expr().len()
        && last.filter_expr().iter().zip(first.filter_expr()).all(|(a, b)| match (a, b) {
            (Some(a), Some(b)) => a.eq(b),
            (None, None) => true,
            _ => false,
        });
    if !same_aggregate {
        return Ok(None);
    }
    // Hashed on all the group keys in another order: any order groups
    // alike, but DataFusion states the requirement in the group order and
    // accepts a partitioning on all the keys only in that order. The keys
    // are regrouped in the input's order and a projection restores the
    // output's.
    let order = key_order(keys, first.group_expr());
    if order.is_some() && last.limit_options().is_some_and(|l| l.descending.is_some()) {
        return Ok(None);
    }
    let group_expr = match &order {
        Some(order) => PhysicalGroupBy::new_single(order.iter().map(|&i| first.group_expr().expr()[i].clone()).collect()),
        None => first.group_expr().clone(),
    };
    let single = AggregateExec::try_new(
        AggregateMode::SinglePartitioned,
        group_expr,
        first.aggr_expr().to_vec(),
        first.filter_expr().to_vec(),
        first.input().clone(),
        first.input_schema(),
    )?
    .with_limit_options(last.limit_options());
    // Only where DataFusion's plan check accepts the input's partitioning
    // for the one-step aggregate: a partitioning that names a group key twice
    // (a projection of equal columns) groups alike, but the check takes a
    // subset only when it has fewer keys.
    let subset = datafusion::physical_plan::distribution_requirements::ChildSatisfactionOptions::new().with_allow_subset(true);
    let accepted = single.input_distribution_requirements().child_satisfaction(0, single.input().as_ref(), subset)?.is_satisfied();
    if !accepted {
        return Ok(None);
    }
    let single: Arc<dyn ExecutionPlan> = Arc::new(single);
    let Some(order) = order else { return Ok(Some(single)) };
    // Output column `i` of the original aggregate is column `order⁻¹(i)`.
    let schema = single.schema();
    let groups = order.len();
    let exprs: Vec<(Arc<dyn PhysicalExpr>, String)> = (0..schema.fields().len())
        .map(|i| {
            let from = if i < groups { order.iter().position(|&o| o == i).unwrap_or(i) } else { i };
            let name = schema.field(from).name().clone();
            (Arc::new(Column::new(&name, from)) as Arc<dyn PhysicalExpr>, name)
        })
        .collect();
    Ok(Some(Arc::new(ProjectionExec::try_new(exprs, single)?)))
}

/// When `keys` are all the single grouping's keys, in another order: for
/// each key, the index of its group expression.
fn key_order(keys: &[Arc<dyn PhysicalExpr>], group_by: &PhysicalGroupBy) -> Option<Vec<usize>> {
    let groups = group_by.expr();
    if !group_by.is_single() {
        return None;
    }
    reordering(keys, groups.iter().map(|(g, _)| g))
}

/// One operator, bottom-up: first what it requires of inputs this rule
/// rewrote below it is put back (`requirements.rs`), then its own inputs'
/// partitioning is fixed.
fn fix(node: Arc<dyn ExecutionPlan>, target: usize, workers: u64) -> Result<Transformed<Arc<dyn ExecutionPlan>>> {
    let restored = crate::optimizer::physical::requirements::restore(node, target)?;
    let fixed = fix_partitioning(restored.data, target, workers)?;
    let aligned = align_join_keys(fixed.data)?;
    Ok(Transformed::new_transformed(aligned.data, restored.transformed || fixed.transformed || aligned.transformed))
}

/// A partitioned hash join whose inputs are hashed on all its keys, pair by
/// pair, but in another order than its conditions (a FoamDB layout lists
/// its keys in its own order) gets its conditions in the inputs' order:
/// the same join, and DataFusion's plan check accepts hash partitioning on
/// all the keys only in the order the join states them.
fn align_join_keys(node: Arc<dyn ExecutionPlan>) -> Result<Transformed<Arc<dyn ExecutionPlan>>> {
    let Some(join) = node.downcast_ref::<HashJoinExec>() else { return Ok(Transformed::no(node)) };
    let (Partitioning::Hash(left, _), Partitioning::Hash(right, _)) = (join.left().output_partitioning(), join.right().output_partitioning())
    else {
        return Ok(Transformed::no(node));
    };
    let on = join.on();
    if join.mode != PartitionMode::Partitioned || right.len() != on.len() {
        return Ok(Transformed::no(node));
    }
    let Some(order) = reordering(left, on.iter().map(|(l, _)| l)) else { return Ok(Transformed::no(node)) };
    if !order.iter().zip(right.iter()).all(|(&i, r)| on[i].1.eq(r)) {
        return Ok(Transformed::no(node));
    }
    let aligned = order.iter().map(|&i| on[i].clone()).collect();
    Ok(Transformed::yes(join.builder().with_on(aligned).build_exec()?))
}

fn fix_partitioning(node: Arc<dyn ExecutionPlan>, target: usize, workers: u64) -> Result<Transformed<Arc<dyn ExecutionPlan>>> {
    if let Some(in_place) = aggregate_in_place(&node)? {
        return Ok(Transformed::yes(in_place));
    }
    // A join collecting only replicated tables joins each node's own copy:
    // nothing moves (one node joins its copy anyway).
    if workers > 1
        && let Some(local) = crate::exec::replica_join::replica_join(&node)?
    {
        return Ok(Transformed::yes(local));
    }
    if let Some(co_located) = collect_join_to_co_located(&node, workers)? {
        return Ok(Transformed::yes(co_located));
    }
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
    if co_located(&children, &required) {
        return Ok(Transformed::no(node));
    }
    if let Some(routed) = route_one_side(&node, &owned, &origins, &required, workers)? {
        return Ok(Transformed::yes(routed));
    }
    // An input DataFusion hashed on the keys this operator needs can stay.
    // One it hashed on others (an aggregate this rule runs in place is
    // partitioned like its input, on some of its group keys) cannot.
    let hashed_as_needed: Vec<bool> = children
        .iter()
        .zip(&origins)
        .zip(&required)
        .map(|((child, origin), keys)| *origin == HashOrigin::DataFusion && partitioned_on(child, keys))
        .collect();
    if hashed_as_needed.iter().all(|h| *h) {
        return Ok(Transformed::no(node));
    }
    // Shuffle every other input, to the partition count of those that stay
    // (or the session's target).
    let count = children
        .iter()
        .zip(&hashed_as_needed)
        .find(|(_, h)| **h)
        .map(|(c, _)| c.output_partitioning().partition_count())
        .unwrap_or(target);
    let mut new_children = Vec::with_capacity(children.len());
    for ((child, stays), keys) in owned.into_iter().zip(&hashed_as_needed).zip(required) {
        if *stays || keys.is_empty() {
            new_children.push(child);
        } else {
            let repartition = RepartitionExec::try_new(child, Partitioning::Hash(keys, count))?.with_preserve_order();
            new_children.push(Arc::new(repartition) as Arc<dyn ExecutionPlan>);
        }
    }
    Ok(Transformed::yes(node.replace_children(new_children, ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute))?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::route::{FoamRoutedExec, RouteSpec};
    use arrow::datatypes::{DataType, Field};
    use datafusion::physical_plan::empty::EmptyExec;

    #[test]
    fn rows_laid_out_by_some_of_their_keys_match_no_other_layout() {
        let schema = Arc::new(Schema::new(vec![Field::new("a", DataType::Int64, false), Field::new("b", DataType::Int64, false)]));
        let routed = |by_some_keys: bool| -> Arc<dyn ExecutionPlan> {
            let spec = RouteSpec { key_columns: vec![0, 1], owners: vec![1, 2, 3], by_some_keys };
            Arc::new(FoamRoutedExec::try_new(Arc::new(EmptyExec::new(schema.clone())), spec).unwrap())
        };
        assert_eq!(origin(&routed(false)), HashOrigin::Foam { owners: vec![1, 2, 3] });
        assert_eq!(origin(&routed(true)), HashOrigin::Unknown);
        // Two inputs declaring the same keys and owners pair up only when both
        // are laid out by all of those keys.
        let keys: Vec<Arc<dyn PhysicalExpr>> = vec![Arc::new(Column::new("a", 0)), Arc::new(Column::new("b", 1))];
        let required = vec![keys.clone(), keys];
        assert!(co_located(&[&routed(false), &routed(false)], &required));
        assert!(!co_located(&[&routed(true), &routed(false)], &required));
    }
}
