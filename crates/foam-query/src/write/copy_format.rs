//! COPY's text and CSV formats read as PostgreSQL reads them, into record
//! batches of a table's types.
//!
//! ```text
//!   bytes ─ Records (one record per line in text, quoted line breaks in CSV)
//!         ─▶ fields as text, NULL told apart from '' ─▶ a column of text each
//!         ─▶ typed_batch: cast to the table's types, the first bad value named
//! ```
//!
//! - text: fields split at the delimiter; the NULL string (`\N`) is matched
//!   before escapes are decoded; `\t \n \r \b \f \v \\`, an escaped
//!   delimiter, octal `\NNN` and hex `\xHH` are decoded; no quoting.
//! - CSV: a field may be quoted (the delimiter, line breaks and doubled
//!   quotes inside); only an unquoted field equal to the NULL string (by
//!   default the empty one) is NULL, so `""` is an empty string.
//!
//! A general CSV reader cannot do either: it knows no backslash escapes and
//! loses whether a field was quoted.

use std::io::BufRead;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, StringArray};
use arrow::compute::cast_with_options;
use arrow::datatypes::{DataType, SchemaRef};
use arrow::record_batch::RecordBatch;
use foam_catalog::TableDef;
use foam_common::{FoamError, FoamResult};

use super::copy::{CopyFormat, CopyOptions};

/// One record: the line it starts on (1-based) and its fields, None for NULL.
pub type Record = (u64, Vec<Option<String>>);

/// The records of a text or CSV stream, one at a time.
pub struct Records<R> {
    input: R,
    options: CopyOptions,
    table: String,
    /// Lines read so far.
    line: u64,
    raw: Vec<u8>,
}

impl<R: BufRead> Records<R> {
    pub fn new(input: R, options: CopyOptions, table: &str) -> Self {
        Records { input, options, table: table.to_string(), line: 0, raw: Vec::new() }
    }

    /// The next record, or None at the end of the data.
    pub fn next_record(&mut self) -> FoamResult<Option<Record>> {
        if !self.read_line()? {
            return Ok(None);
        }
        let first_line = self.line;
        let fields = match self.options.format {
            CopyFormat::Csv => self.csv_fields()?,
            _ => text_fields(strip_line_end(&self.raw), &self.options).map_err(|message| self.error(first_line, message))?,
        };
        Ok(Some((first_line, fields)))
    }

    /// Reads the next physical line into `raw`; false at the end.
    fn read_line(&mut self) -> FoamResult<bool> {
        self.raw.clear();
        let read = self.input.read_until(b'\n', &mut self.raw).map_err(|e| FoamError::DataException { message: e.to_string() })?;
        if read == 0 {
            return Ok(false);
        }
        self.line += 1;
        Ok(true)
    }

    fn error(&self, line: u64, message: String) -> FoamError {
        FoamError::CopyData { table: self.table.clone(), line, column: None, message }
    }

    /// The fields of the CSV record starting in `raw`, reading more lines
    /// while a quoted field holds a line break.
    fn csv_fields(&mut self) -> FoamResult<Vec<Option<String>>> {
        let (delimiter, quote) = (self.options.delimiter, self.options.quote);
        let escape = self.options.escape.unwrap_or(quote);
        let null = self.options.null.clone().unwrap_or_default();
        let first_line = self.line;
        let mut fields = Vec::new();
        let mut field: Vec<u8> = Vec::new();
        let mut quoted = false; // the field had a quoted part
        let mut in_quotes = false;
        let mut at = 0;
        let mut line = std::mem::take(&mut self.raw);
        loop {
            if at >= line.len() {
                if !in_quotes {
                    break;
                }
                // A line break inside quotes belongs to the value.
                self.raw = line;
                if !self.read_line()? {
                    return Err(self.error(first_line, "unterminated CSV quoted field".into()));
                }
                line = std::mem::take(&mut self.raw);
                at = 0;
                continue;
            }
            let byte = line[at];
            at += 1;
            if in_quotes {
                if byte == escape && line.get(at).is_some_and(|&next| next == quote || next == escape) && (escape != quote || line[at] == quote) {
                    field.push(line[at]);
                    at += 1;
                } else if byte == quote {
                    in_quotes = false;
                } else {
                    field.push(byte);
                }
                continue;
            }
            match byte {
                b if b == delimiter => fields.push(csv_value(std::mem::take(&mut field), std::mem::take(&mut quoted), &null)),
                b if b == quote => {
                    in_quotes = true;
                    quoted = true;
                }
                b'\n' => break,
                b'\r' if line.get(at) == Some(&b'\n') => {}
                b => field.push(b),
            }
        }
        fields.push(csv_value(field, quoted, &null));
        self.raw = line;
        fields
            .into_iter()
            .map(|value| value.map(|bytes| utf8(bytes).map_err(|message| self.error(first_line, message))).transpose())
            .collect()
    }
}

/// A CSV field: NULL when unquoted and equal to the NULL string.
fn csv_value(bytes: Vec<u8>, quoted: bool, null: &str) -> Option<Vec<u8>> {
    (quoted || bytes != null.as_bytes()).then_some(bytes)
}

