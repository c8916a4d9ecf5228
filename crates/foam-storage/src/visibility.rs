//! The MVCC gate: which prepared transactions a read or a commit on a
//! partition must wait for, so that every read at snapshot `S` sees exactly
//! the transactions committed at or before `S`, on every partition and copy.
//!
//! A coordinator takes a prepare timestamp from the cluster clock before it
//! prepares, and the commit timestamp after every participant prepared, so a
//! transaction's commit timestamp is above its prepare timestamp and above
//! every snapshot taken before its last prepare:
//!
//! ```text
//!  read at S on partition p      waits while p has a transaction that is
//!                                  undecided with prepare_ts < S  (its commit ts may be <= S)
//!                                  or decided at t <= S and not applied yet
//!  commit at T on partitions P    waits while some partition of P has one that is
//!                                  undecided with prepare_ts < T  (it may commit below T)
//!                                  or decided below T and not applied yet
//! ```
//! Commits are therefore applied in timestamp order on each partition, which
//! is what lets `partition.rs` keep versions as a list ordered by timestamp.
//! A transaction prepared later than a read or a commit took its timestamp
//! gets a larger commit timestamp, so neither waits for it.

use crate::error::{StorageError, StorageResult};
use foam_common::{PartitionId, TableId, TxnId};
use std::collections::HashMap;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

type PartitionKey = (TableId, PartitionId);

#[derive(Debug)]
struct Gated {
    partitions: Vec<PartitionKey>,
    prepare_ts: u64,
    /// The commit timestamp, once the coordinator's decision arrived.
    decided: Option<u64>,
}

#[derive(Default)]
pub struct VisibilityGate {
    gated: Mutex<HashMap<TxnId, Gated>>,
    changed: Condvar,
}

impl VisibilityGate {
    /// `txn` prepared on `partitions` with `prepare_ts` (0 when unknown, which
    /// holds back every read of them until it is decided).
    pub fn prepared(&self, txn: TxnId, mut partitions: Vec<PartitionKey>, prepare_ts: u64) {
        partitions.sort_unstable();
        partitions.dedup();
        self.lock().insert(txn, Gated { partitions, prepare_ts, decided: None });
    }

    /// The coordinator decided to commit `txn` at `ts`.
    pub fn decide(&self, txn: TxnId, ts: u64) {
        if let Some(gated) = self.lock().get_mut(&txn) {
            gated.decided = Some(ts);
        }
        self.changed.notify_all();
    }

    /// `txn` was applied or aborted: nothing waits for it any more.
    pub fn done(&self, txn: TxnId) {
        self.lock().remove(&txn);
        self.changed.notify_all();
    }

    /// Waits until `txn`, decided at `ts`, is next to apply on each of its
    /// partitions; fails after `wait` (the transaction stays decided, and
    /// applying it is tried again later).
    pub fn wait_turn(&self, txn: TxnId, ts: u64, wait: Duration) -> StorageResult<()> {
        let order = (ts, txn);
        self.wait_while(wait, |gated| {
            let Some(mine) = gated.get(&txn) else { return None };
            gated.iter().find_map(|(other, g)| {
                let before = match g.decided {
                    None => g.prepare_ts < ts,
                    Some(at) => (at, *other) < order,
                };
                (*other != txn && before && shares_partition(&g.partitions, &mine.partitions)).then_some(*other)
            })
        })
        .map_err(|blocker| StorageError::SnapshotUnavailable {
            message: format!("commit of transaction {txn:032x} waited for transaction {blocker:032x} to be decided"),
        })
    }

    /// Whether a read of `key` at snapshot `ts` can go ahead now.
    pub fn readable(&self, key: PartitionKey, ts: u64) -> bool {
        blocking_read(&self.lock(), key, ts).is_none()
    }

    /// Waits until a read of `key` at snapshot `ts` can go ahead.
    pub fn wait_readable(&self, key: PartitionKey, ts: u64, wait: Duration) -> StorageResult<()> {
        self.wait_while(wait, |gated| blocking_read(gated, key, ts)).map_err(|blocker| StorageError::SnapshotUnavailable {
            message: format!(
                "the read of table {} partition {} at snapshot {ts} waited too long for transaction {blocker:032x}, prepared there, to be decided",
                key.0, key.1
            ),
        })
    }

