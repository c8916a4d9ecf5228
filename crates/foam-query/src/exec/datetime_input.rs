//! PostgreSQL's input formats for dates, times and timestamps, read by every
//! cast of text to one of those types (`'2024-01-01 10:30'::timestamp`,
//! `DATE 'Jan 5, 2024'`, the casts an INSERT or a comparison adds;
//! `optimizer/logical/text_casts.rs`) and by COPY. Arrow's parser takes ISO
//! 8601 with seconds only, so `'2024-01-01 10:30'` was refused.
//!
//! Read as PostgreSQL's `DecodeDateTime` reads them, with its default
//! `DateStyle` (ISO, MDY):
//!
//! ```text
//!   dates   2024-01-05  2024/1/5  2024.01.05  20240105  1/5/2024 (month first)
//!           Jan 5, 2024  5 January 24  2024-Jan-05  05-Jan-2024  Friday Jan 5 2024
//!   times   10:30  10:30:15  10:30:15.123456  10:30 PM  24:00  23:59:60
//!   zones   Z  UTC  GMT  +02  -05:30  +0530  America/New_York  EST
//!   also    T between date and time, AD/BC, epoch, now, today, tomorrow,
//!           yesterday, allballs (midnight)
//! ```
//!
//! A zone in the input moves a timestamp to UTC; without one, a
//! `timestamptz` is local time in its type's zone (the session's TimeZone,
//! `frontend/time_zone.rs`), as PostgreSQL reads it. A `timestamp` with a
//! zone in its text is moved to UTC too, where PostgreSQL's would ignore
//! the zone. A date ignores it, as PostgreSQL's. Fractions are
//! rounded to microseconds, PostgreSQL's precision. `infinity` has no Arrow
//! value and is refused (0A000) rather than stored as some far date.

use std::str::FromStr;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, IntervalMonthDayNanoArray, PrimitiveArray};
use arrow::datatypes::{
    ArrowPrimitiveType, DataType, Date32Type, IntervalUnit, Date64Type, Time32MillisecondType, Time32SecondType, Time64MicrosecondType, Time64NanosecondType,
    TimeUnit, TimestampMicrosecondType, TimestampMillisecondType, TimestampNanosecondType, TimestampSecondType,
};
use chrono::{Datelike, Duration, NaiveDate, NaiveDateTime, NaiveTime, Offset, TimeZone, Timelike};
use foam_common::{FoamError, SqlState};

/// Microseconds in a day and in a second.
const DAY_MICROS: i64 = 86_400_000_000;
const SECOND_MICROS: i64 = 1_000_000;

/// Whether `data_type` is one this module reads text into.
/// Intervals are read by `interval_input.rs`.
pub fn is_datetime(data_type: &DataType) -> bool {
    matches!(
        data_type,
        DataType::Date32
            | DataType::Date64
            | DataType::Time32(_)
            | DataType::Time64(_)
            | DataType::Timestamp(..)
            | DataType::Interval(IntervalUnit::MonthDayNano)
    )
}

/// Why a text is not a value of the type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputError {
    /// Not a date/time at all (22007).
    Syntax,
    /// A field out of its range: month 13, February 30, hour 25 (22008).
    FieldRange,
    /// A valid date/time the type cannot hold (22008).
    TypeRange,
    /// `infinity`, which Arrow's types cannot hold (0A000).
    Infinity,
}

impl InputError {
    /// PostgreSQL's error for `text` as a value of `data_type`.
    pub fn to_error(self, text: &str, data_type: &DataType) -> FoamError {
        let name = type_name(data_type);
        let interval = matches!(data_type, DataType::Interval(_));
        let (message, sqlstate) = match self {
            InputError::FieldRange | InputError::TypeRange if interval => (format!("interval field value out of range: \"{text}\""), SqlState::IntervalFieldOverflow),
            InputError::Syntax => (format!("invalid input syntax for type {name}: \"{text}\""), SqlState::InvalidDatetimeFormat),
            InputError::FieldRange => (format!("date/time field value out of range: \"{text}\""), SqlState::DatetimeFieldOverflow),
            InputError::TypeRange => (format!("{} out of range: \"{text}\"", name.split(' ').next().unwrap_or(name)), SqlState::DatetimeFieldOverflow),
            InputError::Infinity => (format!("{name} \"{}\" is not supported", text.trim()), SqlState::FeatureNotSupported),
        };
        FoamError::Query { message, sqlstate }
    }
}

