//! A LATERAL subquery with a LIMIT, the top rows of another table for each
//! row (`LEFT JOIN LATERAL (SELECT ... WHERE b.k = a.k ORDER BY b.t DESC
//! LIMIT 1) s ON true`), written so that DataFusion can decorrelate it:
//! it refused every outer reference under a LIMIT ("Physical plan does not
//! support logical expression OuterReferenceColumn").
//!
//! The LIMIT becomes a row number within each correlation key, and the
//! correlation moves out of the numbered rows, where DataFusion joins on
//! it as it does for a LATERAL subquery without LIMIT:
//!
//! ```text
//!   LATERAL (SELECT items FROM f WHERE k1 = a.x AND rest ORDER BY o LIMIT n OFFSET m) s
//!     ─▶ LATERAL (SELECT foam_lateral.* EXCLUDE (foam_lateral_rn, foam_lateral_k1)
//!                 FROM (SELECT items, k1 AS foam_lateral_k1,
//!                              row_number() OVER (PARTITION BY k1 ORDER BY o) AS foam_lateral_rn
//!                       FROM f WHERE rest) AS foam_lateral
//!                 WHERE foam_lateral.foam_lateral_rn > m AND foam_lateral.foam_lateral_rn <= m + n
//!                   AND foam_lateral.foam_lateral_k1 = a.x) s
//! ```
//!
//! Rows of one key are the rows the subquery gives for an outer row whose
//! `a.x` equals it, so the first n of them are its LIMIT's (ties in the
//! ORDER BY broken arbitrarily by both). Only this shape is rewritten: one
//! SELECT without DISTINCT, GROUP BY, HAVING, aggregates or windows, a
//! constant LIMIT and OFFSET, no item returning rows of its own, and
//! outer references only in WHERE equalities `inner = outer` whose inner
//! side is a column of one of the subquery's tables that compares as
//! stored (not a float, where `0 = -0` would number two partitions, nor a
//! CHAR), the outer side reading only the relations before it (qualified;
//! an unqualified name is the subquery's). Anything else is left to
//! DataFusion as written.

use std::collections::HashSet;
use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    BinaryOperator, ExcludeSelectItem, Expr, GroupByExpr, Ident, LimitClause, ObjectName, OrderByExpr, OrderByKind, Query, SelectItem, SelectItemQualifiedWildcardKind,
    SetExpr, Statement, TableFactor, TableWithJoins, Value, Visit, VisitMut, Visitor, VisitorMut, WildcardAdditionalOptions, WindowSpec, WindowType,
};

use crate::frontend::array_subquery::call;

/// The numbered rows' alias and columns.
const ROWS: &str = "foam_lateral";
const ROW_NUMBER: &str = "foam_lateral_rn";
const KEY: &str = "foam_lateral_k";

/// What the rewrite asks of the session: which functions aggregate, and
/// whether a table's column compares as it is stored (a key rows are
/// numbered by: not a float, where `0 = -0`, nor a CHAR, where trailing
/// blanks do not count; `None` for no such table or column).
pub struct Names<'a> {
    pub is_aggregate: &'a dyn Fn(&str) -> bool,
    pub exact_column: &'a dyn Fn(&str, &str) -> Option<bool>,
}

/// `statement` with each such LATERAL subquery rewritten (see the module
/// documentation).
pub fn rewrite(statement: &mut Statement, names: &Names) {
    let _ = statement.visit(&mut Laterals { names });
}

struct Laterals<'a> {
    names: &'a Names<'a>,
}

impl VisitorMut for Laterals<'_> {
    type Break = ();

    fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        from_lists(query.body.as_mut(), self.names);
        ControlFlow::Continue(())
    }
}

fn from_lists(body: &mut SetExpr, names: &Names) {
    match body {
        SetExpr::Select(select) => from_list(&mut select.from, names),
        SetExpr::SetOperation { left, right, .. } => {
            from_lists(left, names);
            from_lists(right, names);
        }
        _ => {}
    }
}

/// Each LATERAL subquery of a FROM list, given the relations before it.
fn from_list(from: &mut [TableWithJoins], names: &Names) {
    let mut before: HashSet<String> = HashSet::new();
    for item in from {
        for factor in std::iter::once(&mut item.relation).chain(item.joins.iter_mut().map(|join| &mut join.relation)) {
            numbered(factor, &before, names);
            names_of(factor, &mut before);
        }
    }
}

