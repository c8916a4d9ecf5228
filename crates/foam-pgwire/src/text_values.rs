//! Text-format values as PostgreSQL prints them, where arrow-pg's encoder
//! prints them otherwise: floating point (`1e10` as `10000000000.0`,
//! infinity as `inf`) and timestamps and times (always six fraction
//! digits: `03:04:05.000000`), dates (a year before 1 as `-0043`) and the
//! time `24:00:00`, NUMERICs of more than 28 digits (arrow-pg's encoder
//! holds 28), intervals (`1 day 01:30:00`, a fraction without
//! trailing zeros; a difference of timestamps in days and time).
//!
//! ```text
//!   batch ─▶ each text-format FLOAT4/FLOAT8/NUMERIC/DATE/TIMESTAMP/TIME/INTERVAL/INT2VECTOR/OIDVECTOR column as PostgreSQL's text ─▶ arrow-pg
//! ```
//!
//! PostgreSQL (extra_float_digits 1, its default) prints a float with the
//! fewest digits that read back to the same value, in exponent form when
//! the exponent is below -4 or at least 15 (6 for `real`), with a sign and
//! two digits (`1e+15`, `1.5e-05`), and `Infinity`, `-Infinity`, `NaN`. A
//! timestamp or time has its fraction of a second only when there is one,
//! without trailing zeros (`23:59:59.5`), and a year before 1 is `BC`, in
//! a date too.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, StringArray};
use arrow::datatypes::{
    DataType, Date32Type, Decimal128Type, DecimalType, DurationMicrosecondType, DurationMillisecondType, DurationNanosecondType, DurationSecondType, Float32Type, IntervalDayTimeType, IntervalMonthDayNanoType, IntervalUnit, IntervalYearMonthType, Float64Type, Schema, Time64MicrosecondType, Time64NanosecondType, TimeUnit,
};
use arrow::record_batch::RecordBatch;
use chrono::{Datelike, NaiveDate, NaiveTime, Timelike};
use foam_query::exec::timestamp_text::{fraction, timestamps_as_text};
use pgwire::api::Type;
use pgwire::api::results::{FieldFormat, FieldInfo};

/// `batch` with its text-format float, date, timestamp and time columns turned
/// into PostgreSQL's text for them (the fields keep their types).
pub fn postgres_text(batch: RecordBatch, fields: &[FieldInfo]) -> RecordBatch {
    let converted: Vec<Option<ArrayRef>> = batch
        .columns()
        .iter()
        .zip(fields)
        .map(|(column, field)| match field.format() {
            // A list described as text is an int2vector or oidvector.
            _ if *field.datatype() == Type::TEXT && matches!(column.data_type(), DataType::List(_)) => vector_text(column),
            FieldFormat::Text => as_postgres_text(column),
            _ => None,
        })
        .collect();
    if converted.iter().all(Option::is_none) {
        return batch;
    }
    let schema = batch.schema();
    let mut columns = Vec::with_capacity(batch.num_columns());
    let mut schema_fields = Vec::with_capacity(batch.num_columns());
    for ((column, field), converted) in batch.columns().iter().zip(schema.fields()).zip(converted) {
        match converted {
            Some(text) => {
                schema_fields.push(Arc::new(field.as_ref().clone().with_data_type(DataType::Utf8)));
                columns.push(text);
            }
            None => {
                schema_fields.push(field.clone());
                columns.push(column.clone());
            }
        }
    }
    RecordBatch::try_new(Arc::new(Schema::new(schema_fields)), columns).unwrap_or(batch)
}

