//! A transaction block's writes: one transaction kept open across statements.
//!
//! ```text
//!  BEGIN ──▶ Transaction{txn} in the session's OpenTransaction slot
//!  statement n: INSERT / COPY ──▶ Stage{txn, statement n} on every live copy (no commit)
//!               SELECT        ──▶ committed rows + rows staged by statements < n (OwnWrites),
//!                                 read from a copy that got them all and still holds
//!                                 as many as were sent (else 40001: a restart lost them)
//!  COMMIT   ──▶ commit_transaction over every statement's participants (2PC, as one statement's)
//!  ROLLBACK, an error, the connection closing ──▶ Abort on every participant
//! ```
//! `SAVEPOINT` names the statement it is; `ROLLBACK TO` it has every
//! participant discard what later statements staged (`RollbackStatements`).
//!
//! Participants discard staged rows that stay idle for `TXN_IDLE_TIMEOUT_MS`
//! (a coordinator that died); while the block is open its coordinator tells
//! them every `TXN_KEEPALIVE_MS` that it still holds them.

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, Weak};

use datafusion::prelude::SessionConfig;
use foam_common::limits::TXN_KEEPALIVE_MS;
use foam_common::{FoamResult, NodeId, PartitionId, TableId, TxnId};
use foam_rpc::NodeRequest;
use foam_storage::{OwnWrites, StatementNumber};

use crate::context::NodeContext;
use crate::write::StagedPartition;

/// One transaction block's transaction, from BEGIN to COMMIT or ROLLBACK.
pub struct Transaction {
    node: Arc<NodeContext>,
    txn: TxnId,
    /// The statement running now; statements are numbered from 1.
    statement: AtomicU32,
    writes: Mutex<Writes>,
    /// The block's isolation: REPEATABLE READ keeps its first statement's
    /// snapshot for every statement; READ COMMITTED takes one per statement.
    isolation: Mutex<Isolation>,
}

#[derive(Default)]
struct Isolation {
    repeatable_read: bool,
    /// The first statement's snapshot.
    snapshot: Option<u64>,
}

#[derive(Default)]
struct Writes {
    /// What each statement staged; prepare checks the sums of rows per node.
    by_statement: BTreeMap<StatementNumber, StatementWrites>,
    /// Every node any statement sent rows to, rolled back or not.
    nodes: BTreeSet<NodeId>,
    /// Savepoints, oldest first, with the statement each one is.
    savepoints: Vec<(String, StatementNumber)>,
    /// Tables some statement wrote: their scans read the staged rows too.
    tables: BTreeSet<TableId>,
    keepalive: Option<tokio::task::AbortHandle>,
    /// Committed or aborted: nothing is left to abort when dropped.
    ended: bool,
}

/// What one statement of the block staged.
#[derive(Default)]
struct StatementWrites {
    /// Rows sent to each participant.
    nodes: BTreeMap<NodeId, u64>,
    /// Per partition written, what each of the statement's writers staged.
    partitions: BTreeMap<(TableId, PartitionId), Vec<StagedPartition>>,
}

/// What a scan by the running statement reads of the block's own writes.
#[derive(Debug, Clone)]
pub struct OwnReads {
    pub own: OwnWrites,
    /// Per partition the block's earlier statements staged rows for: how many
    /// (a copy read must hold exactly these), and the copies that got all.
    pub partitions: BTreeMap<PartitionId, StagedPartition>,
}

impl Transaction {
    pub fn begin(node: Arc<NodeContext>) -> Arc<Self> {
        Arc::new(Transaction {
            node,
            txn: uuid::Uuid::new_v4().as_u128(),
            statement: AtomicU32::new(0),
            writes: Mutex::default(),
            isolation: Mutex::default(),
        })
    }

    fn isolation(&self) -> std::sync::MutexGuard<'_, Isolation> {
        self.isolation.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sets the block's isolation; only before its first statement took a
    /// snapshot (25001 after, as PostgreSQL's SET TRANSACTION).
    pub fn set_repeatable_read(&self, repeatable_read: bool) -> FoamResult<()> {
        let mut isolation = self.isolation();
        if isolation.snapshot.is_some() && isolation.repeatable_read != repeatable_read {
            return Err(foam_common::FoamError::Query {
                message: "SET TRANSACTION ISOLATION LEVEL must be called before any query".into(),
                sqlstate: foam_common::SqlState::ActiveSqlTransaction,
            });
        }
        isolation.repeatable_read = repeatable_read;
        Ok(())
    }

    pub fn repeatable_read(&self) -> bool {
        self.isolation().repeatable_read
    }

    /// The snapshot the running statement reads at: under REPEATABLE READ
    /// the first statement's, else `fresh` (which the first statement keeps).
    pub fn statement_snapshot(&self, fresh: u64) -> u64 {
        let mut isolation = self.isolation();
        match isolation.snapshot {
            Some(kept) if isolation.repeatable_read => kept,
            _ => {
                isolation.snapshot.get_or_insert(fresh);
                fresh
            }
        }
    }