/// The type as PostgreSQL names it in its messages.
fn type_name(data_type: &DataType) -> &'static str {
    match data_type {
        DataType::Date32 | DataType::Date64 => "date",
        DataType::Time32(_) | DataType::Time64(_) => "time",
        DataType::Timestamp(_, Some(_)) => "timestamp with time zone",
        DataType::Interval(_) => "interval",
        _ => "timestamp",
    }
}

/// A zone written in the input.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Zone {
    /// Seconds east of UTC.
    Fixed(i32),
    Named(chrono_tz::Tz),
}

/// What a text holds, before it is made a value of one type.
#[derive(Debug, Default, PartialEq)]
struct Fields {
    date: Option<NaiveDate>,
    /// Microseconds since midnight; a whole day for `24:00`.
    time: Option<i64>,
    zone: Option<Zone>,
}

/// `text` as a value of `data_type` in that type's own unit (days,
/// seconds, milli-, micro- or nanoseconds); `now` is the statement's time
/// in UTC, for `now`, `today`, `tomorrow` and `yesterday`.
pub fn parse_value(text: &str, data_type: &DataType, now: NaiveDateTime) -> Result<i64, InputError> {
    let fields = parse_fields(text, now)?;
    match data_type {
        DataType::Date32 | DataType::Date64 => {
            let date = fields.date.ok_or(InputError::Syntax)?;
            let days = i64::from(date.num_days_from_ce() - EPOCH_DAYS_FROM_CE);
            if matches!(data_type, DataType::Date32) { Ok(days) } else { days.checked_mul(DAY_MICROS / 1000).ok_or(InputError::TypeRange) }
        }
        DataType::Time32(unit) | DataType::Time64(unit) => {
            let time = fields.time.ok_or(InputError::Syntax)?;
            // `24:00` is a time of its own.
            if time > DAY_MICROS {
                return Err(InputError::FieldRange);
            }
            in_unit(time, unit)
        }
        DataType::Timestamp(unit, zone) => {
            let date = fields.date.ok_or(InputError::Syntax)?;
            let local = i64::from(date.num_days_from_ce() - EPOCH_DAYS_FROM_CE)
                .checked_mul(DAY_MICROS)
                .and_then(|micros| micros.checked_add(fields.time.unwrap_or(0)))
                .ok_or(InputError::TypeRange)?;
            // FoamDB's timestamps are UTC instants (`timestamptz` is held as
            // `timestamp` and TimeZone is UTC), so a zone moves the value.
            let micros = match (zone, fields.zone) {
                (None, None) => local,
                (target, input) => local - offset_micros(local, input, target.as_deref().unwrap_or("+00:00"))?,
            };
            in_unit(micros, unit)
        }
        _ => Err(InputError::Syntax),
    }
}

/// The time now in UTC, what `now`, `today`, `tomorrow` and `yesterday`
/// read.
pub fn now_utc() -> NaiveDateTime {
    chrono::DateTime::<chrono::Utc>::from(std::time::SystemTime::now()).naive_utc()
}

/// Days from 0001-01-01 (day 1) to 1970-01-01.
const EPOCH_DAYS_FROM_CE: i32 = 719_163;

/// Microseconds `value` in `unit`; seconds and milliseconds truncate
/// towards the past, as Arrow's do.
fn in_unit(micros: i64, unit: &TimeUnit) -> Result<i64, InputError> {
    match unit {
        TimeUnit::Second => Ok(micros.div_euclid(SECOND_MICROS)),
        TimeUnit::Millisecond => Ok(micros.div_euclid(1000)),
        TimeUnit::Microsecond => Ok(micros),
        TimeUnit::Nanosecond => micros.checked_mul(1000).ok_or(InputError::TypeRange),
    }
}

