//! Integer and float arithmetic that fails where PostgreSQL's does.
//!
//! DataFusion adds, subtracts, multiplies and negates integers wrapping
//! around (`9223372036854775807 + 1` is `-9223372036854775808`), and its
//! floats overflow to infinity and divide by zero to infinity or NaN:
//! wrong answers where PostgreSQL fails with 22003 (`bigint out of range`,
//! `value out of range: overflow`) or 22012 (`division by zero`). Its
//! `BinaryExpr` can check integers, but its planner never asks it to and
//! datafusion-proto would not carry the request to the workers.
//!
//! An analyzer rule, after type coercion, replaces each `+ - * /` on two
//! integers (SMALLINT, INT, BIGINT) or two floats (REAL, DOUBLE PRECISION)
//! of one type by a function that checks, under the operation's own name,
//! so the rewrite changes no column name. Integers use Arrow's checked
//! kernels; a float step fails where it makes an infinity of finite
//! operands or divides by zero (infinite operands stay PostgreSQL's
//! IEEE arithmetic). The function is immutable: the simplifier still
//! folds constants, and one that fails is left for execution to report.
//!
//! ```text
//!   a + b        ─▶  foam_checked_arith('+', a, b)
//!   a * b - c    ─▶  foam_checked_arith('*-', a, b, c)  left to right, one function
//!   a - b * c    ─▶  foam_checked_arith('-', a, foam_checked_arith('*', b, c))
//!   -a           ─▶  foam_checked_arith('-', 0, a)      integers
//! ```
//! Modulo already fails where PostgreSQL's does, and DECIMAL arithmetic is
//! left as it is.
//!
//! `sum` of integers, a BIGINT as in DataFusion, wrapped around too: the
//! session and every worker register [`CheckedSum`] as `sum`, DataFusion's
//! but for its BIGINT accumulators, which fail with 22003 (PostgreSQL's
//! `sum(bigint)` is a NUMERIC and holds the sum; a BIGINT result keeps
//! FoamDB's types, and so the answers after it, as they were).

use std::sync::Arc;

use arrow::compute::kernels::numeric;
use arrow::datatypes::DataType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{DFSchema, DataFusionError, Result, ScalarValue};
use datafusion::logical_expr::expr::ScalarFunction;
use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, Decimal128Array, Int64Array};
use arrow::buffer::NullBuffer;
use arrow::datatypes::{Decimal128Type, Field, FieldRef, Float32Type, Float64Type, Int64Type};
use datafusion::logical_expr::utils::format_state_name;
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::utils::AggregateOrderSensitivity;
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, BinaryExpr, ColumnarValue, Documentation, EmitTo, Expr, ExprSchemable, GroupsAccumulator, LogicalPlan,
    Operator, ReversedUDAF, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, SetMonotonicity, Signature, Volatility,
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
    match expr {
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
            let one_type = match (Arithmetic::of(op), checked_type(&left, schema), checked_type(&right, schema)) {
                (Some(operation), Some(l), Some(r)) if l == r => Some(operation),
                _ => None,
            };
            match one_type {
                Some(operation) => Ok(Transformed::yes(chain(*left, operation, *right))),
                None => Ok(Transformed::no(Expr::BinaryExpr(BinaryExpr { left, op, right }))),
            }
        }
        Expr::Negative(inner) => match checked_type(&inner, schema).filter(|t| t.is_integer()).map(|t| ScalarValue::new_zero(&t)).transpose()? {
            Some(zero) => Ok(Transformed::yes(chain(Expr::Literal(zero, None), Arithmetic::Sub, *inner))),
            None => Ok(Transformed::no(Expr::Negative(inner))),
        },
        expr => Ok(Transformed::no(expr)),
    }
}

