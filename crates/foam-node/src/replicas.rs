//! Keeping this node's partition copies whole: the replica keeper copies every
//! lost or new replica of this node from a live one, and this node's answers
//! when a peer copies from it.
//!
//! ```text
//!  keeper (new copy)                          source (a live replica)
//!  fence own writes, keep its files aside,
//!  empty the partition
//!  ListSegments ───────────────────────────▶ flush, list segments
//!  ReadSegment × (files not held here) ────▶ chunks of each file
//!  FenceForCatchUp ────────────────────────▶ refuse writes, wait for undecided
//!                                            ones, flush, list, lease a token
//!  ReadSegment × (files written meanwhile)
//!  SwitchInReplica(token) ─────────────────▶ catalog: replica live at version f;
//!                                            accept writes planned at ≥ f only
//! ```
//! A writer routes with the partition's placement version; once the new copy
//! is live at version f, every replica refuses writes planned before f (they
//! missed the new copy), which fail with a retriable SQLSTATE. Writes are
//! refused only between the fence and the switch: the time to copy what was
//! written during the bulk copy.
//!
//! A listed segment whose size and checksums match one of this node's former
//! files is installed from that file (checked whole first) instead of being
//! copied: a node that restarts, or was cut off for a while, copies only what
//! changed meanwhile, not every partition it holds a lost copy of.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use foam_catalog::model::{NodeState, ReplicaState};
use foam_catalog::{Catalog, CatalogCommand};
use foam_common::limits::{FENCE_DRAIN_TIMEOUT_MS, REPLICA_COPY_CHUNK_BYTES};
use foam_common::{FoamError, FoamResult, NodeId, PartitionId, TableId};
use foam_query::NodeContext;
use foam_query::context::check_copy_held;
use foam_rpc::{NodeClient, NodeRequest, NodeResponse};
use foam_storage::{SegmentInfo, SetAside, WRITES_FENCED};

/// How often the keeper looks for copies to make or to remove.
const KEEPER_INTERVAL_MS: u64 = 500;

/// How long a source keeps writes fenced for a copy that does not come back
/// to switch in (its node died): then it accepts writes again.
const FENCE_LEASE_MS: u64 = 30_000;

type PartitionKey = (TableId, PartitionId);

/// Bytes of segment files a catch-up copied from the source, and bytes it
/// found already here.
#[derive(Default)]
struct Moved {
    copied: u64,
    reused: u64,
}

pub struct Replication {
    node: Arc<NodeContext>,
    /// Fences this node holds for peers' catch-ups: token per partition.
    leases: Mutex<HashMap<PartitionKey, u64>>,
}

impl Replication {
    pub fn new(node: Arc<NodeContext>) -> Arc<Self> {
        Arc::new(Replication { node, leases: Mutex::default() })
    }

    /// Sets this node's write fences from the catalog at start-up, so writes
    /// planned before a copy was switched in are refused after a restart too.
    pub fn init_fences(&self, catalog: &Catalog) {
        for table in catalog.tables.values() {
            for (partition, placement) in table.placement.iter().enumerate() {
                let version = table.placement_version(partition as PartitionId);
                if placement.replicas.iter().any(|r| r.node == self.node.node_id) && version > 0 {
                    self.node.storage.set_write_fence(table.id, partition as PartitionId, version);
                }
            }
        }
    }

