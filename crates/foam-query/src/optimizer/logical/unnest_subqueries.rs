//! Unnests the subqueries DataFusion's own rules leave in a plan, or answer
//! wrongly: a logical optimizer rule run on the coordinating node after them.
//!
//! DataFusion decorrelates a subquery when its correlation is an equality it
//! can pull up to a join condition. Others stay as expressions that no
//! physical operator runs (`Physical plan does not support logical
//! expression ScalarSubquery`): a non-equality under an aggregate
//! (`(SELECT count(*) FROM t AS x WHERE x.b < t.b)`), EXISTS or IN in a
//! select list. And two IN subqueries of a filter DataFusion 55 answers
//! wrongly: one inside another expression (`x NOT IN (..) OR y = 1`) gets
//! a mark join that is never NULL, so `NOT` of it holds where SQL's NOT IN
//! is NULL, and `7 NOT IN (..)` an anti join that ignores the subquery's
//! NULLs; its decorrelation leaves such filters alone
//! (`in_subqueries_are_ours`). This rule unnests all of those the general
//! way (Neumann and Kemper, "Unnesting Arbitrary Queries", as DuckDB
//! does): the subquery is computed once for every distinct value of the
//! outer columns it reads, its *domain* `D`, and the outer rows are joined
//! with those answers.
//!
//! ```text
//!   Projection/Filter [.. (subquery reading outer c) ..]      D = DISTINCT c AS d FROM input
//!     input                                              ─▶   input ⟕ S' ON c IS NOT DISTINCT FROM d
//! ```
//! `S'` is the subquery with the domain pushed into it (`push`): operators
//! that read an outer column get the domain column `d` instead and keep `d`
//! in their output (a projection adds it, an aggregate groups by it), and
//! the domain is cross joined in where the correlation stops. A scalar
//! aggregate (no GROUP BY) must answer for a domain value with no rows too:
//! its groups are left joined to the domain and a missing group takes the
//! aggregate's value on no rows (0 for `count`), the "count bug". The
//! answers take the subquery's place:
//!
//! ```text
//!   scalar subquery  ─▶ the subquery's column of S' (one row per value: only
//!                       subqueries whose top is a scalar aggregate are
//!                       unnested; DataFusion refuses other correlated ones)
//!   EXISTS           ─▶ a mark (one row per value that has rows) IS NOT NULL
//!   x IN (subquery)  ─▶ x joins the domain; per value, 2 if a row equals x,
//!                       else 1 if a row or x is NULL, else 0: true, NULL, false
//! ```
//! Shapes the domain cannot be pushed through (a correlated LIMIT, window,
//! set operation, outer join on the correlated side, or a reference to a
//! query further out) are left as they were.

use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{Column, DFSchemaRef, Result, ScalarValue, not_impl_err};
use datafusion::logical_expr::expr::{AggregateFunction, Exists, InSubquery};
use datafusion::logical_expr::utils::{conjunction, split_conjunction};
use datafusion::logical_expr::{
    Aggregate, BinaryExpr, Distinct, Expr, Operator, Filter, Join, JoinType, LogicalPlan, LogicalPlanBuilder, Projection, Sort, SortExpr, Subquery,
    SubqueryAlias, col, lit, when,
};
use datafusion::optimizer::optimizer::ApplyOrder;
use datafusion::optimizer::{OptimizerConfig, OptimizerRule};

/// The optimizer rule (see the module documentation).
#[derive(Debug, Default)]
pub struct SubqueryUnnesting;

impl OptimizerRule for SubqueryUnnesting {
    fn name(&self) -> &str {
        "foam_subquery_unnesting"
    }

    fn apply_order(&self) -> Option<ApplyOrder> {
        Some(ApplyOrder::TopDown)
    }

    fn supports_rewrite(&self) -> bool {
        true
    }

    fn rewrite(&self, plan: LogicalPlan, config: &dyn OptimizerConfig) -> Result<Transformed<LogicalPlan>> {
        match plan {
            LogicalPlan::Projection(projection) if projection.expr.iter().any(|e| has_subquery_to_unnest(e, true)) => {
                let Projection { expr, input, schema, .. } = projection;
                let mut input = Arc::unwrap_or_clone(input);
                let mut changed = false;
                let mut exprs = Vec::with_capacity(expr.len());
                for (i, e) in expr.into_iter().enumerate() {
                    let rewritten = unnest_in(e.clone(), &mut input, config, true)?;
                    if rewritten.transformed {
                        changed = true;
                        let (qualifier, field) = schema.qualified_field(i);
                        exprs.push(rewritten.data.alias_qualified(qualifier.cloned(), field.name()));
                    } else {
                        exprs.push(e);
                    }
                }
                let plan = LogicalPlan::Projection(Projection::try_new(exprs, Arc::new(input))?);
                Ok(Transformed::new_transformed(plan, changed))
            }
            LogicalPlan::Filter(filter)
                if split_conjunction(&filter.predicate).into_iter().any(|c| has_subquery_to_unnest(c, in_subqueries_are_ours(c))) =>
            {
                let original_schema = filter.input.schema().clone();
                let mut input = Arc::unwrap_or_clone(filter.input.clone());
                let mut changed = false;
                let mut conjuncts = Vec::new();
                for conjunct in split_conjunction(&filter.predicate) {
                    let rewritten = unnest_in(conjunct.clone(), &mut input, config, in_subqueries_are_ours(conjunct))?;
                    changed |= rewritten.transformed;
                    conjuncts.push(rewritten.data);
                }
                let Some(predicate) = conjunction(conjuncts).filter(|_| changed) else {
                    return Ok(Transformed::no(LogicalPlan::Filter(filter)));
                };
                let filtered = LogicalPlan::Filter(Filter::try_new(predicate, Arc::new(input))?);
                Ok(Transformed::yes(keep_columns(filtered, &original_schema)?))
            }
            plan => Ok(Transformed::no(plan)),
        }
    }
}

