//! A node's storage engine: the partitions this node owns, kept durable.
//!
//! ```text
//!  coordinator ──stage(batches)──▶ staging (memory, or a staged Parquet file when large)
//!              ──prepare────────▶ WAL: Prepare{inline rows | staged file}  (fsync)
//!              ──commit─────────▶ WAL: Commit (fsync) ──▶ memtable / segment joins the manifest
//!                                                         │ memtable past MEMTABLE_FLUSH_ROWS
//!                                                         ▼
//!                                  tables/<table>/<partition>/seg-*.parquet + manifest.json
//! ```
//! A deletion travels as the deleted rows, found by content on each copy
//! (`row_set.rs`); its commit records their positions in deletion vectors
//! (`deletions.rs`), which reads skip and compaction folds away.
//! Every commit carries a timestamp from the cluster clock, and a scan reads a
//! partition as of its statement's snapshot (`partition.rs`, `visibility.rs`):
//! its committed Parquet segments plus its memtable,
//! and a statement of a transaction block also the rows its earlier
//! statements staged (`OwnWrites`). On
//! restart the WAL is replayed on top of the manifests; a prepared transaction
//! with no outcome in the WAL is in doubt until its coordinator answers.

pub mod decisions;
pub mod deletions;
pub mod engine;
pub mod error;
pub mod ipc;
pub mod key_index;
pub mod partition;
pub mod row_set;
pub mod segment;
pub mod unique;
pub mod visibility;
pub mod wal;

pub use decisions::{DecisionLog, TxnOutcome};
pub use deletions::{DeletedRows, Deletions, RowHome};
pub use error::{StorageError, StorageResult};
pub use key_index::KeyProbe;
pub use engine::{OwnWrites, PartitionStats, SetAside, StatementNumber, StorageEngine, WRITES_FENCED};
pub use partition::{PartitionSnapshot, SegmentInfo};
pub use row_set::RowDigest;