/// The type of an operand the rule checks. A chain's is its first operand's, read
/// so: `get_type` of a function builds the names of all its arguments, at
/// every level of a rewrite that asked it of each level.
fn checked_type(expr: &Expr, schema: &DFSchema) -> Option<DataType> {
    let operand = chain_operands(expr).map_or(expr, |(_, operands)| &operands[0]);
    operand.get_type(schema).ok().filter(is_checked_type)
}

/// `left <operation> right` as a chain: `left`'s, one longer, if it is
/// one. Nested functions cost DataFusion time quadratic in their depth at
/// every pass that asks a field of them (each level builds its name), and
/// the SQL planner nests a left-associative `a + b - c ...` to the left:
/// one flat function keeps a long sum as cheap to plan as the operators.
fn chain(mut left: Expr, operation: Arithmetic, right: Expr) -> Expr {
    if let Expr::ScalarFunction(ScalarFunction { func, args }) = &mut left
        && func.name() == CHAIN_NAME
        && let Some(Expr::Literal(ScalarValue::Utf8(Some(operations)), _)) = args.first_mut()
    {
        operations.push(operation.symbol());
        args.push(right);
        return left;
    }
    let operations = Expr::Literal(ScalarValue::Utf8(Some(operation.symbol().to_string())), None);
    Expr::ScalarFunction(ScalarFunction::new_udf(Arc::new(CheckedChain::udf()), vec![operations, left, right]))
}

/// A chain's operations (one character each) and operands.
fn chain_operands(expr: &Expr) -> Option<(&str, &[Expr])> {
    match expr {
        Expr::ScalarFunction(ScalarFunction { func, args }) if func.name() == CHAIN_NAME => match args.split_first() {
            Some((Expr::Literal(ScalarValue::Utf8(Some(operations)), _), operands)) if !operands.is_empty() => Some((operations, operands)),
            _ => None,
        },
        _ => None,
    }
}

/// The integer and float types PostgreSQL has (`smallint`, `integer`,
/// `bigint`, `real`, `double precision`).
fn is_checked_type(data_type: &DataType) -> bool {
    matches!(data_type, DataType::Int16 | DataType::Int32 | DataType::Int64 | DataType::Float32 | DataType::Float64)
}

/// The checked function's name; workers register it (`worker_udfs`).
const CHAIN_NAME: &str = "foam_checked_arith";

/// One checked operation of a chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arithmetic {
    Add,
    Sub,
    Mul,
    Div,
}

impl Arithmetic {
    fn of(op: Operator) -> Option<Self> {
        match op {
            Operator::Plus => Some(Arithmetic::Add),
            Operator::Minus => Some(Arithmetic::Sub),
            Operator::Multiply => Some(Arithmetic::Mul),
            Operator::Divide => Some(Arithmetic::Div),
            _ => None,
        }
    }

    fn symbol(self) -> char {
        match self {
            Arithmetic::Add => '+',
            Arithmetic::Sub => '-',
            Arithmetic::Mul => '*',
            Arithmetic::Div => '/',
        }
    }

    fn from_symbol(symbol: char) -> Result<Self> {
        match symbol {
            '+' => Ok(Arithmetic::Add),
            '-' => Ok(Arithmetic::Sub),
            '*' => Ok(Arithmetic::Mul),
            '/' => Ok(Arithmetic::Div),
            other => Err(DataFusionError::Plan(format!("{CHAIN_NAME}: no operation '{other}' (one of + - * /)"))),
        }
    }

    fn kernel(self) -> fn(&dyn arrow::array::Datum, &dyn arrow::array::Datum) -> std::result::Result<ArrayRef, arrow::error::ArrowError> {
        match self {
            Arithmetic::Add => numeric::add,
            Arithmetic::Sub => numeric::sub,
            Arithmetic::Mul => numeric::mul,
            Arithmetic::Div => numeric::div,
        }
    }
}

/// `foam_checked_arith('+-', a, b, c)`: `a + b - c` on integers or floats
/// of one type, left to right, failing where a step fails (as
/// PostgreSQL's `a + b - c` fails where `a + b` does).
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct CheckedChain {
    signature: Signature,
}

