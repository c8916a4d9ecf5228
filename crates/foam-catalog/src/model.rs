//! The catalog's data and the only way to change it: [`Catalog::apply`] takes a
//! [`CatalogCommand`] and returns the next version, or an error that leaves the
//! catalog as it was. Placement of partitions on nodes is decided here, once, at
//! CREATE TABLE, so every node reads the same partition map.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::datatypes::{Field, Schema, SchemaRef};
use foam_common::limits::{IDENTIFIER_BYTES_MAX, PARTITIONS_PER_TABLE_MAX, REPLICAS_DEFAULT, WORKER_THREADS_UNKNOWN, default_partition_count};
use foam_common::{FoamError, FoamResult, NodeId, PartitionId, SqlState, TableId};
use serde::{Deserialize, Serialize};

use crate::privileges::{Acl, GrantObject};
use crate::roles::{RoleDef, ScramVerifier};
use crate::types::SqlType;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeInfo {
    pub id: NodeId,
    /// Address of the node's internal gRPC endpoint (RPC and query workers).
    pub node_addr: String,
    /// Address of the node's PostgreSQL endpoint.
    pub sql_addr: String,
    /// Whether the failure detector hears the node's heartbeats.
    #[serde(default)]
    pub state: NodeState,
    /// `ALTER CLUSTER DRAIN NODE`: its copies are moved off, none are added.
    #[serde(default)]
    pub draining: bool,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeState {
    #[default]
    Up,
    /// Missed its heartbeats for `node_dead_after_ms`: not read from, not written to.
    Down,
}

/// What one copy of a partition holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReplicaState {
    /// Has every committed write; read from and written to.
    Live,
    /// Being copied from a live replica; neither read from nor written to
    /// until it is switched to live under a write fence.
    CatchingUp,
    /// Missed writes (its node went down); copied anew before it is used again.
    Lost,
}

impl ReplicaState {
    pub fn name(self) -> &'static str {
        match self {
            ReplicaState::Live => "live",
            ReplicaState::CatchingUp => "catching-up",
            ReplicaState::Lost => "lost",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Replica {
    pub node: NodeId,
    pub state: ReplicaState,
}

/// The copies of one partition. `changed_at` is the catalog version at which a
/// replica last became live: a writer that planned with an older placement may
/// have missed that replica, so replicas refuse its writes (see the storage
/// engine's write fences).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Placement {
    pub replicas: Vec<Replica>,
    #[serde(default)]
    pub changed_at: u64,
}

impl Placement {
    /// The nodes whose copy is live and which are up: read from and written to.
    pub fn live_nodes<'a>(&'a self, nodes: &'a BTreeMap<NodeId, NodeInfo>) -> impl Iterator<Item = NodeId> + 'a {
        self.replicas.iter().filter(|r| r.state == ReplicaState::Live && is_up(nodes, r.node)).map(|r| r.node)
    }

