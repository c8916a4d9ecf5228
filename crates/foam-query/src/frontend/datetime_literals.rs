//! Date and time types and literals written in an expression, read as
//! PostgreSQL reads them.
//!
//! `TIMESTAMP` and `TIMESTAMPTZ` in a cast or a typed literal are
//! microsecond timestamps, PostgreSQL's precision and that of every FoamDB
//! column. DataFusion's SQL planner makes them nanosecond timestamps, which
//! end in 2262: `'9999-12-31'::timestamp` (a common "valid until forever")
//! and `TIMESTAMP '0001-01-01'` were refused, and a column holding such a
//! value could not be compared with a typed literal, since the comparison
//! widened the column to nanoseconds. A precision written out
//! (`TIMESTAMP(3)`) is kept. Column types are read by `ddl.rs`, which
//! makes them microseconds already.
//!
//! `INTERVAL '...'` without a unit after the quotes is read in
//! PostgreSQL's input formats (`exec/interval_input.rs`), and written out
//! as months, days and microseconds, which DataFusion's parser reads; a
//! text that parser reads and PostgreSQL's formats do not is left to it.
//!
//! ```text
//!   CAST(x AS TIMESTAMP)            ─▶  CAST(x AS TIMESTAMP(6))
//!   TIMESTAMPTZ '2024-01-01 10:00'  ─▶  TIMESTAMP(6) WITH TIME ZONE '2024-01-01 10:00'
//!   x::timestamp[]                  ─▶  x::TIMESTAMP(6)[]
//!   INTERVAL '1 day 01:30:00'       ─▶  INTERVAL '0 mons 1 days 5400000000 microseconds'
//! ```

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{ArrayElemTypeDef, DataType, Expr, Statement, Value, ValueWithSpan, VisitMut, VisitorMut};
use foam_common::{FoamError, FoamResult};

use crate::exec::datetime_input::InputError;

/// The precision DataFusion reads as microseconds.
const MICROSECONDS: u64 = 6;

/// Gives every timestamp type of `statement`'s expressions without a
/// precision PostgreSQL's, and reads its interval literals (see the module
/// documentation).
pub fn rewrite(statement: &mut Statement) -> FoamResult<()> {
    match statement.visit(&mut Types) {
        ControlFlow::Break(error) => Err(error),
        ControlFlow::Continue(()) => Ok(()),
    }
}

struct Types;

impl VisitorMut for Types {
    type Break = FoamError;

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<FoamError> {
        match expr {
            Expr::Cast { data_type, .. } => in_microseconds(data_type),
            Expr::TypedString(typed) => in_microseconds(&mut typed.data_type),
            Expr::Interval(interval) if interval.leading_field.is_none() => return read_interval(&mut interval.value),
            _ => {}
        }
        ControlFlow::Continue(())
    }
}

/// An interval literal's quoted text in PostgreSQL's formats, written as
/// DataFusion reads it; a field out of range is PostgreSQL's 22015, a text
/// PostgreSQL's formats do not take is left to DataFusion.
fn read_interval(value: &mut Expr) -> ControlFlow<FoamError> {
    let Expr::Value(ValueWithSpan { value: Value::SingleQuotedString(text), .. }) = value else { return ControlFlow::Continue(()) };
    match crate::exec::interval_input::parse_interval(text) {
        Ok(interval) => *text = format!("{} mons {} days {} microseconds", interval.months, interval.days, interval.nanoseconds / 1000),
        Err(error @ (InputError::FieldRange | InputError::TypeRange)) => {
            return ControlFlow::Break(error.to_error(text, &arrow::datatypes::DataType::Interval(arrow::datatypes::IntervalUnit::MonthDayNano)));
        }
        Err(_) => {}
    }
    ControlFlow::Continue(())
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
    fn timestamps_become_microseconds_and_intervals_read_as_postgresql_reads_them() {
        let dialect = datafusion::sql::sqlparser::dialect::PostgreSqlDialect {};
        let mut statement = datafusion::sql::sqlparser::parser::Parser::parse_sql(
            &dialect,
            "SELECT CAST(a AS TIMESTAMP), b::timestamptz, TIMESTAMP '2024-01-01', c::timestamp[], CAST(d AS TIMESTAMP(3)), e::date, \
             INTERVAL '-1 days +01:30:00', INTERVAL '2' DAY, INTERVAL 'not one' FROM t",
        )
        .unwrap()
        .remove(0);
        rewrite(&mut statement).unwrap();
        assert_eq!(
            statement.to_string(),
            "SELECT CAST(a AS TIMESTAMP(6)), b::TIMESTAMPTZ(6), TIMESTAMP(6) '2024-01-01', c::TIMESTAMP(6)[], CAST(d AS TIMESTAMP(3)), e::DATE, \
             INTERVAL '0 mons -1 days 5400000000 microseconds', INTERVAL '2' DAY, INTERVAL 'not one' FROM t"
        );
    }
}
