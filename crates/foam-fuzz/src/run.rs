//! The fuzz loop: for each seed a random database on both engines, then
//! random queries on both, any difference reduced and reported.
//!
//! ```text
//!   seed ─▶ schema::generate ─▶ tables on FoamDB (with layouts) and on the reference
//!   (seed, i) ─▶ query::generate ─▶ FoamDB answer ─┐
//!                                 reference answer ─┴▶ compare ─▶ differ? ─▶ reduce ─▶ Failure
//! ```
//! A difference is: different rows (as multisets, or in order under a full
//! ORDER BY), an error on one side only, or a query whose rows differ from the
//! UNION ALL of its rows where a predicate is true, false and NULL (ternary
//! logic partitioning, checked on FoamDB when the reference agrees with
//! itself). Both sides failing, or either timing out, is counted, not
//! compared. With a PostgreSQL server to ask (`FuzzConfig::postgres`), a
//! difference where PostgreSQL answers exactly as FoamDB does is the
//! reference's error: counted and listed, not a failure.

use std::cell::{Cell, RefCell};
use std::time::{Duration, Instant};

use futures::StreamExt;

use datafusion::arrow::datatypes::DataType;

use crate::choices::Choices;
use crate::compare::{Rows, difference};
use crate::engines::{Foam, Outcome, RULE_SWITCHES};
use crate::postgres_form::postgres_form;
use crate::reference::Reference;
use crate::query::{self, Query};
use crate::schema::{self, Database, Table, set_time_zone};
use crate::writes::{WriteJudge, check_writes};

/// Queries of one seed are numbered below this; query `i` of seed `s`
/// draws its choices from seed `s * QUERIES_PER_SEED_MAX + i`.
pub const QUERIES_PER_SEED_MAX: u64 = 1 << 20;
/// The schema of seed `s` draws from seed `s ^ SCHEMA_SEED_SALT`.
const SCHEMA_SEED_SALT: u64 = 0x5eed_5c4e_3a00_0000;
/// Candidate cases one reduction may try, and how long it may take.
const REDUCE_TRIES_MAX: u32 = 500;
const REDUCE_TIME_MAX: Duration = Duration::from_secs(120);

/// What to run.
#[derive(Clone, Debug)]
pub struct FuzzConfig {
    /// Any node's SQL endpoint.
    pub url: String,
    pub seeds: Vec<u64>,
    pub queries_per_seed: u64,
    /// Fuzz tables are named `{table_prefix}{i}` (dropped and created anew
    /// for every seed).
    pub table_prefix: String,
    /// Reduce each failing case to a small one.
    pub reduce: bool,
    /// Stop after this many failures.
    pub failures_max: usize,
    /// A PostgreSQL server (URL) holding a scratch database: the judge of
    /// the two engines' differences (see the module documentation).
    pub postgres: Option<String>,
    /// An executable that serves the reference (`foam bench fuzz-reference`)
    /// in a child process the harness can kill (`reference.rs`); None runs
    /// it in this process.
    pub reference_exe: Option<std::path::PathBuf>,
    /// Queries checked at once, each on a FoamDB session and a reference
    /// of its own (a lane); differences are reduced one at a time on the
    /// first lane after the seed's queries.
    pub lanes: usize,
    /// Random writes per seed after its queries (`writes.rs`), judged by
    /// the PostgreSQL server, else by `writes_judge`.
    pub writes_per_seed: u64,
    /// A FoamDB (URL, best one node) that judges writes when there is no
    /// PostgreSQL server.
    pub writes_judge: Option<String>,
    /// Leave the last seed's tables on FoamDB, to rerun a failing query by
    /// hand (an internal error both engines share is not reduced).
    pub keep_tables: bool,
}

/// How two answers differ.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Both answered, with different rows.
    WrongAnswer,
    /// FoamDB failed where the reference answered: its SQLSTATE and the
    /// start of its message without numbers, so a reduction keeps the
    /// same error, not just any error with the same SQLSTATE.
    FoamError(String),
    /// FoamDB answered where the reference failed.
    ReferenceError,
    /// FoamDB's rows differ from the union of its rows under p, NOT p and
    /// p IS NULL.
    Partitioning,
    /// A write's statements or the table it left differ from the judge's.
    WrongWrite,
}

/// A reproduction: the tables it needs, the query, and the right answer.
#[derive(Clone, Debug)]
pub struct Case {
    pub tables: Vec<Table>,
    /// Statements run before the query, and whether each succeeds (a
    /// write's, as the judge took them).
    pub setup: Vec<(String, bool)>,
    pub query: Query,
    /// The reference's answer and column types, when it answered.
    pub expected: Option<(Rows, Vec<DataType>)>,
}

