//! The failure detector, re-protection planner and rebalancer, run by the
//! leader of the meta nodes (any meta node runs this loop; it acts only while
//! it leads, and forgets what it heard when it stops leading). Every
//! [`HEARTBEAT_INTERVAL_MS`] it pings every node (the pings tell each node it
//! is not cut off); a node not heard from for `node_dead_after_ms` is marked
//! down in the catalog (its replicas become lost, so queries read and writes
//! go to the surviving ones), and one down for `reprotect_after_ms` has each
//! of its partitions given a new copy on another node, which that node's
//! replica keeper then fills (`replicas.rs`). A node heard again is marked up;
//! its keeper catches its lost copies up.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use foam_catalog::model::{NodeState, ReplicaState};
use foam_catalog::{Catalog, CatalogCommand};
use foam_common::limits::HEARTBEAT_INTERVAL_MS;
use foam_common::{FoamError, NodeId};
use foam_query::CatalogService;
use foam_rpc::{NodeClients, NodeRequest};
use tokio::task::JoinSet;

use crate::catalog::ClusterCatalog;

/// Failure detection settings (`foam start --node-dead-after-ms --reprotect-after-ms`).
#[derive(Debug, Clone, Copy)]
pub struct FailurePolicy {
    pub node_dead_after: Duration,
    pub reprotect_after: Duration,
}

pub struct Membership {
    node_id: NodeId,
    clients: Arc<NodeClients>,
    policy: FailurePolicy,
    /// When each node last answered a ping (start-up counts as heard).
    heard: Mutex<HashMap<NodeId, Instant>>,
}

impl Membership {
    pub fn new(node_id: NodeId, clients: Arc<NodeClients>, policy: FailurePolicy) -> Self {
        Membership { node_id, clients, policy, heard: Mutex::default() }
    }

    /// Pings every other node at once; returns who answered (this node
    /// always does) and who refused.
    async fn ping_all(&self, catalog: &Catalog) -> Vec<(NodeId, Result<(), FoamError>)> {
        let mut pings = JoinSet::new();
        for node in catalog.nodes.values().filter(|n| n.id != self.node_id) {
            let client = self.clients.get(node.id, &node.node_addr);
            let id = node.id;
            pings.spawn(async move {
                let result = match client {
                    Ok(client) => client.call(&NodeRequest::Ping { from_leader: true }, &[]).await.map(|_| ()),
                    Err(error) => Err(error),
                };
                (id, result)
            });
        }
        // The pinging node (the leader) answers for itself: a stale mark-down
        // proposed by an earlier leader can commit after this node came back
        // and was registered, and no one else would ever mark the leader up.
        let mut results = vec![(self.node_id, Ok(()))];
        while let Some(Ok(result)) = pings.join_next().await {
            results.push(result);
        }
        results
    }

    /// One heartbeat round: records answers, marks silent nodes down and
    /// answering ones up.
    async fn round(&self, leader: &ClusterCatalog, refused_is_dead: bool) {
        let catalog = leader.current();
        let results = self.ping_all(&catalog).await;
        let now = Instant::now();
        let mut changes = Vec::new();
        {
            let mut heard = self.heard.lock().unwrap_or_else(|p| p.into_inner());
            for (id, result) in &results {
                let state = catalog.nodes.get(id).map(|n| n.state);
                match result {
                    Ok(()) => {
                        heard.insert(*id, now);
                        if state == Some(NodeState::Down) {
                            changes.push(CatalogCommand::MarkNodeUp { id: *id });
                        }
                    }
                    Err(error) => {
                        let last = *heard.entry(*id).or_insert(now);
                        // A refused connection is a dead process; a slow answer
                        // may be a stall, which only the timeout may judge.
                        let refused = refused_is_dead && !error.to_string().contains("no answer within");
                        if state == Some(NodeState::Up) && (refused || now.duration_since(last) >= self.policy.node_dead_after) {
                            tracing::warn!(node_id = id, %error, "node stopped answering; marking it down");
                            changes.push(CatalogCommand::MarkNodeDown { id: *id });
                        }
                    }
                }
            }
        }
        if !changes.is_empty()
            && let Some(reason) = leader.cut_off()
        {
            // No majority would accept the change; waiting for it would only
            // hold up the caller.
            tracing::warn!(%reason, "not marking nodes up or down while cut off from the majority");
            return;
        }
        for command in changes {
            if let Err(error) = leader.apply(command).await {
                tracing::warn!(%error, "failure detector could not update the catalog");
            }
        }
    }

    /// Checks every node now (a query failed talking to one).
    pub async fn check_now(&self, leader: &ClusterCatalog) {
        self.round(leader, true).await;
    }

