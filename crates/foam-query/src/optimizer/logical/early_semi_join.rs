//! Runs a semi or anti join on the input its keys come from, below inner
//! joins with whole tables: a logical optimizer rule run on the coordinating
//! node.
//!
//! TPC-H Q18 keeps the orders whose lineitems sum to more than 300 (57 of
//! 1.5 million at SF1) with `o_orderkey IN (subquery)`. DataFusion decorrelates
//! that into a semi join above the FROM clause's joins, so every order is
//! first joined with its customer and its lineitems (six million rows, on a
//! cluster with customers broadcast to every node) and only then filtered. A
//! semi (or anti) join decides each row by the columns its condition reads;
//! when those all come from one input of an inner join, it decides the same
//! for that input's rows before the join:
//!
//! ```text
//!   (X ⋈ B) ⋉ S ON x.k = s.k      ─▶   (X ⋉ S ON x.k = s.k) ⋈ B
//! ```
//! and it keeps the schema (a semi join returns its left input's columns).
//! It moves only past an inner join whose other input `B` is a whole table
//! (no filter), as a row of `X` then usually meets rows of `B` (a foreign
//! key): below a join that filters (TPC-H Q21's supplier of one nation) it
//! would test rows that join would have dropped. Left semi and anti joins
//! move (NOT IN's null-aware anti join too: each row's answer depends only on
//! its own key and the subquery); projections of plain columns are passed
//! through. `SET foam.early_semi_joins = false` turns the rule off.

use std::sync::Arc;

use datafusion::common::Result;
use datafusion::common::tree_node::Transformed;
use datafusion::logical_expr::{Join, JoinType, LogicalPlan, Projection};
use datafusion::optimizer::optimizer::ApplyOrder;
use datafusion::optimizer::{OptimizerConfig, OptimizerRule};

use crate::options::FoamOptions;
use crate::optimizer::logical::plan_shape::{columns_only, unfiltered_table, with_input};

/// The optimizer rule (see the module documentation).
#[derive(Debug, Default)]
pub struct EarlySemiJoin;

impl OptimizerRule for EarlySemiJoin {
    fn name(&self) -> &str {
        "foam_early_semi_join"
    }

    fn apply_order(&self) -> Option<ApplyOrder> {
        Some(ApplyOrder::BottomUp)
    }

    fn supports_rewrite(&self) -> bool {
        true
    }

    fn rewrite(&self, plan: LogicalPlan, config: &dyn OptimizerConfig) -> Result<Transformed<LogicalPlan>> {
        let LogicalPlan::Join(semi) = &plan else { return Ok(Transformed::no(plan)) };
        if !matches!(semi.join_type, JoinType::LeftSemi | JoinType::LeftAnti)
            || config.options().extensions.get::<FoamOptions>().is_some_and(|o| !o.early_semi_joins)
        {
            return Ok(Transformed::no(plan));
        }
        match push_into(&semi.left, semi)? {
            Some(moved) => Ok(Transformed::yes(moved)),
            None => Ok(Transformed::no(plan)),
        }
    }
}

/// `target ⋉ S` with the semi join moved below `target`'s inner joins, or
/// `None` when it cannot move past `target`.
fn push_into(target: &Arc<LogicalPlan>, semi: &Join) -> Result<Option<LogicalPlan>> {
    match target.as_ref() {
        LogicalPlan::Projection(projection) if columns_only(projection) => {
            let Some(below) = push_into(&projection.input, semi)? else { return Ok(None) };
            Ok(Some(LogicalPlan::Projection(Projection::try_new(projection.expr.clone(), Arc::new(below))?)))
        }
        LogicalPlan::Join(join) if join.join_type == JoinType::Inner => {
            for into_left in [true, false] {
                let (input, other) = if into_left { (&join.left, &join.right) } else { (&join.right, &join.left) };
                if !decided_by(semi, input) || !unfiltered_table(other) {
                    continue;
                }
                // `input ⋉ S`: the semi join with `input` for its left side.
                let moved = match push_into(input, semi)? {
                    Some(deeper) => deeper,
                    None => LogicalPlan::Join(with_input(semi, true, Arc::clone(input))?),
                };
                return Ok(Some(LogicalPlan::Join(with_input(join, into_left, Arc::new(moved))?)));
            }
            Ok(None)
        }
        _ => Ok(None),
    }
}

/// True when every column of the semi join's condition that is not the
/// subquery's is a column of `input`.
fn decided_by(semi: &Join, input: &LogicalPlan) -> bool {
    let subquery = semi.right.schema();
    let mut columns = semi.on.iter().flat_map(|(l, r)| [l, r]).flat_map(|e| e.column_refs()).collect::<Vec<_>>();
    if let Some(filter) = &semi.filter {
        columns.extend(filter.column_refs());
    }
    let outer: Vec<_> = columns.into_iter().filter(|c| !subquery.has_column(c)).collect();
    !outer.is_empty() && outer.iter().all(|c| input.schema().has_column(c))
}
