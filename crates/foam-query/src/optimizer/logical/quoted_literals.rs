//! Quoted literals compared with a boolean, a date, a time, a timestamp or
//! an interval take its type, as PostgreSQL types them. A quoted literal
//! in PostgreSQL has no type until its context gives one, so `WHERE active
//! = 't'`, `flag IN ('yes', 'no')` and `f > 'y'` compare booleans, and
//! `valid_to = '9999-12-31'` compares timestamps. DataFusion
//! types every quoted literal as text: it refused the comparison with a
//! boolean ("Cannot infer common argument type for comparison operation
//! Boolean = Utf8"; fuzz seed 56038 w2), and compared a timestamp column
//! with a literal as nanoseconds, which end in 2262, so a row holding
//! 9999-12-31 failed the query.
//!
//! Where the SQL planner types a comparison operator, the
//! [`QuotedLiteralPlanner`] it consults reads the literal; elsewhere (`IS
//! DISTINCT FROM`, `IN` lists, `BETWEEN`, the arguments of `coalesce`,
//! `nullif`, `greatest` and `least`, a CASE's WHEN values and results) an
//! analyzer rule run just before DataFusion's type coercion does, keeping
//! each expression's name. The SQL planner types
//! `x IS [NOT] DISTINCT FROM 'lit'` in a select list without asking a
//! planner, so the front end first writes it as `(x = 'lit') IS [NOT]
//! TRUE` ([`typed_by_planner`]), the same for a literal that is
//! never NULL, whatever the type of `x`. Either way a quoted literal on one
//! side of a comparison (or in an `IN` list, a bound of `BETWEEN`, among
//! the values of those functions or a CASE) whose other side is
//!
//! - a boolean becomes the boolean PostgreSQL reads it as (`t`, `true`,
//!   `y`, `yes`, `on`, `1` and the other prefixes PostgreSQL takes, in any
//!   case, blanks around ignored); any other text is 22P02 "invalid input
//!   syntax for type boolean", as there;
//! - a date, time, timestamp or interval becomes a cast of the text to
//!   that type (a time or timestamp at microseconds, PostgreSQL's
//!   precision, whatever the other side's), which `text_casts.rs` reads in
//!   PostgreSQL's input formats;
//! - among a CASE's or those functions' values, numbers too: the text
//!   becomes the number it writes, read for the widest kind among them
//!   (`coalesce(n, '0')` is a number, as in PostgreSQL).
//!
//! A literal cast to text (`'t'::text`) is typed and left alone, and
//! PostgreSQL refuses it too.

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{DFSchema, Result, ScalarValue};
use datafusion::logical_expr::expr::{Between, Case, Cast, InList, ScalarFunction};
use datafusion::logical_expr::planner::{ExprPlanner, PlannerResult, RawBinaryExpr};
use datafusion::logical_expr::{BinaryExpr, Expr, ExprSchemable, LogicalPlan, Operator};
use datafusion::sql::sqlparser::ast::{self as sql, BinaryOperator, VisitMut, VisitorMut};
use datafusion::arrow::datatypes::{DataType, TimeUnit};
use datafusion::optimizer::AnalyzerRule;
use foam_common::{FoamError, SqlState};

use super::named_rewrite::rewrite_expressions;
use crate::exec::datetime_input::is_datetime;

/// The name of DataFusion's rule this one runs before.
pub const TYPE_COERCION_RULE: &str = "type_coercion";

/// The analyzer rule (see the module documentation).
#[derive(Debug, Default)]
pub struct QuotedLiterals;

impl AnalyzerRule for QuotedLiterals {
    fn name(&self) -> &str {
        "foam_quoted_literals"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        // Names kept: an aggregate's `FILTER (WHERE d BETWEEN '...' AND
        // '...')` is read by that name above it.
        rewrite_expressions(plan, typed_literals)
    }
}

/// Types quoted literals compared with booleans and dates as the SQL planner types
/// the comparison (see the module documentation).
#[derive(Debug, Default)]
pub struct QuotedLiteralPlanner;

