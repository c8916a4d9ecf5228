//! Immutable Parquet segment files: writing a set of batches once, and reading
//! them back with a column projection. A segment's checksums are recorded when
//! it is written: a CRC-32 of the whole file, which a copy received from a
//! replica is checked against, and one per [`CHECKSUM_BLOCK_BYTES`] block. A
//! read maps the file into memory and checks the blocks of the footer and of
//! the column chunks it decodes, so a torn or bit-flipped file is reported (and
//! repaired from a replica) instead of served, at a cost in proportion to the
//! columns read rather than to the file.
//!
//! Segment files are never changed in place: they are written once, made
//! durable, and afterwards only read, unlinked or replaced by a rename. That is
//! what makes mapping them safe (a mapped file that is unlinked stays intact).

use crate::deletions::Deletions;
use crate::error::{StorageError, StorageResult};
use crate::partition::SegmentRef;
use std::collections::HashSet;
use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use arrow::array::ArrayRef;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::row::{RowConverter, SortField};
use arrow::record_batch::RecordBatch;
use bytes::Bytes;
use foam_common::limits::BATCH_ROWS;

use parquet::arrow::ArrowWriter;
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder, RowSelection, RowSelector,
};
use parquet::basic::Compression;
use parquet::file::metadata::{PageIndexPolicy, ParquetMetaData, ParquetMetaDataReader};
use parquet::file::properties::WriterProperties;
use parquet::schema::types::ColumnPath;

/// Rows per Parquet row group: large enough for good compression, small enough
/// that a reader's memory per file stays modest.
const ROW_GROUP_ROWS_MAX: usize = 128 * 1024;

/// Most rows, and about the most bytes, in one data page. A point read
/// (`read_rows_at`) decompresses and checks only the pages holding its rows,
/// so small pages keep it from decoding whole column chunks; a full scan
/// pays one page header per page. Parquet checks both limits every 1,024 rows.
const PAGE_ROWS_MAX: usize = 8192;
const PAGE_BYTES_MAX: usize = 64 * 1024;

/// Bytes of a segment covered by one block checksum: a read checks every
/// block that holds part of a column chunk it decodes (a TPC-H column chunk of
/// 128K rows is tens of KiB to a few MiB).
pub const CHECKSUM_BLOCK_BYTES: usize = 64 * 1024;

/// Rows of a segment's first batch looked at to choose its columns' encodings.
const DICTIONARY_SAMPLE_ROWS: usize = 4096;

/// A column whose sampled values are more than this share distinct is written
/// without a dictionary: Parquet would otherwise hash every value into a
/// dictionary that ends up nearly as large as the column (comments, prices,
/// foreign keys), much of a node's CPU while loading (bench/results/design-figures.md).
const DICTIONARY_DISTINCT_SHARE_MAX: f64 = 0.5;

/// The codec of segment pages. LZ4 (raw blocks) makes TPC-H files as small
/// as Snappy does, but decompresses faster; uncompressed pages were no faster
/// than LZ4 and twice the size (bench/results/design-figures.md). Files
/// written with Snappy or zstd by earlier versions still read: each file
/// names its codec.
pub const CODEC: Compression = Compression::LZ4_RAW;

/// Pages compressed with [`CODEC`]; dictionaries only for the columns of
/// `sample` (the first rows written) that repeat enough.
pub fn writer_properties(sample: Option<&RecordBatch>) -> WriterProperties {
    let mut builder = WriterProperties::builder()
        .set_compression(CODEC)
        .set_max_row_group_row_count(Some(ROW_GROUP_ROWS_MAX))
        .set_data_page_row_count_limit(PAGE_ROWS_MAX)
        .set_data_page_size_limit(PAGE_BYTES_MAX);
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
pub fn create_writer(path: &Path, schema: &SchemaRef, sample: Option<&RecordBatch>) -> StorageResult<ArrowWriter<File>> {
    let file = File::create(path).map_err(|e| StorageError::io(path, e))?;
    ArrowWriter::try_new(file, schema.clone(), Some(writer_properties(sample))).map_err(|e| parquet_error(path, e))
}

/// Size and checksums of a finished segment file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentSum {
    pub bytes: u64,
    pub crc32: u32,
    /// CRC-32 of each [`CHECKSUM_BLOCK_BYTES`] block, in file order.
    pub blocks: Vec<u32>,
}

/// The checksums a segment is read against: both absent for files written
/// before checksums, `blocks` empty for files written before block checksums
/// (those are checked whole).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Checksums {
    pub crc32: Option<u32>,
    pub blocks: Vec<u32>,
}

