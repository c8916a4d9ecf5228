//! PostgreSQL's rounding for casts to integer and numeric types, its
//! `timestamptz::timestamp` (local time, not UTC's) and its text of a
//! timestamp, a float, an interval or an array (`exec/pg_text.rs`).
//!
//! To an integer type PostgreSQL rounds:
//! a numeric half away from zero (`CAST(2.5 AS INT)` is 3, `-2.5` gives -3),
//! a float half to even, as C's `rint` (`CAST(2.5::float8 AS INT)` is 2,
//! `3.5` gives 4). DataFusion truncates both (2 and 2), so every such cast,
//! and every comparison or join on one, answered differently from
//! PostgreSQL.
//!
//! To a numeric (DECIMAL) type PostgreSQL converts a float through its
//! decimal digits, 15 significant ones for a `double precision` and 6 for a
//! `real`, and rounds those half away from zero. Arrow multiplies the binary
//! value and rounds that, so `CAST(1.005 AS NUMERIC(12,2))` (a float
//! literal in DataFusion), and `INSERT` of 1.005 into a NUMERIC(12,2)
//! column, gave 1.00 where PostgreSQL gives 1.01.
//!
//! An analyzer rule, after DataFusion's type coercion (which adds the casts
//! of an `INSERT`), puts `foam_round_for_int(x)` under each cast of a
//! decimal or floating point value to an integer type, so that the cast only
//! converts an integral value, and replaces each cast of a float to a
//! decimal by `foam_numeric_of_float`. Column names are kept, so the rewrite
//! is invisible but for the answer.
//!
//! ```text
//!   CAST(x AS INT)            ─▶  CAST(foam_round_for_int(x) AS INT)      x: DECIMAL(p,s), s > 0, or FLOAT
//!   CAST(x AS DECIMAL(p,s))   ─▶  foam_numeric_of_float(x, NULL::DECIMAL(p,s))   x: FLOAT
//!   CAST(x AS TIMESTAMP)      ─▶  CAST(to_local_time(x) AS TIMESTAMP)     x: TIMESTAMPTZ
//!   CAST(x AS TIMESTAMPTZ z)  ─▶  CAST(foam_at_time_zone(x, session) AS TIMESTAMPTZ z)   x: TIMESTAMP or DATE, session not UTC
//!   CAST(x AS TEXT)           ─▶  foam_pg_text(x)                         x: TIMESTAMP[TZ], FLOAT, INTERVAL, array, ...
//!   ceil(x) floor(x) trunc(x) ─▶  CAST(... AS DECIMAL(p-s+1, 0))          x: DECIMAL(p,s), s > 0 (trunc(x, n): scale n)
//! ```

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Decimal128Array};
use arrow::compute::kernels::arity::{try_unary, unary};
use arrow::datatypes::{DataType, Decimal128Type, Float32Type, Float64Type};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{DFSchema, DataFusionError, Result, ScalarValue};
use datafusion::logical_expr::expr::{Cast, ScalarFunction};
use datafusion::logical_expr::{ColumnarValue, Expr, ExprSchemable, LogicalPlan, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility};
use datafusion::optimizer::AnalyzerRule;
use foam_common::{FoamError, SqlState};

use super::named_rewrite::rewrite_expressions;
use crate::exec::function_values::per_value;

