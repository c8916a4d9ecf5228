//! PostgreSQL's interval functions DataFusion lacks: `justify_hours`
//! (24 hours to a day), `justify_days` (30 days to a month),
//! `justify_interval` (both, signs made to agree), `make_interval(years,
//! months, weeks, days, hours, mins, secs)` (its named arguments put in
//! place by `frontend/spellings.rs`) and `isfinite` (every FoamDB date,
//! timestamp and interval is finite: true but for NULL).
//!
//! The arithmetic is PostgreSQL 15's `interval_justify_*` and
//! `make_interval`; time is kept in nanoseconds, rounded to microseconds
//! for `secs`. A result past what the interval holds is 22008.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, IntervalMonthDayNanoArray};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Float64Type, Int64Type, IntervalMonthDayNano, IntervalMonthDayNanoType, IntervalUnit};
use datafusion::common::{DataFusionError, Result};
use datafusion::logical_expr::{ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility};
use foam_common::{FoamError, SqlState};

use crate::exec::function_values::answered;

const DAY_NANOS: i64 = 86_400_000_000_000;
const DAYS_PER_MONTH: i64 = 30;
const INTERVAL: DataType = DataType::Interval(IntervalUnit::MonthDayNano);

/// `make_interval`'s arguments in order, as its named arguments call them.
pub const MAKE_INTERVAL_ARGUMENTS: [&str; 7] = ["years", "months", "weeks", "days", "hours", "mins", "secs"];

/// The functions; sessions and workers register them (`worker_udfs`).
pub fn udfs() -> Vec<ScalarUDF> {
    let one = || Signature::any(1, Volatility::Immutable);
    vec![
        ScalarUDF::new_from_impl(IntervalFunction { name: "justify_hours", signature: one() }),
        ScalarUDF::new_from_impl(IntervalFunction { name: "justify_days", signature: one() }),
        ScalarUDF::new_from_impl(IntervalFunction { name: "justify_interval", signature: one() }),
        ScalarUDF::new_from_impl(IntervalFunction { name: "make_interval", signature: Signature::any(MAKE_INTERVAL_ARGUMENTS.len(), Volatility::Immutable) }),
        ScalarUDF::new_from_impl(IntervalFunction { name: "isfinite", signature: one() }),
    ]
}

fn out_of_range() -> DataFusionError {
    DataFusionError::from(FoamError::Query { message: "interval out of range".into(), sqlstate: SqlState::DatetimeFieldOverflow })
}

/// Whole `per` of `low` carried into `high` (truncating, so `low` keeps
/// its sign).
fn carry(high: &mut i64, low: &mut i64, per: i64) {
    *high += *low / per;
    *low %= per;
}

/// One `per` borrowed from `high` into `low` where `high` and the sign of
/// what is below it (`below`) differ, so the two end of one sign.
fn one_sign(high: &mut i64, low: &mut i64, per: i64, below: i64) {
    if *high > 0 && below < 0 {
        *low += per;
        *high -= 1;
    } else if *high < 0 && below > 0 {
        *low -= per;
        *high += 1;
    }
}

/// PostgreSQL's `justify_hours`: whole days of the time into days, the two
/// of one sign.
pub fn justify_hours(value: IntervalMonthDayNano) -> Option<IntervalMonthDayNano> {
    let (mut days, mut time) = (i64::from(value.days), value.nanoseconds);
    carry(&mut days, &mut time, DAY_NANOS);
    let below = time.signum();
    one_sign(&mut days, &mut time, DAY_NANOS, below);
    Some(IntervalMonthDayNano::new(value.months, i32::try_from(days).ok()?, time))
}

/// PostgreSQL's `justify_days`: whole 30 days into months, the two of one
/// sign.
pub fn justify_days(value: IntervalMonthDayNano) -> Option<IntervalMonthDayNano> {
    let (mut months, mut days) = (i64::from(value.months), i64::from(value.days));
    carry(&mut months, &mut days, DAYS_PER_MONTH);
    let below = days.signum();
    one_sign(&mut months, &mut days, DAYS_PER_MONTH, below);
    Some(IntervalMonthDayNano::new(i32::try_from(months).ok()?, i32::try_from(days).ok()?, value.nanoseconds))
}

/// PostgreSQL's `justify_interval`: days into months and time into days,
/// every part of one sign.
pub fn justify_interval(value: IntervalMonthDayNano) -> Option<IntervalMonthDayNano> {
    let (mut months, mut days, mut time) = (i64::from(value.months), i64::from(value.days), value.nanoseconds);
    if (days > 0 && time > 0) || (days < 0 && time < 0) {
        carry(&mut months, &mut days, DAYS_PER_MONTH);
    }
    carry(&mut days, &mut time, DAY_NANOS);
    carry(&mut months, &mut days, DAYS_PER_MONTH);
    // The sign below the months: the days', or the time's without days.
    let below = if days != 0 { days.signum() } else { time.signum() };
    one_sign(&mut months, &mut days, DAYS_PER_MONTH, below);
    let below = time.signum();
    one_sign(&mut days, &mut time, DAY_NANOS, below);
    Some(IntervalMonthDayNano::new(i32::try_from(months).ok()?, i32::try_from(days).ok()?, time))
}

