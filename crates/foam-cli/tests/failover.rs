//! Losing nodes on purpose: real node processes on 127.0.0.1, killed with
//! SIGKILL, paused with SIGSTOP, their files corrupted, while statements run.
//! Every acknowledged row must survive, reads must keep answering correctly,
//! and copies must come back whole. Random choices print their seed
//! (`FOAM_TEST_SEED=n` replays one).

mod common;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Cluster, query_text, scalar, try_query_text};

/// Failure detector timings for these tests: quick, so the tests are short.
const FAST_DETECTOR: &[&str] = &["--node-dead-after-ms", "1500", "--reprotect-after-ms", "3000"];

/// SQLSTATEs a statement may fail with while a node is lost: connection to a
/// peer failed, placement changed (retry), partition unavailable, aborted.
const RETRIABLE: &[&str] = &["08006", "40001", "57P03", "40000"];

fn seed() -> u64 {
    let seed = std::env::var("FOAM_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64);
    println!("FOAM_TEST_SEED={seed}");
    seed
}

/// xorshift64*: enough randomness to pick victims and timings, replayable.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn sqlstate(error: &tokio_postgres::Error) -> String {
    error.as_db_error().map(|d| d.code().code().to_string()).unwrap_or_else(|| format!("not a database error: {error}"))
}

