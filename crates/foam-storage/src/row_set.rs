//! Rows matched by their content: the multiset of whole rows a DELETE (or
//! the old side of an UPDATE) names, and the digest that tells whether two
//! copies of a partition hold the same rows.
//!
//! Copies of a partition hold the same rows but not in the same files or
//! order (each node flushes its memtable on its own), so a deletion travels
//! as the rows themselves and each copy finds them in its own storage. Equal
//! rows are interchangeable: deleting any `n` of them leaves the same table.
//! For the same reason a copy's digest ignores order and file layout.

use crate::deletions::Deletions;
use crate::error::{StorageError, StorageResult};
use std::collections::HashMap;

use arrow::array::{ArrayRef, BooleanArray};
use arrow::datatypes::{DataType, SchemaRef};
use arrow::record_batch::RecordBatch;
use arrow::row::{RowConverter, SortField};

/// Whole rows as bytes that are equal exactly when the rows are. Text and
/// binary are compared as plain arrays: rows read back from a segment may
/// hold them as views, memtable and staged rows not.
pub(crate) struct RowEncoder {
    converter: RowConverter,
    types: Vec<DataType>,
}

impl RowEncoder {
    pub(crate) fn new(schema: &SchemaRef) -> StorageResult<Self> {
        let types: Vec<DataType> = schema
            .fields()
            .iter()
            .map(|f| match f.data_type() {
                DataType::Utf8View | DataType::LargeUtf8 => DataType::Utf8,
                DataType::BinaryView | DataType::LargeBinary => DataType::Binary,
                other => other.clone(),
            })
            .collect();
        let converter = RowConverter::new(types.iter().map(|t| SortField::new(t.clone())).collect()).map_err(internal)?;
        Ok(RowEncoder { converter, types })
    }

    pub(crate) fn encode(&self, batch: &RecordBatch) -> StorageResult<arrow::row::Rows> {
        if batch.num_columns() != self.types.len() {
            return Err(StorageError::internal(format!("rows of {} columns matched against rows of {}", batch.num_columns(), self.types.len())));
        }
        let columns: Vec<ArrayRef> = batch
            .columns()
            .iter()
            .zip(&self.types)
            .map(|(array, data_type)| if array.data_type() == data_type { Ok(array.clone()) } else { arrow::compute::cast(array, data_type) })
            .collect::<Result<_, _>>()
            .map_err(internal)?;
        self.converter.convert_columns(&columns).map_err(internal)
    }
}

/// A multiset of rows of one table's schema.
pub struct RowSet {
    encoder: RowEncoder,
    counts: HashMap<Vec<u8>, u64>,
    len: u64,
}

impl RowSet {
    /// An empty set of rows shaped like `schema`.
    pub fn new(schema: &SchemaRef) -> StorageResult<Self> {
        Ok(RowSet { encoder: RowEncoder::new(schema)?, counts: HashMap::new(), len: 0 })
    }

    /// The set of every row of `batches` (all of one schema).
    pub fn of(batches: &[RecordBatch]) -> StorageResult<Option<Self>> {
        let Some(first) = batches.first() else { return Ok(None) };
        let mut set = RowSet::new(&first.schema())?;
        for batch in batches {
            set.add(batch)?;
        }
        Ok(Some(set))
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Adds every row of `batch`.
    pub fn add(&mut self, batch: &RecordBatch) -> StorageResult<()> {
        for row in self.encode(batch)? {
            *self.counts.entry(row).or_default() += 1;
            self.len += 1;
        }
        Ok(())
    }

    /// How many times each row of `self` occurs in `batch`, as a set of the
    /// same rows; rows of `batch` not in `self` are not counted.
    pub fn count_in(&self, batch: &RecordBatch, found: &mut HashMap<Vec<u8>, u64>) -> StorageResult<()> {
        for row in self.encode(batch)? {
            if self.counts.contains_key(&row) {
                *found.entry(row).or_default() += 1;
            }
        }
        Ok(())
    }

    /// The rows of `self` that `available` (counts of rows, as `count_in`
    /// makes them) cannot cover: how many are missing.
    pub fn missing_from(&self, available: &HashMap<Vec<u8>, u64>) -> u64 {
        self.counts.iter().map(|(row, wanted)| wanted.saturating_sub(available.get(row).copied().unwrap_or(0))).sum()
    }

    /// Removes from `batch` the rows of this set, each as often as it is in
    /// the set (taking them out of it); returns the rows left and how many
    /// were removed.
    pub fn take_from(&mut self, batch: &RecordBatch) -> StorageResult<(RecordBatch, u64)> {
        if self.len == 0 {
            return Ok((batch.clone(), 0));
        }
        let rows = self.encode(batch)?;
        let mut removed = 0;
        let keep: BooleanArray = rows
            .into_iter()
            .map(|row| match self.counts.get_mut(&row) {
                Some(count) if *count > 0 => {
                    *count -= 1;
                    removed += 1;
                    Some(false)
                }
                _ => Some(true),
            })
            .collect();
        self.len -= removed;
        if removed == 0 {
            return Ok((batch.clone(), 0));
        }
        let kept = arrow::compute::filter_record_batch(batch, &keep).map_err(internal)?;
        Ok((kept, removed))
    }

    /// The positions of rows of `batch` that are in this set, `batch`'s
    /// first row being at `offset` of its file, skipping those `deleted`
    /// already; each found row is taken out of the set.
    pub fn take_positions(&mut self, batch: &RecordBatch, offset: u32, deleted: &Deletions) -> StorageResult<Vec<u32>> {
        let mut positions = Vec::new();
        if self.len == 0 {
            return Ok(positions);
        }
        for (index, row) in self.encoder.encode(batch)?.iter().enumerate() {
            let position = offset + index as u32;
            if let Some(count) = self.counts.get_mut(row.as_ref())
                && *count > 0
                && !deleted.contains(position)
            {
                *count -= 1;
                self.len -= 1;
                positions.push(position);
            }
        }
        Ok(positions)
    }

    /// Each row of `batch`, encoded.
    fn encode(&self, batch: &RecordBatch) -> StorageResult<Vec<Vec<u8>>> {
        Ok(self.encoder.encode(batch)?.iter().map(|row| row.as_ref().to_vec()).collect())
    }
}

/// What a copy of a partition holds, in two numbers: its rows and a sum of
/// their hashes. Copies holding the same multiset of rows have the same
/// digest whatever their files and row order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RowDigest {
    pub rows: u64,
    pub checksum: u64,
}