/// A name as PostgreSQL reads it: lower-cased unless quoted.
fn folded(ident: &Ident) -> String {
    if ident.quote_style.is_some() { ident.value.clone() } else { ident.value.to_lowercase() }
}

/// The names (aliases, or table names) a FROM item's columns are qualified
/// by, folded, into `names`.
fn names_of(factor: &TableFactor, names: &mut HashSet<String>) {
    let alias_name = |alias: &Option<datafusion::sql::sqlparser::ast::TableAlias>| alias.as_ref().map(|alias| folded(&alias.name));
    match factor {
        TableFactor::Table { name, alias, .. } => {
            let own = name.0.last().and_then(|part| part.as_ident()).map(folded);
            names.extend(alias_name(alias).or(own));
        }
        TableFactor::NestedJoin { table_with_joins, .. } => {
            names_of(&table_with_joins.relation, names);
            for join in &table_with_joins.joins {
                names_of(&join.relation, names);
            }
        }
        TableFactor::Derived { alias, .. } | TableFactor::Function { alias, .. } | TableFactor::UNNEST { alias, .. } => names.extend(alias_name(alias)),
        _ => {}
    }
}

/// The folded qualifiers `node` reads columns by (`a` of `a.x`), and
/// whether it reads an unqualified name.
fn qualifiers<V: Visit>(node: &V) -> (HashSet<String>, bool) {
    struct Reader {
        qualifiers: HashSet<String>,
        unqualified: bool,
    }
    impl Visitor for Reader {
        type Break = ();
        fn pre_visit_expr(&mut self, expr: &Expr) -> ControlFlow<()> {
            match expr {
                Expr::CompoundIdentifier(parts) if parts.len() >= 2 => {
                    self.qualifiers.insert(folded(&parts[parts.len() - 2]));
                }
                Expr::Identifier(_) => self.unqualified = true,
                _ => {}
            }
            ControlFlow::Continue(())
        }
    }
    let mut reader = Reader { qualifiers: HashSet::new(), unqualified: false };
    let _ = node.visit(&mut reader);
    (reader.qualifiers, reader.unqualified)
}

/// A non-negative integer literal's value.
fn constant(expr: &Expr) -> Option<u64> {
    match expr {
        Expr::Value(value) => match &value.value {
            Value::Number(n, _) => n.parse().ok(),
            _ => None,
        },
        _ => None,
    }
}

/// The conjuncts of a WHERE.
fn conjuncts(expr: Expr, into: &mut Vec<Expr>) {
    match expr {
        Expr::BinaryOp { left, op: BinaryOperator::And, right } => {
            conjuncts(*left, into);
            conjuncts(*right, into);
        }
        Expr::Nested(inner) if matches!(inner.as_ref(), Expr::BinaryOp { op: BinaryOperator::And, .. }) => conjuncts(*inner, into),
        other => into.push(other),
    }
}

fn and_all(exprs: Vec<Expr>) -> Option<Expr> {
    exprs.into_iter().reduce(|left, right| Expr::BinaryOp { left: Box::new(left), op: BinaryOperator::And, right: Box::new(right) })
}

/// Whether `expr` calls an aggregate or a window function, outside its
/// subqueries.
fn aggregates(expr: &Expr, is_aggregate: &dyn Fn(&str) -> bool) -> bool {
    crate::frontend::scalar_subquery::calls(expr, &|function| {
        function.over.is_some() || function.name.0.last().and_then(|part| part.as_ident()).is_some_and(|name| is_aggregate(&name.value.to_lowercase()))
    })
}

/// `factor` rewritten when it is such a LATERAL subquery and `outer` (the
/// relations before it) are what it reads besides its own.
fn numbered(factor: &mut TableFactor, outer: &HashSet<String>, names: &Names) {
    let TableFactor::Derived { lateral: true, subquery, .. } = factor else { return };
    let Some(rewritten) = rewritten(subquery, outer, names) else { return };
    **subquery = rewritten;
}

