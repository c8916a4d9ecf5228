//! `TIMESTAMP` and `TIMESTAMPTZ` written in an expression (a cast, a typed
//! literal) are microsecond timestamps, PostgreSQL's precision and that of
//! every FoamDB column. DataFusion's SQL planner makes them nanosecond
//! timestamps, which end in 2262: `'9999-12-31'::timestamp` (a common
//! "valid until forever") and `TIMESTAMP '0001-01-01'` were refused, and a
//! column holding such a value could not be compared with a typed literal,
//! since the comparison widened the column to nanoseconds.
//!
//! ```text
//!   CAST(x AS TIMESTAMP)            ─▶  CAST(x AS TIMESTAMP(6))
//!   TIMESTAMPTZ '2024-01-01 10:00'  ─▶  TIMESTAMP(6) WITH TIME ZONE '2024-01-01 10:00'
//!   x::timestamp[]                  ─▶  x::TIMESTAMP(6)[]
//! ```
//!
//! A precision written out (`TIMESTAMP(3)`) is kept. Column types are read
//! by `ddl.rs`, which makes them microseconds already.

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{ArrayElemTypeDef, DataType, Expr, Statement, VisitMut, VisitorMut};

/// The precision DataFusion reads as microseconds.
const MICROSECONDS: u64 = 6;

/// Gives every timestamp type of `statement`'s expressions without a
/// precision PostgreSQL's (see the module documentation).
pub fn rewrite(statement: &mut Statement) {
    let _ = statement.visit(&mut Types);
}

struct Types;

impl VisitorMut for Types {
    type Break = ();

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        match expr {
            Expr::Cast { data_type, .. } => in_microseconds(data_type),
            Expr::TypedString(typed) => in_microseconds(&mut typed.data_type),
            _ => {}
        }
        ControlFlow::Continue(())
    }
}

/// `data_type` (or its arrays' element type) with a timestamp's missing
/// precision made microseconds.
fn in_microseconds(data_type: &mut DataType) {
    match data_type {
        DataType::Timestamp(precision @ None, _) => *precision = Some(MICROSECONDS),
        DataType::Array(ArrayElemTypeDef::SquareBracket(element, _) | ArrayElemTypeDef::AngleBracket(element) | ArrayElemTypeDef::Parenthesis(element)) => {
            in_microseconds(element)
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_without_precision_become_microseconds() {
        let dialect = datafusion::sql::sqlparser::dialect::PostgreSqlDialect {};
        let mut statement = datafusion::sql::sqlparser::parser::Parser::parse_sql(
            &dialect,
            "SELECT CAST(a AS TIMESTAMP), b::timestamptz, TIMESTAMP '2024-01-01', c::timestamp[], CAST(d AS TIMESTAMP(3)), e::date FROM t",
        )
        .unwrap()
        .remove(0);
        rewrite(&mut statement);
        assert_eq!(
            statement.to_string(),
            "SELECT CAST(a AS TIMESTAMP(6)), b::TIMESTAMPTZ(6), TIMESTAMP(6) '2024-01-01', c::TIMESTAMP(6)[], CAST(d AS TIMESTAMP(3)), e::DATE FROM t"
        );
    }
}