/// `ceil`, `floor` or `trunc` of one NUMERIC with digits after the point
/// made a NUMERIC of none, and `trunc(x, n)` one of scale n, PostgreSQL's
/// types for them (Arrow's keeps the argument's scale: `trunc(1.55)` was
/// `1.00`, PostgreSQL's `1`); `expr` back for any other expression.
fn integral(expr: Expr, schema: &DFSchema) -> Result<Result<Expr, Expr>> {
    let Expr::ScalarFunction(call) = &expr else { return Ok(Err(expr)) };
    // `trunc(x, n)`, n a constant from 0 up, is a NUMERIC of scale n.
    let places = match call.args.as_slice() {
        [_, Expr::Literal(places, _)] if call.name() == "trunc" => match places.cast_to(&DataType::Int64) {
            Ok(ScalarValue::Int64(Some(places))) if (0..=38).contains(&places) => Some(places as i8),
            _ => return Ok(Err(expr)),
        },
        [_] => None,
        _ => return Ok(Err(expr)),
    };
    let integral_function = matches!(call.name(), "ceil" | "floor" | "trunc");
    let Ok(DataType::Decimal128(precision, scale)) = call.args[0].get_type(schema) else { return Ok(Err(expr)) };
    if !integral_function || scale <= 0 || places == Some(scale) {
        return Ok(Err(expr));
    }
    if let Some(places) = places {
        // Past Decimal128's 38 digits the cast would fail: Arrow's answer
        // (the argument as it is) stays.
        let digits = i16::from(precision) - i16::from(scale) + i16::from(places);
        if digits > 38 {
            return Ok(Err(expr));
        }
        let digits = digits.max(1) as u8;
        let field = Arc::new(arrow::datatypes::Field::new("", DataType::Decimal128(digits.max(places as u8), places), true));
        return Ok(Ok(Expr::Cast(Cast { expr: Box::new(expr), field })));
    }
    // Its integer digits, and one for a ceiling or floor that carries
    // (99.9 to 100), which Arrow's kernel computes in the argument's type:
    // the argument gets the digit too (it failed with "Decimal overflow").
    let digits = (i16::from(precision) - i16::from(scale) + 1).clamp(1, 38) as u8;
    let decimal = |precision: u8, scale: i8| Arc::new(arrow::datatypes::Field::new("", DataType::Decimal128(precision, scale), true));
    let Expr::ScalarFunction(mut call) = expr else { return Ok(Err(expr)) };
    if precision < 38 && call.name() != "trunc" {
        let widened = Expr::Cast(Cast { expr: Box::new(call.args[0].clone()), field: decimal(precision + 1, scale) });
        call.args = vec![widened];
    }
    Ok(Ok(Expr::Cast(Cast { expr: Box::new(Expr::ScalarFunction(call)), field: decimal(digits, 0) })))
}

/// The functions the rewrite calls; workers register them (`worker_udfs`).
pub const ROUND_FOR_INT: &str = "foam_round_for_int";
pub const NUMERIC_OF_FLOAT: &str = "foam_numeric_of_float";

/// The significant digits PostgreSQL keeps of a `double precision` (C's
/// `DBL_DIG`) and of a `real` (`FLT_DIG`) when it makes a numeric of one.
const DOUBLE_DIGITS: usize = 15;
const REAL_DIGITS: usize = 6;

/// The analyzer rule (see the module documentation).
#[derive(Debug, Default)]
pub struct PostgresCasts;

impl AnalyzerRule for PostgresCasts {
    fn name(&self) -> &str {
        "foam_postgres_casts"
    }

    fn analyze(&self, plan: LogicalPlan, config: &ConfigOptions) -> Result<LogicalPlan> {
        let zone = config.execution.time_zone.as_deref();
        rewrite_expressions(plan, |expr, schema| postgres_cast(expr, schema, zone))
    }
}

