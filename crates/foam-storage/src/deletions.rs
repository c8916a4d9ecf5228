//! Deletion vectors: which rows of an immutable segment file or memtable
//! batch are deleted, each with the commit timestamp of its deletion.
//!
//! A deletion no longer rewrites what held its rows: commit records the rows'
//! positions (`DeletedRows`, in the WAL's Commit record, so replay adds the
//! same positions again and adding is idempotent) and readers skip them. A
//! read at snapshot `S` skips the positions deleted at or before `S`, so the
//! rows stay readable by older snapshots without keeping another version.
//! Compaction (`Partition::flush`) writes the live rows of small or
//! much-deleted segments into a new one and drops their vectors.

use std::sync::Arc;

use arrow::array::BooleanArray;
use arrow::record_batch::RecordBatch;
use serde::{Deserialize, Serialize};

use crate::error::{StorageError, StorageResult};
use foam_common::{PartitionId, TableId};

/// Deleted positions of one file or batch, sorted, each once, with the
/// timestamp it was deleted at. Cloning shares the positions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Deletions(Arc<Vec<(u32, u64)>>);

impl Deletions {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// The newest deletion's timestamp (0 when none).
    pub fn newest_ts(&self) -> u64 {
        self.0.iter().map(|(_, ts)| *ts).max().unwrap_or(0)
    }

    pub fn contains(&self, position: u32) -> bool {
        self.deleted_by(position, u64::MAX)
    }

    /// Whether `position` was deleted at or before `ts`.
    pub fn deleted_by(&self, position: u32, ts: u64) -> bool {
        self.0.binary_search_by_key(&position, |(p, _)| *p).is_ok_and(|at| self.0[at].1 <= ts)
    }

    /// These deletions and `positions` deleted at `ts`; positions deleted
    /// already keep their first timestamp (a replayed commit adds its own again).
    pub fn with(&self, positions: &[u32], ts: u64) -> Deletions {
        let mut merged: Vec<(u32, u64)> = Vec::with_capacity(self.0.len() + positions.len());
        merged.extend(self.0.iter().copied());
        merged.extend(positions.iter().map(|p| (*p, ts)));
        merged.sort_by_key(|(p, ts)| (*p, *ts));
        merged.dedup_by_key(|(p, _)| *p);
        Deletions(Arc::new(merged))
    }

    /// The deletions a read at snapshot `ts` sees.
    pub fn as_of(&self, ts: u64) -> Deletions {
        if self.0.iter().all(|(_, at)| *at <= ts) {
            return self.clone();
        }
        Deletions(Arc::new(self.0.iter().copied().filter(|(_, at)| *at <= ts).collect()))
    }

    /// Whether any position in `offset..offset + rows` is deleted.
    fn any_in(&self, offset: usize, rows: usize) -> bool {
        let start = self.0.partition_point(|(p, _)| (*p as usize) < offset);
        self.0.get(start).is_some_and(|(p, _)| (*p as usize) < offset + rows)
    }

    /// `batch`, whose first row is at `offset` of its file, without its
    /// deleted rows.
    pub fn filter(&self, batch: RecordBatch, offset: usize) -> StorageResult<RecordBatch> {
        let rows = batch.num_rows();
        if !self.any_in(offset, rows) {
            return Ok(batch);
        }
        let mut keep = vec![true; rows];
        let start = self.0.partition_point(|(p, _)| (*p as usize) < offset);
        for (position, _) in &self.0[start..] {
            let position = *position as usize;
            if position >= offset + rows {
                break;
            }
            keep[position - offset] = false;
        }
        arrow::compute::filter_record_batch(&batch, &BooleanArray::from(keep))
            .map_err(|e| StorageError::internal(format!("skipping deleted rows: {e}")))
    }
}

impl Serialize for Deletions {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Deletions {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let mut positions = Vec::<(u32, u64)>::deserialize(deserializer)?;
        positions.sort_by_key(|(p, ts)| (*p, *ts));
        positions.dedup_by_key(|(p, _)| *p);
        Ok(Deletions(Arc::new(positions)))
    }
}

/// Where a deleted row lives on this copy.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RowHome {
    /// A listed segment file.
    Segment(String),
    /// The `ordinal`-th memtable batch the commit at `lsn` added to the partition.
    Memtable { lsn: u64, ordinal: u32 },
}

/// Positions one commit deletes in one file or batch of one partition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeletedRows {
    pub table_id: TableId,
    pub partition: PartitionId,
    pub home: RowHome,
    pub positions: Vec<u32>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int64Array;

    fn keys(batch: &RecordBatch) -> Vec<i64> {
        batch.column(0).as_any().downcast_ref::<Int64Array>().unwrap().values().to_vec()
    }

    #[test]
    fn a_read_skips_the_positions_deleted_at_or_before_its_snapshot() {
        let batch = RecordBatch::try_from_iter([("k", Arc::new(Int64Array::from(vec![10, 11, 12, 13])) as _)]).unwrap();
        let deleted = Deletions::default().with(&[5, 1], 100).with(&[2], 200);
        // Rows 10..13 sit at positions 4..7 of their file: position 5 is row 11.
        assert_eq!(keys(&deleted.filter(batch.clone(), 4).unwrap()), vec![10, 12, 13]);
        assert_eq!(keys(&deleted.filter(batch.clone(), 0).unwrap()), vec![10, 13]);
        assert_eq!(keys(&deleted.as_of(150).filter(batch.clone(), 0).unwrap()), vec![10, 12, 13]);
        assert_eq!(keys(&deleted.as_of(99).filter(batch, 0).unwrap()), vec![10, 11, 12, 13]);
        // Adding a position again keeps its first timestamp.
        let again = deleted.with(&[1], 300);
        assert_eq!(again, deleted);
        assert_eq!(again.newest_ts(), 200);
        let json = serde_json::to_string(&again).unwrap();
        assert_eq!(serde_json::from_str::<Deletions>(&json).unwrap(), again);
    }
}
