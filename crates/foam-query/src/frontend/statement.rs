//! A query string parsed once: tokenized in one pass, split into statements
//! at top-level semicolons, and each statement parsed from its own tokens
//! into a [`FoamStatement`]. Planning starts from the parsed statement
//! (DataFusion's `statement_to_plan`), never from printed text.
//!
//! ```text
//!   "CREATE TABLE t (k INT) DISTRIBUTED BY (k); SELECT ...; CHECKPOINT"
//!     ─▶ tokens ─▶ split at `;` ─▶ one StatementTokens per statement
//!          (the DISTRIBUTED clause cut from CREATE TABLE's tokens, typed)
//!     ─▶ parse, statement by statement ─▶ FoamStatement::{Sql, AlterCluster, Role, Checkpoint, ...}
//! ```
//! Each statement is parsed when its turn comes, so a syntax error in a
//! later statement stops the string there, after the earlier ones ran.
//! Catalog queries from tools (`pg_...`) are the one exception to parsing
//! once: datafusion-pg-catalog's compatibility parser reads their text
//! again to rewrite PostgreSQL-only forms (`session.rs`).

use datafusion::sql::sqlparser::ast::{Ident, ObjectName, Statement};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;
use datafusion::sql::sqlparser::tokenizer::{Span, Token, TokenWithSpan, Tokenizer, Whitespace};
use foam_catalog::CatalogCommand;
use foam_catalog::model::DistributionSpec;
use foam_common::limits::EXPRESSION_DEPTH_MAX;
use foam_common::{FoamError, FoamResult, NodeId, SqlState};

use crate::frontend::{ddl, roles};

/// One statement of a query string: its tokens, not yet parsed.
#[derive(Debug, Clone)]
pub struct StatementTokens {
    /// With their places in the query string, for the parser's messages.
    tokens: Vec<TokenWithSpan>,
    /// The statement as the client wrote it, without a distribution clause
    /// (for messages and for the compatibility parser).
    pub text: String,
    /// A CREATE TABLE's `DISTRIBUTED ...` clause.
    pub distribution: Option<DistributionSpec>,
}

