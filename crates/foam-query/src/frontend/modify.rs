//! UPDATE and DELETE as a query of the rows they change.
//!
//! ```text
//!  DELETE FROM t [AS a] WHERE p        ──▶ SELECT a.* FROM t AS a WHERE p
//!  UPDATE t [AS a] SET c = e WHERE p   ──▶ SELECT a.*, <each column, or its new value e> FROM t AS a WHERE p
//!  DELETE FROM t AS a USING s WHERE p  ──▶ SELECT a.* FROM t AS a WHERE EXISTS (SELECT 1 FROM s WHERE p)
//!  UPDATE t AS a SET c = e FROM s WHERE p
//!      ──▶ SELECT a.*, <.., the one (SELECT e FROM s WHERE p), ..> FROM t AS a WHERE EXISTS (SELECT 1 FROM s WHERE p)
//! ```
//! The query's rows are the rows to delete (the first `n` columns, whole) and,
//! for UPDATE, the rows that replace them (the next `n`). Both go through the
//! write path as one transaction (`write/mod.rs`): each copy of a partition
//! finds the deleted rows by content (`foam-storage/src/row_set.rs`), and a new
//! row hashes to its own partition, so an UPDATE of the distribution key moves
//! the row. The query gives each target row once: `DELETE ... USING` and
//! `UPDATE ... FROM` find a target row's matches in a subquery, not a join
//! that would repeat the row once per match. A target row that matches
//! several rows of `FROM` fails the UPDATE with 21000 where PostgreSQL
//! takes one of them, "not readily predictable" which. A column name the
//! target and a `USING`/`FROM` table share is ambiguous there (42702), as in
//! PostgreSQL, not read as the subquery's own. The session takes `RETURNING`
//! off first (`returning.rs`); it is refused here if still there.
//! `INSERT ... ON CONFLICT` is a query of the proposed rows beside the
//! rows they conflict with (`upsert.rs`).
//! `TRUNCATE t` is `DELETE FROM t`: transactional, at a DELETE's cost;
//! `TRUNCATE t, u` is one such deletion per table, in one transaction.

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    Assignment, AssignmentTarget, Expr, FromTable, Statement, TableFactor, TableWithJoins, UpdateTableFromKind, visit_expressions,
};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;
use foam_catalog::{Catalog, TableDef};
use foam_common::{FoamError, FoamResult, SqlState};

use crate::frontend::ddl;

/// What an UPDATE or DELETE changes, found by the query in `select`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Modify {
    Delete { table: String },
    Update { table: String },
    /// `restart`: RESTART IDENTITY, the table's sequences start again.
    Truncate { table: String, restart: bool },
    /// INSERT ... ON CONFLICT (`upsert.rs`).
    Upsert(crate::frontend::upsert::Upsert),
}

impl Modify {
    pub fn table(&self) -> &str {
        match self {
            Modify::Delete { table } | Modify::Update { table } | Modify::Truncate { table, .. } => table,
            Modify::Upsert(upsert) => &upsert.table,
        }
    }

    pub fn tag(&self) -> &'static str {
        match self {
            Modify::Delete { .. } => "DELETE",
            Modify::Update { .. } => "UPDATE",
            Modify::Truncate { .. } => "TRUNCATE TABLE",
            Modify::Upsert(_) => "INSERT",
        }
    }
}

