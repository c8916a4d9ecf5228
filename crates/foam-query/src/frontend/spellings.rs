//! SQL that PostgreSQL takes in a spelling DataFusion refuses or lacks,
//! written as the spelling DataFusion plans: the standard's `FETCH FIRST n
//! ROWS ONLY` ("FETCH clause is not supported yet"), `mod(a, b)`,
//! `json_agg(x)` and `json_object_agg(k, v)` ("Invalid function"),
//! `LOCALTIMESTAMP`, `make_interval`'s named arguments, the type `FLOAT`,
//! which DataFusion reads as REAL, and EXTRACT and `date_part` of the fields
//! DataFusion answers otherwise (`exec/extract.rs`).
//!
//! ```text
//!   ... OFFSET m FETCH FIRST n ROWS ONLY   ─▶  ... LIMIT n OFFSET m     (FETCH FIRST ROW ONLY: LIMIT 1)
//!   mod(a, b)                               ─▶  (a) % (b)                (the remainder has a's sign in both)
//!   json_agg(x ...)                         ─▶  foam_json_array(array_agg(x ...))   (exec/json_build.rs)
//!   json_object_agg(k, v ...)               ─▶  foam_json_object(array_agg(struct(k, v) ...))
//!   LOCALTIMESTAMP, LOCALTIME               ─▶  CAST(now() AS TIMESTAMP), CAST(now() AS TIME)
//!   make_interval(days => 10)               ─▶  make_interval(0, 0, 0, 10, 0, 0, 0.0)   (exec/interval_functions.rs)
//!   CAST(x AS FLOAT), x::float, FLOAT(25..53) ─▶  DOUBLE PRECISION   (FLOAT(1..24): REAL, as in PostgreSQL)
//!   EXTRACT(field FROM x)                   ─▶  foam_extract('field', x)   (NUMERIC)
//!   date_part('second', x)                  ─▶  foam_date_part('second', x)   (double precision)
//! ```
//!
//! `FETCH ... WITH TIES` is refused (0A000), a FETCH beside a LIMIT is
//! PostgreSQL's 42601. Select items keep the names PostgreSQL gives them
//! (`mod`): `select_names.rs` names them before this rewrite.

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    BinaryOperator, CastKind, DataType, Expr, FunctionArg, FunctionArgExpr, FunctionArguments, Ident, LimitClause, ObjectName, Query, Statement, TimezoneInfo, Value, VisitMut, VisitorMut,
};
use foam_common::{FoamError, FoamResult, SqlState};

use crate::frontend::array_subquery::call;

/// PostgreSQL's `FLOAT` is DOUBLE PRECISION, and `FLOAT(p)` REAL for up to
/// 24 binary digits of precision, DOUBLE PRECISION for up to 53 (22023
/// past that); DataFusion reads every FLOAT as REAL, so `1::float / 3`
/// lost half its digits. Array element types too.
fn float_as_postgres(data_type: &mut DataType) -> FoamResult<()> {
    use datafusion::sql::sqlparser::ast::{ArrayElemTypeDef, ExactNumberInfo};
    match data_type {
        DataType::Float(info) => {
            let bits = match info {
                ExactNumberInfo::None => 53,
                ExactNumberInfo::Precision(p) | ExactNumberInfo::PrecisionAndScale(p, _) => *p,
            };
            *data_type = match bits {
                1..=24 => DataType::Real,
                25..=53 => DataType::DoublePrecision,
                0 => return Err(FoamError::Query { message: "precision for type float must be at least 1 bit".into(), sqlstate: SqlState::InvalidParameterValue }),
                _ => return Err(FoamError::Query { message: "precision for type float must be less than 54 bits".into(), sqlstate: SqlState::InvalidParameterValue }),
            };
        }
        DataType::Array(ArrayElemTypeDef::AngleBracket(inner) | ArrayElemTypeDef::SquareBracket(inner, _) | ArrayElemTypeDef::Parenthesis(inner)) => {
            float_as_postgres(inner)?;
        }
        _ => {}
    }
    Ok(())
}

/// `statement` in the spellings DataFusion plans (see the module
/// documentation).
pub fn rewrite(statement: &mut Statement) -> FoamResult<()> {
    let mut spellings = Spellings { error: None };
    let _ = statement.visit(&mut spellings);
    spellings.error.map_or(Ok(()), Err)
}

