//! FoamDB's sequences as PostgreSQL's catalog shows them: a row of
//! `pg_class` (relkind `S`) and of `pg_sequence` for each, the `pg_depend`
//! rows that tie a sequence to the column that owns it (`a`, or `i` for an
//! identity column) and a column default to the sequence it draws from
//! (`n`), and each sequence readable as a one-row relation (`SELECT
//! last_value, log_cnt, is_called FROM s`). psql's `\ds` and `\d s` read the
//! first two; pg_dump reads all four to write `CREATE SEQUENCE`, `ALTER
//! SEQUENCE ... OWNED BY`, an identity column's `ADD GENERATED`, the
//! default after the sequence it names, and `setval` with the sequence's
//! state.
//!
//! A sequence's OID is made from its name ([`sequence_oids`]), in a range
//! of its own below the keys' (`pg_keys.rs`) and above the OIDs
//! datafusion-pg-catalog hands out: the same on every node, and while the
//! sequence exists unless another whose name hashes alike comes or goes.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use arrow::array::{BooleanArray, Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use async_trait::async_trait;
use datafusion::catalog::{MemTable, SchemaProvider, Session, TableProvider};
use datafusion::common::ScalarValue;
use datafusion::datasource::TableType;
use datafusion::error::Result;
use datafusion::logical_expr::Expr;
use datafusion::logical_expr::dml::InsertOp;
use datafusion::physical_plan::ExecutionPlan;
use foam_catalog::Catalog;
use foam_catalog::sequences::SequenceDef;
use foam_common::{FoamError, SqlState};

use crate::catalog::pg_columns::{namespace_oid, relations, rows};
use crate::catalog::pg_keys::{rows_of, text};
use crate::catalog::pg_owners::{owner_name, role_oid, stable_hash};
use crate::catalog::pg_defaults::default_oid;
use crate::context::NodeContext;
use crate::catalog::provider::SCHEMA_NAME;

/// Sequence OIDs are this plus a number made from the name, below
/// [`SEQUENCE_OID_SPAN`].
const SEQUENCE_OID_BASE: i32 = 1 << 28;
const SEQUENCE_OID_SPAN: u64 = 1 << 24;
/// `pg_class`'s and `pg_attrdef`'s own OIDs, the `classid` of what depends
/// on a relation or a default.
const PG_CLASS_OID: i32 = 1259;
const PG_ATTRDEF_OID: i32 = 2604;
/// The columns a sequence has as a relation, as in PostgreSQL.
const RELATION_COLUMNS: i16 = 3;

/// The catalog tables this module adds rows to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Listed {
    Class,
    Sequence,
    Depend,
}

/// Each sequence's OID: the name's hash in the sequences' range, the next
/// free one (in name order) where two collide.
pub fn sequence_oids(catalog: &Catalog) -> BTreeMap<&str, i32> {
    let mut oids = BTreeMap::new();
    let mut taken = std::collections::HashSet::new();
    for name in catalog.sequences.keys() {
        let mut slot = stable_hash(name) % SEQUENCE_OID_SPAN;
        while !taken.insert(slot) {
            slot = (slot + 1) % SEQUENCE_OID_SPAN;
        }
        oids.insert(name.as_str(), SEQUENCE_OID_BASE + slot as i32);
    }
    oids
}

/// `table` with FoamDB's sequences (see the module documentation) for the
/// `pg_catalog` tables this adds to; any other table as it is.
pub fn with_sequences(name: &str, table: Arc<dyn TableProvider>, pg_catalog: Arc<dyn SchemaProvider>, node: Arc<NodeContext>) -> Arc<dyn TableProvider> {
    let catalog = match name.to_lowercase().as_str() {
        "pg_class" => Listed::Class,
        "pg_sequence" => Listed::Sequence,
        "pg_depend" => Listed::Depend,
        _ => return table,
    };
    Arc::new(WithSequences { inner: table, catalog, pg_catalog, node })
}

#[derive(Debug)]
struct WithSequences {
    inner: Arc<dyn TableProvider>,
    catalog: Listed,
    pg_catalog: Arc<dyn SchemaProvider>,
    node: Arc<NodeContext>,
}

