//! `foam bench tpch`: FoamDB's benchmark job. Starts a local cluster (or uses
//! `--url`), loads TPC-H once, runs the 22 queries in S concurrent streams,
//! checks every answer against single-process DataFusion over the same
//! generated data (as Parquet files), and prints a per-query table with both
//! engines' times and each node's peak memory.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use foam_tpch::queries::QUERIES;
use foam_tpch::reference::{compare, rows_as_text};

use crate::local::{LocalCluster, load_tpch_once};

/// Each stream starts this many queries further into the list (TPC-H
/// throughput runs also vary the order between streams).
const STREAM_QUERY_OFFSET: usize = 5;
/// Longest one benchmark query may run (the session's `statement_timeout`):
/// a query that hangs is reported as failed with 57014 instead of stopping the
/// benchmark. Far above any query at the scale factors we run (SF10's slowest
/// takes about 10 s).
const QUERY_TIMEOUT: &str = "30min";

#[derive(clap::Args)]
pub struct BenchTpchArgs {
    /// Scale factor.
    #[arg(long)]
    sf: f64,
    /// Nodes of the local cluster to start (ignored with --url).
    #[arg(long, default_value_t = 4)]
    nodes: u16,
    /// Concurrent query streams, each running all 22 queries.
    #[arg(long, default_value_t = 1)]
    streams: usize,
    /// Benchmark a running cluster instead of starting one.
    #[arg(long)]
    url: Option<String>,
    /// With --url: the cluster's `cluster-secret` file, for loading TPC-H.
    #[arg(long)]
    cluster_secret_file: Option<PathBuf>,
    /// Where local clusters keep their data (one directory per SF and node count,
    /// so a second run skips the load).
    #[arg(long, default_value = "foam-bench-data")]
    data_dir: PathBuf,
    /// First SQL port of the local cluster.
    #[arg(long, default_value_t = 25433)]
    sql_port: u16,
    /// Also run FoamDB on 1 node, DataFusion, DuckDB and datafusion-distributed
    /// on the same data and write the side-by-side report (see report.rs).
    #[arg(long)]
    compare: bool,
    /// Timed runs per query and engine with --compare (after one warm-up run).
    #[arg(long, default_value_t = 1)]
    repeat: usize,
    /// Where --compare writes its report.
    #[arg(long, default_value = "bench/results")]
    report_dir: PathBuf,
    /// Skip Virtuoso's self-join workload in the --compare report.
    #[arg(long)]
    no_self_join: bool,
}

struct QueryRun {
    query: usize,
    elapsed: Duration,
    rows: usize,
    error: Option<String>,
}

