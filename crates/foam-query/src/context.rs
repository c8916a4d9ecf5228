//! What a node's query code needs at hand, on the coordinator and on workers
//! alike: its identity, its storage engine, clients for its peers, and the
//! catalog. It travels inside DataFusion's `SessionConfig` as an extension, so a
//! `FoamScanExec` running on any node finds that node's storage.

use std::sync::Arc;

use async_trait::async_trait;
use foam_catalog::model::CommandOutcome;
use foam_catalog::{Catalog, CatalogCommand, NodeInfo};
use foam_common::{FoamResult, NodeId};
use foam_rpc::{NodeClient, NodeClients};
use foam_storage::{DecisionLog, StorageEngine};

/// Access to the cluster catalog: the authority on the bootstrap node, a
/// versioned cache elsewhere.
#[async_trait]
pub trait CatalogService: Send + Sync {
    /// The newest catalog this node has seen, without any I/O.
    fn current(&self) -> Arc<Catalog>;
    /// Makes sure this node sees every change committed before the call.
    async fn refresh(&self) -> FoamResult<Arc<Catalog>>;
    /// Applies a DDL command on the authority; returns the new catalog.
    async fn apply(&self, command: CatalogCommand) -> FoamResult<(Arc<Catalog>, CommandOutcome)>;
}

pub struct NodeContext {
    pub node_id: NodeId,
    pub storage: Arc<StorageEngine>,
    pub decisions: Arc<DecisionLog>,
    pub clients: Arc<NodeClients>,
    pub catalog: Arc<dyn CatalogService>,
    /// Cached connections to the query workers of every node.
    pub worker_channels: datafusion_distributed::grpc::DefaultChannelResolver,
    /// Messages, bytes and waiting between this node and its peers.
    pub traffic: Arc<foam_rpc::Traffic>,
    /// Partitions this node has read for queries (its own or for a peer), since start.
    pub partition_scans: std::sync::atomic::AtomicU64,
    /// Rows this node streamed to peers from its partitions, since start.
    pub rows_sent_to_peers: std::sync::atomic::AtomicU64,
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

    /// The node context registered in a DataFusion config, or a clear error.
    pub fn from_config(config: &datafusion::prelude::SessionConfig) -> datafusion::error::Result<Arc<NodeContext>> {
        config.get_extension::<NodeContext>().ok_or_else(|| {
            datafusion::error::DataFusionError::Internal("FoamDB node context missing from the session".into())
        })
    }
}
