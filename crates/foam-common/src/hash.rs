//! The partition hash: which partition of a table a row belongs to.
//!
//! Every writer (INSERT, COPY, the TPC-H loader) and every reader (partition
//! pruning, co-located joins) must agree on it bit for bit, across processes and
//! releases, so it is FoamDB's own and not DataFusion's (whose hash seeds are an
//! implementation detail). Values are first brought to a canonical form, so an
//! `INT` key and a `BIGINT` key holding the same number land in the same
//! partition, then hashed with XXH3, which spreads consecutive small integers
//! (the most common keys in real data) evenly.

use arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, Decimal128Array, Float32Array, Float64Array,
};
use arrow::datatypes::{
    DataType, Date32Type, Date64Type, Int8Type, Int16Type, Int32Type, Int64Type, TimeUnit,
    TimestampMicrosecondType, TimestampMillisecondType, TimestampNanosecondType,
    TimestampSecondType, UInt8Type, UInt16Type, UInt32Type, UInt64Type,
};
use datafusion_common::ScalarValue;
use strength_reduce::StrengthReducedU64;
use xxhash_rust::xxh3::xxh3_64_with_seed;

use crate::error::{FoamError, FoamResult};
use crate::ids::PartitionId;

/// Seed of the partition hash. Changing it re-partitions every table: never do.
const PARTITION_HASH_SEED: u64 = 0x466f_616d_4442_0001;

/// Hash of SQL NULL; NULL keys all go to one partition, as in other databases.
const NULL_HASH: u64 = 0x9e37_79b9_7f4a_7c15;

/// Computes one hash per row over the distribution columns, in column order.
pub fn hash_rows(columns: &[ArrayRef]) -> FoamResult<Vec<u64>> {
    let rows = columns.first().map(|c| c.len()).unwrap_or(0);
    let mut hashes = vec![0u64; rows];
    for (position, column) in columns.iter().enumerate() {
        hash_column(column.as_ref(), position == 0, &mut hashes)?;
    }
    Ok(hashes)
}

/// Maps a row hash to a partition index.
pub fn partition_of_hash(hash: u64, partition_count: u32) -> PartitionId {
    assert!(partition_count > 0, "a table always has at least one partition");
    (hash % partition_count as u64) as PartitionId
}

/// [`partition_of_hash`] for many rows of one table: the division by the
/// partition count is turned into multiplications once (a 64-bit `div` per
/// row was the largest single cost of routing a shuffled join side).
#[derive(Debug, Clone, Copy)]
pub struct PartitionOfHash(StrengthReducedU64);

impl PartitionOfHash {
    pub fn new(partition_count: u32) -> Self {
        assert!(partition_count > 0, "a table always has at least one partition");
        PartitionOfHash(StrengthReducedU64::new(partition_count as u64))
    }

    pub fn partition(&self, hash: u64) -> PartitionId {
        (hash % self.0) as PartitionId
    }
}

/// The partition holding rows whose distribution columns equal `values`.
/// Each value must already have the column's type (cast before calling).
pub fn partition_of_values(values: &[ScalarValue], partition_count: u32) -> FoamResult<PartitionId> {
    let arrays = values
        .iter()
        .map(|value| value.to_array_of_size(1).map_err(FoamError::from))
        .collect::<FoamResult<Vec<_>>>()?;
    let hashes = hash_rows(&arrays)?;
    Ok(partition_of_hash(hashes[0], partition_count))
}

