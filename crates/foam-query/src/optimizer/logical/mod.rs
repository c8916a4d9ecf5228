//! FoamDB's logical optimizer rules, run on the coordinating node after
//! DataFusion's (order: `optimizer/mod.rs`).

pub mod aggregate_filters;
pub mod quoted_literals;
pub mod checked_arithmetic;
pub mod eager_aggregate;
pub mod eager_count;
pub mod early_replica_join;
pub mod early_semi_join;
pub mod group_key_filter;
pub mod integer_literals;
pub mod kept_types;
pub mod like;
pub mod named_rewrite;
pub mod null_equal_joins;
pub mod numeric_operators;
pub mod outer_reference_types;
pub mod pg_casts;
pub mod session_zone;
pub mod set_multiplicity;
pub mod similar_to;
pub mod text_casts;
pub(crate) mod plan_shape;
#[cfg(test)]
mod rule_tests;
pub mod unnest_subqueries;