/// One difference found.
#[derive(Clone, Debug)]
pub struct Failure {
    pub seed: u64,
    pub query_index: u64,
    pub kind: Kind,
    pub sql: String,
    pub detail: String,
    /// The smallest case found that fails the same way.
    pub reduced: Option<Case>,
    /// FoamDB rules whose switch, turned off, makes the reduced case pass.
    pub rules: Vec<String>,
}

/// What a run did.
#[derive(Clone, Debug, Default)]
pub struct Report {
    pub seeds: u64,
    pub queries: u64,
    /// Both answered and were compared.
    pub compared: u64,
    pub both_failed: u64,
    /// Of those, FoamDB's error was internal (XX000): DataFusion's bugs,
    /// which the reference shares.
    pub both_failed_internal: u64,
    pub timed_out: u64,
    /// FoamDB answered a query the reference cannot run at all (a
    /// correlated subquery stock DataFusion does not unnest): unchecked
    /// here; the slt tests check those answers against PostgreSQL's.
    pub reference_unsupported: u64,
    /// Of the queries the reference cannot run, those PostgreSQL answered
    /// as FoamDB did (with `--postgres`; not counted in the one above).
    pub judged_by_postgres_alone: u64,
    /// FoamDB answered where PostgreSQL failed with 21000 on a scalar
    /// subquery of several rows no row of the answer reads: PostgreSQL
    /// answered as FoamDB did with each such subquery limited to one row
    /// (see [`Query::limited`]).
    pub unread_subqueries: u64,
    pub partitioning_checks: u64,
    pub writes: crate::writes::WriteTally,
    /// Differences where PostgreSQL answered as FoamDB did: the
    /// reference's errors (seed, query, how it differed).
    pub reference_wrong: Vec<(u64, u64, String)>,
    pub failures: Vec<Failure>,
    pub elapsed: Duration,
}

/// The verdict on one query.
enum Verdict {
    Agree,
    BothFailed {
        /// FoamDB's error, when it was an internal one (XX000).
        internal: Option<String>,
    },
    TimedOut,
    /// The reference cannot run the query (see [`reference_lacks`]).
    Unjudged,
    /// The reference cannot run the query; PostgreSQL answered as FoamDB did.
    JudgedAlone,
    /// PostgreSQL answered as FoamDB did where the reference differed.
    ReferenceWrong(String),
    /// PostgreSQL failed with 21000 on a subquery FoamDB's answer does not
    /// read (counted in `unread_subqueries`).
    Unread,
    Differ(Kind, String),
}

/// Whether the reference's error says it lacks a feature FoamDB adds to
/// DataFusion, rather than that the query is wrong: stock DataFusion
/// leaves some correlated subqueries as expressions no operator runs, or
/// fails decorrelating them (FoamDB unnests those, `unnest_subqueries.rs`),
/// or fails one that does not aggregate.
fn reference_lacks(message: &str) -> bool {
    message.contains("Physical plan does not support logical expression")
        || message.contains("Optimizer rule 'scalar_subquery_to_join' failed")
        || message.contains("Optimizer rule 'decorrelate_predicate_subquery' failed")
        || message.contains("Correlated scalar subquery must be aggregated")
        // Stock DataFusion's own handling of scalar subqueries that do not
        // aggregate, which FoamDB replaces (`scalar_subquery.rs`).
        || message.contains("Scalar subquery returned more than one row")
        || message.contains("is declared as non-nullable but contains null values")
        // A grouped scalar subquery whose correlation DataFusion's simplifier
        // folds away with a constant conjunct, which FoamDB's front end moves
        // to HAVING first (`frontend/scalar_subquery.rs`).
        || message.contains("A GROUP BY clause in a scalar correlated subquery cannot contain non-correlated columns")
}

/// PostgreSQL's SQLSTATE for a scalar subquery that gave several rows.
pub(crate) const CARDINALITY_VIOLATION: &str = "21000";

/// What a query's check needs: both engines and the tables they hold.
struct Bench<'a> {
    foam: &'a Foam,
    reference: &'a Reference,
    /// The judge, holding the same tables, when there is one.
    postgres: Option<&'a Foam>,
}

