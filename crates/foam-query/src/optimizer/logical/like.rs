//! `LIKE` patterns of literal text and `%` only, matched without a regex: a
//! logical optimizer rule run on the coordinating node, and the function it
//! calls, run in every stage that filters.
//!
//! ```text
//!   Filter: o_comment NOT LIKE '%special%requests%'
//!     ─▶ Filter: NOT foam_like(o_comment, '%special%requests%')
//! ```
//! Arrow's `like` kernel matches `'abc'`, `'abc%'`, `'%abc'` and `'%abc%'`
//! directly but turns any other pattern into a regex, and it does so for every
//! batch it is given: TPC-H Q13 compiled `'%special%requests%'` once per
//! batch of orders (bench/results/design-figures.md). A pattern
//! whose only wildcard is `%` needs no regex: its pieces are found in order,
//! each leftmost after the one before (the first must start the string and the
//! last end it unless the pattern starts or ends with `%`), which is exactly
//! when the pattern matches. Patterns with `_` or the escape character, ILIKE,
//! and patterns Arrow matches without a regex are left to DataFusion. Only
//! filters are rewritten, so no output column changes its name.
//! `SET foam.fast_like = false` turns the rule off.

use std::sync::Arc;

use arrow::array::{Array, ArrayAccessor, ArrayRef, AsArray, BooleanArray};
use arrow::datatypes::DataType;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{DFSchema, ScalarValue};
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::expr::{Like, ScalarFunction};
use datafusion::logical_expr::{
    ColumnarValue, Expr, ExprSchemable, Filter, LogicalPlan, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::optimizer::optimizer::ApplyOrder;
use datafusion::optimizer::{OptimizerConfig, OptimizerRule};
use memchr::memmem::Finder;

use crate::options::FoamOptions;

/// The name of the matching function.
pub const LIKE_FUNCTION: &str = "foam_like";

/// A `LIKE` pattern whose only wildcard is `%`, split at the `%`s.
#[derive(Debug)]
struct Pieces {
    /// Text the string must start with (empty when the pattern starts with `%`).
    first: Vec<u8>,
    /// Texts that must follow, in order, each anywhere after the one before.
    middle: Vec<Finder<'static>>,
    /// Text the string must end with (empty when the pattern ends with `%`).
    last: Vec<u8>,
}

impl Pieces {
    /// The pieces of `pattern`, when it has a `%` and no `_` or `\`.
    fn parse(pattern: &str) -> Option<Self> {
        if pattern.contains(['_', '\\']) || !pattern.contains('%') {
            return None;
        }
        let parts: Vec<&str> = pattern.split('%').collect();
        let (first, rest) = parts.split_first()?;
        let (last, middle) = rest.split_last()?;
        Some(Pieces {
            first: first.as_bytes().to_vec(),
            middle: middle.iter().filter(|p| !p.is_empty()).map(|p| Finder::new(p.as_bytes()).into_owned()).collect(),
            last: last.as_bytes().to_vec(),
        })
    }

    fn matches(&self, text: &str) -> bool {
        let text = text.as_bytes();
        if !text.starts_with(&self.first) {
            return false;
        }
        let mut at = self.first.len();
        for piece in &self.middle {
            match piece.find(&text[at..]) {
                Some(found) => at += found + piece.needle().len(),
                None => return false,
            }
        }
        text.len() - at >= self.last.len() && text.ends_with(&self.last)
    }
}

/// Whether Arrow's kernel would compile `pattern` into a regex (it matches
/// plain text, `x%`, `%x` and `%x%` without one).
fn arrow_needs_regex(pattern: &str) -> bool {
    let wild = |s: &str| s.contains(['%', '_', '\\']);
    let inner = |s: &str, from: usize, to: usize| s.get(from..s.len().saturating_sub(to)).is_some_and(|s| !wild(s));
    wild(pattern)
        && !(pattern.ends_with('%') && inner(pattern, 0, 1))
        && !(pattern.starts_with('%') && inner(pattern, 1, 0))
        && !(pattern.len() >= 2 && pattern.starts_with('%') && pattern.ends_with('%') && inner(pattern, 1, 1))
}

fn is_string(data_type: &DataType) -> bool {
    matches!(data_type, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
}

/// `foam_like(text, 'pattern')`: `text LIKE 'pattern'` for patterns
/// [`Pieces::parse`] accepts.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct FoamLike {
    signature: Signature,
}

impl FoamLike {
    pub fn udf() -> ScalarUDF {
        ScalarUDF::new_from_impl(FoamLike { signature: Signature::any(2, Volatility::Immutable) })
    }
}

fn matches_all<'a, A: ArrayAccessor<Item = &'a str>>(texts: A, pieces: &Pieces) -> BooleanArray {
    BooleanArray::from_unary(texts, |text| pieces.matches(text))
}

impl ScalarUDFImpl for FoamLike {
    fn name(&self) -> &str {
        LIKE_FUNCTION
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Boolean)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [texts, pattern] = args.args.as_slice() else {
            return Err(DataFusionError::Internal(format!("{LIKE_FUNCTION} takes a text and a pattern")));
        };
        let pieces = match pattern {
            ColumnarValue::Scalar(ScalarValue::Utf8(Some(p))) => Pieces::parse(p),
            _ => None,
        }
        .ok_or_else(|| DataFusionError::Internal(format!("{LIKE_FUNCTION}: the pattern must be a literal of text and %, got {pattern:?}")))?;
        crate::exec::function_values::per_value(texts, args.number_rows, |texts| {
            Ok(Arc::new(match texts.data_type() {
                DataType::Utf8 => matches_all(texts.as_string::<i32>(), &pieces),
                DataType::LargeUtf8 => matches_all(texts.as_string::<i64>(), &pieces),
                DataType::Utf8View => matches_all(texts.as_string_view(), &pieces),
                other => return Err(DataFusionError::Internal(format!("{LIKE_FUNCTION}: cannot match {other}"))),
            }) as ArrayRef)
        })
    }
}

