//! `current_setting(name [, missing_ok])` and `set_config(name, value,
//! is_local)`: the functions drivers, ORMs and pg_dump call to read and
//! change a session's settings (asyncpg reads `current_setting` to introspect
//! types; pg_dump starts with `SELECT pg_catalog.set_config('search_path',
//! '', false)`).
//!
//! The SQL keywords that name the session's role and database,
//! `current_user`, `session_user`, `current_role`, `user`,
//! `current_catalog` and `current_schema`, are evaluated the same way (they
//! are reserved words in PostgreSQL, never column names).
//!
//! Settings live in the session, not in DataFusion, so the calls are
//! evaluated when the statement is planned, as PostgreSQL evaluates stable
//! functions once per statement, and each is replaced by its text result.
//! Literal arguments are read then; a `current_setting` of a parameter is
//! a choice among the settings as they are then (`current_setting_of_expr`);
//! a `set_config` of a column is left
//! to [`set_config_of_rows_udf`], which gets 0A000 as soon as a row would
//! call it rather than a value read at the wrong time, and answers no rows
//! where there are none to call it for: pg_dump 15 sends `SELECT
//! set_config(name, 'view, foreign-table', false) FROM pg_settings WHERE
//! name = 'restrict_nonsystem_relation_kind'`, a setting FoamDB does not
//! have.

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    Expr, FunctionArg, FunctionArgExpr, FunctionArguments, Ident, Query, SelectItem, SetExpr, Statement, Value, VisitMut, VisitorMut,
    visit_expressions_mut,
};
use foam_common::{FoamError, FoamResult};

/// The setting holding the session's role, as `SHOW session_authorization` gives it.
pub const SESSION_AUTHORIZATION: &str = "session_authorization";

/// The one database of a cluster, as clients connect to it.
pub const DATABASE_NAME: &str = "foam";

/// The schema unqualified names resolve in.
pub const SCHEMA_NAME: &str = "public";

/// What the functions read and change: the session's settings.
pub trait SessionSettings {
    /// The value `SHOW name` gives; 42704 for an unknown setting.
    fn get(&self, name: &str) -> FoamResult<String>;
    /// `SET name = value`, or with `local` `SET LOCAL` (until the block
    /// ends; nothing outside a block).
    fn set(&self, name: String, value: String, local: bool) -> FoamResult<()>;
    /// The names `get` knows.
    fn names(&self) -> Vec<String>;
}

/// Whether `statement` calls `set_config`, which changes a setting as the
/// statement is planned.
pub fn calls_set_config(statement: &Statement) -> bool {
    datafusion::sql::sqlparser::ast::visit_expressions(statement, |expr| match call_of(expr) {
        Some((_, Call::SetConfig(_))) => ControlFlow::Break(()),
        _ => ControlFlow::Continue(()),
    })
    .is_break()
}

/// Replaces every `current_setting` and `set_config` call in `statement`
/// by its result, applying `set_config`'s change on the way.
pub fn evaluate(statement: &mut Statement, settings: &dyn SessionSettings) -> FoamResult<()> {
    // A select list's column keeps the function's or keyword's name, as in
    // PostgreSQL (and two of them do not clash as equal literals would).
    let _ = statement.visit(&mut ColumnNamer);
    let outcome = visit_expressions_mut(statement, |expr| {
        let result = match call_of(expr) {
            Some((_, Call::SetConfig(args))) if literal_args(args, "set_config").is_err() => return ControlFlow::Continue(()),
            Some((_, Call::CurrentSetting(args))) if literal_args(args, "current_setting").is_err() => {
                match current_setting_of_expr(args, settings) {
                    Ok(rewritten) => {
                        *expr = rewritten;
                        return ControlFlow::Continue(());
                    }
                    Err(error) => return ControlFlow::Break(error),
                }
            }
            Some((_, call)) => value_of(call, settings),
            None => return ControlFlow::Continue(()),
        };
        match result {
            Ok(value) => {
                *expr = Expr::Value(value.map_or(Value::Null, Value::SingleQuotedString).into());
                ControlFlow::Continue(())
            }
            Err(error) => ControlFlow::Break(error),
        }
    });
    match outcome {
        ControlFlow::Break(error) => Err(error),
        ControlFlow::Continue(()) => Ok(()),
    }
}

