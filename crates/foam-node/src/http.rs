//! The operators' HTTP port of a node (`--http-addr`): Prometheus
//! `/metrics` with this node's counters, `/healthz`, and a read-only
//! console at `/` (the cluster's nodes, partition copies and traffic as the
//! system tables give them, and this node's client connections).
//!
//! ```text
//!  Prometheus ─GET /metrics─▶ a registry made per scrape: SqlActivity's
//!                             metrics (foam-pgwire) + the node's counters
//!  browser    ─GET /────────▶ HTML of foam_nodes, foam_cluster_stats,
//!                             foam_partitions and SqlActivity's connections
//! ```
//! Nothing here changes the cluster, and nothing shows rows or statement
//! text (which may hold data): the port has no login, as CockroachDB's
//! `/_status/vars` has none. Bind it where only operators reach it.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use arrow::array::RecordBatch;
use arrow::util::display::{ArrayFormatter, FormatOptions};
use axum::Router;
use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::{Html, IntoResponse};
use axum::routing::get;
use foam_catalog::model::NodeState;
use foam_pgwire::SqlActivity;
use foam_query::NodeContext;
use foam_query::catalog::system_tables;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;

/// Rows of a system table the console shows, at most (a cluster of many
/// tables has thousands of partition copies).
const CONSOLE_ROWS_MAX: usize = 500;
/// Seconds between the console's reloads of itself.
const CONSOLE_REFRESH_S: u32 = 5;
const OPENMETRICS_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// What the endpoints read.
pub struct Operators {
    pub node: Arc<NodeContext>,
    pub activity: Arc<SqlActivity>,
    pub sql_addr: String,
    pub started: SystemTime,
    pub started_at: Instant,
}

/// Serves the endpoints on `listener` until the process ends.
pub async fn serve(listener: TcpListener, operators: Arc<Operators>) -> std::io::Result<()> {
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/", get(console))
        .with_state(operators);
    axum::serve(listener, app).await
}

async fn metrics(State(operators): State<Arc<Operators>>) -> impl IntoResponse {
    let mut registry = Registry::default();
    operators.activity.register(&mut registry);
    register_node(&mut registry, &operators);
    let mut text = String::new();
    match encode(&mut text, &registry) {
        Ok(()) => ([(CONTENT_TYPE, OPENMETRICS_TYPE)], text).into_response(),
        Err(error) => (axum::http::StatusCode::INTERNAL_SERVER_ERROR, format!("encoding the metrics failed: {error}\n")).into_response(),
    }
}

