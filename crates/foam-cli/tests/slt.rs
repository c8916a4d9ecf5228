//! Runs every `tests/sql/*.slt` file against a 1-node and a 3-node cluster of
//! real processes over the PostgreSQL protocol; the expected results are the
//! same for both, which is the point.

mod common;

use std::path::PathBuf;

use common::slt_db::{DbError, SltDb};

/// NULL as "NULL", the empty string as "(empty)", anything else as sent.
fn format_value(value: Option<&str>) -> String {
    match value {
        None => "NULL".into(),
        Some("") => "(empty)".into(),
        Some(text) => text.to_string(),
    }
}

fn slt_files() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/sql");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("tests/sql")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "slt"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no .slt files in {}", dir.display());
    files
}

async fn run_all(nodes: usize) {
    let data_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/data").canonicalize().expect("tests/data");
    let mut failures = Vec::new();
    for file in slt_files() {
        let cluster = common::Cluster::start(nodes);
        // Every node must give the same answers: connect to the last one.
        let url = cluster.url(nodes - 1);
        let script = std::fs::read_to_string(&file).expect("read slt").replace("{DATA_DIR}", &data_dir.display().to_string());
        let mut runner = sqllogictest::Runner::new(move || {
            let url = url.clone();
            async move { Ok::<_, DbError>(SltDb { client: common::connect(&url).await, format_value, engine: "foamdb" }) }
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
