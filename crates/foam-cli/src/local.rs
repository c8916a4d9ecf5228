//! `foam local`: a whole cluster on this machine, one `foam start` process per
//! node on 127.0.0.1, for development and for trying FoamDB. The first node
//! bootstraps; the others join it. Data stays in the data directory, so running
//! the same command again brings the cluster back.

use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use foam_node::superuser::{self, SUPERUSER};
use foam_node::tls::{self, TLS_DIR};
use foam_rpc::ClusterSecret;
use foam_rpc::auth::CLUSTER_SECRET_FILE;

/// Offset between a node's SQL port and its cluster port.
const NODE_PORT_OFFSET: u16 = 1000;
/// Offset between a node's SQL port and its HTTP port (metrics, console).
const HTTP_PORT_OFFSET: u16 = 2000;
/// Node i's Arrow Flight SQL port is sql-port + this + i.
const FLIGHT_SQL_PORT_OFFSET: u16 = 3000;
/// How long `foam local` waits for every node to accept SQL connections.
const STARTUP_TIMEOUT_SECONDS: u64 = 120;
/// How long stopping nodes may take before they are killed.
const STOP_GRACE_SECONDS: u64 = 10;
/// Share of the machine's memory all local nodes together may use for queries.
const MEMORY_SHARE_PERCENT: u64 = 60;
/// Fewest worker threads a local node runs, however many nodes share the cores.
const WORKER_THREADS_PER_NODE_MIN: usize = 1;
/// How long a started cluster may take to settle: every node it wants in the
/// meta group votes there, and every copy of every partition is live. Nodes
/// that start together join the meta group one by one, and while it has two
/// voters, losing either stops all DDL and commits; a restarted node checks
/// its copies against live ones (a few seconds, nothing copied when it missed
/// no writes), and until then reads go to the other copies, so the first
/// queries would run unevenly spread.
const SETTLE_TIMEOUT_SECONDS: u64 = 120;

#[derive(clap::Args)]
pub struct LocalArgs {
    /// Number of node processes.
    #[arg(long, default_value_t = 3)]
    nodes: u16,
    /// Data directory; node i keeps its data in DIR/node-i.
    #[arg(long, default_value = "foam-data")]
    data_dir: PathBuf,
    /// SQL port of the first node; node i listens on sql-port + i, on
    /// sql-port + 1000 + i for cluster traffic, on sql-port + 2000 + i
    /// for HTTP (metrics and the console) and on sql-port + 3000 + i for
    /// Arrow Flight SQL.
    #[arg(long, default_value_t = 5433)]
    sql_port: u16,
    /// Load TPC-H at this scale factor once (skipped when the data dir has it).
    #[arg(long)]
    tpch: Option<f64>,
    /// Directory whose files clients may load with `COPY t FROM 'file'`;
    /// without it COPY reads no server file (use `\copy` in psql).
    #[arg(long)]
    copy_dir: Option<PathBuf>,
    /// Accept every client without a password (see `foam start --insecure`).
    #[arg(long)]
    insecure: bool,
}

/// How `foam local` starts its nodes, beyond their count and ports.
#[derive(Debug, Clone, Default)]
pub struct LocalOptions {
    /// `--copy-dir` of every node.
    pub copy_dir: Option<PathBuf>,
    /// `--insecure` on every node.
    pub insecure: bool,
}

struct NodeProcess {
    /// "ready" lines in the node's log before this start (logs are appended).
    ready_lines_before: usize,
    index: u16,
    args: Vec<String>,
    child: Option<Child>,
}

/// A running local cluster: node processes on 127.0.0.1, stopped on drop.
pub struct LocalCluster {
    pub data_dir: PathBuf,
    pub sql_port: u16,
    exe: PathBuf,
    nodes: Vec<NodeProcess>,
    /// The cluster secret every node and the TPC-H loader use (`None` with `--insecure`).
    secret_file: Option<PathBuf>,
}

/// The file in a local cluster's data directory naming the `--sql-port` it
/// was created with.
const SQL_PORT_FILE: &str = "sql-port";

