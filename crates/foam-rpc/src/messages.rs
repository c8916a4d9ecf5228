//! The messages nodes exchange. JSON so they stay readable in logs and simple
//! to evolve (externally tagged: serde cannot buffer the u128 transaction ids
//! and integer-keyed maps that internally tagged enums would need);
//! bulk rows never go through JSON but travel as the binary payload.

use foam_catalog::model::CommandOutcome;
use foam_catalog::txns::{Settled, TxnDecision};
use foam_catalog::{Catalog, CatalogCommand};
use foam_common::{NodeId, PartitionId, TableId, TxnId};
use foam_storage::{PartitionStats, RowDigest, SegmentInfo, TxnOutcome};
use serde::{Deserialize, Serialize};

use crate::traffic::TrafficSnapshot;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeRequest {
    /// Are you there? `from_leader` when the leader of the meta nodes sends
    /// it as a heartbeat: the receiver then knows it is not cut off.
    Ping { from_leader: bool },
    /// Returns the catalog when the caller's `known_version` is not current.
    CatalogGet { known_version: Option<u64> },
    /// A timestamp from the cluster clock (only the catalog leader answers).
    Timestamp,
    /// Applies DDL (or a node registration) through the catalog leader.
    CatalogApply { command: CatalogCommand },
    /// Rows for one partition of `txn`; the payload is Arrow IPC in the table's
    /// schema. `placement_version` is the partition's placement the
    /// coordinator routed with (a replica refuses writes planned before it joined).
    Stage {
        txn: TxnId,
        coordinator: NodeId,
        table_id: TableId,
        partition: PartitionId,
        #[serde(default)]
        placement_version: u64,
        /// Which statement of a transaction block wrote the rows (0 for a
        /// transaction of one statement); see `foam_storage::OwnWrites`.
        #[serde(default)]
        statement: foam_storage::StatementNumber,
        /// The rows are to be deleted (found by content), not added.
        #[serde(default)]
        delete: bool,
    },
    /// Opens a stream of one segment file for one partition of `txn`, built by
    /// a bulk loader: the file's bytes follow in pieces, then a
    /// [`SegmentTrailer`] (see `NodeClient::put_segment`). The node writes the
    /// pieces to disk as they come and checks the whole file against the
    /// trailer before staging it. Only sent as a stream's header, never alone.
    StageSegment { txn: TxnId, coordinator: NodeId, table_id: TableId, partition: PartitionId, placement_version: u64 },
    /// Make the staged rows durable; `rows` is how many the coordinator shipped
    /// to this node, so a participant that lost some votes no. `prepare_ts`
    /// is the cluster clock's time before the coordinator sent this
    /// (`foam_storage::visibility`).
    Prepare {
        txn: TxnId,
        rows: u64,
        #[serde(default)]
        prepare_ts: u64,
    },
    /// Apply `txn` at commit timestamp `ts`.
    Commit {
        txn: TxnId,
        #[serde(default)]
        ts: u64,
    },
    Abort { txn: TxnId },
    /// Discards what statements after `after` of `txn` staged (ROLLBACK TO
    /// SAVEPOINT, or a failed statement of a block); the rest stays staged.
    RollbackStatements { txn: TxnId, after: foam_storage::StatementNumber },
    /// Checks the unique keys of the rows `txn` staged here so far against
    /// the committed rows: a statement of a transaction block that made a
    /// duplicate fails with 23505 when it ends, not at COMMIT.
    CheckStagedKeys { txn: TxnId },
    /// The coordinator of `txn` (a transaction block between statements)
    /// still holds it open: its staged rows are not idle.
    KeepAlive { txn: TxnId },
    /// Asks this node to coordinate the commit of `txn`, whose rows a client
    /// outside the cluster (the bulk loader) staged on `participants` naming
    /// this node as coordinator.
    CommitTransaction { txn: TxnId, participants: Vec<(NodeId, u64)> },
    /// The same client gives up on `txn`.
    AbortTransaction { txn: TxnId, participants: Vec<NodeId> },
    /// Asks a coordinator how a transaction ended.
    TxnOutcome { txn: TxnId },
    /// A coordinator whose participants all prepared `txn` asks the catalog
    /// leader to record COMMIT at a new timestamp; answered with the recorded
    /// outcome (`Aborted` when a participant settled it first).
    DecideCommit { txn: TxnId, prepare_ts: u64, participants: Vec<NodeId> },
    /// A participant asks the catalog leader for `txn`'s outcome, recording
    /// ABORT if none was decided (its coordinator is gone or no longer runs it).
    SettleTxn { txn: TxnId },
    /// Participants that have these outcomes on disk (`None`: all of them),
    /// so the catalog leader may drop the records.
    ForgetTxns { settled: Vec<Settled> },
    PartitionStats { table_id: TableId, partitions: Vec<PartitionId> },
    /// The digest of this node's copy of each of `partitions` (reads them whole).
    PartitionDigests { table_id: TableId, partitions: Vec<PartitionId> },
    /// `ALTER TABLE ... ADD PRIMARY KEY | UNIQUE`: once this node's catalog
    /// is at `catalog_version` (which holds the key), wait for the
    /// transactions prepared on its copy of the partition before then, and
    /// check the copy's rows for a repeated key.
    ValidateUniqueKey { table_id: TableId, partition: PartitionId, key_name: String, catalog_version: u64 },
    /// `ALTER TABLE ... ADD CHECK` on a node holding a copy of a partition:
    /// once its catalog is at `catalog_version` (which holds the constraint),
    /// refuse writes planned before it and wait for the transactions
    /// prepared on the copy before then to be decided.
    FenceForConstraint { table_id: TableId, partition: PartitionId, catalog_version: u64 },
    /// Deletes this node's data of a dropped table.
    DropTableData { table_id: TableId },
    /// `CHECKPOINT`: writes every memtable of this node to segments and
    /// starts a fresh WAL file.
    Checkpoint,
    /// This node's traffic counters; `reset` clears them after reading.
    Traffic { reset: bool },
    /// Asks the catalog leader to ping every node now and mark the
    /// unreachable ones down (a query failed talking to a peer).
    CheckNodes,
    /// Catch-up, step 1 on a live replica: flush and list the partition's segments.
    ListSegments { table_id: TableId, partition: PartitionId },
    /// Reads `length` bytes at `offset` of a listed segment file (the payload of the reply).
    ReadSegment { table_id: TableId, partition: PartitionId, file_name: String, offset: u64, length: u64 },
    /// Catch-up, step 2: fence writes to the partition, wait for undecided
    /// ones, flush, and list the segments; the fence lasts until
    /// `SwitchInReplica` or its lease runs out.
    FenceForCatchUp { table_id: TableId, partition: PartitionId },
    /// Catch-up, step 3: `node` has every listed segment; the fenced replica
    /// makes it live in the catalog and lowers its fence to the new placement.
    SwitchInReplica { table_id: TableId, partition: PartitionId, node: NodeId, fence_token: u64 },
    /// A Raft message between meta nodes; the payload is its JSON, and so is
    /// the reply's (`consensus.rs` in foam-node).
    Raft { rpc: RaftRpc },
}

