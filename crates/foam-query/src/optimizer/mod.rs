//! The query optimizer: FoamDB's logical and physical rules, the order they
//! run in among DataFusion's, and the functions their rewrites call, which
//! every worker must register. Which rules are general and which exist for
//! distribution is in `README.md` beside this file.

pub mod logical;
pub mod physical;

use std::sync::Arc;

use datafusion::logical_expr::{AggregateUDF, ScalarUDF};
use datafusion::optimizer::OptimizerRule;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::filter_pushdown::FilterPushdownPhase;

use crate::context::NodeContext;

/// The coordinating node's logical rules: DataFusion's (their decorrelation
/// guarded, `unnest_subqueries.rs`; NULL-equal join keys kept apart from
/// `=` ones, `null_equal_joins.rs`), then FoamDB's.
pub fn logical_rules() -> Vec<Arc<dyn OptimizerRule + Send + Sync>> {
    let mut rules = logical::unnest_subqueries::datafusion_rules();
    rules.extend([
        Arc::new(logical::unnest_subqueries::SubqueryUnnesting) as Arc<dyn OptimizerRule + Send + Sync>,
        Arc::new(logical::early_replica_join::EarlyReplicaJoin),
        Arc::new(logical::early_semi_join::EarlySemiJoin),
        Arc::new(logical::eager_count::EagerCount),
        Arc::new(logical::eager_aggregate::EagerAggregate),
        Arc::new(logical::group_key_filter::GroupKeyFilter),
        Arc::new(logical::like::LikeWithoutRegex),
    ]);
    rules
}

/// DataFusion's analyzer rules, with `timestamptz` columns read in the
/// session's TimeZone first (`session_zone.rs`), quoted literals compared with booleans
/// and dates typed as those (`quoted_literals.rs`), and decimal division and
/// float-decimal comparisons made PostgreSQL's (`numeric_operators.rs`),
/// and `SIMILAR TO` as PostgreSQL's anchored pattern (`similar_to.rs`),
/// before its type coercion. A
/// session's analyzer is these, then [`analyzer_rules`].
pub fn datafusion_analyzer_rules() -> Vec<Arc<dyn datafusion::optimizer::AnalyzerRule + Send + Sync>> {
    let mut rules = datafusion::optimizer::Analyzer::new().rules;
    rules.insert(0, Arc::new(logical::session_zone::SessionZone));
    let at = rules.iter().position(|rule| rule.name() == logical::quoted_literals::TYPE_COERCION_RULE).unwrap_or(0);
    rules.insert(at, Arc::new(logical::quoted_literals::QuotedLiterals));
    rules.insert(at + 1, Arc::new(logical::numeric_operators::NumericOperators));
    rules.insert(at + 2, Arc::new(logical::similar_to::SimilarTo));
    rules
}

/// FoamDB's analyzer rules, run after DataFusion's (type coercion among
/// them): outer references typed as coercion left their columns, then SQL
/// semantics where DataFusion's differ from PostgreSQL's (casts to integers
/// and numerics round as PostgreSQL's; text is read as a date, time or
/// timestamp in PostgreSQL's formats; integer arithmetic fails on overflow;
/// INTERSECT ALL and EXCEPT ALL count copies).
pub fn analyzer_rules() -> Vec<Arc<dyn datafusion::optimizer::AnalyzerRule + Send + Sync>> {
    vec![
        Arc::new(logical::outer_reference_types::OuterReferenceTypes),
        Arc::new(logical::pg_casts::PostgresCasts),
        Arc::new(logical::text_casts::TextCasts),
        Arc::new(logical::checked_arithmetic::CheckedArithmetic),
        Arc::new(logical::set_multiplicity::SetOperationMultiplicity),
    ]
}

/// The DataFusion rule that wires dynamic filters (a join's build-side
/// bounds, a TopK's threshold) to the scans below: it must see the final
/// plan, since a rule that rebuilds an operator afterwards leaves a scan
/// filtered by an operator no longer in the plan.
const DYNAMIC_FILTER_RULE: &str = "FilterPushdown(Post)";

