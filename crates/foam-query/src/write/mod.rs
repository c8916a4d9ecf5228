//! The write path: one SQL statement's rows, hashed to partitions, shipped to the
//! nodes that own them, and committed everywhere or nowhere (two-phase commit).
//!
//! ```text
//!  rows ─▶ TableWriter::write ─▶ hash(distribution key) ─▶ per-partition buffer
//!                                         │ WRITE_SHIP_ROWS reached
//!                                         ▼
//!            Stage{txn, partition} (RPC, or a direct call for this node) ─▶ every live replica
//!  commit:  Prepare on every participant ─▶ decision in the meta nodes' Raft log ─▶ Commit on every participant
//!  any failure before the decision: Abort everywhere, the table is as before.
//! ```
//! A partition's rows go to each of its live replicas on a node that is up (a
//! replicated table has one partition on every node); each replica holds them
//! durably before the statement is acknowledged. `RowRouter` (routing) and
//! `commit_transaction` (the protocol) are separate so a bulk loader outside
//! the cluster can ship rows straight to their owners and let a node commit.
//! In a transaction block, a statement's rows stay staged and the block's
//! COMMIT runs the protocol once for all of them (`transaction.rs`).

pub mod checks;
pub mod copy;
pub mod copy_binary;
pub mod copy_format;
pub mod keys;
pub mod transaction;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, UInt32Array};
use arrow::compute::take_record_batch;
use arrow::datatypes::{DataType, SchemaRef};
use arrow::record_batch::RecordBatch;
use async_trait::async_trait;
use datafusion::datasource::sink::DataSink;
use datafusion::error::Result as DfResult;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::{DisplayAs, DisplayFormatType};
use foam_catalog::txns::TxnDecision;
use foam_catalog::{Distribution, NodeInfo, SqlType, TableDef};
use foam_common::limits::{WRITE_BUFFER_BYTES_MAX, WRITE_SHIP_ROWS, WRITE_STREAM_BATCHES_IN_FLIGHT};
use foam_storage::StorageError;
use foam_common::{FoamError, FoamResult, NodeId, PartitionId, TableId, TxnId};
use foam_rpc::{NodeRequest, NodeResponse};
use futures::StreamExt;
use tokio::task::JoinSet;

use crate::context::NodeContext;

/// Delivers one partition's rows of a transaction to a node. Inside a node
/// this is a direct call for itself and an RPC for peers; the TPC-H loader,
/// which is not a node, ships everything by RPC.
#[async_trait]
pub trait StageTarget: Send + Sync + 'static {
    async fn stage(&self, target: NodeId, shipment: Arc<Shipment>) -> FoamResult<()>;
}

/// One partition's rows of a transaction, on their way to each of its live
/// replicas: encoded into a `Stage` message at most once, however many peers
/// receive it.
pub struct Shipment {
    pub txn: TxnId,
    pub route: Route,
    /// The statement of a transaction block that wrote the rows (0 outside one).
    pub statement: foam_storage::StatementNumber,
    /// Rows to delete rather than add.
    pub delete: bool,
    pub batches: Vec<RecordBatch>,
    message: std::sync::Mutex<Option<bytes::Bytes>>,
}

impl Shipment {
    pub fn new(txn: TxnId, route: Route, batches: Vec<RecordBatch>) -> Self {
        Shipment { txn, route, statement: 0, delete: false, batches, message: Default::default() }
    }

    /// The `Stage` request, naming `coordinator` (the same for every target
    /// of a statement).
    pub fn request(&self, coordinator: NodeId) -> NodeRequest {
        let Route { table_id, partition, placement_version } = self.route;
        NodeRequest::Stage { txn: self.txn, coordinator, table_id, partition, placement_version, statement: self.statement, delete: self.delete }
    }

    /// The framed `Stage` message with the rows as Arrow IPC, built on first use.
    pub fn message(&self, coordinator: NodeId) -> FoamResult<bytes::Bytes> {
        let mut message = self.message.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(built) = message.as_ref() {
            return Ok(built.clone());
        }
        let built = foam_rpc::frame::encode_with(&self.request(coordinator), foam_storage::ipc::encoded_size_hint(&self.batches), |bytes| {
            Ok(foam_storage::ipc::encode_batches_into(&self.batches, bytes)?)
        })?;
        *message = Some(built.clone());
        Ok(built)
    }

    /// Sends this shipment to `target`'s RPC endpoint.
    pub async fn send(&self, client: &foam_rpc::NodeClient, coordinator: NodeId) -> FoamResult<()> {
        let message = self.message(coordinator)?;
        client.call_encoded(&self.request(coordinator), message).await.map(|_| ())
    }
}

/// Which partition a shipment is for, and the placement version it was routed with.
#[derive(Debug, Clone, Copy)]
pub struct Route {
    pub table_id: foam_common::TableId,
    pub partition: PartitionId,
    pub placement_version: u64,
}

/// Ships from a node: locally to itself, over RPC to its peers.
pub struct NodeStageTarget(pub Arc<NodeContext>);