/// What a statement is to FoamDB.
#[derive(Debug, Clone)]
pub enum FoamStatement {
    /// Nothing but whitespace and comments.
    Empty,
    /// A statement in PostgreSQL's grammar; `distribution` is a CREATE
    /// TABLE's `DISTRIBUTED ...` clause.
    Sql { statement: Box<Statement>, distribution: Option<DistributionSpec> },
    /// `ALTER CLUSTER DRAIN NODE n` / `ALTER CLUSTER REMOVE NODE n`.
    AlterCluster(CatalogCommand),
    /// `CHECKPOINT`: every up node writes its memtables to segments.
    Checkpoint,
    /// `CREATE`, `ALTER` or `DROP ROLE` (`roles.rs`) and its command tag.
    Role { command: CatalogCommand, tag: &'static str },
    /// `VACUUM` or `ANALYZE` (the tag) of some tables (their names in the
    /// catalog), all when none is named.
    Maintenance { tag: &'static str, tables: Vec<String> },
    /// `ALTER SEQUENCE` (`sequence_ddl.rs`).
    AlterSequence { name: String, if_exists: bool, change: crate::frontend::sequence_ddl::SequenceChange },
    /// `ALTER TABLE ... ADD GENERATED ... AS IDENTITY (SEQUENCE NAME n, ...)`:
    /// the statement without the `SEQUENCE NAME` its parser cannot read,
    /// and that name.
    AddIdentity { statement: Box<Statement>, sequence: String },
}

/// Splits `sql` into statements at top-level semicolons, tokenizing it
/// once, and takes the distribution clause out of CREATE TABLE statements.
pub fn split(sql: &str) -> FoamResult<Vec<StatementTokens>> {
    let tokens =
        Tokenizer::new(&PostgreSqlDialect {}, sql).tokenize_with_location().map_err(|e| FoamError::Syntax { message: e.to_string() })?;
    let mut statements = Vec::new();
    let mut current: Vec<TokenWithSpan> = Vec::new();
    for token in tokens {
        if token.token == Token::SemiColon {
            push_statement(&mut statements, std::mem::take(&mut current))?;
        } else {
            current.push(token);
        }
    }
    push_statement(&mut statements, current)?;
    Ok(statements)
}

fn is_blank(token: &Token) -> bool {
    matches!(token, Token::Whitespace(_))
}

/// Whether `token` is the unquoted word `word`, in any case.
pub(crate) fn keyword_is(token: &Token, word: &str) -> bool {
    matches!(token, Token::Word(w) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case(word))
}

fn push_statement(statements: &mut Vec<StatementTokens>, mut tokens: Vec<TokenWithSpan>) -> FoamResult<()> {
    if tokens.iter().all(|t| is_blank(&t.token) || matches!(t.token, Token::Whitespace(Whitespace::SingleLineComment { .. }))) {
        return Ok(());
    }
    let mut significant = tokens.iter().map(|t| &t.token).filter(|t| !is_blank(t));
    let is_create_table =
        significant.next().is_some_and(|t| keyword_is(t, "create")) && significant.take(5).any(|t| keyword_is(t, "table"));
    let mut distribution = None;
    if is_create_table && let Some((start, clause)) = ddl::distribution_clause(&tokens)? {
        tokens.truncate(start);
        distribution = Some(clause);
    }
    let text: String = tokens.iter().map(|t| t.token.to_string()).collect();
    statements.push(StatementTokens { tokens, text: text.trim().to_string(), distribution });
    Ok(())
}

/// `VACUUM [FULL] [FREEZE] [VERBOSE] [ANALYZE] [(options)] [table [(columns)], ...]`
/// and `ANALYZE [VERBOSE] [(options)] [table [(columns)], ...]`: the tables
/// it names, by their normalized names.
fn maintenance(words: &[&Token]) -> FoamResult<FoamStatement> {
    const OPTIONS: &[&str] = &["full", "freeze", "verbose", "analyze", "analyse", "skip_locked"];
    let tag = if keyword_is(words[0], "vacuum") { "VACUUM" } else { "ANALYZE" };
    let mut tables = Vec::new();
    let mut name: Vec<Ident> = Vec::new();
    let mut depth = 0;
    let mut options_done = false;
    for word in &words[1..] {
        match word {
            Token::LParen => depth += 1,
            Token::RParen => depth -= 1,
            _ if depth > 0 => {}
            Token::Word(w) if !options_done && w.quote_style.is_none() && OPTIONS.contains(&w.value.to_lowercase().as_str()) => {}
            Token::Word(w) => {
                options_done = true;
                name.push(w.to_ident(Span::empty()));
            }
            Token::Period => {}
            Token::Comma => tables.push(ObjectName::from(std::mem::take(&mut name))),
            other => return Err(FoamError::Syntax { message: format!("syntax error at or near \"{other}\" in {tag}") }),
        }
    }
    if !name.is_empty() {
        tables.push(ObjectName::from(name));
    }
    if tables.iter().any(|t| t.0.is_empty()) {
        return Err(FoamError::Syntax { message: format!("a table name is missing in {tag}") });
    }
    let tables = tables.iter().map(ddl::table_name).collect::<FoamResult<_>>()?;
    Ok(FoamStatement::Maintenance { tag, tables })
}

/// PostgreSQL's COPY options take `on`/`off` for booleans (pgbench sends
/// `WITH (freeze on)`), which sqlparser reads only as `true`/`false`: an
/// `on` or `off` right after `FREEZE` or `HEADER` becomes that literal.
fn copy_booleans_as_literals(tokens: &mut [TokenWithSpan]) {
    let mut previous: Option<usize> = None;
    for index in 0..tokens.len() {
        if is_blank(&tokens[index].token) {
            continue;
        }
        let after_option = previous.is_some_and(|p| keyword_is(&tokens[p].token, "freeze") || keyword_is(&tokens[p].token, "header"));
        if after_option {
            if keyword_is(&tokens[index].token, "on") {
                tokens[index].token = Token::make_keyword("TRUE");
            } else if keyword_is(&tokens[index].token, "off") {
                tokens[index].token = Token::make_keyword("FALSE");
            }
        }
        previous = Some(index);
    }
}

impl StatementTokens {
    /// Parses the statement from its tokens; `recursion_limit` bounds the
    /// parser's nesting, as DataFusion's `sql_parser.recursion_limit` does.
    pub fn parse(self, recursion_limit: usize) -> FoamResult<FoamStatement> {
        let words: Vec<&Token> = self.tokens.iter().map(|t| &t.token).filter(|t| !is_blank(t)).collect();
        let depth = nesting_estimate(&words);
        if depth > EXPRESSION_DEPTH_MAX {
            return Err(FoamError::Query {
                message: format!(
                    "statement too complex: its expressions nest about {depth} levels deep, more than the {EXPRESSION_DEPTH_MAX} a statement may"
                ),
                sqlstate: SqlState::StatementTooComplex,
            });
        }
        if words.len() == 1 && keyword_is(words[0], "checkpoint") {
            return Ok(FoamStatement::Checkpoint);
        }
        if keyword_is(words[0], "vacuum") || keyword_is(words[0], "analyze") || keyword_is(words[0], "analyse") {
            return maintenance(&words);
        }
        if words.len() >= 2 && keyword_is(words[0], "alter") && keyword_is(words[1], "cluster") {
            return cluster_command(&words).map(FoamStatement::AlterCluster);
        }
        if words.len() >= 2 && keyword_is(words[0], "alter") && keyword_is(words[1], "sequence") {
            let (name, if_exists, change) = crate::frontend::sequence_ddl::alter_sequence(self.tokens)?;
            return Ok(FoamStatement::AlterSequence { name, if_exists, change });
        }
        if roles::is_role_membership(&words) {
            return Err(FoamError::FeatureNotSupported { feature: "GRANT or REVOKE of role membership (grant privileges on tables instead)".into() });
        }
        let is_role = roles::is_role_statement(&words);
        let is_copy = keyword_is(words[0], "copy");
        // CREATE SEQUENCE, or CREATE or ALTER TABLE with an identity column.
        let adds_identity = keyword_is(words[0], "alter") && words.iter().any(|w| keyword_is(w, "identity"));
        let has_sequence_options = adds_identity
            || keyword_is(words[0], "create")
                && (words.get(1).is_some_and(|w| keyword_is(w, "sequence")) || words.iter().any(|w| keyword_is(w, "identity")));
        let mut tokens = self.tokens;
        let sequence_name = if adds_identity { crate::frontend::sequence_ddl::take_sequence_name(&mut tokens)? } else { None };
        let user = is_role && roles::user_as_role(&mut tokens);
        if is_copy {
            copy_booleans_as_literals(&mut tokens);
        }
        if has_sequence_options {
            crate::frontend::sequence_ddl::order_options(&mut tokens);
        }
        let mut parsed = Parser::new(&PostgreSqlDialect {})
            .with_recursion_limit(recursion_limit)
            .with_tokens_with_locations(tokens)
            .parse_statements()
            .map_err(|e| FoamError::Syntax { message: e.to_string().trim_start_matches("sql parser error: ").to_string() })?;
        let statement = match (parsed.pop(), parsed.is_empty()) {
            (None, _) => return Ok(FoamStatement::Empty),
            (Some(statement), true) => statement,
            (Some(_), false) => return Err(FoamError::Syntax { message: "one statement expected between semicolons".into() }),
        };
        if is_role {
            let (command, tag) = roles::role_command(&statement, user)?;
            return Ok(FoamStatement::Role { command, tag });
        }
        if let Some(sequence) = sequence_name {
            return Ok(FoamStatement::AddIdentity { statement: Box::new(statement), sequence });
        }
        if self.distribution.is_some() && !matches!(statement, Statement::CreateTable(_)) {
            return Err(FoamError::Syntax { message: "DISTRIBUTED applies only to CREATE TABLE".into() });
        }
        Ok(FoamStatement::Sql { statement: Box::new(statement), distribution: self.distribution })
    }
}

/// An upper bound of how deep a statement's expressions nest, from its
/// tokens. The parser recurses, up to its recursion limit, for
/// parentheses and prefix operators, but builds a chain of infix
/// operators (`1 + 1 + ...`, `a AND b AND ...`, `x || y || ...`,
/// `UNION ...`) in a loop, one level deeper per operator: each operator
/// counts one level for the expression it is in, an expression ends at a
/// comma, and a parenthesis nests a new count inside its enclosing ones.
fn nesting_estimate(words: &[&Token]) -> usize {
    const OPERATOR_WORDS: [&str; 14] =
        ["and", "or", "not", "is", "like", "ilike", "similar", "between", "in", "union", "except", "intersect", "collate", "at"];
    let mut open: Vec<usize> = vec![0];
    let (mut enclosing, mut deepest) = (0usize, 0usize);
    for token in words {
        match token {
            Token::LParen | Token::LBracket | Token::LBrace => {
                enclosing += open.last().copied().unwrap_or(0) + 1;
                open.push(0);
            }
            Token::RParen | Token::RBracket | Token::RBrace => {
                if open.len() > 1 {
                    open.pop();
                    enclosing = enclosing.saturating_sub(open.last().copied().unwrap_or(0) + 1);
                }
            }
            Token::Comma => {
                if let Some(count) = open.last_mut() {
                    *count = 0;
                }
            }
            Token::Word(_) if !OPERATOR_WORDS.iter().any(|w| keyword_is(token, w)) => {}
            Token::Number(..) | Token::Period | Token::Placeholder(_) | Token::Whitespace(_) => {}
            token if is_literal(token) => {}
            _ => {
                if let Some(count) = open.last_mut() {
                    *count += 1;
                }
            }
        }
        deepest = deepest.max(enclosing + open.last().copied().unwrap_or(0));
    }
    deepest
}

/// Whether `token` is a string literal of any quoting.
fn is_literal(token: &Token) -> bool {
    matches!(
        token,
        Token::SingleQuotedString(_)
            | Token::DoubleQuotedString(_)
            | Token::TripleSingleQuotedString(_)
            | Token::TripleDoubleQuotedString(_)
            | Token::DollarQuotedString(_)
            | Token::SingleQuotedByteStringLiteral(_)
            | Token::DoubleQuotedByteStringLiteral(_)
            | Token::TripleSingleQuotedByteStringLiteral(_)
            | Token::TripleDoubleQuotedByteStringLiteral(_)
            | Token::SingleQuotedRawStringLiteral(_)
            | Token::DoubleQuotedRawStringLiteral(_)
            | Token::TripleSingleQuotedRawStringLiteral(_)
            | Token::TripleDoubleQuotedRawStringLiteral(_)
            | Token::NationalStringLiteral(_)
            | Token::EscapedStringLiteral(_)
            | Token::UnicodeStringLiteral(_)
            | Token::HexStringLiteral(_)
    )
}

/// `ALTER CLUSTER DRAIN NODE n` / `ALTER CLUSTER REMOVE NODE n`, from its
/// significant tokens, as a catalog command.
fn cluster_command(words: &[&Token]) -> FoamResult<CatalogCommand> {
    let syntax = || FoamError::Syntax { message: "expected ALTER CLUSTER DRAIN NODE n or ALTER CLUSTER REMOVE NODE n".into() };
    if words.len() != 5 || !keyword_is(words[3], "node") {
        return Err(syntax());
    }
    let id: NodeId = match words[4] {
        Token::Number(n, _) => n.parse().map_err(|_| syntax())?,
        _ => return Err(syntax()),
    };
    if keyword_is(words[2], "drain") {
        Ok(CatalogCommand::DrainNode { id })
    } else if keyword_is(words[2], "remove") {
        Ok(CatalogCommand::RemoveNode { id })
    } else {
        Err(syntax())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMIT: usize = 50;

    fn parse_all(sql: &str) -> FoamResult<Vec<FoamStatement>> {
        split(sql)?.into_iter().map(|s| s.parse(LIMIT)).collect()
    }

    #[test]
    fn a_statement_of_only_comments_is_empty() {
        // Dropped when split, so a statement parsed has a first word.
        for sql in ["-- nothing here", "/* nor here */", ";", " ; ;"] {
            assert_eq!(split(sql).unwrap().len(), 0, "{sql}");
        }
    }

    #[test]
    fn distribution_clause_is_cut_and_parsed() {
        let statements = split(
            "CREATE TABLE t (a INT, \"B\" TEXT) DISTRIBUTED BY (a, \"B\") PARTITIONS 6; select 1; \
             create table r (x int) distributed replicated",
        )
        .unwrap();
        assert_eq!(statements.len(), 3);
        assert_eq!(statements[0].text, "CREATE TABLE t (a INT, \"B\" TEXT)");
        assert_eq!(
            statements[0].distribution,
            Some(DistributionSpec::Hash { key_columns: vec!["a".into(), "B".into()], partitions: Some(6), replicas: None })
        );
        assert_eq!(statements[1].distribution, None);
        assert_eq!(statements[2].distribution, Some(DistributionSpec::Replicated));
        let parsed: Vec<FoamStatement> = statements.into_iter().map(|s| s.parse(LIMIT).unwrap()).collect();
        assert!(matches!(&parsed[0], FoamStatement::Sql { statement, distribution: Some(_) } if matches!(**statement, Statement::CreateTable(_))));
        assert!(matches!(&parsed[1], FoamStatement::Sql { statement, distribution: None } if matches!(**statement, Statement::Query(_))));
    }

    #[test]
    fn bad_distribution_clause_is_a_syntax_error() {
        for sql in [
            "CREATE TABLE t (a INT) DISTRIBUTED (a)",
            "CREATE TABLE t (a INT) DISTRIBUTED BY a",
            "CREATE TABLE t (a INT) DISTRIBUTED BY (a) PARTITIONS x",
            "CREATE TABLE t (a INT) DISTRIBUTED REPLICATED PARTITIONS 4",
            "CREATE TABLE t (a INT) DISTRIBUTED BY (a) extra",
        ] {
            let error = split(sql).unwrap_err();
            assert_eq!(error.sqlstate(), "42601", "{sql}");
        }
    }

    #[test]
    fn foam_statements_are_typed() {
        let parsed = parse_all("checkpoint; ALTER CLUSTER drain NODE 3; alter cluster REMOVE node 2; -- nothing\n").unwrap();
        assert!(matches!(parsed[0], FoamStatement::Checkpoint));
        assert!(matches!(parsed[1], FoamStatement::AlterCluster(CatalogCommand::DrainNode { id: 3 })));
        assert!(matches!(parsed[2], FoamStatement::AlterCluster(CatalogCommand::RemoveNode { id: 2 })));
        assert_eq!(parsed.len(), 3, "a trailing comment is no statement");
        for sql in ["ALTER CLUSTER DRAIN 3", "ALTER CLUSTER STOP NODE 3", "ALTER CLUSTER DRAIN NODE x", "CHECKPOINT now"] {
            let error = parse_all(sql).unwrap_err();
            assert_eq!(error.sqlstate(), "42601", "{sql}");
        }
    }

    #[test]
    fn a_statement_is_parsed_from_its_own_tokens() {
        let [FoamStatement::Sql { statement, .. }] = &parse_all("SELECT 'a;b' AS \"x;y\" -- c;d")
            .unwrap()[..]
        else {
            panic!("one statement")
        };
        assert_eq!(statement.to_string(), "SELECT 'a;b' AS \"x;y\"");
        let error = parse_all("SELECT 1;\nSELECT 1 (2)").unwrap_err();
        assert_eq!(error.sqlstate(), "42601");
        assert!(error.to_string().contains("Line: 2"), "the place is the query string's: {error}");
        assert_eq!(parse_all("INSERT INTO t VALUES (1) DISTRIBUTED BY (a)").unwrap_err().sqlstate(), "42601");
    }

    /// `parse_all`'s outcome on a thread with a node's stack: the deepest
    /// allowed tree is dropped recursively, deeper than a test thread's stack.
    fn on_a_node_stack(sql: String) -> Result<usize, String> {
        std::thread::Builder::new()
            .stack_size(foam_common::limits::NODE_THREAD_STACK_BYTES)
            .spawn(move || parse_all(&sql).map(|parsed| parsed.len()).map_err(|e| e.sqlstate().code().to_string()))
            .unwrap()
            .join()
            .unwrap()
    }

    #[test]
    fn chains_of_operators_past_the_depth_limit_are_refused() {
        let chain = |terms: usize, op: &str| format!("SELECT {}", vec!["1"; terms].join(op));
        let nested = |levels: usize| format!("SELECT {}1{}", "(1 + ".repeat(levels), ")".repeat(levels));
        for sql in [
            chain(EXPRESSION_DEPTH_MAX + 2, " + "),
            chain(EXPRESSION_DEPTH_MAX / 2 + 10, " = 1 AND "),
            nested(EXPRESSION_DEPTH_MAX / 2 + 10),
            format!("SELECT 1{}", " UNION SELECT 1".repeat(EXPRESSION_DEPTH_MAX + 1)),
        ] {
            let head = sql[..40].to_string();
            assert_eq!(on_a_node_stack(sql), Err("54001".into()), "{head}...");
        }
        // Wide is not deep: lists, many rows, long texts.
        for sql in [
            chain(EXPRESSION_DEPTH_MAX - 1, " + "),
            format!("SELECT {}", vec!["-1 + 2"; 3 * EXPRESSION_DEPTH_MAX].join(", ")),
            format!("INSERT INTO t VALUES {}", vec!["(-1, 'a+b', 2 * 3)"; 3 * EXPRESSION_DEPTH_MAX].join(", ")),
            format!("SELECT 1 WHERE x IN ({})", vec!["-1"; 3 * EXPRESSION_DEPTH_MAX].join(", ")),
        ] {
            let head = sql[..40].to_string();
            assert_eq!(on_a_node_stack(sql), Ok(1), "{head}...");
        }
    }

    #[test]
    fn nesting_past_the_recursion_limit_is_refused() {
        let deep = format!("SELECT {}1{}", "(".repeat(LIMIT + 5), ")".repeat(LIMIT + 5));
        assert_eq!(parse_all(&deep).unwrap_err().sqlstate(), "42601");
    }
}