impl ExprPlanner for QuotedLiteralPlanner {
    fn plan_binary_op(&self, expr: RawBinaryExpr, schema: &DFSchema) -> Result<PlannerResult<RawBinaryExpr>> {
        let comparison = matches!(
            expr.op,
            BinaryOperator::Eq | BinaryOperator::NotEq | BinaryOperator::Lt | BinaryOperator::LtEq | BinaryOperator::Gt | BinaryOperator::GtEq
        );
        if !comparison {
            return Ok(PlannerResult::Original(expr));
        }
        let RawBinaryExpr { op, left, right } = expr;
        let (left, right) = compared_sides(left, right, schema)?.data;
        Ok(PlannerResult::Original(RawBinaryExpr { op, left, right }))
    }
}

/// Writes the forms the SQL planner types without asking a planner as
/// forms it types through [`QuotedLiteralPlanner`] or this rule (see the
/// module documentation): each `x IS [NOT] DISTINCT FROM 'lit'` (or `'lit'
/// IS ...`) in `statement` as `(x = 'lit') IS [NOT] TRUE`, and each
/// `coalesce` with a quoted literal among its arguments as the CASE
/// DataFusion's simplifier makes of it (`coalesce(t, '9999-12-31')`
/// failed to plan: DataFusion finds no common type of a timestamp and
/// text).
pub fn typed_by_planner(statement: &mut sql::Statement) {
    struct Rewriter;
    impl VisitorMut for Rewriter {
        type Break = ();
        fn post_visit_expr(&mut self, expr: &mut sql::Expr) -> std::ops::ControlFlow<()> {
            let is_quoted = |e: &sql::Expr| matches!(e, sql::Expr::Value(v) if matches!(v.value, sql::Value::SingleQuotedString(_)));
            if let Some(args) = coalesce_arguments(expr).filter(|args| args.len() > 1 && args.iter().any(|a| is_quoted(a))) {
                let (last, init) = args.split_last().expect("two arguments or more");
                *expr = sql::Expr::Case {
                    case_token: sql::helpers::attached_token::AttachedToken::empty(),
                    end_token: sql::helpers::attached_token::AttachedToken::empty(),
                    operand: None,
                    conditions: init
                        .iter()
                        .map(|arg| sql::CaseWhen { condition: sql::Expr::IsNotNull(Box::new((*arg).clone())), result: (*arg).clone() })
                        .collect(),
                    else_result: Some(Box::new((*last).clone())),
                };
                return std::ops::ControlFlow::Continue(());
            }
            let (sides, distinct) = match expr {
                sql::Expr::IsDistinctFrom(left, right) if is_quoted(left) || is_quoted(right) => ((left.clone(), right.clone()), true),
                sql::Expr::IsNotDistinctFrom(left, right) if is_quoted(left) || is_quoted(right) => ((left.clone(), right.clone()), false),
                _ => return std::ops::ControlFlow::Continue(()),
            };
            let equal = Box::new(sql::Expr::Nested(Box::new(sql::Expr::BinaryOp { left: sides.0, op: BinaryOperator::Eq, right: sides.1 })));
            *expr = if distinct { sql::Expr::IsNotTrue(equal) } else { sql::Expr::IsTrue(equal) };
            std::ops::ControlFlow::Continue(())
        }
    }
    let _ = statement.visit(&mut Rewriter);
}

/// The arguments of a plain `coalesce(...)` call (no FILTER, OVER, or
/// named arguments).
fn coalesce_arguments(expr: &sql::Expr) -> Option<Vec<&sql::Expr>> {
    let sql::Expr::Function(function) = expr else { return None };
    let [sql::ObjectNamePart::Identifier(name)] = function.name.0.as_slice() else { return None };
    if !name.value.eq_ignore_ascii_case("coalesce") || function.over.is_some() || function.filter.is_some() {
        return None;
    }
    let sql::FunctionArguments::List(list) = &function.args else { return None };
    let args = crate::frontend::plain_arguments(list);
    (args.len() == list.args.len() && list.clauses.is_empty()).then_some(args)
}

