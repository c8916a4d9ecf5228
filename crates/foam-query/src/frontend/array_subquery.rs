//! `ARRAY(subquery)`: PostgreSQL's array of a subquery's rows, in the
//! subquery's order, `{}` when it has none. psql's `\du` lists each role's
//! memberships so, and drivers' catalog queries use it; DataFusion has no
//! such form ("Invalid function 'array'").
//!
//! The front end writes each one as a scalar subquery that aggregates the
//! rows with `array_agg`, its sort keys moved into the aggregate, and an
//! empty array where there are no rows (`array_agg` of none is NULL):
//!
//! ```text
//!   ARRAY(SELECT e FROM … ORDER BY o)
//!     ─▶ coalesce((SELECT array_agg(s.c ORDER BY s.k1) FROM (SELECT e AS c, o AS k1 FROM … ORDER BY o) AS s), [])
//! ```
//!
//! A sort key that is the item itself, its alias or its position sorts by
//! the item; after a set operation (`UNION`) only those are possible, as in
//! PostgreSQL. A subquery of more than one column is 42601, as there.

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    Array, Expr, Function, FunctionArg, FunctionArgExpr, FunctionArgumentClause, FunctionArgumentList, FunctionArguments, Ident, ObjectName,
    OrderBy, OrderByExpr, OrderByKind, Query, Select, SelectItem, SetExpr, Statement, TableAlias, TableFactor, TableWithJoins, Value,
    VisitMut, VisitorMut,
};
use foam_common::{FoamError, FoamResult, SqlState};

/// The derived table's name and its columns' (the item, then sort keys).
const ROWS: &str = "foam_array_rows";
const ITEM: &str = "foam_array_item";
const KEY: &str = "foam_array_key";

/// Rewrites every `ARRAY(subquery)` in `statement` (see the module
/// documentation).
pub fn rewrite(statement: &mut Statement) -> FoamResult<()> {
    struct Rewriter;
    impl VisitorMut for Rewriter {
        type Break = FoamError;
        fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<FoamError> {
            let Expr::Function(Function { name, args: FunctionArguments::Subquery(query), .. }) = expr else { return ControlFlow::Continue(()) };
            if !is_array_keyword(name) {
                return ControlFlow::Continue(());
            }
            match aggregated(query) {
                Ok(rewritten) => {
                    *expr = rewritten;
                    ControlFlow::Continue(())
                }
                Err(error) => ControlFlow::Break(error),
            }
        }
    }
    match statement.visit(&mut Rewriter) {
        ControlFlow::Break(error) => Err(error),
        ControlFlow::Continue(()) => Ok(()),
    }
}

fn is_array_keyword(name: &ObjectName) -> bool {
    matches!(name.0.as_slice(), [part] if part.as_ident().is_some_and(|ident| ident.quote_style.is_none() && ident.value.eq_ignore_ascii_case("array")))
}

