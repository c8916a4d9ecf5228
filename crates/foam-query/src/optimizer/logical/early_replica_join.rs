//! Joins a filtered replicated table where its key comes from, not at the
//! top of the join tree: a logical optimizer rule run on the coordinating node.
//!
//! DataFusion keeps the join order of the FROM clause, so in TPC-H Q7, Q8 and
//! Q21 the join with a filtered `nation` or `region` comes last, after every
//! lineitem row has been joined with everything else, and only then are 24 of
//! every 25 rows thrown away. A replicated table is on every node and a join
//! with it moves nothing, so this rule moves such a join down to the input
//! that supplies its key, where it filters first:
//!
//! ```text
//!   J: X ⋈ D ON x.k = d.k                          X'
//!      X: A ⋈ B (k from A)               ─▶        (A ⋈ D ON a.k = d.k) ⋈ B
//!      D: filtered replicated tables                 and again into A while A is a join
//! ```
//! `D` qualifies when it reads only `DISTRIBUTED REPLICATED` tables and
//! filters them somewhere (an unfiltered one removes nothing). `J` must be an
//! inner equi-join. `D` moves into an input of a join only where that keeps
//! the answer: either input of an inner join, the preserved (or filtered)
//! input of a left/right outer, semi or anti join, never through a full
//! join. `D` stops above an input whose columns `J`'s other condition (Q7's
//! pairing of the two nations) would not all meet there. A projection on top
//! restores `J`'s column order. `SET foam.early_replica_joins = false` turns
//! the rule off.

use std::collections::HashSet;
use std::sync::Arc;

use datafusion::common::tree_node::Transformed;
use datafusion::common::{Column, DFSchema, NullEquality, Result};
use datafusion::datasource::source_as_provider;
use datafusion::logical_expr::{Expr, Join, JoinType, LogicalPlan, LogicalPlanBuilder};
use datafusion::optimizer::optimizer::ApplyOrder;
use datafusion::optimizer::{OptimizerConfig, OptimizerRule};

use crate::options::FoamOptions;
use crate::optimizer::logical::plan_shape::{columns_only, with_input};
use crate::catalog::table::FoamTable;

/// The optimizer rule (see the module documentation).
#[derive(Debug, Default)]
pub struct EarlyReplicaJoin;

impl OptimizerRule for EarlyReplicaJoin {
    fn name(&self) -> &str {
        "foam_early_replica_join"
    }

    fn apply_order(&self) -> Option<ApplyOrder> {
        Some(ApplyOrder::BottomUp)
    }

    fn supports_rewrite(&self) -> bool {
        true
    }

    fn rewrite(&self, plan: LogicalPlan, config: &dyn OptimizerConfig) -> Result<Transformed<LogicalPlan>> {
        let LogicalPlan::Join(join) = &plan else { return Ok(Transformed::no(plan)) };
        if config.options().extensions.get::<FoamOptions>().is_some_and(|o| !o.early_replica_joins) {
            return Ok(Transformed::no(plan));
        }
        let Some(moved) = move_down(join, None, MOVES_MAX)? else { return Ok(Transformed::no(plan)) };
        // The original column order, for the plans above.
        let columns: Vec<Expr> = plan.schema().columns().into_iter().map(Expr::Column).collect();
        Ok(Transformed::yes(LogicalPlanBuilder::from(moved).project(columns)?.build()?))
    }
}

/// Most joins one rewrite moves a replicated side through (each move goes
/// one level down; a bound keeps a pathological plan from looping).
const MOVES_MAX: usize = 64;

/// What is moved: `J` and its replicated side, with `J`'s keys oriented.
struct Moving<'a> {
    join: &'a Join,
    replicated: &'a Arc<LogicalPlan>,
    /// True when the replicated side was `J`'s left input (kept so).
    replicated_left: bool,
    /// `(key of the other side, key of the replicated side)` pairs.
    on: Vec<(Expr, Expr)>,
}

/// `join` with a filtered replicated input moved as deep into its other
/// input as it goes, or `None` when it cannot move. `side` names the input
/// that may move (`Some(true)`: the left one); `None` tries the right, then
/// the left.
fn move_down(join: &Join, side: Option<bool>, budget: usize) -> Result<Option<LogicalPlan>> {
    if budget == 0
        || join.join_type != JoinType::Inner
        || join.on.is_empty()
        || join.null_aware
        || join.null_equality != NullEquality::NullEqualsNothing
    {
        return Ok(None);
    }
    let (replicated, other, replicated_left) = if side != Some(true) && filtered_replica(&join.right) {
        (&join.right, &join.left, false)
    } else if side != Some(false) && filtered_replica(&join.left) {
        (&join.left, &join.right, true)
    } else {
        return Ok(None);
    };
    let on = join.on.iter().map(|(l, r)| if replicated_left { (r.clone(), l.clone()) } else { (l.clone(), r.clone()) }).collect();
    let moving = Moving { join, replicated, replicated_left, on };
    push_into(other, &moving, budget - 1)
}

