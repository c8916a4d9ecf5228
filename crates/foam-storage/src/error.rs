//! foam-storage's error type: what can go wrong with one node's partitions,
//! its WAL and its decision log. Callers match on the variants, never on the
//! text; at the storage boundary an error becomes a [`FoamError`] (and so a
//! PostgreSQL SQLSTATE) through `From`, with the same message.

use foam_common::{FoamError, SqlState};

pub type StorageResult<T> = Result<T, StorageError>;

#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// A file could not be read, written, synced or removed.
    #[error("I/O error on {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },

    /// A file does not hold what was written: a checksum, a length or an
    /// encoding does not match.
    #[error("data corrupted in {path}: {message}")]
    Corrupted { path: String, message: String },

    /// A value does not fit its column's type.
    #[error("invalid input value: {message}")]
    InvalidValue { message: String },

    /// A number outside its column's type's range (PostgreSQL's "integer
    /// out of range").
    #[error("value out of range: {message}")]
    OutOfRange { message: String },

    /// A request names what this node does not hold, or is larger than it
    /// accepts (a segment that is not listed, a loaded segment too long).
    #[error("invalid parameter: {message}")]
    InvalidRequest { message: String },

    /// The transaction is unknown here, or has already prepared or ended.
    #[error("transaction aborted: {message}")]
    TransactionEnded { message: String },

    /// One transaction's staged work passed a limit of this node.
    #[error("{message}")]
    LimitExceeded { message: String },

    /// Rows the transaction deletes or updates were changed by another
    /// transaction first (the first to prepare wins).
    #[error("{message}")]
    ConcurrentUpdate { message: String },

    /// The snapshot a read asked for cannot be served: its versions were
    /// garbage-collected, the copy was reset after it, or a transaction that
    /// may commit below it stayed undecided too long. Retry with a new one.
    #[error("could not serialize access: {message}")]
    SnapshotUnavailable { message: String },

    /// The partition's copies changed while the statement ran; nothing was
    /// applied and the statement may be retried.
    #[error("could not serialize access: {message}; retry the statement")]
    PlacementChanged { message: String },

    /// Two rows, or a row and a stored or prepared one, share a unique key.
    /// `key` is PostgreSQL's `(columns)=(values)`.
    #[error("duplicate key value violates unique constraint \"{constraint}\": Key {key} already exists")]
    UniqueViolation { constraint: String, key: String },

    /// A unique key being added is held twice by rows already stored.
    #[error("could not create unique index \"{constraint}\": Key {key} is duplicated")]
    DuplicateStoredKey { constraint: String, key: String },

    /// A bug: an invariant of foam-storage did not hold.
    #[error("internal error: {message}")]
    Internal { message: String },
}

impl StorageError {
    pub fn io(path: impl AsRef<std::path::Path>, source: std::io::Error) -> Self {
        StorageError::Io { path: path.as_ref().display().to_string(), source }
    }

    pub fn internal(message: impl Into<String>) -> Self {
        StorageError::Internal { message: message.into() }
    }

    /// The PostgreSQL SQLSTATE this error has once it leaves storage.
    pub fn sqlstate(&self) -> SqlState {
        match self {
            StorageError::Io { .. } => SqlState::IoError,
            StorageError::Corrupted { .. } => SqlState::DataCorrupted,
            StorageError::InvalidValue { .. } => SqlState::DataException,
            StorageError::OutOfRange { .. } => SqlState::NumericValueOutOfRange,
            StorageError::InvalidRequest { .. } => SqlState::InvalidParameterValue,
            StorageError::TransactionEnded { .. } => SqlState::TransactionRollback,
            StorageError::LimitExceeded { .. } => SqlState::ProgramLimitExceeded,
            StorageError::ConcurrentUpdate { .. } | StorageError::PlacementChanged { .. } | StorageError::SnapshotUnavailable { .. } => {
                SqlState::SerializationFailure
            }
            StorageError::UniqueViolation { .. } | StorageError::DuplicateStoredKey { .. } => SqlState::UniqueViolation,
            StorageError::Internal { .. } => SqlState::InternalError,
        }
    }

    pub fn corrupted(path: impl AsRef<std::path::Path>, message: impl Into<String>) -> Self {
        StorageError::Corrupted { path: path.as_ref().display().to_string(), message: message.into() }
    }
}

impl From<foam_common::fs::FileError> for StorageError {
    fn from(error: foam_common::fs::FileError) -> StorageError {
        StorageError::Io { path: error.path, source: error.source }
    }
}

impl From<StorageError> for FoamError {
    fn from(error: StorageError) -> FoamError {
        let (message, sqlstate) = (error.to_string(), error.sqlstate());
        match error {
            StorageError::Io { path, source } => FoamError::Io { path, source },
            StorageError::Corrupted { path, message } => FoamError::Corrupted { path, message },
            StorageError::InvalidValue { message } => FoamError::DataException { message },
            StorageError::InvalidRequest { message } => FoamError::InvalidParameter { message },
            StorageError::TransactionEnded { message } => FoamError::TransactionAborted { message },
            StorageError::PlacementChanged { message } => FoamError::PlacementChanged { message },
            StorageError::LimitExceeded { .. }
            | StorageError::OutOfRange { .. }
            | StorageError::ConcurrentUpdate { .. }
            | StorageError::SnapshotUnavailable { .. }
            | StorageError::UniqueViolation { .. }
            | StorageError::DuplicateStoredKey { .. } => FoamError::Query { message, sqlstate },
            StorageError::Internal { message } => FoamError::Internal { message },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_error_keeps_its_words_and_gets_its_sqlstate() {
        let cases = [
            (StorageError::io("/d/f", std::io::Error::other("disk full")), SqlState::IoError),
            (StorageError::corrupted("/d/f", "checksum"), SqlState::DataCorrupted),
            (StorageError::ConcurrentUpdate { message: "rows changed".into() }, SqlState::SerializationFailure),
            (StorageError::PlacementChanged { message: "moved".into() }, SqlState::SerializationFailure),
            (StorageError::SnapshotUnavailable { message: "too old".into() }, SqlState::SerializationFailure),
            (StorageError::UniqueViolation { constraint: "t_pkey".into(), key: "(k)=(1)".into() }, SqlState::UniqueViolation),
            (StorageError::LimitExceeded { message: "too much".into() }, SqlState::ProgramLimitExceeded),
            (StorageError::OutOfRange { message: "5000000003 as Int32".into() }, SqlState::NumericValueOutOfRange),
            (StorageError::TransactionEnded { message: "gone".into() }, SqlState::TransactionRollback),
            (StorageError::internal("bug"), SqlState::InternalError),
        ];
        for (error, sqlstate) in cases {
            let text = error.to_string();
            assert_eq!(error.sqlstate(), sqlstate, "{text}");
            let foam = FoamError::from(error);
            assert_eq!(foam.sqlstate(), sqlstate, "{text}");
            assert_eq!(foam.to_string(), text);
        }
    }
}
