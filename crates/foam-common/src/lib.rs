//! Shared vocabulary of every FoamDB tier: identifiers, named limits, the typed
//! error that maps to PostgreSQL SQLSTATEs, and the partition hash that decides
//! which node owns a row. Everything above this crate agrees on these, so a row
//! hashed by the loader lands where the query planner looks for it.

pub mod error;
pub mod failpoint;
pub mod fs;
pub mod hash;
pub mod ids;
pub mod limits;
pub mod sqlstate;

pub use error::{FoamError, FoamResult};
pub use sqlstate::SqlState;
pub use ids::{NodeId, PartitionId, TableId, TxnId};
