//! Unique keys (PRIMARY KEY, UNIQUE) checked where the rows live: a
//! partition's copy checks a transaction's rows for it when the transaction
//! prepares, against the rows committed there and those of every other
//! transaction prepared there and not yet decided. The engine checks under
//! its WAL lock, which commit also holds, so two transactions cannot both
//! pass with one key. A key includes the table's distribution key (the
//! catalog requires it), so equal keys always meet in one partition, and
//! every copy of a partition holds the same rows and reaches the same verdict.
//!
//! As in SQL, a key with a NULL in it equals no other key.

use crate::error::{StorageError, StorageResult};
use std::collections::HashSet;

use arrow::array::{Array, ArrayRef};
use arrow::datatypes::DataType;
use arrow::record_batch::RecordBatch;
use arrow::row::{RowConverter, SortField};

/// One unique key of a table: its constraint's name and its columns, by
/// position in the table and by name (for the message).
#[derive(Debug, Clone, PartialEq)]
pub struct UniqueKey {
    pub name: String,
    pub columns: Vec<usize>,
    pub column_names: Vec<String>,
}

/// The columns `keys` use, ascending, and the keys renumbered to those
/// columns' places among them: a check reads only these columns.
pub fn projection(keys: &[UniqueKey]) -> (Vec<usize>, Vec<UniqueKey>) {
    let mut columns: Vec<usize> = keys.iter().flat_map(|k| k.columns.iter().copied()).collect();
    columns.sort_unstable();
    columns.dedup();
    let renumbered = keys
        .iter()
        .map(|k| UniqueKey { columns: k.columns.iter().map(|c| columns.binary_search(c).expect("a key's own column")).collect(), ..k.clone() })
        .collect();
    (columns, renumbered)
}

/// Checks `new` (one transaction's rows for one partition, or the columns
/// [`projection`] chose of them) against
/// `present` (the partition's committed rows and other prepared
/// transactions' rows there): no two rows of `new`, and no row of `new` and
/// one of `present`, may agree on any of `keys`.
pub fn check(keys: &[UniqueKey], new: &[RecordBatch], present: &[RecordBatch]) -> StorageResult<()> {
    for key in keys {
        let Some(schema) = new.first().map(|b| b.schema()) else { return Ok(()) };
        let types: Vec<DataType> = key.columns.iter().map(|c| schema.field(*c).data_type().clone()).collect();
        let fields = types.iter().map(|t| SortField::new(t.clone())).collect();
        let converter = RowConverter::new(fields).map_err(|e| StorageError::internal(format!("unique key {}: {e}", key.name)))?;
        let mut seen: HashSet<Vec<u8>> = HashSet::new();
        for batch in present {
            for (row, _) in key_rows(&converter, &types, key, batch)? {
                seen.insert(row);
            }
        }
        for batch in new {
            for (row, index) in key_rows(&converter, &types, key, batch)? {
                if !seen.insert(row) {
                    return Err(violation(key, batch, index));
                }
            }
        }
    }
    Ok(())
}

/// Checks rows already stored for a key being added: the first key held by
/// two of them fails with 23505, as PostgreSQL's CREATE UNIQUE INDEX does.
pub fn check_stored(key: &UniqueKey, rows: &[RecordBatch]) -> StorageResult<()> {
    match check(std::slice::from_ref(key), rows, &[]) {
        Err(StorageError::UniqueViolation { constraint, key }) => Err(StorageError::DuplicateStoredKey { constraint, key }),
        other => other,
    }
}

/// The encoded key of each row of `batch` whose key has no NULL, with the row's index.
fn key_rows(converter: &RowConverter, types: &[DataType], key: &UniqueKey, batch: &RecordBatch) -> StorageResult<Vec<(Vec<u8>, usize)>> {
    // Rows read back from a segment may hold text as views, staged ones not:
    // each column is compared as the converter's type.
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(key.columns.len());
    for (column, data_type) in key.columns.iter().zip(types) {
        let array = batch.column(*column);
        columns.push(if array.data_type() == data_type {
            array.clone()
        } else {
            arrow::compute::cast(array, data_type).map_err(|e| StorageError::internal(format!("unique key {}: {e}", key.name)))?
        });
    }
    let rows = converter.convert_columns(&columns).map_err(|e| StorageError::internal(format!("unique key {}: {e}", key.name)))?;
    Ok((0..batch.num_rows())
        .filter(|i| columns.iter().all(|c| !c.is_null(*i)))
        .map(|i| (rows.row(i).as_ref().to_vec(), i))
        .collect())
}

