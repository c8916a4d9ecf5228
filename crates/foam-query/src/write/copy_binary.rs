//! `COPY ... FROM STDIN (FORMAT binary)`: PostgreSQL's binary COPY stream,
//! as pgx's `CopyFrom`, asyncpg's `copy_records_to_table` and pgjdbc's
//! `CopyManager` send it.
//!
//! ```text
//!   PGCOPY\n\377\r\n\0 │ flags i32 │ extension length i32 + bytes
//!   per row:   field count i16 │ per field: length i32 (-1: NULL) + value
//!   trailer:   field count -1 (or the end of the stream)
//! ```
//!
//! Each value is in the binary send format of the column's type, as the
//! client learnt it from the table's row description. A value becomes the
//! text PostgreSQL would print for it, and the rows go through the same
//! typing as text COPY (`copy_format::typed_batch`), so both formats check
//! a row alike. Integer fields of any width fit any integer column (the
//! typing checks the range); a field of the wrong length for its type, or
//! text that is not UTF-8, fails the COPY naming its row and column.

use std::io::Read;

use arrow::datatypes::{DataType, SchemaRef, TimeUnit};
use foam_catalog::TableDef;
use foam_common::{FoamError, FoamResult};

use crate::write::copy_format::Record;

/// The 11 bytes a binary COPY stream starts with.
const SIGNATURE: &[u8; 11] = b"PGCOPY\n\xff\r\n\0";
/// The header flag saying each row carries an OID, which FoamDB rows lack.
const FLAG_OIDS: u32 = 1 << 16;
/// PostgreSQL's epoch for dates and timestamps: 2000-01-01, as days after
/// 1970-01-01.
const POSTGRES_EPOCH_DAYS: i64 = 10_957;
/// PostgreSQL's NUMERIC sign words.
const NUMERIC_NEGATIVE: u16 = 0x4000;
const NUMERIC_NAN: u16 = 0xC000;
/// A field longer than this is refused rather than allocated (PostgreSQL's
/// own limit on a value is 1 GB).
const FIELD_BYTES_MAX: usize = 1 << 30;

/// Reads the rows of a binary COPY stream.
pub struct BinaryRecords<R> {
    reader: R,
    table: String,
    /// Each field's column type, in the stream's order.
    types: Vec<(String, DataType)>,
    row: u64,
    started: bool,
}

impl<R: Read> BinaryRecords<R> {
    /// `filled`: the table's columns the stream's fields fill, in order.
    pub fn new(reader: R, schema: &SchemaRef, table: &TableDef, filled: &[usize]) -> Self {
        let types = filled.iter().map(|&i| (schema.field(i).name().clone(), schema.field(i).data_type().clone())).collect();
        BinaryRecords { reader, table: table.name.clone(), types, row: 0, started: false }
    }

    fn error(&self, column: Option<&str>, message: impl Into<String>) -> FoamError {
        FoamError::CopyData { table: self.table.clone(), line: self.row, column: column.map(str::to_string), message: message.into() }
    }

    fn read_exact(&mut self, buf: &mut [u8], what: &str) -> FoamResult<()> {
        self.reader.read_exact(buf).map_err(|_| self.error(None, format!("unexpected end of binary COPY data in {what}")))
    }

    fn read_i32(&mut self, what: &str) -> FoamResult<i32> {
        let mut b = [0; 4];
        self.read_exact(&mut b, what)?;
        Ok(i32::from_be_bytes(b))
    }

    fn header(&mut self) -> FoamResult<()> {
        let mut signature = [0; 11];
        self.read_exact(&mut signature, "the header")?;
        if &signature != SIGNATURE {
            return Err(self.error(None, "COPY file signature not recognized"));
        }
        let flags = self.read_i32("the header")? as u32;
        if flags & FLAG_OIDS != 0 {
            return Err(self.error(None, "binary COPY data with OIDs is not supported"));
        }
        let extension = self.read_i32("the header")?;
        if extension < 0 {
            return Err(self.error(None, "invalid COPY file header (negative extension length)"));
        }
        std::io::copy(&mut (&mut self.reader).take(extension as u64), &mut std::io::sink())
            .map_err(|e| self.error(None, e.to_string()))?;
        Ok(())
    }