/// PostgreSQL's `make_interval`; `None` past the interval's range.
pub fn make_interval(years: i64, months: i64, weeks: i64, days: i64, hours: i64, mins: i64, secs: f64) -> Option<IntervalMonthDayNano> {
    let months = years.checked_mul(12)?.checked_add(months)?;
    let days = weeks.checked_mul(7)?.checked_add(days)?;
    let micros = (secs * 1_000_000.0).round();
    if !micros.is_finite() || micros.abs() > i64::MAX as f64 / 1000.0 {
        return None;
    }
    let time = hours.checked_mul(3_600_000_000_000)?.checked_add(mins.checked_mul(60_000_000_000)?)?.checked_add((micros as i64).checked_mul(1000)?)?;
    Some(IntervalMonthDayNano::new(i32::try_from(months).ok()?, i32::try_from(days).ok()?, time))
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct IntervalFunction {
    name: &'static str,
    signature: Signature,
}

impl ScalarUDFImpl for IntervalFunction {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        match (self.name, arg_types) {
            ("isfinite", [_]) => Ok(DataType::Boolean),
            ("make_interval", _) => Ok(INTERVAL),
            (_, [DataType::Interval(_) | DataType::Null]) => Ok(INTERVAL),
            (name, types) => Err(DataFusionError::from(FoamError::Query {
                message: format!("function {name}({}) does not exist", types.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")),
                sqlstate: SqlState::UndefinedFunction,
            })),
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let scalar = args.args.iter().all(|arg| matches!(arg, ColumnarValue::Scalar(_)));
        let rows = if scalar { 1 } else { args.number_rows };
        let arrays: Vec<ArrayRef> = args.args.iter().map(|arg| arg.to_array(rows)).collect::<Result<_>>()?;
        let computed: ArrayRef = match self.name {
            "isfinite" => {
                let nulls = arrays[0].logical_nulls();
                Arc::new((0..rows).map(|row| (!nulls.as_ref().is_some_and(|n| n.is_null(row))).then_some(true)).collect::<BooleanArray>())
            }
            "make_interval" => {
                let whole: Vec<ArrayRef> = arrays[..6].iter().map(|a| cast(a, &DataType::Int64)).collect::<std::result::Result<_, _>>()?;
                let whole: Vec<_> = whole.iter().map(|a| a.as_primitive::<Int64Type>()).collect();
                let secs = cast(&arrays[6], &DataType::Float64)?;
                let secs = secs.as_primitive::<Float64Type>();
                let mut made = Vec::with_capacity(rows);
                for row in 0..rows {
                    if whole.iter().any(|a| a.is_null(row)) || secs.is_null(row) {
                        made.push(None);
                        continue;
                    }
                    let at = |i: usize| whole[i].value(row);
                    made.push(Some(make_interval(at(0), at(1), at(2), at(3), at(4), at(5), secs.value(row)).ok_or_else(out_of_range)?));
                }
                Arc::new(IntervalMonthDayNanoArray::from(made))
            }
            name => {
                let values = cast(&arrays[0], &INTERVAL)?;
                let justify = match name {
                    "justify_hours" => justify_hours,
                    "justify_days" => justify_days,
                    _ => justify_interval,
                };
                let values = values.as_primitive::<IntervalMonthDayNanoType>();
                Arc::new(values.iter().map(|v| v.map(|v| justify(v).ok_or_else(out_of_range)).transpose()).collect::<Result<IntervalMonthDayNanoArray>>()?)
            }
        };
        answered(computed, scalar)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: i64 = 3_600_000_000_000;

    fn interval(months: i32, days: i32, hours: i64) -> IntervalMonthDayNano {
        IntervalMonthDayNano::new(months, days, hours * HOUR)
    }

    // PostgreSQL 15's answers.
    #[test]
    fn justify_as_postgresql() {
        assert_eq!(justify_hours(interval(0, 0, 27)), Some(interval(0, 1, 3)));
        assert_eq!(justify_hours(interval(0, 0, -27)), Some(interval(0, -1, -3)));
        assert_eq!(justify_hours(interval(0, 1, -2)), Some(interval(0, 0, 22)));
        assert_eq!(justify_days(interval(0, 35, 0)), Some(interval(1, 5, 0)));
        assert_eq!(justify_days(interval(1, -35, 0)), Some(interval(0, -5, 0)));
        assert_eq!(justify_interval(interval(1, 0, -1)), Some(interval(0, 29, 23)));
        assert_eq!(justify_interval(interval(0, 0, 24 * 31 + 1)), Some(interval(1, 1, 1)));
        assert_eq!(justify_interval(interval(-1, 0, 1)), Some(interval(0, -29, -23)));
    }

    #[test]
    fn make_interval_adds_its_parts() {
        assert_eq!(make_interval(1, 2, 1, 3, 4, 5, 6.5), Some(IntervalMonthDayNano::new(14, 10, 4 * HOUR + 5 * 60_000_000_000 + 6_500_000_000)));
        assert_eq!(make_interval(0, 0, 0, 0, 0, 0, 0.0000014), Some(IntervalMonthDayNano::new(0, 0, 1000)));
        assert_eq!(make_interval(i64::MAX, 0, 0, 0, 0, 0, 0.0), None);
    }
}
