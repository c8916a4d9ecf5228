//! What crosses the network between this node and each peer: messages and
//! bytes in both directions, and the time spent waiting for peers' data.
//!
//! Every network path counts at the node that calls: a query stage reading
//! another node's stage output (the datafusion-distributed worker channel), a
//! remote partition scan, and a write shipping rows to an owner. The callee's
//! side is derived, never counted twice: what node A received *from* B is what
//! B sent. `foam_cluster_stats` gathers every node's snapshot and computes each
//! node's sent and received totals from them (see `system_tables.rs`).
//!
//! ```text
//!   node A (caller)                     node B (callee)
//!   Traffic.peers[B].bytes_in  ◀──────  stage output / partition rows
//!   Traffic.peers[B].bytes_out ──────▶  rows to stage on B
//! ```
//! Bytes are the Arrow buffers' sizes (the body of the IPC messages that carry
//! them), messages are record batches or RPC calls. A sampler turns the
//! counters into per-second rates once a second.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use arrow::record_batch::RecordBatch;
use foam_common::NodeId;
use serde::{Deserialize, Serialize};

/// How often the sampler turns counters into rates.
pub const TRAFFIC_SAMPLE_INTERVAL_MS: u64 = 1000;

/// Counters between this node and one peer, as seen by this node.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerTraffic {
    pub messages_in: u64,
    pub bytes_in: u64,
    pub messages_out: u64,
    pub bytes_out: u64,
}

/// The latest once-a-second rates of one node.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct TrafficRates {
    pub messages_per_s: f64,
    pub kb_per_s: f64,
    /// Process CPU time per wall-clock time, per core (100 = all cores busy).
    pub cpu_pct: f64,
    /// Time streams spent waiting for peers' data, per wall-clock time and core.
    pub wait_pct: f64,
}

/// One node's counters since its last reset, sent to whoever builds
/// `foam_cluster_stats`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TrafficSnapshot {
    pub peers: Vec<(NodeId, PeerTraffic)>,
    pub wait_ms: u64,
    pub rates: TrafficRates,
    pub active_queries: u64,
}

#[derive(Debug, Default)]
struct Sample {
    at: Option<Instant>,
    messages: u64,
    bytes: u64,
    wait_nanos: u64,
    cpu_nanos: u64,
    rates: TrafficRates,
}

/// The traffic counters of one node.
#[derive(Debug, Default)]
pub struct Traffic {
    peers: Mutex<BTreeMap<NodeId, PeerTraffic>>,
    wait_nanos: AtomicU64,
    active_queries: AtomicU64,
    sample: Mutex<Sample>,
}

impl Traffic {
    pub fn received(&self, peer: NodeId, messages: u64, bytes: u64) {
        let mut peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        let entry = peers.entry(peer).or_default();
        entry.messages_in += messages;
        entry.bytes_in += bytes;
    }

    pub fn sent(&self, peer: NodeId, messages: u64, bytes: u64) {
        let mut peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        let entry = peers.entry(peer).or_default();
        entry.messages_out += messages;
        entry.bytes_out += bytes;
    }

    pub fn waited(&self, duration: Duration) {
        self.wait_nanos.fetch_add(duration.as_nanos() as u64, Ordering::Relaxed);
    }

    /// Marks a query running on this node until the guard is dropped.
    pub fn query_started(self: &std::sync::Arc<Self>) -> ActiveQuery {
        self.active_queries.fetch_add(1, Ordering::Relaxed);
        ActiveQuery { traffic: self.clone() }
    }

    pub fn snapshot(&self) -> TrafficSnapshot {
        let peers = self.peers.lock().unwrap_or_else(|p| p.into_inner()).iter().map(|(k, v)| (*k, *v)).collect();
        TrafficSnapshot {
            peers,
            wait_ms: self.wait_nanos.load(Ordering::Relaxed) / 1_000_000,
            rates: self.sample.lock().unwrap_or_else(|p| p.into_inner()).rates,
            active_queries: self.active_queries.load(Ordering::Relaxed),
        }
    }

    /// Clears the cumulative counters (rates and active queries are live values).
    pub fn reset(&self) {
        self.peers.lock().unwrap_or_else(|p| p.into_inner()).clear();
        self.wait_nanos.store(0, Ordering::Relaxed);
        let mut sample = self.sample.lock().unwrap_or_else(|p| p.into_inner());
        sample.messages = 0;
        sample.bytes = 0;
        sample.wait_nanos = 0;
    }

