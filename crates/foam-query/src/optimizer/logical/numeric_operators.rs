//! NUMERIC beside other numbers as in PostgreSQL: division keeps at least
//! 16 digits after the point, rounded, and a comparison with a float
//! compares floats.
//!
//! Division: Arrow's decimal division keeps 4 more digits than the dividend
//! has and truncates, so `1 / 3.0` was `0.3333` and `2 / 3.0` `0.6666`,
//! where PostgreSQL answers `0.33333333333333333333` and
//! `0.66666666666666666667`; a large dividend overflowed Arrow's
//! intermediate product besides.
//!
//! An analyzer rule, before DataFusion's type coercion (so that what is
//! above a quotient is typed for its type, not Arrow's), replaces each
//! division of a decimal by a decimal or an integer, or the reverse:
//!
//! ```text
//!   a / b  ─▶  foam_numeric_div(a, b, NULL::DECIMAL(p,s))    a or b: DECIMAL, the other DECIMAL or integer
//! ```
//!
//! PostgreSQL picks the scale per value (16 significant digits, at least
//! the operands' scales); an Arrow column has one scale, so `s` is the
//! larger of 16 and the operands' scales, less where the quotient's
//! integer digits (the dividend's, plus the divisor's fraction digits)
//! need the room in Decimal128's 38; `p` is those integer digits and `s`
//! (an integer literal counts its own digits, not BIGINT's 19). The
//! quotient is computed in 256 bits and rounded half away from zero, as
//! PostgreSQL rounds.
//!
//! Comparisons: a comparison of a float with a NUMERIC (`f < 1.5`, `f BETWEEN 0.5 AND
//! 1.5`, `f IN (0.5, 1.5)`) was made one of decimals by DataFusion's
//! coercion, so every float was cast to a decimal, slowly, and a float
//! beyond the decimal's digits failed the query (`f < 1e10` with `f` =
//! 1e300: numeric field overflow). PostgreSQL compares the two as floats;
//! the same rule casts the NUMERIC side to `double precision`.

use std::sync::Arc;

use arrow::array::{ArrayRef, AsArray, Decimal128Array};
use arrow::datatypes::{DECIMAL128_MAX_PRECISION, DataType, Decimal128Type, i256};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{DFSchema, DataFusionError, Result, ScalarValue};
use datafusion::logical_expr::expr::{BinaryExpr, ScalarFunction};
use datafusion::logical_expr::{ColumnarValue, Expr, ExprSchemable, LogicalPlan, Operator, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility};
use datafusion::optimizer::AnalyzerRule;
use foam_common::{FoamError, SqlState};

use super::named_rewrite::rewrite_expressions;

/// The function the rewrite calls; workers register it (`worker_udfs`).
pub const NUMERIC_DIV: &str = "foam_numeric_div";

/// Fewest digits after the point of a quotient (PostgreSQL's
/// `NUMERIC_MIN_SIG_DIGITS`, for a quotient between 1 and 9999).
const QUOTIENT_SCALE_MIN: i8 = 16;

/// The analyzer rule (see the module documentation).
#[derive(Debug, Default)]
pub struct NumericOperators;

impl AnalyzerRule for NumericOperators {
    fn name(&self) -> &str {
        "foam_numeric_operators"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        rewrite_expressions(plan, numeric_operator)
    }
}

