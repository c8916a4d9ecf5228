//! Immutable Parquet segment files: writing a set of batches once, and reading
//! them back with a column projection.

use std::fs::File;
use std::path::Path;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use foam_common::limits::BATCH_ROWS;
use foam_common::{FoamError, FoamResult};
use parquet::arrow::ArrowWriter;
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder};
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;

/// Rows per Parquet row group: large enough for good compression, small enough
/// that a reader's memory per file stays modest.
const ROW_GROUP_ROWS_MAX: usize = 128 * 1024;

/// Snappy: a fraction of zstd's cost to write and to read back, which both
/// loads and scans pay on every row (files written with zstd by earlier
/// versions still read: each file names its codec).
pub fn writer_properties() -> WriterProperties {
    WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .set_max_row_group_row_count(Some(ROW_GROUP_ROWS_MAX))
        .build()
}

pub fn create_writer(path: &Path, schema: &SchemaRef) -> FoamResult<ArrowWriter<File>> {
    let file = File::create(path).map_err(|e| FoamError::io(path, e))?;
    ArrowWriter::try_new(file, schema.clone(), Some(writer_properties())).map_err(|e| parquet_error(path, e))
}

/// Finishes a segment and makes it durable; returns its size in bytes.
pub fn finish_writer(path: &Path, writer: ArrowWriter<File>) -> FoamResult<u64> {
    writer.close().map_err(|e| parquet_error(path, e))?;
    let file = File::open(path).map_err(|e| FoamError::io(path, e))?;
    file.sync_all().map_err(|e| FoamError::io(path, e))?;
    let bytes = file.metadata().map_err(|e| FoamError::io(path, e))?.len();
    Ok(bytes)
}

/// Writes `batches` as one durable segment file; returns its size in bytes.
pub fn write_segment(path: &Path, schema: &SchemaRef, batches: &[RecordBatch]) -> FoamResult<u64> {
    let mut writer = create_writer(path, schema)?;
    for batch in batches {
        writer.write(batch).map_err(|e| parquet_error(path, e))?;
    }
    finish_writer(path, writer)
}

/// Opens a segment for reading `projection` (column indices; `None` for all).
pub fn read_segment(path: &Path, projection: Option<&[usize]>) -> FoamResult<ParquetRecordBatchReader> {
    let file = File::open(path).map_err(|e| FoamError::io(path, e))?;
    let mut builder = ParquetRecordBatchReaderBuilder::try_new(file)
        .map_err(|e| parquet_error(path, e))?
        .with_batch_size(BATCH_ROWS);
    if let Some(columns) = projection {
        let mask = ProjectionMask::roots(builder.parquet_schema(), columns.iter().copied());
        builder = builder.with_projection(mask);
    }
    builder.build().map_err(|e| parquet_error(path, e))
}

fn parquet_error(path: &Path, error: parquet::errors::ParquetError) -> FoamError {
    FoamError::Corrupted { path: path.display().to_string(), message: error.to_string() }
}
