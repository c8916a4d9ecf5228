//! FoamDB's query tier: DataFusion and datafusion-distributed, taught where data lives.
//!
//! ```text
//!  SQL ─▶ session (statement dispatch) ─▶ DDL ─▶ catalog leader (Raft)
//!                 │                     ─▶ COPY / INSERT ─▶ write (2PC coordinator) ─▶ owner nodes
//!                 ▼
//!        DataFusion plan over FoamTable ─▶ FoamScanExec leaves
//!                 │ datafusion-distributed cuts stages; our handlers give one task per
//!                 ▼ owner node and route it there
//!        worker on each owner: scan local partitions, filter, project, partial aggregate
//!                 │ Arrow Flight
//!                 ▼
//!        coordinator: final stage, rows to the client
//! ```

pub mod catalog_provider;
pub mod checked_rules;
pub mod codec;
pub mod context;
pub mod copartition;
pub mod copy;
pub mod count_ones;
pub mod ddl;
pub mod distributed;
pub mod dynamic_filters;
pub mod eager_aggregate;
pub mod eager_count;
pub mod early_replica_join;
pub mod early_semi_join;
pub mod explain;
pub mod explicit_sorts;
pub mod group_key_filter;
pub mod interrupt;
pub mod join_yield;
pub mod like;
pub mod output_claims;
mod plan_shape;
pub mod regroup;
pub mod replica_join;
pub mod requirements;
pub mod route;
pub mod scan_exec;
pub mod select_names;
pub mod session;
pub mod statistics;
pub mod system_tables;
pub mod table;
pub mod transaction_block;
pub mod unnest_subqueries;
pub mod worker_channels;
pub mod write;

pub use context::{CatalogService, NodeContext};
pub use session::{FoamSession, StatementOutput};
