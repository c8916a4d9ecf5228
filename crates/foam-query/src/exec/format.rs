//! `format(fmt, args...)`, `quote_ident` and `quote_nullable` as
//! PostgreSQL's. `format` reads `%[n$][-][width]type`, the type `s` (the
//! value's text, NULL as nothing), `I` (`quote_ident`; NULL is 22004) or
//! `L` (`quote_literal`; NULL as `NULL`), `%%` a percent sign; a width
//! pads with blanks (on the right after `-` or for a negative width), `*`
//! takes it from the next argument. Values are PostgreSQL's text of them
//! (`exec/pg_text.rs`: a boolean is `t`, a float `1e+20`).
//!
//! `quote_ident` quotes unless the name is lower-case letters, digits and
//! underscores, not starting with a digit, and not one of PostgreSQL's
//! keywords other than its unreserved ones (datafusion-pg-catalog's left
//! `Hello` unquoted, which then reads as `hello`).

use std::sync::Arc;

use arrow::array::{ArrayRef, AsArray, StringBuilder};
use arrow::datatypes::DataType;
use datafusion::common::{DataFusionError, Result};
use datafusion::logical_expr::{ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, TypeSignature, Volatility};
use foam_common::{FoamError, SqlState};

use crate::catalog::functions::quote_literal;
use crate::exec::function_values::answered;
use crate::exec::pg_text::element_texts;

/// PostgreSQL 15's keywords that are not unreserved (`pg_get_keywords()`
/// where `catcode <> 'U'`): `quote_ident` quotes them.
const QUOTED_KEYWORDS: [&str; 151] = [
    "all", "analyse", "analyze", "and", "any", "array", "as", "asc", "asymmetric", "authorization", "between", "bigint", "binary", "bit", "boolean",
    "both", "case", "cast", "char", "character", "check", "coalesce", "collate", "collation", "column", "concurrently", "constraint", "create", "cross",
    "current_catalog", "current_date", "current_role", "current_schema", "current_time", "current_timestamp", "current_user", "dec", "decimal",
    "default", "deferrable", "desc", "distinct", "do", "else", "end", "except", "exists", "extract", "false", "fetch", "float", "for", "foreign",
    "freeze", "from", "full", "grant", "greatest", "group", "grouping", "having", "ilike", "in", "initially", "inner", "inout", "int", "integer",
    "intersect", "interval", "into", "is", "isnull", "join", "lateral", "leading", "least", "left", "like", "limit", "localtime", "localtimestamp",
    "national", "natural", "nchar", "none", "normalize", "not", "notnull", "null", "nullif", "numeric", "offset", "on", "only", "or", "order", "out",
    "outer", "overlaps", "overlay", "placing", "position", "precision", "primary", "real", "references", "returning", "right", "row", "select",
    "session_user", "setof", "similar", "smallint", "some", "substring", "symmetric", "table", "tablesample", "then", "time", "timestamp", "to",
    "trailing", "treat", "trim", "true", "union", "unique", "user", "using", "values", "varchar", "variadic", "verbose", "when", "where", "window",
    "with", "xmlattributes", "xmlconcat", "xmlelement", "xmlexists", "xmlforest", "xmlnamespaces", "xmlparse", "xmlpi", "xmlroot", "xmlserialize",
    "xmltable",
];

/// `format`, `quote_ident` and `quote_nullable`; sessions register them in
/// place of datafusion-pg-catalog's `quote_ident`, workers run them.
pub fn udfs() -> Vec<ScalarUDF> {
    vec![
        ScalarUDF::new_from_impl(Format { signature: Signature::one_of(vec![TypeSignature::VariadicAny], Volatility::Stable) }),
        ScalarUDF::new_from_impl(Quote { name: "quote_ident", signature: Signature::any(1, Volatility::Immutable) }),
        ScalarUDF::new_from_impl(Quote { name: "quote_nullable", signature: Signature::any(1, Volatility::Immutable) }),
    ]
}

/// The widest a `format()` conversion pads to; a wider one is refused
/// (54000) rather than allocated.
const FORMAT_WIDTH_MAX: usize = 10 * 1024 * 1024;

/// `name` as an SQL identifier: quoted, inner quotes doubled, unless it
/// reads as itself unquoted.
pub fn quote_ident(name: &str) -> String {
    let mut chars = name.chars();
    let plain = chars.next().is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && !QUOTED_KEYWORDS.contains(&name);
    if plain { name.to_string() } else { format!("\"{}\"", name.replace('"', "\"\"")) }
}

fn error(message: String, sqlstate: SqlState) -> DataFusionError {
    DataFusionError::from(FoamError::Query { message, sqlstate })
}

