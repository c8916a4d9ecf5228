//! Arrow IPC stream encoding of record batches, the byte form of rows in WAL
//! records.

use crate::error::{StorageError, StorageResult};
use arrow::ipc::reader::StreamReader;
use arrow::ipc::writer::StreamWriter;
use arrow::record_batch::RecordBatch;

pub fn encode_batches(batches: &[RecordBatch]) -> StorageResult<Vec<u8>> {
    let mut bytes = Vec::with_capacity(encoded_size_hint(batches));
    encode_batches_into(batches, &mut bytes)?;
    Ok(bytes)
}

/// About the bytes `batches` take encoded, to size the buffer once: growing
/// it by doubling copies the rows again at every step.
pub fn encoded_size_hint(batches: &[RecordBatch]) -> usize {
    batches.iter().map(|b| b.get_array_memory_size() + 1024).sum()
}

/// Appends the IPC stream of `batches` (nothing when empty) to `bytes`.
pub fn encode_batches_into(batches: &[RecordBatch], bytes: &mut Vec<u8>) -> StorageResult<()> {
    let Some(first) = batches.first() else {
        return Ok(());
    };
    let mut writer = StreamWriter::try_new(bytes, &first.schema()).map_err(arrow_error)?;
    for batch in batches {
        writer.write(batch).map_err(arrow_error)?;
    }
    writer.finish().map_err(arrow_error)
}

pub fn decode_batches(bytes: &[u8]) -> StorageResult<Vec<RecordBatch>> {
    if bytes.is_empty() {
        return Ok(Vec::new());
    }
    let reader = StreamReader::try_new(bytes, None).map_err(arrow_error)?;
    reader.collect::<Result<Vec<_>, _>>().map_err(arrow_error)
}

fn arrow_error(error: arrow::error::ArrowError) -> StorageError {
    StorageError::internal(format!("Arrow IPC: {error}"))
}
