//! `CREATE SEQUENCE` and `DROP SEQUENCE`, and the sequences behind `SERIAL`
//! columns and identity columns (`GENERATED { ALWAYS | BY DEFAULT } AS
//! IDENTITY`), which PostgreSQL makes as it creates their table: a sequence
//! named `<table>_<column>_seq`, owned by the column, and the column's
//! default `nextval('<sequence>')`. The catalog keeps sequences
//! (foam-catalog `sequences.rs`); the functions that draw from them are in
//! `exec/sequences.rs`.

use datafusion::sql::sqlparser::ast::{DataType, Expr, ObjectName, Owner, SequenceOptions, Statement, UnaryOperator, Value};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::parser::{Parser, ParserError};
use datafusion::sql::sqlparser::tokenizer::{Token, TokenWithSpan};
use foam_catalog::sequences::{self, SequenceDef};
pub use foam_catalog::sequences::{nextval_default, quoted_name};
use foam_catalog::{CatalogCommand, SqlType};
use foam_common::{FoamError, FoamResult, SqlState};

use crate::frontend::ddl;
use crate::frontend::statement::keyword_is;

/// A `SERIAL`-family type name: the integer type the column gets.
pub fn serial_type(data_type: &DataType) -> Option<SqlType> {
    match data_type.to_string().to_lowercase().as_str() {
        "serial" | "serial4" => Some(SqlType::Int),
        "bigserial" | "serial8" => Some(SqlType::BigInt),
        "smallserial" | "serial2" => Some(SqlType::SmallInt),
        _ => None,
    }
}

/// The largest value of an integer type a sequence can feed; 42P16 for any
/// other type, as PostgreSQL refuses an identity column of it.
pub fn type_max(sql_type: &SqlType, column: &str) -> FoamResult<i64> {
    match sql_type {
        SqlType::SmallInt => Ok(i64::from(i16::MAX)),
        SqlType::Int => Ok(i64::from(i32::MAX)),
        SqlType::BigInt => Ok(i64::MAX),
        other => Err(FoamError::Query {
            message: format!("identity column type must be smallint, integer, or bigint (column \"{column}\" is {})", other.sql_name()),
            sqlstate: SqlState::InvalidTableDefinition,
        }),
    }
}

/// The sequence a `SERIAL` or identity column `column` of `table` draws from.
pub fn column_sequence(table: &str, column: &str, sql_type: &SqlType, options: &[SequenceOptions]) -> FoamResult<SequenceDef> {
    let mut sequence = SequenceDef::new(&sequence_name_for(table, column, ""), parsed_options(options)?, type_max(sql_type, column)?)?;
    sequence.owned_by = Some((table.to_string(), column.to_string()));
    Ok(sequence)
}

/// `<table>_<column>_seq<suffix>` as PostgreSQL makes it: the longer of the
/// table and column parts shortened until the name fits in
/// `IDENTIFIER_BYTES_MAX` bytes.
fn sequence_name_for(table: &str, column: &str, suffix: &str) -> String {
    let (mut table, mut column) = (table.to_string(), column.to_string());
    let label = format!("seq{suffix}");
    while table.len() + column.len() + label.len() + 2 > foam_common::limits::IDENTIFIER_BYTES_MAX {
        let longer = if table.len() >= column.len() { &mut table } else { &mut column };
        longer.pop();
    }
    format!("{table}_{column}_{label}")
}

/// The first of `<table>_<column>_seq`, `<table>_<column>_seq1`, ... not
/// `taken`, as PostgreSQL names the sequence of a SERIAL or identity column.
pub fn free_name(table: &str, column: &str, taken: impl Fn(&str) -> bool) -> String {
    let mut name = sequence_name_for(table, column, "");
    let mut n = 0;
    while taken(&name) {
        n += 1;
        name = sequence_name_for(table, column, &n.to_string());
    }
    name
}

