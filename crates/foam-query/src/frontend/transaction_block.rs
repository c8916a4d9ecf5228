//! What `BEGIN ... COMMIT/ROLLBACK` means in a session.
//!
//! A block is one transaction (`write/transaction.rs`): its INSERTs and
//! COPYs stay staged on their partitions' copies until COMMIT commits them
//! all at once, or ROLLBACK, an error or the connection closing discards them.
//! Its reads see what is committed when each starts (READ COMMITTED, without a
//! snapshot shared by the cluster: see docs/ARCHITECTURE.md) plus the block's
//! own writes. CREATE and DROP of tables and views run in a block and are
//! undone by its ROLLBACK (`block_ddl.rs`); other statements that change the
//! catalog or a node rather than rows are not transactional, so a block
//! refuses them:
//!
//! ```text
//!   Idle ──BEGIN──▶ InBlock ──COMMIT──▶ Idle (the rows are committed)
//!                    │  reads, INSERT, COPY FROM, SET, SHOW: run
//!                    │  ALTER TABLE, CHECKPOINT, or any error
//!                    ▼
//!                  Failed ──COMMIT/ROLLBACK──▶ Idle (COMMIT answers ROLLBACK)
//!                    │ the failed statement's rows are discarded at once,
//!                    │ and the whole block's unless it has a savepoint;
//!                    │ every other statement: 25P02, as in PostgreSQL
//!                    └──ROLLBACK TO SAVEPOINT──▶ InBlock
//! ```
//! SAVEPOINT and RELEASE run in a block only; outside one they and ROLLBACK
//! TO get 25P01, as in PostgreSQL.

use datafusion::sql::sqlparser::ast::{Statement, TransactionAccessMode, TransactionIsolationLevel, TransactionMode};
use foam_common::{FoamError, FoamResult};

/// What a BEGIN or SET TRANSACTION's modes ask for, where they say.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Modes {
    pub read_only: Option<bool>,
    /// REPEATABLE READ (snapshot isolation: one snapshot for the whole
    /// block), or READ COMMITTED (a new snapshot per statement).
    pub repeatable_read: Option<bool>,
}

/// Reads a BEGIN's or SET TRANSACTION's `modes`. READ UNCOMMITTED runs as
/// READ COMMITTED, as in PostgreSQL. SERIALIZABLE is refused rather than run
/// as snapshot isolation, which allows write skew.
pub fn modes(modes: &[TransactionMode]) -> FoamResult<Modes> {
    let mut read = Modes::default();
    for mode in modes {
        match mode {
            TransactionMode::AccessMode(access) => read.read_only = Some(*access == TransactionAccessMode::ReadOnly),
            TransactionMode::IsolationLevel(TransactionIsolationLevel::ReadCommitted | TransactionIsolationLevel::ReadUncommitted) => {
                read.repeatable_read = Some(false);
            }
            TransactionMode::IsolationLevel(TransactionIsolationLevel::RepeatableRead | TransactionIsolationLevel::Snapshot) => {
                read.repeatable_read = Some(true);
            }
            TransactionMode::IsolationLevel(level) => {
                return Err(FoamError::FeatureNotSupported {
                    feature: format!(
                        "ISOLATION LEVEL {level} (FoamDB runs READ COMMITTED and REPEATABLE READ, which is snapshot isolation; \
                         it does not detect the write skew SERIALIZABLE must prevent)"
                    ),
                });
            }
        }
    }
    Ok(read)
}

/// Refuses the form of COMMIT and ROLLBACK FoamDB does not run, before it
/// could be taken for a plain one: `AND CHAIN`.
pub fn check_end(statement: &Statement) -> FoamResult<()> {
    match statement {
        Statement::Commit { chain: true, .. } | Statement::Rollback { chain: true, .. } => {
            Err(FoamError::FeatureNotSupported { feature: "COMMIT or ROLLBACK AND CHAIN".into() })
        }
        _ => Ok(()),
    }
}

/// A session's transaction block state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Block {
    /// No block: each statement runs on its own.
    #[default]
    Idle,
    /// After BEGIN.
    InBlock,
    /// After a refused write or an error inside a block.
    Failed,
}

/// What a statement is, as far as a block cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatementClass {
    Begin,
    Commit,
    Rollback,
    /// Reads, settings and anything else that changes no data.
    Read,
    /// Changes rows (INSERT, COPY FROM): part of the block's transaction.
    Write,
    /// SAVEPOINT or RELEASE SAVEPOINT.
    Savepoint,
    /// ROLLBACK TO SAVEPOINT: also runs in a failed block, which it resumes.
    RollbackTo,
    /// Changes the catalog or a node, which no transaction can undo; named
    /// for the error.
    NotTransactional(&'static str),
}

/// The verdict on a statement before it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// Run it.
    Run,
    /// Refuse it with this SQLSTATE and message; the block is now failed.
    Refuse { sqlstate: foam_common::SqlState, message: String },
}

