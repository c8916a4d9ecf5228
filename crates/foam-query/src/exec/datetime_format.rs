//! PostgreSQL's template patterns for `to_char(timestamp, 'YYYY-MM-DD')`,
//! `to_date(text, pattern)` and `to_timestamp(text, pattern)`. DataFusion's
//! functions of those names take chrono's `%Y-%m-%d`, so a PostgreSQL
//! pattern came back as itself (`to_char(ts, 'YYYY-MM')` answered
//! `YYYY-MM`) or failed to parse; FoamDB's functions replace them.
//!
//! The patterns read as PostgreSQL's (case-insensitive, longest first;
//! the case of a name pattern is the case of the name):
//!
//! ```text
//!   years     YYYY YYY YY Y Y,YYY IYYY CC BC AD B.C. A.D.
//!   months    MM MONTH Month month MON Mon mon RM Q
//!   days      DD DDD D ID DAY Day day DY Dy dy IDDD J W WW IW
//!   times     HH HH12 HH24 MI SS MS US FF1..FF6 SSSS SSSSS AM PM A.M. P.M.
//!   zones     TZ OF TZH TZM (FoamDB's timestamps are UTC)
//!   modifiers FM (no padding) TH th (ordinal) FX TM (accepted, no effect)
//!   "text"    copied; any other character copied too
//! ```
//!
//! Parsing reads each numeric field's digits up to its width, names of
//! months and days in any case, and skips one separator of the input for
//! each separator of the pattern; what is missing is PostgreSQL's default
//! (1 BC, January, day 1, midnight).

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Date32Array, StringArray, TimestampMicrosecondArray};
use arrow::datatypes::{DataType, TimeUnit};
use chrono::{Datelike, NaiveDate, NaiveDateTime, Timelike};
use datafusion::common::config::ConfigOptions;
use datafusion::common::{DataFusionError, Result, ScalarValue};
use datafusion::logical_expr::{ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility};
use foam_common::{FoamError, SqlState};

use crate::exec::function_values::answered;

/// One numeric or named field of a pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    YearComma,
    Year4,
    Year3,
    Year2,
    Year1,
    IsoYear,
    Century,
    Era { dots: bool },
    Month,
    MonthName,
    MonthAbbrev,
    RomanMonth,
    Quarter,
    Day,
    DayOfYear,
    DayOfWeek,
    IsoDayOfWeek,
    IsoDayOfYear,
    DayName,
    DayAbbrev,
    Julian,
    WeekOfMonth,
    WeekOfYear,
    IsoWeek,
    Hour12,
    Hour24,
    Minute,
    Second,
    Millis,
    Micros,
    Fraction(u8),
    SecondsOfDay,
    Meridiem { dots: bool },
    Zone,
    Offset,
    OffsetHours,
    OffsetMinutes,
}

/// How a name is written: as the pattern's letters are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Case {
    Upper,
    Capital,
    Lower,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Item {
    Field { field: Field, case: Case, fill: bool, ordinal: Option<Case> },
    Text(String),
}

/// The patterns, longest first where one begins another.
const PATTERNS: &[(&str, Field)] = &[
    ("Y,YYY", Field::YearComma),
    ("YYYY", Field::Year4),
    ("YYY", Field::Year3),
    ("YY", Field::Year2),
    ("Y", Field::Year1),
    ("IYYY", Field::IsoYear),
    ("IDDD", Field::IsoDayOfYear),
    ("ID", Field::IsoDayOfWeek),
    ("IW", Field::IsoWeek),
    ("CC", Field::Century),
    ("B.C.", Field::Era { dots: true }),
    ("A.D.", Field::Era { dots: true }),
    ("BC", Field::Era { dots: false }),
    ("AD", Field::Era { dots: false }),
    ("MONTH", Field::MonthName),
    ("MON", Field::MonthAbbrev),
    ("MM", Field::Month),
    ("MI", Field::Minute),
    ("MS", Field::Millis),
    ("RM", Field::RomanMonth),
    ("Q", Field::Quarter),
    ("DDD", Field::DayOfYear),
    ("DD", Field::Day),
    ("DAY", Field::DayName),
    ("DY", Field::DayAbbrev),
    ("D", Field::DayOfWeek),
    ("J", Field::Julian),
    ("WW", Field::WeekOfYear),
    ("W", Field::WeekOfMonth),
    ("HH24", Field::Hour24),
    ("HH12", Field::Hour12),
    ("HH", Field::Hour12),
    ("SSSSS", Field::SecondsOfDay),
    ("SSSS", Field::SecondsOfDay),
    ("SS", Field::Second),
    ("US", Field::Micros),
    ("FF1", Field::Fraction(1)),
    ("FF2", Field::Fraction(2)),
    ("FF3", Field::Fraction(3)),
    ("FF4", Field::Fraction(4)),
    ("FF5", Field::Fraction(5)),
    ("FF6", Field::Fraction(6)),
    ("A.M.", Field::Meridiem { dots: true }),
    ("P.M.", Field::Meridiem { dots: true }),
    ("AM", Field::Meridiem { dots: false }),
    ("PM", Field::Meridiem { dots: false }),
    ("TZH", Field::OffsetHours),
    ("TZM", Field::OffsetMinutes),
    ("TZ", Field::Zone),
    ("OF", Field::Offset),
    ("IYY", Field::IsoYear),
];

