//! Casts to the character types, as PostgreSQL casts.
//!
//! DataFusion read every character type as text: `'ab'::char(1)` was
//! `ab` (PostgreSQL: `a`), `'a  b'::varchar(2)` kept four characters,
//! `'a'::char(3)` printed unpadded and `octet_length` gave 1 (PostgreSQL:
//! 3), and `::bpchar`, `::character(n)` and `::name` were refused. In
//! each statement's syntax tree:
//!
//! ```text
//!   CAST(x AS CHAR(n))   x::character(n)   ─▶  foam_char(CAST(x AS TEXT), n)
//!   x::char                                ─▶  foam_char(CAST(x AS TEXT), 1)
//!   x::bpchar                              ─▶  foam_char(CAST(x AS TEXT), NULL)
//!   x::varchar(n)   x::character varying(n) ─▶  foam_varchar(CAST(x AS TEXT), n)
//!   x::varchar      x::character varying    ─▶  foam_varchar(CAST(x AS TEXT), NULL)
//!   x::name                                ─▶  CAST(x AS TEXT)
//! ```
//!
//! `foam_char` cuts the text to n characters and drops trailing blanks,
//! a CHAR(n) value as FoamDB keeps it; `char_columns.rs` reads the call
//! as a CHAR(n) column (padded in results) and `bpchar_operands.rs`
//! compares it as one. `foam_varchar` cuts to n characters, and is read
//! as a VARCHAR. Both are what an explicit cast does in PostgreSQL: it
//! cuts silently, where storing too long a value in a column is 22001.
//! `::bpchar` drops trailing blanks too (PostgreSQL keeps them in the
//! value it prints, and ignores them in comparisons, as FoamDB does). A
//! CREATE or ALTER TABLE is left as written: its defaults are stored as
//! text and rewritten in the INSERT that uses them.

use std::ops::ControlFlow;
use std::sync::Arc;

use datafusion::arrow::array::{Array, AsArray, StringBuilder};
use datafusion::arrow::datatypes::DataType as ArrowType;
use datafusion::common::{Result, ScalarValue, exec_err};
use datafusion::logical_expr::{ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility};
use datafusion::sql::sqlparser::ast::{CastKind, CharacterLength, DataType, Expr, Statement, Value, VisitMut, VisitorMut};

use crate::frontend::array_subquery::call;

/// The function of a cast to CHAR(n) (see the module documentation).
pub const CHAR_CAST: &str = "foam_char";
/// The function of a cast to VARCHAR(n).
pub const VARCHAR_CAST: &str = "foam_varchar";

/// `statement` with its casts to character types written as PostgreSQL's
/// (see the module documentation).
pub fn rewrite(statement: &mut Statement) {
    // A column default is kept as written (pg_dump's `'N'::bpchar`) and
    // rewritten where an INSERT uses it.
    if matches!(statement, Statement::CreateTable(_) | Statement::AlterTable(_)) {
        return;
    }
    let _ = statement.visit(&mut Casts);
}

struct Casts;