/// DataFusion's logical optimizer rules, with its two subquery
/// decorrelation rules made to leave a plan as it was where they fail:
/// `scalar_subquery_to_join` fails outright on a correlation below a
/// grouped subquery (`No field named g.c`), a shape the rule here unnests.
/// Its filter pushdown is kept from moving filters an aggregate's rows
/// depend on (`aggregate_filters.rs`), and its distinct-aggregate rewrite
/// from widening output types (`kept_types.rs`).
pub fn datafusion_rules() -> Vec<Arc<dyn OptimizerRule + Send + Sync>> {
    datafusion::optimizer::Optimizer::new()
        .rules
        .into_iter()
        .flat_map(|rule| -> Vec<Arc<dyn OptimizerRule + Send + Sync>> {
            if DECORRELATION_RULES.contains(&rule.name()) {
                vec![Arc::new(LeftWhereFailing(rule))]
            } else if rule.name() == super::aggregate_filters::FILTER_PUSHDOWN_RULE {
                vec![Arc::new(super::aggregate_filters::AggregateFilterGuard(rule))]
            } else if super::kept_types::TYPE_CHANGING_RULES.contains(&rule.name()) {
                vec![Arc::new(super::kept_types::TypesKept(rule))]
            } else if rule.name() == super::null_equal_joins::EXTRACT_EQUIJOIN_RULE {
                vec![Arc::new(super::null_equal_joins::NullEqualJoinKeys), rule]
            } else if rule.name() == super::null_equal_joins::ELIMINATE_CROSS_JOIN_RULE {
                vec![Arc::new(super::null_equal_joins::ConstantJoinKeys), rule]
            } else {
                vec![rule]
            }
        })
        .collect()
}

/// DataFusion's rules that decorrelate subqueries.
const DECORRELATION_RULES: &[&str] = &["scalar_subquery_to_join", "decorrelate_predicate_subquery"];

/// A rule whose failure on a plan holding a subquery leaves that plan as
/// it was (for the unnesting rule to take) instead of failing the query.
#[derive(Debug)]
struct LeftWhereFailing(Arc<dyn OptimizerRule + Send + Sync>);

impl OptimizerRule for LeftWhereFailing {
    fn name(&self) -> &str {
        self.0.name()
    }

    fn apply_order(&self) -> Option<ApplyOrder> {
        self.0.apply_order()
    }

    fn rewrite(&self, plan: LogicalPlan, config: &dyn OptimizerConfig) -> Result<Transformed<LogicalPlan>> {
        let has_subquery = plan.expressions().iter().any(|e| e.exists(|e| Ok(subquery_of(e).is_some())).unwrap_or(true));
        if !has_subquery {
            return self.0.rewrite(plan, config);
        }
        let mut plan = plan;
        if self.0.name() == "decorrelate_predicate_subquery" {
            if wrongly_decorrelated(&plan) {
                // Its mark join knows no NULL: `x NOT IN (..) OR ..` is
                // taken as true where SQL says NULL. The rule here unnests
                // such.
                return Ok(Transformed::no(plan));
            }
            // It decorrelates the subqueries inside a subquery itself, past
            // this wrapper: those it would get wrong are unnested here
            // first (`EXISTS (.. WHERE 7 NOT IN (..))` kept every row
            // though the NOT IN was NULL, fuzz seed 59291 w9).
            plan = unnest_wrong_ones_inside(plan, config);
        }
        let kept = plan.clone();
        match self.0.rewrite(plan, config) {
            Ok(rewritten) => Ok(rewritten),
            Err(error) => {
                tracing::debug!("{} left a plan as it was: {error}", self.0.name());
                Ok(Transformed::no(kept))
            }
        }
    }
}

/// Whether `plan` is a filter whose IN subqueries DataFusion's
/// decorrelation gets wrong (`in_subqueries_are_ours`).
fn wrongly_decorrelated(plan: &LogicalPlan) -> bool {
    let LogicalPlan::Filter(filter) = plan else { return false };
    split_conjunction(&filter.predicate).into_iter().any(|c| in_subqueries_are_ours(c) && c.exists(|e| Ok(matches!(e, Expr::InSubquery(_)))).unwrap_or(true))
}

