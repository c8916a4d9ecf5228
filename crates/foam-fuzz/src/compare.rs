//! Comparing two answers to one query, from two engines that print values
//! differently.
//!
//! FoamDB answers over the PostgreSQL protocol as text (`t`, `1.5`, `1.50`);
//! the reference answers in Arrow arrays. Both are brought to one canonical
//! text per cell, by the reference's column type: booleans as `t`/`f`,
//! floating point and decimal numbers rounded to
//! [`SIGNIFICANT_DIGITS`] (engines may add floating point in different
//! orders), timestamps as one text of their date and time (an instant,
//! one with a zone: `2024-01-01T03:00:00-05:00` as Arrow prints it in the
//! column's zone and `2024-01-01 03:00:00-05` as PostgreSQL prints it in
//! the session's are both `2024-01-01 08:00:00Z`), everything else as
//! printed. Answers without a defined order are
//! compared as multisets (both sorted), ordered ones row by row.

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};

/// Significant digits two numbers must agree to.
pub const SIGNIFICANT_DIGITS: usize = 9;

/// An answer: rows of cells, `None` for NULL.
pub type Rows = Vec<Vec<Option<String>>>;

/// The reference's rows as text, and each column's type.
pub fn batches_to_rows(batches: &[RecordBatch]) -> Result<(Rows, Vec<DataType>), String> {
    let options = FormatOptions::default();
    let mut rows = Vec::new();
    let mut types = Vec::new();
    for batch in batches {
        types = batch.schema().fields().iter().map(|f| f.data_type().clone()).collect();
        let formatters = batch.columns().iter().map(|c| ArrayFormatter::try_new(c.as_ref(), &options)).collect::<Result<Vec<_>, _>>();
        let formatters = formatters.map_err(|e| e.to_string())?;
        for row in 0..batch.num_rows() {
            rows.push(
                batch
                    .columns()
                    .iter()
                    .zip(&formatters)
                    .map(|(column, f)| (!column.is_null(row)).then(|| f.value(row).to_string()))
                    .collect(),
            );
        }
    }
    Ok((rows, types))
}

fn number(text: &str) -> Option<String> {
    let value: f64 = text.trim().parse().ok()?;
    if value == 0.0 {
        return Some("0".into());
    }
    Some(format!("{value:.prec$e}", prec = SIGNIFICANT_DIGITS - 1))
}

/// One cell's canonical text, given the reference's type of its column.
pub fn canonical(cell: &Option<String>, data_type: Option<&DataType>) -> String {
    let Some(text) = cell else { return "NULL".into() };
    match data_type {
        Some(DataType::Boolean) => boolean(text).unwrap_or(text).into(),
        Some(t) if t.is_floating() || matches!(t, DataType::Decimal128(..) | DataType::Decimal256(..)) => {
            number(text).unwrap_or_else(|| text.clone())
        }
        Some(DataType::Timestamp(..)) => canonical_timestamp(text).unwrap_or_else(|| text.clone()),
        Some(_) => text.clone(),
        // No type known (the reference failed): two servers' texts.
        None => boolean(text).map(str::to_string).or_else(|| number(text)).unwrap_or_else(|| text.clone()),
    }
}

/// A timestamp as Arrow (`2024-01-01T03:00:00.500`, `...-05:00`, `...Z`)
/// or PostgreSQL (`2024-01-01 03:00:00.5`, `...-05`, `...+05:30`) prints
/// it: its date and time, in UTC with a `Z` when it has an offset.
pub(crate) fn canonical_timestamp(text: &str) -> Option<String> {
    use chrono::{Duration, NaiveDateTime};
    let (local, offset) = split_offset(text.trim());
    let offset = match offset {
        Some(offset) => Some(offset_seconds(offset)?),
        None => None,
    };
    let local = NaiveDateTime::parse_from_str(&local.replacen('T', " ", 1), "%Y-%m-%d %H:%M:%S%.f").ok()?;
    Some(match offset {
        Some(seconds) => format!("{}Z", (local - Duration::seconds(seconds)).format("%Y-%m-%d %H:%M:%S%.f")),
        None => local.format("%Y-%m-%d %H:%M:%S%.f").to_string(),
    })
}

/// A timestamp's text as its local date and time and its offset (`Z`,
/// `-05`, `-05:00`, `+05:30`) when it has one.
pub(crate) fn split_offset(text: &str) -> (&str, Option<&str>) {
    if let Some(local) = text.strip_suffix('Z') {
        return (local, Some("Z"));
    }
    match text.get(11..).and_then(|time| time.rfind(['+', '-'])) {
        Some(at) => {
            let (local, offset) = text.split_at(11 + at);
            (local, Some(offset))
        }
        None => (text, None),
    }
}