/// Finishes a segment and makes it durable; returns its size and checksums.
pub fn finish_writer(path: &Path, writer: ArrowWriter<File>) -> StorageResult<SegmentSum> {
    writer.close().map_err(|e| parquet_error(path, e))?;
    let file = File::open(path).map_err(|e| StorageError::io(path, e))?;
    file.sync_all().map_err(|e| StorageError::io(path, e))?;
    checksum(path)
}

/// A whole segment file as bytes, mapped rather than copied: Parquet then
/// decodes pages straight from the page cache.
fn map(path: &Path) -> StorageResult<Bytes> {
    let file = File::open(path).map_err(|e| StorageError::io(path, e))?;
    let length = file.metadata().map_err(|e| StorageError::io(path, e))?.len();
    if length == 0 {
        return Ok(Bytes::new());
    }
    // SAFETY: segment files are never changed in place (see the module doc),
    // so the mapped bytes cannot change or shrink under the reader.
    let mapped = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| StorageError::io(path, e))?;
    Ok(Bytes::from_owner(mapped))
}

/// The size and checksums of a whole file.
pub fn checksum(path: &Path) -> StorageResult<SegmentSum> {
    Ok(sum_of(&map(path)?))
}

/// The size and checksums of `data`, a whole file.
pub fn sum_of(data: &[u8]) -> SegmentSum {
    let mut sum = SumBuilder::default();
    sum.update(data);
    sum.finish()
}

/// The size and checksums of a file, summed as its bytes go by in pieces of
/// any size: a loader sums a segment as it encodes it, and a node sums the
/// segment it receives as it writes it.
#[derive(Default)]
pub struct SumBuilder {
    whole: crc32fast::Hasher,
    block: crc32fast::Hasher,
    in_block: usize,
    bytes: u64,
    blocks: Vec<u32>,
}

impl SumBuilder {
    pub fn update(&mut self, mut data: &[u8]) {
        self.bytes += data.len() as u64;
        while !data.is_empty() {
            let take = (CHECKSUM_BLOCK_BYTES - self.in_block).min(data.len());
            self.block.update(&data[..take]);
            self.in_block += take;
            data = &data[take..];
            if self.in_block == CHECKSUM_BLOCK_BYTES {
                self.close_block();
            }
        }
    }

    /// Bytes summed so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    fn close_block(&mut self) {
        let block = std::mem::take(&mut self.block);
        self.whole.combine(&block);
        self.blocks.push(block.finalize());
        self.in_block = 0;
    }

    pub fn finish(mut self) -> SegmentSum {
        if self.in_block > 0 {
            self.close_block();
        }
        SegmentSum { bytes: self.bytes, crc32: self.whole.finalize(), blocks: self.blocks }
    }
}

fn corrupted(path: &Path, message: String) -> StorageError {
    StorageError::Corrupted { path: path.display().to_string(), message }
}

/// Fails with [`StorageError::Corrupted`] unless the whole file has the recorded
/// checksums: its CRC-32 and, when recorded, every block's. A copy received
/// from a replica is checked so, since reads later trust its block list.
pub fn verify(path: &Path, expected: &Checksums) -> StorageResult<()> {
    let data = map(path)?;
    // One pass over the file yields both the CRC-32 and the block checksums.
    let found = sum_of(&data);
    if let Some(crc32) = expected.crc32 {
        check_crc(path, found.crc32, crc32)?;
    }
    if !expected.blocks.is_empty() && found.blocks != expected.blocks {
        return Err(corrupted(path, format!("the file's {} block checksums are not the {} recorded for it", data.len().div_ceil(CHECKSUM_BLOCK_BYTES), expected.blocks.len())));
    }
    Ok(())
}

/// Fails with [`StorageError::Corrupted`] unless `found`, the CRC-32 of the
/// file at `path`, is `crc32`, the one written.
fn check_crc(path: &Path, found: u32, crc32: u32) -> StorageResult<()> {
    if found != crc32 {
        return Err(corrupted(path, format!("segment checksum is {found:08x}, {crc32:08x} was written")));
    }
    Ok(())
}

/// The footer's byte range: Parquet's metadata and the 8 bytes after it (its
/// length and the magic). A damaged length makes the range reach further
/// back, which only checks more.
fn footer_range(data: &[u8]) -> (u64, u64) {
    let length = data.len();
    let Some(tail) = length.checked_sub(8) else {
        return (0, length as u64);
    };
    let metadata = u32::from_le_bytes([data[tail], data[tail + 1], data[tail + 2], data[tail + 3]]) as usize;
    let start = tail.saturating_sub(metadata);
    (start as u64, (length - start) as u64)
}