/// `expr` with the quoted literals it compares with a boolean, date, time
/// or timestamp of `schema` given that type.
fn typed_literals(expr: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
    match expr {
        Expr::BinaryExpr(BinaryExpr { left, op, right }) if is_comparison(op) => Ok(compared_sides(*left, *right, schema)?
            .update_data(|(left, right)| Expr::BinaryExpr(BinaryExpr::new(Box::new(left), op, Box::new(right))))),
        Expr::InList(InList { expr, list, negated }) if list.iter().any(|e| quoted(e).is_some()) => {
            let Some(data_type) = literal_type(&expr, schema) else { return Ok(Transformed::no(Expr::InList(InList { expr, list, negated }))) };
            let list = list.into_iter().map(|e| typed_if_quoted(e, &data_type));
            Ok(Transformed::yes(Expr::InList(InList { expr, list: list.collect::<Result<_>>()?, negated })))
        }
        Expr::Between(Between { expr, negated, low, high }) if quoted(&low).is_some() || quoted(&high).is_some() => {
            let Some(data_type) = literal_type(&expr, schema) else { return Ok(Transformed::no(Expr::Between(Between { expr, negated, low, high }))) };
            let typed = |bound: Box<Expr>| typed_if_quoted(*bound, &data_type).map(Box::new);
            Ok(Transformed::yes(Expr::Between(Between { expr, negated, low: typed(low)?, high: typed(high)? })))
        }
        // `coalesce(valid_to, '9999-12-31')`, `CASE t WHEN '...' THEN ...`:
        // the literal takes the type of the values it stands among.
        Expr::ScalarFunction(ScalarFunction { func, args }) if SAME_TYPE_FUNCTIONS.contains(&func.name()) && args.iter().any(|a| quoted(a).is_some()) => {
            let Some(data_type) = values_type(args.iter(), schema) else {
                return Ok(Transformed::no(Expr::ScalarFunction(ScalarFunction { func, args })));
            };
            let args = args.into_iter().map(|arg| typed_if_quoted(arg, &data_type)).collect::<Result<_>>()?;
            Ok(Transformed::yes(Expr::ScalarFunction(ScalarFunction { func, args })))
        }
        Expr::Case(Case { expr, when_then_expr, else_expr })
            if when_then_expr.iter().flat_map(|(when, then)| [when, then]).chain(else_expr.as_ref()).any(|e| quoted(e).is_some()) =>
        {
            let when_type = values_type(expr.as_deref().into_iter(), schema);
            let result_type = values_type(when_then_expr.iter().map(|(_, then)| then.as_ref()).chain(else_expr.as_deref()), schema);
            if when_type.is_none() && result_type.is_none() {
                return Ok(Transformed::no(Expr::Case(Case { expr, when_then_expr, else_expr })));
            }
            let typed = |e: Box<Expr>, data_type: &Option<DataType>| match data_type {
                Some(data_type) => typed_if_quoted(*e, data_type).map(Box::new),
                None => Ok(e),
            };
            let when_then_expr =
                when_then_expr.into_iter().map(|(when, then)| Ok((typed(when, &when_type)?, typed(then, &result_type)?))).collect::<Result<_>>()?;
            let else_expr = else_expr.map(|e| typed(e, &result_type)).transpose()?;
            Ok(Transformed::yes(Expr::Case(Case { expr, when_then_expr, else_expr })))
        }
        other => Ok(Transformed::no(other)),
    }
}

/// Functions whose arguments are values of one type, which a quoted
/// literal among them takes.
const SAME_TYPE_FUNCTIONS: [&str; 4] = ["coalesce", "nullif", "greatest", "least"];

/// The type `values` of `schema` give a quoted literal among them (the
/// values of a CASE or of [`SAME_TYPE_FUNCTIONS`]): the first boolean,
/// date, time, timestamp or interval's, as comparisons give; else, among
/// numbers, the widest kind, as PostgreSQL resolves them (a double over a
/// numeric over an integer: `coalesce(int_column, '0')` is an integer).
fn values_type<'a>(values: impl Iterator<Item = &'a Expr>, schema: &DFSchema) -> Option<DataType> {
    let mut widest: Option<DataType> = None;
    for value in values.filter(|v| quoted(v).is_none()) {
        if let Some(data_type) = literal_type(value, schema) {
            return Some(data_type);
        }
        let Ok(data_type) = value.get_type(schema) else { continue };
        let rank = |t: &DataType| if t.is_floating() { 3 } else if matches!(t, DataType::Decimal128(..) | DataType::Decimal256(..)) { 2 } else { 1 };
        if data_type.is_numeric() && widest.as_ref().is_none_or(|w| rank(&data_type) > rank(w)) {
            widest = Some(data_type);
        }
    }
    widest
}