fn strip_line_end(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.strip_suffix(b"\r").unwrap_or(line)
}

fn utf8(bytes: Vec<u8>) -> Result<String, String> {
    String::from_utf8(bytes).map_err(|e| format!("invalid byte sequence for encoding \"UTF8\": {e}"))
}

/// The fields of one line in the text format.
fn text_fields(line: &[u8], options: &CopyOptions) -> Result<Vec<Option<String>>, String> {
    let null = options.null.as_deref().unwrap_or_default().as_bytes();
    let mut fields = Vec::new();
    let mut start = 0;
    let mut at = 0;
    while at <= line.len() {
        if at == line.len() || line[at] == options.delimiter {
            let raw = &line[start..at];
            fields.push(if raw == null { None } else { Some(utf8(unescape(raw))?) });
            start = at + 1;
        } else if line[at] == b'\\' {
            at += 1; // the escaped byte is never a delimiter
        }
        at += 1;
    }
    Ok(fields)
}

/// Decodes the text format's backslash escapes.
fn unescape(raw: &[u8]) -> Vec<u8> {
    if !raw.contains(&b'\\') {
        return raw.to_vec();
    }
    let mut out = Vec::with_capacity(raw.len());
    let mut at = 0;
    while at < raw.len() {
        let byte = raw[at];
        at += 1;
        if byte != b'\\' || at == raw.len() {
            out.push(byte);
            continue;
        }
        let next = raw[at];
        at += 1;
        match next {
            b'b' => out.push(0x08),
            b'f' => out.push(0x0c),
            b'n' => out.push(b'\n'),
            b'r' => out.push(b'\r'),
            b't' => out.push(b'\t'),
            b'v' => out.push(0x0b),
            b'0'..=b'7' => {
                let mut value = u32::from(next - b'0');
                for _ in 0..2 {
                    match raw.get(at) {
                        Some(&d @ b'0'..=b'7') => {
                            value = value * 8 + u32::from(d - b'0');
                            at += 1;
                        }
                        _ => break,
                    }
                }
                out.push(value as u8);
            }
            b'x' if raw.get(at).is_some_and(u8::is_ascii_hexdigit) => {
                let digits = raw[at..].iter().take(2).take_while(|d| d.is_ascii_hexdigit()).count();
                let text = std::str::from_utf8(&raw[at..at + digits]).unwrap_or("0");
                out.push(u8::from_str_radix(text, 16).unwrap_or(0));
                at += digits;
            }
            other => out.push(other),
        }
    }
    out
}

