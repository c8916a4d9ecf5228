//! Arrow Flight SQL on a port of its own: clients that want columns (ADBC,
//! DBeaver's Flight SQL driver, pandas and polars through ADBC) get a
//! query's Arrow record batches as the engine made them, with no
//! conversion to PostgreSQL rows and back.
//!
//! ```text
//!  client ─gRPC (TLS or plain)─▶ server.rs ─▶ service.rs ─▶ FoamSession (foam-query)
//!   handshake (user:password) ─▶ sessions.rs: bearer token ─▶ one FoamSession per token
//!        DoGet ◀─ FlightData ◀─ Arrow batches, as DataFusion made them
//! ```
//! Each session is a `FoamSession`, so statements, privileges and
//! transaction blocks behave as on the SQL port. Errors carry their
//! SQLSTATE (`status.rs`); bound parameters arrive as Arrow (`params.rs`).

mod params;
mod server;
mod service;
mod sessions;
mod status;

pub use server::{FlightSqlConfig, serve};