impl CheckedChain {
    pub fn udf() -> ScalarUDF {
        ScalarUDF::new_from_impl(CheckedChain { signature: Signature::variadic_any(Volatility::Immutable) })
    }
}

impl ScalarUDFImpl for CheckedChain {
    fn name(&self) -> &str {
        CHAIN_NAME
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        match arg_types {
            [DataType::Utf8, first, rest @ ..] if is_checked_type(first) && !rest.is_empty() && rest.iter().all(|t| t == first) => Ok(first.clone()),
            _ => Err(DataFusionError::Plan(format!("{CHAIN_NAME} takes its operations and integers of one type, not {arg_types:?}"))),
        }
    }

    /// Shown as the operations it stands for, `a + b - c`, the name
    /// DataFusion gives the operators it replaces.
    fn schema_name(&self, args: &[Expr]) -> Result<String> {
        let Some((Expr::Literal(ScalarValue::Utf8(Some(operations)), _), operands @ [first, ..])) = args.split_first() else {
            return Err(DataFusionError::Plan(format!("{CHAIN_NAME} takes its operations as a text constant, then operands")));
        };
        let mut name = first.schema_name().to_string();
        for (operation, operand) in operations.chars().zip(&operands[1..]) {
            name.push_str(&format!(" {operation} {}", operand.schema_name()));
        }
        Ok(name)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let Some((ColumnarValue::Scalar(operations), operands)) = args.args.split_first() else {
            return Err(DataFusionError::Plan(format!("{CHAIN_NAME} takes its operations first")));
        };
        let operations = match operations.try_as_str() {
            Some(Some(operations)) if operations.chars().count() + 1 == operands.len() => operations,
            _ => return Err(DataFusionError::Plan(format!("{CHAIN_NAME} takes one operation fewer than operands, as text"))),
        };
        let data_type = operands[0].data_type();
        let mut result = operands[0].clone();
        for (symbol, operand) in operations.chars().zip(&operands[1..]) {
            let operation = Arithmetic::from_symbol(symbol)?;
            let step = apply(&result, operand, operation.kernel()).map_err(|error| match error {
                DataFusionError::ArrowError(e, _) if matches!(*e, arrow::error::ArrowError::ArithmeticOverflow(_)) => out_of_range(&data_type),
                DataFusionError::ArrowError(e, _) if matches!(*e, arrow::error::ArrowError::DivideByZero) => division_by_zero(),
                other => other,
            })?;
            if data_type.is_floating() {
                float_step_fits(&result, operand, &step, operation, args.number_rows)?;
            }
            result = step;
        }
        Ok(result)
    }
}

/// A float step's error, as PostgreSQL's: 22012 for a division by zero,
/// 22003 for an infinity made of finite operands. Reads the values where
/// they are (a scalar operand is not spread over the rows).
fn float_step_fits(left: &ColumnarValue, right: &ColumnarValue, result: &ColumnarValue, operation: Arithmetic, rows: usize) -> Result<()> {
    if operation == Arithmetic::Div && float_values(right, rows)?.zip(float_values(result, rows)?).any(|(d, r)| r.is_some() && d == Some(0.0)) {
        return Err(division_by_zero());
    }
    if float_values(result, rows)?.flatten().all(f64::is_finite) {
        return Ok(());
    }
    let mut steps = float_values(result, rows)?.zip(float_values(left, rows)?).zip(float_values(right, rows)?);
    let overflowed = steps.any(|((r, l), d)| matches!((r, l, d), (Some(r), Some(l), Some(d)) if r.is_infinite() && l.is_finite() && d.is_finite()));
    if overflowed {
        return Err(DataFusionError::from(FoamError::Query { message: "value out of range: overflow".into(), sqlstate: SqlState::NumericValueOutOfRange }));
    }
    Ok(())
}