    /// The next row as text fields, `None` after the trailer.
    pub fn next_record(&mut self) -> FoamResult<Option<Record>> {
        if !self.started {
            self.started = true;
            self.header()?;
        }
        self.row += 1;
        // The stream may end where a row would start, without the trailer
        // (pgx sends none), as PostgreSQL accepts.
        let mut count = [0; 2];
        match self.reader.read(&mut count[..1]) {
            Ok(0) => return Ok(None),
            Ok(_) => self.read_exact(&mut count[1..], "a row's field count")?,
            Err(e) => return Err(self.error(None, e.to_string())),
        }
        let count = i16::from_be_bytes(count);
        if count == -1 {
            return Ok(None);
        }
        if count as usize != self.types.len() {
            return Err(self.error(None, format!("row field count is {count}, expected {}", self.types.len())));
        }
        let mut fields = Vec::with_capacity(self.types.len());
        for index in 0..self.types.len() {
            let length = self.read_i32("a field's length")?;
            if length == -1 {
                fields.push(None);
                continue;
            }
            if length < 0 || length as usize > FIELD_BYTES_MAX {
                return Err(self.error(Some(&self.types[index].0), format!("invalid field length {length}")));
            }
            let mut value = vec![0; length as usize];
            self.read_exact(&mut value, "a field")?;
            let (name, data_type) = &self.types[index];
            let text = value_text(&value, data_type).map_err(|message| self.error(Some(name), message))?;
            fields.push(Some(text));
        }
        Ok(Some((self.row, fields)))
    }
}

/// A binary value of a column of `data_type` as PostgreSQL's text for it.
fn value_text(value: &[u8], data_type: &DataType) -> Result<String, String> {
    let wrong = || format!("incorrect binary data format: {} bytes for type {data_type}", value.len());
    Ok(match data_type {
        DataType::Int16 | DataType::Int32 | DataType::Int64 => match value.len() {
            2 => i16::from_be_bytes(value.try_into().map_err(|_| wrong())?).to_string(),
            4 => i32::from_be_bytes(value.try_into().map_err(|_| wrong())?).to_string(),
            8 => i64::from_be_bytes(value.try_into().map_err(|_| wrong())?).to_string(),
            _ => return Err(wrong()),
        },
        DataType::Float32 | DataType::Float64 => {
            let v = match value.len() {
                4 => f32::from_be_bytes(value.try_into().map_err(|_| wrong())?) as f64,
                8 => f64::from_be_bytes(value.try_into().map_err(|_| wrong())?),
                _ => return Err(wrong()),
            };
            // Rust prints the shortest text that reads back to the same value.
            if data_type == &DataType::Float32 { (v as f32).to_string() } else { v.to_string() }
        }
        DataType::Boolean => match value {
            [0] => "f".into(),
            [1] => "t".into(),
            _ => return Err(wrong()),
        },
        DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8 => {
            String::from_utf8(value.to_vec()).map_err(|_| "invalid byte sequence for encoding \"UTF8\"".to_string())?
        }
        DataType::Date32 => {
            let days = i32::from_be_bytes(value.try_into().map_err(|_| wrong())?) as i64 + POSTGRES_EPOCH_DAYS;
            let days = i32::try_from(days).map_err(|_| "date out of range".to_string())?;
            let date = arrow::temporal_conversions::date32_to_datetime(days).ok_or_else(|| "date out of range".to_string())?;
            date.format("%Y-%m-%d").to_string()
        }
        DataType::Timestamp(TimeUnit::Microsecond, zone) => {
            let micros = i64::from_be_bytes(value.try_into().map_err(|_| wrong())?);
            let micros = micros.checked_add(POSTGRES_EPOCH_DAYS * 86_400_000_000).ok_or_else(|| "timestamp out of range".to_string())?;
            let at = arrow::temporal_conversions::timestamp_us_to_datetime(micros).ok_or_else(|| "timestamp out of range".to_string())?;
            // A timestamptz is sent as microseconds of UTC.
            let utc = if zone.is_some() { "+00" } else { "" };
            format!("{}{utc}", at.format("%Y-%m-%d %H:%M:%S%.6f"))
        }
        DataType::Decimal128(..) => numeric_text(value).ok_or_else(wrong)?,
        other => return Err(format!("binary COPY into a column of type {other} is not supported")),
    })
}

