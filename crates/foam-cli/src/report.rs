//! `foam bench tpch --compare`: the side-by-side benchmark report. In one run,
//! on this machine and the same generated data, it measures
//!
//! ```text
//!   FoamDB, N nodes   ─┐ local clusters (real processes), loaded by `foam tpch load`;
//!   FoamDB, 1 node    ─┘ bytes between nodes from foam_cluster_stats, peak RSS per node
//!   DataFusion        ── one process over Parquet files of the same data
//!   DuckDB            ── bench/duckdb_tpch.py over the same Parquet files, and
//!                        again over its own storage (the files copied in first)
//!   datafusion-distributed, default planner, N in-process workers over the Parquet files
//!   Virtuoso's self-join on the FoamDB clusters (once, a stream of 10, 4 and 16 streams)
//! ```
//! checks every engine's answers against the reference, and writes
//! `bench/results/tpch-sf<SF>-<date>.md` with a JSON file and a PNG chart
//! (bench/chart.py). Every time is the median of `--repeat` runs after one
//! warm-up run; nothing here is asserted, it is measured.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use foam_tpch::peers::Generation;
use foam_tpch::queries::QUERIES;
use foam_tpch::answers::simple_rows;
use foam_tpch::reference::{batches_as_text, compare};

use crate::local::{LocalCluster, load_tpch_once};

/// Rows of Virtuoso's self-join table.
const SELF_JOIN_ROWS: u64 = 1_000_000;
const SELF_JOIN_SQL: &str = "SELECT count(*) FROM ct a, ct b WHERE b.row_no = a.row_no + 3";

/// One engine's results for the 22 queries.
#[derive(Debug, Clone, Default)]
pub struct EngineResult {
    pub name: String,
    /// Median milliseconds per query; `None` when the query failed.
    pub ms: Vec<Option<f64>>,
    pub correct: Vec<Option<bool>>,
    /// Bytes sent between nodes per query, for distributed engines.
    pub bytes: Vec<Option<u64>>,
    pub notes: Vec<String>,
}

impl EngineResult {
    fn new(name: impl Into<String>) -> Self {
        EngineResult {
            name: name.into(),
            ms: vec![None; QUERIES.len()],
            correct: vec![None; QUERIES.len()],
            bytes: vec![None; QUERIES.len()],
            notes: Vec::new(),
        }
    }

    fn total_ms(&self) -> Option<f64> {
        self.ms.iter().copied().sum()
    }

    fn total_bytes(&self) -> Option<u64> {
        self.bytes.iter().copied().sum()
    }
}

/// The load's baselines, measured in the same run: rows generated, and
/// seconds to generate them alone and to generate and encode them.
#[derive(Debug, Clone, Copy)]
struct LoadBaseline {
    rows: u64,
    generate_secs: f64,
    encode_secs: f64,
}

/// One self-join case on one cluster.
#[derive(Debug, Clone)]
struct SelfJoinCase {
    cluster: String,
    case: String,
    queries: usize,
    wall: Duration,
    bytes: Option<u64>,
    correct: bool,
}

/// One query at one exchange batch size.
#[derive(Debug, Clone)]
struct BatchSizeCase {
    query: String,
    batch_rows: u64,
    elapsed: Duration,
    messages: Option<u64>,
    bytes: Option<u64>,
    error: Option<String>,
}

/// What a FoamDB cluster run measured besides query times.
struct FoamRun {
    result: EngineResult,
    load: Option<(u64, f64)>,
    peak_rss_mb: Vec<Option<u64>>,
    self_join: Vec<SelfJoinCase>,
    batch_sizes: Vec<BatchSizeCase>,
}

/// Exchange batch sizes compared (rows per batch sent between nodes).
const EXCHANGE_BATCH_ROWS: [u64; 3] = [10_000, 100_000, 1_000_000];

pub struct CompareArgs<'a> {
    pub sf: f64,
    pub nodes: u16,
    pub repeat: usize,
    pub data_dir: &'a Path,
    pub sql_port: u16,
    pub report_dir: &'a Path,
    pub self_join: bool,
}

fn median(mut values: Vec<f64>) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(|a, b| a.total_cmp(b));
    Some(values[values.len() / 2])
}

