//! Immutable Parquet segment files: writing a set of batches once, and reading
//! them back with a column projection. Every segment's CRC-32 is recorded when
//! it is written and checked before each read, so a torn or bit-flipped file is
//! reported (and repaired from a replica) instead of served.

use std::fs::File;
use std::io::Read;
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

/// Read size while checksumming a segment.
const CHECKSUM_READ_BYTES: usize = 1024 * 1024;

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

/// Size and checksum of a finished segment file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentSum {
    pub bytes: u64,
    pub crc32: u32,
}

/// Finishes a segment and makes it durable; returns its size and checksum.
pub fn finish_writer(path: &Path, writer: ArrowWriter<File>) -> FoamResult<SegmentSum> {
    writer.close().map_err(|e| parquet_error(path, e))?;
    let file = File::open(path).map_err(|e| FoamError::io(path, e))?;
    file.sync_all().map_err(|e| FoamError::io(path, e))?;
    checksum(path)
}

/// Reads a whole file once (in large chunks, so memory stays flat) for its CRC-32.
pub fn checksum(path: &Path) -> FoamResult<SegmentSum> {
    let mut file = File::open(path).map_err(|e| FoamError::io(path, e))?;
    let mut hasher = crc32fast::Hasher::new();
    let mut buffer = vec![0u8; CHECKSUM_READ_BYTES];
    let mut bytes = 0u64;
    loop {
        let read = file.read(&mut buffer).map_err(|e| FoamError::io(path, e))?;
        if read == 0 {
            break;
        }
        hasher.update(&buffer[..read]);
        bytes += read as u64;
    }
    Ok(SegmentSum { bytes, crc32: hasher.finalize() })
}

/// Fails with [`FoamError::Corrupted`] unless the file has the recorded checksum.
pub fn verify(path: &Path, crc32: u32) -> FoamResult<()> {
    let found = checksum(path)?;
    if found.crc32 != crc32 {
        return Err(FoamError::Corrupted {
            path: path.display().to_string(),
            message: format!("segment checksum is {:08x}, {crc32:08x} was written", found.crc32),
        });
    }
    Ok(())
}

/// Writes `batches` as one durable segment file; returns its size and checksum.
pub fn write_segment(path: &Path, schema: &SchemaRef, batches: &[RecordBatch]) -> FoamResult<SegmentSum> {
    let mut writer = create_writer(path, schema)?;
    for batch in batches {
        writer.write(batch).map_err(|e| parquet_error(path, e))?;
    }
    finish_writer(path, writer)
}

/// Opens a segment for reading `projection` (column indices; `None` for all),
/// after checking its checksum when one was recorded (segments written before
/// checksums existed have none).
pub fn read_segment(path: &Path, crc32: Option<u32>, projection: Option<&[usize]>) -> FoamResult<ParquetRecordBatchReader> {
    if let Some(crc32) = crc32 {
        verify(path, crc32)?;
    }
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
