//! Gives select-list columns PostgreSQL's names, and lets names repeat.
//!
//! DataFusion names an unnamed select item after its expression
//! (`fz0.a + Int64(1)`, `count(*)`, `Float64(1.5)`), where PostgreSQL says
//! `?column?`, `count`, `?column?`; clients that read columns by name
//! (pandas, ORMs) see those. And a projection may not hold one name twice,
//! so `SELECT a, a FROM t`, `SELECT d, CAST(d AS INT) FROM t` (a cast keeps
//! its operand's name) or two scalar subqueries failed to plan ("Projections
//! require unique expression names"), where PostgreSQL allows them.
//!
//! [`name_select_items`] aliases every unnamed item of every select list
//! with PostgreSQL's name for it, and a name already used in the list gets
//! [`REPEAT_MARK`] and a number after it: unique for DataFusion, and cut off
//! again where the columns are described to the client
//! ([`client_column_name`]), which so sees PostgreSQL's repeated names.

use std::collections::HashSet;
use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{AccessExpr, Expr, Ident, OrderBy, OrderByKind, Query, Select, SelectItem, SetExpr, Statement, TrimWhereField, VisitMut, VisitorMut};

/// Marks a repeated column name made unique: `a`, `a\u{1f}2`. The unit
/// separator does not occur in names clients write.
pub const REPEAT_MARK: char = '\u{1f}';

/// The name a client is shown for a result column: without a repeat mark.
pub fn client_column_name(name: &str) -> &str {
    name.split(REPEAT_MARK).next().unwrap_or(name)
}

/// A result's columns as the client is told of them (on any protocol): a
/// name repeated in a select list was made unique for DataFusion, and is
/// shown repeated again.
pub fn client_schema(schema: &datafusion::arrow::datatypes::Schema) -> datafusion::arrow::datatypes::Schema {
    let fields: Vec<_> = schema
        .fields()
        .iter()
        .map(|field| match client_column_name(field.name()) {
            name if name.len() == field.name().len() => field.clone(),
            name => std::sync::Arc::new(field.as_ref().clone().with_name(name)),
        })
        .collect();
    datafusion::arrow::datatypes::Schema::new_with_metadata(fields, schema.metadata().clone())
}

/// Names the items of every select list in `statement` (see the module
/// documentation); whether anything changed.
pub fn name_select_items(statement: &mut Statement) -> bool {
    let mut namer = Namer { changed: false };
    let _ = statement.visit(&mut namer);
    namer.changed
}

struct Namer {
    changed: bool,
}

impl VisitorMut for Namer {
    type Break = ();

    fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        let named = match query.body.as_mut() {
            SetExpr::Select(select) => {
                let (changed, named) = name_items(select);
                // An ORDER BY item that is a select item now named sorts by
                // that name: DataFusion matches it to the select list no
                // longer (`SELECT DISTINCT a + 1 ... ORDER BY a + 1`).
                if !named.is_empty() && let Some(OrderBy { kind: OrderByKind::Expressions(items), .. }) = query.order_by.as_mut() {
                    for item in items.iter_mut() {
                        let named_as = named.iter().find_map(|&at| match &select.projection[at] {
                            SelectItem::ExprWithAlias { expr, alias } if *expr == item.expr => Some(alias.clone()),
                            _ => None,
                        });
                        if let Some(alias) = named_as {
                            item.expr = Expr::Identifier(alias);
                        }
                    }
                }
                changed
            }
            body => name_in(body),
        };
        self.changed |= named;
        ControlFlow::Continue(())
    }
}

/// Names the items of the select lists in `body` (through set operations).
fn name_in(body: &mut SetExpr) -> bool {
    match body {
        SetExpr::Select(select) => name_items(select).0,
        SetExpr::SetOperation { left, right, .. } => name_in(left) | name_in(right),
        _ => false,
    }
}

