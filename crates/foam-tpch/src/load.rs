//! `foam tpch load`: creates the TPC-H tables through SQL, then generates each
//! table in parallel parts. Each generator thread checks its rows as any write
//! is checked, splits them by partition and encodes them into that
//! partition's segment (a Parquet file built in memory); a finished segment
//! goes whole to every replica of its partition (`StageSegment`), which checks
//! and stores it, so each row is encoded once however many copies it has. One
//! node then commits the table's load with two-phase commit, so each table
//! appears whole or not at all.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use bytes::Bytes;
use foam_catalog::Catalog;
use foam_common::{FoamError, FoamResult, NodeId, PartitionId, TxnId};
use foam_query::write::{conform_rows, join_next, split_by_partition};
use foam_rpc::{NodeClients, NodeRequest, NodeResponse};
use foam_storage::segment::{SegmentBuilder, SegmentSum};
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use tokio::task::JoinSet;

use crate::schema::{ALL_TABLES, TpchTable, conform};

/// Rows a segment built by the loader holds at most before it is shipped.
/// Each partition's unfinished segment is held in the loader's memory (at
/// most about 50 MB for TPC-H's widest table).
const LOAD_SEGMENT_ROWS_MAX: u64 = 1 << 20;

/// Finished segments waiting to be shipped when the generators outrun the network.
const SEGMENTS_AHEAD: usize = 8;

/// Stage messages on their way to nodes at once.
const SEGMENTS_IN_FLIGHT: usize = 8;

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

/// Rows in `lineitem`, or None unless all eight TPC-H tables exist (a load
/// creates all eight before it fills any). The loader fills lineitem last,
/// in one transaction, so rows there mean every table committed.
async fn lineitem_rows(client: &tokio_postgres::Client) -> FoamResult<Option<u64>> {
    let first = |rows: Vec<tokio_postgres::SimpleQueryMessage>| {
        rows.iter().find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).and_then(|v| v.parse::<u64>().ok()),
            _ => None,
        })
    };
    let names: Vec<String> = ALL_TABLES.iter().map(|t| format!("'{}'", t.name())).collect();
    let exists = client
        .simple_query(&format!(
            "SELECT count(DISTINCT table_name) FROM information_schema.tables WHERE table_name IN ({})",
            names.join(", ")
        ))
        .await
        .map_err(sql_error)?;
    if first(exists) != Some(ALL_TABLES.len() as u64) {
        return Ok(None);
    }
    Ok(first(client.simple_query("SELECT count(*) FROM lineitem").await.map_err(sql_error)?))
}

/// Whether an earlier load finished (its last table, lineitem, has rows).
pub async fn is_loaded(client: &tokio_postgres::Client) -> FoamResult<bool> {
    Ok(lineitem_rows(client).await?.is_some_and(|rows| rows > 0))
}

async fn drop_tables(client: &tokio_postgres::Client, tables: &[TpchTable]) -> FoamResult<()> {
    for table in tables {
        client.batch_execute(&format!("DROP TABLE IF EXISTS {}", table.name())).await.map_err(sql_error)?;
    }
    Ok(())
}

/// Creates and loads the eight tables at `scale_factor`, all or nothing: a
/// load that fails drops the tables it created, and one that finds an
/// earlier load's tables with lineitem empty (that load was stopped before
/// its last commit) drops them first.
pub async fn load(url: &str, scale_factor: f64, show_progress: bool) -> FoamResult<LoadReport> {
    if !(scale_factor > 0.0) {
        return Err(FoamError::InvalidParameter { message: format!("scale factor must be positive, got {scale_factor}") });
    }
    // tpchgen builds its text pool (about 300 MB) the first time any table is
    // generated; start that now, while the tables are created.
    let text_pool = tokio::task::spawn_blocking(move || drop(TpchTable::Nation.generate(scale_factor, 0, 1)));
    let client = connect(url).await?;
    if lineitem_rows(&client).await? == Some(0) {
        eprintln!("An earlier TPC-H load did not finish; dropping its tables.");
        drop_tables(&client, &ALL_TABLES).await?;
    }
    for (created, table) in ALL_TABLES.iter().enumerate() {
        if let Err(error) = client.batch_execute(table.create_sql()).await {
            let _ = drop_tables(&client, &ALL_TABLES[..created]).await;
            return Err(sql_error(error));
        }
    }
    let loaded = fill_tables(&client, scale_factor, show_progress, text_pool).await;
    if loaded.is_err() {
        let _ = drop_tables(&client, &ALL_TABLES).await;
    }
    loaded
}

