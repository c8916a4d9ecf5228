//! The two engines a fuzz query runs on: a FoamDB cluster over the
//! PostgreSQL protocol, and a plain single-process DataFusion holding the
//! same rows (no FoamDB code on its path).

use std::time::Duration;

use datafusion::arrow::datatypes::DataType;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::execution::session_state::SessionStateBuilder;
use datafusion::prelude::{SessionConfig, SessionContext};
use futures::StreamExt;

use crate::compare::{Rows, batches_to_rows};
use crate::schema::Table;

/// Longest one fuzz query may run on either engine; a query past it is
/// counted as timed out, not compared.
pub const QUERY_TIMEOUT: Duration = Duration::from_secs(10);

/// Most memory the reference's operators may hold for one query (a query
/// past it fails there and is not compared).
const REFERENCE_MEMORY_MAX: usize = 2 << 30;
/// Most rows the reference collects for one answer; a query past it counts
/// as timed out.
const REFERENCE_ROWS_MAX: usize = 1_000_000;

/// SQLSTATEs a cluster answers while it settles or is loaded (a node not
/// hearing the meta leader in time, a placement change under a write):
/// retriable by definition, so not a difference.
const TRANSIENT_STATES: &[&str] = &["57P03", "40001"];
/// Tries after a transient refusal, waiting this much longer each time.
const TRANSIENT_RETRIES_MAX: u32 = 5;
const TRANSIENT_RETRY_WAIT: Duration = Duration::from_millis(500);

/// Runs `attempt` until it gives an outcome that is not `transient`, or
/// [`TRANSIENT_RETRIES_MAX`] more times, waiting longer after each.
async fn retrying<T>(mut attempt: impl AsyncFnMut() -> T, transient: impl Fn(&T) -> bool) -> T {
    let mut tries = 0;
    loop {
        let outcome = attempt().await;
        if tries >= TRANSIENT_RETRIES_MAX || !transient(&outcome) {
            return outcome;
        }
        tries += 1;
        tokio::time::sleep(TRANSIENT_RETRY_WAIT * tries).await;
    }
}

fn is_transient(error: &tokio_postgres::Error) -> bool {
    error.as_db_error().is_some_and(|d| TRANSIENT_STATES.contains(&d.code().code()))
}

/// Rows per INSERT statement when filling tables.
const INSERT_ROWS_PER_STATEMENT: usize = 200;

/// FoamDB's switches for its own optimizer rules (`SET foam.<name>`), each
/// on by default. The fuzzer runs with random ones off, and a failing query
/// is run again with each off to name the rule behind it.
pub const RULE_SWITCHES: &[&str] =
    &["regroup_scans", "early_replica_joins", "eager_aggregates", "early_semi_joins", "group_key_filters", "eager_counts", "fast_like"];

/// The SQLSTATE the reference's errors are given (DataFusion has none).
pub const REFERENCE_ERROR: &str = "reference";

/// What one engine answered.
#[derive(Debug, Clone)]
pub enum Outcome {
    Rows(Rows),
    /// SQLSTATE ([`REFERENCE_ERROR`] for the reference's errors) and message.
    Error(String, String),
    TimedOut,
}

impl Outcome {
    /// FoamDB's internal error (XX000): a bug, FoamDB's or DataFusion's.
    pub fn is_internal_error(&self) -> bool {
        matches!(self, Outcome::Error(state, _) if state == "XX000")
    }
}

/// A FoamDB session (or one with the PostgreSQL server that judges).
pub struct Foam {
    client: tokio_postgres::Client,
}

impl Foam {
    pub async fn connect(url: &str) -> Result<Foam, String> {
        let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.map_err(|e| format!("connect {url}: {e}"))?;
        tokio::spawn(connection);
        let foam = Foam { client };
        foam.execute(&format!("SET statement_timeout = '{}s'", QUERY_TIMEOUT.as_secs())).await?;
        Ok(foam)
    }

    /// A FoamDB session that fails a statement whose plan FoamDB's rules
    /// broke, instead of running DataFusion's (so the fuzzer sees it).
    pub async fn connect_checked(url: &str) -> Result<Foam, String> {
        let foam = Foam::connect(url).await?;
        foam.execute("SET foam.plan_check_fallback = false").await?;
        Ok(foam)
    }

    /// Runs a statement that must succeed; a transient refusal is retried.
    pub async fn execute(&self, sql: &str) -> Result<(), String> {
        let result = retrying(async || self.client.simple_query(sql).await, |r| r.as_ref().err().is_some_and(is_transient)).await;
        result.map(|_| ()).map_err(|e| format!("{sql}: {}", describe(&e)))
    }

    /// The answer to `sql`; a transient refusal (see [`TRANSIENT_STATES`])
    /// is retried, as a client of a cluster would.
    pub async fn query(&self, sql: &str) -> Outcome {
        retrying(async || self.query_once(sql).await, |o| matches!(o, Outcome::Error(state, _) if TRANSIENT_STATES.contains(&state.as_str())))
            .await
    }