fn rewritten(query: &Query, outer: &HashSet<String>, names: &Names) -> Option<Query> {
    if query.with.is_some() || query.fetch.is_some() {
        return None;
    }
    let Some(LimitClause::LimitOffset { limit: Some(limit), offset, limit_by }) = &query.limit_clause else { return None };
    let limit = constant(limit)?;
    let offset = match offset {
        Some(offset) => constant(&offset.value)?,
        None => 0,
    };
    if !limit_by.is_empty() {
        return None;
    }
    let SetExpr::Select(select) = query.body.as_ref() else { return None };
    let plain = select.distinct.is_none()
        && select.having.is_none()
        && select.named_window.is_empty()
        && select.qualify.is_none()
        && matches!(&select.group_by, GroupByExpr::Expressions(keys, modifiers) if keys.is_empty() && modifiers.is_empty());
    // An item returning rows of its own (an unnest, a select list's
    // generate_series) would give a row number several rows.
    let returns_rows = |name: &str| matches!(name, "unnest" | "generate_series" | "range" | "generate_subscripts");
    let items_plain = select.projection.iter().all(|item| match item {
        SelectItem::UnnamedExpr(expr) | SelectItem::ExprWithAlias { expr, .. } => !aggregates(expr, &|name| (names.is_aggregate)(name) || returns_rows(name)),
        SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..) => true,
        _ => false,
    });
    if !plain || !items_plain {
        return None;
    }
    let mut inner_names = HashSet::new();
    for item in &select.from {
        names_of(&item.relation, &mut inner_names);
        for join in &item.joins {
            names_of(&join.relation, &mut inner_names);
        }
    }
    let reads_outer = |qualifiers: &HashSet<String>| qualifiers.iter().any(|q| !inner_names.contains(q));
    // The WHERE's equalities with the outer rows, and the rest.
    let mut all = Vec::new();
    if let Some(selection) = select.selection.clone() {
        conjuncts(selection, &mut all);
    }
    let (mut keys, mut rest) = (Vec::new(), Vec::new());
    for conjunct in all {
        let (read, _) = qualifiers(&conjunct);
        if !reads_outer(&read) {
            rest.push(conjunct);
            continue;
        }
        let Expr::BinaryOp { left, op: BinaryOperator::Eq, right } = &conjunct else { return None };
        let side = |expr: &Expr| {
            let (read, unqualified) = qualifiers(expr);
            let outer_only = !read.is_empty() && !unqualified && read.iter().all(|q| outer.contains(q) && !inner_names.contains(q));
            (outer_only, !reads_outer(&read))
        };
        match (side(left), side(right)) {
            ((false, true), (true, _)) => keys.push((left.as_ref().clone(), right.as_ref().clone())),
            ((true, _), (false, true)) => keys.push((right.as_ref().clone(), left.as_ref().clone())),
            _ => return None,
        }
    }
    if keys.is_empty() || !keys.iter().all(|(inner, _)| exact_key(inner, &select.from, names)) {
        return None;
    }
    // Nothing else reads the outer rows (nor a query further out).
    let mut rest_select = select.as_ref().clone();
    rest_select.selection = and_all(rest.clone());
    if reads_outer(&qualifiers(&rest_select).0) {
        return None;
    }
    // The ORDER BY, with items' aliases and positions read as the items.
    let order: Vec<OrderByExpr> = match &query.order_by {
        None => Vec::new(),
        Some(order_by) => match &order_by.kind {
            OrderByKind::Expressions(exprs) => exprs.iter().map(|e| order_item(e, &select.projection)).collect::<Option<_>>()?,
            OrderByKind::All(_) => return None,
        },
    };
    if reads_outer(&qualifiers(&order).0) {
        return None;
    }
    let mut numbered = rest_select;
    for (at, (inner, _)) in keys.iter().enumerate() {
        numbered.projection.push(SelectItem::ExprWithAlias { expr: inner.clone(), alias: Ident::new(format!("{KEY}{}", at + 1)) });
    }
    let mut row_number = call("row_number", Vec::new(), Vec::new());
    if let Expr::Function(function) = &mut row_number {
        function.over = Some(WindowType::WindowSpec(WindowSpec {
            window_name: None,
            partition_by: keys.iter().map(|(inner, _)| inner.clone()).collect(),
            order_by: order,
            window_frame: None,
        }));
    }
    numbered.projection.push(SelectItem::ExprWithAlias { expr: row_number, alias: Ident::new(ROW_NUMBER) });
    let mut rows = query.clone();
    rows.body = Box::new(SetExpr::Select(Box::new(numbered)));
    rows.order_by = None;
    rows.limit_clause = None;

    let column = |name: String| Expr::CompoundIdentifier(vec![Ident::new(ROWS), Ident::new(name)]);
    let number = |n: u64| Expr::value(Value::Number(n.to_string(), false));
    let mut filter = vec![
        Expr::BinaryOp { left: Box::new(column(ROW_NUMBER.into())), op: BinaryOperator::Gt, right: Box::new(number(offset)) },
        Expr::BinaryOp { left: Box::new(column(ROW_NUMBER.into())), op: BinaryOperator::LtEq, right: Box::new(number(offset.saturating_add(limit))) },
    ];
    for (at, (_, outer_side)) in keys.iter().enumerate() {
        filter.push(Expr::BinaryOp { left: Box::new(column(format!("{KEY}{}", at + 1))), op: BinaryOperator::Eq, right: Box::new(outer_side.clone()) });
    }
    let hidden: Vec<ObjectName> = std::iter::once(ROW_NUMBER.to_string()).chain((1..=keys.len()).map(|at| format!("{KEY}{at}"))).map(|name| ObjectName::from(vec![Ident::new(name)])).collect();
    let mut shell = crate::frontend::array_subquery::empty_query();
    let SetExpr::Select(outer_select) = shell.body.as_mut() else { return None };
    outer_select.projection = vec![SelectItem::QualifiedWildcard(
        SelectItemQualifiedWildcardKind::ObjectName(ObjectName::from(vec![Ident::new(ROWS)])),
        WildcardAdditionalOptions { opt_exclude: Some(ExcludeSelectItem::Multiple(hidden)), ..Default::default() },
    )];
    outer_select.from = vec![TableWithJoins {
        relation: TableFactor::Derived {
            lateral: false,
            subquery: Box::new(rows),
            alias: Some(datafusion::sql::sqlparser::ast::TableAlias { explicit: true, name: Ident::new(ROWS), columns: Vec::new(), at: None }),
            sample: None,
        },
        joins: Vec::new(),
    }];
    outer_select.selection = and_all(filter);
    Some(shell)
}