/// Generates and commits every table's rows, one table after another.
async fn fill_tables(
    client: &tokio_postgres::Client,
    scale_factor: f64,
    show_progress: bool,
    text_pool: tokio::task::JoinHandle<()>,
) -> FoamResult<LoadReport> {
    // The lowest-numbered node that is up coordinates the commits; node
    // addresses come from foam_nodes.
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
    let catalog = fetch_catalog(&clients, &node_addrs, first_id, first_addr).await?;
    let coordinator = first_id;
    text_pool.await.map_err(|e| FoamError::internal(e.to_string()))?;

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

/// Fetches the cluster catalog from the leader of the meta nodes (only it
/// answers `CatalogGet`), starting at `first` and following `NotLeader`
/// hints: the leader moves when a node restarts or fails.
async fn fetch_catalog(
    clients: &NodeClients,
    node_addrs: &BTreeMap<NodeId, String>,
    first_id: NodeId,
    first_addr: &str,
) -> FoamResult<Arc<Catalog>> {
    let (mut id, mut addr) = (first_id, first_addr.to_string());
    for _ in 0..=node_addrs.len() {
        match clients.get(id, &addr)?.call(&NodeRequest::CatalogGet { known_version: None }, &[]).await? {
            (NodeResponse::Catalog { catalog: Some(catalog) }, _) => return Ok(Arc::new(catalog)),
            (NodeResponse::NotLeader { leader: Some(leader) }, _) if leader != addr => {
                id = node_addrs.iter().find(|(_, a)| **a == leader).map_or(0, |(id, _)| *id);
                addr = leader;
            }
            (NodeResponse::NotLeader { .. }, _) => break,
            (other, _) => return Err(FoamError::internal(format!("unexpected catalog reply {other:?}"))),
        }
    }
    Err(FoamError::CatalogUnavailable {
        message: format!("no leader of the meta nodes answered the loader (last asked {addr}); retry when one is elected"),
    })
}

/// A segment the loader finished for one partition, to ship to its replicas.
struct FinishedSegment {
    partition: PartitionId,
    rows: u64,
    data: Bytes,
    sum: SegmentSum,
}

/// The segments being built, one slot per partition, shared by the generator
/// threads: whichever thread has rows of a partition appends them.
struct SegmentSlots {
    schema: SchemaRef,
    slots: Vec<Mutex<Option<SegmentBuilder>>>,
}

impl SegmentSlots {
    fn new(schema: SchemaRef, partitions: u32) -> Self {
        SegmentSlots { schema, slots: (0..partitions).map(|_| Mutex::new(None)).collect() }
    }

    /// Appends one partition's rows; returns the segment when it is full.
    fn append(&self, partition: PartitionId, rows: &RecordBatch) -> FoamResult<Option<FinishedSegment>> {
        let slot = self.slots.get(partition as usize).ok_or_else(|| FoamError::internal(format!("no partition {partition}")))?;
        let full = append_to_segment(&mut slot.lock().unwrap_or_else(|p| p.into_inner()), &self.schema, rows)?;
        full.map(|builder| finish(partition, builder)).transpose()
    }

    /// Takes the unfinished segment of `partition`, if it has one.
    fn take(&self, partition: PartitionId) -> Option<SegmentBuilder> {
        self.slots.get(partition as usize)?.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

/// Appends `rows` to the segment being built in `slot` (started on the first
/// rows); takes it out and returns it once it holds [`LOAD_SEGMENT_ROWS_MAX`] rows.
pub(crate) fn append_to_segment(slot: &mut Option<SegmentBuilder>, schema: &SchemaRef, rows: &RecordBatch) -> FoamResult<Option<SegmentBuilder>> {
    let builder = match slot.as_mut() {
        Some(builder) => builder,
        None => slot.insert(SegmentBuilder::new(schema, rows)?),
    };
    builder.write(rows)?;
    Ok(if builder.rows() < LOAD_SEGMENT_ROWS_MAX { None } else { slot.take() })
}

fn finish(partition: PartitionId, builder: SegmentBuilder) -> FoamResult<FinishedSegment> {
    let rows = builder.rows();
    let (data, sum) = builder.finish()?;
    Ok(FinishedSegment { partition, rows, data, sum })
}

/// Generates a table in parallel parts; each generator thread checks its rows
/// as any write of the table is checked, splits them by partition and
/// appends them to the partitions' segments, which go to `finished` when full
/// and at the end.
fn generate_segments(
    table: TpchTable,
    scale_factor: f64,
    workers: usize,
    definition: &foam_catalog::TableDef,
    bar: &ProgressBar,
    finished: tokio::sync::mpsc::Sender<FoamResult<FinishedSegment>>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let schema = definition.arrow_schema();
    let slots = Arc::new(SegmentSlots::new(schema.clone(), definition.partition_count()));
    let parts = table.parts(scale_factor, workers);
    let parts_left = Arc::new(std::sync::atomic::AtomicI32::new(parts));
    (0..parts)
        .map(|part| {
            let (slots, parts_left, finished, schema, definition, bar) =
                (slots.clone(), parts_left.clone(), finished.clone(), schema.clone(), definition.clone(), bar.clone());
            tokio::task::spawn_blocking(move || {
                let generated = (|| -> FoamResult<()> {
                    for batch in table.generate(scale_factor, part, parts) {
                        let batch = batch.and_then(|b| conform(&b, &schema)).map_err(|e| FoamError::internal(format!("TPC-H batch: {e}")))?;
                        let batch = conform_rows(&definition, &schema, batch)?;
                        bar.inc(batch.num_rows() as u64);
                        for (partition, rows) in split_by_partition(&definition, &batch)? {
                            if let Some(segment) = slots.append(partition, &rows)? {
                                finished.blocking_send(Ok(segment)).map_err(|_| FoamError::internal("the loader stopped"))?;
                            }
                        }
                    }
                    // The last part to finish ships what every partition has left.
                    if parts_left.fetch_sub(1, std::sync::atomic::Ordering::AcqRel) == 1 {
                        for partition in 0..definition.partition_count() {
                            if let Some(builder) = slots.take(partition) {
                                finished.blocking_send(finish(partition, builder)).map_err(|_| FoamError::internal("the loader stopped"))?;
                            }
                        }
                    }
                    Ok(())
                })();
                if let Err(error) = generated {
                    let _ = finished.blocking_send(Err(error));
                }
            })
        })
        .collect()
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
    let (sender, mut receiver) = tokio::sync::mpsc::channel::<FoamResult<FinishedSegment>>(SEGMENTS_AHEAD);
    let generators = generate_segments(table, scale_factor, workers, definition, bar, sender);
    let txn: TxnId = uuid::Uuid::new_v4().as_u128();
    let mut participants: BTreeMap<NodeId, u64> = BTreeMap::new();
    let mut in_flight = JoinSet::new();
    let mut rows = 0;
    let shipped = async {
        while let Some(segment) = receiver.recv().await {
            let segment = segment?;
            rows += segment.rows;
            let request = NodeRequest::StageSegment {
                txn,
                coordinator,
                table_id: definition.id,
                partition: segment.partition,
                placement_version: definition.placement_version(segment.partition),
                rows: segment.rows,
                crc32: segment.sum.crc32,
                block_crc32: segment.sum.blocks.clone(),
            };
            let message = foam_rpc::frame::encode(&request, &segment.data)?;
            for node in definition.write_targets(segment.partition, &catalog.nodes)? {
                while in_flight.len() >= SEGMENTS_IN_FLIGHT {
                    join_next(&mut in_flight).await?;
                }
                *participants.entry(node).or_default() += segment.rows;
                let client = clients.get(node, &catalog.node(node)?.node_addr)?;
                let (request, message) = (request.clone(), message.clone());
                in_flight.spawn(async move { client.call_encoded(&request, message).await.map(|_| ()) });
            }
        }
        while !in_flight.is_empty() {
            join_next(&mut in_flight).await?;
        }
        Ok::<_, FoamError>(())
    }
    .await;
    let coordinator_client = clients.get(coordinator, &catalog.node(coordinator)?.node_addr)?;
    if let Err(error) = shipped {
        drop(receiver);
        in_flight.abort_all();
        let participants = participants.keys().copied().collect();
        let _ = coordinator_client.call(&NodeRequest::AbortTransaction { txn, participants }, &[]).await;
        return Err(error);
    }
    for generator in generators {
        generator.await.map_err(|e| FoamError::internal(e.to_string()))?;
    }
    let participants = participants.into_iter().collect();
    coordinator_client.call(&NodeRequest::CommitTransaction { txn, participants }, &[]).await?;
    Ok(rows)
}
