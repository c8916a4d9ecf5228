//! The declared types of FoamDB's columns in `pg_catalog.pg_attribute`.
//!
//! datafusion-pg-catalog derives each column's type from its Arrow type, so
//! a `VARCHAR(20)`, a `CHAR(3)` and a `TEXT` column all read as `text`, and
//! a `NUMERIC(12,2)` as `numeric` without its precision: psql's `\d t`
//! showed `text` and `numeric`, and tools that read `format_type(atttypid,
//! atttypmod)` (SQLAlchemy's reflection, pgjdbc's column sizes) saw other
//! types than the table was created with.
//!
//! [`DeclaredTypes`] stands in for the `pg_catalog` schema and answers
//! `pg_attribute` with the type id and type modifier PostgreSQL keeps for
//! each declared type, taken from the catalog's column definitions; every
//! other table is datafusion-pg-catalog's. Rows are matched to FoamDB's
//! tables through `pg_class` and `pg_namespace`, whose OIDs
//! datafusion-pg-catalog keeps consistent with `attrelid`. Its
//! `format_type` prints a NUMERIC of scale 0 as `numeric(5)`, where
//! PostgreSQL prints `numeric(5,0)`; [`FormatType`] fixes that. The same
//! stand-in adds `pg_stat_activity` (`pg_stat_activity.rs`), which
//! datafusion-pg-catalog lacks, column defaults and identity columns
//! (`pg_defaults.rs`, `atthasdef`, `attidentity`), each catalog table's `tableoid`
//! (`pg_missing.rs`), FoamDB's keys (`pg_keys.rs`), sequences
//! (`pg_sequences.rs`), and owners and views (`pg_owners.rs`). PostgreSQL's catalog tables keep its fixed OIDs in
//! `pg_class.oid` and `pg_attribute.attrelid` ([`Relations`]), which
//! `tableoid` and `pg_init_privs` name them by.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Int16Array, Int32Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Int16Type, Int32Type, SchemaRef, UInt32Type};
use async_trait::async_trait;
use datafusion::catalog::{MemTable, SchemaProvider, Session, TableProvider};
use datafusion::datasource::TableType;
use datafusion::logical_expr::{ColumnarValue, Expr, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::physical_plan::collect;
use foam_catalog::types::SqlType;

use crate::catalog::pg_stat_activity::{self, Viewer};
use crate::catalog::{pg_defaults, pg_keys, pg_missing, pg_owners, pg_sequences};
use crate::catalog::provider::{CATALOG_NAME, SCHEMA_NAME};
use crate::context::NodeContext;

/// The schema this stands in for, and the table it answers.
pub const PG_CATALOG: &str = "pg_catalog";
const PG_ATTRIBUTE: &str = "pg_attribute";

/// PostgreSQL's type OIDs for the declared types Arrow does not tell apart.
const BPCHAR_OID: i32 = 1042;
const VARCHAR_OID: i32 = 1043;
const NUMERIC_OID: i32 = 1700;
/// PostgreSQL stores a type modifier with this added (`VARHDRSZ`).
pub const TYPMOD_HEADER: i32 = 4;

/// Replaces the session's `pg_catalog` schema (datafusion-pg-catalog's) by
/// one whose `pg_attribute` has the declared types, and its `format_type`;
/// `viewer` is the session, as `pg_stat_activity` shows it statements.
pub fn declare_types(ctx: &datafusion::prelude::SessionContext, node: Arc<NodeContext>, viewer: Viewer) -> Result<()> {
    let catalog = ctx.catalog(CATALOG_NAME).ok_or_else(|| DataFusionError::Internal(format!("no catalog {CATALOG_NAME}")))?;
    let Some(inner) = catalog.schema(PG_CATALOG) else { return Ok(()) };
    catalog.register_schema(PG_CATALOG, Arc::new(DeclaredTypes { inner, node, viewer }))?;
    if let Ok(inner) = datafusion::execution::FunctionRegistry::udf(ctx, FORMAT_TYPE) {
        ctx.register_udf(ScalarUDF::new_from_impl(FormatType { inner: inner.as_ref().clone() }));
    }
    Ok(())
}

const FORMAT_TYPE: &str = "format_type";

/// datafusion-pg-catalog's `format_type`, with PostgreSQL's `numeric(p,0)`
/// for a NUMERIC of scale 0 (it prints `numeric(p)`).
#[derive(Debug, PartialEq, Eq, Hash)]
struct FormatType {
    inner: ScalarUDF,
}

impl ScalarUDFImpl for FormatType {
    fn name(&self) -> &str {
        FORMAT_TYPE
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.inner.return_type(arg_types)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let rows = args.number_rows;
        let names = self.inner.invoke_with_args(args)?;
        crate::exec::function_values::per_value(&names, rows, |names| {
            let Some(strings) = names.as_string_opt::<i32>() else { return Ok(names.clone()) };
            Ok(Arc::new(strings.iter().map(|name| name.map(with_numeric_scale)).collect::<StringArray>()) as ArrayRef)
        })
    }
}

/// `numeric(p)` as `numeric(p,0)`; any other name as it is.
fn with_numeric_scale(name: &str) -> String {
    match name.strip_prefix("numeric(").and_then(|rest| rest.strip_suffix(')')) {
        Some(precision) if precision.bytes().all(|b| b.is_ascii_digit()) => format!("numeric({precision},0)"),
        _ => name.to_string(),
    }
}

/// `pg_catalog` with declared column types (see the module documentation).
#[derive(Debug)]
pub struct DeclaredTypes {
    inner: Arc<dyn SchemaProvider>,
    node: Arc<NodeContext>,
    viewer: Viewer,
}

#[async_trait]
impl SchemaProvider for DeclaredTypes {
    fn table_names(&self) -> Vec<String> {
        let mut names = self.inner.table_names();
        names.push(pg_stat_activity::NAME.to_string());
        names.extend(pg_missing::MISSING_TABLES.iter().map(|name| name.to_string()));
        names
    }

    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        if name.eq_ignore_ascii_case(pg_stat_activity::NAME) {
            return Ok(Some(pg_stat_activity::table(self.node.clone(), self.viewer.clone())));
        }
        let table = match self.inner.table(name).await? {
            Some(table) => Some(pg_missing::without_foreign_rows(name, table)),
            None => pg_missing::missing_table(name),
        };
        // pg_attribute's rows are made when it is scanned: making them
        // asks every schema for its tables' types, this one too.
        let table = match table {
            Some(attributes) if name.eq_ignore_ascii_case(PG_ATTRIBUTE) => {
                Some(Arc::new(Attributes { attributes, pg_catalog: self.inner.clone(), node: self.node.clone() }) as Arc<dyn TableProvider>)
            }
            other => other,
        };
        let table = table.map(|table| pg_owners::with_owners(name, table, self.inner.clone(), self.node.clone()));
        let table = table.map(|table| pg_keys::with_keys(name, table, self.inner.clone(), self.node.clone()));
        let table = table.map(|table| pg_defaults::with_defaults(name, table, self.inner.clone(), self.node.clone()));
        let table = table.map(|table| pg_sequences::with_sequences(name, table, self.inner.clone(), self.node.clone()));
        Ok(table.map(|table| pg_missing::with_system_columns(name, table)))
    }

    fn table_exist(&self, name: &str) -> bool {
        name.eq_ignore_ascii_case(pg_stat_activity::NAME) || self.inner.table_exist(name) || pg_missing::missing_table(name).is_some()
    }
}