impl Bench<'_> {
    async fn check(&self, query: &Query) -> (Verdict, Option<(Rows, Vec<DataType>)>) {
        // The engines are separate processes: asking both at once halves
        // the wait when neither keeps both cores busy.
        let ((expected, types), actual) = tokio::join!(self.reference.query(&query.sql), self.foam.query(&query.sql));
        let expected_rows = match &expected {
            Outcome::Rows(rows) => Some((rows.clone(), types.clone())),
            _ => None,
        };
        if let (Outcome::Error(_, message), Outcome::Rows(got)) = (&expected, &actual)
            && reference_lacks(message)
        {
            return self.judge_alone(query, got).await;
        }
        let verdict = match (&expected, &actual) {
            (Outcome::TimedOut, _) | (_, Outcome::TimedOut) => Verdict::TimedOut,
            // Both failing is no difference, even when FoamDB's error is an
            // internal one: the reference, which runs no FoamDB code, has the
            // same bug (DataFusion's), and the run counts these apart.
            (Outcome::Error(..), Outcome::Error(_, message)) => {
                Verdict::BothFailed { internal: actual.is_internal_error().then(|| message.clone()) }
            }
            (Outcome::Rows(_), Outcome::Error(state, message)) => Verdict::Differ(Kind::FoamError(signature(state, message)), message.clone()),
            (Outcome::Error(_, message), Outcome::Rows(_)) => Verdict::Differ(Kind::ReferenceError, message.clone()),
            (Outcome::Rows(want), Outcome::Rows(got)) => match difference(want, got, &types, query.ordered) {
                Some(detail) => Verdict::Differ(Kind::WrongAnswer, detail),
                None => match &query.partitioned {
                    Some(partitioned) => self.check_partitioning(want, partitioned, &types).await,
                    None => Verdict::Agree,
                },
            },
        };
        let verdict = match (verdict, &actual) {
            (Verdict::Differ(kind @ (Kind::WrongAnswer | Kind::ReferenceError), detail), Outcome::Rows(got)) => {
                self.judge(query, got, &types, kind, detail).await
            }
            (Verdict::Differ(Kind::FoamError(signature), detail), Outcome::Error(state, _)) => {
                self.judge_error(query, state, Kind::FoamError(signature), detail).await
            }
            (Verdict::Agree, Outcome::Rows(got)) if query.cardinality => self.judge_cardinality(query, got, &types).await,
            (verdict, _) => verdict,
        };
        (verdict, expected_rows)
    }

    /// A query only FoamDB runs (the reference lacks what it needs, see
    /// [`reference_lacks`]), put to PostgreSQL when there is one: its rows
    /// are then the expected ones (as text: no types are known).
    async fn judge_alone(&self, query: &Query, got: &Rows) -> (Verdict, Option<(Rows, Vec<DataType>)>) {
        let Some(postgres) = self.postgres else { return (Verdict::Unjudged, None) };
        let judged = match postgres.query(&postgres_form(&query.sql)).await {
            Outcome::Rows(judged) => judged,
            // PostgreSQL found a scalar subquery of several rows where FoamDB
            // answered; other errors of PostgreSQL's may be of its dialect.
            Outcome::Error(state, message) if state == CARDINALITY_VIOLATION => {
                let detail = format!("PostgreSQL fails with {state} ({message}) where FoamDB answers");
                return (self.judge_unread(query, got, &[], detail).await, None);
            }
            _ => return (Verdict::Unjudged, None),
        };
        let types = vec![DataType::Utf8; judged.first().or(got.first()).map_or(0, |row| row.len())];
        let verdict = match difference(&judged, got, &[], query.ordered) {
            None => Verdict::JudgedAlone,
            Some(detail) => Verdict::Differ(Kind::WrongAnswer, format!("{detail} (PostgreSQL's answer; the reference cannot run the query)")),
        };
        (verdict, Some((judged, types)))
    }

    /// A difference where FoamDB answered `got`, put to PostgreSQL: the
    /// reference's error if PostgreSQL answers the same rows.
    async fn judge(&self, query: &Query, got: &Rows, types: &[DataType], kind: Kind, detail: String) -> Verdict {
        let Some(postgres) = self.postgres else { return Verdict::Differ(kind, detail) };
        match postgres.query(&postgres_form(&query.sql)).await {
            Outcome::Rows(judged) if difference(&judged, got, types, query.ordered).is_none() => Verdict::ReferenceWrong(detail),
            _ => Verdict::Differ(kind, detail),
        }
    }

    /// An answer both engines gave to a query with a scalar subquery that
    /// may give several rows: a wrong answer if PostgreSQL fails with 21000
    /// on a subquery the answer reads.
    async fn judge_cardinality(&self, query: &Query, got: &Rows, types: &[DataType]) -> Verdict {
        let Some(postgres) = self.postgres else { return Verdict::Agree };
        match postgres.query(&postgres_form(&query.sql)).await {
            Outcome::Error(state, message) if state == CARDINALITY_VIOLATION => {
                self.judge_unread(query, got, types, format!("PostgreSQL fails with {state} ({message}) where both engines answer")).await
            }
            _ => Verdict::Agree,
        }
    }

    /// FoamDB's answer `got` where PostgreSQL failed with 21000: unread
    /// subqueries if PostgreSQL answers the same with each subquery that
    /// may give several rows limited to one, else a wrong answer (`detail`).
    async fn judge_unread(&self, query: &Query, got: &Rows, types: &[DataType], detail: String) -> Verdict {
        let (Some(postgres), Some(limited)) = (self.postgres, query.limited()) else { return Verdict::Differ(Kind::WrongAnswer, detail) };
        match postgres.query(&postgres_form(&limited)).await {
            Outcome::Rows(judged) if difference(&judged, got, types, query.ordered).is_none() => Verdict::Unread,
            _ => Verdict::Differ(Kind::WrongAnswer, detail),
        }
    }

    /// An error of FoamDB's where the reference answered, put to
    /// PostgreSQL: the reference's error if PostgreSQL fails with the same
    /// SQLSTATE (stock DataFusion answers where PostgreSQL gives 21000 for
    /// a scalar subquery of several rows, and FoamDB fails as PostgreSQL).
    async fn judge_error(&self, query: &Query, state: &str, kind: Kind, detail: String) -> Verdict {
        let Some(postgres) = self.postgres else { return Verdict::Differ(kind, detail) };
        match postgres.query(&postgres_form(&query.sql)).await {
            Outcome::Error(judged, _) if judged == *state && !state.starts_with("XX") => Verdict::ReferenceWrong(detail),
            _ => Verdict::Differ(kind, detail),
        }
    }

    /// FoamDB's rows of the partitioned form against its (already checked)
    /// rows of the query, when the reference's two answers agree.
    async fn check_partitioning(&self, rows: &Rows, partitioned: &str, types: &[DataType]) -> Verdict {
        let ((reference, _), foam) = tokio::join!(self.reference.query(partitioned), self.foam.query(partitioned));
        let Outcome::Rows(reference) = reference else { return Verdict::Agree };
        if difference(rows, &reference, types, false).is_some() {
            // The reference disagrees with itself: nothing to say of FoamDB.
            return Verdict::Agree;
        }
        match foam {
            Outcome::Rows(foam) => match difference(rows, &foam, types, false) {
                Some(detail) => Verdict::Differ(Kind::Partitioning, format!("{detail}\npartitioned: {partitioned}")),
                None => Verdict::Agree,
            },
            Outcome::TimedOut => Verdict::TimedOut,
            Outcome::Error(state, message) => Verdict::Differ(Kind::FoamError(signature(&state, &message)), format!("{message}\npartitioned: {partitioned}")),
        }
    }

    async fn fails_as(&self, query: &Query, kind: &Kind) -> bool {
        matches!(self.check(query).await.0, Verdict::Differ(k, _) if k == *kind)
    }
}

