//! Partition-aware distributed planning on top of datafusion-distributed.
//!
//! datafusion-distributed cuts a plan into stages and spreads each stage's tasks
//! over workers round-robin. FoamDB's handlers make a stage that scans FoamDB
//! partitions run one task per owner node, each task reading exactly the
//! partitions its node stores, and route every task to that node:
//!
//! ```text
//!   FoamScanExec [p0..p11]                    (planned on the coordinator)
//!        │ desired tasks = owner nodes (3)
//!        ▼ scale up
//!   DistributedLeafExec ┬ variant 0: p0,p3,p6,p9   home node 1 ─▶ routed to node 1
//!                       ├ variant 1: p1,p4,p7,p10  home node 2 ─▶ routed to node 2
//!                       └ variant 2: p2,p5,p8,p11  home node 3 ─▶ routed to node 3
//! ```
//! A scan of a replicated table runs as a single task (the copy on whichever
//! node runs it), which keeps every join with it correct whatever its type.

pub mod channels;
pub mod codec;

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::SessionStateBuilder;
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::SessionConfig;
use datafusion::execution::TaskContext;
use datafusion::physical_plan::metrics::ExecutionPlanMetricsSet;
use arrow::ipc::CompressionType;
use arrow::record_batch::RecordBatch;
use datafusion_distributed::grpc::create_worker_client;
use datafusion_distributed::{
    ChannelResolver, CoordinatorToWorkerMsg, DesiredTaskCountEvent, DesiredTaskCountEventResponse, DesiredTaskCountHandler,
    DistributedExt, DistributedLeafExec, ExecuteTaskRequest, GetWorkerInfoRequest, GetWorkerInfoResponse, RouteTasksEvent,
    RouteTasksEventResponse, ScaleUpLeafNodeEvent, ScaleUpLeafNodeEventResponse, SessionStateBuilderExt, SetPlanRequest, Worker,
    WorkerChannel, WorkerQueryContext, WorkerResolver, WorkerToCoordinatorMsg,
};
use foam_common::NodeId;
use foam_common::limits::{SCAN_ROWS_PER_TASK, WORKER_THREADS_UNKNOWN, default_partition_count};
use futures::StreamExt;
use futures::stream::BoxStream;
use tonic::codegen::http::HeaderMap;
use url::Url;

use crate::distributed::codec::FoamCodec;
use crate::context::NodeContext;
use crate::options::FoamOptions;
use crate::exec::scan::{FoamScanExec, PartitionRead};

/// The worker URL of a node: its node address, where the worker service is mounted.
pub fn worker_url(node_addr: &str) -> Result<Url> {
    Url::parse(&format!("http://{node_addr}"))
        .map_err(|e| DataFusionError::Internal(format!("bad node address {node_addr}: {e}")))
}

/// Every node of the cluster is a worker.
struct FoamWorkerResolver {
    node: Arc<NodeContext>,
}

impl WorkerResolver for FoamWorkerResolver {
    fn get_urls(&self) -> Result<Vec<Url>> {
        let catalog = self.node.catalog.current();
        catalog.nodes.values().map(|n| worker_url(&n.node_addr)).collect()
    }
}

/// Distinct owner nodes of the partitions a scan reads.
fn owners_of(scan: &FoamScanExec) -> Vec<NodeId> {
    let mut owners: Vec<NodeId> = scan.reads().filter_map(|r| r.owner).collect();
    owners.sort_unstable();
    owners.dedup();
    owners
}

struct DesiredTasks;

#[async_trait]
impl DesiredTaskCountHandler for DesiredTasks {
    async fn handle(&self, event: DesiredTaskCountEvent<'_>) -> Option<Result<DesiredTaskCountEventResponse>> {
        let scan = event.plan.downcast_ref::<FoamScanExec>()?;
        let owners = owners_of(scan);
        // A replicated table's copy must be read by exactly one task: the
        // whole stage stays one task, which keeps every join with it correct.
        Some(Ok(if owners.is_empty() || scan.spec().replicated {
            DesiredTaskCountEventResponse::maximum(1)
        } else {
            // One task per owner for a large scan; fewer for a small one
            // (tasks then read several owners' partitions, some remotely).
            let per_task = event
                .session_config
                .options()
                .extensions
                .get::<FoamOptions>()
                .map(|o| o.scan_rows_per_task)
                .unwrap_or(SCAN_ROWS_PER_TASK)
                .max(1);
            let wanted = match scan.spec().estimated_rows {
                Some(rows) => rows.div_ceil(per_task).max(1) as usize,
                None => owners.len(),
            };
            DesiredTaskCountEventResponse::desired(wanted.min(owners.len()))
        }))
    }
}