/// `format(fmt, args)` of one row: `args` are the values' texts (`None`
/// for NULL). `None` for a NULL `fmt`.
pub fn format_row(fmt: &str, args: &[Option<String>]) -> Result<String> {
    let invalid = |message: String| error(message, SqlState::InvalidParameterValue);
    let mut out = String::new();
    let mut chars = fmt.chars().peekable();
    // The argument the next unnumbered conversion reads (0-based).
    let mut next = 0usize;
    let argument = |position: Option<usize>, next: &mut usize| -> Result<Option<String>> {
        let at = position.unwrap_or(*next);
        *next = at + 1;
        args.get(at).cloned().ok_or_else(|| invalid("too few arguments for format()".into()))
    };
    let number = |chars: &mut std::iter::Peekable<std::str::Chars>| -> Option<usize> {
        let mut digits = String::new();
        while let Some(c) = chars.peek().filter(|c| c.is_ascii_digit()) {
            digits.push(*c);
            chars.next();
        }
        (!digits.is_empty()).then(|| digits.parse().unwrap_or(usize::MAX))
    };
    let unterminated = || invalid("unterminated format() type specifier".into());
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        if chars.peek() == Some(&'%') {
            chars.next();
            out.push('%');
            continue;
        }
        // `n$`: a numbered argument (digits without `$` are a width).
        let mut position = None;
        let mut width: Option<i64> = None;
        if let Some(n) = number(&mut chars) {
            if chars.peek() == Some(&'$') {
                chars.next();
                position = Some(n);
            } else {
                width = Some(i64::try_from(n).unwrap_or(i64::MAX));
            }
        }
        let mut left = false;
        if width.is_none() {
            while chars.peek() == Some(&'-') {
                chars.next();
                left = true;
            }
            if chars.peek() == Some(&'*') {
                chars.next();
                let from = match number(&mut chars) {
                    Some(n) if chars.peek() == Some(&'$') => {
                        chars.next();
                        Some(n)
                    }
                    Some(_) => return Err(invalid("width argument position must be ended by \"$\"".into())),
                    None => None,
                };
                let from = from.map(|n| if n == 0 { Err(invalid("format specifies argument 0, but arguments are numbered from 1".into())) } else { Ok(n - 1) }).transpose()?;
                let text = argument(from, &mut next)?;
                width = Some(match text {
                    Some(text) => text.trim().parse().map_err(|_| error(format!("invalid input syntax for type integer: \"{text}\""), SqlState::InvalidTextRepresentation))?,
                    None => 0,
                });
            } else if let Some(n) = number(&mut chars) {
                width = Some(i64::try_from(n).unwrap_or(i64::MAX));
            }
        }
        let position = position.map(|n| if n == 0 { Err(invalid("format specifies argument 0, but arguments are numbered from 1".into())) } else { Ok(n - 1) }).transpose()?;
        let Some(kind) = chars.next() else { return Err(unterminated()) };
        let value = match kind {
            's' | 'I' | 'L' => argument(position, &mut next)?,
            other => return Err(invalid(format!("unrecognized format() type specifier \"{other}\""))),
        };
        let text = match (kind, value) {
            ('s', value) => value.unwrap_or_default(),
            ('I', Some(value)) => quote_ident(&value),
            ('I', None) => return Err(error("null values cannot be formatted as an SQL identifier".into(), SqlState::NullValueNotAllowed)),
            (_, Some(value)) => quote_literal(&value),
            (_, None) => "NULL".into(),
        };
        let width = width.unwrap_or(0);
        if i32::try_from(width).is_err() {
            return Err(error("number is out of range".into(), SqlState::NumericValueOutOfRange));
        }
        let (left, width) = (left || width < 0, usize::try_from(width.unsigned_abs()).unwrap_or(usize::MAX));
        if width > FORMAT_WIDTH_MAX {
            return Err(error(format!("format() width {width} is past FoamDB's limit of {FORMAT_WIDTH_MAX}"), SqlState::ProgramLimitExceeded));
        }
        let pad = width.saturating_sub(text.chars().count());
        if left {
            out.push_str(&text);
            out.extend(std::iter::repeat_n(' ', pad));
        } else {
            out.extend(std::iter::repeat_n(' ', pad));
            out.push_str(&text);
        }
    }
    Ok(out)
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct Format {
    signature: Signature,
}