/// Letters of an error message that identify it in [`Kind::FoamError`].
const ERROR_SIGNATURE_CHARS: usize = 60;

fn signature(state: &str, message: &str) -> String {
    let first_line = message.lines().next().unwrap_or_default();
    let text: String = first_line.chars().filter(|c| !c.is_ascii_digit()).take(ERROR_SIGNATURE_CHARS).collect();
    format!("{state} {text}")
}

/// The database of `seed`: its tables, named `{prefix}{i}`, the session
/// time zone and the rule switches its queries run with off.
pub fn seed_database(seed: u64, prefix: &str) -> Database {
    let mut choices = Choices::random(seed ^ SCHEMA_SEED_SALT);
    let tables = schema::generate(&mut choices, prefix);
    let rules_off = if choices.chance(30) { RULE_SWITCHES.iter().copied().filter(|_| choices.chance(50)).collect() } else { Vec::new() };
    let time_zone = schema::time_zone(&mut choices);
    Database { tables, time_zone, rules_off }
}

/// The choices query `index` of `seed` is generated from.
pub fn query_choices(seed: u64, index: u64) -> Choices {
    Choices::random(seed.wrapping_mul(QUERIES_PER_SEED_MAX).wrapping_add(index))
}

/// Runs the fuzzer; `progress` hears a line after every seed.
pub async fn run(config: &FuzzConfig, mut progress: impl FnMut(&str)) -> Result<Report, String> {
    let started = Instant::now();
    let mut sessions = Vec::new();
    for _ in 0..config.lanes.max(1) {
        sessions.push(Foam::connect_checked(&config.url).await?);
    }
    let postgres = match &config.postgres {
        Some(url) => Some(Foam::connect(url).await?),
        None => None,
    };
    let foam_judge = match (&postgres, &config.writes_judge) {
        (None, Some(url)) if config.writes_per_seed > 0 => Some(Foam::connect(url).await?),
        _ => None,
    };
    let write_judge = match (&postgres, &foam_judge) {
        (Some(engine), _) => Some(WriteJudge {
            engine,
            create: Table::create_postgres,
            create_upsert: Table::create_postgres_arbiter,
            form: postgres_form,
        }),
        (None, Some(engine)) => Some(WriteJudge { engine, create: Table::create_foam, create_upsert: Table::create_foam, form: str::to_string }),
        (None, None) if config.writes_per_seed > 0 => return Err("writes need a judge: a PostgreSQL server or a FoamDB to compare with".into()),
        (None, None) => None,
    };
    let mut report = Report::default();
    for &seed in &config.seeds {
        let Database { tables, time_zone, rules_off: off } = seed_database(seed, &config.table_prefix);
        let zone_setting = set_time_zone(time_zone);
        sessions[0].load(&tables).await?;
        let mut references = Vec::new();
        for session in &sessions {
            session.set_rules_off(&off).await?;
            session.execute(&zone_setting).await?;
            references.push(Reference::new(&tables, time_zone, config.reference_exe.as_deref()).await?);
        }
        for judge in postgres.iter().chain(&foam_judge) {
            judge.execute(&zone_setting).await?;
        }
        if let Some(postgres) = &postgres {
            postgres.load_plain(&tables).await?;
        }
        let lanes: Vec<Bench> =
            sessions.iter().zip(&references).map(|(foam, reference)| Bench { foam, reference, postgres: postgres.as_ref() }).collect();
        let (bench, foam) = (&lanes[0], &sessions[0]);
        // Queries run on whichever lane is free, so one that runs into its
        // timeout holds up only its own lane. Differences are reduced after
        // the seed's last query, on the first lane, while nothing else runs.
        let free_lanes = RefCell::new((0..lanes.len()).collect::<Vec<usize>>());
        let stop = Cell::new(false);
        let mut checks = futures::stream::iter(0..config.queries_per_seed.min(QUERIES_PER_SEED_MAX))
            .map(|index| {
                let (free_lanes, stop, lanes, tables) = (&free_lanes, &stop, &lanes, &tables);
                async move {
                    if stop.get() {
                        return None;
                    }
                    let lane = free_lanes.borrow_mut().pop().expect("no more queries in flight than lanes");
                    let mut choices = query_choices(seed, index);
                    let query = query::generate(&mut choices, tables);
                    let verdict = lanes[lane].check(&query).await.0;
                    free_lanes.borrow_mut().push(lane);
                    Some((index, choices, query, verdict))
                }
            })
            .buffer_unordered(lanes.len());
        let mut differences = Vec::new();
        while let Some(checked) = checks.next().await {
            let Some((index, choices, query, verdict)) = checked else { continue };
            report.queries += 1;
            report.partitioning_checks += u64::from(query.partitioned.is_some());
            match verdict {
                Verdict::Agree => report.compared += 1,
                Verdict::BothFailed { internal } => {
                    report.both_failed += 1;
                    if let Some(message) = internal {
                        // Not a difference, but an error no user should see.
                        progress(&format!("seed {seed} query {index}: both failed, FoamDB with an internal error: {message}\n  {}", query.sql));
                        report.both_failed_internal += 1;
                    }
                }
                Verdict::TimedOut => report.timed_out += 1,
                Verdict::Unjudged => report.reference_unsupported += 1,
                Verdict::JudgedAlone => report.judged_by_postgres_alone += 1,
                Verdict::Unread => report.unread_subqueries += 1,
                Verdict::ReferenceWrong(detail) => {
                    progress(&format!("seed {seed} query {index}: the reference is wrong (PostgreSQL answers as FoamDB): {detail}\n  {}", query.sql));
                    report.reference_wrong.push((seed, index, detail));
                }
                Verdict::Differ(kind, detail) => {
                    progress(&format!("seed {seed} query {index}: {kind:?}: {detail}\n  {}", query.sql));
                    differences.push((Failure { seed, query_index: index, kind, sql: query.sql.clone(), detail, reduced: None, rules: Vec::new() }, choices));
                    stop.set(report.failures.len() + differences.len() >= config.failures_max);
                }
            }
        }
        drop(checks);
        differences.sort_by_key(|(failure, _)| failure.query_index);
        for (mut failure, choices) in differences {
            if config.reduce {
                let name = format!("{}s{seed}q{}t", config.table_prefix, failure.query_index);
                let mut case = reduce(bench, &tables, choices.recorded().to_vec(), &failure.kind, &name).await?;
                case.setup.insert(0, (zone_setting.clone(), true));
                failure.rules = rules_behind(bench, &case, &failure.kind, &off).await?;
                foam.set_rules_off(&off).await?;
                let sided = bench.postgres_sides_with_foam(&case).await?;
                foam.drop_tables(&case.tables).await?;
                failure.reduced = Some(case);
                // The original may use what PostgreSQL cannot run
                // (DataFusion's LEFT SEMI JOIN); its reduced case is judged too.
                if sided && matches!(failure.kind, Kind::WrongAnswer | Kind::ReferenceError) {
                    progress(&format!(
                        "seed {seed} query {}: the reference is wrong (PostgreSQL answers the reduced case as FoamDB)",
                        failure.query_index
                    ));
                    report.reference_wrong.push((seed, failure.query_index, format!("on the reduced case: {}", failure.detail)));
                    continue;
                }
            }
            report.failures.push(failure);
        }
        if let Some(judge) = write_judge.as_ref().filter(|_| config.writes_per_seed > 0 && report.failures.len() < config.failures_max) {
            let mut found = check_writes(foam, judge, &tables, seed, config.writes_per_seed, &mut report.writes, &mut progress).await?;
            for case in found.iter_mut().filter_map(|failure| failure.reduced.as_mut()) {
                case.setup.insert(0, (zone_setting.clone(), true));
            }
            report.failures.extend(found.into_iter().take(config.failures_max - report.failures.len()));
            judge.engine.drop_tables(&tables).await?;
        }
        if !(config.keep_tables && seed == *config.seeds.last().unwrap_or(&seed)) {
            foam.drop_tables(&tables).await?;
        }
        report.seeds += 1;
        progress(&format!(
            "seed {seed}: {} queries so far, {} compared, {} both failed, {} timed out, {} failures ({:.0} s)",
            report.queries,
            report.compared,
            report.both_failed,
            report.timed_out,
            report.failures.len(),
            started.elapsed().as_secs_f64()
        ));
        if report.failures.len() >= config.failures_max {
            break;
        }
    }
    report.elapsed = started.elapsed();
    Ok(report)
}

