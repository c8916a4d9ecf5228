//! The engines a fuzz query runs on: a FoamDB cluster (or the PostgreSQL
//! server that judges) over the PostgreSQL protocol; the reference it is
//! compared with is in `reference.rs`.

use std::time::Duration;

use crate::compare::Rows;
use crate::schema::Table;

/// Longest one fuzz query may run on either engine; a query past it is
/// counted as timed out, not compared.
pub const QUERY_TIMEOUT: Duration = Duration::from_secs(10);


/// SQLSTATEs a cluster answers while it settles or is loaded (a node not
/// hearing the meta leader in time, a placement change under a write):
/// retriable by definition, so not a difference.
pub(crate) const TRANSIENT_STATES: &[&str] = &["57P03", "40001"];
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
pub const INSERT_ROWS_PER_STATEMENT: usize = 200;

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
    url: String,
    client: tokio::sync::RwLock<tokio_postgres::Client>,
    /// The SET statements this session ran, run again on a new connection
    /// when the server closed the last one.
    settings: std::sync::Mutex<Vec<String>>,
}

impl Foam {
    pub async fn connect(url: &str) -> Result<Foam, String> {
        let foam = Foam { url: url.to_string(), client: tokio::sync::RwLock::new(open(url).await?), settings: Default::default() };
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
        self.reconnect_if_closed().await?;
        let result = retrying(async || self.client.read().await.simple_query(sql).await, |r| r.as_ref().err().is_some_and(is_transient)).await;
        result.map_err(|e| format!("{sql}: {}", describe(&e)))?;
        if sql.starts_with("SET ") {
            let mut settings = self.settings.lock().unwrap_or_else(|p| p.into_inner());
            settings.retain(|s| s.split(" = ").next() != sql.split(" = ").next());
            settings.push(sql.to_string());
        }
        Ok(())
    }

    /// A new connection with this session's settings, when the server
    /// closed the last one (a query that ends the connection is a difference
    /// of its own; the queries after it must not all fail with it).
    async fn reconnect_if_closed(&self) -> Result<(), String> {
        if !self.client.read().await.is_closed() {
            return Ok(());
        }
        let mut client = self.client.write().await;
        if client.is_closed() {
            *client = open(&self.url).await?;
            let settings = self.settings.lock().unwrap_or_else(|p| p.into_inner()).clone();
            for setting in settings {
                client.simple_query(&setting).await.map_err(|e| format!("{setting}: {}", describe(&e)))?;
            }
        }
        Ok(())
    }

    /// The answer to `sql`; a transient refusal (see [`TRANSIENT_STATES`])
    /// is retried, as a client of a cluster would.
    pub async fn query(&self, sql: &str) -> Outcome {
        retrying(async || self.query_once(sql).await, |o| matches!(o, Outcome::Error(state, _) if TRANSIENT_STATES.contains(&state.as_str())))
            .await
    }

    async fn query_once(&self, sql: &str) -> Outcome {
        self.run_once(sql, row_of).await
    }

    /// The rows a write statement touched (one row of one cell), its error,
    /// or a timeout; tried once, since a statement inside a transaction block
    /// cannot be retried on its own.
    pub async fn command(&self, sql: &str) -> Outcome {
        self.run_once(sql, |message| match message {
            tokio_postgres::SimpleQueryMessage::CommandComplete(count) => Some(vec![Some(count.to_string())]),
            _ => None,
        })
        .await
    }

    /// The rows a write statement with RETURNING returned, its error, or a
    /// timeout; tried once, as [`Self::command`].
    pub async fn returned(&self, sql: &str) -> Outcome {
        self.run_once(sql, row_of).await
    }

    /// Runs `sql` once; `pick` makes a row of each message it keeps.
    async fn run_once(&self, sql: &str, pick: fn(tokio_postgres::SimpleQueryMessage) -> Option<Vec<Option<String>>>) -> Outcome {
        if let Err(error) = self.reconnect_if_closed().await {
            return Outcome::Error("08006".into(), error);
        }
        let client = self.client.read().await;
        match tokio::time::timeout(QUERY_TIMEOUT + Duration::from_secs(5), client.simple_query(sql)).await {
            Err(_) => Outcome::TimedOut,
            Ok(Err(e)) => {
                let state = e.as_db_error().map(|d| d.code().code().to_string()).unwrap_or_else(|| "08006".into());
                if state == "57014" { Outcome::TimedOut } else { Outcome::Error(state, describe(&e)) }
            }
            Ok(Ok(messages)) => Outcome::Rows(messages.into_iter().filter_map(pick).collect()),
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

    pub async fn load_as(&self, tables: &[Table], create: impl Fn(&Table) -> String) -> Result<(), String> {
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

async fn open(url: &str) -> Result<tokio_postgres::Client, String> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.map_err(|e| format!("connect {url}: {e}"))?;
    tokio::spawn(connection);
    Ok(client)
}

/// A result row's values as text.
fn row_of(message: tokio_postgres::SimpleQueryMessage) -> Option<Vec<Option<String>>> {
    match message {
        tokio_postgres::SimpleQueryMessage::Row(row) => Some((0..row.len()).map(|i| row.get(i).map(str::to_string)).collect()),
        _ => None,
    }
}

fn describe(error: &tokio_postgres::Error) -> String {
    match error.as_db_error() {
        Some(db) => format!("{}: {}", db.code().code(), db.message()),
        None => error.to_string(),
    }
}