/// `plan` with the filters `wrongly_decorrelated` in its subqueries, at
/// any depth, unnested by this module's rule; as it was if that fails.
fn unnest_wrong_ones_inside(plan: LogicalPlan, config: &dyn OptimizerConfig) -> LogicalPlan {
    let mut found = false;
    let _ = plan.apply_subqueries(|subquery| {
        subquery.apply_with_subqueries(|node| {
            found |= wrongly_decorrelated(node);
            Ok(if found { TreeNodeRecursion::Stop } else { TreeNodeRecursion::Continue })
        })
    });
    if !found {
        return plan;
    }
    let kept = plan.clone();
    let unnested = plan.map_subqueries(|subquery| {
        subquery.transform_down_with_subqueries(|node| if wrongly_decorrelated(&node) { SubqueryUnnesting.rewrite(node, config) } else { Ok(Transformed::no(node)) })
    });
    match unnested {
        Ok(unnested) => unnested.data,
        Err(error) => {
            tracing::debug!("a subquery's IN subqueries were left to DataFusion: {error}");
            kept
        }
    }
}

/// The subquery of a scalar subquery, EXISTS or IN expression.
fn subquery_of(expr: &Expr) -> Option<&Subquery> {
    match expr {
        Expr::ScalarSubquery(subquery) | Expr::Exists(Exists { subquery, .. }) | Expr::InSubquery(InSubquery { subquery, .. }) => Some(subquery),
        _ => None,
    }
}

/// The subquery of `expr` when it reads columns of the query around it:
/// one this rule takes (DataFusion runs the others itself).
fn correlated_subquery(expr: &Expr) -> Option<&Subquery> {
    subquery_of(expr).filter(|subquery| !subquery.outer_ref_columns.is_empty())
}

/// The subquery of `expr` this rule takes: a correlated one, and with
/// `any_in`, an IN subquery of any kind.
fn subquery_to_unnest(expr: &Expr, any_in: bool) -> Option<&Subquery> {
    correlated_subquery(expr).or_else(|| match expr {
        Expr::InSubquery(InSubquery { subquery, .. }) if any_in => Some(subquery),
        _ => None,
    })
}

fn has_subquery_to_unnest(expr: &Expr, any_in: bool) -> bool {
    expr.exists(|e| Ok(subquery_to_unnest(e, any_in).is_some())).unwrap_or(false)
}

/// Whether a filter's conjunct is one DataFusion 55's decorrelation gets
/// wrong, so this rule takes its IN subqueries, correlated or not:
/// - an IN subquery inside another expression (`x NOT IN (..) OR y = 1`):
///   DataFusion turns it into a mark join, whose mark is true or false,
///   never NULL; right for EXISTS, wrong for IN, which is NULL when no row
///   matches and a row or `x` is NULL;
/// - `x NOT IN (..)` where `x` reads no column (`7 NOT IN (..)`): its
///   anti join keeps every row though the subquery holds a NULL.
///
/// The other conjuncts that are a subquery themselves (`x IN (..)`,
/// `NOT EXISTS (..)`, `col NOT IN (..)`) stay DataFusion's semi and anti
/// joins (null-aware for NOT IN).
fn in_subqueries_are_ours(conjunct: &Expr) -> bool {
    let (top, negated_outside) = match conjunct {
        Expr::Not(inner) => (inner.as_ref(), true),
        other => (other, false),
    };
    match top {
        Expr::Exists(_) => false,
        Expr::InSubquery(InSubquery { expr, negated, .. }) => *negated != negated_outside && expr.column_refs().is_empty(),
        _ => true,
    }
}

/// `expr` with each subquery this rule can unnest replaced by its answer
/// column, `input` joined with the answers; with `any_in`, uncorrelated IN
/// subqueries too.
fn unnest_in(expr: Expr, input: &mut LogicalPlan, config: &dyn OptimizerConfig, any_in: bool) -> Result<Transformed<Expr>> {
    expr.transform_up(|e| {
        let answer = match (&e, subquery_to_unnest(&e, any_in)) {
            (Expr::ScalarSubquery(_), Some(subquery)) => unnest_one(Kind::Scalar, subquery, input, config)?,
            (Expr::Exists(Exists { negated, .. }), Some(subquery)) => unnest_one(Kind::Exists { negated: *negated }, subquery, input, config)?,
            (Expr::InSubquery(InSubquery { expr, negated, .. }), Some(subquery)) => {
                unnest_one(Kind::In { expr: expr.as_ref().clone(), negated: *negated }, subquery, input, config)?
            }
            _ => None,
        };
        Ok(match answer {
            Some((joined, answer)) => {
                *input = joined;
                Transformed::yes(answer)
            }
            None => Transformed::no(e),
        })
    })
}

/// What a subquery expression asks of its rows.
enum Kind {
    Scalar,
    Exists { negated: bool },
    In { expr: Expr, negated: bool },
}

