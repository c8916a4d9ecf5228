//! `FoamTable`: a FoamDB table as DataFusion sees it. A scan becomes a
//! `FoamScanExec` over the partitions that can hold matching rows: with
//! `key = constant` (or `key IN (...)`) on every distribution column, only the
//! partitions those values hash to, and so only their owner nodes, are touched.
//! An INSERT becomes a `DataSinkExec` over the two-phase-commit writer.

use std::collections::BTreeSet;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
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
use foam_common::PartitionId;

use crate::context::NodeContext;
use crate::scan_exec::{FoamScanExec, PartitionRead, ScanSpec};
use crate::write::FoamSink;

/// Most distinct key combinations pruning will enumerate from IN lists before
/// it gives up and scans every partition.
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
        let mut per_key: Vec<Vec<ScalarValue>> = Vec::with_capacity(key_columns.len());
        for key in key_columns {
            let column = &self.table.columns[*key];
            let Some(values) = filters.iter().find_map(|f| key_values(f, &column.name)) else {
                return all;
            };
            let target = column.sql_type.arrow_type();
            let mut cast = Vec::with_capacity(values.len());
            for value in values {
                if value.is_null() {
                    continue; // `key = NULL` matches nothing
                }
                match value.cast_to(&target) {
                    Ok(v) if !v.is_null() => cast.push(v),
                    _ => return all, // the comparison happens in another type; do not guess
                }
            }
            per_key.push(cast);
        }
        let combinations = per_key.iter().map(|v| v.len()).product::<usize>();
        if combinations > PRUNING_COMBINATIONS_MAX {
            return all;
        }
        let mut partitions = BTreeSet::new();
        let mut combination = vec![0usize; per_key.len()];
        for _ in 0..combinations {
            let values: Vec<ScalarValue> = per_key.iter().zip(&combination).map(|(v, i)| v[*i].clone()).collect();
            match foam_common::hash::partition_of_values(&values, owners.len() as u32) {
                Ok(p) => {
                    partitions.insert(p);
                }
                Err(_) => return all,
            }
            for (digit, values) in combination.iter_mut().zip(&per_key).rev() {
                *digit += 1;
                if *digit < values.len() {
                    break;
                }
                *digit = 0;
            }
        }
        partitions.into_iter().collect()
    }
}

/// Values `column` must equal for `filter` to hold: `column = v`, `v = column`,
/// or `column IN (v, ...)`.
fn key_values(filter: &Expr, column: &str) -> Option<Vec<ScalarValue>> {
    let is_column = |e: &Expr| matches!(strip_cast(e), Expr::Column(c) if c.name == column);
    match filter {
        Expr::BinaryExpr(BinaryExpr { left, op: Operator::Eq, right }) => match (left.as_ref(), right.as_ref()) {
            (l, Expr::Literal(v, _)) if is_column(l) => Some(vec![v.clone()]),
            (Expr::Literal(v, _), r) if is_column(r) => Some(vec![v.clone()]),
            _ => None,
        },
        Expr::BinaryExpr(BinaryExpr { left, op: Operator::And, right }) => {
            key_values(left, column).or_else(|| key_values(right, column))
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

fn strip_cast(expr: &Expr) -> &Expr {
    match expr {
        Expr::Cast(cast) => strip_cast(&cast.expr),
        other => other,
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
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        _limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let groups = match &self.table.distribution {
            Distribution::Hash { owners, .. } => self
                .prune(filters)
                .into_iter()
                .map(|p| vec![PartitionRead { partition: p, owner: Some(owners[p as usize]) }])
                .collect(),
            Distribution::Replicated => vec![vec![PartitionRead { partition: 0, owner: None }]],
        };
        let spec = ScanSpec {
            table_id: self.table.id,
            table_name: self.table.name.clone(),
            columns: self.table.columns.clone(),
            projection: projection.cloned(),
            groups,
            home: None,
            filters: crate::scan_exec::encode_filters(filters),
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

