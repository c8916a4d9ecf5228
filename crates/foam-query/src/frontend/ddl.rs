//! FoamDB's DDL dialect on top of PostgreSQL's: the `DISTRIBUTED BY (cols)
//! [PARTITIONS n]` / `DISTRIBUTED REPLICATED` clause of CREATE TABLE, which the
//! SQL parser does not know, is cut from the statement's tokens here
//! (`statement.rs` splits them); the parsed CREATE TABLE and the clause
//! become a catalog command.

use datafusion::sql::sqlparser::ast::{AlterTableOperation, ColumnOption, Expr, GeneratedAs, ObjectName, Statement, TableConstraint};
use datafusion::sql::sqlparser::tokenizer::{Token, TokenWithSpan};
use foam_catalog::model::{DistributionSpec, Identity, UniqueKeyDef};
use foam_catalog::types::DECIMAL_PRECISION_MAX;
use foam_catalog::{CatalogCommand, ColumnDef, SqlType};
use foam_common::{FoamError, FoamResult, SqlState};

use crate::frontend::sequence_ddl;
use crate::frontend::statement::keyword_is;

/// Where a top-level `DISTRIBUTED ...` / `PARTITIONS n` tail of CREATE
/// TABLE tokens starts, and what it says; `None` without one.
pub(crate) fn distribution_clause(tokens: &[TokenWithSpan]) -> FoamResult<Option<(usize, DistributionSpec)>> {
    let mut depth = 0i32;
    let mut start = None;
    for (index, token) in tokens.iter().map(|t| &t.token).enumerate() {
        match token {
            Token::LParen => depth += 1,
            Token::RParen => depth -= 1,
            _ if depth == 0
                && (keyword_is(token, "distributed") || keyword_is(token, "partitions") || keyword_is(token, "replicas")) =>
            {
                start = Some(index);
                break;
            }
            _ => {}
        }
    }
    let Some(start) = start else {
        return Ok(None);
    };
    let clause: Vec<Token> = tokens[start..].iter().map(|t| &t.token).filter(|t| !matches!(t, Token::Whitespace(_))).cloned().collect();
    Ok(Some((start, parse_distribution(&clause)?)))
}

fn parse_distribution(clause: &[Token]) -> FoamResult<DistributionSpec> {
    let syntax = |what: &str| FoamError::Syntax {
        message: format!(
            "{what} in distribution clause; expected DISTRIBUTED BY (column, ...) [PARTITIONS n] [REPLICAS n] or DISTRIBUTED REPLICATED"
        ),
    };
    let mut position = 0;
    let mut key_columns = Vec::new();
    let mut replicated = false;
    if clause.first().is_some_and(|t| keyword_is(t, "distributed")) {
        match clause.get(1) {
            Some(t) if keyword_is(t, "replicated") => {
                replicated = true;
                position = 2;
            }
            Some(t) if keyword_is(t, "by") => {
                if clause.get(2) != Some(&Token::LParen) {
                    return Err(syntax("missing ( after DISTRIBUTED BY"));
                }
                position = 3;
                loop {
                    match clause.get(position) {
                        Some(Token::Word(word)) => key_columns.push(normalize_ident(&word.value, word.quote_style)),
                        _ => return Err(syntax("expected a column name")),
                    }
                    position += 1;
                    match clause.get(position) {
                        Some(Token::Comma) => position += 1,
                        Some(Token::RParen) => {
                            position += 1;
                            break;
                        }
                        _ => return Err(syntax("expected , or )")),
                    }
                }
            }
            _ => return Err(syntax("expected BY or REPLICATED after DISTRIBUTED")),
        }
    }
    // `PARTITIONS n` then `REPLICAS n`, each optional, for hash tables only.
    let mut number_option = |keyword: &str| -> FoamResult<Option<u32>> {
        if !clause.get(position).is_some_and(|t| keyword_is(t, keyword)) {
            return Ok(None);
        }
        let name = keyword.to_uppercase();
        if replicated {
            return Err(syntax(&format!("{name} does not apply to a replicated table (it is on every node)")));
        }
        let value = match clause.get(position + 1) {
            Some(Token::Number(n, _)) => n.parse::<u32>().map_err(|_| syntax(&format!("{name} needs a whole number")))?,
            _ => return Err(syntax(&format!("{name} needs a whole number"))),
        };
        position += 2;
        Ok(Some(value))
    };
    let partitions = number_option("partitions")?;
    let replicas = number_option("replicas")?;
    if let Some(extra) = clause.get(position) {
        return Err(syntax(&format!("unexpected \"{extra}\"")));
    }
    Ok(if replicated { DistributionSpec::Replicated } else { DistributionSpec::Hash { key_columns, partitions, replicas } })
}