/// `pattern` as its fields and text.
fn compile(pattern: &str) -> Vec<Item> {
    let mut items = Vec::new();
    let mut rest = pattern;
    let mut text = String::new();
    while let Some(c) = rest.chars().next() {
        if c == '"' {
            // Quoted text, `\"` for a quote inside it.
            let mut chars = rest[1..].char_indices();
            let mut end = rest.len();
            while let Some((at, c)) = chars.next() {
                match c {
                    '\\' => {
                        if let Some((_, next)) = chars.next() {
                            text.push(next);
                        }
                    }
                    '"' => {
                        end = at + 2;
                        break;
                    }
                    c => text.push(c),
                }
            }
            rest = &rest[end.min(rest.len())..];
            continue;
        }
        let upper_rest = |skip: usize| rest.get(skip..).map(|r| r.to_ascii_uppercase()).unwrap_or_default();
        let (mut fill, mut skip) = (false, 0);
        loop {
            let ahead = upper_rest(skip);
            if ahead.starts_with("FM") {
                fill = true;
                skip += 2;
            } else if ahead.starts_with("FX") || ahead.starts_with("TM") {
                skip += 2;
            } else {
                break;
            }
        }
        let ahead = upper_rest(skip);
        let found = PATTERNS.iter().find(|(name, _)| ahead.starts_with(name));
        let Some((name, field)) = found else {
            if skip > 0 {
                rest = &rest[skip..];
                continue;
            }
            text.push(c);
            rest = &rest[c.len_utf8()..];
            continue;
        };
        if !text.is_empty() {
            items.push(Item::Text(std::mem::take(&mut text)));
        }
        let written = &rest[skip..skip + name.len()];
        rest = &rest[skip + name.len()..];
        let ordinal = match rest.get(..2) {
            Some("TH") => Some(Case::Upper),
            Some("th") => Some(Case::Lower),
            _ => None,
        };
        if ordinal.is_some() {
            rest = &rest[2..];
        }
        items.push(Item::Field { field: *field, case: case_of(written), fill, ordinal });
    }
    if !text.is_empty() {
        items.push(Item::Text(text));
    }
    items
}

fn case_of(written: &str) -> Case {
    let mut letters = written.chars().filter(|c| c.is_ascii_alphabetic());
    match (letters.next(), letters.next()) {
        (Some(first), _) if first.is_ascii_lowercase() => Case::Lower,
        (Some(_), Some(second)) if second.is_ascii_lowercase() => Case::Capital,
        _ => Case::Upper,
    }
}

const MONTH_NAMES: [&str; 12] = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October", "November", "December"];
const DAY_NAMES: [&str; 7] = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"];
const ROMAN: [&str; 12] = ["I", "II", "III", "IV", "V", "VI", "VII", "VIII", "IX", "X", "XI", "XII"];

fn cased(name: &str, case: Case) -> String {
    match case {
        Case::Upper => name.to_uppercase(),
        Case::Lower => name.to_lowercase(),
        Case::Capital => name.to_string(),
    }
}

fn ordinal_suffix(number: i64, case: Case) -> String {
    let suffix = match (number % 100, number % 10) {
        (11..=13, _) => "th",
        (_, 1) => "st",
        (_, 2) => "nd",
        (_, 3) => "rd",
        _ => "th",
    };
    cased(suffix, if case == Case::Lower { Case::Lower } else { Case::Upper })
}

