//! `count(*)` without writing an array of ones for every batch: a physical
//! optimizer rule run on the coordinating node before the plan is cut into
//! stages, and the function it calls, run in every stage that counts rows.
//!
//! ```text
//!   AggregateExec: aggr=[count(*)]           AggregateExec: aggr=[count(*)]
//!     argument Int64(1)             ─▶          argument foam_ones()
//! ```
//! DataFusion plans `count(*)` as `count(Int64(1))`, and an aggregate turns
//! that literal into an array of as many ones as each batch has rows: 8 bytes
//! allocated and written for every row counted; in a distributed `count(*)`
//! that cost more than the scan (bench/results/design-figures.md).
//! `count` looks only at which of its argument's values are null, so any
//! Int64 array without nulls counts the same. `foam_ones()` returns a slice of
//! one array of ones the process shares (no allocation, nothing written) for
//! batches of up to [`SHARED_ONES_ROWS`] rows, and a new array for larger ones.
//!
//! Only aggregates that read rows (partial and single-stage ones) evaluate the
//! argument; final ones merge counts and are left alone. `count(DISTINCT 1)`
//! and counts of anything but a non-null Int64 literal keep their argument.
//! The aggregate keeps its name, so plans and column names do not change.

use std::sync::{Arc, LazyLock};

use arrow::array::{ArrayRef, Int64Array};
use arrow::buffer::ScalarBuffer;
use arrow::datatypes::{DataType, Field};
use datafusion::common::ScalarValue;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::config::ConfigOptions;
use datafusion::error::Result;
use datafusion::logical_expr::{ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, TypeSignature, Volatility};
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;
use datafusion::physical_expr::expressions::Literal;
use datafusion::physical_expr::{PhysicalExpr, ScalarFunctionExpr};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};

/// The name the function is registered under on every worker.
pub const ONES_FUNCTION: &str = "foam_ones";

/// Rows of the shared array of ones (512 KiB): batches are 8,192 rows unless
/// a session asks for more.
pub const SHARED_ONES_ROWS: usize = 1 << 16;

static SHARED_ONES: LazyLock<ScalarBuffer<i64>> = LazyLock::new(|| ScalarBuffer::from(vec![1i64; SHARED_ONES_ROWS]));

/// `foam_ones()`: an Int64 array of ones, as long as the batch.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct FoamOnes {
    signature: Signature,
}

impl FoamOnes {
    pub fn udf() -> ScalarUDF {
        ScalarUDF::new_from_impl(FoamOnes { signature: Signature::new(TypeSignature::Nullary, Volatility::Immutable) })
    }
}

/// `rows` ones, shared when there are at most [`SHARED_ONES_ROWS`].
pub fn ones(rows: usize) -> ArrayRef {
    let values = if rows <= SHARED_ONES_ROWS { SHARED_ONES.slice(0, rows) } else { ScalarBuffer::from(vec![1i64; rows]) };
    Arc::new(Int64Array::new(values, None))
}

impl ScalarUDFImpl for FoamOnes {
    fn name(&self) -> &str {
        ONES_FUNCTION
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Int64)
    }

    fn return_field_from_args(&self, _args: datafusion::logical_expr::ReturnFieldArgs) -> Result<arrow::datatypes::FieldRef> {
        Ok(Arc::new(Field::new(ONES_FUNCTION, DataType::Int64, false)))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        Ok(ColumnarValue::Array(ones(args.number_rows)))
    }
}

/// The physical optimizer rule (see the module documentation).
#[derive(Debug)]
pub struct CountWithoutOnesArray;

/// `count` of a non-null Int64 literal, with `foam_ones()` as its argument.
fn without_literal(expr: &AggregateFunctionExpr, ones: &Arc<dyn PhysicalExpr>) -> Option<AggregateFunctionExpr> {
    if expr.fun().name() != "count" || expr.is_distinct() {
        return None;
    }
    let [argument] = expr.expressions().try_into().ok()?;
    let literal = argument.downcast_ref::<Literal>()?;
    if !matches!(literal.value(), ScalarValue::Int64(Some(_))) {
        return None;
    }
    let order_by = expr.order_bys().iter().map(|sort| sort.expr.clone()).collect();
    expr.with_new_expressions(vec![ones.clone()], order_by)
}