fn numeric_operator(expr: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
    use Operator::*;
    match expr {
        Expr::BinaryExpr(BinaryExpr { left, op: Divide, right }) => numeric_division(left, right, schema),
        Expr::BinaryExpr(BinaryExpr { left, op: op @ (Eq | NotEq | Lt | LtEq | Gt | GtEq | IsDistinctFrom | IsNotDistinctFrom), right }) => {
            let (left, mut right, changed) = floats_beside(*left, vec![*right], schema);
            let right = right.pop().unwrap_or(Expr::Literal(ScalarValue::Null, None));
            let expr = Expr::BinaryExpr(BinaryExpr { left: Box::new(left), op, right: Box::new(right) });
            Ok(if changed { Transformed::yes(expr) } else { Transformed::no(expr) })
        }
        Expr::Between(between) => {
            let (expr, bounds, changed) = floats_beside(*between.expr, vec![*between.low, *between.high], schema);
            let [low, high]: [Expr; 2] = bounds.try_into().map_err(|_| DataFusionError::Internal("BETWEEN has two bounds".into()))?;
            let between = Expr::Between(datafusion::logical_expr::expr::Between::new(Box::new(expr), between.negated, Box::new(low), Box::new(high)));
            Ok(if changed { Transformed::yes(between) } else { Transformed::no(between) })
        }
        Expr::InList(in_list) => {
            let (expr, list, changed) = floats_beside(*in_list.expr, in_list.list, schema);
            let in_list = Expr::InList(datafusion::logical_expr::expr::InList::new(Box::new(expr), list, in_list.negated));
            Ok(if changed { Transformed::yes(in_list) } else { Transformed::no(in_list) })
        }
        other => Ok(Transformed::no(other)),
    }
}

/// `value` and `others` compared with it, each NUMERIC among them cast to
/// `double precision` when a float is among them; whether any was.
fn floats_beside(value: Expr, others: Vec<Expr>, schema: &DFSchema) -> (Expr, Vec<Expr>, bool) {
    let is = |expr: &Expr, float: bool| match expr.get_type(schema) {
        Ok(DataType::Float32 | DataType::Float64) => float,
        Ok(DataType::Decimal128(..) | DataType::Decimal256(..)) => !float,
        _ => false,
    };
    let float = is(&value, true) || others.iter().any(|other| is(other, true));
    let decimal = is(&value, false) || others.iter().any(|other| is(other, false));
    if !(float && decimal) {
        return (value, others, false);
    }
    let as_float = |expr: Expr| if is(&expr, false) { Expr::Cast(datafusion::logical_expr::expr::Cast::new(Box::new(expr), DataType::Float64)) } else { expr };
    (as_float(value), others.into_iter().map(as_float).collect(), true)
}

fn numeric_division(left: Box<Expr>, right: Box<Expr>, schema: &DFSchema) -> Result<Transformed<Expr>> {
    let types = (left.get_type(schema), right.get_type(schema));
    let numeric = match &types {
        (Ok(l @ DataType::Decimal128(..)), Ok(r)) | (Ok(l), Ok(r @ DataType::Decimal128(..))) => decimal_of(l).is_some() && decimal_of(r).is_some(),
        _ => false,
    };
    if !numeric {
        return Ok(Transformed::no(Expr::BinaryExpr(BinaryExpr { left, op: Operator::Divide, right })));
    }
    let (left, right) = (exact_literal(*left), exact_literal(*right));
    let (Some((p1, s1)), Some((_, s2))) = (left.get_type(schema).ok().as_ref().and_then(decimal_of), right.get_type(schema).ok().as_ref().and_then(decimal_of)) else {
        return Err(DataFusionError::Internal(format!("{NUMERIC_DIV}: operands of {left} / {right} are no longer numbers")));
    };
    let scale = quotient_scale(p1, s1, s2);
    // The quotient's integer digits are at most the dividend's plus the divisor's fraction digits.
    let precision = (i16::from(p1) - i16::from(s1) + i16::from(s2) + i16::from(scale)).clamp(i16::from(scale).max(1), i16::from(DECIMAL128_MAX_PRECISION)) as u8;
    let target = Expr::Literal(ScalarValue::Decimal128(None, precision, scale), None);
    Ok(Transformed::yes(Expr::ScalarFunction(ScalarFunction::new_udf(Arc::new(NumericDiv::udf()), vec![left, right, target]))))
}

