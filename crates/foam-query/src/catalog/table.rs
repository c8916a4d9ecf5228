//! `FoamTable`: a FoamDB table as DataFusion sees it. A scan becomes a
//! `FoamScanExec` over the partitions that can hold matching rows: with
//! `key = constant` (or `key IN (...)`) on every distribution column, only the
//! partitions those values hash to, and so only their owner nodes, are touched.
//! An INSERT becomes a `DataSinkExec` over the two-phase-commit writer.

use std::collections::BTreeSet;
use std::sync::Arc;

use arrow::datatypes::{DataType, SchemaRef};
use async_trait::async_trait;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::ScalarValue;
use datafusion::datasource::TableType;
use datafusion::datasource::sink::DataSinkExec;
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::dml::InsertOp;
use datafusion::logical_expr::{BinaryExpr, Expr, Operator, TableProviderFilterPushDown};
use datafusion::physical_plan::ExecutionPlan;
use foam_catalog::{Distribution, TableDef};
use foam_common::{NodeId, PartitionId};
use foam_storage::KeyProbe;

use crate::context::NodeContext;
use crate::exec::scan::{FoamScanExec, HashLayout, PartitionRead, ScanSpec};
use crate::write::FoamSink;
use crate::write::transaction::OwnReads;

/// Most distinct key combinations pruning will enumerate from IN lists before
/// it gives up and scans every partition; also the most values of a unique
/// key a point read looks up through the key's index.
const PRUNING_COMBINATIONS_MAX: usize = 1024;

#[derive(Debug)]
pub struct FoamTable {
    table: TableDef,
    schema: SchemaRef,
    node: Arc<NodeContext>,
}

impl FoamTable {
    pub fn new(table: TableDef, node: Arc<NodeContext>) -> Self {
        let schema = table.arrow_schema();
        FoamTable { table, schema, node }
    }

    /// The partitions that may hold rows passing `filters`, or all of them.
    pub fn prune(&self, filters: &[Expr]) -> Vec<PartitionId> {
        let Distribution::Hash { key_columns, owners } = &self.table.distribution else {
            return vec![0];
        };
        let all: Vec<PartitionId> = (0..owners.len() as PartitionId).collect();
        let Some(combinations) = self.fixed_values(key_columns, filters) else {
            return all;
        };
        let mut partitions = BTreeSet::new();
        for values in combinations {
            match foam_common::hash::partition_of_values(&values, owners.len() as u32) {
                Ok(p) => {
                    partitions.insert(p);
                }
                Err(_) => return all,
            }
        }
        partitions.into_iter().collect()
    }

    /// The values of a unique key that `filters` fix, when they fix one:
    /// a scan reads the rows with them through the key's index
    /// (`foam_storage::KeyProbe`). Keys of floating-point columns are left
    /// out: their index tells `0.0` from `-0.0`, which compare equal.
    fn key_probe(&self, filters: &[Expr]) -> Option<KeyProbe> {
        self.table.unique_key_columns().into_iter().find_map(|(_, columns, _)| {
            if columns.iter().any(|c| self.table.columns[*c].sql_type.arrow_type().is_floating()) {
                return None;
            }
            let combinations = self.fixed_values(&columns, filters)?;
            let arrays = (0..columns.len())
                .map(|i| ScalarValue::iter_to_array(combinations.iter().map(|values| values[i].clone())).ok())
                .collect::<Option<Vec<_>>>()?;
            let fields: Vec<arrow::datatypes::Field> = columns.iter().zip(&arrays).map(|(c, a)| arrow::datatypes::Field::new(&self.table.columns[*c].name, a.data_type().clone(), true)).collect();
            let options = arrow::record_batch::RecordBatchOptions::new().with_row_count(Some(combinations.len()));
            let rows = arrow::record_batch::RecordBatch::try_new_with_options(Arc::new(arrow::datatypes::Schema::new(fields)), arrays, &options).ok()?;
            Some(KeyProbe { columns, rows })
        })
    }