/// `expr` as a value of `data_type` if it is a quoted literal; among
/// numbers, the number it writes as a literal of its own (see
/// [`number_literal`]), which DataFusion's coercion then widens with the
/// others: cast to a NUMERIC(12,2) neighbour's type, `'0.125'` was rounded
/// to 0.13.
fn typed_if_quoted(expr: Expr, data_type: &DataType) -> Result<Expr> {
    match quoted(&expr) {
        Some(text) if data_type.is_numeric() => number_literal(text, data_type),
        Some(text) => typed_literal(text, data_type),
        None => Ok(expr),
    }
}

/// The number `text` writes beside numbers of the kind of `neighbour`, as
/// PostgreSQL reads it for that type: an integer beside integers; beside a
/// numeric, a decimal of the text's own scale (a double past 38 digits or
/// with an exponent); beside a double, a double (`NaN` and `Infinity`
/// too). Anything else is 22P02 naming the type.
fn number_literal(text: &str, neighbour: &DataType) -> Result<Expr> {
    let written = text.trim();
    let unsigned = written.strip_prefix(['+', '-']).unwrap_or(written);
    let (whole, fraction) = unsigned.split_once('.').unwrap_or((unsigned, ""));
    let plain = !(whole.is_empty() && fraction.is_empty()) && whole.chars().chain(fraction.chars()).all(|c| c.is_ascii_digit());
    let significant = whole.trim_start_matches('0').len() + fraction.len();
    let value = if neighbour.is_integer() {
        written.parse::<i64>().ok().map(|integer| ScalarValue::Int64(Some(integer)))
    } else if plain && !neighbour.is_floating() && significant <= usize::from(datafusion::arrow::datatypes::DECIMAL128_MAX_PRECISION) {
        let unscaled: i128 = format!("{}{whole}{fraction}", if written.starts_with('-') { "-" } else { "" }).parse().unwrap_or_default();
        Some(ScalarValue::Decimal128(Some(unscaled), significant.max(fraction.len()).max(1) as u8, fraction.len() as i8))
    } else {
        // One sign only: Rust's parser takes `+-5` as no number, `--5` too.
        written.parse::<f64>().ok().filter(|_| !unsigned.starts_with(['+', '-'])).map(|double| ScalarValue::Float64(Some(double)))
    };
    let name = match neighbour {
        DataType::Int16 => "smallint",
        DataType::Int32 => "integer",
        DataType::Int64 => "bigint",
        DataType::Float32 => "real",
        DataType::Float64 => "double precision",
        _ => "numeric",
    };
    value.map(|value| Expr::Literal(value, None)).ok_or_else(|| {
        FoamError::Query { message: format!("invalid input syntax for type {name}: \"{text}\""), sqlstate: SqlState::InvalidTextRepresentation }.into()
    })
}

/// The two sides of a comparison, a quoted literal on one given the type
/// of the other where that is a boolean, date, time or timestamp of
/// `schema`.
fn compared_sides(left: Expr, right: Expr, schema: &DFSchema) -> Result<Transformed<(Expr, Expr)>> {
    if let (Some(text), Some(data_type)) = (quoted(&left), literal_type(&right, schema)) {
        return Ok(Transformed::yes((typed_literal(text, &data_type)?, right)));
    }
    if let (Some(text), Some(data_type)) = (quoted(&right), literal_type(&left, schema)) {
        let right = typed_literal(text, &data_type)?;
        return Ok(Transformed::yes((left, right)));
    }
    Ok(Transformed::no((left, right)))
}