    /// Gives each partition that has a replica on a node down for longer
    /// than `reprotect_after` a new copy on the up node holding fewest copies.
    async fn reprotect(&self, leader: &ClusterCatalog, down_since: &HashMap<NodeId, Instant>) {
        let catalog = leader.current();
        let long_down: Vec<NodeId> = down_since
            .iter()
            .filter(|(_, since)| since.elapsed() >= self.policy.reprotect_after)
            .map(|(id, _)| *id)
            .collect();
        if long_down.is_empty() {
            return;
        }
        let mut load: BTreeMap<NodeId, usize> =
            catalog.nodes.values().filter(|n| n.state == NodeState::Up).map(|n| (n.id, 0)).collect();
        for replica in catalog.tables.values().flat_map(|t| t.placement.iter()).flat_map(|p| p.replicas.iter()) {
            if let Some(count) = load.get_mut(&replica.node) {
                *count += 1;
            }
        }
        for table in catalog.tables.values() {
            if table.is_replicated() {
                continue; // a replicated table is on every node already
            }
            for (partition, placement) in table.placement.iter().enumerate() {
                let Some(lost) = placement.replicas.iter().find(|r| long_down.contains(&r.node) && r.state != ReplicaState::Live) else {
                    continue;
                };
                let Some((&target, _)) = load
                    .iter()
                    .filter(|(id, _)| !placement.replicas.iter().any(|r| r.node == **id))
                    .min_by_key(|(id, count)| (**count, **id))
                else {
                    continue;
                };
                let command =
                    CatalogCommand::MoveReplica { table_id: table.id, partition: partition as u32, from: Some(lost.node), to: target };
                match leader.apply(command).await {
                    Ok(_) => {
                        tracing::info!(table = %table.name, partition, from = lost.node, to = target, "re-protecting a partition");
                        *load.entry(target).or_default() += 1;
                    }
                    Err(error) => tracing::warn!(%error, "re-protection could not update the catalog"),
                }
            }
        }
    }
}

impl Membership {
    /// One step towards an even spread, at most [`COPIES_IN_FLIGHT_MAX`]
    /// copies at a time: drop surplus copies of partitions whose new copy is
    /// live (from a draining or the fullest node), then start new copies on
    /// the emptiest nodes for partitions on draining or overfull nodes, and of
    /// replicated tables on nodes that lack them. A copy is only dropped once
    /// its replacement is live, so a move never lowers protection.
    async fn rebalance(&self, leader: &ClusterCatalog) {
        let catalog = leader.current();
        let eligible = catalog.placeable_nodes();
        if eligible.is_empty() || catalog.nodes.values().any(|n| n.state == NodeState::Down) {
            return; // re-protection first; never move data while a node is out
        }
        let in_flight = catalog
            .tables
            .values()
            .flat_map(|t| t.placement.iter())
            .flat_map(|p| p.replicas.iter())
            .filter(|r| r.state != ReplicaState::Live)
            .count();
        let mut commands = Vec::new();
        let mut budget = COPIES_IN_FLIGHT_MAX.saturating_sub(in_flight);
        for table in catalog.tables.values() {
            let draining = |node: NodeId| catalog.nodes.get(&node).is_none_or(|n| n.draining);
            if table.is_replicated() {
                let placement = &table.placement[0];
                for node in eligible.iter().filter(|n| !placement.replicas.iter().any(|r| r.node == **n)) {
                    if budget > 0 {
                        budget -= 1;
                        commands.push(CatalogCommand::MoveReplica { table_id: table.id, partition: 0, from: None, to: *node });
                    }
                }
                continue;
            }
            let wanted = table.replicas.max(1) as usize;
            let mut load: BTreeMap<NodeId, usize> = eligible.iter().map(|n| (*n, 0)).collect();
            for replica in table.placement.iter().flat_map(|p| p.replicas.iter()) {
                *load.entry(replica.node).or_default() += 1;
            }
            for (partition, placement) in table.placement.iter().enumerate() {
                let partition = partition as u32;
                let all_live = placement.replicas.iter().all(|r| r.state == ReplicaState::Live);
                if all_live && placement.replicas.len() > wanted {
                    let surplus = placement
                        .replicas
                        .iter()
                        .max_by_key(|r| (draining(r.node), load.get(&r.node).copied().unwrap_or(0), r.node))
                        .map(|r| r.node)
                        .expect("more copies than wanted");
                    *load.entry(surplus).or_default() -= 1;
                    commands.push(CatalogCommand::RemoveReplica { table_id: table.id, partition, node: surplus });
                    continue;
                }
                if budget == 0 || !all_live || placement.replicas.len() != wanted {
                    continue;
                }
                let Some((&target, &target_load)) = load
                    .iter()
                    .filter(|(n, _)| eligible.contains(n) && !placement.replicas.iter().any(|r| r.node == **n))
                    .min_by_key(|(n, l)| (**l, **n))
                else {
                    continue;
                };
                let leaves_draining = placement.replicas.iter().any(|r| draining(r.node));
                let fullest = placement.replicas.iter().map(|r| load.get(&r.node).copied().unwrap_or(0)).max().unwrap_or(0);
                if leaves_draining || fullest >= target_load + 2 {
                    budget -= 1;
                    *load.entry(target).or_default() += 1;
                    commands.push(CatalogCommand::MoveReplica { table_id: table.id, partition, from: None, to: target });
                }
            }
        }
        for command in commands {
            tracing::info!(?command, "rebalancing");
            if let Err(error) = leader.apply(command).await {
                tracing::warn!(%error, "rebalancing could not update the catalog");
            }
        }
    }
}