/// Nodes register their addresses in the catalog (and the meta nodes in their
/// Raft group) when a cluster is created; started again on other ports they
/// would look for each other at the old ones and never form a majority. So a
/// data directory remembers its port and refuses another with a clear error.
fn check_sql_port(data_dir: &std::path::Path, sql_port: u16) -> Result<(), String> {
    let path = data_dir.join(SQL_PORT_FILE);
    match std::fs::read_to_string(&path) {
        Ok(found) => match found.trim().parse::<u16>() {
            Ok(created) if created != sql_port => Err(format!(
                "{} was created with --sql-port {created}; its nodes are registered at those ports, so start it with --sql-port {created}",
                data_dir.display()
            )),
            Ok(_) => Ok(()),
            Err(e) => Err(format!("{} should hold the --sql-port this data directory was created with: {e}", path.display())),
        },
        Err(_) => std::fs::write(&path, sql_port.to_string()).map_err(|e| format!("cannot write {}: {e}", path.display())),
    }
}

impl LocalCluster {
    /// Starts `nodes` node processes and waits until each serves SQL; gives up
    /// early when `stop` is set.
    pub fn start(
        nodes: u16,
        data_dir: &std::path::Path,
        sql_port: u16,
        options: &LocalOptions,
        stop: &AtomicBool,
    ) -> Result<LocalCluster, String> {
        if nodes == 0 {
            return Err("--nodes must be at least 1".into());
        }
        let last_port = sql_port as u32 + FLIGHT_SQL_PORT_OFFSET as u32 + nodes as u32;
        if last_port > u16::MAX as u32 {
            return Err(format!("--sql-port {sql_port} leaves no room for {nodes} nodes' ports"));
        }
        std::fs::create_dir_all(data_dir).map_err(|e| format!("cannot create {}: {e}", data_dir.display()))?;
        let data_dir = data_dir.canonicalize().map_err(|e| e.to_string())?;
        check_sql_port(&data_dir, sql_port)?;
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let memory_mb = memory_per_node_mb(nodes);
        let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
        let threads = worker_threads_per_node(cores, nodes);
        let first_node_addr = format!("127.0.0.1:{}", sql_port + NODE_PORT_OFFSET);
        // Every node gets the cluster secret from the start: the joining
        // ones start before the first could have made it.
        let secret_file = (!options.insecure).then(|| data_dir.join(CLUSTER_SECRET_FILE));
        if let Some(file) = secret_file.as_ref().filter(|f| !f.exists()) {
            ClusterSecret::generate().and_then(|secret| secret.save(file)).map_err(|e| e.to_string())?;
        }
        // One CA for the cluster, so one `sslrootcert` verifies every node.
        let ca_dir = data_dir.join(TLS_DIR);
        tls::make_ca(&ca_dir).map_err(|e| e.to_string())?;
        let mut cluster = LocalCluster { data_dir, sql_port, exe, nodes: Vec::new(), secret_file: secret_file.clone() };
        for index in 0..nodes {
            let dir = cluster.data_dir.join(format!("node-{index}"));
            std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
            let node_tls = dir.join(TLS_DIR);
            let (cert, key) = (node_tls.join(tls::NODE_CERT_FILE), node_tls.join(tls::NODE_KEY_FILE));
            if !cert.exists() || !key.exists() {
                tls::make_node_certificate(&ca_dir, &node_tls, &tls::node_hosts("127.0.0.1:0")).map_err(|e| e.to_string())?;
            }
            let mut node_args = vec![
                "start".to_string(),
                "--data-dir".into(),
                dir.display().to_string(),
                "--sql-addr".into(),
                format!("127.0.0.1:{}", sql_port + index),
                "--node-addr".into(),
                format!("127.0.0.1:{}", sql_port + NODE_PORT_OFFSET + index),
                "--http-addr".into(),
                format!("127.0.0.1:{}", sql_port + HTTP_PORT_OFFSET + index),
                "--flight-sql-addr".into(),
                format!("127.0.0.1:{}", sql_port + FLIGHT_SQL_PORT_OFFSET + index),
                "--memory-limit-mb".into(),
                memory_mb.to_string(),
                "--worker-threads".into(),
                threads.to_string(),
            ];
            if index > 0 {
                node_args.extend(["--join".to_string(), first_node_addr.clone()]);
            }
            node_args.extend(["--tls-cert".to_string(), cert.display().to_string(), "--tls-key".into(), key.display().to_string()]);
            if let Some(copy_dir) = &options.copy_dir {
                node_args.extend(["--copy-dir".to_string(), copy_dir.display().to_string()]);
            }
            match &secret_file {
                Some(file) => node_args.extend(["--cluster-secret-file".to_string(), file.display().to_string()]),
                None => node_args.push("--insecure".into()),
            }
            let ready_lines_before = ready_lines(&cluster.data_dir, index);
            let mut node = NodeProcess { ready_lines_before, index, args: node_args, child: None };
            spawn(&cluster.exe, &cluster.data_dir, &mut node)?;
            cluster.nodes.push(node);
        }
        let deadline = Instant::now() + Duration::from_secs(STARTUP_TIMEOUT_SECONDS);
        // A node binds its ports before it has replayed storage and registered,
        // so an open port is not enough: wait for its "ready" line.
        for index in 0..cluster.nodes.len() {
            let port = sql_port + index as u16;
            while ready_lines(&cluster.data_dir, index as u16) <= cluster.nodes[index].ready_lines_before
                || TcpStream::connect(("127.0.0.1", port)).is_err()
            {
                if stop.load(Ordering::SeqCst) || Instant::now() > deadline || exited(&mut cluster.nodes[index]) {
                    return Err(format!(
                        "node {index} did not start; see {}",
                        log_path(&cluster.data_dir, index as u16).display()
                    ));
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        Ok(cluster)
    }

    /// Peak resident memory of each node process so far (VmHWM), in MiB.
    pub fn peak_rss_mb(&self) -> Vec<Option<u64>> {
        self.nodes
            .iter()
            .map(|node| {
                let pid = node.child.as_ref()?.id();
                let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
                let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
                Some(line.split_whitespace().nth(1)?.parse::<u64>().ok()? / 1024)
            })
            .collect()
    }

    /// Waits until the cluster has settled (see [`SETTLE_TIMEOUT_SECONDS`]);
    /// past that it says what is missing and goes on: a copy that cannot catch
    /// up does not stop reads.
    pub fn wait_until_settled(&self) -> Result<(), String> {
        let voters_wanted = foam_common::limits::meta_voters(self.nodes.len()) as u64;
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
        runtime.block_on(async {
            let client = foam_tpch::load::connect(&self.url()).await.map_err(|e| e.to_string())?;
            let count = |sql: &'static str| {
                let client = &client;
                async move {
                    let rows = client.simple_query(sql).await.map_err(|e| format!("cannot read the cluster's state: {e}"))?;
                    Ok::<u64, String>(foam_tpch::load::first_number(&rows).unwrap_or(0))
                }
            };
            let deadline = Instant::now() + Duration::from_secs(SETTLE_TIMEOUT_SECONDS);
            let mut announced = false;
            loop {
                let voters = count("SELECT count(*) FROM foam_nodes WHERE meta_role IN ('leader', 'follower')").await?;
                let catching_up = count("SELECT count(*) FROM foam_partitions WHERE replica_state <> 'live'").await?;
                if voters >= voters_wanted && catching_up == 0 {
                    return Ok(());
                }
                let waiting = format!("{voters} of {voters_wanted} meta nodes voting, {catching_up} copies catching up");
                if Instant::now() >= deadline {
                    eprintln!("foam local: still {waiting}; going on.");
                    return Ok(());
                }
                if !announced {
                    println!("Waiting for the cluster to settle ({waiting})...");
                    announced = true;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    }

    /// The superuser's connection URL, with the password the cluster was
    /// created with (none for an `--insecure` cluster).
    pub fn url(&self) -> String {
        match self.password() {
            Some(password) => format!("postgres://{SUPERUSER}:{password}@127.0.0.1:{}/foam", self.sql_port),
            None => format!("postgres://{SUPERUSER}@127.0.0.1:{}/foam", self.sql_port),
        }
    }

    /// The file holding the cluster secret (`None` with `--insecure`).
    pub fn secret_file(&self) -> Option<PathBuf> {
        self.secret_file.clone()
    }

    /// The superuser's generated password, from the node that created it.
    fn password(&self) -> Option<String> {
        (0..self.nodes.len()).find_map(|index| superuser::read_password(&self.data_dir.join(format!("node-{index}"))))
    }

    /// Reports nodes that exited since the last call, with how to restart them.
    fn report_exited(&mut self, reported: &mut [bool]) {
        for (node, reported) in self.nodes.iter_mut().zip(reported.iter_mut()) {
            if !*reported && exited(node) {
                *reported = true;
                eprintln!("foam local: node {} stopped; restart it with:\n  {} {}", node.index, self.exe.display(), node.args.join(" "));
            }
        }
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        stop_all(&mut self.nodes);
    }
}

pub fn run(args: LocalArgs) -> Result<(), String> {
    let stop = Arc::new(AtomicBool::new(false));
    let stop_flag = stop.clone();
    ctrlc::set_handler(move || stop_flag.store(true, Ordering::SeqCst)).map_err(|e| format!("cannot handle Ctrl-C: {e}"))?;
    let mut cluster = match LocalCluster::start(args.nodes, &args.data_dir, args.sql_port, &LocalOptions { copy_dir: args.copy_dir.clone(), insecure: args.insecure }, &stop) {
        Ok(cluster) => cluster,
        // Ctrl-C or SIGTERM while nodes were starting: they are stopped (the
        // partly started cluster was dropped), which is what was asked.
        Err(_) if stop.load(Ordering::SeqCst) => {
            println!("Stopped before the cluster was ready.");
            return Ok(());
        }
        Err(error) => return Err(error),
    };
    if let Some(scale_factor) = args.tpch {
        load_tpch_once(&cluster.url(), cluster.secret_file().as_deref(), scale_factor)?;
    }
    cluster.wait_until_settled()?;
    println!("FoamDB is running: {} nodes, data in {}", args.nodes, cluster.data_dir.display());
    println!();
    println!("  Connect:  psql {}", cluster.url());
    if args.insecure {
        println!("            (INSECURE: no passwords; anyone may connect as anyone)");
    }
    println!("  TLS:      add ?sslmode=verify-full&sslrootcert={}", cluster.data_dir.join(TLS_DIR).join(tls::CA_CERT_FILE).display());
    if args.nodes > 1 {
        println!("  (every node accepts SQL: ports {}..={})", args.sql_port, args.sql_port + args.nodes - 1);
    }
    match &args.copy_dir {
        Some(dir) => println!("  Files:    COPY t FROM 'file' reads files under {}", dir.display()),
        None => println!("  Files:    COPY t FROM 'file' is off (--copy-dir DIR allows DIR); psql's \\copy sends a local file"),
    }
    println!("  Console:  http://127.0.0.1:{}/ (Prometheus metrics at /metrics on ports {}..={})", args.sql_port + HTTP_PORT_OFFSET, args.sql_port + HTTP_PORT_OFFSET, args.sql_port + HTTP_PORT_OFFSET + args.nodes - 1);
    println!("  Arrow:    Flight SQL at grpc://127.0.0.1:{} (same user and password; grpc+tls:// with the CA above)", args.sql_port + FLIGHT_SQL_PORT_OFFSET);
    println!("  Logs:     {}/node-*/node.log", cluster.data_dir.display());
    println!("  Stop:     Ctrl-C (data stays; run the same command to start again)");
    println!();
    let mut reported = vec![false; args.nodes as usize];
    while !stop.load(Ordering::SeqCst) {
        cluster.report_exited(&mut reported);
        std::thread::sleep(Duration::from_millis(200));
    }
    println!("Stopping FoamDB...");
    drop(cluster);
    Ok(())
}

/// Loads TPC-H unless an earlier run of this data directory did; returns
/// (rows, seconds) when it loaded.
pub fn load_tpch_once(url: &str, secret_file: Option<&std::path::Path>, scale_factor: f64) -> Result<Option<(u64, f64)>, String> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
    let loaded = runtime.block_on(async {
        let client = foam_tpch::load::connect(url).await?;
        foam_tpch::load::is_loaded(&client).await
    });
    match loaded {
        Ok(true) => {
            println!("TPC-H data is already loaded.");
            Ok(None)
        }
        Ok(false) => crate::tpch_load(url, secret_file, scale_factor).map(Some),
        Err(error) => Err(format!("[{}] {error}", error.sqlstate())),
    }
}

/// The line a node prints once it serves (see foam-node's runtime).
const NODE_READY_MARKER: &str = " ready: SQL on ";

fn ready_lines(data_dir: &std::path::Path, index: u16) -> usize {
    std::fs::read_to_string(log_path(data_dir, index)).map(|log| log.matches(NODE_READY_MARKER).count()).unwrap_or(0)
}

fn log_path(data_dir: &std::path::Path, index: u16) -> PathBuf {
    data_dir.join(format!("node-{index}")).join("node.log")
}

fn spawn(exe: &std::path::Path, data_dir: &std::path::Path, node: &mut NodeProcess) -> Result<(), String> {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log_path(data_dir, node.index))
        .map_err(|e| format!("cannot open the log of node {}: {e}", node.index))?;
    let log_err = log.try_clone().map_err(|e| e.to_string())?;
    let child = Command::new(exe)
        .args(&node.args)
        .stdin(Stdio::null())
        .stdout(Stdio::from(log))
        .stderr(Stdio::from(log_err))
        .spawn()
        .map_err(|e| format!("cannot start node {}: {e}", node.index))?;
    node.child = Some(child);
    Ok(())
}

fn exited(node: &mut NodeProcess) -> bool {
    match node.child.as_mut().map(|c| c.try_wait()) {
        Some(Ok(Some(_))) | None => true,
        _ => false,
    }
}

fn stop_all(nodes: &mut [NodeProcess]) {
    for node in nodes.iter_mut() {
        if let Some(child) = &node.child {
            // SIGTERM lets the node finish in-flight acknowledgements.
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
        }
    }
    let deadline = Instant::now() + Duration::from_secs(STOP_GRACE_SECONDS);
    for node in nodes.iter_mut() {
        if let Some(child) = node.child.as_mut() {
            while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Splits a share of physical memory evenly over the local nodes.
fn memory_per_node_mb(nodes: u16) -> usize {
    let total_kb = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse::<u64>().ok()))
        })
        .unwrap_or(8 * 1024 * 1024);
    (total_kb * MEMORY_SHARE_PERCENT / 100 / 1024 / nodes.max(1) as u64) as usize
}

/// Splits the machine's cores evenly over the local nodes, as separate
/// machines would each have their own. With every node running one thread
/// per core, 4 nodes on 2 cores ran 8 busy threads that the kernel switched
/// between 4 address spaces; on SF1 the 22 TPC-H queries took 0.97x the time
/// with one thread per node (interleaved hand runs, 8 of each).
fn worker_threads_per_node(cores: usize, nodes: u16) -> usize {
    (cores / nodes.max(1) as usize).max(WORKER_THREADS_PER_NODE_MIN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_nodes_share_the_cores_and_each_keeps_a_thread() {
        assert_eq!(worker_threads_per_node(2, 1), 2);
        assert_eq!(worker_threads_per_node(2, 4), 1);
        assert_eq!(worker_threads_per_node(8, 3), 2);
        assert_eq!(worker_threads_per_node(16, 4), 4);
        assert_eq!(worker_threads_per_node(1, 0), 1);
    }

    #[test]
    fn a_data_directory_keeps_the_sql_port_it_was_created_with() {
        let dir = tempfile::tempdir().unwrap();
        check_sql_port(dir.path(), 7000).unwrap();
        check_sql_port(dir.path(), 7000).unwrap();
        let error = check_sql_port(dir.path(), 7100).unwrap_err();
        assert!(error.contains("created with --sql-port 7000"), "{error}");
        std::fs::write(dir.path().join(SQL_PORT_FILE), "not a port").unwrap();
        let error = check_sql_port(dir.path(), 7000).unwrap_err();
        assert!(error.contains(SQL_PORT_FILE) && error.contains("should hold"), "{error}");
    }
}
