//! A checker of snapshot isolation over a recorded history of transactions
//! that append to and read lists (Elle's list-append model, simplified).
//!
//! Every transaction appends elements no other transaction writes, so each
//! read names the writers it saw and the final list of each key gives the
//! order its writers committed in. [`check`] finds, from that alone:
//! - a committed append missing from the final list (a lost update), an
//!   element written twice, or an aborted or unknown element kept;
//! - a read that is not a prefix of the final list once the transaction's
//!   own appends (which must end it, in order) are taken off: it saw an
//!   aborted write (a dirty read) or an order no commit produced;
//! - two reads of one key in a transaction that saw different writers (a
//!   snapshot that moved);
//! - a writer seen on one key and not on another key it wrote (a
//!   fractured read);
//! - a cycle in the order commits must have had: a writer before the next
//!   on each key, and each writer a reader saw before each one it did not
//!   see there (read skew, a long fork: snapshots that no single commit
//!   order explains).
//!
//! A transaction whose end the client could not learn (its connection was
//! lost at COMMIT) committed if any of its appends is kept, and must then
//! have all of them kept; else it aborted. Write skew is allowed: it is
//! what snapshot isolation permits.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;

/// One step of a transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// A read of `key`: its list's elements, in order.
    Read { key: i64, list: Vec<String> },
    /// An append of `element` (unique in the history) to `key`'s list.
    Append { key: i64, element: String },
}

/// How a transaction ended, as its client learnt it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Committed,
    Aborted,
    /// The client lost its connection before it learnt the end.
    Unknown,
}

/// One transaction as its client saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Txn {
    pub name: String,
    pub ops: Vec<Op>,
    pub outcome: Outcome,
}

/// A run's transactions and each key's list once they had all ended.
#[derive(Debug, Clone, Default)]
pub struct History {
    pub txns: Vec<Txn>,
    pub final_lists: BTreeMap<i64, Vec<String>>,
}

/// What the history shows snapshot isolation did not hold to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Anomaly {
    /// An element appears twice in a key's final list.
    Duplicate { key: i64, element: String },
    /// A committed transaction's append is not in the key's final list.
    LostUpdate { txn: String, key: i64, element: String },
    /// The final list holds an element no committed transaction appended there.
    UncommittedKept { key: i64, element: String },
    /// A read is not a prefix of the final list (past its own appends).
    NotAPrefix { txn: String, key: i64, read: Vec<String> },
    /// A read does not end with the transaction's own appends to the key.
    OwnWritesMissing { txn: String, key: i64, read: Vec<String> },
    /// Two reads of one key in one transaction saw different writers.
    SnapshotMoved { txn: String, key: i64 },
    /// The transaction saw `writer`'s append on one key and not on another.
    FracturedRead { txn: String, writer: String },
    /// Commits that must each precede the next, around to the first.
    Cycle { txns: Vec<String> },
}

impl fmt::Display for Anomaly {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Anomaly::Duplicate { key, element } => write!(f, "key {key} holds {element} twice"),
            Anomaly::LostUpdate { txn, key, element } => write!(f, "lost update: {txn} committed {element} to key {key}, which does not hold it"),
            Anomaly::UncommittedKept { key, element } => write!(f, "key {key} holds {element}, which no committed transaction appended there"),
            Anomaly::NotAPrefix { txn, key, read } => write!(f, "{txn} read key {key} as {read:?}, not a prefix of its committed list"),
            Anomaly::OwnWritesMissing { txn, key, read } => write!(f, "{txn} read key {key} as {read:?}, without its own appends at the end"),
            Anomaly::SnapshotMoved { txn, key } => write!(f, "{txn} read key {key} twice and saw different writers"),
            Anomaly::FracturedRead { txn, writer } => write!(f, "fractured read: {txn} saw {writer} on one key and not on another"),
            Anomaly::Cycle { txns } => write!(f, "no commit order explains what was read: {}", txns.join(" -> ")),
        }
    }
}

