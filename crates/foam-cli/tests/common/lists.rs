//! The list-append workload of the anomaly tests: transactions that read
//! and append to the lists of a few keys, recorded as their clients saw
//! them, for `foam_fuzz::history` to check.

use std::collections::BTreeMap;
use std::time::Duration;

use foam_fuzz::history::{History, Op, Outcome, Txn};

use super::Rng;

/// Keys of the `lists` table: few, so transactions collide.
pub const KEYS: u64 = 3;
/// SQLSTATEs that end a transaction while a node is lost, besides 40001:
/// a peer unreachable, a partition unavailable, a transaction rolled back.
const NODE_LOST: &[&str] = &["08006", "57P03", "40000"];
/// Reads of the final lists retried while a transaction is in doubt (40001).
const FINAL_READ_RETRIES_MAX: u32 = 20;

/// Creates `lists` with an empty list per key.
pub async fn create(client: &tokio_postgres::Client) {
    client.batch_execute("CREATE TABLE lists (k INT PRIMARY KEY, v TEXT)").await.unwrap();
    client.batch_execute(&format!("INSERT INTO lists SELECT CAST(value AS INT), '' FROM generate_series(1, {KEYS})")).await.unwrap();
}

/// How a statement failed.
enum Failure {
    /// 40001: another transaction won.
    Conflict,
    /// The node or the connection was lost (only when `node_loss` allows).
    Lost,
}

fn failure(what: &str, error: tokio_postgres::Error, node_loss: bool) -> Failure {
    match error.code().map(|c| c.code()) {
        Some("40001") => Failure::Conflict,
        Some(code) if node_loss && NODE_LOST.contains(&code) => Failure::Lost,
        None if node_loss => Failure::Lost,
        _ => panic!("{what}: {error:?}"),
    }
}

/// One transaction on `client`, named `name`: a REPEATABLE READ block of 2
/// to 4 random reads and appends, ended by COMMIT or, one time in eight, by
/// ROLLBACK; or, one time in four, a single append on its own (which the
/// node retries on a conflict). A conflict aborts it; with `node_loss`, so
/// does a lost node, and a COMMIT (or lone append) whose answer was lost has
/// an unknown end. Any other error fails the test.
pub async fn transaction(client: &tokio_postgres::Client, name: String, rng: &mut Rng, node_loss: bool) -> Txn {
    let append = |key: i64, element: &str| format!("UPDATE lists SET v = v || '{element},' WHERE k = {key}");
    if rng.below(4) == 0 {
        let (key, element) = (1 + rng.below(KEYS) as i64, format!("{name}.0"));
        let outcome = match client.execute(&append(key, &element), &[]).await {
            Ok(n) => {
                assert_eq!(n, 1, "{name}: append to {key}");
                Outcome::Committed
            }
            Err(error) => match failure(&name, error, node_loss) {
                Failure::Conflict => Outcome::Aborted,
                Failure::Lost => Outcome::Unknown,
            },
        };
        return Txn { name, ops: vec![Op::Append { key, element }], outcome };
    }
    let mut ops = Vec::new();
    let mut ended = client.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ").await.err().map(|e| failure(&name, e, node_loss));
    for step in 0..2 + rng.below(3) {
        if ended.is_some() {
            break;
        }
        let key = 1 + rng.below(KEYS) as i64;
        let result = if rng.below(2) == 0 {
            let sql = format!("SELECT v FROM lists WHERE k = {key}");
            super::try_query_text(client, &sql).await.map(|rows| {
                let text = rows.first().and_then(|row| row[0].clone()).unwrap_or_else(|| panic!("{name}: {sql} found no row"));
                ops.push(Op::Read { key, list: elements(&text) });
            })
        } else {
            let element = format!("{name}.{step}");
            // An append that fails is recorded too: it must never be seen.
            ops.push(Op::Append { key, element: element.clone() });
            client.execute(&append(key, &element), &[]).await.map(|n| assert_eq!(n, 1, "{name}: append to {key}"))
        };
        ended = result.err().map(|e| failure(&name, e, node_loss));
    }
    let outcome = if ended.is_some() || rng.below(8) == 0 {
        if let Err(error) = client.batch_execute("ROLLBACK").await {
            failure(&format!("{name}: ROLLBACK"), error, node_loss);
        }
        Outcome::Aborted
    } else {
        match client.batch_execute("COMMIT").await {
            Ok(()) => Outcome::Committed,
            Err(error) => match failure(&format!("{name}: COMMIT"), error, node_loss) {
                Failure::Conflict => Outcome::Aborted,
                Failure::Lost => Outcome::Unknown,
            },
        }
    };
    Txn { name, ops, outcome }
}

/// `txns` and the lists as they are now: the history to check.
pub async fn history(client: &tokio_postgres::Client, txns: Vec<Txn>) -> History {
    let sql = "SELECT k, v FROM lists";
    let mut rows = super::try_query_text(client, sql).await;
    for _ in 0..FINAL_READ_RETRIES_MAX {
        match &rows {
            Err(error) if error.code().is_some_and(|c| c.code() == "40001") => {
                tokio::time::sleep(Duration::from_millis(500)).await;
                rows = super::try_query_text(client, sql).await;
            }
            _ => break,
        }
    }
    let final_lists: BTreeMap<i64, Vec<String>> = rows
        .unwrap_or_else(|e| panic!("{sql}: {e:?}"))
        .into_iter()
        .map(|row| (row[0].as_deref().and_then(|k| k.parse().ok()).expect("a key"), elements(row[1].as_deref().unwrap_or_default())))
        .collect();
    History { txns, final_lists }
}

/// The elements of a list as stored: each followed by a comma.
fn elements(text: &str) -> Vec<String> {
    text.split(',').filter(|e| !e.is_empty()).map(str::to_string).collect()
}

/// Checks `history`, failing the test with every anomaly and the history;
/// returns how many transactions committed and appends were kept.
pub fn assert_snapshot_isolation(history: &History) -> (usize, usize) {
    let anomalies = foam_fuzz::history::check(history);
    let shown: Vec<String> = anomalies.iter().map(ToString::to_string).collect();
    assert!(anomalies.is_empty(), "{}\nhistory: {history:#?}", shown.join("\n"));
    let committed = history.txns.iter().filter(|t| t.outcome == Outcome::Committed).count();
    let kept = history.final_lists.values().map(Vec::len).sum();
    assert!(committed > 0 && kept > 0, "the run checked nothing");
    (committed, kept)
}
