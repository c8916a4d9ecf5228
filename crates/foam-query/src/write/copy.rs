//! `COPY table FROM 'file'`: server-side bulk load of a CSV or Parquet file on
//! the node the client is connected to, through the same two-phase writer as
//! INSERT, so a bad line anywhere leaves the table exactly as it was.
//!
//! Text and CSV are read as PostgreSQL reads them (`copy_format.rs`); an
//! error names the file's line (1-based, counting the header line) and the
//! column.
//!
//! A client names a file on the server, so COPY reads only what the operator
//! allowed: regular files under the directory given with `--copy-dir`
//! ([`server_file`]), none without one. Data a client holds comes with
//! `COPY ... FROM STDIN` (psql's `\copy`).
//!
//! A text or CSV stream ends at a line holding only `\.`, PostgreSQL's
//! end-of-data marker (pgbench and older clients send it last); what follows
//! it is not read ([`UntilEndMarker`]).

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use arrow::compute::cast_with_options;
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use foam_catalog::TableDef;
use foam_common::limits::BATCH_ROWS;
use foam_common::{FoamError, FoamResult};

use crate::context::NodeContext;
use crate::write::TableWriter;
use crate::write::copy_format::{Record, Records, typed_batch};

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum CopyFormat {
    Csv,
    /// PostgreSQL's default text format: tab-delimited, `\N` for NULL, no header.
    Text,
    Parquet,
    /// PostgreSQL's binary COPY format (`copy_binary.rs` reads it).
    Binary,
}

#[derive(Debug, Clone)]
pub struct CopyOptions {
    pub format: CopyFormat,
    pub header: bool,
    pub delimiter: u8,
    pub quote: u8,
    pub escape: Option<u8>,
    /// The string that stands for NULL; None means an empty field.
    pub null: Option<String>,
    /// `COPY t (columns) FROM ...`: the table's columns (positions) the
    /// data's fields fill, in the data's order; the others are NULL.
    pub columns: Option<Vec<usize>>,
    /// What fills each column (position) left out of `columns` that has a
    /// default.
    pub defaults: Vec<(usize, ColumnFill)>,
    /// The session's TimeZone (as DataFusion names it): a `timestamptz`
    /// value written without a zone is local time there, as PostgreSQL
    /// reads it; `None` reads it as UTC.
    pub time_zone: Option<String>,
    /// The table's CHECK constraints, as the session planned them.
    pub checks: Option<Arc<crate::write::checks::TableChecks>>,
}

/// A default COPY gives a column its data leaves out.
#[derive(Debug, Clone)]
pub enum ColumnFill {
    /// The default's value, evaluated once for the statement.
    Value(datafusion::common::ScalarValue),
    /// `nextval('sequence')`: a value of the sequence for every row, drawn
    /// through this node (`exec/sequences.rs`).
    Sequence { name: String, node: std::sync::Arc<crate::context::NodeContext> },
}

impl ColumnFill {
    /// The column's values for `rows` rows.
    pub fn values(&self, rows: usize) -> FoamResult<datafusion::arrow::array::ArrayRef> {
        match self {
            ColumnFill::Value(value) => value.to_array_of_size(rows).map_err(|e| FoamError::DataException { message: e.to_string() }),
            ColumnFill::Sequence { name, node } => {
                let drawn = crate::exec::sequences::draw_blocking(node, name, rows)?;
                Ok(std::sync::Arc::new(datafusion::arrow::array::Int64Array::from(drawn)))
            }
        }
    }
}

impl Default for CopyOptions {
    fn default() -> Self {
        CopyOptions { format: CopyFormat::Text, header: false, delimiter: b'\t', quote: b'"', escape: None, null: Some("\\N".into()), columns: None, defaults: Vec::new(), time_zone: None, checks: None }
    }
}

