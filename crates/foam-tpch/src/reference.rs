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
/// other numbers within a relative 1e-6 (engines may sum floating point in
/// different orders) or within half a unit of the last digit `expected`
/// prints (the TPC-H kit's answers are rounded to cents); text equal after
/// trimming padding.
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
            let printed_decimals = match want.split_once('.') {
                Some((_, fraction)) if fraction.bytes().all(|b| b.is_ascii_digit()) => fraction.len() as i32,
                _ => i32::MAX,
            };
            let half_unit = if printed_decimals == i32::MAX { 0.0 } else { 0.5 * 10f64.powi(-printed_decimals) };
            let tolerance = (1e-6 * a.abs().max(b.abs()).max(1.0)).max(half_unit * (1.0 + 1e-9));
            (a - b).abs() <= tolerance
        }
        _ => want == got,
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
        assert!(compare(&rows(&[&["1.0000000001", "a"]]), &rows(&[&["1", "a   "]])).is_ok());
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