/// Checks every block that overlaps one of `ranges` (offset, length) once.
fn check_blocks(path: &Path, data: &[u8], blocks: &[u32], checked: &mut [bool], ranges: impl IntoIterator<Item = (u64, u64)>) -> StorageResult<()> {
    for (start, length) in ranges {
        let end = start.saturating_add(length).min(data.len() as u64) as usize;
        let start = start as usize;
        if start >= end {
            continue;
        }
        for block in start / CHECKSUM_BLOCK_BYTES..=(end - 1) / CHECKSUM_BLOCK_BYTES {
            if std::mem::replace(&mut checked[block], true) {
                continue;
            }
            let offset = block * CHECKSUM_BLOCK_BYTES;
            let bytes = &data[offset..(offset + CHECKSUM_BLOCK_BYTES).min(data.len())];
            let found = crc32fast::hash(bytes);
            if found != blocks[block] {
                return Err(corrupted(
                    path,
                    format!("block {block} (bytes {offset}..{}) has checksum {found:08x}, {:08x} was written", offset + bytes.len(), blocks[block]),
                ));
            }
        }
    }
    Ok(())
}

/// Writes `batches` as one durable segment file; returns its size and checksum.
pub fn write_segment(path: &Path, schema: &SchemaRef, batches: &[RecordBatch]) -> StorageResult<SegmentSum> {
    let mut writer = create_writer(path, schema, batches.first())?;
    for batch in batches {
        writer.write(batch).map_err(|e| parquet_error(path, e))?;
    }
    finish_writer(path, writer)
}

/// Bytes of a segment a bulk loader hands on at a time: each goes to every
/// replica of the partition as one message, which the node appends to the
/// segment's file. The loader holds one piece per segment being built rather
/// than whole files (a lineitem segment is tens of MB).
pub const SEGMENT_CHUNK_BYTES: usize = 1 << 20;

/// Where a loader's segment goes while it is encoded: its bytes are summed
/// and handed to `ship` in pieces of about [`SEGMENT_CHUNK_BYTES`].
struct ChunkSink {
    buffer: Vec<u8>,
    sum: SumBuilder,
    ship: Box<dyn FnMut(Bytes) -> std::io::Result<()> + Send>,
}

impl ChunkSink {
    fn ship_buffer(&mut self) -> std::io::Result<()> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        let chunk = std::mem::replace(&mut self.buffer, Vec::with_capacity(SEGMENT_CHUNK_BYTES));
        self.sum.update(&chunk);
        (self.ship)(Bytes::from(chunk))
    }
}

impl std::io::Write for ChunkSink {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.buffer.extend_from_slice(data);
        if self.buffer.len() >= SEGMENT_CHUNK_BYTES {
            self.ship_buffer()?;
        }
        Ok(data.len())
    }

    /// Pieces go when full or at the end, not when Parquet flushes a row group.
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A segment encoded by a bulk loader as it streams it to every replica of
/// its partition: each row is encoded once, not once per copy, and the nodes
/// only check and store the bytes. `ship` gets the file's bytes in order, in
/// pieces; an error from it (the stream to a node closed) fails the write.
pub struct SegmentBuilder {
    writer: ArrowWriter<ChunkSink>,
    rows: u64,
}

impl SegmentBuilder {
    /// A segment of `schema`, with encodings chosen from `sample` (its first rows).
    pub fn new(schema: &SchemaRef, sample: &RecordBatch, ship: impl FnMut(Bytes) -> std::io::Result<()> + Send + 'static) -> StorageResult<Self> {
        let sink = ChunkSink { buffer: Vec::with_capacity(SEGMENT_CHUNK_BYTES), sum: SumBuilder::default(), ship: Box::new(ship) };
        let writer = ArrowWriter::try_new(sink, schema.clone(), Some(writer_properties(Some(sample)))).map_err(encode_error)?;
        Ok(SegmentBuilder { writer, rows: 0 })
    }

    pub fn write(&mut self, batch: &RecordBatch) -> StorageResult<()> {
        self.writer.write(batch).map_err(encode_error)?;
        self.rows += batch.num_rows() as u64;
        Ok(())
    }

    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Writes the footer, ships the last piece and returns the whole file's
    /// size and checksums.
    pub fn finish(self) -> StorageResult<SegmentSum> {
        let mut sink = self.writer.into_inner().map_err(encode_error)?;
        sink.ship_buffer().map_err(|e| StorageError::internal(format!("shipping a segment: {e}")))?;
        Ok(sink.sum.finish())
    }
}

fn encode_error(error: parquet::errors::ParquetError) -> StorageError {
    StorageError::internal(format!("encoding a segment: {error}"))
}