struct Spellings {
    error: Option<FoamError>,
}

impl VisitorMut for Spellings {
    type Break = ();

    fn pre_visit_statement(&mut self, statement: &mut Statement) -> ControlFlow<()> {
        // `PREPARE p(float) AS ...`: its parameters' types too.
        if let Statement::Prepare { data_types, .. } = statement
            && let Err(error) = data_types.iter_mut().try_for_each(float_as_postgres)
        {
            self.error = Some(error);
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        match fetch_as_limit(query) {
            Ok(()) => ControlFlow::Continue(()),
            Err(error) => {
                self.error = Some(error);
                ControlFlow::Break(())
            }
        }
    }

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        let cast_to = match expr {
            Expr::Cast { data_type, .. } => Some(data_type),
            Expr::TypedString(typed) => Some(&mut typed.data_type),
            _ => None,
        };
        if let Some(data_type) = cast_to
            && let Err(error) = float_as_postgres(data_type)
        {
            self.error = Some(error);
            return ControlFlow::Break(());
        }
        if let Some(local) = local_time(expr) {
            *expr = local;
            return ControlFlow::Continue(());
        }
        if let Expr::Extract { field, expr: source, .. } = expr {
            // `EXTRACT('epoch' FROM x)` names its field in quotes.
            let name = match field {
                datafusion::sql::sqlparser::ast::DateTimeField::Custom(ident) => ident.value.clone(),
                other => other.to_string(),
            };
            let field = Expr::Value(Value::SingleQuotedString(name.to_lowercase()).into());
            *expr = call(crate::exec::extract::EXTRACT, vec![field, (**source).clone()], Vec::new());
            return ControlFlow::Continue(());
        }
        if let Some([field, source]) = arguments_of(expr, "date_part").as_deref()
            && let Expr::Value(value) = field
            && let Value::SingleQuotedString(_) = &value.value
        {
            *expr = call(crate::exec::extract::DATE_PART, vec![(*field).clone(), (*source).clone()], Vec::new());
            return ControlFlow::Continue(());
        }
        match make_interval_positional(expr) {
            Ok(()) => {}
            Err(error) => {
                self.error = Some(error);
                return ControlFlow::Break(());
            }
        }
        if let Some([dividend, divisor]) = arguments_of(expr, "mod").as_deref() {
            let nested = |e: &Expr| Box::new(Expr::Nested(Box::new(e.clone())));
            *expr = Expr::Nested(Box::new(Expr::BinaryOp { left: nested(dividend), op: BinaryOperator::Modulo, right: nested(divisor) }));
        } else if let Expr::Function(function) = expr
            && matches!(function.name.0.as_slice(), [part] if part.as_ident().is_some_and(|f| f.value.eq_ignore_ascii_case("json_agg")))
            && let FunctionArguments::List(list) = &function.args
            && let [FunctionArg::Unnamed(FunctionArgExpr::Expr(_))] = list.args.as_slice()
        {
            // Its DISTINCT, ORDER BY, FILTER and OVER stay on array_agg.
            function.name = ObjectName::from(vec![Ident::new("array_agg")]);
            *expr = call(crate::exec::json_build::JSON_ARRAY, vec![expr.clone()], Vec::new());
        } else if let Expr::Function(function) = expr
            && matches!(function.name.0.as_slice(), [part] if part.as_ident().is_some_and(|f| f.value.eq_ignore_ascii_case("json_object_agg")))
            && let FunctionArguments::List(list) = &mut function.args
            && let [FunctionArg::Unnamed(FunctionArgExpr::Expr(key)), FunctionArg::Unnamed(FunctionArgExpr::Expr(value))] = list.args.as_slice()
        {
            // One list of pairs: two lists could sort ties differently.
            let pair = call("struct", vec![key.clone(), value.clone()], Vec::new());
            list.args = vec![FunctionArg::Unnamed(FunctionArgExpr::Expr(pair))];
            function.name = ObjectName::from(vec![Ident::new("array_agg")]);
            *expr = call(crate::exec::json_build::JSON_OBJECT, vec![expr.clone()], Vec::new());
        }
        ControlFlow::Continue(())
    }
}

