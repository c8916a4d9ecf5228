//! An interval times or divided by a number, as PostgreSQL computes it
//! (`3 * INTERVAL '1 day'`, `INTERVAL '1 month' * 1.5`, `INTERVAL '1 day' / 4`),
//! which DataFusion refuses ("Invalid interval arithmetic operation").
//!
//! ```text
//!   interval * n, n * interval  ─▶  foam_interval_mul(interval, n::float8)
//!   interval / n                ─▶  foam_interval_div(interval, n::float8)
//! ```
//!
//! The rewrite is `optimizer/logical/numeric_operators.rs`'s. Months, days
//! and time are scaled each; a fraction of a month cascades into days (30
//! to a month) and a fraction of a day into time (24 hours to a day), never
//! upwards, and time is rounded to the microsecond, as PostgreSQL's
//! `interval_mul`/`interval_div` do. Division by zero is 22012; a result
//! past what the interval type holds is 22008 (Arrow's time part is 64 bits
//! of nanoseconds, about 2.5 million hours, where PostgreSQL's holds
//! microseconds).

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, IntervalMonthDayNanoArray};
use arrow::datatypes::{DataType, DurationMicrosecondType, Float64Type, IntervalMonthDayNano, IntervalMonthDayNanoType, IntervalUnit, TimeUnit};
use datafusion::common::{DataFusionError, Result};
use datafusion::logical_expr::{ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility};
use foam_common::{FoamError, SqlState};

use crate::exec::function_values::answered;

/// The functions the rewrite calls; workers register them (`worker_udfs`).
pub const INTERVAL_MUL: &str = "foam_interval_mul";
pub const INTERVAL_DIV: &str = "foam_interval_div";

/// PostgreSQL's units for cascading fractions down.
const DAYS_PER_MONTH: f64 = 30.0;
const SECONDS_PER_DAY: f64 = 86_400.0;
const NANOS_PER_MICRO: i64 = 1_000;

/// The type both functions return.
const INTERVAL: DataType = DataType::Interval(IntervalUnit::MonthDayNano);

/// `foam_interval_mul(interval, factor)` or, with `divide`,
/// `foam_interval_div(interval, divisor)`.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct IntervalScale {
    divide: bool,
    signature: Signature,
}

impl IntervalScale {
    pub fn multiply_udf() -> ScalarUDF {
        ScalarUDF::new_from_impl(IntervalScale { divide: false, signature: Signature::any(2, Volatility::Immutable) })
    }

    pub fn divide_udf() -> ScalarUDF {
        ScalarUDF::new_from_impl(IntervalScale { divide: true, signature: Signature::any(2, Volatility::Immutable) })
    }
}

