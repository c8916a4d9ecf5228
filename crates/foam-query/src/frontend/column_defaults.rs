//! Column defaults (`CREATE TABLE t (c T DEFAULT expr)`) in INSERT.
//!
//! The catalog keeps each default as the expression's SQL text. Before an
//! INSERT is planned, the statement is completed with them, so every later
//! step (ON CONFLICT, RETURNING, privileges, DataFusion's planner) sees an
//! ordinary INSERT naming every column that gets a value:
//!
//! ```text
//!  INSERT INTO t (a) VALUES (1), (DEFAULT)      t: a INT, b TEXT DEFAULT 'x'
//!  ──▶ INSERT INTO t ("a", "b") VALUES (1, 'x'), (NULL, 'x')
//!  INSERT INTO t (a) SELECT ...
//!  ──▶ INSERT INTO t ("a", "b") SELECT foam_source.c0, 'x' FROM (SELECT ...) AS foam_source(c0)
//!  INSERT INTO t DEFAULT VALUES
//!  ──▶ INSERT INTO t ("a", "b") VALUES (NULL, 'x')
//! ```
//!
//! `DEFAULT` in a VALUES row is the column's default, or NULL without one;
//! a VALUES list shorter than the table fills its first columns, as in
//! PostgreSQL. A default is evaluated per row, as the expression would be
//! in the statement. CREATE TABLE refuses a default that names a column,
//! holds a subquery, an aggregate or a window, or is not of a type the
//! column can take (`check`).

use datafusion::sql::sqlparser::ast::{Expr, Ident, ObjectName, Parens, Query, SelectItem, SetExpr, Statement, TableObject, Value, Values};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;
use foam_catalog::model::Identity;
use foam_catalog::{Catalog, TableDef};
use foam_common::{FoamError, FoamResult, SqlState};

use crate::frontend::ddl;
use crate::frontend::upsert::target_columns;

/// The alias of an INSERT's query when defaults are added beside its columns.
const SOURCE: &str = "foam_source";

/// Completes an INSERT into a table with the columns it leaves to their
/// defaults (see the module documentation). Any other statement, and an
/// INSERT the planner will refuse (an unknown table or column), is left
/// as it is. True when defaults were put in.
pub fn fill(statement: &mut Statement, catalog: &Catalog) -> FoamResult<bool> {
    if let Statement::Explain { statement: explained, .. } = statement {
        return fill(explained, catalog);
    }
    let Statement::Insert(insert) = statement else { return Ok(false) };
    let TableObject::TableName(name) = &insert.table else { return Ok(false) };
    let Ok(table) = ddl::table_name(name).and_then(|name| catalog.table(&name).cloned()) else { return Ok(false) };
    let Ok(mut targets) = target_columns(insert, &table) else { return Ok(false) };
    let Some(source) = insert.source.as_mut() else {
        // DEFAULT VALUES: every column its default.
        let row = (0..table.columns.len()).map(|i| default_of(&table, i)).collect::<FoamResult<Vec<_>>>()?;
        insert.columns = names(&table, 0..table.columns.len());
        insert.source = Some(Box::new(values_query(vec![row])));
        return Ok(true);
    };
    // Without a column list, a source narrower than the table fills the
    // first columns, as in PostgreSQL; the width of `SELECT *` is not known here.
    let width = match source.body.as_ref() {
        SetExpr::Values(values) => values.rows.first().map(|row| row.content.len()),
        SetExpr::Select(select) if !select.projection.iter().any(|item| matches!(item, SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..))) => {
            Some(select.projection.len())
        }
        _ => None,
    };
    match width {
        Some(width) if width > targets.len() => return Ok(false), // the planner's error
        Some(width) if insert.columns.is_empty() => targets.truncate(width),
        None if insert.columns.is_empty() => {
            // A query for every column, in order.
            check_generated_always(&table, &targets, source)?;
            return Ok(false);
        }
        _ => {}
    }
    check_generated_always(&table, &targets, source)?;
    let has_defaults = table.columns.iter().any(|c| c.default.is_some());
    match source.body.as_mut() {
        SetExpr::Values(values) => {
            if values.rows.iter().any(|row| Some(row.content.len()) != width) {
                return Ok(false); // the planner's error
            }
            let uses_default = values.rows.iter().flat_map(|row| &row.content).any(is_default);
            if !has_defaults && !uses_default {
                check_not_null(&table, &targets, &values.rows)?;
                return Ok(name_narrow_targets(insert, &table, &targets));
            }
            let omitted = omitted(&table, &targets);
            for row in &mut values.rows {
                for (value, &column) in row.content.iter_mut().zip(&targets) {
                    if is_default(value) {
                        *value = default_of(&table, column)?;
                    }
                }
                for &column in &omitted {
                    row.content.push(default_of(&table, column)?);
                }
            }
            let targets: Vec<usize> = targets.iter().chain(&omitted).copied().collect();
            check_not_null(&table, &targets, &values.rows)?;
            insert.columns = names(&table, targets);
        }
        _ => {
            let omitted = omitted(&table, &targets);
            if omitted.is_empty() {
                return Ok(name_narrow_targets(insert, &table, &targets));
            }
            let inner = (0..targets.len()).map(|i| format!("c{i}")).collect::<Vec<_>>();
            let mut items: Vec<String> = inner.iter().map(|c| format!("{SOURCE}.{c}")).collect();
            for &column in &omitted {
                items.push(default_of(&table, column)?.to_string());
            }
            let sql = format!("SELECT {} FROM ({source}) AS {SOURCE}({})", items.join(", "), inner.join(", "));
            *source = Box::new(parse_query(&sql)?);
            insert.columns = names(&table, targets.iter().chain(&omitted).copied());
        }
    }
    Ok(true)
}

