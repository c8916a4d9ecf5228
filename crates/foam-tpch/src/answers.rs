//! Answer sets from outside DataFusion, the engine FoamDB is built on: a
//! bug the two share cannot hide from these.
//!
//! Both are in the TPC-H kit's answer format (`answers/q<N>.out`: a header
//! line, then one row per line, fields separated by `|`, padded with spaces):
//!
//! ```text
//!   DUCKDB_SF0_01  ── DuckDB's answers over this crate's generated data at SF 0.01,
//!                     written by `bench/duckdb_tpch.py --answers-out` (committed
//!                     in answers/duckdb-sf0.01; the CI test compares with them)
//!   read_answer_set ── any directory of such files, e.g. the official answers of
//!                     the TPC-H kit at SF 1 (`foam tpch check --answers DIR`)
//! ```

use std::path::Path;

use crate::queries::QUERIES;

/// DuckDB's answers to the 22 queries at SF 0.01, in query order.
pub const DUCKDB_SF0_01: [&str; 22] = [
    include_str!("../answers/duckdb-sf0.01/q1.out"),
    include_str!("../answers/duckdb-sf0.01/q2.out"),
    include_str!("../answers/duckdb-sf0.01/q3.out"),
    include_str!("../answers/duckdb-sf0.01/q4.out"),
    include_str!("../answers/duckdb-sf0.01/q5.out"),
    include_str!("../answers/duckdb-sf0.01/q6.out"),
    include_str!("../answers/duckdb-sf0.01/q7.out"),
    include_str!("../answers/duckdb-sf0.01/q8.out"),
    include_str!("../answers/duckdb-sf0.01/q9.out"),
    include_str!("../answers/duckdb-sf0.01/q10.out"),
    include_str!("../answers/duckdb-sf0.01/q11.out"),
    include_str!("../answers/duckdb-sf0.01/q12.out"),
    include_str!("../answers/duckdb-sf0.01/q13.out"),
    include_str!("../answers/duckdb-sf0.01/q14.out"),
    include_str!("../answers/duckdb-sf0.01/q15.out"),
    include_str!("../answers/duckdb-sf0.01/q16.out"),
    include_str!("../answers/duckdb-sf0.01/q17.out"),
    include_str!("../answers/duckdb-sf0.01/q18.out"),
    include_str!("../answers/duckdb-sf0.01/q19.out"),
    include_str!("../answers/duckdb-sf0.01/q20.out"),
    include_str!("../answers/duckdb-sf0.01/q21.out"),
    include_str!("../answers/duckdb-sf0.01/q22.out"),
];

/// The rows of one answer file: the header line skipped, every field trimmed
/// (the kit pads text on the right and numbers on the left).
pub fn parse_answer(text: &str) -> Vec<Vec<String>> {
    text.lines()
        .skip(1)
        .filter(|line| !line.trim().is_empty())
        .map(|line| line.split('|').map(|field| field.trim().to_string()).collect())
        .collect()
}

/// The 22 answers of a directory holding `q1.out` .. `q22.out`.
pub fn read_answer_set(dir: &Path) -> Result<Vec<Vec<Vec<String>>>, String> {
    (1..=QUERIES.len())
        .map(|number| {
            let path = dir.join(format!("q{number}.out"));
            std::fs::read_to_string(&path).map(|text| parse_answer(&text)).map_err(|e| format!("{}: {e}", path.display()))
        })
        .collect()
}

/// Runs `sql` over the simple protocol and returns its rows as text, NULL as
/// "NULL": what a client sees, with no FoamDB code in the comparison.
pub async fn query_rows(client: &tokio_postgres::Client, sql: &str) -> Result<Vec<Vec<String>>, tokio_postgres::Error> {
    Ok(simple_rows(&client.simple_query(sql).await?))
}

/// The rows among simple-protocol messages, as text, NULL as "NULL".
pub fn simple_rows(messages: &[tokio_postgres::SimpleQueryMessage]) -> Vec<Vec<String>> {
    messages
        .iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(row) => {
                Some((0..row.len()).map(|i| row.get(i).unwrap_or("NULL").to_string()).collect())
            }
            _ => None,
        })
        .collect()
}

/// One query's verdict against an answer set.
#[derive(Debug)]
pub struct Verdict {
    /// 1-based query number.
    pub query: usize,
    pub rows: usize,
    /// None when the answer matched; else what differed, or the error.
    pub difference: Option<String>,
}

/// Runs the 22 queries through `client` and compares each answer with
/// `expected` (see [`crate::reference::compare`] for the tolerance).
pub async fn check(client: &tokio_postgres::Client, expected: &[Vec<Vec<String>>]) -> Vec<Verdict> {
    let mut verdicts = Vec::new();
    for (index, (sql, want)) in QUERIES.iter().zip(expected).enumerate() {
        let (rows, difference) = match query_rows(client, sql).await {
            Ok(got) => (got.len(), crate::reference::compare(want, &got).err()),
            Err(error) => {
                let message = match error.as_db_error() {
                    Some(db) => format!("[{}] {}", db.code().code(), db.message()),
                    None => error.to_string(),
                };
                (0, Some(message))
            }
        };
        verdicts.push(Verdict { query: index + 1, rows, difference });
    }
    verdicts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kit_format_is_trimmed_and_its_header_skipped() {
        let text = "l_orderkey            |revenue     |o_orderdat\n               2456423|406181.01|1995-03-05\n\n";
        assert_eq!(parse_answer(text), vec![vec!["2456423".to_string(), "406181.01".into(), "1995-03-05".into()]]);
    }

    #[test]
    fn the_committed_duckdb_answers_are_whole() {
        let answers: Vec<_> = DUCKDB_SF0_01.iter().map(|text| parse_answer(text)).collect();
        // Every query has rows at SF 0.01, and each row as many fields as its header.
        for (index, (text, rows)) in DUCKDB_SF0_01.iter().zip(&answers).enumerate() {
            let columns = text.lines().next().unwrap_or_default().split('|').count();
            assert!(!rows.is_empty(), "q{} has no rows", index + 1);
            assert!(rows.iter().all(|row| row.len() == columns), "q{}: a row's field count differs from its header", index + 1);
        }
        // Q1's four groups, Q6's one sum.
        assert_eq!(answers[0].len(), 4);
        assert_eq!(answers[5].len(), 1);
    }
}
