//! FoamDB's PRIMARY KEY and UNIQUE keys as PostgreSQL's catalog shows them:
//! a row in `pg_constraint` (contype `p` or `u`), the index PostgreSQL would
//! build for it in `pg_index` and `pg_class` (relkind `i`, btree, named as
//! the constraint), `relhasindex` on the table, and `pg_get_constraintdef`
//! / `pg_get_indexdef` for them. psql's `\d t` lists the keys from these,
//! pg_dump writes `ADD CONSTRAINT t_pkey PRIMARY KEY (id)` from them, and
//! drivers read a table's key columns from `conkey`.
//!
//! FoamDB checks a key where a partition's rows are (foam-storage
//! `unique.rs`), without an index; the index rows say which columns are
//! unique, which is what their readers want. A key's OIDs are made from
//! its table's id and its place among the table's keys, so the functions
//! can find the key again from the OID alone ([`key_of_oid`]).
//!
//! CHECK constraints are rows of `pg_constraint` too (contype `c`, conkey
//! the columns they read, no index), placed after the keys, so psql's `\d`
//! lists them and pg_dump writes them from `pg_get_constraintdef`.
//!
//! `conkey` and `confkey` are `smallint[]` in PostgreSQL; datafusion-pg-
//! catalog holds them as text (`[1, 2]`), on which `unnest(conkey)` and
//! `attnum = ANY(conkey)` fail, so [`WithKeys`] gives them as lists of
//! Int16. pg_index's `indkey` and `indoption` (`int2vector`) and `indclass`
//! and `indcollation` (`oidvector`) are lists too, marked with their
//! PostgreSQL type, which the protocol layer prints as PostgreSQL does
//! (`1 2`, how pg_dump reads them), so `unnest(indkey)` and `attnum =
//! ANY(indkey)` (SQLAlchemy's reflection, psql) work.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, ListArray, RecordBatch};
use arrow::datatypes::{DataType, Field, Int16Type, Int32Type, Schema, SchemaRef};
use async_trait::async_trait;
use datafusion::catalog::{MemTable, SchemaProvider, Session, TableProvider};
use datafusion::common::ScalarValue;
use datafusion::datasource::TableType;
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::{ColumnarValue, Expr, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, TypeSignature, Volatility};
use datafusion::physical_plan::ExecutionPlan;
use foam_catalog::model::{CheckDef, TableDef, UniqueKeyDef};
use foam_common::TableId;

use crate::catalog::pg_columns::{oid_column, relations, rows};
use crate::context::NodeContext;
use super::Handle;

/// Key OIDs start here, above the OIDs datafusion-pg-catalog hands out
/// (from 16384, one per schema object) and PostgreSQL's own.
const KEY_OID_BASE: i64 = 1 << 30;
/// Keys and CHECK constraints of one table that get OIDs (two each: the
/// index, the constraint, the index OID of a CHECK unused); a table with
/// more shows the first ones.
const KEYS_PER_TABLE_MAX: usize = 64;
/// PostgreSQL's btree access method, `pg_am.oid`.
const BTREE_AM_OID: i32 = 403;

/// The catalog tables this module adds rows to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Catalog {
    Constraint,
    Index,
    Class,
}

/// The OID of the index (`constraint == false`) or constraint of key `at`
/// of table `table_id`; `None` past [`KEYS_PER_TABLE_MAX`] or where it
/// would not fit an OID.
fn key_oid(table_id: TableId, at: usize, constraint: bool) -> Option<i32> {
    if at >= KEYS_PER_TABLE_MAX {
        return None;
    }
    let slot = i64::try_from(table_id).ok()?.checked_mul(2 * KEYS_PER_TABLE_MAX as i64)?;
    i32::try_from(KEY_OID_BASE + slot + 2 * at as i64 + i64::from(constraint)).ok()
}

/// The table id, key place and kind (constraint or index) an OID of
/// [`key_oid`] was made from.
fn key_of_oid(oid: i64) -> Option<(TableId, usize, bool)> {
    let slot = oid.checked_sub(KEY_OID_BASE)?;
    let per_table = 2 * KEYS_PER_TABLE_MAX as i64;
    Some((TableId::try_from(slot / per_table).ok()?, (slot % per_table / 2) as usize, slot % 2 == 1))
}

