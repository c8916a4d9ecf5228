//! Differential testing of writes: random UPDATE, DELETE, INSERT and
//! INSERT ... ON CONFLICT statements, alone or in blocks that commit or roll back
//! (`query/writes.rs`), run on FoamDB and on a judge that holds the same
//! tables with the same keys (PostgreSQL, or in CI a FoamDB of one node).
//!
//! ```text
//!   (seed, i) ─▶ Write ─▶ fresh copy of its table on both engines
//!                      ─▶ each statement on both: same row count, or both fail
//!                      ─▶ the table's rows on both, as multisets
//! ```
//! A statement with RETURNING is compared by the rows it returns, as
//! multisets, instead of its row count.
//! A statement FoamDB refuses as unsupported (0A000) where the judge runs
//! it ends the write uncompared, and is counted. Where the judge fails with
//! 21000 on a scalar subquery that may give several rows and FoamDB runs
//! the statement, the write is run again with the judge's subqueries
//! limited to one row: the same result means no row FoamDB wrote read
//! the subquery (as the query judge's `judge_unread`). A difference is kept as a
//! sqllogictest case: the tables, the statements as the judge took them,
//! and the judge's rows.

use datafusion::arrow::datatypes::{DataType, TimeUnit};

use crate::choices::Choices;
use crate::compare::{Rows, difference};
use crate::engines::{Foam, Outcome, TRANSIENT_STATES};
use crate::query::{self, End, MANY_ROWS_MARK, Query, RETURNING, Write};
use crate::run::{CARDINALITY_VIOLATION, Case, Failure, Kind};
use crate::schema::{COLUMNS, Table};

/// Write `i` of seed `s` draws its choices from seed `(s ^ WRITE_SEED_SALT) * 2^20 + i`.
const WRITE_SEED_SALT: u64 = 0x77_7269_7465;
/// Tries of a write that FoamDB refused with a retriable SQLSTATE (a table
/// created a moment ago still gaining its replicas fails a block's COMMIT
/// with 40001), as a client retries it.
const TRANSIENT_TRIES_MAX: u32 = 3;
/// Writes are numbered from here in failures, after any query's index.
pub const WRITE_INDEX_BASE: u64 = crate::run::QUERIES_PER_SEED_MAX;

/// The engine writes are compared with, how it creates a table (for an
/// upsert write too), and the form of a statement it takes (PostgreSQL has
/// no LEFT SEMI JOIN).
pub struct WriteJudge<'a> {
    pub engine: &'a Foam,
    pub create: fn(&Table) -> String,
    pub create_upsert: fn(&Table) -> String,
    pub form: fn(&str) -> String,
}

/// What the writes of a run did.
#[derive(Clone, Debug, Default)]
pub struct WriteTally {
    pub writes: u64,
    /// Every statement agreed and the tables were compared.
    pub compared: u64,
    /// Of those, writes where a statement failed on both engines.
    pub with_both_failed: u64,
    /// FoamDB refused a statement as unsupported (0A000).
    pub refused: u64,
    /// The judge refused a statement FoamDB ran as not SQL it takes (class
    /// 42: PostgreSQL parses `x LIKE p IN (...)` otherwise, wants GROUP BY
    /// items it can name) or cannot run (0A000: a FULL JOIN on an OR):
    /// uncompared.
    pub unjudged: u64,
    /// Timed out, or refused with a retriable SQLSTATE on every try.
    pub timed_out: u64,
    /// The judge failed with 21000 on a subquery of several rows that no
    /// row FoamDB wrote reads: the write agreed once each such subquery
    /// was limited to one row on the judge.
    pub unread_subqueries: u64,
}

enum Verdict {
    Agree { failed: bool },
    Refused,
    Unjudged,
    TimedOut,
    /// FoamDB refused a statement with a retriable SQLSTATE the judge did not.
    Transient,
    /// The judge failed with 21000 on a subquery that may give several
    /// rows where FoamDB ran the statement.
    Cardinality,
    /// Agreed once the judge's subqueries were limited to one row.
    Unread,
    Differ { detail: String, taken: Vec<(String, bool)>, expected: Option<Rows> },
}

/// The column types of every fuzz table, for comparing rows.
fn column_types() -> Vec<DataType> {
    COLUMNS.iter().map(|c| arrow_type(c.sql_type)).collect()
}

