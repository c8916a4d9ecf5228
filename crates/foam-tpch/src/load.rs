//! `foam tpch load`: creates the TPC-H tables through SQL, then generates each
//! table in parallel parts. Each generator thread checks its rows as any write
//! is checked, splits them by partition and encodes them into that
//! partition's segment (a Parquet file), which streams to every replica of its
//! partition while it is encoded, in pieces (`StageSegment`, a Flight DoPut):
//! each row is encoded once however many copies it has, the loader holds a
//! few pieces per partition rather than whole files, and each node writes the
//! pieces to disk as they come, then checks and stages the whole file. One
//! node then commits the table's load with two-phase commit, so each table
//! appears whole or not at all, while the loader generates the next table.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use foam_catalog::Catalog;
use foam_common::{FoamError, FoamResult, NodeId, PartitionId, TxnId};
use foam_query::write::{conform_rows, split_by_partition};
use foam_rpc::{ClusterSecret, NodeClient, NodeClients, NodeRequest, NodeResponse, SegmentPart, SegmentTrailer};
use foam_storage::segment::SegmentBuilder;
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use tokio::sync::mpsc;

use crate::schema::{ALL_TABLES, TpchTable, conform};

/// Rows a segment built by the loader holds at most; a partition with more
/// gets several segments.
pub(crate) const LOAD_SEGMENT_ROWS_MAX: u64 = 1 << 20;

/// Pieces of one segment (`SEGMENT_CHUNK_BYTES` each) waiting to go to its
/// replicas when the generators outrun the network.
const SEGMENT_PIECES_AHEAD: usize = 4;

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
        Some(db) => match foam_common::SqlState::from_code(db.code().code()) {
            Some(sqlstate) => FoamError::Remote { sqlstate, message: db.message().to_string() },
            None => FoamError::internal(format!("[{}] {}", db.code().code(), db.message())),
        },
        None => FoamError::internal(error.to_string()),
    }
}

/// The first column of a simple query's first row, as a number (a count).
pub fn first_number(rows: &[tokio_postgres::SimpleQueryMessage]) -> Option<u64> {
    rows.iter().find_map(|m| match m {
        tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).and_then(|v| v.parse::<u64>().ok()),
        _ => None,
    })
}