/// The file `COPY ... FROM 'path'` may read for a client: `path` (relative
/// to `copy_dir`) when it is a regular file under `copy_dir` after every
/// `..` and symbolic link is resolved. Without a `copy_dir` no file is
/// readable. A path outside it gets 42501 whether or not it exists, so a
/// client cannot probe the server's files.
pub fn server_file(copy_dir: Option<&Path>, path: &str) -> FoamResult<PathBuf> {
    let Some(copy_dir) = copy_dir else {
        return Err(FoamError::InsufficientPrivilege {
            message: "COPY from a file on the server needs a directory the operator allows with --copy-dir; \
                      send the data with COPY ... FROM STDIN instead (psql: \\copy)"
                .into(),
        });
    };
    let outside = || FoamError::InsufficientPrivilege { message: format!("COPY reads files under {} only, not \"{path}\"", copy_dir.display()) };
    // Lexically first: a path that leaves the directory is refused before
    // the file system is asked anything about it.
    let mut lexical = PathBuf::new();
    for component in copy_dir.join(path).components() {
        match component {
            Component::ParentDir => {
                lexical.pop();
            }
            Component::CurDir => {}
            other => lexical.push(other),
        }
    }
    if !lexical.starts_with(copy_dir) {
        return Err(outside());
    }
    let resolved = lexical.canonicalize().map_err(|e| FoamError::FileAccess { path: path.into(), message: e.to_string() })?;
    if !resolved.starts_with(copy_dir) {
        return Err(outside());
    }
    let metadata = std::fs::metadata(&resolved).map_err(|e| FoamError::FileAccess { path: path.into(), message: e.to_string() })?;
    if !metadata.is_file() {
        return Err(FoamError::FileAccess { path: path.into(), message: "not a regular file".into() });
    }
    Ok(resolved)
}

/// Loads the file at `path` into `table` as one statement: committed at its
/// end, or in a transaction block, staged for the block's COMMIT.
pub async fn copy_from_file(
    node: Arc<NodeContext>,
    table: TableDef,
    path: String,
    options: CopyOptions,
    transaction: Option<Arc<crate::write::transaction::Transaction>>,
) -> FoamResult<u64> {
    let file = File::open(&path).map_err(|e| FoamError::FileAccess { path: path.clone(), message: e.to_string() })?;
    if file.metadata().map(|m| m.is_dir()).unwrap_or(false) {
        return Err(FoamError::FileAccess { path, message: "is a directory".into() });
    }
    let (sender, mut receiver) = tokio::sync::mpsc::channel::<FoamResult<RecordBatch>>(4);
    let schema = table.arrow_schema();
    let reader_table = table.clone();
    let reader_path = path.clone();
    let checks = options.checks.clone();
    let reader = tokio::task::spawn_blocking(move || {
        let result = match options.format {
            CopyFormat::Parquet if options.columns.is_some() => {
                Err(FoamError::FeatureNotSupported { feature: "COPY ... FROM a Parquet file with a column list".into() })
            }
            CopyFormat::Parquet => read_parquet(file, &schema, &reader_table, &reader_path, &sender),
            CopyFormat::Csv | CopyFormat::Text => read_csv(file, &schema, &reader_table, &options, &sender),
            CopyFormat::Binary => read_binary(file, &schema, &reader_table, &options, &sender),
        };
        if let Err(error) = result {
            let _ = sender.blocking_send(Err(error));
        }
    });
    let mut writer = TableWriter::begin_in(node, table, transaction, checks)?;
    while let Some(batch) = receiver.recv().await {
        let written = match batch {
            Ok(batch) => writer.write(batch).await,
            Err(error) => Err(error),
        };
        if let Err(error) = written {
            drop(receiver);
            writer.abort().await;
            let _ = reader.await;
            return Err(error);
        }
    }
    reader.await.map_err(|e| FoamError::internal(e.to_string()))?;
    writer.commit().await
}

/// Reads a text or CSV file (`copy_format.rs`) in batches of the table's
/// types; the first bad record stops the load, named with its line.
fn read_csv(
    file: File,
    schema: &SchemaRef,
    table: &TableDef,
    options: &CopyOptions,
    sender: &tokio::sync::mpsc::Sender<FoamResult<RecordBatch>>,
) -> FoamResult<()> {
    let mut records = Records::new(BufReader::new(UntilEndMarker::new(BufReader::new(file))), options.clone(), &table.name);
    if options.header {
        records.next_record()?;
    }
    send_typed(|| records.next_record(), schema, table, options, sender)
}

