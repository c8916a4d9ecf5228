//! The differential fuzzer in CI: a fixed list of seeds, each a random
//! database with random layouts and a bounded number of random queries, run
//! on a 3-node cluster of real processes and on single-process DataFusion.
//! Any difference fails the test with its reduced reproduction (replay it
//! with `foam bench fuzz --seed S --queries-per-seed N`).

mod common;

/// Seeds CI runs, and queries per seed: a few minutes with the test
/// profile's unoptimized dependencies (`foam bench fuzz` runs many more).
const CI_SEEDS: &[u64] = &[1, 2, 3, 4, 5];
const CI_QUERIES_PER_SEED: u64 = 80;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_answer_random_queries_as_one_process_does() {
    let cluster = common::Cluster::start(3);
    let config = foam_fuzz::FuzzConfig {
        url: cluster.url(2),
        seeds: CI_SEEDS.to_vec(),
        queries_per_seed: CI_QUERIES_PER_SEED,
        table_prefix: "fz".into(),
        reduce: true,
        failures_max: 3,
        postgres: None,
        // As `foam bench fuzz` runs it: the reference in a child process.
        reference_exe: Some(env!("CARGO_BIN_EXE_foam").into()),
        // Two lanes, as `foam bench fuzz` runs by default.
        lanes: 2,
        writes_per_seed: 0,
        writes_judge: None,
        keep_tables: false,
    };
    let report = foam_fuzz::run(&config, |line| eprintln!("{line}")).await.expect("fuzz run");
    let reproductions: Vec<String> = report
        .failures
        .iter()
        .map(|f| match &f.reduced {
            Some(case) => format!("{}rules behind it: {:?}\n", foam_fuzz::case_as_slt(f, case), f.rules),
            None => format!("seed {} query {}: {:?}: {}\n{}", f.seed, f.query_index, f.kind, f.detail, f.sql),
        })
        .collect();
    assert!(reproductions.is_empty(), "{} difference(s):\n{}", reproductions.len(), reproductions.join("\n"));
    // A run that compared almost nothing proves nothing: most queries must
    // be answered by both engines.
    assert_eq!(report.queries, CI_SEEDS.len() as u64 * CI_QUERIES_PER_SEED);
    assert!(report.compared * 10 >= report.queries * 7, "only {} of {} queries compared: {report:?}", report.compared, report.queries);
}

/// Seeds whose writes CI runs, and writes per seed.
const CI_WRITE_SEEDS: &[u64] = &[11, 12, 13];
const CI_WRITES_PER_SEED: u64 = 30;

/// Random UPDATE, DELETE and INSERT statements, alone or in blocks that
/// commit or roll back, on a 3-node cluster and on one node: the same row
/// counts, the same failures, and the same rows left in every table
/// (`foam bench fuzz --writes-per-seed N --postgres URL` judges them with
/// PostgreSQL instead).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_write_as_one_node_does() {
    let cluster = common::Cluster::start(3);
    let judge = common::Cluster::start(1);
    let config = foam_fuzz::FuzzConfig {
        url: cluster.url(1),
        seeds: CI_WRITE_SEEDS.to_vec(),
        queries_per_seed: 0,
        table_prefix: "fw".into(),
        reduce: false,
        failures_max: 3,
        postgres: None,
        reference_exe: Some(env!("CARGO_BIN_EXE_foam").into()),
        lanes: 1,
        writes_per_seed: CI_WRITES_PER_SEED,
        writes_judge: Some(judge.url(0)),
        keep_tables: false,
    };
    let report = foam_fuzz::run(&config, |line| eprintln!("{line}")).await.expect("fuzz run");
    let reproductions: Vec<String> =
        report.failures.iter().filter_map(|f| f.reduced.as_ref().map(|case| foam_fuzz::case_as_slt(f, case))).collect();
    assert!(report.failures.is_empty(), "{} difference(s):\n{}", report.failures.len(), reproductions.join("\n"));
    let writes = &report.writes;
    assert_eq!(writes.writes, CI_WRITE_SEEDS.len() as u64 * CI_WRITES_PER_SEED);
    // Most writes must be compared, some of them with a failing statement.
    assert!(writes.compared * 10 >= writes.writes * 7, "only {} of {} writes compared: {writes:?}", writes.compared, writes.writes);
    assert!(writes.compared > writes.with_both_failed, "{writes:?}");
}

/// The reference runs in a child process (`foam bench fuzz-reference`): it
/// answers as the in-process one does, a query past the timeout counts as
/// timed out (the child is killed if it does not give up itself), and the
/// next query is answered again, over the same tables.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reference_process_answers_and_outlives_a_query_that_overruns() {
    use foam_fuzz::engines::Outcome;
    use foam_fuzz::reference::Reference;
    let database = foam_fuzz::run::seed_database(7, "rp");
    let exe = std::path::PathBuf::from(env!("CARGO_BIN_EXE_foam"));
    let child = Reference::new(&database.tables, database.time_zone, Some(&exe)).await.expect("reference process");
    let local = Reference::new(&database.tables, database.time_zone, None).await.expect("in-process reference");
    let counts = "SELECT count(*), count(a), sum(b) FROM rp0";
    let answer = |outcome: Outcome| match outcome {
        Outcome::Rows(rows) => rows,
        other => panic!("{counts}: {other:?}"),
    };
    let expected = answer(local.query(counts).await.0);
    assert_eq!(answer(child.query(counts).await.0), expected);
    let started = std::time::Instant::now();
    // 10^12 pairs: past the timeout in a release build too.
    let endless = "SELECT count(*) FROM generate_series(1, 1000000) AS a, generate_series(1, 1000000) AS b WHERE a.value <> b.value";
    let outcome = child.query(endless).await.0;
    assert!(matches!(outcome, Outcome::TimedOut), "{endless}: {outcome:?}");
    assert!(started.elapsed() < foam_fuzz::engines::QUERY_TIMEOUT * 2, "stopped in {:?}", started.elapsed());
    assert_eq!(answer(child.query(counts).await.0), expected, "answered again after the overrun");
}
