//! A partition's index of its committed rows by the columns of a unique key:
//! from a key's encoded values to where rows with it live (`RowHome` and
//! position), so prepare and commit read the rows a change names instead of
//! the whole partition (`Partition::rows_with_keys`).
//!
//! Built on first use from the key columns of the partition's rows, kept up
//! to date as commits add memtable batches, and dropped when a flush, a new
//! segment or a copy changes the files it points into. Deleting a row leaves
//! its entry: a lookup skips positions the deletion vectors name, so an
//! entry may only ever point at too many rows, never miss one.

use std::collections::HashMap;

use arrow::record_batch::RecordBatch;

use serde::{Deserialize, Serialize};

use crate::deletions::RowHome;
use crate::error::{StorageError, StorageResult};
use crate::row_set::RowEncoder;

/// The values of a unique key a read wants the rows of (a point read,
/// `Partition::rows_by_key_at`): `rows` holds the key's `columns` (table
/// positions, in the key's order), one probe per row. Sent between nodes as
/// Arrow IPC bytes.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(try_from = "KeyProbeBytes", into = "KeyProbeBytes")]
pub struct KeyProbe {
    pub columns: Vec<usize>,
    pub rows: RecordBatch,
}

#[derive(Serialize, Deserialize)]
struct KeyProbeBytes {
    columns: Vec<usize>,
    rows: Vec<u8>,
}

impl From<KeyProbe> for KeyProbeBytes {
    fn from(probe: KeyProbe) -> Self {
        // Encoding a batch made in memory fails only on a bug; an empty
        // probe decodes as one that finds nothing.
        let rows = crate::ipc::encode_batches(std::slice::from_ref(&probe.rows)).unwrap_or_default();
        KeyProbeBytes { columns: probe.columns, rows }
    }
}

impl TryFrom<KeyProbeBytes> for KeyProbe {
    type Error = StorageError;

    fn try_from(bytes: KeyProbeBytes) -> StorageResult<Self> {
        let batches = crate::ipc::decode_batches(&bytes.rows)?;
        let [rows] = <[RecordBatch; 1]>::try_from(batches).map_err(|b| StorageError::internal(format!("a key probe of {} batches", b.len())))?;
        if rows.num_columns() != bytes.columns.len() {
            return Err(StorageError::internal(format!("a key probe of {} columns names {}", rows.num_columns(), bytes.columns.len())));
        }
        Ok(KeyProbe { columns: bytes.columns, rows })
    }
}

pub struct KeyIndex {
    /// The key's columns, by position in the table.
    columns: Vec<usize>,
    /// Made from the first rows added (`None`: no row yet).
    encoder: Option<RowEncoder>,
    homes: Vec<RowHome>,
    /// Encoded key → (index into `homes`, position there).
    entries: HashMap<Vec<u8>, Vec<(u32, u32)>>,
    rows: usize,
}

impl KeyIndex {
    pub fn new(columns: &[usize]) -> Self {
        KeyIndex { columns: columns.to_vec(), encoder: None, homes: Vec::new(), entries: HashMap::new(), rows: 0 }
    }

    pub fn columns(&self) -> &[usize] {
        &self.columns
    }

    /// Rows indexed so far.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Indexes the rows of `batch` (whole rows, or only the key's columns
    /// when `projected`), the first at `offset` of `home`.
    pub fn add(&mut self, home: RowHome, offset: u32, batch: &RecordBatch, projected: bool) -> StorageResult<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let keys = if projected { batch.clone() } else { self.project(batch)? };
        let encoder = match &mut self.encoder {
            Some(encoder) => encoder,
            None => self.encoder.insert(RowEncoder::new(&keys.schema())?),
        };
        let home_index = match self.homes.iter().position(|h| *h == home) {
            Some(index) => index,
            None => {
                self.homes.push(home);
                self.homes.len() - 1
            }
        } as u32;
        for (index, key) in encoder.encode(&keys)?.iter().enumerate() {
            self.entries.entry(key.as_ref().to_vec()).or_default().push((home_index, offset + index as u32));
        }
        self.rows += batch.num_rows();
        Ok(())
    }

    /// Where rows whose key equals that of a row of `probe` may live:
    /// `(home, position)`, deleted ones included. `probe_columns` names the
    /// table column each of `probe`'s is (`None`: whole rows).
    pub fn lookup(&self, probe: &RecordBatch, probe_columns: Option<&[usize]>) -> StorageResult<Vec<(&RowHome, u32)>> {
        let Some(encoder) = &self.encoder else { return Ok(Vec::new()) };
        let keys = match probe_columns {
            None => self.project(probe)?,
            Some(named) => {
                let at: Vec<usize> = self
                    .columns
                    .iter()
                    .map(|c| named.iter().position(|n| n == c).ok_or_else(|| StorageError::internal(format!("a probe without key column {c}"))))
                    .collect::<StorageResult<_>>()?;
                probe.project(&at).map_err(|e| StorageError::internal(format!("projecting key columns: {e}")))?
            }
        };
        let mut found = Vec::new();
        for key in encoder.encode(&keys)?.iter() {
            if let Some(places) = self.entries.get(key.as_ref()) {
                found.extend(places.iter().map(|(home, position)| (&self.homes[*home as usize], *position)));
            }
        }
        Ok(found)
    }

    fn project(&self, batch: &RecordBatch) -> StorageResult<RecordBatch> {
        batch.project(&self.columns).map_err(|e| StorageError::internal(format!("projecting key columns: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, StringArray, StringViewArray};
    use std::sync::Arc;

    #[test]
    fn a_lookup_finds_every_place_of_a_key_whatever_its_text_type() {
        let rows = |keys: Vec<i64>, texts: Vec<&str>, view: bool| {
            let texts: arrow::array::ArrayRef =
                if view { Arc::new(StringViewArray::from(texts)) } else { Arc::new(StringArray::from(texts)) };
            RecordBatch::try_from_iter([("k", Arc::new(Int64Array::from(keys)) as _), ("t", texts)]).unwrap()
        };
        let mut index = KeyIndex::new(&[0, 1]);
        index.add(RowHome::Segment("a".into()), 100, &rows(vec![1, 2, 1], vec!["x", "y", "y"], true), false).unwrap();
        index.add(RowHome::Memtable { lsn: 5, ordinal: 0 }, 0, &rows(vec![1], vec!["x"], false), false).unwrap();
        assert_eq!(index.rows(), 4);
        let found = index.lookup(&rows(vec![1, 3], vec!["x", "x"], false), None).unwrap();
        assert_eq!(found, vec![(&RowHome::Segment("a".into()), 100), (&RowHome::Memtable { lsn: 5, ordinal: 0 }, 0)]);
        assert!(index.lookup(&rows(vec![2], vec!["x"], true), None).unwrap().is_empty());
        // A probe of some columns, named.
        let keys_only = rows(vec![2], vec!["y"], false);
        let found = index.lookup(&keys_only, Some(&[0, 1])).unwrap();
        assert_eq!(found, vec![(&RowHome::Segment("a".into()), 101)]);
    }
}
