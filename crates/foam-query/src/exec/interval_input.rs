//! PostgreSQL's input formats for intervals, read by every cast of text to
//! an interval (`'01:30:00'::interval`, the casts a comparison with a
//! quoted literal adds; `optimizer/logical/text_casts.rs`) and by
//! `INTERVAL '...'` literals (`frontend/datetime_literals.rs`). Arrow's
//! parser takes only `<number> <unit>` pairs, so a time of day
//! (`'01:30:00'`), PostgreSQL's own output (`'1 day 02:00:00'`, `'-1 days
//! +02:00:00'`), ISO 8601 (`'P1DT2H'`) and `'@ 1 hour ago'` were refused.
//!
//! Read as PostgreSQL's `DecodeInterval` reads them with its default
//! IntervalStyle (`postgres`):
//!
//! ```text
//!   units      1 year 2 mons 3 days 4 hours 5 minutes 6.5 seconds   (and y, mon, w, d, h, m, s, ms, us, decade, century, millennium, plurals)
//!   times      01:30   01:30:15.25   -02:00:00   1 12:59:10 (a bare number before a time is days)
//!   also       @ 1 hour ago   5 (seconds)   1-2 (years-months)   P1Y2M3DT4H5M6S   1d2h (no blank)
//! ```
//!
//! Each field keeps its own sign (`-1 days +02:00:00`); `ago` negates all.
//! Fractions carry down as PostgreSQL carries them: a year's to whole
//! months (rounded), a month's to 30-day days, a week's or day's to time.

use arrow::datatypes::IntervalMonthDayNano;

use crate::exec::datetime_input::InputError;

/// Microseconds in a second, a minute, an hour and a day.
const SECOND_MICROS: i128 = 1_000_000;
const MINUTE_SECONDS: f64 = 60.0;
const HOUR_SECONDS: f64 = 3_600.0;
const DAY_SECONDS: f64 = 86_400.0;
/// Days in a month, days in a week and months in a year, as PostgreSQL
/// reckons a fraction.
const MONTH_DAYS: f64 = 30.0;
const WEEK_DAYS: f64 = 7.0;
const YEAR_MONTHS: i128 = 12;

/// An interval's fields as they add up, exactly.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
struct Sum {
    months: i128,
    days: i128,
    micros: i128,
}

/// A unit a number is written with.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Unit {
    Microsecond,
    Millisecond,
    Second,
    Minute,
    Hour,
    Day,
    Week,
    Month,
    Year,
    Decade,
    Century,
    Millennium,
}

fn unit(word: &str) -> Option<Unit> {
    Some(match word {
        "microsecond" | "microseconds" | "microsecon" | "us" | "usec" | "usecs" | "usecond" | "useconds" => Unit::Microsecond,
        "millisecond" | "milliseconds" | "millisecon" | "ms" | "msec" | "msecs" | "msecond" | "mseconds" => Unit::Millisecond,
        "second" | "seconds" | "s" | "sec" | "secs" => Unit::Second,
        "minute" | "minutes" | "m" | "min" | "mins" => Unit::Minute,
        "hour" | "hours" | "h" | "hr" | "hrs" => Unit::Hour,
        "day" | "days" | "d" => Unit::Day,
        "week" | "weeks" | "w" => Unit::Week,
        "month" | "months" | "mon" | "mons" => Unit::Month,
        "year" | "years" | "y" | "yr" | "yrs" => Unit::Year,
        "decade" | "decades" | "dec" | "decs" => Unit::Decade,
        "century" | "centuries" | "c" | "cent" => Unit::Century,
        "millennium" | "millennia" | "mil" | "mils" | "millenniums" => Unit::Millennium,
        _ => return None,
    })
}

/// A number as written: its whole part exactly, its fraction (same sign)
/// read from its own digits, as PostgreSQL's `ParseFraction` reads it, so
/// `1.2` is 1 and 0.2, not 1.2's nearest double less 1.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Number {
    whole: i128,
    fraction: f64,
}