/// Checks a segment file a bulk loader streamed to this node, once all of it
/// is written to `path`: the bytes that arrived (`received`) must have the
/// checksums the loader computed, and the file must be Parquet with exactly
/// `schema`'s columns (a NOT NULL column stored as a required one, so it
/// cannot hold a null) and `rows` rows. Errors name the file, not its directory.
pub fn check_received(path: &Path, received: &SegmentSum, expected: &Checksums, schema: &SchemaRef, rows: u64) -> StorageResult<()> {
    let named = Path::new(path.file_name().unwrap_or(path.as_os_str()));
    if expected.crc32 != Some(received.crc32) || expected.blocks != received.blocks {
        return Err(corrupted(named, "the segment's bytes do not have the checksums sent with them".into()));
    }
    let data = map(path)?;
    let metadata = parquet::file::metadata::ParquetMetaDataReader::new().parse_and_finish(&data).map_err(|e| parquet_error(named, e))?;
    let file = metadata.file_metadata();
    let found = parquet::arrow::parquet_to_arrow_schema(file.schema_descr(), file.key_value_metadata()).map_err(|e| parquet_error(named, e))?;
    let describe = |s: &arrow::datatypes::Schema| -> Vec<(String, arrow::datatypes::DataType, bool)> {
        s.fields().iter().map(|f| (f.name().clone(), f.data_type().clone(), f.is_nullable())).collect()
    };
    let required_leaves = (0..file.schema_descr().num_columns()).map(|i| !file.schema_descr().column(i).self_type().is_optional());
    let declared_not_null = schema.fields().iter().map(|f| !f.is_nullable());
    if describe(&found) != describe(schema) || !required_leaves.eq(declared_not_null) {
        return Err(corrupted(named, format!("the segment's columns are not the table's: {found:?}")));
    }
    if file.num_rows() as u64 != rows {
        return Err(corrupted(named, format!("the segment holds {} rows, {rows} were sent", file.num_rows())));
    }
    Ok(())
}

/// Opens a segment for reading `projection` (column indices; `None` for all).
/// With block checksums, the footer's blocks are checked before it is parsed
/// and the projected column chunks' blocks before any is decoded; without,
/// the whole file is checked against its CRC-32 when it has one.
pub fn read_segment(path: &Path, checksums: &Checksums, projection: Option<&[usize]>) -> StorageResult<ParquetRecordBatchReader> {
    let (builder, mask) = checked_reader(path, checksums, projection, None)?;
    builder.with_projection(mask).build().map_err(|e| parquet_error(path, e))
}

/// Every column of the rows at `positions` (ascending) of a segment, in
/// that order: only the pages holding them are checked and decoded (in
/// files with a page index; in older ones, their column chunks).
pub fn read_rows_at(path: &Path, checksums: &Checksums, positions: &[u32]) -> StorageResult<RecordBatch> {
    let (builder, mask) = checked_reader(path, checksums, None, Some(positions))?;
    let schema = builder.schema().clone();
    let mut selectors = Vec::new();
    let mut next = 0usize;
    for position in positions {
        let position = *position as usize;
        if position < next {
            return Err(StorageError::internal(format!("rows of {} asked for out of order", path.display())));
        }
        if position > next {
            selectors.push(RowSelector::skip(position - next));
        }
        selectors.push(RowSelector::select(1));
        next = position + 1;
    }
    let reader = builder.with_projection(mask).with_row_selection(RowSelection::from(selectors)).build().map_err(|e| parquet_error(path, e))?;
    let batches: Vec<RecordBatch> = reader.collect::<Result<_, _>>().map_err(|e| corrupted(path, e.to_string()))?;
    arrow::compute::concat_batches(&schema, &batches).map_err(|e| StorageError::internal(format!("reading rows of {}: {e}", path.display())))
}

