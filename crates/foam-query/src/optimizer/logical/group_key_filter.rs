//! Aggregates only the groups a join can match: a logical optimizer rule run
//! on the coordinating node.
//!
//! TPC-H Q17 compares each lineitem of about 200 parts (one brand, one
//! container) with the average quantity of its part. DataFusion decorrelates
//! the subquery into an aggregate of all six million lineitems grouped by part
//! (200,000 groups, a shuffle of their partial states on a cluster) joined to
//! the outer query on the part key, which then keeps 200 of them. When a join
//! on an aggregate's group key drops the aggregate's unmatched groups, and the
//! other side's key comes from a filtered table, only groups whose key that
//! table still has can matter, and a group's rows all share its key:
//!
//! ```text
//!   X ⋈ Aggregate [k] (R)                 X ⋈ Aggregate [k] (R ⋉ (π key (σ T)) ON R.k = key)
//!   (X's key from σ T, through      ─▶    the same groups where they can match,
//!    projections, filters, joins)          the others never aggregated
//! ```
//! `σ T` is the filter and scan the key comes from (or, past an inner or
//! semi join on it, the other side's key comes from), read once more (T's
//! filter decides what the semi join keeps; an unfiltered T would keep all).
//! The semi join goes to the input of `R` the group key comes from, below
//! inner joins and filters.
//! Joins that keep the aggregate's unmatched rows (outer on its side, anti
//! joins that return it, NOT IN's null-aware anti join, NULL-equal keys) are
//! left alone. `SET foam.group_key_filters = false` turns the rule off.

use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Column, NullEquality, Result};
use datafusion::logical_expr::{
    Aggregate, Expr, Filter, Join, JoinType, LogicalPlan, LogicalPlanBuilder, Projection, SubqueryAlias, TableType,
};
use datafusion::optimizer::optimizer::ApplyOrder;
use datafusion::optimizer::{OptimizerConfig, OptimizerRule};

use crate::options::FoamOptions;
use crate::optimizer::logical::plan_shape::{columns_only, with_input};

/// Alias of the key set a restricted aggregate is semi-joined with; an
/// aggregate whose input has one is not restricted again.
const KEYS_ALIAS: &str = "__foam_group_keys";

/// The optimizer rule (see the module documentation).
#[derive(Debug, Default)]
pub struct GroupKeyFilter;

impl OptimizerRule for GroupKeyFilter {
    fn name(&self) -> &str {
        "foam_group_key_filter"
    }

    fn apply_order(&self) -> Option<ApplyOrder> {
        Some(ApplyOrder::BottomUp)
    }

    fn supports_rewrite(&self) -> bool {
        true
    }

    fn rewrite(&self, plan: LogicalPlan, config: &dyn OptimizerConfig) -> Result<Transformed<LogicalPlan>> {
        let LogicalPlan::Join(join) = &plan else { return Ok(Transformed::no(plan)) };
        if join.null_aware
            || join.null_equality == NullEquality::NullEqualsNull
            || config.options().extensions.get::<FoamOptions>().is_some_and(|o| !o.group_key_filters)
        {
            return Ok(Transformed::no(plan));
        }
        match restrict_join(join)? {
            Some(restricted) => Ok(Transformed::yes(LogicalPlan::Join(restricted))),
            None => Ok(Transformed::no(plan)),
        }
    }
}

/// Whether the join never returns a row of its left (`left`) or right input
/// that matched nothing on the other side (nor lets such a row decide anything).
fn drops_unmatched(join_type: JoinType, left: bool) -> bool {
    use JoinType::*;
    if left {
        matches!(join_type, Inner | Right | LeftSemi | RightSemi | RightAnti)
    } else {
        matches!(join_type, Inner | Left | LeftSemi | RightSemi | LeftAnti | LeftMark)
    }
}

fn restrict_join(join: &Join) -> Result<Option<Join>> {
    for aggregate_left in [true, false] {
        if !drops_unmatched(join.join_type, aggregate_left) {
            continue;
        }
        let (aggregate_side, other_side) = if aggregate_left { (&join.left, &join.right) } else { (&join.right, &join.left) };
        for (left_key, right_key) in &join.on {
            let (aggregate_key, other_key) = if aggregate_left { (left_key, right_key) } else { (right_key, left_key) };
            let (Expr::Column(aggregate_key), Expr::Column(other_key)) = (aggregate_key, other_key) else { continue };
            let Some((keys, key)) = key_source(other_side, other_key) else { continue };
            if let Some(restricted) = restrict(aggregate_side, aggregate_key, &keys, &key)? {
                return Ok(Some(with_input(join, aggregate_left, Arc::new(restricted))?));
            }
        }
    }
    Ok(None)
}

