//! `information_schema`'s views of columns and keys as PostgreSQL defines
//! them: views over `pg_catalog` (`pg_attribute`, `pg_class`, `pg_type`,
//! `pg_attrdef`, `pg_constraint`), with PostgreSQL's columns and values.
//! DataFusion's own `information_schema.columns` named Arrow types
//! (`Int32`, `Utf8View`, `Timestamp(µs)`), counted `ordinal_position` from
//! 0 and lacked `udt_name`, `is_identity` and the rest, so tools that read
//! a table's columns there (dbt, Grafana, schema browsers) saw other types
//! than the table was created with; it has no `table_constraints`,
//! `key_column_usage` or `referential_constraints`, which ORMs read a
//! table's keys from (TypeORM, Sequelize).
//!
//! The front end replaces each reference to one of these views with its
//! query, under the reference's alias (the view's name without one):
//!
//! ```text
//!   FROM information_schema.columns c  ─▶  FROM (SELECT ... FROM pg_catalog.pg_attribute a JOIN ...) c
//! ```
//!
//! FoamDB's `pg_attribute` carries each column's declared type
//! (`catalog/pg_columns.rs`), so `columns` reads `character varying`, 5 for
//! a `VARCHAR(5)`, and precision and scale for a `NUMERIC(12,2)`; its
//! `pg_constraint` holds the keys (`catalog/pg_keys.rs`). Where PostgreSQL
//! filters rows by the reader's privileges, these views do not; identity
//! columns' sequence bounds (`identity_start` and its kin) are NULL.
//! `information_schema.tables`, `views` and `schemata` are DataFusion's.

use std::ops::ControlFlow;
use std::sync::OnceLock;

use datafusion::sql::sqlparser::ast::{Ident, ObjectNamePart, Query, Statement, TableAlias, TableFactor, VisitMut, VisitorMut};

/// The schema the views are in.
const SCHEMA: &str = "information_schema";

/// The views, each as PostgreSQL defines it (its `information_schema.sql`)
/// in the forms FoamDB's catalog answers: the `_pg_*` helper functions
/// written out for the types FoamDB has, no privilege filter, no domains.
/// `table_constraints` lists each NOT NULL column as a CHECK constraint
/// named `<namespace oid>_<table oid>_<column number>_not_null`, as
/// PostgreSQL 15 does, and `check_constraints` gives it the clause
/// `a IS NOT NULL`; FoamDB has no foreign keys, so
/// `referential_constraints` is empty.
const VIEWS: [(&str, &str); 5] = [
    ("columns", COLUMNS),
    ("table_constraints", TABLE_CONSTRAINTS),
    ("check_constraints", CHECK_CONSTRAINTS),
    ("key_column_usage", KEY_COLUMN_USAGE),
    ("referential_constraints", REFERENTIAL_CONSTRAINTS),
];

