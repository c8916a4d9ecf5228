//! PostgreSQL's multiplicities for `INTERSECT ALL` and `EXCEPT ALL`. A row
//! that appears `m` times on the left and `n` times on the right appears
//! `min(m, n)` times in `INTERSECT ALL` and `max(m - n, 0)` times in
//! `EXCEPT ALL`. DataFusion 55 plans both as a plain semi or anti join on
//! every column, which keeps all `m` copies of a row found on the right
//! (`INTERSECT ALL`) or drops all of them (`EXCEPT ALL`): three rows of 1
//! `INTERSECT ALL` one row of 1 gave three rows instead of one.
//!
//! An analyzer rule numbers the copies of each row on both sides and joins
//! on the number as well: the `k`-th copy on the left is kept by
//! `INTERSECT ALL` when the right has a `k`-th copy, and by `EXCEPT ALL`
//! when it has not.
//!
//! ```text
//!   L ⋉ R on every column (NULL = NULL)
//!     ─▶ project L's columns: (L, row_number() OVER (PARTITION BY L's columns))
//!                          ⋉ (R, row_number() OVER (PARTITION BY R's columns))  on every column and the numbers
//! ```
//! DataFusion's planner builds exactly that join for the set operations and
//! nothing else, before any optimizer rule runs: a semi or anti join with
//! NULLs equal, a key pair for each column in order and no other
//! condition. Where the two sides' types differ, type coercion has cast
//! the keys to a common type: each side's copies are numbered among the
//! rows with equal keys as compared, casts included (a NULL on one side
//! and a cast NULL on the other were missed, so every copy was kept).
//! Without `ALL` the left side is made distinct first, where one copy is
//! all there is: such joins are left as they are.

use std::sync::Arc;

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{Column, NullEquality, Result};
use datafusion::functions_window::expr_fn::row_number;
use datafusion::logical_expr::{Expr, ExprFunctionExt, Join, JoinConstraint, JoinType, LogicalPlan, LogicalPlanBuilder};
use datafusion::optimizer::AnalyzerRule;

/// The numbers of the copies, one name per side.
const LEFT_COPY: &str = "__foam_left_copy";
const RIGHT_COPY: &str = "__foam_right_copy";

/// The analyzer rule (see the module documentation).
#[derive(Debug, Default)]
pub struct SetOperationMultiplicity;

impl AnalyzerRule for SetOperationMultiplicity {
    fn name(&self) -> &str {
        "foam_set_operation_multiplicity"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        plan.transform_up_with_subqueries(|plan| match &plan {
            LogicalPlan::Join(join) if is_set_operation_all(join) => Ok(Transformed::yes(numbered_join(join)?)),
            _ => Ok(Transformed::no(plan)),
        })
        .map(|rewritten| rewritten.data)
    }
}

/// True for the join DataFusion plans `INTERSECT ALL` or `EXCEPT ALL` as.
fn is_set_operation_all(join: &Join) -> bool {
    let columns = join.left.schema().columns();
    matches!(join.join_type, JoinType::LeftSemi | JoinType::LeftAnti)
        && join.null_equality == NullEquality::NullEqualsNull
        && join.filter.is_none()
        && !join.null_aware
        && !matches!(join.left.as_ref(), LogicalPlan::Distinct(_))
        && !columns.is_empty()
        && join.on.len() == columns.len()
        && join.on.iter().zip(&columns).all(|((left, _), column)| key_column(left).is_some_and(|c| c.name == column.name))
}

/// The column a join key compares, under the casts type coercion adds.
fn key_column(key: &Expr) -> Option<&Column> {
    match key {
        Expr::Column(column) => Some(column),
        Expr::Cast(cast) => key_column(&cast.expr),
        Expr::TryCast(cast) => key_column(&cast.expr),
        _ => None,
    }
}

/// The join on every column and the copies' numbers, with the left side's
/// columns only.
fn numbered_join(join: &Join) -> Result<LogicalPlan> {
    let columns: Vec<Expr> = join.left.schema().columns().into_iter().map(Expr::Column).collect();
    let (left, left_keys) = numbered(&join.left, join.on.iter().map(|(key, _)| key.clone()).collect(), LEFT_COPY)?;
    let (right, right_keys) = numbered(&join.right, join.on.iter().map(|(_, key)| key.clone()).collect(), RIGHT_COPY)?;
    let on = left_keys.into_iter().zip(right_keys).chain([(column(LEFT_COPY), column(RIGHT_COPY))]).collect();
    let joined = Join::try_new(Arc::new(left), Arc::new(right), on, None, join.join_type, JoinConstraint::On, NullEquality::NullEqualsNull, false)?;
    LogicalPlanBuilder::from(LogicalPlan::Join(joined)).project(columns)?.build()
}

