//! Keeps a filter that reads no column where it is: a guard around
//! DataFusion's `push_down_filter`, which moves a conjunct below an
//! aggregate when every column it reads is a grouping column. For a conjunct
//! that reads none (`1 NOT IN (..)` before its subquery is unnested, a
//! comparison with an uncorrelated subquery) that holds vacuously, and the
//! rule moves it below an aggregate without GROUP BY, which answers a row on
//! no input that the filter, below it, can no longer remove:
//!
//! ```text
//!   Filter: 1 NOT IN (..)            Aggregate: count(*)        ← one row (0) where
//!     Aggregate: count(*)   ─✗─▶       Filter: 1 NOT IN (..)      SQL answers none
//! ```
//! Spark fixed the same in SPARK-17712 and SPARK-22983. The rule pushes a
//! filter through projections and into other filters by calling itself,
//! past any guard around it, so whether an aggregate lies on the way cannot
//! be checked where the filter starts: such conjuncts stay where the query
//! put them, and the others are pushed as before. A conjunct that reads no
//! column filters all rows or none, so leaving it higher costs little.

use std::sync::Arc;

use datafusion::common::Result;
use datafusion::common::tree_node::Transformed;
use datafusion::logical_expr::utils::{conjunction, split_conjunction};
use datafusion::logical_expr::{Expr, Filter, LogicalPlan};
use datafusion::optimizer::optimizer::ApplyOrder;
use datafusion::optimizer::{OptimizerConfig, OptimizerRule};

/// The name of DataFusion's rule this guards.
pub const FILTER_PUSHDOWN_RULE: &str = "push_down_filter";

/// DataFusion's `push_down_filter`, kept from moving the conjuncts of a
/// filter that read no column (see the module documentation).
#[derive(Debug)]
pub struct AggregateFilterGuard(pub Arc<dyn OptimizerRule + Send + Sync>);

impl OptimizerRule for AggregateFilterGuard {
    fn name(&self) -> &str {
        self.0.name()
    }

    fn apply_order(&self) -> Option<ApplyOrder> {
        self.0.apply_order()
    }

    fn rewrite(&self, plan: LogicalPlan, config: &dyn OptimizerConfig) -> Result<Transformed<LogicalPlan>> {
        let LogicalPlan::Filter(filter) = &plan else { return self.0.rewrite(plan, config) };
        let (stay, movable): (Vec<Expr>, Vec<Expr>) =
            split_conjunction(&filter.predicate).into_iter().cloned().partition(|conjunct| conjunct.column_refs().is_empty());
        if stay.is_empty() {
            return self.0.rewrite(plan, config);
        }
        let Some(movable) = conjunction(movable) else { return Ok(Transformed::no(plan)) };
        let pushed = self.0.rewrite(LogicalPlan::Filter(Filter::try_new(movable, filter.input.clone())?), config)?;
        if !pushed.transformed {
            return Ok(Transformed::no(plan));
        }
        let stay = conjunction(stay).expect("at least one conjunct stays");
        Ok(Transformed::yes(LogicalPlan::Filter(Filter::try_new(stay, Arc::new(pushed.data))?)))
    }
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::util::pretty::pretty_format_batches;
    use datafusion::execution::SessionStateBuilder;
    use datafusion::prelude::SessionContext;

    /// The sorted rows of `sql` with FoamDB's logical rules, over a table
    /// whose `b` has a NULL; the expected answers are PostgreSQL 15's.
    async fn rows(sql: &str) -> Vec<String> {
        let state = SessionStateBuilder::new().with_default_features().with_optimizer_rules(crate::optimizer::logical_rules()).build();
        let ctx = SessionContext::new_with_state(state);
        ctx.sql("CREATE TABLE s (a INT, b INT) AS VALUES (1, 2), (2, 2), (3, NULL), (4, 5)").await.unwrap().collect().await.unwrap();
        let batches = ctx.sql(sql).await.unwrap().collect().await.unwrap();
        let text = pretty_format_batches(&batches).unwrap().to_string();
        let mut rows: Vec<String> =
            text.lines().filter(|l| l.starts_with('|')).skip(1).map(|l| l.trim_matches('|').split('|').map(str::trim).collect::<Vec<_>>().join(" ")).collect();
        rows.sort();
        rows
    }

    #[tokio::test]
    async fn a_filter_reading_no_column_stays_above_an_aggregate_without_groups() {
        // 1 is among s.a, so NOT IN is false and no row is left; below the
        // count, the filter left one row counting 0.
        assert_eq!(rows("SELECT n FROM (SELECT count(*) AS n FROM s) AS w WHERE 1 NOT IN (SELECT a FROM s)").await, Vec::<String>::new());
        assert_eq!(rows("SELECT n FROM (SELECT count(*) AS n FROM s) AS w WHERE 9 NOT IN (SELECT a FROM s)").await, vec!["4"]);
        let grouped = "SELECT b, n FROM (SELECT b, count(*) AS n FROM s GROUP BY b) AS w WHERE 1 NOT IN (SELECT a FROM s)";
        assert_eq!(rows(grouped).await, Vec::<String>::new());
        // Pushed through the projection and into the HAVING filter by the
        // rule's own recursion, not only straight onto the aggregate.
        let having = "SELECT -2 FROM (SELECT min(b) FROM s HAVING count(a) <> 3) AS w WHERE 2 NOT IN (SELECT b FROM s WHERE b IS NOT NULL)";
        assert_eq!(rows(having).await, Vec::<String>::new());
        let having = "SELECT -2 FROM (SELECT min(b) FROM s HAVING count(a) <> 3) AS w WHERE 9 NOT IN (SELECT b FROM s WHERE b IS NOT NULL)";
        assert_eq!(rows(having).await, vec!["-2"]);
    }

    #[tokio::test]
    async fn a_filter_on_a_column_some_grouping_set_lacks_stays_above_too() {
        let sets = "SELECT b, n FROM (SELECT b, count(*) AS n FROM s GROUP BY GROUPING SETS ((b), ())) AS w WHERE b IS NULL";
        assert_eq!(rows(sets).await, vec![" 1", " 4"]);
        let rollup = "SELECT a, b, n FROM (SELECT a, b, count(*) AS n FROM s GROUP BY ROLLUP (a, b)) AS w WHERE a > 2";
        assert_eq!(rows(rollup).await, vec!["3  1", "3  1", "4  1", "4 5 1"], "the () row has a NULL, so it is not among them");
    }
}