#[async_trait]
impl StageTarget for NodeStageTarget {
    async fn stage(&self, target: NodeId, shipment: Arc<Shipment>) -> FoamResult<()> {
        let node = &self.0;
        if target == node.node_id {
            let storage = node.storage.clone();
            let coordinator = node.node_id;
            let Route { table_id, partition, placement_version } = shipment.route;
            let (txn, statement, delete, batches) = (shipment.txn, shipment.statement, shipment.delete, shipment.batches.clone());
            tokio::task::spawn_blocking(move || stage_on(&storage, txn, coordinator, (table_id, partition), placement_version, statement, delete, batches))
                .await
                .map_err(|e| FoamError::internal(e.to_string()))?
        } else {
            shipment.send(&node.client_for(target)?, node.node_id).await
        }
    }
}

/// Stages rows on this node's storage: rows to add, or rows to delete.
#[allow(clippy::too_many_arguments)]
fn stage_on(
    storage: &foam_storage::StorageEngine,
    txn: TxnId,
    coordinator: NodeId,
    key: (TableId, PartitionId),
    placement_version: u64,
    statement: foam_storage::StatementNumber,
    delete: bool,
    batches: Vec<RecordBatch>,
) -> FoamResult<()> {
    Ok(if delete {
        storage.stage_deletes(txn, coordinator, key, placement_version, statement, batches)?
    } else {
        storage.stage_statement(txn, coordinator, key, placement_version, statement, batches)?
    })
}

/// The rows one statement staged for one partition (additions and deletions,
/// each sent to every copy) and the copies it sent them to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StagedPartition {
    pub rows: u64,
    pub copies: BTreeSet<NodeId>,
}

/// Hashes rows to partitions and ships them to their owners in large batches,
/// remembering which nodes took part.
pub struct RowRouter {
    target: Arc<dyn StageTarget>,
    table: TableDef,
    /// The cluster's nodes, for which replicas are on nodes that are up.
    nodes: BTreeMap<NodeId, NodeInfo>,
    schema: SchemaRef,
    txn: TxnId,
    statement: foam_storage::StatementNumber,
    /// Per partition, rows to add (`false`) or delete (`true`): buffered
    /// batches and their row count.
    buffers: HashMap<(PartitionId, bool), (Vec<RecordBatch>, usize)>,
    buffered_bytes: usize,
    /// Rows shipped to each participant, which it must have at prepare.
    participants: BTreeMap<NodeId, u64>,
    /// Per partition, the rows shipped (to each of its copies) and the copies.
    staged: BTreeMap<PartitionId, StagedPartition>,
    in_flight: JoinSet<FoamResult<()>>,
    rows: u64,
    deleted: u64,
    /// The table's CHECK constraints (`checks.rs`), needed when it has any.
    checks: Option<Arc<checks::TableChecks>>,
}

impl RowRouter {
    pub fn new(target: Arc<dyn StageTarget>, table: TableDef, nodes: BTreeMap<NodeId, NodeInfo>, txn: TxnId) -> Self {
        let schema = table.arrow_schema();
        RowRouter {
            target,
            table,
            nodes,
            schema,
            txn,
            statement: 0,
            buffers: HashMap::new(),
            buffered_bytes: 0,
            participants: BTreeMap::new(),
            staged: BTreeMap::new(),
            in_flight: JoinSet::new(),
            rows: 0,
            deleted: 0,
            checks: None,
        }
    }

    /// Checks every row written against `checks`, the table's CHECK
    /// constraints as the statement planned them.
    pub fn with_checks(mut self, checks: Option<Arc<checks::TableChecks>>) -> Self {
        self.checks = checks;
        self
    }

    /// Tags the rows as written by `statement` of a transaction block.
    pub fn with_statement(mut self, statement: foam_storage::StatementNumber) -> Self {
        self.statement = statement;
        self
    }

    pub fn txn(&self) -> TxnId {
        self.txn
    }

    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Rows deleted so far.
    pub fn deleted(&self) -> u64 {
        self.deleted
    }