pub fn run(args: CompareArgs<'_>) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(|e| e.to_string())?;
    let parquet_dir = args.data_dir.join(format!("sf{}-parquet", args.sf));
    let (expected, generation) = runtime.block_on(async {
        println!("Measuring tpchgen alone, and with segment encoding (in memory)...");
        let generate = foam_tpch::peers::generate_in_memory(args.sf, Generation::Discard).await.map_err(|e| e.to_string())?;
        let encode = foam_tpch::peers::generate_in_memory(args.sf, Generation::EncodeSegments).await.map_err(|e| e.to_string())?;
        let generation = LoadBaseline { rows: generate.0, generate_secs: generate.1, encode_secs: encode.1 };
        println!("Writing Parquet files to {}...", parquet_dir.display());
        foam_tpch::peers::write_parquet(args.sf, &parquet_dir).await.map_err(|e| e.to_string())?;
        println!("Computing reference answers with single-process DataFusion...");
        let reference = foam_tpch::reference::reference_context(args.sf).await.map_err(|e| e.to_string())?;
        let mut expected = Vec::new();
        for sql in QUERIES {
            expected.push(foam_tpch::reference::rows_as_text(&reference, sql).await.map_err(|e| e.to_string())?);
        }
        Ok::<_, String>((expected, generation))
    })?;

    let mut foam_runs = Vec::new();
    let mut node_counts = vec![args.nodes];
    if args.nodes != 1 {
        node_counts.push(1);
    }
    for nodes in node_counts {
        foam_runs.push(foam_cluster_run(&args, nodes, &expected)?);
    }
    let mut engines: Vec<EngineResult> = foam_runs.iter().map(|r| r.result.clone()).collect();
    runtime.block_on(async {
        println!("DataFusion over Parquet...");
        let ctx = foam_tpch::peers::datafusion_context(&parquet_dir).await.map_err(|e| e.to_string())?;
        engines.push(run_datafusion("DataFusion (1 process, Parquet)", &ctx, args.repeat, &expected, None).await);
        drop(ctx);
        println!("datafusion-distributed, default planner, {} workers...", args.nodes);
        let peer = foam_tpch::peers::distributed_peer(&parquet_dir, args.nodes as usize).await.map_err(|e| e.to_string())?;
        let name = format!("datafusion-distributed ({} workers)", args.nodes);
        engines.push(run_datafusion(&name, &peer.ctx, args.repeat, &expected, Some(&peer.traffic)).await);
        Ok::<_, String>(())
    })?;
    for storage in [DuckDbStorage::Parquet, DuckDbStorage::Native] {
        println!("DuckDB ({})...", storage.label());
        engines.push(run_duckdb(&parquet_dir, args.repeat, storage, &expected));
    }

    let date = today();
    std::fs::create_dir_all(args.report_dir).map_err(|e| e.to_string())?;
    // Not `with_extension`: the scale factor may hold a dot (sf0.1).
    let file = |extension: &str| args.report_dir.join(format!("tpch-sf{}-{date}.{extension}", args.sf));
    let json = chart_json(args.sf, &engines);
    std::fs::write(file("json"), &json).map_err(|e| e.to_string())?;
    let chart = file("png");
    let charted = draw_chart(&file("json"), &chart);
    let markdown = report_markdown(&args, &date, generation, &foam_runs, &engines, charted.as_ref().ok().map(|_| chart.as_path()));
    std::fs::write(file("md"), &markdown).map_err(|e| e.to_string())?;
    if let Err(error) = charted {
        eprintln!("chart not drawn: {error}");
    }
    println!("{markdown}");
    println!("Report written to {}", file("md").display());
    Ok(())
}