/// Splits a scan into one variant per task: task `i` reads the partitions of
/// the `i`-th owner node. With fewer tasks than owners a task reads several
/// owners' partitions (some remotely); surplus tasks read nothing.
///
/// Every variant keeps the scan's partition numbering (group `p` is FoamDB
/// partition `p`, empty in the tasks that do not read it), so two scans with
/// the same layout in one stage give each task the same partitions at the
/// same positions: a co-located join pairs partition `p` with partition `p`.
/// A regrouped scan (`regroup.rs`) keeps its groups instead, each filtered
/// to the task's partitions.
fn scale_up(event: ScaleUpLeafNodeEvent) -> Option<Result<ScaleUpLeafNodeEventResponse>> {
    let scan = event.plan.downcast_ref::<FoamScanExec>()?;
    Some(scale_up_scan(scan, event.plan, event.task_count))
}

fn scale_up_scan(scan: &FoamScanExec, original: &Arc<dyn ExecutionPlan>, task_count: usize) -> Result<ScaleUpLeafNodeEventResponse> {
    let task_count = task_count.max(1);
    let owners = owners_of(scan);
    let groups = &scan.spec().groups;
    let mut variants: Vec<Arc<dyn ExecutionPlan>> = Vec::with_capacity(task_count);
    if owners.is_empty() || scan.spec().replicated {
        // A replicated table: every task would read the whole table, so only
        // the first task reads it, on the replica chosen at planning.
        for task in 0..task_count {
            let (home, groups) = if task == 0 {
                (owners.first().copied(), groups.clone())
            } else {
                (None, vec![Vec::new(); groups.len()])
            };
            variants.push(Arc::new(scan.with_groups(groups, home)?));
        }
    } else {
        // Task index = the owner's position among the layout's distinct
        // owners (pruned or not), the numbering routed shuffles use too.
        let index = crate::exec::route::owner_index(match &scan.spec().layout {
            Some(layout) => &layout.owners,
            None => &owners,
        });
        let task_of = |owner: NodeId| index(owner) as usize % task_count;
        for task in 0..task_count {
            let variant_groups: Vec<Vec<PartitionRead>> = groups
                .iter()
                .map(|group| group.iter().filter(|read| task_of(read.owner.unwrap_or_default()) == task).cloned().collect())
                .collect();
            // Home: the node holding the first partition this task reads.
            let home = variant_groups.iter().flatten().find_map(|read| read.owner);
            variants.push(Arc::new(scan.with_groups(variant_groups, home)?));
        }
    }
    let leaf = DistributedLeafExec::try_new(original.clone(), variants)?;
    Ok(ScaleUpLeafNodeEventResponse::new(Arc::new(leaf)))
}

/// Sends each task of a stage that scans FoamDB partitions to the node that
/// stores them; tasks without a home are spread over the remaining nodes.
fn route_tasks(event: RouteTasksEvent) -> Option<Result<RouteTasksEventResponse>> {
    let mut homes: Option<Vec<Option<NodeId>>> = None;
    let search = event.plan.apply(|node| {
        if let Some(leaf) = node.downcast_ref::<DistributedLeafExec>()
            && leaf.original().downcast_ref::<FoamScanExec>().is_some()
        {
            let found: Vec<Option<NodeId>> = leaf
                .variants()
                .iter()
                .map(|v| v.downcast_ref::<FoamScanExec>().and_then(|s| s.spec().home))
                .collect();
            if found.iter().any(|h| h.is_some()) {
                homes = Some(found);
                return Ok(TreeNodeRecursion::Stop);
            }
        }
        Ok(TreeNodeRecursion::Continue)
    });
    if let Err(error) = search {
        return Some(Err(error));
    }
    let homes = homes?;
    Some((|| {
        let node = NodeContext::from_config(event.task_ctx.session_config())?;
        let catalog = node.catalog.current();
        let all: Vec<Url> = catalog.nodes.values().map(|n| worker_url(&n.node_addr)).collect::<Result<_>>()?;
        if all.is_empty() {
            return Err(DataFusionError::Internal("the cluster has no nodes".into()));
        }
        let mut spare = 0usize;
        let mut urls = Vec::with_capacity(event.task_count);
        for task in 0..event.task_count {
            let home = homes.get(task).copied().flatten().and_then(|id| catalog.nodes.get(&id));
            match home {
                Some(info) => urls.push(worker_url(&info.node_addr)?),
                None => {
                    urls.push(all[spare % all.len()].clone());
                    spare += 1;
                }
            }
        }
        Ok(RouteTasksEventResponse::new(urls))
    })())
}

