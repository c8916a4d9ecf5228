//! The storage engine of one node and the participant side of two-phase commit.
//!
//! A statement's rows arrive with [`StorageEngine::stage`], become durable with
//! [`StorageEngine::prepare`] and visible with [`StorageEngine::commit`]; a
//! transaction that is aborted, or never prepared before a crash, leaves no trace.
//! Lock order: `wal` before `partitions` before a single partition.

use crate::error::{StorageError, StorageResult};
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use arrow::record_batch::RecordBatch;
use foam_common::limits::{
    BATCH_ROWS, RECEIVED_SEGMENT_BYTES_MAX, STAGE_DELETE_BYTES_PER_TXN_MAX, STAGE_INLINE_BYTES_MAX, STAGE_INLINE_BYTES_PER_TXN_MAX,
    SNAPSHOT_WAIT_MS_MAX, TXN_IDLE_TIMEOUT_MS, WAL_CHECKPOINT_BYTES,
};
use foam_common::{NodeId, PartitionId, TableId, TxnId};
use parquet::arrow::ArrowWriter;
use serde::{Deserialize, Serialize};

use crate::deletions::{DeletedRows, RowHome};
use crate::ipc;
use crate::key_index::KeyProbe;
use crate::partition::{Partition, PartitionSnapshot, SegmentInfo, locate_in_file};
use crate::row_set::{RowDigest, RowDigester, RowSet};
use crate::segment;
use crate::unique::{self, UniqueKey};
use crate::visibility::VisibilityGate;
use crate::wal::{EntryData, PreparedEntry, Wal, WalHeader};

type PartitionKey = (TableId, PartitionId);

/// A Prepare record's decoded rows, per entry (`None` for a staged segment's).
type EntryRows = Vec<Option<Vec<RecordBatch>>>;

/// The partitions a prepared transaction's entries write.
fn entry_partitions(entries: &[PreparedEntry]) -> Vec<PartitionKey> {
    entries.iter().map(|e| (e.table_id, e.partition)).collect()
}

/// Exit code of a node that stopped because only WAL replay can repair its state.
const EXIT_CODE_REPLAY_NEEDED: i32 = 75;

#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct PartitionStats {
    pub rows: u64,
    pub bytes: u64,
}

pub struct StorageEngine {
    tables_dir: PathBuf,
    staging_dir: PathBuf,
    wal: Mutex<Wal>,
    partitions: Mutex<HashMap<PartitionKey, Arc<Mutex<Partition>>>>,
    staging: Mutex<HashMap<TxnId, Arc<Mutex<Staging>>>>,
    prepared: Mutex<HashMap<TxnId, Prepared>>,
    dropped_tables: Mutex<HashSet<TableId>>,
    /// Write fences: per partition, the oldest placement version a writer may
    /// have planned with ([`WRITES_FENCED`] while a replica is being switched
    /// in). Checked at prepare under the WAL lock, which is also taken to
    /// raise a fence, so no prepare slips past one.
    fences: Mutex<HashMap<PartitionKey, u64>>,
    /// Per partition, the oldest placement version a writer may have planned
    /// with whatever the fence says: raised when a CHECK constraint is added
    /// (`raise_write_fence`), never lowered, so a catch-up that restores its
    /// fence to an older version cannot let writes planned before the
    /// constraint through.
    fence_floors: Mutex<HashMap<PartitionKey, u64>>,
    /// Prepared transactions that reads and commits wait for (MVCC order).
    gate: VisibilityGate,
}

/// What a read at a snapshot finds right now.
pub enum SnapshotRead {
    /// The partition's rows as of the snapshot, or `None` when this node
    /// stores nothing of it.
    Ready(Option<PartitionSnapshot>),
    /// A transaction that may commit at or below the snapshot is still
    /// undecided or unapplied here: wait (`snapshot_at`) and read then.
    Wait,
}

/// Fence value refusing every write to a partition.
pub const WRITES_FENCED: u64 = u64::MAX;

/// Rows of an unprepared transaction, kept until prepare or abort.
struct Staging {
    coordinator: NodeId,
    last_activity: Instant,
    /// Set when the transaction prepares (or is discarded): no more rows.
    closed: bool,
    partitions: HashMap<PartitionKey, StagedPartition>,
    /// Memory held by the deleted rows of every partition, kept as they
    /// come so each batch's check against the limit costs nothing.
    delete_bytes: usize,
}

impl Staging {
    fn refuse_if_closed(&self, txn: TxnId) -> StorageResult<()> {
        if self.closed {
            return Err(StorageError::TransactionEnded { message: format!("transaction {txn:032x} got rows after it prepared or ended here") });
        }
        Ok(())
    }

    /// Notes activity on the transaction and returns what it staged for one
    /// partition so far, created on its first rows.
    fn partition(&mut self, key: PartitionKey, placement_version: u64) -> &mut StagedPartition {
        self.last_activity = Instant::now();
        self.partitions.entry(key).or_insert_with(|| StagedPartition::new(placement_version))
    }
}

struct StagedPartition {
    /// Placement version of the partition the coordinator routed with.
    placement_version: u64,
    /// Rows held in memory, each batch with the statement that wrote it.
    batches: Vec<(StatementNumber, RecordBatch)>,
    batch_bytes: usize,
    /// Rows staged, in `batches`, `file` and `files` together.
    rows: u64,
    /// The staged segment file being written, once the rows outgrew
    /// [`STAGE_INLINE_BYTES_MAX`]; it holds rows of one statement only.
    file: Option<OpenStagedFile>,
    /// Finished staged segment files: rows an earlier statement spilled, and
    /// whole segments a bulk loader built; already durable.
    files: Vec<StagedFile>,
    /// Whole rows to delete (DELETE, and UPDATE's old rows), each batch with
    /// the statement that named them; counted in `rows`.
    deletes: Vec<(StatementNumber, RecordBatch)>,
}

impl StagedPartition {
    fn new(placement_version: u64) -> Self {
        StagedPartition { placement_version, batches: Vec::new(), batch_bytes: 0, rows: 0, file: None, files: Vec::new(), deletes: Vec::new() }
    }
}

/// Which statement of a transaction staged some rows: a transaction block
/// numbers its statements from 1, and a statement reads back only the rows of
/// the statements before it (so `INSERT INTO t SELECT * FROM t` never reads
/// its own output). A transaction of one statement stages as statement 0.
pub type StatementNumber = u32;

/// Which of a transaction's staged rows a scan sees besides the committed
/// ones: those of statements before `before`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnWrites {
    pub txn: TxnId,
    pub before: StatementNumber,
}

struct OpenStagedFile {
    statement: StatementNumber,
    file_name: String,
    writer: ArrowWriter<File>,
    rows: u64,
}

struct StagedFile {
    statement: StatementNumber,
    file_name: String,
    rows: u64,
    sum: segment::SegmentSum,
}

/// Joins runs of small batches into batches of up to [`BATCH_ROWS`] rows,
/// copying each of their rows once; batches of at least half that pass as
/// they are. A writer splits every batch it routes across all partitions, so
/// one partition's share of it is small (512 rows of an 8192-row batch over 16
/// partitions); kept so, they would stay small in the WAL and the memtable,
/// and every later scan of the partition would pay per-batch costs on them.
fn coalesce_small(batches: Vec<RecordBatch>) -> StorageResult<Vec<RecordBatch>> {
    let mut out = Vec::with_capacity(batches.len());
    let mut run: Vec<RecordBatch> = Vec::new();
    let mut run_rows = 0;
    let flush = |run: &mut Vec<RecordBatch>, out: &mut Vec<RecordBatch>| -> StorageResult<()> {
        match run.len() {
            0 => {}
            1 => out.extend(run.drain(..)),
            _ => {
                out.push(arrow::compute::concat_batches(&run[0].schema(), run.iter()).map_err(|e| StorageError::internal(format!("joining staged batches: {e}")))?);
                run.clear();
            }
        }
        Ok(())
    };
    for batch in batches {
        let rows = batch.num_rows();
        if rows == 0 {
            continue;
        }
        if rows >= BATCH_ROWS / 2 {
            flush(&mut run, &mut out)?;
            run_rows = 0;
            out.push(batch);
            continue;
        }
        if run_rows + rows > BATCH_ROWS {
            flush(&mut run, &mut out)?;
            run_rows = 0;
        }
        run_rows += rows;
        run.push(batch);
    }
    flush(&mut run, &mut out)?;
    Ok(out)
}

/// A partition's former segment files, kept aside during a catch-up (see
/// [`StorageEngine::set_aside_segments`]). What is not taken is deleted when
/// it is dropped, and a crash leaves nothing behind either: the staging
/// directory is emptied of unreferenced files at start-up.
pub struct SetAside {
    files: Vec<(SegmentInfo, PathBuf)>,
}

impl SetAside {
    /// The kept file with the content `wanted` lists, taken out of the set.
    /// [`StorageEngine::install_segment`] checks the file against every
    /// checksum before it is used, so a damaged one is refused there.
    pub fn take_matching(&mut self, wanted: &SegmentInfo) -> Option<PathBuf> {
        let found = self.files.iter().position(|(info, _)| info.same_content(wanted))?;
        Some(self.files.swap_remove(found).1)
    }
}

