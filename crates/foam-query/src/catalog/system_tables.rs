//! System tables that show what the cluster is doing, built when queried:
//! `foam_nodes` (every node, its state as the failure detector decided, and
//! whether it answers this node), `foam_partitions` (every copy of every
//! partition: its node, its state — live, catching-up, lost — whether queries
//! read it, its rows and bytes, asked of its node, growing while a copy is made) and
//! `foam_cluster_stats` (messages, bytes, CPU and waiting per node, from every
//! node's traffic counters, plus a cluster total row with a NULL node_id).
//! `foam_partition_digests` is `foam_partitions` with each copy's digest (row
//! count and a checksum of its rows) instead of its size: copies that agree
//! hold the same rows. It reads every row of every copy.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use arrow::array::{ArrayRef, BooleanArray, Float64Array, StringArray, UInt32Array, UInt64Array};
use arrow::datatypes::{DataType, Field, Schema};
use arrow::record_batch::RecordBatch;
use datafusion::catalog::{MemTable, TableProvider};
use foam_common::limits::{PEER_CONNECT_TIMEOUT_MS, RPC_REQUEST_TIMEOUT_MS};
use foam_common::{FoamError, FoamResult, NodeId, PartitionId};
use foam_rpc::{NodeRequest, NodeResponse, TrafficSnapshot};
use foam_storage::{PartitionStats, RowDigest};

use crate::context::NodeContext;

pub const NAMES: &[&str] = &["foam_nodes", "foam_partitions", "foam_partition_digests", "foam_cluster_stats"];

pub async fn build(name: &str, node: &Arc<NodeContext>) -> FoamResult<Option<Arc<dyn TableProvider>>> {
    let Some(batch) = batch(name, node).await? else { return Ok(None) };
    let table = MemTable::try_new(batch.schema(), vec![vec![batch]])?;
    Ok(Some(Arc::new(table)))
}

/// The rows of system table `name` as of now (the node's console shows
/// them too); `None` if there is no such table.
pub async fn batch(name: &str, node: &Arc<NodeContext>) -> FoamResult<Option<RecordBatch>> {
    Ok(Some(match name {
        "foam_nodes" => nodes(node).await?,
        "foam_partitions" => partitions(node, CopyFacts::Stats).await?,
        "foam_partition_digests" => partitions(node, CopyFacts::Digests).await?,
        "foam_cluster_stats" => cluster_stats(node).await?,
        _ => return Ok(None),
    }))
}

/// What a node says of itself in `foam_nodes`.
struct NodeCounters {
    partition_scans: u64,
    rows_scanned: u64,
    rows_sent_to_peers: u64,
    meta_role: Option<String>,
}

/// The node's counters and meta role if it answers within the connect timeout.
async fn ping(node: &Arc<NodeContext>, id: NodeId) -> Option<NodeCounters> {
    let answer = if id == node.node_id { Ok(node.pong()) } else { ask(node, id, &NodeRequest::Ping { from_leader: false }).await };
    match answer {
        Ok(NodeResponse::Pong { partition_scans, rows_scanned, rows_sent_to_peers, meta_role, .. }) => {
            Some(NodeCounters { partition_scans, rows_scanned, rows_sent_to_peers, meta_role })
        }
        _ => None,
    }
}

/// A peer's answer to `request`, or an error naming it when it does not
/// answer within the connect timeout (system tables must not hang on a dead node).
async fn ask(node: &Arc<NodeContext>, id: NodeId, request: &NodeRequest) -> FoamResult<NodeResponse> {
    ask_within(node, id, request, Duration::from_millis(PEER_CONNECT_TIMEOUT_MS)).await
}

async fn ask_within(node: &Arc<NodeContext>, id: NodeId, request: &NodeRequest, timeout: Duration) -> FoamResult<NodeResponse> {
    let client = node.client_for(id)?;
    match tokio::time::timeout(timeout, client.call(request, &[])).await {
        Ok(answer) => answer.map(|(response, _)| response),
        Err(_) => Err(FoamError::NodeUnavailable { node_id: id, addr: client.addr().into(), message: "timed out".into() }),
    }
}

