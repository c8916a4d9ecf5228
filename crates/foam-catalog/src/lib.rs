//! The cluster catalog: which nodes exist, which tables and views exist, and the
//! partition map saying which node owns each hash partition of each table.
//!
//! One node (the bootstrap node, until replication lands) holds the authoritative
//! copy in its data directory and applies DDL to it one command at a time; every
//! other node keeps a versioned read-only copy fetched over RPC. Types here are
//! plain data that serialize to JSON for the catalog file and for RPC.

pub mod model;
pub mod store;
pub mod types;

pub use model::{Catalog, CatalogCommand, ColumnDef, Distribution, NodeInfo, TableDef, ViewDef};
pub use store::CatalogStore;
pub use types::SqlType;
