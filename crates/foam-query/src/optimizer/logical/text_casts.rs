//! Casts of text to dates, times and timestamps read PostgreSQL's input
//! formats (`exec/datetime_input.rs`): `'2024-01-01 10:30'::timestamp`,
//! `DATE 'Jan 5, 2024'`, `'today'::date`. Arrow's cast wants ISO 8601 with
//! seconds, so these failed, in a cast, in the casts an INSERT adds to its
//! values and in those a comparison with a quoted literal adds.
//!
//! An analyzer rule, after DataFusion's type coercion, replaces each such
//! cast:
//!
//! ```text
//!   CAST(x AS T)  ─▶  foam_datetime_of_text(x, NULL::T)      x: text, T: date, time or timestamp
//! ```
//!
//! The function is immutable, so DataFusion's simplifier folds it over a
//! literal at planning time and a filter on a constant still prunes; `now`
//! and `today` are read then, as PostgreSQL reads them when it parses.

use std::sync::Arc;

use arrow::datatypes::DataType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{DFSchema, DataFusionError, Result, ScalarValue};
use datafusion::logical_expr::expr::{Cast, ScalarFunction};
use datafusion::logical_expr::{ColumnarValue, Expr, ExprSchemable, LogicalPlan, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility};
use datafusion::optimizer::AnalyzerRule;

use super::named_rewrite::rewrite_expressions;
use crate::exec::datetime_input::{cast_texts, is_datetime};
use crate::exec::function_values::per_value;

/// The function the rewrite calls; workers register it (`worker_udfs`).
pub const DATETIME_OF_TEXT: &str = "foam_datetime_of_text";

/// The analyzer rule (see the module documentation).
#[derive(Debug, Default)]
pub struct TextCasts;

impl AnalyzerRule for TextCasts {
    fn name(&self) -> &str {
        "foam_text_casts"
    }

    fn analyze(&self, plan: LogicalPlan, config: &ConfigOptions) -> Result<LogicalPlan> {
        let zone = config.execution.time_zone.as_deref();
        rewrite_expressions(plan, |expr, schema| text_cast(expr, schema, zone))
    }
}

/// `zone` is the session's TimeZone: a `timestamptz` written without a
/// zone is local time there (a `timestamptz` column's own type says UTC).
fn text_cast(expr: Expr, schema: &DFSchema, zone: Option<&str>) -> Result<Transformed<Expr>> {
    let Expr::Cast(Cast { expr: inner, field }) = expr else { return Ok(Transformed::no(expr)) };
    let text = matches!(inner.get_type(schema), Ok(DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View));
    if !text || !is_datetime(field.data_type()) {
        return Ok(Transformed::no(Expr::Cast(Cast { expr: inner, field })));
    }
    let read_as = zone.and_then(|zone| crate::frontend::time_zone::in_zone(field.data_type(), zone)).unwrap_or_else(|| field.data_type().clone());
    // The target type rides on a typed NULL: the function's result type.
    let target = Expr::Literal(ScalarValue::try_from(&read_as)?, None);
    let read = Expr::ScalarFunction(ScalarFunction::new_udf(Arc::new(DatetimeOfText::udf()), vec![*inner, target]));
    if &read_as == field.data_type() {
        return Ok(Transformed::yes(read));
    }
    // The same instants, in the type's zone.
    Ok(Transformed::yes(Expr::Cast(Cast { expr: Box::new(read), field })))
}

/// `foam_datetime_of_text(x, NULL::T)`: the text `x` read as a value of
/// the date, time or timestamp type `T`, as PostgreSQL reads it.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct DatetimeOfText {
    signature: Signature,
}

impl DatetimeOfText {
    pub fn udf() -> ScalarUDF {
        ScalarUDF::new_from_impl(DatetimeOfText { signature: Signature::any(2, Volatility::Immutable) })
    }
}

impl ScalarUDFImpl for DatetimeOfText {
    fn name(&self) -> &str {
        DATETIME_OF_TEXT
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        match arg_types {
            [DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View, target] if is_datetime(target) => Ok(target.clone()),
            _ => Err(DataFusionError::Internal(format!("{DATETIME_OF_TEXT} takes a text and a typed NULL date/time, not {arg_types:?}"))),
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [value, target] = args.args.as_slice() else {
            return Err(DataFusionError::Internal(format!("{DATETIME_OF_TEXT} takes two arguments")));
        };
        let target = target.data_type();
        let now = crate::exec::datetime_input::now_utc();
        per_value(value, args.number_rows, |texts| {
            cast_texts(texts.as_ref(), &target, now).map_err(|(row, error)| {
                let text = ScalarValue::try_from_array(texts, row).map(|value| value.to_string()).unwrap_or_default();
                DataFusionError::from(error.to_error(&text, &target))
            })
        })
    }
}
