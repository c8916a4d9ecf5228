//! Scalar subqueries give one value or fail, as in PostgreSQL.
//!
//! A subquery used as an expression, `(SELECT b FROM u WHERE ...)`, must
//! return at most one row: PostgreSQL fails the statement with 21000 "more
//! than one row returned by a subquery used as an expression" otherwise,
//! and answers NULL for none. DataFusion joins an uncorrelated one to the
//! outer query, so each of its rows made a copy of the outer rows:
//! `SELECT a, (SELECT b FROM u WHERE b > 3) FROM t` answered 500 rows for
//! 50. A correlated one it refuses unless it aggregates ("Correlated scalar
//! subquery must be aggregated to return at most one row"), which common
//! lookups such as `(SELECT name FROM users u WHERE u.id = o.user_id)` and
//! psql's `\dT` are not.
//!
//! The front end makes such a subquery aggregate with
//! `foam_single_value`, which gives its one value (NULL for no rows) and
//! fails with 21000 on a second; DataFusion then plans it as any aggregated
//! scalar subquery, correlated or not, on any number of nodes:
//!
//! ```text
//!   (SELECT e FROM … WHERE …)                 ─▶ (SELECT foam_single_value(e) FROM … WHERE …)
//!   (SELECT e FROM … GROUP BY … / UNION …)    ─▶ (SELECT foam_single_value(s.c) FROM (…) AS s(c))
//! ```
//!
//! Left alone: a subquery that gives one row anyway (an aggregate without
//! GROUP BY, `LIMIT 1`), and `EXISTS`/`IN` subqueries, which are not scalar.

use std::ops::ControlFlow;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, AsArray};
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, UInt64Type};
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{Accumulator, AggregateUDF, AggregateUDFImpl, Signature, Volatility};
use datafusion::sql::sqlparser::ast::{
    Expr, Function, GroupByExpr, Ident, Query, SelectItem, SetExpr, Statement, TableAlias, TableAliasColumnDef, TableFactor, TableWithJoins, Value,
    Visit, VisitMut, Visitor, VisitorMut,
};
use foam_common::{FoamError, SqlState};

/// The aggregate the rewrite calls; sessions and workers register it.
pub const SINGLE_VALUE: &str = "foam_single_value";

/// Names of the derived table and its column when a subquery is wrapped.
const ROWS: &str = "foam_scalar_rows";
const ITEM: &str = "foam_scalar_item";

/// Rewrites the scalar subqueries of `statement` that could give more than
/// one row (see the module documentation); `is_aggregate` tells an
/// aggregate function's name.
pub fn rewrite(statement: &mut Statement, is_aggregate: &dyn Fn(&str) -> bool) {
    struct Rewriter<'a> {
        is_aggregate: &'a dyn Fn(&str) -> bool,
        /// Subqueries under `= ANY`/`ALL`, which are sets, not values.
        sets: Vec<*const Query>,
    }
    impl VisitorMut for Rewriter<'_> {
        type Break = ();
        fn pre_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
            if let Expr::AnyOp { right, .. } | Expr::AllOp { right, .. } = expr
                && let Expr::Subquery(query) = right.as_ref()
            {
                self.sets.push(query.as_ref() as *const Query);
            }
            ControlFlow::Continue(())
        }
        fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
            if let Expr::Subquery(query) = expr
                && !self.sets.contains(&(query.as_ref() as *const Query))
            {
                single_valued(query, self.is_aggregate);
            }
            ControlFlow::Continue(())
        }
    }
    let _ = statement.visit(&mut Rewriter { is_aggregate, sets: Vec::new() });
}

/// Makes `query` (a scalar subquery) aggregate with [`SINGLE_VALUE`] where it
/// could give more than one row.
fn single_valued(query: &mut Query, is_aggregate: &dyn Fn(&str) -> bool) {
    if query.with.is_some() || gives_one_row(query, is_aggregate) {
        return;
    }
    let plain = query.order_by.is_none() && query.limit_clause.is_none() && query.fetch.is_none();
    if let SetExpr::Select(select) = query.body.as_mut()
        && plain
        && select.distinct.is_none()
        && select.having.is_none()
        && matches!(&select.group_by, GroupByExpr::Expressions(keys, _) if keys.is_empty())
        && select.named_window.is_empty()
        && let [item] = select.projection.as_mut_slice()
    {
        let (inner, alias) = match item {
            SelectItem::UnnamedExpr(e) => (e.clone(), None),
            SelectItem::ExprWithAlias { expr, alias } => (expr.clone(), Some(alias.clone())),
            _ => return,
        };
        if has_window(&inner) {
            return wrap(query);
        }
        let call = single_value(inner);
        *item = match alias {
            Some(alias) => SelectItem::ExprWithAlias { expr: call, alias },
            None => SelectItem::UnnamedExpr(call),
        };
        return;
    }
    wrap(query);
}

