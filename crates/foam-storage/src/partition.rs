//! One partition of one table on this node: its committed Parquet segments
//! (listed in `manifest.json`) and its memtable of committed rows that so far
//! live only in the WAL.
//!
//! Invariant: every committed inline write with commit LSN ≤ `applied_lsn` is in
//! a segment; replay skips those, which makes replay idempotent.
//!
//! A deletion is applied copy-on-write: the segments holding deleted rows are
//! written again without them and the manifest swaps them in one save. A
//! replaced file is unlinked when the last snapshot that lists it is gone, so
//! a scan that started before the deletion still reads it.
//!
//! MVCC: every change carries its transaction's commit timestamp, and changes
//! are applied in timestamp order (`visibility.rs` orders them). A read at
//! snapshot `S` sees exactly the changes with timestamps up to `S`:
//!
//! ```text
//!  memtable      (ts, batch) (ts, batch) ...   read: the batches with ts <= S
//!  segments      valid from `segments_ts`     read: when S >= segments_ts
//!  history       older segment lists and memtables, each valid from its own
//!                timestamp, kept SNAPSHOT_RETENTION_MS after they were replaced
//! ```
//! A flush, a deletion or a new segment replaces the segment list, and the
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

use crate::row_set::RowSet;
use crate::segment;
use foam_common::limits::{SEGMENT_MERGE_ROWS_MAX, SNAPSHOT_HISTORY_BYTES_MAX, SNAPSHOT_RETENTION_MS};

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
}