/// `Z`, `+05`, `-05:00`, `+0530` or `+05:30:15` as seconds east of UTC.
fn offset_seconds(text: &str) -> Option<i64> {
    if text == "Z" {
        return Some(0);
    }
    let sign = if text.starts_with('-') { -1 } else { 1 };
    let digits: String = text[1..].chars().filter(|c| *c != ':').collect();
    if digits.len() % 2 != 0 || digits.is_empty() || digits.len() > 6 || !digits.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let parts: Vec<i64> = digits.as_bytes().chunks(2).map(|pair| i64::from((pair[0] - b'0') * 10 + (pair[1] - b'0'))).collect();
    let seconds = parts[0] * 3600 + parts.get(1).copied().unwrap_or(0) * 60 + parts.get(2).copied().unwrap_or(0);
    Some(sign * seconds)
}

/// A boolean as `t` or `f`, however an engine printed it.
fn boolean(text: &str) -> Option<&'static str> {
    match text {
        "true" | "t" => Some("t"),
        "false" | "f" => Some("f"),
        _ => None,
    }
}

fn canonical_rows(rows: &Rows, types: &[DataType], ordered: bool) -> Vec<Vec<String>> {
    let mut out: Vec<Vec<String>> =
        rows.iter().map(|row| row.iter().enumerate().map(|(i, cell)| canonical(cell, types.get(i))).collect()).collect();
    if !ordered {
        out.sort();
    }
    out
}

/// `None` when the answers agree, else a description of the first difference.
pub fn difference(expected: &Rows, actual: &Rows, types: &[DataType], ordered: bool) -> Option<String> {
    let (want, got) = (canonical_rows(expected, types, ordered), canonical_rows(actual, types, ordered));
    if want == got {
        return None;
    }
    if want.len() != got.len() {
        return Some(format!("{} rows expected, {} returned", want.len(), got.len()));
    }
    let (index, (w, g)) = want.iter().zip(&got).enumerate().find(|(_, (w, g))| w != g)?;
    Some(format!("row {index}{}: expected {w:?}, got {g:?}", if ordered { "" } else { " (sorted)" }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(values: &[&[Option<&str>]]) -> Rows {
        values.iter().map(|r| r.iter().map(|v| v.map(str::to_string)).collect()).collect()
    }

    #[test]
    fn engines_printing_one_value_differently_agree() {
        let types = [DataType::Boolean, DataType::Float64, DataType::Decimal128(10, 2), DataType::Utf8];
        let reference = rows(&[&[Some("true"), Some("3.0"), Some("1.50"), None], &[Some("false"), Some("0.1"), Some("-0"), Some("")]]);
        let foam = rows(&[&[Some("f"), Some("0.10000000000000002"), Some("0.00"), Some("")], &[Some("t"), Some("3"), Some("1.5"), None]]);
        assert_eq!(difference(&reference, &foam, &types, false), None);
        assert!(difference(&reference, &foam, &types, true).is_some(), "in order the rows differ");
    }

    #[test]
    fn one_instant_printed_by_either_engine_in_any_zone_agrees() {
        use datafusion::arrow::datatypes::TimeUnit;
        let zoned = [DataType::Timestamp(TimeUnit::Nanosecond, Some("America/New_York".into()))];
        let reference = rows(&[&[Some("2024-01-01T22:00:00.500-05:00")], &[Some("2024-01-02T03:00:00Z")]]);
        let foam = rows(&[&[Some("2024-01-02 08:30:00+05:30")], &[Some("2024-01-02 03:00:00.5+00")]]);
        assert_eq!(difference(&reference, &foam, &zoned, false), None);
        let later = rows(&[&[Some("2024-01-02 08:30:00+05:30")], &[Some("2024-01-02 03:00:01.5+00")]]);
        assert!(difference(&reference, &later, &zoned, false).is_some(), "a second apart");
        let plain = [DataType::Timestamp(TimeUnit::Microsecond, None)];
        assert_eq!(difference(&rows(&[&[Some("2024-01-01T23:00:00.500")]]), &rows(&[&[Some("2024-01-01 23:00:00.5")]]), &plain, false), None);
        let instant = rows(&[&[Some("2024-01-01 23:00:00+00")]]);
        assert!(difference(&rows(&[&[Some("2024-01-01T23:00:00")]]), &instant, &plain, false).is_some(), "an instant is not a local time");
    }

    #[test]
    fn a_missing_row_a_changed_value_or_null_is_a_difference() {
        let types = [DataType::Int64];
        let one = rows(&[&[Some("1")], &[Some("1")]]);
        assert!(difference(&one, &rows(&[&[Some("1")]]), &types, false).is_some());
        assert!(difference(&one, &rows(&[&[Some("1")], &[Some("2")]]), &types, false).is_some());
        assert!(difference(&one, &rows(&[&[Some("1")], &[None]]), &types, false).is_some());
        assert!(difference(&rows(&[&[Some("")]]), &rows(&[&[None]]), &[DataType::Utf8], false).is_some(), "'' is not NULL");
    }
}
