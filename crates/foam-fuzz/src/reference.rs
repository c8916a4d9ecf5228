//! The reference the cluster's answers are compared with: a plain
//! single-process DataFusion, run in a child process of its own.
//!
//! ```text
//!   harness ── Reference ─ JSON lines on stdin/stdout ─▶ `foam bench fuzz-reference`
//!                                                         └─ LocalReference (DataFusion)
//! ```
//!
//! A query the reference cannot finish in time may be stuck in an operator
//! that never yields; in the harness's own process it kept both cores busy
//! after its timeout and stalled the run ("the reference harness hang").
//! A child process is killed at the timeout instead, started again and
//! given the tables anew (the statements that made them are kept). Without
//! an executable to start (unit tests), the reference runs in-process.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use datafusion::arrow::datatypes::DataType;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::execution::session_state::SessionStateBuilder;
use datafusion::prelude::{SessionConfig, SessionContext};
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout};

use crate::compare::{Rows, batches_to_rows};
use crate::engines::{INSERT_ROWS_PER_STATEMENT, Outcome, QUERY_TIMEOUT, REFERENCE_ERROR};
use crate::schema::Table;

/// Most memory the reference's operators may hold for one query (a query
/// past it fails there and is not compared).
const REFERENCE_MEMORY_MAX: usize = 2 << 30;
/// Most rows the reference collects for one answer; a query past it counts
/// as timed out.
const REFERENCE_ROWS_MAX: usize = 1_000_000;
/// How long the harness waits for the child past the query timeout before
/// it kills it.
const CHILD_GRACE: Duration = Duration::from_secs(5);
/// How long a CREATE TABLE or INSERT may take in the child.
const CHILD_STATEMENT_TIMEOUT: Duration = Duration::from_secs(120);

/// One request to the child, one JSON line.
#[derive(Debug, Clone, Serialize, Deserialize)]
enum Request {
    Deregister(String),
    Run(String),
    Query(String),
}

/// The child's reply to a request, one JSON line.
#[derive(Debug, Serialize, Deserialize)]
enum Reply {
    Done,
    Failed(String),
    Answer { rows: Rows, types: Vec<String> },
    TimedOut,
}

