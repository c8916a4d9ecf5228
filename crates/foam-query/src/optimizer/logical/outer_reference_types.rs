//! Gives a correlated subquery's outer references the types their columns
//! have after type coercion. DataFusion 55's SQL planner stores a type in
//! each outer reference when it plans the subquery, before type coercion;
//! for an outer column whose expression coercion later widens, the stored
//! type is the narrower one (`CASE WHEN a <= 5 THEN a ELSE -1 END`, `a`
//! INT: the reference says Int32, the column becomes Int64). Coercion inside
//! the subquery trusts the stored type, so `inner.b = outer.c1` got no cast;
//! unnested, the join compared Int32 with Int64 keys and planning failed
//! ("Only intervals with the same data type are comparable", fuzz seed
//! 42045) or a filter inferred across the keys failed at run time.
//!
//! An analyzer rule after DataFusion's coercion: each outer reference whose
//! column has another type in the schema around the subquery takes that
//! type, and when any did, coercion runs over the plan again so the
//! comparisons that reference takes part in get their casts.
//!
//! ```text
//!   outer_ref(c1: Int32) = b     c1 is Int64 above the subquery, b Int32
//!     ─▶ outer_ref(c1: Int64) = CAST(b AS Int64)
//! ```

use std::sync::Arc;

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{DFSchema, Result};
use datafusion::logical_expr::utils::merge_schema;
use datafusion::logical_expr::{Expr, LogicalPlan, Subquery};
use datafusion::optimizer::AnalyzerRule;
use datafusion::optimizer::analyzer::type_coercion::TypeCoercion;

/// The analyzer rule (see the module documentation).
#[derive(Debug, Default)]
pub struct OuterReferenceTypes;

impl AnalyzerRule for OuterReferenceTypes {
    fn name(&self) -> &str {
        "foam_outer_reference_types"
    }

    fn analyze(&self, plan: LogicalPlan, config: &ConfigOptions) -> Result<LogicalPlan> {
        let retyped = plan.transform_down_with_subqueries(|node| {
            if !node.expressions().iter().any(has_subquery) {
                return Ok(Transformed::no(node));
            }
            let around = merge_schema(&node.inputs());
            node.map_expressions(|expr| expr.transform_down(|expr| retype_subquery(expr, &around)))
        })?;
        if retyped.transformed { TypeCoercion::new().analyze(retyped.data, config) } else { Ok(retyped.data) }
    }
}

/// True when `expr` holds a subquery.
fn has_subquery(expr: &Expr) -> bool {
    expr.exists(|e| Ok(matches!(e, Expr::ScalarSubquery(_) | Expr::Exists(_) | Expr::InSubquery(_) | Expr::SetComparison(_))))
        .unwrap_or(false)
}

/// `expr` with the outer references of the subquery it is (if it is one)
/// retyped from `around`, the schema of the inputs of the node holding it.
fn retype_subquery(expr: Expr, around: &DFSchema) -> Result<Transformed<Expr>> {
    let retype = |subquery: Subquery| -> Result<Transformed<Subquery>> {
        let plan = Arc::unwrap_or_clone(subquery.subquery).transform_down_with_subqueries(|node| {
            node.map_expressions(|expr| expr.transform_down(|expr| retype_reference(expr, around)))
                .and_then(|node| node.map_data(|node| node.recompute_schema()))
        })?;
        let mut changed = plan.transformed;
        let mut outer_ref_columns = Vec::with_capacity(subquery.outer_ref_columns.len());
        for column in subquery.outer_ref_columns {
            let retyped = column.transform_down(|expr| retype_reference(expr, around))?;
            changed |= retyped.transformed;
            outer_ref_columns.push(retyped.data);
        }
        let subquery = Subquery { subquery: Arc::new(plan.data), outer_ref_columns, spans: subquery.spans };
        Ok(if changed { Transformed::yes(subquery) } else { Transformed::no(subquery) })
    };
    Ok(match expr {
        Expr::ScalarSubquery(subquery) => retype(subquery)?.update_data(Expr::ScalarSubquery),
        Expr::Exists(mut exists) => {
            let subquery = retype(exists.subquery)?;
            let changed = subquery.transformed;
            exists.subquery = subquery.data;
            Transformed::new_transformed(Expr::Exists(exists), changed)
        }
        Expr::InSubquery(mut in_subquery) => {
            let subquery = retype(in_subquery.subquery)?;
            let changed = subquery.transformed;
            in_subquery.subquery = subquery.data;
            Transformed::new_transformed(Expr::InSubquery(in_subquery), changed)
        }
        Expr::SetComparison(mut comparison) => {
            let subquery = retype(comparison.subquery)?;
            let changed = subquery.transformed;
            comparison.subquery = subquery.data;
            Transformed::new_transformed(Expr::SetComparison(comparison), changed)
        }
        other => Transformed::no(other),
    })
}