/// Polls `check` until it holds or `timeout` passes.
async fn eventually(what: &str, timeout: Duration, mut check: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !check().await {
        assert!(Instant::now() < deadline, "{what}: not within {timeout:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn all_copies_live(client: &tokio_postgres::Client, table: &str) -> bool {
    let sql = format!("SELECT count(*) FROM foam_partitions WHERE table_name = '{table}' AND replica_state <> 'live'");
    matches!(try_query_text(client, &sql).await, Ok(rows) if rows[0][0].as_deref() == Some("0"))
}

/// Copies of one partition that disagree on their row count.
async fn diverging_copies(client: &tokio_postgres::Client, table: &str) -> String {
    scalar(
        client,
        &format!(
            "SELECT count(*) FROM (SELECT partition FROM foam_partitions WHERE table_name = '{table}' \
             GROUP BY partition HAVING min(row_count) <> max(row_count) OR count(row_count) <> count(*))"
        ),
    )
    .await
}

/// The cluster's id of the node at `index` (ids follow registration order).
async fn node_id(cluster: &Cluster, client: &tokio_postgres::Client, index: usize) -> String {
    let addr = format!("127.0.0.1:{}", cluster.nodes[index].node_port);
    scalar(client, &format!("SELECT node_id FROM foam_nodes WHERE node_addr = '{addr}'")).await
}

#[derive(Default)]
struct WriteLog {
    acknowledged: BTreeSet<i64>,
    failed: BTreeSet<i64>,
    failures: Vec<String>,
    acknowledged_after_kill: usize,
}

struct ReadRecord {
    at: Instant,
    acknowledged_before: usize,
    attempted_after: usize,
    answer: Result<usize, String>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_during_insert_and_query_streams_loses_no_acknowledged_row() {
    let mut rng = Rng(seed() | 1);
    let mut cluster = Cluster::start_with(3, FAST_DETECTOR);
    let setup = cluster.client(0).await;
    setup
        .batch_execute("CREATE TABLE acked (id BIGINT, note TEXT) DISTRIBUTED BY (id) PARTITIONS 6")
        .await
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let log = Arc::new(Mutex::new(WriteLog::default()));
    let killed_at: Arc<Mutex<Option<Instant>>> = Arc::default();

    let writer = {
        let (client, stop, log, killed_at) = (cluster.client(0).await, stop.clone(), log.clone(), killed_at.clone());
        tokio::spawn(async move {
            let mut next = 1i64;
            while !stop.load(Ordering::Relaxed) {
                let ids: Vec<i64> = (next..next + 40).collect();
                next += 40;
                let sql = format!("INSERT INTO acked SELECT value, 'row' FROM generate_series({}, {})", ids[0], ids[39]);
                let result = client.simple_query(&sql).await;
                let mut log = log.lock().unwrap();
                match result {
                    Ok(_) => {
                        log.acknowledged.extend(&ids);
                        if killed_at.lock().unwrap().is_some() {
                            log.acknowledged_after_kill += 1;
                        }
                    }
                    Err(error) => {
                        log.failed.extend(&ids);
                        log.failures.push(sqlstate(&error));
                    }
                }
            }
        })
    };
    let reader = {
        let (client, stop, log) = (cluster.client(0).await, stop.clone(), log.clone());
        tokio::spawn(async move {
            let mut reads = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let acknowledged_before = log.lock().unwrap().acknowledged.len();
                let at = Instant::now();
                let answer = match try_query_text(&client, "SELECT count(*) FROM acked").await {
                    Ok(rows) => Ok(rows[0][0].as_deref().unwrap().parse().unwrap()),
                    Err(error) => Err(sqlstate(&error)),
                };
                let attempted_after = {
                    let log = log.lock().unwrap();
                    log.acknowledged.len() + log.failed.len() + 40
                };
                reads.push(ReadRecord { at, acknowledged_before, attempted_after, answer });
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            reads
        })
    };

    tokio::time::sleep(Duration::from_millis(1000 + rng.below(1000))).await;
    // Node 0 runs the catalog (until the catalog is replicated with Raft).
    let victim = 1 + rng.below(2) as usize;
    println!("killing node {victim}");
    cluster.kill(victim);
    let kill_time = Instant::now();
    *killed_at.lock().unwrap() = Some(kill_time);
    tokio::time::sleep(Duration::from_secs(8)).await;
    stop.store(true, Ordering::Relaxed);
    writer.await.unwrap();
    let reads = reader.await.unwrap();
    let log = log.lock().unwrap();

    for code in &log.failures {
        assert!(RETRIABLE.contains(&code.as_str()), "a write failed with {code}, not a retriable SQLSTATE");
    }
    assert!(log.acknowledged_after_kill > 0, "writes resumed after the kill (failures: {:?})", log.failures);
    let client = cluster.client(0).await;
    let stored: Vec<i64> = query_text(&client, "SELECT id FROM acked ORDER BY id")
        .await
        .into_iter()
        .map(|r| r[0].as_deref().unwrap().parse().unwrap())
        .collect();
    let stored_set: BTreeSet<i64> = stored.iter().copied().collect();
    assert_eq!(stored.len(), stored_set.len(), "no row stored twice");
    let lost: Vec<_> = log.acknowledged.difference(&stored_set).take(10).collect();
    assert!(lost.is_empty(), "acknowledged rows lost: {lost:?}");
    let half_applied: Vec<_> = log.failed.intersection(&stored_set).take(10).collect();
    assert!(half_applied.is_empty(), "rows of failed statements stored: {half_applied:?}");

    for read in &reads {
        if let Ok(count) = read.answer {
            assert!(
                read.acknowledged_before <= count && count <= read.attempted_after,
                "a read saw {count} rows; {} were acknowledged before it and at most {} written after",
                read.acknowledged_before,
                read.attempted_after
            );
        }
    }
    let settled = kill_time + Duration::from_secs(4);
    let late: Vec<_> = reads.iter().filter(|r| r.at > settled).collect();
    assert!(!late.is_empty(), "reads went on after the kill");
    let late_failures: Vec<_> = late.iter().filter_map(|r| r.answer.as_ref().err()).collect();
    assert!(late_failures.is_empty(), "reads failed 4 s after the kill: {late_failures:?}");
    let early_failures: Vec<_> = reads.iter().filter_map(|r| r.answer.as_ref().err()).collect();
    println!(
        "acknowledged {} rows, {} statements failed ({:?}); {} reads, {} failed",
        log.acknowledged.len(),
        log.failures.len(),
        log.failures,
        reads.len(),
        early_failures.len()
    );

    // The killed node comes back, catches up, and every copy agrees.
    cluster.restart(victim);
    eventually("every copy live after the restart", Duration::from_secs(40), async || all_copies_live(&client, "acked").await).await;
    assert_eq!(diverging_copies(&client, "acked").await, "0");
    let back = cluster.client(victim).await;
    assert_eq!(scalar(&back, "SELECT count(*) FROM acked").await, stored.len().to_string());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigstop_past_the_dead_time_then_sigcont_catches_up_without_split_brain() {
    let cluster = Cluster::start_with(3, FAST_DETECTOR);
    let client = cluster.client(0).await;
    client
        .batch_execute(
            "CREATE TABLE paused (id BIGINT, v BIGINT) DISTRIBUTED BY (id) PARTITIONS 6;
             INSERT INTO paused SELECT value, 1 FROM generate_series(1, 1000);",
        )
        .await
        .unwrap();
    let stopped = node_id(&cluster, &client, 2).await;
    cluster.signal(2, "STOP");
    eventually("the stopped node marked down", Duration::from_secs(15), async || {
        scalar(&client, &format!("SELECT status FROM foam_nodes WHERE node_id = {stopped}")).await == "down"
    })
    .await;
    // Writes and reads go on with the surviving copies.
    let mut inserted = false;
    let deadline = Instant::now() + Duration::from_secs(15);
    while !inserted {
        match client.simple_query("INSERT INTO paused SELECT value, 2 FROM generate_series(1001, 2000)").await {
            Ok(_) => inserted = true,
            Err(error) => {
                assert!(RETRIABLE.contains(&sqlstate(&error).as_str()), "{error:?}");
                assert!(Instant::now() < deadline, "writes did not resume while a node was stopped: {error:?}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
    assert_eq!(scalar(&client, "SELECT count(*), sum(v) FROM paused").await, "2000");
    cluster.signal(2, "CONT");
    eventually("every copy live after SIGCONT", Duration::from_secs(40), async || all_copies_live(&client, "paused").await).await;
    assert_eq!(diverging_copies(&client, "paused").await, "0");
    // The resumed node sees the cluster's state, not its own old view.
    let resumed = cluster.client(2).await;
    assert_eq!(scalar(&resumed, "SELECT count(*) FROM foam_nodes WHERE status = 'up'").await, "3");
    assert_eq!(query_text(&resumed, "SELECT count(*), sum(v) FROM paused").await[0][1].as_deref(), Some("3000"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupted_segment_is_reported_and_repaired_from_a_replica() {
    let mut rng = Rng(seed() | 1);
    let cluster = Cluster::start(2);
    let client = cluster.client(0).await;
    // 100,000 wide rows per partition spill to a staged segment file, so the
    // committed rows are in Parquet files on both copies.
    client
        .batch_execute(
            "CREATE TABLE big (id BIGINT, pad TEXT) DISTRIBUTED BY (id) PARTITIONS 2;
             INSERT INTO big SELECT value, repeat('x', 40) FROM generate_series(1, 200000);",
        )
        .await
        .unwrap();
    let expected = scalar(&client, "SELECT sum(id) FROM big").await;
    // Partition 0 is read from node 0: damage its copy there.
    let damaged = node_id(&cluster, &client, 0).await;
    let partition_dir = std::fs::read_dir(cluster.nodes[0].data_dir.join("tables"))
        .unwrap()
        .next()
        .expect("a table directory")
        .unwrap()
        .path()
        .join("0");
    let segment = std::fs::read_dir(&partition_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "parquet"))
        .expect("a segment file");
    let mut bytes = std::fs::read(&segment).unwrap();
    let at = bytes.len() / 4 + rng.below(bytes.len() as u64 / 2) as usize;
    println!("corrupting {} at byte {at}", segment.display());
    bytes[at] ^= 0x5a;
    std::fs::write(&segment, &bytes).unwrap();

    assert_eq!(scalar(&client, "SELECT sum(id) FROM big").await, expected, "the query reads the other copy");
    assert!(cluster.log(0).contains("damaged partition copy found"), "the corruption is reported");
    eventually("the damaged copy repaired", Duration::from_secs(30), async || all_copies_live(&client, "big").await).await;
    let repaired = std::fs::read(&segment).unwrap();
    assert_ne!(repaired, bytes, "the damaged file was replaced");
    // The repaired copy serves reads again and answers right.
    assert_eq!(scalar(&client, &format!("SELECT bool_and(serves_reads) FROM foam_partitions WHERE table_name = 'big' AND node_id = {damaged} AND partition = 0")).await, "t");
    assert_eq!(scalar(&client, "SELECT sum(id) FROM big").await, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_down_past_reprotect_time_gets_its_partitions_copied_elsewhere() {
    let mut cluster = Cluster::start_with(3, FAST_DETECTOR);
    let client = cluster.client(0).await;
    client
        .batch_execute(
            "CREATE TABLE guarded (id BIGINT, v BIGINT, pad TEXT) DISTRIBUTED BY (id) PARTITIONS 6;
             INSERT INTO guarded SELECT value, value * 2, repeat('p', 200) FROM generate_series(1, 120000);",
        )
        .await
        .unwrap();
    let victim = node_id(&cluster, &client, 2).await;
    cluster.kill(2);
    let started = Instant::now();
    eventually("two live copies of every partition on the surviving nodes", Duration::from_secs(40), async || {
        scalar(
            &client,
            &format!("SELECT count(*) FROM (SELECT partition FROM foam_partitions WHERE table_name = 'guarded' \
             AND replica_state = 'live' AND node_id <> {victim} GROUP BY partition HAVING count(*) = 2)"),
        )
        .await
            == "6"
    })
    .await;
    println!("re-protected in {:?}", started.elapsed());
    assert_eq!(diverging_copies(&client, "guarded").await, "0");
    client.batch_execute("INSERT INTO guarded SELECT value, 1, 'new' FROM generate_series(120001, 121000)").await.unwrap();
    assert_eq!(query_text(&client, "SELECT count(*) FROM guarded").await[0][0].as_deref(), Some("121000"));

    // The replaced node comes back and deletes the copies it no longer holds.
    let tables_dir = cluster.nodes[2].data_dir.join("tables");
    let partition_dirs = || -> usize {
        std::fs::read_dir(&tables_dir)
            .map(|tables| tables.filter_map(|t| std::fs::read_dir(t.ok()?.path()).ok()).map(|d| d.count()).sum())
            .unwrap_or(0)
    };
    assert!(partition_dirs() > 0, "the killed node held copies");
    cluster.restart(2);
    eventually("the replaced node cleaned up", Duration::from_secs(20), async || partition_dirs() == 0).await;
    assert_eq!(scalar(&client, &format!("SELECT count(*) FROM foam_partitions WHERE table_name = 'guarded' AND node_id = {victim}")).await, "0");
    let back = cluster.client(2).await;
    assert_eq!(scalar(&back, "SELECT count(*) FROM guarded").await, "121000");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fourth_node_joins_under_write_load_then_drains_and_leaves() {
    let mut cluster = Cluster::start_with(3, FAST_DETECTOR);
    let client = cluster.client(0).await;
    client
        .batch_execute(
            "CREATE TABLE grow (id BIGINT, note TEXT) DISTRIBUTED BY (id) PARTITIONS 12;
             INSERT INTO grow SELECT value, 'seed' FROM generate_series(-30000, -1);",
        )
        .await
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let log = Arc::new(Mutex::new(WriteLog::default()));
    let writer = {
        let (client, stop, log) = (cluster.client(1).await, stop.clone(), log.clone());
        tokio::spawn(async move {
            let mut next = 1i64;
            while !stop.load(Ordering::Relaxed) {
                let ids: Vec<i64> = (next..next + 100).collect();
                next += 100;
                let sql = format!("INSERT INTO grow SELECT value, 'live' FROM generate_series({}, {})", ids[0], ids[99]);
                let result = client.simple_query(&sql).await;
                let mut log = log.lock().unwrap();
                match result {
                    Ok(_) => log.acknowledged.extend(&ids),
                    Err(error) => {
                        log.failed.extend(&ids);
                        log.failures.push(sqlstate(&error));
                    }
                }
            }
        })
    };
    let copies_per_node = async |client: &tokio_postgres::Client| -> Vec<(String, u64)> {
        query_text(client, "SELECT node_id, count(*) FROM foam_partitions WHERE table_name = 'grow' GROUP BY node_id ORDER BY node_id")
            .await
            .into_iter()
            .map(|r| (r[0].clone().unwrap(), r[1].as_deref().unwrap().parse().unwrap()))
            .collect()
    };

    let added = cluster.add_node();
    let new_id = node_id(&cluster, &client, added).await;
    let started = Instant::now();
    eventually("the new node holds an even share", Duration::from_secs(90), async || {
        all_copies_live(&client, "grow").await && copies_per_node(&client).await.iter().all(|(_, copies)| *copies == 6)
    })
    .await;
    println!("rebalanced onto node {new_id} in {:?}", started.elapsed());
    stop.store(true, Ordering::Relaxed);
    writer.await.unwrap();
    let expected_rows = {
        let log = log.lock().unwrap();
        for code in &log.failures {
            assert!(RETRIABLE.contains(&code.as_str()), "a write failed with {code}");
        }
        assert!(log.acknowledged.len() > 1000, "writes went on during the move: {:?}", log.failures);
        let stored: Vec<i64> = query_text(&client, "SELECT id FROM grow WHERE id > 0 ORDER BY id")
            .await
            .into_iter()
            .map(|r| r[0].as_deref().unwrap().parse().unwrap())
            .collect();
        let stored_set: BTreeSet<i64> = stored.iter().copied().collect();
        assert_eq!(stored.len(), stored_set.len(), "no row stored twice");
        assert!(log.acknowledged.is_subset(&stored_set), "an acknowledged row was lost in the move");
        assert!(log.failed.is_disjoint(&stored_set), "a failed statement left rows");
        30000 + stored.len()
    };
    assert_eq!(diverging_copies(&client, "grow").await, "0");
    // Data is spread evenly: the largest node within 10% of the average.
    let rows: Vec<u64> = query_text(&client, "SELECT sum(row_count) FROM foam_partitions WHERE table_name = 'grow' GROUP BY node_id")
        .await
        .into_iter()
        .map(|r| r[0].as_deref().unwrap().parse().unwrap())
        .collect();
    let average = rows.iter().sum::<u64>() / rows.len() as u64;
    assert!(rows.len() == 4 && *rows.iter().max().unwrap() <= average * 110 / 100, "uneven spread: {rows:?}");
    let joined = cluster.client(added).await;
    assert_eq!(scalar(&joined, "SELECT count(*) FROM grow").await, expected_rows.to_string());

    // Draining moves everything off; only then may the node be removed.
    let (code, message) = common::error_of(&client, &format!("ALTER CLUSTER REMOVE NODE {new_id}")).await;
    assert_eq!(code, "22023", "{message}");
    client.batch_execute(&format!("ALTER CLUSTER DRAIN NODE {new_id}")).await.unwrap();
    eventually("the drained node holds nothing", Duration::from_secs(90), async || {
        all_copies_live(&client, "grow").await && copies_per_node(&client).await.iter().all(|(node, _)| *node != new_id)
    })
    .await;
    client.batch_execute(&format!("ALTER CLUSTER REMOVE NODE {new_id}")).await.unwrap();
    assert_eq!(scalar(&client, "SELECT count(*) FROM foam_nodes").await, "3");
    assert_eq!(scalar(&client, "SELECT count(*) FROM grow").await, expected_rows.to_string());
    assert_eq!(diverging_copies(&client, "grow").await, "0");
}
