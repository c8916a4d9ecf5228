//! The catalog service every node's SQL and replication code calls
//! (`CatalogService`). The catalog is Raft's state machine on the meta nodes
//! (`consensus.rs`); its leader applies commands and runs the failure detector
//! (`membership.rs`). Any other node, meta or not, sends its catalog requests
//! to the leader, following `NotLeader` hints, and keeps the newest catalog it
//! was given (saved, so a restarted node starts with it).
//!
//! A write commits only once its decision is a Raft entry on a majority of
//! the meta nodes (`decide_commit`), so a node cut off with a minority cannot
//! commit. A node also watches for that itself, for free: one that has not heard from
//! the leader (or, leading, from a majority) for [`CUT_OFF_AFTER_MS`] refuses
//! statements at once instead of waiting on peers it cannot reach.

use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use foam_catalog::model::CommandOutcome;
use foam_catalog::{Catalog, CatalogCommand, CatalogStore};
use foam_common::limits::{CATALOG_LEADER_WAIT_MS, CUT_OFF_AFTER_MS, SETTLED_TXNS_PENDING_MAX, TIMESTAMP_WINDOW_MICROS};
use foam_catalog::txns::{Settled, TxnCommand, TxnDecision};
use foam_common::{FoamError, FoamResult, NodeId, TxnId};
use foam_query::CatalogService;
use foam_rpc::{NodeClient, NodeClients, NodeRequest, NodeResponse};
use openraft::error::{ClientWriteError, RaftError};

use crate::consensus::{Raft, StateMachine};

/// How many leader hints one request follows before trying the next node.
const LEADER_HOPS_MAX: usize = 3;

pub struct ClusterCatalog {
    node_id: NodeId,
    pub(crate) raft: Raft,
    machine: StateMachine,
    /// The newest catalog a leader sent this node (nodes outside the meta
    /// group have no other), saved in `store`.
    cache: RwLock<Arc<Catalog>>,
    store: CatalogStore,
    clients: Arc<NodeClients>,
    /// This node's own node address (never asked: it is not the leader).
    own_addr: String,
    /// The node this one joined through: asked when no meta node answers.
    seed: Option<String>,
    /// Where the leader answered last.
    leader_hint: Mutex<Option<String>>,
    /// When the leader last reached this node (a heartbeat, an answer) or,
    /// while this node leads, last found a majority behind it.
    leader_heard: Mutex<Instant>,
    /// The failure detector, used while this node leads.
    pub(crate) membership: std::sync::OnceLock<crate::membership::Membership>,
    /// The timestamp oracle, used while this node leads.
    oracle: tokio::sync::Mutex<Oracle>,
    /// Transaction outcomes that participants here have on disk, sent to the
    /// leader in batches so it can drop their records (`flush_settled`).
    settled: Mutex<Vec<Settled>>,
}

/// The cluster clock on the catalog leader (as TiDB's PD): timestamps are
/// microseconds since the Unix epoch, made strictly increasing, and never
/// reach the reservation in the Raft log, which moves
/// [`TIMESTAMP_WINDOW_MICROS`] ahead at a time. A new leader starts above the
/// reservation, so no timestamp is handed out twice across leaders.
#[derive(Default)]
struct Oracle {
    last: u64,
    /// The reservation this node made (0: none in its current lead).
    reserved: u64,
}

impl ClusterCatalog {
    pub fn new(
        node_id: NodeId,
        raft: Raft,
        machine: StateMachine,
        store: CatalogStore,
        cached: Catalog,
        clients: Arc<NodeClients>,
        own_addr: String,
        seed: Option<String>,
    ) -> Self {
        ClusterCatalog {
            node_id,
            raft,
            machine,
            cache: RwLock::new(Arc::new(cached)),
            store,
            clients,
            own_addr,
            seed,
            leader_hint: Mutex::new(None),
            // Start-up counts as heard: the leader pings a new node within a heartbeat.
            leader_heard: Mutex::new(Instant::now()),
            membership: std::sync::OnceLock::new(),
            oracle: tokio::sync::Mutex::new(Oracle::default()),
            settled: Mutex::new(Vec::new()),
        }
    }

