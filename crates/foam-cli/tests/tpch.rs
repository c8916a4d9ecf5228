//! TPC-H at SF 0.01 on a 3-node cluster: the loader fills every table, all
//! 22 queries answer exactly what single-process DataFusion computes over the
//! same generated data and what DuckDB answered over it (the committed set in
//! crates/foam-tpch/answers/, an oracle that shares no code with FoamDB), and
//! each query's exchanges between nodes match the
//! pinned plan snapshot in `tests/plans/` (so a change that adds a shuffle
//! fails; `FOAM_UPDATE_PLANS=1` rewrites the snapshots).

mod common;

use common::{Cluster, query_text};

const SCALE_FACTOR: f64 = 0.01;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tpch_answers_match_single_process_datafusion() {
    let cluster = Cluster::start(3);
    let report = foam_tpch::load::load(&cluster.url(0), cluster.secret().as_ref(), SCALE_FACTOR, false).await.expect("load TPC-H");
    let client = cluster.client(2).await;
    for table in &report.tables {
        let count = query_text(&client, &format!("SELECT count(*) FROM {}", table.table)).await;
        assert_eq!(count[0][0].as_deref(), Some(table.rows.to_string().as_str()), "{}", table.table);
    }
    let lineitem = report.tables.iter().find(|t| t.table == "lineitem").unwrap();
    assert!(lineitem.rows > 50_000, "SF 0.01 has about 60,000 lineitem rows, got {}", lineitem.rows);

    let reference = foam_tpch::reference::reference_context(SCALE_FACTOR).await.expect("reference data");
    let mut failures = Vec::new();
    let mut non_empty = 0;
    // Answers whose every value is NULL compare nothing but their shape.
    let mut all_null = Vec::new();
    for (index, sql) in foam_tpch::queries::QUERIES.iter().enumerate() {
        let expected = foam_tpch::reference::rows_as_text(&reference, sql).await.expect("reference query");
        non_empty += usize::from(!expected.is_empty());
        if expected.iter().flatten().all(|value| value == "NULL") {
            all_null.push(format!("Q{}", index + 1));
        }
        let actual: Vec<Vec<String>> = match common::try_query_text(&client, sql).await {
            Ok(rows) => rows.into_iter().map(|r| r.into_iter().map(|v| v.unwrap_or_else(|| "NULL".into())).collect()).collect(),
            Err(error) => {
                failures.push(format!("Q{}: {}", index + 1, error.as_db_error().map(|d| d.message().to_string()).unwrap_or(error.to_string())));
                continue;
            }
        };
        if let Err(difference) = foam_tpch::reference::compare(&expected, &actual) {
            failures.push(format!("Q{}: {difference}", index + 1));
        }
        let duckdb = foam_tpch::answers::parse_answer(foam_tpch::answers::DUCKDB_SF0_01[index]);
        if let Err(difference) = foam_tpch::reference::compare(&duckdb, &actual) {
            failures.push(format!("Q{} (against DuckDB's answer): {difference}", index + 1));
        }
    }
    // At SF 0.01 every query has rows (Q18's large orders too); only Q17's
    // one sum is NULL (no lineitem of its parts is under a fifth of their
    // average). A query that stops answering rows fails here.
    assert_eq!(non_empty, 22, "every reference answer has rows");
    assert_eq!(all_null, vec!["Q17".to_string()], "answers of NULLs only");
    assert!(failures.is_empty(), "{} of 22 queries differ:\n{}", failures.len(), failures.join("\n"));

    // Plans follow statistics, which each node estimates from the partitions
    // it stores; the first process is always node 1 and so always stores the
    // same partitions, which keeps the pinned plans the same from run to run.
    check_plan_snapshots(&cluster.client(0).await).await;
}

/// A load stopped before its last commit (tables created, a row in one,
/// lineitem empty) is not taken for a finished one: loading again drops its
/// tables and starts clean. A load into a cluster that already holds TPC-H
/// is refused and leaves the data whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unfinished_load_is_redone_and_a_finished_one_kept() {
    let cluster = Cluster::start(1);
    let client = cluster.client(0).await;
    for table in foam_tpch::schema::ALL_TABLES {
        client.batch_execute(table.create_sql()).await.expect("create");
    }
    client.batch_execute("INSERT INTO nation VALUES (99, 'LEFT OVER', 0, 'from the stopped load')").await.expect("insert");
    assert!(!foam_tpch::load::is_loaded(&client).await.expect("is_loaded"), "empty lineitem: not loaded");

    let report = foam_tpch::load::load(&cluster.url(0), cluster.secret().as_ref(), 0.001, false).await.expect("a new load replaces the stopped one");
    assert!(foam_tpch::load::is_loaded(&client).await.expect("is_loaded"));
    let nation = query_text(&client, "SELECT count(*), count(*) FILTER (WHERE n_nationkey = 99) FROM nation").await;
    assert_eq!(nation, vec![vec![Some("25".to_string()), Some("0".to_string())]], "the stopped load's row is gone");
    let orders = report.tables.iter().find(|t| t.table == "orders").map(|t| t.rows.to_string());
    assert_eq!(query_text(&client, "SELECT count(*) FROM orders").await[0][0], orders);

    let again = foam_tpch::load::load(&cluster.url(0), cluster.secret().as_ref(), 0.001, false).await.err().expect("a second load is refused");
    assert_eq!(again.sqlstate(), "42P07", "{again}");
    assert_eq!(query_text(&client, "SELECT count(*) FROM orders").await[0][0], orders, "the loaded data stays");
}

/// The exchange lines of `EXPLAIN`, without partition and task counts (which
/// follow the machine's cores).
async fn exchanges(client: &tokio_postgres::Client, sql: &str) -> String {
    let plan = query_text(client, &format!("EXPLAIN {sql}")).await;
    let text = plan.into_iter().filter_map(|row| row.get(1).cloned().flatten()).collect::<Vec<_>>().join("\n");
    let section = text.split("Exchanges between nodes:").nth(1).unwrap_or("").to_string();
    let counts = regex::Regex::new(r": output_partitions=\d+, input_tasks=\d+").unwrap();
    section
        .lines()
        .map(|line| counts.replace_all(line.trim(), "").to_string())
        .filter(|line| !line.is_empty())
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

async fn check_plan_snapshots(client: &tokio_postgres::Client) {
    // Plan as for large tables: every scan spread over its owners (at SF0.01
    // FoamDB would otherwise read each small table with one task).
    client
        .batch_execute("SET datafusion.execution.target_partitions = 2; SET foam.scan_rows_per_task = 1")
        .await
        .expect("set");
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/plans");
    let update = std::env::var_os("FOAM_UPDATE_PLANS").is_some();
    let mut changed = Vec::new();
    let mut co_located = 0;
    for (index, sql) in foam_tpch::queries::QUERIES.iter().enumerate() {
        let actual = exchanges(client, sql).await;
        co_located += actual.matches("exchange: co-located").count();
        let path = dir.join(format!("q{:02}.txt", index + 1));
        if update {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&path, &actual).unwrap();
            continue;
        }
        let expected = std::fs::read_to_string(&path).unwrap_or_default();
        if expected != actual {
            changed.push(format!("Q{}:\n--- pinned\n{expected}+++ now\n{actual}", index + 1));
        }
    }
    assert!(changed.is_empty(), "distributed plans changed (FOAM_UPDATE_PLANS=1 to accept):\n{}", changed.join("\n"));
    // lineitem and orders are both distributed by order key: Q3, Q4-like
    // joins of the two must run where the rows are.
    assert!(co_located >= 5, "expected co-located lineitem/orders joins, found {co_located}");
}