/// PostgreSQL folds unquoted identifiers to lower case.
pub fn normalize_ident(value: &str, quote_style: Option<char>) -> String {
    if quote_style.is_some() { value.to_string() } else { value.to_lowercase() }
}

/// The views that read a relation of `dropped`, directly or through
/// another such view, each with the relation it reads: what `DROP ...
/// CASCADE` drops too and what refuses a plain DROP, as PostgreSQL's
/// dependencies do. A view is its query's text, planned on every use, so
/// a view left behind would fail every query that lists the catalog's
/// columns (psql's `\d`, `information_schema.columns`). A view whose
/// text does not parse reads nothing here; one an open block set aside
/// (dropped, until the block ends) is gone already.
pub fn dependent_views(catalog: &foam_catalog::Catalog, dropped: &[String]) -> Vec<(String, String)> {
    let reads: Vec<(&String, Vec<String>)> = catalog
        .views
        .values()
        .filter(|view| !crate::frontend::block_ddl::is_set_aside(&view.name))
        .map(|view| (&view.name, crate::frontend::privileges::view_relations(view).unwrap_or_default()))
        .collect();
    let mut gone: Vec<String> = dropped.to_vec();
    let mut dependents = Vec::new();
    let mut found = true;
    while found {
        found = false;
        for (view, relations) in &reads {
            if gone.contains(view) {
                continue;
            }
            if let Some(on) = relations.iter().find(|r| gone.contains(r)) {
                dependents.push(((*view).clone(), on.clone()));
                gone.push((*view).clone());
                found = true;
            }
        }
    }
    dependents
}

/// The table name of a (possibly schema-qualified) object name.
pub fn table_name(name: &ObjectName) -> FoamResult<String> {
    let parts: Vec<String> = name
        .0
        .iter()
        .map(|part| match part.as_ident() {
            Some(ident) => Ok(normalize_ident(&ident.value, ident.quote_style)),
            None => Err(FoamError::Syntax { message: format!("unsupported name {part}") }),
        })
        .collect::<FoamResult<_>>()?;
    match parts.as_slice() {
        [table] => Ok(table.clone()),
        [schema, table] if schema == "public" => Ok(table.clone()),
        [catalog, schema, table] if schema == "public" && (catalog == "foam" || catalog == "datafusion") => Ok(table.clone()),
        _ => Err(FoamError::FeatureNotSupported {
            feature: format!("schema-qualified name {name} (FoamDB tables live in schema \"public\")"),
        }),
    }
}

