//! One partition of one table on this node: its committed Parquet segments
//! (listed in `manifest.json`) and its memtable of committed rows that so far
//! live only in the WAL.
//!
//! Invariant: every committed inline write with commit LSN ≤ `applied_lsn` is in
//! a segment; replay skips those, which makes replay idempotent.
//!
//! A deletion adds positions to the deletion vector of the segment file or
//! memtable batch that holds each row (`deletions.rs`), with its timestamp;
//! the files stay as they are. A flush compacts: it writes the memtable's
//! live rows together with those of small or much-deleted segments into one
//! new file and the manifest swaps them in one save. A replaced file is
//! unlinked when the last snapshot that lists it is gone, so a scan that
//! started before still reads it. Deletion vectors reach the manifest with
//! the next save; until then the WAL's Commit records hold them.
//!
//! MVCC: every change carries its transaction's commit timestamp, and changes
//! are applied in timestamp order (`visibility.rs` orders them). A read at
//! snapshot `S` sees exactly the changes with timestamps up to `S`:
//!
//! ```text
//!  memtable      (ts, batch) (ts, batch) ...   read: the batches with ts <= S
//!  segments      valid from `segments_ts`     read: when S >= segments_ts
//!  deletions     (position, ts) per file/batch  read: skip those with ts <= S
//!  history       older segment lists and memtables, each valid from its own
//!                timestamp, kept SNAPSHOT_RETENTION_MS after they were replaced
//! ```
//! A flush or a new segment replaces the segment list, and the
//! list it replaced goes to the history with the memtable of its time. A
//! snapshot older than every version kept (or than a reset or copy-in) is
//! refused with 40001, and the statement runs again with a new one.

use crate::error::{StorageError, StorageResult};
use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use arrow::record_batch::RecordBatch;

use serde::{Deserialize, Serialize};

use crate::deletions::{Deletions, RowHome};
use crate::key_index::{KeyIndex, KeyProbe};
use crate::row_set::RowSet;
use crate::segment;
use foam_common::limits::{
    KEY_INDEX_ROWS_MAX, MEMTABLE_FLUSH_BATCHES, MEMTABLE_FLUSH_ROWS, SEGMENT_DELETED_PERCENT_MAX, SEGMENT_DELETED_ROWS_MIN, SEGMENT_MERGE_ROWS_MAX, SNAPSHOT_HISTORY_BYTES_MAX,
    SNAPSHOT_RETENTION_MS,
};

const MANIFEST_FILE_NAME: &str = "manifest.json";

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Manifest {
    pub segments: Vec<SegmentInfo>,
    pub applied_lsn: u64,
    /// Commit timestamp of the newest change the segments hold (0 in
    /// partitions written before MVCC).
    #[serde(default)]
    pub segments_ts: u64,
    /// The copy is being filled in from another node (reset, segments not
    /// all installed yet): it holds part of the rows, and no read may see it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub refilling: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SegmentInfo {
    pub file_name: String,
    pub rows: u64,
    pub bytes: u64,
    /// CRC-32 of the whole file (absent in files written before checksums).
    #[serde(default)]
    pub crc32: Option<u32>,
    /// CRC-32 of each block of the file (empty in files written before block
    /// checksums), which reads check; see [`segment::CHECKSUM_BLOCK_BYTES`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub block_crc32: Vec<u32>,
    /// Its deleted rows (`rows` counts them too).
    #[serde(default, skip_serializing_if = "Deletions::is_empty")]
    pub deleted: Deletions,
}

impl SegmentInfo {
    pub fn new(file_name: String, rows: u64, sum: segment::SegmentSum) -> Self {
        SegmentInfo { file_name, rows, bytes: sum.bytes, crc32: Some(sum.crc32), block_crc32: sum.blocks, deleted: Deletions::default() }
    }

    /// Rows not deleted.
    pub fn live_rows(&self) -> u64 {
        self.rows.saturating_sub(self.deleted.len() as u64)
    }

    /// Whether enough of its rows are deleted that a flush rewrites it.
    fn worth_rewriting(&self) -> bool {
        !self.deleted.is_empty() && self.deleted.len() as u64 * 100 >= self.rows * SEGMENT_DELETED_PERCENT_MAX
    }

    /// Whether so many of its rows are deleted that it should be rewritten
    /// now, not at the next flush.
    fn much_deleted(&self) -> bool {
        self.worth_rewriting() && self.deleted.len() >= SEGMENT_DELETED_ROWS_MIN
    }