impl Bench<'_> {
    /// Whether the PostgreSQL judge, given the reduced case's tables, answers
    /// its query as FoamDB does (false without a judge, or when either fails).
    async fn postgres_sides_with_foam(&self, case: &Case) -> Result<bool, String> {
        let Some(postgres) = self.postgres else { return Ok(false) };
        postgres.load_plain(&case.tables).await?;
        let (judged, got) = (postgres.query(&postgres_form(&case.query.sql)).await, self.foam.query(&case.query.sql).await);
        postgres.drop_tables(&case.tables).await?;
        let types = case.expected.as_ref().map(|(_, types)| types.as_slice()).unwrap_or_default();
        Ok(match (judged, got) {
            (Outcome::Rows(judged), Outcome::Rows(got)) => difference(&judged, &got, types, case.query.ordered).is_none(),
            _ => false,
        })
    }
}

/// Shrinks a failing case: first its query (editing the recorded choices
/// and generating again, keeping any smaller query that fails the same
/// way), then the rows of the tables it reads (on copies named
/// `{name}{i}`, so the seed's own tables stay as they are).
async fn reduce(bench: &Bench<'_>, tables: &[Table], recorded: Vec<u32>, kind: &Kind, name: &str) -> Result<Case, String> {
    let started = Instant::now();
    let mut tries = 0u32;
    let within_budget = |tries: u32| tries < REDUCE_TRIES_MAX && started.elapsed() < REDUCE_TIME_MAX;

    let mut tables: Vec<Table> = tables.iter().enumerate().map(|(i, t)| Table { name: format!("{name}{i}"), ..t.clone() }).collect();
    bench.foam.load(&tables).await?;
    bench.reference.load(&tables).await?;
    let generate = |choices: &[u32], tables: &[Table]| {
        let mut replay = Choices::replay(choices.to_vec());
        let query = query::generate(&mut replay, tables);
        (query, replay.used())
    };
    let (mut best, mut best_choices) = generate(&recorded, &tables);
    let size = |q: &Query| q.sql.len() + q.partitioned.as_ref().map_or(0, |p| p.len());

    // The query: delete runs of choices, then lower single ones.
    let mut improved = true;
    while improved && within_budget(tries) {
        improved = false;
        let mut chunk = (best_choices.len() / 2).max(1);
        loop {
            let mut start = 0;
            while start < best_choices.len() && within_budget(tries) {
                let mut candidate = best_choices.clone();
                candidate.drain(start..(start + chunk).min(candidate.len()));
                let (query, used) = generate(&candidate, &tables);
                if size(&query) < size(&best) {
                    tries += 1;
                    if bench.fails_as(&query, kind).await {
                        (best, best_choices) = (query, used);
                        improved = true;
                        continue;
                    }
                }
                start += chunk;
            }
            if chunk == 1 {
                break;
            }
            chunk /= 2;
        }
        for index in 0..best_choices.len() {
            for lower in [0, best_choices.get(index).copied().unwrap_or(0) / 2] {
                if index >= best_choices.len() || best_choices[index] <= lower || !within_budget(tries) {
                    continue;
                }
                let mut candidate = best_choices.clone();
                candidate[index] = lower;
                let (query, used) = generate(&candidate, &tables);
                if size(&query) <= size(&best) && query.sql != best.sql {
                    tries += 1;
                    if bench.fails_as(&query, kind).await {
                        (best, best_choices) = (query, used);
                        improved = true;
                    }
                }
            }
        }
    }

    // The rows: drop runs of rows from each table the query reads.
    for index in 0..tables.len() {
        if !mentions(&best, &tables[index].name) {
            continue;
        }
        let mut chunk = (tables[index].rows.len() / 2).max(1);
        while !tables[index].rows.is_empty() {
            let mut start = 0;
            while start < tables[index].rows.len() && within_budget(tries) {
                let mut candidate = tables[index].clone();
                candidate.rows.drain(start..(start + chunk).min(candidate.rows.len()));
                bench.foam.load(std::slice::from_ref(&candidate)).await?;
                bench.reference.load(std::slice::from_ref(&candidate)).await?;
                tries += 1;
                if bench.fails_as(&best, kind).await {
                    tables[index] = candidate;
                } else {
                    start += chunk;
                }
            }
            // Put back the table as kept.
            bench.foam.load(std::slice::from_ref(&tables[index])).await?;
            bench.reference.load(std::slice::from_ref(&tables[index])).await?;
            if chunk == 1 || !within_budget(tries) {
                break;
            }
            chunk /= 2;
        }
    }
    let expected = bench.check(&best).await.1;
    let used: Vec<Table> = tables.iter().filter(|t| mentions(&best, &t.name)).cloned().collect();
    // Tables the query does not read stay on FoamDB until dropped here.
    bench.foam.drop_tables(&tables.iter().filter(|t| !mentions(&best, &t.name)).cloned().collect::<Vec<_>>()).await?;
    Ok(Case { tables: used, setup: Vec::new(), query: best, expected })
}