    /// Whether a node other than `node` holds a live copy and is up.
    fn live_besides(&self, node: NodeId, nodes: &BTreeMap<NodeId, NodeInfo>) -> bool {
        self.live_nodes(nodes).any(|n| n != node)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ColumnDef {
    pub name: String,
    pub sql_type: SqlType,
    pub nullable: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Distribution {
    /// Rows are split by the partition hash of these columns (indices into the
    /// table's columns) into `owners.len()` partitions; `owners[p]` is the node
    /// queries read partition `p` from: its first live replica on a node that is
    /// up (derived from [`TableDef::placement`] after every catalog change).
    Hash { key_columns: Vec<usize>, owners: Vec<NodeId> },
    /// Every row on every node of the table's single placement, as partition 0;
    /// `nodes` are those whose copy is live and up (derived, like `owners`).
    /// A node that joins later is never asked for a copy it does not have.
    Replicated { nodes: Vec<NodeId> },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TableDef {
    pub id: TableId,
    pub name: String,
    pub columns: Vec<ColumnDef>,
    pub distribution: Distribution,
    /// Where each partition's copies are, `placement[p]` for partition `p`.
    #[serde(default)]
    pub placement: Vec<Placement>,
    /// Copies each partition should have (`REPLICAS n`); 0 in catalogs
    /// written before replicas existed, meaning one.
    #[serde(default)]
    pub replicas: u32,
    /// PRIMARY KEY and UNIQUE constraints, each including the distribution
    /// key, checked where a partition's rows are (foam-storage `unique.rs`).
    #[serde(default)]
    pub unique_keys: Vec<UniqueKeyDef>,
    /// Its owner and grants (`privileges.rs`).
    #[serde(default)]
    pub acl: Acl,
}

/// A PRIMARY KEY or UNIQUE constraint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UniqueKeyDef {
    /// The constraint's name, as PostgreSQL would make it (`t_pkey`, `t_a_key`).
    pub name: String,
    pub columns: Vec<String>,
    pub primary: bool,
    /// Added by `ALTER TABLE ... ADD` and not yet found to hold for the rows
    /// already stored: writes are checked against it, but it is not reported
    /// as valid (it stays so if the statement adding it died half-way).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub validating: bool,
}

impl TableDef {
    pub fn arrow_schema(&self) -> SchemaRef {
        arrow_schema(&self.columns)
    }

    /// Each unique key's name and its columns' positions.
    pub fn unique_key_columns(&self) -> Vec<(String, Vec<usize>, Vec<String>)> {
        self.unique_keys
            .iter()
            .map(|key| {
                let positions = key.columns.iter().filter_map(|c| self.columns.iter().position(|d| &d.name == c)).collect();
                (key.name.clone(), positions, key.columns.clone())
            })
            .collect()
    }

    pub fn partition_count(&self) -> u32 {
        match &self.distribution {
            Distribution::Hash { owners, .. } => owners.len() as u32,
            Distribution::Replicated { .. } => 1,
        }
    }

    /// The partitions stored on `node` (every node stores a replicated table).
    pub fn partitions_on(&self, node: NodeId) -> Vec<PartitionId> {
        match &self.distribution {
            Distribution::Hash { owners, .. } => owners
                .iter()
                .enumerate()
                .filter(|(_, owner)| **owner == node)
                .map(|(p, _)| p as PartitionId)
                .collect(),
            Distribution::Replicated { nodes } => {
                if nodes.contains(&node) { vec![0] } else { vec![] }
            }
        }
    }

    pub fn is_replicated(&self) -> bool {
        matches!(self.distribution, Distribution::Replicated { .. })
    }

    /// The nodes a write to `partition` must reach: every live replica on a
    /// node that is up, or an error naming the partition when there is none.
    pub fn write_targets(&self, partition: PartitionId, nodes: &BTreeMap<NodeId, NodeInfo>) -> FoamResult<Vec<NodeId>> {
        let placement = self.placement.get(partition as usize).ok_or_else(|| {
            FoamError::internal(format!("partition {partition} of \"{}\" has no placement", self.name))
        })?;
        let targets: Vec<NodeId> = placement.live_nodes(nodes).collect();
        if targets.is_empty() {
            return Err(FoamError::PartitionUnavailable {
                message: format!("partition {partition} of \"{}\" has no live replica on a running node", self.name),
            });
        }
        Ok(targets)
    }

    /// The placement version a writer saw for `partition` (0 without placement).
    pub fn placement_version(&self, partition: PartitionId) -> u64 {
        self.placement.get(partition as usize).map(|p| p.changed_at).unwrap_or(0)
    }

    /// Re-derives the nodes queries read from after placement or node states changed.
    fn derive_read_nodes(&mut self, nodes: &BTreeMap<NodeId, NodeInfo>) {
        match &mut self.distribution {
            Distribution::Hash { owners, .. } => {
                // Partition `p`'s home is the `p mod n`-th up node, where a
                // new table puts its first copy: reading from the home when it
                // holds a live copy spreads reads evenly again after copies
                // were moved away and back (re-protection, rebalancing), and
                // tables with the same layout keep reading each partition on
                // the same node (co-located joins).
                let up: Vec<NodeId> = nodes.values().filter(|n| n.state == NodeState::Up).map(|n| n.id).collect();
                for (p, (owner, placement)) in owners.iter_mut().zip(&self.placement).enumerate() {
                    let home = (!up.is_empty()).then(|| up[p % up.len()]);
                    let at_home = home.filter(|h| placement.live_nodes(nodes).any(|n| n == *h));
                    let first_live = placement.live_nodes(nodes).next();
                    // With no readable replica the first one stays the owner, so
                    // a read fails naming a node instead of reading nothing.
                    *owner = at_home.or(first_live).or(placement.replicas.first().map(|r| r.node)).unwrap_or(*owner);
                }
            }
            Distribution::Replicated { nodes: readers } => {
                if let Some(placement) = self.placement.first() {
                    *readers = placement.live_nodes(nodes).collect();
                }
            }
        }
    }
}

/// The Arrow schema of rows with these columns.
pub fn arrow_schema(columns: &[ColumnDef]) -> SchemaRef {
    Arc::new(Schema::new(
        columns.iter().map(|c| Field::new(&c.name, c.sql_type.arrow_type(), c.nullable)).collect::<Vec<_>>(),
    ))
}

/// A unique key must name columns of the table, and on a hash-distributed
/// table include every distribution column: equal keys then hash to one
/// partition, where the check sees them both (Citus asks the same).
fn check_unique_keys(table: &str, columns: &[ColumnDef], distribution: &Distribution, keys: &[UniqueKeyDef]) -> FoamResult<()> {
    if keys.iter().filter(|k| k.primary).count() > 1 {
        return Err(FoamError::InvalidTableDefinition { message: format!("multiple primary keys for table \"{table}\" are not allowed") });
    }
    for key in keys {
        if let Some(missing) = key.columns.iter().find(|c| !columns.iter().any(|d| &&d.name == c)) {
            return Err(FoamError::UndefinedColumn { table: table.to_string(), column: missing.clone() });
        }
        if let Distribution::Hash { key_columns, .. } = distribution {
            let distributed_by: Vec<&str> = key_columns.iter().map(|i| columns[*i].name.as_str()).collect();
            if !distributed_by.iter().all(|d| key.columns.iter().any(|c| c == d)) {
                return Err(FoamError::InvalidTableDefinition {
                    message: format!(
                        "constraint \"{}\" on ({}) must include the distribution key ({}) of \"{table}\": only then do equal keys meet in one partition",
                        key.name,
                        key.columns.join(", "),
                        distributed_by.join(", ")
                    ),
                });
            }
        }
    }
    Ok(())
}

fn undefined_role(name: &str) -> FoamError {
    FoamError::Query { message: format!("role \"{name}\" does not exist"), sqlstate: SqlState::UndefinedObject }
}

fn is_up(nodes: &BTreeMap<NodeId, NodeInfo>, node: NodeId) -> bool {
    nodes.get(&node).is_some_and(|n| n.state == NodeState::Up)
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ViewDef {
    pub name: String,
    /// The view's query as the user wrote it; planned anew on every use.
    pub query_sql: String,
    /// Its owner and grants; the owner's privileges are those its query
    /// reads with (`privileges.rs`).
    #[serde(default)]
    pub acl: Acl,
}

/// The whole catalog. `version` increases with every applied command, so a
/// node can tell with one number whether its copy is current.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Catalog {
    pub version: u64,
    pub next_table_id: TableId,
    pub next_node_id: NodeId,
    pub nodes: BTreeMap<NodeId, NodeInfo>,
    pub tables: BTreeMap<String, TableDef>,
    pub views: BTreeMap<String, ViewDef>,
    /// Who may connect (`roles.rs`); empty in catalogs from before roles.
    #[serde(default)]
    pub roles: BTreeMap<String, RoleDef>,
    /// Roles other than superusers that may create tables and views
    /// (`GRANT CREATE ON DATABASE`), [`crate::privileges::PUBLIC`] for all.
    #[serde(default, skip_serializing_if = "std::collections::BTreeSet::is_empty")]
    pub creators: std::collections::BTreeSet<String>,
    /// The cluster clock's reservation: no timestamp at or above it has been
    /// handed out, so a new leader starts its timestamp oracle here.
    #[serde(default)]
    pub timestamps_reserved: u64,
}

/// How a new table is to be spread; resolved into a [`Distribution`] with a
/// concrete partition map when the command is applied.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum DistributionSpec {
    /// `replicas`: copies of each partition (`REPLICAS n`); `None` means
    /// [`REPLICAS_DEFAULT`] capped at the node count.
    Hash {
        key_columns: Vec<String>,
        partitions: Option<u32>,
        #[serde(default)]
        replicas: Option<u32>,
    },
    Replicated,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "command", rename_all = "snake_case")]
pub enum CatalogCommand {
    CreateTable {
        name: String,
        columns: Vec<ColumnDef>,
        distribution: DistributionSpec,
        if_not_exists: bool,
        #[serde(default)]
        unique_keys: Vec<UniqueKeyDef>,
        /// The role creating it, which owns it (`None`: superusers only).
        #[serde(default)]
        owner: Option<String>,
    },
    DropTable { name: String, if_exists: bool },
    CreateView {
        name: String,
        query_sql: String,
        or_replace: bool,
        #[serde(default)]
        owner: Option<String>,
    },
    DropView { name: String, if_exists: bool },
    /// Table or view `from` is named `to` from now on (its id, data, owner
    /// and grants stay): how a transaction block sets aside what it drops
    /// until COMMIT, and puts it back on ROLLBACK (`frontend/block_ddl.rs`).
    RenameRelation { from: String, to: String },
    /// `ALTER TABLE relation OWNER TO owner` (a view too, as in
    /// PostgreSQL): the relation's grants stay; the new owner holds every
    /// privilege on it, the old one what it was granted (nothing).
    AlterOwner { relation: String, owner: String },
    /// A node joins (no `id`) or comes back after a restart (its `id`), possibly
    /// at new addresses.
    RegisterNode { id: Option<NodeId>, node_addr: String, sql_addr: String },
    /// The failure detector stopped hearing `id`: its replicas become lost.
    MarkNodeDown { id: NodeId },
    /// The failure detector hears `id` again; its lost replicas stay lost
    /// until they have caught up.
    MarkNodeUp { id: NodeId },
    /// A replica of `node` changes state (catch-up starting, finished, or a
    /// corrupted copy found). Becoming live moves the placement version.
    SetReplicaState { table_id: TableId, partition: PartitionId, node: NodeId, state: ReplicaState },
    /// Re-protection and rebalancing: `from`'s copy is replaced by a new one on
    /// `to`, which starts catching up. `from` may be `None` to add a copy.
    MoveReplica { table_id: TableId, partition: PartitionId, from: Option<NodeId>, to: NodeId },
    /// Drops `node`'s copy of a partition that has enough live copies elsewhere.
    RemoveReplica { table_id: TableId, partition: PartitionId, node: NodeId },
    /// `ALTER CLUSTER DRAIN NODE n`: move every copy off the node.
    DrainNode { id: NodeId },
    /// `ALTER CLUSTER REMOVE NODE n`: forget a node that holds no copies.
    RemoveNode { id: NodeId },
    /// `CREATE ROLE`; a new cluster's first node creates its superuser with
    /// `if_not_exists`.
    CreateRole { role: RoleDef, if_not_exists: bool },
    /// `ALTER ROLE`: the password (`Some(None)` removes it), LOGIN and
    /// SUPERUSER, where given.
    AlterRole {
        name: String,
        password: Option<Option<ScramVerifier>>,
        login: Option<bool>,
        #[serde(default)]
        superuser: Option<bool>,
    },
    /// `DROP ROLE`: refused while the role owns a relation or holds a grant.
    DropRole { name: String, if_exists: bool },
    /// `GRANT` (or, with `revoke`, `REVOKE`) on `object` to `grantees`
    /// (roles, or [`crate::privileges::PUBLIC`]).
    Grant { object: GrantObject, grantees: Vec<String>, revoke: bool },
    /// `ALTER TABLE t ADD PRIMARY KEY | UNIQUE`, step 1: every write prepared
    /// from now on is checked against `key` (applied with `validating` set).
    AddUniqueKey { table: String, key: UniqueKeyDef },
    /// Step 2: the rows stored before were checked: the key is kept as valid
    /// (`keep`), or dropped again.
    FinishUniqueKey { table: String, name: String, keep: bool },
    /// The leader's timestamp oracle may hand out timestamps below `upper`
    /// (the reservation only grows).
    ReserveTimestamps { upper: u64 },
    /// A change to the transaction records (`txns.rs`), which the meta
    /// nodes' state machine keeps beside the catalog.
    Txn { change: crate::txns::TxnCommand },
}

/// What an applied command did, for the caller to report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum CommandOutcome {
    Applied,
    /// `IF NOT EXISTS` / `IF EXISTS` made the command a no-op.
    Skipped,
    TableDropped { table: TableDef },
    NodeRegistered { id: NodeId },
    /// The outcome a transaction record settled on.
    Decided { decision: crate::txns::TxnDecision },
}

impl Catalog {
    pub fn table(&self, name: &str) -> FoamResult<&TableDef> {
        self.tables.get(name).ok_or_else(|| FoamError::UndefinedTable { name: name.to_string() })
    }