/// Whether `key` is a column of a table of `from` that compares as it is
/// stored (`Names::exact_column`); an unqualified one must be found in
/// exactly one of them.
fn exact_key(key: &Expr, from: &[TableWithJoins], names: &Names) -> bool {
    let mut tables: Vec<(String, String)> = Vec::new();
    let mut collect = |factor: &TableFactor| {
        if let TableFactor::Table { name, alias, args: None, .. } = factor
            && let Some(table) = name.0.last().and_then(|part| part.as_ident())
        {
            let qualifier = alias.as_ref().map_or_else(|| folded(table), |alias| folded(&alias.name));
            tables.push((qualifier, folded(table)));
        }
    };
    for item in from {
        collect(&item.relation);
        for join in &item.joins {
            collect(&join.relation);
        }
    }
    match key {
        Expr::CompoundIdentifier(parts) if parts.len() == 2 => {
            let qualifier = folded(&parts[0]);
            tables.iter().any(|(q, table)| *q == qualifier && (names.exact_column)(table, &folded(&parts[1])) == Some(true))
        }
        Expr::Identifier(column) => {
            let found: Vec<Option<bool>> = tables.iter().map(|(_, table)| (names.exact_column)(table, &folded(column))).filter(Option::is_some).collect();
            found == [Some(true)]
        }
        Expr::Nested(inner) => exact_key(inner, from, names),
        _ => false,
    }
}

