//! Integer arithmetic that fails on overflow, as PostgreSQL's does.
//!
//! DataFusion adds, subtracts, multiplies and negates integers wrapping
//! around (`9223372036854775807 + 1` is `-9223372036854775808`): a wrong
//! answer where PostgreSQL fails with 22003 (`bigint out of range`). Its
//! `BinaryExpr` can check instead, but its planner never asks it to and
//! datafusion-proto would not carry the request to the workers.
//!
//! An analyzer rule, after type coercion, replaces each such operation on
//! two integers of one type by a function that checks (Arrow's checked
//! kernels), under the operation's own name, so the rewrite changes no
//! column name. The function is immutable: the simplifier still folds
//! constants, and one that overflows is left for execution to report.
//!
//! ```text
//!   a + b   ─▶  foam_int_add(a, b)        a, b: SMALLINT, INT or BIGINT
//!   a - b   ─▶  foam_int_sub(a, b)
//!   a * b   ─▶  foam_int_mul(a, b)
//!   -a      ─▶  foam_int_sub(0, a)
//! ```
//! Division and modulo already fail on overflow (`i64::MIN / -1`), and
//! DECIMAL and float arithmetic is left as it is.

use std::sync::Arc;

use arrow::compute::kernels::numeric;
use arrow::datatypes::DataType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{DFSchema, DataFusionError, Result, ScalarValue};
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::{
    BinaryExpr, ColumnarValue, Expr, ExprSchemable, LogicalPlan, Operator, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::optimizer::AnalyzerRule;
use datafusion::physical_expr_common::datum::apply;
use foam_common::{FoamError, SqlState};

use super::named_rewrite::rewrite_expressions;

/// The analyzer rule (see the module documentation).
#[derive(Debug, Default)]
pub struct CheckedArithmetic;

impl AnalyzerRule for CheckedArithmetic {
    fn name(&self) -> &str {
        "foam_checked_arithmetic"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        rewrite_expressions(plan, checked)
    }
}

fn checked(expr: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
    let integer = |e: &Expr| e.get_type(schema).ok().filter(is_checked_type);
    match expr {
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
            let op_checked = IntArithmetic::of(op).filter(|_| matches!((integer(&left), integer(&right)), (Some(l), Some(r)) if l == r));
            match op_checked {
                Some(function) => Ok(Transformed::yes(function.call(*left, *right))),
                None => Ok(Transformed::no(Expr::BinaryExpr(BinaryExpr { left, op, right }))),
            }
        }
        Expr::Negative(inner) => match integer(&inner).map(|t| ScalarValue::new_zero(&t)).transpose()? {
            Some(zero) => Ok(Transformed::yes(IntArithmetic::Sub.call(Expr::Literal(zero, None), *inner))),
            None => Ok(Transformed::no(Expr::Negative(inner))),
        },
        expr => Ok(Transformed::no(expr)),
    }
}

/// The integer types PostgreSQL has (`smallint`, `integer`, `bigint`).
fn is_checked_type(data_type: &DataType) -> bool {
    matches!(data_type, DataType::Int16 | DataType::Int32 | DataType::Int64)
}

/// Which checked operation a function is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IntArithmetic {
    Add,
    Sub,
    Mul,
}

impl IntArithmetic {
    fn of(op: Operator) -> Option<Self> {
        match op {
            Operator::Plus => Some(IntArithmetic::Add),
            Operator::Minus => Some(IntArithmetic::Sub),
            Operator::Multiply => Some(IntArithmetic::Mul),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            IntArithmetic::Add => "foam_int_add",
            IntArithmetic::Sub => "foam_int_sub",
            IntArithmetic::Mul => "foam_int_mul",
        }
    }

    fn operator(self) -> Operator {
        match self {
            IntArithmetic::Add => Operator::Plus,
            IntArithmetic::Sub => Operator::Minus,
            IntArithmetic::Mul => Operator::Multiply,
        }
    }

    fn call(self, left: Expr, right: Expr) -> Expr {
        Expr::ScalarFunction(ScalarFunction::new_udf(Arc::new(CheckedInt::udf(self)), vec![left, right]))
    }

    /// The three functions; workers register them (`worker_udfs`).
    pub fn udfs() -> Vec<ScalarUDF> {
        [IntArithmetic::Add, IntArithmetic::Sub, IntArithmetic::Mul].into_iter().map(CheckedInt::udf).collect()
    }
}

/// `foam_int_add(a, b)` and its kin: the operation on two integers of one
/// type, failing with 22003 where the result does not fit the type.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct CheckedInt {
    operation: IntArithmetic,
    signature: Signature,
}