    /// The owner and grants of table or view `name`.
    pub fn acl(&self, name: &str) -> Option<&Acl> {
        self.tables.get(name).map(|t| &t.acl).or_else(|| self.views.get(name).map(|v| &v.acl))
    }

    pub fn table_by_id(&self, id: TableId) -> Option<&TableDef> {
        self.tables.values().find(|t| t.id == id)
    }

    pub fn node(&self, id: NodeId) -> FoamResult<&NodeInfo> {
        self.nodes
            .get(&id)
            .ok_or_else(|| FoamError::internal(format!("node {id} is not in the catalog")))
    }

    /// Applies `command` to a copy of the catalog. On error the catalog is unchanged.
    pub fn apply(&self, command: &CatalogCommand) -> FoamResult<(Catalog, CommandOutcome)> {
        let mut next = self.clone();
        let outcome = next.apply_in_place(command)?;
        if outcome != CommandOutcome::Skipped {
            next.version += 1;
        }
        let nodes = next.nodes.clone();
        for table in next.tables.values_mut() {
            table.derive_read_nodes(&nodes);
        }
        Ok((next, outcome))
    }

    /// Whether some superuser can log in with a password.
    fn superuser_can_log_in(&self) -> bool {
        self.roles.values().any(|r| r.superuser && r.login && r.password.is_some())
    }

    /// After a change to role `changed`: a cluster some superuser could log
    /// in to still has one, or it could not be administered again (`apply`
    /// then keeps the catalog as it was).
    fn check_superuser_still_logs_in(&self, could_before: bool, changed: &str) -> FoamResult<()> {
        if !could_before || self.superuser_can_log_in() {
            return Ok(());
        }
        Err(FoamError::InsufficientPrivilege {
            message: format!("role \"{changed}\" is the last superuser that can log in with a password; create another superuser first"),
        })
    }