/// Combines the hash of one column into the running row hashes.
fn hash_column(column: &dyn Array, first: bool, hashes: &mut [u64]) -> FoamResult<()> {
    let combine = |hashes: &mut [u64], row: usize, value_hash: u64| {
        hashes[row] = if first {
            value_hash
        } else {
            // Order-dependent mix so (a, b) and (b, a) hash differently.
            xxh3_64_with_seed(&value_hash.to_le_bytes(), hashes[row])
        };
    };
    macro_rules! integers {
        ($arrow_type:ty) => {{
            let array = column.as_primitive::<$arrow_type>();
            for row in 0..array.len() {
                let value_hash = if array.is_null(row) {
                    NULL_HASH
                } else {
                    hash_i64(array.value(row) as i64)
                };
                combine(hashes, row, value_hash);
            }
        }};
    }
    match column.data_type() {
        DataType::Int8 => integers!(Int8Type),
        DataType::Int16 => integers!(Int16Type),
        DataType::Int32 => integers!(Int32Type),
        DataType::Int64 => integers!(Int64Type),
        DataType::UInt8 => integers!(UInt8Type),
        DataType::UInt16 => integers!(UInt16Type),
        DataType::UInt32 => integers!(UInt32Type),
        DataType::UInt64 => integers!(UInt64Type),
        DataType::Date32 => integers!(Date32Type),
        DataType::Date64 => integers!(Date64Type),
        DataType::Timestamp(TimeUnit::Second, _) => integers!(TimestampSecondType),
        DataType::Timestamp(TimeUnit::Millisecond, _) => integers!(TimestampMillisecondType),
        DataType::Timestamp(TimeUnit::Microsecond, _) => integers!(TimestampMicrosecondType),
        DataType::Timestamp(TimeUnit::Nanosecond, _) => integers!(TimestampNanosecondType),
        DataType::Boolean => {
            let array = column.as_any().downcast_ref::<BooleanArray>().ok_or_else(|| type_bug(column))?;
            for row in 0..array.len() {
                let value_hash = if array.is_null(row) { NULL_HASH } else { hash_i64(array.value(row) as i64) };
                combine(hashes, row, value_hash);
            }
        }
        DataType::Float32 => {
            let array = column.as_any().downcast_ref::<Float32Array>().ok_or_else(|| type_bug(column))?;
            for row in 0..array.len() {
                let value_hash = if array.is_null(row) { NULL_HASH } else { hash_f64(array.value(row) as f64) };
                combine(hashes, row, value_hash);
            }
        }
        DataType::Float64 => {
            let array = column.as_any().downcast_ref::<Float64Array>().ok_or_else(|| type_bug(column))?;
            for row in 0..array.len() {
                let value_hash = if array.is_null(row) { NULL_HASH } else { hash_f64(array.value(row)) };
                combine(hashes, row, value_hash);
            }
        }
        DataType::Decimal128(_, _) => {
            let array = column.as_any().downcast_ref::<Decimal128Array>().ok_or_else(|| type_bug(column))?;
            for row in 0..array.len() {
                let value_hash = if array.is_null(row) {
                    NULL_HASH
                } else {
                    xxh3_64_with_seed(&array.value(row).to_le_bytes(), PARTITION_HASH_SEED)
                };
                combine(hashes, row, value_hash);
            }
        }
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => {
            let strings = StringColumn::new(column)?;
            for row in 0..column.len() {
                let value_hash = match strings.value(row) {
                    None => NULL_HASH,
                    Some(text) => xxh3_64_with_seed(text.as_bytes(), PARTITION_HASH_SEED),
                };
                combine(hashes, row, value_hash);
            }
        }
        other => {
            return Err(FoamError::InvalidTableDefinition {
                message: format!("a column of type {other} cannot be a distribution key"),
            });
        }
    }
    Ok(())
}

/// Whether a column of this Arrow type may be used as a distribution key.
pub fn is_hashable(data_type: &DataType) -> bool {
    matches!(
        data_type,
        DataType::Int8
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::UInt8
            | DataType::UInt16
            | DataType::UInt32
            | DataType::UInt64
            | DataType::Date32
            | DataType::Date64
            | DataType::Timestamp(_, _)
            | DataType::Boolean
            | DataType::Float32
            | DataType::Float64
            | DataType::Decimal128(_, _)
            | DataType::Utf8
            | DataType::LargeUtf8
            | DataType::Utf8View
    )
}

fn hash_i64(value: i64) -> u64 {
    xxh3_64_with_seed(&value.to_le_bytes(), PARTITION_HASH_SEED)
}

fn hash_f64(value: f64) -> u64 {
    // -0.0 equals 0.0 and all NaNs are one value in SQL comparisons.
    let canonical = if value == 0.0 { 0.0 } else if value.is_nan() { f64::NAN } else { value };
    xxh3_64_with_seed(&canonical.to_bits().to_le_bytes(), PARTITION_HASH_SEED)
}

fn type_bug(column: &dyn Array) -> FoamError {
    FoamError::internal(format!("array does not match its data type {}", column.data_type()))
}

