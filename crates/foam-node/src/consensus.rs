//! Agreement on the cluster: the catalog (membership, tables, the partition
//! map) is a Raft state machine replicated with `openraft` over the meta nodes
//! (the three lowest node ids, or every node when there are fewer). A catalog
//! command is a Raft log entry; it takes effect once a majority of the meta
//! nodes has it on disk, and every meta node applies it in log order.
//!
//! This file is the Raft plumbing: the on-disk log and vote (`raft/log.jsonl`,
//! `raft/vote.json`), the state machine with its snapshot (`raft/state.json`),
//! and the network, which carries Raft's messages as `NodeRequest::Raft` over
//! the node RPC endpoint. `catalog.rs` builds the catalog service on it.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::io::{Cursor, Write};
use std::ops::RangeBounds;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use foam_catalog::model::CommandOutcome;
use foam_catalog::txns::TxnRecords;
use foam_catalog::{Catalog, CatalogCommand};
use foam_common::{FoamError, FoamResult, NodeId};
use foam_rpc::{NodeClients, NodeRequest, NodeResponse, RaftRpc};
use openraft::error::{InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse, VoteRequest,
    VoteResponse,
};
use openraft::storage::{LogFlushed, LogState, RaftLogStorage, RaftStateMachine, Snapshot};
use openraft::{
    BasicNode, Entry, EntryPayload, LogId, OptionalSend, RaftLogReader, RaftSnapshotBuilder, SnapshotMeta,
    StorageError, StorageIOError, StoredMembership, Vote,
};
use serde::{Deserialize, Serialize};

/// What applying a catalog command answered: its outcome, or the error (in
/// wire form, `SQLSTATE|message`) that left the catalog unchanged.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CommandReply(pub Result<CommandOutcome, String>);

openraft::declare_raft_types!(
    /// Raft over catalog commands.
    pub CatalogRaft:
        D = CatalogCommand,
        NodeId = NodeId,
        R = CommandReply,
);

pub type Raft = openraft::Raft<CatalogRaft>;

const RAFT_DIR_NAME: &str = "raft";
const LOG_FILE_NAME: &str = "log.jsonl";
const VOTE_FILE_NAME: &str = "vote.json";
const PURGED_FILE_NAME: &str = "purged.json";
const STATE_FILE_NAME: &str = "state.json";

/// Raft timing: a leader heartbeats every 250 ms; a follower that hears
/// nothing for 1–2 s starts an election (inside the failure detector's 3 s,
/// so a new leader exists before nodes are judged). openraft also gives each
/// append-entries call the heartbeat interval to answer: at 100 ms a loaded
/// two-core machine missed it often enough that a leader with a live majority
/// went seconds without a counted acknowledgement and refused statements as
/// cut off.
pub fn raft_config() -> FoamResult<Arc<openraft::Config>> {
    let config = openraft::Config {
        cluster_name: "foamdb".into(),
        heartbeat_interval: 250,
        election_timeout_min: 1000,
        election_timeout_max: 2000,
        ..Default::default()
    };
    Ok(Arc::new(config.validate().map_err(|e| FoamError::internal(format!("raft config: {e}")))?))
}

pub fn raft_dir(data_dir: &Path) -> PathBuf {
    data_dir.join(RAFT_DIR_NAME)
}

fn io_error(error: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::other(error.to_string())
}

// ---------------------------------------------------------------- the log --

/// The Raft log and vote, kept in memory and on disk: entries are appended to
/// `log.jsonl` and fsynced before Raft hears they are durable; truncation and
/// purging rewrite the file atomically (the catalog's log is small).
#[derive(Clone)]
pub struct LogStore {
    inner: Arc<Mutex<LogInner>>,
}

struct LogInner {
    dir: PathBuf,
    vote: Option<Vote<NodeId>>,
    last_purged: Option<LogId<NodeId>>,
    entries: BTreeMap<u64, Entry<CatalogRaft>>,
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> FoamResult<Option<T>> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| FoamError::Corrupted { path: path.display().to_string(), message: e.to_string() }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(FoamError::io(path, e)),
    }
}

fn write_json<T: Serialize>(path: &Path, value: &T) -> FoamResult<()> {
    let bytes = serde_json::to_vec(value).map_err(|e| FoamError::internal(e.to_string()))?;
    Ok(foam_common::fs::write_atomic(path, &bytes)?)
}