    /// Adds rows (already in the table's column types) to the statement.
    pub async fn write(&mut self, batch: RecordBatch) -> FoamResult<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let batch = conform_rows(&self.table, &self.schema, batch)?;
        checks::ensure_planned(&self.table, self.checks.as_deref())?;
        if let Some(checks) = &self.checks {
            checks.check(&batch)?;
        }
        self.rows += batch.num_rows() as u64;
        for (partition, part) in split_by_partition(&self.table, &batch)? {
            self.buffer((partition, false), owning_text(part)?).await?;
        }
        Ok(())
    }

    /// Deletes rows of the table, each as often as given: whole rows as a
    /// scan of the table read them. They hash to the partition that holds them.
    pub async fn write_deletes(&mut self, batch: RecordBatch) -> FoamResult<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let batch = cast_to(&self.schema, batch)?;
        self.deleted += batch.num_rows() as u64;
        for (partition, part) in split_by_partition(&self.table, &batch)? {
            self.buffer((partition, true), owning_text(part)?).await?;
        }
        Ok(())
    }

    async fn buffer(&mut self, partition: (PartitionId, bool), batch: RecordBatch) -> FoamResult<()> {
        self.buffered_bytes += batch.get_array_memory_size();
        let entry = self.buffers.entry(partition).or_default();
        entry.1 += batch.num_rows();
        entry.0.push(batch);
        if entry.1 >= WRITE_SHIP_ROWS {
            self.ship_buffer(partition).await?;
        }
        while self.buffered_bytes > WRITE_BUFFER_BYTES_MAX {
            let Some(largest) = self.buffers.iter().max_by_key(|(_, (_, rows))| *rows).map(|(p, _)| *p) else {
                break;
            };
            self.ship_buffer(largest).await?;
        }
        Ok(())
    }

    async fn ship_buffer(&mut self, (partition, delete): (PartitionId, bool)) -> FoamResult<()> {
        let (batches, _) = self.buffers.remove(&(partition, delete)).unwrap_or_default();
        let bytes: usize = batches.iter().map(|b| b.get_array_memory_size()).sum();
        self.buffered_bytes = self.buffered_bytes.saturating_sub(bytes);
        self.ship(partition, delete, batches).await
    }

    /// Sends one partition's rows to its live replicas, keeping a bounded
    /// number of shipments in flight.
    async fn ship(&mut self, partition: PartitionId, delete: bool, batches: Vec<RecordBatch>) -> FoamResult<()> {
        let targets = self.table.write_targets(partition, &self.nodes)?;
        let route = Route { table_id: self.table.id, partition, placement_version: self.table.placement_version(partition) };
        let rows: u64 = batches.iter().map(|b| b.num_rows() as u64).sum();
        let mut shipment = Shipment::new(self.txn, route, batches);
        shipment.statement = self.statement;
        shipment.delete = delete;
        let shipment = Arc::new(shipment);
        let staged = self.staged.entry(partition).or_default();
        staged.rows += rows;
        staged.copies.extend(&targets);
        for node in targets {
            while self.in_flight.len() >= WRITE_STREAM_BATCHES_IN_FLIGHT {
                self.join_one().await?;
            }
            *self.participants.entry(node).or_default() += rows;
            let (target, shipment) = (self.target.clone(), shipment.clone());
            self.in_flight.spawn(async move { target.stage(node, shipment).await });
        }
        Ok(())
    }

    async fn join_one(&mut self) -> FoamResult<()> {
        join_next(&mut self.in_flight).await
    }

    /// Ships every buffered row and waits until all participants staged them;
    /// returns the participants with the rows each was sent.
    pub async fn finish(&mut self) -> FoamResult<Vec<(NodeId, u64)>> {
        let partitions: Vec<(PartitionId, bool)> = self.buffers.keys().copied().collect();
        for partition in partitions {
            self.ship_buffer(partition).await?;
        }
        while !self.in_flight.is_empty() {
            self.join_one().await?;
        }
        Ok(self.participants.iter().map(|(node, rows)| (*node, *rows)).collect())
    }

    /// Per partition, the rows this statement staged and the copies holding them.
    pub fn staged(&self) -> &BTreeMap<PartitionId, StagedPartition> {
        &self.staged
    }

    /// Stops shipping; returns the nodes that may hold staged rows.
    pub async fn cancel(&mut self) -> Vec<NodeId> {
        self.in_flight.abort_all();
        while self.in_flight.join_next().await.is_some() {}
        self.participants.keys().copied().collect()
    }
}

/// Waits for one of the shipments in `in_flight` (none left is Ok) and
/// returns how it went.
pub async fn join_next(in_flight: &mut JoinSet<FoamResult<()>>) -> FoamResult<()> {
    match in_flight.join_next().await {
        Some(Ok(result)) => result,
        Some(Err(join_error)) => Err(FoamError::internal(join_error.to_string())),
        None => Ok(()),
    }
}

/// Checks rows written to `table` (whose Arrow schema is `schema`): column
/// count, NOT NULL, string lengths; returns them with the table's schema,
/// their strings as stored ([`store_strings`]).
pub fn conform_rows(table: &TableDef, schema: &SchemaRef, batch: RecordBatch) -> FoamResult<RecordBatch> {
    let batch = store_strings(table, batch);
    check_rows(table, &batch)?;
    RecordBatch::try_new(schema.clone(), batch.columns().to_vec()).map_err(|e| FoamError::DataException { message: e.to_string() })
}