    /// Waits while `blocker` names a transaction to wait for; returns the last one on timeout.
    fn wait_while(&self, wait: Duration, blocker: impl Fn(&HashMap<TxnId, Gated>) -> Option<TxnId>) -> Result<(), TxnId> {
        let deadline = Instant::now() + wait;
        let mut gated = self.lock();
        while let Some(txn) = blocker(&gated) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(txn);
            }
            gated = self.changed.wait_timeout(gated, left).unwrap_or_else(|p| p.into_inner()).0;
        }
        Ok(())
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<TxnId, Gated>> {
        self.gated.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn blocking_read(gated: &HashMap<TxnId, Gated>, key: PartitionKey, ts: u64) -> Option<TxnId> {
    gated.iter().find_map(|(txn, g)| {
        let may_be_visible = match g.decided {
            None => g.prepare_ts < ts,
            Some(at) => at <= ts,
        };
        (may_be_visible && g.partitions.binary_search(&key).is_ok()).then_some(*txn)
    })
}

fn shares_partition(a: &[PartitionKey], b: &[PartitionKey]) -> bool {
    a.iter().any(|key| b.binary_search(key).is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    const NO_WAIT: Duration = Duration::ZERO;

    #[test]
    fn reads_wait_only_for_transactions_that_may_commit_below_their_snapshot() {
        let gate = VisibilityGate::default();
        gate.prepared(1, vec![(7, 0), (7, 1)], 100);
        assert!(gate.readable((7, 0), 100), "prepared at 100: commits above 100");
        assert!(!gate.readable((7, 0), 101), "prepared at 100: may commit at 101");
        assert!(gate.readable((7, 2), 500), "another partition");
        gate.decide(1, 150);
        assert!(gate.readable((7, 1), 149), "decided above the snapshot");
        assert!(!gate.readable((7, 1), 150), "decided at the snapshot, not applied yet");
        assert!(gate.wait_readable((7, 1), 150, NO_WAIT).is_err());
        gate.done(1);
        assert!(gate.readable((7, 1), 150));
    }

    #[test]
    fn commits_apply_in_timestamp_order_on_shared_partitions() {
        let gate = Arc::new(VisibilityGate::default());
        gate.prepared(1, vec![(7, 0)], 100);
        gate.prepared(2, vec![(7, 0), (7, 1)], 110);
        gate.prepared(3, vec![(8, 0)], 90);
        // 2 decided first, at 130: 1 (prepared at 100) may still commit below it.
        gate.decide(2, 130);
        assert!(gate.wait_turn(2, 130, NO_WAIT).is_err());
        // 3 shares no partition with 2 and never holds it back.
        let waiting = {
            let gate = gate.clone();
            std::thread::spawn(move || gate.wait_turn(2, 130, Duration::from_secs(10)))
        };
        gate.decide(1, 120);
        assert!(gate.wait_turn(1, 120, NO_WAIT).is_ok(), "1 is first: nothing below 120 is pending on (7, 0)");
        std::thread::sleep(Duration::from_millis(20));
        assert!(!waiting.is_finished(), "2 waits until 1 is applied");
        gate.done(1);
        assert!(waiting.join().unwrap().is_ok());
    }

    #[test]
    fn a_later_decision_below_unblocks_in_either_order() {
        let gate = VisibilityGate::default();
        gate.prepared(1, vec![(7, 0)], 100);
        gate.prepared(2, vec![(7, 0)], 105);
        gate.decide(1, 140);
        gate.decide(2, 120);
        assert!(gate.wait_turn(1, 140, NO_WAIT).is_err(), "2 commits below 1 and goes first");
        assert!(gate.wait_turn(2, 120, NO_WAIT).is_ok());
        gate.done(2);
        assert!(gate.wait_turn(1, 140, NO_WAIT).is_ok());
    }
}
