//! NUMERIC beside other numbers as in PostgreSQL: division keeps at least
//! 16 digits after the point, rounded; a product too wide for Arrow is
//! rounded rather than refused; a comparison with a float compares floats.
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
//! Products: Arrow's product of DECIMAL(p1,s1) and DECIMAL(p2,s2) has scale
//! s1+s2 and 38 digits at most, so the product of two quotients
//! (`(1/3.0) * (1/3.0)`, scale 32) could not be sent (arrow-pg's binary
//! encoder takes 28 digits after the point) and `(5000.0/2) * (5000.0/2)`
//! overflowed. A product whose scale would pass 28 is `foam_numeric_mul`:
//! exact in 256 bits, rounded to scale 28. Others stay Arrow's, exact.
//!
//! Comparisons: a comparison of a float with a NUMERIC (`f < 1.5`, `f BETWEEN 0.5 AND
//! 1.5`, `f IN (0.5, 1.5)`) was made one of decimals by DataFusion's
//! coercion, so every float was cast to a decimal, slowly, and a float
//! beyond the decimal's digits failed the query (`f < 1e10` with `f` =
//! 1e300: numeric field overflow). PostgreSQL compares the two as floats;
//! the same rule casts the NUMERIC side to `double precision`.
//!
//! REAL beside another number: PostgreSQL has no operator of `real` and an
//! integer or NUMERIC, so `+`, `-`, `*`, `/` and `%` of the two are done in
//! `double precision` (`1::real / 3` is `0.3333333333333333`); DataFusion
//! kept REAL (`0.33333334`). The REAL side is cast to `double precision`;
//! two REALs stay REAL, as in PostgreSQL. Comparisons of a REAL with
//! another number are of doubles too (`16777217::real = 16777217` is false).
//!
//! Intervals: DataFusion refuses an interval times or divided by a number
//! (`3 * INTERVAL '1 day'`) as it plans the SQL, before any analyzer rule;
//! a SQL-planner hook ([`IntervalArithmeticPlanner`]) writes those as
//! `foam_interval_mul`/`foam_interval_div` (`exec/interval_scale.rs`). The
//! same hook makes the date of `date ± interval` a timestamp, as
//! PostgreSQL's sum is (DataFusion's date sum dropped hours); compared
//! with a date, a sum of whole days is a date again.

use std::sync::Arc;

use arrow::array::{ArrayRef, AsArray, Decimal128Array};
use arrow::datatypes::{DECIMAL128_MAX_PRECISION, DataType, Decimal128Type, i256};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{DFSchema, DataFusionError, Result, ScalarValue};
use datafusion::logical_expr::expr::{BinaryExpr, ScalarFunction};
use datafusion::logical_expr::{ColumnarValue, Expr, ExprSchemable, LogicalPlan, Operator, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility};
use datafusion::logical_expr::planner::{ExprPlanner, PlannerResult, RawBinaryExpr};
use datafusion::optimizer::AnalyzerRule;
use datafusion::sql::sqlparser::ast::BinaryOperator;
use foam_common::{FoamError, SqlState};

use crate::exec::interval_scale::IntervalScale;

use super::named_rewrite::rewrite_expressions;

/// The functions the rewrite calls; workers register them (`worker_udfs`).
pub const NUMERIC_DIV: &str = "foam_numeric_div";
pub const NUMERIC_MUL: &str = "foam_numeric_mul";

/// Most digits after the point of a result the rule makes: arrow-pg's
/// binary encoder (rust_decimal) takes 28.
const SCALE_SHOWN_MAX: i8 = 28;

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
        let plan = rewrite_expressions(plan, numeric_operator)?;
        // A VALUES list keeps the schema it was built with (type coercion
        // does not touch one): a quotient there is typed anew.
        plan.transform_up_with_subqueries(|plan| match plan {
            LogicalPlan::Values(values) if !values_typed_as_built(&values) => {
                Ok(Transformed::yes(datafusion::logical_expr::LogicalPlanBuilder::values(values.values)?.build()?))
            }
            plan => Ok(Transformed::no(plan)),
        })
        .map(|rewritten| rewritten.data)
    }
}

