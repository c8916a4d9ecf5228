//! `SIMILAR TO` as PostgreSQL matches it: the SQL pattern written as a
//! regular expression anchored at both ends, as PostgreSQL's
//! `similar_to_escape` writes it.
//!
//! DataFusion matched the pattern as a regular expression of its own, not
//! anchored and with `%` and `_` as plain characters: `'ab' SIMILAR TO
//! 'a%'` was false and `'abc' SIMILAR TO 'a.c'` true, the reverse of
//! PostgreSQL. An analyzer rule, before type coercion, writes
//!
//! ```text
//!   x [NOT] SIMILAR TO 'pattern' [ESCAPE 'e']   ─▶   x ~ '(?s)^(?:regex)$'   (or !~)
//! ```
//!
//! where, outside a bracket expression, `%` is `.*`, `_` is `.`, `(` is a
//! group that captures nothing, `.`, `^`, `$` and `\` stand for
//! themselves, the escape character (`\` unless ESCAPE names another)
//! makes the next character a regular expression escape,
//! and everything else (`|`, `*`, `+`, `?`, `{m,n}`, `[...]`) is the
//! regular expression's own. `.` matches a newline, as in PostgreSQL. A
//! pattern that is not a constant is written so for each row, by
//! `foam_similar_to_regex`.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, StringBuilder};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{DFSchema, Result, ScalarValue};
use datafusion::logical_expr::expr::{Like, ScalarFunction};
use datafusion::logical_expr::{
    BinaryExpr, ColumnarValue, Expr, LogicalPlan, Operator, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, TypeSignature, Volatility, lit,
};
use datafusion::optimizer::AnalyzerRule;
use foam_common::{FoamError, SqlState};

use super::named_rewrite::rewrite_expressions;

/// The analyzer rule (see the module documentation).
#[derive(Debug, Default)]
pub struct SimilarTo;

impl AnalyzerRule for SimilarTo {
    fn name(&self) -> &str {
        "foam_similar_to"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        rewrite_expressions(plan, as_regex_match)
    }
}

fn as_regex_match(expr: Expr, _schema: &DFSchema) -> Result<Transformed<Expr>> {
    let Expr::SimilarTo(Like { negated, expr, pattern, escape_char, case_insensitive }) = expr else {
        return Ok(Transformed::no(expr));
    };
    let mut pattern = *pattern;
    // A pattern cast to text (`'a%'::text`) is that text.
    while let Expr::Cast(cast) = &pattern
        && matches!(cast.field.data_type(), DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8)
        && matches!(&*cast.expr, Expr::Literal(ScalarValue::Utf8(_) | ScalarValue::Utf8View(_) | ScalarValue::LargeUtf8(_), _) | Expr::Cast(..))
    {
        pattern = *cast.expr.clone();
    }
    let regex = match pattern {
        Expr::Literal(ScalarValue::Utf8(Some(p)) | ScalarValue::Utf8View(Some(p)) | ScalarValue::LargeUtf8(Some(p)), _) => {
            lit(similar_to_regex(&p, escape_char)?)
        }
        null @ Expr::Literal(ScalarValue::Utf8(None) | ScalarValue::Utf8View(None) | ScalarValue::LargeUtf8(None) | ScalarValue::Null, _) => null,
        pattern => {
            let mut args = vec![pattern];
            args.extend(escape_char.map(|e| lit(e.to_string())));
            Expr::ScalarFunction(ScalarFunction::new_udf(Arc::new(similar_to_regex_udf()), args))
        }
    };
    let op = match (negated, case_insensitive) {
        (false, false) => Operator::RegexMatch,
        (true, false) => Operator::RegexNotMatch,
        (false, true) => Operator::RegexIMatch,
        (true, true) => Operator::RegexNotIMatch,
    };
    Ok(Transformed::yes(Expr::BinaryExpr(BinaryExpr::new(expr, op, Box::new(regex)))))
}