type Labels = Vec<(&'static str, String)>;

fn gauge_family(registry: &mut Registry, name: &str, help: &str, values: impl IntoIterator<Item = (Labels, i64)>) {
    let family = Family::<Labels, Gauge>::default();
    for (labels, value) in values {
        family.get_or_create(&labels).set(value);
    }
    registry.register(name, help, family);
}

fn counter_family(registry: &mut Registry, name: &str, help: &str, values: impl IntoIterator<Item = (Labels, u64)>) {
    let family = Family::<Labels, Counter>::default();
    for (labels, value) in values {
        family.get_or_create(&labels).inc_by(value);
    }
    registry.register(name, help, family);
}

/// The node's own counters, read now.
fn register_node(registry: &mut Registry, operators: &Operators) {
    let node = &operators.node;
    let catalog = node.catalog.current();
    let ordering = std::sync::atomic::Ordering::Relaxed;
    let info = vec![("node_id", node.node_id.to_string()), ("version", env!("CARGO_PKG_VERSION").to_string())];
    gauge_family(registry, "foam_node_info", "This node's id and FoamDB version", [(info, 1)]);
    let role = node.catalog.meta_role();
    gauge_family(
        registry,
        "foam_meta_role",
        "1 for this node's role in the catalog's Raft group (leader, follower, ...); absent outside it",
        role.map(|role| (vec![("role", role)], 1)),
    );
    let mut statuses: BTreeMap<&str, i64> = BTreeMap::from([("up", 0), ("down", 0)]);
    for member in catalog.nodes.values() {
        *statuses.entry(if member.state == NodeState::Up { "up" } else { "down" }).or_default() += 1;
    }
    gauge_family(
        registry,
        "foam_cluster_nodes",
        "Nodes of the cluster by status, as this node's catalog says",
        statuses.into_iter().map(|(status, n)| (vec![("status", status.to_string())], n)),
    );
    // This node's copies of partitions, by state, and its tables' rows and bytes.
    let mut copies: BTreeMap<&str, i64> = BTreeMap::new();
    let (mut rows, mut bytes) = (Vec::new(), Vec::new());
    for table in catalog.tables.values() {
        let (mut table_rows, mut table_bytes, mut held) = (0u64, 0u64, false);
        for (partition, placement) in table.placement.iter().enumerate() {
            for replica in placement.replicas.iter().filter(|r| r.node == node.node_id) {
                *copies.entry(replica.state.name()).or_default() += 1;
                let stats = node.storage.stats(table.id, partition as foam_common::PartitionId);
                table_rows += stats.rows;
                table_bytes += stats.bytes;
                held = true;
            }
        }
        if held {
            rows.push((vec![("table", table.name.clone())], table_rows as i64));
            bytes.push((vec![("table", table.name.clone())], table_bytes as i64));
        }
    }
    gauge_family(
        registry,
        "foam_partition_copies",
        "Copies of partitions this node holds, by replica state",
        copies.into_iter().map(|(state, n)| (vec![("state", state.to_string())], n)),
    );
    gauge_family(registry, "foam_table_rows", "Rows of each table in this node's copies", rows);
    gauge_family(registry, "foam_table_bytes", "Bytes of each table in this node's copies", bytes);
    let counters = [
        ("foam_partition_scans", "Partition scans this node served", node.partition_scans.load(ordering)),
        ("foam_rows_scanned", "Rows this node's scans read", node.rows_scanned.load(ordering)),
        ("foam_rows_sent_to_peers", "Rows this node sent to other nodes", node.rows_sent_to_peers.load(ordering)),
    ];
    for (name, help, value) in counters {
        counter_family(registry, name, help, [(Vec::new(), value)]);
    }
    let traffic = node.traffic.snapshot();
    let peer = |id: &foam_common::NodeId| vec![("peer", id.to_string())];
    let per_peer: [(&str, &str, fn(&foam_rpc::traffic::PeerTraffic) -> u64); 4] = [
        ("foam_peer_messages_sent", "Messages this node sent to each peer", |p| p.messages_out),
        ("foam_peer_bytes_sent", "Bytes this node sent to each peer", |p| p.bytes_out),
        ("foam_peer_messages_received", "Messages this node received from each peer", |p| p.messages_in),
        ("foam_peer_bytes_received", "Bytes this node received from each peer", |p| p.bytes_in),
    ];
    for (name, help, value) in per_peer {
        counter_family(registry, name, help, traffic.peers.iter().map(|(id, p)| (peer(id), value(p))));
    }
    registry.register(
        "foam_peer_wait_seconds",
        "Seconds this node's queries waited for other nodes' rows",
        ConstGauge::new(traffic.wait_ms as f64 / 1000.0),
    );
    registry.register("foam_active_queries", "Queries this node coordinates now", ConstGauge::new(traffic.active_queries as i64));
    if let Some(nanos) = foam_rpc::traffic::process_cpu_nanos() {
        registry.register("process_cpu_seconds", "User and system CPU time of this process", ConstCounter::new(nanos as f64 / 1e9));
    }
    if let Some(rss) = resident_bytes() {
        registry.register("process_resident_memory_bytes", "Resident memory of this process", ConstGauge::new(rss as i64));
    }
    let start = operators.started.duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or_default();
    registry.register("process_start_time_seconds", "When this process started, in seconds since 1970", ConstGauge::new(start));
}

/// The process's resident memory, from /proc (Linux).
fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

async fn console(State(operators): State<Arc<Operators>>) -> Html<String> {
    let node = &operators.node;
    let mut page = String::new();
    let role = node.catalog.meta_role().unwrap_or_else(|| "none".into());
    let up = operators.started_at.elapsed().as_secs();
    let _ = write!(
        page,
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><meta http-equiv=\"refresh\" content=\"{CONSOLE_REFRESH_S}\">\
         <title>FoamDB node {id}</title><style>body{{font-family:sans-serif;margin:1.5em}}table{{border-collapse:collapse;margin-bottom:1.5em}}\
         td,th{{border:1px solid #bbb;padding:2px 8px;text-align:left}}th{{background:#eee}}</style></head><body>\
         <h1>FoamDB node {id}</h1><p id=\"node\">SQL on {sql}; catalog role: {role}; up {up} s; FoamDB {version}</p>",
        id = node.node_id,
        sql = escape(&operators.sql_addr),
        role = escape(&role),
        version = env!("CARGO_PKG_VERSION"),
    );
    for (id, title, table) in [
        ("nodes", "Nodes", "foam_nodes"),
        ("traffic", "Traffic between nodes", "foam_cluster_stats"),
        ("partitions", "Partitions and their copies", "foam_partitions"),
    ] {
        let _ = write!(page, "<h2>{title}</h2>");
        match system_tables::batch(table, node).await {
            Ok(Some(batch)) => html_table(&mut page, id, &batch),
            Ok(None) => {}
            Err(error) => {
                let _ = write!(page, "<p class=\"error\">{}</p>", escape(&error.to_string()));
            }
        }
    }
    let _ = write!(page, "<h2>Client connections to this node</h2><table id=\"connections\"><tr><th>connection</th><th>user</th><th>client</th><th>connected (s)</th><th>running</th><th>for (s)</th></tr>");
    let now = SystemTime::now();
    for c in node.connections.list() {
        let connected = now.duration_since(c.connected).map(|d| d.as_secs()).unwrap_or_default();
        let (running, since) = match c.running_since {
            Some(at) => (c.command, format!("{:.1}", at.elapsed().as_secs_f64())),
            None => ("idle", String::new()),
        };
        let _ = write!(
            page,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{connected}</td><td>{running}</td><td>{since}</td></tr>",
            c.pid,
            escape(&c.user),
            escape(&c.client.to_string())
        );
    }
    page.push_str("</table></body></html>");
    Html(page)
}

/// `batch` as an HTML table with id `id`, at most [`CONSOLE_ROWS_MAX`] rows.
fn html_table(page: &mut String, id: &str, batch: &RecordBatch) {
    let _ = write!(page, "<table id=\"{id}\"><tr>");
    for field in batch.schema().fields() {
        let _ = write!(page, "<th>{}</th>", escape(field.name()));
    }
    page.push_str("</tr>");
    let options = FormatOptions::default().with_null("NULL");
    let formatters: Vec<Option<ArrayFormatter>> = batch.columns().iter().map(|c| ArrayFormatter::try_new(c.as_ref(), &options).ok()).collect();
    for row in 0..batch.num_rows().min(CONSOLE_ROWS_MAX) {
        page.push_str("<tr>");
        for formatter in &formatters {
            let value = formatter.as_ref().map(|f| f.value(row).to_string()).unwrap_or_default();
            let _ = write!(page, "<td>{}</td>", escape(&value));
        }
        page.push_str("</tr>");
    }
    page.push_str("</table>");
    if batch.num_rows() > CONSOLE_ROWS_MAX {
        let _ = write!(page, "<p>and {} more rows (SELECT * FROM the system table for all)</p>", batch.num_rows() - CONSOLE_ROWS_MAX);
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{StringArray, UInt32Array};
    use arrow::datatypes::{DataType, Field, Schema};

    #[test]
    fn tables_are_escaped_and_cut_at_the_row_limit() {
        let rows = CONSOLE_ROWS_MAX + 2;
        let schema = Arc::new(Schema::new(vec![Field::new("n", DataType::UInt32, false), Field::new("name", DataType::Utf8, true)]));
        let names: Vec<Option<&str>> = (0..rows).map(|i| if i == 0 { Some("<b>&") } else { None }).collect();
        let batch = RecordBatch::try_new(schema, vec![Arc::new(UInt32Array::from_iter_values(0..rows as u32)), Arc::new(StringArray::from(names))])
            .unwrap();
        let mut page = String::new();
        html_table(&mut page, "t", &batch);
        assert!(page.starts_with("<table id=\"t\"><tr><th>n</th><th>name</th></tr><tr><td>0</td><td>&lt;b&gt;&amp;</td></tr>"), "{page}");
        assert_eq!(page.matches("<tr>").count(), CONSOLE_ROWS_MAX + 1);
        assert!(page.ends_with("<p>and 2 more rows (SELECT * FROM the system table for all)</p>"));
    }
}