/// An integer literal as a decimal of its own digits (`3` is DECIMAL(1,0),
/// where its BIGINT type would claim 19); any other expression as it is.
fn exact_literal(expr: Expr) -> Expr {
    let value = match &expr {
        Expr::Literal(ScalarValue::Int64(Some(v)), _) => i128::from(*v),
        Expr::Literal(ScalarValue::Int32(Some(v)), _) => i128::from(*v),
        Expr::Literal(ScalarValue::Int16(Some(v)), _) => i128::from(*v),
        _ => return expr,
    };
    let digits = value.unsigned_abs().checked_ilog10().map_or(1, |log| log + 1) as u8;
    Expr::Literal(ScalarValue::Decimal128(Some(value), digits, 0), None)
}

/// The precision and scale of a decimal or integer type, as a decimal.
fn decimal_of(data_type: &DataType) -> Option<(u8, i8)> {
    match data_type {
        DataType::Decimal128(precision, scale) => Some((*precision, *scale)),
        DataType::Int8 | DataType::UInt8 => Some((3, 0)),
        DataType::Int16 | DataType::UInt16 => Some((5, 0)),
        DataType::Int32 | DataType::UInt32 => Some((10, 0)),
        DataType::Int64 => Some((19, 0)),
        DataType::UInt64 => Some((20, 0)),
        _ => None,
    }
}

/// The scale of the quotient of a DECIMAL(p1,s1) by one of scale s2 (see
/// the module documentation).
fn quotient_scale(p1: u8, s1: i8, s2: i8) -> i8 {
    let max = DECIMAL128_MAX_PRECISION as i8;
    let integer_digits = (p1 as i8 - s1.max(0)).max(0) + s2.max(0);
    QUOTIENT_SCALE_MIN.max(s1).max(s2).min(max - integer_digits).max(s1.max(s2).min(max)).max(0)
}

/// `foam_numeric_div(a, b, NULL::DECIMAL(p,s))`: `a / b` as a
/// DECIMAL(p,s), rounded half away from zero.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct NumericDiv {
    signature: Signature,
}

impl NumericDiv {
    pub fn udf() -> ScalarUDF {
        ScalarUDF::new_from_impl(NumericDiv { signature: Signature::any(3, Volatility::Immutable) })
    }
}