    fn apply_in_place(&mut self, command: &CatalogCommand) -> FoamResult<CommandOutcome> {
        match command {
            CatalogCommand::CreateTable { name, columns, distribution, if_not_exists, unique_keys, owner } => {
                check_identifier(name)?;
                if self.tables.contains_key(name) || self.views.contains_key(name) {
                    if *if_not_exists {
                        return Ok(CommandOutcome::Skipped);
                    }
                    return Err(FoamError::DuplicateTable { name: name.clone() });
                }
                // A table with a primary key and no distribution key is
                // distributed by its primary key.
                let mut spec = distribution.clone();
                if let DistributionSpec::Hash { key_columns, .. } = &mut spec
                    && key_columns.is_empty()
                    && let Some(primary) = unique_keys.iter().find(|k| k.primary)
                {
                    *key_columns = primary.columns.clone();
                }
                let (distribution, placement) = self.place(name, columns, &spec)?;
                check_unique_keys(name, columns, &distribution, unique_keys)?;
                let id = self.next_table_id.max(1);
                self.next_table_id = id + 1;
                self.tables.insert(
                    name.clone(),
                    TableDef {
                        id,
                        name: name.clone(),
                        columns: columns.clone(),
                        replicas: placement.first().map(|p| p.replicas.len() as u32).unwrap_or(1),
                        distribution,
                        placement,
                        unique_keys: unique_keys.clone(),
                        acl: Acl { owner: owner.clone(), ..Acl::default() },
                    },
                );
                Ok(CommandOutcome::Applied)
            }
            CatalogCommand::DropTable { name, if_exists } => match self.tables.remove(name) {
                Some(table) => Ok(CommandOutcome::TableDropped { table }),
                None if *if_exists => Ok(CommandOutcome::Skipped),
                None => Err(FoamError::UndefinedTable { name: name.clone() }),
            },
            CatalogCommand::CreateView { name, query_sql, or_replace, owner } => {
                check_identifier(name)?;
                if self.tables.contains_key(name) || (self.views.contains_key(name) && !or_replace) {
                    return Err(FoamError::DuplicateTable { name: name.clone() });
                }
                // A replaced view keeps its owner and grants, as in PostgreSQL.
                let acl = match self.views.get(name) {
                    Some(old) => old.acl.clone(),
                    None => Acl { owner: owner.clone(), ..Acl::default() },
                };
                self.views.insert(name.clone(), ViewDef { name: name.clone(), query_sql: query_sql.clone(), acl });
                Ok(CommandOutcome::Applied)
            }
            CatalogCommand::DropView { name, if_exists } => match self.views.remove(name) {
                Some(_) => Ok(CommandOutcome::Applied),
                None if *if_exists => Ok(CommandOutcome::Skipped),
                None => Err(FoamError::UndefinedTable { name: name.clone() }),
            },
            CatalogCommand::RenameRelation { from, to } => {
                check_identifier(to)?;
                if self.tables.contains_key(to) || self.views.contains_key(to) {
                    return Err(FoamError::DuplicateTable { name: to.clone() });
                }
                if let Some(mut table) = self.tables.remove(from) {
                    table.name = to.clone();
                    self.tables.insert(to.clone(), table);
                } else if let Some(mut view) = self.views.remove(from) {
                    view.name = to.clone();
                    self.views.insert(to.clone(), view);
                } else {
                    return Err(FoamError::UndefinedTable { name: from.clone() });
                }
                Ok(CommandOutcome::Applied)
            }
            CatalogCommand::AlterOwner { relation, owner } => {
                if !self.roles.contains_key(owner) {
                    return Err(undefined_role(owner));
                }
                let acl = match self.tables.get_mut(relation) {
                    Some(table) => &mut table.acl,
                    None => match self.views.get_mut(relation) {
                        Some(view) => &mut view.acl,
                        None => return Err(FoamError::UndefinedTable { name: relation.clone() }),
                    },
                };
                acl.owner = Some(owner.clone());
                Ok(CommandOutcome::Applied)
            }
            CatalogCommand::RegisterNode { id, node_addr, sql_addr } => {
                let id = match id {
                    Some(id) => *id,
                    None => {
                        if let Some(existing) = self.nodes.values().find(|n| &n.node_addr == node_addr) {
                            return Err(FoamError::InvalidParameter {
                                message: format!(
                                    "node address {node_addr} is already used by node {}; \
                                     start that node with its own data directory",
                                    existing.id
                                ),
                            });
                        }
                        let id = self.next_node_id.max(1);
                        self.next_node_id = id + 1;
                        id
                    }
                };
                // A registering node is running; its lost replicas stay lost
                // until its replica keeper has copied them.
                let draining = self.nodes.get(&id).is_some_and(|n| n.draining);
                let info = NodeInfo { id, node_addr: node_addr.clone(), sql_addr: sql_addr.clone(), state: NodeState::Up, draining };
                if self.nodes.get(&id) == Some(&info) {
                    return Ok(CommandOutcome::NodeRegistered { id });
                }
                self.next_node_id = self.next_node_id.max(id + 1);
                self.nodes.insert(id, info);
                Ok(CommandOutcome::NodeRegistered { id })
            }
            CatalogCommand::MarkNodeDown { id } => {
                let node = self.nodes.get_mut(id).ok_or_else(|| FoamError::internal(format!("node {id} is not in the catalog")))?;
                if node.state == NodeState::Down {
                    return Ok(CommandOutcome::Skipped);
                }
                node.state = NodeState::Down;
                let nodes = self.nodes.clone();
                for placement in self.tables.values_mut().flat_map(|t| t.placement.iter_mut()) {
                    // The last live copy stays live: it has every write, and the
                    // partition is unavailable (not lost) until its node is back.
                    let others_live = placement.live_besides(*id, &nodes);
                    for replica in placement.replicas.iter_mut().filter(|r| r.node == *id) {
                        if others_live || replica.state != ReplicaState::Live {
                            replica.state = ReplicaState::Lost;
                        }
                    }
                }
                Ok(CommandOutcome::Applied)
            }
            CatalogCommand::MarkNodeUp { id } => {
                let node = self.nodes.get_mut(id).ok_or_else(|| FoamError::internal(format!("node {id} is not in the catalog")))?;
                if node.state == NodeState::Up {
                    return Ok(CommandOutcome::Skipped);
                }
                node.state = NodeState::Up;
                Ok(CommandOutcome::Applied)
            }
            CatalogCommand::SetReplicaState { table_id, partition, node, state } => {
                let version = self.version + 1;
                let nodes = self.nodes.clone();
                let placement = self.placement_mut(*table_id, *partition)?;
                let index = placement.replicas.iter().position(|r| r.node == *node).ok_or_else(|| {
                    FoamError::internal(format!("node {node} holds no replica of partition {partition} of table {table_id}"))
                })?;
                let current = placement.replicas[index].state;
                if current == *state {
                    return Ok(CommandOutcome::Skipped);
                }
                if current == ReplicaState::Live && !placement.live_besides(*node, &nodes) {
                    return Err(FoamError::PartitionUnavailable {
                        message: format!("partition {partition} of table {table_id} has no other live replica"),
                    });
                }
                placement.replicas[index].state = *state;
                if *state == ReplicaState::Live {
                    placement.changed_at = version;
                }
                Ok(CommandOutcome::Applied)
            }
            CatalogCommand::RemoveReplica { table_id, partition, node } => {
                let nodes = self.nodes.clone();
                let placement = self.placement_mut(*table_id, *partition)?;
                if !placement.replicas.iter().any(|r| r.node == *node) {
                    return Ok(CommandOutcome::Skipped);
                }
                if !placement.live_besides(*node, &nodes) {
                    return Err(FoamError::PartitionUnavailable {
                        message: format!("partition {partition} of table {table_id} has no other live copy"),
                    });
                }
                placement.replicas.retain(|r| r.node != *node);
                Ok(CommandOutcome::Applied)
            }
            CatalogCommand::DrainNode { id } => {
                let node = self.nodes.get_mut(id).ok_or_else(|| FoamError::InvalidParameter { message: format!("there is no node {id}") })?;
                if node.draining {
                    return Ok(CommandOutcome::Skipped);
                }
                node.draining = true;
                Ok(CommandOutcome::Applied)
            }
            CatalogCommand::CreateRole { role, if_not_exists } => {
                check_identifier(&role.name)?;
                if self.roles.contains_key(&role.name) {
                    if *if_not_exists {
                        return Ok(CommandOutcome::Skipped);
                    }
                    return Err(FoamError::Query { message: format!("role \"{}\" already exists", role.name), sqlstate: SqlState::DuplicateObject });
                }
                if role.name == crate::privileges::PUBLIC {
                    return Err(FoamError::Query { message: "role name \"public\" is reserved".into(), sqlstate: SqlState::ReservedName });
                }
                self.roles.insert(role.name.clone(), role.clone());
                Ok(CommandOutcome::Applied)
            }
            CatalogCommand::AlterRole { name, password, login, superuser } => {
                let could_before = self.superuser_can_log_in();
                let mut next = self.roles.get(name).cloned().ok_or_else(|| undefined_role(name))?;
                if let Some(password) = password {
                    next.password = password.clone();
                }
                if let Some(login) = login {
                    next.login = *login;
                }
                if let Some(superuser) = superuser {
                    next.superuser = *superuser;
                }
                self.roles.insert(name.clone(), next);
                self.check_superuser_still_logs_in(could_before, name)?;
                Ok(CommandOutcome::Applied)
            }
            CatalogCommand::DropRole { name, if_exists } => {
                if !self.roles.contains_key(name) {
                    return if *if_exists { Ok(CommandOutcome::Skipped) } else { Err(undefined_role(name)) };
                }
                let acls = self.tables.iter().map(|(n, t)| (n, &t.acl)).chain(self.views.iter().map(|(n, v)| (n, &v.acl)));
                let mut depending: Vec<String> = acls
                    .filter(|(_, acl)| acl.mentions(name))
                    .map(|(relation, acl)| format!("{} \"{relation}\"", if acl.is_owner(name) { "owner of" } else { "privileges for" }))
                    .collect();
                if self.creators.contains(name) {
                    depending.push("privileges for the database".into());
                }
                if !depending.is_empty() {
                    return Err(FoamError::Query {
                        message: format!(
                            "role \"{name}\" cannot be dropped because some objects depend on it: {} (drop them or REVOKE first)",
                            depending.join(", ")
                        ),
                        sqlstate: SqlState::DependentObjectsStillExist,
                    });
                }
                let could_before = self.superuser_can_log_in();
                self.roles.remove(name);
                self.check_superuser_still_logs_in(could_before, name)?;
                Ok(CommandOutcome::Applied)
            }
            CatalogCommand::RemoveNode { id } => {
                if !self.nodes.contains_key(id) {
                    return Err(FoamError::InvalidParameter { message: format!("there is no node {id}") });
                }
                let held = self
                    .tables
                    .values()
                    .filter(|t| !t.is_replicated())
                    .flat_map(|t| t.placement.iter())
                    .filter(|p| p.replicas.iter().any(|r| r.node == *id))
                    .count();
                if held > 0 {
                    return Err(FoamError::InvalidParameter {
                        message: format!("node {id} still holds {held} partition copies; ALTER CLUSTER DRAIN NODE {id} first and wait until it holds none"),
                    });
                }
                self.nodes.remove(id);
                for placement in self.tables.values_mut().flat_map(|t| t.placement.iter_mut()) {
                    placement.replicas.retain(|r| r.node != *id);
                }
                Ok(CommandOutcome::Applied)
            }
            CatalogCommand::MoveReplica { table_id, partition, from, to } => {
                if !self.nodes.contains_key(to) {
                    return Err(FoamError::internal(format!("node {to} is not in the catalog")));
                }
                let placement = self.placement_mut(*table_id, *partition)?;
                if placement.replicas.iter().any(|r| r.node == *to) {
                    return Ok(CommandOutcome::Skipped);
                }
                if let Some(from) = from {
                    placement.replicas.retain(|r| r.node != *from);
                }
                placement.replicas.push(Replica { node: *to, state: ReplicaState::CatchingUp });
                Ok(CommandOutcome::Applied)
            }
            CatalogCommand::AddUniqueKey { table, key } => {
                let def = self.tables.get_mut(table).ok_or_else(|| FoamError::UndefinedTable { name: table.clone() })?;
                if def.unique_keys.iter().any(|k| k.name == key.name) {
                    return Err(FoamError::DuplicateTable { name: key.name.clone() });
                }
                // A primary key's columns are NOT NULL. Declaring them so would
                // change the stored rows' schema, so they must be already.
                if key.primary
                    && let Some(nullable) = def.columns.iter().find(|c| c.nullable && key.columns.contains(&c.name))
                {
                    return Err(FoamError::FeatureNotSupported {
                        feature: format!(
                            "ALTER TABLE ... ADD PRIMARY KEY on the nullable column \"{}\" (declare it NOT NULL when creating the table)",
                            nullable.name
                        ),
                    });
                }
                let mut keys = def.unique_keys.clone();
                keys.push(UniqueKeyDef { validating: true, ..key.clone() });
                check_unique_keys(table, &def.columns, &def.distribution, &keys)?;
                def.unique_keys = keys;
                Ok(CommandOutcome::Applied)
            }
            CatalogCommand::FinishUniqueKey { table, name, keep } => {
                let Some(def) = self.tables.get_mut(table) else { return Ok(CommandOutcome::Skipped) };
                if *keep {
                    def.unique_keys.iter_mut().filter(|k| &k.name == name).for_each(|k| k.validating = false);
                } else {
                    def.unique_keys.retain(|k| &k.name != name);
                }
                Ok(CommandOutcome::Applied)
            }
            CatalogCommand::Grant { object, grantees, revoke } => {
                if let Some(missing) = grantees.iter().find(|g| g.as_str() != crate::privileges::PUBLIC && !self.roles.contains_key(*g)) {
                    return Err(undefined_role(missing));
                }
                match object {
                    GrantObject::Create => {
                        for grantee in grantees {
                            if *revoke {
                                self.creators.remove(grantee);
                            } else {
                                self.creators.insert(grantee.clone());
                            }
                        }
                    }
                    GrantObject::Relations { names, privileges } => {
                        if let Some(missing) = names.iter().find(|n| !self.tables.contains_key(*n) && !self.views.contains_key(*n)) {
                            return Err(FoamError::UndefinedTable { name: missing.clone() });
                        }
                        for name in names {
                            let acl = match self.tables.get_mut(name) {
                                Some(table) => &mut table.acl,
                                None => &mut self.views.get_mut(name).expect("checked above").acl,
                            };
                            acl.change(privileges, grantees, *revoke);
                        }
                    }
                }
                Ok(CommandOutcome::Applied)
            }
            CatalogCommand::ReserveTimestamps { upper } => {
                self.timestamps_reserved = self.timestamps_reserved.max(*upper);
                Ok(CommandOutcome::Applied)
            }
            CatalogCommand::Txn { .. } => Err(FoamError::internal("transaction records are kept beside the catalog, not in it")),
        }
    }