/// A reader of a segment for `projection`, with the blocks it will read
/// checked (see [`read_segment`]): with `rows` (ascending positions), only
/// the pages holding them when the file has a page index.
fn checked_reader(
    path: &Path,
    checksums: &Checksums,
    projection: Option<&[usize]>,
    rows: Option<&[u32]>,
) -> StorageResult<(ParquetRecordBatchReaderBuilder<Bytes>, ProjectionMask)> {
    let data = map(path)?;
    let blocks = checksums.blocks.as_slice();
    let mut checked = vec![false; blocks.len()];
    if blocks.is_empty() {
        if let Some(crc32) = checksums.crc32 {
            check_crc(path, crc32fast::hash(&data), crc32)?;
        }
    } else {
        if blocks.len() != data.len().div_ceil(CHECKSUM_BLOCK_BYTES) {
            return Err(corrupted(path, format!("segment is {} bytes, but {} blocks of it were written", data.len(), blocks.len())));
        }
        check_blocks(path, &data, blocks, &mut checked, [footer_range(&data)])?;
    }
    let mut parquet = ParquetMetaDataReader::new().parse_and_finish(&data).map_err(|e| parquet_error(path, e))?;
    if rows.is_some() {
        // A point read uses the offset index to skip the pages without its
        // rows. The index lies outside the footer: checked before it is parsed.
        if !blocks.is_empty() {
            check_blocks(path, &data, blocks, &mut checked, page_index_ranges(&parquet))?;
        }
        let mut reader = ParquetMetaDataReader::new_with_metadata(parquet).with_offset_index_policy(PageIndexPolicy::Optional);
        reader.read_page_indexes(&data).map_err(|e| parquet_error(path, e))?;
        parquet = reader.finish().map_err(|e| parquet_error(path, e))?;
    }
    let metadata = ArrowReaderMetadata::try_new(Arc::new(parquet), ArrowReaderOptions::new()).map_err(|e| parquet_error(path, e))?;
    let metadata = match strings_as_views(metadata.schema()) {
        Some(schema) => ArrowReaderMetadata::try_new(metadata.metadata().clone(), ArrowReaderOptions::new().with_schema(schema))
            .map_err(|e| parquet_error(path, e))?,
        None => metadata,
    };
    let builder = ParquetRecordBatchReaderBuilder::new_with_metadata(data.clone(), metadata).with_batch_size(BATCH_ROWS);
    let mask = match projection {
        Some(columns) => ProjectionMask::roots(builder.parquet_schema(), columns.iter().copied()),
        None => ProjectionMask::all(),
    };
    if !blocks.is_empty() {
        let pages = rows.and_then(|rows| pages_holding(builder.metadata(), rows));
        match pages {
            Some(pages) => check_blocks(path, &data, blocks, &mut checked, pages)?,
            None => {
                let chunks = builder.metadata().row_groups().iter().flat_map(|row_group| {
                    row_group.columns().iter().enumerate().filter(|(leaf, _)| mask.leaf_included(*leaf)).map(|(_, chunk)| chunk.byte_range())
                });
                check_blocks(path, &data, blocks, &mut checked, chunks)?;
            }
        }
    }
    Ok((builder, mask))
}

/// The byte ranges of a file's offset index (where each page is).
fn page_index_ranges(metadata: &ParquetMetaData) -> Vec<(u64, u64)> {
    let chunks = metadata.row_groups().iter().flat_map(|g| g.columns());
    chunks.filter_map(|c| Some((c.offset_index_offset()?.max(0) as u64, c.offset_index_length()?.max(0) as u64))).collect()
}

/// The byte ranges of every column's pages holding a row of `rows`
/// (ascending positions in the file), with each such column chunk's
/// dictionary page; `None` without a page index (files written before it).
fn pages_holding(metadata: &ParquetMetaData, rows: &[u32]) -> Option<Vec<(u64, u64)>> {
    let offsets = metadata.offset_index()?;
    let mut ranges = Vec::new();
    let mut first_row = 0u64;
    for (row_group, columns) in metadata.row_groups().iter().zip(offsets) {
        let group_rows = row_group.num_rows() as u64;
        // The positions in this row group, relative to its first row.
        let start = rows.partition_point(|r| (*r as u64) < first_row);
        let end = rows.partition_point(|r| (*r as u64) < first_row + group_rows);
        let wanted: Vec<u64> = rows[start..end].iter().map(|r| *r as u64 - first_row).collect();
        first_row += group_rows;
        if wanted.is_empty() {
            continue;
        }
        if columns.len() != row_group.columns().len() {
            return None;
        }
        for (chunk, index) in row_group.columns().iter().zip(columns) {
            let pages = index.page_locations();
            let first_page = pages.first()?;
            if let Some(dictionary) = chunk.dictionary_page_offset() {
                ranges.push((dictionary as u64, (first_page.offset - dictionary).max(0) as u64));
            }
            for (i, page) in pages.iter().enumerate() {
                let page_end = pages.get(i + 1).map_or(group_rows, |next| next.first_row_index as u64);
                let from = wanted.partition_point(|r| *r < page.first_row_index as u64);
                if wanted.get(from).is_some_and(|r| *r < page_end) {
                    ranges.push((page.offset as u64, page.compressed_page_size as u64));
                }
            }
        }
    }
    Some(ranges)
}

/// The batches of one segment, decoded one per `next`, with the columns of
/// the projection asked for in its order (Parquet returns projected columns
/// in file order, once each). A batch that does not decode is reported as
/// damage to the file.
pub struct SegmentRows {
    reader: ParquetRecordBatchReader,
    reorder: Option<Vec<usize>>,
    path: std::path::PathBuf,
    /// Rows skipped (`deletions.rs`), and the file position of the next row.
    deleted: Deletions,
    offset: usize,
}