/// The outer values a subquery is computed for.
struct Domain {
    /// The outer columns (or, for IN, the tested expression) it reads.
    outer: Vec<Expr>,
    /// Their names as domain columns, unique in the plan.
    names: Vec<String>,
    /// `DISTINCT outer AS names FROM input`.
    plan: LogicalPlan,
}

impl Domain {
    fn columns(&self) -> Vec<Expr> {
        self.names.iter().map(|n| Expr::Column(Column::new_unqualified(n))).collect()
    }

    /// The domain column standing for outer column `column`.
    fn column_for(&self, column: &Column) -> Option<Expr> {
        self.outer.iter().position(|o| matches!(o, Expr::Column(c) if c == column)).map(|i| col(Column::new_unqualified(&self.names[i])))
    }

    /// `expr` with its references to outer columns read from the domain.
    fn replace(&self, expr: Expr) -> Result<Expr> {
        expr.transform_up(|e| match &e {
            Expr::OuterReferenceColumn(_, column) => match self.column_for(column) {
                Some(domain) => Ok(Transformed::yes(domain)),
                None => not_impl_err!("a subquery reading a column of a query further out: {column}"),
            },
            _ => Ok(Transformed::no(e)),
        })
        .map(|t| t.data)
    }
}

/// `input` joined with the answers of `subquery` for its outer values, and
/// the expression that stands for the subquery; `None` when the subquery's
/// shape is one this rule leaves alone.
fn unnest_one(kind: Kind, subquery: &Subquery, input: &LogicalPlan, config: &dyn OptimizerConfig) -> Result<Option<(LogicalPlan, Expr)>> {
    if matches!(kind, Kind::Scalar) && !at_most_one_row(&subquery.subquery) {
        return Ok(None);
    }
    let prefix = config.alias_generator().next("__foam_sq");
    let mut outer: Vec<Expr> = Vec::new();
    for reference in &subquery.outer_ref_columns {
        let Expr::OuterReferenceColumn(_, column) = reference else { return Ok(None) };
        if !input.schema().has_column(column) {
            // Read from a query further out than `input`.
            return Ok(None);
        }
        if !outer.iter().any(|o| matches!(o, Expr::Column(c) if c == column)) {
            outer.push(Expr::Column(column.clone()));
        }
    }
    if let Kind::In { expr, .. } = &kind {
        outer.push(expr.clone());
    }
    let names: Vec<String> = (0..outer.len()).map(|i| format!("{prefix}_d{i}")).collect();
    let domain_plan = LogicalPlanBuilder::from(input.clone())
        .project(outer.iter().zip(&names).map(|(o, n)| o.clone().alias(n)))?
        .distinct()?
        .build()?;
    let domain = Domain { outer, names, plan: domain_plan };
    let pushed = match push(&subquery.subquery, &domain) {
        Ok(Some(plan)) => plan,
        Ok(None) => return Ok(None),
        Err(error) if matches!(error, datafusion::error::DataFusionError::NotImplemented(_)) => return Ok(None),
        Err(error) => return Err(error),
    };
    let width = domain.names.len();
    let value = Expr::Column(Column::from(pushed.schema().qualified_field(width)));
    let answer_name = format!("{prefix}_answer");
    let (answers, answer) = match &kind {
        Kind::Scalar => (LogicalPlanBuilder::from(pushed).project(keyed(&domain, value.alias(&answer_name)))?.build()?, None),
        Kind::Exists { negated } => {
            let marks = LogicalPlanBuilder::from(pushed).project(keyed(&domain, lit(true).alias(&answer_name)))?.distinct()?.build()?;
            let mark = col(Column::new_unqualified(&answer_name));
            (marks, Some(if *negated { mark.is_null() } else { mark.is_not_null() }))
        }
        Kind::In { negated, .. } => {
            let tested = col(Column::new_unqualified(&domain.names[width - 1]));
            let state = when(value.clone().eq(tested.clone()), lit(2i64))
                .when(value.is_null().or(tested.is_null()), lit(1i64))
                .otherwise(lit(0i64))?;
            let states = LogicalPlanBuilder::from(pushed)
                .aggregate(domain.columns(), vec![datafusion::functions_aggregate::min_max::max(state).alias(format!("{answer_name}_state"))])?
                .project(keyed(&domain, col(Column::new_unqualified(format!("{answer_name}_state"))).alias(&answer_name)))?
                .build()?;
            let state = col(Column::new_unqualified(&answer_name));
            let found = when(state.clone().eq(lit(2i64)), lit(true))
                .when(state.eq(lit(1i64)), lit(ScalarValue::Boolean(None)))
                .otherwise(lit(false))?;
            (states, Some(if *negated { !found } else { found }))
        }
    };
    let on: Vec<Expr> = domain
        .outer
        .iter()
        .zip(&domain.names)
        .map(|(outer, name)| same_value(outer.clone(), col(Column::new_unqualified(format!("{name}_key")))))
        .collect();
    let joined = LogicalPlanBuilder::from(input.clone()).join_on(answers, JoinType::Left, on)?.build()?;
    let answer = answer.unwrap_or_else(|| col(Column::new_unqualified(&answer_name)));
    Ok(Some((joined, answer)))
}

