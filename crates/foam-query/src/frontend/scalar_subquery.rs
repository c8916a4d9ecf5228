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
//! `foam_single_value`, which gives its one value (NULL for no rows) or
//! says there were several, and reads the value with `foam_one_value`,
//! which fails with 21000 on several; DataFusion then plans it as any
//! aggregated scalar subquery, correlated or not, on any number of nodes:
//!
//! ```text
//!   (SELECT e FROM … WHERE …)               ─▶ foam_one_value((SELECT foam_single_value(e) FROM … WHERE …))
//!   (SELECT e FROM … GROUP BY … / UNION …)  ─▶ foam_one_value((SELECT foam_single_value(s.c) FROM (…) AS s(c)))
//!   (WITH … SELECT e …)                     ─▶ foam_one_value((SELECT foam_single_value(s.c) FROM (WITH …) AS s(c)))
//! ```
//!
//! The check is outside the subquery because DataFusion evaluates a
//! correlated one for every group of inner rows (`GROUP BY u.k` for `WHERE
//! u.k = t.k`), also groups no outer row reads, such as NULL keys'.
//!
//! Left alone: a subquery that gives one row anyway (an aggregate without
//! GROUP BY, `LIMIT 1`, a GROUP BY whose keys the WHERE holds equal to outer
//! columns), and `EXISTS`/`IN` subqueries, which are not scalar.

use std::ops::ControlFlow;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, BooleanArray, StructArray, make_array};
use datafusion::arrow::buffer::NullBuffer;
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Fields, UInt64Type};
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::sql::sqlparser::ast::{
    BinaryOperator, Expr, Function, GroupByExpr, Ident, Query, Select, SelectItem, SetExpr, Statement, TableAlias, TableAliasColumnDef, TableFactor,
    TableWithJoins, Value, Visit, VisitMut, Visitor, VisitorMut,
};
use foam_common::{FoamError, SqlState};

/// The aggregate the rewrite calls and the function that reads its value;
/// sessions and workers register both.
pub const SINGLE_VALUE: &str = "foam_single_value";
pub const ONE_VALUE: &str = "foam_one_value";

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
                && single_valued(query, self.is_aggregate)
            {
                let subquery = std::mem::replace(expr, Expr::Value(Value::Null.into()));
                *expr = crate::frontend::array_subquery::call(ONE_VALUE, vec![subquery], Vec::new());
            }
            ControlFlow::Continue(())
        }
    }
    let _ = statement.visit(&mut Rewriter { is_aggregate, sets: Vec::new() });
}

/// Makes `query` (a scalar subquery) aggregate with [`SINGLE_VALUE`] where it
/// could give more than one row; whether it did.
fn single_valued(query: &mut Query, is_aggregate: &dyn Fn(&str) -> bool) -> bool {
    if let SetExpr::Select(select) = query.body.as_mut()
        && matches!(&select.group_by, GroupByExpr::Expressions(keys, _) if !keys.is_empty())
        && groups_fixed_by_filter(select)
    {
        constants_to_having(select);
    }
    if let SetExpr::Select(select) = query.body.as_mut()
        && matches!(select.distinct, Some(datafusion::sql::sqlparser::ast::Distinct::Distinct))
        && matches!(&select.group_by, GroupByExpr::Expressions(keys, _) if keys.is_empty())
        && groups_fixed_by_filter(select)
    {
        // `SELECT DISTINCT u.k ... WHERE u.k = t.k`: every row has the one
        // value, which `min` gives as DataFusion decorrelates it.
        select.distinct = None;
        for item in &mut select.projection {
            if let SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } = item {
                *e = crate::frontend::array_subquery::call("min", vec![e.clone()], Vec::new());
            }
        }
        return false;
    }
    if gives_one_row(query, is_aggregate) {
        return false;
    }
    let plain = query.with.is_none()
        && query.order_by.is_none() && query.limit_clause.is_none() && query.fetch.is_none();
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
            _ => return false,
        };
        if has_window(&inner) || returns_rows(&inner) {
            return wrap(query);
        }
        let call = single_value(inner);
        *item = match alias {
            Some(alias) => SelectItem::ExprWithAlias { expr: call, alias },
            None => SelectItem::UnnamedExpr(call),
        };
        return true;
    }
    wrap(query)
}