const COLUMNS: &str = "
SELECT CAST(current_database() AS TEXT) AS table_catalog,
  CAST(nc.nspname AS TEXT) AS table_schema,
  CAST(c.relname AS TEXT) AS table_name,
  CAST(a.attname AS TEXT) AS column_name,
  CAST(a.attnum AS INT) AS ordinal_position,
  CAST(pg_get_expr(ad.adbin, ad.adrelid) AS TEXT) AS column_default,
  CASE WHEN a.attnotnull THEN 'NO' ELSE 'YES' END AS is_nullable,
  CAST(CASE WHEN t.typelem <> 0 AND t.typlen = -1 THEN 'ARRAY' ELSE format_type(a.atttypid, NULL) END AS TEXT) AS data_type,
  CAST(CASE WHEN a.atttypid IN (1042, 1043) AND a.atttypmod <> -1 THEN a.atttypmod - 4 END AS INT) AS character_maximum_length,
  CAST(CASE WHEN a.atttypid IN (25, 1042, 1043) THEN CASE WHEN a.atttypmod = -1 THEN 1073741824 ELSE (a.atttypmod - 4) * 4 END END AS INT) AS character_octet_length,
  CAST(CASE a.atttypid WHEN 21 THEN 16 WHEN 23 THEN 32 WHEN 20 THEN 64 WHEN 700 THEN 24 WHEN 701 THEN 53
    WHEN 1700 THEN CASE WHEN a.atttypmod = -1 THEN NULL ELSE ((a.atttypmod - 4) >> 16) & 65535 END END AS INT) AS numeric_precision,
  CAST(CASE WHEN a.atttypid IN (21, 23, 20, 700, 701) THEN 2 WHEN a.atttypid = 1700 THEN 10 END AS INT) AS numeric_precision_radix,
  CAST(CASE WHEN a.atttypid IN (21, 23, 20) THEN 0 WHEN a.atttypid = 1700 AND a.atttypmod <> -1 THEN (a.atttypmod - 4) & 65535 END AS INT) AS numeric_scale,
  CAST(CASE WHEN a.atttypid = 1082 THEN 0 WHEN a.atttypid IN (1083, 1114, 1184, 1266, 1186) THEN CASE WHEN a.atttypmod < 0 THEN 6 ELSE a.atttypmod END END AS INT) AS datetime_precision,
  CAST(NULL AS TEXT) AS interval_type,
  CAST(NULL AS INT) AS interval_precision,
  CAST(NULL AS TEXT) AS character_set_catalog,
  CAST(NULL AS TEXT) AS character_set_schema,
  CAST(NULL AS TEXT) AS character_set_name,
  CAST(NULL AS TEXT) AS collation_catalog,
  CAST(NULL AS TEXT) AS collation_schema,
  CAST(NULL AS TEXT) AS collation_name,
  CAST(NULL AS TEXT) AS domain_catalog,
  CAST(NULL AS TEXT) AS domain_schema,
  CAST(NULL AS TEXT) AS domain_name,
  CAST(current_database() AS TEXT) AS udt_catalog,
  CAST(nt.nspname AS TEXT) AS udt_schema,
  CAST(t.typname AS TEXT) AS udt_name,
  CAST(NULL AS TEXT) AS scope_catalog,
  CAST(NULL AS TEXT) AS scope_schema,
  CAST(NULL AS TEXT) AS scope_name,
  CAST(NULL AS INT) AS maximum_cardinality,
  CAST(a.attnum AS TEXT) AS dtd_identifier,
  'NO' AS is_self_referencing,
  CASE WHEN a.attidentity IN ('a', 'd') THEN 'YES' ELSE 'NO' END AS is_identity,
  CAST(CASE a.attidentity WHEN 'a' THEN 'ALWAYS' WHEN 'd' THEN 'BY DEFAULT' END AS TEXT) AS identity_generation,
  CAST(NULL AS TEXT) AS identity_start,
  CAST(NULL AS TEXT) AS identity_increment,
  CAST(NULL AS TEXT) AS identity_maximum,
  CAST(NULL AS TEXT) AS identity_minimum,
  'NO' AS identity_cycle,
  'NEVER' AS is_generated,
  CAST(NULL AS TEXT) AS generation_expression,
  CASE WHEN c.relkind IN ('r', 'p') THEN 'YES' ELSE 'NO' END AS is_updatable
FROM pg_catalog.pg_attribute a
  LEFT JOIN pg_catalog.pg_attrdef ad ON a.attrelid = ad.adrelid AND a.attnum = ad.adnum
  JOIN pg_catalog.pg_class c ON a.attrelid = c.oid
  JOIN pg_catalog.pg_namespace nc ON c.relnamespace = nc.oid
  JOIN pg_catalog.pg_type t ON a.atttypid = t.oid
  JOIN pg_catalog.pg_namespace nt ON t.typnamespace = nt.oid
WHERE a.attnum > 0 AND NOT a.attisdropped AND c.relkind IN ('r', 'v', 'f', 'p', 'm')";

const TABLE_CONSTRAINTS: &str = "
SELECT CAST(current_database() AS TEXT) AS constraint_catalog,
  CAST(nc.nspname AS TEXT) AS constraint_schema,
  CAST(c.conname AS TEXT) AS constraint_name,
  CAST(current_database() AS TEXT) AS table_catalog,
  CAST(nr.nspname AS TEXT) AS table_schema,
  CAST(r.relname AS TEXT) AS table_name,
  CAST(CASE c.contype WHEN 'c' THEN 'CHECK' WHEN 'f' THEN 'FOREIGN KEY' WHEN 'p' THEN 'PRIMARY KEY' WHEN 'u' THEN 'UNIQUE' END AS TEXT) AS constraint_type,
  CASE WHEN c.condeferrable THEN 'YES' ELSE 'NO' END AS is_deferrable,
  CASE WHEN c.condeferred THEN 'YES' ELSE 'NO' END AS initially_deferred,
  'YES' AS enforced,
  CAST(CASE WHEN c.contype = 'u' THEN 'YES' END AS TEXT) AS nulls_distinct