/// Starts a local cluster of `nodes`, loads TPC-H once, runs the queries and
/// the self-join, and stops it.
fn foam_cluster_run(args: &CompareArgs<'_>, nodes: u16, expected: &[Vec<Vec<String>>]) -> Result<FoamRun, String> {
    let never_stop = AtomicBool::new(false);
    let dir = args.data_dir.join(format!("sf{}-nodes{}", args.sf, nodes));
    println!("FoamDB, {nodes} node(s), data in {}...", dir.display());
    let cluster = LocalCluster::start(nodes, &dir, args.sql_port, &Default::default(), &never_stop)?;
    let url = cluster.url();
    let load = load_tpch_once(&url, cluster.secret_file().as_deref(), args.sf)?;
    cluster.wait_until_settled()?;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(|e| e.to_string())?;
    let name = if nodes == 1 { "FoamDB (1 node)".to_string() } else { format!("FoamDB ({nodes} nodes)") };
    let result = runtime.block_on(async {
        let client = foam_tpch::load::connect(&url).await.map_err(|e| e.to_string())?;
        let mut result = EngineResult::new(name.clone());
        let mut times: Vec<Vec<f64>> = vec![Vec::new(); QUERIES.len()];
        for pass in 0..=args.repeat {
            for (query, sql) in QUERIES.iter().enumerate() {
                let measure_bytes = pass == args.repeat && nodes > 1;
                if measure_bytes {
                    let _ = client.simple_query("SELECT foam_cluster_stats_reset()").await;
                }
                let started = Instant::now();
                let outcome = client.simple_query(sql).await;
                let elapsed = started.elapsed();
                let verdict = match outcome {
                    Ok(messages) => compare(&expected[query], &simple_rows(&messages)),
                    Err(error) => Err(error.to_string()),
                };
                if let Err(error) = &verdict {
                    result.notes.push(format!("Q{}: {error}", query + 1));
                }
                let ok = verdict.is_ok();
                result.correct[query] = Some(result.correct[query].unwrap_or(true) && ok);
                if pass > 0 && ok {
                    times[query].push(elapsed.as_secs_f64() * 1e3);
                }
                if measure_bytes {
                    result.bytes[query] = cluster_bytes(&client).await;
                }
            }
        }
        for (query, t) in times.into_iter().enumerate() {
            result.ms[query] = median(t);
        }
        let self_join = if args.self_join { self_join_cases(&url, &name, nodes).await } else { Vec::new() };
        let batch_sizes = if nodes > 1 { batch_size_cases(&url, args.self_join).await } else { Vec::new() };
        Ok::<_, String>((result, self_join, batch_sizes))
    })?;
    let (result, self_join, batch_sizes) = (result.0, result.1, result.2);
    let peak_rss_mb = cluster.peak_rss_mb();
    drop(cluster);
    Ok(FoamRun { result, load, peak_rss_mb, self_join, batch_sizes })
}

async fn cluster_bytes(client: &tokio_postgres::Client) -> Option<u64> {
    cluster_counts(client).await.map(|(_, bytes)| bytes)
}

/// (messages, bytes) sent between nodes since the last reset.
async fn cluster_counts(client: &tokio_postgres::Client) -> Option<(u64, u64)> {
    let messages =
        client.simple_query("SELECT messages_sent, bytes_sent FROM foam_cluster_stats WHERE node_id IS NULL").await.ok()?;
    let rows = simple_rows(&messages);
    let row = rows.first()?;
    Some((row.first()?.parse().ok()?, row.get(1)?.parse().ok()?))
}

/// The server's message for a failed statement, else the client's error.
fn server_message(error: &tokio_postgres::Error) -> String {
    error.as_db_error().map(|d| d.message().to_string()).unwrap_or_else(|| error.to_string())
}

/// Q13 and the self-join with each exchange batch size, as Virtuoso's TPC-H
/// cluster tests varied theirs.
async fn batch_size_cases(url: &str, self_join: bool) -> Vec<BatchSizeCase> {
    let failed = |rows: u64, error: String| BatchSizeCase {
        query: "all".to_string(),
        batch_rows: rows,
        elapsed: std::time::Duration::ZERO,
        messages: None,
        bytes: None,
        error: Some(error),
    };
    let client = match foam_tpch::load::connect(url).await {
        Ok(client) => client,
        Err(error) => return vec![failed(0, error.to_string())],
    };
    let mut queries = vec![("Q13".to_string(), QUERIES[12].to_string())];
    if self_join {
        queries.push(("self-join".to_string(), SELF_JOIN_SQL.to_string()));
    }
    let mut cases = Vec::new();
    for rows in EXCHANGE_BATCH_ROWS {
        if let Err(error) = client.simple_query(&format!("SET foam.exchange_batch_rows = {rows}")).await {
            cases.push(failed(rows, server_message(&error)));
            return cases;
        }
        for (name, sql) in &queries {
            let _ = client.simple_query(sql).await; // warm-up
            let _ = client.simple_query("SELECT foam_cluster_stats_reset()").await;
            let started = Instant::now();
            let error = client.simple_query(sql).await.err().map(|e| server_message(&e));
            let elapsed = started.elapsed();
            let counts = cluster_counts(&client).await;
            cases.push(BatchSizeCase {
                query: name.clone(),
                batch_rows: rows,
                elapsed,
                messages: counts.map(|c| c.0),
                bytes: counts.map(|c| c.1),
                error,
            });
        }
    }
    cases
}