impl ScalarUDFImpl for IntervalScale {
    fn name(&self) -> &str {
        if self.divide { INTERVAL_DIV } else { INTERVAL_MUL }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        match arg_types {
            [DataType::Interval(_) | DataType::Duration(_), DataType::Float64] => Ok(INTERVAL),
            _ => Err(DataFusionError::Internal(format!("{} takes an interval and a float8, not {arg_types:?}", self.name()))),
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [interval, number] = args.args.as_slice() else { return Err(DataFusionError::Internal(format!("{} takes two arguments", self.name()))) };
        let scalar = args.args.iter().all(|arg| matches!(arg, ColumnarValue::Scalar(_)));
        let rows = if scalar { 1 } else { args.number_rows };
        let (intervals, numbers) = (as_interval(interval.to_array(rows)?)?, number.to_array(rows)?);
        let (intervals, numbers) = (intervals.as_primitive::<IntervalMonthDayNanoType>(), numbers.as_primitive::<Float64Type>());
        let mut out = Vec::with_capacity(rows);
        for row in 0..rows {
            if intervals.is_null(row) || numbers.is_null(row) {
                out.push(None);
                continue;
            }
            let number = numbers.value(row);
            if self.divide && number == 0.0 {
                return Err(FoamError::Query { message: "division by zero".into(), sqlstate: SqlState::DivisionByZero }.into());
            }
            out.push(Some(scale(intervals.value(row), number, self.divide)?));
        }
        answered(Arc::new(IntervalMonthDayNanoArray::from(out)), scalar)
    }
}

/// `values` as intervals of months, days and nanoseconds: another
/// interval type converted, a duration (DataFusion's difference of two
/// timestamps) as PostgreSQL's `timestamp - timestamp` gives it, whole days
/// and the rest (`1 day 06:00:00`, not `30:00:00`).
fn as_interval(values: ArrayRef) -> Result<ArrayRef> {
    match values.data_type() {
        DataType::Duration(_) => {}
        DataType::Interval(IntervalUnit::MonthDayNano) => return Ok(values),
        _ => return Ok(arrow::compute::cast(&values, &INTERVAL)?),
    }
    // Microseconds, as PostgreSQL holds them: nanoseconds of a few
    // centuries' difference do not fit 64 bits.
    let micros = arrow::compute::cast(&values, &DataType::Duration(TimeUnit::Microsecond))?;
    let day = (SECONDS_PER_DAY as i64) * 1_000_000;
    let intervals: IntervalMonthDayNanoArray = micros
        .as_primitive::<DurationMicrosecondType>()
        .iter()
        .map(|value| value.map(|us| IntervalMonthDayNano::new(0, (us / day) as i32, us % day * NANOS_PER_MICRO)))
        .collect();
    Ok(Arc::new(intervals))
}

/// PostgreSQL's `TSROUND`: to the microsecond, as a fraction of a unit.
fn round_micros(value: f64) -> f64 {
    (value * 1e6).round_ties_even() / 1e6
}

/// `interval` times `number` (or divided by it, with `divide`).
fn scale(interval: IntervalMonthDayNano, number: f64, divide: bool) -> Result<IntervalMonthDayNano> {
    let apply = |value: f64| if divide { value / number } else { value * number };
    let whole = |value: f64| if value.is_nan() || value > f64::from(i32::MAX) || value < f64::from(i32::MIN) { Err(out_of_range()) } else { Ok(value as i32) };
    let months = whole(apply(f64::from(interval.months)))?;
    let mut days = whole(apply(f64::from(interval.days)))?;
    let month_remainder_days = round_micros((apply(f64::from(interval.months)) - f64::from(months)) * DAYS_PER_MONTH);
    let mut second_remainder =
        round_micros((apply(f64::from(interval.days)) - f64::from(days) + month_remainder_days - month_remainder_days.trunc()) * SECONDS_PER_DAY);
    if second_remainder.abs() >= SECONDS_PER_DAY {
        let carried = (second_remainder / SECONDS_PER_DAY).trunc();
        days = days.checked_add(carried as i32).ok_or_else(out_of_range)?;
        second_remainder -= carried * SECONDS_PER_DAY;
    }
    days = days.checked_add(month_remainder_days.trunc() as i32).ok_or_else(out_of_range)?;
    // Whole microseconds converted exactly, as PostgreSQL holds them.
    let time_micros = (interval.nanoseconds / NANOS_PER_MICRO) as f64 + (interval.nanoseconds % NANOS_PER_MICRO) as f64 / NANOS_PER_MICRO as f64;
    let micros = (apply(time_micros) + second_remainder * 1e6).round_ties_even();
    if micros.is_nan() || micros.abs() >= (i64::MAX / NANOS_PER_MICRO) as f64 {
        return Err(out_of_range());
    }
    Ok(IntervalMonthDayNano::new(months, days, micros as i64 * NANOS_PER_MICRO))
}

fn out_of_range() -> DataFusionError {
    FoamError::Query { message: "interval out of range".into(), sqlstate: SqlState::DatetimeFieldOverflow }.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: i64 = 3_600_000_000_000;

    fn interval(months: i32, days: i32, nanoseconds: i64) -> IntervalMonthDayNano {
        IntervalMonthDayNano::new(months, days, nanoseconds)
    }

    #[test]
    fn fractions_cascade_down_as_postgresql_cascades_them() {
        // Each answer is PostgreSQL 15's.
        assert_eq!(scale(interval(0, 0, HOUR), 2.0, false).unwrap(), interval(0, 0, 2 * HOUR)); // 02:00:00
        assert_eq!(scale(interval(0, 1, 2 * HOUR), 3.0, false).unwrap(), interval(0, 3, 6 * HOUR)); // 3 days 06:00:00
        assert_eq!(scale(interval(1, 0, 0), 1.5, false).unwrap(), interval(1, 15, 0)); // 1 mon 15 days
        assert_eq!(scale(interval(0, 1, 0), 0.5, false).unwrap(), interval(0, 0, 12 * HOUR)); // 12:00:00
        assert_eq!(scale(interval(0, 1, 0), 2.0, true).unwrap(), interval(0, 0, 12 * HOUR)); // 12:00:00
        assert_eq!(scale(interval(1, 0, 0), 3.0, true).unwrap(), interval(0, 10, 0)); // 10 days
        assert_eq!(scale(interval(0, 1, 0), 3.0, true).unwrap(), interval(0, 0, 8 * HOUR)); // 08:00:00
        assert_eq!(scale(interval(2, 3, HOUR), -0.5, false).unwrap(), interval(-1, -1, -HOUR / 2 - 12 * HOUR)); // -1 mons -1 days -12:30:00
        assert_eq!(scale(interval(0, 0, 1_000), 0.5, false).unwrap(), interval(0, 0, 0), "a microsecond halved rounds to even");
        // 83333:20:00.000004 * 0.375 is 31250:00:00.000002: the time part's
        // microseconds are read exactly, not through a double of nanoseconds.
        let long = (83_333 * 3_600 + 20 * 60) * 1_000_000_000 + 4_000;
        assert_eq!(scale(interval(0, 0, long), 0.375, false).unwrap(), interval(0, 0, 31_250 * HOUR + 2_000));
        assert_eq!(scale(interval(i32::MAX, 0, 0), 2.0, false).unwrap_err().to_string().contains("interval out of range"), true);
    }
}