impl LogStore {
    pub fn open(data_dir: &Path) -> FoamResult<Self> {
        let dir = raft_dir(data_dir);
        foam_common::fs::create_dir_all(&dir)?;
        let vote = read_json(&dir.join(VOTE_FILE_NAME))?;
        let last_purged = read_json(&dir.join(PURGED_FILE_NAME))?.flatten();
        let mut entries = BTreeMap::new();
        let path = dir.join(LOG_FILE_NAME);
        match std::fs::read(&path) {
            Ok(bytes) => {
                for line in bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
                    // A torn last line was never acknowledged to Raft.
                    let Ok(entry) = serde_json::from_slice::<Entry<CatalogRaft>>(line) else { break };
                    entries.insert(entry.log_id.index, entry);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(FoamError::io(&path, e)),
        }
        Ok(LogStore { inner: Arc::new(Mutex::new(LogInner { dir, vote, last_purged, entries })) })
    }

    /// True when this node has taken part in a Raft group before.
    pub fn has_state(&self) -> bool {
        let inner = self.lock();
        inner.vote.is_some() || !inner.entries.is_empty() || inner.last_purged.is_some()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LogInner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl LogInner {
    fn rewrite(&self) -> std::io::Result<()> {
        let mut bytes = Vec::new();
        for entry in self.entries.values() {
            serde_json::to_writer(&mut bytes, entry).map_err(io_error)?;
            bytes.push(b'\n');
        }
        foam_common::fs::write_atomic(&self.dir.join(LOG_FILE_NAME), &bytes).map_err(io_error)
    }

    fn append(&mut self, entries: Vec<Entry<CatalogRaft>>) -> std::io::Result<()> {
        let mut bytes = Vec::new();
        for entry in &entries {
            serde_json::to_writer(&mut bytes, entry).map_err(io_error)?;
            bytes.push(b'\n');
        }
        let path = self.dir.join(LOG_FILE_NAME);
        let mut file = std::fs::OpenOptions::new().create(true).append(true).open(&path)?;
        file.write_all(&bytes)?;
        file.sync_data()?;
        for entry in entries {
            self.entries.insert(entry.log_id.index, entry);
        }
        Ok(())
    }
}

impl RaftLogReader<CatalogRaft> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<CatalogRaft>>, StorageError<NodeId>> {
        Ok(self.lock().entries.range(range).map(|(_, e)| e.clone()).collect())
    }
}

impl RaftLogStorage<CatalogRaft> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<CatalogRaft>, StorageError<NodeId>> {
        let inner = self.lock();
        let last = inner.entries.values().next_back().map(|e| e.log_id).or(inner.last_purged);
        Ok(LogState { last_purged_log_id: inner.last_purged, last_log_id: last })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), StorageError<NodeId>> {
        let mut inner = self.lock();
        write_json(&inner.dir.join(VOTE_FILE_NAME), vote).map_err(|e| StorageIOError::write_vote(&e))?;
        inner.vote = Some(*vote);
        Ok(())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, StorageError<NodeId>> {
        Ok(self.lock().vote)
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<CatalogRaft>) -> Result<(), StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry<CatalogRaft>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let result = self.lock().append(entries.into_iter().collect());
        let failed = result.as_ref().err().map(|e| StorageIOError::write_logs(&io_error(e)));
        callback.log_io_completed(result);
        match failed {
            Some(error) => Err(error.into()),
            None => Ok(()),
        }
    }

    async fn truncate(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        let mut inner = self.lock();
        inner.entries.retain(|index, _| *index < log_id.index);
        inner.rewrite().map_err(|e| StorageIOError::write_logs(&e))?;
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        let mut inner = self.lock();
        write_json(&inner.dir.join(PURGED_FILE_NAME), &Some(log_id)).map_err(|e| StorageIOError::write_logs(&e))?;
        inner.last_purged = Some(log_id);
        inner.entries.retain(|index, _| *index > log_id.index);
        inner.rewrite().map_err(|e| StorageIOError::write_logs(&e))?;
        Ok(())
    }
}

// ------------------------------------------------------- the state machine --

/// The replicated state: the catalog and what Raft needs to know of it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct MachineState {
    pub last_applied: Option<LogId<NodeId>>,
    pub membership: StoredMembership<NodeId, BasicNode>,
    pub catalog: Catalog,
    /// Outcomes of distributed transactions (`foam_catalog::txns`).
    #[serde(default)]
    pub txns: TxnRecords,
}