impl Drop for SetAside {
    fn drop(&mut self) {
        for (_, path) in &self.files {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// A segment file a bulk loader is streaming to this node (see
/// [`StorageEngine::receive_segment`]); deleted if dropped before it is staged.
pub struct ReceivingSegment {
    file: File,
    path: PathBuf,
    file_name: String,
    sum: segment::SumBuilder,
    staged: bool,
    txn: TxnId,
    coordinator: NodeId,
    key: PartitionKey,
    placement_version: u64,
}

impl ReceivingSegment {
    /// Appends the next bytes of the file. A stream longer than
    /// [`RECEIVED_SEGMENT_BYTES_MAX`] is refused rather than allowed to fill the disk.
    pub fn append(&mut self, bytes: &[u8]) -> StorageResult<()> {
        if self.sum.bytes() + bytes.len() as u64 > RECEIVED_SEGMENT_BYTES_MAX {
            return Err(StorageError::InvalidRequest {
                message: format!("a loaded segment may hold at most {RECEIVED_SEGMENT_BYTES_MAX} bytes; {} is longer", self.file_name),
            });
        }
        std::io::Write::write_all(&mut self.file, bytes).map_err(|e| StorageError::io(&self.path, e))?;
        self.sum.update(bytes);
        Ok(())
    }
}

impl Drop for ReceivingSegment {
    fn drop(&mut self) {
        if !self.staged {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// A transaction that is durable here and waits for its outcome.
struct Prepared {
    coordinator: NodeId,
    header: WalHeader,
    body: Vec<u8>,
    /// Decoded inline rows, per entry (None for segment entries).
    inline: Vec<Option<Vec<RecordBatch>>>,
    /// The unique keys of its tables when it prepared (none after a
    /// restart): commit finds deleted rows through the first one's index.
    keys: HashMap<TableId, Vec<UniqueKey>>,
}

impl StorageEngine {
    /// Opens (or creates) the engine under `data_dir` and replays its WAL.
    pub fn open(data_dir: &Path) -> StorageResult<Self> {
        let tables_dir = data_dir.join("tables");
        let staging_dir = data_dir.join("staging");
        foam_common::fs::create_dir_all(&tables_dir)?;
        foam_common::fs::create_dir_all(&staging_dir)?;
        let (wal, records) = Wal::open(&data_dir.join("wal"))?;
        let engine = StorageEngine {
            tables_dir,
            staging_dir,
            wal: Mutex::new(wal),
            partitions: Mutex::new(HashMap::new()),
            staging: Mutex::new(HashMap::new()),
            prepared: Mutex::new(HashMap::new()),
            dropped_tables: Mutex::new(HashSet::new()),
            fences: Mutex::new(HashMap::new()),
            fence_floors: Mutex::new(HashMap::new()),
            gate: VisibilityGate::default(),
        };
        engine.load_partitions()?;
        // A table dropped later in the log must not have earlier commits
        // re-applied (its files are gone); table ids are never reused.
        // Likewise a copy of a partition removed later in the log: its
        // directory, with the segments its earlier commits installed, is gone.
        let mut removed_at: HashMap<(TableId, PartitionId), u64> = HashMap::new();
        for record in &records {
            match record.header {
                WalHeader::DropTable { table_id } => {
                    lock(&engine.dropped_tables).insert(table_id);
                }
                WalHeader::DropPartition { table_id, partition } => {
                    removed_at.insert((table_id, partition), record.lsn);
                }
                _ => {}
            }
        }
        let replayed = records.len();
        for record in records {
            match record.header {
                WalHeader::Prepare { txn, coordinator, prepare_ts, ref entries } => {
                    engine.gate.prepared(txn, entry_partitions(entries), prepare_ts);
                    let prepared = engine.decode_prepared(coordinator, record.header, record.body)?;
                    lock(&engine.prepared).insert(txn, prepared);
                }
                WalHeader::Commit { txn, ts, deleted } => {
                    let prepared = lock(&engine.prepared).remove(&txn);
                    if let Some(prepared) = prepared {
                        let (inline, deleted) = engine.resolve(&prepared, deleted)?;
                        // No flush or compaction while replaying: later
                        // records name the files and batches of this moment.
                        engine.apply(record.lsn, ts, &prepared.header, inline, &deleted, &removed_at, false)?;
                    }
                    engine.gate.done(txn);
                }
                WalHeader::Abort { txn } => {
                    let prepared = lock(&engine.prepared).remove(&txn);
                    if let Some(prepared) = prepared {
                        engine.discard_segments(&prepared.header);
                    }
                    engine.gate.done(txn);
                }
                WalHeader::DropTable { table_id } => engine.forget_table(table_id)?,
                WalHeader::DropPartition { table_id, partition } => {
                    // A copy made again after the drop (its reset is newer) stays.
                    let existing = lock(&engine.partitions).get(&(table_id, partition)).cloned();
                    if existing.is_none_or(|p| lock(&p).applied_lsn() < record.lsn) {
                        engine.forget_partition(table_id, partition)?;
                    }
                }
            }
        }
        engine.remove_orphan_staging_files()?;
        let in_doubt = lock(&engine.prepared).len();
        tracing::info!(replayed, in_doubt, "storage engine opened");
        Ok(engine)
    }

    /// Buffers rows of a transaction of one statement for one partition,
    /// routed with the partition's `placement_version`. Rows must have the
    /// table's schema.
    pub fn stage(
        &self,
        txn: TxnId,
        coordinator: NodeId,
        table_id: TableId,
        partition: PartitionId,
        placement_version: u64,
        batches: Vec<RecordBatch>,
    ) -> StorageResult<()> {
        self.stage_statement(txn, coordinator, (table_id, partition), placement_version, 0, batches)
    }

    /// Buffers rows that `statement` of `txn` wrote to one partition.
    pub fn stage_statement(
        &self,
        txn: TxnId,
        coordinator: NodeId,
        (table_id, partition): PartitionKey,
        placement_version: u64,
        statement: StatementNumber,
        batches: Vec<RecordBatch>,
    ) -> StorageResult<()> {
        let staging = self.staging_of(txn, coordinator);
        let mut staging = lock(&staging);
        staging.refuse_if_closed(txn)?;
        let staged = staging.partition((table_id, partition), placement_version);
        for batch in coalesce_small(batches)? {
            staged.rows += batch.num_rows() as u64;
            staged.batch_bytes += batch.get_array_memory_size();
            staged.batches.push((statement, batch));
        }
        if staged.batch_bytes > STAGE_INLINE_BYTES_MAX {
            self.spill_to_file(txn, table_id, partition, staged)?;
        }
        // Many partitions each under the per-partition limit must not add up
        // to an unbounded transaction: spill the largest until under the cap.
        loop {
            let inline_bytes: usize = staging.partitions.values().map(|p| p.batch_bytes).sum();
            if inline_bytes <= STAGE_INLINE_BYTES_PER_TXN_MAX {
                break;
            }
            let Some((&(largest_table, largest_partition), _)) = staging.partitions.iter().max_by_key(|(_, p)| p.batch_bytes) else {
                break;
            };
            let largest = staging.partitions.get_mut(&(largest_table, largest_partition)).expect("key just found");
            self.spill_to_file(txn, largest_table, largest_partition, largest)?;
        }
        Ok(())
    }

    /// Stages rows that `statement` of `txn` deletes from one partition: whole
    /// rows, which prepare finds by content in this copy's storage.
    pub fn stage_deletes(
        &self,
        txn: TxnId,
        coordinator: NodeId,
        key: PartitionKey,
        placement_version: u64,
        statement: StatementNumber,
        batches: Vec<RecordBatch>,
    ) -> StorageResult<()> {
        let staging = self.staging_of(txn, coordinator);
        let mut staging = lock(&staging);
        staging.refuse_if_closed(txn)?;
        let adding: usize = batches.iter().map(|b| b.get_array_memory_size()).sum();
        if staging.delete_bytes + adding > STAGE_DELETE_BYTES_PER_TXN_MAX {
            return Err(StorageError::LimitExceeded {
                message: format!(
                    "a transaction may delete or update at most {} MiB of rows per node; delete in smaller steps",
                    STAGE_DELETE_BYTES_PER_TXN_MAX >> 20
                ),
            });
        }
        staging.delete_bytes += adding;
        let staged = staging.partition(key, placement_version);
        for batch in batches {
            staged.rows += batch.num_rows() as u64;
            staged.deletes.push((statement, batch));
        }
        Ok(())
    }

    /// The whole rows statements before `own.before` of `own.txn` deleted from
    /// one partition: a scan by a later statement of the block leaves them out.
    pub fn staged_deletes(&self, own: OwnWrites, key: PartitionKey) -> Vec<RecordBatch> {
        let Some(staging) = lock(&self.staging).get(&own.txn).cloned() else { return Vec::new() };
        let staging = lock(&staging);
        let Some(staged) = staging.partitions.get(&key) else { return Vec::new() };
        staged.deletes.iter().filter(|(s, _)| *s < own.before).map(|(_, b)| b.clone()).collect()
    }

    /// How many rows (added and deleted) statements before `own.before` of
    /// `own.txn` staged for one partition here: a scan by a later statement
    /// checks it against the count its coordinator sent, so rows lost with a
    /// restart, or a copy that never got them, fail the read instead of
    /// going unseen.
    pub fn staged_row_count(&self, own: OwnWrites, key: PartitionKey) -> u64 {
        let Some(staging) = lock(&self.staging).get(&own.txn).cloned() else { return 0 };
        let staging = lock(&staging);
        let Some(staged) = staging.partitions.get(&key) else { return 0 };
        let earlier = |statement: StatementNumber| statement < own.before;
        let in_batches = |batches: &[(StatementNumber, RecordBatch)]| -> u64 {
            batches.iter().filter(|(s, _)| earlier(*s)).map(|(_, b)| b.num_rows() as u64).sum()
        };
        in_batches(&staged.batches)
            + in_batches(&staged.deletes)
            + staged.files.iter().filter(|f| earlier(f.statement)).map(|f| f.rows).sum::<u64>()
            + staged.file.as_ref().filter(|f| earlier(f.statement)).map(|f| f.rows).unwrap_or(0)
    }

    /// Discards what statements after `after` of `txn` staged here (ROLLBACK
    /// TO SAVEPOINT, or a statement of a block that failed); the rest stays.
    pub fn rollback_statements(&self, txn: TxnId, after: StatementNumber) {
        let Some(staging) = lock(&self.staging).get(&txn).cloned() else { return };
        let mut staging = lock(&staging);
        staging.last_activity = Instant::now();
        for staged in staging.partitions.values_mut() {
            staged.batches.retain(|(statement, _)| *statement <= after);
            staged.deletes.retain(|(statement, _)| *statement <= after);
            if staged.file.as_ref().is_some_and(|f| f.statement > after)
                && let Some(open) = staged.file.take()
            {
                drop(open.writer);
                let _ = std::fs::remove_file(self.staging_dir.join(&open.file_name));
            }
            let dropped: Vec<StagedFile> = staged.files.extract_if(.., |f| f.statement > after).collect();
            for file in &dropped {
                let _ = std::fs::remove_file(self.staging_dir.join(&file.file_name));
            }
            staged.batch_bytes = staged.batches.iter().map(|(_, b)| b.get_array_memory_size()).sum();
            staged.rows = staged.batches.iter().map(|(_, b)| b.num_rows() as u64).sum::<u64>()
                + staged.deletes.iter().map(|(_, b)| b.num_rows() as u64).sum::<u64>()
                + staged.files.iter().map(|f| f.rows).sum::<u64>()
                + staged.file.as_ref().map(|f| f.rows).unwrap_or(0);
        }
        staging.delete_bytes = staging.partitions.values().flat_map(|p| &p.deletes).map(|(_, b)| b.get_array_memory_size()).sum();
    }

    /// Notes that the coordinator of `txn` still holds it open (a transaction
    /// block between statements), so it is not discarded as idle.
    pub fn touch(&self, txn: TxnId) {
        if let Some(staging) = lock(&self.staging).get(&txn) {
            lock(staging).last_activity = Instant::now();
        }
    }

    /// The rows that statements before `own.before` of transaction `own.txn`
    /// staged for one partition here, with `projection` applied: what a
    /// statement of a transaction block reads of its own writes. Spilled
    /// rows of those statements are finished into files here (a later
    /// statement never writes to them) and read back.
    pub fn staged_rows(&self, own: OwnWrites, (table_id, partition): PartitionKey, projection: Option<&[usize]>) -> StorageResult<Vec<RecordBatch>> {
        let Some(staging) = lock(&self.staging).get(&own.txn).cloned() else { return Ok(Vec::new()) };
        let (mut rows, files) = {
            let mut staging = lock(&staging);
            staging.last_activity = Instant::now();
            let Some(staged) = staging.partitions.get_mut(&(table_id, partition)) else { return Ok(Vec::new()) };
            if staged.file.as_ref().is_some_and(|f| f.statement < own.before) {
                self.finish_staged_file(staged)?;
            }
            let project = |batch: &RecordBatch| match projection {
                Some(columns) => batch.project(columns).map_err(|e| StorageError::internal(format!("projecting staged rows: {e}"))),
                None => Ok(batch.clone()),
            };
            let rows = staged.batches.iter().filter(|(s, _)| *s < own.before).map(|(_, b)| project(b)).collect::<StorageResult<Vec<_>>>()?;
            let files: Vec<(PathBuf, segment::Checksums)> = staged
                .files
                .iter()
                .filter(|f| f.statement < own.before)
                .map(|f| (self.staging_dir.join(&f.file_name), segment::Checksums { crc32: Some(f.sum.crc32), blocks: f.sum.blocks.clone() }))
                .collect();
            (rows, files)
        };
        for (path, checksums) in files {
            for batch in segment::SegmentRows::open(&path, &checksums, projection)? {
                rows.push(batch?);
            }
        }
        Ok(rows)
    }

    /// The rows staged so far for `txn`, created on its first rows.
    fn staging_of(&self, txn: TxnId, coordinator: NodeId) -> Arc<Mutex<Staging>> {
        lock(&self.staging)
            .entry(txn)
            .or_insert_with(|| Arc::new(Mutex::new(Staging { coordinator, last_activity: Instant::now(), closed: false, partitions: HashMap::new(), delete_bytes: 0 })))
            .clone()
    }

    /// The tables `txn` has staged rows for here.
    pub fn staged_tables(&self, txn: TxnId) -> Vec<TableId> {
        let Some(staging) = lock(&self.staging).get(&txn).cloned() else { return Vec::new() };
        let staging = lock(&staging);
        let mut tables: Vec<TableId> = staging.partitions.keys().map(|(table, _)| *table).collect();
        tables.sort_unstable();
        tables.dedup();
        tables
    }

    /// Starts receiving a segment file that a bulk loader streams to this node
    /// for one partition of `txn` (see [`segment::SegmentBuilder`]): its bytes
    /// go to a file in the staging directory as they arrive, and
    /// [`StorageEngine::stage_received`] checks and stages it.
    pub fn receive_segment(
        &self,
        txn: TxnId,
        coordinator: NodeId,
        table_id: TableId,
        partition: PartitionId,
        placement_version: u64,
    ) -> StorageResult<ReceivingSegment> {
        let file_name = format!("seg-{txn:032x}-{table_id}-{partition}-{}.parquet", uuid::Uuid::new_v4().simple());
        let path = self.staging_dir.join(&file_name);
        let file = File::create(&path).map_err(|e| StorageError::io(&path, e))?;
        Ok(ReceivingSegment {
            file,
            path,
            file_name,
            sum: segment::SumBuilder::default(),
            staged: false,
            txn,
            coordinator,
            key: (table_id, partition),
            placement_version,
        })
    }

    /// Stages a segment file received whole: it must have the `checksums`
    /// the loader computed, the table's `schema` and `rows` rows. It is made
    /// durable before this returns; prepare then only lists the file. A
    /// segment that fails a check is deleted.
    pub fn stage_received(
        &self,
        mut received: ReceivingSegment,
        rows: u64,
        checksums: &segment::Checksums,
        schema: &arrow::datatypes::SchemaRef,
    ) -> StorageResult<()> {
        let sum = std::mem::take(&mut received.sum).finish();
        segment::check_received(&received.path, &sum, checksums, schema, rows)?;
        received.file.sync_all().map_err(|e| StorageError::io(&received.path, e))?;
        let staging = self.staging_of(received.txn, received.coordinator);
        let mut staging = lock(&staging);
        staging.refuse_if_closed(received.txn)?;
        let staged = staging.partition(received.key, received.placement_version);
        staged.rows += rows;
        staged.files.push(StagedFile { statement: 0, file_name: received.file_name.clone(), rows, sum });
        received.staged = true;
        Ok(())
    }

    /// Streams a staged partition's buffered rows into staged segment files:
    /// one per run of rows of one statement, the last one left open for more.
    fn spill_to_file(&self, txn: TxnId, table_id: TableId, partition: PartitionId, staged: &mut StagedPartition) -> StorageResult<()> {
        for (statement, batch) in std::mem::take(&mut staged.batches) {
            if staged.file.as_ref().is_some_and(|f| f.statement != statement) {
                self.finish_staged_file(staged)?;
            }
            if staged.file.is_none() {
                // Unique within the transaction: files are only added until it prepares.
                let file_name = format!("seg-{txn:032x}-{table_id}-{partition}-{statement}-{}.parquet", staged.files.len());
                let writer = segment::create_writer(&self.staging_dir.join(&file_name), &batch.schema(), Some(&batch))?;
                staged.file = Some(OpenStagedFile { statement, file_name, writer, rows: 0 });
            }
            let file = staged.file.as_mut().expect("file was just set");
            file.writer.write(&batch).map_err(|e| StorageError::Io { path: file.file_name.clone(), source: std::io::Error::other(e.to_string()) })?;
            file.rows += batch.num_rows() as u64;
        }
        staged.batch_bytes = 0;
        Ok(())
    }

    /// Closes a staged partition's open segment file (fsynced) and lists it
    /// with its finished files.
    fn finish_staged_file(&self, staged: &mut StagedPartition) -> StorageResult<()> {
        let Some(OpenStagedFile { statement, file_name, writer, rows }) = staged.file.take() else { return Ok(()) };
        let sum = segment::finish_writer(&self.staging_dir.join(&file_name), writer)?;
        staged.files.push(StagedFile { statement, file_name, rows, sum });
        Ok(())
    }

    /// Makes the staged rows of `txn` durable. After this returns Ok the node can
    /// commit them even after a crash, and must keep them until told the outcome.
    /// `expected_rows` is how many rows the coordinator shipped here; a
    /// mismatch (staged rows lost to a restart or an idle timeout) votes no.
    ///
    /// The rows must keep the unique keys `unique` gives for their table
    /// (`unique.rs`); a duplicate votes no with 23505.
    ///
    /// `prepare_ts` is the coordinator's timestamp from before it sent
    /// Prepare: reads at a later snapshot wait for this transaction's outcome.
    pub fn prepare(&self, txn: TxnId, expected_rows: u64, prepare_ts: u64, unique: &dyn Fn(TableId) -> Vec<UniqueKey>) -> StorageResult<()> {
        let staging = lock(&self.staging).remove(&txn).ok_or_else(|| StorageError::TransactionEnded {
            message: format!("transaction {txn:032x} is unknown on this node (it may have restarted)"),
        })?;
        // Closed under its lock, so rows still arriving are refused rather
        // than staged into a transaction that no longer counts them.
        let mut staging = {
            let mut open = lock(&staging);
            open.closed = true;
            Staging { coordinator: open.coordinator, last_activity: open.last_activity, closed: true, partitions: std::mem::take(&mut open.partitions), delete_bytes: std::mem::take(&mut open.delete_bytes) }
        };
        let staged_rows: u64 = staging.partitions.values().map(|p| p.rows).sum();
        if staged_rows != expected_rows {
            self.discard_staged_files(&staging);
            return Err(StorageError::TransactionEnded {
                message: format!("transaction {txn:032x} staged {staged_rows} rows here, the coordinator sent {expected_rows}"),
            });
        }
        if let Err(error) = staging.partitions.values_mut().try_for_each(|staged| self.finish_staged_file(staged)) {
            self.discard_staged_files(&staging);
            return Err(error);
        }
        let routed_with: Vec<(PartitionKey, u64)> = staging.partitions.iter().map(|(k, p)| (*k, p.placement_version)).collect();
        let mut body = Vec::new();
        let mut entries = Vec::new();
        let mut inline = Vec::new();
        let mut staged_files = Vec::new();
        for ((table_id, partition), mut staged) in staging.partitions {
            for StagedFile { file_name, rows, sum, .. } in staged.files.drain(..) {
                staged.rows -= rows;
                staged_files.push(self.staging_dir.join(&file_name));
                inline.push(None);
                let data = EntryData::Segment { file_name, bytes: sum.bytes, crc32: Some(sum.crc32), block_crc32: sum.blocks };
                entries.push(PreparedEntry { table_id, partition, rows, data });
            }
            if !staged.deletes.is_empty() {
                let deletes: Vec<RecordBatch> = staged.deletes.drain(..).map(|(_, batch)| batch).collect();
                let rows: u64 = deletes.iter().map(|b| b.num_rows() as u64).sum();
                staged.rows -= rows;
                let encoded = ipc::encode_batches(&deletes)?;
                let offset = body.len() as u64;
                body.extend_from_slice(&encoded);
                inline.push(Some(deletes));
                entries.push(PreparedEntry { table_id, partition, rows, data: EntryData::Delete { offset, length: encoded.len() as u64 } });
            }
            if staged.batches.is_empty() {
                continue;
            }
            let batches: Vec<RecordBatch> = staged.batches.drain(..).map(|(_, batch)| batch).collect();
            let encoded = ipc::encode_batches(&batches)?;
            let offset = body.len() as u64;
            body.extend_from_slice(&encoded);
            inline.push(Some(batches));
            let data = EntryData::Inline { offset, length: encoded.len() as u64 };
            entries.push(PreparedEntry { table_id, partition, rows: staged.rows, data });
        }
        foam_common::fs::sync_dir(&self.staging_dir)?;
        let gated = entry_partitions(&entries);
        let header = WalHeader::Prepare { txn, coordinator: staging.coordinator, entries, prepare_ts };
        // Register under the WAL lock: a checkpoint in between would delete the
        // Prepare record without re-appending it, and a fence raised in between
        // would not see this transaction.
        let keys: HashMap<TableId, Vec<UniqueKey>> = {
            let mut tables: Vec<TableId> = entries_of(&header).iter().map(|e| e.table_id).collect();
            tables.sort_unstable();
            tables.dedup();
            tables.into_iter().map(|table| (table, unique(table))).filter(|(_, keys)| !keys.is_empty()).collect()
        };
        let mut wal = lock(&self.wal);
        if let Err(error) = self
            .check_fences(&routed_with)
            .and_then(|_| self.check_deletes(entries_of(&header), &inline, &keys))
            .and_then(|_| self.check_unique(entries_of(&header), &inline, &keys))
        {
            drop(wal);
            for path in staged_files {
                let _ = std::fs::remove_file(path);
            }
            return Err(error);
        }
        wal.append(&header, &body, true)?;
        self.gate.prepared(txn, gated, prepare_ts);
        lock(&self.prepared).insert(txn, Prepared { coordinator: staging.coordinator, header, body, inline, keys });
        Ok(())
    }

    /// Checks that every row a preparing transaction deletes is here to
    /// delete: among the partition's committed rows and the transaction's own
    /// new rows, and not also deleted by another prepared transaction. A row
    /// someone else deleted (or changed) since the statement read it fails
    /// with 40001: the first to prepare wins, so no update is lost. The
    /// committed rows of a table with a unique key are read through its
    /// index (only those with a deleted row's key), of others all of them.
    fn check_deletes(&self, entries: &[PreparedEntry], inline: &[Option<Vec<RecordBatch>>], keys: &HashMap<TableId, Vec<UniqueKey>>) -> StorageResult<()> {
        let mut deletes: HashMap<PartitionKey, Vec<RecordBatch>> = HashMap::new();
        for (entry, rows) in entries.iter().zip(inline) {
            if let (EntryData::Delete { .. }, Some(rows)) = (&entry.data, rows) {
                deletes.entry((entry.table_id, entry.partition)).or_default().extend(rows.iter().cloned());
            }
        }
        for ((table_id, partition), rows) in deletes {
            let Some(wanted) = RowSet::of(&rows)? else { continue };
            let mut available: HashMap<Vec<u8>, u64> = HashMap::new();
            let key: Option<Vec<usize>> = keys.get(&table_id).and_then(|k| k.first()).map(|k| k.columns.clone());
            let indexed = match key {
                Some(key) => {
                    let handle = self.partition(table_id, partition)?;
                    let found = lock(&handle).rows_with_keys(&[key], &rows, None)?;
                    found.map(|found| found.into_iter().map(|(_, _, batch)| batch).collect::<Vec<_>>())
                }
                None => None,
            };
            let committed = match indexed {
                Some(committed) => committed,
                None => self.committed_rows((table_id, partition), None)?,
            };
            for batch in &committed {
                wanted.count_in(batch, &mut available)?;
            }
            let all_columns: Vec<usize> = (0..rows[0].num_columns()).collect();
            for (entry, new_rows) in entries.iter().zip(inline) {
                if (entry.table_id, entry.partition) == (table_id, partition) && !matches!(entry.data, EntryData::Delete { .. }) {
                    for batch in self.entry_rows(entry, new_rows.as_ref(), &all_columns)? {
                        wanted.count_in(&batch, &mut available)?;
                    }
                }
            }
            // Rows another prepared transaction deletes are taken already.
            let mut taken: HashMap<Vec<u8>, u64> = HashMap::new();
            for prepared in lock(&self.prepared).values() {
                for (entry, rows) in entries_of(&prepared.header).iter().zip(&prepared.inline) {
                    if let (EntryData::Delete { .. }, Some(rows), true) = (&entry.data, rows, (entry.table_id, entry.partition) == (table_id, partition)) {
                        for batch in rows {
                            wanted.count_in(batch, &mut taken)?;
                        }
                    }
                }
            }
            for (row, count) in taken {
                if let Some(left) = available.get_mut(&row) {
                    *left = left.saturating_sub(count);
                }
            }
            let missing = wanted.missing_from(&available);
            if missing > 0 {
                return Err(StorageError::ConcurrentUpdate {
                    message: format!(
                        "could not serialize access due to concurrent update: {missing} row(s) of partition {partition} of table {table_id} \
                         were deleted or changed by another transaction; run the transaction again"
                    ),
                });
            }
        }
        Ok(())
    }

    /// Checks a preparing transaction's rows (`entries`, with their decoded
    /// `inline` rows) against the unique keys of their tables; the caller
    /// holds the WAL lock, so no other transaction prepares or commits meanwhile.
    /// Of the committed rows, only those sharing a key with a new row are
    /// read, through the keys' indexes (all of them when the partition is
    /// too large to index).
    fn check_unique(&self, entries: &[PreparedEntry], inline: &[Option<Vec<RecordBatch>>], keys: &HashMap<TableId, Vec<UniqueKey>>) -> StorageResult<()> {
        // Per table, only its keys' columns are compared: `columns`
        // (ascending, as a segment's projection returns them), with the keys
        // renumbered.
        let projections: HashMap<TableId, Vec<usize>> = keys.iter().map(|(table, keys)| (*table, unique::projection(keys).0)).collect();
        let mut new_rows: HashMap<PartitionKey, Vec<RecordBatch>> = HashMap::new();
        // Rows this transaction deletes no longer hold their keys (an UPDATE
        // that keeps a row's key deletes the old row and adds the new one).
        let mut deleted: HashMap<PartitionKey, Vec<RecordBatch>> = HashMap::new();
        for (entry, rows) in entries.iter().zip(inline) {
            let Some(columns) = projections.get(&entry.table_id) else { continue };
            let key = (entry.table_id, entry.partition);
            let target = if matches!(entry.data, EntryData::Delete { .. }) { &mut deleted } else { &mut new_rows };
            target.entry(key).or_default().extend(self.entry_rows(entry, rows.as_ref(), columns)?);
        }
        for ((table_id, partition), new) in new_rows {
            let deleted = deleted.get(&(table_id, partition)).map(Vec::as_slice).unwrap_or_default();
            self.check_unique_in((table_id, partition), &keys[&table_id], new, deleted, true)?;
        }
        Ok(())
    }

    /// Checks `new` (a transaction's rows for one partition, projected to
    /// the columns of `keys`, as `unique::projection` orders them) against
    /// the partition's committed rows and, with `with_prepared`, the rows of
    /// transactions prepared here; rows in `deleted` (projected alike, the
    /// transaction's own deletes) hold no key.
    fn check_unique_in(&self, (table_id, partition): PartitionKey, keys: &[UniqueKey], mut new: Vec<RecordBatch>, deleted: &[RecordBatch], with_prepared: bool) -> StorageResult<()> {
        let (columns, renumbered) = unique::projection(keys);
        // A row the transaction added and deleted again (a block that
        // updates a row twice) holds no key; nor does a deleted committed row.
        let mut gone = RowSet::of(deleted)?;
        if let Some(gone) = gone.as_mut() {
            new = new.iter().map(|batch| gone.take_from(batch).map(|(kept, _)| kept)).collect::<StorageResult<_>>()?;
        }
        let handle = self.partition(table_id, partition)?;
        let key_columns: Vec<Vec<usize>> = keys.iter().map(|k| k.columns.clone()).collect();
        let indexed = lock(&handle).rows_with_keys(&key_columns, &new, Some(&columns))?;
        let mut present = match indexed {
            Some(found) => found
                .into_iter()
                .map(|(_, _, batch)| batch.project(&columns).map_err(|e| StorageError::internal(format!("projecting committed rows: {e}"))))
                .collect::<StorageResult<Vec<_>>>()?,
            None => self.committed_rows((table_id, partition), Some(&columns))?,
        };
        if with_prepared {
            for prepared in lock(&self.prepared).values() {
                for (entry, rows) in entries_of(&prepared.header).iter().zip(&prepared.inline) {
                    if (entry.table_id, entry.partition) == (table_id, partition) && !matches!(entry.data, EntryData::Delete { .. }) {
                        present.extend(self.entry_rows(entry, rows.as_ref(), &columns)?);
                    }
                }
            }
        }
        if let Some(gone) = gone.as_mut() {
            present = present.iter().map(|batch| gone.take_from(batch).map(|(kept, _)| kept)).collect::<StorageResult<_>>()?;
        }
        unique::check(&renumbered, &new, &present)
    }

    /// Checks the unique keys of what `txn` has staged here so far (a
    /// statement of a transaction block just ended) against the committed
    /// rows, so a duplicate fails that statement, as in PostgreSQL, rather
    /// than the block's COMMIT. Prepare checks again, against transactions
    /// that committed or prepared since; a partition whose rows spilled to
    /// files is left to it.
    pub fn check_staged_keys(&self, txn: TxnId, unique: &dyn Fn(TableId) -> Vec<UniqueKey>) -> StorageResult<()> {
        let Some(staging) = lock(&self.staging).get(&txn).cloned() else { return Ok(()) };
        let mut staged = Vec::new();
        {
            let staging = lock(&staging);
            for (key, partition) in &staging.partitions {
                if partition.batches.is_empty() || !partition.files.is_empty() || partition.file.is_some() {
                    continue;
                }
                let new: Vec<RecordBatch> = partition.batches.iter().map(|(_, batch)| batch.clone()).collect();
                let deleted: Vec<RecordBatch> = partition.deletes.iter().map(|(_, batch)| batch.clone()).collect();
                staged.push((*key, new, deleted));
            }
        }
        let mut keys_of: HashMap<TableId, Vec<UniqueKey>> = HashMap::new();
        for ((table_id, partition), new, deleted) in staged {
            let keys = keys_of.entry(table_id).or_insert_with(|| unique(table_id));
            if keys.is_empty() {
                continue;
            }
            let (columns, _) = unique::projection(keys);
            let project = |batches: Vec<RecordBatch>| -> StorageResult<Vec<RecordBatch>> {
                batches.iter().map(|b| b.project(&columns).map_err(|e| StorageError::internal(format!("projecting key columns: {e}")))).collect()
            };
            let (new, deleted) = (project(new)?, project(deleted)?);
            self.check_unique_in((table_id, partition), keys, new, &deleted, false)?;
        }
        Ok(())
    }

    /// The committed rows of a partition (memtable and segments), with
    /// `projection`'s columns.
    fn committed_rows(&self, key: PartitionKey, projection: Option<&[usize]>) -> StorageResult<Vec<RecordBatch>> {
        let mut rows = Vec::new();
        self.each_committed_batch(key, projection, |batch| {
            rows.push(batch);
            Ok(())
        })?;
        Ok(rows)
    }

    /// Hands `each` the committed rows of a partition batch by batch
    /// (memtable, then segments, each decoded as it is reached), with
    /// `projection`'s columns.
    fn each_committed_batch(
        &self,
        (table_id, partition): PartitionKey,
        projection: Option<&[usize]>,
        mut each: impl FnMut(RecordBatch) -> StorageResult<()>,
    ) -> StorageResult<()> {
        let snapshot = self.snapshot(table_id, partition)?;
        for batch in &snapshot.memtable {
            each(match projection {
                Some(columns) => batch.project(columns).map_err(|e| StorageError::internal(format!("projecting committed rows: {e}")))?,
                None => batch.clone(),
            })?;
        }
        for segment in &snapshot.segments {
            for batch in segment::SegmentRows::of(segment, projection)? {
                each(batch?)?;
            }
        }
        Ok(())
    }

    /// The `columns` of one entry of a Prepare record's rows: decoded
    /// already, or in a staged file.
    fn entry_rows(&self, entry: &PreparedEntry, inline: Option<&Vec<RecordBatch>>, columns: &[usize]) -> StorageResult<Vec<RecordBatch>> {
        match (&entry.data, inline) {
            (EntryData::Inline { .. } | EntryData::Delete { .. }, Some(rows)) => rows
                .iter()
                .map(|batch| batch.project(columns).map_err(|e| StorageError::internal(format!("projecting key columns: {e}"))))
                .collect(),
            (EntryData::Segment { file_name, crc32, block_crc32, .. }, _) => {
                let path = self.staging_dir.join(file_name);
                let checksums = segment::Checksums { crc32: *crc32, blocks: block_crc32.clone() };
                segment::SegmentRows::open(&path, &checksums, Some(columns))?.collect()
            }
            (EntryData::Inline { .. } | EntryData::Delete { .. }, None) => Err(StorageError::internal("a prepared entry's inline rows were not decoded")),
        }
    }

    fn check_fences(&self, routed_with: &[(PartitionKey, u64)]) -> StorageResult<()> {
        let fences = lock(&self.fences);
        let floors = lock(&self.fence_floors);
        for ((table_id, partition), version) in routed_with {
            if let Some(floor) = floors.get(&(*table_id, *partition)).filter(|floor| version < *floor) {
                return Err(StorageError::PlacementChanged {
                    message: format!(
                        "partition {partition} of table {table_id} gained a constraint (placement {floor}) after the statement was planned (placement {version})"
                    ),
                });
            }
            match fences.get(&(*table_id, *partition)) {
                Some(&WRITES_FENCED) => {
                    return Err(StorageError::PlacementChanged {
                        message: format!("partition {partition} of table {table_id} is switching in a new replica"),
                    });
                }
                Some(required) if version < required => {
                    return Err(StorageError::PlacementChanged {
                        message: format!(
                            "partition {partition} of table {table_id} gained a replica (placement {required}) after the statement was planned (placement {version})"
                        ),
                    });
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Sets the oldest placement version writes to a partition may carry.
    pub fn set_write_fence(&self, table_id: TableId, partition: PartitionId, version: u64) {
        let _wal = lock(&self.wal);
        lock(&self.fences).insert((table_id, partition), version);
    }

    /// Raises a partition's fence floor to at least `version` (a fence for
    /// a catch-up stays as it is), then waits (up to `timeout`) until the transactions
    /// prepared on it before are decided: afterwards every transaction that
    /// writes to it was routed with `version` or later.
    pub fn raise_write_fence(&self, table_id: TableId, partition: PartitionId, version: u64, timeout: Duration) -> StorageResult<()> {
        let before = {
            let _wal = lock(&self.wal);
            let mut floors = lock(&self.fence_floors);
            let floor = floors.entry((table_id, partition)).or_insert(0);
            *floor = (*floor).max(version);
            drop(floors);
            self.prepared_on(table_id, partition)
        };
        let deadline = Instant::now() + timeout;
        while before.iter().any(|txn| lock(&self.prepared).contains_key(txn)) {
            if Instant::now() >= deadline {
                return Err(StorageError::PlacementChanged {
                    message: format!("partition {partition} of table {table_id} still has undecided writes from before the constraint was added"),
                });
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(())
    }

    /// Refuses every new write to a partition, then waits (up to `timeout`)
    /// until none of its prepared transactions is left undecided. On timeout
    /// the fence is lowered again to `restore` and an error returned.
    pub fn fence_writes(&self, table_id: TableId, partition: PartitionId, restore: u64, timeout: Duration) -> StorageResult<()> {
        self.set_write_fence(table_id, partition, WRITES_FENCED);
        let deadline = Instant::now() + timeout;
        loop {
            if self.prepared_on(table_id, partition).is_empty() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                self.set_write_fence(table_id, partition, restore);
                return Err(StorageError::PlacementChanged {
                    message: format!("partition {partition} of table {table_id} still has undecided writes"),
                });
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The transactions prepared here and not yet decided that write to a partition.
    fn prepared_on(&self, table_id: TableId, partition: PartitionId) -> Vec<TxnId> {
        lock(&self.prepared)
            .iter()
            .filter(|(_, p)| match &p.header {
                WalHeader::Prepare { entries, .. } => entries.iter().any(|e| (e.table_id, e.partition) == (table_id, partition)),
                _ => false,
            })
            .map(|(txn, _)| *txn)
            .collect()
    }

    /// `ALTER TABLE ... ADD` of a unique key, on this copy of a partition:
    /// waits (up to `timeout`) until every transaction prepared here so far
    /// is decided, then checks the committed rows for a repeated key. The
    /// caller's catalog already holds the key, and a prepare reads its keys
    /// under the WAL lock, so every transaction prepared after the snapshot
    /// below was checked against the key; those before it, which may not
    /// have been, are the ones waited for.
    pub fn validate_unique_key(&self, table_id: TableId, partition: PartitionId, key: &UniqueKey, timeout: Duration) -> StorageResult<()> {
        let before = {
            let _wal = lock(&self.wal);
            self.prepared_on(table_id, partition)
        };
        let deadline = Instant::now() + timeout;
        while before.iter().any(|txn| lock(&self.prepared).contains_key(txn)) {
            if Instant::now() >= deadline {
                return Err(StorageError::PlacementChanged {
                    message: format!("partition {partition} of table {table_id} still has undecided writes from before the key was added"),
                });
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let (columns, keys) = unique::projection(std::slice::from_ref(key));
        let rows = self.committed_rows((table_id, partition), Some(&columns))?;
        unique::check_stored(&keys[0], &rows)
    }

    /// Flushes a partition's memtable and lists its segments: everything it
    /// holds is then in files a replica can copy.
    pub fn flush_partition(&self, table_id: TableId, partition: PartitionId) -> StorageResult<Vec<SegmentInfo>> {
        let _wal = lock(&self.wal);
        let partition = self.partition(table_id, partition)?;
        let mut partition = lock(&partition);
        partition.flush()?;
        Ok(partition.segments().to_vec())
    }

    /// The segments a partition lists, without flushing.
    pub fn segments(&self, table_id: TableId, partition: PartitionId) -> Vec<SegmentInfo> {
        let found = lock(&self.partitions).get(&(table_id, partition)).cloned();
        found.map(|p| lock(&p).segments().to_vec()).unwrap_or_default()
    }

    /// Where a listed segment file of a partition lives.
    pub fn segment_path(&self, table_id: TableId, partition: PartitionId, file_name: &str) -> StorageResult<PathBuf> {
        let listed = self.segments(table_id, partition).iter().any(|s| s.file_name == file_name);
        if !listed || file_name.contains('/') {
            return Err(StorageError::InvalidRequest {
                message: format!("partition {partition} of table {table_id} has no segment {file_name}"),
            });
        }
        Ok(self.tables_dir.join(table_id.to_string()).join(partition.to_string()).join(file_name))
    }

    /// Empties this node's copy of a partition before it is copied anew from
    /// a replica; WAL records written so far no longer apply to it. Reads
    /// of it are refused until [`Self::finish_refill`].
    pub fn reset_partition(&self, table_id: TableId, partition: PartitionId) -> StorageResult<()> {
        let wal = lock(&self.wal);
        let last_lsn = wal.next_lsn().saturating_sub(1);
        let partition = self.partition(table_id, partition)?;
        let mut partition = lock(&partition);
        drop(wal);
        partition.reset(last_lsn)
    }

    /// Keeps this node's segment files of a partition (as hard links in the
    /// staging directory) before [`Self::reset_partition`] empties it, so a
    /// catch-up installs the ones the source still lists instead of copying
    /// them again: a node back from a restart then copies only what it missed.
    /// The caller holds the partition's write fence.
    pub fn set_aside_segments(&self, table_id: TableId, partition: PartitionId) -> SetAside {
        let dir = self.tables_dir.join(table_id.to_string()).join(partition.to_string());
        let mut files = Vec::new();
        for info in self.segments(table_id, partition) {
            let kept = self.staging_dir.join(format!("kept-{table_id}-{partition}-{}", info.file_name));
            let _ = std::fs::remove_file(&kept);
            match std::fs::hard_link(dir.join(&info.file_name), &kept) {
                Ok(()) => files.push((info, kept)),
                Err(error) => tracing::warn!(file = %info.file_name, %error, "could not keep a segment aside; it will be copied"),
            }
        }
        SetAside { files }
    }

    /// A directory for files being received from a replica.
    pub fn incoming_dir(&self) -> &Path {
        &self.staging_dir
    }

    /// Adds a segment file copied from a replica (already durable at `path`,
    /// under [`Self::incoming_dir`]) to this node's copy of a partition.
    pub fn install_segment(&self, table_id: TableId, partition: PartitionId, path: &Path, info: SegmentInfo) -> StorageResult<()> {
        segment::verify(path, &info.checksums())?;
        let partition = self.partition(table_id, partition)?;
        let mut partition = lock(&partition);
        partition.install_segment(path, info)
    }

    /// Deletes this node's copy of a partition it no longer holds a replica of.
    pub fn remove_partition(&self, table_id: TableId, partition: PartitionId) -> StorageResult<()> {
        let mut wal = lock(&self.wal);
        wal.append(&WalHeader::DropPartition { table_id, partition }, &[], true)?;
        self.forget_partition(table_id, partition)
    }

    fn forget_partition(&self, table_id: TableId, partition: PartitionId) -> StorageResult<()> {
        let removed = lock(&self.partitions).remove(&(table_id, partition));
        if let Some(removed) = removed {
            let dir = lock(&removed).dir().to_path_buf();
            if dir.exists() {
                std::fs::remove_dir_all(&dir).map_err(|e| StorageError::io(&dir, e))?;
            }
        }
        Ok(())
    }

    /// Partitions this node stores data of.
    pub fn partition_keys(&self) -> Vec<(TableId, PartitionId)> {
        lock(&self.partitions).keys().copied().collect()
    }

    /// Commits a prepared transaction. Committing an unknown transaction is a
    /// no-op: it was committed before (a retried commit) — a coordinator only
    /// commits after every participant prepared.
    ///
    /// `ts` is the commit timestamp. The transaction is applied after every
    /// transaction on its partitions that commits below it (`visibility.rs`);
    /// blocking, so call it off the async runtime.
    pub fn commit(&self, txn: TxnId, ts: u64) -> StorageResult<()> {
        if !lock(&self.prepared).contains_key(&txn) {
            return Ok(());
        }
        self.gate.decide(txn, ts);
        self.gate.wait_turn(txn, ts, Duration::from_millis(SNAPSHOT_WAIT_MS_MAX))?;
        let mut wal = lock(&self.wal);
        let Some(prepared) = lock(&self.prepared).remove(&txn) else {
            self.gate.done(txn);
            return Ok(());
        };
        let (inline, deleted) = match self.resolve(&prepared, None) {
            Ok(resolved) => resolved,
            Err(error) => {
                lock(&self.prepared).insert(txn, prepared);
                return Err(error);
            }
        };
        let lsn = match wal.append(&WalHeader::Commit { txn, ts, deleted: Some(deleted.clone()) }, &[], true) {
            Ok(lsn) => lsn,
            Err(error) => {
                lock(&self.prepared).insert(txn, prepared);
                return Err(error);
            }
        };
        let applied = self.apply(lsn, ts, &prepared.header, inline, &deleted, &HashMap::new(), true);
        self.gate.done(txn);
        if let Err(error) = applied {
            // The Commit record is durable but the rows are only partly applied;
            // nothing here can redo that safely, replay at restart can.
            tracing::error!(%error, txn = %format!("{txn:032x}"), "applying a committed transaction failed; stopping so replay can redo it");
            std::process::exit(EXIT_CODE_REPLAY_NEEDED);
        }
        if wal.bytes_since_checkpoint() > WAL_CHECKPOINT_BYTES {
            self.checkpoint(&mut wal)?;
        }
        Ok(())
    }

    /// Discards a transaction in any state. Unknown transactions are ignored.
    pub fn abort(&self, txn: TxnId) -> StorageResult<()> {
        if let Some(staging) = lock(&self.staging).remove(&txn) {
            self.close_and_discard(&staging);
        }
        let mut wal = lock(&self.wal);
        if let Some(prepared) = lock(&self.prepared).remove(&txn) {
            wal.append(&WalHeader::Abort { txn }, &[], false)?;
            self.discard_segments(&prepared.header);
        }
        self.gate.done(txn);
        Ok(())
    }

    /// Prepared transactions waiting for their outcome, with their coordinators.
    pub fn in_doubt(&self) -> Vec<(TxnId, NodeId)> {
        lock(&self.prepared).iter().map(|(txn, p)| (*txn, p.coordinator)).collect()
    }

    /// Aborts unprepared transactions whose coordinator went silent.
    pub fn expire_idle_staging(&self) -> StorageResult<usize> {
        let idle_limit = Duration::from_millis(TXN_IDLE_TIMEOUT_MS);
        let idle: Vec<TxnId> = lock(&self.staging)
            .iter()
            .filter(|(_, s)| s.try_lock().map(|s| s.last_activity.elapsed() > idle_limit).unwrap_or(false))
            .map(|(txn, _)| *txn)
            .collect();
        for txn in &idle {
            // Only unprepared rows: a transaction prepared meanwhile keeps its vote.
            if let Some(staging) = lock(&self.staging).remove(txn) {
                self.close_and_discard(&staging);
            }
        }
        Ok(idle.len())
    }

    pub fn snapshot(&self, table_id: TableId, partition: PartitionId) -> StorageResult<PartitionSnapshot> {
        Ok(self.stored_snapshot(table_id, partition)?.unwrap_or_default())
    }

    /// The partition's newest rows, or `None` when this node stores nothing
    /// of it: it was never written here, or its copy was removed (moved elsewhere).
    pub fn stored_snapshot(&self, table_id: TableId, partition: PartitionId) -> StorageResult<Option<PartitionSnapshot>> {
        self.stored_partition(table_id, partition).map(|p| lock(&p).snapshot()).transpose()
    }

    /// The partition's handle, if this node stores it. The map is released
    /// before the caller locks the partition: a flush holds a partition lock
    /// for a while and must not stall every other partition's readers.
    fn stored_partition(&self, table_id: TableId, partition: PartitionId) -> Option<Arc<Mutex<Partition>>> {
        lock(&self.partitions).get(&(table_id, partition)).cloned()
    }

    /// The partition's rows as of snapshot `ts` (the newest when `None`), if
    /// no transaction that may commit at or below `ts` is pending here;
    /// with `key`, only the rows with its values when the key's index can
    /// serve the read (`Partition::read_at`).
    /// A copy being filled in from another node is refused (40001).
    pub fn try_snapshot_at(&self, table_id: TableId, partition: PartitionId, ts: Option<u64>, key: Option<&KeyProbe>) -> StorageResult<SnapshotRead> {
        let stored = self.stored_partition(table_id, partition);
        if let Some(stored) = &stored {
            lock(stored).check_readable()?;
        }
        if let Some(ts) = ts
            && !self.gate.readable((table_id, partition), ts)
        {
            return Ok(SnapshotRead::Wait);
        }
        Ok(SnapshotRead::Ready(stored.map(|p| lock(&p).read_at(ts, key)).transpose()?))
    }

    /// Like `try_snapshot_at`, waiting up to [`SNAPSHOT_WAIT_MS_MAX`] for the
    /// pending transactions (blocking: call it off the async runtime).
    pub fn snapshot_at(&self, table_id: TableId, partition: PartitionId, ts: u64, key: Option<&KeyProbe>) -> StorageResult<Option<PartitionSnapshot>> {
        let deadline = Instant::now() + Duration::from_millis(SNAPSHOT_WAIT_MS_MAX);
        loop {
            self.gate.wait_readable((table_id, partition), ts, deadline.saturating_duration_since(Instant::now()))?;
            // A transaction that prepared in between may hold it back again.
            if let SnapshotRead::Ready(read) = self.try_snapshot_at(table_id, partition, Some(ts), key)? {
                return Ok(read);
            }
        }
    }

    /// Drops every partition's versions past their retention; a partition
    /// busy right now is left for the next round.
    pub fn forget_old_versions(&self) {
        let partitions: Vec<_> = lock(&self.partitions).values().cloned().collect();
        for partition in partitions {
            if let Ok(mut partition) = partition.try_lock() {
                partition.forget_expired_versions();
            }
        }
    }

    /// A copy emptied by [`Self::reset_partition`] has been filled in from
    /// another node up to timestamp `ts` (the replica keeper): it may be read
    /// again, at snapshots from `ts` on.
    pub fn finish_refill(&self, table_id: TableId, partition: PartitionId, ts: u64) -> StorageResult<()> {
        let partition = self.partition(table_id, partition)?;
        lock(&partition).finish_refill(ts)
    }

    /// The digest of the committed rows this node holds of each of
    /// `partitions` (of no rows where it stores nothing), to tell whether
    /// copies agree. Reads every row of them.
    pub fn digests(&self, table_id: TableId, partitions: Vec<PartitionId>) -> StorageResult<Vec<(PartitionId, RowDigest)>> {
        partitions.into_iter().map(|partition| Ok((partition, self.digest(table_id, partition)?))).collect()
    }

    fn digest(&self, table_id: TableId, partition: PartitionId) -> StorageResult<RowDigest> {
        let mut digester: Option<RowDigester> = None;
        self.each_committed_batch((table_id, partition), None, |batch| match &mut digester {
            Some(digester) => digester.add(&batch),
            None => digester.insert(RowDigester::new(&batch.schema())?).add(&batch),
        })?;
        Ok(digester.map(RowDigester::finish).unwrap_or_default())
    }

    pub fn stats(&self, table_id: TableId, partition: PartitionId) -> PartitionStats {
        let found = lock(&self.partitions).get(&(table_id, partition)).cloned();
        match found {
            Some(p) => {
                let (rows, bytes) = lock(&p).stats();
                PartitionStats { rows, bytes }
            }
            None => PartitionStats::default(),
        }
    }

    /// Tables this node stores data of.
    pub fn table_ids(&self) -> Vec<TableId> {
        let mut ids: Vec<TableId> = lock(&self.partitions).keys().map(|(table, _)| *table).collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    /// Removes a dropped table's data for good.
    pub fn drop_table(&self, table_id: TableId) -> StorageResult<()> {
        let _wal_guard = {
            let mut wal = lock(&self.wal);
            wal.append(&WalHeader::DropTable { table_id }, &[], true)?;
            wal
        };
        self.forget_table(table_id)
    }

    /// Flushes every memtable and starts a new WAL file.
    pub fn checkpoint_now(&self) -> StorageResult<()> {
        let mut wal = lock(&self.wal);
        self.checkpoint(&mut wal)
    }

    fn checkpoint(&self, wal: &mut MutexGuard<'_, Wal>) -> StorageResult<()> {
        let partitions: Vec<_> = lock(&self.partitions).values().cloned().collect();
        for partition in partitions {
            lock(&partition).flush()?;
        }
        wal.rotate()?;
        // In-doubt transactions must outlive the old files: write them again.
        for prepared in lock(&self.prepared).values() {
            wal.append(&prepared.header, &prepared.body, false)?;
        }
        wal.sync()?;
        // Re-appended records must not count towards the next checkpoint, or
        // large in-doubt transactions would make every commit checkpoint.
        wal.reset_checkpoint_counter();
        wal.remove_older_files()
    }

    /// What a committing transaction writes on this copy: its new rows less
    /// those it deletes again, per entry ([`cancel_own_rows`]), and where the
    /// other rows it deletes are: as its Commit record names them
    /// (`recorded`), else found now ([`Self::locate_deletes`]; a commit, or
    /// a record from before deletion vectors).
    fn resolve(&self, prepared: &Prepared, recorded: Option<Vec<DeletedRows>>) -> StorageResult<(EntryRows, Vec<DeletedRows>)> {
        let (inline, left) = cancel_own_rows(entries_of(&prepared.header), &prepared.inline)?;
        let deleted = match recorded {
            Some(deleted) => deleted,
            None => self.locate_deletes(prepared, left)?,
        };
        Ok((inline, deleted))
    }

    /// Applies a committed transaction at `lsn`: its new rows (`inline`, per
    /// entry of `header`, as [`Self::resolve`] gives them) and segments,
    /// then its deletions at the positions `deleted` names. `removed_at`
    /// (empty except in replay) gives the LSN at which the log later removes
    /// a partition's copy: a commit before it is skipped, as its files went
    /// with the copy. `compact`: flush the partitions past their limits.
    #[allow(clippy::too_many_arguments)]
    fn apply(
        &self,
        lsn: u64,
        ts: u64,
        header: &WalHeader,
        inline: EntryRows,
        deleted: &[DeletedRows],
        removed_at: &HashMap<(TableId, PartitionId), u64>,
        compact: bool,
    ) -> StorageResult<()> {
        let WalHeader::Prepare { entries, .. } = header else {
            return Err(StorageError::internal("a prepared transaction without a Prepare header"));
        };
        let skipped = |table_id: TableId, partition: PartitionId| {
            lock(&self.dropped_tables).contains(&table_id) || removed_at.get(&(table_id, partition)).is_some_and(|removed| lsn < *removed)
        };
        let mut touched: HashSet<PartitionKey> = HashSet::new();
        for (entry, inline) in entries.iter().zip(inline) {
            if skipped(entry.table_id, entry.partition) {
                if let EntryData::Segment { file_name, .. } = &entry.data {
                    let _ = std::fs::remove_file(self.staging_dir.join(file_name));
                }
                continue;
            }
            let partition = self.partition(entry.table_id, entry.partition)?;
            let mut partition = lock(&partition);
            touched.insert((entry.table_id, entry.partition));
            match (&entry.data, inline) {
                (EntryData::Inline { .. }, Some(batches)) => partition.apply_inline(lsn, ts, batches),
                (EntryData::Delete { .. }, _) => {}
                (EntryData::Segment { file_name, bytes, crc32, block_crc32 }, _) => {
                    let info = SegmentInfo {
                        file_name: file_name.clone(),
                        rows: entry.rows,
                        bytes: *bytes,
                        crc32: *crc32,
                        block_crc32: block_crc32.clone(),
                        deleted: Default::default(),
                    };
                    partition.add_segment(lsn, ts, &self.staging_dir.join(file_name), info)?;
                }
                (EntryData::Inline { .. }, None) => return Err(StorageError::internal("inline entry without decoded rows")),
            }
        }
        for rows in deleted {
            if skipped(rows.table_id, rows.partition) {
                continue;
            }
            let partition = self.partition(rows.table_id, rows.partition)?;
            lock(&partition).delete_at(lsn, ts, &rows.home, &rows.positions);
        }
        if compact {
            for (table_id, partition) in touched {
                let partition = self.partition(table_id, partition)?;
                let mut partition = lock(&partition);
                if partition.wants_flush() {
                    partition.flush()?;
                }
            }
        }
        Ok(())
    }

    /// Where this copy holds the rows a committed transaction deletes that
    /// its own new rows did not cover (`left`, per partition, from
    /// [`cancel_own_rows`]): through the first unique key's index or by
    /// content, in the partition's memtable and segments, then in the
    /// transaction's own new segments. Rows not found are logged: prepare
    /// checked they were here, under the same WAL lock order.
    fn locate_deletes(&self, prepared: &Prepared, left: HashMap<PartitionKey, RowSet>) -> StorageResult<Vec<DeletedRows>> {
        let entries = entries_of(&prepared.header);
        let mut located = Vec::new();
        for ((table_id, partition), mut gone) in left {
            if gone.is_empty() || lock(&self.dropped_tables).contains(&table_id) {
                continue;
            }
            let handle = self.partition(table_id, partition)?;
            let key = prepared.keys.get(&table_id).and_then(|keys| keys.first()).map(|k| k.columns.clone());
            let indexed = match key {
                Some(key) => {
                    let rows: Vec<RecordBatch> = entries
                        .iter()
                        .zip(&prepared.inline)
                        .filter(|(e, _)| (e.table_id, e.partition) == (table_id, partition) && matches!(e.data, EntryData::Delete { .. }))
                        .flat_map(|(_, rows)| rows.iter().flatten().cloned())
                        .collect();
                    lock(&handle).locate_by_key(&mut gone, &key, &rows)?
                }
                None => None,
            };
            let mut homes = match indexed {
                Some(homes) => homes,
                None => lock(&handle).locate(&mut gone)?,
            };
            for entry in entries.iter().filter(|e| (e.table_id, e.partition) == (table_id, partition)) {
                let EntryData::Segment { file_name, crc32, block_crc32, .. } = &entry.data else { continue };
                if gone.is_empty() {
                    break;
                }
                // Still staged, or moved into the partition by an earlier
                // apply of this commit (replay).
                let staged = self.staging_dir.join(file_name);
                let path = if staged.exists() { staged } else { lock(&handle).dir().join(file_name) };
                let checksums = segment::Checksums { crc32: *crc32, blocks: block_crc32.clone() };
                let positions = locate_in_file(&mut gone, &path, &checksums, &Default::default())?;
                if !positions.is_empty() {
                    homes.push((RowHome::Segment(file_name.clone()), positions));
                }
            }
            if !gone.is_empty() {
                tracing::error!(table_id, partition, missing = gone.len(), "rows a committed transaction deleted were not found in this copy");
            }
            located.extend(homes.into_iter().map(|(home, positions)| DeletedRows { table_id, partition, home, positions }));
        }
        Ok(located)
    }

    /// Makes a partition list exactly the segments of `wanted` it holds,
    /// with their deletion vectors (see `Partition::retain_segments`).
    pub fn retain_segments(&self, table_id: TableId, partition: PartitionId, wanted: &[SegmentInfo]) -> StorageResult<()> {
        let partition = self.partition(table_id, partition)?;
        let mut partition = lock(&partition);
        partition.retain_segments(wanted)
    }

    fn decode_prepared(&self, coordinator: NodeId, header: WalHeader, body: Vec<u8>) -> StorageResult<Prepared> {
        let WalHeader::Prepare { entries, .. } = &header else {
            return Err(StorageError::internal("decode_prepared needs a Prepare record"));
        };
        let mut inline = Vec::with_capacity(entries.len());
        for entry in entries {
            inline.push(match entry.data {
                EntryData::Inline { offset, length } | EntryData::Delete { offset, length } => {
                    let range = offset as usize..(offset + length) as usize;
                    let bytes = body.get(range).ok_or_else(|| StorageError::Corrupted {
                        path: "wal".into(),
                        message: "inline rows outside their record".into(),
                    })?;
                    Some(ipc::decode_batches(bytes)?)
                }
                EntryData::Segment { .. } => None,
            });
        }
        Ok(Prepared { coordinator, header, body, inline, keys: HashMap::new() })
    }

    /// Ends an unprepared transaction here: no more rows, its files deleted.
    fn close_and_discard(&self, staging: &Mutex<Staging>) {
        let mut staging = lock(staging);
        staging.closed = true;
        self.discard_staged_files(&staging);
    }

    /// Deletes the staged segment files of an unprepared transaction.
    fn discard_staged_files(&self, staging: &Staging) {
        for staged in staging.partitions.values() {
            let finished = staged.files.iter().map(|f| &f.file_name);
            for file_name in staged.file.iter().map(|f| &f.file_name).chain(finished) {
                let _ = std::fs::remove_file(self.staging_dir.join(file_name));
            }
        }
    }

    fn discard_segments(&self, header: &WalHeader) {
        if let WalHeader::Prepare { entries, .. } = header {
            for entry in entries {
                if let EntryData::Segment { file_name, .. } = &entry.data {
                    let _ = std::fs::remove_file(self.staging_dir.join(file_name));
                }
            }
        }
    }

    fn partition(&self, table_id: TableId, partition: PartitionId) -> StorageResult<Arc<Mutex<Partition>>> {
        let mut partitions = lock(&self.partitions);
        if let Some(existing) = partitions.get(&(table_id, partition)) {
            return Ok(existing.clone());
        }
        let dir = self.tables_dir.join(table_id.to_string()).join(partition.to_string());
        let opened = Arc::new(Mutex::new(Partition::open(dir, &self.tables_dir)?));
        partitions.insert((table_id, partition), opened.clone());
        Ok(opened)
    }

    fn load_partitions(&self) -> StorageResult<()> {
        for table_entry in read_dir(&self.tables_dir)? {
            let Some(table_id) = file_name_number::<TableId>(&table_entry) else { continue };
            for partition_entry in read_dir(&table_entry)? {
                let Some(partition) = file_name_number::<PartitionId>(&partition_entry) else { continue };
                self.partition(table_id, partition)?;
            }
        }
        Ok(())
    }

    fn forget_table(&self, table_id: TableId) -> StorageResult<()> {
        lock(&self.dropped_tables).insert(table_id);
        lock(&self.partitions).retain(|(table, _), _| *table != table_id);
        let dir = self.tables_dir.join(table_id.to_string());
        if dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(|e| StorageError::io(&dir, e))?;
            foam_common::fs::sync_dir(&self.tables_dir)?;
        }
        Ok(())
    }

    /// Staged files of transactions that never prepared (the node crashed first).
    fn remove_orphan_staging_files(&self) -> StorageResult<()> {
        let mut referenced = HashSet::new();
        for prepared in lock(&self.prepared).values() {
            if let WalHeader::Prepare { entries, .. } = &prepared.header {
                for entry in entries {
                    if let EntryData::Segment { file_name, .. } = &entry.data {
                        referenced.insert(file_name.clone());
                    }
                }
            }
        }
        for path in read_dir(&self.staging_dir)? {
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
            if !referenced.contains(&name) {
                std::fs::remove_file(&path).map_err(|e| StorageError::io(&path, e))?;
            }
        }
        Ok(())
    }
}

/// The engine's locks guard plain data whose invariants hold between
/// statements, so a panic elsewhere must not wedge the node.
/// The entries of a Prepare record (none of any other).
fn entries_of(header: &WalHeader) -> &[PreparedEntry] {
    match header {
        WalHeader::Prepare { entries, .. } => entries,
        _ => &[],
    }
}

/// A transaction's new rows without the ones it deletes again (a block that
/// inserts a row and then updates or deletes it), per entry as `inline`
/// holds them, and per partition the deleted rows its new rows did not
/// cover. A pure function of the Prepare record, so replay gets the same.
fn cancel_own_rows(
    entries: &[PreparedEntry],
    inline: &[Option<Vec<RecordBatch>>],
) -> StorageResult<(EntryRows, HashMap<PartitionKey, RowSet>)> {
    let mut gone: HashMap<PartitionKey, RowSet> = HashMap::new();
    for (entry, rows) in entries.iter().zip(inline) {
        if let (EntryData::Delete { .. }, Some(rows)) = (&entry.data, rows) {
            for batch in rows {
                match gone.entry((entry.table_id, entry.partition)) {
                    std::collections::hash_map::Entry::Occupied(mut set) => set.get_mut().add(batch)?,
                    std::collections::hash_map::Entry::Vacant(slot) => {
                        let mut set = RowSet::new(&batch.schema())?;
                        set.add(batch)?;
                        slot.insert(set);
                    }
                }
            }
        }
    }
    let mut kept = Vec::with_capacity(inline.len());
    for (entry, rows) in entries.iter().zip(inline) {
        kept.push(match (&entry.data, rows, gone.get_mut(&(entry.table_id, entry.partition))) {
            (EntryData::Inline { .. }, Some(rows), Some(set)) if !set.is_empty() => Some(
                rows.iter()
                    .map(|batch| set.take_from(batch).map(|(left, _)| left))
                    .filter(|left| left.as_ref().map_or(true, |b| b.num_rows() > 0))
                    .collect::<StorageResult<Vec<_>>>()?,
            ),
            (_, rows, _) => rows.clone(),
        });
    }
    Ok((kept, gone))
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn read_dir(dir: &Path) -> StorageResult<Vec<PathBuf>> {
    let mut paths = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| StorageError::io(dir, e))? {
        paths.push(entry.map_err(|e| StorageError::io(dir, e))?.path());
    }
    Ok(paths)
}

fn file_name_number<T: std::str::FromStr>(path: &Path) -> Option<T> {
    path.file_name()?.to_str()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("foam-engine-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    fn batch(start: i64, rows: usize) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new("v", DataType::Utf8, true),
        ]));
        let keys = Int64Array::from_iter_values(start..start + rows as i64);
        let values = StringArray::from_iter_values((0..rows).map(|i| format!("value-{i:08}-padding-padding")));
        RecordBatch::try_new(schema, vec![Arc::new(keys), Arc::new(values)]).unwrap()
    }

    fn no_keys(_: TableId) -> Vec<UniqueKey> {
        Vec::new()
    }

    /// Table 10's column `k` is its primary key; other tables have none.
    fn k_is_unique(table: TableId) -> Vec<UniqueKey> {
        let key = UniqueKey { name: "t_pkey".into(), columns: vec![0], column_names: vec!["k".into()] };
        if table == 10 { vec![key] } else { Vec::new() }
    }

    #[test]
    fn a_duplicate_key_votes_no_against_committed_prepared_and_its_own_rows() {
        let dir = temp_dir("unique");
        {
            let engine = StorageEngine::open(&dir).unwrap();
            commit_rows(&engine, 1, 10, vec![batch(0, 100)], &k_is_unique);
            // Against committed rows; the refused transaction leaves nothing.
            engine.stage(2, 1, 10, 0, 0, vec![batch(99, 2)]).unwrap();
            assert_eq!(engine.prepare(2, 2, 0, &k_is_unique).unwrap_err().sqlstate(), "23505");
            // Against another transaction prepared and not yet decided.
            engine.stage(3, 1, 10, 0, 0, vec![batch(100, 10)]).unwrap();
            engine.prepare(3, 10, 0, &k_is_unique).unwrap();
            engine.stage(4, 1, 10, 0, 0, vec![batch(105, 1)]).unwrap();
            assert_eq!(engine.prepare(4, 1, 0, &k_is_unique).unwrap_err().sqlstate(), "23505");
            // Within its own rows, even when they are big enough to be a staged file.
            engine.stage(5, 1, 10, 0, 0, vec![batch(1_000, 40_000), batch(40_999, 1)]).unwrap();
            assert_eq!(engine.prepare(5, 40_001, 0, &k_is_unique).unwrap_err().sqlstate(), "23505");
            // Another partition, or a table without keys, may hold the same values.
            engine.stage(6, 1, 10, 1, 0, vec![batch(0, 10)]).unwrap();
            engine.stage(6, 1, 11, 0, 0, vec![batch(0, 10)]).unwrap();
            engine.prepare(6, 20, 0, &k_is_unique).unwrap();
            engine.commit(6, 0).unwrap();
            assert_eq!(rows_in(&engine, 10, 0), 100);
        }
        // After a restart transaction 3 is still in doubt, and still holds its keys.
        let engine = StorageEngine::open(&dir).unwrap();
        engine.stage(7, 1, 10, 0, 0, vec![batch(109, 1)]).unwrap();
        assert_eq!(engine.prepare(7, 1, 0, &k_is_unique).unwrap_err().sqlstate(), "23505");
        engine.abort(3).unwrap();
        commit_rows(&engine, 8, 10, vec![batch(109, 1)], &k_is_unique);
        assert_eq!(rows_in(&engine, 10, 0), 101);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn rows_in(engine: &StorageEngine, table: TableId, partition: PartitionId) -> u64 {
        let snapshot = engine.snapshot(table, partition).unwrap();
        let mut rows: u64 = snapshot.memtable.iter().map(|b| b.num_rows() as u64).sum();
        for segment in snapshot.segments {
            for batch in segment::SegmentRows::of(&segment, None).unwrap() {
                rows += batch.unwrap().num_rows() as u64;
            }
        }
        assert_eq!(rows, engine.stats(table, partition).rows, "stats must agree with the data");
        rows
    }

    #[test]
    fn committed_rows_survive_restart_and_aborted_rows_vanish() {
        let dir = temp_dir("restart");
        {
            let engine = StorageEngine::open(&dir).unwrap();
            engine.stage(1, 1, 10, 0, 0, vec![batch(0, 100)]).unwrap();
            engine.stage(1, 1, 10, 1, 0, vec![batch(100, 50)]).unwrap();
            engine.prepare(1, 150, 0, &no_keys).unwrap();
            engine.commit(1, 0).unwrap();
            engine.stage(2, 1, 10, 0, 0, vec![batch(0, 7)]).unwrap();
            engine.prepare(2, 7, 0, &no_keys).unwrap();
            engine.abort(2).unwrap();
            engine.stage(3, 1, 10, 0, 0, vec![batch(0, 9)]).unwrap();
            // Transaction 3 never prepares: the "crash" below loses it, as it must.
            assert_eq!(rows_in(&engine, 10, 0), 100);
        }
        let engine = StorageEngine::open(&dir).unwrap();
        assert_eq!(rows_in(&engine, 10, 0), 100);
        assert_eq!(rows_in(&engine, 10, 1), 50);
        assert!(engine.in_doubt().is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn small_staged_batches_are_joined_before_they_reach_the_memtable_and_the_wal() {
        let dir = temp_dir("coalesce");
        let keys_of = |batches: &[RecordBatch]| -> Vec<i64> {
            batches.iter().flat_map(|b| b.column(0).as_any().downcast_ref::<Int64Array>().unwrap().values().to_vec()).collect()
        };
        // 40 pieces of 500 rows (as a writer's split leaves them), one large
        // batch, then 3 more small pieces: 20,000 + 6,000 + 1,500 rows.
        let mut pieces: Vec<RecordBatch> = (0..40).map(|i| batch(i * 500, 500)).collect();
        pieces.push(batch(20_000, 6_000));
        pieces.extend((0..3).map(|i| batch(26_000 + i * 500, 500)));
        let expected = keys_of(&pieces);
        {
            let engine = StorageEngine::open(&dir).unwrap();
            engine.stage(31, 1, 16, 0, 0, pieces).unwrap();
            engine.prepare(31, 27_500, 0, &no_keys).unwrap();
            engine.commit(31, 0).unwrap();
            let memtable = engine.snapshot(16, 0).unwrap().memtable;
            let sizes: Vec<usize> = memtable.iter().map(|b| b.num_rows()).collect();
            assert_eq!(sizes, vec![8_000, 8_000, 4_000, 6_000, 1_500], "runs of small pieces joined up to BATCH_ROWS, the large batch as it was");
            assert_eq!(keys_of(&memtable), expected, "same rows, same order");
        }
        // Replayed from the WAL after a restart: the joined batches again.
        let engine = StorageEngine::open(&dir).unwrap();
        let memtable = engine.snapshot(16, 0).unwrap().memtable;
        assert_eq!(memtable.len(), 5);
        assert_eq!(keys_of(&memtable), expected);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn prepare_votes_no_when_staged_rows_went_missing() {
        let dir = temp_dir("missing");
        let engine = StorageEngine::open(&dir).unwrap();
        engine.stage(21, 1, 15, 0, 0, vec![batch(0, 10)]).unwrap();
        let error = engine.prepare(21, 25, 0, &no_keys).unwrap_err();
        assert_eq!(error.sqlstate(), "40000");
        assert!(engine.in_doubt().is_empty(), "a no vote leaves nothing prepared");
        engine.commit(21, 0).unwrap();
        assert_eq!(rows_in(&engine, 15, 0), 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn large_transaction_goes_through_a_staged_segment() {
        let dir = temp_dir("large");
        {
            let engine = StorageEngine::open(&dir).unwrap();
            for chunk in 0..40 {
                engine.stage(5, 1, 11, 3, 0, vec![batch(chunk * 5000, 5000)]).unwrap();
            }
            engine.prepare(5, 200_000, 0, &no_keys).unwrap();
            assert_eq!(std::fs::read_dir(dir.join("staging")).unwrap().count(), 1, "rows spilled to one staged file");
            engine.commit(5, 0).unwrap();
            assert_eq!(rows_in(&engine, 11, 3), 200_000);
            assert_eq!(engine.snapshot(11, 3).unwrap().segments.len(), 1);
        }
        let engine = StorageEngine::open(&dir).unwrap();
        assert_eq!(rows_in(&engine, 11, 3), 200_000);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn staged_count(engine: &StorageEngine, txn: TxnId, before: StatementNumber, partition: PartitionId) -> usize {
        let own = OwnWrites { txn, before };
        let count = engine.staged_row_count(own, (11, partition));
        let rows: usize = engine.staged_rows(own, (11, partition), Some(&[0])).unwrap().iter().map(|b| b.num_rows()).sum();
        let deleted: usize = engine.staged_deletes(own, (11, partition)).iter().map(|b| b.num_rows()).sum();
        assert_eq!(count, (rows + deleted) as u64, "the count a scan checks is the rows it reads, spilled or not, and the deletions");
        rows
    }

    #[test]
    fn a_statement_reads_the_rows_of_the_statements_before_it_and_not_its_own() {
        let dir = temp_dir("own-writes");
        let engine = StorageEngine::open(&dir).unwrap();
        let stage = |statement, start, rows| engine.stage_statement(6, 1, (11, 2), 0, statement, vec![batch(start, rows)]).unwrap();
        stage(1, 0, 10);
        assert_eq!(staged_count(&engine, 6, 1, 2), 0, "statement 1 does not see its own rows");
        assert_eq!(staged_count(&engine, 6, 2, 2), 10);
        // Statement 2 stages enough to spill to a file while statement 3 reads.
        for chunk in 0..30 {
            stage(2, 1_000 + chunk * 5000, 5000);
        }
        assert_eq!(staged_count(&engine, 6, 2, 2), 10, "statement 2's spilled rows are not visible to it");
        assert_eq!(staged_count(&engine, 6, 3, 2), 150_010, "a later statement reads spilled rows back");
        stage(3, 500_000, 7);
        assert_eq!(staged_count(&engine, 6, 4, 2), 150_017);
        assert_eq!(staged_count(&engine, 6, 4, 5), 0, "another partition");
        assert_eq!(staged_count(&engine, 99, 4, 2), 0, "another transaction");
        let swapped = engine.staged_rows(OwnWrites { txn: 6, before: 4 }, (11, 2), Some(&[1, 0])).unwrap();
        assert!(swapped.len() > 1);
        for batch in &swapped {
            assert_eq!(batch.schema().field(0).name(), "v", "the projection's order applies to inline and spilled rows alike");
            assert_eq!(batch.num_columns(), 2);
        }
        // Everything staged commits, inline and spilled rows alike, once.
        engine.prepare(6, 150_017, 0, &no_keys).unwrap();
        engine.commit(6, 0).unwrap();
        assert_eq!(rows_in(&engine, 11, 2), 150_017);
        assert_eq!(staged_count(&engine, 6, 9, 2), 0, "committed rows are no longer staged");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn rolling_back_to_a_statement_keeps_what_came_before_it() {
        let dir = temp_dir("rollback-to");
        let engine = StorageEngine::open(&dir).unwrap();
        engine.stage_statement(8, 1, (11, 0), 0, 1, vec![batch(0, 10)]).unwrap();
        for chunk in 0..30 {
            engine.stage_statement(8, 1, (11, 0), 0, 2, vec![batch(1_000 + chunk * 5000, 5000)]).unwrap();
        }
        engine.stage_deletes(8, 1, (11, 0), 0, 3, vec![batch(0, 1)]).unwrap();
        engine.stage_statement(8, 1, (11, 0), 0, 3, vec![batch(900, 5)]).unwrap();
        assert_eq!(staged_count(&engine, 8, 4, 0), 150_015);
        engine.rollback_statements(8, 1);
        assert_eq!(staged_count(&engine, 8, 4, 0), 10, "statement 2's spilled rows and statement 3's rows are gone");
        assert!(engine.staged_deletes(OwnWrites { txn: 8, before: 4 }, (11, 0)).is_empty());
        // Statement 1's rows were spilled along with statement 2's; only its file stays.
        let files: Vec<String> = std::fs::read_dir(dir.join("staging")).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        assert!(files.iter().all(|f| f.contains("-11-0-1-")), "statements 2 and 3's files are gone: {files:?}");
        engine.prepare(8, 10, 0, &no_keys).unwrap();
        engine.commit(8, 0).unwrap();
        assert_eq!(rows_in(&engine, 11, 0), 10);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_aborted_transaction_leaves_no_staged_file() {
        let dir = temp_dir("abort-spilled");
        let engine = StorageEngine::open(&dir).unwrap();
        for chunk in 0..30 {
            engine.stage_statement(7, 1, (11, 0), 0, 1, vec![batch(chunk * 5000, 5000)]).unwrap();
        }
        assert_eq!(staged_count(&engine, 7, 2, 0), 150_000);
        engine.abort(7).unwrap();
        assert_eq!(std::fs::read_dir(dir.join("staging")).unwrap().count(), 0);
        assert_eq!(staged_count(&engine, 7, 2, 0), 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn keys_in(engine: &StorageEngine, table: TableId, partition: PartitionId) -> Vec<i64> {
        snapshot_keys(engine.snapshot(table, partition).unwrap())
    }

    /// The sorted keys of a snapshot's rows.
    fn snapshot_keys(snapshot: PartitionSnapshot) -> Vec<i64> {
        let mut keys = Vec::new();
        let mut collect = |batch: &RecordBatch| keys.extend(batch.column(0).as_any().downcast_ref::<Int64Array>().unwrap().values().iter().copied());
        snapshot.memtable.iter().for_each(&mut collect);
        for segment in snapshot.segments {
            for batch in segment::SegmentRows::of(&segment, None).unwrap() {
                collect(&batch.unwrap());
            }
        }
        keys.sort_unstable();
        keys
    }

    /// Commits a transaction of table 10's partition 0 at `ts` (prepared just below it).
    fn commit_at(engine: &StorageEngine, txn: TxnId, ts: u64, deletes: Vec<RecordBatch>, adds: Vec<RecordBatch>, keys: &dyn Fn(TableId) -> Vec<UniqueKey>) {
        let rows: u64 = deletes.iter().chain(&adds).map(|b| b.num_rows() as u64).sum();
        if !deletes.is_empty() {
            engine.stage_deletes(txn, 1, (10, 0), 0, 0, deletes).unwrap();
        }
        if !adds.is_empty() {
            engine.stage(txn, 1, 10, 0, 0, adds).unwrap();
        }
        engine.prepare(txn, rows, ts - 1, keys).unwrap();
        engine.commit(txn, ts).unwrap();
    }

    /// Commits `rows` into partition 0 of `table` as transaction `txn`.
    fn commit_rows(engine: &StorageEngine, txn: TxnId, table: TableId, rows: Vec<RecordBatch>, unique: &dyn Fn(TableId) -> Vec<UniqueKey>) {
        let count = rows.iter().map(|b| b.num_rows() as u64).sum();
        engine.stage(txn, 1, table, 0, 0, rows).unwrap();
        engine.prepare(txn, count, 0, unique).unwrap();
        engine.commit(txn, 0).unwrap();
    }

    fn delete_rows(engine: &StorageEngine, txn: TxnId, table: TableId, rows: RecordBatch) {
        let count = rows.num_rows() as u64;
        engine.stage_deletes(txn, 1, (table, 0), 0, 0, vec![rows]).unwrap();
        engine.prepare(txn, count, 0, &no_keys).unwrap();
        engine.commit(txn, 0).unwrap();
    }

    #[test]
    fn deletions_are_positions_that_replay_adds_once_even_for_equal_rows() {
        let dir = temp_dir("deletion-vectors");
        let all = batch(0, 10);
        {
            let engine = StorageEngine::open(&dir).unwrap();
            commit_rows(&engine, 1, 10, vec![all.clone()], &no_keys);
            engine.flush_partition(10, 0).unwrap();
            let written = engine.segments(10, 0);
            // Row 3 twice (once in the segment, once in the memtable), row 5 once.
            commit_rows(&engine, 2, 10, vec![all.slice(3, 1)], &no_keys);
            delete_rows(&engine, 3, 10, all.slice(3, 1));
            delete_rows(&engine, 4, 10, all.slice(5, 1));
            assert_eq!(keys_in(&engine, 10, 0), vec![0, 1, 2, 3, 4, 6, 7, 8, 9]);
            // The deletion left the file as it was and marked one position in it.
            let listed = engine.segments(10, 0);
            assert_eq!((listed.len(), &listed[0].file_name, listed[0].deleted.len()), (1, &written[0].file_name, 1));
            // Saved in the manifest (memtable empty of live rows) before the crash.
            engine.flush_partition(10, 0).unwrap();
        }
        for round in 0..2 {
            // Replay adds each commit's positions again: the second row 3 stays.
            let engine = StorageEngine::open(&dir).unwrap();
            assert_eq!(keys_in(&engine, 10, 0), vec![0, 1, 2, 3, 4, 6, 7, 8, 9], "after restart {round}");
            engine.checkpoint_now().unwrap();
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_keyed_table_finds_changed_rows_through_its_index() {
        let dir = temp_dir("key-index");
        let all = batch(0, 100);
        // Row 5 with another value, as an UPDATE that keeps its key writes it.
        let changed = RecordBatch::try_new(all.schema(), vec![Arc::new(Int64Array::from(vec![5])), Arc::new(StringArray::from(vec!["changed"]))]).unwrap();
        {
            let engine = StorageEngine::open(&dir).unwrap();
            commit_rows(&engine, 1, 10, vec![all.clone()], &k_is_unique);
            engine.flush_partition(10, 0).unwrap();
            engine.stage_deletes(2, 1, (10, 0), 0, 0, vec![all.slice(5, 1)]).unwrap();
            engine.stage(2, 1, 10, 0, 0, vec![changed.clone()]).unwrap();
            engine.prepare(2, 2, 0, &k_is_unique).unwrap();
            engine.commit(2, 0).unwrap();
            // The old row 5 is gone: deleting it again is a lost update.
            engine.stage_deletes(3, 1, (10, 0), 0, 0, vec![all.slice(5, 1)]).unwrap();
            assert_eq!(engine.prepare(3, 1, 0, &k_is_unique).unwrap_err().sqlstate(), "40001");
            engine.stage(4, 1, 10, 0, 0, vec![all.slice(7, 1)]).unwrap();
            assert_eq!(engine.prepare(4, 1, 0, &k_is_unique).unwrap_err().sqlstate(), "23505");
            // The new row 5 lives in the memtable, row 9 in the segment.
            engine.stage_deletes(5, 1, (10, 0), 0, 0, vec![changed.clone(), all.slice(9, 1)]).unwrap();
            engine.prepare(5, 2, 0, &k_is_unique).unwrap();
            engine.commit(5, 0).unwrap();
            let expected: Vec<i64> = (0..100).filter(|k| *k != 5 && *k != 9).collect();
            assert_eq!(keys_in(&engine, 10, 0), expected);
            commit_rows(&engine, 6, 10, vec![changed.clone()], &k_is_unique);
        }
        let engine = StorageEngine::open(&dir).unwrap();
        let expected: Vec<i64> = (0..100).filter(|k| *k != 9).collect();
        assert_eq!(keys_in(&engine, 10, 0), expected, "after replay");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_point_read_through_the_key_index_sees_its_snapshot() {
        let dir = temp_dir("point-read");
        let engine = StorageEngine::open(&dir).unwrap();
        let commit = |txn, ts, deletes, adds| commit_at(&engine, txn, ts, deletes, adds, &k_is_unique);
        // Keys 0..100 in a segment, 100..110 in the memtable; 5 and 105
        // deleted at 300.
        commit(1, 100, vec![], vec![batch(0, 100)]);
        engine.flush_partition(10, 0).unwrap();
        commit(2, 200, vec![], vec![batch(100, 10)]);
        commit(3, 300, vec![batch(0, 100).slice(5, 1), batch(100, 10).slice(5, 1)], vec![]);
        let probe = KeyProbe { columns: vec![0], rows: RecordBatch::try_from_iter([("k", Arc::new(Int64Array::from(vec![5, 7, 105, 107, 500])) as _)]).unwrap() };
        let read = |ts: Option<u64>| match engine.try_snapshot_at(10, 0, ts, Some(&probe)).unwrap() {
            SnapshotRead::Ready(read) => snapshot_keys(read.unwrap()),
            SnapshotRead::Wait => panic!("nothing is pending"),
        };
        // Only the probed rows are read, as each snapshot sees them.
        assert_eq!(read(Some(150)), vec![5, 7]);
        assert_eq!(read(Some(250)), vec![5, 7, 105, 107]);
        assert_eq!(read(Some(300)), vec![7, 107]);
        assert_eq!(read(None), vec![7, 107]);
        // A flush moves the rows; the index follows them, and a snapshot from
        // before the flush reads the kept version whole.
        engine.flush_partition(10, 0).unwrap();
        assert_eq!(read(None), vec![7, 107]);
        let before_flush = read(Some(250));
        assert_eq!(before_flush.len(), 110, "the version before the flush, read whole");
        assert_eq!(before_flush.iter().filter(|k| [5, 7, 105, 107, 500].contains(*k)).collect::<Vec<_>>(), vec![&5, &7, &105, &107]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn copies_holding_the_same_rows_in_other_files_and_order_have_one_digest() {
        let (left, right) = (StorageEngine::open(&temp_dir("digest-a")).unwrap(), StorageEngine::open(&temp_dir("digest-b")).unwrap());
        // One copy in a segment and the memtable, the other in its memtable
        // only, its rows written in another order.
        commit_rows(&left, 1, 10, vec![batch(0, 6)], &no_keys);
        left.flush_partition(10, 0).unwrap();
        commit_rows(&left, 2, 10, vec![batch(6, 4)], &no_keys);
        commit_rows(&right, 1, 10, vec![batch(6, 4), batch(0, 6).slice(3, 3)], &no_keys);
        commit_rows(&right, 2, 10, vec![batch(0, 6).slice(0, 3)], &no_keys);
        let digest = |engine: &StorageEngine| engine.digests(10, vec![0, 1]).unwrap();
        assert_eq!(digest(&left)[0].1.rows, 10);
        assert_eq!(digest(&left), digest(&right));
        assert_eq!(digest(&left)[1].1, RowDigest::default(), "a partition stored nowhere here holds no rows");
        // The same count, one row different: the digests differ.
        commit_rows(&left, 3, 10, vec![batch(20, 1)], &no_keys);
        commit_rows(&right, 3, 10, vec![batch(21, 1)], &no_keys);
        assert_eq!(digest(&left)[0].1.rows, digest(&right)[0].1.rows);
        assert_ne!(digest(&left), digest(&right));
    }

    #[test]
    fn deleted_rows_a_transaction_holds_are_bounded_and_freed_by_a_rollback_to() {
        let engine = StorageEngine::open(&temp_dir("delete-bound")).unwrap();
        // One 40 MiB row, staged again and again (its memory counts each time).
        let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false), Field::new("v", DataType::Utf8, true)]));
        let big = RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(vec![1])), Arc::new(StringArray::from(vec!["x".repeat(40 << 20)]))]).unwrap();
        let fits = STAGE_DELETE_BYTES_PER_TXN_MAX / big.get_array_memory_size();
        for statement in 1..=fits as StatementNumber {
            engine.stage_deletes(1, 1, (10, statement % 3), 0, statement, vec![big.clone()]).unwrap();
        }
        let error = engine.stage_deletes(1, 1, (10, 0), 0, 100, vec![big.clone()]).unwrap_err();
        assert_eq!(error.sqlstate(), "54000", "{error}");
        // Rolling back to after statement 2 frees what later statements held.
        engine.rollback_statements(1, 2);
        for statement in 3..=fits as StatementNumber {
            engine.stage_deletes(1, 1, (10, 0), 0, statement, vec![big.clone()]).unwrap();
        }
        assert!(engine.stage_deletes(1, 1, (10, 0), 0, 100, vec![big]).is_err());
    }

    #[test]
    fn deletions_find_rows_by_content_in_segments_and_memtable_and_survive_replay() {
        let dir = temp_dir("delete");
        let early;
        {
            let engine = StorageEngine::open(&dir).unwrap();
            commit_rows(&engine, 1, 10, vec![batch(0, 6)], &no_keys);
            engine.flush_partition(10, 0).unwrap();
            commit_rows(&engine, 2, 10, vec![batch(6, 4), batch(0, 1)], &no_keys);
            assert_eq!(keys_in(&engine, 10, 0), vec![0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
            early = engine.snapshot(10, 0).unwrap();
            // Key 0 twice (once in the segment, once in the memtable), key 7,
            // and a row the same transaction adds and deletes again.
            engine.stage_deletes(3, 1, (10, 0), 0, 1, vec![batch(0, 1), batch(0, 1), batch(6, 4).slice(1, 1)]).unwrap();
            engine.stage_statement(3, 1, (10, 0), 0, 1, vec![batch(100, 2)]).unwrap();
            engine.stage_deletes(3, 1, (10, 0), 0, 2, vec![batch(100, 1)]).unwrap();
            assert_eq!(engine.staged_deletes(OwnWrites { txn: 3, before: 2 }, (10, 0)).len(), 3, "statement 2's deletions are not visible to it");
            engine.prepare(3, 6, 0, &no_keys).unwrap();
            engine.commit(3, 0).unwrap();
            assert_eq!(keys_in(&engine, 10, 0), vec![1, 2, 3, 4, 5, 6, 8, 9, 101]);
            // A scan that started before the deletion still reads its files.
            let before: usize = early.segments.iter().map(|s| segment::SegmentRows::of(s, None).unwrap().count()).sum();
            assert!(before > 0);
            engine.stage_deletes(4, 1, (10, 0), 0, 0, vec![batch(6, 4).slice(3, 1)]).unwrap();
            engine.prepare(4, 1, 0, &no_keys).unwrap();
            engine.commit(4, 0).unwrap();
        }
        drop(early);
        let engine = StorageEngine::open(&dir).unwrap();
        assert_eq!(keys_in(&engine, 10, 0), vec![1, 2, 3, 4, 5, 6, 8, 101], "replay deletes nothing twice and loses no deletion");
        let listed = engine.segments(10, 0).len();
        let files = std::fs::read_dir(dir.join("tables/10/0")).unwrap().filter(|e| e.as_ref().unwrap().file_name() != "manifest.json").count();
        assert_eq!(files, listed, "replaced segment files are gone once no snapshot holds them");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The keys partition 0 of `table` holds at snapshot `ts`.
    fn keys_at(engine: &StorageEngine, table: TableId, ts: u64) -> Result<Vec<i64>, StorageError> {
        Ok(engine.snapshot_at(table, 0, ts, None)?.map(snapshot_keys).unwrap_or_default())
    }

    #[test]
    fn a_read_at_a_snapshot_sees_the_commits_up_to_it_through_flushes_deletions_and_restarts() {
        let dir = temp_dir("mvcc");
        {
            let engine = StorageEngine::open(&dir).unwrap();
            let commit = |txn, ts, deletes, adds| commit_at(&engine, txn, ts, deletes, adds, &no_keys);
            commit(1, 100, vec![], vec![batch(0, 3)]);
            commit(2, 200, vec![], vec![batch(3, 2)]);
            assert_eq!(keys_at(&engine, 10, 99).unwrap(), Vec::<i64>::new());
            assert_eq!(keys_at(&engine, 10, 150).unwrap(), vec![0, 1, 2]);
            engine.flush_partition(10, 0).unwrap();
            assert_eq!(keys_at(&engine, 10, 150).unwrap(), vec![0, 1, 2], "the flush keeps the version before it");
            // An update at 300: key 1 deleted, key 7 added.
            commit(3, 300, vec![batch(0, 3).slice(1, 1)], vec![batch(7, 1)]);
            commit(4, 400, vec![], vec![batch(9, 1)]);
            assert_eq!(keys_at(&engine, 10, 150).unwrap(), vec![0, 1, 2]);
            assert_eq!(keys_at(&engine, 10, 299).unwrap(), vec![0, 1, 2, 3, 4]);
            assert_eq!(keys_at(&engine, 10, 300).unwrap(), vec![0, 2, 3, 4, 7]);
            assert_eq!(keys_at(&engine, 10, 1000).unwrap(), vec![0, 2, 3, 4, 7, 9]);
            assert_eq!(keys_in(&engine, 10, 0), vec![0, 2, 3, 4, 7, 9], "the newest rows");
            // A transaction prepared at 450 holds back reads above it until
            // it is decided; reads at or below 450 go on.
            engine.stage(5, 1, 10, 0, 0, vec![batch(20, 1)]).unwrap();
            engine.prepare(5, 1, 450, &no_keys).unwrap();
            assert!(matches!(engine.try_snapshot_at(10, 0, Some(450), None).unwrap(), SnapshotRead::Ready(_)));
            assert!(matches!(engine.try_snapshot_at(10, 0, Some(451), None).unwrap(), SnapshotRead::Wait));
            assert!(engine.try_snapshot_at(10, 1, Some(451), None).is_ok_and(|r| matches!(r, SnapshotRead::Ready(None))), "another partition");
            engine.commit(5, 500).unwrap();
            assert_eq!(keys_at(&engine, 10, 499).unwrap(), vec![0, 2, 3, 4, 7, 9]);
            assert_eq!(keys_at(&engine, 10, 500).unwrap(), vec![0, 2, 3, 4, 7, 9, 20]);
        }
        // Versions live in memory: after a restart, snapshots from before
        // the newest segment list are refused (40001), later ones served.
        let engine = StorageEngine::open(&dir).unwrap();
        let error = keys_at(&engine, 10, 150).unwrap_err();
        assert_eq!(error.sqlstate(), "40001", "{error}");
        assert_eq!(keys_at(&engine, 10, 450).unwrap(), vec![0, 2, 3, 4, 7, 9], "the replayed memtable keeps its timestamps");
        assert_eq!(keys_at(&engine, 10, 500).unwrap(), vec![0, 2, 3, 4, 7, 9, 20]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn replaced_versions_are_forgotten_after_the_retention() {
        let dir = temp_dir("mvcc-retention");
        let engine = StorageEngine::open(&dir).unwrap();
        engine.stage(1, 1, 10, 0, 0, vec![batch(0, 10)]).unwrap();
        engine.prepare(1, 10, 99, &no_keys).unwrap();
        engine.commit(1, 100).unwrap();
        engine.flush_partition(10, 0).unwrap();
        engine.partition(10, 0).unwrap().lock().unwrap().set_retention(Duration::ZERO);
        engine.stage_deletes(2, 1, (10, 0), 0, 0, vec![batch(0, 1)]).unwrap();
        engine.prepare(2, 1, 199, &no_keys).unwrap();
        engine.commit(2, 200).unwrap();
        // A deletion replaces no version: its vector keeps the row for older snapshots.
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(keys_at(&engine, 10, 150).unwrap(), (0..10).collect::<Vec<_>>());
        // With three of its ten rows deleted a flush rewrites the segment, which replaces the version.
        engine.stage_deletes(3, 1, (10, 0), 0, 0, vec![batch(0, 10).slice(1, 2)]).unwrap();
        engine.prepare(3, 2, 299, &no_keys).unwrap();
        engine.commit(3, 300).unwrap();
        engine.flush_partition(10, 0).unwrap();
        std::thread::sleep(Duration::from_millis(5));
        let error = keys_at(&engine, 10, 150).unwrap_err();
        assert_eq!(error.sqlstate(), "40001", "{error}");
        assert_eq!(keys_at(&engine, 10, 300).unwrap(), (3..10).collect::<Vec<_>>());
        let listed = engine.segments(10, 0);
        assert!(listed.len() == 1 && listed[0].deleted.is_empty() && listed[0].rows == 7, "{listed:?}");
        let files = std::fs::read_dir(dir.join("tables/10/0")).unwrap().filter(|e| e.as_ref().unwrap().file_name() != "manifest.json").count();
        assert_eq!(files, 1, "the replaced segment went with its version");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn repeated_small_updates_leave_one_segment_not_one_per_commit() {
        let dir = temp_dir("updates-merge");
        let engine = StorageEngine::open(&dir).unwrap();
        commit_rows(&engine, 1, 10, vec![batch(0, 1000)], &no_keys);
        engine.flush_partition(10, 0).unwrap();
        let rows = batch(0, 1000);
        for round in 0..30u128 {
            // Row `round` is replaced by itself under another key: delete, add.
            let old = rows.slice(round as usize, 1);
            engine.stage_deletes(100 + round, 1, (10, 0), 0, 0, vec![old]).unwrap();
            engine.stage(100 + round, 1, 10, 0, 0, vec![batch(10_000 + round as i64, 1)]).unwrap();
            engine.prepare(100 + round, 2, 0, &no_keys).unwrap();
            engine.commit(100 + round, 0).unwrap();
            assert_eq!(engine.segments(10, 0).len(), 1, "after update {round}");
        }
        let keys = keys_in(&engine, 10, 0);
        assert_eq!(keys.len(), 1000);
        assert_eq!((keys[0], keys[969], keys[970], keys[999]), (30, 999, 10_000, 10_029));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_first_to_prepare_a_deletion_wins_and_a_missing_row_is_40001() {
        let dir = temp_dir("delete-conflict");
        let engine = StorageEngine::open(&dir).unwrap();
        commit_rows(&engine, 1, 10, vec![batch(0, 3)], &k_is_unique);
        // Two transactions update key 1 (delete the old row, add a new one).
        for txn in [2, 3] {
            engine.stage_deletes(txn, 1, (10, 0), 0, 0, vec![batch(1, 1)]).unwrap();
            engine.stage(txn, 1, 10, 0, 0, vec![batch(1, 1)]).unwrap();
        }
        engine.prepare(2, 2, 0, &k_is_unique).unwrap();
        let error = engine.prepare(3, 2, 0, &k_is_unique).unwrap_err();
        assert_eq!(error.sqlstate(), "40001", "{error}");
        engine.commit(2, 0).unwrap();
        assert_eq!(keys_in(&engine, 10, 0), vec![0, 1, 2]);
        // A row that is not there at all.
        engine.stage_deletes(4, 1, (10, 0), 0, 0, vec![batch(50, 1)]).unwrap();
        assert_eq!(engine.prepare(4, 1, 0, &no_keys).unwrap_err().sqlstate(), "40001");
        // A transaction that updates its own new row again keeps one key.
        engine.stage_deletes(6, 1, (10, 0), 0, 1, vec![batch(0, 1)]).unwrap();
        engine.stage_statement(6, 1, (10, 0), 0, 1, vec![batch(-1, 2).slice(1, 1)]).unwrap();
        engine.stage_deletes(6, 1, (10, 0), 0, 2, vec![batch(-1, 2).slice(1, 1)]).unwrap();
        engine.stage_statement(6, 1, (10, 0), 0, 2, vec![batch(-2, 3).slice(2, 1)]).unwrap();
        engine.prepare(6, 4, 0, &k_is_unique).unwrap();
        engine.abort(6).unwrap();
        // A new key still cannot duplicate a kept one.
        engine.stage_deletes(5, 1, (10, 0), 0, 0, vec![batch(0, 1)]).unwrap();
        engine.stage(5, 1, 10, 0, 0, vec![batch(2, 1)]).unwrap();
        assert_eq!(engine.prepare(5, 2, 0, &k_is_unique).unwrap_err().sqlstate(), "23505");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A segment as the bulk loader builds it: bytes and their checksums.
    fn built_segment(start: i64, rows: usize) -> (bytes::Bytes, segment::Checksums) {
        let rows = batch(start, rows);
        let pieces = Arc::new(Mutex::new(Vec::new()));
        let shipped = pieces.clone();
        let mut builder = segment::SegmentBuilder::new(&rows.schema(), &rows, move |piece| {
            lock(&shipped).extend_from_slice(&piece);
            Ok(())
        })
        .unwrap();
        builder.write(&rows).unwrap();
        let sum = builder.finish().unwrap();
        let data = bytes::Bytes::from(std::mem::take(&mut *lock(&pieces)));
        (data, segment::Checksums { crc32: Some(sum.crc32), blocks: sum.blocks })
    }

    /// Receives `data` as a loader streams it (in pieces) and stages it.
    #[allow(clippy::too_many_arguments)]
    fn stage_segment(
        engine: &StorageEngine,
        txn: TxnId,
        coordinator: NodeId,
        table_id: TableId,
        partition: PartitionId,
        placement_version: u64,
        rows: u64,
        data: &bytes::Bytes,
        checksums: &segment::Checksums,
        schema: &arrow::datatypes::SchemaRef,
    ) -> StorageResult<()> {
        let mut received = engine.receive_segment(txn, coordinator, table_id, partition, placement_version)?;
        for piece in data.chunks(1000) {
            received.append(piece)?;
        }
        engine.stage_received(received, rows, checksums, schema)
    }

    #[test]
    fn a_segment_stream_that_breaks_off_leaves_nothing_staged() {
        let dir = temp_dir("broken-off");
        let engine = StorageEngine::open(&dir).unwrap();
        let (data, _) = built_segment(0, 100);
        let mut received = engine.receive_segment(51, 1, 17, 0, 0).unwrap();
        received.append(&data[..data.len() / 2]).unwrap();
        assert_eq!(std::fs::read_dir(dir.join("staging")).unwrap().count(), 1, "bytes go to disk as they come");
        drop(received);
        assert_eq!(std::fs::read_dir(dir.join("staging")).unwrap().count(), 0, "a stream that ended early leaves no file");
        engine.prepare(51, 100, 0, &no_keys).expect_err("and no staged rows");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn segments_built_by_a_loader_commit_beside_rows_and_vanish_on_abort() {
        let dir = temp_dir("received");
        let schema = batch(0, 1).schema();
        {
            let engine = StorageEngine::open(&dir).unwrap();
            let (first, first_sums) = built_segment(0, 300);
            let (second, second_sums) = built_segment(300, 200);
            stage_segment(&engine, 31, 1, 16, 2, 0, 300, &first, &first_sums, &schema).unwrap();
            stage_segment(&engine, 31, 1, 16, 2, 0, 200, &second, &second_sums, &schema).unwrap();
            engine.stage(31, 1, 16, 2, 0, vec![batch(500, 5)]).unwrap();
            engine.prepare(31, 505, 0, &no_keys).unwrap();
            engine.commit(31, 0).unwrap();
            assert_eq!(rows_in(&engine, 16, 2), 505);
            assert_eq!(engine.snapshot(16, 2).unwrap().segments.len(), 2, "each received segment is listed as it came");

            stage_segment(&engine, 32, 1, 16, 2, 0, 300, &first, &first_sums, &schema).unwrap();
            assert_eq!(std::fs::read_dir(dir.join("staging")).unwrap().count(), 1, "a received segment is on disk before prepare");
            engine.abort(32).unwrap();
            assert_eq!(std::fs::read_dir(dir.join("staging")).unwrap().count(), 0, "an abort deletes what was received");

            stage_segment(&engine, 33, 1, 16, 2, 0, 300, &first, &first_sums, &schema).unwrap();
            engine.prepare(33, 300, 0, &no_keys).unwrap();
        }
        // Restarted, the prepared segment is in doubt and still commits.
        let engine = StorageEngine::open(&dir).unwrap();
        assert_eq!(rows_in(&engine, 16, 2), 505);
        assert_eq!(engine.in_doubt(), vec![(33, 1)]);
        engine.commit(33, 0).unwrap();
        assert_eq!(rows_in(&engine, 16, 2), 805);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn segments_set_aside_before_a_reset_are_installed_only_when_whole_and_the_rest_deleted() {
        let dir = temp_dir("set-aside");
        let schema = batch(0, 1).schema();
        let engine = StorageEngine::open(&dir).unwrap();
        let (first, first_sums) = built_segment(0, 300);
        let (second, second_sums) = built_segment(300, 200);
        stage_segment(&engine, 41, 1, 16, 2, 0, 300, &first, &first_sums, &schema).unwrap();
        stage_segment(&engine, 41, 1, 16, 2, 0, 200, &second, &second_sums, &schema).unwrap();
        engine.prepare(41, 500, 0, &no_keys).unwrap();
        engine.commit(41, 0).unwrap();
        // The source lists the same contents under its own file names, and one file this node never had.
        let renamed = |info: &SegmentInfo| SegmentInfo { file_name: format!("source-{}", info.file_name), ..info.clone() };
        let listed: Vec<SegmentInfo> = engine.segments(16, 2).iter().map(renamed).collect();
        let (other, other_sums) = built_segment(900, 100);
        let unknown = SegmentInfo { file_name: "source-other".into(), rows: 100, bytes: other.len() as u64, crc32: other_sums.crc32, deleted: Default::default(), block_crc32: other_sums.blocks };

        let mut kept = engine.set_aside_segments(16, 2);
        engine.reset_partition(16, 2).unwrap();
        assert_eq!(rows_in(&engine, 16, 2), 0);
        let refused = |engine: &StorageEngine| matches!(engine.try_snapshot_at(16, 2, Some(u64::MAX), None), Err(e) if e.sqlstate() == "40001");
        assert!(refused(&engine), "a copy being filled in is not read");
        assert!(matches!(engine.try_snapshot_at(16, 2, None, None), Err(e) if e.sqlstate() == "40001"));
        assert_eq!(kept.take_matching(&unknown), None, "content this node never had is not found");
        let whole = kept.take_matching(&listed[0]).expect("the first file was kept");
        engine.install_segment(16, 2, &whole, listed[0].clone()).unwrap();
        assert_eq!(engine.segments(16, 2)[0].file_name, listed[0].file_name, "installed under the source's name");
        let damaged = kept.take_matching(&listed[1]).expect("the second file was kept");
        let mut bytes = std::fs::read(&damaged).unwrap();
        bytes[10] ^= 0x5a;
        std::fs::remove_file(&damaged).unwrap();
        std::fs::write(&damaged, &bytes).unwrap();
        assert!(matches!(engine.install_segment(16, 2, &damaged, listed[1].clone()), Err(StorageError::Corrupted { .. })), "a damaged kept file is refused");
        std::fs::remove_file(&damaged).unwrap();
        assert_eq!(rows_in(&engine, 16, 2), 300);
        assert!(refused(&StorageEngine::open(&dir).unwrap()), "still refused after a restart");
        engine.finish_refill(16, 2, 1_000).unwrap();
        assert!(!refused(&engine), "whole again");
        assert!(!refused(&StorageEngine::open(&dir).unwrap()));

        let mut kept = engine.set_aside_segments(16, 2);
        assert_eq!(std::fs::read_dir(dir.join("staging")).unwrap().count(), 1);
        drop(kept.take_matching(&unknown));
        drop(kept);
        assert_eq!(std::fs::read_dir(dir.join("staging")).unwrap().count(), 0, "files not taken are deleted");
        assert_eq!(rows_in(&engine, 16, 2), 300, "setting files aside leaves the partition as it was");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_received_segment_that_does_not_fit_the_table_is_refused_and_not_staged() {
        let dir = temp_dir("refused");
        let engine = StorageEngine::open(&dir).unwrap();
        let schema = batch(0, 1).schema();
        let (data, sums) = built_segment(0, 100);
        let refused = |rows: u64, data: &bytes::Bytes, sums: &segment::Checksums, schema: &arrow::datatypes::SchemaRef| {
            let error = stage_segment(&engine, 41, 1, 17, 0, 0, rows, data, sums, schema).unwrap_err();
            assert_eq!(error.sqlstate(), "XX001", "{error}");
            error.to_string()
        };
        assert!(refused(99, &data, &sums, &schema).contains("holds 100 rows, 99 were sent"));
        let mut damaged = data.to_vec();
        damaged[10] ^= 1;
        assert!(refused(100, &bytes::Bytes::from(damaged), &sums, &schema).contains("checksums"));
        let other = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false), Field::new("v", DataType::Int64, true)]));
        assert!(refused(100, &data, &sums, &other).contains("columns are not the table's"));
        // A column the table declares NOT NULL must be stored as one that cannot hold nulls.
        let stricter = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false), Field::new("v", DataType::Utf8, false)]));
        assert!(refused(100, &data, &sums, &stricter).contains("columns are not the table's"));
        assert_eq!(std::fs::read_dir(dir.join("staging")).unwrap().count(), 0, "nothing refused is kept");
        engine.prepare(41, 0, 0, &no_keys).unwrap_err();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn prepared_transaction_is_in_doubt_after_restart_and_can_commit() {
        let dir = temp_dir("doubt");
        {
            let engine = StorageEngine::open(&dir).unwrap();
            engine.stage(9, 4, 12, 0, 0, vec![batch(0, 10)]).unwrap();
            engine.prepare(9, 10, 0, &no_keys).unwrap();
        }
        let engine = StorageEngine::open(&dir).unwrap();
        assert_eq!(engine.in_doubt(), vec![(9, 4)]);
        assert_eq!(rows_in(&engine, 12, 0), 0, "in-doubt rows are not visible");
        engine.commit(9, 0).unwrap();
        assert_eq!(rows_in(&engine, 12, 0), 10);
        engine.commit(9, 0).unwrap();
        assert_eq!(rows_in(&engine, 12, 0), 10, "a retried commit is a no-op");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn checkpoint_keeps_data_and_in_doubt_transactions() {
        let dir = temp_dir("checkpoint");
        {
            let engine = StorageEngine::open(&dir).unwrap();
            commit_rows(&engine, 1, 13, vec![batch(0, 10)], &no_keys);
            engine.stage(2, 1, 13, 0, 0, vec![batch(10, 5)]).unwrap();
            engine.prepare(2, 5, 0, &no_keys).unwrap();
            engine.checkpoint_now().unwrap();
            commit_rows(&engine, 3, 13, vec![batch(15, 3)], &no_keys);
            // A large commit (a staged segment) of another table, dropped later.
            for chunk in 0..40 {
                engine.stage(4, 1, 14, 0, 0, vec![batch(chunk * 5000, 5000)]).unwrap();
            }
            engine.prepare(4, 200_000, 0, &no_keys).unwrap();
            engine.commit(4, 0).unwrap();
            engine.drop_table(14).unwrap();
        }
        let engine = StorageEngine::open(&dir).unwrap();
        assert_eq!(rows_in(&engine, 13, 0), 13, "no row applied twice or lost");
        assert_eq!(engine.in_doubt(), vec![(2, 1)]);
        engine.drop_table(13).unwrap();
        assert_eq!(rows_in(&engine, 13, 0), 0);
        drop(engine);
        let engine = StorageEngine::open(&dir).unwrap();
        assert_eq!(rows_in(&engine, 13, 0), 0, "a dropped table stays dropped after replay");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_key_added_later_waits_for_earlier_prepares_then_checks_stored_rows() {
        let dir = temp_dir("add-key");
        let engine = StorageEngine::open(&dir).unwrap();
        let key = &k_is_unique(10)[0];
        commit_rows(&engine, 1, 10, vec![batch(0, 100)], &no_keys);
        engine.validate_unique_key(10, 0, key, Duration::from_millis(50)).unwrap();
        // Prepared before the key existed, unchecked: waited for, then found.
        engine.stage(2, 1, 10, 0, 0, vec![batch(99, 1)]).unwrap();
        engine.prepare(2, 1, 0, &no_keys).unwrap();
        let error = engine.validate_unique_key(10, 0, key, Duration::from_millis(50)).unwrap_err();
        assert_eq!(error.sqlstate(), "40001", "{error}");
        engine.commit(2, 0).unwrap();
        let error = engine.validate_unique_key(10, 0, key, Duration::from_millis(50)).unwrap_err();
        assert_eq!(error.to_string(), "could not create unique index \"t_pkey\": Key (k)=(99) is duplicated");
        // Another partition's copy holds no repeated key.
        engine.stage(3, 1, 10, 1, 0, vec![batch(0, 10)]).unwrap();
        engine.prepare(3, 10, 0, &no_keys).unwrap();
        engine.commit(3, 0).unwrap();
        engine.validate_unique_key(10, 1, key, Duration::from_millis(50)).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn write_fences_refuse_writes_planned_before_a_replica_joined() {
        let dir = temp_dir("fence");
        let engine = StorageEngine::open(&dir).unwrap();
        engine.set_write_fence(16, 0, 5);
        engine.stage(1, 1, 16, 0, 4, vec![batch(0, 10)]).unwrap();
        assert_eq!(engine.prepare(1, 10, 0, &no_keys).unwrap_err().sqlstate(), "40001", "planned with placement 4 < 5");
        engine.stage(2, 1, 16, 0, 5, vec![batch(0, 10)]).unwrap();
        engine.prepare(2, 10, 0, &no_keys).unwrap();
        // A fence waits for the undecided transaction, and gives up in time.
        let error = engine.fence_writes(16, 0, 5, Duration::from_millis(50)).unwrap_err();
        assert_eq!(error.sqlstate(), "40001");
        engine.commit(2, 0).unwrap();
        engine.fence_writes(16, 0, 5, Duration::from_millis(50)).unwrap();
        engine.stage(3, 1, 16, 0, 9, vec![batch(0, 10)]).unwrap();
        assert_eq!(engine.prepare(3, 10, 0, &no_keys).unwrap_err().sqlstate(), "40001", "a raised fence refuses every write");
        engine.set_write_fence(16, 0, 6);
        assert_eq!(rows_in(&engine, 16, 0), 10);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_constraint_fence_waits_for_earlier_prepares_and_outlasts_a_lowered_fence() {
        let dir = temp_dir("floor");
        let engine = StorageEngine::open(&dir).unwrap();
        engine.stage(1, 1, 16, 0, 4, vec![batch(0, 10)]).unwrap();
        engine.prepare(1, 10, 0, &no_keys).unwrap();
        // Prepared before the constraint: waited for, and the wait gives up in time.
        assert_eq!(engine.raise_write_fence(16, 0, 7, Duration::from_millis(50)).unwrap_err().sqlstate(), "40001");
        engine.commit(1, 0).unwrap();
        engine.raise_write_fence(16, 0, 7, Duration::from_millis(50)).unwrap();
        engine.stage(2, 1, 16, 0, 6, vec![batch(0, 10)]).unwrap();
        assert_eq!(engine.prepare(2, 10, 0, &no_keys).unwrap_err().sqlstate(), "40001", "planned with placement 6 < 7");
        // A catch-up restoring an older fence does not lower the floor.
        engine.set_write_fence(16, 0, 3);
        engine.stage(3, 1, 16, 0, 6, vec![batch(0, 10)]).unwrap();
        assert_eq!(engine.prepare(3, 10, 0, &no_keys).unwrap_err().sqlstate(), "40001");
        engine.stage(4, 1, 16, 0, 7, vec![batch(0, 10)]).unwrap();
        engine.prepare(4, 10, 0, &no_keys).unwrap();
        engine.commit(4, 0).unwrap();
        assert_eq!(rows_in(&engine, 16, 0), 20);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn reset_and_removed_partitions_stay_so_after_replay() {
        let dir = temp_dir("reset");
        {
            let engine = StorageEngine::open(&dir).unwrap();
            for (txn, partition) in [(1, 0), (2, 1)] {
                engine.stage(txn, 1, 17, partition, 0, vec![batch(0, 10)]).unwrap();
                engine.prepare(txn, 10, 0, &no_keys).unwrap();
                engine.commit(txn, 0).unwrap();
            }
            engine.reset_partition(17, 0).unwrap();
            commit_rows(&engine, 3, 17, vec![batch(0, 4)], &no_keys);
            engine.remove_partition(17, 1).unwrap();
            assert_eq!(rows_in(&engine, 17, 0), 4);
            // Readers tell a removed copy (and one never written) from an empty one.
            assert!(engine.stored_snapshot(17, 0).unwrap().is_some());
            assert!(engine.stored_snapshot(17, 1).unwrap().is_none(), "a removed copy stores nothing");
            assert!(engine.stored_snapshot(17, 2).unwrap().is_none(), "a partition never written here stores nothing");
        }
        let engine = StorageEngine::open(&dir).unwrap();
        assert_eq!(rows_in(&engine, 17, 0), 4, "rows before the reset are not replayed");
        assert_eq!(rows_in(&engine, 17, 1), 0, "a removed copy does not come back");
        assert!(!engine.partition_keys().contains(&(17, 1)));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_removed_copy_of_loaded_segments_does_not_stop_replay() {
        let dir = temp_dir("removed-loaded");
        let schema = batch(0, 1).schema();
        {
            let engine = StorageEngine::open(&dir).unwrap();
            let (data, sums) = built_segment(0, 300);
            stage_segment(&engine, 41, 1, 18, 5, 0, 300, &data, &sums, &schema).unwrap();
            engine.stage(41, 1, 18, 6, 0, vec![batch(0, 7)]).unwrap();
            engine.prepare(41, 307, 0, &no_keys).unwrap();
            engine.commit(41, 0).unwrap();
            assert_eq!(rows_in(&engine, 18, 5), 300);
            // The copy moves away; its directory and the loaded segment go.
            engine.remove_partition(18, 5).unwrap();
        }
        let engine = StorageEngine::open(&dir).expect("the node opens after its copy was removed");
        assert_eq!(rows_in(&engine, 18, 5), 0, "a removed copy does not come back");
        assert!(!engine.partition_keys().contains(&(18, 5)));
        assert_eq!(rows_in(&engine, 18, 6), 7, "the rest of the transaction is replayed");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
