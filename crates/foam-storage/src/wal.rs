//! The write-ahead log: an append-only sequence of checksummed records, each
//! with a log sequence number (LSN) that only grows, split over files named by
//! the first LSN they hold.
//!
//! Record frame: `[u32 payload length][u32 CRC-32 of payload][payload]`, payload
//! `[u64 LSN][u32 header length][JSON header][body bytes]`. A torn frame at the
//! end of the newest file (a crash mid-append) is cut off on open; a bad frame
//! anywhere else is corruption and stops the node rather than lose data silently.

use crate::error::{StorageError, StorageResult};
use std::fs::{File, OpenOptions};
use std::io::{BufReader, Read, Write};
use std::path::{Path, PathBuf};

use crate::deletions::DeletedRows;
use foam_common::{NodeId, PartitionId, TableId, TxnId};
use serde::{Deserialize, Serialize};

/// Largest record accepted when reading; a length beyond it is a torn frame.
const RECORD_BYTES_MAX: u32 = 1 << 30;
const FRAME_HEADER_BYTES: usize = 8;
/// Exit code of a node whose WAL could not be repaired after a failed write.
const EXIT_CODE_WAL_UNUSABLE: i32 = 74;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WalHeader {
    /// The participant holds these rows durably and can commit them on request.
    /// `prepare_ts`: the coordinator's timestamp from before it prepared
    /// (0 in records from before MVCC); see `visibility.rs`.
    Prepare {
        txn: TxnId,
        coordinator: NodeId,
        entries: Vec<PreparedEntry>,
        #[serde(default)]
        prepare_ts: u64,
    },
    /// `ts`: the commit timestamp (0 in records from before MVCC).
    /// `deleted`: where this copy held the rows the transaction deletes
    /// (`deletions.rs`); absent in records from before deletion vectors,
    /// whose rows replay finds by content.
    Commit {
        txn: TxnId,
        #[serde(default)]
        ts: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        deleted: Option<Vec<DeletedRows>>,
    },
    Abort { txn: TxnId },
    DropTable { table_id: TableId },
    /// This node's copy of a partition moved elsewhere: earlier records no
    /// longer apply to it.
    DropPartition { table_id: TableId, partition: PartitionId },
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PreparedEntry {
    pub table_id: TableId,
    pub partition: PartitionId,
    pub rows: u64,
    pub data: EntryData,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum EntryData {
    /// Rows inside this record's body as Arrow IPC, at `[offset, offset + length)`.
    Inline { offset: u64, length: u64 },
    /// Rows to delete (each copy finds them by content, `row_set.rs`, at
    /// commit, and records where in the Commit record), inside
    /// this record's body as Arrow IPC, at `[offset, offset + length)`.
    Delete { offset: u64, length: u64 },
    /// Rows in a staged Parquet file (already fsynced) under the staging dir.
    Segment {
        file_name: String,
        bytes: u64,
        #[serde(default)]
        crc32: Option<u32>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        block_crc32: Vec<u32>,
    },
}

pub struct WalRecord {
    pub lsn: u64,
    pub header: WalHeader,
    pub body: Vec<u8>,
}

pub struct Wal {
    dir: PathBuf,
    file: File,
    file_first_lsn: u64,
    next_lsn: u64,
    bytes_since_checkpoint: u64,
}

impl Wal {
    /// Opens the log in `dir`, returning it positioned for appends together with
    /// every intact record, oldest first.
    pub fn open(dir: &Path) -> StorageResult<(Wal, Vec<WalRecord>)> {
        foam_common::fs::create_dir_all(dir)?;
        let files = list_files(dir)?;
        let mut records = Vec::new();
        let mut next_lsn = 1;
        let mut bytes_total = 0;
        for (index, (first_lsn, path)) in files.iter().enumerate() {
            let is_last = index + 1 == files.len();
            let (file_records, intact_bytes) = read_file(path, is_last)?;
            if is_last {
                let length = std::fs::metadata(path).map_err(|e| StorageError::io(path, e))?.len();
                if intact_bytes < length {
                    tracing::warn!(path = %path.display(), intact_bytes, length, "cutting off a torn WAL tail");
                    let file = OpenOptions::new().write(true).open(path).map_err(|e| StorageError::io(path, e))?;
                    file.set_len(intact_bytes).map_err(|e| StorageError::io(path, e))?;
                    file.sync_all().map_err(|e| StorageError::io(path, e))?;
                }
            }
            bytes_total += intact_bytes;
            next_lsn = next_lsn.max(*first_lsn);
            if let Some(last) = file_records.last() {
                next_lsn = next_lsn.max(last.lsn + 1);
            }
            records.extend(file_records);
        }
        let (file_first_lsn, path) = match files.last() {
            Some((first_lsn, path)) => (*first_lsn, path.clone()),
            None => (next_lsn, file_path(dir, next_lsn)),
        };
        let file = OpenOptions::new().create(true).append(true).open(&path).map_err(|e| StorageError::io(&path, e))?;
        foam_common::fs::sync_dir(dir)?;
        let wal = Wal { dir: dir.to_path_buf(), file, file_first_lsn, next_lsn, bytes_since_checkpoint: bytes_total };
        Ok((wal, records))
    }

    /// Appends a record and, when `sync`, makes it durable before returning its LSN.
    pub fn append(&mut self, header: &WalHeader, body: &[u8], sync: bool) -> StorageResult<u64> {
        let lsn = self.next_lsn;
        let header_bytes = serde_json::to_vec(header).map_err(|e| StorageError::internal(e.to_string()))?;
        let mut payload = Vec::with_capacity(12 + header_bytes.len() + body.len());
        payload.extend_from_slice(&lsn.to_le_bytes());
        payload.extend_from_slice(&(header_bytes.len() as u32).to_le_bytes());
        payload.extend_from_slice(&header_bytes);
        payload.extend_from_slice(body);
        if payload.len() as u64 >= RECORD_BYTES_MAX as u64 {
            return Err(StorageError::internal(format!("WAL record of {} bytes is too large", payload.len())));
        }
        let mut frame = Vec::with_capacity(FRAME_HEADER_BYTES + payload.len());
        frame.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        frame.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
        frame.extend_from_slice(&payload);
        let path = file_path(&self.dir, self.file_first_lsn);
        let length_before = self.file.metadata().map_err(|e| StorageError::io(&path, e))?.len();
        let written = self.file.write_all(&frame).and_then(|()| if sync { self.file.sync_data() } else { Ok(()) });
        if let Err(error) = written {
            // A partial frame must not stay in front of later records; if it
            // cannot be cut off, the log can no longer be trusted: stop.
            if self.file.set_len(length_before).and_then(|()| self.file.sync_data()).is_err() {
                tracing::error!(path = %path.display(), %error, "cannot roll back a failed WAL append; stopping");
                std::process::exit(EXIT_CODE_WAL_UNUSABLE);
            }
            return Err(StorageError::io(&path, error));
        }
        self.next_lsn += 1;
        self.bytes_since_checkpoint += frame.len() as u64;
        Ok(lsn)
    }

    pub fn sync(&mut self) -> StorageResult<()> {
        let path = file_path(&self.dir, self.file_first_lsn);
        self.file.sync_data().map_err(|e| StorageError::io(&path, e))
    }

    pub fn reset_checkpoint_counter(&mut self) {
        self.bytes_since_checkpoint = 0;
    }

    pub fn bytes_since_checkpoint(&self) -> u64 {
        self.bytes_since_checkpoint
    }

    pub fn next_lsn(&self) -> u64 {
        self.next_lsn
    }

    /// Starts a new file; the caller has made everything in older files durable
    /// elsewhere (or re-appends it) and then calls [`Wal::remove_before`].
    pub fn rotate(&mut self) -> StorageResult<()> {
        let path = file_path(&self.dir, self.next_lsn);
        self.file = OpenOptions::new().create(true).append(true).open(&path).map_err(|e| StorageError::io(&path, e))?;
        self.file_first_lsn = self.next_lsn;
        self.bytes_since_checkpoint = 0;
        Ok(foam_common::fs::sync_dir(&self.dir)?)
    }

    /// Deletes every file older than the current one.
    pub fn remove_older_files(&mut self) -> StorageResult<()> {
        for (first_lsn, path) in list_files(&self.dir)? {
            if first_lsn < self.file_first_lsn {
                std::fs::remove_file(&path).map_err(|e| StorageError::io(&path, e))?;
            }
        }
        Ok(foam_common::fs::sync_dir(&self.dir)?)
    }
}

fn file_path(dir: &Path, first_lsn: u64) -> PathBuf {
    dir.join(format!("{first_lsn:020}.wal"))
}

fn list_files(dir: &Path) -> StorageResult<Vec<(u64, PathBuf)>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| StorageError::io(dir, e))? {
        let path = entry.map_err(|e| StorageError::io(dir, e))?.path();
        let first_lsn = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".wal"))
            .and_then(|n| n.parse::<u64>().ok());
        if let Some(first_lsn) = first_lsn {
            files.push((first_lsn, path));
        }
    }
    files.sort();
    Ok(files)
}