/// Builds a [`RowDigest`] batch by batch.
pub struct RowDigester {
    encoder: RowEncoder,
    digest: RowDigest,
}

impl RowDigester {
    pub fn new(schema: &SchemaRef) -> StorageResult<Self> {
        Ok(RowDigester { encoder: RowEncoder::new(schema)?, digest: RowDigest::default() })
    }

    pub fn add(&mut self, batch: &RecordBatch) -> StorageResult<()> {
        for row in self.encoder.encode(batch)?.iter() {
            // A wrapping sum is the same in any order, and counts a row as
            // often as it is stored.
            self.digest.checksum = self.digest.checksum.wrapping_add(xxhash_rust::xxh3::xxh3_64(row.as_ref()));
            self.digest.rows += 1;
        }
        Ok(())
    }

    pub fn finish(self) -> RowDigest {
        self.digest
    }
}

fn internal(error: impl std::fmt::Display) -> StorageError {
    StorageError::internal(format!("matching rows: {error}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, StringArray, StringViewArray};
    use arrow::datatypes::{Field, Schema};
    use std::sync::Arc;

    fn rows(keys: &[i64], texts: &[&str], view: bool) -> RecordBatch {
        let text_type = if view { DataType::Utf8View } else { DataType::Utf8 };
        let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, true), Field::new("t", text_type, true)]));
        let texts: ArrayRef =
            if view { Arc::new(StringViewArray::from(texts.to_vec())) } else { Arc::new(StringArray::from(texts.to_vec())) };
        RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(keys.to_vec())), texts]).unwrap()
    }

    #[test]
    fn equal_rows_are_taken_as_often_as_named_whatever_their_text_type() {
        let mut set = RowSet::of(&[rows(&[1, 1, 2], &["a", "a", "b"], true)]).unwrap().unwrap();
        let stored = rows(&[1, 1, 1, 2, 3], &["a", "a", "a", "b", "b"], false);
        let mut found = HashMap::new();
        set.count_in(&stored, &mut found).unwrap();
        assert_eq!(set.missing_from(&found), 0);
        let (kept, removed) = set.take_from(&stored).unwrap();
        assert_eq!(removed, 3);
        assert_eq!(kept, rows(&[1, 3], &["a", "b"], false));
        assert!(set.is_empty());
        // A row not stored at all, or not often enough, is missing.
        let wanted = RowSet::of(&[rows(&[1, 1, 4], &["a", "a", "d"], false)]).unwrap().unwrap();
        let mut found = HashMap::new();
        wanted.count_in(&rows(&[1], &["a"], false), &mut found).unwrap();
        assert_eq!(wanted.missing_from(&found), 2);
    }

    fn digest(batches: &[RecordBatch]) -> RowDigest {
        let mut digester = RowDigester::new(&batches[0].schema()).unwrap();
        for batch in batches {
            digester.add(batch).unwrap();
        }
        digester.finish()
    }

    #[test]
    fn a_digest_ignores_order_batches_and_text_type_but_not_content() {
        let one = digest(&[rows(&[1, 2, 2], &["a", "b", "b"], false)]);
        assert_eq!(one.rows, 3);
        assert_eq!(one, digest(&[rows(&[2], &["b"], true), rows(&[2, 1], &["b", "a"], false)]));
        // One row fewer, one row changed, one duplicate traded for another row.
        assert_ne!(one, digest(&[rows(&[1, 2], &["a", "b"], false)]));
        assert_ne!(one, digest(&[rows(&[1, 2, 2], &["a", "b", "c"], false)]));
        assert_ne!(one.checksum, digest(&[rows(&[1, 1, 2], &["a", "a", "b"], false)]).checksum);
    }
}
