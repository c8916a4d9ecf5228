//! Test harness: a FoamDB cluster of real `foam start` processes on 127.0.0.1
//! ports, with helpers to kill, restart and query its nodes.

#![allow(dead_code)]

pub mod lists;
pub mod netns;
pub mod slt_db;

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use foam_common::limits::{META_NODES, meta_voters};

/// How long a node may take to accept SQL connections after it is started.
const NODE_START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a new cluster may take to make its first nodes voting members
/// of the catalog's Raft group.
const META_GROUP_TIMEOUT: Duration = Duration::from_secs(60);
/// Query memory per test node; tests use little data.
const TEST_NODE_MEMORY_MB: &str = "1024";

pub struct Node {
    /// "ready" lines in the node's log before its latest start.
    ready_lines_before: usize,
    /// The addresses the node listens on: 127.0.0.1, or its own in a network namespace.
    pub sql_host: String,
    pub sql_port: u16,
    pub node_host: String,
    pub node_port: u16,
    /// The operators' HTTP port (`--http-addr`), on `sql_host`.
    pub http_port: u16,
    /// The Arrow Flight SQL port (`--flight-sql-addr`), on `sql_host`.
    pub flight_sql_port: u16,
    /// The network namespace the node runs in, if any.
    netns: Option<String>,
    pub data_dir: PathBuf,
    join: Option<String>,
    /// Crash points armed at the node's next start (`foam_common::failpoint`).
    failpoints: Option<String>,
    child: Option<Child>,
}

impl Node {
    /// The address other nodes reach this one at (`--node-addr`).
    pub fn node_addr(&self) -> String {
        format!("{}:{}", self.node_host, self.node_port)
    }
}

pub struct Cluster {
    pub dir: tempfile::TempDir,
    pub nodes: Vec<Node>,
    /// Extra `foam start` arguments for every node (failure detector timings).
    args: Vec<String>,
    /// Each node in a network namespace of its own, when the test cuts links.
    pub network: Option<netns::Network>,
}

/// Ports handed to test nodes: below the kernel's ephemeral range, so an
/// outgoing connection never holds one, and never the same port twice in one
/// test binary, so tests starting clusters at the same time cannot collide.
const TEST_PORTS: std::ops::Range<u16> = 20_000..30_000;
/// `foam local` tests need blocks of ports at a fixed offset; they come from
/// this separate range (and its +1000 and +2000 twins), disjoint from `TEST_PORTS`.
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