    async fn query_once(&self, sql: &str) -> Outcome {
        match tokio::time::timeout(QUERY_TIMEOUT + Duration::from_secs(5), self.client.simple_query(sql)).await {
            Err(_) => Outcome::TimedOut,
            Ok(Err(e)) => {
                let state = e.as_db_error().map(|d| d.code().code().to_string()).unwrap_or_else(|| "08006".into());
                if state == "57014" { Outcome::TimedOut } else { Outcome::Error(state, describe(&e)) }
            }
            Ok(Ok(messages)) => Outcome::Rows(
                messages
                    .into_iter()
                    .filter_map(|m| match m {
                        tokio_postgres::SimpleQueryMessage::Row(row) => Some((0..row.len()).map(|i| row.get(i).map(str::to_string)).collect()),
                        _ => None,
                    })
                    .collect(),
            ),
        }
    }

    /// Turns FoamDB's rule switches on except those in `off`.
    pub async fn set_rules_off(&self, off: &[&str]) -> Result<(), String> {
        for rule in RULE_SWITCHES {
            self.execute(&format!("SET foam.{rule} = {}", !off.contains(rule))).await?;
        }
        Ok(())
    }

    /// Drops the tables if they exist and creates and fills them anew.
    pub async fn load(&self, tables: &[Table]) -> Result<(), String> {
        self.load_as(tables, Table::create_foam).await
    }

    /// As [`Foam::load`], without layouts: for a PostgreSQL server.
    pub async fn load_plain(&self, tables: &[Table]) -> Result<(), String> {
        self.load_as(tables, Table::create_reference).await
    }

    async fn load_as(&self, tables: &[Table], create: impl Fn(&Table) -> String) -> Result<(), String> {
        for table in tables {
            self.execute(&format!("DROP TABLE IF EXISTS {}", table.name)).await?;
            self.execute(&create(table)).await?;
            for insert in table.inserts(INSERT_ROWS_PER_STATEMENT) {
                self.execute(&insert).await?;
            }
        }
        Ok(())
    }

    pub async fn drop_tables(&self, tables: &[Table]) -> Result<(), String> {
        for table in tables {
            self.execute(&format!("DROP TABLE IF EXISTS {}", table.name)).await?;
        }
        Ok(())
    }
}

fn describe(error: &tokio_postgres::Error) -> String {
    match error.as_db_error() {
        Some(db) => format!("{}: {}", db.code().code(), db.message()),
        None => error.to_string(),
    }
}

/// The reference: DataFusion in this process, parsing SQL as FoamDB does,
/// with FoamDB's PostgreSQL semantics where DataFusion's differ (its
/// analyzer rules: integer casts round), FoamDB's fixes for what DataFusion
/// claims of grouping sets' and
/// outer joins' output (foam-query's `output_claims.rs`), and DataFusion's
/// decorrelation as FoamDB runs it: an IN subquery its mark or anti join
/// answers wrongly (`unnest_subqueries.rs`) is left unplanned, so the
/// reference cannot run that query and it is not compared (PostgreSQL,
/// with `--postgres`, judges FoamDB's own unnesting of it).
pub struct Reference {
    ctx: SessionContext,
}

impl Reference {
    pub async fn new(tables: &[Table]) -> Result<Reference, String> {
        // Dynamic filters only speed a query up; DataFusion 55 can apply
        // them to the wrong one of two same-named columns
        // (apache/datafusion#25263), so the reference runs without.
        let config = SessionConfig::new()
            .set_str("datafusion.sql_parser.dialect", "PostgreSQL")
            .set_bool("datafusion.optimizer.enable_dynamic_filter_pushdown", false);
        let runtime = RuntimeEnvBuilder::new()
            .with_memory_limit(REFERENCE_MEMORY_MAX, 1.0)
            .build_arc()
            .map_err(|e| e.to_string())?;
        let state = SessionStateBuilder::new()
            .with_config(config)
            .with_runtime_env(runtime)
            .with_default_features()
            .with_optimizer_rules(foam_query::optimizer::logical::unnest_subqueries::datafusion_rules())
            .with_physical_optimizer_rules(foam_query::optimizer::physical::output_claims::datafusion_rules());
        let state = foam_query::optimizer::analyzer_rules().into_iter().fold(state, |state, rule| state.with_analyzer_rule(rule)).build();
        let reference = Reference { ctx: SessionContext::new_with_state(state) };
        reference.load(tables).await?;
        Ok(reference)
    }

    /// Creates and fills the tables (replacing any of the same name).
    pub async fn load(&self, tables: &[Table]) -> Result<(), String> {
        for table in tables {
            let _ = self.ctx.deregister_table(table.name.as_str());
            self.run(&table.create_reference()).await?;
            for insert in table.inserts(INSERT_ROWS_PER_STATEMENT) {
                self.run(&insert).await?;
            }
        }
        Ok(())
    }

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
            let frame = ctx.sql(&sql).await?;
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