impl ScalarUDFImpl for NumericDiv {
    fn name(&self) -> &str {
        NUMERIC_DIV
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        match arg_types {
            [dividend, divisor, target @ DataType::Decimal128(..)] if decimal_of(dividend).is_some() && decimal_of(divisor).is_some() => Ok(target.clone()),
            _ => Err(DataFusionError::Internal(format!("{NUMERIC_DIV} takes two decimals and a typed NULL DECIMAL, not {arg_types:?}"))),
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [dividend, divisor, target] = args.args.as_slice() else {
            return Err(DataFusionError::Internal(format!("{NUMERIC_DIV} takes three arguments")));
        };
        let (Some((p1, s1)), Some((p2, s2)), DataType::Decimal128(precision, scale)) =
            (decimal_of(&dividend.data_type()), decimal_of(&divisor.data_type()), target.data_type())
        else {
            return Err(DataFusionError::Internal(format!("{NUMERIC_DIV} of {} by {}", dividend.data_type(), divisor.data_type())));
        };
        let scalar = matches!((dividend, divisor), (ColumnarValue::Scalar(_), ColumnarValue::Scalar(_)));
        let rows = if scalar { 1 } else { args.number_rows };
        // Integers become decimals of scale 0.
        let left = arrow::compute::cast(&dividend.to_array(rows)?, &DataType::Decimal128(p1, s1))?;
        let right = arrow::compute::cast(&divisor.to_array(rows)?, &DataType::Decimal128(p2, s2))?;
        let (left, right) = (left.as_primitive::<Decimal128Type>(), right.as_primitive::<Decimal128Type>());
        // The quotient in units of 10^-scale is left × 10^shift / right.
        let shift = i32::from(scale) - i32::from(s1) + i32::from(s2);
        let quotients: Decimal128Array = left
            .iter()
            .zip(right.iter())
            .map(|(l, r)| match (l, r) {
                (Some(l), Some(r)) => quotient(l, r, shift, precision).map(Some),
                _ => Ok(None),
            })
            .collect::<Result<_>>()?;
        let quotients: ArrayRef = Arc::new(quotients.with_precision_and_scale(precision, scale)?);
        Ok(if scalar { ColumnarValue::Scalar(ScalarValue::try_from_array(&quotients, 0)?) } else { ColumnarValue::Array(quotients) })
    }
}

/// `left × 10^shift / right`, rounded half away from zero, within
/// `precision` digits.
fn quotient(left: i128, right: i128, shift: i32, precision: u8) -> Result<i128> {
    let error = |message: &str, sqlstate| DataFusionError::from(FoamError::Query { message: message.into(), sqlstate });
    if right == 0 {
        return Err(error("division by zero", SqlState::DivisionByZero));
    }
    let overflow = || error("numeric field overflow", SqlState::NumericValueOutOfRange);
    let ten = i256::from_i128(10);
    let power = |exponent: i32| ten.checked_pow(exponent.unsigned_abs()).ok_or_else(overflow);
    let (mut numerator, mut denominator) = (i256::from_i128(left), i256::from_i128(right));
    if shift >= 0 {
        numerator = numerator.checked_mul(power(shift)?).ok_or_else(overflow)?;
    } else {
        denominator = denominator.checked_mul(power(shift)?).ok_or_else(overflow)?;
    }
    let (whole, rest) = (numerator.wrapping_div(denominator), numerator.wrapping_rem(denominator));
    let half_or_more = rest.wrapping_abs().wrapping_mul(i256::from_i128(2)) >= denominator.wrapping_abs();
    let rounded = if half_or_more && rest != i256::ZERO {
        let away = if numerator.is_negative() != denominator.is_negative() { i256::MINUS_ONE } else { i256::ONE };
        whole.wrapping_add(away)
    } else {
        whole
    };
    let value = rounded.to_i128().ok_or_else(overflow)?;
    if value.unsigned_abs() >= 10u128.pow(u32::from(precision)) {
        return Err(overflow());
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotients_round_half_away_from_zero() {
        // 1 / 3.0 at scale 20: PostgreSQL's 0.33333333333333333333.
        assert_eq!(quotient(1, 30, 20 - 0 + 1, 38).unwrap(), 33_333_333_333_333_333_333);
        assert_eq!(quotient(2, 30, 20 - 0 + 1, 38).unwrap(), 66_666_666_666_666_666_667);
        assert_eq!(quotient(-2, 30, 21, 38).unwrap(), -66_666_666_666_666_666_667);
        assert_eq!(quotient(-2, -30, 21, 38).unwrap(), 66_666_666_666_666_666_667);
        // 10.0 / 4 = 2.5, at scale 16.
        assert_eq!(quotient(100, 4, 16 - 1, 38).unwrap(), 25_000_000_000_000_000);
        // A negative shift divides the divisor up.
        assert_eq!(quotient(10, 3, -1, 38).unwrap(), 0);
        assert_eq!(quotient(20, 3, -1, 38).unwrap(), 1);
    }

    #[test]
    fn zero_divisors_and_overflow_fail() {
        let zero = quotient(1, 0, 16, 38).unwrap_err().to_string();
        assert!(zero.contains("division by zero"), "{zero}");
        let big = quotient(i128::MAX / 10, 1, 16, 38).unwrap_err().to_string();
        assert!(big.contains("numeric field overflow"), "{big}");
    }

    #[test]
    fn the_scale_is_sixteen_digits_or_what_fits() {
        assert_eq!(quotient_scale(20, 0, 1), 16);
        assert_eq!(quotient_scale(25, 2, 1), 14);
        assert_eq!(quotient_scale(10, 2, 20), 20);
        assert_eq!(quotient_scale(38, 10, 10), 10);
    }
}