/// PostgreSQL's words for a duplicate key.
fn violation(key: &UniqueKey, batch: &RecordBatch, row: usize) -> StorageError {
    let values: Vec<String> = key
        .columns
        .iter()
        .map(|c| {
            // Timestamps as PostgreSQL prints them (a timestamptz in UTC).
            let options = arrow::util::display::FormatOptions::new()
                .with_timestamp_format(Some("%Y-%m-%d %H:%M:%S%.f"))
                .with_timestamp_tz_format(Some("%Y-%m-%d %H:%M:%S%.f%:::z"));
            arrow::util::display::ArrayFormatter::try_new(batch.column(*c).as_ref(), &options).map_or_else(|_| "?".into(), |f| f.value(row).to_string())
        })
        .collect();
    StorageError::UniqueViolation { constraint: key.name.clone(), key: format!("({})=({})", key.column_names.join(", "), values.join(", ")) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_rows_with_a_repeated_key_name_it() {
        let key = UniqueKey { name: "t_pkey".into(), columns: vec![0], column_names: vec!["k".into()] };
        let rows = [batch(&[(Some(1), None), (None, None), (None, None)]), batch(&[(Some(2), None)])];
        check_stored(&key, &rows).expect("NULLs repeat, keys do not");
        let error = check_stored(&key, &[rows[0].clone(), batch(&[(Some(2), None), (Some(1), None)])]).unwrap_err();
        assert_eq!(error.sqlstate(), "23505");
        assert_eq!(error.to_string(), "could not create unique index \"t_pkey\": Key (k)=(1) is duplicated");
    }
    use arrow::array::{Int32Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};
    use std::sync::Arc;

    fn batch(rows: &[(Option<i32>, Option<&str>)]) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int32, true), Field::new("s", DataType::Utf8, true)]));
        let k: Int32Array = rows.iter().map(|r| r.0).collect();
        let s: StringArray = rows.iter().map(|r| r.1).collect();
        RecordBatch::try_new(schema, vec![Arc::new(k), Arc::new(s)]).unwrap()
    }

    fn key(columns: &[usize]) -> UniqueKey {
        let names = ["k", "s"];
        UniqueKey { name: "t_key".into(), columns: columns.to_vec(), column_names: columns.iter().map(|c| names[*c].to_string()).collect() }
    }

    #[test]
    fn a_check_reads_only_key_columns_renumbered() {
        let keys = [UniqueKey { name: "a".into(), columns: vec![2], column_names: vec!["c".into()] }, key(&[0, 1]), UniqueKey {
            name: "b".into(),
            columns: vec![2, 0],
            column_names: vec!["c".into(), "k".into()],
        }];
        let (columns, renumbered) = projection(&keys);
        assert_eq!(columns, [0, 1, 2]);
        assert_eq!(renumbered.iter().map(|k| k.columns.clone()).collect::<Vec<_>>(), [vec![2], vec![0, 1], vec![2, 0]]);
        let (columns, renumbered) = projection(&keys[..1]);
        assert_eq!((columns, renumbered[0].columns.clone()), (vec![2], vec![0]));
    }

    #[test]
    fn duplicates_within_and_against_present_rows_are_refused_nulls_never_equal() {
        let present = [batch(&[(Some(1), Some("a")), (Some(2), None)])];
        assert!(check(&[key(&[0])], &[batch(&[(Some(3), Some("c")), (Some(4), Some("d"))])], &present).is_ok());
        let error = check(&[key(&[0])], &[batch(&[(Some(3), None), (Some(2), None)])], &present).unwrap_err();
        assert_eq!(error.sqlstate(), "23505");
        assert_eq!(error.to_string(), "duplicate key value violates unique constraint \"t_key\": Key (k)=(2) already exists");
        let within = check(&[key(&[0])], &[batch(&[(Some(5), None)]), batch(&[(Some(5), None)])], &[]).unwrap_err();
        assert_eq!(within.sqlstate(), "23505");
        // NULLs: never equal, in a one-column key or part of a composite one.
        assert!(check(&[key(&[1])], &[batch(&[(Some(7), None), (Some(8), None)])], &present).is_ok());
        assert!(check(&[key(&[0, 1])], &[batch(&[(Some(2), None)])], &present).is_ok());
        assert!(check(&[key(&[0, 1])], &[batch(&[(Some(1), Some("b"))])], &present).is_ok(), "(1, b) is not (1, a)");
        assert_eq!(check(&[key(&[0, 1])], &[batch(&[(Some(1), Some("a"))])], &present).unwrap_err().sqlstate(), "23505");
    }
}