/// Whether each value of a VALUES list has its column's type.
fn values_typed_as_built(values: &datafusion::logical_expr::Values) -> bool {
    let empty = DFSchema::empty();
    values.values.iter().all(|row| row.iter().zip(values.schema.fields()).all(|(value, field)| value.get_type(&empty).is_ok_and(|t| t == *field.data_type() || t.is_null())))
}

fn numeric_operator(expr: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
    use Operator::*;
    match expr {
        Expr::BinaryExpr(BinaryExpr { left, op: op @ (Plus | Minus | Multiply | Divide | Modulo), right }) if real_beside_other(&left, &right, schema) => {
            let widen = |side: Box<Expr>| match side.get_type(schema) {
                Ok(DataType::Float32) => Box::new(Expr::Cast(datafusion::logical_expr::expr::Cast::new(side, DataType::Float64))),
                _ => side,
            };
            Ok(Transformed::yes(Expr::BinaryExpr(BinaryExpr { left: widen(left), op, right: widen(right) })))
        }
        Expr::BinaryExpr(BinaryExpr { left, op: op @ (Divide | Multiply), right }) => numeric_arithmetic(left, op, right, schema),
        Expr::BinaryExpr(BinaryExpr { left, op: op @ (Eq | NotEq | Lt | LtEq | Gt | GtEq | IsDistinctFrom | IsNotDistinctFrom), right }) => {
            let (left, right, reals) = reals_beside(*left, vec![*right], schema);
            let (left, right, floats) = floats_beside(left, right, schema);
            let floats = floats || reals;
            let (left, mut right, dates) = dates_beside(left, right, schema);
            let changed = floats || dates;
            let right = right.pop().unwrap_or(Expr::Literal(ScalarValue::Null, None));
            let expr = Expr::BinaryExpr(BinaryExpr { left: Box::new(left), op, right: Box::new(right) });
            Ok(if changed { Transformed::yes(expr) } else { Transformed::no(expr) })
        }
        Expr::Between(between) => {
            let (expr, bounds, reals) = reals_beside(*between.expr, vec![*between.low, *between.high], schema);
            let (expr, bounds, floats) = floats_beside(expr, bounds, schema);
            let floats = floats || reals;
            let (expr, bounds, dates) = dates_beside(expr, bounds, schema);
            let changed = floats || dates;
            let [low, high]: [Expr; 2] = bounds.try_into().map_err(|_| DataFusionError::Internal("BETWEEN has two bounds".into()))?;
            let between = Expr::Between(datafusion::logical_expr::expr::Between::new(Box::new(expr), between.negated, Box::new(low), Box::new(high)));
            Ok(if changed { Transformed::yes(between) } else { Transformed::no(between) })
        }
        Expr::InList(in_list) => {
            let (expr, list, reals) = reals_beside(*in_list.expr, in_list.list, schema);
            let (expr, list, floats) = floats_beside(expr, list, schema);
            let floats = floats || reals;
            let (expr, list, dates) = dates_beside(expr, list, schema);
            let changed = floats || dates;
            let in_list = Expr::InList(datafusion::logical_expr::expr::InList::new(Box::new(expr), list, in_list.negated));
            Ok(if changed { Transformed::yes(in_list) } else { Transformed::no(in_list) })
        }
        other => Ok(Transformed::no(other)),
    }
}

/// Whether one side is REAL and the other a number of another type.
fn real_beside_other(left: &Expr, right: &Expr, schema: &DFSchema) -> bool {
    match (left.get_type(schema), right.get_type(schema)) {
        (Ok(DataType::Float32), Ok(other)) | (Ok(other), Ok(DataType::Float32)) => other != DataType::Float32 && other.is_numeric(),
        _ => false,
    }
}

