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

pub mod catalog;
pub mod connections;
pub mod context;
pub mod distributed;
pub mod exec;
pub mod frontend;
pub mod optimizer;
pub mod options;
pub mod write;

pub use context::{CatalogService, NodeContext};
pub use frontend::session::{FoamSession, StatementOutput};
