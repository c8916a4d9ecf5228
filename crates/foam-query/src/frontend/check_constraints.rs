//! CHECK constraints in DDL: `CREATE TABLE t (a INT CHECK (a > 0), ...,
//! CONSTRAINT name CHECK (...))` and `ALTER TABLE t ADD [CONSTRAINT name]
//! CHECK (...)`.
//!
//! A constraint is kept in the catalog as its expression's SQL text and
//! named as PostgreSQL names it: `<table>_<column>_check` when it reads
//! one column, else `<table>_check`, with 1, 2, ... appended while the
//! name is taken. A subquery is refused (0A000) as in PostgreSQL; anything
//! else is decided when the session plans the expression ([`probe_query`]):
//! an unknown column (42703), a type other than boolean (42804), an
//! aggregate or window (42803). `write/checks.rs` evaluates the planned
//! expressions on every row a statement writes.

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{Expr, Statement};
use foam_catalog::model::CheckDef;
use foam_catalog::{ColumnDef, TableDef};
use foam_common::{FoamError, FoamResult, SqlState};

use crate::frontend::ddl::normalize_ident;

/// A CHECK of table `table` (with `columns`), named `named` or as
/// PostgreSQL would name it, avoiding the constraint names in `taken`.
pub fn check_def(table: &str, columns: &[ColumnDef], named: Option<String>, expr: &Expr, taken: &[String]) -> FoamResult<CheckDef> {
    let refused = datafusion::sql::sqlparser::ast::visit_expressions(expr, |e| match e {
        Expr::Subquery(_) | Expr::Exists { .. } | Expr::InSubquery { .. } => ControlFlow::Break("cannot use subquery in check constraint"),
        Expr::Function(function) if is_set_returning(&function.name.to_string()) => {
            ControlFlow::Break("set-returning functions are not allowed in check constraints")
        }
        _ => ControlFlow::Continue(()),
    });
    if let ControlFlow::Break(message) = refused {
        return Err(FoamError::Query { message: message.into(), sqlstate: SqlState::FeatureNotSupported });
    }
    let name = match named {
        Some(name) => name,
        None => {
            let base = match columns_read(expr, columns).as_slice() {
                [column] => format!("{table}_{column}_"),
                _ => format!("{table}_"),
            };
            (0..)
                .map(|pass| if pass == 0 { format!("{base}check") } else { format!("{base}check{pass}") })
                .find(|name| !taken.contains(name))
                .expect("an unused name")
        }
    };
    Ok(CheckDef { name, expr: expr.to_string(), validating: false })
}

/// PostgreSQL's set-returning functions FoamDB knows by name.
fn is_set_returning(name: &str) -> bool {
    let name = name.rsplit('.').next().unwrap_or(name).trim_matches('"').to_lowercase();
    matches!(name.as_str(), "generate_series" | "generate_subscripts" | "unnest" | "regexp_matches" | "json_each" | "json_array_elements" | "jsonb_each")
}

/// The table's columns `expr` reads, in the order they first appear.
fn columns_read(expr: &Expr, columns: &[ColumnDef]) -> Vec<String> {
    let mut read: Vec<String> = Vec::new();
    let _ = datafusion::sql::sqlparser::ast::visit_expressions(expr, |e| {
        let ident = match e {
            Expr::Identifier(ident) => Some(ident),
            Expr::CompoundIdentifier(parts) => parts.last(),
            _ => None,
        };
        if let Some(ident) = ident {
            let name = normalize_ident(&ident.value, ident.quote_style);
            if columns.iter().any(|c| c.name == name) && !read.contains(&name) {
                read.push(name);
            }
        }
        ControlFlow::<()>::Continue(())
    });
    read
}

/// The table's columns a stored CHECK reads (none if its text no longer parses).
pub fn columns_of(check: &CheckDef, columns: &[ColumnDef]) -> Vec<String> {
    match parse_expr(&check.expr) {
        Ok(expr) => columns_read(&expr, columns),
        Err(_) => Vec::new(),
    }
}