/// `value` and `others` compared with it, each REAL among them cast to
/// `double precision` when a number of another type is among them (as
/// PostgreSQL compares `real` and `integer`); whether any was.
fn reals_beside(value: Expr, others: Vec<Expr>, schema: &DFSchema) -> (Expr, Vec<Expr>, bool) {
    let real = |expr: &Expr| matches!(expr.get_type(schema), Ok(DataType::Float32));
    let other = |expr: &Expr| matches!(expr.get_type(schema), Ok(t) if t != DataType::Float32 && t.is_numeric());
    let mixed = (real(&value) || others.iter().any(real)) && (other(&value) || others.iter().any(other));
    if !mixed {
        return (value, others, false);
    }
    let widen = |expr: Expr| if real(&expr) { Expr::Cast(datafusion::logical_expr::expr::Cast::new(Box::new(expr), DataType::Float64)) } else { expr };
    (widen(value), others.into_iter().map(widen).collect(), true)
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

/// The SQL-planner hook for an interval times or divided by a number (see
/// the module documentation).
#[derive(Debug, Default)]
pub struct IntervalArithmeticPlanner;

impl ExprPlanner for IntervalArithmeticPlanner {
    fn plan_binary_op(&self, expr: RawBinaryExpr, schema: &DFSchema) -> Result<PlannerResult<RawBinaryExpr>> {
        let divide = match expr.op {
            BinaryOperator::Multiply => false,
            BinaryOperator::Divide => true,
            BinaryOperator::Plus | BinaryOperator::Minus => return Ok(PlannerResult::Original(date_with_time(expr, schema))),
            _ => return Ok(PlannerResult::Original(expr)),
        };
        let is_number = |t: &DataType| t.is_numeric() || t.is_null();
        let RawBinaryExpr { op, left, right } = expr;
        // DataFusion types a difference of timestamps as a duration.
        let is_interval = |t: &DataType| matches!(t, DataType::Interval(_) | DataType::Duration(_));
        let (interval, number) = match (left.get_type(schema), right.get_type(schema)) {
            (Ok(i), Ok(n)) if is_interval(&i) && is_number(&n) => (left, right),
            (Ok(n), Ok(i)) if is_interval(&i) && is_number(&n) && !divide => (right, left),
            _ => return Ok(PlannerResult::Original(RawBinaryExpr { op, left, right })),
        };
        // The function takes any interval or duration as it is.
        let number = Expr::Cast(datafusion::logical_expr::expr::Cast::new(Box::new(number), DataType::Float64));
        let udf = if divide { IntervalScale::divide_udf() } else { IntervalScale::multiply_udf() };
        let args = vec![interval, number];
        Ok(PlannerResult::Planned(Expr::ScalarFunction(ScalarFunction::new_udf(Arc::new(udf), args))))
    }
}

/// `date ± interval` with the date made a timestamp, as PostgreSQL types
/// the sum: DataFusion's is a date, so `DATE '2024-01-01' - INTERVAL '1
/// hour'` was `2024-01-01` where PostgreSQL's is `2023-12-31 23:00:00`,
/// and `DATE '2024-01-01' + INTERVAL '1 day'` a date where PostgreSQL's is
/// a timestamp. Compared with a date, a sum of whole days stays a date
/// ([`dates_beside`]).
fn date_with_time(expr: RawBinaryExpr, schema: &DFSchema) -> RawBinaryExpr {
    let RawBinaryExpr { op, left, right } = expr;
    let is_date = |e: &Expr| is_date(e, schema);
    let has_time = |e: &Expr| matches!(e.get_type(schema), Ok(DataType::Interval(_)));
    if is_date(&left) && has_time(&right) {
        RawBinaryExpr { op, left: timestamp(left), right }
    } else if op == BinaryOperator::Plus && has_time(&left) && is_date(&right) {
        RawBinaryExpr { op, left, right: timestamp(right) }
    } else {
        RawBinaryExpr { op, left, right }
    }
}

fn is_date(e: &Expr, schema: &DFSchema) -> bool {
    matches!(e.get_type(schema), Ok(DataType::Date32 | DataType::Date64))
}

/// `e` as PostgreSQL's timestamp of a date (`date_with_time`).
fn timestamp(e: Expr) -> Expr {
    Expr::Cast(datafusion::logical_expr::expr::Cast::new(Box::new(e), DATE_AS_TIMESTAMP))
}

const DATE_AS_TIMESTAMP: DataType = DataType::Timestamp(arrow::datatypes::TimeUnit::Microsecond, None);

/// `value` and `others` compared with it (a BETWEEN's bounds, an IN
/// list), a whole-day `date ± interval` sum (a timestamp at midnight)
/// beside dates as a date again: the comparison answers the same and stays one of dates, so a
/// date column's filter (TPC-H's `l_shipdate <= DATE '1998-12-01' -
/// INTERVAL '90' DAY`) does not cast the column.
fn dates_beside(value: Expr, others: Vec<Expr>, schema: &DFSchema) -> (Expr, Vec<Expr>, bool) {
    if is_date(&value, schema) {
        let mut changed = false;
        let others = others
            .into_iter()
            .map(|other| match date_sum(other, schema) {
                Ok(date) => {
                    changed = true;
                    date
                }
                Err(other) => other,
            })
            .collect();
        return (value, others, changed);
    }
    if !others.is_empty() && others.iter().all(|other| is_date(other, schema)) {
        return match date_sum(value, schema) {
            Ok(date) => (date, others, true),
            Err(value) => (value, others, false),
        };
    }
    (value, others, false)
}

/// `e`, a timestamp made of a date plus or minus whole days or months, as
/// that date sum; `Err(e)` if it is not one.
fn date_sum(e: Expr, schema: &DFSchema) -> Result<Expr, Expr> {
    let whole_days = |e: &Expr| match e {
        Expr::Literal(ScalarValue::IntervalMonthDayNano(Some(v)), _) => v.nanoseconds == 0,
        Expr::Literal(ScalarValue::IntervalDayTime(Some(v)), _) => v.milliseconds == 0,
        Expr::Literal(ScalarValue::IntervalYearMonth(Some(_)), _) => true,
        _ => false,
    };
    let date_of = |e: &Expr| match e {
        Expr::Cast(cast) if *cast.field.data_type() == DATE_AS_TIMESTAMP && is_date(&cast.expr, schema) => Some((*cast.expr).clone()),
        _ => None,
    };
    match &e {
        Expr::BinaryExpr(BinaryExpr { left, op: op @ (Operator::Plus | Operator::Minus), right }) if whole_days(right) && let Some(date) = date_of(left) => {
            Ok(Expr::BinaryExpr(BinaryExpr::new(Box::new(date), *op, right.clone())))
        }
        Expr::BinaryExpr(BinaryExpr { left, op: Operator::Plus, right }) if whole_days(left) && let Some(date) = date_of(right) => {
            Ok(Expr::BinaryExpr(BinaryExpr::new(left.clone(), Operator::Plus, Box::new(date))))
        }
        _ => Err(e),
    }
}

fn numeric_arithmetic(left: Box<Expr>, op: Operator, right: Box<Expr>, schema: &DFSchema) -> Result<Transformed<Expr>> {
    let types = (left.get_type(schema), right.get_type(schema));
    let numeric = match &types {
        (Ok(l @ DataType::Decimal128(..)), Ok(r)) | (Ok(l), Ok(r @ DataType::Decimal128(..))) => decimal_of(l).is_some() && decimal_of(r).is_some(),
        _ => false,
    };
    let unchanged = |left, right| Ok(Transformed::no(Expr::BinaryExpr(BinaryExpr { left, op, right })));
    if !numeric {
        return unchanged(left, right);
    }
    let (Some((_, s1)), Some((_, s2))) = (decimal_of(types.0.as_ref().unwrap_or(&DataType::Null)), decimal_of(types.1.as_ref().unwrap_or(&DataType::Null))) else {
        return unchanged(left, right);
    };
    // A product Arrow holds exactly and PostgreSQL's clients can read is
    // left to it.
    if op == Operator::Multiply && s1 + s2 <= SCALE_SHOWN_MAX {
        return unchanged(left, right);
    }
    let (left, right) = (exact_literal(*left), exact_literal(*right));
    let (Some((p1, s1)), Some((p2, s2))) = (left.get_type(schema).ok().as_ref().and_then(decimal_of), right.get_type(schema).ok().as_ref().and_then(decimal_of)) else {
        return Err(DataFusionError::Internal(format!("operands of {left} {op} {right} are no longer numbers")));
    };
    let max = i16::from(DECIMAL128_MAX_PRECISION);
    let (scale, integer_digits) = if op == Operator::Divide {
        // The quotient's integer digits are at most the dividend's plus the divisor's fraction digits.
        (quotient_scale(p1, s1, s2), i16::from(p1) - i16::from(s1) + i16::from(s2))
    } else {
        let integer_digits = i16::from(p1) - i16::from(s1) + i16::from(p2) - i16::from(s2);
        (SCALE_SHOWN_MAX, integer_digits)
    };
    let precision = (integer_digits + i16::from(scale)).clamp(i16::from(scale).max(1), max) as u8;
    let target = Expr::Literal(ScalarValue::Decimal128(None, precision, scale), None);
    let udf = if op == Operator::Divide { NumericArithmetic::divide_udf() } else { NumericArithmetic::multiply_udf() };
    Ok(Transformed::yes(Expr::ScalarFunction(ScalarFunction::new_udf(Arc::new(udf), vec![left, right, target]))))
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
    QUOTIENT_SCALE_MIN.max(s1).max(s2).min(max - integer_digits).max(s1.max(s2).min(max)).min(SCALE_SHOWN_MAX).max(0)
}

/// `foam_numeric_div(a, b, NULL::DECIMAL(p,s))`: `a / b` as a
/// DECIMAL(p,s), rounded half away from zero; `foam_numeric_mul` the same
/// of `a × b`.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct NumericArithmetic {
    divide: bool,
    signature: Signature,
}