/// `coalesce((SELECT array_agg(…) FROM (…) AS s), [])` for `query`.
fn aggregated(query: &Query) -> FoamResult<Expr> {
    let mut rows = query.clone();
    let order = match rows.order_by.as_ref().map(|order| &order.kind) {
        None => Vec::new(),
        Some(OrderByKind::Expressions(items)) => items.clone(),
        Some(OrderByKind::All(_)) => return Err(FoamError::FeatureNotSupported { feature: "ORDER BY ALL in ARRAY(subquery)".into() }),
    };
    let mut sort_keys = Vec::new();
    // Which of the subquery's sort keys sort by its item.
    let mut by_item = Vec::new();
    match rows.body.as_mut() {
        SetExpr::Select(select) => {
            let (item, alias) = only_item(select)?;
            let mut keys = Vec::new();
            for (n, order_item) in order.iter().enumerate() {
                by_item.push(sorts_by_item(&order_item.expr, &item, alias.as_ref()));
                let key = if by_item[n] {
                    ITEM.to_string()
                } else {
                    let key = format!("{KEY}{n}");
                    keys.push(SelectItem::ExprWithAlias { expr: order_item.expr.clone(), alias: Ident::new(&key) });
                    key
                };
                sort_keys.push(OrderByExpr { expr: column(&key), ..order_item.clone() });
            }
            select.projection = std::iter::once(SelectItem::ExprWithAlias { expr: item, alias: Ident::new(ITEM) }).chain(keys).collect();
        }
        body => {
            // After a set operation the columns are named by its first
            // select list, and only they sort.
            let Some(first) = first_select_mut(body) else {
                return Err(FoamError::FeatureNotSupported { feature: "this form of ARRAY(subquery)".into() });
            };
            let (item, alias) = only_item(first)?;
            for order_item in &order {
                if !sorts_by_item(&order_item.expr, &item, alias.as_ref()) {
                    return Err(FoamError::FeatureNotSupported { feature: "ARRAY(subquery) of a set operation sorted by other than its column".into() });
                }
                by_item.push(true);
                sort_keys.push(OrderByExpr { expr: column(ITEM), ..order_item.clone() });
            }
            first.projection = vec![SelectItem::ExprWithAlias { expr: item, alias: Ident::new(ITEM) }];
        }
    }
    // The order lives on in the aggregate; a LIMIT or OFFSET keeps the
    // subquery's own, where the item is now named ITEM.
    if rows.limit_clause.is_none() && rows.fetch.is_none() {
        rows.order_by = None;
    } else if let Some(OrderBy { kind: OrderByKind::Expressions(items), .. }) = rows.order_by.as_mut() {
        for (item, by_item) in items.iter_mut().zip(by_item) {
            if by_item {
                item.expr = Expr::Identifier(Ident::new(ITEM));
            }
        }
    }
    let clauses = if sort_keys.is_empty() { Vec::new() } else { vec![FunctionArgumentClause::OrderBy(sort_keys)] };
    let array_agg = call("array_agg", vec![column(ITEM)], clauses);
    let outer = Select {
        projection: vec![SelectItem::UnnamedExpr(array_agg)],
        from: vec![TableWithJoins {
            relation: TableFactor::Derived {
                lateral: false,
                subquery: Box::new(rows),
                alias: Some(TableAlias { name: Ident::new(ROWS), columns: Vec::new(), explicit: true, at: None }),
                sample: None,
            },
            joins: Vec::new(),
        }],
        ..empty_select()
    };
    let subquery = Query { body: Box::new(SetExpr::Select(Box::new(outer))), ..empty_query() };
    let empty = Expr::Array(Array { elem: Vec::new(), named: false });
    Ok(call("coalesce", vec![Expr::Subquery(Box::new(subquery)), empty], Vec::new()))
}

/// The call `name(args clauses)`.
pub(crate) fn call(name: &str, args: Vec<Expr>, clauses: Vec<FunctionArgumentClause>) -> Expr {
    Expr::Function(Function {
        name: ObjectName::from(vec![Ident::new(name)]),
        uses_odbc_syntax: false,
        parameters: FunctionArguments::None,
        args: FunctionArguments::List(FunctionArgumentList {
            duplicate_treatment: None,
            args: args.into_iter().map(|arg| FunctionArg::Unnamed(FunctionArgExpr::Expr(arg))).collect(),
            clauses,
        }),
        filter: None,
        null_treatment: None,
        over: None,
        within_group: Vec::new(),
    })
}

/// The one item of `select` and its alias; 42601 for more or a wildcard.
fn only_item(select: &Select) -> FoamResult<(Expr, Option<Ident>)> {
    match select.projection.as_slice() {
        [SelectItem::UnnamedExpr(expr)] => Ok((expr.clone(), None)),
        [SelectItem::ExprWithAlias { expr, alias }] => Ok((expr.clone(), Some(alias.clone()))),
        _ => Err(FoamError::Query { message: "subquery must return only one column".into(), sqlstate: SqlState::SyntaxError }),
    }
}