/// `pg_attribute` with declared types.
#[derive(Debug)]
struct Attributes {
    attributes: Arc<dyn TableProvider>,
    pg_catalog: Arc<dyn SchemaProvider>,
    node: Arc<NodeContext>,
}

#[async_trait]
impl TableProvider for Attributes {
    fn schema(&self) -> SchemaRef {
        self.attributes.schema()
    }

    fn table_type(&self) -> TableType {
        self.attributes.table_type()
    }

    async fn scan(&self, state: &dyn Session, projection: Option<&Vec<usize>>, filters: &[Expr], limit: Option<usize>) -> Result<Arc<dyn ExecutionPlan>> {
        let mut batches = rows(&self.attributes).await?;
        let relations = relations(&self.pg_catalog).await?;
        for batch in &mut batches {
            *batch = with_declared_types(batch, &relations.foam, &self.node)?;
            *batch = relations.with_fixed_oids(batch, "attrelid")?;
        }
        MemTable::try_new(self.schema(), vec![batches])?.scan(state, projection, filters, limit).await
    }
}

/// `pg_catalog`'s OID in `pg_namespace`, as PostgreSQL and
/// datafusion-pg-catalog fix it.
pub(crate) const PG_CATALOG_NAMESPACE_OID: i32 = 11;

/// The relations of datafusion-pg-catalog's `pg_class` that FoamDB's
/// catalog wrappers tell apart.
pub(crate) struct Relations {
    /// The OID of FoamDB's schema (`public`) in `pg_namespace`.
    pub schema_oid: Option<i64>,
    /// The relations in it by OID, with their names.
    pub foam: HashMap<i64, String>,
    /// PostgreSQL's fixed OID of each catalog table in `pg_catalog`, by the
    /// OID datafusion-pg-catalog numbered it with (`'pg_proc'::regclass`
    /// is 1255, as `tableoid` and `pg_init_privs.classoid` say).
    pub fixed: HashMap<i64, i32>,
}

