//! The operators' HTTP endpoints of real node processes: every node's
//! Prometheus `/metrics` counts what its clients ran and agrees with the
//! system tables, and the console shows a live 3-node cluster when loaded
//! in headless Chromium (Debian's `chromium` package; `.ci/run` installs it);
//! `pg_stat_activity` lists the same connections to SQL clients.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::{Cluster, error_of, scalar};

/// How long a running statement may take to appear on the console.
const CONSOLE_WAIT: Duration = Duration::from_secs(30);

/// The samples of a Prometheus text exposition: `name{labels}` → value.
fn samples(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .filter_map(|line| {
            let (key, value) = line.rsplit_once(' ')?;
            Some((key.to_string(), value.parse().ok()?))
        })
        .collect()
}

fn metrics(cluster: &Cluster, index: usize) -> BTreeMap<String, f64> {
    let (status, body) = cluster.http_get(index, "/metrics");
    assert_eq!(status, 200, "{body}");
    assert!(body.ends_with("# EOF\n"), "an OpenMetrics exposition ends with # EOF:\n{body}");
    samples(&body)
}

fn value(samples: &BTreeMap<String, f64>, key: &str) -> f64 {
    samples.get(key).copied().unwrap_or(0.0)
}

/// The sum of every sample of metric `name` whose labels hold `labels`.
fn sum(samples: &BTreeMap<String, f64>, name: &str, labels: &str) -> f64 {
    samples
        .iter()
        .filter(|(key, _)| key.split('{').next() == Some(name) && key.contains(labels))
        .map(|(_, v)| v)
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_node_serves_metrics_that_count_what_its_clients_ran() {
    let cluster = Cluster::start(3);
    let client = cluster.client(0).await;
    assert_eq!(cluster.http_get(1, "/healthz"), (200, "ok\n".to_string()));
    assert_eq!(cluster.http_get(1, "/nope").0, 404);

    let before = metrics(&cluster, 0);
    client.batch_execute("CREATE TABLE m (k INT, v INT) DISTRIBUTED BY (k) PARTITIONS 6").await.unwrap();
    client.batch_execute("INSERT INTO m SELECT value, value % 7 FROM generate_series(1, 3000)").await.unwrap();
    for _ in 0..5 {
        // Grouped by v, not the key: rows cross the network.
        client.query("SELECT v, count(*) FROM m GROUP BY v", &[]).await.unwrap();
    }
    let (code, _) = error_of(&client, "SELECT * FROM no_such_table").await;
    assert_eq!(code, "42P01");
    let (code, _) = error_of(&client, "SELEKT 1").await;
    assert_eq!(code, "42601");
    let after = metrics(&cluster, 0);
    let delta = |key: &str| value(&after, key) - value(&before, key);
    assert_eq!(delta("foam_sql_statements_total{command=\"CREATE\"}"), 1.0);
    assert_eq!(delta("foam_sql_statements_total{command=\"INSERT\"}"), 1.0);
    assert_eq!(delta("foam_sql_statements_total{command=\"SELECT\"}"), 5.0);
    assert_eq!(delta("foam_sql_errors_total{sqlstate_class=\"42\"}"), 2.0);
    assert_eq!(delta("foam_sql_statement_duration_seconds_count"), 9.0, "every statement is timed");
    assert!(value(&after, "foam_sql_connections") >= 1.0);

    let all: Vec<BTreeMap<String, f64>> = (0..3).map(|i| metrics(&cluster, i)).collect();
    let leaders = all.iter().filter(|s| value(s, "foam_meta_role{role=\"leader\"}") == 1.0).count();
    assert_eq!(leaders, 1, "one node leads the catalog's Raft group");
    let mut ids = Vec::new();
    for (index, samples) in all.iter().enumerate() {
        assert_eq!(value(samples, "foam_cluster_nodes{status=\"up\"}"), 3.0, "node {index}");
        let info: Vec<&String> = samples.keys().filter(|k| k.starts_with("foam_node_info{")).collect();
        assert_eq!(info.len(), 1, "{info:?}");
        ids.push(info[0].split("node_id=\"").nth(1).and_then(|rest| rest.split('"').next()).expect("a node_id label").to_string());
        assert!(value(samples, "process_resident_memory_bytes") > 0.0);
    }
    ids.sort();
    assert_eq!(ids, ["1", "2", "3"]);
    let sent: f64 = all.iter().map(|s| sum(s, "foam_peer_bytes_sent_total", "")).sum();
    assert!(sent > 0.0, "the grouped query sent rows between nodes");

    // Each node's copies and rows, as the system tables count them.
    let copies: f64 = all.iter().map(|s| sum(s, "foam_partition_copies", "")).sum();
    let listed = scalar(&client, "SELECT count(*) FROM foam_partitions").await;
    assert_eq!(copies, listed.parse::<f64>().unwrap());
    let rows: f64 = all.iter().map(|s| value(s, "foam_table_rows{table=\"m\"}")).sum();
    let counted = scalar(&client, "SELECT sum(row_count) FROM foam_partitions WHERE table_name = 'm'").await;
    assert_eq!(rows, counted.parse::<f64>().unwrap());
    assert!(rows >= 3000.0, "every copy of m's rows: {rows}");
}

/// Node `index`'s console as headless Chromium renders it.
fn console_in_chromium(cluster: &Cluster, index: usize) -> String {
    let browser = ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|b| std::process::Command::new(b).arg("--version").output().is_ok_and(|o| o.status.success()))
        .expect("headless Chromium (Debian: apt-get install chromium), which loads the console");
    let profile = tempfile::tempdir().expect("a browser profile");
    let url = format!("http://{}:{}/", cluster.nodes[index].sql_host, cluster.nodes[index].http_port);
    let output = std::process::Command::new(browser)
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--dump-dom"])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(&url)
        .output()
        .expect("run chromium");
    assert!(output.status.success(), "chromium failed: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).expect("a UTF-8 page")
}

/// The rows of the HTML table with id `id` in `page`, as cell texts.
fn table_rows(page: &str, id: &str) -> Vec<Vec<String>> {
    let start = page.find(&format!("<table id=\"{id}\">")).unwrap_or_else(|| panic!("no table {id} in:\n{page}"));
    let table = &page[start..start + page[start..].find("</table>").expect("the table's end")];
    table
        .split("<tr>")
        .skip(2)
        .map(|row| row.split("<td>").skip(1).map(|cell| cell.split("</td>").next().unwrap_or_default().to_string()).collect())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_shows_a_live_cluster_in_a_browser() {
    let cluster = Cluster::start(3);
    let client = cluster.client(2).await;
    client
        .batch_execute(
            "CREATE TABLE shown (k BIGINT) DISTRIBUTED BY (k) PARTITIONS 4;
             INSERT INTO shown SELECT value FROM generate_series(1, 200000);",
        )
        .await
        .unwrap();
    // A statement that runs until canceled (4e10 pairs), so the console
    // has one to show.
    let client = std::sync::Arc::new(client);
    let token = client.cancel_token();
    let runner = client.clone();
    let running = tokio::spawn(async move { error_of(&runner, "SELECT count(*) FROM shown a CROSS JOIN shown b WHERE a.k <> b.k").await });
    let deadline = Instant::now() + CONSOLE_WAIT;
    while !cluster.http_get(2, "/").1.contains("<td>SELECT</td>") {
        assert!(Instant::now() < deadline, "the running SELECT never showed on the console");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let page = console_in_chromium(&cluster, 2);
    assert!(page.contains("<h1>FoamDB node "), "{page}");
    let nodes = table_rows(&page, "nodes");
    assert_eq!(nodes.len(), 3, "{nodes:?}");
    assert!(nodes.iter().all(|row| row[3] == "up" && row[4] == "true"), "every node up and answering: {nodes:?}");
    let partitions: Vec<Vec<String>> = table_rows(&page, "partitions").into_iter().filter(|row| row[0] == "shown").collect();
    let copies = scalar(&cluster.client(0).await, "SELECT count(*) FROM foam_partitions WHERE table_name = 'shown'").await;
    assert_eq!(partitions.len().to_string(), copies, "{partitions:?}");
    assert!(partitions.iter().all(|row| row[3] == "live"), "{partitions:?}");
    let traffic = table_rows(&page, "traffic");
    assert_eq!(traffic.len(), 4, "a row per node and the total: {traffic:?}");
    let connections = table_rows(&page, "connections");
    assert!(connections.iter().any(|row| row[1] == "foam" && row[4] == "SELECT"), "the running statement: {connections:?}");
    assert!(!page.contains("a.k &lt;&gt; b.k") && !page.contains("CROSS JOIN"), "the console shows no statement text");

    token.cancel_query(tokio_postgres::NoTls).await.expect("cancel");
    let (code, _) = tokio::time::timeout(Duration::from_secs(20), running).await.expect("canceled").unwrap();
    assert_eq!(code, "57014");
}

/// `(pid, usename, state, query)` of every row of `pg_stat_activity`.
async fn activity(client: &tokio_postgres::Client, relation: &str) -> Vec<(i32, String, String, String)> {
    let rows = client.query(&format!("SELECT pid, usename, state, query FROM {relation} ORDER BY pid"), &[]).await.expect("pg_stat_activity");
    rows.iter().map(|r| (r.get(0), r.get(1), r.get(2), r.get(3))).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_stat_activity_lists_a_nodes_connections_and_hides_other_roles_statements() {
    let cluster = Cluster::start(2);
    let admin = cluster.client(0).await;
    admin.batch_execute("CREATE ROLE watcher LOGIN PASSWORD 'w-pw'").await.unwrap();
    let node = |i: usize| format!("host=127.0.0.1 port={} dbname=foam user=watcher password=w-pw", cluster.nodes[i].sql_port);
    let watcher = common::connect(&node(0)).await;
    watcher.batch_execute("SELECT 42").await.unwrap();
    let elsewhere = common::connect(&node(1)).await;
    elsewhere.batch_execute("SELECT 43").await.unwrap();

    // The superuser reads every statement of node 0's connections; its
    // own is the one running.
    let query = "SELECT pid, usename, state, query FROM pg_stat_activity ORDER BY pid";
    let seen = activity(&admin, "pg_stat_activity").await;
    assert!(seen.iter().any(|(_, user, state, text)| user == "foam" && state == "active" && text == query), "{seen:?}");
    assert!(seen.iter().any(|(_, user, state, text)| user == "watcher" && state == "idle" && text == "SELECT 42"), "{seen:?}");
    assert!(!seen.iter().any(|(_, _, _, text)| text == "SELECT 43"), "node 1's connection is node 1's: {seen:?}");
    assert_eq!(activity(&admin, "pg_catalog.pg_stat_activity").await.len(), seen.len());

    // Another role sees the superuser's connection but not its statement.
    let theirs = activity(&watcher, "pg_stat_activity").await;
    assert!(theirs.iter().any(|(_, user, _, text)| user == "foam" && text == "<insufficient privilege>"), "{theirs:?}");
    assert!(theirs.iter().any(|(_, user, state, text)| user == "watcher" && state == "active" && text.contains("pg_stat_activity")), "{theirs:?}");
    let pids: std::collections::BTreeSet<i32> = theirs.iter().map(|row| row.0).collect();
    assert_eq!(pids.len(), theirs.len(), "pids are unique: {theirs:?}");

    // A closed connection leaves the list.
    drop(watcher);
    let deadline = Instant::now() + Duration::from_secs(10);
    while activity(&admin, "pg_stat_activity").await.iter().any(|(_, user, _, _)| user == "watcher") {
        assert!(Instant::now() < deadline, "the closed connection is still listed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(scalar(&admin, "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' AND client_addr = '127.0.0.1'").await, "1");
}
