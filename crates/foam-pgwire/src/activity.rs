//! What the node's SQL connections do, for the operators' endpoints
//! (foam-node `http.rs`): statements counted by command, errors by
//! SQLSTATE class, every statement timed until its last row is sent; and
//! each connection listed with what it runs in the node's
//! [`Connections`] (`pg_stat_activity`, the console).

use std::sync::Arc;
use std::time::Instant;

use foam_query::connections::Connections;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Commands counted under their own name; any other is `OTHER`, so the
/// label's values stay few whatever clients send.
const COMMANDS: &[&str] = &[
    "SELECT", "INSERT", "UPDATE", "DELETE", "COPY", "BEGIN", "START", "COMMIT", "END", "ROLLBACK", "SAVEPOINT", "RELEASE", "CREATE", "DROP",
    "ALTER", "TRUNCATE", "GRANT", "REVOKE", "SET", "RESET", "SHOW", "EXPLAIN", "PREPARE", "EXECUTE", "DEALLOCATE", "DISCARD", "CHECKPOINT",
    "ANALYZE", "VACUUM", "WITH", "VALUES",
];
/// The first bucket of the statement-duration histogram, in seconds, and
/// the factor between buckets: 100 µs to about 100 s.
const DURATION_BUCKET_FIRST_S: f64 = 0.000_1;
const DURATION_BUCKET_FACTOR: f64 = 4.0;
const DURATION_BUCKETS: u16 = 11;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CommandLabel {
    command: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabel {
    sqlstate_class: String,
}

/// The node's SQL activity.
#[derive(Debug)]
pub struct SqlActivity {
    statements: Family<CommandLabel, Counter>,
    errors: Family<ErrorLabel, Counter>,
    durations: Histogram,
    connections: Arc<Connections>,
    max_connections: usize,
}

impl SqlActivity {
    /// The activity of connections listed in `connections`, at most
    /// `max_connections` at once.
    pub fn new(connections: Arc<Connections>, max_connections: usize) -> Arc<Self> {
        Arc::new(SqlActivity {
            statements: Family::default(),
            errors: Family::default(),
            durations: Histogram::new(exponential_buckets(DURATION_BUCKET_FIRST_S, DURATION_BUCKET_FACTOR, DURATION_BUCKETS)),
            connections,
            max_connections,
        })
    }

    /// Adds the SQL metrics to `registry` (`foam_sql_*`).
    pub fn register(&self, registry: &mut Registry) {
        registry.register("foam_sql_statements", "Statements that succeeded, by command", self.statements.clone());
        registry.register("foam_sql_errors", "Statements that failed, by SQLSTATE class", self.errors.clone());
        registry.register(
            "foam_sql_statement_duration_seconds",
            "Time from a statement's arrival until its last row was sent (or its error)",
            self.durations.clone(),
        );
        let open = self.connections.len() as i64;
        let gauge = prometheus_client::metrics::gauge::ConstGauge::new(open);
        registry.register("foam_sql_connections", "Client connections that have sent a statement and are open", gauge);
        let limit = prometheus_client::metrics::gauge::ConstGauge::new(self.max_connections as i64);
        registry.register("foam_sql_connections_max", "Client connections served at once (--max-connections)", limit);
    }

    /// Client connections served at once.
    pub fn max_connections(&self) -> usize {
        self.max_connections
    }

    /// Lists a connection until the returned registration is dropped (with
    /// the connection's session).
    pub(crate) fn connect(self: &Arc<Self>, user: &str, database: &str, application_name: &str, client: std::net::SocketAddr) -> Registration {
        let pid = self.connections.open(user, database, application_name, client);
        Registration { activity: self.clone(), pid }
    }

    /// Marks connection `pid` running `sql` until the returned guard (and
    /// every clone of it a row stream holds) is dropped.
    pub(crate) fn start(self: &Arc<Self>, pid: u32, sql: &str) -> Arc<Running> {
        let started = Instant::now();
        self.connections.started(pid, sql, command_of(sql), started);
        Arc::new(Running { activity: self.clone(), pid, started })
    }

    /// Counts a statement that succeeded with `tag` (its command tag, or
    /// `None` for one that returns rows, named after `sql`).
    pub(crate) fn succeeded(&self, tag: Option<&str>, sql: &str) {
        let command = match tag {
            Some(tag) => known(tag.split_whitespace().next().unwrap_or_default()),
            None => match command_of(sql) {
                command @ ("SHOW" | "EXPLAIN") => command,
                _ => "SELECT",
            },
        };
        self.statements.get_or_create(&CommandLabel { command: command.to_string() }).inc();
    }

    /// Counts a statement that failed with `sqlstate`.
    pub(crate) fn failed(&self, sqlstate: &str) {
        let class: String = sqlstate.chars().take(2).collect();
        self.errors.get_or_create(&ErrorLabel { sqlstate_class: class }).inc();
    }
}

/// A listed connection; unlisted when dropped.
pub(crate) struct Registration {
    activity: Arc<SqlActivity>,
    pub(crate) pid: u32,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.activity.connections.close(self.pid);
    }
}