/// Names the items of one select list: whether any changed, and the
/// positions of the unnamed items it named.
fn name_items(select: &mut Select) -> (bool, Vec<usize>) {
    let mut taken: HashSet<String> = HashSet::new();
    let (mut changed, mut named) = (false, Vec::new());
    for (at, item) in select.projection.iter_mut().enumerate() {
        let (name, keeps_name) = match &*item {
            // A column keeps the name DataFusion gives it already, unless repeated.
            SelectItem::UnnamedExpr(expr) => (postgres_name(expr), matches!(expr, Expr::Identifier(_) | Expr::CompoundIdentifier(_))),
            SelectItem::ExprWithAlias { alias, .. } => (alias.value.clone(), true),
            // A wildcard's names are the tables'; they are not known here.
            _ => continue,
        };
        let mut unique = name.clone();
        let mut n = 2;
        while !taken.insert(unique.clone()) {
            unique = format!("{name}{REPEAT_MARK}{n}");
            n += 1;
        }
        if unique == name && keeps_name {
            continue;
        }
        let alias = Ident::with_quote('"', unique);
        *item = match item {
            SelectItem::UnnamedExpr(expr) => {
                named.push(at);
                SelectItem::ExprWithAlias { expr: expr.clone(), alias }
            }
            SelectItem::ExprWithAlias { expr, .. } => SelectItem::ExprWithAlias { expr: expr.clone(), alias },
            _ => continue,
        };
        changed = true;
    }
    (changed, named)
}

/// Whether planning failed because a projection holds one name twice: a
/// name a wildcard brings in, which [`name_select_items`] cannot see.
pub fn is_repeated_name_error(error: &datafusion::error::DataFusionError) -> bool {
    let text = error.to_string();
    // DataFusion has no error kind for these two; they are told by text.
    text.contains("Projections require unique expression names")
        || (text.contains("Schema contains qualified field name") && text.contains("which would be ambiguous"))
}

/// Gives every item of every select list that has a wildcard a name marked
/// with its position (`a\u{1f}2` for the second item), so none repeats a
/// column the wildcard brings in; clients see the names unmarked.
pub fn mark_every_item(statement: &mut Statement) {
    struct Marker;
    impl VisitorMut for Marker {
        type Break = ();
        fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
            if let SetExpr::Select(select) = query.body.as_mut()
                && select.projection.iter().any(|i| matches!(i, SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..)))
            {
                for (position, item) in select.projection.iter_mut().enumerate() {
                    let (expr, name) = match item {
                        SelectItem::UnnamedExpr(expr) => (expr.clone(), postgres_name(expr)),
                        SelectItem::ExprWithAlias { expr, alias } => (expr.clone(), client_column_name(&alias.value).to_string()),
                        _ => continue,
                    };
                    *item = SelectItem::ExprWithAlias { expr, alias: Ident::with_quote('"', format!("{name}{REPEAT_MARK}{}", position + 1)) };
                }
            }
            ControlFlow::Continue(())
        }
    }
    let _ = statement.visit(&mut Marker);
}

/// The column name PostgreSQL gives a select item of this expression.
fn postgres_name(expr: &Expr) -> String {
    figured_name(expr).map_or_else(|| "?column?".into(), |(name, _)| name)
}