    /// Answers a peer copying a partition from this node.
    pub async fn handle(self: &Arc<Self>, request: NodeRequest) -> FoamResult<(NodeResponse, Bytes)> {
        let storage = self.node.storage.clone();
        if let NodeRequest::ListSegments { table_id, partition }
        | NodeRequest::ReadSegment { table_id, partition, .. }
        | NodeRequest::FenceForCatchUp { table_id, partition }
        | NodeRequest::SwitchInReplica { table_id, partition, .. } = &request
        {
            self.check_live_copy(*table_id, *partition).await?;
        }
        match request {
            NodeRequest::ListSegments { table_id, partition } => {
                let segments = blocking(move || storage.flush_partition(table_id, partition)).await?;
                Ok((NodeResponse::Segments { segments, fence_token: None }, Bytes::new()))
            }
            NodeRequest::ReadSegment { table_id, partition, file_name, offset, length } => {
                let path = storage.segment_path(table_id, partition, &file_name)?;
                let length = length.min(REPLICA_COPY_CHUNK_BYTES as u64);
                let chunk = blocking(move || {
                    use std::io::{Read, Seek, SeekFrom};
                    let mut file = std::fs::File::open(&path).map_err(|e| FoamError::io(&path, e))?;
                    file.seek(SeekFrom::Start(offset)).map_err(|e| FoamError::io(&path, e))?;
                    let mut buffer = Vec::with_capacity(length as usize);
                    file.take(length).read_to_end(&mut buffer).map_err(|e| FoamError::io(&path, e))?;
                    Ok::<_, FoamError>(buffer)
                })
                .await?;
                Ok((NodeResponse::Ok, Bytes::from(chunk)))
            }
            NodeRequest::FenceForCatchUp { table_id, partition } => {
                let restore = self.node.catalog.current().table_by_id(table_id).map(|t| t.placement_version(partition)).unwrap_or(0);
                let fenced = storage.clone();
                blocking(move || {
                    fenced.fence_writes(table_id, partition, restore, Duration::from_millis(FENCE_DRAIN_TIMEOUT_MS))
                })
                .await?;
                let segments = match blocking(move || storage.flush_partition(table_id, partition)).await {
                    Ok(segments) => segments,
                    Err(error) => {
                        self.node.storage.set_write_fence(table_id, partition, restore);
                        return Err(error);
                    }
                };
                let token: u64 = rand_token();
                self.leases.lock().unwrap_or_else(|p| p.into_inner()).insert((table_id, partition), token);
                let this = self.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(FENCE_LEASE_MS)).await;
                    if this.take_lease((table_id, partition), token) {
                        tracing::warn!(table_id, partition, "a catch-up never switched in; accepting writes again");
                        this.lower_fence(table_id, partition).await;
                    }
                });
                Ok((NodeResponse::Segments { segments, fence_token: Some(token) }, Bytes::new()))
            }
            NodeRequest::SwitchInReplica { table_id, partition, node, fence_token } => {
                if !self.take_lease((table_id, partition), fence_token) {
                    return Err(FoamError::PlacementChanged {
                        message: format!("the write fence on partition {partition} of table {table_id} was lifted before the copy finished"),
                    });
                }
                let command = CatalogCommand::SetReplicaState { table_id, partition, node, state: ReplicaState::Live };
                let applied = self.node.catalog.apply(command).await;
                self.lower_fence(table_id, partition).await;
                applied?;
                tracing::info!(table_id, partition, node, "replica switched in");
                Ok((NodeResponse::Ok, Bytes::new()))
            }
            other => Err(FoamError::internal(format!("not a replication request: {other:?}"))),
        }
    }

    /// A peer may copy a partition from this node only where its copy is live
    /// (one check per copied chunk, answered by the cached catalog).
    async fn check_live_copy(&self, table_id: TableId, partition: PartitionId) -> FoamResult<()> {
        let live = |state| state == ReplicaState::Live;
        check_copy_held(self.node.catalog.as_ref(), self.node.node_id, (table_id, partition), live, "live copy", "").await
    }

    fn take_lease(&self, key: PartitionKey, token: u64) -> bool {
        let mut leases = self.leases.lock().unwrap_or_else(|p| p.into_inner());
        if leases.get(&key) == Some(&token) {
            leases.remove(&key);
            true
        } else {
            false
        }
    }

    /// Lowers a fence to the partition's placement version in the newest catalog.
    async fn lower_fence(&self, table_id: TableId, partition: PartitionId) {
        let catalog = match self.node.catalog.refresh().await {
            Ok(catalog) => catalog,
            Err(_) => self.node.catalog.current(),
        };
        let version = catalog.table_by_id(table_id).map(|t| t.placement_version(partition)).unwrap_or(0);
        self.node.storage.set_write_fence(table_id, partition, version);
    }

    /// The keeper: until the node stops, copies this node's lost and new
    /// replicas, and deletes copies the catalog moved elsewhere.
    pub async fn run_keeper(self: Arc<Self>) {
        let mut interval = tokio::time::interval(Duration::from_millis(KEEPER_INTERVAL_MS));
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            interval.tick().await;
            let Ok(catalog) = self.node.catalog.refresh().await else { continue };
            if catalog.nodes.get(&self.node.node_id).is_none_or(|n| n.state != NodeState::Up) {
                continue; // marked down: copies would be lost again
            }
            for (table_id, partition) in copies_to_make(&catalog, self.node.node_id) {
                if let Err(error) = self.catch_up(table_id, partition).await {
                    tracing::warn!(table_id, partition, %error, "catching up a replica failed; will retry");
                }
            }
            self.remove_moved_copies(&catalog).await;
        }
    }

    /// Copies one partition from a live replica and switches this copy in.
    async fn catch_up(&self, table_id: TableId, partition: PartitionId) -> FoamResult<()> {
        let me = self.node.node_id;
        let catalog = self.node.catalog.current();
        let table = catalog.table_by_id(table_id).ok_or_else(|| FoamError::UndefinedTable { name: format!("with id {table_id}") })?;
        let placement = &table.placement[partition as usize];
        let source = placement
            .replicas
            .iter()
            .find(|r| r.node != me && r.state == ReplicaState::Live && catalog.nodes.get(&r.node).is_some_and(|n| n.state == NodeState::Up))
            .map(|r| r.node)
            .ok_or_else(|| FoamError::PartitionUnavailable {
                message: format!("no live replica to copy partition {partition} of \"{}\" from", table.name),
            })?;
        if placement.replicas.iter().any(|r| r.node == me && r.state == ReplicaState::Lost) {
            let command = CatalogCommand::SetReplicaState { table_id, partition, node: me, state: ReplicaState::CatchingUp };
            self.node.catalog.apply(command).await?;
        }
        tracing::info!(table = %table.name, partition, source, "catching up a replica");
        // No write may land here until the copy is switched in: a writer with
        // an old placement could still think this copy is live.
        let storage = self.node.storage.clone();
        let mut kept = blocking(move || {
            storage.fence_writes(table_id, partition, WRITES_FENCED, Duration::from_millis(FENCE_DRAIN_TIMEOUT_MS))?;
            let kept = storage.set_aside_segments(table_id, partition);
            storage.reset_partition(table_id, partition)?;
            Ok::<_, foam_storage::StorageError>(kept)
        })
        .await?;
        let client = self.node.client_for(source)?;
        let listed = segments_of(&client, NodeRequest::ListSegments { table_id, partition }).await?.0;
        let mut moved = Moved::default();
        for segment in &listed {
            self.install_or_copy(&client, table_id, partition, segment, &mut kept, &mut moved).await?;
        }
        let (fenced, token) = segments_of(&client, NodeRequest::FenceForCatchUp { table_id, partition }).await?;
        let token = token.ok_or_else(|| FoamError::internal("fence without a token"))?;
        for segment in fenced.iter().filter(|s| !listed.iter().any(|l| l.file_name == s.file_name)) {
            self.install_or_copy(&client, table_id, partition, segment, &mut kept, &mut moved).await?;
        }
        // A flush on the source meanwhile replaced some files it listed
        // first, and deletions since then are in the fenced list's vectors.
        let storage = self.node.storage.clone();
        blocking(move || storage.retain_segments(table_id, partition, &fenced)).await?;
        // The copied files hold changes this node never applied itself, so
        // it cannot serve snapshots from before them: every one committed
        // before the source's fence has a timestamp below this.
        let floor = self.node.catalog.timestamp().await?;
        let storage = self.node.storage.clone();
        blocking(move || storage.finish_refill(table_id, partition, floor)).await?;
        client.call(&NodeRequest::SwitchInReplica { table_id, partition, node: me, fence_token: token }, &[]).await?;
        self.lower_fence(table_id, partition).await;
        tracing::info!(table_id, partition, bytes = moved.copied, reused_bytes = moved.reused, "replica caught up and live");
        Ok(())
    }

    /// Installs one segment the source lists: from this node's own former
    /// files when one has its content (a node back from a restart still holds
    /// most of what it had), else copied from the source.
    async fn install_or_copy(
        &self,
        client: &NodeClient,
        table_id: TableId,
        partition: PartitionId,
        segment: &SegmentInfo,
        kept: &mut SetAside,
        moved: &mut Moved,
    ) -> FoamResult<()> {
        if let Some(path) = kept.take_matching(segment) {
            let storage = self.node.storage.clone();
            let (info, from) = (segment.clone(), path.clone());
            match blocking(move || storage.install_segment(table_id, partition, &from, info)).await {
                Ok(()) => {
                    moved.reused += segment.bytes;
                    return Ok(());
                }
                Err(error) => {
                    tracing::warn!(table_id, partition, %error, "a segment kept from before the catch-up failed its checks; copying it");
                    let _ = std::fs::remove_file(&path);
                }
            }
        }
        moved.copied += self.copy_segment(client, table_id, partition, segment).await?;
        Ok(())
    }

    /// Copies one segment file in chunks, verifies its checksum and installs it.
    async fn copy_segment(
        &self,
        client: &NodeClient,
        table_id: TableId,
        partition: PartitionId,
        segment: &SegmentInfo,
    ) -> FoamResult<u64> {
        let path = self.node.storage.incoming_dir().join(format!("copy-{table_id}-{partition}-{}", segment.file_name));
        let mut file = std::fs::File::create(&path).map_err(|e| FoamError::io(&path, e))?;
        let mut offset = 0u64;
        while offset < segment.bytes {
            let request = NodeRequest::ReadSegment {
                table_id,
                partition,
                file_name: segment.file_name.clone(),
                offset,
                length: REPLICA_COPY_CHUNK_BYTES as u64,
            };
            let (_, chunk) = client.call(&request, &[]).await?;
            if chunk.is_empty() {
                return Err(FoamError::Corrupted { path: segment.file_name.clone(), message: "the source's file is shorter than listed".into() });
            }
            std::io::Write::write_all(&mut file, &chunk).map_err(|e| FoamError::io(&path, e))?;
            offset += chunk.len() as u64;
        }
        file.sync_all().map_err(|e| FoamError::io(&path, e))?;
        drop(file);
        let storage = self.node.storage.clone();
        let info = segment.clone();
        blocking(move || storage.install_segment(table_id, partition, &path, info)).await?;
        Ok(segment.bytes)
    }

    /// Deletes copies of partitions this node no longer holds a replica of
    /// (it was re-protected elsewhere while this node was down).
    async fn remove_moved_copies(&self, catalog: &Catalog) {
        for (table_id, partition) in self.node.storage.partition_keys() {
            let Some(table) = catalog.table_by_id(table_id) else { continue };
            let Some(placement) = table.placement.get(partition as usize) else { continue };
            if placement.replicas.iter().any(|r| r.node == self.node.node_id) {
                continue;
            }
            tracing::info!(table = %table.name, partition, "removing a copy that was moved to another node");
            let storage = self.node.storage.clone();
            if let Err(error) = blocking(move || storage.remove_partition(table_id, partition)).await {
                tracing::warn!(%error, "removing a moved copy failed");
            }
        }
    }
}

