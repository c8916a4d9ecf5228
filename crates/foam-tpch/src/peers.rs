//! The engines FoamDB is measured against, on the same generated data:
//! plain single-process DataFusion over Parquet files, and datafusion-distributed
//! with its default planner over the same files with N in-process workers on
//! 127.0.0.1 (DuckDB runs from `bench/duckdb_tpch.py`). Also the baseline of the
//! load benchmark: how fast tpchgen alone generates the data in memory, and
//! how fast it generates and encodes it into segments.
//!
//! ```text
//!   tpchgen ─▶ Parquet files (DIR/<table>/part-<i>.parquet, FoamDB's column types
//!              and page codec, so engines are compared, not codecs)
//!                 ├─▶ DataFusion, one process
//!                 ├─▶ datafusion-distributed: coordinator + N workers (gRPC on 127.0.0.1),
//!                 │     bytes between workers counted like FoamDB counts them
//!                 └─▶ DuckDB (Python)
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use async_trait::async_trait;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::SessionStateBuilder;
use datafusion::prelude::{ParquetReadOptions, SessionConfig, SessionContext};
use datafusion_distributed::{
    ChannelResolver, DistributedExt, SessionStateBuilderExt, Worker, WorkerChannel, WorkerQueryContext, WorkerResolver,
};
use foam_query::distributed::{ObservedChannel, StreamObserver};
use futures::StreamExt;
use url::Url;

use crate::schema::{ALL_TABLES, TpchTable, conform};

/// Rows per Parquet row group of the comparison files.
const PARQUET_ROW_GROUP_ROWS: usize = 1 << 20;

/// FoamDB's column types of `table` (its DDL planned by DataFusion).
pub async fn foam_schema(table: TpchTable) -> Result<SchemaRef> {
    let ctx = SessionContext::new();
    let create = table.create_sql().split(" DISTRIBUTED").next().unwrap_or_default();
    ctx.sql(create).await?.collect().await?;
    Ok(Arc::new(ctx.table(table.name()).await?.schema().as_arrow().clone()))
}

/// Writes every table at `scale_factor` as Parquet under `dir` (one file per
/// generator part, written in parallel) with FoamDB's segment codec, unless
/// `dir` already has them with that codec.
pub async fn write_parquet(scale_factor: f64, dir: &Path) -> Result<()> {
    let done = dir.join("complete");
    let codec = foam_storage::segment::CODEC.to_string();
    if std::fs::read_to_string(&done).is_ok_and(|written| written == codec) {
        return Ok(());
    }
    if dir.exists() {
        std::fs::remove_dir_all(dir)?;
    }
    let workers = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    for table in ALL_TABLES {
        let schema = foam_schema(table).await?;
        let table_dir = dir.join(table.name());
        std::fs::create_dir_all(&table_dir)?;
        let parts = table.parts(scale_factor, workers);
        let mut handles = Vec::new();
        for part in 0..parts {
            let (schema, path) = (schema.clone(), table_dir.join(format!("part-{part}.parquet")));
            handles.push(tokio::task::spawn_blocking(move || -> Result<()> {
                let file = std::fs::File::create(&path)?;
                let props = parquet::file::properties::WriterProperties::builder()
                    .set_max_row_group_row_count(Some(PARQUET_ROW_GROUP_ROWS))
                    .set_compression(foam_storage::segment::CODEC)
                    .build();
                let mut writer = parquet::arrow::ArrowWriter::try_new(file, schema.clone(), Some(props))?;
                for batch in table.generate(scale_factor, part, parts) {
                    writer.write(&conform(&batch?, &schema)?)?;
                }
                writer.close()?;
                Ok(())
            }));
        }
        for handle in handles {
            handle.await.map_err(|e| DataFusionError::External(Box::new(e)))??;
        }
    }
    std::fs::write(done, codec)?;
    Ok(())
}

/// What the load baseline does with each generated batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Generation {
    /// Drops it: tpchgen alone.
    Discard,
    /// Casts it to FoamDB's column types and encodes it into segments as the
    /// loader does, dropping the encoded pieces (no split by partition, no
    /// network, no disk): the least work any load that stores FoamDB's
    /// segments has to do.
    EncodeSegments,
}

