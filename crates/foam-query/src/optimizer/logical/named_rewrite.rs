//! Rewrites every expression of a plan and of its subqueries, each keeping
//! its name, for the analyzer rules that change how an expression is
//! computed but not what it is called (`pg_casts.rs`,
//! `checked_arithmetic.rs`).

use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{DFSchema, Result};
use datafusion::logical_expr::expr::GroupingSet;
use datafusion::logical_expr::expr_rewriter::NamePreserver;
use datafusion::logical_expr::{Expr, LogicalPlan};

/// `plan` with `rewrite` applied bottom-up to every expression, given the
/// node's input columns; an expression `rewrite` changed keeps its name.
pub fn rewrite_expressions(plan: LogicalPlan, rewrite: impl Fn(Expr, &DFSchema) -> Result<Transformed<Expr>>) -> Result<LogicalPlan> {
    rewrite_expressions_over(plan, |expr, schema, _| rewrite(expr, schema))
}

/// [`rewrite_expressions`], `rewrite` also given the node's inputs (to
/// follow a column down to where it comes from).
pub fn rewrite_expressions_over(
    plan: LogicalPlan,
    rewrite: impl Fn(Expr, &DFSchema, &[LogicalPlan]) -> Result<Transformed<Expr>>,
) -> Result<LogicalPlan> {
    plan.transform_up_with_subqueries(|plan| {
        let inputs: Vec<LogicalPlan> = plan.inputs().into_iter().cloned().collect();
        let mut schema = DFSchema::empty();
        for input in &inputs {
            schema.merge(input.schema());
        }
        let names = NamePreserver::new(&plan);
        let named = |expr: Expr| -> Result<Transformed<Expr>> {
            let name = names.save(&expr);
            let rewritten = expr.transform_up(|e| rewrite(e, &schema, &inputs))?;
            Ok(if rewritten.transformed { rewritten.update_data(|e| name.restore(e)) } else { rewritten })
        };
        let rewritten = plan.map_expressions(|expr| match expr {
            // Each member keeps its name: an alias around the whole set
            // would make it one group column named like the clause
            // ("No field named r.g. Valid fields are \"ROLLUP (r.h, r.g)\"",
            // fuzz seed 58349 w10).
            Expr::GroupingSet(set) => grouping_set_members(set, &named).map(|t| t.update_data(Expr::GroupingSet)),
            expr => named(expr),
        })?;
        if rewritten.transformed { rewritten.map_data(|plan| plan.recompute_schema()) } else { Ok(rewritten) }
    })
    .map(|rewritten| rewritten.data)
}

/// `set` with `rewrite` applied to each member.
fn grouping_set_members(set: GroupingSet, rewrite: &dyn Fn(Expr) -> Result<Transformed<Expr>>) -> Result<Transformed<GroupingSet>> {
    let mut changed = false;
    let mut each = |exprs: Vec<Expr>| -> Result<Vec<Expr>> {
        exprs
            .into_iter()
            .map(|e| {
                let rewritten = rewrite(e)?;
                changed |= rewritten.transformed;
                Ok(rewritten.data)
            })
            .collect()
    };
    let set = match set {
        GroupingSet::Rollup(exprs) => GroupingSet::Rollup(each(exprs)?),
        GroupingSet::Cube(exprs) => GroupingSet::Cube(each(exprs)?),
        GroupingSet::GroupingSets(sets) => GroupingSet::GroupingSets(sets.into_iter().map(&mut each).collect::<Result<_>>()?),
    };
    Ok(Transformed::new_transformed(set, changed))
}