async fn nodes(node: &Arc<NodeContext>) -> FoamResult<RecordBatch> {
    let catalog = node.catalog.current();
    let mut ids = Vec::new();
    let mut statuses = Vec::new();
    let mut reachable = Vec::new();
    let mut scans = Vec::new();
    let mut rows_scanned = Vec::new();
    let mut rows_sent = Vec::new();
    let mut roles = Vec::new();
    for id in catalog.nodes.keys() {
        ids.push(*id);
        let answer = match catalog.nodes[id].state {
            foam_catalog::model::NodeState::Up => ping(node, *id).await,
            foam_catalog::model::NodeState::Down => None,
        };
        statuses.push(match catalog.nodes[id].state {
            foam_catalog::model::NodeState::Up => "up",
            foam_catalog::model::NodeState::Down => "down",
        });
        reachable.push(answer.is_some());
        scans.push(answer.as_ref().map(|a| a.partition_scans));
        rows_scanned.push(answer.as_ref().map(|a| a.rows_scanned));
        rows_sent.push(answer.as_ref().map(|a| a.rows_sent_to_peers));
        roles.push(answer.and_then(|a| a.meta_role));
    }
    let schema = Arc::new(Schema::new(vec![
        Field::new("node_id", DataType::UInt32, false),
        Field::new("node_addr", DataType::Utf8, false),
        Field::new("sql_addr", DataType::Utf8, false),
        Field::new("status", DataType::Utf8, false),
        Field::new("answers", DataType::Boolean, false),
        Field::new("partition_scans", DataType::UInt64, true),
        Field::new("rows_scanned", DataType::UInt64, true),
        Field::new("rows_sent_to_peers", DataType::UInt64, true),
        // Its part in the catalog's Raft group, as it says itself; NULL for
        // a node outside the meta group or one that does not answer.
        Field::new("meta_role", DataType::Utf8, true),
    ]));
    let columns: Vec<ArrayRef> = vec![
        Arc::new(UInt32Array::from(ids)),
        Arc::new(StringArray::from_iter_values(catalog.nodes.values().map(|n| n.node_addr.as_str()))),
        Arc::new(StringArray::from_iter_values(catalog.nodes.values().map(|n| n.sql_addr.as_str()))),
        Arc::new(StringArray::from(statuses)),
        Arc::new(BooleanArray::from(reachable)),
        Arc::new(UInt64Array::from(scans)),
        Arc::new(UInt64Array::from(rows_scanned)),
        Arc::new(UInt64Array::from(rows_sent)),
        Arc::new(StringArray::from(roles)),
    ];
    RecordBatch::try_new(schema, columns).map_err(|e| FoamError::internal(e.to_string()))
}

/// What a partitions table says of each copy besides where it is: two
/// numbers, asked of the copy's node.
#[derive(Clone, Copy)]
enum CopyFacts {
    /// Its rows and bytes, from the node's counters.
    Stats,
    /// Its rows and the checksum of their digest, from reading them all.
    Digests,
}

impl CopyFacts {
    fn columns(self) -> [&'static str; 2] {
        match self {
            CopyFacts::Stats => ["row_count", "bytes"],
            CopyFacts::Digests => ["row_count", "checksum"],
        }
    }
}