impl ScalarUDFImpl for Format {
    fn name(&self) -> &str {
        "format"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let scalar = args.args.iter().all(|arg| matches!(arg, ColumnarValue::Scalar(_)));
        let rows = if scalar { 1 } else { args.number_rows };
        let arrays: Vec<ArrayRef> = args.args.iter().map(|arg| arg.to_array(rows)).collect::<Result<_>>()?;
        let Some((fmt, values)) = arrays.split_first() else { return Err(error("function format() needs a format string".into(), SqlState::UndefinedFunction)) };
        let fmt = element_texts(fmt);
        let values: Vec<Vec<Option<String>>> = values.iter().map(element_texts).collect();
        let mut built = StringBuilder::new();
        for (row, fmt) in fmt.iter().enumerate() {
            match fmt {
                None => built.append_null(),
                Some(fmt) => {
                    let row_values: Vec<Option<String>> = values.iter().map(|texts| texts[row].clone()).collect();
                    built.append_value(format_row(fmt, &row_values)?);
                }
            }
        }
        answered(Arc::new(built.finish()), scalar)
    }
}

/// `quote_ident(name)` or `quote_nullable(value)`.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Quote {
    name: &'static str,
    signature: Signature,
}

impl ScalarUDFImpl for Quote {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [value] = args.args.as_slice() else { return Err(error(format!("{} takes one argument", self.name), SqlState::UndefinedFunction)) };
        crate::exec::function_values::per_value(value, args.number_rows, |values| {
            let texts = element_texts(values);
            let quoted: arrow::array::StringArray = match self.name {
                "quote_ident" => texts.iter().map(|text| text.as_deref().map(quote_ident)).collect(),
                // Through the cast to text: a boolean is `'true'`.
                _ if values.data_type() == &DataType::Boolean => {
                    values.as_boolean().iter().map(|value| Some(value.map_or_else(|| "NULL".to_string(), |b| quote_literal(if b { "true" } else { "false" })))).collect()
                }
                _ => texts.iter().map(|text| Some(text.as_deref().map_or_else(|| "NULL".to_string(), quote_literal))).collect(),
            };
            Ok(Arc::new(quoted) as ArrayRef)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn format(fmt: &str, args: &[Option<&str>]) -> Result<String> {
        format_row(fmt, &args.iter().map(|a| a.map(str::to_string)).collect::<Vec<_>>())
    }

    // PostgreSQL 15's answers.
    #[test]
    fn format_reads_postgresql_conversions() {
        assert_eq!(format("Hello %s, %1$s", &[Some("World")]).unwrap(), "Hello World, World");
        assert_eq!(format("%s %s %s", &[Some("a"), None, Some("c")]).unwrap(), "a  c");
        assert_eq!(format("INSERT INTO %I VALUES(%L, %L)", &[Some("Foo bar"), Some("O'Reilly"), None]).unwrap(), "INSERT INTO \"Foo bar\" VALUES('O''Reilly', NULL)");
        assert_eq!(format("|%10s|%-10s|%*s|%-*s|", &[Some("a"), Some("b"), Some("3"), Some("c"), Some("-3"), Some("d")]).unwrap(), "|         a|b         |  c|d  |");
        assert_eq!(format("%2$s %1$s %s", &[Some("x"), Some("y")]).unwrap(), "y x y");
        assert_eq!(format("100%%", &[]).unwrap(), "100%");
        assert_eq!(format("%s %s", &[Some("a")]).unwrap_err().to_string().contains("too few arguments"), true);
        assert!(format("%x", &[Some("a")]).unwrap_err().to_string().contains("unrecognized format() type specifier \"x\""));
        assert!(format("%", &[]).unwrap_err().to_string().contains("unterminated"));
        assert!(format("%I", &[None]).unwrap_err().to_string().contains("SQL identifier"));
        assert!(format("%0$s", &[Some("a")]).unwrap_err().to_string().contains("argument 0"));
        let code = |fmt: &str, args: &[Option<&str>]| FoamError::from(format(fmt, args).unwrap_err()).sqlstate().code().to_string();
        assert_eq!(code("%3000000000s", &[Some("a")]), "22003");
        assert_eq!(code("%*s", &[Some("100000000"), Some("a")]), "54000");
        assert_eq!(code("%*s", &[Some("x"), Some("a")]), "22P02");
    }

    #[test]
    fn quote_ident_quotes_what_would_not_read_back() {
        assert_eq!(quote_ident("abc_1"), "abc_1");
        assert_eq!(quote_ident("Hello"), "\"Hello\"");
        assert_eq!(quote_ident("select"), "\"select\"");
        assert_eq!(quote_ident("name"), "name");
        assert_eq!(quote_ident("1a"), "\"1a\"");
        assert_eq!(quote_ident("a\"b"), "\"a\"\"b\"");
        assert_eq!(quote_ident(""), "\"\"");
    }
}
