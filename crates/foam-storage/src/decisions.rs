//! The coordinator's side of two-phase commit on this node: which
//! transactions it is running the commit protocol for, so a participant that
//! asks (`TxnOutcome`) waits while it does. Decisions themselves are
//! transaction records on the meta nodes (`foam_catalog::txns`), so no
//! participant depends on a coordinator to learn one; a transaction this node
//! no longer runs is answered `Aborted`, meaning "ask the meta nodes".
//!
//! Commit decisions that an older version of FoamDB logged here
//! (`decisions-ts.log`, and `decisions.log` without timestamps) are read at
//! start and still answered, so a participant left in doubt across the
//! upgrade learns them; nothing is written to those files any more.

use crate::error::{StorageError, StorageResult};
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Mutex;

use foam_common::TxnId;
use serde::{Deserialize, Serialize};

/// Entries of a transaction id and its commit timestamp.
const DECISION_FILE_NAME: &str = "decisions-ts.log";
/// Entries of a transaction id only, from before commit timestamps (read as
/// committed at 0, which participants apply at their newest timestamp).
const LEGACY_DECISION_FILE_NAME: &str = "decisions.log";
/// Decisions every participant had confirmed, listed apart.
const FORGOTTEN_FILE_NAME: &str = "decisions.done";
const TXN_BYTES: usize = 16;
const ENTRY_BYTES: usize = TXN_BYTES + 8;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TxnOutcome {
    /// Committed at this timestamp.
    Committed(u64),
    /// Aborted, or (from a coordinator) not running there: the meta nodes
    /// hold the outcome.
    Aborted,
    /// Still running on its coordinator; ask again later.
    Pending,
}

pub struct DecisionLog {
    state: Mutex<DecisionState>,
}

struct DecisionState {
    /// Commits logged by an older version that a participant may still ask about.
    logged: HashMap<TxnId, u64>,
    running: HashSet<TxnId>,
}

impl DecisionLog {
    pub fn open(data_dir: &Path) -> StorageResult<Self> {
        let bytes = read_if_exists(&data_dir.join(DECISION_FILE_NAME))?;
        let done: HashSet<TxnId> = txn_ids(&read_if_exists(&data_dir.join(FORGOTTEN_FILE_NAME))?).collect();
        let legacy = read_if_exists(&data_dir.join(LEGACY_DECISION_FILE_NAME))?;
        // A torn last entry (crash mid-append) was never acknowledged.
        let logged = txn_ids(&legacy).map(|txn| (txn, 0)).chain(decisions(&bytes)).filter(|(txn, _)| !done.contains(txn)).collect();
        Ok(DecisionLog { state: Mutex::new(DecisionState { logged, running: HashSet::new() }) })
    }

    /// This node starts the commit protocol for `txn`.
    pub fn begin(&self, txn: TxnId) {
        self.lock().running.insert(txn);
    }

    /// The transaction has finished on this coordinator (committed or aborted).
    pub fn finish(&self, txn: TxnId) {
        self.lock().running.remove(&txn);
    }

    pub fn outcome(&self, txn: TxnId) -> TxnOutcome {
        let state = self.lock();
        if let Some(ts) = state.logged.get(&txn) {
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
    match std::fs::read(path) {
        Ok(bytes) => Ok(bytes),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(StorageError::io(path, e)),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn running_transactions_are_pending_and_logged_commits_are_still_answered() {
        let dir = std::env::temp_dir().join(format!("foam-decisions-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        // As an older version left them: 1 and 2 committed, 2 confirmed
        // everywhere, 3 committed before timestamps, and a torn entry.
        let mut logged = Vec::new();
        for (txn, ts) in [(1u128, 41u64), (2, 42)] {
            logged.extend(txn.to_le_bytes());
            logged.extend(ts.to_le_bytes());
        }
        logged.extend([7; 5]);
        std::fs::write(dir.join(DECISION_FILE_NAME), logged).unwrap();
        std::fs::write(dir.join(FORGOTTEN_FILE_NAME), 2u128.to_le_bytes()).unwrap();
        std::fs::write(dir.join(LEGACY_DECISION_FILE_NAME), 3u128.to_le_bytes()).unwrap();

        let log = DecisionLog::open(&dir).unwrap();
        assert_eq!(log.outcome(1), TxnOutcome::Committed(41));
        assert_eq!(log.outcome(2), TxnOutcome::Aborted, "confirmed by every participant: the meta nodes answer");
        assert_eq!(log.outcome(3), TxnOutcome::Committed(0));
        log.begin(4);
        assert_eq!(log.outcome(4), TxnOutcome::Pending);
        log.finish(4);
        assert_eq!(log.outcome(4), TxnOutcome::Aborted);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
