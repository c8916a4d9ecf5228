//! Random writes: UPDATE, DELETE and INSERT statements on one table of the
//! fuzz database, alone or in a transaction block that commits or rolls
//! back. Predicates and expressions come from the query generator, so they
//! hold subqueries (correlated or not) over every table, and assignments
//! may move a row to another partition (a new distribution key), collide
//! on a unique key, or put NULL in a NOT NULL column: what must then fail
//! is compared too.

use super::{Col, Generator};
use crate::schema::{COLUMNS, Ty};

/// Statements in one transaction block, at most.
const BLOCK_STATEMENTS_MAX: u32 = 3;
/// Rows of one INSERT ... VALUES, at most.
const VALUES_ROWS_MAX: u32 = 3;

/// How a write ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// One statement outside any block.
    Autocommit,
    Commit,
    Rollback,
}

/// One generated write: statements on the table `target` (an index into
/// the database's tables) and how they end.
#[derive(Clone, Debug)]
pub struct Write {
    pub target: usize,
    pub statements: Vec<String>,
    pub end: End,
}

impl Write {
    /// Every statement sent, the block's BEGIN and its end included.
    pub fn sql(&self) -> Vec<String> {
        match self.end {
            End::Autocommit => self.statements.clone(),
            End::Commit | End::Rollback => {
                let end = if self.end == End::Commit { "COMMIT" } else { "ROLLBACK" };
                std::iter::once("BEGIN".to_string()).chain(self.statements.iter().cloned()).chain(std::iter::once(end.to_string())).collect()
            }
        }
    }
}

impl Generator<'_> {
    /// A write on one of the tables.
    pub(super) fn write(&mut self) -> Write {
        let target = self.c.below(self.tables.len() as u32) as usize;
        let end = match self.c.below(20) {
            0..=11 => End::Autocommit,
            12..=16 => End::Commit,
            _ => End::Rollback,
        };
        let count = if end == End::Autocommit { 1 } else { self.c.between(1, BLOCK_STATEMENTS_MAX) };
        let statements = (0..count).map(|_| self.write_statement(target)).collect();
        Write { target, statements, end }
    }

    fn write_statement(&mut self, target: usize) -> String {
        self.ctes.clear();
        let table = self.tables[target].name.clone();
        let scope: Vec<Col> = COLUMNS.iter().map(|c| Col { sql: format!("{table}.{}", c.name), ty: c.ty }).collect();
        let body = match self.c.below(10) {
            0..=3 => {
                let count = self.c.between(1, 2);
                let mut columns: Vec<usize> = (0..count).map(|_| self.c.below(COLUMNS.len() as u32) as usize).collect();
                columns.dedup();
                let assignments: Vec<String> =
                    columns.iter().map(|i| format!("{} = {}", COLUMNS[*i].name, self.assigned(COLUMNS[*i].ty, &scope))).collect();
                format!("UPDATE {table} SET {}{}", assignments.join(", "), self.write_filter(&scope))
            }
            4..=6 => format!("DELETE FROM {table}{}", self.write_filter(&scope)),
            7 | 8 => {
                let source = self.c.pick(self.tables).name.clone();
                let alias = self.alias();
                let from: Vec<Col> = COLUMNS.iter().map(|c| Col { sql: format!("{alias}.{}", c.name), ty: c.ty }).collect();
                let items: Vec<String> = COLUMNS.iter().map(|c| self.assigned(c.ty, &from)).collect();
                format!("INSERT INTO {table} SELECT {} FROM {source} AS {alias}{}", items.join(", "), self.write_filter(&from))
            }
            _ => {
                let rows: Vec<String> = (0..self.c.between(1, VALUES_ROWS_MAX))
                    .map(|_| format!("({})", COLUMNS.iter().map(|c| self.value(c.ty)).collect::<Vec<_>>().join(", ")))
                    .collect();
                format!("INSERT INTO {table} VALUES {}", rows.join(", "))
            }
        };
        self.with_ctes(&body)
    }

    /// A WHERE clause (most often) over `scope`, possibly with subqueries.
    fn write_filter(&mut self, scope: &[Col]) -> String {
        if self.c.chance(85) { format!(" WHERE {}", self.predicate(scope, 1, 0)) } else { String::new() }
    }

    /// A value for a column of family `ty`: an expression over `scope`, a
    /// literal, or NULL.
    fn assigned(&mut self, ty: Ty, scope: &[Col]) -> String {
        if self.c.chance(8) { "NULL".into() } else { self.expr(ty, scope, 0) }
    }

    /// A literal of family `ty` or NULL, for VALUES.
    fn value(&mut self, ty: Ty) -> String {
        if self.c.chance(10) { "NULL".into() } else { self.literal(ty) }
    }
}
