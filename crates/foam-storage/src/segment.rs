//! Immutable Parquet segment files: writing a set of batches once, and reading
//! them back with a column projection. Every segment's CRC-32 is recorded when
//! it is written and checked before each read, so a torn or bit-flipped file is
//! reported (and repaired from a replica) instead of served.

use std::collections::HashSet;
use std::fs::File;
use std::io::Read;
use std::path::Path;

use arrow::array::ArrayRef;
use arrow::datatypes::SchemaRef;
use arrow::row::{RowConverter, SortField};
use arrow::record_batch::RecordBatch;
use foam_common::limits::BATCH_ROWS;
use foam_common::{FoamError, FoamResult};
use parquet::arrow::ArrowWriter;
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder};
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;
use parquet::schema::types::ColumnPath;

/// Rows per Parquet row group: large enough for good compression, small enough
/// that a reader's memory per file stays modest.
const ROW_GROUP_ROWS_MAX: usize = 128 * 1024;

/// Read size while checksumming a segment.
const CHECKSUM_READ_BYTES: usize = 1024 * 1024;

/// Rows of a segment's first batch looked at to choose its columns' encodings.
const DICTIONARY_SAMPLE_ROWS: usize = 4096;

/// A column whose sampled values are more than this share distinct is written
/// without a dictionary: Parquet would otherwise hash every value into a
/// dictionary that ends up nearly as large as the column (comments, prices,
/// foreign keys), which was a third of a node's CPU while loading TPC-H.
const DICTIONARY_DISTINCT_SHARE_MAX: f64 = 0.5;

/// The codec of segment pages. LZ4 (raw blocks) makes TPC-H files as small
/// as Snappy does, but decompresses faster: on 4 nodes at SF1, Snappy was 14%
/// of all CPU over the 22 queries, and the queries took about 13% less time
/// with LZ4 (loads a little less too). Uncompressed pages were no faster than
/// LZ4 and twice the size. Files written with Snappy or zstd by earlier
/// versions still read: each file names its codec.
pub const CODEC: Compression = Compression::LZ4_RAW;

/// Pages compressed with [`CODEC`]; dictionaries only for the columns of
/// `sample` (the first rows written) that repeat enough.
pub fn writer_properties(sample: Option<&RecordBatch>) -> WriterProperties {
    let mut builder = WriterProperties::builder().set_compression(CODEC).set_max_row_group_row_count(Some(ROW_GROUP_ROWS_MAX));
    if let Some(sample) = sample {
        for (field, column) in sample.schema().fields().iter().zip(sample.columns()) {
            if !repeats_enough_for_a_dictionary(column) {
                builder = builder.set_column_dictionary_enabled(ColumnPath::new(vec![field.name().clone()]), false);
            }
        }
    }
    builder.build()
}

/// Whether at most [`DICTIONARY_DISTINCT_SHARE_MAX`] of the column's first
/// [`DICTIONARY_SAMPLE_ROWS`] values are distinct (true when too few to tell).
fn repeats_enough_for_a_dictionary(column: &ArrayRef) -> bool {
    let rows = column.len().min(DICTIONARY_SAMPLE_ROWS);
    if rows < 64 {
        return true;
    }
    let sample = column.slice(0, rows);
    let Ok(converter) = RowConverter::new(vec![SortField::new(sample.data_type().clone())]) else {
        return true;
    };
    let Ok(converted) = converter.convert_columns(&[sample]) else {
        return true;
    };
    let distinct: HashSet<&[u8]> = converted.iter().map(|row| row.data()).collect();
    distinct.len() as f64 <= rows as f64 * DICTIONARY_DISTINCT_SHARE_MAX
}

/// A segment writer whose encodings suit `sample`, the first rows it will get.
pub fn create_writer(path: &Path, schema: &SchemaRef, sample: Option<&RecordBatch>) -> FoamResult<ArrowWriter<File>> {
    let file = File::create(path).map_err(|e| FoamError::io(path, e))?;
    ArrowWriter::try_new(file, schema.clone(), Some(writer_properties(sample))).map_err(|e| parquet_error(path, e))
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
    let mut writer = create_writer(path, schema, batches.first())?;
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

/// The segment's Parquet footer: row counts and each row group's column
/// statistics (min, max, nulls), which the query planner sums up into a
/// table's statistics. Only the footer is read, not the column data.
pub fn read_metadata(path: &Path) -> FoamResult<std::sync::Arc<parquet::file::metadata::ParquetMetaData>> {
    let file = File::open(path).map_err(|e| FoamError::io(path, e))?;
    let metadata = parquet::file::metadata::ParquetMetaDataReader::new().parse_and_finish(&file).map_err(|e| parquet_error(path, e))?;
    Ok(std::sync::Arc::new(metadata))
}

fn parquet_error(path: &Path, error: parquet::errors::ParquetError) -> FoamError {
    FoamError::Corrupted { path: path.display().to_string(), message: error.to_string() }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};
    use parquet::file::reader::{FileReader, SerializedFileReader};

    use super::*;

    /// Which columns of a written segment have a dictionary page.
    fn dictionary_columns(path: &Path) -> Vec<bool> {
        let reader = SerializedFileReader::new(File::open(path).unwrap()).unwrap();
        let row_group = reader.metadata().row_group(0);
        row_group.columns().iter().map(|c| c.dictionary_page_offset().is_some()).collect()
    }

    #[test]
    fn only_columns_that_repeat_get_a_dictionary_and_all_read_back() {
        let rows = 10_000i64;
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("flag", DataType::Utf8, false),
            Field::new("comment", DataType::Utf8, false),
            Field::new("bucket", DataType::Int64, false),
        ]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from_iter_values(0..rows)),
                Arc::new(StringArray::from_iter_values((0..rows).map(|i| ["A", "N", "R"][i as usize % 3]))),
                Arc::new(StringArray::from_iter_values((0..rows).map(|i| format!("comment number {i}")))),
                Arc::new(Int64Array::from_iter_values((0..rows).map(|i| i % 100))),
            ],
        )
        .unwrap();
        let path = std::env::temp_dir().join(format!("foam-segment-dictionary-{}.parquet", std::process::id()));
        write_segment(&path, &schema, &[batch.clone()]).unwrap();
        assert_eq!(dictionary_columns(&path), [false, true, false, true]);
        let read: Vec<RecordBatch> = read_segment(&path, None, None).unwrap().collect::<Result<_, _>>().unwrap();
        assert_eq!(arrow::compute::concat_batches(&schema, &read).unwrap(), batch);
        let _ = std::fs::remove_file(&path);
    }
}