/// The offset from UTC, in microseconds, of local time `local` (microseconds
/// since the epoch) in the input's zone, or when it names none, in the
/// type's zone (`target`, an Arrow zone: `+00:00` or an IANA name).
fn offset_micros(local: i64, input: Option<Zone>, target: &str) -> Result<i64, InputError> {
    let naive = chrono::DateTime::from_timestamp_micros(local).ok_or(InputError::TypeRange)?.naive_utc();
    let seconds = match input {
        Some(Zone::Fixed(seconds)) => seconds,
        Some(Zone::Named(zone)) => local_offset(&zone, &naive)?,
        None => {
            let zone = arrow::array::timezone::Tz::from_str(target).map_err(|_| InputError::Syntax)?;
            local_offset(&zone, &naive)?
        }
    };
    Ok(i64::from(seconds) * SECOND_MICROS)
}

/// The offset of local time `naive` in `zone`; a time skipped by a change
/// to summer time takes the offset before the change, and one repeated by
/// the change back the offset after it, as PostgreSQL's.
fn local_offset<Z: TimeZone>(zone: &Z, naive: &NaiveDateTime) -> Result<i32, InputError> {
    let resolved = zone.offset_from_local_datetime(naive).latest().or_else(|| zone.offset_from_local_datetime(&(*naive - Duration::hours(1))).earliest());
    resolved.map(|offset| offset.fix().local_minus_utc()).ok_or(InputError::FieldRange)
}

/// The fields of `text` (see the module documentation).
fn parse_fields(text: &str, now: NaiveDateTime) -> Result<Fields, InputError> {
    // Every word and number PostgreSQL reads here is ASCII.
    if !text.is_ascii() {
        return Err(InputError::Syntax);
    }
    let lower = text.trim().to_ascii_lowercase();
    if matches!(lower.as_str(), "infinity" | "+infinity" | "-infinity") {
        return Err(InputError::Infinity);
    }
    let mut fields = Fields::default();
    let mut month_name: Option<u32> = None;
    let mut numbers: Vec<&str> = Vec::new();
    let mut meridiem: Option<bool> = None; // Some(true) for PM
    let mut before_christ = false;
    let tokens = tokens(&lower);
    if tokens.is_empty() {
        return Err(InputError::Syntax);
    }
    for token in &tokens {
        let token = token.as_str();
        let first = token.as_bytes()[0];
        if first.is_ascii_digit() {
            if token.contains(':') {
                let (time, rest) = split_time(token);
                set(&mut fields.time, time_of(time)?)?;
                match rest {
                    "" => {}
                    "z" => set(&mut fields.zone, Zone::Fixed(0))?,
                    "am" | "pm" => meridiem = Some(rest == "pm"),
                    offset => set(&mut fields.zone, Zone::Fixed(offset_of(offset)?))?,
                }
            } else if let Some(separator) = token.chars().find(|c| matches!(c, '-' | '/' | '.')) {
                set(&mut fields.date, date_of(token.split(separator).collect::<Vec<_>>().as_slice())?)?;
            } else if token.len() == 8 && fields.date.is_none() && month_name.is_none() {
                let digits = |range: std::ops::Range<usize>| token[range].parse::<u32>().map_err(|_| InputError::Syntax);
                set(&mut fields.date, ymd(i64::from(digits(0..4)?), digits(4..6)?, digits(6..8)?)?)?;
            } else {
                numbers.push(token);
            }
        } else if (first == b'+' || first == b'-') && token.len() > 1 {
            set(&mut fields.zone, Zone::Fixed(offset_of(token)?))?;
        } else {
            match token {
                "am" | "pm" => meridiem = Some(token == "pm"),
                "ad" => {}
                "bc" => before_christ = true,
                "z" | "zulu" | "utc" | "gmt" | "ut" => set(&mut fields.zone, Zone::Fixed(0))?,
                "epoch" => {
                    set(&mut fields.date, NaiveDate::from_ymd_opt(1970, 1, 1).ok_or(InputError::TypeRange)?)?;
                    set(&mut fields.time, 0)?;
                }
                "now" => {
                    set(&mut fields.date, now.date())?;
                    set(&mut fields.time, micros_of_day(&now.time()))?;
                    // `now` is UTC's: an instant in any session zone.
                    set(&mut fields.zone, Zone::Fixed(0))?;
                }
                "today" => set(&mut fields.date, now.date())?,
                "tomorrow" => set(&mut fields.date, now.date().succ_opt().ok_or(InputError::TypeRange)?)?,
                "yesterday" => set(&mut fields.date, now.date().pred_opt().ok_or(InputError::TypeRange)?)?,
                "allballs" => set(&mut fields.time, 0)?,
                _ if weekday(token) => {}
                _ => {
                    if let Some(month) = month(token) {
                        set(&mut month_name, month)?;
                    } else if token.contains('-') && token.split('-').count() == 3 {
                        // `jan-05-2024`
                        set(&mut fields.date, date_of(token.split('-').collect::<Vec<_>>().as_slice())?)?;
                    } else {
                        let zone = chrono_tz::TZ_VARIANTS.iter().find(|zone| zone.name().eq_ignore_ascii_case(token)).ok_or(InputError::Syntax)?;
                        set(&mut fields.zone, Zone::Named(*zone))?;
                    }
                }
            }
        }
    }
    if let Some(month) = month_name {
        let [a, b] = numbers.as_slice() else { return Err(InputError::Syntax) };
        // The year is the number of more than two digits, else the second.
        let (day, year) = if a.len() > 2 { (b, a) } else { (a, b) };
        let day = day.parse::<u32>().map_err(|_| InputError::Syntax)?;
        set(&mut fields.date, ymd(year_of(year)?, month, day)?)?;
    } else if !numbers.is_empty() {
        return Err(InputError::Syntax);
    }
    if let Some(pm) = meridiem {
        let time = fields.time.ok_or(InputError::Syntax)?;
        let hour = time / 3_600_000_000;
        if hour > 12 {
            return Err(InputError::FieldRange);
        }
        let hour_micros = 3_600_000_000;
        fields.time = Some(match (pm, hour) {
            (false, 12) => time - 12 * hour_micros,
            (true, 12) | (false, _) => time,
            (true, _) => time + 12 * hour_micros,
        });
    }
    if before_christ {
        let date = fields.date.ok_or(InputError::Syntax)?;
        fields.date = Some(NaiveDate::from_ymd_opt(1 - date.year(), date.month(), date.day()).ok_or(InputError::FieldRange)?);
    }
    // `24:00` and a leap second `23:59:60` stay past the day's end: a
    // timestamp counts them into the next day, a time keeps `24:00:00`.
    Ok(fields)
}