/// Applies committed catalog commands; the state is saved after every batch
/// and is also the snapshot sent to a meta node that fell behind.
#[derive(Clone)]
pub struct StateMachine {
    path: PathBuf,
    state: Arc<RwLock<MachineState>>,
    /// The state's catalog, shared as is: the catalog service reads it on
    /// every statement, so it is not cloned per read.
    published: Arc<RwLock<Arc<Catalog>>>,
}

impl StateMachine {
    pub fn open(data_dir: &Path) -> FoamResult<Self> {
        let dir = raft_dir(data_dir);
        foam_common::fs::create_dir_all(&dir)?;
        let path = dir.join(STATE_FILE_NAME);
        let state: MachineState = read_json(&path)?.unwrap_or_default();
        let published = Arc::new(RwLock::new(Arc::new(state.catalog.clone())));
        Ok(StateMachine { path, state: Arc::new(RwLock::new(state)), published })
    }

    pub fn catalog(&self) -> Arc<Catalog> {
        self.published.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// How many transaction records this node's state holds.
    pub fn txn_records(&self) -> usize {
        self.read().txns.len()
    }

    /// Saves `state` and makes it the current one; the catalog is published
    /// anew only when its version moved (most entries are transaction records).
    /// Only a `durable` state is saved at once: transaction records are
    /// rebuilt from the log after a restart (openraft applies the entries
    /// past the saved state again), and a snapshot saves the state before
    /// the log below it is purged.
    fn replace(&self, state: MachineState, durable: bool) -> Result<(), StorageError<NodeId>> {
        if durable {
            self.save(&state)?;
        }
        if self.read().catalog.version != state.catalog.version {
            *self.published.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(state.catalog.clone());
        }
        *self.state.write().unwrap_or_else(|p| p.into_inner()) = state;
        Ok(())
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, MachineState> {
        self.state.read().unwrap_or_else(|p| p.into_inner())
    }

    fn save(&self, state: &MachineState) -> Result<(), StorageError<NodeId>> {
        write_json(&self.path, state).map_err(|e| StorageIOError::write_state_machine(&e).into())
    }

    fn snapshot_of(state: &MachineState) -> Result<Snapshot<CatalogRaft>, StorageError<NodeId>> {
        let data = serde_json::to_vec(state).map_err(|e| StorageIOError::read_state_machine(&e))?;
        let snapshot_id = match state.last_applied {
            Some(id) => format!("{}-{}", id.leader_id, id.index),
            None => "empty".into(),
        };
        let meta = SnapshotMeta { last_log_id: state.last_applied, last_membership: state.membership.clone(), snapshot_id };
        Ok(Snapshot { meta, snapshot: Box::new(Cursor::new(data)) })
    }
}

impl RaftSnapshotBuilder<CatalogRaft> for StateMachine {
    async fn build_snapshot(&mut self) -> Result<Snapshot<CatalogRaft>, StorageError<NodeId>> {
        let state = self.read().clone();
        // The log up to the snapshot may be purged after this: the saved
        // state must cover it.
        self.save(&state)?;
        Self::snapshot_of(&state)
    }
}

impl RaftStateMachine<CatalogRaft> for StateMachine {
    type SnapshotBuilder = StateMachine;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<NodeId>>, StoredMembership<NodeId, BasicNode>), StorageError<NodeId>> {
        let state = self.read();
        Ok((state.last_applied, state.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<CommandReply>, StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry<CatalogRaft>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut next = self.read().clone();
        let version_before = next.catalog.version;
        let mut membership_changed = false;
        let mut replies = Vec::new();
        for entry in entries {
            next.last_applied = Some(entry.log_id);
            let reply = match entry.payload {
                EntryPayload::Blank => Ok(CommandOutcome::Applied),
                EntryPayload::Normal(CatalogCommand::Txn { change }) => {
                    let nodes = &next.catalog.nodes;
                    let decision = next.txns.apply(&change, |id| nodes.contains_key(&id));
                    Ok(decision.map_or(CommandOutcome::Applied, |decision| CommandOutcome::Decided { decision }))
                }
                EntryPayload::Normal(command) => match next.catalog.apply(&command) {
                    Ok((catalog, outcome)) => {
                        next.catalog = catalog;
                        Ok(outcome)
                    }
                    Err(error) => Err(error.to_wire()),
                },
                EntryPayload::Membership(membership) => {
                    next.membership = StoredMembership::new(Some(entry.log_id), membership);
                    membership_changed = true;
                    Ok(CommandOutcome::Applied)
                }
            };
            replies.push(CommandReply(reply));
        }
        let durable = membership_changed || next.catalog.version != version_before;
        self.replace(next, durable)?;
        Ok(replies)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError<NodeId>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError<NodeId>> {
        let state: MachineState = serde_json::from_slice(snapshot.get_ref())
            .map_err(|e| StorageIOError::read_snapshot(Some(meta.signature()), &e))?;
        self.replace(state, true)
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<CatalogRaft>>, StorageError<NodeId>> {
        let state = self.read();
        if state.last_applied.is_none() {
            return Ok(None);
        }
        Self::snapshot_of(&state).map(Some)
    }
}

// ------------------------------------------------------------ the network --

/// Sends Raft's messages to other meta nodes over the node RPC endpoint.
pub struct Network {
    pub clients: Arc<NodeClients>,
}

pub struct Peer {
    target: NodeId,
    addr: String,
    clients: Arc<NodeClients>,
}

impl RaftNetworkFactory<CatalogRaft> for Network {
    type Network = Peer;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> Peer {
        Peer { target, addr: node.addr.clone(), clients: self.clients.clone() }
    }
}

impl Peer {
    async fn send<Req: Serialize, Resp: serde::de::DeserializeOwned, E: std::error::Error + serde::de::DeserializeOwned>(
        &self,
        rpc: RaftRpc,
        request: &Req,
        option: &RPCOption,
    ) -> Result<Resp, RPCError<NodeId, BasicNode, RaftError<NodeId, E>>> {
        let payload = serde_json::to_vec(request).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        let client = self.clients.get(self.target, &self.addr).map_err(|e| RPCError::Unreachable(Unreachable::new(&e)))?;
        let request = NodeRequest::Raft { rpc };
        let call = client.call(&request, &payload);
        let reply = match tokio::time::timeout(option.hard_ttl(), call).await {
            Ok(Ok((NodeResponse::Ok, bytes))) => bytes,
            Ok(Ok((other, _))) => {
                let error = FoamError::internal(format!("unexpected reply to a raft message: {other:?}"));
                return Err(RPCError::Network(NetworkError::new(&error)));
            }
            Ok(Err(error)) => return Err(RPCError::Unreachable(Unreachable::new(&error))),
            // Slow, not gone: Unreachable would make openraft back off from
            // this follower (no heartbeats for a while) as if it had died.
            Err(elapsed) => return Err(RPCError::Network(NetworkError::new(&elapsed))),
        };
        let answer: Result<Resp, RaftError<NodeId, E>> =
            serde_json::from_slice(&reply).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        answer.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }
}

impl RaftNetwork<CatalogRaft> for Peer {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<CatalogRaft>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        self.send(RaftRpc::AppendEntries, &rpc, &option).await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<CatalogRaft>,
        option: RPCOption,
    ) -> Result<InstallSnapshotResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId, InstallSnapshotError>>> {
        self.send(RaftRpc::InstallSnapshot, &rpc, &option).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        self.send(RaftRpc::Vote, &rpc, &option).await
    }
}

/// Answers a Raft message from another meta node (the reply is the JSON of
/// Raft's own `Result`, carried in the payload).
pub async fn handle(raft: &Raft, rpc: RaftRpc, payload: &[u8]) -> FoamResult<bytes::Bytes> {
    let bad = |e: serde_json::Error| FoamError::InvalidParameter { message: format!("bad raft message: {e}") };
    let reply = match rpc {
        RaftRpc::AppendEntries => serde_json::to_vec(&raft.append_entries(serde_json::from_slice(payload).map_err(bad)?).await),
        RaftRpc::Vote => serde_json::to_vec(&raft.vote(serde_json::from_slice(payload).map_err(bad)?).await),
        RaftRpc::InstallSnapshot => {
            serde_json::to_vec(&raft.install_snapshot(serde_json::from_slice(payload).map_err(bad)?).await)
        }
    };
    reply.map(bytes::Bytes::from).map_err(|e| FoamError::internal(e.to_string()))
}
