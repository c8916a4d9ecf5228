//! Byte layout of an RPC message: `[u32 header length][JSON header][payload]`.

use bytes::Bytes;
use foam_common::{FoamError, FoamResult};
use serde::Serialize;
use serde::de::DeserializeOwned;

pub fn encode<T: Serialize>(header: &T, payload: &[u8]) -> FoamResult<Bytes> {
    encode_with(header, payload.len(), |bytes| {
        bytes.extend_from_slice(payload);
        Ok(())
    })
}

/// A message whose payload `write` appends in place (about `payload_hint`
/// bytes), so a large payload is not copied once more into the frame.
pub fn encode_with<T: Serialize>(
    header: &T,
    payload_hint: usize,
    write: impl FnOnce(&mut Vec<u8>) -> FoamResult<()>,
) -> FoamResult<Bytes> {
    let header = serde_json::to_vec(header).map_err(|e| FoamError::internal(e.to_string()))?;
    let mut bytes = Vec::with_capacity(4 + header.len() + payload_hint);
    bytes.extend_from_slice(&(header.len() as u32).to_le_bytes());
    bytes.extend_from_slice(&header);
    write(&mut bytes)?;
    Ok(Bytes::from(bytes))
}

/// Splits a message into its header and payload. Malformed bytes (a garbage
/// packet) give a clear error, never a panic.
pub fn decode<T: DeserializeOwned>(bytes: &Bytes) -> FoamResult<(T, Bytes)> {
    if bytes.len() < 4 {
        return Err(malformed("shorter than its length prefix"));
    }
    let header_length = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as usize;
    if 4 + header_length > bytes.len() {
        return Err(malformed("header longer than the message"));
    }
    let header = serde_json::from_slice(&bytes[4..4 + header_length]).map_err(|e| malformed(&e.to_string()))?;
    Ok((header, bytes.slice(4 + header_length..)))
}

fn malformed(what: &str) -> FoamError {
    FoamError::InvalidParameter { message: format!("malformed RPC message: {what}") }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::NodeRequest;

    #[test]
    fn round_trip_and_garbage() {
        let bytes = encode(&NodeRequest::Prepare { txn: 42, rows: 7, prepare_ts: 9 }, b"rows").unwrap();
        let (request, payload): (NodeRequest, Bytes) = decode(&bytes).unwrap();
        assert!(matches!(request, NodeRequest::Prepare { txn: 42, rows: 7, prepare_ts: 9 }));
        assert_eq!(&payload[..], b"rows");
        for garbage in [&b""[..], &b"\xff\xff\xff\xff{"[..], &b"\x02\x00\x00\x00{}"[..], &b"\x03\x00\x00\x00abc"[..]] {
            let error = decode::<NodeRequest>(&Bytes::copy_from_slice(garbage)).unwrap_err();
            assert_eq!(error.sqlstate(), "22023", "{garbage:?}");
        }
    }
}
