//! INSERT ... ON CONFLICT: upserts with PostgreSQL's semantics.
//!
//! The statement becomes one query of the proposed rows, in the order
//! they were proposed, each beside what the table holds under its arbiter
//! key(s) at the statement's snapshot (the block's own earlier writes
//! included) and, for DO UPDATE, the row that would replace the existing one:
//!
//! ```text
//!  INSERT INTO t [AS q] (cols) <source> ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v + q.v WHERE p
//!  ──▶ SELECT foam_excluded.foam_ord, q.k IS NOT NULL,              -- the order, a hit
//!             foam_excluded.foam_x_0, …                            -- the proposed row
//!             q.*, q.k AS foam_new_0, CAST((foam_excluded.foam_x_1 + q.v) AS T) AS foam_new_1, …
//!             coalesce(p, false)                                   -- DO UPDATE's WHERE
//!      FROM (SELECT row_number() OVER () AS foam_ord, CAST(s.c0 AS T0) AS foam_x_0, …
//!            FROM (<source>) AS s(c0, …)) AS foam_excluded
//!      LEFT JOIN t AS q ON q.k = foam_excluded.foam_x_0
//! ```
//!
//! DO NOTHING joins each arbiter key's columns instead of whole rows. The
//! session then walks the rows in proposal order ([`changes`]): a row that
//! hits an existing one or one this statement wrote is skipped (DO NOTHING),
//! replaces the existing row where the WHERE holds (DO UPDATE), or fails
//! the statement with 21000 when it would change a row a second time, as in
//! PostgreSQL; any other row is inserted. The deletes and inserts go
//! through the write path as one transaction, as an UPDATE's do, so every
//! key is still checked there (a conflict with a concurrent writer, which
//! PostgreSQL would wait for, is 23505 or 40001). Arbiter keys are unique
//! keys, which hold their table's distribution key, so each lookup reads
//! the partitions of its own rows' owners. `RETURNING` reads the inserted
//! and updated rows (`returning.rs`).

use std::collections::HashSet;
use std::ops::ControlFlow;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, RecordBatch, UInt32Array};
use datafusion::arrow::compute::{concat_batches, take_record_batch};
use datafusion::arrow::datatypes::UInt64Type;
use datafusion::arrow::row::{RowConverter, Rows, SortField};
use datafusion::sql::sqlparser::ast::{
    ConflictTarget, Expr, Ident, Insert, OnConflictAction, OnInsert, SelectItem, SetExpr, Statement, TableObject, VisitMut, VisitorMut,
};
use foam_catalog::{Catalog, TableDef};
use foam_common::{FoamError, FoamResult, SqlState};

use crate::frontend::ddl;
use crate::frontend::modify::{column_index, new_row, quoted};

/// The name EXCLUDED's columns are read under in the query.
const EXCLUDED: &str = "foam_excluded";

/// What an INSERT ... ON CONFLICT changes, read from its query's rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upsert {
    pub table: String,
    /// Each arbiter key's column positions in the table.
    pub arbiters: Vec<Vec<usize>>,
    /// DO UPDATE (else DO NOTHING).
    pub update: bool,
}

