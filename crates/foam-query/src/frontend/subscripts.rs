//! `generate_subscripts(array, dim)`: the subscripts of an array's
//! dimension, one row each, as PostgreSQL's set-returning function gives
//! them. SQLAlchemy's reflection pairs it with `unnest(indkey)` to number a
//! key's columns; DataFusion has no such function.
//!
//! FoamDB's arrays have one dimension, lower bound 1 (0 for pg_index's
//! vector columns, as PostgreSQL's `int2vector`), so the front end writes
//! it as an `unnest` of the range of subscripts (rows of the select list's
//! set-returning functions are zipped, as PostgreSQL's):
//!
//! ```text
//!   generate_subscripts(a, d)  ─▶  unnest(range(1, CASE WHEN d = 1 THEN CAST(cardinality(a) AS BIGINT) + 1 ELSE 1 END))
//! ```
//!
//! A NULL array gives no rows, as in PostgreSQL; so does a dimension other
//! than 1. The `reverse` argument is refused (0A000). A subscript of a
//! vector column (`indkey[0]`) is shifted by one for DataFusion's lists.

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{AccessExpr, Expr, Function, FunctionArguments, Statement, Subscript, VisitMut, VisitorMut};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;
use foam_common::{FoamError, FoamResult};

/// The vector columns of the catalog (pg_index's), whose subscripts start
/// at 0 as PostgreSQL's `int2vector` and `oidvector` do.
const VECTOR_COLUMNS: [&str; 4] = ["indkey", "indoption", "indclass", "indcollation"];

/// Whether `expr` names one of the [`VECTOR_COLUMNS`], in any case and
/// parentheses.
fn is_vector(expr: &Expr) -> bool {
    let named = |ident: &datafusion::sql::sqlparser::ast::Ident| VECTOR_COLUMNS.iter().any(|c| c.eq_ignore_ascii_case(&ident.value));
    match expr {
        Expr::Identifier(ident) => named(ident),
        Expr::CompoundIdentifier(parts) => parts.last().is_some_and(named),
        Expr::Nested(inner) => is_vector(inner),
        _ => false,
    }
}

/// Rewrites every `generate_subscripts` call in `statement` (see the
/// module documentation).
pub fn rewrite(statement: &mut Statement) -> FoamResult<()> {
    struct Rewriter;
    impl VisitorMut for Rewriter {
        type Break = FoamError;
        fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<FoamError> {
            // `indkey[0]`: a vector counts from 0, DataFusion's lists from 1.
            if let Expr::CompoundFieldAccess { root, access_chain } = expr
                && let Some((AccessExpr::Subscript(Subscript::Index { index }), before)) = access_chain.split_last_mut()
                && match before {
                    [] => is_vector(root),
                    [.., AccessExpr::Dot(column)] => is_vector(column),
                    _ => false,
                }
            {
                let text = format!("({index}) + 1");
                match Parser::new(&PostgreSqlDialect {}).try_with_sql(&text).and_then(|mut parser| parser.parse_expr()) {
                    Ok(shifted) => *index = shifted,
                    Err(error) => return ControlFlow::Break(FoamError::internal(format!("vector subscript rewrite: {error}"))),
                }
                return ControlFlow::Continue(());
            }
            let Expr::Function(Function { name, args: FunctionArguments::List(list), .. }) = expr else { return ControlFlow::Continue(()) };
            let named = name.0.last().and_then(|part| part.as_ident()).is_some_and(|ident| ident.value.eq_ignore_ascii_case("generate_subscripts"));
            if !named || name.0.len() > 2 {
                return ControlFlow::Continue(());
            }
            let args = crate::frontend::plain_arguments(list);
            let (array, dimension) = match args.as_slice() {
                [array, dimension] if list.args.len() == 2 => (array, dimension),
                _ => return ControlFlow::Break(FoamError::FeatureNotSupported { feature: "generate_subscripts other than (array, dimension)".into() }),
            };
            // pg_index's vectors (int2vector, oidvector) count from 0.
            let first = if is_vector(array) { 0 } else { 1 };
            let text = format!("unnest(range({first}, CASE WHEN ({dimension}) = 1 THEN CAST(cardinality({array}) AS BIGINT) + {first} ELSE {first} END))");
            match Parser::new(&PostgreSqlDialect {}).try_with_sql(&text).and_then(|mut parser| parser.parse_expr()) {
                Ok(rewritten) => {
                    *expr = rewritten;
                    ControlFlow::Continue(())
                }
                Err(error) => ControlFlow::Break(FoamError::internal(format!("generate_subscripts rewrite: {error}"))),
            }
        }
    }
    match statement.visit(&mut Rewriter) {
        ControlFlow::Break(error) => Err(error),
        ControlFlow::Continue(()) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subscripts_become_an_unnest_of_their_range() {
        let mut statement = Parser::parse_sql(&PostgreSqlDialect {}, "SELECT unnest(k) AS a, generate_subscripts(k, 1) AS o FROM t").unwrap().remove(0);
        rewrite(&mut statement).unwrap();
        assert_eq!(
            statement.to_string(),
            "SELECT unnest(k) AS a, unnest(range(1, CASE WHEN (1) = 1 THEN CAST(cardinality(k) AS BIGINT) + 1 ELSE 1 END)) AS o FROM t"
        );
        let mut reversed = Parser::parse_sql(&PostgreSqlDialect {}, "SELECT generate_subscripts(k, 1, true) FROM t").unwrap().remove(0);
        assert!(matches!(rewrite(&mut reversed), Err(FoamError::FeatureNotSupported { .. })));
        let mut vector = Parser::parse_sql(&PostgreSqlDialect {}, "SELECT generate_subscripts(i.indkey, 1) FROM pg_index AS i").unwrap().remove(0);
        rewrite(&mut vector).unwrap();
        assert!(vector.to_string().contains("range(0, "), "{vector}");
        let mut element = Parser::parse_sql(&PostgreSqlDialect {}, "SELECT i.INDKEY[0], a[1] FROM pg_index AS i").unwrap().remove(0);
        rewrite(&mut element).unwrap();
        assert_eq!(element.to_string(), "SELECT i.INDKEY[(0) + 1], a[1] FROM pg_index AS i");
    }
}