/// This node's replicas that are lost or new and can be copied now.
fn copies_to_make(catalog: &Catalog, me: NodeId) -> Vec<PartitionKey> {
    let mut wanted = Vec::new();
    for table in catalog.tables.values() {
        for (partition, placement) in table.placement.iter().enumerate() {
            if placement.replicas.iter().any(|r| r.node == me && r.state != ReplicaState::Live) {
                wanted.push((table.id, partition as PartitionId));
            }
        }
    }
    wanted
}

async fn segments_of(client: &NodeClient, request: NodeRequest) -> FoamResult<(Vec<SegmentInfo>, Option<u64>)> {
    match client.call(&request, &[]).await? {
        (NodeResponse::Segments { segments, fence_token }, _) => Ok((segments, fence_token)),
        (other, _) => Err(FoamError::internal(format!("unexpected reply {other:?}"))),
    }
}

/// Runs storage work off the async threads; its error becomes a [`FoamError`].
async fn blocking<T: Send + 'static, E: Into<FoamError> + Send + 'static>(work: impl FnOnce() -> Result<T, E> + Send + 'static) -> FoamResult<T> {
    tokio::task::spawn_blocking(work).await.map_err(|e| FoamError::internal(e.to_string()))?.map_err(Into::into)
}

fn rand_token() -> u64 {
    uuid::Uuid::new_v4().as_u64_pair().0
}