/// The query of an `INSERT ... ON CONFLICT` (see the module documentation);
/// `None` for any other statement. RETURNING is to be taken off first
/// (`returning.rs`); an INSERT that still has it is refused.
pub fn as_query(statement: &Statement, catalog: &Catalog) -> FoamResult<Option<(String, Upsert)>> {
    let Statement::Insert(insert) = statement else { return Ok(None) };
    if insert.returning.is_some() {
        return Err(FoamError::FeatureNotSupported { feature: "INSERT ... RETURNING here (the session reads RETURNING itself)".into() });
    }
    let conflict = match &insert.on {
        None => return Ok(None),
        Some(OnInsert::OnConflict(conflict)) => conflict,
        Some(_) => return Err(FoamError::FeatureNotSupported { feature: "this form of INSERT".into() }),
    };
    let TableObject::TableName(name) = &insert.table else {
        return Err(FoamError::FeatureNotSupported { feature: "INSERT into a table function".into() });
    };
    let table_name = ddl::table_name(name)?;
    if catalog.views.contains_key(&table_name) {
        return Err(FoamError::FeatureNotSupported { feature: format!("changing rows through the view \"{table_name}\"") });
    }
    let table = catalog.table(&table_name)?;
    let Some(source) = &insert.source else {
        return Err(FoamError::FeatureNotSupported { feature: "INSERT ... DEFAULT VALUES".into() });
    };
    let qualifier = match &insert.table_alias {
        Some(alias) => alias.alias.to_string(),
        None => quoted(&table.name),
    };
    let mut targets = target_columns(insert, table)?;
    // As in PostgreSQL, values for fewer columns than the list fill the
    // first ones; more is an error.
    let width = match source.body.as_ref() {
        SetExpr::Values(values) => values.rows.first().map(|row| row.len()),
        SetExpr::Select(select) if !select.projection.iter().any(|item| matches!(item, SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..))) => {
            Some(select.projection.len())
        }
        _ => None,
    };
    match width {
        Some(width) if width > targets.len() => {
            return Err(FoamError::Query { message: "INSERT has more expressions than target columns".into(), sqlstate: SqlState::SyntaxError });
        }
        Some(width) if insert.columns.is_empty() => targets.truncate(width),
        _ => {}
    }
    let arbiters = arbiters(&conflict.conflict_target, matches!(conflict.action, OnConflictAction::DoUpdate(_)), table)?;

    // The proposed rows, numbered in order and cast to the columns' types.
    let mut source = source.as_ref().clone();
    if let SetExpr::Values(values) = source.body.as_mut() {
        // Typed where they are written, so `$n` parameters take the types.
        for row in &mut values.rows {
            for (value, column) in row.iter_mut().zip(&targets) {
                let ty = table.columns[*column].sql_type.cast_name();
                *value = Expr::Cast { kind: datafusion::sql::sqlparser::ast::CastKind::Cast, expr: Box::new(value.clone()), data_type: parse_type(&ty)?, array: false, format: None };
            }
        }
    }
    let inputs: Vec<String> = (0..targets.len()).map(|i| format!("c{i}")).collect();
    let proposed: Vec<String> = table
        .columns
        .iter()
        .enumerate()
        .map(|(i, column)| {
            let ty = column.sql_type.cast_name();
            match targets.iter().position(|t| *t == i) {
                Some(at) => format!("CAST(s.c{at} AS {ty}) AS foam_x_{i}"),
                None => format!("CAST(NULL AS {ty}) AS foam_x_{i}"),
            }
        })
        .collect();
    let excluded = format!("(SELECT row_number() OVER () AS foam_ord, {} FROM ({source}) AS s({})) AS {EXCLUDED}", proposed.join(", "), inputs.join(", "));
    let key_match = |side: &str, key: &[usize]| {
        key.iter().map(|i| format!("{side}.{} = {EXCLUDED}.foam_x_{i}", quoted(&table.columns[*i].name))).collect::<Vec<_>>().join(" AND ")
    };
    let proposed_items: Vec<String> = (0..table.columns.len()).map(|i| format!("{EXCLUDED}.foam_x_{i}")).collect();
    let query = match &conflict.action {
        OnConflictAction::DoNothing => {
            let mut hits = Vec::new();
            let mut joins = Vec::new();
            for (j, key) in arbiters.iter().enumerate() {
                let columns: Vec<String> = key.iter().map(|i| quoted(&table.columns[*i].name)).collect();
                hits.push(format!("foam_key_{j}.{} IS NOT NULL", columns[0]));
                joins.push(format!(
                    " LEFT JOIN (SELECT {} FROM {}) AS foam_key_{j} ON {}",
                    columns.join(", "),
                    quoted(&table.name),
                    key_match(&format!("foam_key_{j}"), key)
                ));
            }
            let items = [vec![format!("{EXCLUDED}.foam_ord")], hits, proposed_items].concat();
            format!("SELECT {} FROM {excluded}{}", items.join(", "), joins.concat())
        }
        OnConflictAction::DoUpdate(update) => {
            let key = &arbiters[0];
            let hit = format!("{qualifier}.{} IS NOT NULL", quoted(&table.columns[key[0]].name));
            let new_row = new_row(&update.assignments, table, &qualifier, |value| Ok(excluded_read(value.clone(), table)?.to_string()))?;
            let condition = match &update.selection {
                Some(selection) => format!("coalesce(({}), false)", excluded_read(selection.clone(), table)?),
                None => "true".into(),
            };
            let items = [vec![format!("{EXCLUDED}.foam_ord"), hit], proposed_items, vec![format!("{qualifier}.*")], new_row, vec![condition]].concat();
            format!("SELECT {} FROM {excluded} LEFT JOIN {} AS {qualifier} ON {}", items.join(", "), quoted(&table.name), key_match(&qualifier, key))
        }
    };
    Ok(Some((query, Upsert { table: table.name.clone(), arbiters, update: matches!(conflict.action, OnConflictAction::DoUpdate(_)) })))
}

