//! `COPY ... TO STDOUT`: a query's rows as the client's COPY stream, in
//! PostgreSQL's text, CSV or binary format.
//!
//! ```text
//!   record batch ─ arrow-pg (as for query results) ─▶ each value's text ─ escape/quote ─▶ one CopyData per row
//!                └ arrow-pg binary encoder ──────────────────────────────────────────────▶ one CopyData per row
//! ```
//!
//! Values are rendered as query results are (arrow-pg, after
//! `text_values.rs`), so COPY prints what SELECT prints. One message per row: pgwire counts messages for the
//! `COPY n` tag, and a header line rides with the first row for the same
//! reason (alone, with no rows, it is counted as one).

use std::sync::{Arc, Mutex};

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use arrow_pg::datatypes::{arrow_schema_to_pg_fields, encode_recordbatch};
use datafusion::execution::SendableRecordBatchStream;
use foam_common::FoamError;
use foam_query::write::copy::{CopyFormat, CopyOptions};
use futures::StreamExt;
use pgwire::api::portal::Format;
use pgwire::api::results::{CopyEncoder, CopyResponse, FieldInfo, Response};
use pgwire::error::PgWireResult;
use pgwire::messages::copy::CopyData;

use crate::handler::user_error;

/// The response that streams `stream`'s rows to the client as COPY data.
pub fn copy_out_response(schema: SchemaRef, stream: SendableRecordBatchStream, options: CopyOptions) -> PgWireResult<Response> {
    let columns = schema.fields().len();
    let binary = options.format == CopyFormat::Binary;
    let format = if binary { Format::UnifiedBinary } else { Format::UnifiedText };
    let shown = foam_query::frontend::select_names::client_schema(&schema);
    if binary && let Some(nested) = shown.fields().iter().find(|field| crate::text_values::is_nested_array(field.data_type())) {
        return Err(crate::handler::binary_nested_array(nested.name()));
    }
    let fields = Arc::new(arrow_schema_to_pg_fields(&crate::text_values::described(&shown), &format, None)?);
    let header = (options.header && !binary).then(|| {
        let names: Vec<Option<&[u8]>> = shown.fields().iter().map(|f| Some(f.name().as_bytes())).collect();
        line(&names, &options)
    });
    let header = Arc::new(Mutex::new(header));
    let (with_first_row, alone) = (header.clone(), header);
    let rows = stream
        .map(move |batch| {
            let lines: Vec<PgWireResult<CopyData>> = match batch {
                Ok(batch) if binary => binary_rows(&fields, &batch),
                Ok(batch) => text_rows(&fields, batch, &options),
                Err(error) => vec![Err(user_error(&FoamError::from(error)))],
            };
            futures::stream::iter(lines)
        })
        .flatten()
        .map(move |row| match (lock(&with_first_row).take(), row) {
            (Some(mut header), Ok(row)) => {
                header.extend_from_slice(&row.data);
                Ok(CopyData::new(header.into()))
            }
            (_, row) => row,
        })
        // With no rows, the header still goes out, after them.
        .chain(futures::stream::once(async move { lock(&alone).take() }).filter_map(|header| async move { header.map(|h| Ok(CopyData::new(h.into()))) }));
    Ok(Response::CopyOut(CopyResponse::new(i8::from(binary), columns, rows)))
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Each row of `batch` as a line of text or CSV.
fn text_rows(fields: &Arc<Vec<FieldInfo>>, batch: RecordBatch, options: &CopyOptions) -> Vec<PgWireResult<CopyData>> {
    let (batch, encode_fields) = crate::text_values::postgres_text(batch, fields);
    encode_recordbatch(encode_fields, batch)
        .map(|row| {
            let row = row?;
            let values = data_row_values(&row.data, row.field_count as usize);
            Ok(CopyData::new(line(&values, options).into()))
        })
        .collect()
}

/// Each row of `batch` in PostgreSQL's binary COPY format (the header comes
/// with the first row, the trailer from `CopyResponse`).
fn binary_rows(fields: &Arc<Vec<FieldInfo>>, batch: &RecordBatch) -> Vec<PgWireResult<CopyData>> {
    let schema = batch.schema();
    let mut encoder = CopyEncoder::new_binary(fields.clone());
    (0..batch.num_rows())
        .map(|row| {
            for (column, field) in fields.iter().enumerate() {
                arrow_pg::encoder::encode_value(&mut encoder, batch.column(column), row, schema.field(column), field)?;
            }
            Ok(encoder.take_copy())
        })
        .collect()
}

/// The fields of an encoded DataRow: each an i32 length (-1 for NULL), then
/// that many bytes of the value's text.
fn data_row_values(data: &[u8], count: usize) -> Vec<Option<&[u8]>> {
    let mut values = Vec::with_capacity(count);
    let mut at = 0;
    for _ in 0..count {
        let Some(length) = data.get(at..at + 4) else { break };
        let length = i32::from_be_bytes([length[0], length[1], length[2], length[3]]);
        at += 4;
        if length < 0 {
            values.push(None);
        } else {
            values.push(data.get(at..at + length as usize));
            at += length as usize;
        }
    }
    values
}

/// One line of COPY text or CSV, newline included.
fn line(values: &[Option<&[u8]>], options: &CopyOptions) -> Vec<u8> {
    let mut out = Vec::new();
    for (index, value) in values.iter().enumerate() {
        if index > 0 {
            out.push(options.delimiter);
        }
        match (value, options.format) {
            (None, _) => out.extend_from_slice(options.null.as_deref().unwrap_or_default().as_bytes()),
            (Some(value), CopyFormat::Csv) => csv_value(&mut out, value, values.len() == 1, options),
            (Some(value), _) => text_value(&mut out, value, options.delimiter),
        }
    }
    out.push(b'\n');
    out
}

/// A value in the text format: backslash escapes for the delimiter,
/// backslash and control characters that would break the line.
fn text_value(out: &mut Vec<u8>, value: &[u8], delimiter: u8) {
    for &byte in value {
        match byte {
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x0c => out.extend_from_slice(b"\\f"),
            0x0b => out.extend_from_slice(b"\\v"),
            byte if byte == delimiter => out.extend_from_slice(&[b'\\', byte]),
            byte => out.push(byte),
        }
    }
}

/// A value in CSV: quoted when it holds the delimiter, the quote, a line
/// break, equals the NULL string (so an empty string is `""` and NULL is
/// nothing), or is `\.` alone on its line (it would end the data); a quote
/// inside is preceded by the escape.
fn csv_value(out: &mut Vec<u8>, value: &[u8], alone: bool, options: &CopyOptions) {
    let null = options.null.as_deref().unwrap_or_default().as_bytes();
    let quote = options.quote;
    let escape = options.escape.unwrap_or(quote);
    let needs_quotes = value == null
        || (alone && value == b"\\.")
        || value.iter().any(|&b| b == options.delimiter || b == quote || b == escape || b == b'\n' || b == b'\r');
    if !needs_quotes {
        out.extend_from_slice(value);
        return;
    }
    out.push(quote);
    for &byte in value {
        if byte == quote || byte == escape {
            out.push(escape);
        }
        out.push(byte);
    }
    out.push(quote);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text_line(values: &[Option<&str>], options: &CopyOptions) -> String {
        let values: Vec<Option<&[u8]>> = values.iter().map(|v| v.map(str::as_bytes)).collect();
        String::from_utf8(line(&values, options)).unwrap()
    }

    fn csv() -> CopyOptions {
        CopyOptions { format: CopyFormat::Csv, header: false, delimiter: b',', quote: b'"', escape: None, null: None, columns: None, defaults: Vec::new(), time_zone: None, checks: None }
    }

    #[test]
    fn text_format_escapes_what_would_break_a_line() {
        let options = CopyOptions::default();
        assert_eq!(text_line(&[Some("a\tb"), None, Some("back\\slash\nnew")], &options), "a\\tb\t\\N\tback\\\\slash\\nnew\n");
        let pipes = CopyOptions { delimiter: b'|', ..CopyOptions::default() };
        assert_eq!(text_line(&[Some("a|b"), Some("tab\there")], &pipes), "a\\|b|tab\\there\n");
    }

    #[test]
    fn csv_quotes_only_what_needs_it_and_tells_empty_from_null() {
        assert_eq!(text_line(&[Some("plain"), Some(""), None, Some("a,b"), Some("say \"hi\""), Some("two\nlines")], &csv()), "plain,\"\",,\"a,b\",\"say \"\"hi\"\"\",\"two\nlines\"\n");
        let null_word = CopyOptions { null: Some("NULL".into()), ..csv() };
        assert_eq!(text_line(&[Some("NULL"), None, Some("")], &null_word), "\"NULL\",NULL,\n");
        assert_eq!(text_line(&[Some("\\.")], &csv()), "\"\\.\"\n", "a lone \\. would end the data");
        assert_eq!(text_line(&[Some("\\."), Some("x")], &csv()), "\\.,x\n");
        let backslash_escape = CopyOptions { escape: Some(b'\\'), ..csv() };
        assert_eq!(text_line(&[Some("a\"b")], &backslash_escape), "\"a\\\"b\"\n");
    }

    #[test]
    fn data_row_fields_are_read_back_with_their_nulls() {
        let mut data = Vec::new();
        data.extend_from_slice(&2i32.to_be_bytes());
        data.extend_from_slice(b"hi");
        data.extend_from_slice(&(-1i32).to_be_bytes());
        data.extend_from_slice(&0i32.to_be_bytes());
        assert_eq!(data_row_values(&data, 3), vec![Some(&b"hi"[..]), None, Some(&b""[..])]);
    }
}