    /// Whether `other` lists a file with this one's content: the same size,
    /// rows, CRC-32 and block checksums (names differ between copies, since
    /// each node names the files it writes). Files from before block
    /// checksums never match: their one CRC-32 is too weak a witness.
    pub fn same_content(&self, other: &SegmentInfo) -> bool {
        self.crc32.is_some()
            && !self.block_crc32.is_empty()
            && (self.bytes, self.rows, self.crc32, &self.block_crc32) == (other.bytes, other.rows, other.crc32, &other.block_crc32)
    }

    /// The checksums the file is read and received against.
    pub fn checksums(&self) -> segment::Checksums {
        segment::Checksums { crc32: self.crc32, blocks: self.block_crc32.clone() }
    }
}

/// One segment file a scan reads, with the checksums to verify.
#[derive(Debug, Clone)]
pub struct SegmentRef {
    pub path: PathBuf,
    pub checksums: segment::Checksums,
    /// Rows a read skips (`SegmentRows::of`).
    pub deleted: Deletions,
    /// Keeps the file on disk while this reference lives, even if a
    /// deletion replaced it meanwhile.
    _file: Option<Arc<SegmentFile>>,
}

impl SegmentRef {
    pub fn new(path: PathBuf, checksums: segment::Checksums) -> Self {
        SegmentRef { path, checksums, deleted: Deletions::default(), _file: None }
    }
}

/// A listed segment file; once a deletion replaced it (`retired`), it is
/// unlinked when the last reference to it goes.
#[derive(Debug)]
struct SegmentFile {
    path: PathBuf,
    retired: AtomicBool,
}

