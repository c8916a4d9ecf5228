//! Literals with a decimal point or an exponent are NUMERIC, as in
//! PostgreSQL: DataFusion's `parse_float_as_decimal` (set in
//! `distributed::base_config`) makes `0.1` a DECIMAL(1,1), so `0.1 + 0.2`
//! is `0.3` and `sum(price * 0.15)` is exact, where doubles gave
//! `0.30000000000000004`.
//!
//! Two kinds of literal DataFusion would make a decimal Arrow cannot
//! use are rewritten before planning:
//!
//! ```text
//!   1e5, 2.5E3, 5.    ─▶  CAST(100000 AS NUMERIC(6,0)), ...
//!                                           an exponent would give a negative scale
//!   1.5e-3            ─▶  0.0015
//!   1e308, 0.1e-300   ─▶  CAST('1e308' AS DOUBLE PRECISION)
//!                                           more digits than Decimal128's 38 (an
//!                                           integer of more than 38 digits too)
//! ```
//!
//! PostgreSQL's NUMERIC holds the second kind exactly; FoamDB's has 38
//! digits, so such a literal is a double, as every such literal was before.

use std::ops::ControlFlow;

use datafusion::arrow::datatypes::DECIMAL128_MAX_PRECISION;
use datafusion::sql::sqlparser::ast::{CastKind, DataType, ExactNumberInfo, Expr, Statement, Value, VisitMut, VisitorMut};

/// Rewrites the literals of `statement` a decimal cannot hold (see the
/// module documentation).
pub fn rewrite(statement: &mut Statement) {
    let _ = statement.visit(&mut Literals);
}

struct Literals;

impl VisitorMut for Literals {
    type Break = ();

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        let Expr::Value(value) = expr else { return ControlFlow::Continue(()) };
        let Value::Number(text, long) = &value.value else { return ControlFlow::Continue(()) };
        // An integer of up to 38 digits is DataFusion's BIGINT or DECIMAL(p,0).
        let integer = !text.contains(['.', 'e', 'E']);
        if integer && text.len() <= usize::from(DECIMAL128_MAX_PRECISION) {
            return ControlFlow::Continue(());
        }
        match plain_decimal(text) {
            Some(plain) if plain == *text => {}
            // Spelled out without a point, it would read as an integer.
            Some(plain) if !plain.contains('.') => {
                let precision = plain.len() as u64;
                *expr = Expr::Cast {
                    kind: CastKind::Cast,
                    expr: Box::new(Expr::Value(Value::Number(plain, *long).into())),
                    data_type: DataType::Numeric(ExactNumberInfo::PrecisionAndScale(precision, 0)),
                    array: false,
                    format: None,
                };
            }
            Some(plain) => value.value = Value::Number(plain, *long),
            None => {
                *expr = Expr::Cast {
                    kind: CastKind::Cast,
                    expr: Box::new(Expr::Value(Value::SingleQuotedString(text.clone()).into())),
                    data_type: DataType::DoublePrecision,
                    array: false,
                    format: None,
                }
            }
        }
        ControlFlow::Continue(())
    }
}

/// `text` (an unsigned number) written without an exponent, when it fits
/// a Decimal128: at most 38 digits, counting those after the point.
fn plain_decimal(text: &str) -> Option<String> {
    let (mantissa, exponent) = match text.split_once(['e', 'E']) {
        Some((mantissa, exponent)) => (mantissa, exponent.parse::<i64>().ok()?),
        None => (text, 0),
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if !whole.bytes().chain(fraction.bytes()).all(|b| b.is_ascii_digit()) || whole.len() + fraction.len() == 0 {
        return None;
    }
    // The value is `digits` × 10^-scale.
    let mut digits: String = whole.chars().chain(fraction.chars()).collect();
    let mut scale = i64::try_from(fraction.len()).ok()?.checked_sub(exponent)?;
    if scale < 0 {
        if digits.trim_start_matches('0').is_empty() {
            return Some("0".into());
        }
        digits.extend(std::iter::repeat_n('0', usize::try_from(-scale).ok().filter(|zeros| *zeros <= usize::from(DECIMAL128_MAX_PRECISION))?));
        scale = 0;
    }
    let significant = digits.trim_start_matches('0');
    let scale = usize::try_from(scale).ok()?;
    if significant.len().max(scale) > usize::from(DECIMAL128_MAX_PRECISION) {
        return None;
    }
    // At least one digit before the point, and `scale` after it.
    let padded = format!("{:0>width$}", significant, width = scale + 1);
    let (before, after) = padded.split_at(padded.len() - scale);
    Some(if scale == 0 { before.to_string() } else { format!("{before}.{after}") })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_a_decimal_cannot_hold_are_rewritten() {
        use datafusion::sql::sqlparser::{dialect::PostgreSqlDialect, parser::Parser};
        let sql = "SELECT 1e5, 5., 1.5e-3, 0.25, 12, 1e308, 1234567890123456789012345678901234567890";
        let mut statement = Parser::parse_sql(&PostgreSqlDialect {}, sql).unwrap().remove(0);
        rewrite(&mut statement);
        assert_eq!(
            statement.to_string(),
            "SELECT CAST(100000 AS NUMERIC(6,0)), CAST(5 AS NUMERIC(1,0)), 0.0015, 0.25, 12, CAST('1e308' AS DOUBLE PRECISION), \
             CAST('1234567890123456789012345678901234567890' AS DOUBLE PRECISION)"
        );
    }

    #[test]
    fn exponents_are_spelled_out_and_too_many_digits_refused() {
        for (text, expected) in [
            ("1e5", Some("100000")),
            ("2.5E3", Some("2500")),
            ("1.5e-3", Some("0.0015")),
            ("0.1", Some("0.1")),
            ("2.50", Some("2.50")),
            ("007.50", Some("7.50")),
            (".5", Some("0.5")),
            ("5.", Some("5")),
            ("0e10", Some("0")),
            ("1e37", Some("10000000000000000000000000000000000000")),
            ("1e38", None),
            ("1e308", None),
            ("1e-38", Some("0.00000000000000000000000000000000000001")),
            ("1e-39", None),
            ("0.1e-300", None),
            ("12345678901234567890123456789012345678.5", None),
            ("1234567890123456789012345678901234567.8", Some("1234567890123456789012345678901234567.8")),
        ] {
            assert_eq!(plain_decimal(text).as_deref(), expected, "{text}");
        }
    }
}
