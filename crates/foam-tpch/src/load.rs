//! `foam tpch load`: creates the TPC-H tables through SQL, then generates each
//! table in parallel parts and routes every batch straight to the nodes that
//! hold its rows (one Stage message per partition buffer, encoded once and
//! sent to each replica); one node then commits the table's load with
//! two-phase commit, so each table appears whole or not at all.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::record_batch::RecordBatch;
use async_trait::async_trait;
use foam_catalog::Catalog;
use foam_common::{FoamError, FoamResult, NodeId, TxnId};
use foam_query::write::{RowRouter, Shipment, StageTarget};
use foam_rpc::{NodeClient, NodeClients, NodeRequest, NodeResponse};
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};

use crate::schema::{ALL_TABLES, TpchTable, conform};

/// Generated batches buffered between the generator threads and the router.
const GENERATED_BATCHES_AHEAD: usize = 16;

#[derive(Debug, Clone)]
pub struct TableLoad {
    pub table: &'static str,
    pub rows: u64,
    pub elapsed: Duration,
}

#[derive(Debug, Clone)]
pub struct LoadReport {
    pub tables: Vec<TableLoad>,
    pub elapsed: Duration,
}

impl LoadReport {
    pub fn rows(&self) -> u64 {
        self.tables.iter().map(|t| t.rows).sum()
    }

    pub fn rows_per_second(&self) -> f64 {
        self.rows() as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// Ships rows by RPC from outside the cluster, naming `coordinator` as the
/// node that will commit.
struct RemoteStageTarget {
    coordinator: NodeId,
    catalog: Arc<Catalog>,
    clients: Arc<NodeClients>,
}

#[async_trait]
impl StageTarget for RemoteStageTarget {
    async fn stage(&self, target: NodeId, shipment: Arc<Shipment>) -> FoamResult<()> {
        let node = self.catalog.node(target)?;
        shipment.send(&self.clients.get(node.id, &node.node_addr)?, self.coordinator).await
    }
}

/// Connects to FoamDB's SQL endpoint at `url` (a libpq connection string or
/// `postgres://` URL).
pub async fn connect(url: &str) -> FoamResult<tokio_postgres::Client> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .map_err(|e| FoamError::InvalidParameter { message: format!("cannot connect to {url}: {e}") })?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

fn sql_error(error: tokio_postgres::Error) -> FoamError {
    match error.as_db_error() {
        Some(db) => FoamError::Remote { sqlstate: db.code().code().to_string(), message: db.message().to_string() },
        None => FoamError::internal(error.to_string()),
    }
}

/// Whether the TPC-H tables already exist (a cluster loaded earlier).
pub async fn is_loaded(client: &tokio_postgres::Client) -> FoamResult<bool> {
    let rows = client
        .simple_query("SELECT count(*) FROM information_schema.tables WHERE table_name = 'lineitem'")
        .await
        .map_err(sql_error)?;
    Ok(rows.iter().any(|m| matches!(m, tokio_postgres::SimpleQueryMessage::Row(r) if r.get(0) == Some("1"))))
}

/// Creates and loads the eight tables at `scale_factor`.
pub async fn load(url: &str, scale_factor: f64, show_progress: bool) -> FoamResult<LoadReport> {
    if !(scale_factor > 0.0) {
        return Err(FoamError::InvalidParameter { message: format!("scale factor must be positive, got {scale_factor}") });
    }
    let client = connect(url).await?;
    for table in ALL_TABLES {
        client.batch_execute(table.create_sql()).await.map_err(sql_error)?;
    }
    // The node we are connected to coordinates; its RPC address comes from foam_nodes.
    let nodes = client.simple_query("SELECT node_id, node_addr, status FROM foam_nodes").await.map_err(sql_error)?;
    let node_addrs: BTreeMap<NodeId, String> = nodes
        .iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(row) if row.get(2) == Some("up") => {
                Some((row.get(0)?.parse().ok()?, row.get(1)?.to_string()))
            }
            _ => None,
        })
        .collect();
    let (&first_id, first_addr) =
        node_addrs.iter().next().ok_or_else(|| FoamError::CatalogUnavailable { message: "no node is up".into() })?;
    let clients = Arc::new(NodeClients::default());
    let catalog = fetch_catalog(&clients.get(first_id, first_addr)?).await?;
    let coordinator = first_id;