/// `catalog` with FoamDB's keys (see the module documentation), for the
/// `pg_catalog` tables this adds to; any other table as it is.
pub fn with_keys(name: &str, table: Arc<dyn TableProvider>, pg_catalog: Arc<dyn SchemaProvider>, node: Arc<NodeContext>) -> Arc<dyn TableProvider> {
    let catalog = match name.to_lowercase().as_str() {
        "pg_constraint" => Catalog::Constraint,
        "pg_index" => Catalog::Index,
        "pg_class" => Catalog::Class,
        _ => return table,
    };
    let inner = table.schema();
    let fields: Vec<Field> = inner
        .fields()
        .iter()
        .map(|f| match (catalog, f.name().as_str()) {
            (Catalog::Constraint, "conkey" | "confkey") => Field::new(f.name(), int2_list(), true),
            (Catalog::Index, name) => match vector_type(name) {
                Some((element, pg_type)) => Field::new(name, list_of(element), true)
                    .with_metadata(HashMap::from([(crate::exec::json_build::PG_TYPE_METADATA.to_string(), pg_type.to_string())])),
                None => f.as_ref().clone(),
            },
            _ => f.as_ref().clone(),
        })
        .collect();
    let schema = Arc::new(Schema::new_with_metadata(fields, inner.metadata().clone()));
    Arc::new(WithKeys { inner: table, schema, catalog, pg_catalog, node })
}

fn int2_list() -> DataType {
    list_of(DataType::Int16)
}

fn list_of(element: DataType) -> DataType {
    DataType::List(Arc::new(Field::new_list_field(element, true)))
}

/// pg_index's vector columns: their element type and PostgreSQL type
/// (`int2vector` of attnums, `oidvector` of OIDs).
fn vector_type(column: &str) -> Option<(DataType, &'static str)> {
    match column {
        "indkey" | "indoption" => Some((DataType::Int16, "int2vector")),
        "indclass" | "indcollation" => Some((DataType::Int32, "oidvector")),
        _ => None,
    }
}

#[derive(Debug)]
struct WithKeys {
    inner: Arc<dyn TableProvider>,
    schema: SchemaRef,
    catalog: Catalog,
    pg_catalog: Arc<dyn SchemaProvider>,
    node: Arc<NodeContext>,
}

/// One CHECK of a FoamDB table, as its pg_constraint row needs it.
struct Check<'a> {
    table_oid: i64,
    def: &'a CheckDef,
    constraint_oid: i32,
    /// The attnums of the columns it reads.
    columns: Vec<i16>,
}

/// One key of a FoamDB table, as the catalog rows need it.
struct Key<'a> {
    table_oid: i64,
    def: &'a UniqueKeyDef,
    index_oid: i32,
    constraint_oid: i32,
    /// The key's columns' attnums.
    columns: Vec<i16>,
}

#[async_trait]
impl TableProvider for WithKeys {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        self.inner.table_type()
    }

    async fn scan(&self, state: &dyn Session, projection: Option<&Vec<usize>>, filters: &[Expr], limit: Option<usize>) -> Result<Arc<dyn ExecutionPlan>> {
        let relations = relations(&self.pg_catalog).await?;
        let (namespace, relations) = (relations.schema_oid, relations.foam);
        let catalog = self.node.catalog.current();
        let by_name: HashMap<&str, i64> = relations.iter().map(|(oid, name)| (name.as_str(), *oid)).collect();
        let mut keys = Vec::new();
        let mut checks = Vec::new();
        let attnums = |table: &TableDef, names: &[String]| -> Vec<i16> {
            names.iter().filter_map(|c| table.columns.iter().position(|d| &d.name == c)).map(|at| at as i16 + 1).collect()
        };
        for table in catalog.tables.values() {
            let Some(&table_oid) = by_name.get(table.name.as_str()) else { continue };
            for (at, def) in table.unique_keys.iter().enumerate() {
                let (Some(index_oid), Some(constraint_oid)) = (key_oid(table.id, at, false), key_oid(table.id, at, true)) else { continue };
                let columns = attnums(table, &def.columns);
                keys.push(Key { table_oid, def, index_oid, constraint_oid, columns });
            }
            for (at, def) in table.checks.iter().enumerate() {
                let Some(constraint_oid) = key_oid(table.id, table.unique_keys.len() + at, true) else { continue };
                let columns = attnums(table, &crate::frontend::check_constraints::columns_of(def, &table.columns));
                checks.push(Check { table_oid, def, constraint_oid, columns });
            }
        }
        let mut batches = Vec::new();
        for batch in rows(&self.inner).await? {
            batches.push(match self.catalog {
                Catalog::Constraint => with_int2_lists(&batch, &self.schema)?,
                Catalog::Class => with_indexes_flagged(&batch, &keys, &checks)?,
                Catalog::Index => with_vectors(&batch, &self.schema)?,
            });
        }
        let added = match self.catalog {
            Catalog::Constraint => constraint_rows(&self.schema, &keys, &checks, namespace)?,
            Catalog::Index => index_rows(&self.schema, &keys)?,
            Catalog::Class => index_class_rows(&self.schema, &batches, &keys)?,
        };
        batches.extend(added);
        MemTable::try_new(self.schema.clone(), vec![batches])?.scan(state, projection, filters, limit).await
    }
}