/// The sequences a CREATE TABLE makes renamed, as PostgreSQL does, where
/// their names are taken (`t_id_seq1`, `t_id_seq2`, ...), the columns'
/// defaults with them.
pub fn choose_names(command: &mut CatalogCommand, taken: impl Fn(&str) -> bool) {
    let CatalogCommand::CreateTable { columns, sequences, .. } = command else { return };
    let mut chosen: Vec<String> = Vec::new();
    for sequence in sequences.iter_mut() {
        let Some((table, column)) = sequence.owned_by.clone() else { continue };
        let name = free_name(&table, &column, |name| taken(name) || chosen.iter().any(|c| c == name));
        if name != sequence.name {
            if let Some(def) = columns.iter_mut().find(|c| c.name == column) {
                def.default = Some(nextval_default(&name));
            }
            sequence.name = name.clone();
        }
        chosen.push(name);
    }
}

/// The catalog command of `CREATE SEQUENCE` or `DROP SEQUENCE name[, ...]`
/// (one command per name); `None` for any other statement.
pub fn commands(statement: &Statement, owner: &str) -> FoamResult<Option<Vec<CatalogCommand>>> {
    match statement {
        Statement::CreateSequence { temporary, if_not_exists, name, data_type, sequence_options, owned_by } => {
            if *temporary {
                return Err(FoamError::FeatureNotSupported { feature: "CREATE TEMPORARY SEQUENCE".into() });
            }
            let sql_type = match data_type {
                Some(data_type) => ddl::parse_sql_type(&data_type.to_string()).map_err(|message| FoamError::Query {
                    message: format!("sequence type {data_type}: {message}"),
                    sqlstate: SqlState::InvalidParameterValue,
                })?,
                None => SqlType::BigInt,
            };
            let name = ddl::table_name(name)?;
            let mut sequence = SequenceDef::new(&name, parsed_options(sequence_options)?, type_max(&sql_type, &name)?)?;
            sequence.acl.owner = Some(owner.to_string());
            if let Some(owned_by) = owned_by.as_ref().filter(|o| !o.to_string().eq_ignore_ascii_case("none")) {
                sequence.owned_by = Some(owning_column(owned_by)?);
            }
            Ok(Some(vec![CatalogCommand::CreateSequence { sequence, if_not_exists: *if_not_exists }]))
        }
        Statement::Drop { object_type: datafusion::sql::sqlparser::ast::ObjectType::Sequence, if_exists, names, .. } => {
            let mut commands = Vec::with_capacity(names.len());
            for name in names {
                commands.push(CatalogCommand::DropSequence { name: ddl::table_name(name)?, if_exists: *if_exists });
            }
            Ok(Some(commands))
        }
        _ => Ok(None),
    }
}

/// What `ALTER SEQUENCE` changes, in the forms FoamDB runs.
#[derive(Debug, Clone, PartialEq)]
pub enum SequenceChange {
    /// `OWNED BY table.column | NONE`.
    OwnedBy(Option<(String, String)>),
    /// `OWNER TO role`.
    OwnerTo(Owner),
    /// Its parameters: `AS`, `INCREMENT`, `[NO] MINVALUE`, `[NO] MAXVALUE`,
    /// `START`, `RESTART`, `CACHE`, `[NO] CYCLE`, in any order.
    Alter(sequences::SequenceAlter),
}