/// Reads a binary COPY stream (`copy_binary.rs`) in batches of the
/// table's types; the first bad row stops the load, named with its number.
fn read_binary(
    file: File,
    schema: &SchemaRef,
    table: &TableDef,
    options: &CopyOptions,
    sender: &tokio::sync::mpsc::Sender<FoamResult<RecordBatch>>,
) -> FoamResult<()> {
    let all: Vec<usize> = (0..schema.fields().len()).collect();
    let filled = options.columns.as_deref().unwrap_or(&all);
    let mut records = crate::write::copy_binary::BinaryRecords::new(BufReader::new(file), schema, table, filled);
    send_typed(|| records.next_record(), schema, table, options, sender)
}

/// Types the records `next` reads, `BATCH_ROWS` at a time, and sends each
/// batch to the writer; the first bad record stops the load.
fn send_typed(
    mut next: impl FnMut() -> FoamResult<Option<Record>>,
    schema: &SchemaRef,
    table: &TableDef,
    options: &CopyOptions,
    sender: &tokio::sync::mpsc::Sender<FoamResult<RecordBatch>>,
) -> FoamResult<()> {
    let mut batch = Vec::with_capacity(BATCH_ROWS);
    loop {
        let record = next()?;
        let ended = record.is_none();
        batch.extend(record);
        if batch.len() == BATCH_ROWS || (ended && !batch.is_empty()) {
            let typed = typed_batch(&batch, schema, table, options)?;
            batch.clear();
            if sender.blocking_send(Ok(typed)).is_err() {
                return Ok(()); // the writer failed and reports its own error
            }
        }
        if ended {
            return Ok(());
        }
    }
}

/// The bytes of a text or CSV stream up to a line holding only `\.` (with
/// `\n` or `\r\n` after it), or all of them when there is none.
struct UntilEndMarker<R> {
    inner: R,
    line: Vec<u8>,
    /// How much of `line` was handed out.
    taken: usize,
    ended: bool,
}

impl<R: BufRead> UntilEndMarker<R> {
    fn new(inner: R) -> Self {
        UntilEndMarker { inner, line: Vec::new(), taken: 0, ended: false }
    }
}

impl<R: BufRead> Read for UntilEndMarker<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            if self.taken < self.line.len() {
                let n = buf.len().min(self.line.len() - self.taken);
                buf[..n].copy_from_slice(&self.line[self.taken..self.taken + n]);
                self.taken += n;
                return Ok(n);
            }
            if self.ended {
                return Ok(0);
            }
            self.line.clear();
            self.taken = 0;
            if self.inner.read_until(b'\n', &mut self.line)? == 0 {
                self.ended = true;
                continue;
            }
            let content = self.line.strip_suffix(b"\n").unwrap_or(&self.line);
            let content = content.strip_suffix(b"\r").unwrap_or(content);
            if content == b"\\." {
                self.line.clear();
                self.ended = true;
            }
        }
    }
}