/// `query` as `SELECT foam_single_value(s.c) FROM (query) AS s(c)`; whether
/// it could be.
fn wrap(query: &mut Query) -> bool {
    let SetExpr::Select(first) = first_select(&query.body) else { return false };
    if first.projection.len() != 1 || matches!(first.projection[0], SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..)) {
        // More than one column is DataFusion's error to give.
        return false;
    }
    let rows = std::mem::replace(query, crate::frontend::array_subquery::empty_query());
    let SetExpr::Select(select) = query.body.as_mut() else { return false };
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
    true
}

fn first_select(body: &SetExpr) -> &SetExpr {
    match body {
        SetExpr::SetOperation { left, .. } => first_select(left),
        SetExpr::Query(query) => first_select(&query.body),
        other => other,
    }
}

/// Whether `query` gives at most one row whatever the data: `LIMIT 1` (or
/// 0), or a select list of aggregates without GROUP BY (or without FROM),
/// none of them returning rows of its own.
fn gives_one_row(query: &Query, is_aggregate: &dyn Fn(&str) -> bool) -> bool {
    if let Some(limit) = query.limit_clause.as_ref().and_then(|clause| match clause {
        datafusion::sql::sqlparser::ast::LimitClause::LimitOffset { limit: Some(limit), .. } => Some(limit),
        _ => None,
    }) && matches!(limit, Expr::Value(v) if matches!(&v.value, Value::Number(n, _) if n == "1" || n == "0"))
    {
        return true;
    }
    let SetExpr::Select(select) = query.body.as_ref() else { return false };
    let item_returns_rows = |item: &SelectItem| matches!(item, SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } if returns_rows(e));
    if select.projection.iter().any(item_returns_rows) {
        return false;
    }
    if select.from.is_empty() {
        return true;
    }
    if groups_fixed_by_filter(select) {
        return true;
    }
    let ungrouped = matches!(&select.group_by, GroupByExpr::Expressions(keys, _) if keys.is_empty());
    ungrouped
        && select.projection.iter().all(|item| match item {
            SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => calls_aggregate(e, is_aggregate),
            _ => false,
        })
}

/// Whether `select` is grouped by keys its WHERE holds equal to an outer
/// column or a literal (`WHERE u.k = t.k ... GROUP BY u.k`, or `SELECT
/// DISTINCT u.k ... WHERE u.k = t.k`): one group at most, which DataFusion decorrelates as it stands (a derived table
/// around it would hide the correlation from it).
fn groups_fixed_by_filter(select: &Select) -> bool {
    let GroupByExpr::Expressions(keys, modifiers) = &select.group_by else { return false };
    let Some(filter) = &select.selection else { return false };
    if !modifiers.is_empty() {
        return false;
    }
    // SELECT DISTINCT groups by its items.
    let items: Vec<Expr>;
    let keys = match (keys.is_empty(), &select.distinct) {
        (false, _) => keys,
        (true, Some(datafusion::sql::sqlparser::ast::Distinct::Distinct)) => {
            items = select
                .projection
                .iter()
                .filter_map(|item| match item {
                    SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => Some(e.clone()),
                    _ => None,
                })
                .collect();
            if items.len() != select.projection.len() {
                return false;
            }
            &items
        }
        (true, _) => return false,
    };
    // The names the subquery's own FROM items go by.
    let mut own: Vec<String> = Vec::new();
    for from in &select.from {
        for relation in std::iter::once(&from.relation).chain(from.joins.iter().map(|join| &join.relation)) {
            match relation {
                TableFactor::Table { alias: Some(alias), .. } | TableFactor::Derived { alias: Some(alias), .. } => own.push(alias.name.value.to_lowercase()),
                TableFactor::Table { name, .. } => own.extend(name.0.last().and_then(|part| part.as_ident()).map(|i| i.value.to_lowercase())),
                _ => return false,
            }
        }
    }
    let fixed_value = |expr: &Expr| match expr {
        Expr::Value(_) => true,
        Expr::CompoundIdentifier(parts) => parts.len() >= 2 && !own.contains(&parts[parts.len() - 2].value.to_lowercase()),
        _ => false,
    };
    let mut conjuncts = vec![filter];
    let mut fixed: Vec<String> = Vec::new();
    while let Some(conjunct) = conjuncts.pop() {
        match conjunct {
            Expr::BinaryOp { left, op: BinaryOperator::And, right } => conjuncts.extend([left.as_ref(), right.as_ref()]),
            Expr::Nested(inner) => conjuncts.push(inner),
            Expr::BinaryOp { left, op: BinaryOperator::Eq, right } => {
                if fixed_value(right) {
                    fixed.push(left.to_string());
                }
                if fixed_value(left) {
                    fixed.push(right.to_string());
                }
            }
            _ => {}
        }
    }
    keys.iter().all(|key| fixed.contains(&key.to_string()))
}