/// The column of `plan`'s input that output column `column` passes on
/// unchanged, for projections and aliases.
fn passed_from(plan: &LogicalPlan, column: &Column) -> Option<Column> {
    let index = plan.schema().index_of_column(column).ok()?;
    match plan {
        LogicalPlan::Projection(projection) => match projection.expr.get(index)? {
            Expr::Column(c) => Some(c.clone()),
            Expr::Alias(alias) => match alias.expr.as_ref() {
                Expr::Column(c) => Some(c.clone()),
                _ => None,
            },
            _ => None,
        },
        LogicalPlan::SubqueryAlias(alias) => Some(Column::from(alias.input.schema().qualified_field(index))),
        _ => None,
    }
}

/// The filtered table `column` of `plan` takes its values from (a filter over
/// a scan, under aliases), and the column there: every non-NULL value of
/// `column` is one of that table's after its filter.
fn key_source(plan: &LogicalPlan, column: &Column) -> Option<(LogicalPlan, Column)> {
    match plan {
        // Read again, a volatile filter (`random() < 0.5`) would keep other rows.
        LogicalPlan::Filter(filter) if table(&filter.input) => (!filter.predicate.is_volatile()).then(|| (plan.clone(), column.clone())),
        LogicalPlan::Filter(filter) => key_source(&filter.input, column),
        LogicalPlan::Projection(_) | LogicalPlan::SubqueryAlias(_) => {
            let input = plan.inputs()[0];
            key_source(input, &passed_from(plan, column)?)
        }
        LogicalPlan::Join(join) => {
            // Semi, anti and mark joins return one input's columns.
            let left = match join.join_type {
                JoinType::LeftSemi | JoinType::LeftAnti | JoinType::LeftMark => true,
                JoinType::RightSemi | JoinType::RightAnti | JoinType::RightMark => false,
                _ => join.left.schema().has_column(column),
            };
            let side = if left { &join.left } else { &join.right };
            if !side.schema().has_column(column) {
                return None;
            }
            // A key of an inner or semi join only has values the other
            // side's key has: TPC-H Q20's partsupp rows are those of parts
            // named 'forest%'.
            let matched_only = matches!(join.join_type, JoinType::Inner | JoinType::LeftSemi | JoinType::RightSemi)
                && join.null_equality == NullEquality::NullEqualsNothing;
            let paired = join.on.iter().find_map(|(l, r)| match (l, r) {
                (Expr::Column(l), Expr::Column(r)) if left && l == column => Some((&join.right, r)),
                (Expr::Column(l), Expr::Column(r)) if !left && r == column => Some((&join.left, l)),
                _ => None,
            });
            paired.filter(|_| matched_only).and_then(|(other, key)| key_source(other, key)).or_else(|| key_source(side, column))
        }
        LogicalPlan::Sort(sort) => key_source(&sort.input, column),
        LogicalPlan::Limit(limit) => key_source(&limit.input, column),
        _ => None,
    }
}

/// A scan of a whole stored table (not a recursive query's work table, not
/// limited), under aliases and projections of plain columns: reading it again
/// gives the same rows.
fn table(plan: &LogicalPlan) -> bool {
    match plan {
        LogicalPlan::TableScan(scan) => scan.source.table_type() == TableType::Base && scan.fetch.is_none(),
        LogicalPlan::SubqueryAlias(alias) => table(&alias.input),
        LogicalPlan::Projection(p) => columns_only(p) && table(&p.input),
        _ => false,
    }
}

