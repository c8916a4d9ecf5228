//! Column defaults as PostgreSQL's catalog shows them: a row of
//! `pg_attrdef` for each column with a default (`adrelid`, `adnum`, and
//! `adbin`, which holds the default's SQL text where PostgreSQL keeps a
//! node tree), `atthasdef` in `pg_attribute` (`pg_columns.rs`), and
//! `pg_get_expr`, which prints an `adbin` as the expression. psql's `\d t`,
//! pg_dump, pgjdbc's `getColumns` and SQLAlchemy's reflection read a
//! column's default as `pg_get_expr(d.adbin, d.adrelid)` from these.
//! datafusion-pg-catalog's `pg_attrdef` is empty and its `pg_get_expr`
//! answers an empty string for everything.

use std::sync::Arc;

use arrow::array::{ArrayRef, Int32Array, Int16Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, SchemaRef};
use async_trait::async_trait;
use datafusion::catalog::{MemTable, SchemaProvider, Session, TableProvider};
use datafusion::datasource::TableType;
use datafusion::error::Result;
use datafusion::logical_expr::{ColumnarValue, Expr, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, TypeSignature, Volatility};
use datafusion::physical_plan::ExecutionPlan;

use crate::catalog::pg_columns::relations;
use crate::context::NodeContext;

const PG_ATTRDEF: &str = "pg_attrdef";

/// A default's OID: this plus its table's OID times the column limit plus
/// its column number, unique among defaults and above the OIDs
/// datafusion-pg-catalog hands out.
const DEFAULT_OID_BASE: i64 = 1 << 29;
const COLUMNS_PER_TABLE: i64 = 1 << 11;

/// The `pg_attrdef` OID of the default of column `at` (from 0) of the
/// table with OID `table_oid`.
pub(crate) fn default_oid(table_oid: i64, at: usize) -> i32 {
    (DEFAULT_OID_BASE + table_oid * COLUMNS_PER_TABLE + at as i64 + 1) as i32
}

/// `pg_attrdef` with FoamDB's defaults; any other table as it is.
pub fn with_defaults(name: &str, table: Arc<dyn TableProvider>, pg_catalog: Arc<dyn SchemaProvider>, node: Arc<NodeContext>) -> Arc<dyn TableProvider> {
    if name.eq_ignore_ascii_case(PG_ATTRDEF) {
        Arc::new(Defaults { schema: table.schema(), pg_catalog, node })
    } else {
        table
    }
}

#[derive(Debug)]
struct Defaults {
    schema: SchemaRef,
    pg_catalog: Arc<dyn SchemaProvider>,
    node: Arc<NodeContext>,
}

#[async_trait]
impl TableProvider for Defaults {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::View
    }

    async fn scan(&self, state: &dyn Session, projection: Option<&Vec<usize>>, filters: &[Expr], limit: Option<usize>) -> Result<Arc<dyn ExecutionPlan>> {
        let relations = relations(&self.pg_catalog).await?;
        let catalog = self.node.catalog.current();
        let (mut oids, mut tables, mut numbers, mut texts) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let mut foam: Vec<(&i64, &String)> = relations.foam.iter().collect();
        foam.sort();
        for (oid, name) in foam {
            let Some(table) = catalog.tables.get(name) else { continue };
            for (at, column) in table.columns.iter().enumerate() {
                let Some(default) = column.default.as_ref().filter(|_| column.identity.is_none()) else { continue };
                oids.push(default_oid(*oid, at));
                tables.push(*oid as i32);
                numbers.push(at as i16 + 1);
                texts.push(default.clone());
            }
        }
        let arrays: [(&str, ArrayRef); 4] = [
            ("oid", Arc::new(Int32Array::from(oids))),
            ("adrelid", Arc::new(Int32Array::from(tables))),
            ("adnum", Arc::new(Int16Array::from(numbers))),
            ("adbin", Arc::new(StringArray::from(texts))),
        ];
        let rows = arrays.first().map_or(0, |(_, a)| a.len());
        let mut columns = Vec::with_capacity(self.schema.fields().len());
        for field in self.schema.fields() {
            let column = match arrays.iter().find(|(name, _)| name == field.name()) {
                Some((_, array)) => arrow::compute::cast(array, field.data_type())?,
                None => arrow::array::new_null_array(field.data_type(), rows),
            };
            columns.push(column);
        }
        let batch = RecordBatch::try_new(self.schema.clone(), columns)?;
        MemTable::try_new(self.schema.clone(), vec![vec![batch]])?.scan(state, projection, filters, limit).await
    }
}

/// `pg_get_expr(expr_text, relation [, pretty])`: the expression's text,
/// which is what FoamDB's catalog tables hold where PostgreSQL keeps a
/// node tree.
pub fn pg_get_expr_udf() -> ScalarUDF {
    let mut signatures = Vec::new();
    for relation in [DataType::Int32, DataType::UInt32, DataType::Int64, DataType::UInt64] {
        signatures.push(TypeSignature::Exact(vec![DataType::Utf8, relation.clone()]));
        signatures.push(TypeSignature::Exact(vec![DataType::Utf8, relation, DataType::Boolean]));
    }
    ScalarUDF::new_from_impl(GetExpr { signature: Signature::one_of(signatures, Volatility::Stable) })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct GetExpr {
    signature: Signature,
}

impl ScalarUDFImpl for GetExpr {
    fn name(&self) -> &str {
        "pg_get_expr"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        Ok(args.args[0].clone())
    }
}