/// A GROUP BY subquery left as it stands stays correlated only while its
/// WHERE holds the keys equal to outer columns: DataFusion's simplifier
/// folds `u.k = t.k AND false` to `false`, after which the plan fails
/// DataFusion's own check ("A GROUP BY clause in a scalar correlated
/// subquery cannot contain non-correlated columns"; fuzz seed 59391 w37).
/// A conjunct that reads no column (nor calls a function, which could be
/// volatile) keeps every row or none, before grouping or after alike: it
/// moves to HAVING.
fn constants_to_having(select: &mut Select) {
    let Some(filter) = select.selection.take() else { return };
    let mut conjuncts = vec![filter];
    let (mut kept, mut moved) = (Vec::new(), Vec::new());
    while let Some(conjunct) = conjuncts.pop() {
        match conjunct {
            Expr::BinaryOp { left, op: BinaryOperator::And, right } => conjuncts.extend([*right, *left]),
            Expr::Nested(inner) if matches!(inner.as_ref(), Expr::BinaryOp { op: BinaryOperator::And, .. } | Expr::Nested(_)) => conjuncts.push(*inner),
            conjunct if reads_nothing(&conjunct) => moved.push(conjunct),
            conjunct => kept.push(conjunct),
        }
    }
    let and_all = |exprs: Vec<Expr>| {
        exprs.into_iter().reduce(|left, right| Expr::BinaryOp { left: Box::new(left), op: BinaryOperator::And, right: Box::new(right) })
    };
    select.selection = and_all(kept);
    if !moved.is_empty() {
        select.having = and_all(select.having.take().into_iter().chain(moved.into_iter().map(|e| Expr::Nested(Box::new(e)))).collect());
    }
}

/// Whether `expr` reads no column and calls no function or subquery.
fn reads_nothing(expr: &Expr) -> bool {
    struct Reads;
    impl Visitor for Reads {
        type Break = ();
        fn pre_visit_query(&mut self, _query: &Query) -> ControlFlow<()> {
            ControlFlow::Break(())
        }
        fn pre_visit_expr(&mut self, expr: &Expr) -> ControlFlow<()> {
            match expr {
                Expr::Identifier(_) | Expr::CompoundIdentifier(_) | Expr::Function(_) => ControlFlow::Break(()),
                _ => ControlFlow::Continue(()),
            }
        }
    }
    expr.visit(&mut Reads).is_continue()
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

/// Whether `expr` gives rows of its own: an `unnest` (a select list's
/// `generate_series` is one, `function_tables.rs`).
fn returns_rows(expr: &Expr) -> bool {
    calls(expr, &|f| matches!(f.name.0.as_slice(), [part] if part.as_ident().is_some_and(|name| name.value.eq_ignore_ascii_case("unnest"))))
}

/// Whether `expr`, not counting its subqueries, calls a function `wanted`
/// takes.
pub(crate) fn calls(expr: &Expr, wanted: &dyn Fn(&Function) -> bool) -> bool {
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

/// `foam_single_value(x)`: the one value of its group as `{value, many}`,
/// `{NULL, false}` for none and `{NULL, true}` for several. It does not fail
/// itself: DataFusion evaluates a correlated subquery's aggregate for every
/// group of the inner rows, outer rows matching them or not (a NULL key's
/// group too), where PostgreSQL only runs it for each outer row.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct SingleValue {
    signature: Signature,
}

impl SingleValue {
    pub fn udaf() -> AggregateUDF {
        AggregateUDF::new_from_impl(SingleValue { signature: Signature::any(1, Volatility::Immutable) })
    }
}

/// The fields of [`SingleValue`]'s struct for a value of type `value`.
fn single_value_fields(value: &DataType) -> Fields {
    Fields::from(vec![Field::new("value", value.clone(), true), Field::new("many", DataType::Boolean, false)])
}

impl AggregateUDFImpl for SingleValue {
    fn name(&self) -> &str {
        SINGLE_VALUE
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Struct(single_value_fields(&arg_types[0])))
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(vec![
            Arc::new(Field::new(format!("{}[value]", args.name), args.input_fields[0].data_type().clone(), true)),
            Arc::new(Field::new(format!("{}[rows]", args.name), DataType::UInt64, false)),
        ])
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        let value_type = args.exprs[0].data_type(args.schema)?;
        Ok(Box::new(SingleValueAccumulator { value: ScalarValue::try_from(&value_type)?, rows: 0 }))
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
        self.rows = self.rows.saturating_add(rows);
        if self.rows == 1 {
            self.value = value()?;
        }
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
        let many = self.rows > 1;
        let value = if many { ScalarValue::try_from(self.value.data_type())? } else { self.value.clone() };
        let fields = single_value_fields(&value.data_type());
        let columns: Vec<ArrayRef> = vec![value.to_array()?, Arc::new(BooleanArray::from(vec![many]))];
        Ok(ScalarValue::Struct(Arc::new(StructArray::try_new(fields, columns, None)?)))
    }

    fn size(&self) -> usize {
        std::mem::size_of_val(self) + self.value.size() - std::mem::size_of_val(&self.value)
    }
}