/// The reference: in a child process when given an executable that serves
/// it (`foam bench fuzz-reference`), else in this process.
pub enum Reference {
    Local(LocalReference, &'static str),
    Child(tokio::sync::Mutex<ChildReference>, &'static str),
}

impl Reference {
    /// A reference holding `tables`, its session in `time_zone` (the zone
    /// its TIMESTAMPTZ columns are created in: DataFusion reads such a
    /// column in its type's zone, as PostgreSQL reads one in the session's).
    pub async fn new(tables: &[Table], time_zone: &'static str, exe: Option<&Path>) -> Result<Reference, String> {
        match exe {
            None => {
                let local = LocalReference::new(&[]).await?;
                local.load(tables, time_zone).await?;
                Ok(Reference::Local(local, time_zone))
            }
            Some(exe) => {
                let mut child = ChildReference { exe: exe.to_path_buf(), process: None, made_by: Vec::new() };
                child.load(tables, time_zone).await?;
                Ok(Reference::Child(tokio::sync::Mutex::new(child), time_zone))
            }
        }
    }

    /// Creates and fills the tables (replacing any of the same name).
    pub async fn load(&self, tables: &[Table]) -> Result<(), String> {
        match self {
            Reference::Local(local, zone) => local.load(tables, zone).await,
            Reference::Child(child, zone) => child.lock().await.load(tables, zone).await,
        }
    }

    /// The answer and its column types (empty when it failed).
    pub async fn query(&self, sql: &str) -> (Outcome, Vec<DataType>) {
        match self {
            Reference::Local(local, _) => local.query(sql).await,
            Reference::Child(child, _) => child.lock().await.query(sql).await,
        }
    }
}

/// The harness's side of a child process serving the reference.
pub struct ChildReference {
    exe: PathBuf,
    process: Option<(Child, ChildStdin, BufReader<ChildStdout>)>,
    /// The requests that made the child's tables, replayed into a new child.
    made_by: Vec<Request>,
}

/// The requests that create and fill `tables`, replacing any of the same
/// name, in a session in `time_zone`: for the child, and for the
/// in-process reference alike.
fn load_requests(tables: &[Table], time_zone: &str) -> Vec<Request> {
    let mut requests = vec![Request::Run(format!("SET datafusion.execution.time_zone = '{time_zone}'"))];
    for table in tables {
        requests.push(Request::Deregister(table.name.clone()));
        requests.push(Request::Run(table.create_reference()));
        requests.extend(table.inserts(INSERT_ROWS_PER_STATEMENT).into_iter().map(Request::Run));
    }
    requests
}

impl ChildReference {
    async fn load(&mut self, tables: &[Table], time_zone: &str) -> Result<(), String> {
        for request in load_requests(tables, time_zone) {
            self.made_by.push(request.clone());
            match self.ask(&request, CHILD_STATEMENT_TIMEOUT).await? {
                Some(Reply::Done) => {}
                Some(Reply::Failed(error)) => return Err(error),
                other => return Err(format!("the reference process answered {other:?} to {request:?}")),
            }
        }
        Ok(())
    }

    async fn query(&mut self, sql: &str) -> (Outcome, Vec<DataType>) {
        let failed = |message: String| (Outcome::Error(REFERENCE_ERROR.into(), message), Vec::new());
        match self.ask(&Request::Query(sql.to_string()), QUERY_TIMEOUT + CHILD_GRACE).await {
            Err(error) => failed(error),
            Ok(None) | Ok(Some(Reply::TimedOut)) => (Outcome::TimedOut, Vec::new()),
            Ok(Some(Reply::Failed(message))) => failed(message),
            Ok(Some(Reply::Answer { rows, types })) => {
                match types.iter().map(|t| t.parse::<DataType>().map_err(|e| format!("type {t}: {e}"))).collect() {
                    Ok(types) => (Outcome::Rows(rows), types),
                    Err(error) => failed(error),
                }
            }
            Ok(Some(Reply::Done)) => failed("the reference process answered a query with no rows".into()),
        }
    }

    /// Sends `request` and waits for the reply; None when it took past
    /// `timeout`, after which the child is killed (and made again, with its
    /// tables, at the next request).
    async fn ask(&mut self, request: &Request, timeout: Duration) -> Result<Option<Reply>, String> {
        if self.process.is_none() {
            self.start().await?;
        }
        let Some((_, stdin, stdout)) = self.process.as_mut() else { return Err("no reference process".into()) };
        let exchange = async {
            let mut line = serde_json::to_string(request).map_err(|e| e.to_string())?;
            line.push('\n');
            stdin.write_all(line.as_bytes()).await.map_err(|e| format!("to the reference process: {e}"))?;
            stdin.flush().await.map_err(|e| format!("to the reference process: {e}"))?;
            let mut reply = String::new();
            if stdout.read_line(&mut reply).await.map_err(|e| format!("from the reference process: {e}"))? == 0 {
                return Err("the reference process ended".to_string());
            }
            serde_json::from_str::<Reply>(&reply).map_err(|e| format!("from the reference process: {e}"))
        };
        match tokio::time::timeout(timeout, exchange).await {
            Ok(Ok(reply)) => Ok(Some(reply)),
            Ok(Err(error)) => {
                self.stop().await;
                Err(error)
            }
            Err(_) => {
                self.stop().await;
                Ok(None)
            }
        }
    }

    /// Starts a child and replays the requests that made its tables.
    async fn start(&mut self) -> Result<(), String> {
        let mut child = tokio::process::Command::new(&self.exe)
            .args(["bench", "fuzz-reference"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("starting the reference process {}: {e}", self.exe.display()))?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err("the reference process has no pipes".into());
        };
        self.process = Some((child, stdin, BufReader::new(stdout)));
        for request in self.made_by.clone() {
            match Box::pin(self.ask(&request, CHILD_STATEMENT_TIMEOUT)).await? {
                Some(Reply::Done) => {}
                other => return Err(format!("replaying {request:?} into a new reference process: {other:?}")),
            }
        }
        Ok(())
    }

    async fn stop(&mut self) {
        if let Some((mut child, _, _)) = self.process.take() {
            let _ = child.kill().await;
        }
    }
}

/// The child's side: serves requests from stdin until it closes
/// (`foam bench fuzz-reference`).
pub async fn serve() -> Result<(), String> {
    let reference = LocalReference::new(&[]).await?;
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    let mut stdout = tokio::io::stdout();
    while let Some(line) = lines.next_line().await.map_err(|e| e.to_string())? {
        let request: Request = serde_json::from_str(&line).map_err(|e| format!("request {line:?}: {e}"))?;
        let reply = reference.handle(request).await;
        let mut out = serde_json::to_string(&reply).map_err(|e| e.to_string())?;
        out.push('\n');
        stdout.write_all(out.as_bytes()).await.map_err(|e| e.to_string())?;
        stdout.flush().await.map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// The reference engine itself: DataFusion, parsing SQL as FoamDB does,
/// with FoamDB's PostgreSQL semantics where DataFusion's differ (its
/// analyzer rules: integer casts round), FoamDB's fixes for what DataFusion
/// claims of grouping sets' and
/// outer joins' output (foam-query's `output_claims.rs`), and DataFusion's
/// decorrelation as FoamDB runs it: an IN subquery its mark or anti join
/// answers wrongly (`unnest_subqueries.rs`) is left unplanned, so the
/// reference cannot run that query and it is not compared (PostgreSQL,
/// with `--postgres`, judges FoamDB's own unnesting of it).
pub struct LocalReference {
    ctx: SessionContext,
}

impl LocalReference {
    pub async fn new(tables: &[Table]) -> Result<LocalReference, String> {
        // Dynamic filters only speed a query up; DataFusion 55 can apply
        // them to the wrong one of two same-named columns
        // (apache/datafusion#25263), so the reference runs without.
        let config = SessionConfig::new()
            .set_str("datafusion.sql_parser.dialect", "PostgreSQL")
            .set_bool("datafusion.sql_parser.parse_float_as_decimal", true)
            .set_bool("datafusion.optimizer.enable_dynamic_filter_pushdown", false)
            // As FoamDB's sessions (`base_config`).
            .set_bool("datafusion.execution.skip_physical_aggregate_schema_check", true);
        let runtime = RuntimeEnvBuilder::new()
            .with_memory_limit(REFERENCE_MEMORY_MAX, 1.0)
            .build_arc()
            .map_err(|e| e.to_string())?;
        let state = SessionStateBuilder::new()
            .with_config(config)
            .with_runtime_env(runtime)
            .with_default_features()
            .with_analyzer_rules(foam_query::optimizer::datafusion_analyzer_rules())
            .with_optimizer_rules(foam_query::optimizer::logical::unnest_subqueries::datafusion_rules())
            .with_physical_optimizer_rules(foam_query::optimizer::guarded_datafusion_rules());
        let mut state = foam_query::optimizer::analyzer_rules().into_iter().fold(state, |state, rule| state.with_analyzer_rule(rule));
        foam_query::optimizer::add_sql_planners(&mut state);
        let state = state.build();
        let reference = LocalReference { ctx: SessionContext::new_with_state(state) };
        for udaf in foam_query::optimizer::worker_udafs() {
            reference.ctx.register_udaf(udaf);
        }
        for udf in foam_query::exec::datetime_format::udfs() {
            reference.ctx.register_udf(udf);
        }
        reference.load(tables, "UTC").await?;
        Ok(reference)
    }

    /// Creates and fills the tables (replacing any of the same name).
    pub async fn load(&self, tables: &[Table], time_zone: &str) -> Result<(), String> {
        for request in load_requests(tables, time_zone) {
            if let Reply::Failed(error) = self.handle(request).await {
                return Err(error);
            }
        }
        Ok(())
    }

    /// One request, as the child serves it.
    async fn handle(&self, request: Request) -> Reply {
        match request {
            Request::Deregister(name) => {
                // None of that name is fine.
                let _ = self.ctx.deregister_table(name.as_str());
                Reply::Done
            }
            Request::Run(sql) => match self.run(&sql).await {
                Ok(()) => Reply::Done,
                Err(error) => Reply::Failed(error),
            },
            Request::Query(sql) => match self.query(&sql).await {
                (Outcome::Rows(rows), types) => Reply::Answer { rows, types: types.iter().map(|t| t.to_string()).collect() },
                (Outcome::TimedOut, _) => Reply::TimedOut,
                (Outcome::Error(_, message), _) => Reply::Failed(message),
            },
        }
    }

    /// Runs a statement (a CREATE TABLE or an INSERT) to its end.
    async fn run(&self, sql: &str) -> Result<(), String> {
        let frame = self.ctx.sql(sql).await.map_err(|e| format!("{sql}: {e}"))?;
        frame.collect().await.map(|_| ()).map_err(|e| format!("{sql}: {e}"))
    }

    /// The answer and its column types (empty when it failed). The query
    /// runs as its own task, so that one which never yields (an operator
    /// looping over a huge intermediate result) is still stopped at the
    /// timeout; an answer past [`REFERENCE_ROWS_MAX`] counts as timed out.
    pub async fn query(&self, sql: &str) -> (Outcome, Vec<DataType>) {
        let ctx = self.ctx.clone();
        let sql = sql.to_string();
        let mut run = tokio::spawn(async move {
            // Grouping sets deduplicated as FoamDB's frontend does (plain
            // DataFusion refuses `ROLLUP (x, x)`, which SQL allows), their
            // constant keys kept apart from other constants.
            let state = ctx.state();
            let dialect = state.config().options().sql_parser.dialect;
            let mut statement = state.sql_to_statement(&sql, &dialect)?;
            if let datafusion::sql::parser::Statement::Statement(inner) = &mut statement {
                foam_query::frontend::grouping_sets::rewrite(inner);
            }
            let frame = ctx.execute_logical_plan(state.statement_to_plan(statement).await?).await?;
            let schema: Vec<DataType> = frame.schema().fields().iter().map(|f| f.data_type().clone()).collect();
            let mut stream = frame.execute_stream().await?;
            let (mut batches, mut rows): (Vec<datafusion::arrow::record_batch::RecordBatch>, usize) = (Vec::new(), 0);
            while let Some(batch) = stream.next().await {
                let batch = batch?;
                rows += batch.num_rows();
                if rows > REFERENCE_ROWS_MAX {
                    return Ok(None);
                }
                batches.push(batch);
            }
            Ok::<_, datafusion::error::DataFusionError>(Some((batches, schema)))
        });
        let finished = tokio::time::timeout(QUERY_TIMEOUT, &mut run).await;
        if finished.is_err() {
            run.abort();
        }
        match finished {
            Err(_) | Ok(Ok(Ok(None))) => (Outcome::TimedOut, Vec::new()),
            Ok(Err(e)) => (Outcome::Error(REFERENCE_ERROR.into(), format!("the reference's task failed: {e}")), Vec::new()),
            Ok(Ok(Err(e))) => (Outcome::Error(REFERENCE_ERROR.into(), e.to_string()), Vec::new()),
            Ok(Ok(Ok(Some((batches, types))))) => match batches_to_rows(&batches) {
                Ok((rows, _)) => (Outcome::Rows(rows), types),
                Err(e) => (Outcome::Error(REFERENCE_ERROR.into(), e), Vec::new()),
            },
        }
    }
}