/// The type `expr` of `schema` gives a quoted literal compared with it, if
/// it is one this rule types.
fn literal_type(expr: &Expr, schema: &DFSchema) -> Option<DataType> {
    if quoted(expr).is_some() {
        return None;
    }
    // At PostgreSQL's precision: `ts0 = '10:00:00.5'` compares with a
    // TIMESTAMP(0) widened, not the literal cut to whole seconds.
    match expr.get_type(schema).ok()? {
        DataType::Timestamp(_, zone) => Some(DataType::Timestamp(TimeUnit::Microsecond, zone)),
        DataType::Time32(_) | DataType::Time64(_) => Some(DataType::Time64(TimeUnit::Microsecond)),
        other => (other == DataType::Boolean || is_datetime(&other)).then_some(other),
    }
}

/// The quoted literal `text` as a value of `data_type` (a boolean, date,
/// time, timestamp or interval).
fn typed_literal(text: &str, data_type: &DataType) -> Result<Expr> {
    if *data_type == DataType::Boolean {
        return boolean_literal(text);
    }
    Ok(Expr::Cast(Cast::new(Box::new(Expr::Literal(ScalarValue::Utf8(Some(text.to_string())), None)), data_type.clone())))
}

fn is_comparison(op: Operator) -> bool {
    matches!(
        op,
        Operator::Eq | Operator::NotEq | Operator::Lt | Operator::LtEq | Operator::Gt | Operator::GtEq | Operator::IsDistinctFrom | Operator::IsNotDistinctFrom
    )
}

/// The text of a quoted literal (not NULL).
fn quoted(expr: &Expr) -> Option<&str> {
    match expr {
        Expr::Literal(ScalarValue::Utf8(Some(text)) | ScalarValue::Utf8View(Some(text)) | ScalarValue::LargeUtf8(Some(text)), _) => Some(text),
        _ => None,
    }
}

/// The boolean PostgreSQL reads `text` as (its `parse_bool`).
fn boolean_literal(text: &str) -> Result<Expr> {
    let word = text.trim().to_ascii_lowercase();
    let prefix_of = |full: &str, shortest: usize| word.len() >= shortest && full.starts_with(word.as_str());
    let value = if prefix_of("true", 1) || prefix_of("yes", 1) || prefix_of("on", 2) || word == "1" {
        true
    } else if prefix_of("false", 1) || prefix_of("no", 1) || prefix_of("off", 2) || word == "0" {
        false
    } else {
        return Err(FoamError::Query {
            message: format!("invalid input syntax for type boolean: \"{text}\""),
            sqlstate: SqlState::InvalidTextRepresentation,
        }
        .into());
    };
    Ok(Expr::Literal(ScalarValue::Boolean(Some(value)), None))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_read_as_postgresql_reads_booleans() {
        let read = |text: &str| match boolean_literal(text) {
            Ok(Expr::Literal(ScalarValue::Boolean(Some(value)), _)) => Some(value),
            _ => None,
        };
        for text in ["t", "TRUE", "tru", " yes ", "y", "on", "1"] {
            assert_eq!(read(text), Some(true), "{text}");
        }
        for text in ["f", "False", "n", "NO", "off", "of", "0"] {
            assert_eq!(read(text), Some(false), "{text}");
        }
        // "o" could be on or off; PostgreSQL refuses it, and the rest.
        for text in ["o", "", "truex", "2", "yess", "nope"] {
            assert_eq!(read(text), None, "{text}");
        }
    }

    #[test]
    fn distinct_from_a_quoted_literal_is_an_equality_tested_for_truth() {
        let dialect = datafusion::sql::sqlparser::dialect::PostgreSqlDialect {};
        let mut statement = datafusion::sql::sqlparser::parser::Parser::parse_sql(
            &dialect,
            "SELECT f IS DISTINCT FROM 'y', 'n' IS NOT DISTINCT FROM f, f IS DISTINCT FROM g, coalesce(a, b, 'x'), coalesce(a, b) FROM t",
        )
        .unwrap()
        .remove(0);
        typed_by_planner(&mut statement);
        assert_eq!(
            statement.to_string(),
            "SELECT (f = 'y') IS NOT TRUE, ('n' = f) IS TRUE, f IS DISTINCT FROM g, \
             CASE WHEN a IS NOT NULL THEN a WHEN b IS NOT NULL THEN b ELSE 'x' END, coalesce(a, b) FROM t"
        );
    }
}