/// Names the select-list items [`evaluate`] replaces after what they call.
struct ColumnNamer;

impl VisitorMut for ColumnNamer {
    type Break = ();

    fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        name_columns(query.body.as_mut());
        ControlFlow::Continue(())
    }
}

fn name_columns(body: &mut SetExpr) {
    match body {
        SetExpr::Select(select) => {
            // DataFusion refuses a name twice in one list where PostgreSQL
            // allows it: a repeated one gets `_2`, `_3`, as select_names.rs does.
            let mut used: std::collections::HashSet<String> = std::collections::HashSet::new();
            for item in &mut select.projection {
                if let SelectItem::UnnamedExpr(expr) = item
                    && let Some((name, _)) = call_of(expr)
                {
                    let unique = (1..).map(|n| if n == 1 { name.clone() } else { format!("{name}_{n}") }).find(|n| !used.contains(n));
                    let unique = unique.unwrap_or(name);
                    used.insert(unique.clone());
                    *item = SelectItem::ExprWithAlias { expr: expr.clone(), alias: Ident::new(unique) };
                }
            }
        }
        SetExpr::SetOperation { left, right, .. } => {
            name_columns(left);
            name_columns(right);
        }
        _ => {}
    }
}

/// What [`evaluate`] replaces.
enum Call<'a> {
    CurrentSetting(&'a FunctionArguments),
    SetConfig(&'a FunctionArguments),
    /// A keyword naming the session's role, database or schema.
    Keyword(Keyword),
}

enum Keyword {
    /// `current_user`, `current_role`, `user`: the role statements run as.
    Role,
    /// `session_user`: the role the client connected as.
    SessionUser,
    Database,
    Schema,
}

/// The call `expr` is, with the name PostgreSQL gives its column; `None`
/// for any other expression. Quoted or qualified words are names.
fn call_of(expr: &Expr) -> Option<(String, Call<'_>)> {
    match expr {
        Expr::Function(function) => {
            let word = function.name.0.last()?.as_ident()?.value.to_lowercase();
            let call = match (word.as_str(), &function.args) {
                ("current_setting", args) => Call::CurrentSetting(args),
                ("set_config", args) => Call::SetConfig(args),
                (_, FunctionArguments::None) if function.name.0.len() == 1 => Call::Keyword(keyword(&word)?),
                ("current_schema", FunctionArguments::List(list)) if list.args.is_empty() => Call::Keyword(Keyword::Schema),
                _ => return None,
            };
            Some((word, call))
        }
        Expr::Identifier(ident) if ident.quote_style.is_none() => {
            let word = ident.value.to_lowercase();
            let keyword = keyword(&word)?;
            Some((word, Call::Keyword(keyword)))
        }
        _ => None,
    }
}

fn keyword(word: &str) -> Option<Keyword> {
    match word {
        "current_user" | "current_role" | "user" => Some(Keyword::Role),
        "session_user" => Some(Keyword::SessionUser),
        "current_catalog" => Some(Keyword::Database),
        "current_schema" => Some(Keyword::Schema),
        _ => None,
    }
}

/// What `call` answers (NULL as `None`), changing settings as it says.
fn value_of(call: Call<'_>, settings: &dyn SessionSettings) -> FoamResult<Option<String>> {
    match call {
        Call::CurrentSetting(args) => current_setting(&literal_args(args, "current_setting")?, settings),
        Call::SetConfig(args) => set_config(&literal_args(args, "set_config")?, settings),
        // `SET ROLE`'s role, else the session's.
        Call::Keyword(Keyword::Role) => match settings.get("role") {
            Ok(role) if role != "none" => Ok(Some(role)),
            _ => settings.get(SESSION_AUTHORIZATION).map(Some),
        },
        Call::Keyword(Keyword::SessionUser) => settings.get(SESSION_AUTHORIZATION).map(Some),
        Call::Keyword(Keyword::Database) => Ok(Some(DATABASE_NAME.to_string())),
        Call::Keyword(Keyword::Schema) => Ok(Some(SCHEMA_NAME.to_string())),
    }
}

/// A literal argument: text, or a boolean.
enum Arg {
    Text(String),
    Bool(bool),
}

fn literal_args(args: &FunctionArguments, function: &str) -> FoamResult<Vec<Arg>> {
    let FunctionArguments::List(list) = args else { return Ok(Vec::new()) };
    list.args
        .iter()
        .map(|arg| match arg {
            FunctionArg::Unnamed(FunctionArgExpr::Expr(Expr::Value(value))) => match &value.value {
                Value::Placeholder(_) => Err(FoamError::FeatureNotSupported { feature: format!("{function}() of a parameter ({value})") }),
                Value::SingleQuotedString(text) => Ok(Arg::Text(text.clone())),
                Value::Boolean(flag) => Ok(Arg::Bool(*flag)),
                other => Ok(Arg::Text(other.to_string())),
            },
            other => Err(FoamError::FeatureNotSupported { feature: format!("{function}() of a non-literal argument ({other})") }),
        })
        .collect()
}

fn text(args: &[Arg], index: usize, function: &str) -> FoamResult<String> {
    match args.get(index) {
        Some(Arg::Text(text)) => Ok(text.clone()),
        Some(Arg::Bool(flag)) => Ok(flag.to_string()),
        None => Err(wrong_arguments(function)),
    }
}

fn flag(args: &[Arg], index: usize, function: &str) -> FoamResult<bool> {
    match args.get(index) {
        Some(Arg::Bool(flag)) => Ok(*flag),
        Some(Arg::Text(text)) => match text.to_lowercase().as_str() {
            "true" | "t" | "on" | "yes" | "1" => Ok(true),
            "false" | "f" | "off" | "no" | "0" => Ok(false),
            _ => Err(FoamError::Query {
                message: format!("invalid input syntax for type boolean: \"{text}\""),
                sqlstate: foam_common::SqlState::InvalidTextRepresentation,
            }),
        },
        None => Err(wrong_arguments(function)),
    }
}

fn wrong_arguments(function: &str) -> FoamError {
    let takes = if function == "set_config" { "(text, text, boolean)" } else { "(text) or (text, boolean)" };
    FoamError::Query { message: format!("function {function} takes {takes}"), sqlstate: foam_common::SqlState::UndefinedFunction }
}

/// `set_config` as a function of rows, for the calls [`evaluate`] leaves
/// (a non-literal argument): refused (0A000) when any row calls it.
pub fn set_config_of_rows_udf() -> datafusion::logical_expr::ScalarUDF {
    use datafusion::arrow::datatypes::DataType;
    use datafusion::logical_expr::{ColumnarValue, Volatility, create_udf};
    let refuse = |args: &[ColumnarValue]| {
        let rows = args.iter().map(|arg| match arg {
            ColumnarValue::Array(array) => array.len(),
            ColumnarValue::Scalar(_) => 1,
        });
        if rows.max().unwrap_or(1) == 0 {
            return Ok(ColumnarValue::Array(datafusion::arrow::array::new_empty_array(&DataType::Utf8)));
        }
        Err(FoamError::FeatureNotSupported { feature: "set_config() of a non-literal argument".into() }.into())
    };
    create_udf("set_config", vec![DataType::Utf8, DataType::Utf8, DataType::Boolean], DataType::Utf8, Volatility::Volatile, std::sync::Arc::new(refuse))
}

/// `current_setting(name)`, or NULL for an unknown one with `missing_ok`.
fn current_setting(args: &[Arg], settings: &dyn SessionSettings) -> FoamResult<Option<String>> {
    if !(1..=2).contains(&args.len()) {
        return Err(wrong_arguments("current_setting"));
    }
    let name = text(args, 0, "current_setting")?.to_lowercase();
    let missing_ok = args.len() == 2 && flag(args, 1, "current_setting")?;
    match settings.get(&name) {
        Err(error) if missing_ok && error.sqlstate() == "42704" => Ok(None),
        other => other.map(Some),
    }
}

/// `current_setting(e [, missing_ok])` of a name that is not a literal (a
/// bound parameter: psycopg 3 binds SQLAlchemy's `current_setting(%s)`):
/// a choice among the session's settings as they are now, made when the
/// statement runs; a name it does not know is 42704 there
/// (`foam_unknown_setting`), or NULL with `missing_ok`.
fn current_setting_of_expr(args: &FunctionArguments, settings: &dyn SessionSettings) -> FoamResult<Expr> {
    let FunctionArguments::List(list) = args else { return Err(wrong_arguments("current_setting")) };
    let exprs = crate::frontend::plain_arguments(list);
    let (name, missing_ok) = match exprs.as_slice() {
        [name] if list.args.len() == 1 => (name, false),
        [name, Expr::Value(flag)] if list.args.len() == 2 => match flag.value {
            Value::Boolean(flag) => (name, flag),
            _ => return Err(FoamError::FeatureNotSupported { feature: format!("current_setting() of a non-literal argument ({})", flag) }),
        },
        [_, other] => return Err(FoamError::FeatureNotSupported { feature: format!("current_setting() of a non-literal argument ({other})") }),
        _ => return Err(wrong_arguments("current_setting")),
    };
    let quote = |text: &str| format!("'{}'", text.replace('\'', "''"));
    let mut sql = format!("CASE lower(CAST(({name}) AS TEXT))");
    for setting in settings.names() {
        if let Ok(value) = settings.get(&setting) {
            sql.push_str(&format!(" WHEN {} THEN {}", quote(&setting), quote(&value)));
        }
    }
    let otherwise = if missing_ok { "CAST(NULL AS TEXT)".to_string() } else { format!("{UNKNOWN_SETTING}(CAST(({name}) AS TEXT))") };
    sql.push_str(&format!(" ELSE {otherwise} END"));
    datafusion::sql::sqlparser::parser::Parser::new(&datafusion::sql::sqlparser::dialect::PostgreSqlDialect {})
        .try_with_sql(&sql)
        .and_then(|mut parser| parser.parse_expr())
        .map_err(|error| FoamError::internal(format!("current_setting rewrite: {error}")))
}

/// The function a [`current_setting_of_expr`] choice calls for a name the
/// session does not know: 42704, as `current_setting` answers.
pub const UNKNOWN_SETTING: &str = "foam_unknown_setting";

/// `foam_unknown_setting(name)` (see [`UNKNOWN_SETTING`]).
pub fn unknown_setting_udf() -> datafusion::logical_expr::ScalarUDF {
    use datafusion::arrow::datatypes::DataType;
    use datafusion::logical_expr::{ColumnarValue, Volatility, create_udf};
    let refuse = |args: &[ColumnarValue]| -> datafusion::common::Result<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(args)?;
        let names = datafusion::common::cast::as_string_array(&arrays[0])?;
        match names.iter().flatten().next() {
            Some(name) => Err(datafusion::error::DataFusionError::from(FoamError::Query {
                message: format!("unrecognized configuration parameter \"{name}\""),
                sqlstate: foam_common::SqlState::UndefinedObject,
            })),
            None => Ok(ColumnarValue::Scalar(datafusion::common::ScalarValue::Utf8(None))),
        }
    };
    create_udf(UNKNOWN_SETTING, vec![DataType::Utf8], DataType::Utf8, Volatility::Immutable, std::sync::Arc::new(refuse))
}