/// Reads every intact record of one file; returns them with the byte length of
/// the intact prefix. A bad frame is tolerated only at the tail of the last file.
fn read_file(path: &Path, is_last: bool) -> StorageResult<(Vec<WalRecord>, u64)> {
    let file = File::open(path).map_err(|e| StorageError::io(path, e))?;
    let mut reader = BufReader::new(file);
    let mut records = Vec::new();
    let mut offset = 0u64;
    loop {
        let mut frame_header = [0u8; FRAME_HEADER_BYTES];
        match read_exact_or_eof(&mut reader, &mut frame_header).map_err(|e| StorageError::io(path, e))? {
            ReadOutcome::Eof => break,
            ReadOutcome::Partial => return torn(path, is_last, records, offset, "truncated frame header"),
            ReadOutcome::Full => {}
        }
        let length = u32::from_le_bytes(frame_header[0..4].try_into().expect("4 bytes"));
        let checksum = u32::from_le_bytes(frame_header[4..8].try_into().expect("4 bytes"));
        if length >= RECORD_BYTES_MAX || length < 12 {
            return torn(path, is_last, records, offset, "impossible record length");
        }
        let mut payload = vec![0u8; length as usize];
        match read_exact_or_eof(&mut reader, &mut payload).map_err(|e| StorageError::io(path, e))? {
            ReadOutcome::Full => {}
            _ => return torn(path, is_last, records, offset, "truncated record"),
        }
        if crc32fast::hash(&payload) != checksum {
            return torn(path, is_last, records, offset, "checksum mismatch");
        }
        let lsn = u64::from_le_bytes(payload[0..8].try_into().expect("8 bytes"));
        let header_length = u32::from_le_bytes(payload[8..12].try_into().expect("4 bytes")) as usize;
        if 12 + header_length > payload.len() {
            return torn(path, is_last, records, offset, "header overruns record");
        }
        let header: WalHeader = serde_json::from_slice(&payload[12..12 + header_length]).map_err(|e| {
            StorageError::Corrupted { path: path.display().to_string(), message: format!("WAL header: {e}") }
        })?;
        let body = payload[12 + header_length..].to_vec();
        records.push(WalRecord { lsn, header, body });
        offset += (FRAME_HEADER_BYTES + length as usize) as u64;
    }
    Ok((records, offset))
}