    /// The next timestamp of the oracle this node runs as leader; `None`
    /// when it turned out not to lead.
    async fn next_timestamp(&self) -> FoamResult<Option<u64>> {
        let mut oracle = self.oracle.lock().await;
        let reserved = self.machine.catalog().timestamps_reserved;
        if reserved > oracle.reserved {
            // Another leader reserved since (or this node just took the
            // lead): it may have handed out anything below its reservation.
            oracle.last = oracle.last.max(reserved);
            oracle.reserved = 0;
        }
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64);
        let next = (oracle.last + 1).max(now);
        if next >= oracle.reserved {
            let upper = next + TIMESTAMP_WINDOW_MICROS;
            if self.apply_as_leader(&CatalogCommand::ReserveTimestamps { upper }).await?.is_none() {
                return Ok(None);
            }
            oracle.reserved = upper;
        }
        oracle.last = next;
        Ok(Some(next))
    }

    /// True while this node leads the meta group.
    pub fn is_leader(&self) -> bool {
        let metrics = self.raft.metrics();
        let metrics = metrics.borrow();
        metrics.state == openraft::ServerState::Leader && metrics.current_leader == Some(self.node_id)
    }

    /// The node address of the leader this node follows, if it is a meta node
    /// and knows one.
    fn known_leader(&self) -> Option<String> {
        let metrics = self.raft.metrics().borrow().clone();
        let leader = metrics.current_leader?;
        metrics.membership_config.membership().get_node(&leader).map(|n| n.addr.clone())
    }

    /// The leader reached this node just now.
    pub fn heard_from_leader(&self) {
        *self.leader_heard.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
    }

    /// Why this node seems cut off from the majority of the meta nodes, if it
    /// does: it leads, but no majority has acknowledged it for
    /// [`CUT_OFF_AFTER_MS`], or it follows and has not heard from a leader for
    /// as long. Costs no I/O (checked on every statement); a write's commit
    /// still asks the leader.
    pub(crate) fn cut_off(&self) -> Option<String> {
        let leading_silence = {
            let metrics = self.raft.metrics();
            let metrics = metrics.borrow();
            let leads = metrics.state == openraft::ServerState::Leader && metrics.current_leader == Some(self.node_id);
            let voters = metrics.membership_config.membership().voter_ids().count();
            leads.then(|| metrics.millis_since_quorum_ack.filter(|_| voters > 1))
        };
        if let Some(silence) = leading_silence {
            return match silence {
                Some(silent) if silent > CUT_OFF_AFTER_MS => {
                    Some(format!("node {} leads the meta nodes but no majority of them has answered it for {silent} ms", self.node_id))
                }
                _ => {
                    // A leader backed by a majority counts as heard, so if it
                    // steps down it waits for its successor's heartbeats afresh.
                    self.heard_from_leader();
                    None
                }
            };
        }
        let silent = self.leader_heard.lock().unwrap_or_else(|p| p.into_inner()).elapsed().as_millis();
        (silent > CUT_OFF_AFTER_MS as u128)
            .then(|| format!("node {} has not heard from the leader of the meta nodes for {silent} ms", self.node_id))
    }

    fn cut_off_error(reason: String) -> FoamError {
        FoamError::CatalogUnavailable {
            message: format!(
                "{reason}: it may be cut off from the majority, so it refuses statements; \
                 retry through another node or when the network heals"
            ),
        }
    }

    /// The catalog a leader's `Catalog` reply carries (none: this node's is current).
    fn catalog_reply(&self, reply: NodeResponse) -> FoamResult<Arc<Catalog>> {
        match reply {
            NodeResponse::Catalog { catalog: Some(catalog) } => Ok(self.remember(catalog)),
            NodeResponse::Catalog { catalog: None } => Ok(self.current()),
            other => Err(FoamError::internal(format!("unexpected catalog reply {other:?}"))),
        }
    }

    fn remember(&self, catalog: Catalog) -> Arc<Catalog> {
        let mut cache = self.cache.write().unwrap_or_else(|p| p.into_inner());
        if catalog.version > cache.version {
            if let Err(error) = self.store.save(&catalog) {
                tracing::warn!(%error, "could not save the catalog copy");
            }
            *cache = Arc::new(catalog);
        }
        drop(cache);
        self.current()
    }

    /// Answers a catalog request from another node: only the leader does;
    /// others point at the leader they know.
    pub async fn serve(&self, request: NodeRequest) -> FoamResult<NodeResponse> {
        if !self.is_leader() {
            let leader = self.known_leader().or_else(|| self.leader_hint.lock().unwrap_or_else(|p| p.into_inner()).clone());
            return Ok(NodeResponse::NotLeader { leader });
        }
        Ok(match request {
            NodeRequest::CatalogGet { known_version } => {
                let catalog = self.current();
                let changed = known_version != Some(catalog.version);
                NodeResponse::Catalog { catalog: changed.then(|| catalog.as_ref().clone()) }
            }
            NodeRequest::CatalogApply { command } => {
                let (catalog, outcome) = self.apply(command).await?;
                NodeResponse::Applied { catalog: catalog.as_ref().clone(), outcome }
            }
            NodeRequest::CheckNodes => NodeResponse::Catalog { catalog: Some(self.check_nodes().await?.as_ref().clone()) },
            NodeRequest::Timestamp => match self.next_timestamp().await? {
                Some(ts) => NodeResponse::Timestamp { ts },
                None => self.not_leader(),
            },
            NodeRequest::DecideCommit { txn, prepare_ts, participants } => {
                let decide = |commit_ts| TxnCommand::DecideCommit { txn, prepare_ts, commit_ts, participants };
                match self.record_as_leader(decide).await? {
                    Some(decision) => NodeResponse::Decided { decision },
                    None => self.not_leader(),
                }
            }
            NodeRequest::SettleTxn { txn } => match self.record_as_leader(|ts| TxnCommand::Abandon { txn, ts }).await? {
                Some(decision) => NodeResponse::Decided { decision },
                None => self.not_leader(),
            },
            NodeRequest::ForgetTxns { settled } => {
                self.record_as_leader(|ts| TxnCommand::Forget { settled, ts }).await?;
                NodeResponse::Ok
            }
            other => return Err(FoamError::internal(format!("{other:?} is not a catalog request"))),
        })
    }

    fn not_leader(&self) -> NodeResponse {
        let leader = self.known_leader().or_else(|| self.leader_hint.lock().unwrap_or_else(|p| p.into_inner()).clone());
        NodeResponse::NotLeader { leader }
    }

    /// Applies a change to the transaction records, made with the oracle's
    /// next timestamp, on this node, which leads; returns the outcome it
    /// settled on (`None` when this node turned out not to lead, or for a
    /// change that settles none).
    async fn record_as_leader(&self, change: impl FnOnce(u64) -> TxnCommand) -> FoamResult<Option<TxnDecision>> {
        let Some(ts) = self.next_timestamp().await? else { return Ok(None) };
        match self.apply_as_leader(&CatalogCommand::Txn { change: change(ts) }).await? {
            Some(CommandOutcome::Decided { decision }) => Ok(Some(decision)),
            Some(_) | None => Ok(None),
        }
    }

    /// A change to the transaction records that settles an outcome, through
    /// the leader wherever it is.
    async fn record(&self, request: NodeRequest, change: impl FnOnce(u64) -> TxnCommand) -> FoamResult<TxnDecision> {
        self.refuse_if_cut_off()?;
        if self.is_leader()
            && let Some(decision) = self.record_as_leader(change).await?
        {
            return Ok(decision);
        }
        match self.call_leader(&request).await? {
            NodeResponse::Decided { decision } => Ok(decision),
            other => Err(FoamError::internal(format!("unexpected transaction record reply {other:?}"))),
        }
    }

    /// Sends the outcomes noted by `forget_txn` to the leader. `prune` sends
    /// a (possibly empty) batch anyway when records exist, so the leader
    /// drops expired abort records. A batch that fails goes back in the queue.
    pub async fn flush_settled(&self, prune: bool) {
        let settled = std::mem::take(&mut *self.settled.lock().unwrap_or_else(|p| p.into_inner()));
        if settled.is_empty() && !(prune && self.is_leader() && self.machine.txn_records() > 0) {
            return;
        }
        let sent = if self.is_leader() {
            self.record_as_leader(|ts| TxnCommand::Forget { settled: settled.clone(), ts }).await.map(|_| ())
        } else {
            self.call_leader(&NodeRequest::ForgetTxns { settled: settled.clone() }).await.map(|_| ())
        };
        if let Err(error) = sent {
            tracing::debug!(%error, "transaction outcomes not forgotten yet");
            let mut queue = self.settled.lock().unwrap_or_else(|p| p.into_inner());
            if queue.len() + settled.len() <= SETTLED_TXNS_PENDING_MAX {
                queue.extend(settled);
            }
        }
    }

    /// Sends a catalog request to the leader: the one this node follows, then
    /// the meta nodes and the seed, following `NotLeader` hints, until
    /// [`CATALOG_LEADER_WAIT_MS`] (an election takes about a second).
    async fn call_leader(&self, request: &NodeRequest) -> FoamResult<NodeResponse> {
        let deadline = Instant::now() + Duration::from_millis(CATALOG_LEADER_WAIT_MS);
        let mut last_error = String::from("no meta node known");
        loop {
            if self.is_leader() {
                // Elected meanwhile.
                return Box::pin(self.serve(request.clone())).await;
            }
            let mut candidates: Vec<String> = Vec::new();
            candidates.extend(self.known_leader());
            candidates.extend(self.leader_hint.lock().unwrap_or_else(|p| p.into_inner()).clone());
            let catalog = self.current();
            candidates.extend(catalog.meta_nodes().iter().filter_map(|id| catalog.nodes.get(id)).map(|n| n.node_addr.clone()));
            candidates.extend(self.seed.clone());
            let mut seen = std::collections::HashSet::new();
            candidates.retain(|addr| *addr != self.own_addr && seen.insert(addr.clone()));
            for first in candidates {
                let mut addr = first;
                for _ in 0..LEADER_HOPS_MAX {
                    let peer = catalog.nodes.values().find(|n| n.node_addr == addr).map_or(0, |n| n.id);
                    let client = match self.clients.get(peer, &addr) {
                        Ok(client) => client,
                        Err(error) => {
                            last_error = error.to_string();
                            break;
                        }
                    };
                    match client.call(request, &[]).await {
                        Ok((NodeResponse::NotLeader { leader: Some(next) }, _)) if next != addr && next != self.own_addr => addr = next,
                        Ok((NodeResponse::NotLeader { .. }, _)) => {
                            last_error = format!("{addr} knows no leader");
                            break;
                        }
                        Ok((response, _)) => {
                            *self.leader_hint.lock().unwrap_or_else(|p| p.into_inner()) = Some(addr);
                            self.heard_from_leader();
                            return Ok(response);
                        }
                        Err(error @ FoamError::NodeUnavailable { .. }) => {
                            last_error = error.to_string();
                            break;
                        }
                        Err(error) => return Err(error),
                    }
                }
            }
            if Instant::now() >= deadline {
                return Err(FoamError::CatalogUnavailable {
                    message: format!(
                        "no leader of the cluster's meta nodes is reachable from node {} ({last_error}); \
                         a majority of them must be up and reachable; retry when it is",
                        self.node_id
                    ),
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Applies a command through Raft on this node, which leads; `None` when
    /// it turned out not to.
    async fn apply_as_leader(&self, command: &CatalogCommand) -> FoamResult<Option<CommandOutcome>> {
        let write = self.raft.client_write(command.clone());
        let timeout = Duration::from_millis(CATALOG_LEADER_WAIT_MS);
        match tokio::time::timeout(timeout, write).await {
            Ok(Ok(response)) => match response.data.0 {
                Ok(outcome) => Ok(Some(outcome)),
                Err(wire) => Err(FoamError::from_wire(&wire)),
            },
            Ok(Err(RaftError::APIError(ClientWriteError::ForwardToLeader(_)))) => Ok(None),
            Ok(Err(error)) => Err(FoamError::CatalogUnavailable { message: format!("the catalog change failed: {error}") }),
            Err(_) => Err(FoamError::CatalogUnavailable {
                message: format!(
                    "a majority of the meta nodes did not accept the catalog change within {} ms; retry when they are reachable",
                    timeout.as_millis()
                ),
            }),
        }
    }
}

#[async_trait]
impl CatalogService for ClusterCatalog {
    fn current(&self) -> Arc<Catalog> {
        let cached = self.cache.read().unwrap_or_else(|p| p.into_inner()).clone();
        let replicated = self.machine.catalog();
        if replicated.version >= cached.version { replicated } else { cached }
    }

    async fn refresh(&self) -> FoamResult<Arc<Catalog>> {
        // Cut off, a node must not serve its catalog as the newest (the
        // majority may have changed it), nor wait on peers it cannot reach:
        // the leader's next heartbeat after the cut heals ends the refusal.
        self.refuse_if_cut_off()?;
        if self.is_leader() {
            return Ok(self.current());
        }
        let known_version = Some(self.current().version);
        match self.call_leader(&NodeRequest::CatalogGet { known_version }).await {
            Ok(reply) => self.catalog_reply(reply),
            Err(error) => {
                self.refuse_if_cut_off()?;
                // Between leaders (an election): reads go on with the catalog
                // this node has; DDL and writes fail clearly.
                tracing::warn!(%error, "catalog leader unreachable; using this node's catalog");
                Ok(self.current())
            }
        }
    }

    fn meta_role(&self) -> Option<String> {
        let metrics = self.raft.metrics();
        let metrics = metrics.borrow();
        let membership = metrics.membership_config.membership();
        if membership.get_node(&self.node_id).is_none() {
            return None;
        }
        Some(
            match metrics.state {
                openraft::ServerState::Leader => "leader",
                openraft::ServerState::Candidate => "candidate",
                openraft::ServerState::Learner => "learner",
                openraft::ServerState::Follower if membership.voter_ids().any(|id| id == self.node_id) => "follower",
                _ => "learner",
            }
            .to_string(),
        )
    }

    fn refuse_if_cut_off(&self) -> FoamResult<()> {
        match self.cut_off() {
            Some(reason) => Err(Self::cut_off_error(reason)),
            None => Ok(()),
        }
    }

    async fn apply(&self, command: CatalogCommand) -> FoamResult<(Arc<Catalog>, CommandOutcome)> {
        if self.is_leader()
            && let Some(outcome) = self.apply_as_leader(&command).await?
        {
            return Ok((self.current(), outcome));
        }
        match self.call_leader(&NodeRequest::CatalogApply { command }).await? {
            NodeResponse::Applied { catalog, outcome } => Ok((self.remember(catalog), outcome)),
            other => Err(FoamError::internal(format!("unexpected catalog reply {other:?}"))),
        }
    }

    async fn timestamp(&self) -> FoamResult<u64> {
        self.refuse_if_cut_off()?;
        if self.is_leader()
            && let Some(ts) = self.next_timestamp().await?
        {
            return Ok(ts);
        }
        match self.call_leader(&NodeRequest::Timestamp).await? {
            NodeResponse::Timestamp { ts } => Ok(ts),
            other => Err(FoamError::internal(format!("unexpected timestamp reply {other:?}"))),
        }
    }

    async fn decide_commit(&self, txn: TxnId, prepare_ts: u64, participants: &[NodeId]) -> FoamResult<TxnDecision> {
        let participants = participants.to_vec();
        let request = NodeRequest::DecideCommit { txn, prepare_ts, participants: participants.clone() };
        self.record(request, |commit_ts| TxnCommand::DecideCommit { txn, prepare_ts, commit_ts, participants }).await
    }

    async fn settle_txn(&self, txn: TxnId) -> FoamResult<TxnDecision> {
        self.record(NodeRequest::SettleTxn { txn }, |ts| TxnCommand::Abandon { txn, ts }).await
    }

    fn forget_txn(&self, txn: TxnId, node: Option<NodeId>) {
        let mut queue = self.settled.lock().unwrap_or_else(|p| p.into_inner());
        if queue.len() < SETTLED_TXNS_PENDING_MAX {
            queue.push(Settled { txn, node });
        }
    }

    async fn check_nodes(&self) -> FoamResult<Arc<Catalog>> {
        if self.is_leader() {
            // Cut off, it could not mark anyone down (a majority must accept it).
            self.refuse_if_cut_off()?;
            if let Some(membership) = self.membership.get() {
                membership.check_now(self).await;
            }
            return Ok(self.current());
        }
        let reply = self.call_leader(&NodeRequest::CheckNodes).await?;
        self.catalog_reply(reply)
    }
}

/// Registers a new node through `seed` (any member), following leader hints,
/// retrying while the cluster is not up yet.
pub async fn register_through(
    seed: &str,
    register: CatalogCommand,
    secret: Option<&foam_rpc::ClusterSecret>,
    wait: Duration,
) -> FoamResult<(Catalog, CommandOutcome)> {
    let deadline = Instant::now() + wait;
    let mut addr = seed.to_string();
    loop {
        let client = NodeClient::new(0, &addr, secret)?;
        let last_error = match client.call(&NodeRequest::CatalogApply { command: register.clone() }, &[]).await {
            Ok((NodeResponse::Applied { catalog, outcome }, _)) => return Ok((catalog, outcome)),
            Ok((NodeResponse::NotLeader { leader: Some(next) }, _)) => {
                addr = next;
                continue;
            }
            Ok((NodeResponse::NotLeader { leader: None }, _)) => format!("{addr} knows no leader yet"),
            Ok((other, _)) => return Err(FoamError::internal(format!("unexpected join reply {other:?}"))),
            Err(error @ (FoamError::NodeUnavailable { .. } | FoamError::CatalogUnavailable { .. })) => error.to_string(),
            Err(error) => return Err(error),
        };
        addr = seed.to_string();
        if Instant::now() >= deadline {
            return Err(FoamError::CatalogUnavailable { message: format!("could not join the cluster through {seed}: {last_error}") });
        }
        tracing::info!(addr = %seed, %last_error, "waiting for the cluster to answer");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