/// `at` written by the pattern's items, as PostgreSQL's `to_char`.
fn format(items: &[Item], at: &NaiveDateTime) -> String {
    let mut out = String::new();
    for item in items {
        let (field, case, fill, ordinal) = match item {
            Item::Text(text) => {
                out.push_str(text);
                continue;
            }
            Item::Field { field, case, fill, ordinal } => (*field, *case, *fill, *ordinal),
        };
        // A year before 1 is written as its BC number.
        let year = if at.year() <= 0 { i64::from(1 - at.year()) } else { i64::from(at.year()) };
        let number = |value: i64, width: usize| {
            let digits = if fill { value.to_string() } else { format!("{value:0width$}") };
            match ordinal {
                Some(case) => digits + &ordinal_suffix(value, case),
                None => digits,
            }
        };
        let padded = |name: String, width: usize| if fill { name } else { format!("{name:width$}") };
        let hour12 = match at.hour() % 12 {
            0 => 12,
            hour => i64::from(hour),
        };
        let written = match field {
            Field::YearComma => format!("{},{:03}", year / 1000, year % 1000),
            Field::Year4 => number(year, 4),
            Field::Year3 => number(year % 1000, 3),
            Field::Year2 => number(year % 100, 2),
            Field::Year1 => number(year % 10, 1),
            Field::IsoYear => number(i64::from(at.iso_week().year()), 4),
            Field::Century => number((year + 99) / 100, 2),
            Field::Era { dots } => {
                let era = match (at.year() <= 0, dots) {
                    (true, true) => "B.C.",
                    (true, false) => "BC",
                    (false, true) => "A.D.",
                    (false, false) => "AD",
                };
                cased(era, case)
            }
            Field::Month => number(i64::from(at.month()), 2),
            Field::MonthName => padded(cased(MONTH_NAMES[at.month0() as usize], case), 9),
            Field::MonthAbbrev => cased(&MONTH_NAMES[at.month0() as usize][..3], case),
            Field::RomanMonth => padded(cased(ROMAN[at.month0() as usize], case), 4),
            Field::Quarter => number(i64::from(at.month0() / 3 + 1), 1),
            Field::Day => number(i64::from(at.day()), 2),
            Field::DayOfYear => number(i64::from(at.ordinal()), 3),
            Field::DayOfWeek => number(i64::from(at.weekday().num_days_from_sunday() + 1), 1),
            Field::IsoDayOfWeek => number(i64::from(at.weekday().number_from_monday()), 1),
            Field::IsoDayOfYear => {
                let week = i64::from(at.iso_week().week());
                number((week - 1) * 7 + i64::from(at.weekday().number_from_monday()), 3)
            }
            Field::DayName => padded(cased(DAY_NAMES[at.weekday().num_days_from_sunday() as usize], case), 9),
            Field::DayAbbrev => cased(&DAY_NAMES[at.weekday().num_days_from_sunday() as usize][..3], case),
            Field::Julian => number(i64::from(at.date().num_days_from_ce()) + 1_721_425, 1),
            Field::WeekOfMonth => number(i64::from((at.day() - 1) / 7 + 1), 1),
            Field::WeekOfYear => number(i64::from((at.ordinal() - 1) / 7 + 1), 2),
            Field::IsoWeek => number(i64::from(at.iso_week().week()), 2),
            Field::Hour12 => number(hour12, 2),
            Field::Hour24 => number(i64::from(at.hour()), 2),
            Field::Minute => number(i64::from(at.minute()), 2),
            Field::Second => number(i64::from(at.second()), 2),
            Field::Millis => number(i64::from(at.nanosecond() / 1_000_000), 3),
            Field::Micros => number(i64::from(at.nanosecond() / 1000), 6),
            Field::Fraction(digits) => {
                let micros = format!("{:06}", at.nanosecond() / 1000);
                micros[..usize::from(digits)].to_string()
            }
            Field::SecondsOfDay => number(i64::from(at.num_seconds_from_midnight()), 1),
            Field::Meridiem { dots } => {
                let meridiem = match (at.hour() >= 12, dots) {
                    (true, true) => "P.M.",
                    (true, false) => "PM",
                    (false, true) => "A.M.",
                    (false, false) => "AM",
                };
                cased(meridiem, case)
            }
            Field::Zone => cased("UTC", case),
            Field::Offset | Field::OffsetHours => "+00".into(),
            Field::OffsetMinutes => "00".into(),
        };
        out.push_str(&written);
    }
    out
}