/// An outer reference to a column of `around` with the column's type.
fn retype_reference(expr: Expr, around: &DFSchema) -> Result<Transformed<Expr>> {
    let Expr::OuterReferenceColumn(field, column) = &expr else { return Ok(Transformed::no(expr)) };
    let Ok((_, actual)) = around.qualified_field_from_column(column) else { return Ok(Transformed::no(expr)) };
    if actual.data_type() == field.data_type() {
        return Ok(Transformed::no(expr));
    }
    let retyped = field.as_ref().clone().with_data_type(actual.data_type().clone()).with_nullable(field.is_nullable() || actual.is_nullable());
    Ok(Transformed::yes(Expr::OuterReferenceColumn(Arc::new(retyped), column.clone())))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::execution::SessionStateBuilder;
    use datafusion::prelude::{SessionConfig, SessionContext};

    use crate::optimizer::logical::rule_tests::answer;

    async fn session(with_rule: bool) -> SessionContext {
        let mut builder = SessionStateBuilder::new().with_default_features().with_config(SessionConfig::new());
        if with_rule {
            builder = builder.with_analyzer_rule(Arc::new(super::OuterReferenceTypes));
        }
        let ctx = SessionContext::new_with_state(builder.build());
        let rows = "VALUES (1, 1, 10), (4, 3, 20), (3, 3, 40), (3, 3, 50), (8, 4, 30), (5, NULL, 60), (NULL, 4, 70), (2, 2, 80), (2, 8, 9)";
        let columns = "CAST(column1 AS INT) AS a, CAST(column2 AS INT) AS b, CAST(column3 AS BIGINT) AS c";
        ctx.sql(&format!("CREATE TABLE t AS SELECT {columns} FROM ({rows})"))
            .await
            .expect("create")
            .collect()
            .await
            .expect("fill");
        ctx
    }

    /// Each query's outer column is widened by coercion; the answers must be
    /// those of the same query with the widening written as a cast, which
    /// DataFusion types right on its own.
    #[tokio::test]
    async fn an_outer_reference_takes_its_coerced_type() {
        let widened = "CASE WHEN a <= 5 THEN a ELSE c END";
        let cases = [
            "SELECT c1 FROM (SELECT {c1} AS c1 FROM t) r6 WHERE r6.c1 >= 2 AND r6.c1 = (SELECT count(*) FROM t r16 WHERE r16.b = r6.c1)",
            "SELECT c1 FROM (SELECT {c1} AS c1 FROM t) r6 WHERE EXISTS (SELECT 1 FROM t r16 WHERE r16.b = r6.c1 AND r16.a > r6.c1)",
            "SELECT c1 FROM (SELECT {c1} AS c1 FROM t) r6 WHERE r6.c1 IN (SELECT r16.a FROM t r16 WHERE r16.b < r6.c1)",
            "SELECT c1, (SELECT max(r16.a) FROM t r16 WHERE r16.b = r6.c1) FROM (SELECT {c1} AS c1 FROM t) r6",
        ];
        let fixed = session(true).await;
        let plain = session(false).await;
        for case in cases {
            let sql = case.replace("{c1}", widened);
            let cast = case.replace("{c1}", "CASE WHEN a <= 5 THEN CAST(a AS BIGINT) ELSE c END");
            let expected = answer(&plain, &cast).await;
            assert!(expected.len() > 1, "{cast} finds rows");
            // Rows only: the frame's schema is the one before coercion.
            assert_eq!(answer(&fixed, &sql).await[1..], expected[1..], "{sql}");
        }
        let first = cases[0].replace("{c1}", widened);
        let failed = match plain.sql(&first).await {
            Ok(frame) => frame.collect().await.map(|_| ()),
            Err(error) => Err(error),
        };
        assert!(failed.is_err(), "DataFusion 55 alone plans {first} with Int32 = Int64 keys");
    }
}