/// `batch` of pg_constraint with `conkey` and `confkey` as Int16 lists,
/// parsed from their text (`[1, 2]` or `{1,2}`).
fn with_int2_lists(batch: &RecordBatch, schema: &SchemaRef) -> Result<RecordBatch> {
    let mut columns = batch.columns().to_vec();
    for name in ["conkey", "confkey"] {
        let at = batch.schema().index_of(name)?;
        let Some(texts) = columns[at].as_string_opt::<i32>() else { continue };
        let lists: Vec<Option<Vec<Option<i16>>>> = texts
            .iter()
            .map(|text| {
                let inner = text?.trim().trim_start_matches(['[', '{']).trim_end_matches([']', '}']).trim();
                (!inner.is_empty()).then(|| inner.split(',').map(|n| n.trim().parse::<i16>().ok()).collect())
            })
            .collect();
        columns[at] = Arc::new(ListArray::from_iter_primitive::<Int16Type, _, _>(lists));
    }
    Ok(RecordBatch::try_new(schema.clone(), columns)?)
}

/// `batch` of pg_index with its vector columns as lists, parsed from their
/// text (`1 2`).
fn with_vectors(batch: &RecordBatch, schema: &SchemaRef) -> Result<RecordBatch> {
    let mut columns = batch.columns().to_vec();
    for (at, field) in schema.fields().iter().enumerate() {
        let Some((element, _)) = vector_type(field.name()) else { continue };
        let Some(texts) = columns[at].as_string_opt::<i32>() else { continue };
        let values = |text: &str| -> Vec<Option<i64>> {
            text.trim_matches(|c| c == '{' || c == '}' || c == '[' || c == ']').split([' ', ',']).filter(|v| !v.is_empty()).map(|v| v.parse().ok()).collect()
        };
        columns[at] = match element {
            DataType::Int16 => Arc::new(ListArray::from_iter_primitive::<Int16Type, _, _>(
                texts.iter().map(|t| t.map(|t| values(t).into_iter().map(|v| v.and_then(|v| i16::try_from(v).ok())).collect::<Vec<_>>())),
            )),
            _ => Arc::new(ListArray::from_iter_primitive::<Int32Type, _, _>(
                texts.iter().map(|t| t.map(|t| values(t).into_iter().map(|v| v.and_then(|v| i32::try_from(v).ok())).collect::<Vec<_>>())),
            )),
        };
    }
    Ok(RecordBatch::try_new(schema.clone(), columns)?)
}

/// `batch` of pg_class with `relhasindex` set for FoamDB tables with keys,
/// and `relchecks` counting their CHECK constraints (psql's `\d` and
/// pg_dump read a table's checks only when it is above 0).
fn with_indexes_flagged(batch: &RecordBatch, keys: &[Key], checks: &[Check]) -> Result<RecordBatch> {
    let oids = oid_column(batch, "oid")?;
    let at = batch.schema().index_of("relhasindex")?;
    let flags = batch.column(at).as_boolean();
    let flagged: arrow::array::BooleanArray =
        (0..batch.num_rows()).map(|i| Some(flags.value(i) || oids[i].is_some_and(|oid| keys.iter().any(|k| k.table_oid == oid)))).collect();
    let mut columns = batch.columns().to_vec();
    columns[at] = Arc::new(flagged);
    if let Ok(at) = batch.schema().index_of("relchecks") {
        let counts: arrow::array::Int64Array = (0..batch.num_rows())
            .map(|i| Some(oids[i].map_or(0, |oid| checks.iter().filter(|c| c.table_oid == oid).count() as i64)))
            .collect();
        columns[at] = arrow::compute::cast(&counts, batch.schema().field(at).data_type())?;
    }
    Ok(RecordBatch::try_new(batch.schema(), columns)?)
}