/// Every anomaly in `history` (empty when it is snapshot isolation).
pub fn check(history: &History) -> Vec<Anomaly> {
    let mut anomalies = Vec::new();
    let kept: BTreeSet<&str> = history.final_lists.values().flatten().map(String::as_str).collect();
    // Whether each transaction committed, an unknown end read from what was kept.
    let committed: Vec<bool> = history
        .txns
        .iter()
        .map(|txn| match txn.outcome {
            Outcome::Committed => true,
            Outcome::Aborted => false,
            Outcome::Unknown => txn.ops.iter().any(|op| matches!(op, Op::Append { element, .. } if kept.contains(element.as_str()))),
        })
        .collect();
    // Who appended each element, where.
    let mut writers: HashMap<&str, (usize, i64)> = HashMap::new();
    for (t, txn) in history.txns.iter().enumerate() {
        for op in &txn.ops {
            if let Op::Append { key, element } = op {
                writers.insert(element, (t, *key));
            }
        }
    }
    // Each key's committed order; what it holds that it should not.
    let mut positions: BTreeMap<i64, HashMap<&str, usize>> = BTreeMap::new();
    for (key, list) in &history.final_lists {
        let at = positions.entry(*key).or_default();
        for (i, element) in list.iter().enumerate() {
            if at.insert(element, i).is_some() {
                anomalies.push(Anomaly::Duplicate { key: *key, element: element.clone() });
            }
            match writers.get(element.as_str()) {
                Some((t, written)) if *written == *key && committed[*t] => {}
                _ => anomalies.push(Anomaly::UncommittedKept { key: *key, element: element.clone() }),
            }
        }
    }
    for txn in history.txns.iter().zip(&committed).filter_map(|(txn, c)| c.then_some(txn)) {
        for op in &txn.ops {
            if let Op::Append { key, element } = op
                && !positions.get(key).is_some_and(|at| at.contains_key(element.as_str()))
            {
                anomalies.push(Anomaly::LostUpdate { txn: txn.name.clone(), key: *key, element: element.clone() });
            }
        }
    }
    let empty = Vec::new();
    let final_list = |key: i64| history.final_lists.get(&key).unwrap_or(&empty);
    // The writers in order on each key (a writer's appends to a key sit
    // together under snapshot isolation).
    let mut order: BTreeSet<(usize, usize)> = BTreeSet::new();
    for list in history.final_lists.values() {
        let txns: Vec<usize> = list.iter().filter_map(|e| writers.get(e.as_str()).map(|(t, _)| *t)).collect();
        for pair in txns.windows(2) {
            if pair[0] != pair[1] {
                order.insert((pair[0], pair[1]));
            }
        }
    }
    // What each transaction read.
    for (t, txn) in history.txns.iter().enumerate() {
        let mut own: BTreeMap<i64, Vec<&str>> = BTreeMap::new();
        let mut seen_length: BTreeMap<i64, usize> = BTreeMap::new();
        for op in &txn.ops {
            match op {
                Op::Append { key, element } => own.entry(*key).or_default().push(element),
                Op::Read { key, list } => {
                    let mine = own.get(key).map_or(&[][..], Vec::as_slice);
                    let split = list.len().saturating_sub(mine.len());
                    if list.len() < mine.len() || list[split..].iter().map(String::as_str).ne(mine.iter().copied()) {
                        anomalies.push(Anomaly::OwnWritesMissing { txn: txn.name.clone(), key: *key, read: list.clone() });
                        continue;
                    }
                    let others = &list[..split];
                    if !final_list(*key).starts_with(others) {
                        anomalies.push(Anomaly::NotAPrefix { txn: txn.name.clone(), key: *key, read: list.clone() });
                        continue;
                    }
                    if *seen_length.entry(*key).or_insert(others.len()) != others.len() {
                        anomalies.push(Anomaly::SnapshotMoved { txn: txn.name.clone(), key: *key });
                    }
                }
            }
        }
        // The writers it saw, and those it did not, on the keys it read.
        let (mut saw, mut missed) = (BTreeSet::new(), BTreeSet::new());
        for (key, length) in &seen_length {
            for (i, element) in final_list(*key).iter().enumerate() {
                let Some((writer, _)) = writers.get(element.as_str()) else { continue };
                if *writer == t {
                    continue;
                }
                if i < *length {
                    saw.insert(*writer);
                } else {
                    missed.insert(*writer);
                }
            }
        }
        for writer in saw.intersection(&missed) {
            anomalies.push(Anomaly::FracturedRead { txn: txn.name.clone(), writer: history.txns[*writer].name.clone() });
        }
        for before in saw.difference(&missed) {
            for after in missed.difference(&saw) {
                order.insert((*before, *after));
            }
            // It committed after its snapshot, which held what it saw.
            if committed[t] && txn.ops.iter().any(|op| matches!(op, Op::Append { .. })) {
                order.insert((*before, t));
            }
        }
    }
    if let Some(cycle) = find_cycle(history.txns.len(), &order) {
        anomalies.push(Anomaly::Cycle { txns: cycle.into_iter().map(|t| history.txns[t].name.clone()).collect() });
    }
    anomalies
}