/// `batch`'s strings as `table` stores them, as PostgreSQL's assignment to
/// a column does: a CHAR(n) value without trailing blanks (they are
/// insignificant, and padding is added when one is read:
/// `frontend::char_columns`), a VARCHAR(n) value longer than n cut to n
/// characters where the rest is all blanks. A column with neither is kept.
pub fn store_strings(table: &TableDef, batch: RecordBatch) -> RecordBatch {
    let mut columns = batch.columns().to_vec();
    let mut changed = false;
    for (column, array) in table.columns.iter().zip(columns.iter_mut()) {
        let Some(strings) = array.as_string_view_opt() else { continue };
        let stored: Option<Vec<Option<String>>> = match column.sql_type {
            SqlType::Char { .. } if strings.iter().flatten().any(|s| s.ends_with(' ')) => {
                Some(strings.iter().map(|s| s.map(|s| s.trim_end_matches(' ').to_string())).collect())
            }
            SqlType::Varchar { length_max: Some(n) } if strings.lengths().any(|bytes| bytes as usize > n as usize) => {
                let cut = |s: &str| match s.char_indices().nth(n as usize) {
                    Some((at, _)) if s[at..].bytes().all(|b| b == b' ') => s[..at].to_string(),
                    _ => s.to_string(),
                };
                Some(strings.iter().map(|s| s.map(cut)).collect())
            }
            _ => None,
        };
        if let Some(stored) = stored {
            *array = Arc::new(arrow::array::StringViewArray::from_iter(stored));
            changed = true;
        }
    }
    if !changed {
        return batch;
    }
    RecordBatch::try_new(batch.schema(), columns).unwrap_or(batch)
}

/// Fails unless `table` could hold every row of `batch` (in the table's
/// column types): column count, NOT NULL, string lengths.
pub fn check_rows(table: &TableDef, batch: &RecordBatch) -> FoamResult<()> {
    if batch.num_columns() != table.columns.len() {
        return Err(FoamError::internal(format!("{} columns written to \"{}\", which has {}", batch.num_columns(), table.name, table.columns.len())));
    }
    for (column, array) in table.columns.iter().zip(batch.columns()) {
        if !column.nullable && array.null_count() > 0 {
            return Err(FoamError::Query {
                message: format!("null value in column \"{}\" of relation \"{}\" violates not-null constraint", column.name, table.name),
                sqlstate: foam_common::SqlState::NotNullViolation,
            });
        }
        let length_max = match column.sql_type {
            SqlType::Varchar { length_max: Some(n) } => n,
            SqlType::Char { length } => length,
            _ => continue,
        };
        // Text is `Utf8View` in the table's types, which the rows are in.
        let Some(strings) = array.as_string_view_opt() else { continue };
        // A value has at least as many bytes as characters: when no value
        // has more bytes than the limit, none need decoding.
        let limit = length_max as usize;
        if strings.lengths().all(|bytes| bytes as usize <= limit) {
            continue;
        }
        if let Some(long) = strings.iter().flatten().find(|s| s.len() > limit && s.chars().count() > limit) {
            return Err(FoamError::Query {
                message: format!(
                    "value too long for type {} in column \"{}\": \"{}\"",
                    column.sql_type.sql_name(),
                    column.name,
                    long.chars().take(40).collect::<String>()
                ),
                sqlstate: foam_common::SqlState::StringDataRightTruncation,
            });
        }
    }
    Ok(())
}

/// `batch`'s columns cast to `schema`'s types where they differ (a scan's
/// text may come as another string type than the table's).
pub fn cast_to(schema: &SchemaRef, batch: RecordBatch) -> FoamResult<RecordBatch> {
    // Nullable whatever the table says: `conform_rows` names a NULL in a NOT
    // NULL column as PostgreSQL does.
    let fields: Vec<_> = schema.fields().iter().map(|f| f.as_ref().clone().with_nullable(true)).collect();
    Ok(foam_storage::segment::cast_to_schema(&Arc::new(arrow::datatypes::Schema::new(fields)), &batch)?)
}

/// Splits rows of `table` by the partition that holds them (all in partition
/// 0 for a replicated table).
pub fn split_by_partition(table: &TableDef, batch: &RecordBatch) -> FoamResult<Vec<(PartitionId, RecordBatch)>> {
    let Distribution::Hash { key_columns, owners } = &table.distribution else {
        return Ok(vec![(0, batch.clone())]);
    };
    let keys: Vec<ArrayRef> = key_columns.iter().map(|i| batch.column(*i).clone()).collect();
    let hashes = foam_common::hash::hash_rows(&keys)?;
    let partition_of = foam_common::hash::PartitionOfHash::new(owners.len() as u32);
    let mut rows_of: Vec<Vec<u32>> = vec![Vec::new(); owners.len()];
    for (row, hash) in hashes.iter().enumerate() {
        rows_of[partition_of.partition(*hash) as usize].push(row as u32);
    }
    rows_of
        .into_iter()
        .enumerate()
        .filter(|(_, rows)| !rows.is_empty())
        .map(|(partition, rows)| {
            let part = take_record_batch(batch, &UInt32Array::from(rows)).map_err(|e| FoamError::internal(e.to_string()))?;
            Ok((partition as PartitionId, part))
        })
        .collect()
}