/// Rows of `schema` made from one map of values per row; a column not in a
/// row's map is that row's `template` value where there is one, else
/// empty (NULL, or zero, false or '' where the column takes no NULL).
pub(crate) fn rows_of(schema: &SchemaRef, values: Vec<(HashMap<&str, ScalarValue>, Option<(&RecordBatch, usize)>)>) -> Result<Vec<RecordBatch>> {
    if values.is_empty() {
        return Ok(Vec::new());
    }
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
    for field in schema.fields() {
        let cells = values
            .iter()
            .map(|(row, template)| match row.get(field.name().as_str()) {
                Some(value) => Ok(value.clone()),
                None => match template {
                    Some((batch, i)) => ScalarValue::try_from_array(batch.column_by_name(field.name()).ok_or_else(|| missing(field.name()))?, *i),
                    None => empty_value(field),
                },
            })
            .collect::<Result<Vec<_>>>()?;
        let array = ScalarValue::iter_to_array(cells)?;
        columns.push(if array.data_type() == field.data_type() { array } else { arrow::compute::cast(&array, field.data_type())? });
    }
    Ok(vec![RecordBatch::try_new(schema.clone(), columns)?])
}

fn missing(name: &str) -> DataFusionError {
    DataFusionError::Internal(format!("pg_catalog table without {name}"))
}

fn empty_value(field: &Field) -> Result<ScalarValue> {
    let null = ScalarValue::try_from(field.data_type())?;
    if field.is_nullable() {
        return Ok(null);
    }
    Ok(match field.data_type() {
        DataType::Utf8 => ScalarValue::Utf8(Some(String::new())),
        DataType::Boolean => ScalarValue::Boolean(Some(false)),
        other => ScalarValue::new_zero(other).unwrap_or(null),
    })
}

pub(crate) fn text(value: &str) -> ScalarValue {
    ScalarValue::Utf8(Some(value.to_string()))
}

fn int2_list_value(values: &[i16]) -> ScalarValue {
    let list = ListArray::from_iter_primitive::<Int16Type, _, _>([Some(values.iter().map(|v| Some(*v)).collect::<Vec<_>>())]);
    ScalarValue::List(Arc::new(list))
}

fn constraint_rows(schema: &SchemaRef, keys: &[Key], checks: &[Check], namespace: Option<i64>) -> Result<Vec<RecordBatch>> {
    let namespace = namespace.and_then(|n| i32::try_from(n).ok()).unwrap_or(0);
    let check_rows = checks.iter().map(|check| {
        let row = HashMap::from([
            ("oid", ScalarValue::Int32(Some(check.constraint_oid))),
            ("conname", text(&check.def.name)),
            ("connamespace", ScalarValue::Int32(Some(namespace))),
            ("contype", text("c")),
            ("convalidated", ScalarValue::Boolean(Some(!check.def.validating))),
            ("conrelid", ScalarValue::Int32(i32::try_from(check.table_oid).ok())),
            ("conindid", ScalarValue::Int32(Some(0))),
            ("confupdtype", text(" ")),
            ("confdeltype", text(" ")),
            ("confmatchtype", text(" ")),
            ("conislocal", ScalarValue::Boolean(Some(true))),
            ("connoinherit", ScalarValue::Boolean(Some(false))),
            ("conkey", int2_list_value(&check.columns)),
        ]);
        (row, None)
    });
    let rows = keys
        .iter()
        .map(|key| {
            let row = HashMap::from([
                ("oid", ScalarValue::Int32(Some(key.constraint_oid))),
                ("conname", text(&key.def.name)),
                ("connamespace", ScalarValue::Int32(Some(namespace))),
                ("contype", text(if key.def.primary { "p" } else { "u" })),
                ("convalidated", ScalarValue::Boolean(Some(!key.def.validating))),
                ("conrelid", ScalarValue::Int32(i32::try_from(key.table_oid).ok())),
                ("conindid", ScalarValue::Int32(Some(key.index_oid))),
                ("confupdtype", text(" ")),
                ("confdeltype", text(" ")),
                ("confmatchtype", text(" ")),
                ("conislocal", ScalarValue::Boolean(Some(true))),
                ("connoinherit", ScalarValue::Boolean(Some(true))),
                ("conkey", int2_list_value(&key.columns)),
            ]);
            (row, None)
        })
        .chain(check_rows)
        .collect();
    rows_of(schema, rows)
}

