//! TPC-H at SF 0.01 on a 3-node cluster: the loader fills every table, and all
//! 22 queries answer exactly what single-process DataFusion computes over the
//! same generated data.

mod common;

use common::{Cluster, query_text};

const SCALE_FACTOR: f64 = 0.01;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tpch_answers_match_single_process_datafusion() {
    let cluster = Cluster::start(3);
    let report = foam_tpch::load::load(&cluster.url(0), SCALE_FACTOR, false).await.expect("load TPC-H");
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
    for (index, sql) in foam_tpch::queries::QUERIES.iter().enumerate() {
        let expected = foam_tpch::reference::rows_as_text(&reference, sql).await.expect("reference query");
        non_empty += usize::from(!expected.is_empty());
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
    }
    assert!(non_empty >= 20, "the reference answers should mostly be non-empty, {non_empty} were");
    assert!(failures.is_empty(), "{} of 22 queries differ:\n{}", failures.len(), failures.join("\n"));
}
