//! The cluster catalog: which nodes exist, which tables and views exist, and the
//! partition map saying which node owns each hash partition of each table.
//!
//! The meta nodes replicate it with Raft (foam-node's `consensus.rs`) and apply
//! each command with [`Catalog::apply`] in log order; every other node keeps a
//! versioned read-only copy fetched from the leader. Types here are plain data
//! that serialize to JSON for the Raft log, the catalog file and RPC. Roles
//! (`roles.rs`), privileges (`privileges.rs`) and sequences (`sequences.rs`)
//! are catalog entries too.
//! Transaction records (`txns.rs`) ride the same Raft log but are kept
//! beside the catalog, not in it.

pub mod model;
pub mod privileges;
pub mod roles;
pub mod sequences;
pub mod store;
pub mod txns;
pub mod types;

pub use model::{Catalog, CatalogCommand, ColumnDef, Distribution, NodeInfo, TableDef, ViewDef};
pub use store::CatalogStore;
pub use types::SqlType;
