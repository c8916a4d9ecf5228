//! Starting and running a node: the order of start-up matters — storage is
//! replayed before the node answers anyone, and the node knows its id and the
//! catalog before it serves SQL.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::execution::memory_pool::FairSpillPool;
use datafusion::execution::runtime_env::{RuntimeEnv, RuntimeEnvBuilder};
use foam_catalog::model::CommandOutcome;
use foam_catalog::{Catalog, CatalogCommand, CatalogStore};
use foam_catalog::txns::TxnDecision;
use foam_common::limits::{
    IN_DOUBT_ABANDON_MS, IN_DOUBT_RESOLVE_INTERVAL_MS, JOIN_RETRY_FOR_MS, SETTLED_TXNS_FLUSH_MS, VERSION_COLLECT_INTERVAL_MS,
};
use foam_common::{FoamError, FoamResult, NodeId, TxnId};
use foam_rpc::ClusterSecret;
use foam_rpc::auth::CLUSTER_SECRET_FILE;
use foam_query::{CatalogService, NodeContext};
use foam_rpc::{NodeClients, NodeRequest, NodeResponse, Traffic};
use foam_storage::{DecisionLog, StorageEngine, TxnOutcome};
use tokio::net::TcpListener;

use crate::catalog::{ClusterCatalog, register_through};
use crate::consensus::{LogStore, Network, Raft, StateMachine, raft_config};
use crate::handler::FoamNodeHandler;
use crate::membership::{FailurePolicy, Membership};
use crate::replicas::Replication;
use crate::identity::{self, Identity};

/// The id of the node that starts a cluster (and, alone, its Raft group).
const BOOTSTRAP_NODE_ID: NodeId = 1;

#[derive(Debug, Clone)]
pub struct NodeConfig {
    pub data_dir: PathBuf,
    pub sql_addr: String,
    pub node_addr: String,
    /// Node address of a cluster member to join through; `None` bootstraps.
    pub join: Option<String>,
    /// Memory the query engine may use before it spills to disk.
    pub memory_limit_bytes: usize,
    /// When the failure detector (on the meta nodes' leader) marks nodes down and
    /// re-protects their partitions.
    pub failure_policy: FailurePolicy,
    /// The directory whose files clients may load with `COPY ... FROM
    /// 'file'`; `None` allows no server file.
    pub copy_dir: Option<PathBuf>,
    /// Let anyone connect as anyone, with no password, and any process
    /// call the node port (`--insecure`).
    pub insecure: bool,
    /// The cluster's secret, for a node joining (or one whose data
    /// directory lost its copy); a new cluster's first node makes one.
    pub cluster_secret_file: Option<PathBuf>,
    /// The SQL port's certificate chain and key (`tls.rs` makes them if not given).
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    /// Refuse clients on other machines that do not use TLS.
    pub require_tls: bool,
    /// Client connections served at once.
    pub max_connections: usize,
    /// The operators' HTTP port (`http.rs`): `/metrics` and the console.
    pub http_addr: Option<String>,
    /// The Arrow Flight SQL port (foam-flightsql).
    pub flight_sql_addr: Option<String>,
}

/// The cluster secret this node sends and asks for (`foam_rpc::auth`):
/// from `--cluster-secret-file` (kept in the data directory from then on),
/// else the data directory's copy, else a new one if this node starts a
/// new cluster.
fn cluster_secret(config: &NodeConfig, starts_a_cluster: bool) -> FoamResult<ClusterSecret> {
    let kept = config.data_dir.join(CLUSTER_SECRET_FILE);
    if let Some(given) = &config.cluster_secret_file {
        let secret = ClusterSecret::load(given)?;
        if given.canonicalize().ok() != kept.canonicalize().ok() {
            secret.save(&kept)?;
        }
        return Ok(secret);
    }
    if kept.exists() {
        return ClusterSecret::load(&kept);
    }
    if starts_a_cluster {
        let secret = ClusterSecret::generate()?;
        secret.save(&kept)?;
        return Ok(secret);
    }
    Err(FoamError::InvalidParameter {
        message: format!(
            "{} has no cluster secret: start with --cluster-secret-file naming the {CLUSTER_SECRET_FILE} file of a node of the cluster (or start every node with --insecure)",
            config.data_dir.display()
        ),
    })
}

