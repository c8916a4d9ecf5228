//! Flight SQL's sessions: a handshake proves a role's password and gets a
//! bearer token; every later call names its session by that token.
//!
//! A session is one `FoamSession`, as a PostgreSQL connection is, so SET,
//! BEGIN ... COMMIT and privileges mean the same on both ports. It also
//! holds the statements the client prepared and the results it was handed
//! tickets for and has not fetched. gRPC has no disconnect to end a session
//! by: one unused for `FLIGHT_SQL_SESSION_IDLE_SECS` ends, and a node holds
//! at most `FLIGHT_SQL_SESSIONS_MAX`.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use datafusion::common::ParamValues;
use datafusion::execution::runtime_env::RuntimeEnv;
use foam_common::limits::{FLIGHT_SQL_PREPARED_MAX, FLIGHT_SQL_RESULTS_PENDING_MAX, FLIGHT_SQL_SESSION_IDLE_SECS, FLIGHT_SQL_SESSIONS_MAX};
use foam_common::{FoamError, FoamResult, SqlState};
use foam_query::frontend::session::PreparedStatement;
use foam_query::{FoamSession, NodeContext, StatementOutput};

/// Random bytes in a bearer token.
const TOKEN_BYTES: usize = 32;

/// Every Flight SQL session of one node.
pub(crate) struct Sessions {
    node: Arc<NodeContext>,
    runtime: Arc<RuntimeEnv>,
    /// `--insecure`: any password is taken.
    insecure: bool,
    open: Mutex<HashMap<String, Arc<FlightSession>>>,
}

/// One client's session.
pub(crate) struct FlightSession {
    pub(crate) session: FoamSession,
    last_used: Mutex<Instant>,
    /// Statements run one at a time, as on a PostgreSQL connection.
    pub(crate) turn: tokio::sync::Mutex<()>,
    next_handle: AtomicU64,
    prepared: Mutex<HashMap<u64, Prepared>>,
    results: Mutex<VecDeque<(u64, StatementOutput)>>,
}

/// A prepared statement and the rows of parameters last bound to it.
#[derive(Clone)]
pub(crate) struct Prepared {
    pub(crate) statement: Arc<PreparedStatement>,
    pub(crate) bound: Vec<ParamValues>,
}

impl Sessions {
    pub(crate) fn new(node: Arc<NodeContext>, runtime: Arc<RuntimeEnv>, insecure: bool) -> Self {
        Sessions { node, runtime, insecure, open: Mutex::default() }
    }

    /// A new session for `user` if `password` is theirs: its bearer token.
    /// A role that does not exist, cannot log in or has no password fails
    /// as a wrong password does (28P01), after as much work.
    pub(crate) async fn log_in(&self, user: &str, password: &str) -> FoamResult<String> {
        let catalog = self.node.catalog.refresh().await.unwrap_or_else(|_| self.node.catalog.current());
        let role = catalog.roles.get(user).filter(|role| role.login);
        let accepted = match role.and_then(|role| role.password.as_ref()) {
            Some(verifier) => verifier.accepts(password),
            None => {
                // The same key derivation a real check costs.
                let _ = foam_catalog::roles::ScramVerifier::new(password);
                false
            }
        };
        if !(accepted || (self.insecure && role.is_some())) {
            return Err(FoamError::Query { message: format!("password authentication failed for user \"{user}\""), sqlstate: SqlState::InvalidPassword });
        }
        let token = new_token()?;
        let session = FlightSession {
            session: FoamSession::new(self.node.clone(), self.runtime.clone(), user, self.insecure),
            last_used: Mutex::new(Instant::now()),
            turn: tokio::sync::Mutex::new(()),
            next_handle: AtomicU64::new(1),
            prepared: Mutex::default(),
            results: Mutex::default(),
        };
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let idle = Duration::from_secs(FLIGHT_SQL_SESSION_IDLE_SECS);
        open.retain(|_, session| session.last_used.lock().unwrap_or_else(|p| p.into_inner()).elapsed() < idle);
        if open.len() >= FLIGHT_SQL_SESSIONS_MAX {
            return Err(FoamError::Query {
                message: format!("sorry, too many Flight SQL sessions already ({FLIGHT_SQL_SESSIONS_MAX}); one ends after {FLIGHT_SQL_SESSION_IDLE_SECS} s unused"),
                sqlstate: SqlState::TooManyConnections,
            });
        }
        open.insert(token.clone(), Arc::new(session));
        Ok(token)
    }