/// The body of a chunked HTTP/1.1 answer.
fn unchunk(mut rest: &str) -> String {
    let mut body = String::new();
    while let Some((size, after)) = rest.split_once("\r\n") {
        let Ok(size) = usize::from_str_radix(size.trim(), 16) else { break };
        if size == 0 {
            break;
        }
        body.push_str(&after[..size]);
        rest = &after[size + 2..];
    }
    body
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
        Cluster::start_in(count, args, None)
    }

    /// Starts `count` nodes, each in a network namespace of its own, so the
    /// test can cut them off (`network.cut`); needs root.
    pub fn start_isolated(count: usize, args: &[&str]) -> Cluster {
        Cluster::start_in(count, args, Some(netns::Network::create()))
    }

    fn start_in(count: usize, args: &[&str], network: Option<netns::Network>) -> Cluster {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut cluster = Cluster { dir, nodes: Vec::new(), args: args.iter().map(|a| a.to_string()).collect(), network };
        if let Some(file) = cluster.secret_file() {
            foam_rpc::ClusterSecret::generate().unwrap().save(&file).expect("cluster secret");
        }
        for _ in 0..count {
            let index = cluster.new_node();
            cluster.spawn(index);
        }
        for index in 0..count {
            cluster.wait_ready(index);
        }
        // A lone node is its whole meta group once it is ready.
        if count > 1 {
            cluster.wait_meta_group();
        }
        cluster
    }

    /// Waits until the first nodes (up to [`META_NODES`]) are all in the
    /// catalog's Raft group, as many of them voting as [`meta_voters`] says
    /// and the rest learners. A node is ready before the leader has added
    /// it, and while the group is still growing, stopping one of its
    /// members can leave the leader without a majority. Tests that lose
    /// nodes on purpose must start from a complete group.
    fn wait_meta_group(&self) {
        let (voters, members) = (meta_voters(self.nodes.len()), self.nodes.len().min(META_NODES));
        let wanted = [Some(voters.to_string()), Some(members.to_string())];
        let url = self.url(0);
        // Start-up is synchronous and the caller may be inside a runtime,
        // so the query runs on a thread with its own.
        let waited = std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
                    runtime.block_on(async {
                        let client = connect(&url).await;
                        let sql = "SELECT count(*) FILTER (WHERE meta_role IN ('leader', 'follower')), count(meta_role) FROM foam_nodes";
                        let deadline = Instant::now() + META_GROUP_TIMEOUT;
                        loop {
                            let answer = try_query_text(&client, sql).await;
                            if matches!(&answer, Ok(rows) if rows[0][..] == wanted[..]) {
                                return;
                            }
                            assert!(Instant::now() < deadline, "the meta group has not got {voters} voters of {members}: {answer:?}");
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                    })
                })
                .join()
        });
        if let Err(panic) = waited {
            std::panic::resume_unwind(panic);
        }
    }

    /// Adds a node (not started yet) that joins through node 0, or
    /// bootstraps the cluster when it is node 0.
    fn new_node(&mut self) -> usize {
        let index = self.nodes.len();
        let (sql_host, node_host, netns) = match &mut self.network {
            Some(network) => {
                network.add_node();
                (network.client_ip(index), network.cluster_ip(index), Some(network.namespace(index)))
            }
            None => ("127.0.0.1".to_string(), "127.0.0.1".to_string(), None),
        };
        let node = Node {
            ready_lines_before: 0,
            sql_host,
            sql_port: free_port(),
            node_host,
            node_port: free_port(),
            http_port: free_port(),
            flight_sql_port: free_port(),
            netns,
            data_dir: self.dir.path().join(format!("node-{index}")),
            join: self.nodes.first().map(|first| first.node_addr()),
            failpoints: None,
            child: None,
        };
        self.nodes.push(node);
        index
    }

    /// Starts one more node that joins the cluster through node 0.
    pub fn add_node(&mut self) -> usize {
        let index = self.new_node();
        self.spawn(index);
        self.wait_ready(index);
        index
    }

    fn spawn(&mut self, index: usize) {
        self.nodes[index].ready_lines_before = self.ready_lines(index);
        let node = &self.nodes[index];
        std::fs::create_dir_all(&node.data_dir).expect("node dir");
        let log = std::fs::OpenOptions::new().create(true).append(true).open(node.data_dir.join("node.log")).expect("log");
        // `ip netns exec` enters the namespace and then becomes `foam`, so
        // the child's pid is the node's.
        let mut command = match &node.netns {
            Some(ns) => {
                let mut command = Command::new("ip");
                command.args(["netns", "exec", ns, foam_binary()]);
                command
            }
            None => Command::new(foam_binary()),
        };
        command
            .args(["start", "--data-dir"])
            .arg(&node.data_dir)
            .args(["--sql-addr", &format!("{}:{}", node.sql_host, node.sql_port)])
            .args(["--node-addr", &node.node_addr()])
            .args(["--http-addr", &format!("{}:{}", node.sql_host, node.http_port)])
            .args(["--flight-sql-addr", &format!("{}:{}", node.sql_host, node.flight_sql_port)])
            .args(["--memory-limit-mb", TEST_NODE_MEMORY_MB])
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone().expect("log")))
            .stderr(Stdio::from(log));
        if let Some(join) = &node.join {
            command.args(["--join", join]);
        }
        // Tests load the files they write into the cluster's directory.
        if !self.args.iter().any(|a| a == "--copy-dir") {
            command.arg("--copy-dir").arg(self.dir.path());
        }
        if let Some(file) = self.secret_file() {
            command.arg("--cluster-secret-file").arg(file);
        }
        match &node.failpoints {
            Some(names) => command.env(foam_common::failpoint::FAILPOINTS_VARIABLE, names),
            None => command.env_remove(foam_common::failpoint::FAILPOINTS_VARIABLE),
        };
        self.nodes[index].child = Some(command.spawn().expect("start foam"));
    }

    fn ready_lines(&self, index: usize) -> usize {
        self.log(index).matches(" ready: SQL on ").count()
    }

    /// Waits for the node's "ready" line: its ports are bound before storage
    /// replay, so an open port alone does not mean the node is serving.
    pub fn wait_ready(&mut self, index: usize) {
        let deadline = Instant::now() + NODE_START_TIMEOUT;
        let (host, port) = (self.nodes[index].sql_host.clone(), self.nodes[index].sql_port);
        while self.ready_lines(index) <= self.nodes[index].ready_lines_before || TcpStream::connect((host.as_str(), port)).is_err() {
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

    /// CPU time all running nodes have used so far, in clock ticks (from /proc).
    pub fn cpu_ticks(&self) -> u64 {
        self.nodes
            .iter()
            .filter_map(|node| node.child.as_ref())
            .filter_map(|child| std::fs::read_to_string(format!("/proc/{}/stat", child.id())).ok())
            .map(|stat| {
                // Fields after the command name (which may hold spaces): utime is the 12th, stime the 13th.
                let fields: Vec<&str> = stat.rsplit_once(')').map(|(_, rest)| rest).unwrap_or_default().split_whitespace().collect();
                fields.get(11).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0) + fields.get(12).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0)
            })
            .sum()
    }

    pub fn restart(&mut self, index: usize) {
        self.kill(index);
        self.spawn(index);
        self.wait_ready(index);
    }

    /// Restarts node `index` with crash points `names` armed (comma
    /// separated; `None` disarms them): it exits when it reaches one.
    pub fn restart_with_failpoints(&mut self, index: usize, names: Option<&str>) {
        self.nodes[index].failpoints = names.map(str::to_string);
        self.restart(index);
    }

    /// Waits (up to `timeout`) for node `index` to exit on its own, as at
    /// a crash point; returns its exit code.
    pub fn wait_exit(&mut self, index: usize, timeout: Duration) -> Option<i32> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(child) = self.nodes[index].child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                self.nodes[index].child = None;
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// Node `index`'s answer to `GET path` on its HTTP port: the status
    /// code and the body.
    pub fn http_get(&self, index: usize, path: &str) -> (u16, String) {
        use std::io::{Read, Write};
        let node = &self.nodes[index];
        let mut stream = TcpStream::connect((node.sql_host.as_str(), node.http_port)).expect("connect to the HTTP port");
        stream.set_read_timeout(Some(Duration::from_secs(30))).expect("timeout");
        write!(stream, "GET {path} HTTP/1.1\r\nHost: {}:{}\r\nConnection: close\r\n\r\n", node.sql_host, node.http_port).expect("send");
        let mut response = Vec::new();
        stream.read_to_end(&mut response).expect("read the HTTP answer");
        let response = String::from_utf8_lossy(&response).to_string();
        let (head, body) = response.split_once("\r\n\r\n").expect("an HTTP head");
        let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).expect("a status code");
        let body = if head.to_ascii_lowercase().contains("transfer-encoding: chunked") { unchunk(body) } else { body.to_string() };
        (status, body)
    }

    /// Node `index`'s connection string, as the superuser the cluster's
    /// first node created (no password with `--insecure`).
    pub fn url(&self, index: usize) -> String {
        let url = format!("host={} port={} user=foam dbname=foam", self.nodes[index].sql_host, self.nodes[index].sql_port);
        match self.password() {
            Some(password) => format!("{url} password={password}"),
            None => url,
        }
    }

    /// The file of the cluster secret every node is given (none for an
    /// `--insecure` cluster).
    pub fn secret_file(&self) -> Option<PathBuf> {
        (!self.args.iter().any(|a| a == "--insecure")).then(|| self.dir.path().join(foam_rpc::auth::CLUSTER_SECRET_FILE))
    }

    /// The cluster secret, for calls this test makes to the nodes' ports.
    pub fn secret(&self) -> Option<foam_rpc::ClusterSecret> {
        self.secret_file().map(|file| foam_rpc::ClusterSecret::load(&file).expect("cluster secret"))
    }

    /// The superuser's generated password, from the node that created it.
    pub fn password(&self) -> Option<String> {
        self.nodes.iter().find_map(|node| foam_node::superuser::read_password(&node.data_dir))
    }

    pub async fn client(&self, index: usize) -> tokio_postgres::Client {
        connect(&self.url(index)).await
    }
}