fn arrow_type(sql_type: &str) -> DataType {
    match sql_type {
        "INT" => DataType::Int32,
        "BIGINT" => DataType::Int64,
        "DOUBLE PRECISION" => DataType::Float64,
        "BOOLEAN" => DataType::Boolean,
        "DATE" => DataType::Date32,
        "DECIMAL(10,2)" => DataType::Decimal128(10, 2),
        "TIMESTAMP" => DataType::Timestamp(TimeUnit::Microsecond, None),
        "TIMESTAMPTZ" => DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
        _ => DataType::Utf8,
    }
}

/// The types of the rows `sql` returns, if it ends in RETURNING (`*`, or
/// `table.column` items, as `query/writes.rs` writes them).
fn returned_types(sql: &str) -> Option<Vec<DataType>> {
    let (_, items) = sql.rsplit_once(RETURNING)?;
    if items.trim() == "*" {
        return Some(column_types());
    }
    items
        .split(", ")
        .map(|item| {
            let column = item.rsplit('.').next()?.trim();
            COLUMNS.iter().find(|c| c.name == column).map(|c| arrow_type(c.sql_type))
        })
        .collect()
}

/// The choices write `index` of `seed` is generated from.
pub fn write_choices(seed: u64, index: u64) -> Choices {
    Choices::random((seed ^ WRITE_SEED_SALT).wrapping_mul(crate::run::QUERIES_PER_SEED_MAX).wrapping_add(index))
}