async fn partitions(node: &Arc<NodeContext>, facts: CopyFacts) -> FoamResult<RecordBatch> {
    let catalog = node.catalog.current();
    let (mut names, mut parts, mut holders, mut states, mut serving, mut rows, mut second) =
        (vec![], vec![], vec![], vec![], vec![], vec![], vec![]);
    for table in catalog.tables.values() {
        // One row per copy: a hash table's partitions have `replicas` copies
        // each, a replicated table's single partition one per node.
        let readers: Vec<(PartitionId, NodeId)> = match &table.distribution {
            foam_catalog::Distribution::Hash { owners, .. } => {
                owners.iter().enumerate().map(|(p, o)| (p as PartitionId, *o)).collect()
            }
            foam_catalog::Distribution::Replicated { nodes } => nodes.iter().map(|n| (0, *n)).collect(),
        };
        let copies: Vec<(PartitionId, foam_catalog::model::Replica)> = table
            .placement
            .iter()
            .enumerate()
            .flat_map(|(p, placement)| placement.replicas.iter().map(move |r| (p as PartitionId, *r)))
            .collect();
        let mut stats: BTreeMap<(NodeId, PartitionId), [u64; 2]> = BTreeMap::new();
        let asked = copies.iter().map(|(partition, replica)| (*partition, replica.node));
        for (holder, answer) in facts_of_copies(node, table.id, asked, facts).await {
            // A holder that does not answer shows NULLs.
            stats.extend(answer.into_iter().flatten().map(|(partition, found)| ((holder, partition), found)));
        }
        for (partition, replica) in copies {
            let found = stats.get(&(replica.node, partition)).copied();
            names.push(table.name.clone());
            parts.push(partition);
            holders.push(replica.node);
            states.push(replica.state.name());
            serving.push(readers.contains(&(partition, replica.node)));
            rows.push(found.map(|s| s[0]));
            second.push(found.map(|s| s[1]));
        }
    }
    let schema = Arc::new(Schema::new(vec![
        Field::new("table_name", DataType::Utf8, false),
        Field::new("partition", DataType::UInt32, false),
        Field::new("node_id", DataType::UInt32, false),
        Field::new("replica_state", DataType::Utf8, false),
        Field::new("serves_reads", DataType::Boolean, false),
        Field::new(facts.columns()[0], DataType::UInt64, true),
        Field::new(facts.columns()[1], DataType::UInt64, true),
    ]));
    let columns: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from(names)),
        Arc::new(UInt32Array::from(parts)),
        Arc::new(UInt32Array::from(holders)),
        Arc::new(StringArray::from(states)),
        Arc::new(BooleanArray::from(serving)),
        Arc::new(UInt64Array::from(rows)),
        Arc::new(UInt64Array::from(second)),
    ];
    RecordBatch::try_new(schema, columns).map_err(|e| FoamError::internal(e.to_string()))
}

/// The bytes `table` stores: each partition's as the copy queries read
/// holds them (one copy of a replicated table), asked of its node.
pub async fn table_bytes(node: &Arc<NodeContext>, table: &foam_catalog::TableDef) -> FoamResult<u64> {
    let readers: Vec<(PartitionId, NodeId)> = match &table.distribution {
        foam_catalog::Distribution::Hash { owners, .. } => owners.iter().enumerate().map(|(p, o)| (p as PartitionId, *o)).collect(),
        foam_catalog::Distribution::Replicated { nodes } => {
            let reader = if nodes.contains(&node.node_id) { Some(node.node_id) } else { nodes.first().copied() };
            reader.map(|reader| (0, reader)).into_iter().collect()
        }
    };
    let mut bytes = 0;
    for (_, answer) in facts_of_copies(node, table.id, readers.into_iter(), CopyFacts::Stats).await {
        bytes += answer?.iter().map(|(_, [_, b])| b).sum::<u64>();
    }
    Ok(bytes)
}

/// The facts of some copies (partition, holder) of a table, each holder
/// asked for all of its copies, the holders at once.
async fn facts_of_copies(
    node: &Arc<NodeContext>,
    table_id: foam_common::TableId,
    copies: impl Iterator<Item = (PartitionId, NodeId)>,
    facts: CopyFacts,
) -> Vec<(NodeId, FoamResult<Vec<(PartitionId, [u64; 2])>>)> {
    let mut by_node: BTreeMap<NodeId, Vec<PartitionId>> = BTreeMap::new();
    for (partition, holder) in copies {
        by_node.entry(holder).or_default().push(partition);
    }
    let asks = by_node.into_iter().map(|(holder, partitions)| async move { (holder, copy_facts(node, holder, table_id, partitions, facts).await) });
    futures::future::join_all(asks).await
}