/// `zone` is the session's TimeZone.
fn postgres_cast(expr: Expr, schema: &DFSchema, zone: Option<&str>) -> Result<Transformed<Expr>> {
    let expr = match integral(expr, schema)? {
        Ok(cast) => return Ok(Transformed::yes(cast)),
        Err(expr) => expr,
    };
    let Expr::Cast(Cast { expr: inner, field }) = expr else { return Ok(Transformed::no(expr)) };
    let inner_type = inner.get_type(schema);
    // A timestamp or date made a timestamptz is local time in the
    // session's zone (an INSERT into a timestamptz column casts to the
    // column's UTC); Arrow reads it in the target's zone. Outside UTC the
    // instant is `foam_at_time_zone`'s, not a cast's: DataFusion's
    // simplifier takes such a cast for a relabelling and moves it to the
    // other side of a comparison, where it compares the local time with
    // UTC's (`ts::timestamptz >= now()` in New York missed five hours).
    if let (DataType::Timestamp(unit, Some(target)), Ok(DataType::Timestamp(_, None) | DataType::Date32 | DataType::Date64)) = (field.data_type(), &inner_type) {
        let reading = zone.unwrap_or(target.as_ref());
        if !matches!(reading, "UTC" | "+00:00") {
            let zone = Expr::Literal(ScalarValue::Utf8(Some(reading.to_string())), None);
            let instant = Expr::ScalarFunction(ScalarFunction::new_udf(Arc::new(crate::exec::at_time_zone::at_time_zone_udf()), vec![*inner, zone]));
            return Ok(Transformed::yes(Expr::Cast(Cast { expr: Box::new(instant), field })));
        }
        if target.as_ref() != reading {
            let cast = |expr: Expr, data_type: DataType| Expr::Cast(Cast { expr: Box::new(expr), field: Arc::new(arrow::datatypes::Field::new("", data_type, true)) });
            let local = cast(cast(*inner, DataType::Timestamp(*unit, None)), DataType::Timestamp(*unit, Some(reading.into())));
            return Ok(Transformed::yes(Expr::Cast(Cast { expr: Box::new(local), field })));
        }
    }
    // An int2vector or oidvector made text is PostgreSQL's `1 3`, not
    // Arrow's `[1, 3]` (SQLAlchemy 1.4 reads `indkey::varchar` so).
    if matches!(field.data_type(), DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8)
        && let Ok((_, source)) = inner.to_field(schema)
        && matches!(source.metadata().get(crate::exec::json_build::PG_TYPE_METADATA).map(String::as_str), Some("int2vector" | "oidvector"))
    {
        let space = Expr::Literal(ScalarValue::Utf8(Some(" ".into())), None);
        let text = Expr::ScalarFunction(ScalarFunction::new_udf(datafusion::functions_nested::string::array_to_string_udf(), vec![*inner, space]));
        return Ok(Transformed::yes(Expr::Cast(Cast { expr: Box::new(text), field })));
    }
    // A timestamp, float, interval or array made text is PostgreSQL's
    // text (`2024-01-01 10:00:00`, `1e+20`, `1 day`, `{1,2}`), not Arrow's.
    if let (DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8, Ok(source)) = (field.data_type(), &inner_type)
        && crate::exec::pg_text::has_own_text(source)
    {
        let text = Expr::ScalarFunction(ScalarFunction::new_udf(Arc::new(crate::exec::pg_text::PgText::udf()), vec![*inner]));
        return Ok(Transformed::yes(if field.data_type() == &DataType::Utf8 { text } else { Expr::Cast(Cast { expr: Box::new(text), field }) }));
    }
    // A timestamptz made a timestamp is its local time in the zone it is
    // in (the session's, `session_zone.rs`); Arrow's cast keeps UTC's.
    if let (DataType::Timestamp(_, None), Ok(DataType::Timestamp(_, Some(_)))) = (field.data_type(), &inner_type) {
        let local = Expr::ScalarFunction(ScalarFunction::new_udf(datafusion::functions::datetime::to_local_time(), vec![*inner]));
        return Ok(Transformed::yes(Expr::Cast(Cast { expr: Box::new(local), field })));
    }
    if let (DataType::Decimal128(precision, scale), Ok(DataType::Float32 | DataType::Float64)) = (field.data_type(), &inner_type) {
        // The target type rides on a typed NULL: the function's result type.
        let target = Expr::Literal(ScalarValue::Decimal128(None, *precision, *scale), None);
        return Ok(Transformed::yes(Expr::ScalarFunction(ScalarFunction::new_udf(Arc::new(NumericOfFloat::udf()), vec![*inner, target]))));
    }
    let rounds = field.data_type().is_integer()
        && match inner_type {
            Ok(DataType::Float32 | DataType::Float64) => true,
            Ok(DataType::Decimal128(_, scale)) => scale > 0,
            _ => false,
        };
    if !rounds || matches!(inner.as_ref(), Expr::ScalarFunction(f) if f.name() == ROUND_FOR_INT) {
        return Ok(Transformed::no(Expr::Cast(Cast { expr: inner, field })));
    }
    let rounded = Expr::ScalarFunction(ScalarFunction::new_udf(Arc::new(RoundForInt::udf()), vec![*inner]));
    Ok(Transformed::yes(Expr::Cast(Cast { expr: Box::new(rounded), field })))
}

/// `foam_round_for_int(x)`: `x` rounded to an integral value of its own type
/// as PostgreSQL rounds it for a cast to an integer.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct RoundForInt {
    signature: Signature,
}

impl RoundForInt {
    pub fn udf() -> ScalarUDF {
        ScalarUDF::new_from_impl(RoundForInt { signature: Signature::any(1, Volatility::Immutable) })
    }
}