/// `query` as `SELECT foam_single_value(s.c) FROM (query) AS s(c)`.
fn wrap(query: &mut Query) {
    let SetExpr::Select(first) = first_select(&query.body) else { return };
    if first.projection.len() != 1 || matches!(first.projection[0], SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..)) {
        // More than one column is DataFusion's error to give.
        return;
    }
    let rows = std::mem::replace(query, crate::frontend::array_subquery::empty_query());
    let SetExpr::Select(select) = query.body.as_mut() else { return };
    select.projection = vec![SelectItem::UnnamedExpr(single_value(Expr::CompoundIdentifier(vec![Ident::new(ROWS), Ident::new(ITEM)])))];
    select.from = vec![TableWithJoins {
        relation: TableFactor::Derived {
            lateral: false,
            subquery: Box::new(rows),
            alias: Some(TableAlias { explicit: true, name: Ident::new(ROWS), columns: vec![TableAliasColumnDef::from_name(ITEM)], at: None }),
            sample: None,
        },
        joins: Vec::new(),
    }];
}

fn first_select(body: &SetExpr) -> &SetExpr {
    match body {
        SetExpr::SetOperation { left, .. } => first_select(left),
        SetExpr::Query(query) => first_select(&query.body),
        other => other,
    }
}

/// Whether `query` gives at most one row whatever the data: `LIMIT 1` (or
/// 0), or a select list of aggregates without GROUP BY (or without FROM).
fn gives_one_row(query: &Query, is_aggregate: &dyn Fn(&str) -> bool) -> bool {
    if let Some(limit) = query.limit_clause.as_ref().and_then(|clause| match clause {
        datafusion::sql::sqlparser::ast::LimitClause::LimitOffset { limit: Some(limit), .. } => Some(limit),
        _ => None,
    }) && matches!(limit, Expr::Value(v) if matches!(&v.value, Value::Number(n, _) if n == "1" || n == "0"))
    {
        return true;
    }
    let SetExpr::Select(select) = query.body.as_ref() else { return false };
    if select.from.is_empty() {
        return true;
    }
    let ungrouped = matches!(&select.group_by, GroupByExpr::Expressions(keys, _) if keys.is_empty());
    ungrouped
        && select.projection.iter().all(|item| match item {
            SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => calls_aggregate(e, is_aggregate),
            _ => false,
        })
}

/// Whether `expr` calls an aggregate (not as a window function) outside a
/// subquery of its own.
fn calls_aggregate(expr: &Expr, is_aggregate: &dyn Fn(&str) -> bool) -> bool {
    calls(expr, &|f| f.over.is_none() && f.name.0.last().and_then(|p| p.as_ident()).is_some_and(|name| is_aggregate(&name.value.to_lowercase())))
}

/// Whether `expr` calls a window function outside a subquery of its own.
fn has_window(expr: &Expr) -> bool {
    calls(expr, &|f| f.over.is_some())
}

/// Whether `expr`, not counting its subqueries, calls a function `wanted`
/// takes.
fn calls(expr: &Expr, wanted: &dyn Fn(&Function) -> bool) -> bool {
    struct Finder<'a> {
        wanted: &'a dyn Fn(&Function) -> bool,
        /// How deep in subqueries of `expr` the visit is.
        depth: usize,
    }
    impl Visitor for Finder<'_> {
        type Break = ();
        fn pre_visit_query(&mut self, _query: &Query) -> ControlFlow<()> {
            self.depth += 1;
            ControlFlow::Continue(())
        }
        fn post_visit_query(&mut self, _query: &Query) -> ControlFlow<()> {
            self.depth -= 1;
            ControlFlow::Continue(())
        }
        fn pre_visit_expr(&mut self, expr: &Expr) -> ControlFlow<()> {
            match expr {
                Expr::Function(f) if self.depth == 0 && (self.wanted)(f) => ControlFlow::Break(()),
                _ => ControlFlow::Continue(()),
            }
        }
    }
    expr.visit(&mut Finder { wanted, depth: 0 }).is_break()
}

fn single_value(arg: Expr) -> Expr {
    crate::frontend::array_subquery::call(SINGLE_VALUE, vec![arg], Vec::new())
}

/// `foam_single_value(x)`: the one value of its group, NULL for none; a
/// second row fails the statement with 21000.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct SingleValue {
    signature: Signature,
}

impl SingleValue {
    pub fn udaf() -> AggregateUDF {
        AggregateUDF::new_from_impl(SingleValue { signature: Signature::any(1, Volatility::Immutable) })
    }
}