/// A REAL or DOUBLE PRECISION value's rows as f64s (a scalar repeated).
fn float_values(value: &ColumnarValue, rows: usize) -> Result<Box<dyn Iterator<Item = Option<f64>> + '_>> {
    Ok(match value {
        ColumnarValue::Scalar(ScalarValue::Float64(v)) => Box::new(std::iter::repeat_n(*v, rows)),
        ColumnarValue::Scalar(ScalarValue::Float32(v)) => Box::new(std::iter::repeat_n(v.map(f64::from), rows)),
        ColumnarValue::Array(array) if array.data_type() == &DataType::Float64 => Box::new(array.as_primitive::<Float64Type>().iter()),
        ColumnarValue::Array(array) if array.data_type() == &DataType::Float32 => Box::new(array.as_primitive::<Float32Type>().iter().map(|v| v.map(f64::from))),
        other => return Err(DataFusionError::Internal(format!("{CHAIN_NAME}: a float step read {}", other.data_type()))),
    })
}

/// PostgreSQL's error for a division by zero.
fn division_by_zero() -> DataFusionError {
    DataFusionError::from(FoamError::Query { message: "division by zero".into(), sqlstate: SqlState::DivisionByZero })
}

/// `sum`: DataFusion's, with BIGINT sums (of any integer type) that fail on
/// overflow in every accumulator (grouped, not grouped, a window's sliding
/// frame): partial sums are exact (128 bits), and only a whole sum that does
/// not fit a BIGINT fails. `sum(DISTINCT ...)` is left to DataFusion's.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct CheckedSum {
    inner: Arc<AggregateUDF>,
}

impl CheckedSum {
    pub fn udaf() -> AggregateUDF {
        AggregateUDF::new_from_impl(CheckedSum { inner: datafusion::functions_aggregate::sum::sum_udaf() })
    }

    /// Whether this call's sum is one FoamDB checks.
    fn checks(args: &AccumulatorArgs) -> bool {
        !args.is_distinct && args.return_field.data_type() == &DataType::Int64
    }
}

impl AggregateUDFImpl for CheckedSum {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.inner.return_type(arg_types)
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        self.inner.inner().coerce_types(arg_types)
    }

    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        if !args.is_distinct && args.return_field.data_type() == &DataType::Int64 {
            return Ok(vec![Arc::new(Field::new(format_state_name(args.name, "sum"), PARTIAL_SUM, true))]);
        }
        self.inner.state_fields(args)
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        if Self::checks(&args) {
            return Ok(Box::new(CheckedSumAccumulator::default()));
        }
        self.inner.accumulator(args)
    }

    fn create_sliding_accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        if Self::checks(&args) {
            return Ok(Box::new(CheckedSumAccumulator::default()));
        }
        self.inner.create_sliding_accumulator(args)
    }

    fn groups_accumulator_supported(&self, args: AccumulatorArgs) -> bool {
        self.inner.groups_accumulator_supported(args)
    }

    fn create_groups_accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn GroupsAccumulator>> {
        if Self::checks(&args) {
            return Ok(Box::new(CheckedSumGroups::default()));
        }
        self.inner.create_groups_accumulator(args)
    }

    fn order_sensitivity(&self) -> AggregateOrderSensitivity {
        self.inner.inner().order_sensitivity()
    }

    fn reverse_expr(&self) -> ReversedUDAF {
        self.inner.reverse_udf()
    }

    fn set_monotonicity(&self, data_type: &DataType) -> SetMonotonicity {
        self.inner.inner().set_monotonicity(data_type)
    }

    fn default_value(&self, data_type: &DataType) -> Result<ScalarValue> {
        self.inner.default_value(data_type)
    }

    fn documentation(&self) -> Option<&Documentation> {
        self.inner.documentation()
    }
}