impl ScalarUDFImpl for RoundForInt {
    fn name(&self) -> &str {
        ROUND_FOR_INT
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        Ok(arg_types[0].clone())
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [value] = args.args.as_slice() else {
            return Err(DataFusionError::Internal(format!("{ROUND_FOR_INT} takes one argument")));
        };
        per_value(value, args.number_rows, round_array)
    }
}

fn round_array(values: &ArrayRef) -> Result<ArrayRef> {
    Ok(match values.data_type() {
        DataType::Float64 => Arc::new(unary::<Float64Type, _, Float64Type>(values.as_primitive(), f64::round_ties_even)),
        DataType::Float32 => Arc::new(unary::<Float32Type, _, Float32Type>(values.as_primitive(), f32::round_ties_even)),
        DataType::Decimal128(precision, scale) if *scale > 0 => {
            let unit = 10i128.pow(*scale as u32);
            let rounded = try_unary::<Decimal128Type, _, Decimal128Type>(values.as_primitive(), |v| {
                let (whole, rest) = (v / unit, v % unit);
                let whole = if rest.abs() * 2 >= unit { whole + v.signum() } else { whole };
                whole.checked_mul(unit).ok_or_else(|| arrow::error::ArrowError::ComputeError("numeric field overflow".into()))
            })?;
            Arc::new(rounded.with_precision_and_scale(*precision, *scale)?)
        }
        _ => values.clone(),
    })
}

/// `foam_numeric_of_float(x, NULL::DECIMAL(p,s))`: the float `x` as a
/// DECIMAL(p,s), made as PostgreSQL makes it (see the module documentation).
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct NumericOfFloat {
    signature: Signature,
}

impl NumericOfFloat {
    pub fn udf() -> ScalarUDF {
        ScalarUDF::new_from_impl(NumericOfFloat { signature: Signature::any(2, Volatility::Immutable) })
    }
}

impl ScalarUDFImpl for NumericOfFloat {
    fn name(&self) -> &str {
        NUMERIC_OF_FLOAT
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        match arg_types {
            [DataType::Float32 | DataType::Float64, target @ DataType::Decimal128(..)] => Ok(target.clone()),
            _ => Err(DataFusionError::Internal(format!("{NUMERIC_OF_FLOAT} takes a float and a typed NULL DECIMAL, not {arg_types:?}"))),
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [value, target] = args.args.as_slice() else {
            return Err(DataFusionError::Internal(format!("{NUMERIC_OF_FLOAT} takes two arguments")));
        };
        let DataType::Decimal128(precision, scale) = target.data_type() else {
            return Err(DataFusionError::Internal(format!("{NUMERIC_OF_FLOAT} makes a DECIMAL, not {}", target.data_type())));
        };
        per_value(value, args.number_rows, |values| numeric_of_float(values, precision, scale))
    }
}

fn numeric_of_float(values: &ArrayRef, precision: u8, scale: i8) -> Result<ArrayRef> {
    let convert = |value: f64, digits: usize| {
        scaled_digits(value, digits, precision, scale).map_err(|message| DataFusionError::from(FoamError::Query { message, sqlstate: SqlState::NumericValueOutOfRange }))
    };
    let numerics: Decimal128Array = match values.data_type() {
        DataType::Float64 => values.as_primitive::<Float64Type>().iter().map(|v| v.map(|v| convert(v, DOUBLE_DIGITS)).transpose()).collect::<Result<_>>()?,
        DataType::Float32 => values.as_primitive::<Float32Type>().iter().map(|v| v.map(|v| convert(f64::from(v), REAL_DIGITS)).transpose()).collect::<Result<_>>()?,
        other => return Err(DataFusionError::Internal(format!("{NUMERIC_OF_FLOAT} of {other}"))),
    };
    Ok(Arc::new(numerics.with_precision_and_scale(precision, scale)?))
}

/// `value` in units of 10^-`scale`: its first `digits` significant decimal
/// digits, rounded half away from zero to `scale` places, as PostgreSQL
/// makes a NUMERIC(`precision`, `scale`) of a float; PostgreSQL's message
/// when it does not fit.
fn scaled_digits(value: f64, digits: usize, precision: u8, scale: i8) -> std::result::Result<i128, String> {
    let overflow = || {
        format!(
            "numeric field overflow: a field with precision {precision}, scale {scale} must round to an absolute value less than 10^{}",
            i32::from(precision) - i32::from(scale)
        )
    };
    if value.is_nan() {
        return Err(format!("cannot convert NaN to numeric({precision},{scale})"));
    }
    if value.is_infinite() {
        return Err(format!("numeric field overflow: a field with precision {precision}, scale {scale} cannot hold an infinite value"));
    }
    // "d.ddd…e±x": `digits` significant digits, exact decimal rounding.
    let text = format!("{:.*e}", digits - 1, value.abs());
    let (mantissa, exponent) = text.split_once('e').ok_or_else(overflow)?;
    let mantissa: i128 = mantissa.replace('.', "").parse().map_err(|_| overflow())?;
    let exponent: i32 = exponent.parse().map_err(|_| overflow())?;
    // value = mantissa * 10^shift, in units of 10^-scale.
    let shift = exponent - (digits as i32 - 1) + i32::from(scale);
    let scaled = if shift >= 0 {
        10i128.checked_pow(shift as u32).and_then(|unit| mantissa.checked_mul(unit)).ok_or_else(overflow)?
    } else if -shift > 38 {
        0
    } else {
        let unit = 10i128.pow((-shift) as u32);
        mantissa / unit + i128::from(mantissa % unit * 2 >= unit)
    };
    if scaled >= 10i128.pow(u32::from(precision)) {
        return Err(overflow());
    }
    Ok(if value < 0.0 { -scaled } else { scaled })
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Decimal128Array, Float64Array};

