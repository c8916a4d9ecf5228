//! TPC-H for FoamDB: the eight tables laid out for a shared-nothing cluster,
//! a parallel loader that generates them with `tpchgen-arrow`, encodes them
//! into segments and streams each, while it is encoded, straight to the nodes
//! that hold its partition, the 22 queries, and an
//! independent single-process DataFusion computation to check answers against,
//! answer sets from outside DataFusion (DuckDB's, the TPC-H kit's; `answers.rs`),
//! and the peer engines the benchmark report compares with (`peers.rs`).
//!
//! ```text
//!  tpchgen part 0..k (threads) ─▶ split by partition ─▶ segment per partition ─StageSegment DoPut, in pieces─▶ each replica
//!                                                          └─ CommitTransaction RPC ─▶ one node runs 2PC
//! ```

pub mod answers;
pub mod load;
pub mod peers;
pub mod queries;
pub mod reference;
pub mod schema;