/// `input` with each row's copy number among the rows whose `keys` (the
/// join's, on this side) are equal to its own, and the keys as columns of
/// their own. The window partitions by those columns rather than by the
/// keys: DataFusion 55 lost track of the ordering of a window partitioned
/// by one column cast to two types (`Expects PARTITION BY expression to
/// be ordered` for `SELECT x::bigint, x::numeric ... EXCEPT ALL SELECT
/// b, b ...`).
fn numbered(input: &Arc<LogicalPlan>, keys: Vec<Expr>, name: &str) -> Result<(LogicalPlan, Vec<Expr>)> {
    let key_names: Vec<String> = (0..keys.len()).map(|i| format!("{name}_key{i}")).collect();
    let projected = input.schema().columns().into_iter().map(Expr::Column).chain(keys.into_iter().zip(&key_names).map(|(key, n)| key.alias(n)));
    let key_columns: Vec<Expr> = key_names.iter().map(|n| column(n)).collect();
    let number = row_number().partition_by(key_columns.clone()).build()?.alias(name);
    let plan = LogicalPlanBuilder::from(Arc::clone(input)).project(projected)?.window(vec![number])?.build()?;
    Ok((plan, key_columns))
}

fn column(name: &str) -> Expr {
    Expr::Column(Column::from_name(name))
}

#[cfg(test)]
mod tests {
    use datafusion::prelude::SessionConfig;

    use crate::optimizer::logical::rule_tests::{answer, table};

    fn session() -> datafusion::prelude::SessionContext {
        let ctx = crate::optimizer::logical::rule_tests::session(SessionConfig::new(), None);
        ctx.add_analyzer_rule(std::sync::Arc::new(super::SetOperationMultiplicity));
        let l = table(["a", "b"], &[[Some(1), Some(1)], [Some(1), Some(1)], [Some(1), Some(1)], [Some(2), None], [Some(2), None], [Some(3), Some(3)]]);
        let r = table(["a", "b"], &[[Some(1), Some(1)], [Some(2), None], [Some(2), None], [Some(2), None], [Some(4), Some(4)]]);
        ctx.register_table("l", l).expect("l");
        ctx.register_table("r", r).expect("r");
        ctx
    }

    /// The answers PostgreSQL 15 gives for the same rows.
    #[tokio::test]
    async fn all_keeps_postgresql_multiplicities_and_distinct_is_unchanged() {
        let ctx = session();
        let cases: &[(&str, &[&str])] = &[
            ("SELECT a, b FROM l INTERSECT ALL SELECT a, b FROM r", &["1 | 1", "2 | ", "2 | "]),
            ("SELECT a, b FROM l EXCEPT ALL SELECT a, b FROM r", &["1 | 1", "1 | 1", "3 | 3"]),
            ("SELECT a, b FROM l INTERSECT SELECT a, b FROM r", &["1 | 1", "2 | "]),
            ("SELECT a, b FROM l EXCEPT SELECT a, b FROM r", &["3 | 3"]),
            ("SELECT a FROM r INTERSECT ALL SELECT a FROM l", &["1", "2", "2"]),
            ("SELECT a FROM r EXCEPT ALL SELECT a FROM l", &["2", "4"]),
            ("SELECT count(*) FROM (SELECT a FROM l INTERSECT ALL SELECT a FROM l) t", &["6"]),
            // Sides of different types: the keys are cast (seed 53003 q55).
            ("SELECT count(*) FROM (SELECT b FROM l INTERSECT ALL SELECT CAST(b AS DECIMAL(20,2)) FROM r) t", &["3"]),
            ("SELECT count(*) FROM (SELECT b FROM l EXCEPT ALL SELECT CAST(b AS DECIMAL(20,2)) FROM r) t", &["3"]),
            ("SELECT count(*) FROM (SELECT CAST(b AS DECIMAL(20,2)) FROM r INTERSECT ALL SELECT b FROM l) t", &["3"]),
            ("SELECT count(*) FROM (SELECT b FROM l INTERSECT ALL SELECT CAST(NULL AS INT)) t", &["1"]),
        ];
        for (sql, expected) in cases {
            let got = answer(&ctx, sql).await;
            let mut want: Vec<String> = expected.iter().map(|s| s.to_string()).collect();
            want.sort();
            assert_eq!(&got[1..], want.as_slice(), "{sql}");
        }
    }
}
