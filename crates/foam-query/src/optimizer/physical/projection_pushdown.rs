//! Projection pushdown without DataFusion 55's slip at filters that project:
//! a guard around its `ProjectionPushdown` rule.
//!
//! A `FilterExec` can carry a projection of its own (the columns it passes
//! on). When the rule swaps a `ProjectionExec` above such a filter with the
//! filter, it reads the projection's columns, which index the filter's
//! output, as indexes into the filter's input (`FilterExec::
//! try_swapping_with_projection`). Where the names there differ, DataFusion's
//! own assertion fails the statement with XX000 "Input field name a does not
//! match with the projection expression g" (fuzz seed 57007 q18, a DISTINCT
//! over a LEFT JOIN filtered on the padded side). Where they agree, as two
//! columns named `f` of a self-join's sides do, the plan would silently read
//! the other column.
//!
//! The guard gives the rule a plan in which each filter under a projection
//! passes its columns through a `ProjectionExec` of its own instead; the
//! rule merges the two projections, which it does right, and then swaps or
//! embeds them as before:
//!
//! ```text
//!   ProjectionExec [g@0, c1, f@3]           ProjectionExec [g@0, c1, f@3]
//!     FilterExec p, projection=[2,0,4,1]  ─▶  ProjectionExec [g@2, a@0, h@4, f@1]
//!       NestedLoopJoinExec                      FilterExec p
//!                                                 NestedLoopJoinExec
//! ```

use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::config::ConfigOptions;
use datafusion::error::Result;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::{ChildrenPropertiesMode, ExecutionPlan, ReplaceChildrenOptions};
use datafusion::physical_plan::filter::{FilterExec, FilterExecBuilder};
use datafusion::physical_plan::projection::{ProjectionExec, ProjectionExpr};

/// The name of DataFusion's rule this guards.
pub const PROJECTION_PUSHDOWN_RULE: &str = "ProjectionPushdown";

/// DataFusion's `ProjectionPushdown`, given filters whose projections are
/// operators of their own (see the module documentation).
#[derive(Debug)]
pub struct GuardedProjectionPushdown(pub Arc<dyn PhysicalOptimizerRule + Send + Sync>);

impl PhysicalOptimizerRule for GuardedProjectionPushdown {
    fn optimize(&self, plan: Arc<dyn ExecutionPlan>, config: &ConfigOptions) -> Result<Arc<dyn ExecutionPlan>> {
        self.0.optimize(split_filter_projections(plan)?, config)
    }

    fn name(&self) -> &str {
        self.0.name()
    }

    fn schema_check(&self) -> bool {
        self.0.schema_check()
    }
}

/// `plan` with each projecting filter right under a projection written as
/// a filter under a projection of its columns.
pub fn split_filter_projections(plan: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    plan.transform_up(|node| {
        let Some(projection) = node.downcast_ref::<ProjectionExec>() else { return Ok(Transformed::no(node)) };
        let Some(filter) = projection.input().downcast_ref::<FilterExec>() else { return Ok(Transformed::no(node)) };
        let Some(columns) = filter.projection().clone() else { return Ok(Transformed::no(node)) };
        let bare: Arc<dyn ExecutionPlan> = Arc::new(FilterExecBuilder::from(filter).apply_projection(None)?.build()?);
        let input_schema = bare.schema();
        let passed = columns.iter().map(|&i| {
            let name = input_schema.field(i).name().clone();
            ProjectionExpr::new(Arc::new(Column::new(&name, i)), name)
        });
        let passing: Arc<dyn ExecutionPlan> = Arc::new(ProjectionExec::try_new(passed, bare)?);
        Ok(Transformed::yes(node.clone().replace_children(vec![passing], ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute))?))
    })
    .map(|t| t.data)
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::util::pretty::pretty_format_batches;
    use datafusion::execution::SessionStateBuilder;
    use datafusion::prelude::SessionContext;

    /// The answer of seed 57007 q18's reduced shape, with DataFusion's rules
    /// (`guarded`: as FoamDB runs them), or its error.
    async fn answer(guarded: bool, join: &str) -> Result<String, String> {
        let mut state = SessionStateBuilder::new().with_default_features();
        if guarded {
            state = state.with_physical_optimizer_rules(crate::optimizer::guarded_datafusion_rules());
        }
        let ctx = SessionContext::new_with_state(state.build());
        for sql in [
            "CREATE TABLE l (a INT, f BOOLEAN, g DATE, h DECIMAL(10,2)) AS VALUES \
             (1, true, DATE '2024-01-01', 1.00), (2, false, DATE '2024-01-02', 2.00), (3, NULL, DATE '2024-01-03', 3.00)",
            "CREATE TABLE r (a INT, f BOOLEAN, g DATE, h DECIMAL(10,2)) AS VALUES \
             (1, true, DATE '2024-02-01', 5.00), (2, NULL, DATE '2024-02-02', 6.00)",
        ] {
            ctx.sql(sql).await.unwrap().collect().await.unwrap();
        }
        let sql = format!(
            "SELECT DISTINCT l.g, CASE WHEN l.a > 0 THEN r.h ELSE r.h END AS c1, l.f FROM l LEFT JOIN r ON {join} \
             WHERE r.f IS NULL ORDER BY l.g"
        );
        let run = async { ctx.sql(&sql).await?.collect().await };
        run.await.map(|b| pretty_format_batches(&b).unwrap().to_string()).map_err(|e| e.to_string())
    }

    #[tokio::test]
    async fn a_projection_over_a_projecting_filter_reads_the_right_columns() {
        let unguarded = answer(false, "true").await;
        assert!(unguarded.as_ref().is_err_and(|e| e.contains("does not match with the projection expression")), "{unguarded:?}");
        // On `true` every row of l meets r's rows, whose f is NULL for a = 2.
        let on_true = answer(true, "true").await.unwrap();
        assert_eq!(
            on_true.lines().filter(|l| l.starts_with("| 2")).collect::<Vec<_>>(),
            ["| 2024-01-01 | 6.00 | true  |", "| 2024-01-02 | 6.00 | false |", "| 2024-01-03 | 6.00 |       |"],
            "{on_true}"
        );
        let on_key = answer(true, "l.a = r.a").await.unwrap();
        assert_eq!(
            on_key.lines().filter(|l| l.starts_with("| 2")).collect::<Vec<_>>(),
            ["| 2024-01-02 | 6.00 | false |", "| 2024-01-03 |      |       |"],
            "{on_key}"
        );
    }
}