fn mentions(query: &Query, table: &str) -> bool {
    let pattern = format!("{table} AS ");
    query.sql.contains(&pattern) || query.partitioned.as_ref().is_some_and(|p| p.contains(&pattern))
}

/// The rule switches that, each turned off alone, make `case` pass.
async fn rules_behind(bench: &Bench<'_>, case: &Case, kind: &Kind, off: &[&str]) -> Result<Vec<String>, String> {
    if *kind == Kind::Partitioning {
        return Ok(Vec::new());
    }
    let query = Query { partitioned: None, ..case.query.clone() };
    let mut rules = Vec::new();
    for rule in RULE_SWITCHES {
        let mut switched: Vec<&str> = off.to_vec();
        switched.push(rule);
        bench.foam.set_rules_off(&switched).await?;
        if !bench.fails_as(&query, kind).await {
            rules.push(rule.to_string());
        }
    }
    Ok(rules)
}

/// FoamDB's rows as text for a sqllogictest file, as its runner prints them.
fn slt_cell(cell: &Option<String>, data_type: Option<&DataType>) -> String {
    match (cell, data_type) {
        (None, _) => "NULL".into(),
        (Some(text), _) if text.is_empty() => "(empty)".into(),
        (Some(text), Some(DataType::Boolean)) => (if text == "true" { "t" } else { "f" }).into(),
        (Some(text), Some(t)) if t.is_floating() => {
            text.parse::<f64>().map_or(text.clone(), |v| if v.fract() == 0.0 { format!("{v:.0}") } else { v.to_string() })
        }
        (Some(text), Some(DataType::Timestamp(..))) => postgres_timestamp(text),
        (Some(text), _) => text.clone(),
    }
}