impl SegmentRows {
    /// Opens the segment at `path` (see [`read_segment`]) for `projection`
    /// (column indices, in the order wanted; `None` for all).
    pub fn open(path: &Path, checksums: &Checksums, projection: Option<&[usize]>) -> StorageResult<SegmentRows> {
        let (sorted, reorder) = match projection {
            Some(indices) => {
                let mut sorted = indices.to_vec();
                sorted.sort_unstable();
                sorted.dedup();
                let reorder: Vec<usize> = indices.iter().map(|i| sorted.binary_search(i).unwrap_or(0)).collect();
                (Some(sorted), Some(reorder))
            }
            None => (None, None),
        };
        let reader = read_segment(path, checksums, sorted.as_deref())?;
        Ok(SegmentRows { reader, reorder, path: path.to_path_buf(), deleted: Deletions::default(), offset: 0 })
    }

    /// The live rows of a listed segment as a snapshot sees it: its deleted
    /// rows skipped.
    pub fn of(segment: &SegmentRef, projection: Option<&[usize]>) -> StorageResult<SegmentRows> {
        let mut rows = SegmentRows::open(&segment.path, &segment.checksums, projection)?;
        rows.deleted = segment.deleted.clone();
        Ok(rows)
    }
}

impl Iterator for SegmentRows {
    type Item = StorageResult<RecordBatch>;

    fn next(&mut self) -> Option<Self::Item> {
        let batch = match self.reader.next()? {
            Ok(batch) => batch,
            Err(e) => return Some(Err(StorageError::Corrupted { path: self.path.display().to_string(), message: e.to_string() })),
        };
        let offset = self.offset;
        self.offset += batch.num_rows();
        let batch = match self.deleted.filter(batch, offset) {
            Ok(batch) => batch,
            Err(error) => return Some(Err(error)),
        };
        Some(match &self.reorder {
            Some(order) => batch.project(order).map_err(|e| StorageError::internal(format!("projecting {}: {e}", self.path.display()))),
            None => Ok(batch),
        })
    }
}

/// `batch` with `schema`'s column types (and field names and nullability):
/// rows of older files or of a replayed WAL may hold text as `Utf8`, a
/// scan's text another string type than a table's. A value that does not
/// fit its new type is an error, never NULL.
pub fn cast_to_schema(schema: &SchemaRef, batch: &RecordBatch) -> StorageResult<RecordBatch> {
    if batch.schema() == *schema {
        return Ok(batch.clone());
    }
    if batch.num_columns() != schema.fields().len() {
        return Err(StorageError::internal(format!("{} columns given for a schema of {}", batch.num_columns(), schema.fields().len())));
    }
    let strict = arrow::compute::CastOptions { safe: false, ..Default::default() };
    let columns = batch
        .columns()
        .iter()
        .zip(schema.fields())
        .map(|(column, field)| {
            if column.data_type() == field.data_type() {
                return Ok(column.clone());
            }
            arrow::compute::cast_with_options(column, field.data_type(), &strict).map_err(|e| {
                let message = format!("value for column \"{}\" does not fit its type {}: {e}", field.name(), field.data_type());
                // A number cast to a narrower number can only fail on its range.
                if column.data_type().is_numeric() && field.data_type().is_numeric() {
                    StorageError::OutOfRange { message }
                } else {
                    StorageError::InvalidValue { message }
                }
            })
        })
        .collect::<StorageResult<Vec<_>>>()?;
    let options = arrow::record_batch::RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
    RecordBatch::try_new_with_options(schema.clone(), columns, &options).map_err(|e| StorageError::internal(e.to_string()))
}

/// `schema` with its `Utf8` columns as `Utf8View` (FoamDB's text type), or
/// `None` when it has none: segments written before text was `Utf8View` read
/// as views too, and a dictionary-encoded page becomes views into its
/// dictionary instead of every row's bytes copied out.
pub fn strings_as_views(schema: &SchemaRef) -> Option<SchemaRef> {
    if !schema.fields().iter().any(|f| f.data_type() == &DataType::Utf8) {
        return None;
    }
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| if f.data_type() == &DataType::Utf8 { f.as_ref().clone().with_data_type(DataType::Utf8View) } else { f.as_ref().clone() })
        .collect();
    Some(std::sync::Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone())))
}

/// The segment's Parquet footer: row counts and each row group's column
/// statistics (min, max, nulls), which the query planner sums up into a
/// table's statistics. Only the footer is read, not the column data.
pub fn read_metadata(path: &Path) -> StorageResult<std::sync::Arc<parquet::file::metadata::ParquetMetaData>> {
    let file = File::open(path).map_err(|e| StorageError::io(path, e))?;
    let metadata = parquet::file::metadata::ParquetMetaDataReader::new().parse_and_finish(&file).map_err(|e| parquet_error(path, e))?;
    Ok(std::sync::Arc::new(metadata))
}