/// Opens worker connections through one cached channel per node (shared by
/// every session of this node) and counts what each connection to a peer
/// receives, for `foam_cluster_stats`.
#[derive(Clone)]
struct FoamChannelResolver {
    node: Arc<NodeContext>,
}

#[async_trait]
impl ChannelResolver for FoamChannelResolver {
    async fn get_worker_client_for_url(&self, url: &Url) -> Result<Box<dyn WorkerChannel>> {
        let catalog = self.node.catalog.current();
        // A node that left the catalog since the plan was made is still
        // connected to: it may serve its tasks until it stops.
        let node_id = catalog.nodes.values().find(|n| worker_url(&n.node_addr).is_ok_and(|u| u == *url)).map(|n| n.id);
        let channel = self.node.worker_channels.get(node_id, url).await?;
        let inner = create_worker_client(channel);
        let peer = node_id.filter(|id| *id != self.node.node_id);
        Ok(match peer {
            Some(peer) => {
                let traffic = self.node.traffic.clone();
                let observe: StreamObserver =
                    Arc::new(move |stream| foam_rpc::traffic::CountedStream::new(stream, traffic.clone(), peer).boxed());
                Box::new(ObservedChannel { inner, observe })
            }
            None => inner,
        })
    }
}

/// Wraps each result stream a worker connection returns.
pub type StreamObserver =
    Arc<dyn Fn(BoxStream<'static, Result<RecordBatch>>) -> BoxStream<'static, Result<RecordBatch>> + Send + Sync>;

/// A worker connection whose result streams pass through an observer (to
/// count what arrives from a peer); everything else is passed through.
pub struct ObservedChannel {
    pub inner: Box<dyn WorkerChannel>,
    pub observe: StreamObserver,
}

#[async_trait]
impl WorkerChannel for ObservedChannel {
    async fn coordinator_channel(
        &mut self,
        headers: HeaderMap,
        set_plan_request: SetPlanRequest,
        c2w_stream: BoxStream<'static, CoordinatorToWorkerMsg>,
        metrics: ExecutionPlanMetricsSet,
        task_ctx: &Arc<TaskContext>,
    ) -> Result<BoxStream<'static, Result<WorkerToCoordinatorMsg>>> {
        self.inner.coordinator_channel(headers, set_plan_request, c2w_stream, metrics, task_ctx).await
    }

    async fn execute_task(
        &mut self,
        headers: HeaderMap,
        request: ExecuteTaskRequest,
        metrics: ExecutionPlanMetricsSet,
        task_ctx: &Arc<TaskContext>,
    ) -> Result<Vec<BoxStream<'static, Result<RecordBatch>>>> {
        let streams = self.inner.execute_task(headers, request, metrics, task_ctx).await?;
        Ok(streams.into_iter().map(|stream| (self.observe)(stream)).collect())
    }

    async fn get_worker_info(&mut self, request: GetWorkerInfoRequest) -> Result<GetWorkerInfoResponse> {
        self.inner.get_worker_info(request).await
    }
}

/// The share of rows (percent) the planner assumes a filter keeps when the
/// scans' statistics cannot tell: they have row counts and min/max, not
/// distinct counts, so DataFusion falls back to this for `p_brand = 'X'`.
/// At its default of 20, a selective filter on a big dimension (TPC-H Q17's
/// parts of one brand and container) is estimated too big to collect, so its
/// join is partitioned and the whole fact table is routed to the parts'
/// owners; at 5 the filtered side is collected and broadcast (figures:
/// bench/results/design-figures.md). A session can change it with
/// `SET datafusion.optimizer.default_filter_selectivity`.
pub const DEFAULT_FILTER_SELECTIVITY_PERCENT: u8 = 5;