#[async_trait]
impl TableProvider for WithSequences {
    fn schema(&self) -> SchemaRef {
        self.inner.schema()
    }

    fn table_type(&self) -> TableType {
        self.inner.table_type()
    }

    async fn scan(&self, state: &dyn Session, projection: Option<&Vec<usize>>, filters: &[Expr], limit: Option<usize>) -> Result<Arc<dyn ExecutionPlan>> {
        let schema = self.schema();
        let mut batches = rows(&self.inner).await?;
        let catalog = self.node.catalog.current();
        if !catalog.sequences.is_empty() {
            let oids = sequence_oids(&catalog);
            let added = match self.catalog {
                Listed::Class => {
                    let namespace = namespace_oid(&self.pg_catalog, SCHEMA_NAME).await?;
                    class_rows(&schema, &catalog, &oids, namespace)?
                }
                Listed::Sequence => sequence_rows(&schema, &catalog, &oids)?,
                Listed::Depend => {
                    let relations = relations(&self.pg_catalog).await?;
                    let tables: HashMap<&str, i64> = relations.foam.iter().map(|(oid, name)| (name.as_str(), *oid)).collect();
                    depend_rows(&schema, &catalog, &oids, &tables)?
                }
            };
            batches.extend(added);
        }
        MemTable::try_new(schema, vec![batches])?.scan(state, projection, filters, limit).await
    }
}

fn oid(value: i64) -> ScalarValue {
    ScalarValue::Int32(i32::try_from(value).ok())
}

fn class_rows(schema: &SchemaRef, catalog: &Catalog, oids: &BTreeMap<&str, i32>, namespace: Option<i64>) -> Result<Vec<RecordBatch>> {
    let rows = oids
        .iter()
        .map(|(name, &seq_oid)| {
            let owner = owner_name(catalog, name).map_or(0, |owner| role_oid(catalog, owner));
            let row = HashMap::from([
                ("oid", ScalarValue::Int32(Some(seq_oid))),
                ("relname", text(name)),
                ("relnamespace", namespace.map_or(ScalarValue::Int32(None), oid)),
                ("relkind", text("S")),
                ("relowner", ScalarValue::Int32(Some(owner))),
                ("relpersistence", text("p")),
                ("relfilenode", ScalarValue::Int32(Some(seq_oid))),
                ("relnatts", ScalarValue::Int16(Some(RELATION_COLUMNS))),
                ("relpages", ScalarValue::Int32(Some(1))),
                ("reltuples", ScalarValue::Float64(Some(1.0))),
                ("relispopulated", ScalarValue::Boolean(Some(true))),
                ("relreplident", text("n")),
            ]);
            (row, None)
        })
        .collect();
    rows_of(schema, rows)
}

/// PostgreSQL's type OID of a sequence's type.
fn type_oid(sequence: &SequenceDef) -> i32 {
    match sequence.type_max {
        max if max == i64::from(i16::MAX) => 21,
        max if max == i64::from(i32::MAX) => 23,
        _ => 20,
    }
}

fn sequence_rows(schema: &SchemaRef, catalog: &Catalog, oids: &BTreeMap<&str, i32>) -> Result<Vec<RecordBatch>> {
    let rows = catalog
        .sequences
        .values()
        .filter_map(|sequence| {
            let seq_oid = *oids.get(sequence.name.as_str())?;
            let row = HashMap::from([
                ("seqrelid", ScalarValue::Int32(Some(seq_oid))),
                ("seqtypid", ScalarValue::Int32(Some(type_oid(sequence)))),
                ("seqstart", ScalarValue::Int64(Some(sequence.start))),
                ("seqincrement", ScalarValue::Int64(Some(sequence.increment))),
                ("seqmax", ScalarValue::Int64(Some(sequence.max))),
                ("seqmin", ScalarValue::Int64(Some(sequence.min))),
                ("seqcache", ScalarValue::Int64(Some(sequence.cache))),
                ("seqcycle", ScalarValue::Boolean(Some(sequence.cycle))),
            ]);
            Some((row, None))
        })
        .collect();
    rows_of(schema, rows)
}