/// Storage parameters (`WITH (...)`): `fillfactor`, PostgreSQL's share of
/// each heap page to fill, is accepted with PostgreSQL's range and changes
/// nothing, since FoamDB's segments are written whole and never updated in
/// place (pgbench declares it on every table). Any other parameter, and
/// any other kind of table option, gets 0A000.
fn check_storage_parameters(options: &datafusion::sql::sqlparser::ast::CreateTableOptions) -> FoamResult<()> {
    use datafusion::sql::sqlparser::ast::{CreateTableOptions, SqlOption, Value};
    let parameters = match options {
        CreateTableOptions::None => return Ok(()),
        CreateTableOptions::With(parameters) => parameters,
        other => return Err(FoamError::FeatureNotSupported { feature: format!("table options {other}") }),
    };
    for parameter in parameters {
        let SqlOption::KeyValue { key, value } = parameter else {
            return Err(FoamError::FeatureNotSupported { feature: format!("storage parameter {parameter}") });
        };
        if !key.value.eq_ignore_ascii_case("fillfactor") {
            return Err(FoamError::FeatureNotSupported { feature: format!("storage parameter \"{}\"", key.value) });
        }
        let percent = match value {
            Expr::Value(literal) => match &literal.value {
                Value::Number(number, _) => number.parse::<u32>().ok(),
                Value::SingleQuotedString(text) => text.parse::<u32>().ok(),
                _ => None,
            },
            _ => None,
        };
        if !percent.is_some_and(|p| (10..=100).contains(&p)) {
            return Err(FoamError::InvalidParameter { message: format!("value {value} out of bounds for option \"fillfactor\" (10 to 100)") });
        }
    }
    Ok(())
}