FROM pg_catalog.pg_constraint c
  JOIN pg_catalog.pg_namespace nc ON nc.oid = c.connamespace
  JOIN pg_catalog.pg_class r ON c.conrelid = r.oid
  JOIN pg_catalog.pg_namespace nr ON nr.oid = r.relnamespace
WHERE c.contype IN ('c', 'f', 'p', 'u') AND r.relkind IN ('r', 'p')
UNION ALL
SELECT CAST(current_database() AS TEXT), CAST(nr.nspname AS TEXT),
  CAST(nr.oid AS TEXT) || '_' || CAST(r.oid AS TEXT) || '_' || CAST(a.attnum AS TEXT) || '_not_null',
  CAST(current_database() AS TEXT), CAST(nr.nspname AS TEXT), CAST(r.relname AS TEXT),
  'CHECK', 'NO', 'NO', 'YES', CAST(NULL AS TEXT)
FROM pg_catalog.pg_attribute a
  JOIN pg_catalog.pg_class r ON r.oid = a.attrelid
  JOIN pg_catalog.pg_namespace nr ON nr.oid = r.relnamespace
WHERE a.attnotnull AND a.attnum > 0 AND NOT a.attisdropped AND r.relkind IN ('r', 'p')";

const CHECK_CONSTRAINTS: &str = "
SELECT CAST(current_database() AS TEXT) AS constraint_catalog,
  CAST(rs.nspname AS TEXT) AS constraint_schema,
  CAST(con.conname AS TEXT) AS constraint_name,
  CAST(substr(pg_get_constraintdef(con.oid), 7) AS TEXT) AS check_clause
FROM pg_catalog.pg_constraint con
  JOIN pg_catalog.pg_namespace rs ON rs.oid = con.connamespace
  JOIN pg_catalog.pg_class c ON c.oid = con.conrelid
WHERE con.contype = 'c'
UNION ALL
SELECT CAST(current_database() AS TEXT), CAST(n.nspname AS TEXT),
  CAST(n.oid AS TEXT) || '_' || CAST(r.oid AS TEXT) || '_' || CAST(a.attnum AS TEXT) || '_not_null',
  CAST(a.attname AS TEXT) || ' IS NOT NULL'
FROM pg_catalog.pg_namespace n
  JOIN pg_catalog.pg_class r ON r.relnamespace = n.oid
  JOIN pg_catalog.pg_attribute a ON a.attrelid = r.oid
WHERE a.attnotnull AND a.attnum > 0 AND NOT a.attisdropped AND r.relkind IN ('r', 'p')";

const KEY_COLUMN_USAGE: &str = "
SELECT CAST(current_database() AS TEXT) AS constraint_catalog,
  CAST(k.constraint_schema AS TEXT) AS constraint_schema,
  CAST(k.conname AS TEXT) AS constraint_name,
  CAST(current_database() AS TEXT) AS table_catalog,
  CAST(k.table_schema AS TEXT) AS table_schema,
  CAST(k.relname AS TEXT) AS table_name,
  CAST(a.attname AS TEXT) AS column_name,
  CAST(k.position AS INT) AS ordinal_position,
  CAST(NULL AS INT) AS position_in_unique_constraint
FROM (SELECT r.oid AS relid, r.relname, nc.nspname AS constraint_schema, nr.nspname AS table_schema, c.conname,
        unnest(c.conkey) AS attnum, generate_subscripts(c.conkey, 1) AS position
      FROM pg_catalog.pg_constraint c
        JOIN pg_catalog.pg_namespace nc ON nc.oid = c.connamespace
        JOIN pg_catalog.pg_class r ON c.conrelid = r.oid
        JOIN pg_catalog.pg_namespace nr ON nr.oid = r.relnamespace
      WHERE c.contype IN ('p', 'u', 'f') AND r.relkind IN ('r', 'p')) k
  JOIN pg_catalog.pg_attribute a ON a.attrelid = k.relid AND a.attnum = k.attnum
WHERE NOT a.attisdropped";

const REFERENTIAL_CONSTRAINTS: &str = "
SELECT CAST(current_database() AS TEXT) AS constraint_catalog,
  CAST(nc.nspname AS TEXT) AS constraint_schema,
  CAST(c.conname AS TEXT) AS constraint_name,
  CAST(current_database() AS TEXT) AS unique_constraint_catalog,
  CAST(NULL AS TEXT) AS unique_constraint_schema,
  CAST(NULL AS TEXT) AS unique_constraint_name,
  CAST('NONE' AS TEXT) AS match_option,
  CAST('NO ACTION' AS TEXT) AS update_rule,
  CAST('NO ACTION' AS TEXT) AS delete_rule