/// 428C9 for a value given to a `GENERATED ALWAYS` identity column (only
/// `DEFAULT` is allowed, as in PostgreSQL without `OVERRIDING SYSTEM VALUE`).
fn check_generated_always(table: &TableDef, targets: &[usize], source: &Query) -> FoamResult<()> {
    for (position, &column) in targets.iter().enumerate() {
        let def = &table.columns[column];
        if def.identity != Some(Identity::Always) {
            continue;
        }
        let all_default = match source.body.as_ref() {
            SetExpr::Values(values) => values.rows.iter().all(|row| row.content.get(position).is_none_or(is_default)),
            _ => false,
        };
        if !all_default {
            return Err(FoamError::Query {
                message: format!("cannot insert a non-DEFAULT value into column \"{}\" (it is an identity column defined as GENERATED ALWAYS)", def.name),
                sqlstate: SqlState::GeneratedAlways,
            });
        }
    }
    Ok(())
}

/// 23502 for a NULL literal in a VALUES row for a NOT NULL column, named as
/// PostgreSQL names it (DataFusion's planner refused it naming `column1`).
fn check_not_null(table: &TableDef, targets: &[usize], rows: &[Parens<Vec<Expr>>]) -> FoamResult<()> {
    for row in rows {
        for (value, &column) in row.content.iter().zip(targets) {
            let column = &table.columns[column];
            if !column.nullable && matches!(value, Expr::Value(v) if v.value == Value::Null) {
                return Err(FoamError::Query {
                    message: format!("null value in column \"{}\" of relation \"{}\" violates not-null constraint", column.name, table.name),
                    sqlstate: SqlState::NotNullViolation,
                });
            }
        }
    }
    Ok(())
}

/// An INSERT without a column list whose source is narrower than the table
/// names the columns it fills (the rest are NULL); true when it did.
fn name_narrow_targets(insert: &mut datafusion::sql::sqlparser::ast::Insert, table: &TableDef, targets: &[usize]) -> bool {
    let narrow = insert.columns.is_empty() && targets.len() < table.columns.len();
    if narrow {
        insert.columns = names(table, targets.iter().copied());
    }
    narrow
}

/// The parsed default of a column, NULL without one.
fn default_of(table: &TableDef, column: usize) -> FoamResult<Expr> {
    match &table.columns[column].default {
        Some(text) => parse_expr(text),
        None => Ok(Expr::Value(Value::Null.into())),
    }
}

/// Columns the INSERT does not name that have a default (the others are NULL anyway).
fn omitted(table: &TableDef, targets: &[usize]) -> Vec<usize> {
    (0..table.columns.len()).filter(|i| !targets.contains(i) && table.columns[*i].default.is_some()).collect()
}

fn names(table: &TableDef, columns: impl IntoIterator<Item = usize>) -> Vec<ObjectName> {
    columns.into_iter().map(|i| ObjectName::from(vec![Ident::with_quote('"', table.columns[i].name.clone())])).collect()
}

/// `DEFAULT` in a VALUES row.
fn is_default(value: &Expr) -> bool {
    matches!(value, Expr::Identifier(ident) if ident.quote_style.is_none() && ident.value.eq_ignore_ascii_case("default"))
}

fn values_query(rows: Vec<Vec<Expr>>) -> Query {
    let values = SetExpr::Values(Values { explicit_row: false, value_keyword: false, rows: rows.into_iter().map(Parens::with_empty_span).collect() });
    let mut query = parse_query("VALUES (NULL)").expect("a VALUES query parses");
    *query.body = values;
    query
}

fn parse_query(sql: &str) -> FoamResult<Query> {
    match crate::frontend::modify::parse_query(sql)? {
        Statement::Query(query) => Ok(*query),
        _ => Err(FoamError::internal(format!("not a query: {sql}"))),
    }
}

/// A default's SQL text, parsed.
pub fn parse_expr(sql: &str) -> FoamResult<Expr> {
    Parser::new(&PostgreSqlDialect {})
        .try_with_sql(sql)
        .and_then(|mut parser| parser.parse_expr())
        .map_err(|e| FoamError::Syntax { message: format!("column default {sql}: {e}") })
}

/// 0A000 for a default PostgreSQL refuses as well: one that names a column
/// or holds a subquery (aggregates and windows are refused when the
/// default's type is checked, as they have no rows to run over).
pub fn check(column: &str, default: &Expr) -> FoamResult<()> {
    use std::ops::ControlFlow;
    let found = datafusion::sql::sqlparser::ast::visit_expressions(default, |e| match e {
        Expr::Identifier(_) | Expr::CompoundIdentifier(_) => ControlFlow::Break("a column reference"),
        Expr::Subquery(_) | Expr::Exists { .. } | Expr::InSubquery { .. } => ControlFlow::Break("a subquery"),
        _ => ControlFlow::Continue(()),
    });
    match found {
        ControlFlow::Break(what) => Err(FoamError::Query {
            message: format!("cannot use {what} in the default of column \"{column}\""),
            sqlstate: SqlState::FeatureNotSupported,
        }),
        ControlFlow::Continue(()) => Ok(()),
    }
}