/// Lines of each node's log a failing test prints, so a failure seen only in
/// CI's output still shows what the nodes were doing.
const LOG_LINES_ON_FAILURE: usize = 25;

impl Drop for Cluster {
    fn drop(&mut self) {
        for index in 0..self.nodes.len() {
            self.kill(index);
        }
        if std::thread::panicking() {
            for index in 0..self.nodes.len() {
                let log = self.log(index);
                let lines: Vec<&str> = log.lines().collect();
                let tail = &lines[lines.len().saturating_sub(LOG_LINES_ON_FAILURE)..];
                println!("--- last {} lines of node {index}'s log ---\n{}", tail.len(), tail.join("\n"));
            }
        }
    }
}

/// The test's random seed: `FOAM_TEST_SEED`, else the clock; printed so a
/// failing run can be replayed.
pub fn seed() -> u64 {
    let seed = std::env::var("FOAM_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64);
    println!("FOAM_TEST_SEED={seed}");
    seed
}

/// xorshift64*: enough randomness to pick victims and timings, replayable.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
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
    try_query_text(client, sql).await.unwrap_or_else(|e| match e.as_db_error() {
        Some(db) => panic!("{sql}: [{}] {}", db.code().code(), db.message()),
        None => panic!("{sql}: {e}"),
    })
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

/// The plan `EXPLAIN` prints for `sql`, one line per row.
pub async fn explain(client: &tokio_postgres::Client, sql: &str) -> String {
    query_text(client, &format!("EXPLAIN {sql}"))
        .await
        .into_iter()
        .map(|row| row.into_iter().map(|c| c.unwrap_or_default()).collect::<Vec<_>>().join(" "))
        .collect::<Vec<_>>()
        .join("\n")
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
