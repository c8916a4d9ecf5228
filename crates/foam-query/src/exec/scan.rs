//! `FoamScanExec`: the leaf that reads a FoamDB table's hash partitions.
//!
//! ```text
//!             FoamScanExec (one DataFusion partition per FoamDB partition read)
//!   ┌───────────────┬───────────────┬───────────────┐
//!   │ p0 (node 1)   │ p3 (node 1)   │ p6 (node 1)   │  ... variant routed to node 1
//!   └──────┬────────┴──────┬────────┴──────┬────────┘
//!          ▼               ▼               ▼
//!   local StorageEngine when this node owns the partition,
//!   otherwise a Flight DoGet stream from the owner (a fallback that keeps
//!   any plan shape correct; routing makes it rare).
//! ```
//! Distributed planning splits the scan into one variant per owner node (see
//! `distributed/mod.rs`) so each partition is read where it is stored and only the
//! results of the operators above cross the network.

use std::fmt;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::{EquivalenceProperties, Partitioning, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};
use foam_catalog::ColumnDef;
use foam_common::{FoamError, FoamResult, NodeId, PartitionId, TableId};
use foam_storage::StorageError;
use foam_storage::KeyProbe;
use foam_storage::engine::SnapshotRead;
use foam_rpc::ScanRequest;
use futures::StreamExt;
use serde::{Deserialize, Serialize};

use crate::context::{CatalogService, DamageReporter, NodeContext, check_copy_held};

/// One partition to read and where it lives.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PartitionRead {
    pub partition: PartitionId,
    /// The node to read it from (for a replicated table, one of its replicas);
    /// `None` reads it on whichever node runs the scan.
    pub owner: Option<NodeId>,
    /// In a transaction block that wrote the table: the rows (added and
    /// deleted) its earlier statements staged for this partition, which the
    /// copy read must hold, or the read fails (40001) rather than miss them.
    #[serde(default)]
    pub staged_rows: Option<u64>,
}

/// Everything that defines a scan; serialized as-is by the codec.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ScanSpec {
    pub table_id: TableId,
    pub table_name: String,
    pub columns: Vec<ColumnDef>,
    pub projection: Option<Vec<usize>>,
    /// `groups[i]` are the FoamDB partitions read by DataFusion partition `i`.
    pub groups: Vec<Vec<PartitionRead>>,
    /// The node this variant is meant to run on, when distributed.
    pub home: Option<NodeId>,
    /// A replicated table: one full copy is read, so the scan is one task.
    #[serde(default)]
    pub replicated: bool,
    /// The query's filters on this table (see `ScanRequest::filters`), for
    /// owners to apply before sending rows to another node.
    #[serde(default)]
    pub filters: Vec<Vec<u8>>,
    /// A hash-distributed table's layout. Then `groups[p]` is FoamDB
    /// partition `p` (empty when pruned or read by another task), so the
    /// scan's DataFusion partition `p` holds exactly the rows whose key
    /// hashes to `p`, and the scan declares that partitioning. A scan
    /// `regroup.rs` regrouped has fewer groups than the layout has
    /// partitions: it declares no partitioning, and the layout only decides
    /// which task reads which partition.
    #[serde(default)]
    pub layout: Option<HashLayout>,
    /// Rows the whole scan is expected to read (before filters), estimated by
    /// the planning node from its own partitions; lets DataFusion pick
    /// broadcast (collect) joins for small inputs.
    #[serde(default)]
    pub estimated_rows: Option<u64>,
    /// The whole table's statistics for a scan of `estimated_rows` (every
    /// column, before projection; see `statistics.rs`). Only the planning
    /// node uses them, so they are not sent to workers.
    #[serde(skip)]
    pub statistics: Option<Arc<datafusion::common::Statistics>>,
    /// In a transaction block that wrote this table: the rows its earlier
    /// statements staged, which the scan reads after the committed ones.
    #[serde(default)]
    pub own_writes: Option<foam_storage::OwnWrites>,
    /// The statement's snapshot (MVCC): the scan reads the transactions
    /// committed at or before it, on every partition and copy.
    #[serde(default)]
    pub snapshot: Option<u64>,
    /// The values of a unique key the query's filters fix
    /// (`catalog/table.rs`): owners read the rows with them through the
    /// key's index instead of the whole partition. The filters above the
    /// scan still decide which rows pass.
    #[serde(default)]
    pub key: Option<KeyProbe>,
}