/// Turns a parsed CREATE TABLE into a catalog command; a CHECK it does
/// not name gets a name no constraint in `names_in_use` has, as
/// PostgreSQL avoids every constraint name of the schema.
pub fn create_table_command(statement: &Statement, distribution: Option<DistributionSpec>, names_in_use: &[String]) -> FoamResult<CatalogCommand> {
    let Statement::CreateTable(create) = statement else {
        return Err(FoamError::internal("create_table_command needs CREATE TABLE"));
    };
    if create.query.is_some() {
        return Err(FoamError::FeatureNotSupported { feature: "CREATE TABLE ... AS SELECT".into() });
    }
    if create.external || create.location.is_some() {
        return Err(FoamError::FeatureNotSupported { feature: "CREATE EXTERNAL TABLE".into() });
    }
    // Each of these would change what the table is; none may be dropped silently.
    let refused = [
        (create.temporary, "CREATE TEMPORARY TABLE"),
        (create.like.is_some() || create.clone.is_some(), "CREATE TABLE ... (LIKE ...)"),
        (create.inherits.is_some(), "CREATE TABLE ... INHERITS"),
        (create.partition_by.is_some() || create.partition_of.is_some(), "PostgreSQL table partitioning (use DISTRIBUTED BY)"),
        (create.on_commit.is_some(), "CREATE TABLE ... ON COMMIT"),
        (create.or_replace, "CREATE OR REPLACE TABLE"),
    ];
    if let Some((_, feature)) = refused.iter().find(|(used, _)| *used) {
        return Err(FoamError::FeatureNotSupported { feature: feature.to_string() });
    }
    check_storage_parameters(&create.table_options)?;
    let name = table_name(&create.name)?;
    let mut columns = Vec::with_capacity(create.columns.len());
    let mut unique_keys = Vec::new();
    let mut sequences = Vec::new();
    // CHECK constraints, named once every column is known, in the order
    // they are written (as PostgreSQL names them).
    let mut checks: Vec<(Option<String>, &Expr)> = Vec::new();
    for column in &create.columns {
        let column_name = normalize_ident(&column.name.value, column.name.quote_style);
        let serial = sequence_ddl::serial_type(&column.data_type);
        let sql_type = match &serial {
            Some(sql_type) => sql_type.clone(),
            None => parse_sql_type(&column.data_type.to_string()).map_err(|message| {
                FoamError::FeatureNotSupported { feature: format!("type {} of column \"{column_name}\" ({message})", column.data_type) }
            })?,
        };
        let mut nullable = true;
        let mut default = None;
        let mut identity = None;
        let mut draws_from = |options: &[datafusion::sql::sqlparser::ast::SequenceOptions], default: &mut Option<String>| -> FoamResult<()> {
            if default.is_some() {
                return Err(multiple_defaults(&column_name, &name));
            }
            let sequence = sequence_ddl::column_sequence(&name, &column_name, &sql_type, options)?;
            *default = Some(sequence_ddl::nextval_default(&sequence.name));
            sequences.push(sequence);
            Ok(())
        };
        if serial.is_some() {
            draws_from(&[], &mut default)?;
            nullable = false;
        }
        for option in &column.options {
            let named = option.name.as_ref().map(|n| normalize_ident(&n.value, n.quote_style));
            match &option.option {
                ColumnOption::NotNull => nullable = false,
                ColumnOption::Null => {}
                ColumnOption::PrimaryKey(_) => {
                    nullable = false;
                    let key_name = named.unwrap_or(format!("{name}_pkey"));
                    unique_keys.push(UniqueKeyDef { name: key_name, columns: vec![column_name.clone()], primary: true, validating: false });
                }
                ColumnOption::Unique(_) => {
                    let key_name = named.unwrap_or(format!("{name}_{column_name}_key"));
                    unique_keys.push(UniqueKeyDef { name: key_name, columns: vec![column_name.clone()], primary: false, validating: false });
                }
                ColumnOption::Default(expr) => {
                    crate::frontend::column_defaults::check(&column_name, expr)?;
                    if default.is_some() {
                        return Err(multiple_defaults(&column_name, &name));
                    }
                    default = Some(expr.to_string());
                }
                ColumnOption::Generated { generated_as: as_ @ (GeneratedAs::Always | GeneratedAs::ByDefault), sequence_options, generation_expr: None, .. } => {
                    draws_from(sequence_options.as_deref().unwrap_or_default(), &mut default)?;
                    nullable = false;
                    identity = Some(if matches!(as_, GeneratedAs::Always) { Identity::Always } else { Identity::ByDefault });
                }
                ColumnOption::Check(check) if check.enforced != Some(false) => {
                    let own = check.name.as_ref().map(|n| normalize_ident(&n.value, n.quote_style));
                    checks.push((named.or(own), &check.expr));
                }
                other => return Err(FoamError::FeatureNotSupported { feature: not_enforced(&format!("column option {other}")) }),
            }
        }
        columns.push(ColumnDef { name: column_name, sql_type, nullable, default, identity });
    }
    for constraint in &create.constraints {
        if let TableConstraint::Check(check) = constraint
            && check.enforced != Some(false)
        {
            checks.push((check.name.as_ref().map(|n| normalize_ident(&n.value, n.quote_style)), &check.expr));
            continue;
        }
        let key = key_of_constraint(&name, constraint)?;
        if key.primary {
            for column in columns.iter_mut().filter(|c| key.columns.contains(&c.name)) {
                column.nullable = false;
            }
        }
        unique_keys.push(key);
    }
    checks.sort_by_key(|(_, expr)| {
        let start = datafusion::sql::sqlparser::ast::Spanned::span(*expr).start;
        (start.line, start.column)
    });
    let mut taken: Vec<String> = unique_keys.iter().map(|k| k.name.clone()).chain(names_in_use.iter().cloned()).collect();
    let mut check_defs = Vec::with_capacity(checks.len());
    for (named, expr) in checks {
        let check = crate::frontend::check_constraints::check_def(&name, &columns, named, expr, &taken)?;
        taken.push(check.name.clone());
        check_defs.push(check);
    }
    let distribution = distribution.unwrap_or(DistributionSpec::Hash { key_columns: vec![], partitions: None, replicas: None });
    Ok(CatalogCommand::CreateTable {
        name,
        columns,
        distribution,
        if_not_exists: create.if_not_exists,
        unique_keys,
        owner: None,
        sequences,
        checks: check_defs,
    })
}

/// 42601 for a column given two defaults (`SERIAL ... DEFAULT 1`).
fn multiple_defaults(column: &str, table: &str) -> FoamError {
    FoamError::Query { message: format!("multiple default values specified for column \"{column}\" of table \"{table}\""), sqlstate: SqlState::SyntaxError }
}

