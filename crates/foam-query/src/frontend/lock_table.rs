//! `LOCK TABLE name [, ...] IN ACCESS SHARE MODE`, which pg_dump takes on
//! every table it dumps, inside its REPEATABLE READ block.
//!
//! FoamDB has no table locks. ACCESS SHARE is PostgreSQL's weakest mode: it
//! conflicts only with ACCESS EXCLUSIVE (DROP, TRUNCATE, ALTER TABLE), and
//! what the holder reads already comes from the block's snapshot, so FoamDB
//! takes it as a check that each relation exists and may be read (42P01,
//! 42501), inside a block only (25P01, as PostgreSQL). What it does not do
//! is hold off another session's DROP or TRUNCATE until the block ends: a
//! dropped table then fails the block's next read of it with 42P01
//! (docs/clients.md says so). Every other mode, and the default (ACCESS
//! EXCLUSIVE), would promise to keep writers out: 0A000.

use datafusion::sql::sqlparser::ast::{Lock, LockTableMode};
use foam_catalog::Catalog;
use foam_common::{FoamError, FoamResult, SqlState};

use crate::frontend::ddl;

/// The relations `lock` names, each checked to exist, once its mode is one
/// FoamDB takes; `in_block` says whether a transaction block is open.
pub fn check(lock: &Lock, catalog: &Catalog, in_block: bool) -> FoamResult<Vec<String>> {
    match &lock.lock_mode {
        Some(LockTableMode::AccessShare) => {}
        other => {
            let mode = other.as_ref().map_or("ACCESS EXCLUSIVE".to_string(), |mode| mode.to_string());
            return Err(FoamError::FeatureNotSupported {
                feature: format!("LOCK TABLE IN {mode} MODE (FoamDB has no table locks; ACCESS SHARE is taken, as snapshots give it)"),
            });
        }
    }
    if !in_block {
        return Err(FoamError::Query { message: "LOCK TABLE can only be used in transaction blocks".into(), sqlstate: SqlState::NoActiveSqlTransaction });
    }
    let names = lock.tables.iter().map(|target| ddl::table_name(&target.name)).collect::<FoamResult<Vec<_>>>()?;
    let exists = |name: &str| catalog.tables.contains_key(name) || catalog.views.contains_key(name) || crate::catalog::system_tables::NAMES.contains(&name);
    if let Some(missing) = names.iter().find(|name| !exists(name)) {
        return Err(FoamError::Query { message: format!("relation \"{missing}\" does not exist"), sqlstate: SqlState::UndefinedTable });
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::sqlparser::ast::Statement;
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;

    fn lock(sql: &str) -> Lock {
        match Parser::parse_sql(&PostgreSqlDialect {}, sql).unwrap().remove(0) {
            Statement::Lock(lock) => lock,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn only_access_share_inside_a_block_on_relations_that_exist() {
        let catalog = Catalog::default();
        let state = |sql: &str, in_block: bool| check(&lock(sql), &catalog, in_block).map(|_| ()).map_err(|e| e.sqlstate().to_string());
        assert_eq!(state("LOCK TABLE public.t IN ACCESS SHARE MODE", true), Err("42P01".into()));
        assert_eq!(state("LOCK TABLE t IN ACCESS SHARE MODE", false), Err("25P01".into()));
        assert_eq!(state("LOCK TABLE t", true), Err("0A000".into()));
        assert_eq!(state("LOCK TABLE t IN SHARE ROW EXCLUSIVE MODE", true), Err("0A000".into()));
        assert_eq!(check(&lock("LOCK t IN ACCESS SHARE MODE"), &catalog, true).map_err(|e| e.to_string()).unwrap_err(), "relation \"t\" does not exist");
    }
}