/// Why a text does not match a pattern.
fn bad_value(text: &str, pattern: &str) -> FoamError {
    FoamError::Query { message: format!("invalid value \"{text}\" for \"{pattern}\""), sqlstate: SqlState::InvalidDatetimeFormat }
}

/// `text` read by the pattern's items, as PostgreSQL's `to_timestamp`.
fn parse(items: &[Item], text: &str) -> std::result::Result<NaiveDateTime, FoamError> {
    let (mut year, mut month, mut day, mut day_of_year) = (None::<i64>, None::<u32>, None::<u32>, None::<u32>);
    let (mut hour, mut minute, mut second, mut micros, mut pm, mut bc) = (0i64, 0i64, 0i64, 0i64, None::<bool>, false);
    // HH and HH12 read a 12-hour clock, AM without AM/PM.
    let mut twelve_hour = false;
    let mut rest = text;
    for (at, item) in items.iter().enumerate() {
        // A year reads past four digits unless another field follows at once (`YYYYMMDD`).
        let next_is_field = matches!(items.get(at + 1), Some(Item::Field { .. }));
        let (field, fill) = match item {
            Item::Text(pattern_text) => {
                for c in pattern_text.chars() {
                    if c == ' ' {
                        rest = rest.trim_start();
                    } else if rest.starts_with(c) || rest.chars().next().is_some_and(|r| !r.is_alphanumeric() && !r.is_whitespace()) {
                        rest = &rest[rest.chars().next().map_or(0, char::len_utf8)..];
                    }
                }
                continue;
            }
            Item::Field { field, fill, .. } => (*field, *fill),
        };
        rest = rest.trim_start();
        let pattern_name = PATTERNS.iter().find(|(_, f)| *f == field).map_or("?", |(name, _)| name);
        let signed = matches!(field, Field::Year4 | Field::YearComma);
        let digits = |rest: &mut &str, width: usize| take_digits(rest, if fill { 18 } else { width }, signed, pattern_name);
        match field {
            Field::YearComma => {
                let thousands = digits(&mut rest, 3)?;
                rest = rest.strip_prefix(',').unwrap_or(rest);
                let units = digits(&mut rest, 3)?;
                year = Some(thousands.checked_mul(1000).and_then(|y| y.checked_add(units)).ok_or_else(|| bad_value(text, "Y,YYY"))?);
            }
            // A year reads past its width unless another field follows
            // at once (`YYYYMMDD`); more digits than the width are the
            // whole year, fewer the nearest year to 2020, as PostgreSQL's.
            Field::Year4 | Field::IsoYear | Field::Year3 | Field::Year2 | Field::Year1 => {
                let width = match field {
                    Field::Year3 => 3,
                    Field::Year2 => 2,
                    Field::Year1 => 1,
                    _ => 4,
                };
                let before = rest.len();
                let value = digits(&mut rest, if next_is_field { width } else { 9 })?;
                let read = before - rest.len();
                year = Some(match read {
                    1 | 2 if read <= width && width < 4 => if value < 70 { 2000 + value } else { 1900 + value },
                    3 if width == 3 => if value < 100 { 2000 + value } else { 1000 + value },
                    _ => value,
                });
            }
            Field::Century | Field::Quarter | Field::WeekOfMonth | Field::WeekOfYear | Field::IsoWeek | Field::DayOfWeek | Field::IsoDayOfWeek => {
                digits(&mut rest, 2)?;
            }
            Field::Month => month = Some(u32::try_from(digits(&mut rest, 2)?).map_err(|_| bad_value(text, pattern_name))?),
            Field::Day => day = Some(u32::try_from(digits(&mut rest, 2)?).map_err(|_| bad_value(text, pattern_name))?),
            Field::DayOfYear | Field::IsoDayOfYear => day_of_year = Some(u32::try_from(digits(&mut rest, 3)?).map_err(|_| bad_value(text, pattern_name))?),
            Field::Julian => {
                let julian = digits(&mut rest, 9)?;
                let date = NaiveDate::from_num_days_from_ce_opt(i32::try_from(julian - 1_721_425).map_err(|_| bad_value(text, "J"))?).ok_or_else(|| bad_value(text, "J"))?;
                (year, month, day) = (Some(i64::from(date.year())), Some(date.month()), Some(date.day()));
            }
            Field::MonthName | Field::MonthAbbrev | Field::RomanMonth => {
                let lower = rest.to_ascii_lowercase();
                let found = if field == Field::RomanMonth {
                    (0..12).rev().find(|m| lower.starts_with(&ROMAN[*m].to_ascii_lowercase())).map(|m| (m, ROMAN[m].len()))
                } else {
                    MONTH_NAMES.iter().enumerate().find_map(|(m, name)| {
                        let name = name.to_ascii_lowercase();
                        if field == Field::MonthName && lower.starts_with(&name) {
                            Some((m, name.len()))
                        } else {
                            lower.starts_with(&name[..3]).then_some((m, 3))
                        }
                    })
                };
                let (m, length) = found.ok_or_else(|| bad_value(rest.split_whitespace().next().unwrap_or(rest), pattern_name))?;
                month = Some(m as u32 + 1);
                rest = &rest[length..];
            }
            Field::DayName | Field::DayAbbrev => {
                let lower = rest.to_ascii_lowercase();
                let length = DAY_NAMES
                    .iter()
                    .find_map(|name| {
                        let name = name.to_ascii_lowercase();
                        if field == Field::DayName && lower.starts_with(&name) { Some(name.len()) } else { lower.starts_with(&name[..3]).then_some(3) }
                    })
                    .ok_or_else(|| bad_value(rest.split_whitespace().next().unwrap_or(rest), pattern_name))?;
                rest = &rest[length..];
            }
            Field::Hour12 => {
                hour = digits(&mut rest, 2)?;
                twelve_hour = true;
            }
            Field::Hour24 => hour = digits(&mut rest, 2)?,
            Field::Minute => minute = digits(&mut rest, 2)?,
            Field::Second => second = digits(&mut rest, 2)?,
            // Digits of a fraction: `SS.MS` reads `12.3` as 300 ms.
            Field::Millis | Field::Micros | Field::Fraction(_) => {
                let width = match field {
                    Field::Millis => 3,
                    Field::Fraction(width) => usize::from(width),
                    _ => 6,
                };
                let before = rest.len();
                let value = digits(&mut rest, width)?;
                let read = (before - rest.len()).min(6);
                micros = value * 10i64.pow(6 - read as u32);
            }
            Field::SecondsOfDay => {
                let seconds = digits(&mut rest, 5)?;
                (hour, minute, second) = (seconds / 3600, seconds / 60 % 60, seconds % 60);
            }
            Field::Meridiem { .. } | Field::Era { .. } => {
                let lower = rest.to_ascii_lowercase();
                let word = ["a.m.", "p.m.", "am", "pm", "b.c.", "a.d.", "bc", "ad"].into_iter().find(|word| lower.starts_with(word));
                let word = word.ok_or_else(|| bad_value(rest.split_whitespace().next().unwrap_or(rest), pattern_name))?;
                match word.chars().next() {
                    Some('p') => pm = Some(true),
                    Some('a') if word.contains('m') => pm = Some(false),
                    Some('b') => bc = true,
                    _ => {}
                }
                rest = &rest[word.len()..];
            }
            Field::Zone | Field::Offset | Field::OffsetHours | Field::OffsetMinutes => {
                let taken = rest.find(char::is_whitespace).unwrap_or(rest.len());
                rest = &rest[taken..];
            }
        }
    }
    let out_of_range = || FoamError::Query { message: format!("date/time field value out of range: \"{text}\""), sqlstate: SqlState::DatetimeFieldOverflow };
    if twelve_hour || pm.is_some() {
        let pm = pm.unwrap_or(false);
        if !(1..=12).contains(&hour) {
            return Err(FoamError::Query {
                message: format!("hour \"{hour}\" is invalid for the 12-hour clock"),
                sqlstate: SqlState::InvalidDatetimeFormat,
            });
        }
        hour = hour % 12 + if pm { 12 } else { 0 };
    }
    // Without a year PostgreSQL's is 1 BC (year 0).
    let year = match year {
        Some(year) => i32::try_from(if bc { 1 - year } else { year }).map_err(|_| out_of_range())?,
        None => 0,
    };
    let date = match (day_of_year, month, day) {
        (Some(ordinal), None, None) => NaiveDate::from_yo_opt(year, ordinal),
        _ => NaiveDate::from_ymd_opt(year, month.unwrap_or(1), day.unwrap_or(1)),
    }
    .ok_or_else(out_of_range)?;
    if hour > 24 || minute > 59 || second > 60 {
        return Err(out_of_range());
    }
    let seconds = hour * 3600 + minute * 60 + second;
    date.and_hms_opt(0, 0, 0)
        .and_then(|midnight| midnight.checked_add_signed(chrono::Duration::seconds(seconds)))
        .and_then(|at| at.checked_add_signed(chrono::Duration::microseconds(micros)))
        .ok_or_else(out_of_range)
}