/// A PRIMARY KEY or UNIQUE table constraint of table `table`, named as
/// PostgreSQL names it when the statement does not.
fn key_of_constraint(table: &str, constraint: &TableConstraint) -> FoamResult<UniqueKeyDef> {
    let (primary, named, key_columns) = match constraint {
        TableConstraint::PrimaryKey(key) => (true, key.name.as_ref(), &key.columns),
        TableConstraint::Unique(key) => (false, key.name.as_ref(), &key.columns),
        other => return Err(FoamError::FeatureNotSupported { feature: not_enforced(&format!("table constraint {other}")) }),
    };
    let mut names = Vec::with_capacity(key_columns.len());
    for key_column in key_columns {
        let Expr::Identifier(ident) = &key_column.column.expr else {
            return Err(FoamError::FeatureNotSupported { feature: format!("a key on the expression {}", key_column.column.expr) });
        };
        names.push(normalize_ident(&ident.value, ident.quote_style));
    }
    let default_name = if primary { format!("{table}_pkey") } else { format!("{table}_{}_key", names.join("_")) };
    let name = named.map(|n| normalize_ident(&n.value, n.quote_style)).unwrap_or(default_name);
    Ok(UniqueKeyDef { name, columns: names, primary, validating: false })
}

/// `ALTER TABLE [IF EXISTS] t ADD [CONSTRAINT name] PRIMARY KEY | UNIQUE
/// (columns)`, the one form of ALTER TABLE FoamDB runs: the table's name,
/// whether IF EXISTS was given, and the key. Any other form is refused.
pub fn alter_table_key(statement: &Statement) -> FoamResult<(String, bool, UniqueKeyDef)> {
    let Statement::AlterTable(alter) = statement else {
        return Err(FoamError::internal("alter_table_key needs ALTER TABLE"));
    };
    let table = table_name(&alter.name)?;
    match alter.operations.as_slice() {
        [AlterTableOperation::AddConstraint { constraint, not_valid: false }] => {
            let key = key_of_constraint(&table, constraint)?;
            Ok((table, alter.if_exists, key))
        }
        [AlterTableOperation::AddConstraint { not_valid: true, .. }] => {
            Err(FoamError::FeatureNotSupported { feature: "ADD CONSTRAINT ... NOT VALID".into() })
        }
        [operation] => Err(FoamError::FeatureNotSupported { feature: format!("ALTER TABLE ... {operation}") }),
        _ => Err(FoamError::FeatureNotSupported { feature: "ALTER TABLE with several actions".into() }),
    }
}

/// What `ALTER TABLE ... ALTER [COLUMN] c` changes, in the forms FoamDB runs.
#[derive(Debug, Clone, PartialEq)]
pub enum ColumnChange {
    /// `SET DEFAULT expr`: the expression's SQL text.
    SetDefault(String),
    DropDefault,
    /// `ADD GENERATED { ALWAYS | BY DEFAULT } AS IDENTITY [(options)]`.
    AddIdentity { identity: foam_catalog::model::Identity, options: Vec<datafusion::sql::sqlparser::ast::SequenceOptions> },
}

/// `ALTER TABLE [IF EXISTS] [ONLY] t ALTER [COLUMN] c SET DEFAULT expr |
/// DROP DEFAULT | ADD GENERATED ... AS IDENTITY` (pg_dump writes the first
/// and last): the table, IF EXISTS, the column and the change; `None` for
/// another statement. Another change of a column is refused.
pub fn alter_column(statement: &Statement) -> FoamResult<Option<(String, bool, String, ColumnChange)>> {
    use datafusion::sql::sqlparser::ast::AlterColumnOperation;
    let Statement::AlterTable(alter) = statement else { return Ok(None) };
    let [AlterTableOperation::AlterColumn { column_name, op }] = alter.operations.as_slice() else { return Ok(None) };
    let column = normalize_ident(&column_name.value, column_name.quote_style);
    let change = match op {
        AlterColumnOperation::SetDefault { value } => {
            crate::frontend::column_defaults::check(&column, value)?;
            ColumnChange::SetDefault(value.to_string())
        }
        AlterColumnOperation::DropDefault => ColumnChange::DropDefault,
        AlterColumnOperation::AddGenerated { generated_as, sequence_options } => ColumnChange::AddIdentity {
            identity: match generated_as {
                Some(GeneratedAs::ByDefault) => foam_catalog::model::Identity::ByDefault,
                _ => foam_catalog::model::Identity::Always,
            },
            options: sequence_options.clone().unwrap_or_default(),
        },
        other => return Err(FoamError::FeatureNotSupported { feature: format!("ALTER TABLE ... ALTER COLUMN ... {other}") }),
    };
    Ok(Some((table_name(&alter.name)?, alter.if_exists, column, change)))
}