/// The query of the rows `statement` (an UPDATE or DELETE) changes, and what
/// it changes; `None` when `statement` is neither.
pub fn as_query(statement: &Statement, catalog: &Catalog) -> FoamResult<Option<(Statement, Modify)>> {
    let unsupported = |feature: &str| Err(FoamError::FeatureNotSupported { feature: feature.into() });
    match statement {
        Statement::Delete(delete) => {
            if delete.returning.is_some() {
                return unsupported("DELETE ... RETURNING here (the session reads RETURNING itself)");
            }
            if !delete.tables.is_empty() || !delete.order_by.is_empty() || delete.limit.is_some() || delete.output.is_some() {
                return unsupported("this form of DELETE");
            }
            let (FromTable::WithFromKeyword(from) | FromTable::WithoutKeyword(from)) = &delete.from;
            let [target] = from.as_slice() else { return unsupported("DELETE from several tables") };
            let (table, qualifier) = target_table(target, catalog)?;
            let filter = match &delete.using {
                Some(using) => format!(" WHERE {}", Matches::of(using, delete.selection.as_ref(), table, catalog)?.exist()),
                None => delete.selection.as_ref().map(|p| format!(" WHERE {p}")).unwrap_or_default(),
            };
            let table = table.name.clone();
            let query = format!("SELECT {qualifier}.* FROM {}{filter}", target.relation);
            Ok(Some((parse_query(&query)?, Modify::Delete { table })))
        }
        Statement::Update(update) => {
            if update.returning.is_some() {
                return unsupported("UPDATE ... RETURNING here (the session reads RETURNING itself)");
            }
            if !update.order_by.is_empty() || update.limit.is_some() || update.output.is_some() || update.or.is_some() {
                return unsupported("this form of UPDATE");
            }
            let (table, qualifier) = target_table(&update.table, catalog)?;
            let (new_row, filter) = match &update.from {
                Some(UpdateTableFromKind::AfterSet(from) | UpdateTableFromKind::BeforeSet(from)) => {
                    let matches = Matches::of(from, update.selection.as_ref(), table, catalog)?;
                    matches.refuse_subqueries(update.assignments.iter().map(|a| &a.value))?;
                    matches.check_unambiguous(update.assignments.iter().map(|a| &a.value))?;
                    (new_row(&update.assignments, table, &qualifier, |value| Ok(matches.value(value)))?, format!(" WHERE {}", matches.exist()))
                }
                None => (
                    new_row(&update.assignments, table, &qualifier, |value| Ok(value.to_string()))?,
                    update.selection.as_ref().map(|p| format!(" WHERE {p}")).unwrap_or_default(),
                ),
            };
            let table = table.name.clone();
            let query = format!("SELECT {qualifier}.*, {} FROM {}{filter}", new_row.join(", "), update.table.relation);
            Ok(Some((parse_query(&query)?, Modify::Update { table })))
        }
        Statement::Truncate(truncate) => {
            // Without foreign keys, CASCADE changes nothing more; RESTART IDENTITY
            // starts the table's sequences again once the TRUNCATE commits.
            // Several tables are emptied one by one in one transaction (the session's truncate_tables).
            let [target] = truncate.table_names.as_slice() else { return Ok(None) };
            if truncate.partitions.is_some() || truncate.on_cluster.is_some() {
                return unsupported("this form of TRUNCATE");
            }
            let table = ddl::table_name(&target.name)?;
            catalog.table(&table)?;
            let query = format!("SELECT * FROM {}", quoted(&table));
            let restart = matches!(truncate.identity, Some(datafusion::sql::sqlparser::ast::TruncateIdentityOption::Restart));
            Ok(Some((parse_query(&query)?, Modify::Truncate { table, restart })))
        }
        Statement::Insert(_) => match crate::frontend::upsert::as_query(statement, catalog)? {
            Some((query, upsert)) => Ok(Some((parse_query(&query)?, Modify::Upsert(upsert)))),
            None => Ok(None),
        },
        _ => Ok(None),
    }
}

/// The rows of `USING` (`FROM`) each target row matches, as subqueries
/// correlated with the target row.
struct Matches {
    /// `FROM <tables> WHERE <condition>`.
    source: String,
    /// Columns of both the target and a table of the list.
    shared: Vec<String>,
}