/// A statement running; timed and marked done when dropped.
pub(crate) struct Running {
    activity: Arc<SqlActivity>,
    pid: u32,
    started: Instant,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.activity.durations.observe(self.started.elapsed().as_secs_f64());
        self.activity.connections.finished(self.pid, self.started);
    }
}

/// The first keyword of `sql` (after blanks, comments and parentheses), if
/// it is one of [`COMMANDS`], else `OTHER`.
fn command_of(sql: &str) -> &'static str {
    let mut rest = sql;
    loop {
        let trimmed = rest.trim_start_matches(|c: char| c.is_whitespace() || c == '(');
        if let Some(line) = trimmed.strip_prefix("--") {
            rest = line.split_once('\n').map_or("", |(_, after)| after);
        } else if let Some(block) = trimmed.strip_prefix("/*") {
            rest = block.split_once("*/").map_or("", |(_, after)| after);
        } else {
            rest = trimmed;
            break;
        }
    }
    let word: String = rest.chars().take_while(|c| c.is_ascii_alphabetic()).collect();
    known(&word)
}

fn known(word: &str) -> &'static str {
    COMMANDS.iter().find(|c| c.eq_ignore_ascii_case(word)).copied().unwrap_or("OTHER")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_named_by_their_first_keyword_or_other() {
        assert_eq!(command_of("  select 1"), "SELECT");
        assert_eq!(command_of("-- a comment\n /* another */ (SELECT 1) UNION (SELECT 2)"), "SELECT");
        assert_eq!(command_of("insert into t values (1)"), "INSERT");
        assert_eq!(command_of("LISTEN x"), "OTHER");
        assert_eq!(command_of(""), "OTHER");
        assert_eq!(known("CREATE"), "CREATE");
    }

    #[test]
    fn statements_are_counted_timed_and_shown_while_running() {
        let connections = Arc::new(Connections::default());
        let activity = SqlActivity::new(connections.clone(), 10);
        let registration = activity.connect("alice", "foam", "psql", "127.0.0.1:5000".parse().unwrap());
        let running = activity.start(registration.pid, "SELECT * FROM t");
        let listed = connections.list();
        assert_eq!((listed[0].command, listed[0].query.as_str(), listed[0].running_since.is_some()), ("SELECT", "SELECT * FROM t", true));
        activity.succeeded(None, "SELECT * FROM t");
        activity.succeeded(Some("CREATE TABLE"), "create table t (a int)");
        activity.failed("42P01");
        drop(running);
        assert_eq!(connections.list()[0].running_since, None, "idle after its statement");
        let mut registry = Registry::default();
        activity.register(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for line in [
            "foam_sql_statements_total{command=\"SELECT\"} 1",
            "foam_sql_statements_total{command=\"CREATE\"} 1",
            "foam_sql_errors_total{sqlstate_class=\"42\"} 1",
            "foam_sql_statement_duration_seconds_count 1",
            "foam_sql_connections 1",
            "foam_sql_connections_max 10",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing from:\n{text}");
        }
        drop(registration);
        assert!(connections.list().is_empty());
    }
}