    /// Every combination of values `filters` allow the `columns` (table
    /// positions) to take together, each value in its column's type, when
    /// each column is fixed by `column = v` or `column IN (...)` and there are
    /// at most [`PRUNING_COMBINATIONS_MAX`]; `None` when they are not fixed.
    fn fixed_values(&self, columns: &[usize], filters: &[Expr]) -> Option<Vec<Vec<ScalarValue>>> {
        let mut per_key: Vec<Vec<ScalarValue>> = Vec::with_capacity(columns.len());
        for key in columns {
            let column = &self.table.columns[*key];
            let target = column.sql_type.arrow_type();
            let values = filters.iter().find_map(|f| key_values(f, &column.name, &target))?;
            let mut cast = Vec::with_capacity(values.len());
            for value in values {
                if value.is_null() {
                    continue; // `key = NULL` matches nothing
                }
                match value.cast_to(&target) {
                    Ok(v) if !v.is_null() => cast.push(v),
                    _ => return None, // the comparison happens in another type; do not guess
                }
            }
            per_key.push(cast);
        }
        let count = per_key.iter().map(|v| v.len()).product::<usize>();
        if count > PRUNING_COMBINATIONS_MAX {
            return None;
        }
        let mut combinations = Vec::with_capacity(count);
        let mut combination = vec![0usize; per_key.len()];
        for _ in 0..count {
            combinations.push(per_key.iter().zip(&combination).map(|(v, i)| v[*i].clone()).collect());
            for (digit, values) in combination.iter_mut().zip(&per_key).rev() {
                *digit += 1;
                if *digit < values.len() {
                    break;
                }
                *digit = 0;
            }
        }
        Some(combinations)
    }
}

/// Values `column` must equal for `filter` to hold: `column = v`, `v = column`,
/// `column IN (v, ...)`, and conjunctions and disjunctions of those.
fn key_values(filter: &Expr, column: &str, column_type: &DataType) -> Option<Vec<ScalarValue>> {
    let is_column = |e: &Expr| matches!(strip_equality_preserving_cast(e, column_type), Some(Expr::Column(c)) if c.name == column);
    match filter {
        Expr::BinaryExpr(BinaryExpr { left, op: Operator::Eq, right }) => match (left.as_ref(), right.as_ref()) {
            (l, Expr::Literal(v, _)) if is_column(l) => Some(vec![v.clone()]),
            (Expr::Literal(v, _), r) if is_column(r) => Some(vec![v.clone()]),
            _ => None,
        },
        Expr::BinaryExpr(BinaryExpr { left, op: Operator::And, right }) => {
            key_values(left, column, column_type).or_else(|| key_values(right, column, column_type))
        }
        // Either side may hold: the values of both (DataFusion writes short
        // IN lists as ORs of equalities).
        Expr::BinaryExpr(BinaryExpr { left, op: Operator::Or, right }) => {
            let mut values = key_values(left, column, column_type)?;
            values.extend(key_values(right, column, column_type)?);
            Some(values)
        }
        Expr::InList(list) if !list.negated && is_column(&list.expr) => list
            .list
            .iter()
            .map(|e| match e {
                Expr::Literal(v, _) => Some(v.clone()),
                _ => None,
            })
            .collect(),
        _ => None,
    }
}

/// The expression under casts that keep equality exact (integer widening,
/// between string layouts); `None` under any other cast, such as
/// `CAST(ts AS DATE)` or `CAST(text AS INT)`, where many stored values map to
/// one compared value and pruning by the value's hash would miss rows.
fn strip_equality_preserving_cast<'a>(expr: &'a Expr, column_type: &DataType) -> Option<&'a Expr> {
    match expr {
        Expr::Cast(cast) if equality_preserving(column_type, cast.field.data_type()) => {
            strip_equality_preserving_cast(&cast.expr, column_type)
        }
        Expr::Cast(_) | Expr::TryCast(_) => None,
        other => Some(other),
    }
}

