//! Transaction records: the outcome of every distributed transaction that some
//! participant may still ask about, kept in the meta nodes' Raft state machine
//! beside the catalog (foam-node's `consensus.rs` applies these commands), so a
//! decision is durable on a majority and no coordinator is a single point of
//! failure for it.
//!
//! A coordinator decides COMMIT with [`TxnCommand::DecideCommit`]; a
//! participant whose coordinator is unreachable or no longer running the
//! transaction settles it with [`TxnCommand::Abandon`]. Both record an
//! outcome only when there is none yet, so whichever reaches the log first
//! decides, and both answer the recorded one: a coordinator that was presumed
//! dead learns that its transaction was aborted and says so to its client.
//!
//! A commit record is dropped once every participant has confirmed that its
//! commit record is on disk ([`TxnCommand::Forget`]); an abort record after
//! [`ABORT_RECORD_RETENTION_MICROS`]. A commit decided more than
//! [`DECIDE_WINDOW_MICROS`] after its prepare timestamp is refused (recorded
//! as aborted), so a coordinator paused for longer than abort records are kept
//! cannot commit a transaction that its participants already aborted.

use std::collections::{BTreeMap, BTreeSet};

use foam_common::{NodeId, TxnId};
use serde::{Deserialize, Serialize};

/// How long after its prepare timestamp a transaction may still be decided
/// COMMIT (microseconds of the cluster clock).
pub const DECIDE_WINDOW_MICROS: u64 = 10 * 60 * 1_000_000;

/// How long an abort record is kept: well past [`DECIDE_WINDOW_MICROS`], so no
/// late DecideCommit can find it gone.
pub const ABORT_RECORD_RETENTION_MICROS: u64 = 6 * DECIDE_WINDOW_MICROS;

/// A change to the transaction records, applied in Raft log order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TxnCommand {
    /// Every participant has prepared `txn`: it commits at `commit_ts` unless
    /// it was already settled as aborted.
    DecideCommit {
        #[serde(with = "txn_hex")]
        txn: TxnId,
        prepare_ts: u64,
        commit_ts: u64,
        participants: Vec<NodeId>,
    },
    /// A participant gives up waiting on the coordinator: `txn` aborts unless
    /// it was already decided. `ts` is the cluster clock when asked.
    Abandon {
        #[serde(with = "txn_hex")]
        txn: TxnId,
        ts: u64,
    },
    /// Participants that have the outcome on disk. `ts` is the cluster
    /// clock, for expiring abort records.
    Forget { settled: Vec<Settled>, ts: u64 },
}

/// A transaction whose outcome `node` (`None`: every participant) has on disk.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Settled {
    #[serde(with = "txn_hex")]
    pub txn: TxnId,
    pub node: Option<NodeId>,
}

/// Transaction ids in commands as 32 hex digits: a command travels inside
/// the catalog's internally tagged command enum, which serde buffers in a
/// form that has no 128-bit integers.
mod txn_hex {
    use foam_common::TxnId;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(txn: &TxnId, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&format!("{txn:032x}"))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<TxnId, D::Error> {
        let digits = String::deserialize(deserializer)?;
        TxnId::from_str_radix(&digits, 16).map_err(serde::de::Error::custom)
    }
}

/// The recorded outcome of a transaction: committed at a timestamp, or aborted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TxnDecision {
    Committed(u64),
    Aborted,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct TxnRecord {
    decision: TxnDecision,
    /// Cluster clock when the outcome was recorded.
    at: u64,
    /// Participants of a commit that have not confirmed it yet.
    waiting: BTreeSet<NodeId>,
}

/// The outcomes some participant may still ask about.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TxnRecords {
    records: BTreeMap<TxnId, TxnRecord>,
}

impl TxnRecords {
    /// The recorded outcome of `txn`, if any.
    pub fn decision(&self, txn: TxnId) -> Option<TxnDecision> {
        self.records.get(&txn).map(|r| r.decision)
    }

