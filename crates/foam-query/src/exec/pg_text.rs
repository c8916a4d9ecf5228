//! Values as PostgreSQL's text output prints them, where Arrow's text is
//! another: floating point (`1e+20`, `Infinity`; Arrow's `1e20`, `inf`),
//! intervals (`1 day 02:00:00`; Arrow's `1 days 2 hours`), timestamps and
//! times (a fraction only when there is one), dates before year 1 (`BC`),
//! NUMERICs wider than 28 digits, and arrays (`{1,2}`, `{"a b",NULL}`,
//! `{{1,2},{3,4}}`; Arrow's `[1, 2]`).
//!
//! ```text
//!   column ─▶ values_as_text ─▶ the protocol layer's text-format result columns (foam-pgwire)
//!                             └▶ foam_pg_text(x): CAST(x AS TEXT), `x || ''`  (optimizer/logical/pg_casts.rs)
//! ```
//!
//! PostgreSQL (extra_float_digits 1, its default) prints a float with the
//! fewest digits that read back to the same value, in exponent form when
//! the exponent is below -4 or at least 15 (6 for `real`), with a sign and
//! two digits (`1e+15`, `1.5e-05`). An array's elements are each one's own
//! text (a boolean is `t` or `f` there), in double quotes when empty, when
//! `NULL` in any case, or when holding a brace, a comma, a quote, a
//! backslash or white space, with `"` and `\` escaped by a backslash; a
//! NULL element is `NULL`; an array in an array is braces again, unquoted.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, StringArray};
use arrow::datatypes::{
    DataType, Date32Type, Decimal128Type, DecimalType, DurationMicrosecondType, DurationMillisecondType, DurationNanosecondType, DurationSecondType, Float32Type, Float64Type, IntervalDayTimeType, IntervalMonthDayNanoType, IntervalUnit, IntervalYearMonthType, Time64MicrosecondType, Time64NanosecondType, TimeUnit,
};
use arrow::util::display::{ArrayFormatter, FormatOptions};
use chrono::{Datelike, NaiveDate, NaiveTime, Timelike};
use datafusion::common::{DataFusionError, Result};
use datafusion::logical_expr::{ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility};

use crate::exec::function_values::per_value;
use crate::exec::timestamp_text::{fraction, timestamps_as_text};

/// The function a cast to text calls; workers register it (`worker_udfs`).
pub const PG_TEXT: &str = "foam_pg_text";

/// Whether PostgreSQL's text of a `data_type` value differs from Arrow's
/// (`values_as_text` answers for these).
pub fn has_own_text(data_type: &DataType) -> bool {
    matches!(
        data_type,
        DataType::Float64
            | DataType::Float32
            | DataType::Timestamp(..)
            | DataType::Interval(_)
            | DataType::Duration(_)
            | DataType::Decimal128(..)
            | DataType::Date32
            | DataType::Time64(_)
            | DataType::List(_)
            | DataType::LargeList(_)
            | DataType::FixedSizeList(..)
    )
}

/// `column` as PostgreSQL's text of it; `None` where Arrow's text is
/// PostgreSQL's (integers, text, booleans as result columns).
pub fn values_as_text(column: &ArrayRef) -> Option<ArrayRef> {
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
        DataType::List(_) | DataType::LargeList(_) | DataType::FixedSizeList(..) => text(arrays_as_text(column)),
        _ => None,
    }
}

/// Each list of `column` (a List, LargeList or FixedSizeList) as
/// PostgreSQL's text of an array.
fn arrays_as_text(column: &ArrayRef) -> Vec<Option<String>> {
    let (values, bounds): (&ArrayRef, Vec<(usize, usize)>) = if let Some(lists) = column.as_list_opt::<i32>() {
        (lists.values(), lists.offsets().windows(2).map(|w| (w[0] as usize, w[1] as usize)).collect())
    } else if let Some(lists) = column.as_list_opt::<i64>() {
        (lists.values(), lists.offsets().windows(2).map(|w| (w[0] as usize, w[1] as usize)).collect())
    } else if let Some(lists) = column.as_fixed_size_list_opt() {
        let size = lists.value_length() as usize;
        (lists.values(), (0..lists.len()).map(|row| (row * size, row * size + size)).collect())
    } else {
        return vec![None; column.len()];
    };
    let nested = matches!(values.data_type(), DataType::List(_) | DataType::LargeList(_) | DataType::FixedSizeList(..));
    let elements = element_texts(values);
    bounds
        .into_iter()
        .enumerate()
        .map(|(row, (from, to))| {
            if column.is_null(row) {
                return None;
            }
            let mut text = String::from("{");
            for (i, element) in elements[from..to].iter().enumerate() {
                if i > 0 {
                    text.push(',');
                }
                match element {
                    None => text.push_str("NULL"),
                    Some(element) if nested => text.push_str(element),
                    Some(element) => quoted_element(element, &mut text),
                }
            }
            text.push('}');
            Some(text)
        })
        .collect()
}