/// Worker threads of this node's runtime (the nodes of a cluster run alike:
/// `foam local` gives each the same share of the cores).
pub fn worker_threads() -> u32 {
    tokio::runtime::Handle::try_current().map_or(WORKER_THREADS_UNKNOWN, |runtime| runtime.metrics().num_workers() as u32)
}

/// The session configuration every FoamDB session starts from.
///
/// DataFusion 55 types some expressions non-nullable in the logical plan
/// and nullable in the physical one (`f IS NOT TRUE`), and its check that an
/// aggregate's input agrees on both failed `SELECT DISTINCT f IS NOT TRUE
/// FROM t` with an internal error, as it did FoamDB's unnesting of `(f IS
/// NOT TRUE) NOT IN (subquery)` (write fuzzing, seed 52071). The option
/// DataFusion keeps for such planner bugs turns that check off
/// (`skip_physical_aggregate_schema_check`).
pub fn base_config(node: Arc<NodeContext>) -> SessionConfig {
    let mut config = SessionConfig::new();
    config.options_mut().optimizer.default_filter_selectivity = DEFAULT_FILTER_SELECTIVITY_PERCENT;
    config.options_mut().execution.skip_physical_aggregate_schema_check = true;
    config
        .with_option_extension(FoamOptions::default())
        .with_default_catalog_and_schema(crate::catalog::provider::CATALOG_NAME, crate::catalog::provider::SCHEMA_NAME)
        .with_create_default_catalog_and_schema(false)
        .with_information_schema(true)
        .with_extension(node)
        .set_str("datafusion.sql_parser.dialect", "PostgreSQL")
        // `0.1` is a NUMERIC, as in PostgreSQL (`frontend/numeric_literals.rs`).
        .set_bool("datafusion.sql_parser.parse_float_as_decimal", true)
}

/// At most this factor below DataFusion's one-node key density does a
/// cluster still join through a perfect-hash array: the array costs 4 bytes
/// per key of the build side's range, so at DataFusion's default (0.15) a
/// build row may cost up to about 27 bytes of array on one node and, with
/// this cap, 107 on a cluster of any size, a few times a hash table's.
pub const JOIN_DENSITY_SCALE_MAX: f64 = 4.0;

/// DataFusion joins through a perfect-hash array instead of a hash table when
/// the build side's keys are dense: rows / (max - min + 1) above
/// `perfect_hash_join_min_key_density`. FoamDB's hash partitioning deals a key
/// range over all of a table's partitions, so a table with the default
/// partition count on N nodes holds, in each partition, the rows of a one-node
/// partition over the same range divided by the ratio of the two counts.
/// Dividing the threshold by that ratio (up to [`JOIN_DENSITY_SCALE_MAX`])
/// makes the join the one a single node chooses for the same data. The array
/// is reserved from the memory pool like a hash table.
fn scale_join_density_to_cluster(config: &mut SessionConfig, node: &NodeContext) {
    let nodes = node.catalog.current().nodes.len() as u32;
    let ratio = default_partition_count(nodes, worker_threads()) as f64 / default_partition_count(1, WORKER_THREADS_UNKNOWN) as f64;
    let one_node = datafusion::config::ExecutionOptions::default().perfect_hash_join_min_key_density;
    config.options_mut().execution.perfect_hash_join_min_key_density = one_node / ratio.clamp(1.0, JOIN_DENSITY_SCALE_MAX);
}

/// How stages compress the Arrow batches they send each other, unless a
/// session sets `distributed.compression` ('lz4', 'zstd' or 'none').
/// datafusion-distributed's default is LZ4, which pays off when the network
/// is slower than a core compresses. Between nodes on one machine or a fast
/// LAN it is CPU spent for nothing (figures: bench/results/design-figures.md).
pub const EXCHANGE_COMPRESSION: Option<CompressionType> = None;