/// Virtuoso's cluster workload: 1,000,000 short rows joined to themselves on
/// `b.row_no = a.row_no + 3`, so every match is in another partition.
async fn self_join_cases(url: &str, cluster: &str, nodes: u16) -> Vec<SelfJoinCase> {
    let Ok(client) = foam_tpch::load::connect(url).await else { return Vec::new() };
    let exists = client.simple_query("SELECT count(*) FROM ct").await.is_ok();
    if !exists {
        let setup = format!(
            "CREATE TABLE ct (row_no BIGINT, string1 TEXT, string2 TEXT) DISTRIBUTED BY (row_no);
             INSERT INTO ct SELECT value, 'string ' || value, 'other ' || (value % 1000) FROM generate_series(1, {SELF_JOIN_ROWS})"
        );
        if let Err(error) = client.batch_execute(&setup).await {
            eprintln!("self-join setup failed: {error}");
            return Vec::new();
        }
    }
    // One INSERT leaves 62,500 rows a partition in memtables on 4 nodes but
    // writes segments on 1 node (250,000 rows a partition): both clusters
    // must read the same storage for the times to compare.
    if let Err(error) = client.simple_query("CHECKPOINT").await {
        eprintln!("self-join: CHECKPOINT failed ({error}); its rows may be read from memtables");
    }
    let expected = (SELF_JOIN_ROWS - 3).to_string();
    let mut cases = Vec::new();
    for (case, streams, per_stream) in [("once", 1usize, 1usize), ("stream of 10", 1, 10), ("4 parallel streams", 4, 1), ("16 parallel streams", 16, 1)] {
        let bytes_before = if nodes > 1 && streams == 1 && per_stream == 1 {
            let _ = client.simple_query("SELECT foam_cluster_stats_reset()").await;
            true
        } else {
            false
        };
        let started = Instant::now();
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..streams {
            let url = url.to_string();
            let expected = expected.clone();
            tasks.spawn(async move {
                let client = foam_tpch::load::connect(&url).await.map_err(|e| e.to_string())?;
                for _ in 0..per_stream {
                    let rows = simple_rows(&client.simple_query(SELF_JOIN_SQL).await.map_err(|e| e.to_string())?);
                    if rows != vec![vec![expected.clone()]] {
                        return Err(format!("self-join returned {rows:?}"));
                    }
                }
                Ok::<_, String>(())
            });
        }
        let mut correct = true;
        while let Some(done) = tasks.join_next().await {
            if !matches!(done, Ok(Ok(()))) {
                correct = false;
            }
        }
        let wall = started.elapsed();
        let bytes = if bytes_before { cluster_bytes(&client).await } else { None };
        cases.push(SelfJoinCase { cluster: cluster.to_string(), case: case.into(), queries: streams * per_stream, wall, bytes, correct });
    }
    cases
}

/// Runs the queries in a DataFusion context: one warm-up pass, `repeat`
/// timed passes; `traffic` counts bytes between workers (last pass).
async fn run_datafusion(
    name: &str,
    ctx: &datafusion::prelude::SessionContext,
    repeat: usize,
    expected: &[Vec<Vec<String>>],
    traffic: Option<&foam_tpch::peers::PeerBytes>,
) -> EngineResult {
    let mut result = EngineResult::new(name);
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); QUERIES.len()];
    for pass in 0..=repeat {
        for (query, sql) in QUERIES.iter().enumerate() {
            if let Some(t) = traffic {
                t.take();
            }
            let started = Instant::now();
            let outcome = match ctx.sql(sql).await {
                Ok(frame) => frame.collect().await,
                Err(error) => Err(error),
            };
            let elapsed = started.elapsed();
            let verdict = outcome.map_err(|e| e.to_string()).and_then(|b| batches_as_text(&b).map_err(|e| e.to_string())).and_then(|rows| compare(&expected[query], &rows));
            if let Err(error) = &verdict {
                result.notes.push(format!("Q{}: {error}", query + 1));
            }
            result.correct[query] = Some(result.correct[query].unwrap_or(true) && verdict.is_ok());
            if pass > 0 && verdict.is_ok() {
                times[query].push(elapsed.as_secs_f64() * 1e3);
            }
            if let (Some(t), true) = (traffic, pass == repeat) {
                result.bytes[query] = Some(t.take().1);
            }
        }
    }
    for (query, t) in times.into_iter().enumerate() {
        result.ms[query] = median(t);
    }
    result
}