/// The table columns an INSERT writes, in the order its values come.
pub(crate) fn target_columns(insert: &Insert, table: &TableDef) -> FoamResult<Vec<usize>> {
    if insert.columns.is_empty() {
        return Ok((0..table.columns.len()).collect());
    }
    let mut targets = Vec::new();
    for name in &insert.columns {
        let column = name.0.last().and_then(|part| part.as_ident()).map(|i| ddl::normalize_ident(&i.value, i.quote_style)).unwrap_or_default();
        let index = column_index(table, &column)?;
        if targets.contains(&index) {
            return Err(FoamError::Query { message: format!("column \"{column}\" specified more than once"), sqlstate: SqlState::DuplicateColumn });
        }
        targets.push(index);
    }
    Ok(targets)
}

/// The unique keys whose conflicts the statement handles: the one its
/// target names, or every one for a DO NOTHING without a target.
fn arbiters(target: &Option<ConflictTarget>, update: bool, table: &TableDef) -> FoamResult<Vec<Vec<usize>>> {
    let keys = table.unique_key_columns();
    let no_match = || FoamError::Query {
        message: "there is no unique or exclusion constraint matching the ON CONFLICT specification".into(),
        sqlstate: SqlState::InvalidColumnReference,
    };
    match target {
        None if update => Err(FoamError::Query {
            message: "ON CONFLICT DO UPDATE requires inference specification or constraint name".into(),
            sqlstate: SqlState::SyntaxError,
        }),
        None => Ok(keys.into_iter().map(|(_, positions, _)| positions).collect()),
        Some(ConflictTarget::Columns(columns)) => {
            let mut wanted = Vec::new();
            for ident in columns {
                let name = ddl::normalize_ident(&ident.value, ident.quote_style);
                let index = table.columns.iter().position(|c| c.name == name).ok_or_else(|| FoamError::Query {
                    message: format!("column \"{name}\" does not exist"),
                    sqlstate: SqlState::UndefinedColumn,
                })?;
                wanted.push(index);
            }
            let wanted: HashSet<usize> = wanted.into_iter().collect();
            let matching: Vec<Vec<usize>> =
                keys.into_iter().map(|(_, positions, _)| positions).filter(|positions| positions.iter().copied().collect::<HashSet<_>>() == wanted).collect();
            // Two keys of the same columns are one arbiter.
            matching.into_iter().next().map(|key| vec![key]).ok_or_else(no_match)
        }
        Some(ConflictTarget::OnConstraint(name)) => {
            let name = ddl::table_name(name)?;
            keys.into_iter().find(|(key, _, _)| *key == name).map(|(_, positions, _)| vec![positions]).ok_or_else(|| FoamError::Query {
                message: format!("constraint \"{name}\" for table \"{}\" does not exist", table.name),
                sqlstate: SqlState::UndefinedObject,
            })
        }
    }
}