impl Matches {
    fn of(tables: &[TableWithJoins], condition: Option<&Expr>, target: &TableDef, catalog: &Catalog) -> FoamResult<Matches> {
        let list = tables.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(", ");
        let source = match condition {
            Some(condition) => format!("FROM {list} WHERE {condition}"),
            None => format!("FROM {list}"),
        };
        let mut shared = Vec::new();
        for listed in tables.iter().flat_map(|t| std::iter::once(&t.relation).chain(t.joins.iter().map(|j| &j.relation))) {
            if let TableFactor::Table { name, .. } = listed
                && let Ok(name) = ddl::table_name(name)
                && let Ok(other) = catalog.table(&name)
            {
                shared.extend(target.columns.iter().filter(|c| other.columns.iter().any(|o| o.name == c.name)).map(|c| c.name.clone()));
            }
        }
        let matches = Matches { source, shared };
        matches.refuse_subqueries(condition)?;
        matches.check_unambiguous(condition)?;
        Ok(matches)
    }

    /// 0A000 for a subquery in `exprs`: inside the subquery that finds a
    /// target row's matches it would be nested two levels below the target
    /// row, which DataFusion cannot correlate.
    fn refuse_subqueries<'a>(&self, exprs: impl IntoIterator<Item = &'a Expr>) -> FoamResult<()> {
        for expr in exprs {
            let nested = visit_expressions(expr, |e| match e {
                Expr::Subquery(_) | Expr::Exists { .. } | Expr::InSubquery { .. } => ControlFlow::Break(()),
                _ => ControlFlow::Continue(()),
            });
            if nested.is_break() {
                return Err(FoamError::FeatureNotSupported {
                    feature: "a subquery in the WHERE or SET of UPDATE ... FROM or DELETE ... USING (join its table in FROM or USING)".into(),
                });
            }
        }
        Ok(())
    }

    /// 42702 for an unqualified column name of both the target and a listed
    /// table in `exprs` (which hold no subquery): PostgreSQL cannot tell
    /// which is meant either.
    fn check_unambiguous<'a>(&self, exprs: impl IntoIterator<Item = &'a Expr>) -> FoamResult<()> {
        for expr in exprs {
            let found = visit_expressions(expr, |e| match e {
                Expr::Identifier(ident) if self.shared.contains(&ddl::normalize_ident(&ident.value, ident.quote_style)) => {
                    ControlFlow::Break(ident.value.clone())
                }
                _ => ControlFlow::Continue(()),
            });
            if let ControlFlow::Break(column) = found {
                return Err(FoamError::Query { message: format!("column reference \"{column}\" is ambiguous"), sqlstate: SqlState::AmbiguousColumn });
            }
        }
        Ok(())
    }

    /// The condition that the target row has a match.
    fn exist(&self) -> String {
        format!("EXISTS (SELECT 1 {})", self.source)
    }

    /// `value` of the target row's match (21000 if it has several), a
    /// scalar subquery made to aggregate as `scalar_subquery.rs` makes one.
    fn value(&self, value: &Expr) -> String {
        use crate::frontend::scalar_subquery::{ONE_VALUE, SINGLE_VALUE};
        format!("{ONE_VALUE}((SELECT {SINGLE_VALUE}({value}) {}))", self.source)
    }
}

/// The table an UPDATE or DELETE changes, and how the query names it.
fn target_table<'a>(target: &TableWithJoins, catalog: &'a Catalog) -> FoamResult<(&'a TableDef, String)> {
    if !target.joins.is_empty() {
        return Err(FoamError::FeatureNotSupported { feature: "UPDATE or DELETE of a join".into() });
    }
    let TableFactor::Table { name, alias, .. } = &target.relation else {
        return Err(FoamError::FeatureNotSupported { feature: "UPDATE or DELETE of something other than a table".into() });
    };
    let table = ddl::table_name(name)?;
    if catalog.views.contains_key(&table) {
        return Err(FoamError::FeatureNotSupported { feature: format!("changing rows through the view \"{table}\"") });
    }
    let table = catalog.table(&table)?;
    let qualifier = match alias {
        Some(alias) => alias.name.to_string(),
        None => name.to_string(),
    };
    Ok((table, qualifier))
}

