//! A set-returning function in FROM names its one column as PostgreSQL
//! does: after the table alias, so `SELECT g FROM generate_series(1, 3) g`
//! and `SELECT d::date FROM generate_series(..., INTERVAL '1 day') d` read
//! the series. DataFusion named the column `value` (`"UNNEST(...)"` for
//! unnest) whatever the alias, so both failed with "No field named g".
//!
//! ```text
//!   generate_series(...) g   range(...) g   unnest(a) u   ─▶  ... g (g), u (u)
//! ```
//!
//! Without an alias the names stay DataFusion's: `generate_series` keeps
//! `value` (which FoamDB's examples and tests read) and `unnest` its
//! expression, where PostgreSQL names the column after the function (an
//! unnest of a struct, DataFusion's, has several columns). An alias with
//! its own column names, `WITH ORDINALITY` and an unnest of several
//! arrays are left as written.
//!
//! In a select list `generate_series` returns rows, as in PostgreSQL:
//! `SELECT generate_series(1, 3)` is three rows, and `SELECT id,
//! generate_series(1, n) FROM t` n rows for each row of t. DataFusion's
//! scalar `generate_series` answered one array instead (`{1,2,3}`), so
//! such an item is unnested; several in one list run side by side, the
//! shorter padded with NULLs, as PostgreSQL 10 and later run them; one
//! under a CASE or COALESCE is refused (0A000), as PostgreSQL refuses it.
//!
//! ```text
//!   SELECT generate_series(...)   ─▶  SELECT unnest(generate_series(...))   (of this select list, not its subqueries')
//! ```

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{Expr, FunctionArg, Ident, Query, SelectItem, SetExpr, Statement, TableAliasColumnDef, TableFactor, VisitMut, VisitorMut};

use foam_common::{FoamError, FoamResult, SqlState};

use crate::frontend::array_subquery::call;

/// The table functions of one column named by their alias.
const SERIES_FUNCTIONS: [&str; 2] = ["generate_series", "range"];

/// `statement` with each such function's column named (see the module
/// documentation).
pub fn rewrite(statement: &mut Statement) -> FoamResult<()> {
    let mut columns = Columns { error: None };
    let _ = statement.visit(&mut columns);
    columns.error.map_or(Ok(()), Err)
}

struct Columns {
    error: Option<FoamError>,
}

impl VisitorMut for Columns {
    type Break = ();

    fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        match series_rows(query.body.as_mut()) {
            Ok(()) => ControlFlow::Continue(()),
            Err(error) => {
                self.error = Some(error);
                ControlFlow::Break(())
            }
        }
    }

    fn pre_visit_table_factor(&mut self, factor: &mut TableFactor) -> ControlFlow<()> {
        if let Some(error) = lateral_call(factor) {
            self.error = Some(error);
            return ControlFlow::Break(());
        }
        // `LATERAL f(...)` reading no column is `f(...)`.
        if let TableFactor::Function { lateral: true, name, args, with_ordinality, alias } = factor {
            *factor = TableFactor::Table {
                name: name.clone(),
                alias: alias.clone(),
                args: Some(datafusion::sql::sqlparser::ast::TableFunctionArgs { args: args.clone(), settings: None }),
                with_hints: Vec::new(),
                version: None,
                with_ordinality: *with_ordinality,
                partitions: Vec::new(),
                json_path: None,
                sample: None,
                index_hints: Vec::new(),
            };
        }
        match factor {
            TableFactor::Table { name, args: Some(_), alias: Some(alias), with_ordinality: false, .. }
                if alias.columns.is_empty()
                    && name.0.last().and_then(|part| part.as_ident()).is_some_and(|f| SERIES_FUNCTIONS.iter().any(|s| s.eq_ignore_ascii_case(&f.value))) =>
            {
                alias.columns = vec![column(&alias.name)];
            }
            TableFactor::UNNEST { alias: Some(alias), array_exprs, with_offset: false, with_ordinality: false, .. }
                if array_exprs.len() == 1 && alias.columns.is_empty() =>
            {
                alias.columns = vec![column(&alias.name)];
            }
            _ => {}
        }
        ControlFlow::Continue(())
    }
}

