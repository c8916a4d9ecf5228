//! PostgreSQL's rounding for casts to integer types. PostgreSQL rounds:
//! a numeric half away from zero (`CAST(2.5 AS INT)` is 3, `-2.5` gives -3),
//! a float half to even, as C's `rint` (`CAST(2.5::float8 AS INT)` is 2,
//! `3.5` gives 4). DataFusion truncates both (2 and 2), so every such cast,
//! and every comparison or join on one, answered differently from
//! PostgreSQL.
//!
//! An analyzer rule, after DataFusion's type coercion, puts
//! `foam_round_for_int(x)` under each cast of a decimal or floating point
//! value to an integer type; the cast then only converts an integral value.
//! Column names are kept, so the rewrite is invisible but for the answer.
//!
//! ```text
//!   CAST(x AS INT)  ─▶  CAST(foam_round_for_int(x) AS INT)     x: DECIMAL(p,s), s > 0, or FLOAT
//! ```

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::compute::kernels::arity::{try_unary, unary};
use arrow::datatypes::{DataType, Decimal128Type, Float32Type, Float64Type};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{DFSchema, DataFusionError, Result, ScalarValue};
use datafusion::logical_expr::expr::{Cast, ScalarFunction};
use datafusion::logical_expr::expr::GroupingSet;
use datafusion::logical_expr::expr_rewriter::NamePreserver;
use datafusion::logical_expr::{ColumnarValue, Expr, ExprSchemable, LogicalPlan, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility};
use datafusion::optimizer::AnalyzerRule;

/// The function the rewrite calls; workers register it (`worker_udfs`).
pub const ROUND_FOR_INT: &str = "foam_round_for_int";

/// The analyzer rule (see the module documentation).
#[derive(Debug, Default)]
pub struct PostgresIntegerCasts;

impl AnalyzerRule for PostgresIntegerCasts {
    fn name(&self) -> &str {
        "foam_postgres_integer_casts"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        plan.transform_up_with_subqueries(|plan| {
            let mut schema = DFSchema::empty();
            for input in plan.inputs() {
                schema.merge(input.schema());
            }
            let names = NamePreserver::new(&plan);
            let rewrite = |expr: Expr| -> Result<Transformed<Expr>> {
                let name = names.save(&expr);
                let rewritten = expr.transform_up(|e| round_before_integer_cast(e, &schema))?;
                Ok(if rewritten.transformed { rewritten.update_data(|e| name.restore(e)) } else { rewritten })
            };
            let rewritten = plan.map_expressions(|expr| match expr {
                // Each member keeps its name: an alias around the whole set
                // would make it one group column named like the clause
                // ("No field named r.g. Valid fields are \"ROLLUP (r.h, r.g)\"",
                // fuzz seed 58349 w10).
                Expr::GroupingSet(set) => grouping_set_members(set, &rewrite).map(|t| t.update_data(Expr::GroupingSet)),
                expr => rewrite(expr),
            })?;
            if rewritten.transformed { rewritten.map_data(|plan| plan.recompute_schema()) } else { Ok(rewritten) }
        })
        .map(|rewritten| rewritten.data)
    }
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

fn round_before_integer_cast(expr: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
    let Expr::Cast(Cast { expr: inner, field }) = expr else { return Ok(Transformed::no(expr)) };
    let rounds = field.data_type().is_integer()
        && match inner.get_type(schema) {
            Ok(DataType::Float32 | DataType::Float64) => true,
            Ok(DataType::Decimal128(_, scale)) => scale > 0,
            _ => false,
        };
    if !rounds || matches!(inner.as_ref(), Expr::ScalarFunction(f) if f.name() == ROUND_FOR_INT) {
        return Ok(Transformed::no(Expr::Cast(Cast { expr: inner, field })));
    }
    let rounded = Expr::ScalarFunction(ScalarFunction::new_udf(Arc::new(RoundForInt::udf()), vec![*inner]));
    Ok(Transformed::yes(Expr::Cast(Cast { expr: Box::new(rounded), field })))
}

/// `foam_round_for_int(x)`: `x` rounded to an integral value of its own type
/// as PostgreSQL rounds it for a cast to an integer.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct RoundForInt {
    signature: Signature,
}

impl RoundForInt {
    pub fn udf() -> ScalarUDF {
        ScalarUDF::new_from_impl(RoundForInt { signature: Signature::any(1, Volatility::Immutable) })
    }
}

impl ScalarUDFImpl for RoundForInt {
    fn name(&self) -> &str {
        ROUND_FOR_INT
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        Ok(arg_types[0].clone())
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [value] = args.args.as_slice() else {
            return Err(DataFusionError::Internal(format!("{ROUND_FOR_INT} takes one argument")));
        };
        let scalar = matches!(value, ColumnarValue::Scalar(_));
        let values = value.to_array(if scalar { 1 } else { args.number_rows })?;
        let rounded = round_array(&values)?;
        Ok(if scalar { ColumnarValue::Scalar(ScalarValue::try_from_array(&rounded, 0)?) } else { ColumnarValue::Array(rounded) })
    }
}

fn round_array(values: &ArrayRef) -> Result<ArrayRef> {
    Ok(match values.data_type() {
        DataType::Float64 => Arc::new(unary::<Float64Type, _, Float64Type>(values.as_primitive(), f64::round_ties_even)),
        DataType::Float32 => Arc::new(unary::<Float32Type, _, Float32Type>(values.as_primitive(), f32::round_ties_even)),
        DataType::Decimal128(precision, scale) if *scale > 0 => {
            let unit = 10i128.pow(*scale as u32);
            let rounded = try_unary::<Decimal128Type, _, Decimal128Type>(values.as_primitive(), |v| {
                let (whole, rest) = (v / unit, v % unit);
                let whole = if rest.abs() * 2 >= unit { whole + v.signum() } else { whole };
                whole.checked_mul(unit).ok_or_else(|| arrow::error::ArrowError::ComputeError("numeric field overflow".into()))
            })?;
            Arc::new(rounded.with_precision_and_scale(*precision, *scale)?)
        }
        _ => values.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Decimal128Array, Float64Array};

    #[test]
    fn numerics_round_half_away_from_zero_and_floats_half_to_even() {
        let decimals: ArrayRef = Arc::new(
            Decimal128Array::from(vec![Some(250), Some(-250), Some(149), Some(-151), None, Some(350)]).with_precision_and_scale(10, 2).unwrap(),
        );
        let rounded = round_array(&decimals).unwrap();
        let rounded: Vec<Option<i128>> = rounded.as_primitive::<Decimal128Type>().iter().collect();
        assert_eq!(rounded, vec![Some(300), Some(-300), Some(100), Some(-200), None, Some(400)]);
        let floats: ArrayRef = Arc::new(Float64Array::from(vec![2.5, 3.5, -2.5, 0.4999, 1e300]));
        let rounded = round_array(&floats).unwrap();
        let rounded: Vec<f64> = rounded.as_primitive::<Float64Type>().values().to_vec();
        assert_eq!(rounded, vec![2.0, 4.0, -2.0, 0.0, 1e300]);
    }
}