impl Relations {
    /// `batch` with the catalog tables' OIDs in column `column` fixed.
    pub fn with_fixed_oids(&self, batch: &RecordBatch, column: &str) -> Result<RecordBatch> {
        if batch.schema().index_of(column).is_err() {
            return Ok(batch.clone());
        }
        let oids: Int32Array = oid_column(batch, column)?
            .into_iter()
            .map(|oid| oid.and_then(|oid| self.fixed.get(&oid).copied().or_else(|| i32::try_from(oid).ok())))
            .collect();
        replaced(batch, column, Arc::new(oids))
    }
}

/// `batch` with column `name` (if it has one) replaced by `array`, cast to
/// the column's type.
pub(crate) fn replaced(batch: &RecordBatch, name: &str, array: ArrayRef) -> Result<RecordBatch> {
    let Ok(at) = batch.schema().index_of(name) else { return Ok(batch.clone()) };
    let mut columns = batch.columns().to_vec();
    columns[at] = arrow::compute::cast(&array, batch.schema().field(at).data_type())?;
    Ok(RecordBatch::try_new(batch.schema(), columns)?)
}

/// The relations of `pg_class` FoamDB's wrappers tell apart, read from
/// datafusion-pg-catalog's own (see [`Relations`]).
pub(crate) async fn relations(pg_catalog: &Arc<dyn SchemaProvider>) -> Result<Relations> {
    let schema_oid = namespace_oid(pg_catalog, SCHEMA_NAME).await?;
    let mut relations = Relations { schema_oid, foam: HashMap::new(), fixed: HashMap::new() };
    if let Some(classes) = pg_catalog.table("pg_class").await? {
        for batch in rows(&classes).await? {
            let (oids, namespaces) = (oid_column(&batch, "oid")?, oid_column(&batch, "relnamespace")?);
            let Some(names) = batch.column_by_name("relname").map(|c| c.as_string::<i32>().clone()) else { continue };
            for i in 0..batch.num_rows() {
                let (Some(oid), Some(namespace)) = (oids[i], namespaces[i]) else { continue };
                if schema_oid == Some(namespace) {
                    relations.foam.insert(oid, names.value(i).to_string());
                } else if namespace == i64::from(PG_CATALOG_NAMESPACE_OID)
                    && let Some(fixed) = pg_missing::catalog_oid(names.value(i))
                {
                    relations.fixed.insert(oid, fixed);
                }
            }
        }
    }
    Ok(relations)
}

/// The OID datafusion-pg-catalog's `pg_namespace` gives schema `name`.
pub(crate) async fn namespace_oid(pg_catalog: &Arc<dyn SchemaProvider>, name: &str) -> Result<Option<i64>> {
    let Some(namespaces) = pg_catalog.table("pg_namespace").await? else { return Ok(None) };
    for batch in rows(&namespaces).await? {
        let oids = oid_column(&batch, "oid")?;
        if let Some(names) = batch.column_by_name("nspname").and_then(|c| c.as_string_opt::<i32>())
            && let Some(i) = (0..batch.num_rows()).find(|&i| names.is_valid(i) && names.value(i) == name)
        {
            return Ok(oids[i]);
        }
    }
    Ok(None)
}

/// Every row of one of datafusion-pg-catalog's tables.
pub(crate) async fn rows(table: &Arc<dyn TableProvider>) -> Result<Vec<RecordBatch>> {
    let state = datafusion::execution::session_state::SessionStateBuilder::new().build();
    let plan = table.scan(&state, None, &[], None).await?;
    collect(plan, Arc::new(TaskContext::from(&state))).await
}

/// An OID column (Int32 or UInt32 in datafusion-pg-catalog's tables) as
/// i64s.
pub(crate) fn oid_column(batch: &RecordBatch, name: &str) -> Result<Vec<Option<i64>>> {
    let column = batch.column_by_name(name).ok_or_else(|| DataFusionError::Internal(format!("pg_catalog table without {name}")))?;
    Ok(match column.data_type() {
        arrow::datatypes::DataType::Int32 => column.as_primitive::<Int32Type>().iter().map(|v| v.map(i64::from)).collect(),
        arrow::datatypes::DataType::UInt32 => column.as_primitive::<UInt32Type>().iter().map(|v| v.map(i64::from)).collect(),
        arrow::datatypes::DataType::Int64 => column.as_primitive::<arrow::datatypes::Int64Type>().iter().collect(),
        other => return Err(DataFusionError::Internal(format!("{name} is {other}"))),
    })
}