impl SegmentInfo {
    pub fn new(file_name: String, rows: u64, sum: segment::SegmentSum) -> Self {
        SegmentInfo { file_name, rows, bytes: sum.bytes, crc32: Some(sum.crc32), block_crc32: sum.blocks }
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
    /// Keeps the file on disk while this reference lives, even if a
    /// deletion replaced it meanwhile.
    _file: Option<Arc<SegmentFile>>,
}

impl SegmentRef {
    pub fn new(path: PathBuf, checksums: segment::Checksums) -> Self {
        SegmentRef { path, checksums, _file: None }
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

/// A segment list some change replaced, still readable by older snapshots.
#[derive(Debug)]
struct OldVersion {
    /// Snapshots from this timestamp up to the next version's read this one.
    from_ts: u64,
    replaced_at: Instant,
    segments: Vec<SegmentRef>,
    memtable: Vec<(u64, RecordBatch)>,
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
    memtable: Vec<(u64, RecordBatch)>,
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
        self.memtable.last().map_or(0, |(ts, _)| *ts).max(self.manifest.segments_ts).max(self.floor_ts)
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
        for batch in batches {
            self.memtable_rows += batch.num_rows();
            self.memtable_bytes += batch.get_array_memory_size();
            self.memtable.push((ts, batch));
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

    /// Writes the memtable as a segment and records that the WAL up to its
    /// newest commit no longer needs replaying for this partition.
    pub fn flush(&mut self) -> StorageResult<()> {
        if self.memtable.is_empty() {
            return Ok(());
        }
        self.ensure_dir()?;
        let mut next = self.manifest.clone();
        next.segments.extend(self.write_rows(&memtable_up_to(&self.memtable, u64::MAX))?);
        foam_common::fs::sync_dir(&self.dir)?;
        next.applied_lsn = next.applied_lsn.max(self.memtable_lsn_max);
        next.segments_ts = self.newest_ts();
        self.keep_version();
        self.save_manifest(next)?;
        self.clear_memtable();
        Ok(())
    }

    fn clear_memtable(&mut self) {
        self.memtable.clear();
        self.memtable_rows = 0;
        self.memtable_bytes = 0;
    }

    /// The newest committed rows.
    pub fn snapshot(&mut self) -> PartitionSnapshot {
        self.current_up_to(u64::MAX)
    }

    /// The current segment list and the memtable rows committed at or
    /// before `ts`.
    fn current_up_to(&mut self, ts: u64) -> PartitionSnapshot {
        PartitionSnapshot { segments: self.segment_refs(), memtable: memtable_up_to(&self.memtable, ts) }
    }

    /// The rows of every change committed at or before `ts`; refused when
    /// that version is no longer kept.
    pub fn snapshot_at(&mut self, ts: u64) -> StorageResult<PartitionSnapshot> {
        self.forget_old_versions(false);
        if ts >= self.manifest.segments_ts && ts >= self.floor_ts {
            return Ok(self.current_up_to(ts));
        }
        if ts >= self.floor_ts
            && let Some(old) = self.history.iter().rev().find(|v| v.from_ts <= ts)
        {
            return Ok(PartitionSnapshot { segments: old.segments.clone(), memtable: memtable_up_to(&old.memtable, ts) });
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
                SegmentRef { path, checksums: s.checksums(), _file: Some(file.clone()) }
            })
            .collect()
    }

    /// Deletes `rows` (whole rows, each as often as listed) committed at
    /// `lsn`, unless the partition's files reflect that commit already
    /// (replay). The memtable is written out in the same manifest save, so
    /// the save covers every commit up to `lsn`. Returns how many listed rows
    /// were not found (none, when prepare checked them under the WAL lock).
    pub fn apply_delete(&mut self, lsn: u64, ts: u64, rows: &[RecordBatch]) -> StorageResult<u64> {
        if lsn <= self.manifest.applied_lsn {
            return Ok(0);
        }
        let ts = self.change_ts(ts);
        let Some(mut gone) = RowSet::of(rows)? else { return Ok(0) };
        self.ensure_dir()?;
        let mut next = self.manifest.clone();
        let mut retired = Vec::new();
        let mut kept_segments = Vec::with_capacity(next.segments.len());
        // The rows left of rewritten segments, of small segments and of the
        // memtable go to one new segment: repeated small changes would
        // otherwise leave a new small file each, and every read and every
        // deletion after them would open them all.
        let mut merged: Vec<RecordBatch> = Vec::new();
        for info in std::mem::take(&mut next.segments) {
            let small = info.rows < SEGMENT_MERGE_ROWS_MAX as u64;
            if gone.is_empty() && !small {
                kept_segments.push(info);
                continue;
            }
            let path = self.dir.join(&info.file_name);
            let mut left = Vec::new();
            let mut removed = 0;
            for batch in segment::SegmentRows::open(&path, &info.checksums(), None)? {
                let (kept, taken) = gone.take_from(&batch?)?;
                removed += taken;
                left.push(kept);
            }
            if removed == 0 && !small {
                kept_segments.push(info);
                continue;
            }
            retired.push(info.file_name.clone());
            merged.extend(left);
        }
        for (_, batch) in &self.memtable {
            merged.push(gone.take_from(batch)?.0);
        }
        if let Some(written) = self.write_rows(&merged)? {
            kept_segments.push(written);
        }
        next.segments = kept_segments;
        next.applied_lsn = next.applied_lsn.max(self.memtable_lsn_max).max(lsn);
        next.segments_ts = ts;
        foam_common::fs::sync_dir(&self.dir)?;
        self.keep_version();
        self.save_manifest(next)?;
        self.clear_memtable();
        for name in retired {
            self.retire(&name);
        }
        Ok(gone.len())
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

    /// Drops the listed segments not named in `wanted` (a copy being caught
    /// up from a replica whose deletions replaced some files meanwhile).
    pub fn retain_segments(&mut self, wanted: &[String]) -> StorageResult<()> {
        let (kept, dropped): (Vec<SegmentInfo>, Vec<SegmentInfo>) =
            self.manifest.segments.iter().cloned().partition(|s| wanted.contains(&s.file_name));
        if dropped.is_empty() {
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
        let rows = self.manifest.segments.iter().map(|s| s.rows).sum::<u64>() + self.memtable_rows as u64;
        let bytes = self.manifest.segments.iter().map(|s| s.bytes).sum::<u64>() + self.memtable_bytes as u64;
        (rows, bytes)
    }

    fn save_manifest(&mut self, next: Manifest) -> StorageResult<()> {
        let bytes = serde_json::to_vec_pretty(&next).map_err(|e| StorageError::internal(e.to_string()))?;
        foam_common::fs::write_atomic(&self.dir.join(MANIFEST_FILE_NAME), &bytes)?;
        self.manifest = next;
        Ok(())
    }
}

/// The batches of `memtable` committed at or before `ts`.
fn memtable_up_to(memtable: &[(u64, RecordBatch)], ts: u64) -> Vec<RecordBatch> {
    memtable.iter().filter(|(at, _)| *at <= ts).map(|(_, batch)| batch.clone()).collect()
}