    /// The nodes that hold the catalog with Raft: the [`META_NODES`] lowest
    /// node ids (all nodes when there are fewer).
    pub fn meta_nodes(&self) -> Vec<NodeId> {
        self.nodes.keys().take(foam_common::limits::META_NODES).copied().collect()
    }

    /// The meta nodes that vote in the Raft group (see
    /// [`foam_common::limits::meta_voters`]); the others follow as learners.
    pub fn meta_voters(&self) -> Vec<NodeId> {
        self.nodes.keys().take(foam_common::limits::meta_voters(self.nodes.len())).copied().collect()
    }

    /// Nodes new copies may go to: up and not draining, in id order.
    pub fn placeable_nodes(&self) -> Vec<NodeId> {
        self.nodes.values().filter(|n| n.state == NodeState::Up && !n.draining).map(|n| n.id).collect()
    }

    fn placement_mut(&mut self, table_id: TableId, partition: PartitionId) -> FoamResult<&mut Placement> {
        let table = self
            .tables
            .values_mut()
            .find(|t| t.id == table_id)
            .ok_or_else(|| FoamError::UndefinedTable { name: format!("with id {table_id}") })?;
        let name = table.name.clone();
        table
            .placement
            .get_mut(partition as usize)
            .ok_or_else(|| FoamError::internal(format!("table \"{name}\" has no partition {partition}")))
    }