/// A coordinating session state: plans with the distributed planner and the
/// FoamDB handlers above.
pub fn coordinator_state_builder(node: Arc<NodeContext>, runtime: Arc<RuntimeEnv>) -> SessionStateBuilder {
    let mut config = base_config(node.clone());
    scale_join_density_to_cluster(&mut config, &node);
    let mut builder = SessionStateBuilder::new()
        .with_config(config)
        .with_default_features()
        .with_runtime_env(runtime)
        .with_analyzer_rules(crate::optimizer::datafusion_analyzer_rules())
        .with_optimizer_rules(crate::optimizer::logical_rules())
        .with_physical_optimizer_rules(crate::optimizer::physical_rules(&node))
        .with_distributed_planner()
        .with_distributed_worker_resolver(FoamWorkerResolver { node: node.clone() })
        .with_distributed_user_codec(FoamCodec)
        .with_distributed_desired_task_count_handler(DesiredTasks)
        .with_distributed_scale_up_leaf_node_handler(scale_up)
        .with_distributed_route_tasks_handler(route_tasks)
        .with_distributed_channel_resolver(FoamChannelResolver { node: node.clone() });
    for rule in crate::optimizer::analyzer_rules() {
        builder = builder.with_analyzer_rule(rule);
    }
    crate::optimizer::add_sql_planners(&mut builder);
    // The distributed planner has put its options in the config by now.
    if let Some(Err(error)) = builder.config().as_mut().map(|config| config.set_distributed_compression(EXCHANGE_COMPRESSION)) {
        tracing::warn!("exchange compression left at datafusion-distributed's default: {error}");
    }
    builder
}

/// The header that carries a session's changed `datafusion.execution` options
/// to the workers running its tasks. datafusion-distributed builds a task's
/// config from DataFusion's defaults and its own options, so without it a
/// `SET datafusion.execution.batch_size` (or the perfect-hash join's density)
/// would apply only to the coordinator's part of a query.
pub const EXECUTION_OPTIONS_HEADER: &str = "x-foam-execution-options";

/// The `datafusion.execution` options of `config` that differ from
/// DataFusion's defaults, as `key=value` pairs separated by `;` (a value
/// holding `;`, `=` or a character a header cannot carry is left out).
fn changed_execution_options(config: &SessionConfig) -> String {
    // Computed once per process: this runs before every query.
    static DEFAULTS: std::sync::OnceLock<std::collections::HashMap<String, Option<String>>> = std::sync::OnceLock::new();
    let defaults = DEFAULTS.get_or_init(|| {
        datafusion::config::ConfigOptions::default()
            .entries()
            .into_iter()
            .filter(|e| e.key.starts_with("datafusion.execution."))
            .map(|e| (e.key, e.value))
            .collect()
    });
    config
        .options()
        .entries()
        .into_iter()
        .filter(|e| e.key.starts_with("datafusion.execution."))
        .filter_map(|e| {
            let value = e.value?;
            let changed = defaults.get(&e.key).is_none_or(|default| default.as_deref() != Some(value.as_str()));
            let carried = value.chars().all(|c| c.is_ascii_graphic() && c != ';' && c != '=');
            (changed && carried).then(|| format!("{}={value}", e.key))
        })
        .collect::<Vec<_>>()
        .join(";")
}

/// Puts the session's changed `datafusion.execution` options into the
/// headers its queries send to the workers; called before each query.
pub fn pass_execution_options(config: &mut SessionConfig) -> Result<()> {
    let mut headers = HeaderMap::new();
    let options = changed_execution_options(config);
    if !options.is_empty() {
        let value = options.parse().map_err(|e| DataFusionError::Internal(format!("execution options header: {e}")))?;
        headers.insert(EXECUTION_OPTIONS_HEADER, value);
    }
    config.set_distributed_passthrough_headers(headers)
}

/// Applies the coordinator's changed `datafusion.execution` options to a
/// task's config; one that does not apply is logged and skipped.
fn apply_execution_options(config: &mut SessionConfig, headers: &HeaderMap) {
    let Some(options) = headers.get(EXECUTION_OPTIONS_HEADER).and_then(|v| v.to_str().ok()) else { return };
    for pair in options.split(';') {
        let Some((key, value)) = pair.split_once('=') else { continue };
        if let Err(error) = config.options_mut().set(key, value) {
            tracing::warn!(key, value, %error, "a coordinator's execution option does not apply here");
        }
    }
}