impl PhysicalOptimizerRule for CountWithoutOnesArray {
    fn optimize(&self, plan: Arc<dyn ExecutionPlan>, config: &ConfigOptions) -> Result<Arc<dyn ExecutionPlan>> {
        let ones: Arc<dyn PhysicalExpr> = Arc::new(ScalarFunctionExpr::new(
            ONES_FUNCTION,
            Arc::new(FoamOnes::udf()),
            vec![],
            Arc::new(Field::new(ONES_FUNCTION, DataType::Int64, false)),
            Arc::new(config.clone()),
        ));
        Ok(plan
            .transform_up(|node| {
                let Some(aggregate) = node.downcast_ref::<AggregateExec>() else { return Ok(Transformed::no(node)) };
                if !matches!(aggregate.mode(), AggregateMode::Partial | AggregateMode::Single | AggregateMode::SinglePartitioned) {
                    return Ok(Transformed::no(node));
                }
                let mut changed = false;
                let exprs: Vec<Arc<AggregateFunctionExpr>> = aggregate
                    .aggr_expr()
                    .iter()
                    .map(|expr| match without_literal(expr, &ones) {
                        Some(rewritten) => {
                            changed = true;
                            Arc::new(rewritten)
                        }
                        None => expr.clone(),
                    })
                    .collect();
                if !changed {
                    return Ok(Transformed::no(node));
                }
                Ok(Transformed::yes(Arc::new(aggregate.with_new_aggr_exprs(exprs)) as Arc<dyn ExecutionPlan>))
            })?
            .data)
    }

    fn name(&self) -> &str {
        "FoamCountWithoutOnesArray"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Array, Int32Array, RecordBatch};
    use arrow::datatypes::Schema;
    use datafusion::prelude::SessionContext;

    #[test]
    fn ones_are_shared_up_to_the_limit_and_counted_as_rows() {
        let small = ones(8192);
        let again = ones(100);
        assert_eq!((small.len(), small.null_count()), (8192, 0));
        let (a, b) = (small.to_data(), again.to_data());
        assert_eq!(a.buffers()[0].as_ptr(), b.buffers()[0].as_ptr(), "both are slices of the shared array");
        let large = ones(SHARED_ONES_ROWS + 1);
        assert_eq!(large.len(), SHARED_ONES_ROWS + 1);
        let values = large.as_any().downcast_ref::<Int64Array>().unwrap();
        assert!(values.values().iter().all(|v| *v == 1));
    }

    #[tokio::test]
    async fn counts_keep_their_names_and_answers_and_only_row_reading_stages_change() {
        let ctx = SessionContext::new_with_config(datafusion::prelude::SessionConfig::new().with_target_partitions(2));
        ctx.register_udf(FoamOnes::udf());
        let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int32, true)]));
        let keys = Int32Array::from(vec![Some(1), Some(2), None, Some(1), Some(3), Some(1)]);
        let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(keys)]).unwrap();
        let table = datafusion::datasource::MemTable::try_new(schema, vec![vec![batch.clone()], vec![batch]]).unwrap();
        ctx.register_table("t", Arc::new(table)).unwrap();
        let sql = "SELECT k, count(*), count(k), count(DISTINCT k) FROM t GROUP BY k ORDER BY k";
        let plan = ctx.sql(sql).await.unwrap().create_physical_plan().await.unwrap();
        let expected = datafusion::physical_plan::collect(plan.clone(), ctx.task_ctx()).await.unwrap();
        let rewritten = CountWithoutOnesArray.optimize(plan.clone(), &ConfigOptions::default()).unwrap();
        let text = datafusion::physical_plan::displayable(plan.as_ref()).indent(false).to_string();
        assert_eq!(text, datafusion::physical_plan::displayable(rewritten.as_ref()).indent(false).to_string());
        let mut arguments = Vec::new();
        rewritten
            .apply(|node| {
                if let Some(aggregate) = node.downcast_ref::<AggregateExec>() {
                    for expr in aggregate.aggr_expr().iter() {
                        arguments.push(format!("{:?} {}: {}", aggregate.mode(), expr.name(), expr.expressions()[0]));
                    }
                }
                Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
            })
            .unwrap();
        arguments.sort();
        let expected_arguments = [
            "FinalPartitioned count(DISTINCT t.k): k@0",
            "FinalPartitioned count(Int64(1)): 1",
            "FinalPartitioned count(t.k): k@0",
            "Partial count(DISTINCT t.k): k@0",
            "Partial count(Int64(1)): foam_ones()",
            "Partial count(t.k): k@0",
        ];
        assert_eq!(arguments, expected_arguments, "{text}");
        let answer = datafusion::physical_plan::collect(rewritten, ctx.task_ctx()).await.unwrap();
        let show = |batches: &[RecordBatch]| arrow::util::pretty::pretty_format_batches(batches).unwrap().to_string();
        assert_eq!(show(&answer), show(&expected));
        let rows: Vec<String> = show(&answer)
            .lines()
            .map(|line| line.split('|').map(str::trim).filter(|cell| !cell.is_empty()).collect::<Vec<_>>().join(","))
            .collect();
        // Key 1: three rows in each batch; the NULL key: two rows, no k.
        assert!(rows.contains(&"1,6,6,1".to_string()) && rows.contains(&"2,0,0".to_string()), "{rows:?}");
    }
}