fn column(name: &Ident) -> TableAliasColumnDef {
    TableAliasColumnDef { name: name.clone(), data_type: None }
}

/// Each `generate_series` call of the select lists of `body` (through set
/// operations) unnested: rows, not an array.
fn series_rows(body: &mut SetExpr) -> FoamResult<()> {
    match body {
        SetExpr::Select(select) => {
            for item in &mut select.projection {
                if let SelectItem::UnnamedExpr(expr) | SelectItem::ExprWithAlias { expr, .. } = item {
                    let mut calls = SeriesCalls { depth: 0, conditional: Vec::new(), error: None };
                    let _ = expr.visit(&mut calls);
                    if let Some(error) = calls.error {
                        return Err(error);
                    }
                }
            }
            Ok(())
        }
        SetExpr::SetOperation { left, right, .. } => {
            series_rows(left)?;
            series_rows(right)
        }
        _ => Ok(()),
    }
}

/// Unnests the `generate_series` calls of one select item, outside its
/// subqueries (`depth` 0) and not already unnested; one under a CASE or
/// COALESCE is PostgreSQL's 0A000.
struct SeriesCalls {
    depth: usize,
    /// The CASE and COALESCE expressions the visit is in (`CASE`, `COALESCE`).
    conditional: Vec<&'static str>,
    error: Option<FoamError>,
}

/// Which conditional expression `expr` is, if any.
fn conditional(expr: &Expr) -> Option<&'static str> {
    match expr {
        Expr::Case { .. } => Some("CASE"),
        Expr::Function(_) if called(expr, "coalesce").is_some() => Some("COALESCE"),
        _ => None,
    }
}

impl VisitorMut for SeriesCalls {
    type Break = ();

    fn pre_visit_query(&mut self, _query: &mut Query) -> ControlFlow<()> {
        self.depth += 1;
        ControlFlow::Continue(())
    }

    fn post_visit_query(&mut self, _query: &mut Query) -> ControlFlow<()> {
        self.depth -= 1;
        ControlFlow::Continue(())
    }

    fn pre_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        if self.depth == 0
            && let Some(kind) = conditional(expr)
        {
            self.conditional.push(kind);
        }
        ControlFlow::Continue(())
    }

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        if self.depth > 0 {
            return ControlFlow::Continue(());
        }
        if conditional(expr).is_some() {
            self.conditional.pop();
        }
        if let Some(kind) = self.conditional.last()
            && called(expr, "generate_series").is_some()
        {
            self.error = Some(FoamError::Query { message: format!("set-returning functions are not allowed in {kind}"), sqlstate: SqlState::FeatureNotSupported });
            return ControlFlow::Break(());
        }
        // `unnest(generate_series(...))` as written: its series was
        // unnested a moment ago (children first).
        let written = match called(expr, "unnest").as_deref() {
            Some([inner]) => matches!(called(inner, "unnest").as_deref(), Some([series]) if called(series, "generate_series").is_some()).then(|| (*inner).clone()),
            _ => None,
        };
        if let Some(inner) = written {
            *expr = inner;
        } else if called(expr, "generate_series").is_some() {
            *expr = call("unnest", vec![expr.clone()], Vec::new());
        }
        ControlFlow::Continue(())
    }
}

/// The arguments of `expr` when it is a plain call of `name`.
fn called<'a>(expr: &'a Expr, name: &str) -> Option<Vec<&'a Expr>> {
    use datafusion::sql::sqlparser::ast::{FunctionArg, FunctionArgExpr, FunctionArguments};
    let Expr::Function(function) = expr else { return None };
    if !called_name(function, name) || function.over.is_some() {
        return None;
    }
    let FunctionArguments::List(list) = &function.args else { return None };
    list.args.iter().map(|arg| match arg { FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Some(e), _ => None }).collect()
}

