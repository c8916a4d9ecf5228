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

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{Ident, Statement, TableAliasColumnDef, TableFactor, VisitMut, VisitorMut};

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