/// `expr` (a DO UPDATE value or condition) with its `EXCLUDED.c` read from
/// the proposed row's column.
fn excluded_read(mut expr: Expr, table: &TableDef) -> FoamResult<Expr> {
    struct Reader<'a> {
        table: &'a TableDef,
        error: Option<FoamError>,
    }
    impl VisitorMut for Reader<'_> {
        type Break = ();
        fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
            if let Expr::CompoundIdentifier(parts) = expr
                && let [relation, column] = parts.as_slice()
                && relation.quote_style.is_none()
                && relation.value.eq_ignore_ascii_case("excluded")
            {
                let name = ddl::normalize_ident(&column.value, column.quote_style);
                match column_index(self.table, &name) {
                    Ok(index) => *expr = Expr::CompoundIdentifier(vec![Ident::new(EXCLUDED), Ident::new(format!("foam_x_{index}"))]),
                    Err(error) => {
                        self.error = Some(error);
                        return ControlFlow::Break(());
                    }
                }
            }
            ControlFlow::Continue(())
        }
    }
    let mut reader = Reader { table, error: None };
    let _ = expr.visit(&mut reader);
    match reader.error {
        Some(error) => Err(error),
        None => Ok(expr),
    }
}

/// What the statement deletes and inserts, from its query's rows (see the
/// module documentation), and how many rows it inserted or updated.
pub struct Changes {
    /// Existing rows that DO UPDATE replaces (the table's own columns).
    pub deletes: Option<RecordBatch>,
    /// Rows to add: proposed ones and new versions, in the table's column
    /// order under other names (cast to the table's schema to write them).
    pub inserts: Vec<RecordBatch>,
    pub count: u64,
}