    pub fn len(&self) -> usize {
        self.records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Applies `command`; `is_node` says which node ids the cluster still has
    /// (a removed node will never confirm). Returns the outcome the command
    /// settled on, for DecideCommit and Abandon.
    pub fn apply(&mut self, command: &TxnCommand, is_node: impl Fn(NodeId) -> bool) -> Option<TxnDecision> {
        match command {
            TxnCommand::DecideCommit { txn, prepare_ts, commit_ts, participants } => {
                let record = self.records.entry(*txn).or_insert_with(|| {
                    if commit_ts.saturating_sub(*prepare_ts) > DECIDE_WINDOW_MICROS {
                        TxnRecord { decision: TxnDecision::Aborted, at: *commit_ts, waiting: BTreeSet::new() }
                    } else {
                        let waiting = participants.iter().copied().filter(|n| is_node(*n)).collect();
                        TxnRecord { decision: TxnDecision::Committed(*commit_ts), at: *commit_ts, waiting }
                    }
                });
                Some(record.decision)
            }
            TxnCommand::Abandon { txn, ts } => {
                let record = self
                    .records
                    .entry(*txn)
                    .or_insert(TxnRecord { decision: TxnDecision::Aborted, at: *ts, waiting: BTreeSet::new() });
                Some(record.decision)
            }
            TxnCommand::Forget { settled, ts } => {
                for Settled { txn, node } in settled {
                    let Some(record) = self.records.get_mut(txn) else { continue };
                    match node {
                        Some(node) => {
                            record.waiting.remove(node);
                        }
                        None => record.waiting.clear(),
                    }
                }
                let horizon = ts.saturating_sub(ABORT_RECORD_RETENTION_MICROS);
                self.records.retain(|_, record| match record.decision {
                    TxnDecision::Committed(_) => record.waiting.iter().any(|n| is_node(*n)),
                    TxnDecision::Aborted => record.at >= horizon,
                });
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: u64 = 1_000_000;

    fn forget(settled: &[(TxnId, Option<NodeId>)], ts: u64) -> TxnCommand {
        TxnCommand::Forget { settled: settled.iter().map(|(txn, node)| Settled { txn: *txn, node: *node }).collect(), ts }
    }

    fn decide(txn: TxnId, prepare_ts: u64, commit_ts: u64) -> TxnCommand {
        TxnCommand::DecideCommit { txn, prepare_ts, commit_ts, participants: vec![1, 2, 3] }
    }

    #[test]
    fn the_first_outcome_in_the_log_stands() {
        let mut records = TxnRecords::default();
        let all = |_| true;
        assert_eq!(records.apply(&decide(7, 100, 200), all), Some(TxnDecision::Committed(200)));
        assert_eq!(records.apply(&TxnCommand::Abandon { txn: 7, ts: 300 }, all), Some(TxnDecision::Committed(200)));
        // Retried with another timestamp, the first decision is answered.
        assert_eq!(records.apply(&decide(7, 100, 250), all), Some(TxnDecision::Committed(200)));

        assert_eq!(records.apply(&TxnCommand::Abandon { txn: 8, ts: 300 }, all), Some(TxnDecision::Aborted));
        assert_eq!(records.apply(&decide(8, 100, 400), all), Some(TxnDecision::Aborted));
        assert_eq!(records.decision(8), Some(TxnDecision::Aborted));
        assert_eq!(records.decision(9), None);
    }

    #[test]
    fn a_late_commit_is_refused() {
        let mut records = TxnRecords::default();
        let late = decide(1, SECOND, SECOND + DECIDE_WINDOW_MICROS + 1);
        assert_eq!(records.apply(&late, |_| true), Some(TxnDecision::Aborted));
        let in_time = decide(2, SECOND, SECOND + DECIDE_WINDOW_MICROS);
        assert_eq!(records.apply(&in_time, |_| true), Some(TxnDecision::Committed(SECOND + DECIDE_WINDOW_MICROS)));
    }

    #[test]
    fn a_commit_is_kept_until_every_participant_confirmed() {
        let mut records = TxnRecords::default();
        let all = |_| true;
        records.apply(&decide(1, 10, 20), all);
        records.apply(&decide(2, 10, 20), all);
        records.apply(&forget(&[(1, Some(1)), (1, Some(3))], 30), all);
        assert_eq!(records.decision(1), Some(TxnDecision::Committed(20)), "node 2 has not confirmed");
        records.apply(&forget(&[(1, Some(2)), (2, None)], 30), all);
        assert!(records.is_empty(), "{records:?}");

        // A node removed from the cluster will never confirm.
        records.apply(&decide(3, 10, 20), all);
        records.apply(&forget(&[(3, Some(1)), (3, Some(2))], 30), all);
        assert_eq!(records.len(), 1);
        records.apply(&forget(&[], 30), |n| n != 3);
        assert!(records.is_empty());
    }

    #[test]
    fn abort_records_expire_after_their_retention() {
        let mut records = TxnRecords::default();
        let all = |_| true;
        records.apply(&TxnCommand::Abandon { txn: 1, ts: SECOND }, all);
        records.apply(&forget(&[], SECOND + ABORT_RECORD_RETENTION_MICROS), all);
        assert_eq!(records.decision(1), Some(TxnDecision::Aborted));
        records.apply(&forget(&[], SECOND + ABORT_RECORD_RETENTION_MICROS + 1), all);
        assert_eq!(records.decision(1), None);
    }

    #[test]
    fn records_survive_json() {
        let mut records = TxnRecords::default();
        let txn: TxnId = u128::MAX - 5;
        records.apply(&decide(txn, 10, 20), |_| true);
        records.apply(&TxnCommand::Abandon { txn: 3, ts: 40 }, |_| true);
        let json = serde_json::to_string(&records).unwrap();
        let back: TxnRecords = serde_json::from_str(&json).unwrap();
        assert_eq!(back, records);
        // As the Raft log carries them: inside the catalog's tagged commands.
        for change in [forget(&[(txn, None), (3, Some(2))], 50), decide(txn, 1, 2), TxnCommand::Abandon { txn, ts: 3 }] {
            let command = crate::CatalogCommand::Txn { change };
            assert_eq!(serde_json::from_str::<crate::CatalogCommand>(&serde_json::to_string(&command).unwrap()).unwrap(), command);
        }
    }
}