/// `sum(arg)` as SQL's `sum` plans it in a FoamDB session: a rule that adds
/// sums must use this one, since workers read every `sum` as [`CheckedSum`]
/// (its partial sums are not DataFusion's).
pub fn sum(arg: Expr) -> Expr {
    static SUM: std::sync::OnceLock<Arc<AggregateUDF>> = std::sync::OnceLock::new();
    let udaf = SUM.get_or_init(|| Arc::new(CheckedSum::udaf())).clone();
    Expr::AggregateFunction(datafusion::logical_expr::expr::AggregateFunction::new_udf(udaf, vec![arg], false, None, vec![], None))
}

/// A sum as a BIGINT, or 22003 where it does not fit one.
fn as_bigint(sum: i128) -> Result<i64> {
    i64::try_from(sum).map_err(|_| out_of_range(&DataType::Int64))
}

fn bigints(values: &ArrayRef) -> Result<&Int64Array> {
    values.as_primitive_opt::<Int64Type>().ok_or_else(|| DataFusionError::Internal(format!("a BIGINT sum of {}", values.data_type())))
}

/// Partial sums, exact in 128 bits (no count of BIGINT rows reaches their
/// limit): only the whole sum must fit a BIGINT, as in PostgreSQL, whatever
/// the order rows and partial sums arrive in.
fn partial_sums(values: &ArrayRef) -> Result<&Decimal128Array> {
    values.as_primitive_opt::<Decimal128Type>().ok_or_else(|| DataFusionError::Internal(format!("a partial BIGINT sum of {}", values.data_type())))
}

/// The type of a partial sum.
const PARTIAL_SUM: DataType = DataType::Decimal128(38, 0);

/// One BIGINT sum; `retract_batch` makes it a window frame's as it slides.
#[derive(Debug, Default)]
struct CheckedSumAccumulator {
    sum: i128,
    /// Values summed (less those retracted): none is a NULL sum.
    count: u64,
}

impl CheckedSumAccumulator {
    fn add(&mut self, values: impl Iterator<Item = Option<i128>>, sign: i128) {
        for value in values.flatten() {
            self.sum += sign * value;
            self.count = if sign > 0 { self.count + 1 } else { self.count.saturating_sub(1) };
        }
    }
}

impl Accumulator for CheckedSumAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.add(bigints(&values[0])?.iter().map(|v| v.map(i128::from)), 1);
        Ok(())
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        self.add(partial_sums(&states[0])?.iter(), 1);
        Ok(())
    }

    fn retract_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.add(bigints(&values[0])?.iter().map(|v| v.map(i128::from)), -1);
        Ok(())
    }

    fn supports_retract_batch(&self) -> bool {
        true
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        Ok(ScalarValue::Int64(if self.count > 0 { Some(as_bigint(self.sum)?) } else { None }))
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(vec![ScalarValue::Decimal128((self.count > 0).then_some(self.sum), 38, 0)])
    }

    fn size(&self) -> usize {
        std::mem::size_of_val(self)
    }
}

/// BIGINT sums, one per group.
#[derive(Debug, Default)]
struct CheckedSumGroups {
    sums: Vec<i128>,
    /// Whether the group summed a value yet: if not its sum is NULL.
    seen: Vec<bool>,
}

impl CheckedSumGroups {
    fn add(&mut self, values: impl Iterator<Item = Option<i128>>, groups: &[usize], filter: Option<&BooleanArray>, total_groups: usize) {
        self.sums.resize(total_groups, 0);
        self.seen.resize(total_groups, false);
        for ((row, value), group) in values.enumerate().zip(groups) {
            let Some(value) = value else { continue };
            if filter.is_some_and(|f| !f.is_valid(row) || !f.value(row)) {
                continue;
            }
            self.sums[*group] += value;
            self.seen[*group] = true;
        }
    }

    fn take(&mut self, emit_to: EmitTo) -> (Vec<i128>, NullBuffer) {
        (emit_to.take_needed(&mut self.sums), NullBuffer::from(emit_to.take_needed(&mut self.seen)))
    }
}