/// The facts of some partitions of a table on one node; an error when it
/// does not answer (its copies show NULLs).
async fn copy_facts(
    node: &Arc<NodeContext>,
    owner: NodeId,
    table_id: foam_common::TableId,
    partitions: Vec<PartitionId>,
    facts: CopyFacts,
) -> FoamResult<Vec<(PartitionId, [u64; 2])>> {
    match facts {
        CopyFacts::Stats => {
            let stats: Vec<(PartitionId, PartitionStats)> = if owner == node.node_id {
                partitions.into_iter().map(|p| (p, node.storage.stats(table_id, p))).collect()
            } else {
                match ask(node, owner, &NodeRequest::PartitionStats { table_id, partitions }).await? {
                    NodeResponse::Stats { stats } => stats,
                    other => return Err(FoamError::internal(format!("unexpected reply {other:?}"))),
                }
            };
            Ok(stats.into_iter().map(|(p, s)| (p, [s.rows, s.bytes])).collect())
        }
        CopyFacts::Digests => {
            let digests: Vec<(PartitionId, RowDigest)> = if owner == node.node_id {
                let storage = node.storage.clone();
                tokio::task::spawn_blocking(move || storage.digests(table_id, partitions))
                    .await
                    .map_err(|e| FoamError::internal(e.to_string()))??
            } else {
                let request = NodeRequest::PartitionDigests { table_id, partitions };
                match ask_within(node, owner, &request, Duration::from_millis(RPC_REQUEST_TIMEOUT_MS)).await? {
                    NodeResponse::Digests { digests } => digests,
                    other => return Err(FoamError::internal(format!("unexpected reply {other:?}"))),
                }
            };
            Ok(digests.into_iter().map(|(p, d)| (p, [d.rows, d.checksum])).collect())
        }
    }
}

/// Every node's traffic snapshot (reset after reading when `reset`); `None`
/// for a node that does not answer.
pub async fn traffic_snapshots(node: &Arc<NodeContext>, reset: bool) -> Vec<(NodeId, Option<TrafficSnapshot>)> {
    let catalog = node.catalog.current();
    let mut snapshots = Vec::with_capacity(catalog.nodes.len());
    for id in catalog.nodes.keys().copied() {
        if id == node.node_id {
            let snapshot = node.traffic.snapshot();
            if reset {
                node.traffic.reset();
            }
            snapshots.push((id, Some(snapshot)));
            continue;
        }
        let answer = match ask(node, id, &NodeRequest::Traffic { reset }).await {
            Ok(NodeResponse::Traffic { snapshot }) => Some(snapshot),
            _ => None,
        };
        snapshots.push((id, answer));
    }
    snapshots
}

/// Sent and received totals of every node, from the callers' counts: what
/// node A received from B is what B sent to A, and the reverse.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
struct NodeTotals {
    messages_sent: u64,
    bytes_sent: u64,
    messages_received: u64,
    bytes_received: u64,
}

fn node_totals(snapshots: &[(NodeId, Option<TrafficSnapshot>)]) -> BTreeMap<NodeId, NodeTotals> {
    let mut totals: BTreeMap<NodeId, NodeTotals> = snapshots.iter().map(|(id, _)| (*id, NodeTotals::default())).collect();
    for (caller, snapshot) in snapshots {
        let Some(snapshot) = snapshot else { continue };
        for (peer, t) in &snapshot.peers {
            let me = totals.entry(*caller).or_default();
            me.messages_received += t.messages_in;
            me.bytes_received += t.bytes_in;
            me.messages_sent += t.messages_out;
            me.bytes_sent += t.bytes_out;
            let other = totals.entry(*peer).or_default();
            other.messages_sent += t.messages_in;
            other.bytes_sent += t.bytes_in;
            other.messages_received += t.messages_out;
            other.bytes_received += t.bytes_out;
        }
    }
    totals
}

/// One line per node: what it sent and received and how long it waited on
/// peers between two sets of snapshots.
pub fn traffic_delta_lines(before: &[(NodeId, Option<TrafficSnapshot>)], after: &[(NodeId, Option<TrafficSnapshot>)]) -> Vec<String> {
    let start = node_totals(before);
    let end = node_totals(after);
    let waited = |snapshots: &[(NodeId, Option<TrafficSnapshot>)], id: NodeId| {
        snapshots.iter().find(|(n, _)| *n == id).and_then(|(_, s)| s.as_ref()).map(|s| s.wait_ms).unwrap_or(0)
    };
    end.iter()
        .map(|(id, t)| {
            let s = start.get(id).copied().unwrap_or_default();
            format!(
                "  node {id}: sent {} messages, {} bytes; received {} messages, {} bytes; streams waited on peers {} ms in all",
                t.messages_sent.saturating_sub(s.messages_sent),
                t.bytes_sent.saturating_sub(s.bytes_sent),
                t.messages_received.saturating_sub(s.messages_received),
                t.bytes_received.saturating_sub(s.bytes_received),
                waited(after, *id).saturating_sub(waited(before, *id)),
            )
        })
        .collect()
}

