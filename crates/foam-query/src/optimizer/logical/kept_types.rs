//! Keeps a rewrite from changing the types of a plan's output: a guard
//! around DataFusion's `single_distinct_aggregation_to_group_by`. That rule
//! computes `sum(DISTINCT x), sum(y)` in two steps, an inner `sum(y)` per
//! distinct `x` and an outer sum of those; the outer sum of a DECIMAL(p, s)
//! sum is DECIMAL(p + 10, s), wider than the `sum(y)` the plan above was
//! typed with. Values are right, but an operator planned with the old type
//! (a comparison, a join key) then fails at run time with XX000 "Invalid
//! comparison operation: Decimal128(30, 2) == Decimal128(20, 2)" (fuzz seeds
//! 56039, 57027, 57058). DataFusion's check that a rule keeps the schema
//! compares types loosely and lets this pass.
//!
//! After the guarded rule rewrites a node, each output column whose type
//! changed is cast back to the type the node had, in the rule's own final
//! projection where it made one:
//!
//! ```text
//!   Projection: sum(alias2) AS sum(t.y)       Projection: CAST(sum(alias2) AS Decimal128(20, 2)) AS sum(t.y)
//!     Aggregate: sum(alias2)            ─▶      Aggregate: sum(alias2)
//! ```
//! The cast cannot lose a value the original plan could hold: an outer sum
//! that does not fit the original type is one the original sum would have
//! overflowed, and the cast fails the query as that would have.

use std::sync::Arc;

use datafusion::common::tree_node::Transformed;
use datafusion::common::{DFSchemaRef, Result};
use datafusion::logical_expr::{Expr, ExprSchemable, LogicalPlan, Projection, cast};
use datafusion::optimizer::optimizer::ApplyOrder;
use datafusion::optimizer::{OptimizerConfig, OptimizerRule};

/// DataFusion's rules whose rewrites can widen a column's type.
pub const TYPE_CHANGING_RULES: &[&str] = &["single_distinct_aggregation_to_group_by"];

/// A DataFusion rule whose rewrites are made to keep the rewritten node's
/// output types (see the module documentation).
#[derive(Debug)]
pub struct TypesKept(pub Arc<dyn OptimizerRule + Send + Sync>);

impl OptimizerRule for TypesKept {
    fn name(&self) -> &str {
        self.0.name()
    }

    fn apply_order(&self) -> Option<ApplyOrder> {
        self.0.apply_order()
    }

    fn rewrite(&self, plan: LogicalPlan, config: &dyn OptimizerConfig) -> Result<Transformed<LogicalPlan>> {
        let before = Arc::clone(plan.schema());
        let rewritten = self.0.rewrite(plan, config)?;
        if !rewritten.transformed || same_types(&before, rewritten.data.schema()) {
            return Ok(rewritten);
        }
        restore_types(rewritten.data, &before).map(Transformed::yes)
    }
}

/// Whether two schemas of the same width hold the same types in order.
fn same_types(before: &DFSchemaRef, after: &DFSchemaRef) -> bool {
    before.fields().len() == after.fields().len()
        && before.fields().iter().zip(after.fields().iter()).all(|(b, a)| b.data_type() == a.data_type())
}

/// `plan` with each output column cast back to its type in `before`, under
/// the same name and qualifier.
fn restore_types(plan: LogicalPlan, before: &DFSchemaRef) -> Result<LogicalPlan> {
    if before.fields().len() != plan.schema().fields().len() {
        // Not a change of types; left for DataFusion's own schema check.
        return Ok(plan);
    }
    let (exprs, input) = match plan {
        LogicalPlan::Projection(projection) => (projection.expr, projection.input),
        other => {
            let columns = other.schema().columns().into_iter().map(Expr::Column).collect();
            (columns, Arc::new(other))
        }
    };
    let restored = exprs
        .into_iter()
        .enumerate()
        .map(|(i, expr)| {
            let (qualifier, field) = before.qualified_field(i);
            if expr.get_type(input.schema())? == *field.data_type() {
                return Ok(expr);
            }
            Ok(cast(expr.unalias(), field.data_type().clone()).alias_qualified(qualifier.cloned(), field.name()))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(LogicalPlan::Projection(Projection::try_new(restored, input)?))
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::util::pretty::pretty_format_batches;
    use datafusion::execution::SessionStateBuilder;
    use datafusion::prelude::SessionContext;

    /// The rows of `sql` with FoamDB's logical rules over a table of
    /// DECIMAL(10,2) values with a repeat and a NULL.
    async fn rows(sql: &str) -> String {
        let state = SessionStateBuilder::new().with_default_features().with_optimizer_rules(crate::optimizer::logical_rules()).build();
        let ctx = SessionContext::new_with_state(state);
        ctx.sql("CREATE TABLE t (g INT, h DECIMAL(10,2)) AS VALUES (1, 1.50), (1, 1.50), (2, 2.25), (NULL, NULL)")
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        let batches = ctx.sql(sql).await.unwrap().collect().await.unwrap();
        pretty_format_batches(&batches).unwrap().to_string()
    }

    #[tokio::test]
    async fn a_sum_beside_a_distinct_sum_keeps_its_type() {
        let types = rows("SELECT arrow_typeof(sum(h)) AS s, arrow_typeof(sum(DISTINCT h)) AS d FROM t").await;
        assert!(types.contains("| Decimal128(20, 2) | Decimal128(20, 2) |"), "{types}");
        // Compared with a plain sum, typed from the schema: XX000 before.
        let compared = rows(
            "SELECT g, s, d FROM (SELECT g, sum(h) AS s, sum(DISTINCT h) AS d FROM t GROUP BY g) x \
             WHERE s = (SELECT sum(h) FROM t WHERE t.g = 1) OR s IS NULL ORDER BY g",
        )
        .await;
        assert_eq!(
            compared.trim(),
            "+---+------+------+\n| g | s    | d    |\n+---+------+------+\n| 1 | 3.00 | 1.50 |\n|   |      |      |\n+---+------+------+"
        );
    }
}
