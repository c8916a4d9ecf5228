//! `age(a, b)` and `age(a)`: PostgreSQL's symbolic difference of two
//! timestamps, in years, months and days as a calendar counts them
//! (`age('2024-03-31', '2024-02-29')` is `1 mon 2 days`), where `a - b` is
//! days and time. `age(a)` is `age` from midnight of the session's
//! current date. DataFusion has no such function.
//!
//! Each field of the earlier timestamp is taken from the same field of
//! the later; a negative field borrows from the next larger (days as many
//! as the earlier timestamp's month has, as PostgreSQL's `timestamp_age`
//! borrows), and the sign is put back. A timestamptz is read in the local time
//! of its zone (the session's), a date as its midnight.

use std::str::FromStr;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, IntervalMonthDayNanoArray};
use arrow::datatypes::{DataType, IntervalMonthDayNano, IntervalUnit, TimeUnit, TimestampMicrosecondType};
use chrono::{Datelike, NaiveDate, NaiveDateTime, TimeZone, Timelike};
use datafusion::common::{DataFusionError, Result};
use datafusion::logical_expr::{ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility};

use crate::exec::function_values::answered;

/// Microseconds in a second.
const SECOND_MICROS: i64 = 1_000_000;

/// `age`, registered by sessions and workers (`worker_udfs`).
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Age {
    signature: Signature,
}

impl Age {
    pub fn udf() -> ScalarUDF {
        // Stable: `age(a)` reads the current date, as `now()` does.
        ScalarUDF::new_from_impl(Age { signature: Signature::user_defined(Volatility::Stable) })
    }
}

/// The timestamp type an argument is read as: its own zone kept.
fn argument_type(data_type: &DataType) -> Option<DataType> {
    match data_type {
        DataType::Timestamp(_, zone) => Some(DataType::Timestamp(TimeUnit::Microsecond, zone.clone())),
        DataType::Date32 | DataType::Date64 | DataType::Null => Some(DataType::Timestamp(TimeUnit::Microsecond, None)),
        t if t.is_string() => Some(DataType::Timestamp(TimeUnit::Microsecond, None)),
        _ => None,
    }
}

impl ScalarUDFImpl for Age {
    fn name(&self) -> &str {
        "age"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        let types: Option<Vec<DataType>> = arg_types.iter().map(argument_type).collect();
        match types {
            Some(types) if (1..=2).contains(&types.len()) => Ok(types),
            _ => Err(DataFusionError::Plan(format!("function age({}) does not exist", arg_types.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(", ")))),
        }
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Interval(IntervalUnit::MonthDayNano))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let scalar = args.args.iter().all(|arg| matches!(arg, ColumnarValue::Scalar(_)));
        let rows = if scalar { 1 } else { args.number_rows };
        let session_zone = args.config_options.execution.time_zone.clone();
        let locals = args
            .args
            .iter()
            .zip(&args.arg_fields)
            .map(|(value, field)| crate::exec::datetime_format::local_times(&value.to_array(rows)?, field.clone(), rows, &args.config_options))
            .collect::<Result<Vec<ArrayRef>>>()?;
        let read = |array: &ArrayRef, row: usize| -> Option<NaiveDateTime> {
            let values = array.as_primitive::<TimestampMicrosecondType>();
            (!values.is_null(row)).then(|| chrono::DateTime::from_timestamp_micros(values.value(row)).map(|at| at.naive_utc()))?
        };
        let ages: IntervalMonthDayNanoArray = match locals.as_slice() {
            [a, b] => (0..rows).map(|row| Some(age(read(a, row)?, read(b, row)?))).collect(),
            [b] => {
                let today = today(session_zone.as_deref())?;
                (0..rows).map(|row| Some(age(today, read(b, row)?))).collect()
            }
            _ => return Err(DataFusionError::Internal("age takes one or two arguments".into())),
        };
        answered(Arc::new(ages), scalar)
    }
}

