//! Test harness: a FoamDB cluster of real `foam start` processes on 127.0.0.1
//! ports, with helpers to kill, restart and query its nodes.

#![allow(dead_code)]

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a node may take to accept SQL connections after it is started.
const NODE_START_TIMEOUT: Duration = Duration::from_secs(60);
/// Query memory per test node; tests use little data.
const TEST_NODE_MEMORY_MB: &str = "1024";

pub struct Node {
    /// "ready" lines in the node's log before its latest start.
    ready_lines_before: usize,
    pub sql_port: u16,
    pub node_port: u16,
    pub data_dir: PathBuf,
    join: Option<String>,
    child: Option<Child>,
}

pub struct Cluster {
    pub dir: tempfile::TempDir,
    pub nodes: Vec<Node>,
    /// Extra `foam start` arguments for every node (failure detector timings).
    args: Vec<String>,
}

/// Ports handed to test nodes: below the kernel's ephemeral range, so an
/// outgoing connection never holds one, and never the same port twice in one
/// test binary, so tests starting clusters at the same time cannot collide.
const TEST_PORTS: std::ops::Range<u16> = 20_000..30_000;
/// `foam local` tests need blocks of ports at a fixed offset; they come from
/// this separate range (and its +1000 twin), disjoint from `TEST_PORTS`.
pub const LOCAL_CLUSTER_PORTS: std::ops::Range<u16> = 10_000..10_900;

static NEXT_PORT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// A port nobody listens on, not handed out before by this process.
pub fn free_port() -> u16 {
    let span = (TEST_PORTS.end - TEST_PORTS.start) as u32;
    let start = std::process::id() % span;
    loop {
        let offset = (start + NEXT_PORT.fetch_add(1, std::sync::atomic::Ordering::SeqCst)) % span;
        let port = TEST_PORTS.start + offset as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

pub fn foam_binary() -> &'static str {
    env!("CARGO_BIN_EXE_foam")
}

impl Cluster {
    /// Starts `count` nodes; node 0 bootstraps and the others join it.
    pub fn start(count: usize) -> Cluster {
        Cluster::start_with(count, &[])
    }

    /// Starts `count` nodes passing `args` to every `foam start`.
    pub fn start_with(count: usize, args: &[&str]) -> Cluster {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut cluster = Cluster { dir, nodes: Vec::new(), args: args.iter().map(|a| a.to_string()).collect() };
        let mut join = None;
        for index in 0..count {
            let node = Node {
                ready_lines_before: 0,
                sql_port: free_port(),
                node_port: free_port(),
                data_dir: cluster.dir.path().join(format!("node-{index}")),
                join: join.clone(),
                child: None,
            };
            if index == 0 {
                join = Some(format!("127.0.0.1:{}", node.node_port));
            }
            cluster.nodes.push(node);
            cluster.spawn(index);
        }
        for index in 0..count {
            cluster.wait_ready(index);
        }
        cluster
    }

    /// Starts one more node that joins the cluster through node 0.
    pub fn add_node(&mut self) -> usize {
        let index = self.nodes.len();
        let node = Node {
            ready_lines_before: 0,
            sql_port: free_port(),
            node_port: free_port(),
            data_dir: self.dir.path().join(format!("node-{index}")),
            join: Some(format!("127.0.0.1:{}", self.nodes[0].node_port)),
            child: None,
        };
        self.nodes.push(node);
        self.spawn(index);
        self.wait_ready(index);
        index
    }

    fn spawn(&mut self, index: usize) {
        self.nodes[index].ready_lines_before = self.ready_lines(index);
        let node = &self.nodes[index];
        std::fs::create_dir_all(&node.data_dir).expect("node dir");
        let log = std::fs::OpenOptions::new().create(true).append(true).open(node.data_dir.join("node.log")).expect("log");
        let mut command = Command::new(foam_binary());
        command
            .args(["start", "--data-dir"])
            .arg(&node.data_dir)
            .args(["--sql-addr", &format!("127.0.0.1:{}", node.sql_port)])
            .args(["--node-addr", &format!("127.0.0.1:{}", node.node_port)])
            .args(["--memory-limit-mb", TEST_NODE_MEMORY_MB])
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone().expect("log")))
            .stderr(Stdio::from(log));
        if let Some(join) = &node.join {
            command.args(["--join", join]);
        }
        self.nodes[index].child = Some(command.spawn().expect("start foam"));
    }

    fn ready_lines(&self, index: usize) -> usize {
        self.log(index).matches(" ready: SQL on ").count()
    }

    /// Waits for the node's "ready" line: its ports are bound before storage
    /// replay, so an open port alone does not mean the node is serving.
    pub fn wait_ready(&mut self, index: usize) {
        let deadline = Instant::now() + NODE_START_TIMEOUT;
        let port = self.nodes[index].sql_port;
        while self.ready_lines(index) <= self.nodes[index].ready_lines_before || TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Some(child) = self.nodes[index].child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                panic!("node {index} exited with {status}; log:\n{}", self.log(index));
            }
            assert!(Instant::now() < deadline, "node {index} did not start; log:\n{}", self.log(index));
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn log(&self, index: usize) -> String {
        std::fs::read_to_string(self.nodes[index].data_dir.join("node.log")).unwrap_or_default()
    }

    /// SIGKILL: the node gets no chance to flush or say goodbye.
    pub fn kill(&mut self, index: usize) {
        if let Some(mut child) = self.nodes[index].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Sends SIGSTOP or SIGCONT ("STOP", "CONT"): a stopped node keeps its
    /// sockets open but answers nothing, like a node stuck in a long pause.
    pub fn signal(&self, index: usize, signal: &str) {
        let pid = self.nodes[index].child.as_ref().expect("node running").id();
        let status = Command::new("kill").args([&format!("-{signal}"), &pid.to_string()]).status().expect("kill");
        assert!(status.success(), "kill -{signal} {pid}");
    }

    pub fn restart(&mut self, index: usize) {
        self.kill(index);
        self.spawn(index);
        self.wait_ready(index);
    }

    pub fn url(&self, index: usize) -> String {
        format!("host=127.0.0.1 port={} user=foam dbname=foam", self.nodes[index].sql_port)
    }

    pub async fn client(&self, index: usize) -> tokio_postgres::Client {
        connect(&self.url(index)).await
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for index in 0..self.nodes.len() {
            self.kill(index);
        }
    }
}