/// `ALTER SEQUENCE [IF EXISTS] name OWNED BY table.column | OWNED BY NONE |
/// OWNER TO role | parameters`, parsed from its tokens (the SQL parser has
/// no ALTER SEQUENCE): the sequence, IF EXISTS and the change.
pub fn alter_sequence(tokens: Vec<TokenWithSpan>) -> FoamResult<(String, bool, SequenceChange)> {
    let syntax = |e: ParserError| FoamError::Syntax { message: e.to_string().trim_start_matches("sql parser error: ").to_string() };
    let mut parser = Parser::new(&PostgreSqlDialect {}).with_tokens_with_locations(tokens);
    parser.expect_keywords(&[Keyword::ALTER, Keyword::SEQUENCE]).map_err(syntax)?;
    let if_exists = parser.parse_keywords(&[Keyword::IF, Keyword::EXISTS]);
    let name = ddl::table_name(&parser.parse_object_name(false).map_err(syntax)?)?;
    let change = if parser.parse_keywords(&[Keyword::OWNED, Keyword::BY]) {
        SequenceChange::OwnedBy(match parser.parse_keyword(Keyword::NONE) {
            true => None,
            false => Some(owning_column(&parser.parse_object_name(false).map_err(syntax)?)?),
        })
    } else if parser.parse_keywords(&[Keyword::OWNER, Keyword::TO]) {
        SequenceChange::OwnerTo(parser.parse_owner().map_err(syntax)?)
    } else {
        let mut alter = sequences::SequenceAlter::default();
        let number = |parser: &mut Parser| -> FoamResult<i64> { integer(&parser.parse_number().map_err(syntax)?) };
        let mut given: Vec<&str> = Vec::new();
        loop {
            let option = if parser.parse_keyword(Keyword::AS) {
                let data_type = parser.parse_data_type().map_err(syntax)?;
                let sql_type = ddl::parse_sql_type(&data_type.to_string())
                    .map_err(|message| FoamError::Query { message: format!("sequence type {data_type}: {message}"), sqlstate: SqlState::InvalidParameterValue })?;
                alter.type_max = Some(type_max(&sql_type, &name)?);
                "AS"
            } else if parser.parse_keyword(Keyword::INCREMENT) {
                let _ = parser.parse_keyword(Keyword::BY);
                alter.increment = Some(number(&mut parser)?);
                "INCREMENT"
            } else if parser.parse_keywords(&[Keyword::NO, Keyword::MINVALUE]) {
                alter.min = Some(sequences::Setting::Default);
                "MINVALUE"
            } else if parser.parse_keywords(&[Keyword::NO, Keyword::MAXVALUE]) {
                alter.max = Some(sequences::Setting::Default);
                "MAXVALUE"
            } else if parser.parse_keywords(&[Keyword::NO, Keyword::CYCLE]) {
                alter.cycle = Some(false);
                "CYCLE"
            } else if parser.parse_keyword(Keyword::MINVALUE) {
                alter.min = Some(sequences::Setting::To(number(&mut parser)?));
                "MINVALUE"
            } else if parser.parse_keyword(Keyword::MAXVALUE) {
                alter.max = Some(sequences::Setting::To(number(&mut parser)?));
                "MAXVALUE"
            } else if parser.parse_keyword(Keyword::START) {
                let _ = parser.parse_keyword(Keyword::WITH);
                alter.start = Some(number(&mut parser)?);
                "START"
            } else if parser.parse_keyword(Keyword::RESTART) {
                let with = parser.parse_keyword(Keyword::WITH);
                let value = matches!(parser.peek_token().token, Token::Number(..) | Token::Minus | Token::Plus) || with;
                alter.restart = Some(if value { sequences::Setting::To(number(&mut parser)?) } else { sequences::Setting::Default });
                "RESTART"
            } else if parser.parse_keyword(Keyword::CACHE) {
                alter.cache = Some(number(&mut parser)?);
                "CACHE"
            } else if parser.parse_keyword(Keyword::CYCLE) {
                alter.cycle = Some(true);
                "CYCLE"
            } else {
                break;
            };
            // As PostgreSQL: an option given twice is an error, not the last one winning.
            if given.contains(&option) {
                return Err(FoamError::Syntax { message: format!("conflicting or redundant options ({option} given twice)") });
            }
            given.push(option);
        }
        if alter == sequences::SequenceAlter::default() {
            return Err(FoamError::FeatureNotSupported {
                feature: format!("ALTER SEQUENCE ... {} (FoamDB changes a sequence's parameters, OWNED BY and owner)", parser.peek_token()),
            });
        }
        SequenceChange::Alter(alter)
    };
    match parser.peek_token().token {
        Token::EOF => Ok((name, if_exists, change)),
        other => Err(FoamError::Syntax { message: format!("syntax error at or near \"{other}\" in ALTER SEQUENCE") }),
    }
}

