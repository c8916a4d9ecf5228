//! Arrow IPC stream encoding of record batches, the byte form of rows in WAL
//! records.

use arrow::ipc::reader::StreamReader;
use arrow::ipc::writer::StreamWriter;
use arrow::record_batch::RecordBatch;
use foam_common::{FoamError, FoamResult};

pub fn encode_batches(batches: &[RecordBatch]) -> FoamResult<Vec<u8>> {
    let Some(first) = batches.first() else {
        return Ok(Vec::new());
    };
    let mut bytes = Vec::new();
    let mut writer = StreamWriter::try_new(&mut bytes, &first.schema()).map_err(arrow_error)?;
    for batch in batches {
        writer.write(batch).map_err(arrow_error)?;
    }
    writer.finish().map_err(arrow_error)?;
    drop(writer);
    Ok(bytes)
}

pub fn decode_batches(bytes: &[u8]) -> FoamResult<Vec<RecordBatch>> {
    if bytes.is_empty() {
        return Ok(Vec::new());
    }
    let reader = StreamReader::try_new(bytes, None).map_err(arrow_error)?;
    reader.collect::<Result<Vec<_>, _>>().map_err(arrow_error)
}

fn arrow_error(error: arrow::error::ArrowError) -> FoamError {
    FoamError::internal(format!("Arrow IPC: {error}"))
}