/// The kinds of Raft message.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RaftRpc {
    AppendEntries,
    Vote,
    InstallSnapshot,
}

impl NodeRequest {
    /// How long the caller waits for the reply: a stopped (not crashed) peer
    /// accepts connections but never answers, and must not hang its callers.
    pub fn timeout(&self) -> std::time::Duration {
        use foam_common::limits::{HEARTBEAT_TIMEOUT_MS, RPC_REQUEST_TIMEOUT_MS};
        let ms = match self {
            NodeRequest::Ping { .. } => HEARTBEAT_TIMEOUT_MS,
            // Catalog reads and the majority check go to the catalog leader;
            // one that stopped answering must not hold a statement long.
            NodeRequest::CatalogGet { .. } => HEARTBEAT_TIMEOUT_MS * 2,
            // Coordinating a bulk load's commit finishes its staged files everywhere.
            NodeRequest::CommitTransaction { .. } => RPC_REQUEST_TIMEOUT_MS * 60,
            // Waits for undecided writes, then reads the partition's keys.
            NodeRequest::ValidateUniqueKey { .. } | NodeRequest::FenceForConstraint { .. } => RPC_REQUEST_TIMEOUT_MS * 10,
            _ => RPC_REQUEST_TIMEOUT_MS,
        };
        std::time::Duration::from_millis(ms)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeResponse {
    Ok,
    /// `meta_role`: the node's part in the catalog's Raft group ("leader",
    /// "follower", "candidate", "learner"), `None` outside it.
    Pong {
        node_id: NodeId,
        partition_scans: u64,
        rows_sent_to_peers: u64,
        #[serde(default)]
        rows_scanned: u64,
        #[serde(default)]
        meta_role: Option<String>,
    },
    Catalog { catalog: Option<Catalog> },
    Applied { catalog: Catalog, outcome: CommandOutcome },
    Outcome { outcome: TxnOutcome },
    /// The outcome a transaction record settled on (DecideCommit, SettleTxn).
    Decided { decision: TxnDecision },
    Timestamp { ts: u64 },
    Stats { stats: Vec<(PartitionId, PartitionStats)> },
    Digests { digests: Vec<(PartitionId, RowDigest)> },
    Traffic { snapshot: TrafficSnapshot },
    Segments { segments: Vec<SegmentInfo>, fence_token: Option<u64> },
    /// This node does not lead the catalog's Raft group; `leader` is the node
    /// address of the one it follows, when it knows one.
    NotLeader { leader: Option<String> },
}

/// The end of a segment stream: what the loader wrote. The node checks the
/// file it received against it, and refuses a stream that ends without one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentTrailer {
    pub rows: u64,
    pub crc32: u32,
    pub block_crc32: Vec<u32>,
}

/// One message of a segment stream after its header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SegmentPart {
    /// The next bytes of the file.
    Chunk(bytes::Bytes),
    /// The file is complete.
    End(SegmentTrailer),
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
    /// A statement of a transaction block also reads the rows its
    /// transaction's earlier statements staged on the owner.
    #[serde(default)]
    pub own_writes: Option<foam_storage::OwnWrites>,
    /// The rows `own_writes` staged for the partition, which the owner must
    /// hold (`foam_query::exec::scan::PartitionRead::staged_rows`).
    #[serde(default)]
    pub staged_rows: Option<u64>,
    /// The statement's snapshot: the owner returns the rows of transactions
    /// committed at or before it (the newest rows when `None`).
    #[serde(default)]
    pub snapshot: Option<u64>,
    /// The values of a unique key the reader's filters fix: the owner may
    /// read only the rows with them, through the key's index.
    #[serde(default)]
    pub key: Option<foam_storage::KeyProbe>,
}
