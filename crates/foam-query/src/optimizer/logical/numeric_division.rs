//! NUMERIC division as PostgreSQL's: at least 16 digits after the point,
//! rounded. Arrow's decimal division keeps 4 more digits than the dividend
//! has and truncates, so `1 / 3.0` was `0.3333` and `2 / 3.0` `0.6666`,
//! where PostgreSQL answers `0.33333333333333333333` and
//! `0.66666666666666666667`; a large dividend overflowed Arrow's
//! intermediate product besides.
//!
//! An analyzer rule, after DataFusion's type coercion, replaces each
//! division of two decimals:
//!
//! ```text
//!   a / b  ─▶  foam_numeric_div(a, b, NULL::DECIMAL(38,s))    a, b: DECIMAL
//! ```
//!
//! PostgreSQL picks the scale per value (16 significant digits, at least
//! the operands' scales); an Arrow column has one scale, so `s` is the
//! larger of 16 and the operands' scales, less where the quotient's
//! integer digits (the dividend's, plus the divisor's fraction digits)
//! need the room in Decimal128's 38. The quotient is computed in 256 bits
//! and rounded half away from zero, as PostgreSQL rounds.

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
pub struct NumericDivision;

impl AnalyzerRule for NumericDivision {
    fn name(&self) -> &str {
        "foam_numeric_division"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        rewrite_expressions(plan, numeric_division)
    }
}

fn numeric_division(expr: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
    let Expr::BinaryExpr(BinaryExpr { left, op: Operator::Divide, right }) = expr else { return Ok(Transformed::no(expr)) };
    let (Ok(DataType::Decimal128(p1, s1)), Ok(DataType::Decimal128(_, s2))) = (left.get_type(schema), right.get_type(schema)) else {
        return Ok(Transformed::no(Expr::BinaryExpr(BinaryExpr { left, op: Operator::Divide, right })));
    };
    let target = Expr::Literal(ScalarValue::Decimal128(None, DECIMAL128_MAX_PRECISION, quotient_scale(p1, s1, s2)), None);
    Ok(Transformed::yes(Expr::ScalarFunction(ScalarFunction::new_udf(Arc::new(NumericDiv::udf()), vec![*left, *right, target]))))
}

/// The scale of the quotient of a DECIMAL(p1,s1) by one of scale s2 (see
/// the module documentation).
fn quotient_scale(p1: u8, s1: i8, s2: i8) -> i8 {
    let max = DECIMAL128_MAX_PRECISION as i8;
    let integer_digits = (p1 as i8 - s1.max(0)).max(0) + s2.max(0);
    QUOTIENT_SCALE_MIN.max(s1).max(s2).min(max - integer_digits).max(s1.max(s2).min(max)).max(0)
}

/// `foam_numeric_div(a, b, NULL::DECIMAL(38,s))`: `a / b` as a
/// DECIMAL(38,s), rounded half away from zero.
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
            [DataType::Decimal128(..), DataType::Decimal128(..), target @ DataType::Decimal128(..)] => Ok(target.clone()),
            _ => Err(DataFusionError::Internal(format!("{NUMERIC_DIV} takes two decimals and a typed NULL DECIMAL, not {arg_types:?}"))),
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [dividend, divisor, target] = args.args.as_slice() else {
            return Err(DataFusionError::Internal(format!("{NUMERIC_DIV} takes three arguments")));
        };
        let (DataType::Decimal128(_, s1), DataType::Decimal128(_, s2), DataType::Decimal128(precision, scale)) =
            (dividend.data_type(), divisor.data_type(), target.data_type())
        else {
            return Err(DataFusionError::Internal(format!("{NUMERIC_DIV} of {} by {}", dividend.data_type(), divisor.data_type())));
        };
        let scalar = matches!((dividend, divisor), (ColumnarValue::Scalar(_), ColumnarValue::Scalar(_)));
        let rows = if scalar { 1 } else { args.number_rows };
        let (left, right) = (dividend.to_array(rows)?, divisor.to_array(rows)?);
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