pub fn run(args: BenchTpchArgs) -> Result<(), String> {
    if args.streams == 0 {
        return Err("--streams must be at least 1".into());
    }
    if args.compare {
        if args.url.is_some() || args.streams != 1 {
            return Err("--compare starts its own clusters and runs one stream; drop --url and --streams".into());
        }
        return crate::report::run(crate::report::CompareArgs {
            sf: args.sf,
            nodes: args.nodes,
            repeat: args.repeat.max(1),
            data_dir: &args.data_dir,
            sql_port: args.sql_port,
            report_dir: &args.report_dir,
            self_join: !args.no_self_join,
        });
    }
    let never_stop = AtomicBool::new(false);
    let cluster = match &args.url {
        Some(_) => None,
        None => {
            let dir = args.data_dir.join(format!("sf{}-nodes{}", args.sf, args.nodes));
            Some(LocalCluster::start(args.nodes, &dir, args.sql_port, &Default::default(), &never_stop)?)
        }
    };
    let url = args.url.clone().unwrap_or_else(|| cluster.as_ref().map(|c| c.url()).unwrap_or_default());
    let secret_file = args.cluster_secret_file.clone().or_else(|| cluster.as_ref().and_then(|c| c.secret_file()));
    load_tpch_once(&url, secret_file.as_deref(), args.sf)?;
    if let Some(cluster) = &cluster {
        cluster.wait_until_settled()?;
    }

    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(|e| e.to_string())?;
    runtime.block_on(async {
        // The reference reads Parquet files of the same data rather than
        // holding it in memory, so it fits beside the cluster at SF10.
        let parquet_dir = args.data_dir.join(format!("sf{}-parquet", args.sf));
        println!("Writing the reference's Parquet files to {}...", parquet_dir.display());
        foam_tpch::peers::write_parquet(args.sf, &parquet_dir).await.map_err(|e| e.to_string())?;
        println!("Computing reference answers with single-process DataFusion...");
        let reference = foam_tpch::peers::datafusion_context(&parquet_dir).await.map_err(|e| e.to_string())?;
        let mut expected = Vec::new();
        let mut reference_times = Vec::new();
        for sql in QUERIES {
            let started = Instant::now();
            expected.push(rows_as_text(&reference, sql).await.map_err(|e| e.to_string())?);
            reference_times.push(started.elapsed());
        }
        drop(reference);

        println!("Running {} stream(s) of the 22 queries against {url}...", args.streams);
        let expected = std::sync::Arc::new(expected);
        let started = Instant::now();
        let mut streams = tokio::task::JoinSet::new();
        for stream in 0..args.streams {
            let url = url.clone();
            let expected = expected.clone();
            streams.spawn(async move { run_stream(&url, stream, &expected).await });
        }
        let mut runs: Vec<QueryRun> = Vec::new();
        while let Some(result) = streams.join_next().await {
            runs.extend(result.map_err(|e| e.to_string())??);
        }
        let wall = started.elapsed();

        println!();
        println!("TPC-H SF{} on {}, {} stream(s)", args.sf, if args.url.is_some() { url.clone() } else { format!("{} local nodes", args.nodes) }, args.streams);
        println!("{:>5} {:>12} {:>8} {:>8} {:>16} {:>8}", "query", "foam ms", "rows", "correct", "datafusion ms", "ratio");
        let mut all_correct = true;
        let mut foam_total = Duration::ZERO;
        for query in 0..QUERIES.len() {
            let mine: Vec<&QueryRun> = runs.iter().filter(|r| r.query == query).collect();
            let mut times: Vec<Duration> = mine.iter().map(|r| r.elapsed).collect();
            times.sort();
            let median = times[times.len() / 2];
            foam_total += median;
            let verdicts: Vec<Result<(), String>> = mine
                .iter()
                .map(|r| match &r.error {
                    Some(error) => Err(error.clone()),
                    None => Ok(()),
                })
                .collect();
            let correct = verdicts.iter().all(|v| v.is_ok());
            all_correct &= correct;
            let reference = reference_times[query];
            println!(
                "{:>5} {:>12.1} {:>8} {:>8} {:>16.1} {:>8.2}",
                format!("Q{}", query + 1),
                median.as_secs_f64() * 1e3,
                mine.first().map(|r| r.rows).unwrap_or(0),
                if correct { "yes" } else { "NO" },
                reference.as_secs_f64() * 1e3,
                median.as_secs_f64() / reference.as_secs_f64().max(1e-9),
            );
            for verdict in verdicts.iter().filter_map(|v| v.as_ref().err()) {
                println!("      Q{}: {verdict}", query + 1);
            }
        }
        println!(
            "total (median per query) {:.1} ms; wall time {:.1} s for {} queries",
            foam_total.as_secs_f64() * 1e3,
            wall.as_secs_f64(),
            runs.len()
        );
        if let Some(cluster) = &cluster {
            let peaks: Vec<String> = cluster
                .peak_rss_mb()
                .iter()
                .enumerate()
                .map(|(i, mb)| format!("node {i}: {}", mb.map(|m| format!("{m} MiB")).unwrap_or_else(|| "?".into())))
                .collect();
            println!("peak resident memory (VmHWM): {}", peaks.join(", "));
        }
        if all_correct { Ok(()) } else { Err("some answers were wrong".to_string()) }
    })
}

/// Runs all 22 queries once on its own connection, starting at an offset, and
/// checks each answer against `expected`.
async fn run_stream(url: &str, stream: usize, expected: &[Vec<Vec<String>>]) -> Result<Vec<QueryRun>, String> {
    let client = foam_tpch::load::connect(url).await.map_err(|e| e.to_string())?;
    client.batch_execute(&format!("SET statement_timeout = '{QUERY_TIMEOUT}'")).await.map_err(|e| e.to_string())?;
    let mut runs = Vec::new();
    for step in 0..QUERIES.len() {
        let query = (stream * STREAM_QUERY_OFFSET + step) % QUERIES.len();
        let started = Instant::now();
        let result = client.simple_query(QUERIES[query]).await;
        let elapsed = started.elapsed();
        let (rows, error) = match result {
            Ok(messages) => {
                let actual: Vec<Vec<String>> = messages
                    .iter()
                    .filter_map(|m| match m {
                        tokio_postgres::SimpleQueryMessage::Row(row) => {
                            Some((0..row.len()).map(|i| row.get(i).unwrap_or("NULL").to_string()).collect())
                        }
                        _ => None,
                    })
                    .collect();
                (actual.len(), compare(&expected[query], &actual).err())
            }
            Err(error) => (0, Some(error.to_string())),
        };
        runs.push(QueryRun { query, elapsed, rows, error });
    }
    Ok(runs)
}