    /// The session `token` names, if it is open.
    pub(crate) fn session(&self, token: &str) -> FoamResult<Arc<FlightSession>> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let idle = Duration::from_secs(FLIGHT_SQL_SESSION_IDLE_SECS);
        let session = open.get(token).cloned().ok_or_else(|| FoamError::Query {
            message: "no such Flight SQL session (it ended, or the node restarted): authenticate again".into(),
            sqlstate: SqlState::InvalidAuthorization,
        })?;
        let mut last_used = session.last_used.lock().unwrap_or_else(|p| p.into_inner());
        if last_used.elapsed() >= idle {
            drop(last_used);
            open.remove(token);
            return Err(FoamError::Query {
                message: format!("the Flight SQL session ended after {FLIGHT_SQL_SESSION_IDLE_SECS} s unused: authenticate again"),
                sqlstate: SqlState::InvalidAuthorization,
            });
        }
        *last_used = Instant::now();
        drop(last_used);
        Ok(session)
    }
}

impl FlightSession {
    fn handle(&self) -> u64 {
        self.next_handle.fetch_add(1, Ordering::Relaxed)
    }

    /// Keeps `output` for a ticket; its handle.
    pub(crate) fn keep_result(&self, output: StatementOutput) -> u64 {
        let handle = self.handle();
        let mut results = self.results.lock().unwrap_or_else(|p| p.into_inner());
        while results.len() >= FLIGHT_SQL_RESULTS_PENDING_MAX {
            results.pop_front();
        }
        results.push_back((handle, output));
        handle
    }

    /// The result kept under `handle`, handed over once.
    pub(crate) fn take_result(&self, handle: u64) -> FoamResult<StatementOutput> {
        let mut results = self.results.lock().unwrap_or_else(|p| p.into_inner());
        let at = results.iter().position(|(kept, _)| *kept == handle).ok_or_else(|| FoamError::Query {
            message: format!(
                "no result for this ticket: it was fetched already, or dropped as the session holds at most {FLIGHT_SQL_RESULTS_PENDING_MAX} unfetched; run the statement again"
            ),
            sqlstate: SqlState::InvalidParameterValue,
        })?;
        Ok(results.remove(at).map(|(_, output)| output).expect("found above"))
    }

    /// Keeps a prepared statement; its handle.
    pub(crate) fn keep_prepared(&self, statement: PreparedStatement) -> FoamResult<u64> {
        let mut prepared = self.prepared.lock().unwrap_or_else(|p| p.into_inner());
        if prepared.len() >= FLIGHT_SQL_PREPARED_MAX {
            return Err(FoamError::Query {
                message: format!("a Flight SQL session holds at most {FLIGHT_SQL_PREPARED_MAX} prepared statements: close some"),
                sqlstate: SqlState::ProgramLimitExceeded,
            });
        }
        let handle = self.handle();
        prepared.insert(handle, Prepared { statement: Arc::new(statement), bound: Vec::new() });
        Ok(handle)
    }

    pub(crate) fn prepared(&self, handle: u64) -> FoamResult<Prepared> {
        self.prepared.lock().unwrap_or_else(|p| p.into_inner()).get(&handle).cloned().ok_or_else(|| unknown_prepared(handle))
    }

    /// Binds rows of parameters to a prepared statement.
    pub(crate) fn bind(&self, handle: u64, rows: Vec<ParamValues>) -> FoamResult<()> {
        let mut prepared = self.prepared.lock().unwrap_or_else(|p| p.into_inner());
        prepared.get_mut(&handle).ok_or_else(|| unknown_prepared(handle))?.bound = rows;
        Ok(())
    }

    pub(crate) fn close_prepared(&self, handle: u64) -> FoamResult<()> {
        self.prepared.lock().unwrap_or_else(|p| p.into_inner()).remove(&handle).map(|_| ()).ok_or_else(|| unknown_prepared(handle))
    }
}

fn unknown_prepared(handle: u64) -> FoamError {
    FoamError::Query { message: format!("prepared statement {handle} does not exist in this session"), sqlstate: SqlState::InvalidSqlStatementName }
}

/// A random bearer token, as hex.
fn new_token() -> FoamResult<String> {
    let mut bytes = [0u8; TOKEN_BYTES];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes)
        .map_err(|_| FoamError::internal("the system's random number generator failed"))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}
