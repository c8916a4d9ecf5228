//! The `foam` command: `foam start` runs one node; `foam local` runs a whole
//! cluster of node processes on this machine.

/// mimalloc instead of the system allocator: queries allocate and free large
/// buffers (hash tables, Arrow arrays) all the time, and glibc's malloc handed
/// them back to the kernel and faulted fresh zeroed pages in again
/// (bench/results/design-figures.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// How long mimalloc keeps memory a query freed before handing it back to
/// the kernel: never (-1). With mimalloc's default of 10 ms every query
/// faulted and zeroed its hash tables' pages afresh
/// (bench/results/design-figures.md). A node's memory then
/// stays at its high-water mark, which the query memory pool
/// (`--memory-limit-mb`) bounds. `MIMALLOC_PURGE_DELAY` in the environment
/// still decides when set.
const ALLOCATOR_PURGE_DELAY_MS: std::ffi::c_long = -1;

/// `mi_option_purge_delay` in mimalloc 3's `mimalloc.h` (the version
/// libmimalloc-sys builds by default), which the sys crate does not name.
const MI_OPTION_PURGE_DELAY: std::ffi::c_int = 15;

unsafe extern "C" {
    /// mimalloc's own `mi_option_set`, linked in with the allocator.
    fn mi_option_set(option: std::ffi::c_int, value: std::ffi::c_long);
}

fn keep_freed_memory() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: sets one integer option of the allocator this binary links;
        // mimalloc reads options atomically, so this is safe at any time.
        unsafe { mi_option_set(MI_OPTION_PURGE_DELAY, ALLOCATOR_PURGE_DELAY_MS) };
    }
}

mod bench;
mod fuzz;
mod report;
mod local;

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use foam_node::{FailurePolicy, NodeConfig, run_node};

#[derive(Parser)]
#[command(name = "foam", version, about = "FoamDB: a scale-out, shared-nothing SQL database")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Default query memory per node before operators spill to disk.
const NODE_MEMORY_LIMIT_MB_DEFAULT: usize = 4096;

/// `foam start`'s options.
#[derive(clap::Args)]
struct StartArgs {
    /// Where this node keeps its data (created if missing).
    #[arg(long)]
    data_dir: PathBuf,
    /// PostgreSQL protocol address, HOST:PORT.
    #[arg(long)]
    sql_addr: String,
    /// Cluster-internal gRPC address, HOST:PORT.
    #[arg(long)]
    node_addr: String,
    /// Node address of any cluster member, to join that cluster.
    #[arg(long)]
    join: Option<String>,
    /// Query memory in MiB before operators spill to disk.
    #[arg(long, default_value_t = NODE_MEMORY_LIMIT_MB_DEFAULT)]
    memory_limit_mb: usize,
    /// Milliseconds without heartbeats after which a node is marked down
    /// (used by the leader of the meta nodes, which runs the failure detector).
    #[arg(long, default_value_t = foam_common::limits::NODE_DEAD_AFTER_MS_DEFAULT)]
    node_dead_after_ms: u64,
    /// Milliseconds a node stays down before its partitions get new copies elsewhere.
    #[arg(long, default_value_t = foam_common::limits::REPROTECT_AFTER_MS_DEFAULT)]
    reprotect_after_ms: u64,
    /// Threads that run this node's queries and RPCs; by default one per
    /// core. `foam local` gives each of its nodes a share of the cores.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    worker_threads: Option<u16>,
    /// Directory whose files clients may load with `COPY t FROM 'file'`
    /// (paths relative to it); without it COPY reads no server file.
    #[arg(long)]
    copy_dir: Option<PathBuf>,
    /// Accept every client without a password and every process on
    /// the node port. Without it, a new cluster's first node creates
    /// superuser `foam` with a generated password (kept in
    /// DATA_DIR/password) and the cluster secret (DATA_DIR/cluster-secret)
    /// that every node-to-node request must carry.
    #[arg(long)]
    insecure: bool,
    /// The cluster secret (another node's DATA_DIR/cluster-secret), for a
    /// node joining a cluster; kept in this node's data directory.
    #[arg(long)]
    cluster_secret_file: Option<PathBuf>,
    /// The SQL port's certificate chain (PEM); without it the node makes
    /// a CA and a certificate in DATA_DIR/tls on its first start.
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The key of --tls-cert (PEM).
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Refuse clients on other machines that do not use TLS.
    #[arg(long)]
    require_tls: bool,
    /// Client connections served at once; past it a client gets 53300.
    #[arg(long, default_value_t = foam_common::limits::MAX_CONNECTIONS_DEFAULT as u32, value_parser = clap::value_parser!(u32).range(1..))]
    max_connections: u32,
    /// HOST:PORT of the operators' HTTP endpoint: Prometheus `/metrics`,
    /// `/healthz` and a read-only console at `/`. It has no login and
    /// shows no rows or statement text; bind it where operators reach it.
    #[arg(long)]
    http_addr: Option<String>,
    /// HOST:PORT of the Arrow Flight SQL port: clients log in with the
    /// same users and passwords as on the SQL port and get results as
    /// Arrow. TLS (the SQL port's certificate) or plain TCP; plain only
    /// from this machine with --require-tls.
    #[arg(long)]
    flight_sql_addr: Option<String>,
}