/// PostgreSQL's `rint`: to the nearest, ties to even.
fn rint(value: f64) -> i128 {
    value.round_ties_even() as i128
}

impl Sum {
    /// Adds `number` of `unit`, its fraction carried down as PostgreSQL's
    /// `DecodeInterval` carries it.
    fn add(&mut self, number: Number, unit: Unit) {
        let Number { whole, fraction } = number;
        match unit {
            Unit::Microsecond => self.micros += whole + rint(fraction),
            Unit::Millisecond => self.micros += whole * 1000 + rint(fraction * 1000.0),
            Unit::Second => self.micros += whole * SECOND_MICROS + rint(fraction * 1e6),
            Unit::Minute => {
                self.micros += whole * 60 * SECOND_MICROS;
                self.add_seconds(fraction * MINUTE_SECONDS);
            }
            Unit::Hour => {
                self.micros += whole * 3_600 * SECOND_MICROS;
                self.add_seconds(fraction * HOUR_SECONDS);
            }
            Unit::Day => {
                self.days += whole;
                self.add_seconds(fraction * DAY_SECONDS);
            }
            Unit::Week => {
                self.days += whole * 7;
                self.add_days(fraction * WEEK_DAYS);
            }
            Unit::Month => {
                self.months += whole;
                self.add_days(fraction * MONTH_DAYS);
            }
            Unit::Year | Unit::Decade | Unit::Century | Unit::Millennium => {
                let years = match unit {
                    Unit::Decade => 10,
                    Unit::Century => 100,
                    Unit::Millennium => 1000,
                    _ => 1,
                };
                self.months += whole * years * YEAR_MONTHS + rint(fraction * (years * YEAR_MONTHS) as f64);
            }
        }
    }

    /// PostgreSQL's `AdjustFractDays`: whole days, the rest as time.
    fn add_days(&mut self, days: f64) {
        self.days += days.trunc() as i128;
        self.add_seconds(days.fract() * DAY_SECONDS);
    }

    /// PostgreSQL's `AdjustFractSeconds`: whole seconds, the rest rounded
    /// to microseconds.
    fn add_seconds(&mut self, seconds: f64) {
        self.micros += seconds.trunc() as i128 * SECOND_MICROS + rint(seconds.fract() * 1e6);
    }

    fn negated(self) -> Sum {
        Sum { months: -self.months, days: -self.days, micros: -self.micros }
    }

    fn interval(self) -> Result<IntervalMonthDayNano, InputError> {
        let months = i32::try_from(self.months).map_err(|_| InputError::TypeRange)?;
        let days = i32::try_from(self.days).map_err(|_| InputError::TypeRange)?;
        // Arrow keeps nanoseconds, which must fit an i64.
        let nanos = self.micros.checked_mul(1000).and_then(|n| i64::try_from(n).ok()).ok_or(InputError::TypeRange)?;
        Ok(IntervalMonthDayNano::new(months, days, nanos))
    }
}

