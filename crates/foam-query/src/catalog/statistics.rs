//! Table statistics for DataFusion's planner, read from the Parquet footers of
//! the segments this node stores and from its memtables' rows.
//!
//! ```text
//!   segment footers (cached per file) and memtables of this node's partitions
//!        │ merged: rows, bytes, per column min / max / nulls
//!        ▼ extrapolated to the partitions the scan reads
//!   FoamScanExec statistics ─▶ JoinSelection (smaller side builds), join order,
//!                              filter selectivity, collect-vs-partitioned joins
//! ```
//! DataFusion chooses hash-join build sides and join order from its inputs'
//! statistics. Over plain Parquet files it reads them from the footers; without
//! them it kept, for instance, TPC-H Q18's six million joined rows as the build
//! side of the `IN (subquery)` semi join instead of the subquery's few dozen
//! keys. Hash partitions hold alike shares of a table, so this node's
//! partitions stand for the rest without asking peers. Every figure is
//! `Inexact`: statistics guide plan choices and never answer a query
//! (DataFusion answers `count(*)` or `max(x)` from statistics only when exact).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use datafusion::common::stats::Precision;
use datafusion::common::{ColumnStatistics, Statistics};
use datafusion::datasource::physical_plan::parquet::metadata::DFParquetMetadata;
use datafusion::functions_aggregate::min_max::{MaxAccumulator, MinAccumulator};
use datafusion::logical_expr::Accumulator;
use datafusion::physical_plan::common::compute_record_batch_statistics;
use foam_common::{PartitionId, TableId};
use foam_storage::StorageEngine;

/// Segment files whose statistics are kept; past this the cache starts over
/// (segments are read again on the next plan, no answer changes).
const SEGMENT_STATISTICS_CACHED_MAX: usize = 65_536;

/// Each segment file's statistics, by path (a segment never changes once
/// written, so an entry never goes stale; a deleted file's entry is unused),
/// and each memtable's, computed again when its row count changed.
#[derive(Default)]
pub struct SegmentStatistics {
    cache: Mutex<HashMap<PathBuf, Arc<Statistics>>>,
    memtables: Mutex<HashMap<(TableId, PartitionId), (usize, Arc<Statistics>)>>,
}

impl SegmentStatistics {
    fn of_segment(&self, path: &Path, schema: &SchemaRef) -> Option<Arc<Statistics>> {
        if let Some(found) = self.cache.lock().unwrap_or_else(|e| e.into_inner()).get(path) {
            return Some(found.clone());
        }
        // A footer that cannot be read gives no statistics; the scan itself
        // reports the damage (after checking the file's checksum).
        let metadata = foam_storage::segment::read_metadata(path).ok()?;
        let statistics = Arc::new(DFParquetMetadata::statistics_from_parquet_metadata(&metadata, schema).ok()?);
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if cache.len() >= SEGMENT_STATISTICS_CACHED_MAX {
            cache.clear();
        }
        cache.insert(path.to_path_buf(), statistics.clone());
        Some(statistics)
    }

    /// Statistics of the rows of a partition not yet flushed to a segment (at
    /// most `MEMTABLE_FLUSH_ROWS`, so small tables have statistics too).
    fn of_memtable(&self, key: (TableId, PartitionId), batches: &[RecordBatch], schema: &SchemaRef) -> Option<Arc<Statistics>> {
        let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
        if rows == 0 {
            return None;
        }
        if let Some((seen, statistics)) = self.memtables.lock().unwrap_or_else(|e| e.into_inner()).get(&key)
            && *seen == rows
        {
            return Some(statistics.clone());
        }
        let mut statistics = compute_record_batch_statistics(&[batches.to_vec()], schema, None);
        // No size: allocated capacity depends on how the rows arrived (a
        // batch decoded from one message shares its buffers), which made
        // plans differ from run to run; row counts compare alike.
        statistics.total_byte_size = Precision::Absent;
        for (index, field) in schema.fields().iter().enumerate() {
            let mut min = MinAccumulator::try_new(field.data_type()).ok()?;
            let mut max = MaxAccumulator::try_new(field.data_type()).ok()?;
            for batch in batches {
                let column = [batch.column(index).clone()];
                min.update_batch(&column).ok()?;
                max.update_batch(&column).ok()?;
            }
            let column = &mut statistics.column_statistics[index];
            column.min_value = Precision::Exact(min.evaluate().ok()?);
            column.max_value = Precision::Exact(max.evaluate().ok()?);
        }
        let statistics = Arc::new(statistics);
        self.memtables.lock().unwrap_or_else(|e| e.into_inner()).insert(key, (rows, statistics.clone()));
        Some(statistics)
    }