/// `set_config(name, value, is_local)`: the value set, as `SET` or (with
/// `is_local`) `SET LOCAL` would set it.
fn set_config(args: &[Arg], settings: &dyn SessionSettings) -> FoamResult<Option<String>> {
    if args.len() != 3 {
        return Err(wrong_arguments("set_config"));
    }
    let (name, value, local) = (text(args, 0, "set_config")?.to_lowercase(), text(args, 1, "set_config")?, flag(args, 2, "set_config")?);
    settings.set(name, value.clone(), local)?;
    Ok(Some(value))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::collections::BTreeMap;

    struct Fake(RefCell<BTreeMap<String, String>>, bool);

    impl SessionSettings for Fake {
        fn names(&self) -> Vec<String> {
            self.0.borrow().keys().cloned().collect()
        }
        fn get(&self, name: &str) -> FoamResult<String> {
            self.0.borrow().get(name).cloned().ok_or_else(|| FoamError::Query {
                message: format!("unrecognized configuration parameter \"{name}\""),
                sqlstate: foam_common::SqlState::UndefinedObject,
            })
        }
        fn set(&self, name: String, value: String, local: bool) -> FoamResult<()> {
            // As the session: a local change outside a block changes nothing.
            if !local || self.1 {
                self.0.borrow_mut().insert(name, value);
            }
            Ok(())
        }
    }

    fn rewrite(sql: &str, settings: &Fake) -> FoamResult<String> {
        let dialect = datafusion::sql::sqlparser::dialect::PostgreSqlDialect {};
        let mut statement = datafusion::sql::sqlparser::parser::Parser::parse_sql(&dialect, sql).unwrap().remove(0);
        evaluate(&mut statement, settings)?;
        Ok(statement.to_string())
    }

    #[test]
    fn settings_are_read_and_changed_as_the_statement_is_planned() {
        let settings = Fake(RefCell::new(BTreeMap::from([("datestyle".to_string(), "ISO, MDY".to_string())])), false);
        assert_eq!(rewrite("SELECT current_setting('DateStyle') AS d", &settings).unwrap(), "SELECT 'ISO, MDY' AS d");
        assert_eq!(rewrite("SELECT pg_catalog.current_setting('nope', true)", &settings).unwrap(), "SELECT NULL AS current_setting");
        assert_eq!(rewrite("SELECT current_setting('nope')", &settings).unwrap_err().sqlstate(), "42704");
        assert_eq!(rewrite("SELECT pg_catalog.set_config('search_path', '', false)", &settings).unwrap(), "SELECT '' AS set_config");
        assert_eq!(settings.get("search_path").unwrap(), "");
        // A local change outside a block changes nothing.
        assert_eq!(rewrite("SELECT set_config('application_name', 'x', true) = 'x'", &settings).unwrap(), "SELECT 'x' = 'x'");
        assert!(settings.get("application_name").is_err());
        // A name that is not a literal is chosen among the settings when
        // the statement runs; a missing_ok that is not one is refused.
        assert_eq!(
            rewrite("SELECT current_setting($1)", &settings).unwrap(),
            "SELECT CASE lower(CAST(($1) AS TEXT)) WHEN 'datestyle' THEN 'ISO, MDY' WHEN 'search_path' THEN '' ELSE foam_unknown_setting(CAST(($1) AS TEXT)) END AS current_setting"
        );
        assert!(rewrite("SELECT current_setting(t.name, true) FROM t", &settings).unwrap().contains("ELSE CAST(NULL AS TEXT) END"));
        assert_eq!(rewrite("SELECT current_setting(t.name, t.ok) FROM t", &settings).unwrap_err().sqlstate(), "0A000");
        // Arguments are as many as the function takes.
        assert_eq!(rewrite("SELECT set_config('a', 'b')", &settings).unwrap_err().sqlstate(), "42883");
        assert_eq!(rewrite("SELECT set_config('a', 'b', 'maybe')", &settings).unwrap_err().sqlstate(), "22P02");
    }

    #[test]
    fn keywords_name_the_session_role_and_database_but_quoted_names_are_columns() {
        let settings = Fake(RefCell::new(BTreeMap::from([(SESSION_AUTHORIZATION.to_string(), "alice".to_string())])), false);
        assert_eq!(
            rewrite("SELECT current_user, session_user, CURRENT_ROLE, user, current_catalog, current_schema, current_schema()", &settings).unwrap(),
            "SELECT 'alice' AS current_user, 'alice' AS session_user, 'alice' AS current_role, 'alice' AS user, 'foam' AS current_catalog, \
             'public' AS current_schema, 'public' AS current_schema_2"
        );
        assert_eq!(rewrite("SELECT \"user\", t.current_user FROM t", &settings).unwrap(), "SELECT \"user\", t.current_user FROM t");
    }
}