/// A field given twice (`2024-01-01 2024-01-02`) is not a date/time.
fn set<T>(slot: &mut Option<T>, value: T) -> Result<(), InputError> {
    if slot.is_some() {
        return Err(InputError::Syntax);
    }
    *slot = Some(value);
    Ok(())
}

/// The words of `lower`, split at spaces and commas and at a `T` between a
/// date and a time.
fn tokens(lower: &str) -> Vec<String> {
    let bytes = lower.as_bytes();
    let mut tokens = Vec::new();
    let mut current = String::new();
    for (at, c) in lower.char_indices() {
        let iso_t = c == 't' && at > 0 && bytes[at - 1].is_ascii_digit() && bytes.get(at + 1).is_some_and(u8::is_ascii_digit);
        if c.is_whitespace() || c == ',' || iso_t {
            if !current.is_empty() {
                tokens.push(std::mem::take(&mut current));
            }
        } else {
            current.push(c);
        }
    }
    if !current.is_empty() {
        tokens.push(current);
    }
    tokens
}

/// A time token split into the time and what follows it: a zone offset
/// (`+02`, `-05:30`), `z`, `am` or `pm`.
fn split_time(token: &str) -> (&str, &str) {
    let end = token.find(|c: char| !(c.is_ascii_digit() || c == ':' || c == '.')).unwrap_or(token.len());
    token.split_at(end)
}

