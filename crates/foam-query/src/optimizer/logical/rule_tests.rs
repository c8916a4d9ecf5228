//! What the logical rules' unit tests share: small in-memory tables, a
//! query's optimized plan and sorted answer, and the check that a rule
//! changes no answer.

use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema};
use arrow::util::pretty::pretty_format_batches;
use datafusion::datasource::MemTable;
use datafusion::execution::SessionStateBuilder;
use datafusion::optimizer::OptimizerRule;
use datafusion::prelude::{SessionConfig, SessionContext};

/// A session with DataFusion's rules, then `rule` when given.
pub(crate) fn session(config: SessionConfig, rule: Option<Arc<dyn OptimizerRule + Send + Sync>>) -> SessionContext {
    let mut builder = SessionStateBuilder::new().with_default_features().with_config(config);
    if let Some(rule) = rule {
        builder = builder.with_optimizer_rule(rule);
    }
    SessionContext::new_with_state(builder.build())
}

/// A table of nullable `Int64` columns `names` holding `rows`, split over
/// two partitions (an empty table: one partition without batches).
pub(crate) fn table<const N: usize>(names: [&str; N], rows: &[[Option<i64>; N]]) -> Arc<MemTable> {
    let schema = Arc::new(Schema::new(names.iter().map(|n| Field::new(*n, DataType::Int64, true)).collect::<Vec<_>>()));
    let batch = |rows: &[[Option<i64>; N]]| {
        let columns: Vec<ArrayRef> = (0..N).map(|i| Arc::new(rows.iter().map(|r| r[i]).collect::<Int64Array>()) as ArrayRef).collect();
        RecordBatch::try_new(Arc::clone(&schema), columns).expect("batch")
    };
    let partitions = if rows.is_empty() {
        vec![vec![]]
    } else {
        let (first, second) = rows.split_at(rows.len() / 2);
        vec![vec![batch(first)], vec![batch(second)]]
    };
    Arc::new(MemTable::try_new(Arc::clone(&schema), partitions).expect("table"))
}

/// The optimized logical plan of `sql`, indented.
pub(crate) async fn plan(ctx: &SessionContext, sql: &str) -> String {
    ctx.sql(sql).await.expect("plan").into_optimized_plan().expect("optimize").display_indent().to_string()
}

/// True when a line of `plan` containing `lower` is in the subtree of
/// (indented under) a line containing `upper`.
pub(crate) fn below(plan: &str, upper: &str, lower: &str) -> bool {
    let indent = |line: &str| line.len() - line.trim_start().len();
    let lines: Vec<&str> = plan.lines().collect();
    lines.iter().enumerate().filter(|(_, l)| l.contains(upper)).any(|(i, top)| {
        lines[i + 1..].iter().take_while(|l| indent(l) > indent(top)).any(|l| l.contains(lower))
    })
}

/// `sql`'s column names and types, then its rows (cells trimmed), sorted.
pub(crate) async fn answer(ctx: &SessionContext, sql: &str) -> Vec<String> {
    let frame = ctx.sql(sql).await.expect("plan");
    let fields = frame.schema().fields().iter().map(|f| format!("{}: {}", f.name(), f.data_type())).collect::<Vec<_>>().join(", ");
    let batches = frame.collect().await.expect("run");
    let text = pretty_format_batches(&batches).expect("format").to_string();
    let mut rows: Vec<String> = text
        .lines()
        .filter(|l| l.starts_with('|'))
        .skip(1)
        .map(|l| l.trim_matches('|').split('|').map(str::trim).collect::<Vec<_>>().join(" | "))
        .collect();
    rows.sort();
    rows.insert(0, fields);
    rows
}

/// Asserts each query answers the same on `with` (the rule among its
/// optimizer rules) as on `without`, and that the rule rewrote the plan
/// exactly where marked `true`.
pub(crate) async fn assert_same_answers(with: &SessionContext, without: &SessionContext, queries: &[(&str, bool)]) {
    for (sql, rewritten) in queries {
        let shown = plan(with, sql).await;
        assert_eq!(shown != plan(without, sql).await, *rewritten, "{sql} rewritten:\n{shown}");
        assert_eq!(answer(with, sql).await, answer(without, sql).await, "{sql}\n{shown}");
    }
}