/// `text` as PostgreSQL reads it as an interval (see the module
/// documentation).
pub fn parse_interval(text: &str) -> Result<IntervalMonthDayNano, InputError> {
    let lower = text.trim().to_ascii_lowercase();
    if let Some(iso) = lower.strip_prefix('p') {
        return iso_8601(iso)?.interval();
    }
    // `1 day, 2:00:00` (Python's timedelta) reads as PostgreSQL reads it.
    let lower = lower.strip_prefix('@').unwrap_or(&lower).replace(',', " ");
    let mut words: Vec<String> = lower.split_whitespace().flat_map(split_number_and_unit).collect();
    let ago = words.last().is_some_and(|w| w == "ago");
    if ago {
        words.pop();
    }
    if words.is_empty() {
        return Err(InputError::Syntax);
    }
    let mut sum = Sum::default();
    // Each unit is written once; a time is hours, minutes and seconds.
    let mut seen: Vec<Unit> = Vec::new();
    let mut once = |units: &[Unit]| {
        if units.iter().any(|u| seen.contains(u)) {
            return Err(InputError::Syntax);
        }
        seen.extend_from_slice(units);
        Ok(())
    };
    let mut i = 0;
    while i < words.len() {
        let word = words[i].as_str();
        if word.contains(':') {
            once(&[Unit::Hour, Unit::Minute, Unit::Second])?;
            sum.micros += time_micros(word)?;
        } else if let Some(months) = years_months(word)? {
            once(&[Unit::Year, Unit::Month])?;
            sum.months += months;
        } else {
            let value = number(word)?;
            let next = words.get(i + 1).map(String::as_str);
            let unit = match (next, next.and_then(unit)) {
                (Some(_), Some(unit)) => {
                    i += 1;
                    unit
                }
                // A bare number before a time is days (`1 12:59:10`).
                (Some(next), None) if next.contains(':') => Unit::Day,
                // A bare number at the end is seconds.
                (None, _) => Unit::Second,
                (Some(_), None) => return Err(InputError::Syntax),
            };
            once(&[unit])?;
            sum.add(value, unit);
        }
        i += 1;
    }
    if ago { sum.negated() } else { sum }.interval()
}

/// `1d2h` as `1`, `d`, `2`, `h`: a word of numbers each followed by a unit
/// split into them; any other word as it is.
fn split_number_and_unit(word: &str) -> Vec<String> {
    let starts_with_number = word.trim_start_matches(['+', '-']).starts_with(|c: char| c.is_ascii_digit() || c == '.');
    if word.contains(':') || !starts_with_number || !word.contains(|c: char| c.is_ascii_alphabetic()) {
        return vec![word.to_string()];
    }
    let mut parts = Vec::new();
    let mut rest = word;
    while !rest.is_empty() {
        let letters = rest.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(rest.len());
        let number_end = if letters == 0 { rest.find(|c: char| !c.is_ascii_alphabetic()).unwrap_or(rest.len()) } else { letters };
        parts.push(rest[..number_end].to_string());
        rest = &rest[number_end..];
    }
    parts
}

/// `word`'s sign (1 or -1; one `+` or `-` at most) and the rest of it.
fn signed(word: &str) -> (i128, &str) {
    match word.strip_prefix('-') {
        Some(rest) => (-1, rest),
        None => (1, word.strip_prefix('+').unwrap_or(word)),
    }
}

/// A run of digits as a field's value (22007 for none or anything else);
/// past 64 bits no field fits (22015), a bound that keeps every sum
/// within i128.
fn digits_value(digits: &str) -> Result<i128, InputError> {
    if digits.is_empty() || !digits.chars().all(|c| c.is_ascii_digit()) {
        return Err(InputError::Syntax);
    }
    digits.parse::<i64>().map(i128::from).map_err(|_| InputError::TypeRange)
}

/// A signed decimal number (no exponent, no `nan` or `inf`), its whole
/// part and its fraction read apart.
fn number(word: &str) -> Result<Number, InputError> {
    let (sign, digits) = signed(word);
    let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
    if (whole.is_empty() && fraction.is_empty()) || !fraction.chars().all(|c| c.is_ascii_digit()) {
        return Err(InputError::Syntax);
    }
    let whole = if whole.is_empty() { 0 } else { digits_value(whole)? };
    let fraction: f64 = if fraction.is_empty() { 0.0 } else { format!("0.{fraction}").parse().map_err(|_| InputError::Syntax)? };
    Ok(Number { whole: sign * whole, fraction: sign as f64 * fraction })
}