fn torn(path: &Path, is_last: bool, records: Vec<WalRecord>, offset: u64, what: &str) -> StorageResult<(Vec<WalRecord>, u64)> {
    if is_last {
        Ok((records, offset))
    } else {
        Err(StorageError::Corrupted { path: path.display().to_string(), message: format!("{what} at byte {offset}") })
    }
}

enum ReadOutcome {
    Full,
    Partial,
    Eof,
}

fn read_exact_or_eof(reader: &mut impl Read, buffer: &mut [u8]) -> std::io::Result<ReadOutcome> {
    let mut filled = 0;
    while filled < buffer.len() {
        let read = reader.read(&mut buffer[filled..])?;
        if read == 0 {
            return Ok(if filled == 0 { ReadOutcome::Eof } else { ReadOutcome::Partial });
        }
        filled += read;
    }
    Ok(ReadOutcome::Full)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("foam-wal-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn records_survive_reopen_and_torn_tail_is_cut() {
        let dir = temp_dir("torn");
        {
            let (mut wal, records) = Wal::open(&dir).unwrap();
            assert!(records.is_empty());
            assert_eq!(wal.append(&WalHeader::Commit { txn: 7, ts: 0, deleted: None }, b"", true).unwrap(), 1);
            assert_eq!(wal.append(&WalHeader::Abort { txn: 8 }, b"body", true).unwrap(), 2);
        }
        // Simulate a crash in the middle of a third append.
        let path = list_files(&dir).unwrap()[0].1.clone();
        let mut file = OpenOptions::new().append(true).open(&path).unwrap();
        file.write_all(&[200, 0, 0, 0, 1, 2]).unwrap();
        drop(file);
        let (mut wal, records) = Wal::open(&dir).unwrap();
        assert_eq!(records.len(), 2);
        assert_eq!(records[1].body, b"body");
        assert!(matches!(records[1].header, WalHeader::Abort { txn: 8 }));
        assert_eq!(wal.append(&WalHeader::Commit { txn: 9, ts: 0, deleted: None }, b"", true).unwrap(), 3);
        let (_, records) = Wal::open(&dir).unwrap();
        assert_eq!(records.iter().map(|r| r.lsn).collect::<Vec<_>>(), vec![1, 2, 3]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn corruption_before_the_tail_is_an_error() {
        let dir = temp_dir("corrupt");
        {
            let (mut wal, _) = Wal::open(&dir).unwrap();
            wal.append(&WalHeader::Commit { txn: 1, ts: 0, deleted: None }, b"abc", true).unwrap();
            wal.rotate().unwrap();
            wal.append(&WalHeader::Commit { txn: 2, ts: 0, deleted: None }, b"", true).unwrap();
        }
        let first = list_files(&dir).unwrap()[0].1.clone();
        let mut bytes = std::fs::read(&first).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        std::fs::write(&first, bytes).unwrap();
        let error = Wal::open(&dir).err().expect("corruption must be reported");
        assert_eq!(error.sqlstate(), "XX001");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
