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
const SECOND_MICROS: f64 = 1e6;
const MINUTE_MICROS: f64 = 60.0 * SECOND_MICROS;
const HOUR_MICROS: f64 = 60.0 * MINUTE_MICROS;
const DAY_MICROS: f64 = 24.0 * HOUR_MICROS;
/// Days in a month and months in a year, as PostgreSQL reckons a fraction.
const MONTH_DAYS: f64 = 30.0;
const YEAR_MONTHS: f64 = 12.0;

/// An interval's fields as they add up.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
struct Sum {
    months: f64,
    days: f64,
    micros: f64,
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

impl Sum {
    /// Adds `value` of `unit`, its fraction carried down as PostgreSQL does.
    fn add(&mut self, value: f64, unit: Unit) {
        let whole = value.trunc();
        let fraction = value - whole;
        match unit {
            Unit::Microsecond => self.micros += value,
            Unit::Millisecond => self.micros += value * 1e3,
            Unit::Second => self.micros += value * SECOND_MICROS,
            Unit::Minute => self.micros += value * MINUTE_MICROS,
            Unit::Hour => self.micros += value * HOUR_MICROS,
            Unit::Day => self.add_days(whole, fraction),
            Unit::Week => {
                let days = value * 7.0;
                self.add_days(days.trunc(), days - days.trunc());
            }
            Unit::Month => {
                self.months += whole;
                let days = fraction * MONTH_DAYS;
                self.add_days(days.trunc(), days - days.trunc());
            }
            Unit::Year | Unit::Decade | Unit::Century | Unit::Millennium => {
                let years = match unit {
                    Unit::Decade => 10.0,
                    Unit::Century => 100.0,
                    Unit::Millennium => 1000.0,
                    _ => 1.0,
                };
                self.months += whole * years * YEAR_MONTHS + (fraction * years * YEAR_MONTHS).round();
            }
        }
    }

    fn add_days(&mut self, whole: f64, fraction: f64) {
        self.days += whole;
        self.micros += fraction * DAY_MICROS;
    }

    fn negated(self) -> Sum {
        Sum { months: -self.months, days: -self.days, micros: -self.micros }
    }

    fn interval(self) -> Result<IntervalMonthDayNano, InputError> {
        let months = self.months.round();
        let days = self.days.round();
        let micros = self.micros.round();
        let fits32 = |v: f64| v >= f64::from(i32::MIN) && v <= f64::from(i32::MAX);
        // Nanoseconds must fit an i64 too.
        if !fits32(months) || !fits32(days) || micros.abs() > (i64::MAX / 1000) as f64 {
            return Err(InputError::TypeRange);
        }
        Ok(IntervalMonthDayNano::new(months as i32, days as i32, micros as i64 * 1000))
    }
}

/// `text` as PostgreSQL reads it as an interval (see the module
/// documentation).
pub fn parse_interval(text: &str) -> Result<IntervalMonthDayNano, InputError> {
    let lower = text.trim().to_ascii_lowercase();
    if lower.is_empty() {
        return Err(InputError::Syntax);
    }
    if lower == "infinity" || lower == "-infinity" || lower == "+infinity" {
        return Err(InputError::Infinity);
    }
    if let Some(iso) = lower.strip_prefix('p') {
        return iso_8601(iso)?.interval();
    }
    // `1 day, 2:00:00` (Python's timedelta) reads as PostgreSQL reads it.
    let mut words: Vec<String> = lower.replace(',', " ").split_whitespace().flat_map(split_number_and_unit).collect();
    if words.first().is_some_and(|w| w == "@") {
        words.remove(0);
    }
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
        } else if let Some((years, months)) = years_months(word) {
            once(&[Unit::Year, Unit::Month])?;
            sum.months += years * YEAR_MONTHS + months;
        } else {
            let value: f64 = number(word)?;
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

/// A signed decimal number (no exponent, no `nan` or `inf`).
fn number(word: &str) -> Result<f64, InputError> {
    let digits = word.trim_start_matches(['+', '-']);
    if digits.is_empty() || !digits.chars().all(|c| c.is_ascii_digit() || c == '.') || digits.matches('.').count() > 1 || digits == "." {
        return Err(InputError::Syntax);
    }
    word.parse().map_err(|_| InputError::Syntax)
}

/// `[+-]h:m[:s[.f]]` in microseconds.
fn time_micros(word: &str) -> Result<f64, InputError> {
    let (sign, rest) = match word.strip_prefix('-') {
        Some(rest) => (-1.0, rest),
        None => (1.0, word.strip_prefix('+').unwrap_or(word)),
    };
    let parts: Vec<&str> = rest.split(':').collect();
    let whole = |s: &str| if !s.is_empty() && s.chars().all(|c| c.is_ascii_digit()) { s.parse::<f64>().map_err(|_| InputError::Syntax) } else { Err(InputError::Syntax) };
    let (hours, minutes, seconds) = match parts.as_slice() {
        [h, m] => (whole(h)?, whole(m)?, 0.0),
        [h, m, s] => (whole(h)?, whole(m)?, number(s).ok().filter(|_| !s.starts_with(['+', '-'])).ok_or(InputError::Syntax)?),
        _ => return Err(InputError::Syntax),
    };
    if minutes >= 60.0 || seconds >= 60.0 {
        return Err(InputError::FieldRange);
    }
    Ok(sign * (hours * HOUR_MICROS + minutes * MINUTE_MICROS + seconds * SECOND_MICROS))
}

/// SQL's `years-months` (`1-2`), signed as a whole.
fn years_months(word: &str) -> Option<(f64, f64)> {
    let (sign, rest) = match word.strip_prefix('-') {
        Some(rest) => (-1.0, rest),
        None => (1.0, word.strip_prefix('+').unwrap_or(word)),
    };
    let (years, months) = rest.split_once('-')?;
    let all_digits = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_digit());
    if !all_digits(years) || !all_digits(months) {
        return None;
    }
    Some((sign * years.parse::<f64>().ok()?, sign * months.parse::<f64>().ok()?))
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
        let value = number(&rest[..end])?;
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
        assert_eq!(parse_interval("infinity"), Err(InputError::Infinity));
        assert_eq!(parse_interval("99999999999 days"), Err(InputError::TypeRange));
    }
}