/// Takes `SEQUENCE NAME name` out of the options of `AS IDENTITY (...)`
/// (pg_dump writes it in `ALTER TABLE ... ADD GENERATED`), which the SQL
/// parser does not read: the sequence's name, if given. Parentheses left
/// empty go too.
pub fn take_sequence_name(tokens: &mut Vec<TokenWithSpan>) -> FoamResult<Option<String>> {
    let significant = |tokens: &[TokenWithSpan], from: usize| (from..tokens.len()).find(|&i| !matches!(tokens[i].token, Token::Whitespace(_)));
    let Some(&open) = identity_option_lists(tokens).first() else { return Ok(None) };
    let mut at = open + 1;
    while let Some(word) = significant(tokens, at) {
        if tokens[word].token == Token::RParen {
            break;
        }
        let next = significant(tokens, word + 1);
        if !(keyword_is(&tokens[word].token, "sequence") && next.is_some_and(|n| keyword_is(&tokens[n].token, "name"))) {
            at = word + 1;
            continue;
        }
        // The name: words joined by periods.
        let mut parts = Vec::new();
        let mut end = next.unwrap_or(word);
        loop {
            let Some(part) = significant(tokens, end + 1) else { break };
            let Token::Word(w) = &tokens[part].token else { break };
            parts.push(w.to_ident(tokens[part].span));
            end = part;
            match significant(tokens, end + 1) {
                Some(period) if tokens[period].token == Token::Period => end = period,
                _ => break,
            }
        }
        if parts.is_empty() {
            return Err(FoamError::Syntax { message: "a sequence name is missing after SEQUENCE NAME".into() });
        }
        let name = ddl::table_name(&ObjectName::from(parts))?;
        tokens.drain(word..=end);
        if let Some(close) = significant(tokens, open + 1).filter(|&i| tokens[i].token == Token::RParen) {
            tokens.drain(open..=close);
        }
        return Ok(Some(name));
    }
    Ok(None)
}

/// `OWNED BY table.column`.
fn owning_column(name: &ObjectName) -> FoamResult<(String, String)> {
    let parts: Vec<String> = name.0.iter().filter_map(|p| p.as_ident()).map(|i| ddl::normalize_ident(&i.value, i.quote_style)).collect();
    match parts.as_slice() {
        [.., table, column] => Ok((table.clone(), column.clone())),
        _ => Err(FoamError::Query { message: "invalid OWNED BY option (specify OWNED BY table.column or OWNED BY NONE)".into(), sqlstate: SqlState::InvalidParameterValue }),
    }
}

fn parsed_options(options: &[SequenceOptions]) -> FoamResult<sequences::SequenceOptions> {
    let mut parsed = sequences::SequenceOptions::default();
    for option in options {
        match option {
            SequenceOptions::IncrementBy(n, _) => parsed.increment = Some(integer(n)?),
            SequenceOptions::MinValue(n) => parsed.min = n.as_ref().map(integer).transpose()?,
            SequenceOptions::MaxValue(n) => parsed.max = n.as_ref().map(integer).transpose()?,
            SequenceOptions::StartWith(n, _) => parsed.start = Some(integer(n)?),
            SequenceOptions::Cache(n) => parsed.cache = Some(integer(n)?),
            SequenceOptions::Cycle(no) => parsed.cycle = !no,
        }
    }
    Ok(parsed)
}

/// An integer literal, signed.
fn integer(expr: &Expr) -> FoamResult<i64> {
    let invalid = || FoamError::Query { message: format!("sequence option {expr} is not an integer"), sqlstate: SqlState::InvalidParameterValue };
    match expr {
        Expr::Value(value) => match &value.value {
            Value::Number(n, _) => n.parse().map_err(|_| invalid()),
            _ => Err(invalid()),
        },
        Expr::UnaryOp { op: UnaryOperator::Minus, expr } => integer(expr)?.checked_neg().ok_or_else(invalid),
        Expr::UnaryOp { op: UnaryOperator::Plus, expr } => integer(expr),
        _ => Err(invalid()),
    }
}