impl GroupsAccumulator for CheckedSumGroups {
    fn update_batch(&mut self, values: &[ArrayRef], groups: &[usize], filter: Option<&BooleanArray>, total_groups: usize) -> Result<()> {
        self.add(bigints(&values[0])?.iter().map(|v| v.map(i128::from)), groups, filter, total_groups);
        Ok(())
    }

    fn merge_batch(&mut self, values: &[ArrayRef], groups: &[usize], total_groups: usize) -> Result<()> {
        self.add(partial_sums(&values[0])?.iter(), groups, None, total_groups);
        Ok(())
    }

    fn evaluate(&mut self, emit_to: EmitTo) -> Result<ArrayRef> {
        let (sums, seen) = self.take(emit_to);
        let sums = sums.into_iter().zip(seen.iter()).map(|(sum, seen)| if seen { as_bigint(sum) } else { Ok(0) }).collect::<Result<Vec<i64>>>()?;
        Ok(Arc::new(Int64Array::new(sums.into(), Some(seen))))
    }

    fn state(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        let (sums, seen) = self.take(emit_to);
        Ok(vec![Arc::new(Decimal128Array::new(sums.into(), Some(seen)).with_data_type(PARTIAL_SUM))])
    }

    /// Each row as its own partial sum (rows filtered out as NULL), so a
    /// partial aggregate that groups too little can pass rows on as they are.
    fn convert_to_state(&self, values: &[ArrayRef], filter: Option<&BooleanArray>) -> Result<Vec<ArrayRef>> {
        let values = arrow::compute::cast(&values[0], &PARTIAL_SUM)?;
        let Some(filter) = filter else { return Ok(vec![values]) };
        // A NULL in the filter drops its row as a false does.
        let kept = match filter.nulls() {
            Some(nulls) => BooleanArray::new(filter.values() & nulls.inner(), None),
            None => filter.clone(),
        };
        Ok(vec![arrow::compute::nullif(&values, &arrow::compute::not(&kept)?)?])
    }

