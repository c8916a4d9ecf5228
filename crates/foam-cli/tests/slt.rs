//! Runs every `tests/sql/*.slt` file against a 1-node and a 3-node cluster of
//! real processes over the PostgreSQL protocol, and the reproductions
//! and fuzz cases on 4 nodes too; the expected results are the same for
//! every size, which is the point.

mod common;

use std::path::PathBuf;

use common::slt_db::{DbError, SltDb, plain_value};

fn slt_files() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/sql");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("tests/sql")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "slt"))
        .collect();
    files.sort();
    // While iterating: only the files whose path holds `FOAM_SLT`.
    if let Ok(only) = std::env::var("FOAM_SLT") {
        files.retain(|f| f.to_string_lossy().contains(&only));
    }
    assert!(!files.is_empty(), "no .slt files in {}", dir.display());
    files
}

/// Files also run on four nodes: the reproductions and the fuzz
/// cases, several found on four nodes only.
const FOUR_NODE_FILES: &[&str] = &["grouped_joins.slt", "fuzz_regressions.slt"];

async fn run_all(nodes: usize) {
    // Every node must give the same answers: connect to the last one.
    run_files(nodes, &[], nodes - 1, slt_files()).await;
}

/// The directory of the data files the `.slt` files load with COPY.
fn data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/data").canonicalize().expect("tests/data")
}

/// Runs `files` each on a fresh cluster of `nodes` started with `args`,
/// connected to node `coordinator`.
async fn run_files(nodes: usize, args: &[&str], coordinator: usize, files: Vec<PathBuf>) {
    let data_dir = data_dir();
    let mut args: Vec<&str> = args.to_vec();
    let copy_dir = data_dir.display().to_string();
    args.extend(["--copy-dir", &copy_dir]);
    let mut failures = Vec::new();
    for file in files {
        let cluster = common::Cluster::start_with(nodes, &args);
        let url = cluster.url(coordinator);
        let script = std::fs::read_to_string(&file).expect("read slt").replace("{DATA_DIR}", &data_dir.display().to_string());
        let mut runner = sqllogictest::Runner::new(move || {
            let url = url.clone();
            async move { Ok::<_, DbError>(SltDb { client: common::connect(&url).await, format_value: plain_value, engine: "foamdb" }) }
        });
        if let Err(error) = runner.run_script_with_name_async(&script, file.display().to_string()).await {
            failures.push(format!("{} on {nodes} node(s):\n{error}", file.display()));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_on_one_node() {
    run_all(1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_on_three_nodes() {
    run_all(3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reproductions_on_four_nodes() {
    let files: Vec<PathBuf> =
        slt_files().into_iter().filter(|f| f.file_name().is_some_and(|n| FOUR_NODE_FILES.iter().any(|x| n == *x))).collect();
    if std::env::var("FOAM_SLT").is_err() {
        assert_eq!(files.len(), FOUR_NODE_FILES.len(), "missing: {FOUR_NODE_FILES:?}");
    }
    // As `foam local` starts them and connected to the first node, as the
    // fuzzer was when it found them.
    run_files(4, &["--worker-threads", "1"], 0, files).await;
}
