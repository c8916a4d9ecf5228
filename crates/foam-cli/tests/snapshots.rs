//! MVCC across real node processes on 127.0.0.1: every statement reads one
//! snapshot of the whole cluster, so readers never see part of another
//! statement or transaction (torn reads, the bank test's invariant), and
//! REPEATABLE READ blocks read one snapshot throughout; a recorded history of
//! concurrent transactions shows none of the anomalies snapshot isolation
//! forbids.

mod common;

use std::time::Duration;

use common::{Cluster, error_of, lists, scalar};

/// Statements each writer runs in `readers_never_see_part_of_a_statement`.
const WRITER_STATEMENTS: usize = 25;
/// Rows each of those statements inserts, spread over every partition.
const ROWS_PER_STATEMENT: usize = 100;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_never_see_part_of_a_statement() {
    let cluster = Cluster::start(3);
    let client = cluster.client(0).await;
    client.batch_execute("CREATE TABLE torn (id INT, writer INT) DISTRIBUTED BY (id) PARTITIONS 6").await.unwrap();
    // Two writers on different nodes insert 100 rows a statement (in every
    // partition, on every node); two readers on other nodes count the rows
    // meanwhile. Each count must be a whole number of statements.
    let mut writers = tokio::task::JoinSet::new();
    for writer in 0..2usize {
        let url = cluster.url(writer);
        writers.spawn(async move {
            let client = common::connect(&url).await;
            for statement in 0..WRITER_STATEMENTS {
                let first = (writer * WRITER_STATEMENTS + statement) * ROWS_PER_STATEMENT;
                let sql = format!(
                    "INSERT INTO torn SELECT CAST(value AS INT), {writer} FROM generate_series({first}, {})",
                    first + ROWS_PER_STATEMENT - 1
                );
                client.batch_execute(&sql).await.unwrap();
            }
        });
    }
    let mut readers = tokio::task::JoinSet::new();
    for reader in 0..2usize {
        let url = cluster.url(1 + reader);
        readers.spawn(async move {
            let client = common::connect(&url).await;
            let mut counts = Vec::new();
            for _ in 0..60 {
                let count: u64 = scalar(&client, "SELECT count(*) FROM torn").await.parse().unwrap();
                counts.push(count);
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            counts
        });
    }
    writers.join_all().await;
    let counts: Vec<u64> = readers.join_all().await.into_iter().flatten().collect();
    let torn: Vec<&u64> = counts.iter().filter(|c| *c % ROWS_PER_STATEMENT as u64 != 0).collect();
    assert!(torn.is_empty(), "{} of {} counts saw part of a statement: {torn:?}", torn.len(), counts.len());
    let total = 2 * WRITER_STATEMENTS * ROWS_PER_STATEMENT;
    assert_eq!(scalar(&client, "SELECT count(*) FROM torn").await, total.to_string());
    let growing = counts.iter().any(|c| *c > 0 && *c < total as u64);
    eprintln!("counts seen while writing: {counts:?} (some in between: {growing})");
}

/// Accounts and the balance each starts with in the bank test.
const ACCOUNTS: i64 = 10;
const OPENING_BALANCE: i64 = 100;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transfers_between_accounts_keep_every_read_total() {
    let cluster = Cluster::start(3);
    let client = cluster.client(0).await;
    client.batch_execute("CREATE TABLE accounts (id INT PRIMARY KEY, balance INT)").await.unwrap();
    client
        .batch_execute(&format!("INSERT INTO accounts SELECT CAST(value AS INT), {OPENING_BALANCE} FROM generate_series(1, {ACCOUNTS})"))
        .await
        .unwrap();
    let total = (ACCOUNTS * OPENING_BALANCE).to_string();
    // The bank test, as Jepsen runs it: clients on each node move amounts
    // between accounts in blocks (retrying on 40001, as drivers do), while
    // readers on every node sum the balances: each sum must be the total.
    let mut tellers = tokio::task::JoinSet::new();
    for teller in 0..3i64 {
        let url = cluster.url(teller as usize);
        tellers.spawn(async move {
            let mut client = common::connect(&url).await;
            let (mut done, mut retries) = (0, 0);
            for transfer in 0..8i64 {
                let from = 1 + (teller * 7 + transfer * 3) % ACCOUNTS;
                let to = 1 + (from + 1 + transfer % (ACCOUNTS - 1)) % ACCOUNTS;
                let amount = 1 + (teller + transfer) % 5;
                loop {
                    let block = client.transaction().await.unwrap();
                    let attempt = async {
                        block.execute(&format!("UPDATE accounts SET balance = balance - {amount} WHERE id = {from}"), &[]).await?;
                        block.execute(&format!("UPDATE accounts SET balance = balance + {amount} WHERE id = {to}"), &[]).await?;
                        block.commit().await
                    };
                    match attempt.await {
                        Ok(()) => break,
                        Err(error) => {
                            let code = error.as_db_error().map(|e| e.code().code().to_string());
                            assert_eq!(code.as_deref(), Some("40001"), "{error}");
                            retries += 1;
                        }
                    }
                }
                done += 1;
            }
            (done, retries)
        });
    }
    let mut readers = tokio::task::JoinSet::new();
    for reader in 0..3usize {
        let url = cluster.url(reader);
        let total = total.clone();
        readers.spawn(async move {
            let client = common::connect(&url).await;
            for _ in 0..40 {
                let sum = scalar(&client, "SELECT sum(balance) FROM accounts").await;
                assert_eq!(sum, total, "a reader on node {reader} saw part of a transfer");
                let rows = scalar(&client, "SELECT count(*) FROM accounts").await;
                assert_eq!(rows, ACCOUNTS.to_string(), "an UPDATE is a delete and an insert, seen together");
            }
        });
    }
    let outcomes = tellers.join_all().await;
    readers.join_all().await;
    assert!(outcomes.iter().all(|(done, _)| *done == 8), "{outcomes:?}");
    assert_eq!(scalar(&client, "SELECT sum(balance) FROM accounts").await, total);
    eprintln!("transfers and retries per teller: {outcomes:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeatable_read_blocks_read_one_snapshot_and_the_first_committer_wins() {
    let cluster = Cluster::start(2);
    let client = cluster.client(0).await;
    let other = cluster.client(1).await;
    client.batch_execute("CREATE TABLE rr (id INT, v INT) DISTRIBUTED BY (id); INSERT INTO rr VALUES (1, 10), (2, 20), (3, 30);").await.unwrap();

    client.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ").await.unwrap();
    assert_eq!(scalar(&client, "SELECT sum(v) FROM rr").await, "60");
    other.batch_execute("INSERT INTO rr VALUES (4, 40); UPDATE rr SET v = v + 1 WHERE id = 1;").await.unwrap();
    assert_eq!(scalar(&other, "SELECT sum(v) FROM rr").await, "101", "the other session sees its commits");
    assert_eq!(scalar(&client, "SELECT sum(v) FROM rr").await, "60", "the block still reads its first snapshot");
    assert_eq!(scalar(&client, "SELECT count(*) FROM rr").await, "3");
    // Its own writes join its snapshot.
    client.batch_execute("INSERT INTO rr VALUES (5, 50)").await.unwrap();
    assert_eq!(scalar(&client, "SELECT sum(v) FROM rr").await, "110");
    // Row 1 changed after the snapshot: updating it loses to the first
    // committer, with 40001, and the block is then failed.
    let (code, message) = error_of(&client, "UPDATE rr SET v = 0 WHERE id = 1; COMMIT").await;
    assert_eq!(code, "40001", "{message}");
    client.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(scalar(&client, "SELECT sum(v) FROM rr").await, "101", "nothing of the failed block stayed");

    // READ COMMITTED (the default) takes a snapshot per statement.
    client.batch_execute("BEGIN").await.unwrap();
    assert_eq!(scalar(&client, "SELECT count(*) FROM rr").await, "4");
    other.batch_execute("INSERT INTO rr VALUES (6, 60)").await.unwrap();
    assert_eq!(scalar(&client, "SELECT count(*) FROM rr").await, "5");
    client.batch_execute("COMMIT").await.unwrap();
}

/// Clients and transactions per client of the anomaly test.
const LIST_CLIENTS: usize = 4;
const LIST_TRANSACTIONS: usize = 30;

/// Concurrent transactions on three nodes append to and read a few lists;
/// the recorded history must show snapshot isolation: no lost update, no
/// dirty, fractured or moving read, no read skew (`foam_fuzz::history`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_transactions_show_no_anomaly_snapshot_isolation_forbids() {
    let seed = common::seed();
    let cluster = Cluster::start(3);
    let client = cluster.client(0).await;
    lists::create(&client).await;
    let mut clients = tokio::task::JoinSet::new();
    for c in 0..LIST_CLIENTS {
        let url = cluster.url(c % 3);
        clients.spawn(async move {
            let client = common::connect(&url).await;
            let mut rng = common::Rng((seed ^ (c as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)) | 1);
            let mut txns = Vec::new();
            for t in 0..LIST_TRANSACTIONS {
                txns.push(lists::transaction(&client, format!("c{c}t{t}"), &mut rng, false).await);
            }
            txns
        });
    }
    let txns = clients.join_all().await.into_iter().flatten().collect();
    let history = lists::history(&client, txns).await;
    let (committed, kept) = lists::assert_snapshot_isolation(&history);
    eprintln!("{committed} of {} transactions committed; {kept} appends kept", history.txns.len());
}