impl Drop for SegmentFile {
    fn drop(&mut self) {
        if self.retired.load(Ordering::SeqCst) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// What a scan reads: immutable segment files and the memtable as of one moment.
#[derive(Debug, Clone, Default)]
pub struct PartitionSnapshot {
    pub segments: Vec<SegmentRef>,
    pub memtable: Vec<RecordBatch>,
}

/// A batch of committed rows in the memtable.
#[derive(Debug, Clone)]
struct MemBatch {
    ts: u64,
    /// The commit that added it, and its place among that commit's batches:
    /// how deletions name it (`RowHome::Memtable`), the same after replay.
    lsn: u64,
    ordinal: u32,
    batch: RecordBatch,
    deleted: Deletions,
}

/// A segment list some change replaced, still readable by older snapshots.
#[derive(Debug)]
struct OldVersion {
    /// Snapshots from this timestamp up to the next version's read this one.
    from_ts: u64,
    replaced_at: Instant,
    segments: Vec<SegmentRef>,
    memtable: Vec<MemBatch>,
    /// Memory its memtable held when it was replaced.
    memtable_bytes: usize,
    /// Its segment files' names and sizes.
    files: Vec<(String, u64)>,
}

pub struct Partition {
    dir: PathBuf,
    /// The engine's tables directory, whose new subdirectories must be fsynced.
    tables_dir: PathBuf,
    manifest: Manifest,
    /// Handles of the listed segment files that snapshots hold.
    files: HashMap<String, Arc<SegmentFile>>,
    /// Committed rows not yet in a segment, each batch with its commit
    /// timestamp, in timestamp order.
    memtable: Vec<MemBatch>,
    /// Timestamp of the newest deletion applied.
    deleted_ts: u64,
    /// Deletions applied since the manifest was last saved.
    deletions_unsaved: bool,
    /// Indexes by unique keys' columns, built on first use (`key_index.rs`).
    indexes: Vec<KeyIndex>,
    /// Snapshots below this cannot be served: the partition was reset or
    /// copied in after them, or reopened (history is kept in memory only).
    /// Versions dropped from the history need no floor: no version older
    /// than a snapshot is left to serve it.
    floor_ts: u64,
    /// Replaced versions, oldest first.
    history: VecDeque<OldVersion>,
    retention: Duration,
    memtable_lsn_max: u64,
    memtable_rows: usize,
    memtable_bytes: usize,
}

impl Partition {
    pub fn open(dir: PathBuf, tables_dir: &Path) -> StorageResult<Self> {
        let path = dir.join(MANIFEST_FILE_NAME);
        let manifest = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| StorageError::Corrupted {
                path: path.display().to_string(),
                message: e.to_string(),
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Manifest::default(),
            Err(e) => return Err(StorageError::io(&path, e)),
        };
        Ok(Partition {
            dir,
            tables_dir: tables_dir.to_path_buf(),
            floor_ts: manifest.segments_ts,
            deleted_ts: manifest.segments.iter().map(|s| s.deleted.newest_ts()).max().unwrap_or(0),
            deletions_unsaved: false,
            indexes: Vec::new(),
            manifest,
            files: HashMap::new(),
            memtable: Vec::new(),
            history: VecDeque::new(),
            retention: Duration::from_millis(SNAPSHOT_RETENTION_MS),
            memtable_lsn_max: 0,
            memtable_rows: 0,
            memtable_bytes: 0,
        })
    }

    /// Creates the partition's directory (and its table's) durably.
    fn ensure_dir(&self) -> StorageResult<()> {
        if self.dir.exists() {
            return Ok(());
        }
        foam_common::fs::create_dir_all(&self.dir)?;
        if let Some(table_dir) = self.dir.parent() {
            foam_common::fs::sync_dir(table_dir)?;
        }
        Ok(foam_common::fs::sync_dir(&self.tables_dir)?)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Commit timestamp of the newest change applied here.
    pub fn newest_ts(&self) -> u64 {
        self.memtable.last().map_or(0, |m| m.ts).max(self.manifest.segments_ts).max(self.floor_ts).max(self.deleted_ts)
    }

    /// The timestamp a change committed at `ts` is applied at: never below
    /// an applied one (records from before MVCC carry 0).
    fn change_ts(&self, ts: u64) -> u64 {
        ts.max(self.newest_ts())
    }

    /// Keeps the current segment list and memtable readable for snapshots
    /// before the change about to replace them.
    fn keep_version(&mut self) {
        let replaced = OldVersion {
            from_ts: self.manifest.segments_ts,
            replaced_at: Instant::now(),
            segments: self.segment_refs(),
            memtable: self.memtable.clone(),
            memtable_bytes: self.memtable_bytes,
            files: self.manifest.segments.iter().map(|s| (s.file_name.clone(), s.bytes)).collect(),
        };
        self.history.push_back(replaced);
        self.forget_old_versions(true);
    }

    /// Drops the versions replaced more than the retention ago, and the
    /// oldest ones while the history holds more than
    /// [`SNAPSHOT_HISTORY_BYTES_MAX`] of its own (memtables, and segment
    /// files the current version no longer lists).
    /// The size is checked only when `grew` (a version was just added).
    fn forget_old_versions(&mut self, grew: bool) {
        while self
            .history
            .front()
            .is_some_and(|v| v.replaced_at.elapsed() > self.retention || (grew && self.history_bytes() > SNAPSHOT_HISTORY_BYTES_MAX as u64))
        {
            // A snapshot this version served now finds none: the history
            // starts at the next one's timestamp.
            self.history.pop_front();
        }
    }

    /// Drops the versions past their retention.
    pub fn forget_expired_versions(&mut self) {
        self.forget_old_versions(false);
    }

    fn history_bytes(&self) -> u64 {
        let current: std::collections::HashSet<&str> = self.manifest.segments.iter().map(|s| s.file_name.as_str()).collect();
        let mut counted = std::collections::HashSet::new();
        let mut bytes = 0;
        for version in &self.history {
            bytes += version.memtable_bytes as u64;
            for (name, size) in &version.files {
                if !current.contains(name.as_str()) && counted.insert(name.as_str()) {
                    bytes += size;
                }
            }
        }
        bytes
    }

    /// Sets how long replaced versions are kept (tests shorten it).
    pub fn set_retention(&mut self, retention: Duration) {
        self.retention = retention;
    }

    /// Refuses snapshots below `ts` from now on (a copy was filled in from
    /// another node: its files may hold changes up to `ts` this node never
    /// applied itself). The history goes with them.
    pub fn raise_floor(&mut self, ts: u64) {
        self.history.clear();
        self.floor_ts = self.floor_ts.max(ts);
    }

    /// The copy filled in since [`Self::reset`] is whole: reads at `ts` and
    /// later may see it.
    pub fn finish_refill(&mut self, ts: u64) -> StorageResult<()> {
        self.raise_floor(ts);
        if self.manifest.refilling {
            self.save_manifest(Manifest { refilling: false, ..self.manifest.clone() })?;
        }
        Ok(())
    }

    /// Refused while the copy is being filled in from another node: a read
    /// planned before the copy was taken out of service must not see part of it.
    pub fn check_readable(&self) -> StorageResult<()> {
        if self.manifest.refilling {
            return Err(StorageError::SnapshotUnavailable {
                message: format!("the copy in {} is being filled in from another node; run the statement again", self.dir.display()),
            });
        }
        Ok(())
    }

    /// Adds committed rows with commit LSN `lsn` and timestamp `ts` to the
    /// memtable, unless a segment already holds them (replay after a flush).
    pub fn apply_inline(&mut self, lsn: u64, ts: u64, batches: Vec<RecordBatch>) {
        if lsn <= self.manifest.applied_lsn {
            return;
        }
        let ts = self.change_ts(ts);
        let mut ordinal = self.memtable.iter().rev().take_while(|m| m.lsn == lsn).count() as u32;
        for batch in batches {
            self.memtable_rows += batch.num_rows();
            self.memtable_bytes += batch.get_array_memory_size();
            let home = RowHome::Memtable { lsn, ordinal };
            if self.indexes.iter_mut().try_for_each(|index| index.add(home.clone(), 0, &batch, false)).is_err() {
                self.indexes.clear();
            }
            self.memtable.push(MemBatch { ts, lsn, ordinal, batch, deleted: Deletions::default() });
            ordinal += 1;
        }
        self.memtable_lsn_max = self.memtable_lsn_max.max(lsn);
    }

    /// Makes a staged segment file, committed at `lsn`, part of this partition.
    /// Idempotent, so a replayed commit of an already-moved segment does
    /// nothing; so is a commit older than the partition's reset (a copy from a
    /// replica replaced what it wrote).
    pub fn add_segment(&mut self, lsn: u64, ts: u64, staged_path: &Path, info: SegmentInfo) -> StorageResult<()> {
        if lsn <= self.manifest.applied_lsn {
            let _ = std::fs::remove_file(staged_path);
            return Ok(());
        }
        let ts = self.change_ts(ts);
        self.list_segment(staged_path, info, Some(ts))
    }

    /// Moves a finished segment file copied from another node into this
    /// partition and lists it (idempotent by file name). Its rows have no
    /// timestamp here: the keeper raises the floor before the copy serves.
    pub fn install_segment(&mut self, staged_path: &Path, info: SegmentInfo) -> StorageResult<()> {
        self.list_segment(staged_path, info, None)
    }

    /// Lists a segment file: as a change committed at `ts`, or (`None`) as
    /// part of a copy being filled in, which keeps no history.
    fn list_segment(&mut self, staged_path: &Path, info: SegmentInfo, ts: Option<u64>) -> StorageResult<()> {
        let file_name = info.file_name.as_str();
        if self.manifest.segments.iter().any(|s| s.file_name == file_name) {
            return Ok(());
        }
        self.ensure_dir()?;
        let target = self.dir.join(file_name);
        if staged_path.exists() {
            std::fs::rename(staged_path, &target).map_err(|e| StorageError::io(staged_path, e))?;
            foam_common::fs::sync_dir(&self.dir)?;
        } else if !target.exists() {
            return Err(StorageError::Corrupted {
                path: staged_path.display().to_string(),
                message: "a committed segment file is missing".into(),
            });
        }
        let mut next = self.manifest.clone();
        next.segments.push(info);
        match ts {
            Some(ts) => {
                self.keep_version();
                next.segments_ts = ts;
            }
            None => {
                let newest = self.newest_ts();
                self.raise_floor(newest);
                next.segments_ts = newest;
            }
        }
        self.save_manifest(next)
    }

    /// Drops every row (the partition is about to be copied from a replica)
    /// and records that WAL records up to `wal_lsn` no longer apply to it.
    pub fn reset(&mut self, wal_lsn: u64) -> StorageResult<()> {
        let old: Vec<String> = self.manifest.segments.iter().map(|s| s.file_name.clone()).collect();
        self.ensure_dir()?;
        let newest = self.newest_ts();
        self.raise_floor(newest);
        let applied_lsn = wal_lsn.max(self.manifest.applied_lsn);
        self.save_manifest(Manifest { segments: Vec::new(), applied_lsn, segments_ts: newest, refilling: true })?;
        self.clear_memtable();
        self.memtable_lsn_max = 0;
        for name in old {
            let _ = std::fs::remove_file(self.dir.join(name));
        }
        Ok(())
    }

    /// WAL records up to this LSN are already reflected in the partition's files.
    pub fn applied_lsn(&self) -> u64 {
        self.manifest.applied_lsn
    }

    pub fn segments(&self) -> &[SegmentInfo] {
        &self.manifest.segments
    }

    pub fn memtable_rows(&self) -> usize {
        self.memtable_rows
    }

    /// Whether the partition should be flushed after a commit: its memtable
    /// is past a limit, or a segment is much deleted.
    pub fn wants_flush(&self) -> bool {
        self.memtable_rows >= MEMTABLE_FLUSH_ROWS
            || self.memtable.len() >= MEMTABLE_FLUSH_BATCHES
            || self.manifest.segments.iter().any(SegmentInfo::much_deleted)
    }

    /// Writes the memtable's live rows, with those of the segments worth
    /// compacting, as one new segment, and records that the WAL up to the
    /// memtable's newest commit no longer needs replaying for this
    /// partition. With nothing to write, saves the deletions not saved yet.
    pub fn flush(&mut self) -> StorageResult<()> {
        let compacted = self.to_compact();
        if self.memtable.is_empty() && compacted.is_empty() {
            if self.deletions_unsaved {
                self.save_manifest(self.manifest.clone())?;
            }
            return Ok(());
        }
        self.ensure_dir()?;
        let mut merged = memtable_up_to(&self.memtable, u64::MAX)?;
        for info in &compacted {
            let segment = SegmentRef { deleted: info.deleted.clone(), ..SegmentRef::new(self.dir.join(&info.file_name), info.checksums()) };
            for batch in segment::SegmentRows::of(&segment, None)? {
                merged.push(batch?);
            }
        }
        let mut next = self.manifest.clone();
        next.segments.retain(|s| !compacted.iter().any(|c| c.file_name == s.file_name));
        next.segments.extend(self.write_rows(&merged)?);
        foam_common::fs::sync_dir(&self.dir)?;
        next.applied_lsn = next.applied_lsn.max(self.memtable_lsn_max);
        next.segments_ts = self.newest_ts();
        self.keep_version();
        self.save_manifest(next)?;
        self.clear_memtable();
        for info in compacted {
            self.retire(&info.file_name);
        }
        Ok(())
    }

    /// The segments a flush rewrites: the much-deleted ones, and small ones
    /// no larger than what the flush writes so far, smallest first (so a
    /// small segment is rewritten about once each time the rows written
    /// beside it double, and small changes leave few files).
    fn to_compact(&self) -> Vec<SegmentInfo> {
        let (mut chosen, others): (Vec<SegmentInfo>, Vec<SegmentInfo>) =
            self.manifest.segments.iter().cloned().partition(SegmentInfo::worth_rewriting);
        let mut rows = self.memtable_rows as u64 + chosen.iter().map(SegmentInfo::live_rows).sum::<u64>();
        let mut small: Vec<SegmentInfo> = others.into_iter().filter(|s| s.live_rows() < SEGMENT_MERGE_ROWS_MAX as u64).collect();
        small.sort_by_key(SegmentInfo::live_rows);
        for info in small {
            if rows == 0 || info.live_rows() > rows {
                break;
            }
            rows += info.live_rows();
            chosen.push(info);
        }
        chosen
    }

    fn clear_memtable(&mut self) {
        self.indexes.clear();
        self.memtable.clear();
        self.memtable_rows = 0;
        self.memtable_bytes = 0;
    }

    /// The newest committed rows.
    pub fn snapshot(&mut self) -> StorageResult<PartitionSnapshot> {
        self.current_up_to(u64::MAX)
    }

    /// The current segment list and the memtable rows committed at or
    /// before `ts`, without the rows deleted at or before `ts`.
    fn current_up_to(&mut self, ts: u64) -> StorageResult<PartitionSnapshot> {
        let segments = self.segment_refs().into_iter().map(|s| SegmentRef { deleted: s.deleted.as_of(ts), ..s }).collect();
        Ok(PartitionSnapshot { segments, memtable: memtable_up_to(&self.memtable, ts)? })
    }

    /// What a read at `ts` (the newest when `None`) sees: the rows with the
    /// values of `key` when there is one and its index can serve the read
    /// (as a snapshot of only those rows), else the whole snapshot.
    pub fn read_at(&mut self, ts: Option<u64>, key: Option<&KeyProbe>) -> StorageResult<PartitionSnapshot> {
        if let Some(key) = key
            && let Some(rows) = self.rows_by_key_at(ts, &key.columns, &key.rows)?
        {
            return Ok(PartitionSnapshot { segments: Vec::new(), memtable: rows });
        }
        match ts {
            Some(ts) => self.snapshot_at(ts),
            None => self.snapshot(),
        }
    }

    /// Whether a read at `ts` reads the current segment list (and the
    /// memtable), not a version from the history.
    fn current_serves(&self, ts: u64) -> bool {
        ts >= self.manifest.segments_ts && ts >= self.floor_ts
    }

    /// The rows of every change committed at or before `ts`; refused when
    /// that version is no longer kept.
    pub fn snapshot_at(&mut self, ts: u64) -> StorageResult<PartitionSnapshot> {
        self.forget_old_versions(false);
        if self.current_serves(ts) {
            return self.current_up_to(ts);
        }
        if ts >= self.floor_ts
            && let Some(old) = self.history.iter().rev().find(|v| v.from_ts <= ts)
        {
            let segments = old.segments.iter().map(|s| SegmentRef { deleted: s.deleted.as_of(ts), ..s.clone() }).collect();
            return Ok(PartitionSnapshot { segments, memtable: memtable_up_to(&old.memtable, ts)? });
        }
        Err(StorageError::SnapshotUnavailable {
            message: format!(
                "the snapshot at {ts} is older than the oldest version of {} kept here (from {}); run the statement or transaction again",
                self.dir.display(),
                self.history.front().map_or(self.manifest.segments_ts, |v| v.from_ts).max(self.floor_ts)
            ),
        })
    }

    /// References to the listed segment files, which keep them on disk.
    fn segment_refs(&mut self) -> Vec<SegmentRef> {
        let dir = self.dir.clone();
        let files = &mut self.files;
        self.manifest
            .segments
            .iter()
            .map(|s| {
                let path = dir.join(&s.file_name);
                let file = files.entry(s.file_name.clone()).or_insert_with(|| Arc::new(SegmentFile { path: path.clone(), retired: AtomicBool::new(false) }));
                SegmentRef { path, checksums: s.checksums(), deleted: s.deleted.clone(), _file: Some(file.clone()) }
            })
            .collect()
    }

    /// Finds live rows of `gone` (taking each found out of it): in the
    /// memtable, newest first, then in the segments. Returns where each
    /// found row lives; what is left in `gone` was not found.
    pub fn locate(&self, gone: &mut RowSet) -> StorageResult<Vec<(RowHome, Vec<u32>)>> {
        let mut found = Vec::new();
        for mem in self.memtable.iter().rev() {
            if gone.is_empty() {
                return Ok(found);
            }
            let positions = gone.take_positions(&mem.batch, 0, &mem.deleted)?;
            if !positions.is_empty() {
                found.push((RowHome::Memtable { lsn: mem.lsn, ordinal: mem.ordinal }, positions));
            }
        }
        for info in &self.manifest.segments {
            if gone.is_empty() {
                break;
            }
            let positions = locate_in_file(gone, &self.dir.join(&info.file_name), &info.checksums(), &info.deleted)?;
            if !positions.is_empty() {
                found.push((RowHome::Segment(info.file_name.clone()), positions));
            }
        }
        Ok(found)
    }

    /// The live committed rows whose values of some key in `keys` (column
    /// lists) equal those of a row of `probe`, by where they live: each
    /// place, its positions and those rows. `probe_columns` names the table
    /// column each of `probe`'s is (`None`: whole rows). Read through the
    /// keys' indexes (built now if need be); `None` when the partition is
    /// too large to index ([`KEY_INDEX_ROWS_MAX`]) and the caller must read it whole.
    pub fn rows_with_keys(
        &mut self,
        keys: &[Vec<usize>],
        probe: &[RecordBatch],
        probe_columns: Option<&[usize]>,
    ) -> StorageResult<Option<Vec<(RowHome, Vec<u32>, RecordBatch)>>> {
        self.indexed_rows(keys, probe, probe_columns, u64::MAX)
    }

    /// The rows a read at snapshot `ts` (the newest when `None`) sees whose
    /// `key` columns equal those of a row of `probe` (the key's columns, in
    /// its order): a point read through the key's index. `None` when the
    /// index cannot serve that read, and the caller reads the snapshot whole:
    /// the partition is too large to index, or `ts` is older than the
    /// current segment list (an older version, or a refused one).
    pub fn rows_by_key_at(&mut self, ts: Option<u64>, key: &[usize], probe: &RecordBatch) -> StorageResult<Option<Vec<RecordBatch>>> {
        let ts = match ts {
            None => u64::MAX,
            Some(ts) if self.current_serves(ts) => ts,
            Some(_) => return Ok(None),
        };
        let found = self.indexed_rows(&[key.to_vec()], std::slice::from_ref(probe), Some(key), ts)?;
        Ok(found.map(|places| places.into_iter().map(|(_, _, rows)| rows).collect()))
    }

    /// [`Self::rows_with_keys`] as a read at snapshot `ts` sees them: rows
    /// committed at or before `ts` and not deleted by then.
    fn indexed_rows(
        &mut self,
        keys: &[Vec<usize>],
        probe: &[RecordBatch],
        probe_columns: Option<&[usize]>,
        ts: u64,
    ) -> StorageResult<Option<Vec<(RowHome, Vec<u32>, RecordBatch)>>> {
        let stored = self.manifest.segments.iter().map(|s| s.rows).sum::<u64>() + self.memtable_rows as u64;
        if stored > KEY_INDEX_ROWS_MAX as u64 {
            return Ok(None);
        }
        let mut wanted: HashMap<RowHome, Vec<u32>> = HashMap::new();
        for columns in keys {
            let index = self.index(columns)?;
            for batch in probe {
                for (home, position) in index.lookup(batch, probe_columns)? {
                    wanted.entry(home.clone()).or_default().push(position);
                }
            }
        }
        let mut found = Vec::with_capacity(wanted.len());
        for (home, mut positions) in wanted {
            positions.sort_unstable();
            positions.dedup();
            let rows = match &home {
                RowHome::Memtable { lsn, ordinal } => {
                    let Some(mem) = self.memtable.iter().find(|m| m.lsn == *lsn && m.ordinal == *ordinal && m.ts <= ts) else { continue };
                    positions.retain(|p| !mem.deleted.deleted_by(*p, ts));
                    let indices = arrow::array::UInt32Array::from(positions.clone());
                    arrow::compute::take_record_batch(&mem.batch, &indices).map_err(|e| StorageError::internal(format!("taking indexed rows: {e}")))?
                }
                RowHome::Segment(file_name) => {
                    let Some(info) = self.manifest.segments.iter().find(|s| &s.file_name == file_name) else { continue };
                    positions.retain(|p| !info.deleted.deleted_by(*p, ts));
                    if positions.is_empty() {
                        continue;
                    }
                    segment::read_rows_at(&self.dir.join(file_name), &info.checksums(), &positions)?
                }
            };
            if !positions.is_empty() {
                found.push((home, positions, rows));
            }
        }
        Ok(Some(found))
    }

    /// The index by `columns`, built from the partition's rows if there is none.
    fn index(&mut self, columns: &[usize]) -> StorageResult<&KeyIndex> {
        if let Some(at) = self.indexes.iter().position(|i| i.columns() == columns) {
            return Ok(&self.indexes[at]);
        }
        let mut index = KeyIndex::new(columns);
        for mem in &self.memtable {
            index.add(RowHome::Memtable { lsn: mem.lsn, ordinal: mem.ordinal }, 0, &mem.batch, false)?;
        }
        for info in &self.manifest.segments {
            let mut offset = 0;
            for batch in segment::SegmentRows::open(&self.dir.join(&info.file_name), &info.checksums(), Some(columns))? {
                let batch = batch?;
                index.add(RowHome::Segment(info.file_name.clone()), offset, &batch, true)?;
                offset += batch.num_rows() as u32;
            }
        }
        self.indexes.push(index);
        Ok(self.indexes.last().expect("just pushed"))
    }

    /// Like [`Self::locate`], through the index by `key` (the columns of a
    /// unique key): every row equal to one of `gone` has its key. `rows` are
    /// the rows `gone` was made of. `None` when the partition is too large to index.
    pub fn locate_by_key(&mut self, gone: &mut RowSet, key: &[usize], rows: &[RecordBatch]) -> StorageResult<Option<Vec<(RowHome, Vec<u32>)>>> {
        let Some(candidates) = self.rows_with_keys(&[key.to_vec()], rows, None)? else { return Ok(None) };
        let mut found = Vec::new();
        for (home, positions, batch) in candidates {
            let taken: Vec<u32> = gone.take_positions(&batch, 0, &Deletions::default())?.into_iter().map(|i| positions[i as usize]).collect();
            if !taken.is_empty() {
                found.push((home, taken));
            }
        }
        Ok(Some(found))
    }

    /// Deletes the rows at `positions` of `home` at `ts`, for the commit at
    /// `lsn`. Idempotent, and a no-op when the partition's files reflect
    /// that commit already or `home` is gone (a flush wrote its live rows
    /// elsewhere after the deletion): replay calls it again.
    pub fn delete_at(&mut self, lsn: u64, ts: u64, home: &RowHome, positions: &[u32]) {
        if lsn <= self.manifest.applied_lsn || positions.is_empty() {
            return;
        }
        let ts = self.change_ts(ts);
        let deleted = match home {
            RowHome::Segment(file_name) => self.manifest.segments.iter_mut().find(|s| &s.file_name == file_name).map(|s| &mut s.deleted),
            RowHome::Memtable { lsn, ordinal } => {
                self.memtable.iter_mut().find(|m| m.lsn == *lsn && m.ordinal == *ordinal).map(|m| &mut m.deleted)
            }
        };
        if let Some(deleted) = deleted {
            *deleted = deleted.with(positions, ts);
            self.deleted_ts = self.deleted_ts.max(ts);
            self.deletions_unsaved = true;
        }
    }

    /// Writes `batches` (empty ones skipped) as a new segment file of this
    /// partition, fsynced; `None` when there is no row to write.
    fn write_rows(&self, batches: &[RecordBatch]) -> StorageResult<Option<SegmentInfo>> {
        let Some(first) = batches.iter().find(|b| b.num_rows() > 0) else { return Ok(None) };
        // Rows of older files or a replayed WAL may hold text as another
        // string type: one file has one schema.
        let schema = first.schema();
        let batches: Vec<RecordBatch> =
            batches.iter().filter(|b| b.num_rows() > 0).map(|b| segment::cast_to_schema(&schema, b)).collect::<StorageResult<_>>()?;
        let file_name = format!("seg-{}.parquet", uuid::Uuid::new_v4().simple());
        let sum = segment::write_segment(&self.dir.join(&file_name), &schema, &batches)?;
        let rows = batches.iter().map(|b| b.num_rows() as u64).sum();
        Ok(Some(SegmentInfo::new(file_name, rows, sum)))
    }

    /// Drops the listed segments not in `wanted`, and takes the deletion
    /// vectors `wanted` gives to the others (a copy being caught up from a
    /// replica whose changes replaced some files meanwhile).
    pub fn retain_segments(&mut self, wanted: &[SegmentInfo]) -> StorageResult<()> {
        let (kept, dropped): (Vec<SegmentInfo>, Vec<SegmentInfo>) =
            self.manifest.segments.iter().cloned().partition(|s| wanted.iter().any(|w| w.file_name == s.file_name));
        let kept: Vec<SegmentInfo> = kept
            .into_iter()
            .map(|s| {
                let deleted = wanted.iter().find(|w| w.file_name == s.file_name).map(|w| w.deleted.clone()).unwrap_or_default();
                SegmentInfo { deleted, ..s }
            })
            .collect();
        if dropped.is_empty() && kept.iter().zip(&self.manifest.segments).all(|(k, s)| k.deleted == s.deleted) {
            return Ok(());
        }
        let mut next = self.manifest.clone();
        next.segments = kept;
        let newest = self.newest_ts();
        self.raise_floor(newest);
        self.save_manifest(next)?;
        for info in dropped {
            self.retire(&info.file_name);
        }
        Ok(())
    }

    /// Removes a segment file no longer listed: now, or when the last
    /// snapshot that lists it is gone.
    fn retire(&mut self, file_name: &str) {
        match self.files.remove(file_name) {
            Some(file) => file.retired.store(true, Ordering::SeqCst),
            None => {
                let _ = std::fs::remove_file(self.dir.join(file_name));
            }
        }
    }

    /// Committed rows and bytes (segment bytes on disk plus memtable bytes in memory).
    pub fn stats(&self) -> (u64, u64) {
        let memtable_deleted: u64 = self.memtable.iter().map(|m| m.deleted.len() as u64).sum();
        let rows = self.manifest.segments.iter().map(SegmentInfo::live_rows).sum::<u64>() + self.memtable_rows as u64 - memtable_deleted;
        let bytes = self.manifest.segments.iter().map(|s| s.bytes).sum::<u64>() + self.memtable_bytes as u64;
        (rows, bytes)
    }

    fn save_manifest(&mut self, next: Manifest) -> StorageResult<()> {
        // The indexes point into memtable batches and listed files: a save
        // that changes either drops them (rebuilt on next use).
        if next.segments.iter().map(|s| &s.file_name).ne(self.manifest.segments.iter().map(|s| &s.file_name)) {
            self.indexes.clear();
        }
        let bytes = serde_json::to_vec_pretty(&next).map_err(|e| StorageError::internal(e.to_string()))?;
        foam_common::fs::write_atomic(&self.dir.join(MANIFEST_FILE_NAME), &bytes)?;
        self.manifest = next;
        self.deletions_unsaved = false;
        Ok(())
    }
}

/// The rows of `memtable` committed at or before `ts` and not deleted by then.
fn memtable_up_to(memtable: &[MemBatch], ts: u64) -> StorageResult<Vec<RecordBatch>> {
    memtable
        .iter()
        .filter(|m| m.ts <= ts)
        .filter_map(|m| {
            let deleted = m.deleted.as_of(ts);
            // A small hot table's memtable is mostly batches replaced whole.
            (deleted.len() < m.batch.num_rows()).then(|| deleted.filter(m.batch.clone(), 0))
        })
        .collect()
}

/// The positions of live rows of `gone` in one segment file (taking them
/// out of `gone`).
pub(crate) fn locate_in_file(gone: &mut RowSet, path: &Path, checksums: &segment::Checksums, deleted: &Deletions) -> StorageResult<Vec<u32>> {
    let mut positions = Vec::new();
    let mut offset = 0;
    for batch in segment::SegmentRows::open(path, checksums, None)? {
        let batch = batch?;
        positions.extend(gone.take_positions(&batch, offset, deleted)?);
        offset += batch.num_rows() as u32;
        if gone.is_empty() {
            break;
        }
    }
    Ok(positions)
}
