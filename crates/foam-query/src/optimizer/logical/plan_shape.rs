//! Logical plan shapes the coordinating node's optimizer rules look through
//! or rebuild (`eager_count.rs`, `eager_aggregate.rs`, `early_replica_join.rs`,
//! `early_semi_join.rs`), in one place so the rules agree on them.
//!
//! ```text
//!   Projection of plain columns  ─▶ looked through (it only prunes columns)
//!   scan without filter or limit ─▶ a whole table (under aliases, such projections)
//!   join with one input replaced ─▶ rebuilt with its own condition and type
//! ```

use std::sync::Arc;

use datafusion::common::Result;
use datafusion::logical_expr::{Expr, Join, LogicalPlan, Projection};

/// True when `projection` only selects columns (no expression, no alias):
/// a rule may move work below it, as it changes no value.
pub(crate) fn columns_only(projection: &Projection) -> bool {
    projection.expr.iter().all(|e| matches!(e, Expr::Column(_)))
}

/// True when `plan` reads a whole table: a scan without filters or limit,
/// under aliases and projections of plain columns.
pub(crate) fn unfiltered_table(plan: &LogicalPlan) -> bool {
    match plan {
        LogicalPlan::TableScan(scan) => scan.filters.is_empty() && scan.fetch.is_none(),
        LogicalPlan::SubqueryAlias(alias) => unfiltered_table(&alias.input),
        LogicalPlan::Projection(p) => columns_only(p) && unfiltered_table(&p.input),
        _ => false,
    }
}

/// `join` with its left (`into_left`) or right input replaced by `input`,
/// keeping its keys, other condition, type and NULL handling.
pub(crate) fn with_input(join: &Join, into_left: bool, input: Arc<LogicalPlan>) -> Result<Join> {
    let (left, right) = if into_left { (input, Arc::clone(&join.right)) } else { (Arc::clone(&join.left), input) };
    Join::try_new(left, right, join.on.clone(), join.filter.clone(), join.join_type, join.join_constraint, join.null_equality, join.null_aware)
}
