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