/// The type OID and modifier PostgreSQL records for `sql_type`, where they
/// differ from those of its Arrow type.
fn declared(sql_type: &SqlType) -> Option<(i32, i32)> {
    Some(match *sql_type {
        SqlType::Varchar { length_max } => (VARCHAR_OID, length_max.map_or(-1, |n| n as i32 + TYPMOD_HEADER)),
        SqlType::Char { length } => (BPCHAR_OID, length as i32 + TYPMOD_HEADER),
        SqlType::Decimal { precision, scale } => (NUMERIC_OID, ((i32::from(precision) << 16) | i32::from(scale as u8)) + TYPMOD_HEADER),
        _ => return None,
    })
}

/// `batch` of `pg_attribute` with the declared types of FoamDB's columns.
fn with_declared_types(batch: &RecordBatch, relations: &HashMap<i64, String>, node: &NodeContext) -> Result<RecordBatch> {
    let catalog = node.catalog.current();
    let relation_oids = oid_column(batch, "attrelid")?;
    let column = |name: &str| batch.column_by_name(name).ok_or_else(|| DataFusionError::Internal(format!("pg_attribute without {name}")));
    let numbers = column("attnum")?.as_primitive::<Int16Type>().clone();
    let mut type_oids: Vec<Option<i32>> = column("atttypid")?.as_primitive::<Int32Type>().iter().collect();
    let mut modifiers: Vec<Option<i32>> = column("atttypmod")?.as_primitive::<Int32Type>().iter().collect();
    let mut lengths: Vec<Option<i16>> = column("attlen")?.as_primitive::<Int16Type>().iter().collect();
    let mut has_defaults: Vec<Option<bool>> = column("atthasdef")?.as_boolean().iter().collect();
    let mut identities: Vec<Option<String>> = column("attidentity")?.as_string::<i32>().iter().map(|v| v.map(str::to_string)).collect();
    for row in 0..batch.num_rows() {
        let Some(table) = relation_oids[row].and_then(|oid| relations.get(&oid)).and_then(|name| catalog.tables.get(name)) else { continue };
        let Some(def) = usize::try_from(numbers.value(row)).ok().and_then(|n| n.checked_sub(1)).and_then(|at| table.columns.get(at)) else { continue };
        // An identity column's sequence is its own: no default in pg_attrdef.
        has_defaults[row] = Some(def.default.is_some() && def.identity.is_none());
        identities[row] = Some(match def.identity {
            Some(foam_catalog::model::Identity::Always) => "a".into(),
            Some(foam_catalog::model::Identity::ByDefault) => "d".into(),
            None => String::new(),
        });
        if let Some((type_oid, modifier)) = declared(&def.sql_type) {
            (type_oids[row], modifiers[row], lengths[row]) = (Some(type_oid), Some(modifier), Some(-1));
        }
    }
    let replaced: [(&str, ArrayRef); 5] = [
        ("attidentity", Arc::new(StringArray::from(identities))),
        ("atttypid", Arc::new(Int32Array::from(type_oids))),
        ("atttypmod", Arc::new(Int32Array::from(modifiers))),
        ("attlen", Arc::new(Int16Array::from(lengths))),
        ("atthasdef", Arc::new(arrow::array::BooleanArray::from(has_defaults))),
    ];
    let schema = batch.schema();
    let mut columns = batch.columns().to_vec();
    for (name, array) in replaced {
        let at = schema.index_of(name)?;
        columns[at] = array;
    }
    Ok(RecordBatch::try_new(schema, columns)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_modifiers_are_postgresqls() {
        // PostgreSQL 15: varchar(20) 24, char(3) 7, numeric(12,2) 786438.
        assert_eq!(declared(&SqlType::Varchar { length_max: Some(20) }), Some((VARCHAR_OID, 24)));
        assert_eq!(declared(&SqlType::Varchar { length_max: None }), Some((VARCHAR_OID, -1)));
        assert_eq!(declared(&SqlType::Char { length: 3 }), Some((BPCHAR_OID, 7)));
        assert_eq!(declared(&SqlType::Decimal { precision: 12, scale: 2 }), Some((NUMERIC_OID, 786438)));
        assert_eq!(declared(&SqlType::Int), None);
        assert_eq!(with_numeric_scale("numeric(5)"), "numeric(5,0)");
        assert_eq!(with_numeric_scale("numeric(12,2)"), "numeric(12,2)");
        assert_eq!(with_numeric_scale("numeric"), "numeric");
    }
}
