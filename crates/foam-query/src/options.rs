//! FoamDB's planner settings: the `foam.*` options a session sets with
//! `SET foam.<name> = value`, read by the optimizer rules they switch.

use foam_common::limits::SCAN_ROWS_PER_TASK;

datafusion::common::extensions_options! {
    /// FoamDB's planner settings, set with `SET foam.<name> = value`.
    pub struct FoamOptions {
        /// Estimated rows per task before a scan is spread over more of its
        /// owner nodes (see `SCAN_ROWS_PER_TASK`).
        pub scan_rows_per_task: u64, default = SCAN_ROWS_PER_TASK
        /// Whether a scan whose hash partitioning nothing relies on reads its
        /// partitions in `target_partitions` streams per task (`regroup.rs`).
        pub regroup_scans: bool, default = true
        /// Whether a join with a filtered replicated table moves down to the
        /// input its key comes from (`early_replica_join.rs`).
        pub early_replica_joins: bool, default = true
        /// Whether an aggregate of one side of an inner join tree runs
        /// before the join, grouped by the join keys (`eager_aggregate.rs`).
        pub eager_aggregates: bool, default = true
        /// Whether a semi or anti join moves below inner joins with whole
        /// tables, to the input its keys come from (`early_semi_join.rs`).
        pub early_semi_joins: bool, default = true
        /// Whether an aggregate joined on its group key aggregates only the
        /// keys the other side's filtered table has (`group_key_filter.rs`).
        pub group_key_filters: bool, default = true
        /// Whether `count(R.x)` grouped by the other side of a join counts R
        /// per join key before the join (`eager_count.rs`).
        pub eager_counts: bool, default = true
        /// Whether a `LIKE` whose only wildcard is `%` runs as a substring
        /// search instead of a regex (`like.rs`).
        pub fast_like: bool, default = true
        /// Whether a plan the locality rules made that fails DataFusion's
        /// plan check gives way to DataFusion's own (`checked_rules.rs`);
        /// off, the statement fails with the check's error (the fuzzer
        /// turns it off to see such plans).
        pub plan_check_fallback: bool, default = true
    }
}

impl datafusion::config::ConfigExtension for FoamOptions {
    const PREFIX: &'static str = "foam";
}
