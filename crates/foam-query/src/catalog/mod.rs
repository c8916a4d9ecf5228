//! The cluster catalog as DataFusion sees it: tables, views, system tables,
//! the statistics the planner estimates with, and the functions that tell a
//! client what it talks to.

pub mod functions;
pub mod pg_columns;
pub mod pg_functions;
pub mod pg_keys;
pub mod pg_stat_activity;
pub mod pg_missing;
pub mod pg_owners;
pub mod pg_sizes;
pub mod provider;
pub mod statistics;
pub mod system_tables;
pub mod table;
