//! The coordinator's side of two-phase commit: which of the transactions this
//! node coordinated were decided COMMIT. The decision is fsynced before any
//! participant is told to commit, so a participant left in doubt by a crash can
//! always ask. A transaction this node never decided is presumed aborted once it
//! is no longer running (presumed-abort 2PC), so only commits are logged.

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use foam_common::{FoamError, FoamResult, TxnId};
use serde::{Deserialize, Serialize};

const DECISION_FILE_NAME: &str = "decisions.log";
const ENTRY_BYTES: usize = 16;
/// Exit code of a node whose decision log could not be repaired after a failed write.
const EXIT_CODE_DECISIONS_UNUSABLE: i32 = 74;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TxnOutcome {
    Committed,
    Aborted,
    /// Still running on its coordinator; ask again later.
    Pending,
}

pub struct DecisionLog {
    path: PathBuf,
    state: Mutex<DecisionState>,
}

struct DecisionState {
    file: File,
    committed: HashSet<TxnId>,
    running: HashSet<TxnId>,
}

impl DecisionLog {
    pub fn open(data_dir: &Path) -> FoamResult<Self> {
        let path = data_dir.join(DECISION_FILE_NAME);
        let mut bytes = Vec::new();
        if path.exists() {
            File::open(&path).and_then(|mut f| f.read_to_end(&mut bytes)).map_err(|e| FoamError::io(&path, e))?;
        }
        // A torn last entry (crash mid-append) was never acknowledged: drop it.
        let whole = bytes.len() / ENTRY_BYTES * ENTRY_BYTES;
        let committed = bytes[..whole]
            .chunks_exact(ENTRY_BYTES)
            .map(|chunk| TxnId::from_le_bytes(chunk.try_into().expect("16-byte chunk")))
            .collect();
        let existed = path.exists();
        let file = OpenOptions::new().create(true).append(true).open(&path).map_err(|e| FoamError::io(&path, e))?;
        if !existed {
            foam_common::fs::sync_parent_dir(&path)?;
        }
        if whole != bytes.len() {
            file.set_len(whole as u64).map_err(|e| FoamError::io(&path, e))?;
        }
        Ok(DecisionLog { path, state: Mutex::new(DecisionState { file, committed, running: HashSet::new() }) })
    }

    pub fn begin(&self, txn: TxnId) {
        self.lock().running.insert(txn);
    }

    /// Durably records that `txn` commits. After this returns, the transaction is
    /// committed whatever happens to any node.
    pub fn decide_commit(&self, txn: TxnId) -> FoamResult<()> {
        let mut state = self.lock();
        let length_before = state.file.metadata().map_err(|e| FoamError::io(&self.path, e))?.len();
        let written = state.file.write_all(&txn.to_le_bytes()).and_then(|()| state.file.sync_data());
        if let Err(error) = written {
            // A torn entry would shift every later one; cut it off or stop.
            if state.file.set_len(length_before).and_then(|()| state.file.sync_data()).is_err() {
                tracing::error!(path = %self.path.display(), %error, "cannot roll back a failed decision write; stopping");
                std::process::exit(EXIT_CODE_DECISIONS_UNUSABLE);
            }
            return Err(FoamError::io(&self.path, error));
        }
        state.committed.insert(txn);
        Ok(())
    }

    /// The transaction has finished on this coordinator (committed or aborted).
    pub fn finish(&self, txn: TxnId) {
        self.lock().running.remove(&txn);
    }

    pub fn outcome(&self, txn: TxnId) -> TxnOutcome {
        let state = self.lock();
        if state.committed.contains(&txn) {
            TxnOutcome::Committed
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
            log.decide_commit(1).unwrap();
        }
        let log = DecisionLog::open(&dir).unwrap();
        assert_eq!(log.outcome(1), TxnOutcome::Committed);
        assert_eq!(log.outcome(2), TxnOutcome::Aborted);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