async fn cluster_stats(node: &Arc<NodeContext>) -> FoamResult<RecordBatch> {
    let snapshots = traffic_snapshots(node, false).await;
    let totals = node_totals(&snapshots);
    let mut ids: Vec<Option<NodeId>> = Vec::new();
    let (mut m_sent, mut b_sent, mut m_recv, mut b_recv) = (vec![], vec![], vec![], vec![]);
    let (mut mps, mut kbps, mut cpu, mut wait, mut active) = (vec![], vec![], vec![], vec![], vec![]);
    let mut sum = NodeTotals::default();
    let (mut sum_mps, mut sum_kbps, mut sum_cpu, mut sum_wait, mut sum_active, mut answered) = (0.0, 0.0, 0.0, 0.0, 0u64, 0usize);
    for (id, snapshot) in &snapshots {
        let t = totals.get(id).copied().unwrap_or_default();
        ids.push(Some(*id));
        m_sent.push(Some(t.messages_sent));
        b_sent.push(Some(t.bytes_sent));
        m_recv.push(Some(t.messages_received));
        b_recv.push(Some(t.bytes_received));
        // Every byte is sent by one node and received by another: the
        // cluster's traffic is the sum of what was sent.
        sum.messages_sent += t.messages_sent;
        sum.bytes_sent += t.bytes_sent;
        sum.messages_received += t.messages_received;
        sum.bytes_received += t.bytes_received;
        let rates = snapshot.as_ref().map(|s| s.rates);
        mps.push(rates.map(|r| r.messages_per_s));
        kbps.push(rates.map(|r| r.kb_per_s));
        cpu.push(rates.map(|r| r.cpu_pct));
        wait.push(rates.map(|r| r.wait_pct));
        active.push(snapshot.as_ref().map(|s| s.active_queries));
        if let Some(s) = snapshot {
            answered += 1;
            sum_mps += s.rates.messages_per_s;
            sum_kbps += s.rates.kb_per_s;
            sum_cpu += s.rates.cpu_pct;
            sum_wait += s.rates.wait_pct;
            sum_active += s.active_queries;
        }
    }
    // The total row: counters and rates summed (each message counted once, at
    // the node that observed it), CPU and waiting averaged over the nodes.
    let average = |x: f64| if answered == 0 { None } else { Some(x / answered as f64) };
    ids.push(None);
    m_sent.push(Some(sum.messages_sent));
    b_sent.push(Some(sum.bytes_sent));
    m_recv.push(Some(sum.messages_received));
    b_recv.push(Some(sum.bytes_received));
    mps.push(Some(sum_mps));
    kbps.push(Some(sum_kbps));
    cpu.push(average(sum_cpu));
    wait.push(average(sum_wait));
    active.push(Some(sum_active));
    let schema = Arc::new(Schema::new(vec![
        Field::new("node_id", DataType::UInt32, true),
        Field::new("messages_sent", DataType::UInt64, true),
        Field::new("bytes_sent", DataType::UInt64, true),
        Field::new("messages_received", DataType::UInt64, true),
        Field::new("bytes_received", DataType::UInt64, true),
        Field::new("messages_per_s", DataType::Float64, true),
        Field::new("kb_per_s", DataType::Float64, true),
        Field::new("cpu_pct", DataType::Float64, true),
        Field::new("wait_pct", DataType::Float64, true),
        Field::new("active_queries", DataType::UInt64, true),
    ]));
    let columns: Vec<ArrayRef> = vec![
        Arc::new(UInt32Array::from(ids)),
        Arc::new(UInt64Array::from(m_sent)),
        Arc::new(UInt64Array::from(b_sent)),
        Arc::new(UInt64Array::from(m_recv)),
        Arc::new(UInt64Array::from(b_recv)),
        Arc::new(Float64Array::from(mps)),
        Arc::new(Float64Array::from(kbps)),
        Arc::new(Float64Array::from(cpu)),
        Arc::new(Float64Array::from(wait)),
        Arc::new(UInt64Array::from(active)),
    ];
    RecordBatch::try_new(schema, columns).map_err(|e| FoamError::internal(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use foam_rpc::PeerTraffic;

    fn snapshot(peers: Vec<(NodeId, PeerTraffic)>) -> Option<TrafficSnapshot> {
        Some(TrafficSnapshot { peers, ..Default::default() })
    }

    #[test]
    fn callers_counts_become_both_sides_totals() {
        // Node 1 pulled 100 bytes in 2 batches from node 2 and shipped 30 bytes to node 3;
        // node 3 pulled 5 bytes from node 1.
        let snapshots = vec![
            (1, snapshot(vec![
                (2, PeerTraffic { messages_in: 2, bytes_in: 100, ..Default::default() }),
                (3, PeerTraffic { messages_out: 1, bytes_out: 30, ..Default::default() }),
            ])),
            (2, snapshot(vec![])),
            (3, snapshot(vec![(1, PeerTraffic { messages_in: 1, bytes_in: 5, ..Default::default() })])),
        ];
        let totals = node_totals(&snapshots);
        assert_eq!(totals[&1], NodeTotals { messages_sent: 2, bytes_sent: 35, messages_received: 2, bytes_received: 100 });
        assert_eq!(totals[&2], NodeTotals { messages_sent: 2, bytes_sent: 100, messages_received: 0, bytes_received: 0 });
        assert_eq!(totals[&3], NodeTotals { messages_sent: 0, bytes_sent: 0, messages_received: 2, bytes_received: 35 });
        let sent: u64 = totals.values().map(|t| t.bytes_sent).sum();
        let received: u64 = totals.values().map(|t| t.bytes_received).sum();
        assert_eq!(sent, received);
    }
}

/// `foam_cluster_stats_reset()`: clears the traffic counters on every node
/// (like Virtuoso's `cl_sys_stat(..., clr=>1)`); returns how many nodes
/// answered. An async UDF, as it calls every node.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct ClusterStatsReset {
    node: super::Handle<NodeContext>,
    signature: datafusion::logical_expr::Signature,
}

impl ClusterStatsReset {
    pub const NAME: &'static str = "foam_cluster_stats_reset";

    pub fn udf(node: Arc<NodeContext>) -> datafusion::logical_expr::ScalarUDF {
        let signature = datafusion::logical_expr::Signature::nullary(datafusion::logical_expr::Volatility::Volatile);
        datafusion::logical_expr::async_udf::AsyncScalarUDF::new(Arc::new(ClusterStatsReset { node: super::Handle(node), signature })).into_scalar_udf()
    }
}

impl datafusion::logical_expr::ScalarUDFImpl for ClusterStatsReset {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn signature(&self) -> &datafusion::logical_expr::Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> datafusion::error::Result<DataType> {
        Ok(DataType::Int64)
    }

    fn invoke_with_args(
        &self,
        _args: datafusion::logical_expr::ScalarFunctionArgs,
    ) -> datafusion::error::Result<datafusion::logical_expr::ColumnarValue> {
        Err(datafusion::error::DataFusionError::Internal(format!("{} runs asynchronously", Self::NAME)))
    }
}

#[async_trait::async_trait]
impl datafusion::logical_expr::async_udf::AsyncScalarUDFImpl for ClusterStatsReset {
    async fn invoke_async_with_args(
        &self,
        args: datafusion::logical_expr::ScalarFunctionArgs,
    ) -> datafusion::error::Result<datafusion::logical_expr::ColumnarValue> {
        let snapshots = traffic_snapshots(&self.node.0, true).await;
        let answered = snapshots.iter().filter(|(_, s)| s.is_some()).count() as i64;
        let values = arrow::array::Int64Array::from(vec![answered; args.number_rows.max(1)]);
        Ok(datafusion::logical_expr::ColumnarValue::Array(Arc::new(values)))
    }
}