fn called_name(function: &datafusion::sql::sqlparser::ast::Function, name: &str) -> bool {
    matches!(function.name.0.as_slice(), [part] if part.as_ident().is_some_and(|f| f.value.eq_ignore_ascii_case(name)))
}

/// The refusal (0A000) of a function in FROM that reads a column, which
/// only another FROM item can give it (LATERAL, which DataFusion plans
/// for subqueries only): `FROM t, generate_series(1, t.n)` failed with
/// "Argument #2 must be an INTEGER or NULL, got Column(...)". One written
/// `LATERAL` that reads none is planned as without the word.
fn lateral_call(factor: &TableFactor) -> Option<FoamError> {
    let exprs: Vec<&Expr> = match factor {
        TableFactor::Table { args: Some(args), .. } => arguments(&args.args),
        TableFactor::Function { args, .. } => arguments(args),
        TableFactor::UNNEST { array_exprs, .. } => array_exprs.iter().collect(),
        _ => return None,
    };
    let name = match factor {
        TableFactor::Table { name, .. } | TableFactor::Function { name, .. } => name.to_string(),
        _ => "unnest".to_string(),
    };
    let column = exprs.into_iter().find_map(column_read);
    let column = column?;
    Some(FoamError::Query {
        message: format!("function {name} in FROM reads column {column} of another FROM item; LATERAL function calls are not supported: call it in the select list (SELECT ..., {name}(...) FROM ...)"),
        sqlstate: SqlState::FeatureNotSupported,
    })
}

/// The expressions among a function's arguments.
fn arguments(args: &[FunctionArg]) -> Vec<&Expr> {
    use datafusion::sql::sqlparser::ast::FunctionArgExpr;
    args.iter()
        .filter_map(|arg| match arg {
            FunctionArg::Unnamed(FunctionArgExpr::Expr(expr)) | FunctionArg::Named { arg: FunctionArgExpr::Expr(expr), .. } => Some(expr),
            _ => None,
        })
        .collect()
}

/// The first column `expr` reads, outside its subqueries.
fn column_read(expr: &Expr) -> Option<String> {
    use datafusion::sql::sqlparser::ast::Visit;
    /// Words that parse as identifiers but are values.
    const VALUE_WORDS: [&str; 11] = ["current_date", "current_time", "current_timestamp", "localtime", "localtimestamp", "current_user", "session_user", "user", "current_role", "current_catalog", "current_schema"];
    struct Reader {
        depth: usize,
        found: Option<String>,
    }
    impl datafusion::sql::sqlparser::ast::Visitor for Reader {
        type Break = ();
        fn pre_visit_query(&mut self, _query: &Query) -> ControlFlow<()> {
            self.depth += 1;
            ControlFlow::Continue(())
        }
        fn post_visit_query(&mut self, _query: &Query) -> ControlFlow<()> {
            self.depth -= 1;
            ControlFlow::Continue(())
        }
        fn pre_visit_expr(&mut self, expr: &Expr) -> ControlFlow<()> {
            if self.depth > 0 {
                return ControlFlow::Continue(());
            }
            self.found = match expr {
                Expr::Identifier(ident) if !VALUE_WORDS.iter().any(|w| w.eq_ignore_ascii_case(&ident.value)) || ident.quote_style.is_some() => Some(ident.to_string()),
                Expr::CompoundIdentifier(parts) => Some(parts.iter().map(ToString::to_string).collect::<Vec<_>>().join(".")),
                _ => None,
            };
            if self.found.is_some() { ControlFlow::Break(()) } else { ControlFlow::Continue(()) }
        }
    }
    let mut reader = Reader { depth: 0, found: None };
    let _ = expr.visit(&mut reader);
    reader.found
}