fn as_postgres_text(column: &ArrayRef) -> Option<ArrayRef> {
    let text = |values: Vec<Option<String>>| -> Option<ArrayRef> { Some(Arc::new(StringArray::from(values))) };
    match column.data_type() {
        DataType::Float64 => text(column.as_primitive::<Float64Type>().iter().map(|v| v.map(|v| float8(v, 15))).collect()),
        DataType::Float32 => text(column.as_primitive::<Float32Type>().iter().map(|v| v.map(float4)).collect()),
        DataType::Timestamp(..) => timestamps_as_text(column).map(|text| Arc::new(text) as ArrayRef),
        DataType::Interval(IntervalUnit::MonthDayNano) => text(
            column.as_primitive::<IntervalMonthDayNanoType>().iter().map(|v| v.map(|v| interval(i64::from(v.months), i64::from(v.days), v.nanoseconds / 1000))).collect(),
        ),
        DataType::Interval(IntervalUnit::YearMonth) => text(column.as_primitive::<IntervalYearMonthType>().iter().map(|v| v.map(|months| interval(i64::from(months), 0, 0))).collect()),
        DataType::Interval(IntervalUnit::DayTime) => text(
            column.as_primitive::<IntervalDayTimeType>().iter().map(|v| v.map(|v| interval(0, i64::from(v.days), i64::from(v.milliseconds) * 1000))).collect(),
        ),
        // A difference of timestamps: whole days and the rest, as
        // PostgreSQL's (`justify_hours`).
        DataType::Duration(unit) => {
            let micros: Vec<Option<i64>> = match unit {
                TimeUnit::Second => column.as_primitive::<DurationSecondType>().iter().map(|v| v.map(|v| v.saturating_mul(1_000_000))).collect(),
                TimeUnit::Millisecond => column.as_primitive::<DurationMillisecondType>().iter().map(|v| v.map(|v| v.saturating_mul(1000))).collect(),
                TimeUnit::Microsecond => column.as_primitive::<DurationMicrosecondType>().iter().collect(),
                TimeUnit::Nanosecond => column.as_primitive::<DurationNanosecondType>().iter().map(|v| v.map(|v| v / 1000)).collect(),
            };
            text(micros.into_iter().map(|v| v.map(|micros| interval(0, micros / DAY_MICROS, micros % DAY_MICROS))).collect())
        }
        // Arrow's own digits: arrow-pg's encoder goes through rust_decimal,
        // which holds 28 digits, so a wider NUMERIC failed to be sent.
        DataType::Decimal128(precision, scale) => {
            text(column.as_primitive::<Decimal128Type>().iter().map(|v| v.map(|v| Decimal128Type::format_decimal(v, *precision, *scale))).collect())
        }
        DataType::Date32 => text(column.as_primitive::<Date32Type>().iter().map(|v| v.and_then(|days| Date32Type::to_naive_date_opt(days)).map(date)).collect()),
        DataType::Time64(TimeUnit::Microsecond) => text(column.as_primitive::<Time64MicrosecondType>().iter().map(|v| v.and_then(|v| time_of_nanos(v.checked_mul(1000)?))).collect()),
        DataType::Time64(TimeUnit::Nanosecond) => text(column.as_primitive::<Time64NanosecondType>().iter().map(|v| v.and_then(time_of_nanos)).collect()),
        _ => None,
    }
}

/// A list column described as text (an `int2vector` or `oidvector`), as
/// PostgreSQL prints those: the values with a space between (`1 2`).
fn vector_text(column: &ArrayRef) -> Option<ArrayRef> {
    let lists = column.as_list_opt::<i32>()?;
    let texts: StringArray = (0..lists.len())
        .map(|row| {
            if lists.is_null(row) {
                return None;
            }
            let values = lists.value(row);
            let texts: Vec<String> = (0..values.len())
                .map(|i| arrow::util::display::array_value_to_string(&values, i).unwrap_or_default())
                .collect();
            Some(texts.join(" "))
        })
        .collect();
    Some(Arc::new(texts))
}

/// A `double precision` as PostgreSQL prints it; exponent form from
/// `1e<exponent_from>` up.
fn float8(value: f64, exponent_from: i32) -> String {
    if value.is_nan() {
        return "NaN".into();
    }
    if value.is_infinite() {
        return if value > 0.0 { "Infinity".into() } else { "-Infinity".into() };
    }
    shortest(format!("{value:e}"), || format!("{value}"), value == 0.0, exponent_from)
}

/// A `real`: its own shortest digits, exponent form from 1e6 up.
fn float4(value: f32) -> String {
    if !value.is_finite() {
        return float8(f64::from(value), 6);
    }
    shortest(format!("{value:e}"), || format!("{value}"), value == 0.0, 6)
}

/// Rust's shortest round-trip digits (`scientific` as `{:e}` prints them;
/// `plain`, as `{}` prints them, made only when that form is the one) in
/// PostgreSQL's form.
fn shortest(scientific: String, plain: impl FnOnce() -> String, zero: bool, exponent_from: i32) -> String {
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    if !zero && (exponent < -4 || exponent >= exponent_from) {
        let sign = if exponent < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exponent.abs())
    } else {
        plain()
    }
}

const DAY_MICROS: i64 = 86_400_000_000;

/// An interval as PostgreSQL prints it (IntervalStyle `postgres`): years
/// and `mons`, days, then the time; right after a negative part a positive
/// one has a `+` (`-1 days +02:00:00`); no parts is `00:00:00`.
fn interval(months: i64, days: i64, micros: i64) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut negative_seen = false;
    let mut part = |value: i64, unit: &str, parts: &mut Vec<String>| {
        if value == 0 {
            return;
        }
        // A `+` only right after a negative part, as PostgreSQL's.
        let sign = if value > 0 && negative_seen { "+" } else { "" };
        negative_seen = value < 0;
        let plural = if value == 1 { "" } else { "s" };
        parts.push(format!("{sign}{value} {unit}{plural}"));
    };
    part(months / 12, "year", &mut parts);
    part(months % 12, "mon", &mut parts);
    part(days, "day", &mut parts);
    if micros != 0 || parts.is_empty() {
        let sign = if micros < 0 {
            "-"
        } else if negative_seen {
            "+"
        } else {
            ""
        };
        let magnitude = micros.unsigned_abs();
        let seconds = magnitude / 1_000_000;
        let fraction = fraction((magnitude % 1_000_000) as u32 * 1000);
        parts.push(format!("{sign}{:02}:{:02}:{:02}{fraction}", seconds / 3600, seconds / 60 % 60, seconds % 60));
    }
    parts.join(" ")
}