/// The items of the row that replaces `qualifier`'s row of `table` under
/// `assignments` (an UPDATE's SET, or ON CONFLICT DO UPDATE's): each
/// column's assigned value as `value` writes it, cast as an INSERT's values
/// are so bad values fail alike, or the old value; named `foam_new_i`,
/// apart from the old row's columns, which keep the table's names.
pub(crate) fn new_row(
    assignments: &[Assignment],
    table: &TableDef,
    qualifier: &str,
    value: impl Fn(&Expr) -> FoamResult<String>,
) -> FoamResult<Vec<String>> {
    let mut values: Vec<Option<String>> = vec![None; table.columns.len()];
    for assignment in assignments {
        let AssignmentTarget::ColumnName(name) = &assignment.target else {
            return Err(FoamError::FeatureNotSupported { feature: "SET (a, b) = ... (assign each column)".into() });
        };
        let column = name.0.last().and_then(|part| part.as_ident()).map(|i| ddl::normalize_ident(&i.value, i.quote_style)).unwrap_or_default();
        let index = column_index(table, &column)?;
        if table.columns[index].identity == Some(foam_catalog::model::Identity::Always) {
            return Err(FoamError::Query {
                message: format!("column \"{column}\" can only be updated to DEFAULT (it is an identity column defined as GENERATED ALWAYS)"),
                sqlstate: SqlState::GeneratedAlways,
            });
        }
        let cast = format!("CAST(({}) AS {})", value(&assignment.value)?, table.columns[index].sql_type.cast_name());
        if values[index].replace(cast).is_some() {
            return Err(FoamError::Query { message: format!("multiple assignments to same column \"{column}\""), sqlstate: SqlState::SyntaxError });
        }
    }
    Ok(values
        .into_iter()
        .enumerate()
        .map(|(i, value)| {
            let value = value.unwrap_or_else(|| format!("{qualifier}.{}", quoted(&table.columns[i].name)));
            format!("{value} AS foam_new_{i}")
        })
        .collect())
}

/// Where `column` is in `table`; 42703 when it is not there.
pub(crate) fn column_index(table: &TableDef, column: &str) -> FoamResult<usize> {
    table.columns.iter().position(|c| c.name == column).ok_or_else(|| FoamError::Query {
        message: format!("column \"{column}\" of relation \"{}\" does not exist", table.name),
        sqlstate: SqlState::UndefinedColumn,
    })
}

