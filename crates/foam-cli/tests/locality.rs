//! Data locality on a real 3-node cluster: what crosses the network for a
//! co-located join, a shuffled join and a join with a replicated table, read
//! from `foam_cluster_stats`, and how `EXPLAIN` names each exchange.

mod common;

use common::{Cluster, explain, query_text, scalar};

/// Rows in each test table: enough that shipping a table shows up as tens of
/// kilobytes while partial aggregates stay a few hundred bytes.
const ROWS: u64 = 20_000;

async fn setup(client: &tokio_postgres::Client) {
    client
        .batch_execute(&format!(
            "CREATE TABLE a (k BIGINT, v BIGINT, other BIGINT) DISTRIBUTED BY (k);
             CREATE TABLE b (k BIGINT, w BIGINT) DISTRIBUTED BY (k);
             CREATE TABLE small (id BIGINT, label TEXT) DISTRIBUTED REPLICATED;
             INSERT INTO a SELECT value, value * 2, value % 97 FROM generate_series(1, {ROWS});
             INSERT INTO b SELECT value, value * 3 FROM generate_series(1, {ROWS});
             INSERT INTO small SELECT value, 'label ' || value FROM generate_series(0, 96);"
        ))
        .await
        .expect("setup");
}

/// Bytes sent between nodes by `sql`, from the cluster total row.
async fn bytes_between_nodes(client: &tokio_postgres::Client, sql: &str) -> (u64, Vec<Vec<Option<String>>>) {
    scalar(client, "SELECT foam_cluster_stats_reset()").await;
    let rows = query_text(client, sql).await;
    let bytes: u64 = scalar(client, "SELECT bytes_sent FROM foam_cluster_stats WHERE node_id IS NULL").await.parse().unwrap();
    (bytes, rows)
}

async fn analyze(client: &tokio_postgres::Client, sql: &str) -> String {
    explain(client, &format!("ANALYZE {sql}")).await
}

