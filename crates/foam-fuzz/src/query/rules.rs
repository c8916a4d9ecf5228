//! Queries aimed at FoamDB's own optimizer rules: for each rule, the shape
//! it rewrites and the shapes beside it where it must not fire.
//!
//! The general generator (`query.rs`) reaches a rule's shape only by luck:
//! `eager_count` wants a count of one join side grouped by the other, on an
//! equi-join and nothing else; `group_key_filter` wants a grouped subquery
//! joined on its key to a filtered table. Each family here builds that shape
//! over random tables (so over every layout) and then varies exactly what
//! the rule checks before it fires: join type, extra conditions, the
//! aggregate, where the grouping columns come from, whether a side is
//! filtered, replicated or not. A variant the rule must leave alone is as
//! much a test as one it rewrites. The rule each family aims at is named by
//! its `foam.*` switch in the comment above it.

use super::{Generator, Query};

/// Join key columns of one family on both sides: integer columns pair with
/// each other, text with text, dates with dates, timestamps with timestamps.
const KEY_FAMILIES: &[&[&str]] = &[&["a", "b", "c"], &["a", "b", "c"], &["d"], &["g"], &["i"], &["j"]];

impl Generator<'_> {
    /// A query of one rule's family.
    pub(super) fn rule_case(&mut self) -> Query {
        let sql = match self.c.below(6) {
            0 => self.eager_count_case(),
            1 => self.early_semi_join_case(),
            2 => self.group_key_filter_case(),
            3 => self.early_replica_join_case(),
            4 => self.eager_aggregate_case(),
            _ => self.like_case(),
        };
        Query { sql, ordered: false, partitioned: None, cardinality: false }
    }

    /// A table name and a fresh alias for it.
    fn table_as(&mut self) -> (String, String) {
        (self.c.pick(self.tables).name.clone(), self.alias())
    }

    /// Like [`Self::table_as`], most often a replicated table when there is one.
    fn replicated_as(&mut self) -> (String, String) {
        let replicated: Vec<String> = self.tables.iter().filter(|t| t.layout.keys.is_empty()).map(|t| t.name.clone()).collect();
        if replicated.is_empty() || self.c.chance(25) {
            return self.table_as();
        }
        (self.c.pick(&replicated).clone(), self.alias())
    }

    /// Two columns to join on, one per side, of one family.
    fn key_pair(&mut self) -> (&'static str, &'static str) {
        let family = *self.c.pick(KEY_FAMILIES);
        (*self.c.pick(family), *self.c.pick(family))
    }

    /// A filter on the columns of `alias` only.
    fn filter_on(&mut self, alias: &str) -> String {
        match self.c.below(5) {
            0 => format!("{alias}.a < {}", self.c.between(1, 8)),
            1 => format!("{alias}.d IN ('x', 'xy', '')"),
            2 => format!("{alias}.f"),
            3 => format!("{alias}.g >= DATE '2024-02-01'"),
            _ => format!("({alias}.b IS NULL OR {alias}.b > 2)"),
        }
    }

    // foam.eager_counts: `Aggregate [L cols] count(R.x)` over `L LEFT|INNER
    // JOIN R ON L.k = R.k`, optionally under TPC-H Q13's count of counts.
    fn eager_count_case(&mut self) -> String {
        let ((lt, l), (rt, r)) = (self.table_as(), self.table_as());
        let (lk, rk) = self.key_pair();
        let kind = *self.c.pick(&["LEFT JOIN", "JOIN", "LEFT JOIN", "RIGHT JOIN", "FULL JOIN"]);
        let mut on = format!("{l}.{lk} = {r}.{rk}");
        match self.c.below(5) {
            1 => on.push_str(&format!(" AND {r}.d NOT LIKE '%x%y%'")),
            2 => on.push_str(&format!(" AND {r}.b < {l}.c")),
            3 => on.push_str(&format!(" AND {l}.b = {r}.a")),
            _ => {}
        }
        let counted = *self.c.pick(&["a", "b", "d", "h", "g"]);
        let count = match self.c.below(7) {
            0..=2 => format!("count({r}.{counted})"),
            3 => "count(*)".to_string(),
            4 => format!("count(DISTINCT {r}.{counted})"),
            5 => format!("count({r}.{counted}) FILTER (WHERE {r}.f)"),
            _ => format!("sum({r}.a)"),
        };
        let group_from = if self.c.chance(15) { r.clone() } else { l.clone() };
        let groups: Vec<String> = (0..self.c.between(1, 2)).map(|_| format!("{group_from}.{}", self.c.pick(&["a", "d", "b", "g"]))).collect();
        let filter = if self.c.chance(30) { format!(" WHERE {}", self.filter_on(&l)) } else { String::new() };
        let items: Vec<String> = groups.iter().enumerate().map(|(i, g)| format!("{g} AS c{i}")).collect();
        let inner = format!(
            "SELECT {}, {count} AS n FROM {lt} AS {l} {kind} {rt} AS {r} ON {on}{filter} GROUP BY {}",
            items.join(", "),
            groups.join(", ")
        );
        if self.c.chance(50) {
            let outer = self.alias();
            format!("SELECT {outer}.n AS c0, count(*) AS c1 FROM ({inner}) AS {outer} GROUP BY {outer}.n")
        } else {
            inner
        }
    }

    // foam.early_semi_joins: `(X ⋈ B) ⋉ S` on X's key moves below the join
    // with B; not when B is filtered, and never past outer joins.
    fn early_semi_join_case(&mut self) -> String {
        let ((xt, x), (bt, b), (st, s)) = (self.table_as(), self.table_as(), self.table_as());
        let (xk, bk) = self.key_pair();
        let kind = *self.c.pick(&["JOIN", "JOIN", "LEFT JOIN", "RIGHT JOIN"]);
        let tested = *self.c.pick(&["a", "b", "c"]);
        let subquery_column = *self.c.pick(&["a", "b", "c"]);
        let threshold = self.c.below(8);
        let grouped = format!("SELECT {s}.{subquery_column} FROM {st} AS {s} GROUP BY {s}.{subquery_column} HAVING sum({s}.a) > {threshold}");
        let test = match self.c.below(5) {
            0 | 1 => format!("{x}.{tested} IN ({grouped})"),
            2 => format!("{x}.{tested} NOT IN ({grouped})"),
            3 => format!("EXISTS (SELECT 1 FROM {st} AS {s} WHERE {s}.{subquery_column} = {x}.{tested} AND {s}.f)"),
            _ => format!("NOT EXISTS (SELECT 1 FROM {st} AS {s} WHERE {s}.{subquery_column} = {x}.{tested})"),
        };
        let b_filter = if self.c.chance(30) { format!(" AND {}", self.filter_on(&b)) } else { String::new() };
        let from = format!("{xt} AS {x} {kind} {bt} AS {b} ON {x}.{xk} = {b}.{bk}");
        if self.c.chance(50) {
            format!("SELECT {x}.a AS c0, {x}.d AS c1, sum({b}.h) AS c2 FROM {from} WHERE {test}{b_filter} GROUP BY {x}.a, {x}.d")
        } else {
            format!("SELECT {x}.{tested} AS c0, {b}.d AS c1, {x}.g AS c2 FROM {from} WHERE {test}{b_filter}")
        }
    }

    // foam.group_key_filters: an aggregate grouped by k, joined on k to a side
    // whose key comes from a filtered table, aggregates only those keys.
    // Outer joins keeping the aggregate's rows, anti joins and NULL-equal keys
    // must be left alone.
    fn group_key_filter_case(&mut self) -> String {
        let ((xt, x), (tt, t), (rt, r)) = (self.table_as(), self.table_as(), self.table_as());
        // X joins T on (xk, txk); the aggregate of R, grouped by rk, meets T's tk.
        let (xk, txk) = self.key_pair();
        let (rk, tk) = self.key_pair();
        let t_filter = if self.c.chance(80) { self.filter_on(&t) } else { "true".to_string() };
        if self.c.chance(40) {
            // TPC-H Q17's correlated form, which DataFusion decorrelates into
            // the grouped join.
            let op = *self.c.pick(&["<", ">=", "="]);
            let scale = *self.c.pick(&["0.2 * ", "", "2 * "]);
            return format!(
                "SELECT sum({x}.h) AS c0, count(*) AS c1 FROM {xt} AS {x} JOIN {tt} AS {t} ON {x}.{xk} = {t}.{txk} \
                 WHERE {t_filter} AND {x}.a {op} (SELECT {scale}avg({r}.b) FROM {rt} AS {r} WHERE {r}.{rk} = {t}.{tk})"
            );
        }
        let g = self.alias();
        let aggregate = *self.c.pick(&["avg", "sum", "min", "count"]);
        let grouped = format!("SELECT {r}.{rk} AS k, {aggregate}({r}.b) AS v FROM {rt} AS {r} GROUP BY {r}.{rk}");
        let kind = *self.c.pick(&["JOIN", "JOIN", "LEFT JOIN", "RIGHT JOIN", "FULL JOIN", "LEFT SEMI JOIN", "LEFT ANTI JOIN"]);
        let equal = if self.c.chance(15) { "IS NOT DISTINCT FROM" } else { "=" };
        let joined = format!("{xt} AS {x} JOIN {tt} AS {t} ON {x}.{xk} = {t}.{txk}");
        if kind.contains("SEMI") || kind.contains("ANTI") {
            // The aggregate on the left, the filtered key on the right.
            return format!(
                "SELECT {g}.k AS c0, {g}.v AS c1 FROM ({grouped}) AS {g} {kind} {tt} AS {t} ON ({g}.k {equal} {t}.{tk}) AND ({t_filter})"
            );
        }
        format!("SELECT {x}.a AS c0, {g}.k AS c1, {g}.v AS c2 FROM {joined} {kind} ({grouped}) AS {g} ON {g}.k {equal} {t}.{tk} WHERE {t_filter}")
    }

    // foam.early_replica_joins: a filtered replicated table joined at the top
    // moves down to the input its key comes from, but not through a full join
    // and not below where a condition pairing two of them can be checked.
    fn early_replica_join_case(&mut self) -> String {
        let ((at, a), (bt, b), (dt, d)) = (self.table_as(), self.table_as(), self.replicated_as());
        let (ak, bk) = self.key_pair();
        let kind = *self.c.pick(&["JOIN", "JOIN", "LEFT JOIN", "RIGHT JOIN", "FULL JOIN", "LEFT SEMI JOIN"]);
        let keyed = if kind.contains("SEMI") || self.c.chance(50) { a.clone() } else { b.clone() };
        let (k, dk) = self.key_pair();
        let mut from = format!("{at} AS {a} {kind} {bt} AS {b} ON {a}.{ak} = {b}.{bk} JOIN {dt} AS {d} ON {keyed}.{k} = {d}.{dk}");
        let mut filter = self.filter_on(&d);
        if !kind.contains("SEMI") && self.c.chance(35) {
            // TPC-H Q7: two copies of the replicated table, paired by a condition.
            let (d2t, d2) = self.replicated_as();
            let other = if keyed == a { b.clone() } else { a.clone() };
            let (k2, d2k) = self.key_pair();
            from.push_str(&format!(" JOIN {d2t} AS {d2} ON {other}.{k2} = {d2}.{d2k}"));
            filter = format!("(({d}.d = 'x' AND {d2}.d = 'y') OR ({d}.d = 'y' AND {d2}.d = 'x'))");
        }
        if self.c.chance(50) {
            format!("SELECT {d}.d AS c0, count(*) AS c1, sum({a}.h) AS c2 FROM {from} WHERE {filter} GROUP BY {d}.d")
        } else {
            format!("SELECT {a}.a AS c0, {d}.b AS c1, {keyed}.g AS c2 FROM {from} WHERE {filter}")
        }
    }

    // foam.eager_aggregates: an aggregate of the far side of an inner join tree
    // grouped by columns of the near side is computed per join key first;
    // only for sum/min/max/count of unfiltered near sides.
    fn eager_aggregate_case(&mut self) -> String {
        let ((gt, g), (at, a)) = (self.table_as(), self.table_as());
        let (gk, ak) = self.key_pair();
        let mut from = format!("{gt} AS {g} JOIN {at} AS {a} ON {g}.{gk} = {a}.{ak}");
        let mut far = vec![a.clone()];
        if self.c.chance(50) {
            let (a2t, a2) = self.table_as();
            let (k1, k2) = self.key_pair();
            from.push_str(&format!(" JOIN {a2t} AS {a2} ON {a}.{k1} = {a2}.{k2}"));
            far.push(a2);
        }
        let source = self.c.pick(&far).clone();
        let aggregates: Vec<String> = (0..self.c.between(1, 3))
            .map(|_| match self.c.below(9) {
                0 | 1 => format!("sum({source}.h)"),
                2 => format!("sum({a}.a * {source}.b)"),
                3 => format!("min({source}.d)"),
                4 => format!("max({source}.g)"),
                5 => format!("count({source}.c)"),
                6 => "count(*)".to_string(),
                7 => format!("avg({source}.a)"),
                _ => format!("count(DISTINCT {source}.a)"),
            })
            .collect();
        let filter = match self.c.below(4) {
            0 => format!(" WHERE {}", self.filter_on(&g)),
            1 => format!(" WHERE {}", self.filter_on(&source)),
            _ => String::new(),
        };
        let groups = [format!("{g}.a"), format!("{g}.d")];
        let items: Vec<String> = groups.iter().chain(&aggregates).enumerate().map(|(i, e)| format!("{e} AS c{i}")).collect();
        format!("SELECT {} FROM {from}{filter} GROUP BY {}", items.join(", "), groups.join(", "))
    }

    // foam.fast_like: filters by LIKE patterns of text and `%` only; `_`,
    // escapes, ILIKE and patterns outside filters are DataFusion's.
    fn like_case(&mut self) -> String {
        let (xt, x) = self.table_as();
        let pattern = *self.c.pick(&[
            "%x%y%", "x%", "%y", "x%y", "%x%x%", "%%", "%", "", "x_", "%A%b%", "xy%y", "%z z%", "x\\%y", "%x%%y", "z%z", "_%",
        ]);
        let op = *self.c.pick(&["LIKE", "NOT LIKE", "LIKE", "ILIKE", "NOT ILIKE"]);
        let test = format!("{x}.d {op} '{pattern}'");
        match self.c.below(4) {
            0 | 1 => format!("SELECT {x}.a AS c0, {x}.d AS c1 FROM {xt} AS {x} WHERE {test}"),
            2 => format!("SELECT {x}.d AS c0, count(*) AS c1 FROM {xt} AS {x} WHERE {test} OR {x}.b = 1 GROUP BY {x}.d"),
            _ => format!("SELECT {x}.d AS c0, CASE WHEN {test} THEN 1 ELSE 0 END AS c1 FROM {xt} AS {x}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::choices::Choices;
    use crate::engines::Outcome;
    use crate::reference::LocalReference as Reference;
    use crate::schema;

    /// Every family writes queries single-process DataFusion plans and
    /// answers over random tables: a family whose SQL does not run tests
    /// nothing.
    #[tokio::test]
    async fn every_rule_family_writes_queries_that_run() {
        let mut failed = Vec::new();
        let mut answered = [0u32; 6];
        for database in 0..40u64 {
            let tables = schema::generate(&mut Choices::random(database), "t");
            let reference = Reference::new(&tables).await.unwrap();
            for family in 0..6u32 {
                // Pin the family (the first choice) and draw the rest at random.
                let mut random = Choices::random(database * 6 + family as u64);
                for _ in 0..200 {
                    random.below(u32::MAX);
                }
                let mut recorded = vec![family];
                recorded.extend_from_slice(random.recorded());
                let mut choices = Choices::replay(recorded);
                let mut g = Generator { c: &mut choices, tables: &tables, aliases: 0, ctes: Vec::new(), tie_sensitive_window: false, cardinality: false };
                let query = g.rule_case();
                match reference.query(&query.sql).await.0 {
                    Outcome::Rows(_) => answered[family as usize] += 1,
                    other => failed.push(format!("{}: {other:?}", query.sql)),
                }
            }
        }
        assert!(failed.is_empty(), "{} of 240 did not run:\n{}", failed.len(), failed.join("\n"));
        assert!(answered.iter().all(|n| *n == 40), "{answered:?}");
    }
}