/// `a IS NOT DISTINCT FROM b`: a domain value matches its rows, NULL too.
fn same_value(a: Expr, b: Expr) -> Expr {
    Expr::BinaryExpr(BinaryExpr::new(Box::new(a), Operator::IsNotDistinctFrom, Box::new(b)))
}

/// The domain columns renamed as join keys (`<name>_key`), then `answer`.
fn keyed(domain: &Domain, answer: Expr) -> Vec<Expr> {
    let mut exprs: Vec<Expr> = domain.names.iter().map(|n| col(Column::new_unqualified(n)).alias(format!("{n}_key"))).collect();
    exprs.push(answer);
    exprs
}

/// Whether `plan` returns no more than one row: a scalar aggregate under
/// projections, aliases, sorts and filters (the shapes `push` takes).
fn at_most_one_row(plan: &LogicalPlan) -> bool {
    match plan {
        LogicalPlan::Aggregate(aggregate) => aggregate.group_expr.is_empty(),
        LogicalPlan::Projection(Projection { input, .. })
        | LogicalPlan::SubqueryAlias(SubqueryAlias { input, .. })
        | LogicalPlan::Sort(Sort { input, fetch: None, .. })
        | LogicalPlan::Filter(Filter { input, .. }) => at_most_one_row(input),
        _ => false,
    }
}

/// Whether `plan` or anything below it reads an outer column.
fn correlated(plan: &LogicalPlan) -> bool {
    plan.exists(|node| Ok(node.expressions().iter().any(|e| e.contains_outer()) || nested_subquery_reads_outer(node)))
        .unwrap_or(true)
}

/// Whether a subquery inside `node`'s expressions reads an outer column
/// itself (beyond `node`'s own columns).
fn nested_subquery_reads_outer(node: &LogicalPlan) -> bool {
    let reads_outer = |column: &Column| !node.schema().has_column(column) && !node.inputs().iter().any(|i| i.schema().has_column(column));
    node.expressions().iter().any(|e| {
        e.exists(|inner| {
            Ok(subquery_of(inner).is_some_and(|s| {
                s.outer_ref_columns.iter().any(|r| matches!(r, Expr::OuterReferenceColumn(_, c) if reads_outer(c)))
            }))
        })
        .unwrap_or(true)
    })
}

/// `plan` (the subquery) computed for every domain value: its columns
/// after the domain's, outer columns read from the domain. `None` (or a
/// not-implemented error) for a shape the domain cannot be pushed through.
fn push(plan: &LogicalPlan, domain: &Domain) -> Result<Option<LogicalPlan>> {
    if !correlated(plan) {
        return Ok(Some(LogicalPlanBuilder::from(domain.plan.clone()).cross_join(plan.clone())?.build()?));
    }
    // A subquery further in that reads the outer query's columns too would
    // be left reading columns that are gone.
    if nested_subquery_reads_outer(plan) {
        return Ok(None);
    }
    Ok(Some(match plan {
        LogicalPlan::Filter(filter) => {
            let Some(input) = push(&filter.input, domain)? else { return Ok(None) };
            LogicalPlan::Filter(Filter::try_new(domain.replace(filter.predicate.clone())?, Arc::new(input))?)
        }
        LogicalPlan::Projection(projection) => {
            let Some(input) = push(&projection.input, domain)? else { return Ok(None) };
            let mut exprs = domain.columns();
            for (i, e) in projection.expr.iter().enumerate() {
                exprs.push(same_name(domain.replace(e.clone())?, e, &projection.schema, i));
            }
            LogicalPlan::Projection(Projection::try_new(exprs, Arc::new(input))?)
        }
        LogicalPlan::SubqueryAlias(alias) => {
            let Some(input) = push(&alias.input, domain)? else { return Ok(None) };
            LogicalPlan::SubqueryAlias(SubqueryAlias::try_new(Arc::new(input), alias.alias.clone())?)
        }
        LogicalPlan::Sort(sort) if sort.fetch.is_none() => {
            let Some(input) = push(&sort.input, domain)? else { return Ok(None) };
            let exprs = sort.expr.iter().map(|s| Ok(SortExpr { expr: domain.replace(s.expr.clone())?, ..s.clone() })).collect::<Result<Vec<_>>>()?;
            LogicalPlan::Sort(Sort { expr: exprs, input: Arc::new(input), fetch: None })
        }
        LogicalPlan::Distinct(Distinct::All(input)) => {
            let Some(input) = push(input, domain)? else { return Ok(None) };
            LogicalPlan::Distinct(Distinct::All(Arc::new(input)))
        }
        LogicalPlan::Aggregate(aggregate) => return push_aggregate(aggregate, domain),
        LogicalPlan::Join(join) => return push_join(join, domain),
        LogicalPlan::TableScan(scan) => {
            // Filters pushed into the scan that read outer columns: the scan
            // keeps the others, the domain is joined in and they filter it.
            let (outer, own): (Vec<Expr>, Vec<Expr>) = scan.filters.iter().cloned().partition(|f| f.contains_outer());
            let mut own_scan = scan.clone();
            own_scan.filters = own;
            let crossed = LogicalPlanBuilder::from(domain.plan.clone()).cross_join(LogicalPlan::TableScan(own_scan))?.build()?;
            let predicate = outer.into_iter().map(|f| domain.replace(f)).collect::<Result<Vec<_>>>()?;
            match datafusion::logical_expr::utils::conjunction(predicate) {
                Some(predicate) => LogicalPlan::Filter(Filter::try_new(predicate, Arc::new(crossed))?),
                None => crossed,
            }
        }
        _ => return Ok(None),
    }))
}