/// Copies being made at once by rebalancing, so moving data never crowds out
/// the queries and writes running meanwhile.
const COPIES_IN_FLIGHT_MAX: usize = 2;

/// Runs the failure detector while this node leads the meta nodes, until the
/// node stops.
pub async fn run(leader: Arc<ClusterCatalog>) {
    let mut interval = tokio::time::interval(Duration::from_millis(HEARTBEAT_INTERVAL_MS));
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut down_since: HashMap<NodeId, Instant> = HashMap::new();
    loop {
        interval.tick().await;
        let Some(membership) = leader.membership.get() else { continue };
        if !leader.is_leader() {
            // A new leader judges nodes by what it hears itself.
            membership.heard.lock().unwrap_or_else(|p| p.into_inner()).clear();
            down_since.clear();
            continue;
        }
        membership.round(&leader, false).await;
        if leader.cut_off().is_some() {
            continue; // copies cannot be planned without a majority
        }
        let catalog = leader.current();
        for node in catalog.nodes.values() {
            match node.state {
                NodeState::Down => {
                    down_since.entry(node.id).or_insert_with(Instant::now);
                }
                NodeState::Up => {
                    down_since.remove(&node.id);
                }
            }
        }
        membership.reprotect(&leader, &down_since).await;
        membership.rebalance(&leader).await;
    }
}

/// While this node leads, makes the Raft group the catalog's meta nodes: a
/// joining meta node is added as a learner and, once it has the log and the
/// voters should include it, made a voter; the voters stay odd in number
/// (`Catalog::meta_voters`), so a forming cluster of two is one voter and a
/// learner. A node that is no longer a meta node leaves the group.
pub async fn keep_meta_group(leader: Arc<ClusterCatalog>) {
    use std::collections::BTreeSet;
    let mut interval = tokio::time::interval(Duration::from_millis(HEARTBEAT_INTERVAL_MS * 2));
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let wait = Duration::from_millis(foam_common::limits::CATALOG_LEADER_WAIT_MS);
    loop {
        interval.tick().await;
        if !leader.is_leader() {
            continue;
        }
        let catalog = leader.current();
        let meta: BTreeSet<NodeId> = catalog.meta_nodes().into_iter().collect();
        let wanted: BTreeSet<NodeId> = catalog.meta_voters().into_iter().collect();
        let metrics = leader.raft.metrics().borrow().clone();
        let membership = metrics.membership_config.membership();
        let voters: BTreeSet<NodeId> = membership.voter_ids().collect();
        let known: BTreeSet<NodeId> = membership.nodes().map(|(id, _)| *id).collect();
        let departed: BTreeSet<NodeId> = known.iter().filter(|id| !meta.contains(id) && !voters.contains(id)).copied().collect();
        if wanted.is_empty() || (wanted == voters && departed.is_empty() && meta.is_subset(&known)) {
            continue;
        }
        let mut ready = true;
        for id in meta.iter().filter(|id| !known.contains(id)) {
            let Some(node) = catalog.nodes.get(id) else { continue };
            let learner = leader.raft.add_learner(*id, openraft::BasicNode::new(&node.node_addr), true);
            match tokio::time::timeout(wait, learner).await {
                Ok(Ok(_)) => tracing::info!(node_id = id, "meta node added as a learner"),
                outcome => {
                    tracing::info!(node_id = id, ?outcome, "meta node not reachable yet");
                    ready = ready && !wanted.contains(id);
                }
            }
        }
        if ready && wanted != voters {
            match tokio::time::timeout(wait, leader.raft.change_membership(wanted.clone(), false)).await {
                Ok(Ok(_)) => tracing::info!(?wanted, "meta voters changed"),
                outcome => tracing::warn!(?wanted, ?outcome, "could not change the meta voters yet"),
            }
        }
        if !departed.is_empty() {
            let removal = leader.raft.change_membership(openraft::ChangeMembers::RemoveNodes(departed.clone()), false);
            match tokio::time::timeout(wait, removal).await {
                Ok(Ok(_)) => tracing::info!(?departed, "former meta nodes left the Raft group"),
                outcome => tracing::warn!(?departed, ?outcome, "could not remove former meta nodes yet"),
            }
        }
    }
}