FROM pg_catalog.pg_constraint c
  JOIN pg_catalog.pg_namespace nc ON nc.oid = c.connamespace
WHERE c.contype = 'f'";

/// Replaces every reference to one of [`VIEWS`] in `statement` with the
/// view's query; whether there was one.
pub fn rewrite(statement: &mut Statement) -> bool {
    let mut views = Views { replaced: false };
    let _ = statement.visit(&mut views);
    views.replaced
}

struct Views {
    replaced: bool,
}

impl VisitorMut for Views {
    type Break = ();

    fn pre_visit_table_factor(&mut self, factor: &mut TableFactor) -> ControlFlow<()> {
        let TableFactor::Table { name, alias, args: None, .. } = factor else { return ControlFlow::Continue(()) };
        // As PostgreSQL folds them: `"COLUMNS"` quoted is another name.
        let parts: Vec<String> = name
            .0
            .iter()
            .filter_map(|part| match part {
                ObjectNamePart::Identifier(ident) => Some(crate::frontend::ddl::normalize_ident(&ident.value, ident.quote_style)),
                _ => None,
            })
            .collect();
        let view = match parts.as_slice() {
            [.., schema, table] if parts.len() <= 3 && schema == SCHEMA => views().iter().find(|(name, _)| table == name),
            _ => None,
        };
        let Some((name, query)) = view else { return ControlFlow::Continue(()) };
        let alias = alias.take().unwrap_or_else(|| TableAlias { explicit: true, name: Ident::new(*name), columns: vec![], at: None });
        *factor = TableFactor::Derived { lateral: false, subquery: Box::new(query.clone()), alias: Some(alias), sample: None };
        self.replaced = true;
        ControlFlow::Continue(())
    }
}

/// Each view's name and query, parsed once.
fn views() -> &'static [(&'static str, Query)] {
    static PARSED: OnceLock<Vec<(&'static str, Query)>> = OnceLock::new();
    PARSED.get_or_init(|| {
        let dialect = datafusion::sql::sqlparser::dialect::PostgreSqlDialect {};
        VIEWS
            .iter()
            .map(|(name, text)| match datafusion::sql::sqlparser::parser::Parser::parse_sql(&dialect, text).map(|mut statements| statements.pop()) {
                Ok(Some(Statement::Query(query))) => (*name, *query),
                other => unreachable!("information_schema.{name}'s definition is one query: {other:?}"),
            })
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewritten(sql: &str) -> (bool, Statement) {
        let dialect = datafusion::sql::sqlparser::dialect::PostgreSqlDialect {};
        let mut statement = datafusion::sql::sqlparser::parser::Parser::parse_sql(&dialect, sql).unwrap().remove(0);
        (rewrite(&mut statement), statement)
    }

    #[test]
    fn references_to_the_table_read_the_view_under_their_alias() {
        let (replaced, statement) = rewritten("SELECT c.column_name FROM information_schema.columns c JOIN INFORMATION_SCHEMA.COLUMNS ON true");
        assert!(replaced);
        let text = statement.to_string();
        assert_eq!(text.matches("FROM pg_catalog.pg_attribute a").count(), 2, "{text}");
        assert!(text.contains(") c JOIN (SELECT") && text.ends_with(") AS columns ON true"), "{text}");
        let Statement::Query(query) = statement else { panic!() };
        assert!(matches!(*query.body, datafusion::sql::sqlparser::ast::SetExpr::Select(_)));
    }

    #[test]
    fn every_view_parses_and_is_named_by_its_reference() {
        for (name, _) in VIEWS {
            let (replaced, statement) = rewritten(&format!("SELECT * FROM Information_Schema.{name}"));
            assert!(replaced, "{name}");
            assert!(statement.to_string().ends_with(&format!(") AS {name}")), "{name}");
        }
    }

    #[test]
    fn other_tables_are_left_alone() {
        for sql in [
            "SELECT * FROM information_schema.tables",
            "SELECT * FROM columns",
            "SELECT * FROM public.columns",
            "SELECT * FROM x.information_schema.columns.y",
            "SELECT * FROM \"INFORMATION_SCHEMA\".\"COLUMNS\"",
        ] {
            let (replaced, statement) = rewritten(sql);
            assert!(!replaced, "{sql}");
            assert_eq!(statement.to_string(), sql);
        }
    }
}