fn index_rows(schema: &SchemaRef, keys: &[Key]) -> Result<Vec<RecordBatch>> {
    let oids = |n: usize| ScalarValue::List(Arc::new(ListArray::from_iter_primitive::<Int32Type, _, _>([Some(vec![Some(0); n])])));
    let rows = keys
        .iter()
        .map(|key| {
            let n = key.columns.len();
            let row = HashMap::from([
                ("indexrelid", ScalarValue::Int32(Some(key.index_oid))),
                ("indrelid", ScalarValue::Int32(i32::try_from(key.table_oid).ok())),
                ("indnatts", ScalarValue::Int16(Some(n as i16))),
                ("indnkeyatts", ScalarValue::Int16(Some(n as i16))),
                ("indisunique", ScalarValue::Boolean(Some(true))),
                ("indisprimary", ScalarValue::Boolean(Some(key.def.primary))),
                ("indimmediate", ScalarValue::Boolean(Some(true))),
                ("indisvalid", ScalarValue::Boolean(Some(!key.def.validating))),
                ("indisready", ScalarValue::Boolean(Some(true))),
                ("indislive", ScalarValue::Boolean(Some(true))),
                ("indkey", int2_list_value(&key.columns)),
                ("indcollation", oids(n)),
                ("indclass", oids(n)),
                ("indoption", int2_list_value(&vec![0; n])),
            ]);
            (row, None)
        })
        .collect();
    rows_of(schema, rows)
}

/// pg_class rows of the keys' indexes, each made from its table's row.
fn index_class_rows(schema: &SchemaRef, batches: &[RecordBatch], keys: &[Key]) -> Result<Vec<RecordBatch>> {
    let mut rows = Vec::new();
    for key in keys {
        let template = batches.iter().find_map(|batch| {
            let oids = oid_column(batch, "oid").ok()?;
            oids.iter().position(|oid| *oid == Some(key.table_oid)).map(|i| (batch, i))
        });
        let Some(template) = template else { continue };
        let row = HashMap::from([
            ("oid", ScalarValue::Int32(Some(key.index_oid))),
            ("relname", text(&key.def.name)),
            ("relkind", text("i")),
            ("relam", ScalarValue::Int32(Some(BTREE_AM_OID))),
            ("reltype", ScalarValue::Int32(Some(0))),
            ("relfilenode", ScalarValue::Int32(Some(key.index_oid))),
            ("relnatts", ScalarValue::Int16(Some(key.columns.len() as i16))),
            ("relhasindex", ScalarValue::Boolean(Some(false))),
            ("reltuples", ScalarValue::Float64(Some(0.0))),
            ("relpages", ScalarValue::Int32(Some(0))),
        ]);
        rows.push((row, Some(template)));
    }
    rows_of(schema, rows)
}

/// A name as PostgreSQL prints it in a definition: quoted unless it is a
/// lower-case identifier.
fn quoted(name: &str) -> String {
    let plain = name.chars().next().is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if plain { name.to_string() } else { crate::frontend::modify::quoted(name) }
}

