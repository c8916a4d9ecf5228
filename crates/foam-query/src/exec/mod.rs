//! FoamDB's own execution plan nodes: the partition scan, the routed
//! shuffle and the join against each node's replica, and the adapter that
//! turns an operator's panic into the statement's error; and how FoamDB's
//! scalar functions take their arguments (`function_values.rs`).

pub mod age;
pub mod at_time_zone;
pub mod datetime_format;
pub mod datetime_input;
pub mod extract;
pub mod interval_functions;
pub mod interval_input;
pub mod format;
pub mod function_values;
pub mod interval_scale;
pub mod json_build;
pub mod panic_safe;
pub mod pg_text;
pub mod replica_join;
pub mod route;
pub mod scan;
pub mod series;
pub mod sequences;
pub mod timestamp_text;
pub mod width_bucket;
