//! `foam bench fuzz`: the differential fuzzer (foam-fuzz) run long against a
//! local cluster it starts, or a running one (`--url`). Prints every
//! difference with its reduced reproduction, appends the reproductions to a
//! sqllogictest file when asked (`--save`), and exits non-zero if any was
//! found.

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;

use crate::local::LocalCluster;

#[derive(clap::Args)]
pub struct BenchFuzzArgs {
    /// Queries to run in all.
    #[arg(long, default_value_t = 10_000)]
    queries: u64,
    /// First seed; seeds S, S+1, ... each make a database and run
    /// --queries-per-seed queries on it.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[arg(long, default_value_t = 200)]
    queries_per_seed: u64,
    /// Nodes of the local cluster to start (ignored with --url).
    #[arg(long, default_value_t = 4)]
    nodes: u16,
    /// Fuzz a running cluster instead of starting one.
    #[arg(long)]
    url: Option<String>,
    /// Where the local cluster keeps its data (emptied first).
    #[arg(long, default_value = "foam-fuzz-data")]
    data_dir: PathBuf,
    /// First SQL port of the local cluster.
    #[arg(long, default_value_t = 26433)]
    sql_port: u16,
    /// Append each reduced reproduction to this .slt file.
    #[arg(long)]
    save: Option<PathBuf>,
    /// Report differences without reducing them.
    #[arg(long)]
    no_reduce: bool,
    /// Stop after this many differences.
    #[arg(long, default_value_t = 20)]
    failures_max: usize,
    /// A PostgreSQL server (URL of a scratch database, whose fz* tables
    /// are replaced) to judge differences: one where PostgreSQL answers as
    /// FoamDB does is counted as the reference's error.
    #[arg(long)]
    postgres: Option<String>,
    /// Queries checked at once, each on its own session and reference
    /// process (differences are still reduced one at a time).
    #[arg(long, default_value_t = 2)]
    lanes: usize,
    /// Random writes (UPDATE, DELETE, INSERT, alone or in blocks) per seed
    /// after its queries, compared with --postgres, which they need.
    #[arg(long, default_value_t = 0)]
    writes_per_seed: u64,
    /// Leave the last seed's tables in the cluster (with --url) to rerun a
    /// failing query by hand.
    #[arg(long)]
    keep_tables: bool,
}

pub fn run(args: BenchFuzzArgs) -> Result<(), String> {
    if args.queries_per_seed == 0 {
        return Err("--queries-per-seed must be at least 1".into());
    }
    let never_stop = AtomicBool::new(false);
    let cluster = match &args.url {
        Some(_) => None,
        None => {
            let _ = std::fs::remove_dir_all(&args.data_dir);
            let cluster = LocalCluster::start(args.nodes, &args.data_dir, args.sql_port, &Default::default(), &never_stop)?;
            cluster.wait_until_settled()?;
            Some(cluster)
        }
    };
    let url = args.url.clone().unwrap_or_else(|| cluster.as_ref().map(|c| c.url()).unwrap_or_default());
    let seeds = args.queries.div_ceil(args.queries_per_seed);
    let config = foam_fuzz::FuzzConfig {
        url: url.clone(),
        seeds: foam_fuzz::seeds_from(args.seed, seeds),
        queries_per_seed: args.queries_per_seed,
        table_prefix: "fz".into(),
        reduce: !args.no_reduce,
        failures_max: args.failures_max.max(1),
        postgres: args.postgres.clone(),
        // The reference runs in a child process of this binary, which the
        // harness kills when a query overruns (`bench fuzz-reference`).
        reference_exe: Some(std::env::current_exe().map_err(|e| format!("this program's path: {e}"))?),
        lanes: args.lanes.max(1),
        writes_per_seed: args.writes_per_seed,
        writes_judge: None,
        keep_tables: args.keep_tables,
    };
    println!("Fuzzing {url}: seeds {}..{}, {} queries each, {} at once", args.seed, args.seed + seeds, args.queries_per_seed, config.lanes);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(|e| e.to_string())?;
    let report = runtime.block_on(foam_fuzz::run(&config, |line| println!("{line}")))?;
    println!();
    println!(
        "{} queries over {} databases in {:.0} s: {} compared, {} failed on both engines ({} of them with FoamDB's internal error), {} timed out, {} the reference cannot run ({} more PostgreSQL alone agreed with), {} where PostgreSQL read a subquery of several rows the answer does not, {} ternary-logic checks, {} where PostgreSQL sides with FoamDB, {} differences",
        report.queries,
        report.seeds,
        report.elapsed.as_secs_f64(),
        report.compared,
        report.both_failed,
        report.both_failed_internal,
        report.timed_out,
        report.reference_unsupported,
        report.judged_by_postgres_alone,
        report.unread_subqueries,
        report.partitioning_checks,
        report.reference_wrong.len(),
        report.failures.len()
    );
    if args.writes_per_seed > 0 {
        let w = &report.writes;
        println!(
            "{} writes: {} compared ({} with a statement failing on both), {} refused by FoamDB as unsupported, {} the judge does not take, {} timed out or refused as retriable on every try, {} where the judge read a subquery of several rows FoamDB's rows do not",
            w.writes, w.compared, w.with_both_failed, w.refused, w.unjudged, w.timed_out, w.unread_subqueries
        );
    }
    for failure in &report.failures {
        println!("\n== seed {} query {}: {:?}\n{}\n{}", failure.seed, failure.query_index, failure.kind, failure.detail, failure.sql);
        if let Some(case) = &failure.reduced {
            let slt = foam_fuzz::case_as_slt(failure, case);
            println!("-- reduced (rules whose switch-off makes it pass: {:?}):\n{slt}", failure.rules);
            if let Some(path) = &args.save {
                let mut file = std::fs::OpenOptions::new().create(true).append(true).open(path).map_err(|e| format!("{}: {e}", path.display()))?;
                file.write_all(slt.as_bytes()).map_err(|e| format!("{}: {e}", path.display()))?;
            }
        }
    }
    if report.failures.is_empty() { Ok(()) } else { Err(format!("{} difference(s) found", report.failures.len())) }
}

/// `foam bench fuzz-reference`: serves the fuzzer's reference on stdin and
/// stdout for the harness that started it.
pub fn serve_reference() -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(|e| e.to_string())?;
    runtime.block_on(foam_fuzz::reference::serve())
}