/// `batch` with its text columns' strings copied into buffers of their own.
/// A text column is `Utf8View`: views into buffers that a cast, a filter or
/// `split_by_partition` share with other rows. Rows kept in a memtable or staged
/// for a commit would otherwise keep every row's bytes alive and count them
/// in their size, once per partition.
pub fn owning_text(batch: RecordBatch) -> FoamResult<RecordBatch> {
    if !batch.columns().iter().any(|c| c.data_type() == &DataType::Utf8View) {
        return Ok(batch);
    }
    let columns: Vec<ArrayRef> = batch
        .columns()
        .iter()
        .map(|c| match c.as_string_view_opt() {
            Some(views) => Arc::new(views.gc()) as ArrayRef,
            None => c.clone(),
        })
        .collect();
    RecordBatch::try_new(batch.schema(), columns).map_err(|e| FoamError::internal(e.to_string()))
}

/// One statement's rows on a node that coordinates it: routes them and
/// commits on every participant, or on none. In a transaction block the rows
/// stay staged for the block's COMMIT.
pub struct TableWriter {
    node: Arc<NodeContext>,
    router: RowRouter,
    transaction: Option<Arc<transaction::Transaction>>,
}

impl TableWriter {
    /// Starts a statement's write; refused at once (57P03) on a node that
    /// seems cut off from the majority, before any row is shipped.
    pub fn begin(node: Arc<NodeContext>, table: TableDef) -> FoamResult<Self> {
        Self::begin_in(node, table, None, None)
    }

    /// Starts a statement's write, as a statement of `transaction` when the
    /// session is in a transaction block, checking each row against the
    /// table's CHECK constraints `checks` (`checks.rs`).
    pub fn begin_in(
        node: Arc<NodeContext>,
        table: TableDef,
        transaction: Option<Arc<transaction::Transaction>>,
        checks: Option<Arc<checks::TableChecks>>,
    ) -> FoamResult<Self> {
        node.catalog.refuse_if_cut_off()?;
        // The decision log hears of the transaction when its commit protocol
        // starts (participants can only be in doubt after Prepare), so a
        // statement dropped before commit leaves nothing "running" behind.
        let (txn, statement) = match &transaction {
            Some(open) => (open.id(), open.statement()),
            None => (uuid::Uuid::new_v4().as_u128(), 0),
        };
        let nodes = node.catalog.current().nodes.clone();
        let router = RowRouter::new(Arc::new(NodeStageTarget(node.clone())), table, nodes, txn).with_statement(statement).with_checks(checks);
        Ok(TableWriter { node, router, transaction })
    }

    pub fn rows(&self) -> u64 {
        self.router.rows()
    }

    pub async fn write(&mut self, batch: RecordBatch) -> FoamResult<()> {
        match self.router.write(batch).await {
            Err(error) => Err(self.noticed(error).await),
            ok => ok,
        }
    }

    /// Rows deleted so far.
    pub fn deleted(&self) -> u64 {
        self.router.deleted()
    }

    /// Deletes whole rows of the table (see `RowRouter::write_deletes`).
    pub async fn write_deletes(&mut self, batch: RecordBatch) -> FoamResult<()> {
        match self.router.write_deletes(batch).await {
            Err(error) => Err(self.noticed(error).await),
            ok => ok,
        }
    }

    /// Ships what is left and commits on every participant. On error nothing is
    /// committed anywhere. In a transaction block, the rows are left staged
    /// and their participants noted for the block's COMMIT.
    pub async fn commit(mut self) -> FoamResult<u64> {
        let txn = self.router.txn();
        let participants = match self.router.finish().await {
            Ok(participants) => participants,
            Err(error) => {
                let participants = self.router.cancel().await;
                abort_transaction(&self.node, txn, &participants).await;
                return Err(self.noticed(error).await);
            }
        };
        if let Some(open) = &self.transaction {
            open.record(self.router.table.id, &participants, self.router.staged());
            // A duplicate key fails the statement now, as in PostgreSQL,
            // not the block's COMMIT (which checks again).
            if self.router.rows() > 0 && !self.router.table.unique_key_columns().is_empty() {
                let nodes: Vec<NodeId> = participants.iter().map(|(node, _)| *node).collect();
                let results = on_participants(&self.node, &nodes, |_| NodeRequest::CheckStagedKeys { txn }).await;
                if let Some(error) = results.into_iter().find_map(|(_, result)| result.err()) {
                    open.discard_statement(&nodes).await;
                    return Err(error);
                }
            }
            return Ok(self.router.rows());
        }
        if let Err(error) = commit_transaction(&self.node, txn, &participants).await {
            return Err(self.noticed(error).await);
        }
        Ok(self.router.rows())
    }

    /// A replica that cannot be reached fails this statement (it may hold a
    /// copy the statement must reach); the failure detector is asked to look
    /// now, so the next statement writes to the surviving replicas.
    async fn noticed(&self, error: FoamError) -> FoamError {
        if let FoamError::NodeUnavailable { .. } = error {
            let _ = self.node.catalog.check_nodes().await;
        }
        error
    }