/// The number at the start of `rest` (at most `width` digits; a year may
/// have a minus sign), which it then no longer holds.
fn take_digits(rest: &mut &str, width: usize, signed: bool, pattern_name: &str) -> std::result::Result<i64, FoamError> {
    let negative = signed && rest.starts_with('-');
    let body = if negative { &rest[1..] } else { *rest };
    let taken = body.bytes().take(width).take_while(u8::is_ascii_digit).count();
    if taken == 0 {
        return Err(bad_value(rest.split_whitespace().next().unwrap_or(rest), pattern_name));
    }
    let value: i64 = body[..taken].parse().map_err(|_| bad_value(&body[..taken], pattern_name))?;
    *rest = &body[taken..];
    Ok(if negative { -value } else { value })
}

/// The compiled pattern of each row: a constant pattern compiled once, a
/// per-row one once for each run of rows that repeat it.
enum Patterns {
    One(Option<Vec<Item>>),
    PerRow(Vec<Option<Arc<Vec<Item>>>>),
}

impl Patterns {
    fn of(pattern: &ColumnarValue, rows: usize) -> Result<Self> {
        if let ColumnarValue::Scalar(value) = pattern {
            return Ok(match value.cast_to(&DataType::Utf8)? {
                ScalarValue::Utf8(Some(text)) => Patterns::One(Some(compile(&text))),
                _ => Patterns::One(None),
            });
        }
        let texts = arrow::compute::cast(&pattern.to_array(rows)?, &DataType::Utf8)?;
        let mut last: Option<(&str, Arc<Vec<Item>>)> = None;
        let per_row = texts
            .as_string::<i32>()
            .iter()
            .map(|text| {
                let text = text?;
                match &last {
                    Some((seen, items)) if *seen == text => Some(items.clone()),
                    _ => {
                        let items = Arc::new(compile(text));
                        last = Some((text, items.clone()));
                        Some(items)
                    }
                }
            })
            .collect();
        Ok(Patterns::PerRow(per_row))
    }

