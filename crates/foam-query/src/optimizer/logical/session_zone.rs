//! `timestamptz` columns read in the session's TimeZone, as PostgreSQL
//! computes with them: `extract(hour FROM t)`, `date_trunc('day', t)` and
//! `t::timestamp` give local time where the client set its zone.
//!
//! A `timestamptz` column holds UTC instants and its Arrow type names UTC
//! (`foam_catalog::types::UTC`); DataFusion computes on a timestamp in the
//! zone its type names. An analyzer rule, before type coercion, names the
//! session's zone on each scan's such columns:
//!
//! ```text
//!   Scan t (c: Timestamp(µs, UTC))  ─▶  Projection CAST(t.c AS Timestamp(µs, zone)) AS t.c
//!                                         └─ Scan t
//! ```
//!
//! The cast keeps every value (only the zone's name changes). A session in
//! UTC, the default, plans as before: no projection is added.
//!
//! A column still names UTC while the SQL is planned, where `now()` and
//! `'...'::timestamptz` name the session's zone, and DataFusion cannot
//! subtract timestamps of two zones; an SQL-planner hook
//! ([`ZoneArithmeticPlanner`]) casts both sides of such a subtraction to
//! UTC (the same instants; a difference is the same in every zone).

use std::sync::Arc;

use arrow::datatypes::{DataType, Field};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Column, Result};
use datafusion::logical_expr::expr::Cast;
use datafusion::logical_expr::planner::{ExprPlanner, PlannerResult, RawBinaryExpr};
use datafusion::logical_expr::{Expr, ExprSchemable, LogicalPlan, Projection};
use datafusion::sql::sqlparser::ast::BinaryOperator;
use datafusion::optimizer::AnalyzerRule;

/// The analyzer rule (see the module documentation).
#[derive(Debug, Default)]
pub struct SessionZone;

impl AnalyzerRule for SessionZone {
    fn name(&self) -> &str {
        "foam_session_zone"
    }

    fn analyze(&self, plan: LogicalPlan, config: &ConfigOptions) -> Result<LogicalPlan> {
        let Some(zone) = config.execution.time_zone.as_deref() else { return Ok(plan) };
        let zoned = |data_type: &DataType| crate::frontend::time_zone::in_zone(data_type, zone).is_some();
        let needed = plan.exists(|node| Ok(matches!(node, LogicalPlan::TableScan(scan) if scan.projected_schema.fields().iter().any(|f| zoned(f.data_type())))))?;
        if !needed {
            return Ok(plan);
        }
        plan.transform_up_with_subqueries(|node| {
            let scan_needs = matches!(&node, LogicalPlan::TableScan(scan) if scan.projected_schema.fields().iter().any(|f| zoned(f.data_type())));
            if scan_needs {
                let schema = node.schema().clone();
                let input = Arc::new(node);
                let exprs = schema
                    .iter()
                    .map(|(qualifier, field)| {
                        let column = Expr::Column(Column::new(qualifier.cloned(), field.name()));
                        match crate::frontend::time_zone::in_zone(field.data_type(), zone) {
                            Some(zoned) => {
                                let target = Arc::new(Field::new(field.name(), zoned, field.is_nullable()));
                                Expr::Cast(Cast { expr: Box::new(column), field: target }).alias_qualified(qualifier.cloned(), field.name())
                            }
                            None => column,
                        }
                    })
                    .collect();
                return Ok(Transformed::yes(LogicalPlan::Projection(Projection::try_new(exprs, input)?)));
            }
            // Nodes above a changed scan take their columns' new types; a
            // UNION's schema is remade from its inputs (recompute_schema
            // keeps a UNION's own).
            match node {
                LogicalPlan::Union(union) => Ok(Transformed::yes(LogicalPlan::Union(datafusion::logical_expr::Union::try_new_with_loose_types(union.inputs)?))),
                node => Ok(Transformed::yes(node.recompute_schema()?)),
            }
        })
        .map(|rewritten| rewritten.data)
    }
}

/// The SQL-planner hook (see the module documentation).
#[derive(Debug, Default)]
pub struct ZoneArithmeticPlanner;

impl ExprPlanner for ZoneArithmeticPlanner {
    fn plan_binary_op(&self, expr: RawBinaryExpr, schema: &datafusion::common::DFSchema) -> Result<PlannerResult<RawBinaryExpr>> {
        if expr.op != BinaryOperator::Minus {
            return Ok(PlannerResult::Original(expr));
        }
        let RawBinaryExpr { op, left, right } = expr;
        let (left, right) = match (left.get_type(schema), right.get_type(schema)) {
            (Ok(DataType::Timestamp(_, Some(zone))), Ok(DataType::Timestamp(_, Some(other)))) if zone != other => {
                // Both sides, so that the scans' columns this rule later
                // names in the session's zone stay under a cast to UTC.
                let utc = |expr: Expr| {
                    let target = Arc::new(Field::new("", DataType::Timestamp(arrow::datatypes::TimeUnit::Microsecond, Some(foam_catalog::types::UTC.into())), true));
                    Expr::Cast(Cast { expr: Box::new(expr), field: target })
                };
                (utc(left), utc(right))
            }
            _ => (left, right),
        };
        Ok(PlannerResult::Original(RawBinaryExpr { op, left, right }))
    }
}
