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
//! shorter padded with NULLs, as PostgreSQL 10 and later run them.
//!
//! ```text
//!   SELECT generate_series(...)   ─▶  SELECT unnest(generate_series(...))   (of this select list, not its subqueries')
//! ```

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{Expr, Ident, Query, SelectItem, SetExpr, Statement, TableAliasColumnDef, TableFactor, VisitMut, VisitorMut};

use crate::frontend::array_subquery::call;

/// The table functions of one column named by their alias.
const SERIES_FUNCTIONS: [&str; 2] = ["generate_series", "range"];

/// `statement` with each such function's column named (see the module
/// documentation).
pub fn rewrite(statement: &mut Statement) {
    let _ = statement.visit(&mut Columns);
}

struct Columns;

impl VisitorMut for Columns {
    type Break = ();

    fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        series_rows(query.body.as_mut());
        ControlFlow::Continue(())
    }

    fn pre_visit_table_factor(&mut self, factor: &mut TableFactor) -> ControlFlow<()> {
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
fn series_rows(body: &mut SetExpr) {
    match body {
        SetExpr::Select(select) => {
            for item in &mut select.projection {
                if let SelectItem::UnnamedExpr(expr) | SelectItem::ExprWithAlias { expr, .. } = item {
                    let _ = expr.visit(&mut SeriesCalls { depth: 0 });
                }
            }
        }
        SetExpr::SetOperation { left, right, .. } => {
            series_rows(left);
            series_rows(right);
        }
        _ => {}
    }
}

/// Unnests the `generate_series` calls of one select item, outside its
/// subqueries (`depth` 0) and not already unnested.
struct SeriesCalls {
    depth: usize,
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

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        if self.depth > 0 {
            return ControlFlow::Continue(());
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