impl Block {
    /// Whether `class` may run now; a refusal fails the block.
    pub fn admit(&mut self, class: StatementClass) -> Admission {
        match (*self, class) {
            (Block::Failed, StatementClass::Commit | StatementClass::Rollback | StatementClass::RollbackTo) => Admission::Run,
            (Block::Idle, StatementClass::Savepoint | StatementClass::RollbackTo) => Admission::Refuse {
                sqlstate: foam_common::SqlState::NoActiveSqlTransaction,
                message: "savepoints can only be used in transaction blocks".into(),
            },
            (Block::Failed, _) => Admission::Refuse {
                sqlstate: foam_common::SqlState::InFailedSqlTransaction,
                message: "current transaction is aborted, commands ignored until end of transaction block".into(),
            },
            (Block::InBlock, StatementClass::NotTransactional(what)) => {
                *self = Block::Failed;
                Admission::Refuse {
                    sqlstate: foam_common::SqlState::FeatureNotSupported,
                    message: format!(
                        "{what} cannot run inside a transaction block: it takes effect at once and a ROLLBACK could not undo it; \
                         run it outside BEGIN ... COMMIT (this transaction is now aborted)"
                    ),
                }
            }
            _ => Admission::Run,
        }
    }

    /// The state after `class` ran, `succeeded` or not; and the command tag
    /// COMMIT answers (`ROLLBACK` for a failed block, as in PostgreSQL).
    pub fn after(&mut self, class: StatementClass, succeeded: bool) -> Option<&'static str> {
        match class {
            StatementClass::Begin if succeeded && *self == Block::Idle => *self = Block::InBlock,
            StatementClass::Commit => {
                let tag = if *self == Block::Failed { "ROLLBACK" } else { "COMMIT" };
                *self = Block::Idle;
                return Some(tag);
            }
            StatementClass::Rollback => *self = Block::Idle,
            StatementClass::RollbackTo if succeeded => *self = Block::InBlock,
            StatementClass::RollbackTo => {}
            _ if !succeeded => self.statement_failed(),
            _ => {}
        }
        None
    }

    /// A statement failed (also one that could not be parsed or planned):
    /// inside a block, the block is aborted.
    pub fn statement_failed(&mut self) {
        if *self == Block::InBlock {
            *self = Block::Failed;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_and_writes_run_in_a_block_and_ddl_aborts_it() {
        let mut block = Block::default();
        assert_eq!(block.admit(StatementClass::Begin), Admission::Run);
        block.after(StatementClass::Begin, true);
        assert_eq!(block, Block::InBlock);
        assert_eq!(block.admit(StatementClass::Read), Admission::Run);
        block.after(StatementClass::Read, true);
        assert_eq!(block.admit(StatementClass::Write), Admission::Run);
        block.after(StatementClass::Write, true);
        assert_eq!(block, Block::InBlock);
        assert!(matches!(
            block.admit(StatementClass::NotTransactional("CREATE TABLE")),
            Admission::Refuse { sqlstate: foam_common::SqlState::FeatureNotSupported, .. }
        ));
        assert!(matches!(block.admit(StatementClass::Read), Admission::Refuse { sqlstate: foam_common::SqlState::InFailedSqlTransaction, .. }));
        assert_eq!(block.admit(StatementClass::Commit), Admission::Run);
        assert_eq!(block.after(StatementClass::Commit, true), Some("ROLLBACK"));
        assert_eq!(block, Block::Idle);
        // Outside a block everything runs.
        assert_eq!(block.admit(StatementClass::NotTransactional("CREATE TABLE")), Admission::Run);
    }

    #[test]
    fn rollback_to_a_savepoint_resumes_a_failed_block_and_savepoints_need_one() {
        let mut block = Block::Idle;
        assert!(matches!(block.admit(StatementClass::Savepoint), Admission::Refuse { sqlstate: foam_common::SqlState::NoActiveSqlTransaction, .. }));
        assert_eq!(block, Block::Idle, "refused outside a block, nothing to abort");
        let mut block = Block::InBlock;
        block.after(StatementClass::Read, false);
        assert!(matches!(block.admit(StatementClass::Savepoint), Admission::Refuse { sqlstate: foam_common::SqlState::InFailedSqlTransaction, .. }));
        assert_eq!(block.admit(StatementClass::RollbackTo), Admission::Run);
        block.after(StatementClass::RollbackTo, false);
        assert_eq!(block, Block::Failed, "an unknown savepoint leaves it failed");
        block.after(StatementClass::RollbackTo, true);
        assert_eq!(block, Block::InBlock);
    }

    #[test]
    fn an_error_inside_a_block_fails_it_until_rollback() {
        let mut block = Block::InBlock;
        block.after(StatementClass::Read, false);
        assert_eq!(block, Block::Failed);
        assert_eq!(block.admit(StatementClass::Rollback), Admission::Run);
        block.after(StatementClass::Rollback, true);
        assert_eq!(block, Block::Idle);
        let mut ok = Block::InBlock;
        assert_eq!(ok.after(StatementClass::Commit, true), Some("COMMIT"));
    }
}