/// Rows in `lineitem`, or None unless all eight TPC-H tables exist (a load
/// creates all eight before it fills any). The loader fills lineitem last,
/// in one transaction, so rows there mean every table committed.
async fn lineitem_rows(client: &tokio_postgres::Client) -> FoamResult<Option<u64>> {
    let names: Vec<String> = ALL_TABLES.iter().map(|t| format!("'{}'", t.name())).collect();
    let exists = client
        .simple_query(&format!(
            "SELECT count(DISTINCT table_name) FROM information_schema.tables WHERE table_name IN ({})",
            names.join(", ")
        ))
        .await
        .map_err(sql_error)?;
    if first_number(&exists) != Some(ALL_TABLES.len() as u64) {
        return Ok(None);
    }
    Ok(first_number(&client.simple_query("SELECT count(*) FROM lineitem").await.map_err(sql_error)?))
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
/// its last commit) drops them first. The segments go to the nodes' ports
/// with the cluster's `secret` (`None` for a cluster started `--insecure`).
pub async fn load(url: &str, secret: Option<&ClusterSecret>, scale_factor: f64, show_progress: bool) -> FoamResult<LoadReport> {
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
    let loaded = fill_tables(&client, secret, scale_factor, show_progress, text_pool).await;
    if loaded.is_err() {
        let _ = drop_tables(&client, &ALL_TABLES).await;
    }
    loaded
}

/// Generates every table's rows, one table after another, each committing
/// while the next is generated.
async fn fill_tables(
    client: &tokio_postgres::Client,
    secret: Option<&ClusterSecret>,
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
    // Segments go straight to the nodes' ports, which ask for the cluster secret.
    let clients = Arc::new(NodeClients::new(secret.cloned()));
    let catalog = fetch_catalog(&clients, &node_addrs, first_id, first_addr).await?;
    let coordinator = first_id;
    text_pool.await.map_err(|e| FoamError::internal(e.to_string()))?;

    let workers = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2);
    let progress = MultiProgress::new();
    if !show_progress {
        progress.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    let definitions = ALL_TABLES.iter().map(|table| catalog.table(table.name()).cloned()).collect::<FoamResult<Vec<_>>>()?;
    let started = Instant::now();
    let mut report = Vec::new();
    // Each table commits in the background while the next is generated; the
    // last (lineitem) commits only after all the others did, so rows in it
    // mean the whole load committed (see `lineitem_rows`).
    let mut committing = Vec::new();
    for (index, (table, definition)) in ALL_TABLES.into_iter().zip(&definitions).enumerate() {
        let bar = progress.add(ProgressBar::new_spinner());
        bar.set_style(
            ProgressStyle::with_template("{prefix:>9} {spinner} {human_pos:>12} rows {per_sec:>16} {elapsed:>4} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        bar.set_prefix(table.name());
        bar.enable_steady_tick(Duration::from_millis(200));
        let table_started = Instant::now();
        let generated = generate_table(table, scale_factor, workers, definition, &catalog, &clients, coordinator, &bar).await;
        if generated.generated.is_ok() && index + 1 < ALL_TABLES.len() {
            bar.set_message("committing");
            committing.push(Committing { commit: tokio::spawn(generated.commit()), table: table.name(), bar, started: table_started });
            continue;
        }
        // The last table, or one that failed to generate (its commit aborts
        // it and returns why): the tables before it settle first.
        let generated = match settle(&mut committing, &mut report).await {
            Ok(()) => generated,
            Err(error) => generated.fail(error),
        };
        let rows = generated.commit().await?;
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

/// A segment being encoded for one partition, and where its pieces go.
struct OpenSegment {
    builder: SegmentBuilder,
    parts: mpsc::Sender<SegmentPart>,
}

/// What one segment added to the load, once every replica staged it.
struct ShippedSegment {
    rows: u64,
    nodes: Vec<NodeId>,
}

/// How shipping one segment ended, when no replica failed.
enum Shipped {
    /// Every replica checked and staged it.
    Staged(ShippedSegment),
    /// The loader stopped before the segment's trailer, so its replicas
    /// staged nothing; what stopped the loader says why.
    Abandoned,
}

type Shipper = tokio::task::JoinHandle<FoamResult<Shipped>>;

/// Where a table's segments go: the replicas of each partition, in `txn`.
struct Shipping {
    runtime: tokio::runtime::Handle,
    clients: Arc<NodeClients>,
    catalog: Arc<Catalog>,
    definition: foam_catalog::TableDef,
    txn: TxnId,
    coordinator: NodeId,
}

impl Shipping {
    /// Opens a segment stream of `partition` to each of its replicas; returns
    /// the sender of its parts and the task that forwards them.
    fn open(&self, partition: PartitionId) -> FoamResult<(mpsc::Sender<SegmentPart>, Shipper)> {
        let request = NodeRequest::StageSegment {
            txn: self.txn,
            coordinator: self.coordinator,
            table_id: self.definition.id,
            partition,
            placement_version: self.definition.placement_version(partition),
        };
        let replicas = self
            .definition
            .write_targets(partition, &self.catalog.nodes)?
            .into_iter()
            .map(|node| Ok((node, self.clients.get(node, &self.catalog.node(node)?.node_addr)?)))
            .collect::<FoamResult<Vec<_>>>()?;
        let (parts, received) = mpsc::channel(SEGMENT_PIECES_AHEAD);
        Ok((parts, self.runtime.spawn(ship_segment(request, replicas, received))))
    }
}

/// Forwards a segment's parts, as they come, to a stream to each replica;
/// returns once every replica has checked and staged the whole file, or
/// how it ended if not (see [`shipping_ended`]).
async fn ship_segment(
    request: NodeRequest,
    replicas: Vec<(NodeId, NodeClient)>,
    mut parts: mpsc::Receiver<SegmentPart>,
) -> FoamResult<Shipped> {
    let mut streams = Vec::new();
    let mut calls = Vec::new();
    for (_, client) in &replicas {
        let (stream, pieces) = mpsc::channel::<SegmentPart>(1);
        let (client, request) = (client.clone(), request.clone());
        calls.push(tokio::spawn(async move { client.put_segment(&request, tokio_stream::wrappers::ReceiverStream::new(pieces)).await }));
        streams.push(stream);
    }
    let mut trailer_rows = None;
    let mut replica_ended = false;
    'forward: while let Some(part) = parts.recv().await {
        if let SegmentPart::End(trailer) = &part {
            trailer_rows = Some(trailer.rows);
        }
        for stream in &streams {
            // A replica's stream closes when its call ended; the call says why.
            if stream.send(part.clone()).await.is_err() {
                replica_ended = true;
                break 'forward;
            }
        }
    }
    // Ends the other replicas' streams too: without the trailer, they stage nothing.
    drop(streams);
    drop(parts);
    let failed = first_failure(calls).await.err();
    let nodes = replicas.into_iter().map(|(node, _)| node).collect();
    shipping_ended(trailer_rows, replica_ended, failed, nodes)
}

/// What a spawned task returned; its panic or cancellation as an error.
async fn joined<T>(task: tokio::task::JoinHandle<FoamResult<T>>) -> FoamResult<T> {
    task.await.map_err(|e| FoamError::internal(e.to_string())).and_then(|r| r)
}

/// Waits for every task, then returns the first error among them in their
/// order, if any.
async fn first_failure<T>(tasks: Vec<tokio::task::JoinHandle<FoamResult<T>>>) -> FoamResult<()> {
    let mut outcome = Ok(());
    for task in tasks {
        if let Err(error) = joined(task).await
            && outcome.is_ok()
        {
            outcome = Err(error);
        }
    }
    outcome
}

/// How a segment's shipping ended, from the rows its trailer gave (none if
/// the loader stopped before it), whether a replica's call ended while parts
/// still came, and the first replica's error. A replica's error is the cause
/// when its call ended on its own or it refused the whole segment; a replica
/// that refused a segment cut short by the loader only says the trailer is
/// missing, so that segment is abandoned and the loader's error says why.
fn shipping_ended(trailer_rows: Option<u64>, replica_ended: bool, failed: Option<FoamError>, nodes: Vec<NodeId>) -> FoamResult<Shipped> {
    match (trailer_rows, failed) {
        (Some(rows), None) => Ok(Shipped::Staged(ShippedSegment { rows, nodes })),
        (Some(_), Some(error)) => Err(error),
        (None, Some(error)) if replica_ended => Err(error),
        (None, _) => Ok(Shipped::Abandoned),
    }
}

/// What a table's load comes to: its staged segments, or the error that
/// says why it failed. A replica's error comes first (a generator whose
/// segment stream closed failed only because a replica's call ended), then
/// a generator's; a segment abandoned although every generator finished is
/// a bug of the loader's.
fn load_outcome(generated: FoamResult<()>, shipped: Vec<FoamResult<Shipped>>) -> FoamResult<Vec<ShippedSegment>> {
    let mut segments = Vec::new();
    let mut abandoned = false;
    for outcome in shipped {
        match outcome? {
            Shipped::Staged(segment) => segments.push(segment),
            Shipped::Abandoned => abandoned = true,
        }
    }
    generated?;
    if abandoned {
        return Err(FoamError::internal("a segment was left unfinished although every generator finished"));
    }
    Ok(segments)
}

/// The segments being built, one slot per partition, shared by the generator
/// threads: whichever thread has rows of a partition appends them.
struct SegmentSlots {
    schema: SchemaRef,
    slots: Vec<Mutex<Option<OpenSegment>>>,
    shipping: Shipping,
    /// The task shipping each segment opened so far.
    shippers: Mutex<Vec<Shipper>>,
}

impl SegmentSlots {
    /// Appends one partition's rows, opening its segment on its first rows
    /// and finishing it once it holds [`LOAD_SEGMENT_ROWS_MAX`] rows.
    fn append(&self, partition: PartitionId, rows: &RecordBatch) -> FoamResult<()> {
        let slot = self.slots.get(partition as usize).ok_or_else(|| FoamError::internal(format!("no partition {partition}")))?;
        let mut slot = slot.lock().unwrap_or_else(|p| p.into_inner());
        let open = match slot.as_mut() {
            Some(open) => open,
            None => slot.insert(self.open(partition, rows)?),
        };
        open.builder.write(rows)?;
        if open.builder.rows() >= LOAD_SEGMENT_ROWS_MAX
            && let Some(full) = slot.take()
        {
            self.finish(full)?;
        }
        Ok(())
    }

    fn open(&self, partition: PartitionId, sample: &RecordBatch) -> FoamResult<OpenSegment> {
        let (parts, shipper) = self.shipping.open(partition)?;
        self.shippers.lock().unwrap_or_else(|p| p.into_inner()).push(shipper);
        let pieces = parts.clone();
        let builder = SegmentBuilder::new(&self.schema, sample, move |piece| {
            pieces.blocking_send(SegmentPart::Chunk(piece)).map_err(|_| std::io::Error::other("the segment's stream to a node closed"))
        })?;
        Ok(OpenSegment { builder, parts })
    }

    /// Ships the rest of a segment and its trailer.
    fn finish(&self, open: OpenSegment) -> FoamResult<()> {
        let rows = open.builder.rows();
        let sum = open.builder.finish()?;
        let trailer = SegmentTrailer { rows, crc32: sum.crc32, block_crc32: sum.blocks };
        open.parts.blocking_send(SegmentPart::End(trailer)).map_err(|_| FoamError::internal("the segment's stream to a node closed"))
    }
}

/// Generates a table in parts on `workers` threads; each thread takes the
/// next part not yet taken, checks its rows as any write of the table is
/// checked, splits them by partition and appends them to the partitions'
/// segments. One thread a core rather than one a part: the extra threads
/// gave no more parallelism, and each was another allocator heap of batches
/// and encoder buffers that the kernel had to zero on first touch (SF1 into
/// 4 local nodes, with the parallel finish below, three interleaved pairs:
/// the load 0.43–0.57 s shorter; the loader's system time 1.4–1.5 s against
/// 3.2–3.6 s, though 2.5–2.8 s in a later batch: it moves with the host).
/// After a failed part the threads take no more.
fn generate_segments(
    table: TpchTable,
    scale_factor: f64,
    workers: usize,
    slots: &Arc<SegmentSlots>,
    bar: &ProgressBar,
) -> Vec<tokio::task::JoinHandle<FoamResult<()>>> {
    let parts = table.parts(scale_factor, workers);
    let next_part = Arc::new(AtomicI32::new(0));
    let failed = Arc::new(AtomicBool::new(false));
    (0..workers.clamp(1, parts.max(1) as usize))
        .map(|_| {
            let (slots, next_part, failed, bar) = (slots.clone(), next_part.clone(), failed.clone(), bar.clone());
            tokio::task::spawn_blocking(move || {
                let generated = generate_parts(table, scale_factor, parts, &next_part, &failed, &slots, &bar);
                if generated.is_err() {
                    failed.store(true, Ordering::Release);
                }
                generated
            })
        })
        .collect()
}

/// One generator thread's work: parts taken from `next_part` until none is
/// left or another thread failed.
fn generate_parts(
    table: TpchTable,
    scale_factor: f64,
    parts: i32,
    next_part: &AtomicI32,
    failed: &AtomicBool,
    slots: &SegmentSlots,
    bar: &ProgressBar,
) -> FoamResult<()> {
    let definition = &slots.shipping.definition;
    loop {
        let part = next_part.fetch_add(1, Ordering::AcqRel);
        if part >= parts || failed.load(Ordering::Acquire) {
            return Ok(());
        }
        for batch in table.generate(scale_factor, part, parts) {
            let batch = batch.and_then(|b| conform(&b, &slots.schema)).map_err(|e| FoamError::internal(format!("TPC-H batch: {e}")))?;
            let batch = conform_rows(definition, &slots.schema, batch)?;
            bar.inc(batch.num_rows() as u64);
            for (partition, rows) in split_by_partition(definition, &batch)? {
                slots.append(partition, &rows)?;
            }
        }
    }
}

/// Finishes what every partition's segment has left (its last row group and
/// footer) on `workers` threads, each taking the next segment not yet taken:
/// on one thread, this was the tail of every table's load with the other
/// cores idle.
async fn finish_segments(slots: &Arc<SegmentSlots>, workers: usize) -> FoamResult<()> {
    let next_slot = Arc::new(AtomicUsize::new(0));
    let finishers: Vec<_> = (0..workers.clamp(1, slots.slots.len().max(1)))
        .map(|_| {
            let (slots, next_slot) = (slots.clone(), next_slot.clone());
            tokio::task::spawn_blocking(move || {
                while let Some(slot) = slots.slots.get(next_slot.fetch_add(1, Ordering::AcqRel)) {
                    let open = slot.lock().unwrap_or_else(|p| p.into_inner()).take();
                    if let Some(open) = open {
                        slots.finish(open)?;
                    }
                }
                Ok::<(), FoamError>(())
            })
        })
        .collect();
    first_failure(finishers).await
}

/// A table whose rows are generated and whose segments are on their way to
/// its replicas, in transaction `txn`: what committing or aborting it takes.
struct GeneratedTable {
    txn: TxnId,
    /// How generation ended: an error aborts the table instead of committing it.
    generated: FoamResult<()>,
    shippers: Vec<Shipper>,
    definition: foam_catalog::TableDef,
    catalog: Arc<Catalog>,
    clients: Arc<NodeClients>,
    coordinator: NodeId,
}

impl GeneratedTable {
    /// Aborts the table instead of committing it, for `error`.
    fn fail(mut self, error: FoamError) -> Self {
        if self.generated.is_ok() {
            self.generated = Err(error);
        }
        self
    }

    /// Waits until every replica staged its segments, then commits the
    /// table's load with two-phase commit; or aborts it on every replica that
    /// may have staged some of it, and returns why. Returns the rows loaded.
    async fn commit(self) -> FoamResult<u64> {
        let mut shipped = Vec::new();
        for shipper in self.shippers {
            shipped.push(joined(shipper).await);
        }
        let outcome = load_outcome(self.generated, shipped);
        let coordinator_client = self.clients.get(self.coordinator, &self.catalog.node(self.coordinator)?.node_addr)?;
        let segments = match outcome {
            Ok(segments) => segments,
            Err(error) => {
                // Every replica of the table may have staged some of it.
                let participants: BTreeSet<NodeId> = (0..self.definition.partition_count())
                    .filter_map(|p| self.definition.write_targets(p, &self.catalog.nodes).ok())
                    .flatten()
                    .collect();
                let abort = NodeRequest::AbortTransaction { txn: self.txn, participants: participants.into_iter().collect() };
                let _ = coordinator_client.call(&abort, &[]).await;
                return Err(error);
            }
        };
        let mut participants: BTreeMap<NodeId, u64> = BTreeMap::new();
        let mut rows = 0;
        for segment in segments {
            rows += segment.rows;
            segment.nodes.iter().for_each(|node| *participants.entry(*node).or_default() += segment.rows);
        }
        let participants: Vec<(NodeId, u64)> = participants.into_iter().collect();
        coordinator_client.call(&NodeRequest::CommitTransaction { txn: self.txn, participants }, &[]).await?;
        Ok(rows)
    }
}

/// Generates a table into segments shipped to its replicas in a new
/// transaction, and returns once every row is encoded: the segments' last
/// pieces may still be on their way.
#[allow(clippy::too_many_arguments)]
async fn generate_table(
    table: TpchTable,
    scale_factor: f64,
    workers: usize,
    definition: &foam_catalog::TableDef,
    catalog: &Arc<Catalog>,
    clients: &Arc<NodeClients>,
    coordinator: NodeId,
    bar: &ProgressBar,
) -> GeneratedTable {
    let txn: TxnId = uuid::Uuid::new_v4().as_u128();
    let slots = Arc::new(SegmentSlots {
        schema: definition.arrow_schema(),
        slots: (0..definition.partition_count()).map(|_| Mutex::new(None)).collect(),
        shipping: Shipping {
            runtime: tokio::runtime::Handle::current(),
            clients: clients.clone(),
            catalog: catalog.clone(),
            definition: definition.clone(),
            txn,
            coordinator,
        },
        shippers: Mutex::new(Vec::new()),
    });
    let mut generated = first_failure(generate_segments(table, scale_factor, workers, &slots, bar)).await;
    if generated.is_ok() {
        generated = finish_segments(&slots, workers).await;
    }
    let shippers = std::mem::take(&mut *slots.shippers.lock().unwrap_or_else(|p| p.into_inner()));
    // Segments a failed generator left open close with the slots: their
    // replicas stage nothing of them.
    drop(slots);
    GeneratedTable {
        txn,
        generated,
        shippers,
        definition: definition.clone(),
        catalog: catalog.clone(),
        clients: clients.clone(),
        coordinator,
    }
}

/// A table committing in the background while the next one is generated.
struct Committing {
    commit: tokio::task::JoinHandle<FoamResult<u64>>,
    table: &'static str,
    bar: ProgressBar,
    started: Instant,
}

/// Waits for every table still committing, in load order, adding each one
/// that committed to `report`; returns the first error, after all of them
/// ended (so none still commits when a failed load drops its tables).
async fn settle(committing: &mut Vec<Committing>, report: &mut Vec<TableLoad>) -> FoamResult<()> {
    let mut settled = Ok(());
    for pending in committing.drain(..) {
        match joined(pending.commit).await {
            Ok(rows) => {
                pending.bar.finish_with_message("committed");
                report.push(TableLoad { table: pending.table, rows, elapsed: pending.started.elapsed() });
            }
            Err(error) => {
                pending.bar.abandon_with_message("failed");
                if settled.is_ok() {
                    settled = Err(error);
                }
            }
        }
    }
    settled
}

#[cfg(test)]
mod tests {
    use super::*;

    fn staged(rows: u64) -> FoamResult<Shipped> {
        Ok(Shipped::Staged(ShippedSegment { rows, nodes: vec![1, 2] }))
    }

    fn message(result: FoamResult<impl Sized>) -> String {
        result.err().map(|e| e.to_string()).unwrap_or_else(|| "no error".into())
    }

    #[test]
    fn a_replica_that_failed_on_its_own_or_on_the_whole_segment_says_why() {
        let refused = || Some(FoamError::internal("node 2 refused the segment"));
        // Its call ended while parts still came: the generator's "stream closed" follows from it.
        assert!(message(shipping_ended(None, true, refused(), vec![1, 2])).contains("node 2 refused"));
        // It refused the whole segment, trailer and all.
        assert!(message(shipping_ended(Some(10), false, refused(), vec![1, 2])).contains("node 2 refused"));
        // The loader stopped before the trailer: the replica only says the trailer is missing.
        assert!(matches!(shipping_ended(None, false, refused(), vec![1, 2]), Ok(Shipped::Abandoned)));
        assert!(matches!(shipping_ended(Some(10), false, None, vec![1, 2]), Ok(Shipped::Staged(ShippedSegment { rows: 10, .. }))));
    }

    #[test]
    fn a_replica_error_comes_before_the_generator_error_it_caused() {
        let closed = || Err(FoamError::internal("the segment's stream to a node closed"));
        let refused = || Err(FoamError::internal("node 2 refused the segment"));
        let outcome = load_outcome(closed(), vec![staged(5), refused(), Ok(Shipped::Abandoned)]);
        assert!(message(outcome).contains("node 2 refused"));
        // A generator that failed on its own leaves abandoned segments: its error says why.
        let outcome = load_outcome(Err(FoamError::internal("TPC-H batch: bad row")), vec![staged(5), Ok(Shipped::Abandoned)]);
        assert!(message(outcome).contains("bad row"));
        // Every generator finished, yet a segment was not: a loader bug, not a success.
        assert!(message(load_outcome(Ok(()), vec![staged(5), Ok(Shipped::Abandoned)])).contains("left unfinished"));
        let segments = load_outcome(Ok(()), vec![staged(5), staged(7)]).unwrap();
        assert_eq!(segments.iter().map(|s| s.rows).sum::<u64>(), 12);
    }

    #[tokio::test]
    async fn settling_waits_for_every_commit_and_reports_the_first_failure() {
        let finished = Arc::new(AtomicUsize::new(0));
        let commit = |table: &'static str, delay_ms: u64, result: FoamResult<u64>| {
            let finished = finished.clone();
            Committing {
                commit: tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(delay_ms)).await;
                    finished.fetch_add(1, Ordering::AcqRel);
                    result
                }),
                table,
                bar: ProgressBar::hidden(),
                started: Instant::now(),
            }
        };
        let mut committing = vec![
            commit("part", 30, Ok(5)),
            commit("supplier", 0, Err(FoamError::internal("node 2 refused the commit"))),
            commit("partsupp", 60, Err(FoamError::internal("node 3 refused the commit"))),
            commit("customer", 90, Ok(7)),
        ];
        let mut report = Vec::new();
        let settled = settle(&mut committing, &mut report).await;
        // The first failure in load order, once every commit has ended.
        assert!(message(settled).contains("node 2 refused"));
        assert_eq!(finished.load(Ordering::Acquire), 4);
        assert!(committing.is_empty());
        let committed: Vec<(&str, u64)> = report.iter().map(|t| (t.table, t.rows)).collect();
        assert_eq!(committed, [("part", 5), ("customer", 7)]);
        assert!(settle(&mut committing, &mut report).await.is_ok());
    }
}