/// The options of `CREATE SEQUENCE` (`tokens` of the whole statement), and
/// those of identity columns in CREATE TABLE (`AS IDENTITY (...)`), put in
/// the one order the SQL parser reads them in (AS, INCREMENT, MINVALUE,
/// MAXVALUE, START, CACHE, CYCLE, OWNED BY); PostgreSQL takes any order,
/// and pg_dump writes `START WITH` before `INCREMENT BY`.
pub fn order_options(tokens: &mut Vec<TokenWithSpan>) {
    let is_sequence = tokens.iter().filter(|t| !matches!(t.token, Token::Whitespace(_))).nth(1).is_some_and(|t| keyword_is(&t.token, "sequence"));
    if is_sequence {
        let end = tokens.iter().rposition(|t| !matches!(t.token, Token::Whitespace(_) | Token::SemiColon)).map_or(tokens.len(), |i| i + 1);
        if let Some(ordered) = ordered_clauses(&tokens[..end], 3) {
            tokens.splice(..end, ordered);
        }
        return;
    }
    // `AS IDENTITY ( options )` in CREATE or ALTER TABLE, the last first so
    // that reordering one leaves the places of those before it.
    for open in identity_option_lists(tokens).into_iter().rev() {
        let mut depth = 0;
        let close = (open..tokens.len()).find(|&i| {
            match tokens[i].token {
                Token::LParen => depth += 1,
                Token::RParen => depth -= 1,
                _ => {}
            }
            depth == 0
        });
        if let Some(close) = close
            && let Some(ordered) = ordered_clauses(&tokens[open + 1..close], 0)
        {
            tokens.splice(open + 1..close, ordered);
        }
    }
}

/// Where each `AS IDENTITY (` option list opens: the `(`'s place (a table
/// or column may be named `identity`; only the word after `AS` counts).
fn identity_option_lists(tokens: &[TokenWithSpan]) -> Vec<usize> {
    let words: Vec<usize> = (0..tokens.len()).filter(|&i| !matches!(tokens[i].token, Token::Whitespace(_))).collect();
    words
        .windows(3)
        .filter(|w| keyword_is(&tokens[w[0]].token, "as") && keyword_is(&tokens[w[1]].token, "identity") && tokens[w[2]].token == Token::LParen)
        .map(|w| w[2])
        .collect()
}

/// `tokens` with their option clauses (after the first `skip` significant
/// tokens) in the parser's order; `None` when they are in it already.
fn ordered_clauses(tokens: &[TokenWithSpan], skip: usize) -> Option<Vec<TokenWithSpan>> {
    const CLAUSES: [&str; 8] = ["as", "increment", "minvalue", "maxvalue", "start", "cache", "cycle", "owned"];
    let rank = |word: &Token, next: Option<&Token>| -> Option<usize> {
        let named = if keyword_is(word, "no") { next? } else { word };
        CLAUSES.iter().position(|c| keyword_is(named, c))
    };
    let significant: Vec<usize> = (0..tokens.len()).filter(|&i| !matches!(tokens[i].token, Token::Whitespace(_))).collect();
    // Clause starts: an option keyword, or NO before one, at the top level.
    let mut starts: Vec<(usize, usize)> = Vec::new();
    let mut depth = 0;
    let mut after_no = false;
    let mut after_name_part = false;
    for (at, &i) in significant.iter().enumerate().skip(skip) {
        match &tokens[i].token {
            Token::LParen => depth += 1,
            Token::RParen => depth -= 1,
            // A word after `.` or `BY` is a name (`OWNED BY t.start`).
            word if depth == 0 && !after_no && !after_name_part => {
                let next = significant.get(at + 1).map(|&n| &tokens[n].token);
                if let Some(r) = rank(word, next) {
                    starts.push((i, r));
                }
            }
            _ => {}
        }
        after_no = keyword_is(&tokens[i].token, "no");
        after_name_part = tokens[i].token == Token::Period || keyword_is(&tokens[i].token, "by");
    }
    if starts.windows(2).all(|w| w[0].1 <= w[1].1) {
        return None;
    }
    let mut clauses: Vec<(usize, Vec<TokenWithSpan>)> = Vec::with_capacity(starts.len());
    for (n, &(start, r)) in starts.iter().enumerate() {
        let stop = starts.get(n + 1).map_or(tokens.len(), |next| next.0);
        clauses.push((r, tokens[start..stop].to_vec()));
    }
    clauses.sort_by_key(|(r, _)| *r);
    let mut ordered: Vec<TokenWithSpan> = tokens[..starts[0].0].to_vec();
    for (_, mut clause) in clauses {
        if !matches!(clause.last().map(|t| &t.token), Some(Token::Whitespace(_))) {
            clause.push(TokenWithSpan::wrap(Token::Whitespace(datafusion::sql::sqlparser::tokenizer::Whitespace::Space)));
        }
        ordered.extend(clause);
    }
    Some(ordered)
}