/// The session state every task on a worker starts from: DataFusion's
/// functions and rules and FoamDB's own functions, built once. Building it
/// for each task (as datafusion-distributed's default does) registered every
/// function afresh, a visible share of a worker's CPU in a short query.
fn worker_template(runtime: Arc<RuntimeEnv>) -> Result<datafusion::execution::SessionState> {
    let mut state = SessionStateBuilder::new().with_default_features().with_runtime_env(runtime).build();
    for udf in crate::optimizer::worker_udfs() {
        datafusion::execution::FunctionRegistry::register_udf(&mut state, Arc::new(udf))?;
    }
    for udaf in crate::optimizer::worker_udafs() {
        datafusion::execution::FunctionRegistry::register_udaf(&mut state, Arc::new(udaf))?;
    }
    datafusion::execution::FunctionRegistry::register_udaf(&mut state, Arc::new(crate::frontend::scalar_subquery::SingleValue::udaf()))?;
    datafusion::execution::FunctionRegistry::register_udf(&mut state, Arc::new(crate::frontend::scalar_subquery::OneValue::udf()))?;
    Ok(state)
}

/// The datafusion-distributed worker of this node: executes stage fragments
/// that other nodes (or this one) send it, reading this node's storage. A
/// task's state is a copy of [`worker_template`] with the config
/// datafusion-distributed made for the task.
pub fn worker(node: Arc<NodeContext>, runtime: Arc<RuntimeEnv>) -> Result<Worker> {
    let mut template = worker_template(runtime.clone())?;
    datafusion::execution::FunctionRegistry::register_udf(&mut template, Arc::new(crate::exec::sequences::worker_udf(node.clone())))?;
    // A catalog query spread over nodes (a UNION of pg_catalog tables) may
    // show constraint definitions in a task: each node reads its catalog.
    for udf in crate::catalog::pg_keys::definition_udfs(node.clone()) {
        datafusion::execution::FunctionRegistry::register_udf(&mut template, Arc::new(udf))?;
    }
    let template = Arc::new(template);
    Ok(Worker::from_session_builder(move |mut ctx: WorkerQueryContext| {
        let (node, template) = (node.clone(), template.clone());
        async move {
            let Some(mut config) = ctx.builder.config().take() else {
                return Err(DataFusionError::Internal("datafusion-distributed gave a task no config".into()));
            };
            config.set_distributed_user_codec(FoamCodec);
            config.set_distributed_channel_resolver(FoamChannelResolver { node: node.clone() });
            scale_join_density_to_cluster(&mut config, &node);
            // The session's own settings win over the defaults above.
            apply_execution_options(&mut config, &ctx.headers);
            config.set_extension(node);
            let mut state = (*template).clone();
            *state.config_mut() = config;
            Ok(state)
        }
    })
    .with_runtime_env(runtime))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changed_execution_options_travel_in_the_header_and_bad_ones_are_skipped() {
        let mut coordinator = SessionConfig::new().with_batch_size(1000);
        coordinator.options_mut().execution.perfect_hash_join_min_key_density = 1.0;
        let sent = changed_execution_options(&coordinator);
        assert_eq!(sent.split(';').count(), 2, "only the changed options are sent: {sent}");

        let mut worker = SessionConfig::new();
        let mut headers = HeaderMap::new();
        headers.insert(EXECUTION_OPTIONS_HEADER, sent.parse().unwrap());
        apply_execution_options(&mut worker, &headers);
        assert_eq!(worker.batch_size(), 1000);
        assert_eq!(worker.options().execution.perfect_hash_join_min_key_density, 1.0);

        // A peer's malformed or unknown options are skipped; the valid ones still apply.
        let mut worker = SessionConfig::new();
        let garbled = "no-equals-sign;datafusion.execution.no_such_option=1;datafusion.execution.batch_size=not-a-number;\
                       datafusion.execution.target_partitions=3";
        headers.insert(EXECUTION_OPTIONS_HEADER, garbled.parse().unwrap());
        apply_execution_options(&mut worker, &headers);
        assert_eq!(worker.target_partitions(), 3);
        assert_eq!(worker.batch_size(), SessionConfig::new().batch_size());
    }
}