/// Runs `count` writes of `seed` on `foam`, which holds `tables`, and on
/// `judge`, which gets them here in its own form. After each write its
/// table is created anew on both, so every write (and the case saved for
/// it) starts from the seed's rows in every table. Returns the differences
/// found.
pub async fn check_writes(
    foam: &Foam,
    judge: &WriteJudge<'_>,
    tables: &[Table],
    seed: u64,
    count: u64,
    tally: &mut WriteTally,
    mut progress: impl FnMut(&str),
) -> Result<Vec<Failure>, String> {
    judge.engine.load_as(tables, judge.create).await?;
    let mut failures = Vec::new();
    for index in 0..count {
        let write = query::generate_write(&mut write_choices(seed, index), tables);
        tally.writes += 1;
        let mut verdict = check_and_restore(foam, judge, tables, &write).await?;
        for _ in 1..TRANSIENT_TRIES_MAX {
            if !matches!(verdict, Verdict::Transient) {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
            verdict = check_and_restore(foam, judge, tables, &write).await?;
        }
        match verdict {
            Verdict::Agree { failed } => {
                tally.compared += 1;
                tally.with_both_failed += u64::from(failed);
            }
            Verdict::Refused => tally.refused += 1,
            Verdict::Unjudged => tally.unjudged += 1,
            Verdict::TimedOut | Verdict::Transient => tally.timed_out += 1,
            Verdict::Unread => tally.unread_subqueries += 1,
            Verdict::Cardinality => unreachable!("check_and_restore reruns a write the judge failed with 21000"),
            Verdict::Differ { detail, taken, expected } => {
                let sql = write.sql().join(";\n");
                progress(&format!("seed {seed} write {index}: WrongWrite: {detail}\n  {sql}"));
                let table = &tables[write.target];
                let case = Case {
                    tables: tables.to_vec(),
                    setup: taken,
                    query: Query { sql: format!("SELECT * FROM {}", table.name), ordered: false, partitioned: None, cardinality: false },
                    expected: expected.map(|rows| (rows, column_types())),
                };
                failures.push(Failure {
                    seed,
                    query_index: WRITE_INDEX_BASE + index,
                    kind: Kind::WrongWrite,
                    sql,
                    detail,
                    reduced: Some(case),
                    rules: Vec::new(),
                });
            }
        }
    }
    Ok(failures)
}

/// Runs `write` on both engines, then gives its table the seed's rows again
/// on both (the write may have changed them, alike or not). A write the
/// judge failed with 21000 is run again with the judge's subqueries that
/// may give several rows limited to one.
async fn check_and_restore(foam: &Foam, judge: &WriteJudge<'_>, tables: &[Table], write: &Write) -> Result<Verdict, String> {
    let mut verdict = check_once(foam, judge, tables, write, false).await?;
    if matches!(verdict, Verdict::Cardinality) {
        verdict = match check_once(foam, judge, tables, write, true).await? {
            Verdict::Agree { .. } => Verdict::Unread,
            other => other,
        };
    }
    Ok(verdict)
}

async fn check_once(foam: &Foam, judge: &WriteJudge<'_>, tables: &[Table], write: &Write, limited: bool) -> Result<Verdict, String> {
    let table = std::slice::from_ref(&tables[write.target]);
    if write.upsert {
        judge.engine.load_as(table, judge.create_upsert).await?;
    }
    let verdict = check(foam, judge, tables, write, limited).await?;
    foam.load(table).await?;
    judge.engine.load_as(table, judge.create).await?;
    Ok(verdict)
}

/// Runs `write`'s statements on both engines and compares their row counts,
/// then the table; with `limited`, the judge's subqueries that may give
/// several rows are limited to one.
async fn check(foam: &Foam, judge: &WriteJudge<'_>, tables: &[Table], write: &Write, limited: bool) -> Result<Verdict, String> {
    let mut taken = Vec::new();
    let mut failed = false;
    for sql in write.sql() {
        let judged = (judge.form)(&if limited { sql.replace(MANY_ROWS_MARK, " LIMIT 1)") } else { sql.clone() });
        let returned = returned_types(&sql);
        let (want, got) = match returned {
            Some(_) => tokio::join!(judge.engine.returned(&judged), foam.returned(&sql)),
            None => tokio::join!(judge.engine.command(&judged), foam.command(&sql)),
        };
        let stop = match (&want, &got) {
            (Outcome::TimedOut, _) | (_, Outcome::TimedOut) => Some(Verdict::TimedOut),
            (Outcome::Rows(want_rows), Outcome::Rows(got_rows)) if let Some(types) = &returned => {
                difference(want_rows, got_rows, types, false).map(|detail| Verdict::Differ {
                    detail: format!("{sql}: the rows returned: {detail}"),
                    taken: taken.clone(),
                    expected: None,
                })
            }
            (Outcome::Rows(want), Outcome::Rows(got)) if want == got => None,
            (Outcome::Error(..), Outcome::Error(..)) => {
                failed = true;
                None
            }
            (Outcome::Rows(_), Outcome::Error(state, _)) if state == "0A000" => Some(Verdict::Refused),
            (Outcome::Rows(_), Outcome::Error(state, _)) if TRANSIENT_STATES.contains(&state.as_str()) => Some(Verdict::Transient),
            (Outcome::Error(state, _), Outcome::Rows(_)) if state.starts_with("42") || state == "0A000" => Some(Verdict::Unjudged),
            (Outcome::Error(state, _), Outcome::Rows(_)) if state == CARDINALITY_VIOLATION && !limited && sql.contains(MANY_ROWS_MARK) => {
                Some(Verdict::Cardinality)
            }
            _ => Some(Verdict::Differ {
                detail: format!("{sql}: the judge {}, FoamDB {}", said(&want), said(&got)),
                taken: taken.clone(),
                expected: None,
            }),
        };
        taken.push((sql.clone(), matches!(want, Outcome::Rows(_))));
        if let Some(verdict) = stop {
            if write.end != End::Autocommit {
                let _ = tokio::join!(judge.engine.command("ROLLBACK"), foam.command("ROLLBACK"));
            }
            return Ok(verdict);
        }
    }
    let select = format!("SELECT * FROM {}", tables[write.target].name);
    let (want, got) = tokio::join!(judge.engine.query(&select), foam.query(&select));
    Ok(match (want, got) {
        (Outcome::Rows(want), Outcome::Rows(got)) => match difference(&want, &got, &column_types(), false) {
            None => Verdict::Agree { failed },
            Some(detail) => Verdict::Differ { detail: format!("the table after the write: {detail}"), taken, expected: Some(want) },
        },
        (Outcome::TimedOut, _) | (_, Outcome::TimedOut) => Verdict::TimedOut,
        (want, got) => Verdict::Differ { detail: format!("{select}: the judge {}, FoamDB {}", said(&want), said(&got)), taken, expected: None },
    })
}

/// An outcome in a few words.
fn said(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Rows(rows) => format!("touched {}", rows.iter().flatten().flatten().cloned().collect::<Vec<_>>().join("+")),
        Outcome::Error(state, message) => format!("failed ({state}: {message})"),
        Outcome::TimedOut => "timed out".into(),
    }
}
