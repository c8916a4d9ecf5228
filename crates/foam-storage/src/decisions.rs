//! The coordinator's side of two-phase commit: which of the transactions this
//! node coordinated were decided COMMIT, and at which commit timestamp (every
//! participant must apply it at the same one). The decision is fsynced before any
//! participant is told to commit, so a participant left in doubt by a crash can
//! always ask. A transaction this node never decided is presumed aborted once it
//! is no longer running (presumed-abort 2PC), so only commits are logged.
//!
//! A decision is needed only until every participant has its commit record on
//! disk: once all of them have acknowledged `Commit`, none can be in doubt about
//! it, and the coordinator forgets it. The log is appended to and, past
//! [`DECISION_LOG_COMPACT_ENTRIES`] entries of which at most half are still
//! needed, rewritten atomically with those only, so it stays as small as the
//! commits that some participant has not confirmed. Forgotten decisions are
//! appended to a second file, `decisions.done`, without fsync, so a restart
//! before the next compaction does not bring them back for good; losing some
//! of that file only keeps decisions longer.

use crate::error::{StorageError, StorageResult};
use std::collections::{HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use foam_common::limits::DECISION_LOG_COMPACT_ENTRIES;
use foam_common::TxnId;
use serde::{Deserialize, Serialize};

/// Entries of a transaction id and its commit timestamp.
const DECISION_FILE_NAME: &str = "decisions-ts.log";
/// Entries of a transaction id only, from before commit timestamps: read
/// once (as committed at 0, which participants apply at their newest
/// timestamp) and folded into the new file.
const LEGACY_DECISION_FILE_NAME: &str = "decisions.log";
const FORGOTTEN_FILE_NAME: &str = "decisions.done";
const TXN_BYTES: usize = 16;
const ENTRY_BYTES: usize = TXN_BYTES + 8;
/// Exit code of a node whose decision log could not be repaired after a failed write.
const EXIT_CODE_DECISIONS_UNUSABLE: i32 = 74;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TxnOutcome {
    /// Committed at this timestamp.
    Committed(u64),
    Aborted,
    /// Still running on its coordinator; ask again later.
    Pending,
}

pub struct DecisionLog {
    path: PathBuf,
    /// Entries in the file past which it is compacted.
    compact_entries: usize,
    state: Mutex<DecisionState>,
}

struct DecisionState {
    file: File,
    /// Where forgotten decisions are listed until the next compaction.
    forgotten: File,
    /// Entries in the file, forgotten ones included.
    entries: usize,
    /// Commits some participant may still ask about, with their timestamps.
    committed: HashMap<TxnId, u64>,
    running: HashSet<TxnId>,
}

impl DecisionLog {
    pub fn open(data_dir: &Path) -> StorageResult<Self> {
        Self::open_compacting_after(data_dir, DECISION_LOG_COMPACT_ENTRIES)
    }

    fn open_compacting_after(data_dir: &Path, compact_entries: usize) -> StorageResult<Self> {
        let path = data_dir.join(DECISION_FILE_NAME);
        let bytes = read_if_exists(&path)?;
        // A torn last entry (crash mid-append) was never acknowledged: drop it.
        let whole = bytes.len() / ENTRY_BYTES * ENTRY_BYTES;
        let forgotten_path = data_dir.join(FORGOTTEN_FILE_NAME);
        let done: HashSet<TxnId> = txn_ids(&read_if_exists(&forgotten_path)?).collect();
        let legacy_path = data_dir.join(LEGACY_DECISION_FILE_NAME);
        let legacy = read_if_exists(&legacy_path)?;
        let committed: HashMap<TxnId, u64> = txn_ids(&legacy)
            .map(|txn| (txn, 0))
            .chain(decisions(&bytes[..whole]))
            .filter(|(txn, _)| !done.contains(txn))
            .collect();
        let forgotten = OpenOptions::new().create(true).append(true).open(&forgotten_path).map_err(|e| StorageError::io(&forgotten_path, e))?;
        let existed = path.exists();
        let file = OpenOptions::new().create(true).append(true).open(&path).map_err(|e| StorageError::io(&path, e))?;
        if !existed {
            foam_common::fs::sync_parent_dir(&path)?;
        }
        if whole != bytes.len() {
            file.set_len(whole as u64).map_err(|e| StorageError::io(&path, e))?;
        }
        let entries = whole / ENTRY_BYTES;
        let log = DecisionLog { path, compact_entries, state: Mutex::new(DecisionState { file, forgotten, entries, committed, running: HashSet::new() }) };
        if legacy_path.exists() {
            log.compact(&mut log.lock())?;
            std::fs::remove_file(&legacy_path).map_err(|e| StorageError::io(&legacy_path, e))?;
            foam_common::fs::sync_parent_dir(&legacy_path)?;
        }
        Ok(log)
    }

    pub fn begin(&self, txn: TxnId) {
        self.lock().running.insert(txn);
    }

    /// Durably records that `txn` commits at timestamp `ts`. After this
    /// returns, the transaction is committed whatever happens to any node.
    pub fn decide_commit(&self, txn: TxnId, ts: u64) -> StorageResult<()> {
        let mut state = self.lock();
        let length_before = state.file.metadata().map_err(|e| StorageError::io(&self.path, e))?.len();
        let written = state.file.write_all(&entry(txn, ts)).and_then(|()| state.file.sync_data());
        if let Err(error) = written {
            // A torn entry would shift every later one; cut it off or stop.
            if state.file.set_len(length_before).and_then(|()| state.file.sync_data()).is_err() {
                tracing::error!(path = %self.path.display(), %error, "cannot roll back a failed decision write; stopping");
                std::process::exit(EXIT_CODE_DECISIONS_UNUSABLE);
            }
            return Err(StorageError::io(&self.path, error));
        }
        state.committed.insert(txn, ts);
        state.entries += 1;
        Ok(())
    }

    /// Every participant has acknowledged `Commit` for `txn` (its commit record
    /// is durable), so no one will ask about it again: the decision may go.
    pub fn forget(&self, txn: TxnId) {
        let mut state = self.lock();
        if state.committed.remove(&txn).is_none() {
            return;
        }
        // Unsynced: a lost entry only keeps the decision until a compaction.
        let _ = state.forgotten.write_all(&txn.to_le_bytes());
        if state.entries >= self.compact_entries
            && state.committed.len() * 2 <= state.entries
            && let Err(error) = self.compact(&mut state)
        {
            // The old log is whole and still holds every needed decision.
            tracing::warn!(path = %self.path.display(), %error, "decision log not compacted");
        }
    }

    /// Rewrites the log with the decisions still needed: a new file written,
    /// fsynced and renamed over the old, so a crash leaves one or the other.
    fn compact(&self, state: &mut DecisionState) -> StorageResult<()> {
        let bytes: Vec<u8> = state.committed.iter().flat_map(|(txn, ts)| entry(*txn, *ts)).collect();
        foam_common::fs::write_atomic(&self.path, &bytes)?;
        state.file = OpenOptions::new().append(true).open(&self.path).map_err(|e| StorageError::io(&self.path, e))?;
        state.entries = state.committed.len();
        // The new log holds none of the forgotten decisions any more.
        let forgotten_path = self.path.with_file_name(FORGOTTEN_FILE_NAME);
        state.forgotten.set_len(0).map_err(|e| StorageError::io(&forgotten_path, e))?;
        Ok(())
    }

    /// The transaction has finished on this coordinator (committed or aborted).
    pub fn finish(&self, txn: TxnId) {
        self.lock().running.remove(&txn);
    }

    pub fn outcome(&self, txn: TxnId) -> TxnOutcome {
        let state = self.lock();
        if let Some(ts) = state.committed.get(&txn) {
            TxnOutcome::Committed(*ts)
        } else if state.running.contains(&txn) {
            TxnOutcome::Pending
        } else {
            TxnOutcome::Aborted
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, DecisionState> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

fn read_if_exists(path: &Path) -> StorageResult<Vec<u8>> {
    let mut bytes = Vec::new();
    if path.exists() {
        File::open(path).and_then(|mut f| f.read_to_end(&mut bytes)).map_err(|e| StorageError::io(path, e))?;
    }
    Ok(bytes)
}

/// The whole 16-byte transaction ids in `bytes` (a torn tail is ignored).
fn txn_ids(bytes: &[u8]) -> impl Iterator<Item = TxnId> + '_ {
    bytes.chunks_exact(TXN_BYTES).map(|chunk| TxnId::from_le_bytes(chunk.try_into().expect("16-byte chunk")))
}

/// The whole decisions (transaction id, commit timestamp) in `bytes`.
fn decisions(bytes: &[u8]) -> impl Iterator<Item = (TxnId, u64)> + '_ {
    bytes.chunks_exact(ENTRY_BYTES).map(|chunk| {
        let (txn, ts) = chunk.split_at(TXN_BYTES);
        (TxnId::from_le_bytes(txn.try_into().expect("16-byte id")), u64::from_le_bytes(ts.try_into().expect("8-byte timestamp")))
    })
}

fn entry(txn: TxnId, ts: u64) -> [u8; ENTRY_BYTES] {
    let mut bytes = [0; ENTRY_BYTES];
    bytes[..TXN_BYTES].copy_from_slice(&txn.to_le_bytes());
    bytes[TXN_BYTES..].copy_from_slice(&ts.to_le_bytes());
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commit_decisions_survive_restart_and_others_are_presumed_aborted() {
        let dir = std::env::temp_dir().join(format!("foam-decisions-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        {
            let log = DecisionLog::open(&dir).unwrap();
            log.begin(1);
            log.begin(2);
            assert_eq!(log.outcome(2), TxnOutcome::Pending);
            log.decide_commit(1, 41).unwrap();
        }
        let log = DecisionLog::open(&dir).unwrap();
        assert_eq!(log.outcome(1), TxnOutcome::Committed(41));
        assert_eq!(log.outcome(2), TxnOutcome::Aborted);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn forgotten_decisions_leave_the_log_and_unconfirmed_ones_survive_compaction() {
        let dir = std::env::temp_dir().join(format!("foam-decisions-compact-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let file_entries = || std::fs::metadata(dir.join(DECISION_FILE_NAME)).unwrap().len() as usize / ENTRY_BYTES;
        {
            let log = DecisionLog::open_compacting_after(&dir, 8).unwrap();
            // Txn 3 is never confirmed by every participant.
            for txn in 1..=7u128 {
                log.decide_commit(txn, 1000 + txn as u64).unwrap();
                if txn != 3 {
                    log.forget(txn);
                }
            }
            assert_eq!(file_entries(), 7, "not compacted below the threshold");
            log.decide_commit(8, 1000 + 8).unwrap();
            log.decide_commit(9, 1000 + 9).unwrap();
            log.forget(8);
            // 9 entries, 2 still needed (3 and 9): rewritten with those two.
            assert_eq!(file_entries(), 2);
            assert_eq!(std::fs::metadata(dir.join(FORGOTTEN_FILE_NAME)).unwrap().len(), 0, "the new log lists no forgotten decision");
            log.decide_commit(10, 1000 + 10).unwrap();
            assert_eq!(file_entries(), 3, "appends go on after a compaction");
            assert_eq!(log.outcome(3), TxnOutcome::Committed(1003));
        }
        let log = DecisionLog::open_compacting_after(&dir, 8).unwrap();
        log.decide_commit(11, 1000 + 11).unwrap();
        log.forget(11);
        drop(log);
        // Forgotten before a restart, not yet compacted away: still forgotten.
        let log = DecisionLog::open_compacting_after(&dir, 8).unwrap();
        assert_eq!(log.outcome(11), TxnOutcome::Aborted);
        for (txn, outcome) in [(3, TxnOutcome::Committed(1003)), (9, TxnOutcome::Committed(1009)), (10, TxnOutcome::Committed(1010)), (1, TxnOutcome::Aborted), (8, TxnOutcome::Aborted)] {
            assert_eq!(log.outcome(txn), outcome, "txn {txn}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
