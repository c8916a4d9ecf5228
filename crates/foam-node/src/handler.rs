//! Answers other nodes' RPC requests with this node's storage, catalog and
//! transaction decisions.

use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use bytes::Bytes;
use foam_common::{FoamError, FoamResult};
use foam_query::NodeContext;
use foam_rpc::server::BatchStream;
use foam_rpc::{NodeHandler, NodeRequest, NodeResponse, ScanRequest, SegmentPart};
use futures::StreamExt;
use futures::stream::BoxStream;

pub struct FoamNodeHandler {
    pub node: Arc<NodeContext>,
    pub replication: Arc<crate::replicas::Replication>,
    pub catalog: Arc<crate::catalog::ClusterCatalog>,
}

#[async_trait]
impl NodeHandler for FoamNodeHandler {
    async fn handle(&self, request: NodeRequest, payload: Bytes) -> FoamResult<(NodeResponse, Bytes)> {
        let node = &self.node;
        let response = match request {
            NodeRequest::Ping { from_leader } => {
                if from_leader {
                    self.catalog.heard_from_leader();
                }
                node.pong()
            }
            request @ (NodeRequest::CatalogGet { .. }
            | NodeRequest::Timestamp
            | NodeRequest::CatalogApply { .. }
            | NodeRequest::CheckNodes
            | NodeRequest::DecideCommit { .. }
            | NodeRequest::SettleTxn { .. }
            | NodeRequest::ForgetTxns { .. }) => self.catalog.serve(request).await?,
            NodeRequest::Raft { rpc } => {
                return Ok((NodeResponse::Ok, crate::consensus::handle(&self.catalog.raft, rpc, &payload).await?));
            }
            NodeRequest::StageSegment { .. } => {
                return Err(FoamError::InvalidParameter {
                    message: "a segment comes as a stream of its pieces (Flight DoPut), not as one request".into(),
                });
            }
            request @ (NodeRequest::Stage { .. }
            | NodeRequest::Prepare { .. }
            | NodeRequest::Commit { .. }
            | NodeRequest::Abort { .. }
            | NodeRequest::KeepAlive { .. }
            | NodeRequest::RollbackStatements { .. }
            | NodeRequest::CheckStagedKeys { .. }) => {
                foam_query::write::handle_participant_request(node, request, payload).await?
            }
            NodeRequest::CommitTransaction { txn, participants } => {
                foam_query::write::commit_transaction(node, txn, &participants).await?;
                NodeResponse::Ok
            }
            NodeRequest::AbortTransaction { txn, participants } => {
                foam_query::write::abort_transaction(node, txn, &participants).await;
                NodeResponse::Ok
            }
            request @ (NodeRequest::ListSegments { .. }
            | NodeRequest::ReadSegment { .. }
            | NodeRequest::FenceForCatchUp { .. }
            | NodeRequest::SwitchInReplica { .. }) => return self.replication.handle(request).await,
            NodeRequest::ValidateUniqueKey { table_id, partition, key_name, catalog_version } => {
                foam_query::write::keys::validate_unique_key(node, table_id, partition, key_name, catalog_version).await?;
                NodeResponse::Ok
            }
            NodeRequest::FenceForConstraint { table_id, partition, catalog_version } => {
                foam_query::write::checks::fence_for_constraint(node, table_id, partition, catalog_version).await?;
                NodeResponse::Ok
            }
            NodeRequest::TxnOutcome { txn } => NodeResponse::Outcome { outcome: node.decisions.outcome(txn) },
            NodeRequest::PartitionStats { table_id, partitions } => NodeResponse::Stats {
                stats: partitions.into_iter().map(|p| (p, node.storage.stats(table_id, p))).collect(),
            },
            NodeRequest::PartitionDigests { table_id, partitions } => {
                let storage = node.storage.clone();
                let digests = tokio::task::spawn_blocking(move || storage.digests(table_id, partitions))
                    .await
                    .map_err(|e| FoamError::internal(e.to_string()))??;
                NodeResponse::Digests { digests }
            }
            NodeRequest::Traffic { reset } => {
                let snapshot = node.traffic.snapshot();
                if reset {
                    node.traffic.reset();
                }
                NodeResponse::Traffic { snapshot }
            }
            NodeRequest::Checkpoint => {
                let storage = node.storage.clone();
                tokio::task::spawn_blocking(move || storage.checkpoint_now()).await.map_err(|e| FoamError::internal(e.to_string()))??;
                NodeResponse::Ok
            }
            NodeRequest::DropTableData { table_id } => {
                let storage = node.storage.clone();
                tokio::task::spawn_blocking(move || storage.drop_table(table_id))
                    .await
                    .map_err(|e| FoamError::internal(e.to_string()))??;
                NodeResponse::Ok
            }
        };
        Ok((response, Bytes::new()))
    }

    async fn scan(&self, request: ScanRequest) -> FoamResult<(SchemaRef, BatchStream)> {
        let table = self.node.table_by_id(request.table_id).await?.ok_or_else(|| FoamError::UndefinedTable {
            name: format!("with id {}", request.table_id),
        })?;
        let schema = table.arrow_schema();
        let schema = match &request.projection {
            Some(indices) => Arc::new(schema.project(indices).map_err(|e| FoamError::InvalidParameter {
                message: format!("bad scan projection: {e}"),
            })?),
            None => schema,
        };
        let node = self.node.clone();
        let stream = foam_query::exec::scan::read_local_partition_filtered(
            &self.node,
            &table,
            request.partition,
            request.projection,
            &request.filters,
            foam_query::exec::scan::ReadView { own_writes: request.own_writes, staged_rows: request.staged_rows, snapshot: request.snapshot, key: request.key },
        )
        .inspect(move |batch| {
            if let Ok(batch) = batch {
                node.rows_sent_to_peers.fetch_add(batch.num_rows() as u64, std::sync::atomic::Ordering::Relaxed);
            }
        })
        .boxed();
        Ok((schema, stream))
    }

    async fn put(&self, request: NodeRequest, parts: BoxStream<'static, FoamResult<SegmentPart>>) -> FoamResult<NodeResponse> {
        match request {
            NodeRequest::StageSegment { txn, coordinator, table_id, partition, placement_version } => {
                foam_query::write::receive_segment(&self.node, txn, coordinator, (table_id, partition), placement_version, parts).await?;
                Ok(NodeResponse::Ok)
            }
            other => Err(FoamError::InvalidParameter { message: format!("only a segment comes as a stream, not {other:?}") }),
        }
    }
}
