//! Identifiers that cross node boundaries. They are plain integers so they
//! serialize the same way in the catalog file, the WAL and RPC messages.

/// A node's permanent identity, assigned by the catalog when the node first joins
/// and kept in the node's data directory across restarts.
pub type NodeId = u32;

/// A table's identity. Never reused, so files of a dropped table can never be
/// mistaken for a new table of the same name.
pub type TableId = u64;

/// The index of a hash partition within its table (`0..partition_count`).
/// A replicated table has the single partition 0, stored on every node.
pub type PartitionId = u32;

/// A distributed write transaction: one SQL statement's writes on every node.
/// Globally unique (random 128 bits) so participants never confuse two statements.
pub type TxnId = u128;