/// A timestamp as Arrow prints it (`2024-01-01T22:00:00.500-05:00`) as
/// FoamDB prints it, PostgreSQL's way (`2024-01-01 22:00:00.5-05`).
fn postgres_timestamp(text: &str) -> String {
    let text = text.replacen('T', " ", 1);
    let (local, offset) = crate::compare::split_offset(&text);
    let offset = match offset {
        Some("Z") => "+00",
        Some(offset) => offset.strip_suffix(":00").unwrap_or(offset),
        None => "",
    };
    let local = match local.split_once('.') {
        Some((whole, fraction)) if fraction.trim_end_matches('0').is_empty() => whole.to_string(),
        Some((whole, fraction)) => format!("{whole}.{}", fraction.trim_end_matches('0')),
        None => local.to_string(),
    };
    format!("{local}{offset}")
}

/// A reduced case as a sqllogictest record group: its tables, their rows
/// and the query with the reference's answer.
pub fn case_as_slt(failure: &Failure, case: &Case) -> String {
    let mut out = format!(
        "# Differential fuzzer, seed {} query {}: {:?} ({}).\n",
        failure.seed,
        failure.query_index,
        failure.kind,
        failure.detail.lines().next().unwrap_or_default()
    );
    // Settings (the session's time zone) first, then the tables, then
    // what a write ran before the difference.
    let (settings, statements): (Vec<_>, Vec<_>) = case.setup.iter().partition(|(sql, _)| sql.starts_with("SET "));
    for (sql, _) in &settings {
        out.push_str(&format!("statement ok\n{sql}\n\n"));
    }
    for table in &case.tables {
        out.push_str(&format!("statement ok\n{}\n\n", table.create_foam()));
        for insert in table.inserts(usize::MAX) {
            out.push_str(&format!("statement ok\n{insert}\n\n"));
        }
    }
    for (sql, ok) in &statements {
        out.push_str(&format!("statement {}\n{sql}\n\n", if *ok { "ok" } else { "error" }));
    }
    let sql = &case.query.sql;
    match &case.expected {
        Some((rows, types)) => {
            let letters: String = types
                .iter()
                .map(|t| if t.is_integer() { 'I' } else if t.is_floating() || matches!(t, DataType::Decimal128(..)) { 'R' } else { 'T' })
                .collect();
            let letters = if letters.is_empty() { "I".to_string() } else { letters };
            let sort = if case.query.ordered { "nosort" } else { "rowsort" };
            out.push_str(&format!("query {letters} {sort}\n{sql}\n----\n"));
            for row in rows {
                let cells: Vec<String> = row.iter().enumerate().map(|(i, c)| slt_cell(c, types.get(i))).collect();
                out.push_str(&format!("{}\n", cells.join(" ")));
            }
        }
        None => out.push_str(&format!("statement error\n{sql}\n")),
    }
    out.push('\n');
    if failure.kind == Kind::WrongWrite {
        // A write's case keeps the seed's table names: drop them for the next.
        for table in &case.tables {
            out.push_str(&format!("statement ok\nDROP TABLE {}\n\n", table.name));
        }
    }
    out
}