/// `pg_get_constraintdef(oid [, pretty])` and `pg_get_indexdef(oid [,
/// column, pretty])` of FoamDB's keys; datafusion-pg-catalog's answer ('')
/// and NULL for any other OID.
pub fn definition_udfs(node: Arc<NodeContext>) -> Vec<ScalarUDF> {
    let udf = |name, arguments: Vec<usize>, index| {
        ScalarUDF::new_from_impl(Definition {
            name,
            signature: Signature::one_of(arguments.into_iter().map(TypeSignature::Any).collect(), Volatility::Stable),
            index,
            node: Handle(node.clone()),
        })
    };
    vec![udf("pg_get_constraintdef", vec![1, 2], false), udf("pg_get_indexdef", vec![1, 3], true)]
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct Definition {
    name: &'static str,
    signature: Signature,
    /// pg_get_indexdef rather than pg_get_constraintdef.
    index: bool,
    node: Handle<NodeContext>,
}

impl ScalarUDFImpl for Definition {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let rows = args.number_rows;
        let arrays = args.args.iter().map(|arg| arg.to_array(rows)).collect::<Result<Vec<_>>>()?;
        let oids = arrow::compute::cast(&arrays[0], &DataType::Int64)?;
        let oids = oids.as_primitive::<arrow::datatypes::Int64Type>();
        let columns = match arrays.get(1) {
            Some(column) if self.index => Some(arrow::compute::cast(column, &DataType::Int64)?),
            _ => None,
        };
        let catalog = self.node.catalog.current();
        let definitions: arrow::array::StringArray = (0..rows)
            .map(|i| {
                let oid = oids.is_valid(i).then(|| oids.value(i))?;
                let column = columns.as_ref().and_then(|c| c.as_primitive_opt::<arrow::datatypes::Int64Type>().filter(|c| c.is_valid(i)).map(|c| c.value(i)));
                let table = key_of_oid(oid).and_then(|(table_id, at, constraint)| Some((catalog.table_by_id(table_id)?, at, constraint)));
                let check = table.and_then(|(table, at, constraint)| table.checks.get(at.checked_sub(table.unique_keys.len())?).filter(|_| constraint));
                let key = table.and_then(|(table, at, _)| Some((table, table.unique_keys.get(at)?)));
                match (key, check) {
                    (Some((table, key)), _) if self.index => Some(index_definition(table, key, column.unwrap_or(0))),
                    (Some((_, key)), _) => Some(constraint_definition(key)),
                    (None, Some(check)) if !self.index => Some(crate::frontend::check_constraints::constraint_def(check)),
                    _ if self.index => None,
                    _ => Some(String::new()),
                }
            })
            .collect();
        Ok(ColumnarValue::Array(Arc::new(definitions)))
    }
}

fn key_columns(key: &UniqueKeyDef) -> String {
    key.columns.iter().map(|c| quoted(c)).collect::<Vec<_>>().join(", ")
}

/// `PRIMARY KEY (a, b)` or `UNIQUE (a)`, as PostgreSQL prints them.
fn constraint_definition(key: &UniqueKeyDef) -> String {
    format!("{} ({})", if key.primary { "PRIMARY KEY" } else { "UNIQUE" }, key_columns(key))
}

/// The index's CREATE INDEX, or with `column` > 0 that column's name.
fn index_definition(table: &TableDef, key: &UniqueKeyDef, column: i64) -> String {
    if column > 0 {
        return usize::try_from(column - 1).ok().and_then(|at| key.columns.get(at)).map(|c| quoted(c)).unwrap_or_default();
    }
    format!("CREATE UNIQUE INDEX {} ON public.{} USING btree ({})", quoted(&key.name), quoted(&table.name), key_columns(key))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_oids_lead_back_to_their_key() {
        let index = key_oid(7, 2, false).unwrap();
        let constraint = key_oid(7, 2, true).unwrap();
        assert_eq!(constraint, index + 1);
        assert_eq!(key_of_oid(i64::from(index)), Some((7, 2, false)));
        assert_eq!(key_of_oid(i64::from(constraint)), Some((7, 2, true)));
        assert_eq!(key_oid(7, KEYS_PER_TABLE_MAX, false), None);
        assert_eq!(key_oid(u64::MAX, 0, false), None);
        assert_eq!(key_of_oid(16384), None);
        // Neighbouring tables' OIDs do not meet.
        assert!(key_oid(8, 0, false).unwrap() > key_oid(7, KEYS_PER_TABLE_MAX - 1, true).unwrap());
    }

    #[test]
    fn definitions_print_as_postgresql_prints_them() {
        let key = |primary, columns: &[&str]| UniqueKeyDef {
            name: if primary { "t_pkey".into() } else { "t_a_B_key".into() },
            columns: columns.iter().map(|c| c.to_string()).collect(),
            primary,
            validating: false,
        };
        assert_eq!(constraint_definition(&key(true, &["id"])), "PRIMARY KEY (id)");
        assert_eq!(constraint_definition(&key(false, &["a", "B"])), "UNIQUE (a, \"B\")");
        assert_eq!(quoted("1x"), "\"1x\"");
    }
}