/// A cycle of `edges` over `nodes` nodes, as the nodes around it, if any.
fn find_cycle(nodes: usize, edges: &BTreeSet<(usize, usize)>) -> Option<Vec<usize>> {
    let mut next: Vec<Vec<usize>> = vec![Vec::new(); nodes];
    for (from, to) in edges {
        next[*from].push(*to);
    }
    // 0 unvisited, 1 on the current path, 2 done.
    let mut state = vec![0u8; nodes];
    let mut path: Vec<usize> = Vec::new();
    for start in 0..nodes {
        if state[start] != 0 {
            continue;
        }
        // Depth first without recursion: (node, index of its next edge).
        let mut stack = vec![(start, 0usize)];
        state[start] = 1;
        path.push(start);
        while let Some((node, edge)) = stack.last_mut() {
            let node = *node;
            if let Some(&to) = next[node].get(*edge) {
                *edge += 1;
                match state[to] {
                    0 => {
                        state[to] = 1;
                        path.push(to);
                        stack.push((to, 0));
                    }
                    1 => {
                        let from = path.iter().position(|n| *n == to).unwrap_or(0);
                        return Some(path[from..].to_vec());
                    }
                    _ => {}
                }
            } else {
                state[node] = 2;
                path.pop();
                stack.pop();
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(key: i64, list: &[&str]) -> Op {
        Op::Read { key, list: list.iter().map(|s| s.to_string()).collect() }
    }

    fn append(key: i64, element: &str) -> Op {
        Op::Append { key, element: element.into() }
    }

    fn txn(name: &str, committed: bool, ops: Vec<Op>) -> Txn {
        Txn { name: name.into(), ops, outcome: if committed { Outcome::Committed } else { Outcome::Aborted } }
    }

    fn history(txns: Vec<Txn>, finals: &[(i64, &[&str])]) -> History {
        History { txns, final_lists: finals.iter().map(|(k, l)| (*k, l.iter().map(|s| s.to_string()).collect())).collect() }
    }

    #[test]
    fn a_serial_history_has_no_anomaly() {
        let h = history(
            vec![
                txn("t1", true, vec![read(1, &[]), append(1, "a"), append(2, "b")]),
                txn("t2", true, vec![read(1, &["a"]), append(1, "c"), read(1, &["a", "c"]), read(2, &["b"])]),
                txn("t3", false, vec![append(2, "x")]),
                txn("t4", true, vec![read(2, &["b"]), read(1, &["a", "c"])]),
            ],
            &[(1, &["a", "c"]), (2, &["b"])],
        );
        assert_eq!(check(&h), Vec::new());
    }

    #[test]
    fn lost_updates_dirty_reads_and_kept_aborts_are_found() {
        // t2 overwrote t1's append: both read the empty list.
        let lost = history(
            vec![txn("t1", true, vec![read(1, &[]), append(1, "a")]), txn("t2", true, vec![read(1, &[]), append(1, "b")])],
            &[(1, &["b"])],
        );
        assert!(check(&lost).contains(&Anomaly::LostUpdate { txn: "t1".into(), key: 1, element: "a".into() }));
        let dirty = history(vec![txn("t1", false, vec![append(1, "a")]), txn("t2", true, vec![read(1, &["a"])])], &[(1, &[])]);
        assert!(matches!(check(&dirty).as_slice(), [Anomaly::NotAPrefix { txn, .. }] if txn == "t2"));
        let kept = history(vec![txn("t1", false, vec![append(1, "a")])], &[(1, &["a"])]);
        assert_eq!(check(&kept), vec![Anomaly::UncommittedKept { key: 1, element: "a".into() }]);
    }

    #[test]
    fn own_writes_moved_snapshots_and_fractured_reads_are_found() {
        let own = history(vec![txn("t1", true, vec![append(1, "a"), read(1, &[])])], &[(1, &["a"])]);
        assert!(matches!(check(&own).as_slice(), [Anomaly::OwnWritesMissing { .. }]));
        let moved = history(
            vec![txn("w", true, vec![append(1, "a")]), txn("r", true, vec![read(1, &[]), read(1, &["a"])])],
            &[(1, &["a"])],
        );
        assert_eq!(check(&moved), vec![Anomaly::SnapshotMoved { txn: "r".into(), key: 1 }]);
        let fractured = history(
            vec![txn("w", true, vec![append(1, "a"), append(2, "b")]), txn("r", true, vec![read(1, &["a"]), read(2, &[])])],
            &[(1, &["a"]), (2, &["b"])],
        );
        assert_eq!(check(&fractured), vec![Anomaly::FracturedRead { txn: "r".into(), writer: "w".into() }]);
    }

    #[test]
    fn an_unknown_end_is_read_from_what_was_kept_and_must_be_whole() {
        let unknown = |ops| Txn { name: "u".into(), ops, outcome: Outcome::Unknown };
        let kept = history(vec![unknown(vec![append(1, "a"), append(2, "b")])], &[(1, &["a"]), (2, &["b"])]);
        assert_eq!(check(&kept), Vec::new());
        let gone = history(vec![unknown(vec![append(1, "a"), append(2, "b")])], &[(1, &[]), (2, &[])]);
        assert_eq!(check(&gone), Vec::new());
        let half = history(vec![unknown(vec![append(1, "a"), append(2, "b")])], &[(1, &["a"]), (2, &[])]);
        assert_eq!(check(&half), vec![Anomaly::LostUpdate { txn: "u".into(), key: 2, element: "b".into() }]);
    }

    #[test]
    fn read_skew_between_two_readers_is_a_cycle() {
        // r1 saw w1 and not w2; r2 saw w2 and not w1: no order of the two
        // commits gives both snapshots (a long fork).
        let h = history(
            vec![
                txn("w1", true, vec![append(1, "a")]),
                txn("w2", true, vec![append(2, "b")]),
                txn("r1", true, vec![read(1, &["a"]), read(2, &[])]),
                txn("r2", true, vec![read(1, &[]), read(2, &["b"])]),
            ],
            &[(1, &["a"]), (2, &["b"])],
        );
        assert!(matches!(check(&h).as_slice(), [Anomaly::Cycle { txns }] if txns.len() == 2), "{:?}", check(&h));
        // Write skew is snapshot isolation's to allow.
        let skew = history(
            vec![txn("t1", true, vec![read(1, &[]), read(2, &[]), append(1, "a")]), txn("t2", true, vec![read(1, &[]), read(2, &[]), append(2, "b")])],
            &[(1, &["a"]), (2, &["b"])],
        );
        assert_eq!(check(&skew), Vec::new());
    }
}