    /// The snapshot every statement reads at, once REPEATABLE READ has one.
    pub fn kept_snapshot(&self) -> Option<u64> {
        let isolation = self.isolation();
        isolation.snapshot.filter(|_| isolation.repeatable_read)
    }

    pub fn id(&self) -> TxnId {
        self.txn
    }

    /// Numbers the statement about to run.
    pub fn next_statement(&self) -> StatementNumber {
        self.statement.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// The statement running now.
    pub fn statement(&self) -> StatementNumber {
        self.statement.load(Ordering::SeqCst)
    }

    fn writes(&self) -> std::sync::MutexGuard<'_, Writes> {
        self.writes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What a scan of `table` by the running statement reads besides the
    /// committed rows: `None` when no statement of the block wrote it.
    pub fn own_writes(&self, table: TableId) -> Option<OwnReads> {
        let before = self.statement();
        let writes = self.writes();
        if !writes.tables.contains(&table) {
            return None;
        }
        let mut partitions: BTreeMap<PartitionId, StagedPartition> = BTreeMap::new();
        for (_, statement) in writes.by_statement.range(..before) {
            for ((_, partition), staged) in statement.partitions.range((table, 0)..=(table, PartitionId::MAX)) {
                for one in staged {
                    match partitions.entry(*partition) {
                        Entry::Vacant(first) => {
                            first.insert(one.clone());
                        }
                        Entry::Occupied(mut all) => {
                            let all = all.get_mut();
                            all.rows += one.rows;
                            all.copies.retain(|copy| one.copies.contains(copy));
                        }
                    }
                }
            }
        }
        Some(OwnReads { own: OwnWrites { txn: self.txn, before }, partitions })
    }

    /// Notes that the running statement staged rows of `table` on
    /// `participants` (with the rows each was sent), `staged` per partition.
    pub fn record(self: &Arc<Self>, table: TableId, participants: &[(NodeId, u64)], staged: &BTreeMap<PartitionId, StagedPartition>) {
        let statement = self.statement();
        let mut writes = self.writes();
        writes.tables.insert(table);
        let this = writes.by_statement.entry(statement).or_default();
        for (node, rows) in participants {
            *this.nodes.entry(*node).or_default() += rows;
        }
        for (partition, partition_staged) in staged {
            this.partitions.entry((table, *partition)).or_default().push(partition_staged.clone());
        }
        writes.nodes.extend(participants.iter().map(|(node, _)| *node));
        if writes.keepalive.is_none() && !participants.is_empty() {
            writes.keepalive = Some(tokio::spawn(keep_alive(Arc::downgrade(self))).abort_handle());
        }
    }

    /// Commits every statement's rows everywhere, or (on error) nowhere.
    pub async fn commit(&self) -> FoamResult<()> {
        let Some(participants) = self.end() else {
            return Err(foam_common::FoamError::TransactionAborted { message: "the transaction block was already ended".into() });
        };
        if participants.is_empty() {
            return Ok(());
        }
        crate::write::commit_transaction(&self.node, self.txn, &participants).await
    }

    /// Discards every statement's rows everywhere (best effort: a participant
    /// that is not told discards them when they have been idle long enough).
    pub async fn abort(&self) {
        if let Some(nodes) = self.end_for_abort() {
            crate::write::abort_transaction(&self.node, self.txn, &nodes).await;
        }
    }

    /// Ends the transaction; the nodes to tell to discard its rows, if any.
    fn end_for_abort(&self) -> Option<Vec<NodeId>> {
        let nodes: Vec<NodeId> = self.end()?.into_iter().map(|(node, _)| node).collect();
        (!nodes.is_empty()).then_some(nodes)
    }

    /// Marks the transaction ended and stops its keep-alive; every node it
    /// sent rows to, with the rows its statements not rolled back sent there
    /// (prepare checks them), or `None` if it had ended already.
    fn end(&self) -> Option<Vec<(NodeId, u64)>> {
        let mut writes = self.writes();
        if std::mem::replace(&mut writes.ended, true) {
            return None;
        }
        if let Some(keepalive) = writes.keepalive.take() {
            keepalive.abort();
        }
        let mut sums: BTreeMap<NodeId, u64> = writes.nodes.iter().map(|n| (*n, 0)).collect();
        for (node, rows) in writes.by_statement.values().flat_map(|statement| &statement.nodes) {
            *sums.entry(*node).or_default() += rows;
        }
        Some(sums.into_iter().collect())
    }

    fn participant_ids(&self) -> Vec<NodeId> {
        self.writes().nodes.iter().copied().collect()
    }

    /// `SAVEPOINT name`, which is the running statement.
    pub fn savepoint(&self, name: &str) {
        let statement = self.statement();
        self.writes().savepoints.push((name.to_string(), statement));
    }

    /// Whether the block has a savepoint to roll back to after an error.
    pub fn has_savepoints(&self) -> bool {
        !self.writes().savepoints.is_empty()
    }

    /// `RELEASE SAVEPOINT name`: forgets it and every later one.
    pub fn release(&self, name: &str) -> FoamResult<()> {
        let mut writes = self.writes();
        let at = find_savepoint(&writes.savepoints, name)?;
        writes.savepoints.truncate(at);
        Ok(())
    }

    /// `ROLLBACK TO SAVEPOINT name`: every participant discards what the
    /// statements after it staged; it stays, later savepoints go.
    pub async fn rollback_to(&self, name: &str) -> FoamResult<()> {
        let (after, nodes) = {
            let mut writes = self.writes();
            let at = find_savepoint(&writes.savepoints, name)?;
            let after = writes.savepoints[at].1;
            writes.savepoints.truncate(at + 1);
            writes.by_statement.retain(|statement, _| *statement <= after);
            (after, writes.nodes.iter().copied().collect::<Vec<_>>())
        };
        self.rollback_statements(after, &nodes).await
    }

    /// A statement of the block failed: `nodes` discard what it staged. One
    /// that is not told holds more rows than the coordinator counts and so
    /// votes no at COMMIT: the block can then only fail, never commit them.
    pub async fn discard_statement(&self, nodes: &[NodeId]) {
        let statement = self.statement();
        self.writes().by_statement.remove(&statement);
        if let Err(error) = self.rollback_statements(statement.saturating_sub(1), nodes).await {
            tracing::warn!(%error, "a failed statement's rows were not discarded everywhere; the block cannot commit");
        }
    }

    async fn rollback_statements(&self, after: StatementNumber, nodes: &[NodeId]) -> FoamResult<()> {
        let txn = self.txn;
        for (_, result) in crate::write::on_participants(&self.node, nodes, |_| NodeRequest::RollbackStatements { txn, after }).await {
            result?;
        }
        Ok(())
    }
}

impl Drop for Transaction {
    /// A block its connection left open is rolled back.
    fn drop(&mut self) {
        let Some(participants) = self.end_for_abort() else { return };
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let (node, txn) = (self.node.clone(), self.txn);
            runtime.spawn(async move { crate::write::abort_transaction(&node, txn, &participants).await });
        }
    }
}

