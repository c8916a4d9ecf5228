//! Runs every `tests/sql/*.slt` file against a 1-node and a 3-node cluster of
//! real processes over the PostgreSQL protocol; the expected results are the
//! same for both, which is the point.

mod common;

use std::path::PathBuf;
use std::time::Duration;

use async_trait::async_trait;
use sqllogictest::{AsyncDB, DBOutput, DefaultColumnType};

struct FoamDb {
    client: tokio_postgres::Client,
}

#[derive(Debug)]
struct DbError {
    sqlstate: Option<String>,
    message: String,
}

impl std::fmt::Display for DbError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.message)
    }
}

impl std::error::Error for DbError {}

#[async_trait]
impl AsyncDB for FoamDb {
    type Error = DbError;
    type ColumnType = DefaultColumnType;

    async fn run(&mut self, sql: &str) -> Result<DBOutput<DefaultColumnType>, DbError> {
        let messages = self.client.simple_query(sql).await.map_err(|e| DbError {
            sqlstate: e.as_db_error().map(|d| d.code().code().to_string()),
            message: e.as_db_error().map(|d| d.message().to_string()).unwrap_or_else(|| e.to_string()),
        })?;
        let mut rows = Vec::new();
        let mut columns = None;
        let mut affected = 0;
        for message in messages {
            match message {
                tokio_postgres::SimpleQueryMessage::RowDescription(description) => columns = Some(description.len()),
                tokio_postgres::SimpleQueryMessage::Row(row) => {
                    columns = Some(row.len());
                    rows.push((0..row.len()).map(|i| row.get(i).map(format_value).unwrap_or_else(|| "NULL".into())).collect());
                }
                tokio_postgres::SimpleQueryMessage::CommandComplete(count) => affected = count,
                _ => {}
            }
        }
        match columns {
            Some(count) => Ok(DBOutput::Rows { types: vec![DefaultColumnType::Any; count], rows }),
            None => Ok(DBOutput::StatementComplete(affected)),
        }
    }

    async fn shutdown(&mut self) {}

    fn engine_name(&self) -> &str {
        "foamdb"
    }

    async fn sleep(duration: Duration) {
        tokio::time::sleep(duration).await;
    }

    fn error_sql_state(error: &DbError) -> Option<String> {
        error.sqlstate.clone()
    }
}

fn format_value(value: &str) -> String {
    if value.is_empty() { "(empty)".into() } else { value.to_string() }
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
            async move { Ok::<_, DbError>(FoamDb { client: common::connect(&url).await }) }
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