/// `ALTER TABLE [IF EXISTS] relation OWNER TO role` (pg_dump writes one
/// for every table and view): the relation and the new owner, with
/// `CURRENT_USER`, `CURRENT_ROLE` and `SESSION_USER` read as `current_user`
/// and `session_user`; `None` for another ALTER TABLE. A missing relation
/// under IF EXISTS is left to the caller.
pub fn alter_owner(statement: &Statement, current_user: &str, session_user: &str) -> FoamResult<Option<(String, bool, String)>> {
    let Statement::AlterTable(alter) = statement else { return Ok(None) };
    let [AlterTableOperation::OwnerTo { new_owner }] = alter.operations.as_slice() else { return Ok(None) };
    Ok(Some((table_name(&alter.name)?, alter.if_exists, owner_named(new_owner, current_user, session_user))))
}

/// `ALTER SCHEMA public OWNER TO role` (pg_dump writes one): the role;
/// `None` for another statement. FoamDB has the one schema `public`: any
/// other is 3F000, any other change of a schema 0A000.
pub fn alter_schema_owner(statement: &Statement, current_user: &str, session_user: &str) -> FoamResult<Option<String>> {
    use datafusion::sql::sqlparser::ast::AlterSchemaOperation;
    let Statement::AlterSchema(alter) = statement else { return Ok(None) };
    let schema = alter.name.0.iter().filter_map(|part| part.as_ident()).map(|i| normalize_ident(&i.value, i.quote_style)).collect::<Vec<_>>().join(".");
    if schema != "public" {
        return Err(FoamError::Query { message: format!("schema \"{schema}\" does not exist"), sqlstate: SqlState::InvalidSchemaName });
    }
    match alter.operations.as_slice() {
        [AlterSchemaOperation::OwnerTo { owner }] => Ok(Some(owner_named(owner, current_user, session_user))),
        _ => Err(FoamError::FeatureNotSupported { feature: "ALTER SCHEMA other than OWNER TO".into() }),
    }
}

/// The role an `OWNER TO` names, with `CURRENT_USER`, `CURRENT_ROLE` and
/// `SESSION_USER` read as `current_user` and `session_user`.
pub(crate) fn owner_named(owner: &datafusion::sql::sqlparser::ast::Owner, current_user: &str, session_user: &str) -> String {
    use datafusion::sql::sqlparser::ast::Owner;
    match owner {
        Owner::Ident(ident) => normalize_ident(&ident.value, ident.quote_style),
        Owner::CurrentRole | Owner::CurrentUser => current_user.to_string(),
        Owner::SessionUser => session_user.to_string(),
    }
}

/// What FoamDB refuses rather than accept and ignore: a constraint it does
/// not check (a foreign key, an exclusion constraint) would let rows break
/// it unnoticed.
fn not_enforced(what: &str) -> String {
    format!("{what} (FoamDB enforces NOT NULL, PRIMARY KEY, UNIQUE and CHECK only, and does not accept a constraint it would not check)")
}

