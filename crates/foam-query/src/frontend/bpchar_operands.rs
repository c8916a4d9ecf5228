//! `CHAR(n)` operands read as PostgreSQL's `bpchar` operators read them.
//!
//! FoamDB keeps a CHAR(n) value without its trailing blanks
//! (`char_columns.rs`). PostgreSQL compares two `bpchar` values ignoring
//! trailing blanks, and a quoted literal, a parameter or a VARCHAR beside
//! a CHAR column becomes a `bpchar`; a TEXT or any computed value makes
//! the CHAR column text (its blanks dropped), compared as it is. Pattern
//! matching and a few functions taking any type read the value padded to
//! n characters. So, for a CHAR(n) column `c`:
//!
//! ```text
//!   c = 'ab  '   c < $1   c IN ('a ', ...)   c BETWEEN ...   CASE c WHEN 'a ' ...   nullif(c, 'a ')
//!   c IN (SELECT varchar_column ...)
//!       the literal without trailing blanks, rtrim($1), rtrim(varchar_column)
//!   c LIKE p   c ILIKE p   c SIMILAR TO p   c ~ p   octet_length(c)   concat(c, ...)
//!       rpad(c, n): the value as PostgreSQL stores it
//! ```
//!
//! A rewrite of the planned statement (and of each view's query), before
//! DataFusion's analyzer; the rewritten expressions keep their names.
//! Before it, `c = 'ab  '` matched no row holding `ab`, `c = v` missed
//! rows whose VARCHAR had trailing blanks and `c LIKE 'a_'` matched `ab`.
//! A column reached only as an outer reference of a subquery is not
//! followed, and a parameter is taken as untyped (as psycopg sends a
//! string; JDBC's VARCHAR reads the same) even where PREPARE typed it TEXT.

use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use std::collections::HashMap;
use std::sync::Arc;

use datafusion::common::{Column, Result, ScalarValue};
use datafusion::functions::string::expr_fn::rtrim;
use datafusion::functions::unicode::expr_fn::rpad;
use datafusion::logical_expr::expr::{Between, Case, InList, InSubquery, Like, ScalarFunction};
use datafusion::logical_expr::{BinaryExpr, Expr, LogicalPlan, Operator, Projection, lit};
use foam_catalog::Catalog;
use foam_catalog::types::SqlType;

use crate::frontend::char_casts::{CHAR_CAST, VARCHAR_CAST, cast_length};
use crate::frontend::char_columns::declared;
use crate::optimizer::logical::named_rewrite::rewrite_expressions_over;

/// What an operand is to a `bpchar` operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Operand {
    /// A CHAR(n) column read as it is.
    Bpchar(u32),
    /// A VARCHAR column read as it is: becomes a `bpchar` beside one.
    Varchar,
    /// A quoted literal or a parameter: takes the other side's type.
    Unknown,
    /// Anything else: text, or not a string.
    Other,
}

/// `plan` with its CHAR(n) operands read as PostgreSQL reads them (see the
/// module documentation); `plan` itself when no table has a CHAR column.
pub fn rewrite(plan: LogicalPlan, catalog: &Catalog) -> Result<LogicalPlan> {
    let any_char = catalog.tables.values().flat_map(|table| &table.columns).any(|column| matches!(column.sql_type, SqlType::Char { .. }));
    if !any_char && !casts_to_char(&plan) {
        return Ok(plan);
    }
    let scope = Scope { catalog, outer: relation_columns(&plan, catalog)? };
    let plan = rewrite_expressions_over(plan, |expr, _, inputs| operands(expr, inputs, &scope))?;
    plan.transform_up_with_subqueries(|plan| match plan {
        LogicalPlan::Join(mut join) if !join.on.is_empty() => {
            let mut changed = false;
            for (left, right) in &mut join.on {
                let kinds = (kind(left, std::slice::from_ref(&join.left), &scope), kind(right, std::slice::from_ref(&join.right), &scope));
                match kinds {
                    (Operand::Bpchar(_), Operand::Varchar) => *right = trimmed(right.clone()),
                    (Operand::Varchar, Operand::Bpchar(_)) => *left = trimmed(left.clone()),
                    _ => continue,
                }
                changed = true;
            }
            Ok(if changed { Transformed::yes(LogicalPlan::Join(join)) } else { Transformed::no(LogicalPlan::Join(join)) })
        }
        plan => Ok(Transformed::no(plan)),
    })
    .map(|rewritten| rewritten.data)
}

/// What the rewrite reads column types from.
struct Scope<'a> {
    catalog: &'a Catalog,
    /// The declared type of each relation's column by its qualified name,
    /// for the outer references of subqueries; `None` where two relations
    /// of the statement share the name with different types.
    outer: HashMap<Column, Option<SqlType>>,
}