    /// Abandons the statement on every participant: in a transaction block,
    /// only this statement's rows go, and the block's transaction stays.
    pub async fn abort(mut self) {
        let participants = self.router.cancel().await;
        match &self.transaction {
            Some(open) => open.discard_statement(&participants).await,
            None => abort_transaction(&self.node, self.router.txn(), &participants).await,
        }
    }
}

/// Runs the commit protocol for `txn`, whose rows `participants` have staged
/// (with the row count each was sent), with this node as coordinator: Prepare
/// everywhere, record the decision on a majority of the meta nodes, Commit
/// everywhere. On error before the decision, aborts everywhere. The protocol
/// runs in its own task, so a caller that goes away (a client disconnecting)
/// cannot leave it half done.
pub async fn commit_transaction(node: &Arc<NodeContext>, txn: TxnId, participants: &[(NodeId, u64)]) -> FoamResult<()> {
    let node = node.clone();
    let participants = participants.to_vec();
    tokio::spawn(async move { run_commit_protocol(&node, txn, &participants).await })
        .await
        .map_err(|e| FoamError::internal(format!("commit protocol task failed: {e}")))?
}

async fn run_commit_protocol(node: &Arc<NodeContext>, txn: TxnId, participants: &[(NodeId, u64)]) -> FoamResult<()> {
    node.decisions.begin(txn);
    let result = commit_on_participants(node, txn, participants).await;
    node.decisions.finish(txn);
    result
}

async fn commit_on_participants(node: &Arc<NodeContext>, txn: TxnId, participants: &[(NodeId, u64)]) -> FoamResult<()> {
    let nodes: Vec<NodeId> = participants.iter().map(|(n, _)| *n).collect();
    let rows_of = |target: NodeId| participants.iter().find(|(n, _)| *n == target).map(|(_, r)| *r).unwrap_or(0);
    // Everything up to the decision; any failure on the way aborts everywhere.
    let prepared = async {
        // MVCC (foam_storage::visibility): a timestamp before the prepares,
        // and the commit timestamp (taken with the decision) after all of
        // them, so a snapshot taken before the last prepare never sees the
        // transaction and one taken after waits for it.
        let prepare_ts = node.catalog.timestamp().await?;
        let prepared = on_participants(node, &nodes, |target| NodeRequest::Prepare { txn, rows: rows_of(target), prepare_ts }).await;
        if let Some(error) = prepared.into_iter().find_map(|(_, result)| result.err()) {
            return Err(error);
        }
        // A coordinator that seems cut off from the meta nodes' majority
        // need not wait to be refused: nothing was asked of them yet.
        node.catalog.refuse_if_cut_off()?;
        Ok::<_, FoamError>(prepare_ts)
    };
    let prepare_ts = match prepared.await {
        Ok(ts) => {
            foam_common::failpoint::crash_point("commit.prepared");
            ts
        }
        Err(error) => {
            abort_on(node, txn, &nodes).await;
            return Err(error);
        }
    };
    // The decision is a transaction record in the meta nodes' Raft log, so no
    // participant depends on this node to learn it. A participant that could
    // not reach this node may have settled the transaction as aborted first.
    let decision = match node.catalog.decide_commit(txn, prepare_ts, &nodes).await {
        Ok(decision) => decision,
        // The request may have reached the log before it failed: ask for the
        // outcome, which records ABORT if it did not.
        Err(error) => match node.catalog.settle_txn(txn).await {
            Ok(TxnDecision::Aborted) => {
                abort_on(node, txn, &nodes).await;
                return Err(error);
            }
            Ok(decision) => decision,
            Err(_) => {
                // The participants stay prepared and learn the outcome from
                // the meta nodes once a majority of them is reachable.
                return Err(FoamError::Query {
                    message: format!("the outcome of the commit is unknown: the meta nodes could not be reached to record it ({error})"),
                    sqlstate: foam_common::SqlState::TransactionResolutionUnknown,
                });
            }
        },
    };
    let commit_ts = match decision {
        TxnDecision::Committed(ts) => ts,
        TxnDecision::Aborted => {
            abort_on(node, txn, &nodes).await;
            return Err(FoamError::TransactionAborted {
                message: "a participant could not reach this node while it committed, and settled the transaction as aborted".into(),
            });
        }
    };
    foam_common::failpoint::crash_point("commit.decided");
    // The statement is committed now. A participant that misses this message
    // (it crashed) learns the outcome from the meta nodes when it comes back;
    // the record goes once every participant has its commit record on disk.
    let mut confirmed = Vec::new();
    for (node_id, result) in on_participants(node, &nodes, |_| NodeRequest::Commit { txn, ts: commit_ts }).await {
        match result {
            Ok(()) => confirmed.push(node_id),
            Err(error) => tracing::warn!(txn = %format!("{txn:032x}"), node_id, %error, "commit not delivered; the node will resolve it"),
        }
    }
    if confirmed.len() == nodes.len() {
        node.catalog.forget_txn(txn, None);
    } else {
        for node_id in confirmed {
            node.catalog.forget_txn(txn, Some(node_id));
        }
    }
    Ok(())
}

