//! Random writes: UPDATE, DELETE, INSERT and INSERT ... ON CONFLICT
//! statements on one table of the fuzz database, alone or in a transaction
//! block that commits or rolls back. Predicates and expressions come from
//! the query generator, so they hold subqueries (correlated or not) over
//! every table, and assignments may move a row to another partition (a new
//! distribution key), collide on a unique key, or put NULL in a NOT NULL
//! column: what must then fail is compared too.
//!
//! A statement may end in `RETURNING` (`*`, or some of the table's
//! columns), whose rows are compared too ([`RETURNING`]).
//!
//! A write holding ON CONFLICT is an upsert write: PostgreSQL takes only a
//! key checked row by row as its arbiter, so its judge holds the table with
//! such a key for that write, and the write has no UPDATE (which a key
//! checked row by row fails where the end of the statement would not), nor
//! does DO UPDATE assign the key.

use super::{Col, Generator};
use crate::schema::{COLUMNS, ColumnDef, Ty};

/// Statements in one transaction block, at most.
const BLOCK_STATEMENTS_MAX: u32 = 3;
/// Rows of one INSERT ... VALUES, at most.
const VALUES_ROWS_MAX: u32 = 3;
/// Percent of VALUES inserts with a column list leaving some columns out,
/// that are `DEFAULT VALUES`, and of their values that are `DEFAULT`.
const COLUMN_LIST_PERCENT: u32 = 30;
const DEFAULT_VALUES_PERCENT: u32 = 4;
const DEFAULT_KEYWORD_PERCENT: u32 = 8;
/// Percent of writes that are upsert writes.
const UPSERT_PERCENT: u32 = 20;
/// Percent of write statements that return their rows.
const RETURNING_PERCENT: u32 = 25;
/// Of UPDATEs and DELETEs, those that read another table (`UPDATE ...
/// FROM`, `DELETE ... USING`).
const FROM_PERCENT: u32 = 30;
/// What a statement that returns its rows holds, before its items: `*`,
/// or the target's columns as `table.column`.
pub const RETURNING: &str = " RETURNING ";

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
    /// Holds INSERT ... ON CONFLICT (and no UPDATE).
    pub upsert: bool,
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
        let upsert = self.c.chance(UPSERT_PERCENT);
        let statements = (0..count)
            .map(|i| {
                let (statement, other_tables) =
                    if upsert && (i == 0 || self.c.chance(50)) { (self.upsert_statement(target), false) } else { self.write_statement(target, upsert) };
                if self.c.chance(RETURNING_PERCENT) { format!("{statement}{}", self.returning(target, !other_tables)) } else { statement }
            })
            .collect();
        Write { target, statements, end, upsert }
    }

    /// `RETURNING *` (if `star`: FoamDB refuses it where a write reads other
    /// tables) or `RETURNING` one to three of the target's columns.
    fn returning(&mut self, target: usize, star: bool) -> String {
        if star && self.c.chance(30) {
            return format!("{RETURNING}*");
        }
        let table = self.tables[target].name.clone();
        let items: Vec<String> = (0..self.c.between(1, 3)).map(|_| format!("{table}.{}", self.c.pick(COLUMNS).name)).collect();
        format!("{RETURNING}{}", items.join(", "))
    }

    /// An UPDATE, DELETE or INSERT; no UPDATE in an upsert write. True when
    /// it reads other tables (`UPDATE ... FROM`, `DELETE ... USING`).
    fn write_statement(&mut self, target: usize, upsert: bool) -> (String, bool) {
        self.ctes.clear();
        let table = self.tables[target].name.clone();
        let scope: Vec<Col> = COLUMNS.iter().map(|c| Col { sql: format!("{table}.{}", c.name), ty: c.ty }).collect();
        let kind = if upsert { self.c.between(4, 9) } else { self.c.below(10) };
        let body = match kind {
            0..=3 if self.c.chance(FROM_PERCENT) => {
                let body = self.update_from(&table, &scope);
                return (self.with_ctes(&body), true);
            }
            4..=6 if self.c.chance(FROM_PERCENT) => {
                let body = self.delete_using(&table, &scope);
                return (self.with_ctes(&body), true);
            }
            0..=3 => {
                let count = self.c.between(1, 2);
                let mut columns: Vec<usize> = (0..count).map(|_| self.c.below(COLUMNS.len() as u32) as usize).collect();
                columns.dedup();
                let assignments: Vec<String> =
                    columns.iter().map(|i| format!("{} = {}", COLUMNS[*i].name, self.assigned(COLUMNS[*i].ty, &scope))).collect();
                format!("UPDATE {table} SET {}{}", assignments.join(", "), self.write_filter(&scope))
            }
            4..=6 => format!("DELETE FROM {table}{}", self.write_filter(&scope)),
            _ => self.insert(&table, kind <= 8),
        };
        (self.with_ctes(&body), false)
    }

    /// `UPDATE table ... FROM` a table grouped by the column the target
    /// joins it on, so each target row matches at most one row: of several
    /// PostgreSQL takes any one, FoamDB fails with 21000.
    fn update_from(&mut self, table: &str, scope: &[Col]) -> String {
        let source = self.c.pick(self.tables).name.clone();
        let (inner, outer) = (self.alias(), self.alias());
        let (key, value) = (&COLUMNS[self.c.below(COLUMNS.len() as u32) as usize], &COLUMNS[self.c.below(COLUMNS.len() as u32) as usize]);
        let inner_scope: Vec<Col> = COLUMNS.iter().map(|c| Col { sql: format!("{inner}.{}", c.name), ty: c.ty }).collect();
        let aggregate = if value.ty == Ty::Bool { "bool_and" } else { "min" };
        let grouped = format!(
            "(SELECT {inner}.{} AS fk, {aggregate}({inner}.{}) AS fv FROM {source} AS {inner}{} GROUP BY {inner}.{}) AS {outer}",
            key.name,
            value.name,
            self.write_filter(&inner_scope),
            key.name
        );
        let mut both = scope.to_vec();
        both.push(Col { sql: format!("{outer}.fk"), ty: key.ty });
        both.push(Col { sql: format!("{outer}.fv"), ty: value.ty });
        let set = &COLUMNS[self.c.below(COLUMNS.len() as u32) as usize];
        let assignment = format!("{} = {}", set.name, self.assigned(set.ty, &both));
        let joined = format!("{} = {outer}.fk", self.column(key.ty, scope));
        // No subquery in the condition: FoamDB refuses one there (0A000).
        let filter = if self.c.chance(50) { format!(" AND {}", self.predicate(&both, 0, 0)) } else { String::new() };
        format!("UPDATE {table} SET {assignment} FROM {grouped} WHERE {joined}{filter}")
    }

    /// `DELETE FROM table USING` another table (or itself) and a condition
    /// over both, without a subquery (as in `update_from`).
    fn delete_using(&mut self, table: &str, scope: &[Col]) -> String {
        let source = self.c.pick(self.tables).name.clone();
        let alias = self.alias();
        let mut both = scope.to_vec();
        both.extend(COLUMNS.iter().map(|c| Col { sql: format!("{alias}.{}", c.name), ty: c.ty }));
        let filter = if self.c.chance(85) { format!(" WHERE {}", self.predicate(&both, 0, 0)) } else { String::new() };
        format!("DELETE FROM {table} USING {source} AS {alias}{filter}")
    }

    /// `INSERT INTO table` with rows of a SELECT over any table (`select`)
    /// or of VALUES.
    fn insert(&mut self, table: &str, select: bool) -> String {
        if select {
            let source = self.c.pick(self.tables).name.clone();
            let alias = self.alias();
            let from: Vec<Col> = COLUMNS.iter().map(|c| Col { sql: format!("{alias}.{}", c.name), ty: c.ty }).collect();
            let items: Vec<String> = COLUMNS.iter().map(|c| self.assigned(c.ty, &from)).collect();
            format!("INSERT INTO {table} SELECT {} FROM {source} AS {alias}{}", items.join(", "), self.write_filter(&from))
        } else {
            if self.c.chance(DEFAULT_VALUES_PERCENT) {
                return format!("INSERT INTO {table} DEFAULT VALUES");
            }
            // Now and then a column list that leaves columns to their
            // defaults (or NULL), and DEFAULT among the values.
            let listed: Vec<&ColumnDef> = match self.c.chance(COLUMN_LIST_PERCENT) {
                true => COLUMNS.iter().filter(|_| !self.c.chance(30)).collect(),
                false => COLUMNS.iter().collect(),
            };
            let listed = if listed.is_empty() { vec![&COLUMNS[0]] } else { listed };
            let rows: Vec<String> = (0..self.c.between(1, VALUES_ROWS_MAX))
                .map(|_| {
                    let values: Vec<String> =
                        listed.iter().map(|c| if self.c.chance(DEFAULT_KEYWORD_PERCENT) { "DEFAULT".to_string() } else { self.value(c.ty) }).collect();
                    format!("({})", values.join(", "))
                })
                .collect();
            let names = match listed.len() == COLUMNS.len() {
                true => String::new(),
                false => format!(" ({})", listed.iter().map(|c| c.name).collect::<Vec<_>>().join(", ")),
            };
            format!("INSERT INTO {table}{names} VALUES {}", rows.join(", "))
        }
    }

    /// `INSERT INTO table SELECT ...` grouped by the key columns, so no
    /// two rows have the same key.
    fn insert_grouped(&mut self, table: &str, keys: &[&str]) -> String {
        let source = self.c.pick(self.tables).name.clone();
        let alias = self.alias();
        let from: Vec<Col> = COLUMNS.iter().map(|c| Col { sql: format!("{alias}.{}", c.name), ty: c.ty }).collect();
        let mut group = Vec::new();
        let items: Vec<String> = COLUMNS
            .iter()
            .map(|c| {
                if keys.contains(&c.name) {
                    let key = self.column(c.ty, &from);
                    group.push(key.clone());
                    key
                } else {
                    let value = self.column(c.ty, &from);
                    if c.ty == Ty::Bool { format!("bool_and({value})") } else { format!("min({value})") }
                }
            })
            .collect();
        let filter = self.write_filter(&from);
        format!("INSERT INTO {table} SELECT {} FROM {source} AS {alias}{filter} GROUP BY {}", items.join(", "), group.join(", "))
    }

    /// INSERT ... ON CONFLICT: DO NOTHING, with the table's key as target
    /// or none, or DO UPDATE of columns other than the key from the row
    /// and `excluded`, perhaps under a WHERE. Now and then the target is
    /// the key of a table that has no UNIQUE one (42P10 on both).
    fn upsert_statement(&mut self, target: usize) -> String {
        self.ctes.clear();
        let table = &self.tables[target];
        let (name, mut keys, unique) = (table.name.clone(), table.layout.keys.clone(), table.unique);
        let select = self.c.chance(50);
        let arbiter = !keys.is_empty() && (unique || self.c.chance(10)) && !self.c.chance(15);
        let update = arbiter && !self.c.chance(30);
        // Which of several proposed rows of one key DO NOTHING keeps follows
        // the order of the SELECT's rows, which SQL leaves undefined: its
        // rows get distinct keys. (DO UPDATE fails on them, 21000.)
        let insert = match (select, update) {
            (true, false) if unique => self.insert_grouped(&name, &keys),
            _ => self.insert(&name, select),
        };
        if !arbiter {
            return self.with_ctes(&format!("{insert} ON CONFLICT DO NOTHING"));
        }
        if keys.len() > 1 && self.c.chance(50) {
            keys.reverse();
        }
        let arbiter = format!("ON CONFLICT ({})", keys.join(", "));
        if !update {
            return self.with_ctes(&format!("{insert} {arbiter} DO NOTHING"));
        }
        let scope: Vec<Col> = ["excluded", name.as_str()]
            .iter()
            .flat_map(|q| COLUMNS.iter().map(move |c| Col { sql: format!("{q}.{}", c.name), ty: c.ty }))
            .collect();
        let free: Vec<usize> = (0..COLUMNS.len()).filter(|i| !keys.contains(&COLUMNS[*i].name)).collect();
        let mut columns: Vec<usize> = (0..self.c.between(1, 2)).map(|_| *self.c.pick(&free)).collect();
        columns.dedup();
        let assignments: Vec<String> =
            columns.iter().map(|i| format!("{} = {}", COLUMNS[*i].name, self.assigned(COLUMNS[*i].ty, &scope))).collect();
        let filter = if self.c.chance(30) { format!(" WHERE {}", self.predicate(&scope, 1, 0)) } else { String::new() };
        self.with_ctes(&format!("{insert} {arbiter} DO UPDATE SET {}{filter}", assignments.join(", ")))
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