/// PostgreSQL's `FigureColname`: a name and how strongly it holds (2 for a
/// column's, a function's or a keyword's name, 1 for a type's, which an
/// outer cast or CASE replaces); `None` for none (`?column?`).
fn figured_name(expr: &Expr) -> Option<(String, u8)> {
    let strong = |name: &str| Some((name.to_string(), 2));
    match expr {
        Expr::Nested(inner) | Expr::Collate { expr: inner, .. } => figured_name(inner),
        Expr::Exists { .. } => strong("exists"),
        Expr::Subquery(query) => match first_select(query.body.as_ref()) {
            SetExpr::Select(select) if select.projection.len() == 1 => match &select.projection[0] {
                SelectItem::ExprWithAlias { alias, .. } => strong(&alias.value),
                SelectItem::UnnamedExpr(inner) => strong(&postgres_name(inner)),
                _ => None,
            },
            _ => None,
        },
        Expr::Identifier(ident) => strong(&ident.value),
        Expr::CompoundIdentifier(parts) => parts.last().and_then(|p| strong(&p.value)),
        // `x[1]` is x's name, `(x).f` the field's.
        Expr::CompoundFieldAccess { root, access_chain } => match access_chain.iter().rev().find_map(|access| match access {
            AccessExpr::Dot(Expr::Identifier(field)) => Some(field.value.clone()),
            _ => None,
        }) {
            Some(field) => strong(&field),
            None => figured_name(root),
        },
        Expr::Function(function) => function.name.0.last().and_then(|p| p.as_ident()).and_then(|p| strong(&p.value.to_lowercase())),
        // A CASE is named after its ELSE when that has a strong name.
        Expr::Case { else_result, .. } => match else_result.as_deref().and_then(figured_name) {
            Some((name, 2)) => Some((name, 2)),
            _ => Some(("case".into(), 1)),
        },
        // A cast keeps a strong name; of anything else it is named after
        // the type, the outermost cast's.
        Expr::Cast { expr, data_type, .. } => match figured_name(expr) {
            Some((name, 2)) => Some((name, 2)),
            _ => Some((postgres_type_name(&data_type.to_string()), 1)),
        },
        Expr::TypedString(typed) => Some((postgres_type_name(&typed.data_type.to_string()), 1)),
        Expr::Interval(_) => Some(("interval".into(), 1)),
        Expr::Array(_) => strong("array"),
        Expr::Extract { .. } => strong("extract"),
        Expr::Substring { shorthand, .. } => strong(if *shorthand { "substr" } else { "substring" }),
        Expr::Position { .. } => strong("position"),
        Expr::Trim { trim_where, .. } => strong(match trim_where {
            Some(TrimWhereField::Leading) => "ltrim",
            Some(TrimWhereField::Trailing) => "rtrim",
            _ => "btrim",
        }),
        Expr::Overlay { .. } => strong("overlay"),
        Expr::AtTimeZone { .. } => strong("timezone"),
        Expr::Ceil { .. } => strong("ceil"),
        Expr::Floor { .. } => strong("floor"),
        _ => None,
    }
}

/// The first arm of a set operation (PostgreSQL names its columns so).
fn first_select(body: &SetExpr) -> &SetExpr {
    match body {
        SetExpr::SetOperation { left, .. } => first_select(left),
        SetExpr::Query(query) => first_select(&query.body),
        other => other,
    }
}