/// The DataFusion rule that pushes filters down before the plan is final.
const FILTER_RULE: &str = "FilterPushdown";

/// The true properties of aggregates over grouping sets and of outer joins
/// first (`output_claims.rs`), then DataFusion's physical rules with
/// FoamDB's inserted before the dynamic filters are wired, so that those
/// filters and DataFusion's closing sanity check see the plan FoamDB's
/// rules leave. The locality rules' plan is kept only if it passes that
/// check (`checked_rules.rs`). Both filter pushdowns are skipped where
/// DataFusion could misplace a filter (`filter_pushdown.rs`).
pub fn physical_rules(node: &Arc<NodeContext>) -> Vec<Arc<dyn PhysicalOptimizerRule + Send + Sync>> {
    let locality = physical::checked_rules::CheckedRules {
        rules: vec![
            Arc::new(physical::copartition::CoPartitioning { node: node.clone() }),
            Arc::new(physical::regroup::ScanRegrouping { node: node.clone() }),
            Arc::new(physical::count_ones::CountWithoutOnesArray),
        ],
    };
    let foam: Vec<Arc<dyn PhysicalOptimizerRule + Send + Sync>> =
        vec![Arc::new(locality), Arc::new(physical::join_yield::JoinYielding), Arc::new(physical::explicit_sorts::ExplicitSorts)];
    let mut rules = guarded_datafusion_rules();
    let at = rules.iter().position(|rule| rule.name() == DYNAMIC_FILTER_RULE).unwrap_or(rules.len());
    rules.splice(at..at, foam);
    rules
}

/// DataFusion's physical rules as FoamDB runs them without its own: true
/// output properties first (`output_claims.rs`), both filter pushdowns
/// and the projection pushdown guarded (`filter_pushdown.rs`,
/// `projection_pushdown.rs`), aggregates from statistics only where they
/// are the aggregate's (`aggregate_statistics.rs`). What a single process
/// answers with.
pub fn guarded_datafusion_rules() -> Vec<Arc<dyn PhysicalOptimizerRule + Send + Sync>> {
    let mut rules = physical::output_claims::datafusion_rules();
    for rule in rules.iter_mut() {
        let phase = match rule.name() {
            FILTER_RULE => FilterPushdownPhase::Pre,
            DYNAMIC_FILTER_RULE => FilterPushdownPhase::Post,
            physical::aggregate_statistics::AGGREGATE_STATISTICS_RULE => {
                *rule = Arc::new(physical::aggregate_statistics::AggregatesFromStatistics);
                continue;
            }
            physical::projection_pushdown::PROJECTION_PUSHDOWN_RULE => {
                *rule = Arc::new(physical::projection_pushdown::GuardedProjectionPushdown(rule.clone()));
                continue;
            }
            _ => continue,
        };
        *rule = Arc::new(physical::filter_pushdown::GuardedFilterPushdown { inner: rule.clone(), phase });
    }
    rules
}

/// Adds FoamDB's SQL-planner hooks after DataFusion's: quoted literals
/// compared with booleans and dates (`logical/quoted_literals.rs`), integer
/// literals beside INTs (`logical/integer_literals.rs`) and the difference
/// of timestamptz values of two zones (`logical/session_zone.rs`). Sessions and the
/// fuzzer's single-process reference plan with them.
pub fn add_sql_planners(builder: &mut datafusion::execution::SessionStateBuilder) {
    let planners: [Arc<dyn datafusion::logical_expr::planner::ExprPlanner>; 4] = [
        Arc::new(logical::quoted_literals::QuotedLiteralPlanner),
        Arc::new(logical::integer_literals::IntegerLiteralPlanner),
        Arc::new(logical::session_zone::ZoneArithmeticPlanner),
        Arc::new(logical::numeric_operators::IntervalArithmeticPlanner),
    ];
    builder.expr_planners().get_or_insert_with(Vec::new).extend(planners);
}

