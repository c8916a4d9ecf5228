//! SQLite's public sqllogictest corpus (`select1`–`select5`, 10,706 records
//! of CASE, scalar and correlated subqueries, compound selects and
//! many-table joins; see `shared/sqllogictest/README.md`) on a 1-node and a
//! 3-node cluster. The two must fail exactly the same records, and the
//! share that passes may not fall below [`PASS_RATE_FLOOR_PERCENT`]; the
//! records that fail are printed by file with their first error, so the
//! gap to full support stays visible.
//!
//! With `FOAM_CORPUS_FAILURES=<file>` every failing record is listed there
//! (nodes, file:line, first error line).
//!
//! The default run takes `select1`–`select3` (scalar and correlated
//! subqueries, CASE) and one query in [`DEFAULT_QUERY_SAMPLE`] of them (by
//! position, the same ones every time), about two minutes in the debug
//! profile. `FOAM_CORPUS_FILES=all` adds `select4` (compound selects, 1,025
//! statements) and `select5` (joins of up to 64 tables), and
//! `FOAM_CORPUS_SAMPLE=1` runs every query: about 7 minutes with
//! `--release`, as the benchmark report's figures are. In the debug
//! profile `select5`'s widest joins overflow a node's stack (release
//! builds run them).

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;

use sqllogictest::{DefaultColumnType, Record};

use common::slt_db::{DbError, SltDb, plain_value};

/// The least share of the corpus's records that must pass, on every
/// cluster size. Raise it as support grows; the goal is 99.
const PASS_RATE_FLOOR_PERCENT: f64 = 99.0;

/// One query in this many runs by default (see the module documentation).
const DEFAULT_QUERY_SAMPLE: usize = 8;

fn query_sample() -> usize {
    std::env::var("FOAM_CORPUS_SAMPLE").ok().and_then(|v| v.parse().ok()).filter(|n| *n > 0).unwrap_or(DEFAULT_QUERY_SAMPLE)
}

/// Results of more values than this are compared by their MD5, as SQLite's
/// own runner does by default (the corpus's expected answers are written so).
const SQLITE_HASH_THRESHOLD: usize = 8;

/// The corpus files, relative to the project root's parent.
const CORPUS_FILES: &[&str] = &["select1.test", "select2.test", "select3.test", "select4.test", "select5.test"];

/// The files of the default run (see the module documentation).
const DEFAULT_FILES: usize = 3;

fn corpus_files() -> &'static [&'static str] {
    match std::env::var("FOAM_CORPUS_FILES").as_deref() {
        Ok("all") => CORPUS_FILES,
        _ => &CORPUS_FILES[..DEFAULT_FILES],
    }
}

/// A value as SQLite's runner prints it: reals with three decimals.
fn sqlite_value(value: Option<&str>) -> String {
    match value {
        Some(text) if text.contains('.') => text.parse::<f64>().map_or(text.to_string(), |v| format!("{v:.3}")),
        other => plain_value(other),
    }
}

/// SQLite's files list a result one value per line, row after row (or as
/// one hash line): compare the values in that order.
fn value_per_line(normalizer: sqllogictest::Normalizer, actual: &[Vec<String>], expected: &[String]) -> bool {
    let actual: Vec<String> = actual.iter().flatten().map(normalizer).collect();
    let expected: Vec<String> = expected.iter().map(normalizer).collect();
    actual == expected
}

fn corpus_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/sqllogictest/sqlite")
}

/// Runs every corpus file on a fresh cluster of `nodes` and returns, per
/// file, the records run and the failing ones (line and first error line).
async fn run_corpus(nodes: usize) -> BTreeMap<String, (usize, Vec<(u32, String)>)> {
    let mut results = BTreeMap::new();
    for name in corpus_files() {
        let path = corpus_dir().join(name);
        let records = sqllogictest::parse_file::<DefaultColumnType>(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let cluster = common::Cluster::start(nodes);
        let url = cluster.url(nodes - 1);
        let mut runner = sqllogictest::Runner::new(move || {
            let url = url.clone();
            async move { Ok::<_, DbError>(SltDb { client: common::connect(&url).await, format_value: sqlite_value, engine: "postgresql" }) }
        });
        runner.add_label("postgresql");
        runner.with_hash_threshold(SQLITE_HASH_THRESHOLD);
        runner.with_validator(value_per_line);
        let mut run = 0;
        let mut failures = Vec::new();
        let sample = query_sample();
        let mut queries_seen = 0;
        for record in records {
            if let Record::Query { .. } = &record {
                queries_seen += 1;
                if (queries_seen - 1) % sample != 0 {
                    continue;
                }
            }
            let line = match &record {
                Record::Statement { loc, .. } | Record::Query { loc, .. } => Some(loc.line()),
                _ => None,
            };
            let outcome = runner.run_async(record).await;
            if let Some(line) = line {
                run += 1;
                if let Err(error) = outcome {
                    failures.push((line, error.to_string().lines().next().unwrap_or_default().to_string()));
                }
            }
        }
        results.insert(name.to_string(), (run, failures));
    }
    results
}

fn summary(nodes: usize, results: &BTreeMap<String, (usize, Vec<(u32, String)>)>) -> (f64, String) {
    let run: usize = results.values().map(|(r, _)| r).sum();
    let failed: usize = results.values().map(|(_, f)| f.len()).sum();
    let rate = 100.0 * (run - failed) as f64 / run.max(1) as f64;
    let mut text = format!("{nodes} node(s): {} of {run} records pass ({rate:.2}%)\n", run - failed);
    for (file, (run, failures)) in results {
        text.push_str(&format!("  {file}: {} of {run} fail", failures.len()));
        if let Some((line, error)) = failures.first() {
            text.push_str(&format!(", first at line {line}: {error}"));
        }
        text.push('\n');
    }
    (rate, text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_select_corpus_passes_alike_on_one_and_three_nodes() {
    let one = run_corpus(1).await;
    let three = run_corpus(3).await;
    if let Ok(path) = std::env::var("FOAM_CORPUS_FAILURES") {
        let mut listing = String::new();
        for (nodes, results) in [(1, &one), (3, &three)] {
            for (file, (_, failures)) in results {
                for (line, error) in failures {
                    listing.push_str(&format!("{nodes}\t{file}:{line}\t{error}\n"));
                }
            }
        }
        std::fs::write(&path, listing).expect("write the failure listing");
    }
    let (one_rate, one_text) = summary(1, &one);
    let (three_rate, three_text) = summary(3, &three);
    eprintln!("{one_text}{three_text}");
    for (file, (_, failures)) in &one {
        let lines = |f: &Vec<(u32, String)>| f.iter().map(|(l, _)| *l).collect::<Vec<_>>();
        let other = three.get(file).map(|(_, f)| lines(f)).unwrap_or_default();
        let only_one: Vec<u32> = lines(failures).into_iter().filter(|l| !other.contains(l)).collect();
        let only_three: Vec<u32> = other.iter().copied().filter(|l| !lines(failures).contains(l)).collect();
        assert!(
            only_one.is_empty() && only_three.is_empty(),
            "{file}: records failing on 1 node only {only_one:?}, on 3 nodes only {only_three:?}"
        );
    }
    assert!(one_rate >= PASS_RATE_FLOOR_PERCENT && three_rate >= PASS_RATE_FLOOR_PERCENT, "pass rate fell:\n{one_text}{three_text}");
}