#[derive(Subcommand)]
enum Command {
    /// Run one node. Without --join it bootstraps a new cluster.
    Start(StartArgs),
    /// Run an N-node cluster on 127.0.0.1 as N processes; Ctrl-C stops it.
    Local(local::LocalArgs),
    /// TPC-H: generate and load the benchmark's tables into a running cluster.
    Tpch {
        #[command(subcommand)]
        command: TpchCommand,
    },
    /// Benchmarks.
    Bench {
        #[command(subcommand)]
        command: BenchCommand,
    },
}

#[derive(Subcommand)]
enum BenchCommand {
    /// The 22 TPC-H queries, answers checked, per-query times.
    Tpch(bench::BenchTpchArgs),
    /// Differential fuzzing: random schemas, layouts, data and queries on
    /// the cluster and on single-process DataFusion; any difference reduced.
    Fuzz(fuzz::BenchFuzzArgs),
    /// The fuzzer's reference engine, served on stdin/stdout to the
    /// `bench fuzz` process that starts it.
    #[command(hide = true)]
    FuzzReference,
}

#[derive(Subcommand)]
enum TpchCommand {
    /// Create the eight TPC-H tables and fill them at scale factor SF.
    Load {
        /// Scale factor (1 is about 1 GB of data, 6 million lineitem rows).
        #[arg(long)]
        sf: f64,
        /// Any node's SQL endpoint.
        #[arg(long, default_value = DEFAULT_URL)]
        url: String,
        /// The cluster's secret (the `cluster-secret` file of any node's data
        /// directory): the loader sends segments to the nodes' ports, which
        /// ask for it. Not needed for a cluster started `--insecure`.
        #[arg(long)]
        cluster_secret_file: Option<PathBuf>,
    },
    /// Run the 22 queries on a loaded cluster and compare every answer with
    /// an answer set in the TPC-H kit's format (DIR/q1.out .. q22.out), such
    /// as the kit's official answers at SF 1; exits 1 if any differs.
    Check {
        /// The answer set's directory.
        #[arg(long)]
        answers: PathBuf,
        /// Any node's SQL endpoint.
        #[arg(long, default_value = DEFAULT_URL)]
        url: String,
    },
    /// Write the eight tables at scale factor SF as Parquet files under DIR
    /// (DIR/<table>/part-<n>.parquet, FoamDB's column types), for other
    /// engines (`bench/duckdb_tpch.py --parquet-dir DIR`).
    Parquet {
        #[arg(long)]
        sf: f64,
        #[arg(long)]
        dir: PathBuf,
    },
}

/// The SQL endpoint of `foam local`'s first node.
const DEFAULT_URL: &str = "postgres://foam@127.0.0.1:5433/foam";

fn main() {
    keep_freed_memory();
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info,datafusion=warn,h2=warn,tonic=warn,openraft=warn".into()),
        )
        .with_writer(std::io::stderr)
        // A node's log is usually a file (`foam local`, tests): colour codes only on a terminal.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let result = match cli.command {
        Command::Start(args) => {
            let failure_policy = FailurePolicy {
                node_dead_after: std::time::Duration::from_millis(args.node_dead_after_ms),
                reprotect_after: std::time::Duration::from_millis(args.reprotect_after_ms),
            };
            let config = NodeConfig {
                data_dir: args.data_dir,
                sql_addr: args.sql_addr,
                node_addr: args.node_addr,
                join: args.join,
                memory_limit_bytes: args.memory_limit_mb * 1024 * 1024,
                failure_policy,
                copy_dir: args.copy_dir,
                insecure: args.insecure,
                cluster_secret_file: args.cluster_secret_file,
                tls_cert: args.tls_cert,
                tls_key: args.tls_key,
                require_tls: args.require_tls,
                max_connections: args.max_connections as usize,
                http_addr: args.http_addr,
                flight_sql_addr: args.flight_sql_addr,
            };
            start(config, args.worker_threads)
        }
        Command::Local(args) => local::run(args),
        Command::Tpch { command: TpchCommand::Load { sf, url, cluster_secret_file } } => tpch_load(&url, cluster_secret_file.as_deref(), sf).map(|_| ()),
        Command::Tpch { command: TpchCommand::Check { answers, url } } => tpch_check(&url, &answers),
        Command::Tpch { command: TpchCommand::Parquet { sf, dir } } => tokio::runtime::Runtime::new()
            .map_err(|e| e.to_string())
            .and_then(|runtime| runtime.block_on(foam_tpch::peers::write_parquet(sf, &dir)).map_err(|e| e.to_string())),
        Command::Bench { command: BenchCommand::Tpch(args) } => bench::run(args),
        Command::Bench { command: BenchCommand::Fuzz(args) } => fuzz::run(args),
        Command::Bench { command: BenchCommand::FuzzReference } => fuzz::serve_reference(),
    };
    if let Err(message) = result {
        eprintln!("foam: {message}");
        std::process::exit(1);
    }
}