/// Registers in `ctx` what a statement, as the session rewrote it, calls
/// by name: [`worker_udfs`] and [`worker_udafs`], the scalar-subquery
/// pair and the series table functions. Sessions register these, and so
/// does the context that plans a view (whose stored query is such a
/// statement).
pub fn register_statement_functions(ctx: &datafusion::prelude::SessionContext) {
    for udf in worker_udfs() {
        ctx.register_udf(udf);
    }
    for udaf in worker_udafs() {
        ctx.register_udaf(udaf);
    }
    // PostgreSQL's names for DataFusion's functions.
    use datafusion::functions_aggregate::{bool_and_or::bool_and_udaf, variance::var_samp_udaf};
    ctx.register_udaf(bool_and_udaf().as_ref().clone().with_aliases(["every"]));
    ctx.register_udaf(var_samp_udaf().as_ref().clone().with_aliases(["variance"]));
    ctx.register_udf(datafusion::functions::math::signum().as_ref().clone().with_aliases(["sign"]));
    ctx.register_udf(datafusion::functions::math::ceil().as_ref().clone().with_aliases(["ceiling"]));
    // A version-4 UUID as text (FoamDB has no uuid type).
    ctx.register_udf(datafusion::functions::string::uuid().as_ref().clone().with_aliases(["gen_random_uuid"]));
    ctx.register_udaf(crate::frontend::scalar_subquery::SingleValue::udaf());
    ctx.register_udf(crate::frontend::scalar_subquery::OneValue::udf());
    for (name, function) in crate::exec::series::table_functions() {
        ctx.register_udtf(name, function);
    }
}

/// The functions FoamDB's rewrites put into plans (routed shuffles, rewritten
/// `LIKE` filters and counted rows call them in the stages workers run), and
/// those it defines in place of DataFusion's (`version()`; `to_char`,
/// `to_date` and `to_timestamp` with PostgreSQL's patterns).
pub fn worker_udfs() -> Vec<ScalarUDF> {
    let mut udfs = vec![
        crate::exec::route::FoamRoute::udf(),
        logical::like::FoamLike::udf(),
        logical::pg_casts::RoundForInt::udf(),
        logical::pg_casts::NumericOfFloat::udf(),
        logical::text_casts::DatetimeOfText::udf(),
        crate::exec::pg_text::PgText::udf(),
        crate::exec::at_time_zone::at_time_zone_udf(),
        crate::frontend::setting_functions::unknown_setting_udf(),
        logical::numeric_operators::NumericArithmetic::divide_udf(),
        logical::numeric_operators::NumericArithmetic::multiply_udf(),
        crate::exec::interval_scale::IntervalScale::multiply_udf(),
        crate::exec::interval_scale::IntervalScale::divide_udf(),
        crate::exec::age::Age::udf(),
        logical::similar_to::similar_to_regex_udf(),
        physical::count_ones::FoamOnes::udf(),
        crate::catalog::functions::version_udf(),
        crate::catalog::functions::pg_typeof_udf(),
        logical::checked_arithmetic::CheckedChain::udf(),
    ];
    udfs.extend(crate::exec::json_build::json_udfs());
    udfs.extend(crate::exec::format::udfs());
    udfs.extend(crate::exec::interval_functions::udfs());
    udfs.extend(crate::exec::datetime_format::udfs());
    udfs.extend(crate::exec::extract::udfs());
    udfs.push(crate::exec::width_bucket::udf());
    udfs.extend(crate::frontend::char_casts::udfs());
    udfs
}

/// The aggregates FoamDB defines in place of DataFusion's (`sum`, whose
/// BIGINT sums fail on overflow); sessions, workers and the fuzzer's
/// reference register them.
pub fn worker_udafs() -> Vec<AggregateUDF> {
    vec![logical::checked_arithmetic::CheckedSum::udaf()]
}
