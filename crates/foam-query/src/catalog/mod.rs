//! The cluster catalog as DataFusion sees it: tables, views, system tables,
//! the statistics the planner estimates with, and the functions that tell a
//! client what it talks to.

pub mod functions;
pub mod pg_columns;
pub mod pg_defaults;
pub mod pg_functions;
pub mod pg_keys;
pub mod pg_stat_activity;
pub mod pg_missing;
pub mod pg_owners;
pub mod pg_sequences;
pub mod pg_sizes;
pub mod provider;
pub mod statistics;
pub mod system_tables;
pub mod table;

use std::sync::Arc;

/// What a catalog function reads through (the node, pg_catalog), equal to
/// every other: such functions are told apart by what they compute, so
/// they derive equality and hashing with this beside their other fields.
#[derive(Debug)]
pub struct Handle<T: ?Sized>(pub Arc<T>);

impl<T: ?Sized> PartialEq for Handle<T> {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl<T: ?Sized> Eq for Handle<T> {}

impl<T: ?Sized> std::hash::Hash for Handle<T> {
    fn hash<H: std::hash::Hasher>(&self, _: &mut H) {}
}

impl<T: ?Sized> std::ops::Deref for Handle<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}