/// `target ⋈ D` with `D` pushed into `target`'s inputs while `target` is a
/// join it may enter, or `None` when it is not such a join or `J`'s
/// condition reads columns `D` would no longer meet there (the caller then
/// keeps `J` where it is).
fn push_into(target: &LogicalPlan, moving: &Moving, budget: usize) -> Result<Option<LogicalPlan>> {
    let join = match target {
        LogicalPlan::Join(join) => join,
        // A projection of plain columns (such as the one this rule leaves
        // above a join it rewrote) is passed through, `D`'s columns added.
        LogicalPlan::Projection(projection) if columns_only(projection) => {
            let Some(below) = push_into(&projection.input, moving, budget)? else { return Ok(None) };
            let mut columns = projection.expr.clone();
            columns.extend(moving.replicated.schema().columns().into_iter().map(Expr::Column));
            return Ok(Some(LogicalPlanBuilder::from(below).project(columns)?.build()?));
        }
        _ => return Ok(None),
    };
    let (into_left, into_right) = match join.join_type {
        JoinType::Inner => (true, true),
        JoinType::Left | JoinType::LeftSemi | JoinType::LeftAnti | JoinType::LeftMark => (true, false),
        JoinType::Right | JoinType::RightSemi | JoinType::RightAnti | JoinType::RightMark => (false, true),
        JoinType::Full => (false, false),
    };
    let fits = |input: &LogicalPlan| {
        let seen = |c: &Column| input.schema().has_column(c) || moving.replicated.schema().has_column(c);
        moving.on.iter().all(|(key, _)| reads_only(key, input.schema()))
            && moving.join.filter.as_ref().is_none_or(|f| f.column_refs().into_iter().all(seen))
    };
    let left = into_left && fits(&join.left);
    let right = !left && into_right && fits(&join.right);
    if !left && !right {
        return Ok(None);
    }
    let input = if left { &join.left } else { &join.right };
    let new_input = match push_into(input, moving, budget)? {
        Some(deeper) => deeper,
        None => joined_with_replicated(input, moving)?,
    };
    let received_replicas = filtered_replica(&new_input);
    let rebuilt = with_input(join, left, Arc::new(new_input))?;
    // When `D` joined a replicated table here (nation with a filtered
    // region), the two move on together into the other input, if it reads
    // stored partitions.
    let other = if left { &rebuilt.right } else { &rebuilt.left };
    if received_replicas
        && !replica_only(other, &mut false)
        && let Some(further) = move_down(&rebuilt, Some(left), budget)?
    {
        return Ok(Some(further));
    }
    Ok(Some(LogicalPlan::Join(rebuilt)))
}

/// `input ⋈ D` with `J`'s keys and condition, `D` on the side it was on.
fn joined_with_replicated(input: &Arc<LogicalPlan>, moving: &Moving) -> Result<LogicalPlan> {
    let j = moving.join;
    let (left, right, on) = if moving.replicated_left {
        (Arc::clone(moving.replicated), Arc::clone(input), moving.on.iter().map(|(x, d)| (d.clone(), x.clone())).collect())
    } else {
        (Arc::clone(input), Arc::clone(moving.replicated), moving.on.clone())
    };
    Ok(LogicalPlan::Join(Join::try_new(left, right, on, j.filter.clone(), JoinType::Inner, j.join_constraint, j.null_equality, false)?))
}

fn reads_only(expr: &Expr, schema: &DFSchema) -> bool {
    let columns: HashSet<&Column> = expr.column_refs();
    !columns.is_empty() && columns.iter().all(|c| schema.has_column(c))
}

/// True when `plan` reads only replicated FoamDB tables, through filters,
/// projections, aliases and inner joins, and filters them somewhere.
fn filtered_replica(plan: &LogicalPlan) -> bool {
    let mut filtered = false;
    replica_only(plan, &mut filtered) && filtered
}

fn replica_only(plan: &LogicalPlan, filtered: &mut bool) -> bool {
    match plan {
        LogicalPlan::TableScan(scan) => {
            *filtered |= !scan.filters.is_empty();
            source_as_provider(&scan.source)
                .ok()
                .is_some_and(|p| p.downcast_ref::<FoamTable>().is_some_and(FoamTable::is_replicated))
        }
        LogicalPlan::Filter(filter) => {
            *filtered = true;
            replica_only(&filter.input, filtered)
        }
        LogicalPlan::Projection(p) => replica_only(&p.input, filtered),
        LogicalPlan::SubqueryAlias(a) => replica_only(&a.input, filtered),
        LogicalPlan::Join(j) if j.join_type == JoinType::Inner => {
            replica_only(&j.left, filtered) && replica_only(&j.right, filtered)
        }
        _ => false,
    }
}