impl VisitorMut for Casts {
    type Break = ();

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        // TRY_CAST (DataFusion's) is left as written: its NULL for a value
        // that does not convert would become an error.
        let Expr::Cast { kind: CastKind::Cast | CastKind::DoubleColon, expr: value, data_type, .. } = expr else { return ControlFlow::Continue(()) };
        let text = || Expr::Cast {
            kind: CastKind::Cast,
            expr: value.clone(),
            data_type: DataType::Text,
            array: false,
            format: None,
        };
        let number = |n: u64| Expr::value(Value::Number(n.to_string(), false));
        let rewritten = match data_type {
            DataType::Char(length) | DataType::Character(length) => match length {
                None => call(CHAR_CAST, vec![text(), number(1)], Vec::new()),
                Some(CharacterLength::IntegerLength { length, .. }) => call(CHAR_CAST, vec![text(), number(*length)], Vec::new()),
                Some(CharacterLength::Max) => return ControlFlow::Continue(()),
            },
            DataType::Varchar(Some(CharacterLength::IntegerLength { length, .. }))
            | DataType::CharacterVarying(Some(CharacterLength::IntegerLength { length, .. }))
            | DataType::CharVarying(Some(CharacterLength::IntegerLength { length, .. })) => call(VARCHAR_CAST, vec![text(), number(*length)], Vec::new()),
            DataType::Varchar(None) | DataType::CharacterVarying(None) | DataType::CharVarying(None) => {
                call(VARCHAR_CAST, vec![text(), Expr::value(Value::Null)], Vec::new())
            }
            DataType::Custom(name, modifiers) if modifiers.is_empty() && name.0.len() == 1 => {
                let Some(ident) = name.0[0].as_ident() else { return ControlFlow::Continue(()) };
                if ident.quote_style.is_some() {
                    return ControlFlow::Continue(());
                }
                match ident.value.to_ascii_lowercase().as_str() {
                    "bpchar" => call(CHAR_CAST, vec![text(), Expr::value(Value::Null)], Vec::new()),
                    "name" => text(),
                    _ => return ControlFlow::Continue(()),
                }
            }
            _ => return ControlFlow::Continue(()),
        };
        *expr = rewritten;
        ControlFlow::Continue(())
    }
}

/// The length `foam_char`/`foam_varchar` cut to: a literal argument, or
/// none (`NULL`, `bpchar`).
pub fn cast_length(args: &[datafusion::logical_expr::Expr]) -> Option<u32> {
    match args.get(1)? {
        datafusion::logical_expr::Expr::Literal(ScalarValue::Int64(Some(n)), _) => u32::try_from(*n).ok(),
        _ => None,
    }
}

/// `foam_char` and `foam_varchar`; workers run them too.
pub fn udfs() -> Vec<ScalarUDF> {
    vec![
        ScalarUDF::new_from_impl(CharacterCast { name: CHAR_CAST, trim: true, signature: Signature::any(2, Volatility::Immutable) }),
        ScalarUDF::new_from_impl(CharacterCast { name: VARCHAR_CAST, trim: false, signature: Signature::any(2, Volatility::Immutable) }),
    ]
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct CharacterCast {
    name: &'static str,
    /// Drop trailing blanks (CHAR), or keep them (VARCHAR).
    trim: bool,
    signature: Signature,
}

impl ScalarUDFImpl for CharacterCast {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[ArrowType]) -> Result<ArrowType> {
        Ok(ArrowType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let length = match &args.args[1] {
            ColumnarValue::Scalar(ScalarValue::Int64(n)) => n.map(|n| usize::try_from(n).unwrap_or(0)),
            ColumnarValue::Scalar(value) if value.is_null() => None,
            other => return exec_err!("{}: the length is not a constant integer: {other:?}", self.name),
        };
        if let ColumnarValue::Scalar(value) = &args.args[0] {
            let text = match value.cast_to(&ArrowType::Utf8)? {
                ScalarValue::Utf8(text) => text,
                _ => None,
            };
            return Ok(ColumnarValue::Scalar(ScalarValue::Utf8(text.map(|t| self.cut(&t, length).to_string()))));
        }
        let values = args.args[0].to_array(args.number_rows)?;
        let values = datafusion::arrow::compute::cast(&values, &ArrowType::Utf8)?;
        let values = values.as_string::<i32>();
        let mut out = StringBuilder::with_capacity(values.len(), values.value_data().len());
        for value in values.iter() {
            match value {
                None => out.append_null(),
                Some(value) => out.append_value(self.cut(value, length)),
            }
        }
        Ok(ColumnarValue::Array(Arc::new(out.finish())))
    }
}

impl CharacterCast {
    /// `value` cut to `length` characters, its trailing blanks dropped for a CHAR.
    fn cut<'v>(&self, value: &'v str, length: Option<usize>) -> &'v str {
        let cut = match length {
            Some(n) => value.char_indices().nth(n).map_or(value, |(at, _)| &value[..at]),
            None => value,
        };
        if self.trim { cut.trim_end_matches(' ') } else { cut }
    }
}