/// Abandons `txn` on every participant (best effort: a participant that cannot
/// be told discards unprepared rows on its own and resolves prepared ones by
/// asking this node, which answers "aborted").
pub async fn abort_transaction(node: &Arc<NodeContext>, txn: TxnId, participants: &[NodeId]) {
    let node = node.clone();
    let participants = participants.to_vec();
    let _ = tokio::spawn(async move { abort_on(&node, txn, &participants).await }).await;
}

async fn abort_on(node: &Arc<NodeContext>, txn: TxnId, participants: &[NodeId]) {
    for (node_id, result) in on_participants(node, participants, |_| NodeRequest::Abort { txn }).await {
        if let Err(error) = result {
            tracing::warn!(node_id, %error, "abort not delivered");
        }
    }
}

/// Sends one request to every participant at once.
pub(crate) async fn on_participants(
    node: &Arc<NodeContext>,
    participants: &[NodeId],
    request: impl Fn(NodeId) -> NodeRequest,
) -> Vec<(NodeId, FoamResult<()>)> {
    let mut calls = JoinSet::new();
    for participant in participants {
        let node = node.clone();
        let request = request(*participant);
        let participant = *participant;
        calls.spawn(async move {
            let result = if participant == node.node_id {
                local_request(&node, request).await
            } else {
                match node.client_for(participant) {
                    Ok(client) => client.call(&request, &[]).await.map(|_| ()),
                    Err(error) => Err(error),
                }
            };
            (participant, result)
        });
    }
    let mut results = Vec::new();
    while let Some(joined) = calls.join_next().await {
        match joined {
            Ok(result) => results.push(result),
            Err(error) => results.push((0, Err(FoamError::internal(error.to_string())))),
        }
    }
    results
}

/// Runs a transaction request against this node's own storage.
async fn local_request(node: &Arc<NodeContext>, request: NodeRequest) -> FoamResult<()> {
    let storage = node.storage.clone();
    // The unique keys to check come from the catalog: one that does not
    // know a table yet (created a moment ago) is brought up to date first.
    if let NodeRequest::Prepare { txn, .. } = &request
        && storage.staged_tables(*txn).iter().any(|t| node.catalog.current().table_by_id(*t).is_none())
    {
        node.catalog.refresh().await?;
    }
    // Read when the engine checks, under its WAL lock, not before: a key
    // being added (`keys.rs`) is then checked by every prepare that
    // registers after this node's catalog gained it.
    let catalog = node.catalog.clone();
    tokio::task::spawn_blocking(move || match request {
        NodeRequest::Prepare { txn, rows, prepare_ts } => {
            storage.prepare(txn, rows, prepare_ts, &|table_id| unique_keys(&catalog.current(), table_id))
        }
        NodeRequest::Commit { txn, ts } => storage.commit(txn, ts),
        NodeRequest::Abort { txn } => storage.abort(txn),
        NodeRequest::KeepAlive { txn } => {
            storage.touch(txn);
            Ok(())
        }
        NodeRequest::RollbackStatements { txn, after } => {
            storage.rollback_statements(txn, after);
            Ok(())
        }
        NodeRequest::CheckStagedKeys { txn } => storage.check_staged_keys(txn, &|table_id| unique_keys(&catalog.current(), table_id)),
        other => Err(StorageError::internal(format!("not a transaction request: {other:?}"))),
    })
    .await
    .map_err(|e| FoamError::internal(e.to_string()))?
    .map_err(FoamError::from)
}

/// The unique keys of table `table_id` in `catalog`, as storage checks them.
fn unique_keys(catalog: &foam_catalog::Catalog, table_id: foam_common::TableId) -> Vec<foam_storage::unique::UniqueKey> {
    let Some(table) = catalog.table_by_id(table_id) else { return Vec::new() };
    table
        .unique_key_columns()
        .into_iter()
        .map(|(name, columns, column_names)| foam_storage::unique::UniqueKey { name, columns, column_names })
        .collect()
}

/// Applies a transaction request from a coordinator to this node's storage; the
/// node's RPC handler calls this for Stage/Prepare/Commit/Abort/KeepAlive.
pub async fn handle_participant_request(node: &Arc<NodeContext>, request: NodeRequest, payload: bytes::Bytes) -> FoamResult<NodeResponse> {
    match request {
        NodeRequest::Stage { txn, coordinator, table_id, partition, placement_version, statement, delete } => {
            let storage = node.storage.clone();
            tokio::task::spawn_blocking(move || {
                let batches = foam_storage::ipc::decode_batches(&payload)?;
                stage_on(&storage, txn, coordinator, (table_id, partition), placement_version, statement, delete, batches)
            })
            .await
            .map_err(|e| FoamError::internal(e.to_string()))??;
        }
        other => local_request(node, other).await?,
    }
    Ok(NodeResponse::Ok)
}