/// `new` named as the `i`th column of `schema` (the expression `old` made
/// it), so operators above still find it.
fn same_name(new: Expr, old: &Expr, schema: &DFSchemaRef, i: usize) -> Expr {
    if &new == old {
        return new;
    }
    let (qualifier, field) = schema.qualified_field(i);
    new.alias_qualified(qualifier.cloned(), field.name())
}

/// An aggregate computed per domain value: grouped by the domain columns
/// too. A scalar aggregate answers for every domain value, with the
/// aggregates' values on no rows where a value has none.
fn push_aggregate(aggregate: &Aggregate, domain: &Domain) -> Result<Option<LogicalPlan>> {
    if aggregate.group_expr.iter().any(|g| matches!(g, Expr::GroupingSet(_))) {
        return Ok(None);
    }
    let Some(input) = push(&aggregate.input, domain)? else { return Ok(None) };
    let width = domain.names.len();
    let mut groups = domain.columns();
    for (i, g) in aggregate.group_expr.iter().enumerate() {
        groups.push(same_name(domain.replace(g.clone())?, g, &aggregate.schema, i));
    }
    let group_count = aggregate.group_expr.len();
    let mut aggregates = Vec::with_capacity(aggregate.aggr_expr.len());
    for (i, a) in aggregate.aggr_expr.iter().enumerate() {
        aggregates.push(same_name(domain.replace(a.clone())?, a, &aggregate.schema, group_count + i));
    }
    let grouped = LogicalPlan::Aggregate(Aggregate::try_new(Arc::new(input), groups, aggregates)?);
    if group_count > 0 {
        return Ok(Some(grouped));
    }
    // A domain value with no rows has no group: left join the groups to the
    // domain and give such values the aggregates' values on no rows.
    let mark = format!("{}_mark", domain.names[0]);
    let fields: Vec<Column> = grouped.schema().columns();
    let mut right = Vec::with_capacity(fields.len() + 1);
    for (i, field) in fields.iter().enumerate() {
        right.push(if i < width { col(field.clone()).alias(format!("{}_group", domain.names[i])) } else { col(field.clone()) });
    }
    right.push(lit(true).alias(&mark));
    let groups = LogicalPlanBuilder::from(grouped).project(right)?.build()?;
    let on: Vec<Expr> = domain
        .names
        .iter()
        .map(|n| same_value(col(Column::new_unqualified(n)), col(Column::new_unqualified(format!("{n}_group")))))
        .collect();
    let joined = LogicalPlanBuilder::from(domain.plan.clone()).join_on(groups, JoinType::Left, on)?.build()?;
    let mut exprs = domain.columns();
    for (i, a) in aggregate.aggr_expr.iter().enumerate() {
        let field = &fields[width + i];
        let (_, output) = aggregate.schema.qualified_field(i);
        let value = col(field.clone());
        let on_no_rows = value_on_no_rows(a, output.data_type())?;
        let answer = if on_no_rows.is_null() { value } else { when(col(Column::new_unqualified(&mark)).is_null(), lit(on_no_rows)).otherwise(value)? };
        exprs.push(answer.alias_qualified(field.relation.clone(), &field.name));
    }
    Ok(Some(LogicalPlanBuilder::from(joined).project(exprs)?.build()?))
}