/// The Python interpreter of the benchmark's virtualenv, created on first use
/// from bench/requirements.txt.
fn bench_python() -> Result<PathBuf, String> {
    let python = PathBuf::from(".venv-bench/bin/python");
    if python.exists() {
        return Ok(python);
    }
    let status = std::process::Command::new("python3").args(["-m", "venv", ".venv-bench"]).status().map_err(|e| e.to_string())?;
    if !status.success() {
        return Err("python3 -m venv .venv-bench failed".into());
    }
    let status = std::process::Command::new(&python)
        .args(["-m", "pip", "install", "--quiet", "-r", "bench/requirements.txt"])
        .status()
        .map_err(|e| e.to_string())?;
    if !status.success() {
        return Err("pip install -r bench/requirements.txt failed".into());
    }
    Ok(python)
}

/// Where DuckDB reads the tables from.
#[derive(Debug, Clone, Copy)]
enum DuckDbStorage {
    /// Views over the Parquet files every engine reads.
    Parquet,
    /// Tables copied into DuckDB's own database file first, as a user who
    /// picked DuckDB would store them.
    Native,
}

impl DuckDbStorage {
    fn label(self) -> &'static str {
        match self {
            DuckDbStorage::Parquet => "Parquet",
            DuckDbStorage::Native => "own storage",
        }
    }

    fn flag(self) -> &'static str {
        match self {
            DuckDbStorage::Parquet => "parquet",
            DuckDbStorage::Native => "native",
        }
    }
}

/// Runs bench/duckdb_tpch.py; its answers (text from DuckDB's own values)
/// are checked against the reference like every engine's.
fn run_duckdb(parquet_dir: &Path, repeat: usize, storage: DuckDbStorage, expected: &[Vec<Vec<String>>]) -> EngineResult {
    let mut result = EngineResult::new(format!("DuckDB ({})", storage.label()));
    let output = bench_python().and_then(|python| {
        std::process::Command::new(python)
            .args(["bench/duckdb_tpch.py", "--parquet-dir"])
            .arg(parquet_dir)
            .args(["--storage", storage.flag(), "--queries-dir", "crates/foam-tpch/queries", "--repeat", &repeat.max(1).to_string(), "--threads"])
            .arg(std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1).to_string())
            .output()
            .map_err(|e| e.to_string())
    });
    let output = match output {
        Ok(output) => {
            // A failed query makes the script exit 1 but still print the others' times.
            if !output.status.success() {
                result.notes.push(format!("duckdb_tpch.py: {}", String::from_utf8_lossy(&output.stderr).trim()));
            }
            output
        }
        Err(error) => {
            result.notes.push(format!("DuckDB not run: {error}"));
            return result;
        }
    };
    let parsed: serde_json::Value = match serde_json::from_slice(&output.stdout) {
        Ok(v) => v,
        Err(error) => {
            result.notes.push(format!("duckdb_tpch.py printed no JSON: {error}"));
            return result;
        }
    };
    if let Some(version) = parsed.get("version").and_then(|v| v.as_str()) {
        result.name = format!("DuckDB {version} ({})", storage.label());
    }
    for entry in parsed.get("queries").and_then(|q| q.as_array()).into_iter().flatten() {
        let Some(query) = entry.get("query").and_then(|q| q.as_u64()).map(|q| q as usize - 1) else { continue };
        let times: Vec<f64> = entry.get("ms").and_then(|m| m.as_array()).into_iter().flatten().filter_map(|v| v.as_f64()).collect();
        if query >= QUERIES.len() {
            continue;
        }
        result.ms[query] = median(times);
        let answer: Option<Vec<Vec<String>>> = entry.get("answer").and_then(|a| serde_json::from_value(a.clone()).ok());
        result.correct[query] = answer.map(|rows| match compare(&expected[query], &rows) {
            Ok(()) => true,
            Err(difference) => {
                result.notes.push(format!("Q{}: DuckDB's answer differs from the reference: {difference}", query + 1));
                false
            }
        });
    }
    if let Some(load_ms) = parsed.get("load_ms").and_then(|v| v.as_f64()) {
        result.notes.push(format!("copying the Parquet files into DuckDB's own storage took {:.0} ms (not in the query times)", load_ms));
    }
    result
}

