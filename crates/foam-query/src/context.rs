//! What a node's query code needs at hand, on the coordinator and on workers
//! alike: its identity, its storage engine, clients for its peers, and the
//! catalog. It travels inside DataFusion's `SessionConfig` as an extension, so a
//! `FoamScanExec` running on any node finds that node's storage.

use std::sync::Arc;

use async_trait::async_trait;
use foam_catalog::model::CommandOutcome;
use foam_catalog::model::ReplicaState;
use foam_catalog::txns::TxnDecision;
use foam_catalog::{Catalog, CatalogCommand, NodeInfo, TableDef};
use foam_common::{FoamError, FoamResult, NodeId, PartitionId, TableId, TxnId};
use foam_rpc::{NodeClient, NodeClients, NodeResponse};
use foam_storage::{DecisionLog, StorageEngine};

/// Access to the cluster catalog, which the meta nodes replicate with Raft
/// (foam-node's `catalog.rs`).
#[async_trait]
pub trait CatalogService: Send + Sync {
    /// The newest catalog this node has seen, without any I/O.
    fn current(&self) -> Arc<Catalog>;
    /// Makes sure this node sees every change committed before the call.
    async fn refresh(&self) -> FoamResult<Arc<Catalog>>;
    /// Applies a DDL command through the catalog leader; returns the new catalog.
    async fn apply(&self, command: CatalogCommand) -> FoamResult<(Arc<Catalog>, CommandOutcome)>;
    /// Has the leader ping every node now and mark the ones that refuse
    /// connections down (a query just failed talking to a peer); returns the
    /// catalog after.
    async fn check_nodes(&self) -> FoamResult<Arc<Catalog>>;
    /// Fails at once (57P03) when this node, by what it heard lately, seems
    /// cut off from the majority of the meta nodes: a write then need not
    /// wait on peers it cannot reach before its commit is refused anyway.
    fn refuse_if_cut_off(&self) -> FoamResult<()>;
    /// A timestamp from the cluster clock, above every one handed out
    /// before the call anywhere in the cluster (the catalog leader's
    /// timestamp oracle). Snapshots and commit timestamps come from it.
    async fn timestamp(&self) -> FoamResult<u64>;
    /// Records that `txn`, prepared on every one of `participants`, commits
    /// at a new timestamp of the cluster clock, durably on a majority of the
    /// meta nodes; returns the recorded outcome, which is `Aborted` when a
    /// participant gave up on the transaction first (`foam_catalog::txns`).
    async fn decide_commit(&self, txn: TxnId, prepare_ts: u64, participants: &[NodeId]) -> FoamResult<TxnDecision>;
    /// The recorded outcome of `txn`, recording ABORT when none was decided:
    /// asked by a participant whose coordinator is gone or no longer runs it.
    async fn settle_txn(&self, txn: TxnId) -> FoamResult<TxnDecision>;
    /// Notes that `node` (`None`: every participant) has `txn`'s outcome on
    /// disk, so its record may go; sent to the leader in batches.
    fn forget_txn(&self, txn: TxnId, node: Option<NodeId>);
    /// This node's part in the catalog's Raft group ("leader", "follower",
    /// "candidate", "learner"), `None` when it is not a meta node.
    fn meta_role(&self) -> Option<String>;
}

/// Succeeds when the catalog lists a copy of the partition on `node` in a
/// state `counts` accepts. The cached catalog answers; only a refusal is
/// confirmed against the newest one, since a copy assigned a moment ago may
/// not have reached this node yet. The refusal (57P03) reads "node N holds no
/// `what` of partition P of "t"`why`".
pub async fn check_copy_held(
    catalog: &dyn CatalogService,
    node: NodeId,
    (table_id, partition): (TableId, PartitionId),
    counts: impl Fn(ReplicaState) -> bool,
    what: &str,
    why: &str,
) -> FoamResult<()> {
    let held = |catalog: &Catalog| {
        catalog
            .table_by_id(table_id)
            .and_then(|t| t.placement.get(partition as usize))
            .is_some_and(|p| p.replicas.iter().any(|r| r.node == node && counts(r.state)))
    };
    if held(&catalog.current()) {
        return Ok(());
    }
    let catalog = catalog.refresh().await?;
    let table = catalog.table_by_id(table_id).ok_or_else(|| FoamError::UndefinedTable { name: format!("with id {table_id}") })?;
    if held(&catalog) {
        return Ok(());
    }
    Err(FoamError::PartitionUnavailable { message: format!("node {node} holds no {what} of partition {partition} of \"{}\"{why}", table.name) })
}