/// Seeds for a run: `first`, `first + 1`, ...
pub fn seeds_from(first: u64, count: u64) -> Vec<u64> {
    (first..first.saturating_add(count)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reduced_cases_print_timestamps_as_foamdb_does_and_set_the_zone_first() {
        assert_eq!(postgres_timestamp("2024-01-01T22:00:00.500-05:00"), "2024-01-01 22:00:00.5-05");
        assert_eq!(postgres_timestamp("2024-01-02T03:00:00+05:30"), "2024-01-02 03:00:00+05:30");
        assert_eq!(postgres_timestamp("2024-01-02T03:00:00Z"), "2024-01-02 03:00:00+00");
        assert_eq!(postgres_timestamp("2024-01-01T23:00:00"), "2024-01-01 23:00:00");
        let table = schema::generate(&mut Choices::random(3), "t").remove(0);
        let case = Case {
            tables: vec![table],
            setup: vec![("SET timezone = 'Asia/Kolkata'".into(), true)],
            query: Query { sql: "SELECT i FROM t0".into(), ordered: true, partitioned: None, cardinality: false },
            expected: Some((vec![vec![Some("2024-01-01T23:00:00.500".into())]], vec![DataType::Timestamp(datafusion::arrow::datatypes::TimeUnit::Nanosecond, None)])),
        };
        let failure = Failure { seed: 3, query_index: 0, kind: Kind::WrongAnswer, sql: case.query.sql.clone(), detail: String::new(), reduced: None, rules: Vec::new() };
        let slt = case_as_slt(&failure, &case);
        assert!(slt.find("SET timezone").unwrap() < slt.find("CREATE TABLE").unwrap(), "{slt}");
        assert!(slt.contains("----\n2024-01-01 23:00:00.5\n"), "{slt}");
    }
}