/// `foam_one_value(s)`: the value of [`SingleValue`]'s struct `s`, NULL for
/// a NULL `s`; fails with 21000 where `s` says several rows. Evaluated with
/// the outer query's rows, so only a subquery some row reads can fail.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct OneValue {
    signature: Signature,
}

impl OneValue {
    pub fn udf() -> ScalarUDF {
        ScalarUDF::new_from_impl(OneValue { signature: Signature::any(1, Volatility::Immutable) })
    }
}

impl ScalarUDFImpl for OneValue {
    fn name(&self) -> &str {
        ONE_VALUE
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        match &arg_types[0] {
            DataType::Struct(fields) if fields.len() == 2 => Ok(fields[0].data_type().clone()),
            other => Err(datafusion::common::DataFusionError::Plan(format!("{ONE_VALUE} takes {SINGLE_VALUE}'s struct, not {other}"))),
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let scalar = matches!(args.args[0], ColumnarValue::Scalar(_));
        let array = args.args[0].to_array(args.number_rows)?;
        let packed = array.as_struct();
        let many = packed.column(1).as_boolean();
        if (0..packed.len()).any(|row| packed.is_valid(row) && many.is_valid(row) && many.value(row)) {
            return Err(FoamError::Query { message: "more than one row returned by a subquery used as an expression".into(), sqlstate: SqlState::CardinalityViolation }.into());
        }
        let value = packed.column(0);
        let nulls = NullBuffer::union(packed.nulls(), value.nulls());
        let value = make_array(value.to_data().into_builder().nulls(nulls).build()?);
        if scalar { Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(&value, 0)?)) } else { Ok(ColumnarValue::Array(value)) }
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
            "SELECT a, foam_one_value((SELECT foam_single_value(u.b) AS x FROM u WHERE u.k = t.k)) FROM t"
        );
        assert_eq!(
            rewritten("SELECT (SELECT b FROM u GROUP BY b)"),
            "SELECT foam_one_value((SELECT foam_single_value(foam_scalar_rows.foam_scalar_item) FROM (SELECT b FROM u GROUP BY b) AS foam_scalar_rows (foam_scalar_item)))"
        );
        assert_eq!(
            rewritten("SELECT (WITH w AS (SELECT b FROM u) SELECT b FROM w)"),
            "SELECT foam_one_value((SELECT foam_single_value(foam_scalar_rows.foam_scalar_item) FROM (WITH w AS (SELECT b FROM u) SELECT b FROM w) AS foam_scalar_rows (foam_scalar_item)))"
        );
        for same in [
            "SELECT (SELECT max(b) + 1 FROM u WHERE u.k = t.k) FROM t",
            "SELECT (SELECT b FROM u ORDER BY b LIMIT 1)",
            "SELECT (SELECT 5)",
            "SELECT (WITH w AS (SELECT b FROM u) SELECT max(b) FROM w)",
            "SELECT a FROM t WHERE EXISTS (SELECT b FROM u) AND a IN (SELECT b FROM u)",
            "SELECT a FROM t WHERE a = ANY(SELECT b FROM u)",
            // One group at most: its key is held equal to an outer column.
            "SELECT a FROM t WHERE a >= (SELECT count(x.c) FROM u AS x WHERE x.d = t.d AND x.c > 1 GROUP BY x.d)",
        ] {
            assert_eq!(rewritten(same), same);
        }
        // A conjunct that reads nothing goes to HAVING, where folding it
        // leaves the correlation in place.
        assert_eq!(
            rewritten("SELECT a FROM t WHERE a = (SELECT count(*) FROM u AS x WHERE x.d = t.d AND 1 IN (2, 3) AND ((x.c > 0 AND NOT true)) GROUP BY x.d)"),
            "SELECT a FROM t WHERE a = (SELECT count(*) FROM u AS x WHERE x.d = t.d AND x.c > 0 GROUP BY x.d HAVING (1 IN (2, 3)) AND (NOT true))"
        );
        assert_eq!(rewritten("SELECT (SELECT DISTINCT x.d FROM u AS x WHERE x.d = t.d) FROM t"), "SELECT (SELECT min(x.d) FROM u AS x WHERE x.d = t.d) FROM t");
        // A key equal to a column of the subquery's own is not fixed.
        assert!(rewritten("SELECT (SELECT count(*) FROM u AS x JOIN v ON true WHERE x.d = v.d GROUP BY x.d) FROM t").contains(SINGLE_VALUE));
        // An aggregate inside a subquery of the item does not make it one row.
        assert_eq!(
            rewritten("SELECT (SELECT (SELECT max(v.c) FROM v) + u.b FROM u)"),
            "SELECT foam_one_value((SELECT foam_single_value((SELECT max(v.c) FROM v) + u.b) FROM u))"
        );
    }

    fn one_value(packed: ScalarValue) -> Result<ScalarValue> {
        let args = ScalarFunctionArgs {
            args: vec![ColumnarValue::Scalar(packed.clone())],
            arg_fields: vec![Arc::new(Field::new("s", packed.data_type(), true))],
            number_rows: 1,
            return_field: Arc::new(Field::new("v", DataType::Int32, true)),
            config_options: Arc::new(Default::default()),
        };
        match OneValue::udf().invoke_with_args(args)? {
            ColumnarValue::Scalar(value) => Ok(value),
            ColumnarValue::Array(array) => ScalarValue::try_from_array(&array, 0),
        }
    }

    #[test]
    fn a_second_row_fails_only_where_the_value_is_read() {
        let mut one = SingleValueAccumulator { value: ScalarValue::Int32(None), rows: 0 };
        one.update_batch(&[Arc::new(datafusion::arrow::array::Int32Array::from(vec![7]))]).unwrap();
        assert_eq!(one_value(one.evaluate().unwrap()).unwrap(), ScalarValue::Int32(Some(7)));
        let mut merged = SingleValueAccumulator { value: ScalarValue::Int32(None), rows: 0 };
        let states: Vec<ArrayRef> = vec![Arc::new(datafusion::arrow::array::Int32Array::from(vec![None, Some(7)])), Arc::new(datafusion::arrow::array::UInt64Array::from(vec![0, 1]))];
        merged.merge_batch(&states).unwrap();
        assert_eq!(one_value(merged.evaluate().unwrap()).unwrap(), ScalarValue::Int32(Some(7)));
        // Several rows: the aggregate answers, reading its value fails.
        merged.merge_batch(&states).unwrap();
        let several = merged.evaluate().unwrap();
        assert_eq!(FoamError::from(one_value(several).unwrap_err()).sqlstate(), SqlState::CardinalityViolation);
        let none = SingleValueAccumulator { value: ScalarValue::Int32(None), rows: 0 }.evaluate().unwrap();
        assert_eq!(one_value(none).unwrap(), ScalarValue::Int32(None));
    }
}
