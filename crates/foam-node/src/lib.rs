//! One FoamDB node process: opens its storage, finds its place in the cluster
//! (bootstrapping a new one or joining through another node), and serves
//!
//! ```text
//!   sql-addr  ── PostgreSQL protocol ─▶ foam-pgwire ─▶ foam-query sessions
//!   node-addr ── gRPC ─┬─ Arrow Flight: FoamDB RPC (catalog, 2PC, remote scans)
//!                      └─ datafusion-distributed worker (query stage fragments)
//! ```
//! Every node can coordinate queries and keeps its partition copies whole
//! (`replicas.rs`); the three lowest-numbered nodes hold the catalog with Raft
//! (`consensus.rs`, `catalog.rs`), and their leader runs the failure detector
//! (`membership.rs`).

mod catalog;
mod consensus;
mod handler;
mod http;
mod identity;
mod membership;
mod replicas;
mod runtime;
pub mod superuser;
pub mod tls;

pub use membership::FailurePolicy;
pub use runtime::{NodeConfig, run_node};