fn start(config: NodeConfig, worker_threads: Option<u16>) -> Result<(), String> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(threads) = worker_threads {
        builder.worker_threads(threads as usize);
    }
    builder.thread_stack_size(foam_common::limits::NODE_THREAD_STACK_BYTES);
    let runtime = builder.enable_all().build().map_err(|e| e.to_string())?;
    runtime.block_on(async move {
        let shutdown = async {
            let mut terminate = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(signal) => signal,
                Err(_) => return std::future::pending().await,
            };
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = terminate.recv() => {}
            }
        };
        run_node(config, shutdown).await.map_err(|e| format!("[{}] {e}", e.sqlstate()))
    })?;
    // Storage is consistent at every moment (WAL), so stopping is just exiting.
    runtime.shutdown_timeout(std::time::Duration::from_millis(500));
    Ok(())
}

/// Compares the cluster's answers to the 22 queries with the answer set in
/// `dir`, printing one line per query.
fn tpch_check(url: &str, dir: &std::path::Path) -> Result<(), String> {
    let expected = foam_tpch::answers::read_answer_set(dir)?;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(|e| e.to_string())?;
    let verdicts = runtime.block_on(async {
        let client = foam_tpch::load::connect(url).await.map_err(|e| format!("[{}] {e}", e.sqlstate()))?;
        Ok::<_, String>(foam_tpch::answers::check(&client, &expected).await)
    })?;
    let mut differing = 0;
    for verdict in &verdicts {
        match &verdict.difference {
            None => println!("Q{:02}: {} rows, same answer", verdict.query, verdict.rows),
            Some(difference) => {
                differing += 1;
                println!("Q{:02}: DIFFERS: {difference}", verdict.query);
            }
        }
    }
    match differing {
        0 => {
            println!("all {} answers match {}", verdicts.len(), dir.display());
            Ok(())
        }
        n => Err(format!("{n} of {} answers differ from {}", verdicts.len(), dir.display())),
    }
}

/// Loads TPC-H into the cluster at `url`, prints the load rate and returns
/// (rows, seconds).
pub fn tpch_load(url: &str, secret_file: Option<&std::path::Path>, scale_factor: f64) -> Result<(u64, f64), String> {
    let secret = secret_file.map(foam_rpc::ClusterSecret::load).transpose().map_err(|e| format!("[{}] {e}", e.sqlstate()))?;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(|e| e.to_string())?;
    let report = runtime
        .block_on(foam_tpch::load::load(url, secret.as_ref(), scale_factor, true))
        .map_err(|e| format!("[{}] {e}", e.sqlstate()))?;
    for table in &report.tables {
        println!(
            "{:>9}: {:>11} rows in {:>7.2} s ({:>10.0} rows/s)",
            table.table,
            table.rows,
            table.elapsed.as_secs_f64(),
            table.rows as f64 / table.elapsed.as_secs_f64().max(1e-9)
        );
    }
    println!(
        "TPC-H SF{scale_factor}: {} rows loaded in {:.2} s ({:.0} rows/s)",
        report.rows(),
        report.elapsed.as_secs_f64(),
        report.rows_per_second()
    );
    Ok((report.rows(), report.elapsed.as_secs_f64()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_runs_at_least_one_worker_thread() {
        let start = |threads: &str| {
            Cli::try_parse_from(["foam", "start", "--data-dir", "d", "--sql-addr", "127.0.0.1:1", "--node-addr", "127.0.0.1:2", "--worker-threads", threads])
        };
        assert!(matches!(start("1").map(|cli| cli.command), Ok(Command::Start(StartArgs { worker_threads: Some(1), .. }))));
        let error = start("0").err().expect("0 threads is refused").to_string();
        assert!(error.contains("--worker-threads") && error.contains("0 is not in 1..="), "{error}");
        assert!(start("two").is_err(), "a thread count is a number");
    }
}