/// A date as PostgreSQL prints it: at least four digits of year, `BC`
/// before year 1.
fn date(day: NaiveDate) -> String {
    if day.year() <= 0 {
        format!("{:04}-{:02}-{:02} BC", 1 - day.year(), day.month(), day.day())
    } else {
        format!("{:04}-{:02}-{:02}", day.year(), day.month(), day.day())
    }
}

/// A time of `nanos` since midnight; a whole day is PostgreSQL's `24:00:00`.
fn time_of_nanos(nanos: i64) -> Option<String> {
    const DAY_NANOS: i64 = 86_400_000_000_000;
    if nanos == DAY_NANOS {
        return Some("24:00:00".into());
    }
    NaiveTime::from_num_seconds_from_midnight_opt(u32::try_from(nanos / 1_000_000_000).ok()?, (nanos % 1_000_000_000) as u32).map(time)
}

fn time(at: NaiveTime) -> String {
    format!("{:02}:{:02}:{:02}{}", at.hour(), at.minute(), at.second(), fraction(at.nanosecond()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::NaiveDateTime;
    use foam_query::exec::timestamp_text::timestamp;

    #[test]
    fn floats_print_as_postgresql_prints_them() {
        let cases = [
            (1e10, "10000000000"),
            (1e15, "1e+15"),
            (123456789012345.0, "123456789012345"),
            (0.5, "0.5"),
            (-1.25, "-1.25"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1.5e-7, "1.5e-07"),
            (1e300, "1e+300"),
            (0.1 + 0.2, "0.30000000000000004"),
            (0.0, "0"),
            (-0.0, "-0"),
            (100.0, "100"),
            (f64::INFINITY, "Infinity"),
            (f64::NEG_INFINITY, "-Infinity"),
            (f64::NAN, "NaN"),
        ];
        for (value, text) in cases {
            assert_eq!(float8(value, 15), text, "{value:?}");
        }
        assert_eq!(float4(1e6), "1e+06");
        assert_eq!(float4(123456.0), "123456");
        assert_eq!(float4(0.1), "0.1");
    }

    #[test]
    fn timestamps_and_times_show_only_the_fraction_they_have() {
        let at = |s: &str| NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S%.f").unwrap();
        assert_eq!(timestamp(at("2024-01-02 03:04:05")), "2024-01-02 03:04:05");
        assert_eq!(timestamp(at("1999-12-31 23:59:59.5")), "1999-12-31 23:59:59.5");
        assert_eq!(timestamp(at("2000-01-01 00:00:00.000123")), "2000-01-01 00:00:00.000123");
        assert_eq!(timestamp(at("0000-03-01 00:00:00")), "0001-03-01 00:00:00 BC");
        assert_eq!(time(NaiveTime::from_hms_micro_opt(7, 8, 9, 250_000).unwrap()), "07:08:09.25");
        assert_eq!(time_of_nanos(86_400_000_000_000).as_deref(), Some("24:00:00"));
        assert_eq!(time_of_nanos(86_400_000_000_001), None);
    }

    // PostgreSQL 15's output.
    #[test]
    fn intervals_print_as_postgresql_prints_them() {
        let hour = 3_600_000_000;
        assert_eq!(interval(0, 1, 2 * hour), "1 day 02:00:00");
        assert_eq!(interval(1, 3, 0), "1 mon 3 days");
        assert_eq!(interval(14, 0, 0), "1 year 2 mons");
        assert_eq!(interval(0, 0, 1_500_000), "00:00:01.5");
        assert_eq!(interval(0, 74, 0), "74 days");
        assert_eq!(interval(0, -1, 0), "-1 days");
        assert_eq!(interval(0, -1, 2 * hour), "-1 days +02:00:00");
        assert_eq!(interval(0, 0, -90 * 60_000_000), "-01:30:00");
        assert_eq!(interval(0, 0, 0), "00:00:00");
        assert_eq!(interval(0, 0, 30 * hour), "30:00:00");
        assert_eq!(interval(-1, 1, hour), "-1 mons +1 day 01:00:00");
    }

    #[test]
    fn dates_show_four_digit_years_and_bc() {
        let day = |y, m, d| NaiveDate::from_ymd_opt(y, m, d).unwrap();
        assert_eq!(date(day(2024, 1, 5)), "2024-01-05");
        assert_eq!(date(day(-43, 3, 15)), "0044-03-15 BC");
        assert_eq!(date(day(10000, 1, 1)), "10000-01-01");
        assert_eq!(date(day(33, 1, 1)), "0033-01-01");
    }
}