impl NumericArithmetic {
    pub fn divide_udf() -> ScalarUDF {
        ScalarUDF::new_from_impl(NumericArithmetic { divide: true, signature: Signature::any(3, Volatility::Immutable) })
    }

    pub fn multiply_udf() -> ScalarUDF {
        ScalarUDF::new_from_impl(NumericArithmetic { divide: false, signature: Signature::any(3, Volatility::Immutable) })
    }
}

impl ScalarUDFImpl for NumericArithmetic {
    fn name(&self) -> &str {
        if self.divide { NUMERIC_DIV } else { NUMERIC_MUL }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        match arg_types {
            [left, right, target @ DataType::Decimal128(..)] if decimal_of(left).is_some() && decimal_of(right).is_some() => Ok(target.clone()),
            _ => Err(DataFusionError::Internal(format!("{} takes two numbers and a typed NULL DECIMAL, not {arg_types:?}", self.name()))),
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [left, right, target] = args.args.as_slice() else {
            return Err(DataFusionError::Internal(format!("{} takes three arguments", self.name())));
        };
        let (Some((p1, s1)), Some((p2, s2)), DataType::Decimal128(precision, scale)) =
            (decimal_of(&left.data_type()), decimal_of(&right.data_type()), target.data_type())
        else {
            return Err(DataFusionError::Internal(format!("{} of {} and {}", self.name(), left.data_type(), right.data_type())));
        };
        let scalar = matches!((left, right), (ColumnarValue::Scalar(_), ColumnarValue::Scalar(_)));
        let rows = if scalar { 1 } else { args.number_rows };
        // Integers become decimals of scale 0.
        let lefts = arrow::compute::cast(&left.to_array(rows)?, &DataType::Decimal128(p1, s1))?;
        let rights = arrow::compute::cast(&right.to_array(rows)?, &DataType::Decimal128(p2, s2))?;
        let (lefts, rights) = (lefts.as_primitive::<Decimal128Type>(), rights.as_primitive::<Decimal128Type>());
        let results: Decimal128Array = lefts
            .iter()
            .zip(rights.iter())
            .map(|(l, r)| match (l, r) {
                // The quotient in units of 10^-scale is l × 10^shift / r;
                // the product l × r × 10^shift.
                (Some(l), Some(r)) if self.divide => quotient(l, r, i32::from(scale) - i32::from(s1) + i32::from(s2), precision).map(Some),
                (Some(l), Some(r)) => product(l, r, i32::from(scale) - i32::from(s1) - i32::from(s2), precision).map(Some),
                _ => Ok(None),
            })
            .collect::<Result<_>>()?;
        let results: ArrayRef = Arc::new(results.with_precision_and_scale(precision, scale)?);
        crate::exec::function_values::answered(results, scalar)
    }
}

fn numeric_error(message: &str, sqlstate: SqlState) -> DataFusionError {
    DataFusionError::from(FoamError::Query { message: message.into(), sqlstate })
}

fn overflow() -> DataFusionError {
    numeric_error("numeric field overflow", SqlState::NumericValueOutOfRange)
}

/// `left × right × 10^shift`, rounded half away from zero, within
/// `precision` digits.
fn product(left: i128, right: i128, shift: i32, precision: u8) -> Result<i128> {
    // Each factor is below 10^38, so the product fits 256 bits.
    let exact = i256::from_i128(left).checked_mul(i256::from_i128(right)).ok_or_else(overflow)?;
    let power = i256::from_i128(10).checked_pow(shift.unsigned_abs()).ok_or_else(overflow)?;
    if shift >= 0 { rounded(exact.checked_mul(power).ok_or_else(overflow)?, i256::ONE, precision) } else { rounded(exact, power, precision) }
}

/// `left × 10^shift / right`, rounded half away from zero, within
/// `precision` digits.
fn quotient(left: i128, right: i128, shift: i32, precision: u8) -> Result<i128> {
    if right == 0 {
        return Err(numeric_error("division by zero", SqlState::DivisionByZero));
    }
    let power = i256::from_i128(10).checked_pow(shift.unsigned_abs()).ok_or_else(overflow)?;
    let (numerator, denominator) = (i256::from_i128(left), i256::from_i128(right));
    if shift >= 0 {
        rounded(numerator.checked_mul(power).ok_or_else(overflow)?, denominator, precision)
    } else {
        rounded(numerator, denominator.checked_mul(power).ok_or_else(overflow)?, precision)
    }
}

/// `numerator / denominator` rounded half away from zero, within
/// `precision` digits.
fn rounded(numerator: i256, denominator: i256, precision: u8) -> Result<i128> {
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
    fn products_round_to_their_scale() {
        // 0.3333333333333333 squared, 0.11111111111111108888888888888889, at scale 28.
        let third = 3_333_333_333_333_333;
        assert_eq!(product(third, third, 28 - 32, 38).unwrap(), 1_111_111_111_111_110_888_888_888_889);
        assert_eq!(product(-third, third, 28 - 32, 38).unwrap(), -1_111_111_111_111_110_888_888_888_889);
        // 2500.0000000000000000 squared, past i128 before rounding.
        let big = 25_000_000_000_000_000_000;
        assert_eq!(product(big, big, 28 - 32, 38).unwrap(), 6_250_000 * 10i128.pow(28));
        assert_eq!(product(15, 3, 0, 38).unwrap(), 45);
    }

    #[test]
    fn the_scale_is_sixteen_digits_or_what_fits() {
        assert_eq!(quotient_scale(20, 0, 1), 16);
        assert_eq!(quotient_scale(25, 2, 1), 14);
        assert_eq!(quotient_scale(10, 2, 20), 20);
        assert_eq!(quotient_scale(38, 10, 10), 10);
        assert_eq!(quotient_scale(38, 30, 0), 28);
    }
}
