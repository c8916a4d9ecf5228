//! The independent computation answers are checked against: the same generated
//! data in a plain single-process DataFusion, no FoamDB code on the path.

use std::sync::Arc;

use arrow::record_batch::RecordBatch;
use arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::catalog::MemTable;
use datafusion::prelude::SessionContext;

use crate::schema::{ALL_TABLES, conform};

/// A DataFusion context holding all eight tables at `scale_factor` in memory,
/// typed like FoamDB's tables.
pub async fn reference_context(scale_factor: f64) -> datafusion::error::Result<SessionContext> {
    let ctx = SessionContext::new();
    let types = SessionContext::new();
    for table in ALL_TABLES {
        // FoamDB's column types, taken from its DDL by planning it in DataFusion.
        let create = table.create_sql().split(" DISTRIBUTED").next().unwrap_or_default();
        types.sql(create).await?.collect().await?;
        let schema = Arc::new(types.table(table.name()).await?.schema().as_arrow().clone());
        let mut batches = Vec::new();
        for batch in table.generate(scale_factor, 0, 1) {
            batches.push(conform(&batch?, &schema)?);
        }
        ctx.register_table(table.name(), Arc::new(MemTable::try_new(schema, vec![batches])?))?;
    }
    Ok(ctx)
}

/// Runs `sql` and returns its rows as text, NULL as "NULL".
pub async fn rows_as_text(ctx: &SessionContext, sql: &str) -> datafusion::error::Result<Vec<Vec<String>>> {
    let batches = ctx.sql(sql).await?.collect().await?;
    batches_as_text(&batches)
}

pub fn batches_as_text(batches: &[RecordBatch]) -> datafusion::error::Result<Vec<Vec<String>>> {
    let options = FormatOptions::default().with_null("NULL");
    let mut rows = Vec::new();
    for batch in batches {
        let formatters = batch
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &options))
            .collect::<Result<Vec<_>, _>>()?;
        for row in 0..batch.num_rows() {
            rows.push(formatters.iter().map(|f| f.value(row).to_string()).collect());
        }
    }
    Ok(rows)
}

/// Compares two answers: same row count and order; integers equal exactly;
/// other numbers within a relative 1e-9 (engines may sum floating point in
/// different orders; a unit's change in an eight-digit sum is caught) or
/// within half a unit of the last digit `expected` prints (the TPC-H kit's
/// answers are rounded to cents); text equal after trimming padding.
pub fn compare(expected: &[Vec<String>], actual: &[Vec<String>]) -> Result<(), String> {
    if expected.len() != actual.len() {
        return Err(format!("expected {} rows, got {}", expected.len(), actual.len()));
    }
    for (index, (want, got)) in expected.iter().zip(actual).enumerate() {
        if want.len() != got.len() {
            return Err(format!("row {index}: expected {} columns, got {}", want.len(), got.len()));
        }
        for (column, (w, g)) in want.iter().zip(got).enumerate() {
            if !values_equal(w.trim(), g.trim()) {
                return Err(format!(
                    "row {index} column {column}: expected {w:?}, got {g:?}\nexpected row {want:?}\nactual row   {got:?}"
                ));
            }
        }
    }
    Ok(())
}

fn values_equal(want: &str, got: &str) -> bool {
    let is_integer = |s: &str| s.parse::<i128>().is_ok();
    if is_integer(want) && is_integer(got) {
        return want.parse::<i128>() == got.parse::<i128>();
    }
    match (want.parse::<f64>(), got.parse::<f64>()) {
        (Ok(a), Ok(b)) if a.is_finite() && b.is_finite() => {
            let unit = |decimals: Option<i32>| decimals.map_or(0.0, |d| 10f64.powi(-d));
            let (want_decimals, got_decimals) = (printed_decimals(want), printed_decimals(got));
            // Half a unit of the expected value's last digit (it may be
            // rounded, as the kit's cents are); a whole one of the actual
            // value's when that prints fewer digits (DataFusion truncates a
            // decimal average to six places).
            let mut tolerance = 0.5 * unit(want_decimals);
            if let (Some(w), Some(g)) = (want_decimals, got_decimals)
                && g < w
            {
                tolerance = tolerance.max(unit(got_decimals));
            }
            // Floating point (many digits or an exponent on either side) may
            // have been summed in another order; decimals are exact.
            let floating = [want_decimals, got_decimals].iter().any(|d| d.is_none_or(|d| d > DECIMAL_SCALE_MAX));
            let relative = if floating { 1e-9 * a.abs().max(b.abs()).max(1.0) } else { 0.0 };
            (a - b).abs() <= relative.max(tolerance * (1.0 + 1e-9))
        }
        _ => want == got,
    }
}

/// More digits after the point than a decimal answer of these queries has
/// (DataFusion's averages have six): the value is floating point.
const DECIMAL_SCALE_MAX: i32 = 6;

/// The digits after the point of a number printed without an exponent.
fn printed_decimals(number: &str) -> Option<i32> {
    match number.split_once('.') {
        Some((_, fraction)) if fraction.bytes().all(|b| b.is_ascii_digit()) => Some(fraction.len() as i32),
        Some(_) => None,
        None => number.bytes().all(|b| b.is_ascii_digit() || b == b'-').then_some(0),
    }
}

#[cfg(test)]
mod tests {
    use super::compare;

    fn rows(values: &[&[&str]]) -> Vec<Vec<String>> {
        values.iter().map(|r| r.iter().map(|v| v.to_string()).collect()).collect()
    }

    #[test]
    fn numbers_compare_with_tolerance_and_text_exactly() {
        assert!(compare(&rows(&[&["1.0000000000001", "a"]]), &rows(&[&["1", "a   "]])).is_ok());
        // A sum off by one in its last printed digit is a difference.
        assert!(compare(&rows(&[&["37734107.00"]]), &rows(&[&["37734108.00"]])).is_err());
        assert!(compare(&rows(&[&["56586554400.73"]]), &rows(&[&["56586554400.74"]])).is_err());
        // An average printed to fewer places may be off by one of them.
        assert!(compare(&rows(&[&["25.522005853257337"]]), &rows(&[&["25.522005"]])).is_ok());
        assert!(compare(&rows(&[&["25.522005853257337"]]), &rows(&[&["25.522003"]])).is_err());
        assert!(compare(&rows(&[&["1.5", "a"]]), &rows(&[&["1.6", "a"]])).is_err());
        assert!(compare(&rows(&[&["1", "a"]]), &rows(&[&["1", "b"]])).is_err());
        assert!(compare(&rows(&[&["1"]]), &rows(&[])).is_err());
        // Counts match exactly, however large.
        assert!(compare(&rows(&[&["1478493"]]), &rows(&[&["1478494"]])).is_err());
        // An answer printed to cents matches any value that rounds to it.
        assert!(compare(&rows(&[&["25.52"]]), &rows(&[&["25.522005853"]])).is_ok());
        assert!(compare(&rows(&[&["25.52"]]), &rows(&[&["25.5261"]])).is_err());
        assert!(compare(&rows(&[&["NULL"]]), &rows(&[&["0"]])).is_err());
    }
}