/// Which version of a partition a read returns: the rows committed as of
/// `snapshot` (the newest when `None`), and the rows `own_writes` staged;
/// with `key`, at least every row with its values, maybe only those.
#[derive(Debug, Clone, Default)]
pub struct ReadView {
    pub own_writes: Option<foam_storage::OwnWrites>,
    /// The rows `own_writes` staged here (see `PartitionRead::staged_rows`).
    pub staged_rows: Option<u64>,
    pub snapshot: Option<u64>,
    pub key: Option<KeyProbe>,
}

/// How a hash-distributed table is split: two scans with equal layouts put
/// equal keys in the same partition on the same node (see `copartition.rs`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HashLayout {
    /// Table column indices of the distribution key, in hash order.
    pub key_columns: Vec<usize>,
    /// The owner node of each partition; its length is the partition count.
    pub owners: Vec<NodeId>,
}

#[derive(Debug)]
pub struct FoamScanExec {
    spec: ScanSpec,
    schema: SchemaRef,
    properties: Arc<PlanProperties>,
}

impl FoamScanExec {
    pub fn try_new(spec: ScanSpec) -> Result<Self> {
        let full = foam_catalog::model::arrow_schema(&spec.columns);
        let schema = match &spec.projection {
            Some(indices) => Arc::new(full.project(indices)?),
            None => full,
        };
        let partitions = spec.groups.len().max(1);
        let partitioning = match key_partitioning(&spec, &schema) {
            Some(keys) if partitions > 1 => Partitioning::Hash(keys, partitions),
            _ => Partitioning::UnknownPartitioning(partitions),
        };
        let properties = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(schema.clone()),
            partitioning,
            EmissionType::Incremental,
            Boundedness::Bounded,
        ));
        Ok(FoamScanExec { spec, schema, properties })
    }

    pub fn spec(&self) -> &ScanSpec {
        &self.spec
    }

    /// All partitions this scan reads, in order.
    pub fn reads(&self) -> impl Iterator<Item = &PartitionRead> {
        self.spec.groups.iter().flatten()
    }

    /// A copy of this scan reading `groups`, meant for `home`.
    pub fn with_groups(&self, groups: Vec<Vec<PartitionRead>>, home: Option<NodeId>) -> Result<Self> {
        FoamScanExec::try_new(ScanSpec { groups, home, ..self.spec.clone() })
    }
}

/// The key columns of a hash-distributed table as columns of the scan's
/// output, when the projection keeps all of them and group `p` is still
/// partition `p` (not so after `regroup.rs`).
fn key_partitioning(spec: &ScanSpec, schema: &SchemaRef) -> Option<Vec<Arc<dyn PhysicalExpr>>> {
    let layout = spec.layout.as_ref()?;
    if layout.owners.len() != spec.groups.len() {
        return None;
    }
    layout
        .key_columns
        .iter()
        .map(|key| {
            let position = match &spec.projection {
                Some(indices) => indices.iter().position(|i| i == key)?,
                None => *key,
            };
            let column = datafusion::physical_expr::expressions::Column::new(schema.field(position).name(), position);
            Some(Arc::new(column) as Arc<dyn PhysicalExpr>)
        })
        .collect()
}

impl DisplayAs for FoamScanExec {
    fn fmt_as(&self, _format: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "FoamScanExec: table={}", self.spec.table_name)?;
        if let Some(home) = self.spec.home {
            write!(f, ", node={home}")?;
        }
        let parts: Vec<String> = self.reads().map(|r| r.partition.to_string()).collect();
        write!(f, ", partitions=[{}]", parts.join(","))?;
        if let Some(projection) = &self.spec.projection {
            let names: Vec<&str> = projection.iter().map(|i| self.spec.columns[*i].name.as_str()).collect();
            write!(f, ", projection=[{}]", names.join(","))?;
        }
        if let Some(key) = &self.spec.key {
            let names: Vec<&str> = key.columns.iter().map(|i| self.spec.columns[*i].name.as_str()).collect();
            write!(f, ", key_lookup=[{}] values={}", names.join(","), key.rows.num_rows())?;
        }
        Ok(())
    }
}