/// Builds one batch of `table`'s types from records of text: each column is
/// cast from text, and the first value that does not convert is named with
/// its line, as is a record with too few or too many fields and a NULL in a
/// NOT NULL column. With `columns`, the fields fill those columns of the
/// table (in that order) and the others are NULL.
pub fn typed_batch(records: &[Record], schema: &SchemaRef, table: &TableDef, options: &crate::write::copy::CopyOptions) -> FoamResult<RecordBatch> {
    let (columns, defaults) = (options.columns.as_deref(), options.defaults.as_slice());
    let error = |line: u64, column: Option<&str>, message: String| FoamError::CopyData {
        table: table.name.clone(),
        line,
        column: column.map(str::to_string),
        message,
    };
    let all: Vec<usize> = (0..schema.fields().len()).collect();
    let filled = columns.unwrap_or(&all);
    for (line, fields) in records {
        if fields.len() < filled.len() {
            return Err(error(*line, None, format!("missing data for column \"{}\"", schema.field(filled[fields.len()]).name())));
        }
        if fields.len() > filled.len() {
            return Err(error(*line, None, "extra data after last expected column".into()));
        }
    }
    let mut arrays: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
    for (index, field) in schema.fields().iter().enumerate() {
        if !filled.contains(&index)
            && let Some((_, fill)) = defaults.iter().find(|(at, _)| *at == index)
        {
            let array = fill.values(records.len())?;
            if array.null_count() > 0 && !field.is_nullable() && !records.is_empty() {
                let message = format!("null value in column \"{}\" violates not-null constraint", field.name());
                return Err(error(records[0].0, Some(field.name()), message));
            }
            let options = arrow::compute::CastOptions { safe: false, ..Default::default() };
            let cast = arrow::compute::cast_with_options(&array, field.data_type(), &options);
            arrays.push(cast.map_err(|e| error(records[0].0, Some(field.name()), format!("default out of range: {e}")))?);
            continue;
        }
        let text: StringArray = match filled.iter().position(|c| *c == index) {
            Some(at) => records.iter().map(|(_, fields)| fields[at].as_deref()).collect(),
            None => records.iter().map(|_| None::<&str>).collect(),
        };
        if !field.is_nullable()
            && let Some(row) = (0..text.len()).find(|&row| text.is_null(row))
        {
            let message = format!("null value in column \"{}\" violates not-null constraint", field.name());
            return Err(error(records[row].0, Some(field.name()), message));
        }
        let text: ArrayRef = Arc::new(text);
        if matches!(field.data_type(), DataType::Utf8) {
            arrays.push(text);
            continue;
        }
        if crate::exec::datetime_input::is_datetime(field.data_type()) {
            let now = crate::exec::datetime_input::now_utc();
            // A timestamptz without a zone is local time in the session's.
            let read_as = options
                .time_zone
                .as_deref()
                .and_then(|zone| crate::frontend::time_zone::in_zone(field.data_type(), zone))
                .unwrap_or_else(|| field.data_type().clone());
            let typed = crate::exec::datetime_input::cast_texts(&text, &read_as, now).map_err(|(row, input)| {
                let value = text.as_any().downcast_ref::<StringArray>().map(|t| t.value(row).to_string()).unwrap_or_default();
                error(records[row].0, Some(field.name()), input.to_error(&value, field.data_type()).to_string())
            })?;
            arrays.push(if &read_as == field.data_type() { typed } else { arrow::compute::cast(&typed, field.data_type()).map_err(|e| FoamError::internal(e.to_string()))? });
            continue;
        }
        // The safe cast turns a bad value into NULL: the first NULL that was
        // not one in the text is the value to name.
        let options = arrow::compute::CastOptions { safe: true, ..Default::default() };
        let typed = cast_with_options(&text, field.data_type(), &options).map_err(|e| error(records[0].0, Some(field.name()), e.to_string()))?;
        if let Some(row) = (0..typed.len()).find(|&row| typed.is_null(row) && !text.is_null(row)) {
            let sql_type = table.columns.get(index).map(|c| c.sql_type.sql_name()).unwrap_or_else(|| field.data_type().to_string());
            let text = text.as_any().downcast_ref::<StringArray>().map(|t| t.value(row).to_string()).unwrap_or_default();
            return Err(error(records[row].0, Some(field.name()), format!("invalid input syntax for type {sql_type}: \"{text}\"")));
        }
        arrays.push(typed);
    }
    RecordBatch::try_new(schema.clone(), arrays).map_err(|e| FoamError::DataException { message: e.to_string() })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn records(text: &str, options: CopyOptions) -> FoamResult<Vec<Vec<Option<String>>>> {
        let mut reader = Records::new(std::io::Cursor::new(text.as_bytes().to_vec()), options, "t");
        let mut all = Vec::new();
        while let Some((_, fields)) = reader.next_record()? {
            all.push(fields);
        }
        Ok(all)
    }

    fn row(values: &[Option<&str>]) -> Vec<Option<String>> {
        values.iter().map(|v| v.map(str::to_string)).collect()
    }

    fn csv() -> CopyOptions {
        CopyOptions { format: CopyFormat::Csv, header: false, delimiter: b',', quote: b'"', escape: None, null: None, columns: None, defaults: Vec::new(), time_zone: None, checks: None }
    }

    #[test]
    fn text_format_decodes_escapes_and_matches_null_before_them() {
        let text = "tab\\there\t1\nback\\\\slash\t\\N\nnew\\nline\t\\\\N\nescaped\\\tdelimiter\t\\101\\x42\r\n\t\n";
        assert_eq!(
            records(text, CopyOptions::default()).unwrap(),
            vec![
                row(&[Some("tab\there"), Some("1")]),
                row(&[Some("back\\slash"), None]),
                row(&[Some("new\nline"), Some("\\N")]),
                row(&[Some("escaped\tdelimiter"), Some("AB")]),
                row(&[Some(""), Some("")]),
            ]
        );
        // Quotes mean nothing in the text format.
        assert_eq!(records("\"a\"\tb\"\n", CopyOptions::default()).unwrap(), vec![row(&[Some("\"a\""), Some("b\"")])]);
    }

    #[test]
    fn csv_tells_an_empty_string_from_null_and_keeps_quoted_line_breaks() {
        let text = "\"\",,plain\n\"a,b\",\"say \"\"hi\"\"\",\"two\nlines\"\r\n\"\\.\",x,3\n";
        assert_eq!(
            records(text, csv()).unwrap(),
            vec![
                row(&[Some(""), None, Some("plain")]),
                row(&[Some("a,b"), Some("say \"hi\""), Some("two\nlines")]),
                row(&[Some("\\."), Some("x"), Some("3")]),
            ]
        );
        let null_word = CopyOptions { null: Some("NULL".into()), ..csv() };
        assert_eq!(records("NULL,\"NULL\",\n", null_word).unwrap(), vec![row(&[None, Some("NULL"), Some("")])]);
        let backslash = CopyOptions { escape: Some(b'\\'), ..csv() };
        assert_eq!(records("\"a\\\"b\",\"c\\\\d\"\n", backslash).unwrap(), vec![row(&[Some("a\"b"), Some("c\\d")])]);
        // As in PostgreSQL, a quote starts a quoted part anywhere in a field.
        assert_eq!(records("a\"b,c\"d\n", csv()).unwrap(), vec![row(&[Some("ab,cd")])]);
        let error = records("\"open\n", csv()).unwrap_err();
        assert_eq!(error.sqlstate(), foam_common::SqlState::BadCopyFileFormat);
    }
}