/// How many hash joins built a perfect-hash array, summed over every task
/// from `array_map_created_count=N` or `array_map_created_count={task:N, ...}`.
fn array_joins(analyzed: &str) -> u64 {
    analyzed
        .split("array_map_created_count=")
        .skip(1)
        .map(|rest| {
            let value = match rest.strip_prefix('{') {
                Some(per_task) => per_task.split('}').next().unwrap_or_default(),
                None => rest.split(|c: char| !c.is_ascii_digit()).next().unwrap_or_default(),
            };
            value.split(", ").filter_map(|v| v.rsplit(':').next()?.trim().parse::<u64>().ok()).sum::<u64>()
        })
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn co_located_join_moves_no_table_data_and_a_shuffled_one_does() {
    let cluster = Cluster::start(3);
    let client = cluster.client(1).await;
    setup(&client).await;
    // These tables are small enough that FoamDB would read each with one
    // task; spread them over their owners as it does large tables.
    client.batch_execute("SET foam.scan_rows_per_task = 1").await.expect("set");
    let expected_sum = (1..=ROWS).map(|k| 5 * k).sum::<u64>().to_string();

    let co_located = "SELECT count(*), sum(v + w) FROM a JOIN b ON a.k = b.k";
    let (co_bytes, rows) = bytes_between_nodes(&client, co_located).await;
    assert_eq!(rows, vec![vec![Some(ROWS.to_string()), Some(expected_sum.clone())]]);
    let plan = explain(&client, co_located).await;
    println!("{plan}\nco-located join: {co_bytes} bytes between nodes");
    assert!(!plan.contains("NetworkShuffleExec"), "a co-located join needs no shuffle:\n{plan}");
    assert!(plan.contains("exchange: co-located"), "EXPLAIN names the co-located join:\n{plan}");

    // The same tables joined on a column that is not the distribution key
    // of one side: that side must move.
    let shuffled = "SELECT count(*), sum(v + w) FROM a JOIN b ON a.other = b.k";
    let (shuffled_bytes, rows) = bytes_between_nodes(&client, shuffled).await;
    let matches: Vec<u64> = (1..=ROWS).filter(|k| k % 97 != 0).collect();
    let sum: u64 = matches.iter().map(|k| 2 * k + 3 * (k % 97)).sum();
    assert_eq!(rows, vec![vec![Some(matches.len().to_string()), Some(sum.to_string())]]);
    let plan = explain(&client, shuffled).await;
    println!("{plan}\nshuffled join: {shuffled_bytes} bytes between nodes");
    // b is distributed on the join key: only a's rows travel, to b's owners.
    assert!(plan.contains("exchange: shuffle-one-side"), "{plan}");
    assert!(plan.contains("NetworkShuffleExec"), "{plan}");
    // One 8-byte key column of 20,000 rows is 160 KB; two thirds of it live elsewhere.
    assert!(shuffled_bytes > 50_000, "the shuffle is counted: {shuffled_bytes} bytes");
    // Only the columns the join needs travel (a.other and a.v, 16 bytes a
    // row, about 213 KB for the two thirds stored elsewhere), not the route
    // value that chose each row's node (4 bytes more a row, about 267 KB).
    assert!(shuffled_bytes < ROWS * 12, "routed rows carry only their own columns: {shuffled_bytes} bytes");
    assert!(co_bytes < 5_000, "only partial aggregates cross for a co-located join: {co_bytes} bytes");

    // Joined on two keys, b's distribution key and another: b still stays
    // (rows equal on both keys are equal on b.k) and only a's rows travel,
    // routed on a.other alone. Kept from broadcasting, DataFusion would
    // shuffle both sides on both keys.
    client
        .batch_execute(
            "SET datafusion.optimizer.hash_join_single_partition_threshold = 0;
             SET datafusion.optimizer.hash_join_single_partition_threshold_rows = 0",
        )
        .await
        .expect("set");
    let two_keys = format!("{shuffled} AND b.w = a.other * 3");
    let (two_key_bytes, rows) = bytes_between_nodes(&client, &two_keys).await;
    assert_eq!(rows, vec![vec![Some(matches.len().to_string()), Some(sum.to_string())]]);
    let plan = explain(&client, &two_keys).await;
    println!("{plan}\njoin on the distribution key and another: {two_key_bytes} bytes between nodes");
    let shuffles = plan.lines().filter(|l| l.ends_with("exchange: shuffle")).count();
    assert!(plan.contains("exchange: shuffle-one-side"), "{plan}");
    assert_eq!(shuffles, 1, "only a's rows are shuffled:\n{plan}");
    client
        .batch_execute(
            "RESET datafusion.optimizer.hash_join_single_partition_threshold;
             RESET datafusion.optimizer.hash_join_single_partition_threshold_rows",
        )
        .await
        .expect("reset");

    // Grouped by the key of the side that stays, the aggregate after that
    // join runs where the groups are: the routed rows are the only shuffle.
    // a's rows are counted per join key where they are stored
    // (eager_count.rs), so one row per key and node crosses, not every row;
    // count(*) counts each of the 19,904 b rows no a row matches as one, is
    // not rewritten, and moves every a row.
    let grouped_after = "SELECT count(*), sum(c) FROM (SELECT b.k, count(a.v) AS c FROM b LEFT JOIN a ON a.other = b.k GROUP BY b.k) t";
    let (counted_bytes, rows) = bytes_between_nodes(&client, grouped_after).await;
    assert_eq!(rows, vec![vec![Some(ROWS.to_string()), Some(matches.len().to_string())]]);
    let every_row = grouped_after.replace("count(a.v)", "count(*)");
    let (every_row_bytes, rows) = bytes_between_nodes(&client, &every_row).await;
    assert_eq!(rows, vec![vec![Some(ROWS.to_string()), Some((matches.len() as u64 + ROWS - 96).to_string())]]);
    println!("counted before the join: {counted_bytes} bytes; every row: {every_row_bytes} bytes");
    assert!(counted_bytes * 10 < every_row_bytes, "{counted_bytes} bytes counted first vs {every_row_bytes}");
    let plan = explain(&client, grouped_after).await;
    let shuffles = plan.lines().filter(|l| l.ends_with("exchange: shuffle")).count();
    assert!(plan.contains("exchange: shuffle-one-side"), "{plan}");
    assert_eq!(shuffles, 1, "no shuffle between the routed join and its aggregate:\n{plan}");

    // A join on dense integer keys probes an array, not a hash table, on a
    // cluster as on one node, though each partition holds a sixth of the
    // key range's rows (distributed/mod.rs scales DataFusion's density limit).
    let dense = "SELECT count(*) FROM a x JOIN a y ON y.k = x.k + 3";
    let analyzed = analyze(&client, dense).await;
    let arrays = array_joins(&analyzed);
    println!("dense-key self-join: {arrays} array joins\n{analyzed}");
    assert!(arrays > 0, "the dense-key join uses DataFusion's array join:\n{analyzed}");
    assert_eq!(scalar(&client, dense).await, (ROWS - 3).to_string());
    // A session's execution settings reach the workers running its tasks:
    // with the density limit at its top no join builds an array, anywhere.
    client.batch_execute("SET datafusion.execution.perfect_hash_join_min_key_density = 1.0").await.unwrap();
    let analyzed = analyze(&client, dense).await;
    assert_eq!(array_joins(&analyzed), 0, "the workers took the session's setting:\n{analyzed}");
    assert_eq!(scalar(&client, dense).await, (ROWS - 3).to_string());
    client.batch_execute("RESET datafusion.execution.perfect_hash_join_min_key_density").await.unwrap();
    assert!(array_joins(&analyze(&client, dense).await) > 0, "and RESET brings the arrays back");

    // The routed side carries only the columns the join reads: the key
    // expression, not the `x.k` beside it that DataFusion's planner keeps
    // (copartition.rs, narrowed_input), also when the join outputs a column
    // of that side.
    let plan = explain(&client, dense).await;
    assert!(plan.contains("expr=[foam_checked_arith(+, k@0, 3) as x.k + Int64(3)]"), "only the key expression is routed (checked addition, optimizer/logical/checked_arithmetic.rs):
{plan}");
    let with_columns = "SELECT count(*), sum(x.other), sum(y.v - x.v) FROM a x JOIN a y ON y.k = x.k + 3";
    let plan = explain(&client, with_columns).await;
    assert!(plan.contains("exchange: shuffle-one-side"), "{plan}");
    let other: u64 = (1..=ROWS - 3).map(|k| k % 97).sum();
    let expected = vec![vec![Some((ROWS - 3).to_string()), Some(other.to_string()), Some((6 * (ROWS - 3)).to_string())]];
    assert_eq!(query_text(&client, with_columns).await, expected, "{plan}");

    // An aggregate grouped by the distribution key runs where the rows are.
    let grouped = "SELECT count(*) FROM (SELECT k, sum(v) FROM a GROUP BY k) t";
    let (grouped_bytes, rows) = bytes_between_nodes(&client, grouped).await;
    assert_eq!(rows, vec![vec![Some(ROWS.to_string())]]);
    assert!(grouped_bytes < 5_000, "grouping by the key moves no groups: {grouped_bytes} bytes");

    // Grouped by another column, partial groups are shuffled. A node that
    // reads its (two) partitions in one stream (regroup.rs) sends each group at
    // most once; one stream per partition sent it once per partition.
    client.batch_execute("SET datafusion.execution.target_partitions = 1").await.expect("set");
    let by_other = "SELECT count(*), sum(s) FROM (SELECT other, sum(v) AS s FROM a GROUP BY other) t";
    let v_sum = (1..=ROWS).map(|k| 2 * k).sum::<u64>().to_string();
    let mut by_other_bytes = Vec::new();
    for regroup in [false, true] {
        client.batch_execute(&format!("SET foam.regroup_scans = {regroup}")).await.expect("set");
        let mut fewest = u64::MAX;
        for _ in 0..3 {
            let (bytes, rows) = bytes_between_nodes(&client, by_other).await;
            assert_eq!(rows, vec![vec![Some("97".to_string()), Some(v_sum.clone())]], "regroup_scans = {regroup}");
            fewest = fewest.min(bytes);
        }
        by_other_bytes.push(fewest);
    }
    println!("partial groups shuffled, one stream per partition vs one per node: {by_other_bytes:?} bytes");
    assert!(by_other_bytes[1] * 4 < by_other_bytes[0] * 3, "regrouped scans send fewer partial groups: {by_other_bytes:?}");
    client.batch_execute("SET datafusion.execution.target_partitions = 2").await.expect("set");
    // The co-located join still keeps its partitions with regrouping on.
    assert!(explain(&client, co_located).await.contains("exchange: co-located"));

    // Smaller exchange batches mean more messages for the same rows. The
    // counters also see the leader's heartbeats, which land in some runs and
    // not others, so each setting counts its quietest of three runs.
    let mut messages = Vec::new();
    for bytes in [1_000_000, 480] {
        client.batch_execute(&format!("SET foam.exchange_batch_bytes = {bytes}")).await.expect("set");
        let mut fewest = u64::MAX;
        for _ in 0..3 {
            let (_, rows) = bytes_between_nodes(&client, shuffled).await;
            assert_eq!(rows[0][0].as_deref(), Some(matches.len().to_string().as_str()));
            let sent = scalar(&client, "SELECT messages_sent FROM foam_cluster_stats WHERE node_id IS NULL").await;
            fewest = fewest.min(sent.parse::<u64>().unwrap());
        }
        messages.push(fewest);
    }
    println!("messages with 1 MB and 480-byte exchange batches: {messages:?}");
    assert!(messages[1] > messages[0], "480-byte batches (about 20 rows) need more messages than 1 MB ones: {messages:?}");
    let (code, _) = common::error_of(&client, "SET foam.exchange_batch_bytes = 'lots'").await;
    assert_eq!(code, "22023");

    // EXPLAIN ANALYZE runs it and reports each node's traffic.
    let analyzed = analyze(&client, shuffled).await;
    println!("{analyzed}");
    assert!(analyzed.contains("output_rows"), "per-task metrics: {analyzed}");
    let received: Vec<u64> = analyzed
        .lines()
        .filter(|l| l.trim_start().starts_with("node "))
        .filter_map(|l| l.split("received ").nth(1)?.split(" messages, ").nth(1)?.split(" bytes").next()?.parse().ok())
        .collect();
    assert_eq!(received.len(), 3, "one traffic line per node: {analyzed}");
    assert!(received.iter().sum::<u64>() > 50_000, "the routed rows are counted: {received:?}");

    // A replicated table joins with every node's rows, on each node against
    // its own copy: neither table's rows cross the network.
    let replicated = "SELECT count(*), sum(length(label)) FROM a JOIN small ON a.other = small.id";
    let (replicated_bytes, rows) = bytes_between_nodes(&client, replicated).await;
    let label_bytes: u64 = (1..=ROWS).map(|k| format!("label {}", k % 97).len() as u64).sum();
    assert_eq!(rows, vec![vec![Some(ROWS.to_string()), Some(label_bytes.to_string())]]);
    let plan = explain(&client, replicated).await;
    println!("{plan}\nreplicated join: {replicated_bytes} bytes between nodes");
    assert!(plan.contains("FoamReplicaJoinExec") && plan.contains("exchange: none (replicated"), "{plan}");
    assert!(!plan.contains("NetworkBroadcastExec") && !plan.contains("NetworkShuffleExec"), "nothing is sent for the join:\n{plan}");
    assert!(replicated_bytes < 5_000, "only partial aggregates cross: {replicated_bytes} bytes");

    // A filtered replicated table written last joins first, where a's rows
    // are (early_replica_join.rs): 207 a rows meet b instead of 20,000.
    let filtered_last = "SELECT count(*), sum(w) FROM a JOIN b ON a.other = b.k JOIN small ON a.other = small.id WHERE small.label = 'label 5'";
    let mut bytes = Vec::new();
    for early in [false, true] {
        client.batch_execute(&format!("SET foam.early_replica_joins = {early}")).await.expect("set");
        let (sent, rows) = bytes_between_nodes(&client, filtered_last).await;
        assert_eq!(rows, vec![vec![Some("207".to_string()), Some("3105".to_string())]], "early_replica_joins = {early}");
        bytes.push(sent);
    }
    println!("filtered replicated join last, then first: {bytes:?} bytes between nodes");
    assert!(bytes[1] * 5 < bytes[0], "joining the filtered replicated table first sends less: {bytes:?}");

    // An aggregate of a's values grouped by b's key is summed per a.other
    // before the join (eager_aggregate.rs): one partial sum per key and
    // node is routed to b's owners instead of all 20,000 a rows.
    let grouped_far = "SELECT count(*), sum(s) FROM (SELECT b.k, sum(a.v) AS s, count(a.k) AS n FROM b JOIN a ON b.k = a.other GROUP BY b.k) WHERE n > 0";
    let matched: Vec<u64> = (1..=ROWS).filter(|k| k % 97 != 0).collect();
    let expected = vec![vec![Some("96".to_string()), Some(matched.iter().map(|k| 2 * k).sum::<u64>().to_string())]];
    let mut bytes = Vec::new();
    for eager in [false, true] {
        client.batch_execute(&format!("SET foam.eager_aggregates = {eager}")).await.expect("set");
        let (sent, rows) = bytes_between_nodes(&client, grouped_far).await;
        assert_eq!(rows, expected, "eager_aggregates = {eager}");
        bytes.push(sent);
    }
    println!("aggregate after, then before the join: {bytes:?} bytes between nodes");
    assert!(bytes[1] * 5 < bytes[0], "aggregating before the join sends less: {bytes:?}");
}