fn parquet_error(path: &Path, error: parquet::errors::ParquetError) -> StorageError {
    StorageError::Corrupted { path: path.display().to_string(), message: error.to_string() }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};
    use parquet::file::reader::{FileReader, SerializedFileReader};

    use super::*;

    /// Batches read from a segment, in the types `schema` wrote them: text is
    /// read back as `Utf8View` whatever it was written as.
    fn as_written(schema: &SchemaRef, read: &[RecordBatch]) -> RecordBatch {
        let views = strings_as_views(schema).unwrap_or_else(|| schema.clone());
        let read = arrow::compute::concat_batches(&views, read).unwrap();
        let columns = read.columns().iter().zip(schema.fields()).map(|(c, f)| arrow::compute::cast(c, f.data_type()).unwrap()).collect();
        RecordBatch::try_new(schema.clone(), columns).unwrap()
    }

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
        let read: Vec<RecordBatch> = read_segment(&path, &Checksums::default(), None).unwrap().collect::<Result<_, _>>().unwrap();
        assert_eq!(as_written(&schema, &read), batch);
        let _ = std::fs::remove_file(&path);
    }

    /// A segment of two columns whose chunks each span several checksum
    /// blocks: `id` (distinct integers) and `pad` (distinct text).
    fn two_column_segment(name: &str) -> (std::path::PathBuf, SegmentSum, RecordBatch) {
        let rows = 60_000i64;
        let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false), Field::new("pad", DataType::Utf8, false)]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from_iter_values((0..rows).map(|i| i * 7919 % 1_000_003))),
                Arc::new(StringArray::from_iter_values((0..rows).map(|i| format!("pad {} of row {i}", i * 104_729 % 999_983)))),
            ],
        )
        .unwrap();
        let path = std::env::temp_dir().join(format!("foam-segment-{name}-{}.parquet", std::process::id()));
        let sum = write_segment(&path, &schema, &[batch.clone()]).unwrap();
        (path, sum, batch)
    }

    fn read_all(path: &Path, checksums: &Checksums, projection: Option<&[usize]>) -> StorageResult<Vec<RecordBatch>> {
        read_segment(path, checksums, projection)?.collect::<Result<_, _>>().map_err(|e| parquet_error(path, e.into()))
    }

    /// Flips one byte of the file at `at`.
    fn damage(path: &Path, at: u64) {
        let mut bytes = std::fs::read(path).unwrap();
        bytes[at as usize] ^= 0x5a;
        std::fs::write(path, bytes).unwrap();
    }

    #[test]
    fn block_checksums_cover_the_file_and_combine_into_its_crc() {
        let (path, sum, _) = two_column_segment("sums");
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(sum.bytes, bytes.len() as u64);
        assert_eq!(sum.crc32, crc32fast::hash(&bytes));
        assert!(sum.blocks.len() > 4, "the test file spans several blocks");
        let expected: Vec<u32> = bytes.chunks(CHECKSUM_BLOCK_BYTES).map(crc32fast::hash).collect();
        assert_eq!(sum.blocks, expected);
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn a_streamed_segment_comes_in_pieces_that_make_the_file_and_its_sums() {
        let (path, _, batch) = two_column_segment("streamed");
        let pieces = Arc::new(std::sync::Mutex::new(Vec::<Bytes>::new()));
        let shipped = pieces.clone();
        let mut builder = SegmentBuilder::new(&batch.schema(), &batch, move |piece| {
            shipped.lock().unwrap().push(piece);
            Ok(())
        })
        .unwrap();
        // Four times the rows, in uneven batches: over a row group and over a piece.
        let batch = arrow::compute::concat_batches(&batch.schema(), &[batch.clone(), batch.clone(), batch.clone(), batch]).unwrap();
        for offset in (0..batch.num_rows()).step_by(7_000) {
            builder.write(&batch.slice(offset, 7_000.min(batch.num_rows() - offset))).unwrap();
        }
        let sum = builder.finish().unwrap();
        let pieces = pieces.lock().unwrap().clone();
        assert!(pieces.len() > 1, "a segment over {SEGMENT_CHUNK_BYTES} bytes goes in several pieces");
        assert!(pieces.iter().all(|p| !p.is_empty()));
        let file: Vec<u8> = pieces.iter().flat_map(|p| p.iter().copied()).collect();
        assert_eq!(sum, sum_of(&file), "summed as it went, the same as summed whole");
        // Summed in pieces that do not fall on block boundaries, the same again.
        let mut odd = SumBuilder::default();
        file.chunks(CHECKSUM_BLOCK_BYTES / 3 + 1).for_each(|piece| odd.update(piece));
        assert_eq!(odd.finish(), sum);
        std::fs::write(&path, &file).unwrap();
        let checksums = Checksums { crc32: Some(sum.crc32), blocks: sum.blocks.clone() };
        let read = read_all(&path, &checksums, None).unwrap();
        assert_eq!(as_written(&batch.schema(), &read), batch);
        // A piece the receiver cannot take fails the write instead of being lost.
        let mut refused = SegmentBuilder::new(&batch.schema(), &batch, |_| Err(std::io::Error::other("stream closed"))).unwrap();
        let failed = refused.write(&batch).and_then(|_| refused.finish().map(|_| ()));
        assert!(failed.expect_err("nowhere to ship").to_string().contains("stream closed"));
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn a_read_checks_the_blocks_of_the_columns_it_decodes() {
        let (path, sum, batch) = two_column_segment("columns");
        let checksums = Checksums { crc32: Some(sum.crc32), blocks: sum.blocks.clone() };
        let metadata = read_metadata(&path).unwrap();
        let (pad_start, pad_length) = metadata.row_group(0).column(1).byte_range();
        let (id_start, id_length) = metadata.row_group(0).column(0).byte_range();
        // A byte in the middle of `pad`'s chunk, in a block no `id` byte shares.
        let at = pad_start + pad_length / 2;
        let block = at as usize / CHECKSUM_BLOCK_BYTES;
        assert!(((id_start + id_length - 1) as usize / CHECKSUM_BLOCK_BYTES) < block);
        damage(&path, at);

        let ids = read_all(&path, &checksums, Some(&[0])).expect("the id column is intact");
        let ids = arrow::compute::concat_batches(&ids[0].schema(), &ids).unwrap();
        assert_eq!(ids.column(0), batch.column(0));
        for projection in [Some(&[1usize][..]), None] {
            let error = read_all(&path, &checksums, projection).expect_err("pad is damaged");
            let StorageError::Corrupted { message, .. } = &error else { panic!("not a corruption error: {error}") };
            assert!(message.contains(&format!("block {block} ")), "{message}");
        }
        // A file with no block checksums is checked whole.
        let whole = Checksums { crc32: Some(sum.crc32), blocks: Vec::new() };
        assert!(matches!(read_all(&path, &whole, Some(&[0])), Err(StorageError::Corrupted { .. })));
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn a_received_copy_is_checked_against_its_whole_crc_and_every_block() {
        let (path, sum, _) = two_column_segment("received");
        let recorded = Checksums { crc32: Some(sum.crc32), blocks: sum.blocks.clone() };
        verify(&path, &recorded).expect("an intact copy");
        // A block list that does not belong to the file (a garbled message).
        let mut wrong = recorded.clone();
        wrong.blocks[1] ^= 1;
        let error = verify(&path, &wrong).expect_err("the block list is wrong");
        assert!(error.to_string().contains("block checksums are not the"), "{error}");
        wrong.blocks = sum.blocks[1..].to_vec();
        assert!(matches!(verify(&path, &wrong), Err(StorageError::Corrupted { .. })));
        // A damaged file fails its whole CRC.
        damage(&path, sum.bytes / 2);
        let error = verify(&path, &recorded).expect_err("the file is damaged");
        assert!(error.to_string().contains("segment checksum is"), "{error}");
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn a_damaged_footer_or_length_is_reported_before_any_column_is_read() {
        let (path, sum, _) = two_column_segment("footer");
        let checksums = Checksums { crc32: Some(sum.crc32), blocks: sum.blocks.clone() };
        let length = sum.bytes;
        // The footer's metadata (a statistic, an offset, ...) and its length field.
        for at in [length - 8 - 20, length - 7] {
            damage(&path, at);
            let error = read_all(&path, &checksums, Some(&[0])).expect_err("the footer is damaged");
            assert!(matches!(&error, StorageError::Corrupted { message, .. } if message.contains("checksum")), "{error}");
            damage(&path, at);
            read_all(&path, &checksums, Some(&[0])).expect("repaired");
        }
        // A file that grew by a block no longer matches its block count.
        let mut grown = std::fs::read(&path).unwrap();
        grown.extend(std::iter::repeat_n(0u8, CHECKSUM_BLOCK_BYTES));
        std::fs::write(&path, grown).unwrap();
        let error = read_all(&path, &checksums, None).expect_err("the file grew");
        assert!(error.to_string().contains("blocks of it were written"), "{error}");
        let _ = std::fs::remove_file(&path);
    }
}