/// `LOCALTIMESTAMP` and `LOCALTIME` (without a precision) as the
/// session's local time now.
fn local_time(expr: &Expr) -> Option<Expr> {
    let Expr::Function(function) = expr else { return None };
    let [part] = function.name.0.as_slice() else { return None };
    let name = part.as_ident()?.value.to_lowercase();
    let data_type = match name.as_str() {
        "localtimestamp" => DataType::Timestamp(None, TimezoneInfo::None),
        "localtime" => DataType::Time(None, TimezoneInfo::None),
        _ => return None,
    };
    if !matches!(function.args, FunctionArguments::None) {
        return None;
    }
    Some(Expr::Cast { kind: CastKind::Cast, expr: Box::new(call("now", Vec::new(), Vec::new())), data_type, array: false, format: None })
}

/// `make_interval(days => 10)` as its seven arguments in place, the ones
/// not given 0 (PostgreSQL's defaults); a name it does not have is 42883.
fn make_interval_positional(expr: &mut Expr) -> FoamResult<()> {
    use crate::exec::interval_functions::MAKE_INTERVAL_ARGUMENTS;
    let Expr::Function(function) = expr else { return Ok(()) };
    let named = matches!(function.name.0.as_slice(), [part] if part.as_ident().is_some_and(|f| f.value.eq_ignore_ascii_case("make_interval")));
    let FunctionArguments::List(list) = &mut function.args else { return Ok(()) };
    if !named || list.args.len() == MAKE_INTERVAL_ARGUMENTS.len() && list.args.iter().all(|a| matches!(a, FunctionArg::Unnamed(_))) {
        return Ok(());
    }
    let zero = |at: usize| Expr::value(Value::Number(if at == MAKE_INTERVAL_ARGUMENTS.len() - 1 { "0.0" } else { "0" }.into(), false));
    let mut placed: Vec<Option<Expr>> = vec![None; MAKE_INTERVAL_ARGUMENTS.len()];
    let unknown = |what: String| FoamError::Query { message: format!("function make_interval({what}) does not exist"), sqlstate: SqlState::UndefinedFunction };
    for (position, arg) in list.args.iter().enumerate() {
        let (at, value) = match arg {
            FunctionArg::Unnamed(FunctionArgExpr::Expr(value)) => (position, value),
            FunctionArg::Named { name, arg: FunctionArgExpr::Expr(value), .. } | FunctionArg::ExprNamed { name: Expr::Identifier(name), arg: FunctionArgExpr::Expr(value), .. } => {
                let at = MAKE_INTERVAL_ARGUMENTS.iter().position(|n| n.eq_ignore_ascii_case(&name.value)).ok_or_else(|| unknown(format!("{} => ...", name.value)))?;
                (at, value)
            }
            other => return Err(unknown(other.to_string())),
        };
        let slot = placed.get_mut(at).ok_or_else(|| unknown(format!("{} arguments", list.args.len())))?;
        *slot = Some(value.clone());
    }
    list.args = placed.into_iter().enumerate().map(|(at, value)| FunctionArg::Unnamed(FunctionArgExpr::Expr(value.unwrap_or_else(|| zero(at))))).collect();
    Ok(())
}

/// `query`'s `FETCH FIRST n ROWS ONLY` as its LIMIT.
fn fetch_as_limit(query: &mut Query) -> FoamResult<()> {
    let Some(fetch) = query.fetch.take() else { return Ok(()) };
    if fetch.with_ties {
        return Err(FoamError::Query { message: "FETCH ... WITH TIES is not supported".into(), sqlstate: SqlState::FeatureNotSupported });
    }
    if fetch.percent {
        return Err(FoamError::Query { message: "syntax error at or near \"PERCENT\"".into(), sqlstate: SqlState::SyntaxError });
    }
    let rows = fetch.quantity.unwrap_or_else(|| Expr::value(Value::Number("1".into(), false)));
    match &mut query.limit_clause {
        None => query.limit_clause = Some(LimitClause::LimitOffset { limit: Some(rows), offset: None, limit_by: Vec::new() }),
        Some(LimitClause::LimitOffset { limit: limit @ None, .. }) => *limit = Some(rows),
        Some(_) => return Err(FoamError::Query { message: "multiple LIMIT clauses not allowed".into(), sqlstate: SqlState::SyntaxError }),
    }
    Ok(())
}