/// `foam_similar_to_regex(pattern [, escape])`: [`similar_to_regex`] of
/// each row's pattern, for a pattern that is not a constant (workers run
/// it too).
pub fn similar_to_regex_udf() -> ScalarUDF {
    let signature = Signature::one_of(vec![TypeSignature::String(1), TypeSignature::String(2)], Volatility::Immutable);
    ScalarUDF::new_from_impl(SimilarToRegex { signature })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct SimilarToRegex {
    signature: Signature,
}

impl ScalarUDFImpl for SimilarToRegex {
    fn name(&self) -> &str {
        "foam_similar_to_regex"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let rows = args.number_rows;
        // Each argument as one Utf8 array (the signature takes strings only).
        let arrays = ColumnarValue::values_to_arrays(&args.args)?
            .iter()
            .map(|array| datafusion::arrow::compute::cast(array, &DataType::Utf8))
            .collect::<std::result::Result<Vec<ArrayRef>, _>>()?;
        let patterns = arrays[0].as_string::<i32>();
        let escapes = arrays.get(1).map(|escapes| escapes.as_string::<i32>());
        let mut out = StringBuilder::with_capacity(rows, rows * 16);
        for row in 0..rows {
            if patterns.is_null(row) {
                out.append_null();
                continue;
            }
            let escape = match escapes.map(|escapes| (!escapes.is_null(row)).then(|| escapes.value(row))) {
                None => None,
                // A NULL escape makes the pattern NULL.
                Some(None) => {
                    out.append_null();
                    continue;
                }
                Some(Some(escape)) => {
                    let mut chars = escape.chars();
                    match (chars.next(), chars.next()) {
                        (Some(e), None) => Some(e),
                        _ => return Err(FoamError::Query { message: "invalid escape string".into(), sqlstate: SqlState::InvalidEscapeSequence }.into()),
                    }
                }
            };
            out.append_value(similar_to_regex(patterns.value(row), escape)?);
        }
        Ok(ColumnarValue::Array(Arc::new(out.finish())))
    }
}

/// The regular expression that matches what `pattern` does under
/// `SIMILAR TO` (`escape`: the ESCAPE character, `None` for the default
/// `\`).
pub fn similar_to_regex(pattern: &str, escape: Option<char>) -> Result<String, FoamError> {
    let escape = escape.unwrap_or('\\');
    let mut regex = String::from("(?s)^(?:");
    let mut after_escape = false;
    let mut in_class = false;
    // Characters read since the class opened (a leading `^` not counted):
    // a `]` first is one of the class's characters.
    let mut class_length = 0;
    let mut quotes = 0;
    // Inside a `{m,n}` bound.
    let mut in_bound = false;
    let mut chars = pattern.chars().peekable();
    while let Some(c) = chars.next() {
        if after_escape {
            after_escape = false;
            if c == '"' && !in_class {
                // The separators of SUBSTRING's three parts: no effect on a match.
                quotes += 1;
                match quotes {
                    1 => regex.push_str("){1,1}?("),
                    2 => regex.push_str("){1,1}(?:"),
                    _ => {
                        return Err(FoamError::Query {
                            message: "SQL regular expression may not contain more than two escape-double-quote separators".into(),
                            sqlstate: SqlState::InvalidUseOfEscapeCharacter,
                        });
                    }
                }
            } else {
                regex.push_str(&escaped(c));
                if in_class {
                    class_length += 1;
                }
            }
        } else if c == escape {
            after_escape = true;
        } else if in_class {
            match c {
                ']' if class_length > 0 => in_class = false,
                ']' => regex.push('\\'),
                '^' if class_length == 0 && regex.ends_with('[') => {
                    regex.push('^');
                    continue;
                }
                // A POSIX class (`[:alpha:]`), with PostgreSQL's letters
                // beyond ASCII.
                '[' if chars.peek() == Some(&':') => {
                    let rest: String = chars.clone().collect();
                    if let Some((name, unicode)) = POSIX_CLASSES.iter().find(|(name, _)| rest.starts_with(&name[1..])) {
                        regex.push_str(unicode);
                        for _ in 1..name.len() {
                            chars.next();
                        }
                        class_length += 1;
                        continue;
                    }
                }
                // Rust's classes nest and take set operations: these are
                // plain characters in PostgreSQL's.
                '[' | '&' | '~' | '\\' => regex.push('\\'),
                '-' if chars.peek() == Some(&'-') => regex.push('\\'),
                _ => {}
            }
            regex.push(c);
            class_length += 1;
        } else {
            match c {
                '[' => {
                    in_class = true;
                    class_length = 0;
                    regex.push('[');
                }
                '%' => regex.push_str(".*"),
                '_' => regex.push('.'),
                '(' => regex.push_str("(?:"),
                // A brace that starts no bound is a character.
                '{' if starts_bound(chars.clone()) => {
                    in_bound = true;
                    regex.push('{');
                }
                '}' if in_bound => {
                    in_bound = false;
                    regex.push('}');
                }
                '{' | '}' => {
                    regex.push('\\');
                    regex.push(c);
                }
                '\\' | '.' | '^' | '$' => {
                    regex.push('\\');
                    regex.push(c);
                }
                c => regex.push(c),
            }
        }
    }
    // An escape character that ends the pattern escapes nothing (PostgreSQL
    // drops it too).
    regex.push_str(")$");
    Ok(regex)
}

/// POSIX classes whose members PostgreSQL takes beyond ASCII (Rust's are
/// ASCII only), as Rust class items.
const POSIX_CLASSES: &[(&str, &str)] = &[
    ("[:alpha:]", "\\p{Alphabetic}"),
    ("[:alnum:]", "\\p{Alphabetic}\\p{Nd}"),
    ("[:upper:]", "\\p{Uppercase}"),
    ("[:lower:]", "\\p{Lowercase}"),
];

/// Whether the text after a `{` makes it a bound: `m}`, `m,}` or `m,n}`.
fn starts_bound(rest: impl Iterator<Item = char>) -> bool {
    let mut digits = 0;
    let mut comma = false;
    for c in rest {
        match c {
            '0'..='9' => digits += 1,
            ',' if !comma && digits > 0 => comma = true,
            '}' => return digits > 0,
            _ => return false,
        }
    }
    false
}

/// The regular expression of PostgreSQL's escape `\c` (an escape
/// character then `c`): its class shorthands, control characters and
/// word constraints; any other character stands for itself.
fn escaped(c: char) -> String {
    match c {
        'd' => "[0-9]".into(),
        'D' => "[^0-9]".into(),
        // PostgreSQL's blanks are Unicode's but for four no-break and
        // next-line characters; its word characters letters, digits and
        // `_` (Rust's \s and \w take more).
        's' => "[\\p{White_Space}&&[^\\x{85}\\x{A0}\\x{2007}\\x{202F}]]".into(),
        'S' => "[[^\\p{White_Space}]\\x{85}\\x{A0}\\x{2007}\\x{202F}]".into(),
        'w' => "[\\p{Alphabetic}\\p{Nd}_]".into(),
        'W' => "[^\\p{Alphabetic}\\p{Nd}_]".into(),
        'x' | 'u' | 'U' | 'A' => format!("\\{c}"),
        'n' => "\\n".into(),
        't' => "\\t".into(),
        'r' => "\\r".into(),
        'f' => "\\x0C".into(),
        'v' => "\\x0B".into(),
        'a' => "\\x07".into(),
        'b' => "\\x08".into(),
        'e' => "\\x1B".into(),
        'B' => "\\\\".into(),
        'Z' => "\\z".into(),
        'y' => "\\b".into(),
        'Y' => "\\B".into(),
        'm' => "\\b{start}".into(),
        'M' => "\\b{end}".into(),
        c => regex::escape(&c.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matches(value: &str, pattern: &str, escape: Option<char>) -> bool {
        regex::Regex::new(&similar_to_regex(pattern, escape).unwrap()).unwrap().is_match(value)
    }

    /// Cases as PostgreSQL 15 answers them.
    #[test]
    fn matches_as_postgres() {
        let cases = [
            ("ab", "a%", true),
            ("ab", "ab", true),
            ("ab", "a_", true),
            ("abc", "%(b|d)%", true),
            ("a.c", "a.c", true),
            ("abc", "a.c", false),
            ("abc", "a", false),
            ("abc", "abc|x", true),
            ("x", "abc|x", true),
            ("aaa", "a*", true),
            ("ab", "[ab]+", true),
            ("a]", "a[]]", true),
            ("a^", "a[^]]", true),
            ("a]", "a[^]]", false),
            ("a$b", "a$b", true),
            ("a^b", "a^b", true),
            ("a\nb", "a_b", true),
            ("a%", "a\\%", true),
            ("ab", "a\\%", false),
            ("a_", "a#_", true),
            ("ab", "a#_", false),
            ("a9", "a[[:digit:]]", true),
            ("a&", "a[&x]", true),
            ("a[", "a[[]", true),
            ("a-", "a[-x]", true),
            ("a\\", "a[\\]#", true),
            ("a", "a\\", true),
            ("", "%", true),
            ("AB", "ab", false),
            ("ab", "(a|b)+", true),
            ("xay", "x\\\"a\\\"y", true),
            ("abcd", "ab{1,2}cd", true),
            ("a", "a\\b", false),
            ("a\\", "a\\B", true),
            ("a<b", "a\\<b", true),
            ("\u{663}", "\\d", false),
            ("7", "\\d", true),
            ("a\u{2192}", "a\\\u{2192}", true),
            ("{", "{", true),
            ("a{x}", "a{x}", true),
            ("a{,3}", "a{,3}", true),
            ("\u{e9}", "[[:alpha:]]", true),
            ("\u{e9}1", "[[:alnum:]]+", true),
            ("1", "[^[:alpha:]]", true),
            ("a b", "a\\sb", true),
            ("a\u{3000}b", "a\\sb", true),
            ("a\u{a0}b", "a\\sb", false),
            ("a\u{2003}b", "a\\Sb", false),
            ("a\u{a0}b", "a\\Sb", true),
        ];
        for (value, pattern, expected) in cases {
            let escape = if pattern.contains('#') { Some('#') } else { None };
            assert_eq!(matches(value, pattern, escape), expected, "{value:?} SIMILAR TO {pattern:?}");
        }
    }

    #[test]
    fn refuses_what_postgres_refuses() {
        assert_eq!(similar_to_regex("\\\"a\\\"b\\\"c", None).unwrap_err().sqlstate(), SqlState::InvalidUseOfEscapeCharacter);
    }
}