    #[test]
    fn numerics_round_half_away_from_zero_and_floats_half_to_even() {
        let decimals: ArrayRef = Arc::new(
            Decimal128Array::from(vec![Some(250), Some(-250), Some(149), Some(-151), None, Some(350)]).with_precision_and_scale(10, 2).unwrap(),
        );
        let rounded = round_array(&decimals).unwrap();
        let rounded: Vec<Option<i128>> = rounded.as_primitive::<Decimal128Type>().iter().collect();
        assert_eq!(rounded, vec![Some(300), Some(-300), Some(100), Some(-200), None, Some(400)]);
        let floats: ArrayRef = Arc::new(Float64Array::from(vec![2.5, 3.5, -2.5, 0.4999, 1e300]));
        let rounded = round_array(&floats).unwrap();
        let rounded: Vec<f64> = rounded.as_primitive::<Float64Type>().values().to_vec();
        assert_eq!(rounded, vec![2.0, 4.0, -2.0, 0.0, 1e300]);
    }

    #[test]
    fn floats_become_numerics_through_their_decimal_digits_as_in_postgresql() {
        // Answers of PostgreSQL 15 for `CAST(v::float8 AS NUMERIC(p,s))`.
        let cases: &[(f64, u8, i8, i128)] = &[
            (1.005, 12, 2, 101),
            (-1.005, 12, 2, -101),
            (2.675, 12, 2, 268),
            (0.125, 6, 2, 13),
            (123456789.123456789, 20, 9, 123456789_123457000),
            (0.1, 30, 20, 10_000_000_000_000_000_000),
            (1e20, 30, 2, 100_000_000_000_000_000_000_00),
            (0.0, 5, 2, 0),
            (-0.004, 5, 2, 0),
            (1e-30, 10, 2, 0),
            (99.995, 4, 2, 0),
        ];
        for &(value, precision, scale, expected) in cases {
            let got = scaled_digits(value, DOUBLE_DIGITS, precision, scale);
            if (value, precision) == (99.995, 4) {
                // 100.00 does not fit NUMERIC(4,2).
                assert!(got.unwrap_err().contains("less than 10^2"));
            } else {
                assert_eq!(got, Ok(expected), "{value} as numeric({precision},{scale})");
            }
        }
        // A real keeps 6 digits: `0.1::real::numeric(10,9)` is 0.100000000,
        // `1234567.891::real::numeric(12,3)` is 1234570.000.
        assert_eq!(scaled_digits(f64::from(0.1f32), REAL_DIGITS, 10, 9), Ok(100_000_000));
        assert_eq!(scaled_digits(f64::from(1234567.891f32), REAL_DIGITS, 12, 3), Ok(1_234_570_000));
        assert!(scaled_digits(f64::NAN, DOUBLE_DIGITS, 10, 2).is_err());
        assert!(scaled_digits(f64::INFINITY, DOUBLE_DIGITS, 10, 2).unwrap_err().contains("infinite"));
    }
}