fn chart_json(sf: f64, engines: &[EngineResult]) -> String {
    let queries: Vec<serde_json::Value> = (0..QUERIES.len())
        .map(|q| {
            let ms: serde_json::Map<String, serde_json::Value> =
                engines.iter().filter_map(|e| e.ms[q].map(|ms| (e.name.clone(), serde_json::json!(ms)))).collect();
            let bytes: serde_json::Map<String, serde_json::Value> =
                engines.iter().filter_map(|e| e.bytes[q].map(|b| (e.name.clone(), serde_json::json!(b)))).collect();
            serde_json::json!({ "query": q + 1, "ms": ms, "bytes": bytes })
        })
        .collect();
    let value = serde_json::json!({
        "title": format!("TPC-H SF{sf}: milliseconds per query ({} cores, one run each engine)", std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)),
        "engines": engines.iter().map(|e| e.name.clone()).collect::<Vec<_>>(),
        "queries": queries,
    });
    serde_json::to_string_pretty(&value).unwrap_or_default()
}

fn draw_chart(json: &Path, png: &Path) -> Result<(), String> {
    let python = bench_python()?;
    let output = std::process::Command::new(python).arg("bench/chart.py").arg(json).arg(png).output().map_err(|e| e.to_string())?;
    if output.status.success() { Ok(()) } else { Err(String::from_utf8_lossy(&output.stderr).into_owned()) }
}

fn today() -> String {
    std::process::Command::new("date")
        .arg("+%Y-%m-%d")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|d| !d.is_empty())
        .unwrap_or_else(|| "undated".into())
}

fn fmt_ms(ms: Option<f64>) -> String {
    ms.map(|v| format!("{v:.1}")).unwrap_or_else(|| "—".into())
}

fn fmt_bytes(bytes: Option<u64>) -> String {
    match bytes {
        Some(b) if b >= 10 << 20 => format!("{:.1} MB", b as f64 / 1048576.0),
        Some(b) if b >= 10 << 10 => format!("{:.1} KB", b as f64 / 1024.0),
        Some(b) => format!("{b} B"),
        None => "—".into(),
    }
}

fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}", a / b),
        _ => "—".into(),
    }
}