/// Uniform access to the three Arrow string layouts.
enum StringColumn<'a> {
    Small(&'a arrow::array::StringArray),
    Large(&'a arrow::array::LargeStringArray),
    View(&'a arrow::array::StringViewArray),
}

impl<'a> StringColumn<'a> {
    fn new(column: &'a dyn Array) -> FoamResult<Self> {
        let any = column.as_any();
        if let Some(array) = any.downcast_ref() {
            return Ok(StringColumn::Small(array));
        }
        if let Some(array) = any.downcast_ref() {
            return Ok(StringColumn::Large(array));
        }
        if let Some(array) = any.downcast_ref() {
            return Ok(StringColumn::View(array));
        }
        Err(type_bug(column))
    }

    fn value(&self, row: usize) -> Option<&'a str> {
        match self {
            StringColumn::Small(array) => (!array.is_null(row)).then(|| array.value(row)),
            StringColumn::Large(array) => (!array.is_null(row)).then(|| array.value(row)),
            StringColumn::View(array) => (!array.is_null(row)).then(|| array.value(row)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::PARTITIONS_PER_TABLE_MAX;
    use arrow::array::{Int32Array, Int64Array, StringArray};
    use std::sync::Arc;

    fn partitions_of(column: ArrayRef, partitions: u32) -> Vec<u32> {
        hash_rows(&[column]).unwrap().into_iter().map(|h| partition_of_hash(h, partitions)).collect()
    }

    #[test]
    fn partition_of_hash_for_many_rows_agrees_with_the_division() {
        let hashes = hash_rows(&[Arc::new(Int64Array::from_iter_values(-5_000..5_000)) as ArrayRef]).unwrap();
        let extremes = [0u64, 1, u32::MAX as u64, u32::MAX as u64 + 1, u64::MAX - 1, u64::MAX];
        for partitions in [1u32, 2, 3, 4, 7, 12, 16, 17, 64, 1000, PARTITIONS_PER_TABLE_MAX, u32::MAX] {
            let of = PartitionOfHash::new(partitions);
            for hash in hashes.iter().chain(extremes.iter()) {
                assert_eq!(of.partition(*hash), partition_of_hash(*hash, partitions), "hash {hash} over {partitions} partitions");
            }
        }
    }

    #[test]
    fn consecutive_integers_spread_evenly() {
        for partitions in [3u32, 4, 12, 16, 64] {
            let keys: ArrayRef = Arc::new(Int64Array::from_iter_values(1..=120_000));
            let mut counts = vec![0usize; partitions as usize];
            for p in partitions_of(keys, partitions) {
                counts[p as usize] += 1;
            }
            // A uniform hash gives each partition about `average` keys with a
            // standard deviation of sqrt(average); six of those is a bound a good
            // hash meets and a clustering one (e.g. weak low bits) does not.
            let average = 120_000.0 / partitions as f64;
            let allowed = 6.0 * average.sqrt();
            for count in &counts {
                assert!((*count as f64 - average).abs() <= allowed, "{partitions} partitions: {counts:?}");
            }
        }
    }

    #[test]
    fn small_key_sets_touch_every_partition() {
        // Twelve keys 1..=12 over 12 partitions: consecutive keys must not pile up
        // in a few partitions (an identity hash would be perfect here; a weak one
        // like `key % n` of a multiplicative hash is not).
        let keys: ArrayRef = Arc::new(Int64Array::from_iter_values(1..=1200));
        let parts = partitions_of(keys, 12);
        let distinct: std::collections::BTreeSet<_> = parts.iter().collect();
        assert_eq!(distinct.len(), 12);
    }

    #[test]
    fn integer_widths_agree() {
        let narrow: ArrayRef = Arc::new(Int32Array::from(vec![1, 2, 300, -5]));
        let wide: ArrayRef = Arc::new(Int64Array::from(vec![1, 2, 300, -5]));
        assert_eq!(hash_rows(&[narrow]).unwrap(), hash_rows(&[wide]).unwrap());
    }

    #[test]
    fn text_types_agree() {
        // Text columns are Utf8View; rows stored before were Utf8. Rows and key
        // lookups of either kind must land in the same partitions.
        let texts = vec![Some("a"), None, Some("exactly12byt"), Some("longer than twelve bytes"), Some("")];
        let plain: ArrayRef = Arc::new(StringArray::from(texts.clone()));
        let views: ArrayRef = Arc::new(arrow::array::StringViewArray::from(texts.clone()));
        let large: ArrayRef = Arc::new(arrow::array::LargeStringArray::from(texts));
        let by_plain = hash_rows(&[plain]).unwrap();
        assert_eq!(by_plain, hash_rows(&[views]).unwrap());
        assert_eq!(by_plain, hash_rows(&[large]).unwrap());
        let by_scalar = partition_of_values(&[ScalarValue::Utf8View(Some("longer than twelve bytes".into()))], 1000).unwrap();
        assert_eq!(by_scalar, partition_of_hash(by_plain[3], 1000));
    }

    #[test]
    fn scalar_and_array_agree() {
        let keys: ArrayRef = Arc::new(StringArray::from(vec!["alpha", "beta", "gamma"]));
        let by_array = partitions_of(keys, 7);
        for (row, key) in ["alpha", "beta", "gamma"].iter().enumerate() {
            let by_scalar = partition_of_values(&[ScalarValue::Utf8(Some(key.to_string()))], 7).unwrap();
            assert_eq!(by_scalar, by_array[row]);
        }
    }

    #[test]
    fn column_order_matters() {
        let a: ArrayRef = Arc::new(Int64Array::from(vec![1, 2]));
        let b: ArrayRef = Arc::new(Int64Array::from(vec![2, 1]));
        let ab = hash_rows(&[a.clone(), b.clone()]).unwrap();
        let ba = hash_rows(&[b, a]).unwrap();
        assert_ne!(ab[0], ba[0]);
        assert_eq!(ab[0], ba[1]);
    }

    #[test]
    fn hash_is_stable_across_releases() {
        // Pinned: a change here would silently re-partition stored data.
        let keys: ArrayRef = Arc::new(Int64Array::from(vec![1, 42]));
        let names: ArrayRef = Arc::new(StringArray::from(vec!["alpha", "beta"]));
        let partitions: Vec<u32> = hash_rows(&[keys.clone()]).unwrap().iter().map(|h| partition_of_hash(*h, 1000)).collect();
        let pairs: Vec<u32> = hash_rows(&[keys, names]).unwrap().iter().map(|h| partition_of_hash(*h, 1000)).collect();
        assert_eq!(partitions, vec![628, 990]);
        assert_eq!(pairs, vec![274, 539]);
    }
}
