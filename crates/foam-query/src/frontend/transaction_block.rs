//! What `BEGIN ... COMMIT/ROLLBACK` means in a session, truthfully.
//!
//! FoamDB commits every write statement on its own; it has no transactions
//! that span statements yet. Answering `BEGIN` and then keeping the rows of an
//! INSERT that a `ROLLBACK` was meant to undo would be a lie a driver or ORM
//! cannot detect. A transaction block therefore holds reads only:
//!
//! ```text
//!   Idle ──BEGIN──▶ InBlock ──COMMIT/ROLLBACK──▶ Idle
//!                    │  reads, SET, SHOW: run (each sees what is committed
//!                    │  when it starts, as READ COMMITTED does)
//!                    │  a write or any error
//!                    ▼
//!                  Failed ──COMMIT/ROLLBACK──▶ Idle (COMMIT answers ROLLBACK)
//!                    every other statement: 25P02, as in PostgreSQL
//! ```
//! A write inside a block is refused with 0A000 before it does anything, so
//! nothing a client rolls back has happened.

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
    /// Changes data or the catalog; named for the error.
    Write(&'static str),
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
            (Block::Failed, StatementClass::Commit | StatementClass::Rollback) => Admission::Run,
            (Block::Failed, _) => Admission::Refuse {
                sqlstate: foam_common::SqlState::InFailedSqlTransaction,
                message: "current transaction is aborted, commands ignored until end of transaction block".into(),
            },
            (Block::InBlock, StatementClass::Write(what)) => {
                *self = Block::Failed;
                Admission::Refuse {
                    sqlstate: foam_common::SqlState::FeatureNotSupported,
                    message: format!(
                        "{what} inside a transaction block is not supported: FoamDB commits each write statement on its own, \
                         so it cannot be rolled back; run it outside BEGIN ... COMMIT (this transaction is now aborted)"
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
    fn reads_run_in_a_block_and_a_write_aborts_it() {
        let mut block = Block::default();
        assert_eq!(block.admit(StatementClass::Begin), Admission::Run);
        block.after(StatementClass::Begin, true);
        assert_eq!(block, Block::InBlock);
        assert_eq!(block.admit(StatementClass::Read), Admission::Run);
        block.after(StatementClass::Read, true);
        assert!(matches!(block.admit(StatementClass::Write("INSERT")), Admission::Refuse { sqlstate: foam_common::SqlState::FeatureNotSupported, .. }));
        assert!(matches!(block.admit(StatementClass::Read), Admission::Refuse { sqlstate: foam_common::SqlState::InFailedSqlTransaction, .. }));
        assert_eq!(block.admit(StatementClass::Commit), Admission::Run);
        assert_eq!(block.after(StatementClass::Commit, true), Some("ROLLBACK"));
        assert_eq!(block, Block::Idle);
        // Outside a block writes run.
        assert_eq!(block.admit(StatementClass::Write("INSERT")), Admission::Run);
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