fn report_markdown(
    args: &CompareArgs<'_>,
    date: &str,
    generation: LoadBaseline,
    foam_runs: &[FoamRun],
    engines: &[EngineResult],
    chart: Option<&Path>,
) -> String {
    let mut md = String::new();
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let _ = writeln!(md, "# TPC-H SF{} — FoamDB side by side ({date})\n", args.sf);
    let _ = writeln!(
        md,
        "Measured by `foam bench tpch --sf {} --nodes {} --compare --repeat {}` (release build) on one machine with {cores} cores; \
         every engine ran on the same machine, one after the other, over the same generated data. \
         Times are the median of {} run(s) after one warm-up run; machines here are shared and noisy, so read ratios, not absolute times.\n",
        args.sf, args.nodes, args.repeat, args.repeat
    );
    let _ = writeln!(md, "## Load\n");
    let LoadBaseline { rows: gen_rows, generate_secs: gen_secs, encode_secs } = generation;
    let gen_rate = gen_rows as f64 / gen_secs.max(1e-9);
    let encode_rate = gen_rows as f64 / encode_secs.max(1e-9);
    let _ = writeln!(md, "| what | rows | seconds | rows/s | vs tpchgen alone |\n|---|---:|---:|---:|---:|");
    let _ = writeln!(md, "| tpchgen alone, in memory ({cores} threads) | {gen_rows} | {gen_secs:.2} | {gen_rate:.0} | 1.00 |");
    let _ = writeln!(
        md,
        "| tpchgen and encoding into segments, in memory ({cores} threads) | {gen_rows} | {encode_secs:.2} | {encode_rate:.0} | {:.2} |",
        encode_rate / gen_rate
    );
    for run in foam_runs {
        match run.load {
            Some((rows, secs)) => {
                let rate = rows as f64 / secs.max(1e-9);
                let _ = writeln!(md, "| `foam tpch load` into {} | {rows} | {secs:.2} | {rate:.0} | {:.2} |", run.result.name, rate / gen_rate);
            }
            None => {
                let _ = writeln!(md, "| `foam tpch load` into {} | (loaded by an earlier run) | | | |", run.result.name);
            }
        }
    }
    let _ = writeln!(
        md,
        "\nThe second row is the least any load into FoamDB's storage does: each batch cast to the table's column types and encoded \
         into a Parquet segment (LZ4 pages, the loader's encodings), with no split by partition, no network and no disk. \
         A load writes every row to each copy of its partition: {} copies on {} nodes (the default, `REPLICAS {}`), one on a single node. \
         Nation and region are on every node.",
        foam_common::limits::REPLICAS_DEFAULT.min(args.nodes as u32),
        args.nodes,
        foam_common::limits::REPLICAS_DEFAULT
    );
    let _ = writeln!(md, "\n## Queries (milliseconds)\n");
    if let Some(chart) = chart {
        let _ = writeln!(md, "![chart]({})\n", chart.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default());
    }
    let mut header = "| query |".to_string();
    let mut rule = "|---|".to_string();
    for engine in engines {
        let _ = write!(header, " {} |", engine.name);
        rule.push_str("---:|");
    }
    let _ = writeln!(md, "{header} answers |\n{rule}---|");
    for q in 0..QUERIES.len() {
        let mut line = format!("| Q{} |", q + 1);
        for engine in engines {
            let _ = write!(line, " {} |", fmt_ms(engine.ms[q]));
        }
        let verdicts: Vec<String> = engines
            .iter()
            .filter_map(|e| e.correct[q].map(|c| if c { "ok" } else { "WRONG" }.to_string()))
            .collect();
        let all_ok = verdicts.iter().all(|v| v == "ok");
        let _ = writeln!(line, " {} |", if all_ok { format!("all {} checked correct", verdicts.len()) } else { verdicts.join("/") });
        md.push_str(&line);
    }
    let mut total = "| **total** |".to_string();
    for engine in engines {
        let _ = write!(total, " **{}** |", fmt_ms(engine.total_ms()));
    }
    let _ = writeln!(md, "{total} |");

    let _ = writeln!(md, "\n## Ratios (total time; lower is better for the first engine)\n");
    let find = |prefix: &str| engines.iter().find(|e| e.name.starts_with(prefix));
    let duckdb_own = engines.iter().find(|e| e.name.starts_with("DuckDB") && e.name.ends_with("(own storage)"));
    let foam_n = engines.first();
    let foam_1 = engines.iter().find(|e| e.name == "FoamDB (1 node)");
    let pairs = [
        (foam_n, foam_1, "target ≤ 1.3: partitioning overhead on the same cores"),
        (foam_1, find("DataFusion"), "target ≤ 1.1"),
        (foam_n, find("datafusion-distributed"), "target < 1"),
        (foam_n, find("DuckDB"), "the bar we mean to pass"),
        (foam_1, find("DuckDB"), ""),
        (foam_n, duckdb_own, "DuckDB as its users run it"),
        (foam_1, duckdb_own, ""),
    ];
    let _ = writeln!(md, "| ratio | value | note |\n|---|---:|---|");
    for (a, b, note) in pairs {
        if let (Some(a), Some(b)) = (a, b) {
            let _ = writeln!(md, "| {} / {} | {} | {note} |", a.name, b.name, ratio(a.total_ms(), b.total_ms()));
        }
    }

    let _ = writeln!(md, "\n## Bytes sent between nodes\n");
    let _ = writeln!(
        md,
        "Arrow buffer bytes of every batch that crossed from one node (or worker) to another, counted where it was received; \
         data a node reads from itself is not counted. The datafusion-distributed coordinator counts as its first worker, \
         as a FoamDB coordinator is one of the nodes.\n"
    );
    let distributed: Vec<&EngineResult> = engines.iter().filter(|e| e.bytes.iter().any(|b| b.is_some())).collect();
    let mut header = "| query |".to_string();
    let mut rule = "|---|".to_string();
    for engine in &distributed {
        let _ = write!(header, " {} |", engine.name);
        rule.push_str("---:|");
    }
    let _ = writeln!(md, "{header}\n{rule}");
    for q in 0..QUERIES.len() {
        let mut line = format!("| Q{} |", q + 1);
        for engine in &distributed {
            let _ = write!(line, " {} |", fmt_bytes(engine.bytes[q]));
        }
        let _ = writeln!(md, "{line}");
    }
    let mut total = "| **total** |".to_string();
    for engine in &distributed {
        let _ = write!(total, " **{}** |", fmt_bytes(engine.total_bytes()));
    }
    let _ = writeln!(md, "{total}");
    if let (Some(foam), Some(dfd)) = (distributed.first(), distributed.iter().find(|e| e.name.starts_with("datafusion-distributed"))) {
        match (foam.total_bytes(), dfd.total_bytes()) {
            (Some(_), Some(0)) => {
                let _ = writeln!(md, "\n{} sent nothing between workers: at this size it ran every stage in one task.", dfd.name);
            }
            (Some(a), Some(b)) => {
                let _ = writeln!(md, "\n{} sends {:.2}x the bytes of {} (target ≤ 0.5).", foam.name, a as f64 / b as f64, dfd.name);
            }
            _ => {}
        }
    }

    let _ = writeln!(md, "\n## Peak memory per node (VmHWM)\n");
    for run in foam_runs {
        let values: Vec<String> = run
            .peak_rss_mb
            .iter()
            .enumerate()
            .map(|(i, v)| format!("node {i}: {}", v.map(|mb| format!("{mb} MiB")).unwrap_or_else(|| "?".into())))
            .collect();
        let _ = writeln!(md, "- {}: {}", run.result.name, values.join(", "));
    }

    let cases: Vec<&SelfJoinCase> = foam_runs.iter().flat_map(|r| r.self_join.iter()).collect();
    if !cases.is_empty() {
        let _ = writeln!(md, "\n## Virtuoso's self-join\n");
        let _ = writeln!(md, "`{SELF_JOIN_SQL}` over {SELF_JOIN_ROWS} rows distributed by row_no (every match lives in another partition).\n");
        let _ = writeln!(md, "| cluster | case | queries | wall s | queries/s | bytes between nodes (one query) | correct |\n|---|---|---:|---:|---:|---:|---|");
        for c in &cases {
            let _ = writeln!(
                md,
                "| {} | {} | {} | {:.2} | {:.2} | {} | {} |",
                c.cluster,
                c.case,
                c.queries,
                c.wall.as_secs_f64(),
                c.queries as f64 / c.wall.as_secs_f64().max(1e-9),
                fmt_bytes(c.bytes),
                if c.correct { "yes" } else { "NO" }
            );
        }
    }

    let batch_cases: Vec<&BatchSizeCase> = foam_runs.iter().flat_map(|r| r.batch_sizes.iter()).collect();
    if !batch_cases.is_empty() {
        let _ = writeln!(md, "\n## Exchange batch size ({})\n", engines.first().map(|e| e.name.as_str()).unwrap_or(""));
        let _ = writeln!(md, "`SET foam.exchange_batch_rows = n` (default: DataFusion's batch size, 8192 rows).\n");
        let _ = writeln!(md, "| query | rows per batch | ms | messages between nodes | bytes between nodes |\n|---|---:|---:|---:|---:|");
        for c in batch_cases {
            if let Some(error) = &c.error {
                let _ = writeln!(md, "| {} | {} | failed: {error} | | |", c.query, c.batch_rows);
                continue;
            }
            let _ = writeln!(
                md,
                "| {} | {} | {:.1} | {} | {} |",
                c.query,
                c.batch_rows,
                c.elapsed.as_secs_f64() * 1e3,
                c.messages.map(|m| m.to_string()).unwrap_or_else(|| "—".into()),
                fmt_bytes(c.bytes)
            );
        }
    }

    let notes: Vec<String> = engines.iter().flat_map(|e| e.notes.iter().map(move |n| format!("- {}: {n}", e.name))).collect();
    if !notes.is_empty() {
        let _ = writeln!(md, "\n## Notes\n");
        for note in notes.iter().take(60) {
            let _ = writeln!(md, "{note}");
        }
    }
    md
}