/// Each value of `values` as PostgreSQL's output function writes it (a
/// boolean `t` or `f`), as an array element or a `format()` argument.
pub fn element_texts(values: &ArrayRef) -> Vec<Option<String>> {
    if let Some(booleans) = values.as_boolean_opt() {
        return booleans.iter().map(|v| v.map(|v| if v { "t" } else { "f" }.to_string())).collect();
    }
    if let Some(texts) = values_as_text(values) {
        let texts = texts.as_string::<i32>();
        return texts.iter().map(|v| v.map(str::to_string)).collect();
    }
    let Ok(formatter) = ArrayFormatter::try_new(values.as_ref(), &FormatOptions::default()) else {
        return vec![None; values.len()];
    };
    // Logical nulls: a NULL literal's array (`NullArray`) has no null
    // buffer.
    let nulls = values.logical_nulls();
    (0..values.len()).map(|i| (!nulls.as_ref().is_some_and(|nulls| nulls.is_null(i))).then(|| formatter.value(i).to_string())).collect()
}

/// `element` into `text` as an array element, quoted where PostgreSQL's
/// `array_out` quotes.
fn quoted_element(element: &str, text: &mut String) {
    let quote = element.is_empty()
        || element.eq_ignore_ascii_case("NULL")
        || element.chars().any(|c| matches!(c, '{' | '}' | ',' | '"' | '\\' | ' ' | '\t' | '\n' | '\r' | '\x0B' | '\x0C'));
    if !quote {
        text.push_str(element);
        return;
    }
    text.push('"');
    for c in element.chars() {
        if matches!(c, '"' | '\\') {
            text.push('\\');
        }
        text.push(c);
    }
    text.push('"');
}

/// `foam_pg_text(x)`: `x` as PostgreSQL's text (`has_own_text` types).
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct PgText {
    signature: Signature,
}

impl PgText {
    pub fn udf() -> ScalarUDF {
        ScalarUDF::new_from_impl(PgText { signature: Signature::any(1, Volatility::Immutable) })
    }
}

impl ScalarUDFImpl for PgText {
    fn name(&self) -> &str {
        PG_TEXT
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        match arg_types {
            [data_type] if has_own_text(data_type) => Ok(DataType::Utf8),
            _ => Err(DataFusionError::Internal(format!("{PG_TEXT} takes a value of a type with its own text, not {arg_types:?}"))),
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [value] = args.args.as_slice() else { return Err(DataFusionError::Internal(format!("{PG_TEXT} takes one argument"))) };
        per_value(value, args.number_rows, |values| values_as_text(values).ok_or_else(|| DataFusionError::Internal(format!("{PG_TEXT} of {}", values.data_type()))))
    }
}

/// A `double precision` as PostgreSQL prints it; exponent form from
/// `1e<exponent_from>` up.
pub(crate) fn float8(value: f64, exponent_from: i32) -> String {
    if value.is_nan() {
        return "NaN".into();
    }
    if value.is_infinite() {
        return if value > 0.0 { "Infinity".into() } else { "-Infinity".into() };
    }
    shortest(format!("{value:e}"), || format!("{value}"), value == 0.0, exponent_from)
}

/// A `real`: its own shortest digits, exponent form from 1e6 up.
pub(crate) fn float4(value: f32) -> String {
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
    use crate::exec::timestamp_text::timestamp;

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

    // PostgreSQL 15's output.
    #[test]
    fn arrays_print_as_postgresql_prints_them() {
        use arrow::array::{BooleanArray, Float64Array, Int64Array, ListArray, StringArray as Texts};
        use arrow::buffer::OffsetBuffer;
        use arrow::datatypes::Field;
        let list = |values: ArrayRef, offsets: Vec<i32>, nulls: Option<Vec<bool>>| -> ArrayRef {
            let field = Arc::new(Field::new("item", values.data_type().clone(), true));
            Arc::new(ListArray::new(field, OffsetBuffer::new(offsets.into()), values, nulls.map(Into::into)))
        };
        let texts = |column: &ArrayRef| -> Vec<Option<String>> { values_as_text(column).unwrap().as_string::<i32>().iter().map(|v| v.map(str::to_string)).collect() };
        let words: ArrayRef = Arc::new(Texts::from(vec![Some("a b"), Some("x\"y"), None, Some(""), Some("null"), Some("c,d"), Some("back\\slash"), Some("{}"), Some("plain")]));
        assert_eq!(texts(&list(words, vec![0, 9, 9, 9], Some(vec![true, true, false]))), [Some(r#"{"a b","x\"y",NULL,"","null","c,d","back\\slash","{}",plain}"#.to_string()), Some("{}".into()), None]);
        let floats: ArrayRef = Arc::new(Float64Array::from(vec![1.5, 1e20, f64::INFINITY]));
        assert_eq!(texts(&list(floats, vec![0, 3], None)), [Some("{1.5,1e+20,Infinity}".to_string())]);
        let booleans: ArrayRef = Arc::new(BooleanArray::from(vec![true, false]));
        assert_eq!(texts(&list(booleans, vec![0, 2], None)), [Some("{t,f}".to_string())]);
        let numbers: ArrayRef = Arc::new(Int64Array::from(vec![1, 2, 3, 4]));
        let matrix = list(list(numbers, vec![0, 2, 4], None), vec![0, 2], None);
        assert_eq!(texts(&matrix), [Some("{{1,2},{3,4}}".to_string())]);
    }
}