    fn size(&self) -> usize {
        self.sums.capacity() * std::mem::size_of::<i128>() + self.seen.capacity()
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
    use arrow::array::{Float32Array, Float64Array, Int32Array};

    fn run(operation: Arithmetic, left: ColumnarValue, right: ColumnarValue, rows: usize) -> Result<ColumnarValue> {
        let data_type = left.data_type();
        let field = Arc::new(arrow::datatypes::Field::new("x", data_type.clone(), true));
        let operations = ColumnarValue::Scalar(ScalarValue::Utf8(Some(operation.symbol().to_string())));
        CheckedChain::udf().invoke_with_args(ScalarFunctionArgs {
            args: vec![operations, left, right],
            arg_fields: vec![Arc::new(arrow::datatypes::Field::new("o", DataType::Utf8, false)), field.clone(), field.clone()],
            number_rows: rows,
            return_field: field,
            config_options: Arc::new(ConfigOptions::default()),
        })
    }

    #[test]
    fn a_left_associative_chain_becomes_one_function_named_as_the_operators() {
        // As deep as a node's statement thread takes it.
        let deep = std::thread::Builder::new().stack_size(foam_common::limits::NODE_THREAD_STACK_BYTES);
        deep.spawn(a_chain_of_terms).unwrap().join().unwrap();
    }

    fn a_chain_of_terms() {
        use datafusion::common::tree_node::TreeNode;
        use datafusion::logical_expr::{col, lit};
        let schema = DFSchema::try_from(arrow::datatypes::Schema::new(vec![Field::new("a", DataType::Int64, true), Field::new("f", DataType::Float64, true)])).unwrap();
        let terms = 3_000;
        let sum = (1..terms).fold(col("a"), |e, i| if i % 2 == 0 { e + col("a") } else { e - lit(1i64) });
        let name = sum.schema_name().to_string();
        let rewritten = sum.transform_up(|e| checked(e, &schema)).unwrap().data;
        let (operations, operands) = chain_operands(&rewritten).expect("one chain");
        assert_eq!((operations.len(), operands.len()), (terms - 1, terms));
        assert!(operands.iter().all(|e| chain_operands(e).is_none()), "flat");
        assert_eq!(rewritten.schema_name().to_string(), name);
        assert_eq!(rewritten.get_type(&schema).unwrap(), DataType::Int64);
        // A product on the right is an operand of its own; floats are left
        // to DataFusion; a negation is a chain from zero.
        let mixed = (col("a") + col("a") * lit(2i64) - (-col("a"))).transform_up(|e| checked(e, &schema)).unwrap().data;
        let (operations, operands) = chain_operands(&mixed).unwrap();
        assert_eq!(operations, "+-");
        assert_eq!(chain_operands(&operands[1]).map(|(o, e)| (o, e.len())), Some(("*", 2)));
        assert_eq!(chain_operands(&operands[2]).map(|(o, e)| (o, e.len())), Some(("-", 2)));
        // Floats are checked, but not negated (a float's negation cannot
        // fail); a float and an integer, or a comparison, are left alone.
        let float = (col("f") / col("f") - (-col("f"))).transform_up(|e| checked(e, &schema)).unwrap().data;
        assert_eq!(chain_operands(&float).map(|(o, e)| (o, chain_operands(&e[2]).is_none())), Some(("/-", true)));
        for untouched in [col("f") + col("a"), col("a").gt(col("a"))] {
            assert!(!untouched.transform_up(|e| checked(e, &schema)).unwrap().transformed);
        }
    }

    #[test]
    fn grouped_sums_pass_the_limit_in_part_and_fail_only_as_a_whole() {
        let rows: ArrayRef = Arc::new(Int64Array::from(vec![Some(i64::MAX), Some(i64::MAX), None, Some(-i64::MAX), Some(7)]));
        let mut partial = CheckedSumGroups::default();
        partial.update_batch(std::slice::from_ref(&rows), &[0, 0, 1, 0, 1], None, 2).unwrap();
        let state = partial.state(EmitTo::All).unwrap();
        // Rows passed on unaggregated (a partial aggregate that skips), the
        // filtered-out row as NULL, merge with the partial sums.
        let filter = BooleanArray::from(vec![true, false, true, true, true]);
        let passed = partial.convert_to_state(std::slice::from_ref(&rows), Some(&filter)).unwrap();
        let mut whole = CheckedSumGroups::default();
        whole.merge_batch(&state, &[0, 1], 2).unwrap();
        whole.merge_batch(&passed, &[1, 1, 1, 1, 1], 2).unwrap();
        let sums = whole.evaluate(EmitTo::All).unwrap();
        let sums = sums.as_primitive::<Int64Type>();
        assert_eq!(sums.iter().collect::<Vec<_>>(), vec![Some(i64::MAX), Some(14)], "MAX + MAX - MAX; 7 + (MAX - MAX) + 7");
        let mut over = CheckedSumGroups::default();
        over.update_batch(&[rows], &[0, 0, 1, 1, 1], None, 2).unwrap();
        let error = over.evaluate(EmitTo::All).unwrap_err();
        assert!(error.to_string().contains("bigint out of range"), "{error}");
    }

    #[test]
    fn results_that_fit_are_the_operations_and_others_fail_with_22003() {
        let values = ColumnarValue::Array(Arc::new(Int64Array::from(vec![Some(1), None, Some(i64::MAX - 1)])));
        let one = ColumnarValue::Scalar(ScalarValue::Int64(Some(1)));
        let sums = run(Arithmetic::Add, values.clone(), one.clone(), 3).unwrap().into_array(3).unwrap();
        let sums = sums.as_any().downcast_ref::<Int64Array>().unwrap();
        assert_eq!(sums.iter().collect::<Vec<_>>(), vec![Some(2), None, Some(i64::MAX)]);
        let two = ColumnarValue::Scalar(ScalarValue::Int64(Some(2)));
        let error = run(Arithmetic::Add, values.clone(), two.clone(), 3).unwrap_err();
        assert_eq!(error.to_string().contains("bigint out of range"), true, "{error}");
        assert_eq!(FoamError::from(error).sqlstate(), SqlState::NumericValueOutOfRange);
        assert!(run(Arithmetic::Mul, values, two, 3).is_err(), "(i64::MAX - 1) * 2 overflows");
        let min = ColumnarValue::Array(Arc::new(Int32Array::from(vec![i32::MIN])));
        let zero = ColumnarValue::Scalar(ScalarValue::Int32(Some(0)));
        let negated = run(Arithmetic::Sub, zero, min, 1).unwrap_err();
        assert!(negated.to_string().contains("integer out of range"), "{negated}");
        let scalars = run(Arithmetic::Sub, ScalarValue::Int32(Some(5)).into(), ScalarValue::Int32(Some(7)).into(), 1).unwrap();
        assert!(matches!(scalars, ColumnarValue::Scalar(ScalarValue::Int32(Some(-2)))));
        let by_zero = run(Arithmetic::Div, ScalarValue::Int32(Some(5)).into(), ScalarValue::Int32(Some(0)).into(), 1).unwrap_err();
        assert_eq!((by_zero.to_string().contains("division by zero"), FoamError::from(by_zero).sqlstate()), (true, SqlState::DivisionByZero));
    }

    #[test]
    fn float_steps_fail_where_postgresql_s_do() {
        let floats = |values: Vec<Option<f64>>| ColumnarValue::Array(Arc::new(Float64Array::from(values)));
        let scalar = |value: f64| ColumnarValue::Scalar(ScalarValue::Float64(Some(value)));
        let sqlstate = |result: Result<ColumnarValue>| FoamError::from(result.unwrap_err()).sqlstate();
        // Finite operands, an infinite result: 22003.
        let big = floats(vec![Some(1.0), None, Some(f64::MAX)]);
        assert_eq!(sqlstate(run(Arithmetic::Mul, big.clone(), scalar(10.0), 3)), SqlState::NumericValueOutOfRange);
        assert_eq!(sqlstate(run(Arithmetic::Add, big.clone(), scalar(f64::MAX), 3)), SqlState::NumericValueOutOfRange);
        let real = ColumnarValue::Array(Arc::new(Float32Array::from(vec![Some(1.0), Some(3e38)])));
        assert_eq!(sqlstate(run(Arithmetic::Mul, real.clone(), ScalarValue::Float32(Some(10.0)).into(), 2)), SqlState::NumericValueOutOfRange);
        assert_eq!(sqlstate(run(Arithmetic::Div, real, ScalarValue::Float32(Some(0.0)).into(), 2)), SqlState::DivisionByZero);
        // An infinite operand is IEEE arithmetic, as in PostgreSQL.
        let infinite = run(Arithmetic::Add, floats(vec![Some(f64::INFINITY), Some(2.0)]), scalar(1.0), 2).unwrap().into_array(2).unwrap();
        assert_eq!(infinite.as_primitive::<Float64Type>().values().to_vec(), vec![f64::INFINITY, 3.0]);
        // Any zero divisor of a row that is not NULL: 22012, also 0 / 0.
        assert_eq!(sqlstate(run(Arithmetic::Div, floats(vec![Some(1.0), Some(0.0)]), floats(vec![Some(2.0), Some(-0.0)]), 2)), SqlState::DivisionByZero);
        let halves = run(Arithmetic::Div, floats(vec![Some(1.0), None]), floats(vec![Some(2.0), Some(0.0)]), 2).unwrap().into_array(2).unwrap();
        assert_eq!(halves.as_primitive::<Float64Type>().iter().collect::<Vec<_>>(), vec![Some(0.5), None], "a NULL over zero is NULL");
    }
}
