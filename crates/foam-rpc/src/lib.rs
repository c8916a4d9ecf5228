//! FoamDB's node-to-node RPC: catalog reads and DDL, the two phases of commit,
//! and shipping rows to the node that owns their partition.
//!
//! It rides on Arrow Flight, which tonic already serves for the distributed query
//! workers, so one port per node carries both and no code generation is needed:
//! requests are `DoAction` calls whose body is a JSON header followed by an
//! optional binary payload (Arrow IPC rows), remote partition scans are
//! `DoGet` streams of Arrow batches, and a bulk loader streams each segment
//! file to a node as a `DoPut` of its pieces.
//!
//! ```text
//!   coordinator node                          owner node
//!   NodeClient::call(Stage{..}, ipc rows) ──▶ NodeHandler::handle ──▶ StorageEngine::stage
//!   NodeClient::scan(ScanRequest)        ◀── NodeHandler::scan (Flight DoGet stream)
//!   loader: NodeClient::put_segment      ──▶ NodeHandler::put (Flight DoPut stream)
//! ```
//! Every request carries the cluster's secret (`auth.rs`).

pub mod auth;
pub mod client;
pub mod frame;
pub mod messages;
pub mod server;
pub mod traffic;

pub use auth::{ClusterSecret, SecretCheck};
pub use client::{NodeClient, NodeClients, peer_endpoint};
pub use messages::{NodeRequest, NodeResponse, RaftRpc, ScanRequest, SegmentPart, SegmentTrailer};
pub use server::{NodeHandler, node_flight_server};
pub use traffic::{PeerTraffic, Traffic, TrafficRates, TrafficSnapshot};