/// Tells the participants of an open transaction block, every
/// `TXN_KEEPALIVE_MS`, that its coordinator still holds it; stops when the
/// transaction ends.
async fn keep_alive(transaction: Weak<Transaction>) {
    loop {
        tokio::time::sleep(std::time::Duration::from_millis(TXN_KEEPALIVE_MS)).await;
        let Some(transaction) = transaction.upgrade() else { return };
        let (node, txn, participants) = (transaction.node.clone(), transaction.txn, transaction.participant_ids());
        drop(transaction);
        for (node_id, result) in crate::write::on_participants(&node, &participants, |_| NodeRequest::KeepAlive { txn }).await {
            if let Err(error) = result {
                tracing::debug!(node_id, %error, "keep-alive not delivered");
            }
        }
    }
}

fn find_savepoint(savepoints: &[(String, StatementNumber)], name: &str) -> FoamResult<usize> {
    savepoints.iter().rposition(|(n, _)| n == name).ok_or_else(|| foam_common::FoamError::Query {
        message: format!("savepoint \"{name}\" does not exist"),
        sqlstate: foam_common::SqlState::InvalidSavepointSpecification,
    })
}

/// The snapshot (MVCC) the session's running statement reads at: a session
/// config extension the session sets before each statement and clears after,
/// so table scans planned for it read that snapshot (the newest rows when
/// none is set).
#[derive(Default)]
pub struct ReadSnapshot(Mutex<Option<u64>>);

impl ReadSnapshot {
    pub fn of(config: &SessionConfig) -> Option<u64> {
        config.get_extension::<ReadSnapshot>().and_then(|slot| *slot.0.lock().unwrap_or_else(|p| p.into_inner()))
    }

    pub fn set(&self, ts: Option<u64>) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = ts;
    }
}

/// The session's open transaction block, if any: a session config extension,
/// so the INSERT sink and table scans of the session's statements find it.
#[derive(Default)]
pub struct OpenTransaction(Mutex<Option<Arc<Transaction>>>);

impl OpenTransaction {
    /// The transaction open in the session `config` belongs to.
    pub fn of(config: &SessionConfig) -> Option<Arc<Transaction>> {
        config.get_extension::<OpenTransaction>().and_then(|slot| slot.get())
    }

    pub fn get(&self) -> Option<Arc<Transaction>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn set(&self, transaction: Option<Arc<Transaction>>) -> Option<Arc<Transaction>> {
        std::mem::replace(&mut *self.0.lock().unwrap_or_else(|p| p.into_inner()), transaction)
    }
}
