//! The PostgreSQL wire protocol front end of a node: every connection gets its
//! own `FoamSession`; statements arrive over the simple protocol (psql) or the
//! extended protocol (drivers: Parse/Bind/Describe/Execute) and results go back
//! as PostgreSQL rows, with errors carrying FoamDB's SQLSTATEs. A connection
//! first proves its password (`startup.rs`).
//!
//! ```text
//!  client ─TCP─▶ pgwire process_socket ─▶ FoamPgHandler ─▶ FoamSession (foam-query)
//!                                   rows ◀─ arrow-pg encoding ◀─ text_values.rs ◀─ Arrow batches
//!                             COPY TO STDOUT ◀─ copy_out.rs ◀─ Arrow batches
//! ```
//! What the connections do is counted and listed in `activity.rs`, for the
//! node's `/metrics` and console.

mod activity;
mod copy_out;
mod handler;
mod startup;
mod text_values;

pub use activity::SqlActivity;
pub use handler::serve;
pub use startup::{ClientAuth, DATABASE, Tls};