pub async fn connect(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.expect("connect to FoamDB");
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}

/// Runs a query over the simple protocol and returns its rows as text.
pub async fn query_text(client: &tokio_postgres::Client, sql: &str) -> Vec<Vec<Option<String>>> {
    try_query_text(client, sql).await.unwrap_or_else(|e| panic!("{sql}: {e}"))
}

pub async fn try_query_text(client: &tokio_postgres::Client, sql: &str) -> Result<Vec<Vec<Option<String>>>, tokio_postgres::Error> {
    let messages = client.simple_query(sql).await?;
    Ok(messages
        .into_iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(row) => {
                Some((0..row.len()).map(|i| row.get(i).map(|s| s.to_string())).collect())
            }
            _ => None,
        })
        .collect())
}

/// The single value of a one-row, one-column query.
pub async fn scalar(client: &tokio_postgres::Client, sql: &str) -> String {
    let rows = query_text(client, sql).await;
    assert_eq!(rows.len(), 1, "{sql} returned {rows:?}");
    rows[0][0].clone().unwrap_or_else(|| "NULL".into())
}

/// SQLSTATE and message of a failing statement.
pub async fn error_of(client: &tokio_postgres::Client, sql: &str) -> (String, String) {
    match client.simple_query(sql).await {
        Ok(_) => panic!("{sql} should have failed"),
        Err(error) => {
            let db = error.as_db_error().unwrap_or_else(|| panic!("{sql}: not a database error: {error}"));
            (db.code().code().to_string(), db.message().to_string())
        }
    }
}

/// Writes a CSV file of `rows` rows `id|group|name|amount` with a header line.
pub fn write_csv(path: &Path, rows: u64, bad_line: Option<u64>) {
    use std::io::Write;
    let mut file = std::io::BufWriter::new(std::fs::File::create(path).expect("csv file"));
    writeln!(file, "id|grp|name|amount").unwrap();
    for id in 1..=rows {
        // Line numbers count the header as line 1, so row `id` is on line id + 1.
        if bad_line == Some(id + 1) {
            writeln!(file, "{id}|not-a-number|name-{id}|{}.25", id % 1000).unwrap();
        } else {
            writeln!(file, "{id}|{}|name-{id}|{}.25", id % 7, id % 1000).unwrap();
        }
    }
}