impl AggregateUDFImpl for SingleValue {
    fn name(&self) -> &str {
        SINGLE_VALUE
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        Ok(arg_types[0].clone())
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(vec![
            Arc::new(Field::new(format!("{}[value]", args.name), args.return_field.data_type().clone(), true)),
            Arc::new(Field::new(format!("{}[rows]", args.name), DataType::UInt64, false)),
        ])
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        Ok(Box::new(SingleValueAccumulator { value: ScalarValue::try_from(args.return_field.data_type())?, rows: 0 }))
    }
}

#[derive(Debug)]
struct SingleValueAccumulator {
    value: ScalarValue,
    rows: u64,
}

impl SingleValueAccumulator {
    fn add(&mut self, rows: u64, value: impl FnOnce() -> Result<ScalarValue>) -> Result<()> {
        if rows == 0 {
            return Ok(());
        }
        self.rows += rows;
        if self.rows > 1 {
            return Err(FoamError::Query { message: "more than one row returned by a subquery used as an expression".into(), sqlstate: SqlState::CardinalityViolation }.into());
        }
        self.value = value()?;
        Ok(())
    }
}

impl Accumulator for SingleValueAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let values = &values[0];
        self.add(values.len() as u64, || ScalarValue::try_from_array(values, 0))
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        let (values, rows) = (&states[0], states[1].as_primitive::<UInt64Type>());
        for at in 0..rows.len() {
            self.add(rows.value(at), || ScalarValue::try_from_array(values, at))?;
        }
        Ok(())
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(vec![self.value.clone(), ScalarValue::UInt64(Some(self.rows))])
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        Ok(self.value.clone())
    }

    fn size(&self) -> usize {
        std::mem::size_of_val(self) + self.value.size() - std::mem::size_of_val(&self.value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;

    fn rewritten(sql: &str) -> String {
        let mut statement = Parser::parse_sql(&PostgreSqlDialect {}, sql).unwrap().pop().unwrap();
        rewrite(&mut statement, &|name| matches!(name, "count" | "max" | "sum"));
        statement.to_string()
    }

    #[test]
    fn subqueries_that_could_give_rows_aggregate_and_others_stay() {
        assert_eq!(
            rewritten("SELECT a, (SELECT u.b AS x FROM u WHERE u.k = t.k) FROM t"),
            "SELECT a, (SELECT foam_single_value(u.b) AS x FROM u WHERE u.k = t.k) FROM t"
        );
        assert_eq!(
            rewritten("SELECT (SELECT b FROM u GROUP BY b)"),
            "SELECT (SELECT foam_single_value(foam_scalar_rows.foam_scalar_item) FROM (SELECT b FROM u GROUP BY b) AS foam_scalar_rows (foam_scalar_item))"
        );
        for same in [
            "SELECT (SELECT max(b) + 1 FROM u WHERE u.k = t.k) FROM t",
            "SELECT (SELECT b FROM u ORDER BY b LIMIT 1)",
            "SELECT (SELECT 5)",
            "SELECT a FROM t WHERE EXISTS (SELECT b FROM u) AND a IN (SELECT b FROM u)",
            "SELECT a FROM t WHERE a = ANY(SELECT b FROM u)",
        ] {
            assert_eq!(rewritten(same), same);
        }
        // An aggregate inside a subquery of the item does not make it one row.
        assert_eq!(
            rewritten("SELECT (SELECT (SELECT max(v.c) FROM v) + u.b FROM u)"),
            "SELECT (SELECT foam_single_value((SELECT max(v.c) FROM v) + u.b) FROM u)"
        );
    }

    #[test]
    fn a_second_row_is_a_cardinality_violation() {
        let mut one = SingleValueAccumulator { value: ScalarValue::Int32(None), rows: 0 };
        one.update_batch(&[Arc::new(datafusion::arrow::array::Int32Array::from(vec![7]))]).unwrap();
        assert_eq!(one.evaluate().unwrap(), ScalarValue::Int32(Some(7)));
        let mut merged = SingleValueAccumulator { value: ScalarValue::Int32(None), rows: 0 };
        let states: Vec<ArrayRef> = vec![Arc::new(datafusion::arrow::array::Int32Array::from(vec![None, Some(7)])), Arc::new(datafusion::arrow::array::UInt64Array::from(vec![0, 1]))];
        merged.merge_batch(&states).unwrap();
        assert_eq!(merged.evaluate().unwrap(), ScalarValue::Int32(Some(7)));
        let error = merged.merge_batch(&states).unwrap_err();
        assert_eq!(FoamError::from(error).sqlstate(), SqlState::CardinalityViolation);
    }
}