    let workers = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2);
    let progress = MultiProgress::new();
    if !show_progress {
        progress.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    let started = Instant::now();
    let mut report = Vec::new();
    for table in ALL_TABLES {
        let definition = catalog.table(table.name())?.clone();
        let bar = progress.add(ProgressBar::new_spinner());
        bar.set_style(
            ProgressStyle::with_template("{prefix:>9} {spinner} {human_pos:>12} rows {per_sec:>16} {elapsed:>4} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        bar.set_prefix(table.name());
        bar.enable_steady_tick(Duration::from_millis(200));
        let table_started = Instant::now();
        let rows = load_table(table, scale_factor, workers, &definition, &catalog, &clients, coordinator, &bar).await?;
        bar.finish_with_message("committed");
        report.push(TableLoad { table: table.name(), rows, elapsed: table_started.elapsed() });
    }
    Ok(LoadReport { tables: report, elapsed: started.elapsed() })
}

async fn fetch_catalog(client: &NodeClient) -> FoamResult<Arc<Catalog>> {
    match client.call(&NodeRequest::CatalogGet { known_version: None }, &[]).await? {
        (NodeResponse::Catalog { catalog: Some(catalog) }, _) => Ok(Arc::new(catalog)),
        (other, _) => Err(FoamError::internal(format!("unexpected catalog reply {other:?}"))),
    }
}

#[allow(clippy::too_many_arguments)]
async fn load_table(
    table: TpchTable,
    scale_factor: f64,
    workers: usize,
    definition: &foam_catalog::TableDef,
    catalog: &Arc<Catalog>,
    clients: &Arc<NodeClients>,
    coordinator: NodeId,
    bar: &ProgressBar,
) -> FoamResult<u64> {
    let schema = definition.arrow_schema();
    let parts = table.parts(scale_factor, workers);
    let (sender, mut receiver) = tokio::sync::mpsc::channel::<FoamResult<RecordBatch>>(GENERATED_BATCHES_AHEAD);
    let mut generators = Vec::new();
    for part in 0..parts {
        let sender = sender.clone();
        let schema = schema.clone();
        generators.push(tokio::task::spawn_blocking(move || {
            for batch in table.generate(scale_factor, part, parts) {
                let batch = batch.and_then(|b| conform(&b, &schema)).map_err(|e| FoamError::internal(format!("TPC-H batch: {e}")));
                if sender.blocking_send(batch).is_err() {
                    return;
                }
            }
        }));
    }
    drop(sender);
    let txn: TxnId = uuid::Uuid::new_v4().as_u128();
    let target = Arc::new(RemoteStageTarget { coordinator, catalog: catalog.clone(), clients: clients.clone() });
    let mut router = RowRouter::new(target, definition.clone(), catalog.nodes.clone(), txn);
    let coordinator_node = catalog.node(coordinator)?;
    let coordinator_client = clients.get(coordinator, &coordinator_node.node_addr)?;
    let routed = async {
        while let Some(batch) = receiver.recv().await {
            let batch = batch?;
            bar.inc(batch.num_rows() as u64);
            router.write(batch).await?;
        }
        router.finish().await
    }
    .await;
    let participants = match routed {
        Ok(participants) => participants,
        Err(error) => {
            let participants = router.cancel().await;
            let _ = coordinator_client.call(&NodeRequest::AbortTransaction { txn, participants }, &[]).await;
            return Err(error);
        }
    };
    for generator in generators {
        generator.await.map_err(|e| FoamError::internal(e.to_string()))?;
    }
    coordinator_client.call(&NodeRequest::CommitTransaction { txn, participants }, &[]).await?;
    Ok(router.rows())
}
