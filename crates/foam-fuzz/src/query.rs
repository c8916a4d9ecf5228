//! Random queries over a fuzz database.
//!
//! The generator writes SQL directly, keeping track of which columns each
//! FROM item brings into scope and of every expression's value family, so a
//! query is well typed by construction. It covers the shapes FoamDB's
//! distribution rules rewrite and their neighbours: joins of every type on
//! all, some or none of the distribution keys (equi, multi-key, expression,
//! non-equi and OR conditions), joins of grouped subqueries and CTEs,
//! aggregates with DISTINCT and FILTER, GROUP BY on expressions, ROLLUP, CUBE
//! and GROUPING SETS, windows over rows and over grouped results,
//! UNION/INTERSECT/EXCEPT [ALL], IN/EXISTS/scalar subqueries (correlated
//! or not), ORDER BY ... LIMIT/OFFSET, CASE and casts, and the timestamp
//! functions whose answers depend on the session's time zone (`extract`,
//! `date_trunc`, casts between timestamp, timestamptz and date, interval
//! arithmetic).
//!
//! Every answer is deterministic as a multiset: LIMIT comes only after an
//! ORDER BY of every output column, and a window function whose value
//! depends on the order of ties (row_number, lag, ROWS frames) orders by
//! every column in scope, so tied rows are identical rows, and is the only
//! one of its SELECT (two of them may number the same identical rows in
//! different orders, and then the pairs of their values differ).

use crate::choices::Choices;
use crate::schema::{COLUMNS, Table, Ty};

mod rules;
mod writes;

pub use writes::{End, RETURNING, Write};

/// How deep subqueries and derived tables nest.
const DEPTH_MAX: u32 = 2;
/// Joins in one FROM clause, at most.
const JOINS_MAX: u32 = 3;
/// Expressions nest at most this deep.
const EXPRESSION_DEPTH_MAX: u32 = 2;

/// A column in scope: how to refer to it and its family.
#[derive(Clone, Debug)]
struct Col {
    sql: String,
    ty: Ty,
}

/// A generated SELECT: its text and its output columns' families, named
/// `c0`, `c1`, ...
struct Select {
    sql: String,
    out: Vec<Ty>,
    /// Ends in ORDER BY or LIMIT (needs parentheses inside a set operation).
    ordered: bool,
}

/// One generated test case.
#[derive(Clone, Debug)]
pub struct Query {
    pub sql: String,
    /// The answer's order is defined (ORDER BY every output column), so
    /// answers are compared in order, not as multisets.
    pub ordered: bool,
    /// For ternary logic partitioning: the same rows as `sql`, as the
    /// UNION ALL of its rows where a predicate is true, false and NULL.
    pub partitioned: Option<String>,
    /// Holds a scalar subquery that may give several rows, which fails the
    /// query in PostgreSQL (21000); the reference may not fail (DataFusion
    /// joins such a subquery), so PostgreSQL is asked even when it agrees.
    pub cardinality: bool,
}

/// Ends each scalar subquery of a query that may give several rows: a
/// comment, so the query is the same to every engine.
pub const MANY_ROWS_MARK: &str = " /* rows: any */)";

impl Query {
    /// The query with each scalar subquery that may give several rows
    /// limited to one. Where an engine answers the query without failing
    /// (21000), no row it keeps read such a subquery's value, so its answer
    /// must be this query's, whichever row each subquery gives: that checks
    /// an answer PostgreSQL gives 21000 for by evaluating a subquery the
    /// answer never reads (on rows an empty join drops, or in a column no
    /// one selects), which the SQL standard leaves to the implementation.
    pub fn limited(&self) -> Option<String> {
        self.sql.contains(MANY_ROWS_MARK).then(|| self.sql.replace(MANY_ROWS_MARK, " LIMIT 1)"))
    }
}

struct Generator<'a> {
    c: &'a mut Choices,
    tables: &'a [Table],
    aliases: u32,
    ctes: Vec<String>,
    /// The SELECT being written already has a window function whose value
    /// depends on the order of ties.
    tie_sensitive_window: bool,
    /// A scalar subquery that may give several rows was written.
    cardinality: bool,
}

/// A random query over `tables`.
pub fn generate(choices: &mut Choices, tables: &[Table]) -> Query {
    let mut g = Generator { c: choices, tables, aliases: 0, ctes: Vec::new(), tie_sensitive_window: false, cardinality: false };
    if g.c.chance(15) {
        return g.partitioning_case();
    }
    if g.c.chance(20) {
        return g.rule_case();
    }
    let select = g.query(DEPTH_MAX, &[], None, true);
    Query { sql: g.with_ctes(&select.sql), ordered: select.ordered, partitioned: None, cardinality: g.cardinality }
}

/// A random write on one of `tables` (see `query/writes.rs`).
pub fn generate_write(choices: &mut Choices, tables: &[Table]) -> Write {
    let mut g = Generator { c: choices, tables, aliases: 0, ctes: Vec::new(), tie_sensitive_window: false, cardinality: false };
    g.write()
}