/// Receives one segment file a bulk loader streams to this node for a
/// partition of `txn`: each piece is written to the staging directory as it
/// comes, and the whole file is checked against the trailer (checksums, the
/// table's columns, the row count) before it is staged. A stream that breaks
/// off, ends without its trailer, or fails a check leaves nothing behind.
pub async fn receive_segment(
    node: &Arc<NodeContext>,
    txn: TxnId,
    coordinator: NodeId,
    (table_id, partition): (TableId, PartitionId),
    placement_version: u64,
    mut parts: futures::stream::BoxStream<'static, FoamResult<foam_rpc::SegmentPart>>,
) -> FoamResult<()> {
    let schema = node
        .table_by_id(table_id)
        .await?
        .map(|t| t.arrow_schema())
        .ok_or_else(|| FoamError::TransactionAborted { message: format!("table {table_id} does not exist") })?;
    let storage = node.storage.clone();
    let blocking = |e: tokio::task::JoinError| FoamError::internal(e.to_string());
    let mut received = tokio::task::spawn_blocking(move || storage.receive_segment(txn, coordinator, table_id, partition, placement_version))
        .await
        .map_err(blocking)??;
    while let Some(part) = parts.next().await {
        match part? {
            foam_rpc::SegmentPart::Chunk(bytes) => {
                received = tokio::task::spawn_blocking(move || received.append(&bytes).map(|_| received)).await.map_err(blocking)??;
            }
            foam_rpc::SegmentPart::End(trailer) => {
                let checksums = foam_storage::segment::Checksums { crc32: Some(trailer.crc32), blocks: trailer.block_crc32 };
                let storage = node.storage.clone();
                return Ok(tokio::task::spawn_blocking(move || storage.stage_received(received, trailer.rows, &checksums, &schema))
                    .await
                    .map_err(blocking)??);
            }
        }
    }
    Err(FoamError::InvalidParameter { message: "malformed segment stream: it ended before its trailer".into() })
}

/// INSERT's sink: DataFusion hands it the statement's rows.
pub struct FoamSink {
    table: TableDef,
    schema: SchemaRef,
    node: Arc<NodeContext>,
}

impl FoamSink {
    pub fn new(table: TableDef, node: Arc<NodeContext>) -> Self {
        // All-nullable on purpose: DataFusion's own NOT NULL check names the
        // input's columns (`column1`), TableWriter names the table's.
        let fields: Vec<_> = table.arrow_schema().fields().iter().map(|f| f.as_ref().clone().with_nullable(true)).collect();
        let schema = Arc::new(arrow::datatypes::Schema::new(fields));
        FoamSink { table, schema, node }
    }
}

impl fmt::Debug for FoamSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FoamSink({})", self.table.name)
    }
}

impl DisplayAs for FoamSink {
    fn fmt_as(&self, _format: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "FoamSink: table={}", self.table.name)
    }
}

#[async_trait]
impl DataSink for FoamSink {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    async fn write_all(&self, mut data: SendableRecordBatchStream, context: &Arc<TaskContext>) -> DfResult<u64> {
        let open = transaction::OpenTransaction::of(context.session_config());
        let checks = checks::StatementChecks::of(context.session_config(), &self.table);
        let mut writer = TableWriter::begin_in(self.node.clone(), self.table.clone(), open, checks)?;
        while let Some(batch) = data.next().await {
            // DataFusion 55 may plan an INSERT's SELECT with a column wider
            // than the table's (a CASE of INT and BIGINT, typed before
            // coercion): its values are cast as PostgreSQL's assignment does.
            let written = match batch.map_err(FoamError::from).and_then(|batch| cast_to(&self.schema, batch)) {
                Ok(batch) => writer.write(batch).await,
                Err(error) => Err(error),
            };
            if let Err(error) = written {
                writer.abort().await;
                return Err(error.into());
            }
        }
        Ok(writer.commit().await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::StringViewArray;
    use arrow::datatypes::{Field, Schema};

    #[test]
    fn rows_split_off_a_batch_own_their_text() {
        let texts: Vec<String> = (0..1000).map(|i| format!("a text longer than twelve bytes, row {i}")).collect();
        let schema = Arc::new(Schema::new(vec![Field::new("t", DataType::Utf8View, false)]));
        let batch = RecordBatch::try_new(schema, vec![Arc::new(StringViewArray::from_iter_values(texts.iter()))]).unwrap();
        let buffer_bytes = |b: &RecordBatch| b.column(0).as_string_view().data_buffers().iter().map(|d| d.len()).sum::<usize>();
        let two = take_record_batch(&batch, &UInt32Array::from(vec![3, 700])).unwrap();
        assert!(buffer_bytes(&two) > 30_000, "two rows taken keep the whole buffer: {}", buffer_bytes(&two));
        let owned = owning_text(two.clone()).unwrap();
        assert_eq!(owned, two);
        assert!(buffer_bytes(&owned) <= texts[3].len() + texts[700].len(), "{}", buffer_bytes(&owned));
    }
}