/// The arguments of `expr` when it is a plain call of `name` (not a window,
/// not filtered, each argument unnamed).
fn arguments_of<'a>(expr: &'a Expr, name: &str) -> Option<Vec<&'a Expr>> {
    let Expr::Function(function) = expr else { return None };
    let named = matches!(function.name.0.as_slice(), [part] if part.as_ident().is_some_and(|f| f.value.eq_ignore_ascii_case(name)));
    if !named || function.over.is_some() || function.filter.is_some() {
        return None;
    }
    let FunctionArguments::List(list) = &function.args else { return None };
    if list.duplicate_treatment.is_some() || !list.clauses.is_empty() {
        return None;
    }
    list.args.iter().map(|arg| match arg { FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Some(e), _ => None }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;

    fn rewritten(sql: &str) -> FoamResult<String> {
        let mut statement = Parser::parse_sql(&PostgreSqlDialect {}, sql).unwrap().pop().unwrap();
        rewrite(&mut statement)?;
        Ok(statement.to_string())
    }

    #[test]
    fn fetch_first_is_a_limit_and_mod_a_remainder() {
        assert_eq!(rewritten("SELECT a FROM t ORDER BY a OFFSET 2 ROWS FETCH FIRST 3 ROWS ONLY").unwrap(), "SELECT a FROM t ORDER BY a LIMIT 3 OFFSET 2 ROWS");
        assert_eq!(rewritten("SELECT a FROM t FETCH NEXT ROW ONLY").unwrap(), "SELECT a FROM t LIMIT 1");
        assert_eq!(rewritten("SELECT mod(a, 4) FROM (SELECT mod(-7, 3) AS a) s").unwrap(), "SELECT ((a) % (4)) FROM (SELECT ((-7) % (3)) AS a) s");
        assert_eq!(rewritten("SELECT a FROM t FETCH FIRST 2 ROWS WITH TIES").unwrap_err().sqlstate(), SqlState::FeatureNotSupported);
        assert_eq!(rewritten("SELECT make_interval(days => 10, secs => 1.5), make_interval(1)").unwrap(), "SELECT make_interval(0, 0, 0, 10, 0, 0, 1.5), make_interval(1, 0, 0, 0, 0, 0, 0.0)");
        assert_eq!(rewritten("SELECT make_interval(hour => 1)").unwrap_err().sqlstate(), SqlState::UndefinedFunction);
        assert_eq!(
            rewritten("SELECT json_agg(DISTINCT a ORDER BY a) FILTER (WHERE a > 1) FROM t").unwrap(),
            "SELECT foam_json_array(array_agg(DISTINCT a ORDER BY a) FILTER (WHERE a > 1)) FROM t"
        );
    }

    #[test]
    fn float_is_double_precision_as_in_postgresql() {
        assert_eq!(
            rewritten("SELECT 1::float, CAST(2 AS FLOAT(24)), 3::float(25), FLOAT '4', ARRAY[5]::float[], 6::real").unwrap(),
            "SELECT 1::DOUBLE PRECISION, CAST(2 AS REAL), 3::DOUBLE PRECISION, DOUBLE PRECISION '4', ARRAY[5]::DOUBLE PRECISION[], 6::REAL"
        );
        assert_eq!(rewritten("PREPARE p(float, int) AS SELECT $1 / 3").unwrap(), "PREPARE p (DOUBLE PRECISION, INT) AS SELECT $1 / 3");
        assert_eq!(rewritten("SELECT 1::float(54)").unwrap_err().sqlstate(), SqlState::InvalidParameterValue);
    }

    #[test]
    fn extract_and_date_part_are_foams() {
        assert_eq!(
            rewritten("SELECT EXTRACT(EPOCH FROM t), extract(second FROM t), date_part('seconds', t), date_part('year', t), extract('Epoch' FROM t) FROM x").unwrap(),
            "SELECT foam_extract('epoch', t), foam_extract('second', t), foam_date_part('seconds', t), foam_date_part('year', t), foam_extract('epoch', t) FROM x"
        );
    }
}