/// A sequence depends on the column that owns it; a column default on the
/// sequence it draws from (`tables`: FoamDB's tables' OIDs by name).
fn depend_rows(schema: &SchemaRef, catalog: &Catalog, oids: &BTreeMap<&str, i32>, tables: &HashMap<&str, i64>) -> Result<Vec<RecordBatch>> {
    let depends = |classid: i32, objid: i64, refobjid: i64, refobjsubid: i64, deptype: &str| {
        let row = HashMap::from([
            ("classid", ScalarValue::Int32(Some(classid))),
            ("objid", oid(objid)),
            ("objsubid", ScalarValue::Int32(Some(0))),
            ("refclassid", ScalarValue::Int32(Some(PG_CLASS_OID))),
            ("refobjid", oid(refobjid)),
            ("refobjsubid", oid(refobjsubid)),
            ("deptype", text(deptype)),
        ]);
        (row, None)
    };
    let mut rows = Vec::new();
    for sequence in catalog.sequences.values() {
        let Some(&seq_oid) = oids.get(sequence.name.as_str()) else { continue };
        let Some((table, column)) = &sequence.owned_by else { continue };
        let (Some(def), Some(&table_oid)) = (catalog.tables.get(table), tables.get(table.as_str())) else { continue };
        let Some(at) = def.columns.iter().position(|c| &c.name == column) else { continue };
        let identity = def.columns[at].identity.is_some() && drawn_from(def.columns[at].default.as_deref()).as_deref() == Some(sequence.name.as_str());
        rows.push(depends(PG_CLASS_OID, i64::from(seq_oid), table_oid, at as i64 + 1, if identity { "i" } else { "a" }));
    }
    for def in catalog.tables.values() {
        let Some(&table_oid) = tables.get(def.name.as_str()) else { continue };
        for (at, column) in def.columns.iter().enumerate().filter(|(_, c)| c.identity.is_none()) {
            if let Some(&seq_oid) = drawn_from(column.default.as_deref()).and_then(|name| oids.get(name.as_str())) {
                rows.push(depends(PG_ATTRDEF_OID, i64::from(default_oid(table_oid, at)), i64::from(seq_oid), 0, "n"));
            }
        }
    }
    rows_of(schema, rows)
}

/// The sequence a default draws from, when it is `nextval('s')`.
fn drawn_from(default: Option<&str>) -> Option<String> {
    default.and_then(crate::frontend::sequence_ddl::nextval_of)
}

/// Sequence `sequence` as a relation of one row, as PostgreSQL shows it:
/// `last_value`, `log_cnt` (always 0: FoamDB logs every block it hands
/// out) and `is_called`. It takes no rows (42809, as in PostgreSQL).
pub fn relation(sequence: &SequenceDef) -> Result<Arc<dyn TableProvider>> {
    let schema = Arc::new(Schema::new(vec![
        Field::new("last_value", DataType::Int64, false),
        Field::new("log_cnt", DataType::Int64, false),
        Field::new("is_called", DataType::Boolean, false),
    ]));
    let (last_value, is_called) = sequence.state();
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![Arc::new(Int64Array::from(vec![last_value])), Arc::new(Int64Array::from(vec![0])), Arc::new(BooleanArray::from(vec![is_called]))],
    )?;
    Ok(Arc::new(SequenceRelation { name: sequence.name.clone(), rows: MemTable::try_new(schema, vec![vec![batch]])? }))
}

#[derive(Debug)]
struct SequenceRelation {
    name: String,
    rows: MemTable,
}

#[async_trait]
impl TableProvider for SequenceRelation {
    fn schema(&self) -> SchemaRef {
        self.rows.schema()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    async fn scan(&self, state: &dyn Session, projection: Option<&Vec<usize>>, filters: &[Expr], limit: Option<usize>) -> Result<Arc<dyn ExecutionPlan>> {
        self.rows.scan(state, projection, filters, limit).await
    }

    async fn insert_into(&self, _state: &dyn Session, _input: Arc<dyn ExecutionPlan>, _op: InsertOp) -> Result<Arc<dyn ExecutionPlan>> {
        Err(FoamError::Query { message: format!("cannot change sequence \"{}\"", self.name), sqlstate: SqlState::WrongObjectType }.into())
    }
}