/// `h:m`, `h:m:s` or `h:m:s.f` in microseconds since midnight.
fn time_of(text: &str) -> Result<i64, InputError> {
    let parts: Vec<&str> = text.split(':').collect();
    let number = |part: &str| if part.is_empty() || part.len() > 2 { Err(InputError::Syntax) } else { part.parse::<i64>().map_err(|_| InputError::Syntax) };
    let (hour, minute, second_text) = match parts.as_slice() {
        [hour, minute] => (number(hour)?, number(minute)?, None),
        [hour, minute, second] => (number(hour)?, number(minute)?, Some(*second)),
        _ => return Err(InputError::Syntax),
    };
    let (second, micros) = match second_text {
        None => (0, 0),
        Some(text) => {
            let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
            (number(whole)?, fraction_micros(fraction)?)
        }
    };
    let in_range = (hour < 24 && minute < 60 && second <= 60) || (hour == 24 && minute == 0 && second == 0 && micros == 0);
    if !in_range {
        return Err(InputError::FieldRange);
    }
    Ok(((hour * 60 + minute) * 60 + second) * SECOND_MICROS + micros)
}

/// The digits after a decimal point in microseconds, rounded half up.
fn fraction_micros(digits: &str) -> Result<i64, InputError> {
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(InputError::Syntax);
    }
    let kept = &digits.as_bytes()[..digits.len().min(6)];
    let micros = kept.iter().fold(0i64, |micros, digit| micros * 10 + i64::from(digit - b'0')) * 10i64.pow(6 - kept.len() as u32);
    let round_up = digits.as_bytes().get(6).is_some_and(|digit| *digit >= b'5');
    Ok(micros + i64::from(round_up))
}

/// `+hh`, `-hh:mm`, `+hhmm`, `+hh:mm:ss` in seconds east of UTC.
fn offset_of(text: &str) -> Result<i32, InputError> {
    let (sign, rest) = match text.as_bytes().first() {
        Some(b'+') => (1, &text[1..]),
        Some(b'-') => (-1, &text[1..]),
        _ => return Err(InputError::Syntax),
    };
    let number = |part: &str| if part.is_empty() || part.len() > 2 { Err(InputError::Syntax) } else { part.parse::<i32>().map_err(|_| InputError::Syntax) };
    let parts: Vec<&str> = rest.split(':').collect();
    let (hours, minutes, seconds) = match parts.as_slice() {
        [both] if both.len() == 4 => (number(&both[..2])?, number(&both[2..])?, 0),
        [hours] => (number(hours)?, 0, 0),
        [hours, minutes] => (number(hours)?, number(minutes)?, 0),
        [hours, minutes, seconds] => (number(hours)?, number(minutes)?, number(seconds)?),
        _ => return Err(InputError::Syntax),
    };
    if hours > 15 || minutes > 59 || seconds > 59 {
        return Err(InputError::FieldRange);
    }
    Ok(sign * (hours * 3600 + minutes * 60 + seconds))
}

/// A date of three parts split at `-`, `/` or `.`: year first when the
/// first has more than two digits, day first when the second is a month
/// name, else month first (`DateStyle` MDY).
fn date_of(parts: &[&str]) -> Result<NaiveDate, InputError> {
    let [a, b, c] = parts else { return Err(InputError::Syntax) };
    let number = |part: &str| part.parse::<u32>().map_err(|_| InputError::Syntax);
    let month_of = |part: &str| month(part).map_or_else(|| number(part), Ok);
    if a.len() > 2 && a.bytes().all(|b| b.is_ascii_digit()) {
        ymd(year_of(a)?, month_of(b)?, number(c)?)
    } else if month(b).is_some() {
        ymd(year_of(c)?, month_of(b)?, number(a)?)
    } else {
        ymd(year_of(c)?, month_of(a)?, number(b)?)
    }
}

/// A year as written: two digits are 1970–2069, as PostgreSQL reads them.
fn year_of(text: &str) -> Result<i64, InputError> {
    let year = text.parse::<i64>().map_err(|_| InputError::Syntax)?;
    Ok(match text.len() {
        1 | 2 if year < 70 => year + 2000,
        1 | 2 => year + 1900,
        _ => year,
    })
}

fn ymd(year: i64, month: u32, day: u32) -> Result<NaiveDate, InputError> {
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return Err(InputError::FieldRange);
    }
    let year = i32::try_from(year).map_err(|_| InputError::TypeRange)?;
    if year == 0 {
        return Err(InputError::FieldRange);
    }
    match NaiveDate::from_ymd_opt(year, month, day) {
        Some(date) => Ok(date),
        // A day past its month's end, or a year beyond chrono's.
        None if NaiveDate::from_ymd_opt(year, month, 1).is_some() => Err(InputError::FieldRange),
        None => Err(InputError::TypeRange),
    }
}