/// `name` as a quoted SQL identifier.
pub fn quoted(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

pub(crate) fn parse_query(sql: &str) -> FoamResult<Statement> {
    let mut statements = Parser::parse_sql(&PostgreSqlDialect {}, sql).map_err(|e| FoamError::Syntax { message: e.to_string() })?;
    match statements.pop() {
        Some(statement) if statements.is_empty() => Ok(statement),
        _ => Err(FoamError::internal(format!("the query of a write is not one statement: {sql}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn catalog() -> Catalog {
        let command = foam_catalog::model::CatalogCommand::RegisterNode { id: Some(1), node_addr: "127.0.0.1:1".into(), sql_addr: "127.0.0.1:2".into() };
        let (catalog, _) = Catalog::default().apply(&command).unwrap();
        let create = ddl_command("CREATE TABLE t (k INT, \"Mixed\" TEXT, v INT) DISTRIBUTED BY (k) PARTITIONS 2");
        catalog.apply(&create).unwrap().0
    }

    fn ddl_command(sql: &str) -> foam_catalog::model::CatalogCommand {
        let tokens = crate::frontend::statement::split(sql).unwrap().remove(0);
        let crate::frontend::statement::FoamStatement::Sql { statement, distribution } = tokens.parse(64).unwrap() else { panic!() };
        ddl::create_table_command(&statement, distribution, &[]).unwrap()
    }

    fn query_of(sql: &str) -> FoamResult<Option<(Statement, Modify)>> {
        let statement = Parser::parse_sql(&PostgreSqlDialect {}, sql).unwrap().remove(0);
        as_query(&statement, &catalog())
    }

    #[test]
    fn update_and_delete_become_queries_of_old_and_new_rows() {
        let (query, modify) = query_of("DELETE FROM t WHERE v > 3").unwrap().unwrap();
        assert_eq!(query.to_string(), "SELECT t.* FROM t WHERE v > 3");
        assert_eq!(modify, Modify::Delete { table: "t".into() });
        let (query, _) = query_of("UPDATE t AS x SET v = v + 1, \"Mixed\" = 'a' WHERE k IN (SELECT 1)").unwrap().unwrap();
        assert_eq!(query.to_string(), "SELECT x.*, x.\"k\" AS foam_new_0, CAST(('a') AS TEXT) AS foam_new_1, CAST((v + 1) AS INTEGER) AS foam_new_2 FROM t AS x WHERE k IN (SELECT 1)");
        assert!(query_of("SELECT 1").unwrap().is_none());
        let (query, modify) = query_of("TRUNCATE TABLE t").unwrap().unwrap();
        assert_eq!((query.to_string(), modify.tag()), ("SELECT * FROM \"t\"".to_string(), "TRUNCATE TABLE"));
        assert!(query_of("TRUNCATE t, t").unwrap().is_none(), "several tables are the session's");
    }

    #[test]
    fn using_and_from_find_each_target_row_once_in_a_subquery() {
        let (query, _) = query_of("DELETE FROM t USING t AS u WHERE t.k = u.k AND u.v > t.v").unwrap().unwrap();
        assert_eq!(query.to_string(), "SELECT t.* FROM t WHERE EXISTS (SELECT 1 FROM t AS u WHERE t.k = u.k AND u.v > t.v)");
        let (query, _) = query_of("UPDATE t AS x SET v = u.v + 1 FROM t AS u WHERE x.k = u.k + 1").unwrap().unwrap();
        assert_eq!(
            query.to_string(),
            "SELECT x.*, x.\"k\" AS foam_new_0, x.\"Mixed\" AS foam_new_1, \
             CAST((foam_one_value((SELECT foam_single_value(u.v + 1) FROM t AS u WHERE x.k = u.k + 1))) AS INTEGER) AS foam_new_2 \
             FROM t AS x WHERE EXISTS (SELECT 1 FROM t AS u WHERE x.k = u.k + 1)"
        );
        for ambiguous in ["DELETE FROM t USING t AS u WHERE k = 1", "UPDATE t SET v = v FROM t AS u WHERE t.k = u.k"] {
            assert_eq!(query_of(ambiguous).unwrap_err().sqlstate(), "42702", "{ambiguous}");
        }
        assert_eq!(query_of("DELETE FROM t USING t AS u WHERE t.k IN (SELECT k FROM t AS w)").unwrap_err().sqlstate(), "0A000", "a subquery is refused");
    }

    #[test]
    fn forms_that_keep_returning_are_refused() {
        for sql in [
            "DELETE FROM t RETURNING k",
            "UPDATE t SET v = 1 RETURNING k",
            "INSERT INTO t VALUES (1) ON CONFLICT (k) DO NOTHING RETURNING k",
        ] {
            assert_eq!(query_of(sql).unwrap_err().sqlstate(), "0A000", "{sql}");
        }
        assert_eq!(query_of("UPDATE t SET v = 1, v = 2").unwrap_err().sqlstate(), "42601");
        assert_eq!(query_of("UPDATE t SET nope = 1").unwrap_err().sqlstate(), "42703");
        assert_eq!(query_of("DELETE FROM nope").unwrap_err().sqlstate(), "42P01");
    }
}