impl Generator<'_> {
    fn alias(&mut self) -> String {
        self.aliases += 1;
        format!("r{}", self.aliases - 1)
    }

    fn with_ctes(&self, body: &str) -> String {
        if self.ctes.is_empty() { body.to_string() } else { format!("WITH {} {body}", self.ctes.join(", ")) }
    }

    /// A query: a SELECT or a set operation of two, at `top` level possibly
    /// ordered by every column (and then limited).
    fn query(&mut self, depth: u32, outer: &[Col], want: Option<&[Ty]>, top: bool) -> Select {
        let mut select = self.select(depth, outer, want);
        if depth > 0 && self.c.chance(12) {
            let right = self.select(depth - 1, outer, Some(&select.out.clone()));
            let op = *self.c.pick(&["UNION ALL", "UNION", "INTERSECT", "EXCEPT", "INTERSECT ALL", "EXCEPT ALL"]);
            let side = |s: &Select| if s.ordered { format!("({})", s.sql) } else { s.sql.clone() };
            select = Select { sql: format!("{} {op} {}", side(&select), side(&right)), out: select.out, ordered: false };
        }
        if (top || self.c.chance(10)) && self.c.chance(if top { 30 } else { 100 }) {
            let order: Vec<String> = (1..=select.out.len())
                .map(|i| format!("{i} {} {}", self.c.pick(&["ASC", "DESC"]), self.c.pick(&["NULLS LAST", "NULLS FIRST"])))
                .collect();
            let limit = if self.c.chance(60) {
                let offset = if self.c.chance(30) { format!(" OFFSET {}", self.c.below(5)) } else { String::new() };
                format!(" LIMIT {}{offset}", self.c.between(1, 20))
            } else {
                String::new()
            };
            let body = if select.sql.contains(" UNION") || select.sql.contains(" INTERSECT") || select.sql.contains(" EXCEPT") {
                format!("SELECT * FROM ({}) AS {}", select.sql, self.alias())
            } else {
                select.sql
            };
            select = Select { sql: format!("{body} ORDER BY {}{limit}", order.join(", ")), out: select.out, ordered: true };
        }
        select
    }

    /// One SELECT with output columns `c0..`, of the families `want` when given.
    fn select(&mut self, depth: u32, outer: &[Col], want: Option<&[Ty]>) -> Select {
        let (from, scope) = self.from(depth);
        let mut visible = scope.clone();
        visible.extend_from_slice(outer);
        let filter = if self.c.chance(55) { format!(" WHERE {}", self.predicate(&visible, depth, 0)) } else { String::new() };
        let widths = want.map(|w| w.to_vec()).unwrap_or_else(|| {
            let n = self.c.between(1, 4);
            (0..n).map(|_| self.any_ty()).collect()
        });
        let grouped = self.c.chance(40);
        let outer_window = std::mem::replace(&mut self.tie_sensitive_window, false);
        let (items, tail) = if grouped { self.grouped_items(&scope, &widths) } else { self.plain_items(&visible, &scope, &widths, depth) };
        self.tie_sensitive_window = outer_window;
        let distinct = if !grouped && self.c.chance(10) { "DISTINCT " } else { "" };
        let list: Vec<String> = items.iter().enumerate().map(|(i, e)| format!("{e} AS c{i}")).collect();
        Select { sql: format!("SELECT {distinct}{} FROM {from}{filter}{tail}", list.join(", ")), out: widths, ordered: false }
    }

    fn any_ty(&mut self) -> Ty {
        *self.c.pick(&[Ty::Int, Ty::Text, Ty::Int, Ty::Float, Ty::Decimal, Ty::Date, Ty::Bool, Ty::Timestamp, Ty::TimestampTz])
    }

    /// Output expressions of a SELECT without GROUP BY: expressions over the
    /// scope, some of them window functions or (with `depth` left) scalar
    /// subqueries correlated with what is `visible`.
    fn plain_items(&mut self, visible: &[Col], scope: &[Col], widths: &[Ty], depth: u32) -> (Vec<String>, String) {
        let items = widths
            .iter()
            .map(|ty| {
                if self.c.chance(15) {
                    self.window(scope, *ty)
                } else if depth > 0 && self.c.chance(8) {
                    self.scalar_subquery(visible, *ty)
                } else {
                    self.expr(*ty, scope, 0)
                }
            })
            .collect();
        (items, String::new())
    }

    /// Output expressions of a grouped SELECT, with its GROUP BY and HAVING.
    fn grouped_items(&mut self, scope: &[Col], widths: &[Ty]) -> (Vec<String>, String) {
        let key_count = self.c.below(4);
        let keys: Vec<Col> = (0..key_count)
            .map(|_| {
                let ty = self.any_ty();
                let sql = if self.c.chance(80) { self.column(ty, scope) } else { self.expr(ty, scope, 1) };
                Col { sql, ty }
            })
            .collect();
        let key_sql: Vec<String> = keys.iter().map(|k| k.sql.clone()).collect();
        let group_by = if keys.is_empty() {
            String::new()
        } else {
            match self.c.below(8) {
                5 => format!(" GROUP BY ROLLUP ({})", key_sql.join(", ")),
                6 => format!(" GROUP BY CUBE ({})", key_sql.join(", ")),
                7 => {
                    let first = key_sql[0].clone();
                    format!(" GROUP BY GROUPING SETS (({}), ({first}), ())", key_sql.join(", "))
                }
                _ => format!(" GROUP BY {}", key_sql.join(", ")),
            }
        };
        let grouping_sets = group_by.contains("ROLLUP") || group_by.contains("CUBE") || group_by.contains("GROUPING");
        let items = widths
            .iter()
            .map(|ty| match keys.iter().filter(|k| k.ty == *ty).count() {
                n if n > 0 && self.c.chance(50) => {
                    let matching: Vec<&Col> = keys.iter().filter(|k| k.ty == *ty).collect();
                    matching[self.c.below(n as u32) as usize].sql.clone()
                }
                _ if self.c.chance(12) => self.window_over_groups(scope, &keys, *ty, grouping_sets),
                _ => self.aggregate(*ty, scope),
            })
            .collect();
        let having = if self.c.chance(20) {
            let mut conditions = Vec::new();
            for _ in 0..self.c.between(1, 2) {
                let aggregate = self.aggregate(Ty::Int, scope);
                let op = *self.c.pick(&[">", "<=", "=", "<>"]);
                conditions.push(format!("{aggregate} {op} {}", self.c.below(4)));
            }
            format!(" HAVING {}", conditions.join(" OR "))
        } else {
            String::new()
        };
        (items, format!("{group_by}{having}"))
    }

    /// A window function over a grouped result: partitioned and ordered by
    /// group keys, over aggregates.
    fn window_over_groups(&mut self, scope: &[Col], keys: &[Col], ty: Ty, grouping_sets: bool) -> String {
        let partition: Vec<String> = keys.iter().filter(|_| self.c.chance(60)).map(|k| k.sql.clone()).collect();
        let partition = if partition.is_empty() { String::new() } else { format!("PARTITION BY {}", partition.join(", ")) };
        let aggregate = self.aggregate(Ty::Int, scope);
        match ty {
            Ty::Int if !keys.is_empty() && !grouping_sets && !self.tie_sensitive_window && self.c.chance(40) => {
                self.tie_sensitive_window = true;
                // Group keys are unique per group: a total order.
                let order: Vec<String> = keys.iter().map(|k| format!("{} NULLS FIRST", k.sql)).collect();
                format!("row_number() OVER ({partition} ORDER BY {})", order.join(", "))
            }
            Ty::Int => {
                let function = *self.c.pick(&["rank()", "dense_rank()", "count(*)", "SUM"]);
                let function = if function == "SUM" { format!("sum({aggregate})") } else { function.to_string() };
                format!("{function} OVER ({partition} ORDER BY {aggregate})")
            }
            _ => {
                let inner = self.aggregate(ty, scope);
                let outer = if matches!(ty, Ty::Bool | Ty::Text | Ty::Date) { "max" } else { *self.c.pick(&["min", "max"]) };
                format!("{outer}({inner}) OVER ({partition})")
            }
        }
    }

    /// A window function over the rows in `scope`.
    fn window(&mut self, scope: &[Col], ty: Ty) -> String {
        let partition: Vec<String> = (0..self.c.below(3)).map(|_| self.column_any(scope)).collect();
        let partition = if partition.is_empty() { String::new() } else { format!("PARTITION BY {} ", partition.join(", ")) };
        let every_column: Vec<String> = scope.iter().map(|c| format!("{} NULLS FIRST", c.sql)).collect();
        match ty {
            Ty::Int => match self.c.below(5) {
                1 | 3 if self.tie_sensitive_window => format!("count(*) OVER ({partition})"),
                0 => {
                    let key = self.column_any(scope);
                    format!("rank() OVER ({partition}ORDER BY {key})")
                }
                1 => {
                    self.tie_sensitive_window = true;
                    format!("row_number() OVER ({partition}ORDER BY {})", every_column.join(", "))
                }
                2 => {
                    let key = self.column_any(scope);
                    format!("dense_rank() OVER ({partition}ORDER BY {key} DESC)")
                }
                3 => {
                    self.tie_sensitive_window = true;
                    let value = self.column(Ty::Int, scope);
                    format!(
                        "sum({value}) OVER ({partition}ORDER BY {} ROWS BETWEEN {} PRECEDING AND CURRENT ROW)",
                        every_column.join(", "),
                        self.c.between(1, 3)
                    )
                }
                _ => format!("count(*) OVER ({partition})"),
            },
            _ => {
                let value = self.column(ty, scope);
                if (self.c.chance(50) && ty != Ty::Bool) || self.tie_sensitive_window {
                    format!("max({value}) OVER ({partition})")
                } else {
                    self.tie_sensitive_window = true;
                    format!("lag({value}) OVER ({partition}ORDER BY {})", every_column.join(", "))
                }
            }
        }
    }

    /// An aggregate of family `ty` over the rows in `scope`.
    fn aggregate(&mut self, ty: Ty, scope: &[Col]) -> String {
        let filter = |g: &mut Self| {
            if g.c.chance(15) { format!(" FILTER (WHERE {})", g.predicate(scope, 0, 1)) } else { String::new() }
        };
        match ty {
            Ty::Int => match self.c.below(5) {
                0 => format!("count(*){}", filter(self)),
                1 => format!("count({})", self.column_any(scope)),
                2 => format!("count(DISTINCT {})", self.column_any(scope)),
                3 => format!("sum({}){}", self.expr(Ty::Int, scope, 1), filter(self)),
                _ => format!("{}({})", self.c.pick(&["min", "max"]), self.column(Ty::Int, scope)),
            },
            Ty::Float => match self.c.below(3) {
                0 => format!("avg({})", self.column(Ty::Int, scope)),
                1 => format!("sum({})", self.column(Ty::Float, scope)),
                _ => format!("{}({}){}", self.c.pick(&["min", "max"]), self.column(Ty::Float, scope), filter(self)),
            },
            Ty::Decimal => match self.c.below(3) {
                0 => format!("sum({}){}", self.column(Ty::Decimal, scope), filter(self)),
                1 => format!("sum(DISTINCT {})", self.column(Ty::Decimal, scope)),
                _ => format!("{}({})", self.c.pick(&["min", "max"]), self.column(Ty::Decimal, scope)),
            },
            Ty::Bool => {
                let column = self.column(Ty::Bool, scope);
                format!("{}({column})", self.c.pick(&["bool_and", "bool_or"]))
            }
            Ty::Text | Ty::Date | Ty::Timestamp | Ty::TimestampTz => {
                format!("{}({}){}", self.c.pick(&["min", "max"]), self.column(ty, scope), filter(self))
            }
        }
    }

    /// A FROM clause: one item or a chain of joins, and the columns it brings.
    fn from(&mut self, depth: u32) -> (String, Vec<Col>) {
        let (mut sql, mut scope) = self.from_item(depth);
        let joins = match self.c.below(10) {
            0..=3 => 0,
            4..=7 => 1,
            8 => 2,
            _ => JOINS_MAX,
        };
        for _ in 0..joins {
            let (right, right_scope) = self.from_item(depth);
            let kind = *self.c.pick(&["JOIN", "LEFT JOIN", "RIGHT JOIN", "FULL JOIN", "LEFT SEMI JOIN", "LEFT ANTI JOIN", "CROSS JOIN"]);
            if kind == "CROSS JOIN" {
                sql = format!("{sql} CROSS JOIN {right}");
                scope.extend(right_scope);
                continue;
            }
            let condition = self.join_condition(&scope, &right_scope);
            sql = format!("{sql} {kind} {right} ON {condition}");
            if !kind.contains("SEMI") && !kind.contains("ANTI") {
                scope.extend(right_scope);
            }
        }
        (sql, scope)
    }

    /// A table, a derived table or a CTE, under a new alias.
    fn from_item(&mut self, depth: u32) -> (String, Vec<Col>) {
        let kind = if depth == 0 { 0 } else { self.c.below(5) };
        match kind {
            1 | 2 => {
                let select = self.query(depth - 1, &[], None, false);
                let alias = self.alias();
                let scope = select.out.iter().enumerate().map(|(i, ty)| Col { sql: format!("{alias}.c{i}"), ty: *ty }).collect();
                (format!("({}) AS {alias}", select.sql), scope)
            }
            3 => {
                let select = self.query(depth - 1, &[], None, false);
                let name = format!("w{}", self.ctes.len());
                self.ctes.push(format!("{name} AS ({})", select.sql));
                let alias = self.alias();
                let scope = select.out.iter().enumerate().map(|(i, ty)| Col { sql: format!("{alias}.c{i}"), ty: *ty }).collect();
                (format!("{name} AS {alias}"), scope)
            }
            _ => {
                let table = self.c.pick(self.tables).name.clone();
                let alias = self.alias();
                let scope = COLUMNS.iter().map(|c| Col { sql: format!("{alias}.{}", c.name), ty: c.ty }).collect();
                (format!("{table} AS {alias}"), scope)
            }
        }
    }

    /// An ON condition between the columns of two FROM items.
    fn join_condition(&mut self, left: &[Col], right: &[Col]) -> String {
        let pairs: Vec<(String, String)> = left
            .iter()
            .flat_map(|l| right.iter().filter(move |r| l.ty.compares_with(r.ty) && l.ty != Ty::Float).map(move |r| (l.sql.clone(), r.sql.clone())))
            .collect();
        if pairs.is_empty() {
            return "true".into();
        }
        let pick_pair = |g: &mut Self| pairs[g.c.below(pairs.len() as u32) as usize].clone();
        match self.c.below(9) {
            0..=2 => {
                let (l, r) = pick_pair(self);
                format!("{l} = {r}")
            }
            3 | 4 => {
                let n = self.c.between(2, 3);
                (0..n).map(|_| pick_pair(self)).map(|(l, r)| format!("{l} = {r}")).collect::<Vec<_>>().join(" AND ")
            }
            5 => {
                let (l, r) = pick_pair(self);
                let (l2, r2) = pick_pair(self);
                format!("{l} = {r} AND {l2} {} {r2}", self.c.pick(&["<", "<>", ">="]))
            }
            6 => {
                let (l, r) = pick_pair(self);
                format!("{l} {} {r}", self.c.pick(&["<", "<=", "<>"]))
            }
            7 => {
                let (l, r) = pick_pair(self);
                let (l2, r2) = pick_pair(self);
                format!("({l} = {r} OR {l2} = {r2})")
            }
            _ => {
                let (l, r) = pick_pair(self);
                format!("{l} IS NOT DISTINCT FROM {r}")
            }
        }
    }

    /// A column of family `ty` in scope, or an expression of that family
    /// when there is none.
    fn column(&mut self, ty: Ty, scope: &[Col]) -> String {
        let matching: Vec<&Col> = scope.iter().filter(|c| c.ty == ty).collect();
        if matching.is_empty() {
            return self.literal(ty);
        }
        matching[self.c.below(matching.len() as u32) as usize].sql.clone()
    }

    fn column_any(&mut self, scope: &[Col]) -> String {
        if scope.is_empty() {
            return "1".into();
        }
        scope[self.c.below(scope.len() as u32) as usize].sql.clone()
    }

    fn literal(&mut self, ty: Ty) -> String {
        match ty {
            Ty::Int => (self.c.below(12) as i64 - 2).to_string(),
            // `pg_x` sends the query through the PostgreSQL-compatibility
            // rewrite of catalog queries, which a query holding `pg_` takes.
            Ty::Text => format!("'{}'", self.c.pick(&["x", "y", "", "xy", "Ab", "pg_x"])),
            Ty::Float => self.c.pick(&["1.5", "0.5", "-2.25", "0.0"]).to_string(),
            Ty::Bool => self.c.pick(&["true", "false"]).to_string(),
            Ty::Date => format!("DATE '2024-0{}-0{}'", self.c.between(1, 3), self.c.between(1, 4)),
            Ty::Decimal => format!("CAST({} AS DECIMAL(10,2))", self.c.pick(&["1.50", "0.00", "-3.25", "10.01"])),
            Ty::Timestamp => format!("TIMESTAMP '2024-01-0{} {}'", self.c.between(1, 3), self.c.pick(&["00:00:00", "03:00:00", "12:30:00"])),
            // With an offset: the same instant in every session.
            Ty::TimestampTz => format!(
                "TIMESTAMPTZ '2024-01-0{} {}{}'",
                self.c.between(1, 3),
                self.c.pick(&["00:00:00", "03:00:00", "21:30:00"]),
                self.c.pick(&["+00", "-05"])
            ),
        }
    }

    /// A scalar expression of family `ty` over `scope`.
    fn expr(&mut self, ty: Ty, scope: &[Col], level: u32) -> String {
        if level >= EXPRESSION_DEPTH_MAX || !self.c.chance(30) {
            return if self.c.chance(15) { self.literal(ty) } else { self.column(ty, scope) };
        }
        let next = level + 1;
        match (ty, self.c.below(4)) {
            (_, 0) => {
                let condition = self.predicate(scope, 0, next);
                let (a, b) = (self.expr(ty, scope, next), self.expr(ty, scope, next));
                format!("CASE WHEN {condition} THEN {a} ELSE {b} END")
            }
            (_, 1) if ty != Ty::Bool => {
                let (a, b) = (self.expr(ty, scope, next), self.literal(ty));
                format!("coalesce({a}, {b})")
            }
            (Ty::Int, 2) => {
                let (a, b) = (self.expr(Ty::Int, scope, next), self.expr(Ty::Int, scope, next));
                format!("({a} {} {b})", self.c.pick(&["+", "-", "*"]))
            }
            (Ty::Int, _) => match self.c.below(4) {
                0 => format!("length({})", self.expr(Ty::Text, scope, next)),
                1 => format!("({} % {})", self.expr(Ty::Int, scope, next), self.c.between(2, 5)),
                2 => {
                    // In the session's time zone for a timestamptz; a date
                    // has no hours (PostgreSQL refuses HOUR of one).
                    let ty = *self.c.pick(&[Ty::Timestamp, Ty::TimestampTz, Ty::Date]);
                    let field = if ty == Ty::Date { *self.c.pick(&["DAY", "MONTH"]) } else { *self.c.pick(&["HOUR", "DAY", "MONTH"]) };
                    format!("EXTRACT({field} FROM {})", self.expr(ty, scope, next))
                }
                _ => format!("CAST({} AS BIGINT)", self.expr(Ty::Decimal, scope, next)),
            },
            (Ty::Text, 2) => format!("upper({})", self.expr(Ty::Text, scope, next)),
            (Ty::Text, _) => {
                if self.c.chance(50) {
                    format!("({} || {})", self.expr(Ty::Text, scope, next), self.literal(Ty::Text))
                } else {
                    format!("CAST({} AS TEXT)", self.expr(Ty::Int, scope, next))
                }
            }
            (Ty::Float, _) => format!("({} * 2.0 + CAST({} AS DOUBLE PRECISION))", self.expr(Ty::Float, scope, next), self.expr(Ty::Int, scope, next)),
            (Ty::Decimal, _) => format!("({} + {})", self.expr(Ty::Decimal, scope, next), self.expr(Ty::Decimal, scope, next)),
            // Parenthesized: PostgreSQL refuses `a <> 7 = true` (its `=` does
            // not associate), which would leave the query unjudged.
            (Ty::Bool, _) => format!("({})", self.predicate(scope, 0, next)),
            // The local date of a timestamptz is the session zone's.
            (Ty::Date, _) => match self.c.below(3) {
                0 => {
                    let ty = *self.c.pick(&[Ty::Timestamp, Ty::TimestampTz]);
                    format!("CAST({} AS DATE)", self.expr(ty, scope, next))
                }
                _ => self.column(Ty::Date, scope),
            },
            (Ty::Timestamp | Ty::TimestampTz, 2) => {
                let unit = *self.c.pick(&["hour", "day", "month"]);
                format!("date_trunc('{unit}', {})", self.expr(ty, scope, next))
            }
            // A day added to a timestamptz is a calendar day of the
            // session's zone (23 hours across New York's change in March).
            (Ty::Timestamp | Ty::TimestampTz, _) => match self.c.below(3) {
                0 => {
                    let interval = *self.c.pick(&["1 day", "2 hours", "90 minutes"]);
                    format!("({} {} INTERVAL '{interval}')", self.expr(ty, scope, next), self.c.pick(&["+", "-"]))
                }
                // Local time in the session's zone, both ways.
                1 => {
                    let from = if ty == Ty::Timestamp { Ty::TimestampTz } else { Ty::Timestamp };
                    format!("CAST({} AS {})", self.expr(from, scope, next), ty.sql())
                }
                // A date plus hours is a timestamp.
                _ if ty == Ty::Timestamp && self.c.chance(50) => {
                    format!("({} {} INTERVAL '{}')", self.expr(Ty::Date, scope, next), self.c.pick(&["+", "-"]), self.c.pick(&["2 hours", "90 minutes"]))
                }
                _ => format!("CAST({} AS {})", self.expr(Ty::Date, scope, next), ty.sql()),
            },
        }
    }

    /// A predicate over `scope`; with `depth` left it may hold subqueries,
    /// correlated with `scope`.
    fn predicate(&mut self, scope: &[Col], depth: u32, level: u32) -> String {
        if level < EXPRESSION_DEPTH_MAX && self.c.chance(25) {
            let (a, b) = (self.predicate(scope, depth, level + 1), self.predicate(scope, depth, level + 1));
            return match self.c.below(3) {
                0 => format!("({a} AND {b})"),
                1 => format!("({a} OR {b})"),
                _ => format!("(NOT {a})"),
            };
        }
        if depth > 0 && self.c.chance(25) {
            return self.subquery_predicate(scope, depth);
        }
        let ty = self.any_ty();
        let ty = if ty == Ty::Float && self.c.chance(50) { Ty::Int } else { ty };
        let left = self.expr(ty, scope, level + 1);
        match self.c.below(7) {
            0 | 1 => {
                // A timestamp compares with a timestamptz as local time in
                // the session's zone.
                let right_ty = match ty {
                    Ty::Timestamp if self.c.chance(30) => Ty::TimestampTz,
                    Ty::TimestampTz if self.c.chance(30) => Ty::Timestamp,
                    ty => ty,
                };
                let right = if self.c.chance(50) { self.literal(right_ty) } else { self.expr(right_ty, scope, level + 1) };
                format!("{left} {} {right}", self.c.pick(&["=", "<", ">=", "<>", "<=", ">"]))
            }
            2 => format!("{left} IS {}NULL", if self.c.chance(50) { "NOT " } else { "" }),
            3 => {
                let values: Vec<String> = (0..self.c.between(1, 3)).map(|_| self.literal(ty)).collect();
                format!("{left} {}IN ({})", if self.c.chance(30) { "NOT " } else { "" }, values.join(", "))
            }
            4 if ty != Ty::Bool => {
                let (low, high) = (self.literal(ty), self.literal(ty));
                format!("{left} BETWEEN {low} AND {high}")
            }
            5 => {
                let text = self.expr(Ty::Text, scope, level + 1);
                format!("{text} {} '{}'", self.c.pick(&["LIKE", "NOT LIKE", "ILIKE"]), self.c.pick(&["x%", "%y", "%x%y%", "x_", "%", "_b"]))
            }
            _ => {
                let flag = self.column(Ty::Bool, scope);
                if self.c.chance(50) { flag } else { format!("{flag} IS NOT TRUE") }
            }
        }
    }

    /// IN, EXISTS or a comparison with a scalar subquery; correlated with
    /// `outer` by an equality or, more rarely, by another comparison.
    fn subquery_predicate(&mut self, outer: &[Col], depth: u32) -> String {
        let ty = self.any_ty();
        match self.c.below(3) {
            0 => {
                let left = self.expr(ty, outer, 1);
                let inner = self.query(depth - 1, &[], Some(&[ty]), false);
                let inner = if inner.ordered { format!("SELECT * FROM ({}) AS {}", inner.sql, self.alias()) } else { inner.sql };
                format!("{left} {}IN ({inner})", if self.c.chance(35) { "NOT " } else { "" })
            }
            kind => {
                let table = self.c.pick(self.tables).name.clone();
                let alias = self.alias();
                let inner: Vec<Col> = COLUMNS.iter().map(|c| Col { sql: format!("{alias}.{}", c.name), ty: c.ty }).collect();
                let correlation_ty = *self.c.pick(&[Ty::Int, Ty::Text, Ty::Date, Ty::Int]);
                let (outer_column, inner_column) = (self.column(correlation_ty, outer), self.column(correlation_ty, &inner));
                let op = if self.c.chance(15) { *self.c.pick(&["<", "<>"]) } else { "=" };
                let mut filter = format!("{inner_column} {op} {outer_column}");
                if self.c.chance(40) {
                    filter = format!("{filter} AND {}", self.predicate(&inner, 0, 1));
                }
                if kind == 1 {
                    format!("{}EXISTS (SELECT 1 FROM {table} AS {alias} WHERE {filter})", if self.c.chance(40) { "NOT " } else { "" })
                } else {
                    let left = self.expr(Ty::Int, outer, 1);
                    let op = *self.c.pick(&["=", "<", ">="]);
                    if self.c.chance(50) {
                        let aggregate = self.aggregate(Ty::Int, &inner);
                        format!("{left} {op} (SELECT {aggregate} FROM {table} AS {alias} WHERE {filter})")
                    } else {
                        format!("{left} {op} {}", self.scalar_subquery(outer, Ty::Int))
                    }
                }
            }
        }
    }

    /// A scalar subquery of family `ty` that does not aggregate to one row,
    /// mostly correlated with `outer` so that it gives at most one: a
    /// lookup by a UNIQUE key, a group of the correlated column, DISTINCT
    /// values of it. Some may give several rows, which fails the query with
    /// 21000 (as PostgreSQL does; the reference answers or refuses).
    fn scalar_subquery(&mut self, outer: &[Col], ty: Ty) -> String {
        self.cardinality = true;
        let keyed: Vec<&Table> = self.tables.iter().filter(|t| t.unique).collect();
        let kind = self.c.below(6);
        let table = if kind == 0 && !keyed.is_empty() { keyed[self.c.below(keyed.len() as u32) as usize] } else { self.c.pick(self.tables) };
        let (name, keys, unique) = (table.name.clone(), table.layout.keys.clone(), table.unique);
        let alias = self.alias();
        let inner: Vec<Col> = COLUMNS.iter().map(|c| Col { sql: format!("{alias}.{}", c.name), ty: c.ty }).collect();
        let extra = |g: &mut Self| if g.c.chance(30) { format!(" AND {}", g.predicate(&inner, 0, 1)) } else { String::new() };
        match kind {
            // A lookup by the table's key (UNIQUE when a table has one).
            0 | 1 if !keys.is_empty() => {
                let filter: Vec<String> = keys
                    .iter()
                    .map(|k| {
                        let key_ty = COLUMNS.iter().find(|c| c.name == *k).expect("a key is a column").ty;
                        format!("{alias}.{k} = {}", self.column(key_ty, outer))
                    })
                    .collect();
                let value = self.expr(ty, &inner, 1);
                let end = if unique { ")" } else { MANY_ROWS_MARK };
                format!("(SELECT {value} FROM {name} AS {alias} WHERE {}{}{end}", filter.join(" AND "), extra(self))
            }
            // One group: the correlated column's.
            2 => {
                let correlation_ty = *self.c.pick(&[Ty::Int, Ty::Text, Ty::Date]);
                let (inner_column, outer_column) = (self.column(correlation_ty, &inner), self.column(correlation_ty, outer));
                let aggregate = self.aggregate(ty, &inner);
                format!("(SELECT {aggregate} FROM {name} AS {alias} WHERE {inner_column} = {outer_column}{} GROUP BY {inner_column})", extra(self))
            }
            // The distinct values of the correlated column: one at most.
            3 => {
                let inner_column = self.column(ty, &inner);
                let outer_column = self.column(ty, outer);
                format!("(SELECT DISTINCT {inner_column} FROM {name} AS {alias} WHERE {inner_column} = {outer_column}{})", extra(self))
            }
            // Uncorrelated: one row, none, or 21000.
            4 => {
                let value = self.expr(ty, &inner, 1);
                let filter = self.predicate(&inner, 0, 1);
                format!("(SELECT {value} FROM {name} AS {alias} WHERE {filter}{MANY_ROWS_MARK}")
            }
            // Correlated on any column: often several rows.
            _ => {
                let correlation_ty = *self.c.pick(&[Ty::Int, Ty::Text, Ty::Date, Ty::Bool]);
                let (inner_column, outer_column) = (self.column(correlation_ty, &inner), self.column(correlation_ty, outer));
                let value = self.expr(ty, &inner, 1);
                format!("(SELECT {value} FROM {name} AS {alias} WHERE {inner_column} = {outer_column}{}{MANY_ROWS_MARK}", extra(self))
            }
        }
    }

    /// A SELECT with a WHERE predicate and the same query as the UNION ALL
    /// of its rows where the predicate is true, false and NULL (ternary
    /// logic partitioning, as SQLancer checks).
    fn partitioning_case(&mut self) -> Query {
        let (from, scope) = self.from(1);
        let n = self.c.between(1, 3);
        let items: Vec<String> = (0..n)
            .map(|i| {
                let ty = self.any_ty();
                format!("{} AS c{i}", self.expr(ty, &scope, 0))
            })
            .collect();
        let predicate = self.predicate(&scope, 1, 0);
        let head = format!("SELECT {} FROM {from}", items.join(", "));
        let partitioned =
            format!("{head} WHERE {predicate} UNION ALL {head} WHERE NOT ({predicate}) UNION ALL {head} WHERE ({predicate}) IS NULL");
        Query { sql: self.with_ctes(&head), ordered: false, partitioned: Some(self.with_ctes(&partitioned)), cardinality: self.cardinality }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema;

    #[test]
    fn queries_are_reproducible_from_their_choices_and_cover_the_shapes() {
        let tables = schema::generate(&mut Choices::random(1), "t");
        let mut text = String::new();
        for seed in 0..400 {
            let mut choices = Choices::random(seed);
            let query = generate(&mut choices, &tables);
            let again = generate(&mut Choices::replay(choices.recorded().to_vec()), &tables);
            assert_eq!(query.sql, again.sql, "seed {seed} replays differently");
            text.push_str(&query.sql);
        }
        for shape in ["FULL JOIN", "LEFT SEMI JOIN", "GROUP BY ROLLUP", "GROUPING SETS", "OVER (", "EXISTS", "UNION", "LIMIT", "WITH w0"]
            .into_iter()
            .chain(["NOT IN (SELECT", "AS n FROM", "avg(", "NOT LIKE '%", "IS NOT DISTINCT FROM", "OR (r", "(SELECT DISTINCT", ") AS c0", MANY_ROWS_MARK])
            .chain(["EXTRACT(", "date_trunc('", "AS TIMESTAMPTZ)", "AS TIMESTAMP)", " INTERVAL '", "TIMESTAMPTZ '2024"])
        {
            assert!(text.contains(shape), "400 queries never used {shape}");
        }
    }

    #[test]
    fn writes_are_reproducible_and_cover_the_statements() {
        let tables = schema::generate(&mut Choices::random(1), "t");
        let mut text = String::new();
        for seed in 0..400 {
            let mut choices = Choices::random(seed);
            let write = generate_write(&mut choices, &tables);
            let again = generate_write(&mut Choices::replay(choices.recorded().to_vec()), &tables);
            assert_eq!(write.sql(), again.sql(), "seed {seed} replays differently");
            let sql = write.sql().join(";\n");
            let upserts = sql.contains("ON CONFLICT");
            assert_eq!(write.upsert, upserts, "seed {seed}: {sql}");
            assert!(!(upserts && sql.contains("UPDATE t")), "seed {seed}: an upsert write holds an UPDATE: {sql}");
            text.push_str(&sql);
        }
        for shape in ["UPDATE t", "DELETE FROM", "INSERT INTO t", "VALUES (", "ROLLBACK", "COMMIT", "ON CONFLICT DO NOTHING", ") DO NOTHING", "DO UPDATE SET", "= excluded."] {
            assert!(text.contains(shape), "400 writes never used {shape}");
        }
    }

    #[test]
    fn limiting_ends_each_subquery_that_may_give_rows_with_limit_one() {
        let query = Query {
            sql: format!("SELECT (SELECT a FROM t{MANY_ROWS_MARK} AS c0, (SELECT b FROM u WHERE u.k = t.k{MANY_ROWS_MARK} FROM t"),
            ordered: false,
            partitioned: None,
            cardinality: true,
        };
        assert_eq!(query.limited().unwrap(), "SELECT (SELECT a FROM t LIMIT 1) AS c0, (SELECT b FROM u WHERE u.k = t.k LIMIT 1) FROM t");
        assert_eq!(Query { sql: "SELECT 1".into(), ..query }.limited(), None);
    }

    #[test]
    fn an_empty_choice_stream_gives_the_simplest_query() {
        let tables = schema::generate(&mut Choices::random(1), "t");
        let query = generate(&mut Choices::replay(Vec::new()), &tables);
        assert_eq!(query.sql, "SELECT r0.a AS c0 FROM t0 AS r0");
    }
}