/// `plan` (projections, aliases and filters over an aggregate grouped by
/// `column`) with the aggregate's input semi-joined with `keys` on the
/// group key, or `None` when `plan` has no such shape.
fn restrict(plan: &LogicalPlan, column: &Column, keys: &LogicalPlan, key: &Column) -> Result<Option<LogicalPlan>> {
    Ok(match plan {
        LogicalPlan::Projection(projection) => {
            let Some(below) = passed_from(plan, column) else { return Ok(None) };
            let Some(input) = restrict(&projection.input, &below, keys, key)? else { return Ok(None) };
            Some(LogicalPlan::Projection(Projection::try_new(projection.expr.clone(), Arc::new(input))?))
        }
        LogicalPlan::SubqueryAlias(alias) => {
            let Some(below) = passed_from(plan, column) else { return Ok(None) };
            let Some(input) = restrict(&alias.input, &below, keys, key)? else { return Ok(None) };
            Some(LogicalPlan::SubqueryAlias(SubqueryAlias::try_new(Arc::new(input), alias.alias.clone())?))
        }
        LogicalPlan::Filter(filter) => {
            let Some(input) = restrict(&filter.input, column, keys, key)? else { return Ok(None) };
            Some(LogicalPlan::Filter(Filter::try_new(filter.predicate.clone(), Arc::new(input))?))
        }
        LogicalPlan::Aggregate(aggregate) => restrict_aggregate(aggregate, column, keys, key)?,
        _ => None,
    })
}

fn restrict_aggregate(aggregate: &Aggregate, column: &Column, keys: &LogicalPlan, key: &Column) -> Result<Option<LogicalPlan>> {
    let Ok(index) = aggregate.schema.index_of_column(column) else { return Ok(None) };
    // Plain group columns only (no grouping sets: a rolled-up row has no key).
    if !aggregate.group_expr.iter().all(|e| matches!(e, Expr::Column(_))) {
        return Ok(None);
    }
    let Some(Expr::Column(grouped)) = aggregate.group_expr.get(index) else { return Ok(None) };
    let restricted_already = aggregate
        .input
        .exists(|p| Ok(matches!(p, LogicalPlan::SubqueryAlias(a) if a.alias.table() == KEYS_ALIAS)))?;
    if restricted_already {
        return Ok(None);
    }
    let key_set = LogicalPlanBuilder::from(keys.clone()).project(vec![Expr::Column(key.clone())])?.alias(KEYS_ALIAS)?.build()?;
    let input = semi_join_at_source(&aggregate.input, grouped, &key_set, &Column::new(Some(KEYS_ALIAS), key.name.clone()))?;
    Ok(Some(LogicalPlan::Aggregate(Aggregate::try_new(Arc::new(input), aggregate.group_expr.clone(), aggregate.aggr_expr.clone())?)))
}