fn micros_of_day(time: &NaiveTime) -> i64 {
    i64::from(time.num_seconds_from_midnight()) * SECOND_MICROS + i64::from(time.nanosecond() / 1000)
}

const MONTHS: [&str; 12] = ["january", "february", "march", "april", "may", "june", "july", "august", "september", "october", "november", "december"];

/// The month a name or its abbreviation (`jan`, `sept`) names.
fn month(word: &str) -> Option<u32> {
    if word.len() < 3 {
        return None;
    }
    MONTHS.iter().position(|name| name.starts_with(word)).map(|at| at as u32 + 1)
}

/// Whether `word` names a day of the week (`mon`, `tues`, `thursday`).
fn weekday(word: &str) -> bool {
    const DAYS: [&str; 7] = ["sunday", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday"];
    word.len() >= 3 && DAYS.iter().any(|name| name.starts_with(word))
}

/// Each text of `texts` (any string array) as a value of `data_type`;
/// a NULL stays NULL. The first text that is no such value is the error,
/// with its row.
pub fn cast_texts(texts: &dyn Array, data_type: &DataType, now: NaiveDateTime) -> Result<ArrayRef, (usize, InputError)> {
    if matches!(data_type, DataType::Interval(IntervalUnit::MonthDayNano)) {
        let intervals = string_values(texts)
            .enumerate()
            .map(|(row, text)| text.map(|text| crate::exec::interval_input::parse_interval(text).map_err(|error| (row, error))).transpose())
            .collect::<Result<IntervalMonthDayNanoArray, _>>()?;
        return Ok(Arc::new(intervals));
    }
    let values: Vec<Option<i64>> = string_values(texts)
        .enumerate()
        .map(|(row, text)| text.map(|text| parse_value(text, data_type, now).map_err(|error| (row, error))).transpose())
        .collect::<Result<_, _>>()?;
    let narrow = |value: i64| i32::try_from(value).map_err(|_| InputError::TypeRange);
    let array: ArrayRef = match data_type {
        DataType::Date32 => Arc::new(narrowed::<Date32Type>(&values, narrow)?),
        DataType::Time32(TimeUnit::Second) => Arc::new(narrowed::<Time32SecondType>(&values, narrow)?),
        DataType::Time32(_) => Arc::new(narrowed::<Time32MillisecondType>(&values, narrow)?),
        DataType::Date64 => Arc::new(values.into_iter().collect::<PrimitiveArray<Date64Type>>()),
        DataType::Time64(TimeUnit::Nanosecond) => Arc::new(values.into_iter().collect::<PrimitiveArray<Time64NanosecondType>>()),
        DataType::Time64(_) => Arc::new(values.into_iter().collect::<PrimitiveArray<Time64MicrosecondType>>()),
        DataType::Timestamp(unit, zone) => match unit {
            TimeUnit::Second => Arc::new(values.into_iter().collect::<PrimitiveArray<TimestampSecondType>>().with_timezone_opt(zone.clone())),
            TimeUnit::Millisecond => Arc::new(values.into_iter().collect::<PrimitiveArray<TimestampMillisecondType>>().with_timezone_opt(zone.clone())),
            TimeUnit::Microsecond => Arc::new(values.into_iter().collect::<PrimitiveArray<TimestampMicrosecondType>>().with_timezone_opt(zone.clone())),
            TimeUnit::Nanosecond => Arc::new(values.into_iter().collect::<PrimitiveArray<TimestampNanosecondType>>().with_timezone_opt(zone.clone())),
        },
        _ => return Err((0, InputError::Syntax)),
    };
    Ok(array)
}

/// 32-bit values of `values`, or the row of the first that does not fit.
fn narrowed<T: ArrowPrimitiveType<Native = i32>>(
    values: &[Option<i64>],
    narrow: impl Fn(i64) -> Result<i32, InputError>,
) -> Result<PrimitiveArray<T>, (usize, InputError)> {
    values.iter().enumerate().map(|(row, value)| value.map(&narrow).transpose().map_err(|error| (row, error))).collect()
}

/// The texts of a Utf8, LargeUtf8 or Utf8View array.
fn string_values(texts: &dyn Array) -> Box<dyn Iterator<Item = Option<&str>> + '_> {
    match texts.data_type() {
        DataType::Utf8 => Box::new(texts.as_string::<i32>().iter()),
        DataType::LargeUtf8 => Box::new(texts.as_string::<i64>().iter()),
        DataType::Utf8View => Box::new(texts.as_string_view().iter()),
        _ => Box::new(std::iter::repeat_n(None, texts.len())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> NaiveDateTime {
        NaiveDate::from_ymd_opt(2026, 12, 6).unwrap().and_hms_opt(22, 40, 0).unwrap()
    }

    /// `text` as a timestamp (without zone) shown as chrono shows it.
    fn timestamp(text: &str) -> Result<String, InputError> {
        let micros = parse_value(text, &DataType::Timestamp(TimeUnit::Microsecond, None), now())?;
        Ok(chrono::DateTime::from_timestamp_micros(micros).unwrap().naive_utc().to_string())
    }

    fn utc(text: &str) -> Result<String, InputError> {
        let micros = parse_value(text, &DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into())), now())?;
        Ok(chrono::DateTime::from_timestamp_micros(micros).unwrap().naive_utc().to_string())
    }

    fn date(text: &str) -> Result<String, InputError> {
        let days = parse_value(text, &DataType::Date32, now())?;
        Ok((NaiveDate::from_ymd_opt(1970, 1, 1).unwrap() + Duration::days(days)).to_string())
    }

    fn time(text: &str) -> Result<String, InputError> {
        let micros = parse_value(text, &DataType::Time64(TimeUnit::Microsecond), now())?;
        Ok(format!("{:02}:{:02}:{:02}.{:06}", micros / 3_600_000_000, micros / 60_000_000 % 60, micros / SECOND_MICROS % 60, micros % SECOND_MICROS))
    }

    // The answers are PostgreSQL 15's, with TimeZone UTC.
    #[test]
    fn timestamps_read_as_postgresql_reads_them() {
        for (text, expected) in [
            ("2024-01-01 10:30", "2024-01-01 10:30:00"),
            ("2024-01-01T10:30Z", "2024-01-01 10:30:00"),
            ("2024-01-01 10:30 +02", "2024-01-01 08:30:00"),
            ("2024-01-01 24:00", "2024-01-02 00:00:00"),
            ("2024-01-01 23:59:60", "2024-01-02 00:00:00"),
            ("2024-01-01 10:30:15.1234567", "2024-01-01 10:30:15.123457"),
            ("Monday, January 8, 2024 10:30 PM", "2024-01-08 22:30:00"),
            ("2024-1-5 1:2:3", "2024-01-05 01:02:03"),
            ("2024-01-01 10:30:00.5 pm", "2024-01-01 22:30:00.500"),
            ("2024-01-01 allballs", "2024-01-01 00:00:00"),
            ("today 10:30", "2026-12-06 10:30:00"),
            ("epoch", "1970-01-01 00:00:00"),
            ("  2024-01-01  ", "2024-01-01 00:00:00"),
        ] {
            assert_eq!(timestamp(text).as_deref(), Ok(expected), "{text}");
        }
    }

    #[test]
    fn zones_move_a_timestamp_with_time_zone_to_utc() {
        for (text, expected) in [
            ("2024-01-01 10:30 America/New_York", "2024-01-01 15:30:00"),
            ("2024-07-01 10:30 america/new_york", "2024-07-01 14:30:00"),
            ("2024-01-01 10:30 est", "2024-01-01 15:30:00"),
            ("2024-01-01 10:30+05:30", "2024-01-01 05:00:00"),
            ("2024-01-01 10:30 +15", "2023-12-31 19:30:00"),
            ("2024-01-01 10:30-0130", "2024-01-01 12:00:00"),
            ("2024-11-03 01:30 America/New_York", "2024-11-03 06:30:00"),
            ("2024-01-01 10:30", "2024-01-01 10:30:00"),
        ] {
            assert_eq!(utc(text).as_deref(), Ok(expected), "{text}");
        }
    }

    #[test]
    fn dates_read_as_postgresql_reads_them() {
        for (text, expected) in [
            ("Jan 5 2024", "2024-01-05"),
            ("5 Jan 24", "2024-01-05"),
            ("1/2/2024", "2024-01-02"),
            ("19990108", "1999-01-08"),
            ("2024.01.05", "2024-01-05"),
            ("1-Jan-2024", "2024-01-01"),
            ("2024-Jan-01", "2024-01-01"),
            ("jan-01-2024", "2024-01-01"),
            ("08-Jan-99", "1999-01-08"),
            ("0044-03-15 BC", "-0043-03-15"),
            ("10000-01-01", "+10000-01-01"),
            ("epoch", "1970-01-01"),
            ("tomorrow", "2026-12-07"),
            ("2024-01-01 23:00-05", "2024-01-01"),
        ] {
            assert_eq!(date(text).as_deref(), Ok(expected), "{text}");
        }
    }

    #[test]
    fn times_read_as_postgresql_reads_them() {
        for (text, expected) in [
            ("10:30", "10:30:00.000000"),
            ("12:30 am", "00:30:00.000000"),
            ("12:30 pm", "12:30:00.000000"),
            ("0:30 am", "00:30:00.000000"),
            ("2024-01-01 24:00", "24:00:00.000000"),
            ("allballs", "00:00:00.000000"),
            ("2024-01-01 10:30:15.25", "10:30:15.250000"),
            ("24:00", "24:00:00.000000"),
        ] {
            assert_eq!(time(text).as_deref(), Ok(expected), "{text}");
        }
    }

    #[test]
    fn bad_input_is_named_as_postgresql_names_it() {
        for (text, expected) in [
            ("garbage", InputError::Syntax),
            ("", InputError::Syntax),
            ("2024-01-01 10", InputError::Syntax),
            ("2024-01-01 10:30 foo", InputError::Syntax),
            ("Jan 5", InputError::Syntax),
            ("10:30", InputError::Syntax),
            ("2024-01-01 2024-01-02", InputError::Syntax),
            ("2024-02-30", InputError::FieldRange),
            ("13/2/2024", InputError::FieldRange),
            ("99-01-08", InputError::FieldRange),
            ("2024-01-01 25:00", InputError::FieldRange),
            ("2024-01-01 10:61", InputError::FieldRange),
            ("2024-01-01 13:30 pm", InputError::FieldRange),
            ("infinity", InputError::Infinity),
            ("-infinity", InputError::Infinity),
            ("123\u{e9}456", InputError::Syntax),
            ("2024-01-01 10:30+1\u{e9}2", InputError::Syntax),
        ] {
            assert_eq!(timestamp(text), Err(expected), "{text}");
        }
        assert_eq!(time("2024-01-01"), Err(InputError::Syntax));
        assert_eq!(date("10:30"), Err(InputError::Syntax));
        let nanos = parse_value("2300-01-01", &DataType::Timestamp(TimeUnit::Nanosecond, None), now());
        assert_eq!(nanos, Err(InputError::TypeRange));
        let message = InputError::Syntax.to_error("x", &DataType::Date32).to_string();
        assert!(message.contains("invalid input syntax for type date: \"x\""), "{message}");
    }

    #[test]
    fn arrays_keep_nulls_and_name_the_first_bad_row() {
        let texts = arrow::array::StringViewArray::from(vec![Some("2024-01-01 10:30"), None, Some("Jan 5 2024")]);
        let cast = cast_texts(&texts, &DataType::Timestamp(TimeUnit::Microsecond, None), now()).unwrap();
        assert_eq!(cast.null_count(), 1);
        assert_eq!(cast.as_primitive::<TimestampMicrosecondType>().value(2), 1_704_412_800_000_000);
        let bad = arrow::array::StringArray::from(vec![Some("2024-01-01"), Some("nope")]);
        assert_eq!(cast_texts(&bad, &DataType::Date32, now()).unwrap_err(), (1, InputError::Syntax));
    }
}
