//! The messages nodes exchange. JSON so they stay readable in logs and simple
//! to evolve (externally tagged: serde cannot buffer the u128 transaction ids
//! and integer-keyed maps that internally tagged enums would need);
//! bulk rows never go through JSON but travel as the binary payload.

use foam_catalog::model::CommandOutcome;
use foam_catalog::{Catalog, CatalogCommand};
use foam_common::{NodeId, PartitionId, TableId, TxnId};
use foam_storage::{PartitionStats, TxnOutcome};
use serde::{Deserialize, Serialize};

use crate::traffic::TrafficSnapshot;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeRequest {
    Ping,
    /// Returns the catalog when the caller's `known_version` is not current.
    CatalogGet { known_version: Option<u64> },
    /// Applies DDL (or a node registration) on the catalog authority.
    CatalogApply { command: CatalogCommand },
    /// Rows for one partition of `txn`; the payload is Arrow IPC in the table's schema.
    Stage { txn: TxnId, coordinator: NodeId, table_id: TableId, partition: PartitionId },
    /// Make the staged rows durable; `rows` is how many the coordinator shipped
    /// to this node, so a participant that lost some votes no.
    Prepare { txn: TxnId, rows: u64 },
    Commit { txn: TxnId },
    Abort { txn: TxnId },
    /// Asks this node to coordinate the commit of `txn`, whose rows a client
    /// outside the cluster (the bulk loader) staged on `participants` naming
    /// this node as coordinator.
    CommitTransaction { txn: TxnId, participants: Vec<(NodeId, u64)> },
    /// The same client gives up on `txn`.
    AbortTransaction { txn: TxnId, participants: Vec<NodeId> },
    /// Asks a coordinator how a transaction ended.
    TxnOutcome { txn: TxnId },
    PartitionStats { table_id: TableId, partitions: Vec<PartitionId> },
    /// Deletes this node's data of a dropped table.
    DropTableData { table_id: TableId },
    /// This node's traffic counters; `reset` clears them after reading.
    Traffic { reset: bool },
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeResponse {
    Ok,
    Pong { node_id: NodeId, partition_scans: u64, rows_sent_to_peers: u64 },
    Catalog { catalog: Option<Catalog> },
    Applied { catalog: Catalog, outcome: CommandOutcome },
    Outcome { outcome: TxnOutcome },
    Stats { stats: Vec<(PartitionId, PartitionStats)> },
    Traffic { snapshot: TrafficSnapshot },
}

/// Asks the owner of a partition to stream its committed rows.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ScanRequest {
    pub table_id: TableId,
    pub partition: PartitionId,
    /// Column indices to return; `None` for all columns.
    pub projection: Option<Vec<usize>>,
    /// Filters (DataFusion logical expressions in datafusion-proto bytes) the
    /// owner applies before sending, so only matching rows cross the network.
    /// The receiver filters again; a filter the owner cannot decode is skipped.
    #[serde(default)]
    pub filters: Vec<Vec<u8>>,
}