/// `nextval('s'::regclass)` (pg_dump's form of a SERIAL default) as
/// `nextval('s')`: the sequence functions take the name as text, and a
/// cast to `regclass` would look it up among tables.
pub fn names_as_text(statement: &mut Statement) {
    use datafusion::sql::sqlparser::ast::{FunctionArg, FunctionArgExpr, FunctionArguments, VisitMut, VisitorMut};
    struct Strip;
    impl VisitorMut for Strip {
        type Break = ();
        fn pre_visit_expr(&mut self, expr: &mut Expr) -> std::ops::ControlFlow<()> {
            let Expr::Function(function) = expr else { return std::ops::ControlFlow::Continue(()) };
            if !matches!(function_name(function).as_deref(), Some("nextval" | "currval" | "setval")) {
                return std::ops::ControlFlow::Continue(());
            }
            if let FunctionArguments::List(list) = &mut function.args
                && let Some(FunctionArg::Unnamed(FunctionArgExpr::Expr(first))) = list.args.first_mut()
                && let Some(inner) = through_regclass(first)
            {
                *first = inner.clone();
            }
            std::ops::ControlFlow::Continue(())
        }
    }
    let _ = statement.visit(&mut Strip);
}

/// A function's name, lower-cased, without its schema.
fn function_name(function: &datafusion::sql::sqlparser::ast::Function) -> Option<String> {
    function.name.0.last().and_then(|p| p.as_ident()).map(|i| i.value.to_lowercase())
}

/// What `expr` casts to `regclass`, if it is such a cast.
fn through_regclass(expr: &Expr) -> Option<&Expr> {
    match expr {
        Expr::Cast { expr, data_type, .. } if data_type.to_string().eq_ignore_ascii_case("regclass") => Some(expr),
        _ => None,
    }
}

/// The sequence a default draws from when it is just `nextval('name')`
/// (`::regclass` or not), as SERIAL and identity columns have it.
pub fn nextval_of(default: &str) -> Option<String> {
    use datafusion::sql::sqlparser::ast::{FunctionArg, FunctionArgExpr, FunctionArguments};
    let Ok(Expr::Function(function)) = crate::frontend::column_defaults::parse_expr(default) else { return None };
    let FunctionArguments::List(list) = &function.args else { return None };
    let ([FunctionArg::Unnamed(FunctionArgExpr::Expr(argument))], Some("nextval")) = (list.args.as_slice(), function_name(&function).as_deref()) else {
        return None;
    };
    match through_regclass(argument).unwrap_or(argument) {
        Expr::Value(value) => match &value.value {
            Value::SingleQuotedString(name) => Some(crate::exec::sequences::sequence_name(name)),
            _ => None,
        },
        _ => None,
    }
}