/// An ORDER BY item of a subquery as an expression of its FROM: an item's
/// alias or position read as the item.
fn order_item(item: &OrderByExpr, projection: &[SelectItem]) -> Option<OrderByExpr> {
    let mut item = item.clone();
    if item.with_fill.is_some() {
        return None;
    }
    let aliased = match &item.expr {
        Expr::Identifier(name) => projection.iter().find_map(|select_item| match select_item {
            SelectItem::ExprWithAlias { expr, alias } if folded(alias) == folded(name) => Some(expr.clone()),
            _ => None,
        }),
        other => match constant(other) {
            // A wildcard's columns are not known here: its items' positions
            // are not theirs.
            Some(_) if projection.iter().any(|i| matches!(i, SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..))) => return None,
            Some(position) => match projection.get(usize::try_from(position).ok()?.checked_sub(1)?)? {
                SelectItem::UnnamedExpr(expr) | SelectItem::ExprWithAlias { expr, .. } => Some(expr.clone()),
                _ => return None,
            },
            None => None,
        },
    };
    if let Some(expr) = aliased {
        item.expr = expr;
    }
    Some(item)
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;

    fn rewritten(sql: &str) -> String {
        let mut statement = Parser::parse_sql(&PostgreSqlDialect {}, sql).unwrap().pop().unwrap();
        // Table b: id INT, v INT, f DOUBLE PRECISION.
        let exact = |table: &str, column: &str| match (table, column) {
            ("b", "id" | "v") => Some(true),
            ("b", "f") => Some(false),
            _ => None,
        };
        rewrite(&mut statement, &Names { is_aggregate: &|name| matches!(name, "count" | "max" | "sum"), exact_column: &exact });
        statement.to_string()
    }

    #[test]
    fn a_limit_under_lateral_numbers_rows_by_the_correlation_key() {
        assert_eq!(
            rewritten("SELECT a.id, s.v FROM a LEFT JOIN LATERAL (SELECT b.v AS v FROM b WHERE b.id = a.id AND b.v > 0 ORDER BY v DESC LIMIT 2 OFFSET 1) AS s ON true"),
            "SELECT a.id, s.v FROM a LEFT JOIN LATERAL (SELECT foam_lateral.* EXCLUDE (foam_lateral_rn, foam_lateral_k1) FROM \
             (SELECT b.v AS v, b.id AS foam_lateral_k1, row_number() OVER (PARTITION BY b.id ORDER BY b.v DESC) AS foam_lateral_rn FROM b WHERE b.v > 0) AS foam_lateral \
             WHERE foam_lateral.foam_lateral_rn > 1 AND foam_lateral.foam_lateral_rn <= 3 AND foam_lateral.foam_lateral_k1 = a.id) AS s ON true"
        );
    }

    #[test]
    fn other_shapes_are_left_as_written() {
        for sql in [
            // An aggregate, no LIMIT, an outer reference outside WHERE, an
            // outer reference not in an equality, no correlation.
            "SELECT * FROM a, LATERAL (SELECT max(b.v) FROM b WHERE b.id = a.id LIMIT 1) AS s",
            "SELECT * FROM a, LATERAL (SELECT b.v FROM b WHERE b.id = a.id) AS s",
            "SELECT * FROM a, LATERAL (SELECT b.v + a.x FROM b WHERE b.id = a.id LIMIT 1) AS s",
            "SELECT * FROM a, LATERAL (SELECT b.v FROM b WHERE b.id < a.id LIMIT 1) AS s",
            "SELECT * FROM a, LATERAL (SELECT b.v FROM b ORDER BY b.v LIMIT 1) AS s",
            "SELECT * FROM a, LATERAL (SELECT b.v FROM b WHERE b.id = a.id ORDER BY b.v LIMIT $1) AS s",
            // A float key, an expression key, an item returning rows, a
            // position after a wildcard.
            "SELECT * FROM a, LATERAL (SELECT b.v FROM b WHERE b.f = a.f ORDER BY b.v LIMIT 1) AS s",
            "SELECT * FROM a, LATERAL (SELECT b.v FROM b WHERE b.id + 1 = a.id ORDER BY b.v LIMIT 1) AS s",
            "SELECT * FROM a, LATERAL (SELECT unnest(ARRAY[b.v]) FROM b WHERE b.id = a.id ORDER BY b.v LIMIT 1) AS s",
            "SELECT * FROM a, LATERAL (SELECT *, b.v AS w FROM b WHERE b.id = a.id ORDER BY 2 LIMIT 1) AS s",
        ] {
            assert_eq!(rewritten(sql), Parser::parse_sql(&PostgreSqlDialect {}, sql).unwrap().pop().unwrap().to_string(), "{sql}");
        }
    }
}