    /// Resolves a distribution spec into a partition map over the current nodes.
    /// Partition `p`'s `r`-th copy goes to the `(p + r) mod n`-th node in id
    /// order, so every node holds the same number of partitions (and of first
    /// copies) when the count is a multiple of n, and copies are on distinct nodes.
    fn place(&self, table: &str, columns: &[ColumnDef], spec: &DistributionSpec) -> FoamResult<(Distribution, Vec<Placement>)> {
        if columns.is_empty() {
            return Err(FoamError::InvalidTableDefinition {
                message: format!("table \"{table}\" must have at least one column"),
            });
        }
        let mut seen = std::collections::BTreeSet::new();
        for column in columns {
            check_identifier(&column.name)?;
            if !seen.insert(column.name.as_str()) {
                return Err(FoamError::InvalidTableDefinition {
                    message: format!("column \"{}\" specified more than once", column.name),
                });
            }
        }
        match spec {
            DistributionSpec::Replicated => {
                if self.nodes.is_empty() {
                    return Err(FoamError::CatalogUnavailable { message: "the cluster has no nodes".into() });
                }
                let nodes = self.placeable_nodes();
                let replicas = nodes.iter().map(|n| Replica { node: *n, state: ReplicaState::Live }).collect();
                Ok((Distribution::Replicated { nodes }, vec![Placement { replicas, changed_at: 0 }]))
            }
            DistributionSpec::Hash { key_columns, partitions, replicas } => {
                let mut key_indices = Vec::with_capacity(key_columns.len());
                for key in key_columns {
                    let index = columns.iter().position(|c| &c.name == key).ok_or_else(|| {
                        FoamError::InvalidTableDefinition {
                            message: format!("distribution column \"{key}\" is not a column of \"{table}\""),
                        }
                    })?;
                    if !foam_common::hash::is_hashable(&columns[index].sql_type.arrow_type()) {
                        return Err(FoamError::InvalidTableDefinition {
                            message: format!("column \"{key}\" cannot be a distribution key"),
                        });
                    }
                    key_indices.push(index);
                }
                if key_indices.is_empty() {
                    key_indices.push(0);
                }
                // Copies go to running nodes only: one placed on a down node
                // would count as live while missing every write.
                let node_ids = self.placeable_nodes();
                if node_ids.is_empty() {
                    return Err(FoamError::CatalogUnavailable { message: "the cluster has no nodes".into() });
                }
                // The node running the statement fills in its default (it
                // knows its worker threads); without one, several are assumed.
                let count = partitions.unwrap_or(default_partition_count(node_ids.len() as u32, WORKER_THREADS_UNKNOWN));
                if count == 0 || count > PARTITIONS_PER_TABLE_MAX {
                    return Err(FoamError::InvalidTableDefinition {
                        message: format!("PARTITIONS must be between 1 and {PARTITIONS_PER_TABLE_MAX}, got {count}"),
                    });
                }
                let n = node_ids.len();
                let copies = match replicas {
                    Some(r) if *r == 0 || *r as usize > n => {
                        return Err(FoamError::InvalidTableDefinition {
                            message: format!("REPLICAS must be between 1 and the number of nodes ({n}), got {r}"),
                        });
                    }
                    Some(r) => *r as usize,
                    None => (REPLICAS_DEFAULT as usize).min(n),
                };
                let placement: Vec<Placement> = (0..count as usize)
                    .map(|p| Placement {
                        replicas: (0..copies).map(|r| Replica { node: node_ids[(p + r) % n], state: ReplicaState::Live }).collect(),
                        changed_at: 0,
                    })
                    .collect();
                let owners = placement.iter().map(|p| p.replicas[0].node).collect();
                Ok((Distribution::Hash { key_columns: key_indices, owners }, placement))
            }
        }
    }
}

fn check_identifier(name: &str) -> FoamResult<()> {
    if name.is_empty() || name.len() > IDENTIFIER_BYTES_MAX {
        return Err(FoamError::InvalidParameter {
            message: format!("identifier \"{name}\" must be 1 to {IDENTIFIER_BYTES_MAX} bytes long"),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(nodes: u32) -> Catalog {
        let mut catalog = Catalog::default();
        for i in 0..nodes {
            let command = CatalogCommand::RegisterNode {
                id: None,
                node_addr: format!("127.0.0.1:{}", 7000 + i),
                sql_addr: format!("127.0.0.1:{}", 5000 + i),
            };
            catalog = catalog.apply(&command).unwrap().0;
        }
        catalog
    }

    fn column(name: &str) -> ColumnDef {
        ColumnDef { name: name.into(), sql_type: SqlType::BigInt, nullable: true }
    }

    fn create(name: &str, spec: DistributionSpec) -> CatalogCommand {
        CatalogCommand::CreateTable {
            name: name.into(),
            columns: vec![column("a"), column("b")],
            distribution: spec,
            if_not_exists: false,
            unique_keys: Vec::new(),
            owner: None,
        }
    }

    fn role(name: &str, superuser: bool, password: Option<&str>) -> CatalogCommand {
        let password = password.map(|p| ScramVerifier::with_salt(p, b"salt".to_vec()));
        CatalogCommand::CreateRole { role: RoleDef { name: name.into(), superuser, login: true, password }, if_not_exists: false }
    }

    #[test]
    fn roles_change_through_commands_and_a_superuser_can_always_log_in() {
        let catalog = cluster(1);
        let (catalog, _) = catalog.apply(&role("foam", true, Some("secret"))).unwrap();
        assert_eq!(catalog.apply(&role("foam", true, Some("other"))).unwrap_err().sqlstate(), "42710");
        let skipped = CatalogCommand::CreateRole { role: catalog.roles["foam"].clone(), if_not_exists: true };
        assert_eq!(catalog.apply(&skipped).unwrap().1, CommandOutcome::Skipped);
        let (catalog, _) = catalog.apply(&role("app", false, Some("x"))).unwrap();
        assert_eq!(catalog.apply(&role("public", false, None)).unwrap_err().sqlstate(), "42939");
        // The only superuser that can log in keeps its password, its login
        // and its superuser flag; other roles may log in too.
        let alter = |password: Option<Option<ScramVerifier>>, login: Option<bool>, superuser: Option<bool>| CatalogCommand::AlterRole {
            name: "foam".into(),
            password,
            login,
            superuser,
        };
        for change in [alter(Some(None), None, None), alter(None, Some(false), None), alter(None, None, Some(false))] {
            assert_eq!(catalog.apply(&change).unwrap_err().sqlstate(), "42501", "{change:?}");
        }
        let drop = |name: &str| CatalogCommand::DropRole { name: name.into(), if_exists: false };
        let (catalog, _) = catalog.apply(&drop("app")).unwrap();
        assert_eq!(catalog.apply(&drop("foam")).unwrap_err().sqlstate(), "42501");
        assert_eq!(catalog.apply(&drop("nobody")).unwrap_err().sqlstate(), "42704");
        // With a second superuser, the first can go.
        let (catalog, _) = catalog.apply(&role("admin", true, Some("pw"))).unwrap();
        let (catalog, _) = catalog.apply(&drop("foam")).unwrap();
        assert_eq!(catalog.roles.keys().collect::<Vec<_>>(), ["admin"]);
        let changed = CatalogCommand::AlterRole {
            name: "admin".into(),
            password: Some(Some(ScramVerifier::with_salt("new", b"s".to_vec()))),
            login: None,
            superuser: None,
        };
        let (after, _) = catalog.apply(&changed).unwrap();
        assert_ne!(after.roles["admin"].password, catalog.roles["admin"].password);
        // A catalog saved before roles existed still loads.
        let mut old = serde_json::to_value(&cluster(1)).unwrap();
        old.as_object_mut().unwrap().remove("roles");
        assert!(serde_json::from_value::<Catalog>(old).unwrap().roles.is_empty());
    }

    #[test]
    fn grants_need_their_roles_and_relations_and_keep_their_roles_from_being_dropped() {
        use crate::privileges::{GrantObject, PUBLIC, Privilege};
        let catalog = cluster(1);
        let (catalog, _) = catalog.apply(&role("alice", false, Some("a"))).unwrap();
        let (catalog, _) = catalog.apply(&role("bob", false, Some("b"))).unwrap();
        let spec = DistributionSpec::Hash { key_columns: vec!["a".into()], partitions: Some(2), replicas: None };
        let mut owned = create("t", spec);
        if let CatalogCommand::CreateTable { owner, .. } = &mut owned {
            *owner = Some("alice".into());
        }
        let (catalog, _) = catalog.apply(&owned).unwrap();
        let view = CatalogCommand::CreateView { name: "v".into(), query_sql: "SELECT a FROM t".into(), or_replace: false, owner: Some("bob".into()) };
        let (catalog, _) = catalog.apply(&view).unwrap();
        assert!(catalog.acl("t").unwrap().is_owner("alice") && catalog.acl("v").unwrap().is_owner("bob"));
        let grant = |names: &[&str], grantees: &[&str], revoke: bool| CatalogCommand::Grant {
            object: GrantObject::Relations { names: names.iter().map(|n| n.to_string()).collect(), privileges: vec![Privilege::Select] },
            grantees: grantees.iter().map(|g| g.to_string()).collect(),
            revoke,
        };
        assert_eq!(catalog.apply(&grant(&["t"], &["carol"], false)).unwrap_err().sqlstate(), "42704");
        assert_eq!(catalog.apply(&grant(&["t", "nope"], &["bob"], false)).unwrap_err().sqlstate(), "42P01");
        let (catalog, _) = catalog.apply(&grant(&["t", "v"], &["bob", PUBLIC], false)).unwrap();
        assert!(catalog.acl("t").unwrap().allows("bob", Privilege::Select) && catalog.acl("v").unwrap().allows("carol", Privilege::Select));
        // Replacing a view keeps its owner and grants.
        let replace = CatalogCommand::CreateView { name: "v".into(), query_sql: "SELECT b FROM t".into(), or_replace: true, owner: Some("alice".into()) };
        let (catalog, _) = catalog.apply(&replace).unwrap();
        assert!(catalog.acl("v").unwrap().is_owner("bob") && catalog.acl("v").unwrap().grants.contains_key(PUBLIC));
        let create = |revoke| CatalogCommand::Grant { object: GrantObject::Create, grantees: vec!["bob".into()], revoke };
        let (catalog, _) = catalog.apply(&create(false)).unwrap();
        assert!(catalog.creators.contains("bob"));
        // bob owns v, holds SELECT on t and CREATE: each keeps him.
        let drop_bob = CatalogCommand::DropRole { name: "bob".into(), if_exists: false };
        let error = catalog.apply(&drop_bob).unwrap_err();
        assert_eq!(error.sqlstate(), "2BP01");
        assert!(error.to_string().contains("owner of \"v\"") && error.to_string().contains("privileges for \"t\""), "{error}");
        let (catalog, _) = catalog.apply(&CatalogCommand::DropView { name: "v".into(), if_exists: false }).unwrap();
        let (catalog, _) = catalog.apply(&grant(&["t"], &["bob"], true)).unwrap();
        let (catalog, _) = catalog.apply(&create(true)).unwrap();
        let (catalog, _) = catalog.apply(&drop_bob).unwrap();
        assert!(!catalog.roles.contains_key("bob") && catalog.acl("t").unwrap().grants.contains_key(PUBLIC));
        // A catalog saved before privileges still loads; its tables are superusers' only.
        let mut old = serde_json::to_value(&catalog).unwrap();
        old["tables"]["t"].as_object_mut().unwrap().remove("acl");
        assert_eq!(serde_json::from_value::<Catalog>(old).unwrap().tables["t"].acl, crate::privileges::Acl::default());
    }

    #[test]
    fn a_new_owner_must_be_a_role_and_the_relation_must_exist() {
        let spec = DistributionSpec::Hash { key_columns: vec!["a".into()], partitions: Some(2), replicas: None };
        let (catalog, _) = cluster(1).apply(&create("t", spec)).unwrap();
        let alter = |relation: &str, owner: &str| CatalogCommand::AlterOwner { relation: relation.into(), owner: owner.into() };
        assert_eq!(catalog.apply(&alter("t", "alice")).unwrap_err().sqlstate(), "42704");
        let (catalog, _) = catalog.apply(&role("alice", false, None)).unwrap();
        assert_eq!(catalog.apply(&alter("nope", "alice")).unwrap_err().sqlstate(), "42P01");
        let (catalog, _) = catalog.apply(&alter("t", "alice")).unwrap();
        assert!(catalog.tables["t"].acl.is_owner("alice"));
    }

    #[test]
    fn a_renamed_relation_keeps_its_id_and_refuses_taken_names() {
        let catalog = cluster(2);
        let spec = || DistributionSpec::Hash { key_columns: vec!["a".into()], partitions: Some(2), replicas: None };
        let create = |name: &str| create(name, spec());
        let (catalog, _) = catalog.apply(&create("t")).unwrap();
        let (catalog, _) = catalog.apply(&create("u")).unwrap();
        let id = catalog.tables["t"].id;
        let rename = |from: &str, to: &str| CatalogCommand::RenameRelation { from: from.into(), to: to.into() };
        assert_eq!(catalog.apply(&rename("t", "u")).unwrap_err().sqlstate(), "42P07");
        assert_eq!(catalog.apply(&rename("nope", "v")).unwrap_err().sqlstate(), "42P01");
        let (catalog, _) = catalog.apply(&rename("t", "hidden")).unwrap();
        assert!(!catalog.tables.contains_key("t"));
        assert_eq!((catalog.tables["hidden"].id, catalog.tables["hidden"].name.as_str()), (id, "hidden"));
    }

    #[test]
    fn an_added_key_is_checked_at_once_and_valid_only_when_finished() {
        let key = |name: &str, columns: &[&str], primary: bool| UniqueKeyDef {
            name: name.into(),
            columns: columns.iter().map(|c| c.to_string()).collect(),
            primary,
            validating: false,
        };
        let add = |key: UniqueKeyDef| CatalogCommand::AddUniqueKey { table: "t".into(), key };
        let spec = DistributionSpec::Hash { key_columns: vec!["a".into()], partitions: Some(2), replicas: None };
        let (catalog, _) = cluster(1).apply(&create("t", spec)).unwrap();
        // Nullable columns cannot be a primary key without a schema change.
        assert_eq!(catalog.apply(&add(key("t_pkey", &["a"], true))).unwrap_err().sqlstate(), "0A000");
        // A key must include the distribution key, name columns that exist, and a new name.
        assert_eq!(catalog.apply(&add(key("t_b_key", &["b"], false))).unwrap_err().sqlstate(), "42P16");
        assert_eq!(catalog.apply(&add(key("t_c_key", &["a", "c"], false))).unwrap_err().sqlstate(), "42703");
        let (catalog, _) = catalog.apply(&add(key("t_a_b_key", &["a", "b"], false))).unwrap();
        assert!(catalog.tables["t"].unique_keys[0].validating, "checked, not yet valid");
        assert_eq!(catalog.apply(&add(key("t_a_b_key", &["a"], false))).unwrap_err().sqlstate(), "42P07");
        let finish = |keep| CatalogCommand::FinishUniqueKey { table: "t".into(), name: "t_a_b_key".into(), keep };
        let (kept, _) = catalog.apply(&finish(true)).unwrap();
        assert!(!kept.tables["t"].unique_keys[0].validating);
        let (dropped, _) = catalog.apply(&finish(false)).unwrap();
        assert!(dropped.tables["t"].unique_keys.is_empty());
        // A valid key is saved as before keys could be added.
        assert!(!serde_json::to_string(&kept.tables["t"].unique_keys[0]).unwrap().contains("validating"));
    }

    #[test]
    fn default_partitions_spread_evenly_over_nodes() {
        // Two per node, and at least four: 1 and 2 nodes get 4, 3 nodes 6.
        for (nodes, expected) in [(1, 4), (2, 4), (3, 6)] {
            let (catalog, _) = cluster(nodes)
                .apply(&create("t", DistributionSpec::Hash { key_columns: vec![], partitions: None, replicas: None }))
                .unwrap();
            let table = catalog.table("t").unwrap();
            assert_eq!(table.partition_count(), expected, "{nodes} nodes");
            for node in catalog.nodes.keys() {
                assert_eq!(table.partitions_on(*node).len() as u32, expected / nodes, "{nodes} nodes");
            }
            let Distribution::Hash { key_columns, .. } = &table.distribution else { panic!("hash expected") };
            assert_eq!(key_columns, &vec![0], "no DISTRIBUTED BY means the first column");
        }
    }

    #[test]
    fn failed_command_leaves_catalog_unchanged() {
        let catalog = cluster(2);
        let (catalog, _) = catalog.apply(&create("t", DistributionSpec::Replicated)).unwrap();
        let before = catalog.clone();
        let error = catalog.apply(&create("t", DistributionSpec::Replicated)).unwrap_err();
        assert_eq!(error.sqlstate(), "42P07");
        let error = catalog
            .apply(&create("u", DistributionSpec::Hash { key_columns: vec!["zz".into()], partitions: None, replicas: None }))
            .unwrap_err();
        assert_eq!(error.sqlstate(), "42P16");
        assert_eq!(catalog, before);
    }

    #[test]
    fn table_ids_are_never_reused() {
        let catalog = cluster(1);
        let (catalog, _) = catalog.apply(&create("t", DistributionSpec::Replicated)).unwrap();
        let first = catalog.table("t").unwrap().id;
        let (catalog, _) = catalog.apply(&CatalogCommand::DropTable { name: "t".into(), if_exists: false }).unwrap();
        let (catalog, _) = catalog.apply(&create("t", DistributionSpec::Replicated)).unwrap();
        assert_ne!(catalog.table("t").unwrap().id, first);
    }

    #[test]
    fn restarted_node_keeps_its_id_and_new_address() {
        let catalog = cluster(2);
        let command = CatalogCommand::RegisterNode { id: Some(2), node_addr: "127.0.0.1:9999".into(), sql_addr: "x".into() };
        let (catalog, outcome) = catalog.apply(&command).unwrap();
        assert_eq!(outcome, CommandOutcome::NodeRegistered { id: 2 });
        assert_eq!(catalog.nodes.len(), 2);
        assert_eq!(catalog.node(2).unwrap().node_addr, "127.0.0.1:9999");
    }

    fn hash_table(replicas: Option<u32>) -> DistributionSpec {
        DistributionSpec::Hash { key_columns: vec![], partitions: Some(6), replicas }
    }

    #[test]
    fn copies_go_to_distinct_nodes_and_the_last_live_copy_is_kept() {
        let catalog = cluster(3);
        let (catalog, _) = catalog.apply(&create("t", hash_table(None))).unwrap();
        let table = catalog.table("t").unwrap();
        for placement in &table.placement {
            assert_eq!(placement.replicas.len(), REPLICAS_DEFAULT as usize);
            assert_ne!(placement.replicas[0].node, placement.replicas[1].node);
        }
        // A copy moved away and back is listed last, yet its home node reads it.
        let mut moved = catalog.table("t").unwrap().clone();
        let home = moved.placement[0].replicas[0].node;
        moved.placement[0].replicas.reverse();
        moved.derive_read_nodes(&catalog.nodes);
        let Distribution::Hash { owners, .. } = &moved.distribution else { panic!("hash expected") };
        assert_eq!(owners[0], home, "partition 0 is read on its home node wherever its copy is listed");
        let error = catalog.apply(&create("u", hash_table(Some(4)))).unwrap_err();
        assert_eq!(error.sqlstate(), "42P16", "more copies than nodes");
        // Node 1 down: its copies are lost, reads move to the other copy.
        let (catalog, _) = catalog.apply(&CatalogCommand::MarkNodeDown { id: 1 }).unwrap();
        let table = catalog.table("t").unwrap();
        let Distribution::Hash { owners, .. } = &table.distribution else { panic!("hash expected") };
        assert!(!owners.contains(&1), "no partition is read from the down node: {owners:?}");
        assert!(table.write_targets(0, &catalog.nodes).unwrap().iter().all(|n| *n != 1));
        // Node 2 down too: partitions whose other copy is on node 1 keep node 2's copy live.
        let (catalog, _) = catalog.apply(&CatalogCommand::MarkNodeDown { id: 2 }).unwrap();
        let table = catalog.table("t").unwrap();
        for placement in &table.placement {
            assert!(placement.replicas.iter().any(|r| r.state == ReplicaState::Live), "every partition keeps a live copy");
        }
        let stranded = table.placement.iter().position(|p| p.replicas.iter().all(|r| r.node != 3)).unwrap();
        assert_eq!(table.write_targets(stranded as u32, &catalog.nodes).unwrap_err().sqlstate(), "57P03");
    }

    #[test]
    fn a_copy_becoming_live_moves_the_placement_version_and_nodes_leave_only_when_empty() {
        let catalog = cluster(3);
        let (catalog, _) = catalog.apply(&create("t", hash_table(Some(1)))).unwrap();
        let id = catalog.table("t").unwrap().id;
        let holder = catalog.table("t").unwrap().placement[0].replicas[0].node;
        let error = catalog.apply(&CatalogCommand::RemoveNode { id: holder }).unwrap_err();
        assert_eq!(error.sqlstate(), "22023", "a node holding copies cannot be removed");
        let target = if holder == 1 { 2 } else { 1 };
        let (catalog, _) = catalog.apply(&CatalogCommand::MoveReplica { table_id: id, partition: 0, from: None, to: target }).unwrap();
        let error = catalog.apply(&CatalogCommand::RemoveReplica { table_id: id, partition: 0, node: holder }).unwrap_err();
        assert_eq!(error.sqlstate(), "57P03", "the old copy stays until the new one is live");
        let command = CatalogCommand::SetReplicaState { table_id: id, partition: 0, node: target, state: ReplicaState::Live };
        let (catalog, _) = catalog.apply(&command).unwrap();
        assert_eq!(catalog.table("t").unwrap().placement_version(0), catalog.version);
        let (catalog, _) = catalog.apply(&CatalogCommand::RemoveReplica { table_id: id, partition: 0, node: holder }).unwrap();
        let error = catalog.apply(&CatalogCommand::RemoveReplica { table_id: id, partition: 0, node: target }).unwrap_err();
        assert_eq!(error.sqlstate(), "57P03", "the last live copy stays");
    }
}
