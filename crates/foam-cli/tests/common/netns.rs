//! Network namespaces for tests that cut a node off the network. Each node
//! runs in a namespace of its own with two links: a cluster link to a bridge
//! in a hub namespace, which every node-to-node message crosses, and a client
//! link to the test's own namespace, which carries only the test's SQL.
//! Cutting a node off takes its port on the bridge down: its messages to the
//! other nodes, and theirs to it, are dropped silently, as with a pulled
//! cable, while the test can still ask it questions. Needs root and iproute2
//! (`ip`); everything is deleted when the `Network` is dropped.

use std::process::Command;

/// The cluster links' subnet (a /24 on the bridge) and the client links'
/// (one /30 per node): private ranges that exist only inside this network.
const CLUSTER_SUBNET: &str = "10.231.0";
const CLIENT_SUBNET: &str = "10.232";

pub struct Network {
    /// Prefix of every name this network creates: unique per test process.
    tag: String,
    nodes: usize,
}

fn ip(args: &[&str]) {
    let output = Command::new("ip").args(args).output().unwrap_or_else(|e| panic!("ip {}: {e} (is iproute2 installed?)", args.join(" ")));
    assert!(
        output.status.success(),
        "ip {} failed (network namespace tests need root): {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
}

impl Network {
    /// A hub namespace with a bridge; nodes are added with [`add_node`](Self::add_node).
    pub fn create() -> Network {
        remove_stale();
        let network = Network { tag: format!("fdb{}", std::process::id()), nodes: 0 };
        let hub = network.hub();
        ip(&["netns", "add", &hub]);
        ip(&["-n", &hub, "link", "set", "lo", "up"]);
        ip(&["-n", &hub, "link", "add", "br0", "type", "bridge"]);
        ip(&["-n", &hub, "link", "set", "br0", "up"]);
        network
    }

    fn hub(&self) -> String {
        format!("{}h", self.tag)
    }

    /// The namespace node `index` runs in.
    pub fn namespace(&self, index: usize) -> String {
        format!("{}n{index}", self.tag)
    }

    /// Where node `index` listens for the other nodes.
    pub fn cluster_ip(&self, index: usize) -> String {
        format!("{CLUSTER_SUBNET}.{}", index + 2)
    }

    /// Where node `index` listens for SQL clients (reachable from the test).
    pub fn client_ip(&self, index: usize) -> String {
        format!("{CLIENT_SUBNET}.{index}.2")
    }

    /// Creates node `index`'s namespace and links; returns the index.
    pub fn add_node(&mut self) -> usize {
        let index = self.nodes;
        assert!(index < 250, "at most 250 nodes");
        let (hub, ns) = (self.hub(), self.namespace(index));
        let port = format!("p{index}");
        let client_end = format!("{}c{index}", self.tag);
        ip(&["netns", "add", &ns]);
        ip(&["-n", &ns, "link", "set", "lo", "up"]);
        ip(&["link", "add", &port, "netns", &hub, "type", "veth", "peer", "name", "eth0", "netns", &ns]);
        ip(&["-n", &hub, "link", "set", &port, "master", "br0"]);
        ip(&["-n", &hub, "link", "set", &port, "up"]);
        ip(&["-n", &ns, "addr", "add", &format!("{}/24", self.cluster_ip(index)), "dev", "eth0"]);
        ip(&["-n", &ns, "link", "set", "eth0", "up"]);
        ip(&["link", "add", &client_end, "type", "veth", "peer", "name", "client", "netns", &ns]);
        ip(&["addr", "add", &format!("{CLIENT_SUBNET}.{index}.1/30"), "dev", &client_end]);
        ip(&["link", "set", &client_end, "up"]);
        ip(&["-n", &ns, "addr", "add", &format!("{}/30", self.client_ip(index)), "dev", "client"]);
        ip(&["-n", &ns, "link", "set", "client", "up"]);
        self.nodes += 1;
        index
    }

    /// Cuts node `index` off from every other node (its SQL link stays).
    pub fn cut(&self, index: usize) {
        ip(&["-n", &self.hub(), "link", "set", &format!("p{index}"), "down"]);
    }

    /// Reconnects node `index` to the other nodes.
    pub fn heal(&self, index: usize) {
        ip(&["-n", &self.hub(), "link", "set", &format!("p{index}"), "up"]);
    }
}

impl Drop for Network {
    /// Deleting a namespace deletes the links in it, but the kernel may tear
    /// it down late, so the client links' ends here are deleted first.
    fn drop(&mut self) {
        for index in 0..self.nodes {
            let _ = Command::new("ip").args(["link", "del", &format!("{}c{index}", self.tag)]).status();
            let _ = Command::new("ip").args(["netns", "del", &self.namespace(index)]).status();
        }
        let _ = Command::new("ip").args(["netns", "del", &self.hub()]).status();
    }
}

/// Deletes namespaces and links left by test processes that were killed
/// before their `Network` was dropped (their addresses would clash).
fn remove_stale() {
    let dead = |name: &str| {
        let pid: String = name.strip_prefix("fdb").unwrap_or_default().chars().take_while(|c| c.is_ascii_digit()).collect();
        !pid.is_empty() && !std::path::Path::new(&format!("/proc/{pid}")).exists()
    };
    let listed = |args: &[&str]| {
        let output = Command::new("ip").args(args).output().map(|o| o.stdout).unwrap_or_default();
        String::from_utf8_lossy(&output)
            .lines()
            .filter_map(|l| l.split_whitespace().next().map(|n| n.split('@').next().unwrap_or(n).to_string()))
            .collect::<Vec<_>>()
    };
    for link in listed(&["-br", "link"]).into_iter().filter(|name| dead(name)) {
        let _ = Command::new("ip").args(["link", "del", &link]).status();
    }
    for ns in listed(&["netns", "list"]).into_iter().filter(|name| dead(name)) {
        let _ = Command::new("ip").args(["netns", "del", &ns]).status();
    }
}