/// PostgreSQL's binary NUMERIC (base-10000 digits) as decimal text.
fn numeric_text(value: &[u8]) -> Option<String> {
    let word = |i: usize| -> Option<i16> { Some(i16::from_be_bytes(value.get(2 * i..2 * i + 2)?.try_into().ok()?)) };
    let (ndigits, weight, sign, dscale) = (word(0)? as usize, word(1)? as i64, word(2)? as u16, word(3)? as usize);
    if value.len() != 8 + 2 * ndigits {
        return None;
    }
    if sign == NUMERIC_NAN {
        return Some("NaN".into());
    }
    // Digit i is worth 10000^(weight - i).
    let digit = |i: i64| if i >= 0 && (i as usize) < ndigits { word(4 + i as usize).unwrap_or(0) } else { 0 };
    let mut text = String::new();
    if sign == NUMERIC_NEGATIVE {
        text.push('-');
    }
    if weight < 0 {
        text.push('0');
    } else {
        text.push_str(&digit(0).to_string());
        for i in 1..=weight {
            text.push_str(&format!("{:04}", digit(i)));
        }
    }
    if dscale > 0 {
        let mut fraction = String::new();
        let mut i = weight + 1;
        while fraction.len() < dscale {
            fraction.push_str(&format!("{:04}", digit(i)));
            i += 1;
        }
        fraction.truncate(dscale);
        text.push('.');
        text.push_str(&fraction);
    }
    Some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn numeric(ndigits: i16, weight: i16, sign: u16, dscale: i16, digits: &[i16]) -> Vec<u8> {
        let mut out = Vec::new();
        for word in [ndigits, weight, sign as i16, dscale].iter().chain(digits) {
            out.extend_from_slice(&word.to_be_bytes());
        }
        out
    }

    #[test]
    fn numeric_words_read_as_decimal_text() {
        // -1234567890.05: digits 12 3456 7890 . 0500
        assert_eq!(numeric_text(&numeric(4, 2, NUMERIC_NEGATIVE, 2, &[12, 3456, 7890, 500])).unwrap(), "-1234567890.05");
        assert_eq!(numeric_text(&numeric(1, -1, 0, 4, &[25])).unwrap(), "0.0025");
        // 0.0000 1200: the second fraction group.
        assert_eq!(numeric_text(&numeric(1, -2, 0, 6, &[1200])).unwrap(), "0.000012");
        assert_eq!(numeric_text(&numeric(1, 1, 0, 0, &[7])).unwrap(), "70000");
        assert_eq!(numeric_text(&numeric(0, 0, 0, 2, &[])).unwrap(), "0.00");
        assert!(numeric_text(&numeric(2, 0, 0, 0, &[1])).is_none());
    }

    #[test]
    fn values_read_as_postgres_text() {
        assert_eq!(value_text(&(-5i32).to_be_bytes(), &DataType::Int64).unwrap(), "-5");
        assert_eq!(value_text(&0.1f64.to_be_bytes(), &DataType::Float64).unwrap(), "0.1");
        assert_eq!(value_text(&0.1f32.to_be_bytes(), &DataType::Float32).unwrap(), "0.1");
        assert_eq!(value_text(&8825i32.to_be_bytes(), &DataType::Date32).unwrap(), "2024-02-29");
        let micros: i64 = -(1_000_000 + 876_544); // 1999-12-31 23:59:58.123456
        assert_eq!(value_text(&micros.to_be_bytes(), &DataType::Timestamp(TimeUnit::Microsecond, None)).unwrap(), "1999-12-31 23:59:58.123456");
        assert_eq!(value_text(&micros.to_be_bytes(), &DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))).unwrap(), "1999-12-31 23:59:58.123456+00");
        assert!(value_text(&[1, 2, 3], &DataType::Int32).is_err());
        assert!(value_text(&[0xff], &DataType::Utf8View).is_err());
    }
}