/// PostgreSQL's internal name of a type as SQL spells it (`int4` for INT,
/// the element's for an array, `timestamptz` for `timestamp(3) with time
/// zone`).
fn postgres_type_name(sql: &str) -> String {
    let lower = sql.to_lowercase();
    let lower = lower.trim_end_matches("[]").trim();
    let zoned = lower.ends_with("with time zone");
    let base = lower.split(['(', '[']).next().unwrap_or_default().trim();
    let base = base.strip_suffix(" with time zone").or_else(|| base.strip_suffix(" without time zone")).unwrap_or(base).trim();
    // FLOAT(p) is REAL for p up to 24 binary digits (`spellings.rs`).
    let float_bits = lower.strip_prefix("float(").and_then(|rest| rest.split(')').next()).and_then(|p| p.trim().parse::<u32>().ok());
    match base {
        "float" if float_bits.is_some_and(|bits| bits <= 24) => "float4",
        "timestamp" if zoned => "timestamptz",
        "time" if zoned => "timetz",
        "int" | "integer" | "int4" => "int4",
        "bigint" | "int8" => "int8",
        "smallint" | "int2" => "int2",
        "real" | "float4" => "float4",
        "double precision" | "double" | "float8" | "float" => "float8",
        "decimal" | "numeric" => "numeric",
        "boolean" | "bool" => "bool",
        "text" | "string" => "text",
        "varchar" | "character varying" => "varchar",
        "char" | "character" | "bpchar" => "bpchar",
        "timestamp" => "timestamp",
        "timestamptz" => "timestamptz",
        other => return other.to_string(),
    }
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;

    fn renamed(sql: &str) -> String {
        let mut statement = Parser::parse_sql(&PostgreSqlDialect {}, sql).unwrap().pop().unwrap();
        name_select_items(&mut statement);
        statement.to_string()
    }

    #[test]
    fn unnamed_items_get_postgres_names_and_repeats_a_mark() {
        let m = REPEAT_MARK;
        assert_eq!(
            renamed("SELECT a, (SELECT count(*) FROM t), (SELECT count(*) FROM u), EXISTS (SELECT 1 FROM t), (SELECT x.b FROM t AS x) + 1 FROM t"),
            format!(
                "SELECT a, (SELECT count(*) AS \"count\" FROM t) AS \"count\", (SELECT count(*) AS \"count\" FROM u) AS \"count{m}2\", \
                 EXISTS (SELECT 1 AS \"?column?\" FROM t) AS \"exists\", (SELECT x.b FROM t AS x) + 1 AS \"?column?\" FROM t"
            )
        );
        assert_eq!(
            renamed("SELECT d, CAST(d AS INT), t.d, 1.5, CAST(1.5 AS BIGINT), a + 1 AS x, 2 AS x FROM t"),
            format!("SELECT d, CAST(d AS INT) AS \"d{m}2\", t.d AS \"d{m}3\", 1.5 AS \"?column?\", CAST(1.5 AS BIGINT) AS \"int8\", a + 1 AS x, 2 AS \"x{m}2\" FROM t")
        );
        assert_eq!(client_column_name(&format!("d{m}2")), "d");
        assert_eq!(client_column_name("d"), "d");
    }

    // PostgreSQL 15's names for the same items.
    #[test]
    fn casts_case_and_typed_literals_are_named_as_postgresql_names_them() {
        let names = |sql: &str| -> Vec<String> {
            let statement = Parser::parse_sql(&PostgreSqlDialect {}, sql).unwrap().pop().unwrap();
            let Statement::Query(query) = statement else { panic!("not a query") };
            let SetExpr::Select(select) = *query.body else { panic!("not a select") };
            select.projection.iter().map(|item| match item { SelectItem::UnnamedExpr(expr) => postgres_name(expr), _ => panic!("named") }).collect()
        };
        assert_eq!(
            names("SELECT 1e20::float8::text, ARRAY[1]::text, x::int::text, (1)::int, DATE '2020-01-01', TIMESTAMP '2020-01-01', INTERVAL '1 day', 1::text::int FROM t"),
            ["text", "array", "x", "int4", "date", "timestamp", "interval", "int4"]
        );
        assert_eq!(
            names("SELECT CASE WHEN a THEN 1 ELSE x END, CASE WHEN a THEN x END, CASE WHEN a THEN 1 ELSE 2::int END, x[1], (x[1])::text, -x FROM t"),
            ["x", "case", "case", "x", "x", "?column?"]
        );
        assert_eq!(
            names("SELECT NULL::int[], NULL::text[], '10:00'::time without time zone, '2020-01-01'::timestamp(3) with time zone, TIME WITHOUT TIME ZONE '10:00', NULL::timestamp with time zone, NULL::time with time zone FROM t"),
            ["int4", "text", "time", "timestamptz", "time", "timestamptz", "timetz"]
        );
        assert_eq!(
            names("SELECT ts AT TIME ZONE 'UTC', trim(leading 'x' from s), trim(trailing ' ' from s), trim(s), overlay(s placing 'a' from 1), (SELECT 1 AS a UNION ALL SELECT 2 LIMIT 1) FROM t"),
            ["timezone", "ltrim", "rtrim", "btrim", "overlay", "a"]
        );
    }

    #[test]
    fn an_order_by_of_a_named_item_sorts_by_its_name() {
        assert_eq!(
            renamed("SELECT DISTINCT a + 1 FROM t ORDER BY a + 1 DESC, b"),
            "SELECT DISTINCT a + 1 AS \"?column?\" FROM t ORDER BY \"?column?\" DESC, b"
        );
    }

    #[test]
    fn items_beside_a_wildcard_are_marked_when_a_name_repeats() {
        let mut statement = Parser::parse_sql(&PostgreSqlDialect {}, "SELECT *, a, b + 1 AS b FROM t").unwrap().pop().unwrap();
        mark_every_item(&mut statement);
        let m = REPEAT_MARK;
        assert_eq!(statement.to_string(), format!("SELECT *, a AS \"a{m}2\", b + 1 AS \"b{m}3\" FROM t"));
    }

    #[test]
    fn columns_and_wildcards_keep_their_names() {
        let plain = "SELECT a, t.b, * FROM t";
        assert_eq!(renamed(plain), plain);
        let named = "SELECT (SELECT count(*) AS n FROM t) AS n, (SELECT max(b) AS m FROM t) AS m FROM t";
        assert_eq!(renamed(named), named);
    }
}
