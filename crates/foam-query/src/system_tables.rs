//! System tables that show what the cluster is doing, built when queried:
//! `foam_nodes` (every node and whether it answers) and `foam_partitions` (every
//! partition of every table, its owner, rows and bytes, asked of the owner).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use arrow::array::{ArrayRef, StringArray, UInt32Array, UInt64Array};
use arrow::datatypes::{DataType, Field, Schema};
use arrow::record_batch::RecordBatch;
use datafusion::catalog::{MemTable, TableProvider};
use foam_common::limits::PEER_CONNECT_TIMEOUT_MS;
use foam_common::{FoamError, FoamResult, NodeId, PartitionId};
use foam_rpc::{NodeRequest, NodeResponse};
use foam_storage::PartitionStats;

use crate::context::NodeContext;

pub const NAMES: &[&str] = &["foam_nodes", "foam_partitions"];

pub async fn build(name: &str, node: &Arc<NodeContext>) -> FoamResult<Option<Arc<dyn TableProvider>>> {
    let batch = match name {
        "foam_nodes" => nodes(node).await?,
        "foam_partitions" => partitions(node).await?,
        _ => return Ok(None),
    };
    let table = MemTable::try_new(batch.schema(), vec![vec![batch]])?;
    Ok(Some(Arc::new(table)))
}

/// The node's (partition scans, rows sent to peers) if it answers within the
/// connect timeout.
async fn ping(node: &Arc<NodeContext>, id: NodeId) -> Option<(u64, u64)> {
    if id == node.node_id {
        let ordering = std::sync::atomic::Ordering::Relaxed;
        return Some((node.partition_scans.load(ordering), node.rows_sent_to_peers.load(ordering)));
    }
    let client = node.client_for(id).ok()?;
    let ping = client.call(&NodeRequest::Ping, &[]);
    match tokio::time::timeout(Duration::from_millis(PEER_CONNECT_TIMEOUT_MS), ping).await {
        Ok(Ok((NodeResponse::Pong { partition_scans, rows_sent_to_peers, .. }, _))) => Some((partition_scans, rows_sent_to_peers)),
        _ => None,
    }
}

async fn nodes(node: &Arc<NodeContext>) -> FoamResult<RecordBatch> {
    let catalog = node.catalog.current();
    let mut ids = Vec::new();
    let mut statuses = Vec::new();
    let mut scans = Vec::new();
    let mut rows_sent = Vec::new();
    for id in catalog.nodes.keys() {
        ids.push(*id);
        let answer = ping(node, *id).await;
        statuses.push(if answer.is_some() { "up" } else { "down" });
        scans.push(answer.map(|a| a.0));
        rows_sent.push(answer.map(|a| a.1));
    }
    let schema = Arc::new(Schema::new(vec![
        Field::new("node_id", DataType::UInt32, false),
        Field::new("node_addr", DataType::Utf8, false),
        Field::new("sql_addr", DataType::Utf8, false),
        Field::new("status", DataType::Utf8, false),
        Field::new("partition_scans", DataType::UInt64, true),
        Field::new("rows_sent_to_peers", DataType::UInt64, true),
    ]));
    let columns: Vec<ArrayRef> = vec![
        Arc::new(UInt32Array::from(ids)),
        Arc::new(StringArray::from_iter_values(catalog.nodes.values().map(|n| n.node_addr.as_str()))),
        Arc::new(StringArray::from_iter_values(catalog.nodes.values().map(|n| n.sql_addr.as_str()))),
        Arc::new(StringArray::from(statuses)),
        Arc::new(UInt64Array::from(scans)),
        Arc::new(UInt64Array::from(rows_sent)),
    ];
    RecordBatch::try_new(schema, columns).map_err(|e| FoamError::internal(e.to_string()))
}

async fn partitions(node: &Arc<NodeContext>) -> FoamResult<RecordBatch> {
    let catalog = node.catalog.current();
    let (mut names, mut parts, mut owners, mut rows, mut bytes) = (vec![], vec![], vec![], vec![], vec![]);
    for table in catalog.tables.values() {
        // A replicated table is listed once per node; a hash table once per partition.
        let placements: Vec<(PartitionId, NodeId)> = match &table.distribution {
            foam_catalog::Distribution::Hash { owners, .. } => {
                owners.iter().enumerate().map(|(p, o)| (p as PartitionId, *o)).collect()
            }
            foam_catalog::Distribution::Replicated { nodes } => nodes.iter().map(|n| (0, *n)).collect(),
        };
        let mut by_node: BTreeMap<NodeId, Vec<PartitionId>> = BTreeMap::new();
        for (partition, owner) in &placements {
            by_node.entry(*owner).or_default().push(*partition);
        }
        let mut stats: BTreeMap<(NodeId, PartitionId), Option<PartitionStats>> = BTreeMap::new();
        for (owner, partitions) in by_node {
            let answer = partition_stats(node, owner, table.id, partitions.clone()).await;
            for partition in partitions {
                let found = answer.as_ref().ok().and_then(|s| s.iter().find(|(p, _)| *p == partition).map(|(_, s)| *s));
                stats.insert((owner, partition), found);
            }
        }
        for (partition, owner) in placements {
            let found = stats.get(&(owner, partition)).copied().flatten();
            names.push(table.name.clone());
            parts.push(partition);
            owners.push(owner);
            rows.push(found.map(|s| s.rows));
            bytes.push(found.map(|s| s.bytes));
        }
    }
    let schema = Arc::new(Schema::new(vec![
        Field::new("table_name", DataType::Utf8, false),
        Field::new("partition", DataType::UInt32, false),
        Field::new("node_id", DataType::UInt32, false),
        Field::new("row_count", DataType::UInt64, true),
        Field::new("bytes", DataType::UInt64, true),
    ]));
    let columns: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from(names)),
        Arc::new(UInt32Array::from(parts)),
        Arc::new(UInt32Array::from(owners)),
        Arc::new(UInt64Array::from(rows)),
        Arc::new(UInt64Array::from(bytes)),
    ];
    RecordBatch::try_new(schema, columns).map_err(|e| FoamError::internal(e.to_string()))
}

/// Stats of some partitions of a table on one node; NULL rows when it is down.
async fn partition_stats(
    node: &Arc<NodeContext>,
    owner: NodeId,
    table_id: foam_common::TableId,
    partitions: Vec<PartitionId>,
) -> FoamResult<Vec<(PartitionId, PartitionStats)>> {
    if owner == node.node_id {
        return Ok(partitions.into_iter().map(|p| (p, node.storage.stats(table_id, p))).collect());
    }
    let client = node.client_for(owner)?;
    let request = NodeRequest::PartitionStats { table_id, partitions };
    let call = client.call(&request, &[]);
    match tokio::time::timeout(Duration::from_millis(PEER_CONNECT_TIMEOUT_MS), call).await {
        Ok(Ok((NodeResponse::Stats { stats }, _))) => Ok(stats),
        Ok(Ok((other, _))) => Err(FoamError::internal(format!("unexpected reply {other:?}"))),
        Ok(Err(error)) => Err(error),
        Err(_) => Err(FoamError::NodeUnavailable { node_id: owner, addr: client.addr().into(), message: "timed out".into() }),
    }
}