/// Parses a SQL type as the SQL parser prints it, e.g. `DECIMAL(15,2)`.
pub fn parse_sql_type(text: &str) -> Result<SqlType, String> {
    let lower = text.trim().to_lowercase();
    let (base, args) = match lower.find('(') {
        Some(open) => {
            let close = lower.rfind(')').ok_or("unbalanced parentheses")?;
            let args: Vec<i64> = lower[open + 1..close]
                .split(',')
                .map(|a| a.trim().parse::<i64>().map_err(|_| format!("bad type argument \"{}\"", a.trim())))
                .collect::<Result<_, _>>()?;
            (lower[..open].trim().to_string(), args)
        }
        None => (lower.clone(), Vec::new()),
    };
    let length = |args: &[i64], default: Option<u32>| -> Result<Option<u32>, String> {
        match args {
            [] => Ok(default),
            [n] if *n >= 1 && *n <= 10_485_760 => Ok(Some(*n as u32)),
            _ => Err("length must be between 1 and 10485760".into()),
        }
    };
    Ok(match base.as_str() {
        "boolean" | "bool" => SqlType::Boolean,
        "smallint" | "int2" => SqlType::SmallInt,
        "int" | "integer" | "int4" => SqlType::Int,
        "bigint" | "int8" => SqlType::BigInt,
        "real" | "float4" => SqlType::Real,
        // FLOAT(p) as PostgreSQL reads it: REAL up to 24 binary digits.
        "float" => match args.as_slice() {
            [] => SqlType::Double,
            [1..=24] => SqlType::Real,
            [25..=53] => SqlType::Double,
            _ => return Err("FLOAT's precision must be 1 to 53 bits".into()),
        },
        "double" | "double precision" | "float8" => SqlType::Double,
        "decimal" | "numeric" | "dec" => {
            let (precision, scale) = match args.as_slice() {
                [] => (DECIMAL_PRECISION_MAX as i64, 10),
                [p] => (*p, 0),
                [p, s] => (*p, *s),
                _ => return Err("DECIMAL takes at most two arguments".into()),
            };
            if precision < 1 || precision > DECIMAL_PRECISION_MAX as i64 || scale < 0 || scale > precision {
                return Err(format!("DECIMAL precision must be 1 to {DECIMAL_PRECISION_MAX} and scale 0 to precision"));
            }
            SqlType::Decimal { precision: precision as u8, scale: scale as i8 }
        }
        "varchar" | "character varying" | "char varying" => SqlType::Varchar { length_max: length(&args, None)? },
        "text" | "string" => SqlType::Text,
        "char" | "character" | "bpchar" => SqlType::Char { length: length(&args, Some(1))?.unwrap_or(1) },
        "date" => SqlType::Date,
        "timestamp" | "timestamp without time zone" | "datetime" => SqlType::Timestamp,
        "timestamptz" | "timestamp with time zone" => SqlType::TimestampTz,
        _ => return Err("supported types: BOOLEAN, SMALLINT, INT, BIGINT, REAL, DOUBLE PRECISION, DECIMAL(p,s), VARCHAR(n), TEXT, CHAR(n), DATE, TIMESTAMP, TIMESTAMPTZ".into()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sql_types_map() {
        assert_eq!(parse_sql_type("DECIMAL(15,2)"), Ok(SqlType::Decimal { precision: 15, scale: 2 }));
        assert_eq!(parse_sql_type("CHARACTER VARYING(25)"), Ok(SqlType::Varchar { length_max: Some(25) }));
        assert_eq!(parse_sql_type("char(10)"), Ok(SqlType::Char { length: 10 }));
        assert_eq!(parse_sql_type("DOUBLE PRECISION"), Ok(SqlType::Double));
        assert_eq!((parse_sql_type("FLOAT"), parse_sql_type("float(24)"), parse_sql_type("FLOAT(25)")), (Ok(SqlType::Double), Ok(SqlType::Real), Ok(SqlType::Double)));
        assert!(parse_sql_type("FLOAT(54)").is_err());
        assert!(parse_sql_type("DECIMAL(50,2)").is_err());
        assert!(parse_sql_type("INTERVAL").is_err());
    }
}