/// What aggregate `expr` answers over no rows (0 for a count, NULL for most).
fn value_on_no_rows(expr: &Expr, data_type: &arrow::datatypes::DataType) -> Result<ScalarValue> {
    let mut found = None;
    expr.apply(|e| {
        if let Expr::AggregateFunction(AggregateFunction { func, .. }) = e {
            found = Some(func.default_value(data_type));
            return Ok(TreeNodeRecursion::Stop);
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    match (found, expr) {
        // A bare aggregate (perhaps aliased): its own value on no rows.
        (Some(value), Expr::AggregateFunction(_)) => value,
        (Some(value), Expr::Alias(alias)) if matches!(alias.expr.as_ref(), Expr::AggregateFunction(_)) => value,
        // An expression over an aggregate: left NULL only when that is right.
        (Some(value), _) => {
            let value = value?;
            if value.is_null() { Ok(value) } else { not_impl_err!("an expression over an aggregate in a correlated subquery") }
        }
        (None, _) => ScalarValue::try_from(data_type),
    }
}

/// A join with the domain pushed into its correlated input, when that input
/// keeps all its rows' meaning (the preserved side of an outer join, either
/// side of an inner join). Columns keep the order domain, left, right.
fn push_join(join: &Join, domain: &Domain) -> Result<Option<LogicalPlan>> {
    let left = correlated(&join.left);
    let right = correlated(&join.right);
    let filter = match &join.filter {
        Some(f) => Some(domain.replace(f.clone())?),
        None => None,
    };
    let on_correlated = join.on.iter().any(|(l, r)| l.contains_outer() || r.contains_outer());
    if on_correlated || (left && right) {
        return Ok(None);
    }
    const KEEPS_LEFT: &[JoinType] = &[JoinType::Inner, JoinType::Left, JoinType::LeftSemi, JoinType::LeftAnti, JoinType::LeftMark];
    const KEEPS_RIGHT: &[JoinType] = &[JoinType::Inner, JoinType::Right, JoinType::RightSemi, JoinType::RightAnti];
    let into_left = left || (!right && KEEPS_LEFT.contains(&join.join_type));
    if !(if into_left { KEEPS_LEFT } else { KEEPS_RIGHT }).contains(&join.join_type) {
        return Ok(None);
    }
    let Some(pushed) = push(if into_left { &join.left } else { &join.right }, domain)? else { return Ok(None) };
    let (new_left, new_right) = if into_left { (Arc::new(pushed), join.right.clone()) } else { (join.left.clone(), Arc::new(pushed)) };
    let rebuilt = LogicalPlan::Join(Join::try_new(
        new_left,
        new_right,
        join.on.clone(),
        filter,
        join.join_type,
        join.join_constraint,
        join.null_equality,
        join.null_aware,
    )?);
    if into_left {
        return Ok(Some(rebuilt));
    }
    // Domain columns first, as every pushed plan has them.
    let mut exprs = domain.columns();
    exprs.extend(rebuilt.schema().columns().into_iter().filter(|c| !domain.names.contains(&c.name)).map(col));
    Ok(Some(LogicalPlanBuilder::from(rebuilt).project(exprs)?.build()?))
}

/// `plan` narrowed to the columns of `schema` (a filter's input), in order.
fn keep_columns(plan: LogicalPlan, schema: &DFSchemaRef) -> Result<LogicalPlan> {
    LogicalPlanBuilder::from(plan).project(schema.columns().into_iter().map(col))?.build()
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::util::pretty::pretty_format_batches;
    use datafusion::execution::SessionStateBuilder;
    use datafusion::prelude::SessionContext;

    /// DataFusion with FoamDB's subquery rules, over two small tables with
    /// NULLs; the expected answers below are PostgreSQL 15's.
    async fn context() -> SessionContext {
        let state = SessionStateBuilder::new()
            .with_default_features()
            .with_optimizer_rules(datafusion_rules())
            .with_optimizer_rule(Arc::new(SubqueryUnnesting))
            .build();
        let ctx = SessionContext::new_with_state(state);
        for sql in [
            "CREATE TABLE s1 (a INT, b INT, c INT) AS VALUES (1, 2, 3), (2, 3, 4), (3, 1, 2), (NULL, 5, 1), (7, NULL, 1), (8, 2, 9), (9, 9, NULL), (10, 4, 4)",
            "CREATE TABLE s2 (a INT, b INT, c INT) AS VALUES (1, 1, 1), (2, 2, 2), (3, NULL, 3), (4, 4, 4), (5, 2, NULL), (NULL, 3, 3), (6, 7, 1)",
        ] {
            ctx.sql(sql).await.unwrap().collect().await.unwrap();
        }
        ctx
    }

    /// The rows of `sql`, each as its values joined by spaces, sorted.
    async fn rows(ctx: &SessionContext, sql: &str) -> Vec<String> {
        let batches = ctx.sql(sql).await.unwrap().collect().await.unwrap();
        let text = pretty_format_batches(&batches).unwrap().to_string();
        let mut rows: Vec<String> = text
            .lines()
            .filter(|l| l.starts_with('|'))
            .skip(1)
            .map(|l| l.trim_matches('|').split('|').map(str::trim).collect::<Vec<_>>().join(" "))
            .collect();
        rows.sort();
        rows
    }

    /// Asserts `sql`'s rows are `expected` (in any order).
    async fn expect(ctx: &SessionContext, sql: &str, expected: &[&str]) {
        let mut expected: Vec<String> = expected.iter().map(|r| r.to_string()).collect();
        expected.sort();
        assert_eq!(rows(ctx, sql).await, expected, "{sql}");
    }

    #[tokio::test]
    async fn a_count_under_a_non_equality_counts_zero_for_values_without_rows() {
        let ctx = context().await;
        expect(&ctx, "SELECT a, (SELECT count(*) FROM s1 AS x WHERE x.b < s1.b) AS n FROM s1", &["1 1", "2 3", "3 0", " 5", "7 0", "8 1", "9 6", "10 4"]).await;
        expect(&ctx, "SELECT a, (SELECT count(*) + 1 FROM s2 WHERE s2.b < s1.b AND s2.a <> s1.a) AS n, (SELECT sum(s2.c) FROM s2 WHERE s2.b > s1.b) AS s FROM s1", &["1 1 8", "2 3 5", "3 1 10", " 1 1", "7 1 ", "8 2 8", "9 6 ", "10 4 1"]).await;
    }

    #[tokio::test]
    async fn exists_and_in_in_a_select_list_keep_sql_null_logic() {
        let ctx = context().await;
        expect(&ctx, "SELECT a, EXISTS (SELECT 1 FROM s2 WHERE s2.b > s1.c) AS e, NOT EXISTS (SELECT 1 FROM s2 WHERE s2.a = s1.a + 1) AS ne FROM s1", &["1 true false", "2 true false", "3 true false", " true true", "7 true true", "8 false true", "9 false true", "10 true true"]).await;
        expect(&ctx, "SELECT a, b IN (SELECT s2.b FROM s2 WHERE s2.a <> s1.a) AS i, b NOT IN (SELECT s2.b FROM s2 WHERE s2.c < s1.c) AS ni FROM s1", &["1 true false", "2  false", "3 true false", " false true", "7  true", "8 true false", "9  true", "10 true "]).await;
    }

    #[tokio::test]
    async fn an_in_subquery_inside_another_expression_keeps_sql_null_logic() {
        let ctx = context().await;
        // The answers are PostgreSQL 15's. s2.b holds a NULL: `x NOT IN` is
        // NULL or false for every x, so only the other disjunct keeps a row.
        expect(&ctx, "SELECT a FROM s1 WHERE b NOT IN (SELECT b FROM s2) OR a = 9", &["9"]).await;
        expect(&ctx, "SELECT a FROM s1 WHERE NOT (b IN (SELECT b FROM s2) OR a > 7) AND a > 0", &[]).await;
        expect(&ctx, "SELECT a FROM s1 WHERE (b IN (SELECT b FROM s2)) IS NOT TRUE", &["", "7", "9"]).await;
        expect(&ctx, "SELECT a FROM s1 WHERE c NOT IN (SELECT c FROM s2 WHERE c IS NOT NULL) OR a IS NULL", &["", "8"]).await;
        expect(&ctx, "SELECT a, b IN (SELECT b FROM s2) AS i, b NOT IN (SELECT a FROM s2) AS ni FROM s1", &["1 true false", "2 true false", "3 true false", "  false", "7  ", "8 true false", "9  ", "10 true false"]).await;
        // A conjunct that is the subquery itself is DataFusion's (a null-aware anti join).
        expect(&ctx, "SELECT a FROM s1 WHERE c NOT IN (SELECT c FROM s2 WHERE c IS NOT NULL)", &["8"]).await;
        // NOT IN of a value that reads no column is NULL for every row when
        // the subquery holds a NULL; the three parts of a ternary split add up.
        expect(&ctx, "SELECT a FROM s1 WHERE 7 NOT IN (SELECT c FROM s2)", &[]).await;
        expect(&ctx, "SELECT a FROM s1 WHERE NOT (7 IN (SELECT c FROM s2))", &[]).await;
        expect(&ctx, "SELECT count(*) FROM s1 WHERE 7 NOT IN (SELECT c FROM s2 WHERE c IS NOT NULL)", &["8"]).await;
        let p = "NOT (7) NOT IN (SELECT min(c) FROM s2 GROUP BY a)";
        let split = format!("SELECT a FROM s1 WHERE {p} UNION ALL SELECT a FROM s1 WHERE NOT ({p}) UNION ALL SELECT a FROM s1 WHERE ({p}) IS NULL");
        expect(&ctx, &split, &["", "1", "2", "3", "7", "8", "9", "10"]).await;
    }

    #[tokio::test]
    async fn a_correlation_below_a_grouped_subquery_is_unnested() {
        let ctx = context().await;
        expect(&ctx, "SELECT a, (SELECT max(g.t) FROM (SELECT s2.a, sum(s2.b) AS t FROM s2 WHERE s2.c < s1.c GROUP BY s2.a) AS g) AS m FROM s1", &["1 7", "2 7", "3 7", " ", "7 ", "8 7", "9 ", "10 7"]).await;
    }

    #[tokio::test]
    async fn a_subquery_limited_to_more_than_one_row_is_left_alone() {
        let ctx = context().await;
        let sql = "SELECT a, (SELECT max(x.b) FROM (SELECT s2.b FROM s2 WHERE s2.a < s1.a LIMIT 2) AS x) FROM s1";
        let error = ctx.sql(sql).await.unwrap().collect().await.unwrap_err();
        assert!(error.to_string().contains("ScalarSubquery"), "{error}");
    }
}