fn parse_expr(sql: &str) -> Result<Expr, datafusion::sql::sqlparser::parser::ParserError> {
    datafusion::sql::sqlparser::parser::Parser::new(&datafusion::sql::sqlparser::dialect::PostgreSqlDialect {}).try_with_sql(sql)?.parse_expr()
}

/// The names `table`'s constraints have.
pub fn taken_names(table: &TableDef) -> Vec<String> {
    table.unique_keys.iter().map(|k| k.name.clone()).chain(table.checks.iter().map(|c| c.name.clone())).collect()
}

/// `SELECT (check1) AS c0, ... FROM (VALUES (NULL, ...)) AS
/// table(columns)` over a row of `table`'s column types: the query the session plans to
/// type-check the expressions and to evaluate them (`write/checks.rs` takes
/// its select list). Strings are TEXT as the table stores them (a CHAR(n)
/// value without its padding).
pub fn probe_query(table: &str, columns: &[ColumnDef], checks: &[&str]) -> String {
    let quoted = |name: &str| format!("\"{}\"", name.replace('"', "\"\""));
    let typed: Vec<String> = columns.iter().map(|c| format!("CAST(NULL AS {})", c.sql_type.cast_name())).collect();
    let names: Vec<String> = columns.iter().map(|c| quoted(&c.name)).collect();
    let items: Vec<String> = checks.iter().enumerate().map(|(at, check)| format!("({check}) AS c{at}")).collect();
    format!("SELECT {} FROM (VALUES ({})) AS {}({})", items.join(", "), typed.join(", "), quoted(table), names.join(", "))
}

/// `SELECT (check1) AS c0, ... FROM table`: the query the session plans a
/// stored table's constraints in, so they read its columns as any query
/// does (a CHAR(n) column compared as CHAR).
pub fn table_query(table: &str, checks: &[&str]) -> String {
    let items: Vec<String> = checks.iter().enumerate().map(|(at, check)| format!("({check}) AS c{at}")).collect();
    format!("SELECT {} FROM \"{}\"", items.join(", "), table.replace('"', "\"\""))
}

/// `ALTER TABLE [IF EXISTS] t ADD [CONSTRAINT name] CHECK (expr) [NOT VALID]`.
#[derive(Debug, Clone)]
pub struct AddCheck {
    pub table: String,
    pub if_exists: bool,
    /// The constraint's name, if the statement gives one.
    pub name: Option<String>,
    pub expr: Expr,
    pub not_valid: bool,
}

/// The [`AddCheck`] `statement` is; `None` for another statement.
pub fn alter_add_check(statement: &Statement) -> FoamResult<Option<AddCheck>> {
    use datafusion::sql::sqlparser::ast::{AlterTableOperation, TableConstraint};
    let Statement::AlterTable(alter) = statement else { return Ok(None) };
    let [AlterTableOperation::AddConstraint { constraint: TableConstraint::Check(check), not_valid }] = alter.operations.as_slice() else {
        return Ok(None);
    };
    Ok(Some(AddCheck {
        table: crate::frontend::ddl::table_name(&alter.name)?,
        if_exists: alter.if_exists,
        name: check.name.as_ref().map(|n| normalize_ident(&n.value, n.quote_style)),
        expr: (*check.expr).clone(),
        not_valid: *not_valid,
    }))
}

/// `ALTER TABLE [IF EXISTS] t DROP CONSTRAINT [IF EXISTS] name`: the table,
/// IF EXISTS of the table, the constraint and IF EXISTS of it; `None` for
/// another statement. CASCADE is refused (nothing depends on a constraint
/// in FoamDB, but a foreign key would in PostgreSQL).
pub fn alter_drop_constraint(statement: &Statement) -> FoamResult<Option<(String, bool, String, bool)>> {
    use datafusion::sql::sqlparser::ast::AlterTableOperation;
    let Statement::AlterTable(alter) = statement else { return Ok(None) };
    let [AlterTableOperation::DropConstraint { if_exists, name, drop_behavior }] = alter.operations.as_slice() else { return Ok(None) };
    if drop_behavior.is_some_and(|b| b.to_string().eq_ignore_ascii_case("CASCADE")) {
        return Err(FoamError::FeatureNotSupported { feature: "DROP CONSTRAINT ... CASCADE".into() });
    }
    let constraint = normalize_ident(&name.value, name.quote_style);
    Ok(Some((crate::frontend::ddl::table_name(&alter.name)?, alter.if_exists, constraint, *if_exists)))
}

