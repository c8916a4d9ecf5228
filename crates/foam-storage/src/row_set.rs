//! Rows matched by their content: the multiset of whole rows a DELETE (or
//! the old side of an UPDATE) names.
//!
//! Copies of a partition hold the same rows but not in the same files or
//! order (each node flushes its memtable on its own), so a deletion travels
//! as the rows themselves and each copy finds them in its own storage. Equal
//! rows are interchangeable: deleting any `n` of them leaves the same table.

use std::collections::HashMap;

use arrow::array::{ArrayRef, BooleanArray};
use arrow::datatypes::{DataType, SchemaRef};
use arrow::record_batch::RecordBatch;
use arrow::row::{RowConverter, SortField};
use foam_common::{FoamError, FoamResult};

/// A multiset of rows of one table's schema.
pub struct RowSet {
    converter: RowConverter,
    types: Vec<DataType>,
    counts: HashMap<Vec<u8>, u64>,
    len: u64,
}

impl RowSet {
    /// An empty set of rows shaped like `schema`.
    pub fn new(schema: &SchemaRef) -> FoamResult<Self> {
        let types: Vec<DataType> = schema.fields().iter().map(|f| f.data_type().clone()).collect();
        let converter = RowConverter::new(types.iter().map(|t| SortField::new(t.clone())).collect()).map_err(internal)?;
        Ok(RowSet { converter, types, counts: HashMap::new(), len: 0 })
    }

    /// The set of every row of `batches` (all of one schema).
    pub fn of(batches: &[RecordBatch]) -> FoamResult<Option<Self>> {
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
    pub fn add(&mut self, batch: &RecordBatch) -> FoamResult<()> {
        for row in self.encode(batch)? {
            *self.counts.entry(row).or_default() += 1;
            self.len += 1;
        }
        Ok(())
    }

    /// How many times each row of `self` occurs in `batch`, as a set of the
    /// same rows; rows of `batch` not in `self` are not counted.
    pub fn count_in(&self, batch: &RecordBatch, found: &mut HashMap<Vec<u8>, u64>) -> FoamResult<()> {
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
    pub fn take_from(&mut self, batch: &RecordBatch) -> FoamResult<(RecordBatch, u64)> {
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

    /// Each row of `batch`, encoded. Columns are compared as this set's types:
    /// rows read back from a segment may hold text as views, staged ones not.
    fn encode(&self, batch: &RecordBatch) -> FoamResult<Vec<Vec<u8>>> {
        if batch.num_columns() != self.types.len() {
            return Err(FoamError::internal(format!("rows of {} columns matched against rows of {}", batch.num_columns(), self.types.len())));
        }
        let columns: Vec<ArrayRef> = batch
            .columns()
            .iter()
            .zip(&self.types)
            .map(|(array, data_type)| if array.data_type() == data_type { Ok(array.clone()) } else { arrow::compute::cast(array, data_type) })
            .collect::<Result<_, _>>()
            .map_err(internal)?;
        let rows = self.converter.convert_columns(&columns).map_err(internal)?;
        Ok(rows.iter().map(|row| row.as_ref().to_vec()).collect())
    }
}

fn internal(error: impl std::fmt::Display) -> FoamError {
    FoamError::internal(format!("matching rows: {error}"))
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
}