/// The declared types of the columns of every table, view and aliased
/// subquery `plan` reads, by qualified name (see [`Scope::outer`]).
fn relation_columns(plan: &LogicalPlan, catalog: &Catalog) -> Result<HashMap<Column, Option<SqlType>>> {
    let mut columns: HashMap<Column, Option<SqlType>> = HashMap::new();
    plan.apply_with_subqueries(|node| {
        if matches!(node, LogicalPlan::TableScan(_) | LogicalPlan::SubqueryAlias(_)) {
            for (index, (qualifier, field)) in node.schema().iter().enumerate() {
                let declared = declared(node, index, catalog);
                columns
                    .entry(Column::new(qualifier.cloned(), field.name()))
                    .and_modify(|known| {
                        if *known != declared {
                            *known = None;
                        }
                    })
                    .or_insert(declared);
            }
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    Ok(columns)
}

/// Whether `plan` casts to CHAR(n) or VARCHAR(n) (`char_casts.rs`).
fn casts_to_char(plan: &LogicalPlan) -> bool {
    let mut found = false;
    let _ = plan.apply_with_subqueries(|node| {
        node.apply_expressions(|expr| {
            expr.apply(|e| {
                found |= matches!(e, Expr::ScalarFunction(f) if f.func.name() == CHAR_CAST || f.func.name() == VARCHAR_CAST);
                Ok(if found { TreeNodeRecursion::Stop } else { TreeNodeRecursion::Continue })
            })
        })
    });
    found
}

/// `expr` (whose children are rewritten already) with its operands read as
/// `bpchar` where one is.
fn operands(expr: Expr, inputs: &[LogicalPlan], scope: &Scope) -> Result<Transformed<Expr>> {
    let kind = |e: &Expr| kind(e, inputs, scope);
    // A value beside a CHAR, read as a `bpchar` if it takes the CHAR's type.
    let beside_bpchar = |value: Expr| if matches!(kind(&value), Operand::Unknown | Operand::Varchar) { trimmed(value) } else { value };
    let (expr, results_trimmed) = bpchar_results(expr, &kind);
    let rewritten = match expr {
        Expr::BinaryExpr(BinaryExpr { left, op, right }) if is_comparison(op) => match (kind(&left), kind(&right)) {
            (Operand::Bpchar(_), Operand::Unknown | Operand::Varchar) => Transformed::yes(binary(*left, op, trimmed(*right))),
            (Operand::Unknown | Operand::Varchar, Operand::Bpchar(_)) => Transformed::yes(binary(trimmed(*left), op, *right)),
            _ => Transformed::no(binary(*left, op, *right)),
        },
        Expr::BinaryExpr(BinaryExpr { left, op, right }) if is_regex(op) => match kind(&left) {
            Operand::Bpchar(n) => Transformed::yes(binary(padded(*left, n), op, *right)),
            _ => Transformed::no(binary(*left, op, *right)),
        },
        Expr::Like(like) => match kind(&like.expr) {
            Operand::Bpchar(n) => Transformed::yes(Expr::Like(Like { expr: Box::new(padded(*like.expr, n)), ..like })),
            _ => Transformed::no(Expr::Like(like)),
        },
        Expr::SimilarTo(like) => match kind(&like.expr) {
            Operand::Bpchar(n) => Transformed::yes(Expr::SimilarTo(Like { expr: Box::new(padded(*like.expr, n)), ..like })),
            _ => Transformed::no(Expr::SimilarTo(like)),
        },
        Expr::InList(InList { expr, list, negated }) if matches!(kind(&expr), Operand::Bpchar(_)) => {
            let list = list.into_iter().map(beside_bpchar).collect();
            Transformed::yes(Expr::InList(InList { expr, list, negated }))
        }
        Expr::Between(Between { expr, negated, low, high }) if matches!(kind(&expr), Operand::Bpchar(_)) => {
            let (low, high) = (Box::new(beside_bpchar(*low)), Box::new(beside_bpchar(*high)));
            Transformed::yes(Expr::Between(Between { expr, negated, low, high }))
        }
        Expr::Case(Case { expr: Some(operand), when_then_expr, else_expr }) if matches!(kind(&operand), Operand::Bpchar(_)) => {
            let when_then_expr = when_then_expr.into_iter().map(|(when, then)| (Box::new(beside_bpchar(*when)), then)).collect();
            Transformed::yes(Expr::Case(Case { expr: Some(operand), when_then_expr, else_expr }))
        }
        Expr::ScalarFunction(ScalarFunction { func, args }) if reads_padded(func.name()) && args.iter().any(|a| matches!(kind(a), Operand::Bpchar(_))) => {
            // concat_ws's separator is text (its blanks dropped).
            let separator = usize::from(func.name() == "concat_ws");
            let args = args
                .into_iter()
                .enumerate()
                .map(|(i, arg)| match kind(&arg) {
                    Operand::Bpchar(n) if i >= separator => padded(arg, n),
                    _ => arg,
                })
                .collect();
            Transformed::yes(Expr::ScalarFunction(ScalarFunction { func, args }))
        }
        Expr::ScalarFunction(ScalarFunction { func, mut args }) if func.name() == "nullif" && args.len() == 2 && matches!(kind(&args[0]), Operand::Bpchar(_)) => {
            let value = args.pop().expect("two arguments");
            args.push(beside_bpchar(value));
            Transformed::yes(Expr::ScalarFunction(ScalarFunction { func, args }))
        }
        Expr::InSubquery(InSubquery { expr, mut subquery, negated }) => {
            match (kind(&expr), operand_of(declared(&subquery.subquery, 0, scope.catalog).as_ref())) {
                (Operand::Bpchar(_), Operand::Varchar) => {
                    subquery.subquery = Arc::new(trimmed_first_column(&subquery.subquery)?);
                    Transformed::yes(Expr::InSubquery(InSubquery { expr, subquery, negated }))
                }
                (Operand::Unknown | Operand::Varchar, Operand::Bpchar(_)) => {
                    Transformed::yes(Expr::InSubquery(InSubquery { expr: Box::new(trimmed(*expr)), subquery, negated }))
                }
                _ => Transformed::no(Expr::InSubquery(InSubquery { expr, subquery, negated })),
            }
        }
        expr => Transformed::no(expr),
    };
    Ok(if results_trimmed { Transformed::yes(rewritten.data) } else { rewritten })
}

/// The values `coalesce`, `greatest`, `least` or a CASE choose among, when
/// PostgreSQL types the choice a `bpchar`.
fn choices(expr: &Expr) -> Option<Vec<&Expr>> {
    match expr {
        Expr::ScalarFunction(f) if matches!(f.func.name(), "coalesce" | "greatest" | "least") => Some(f.args.iter().collect()),
        Expr::Case(case) => Some(case.when_then_expr.iter().map(|(_, then)| then.as_ref()).chain(case.else_expr.as_deref()).collect()),
        _ => None,
    }
}

/// Whether values of these kinds make a `bpchar` choice: a CHAR among
/// them, the rest CHARs or untyped.
fn bpchar_choice(kinds: impl Iterator<Item = Operand>) -> bool {
    let mut any = false;
    for kind in kinds {
        match kind {
            Operand::Bpchar(_) => any = true,
            Operand::Unknown => {}
            _ => return false,
        }
    }
    any
}

/// `expr` with the quoted literals it chooses among without trailing
/// blanks, when the choice is a `bpchar` (`coalesce(c, ' ') = ''`,
/// `coalesce(c, 'x ') || '|'`), and whether it changed.
fn bpchar_results(expr: Expr, kind: &dyn Fn(&Expr) -> Operand) -> (Expr, bool) {
    let Some(values) = choices(&expr) else { return (expr, false) };
    let literal_blanks = values.iter().any(|v| matches!(v, Expr::Literal(ScalarValue::Utf8(Some(s)) | ScalarValue::Utf8View(Some(s)) | ScalarValue::LargeUtf8(Some(s)), _) if s.ends_with(' ')));
    if !literal_blanks || !bpchar_choice(values.into_iter().map(kind)) {
        return (expr, false);
    }
    let trim = |value: Expr| if matches!(value, Expr::Literal(..)) { trimmed(value) } else { value };
    let expr = match expr {
        Expr::ScalarFunction(ScalarFunction { func, args }) => Expr::ScalarFunction(ScalarFunction { func, args: args.into_iter().map(trim).collect() }),
        Expr::Case(Case { expr, when_then_expr, else_expr }) => Expr::Case(Case {
            expr,
            when_then_expr: when_then_expr.into_iter().map(|(when, then)| (when, Box::new(trim(*then)))).collect(),
            else_expr: else_expr.map(|e| Box::new(trim(*e))),
        }),
        expr => expr,
    };
    (expr, true)
}

/// `plan` with its one output column without trailing blanks.
fn trimmed_first_column(plan: &LogicalPlan) -> Result<LogicalPlan> {
    let (qualifier, field) = plan.schema().qualified_field(0);
    let column = Expr::Column(Column::new(qualifier.cloned(), field.name()));
    let trimmed = trimmed(column).alias_qualified(qualifier.cloned(), field.name());
    Ok(LogicalPlan::Projection(Projection::try_new(vec![trimmed], Arc::new(plan.clone()))?))
}

/// What `expr` is to a `bpchar` operator, its columns found in `inputs`.
fn kind(expr: &Expr, inputs: &[LogicalPlan], scope: &Scope) -> Operand {
    match expr {
        Expr::Column(column) => inputs
            .iter()
            .find_map(|input| input.schema().maybe_index_of_column(column).map(|index| declared(input, index, scope.catalog)))
            .map_or(Operand::Other, |declared| operand_of(declared.as_ref())),
        // A column of an enclosing query, by its qualified name.
        Expr::OuterReferenceColumn(_, column) => operand_of(scope.outer.get(column).and_then(Option::as_ref)),
        // `nullif` of a CHAR is one (of a VARCHAR, text).
        Expr::ScalarFunction(f) if f.func.name() == "nullif" && f.args.len() == 2 => match kind(&f.args[0], inputs, scope) {
            bpchar @ Operand::Bpchar(_) => bpchar,
            _ => Operand::Other,
        },
        // A cast to CHAR(n), or to `bpchar` (no length: 0, never padded).
        Expr::ScalarFunction(f) if f.func.name() == CHAR_CAST => Operand::Bpchar(cast_length(&f.args).unwrap_or(0)),
        Expr::ScalarFunction(f) if f.func.name() == VARCHAR_CAST => Operand::Varchar,
        Expr::Literal(ScalarValue::Utf8(_) | ScalarValue::Utf8View(_) | ScalarValue::LargeUtf8(_) | ScalarValue::Null, _) | Expr::Placeholder(_) => Operand::Unknown,
        // A choice PostgreSQL types `bpchar` (read unpadded: its rows come
        // from values of several lengths).
        expr if choices(expr).is_some_and(|values| bpchar_choice(values.into_iter().map(|v| kind(v, inputs, scope)))) => Operand::Bpchar(0),
        _ => Operand::Other,
    }
}

fn operand_of(declared: Option<&SqlType>) -> Operand {
    match declared {
        Some(SqlType::Char { length }) => Operand::Bpchar(*length),
        Some(SqlType::Varchar { .. }) => Operand::Varchar,
        _ => Operand::Other,
    }
}

fn is_comparison(op: Operator) -> bool {
    matches!(
        op,
        Operator::Eq | Operator::NotEq | Operator::Lt | Operator::LtEq | Operator::Gt | Operator::GtEq | Operator::IsDistinctFrom | Operator::IsNotDistinctFrom
    )
}

/// The pattern operators: `~` and its kin, and LIKE's `~~` forms.
fn is_regex(op: Operator) -> bool {
    matches!(
        op,
        Operator::RegexMatch
            | Operator::RegexIMatch
            | Operator::RegexNotMatch
            | Operator::RegexNotIMatch
            | Operator::LikeMatch
            | Operator::ILikeMatch
            | Operator::NotLikeMatch
            | Operator::NotILikeMatch
    )
}

/// The functions that read a CHAR(n) argument padded (PostgreSQL's text
/// output of the value, not its cast to text).
fn reads_padded(name: &str) -> bool {
    matches!(name, "octet_length" | "concat" | "concat_ws")
}

fn binary(left: Expr, op: Operator, right: Expr) -> Expr {
    Expr::BinaryExpr(BinaryExpr::new(Box::new(left), op, Box::new(right)))
}

/// `expr` without trailing blanks: a literal's folded.
fn trimmed(expr: Expr) -> Expr {
    match expr {
        Expr::Literal(ScalarValue::Utf8(Some(s)), metadata) => Expr::Literal(ScalarValue::Utf8(Some(s.trim_end_matches(' ').to_string())), metadata),
        Expr::Literal(ScalarValue::Utf8View(Some(s)), metadata) => Expr::Literal(ScalarValue::Utf8View(Some(s.trim_end_matches(' ').to_string())), metadata),
        Expr::Literal(ScalarValue::LargeUtf8(Some(s)), metadata) => Expr::Literal(ScalarValue::LargeUtf8(Some(s.trim_end_matches(' ').to_string())), metadata),
        literal @ Expr::Literal(..) => literal,
        expr => rtrim(vec![expr]),
    }
}

/// A CHAR(n) value as PostgreSQL stores it: blank-padded to n characters
/// (`bpchar` without a length, n = 0, as it is).
fn padded(expr: Expr, n: u32) -> Expr {
    if n == 0 {
        return expr;
    }
    rpad(vec![expr, lit(i64::from(n))])
}