/// `[+-]h:m[:s[.f]]` in microseconds; `m:s.f` when the second part has a
/// fraction (`1:30.5`), as PostgreSQL reads it.
fn time_micros(word: &str) -> Result<i128, InputError> {
    let (sign, rest) = signed(word);
    let parts: Vec<&str> = rest.split(':').collect();
    let seconds = |s: &str| match number(s) {
        Ok(n) if !s.starts_with(['+', '-']) && n.whole <= 60 => Ok(n.whole * SECOND_MICROS + rint(n.fraction * 1e6)),
        Ok(_) => Err(InputError::FieldRange),
        Err(error) => Err(error),
    };
    let (hours, minutes, micros) = match parts.as_slice() {
        [m, s] if s.contains('.') => (0, digits_value(m)?, seconds(s)?),
        [h, m] => (digits_value(h)?, digits_value(m)?, 0),
        [h, m, s] => (digits_value(h)?, digits_value(m)?, seconds(s)?),
        _ => return Err(InputError::Syntax),
    };
    if minutes >= 60 {
        return Err(InputError::FieldRange);
    }
    Ok(sign * ((hours * 60 + minutes) * 60 * SECOND_MICROS + micros))
}

/// SQL's `years-months` (`1-2`, signed as a whole) in months; 22015 past
/// 11 months.
fn years_months(word: &str) -> Result<Option<i128>, InputError> {
    let (sign, rest) = signed(word);
    let Some((years, months)) = rest.split_once('-') else { return Ok(None) };
    let all_digits = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_digit());
    if !all_digits(years) || !all_digits(months) {
        return Ok(None);
    }
    let (years, months) = (digits_value(years)?, digits_value(months)?);
    if months >= YEAR_MONTHS {
        return Err(InputError::FieldRange);
    }
    Ok(Some(sign * (years * YEAR_MONTHS + months)))
}