/// Midnight of the current date in `zone` (UTC without one).
fn today(zone: Option<&str>) -> Result<NaiveDateTime> {
    let now = chrono::Utc::now();
    let date = match zone {
        Some(zone) => arrow::array::timezone::Tz::from_str(zone)?.from_utc_datetime(&now.naive_utc()).date_naive(),
        None => now.date_naive(),
    };
    Ok(date.and_hms_opt(0, 0, 0).expect("midnight"))
}

/// Days in `month` (1 to 12) of `year`.
fn days_in_month(year: i32, month: u32) -> i64 {
    let next = if month == 12 { NaiveDate::from_ymd_opt(year + 1, 1, 1) } else { NaiveDate::from_ymd_opt(year, month + 1, 1) };
    let first = NaiveDate::from_ymd_opt(year, month, 1);
    match (first, next) {
        (Some(first), Some(next)) => (next - first).num_days(),
        _ => 30,
    }
}

/// PostgreSQL's `timestamp_age(a, b)`.
fn age(a: NaiveDateTime, b: NaiveDateTime) -> IntervalMonthDayNano {
    let fields = |t: &NaiveDateTime| {
        [
            i64::from(t.year()),
            i64::from(t.month()),
            i64::from(t.day()),
            i64::from(t.hour()),
            i64::from(t.minute()),
            i64::from(t.second()),
            i64::from(t.nanosecond() / 1000),
        ]
    };
    let (fa, fb) = (fields(&a), fields(&b));
    let mut d: Vec<i64> = fa.iter().zip(&fb).map(|(x, y)| x - y).collect();
    let negative = a < b;
    if negative {
        d.iter_mut().for_each(|v| *v = -*v);
    }
    let [years, months, days, hours, minutes, seconds, micros] = d.as_mut_slice() else { unreachable!("seven fields") };
    while *micros < 0 {
        *micros += SECOND_MICROS;
        *seconds -= 1;
    }
    while *seconds < 0 {
        *seconds += 60;
        *minutes -= 1;
    }
    while *minutes < 0 {
        *minutes += 60;
        *hours -= 1;
    }
    while *hours < 0 {
        *hours += 24;
        *days -= 1;
    }
    while *days < 0 {
        // The days of the earlier timestamp's month, as PostgreSQL borrows.
        let earlier = if negative { a } else { b };
        *days += days_in_month(earlier.year(), earlier.month());
        *months -= 1;
    }
    while *months < 0 {
        *months += 12;
        *years -= 1;
    }
    let sign = if negative { -1 } else { 1 };
    let time = ((*hours * 60 + *minutes) * 60 + *seconds) * SECOND_MICROS + *micros;
    IntervalMonthDayNano::new((sign * (*years * 12 + *months)) as i32, (sign * *days) as i32, sign * time * 1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> NaiveDateTime {
        NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S%.f").unwrap()
    }

    #[test]
    fn ages_are_postgresqls() {
        // Each expected value is PostgreSQL 15's.
        let cases = [
            ("2024-03-31 00:00:00", "2024-02-29 00:00:00", (1, 2, 0)),
            ("2024-01-01 00:00:00", "2023-01-01 00:00:00", (12, 0, 0)),
            ("2001-04-10 00:00:00", "1957-06-13 00:00:00", (43 * 12 + 9, 27, 0)),
            ("2023-01-01 00:00:00", "2024-03-15 12:30:00", (-14, -14, -(12 * 3600 + 1800) * 1_000_000)),
            ("2024-03-01 10:00:00", "2024-01-31 11:00:00.5", (1, 0, (23 * 3600 - 1) * 1_000_000 + 500_000)),
            ("2024-03-30 00:00:00", "2024-01-31 00:00:00", (1, 30, 0)),
            ("2023-03-01 00:00:00", "2024-01-31 00:00:00", (-10, -30, 0)),
        ];
        for (a, b, (months, days, micros)) in cases {
            assert_eq!(age(at(a), at(b)), IntervalMonthDayNano::new(months, days, micros * 1000), "age({a}, {b})");
        }
    }
}