impl ExecutionPlan for FoamScanExec {
    fn name(&self) -> &str {
        "FoamScanExec"
    }

    fn statistics_from_inputs(
        &self,
        _input_stats: &[Arc<datafusion::common::Statistics>],
        args: &datafusion::physical_plan::statistics::StatisticsArgs,
    ) -> Result<Arc<datafusion::common::Statistics>> {
        let Some(rows) = self.spec.estimated_rows else {
            return Ok(Arc::new(datafusion::common::Statistics::new_unknown(&self.schema)));
        };
        // The share of the scan's partitions that DataFusion partition reads.
        let reads = self.reads().count().max(1) as u64;
        let share = match args.partition() {
            Some(partition) => self.spec.groups.get(partition).map(|g| g.len() as u64).unwrap_or(0) as f64 / reads as f64,
            None => 1.0,
        };
        Ok(Arc::new(match &self.spec.statistics {
            Some(table) => crate::catalog::statistics::scaled(table.as_ref().clone(), share).project(self.spec.projection.as_ref()),
            None => {
                let mut statistics = datafusion::common::Statistics::new_unknown(&self.schema);
                statistics.num_rows = datafusion::common::stats::Precision::Inexact((rows as f64 * share) as usize);
                statistics
            }
        }))
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(self: Arc<Self>, children: Vec<Arc<dyn ExecutionPlan>>) -> Result<Arc<dyn ExecutionPlan>> {
        if !children.is_empty() {
            return Err(DataFusionError::Internal("FoamScanExec is a leaf".into()));
        }
        Ok(self)
    }

    fn execute(&self, partition: usize, context: Arc<TaskContext>) -> Result<SendableRecordBatchStream> {
        let node = NodeContext::from_config(context.session_config())?;
        let reads = self.spec.groups.get(partition).cloned().unwrap_or_default();
        let spec = self.spec.clone();
        let schema = self.schema.clone();
        let stream = futures::stream::iter(reads)
            .then(move |read| open_partition(node.clone(), spec.clone(), schema.clone(), read))
            .flat_map(|opened| match opened {
                Ok(stream) => stream,
                Err(error) => futures::stream::once(async move { Err(error) }).boxed(),
            })
            .map(|item| item.map_err(DataFusionError::from));
        Ok(Box::pin(RecordBatchStreamAdapter::new(self.schema.clone(), stream)))
    }
}

type BatchStream = futures::stream::BoxStream<'static, FoamResult<RecordBatch>>;

async fn open_partition(node: Arc<NodeContext>, spec: ScanSpec, schema: SchemaRef, read: PartitionRead) -> FoamResult<BatchStream> {
    match read.owner {
        Some(owner) if owner != node.node_id => {
            let client = node.client_for(owner)?;
            let request = ScanRequest {
                table_id: spec.table_id,
                partition: read.partition,
                projection: spec.projection.clone(),
                filters: spec.filters.clone(),
                own_writes: spec.own_writes,
                staged_rows: read.staged_rows,
                snapshot: spec.snapshot,
                key: spec.key.clone(),
            };
            let stream = client.scan(&request).await?;
            // Rows from a peer must match the schema this plan promised.
            Ok(stream
                .map(move |batch| {
                    let batch = batch?;
                    RecordBatch::try_new_with_options(
                        schema.clone(),
                        batch.columns().to_vec(),
                        &arrow::record_batch::RecordBatchOptions::new().with_row_count(Some(batch.num_rows())),
                    )
                    .map_err(|e| FoamError::internal(format!("remote scan returned mismatched rows: {e}")))
                })
                .boxed())
        }
        _ => {
            let view = ReadView { own_writes: spec.own_writes, staged_rows: read.staged_rows, snapshot: spec.snapshot, key: spec.key };
            Ok(read_local_partition(&node, spec.table_id, read.partition, spec.projection.clone(), view))
        }
    }
}

/// Streams the committed rows of a partition stored on this node as of the
/// view's snapshot, then the rows its `own_writes` names (a transaction
/// block's earlier statements), less the rows those statements deleted.
///
/// Batches are decoded when the consumer asks for them, on its thread: a scan
/// costs no thread of its own, so a node reading many partitions at once (16
/// on each of 4 nodes sharing 2 cores) does not have more threads decoding than
/// cores to run them; on one node, 16 partitions read that way took 1.15x the
/// CPU of 4. Only opening a segment, which maps it and checks the checksums of
/// the columns read (reading them from disk), runs on the blocking pool.
pub fn read_local_partition(
    node: &NodeContext,
    table_id: TableId,
    partition: PartitionId,
    projection: Option<Vec<usize>>,
    view: ReadView,
) -> BatchStream {
    // Rows the block's earlier statements deleted are left out; they are
    // whole rows, so whole rows are read and projected after.
    let deleted = view.own_writes.map(|own| node.storage.staged_deletes(own, (table_id, partition))).unwrap_or_default();
    let mut gone = match foam_storage::row_set::RowSet::of(&deleted) {
        Ok(Some(gone)) => gone,
        Ok(None) => return read_partition(node, table_id, partition, projection, view),
        Err(error) => return futures::stream::once(async move { Err(error.into()) }).boxed(),
    };
    read_partition(node, table_id, partition, None, view)
        .map(move |batch| projected(gone.take_from(&batch?)?.0, projection.as_deref()))
        .boxed()
}

/// A copy that does not hold the rows the block's earlier statements staged
/// for a partition (it restarted and lost them, or never got them): the
/// statement fails with 40001 rather than read without them, and the block
/// cannot commit (prepare finds the rows missing too).
fn lost_own_writes(table_id: TableId, partition: PartitionId, node: NodeId, expected: u64, held: u64) -> FoamError {
    FoamError::Query {
        message: format!(
            "node {node} holds {held} of the {expected} rows this transaction wrote to partition {partition} of table {table_id} (it restarted or missed them); roll back and retry the transaction"
        ),
        sqlstate: foam_common::SqlState::SerializationFailure,
    }
}

/// The committed rows of a partition as of the view's snapshot, then those
/// its `own_writes` staged. A read that must wait for a transaction prepared
/// on the partition (`foam_storage::visibility`) waits off the runtime.
fn read_partition(node: &NodeContext, table_id: TableId, partition: PartitionId, projection: Option<Vec<usize>>, view: ReadView) -> BatchStream {
    node.partition_scans.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    if let (Some(own), Some(expected)) = (view.own_writes, view.staged_rows) {
        let held = node.storage.staged_row_count(own, (table_id, partition));
        if held != expected {
            let error = lost_own_writes(table_id, partition, node.node_id, expected, held);
            return futures::stream::once(async move { Err(error) }).boxed();
        }
    }
    let staged = view.own_writes.map(|own| {
        let (storage, projection) = (node.storage.clone(), projection.clone());
        async move {
            let rows = tokio::task::spawn_blocking(move || storage.staged_rows(own, (table_id, partition), projection.as_deref()))
                .await
                .map_err(|e| FoamError::internal(format!("reading staged rows stopped: {e}")))?;
            Ok::<_, FoamError>(rows?.into_iter().map(text_as_views).collect::<Vec<_>>())
        }
    });
    let staged = futures::stream::iter(staged)
        .then(|rows| rows)
        .flat_map(|rows| match rows {
            Ok(rows) => futures::stream::iter(rows).boxed(),
            Err(error) => futures::stream::once(async move { Err(error) }).boxed(),
        })
        .boxed();
    let read = match node.storage.try_snapshot_at(table_id, partition, view.snapshot, view.key.as_ref()) {
        Ok(SnapshotRead::Ready(read)) => read,
        Ok(SnapshotRead::Wait) => {
            let (storage, damaged, catalog, me, counted) =
                (node.storage.clone(), node.damage_reporter(), node.catalog.clone(), node.node_id, node.rows_scanned.clone());
            let (ts, key) = (view.snapshot.unwrap_or_default(), view.key);
            let waited = async move {
                let read = tokio::task::spawn_blocking(move || storage.snapshot_at(table_id, partition, ts, key.as_ref()))
                    .await
                    .map_err(|e| FoamError::internal(format!("waiting for a snapshot stopped: {e}")))?;
                match read {
                    Ok(read) => Ok(snapshot_rows((table_id, partition), projection, read, staged, damaged, catalog, me, counted)),
                    Err(error) => Err(FoamError::from(error)),
                }
            };
            return futures::stream::once(waited)
                .flat_map(|rows| match rows {
                    Ok(rows) => rows,
                    Err(error) => futures::stream::once(async move { Err(error) }).boxed(),
                })
                .boxed();
        }
        Err(error) => return futures::stream::once(async move { Err(error.into()) }).boxed(),
    };
    snapshot_rows((table_id, partition), projection, read, staged, node.damage_reporter(), node.catalog.clone(), node.node_id, node.rows_scanned.clone())
}

/// The rows of one partition's snapshot (`None`: this node stores nothing
/// of it), then `staged`; the snapshot's rows are added to `counted`.
#[allow(clippy::too_many_arguments)]
fn snapshot_rows(
    (table_id, partition): (TableId, PartitionId),
    projection: Option<Vec<usize>>,
    read: Option<foam_storage::PartitionSnapshot>,
    staged: BatchStream,
    damaged: DamageReporter,
    catalog: Arc<dyn CatalogService>,
    me: NodeId,
    counted: Arc<std::sync::atomic::AtomicU64>,
) -> BatchStream {
    let Some(snapshot) = read else {
        // Nothing stored: an empty partition, or a copy that moved away after
        // the statement was planned. The first has no rows; the second must
        // not read as empty, which would silently drop its rows.
        let held = async move {
            let why = ": it moved to another node while the statement ran; run the statement again";
            check_copy_held(catalog.as_ref(), me, (table_id, partition), |_| true, "copy", why).await
        };
        return futures::stream::once(held)
            .filter_map(|held| futures::future::ready(held.err().map(Err)))
            .chain(staged)
            .boxed();
    };
    let memtable: Vec<FoamResult<RecordBatch>> =
        snapshot.memtable.iter().map(|batch| projected(text_as_views(batch.clone())?, projection.as_deref())).collect();
    let segments = futures::stream::iter(snapshot.segments)
        .then(move |segment| {
            let projection = projection.clone();
            async move {
                tokio::task::spawn_blocking(move || {
                    foam_storage::segment::SegmentRows::of(&segment, projection.as_deref())
                })
                    .await
                    .map_err(|e| StorageError::internal(format!("opening a segment stopped: {e}")))?
            }
        })
        .flat_map(|opened| match opened {
            Ok(batches) => futures::stream::iter(batches).boxed(),
            Err(error) => futures::stream::once(async move { Err(error) }).boxed(),
        })
        .then(move |item| {
            let damaged = damaged.clone();
            async move {
                if let Err(error @ StorageError::Corrupted { .. }) = &item {
                    // Taken out of service before the query sees the error, so
                    // its retry reads another replica; the keeper re-copies it.
                    damaged.report_damaged(table_id, partition, error).await;
                }
                item.map_err(FoamError::from)
            }
        });
    // A damaged segment ends the partition's rows with its error.
    let mut failed = false;
    futures::stream::iter(memtable)
        .chain(segments)
        .inspect(move |batch| {
            if let Ok(batch) = batch {
                counted.fetch_add(batch.num_rows() as u64, std::sync::atomic::Ordering::Relaxed);
            }
        })
        .chain(staged)
        .take_while(move |item| {
            let go_on = !failed;
            failed |= item.is_err();
            futures::future::ready(go_on)
        })
        .boxed()
}

/// `batch` with its `Utf8` columns as `Utf8View`, FoamDB's text type: rows a
/// node replays from a WAL written before text was `Utf8View` are `Utf8`.
fn text_as_views(batch: RecordBatch) -> FoamResult<RecordBatch> {
    match foam_storage::segment::strings_as_views(&batch.schema()) {
        Some(schema) => Ok(foam_storage::segment::cast_to_schema(&schema, &batch)?),
        None => Ok(batch),
    }
}

/// `batch` with only the `columns` asked for, in that order (all when `None`).
fn projected(batch: RecordBatch, columns: Option<&[usize]>) -> FoamResult<RecordBatch> {
    match columns {
        Some(indices) => batch.project(indices).map_err(|e| FoamError::internal(e.to_string())),
        None => Ok(batch),
    }
}

/// Serializes the filters a scan may push to owners: column references lose
/// their table qualifier (the owner resolves them against the bare table
/// schema); filters that cannot be serialized are not pushed.
pub fn encode_filters(filters: &[datafusion::logical_expr::Expr]) -> Vec<Vec<u8>> {
    use datafusion::common::tree_node::{Transformed, TreeNode};
    use datafusion_proto::bytes::Serializeable;
    filters
        .iter()
        .filter_map(|filter| {
            let bare = filter
                .clone()
                .transform(|e| match e {
                    datafusion::logical_expr::Expr::Column(c) => {
                        Ok(Transformed::yes(datafusion::logical_expr::Expr::Column(datafusion::common::Column::new_unqualified(c.name))))
                    }
                    other => Ok(Transformed::no(other)),
                })
                .ok()?
                .data;
            bare.to_bytes().ok().map(|b| b.to_vec())
        })
        .collect()
}

/// Streams the rows of a local partition that pass `filters`, then projects
/// them; used when a peer asks for a partition.
pub fn read_local_partition_filtered(
    node: &NodeContext,
    table: &foam_catalog::TableDef,
    partition: PartitionId,
    projection: Option<Vec<usize>>,
    filters: &[Vec<u8>],
    view: ReadView,
) -> BatchStream {
    use datafusion::logical_expr::Expr;
    use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
    use datafusion_proto::bytes::Serializeable;
    let schema = table.arrow_schema();
    let predicates: Vec<Arc<dyn PhysicalExpr>> = datafusion::common::DFSchema::try_from(schema.as_ref().clone())
        .map(|df_schema| {
            filters
                .iter()
                .filter_map(|bytes| Expr::from_bytes(bytes).ok())
                .filter_map(|expr| {
                    let props = datafusion::execution::context::ExecutionProps::new();
                    datafusion::physical_expr::create_physical_expr(&expr, &df_schema, &props, &PhysicalPlanningContext::default()).ok()
                })
                .collect()
        })
        .unwrap_or_default();
    if predicates.is_empty() {
        return read_local_partition(node, table.id, partition, projection, view);
    }
    read_local_partition(node, table.id, partition, None, view)
        .map(move |batch| {
            let batch = batch?;
            let mut keep: Option<arrow::array::BooleanArray> = None;
            for predicate in &predicates {
                // A conjunct that fails here (a cast, a division) may never be
                // evaluated on these rows by the receiver's plan: keep the rows
                // and let the receiver decide.
                let Ok(value) = predicate.evaluate(&batch).and_then(|v| v.into_array(batch.num_rows())) else {
                    continue;
                };
                let Some(mask) = value.as_any().downcast_ref::<arrow::array::BooleanArray>() else {
                    continue; // not a predicate after all; the receiver filters anyway
                };
                keep = Some(match keep {
                    Some(so_far) => arrow::compute::and(&so_far, mask).map_err(|e| FoamError::internal(e.to_string()))?,
                    None => mask.clone(),
                });
            }
            let filtered = match keep {
                Some(mask) => arrow::compute::filter_record_batch(&batch, &mask).map_err(|e| FoamError::internal(e.to_string()))?,
                None => batch,
            };
            projected(filtered, projection.as_deref())
        })
        .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{ArrayRef, AsArray, Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};

    #[test]
    fn memtable_rows_replayed_as_utf8_read_as_text_views() {
        let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false), Field::new("t", DataType::Utf8, true)]));
        let keys: ArrayRef = Arc::new(Int64Array::from(vec![1, 2]));
        let texts: ArrayRef = Arc::new(StringArray::from(vec![Some("a text longer than twelve bytes"), None]));
        let batch = RecordBatch::try_new(schema, vec![keys.clone(), texts]).unwrap();
        let read = text_as_views(batch).unwrap();
        assert_eq!(read.schema().field(1).data_type(), &DataType::Utf8View);
        assert_eq!(read.column(1).as_string_view().iter().collect::<Vec<_>>(), vec![Some("a text longer than twelve bytes"), None]);
        assert_eq!(read.column(0), &keys);
        // Rows already in the table's types pass through as they are.
        let again = text_as_views(read.clone()).unwrap();
        assert_eq!(again, read);
    }
}