/// Whether a sort key names the item: the item itself, its alias, or
/// position 1.
fn sorts_by_item(key: &Expr, item: &Expr, alias: Option<&Ident>) -> bool {
    match key {
        Expr::Value(value) => matches!(&value.value, Value::Number(n, _) if n == "1"),
        Expr::Identifier(ident) if alias.is_some_and(|alias| alias.value.eq_ignore_ascii_case(&ident.value)) => true,
        _ => key == item,
    }
}

fn first_select_mut(body: &mut SetExpr) -> Option<&mut Select> {
    match body {
        SetExpr::Select(select) => Some(select),
        SetExpr::SetOperation { left, .. } => first_select_mut(left),
        SetExpr::Query(query) => first_select_mut(&mut query.body),
        _ => None,
    }
}

fn column(name: &str) -> Expr {
    Expr::CompoundIdentifier(vec![Ident::new(ROWS), Ident::new(name)])
}

/// `SELECT 1`, a query to fill in.
pub(crate) fn empty_query() -> Query {
    match datafusion::sql::sqlparser::parser::Parser::parse_sql(&datafusion::sql::sqlparser::dialect::PostgreSqlDialect {}, "SELECT 1") {
        Ok(mut statements) => match statements.pop() {
            Some(Statement::Query(query)) => *query,
            _ => unreachable!("SELECT 1 is a query"),
        },
        Err(_) => unreachable!("SELECT 1 parses"),
    }
}

fn empty_select() -> Select {
    match *empty_query().body {
        SetExpr::Select(select) => *select,
        _ => unreachable!("SELECT 1 is a select"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;

    fn rewritten(sql: &str) -> FoamResult<String> {
        let mut statement = Parser::parse_sql(&PostgreSqlDialect {}, sql).unwrap().pop().unwrap();
        rewrite(&mut statement)?;
        Ok(statement.to_string())
    }

    #[test]
    fn sort_keys_move_into_the_aggregate() {
        assert_eq!(
            rewritten("SELECT ARRAY(SELECT b.n AS x FROM b WHERE b.k = a.k ORDER BY x DESC, b.m) AS xs FROM a").unwrap(),
            "SELECT coalesce((SELECT array_agg(foam_array_rows.foam_array_item ORDER BY foam_array_rows.foam_array_item DESC, \
             foam_array_rows.foam_array_key1) FROM (SELECT b.n AS foam_array_item, b.m AS foam_array_key1 FROM b WHERE b.k = a.k) AS foam_array_rows), []) AS xs FROM a"
        );
        // A LIMIT keeps the subquery's sort, by the renamed item.
        assert_eq!(
            rewritten("SELECT ARRAY(SELECT n FROM b ORDER BY 1 LIMIT 2)").unwrap(),
            "SELECT coalesce((SELECT array_agg(foam_array_rows.foam_array_item ORDER BY foam_array_rows.foam_array_item) \
             FROM (SELECT n AS foam_array_item FROM b ORDER BY foam_array_item LIMIT 2) AS foam_array_rows), [])"
        );
    }

    #[test]
    fn set_operations_sort_only_by_their_column_and_one_column_is_required() {
        assert!(rewritten("SELECT ARRAY(SELECT n FROM b UNION SELECT m FROM c ORDER BY n)").unwrap().contains("array_agg(foam_array_rows.foam_array_item ORDER BY"));
        let other = rewritten("SELECT ARRAY(SELECT n FROM b UNION SELECT m FROM c ORDER BY n + 1)").unwrap_err();
        assert_eq!(other.sqlstate(), SqlState::FeatureNotSupported);
        let two = rewritten("SELECT ARRAY(SELECT n, m FROM b)").unwrap_err();
        assert_eq!((two.sqlstate(), two.to_string().contains("only one column")), (SqlState::SyntaxError, true));
        // A function named "array" in quotes is not the keyword.
        assert_eq!(rewritten("SELECT ARRAY[1, 2], \"array\"(x) FROM t").unwrap(), "SELECT ARRAY[1, 2], \"array\"(x) FROM t");
    }
}