fn equality_preserving(from: &DataType, to: &DataType) -> bool {
    fn int_width(t: &DataType) -> Option<u32> {
        match t {
            DataType::Int8 => Some(8),
            DataType::Int16 => Some(16),
            DataType::Int32 => Some(32),
            DataType::Int64 => Some(64),
            _ => None,
        }
    }
    let is_string = |t: &DataType| matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View);
    match (int_width(from), int_width(to)) {
        (Some(a), Some(b)) => a <= b,
        _ => from == to || (is_string(from) && is_string(to)),
    }
}

impl FoamTable {
    /// True for a `DISTRIBUTED REPLICATED` table (a copy on every node).
    pub fn is_replicated(&self) -> bool {
        self.table.is_replicated()
    }

    /// Rows the partitions in `groups` hold, extrapolated from the ones this
    /// node stores (no network round trip); `None` when it stores none.
    fn estimate_rows(&self, groups: &[Vec<PartitionRead>], local: &[PartitionId]) -> Option<u64> {
        if local.is_empty() {
            return None;
        }
        let rows: u64 = local.iter().map(|p| self.node.storage.stats(self.table.id, *p).rows).sum();
        let reads = groups.iter().flatten().count() as u64;
        Some(rows / local.len() as u64 * reads)
    }

    /// The node to read each partition from in a transaction block that
    /// wrote the table: its owner, unless the owner did not get every row
    /// the block staged for it (it was down then), when a live copy that did.
    fn holders_of_own_writes(&self, owners: &[NodeId], reads: &OwnReads) -> Vec<NodeId> {
        let nodes = self.node.catalog.current().nodes.clone();
        let mut owners = owners.to_vec();
        for (partition, staged) in &reads.partitions {
            let Some(owner) = owners.get_mut(*partition as usize) else { continue };
            if staged.copies.contains(owner) {
                continue;
            }
            let live = self.table.write_targets(*partition, &nodes).unwrap_or_default();
            if let Some(holder) = live.into_iter().find(|node| staged.copies.contains(node)) {
                *owner = holder;
            }
        }
        owners
    }

    /// The partitions of this table this node stores (the copy of a
    /// replicated table counts as partition 0).
    fn local_partitions(&self) -> Vec<PartitionId> {
        match &self.table.distribution {
            Distribution::Hash { owners, .. } => (0..owners.len() as PartitionId)
                .filter(|p| owners[*p as usize] == self.node.node_id)
                .collect(),
            Distribution::Replicated { nodes } if nodes.contains(&self.node.node_id) => vec![0],
            Distribution::Replicated { .. } => Vec::new(),
        }
    }
}