    /// Statistics of a scan that reads `rows` rows of the table (estimated by
    /// the caller), from the segments and memtables of `local` (this node's
    /// partitions of it): `None` when this node stores none of its rows.
    pub fn table(
        &self,
        storage: &StorageEngine,
        table_id: TableId,
        local: &[PartitionId],
        schema: &SchemaRef,
        rows: u64,
    ) -> Option<Statistics> {
        let mut parts = Vec::new();
        for partition in local {
            let snapshot = storage.snapshot(table_id, *partition).ok()?;
            for segment in &snapshot.segments {
                parts.push(self.of_segment(&segment.path, schema)?);
            }
            parts.extend(self.of_memtable((table_id, *partition), &snapshot.memtable, schema));
        }
        let merged = Statistics::try_merge_iter(parts.iter().map(|s| s.as_ref()), schema).ok()?;
        let sampled = *merged.num_rows.get_value()?;
        if sampled == 0 {
            return None;
        }
        Some(scaled(merged, rows as f64 / sampled as f64))
    }
}

/// `statistics` of a sample stretched to `factor` times its rows: counts and
/// sizes scale, min and max stay, and everything becomes an estimate.
pub fn scaled(statistics: Statistics, factor: f64) -> Statistics {
    let scale = |n: &Precision<usize>| match n.get_value() {
        Some(n) => Precision::Inexact((*n as f64 * factor).round() as usize),
        None => Precision::Absent,
    };
    Statistics {
        num_rows: scale(&statistics.num_rows),
        total_byte_size: scale(&statistics.total_byte_size),
        column_statistics: statistics
            .column_statistics
            .into_iter()
            .map(|column| ColumnStatistics {
                null_count: scale(&column.null_count),
                byte_size: scale(&column.byte_size),
                min_value: column.min_value.to_inexact(),
                max_value: column.max_value.to_inexact(),
                sum_value: Precision::Absent,
                distinct_count: Precision::Absent,
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::common::ScalarValue;

    #[test]
    fn memtable_statistics_follow_new_rows() {
        use arrow::array::Int64Array;
        use arrow::datatypes::{DataType, Field, Schema};
        let schema: SchemaRef = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, true)]));
        let batch = |values: Vec<Option<i64>>| RecordBatch::try_new(schema.clone(), vec![Arc::new(Int64Array::from(values))]).unwrap();
        let cache = SegmentStatistics::default();
        let mut batches = vec![batch(vec![Some(5), None, Some(-3)])];
        let first = cache.of_memtable((1, 0), &batches, &schema).unwrap();
        assert_eq!(first.num_rows, Precision::Exact(3));
        assert_eq!(first.column_statistics[0].null_count, Precision::Exact(1));
        assert_eq!(first.column_statistics[0].min_value, Precision::Exact(ScalarValue::Int64(Some(-3))));
        assert_eq!(first.column_statistics[0].max_value, Precision::Exact(ScalarValue::Int64(Some(5))));
        batches.push(batch(vec![Some(40)]));
        let grown = cache.of_memtable((1, 0), &batches, &schema).unwrap();
        assert_eq!(grown.num_rows, Precision::Exact(4));
        assert_eq!(grown.column_statistics[0].max_value, Precision::Exact(ScalarValue::Int64(Some(40))));
        assert!(cache.of_memtable((1, 0), &[], &schema).is_none(), "an empty memtable has no statistics");
    }

    #[test]
    fn a_sample_scales_to_an_estimate_that_no_query_can_take_as_exact() {
        let statistics = Statistics {
            num_rows: Precision::Exact(100),
            total_byte_size: Precision::Exact(800),
            column_statistics: vec![ColumnStatistics {
                null_count: Precision::Exact(10),
                byte_size: Precision::Exact(800),
                min_value: Precision::Exact(ScalarValue::Int64(Some(1))),
                max_value: Precision::Exact(ScalarValue::Int64(Some(400))),
                sum_value: Precision::Exact(ScalarValue::Int64(Some(5000))),
                distinct_count: Precision::Exact(100),
            }],
        };
        let four = scaled(statistics, 4.0);
        assert_eq!(four.num_rows, Precision::Inexact(400));
        assert_eq!(four.total_byte_size, Precision::Inexact(3200));
        let column = &four.column_statistics[0];
        assert_eq!(column.null_count, Precision::Inexact(40));
        assert_eq!(column.min_value, Precision::Inexact(ScalarValue::Int64(Some(1))));
        assert_eq!(column.max_value, Precision::Inexact(ScalarValue::Int64(Some(400))));
        // A sample's sum and distinct count say nothing exact about the whole.
        assert_eq!(column.sum_value, Precision::Absent);
        assert_eq!(column.distinct_count, Precision::Absent);
    }
}