/// `plan ⋉ key_set ON column = key`, placed as deep as the column passes
/// unchanged: through projections, aliases, filters and inner joins to the
/// input it comes from, so fewer rows reach the joins (TPC-H Q2 keeps a
/// partsupp row only for a part of the right size and type before joining
/// suppliers). An inner join's output row has the key of its input's row.
fn semi_join_at_source(plan: &Arc<LogicalPlan>, column: &Column, key_set: &LogicalPlan, key: &Column) -> Result<LogicalPlan> {
    let deeper = match plan.as_ref() {
        LogicalPlan::Projection(projection) => match passed_from(plan, column) {
            Some(below) => Some(LogicalPlan::Projection(Projection::try_new(
                projection.expr.clone(),
                Arc::new(semi_join_at_source(&projection.input, &below, key_set, key)?),
            )?)),
            None => None,
        },
        LogicalPlan::SubqueryAlias(alias) => match passed_from(plan, column) {
            Some(below) => Some(LogicalPlan::SubqueryAlias(SubqueryAlias::try_new(
                Arc::new(semi_join_at_source(&alias.input, &below, key_set, key)?),
                alias.alias.clone(),
            )?)),
            None => None,
        },
        LogicalPlan::Filter(filter) => Some(LogicalPlan::Filter(Filter::try_new(
            filter.predicate.clone(),
            Arc::new(semi_join_at_source(&filter.input, column, key_set, key)?),
        )?)),
        LogicalPlan::Join(join) if join.join_type == JoinType::Inner => {
            let left = join.left.schema().has_column(column);
            let side = if left { &join.left } else { &join.right };
            if side.schema().has_column(column) {
                Some(LogicalPlan::Join(with_input(join, left, Arc::new(semi_join_at_source(side, column, key_set, key)?))?))
            } else {
                None
            }
        }
        _ => None,
    };
    match deeper {
        Some(plan) => Ok(plan),
        None => LogicalPlanBuilder::from(plan.as_ref().clone())
            .join(key_set.clone(), JoinType::LeftSemi, (vec![column.clone()], vec![key.clone()]), None)?
            .build(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::prelude::{SessionConfig, SessionContext};

    use crate::optimizer::logical::rule_tests::{self, below, plan, table};

    /// DataFusion's rules, then `GroupKeyFilter` when `with_rule`, over
    /// `p (pk, brand)` (the table filtered by brand; NULL and duplicate
    /// keys), `r (rk, q)` (the aggregated table: NULL, duplicate and
    /// unmatched keys, a NULL `q`), `o (ok, pk)` (another path to `p`'s keys)
    /// and the empty `e (rk, q)`.
    fn context(config: SessionConfig, with_rule: bool) -> SessionContext {
        let ctx = rule_tests::session(config, with_rule.then(|| Arc::new(GroupKeyFilter) as _));
        let tables = [
            ("p", table(["pk", "brand"], &[[Some(1), Some(1)], [Some(2), Some(1)], [Some(3), Some(2)], [None, Some(1)], [Some(5), Some(1)], [Some(6), None], [Some(2), Some(1)], [Some(7), Some(1)]])),
            ("r", table(["rk", "q"], &[[Some(1), Some(10)], [Some(1), Some(11)], [Some(2), None], [Some(3), Some(30)], [None, Some(40)], [Some(4), Some(50)], [Some(6), Some(60)], [Some(2), Some(20)], [Some(1), Some(1)]])),
            ("o", table(["ok", "pk"], &[[Some(100), Some(1)], [Some(101), Some(2)], [Some(102), Some(3)], [Some(103), None], [Some(104), Some(1)], [Some(105), Some(6)]])),
            ("e", table(["rk", "q"], &[])),
        ];
        for (name, table) in tables {
            ctx.register_table(name, table).expect("register");
        }
        ctx
    }

    /// Asserts each query answers the same with the rule as without it, and
    /// that the rule rewrote the plan exactly where marked `true`.
    async fn assert_same_answers(queries: &[(&str, bool)]) {
        rule_tests::assert_same_answers(&context(SessionConfig::new(), true), &context(SessionConfig::new(), false), queries).await;
    }

    #[tokio::test]
    async fn semi_joins_an_aggregate_joined_on_its_group_key_with_the_keys_of_the_filtered_table() {
        let ctx = context(SessionConfig::new(), true);
        let restricted = "LeftSemi Join: r.rk = __foam_group_keys.pk";
        for sql in [
            // A join with the aggregate, and TPC-H Q17's correlated average, decorrelated into one.
            "SELECT p.pk, a.t FROM p JOIN (SELECT rk, sum(q) AS t FROM r GROUP BY rk) AS a ON p.pk = a.rk WHERE p.brand = 1",
            "SELECT p.pk, r.q FROM p JOIN r ON p.pk = r.rk WHERE p.brand = 1 AND r.q > (SELECT avg(r2.q) FROM r AS r2 WHERE r2.rk = p.pk)",
            // The key reaches the join through another inner join; the aggregate is the semi join's left side.
            "SELECT o.ok, a.t FROM o JOIN p ON o.pk = p.pk JOIN (SELECT rk, sum(q) AS t FROM r GROUP BY rk) AS a ON o.pk = a.rk WHERE p.brand = 1",
            "SELECT a.rk, a.t FROM (SELECT rk, sum(q) AS t FROM r GROUP BY rk) AS a WHERE a.rk IN (SELECT pk FROM p WHERE brand = 1)",
        ] {
            let shown = plan(&ctx, sql).await;
            assert!(below(&shown, "Aggregate: groupBy=[[r", restricted), "{sql}: the aggregate's input is semi-joined with the keys:\n{shown}");
            assert!(below(&shown, "SubqueryAlias: __foam_group_keys", "Filter: p.brand = Int64(1)"), "{sql}: the keys are the filtered table's:\n{shown}");
            assert_eq!(shown.matches(restricted).count(), 1, "{sql}: restricted once:\n{shown}");
        }
        // Over an inner join, the semi join goes to the input the group key comes from.
        let sql = "SELECT p.pk, a.t FROM p JOIN (SELECT r.rk, sum(o.ok) AS t FROM r JOIN o ON r.rk = o.pk GROUP BY r.rk) AS a ON p.pk = a.rk WHERE p.brand = 1";
        let shown = plan(&ctx, sql).await;
        assert!(below(&shown, "Inner Join: r.rk = o.pk", restricted) && below(&shown, restricted, "TableScan: r") && !below(&shown, restricted, "TableScan: o"), "{shown}");
    }

    #[tokio::test]
    async fn leaves_preserved_aggregates_null_aware_and_null_equal_joins_and_unfiltered_keys_alone() {
        let with = context(SessionConfig::new(), true);
        let without = context(SessionConfig::new(), false);
        for sql in [
            // Joins that return the aggregate's unmatched groups.
            "SELECT a.rk, a.t, p.pk FROM (SELECT rk, sum(q) AS t FROM r GROUP BY rk) AS a LEFT JOIN p ON a.rk = p.pk AND p.brand = 1",
            "SELECT p.pk, a.t FROM p RIGHT JOIN (SELECT rk, sum(q) AS t FROM r GROUP BY rk) AS a ON p.pk = a.rk AND p.brand = 1",
            "SELECT a.rk, a.t, p.pk FROM (SELECT rk, sum(q) AS t FROM r GROUP BY rk) AS a FULL JOIN (SELECT * FROM p WHERE brand = 1) AS p ON a.rk = p.pk",
            "SELECT a.rk, a.t FROM (SELECT rk, sum(q) AS t FROM r GROUP BY rk) AS a WHERE a.rk NOT IN (SELECT pk FROM p WHERE brand = 1)",
            // NOT IN's null-aware anti join, NULL-equal keys, a rolled-up key.
            "SELECT p.pk FROM p WHERE p.brand = 1 AND p.pk NOT IN (SELECT rk FROM r GROUP BY rk)",
            "SELECT p.pk, a.t FROM p JOIN (SELECT rk, sum(q) AS t FROM r GROUP BY rk) AS a ON p.pk IS NOT DISTINCT FROM a.rk WHERE p.brand = 1",
            "SELECT p.pk, a.t FROM p JOIN (SELECT rk, sum(q) AS t FROM r GROUP BY ROLLUP (rk)) AS a ON p.pk = a.rk WHERE p.brand = 1",
            // Keys of an unfiltered table, or of a volatile filter.
            "SELECT p.pk, a.t FROM p JOIN (SELECT rk, sum(q) AS t FROM r GROUP BY rk) AS a ON p.pk = a.rk",
            "SELECT p.pk, a.t FROM p JOIN (SELECT rk, sum(q) AS t FROM r GROUP BY rk) AS a ON p.pk = a.rk WHERE random() >= 0",
        ] {
            let shown = plan(&with, sql).await;
            assert!(!shown.contains(KEYS_ALIAS), "{sql}:\n{shown}");
            assert_eq!(shown, plan(&without, sql).await, "{sql}");
        }
        let off = context(SessionConfig::new().with_option_extension(FoamOptions::default()), true);
        off.sql("SET foam.group_key_filters = false").await.expect("set").collect().await.expect("set");
        let sql = "SELECT p.pk, a.t FROM p JOIN (SELECT rk, sum(q) AS t FROM r GROUP BY rk) AS a ON p.pk = a.rk WHERE p.brand = 1";
        assert_eq!(plan(&off, sql).await, plan(&without, sql).await, "SET foam.group_key_filters = false turns the rule off");
    }

    #[tokio::test]
    async fn answers_the_same_with_aggregates_restricted_to_the_filtered_keys() {
        let agg = "(SELECT rk, sum(q) AS t, count(*) AS n, count(q) AS c FROM r GROUP BY rk) AS a";
        let queries = [
            (format!("SELECT p.pk, a.t, a.n, a.c FROM p JOIN {agg} ON p.pk = a.rk WHERE p.brand = 1"), true),
            (format!("SELECT p.pk, a.t, a.n, a.c FROM p JOIN {agg} ON p.pk = a.rk WHERE p.brand = 99"), true),
            (format!("SELECT p.pk, a.t, a.n, a.c FROM p LEFT JOIN {agg} ON p.pk = a.rk WHERE p.brand = 1"), true),
            (format!("SELECT p.pk, a.t, a.n, a.c FROM p RIGHT JOIN {agg} ON p.pk = a.rk WHERE p.brand = 1"), true),
            (format!("SELECT p.pk, a.t FROM p JOIN {agg} ON p.pk = a.rk AND p.pk = a.n WHERE p.brand = 1"), true),
            (format!("SELECT o.ok, a.t, a.n FROM o JOIN p ON o.pk = p.pk JOIN {agg} ON o.pk = a.rk WHERE p.brand = 1"), true),
            (format!("SELECT l.pk, a.t FROM (SELECT * FROM p WHERE brand = 1 ORDER BY pk LIMIT 2) AS l JOIN {agg} ON l.pk = a.rk"), true),
            (format!("SELECT a.rk, a.t, a.n FROM {agg} WHERE a.rk IN (SELECT pk FROM p WHERE brand = 1)"), true),
            (format!("SELECT a.rk, a.t, a.n FROM {agg} WHERE EXISTS (SELECT 1 FROM p WHERE p.pk = a.rk AND p.brand = 1)"), true),
            ("SELECT p.pk, a.t FROM p JOIN (SELECT rk, sum(q) AS t FROM e GROUP BY rk) AS a ON p.pk = a.rk WHERE p.brand = 1".to_string(), true),
            ("SELECT p.pk, a.m FROM p JOIN (SELECT rk, q, count(*) AS m FROM r GROUP BY rk, q) AS a ON p.pk = a.rk WHERE p.brand = 1".to_string(), true),
            ("SELECT p.pk, a.t FROM p JOIN (SELECT r.rk, sum(o.ok) AS t FROM r JOIN o ON r.rk = o.pk GROUP BY r.rk) AS a ON p.pk = a.rk WHERE p.brand = 1".to_string(), true),
            ("SELECT p.pk, r.q FROM p JOIN r ON p.pk = r.rk WHERE p.brand = 1 AND r.q > (SELECT avg(r2.q) FROM r AS r2 WHERE r2.rk = p.pk)".to_string(), true),
            ("SELECT p.pk FROM p WHERE p.brand = 1 AND p.pk IN (SELECT rk FROM r GROUP BY rk HAVING sum(q) > 15)".to_string(), true),
            ("SELECT p.pk FROM p WHERE p.brand = 1 AND NOT EXISTS (SELECT 1 FROM r GROUP BY rk HAVING rk = p.pk)".to_string(), true),
            ("SELECT p.pk FROM p WHERE p.brand = 1 AND (p.pk IN (SELECT rk FROM r GROUP BY rk) OR p.pk = 5)".to_string(), true),
            ("SELECT p.pk FROM p WHERE p.brand = 1 AND (p.pk NOT IN (SELECT rk FROM r GROUP BY rk) OR p.pk = 5)".to_string(), true),
            (format!("SELECT a.rk, a.t, p.pk FROM {agg} LEFT JOIN p ON a.rk = p.pk AND p.brand = 1"), false),
            (format!("SELECT p.pk, a.t FROM p RIGHT JOIN {agg} ON p.pk = a.rk AND p.brand = 1"), false),
            (format!("SELECT a.rk, a.t, p.pk FROM {agg} FULL JOIN (SELECT * FROM p WHERE brand = 1) AS p ON a.rk = p.pk"), false),
            (format!("SELECT a.rk, a.t FROM {agg} WHERE a.rk NOT IN (SELECT pk FROM p WHERE brand = 1 AND pk IS NOT NULL)"), false),
            (format!("SELECT o.ok, a.t FROM o LEFT JOIN (SELECT * FROM p WHERE brand = 1) AS f ON o.pk = f.pk JOIN {agg} ON o.pk = a.rk"), false),
            ("SELECT p.pk FROM p WHERE p.brand = 1 AND p.pk NOT IN (SELECT rk FROM r GROUP BY rk)".to_string(), false),
            (format!("SELECT p.pk, a.t FROM p JOIN {agg} ON p.pk IS NOT DISTINCT FROM a.rk WHERE p.brand = 1"), false),
            ("SELECT p.pk, a.t FROM p JOIN (SELECT rk, sum(q) AS t FROM r GROUP BY ROLLUP (rk)) AS a ON p.pk = a.rk WHERE p.brand = 1".to_string(), false),
        ];
        let queries: Vec<(&str, bool)> = queries.iter().map(|(sql, rewritten)| (sql.as_str(), *rewritten)).collect();
        assert_same_answers(&queries).await;
    }
}