/// Walks the proposed rows in order and decides each one's fate. Every
/// proposed row must pass the table's CHECK constraints (`checks`), as its
/// NOT NULL columns, whether it is inserted or not.
pub fn changes(upsert: &Upsert, table: &TableDef, batches: &[RecordBatch], checks: Option<&crate::write::checks::TableChecks>) -> FoamResult<Changes> {
    let schema = table.arrow_schema();
    let internal = |e: datafusion::arrow::error::ArrowError| FoamError::internal(format!("rows of an INSERT ... ON CONFLICT: {e}"));
    let width = schema.fields().len();
    let Some(first) = batches.first() else {
        return Ok(Changes { deletes: None, inserts: Vec::new(), count: 0 });
    };
    let all = concat_batches(&first.schema(), batches).map_err(internal)?;
    let hits = if upsert.update { 1 } else { upsert.arbiters.len() };
    let proposed_at = 1 + hits;
    let project = |from: usize| all.project(&(from..from + width).collect::<Vec<_>>()).map_err(internal);
    let proposed = project(proposed_at)?;
    // Every proposed row must be one the table could hold, conflicting or
    // not, as PostgreSQL checks a row's constraints before its arbiters.
    let stored = crate::write::store_strings(table, crate::write::cast_to(&schema, proposed.clone())?);
    crate::write::check_rows(table, &stored)?;
    crate::write::checks::ensure_planned(table, checks)?;
    if let Some(checks) = checks {
        checks.check(&stored)?;
    }
    let order = all.column(0).as_primitive::<UInt64Type>();
    let mut rows: Vec<usize> = (0..all.num_rows()).collect();
    rows.sort_by_key(|&row| order.value(row));
    let hit = |row: usize| (1..=hits).any(|at| all.column(at).as_boolean().value(row));

    // Each arbiter key of a row as bytes that compare as the values do; a
    // key with a NULL in it conflicts with nothing.
    let converters: Vec<(RowConverter, &Vec<usize>)> = upsert
        .arbiters
        .iter()
        .map(|key| {
            let fields = key.iter().map(|i| SortField::new(schema.field(*i).data_type().clone())).collect();
            RowConverter::new(fields).map(|converter| (converter, key)).map_err(internal)
        })
        .collect::<FoamResult<_>>()?;
    let keys_of = |batch: &RecordBatch| -> FoamResult<Vec<(Rows, Vec<ArrayRef>)>> {
        converters
            .iter()
            .map(|(converter, key)| {
                // In the table's types: a proposed value may be of another
                // unit or zone (a timestamptz in the session's zone).
                let columns: Vec<ArrayRef> = key
                    .iter()
                    .map(|i| {
                        let (column, data_type) = (batch.column(*i), schema.field(*i).data_type());
                        if column.data_type() == data_type { Ok(column.clone()) } else { arrow::compute::cast(column, data_type) }
                    })
                    .collect::<Result<_, _>>()
                    .map_err(internal)?;
                converter.convert_columns(&columns).map(|rows| (rows, columns)).map_err(internal)
            })
            .collect()
    };
    let key = |keys: &[(Rows, Vec<ArrayRef>)], arbiter: usize, row: usize| -> Option<Vec<u8>> {
        let (rows, columns) = &keys[arbiter];
        columns.iter().all(|c| c.is_valid(row)).then(|| rows.row(row).as_ref().to_vec())
    };
    let proposed_keys = keys_of(&proposed)?;
    // Keys of the rows this statement inserted or updated, per arbiter.
    let mut written: Vec<HashSet<Vec<u8>>> = vec![HashSet::new(); upsert.arbiters.len()];
    let mut inserted: Vec<u32> = Vec::new();
    let mut updated: Vec<u32> = Vec::new();
    if upsert.update {
        let old = project(proposed_at + width)?;
        let new = project(proposed_at + 2 * width)?;
        let new_keys = keys_of(&new)?;
        let allowed = all.column(proposed_at + 3 * width).as_boolean();
        for row in rows {
            let Some(proposed_key) = key(&proposed_keys, 0, row) else {
                inserted.push(row as u32);
                continue;
            };
            if written[0].contains(&proposed_key) {
                return Err(FoamError::Query {
                    message: "ON CONFLICT DO UPDATE command cannot affect row a second time".into(),
                    sqlstate: SqlState::CardinalityViolation,
                });
            }
            if !hit(row) {
                written[0].insert(proposed_key);
                inserted.push(row as u32);
            } else if allowed.is_valid(row) && allowed.value(row) {
                written[0].insert(proposed_key);
                written[0].extend(key(&new_keys, 0, row));
                updated.push(row as u32);
            }
        }
        let take = |batch: &RecordBatch, at: &[u32]| take_record_batch(batch, &UInt32Array::from(at.to_vec())).map_err(internal);
        let inserts = vec![take(&proposed, &inserted)?, take(&new, &updated)?];
        return Ok(Changes { deletes: Some(take(&old, &updated)?), inserts, count: (inserted.len() + updated.len()) as u64 });
    }
    for row in rows {
        let keys: Vec<Option<Vec<u8>>> = (0..upsert.arbiters.len()).map(|arbiter| key(&proposed_keys, arbiter, row)).collect();
        let ours = keys.iter().enumerate().any(|(arbiter, key)| key.as_ref().is_some_and(|key| written[arbiter].contains(key)));
        if hit(row) || ours {
            continue;
        }
        for (arbiter, key) in keys.into_iter().enumerate() {
            written[arbiter].extend(key);
        }
        inserted.push(row as u32);
    }
    let inserts = take_record_batch(&proposed, &UInt32Array::from(inserted.clone())).map_err(internal)?;
    Ok(Changes { deletes: None, inserts: vec![inserts], count: inserted.len() as u64 })
}

fn parse_type(sql: &str) -> FoamResult<datafusion::sql::sqlparser::ast::DataType> {
    let dialect = datafusion::sql::sqlparser::dialect::PostgreSqlDialect {};
    datafusion::sql::sqlparser::parser::Parser::new(&dialect)
        .try_with_sql(sql)
        .and_then(|mut parser| parser.parse_data_type())
        .map_err(|e| FoamError::internal(format!("the type {sql}: {e}")))
}