/// What `pg_get_constraintdef` shows for a CHECK: PostgreSQL parenthesizes
/// an operator expression once more (`CHECK ((a > 0))`).
pub fn constraint_def(check: &CheckDef) -> String {
    let bare = matches!(parse_expr(&check.expr), Ok(Expr::Identifier(_) | Expr::Function(_) | Expr::Nested(_) | Expr::Value(_)));
    match bare {
        true => format!("CHECK ({})", check.expr),
        false => format!("CHECK (({}))", check.expr),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use foam_catalog::SqlType;
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;

    fn expr(sql: &str) -> Expr {
        Parser::new(&PostgreSqlDialect {}).try_with_sql(sql).unwrap().parse_expr().unwrap()
    }

    fn columns(names: &[&str]) -> Vec<ColumnDef> {
        names.iter().map(|n| ColumnDef { name: n.to_string(), sql_type: SqlType::Int, nullable: true, default: None, identity: None }).collect()
    }

    #[test]
    fn checks_are_named_as_postgresql_names_them() {
        let cols = columns(&["a", "b", "Mixed"]);
        let name = |sql: &str, taken: &[&str]| {
            let taken: Vec<String> = taken.iter().map(|s| s.to_string()).collect();
            check_def("t", &cols, None, &expr(sql), &taken).unwrap().name
        };
        assert_eq!(name("a > 0", &[]), "t_a_check");
        assert_eq!(name("b > a AND a > 0", &[]), "t_check");
        assert_eq!(name("a > 0 AND a < 10", &[]), "t_a_check");
        assert_eq!(name("t.a < 3", &[]), "t_a_check");
        assert_eq!(name("\"Mixed\" > 1", &[]), "t_Mixed_check");
        assert_eq!(name("1 < 2", &[]), "t_check");
        assert_eq!(name("a > 0", &["t_a_check"]), "t_a_check1");
        assert_eq!(name("a > 0", &["t_a_check", "t_a_check1"]), "t_a_check2");
        let named = check_def("t", &cols, Some("positive".into()), &expr("a > 0"), &[]).unwrap();
        assert_eq!((named.name.as_str(), named.expr.as_str()), ("positive", "a > 0"));
    }

    #[test]
    fn a_subquery_is_refused() {
        let error = check_def("t", &columns(&["a"]), None, &expr("a IN (SELECT 1)"), &[]).unwrap_err();
        assert_eq!(error.sqlstate(), "0A000");
        assert!(check_def("t", &columns(&["a"]), None, &expr("EXISTS (SELECT 1)"), &[]).is_err());
        let srf = check_def("t", &columns(&["a"]), None, &expr("pg_catalog.generate_series(1, a) > 0"), &[]).unwrap_err();
        assert_eq!(srf.sqlstate(), "0A000");
    }

    #[test]
    fn constraint_defs_are_parenthesized_as_postgresql_shows_them() {
        let def = |expr: &str| constraint_def(&CheckDef { name: "c".into(), expr: expr.into(), validating: false });
        assert_eq!(def("a > 0"), "CHECK ((a > 0))");
        assert_eq!(def("flag"), "CHECK (flag)");
        assert_eq!(def("a IN (1, 2)"), "CHECK ((a IN (1, 2)))");
    }

    #[test]
    fn the_probe_reads_a_row_of_the_columns_types() {
        let mut cols = columns(&["a"]);
        cols.push(ColumnDef { name: "s".into(), sql_type: SqlType::Char { length: 3 }, nullable: true, default: None, identity: None });
        assert_eq!(
            probe_query("t", &cols, &["a > 0", "s <> 'x'"]),
            "SELECT (a > 0) AS c0, (s <> 'x') AS c1 FROM (VALUES (CAST(NULL AS integer), CAST(NULL AS text))) AS \"t\"(\"a\", \"s\")"
        );
    }
}