fn read_parquet(
    file: File,
    schema: &SchemaRef,
    table: &TableDef,
    path: &str,
    sender: &tokio::sync::mpsc::Sender<FoamResult<RecordBatch>>,
) -> FoamResult<()> {
    let corrupted = |e: &dyn std::fmt::Display| FoamError::FileAccess { path: path.into(), message: e.to_string() };
    let builder = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| corrupted(&e))?;
    let file_schema = builder.schema().clone();
    let mut sources = Vec::with_capacity(schema.fields().len());
    for field in schema.fields() {
        let index = file_schema.index_of(field.name()).map_err(|_| FoamError::CopyData {
            table: table.name.clone(),
            line: 0,
            column: Some(field.name().clone()),
            message: format!("the Parquet file has no column \"{}\"", field.name()),
        })?;
        sources.push(index);
    }
    let reader = builder.with_batch_size(BATCH_ROWS).build().map_err(|e| corrupted(&e))?;
    let mut rows_before = 0u64;
    for batch in reader {
        let batch = batch.map_err(|e| corrupted(&e))?;
        let mut columns = Vec::with_capacity(sources.len());
        for (field, source) in schema.fields().iter().zip(&sources) {
            // Not the "safe" cast: a value that does not fit must be an error,
            // not a silent NULL.
            let options = arrow::compute::CastOptions { safe: false, ..Default::default() };
            let column = cast_with_options(batch.column(*source), field.data_type(), &options).map_err(|e| FoamError::CopyData {
                table: table.name.clone(),
                line: rows_before + 1,
                column: Some(field.name().clone()),
                message: format!("cannot convert to {}: {e}", field.data_type()),
            })?;
            columns.push(column);
        }
        rows_before += batch.num_rows() as u64;
        let batch = RecordBatch::try_new(schema.clone(), columns)
            .map_err(|e| FoamError::DataException { message: e.to_string() })?;
        if sender.blocking_send(Ok(batch)).is_err() {
            return Ok(());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(result: FoamResult<PathBuf>) -> String {
        match result {
            Err(error) => error.sqlstate().code().to_string(),
            Ok(path) => panic!("{} was allowed", path.display()),
        }
    }

    #[test]
    fn a_stream_ends_at_the_end_of_data_marker_and_only_there() {
        let read = |text: &str| {
            let mut out = String::new();
            UntilEndMarker::new(std::io::Cursor::new(text.as_bytes().to_vec())).read_to_string(&mut out).unwrap();
            out
        };
        assert_eq!(read("1\ta\n2\tb\n\\.\n"), "1\ta\n2\tb\n");
        assert_eq!(read("1\ta\r\n\\.\r\nignored\n"), "1\ta\r\n");
        assert_eq!(read("1\t\\.\n\\.x\n2\tc"), "1\t\\.\n\\.x\n2\tc", "only a line of just the marker ends the data");
        assert_eq!(read("\\."), "");
        assert_eq!(read(""), "");
    }

    #[test]
    fn copy_reads_regular_files_under_the_copy_dir_only() {
        let root = tempfile::tempdir().unwrap();
        let root = root.path().canonicalize().unwrap();
        let allowed = root.join("allowed");
        std::fs::create_dir_all(allowed.join("sub")).unwrap();
        std::fs::write(allowed.join("sub/a.csv"), "1\n").unwrap();
        std::fs::write(root.join("secret.csv"), "2\n").unwrap();
        std::os::unix::fs::symlink(root.join("secret.csv"), allowed.join("link.csv")).unwrap();
        let dir = Some(allowed.as_path());

        assert_eq!(server_file(dir, "sub/a.csv").unwrap(), allowed.join("sub/a.csv"));
        assert_eq!(server_file(dir, &allowed.join("sub/./a.csv").display().to_string()).unwrap(), allowed.join("sub/a.csv"));
        assert_eq!(server_file(dir, "sub/../sub/a.csv").unwrap(), allowed.join("sub/a.csv"));
        // Out of the directory, by path, by `..` or by a link: 42501, and
        // the same whether the file exists or not.
        assert_eq!(refused(server_file(dir, "/etc/passwd")), "42501");
        assert_eq!(refused(server_file(dir, "/no/such/file")), "42501");
        assert_eq!(refused(server_file(dir, "../secret.csv")), "42501");
        assert_eq!(refused(server_file(dir, "sub/../../secret.csv")), "42501");
        assert_eq!(refused(server_file(dir, "link.csv")), "42501");
        assert_eq!(refused(server_file(dir, "/proc/self/environ")), "42501");
        // Inside it: a missing file or a directory is not a file to read.
        assert_eq!(refused(server_file(dir, "missing.csv")), "58P01");
        assert_eq!(refused(server_file(dir, "sub")), "58P01");
        // Without a directory nothing is readable.
        assert_eq!(refused(server_file(None, &allowed.join("sub/a.csv").display().to_string())), "42501");
    }
}