/// Generates every table at `scale_factor` in memory, in the loader's parts
/// (all of them at once, a task each), and discards it (after encoding it, with
/// [`Generation::EncodeSegments`]): returns (rows, seconds), not counting the
/// one-time build of tpchgen's text pool (as the load's time does not).
pub async fn generate_in_memory(scale_factor: f64, what: Generation) -> Result<(u64, f64)> {
    let workers = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    // tpchgen builds its text pool once per process, before the first rows; the
    // loader's clock starts after it is built, so this clock does too.
    tokio::task::spawn_blocking(move || drop(TpchTable::Nation.generate(scale_factor, 0, 1)))
        .await
        .map_err(|e| DataFusionError::External(Box::new(e)))?;
    let mut schemas = BTreeMap::new();
    for table in ALL_TABLES {
        schemas.insert(table.name(), foam_schema(table).await?);
    }
    let started = Instant::now();
    let mut handles = Vec::new();
    for table in ALL_TABLES {
        let parts = table.parts(scale_factor, workers);
        for part in 0..parts {
            let schema = schemas[table.name()].clone();
            handles.push(tokio::task::spawn_blocking(move || -> Result<u64> {
                let mut rows = 0u64;
                let mut segment: Option<foam_storage::segment::SegmentBuilder> = None;
                for batch in table.generate(scale_factor, part, parts) {
                    let batch = batch?;
                    rows += batch.num_rows() as u64;
                    if what == Generation::Discard {
                        continue;
                    }
                    let batch = conform(&batch, &schema)?;
                    // Encoded as the loader encodes, its pieces dropped (nowhere to ship them).
                    let builder = match segment.as_mut() {
                        Some(builder) => builder,
                        None => segment.insert(foam_storage::segment::SegmentBuilder::new(&schema, &batch, |_| Ok(())).map_err(external)?),
                    };
                    builder.write(&batch).map_err(external)?;
                    if builder.rows() >= crate::load::LOAD_SEGMENT_ROWS_MAX {
                        segment.take().map(|full| full.finish()).transpose().map_err(external)?;
                    }
                }
                segment.map(|last| last.finish()).transpose().map_err(external)?;
                Ok(rows)
            }));
        }
    }
    let mut rows = 0;
    for handle in handles {
        rows += handle.await.map_err(|e| DataFusionError::External(Box::new(e)))??;
    }
    Ok((rows, started.elapsed().as_secs_f64()))
}

/// Registers the eight tables of `dir` in `ctx`.
pub async fn register_parquet(ctx: &SessionContext, dir: &Path) -> Result<()> {
    for table in ALL_TABLES {
        let path = dir.join(table.name());
        let path = format!("{}/", path.display());
        ctx.register_parquet(table.name(), &path, ParquetReadOptions::default()).await?;
    }
    Ok(())
}

/// Single-process DataFusion over the Parquet files.
pub async fn datafusion_context(dir: &Path) -> Result<SessionContext> {
    let ctx = SessionContext::new_with_config(SessionConfig::new());
    register_parquet(&ctx, dir).await?;
    Ok(ctx)
}

/// datafusion-distributed with its default planner: `workers` gRPC workers
/// in this process, each on its own 127.0.0.1 port, and a coordinating context.
pub struct DistributedPeer {
    pub ctx: SessionContext,
    /// Bytes (Arrow buffer sizes) each worker received from other workers.
    pub traffic: Arc<PeerBytes>,
    servers: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for DistributedPeer {
    fn drop(&mut self) {
        for server in &self.servers {
            server.abort();
        }
    }
}

/// Bytes and batches received over worker connections that cross between
/// two different workers (the coordinator counts as worker 0, as a FoamDB
/// coordinator is one of the nodes).
#[derive(Debug, Default)]
pub struct PeerBytes {
    counts: Mutex<(u64, u64)>,
}

impl PeerBytes {
    /// (batches, bytes) since the last call, then zeroes them.
    pub fn take(&self) -> (u64, u64) {
        std::mem::take(&mut *self.counts.lock().unwrap_or_else(|p| p.into_inner()))
    }