/// ISO 8601's designators after `P`: `1Y2M3W4DT5H6M7.5S`.
fn iso_8601(text: &str) -> Result<Sum, InputError> {
    let mut sum = Sum::default();
    let mut in_time = false;
    let mut rest = text;
    if rest.is_empty() {
        return Err(InputError::Syntax);
    }
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix('t') {
            if in_time || after.is_empty() {
                return Err(InputError::Syntax);
            }
            in_time = true;
            rest = after;
            continue;
        }
        let end = rest.find(|c: char| c.is_ascii_alphabetic()).ok_or(InputError::Syntax)?;
        // PostgreSQL's ISO reader takes the fraction from the value's
        // double (`P1.2M` is 1 mon 5 days 24:00:00 there).
        let written = number(&rest[..end])?;
        let double = written.whole as f64 + written.fraction;
        let value = Number { whole: written.whole, fraction: double - written.whole as f64 };
        let unit = match (&rest[end..=end], in_time) {
            ("y", false) => Unit::Year,
            ("m", false) => Unit::Month,
            ("w", false) => Unit::Week,
            ("d", false) => Unit::Day,
            ("h", true) => Unit::Hour,
            ("m", true) => Unit::Minute,
            ("s", true) => Unit::Second,
            _ => return Err(InputError::Syntax),
        };
        sum.add(value, unit);
        rest = &rest[end + 1..];
    }
    Ok(sum)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Months, days and microseconds of `text`.
    fn read(text: &str) -> Option<(i32, i32, i64)> {
        parse_interval(text).ok().map(|i| (i.months, i.days, i.nanoseconds / 1000))
    }

    const HOUR: i64 = 3_600_000_000;

    #[test]
    fn postgresql_forms_read_as_postgresql_reads_them() {
        // Expected values are PostgreSQL 15's.
        assert_eq!(read("2 mons 3 days 01:00:00"), Some((2, 3, HOUR)));
        assert_eq!(read("01:30:00"), Some((0, 0, HOUR + HOUR / 2)));
        assert_eq!(read("1 day 01:00"), Some((0, 1, HOUR)));
        assert_eq!(read("-1 days +02:00:00"), Some((0, -1, 2 * HOUR)));
        assert_eq!(read("1 12:59:10"), Some((0, 1, 12 * HOUR + 59 * 60_000_000 + 10_000_000)));
        assert_eq!(read("@ 1 hour ago"), Some((0, 0, -HOUR)));
        assert_eq!(read("P1Y2M3DT4H5M6S"), Some((14, 3, 4 * HOUR + 5 * 60_000_000 + 6_000_000)));
        assert_eq!(read("PT1.5S"), Some((0, 0, 1_500_000)));
        assert_eq!(read("P1.2M"), Some((1, 5, 24 * HOUR)));
        assert_eq!(read("1.5 years"), Some((18, 0, 0)));
        assert_eq!(read("1.5 months"), Some((1, 15, 0)));
        assert_eq!(read("1.5 days"), Some((0, 1, 12 * HOUR)));
        assert_eq!(read("2 weeks"), Some((0, 14, 0)));
        assert_eq!(read("5"), Some((0, 0, 5_000_000)));
        assert_eq!(read("1-2"), Some((14, 0, 0)));
        assert_eq!(read("1d2h"), Some((0, 1, 2 * HOUR)));
        assert_eq!(read("0 years 0 mons 1 days 0 hours 0 mins 0.0 secs"), Some((0, 1, 0)));
        assert_eq!(read(" 3 DAYS 5.5 Seconds "), Some((0, 3, 5_500_000)));
        assert_eq!(read("1 decade 1 century"), Some((1320, 0, 0)));
        assert_eq!(read("1.3 years"), Some((16, 0, 0)));
        // Fractions read from their digits, rounded half to even, per field.
        assert_eq!(read("1.2 months"), Some((1, 6, 0)));
        assert_eq!(read("2.3 months"), Some((2, 9, 0)));
        assert_eq!(read("100000.1 days"), Some((0, 100_000, 2 * HOUR + 24 * 60_000_000)));
        assert_eq!(read("0.375 years"), Some((4, 0, 0)));
        assert_eq!(read("2.5 us"), Some((0, 0, 2)));
        assert_eq!(read("00:00:00.0000005"), Some((0, 0, 0)));
        assert_eq!(read("9007199254740993 microseconds"), Some((0, 0, 9_007_199_254_740_993)));
        assert_eq!(read("2562047:47:16.854775"), Some((0, 0, i64::MAX / 1000)));
        assert_eq!(read("1:30.5"), Some((0, 0, 90_500_000)));
        assert_eq!(read("1:59:60"), Some((0, 0, 2 * HOUR)));
        assert_eq!(read("@1 day"), Some((0, 1, 0)));
        assert_eq!(read("-01:02:03.5"), Some((0, 0, -(HOUR + 2 * 60_000_000 + 3_500_000))));
        assert_eq!(read("1 day, 2:00:00"), Some((0, 1, 2 * HOUR)));
        assert_eq!(read("1.5 weeks"), Some((0, 10, 12 * HOUR)));
        assert_eq!(read("0.1 day"), Some((0, 0, 2 * HOUR + 24 * 60_000_000)));
        assert_eq!(read("1 day -1:00"), Some((0, 1, -HOUR)));
        assert_eq!(read("100:00:00"), Some((0, 0, 100 * HOUR)));
        assert_eq!(read(".5 hours"), Some((0, 0, HOUR / 2)));
        assert_eq!(read("@ 1 day 2 hours ago"), Some((0, -1, -2 * HOUR)));
    }

    #[test]
    fn other_texts_are_refused() {
        for text in ["", "day", "1 2", "1 fortnight", "01:60", "P", "P1H", "PT", "1:2:3:4", "1e3 seconds", "+1 -2 days", "1 hour 1 hour", "1 hour 01:00"] {
            assert_eq!(read(text), None, "{text}");
        }
        // PostgreSQL 15 has no infinite interval.
        assert_eq!(parse_interval("infinity"), Err(InputError::Syntax));
        assert_eq!(parse_interval("99999999999 days"), Err(InputError::TypeRange));
        assert_eq!(parse_interval("10-13"), Err(InputError::FieldRange));
        assert_eq!(parse_interval("56713727820156410577229101238628035243 years"), Err(InputError::TypeRange));
        assert_eq!(parse_interval("3000000000000000000000000000000:00"), Err(InputError::TypeRange));
        // One microsecond past what Arrow's nanoseconds hold.
        assert_eq!(parse_interval("9223372036854776 microseconds"), Err(InputError::TypeRange));
    }
}