impl CheckedInt {
    pub fn udf(operation: IntArithmetic) -> ScalarUDF {
        ScalarUDF::new_from_impl(CheckedInt { operation, signature: Signature::any(2, Volatility::Immutable) })
    }
}

impl ScalarUDFImpl for CheckedInt {
    fn name(&self) -> &str {
        self.operation.name()
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        match arg_types {
            [left, right] if left == right && is_checked_type(left) => Ok(left.clone()),
            _ => Err(DataFusionError::Internal(format!("{} takes two integers of one type, not {arg_types:?}", self.name()))),
        }
    }

    /// Shown as the operation it stands for: `a + b`, not `foam_int_add(a, b)`.
    fn schema_name(&self, args: &[Expr]) -> Result<String> {
        let [left, right] = args else {
            return Err(DataFusionError::Internal(format!("{} takes two arguments", self.name())));
        };
        Ok(format!("{} {} {}", left.schema_name(), self.operation.operator(), right.schema_name()))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [left, right] = args.args.as_slice() else {
            return Err(DataFusionError::Internal(format!("{} takes two arguments", self.name())));
        };
        let kernel = match self.operation {
            IntArithmetic::Add => numeric::add,
            IntArithmetic::Sub => numeric::sub,
            IntArithmetic::Mul => numeric::mul,
        };
        let data_type = left.data_type();
        apply(left, right, kernel).map_err(|error| match error {
            DataFusionError::ArrowError(e, _) if matches!(*e, arrow::error::ArrowError::ArithmeticOverflow(_)) => out_of_range(&data_type),
            other => other,
        })
    }
}

/// PostgreSQL's error for a result its integer type cannot hold.
fn out_of_range(data_type: &DataType) -> DataFusionError {
    let name = match data_type {
        DataType::Int16 => "smallint",
        DataType::Int32 => "integer",
        _ => "bigint",
    };
    DataFusionError::from(FoamError::Query { message: format!("{name} out of range"), sqlstate: SqlState::NumericValueOutOfRange })
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Array, Int32Array, Int64Array};

    fn run(operation: IntArithmetic, left: ColumnarValue, right: ColumnarValue, rows: usize) -> Result<ColumnarValue> {
        let udf = CheckedInt::udf(operation);
        let data_type = left.data_type();
        let field = Arc::new(arrow::datatypes::Field::new("x", data_type.clone(), true));
        udf.invoke_with_args(ScalarFunctionArgs {
            args: vec![left, right],
            arg_fields: vec![field.clone(), field.clone()],
            number_rows: rows,
            return_field: field,
            config_options: Arc::new(ConfigOptions::default()),
        })
    }

    #[test]
    fn results_that_fit_are_the_operations_and_others_fail_with_22003() {
        let values = ColumnarValue::Array(Arc::new(Int64Array::from(vec![Some(1), None, Some(i64::MAX - 1)])));
        let one = ColumnarValue::Scalar(ScalarValue::Int64(Some(1)));
        let sums = run(IntArithmetic::Add, values.clone(), one.clone(), 3).unwrap().into_array(3).unwrap();
        let sums = sums.as_any().downcast_ref::<Int64Array>().unwrap();
        assert_eq!(sums.iter().collect::<Vec<_>>(), vec![Some(2), None, Some(i64::MAX)]);
        let two = ColumnarValue::Scalar(ScalarValue::Int64(Some(2)));
        let error = run(IntArithmetic::Add, values.clone(), two.clone(), 3).unwrap_err();
        assert_eq!(error.to_string().contains("bigint out of range"), true, "{error}");
        assert_eq!(FoamError::from(error).sqlstate(), SqlState::NumericValueOutOfRange);
        assert!(run(IntArithmetic::Mul, values, two, 3).is_err(), "(i64::MAX - 1) * 2 overflows");
        let min = ColumnarValue::Array(Arc::new(Int32Array::from(vec![i32::MIN])));
        let zero = ColumnarValue::Scalar(ScalarValue::Int32(Some(0)));
        let negated = run(IntArithmetic::Sub, zero, min, 1).unwrap_err();
        assert!(negated.to_string().contains("integer out of range"), "{negated}");
        let scalars = run(IntArithmetic::Sub, ScalarValue::Int32(Some(5)).into(), ScalarValue::Int32(Some(7)).into(), 1).unwrap();
        assert!(matches!(scalars, ColumnarValue::Scalar(ScalarValue::Int32(Some(-2)))));
    }
}