    fn add(&self, batch: &RecordBatch) {
        let mut counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        counts.0 += 1;
        counts.1 += batch.columns().iter().map(|c| c.to_data().get_slice_memory_size().unwrap_or(0) as u64).sum::<u64>();
    }
}

#[derive(Clone)]
struct Localhost {
    urls: Vec<Url>,
}

impl WorkerResolver for Localhost {
    fn get_urls(&self) -> Result<Vec<Url>> {
        Ok(self.urls.clone())
    }
}

/// Counts batches arriving from workers other than `me`.
#[derive(Clone)]
struct CountingResolver {
    inner: datafusion_distributed::grpc::DefaultChannelResolver,
    me: Url,
    traffic: Arc<PeerBytes>,
}

#[async_trait]
impl ChannelResolver for CountingResolver {
    async fn get_worker_client_for_url(&self, url: &Url) -> Result<Box<dyn WorkerChannel>> {
        let inner = self.inner.get_worker_client_for_url(url).await?;
        if *url == self.me {
            return Ok(inner);
        }
        let traffic = self.traffic.clone();
        let observe: StreamObserver = Arc::new(move |stream| {
            let traffic = traffic.clone();
            stream
                .map(move |batch| {
                    if let Ok(batch) = &batch {
                        traffic.add(batch);
                    }
                    batch
                })
                .boxed()
        });
        Ok(Box::new(ObservedChannel { inner, observe }))
    }
}

/// Starts `workers` datafusion-distributed workers and a coordinating context
/// over the Parquet files in `dir`.
pub async fn distributed_peer(dir: &Path, workers: usize) -> Result<DistributedPeer> {
    let mut listeners = Vec::new();
    let mut urls = Vec::new();
    for _ in 0..workers.max(1) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        urls.push(Url::parse(&format!("http://{}", listener.local_addr()?)).map_err(|e| DataFusionError::External(Box::new(e)))?);
        listeners.push(listener);
    }
    let traffic = Arc::new(PeerBytes::default());
    let channels = datafusion_distributed::grpc::DefaultChannelResolver::default();
    let mut servers = Vec::new();
    for (listener, url) in listeners.into_iter().zip(&urls) {
        let resolver = CountingResolver { inner: channels.clone(), me: url.clone(), traffic: traffic.clone() };
        let worker = Worker::from_session_builder(move |ctx: WorkerQueryContext| {
            let resolver = resolver.clone();
            async move { Ok(ctx.builder.with_distributed_channel_resolver(resolver).build()) }
        });
        let server = tonic::transport::Server::builder()
            .add_service(worker.into_worker_server())
            .serve_with_incoming(foam_rpc::server::nodelay_incoming(listener));
        servers.push(tokio::spawn(async move {
            if let Err(error) = server.await {
                tracing::warn!(%error, "datafusion-distributed worker stopped");
            }
        }));
    }
    let resolver = CountingResolver { inner: channels, me: urls[0].clone(), traffic: traffic.clone() };
    let state = SessionStateBuilder::new()
        .with_default_features()
        .with_distributed_worker_resolver(Localhost { urls })
        .with_distributed_planner()
        .with_distributed_channel_resolver(resolver)
        .build();
    let ctx = SessionContext::from(state);
    register_parquet(&ctx, dir).await?;
    Ok(DistributedPeer { ctx, traffic, servers })
}

/// Parquet bytes on disk per table, for the report.
pub fn parquet_sizes(dir: &Path) -> BTreeMap<String, u64> {
    ALL_TABLES
        .iter()
        .map(|t| {
            let table_dir: PathBuf = dir.join(t.name());
            let bytes = std::fs::read_dir(&table_dir)
                .map(|entries| entries.filter_map(|e| e.ok()?.metadata().ok()).map(|m| m.len()).sum())
                .unwrap_or(0);
            (t.name().to_string(), bytes)
        })
        .collect()
}

/// A storage error inside DataFusion's error type.
fn external(error: foam_storage::StorageError) -> datafusion::error::DataFusionError {
    datafusion::error::DataFusionError::External(Box::new(error))
}
