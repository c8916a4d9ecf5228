//! FoamDB's differential SQL fuzzer.
//!
//! Random schemas with random layouts (`schema.rs`) and random queries
//! (`query.rs`), drawn from a recorded stream of choices (`choices.rs`), run
//! on a FoamDB cluster and on single-process DataFusion over the same rows
//! (`engines.rs`); answers are compared as multisets (`compare.rs`), and
//! every difference is reduced to a small case that can be kept as a
//! sqllogictest regression (`run.rs`). `foam bench fuzz` runs it long; the
//! foam-cli `fuzz` test runs a fixed list of seeds in CI. `history.rs`
//! checks a recorded history of concurrent transactions for what snapshot
//! isolation forbids (the foam-cli `snapshots` test records one).

pub mod choices;
pub mod compare;
pub mod engines;
pub mod history;
pub mod postgres_form;
pub mod query;
pub mod reference;
pub mod run;
pub mod schema;
pub mod writes;

pub use run::{Failure, FuzzConfig, Kind, Report, case_as_slt, run, seeds_from};
pub use writes::WriteTally;