#[async_trait]
impl TableProvider for FoamTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(&self, filters: &[&Expr]) -> Result<Vec<TableProviderFilterPushDown>> {
        // Filters are used for pruning only; DataFusion still applies them.
        Ok(vec![TableProviderFilterPushDown::Inexact; filters.len()])
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        _limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let own_reads = crate::write::transaction::OpenTransaction::of(state.config()).and_then(|open| open.own_writes(self.table.id));
        // In a block that wrote the table every partition is read from a
        // copy that got all the rows the block staged for it, and must still
        // hold them (`staged_rows`; 0 where it staged none).
        let staged_rows = |partition: PartitionId| {
            own_reads.as_ref().map(|reads| reads.partitions.get(&partition).map(|staged| staged.rows).unwrap_or(0))
        };
        let (groups, layout) = match &self.table.distribution {
            Distribution::Hash { owners, key_columns } => {
                let owners = match &own_reads {
                    Some(reads) => self.holders_of_own_writes(owners, reads),
                    None => owners.clone(),
                };
                // One group per partition, pruned ones left empty, so that
                // group `p` is partition `p` whatever the filters.
                let mut groups: Vec<Vec<PartitionRead>> = vec![Vec::new(); owners.len()];
                for p in self.prune(filters) {
                    groups[p as usize] = vec![PartitionRead { partition: p, owner: Some(owners[p as usize]), staged_rows: staged_rows(p) }];
                }
                (groups, Some(HashLayout { key_columns: key_columns.clone(), owners }))
            }
            Distribution::Replicated { nodes } => {
                // This node's own copy when it has one, else a replica's;
                // one that holds the block's own writes when it wrote some.
                let holders = own_reads.as_ref().and_then(|reads| reads.partitions.get(&0)).map(|staged| &staged.copies);
                let holds = |node: &NodeId| holders.is_none_or(|copies| copies.contains(node));
                let replica = if nodes.contains(&self.node.node_id) && holds(&self.node.node_id) {
                    Some(self.node.node_id)
                } else {
                    nodes.iter().copied().find(holds).or_else(|| nodes.first().copied())
                };
                (vec![vec![PartitionRead { partition: 0, owner: replica, staged_rows: staged_rows(0) }]], None)
            }
        };
        let local = self.local_partitions();
        let own_writes = own_reads.map(|reads| reads.own);
        let estimated_rows = self.estimate_rows(&groups, &local);
        // Statistics know only committed rows: none for a table this
        // transaction block wrote, rather than wrong ones.
        let statistics = estimated_rows
            .filter(|_| own_writes.is_none())
            .and_then(|rows| self.node.segment_statistics.table(&self.node.storage, self.table.id, &local, &self.schema, rows).map(Arc::new));
        let spec = ScanSpec {
            table_id: self.table.id,
            table_name: self.table.name.clone(),
            columns: self.table.columns.clone(),
            projection: projection.cloned(),
            groups,
            home: None,
            replicated: self.table.is_replicated(),
            filters: crate::exec::scan::encode_filters(filters),
            layout,
            estimated_rows,
            statistics,
            own_writes,
            snapshot: crate::write::transaction::ReadSnapshot::of(state.config()),
            key: self.key_probe(filters),
        };
        Ok(Arc::new(FoamScanExec::try_new(spec)?))
    }

    async fn insert_into(
        &self,
        _state: &dyn Session,
        input: Arc<dyn ExecutionPlan>,
        insert_op: InsertOp,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if insert_op != InsertOp::Append {
            return Err(DataFusionError::NotImplemented(format!("{} on FoamDB tables", insert_op.name())));
        }
        let sink = FoamSink::new(self.table.clone(), self.node.clone());
        Ok(Arc::new(DataSinkExec::new(input, Arc::new(sink), None)))
    }
}


#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::logical_expr::{cast, col, lit};

    #[test]
    fn only_equality_preserving_casts_are_pruned_through() {
        let int_column = DataType::Int32;
        let widened = cast(col("k"), DataType::Int64).eq(lit(5i64));
        assert!(key_values(&widened, "k", &int_column).is_some());
        let timestamp = DataType::Timestamp(arrow::datatypes::TimeUnit::Microsecond, None);
        let lossy = cast(col("ts"), DataType::Date32).eq(lit(ScalarValue::Date32(Some(19000))));
        assert!(key_values(&lossy, "ts", &timestamp).is_none(), "CAST(ts AS DATE) = d matches many timestamps");
        let parsed = cast(col("t"), DataType::Int32).eq(lit(1i32));
        assert!(key_values(&parsed, "t", &DataType::Utf8).is_none(), "'01' and '1' both cast to 1");
        let or = col("k").eq(lit(1i32)).or(col("k").eq(lit(2i32)).and(col("j").eq(lit(3i32))));
        assert_eq!(key_values(&or, "k", &int_column), Some(vec![ScalarValue::Int32(Some(1)), ScalarValue::Int32(Some(2))]), "either value");
        let other = col("k").eq(lit(1i32)).or(col("j").eq(lit(2i32)));
        assert!(key_values(&other, "k", &int_column).is_none(), "k = 1 OR j = 2 holds for any k");
    }
}
