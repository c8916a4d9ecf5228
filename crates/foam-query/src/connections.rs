//! This node's client connections and what each runs: the protocol front
//! end (foam-pgwire) lists a connection at its first statement and marks
//! each statement's start and end; `pg_stat_activity` and the node's HTTP
//! console read the list.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Instant, SystemTime};

/// One open connection.
#[derive(Clone, Debug)]
pub struct Connection {
    /// Its number on this node (`pg_stat_activity.pid`).
    pub pid: u32,
    pub user: String,
    pub database: String,
    pub application_name: String,
    /// The client's address and port.
    pub client: std::net::SocketAddr,
    pub connected: SystemTime,
    /// The statement running, or the last one run.
    pub query: String,
    /// The first keyword of `query` (`SELECT`, `INSERT`, ...).
    pub command: &'static str,
    pub query_start: Option<SystemTime>,
    /// Since when `query` runs; `None` while idle.
    pub running_since: Option<Instant>,
    pub state_change: SystemTime,
}

/// The node's open connections, by pid.
#[derive(Debug)]
pub struct Connections {
    open: Mutex<BTreeMap<u32, Connection>>,
    next_pid: AtomicU32,
}

impl Default for Connections {
    fn default() -> Self {
        Connections { open: Mutex::new(BTreeMap::new()), next_pid: AtomicU32::new(1) }
    }
}

impl Connections {
    /// Lists a connection; returns its pid.
    pub fn open(&self, user: &str, database: &str, application_name: &str, client: std::net::SocketAddr) -> u32 {
        let pid = self.next_pid.fetch_add(1, Ordering::Relaxed);
        let now = SystemTime::now();
        let connection = Connection {
            pid,
            user: user.to_string(),
            database: database.to_string(),
            application_name: application_name.to_string(),
            client,
            connected: now,
            query: String::new(),
            command: "",
            query_start: None,
            running_since: None,
            state_change: now,
        };
        self.lock().insert(pid, connection);
        pid
    }

    pub fn close(&self, pid: u32) {
        self.lock().remove(&pid);
    }

    /// Marks `pid` running `query` from `since`.
    pub fn started(&self, pid: u32, query: &str, command: &'static str, since: Instant) {
        if let Some(c) = self.lock().get_mut(&pid) {
            let now = SystemTime::now();
            c.query = query.to_string();
            c.command = command;
            c.query_start = Some(now);
            c.state_change = now;
            c.running_since = Some(since);
        }
    }

    /// Marks `pid` idle, if it still runs the statement started at `since`.
    pub fn finished(&self, pid: u32, since: Instant) {
        if let Some(c) = self.lock().get_mut(&pid)
            && c.running_since == Some(since)
        {
            c.running_since = None;
            c.state_change = SystemTime::now();
        }
    }

    /// How many connections are open.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Every open connection, by pid.
    pub fn list(&self) -> Vec<Connection> {
        self.lock().values().cloned().collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u32, Connection>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }
}