/// Runs a node until `shutdown` resolves or serving fails.
pub async fn run_node(config: NodeConfig, shutdown: impl Future<Output = ()> + Send + 'static) -> FoamResult<()> {
    foam_common::fs::create_dir_all(&config.data_dir)?;
    let copy_dir = match &config.copy_dir {
        Some(dir) => Some(dir.canonicalize().map_err(|e| FoamError::InvalidParameter { message: format!("--copy-dir {}: {e}", dir.display()) })?),
        None => None,
    };
    // Bind both ports first: a port in use is the most common start-up error.
    let sql_listener = bind(&config.sql_addr, "sql-addr").await?;
    let node_listener = bind(&config.node_addr, "node-addr").await?;
    let http_listener = match &config.http_addr {
        Some(addr) => Some(bind(addr, "http-addr").await?),
        None => None,
    };
    let flight_sql_listener = match &config.flight_sql_addr {
        Some(addr) => Some(bind(addr, "flight-sql-addr").await?),
        None => None,
    };
    let started = std::time::SystemTime::now();

    let storage_dir = config.data_dir.clone();
    let storage = tokio::task::spawn_blocking(move || StorageEngine::open(&storage_dir))
        .await
        .map_err(|e| FoamError::internal(e.to_string()))??;
    let storage = Arc::new(storage);
    let decisions = Arc::new(DecisionLog::open(&config.data_dir)?);
    let previous = identity::load(&config.data_dir)?;
    let join_addr = config.join.clone().or_else(|| previous.as_ref().and_then(|p| p.join_addr.clone()));
    let secret = if config.insecure { None } else { Some(cluster_secret(&config, previous.is_none() && join_addr.is_none())?) };
    let register = CatalogCommand::RegisterNode {
        id: previous.as_ref().map(|p| p.node_id),
        node_addr: config.node_addr.clone(),
        sql_addr: config.sql_addr.clone(),
    };
    let store = CatalogStore::new(&config.data_dir);
    let log = LogStore::open(&config.data_dir)?;
    let machine = StateMachine::open(&config.data_dir)?;
    // A new node learns its id first: the bootstrap node is node 1 (it
    // starts the Raft group alone), a joining one asks the cluster. A node
    // that comes back knows its id and starts with the catalog it had.
    let (node_id, cached, fresh_bootstrap) = match (&previous, &join_addr) {
        (Some(identity), _) => (identity.node_id, store.load()?.unwrap_or_default(), false),
        (None, None) => (BOOTSTRAP_NODE_ID, Catalog::default(), !log.has_state()),
        (None, Some(addr)) => {
            let (catalog, outcome) = register_through(addr, register.clone(), secret.as_ref(), Duration::from_millis(JOIN_RETRY_FOR_MS)).await?;
            (registered_id(outcome)?, catalog, false)
        }
    };
    identity::save(&config.data_dir, &Identity { node_id, join_addr: join_addr.clone() })?;

    let traffic = Arc::new(Traffic::default());
    let clients = Arc::new(NodeClients::counted(node_id, traffic.clone(), secret.clone()));
    // Raft's own heartbeats (ten a second) are not counted as query traffic
    // in foam_cluster_stats.
    let network = Network { clients: Arc::new(NodeClients::new(secret.clone())) };
    let raft = Raft::new(node_id, raft_config()?, network, log, machine.clone())
        .await
        .map_err(|e| FoamError::internal(format!("raft failed to start: {e}")))?;
    let catalog = Arc::new(ClusterCatalog::new(
        node_id,
        raft.clone(),
        machine,
        store,
        cached,
        clients.clone(),
        config.node_addr.clone(),
        join_addr.clone(),
    ));
    if fresh_bootstrap {
        let members = std::collections::BTreeMap::from([(node_id, openraft::BasicNode::new(&config.node_addr))]);
        raft.initialize(members).await.map_err(|e| FoamError::internal(format!("raft failed to initialize: {e}")))?;
    }
    if previous.is_none() && join_addr.is_none() {
        // The bootstrap node registers itself once it leads its group of one.
        let (_, outcome) = apply_when_led(&catalog, register.clone()).await?;
        if registered_id(outcome)? != node_id {
            return Err(FoamError::internal("the bootstrap node was not registered as node 1"));
        }
    }
    // A node that comes back tells the cluster its addresses again and gets
    // the newest catalog; if no majority answers yet (the whole cluster is
    // starting), it goes on with the catalog it has and retries meanwhile.
    let registered = match &previous {
        None => true,
        Some(_) => match catalog.apply(register.clone()).await {
            Ok(_) => true,
            Err(error) => {
                tracing::info!(%error, "the cluster does not answer yet; starting with this node's catalog");
                false
            }
        },
    };
    remove_dropped_tables(&storage, &catalog.current())?;

    let node = Arc::new(NodeContext {
        node_id,
        storage,
        decisions,
        clients,
        catalog: catalog.clone(),
        traffic,
        worker_channels: foam_query::distributed::channels::WorkerChannels::new(secret.clone()),
        partition_scans: Default::default(),
        rows_scanned: Default::default(),
        segment_statistics: Default::default(),
        rows_sent_to_peers: Default::default(),
        copy_dir,
        connections: Default::default(),
        sequences: Default::default(),
    });
    let runtime = query_runtime(&config)?;
    let replication = Replication::new(node.clone());
    replication.init_fences(&node.catalog.current());
    let _ = catalog.membership.set(Membership::new(node_id, node.clients.clone(), config.failure_policy));
    let detector = tokio::spawn(crate::membership::run(catalog.clone()));
    let meta_group = tokio::spawn(crate::membership::keep_meta_group(catalog.clone()));
    let reregister = (!registered).then(|| {
        let (catalog, storage) = (catalog.clone(), node.storage.clone());
        tokio::spawn(async move {
            while let Err(error) = catalog.apply(register.clone()).await {
                tracing::info!(%error, "waiting for the cluster to register this node again");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            if let Err(error) = remove_dropped_tables(&storage, &catalog.current()) {
                tracing::warn!(%error, "could not remove the data of dropped tables");
            }
        })
    });
    let keeper = tokio::spawn(replication.clone().run_keeper());

    let handler = Arc::new(FoamNodeHandler { node: node.clone(), replication, catalog: catalog.clone() });
    let worker = foam_query::distributed::worker(node.clone(), runtime.clone())
        .map_err(|e| FoamError::internal(format!("the query worker could not start: {e}")))?;
    let grpc = tonic::transport::Server::builder()
        .max_frame_size(foam_common::limits::RPC_FRAME_BYTES_MAX)
        .layer(tonic::service::InterceptorLayer::new(foam_rpc::SecretCheck(secret.clone())))
        .add_service(foam_rpc::node_flight_server(handler))
        .add_service(worker.into_worker_server())
        .serve_with_incoming(foam_rpc::server::nodelay_incoming(node_listener));
    let grpc = tokio::spawn(grpc);
    let auth = if config.insecure { foam_pgwire::ClientAuth::Insecure } else { foam_pgwire::ClientAuth::Password };
    let given = match (&config.tls_cert, &config.tls_key) {
        (Some(cert), Some(key)) => Some((cert.as_path(), key.as_path())),
        (None, None) => None,
        _ => return Err(FoamError::InvalidParameter { message: "--tls-cert and --tls-key go together".into() }),
    };
    let (cert, key) = crate::tls::node_certificate(&config.data_dir, &config.sql_addr, given)?;
    let tls = foam_pgwire::Tls { acceptor: crate::tls::acceptor(&cert, &key, &[])?, required_off_host: config.require_tls };
    let activity = foam_pgwire::SqlActivity::new(node.connections.clone(), config.max_connections);
    if let Some(listener) = flight_sql_listener {
        let flight = foam_flightsql::FlightSqlConfig { insecure: config.insecure, tls: crate::tls::acceptor(&cert, &key, &[b"h2"])?, tls_required_off_host: config.require_tls };
        let (node, runtime) = (node.clone(), runtime.clone());
        tokio::spawn(async move {
            if let Err(error) = foam_flightsql::serve(listener, node, runtime, flight).await {
                tracing::warn!(%error, "the Flight SQL port stopped");
            }
        });
    }
    let sql = tokio::spawn(foam_pgwire::serve(sql_listener, node.clone(), runtime, auth, tls, activity.clone()));
    let http = http_listener.map(|listener| {
        let operators = crate::http::Operators {
            node: node.clone(),
            activity,
            sql_addr: config.sql_addr.clone(),
            started,
            started_at: Instant::now(),
        };
        tokio::spawn(async move {
            if let Err(error) = crate::http::serve(listener, Arc::new(operators)).await {
                tracing::warn!(%error, "the HTTP endpoint stopped");
            }
        })
    });
    // Only the node that started the cluster makes its superuser: nodes
    // joining at the same moment might otherwise race it with passwords of
    // their own.
    if !config.insecure && node_id == BOOTSTRAP_NODE_ID && node.catalog.current().roles.is_empty() {
        let ensure = crate::superuser::ensure(node.catalog.clone(), config.data_dir.clone(), config.sql_addr.clone());
        // A new cluster's first node leads its catalog alone: it has its
        // superuser before it says it is ready. Elsewhere the catalog may
        // have no leader yet (the whole cluster restarting).
        if previous.is_none() && join_addr.is_none() { ensure.await } else { drop(tokio::spawn(ensure)) }
    }
    let resolver = tokio::spawn(resolve_in_doubt(node.clone()));
    let settled = tokio::spawn(flush_settled_txns(catalog.clone()));
    let sampler = tokio::spawn(sample_traffic(node.traffic.clone()));
    let collector = tokio::spawn(collect_old_versions(node.storage.clone()));

    // Serving starts now: the leader's heartbeats can reach this node only
    // from here on, so the wait for them starts here too (a node restarting
    // with the whole cluster may have spent seconds looking for a leader).
    catalog.heard_from_leader();
    let insecure = if config.insecure { " (INSECURE: no passwords; anyone may connect as anyone)" } else { "" };
    tracing::info!(node_id, sql_addr = %config.sql_addr, node_addr = %config.node_addr, insecure = config.insecure, "node ready");
    let http_note = config.http_addr.as_ref().map(|addr| format!(", metrics and console on http://{addr}/")).unwrap_or_default();
    let http_note = match &config.flight_sql_addr {
        Some(addr) => format!("{http_note}, Arrow Flight SQL on grpc://{addr}"),
        None => http_note,
    };
    println!("FoamDB node {node_id} ready: SQL on {}, cluster traffic on {}{http_note}{insecure}", config.sql_addr, config.node_addr);

    let outcome = tokio::select! {
        _ = shutdown => Ok(()),
        result = grpc => match result {
            Ok(Ok(())) => Ok(()),
            Ok(Err(error)) => Err(FoamError::internal(format!("cluster endpoint failed: {error}"))),
            Err(error) => Err(FoamError::internal(error.to_string())),
        },
        result = sql => Err(FoamError::internal(format!("SQL endpoint stopped: {result:?}"))),
    };
    resolver.abort();
    if let Some(http) = http {
        http.abort();
    }
    settled.abort();
    collector.abort();
    sampler.abort();
    keeper.abort();
    detector.abort();
    meta_group.abort();
    if let Some(reregister) = reregister {
        reregister.abort();
    }
    let _ = raft.shutdown().await;
    tracing::info!(node_id, "node stopping");
    outcome
}

async fn bind(addr: &str, what: &str) -> FoamResult<TcpListener> {
    let socket: SocketAddr = addr
        .parse()
        .map_err(|e| FoamError::InvalidParameter { message: format!("--{what} {addr} is not HOST:PORT: {e}") })?;
    TcpListener::bind(socket)
        .await
        .map_err(|e| FoamError::InvalidParameter { message: format!("cannot listen on --{what} {addr}: {e}") })
}

fn registered_id(outcome: CommandOutcome) -> FoamResult<NodeId> {
    match outcome {
        CommandOutcome::NodeRegistered { id } => Ok(id),
        other => Err(FoamError::internal(format!("node registration answered {other:?}"))),
    }
}

/// Applies `command` once this node's Raft group has elected a leader.
async fn apply_when_led(catalog: &ClusterCatalog, command: CatalogCommand) -> FoamResult<(Arc<Catalog>, CommandOutcome)> {
    let deadline = Instant::now() + Duration::from_millis(JOIN_RETRY_FOR_MS);
    loop {
        match catalog.apply(command.clone()).await {
            Err(FoamError::CatalogUnavailable { message }) if Instant::now() < deadline => {
                tracing::info!(%message, "waiting for the meta nodes to elect a leader");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            result => return result,
        }
    }
}

/// Deletes data of tables dropped while this node was down.
fn remove_dropped_tables(storage: &StorageEngine, catalog: &Catalog) -> FoamResult<()> {
    for table_id in storage.table_ids() {
        if table_id < catalog.next_table_id && catalog.table_by_id(table_id).is_none() {
            tracing::info!(table_id, "removing data of a dropped table");
            storage.drop_table(table_id)?;
        }
    }
    Ok(())
}

fn query_runtime(config: &NodeConfig) -> FoamResult<Arc<RuntimeEnv>> {
    let spill_dir = config.data_dir.join("spill");
    let _ = std::fs::remove_dir_all(&spill_dir);
    foam_common::fs::create_dir_all(&spill_dir)?;
    RuntimeEnvBuilder::new()
        .with_memory_pool(Arc::new(FairSpillPool::new(config.memory_limit_bytes)))
        .with_temp_file_path(spill_dir)
        .build_arc()
        .map_err(FoamError::from)
}

/// Turns the traffic counters into per-second rates for `foam_cluster_stats`.
async fn sample_traffic(traffic: Arc<Traffic>) {
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let mut interval = tokio::time::interval(Duration::from_millis(foam_rpc::traffic::TRAFFIC_SAMPLE_INTERVAL_MS));
    loop {
        interval.tick().await;
        traffic.sample(cores);
    }
}

/// Drops the partition versions (MVCC) past their retention, with the
/// replaced segment files only they still held, in partitions no read or
/// change has touched since.
async fn collect_old_versions(storage: Arc<StorageEngine>) {
    let mut interval = tokio::time::interval(Duration::from_millis(VERSION_COLLECT_INTERVAL_MS));
    loop {
        interval.tick().await;
        let storage = storage.clone();
        let _ = tokio::task::spawn_blocking(move || storage.forget_old_versions()).await;
    }
}

/// Settles prepared transactions whose outcome this node missed (it crashed,
/// or the coordinator did), and drops staged rows of coordinators gone silent.
/// The coordinator is asked first: while it still runs the transaction, the
/// participant waits. One that no longer runs it, or cannot be reached for
/// [`IN_DOUBT_ABANDON_MS`], is bypassed: the outcome recorded on the meta
/// nodes is taken, ABORT being recorded if the coordinator decided nothing.
async fn resolve_in_doubt(node: Arc<NodeContext>) {
    let mut interval = tokio::time::interval(Duration::from_millis(IN_DOUBT_RESOLVE_INTERVAL_MS));
    // Since when each transaction's coordinator has been unreachable.
    let mut unreachable_since: HashMap<TxnId, Instant> = HashMap::new();
    loop {
        interval.tick().await;
        let in_doubt = node.storage.in_doubt();
        unreachable_since.retain(|txn, _| in_doubt.iter().any(|(t, _)| t == txn));
        for (txn, coordinator) in in_doubt {
            let asked = if coordinator == node.node_id {
                Ok(node.decisions.outcome(txn))
            } else {
                match node.client_for(coordinator) {
                    Ok(client) => match client.call(&NodeRequest::TxnOutcome { txn }, &[]).await {
                        Ok((NodeResponse::Outcome { outcome }, _)) => Ok(outcome),
                        Ok((other, _)) => Err(FoamError::internal(format!("unexpected reply {other:?}"))),
                        Err(error) => Err(error),
                    },
                    Err(error) => Err(error),
                }
            };
            let outcome = match asked {
                Ok(TxnOutcome::Pending) => continue,
                // Decided before decisions were recorded on the meta nodes.
                Ok(TxnOutcome::Committed(ts)) => TxnDecision::Committed(ts),
                Err(_) if unreachable_since.entry(txn).or_insert_with(Instant::now).elapsed() < Duration::from_millis(IN_DOUBT_ABANDON_MS) => continue,
                // Not running there (any more), or unreachable for too long:
                // it will decide nothing now.
                Ok(TxnOutcome::Aborted) | Err(_) => match node.catalog.settle_txn(txn).await {
                    Ok(decision) => decision,
                    Err(error) => {
                        tracing::warn!(txn = %format!("{txn:032x}"), %error, "could not settle an in-doubt transaction yet");
                        continue;
                    }
                },
            };
            let storage = node.storage.clone();
            let result = match outcome {
                TxnDecision::Committed(ts) => tokio::task::spawn_blocking(move || storage.commit(txn, ts)).await,
                TxnDecision::Aborted => tokio::task::spawn_blocking(move || storage.abort(txn)).await,
            };
            match result {
                Ok(Ok(())) => {
                    tracing::info!(txn = %format!("{txn:032x}"), ?outcome, "resolved an in-doubt transaction");
                    if let TxnDecision::Committed(_) = outcome {
                        node.catalog.forget_txn(txn, Some(node.node_id));
                    }
                }
                Ok(Err(error)) => tracing::warn!(%error, "resolving an in-doubt transaction failed"),
                Err(error) => tracing::warn!(%error, "resolver task failed"),
            }
        }
        let storage = node.storage.clone();
        if let Ok(Ok(expired)) = tokio::task::spawn_blocking(move || storage.expire_idle_staging()).await
            && expired > 0
        {
            tracing::info!(expired, "discarded staged rows of transactions whose coordinator went silent");
        }
    }
}

/// Sends the leader the transaction outcomes this node's participants have
/// on disk, in batches, and now and then lets it drop expired abort records.
async fn flush_settled_txns(catalog: Arc<ClusterCatalog>) {
    let mut interval = tokio::time::interval(Duration::from_millis(SETTLED_TXNS_FLUSH_MS));
    let prune_every = (60_000 / SETTLED_TXNS_FLUSH_MS).max(1);
    for tick in 0u64.. {
        interval.tick().await;
        catalog.flush_settled(tick % prune_every == 0).await;
    }
}