    fn at(&self, row: usize) -> Option<&[Item]> {
        match self {
            Patterns::One(items) => items.as_deref(),
            Patterns::PerRow(per_row) => per_row[row].as_deref().map(Vec::as_slice),
        }
    }
}

/// `to_char`, `to_date` and `to_timestamp` with PostgreSQL's patterns, in
/// place of DataFusion's; sessions and workers register them.
pub fn udfs() -> Vec<ScalarUDF> {
    [Kind::ToChar, Kind::ToDate, Kind::ToTimestamp]
        .into_iter()
        .map(|kind| ScalarUDF::new_from_impl(TemplateFunction { kind, signature: Signature::variadic_any(Volatility::Immutable) }))
        .collect()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    ToChar,
    ToDate,
    ToTimestamp,
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct TemplateFunction {
    kind: Kind,
    signature: Signature,
}

impl TemplateFunction {
    /// DataFusion's function of the same name, for the forms PostgreSQL's
    /// patterns do not concern (`to_timestamp(seconds)`, `to_char` of an
    /// interval).
    fn datafusion(&self) -> Arc<ScalarUDF> {
        match self.kind {
            Kind::ToChar => datafusion::functions::datetime::to_char(),
            Kind::ToDate => datafusion::functions::datetime::to_date(),
            // `to_timestamp(seconds)` is an instant, PostgreSQL's timestamptz.
            Kind::ToTimestamp => {
                let mut options = datafusion::common::config::ConfigOptions::default();
                options.execution.time_zone = Some(foam_catalog::types::UTC.to_string());
                datafusion::functions::datetime::to_timestamp(&options)
            }
        }
    }

    /// Whether the call is one this function answers itself.
    fn own(&self, arg_types: &[DataType]) -> bool {
        match (self.kind, arg_types) {
            (Kind::ToChar, [DataType::Timestamp(..) | DataType::Date32 | DataType::Date64, pattern]) => pattern.is_string() || pattern.is_null(),
            (Kind::ToDate | Kind::ToTimestamp, [text, pattern]) => (text.is_string() || text.is_null()) && (pattern.is_string() || pattern.is_null()),
            _ => false,
        }
    }
}

/// `values` (timestamps or dates, of the field `field`) as zone-less
/// microsecond timestamps: a timestamptz in the local time of its zone, in
/// its own unit first (`now()` is nanoseconds).
pub(crate) fn local_times(values: &ArrayRef, field: arrow::datatypes::FieldRef, rows: usize, config: &Arc<ConfigOptions>) -> Result<ArrayRef> {
    let local = match values.data_type() {
        DataType::Timestamp(unit, Some(_)) => datafusion::functions::datetime::to_local_time()
            .invoke_with_args(ScalarFunctionArgs {
                args: vec![ColumnarValue::Array(values.clone())],
                arg_fields: vec![field],
                number_rows: rows,
                return_field: Arc::new(arrow::datatypes::Field::new("local", DataType::Timestamp(*unit, None), true)),
                config_options: config.clone(),
            })?
            .to_array(rows)?,
        _ => values.clone(),
    };
    Ok(arrow::compute::cast(&local, &DataType::Timestamp(TimeUnit::Microsecond, None))?)
}

impl ScalarUDFImpl for TemplateFunction {
    fn name(&self) -> &str {
        match self.kind {
            Kind::ToChar => "to_char",
            Kind::ToDate => "to_date",
            Kind::ToTimestamp => "to_timestamp",
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        if !self.own(arg_types) {
            return self.datafusion().return_type(arg_types);
        }
        Ok(match self.kind {
            Kind::ToChar => DataType::Utf8,
            Kind::ToDate => DataType::Date32,
            // Microseconds, FoamDB's timestamps: years 1677 to 2262 only in nanoseconds.
            Kind::ToTimestamp => DataType::Timestamp(TimeUnit::Microsecond, None),
        })
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let arg_types: Vec<DataType> = args.args.iter().map(ColumnarValue::data_type).collect();
        if !self.own(&arg_types) {
            return self.datafusion().invoke_with_args(args);
        }
        let [value, pattern] = args.args.as_slice() else { return Err(DataFusionError::Internal("two arguments".into())) };
        let scalar = args.args.iter().all(|arg| matches!(arg, ColumnarValue::Scalar(_)));
        let rows = if scalar { 1 } else { args.number_rows };
        let compiled = Patterns::of(pattern, rows)?;
        let values = value.to_array(rows)?;
        match self.kind {
            Kind::ToChar => {
                // A timestamptz is written in local time of the zone it is in.
                let times = local_times(&values, args.arg_fields[0].clone(), rows, &args.config_options)?;
                let times = times.as_primitive::<arrow::datatypes::TimestampMicrosecondType>();
                let written: StringArray = (0..rows)
                    .map(|row| {
                        let items = compiled.at(row)?;
                        let at = (!times.is_null(row)).then(|| chrono::DateTime::from_timestamp_micros(times.value(row)))??.naive_utc();
                        Some(format(items, &at))
                    })
                    .collect();
                answered(Arc::new(written), scalar)
            }
            Kind::ToDate | Kind::ToTimestamp => {
                let texts = arrow::compute::cast(&values, &DataType::Utf8)?;
                let texts = texts.as_string::<i32>();
                let parsed: Vec<Option<NaiveDateTime>> = (0..rows)
                    .map(|row| match (compiled.at(row), texts.is_null(row)) {
                        (Some(items), false) => parse(items, texts.value(row)).map(Some),
                        _ => Ok(None),
                    })
                    .collect::<std::result::Result<_, FoamError>>()
                    .map_err(DataFusionError::from)?;
                if self.kind == Kind::ToDate {
                    let days = parsed.iter().map(|at| at.map(|at| arrow::datatypes::Date32Type::from_naive_date(at.date())));
                    answered(Arc::new(days.collect::<Date32Array>()), scalar)
                } else {
                    let micros = parsed.iter().map(|at| at.map(|at| at.and_utc().timestamp_micros()));
                    answered(Arc::new(micros.collect::<TimestampMicrosecondArray>()), scalar)
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> NaiveDateTime {
        NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S%.f").unwrap()
    }

    fn to_char(text: &str, pattern: &str) -> String {
        format(&compile(pattern), &at(text))
    }

    // The answers are PostgreSQL 15's.
    #[test]
    fn to_char_writes_as_postgresql_writes() {
        for (pattern, expected) in [
            ("YYYY-MM-DD HH24:MI:SS", "2024-03-05 14:07:09"),
            ("YYYY-MM", "2024-03"),
            ("yyyy-mm-dd", "2024-03-05"),
            ("Month DD, YYYY", "March     05, 2024"),
            ("FMMonth DD, YYYY", "March 05, 2024"),
            ("FMMonth FMDD, YYYY", "March 5, 2024"),
            ("MONTH", "MARCH    "),
            ("Mon mon MON", "Mar mar MAR"),
            ("Day Dy dy", "Tuesday   Tue tue"),
            ("HH12:MI AM", "02:07 PM"),
            ("HH:MI a.m.", "02:07 p.m."),
            ("DDD D ID Q WW IW", "065 3 2 1 10 10"),
            ("DDth FMDDth DDTH", "05th 5th 05TH"),
            ("\"Quarter\" Q", "Quarter 1"),
            ("MS US FF3", "123 123456 123"),
            ("SSSS", "50829"),
            ("Y,YYY YYY YY Y CC", "2,024 024 24 4 21"),
            ("J", "2460375"),
            ("RM", "III "),
            ("YYYY BC", "2024 AD"),
        ] {
            assert_eq!(to_char("2024-03-05 14:07:09.123456", pattern), expected, "{pattern}");
        }
        assert_eq!(to_char("2024-03-01 00:00:00", "HH12 AM FMDDth"), "12 AM 1st");
    }

    #[test]
    fn to_timestamp_reads_as_postgresql_reads() {
        let read = |text: &str, pattern: &str| parse(&compile(pattern), text).map(|at| at.to_string()).map_err(|e| e.to_string());
        for (text, pattern, expected) in [
            ("2024-03-15", "YYYY-MM-DD", "2024-03-15 00:00:00"),
            ("15/03/2024 14:30", "DD/MM/YYYY HH24:MI", "2024-03-15 14:30:00"),
            ("March 5, 2024", "Month DD, YYYY", "2024-03-05 00:00:00"),
            ("05 mar 2024 02:30 pm", "DD Mon YYYY HH12:MI AM", "2024-03-05 14:30:00"),
            ("20240315", "YYYYMMDD", "2024-03-15 00:00:00"),
            ("2024-03-15 10:30:15.25", "YYYY-MM-DD HH24:MI:SS.US", "2024-03-15 10:30:15.250"),
            ("12.3", "SS.MS", "0000-01-01 00:00:12.300"),
            ("2024-03-15 10:30:15.25", "YYYY-MM-DD HH24:MI:SS.FF6", "2024-03-15 10:30:15.250"),
            ("2024 075", "YYYY DDD", "2024-03-15 00:00:00"),
            // No year is PostgreSQL's 0001 BC.
            ("03-15", "MM-DD", "0000-03-15 00:00:00"),
            ("2024-03-05 12:30", "YYYY-MM-DD HH:MI", "2024-03-05 00:30:00"),
            ("2024-03-05", "YY-MM-DD", "2024-03-05 00:00:00"),
            ("24-03-05", "YY-MM-DD", "2024-03-05 00:00:00"),
            ("99-03-05", "YY-MM-DD", "1999-03-05 00:00:00"),
        ] {
            assert_eq!(read(text, pattern).as_deref(), Ok(expected), "{text} {pattern}");
        }
        assert!(read("2024-xx-15", "YYYY-MM-DD").unwrap_err().contains("invalid value \"xx-15\" for \"MM\""));
        assert!(read("2024-02-30", "YYYY-MM-DD").unwrap_err().contains("out of range"));
        assert!(read("2024-03-05 13:00", "YYYY-MM-DD HH:MI").unwrap_err().contains("12-hour clock"));
        assert!(read("262142-12-31 24:00", "YYYY-MM-DD HH24:MI").unwrap_err().contains("out of range"));
        assert!(read("2024-4294967297-01", "YYYY-FMMM-DD").is_err());
    }
}
