//! The cluster catalog as DataFusion sees it: tables, views, system tables,
//! and the statistics the planner estimates with.

pub mod provider;
pub mod statistics;
pub mod system_tables;
pub mod table;