    /// Updates the rates from the counters' change since the previous sample.
    pub fn sample(&self, cores: usize) {
        let (messages, bytes) = {
            let peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
            peers.values().fold((0, 0), |(m, b), p| (m + p.messages_in + p.messages_out, b + p.bytes_in + p.bytes_out))
        };
        let wait_nanos = self.wait_nanos.load(Ordering::Relaxed);
        let cpu_nanos = process_cpu_nanos().unwrap_or(0);
        let now = Instant::now();
        let mut sample = self.sample.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(at) = sample.at {
            let seconds = now.duration_since(at).as_secs_f64().max(1e-3);
            let per_core = 100.0 / (seconds * 1e9 * cores.max(1) as f64);
            sample.rates = TrafficRates {
                messages_per_s: messages.saturating_sub(sample.messages) as f64 / seconds,
                kb_per_s: bytes.saturating_sub(sample.bytes) as f64 / 1024.0 / seconds,
                cpu_pct: cpu_nanos.saturating_sub(sample.cpu_nanos) as f64 * per_core,
                wait_pct: (wait_nanos.saturating_sub(sample.wait_nanos) as f64 * per_core).min(100.0),
            };
        }
        sample.at = Some(now);
        sample.messages = messages;
        sample.bytes = bytes;
        sample.wait_nanos = wait_nanos;
        sample.cpu_nanos = cpu_nanos;
    }
}

/// A running query, counted in `active_queries` while it lives.
pub struct ActiveQuery {
    traffic: std::sync::Arc<Traffic>,
}

impl Drop for ActiveQuery {
    fn drop(&mut self) {
        self.traffic.active_queries.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The bytes of Arrow data a batch carries (its buffers' used sizes).
pub fn batch_bytes(batch: &RecordBatch) -> u64 {
    batch.columns().iter().map(|c| c.to_data().get_slice_memory_size().unwrap_or(0) as u64).sum()
}

/// A stream of batches from `peer`, counted as they arrive; the time the
/// consumer spends waiting on it counts as waiting for peers.
pub struct CountedStream<S> {
    inner: S,
    traffic: std::sync::Arc<Traffic>,
    peer: NodeId,
    pending_since: Option<Instant>,
}

impl<S> CountedStream<S> {
    pub fn new(inner: S, traffic: std::sync::Arc<Traffic>, peer: NodeId) -> Self {
        CountedStream { inner, traffic, peer, pending_since: None }
    }
}

impl<S, E> futures::Stream for CountedStream<S>
where
    S: futures::Stream<Item = Result<RecordBatch, E>> + Unpin,
{
    type Item = Result<RecordBatch, E>;

    fn poll_next(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Option<Self::Item>> {
        let this = &mut *self;
        let polled = std::pin::Pin::new(&mut this.inner).poll_next(cx);
        match &polled {
            std::task::Poll::Pending => {
                this.pending_since.get_or_insert_with(Instant::now);
            }
            std::task::Poll::Ready(item) => {
                if let Some(since) = this.pending_since.take() {
                    this.traffic.waited(since.elapsed());
                }
                if let Some(Ok(batch)) = item {
                    this.traffic.received(this.peer, 1, batch_bytes(batch));
                }
            }
        }
        polled
    }
}

/// User plus system CPU time of this process, from /proc (Linux).
pub fn process_cpu_nanos() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    // The kernel reports clock ticks; USER_HZ is 100 on every Linux platform we run on.
    Some((utime + stime) * 10_000_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_add_up_per_peer_and_reset_clears_them() {
        let traffic = Traffic::default();
        traffic.received(2, 1, 100);
        traffic.received(2, 2, 50);
        traffic.sent(3, 1, 7);
        let snapshot = traffic.snapshot();
        assert_eq!(snapshot.peers, vec![
            (2, PeerTraffic { messages_in: 3, bytes_in: 150, messages_out: 0, bytes_out: 0 }),
            (3, PeerTraffic { messages_in: 0, bytes_in: 0, messages_out: 1, bytes_out: 7 }),
        ]);
        traffic.reset();
        assert!(traffic.snapshot().peers.is_empty());
    }

    #[test]
    fn cpu_time_is_read_and_grows() {
        let before = process_cpu_nanos().expect("/proc/self/stat");
        let mut x = 0u64;
        let start = Instant::now();
        while start.elapsed() < Duration::from_millis(50) {
            x = x.wrapping_mul(31).wrapping_add(7);
        }
        std::hint::black_box(x);
        assert!(process_cpu_nanos().unwrap() > before);
    }
}