/// The optimizer rule (see the module documentation).
#[derive(Debug, Default)]
pub struct LikeWithoutRegex;

impl OptimizerRule for LikeWithoutRegex {
    fn name(&self) -> &str {
        "foam_like_without_regex"
    }

    fn apply_order(&self) -> Option<ApplyOrder> {
        Some(ApplyOrder::BottomUp)
    }

    fn supports_rewrite(&self) -> bool {
        true
    }

    fn rewrite(&self, plan: LogicalPlan, config: &dyn OptimizerConfig) -> Result<Transformed<LogicalPlan>> {
        if config.options().extensions.get::<FoamOptions>().is_some_and(|o| !o.fast_like) {
            return Ok(Transformed::no(plan));
        }
        let LogicalPlan::Filter(filter) = plan else { return Ok(Transformed::no(plan)) };
        let schema = filter.input.schema().clone();
        let predicate = filter.predicate.clone().transform_up(|e| rewrite_like(e, &schema))?;
        if !predicate.transformed {
            return Ok(Transformed::no(LogicalPlan::Filter(filter)));
        }
        Ok(Transformed::yes(LogicalPlan::Filter(Filter::try_new(predicate.data, filter.input)?)))
    }
}

fn rewrite_like(expr: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
    let Expr::Like(Like { negated, expr: text, pattern, escape_char: None, case_insensitive: false }) = &expr else {
        return Ok(Transformed::no(expr));
    };
    let Expr::Literal(ScalarValue::Utf8(Some(literal)) | ScalarValue::Utf8View(Some(literal)) | ScalarValue::LargeUtf8(Some(literal)), _) =
        pattern.as_ref()
    else {
        return Ok(Transformed::no(expr));
    };
    if !arrow_needs_regex(literal) || Pieces::parse(literal).is_none() || !text.get_type(schema).is_ok_and(|t| is_string(&t)) {
        return Ok(Transformed::no(expr));
    }
    let call = Expr::ScalarFunction(ScalarFunction::new_udf(
        Arc::new(FoamLike::udf()),
        vec![text.as_ref().clone(), Expr::Literal(ScalarValue::Utf8(Some(literal.clone())), None)],
    ));
    Ok(Transformed::yes(if *negated { Expr::Not(Box::new(call)) } else { call }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Scalar, StringArray};

    /// Every pattern over an alphabet of `a`, `b` and `%` up to 5 long,
    /// against every string of `a` and `b` up to 6 long (and a multi-byte
    /// one): the pieces matcher agrees with Arrow's regex-based kernel.
    #[test]
    fn pieces_agree_with_arrow_like() {
        fn words(alphabet: &[&str], max: usize) -> Vec<String> {
            let mut all = vec![String::new()];
            let mut last = vec![String::new()];
            for _ in 0..max {
                last = last.iter().flat_map(|w| alphabet.iter().map(move |c| format!("{w}{c}"))).collect();
                all.extend(last.iter().cloned());
            }
            all
        }
        let mut texts = words(&["a", "b"], 6);
        texts.push("aéb".into());
        let texts = StringArray::from(texts);
        let mut checked = 0;
        for pattern in words(&["a", "b", "%", "é"], 5) {
            let Some(pieces) = Pieces::parse(&pattern) else { continue };
            let expected = arrow::compute::kernels::comparison::like(&texts, &Scalar::new(StringArray::from(vec![pattern.as_str()]))).unwrap();
            let found = matches_all(&texts, &pieces);
            assert_eq!(found, expected, "pattern {pattern:?}");
            checked += 1;
        }
        assert!(checked > 500, "only {checked} patterns checked");
    }

    #[test]
    fn only_regex_patterns_of_text_and_percent_are_taken() {
        for taken in ["%special%requests%", "a%b", "a%b%", "%a%b", "%%a%"] {
            assert!(arrow_needs_regex(taken) && Pieces::parse(taken).is_some(), "{taken}");
        }
        for left in ["abc", "abc%", "%abc", "%abc%", "%"] {
            assert!(!arrow_needs_regex(left), "{left}");
        }
        for left in ["a_b%c", "a\\%b%", "%a_%"] {
            assert!(Pieces::parse(left).is_none(), "{left}");
        }
    }
}
