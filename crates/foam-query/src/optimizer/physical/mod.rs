//! FoamDB's physical optimizer rules, run on the coordinating node before
//! the plan is cut into stages (order: `optimizer/mod.rs`), and the checks
//! that keep their plans valid.

pub mod aggregate_statistics;
pub mod checked_rules;
pub mod copartition;
pub mod count_ones;
pub mod explicit_sorts;
pub mod filter_pushdown;
pub mod join_yield;
pub mod output_claims;
pub mod projection_pushdown;
pub mod regroup;
pub mod requirements;