/// Takes a damaged copy of a partition on this node out of service.
#[derive(Clone)]
pub struct DamageReporter {
    node_id: NodeId,
    catalog: Arc<dyn CatalogService>,
}

impl DamageReporter {
    /// Marks this node's replica of the partition lost, so queries read another
    /// replica and the replica keeper copies it anew. The last live copy is
    /// kept (the catalog refuses), and the error stays the query's answer.
    pub async fn report_damaged(&self, table_id: TableId, partition: PartitionId, error: &foam_storage::StorageError) {
        tracing::error!(table_id, partition, %error, "damaged partition copy found; taking it out of service for repair");
        let command = CatalogCommand::SetReplicaState { table_id, partition, node: self.node_id, state: ReplicaState::Lost };
        if let Err(error) = self.catalog.apply(command).await {
            tracing::warn!(table_id, partition, %error, "could not take the damaged copy out of service");
        }
    }
}

pub struct NodeContext {
    pub node_id: NodeId,
    pub storage: Arc<StorageEngine>,
    pub decisions: Arc<DecisionLog>,
    pub clients: Arc<NodeClients>,
    pub catalog: Arc<dyn CatalogService>,
    /// Cached connections to the query workers of every node.
    pub worker_channels: crate::distributed::channels::WorkerChannels,
    /// Messages, bytes and waiting between this node and its peers.
    pub traffic: Arc<foam_rpc::Traffic>,
    /// Partitions this node has read for queries (its own or for a peer), since start.
    pub partition_scans: std::sync::atomic::AtomicU64,
    /// Rows this node streamed to peers from its partitions, since start.
    pub rows_sent_to_peers: std::sync::atomic::AtomicU64,
    /// Committed rows this node read from its partitions for queries (before
    /// any filter), since start: a point read through a key's index counts
    /// the rows with its key, a full read every row.
    pub rows_scanned: Arc<std::sync::atomic::AtomicU64>,
    /// Its segments' footer statistics, which planning reads (`statistics.rs`).
    pub segment_statistics: crate::catalog::statistics::SegmentStatistics,
    /// Where clients' `COPY ... FROM 'file'` may read (`write/copy.rs`).
    pub copy_dir: Option<std::path::PathBuf>,
    /// Its open client connections (`pg_stat_activity`).
    pub connections: Arc<crate::connections::Connections>,
    /// The blocks of sequence values it drew (`exec/sequences.rs`).
    pub sequences: crate::exec::sequences::SequenceBlocks,
}

impl std::fmt::Debug for NodeContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "NodeContext(node {})", self.node_id)
    }
}

impl NodeContext {
    pub fn client(&self, node: &NodeInfo) -> FoamResult<NodeClient> {
        self.clients.get(node.id, &node.node_addr)
    }

    pub fn client_for(&self, node_id: NodeId) -> FoamResult<NodeClient> {
        let catalog = self.catalog.current();
        self.client(catalog.node(node_id)?)
    }

    /// The table with `id`. A table created a moment ago through another node
    /// may not have reached this node's catalog yet, so an unknown id asks the
    /// catalog leader once before it counts as unknown.
    pub async fn table_by_id(&self, id: TableId) -> FoamResult<Option<TableDef>> {
        let mut catalog = self.catalog.current();
        if catalog.table_by_id(id).is_none() {
            catalog = self.catalog.refresh().await?;
        }
        Ok(catalog.table_by_id(id).cloned())
    }

    /// This node's answer to a `Ping`: its counters and its meta role.
    pub fn pong(&self) -> NodeResponse {
        let ordering = std::sync::atomic::Ordering::Relaxed;
        NodeResponse::Pong {
            node_id: self.node_id,
            partition_scans: self.partition_scans.load(ordering),
            rows_sent_to_peers: self.rows_sent_to_peers.load(ordering),
            rows_scanned: self.rows_scanned.load(ordering),
            meta_role: self.catalog.meta_role(),
        }
    }

    pub fn damage_reporter(&self) -> DamageReporter {
        DamageReporter { node_id: self.node_id, catalog: self.catalog.clone() }
    }

    /// The node context registered in a DataFusion config, or a clear error.
    pub fn from_config(config: &datafusion::prelude::SessionConfig) -> datafusion::error::Result<Arc<NodeContext>> {
        config.get_extension::<NodeContext>().ok_or_else(|| {
            datafusion::error::DataFusionError::Internal("FoamDB node context missing from the session".into())
        })
    }
}
