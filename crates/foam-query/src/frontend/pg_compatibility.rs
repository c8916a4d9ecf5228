//! datafusion-pg-catalog's rewrite of PostgreSQL-only forms in catalog
//! queries (`'t'::regclass`, `OPERATOR(pg_catalog.~)`, whole client
//! queries it replaces), without the one rule that changes answers.
//!
//! Its `RemoveSubqueryFromProjection` replaces a scalar subquery of a select
//! list that it takes for correlated with NULL, and gives every other one
//! `LIMIT 1`. It takes a subquery for correlated when any qualified column in
//! it, nested subqueries included, names a table outside its own FROM, so
//! `SELECT (SELECT count(*) FROM t WHERE a = (SELECT c.oid FROM pg_class c
//! ...))` answered NULL where PostgreSQL answers 0, and any query whose text
//! holds `pg_` (a literal `'pg_%'` too) lost its correlated subqueries the
//! same way; `LIMIT 1` hid the 21000 of a subquery giving several rows.
//! FoamDB plans those subqueries itself (`scalar_subquery.rs`), so they are
//! kept out of that rule's reach, all but one kind: a subquery correlated
//! with the outer query (a column of a table outside its own FROM clauses)
//! in a query that reads nothing but the catalog. Client catalog queries
//! (psql's `\d`) hold such subqueries, over catalogs FoamDB keeps empty
//! (collations), which DataFusion cannot plan; NULL is their answer. Those
//! over `pg_attrdef`, which holds column defaults, are planned.

use std::collections::HashSet;
use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{Expr, Query, SelectItem, SetExpr, Statement, TableFactor, Visit, VisitMut, Visitor, VisitorMut};

/// `statement` (of text `text`) with datafusion-pg-catalog's rewrites
/// applied: its replacement of the whole query if it has one for `text`,
/// else its rules, select-list subqueries untouched.
pub fn rewrite(statement: &mut Statement, text: &str) {
    // Made once: it parses its list of whole-query replacements.
    static PARSER: std::sync::OnceLock<datafusion_pg_catalog::sql::PostgresCompatibilityParser> = std::sync::OnceLock::new();
    let compatible = PARSER.get_or_init(datafusion_pg_catalog::sql::PostgresCompatibilityParser::new);
    let replaced_whole = match compatible.parse(text) {
        Ok(mut parsed) if parsed.len() == 1 => parsed.pop().filter(|whole| whole.to_string() != compatible.rewrite(statement.clone()).to_string()),
        _ => None,
    };
    if let Some(whole) = replaced_whole {
        *statement = whole;
        return;
    }
    let catalog_only = reads_only_catalogs(statement);
    let _ = statement.visit(&mut Shield { lift: false, catalog_only });
    *statement = compatible.rewrite(statement.clone());
    let _ = statement.visit(&mut Shield { lift: true, catalog_only });
}

/// Whether every relation `statement` reads is a catalog's (`pg_...`,
/// `pg_catalog.x`, `information_schema.x`).
fn reads_only_catalogs(statement: &Statement) -> bool {
    let mut only = true;
    let _ = datafusion::sql::sqlparser::ast::visit_relations(statement, |name| {
        let parts: Vec<String> = name.0.iter().filter_map(|p| p.as_ident()).map(|i| i.value.to_lowercase()).collect();
        only &= match parts.as_slice() {
            [table] => table.starts_with("pg_"),
            [schema, _] => schema == "pg_catalog" || schema == "information_schema",
            _ => false,
        };
        ControlFlow::<()>::Continue(())
    });
    only
}

/// Whether `query` names a column of a table outside its own FROM clauses
/// (nested ones included): correlated with an outer query.
fn correlated(query: &Query) -> bool {
    struct Names(HashSet<String>);
    impl Visitor for Names {
        type Break = ();
        fn pre_visit_table_factor(&mut self, factor: &TableFactor) -> ControlFlow<()> {
            match factor {
                TableFactor::Table { name, alias, .. } => {
                    self.0.extend(name.0.last().and_then(|p| p.as_ident()).map(|i| i.value.to_lowercase()));
                    self.0.extend(alias.iter().map(|a| a.name.value.to_lowercase()));
                }
                TableFactor::Derived { alias, .. } | TableFactor::TableFunction { alias, .. } | TableFactor::Function { alias, .. } | TableFactor::UNNEST { alias, .. } => {
                    self.0.extend(alias.iter().map(|a| a.name.value.to_lowercase()));
                }
                _ => {}
            }
            ControlFlow::Continue(())
        }
    }
    let mut names = Names(HashSet::new());
    let _ = query.visit(&mut names);
    let mut outer = false;
    let _ = datafusion::sql::sqlparser::ast::visit_expressions(query, |expr| {
        if let Expr::CompoundIdentifier(parts) = expr
            && parts.len() >= 2
            && !names.0.contains(&parts[parts.len() - 2].value.to_lowercase())
        {
            outer = true;
        }
        ControlFlow::<()>::Continue(())
    });
    outer
}

/// Whether `query` reads `pg_attrdef`, which FoamDB fills with column
/// defaults (`pg_defaults.rs`): its correlated subqueries are planned, not
/// answered NULL.
fn reads_defaults(query: &Query) -> bool {
    let mut found = false;
    let _ = datafusion::sql::sqlparser::ast::visit_relations(query, |name| {
        found |= name.0.last().and_then(|p| p.as_ident()).is_some_and(|i| i.value.eq_ignore_ascii_case("pg_attrdef"));
        ControlFlow::<()>::Continue(())
    });
    found
}

/// Puts each select-list subquery in parentheses the rule does not look
/// into (`lift: false`), or takes it out again (`lift: true`); in a query
/// of the catalog only, a correlated one is left to the rule.
struct Shield {
    lift: bool,
    catalog_only: bool,
}

impl VisitorMut for Shield {
    type Break = ();

    fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        let SetExpr::Select(select) = query.body.as_mut() else { return ControlFlow::Continue(()) };
        for item in &mut select.projection {
            let (SelectItem::UnnamedExpr(expr) | SelectItem::ExprWithAlias { expr, .. }) = item else { continue };
            match (self.lift, &*expr) {
                (false, Expr::Subquery(query)) if !(self.catalog_only && correlated(query) && !reads_defaults(query)) => {
                    *expr = Expr::Nested(Box::new(expr.clone()))
                }
                (true, Expr::Nested(inner)) if matches!(inner.as_ref(), Expr::Subquery(_)) => *expr = inner.as_ref().clone(),
                _ => {}
            }
        }
        ControlFlow::Continue(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewritten(sql: &str) -> String {
        let dialect = datafusion::sql::sqlparser::dialect::PostgreSqlDialect {};
        let mut statement = datafusion::sql::sqlparser::parser::Parser::parse_sql(&dialect, sql).unwrap().remove(0);
        rewrite(&mut statement, sql);
        statement.to_string()
    }

    #[test]
    fn select_list_subqueries_keep_their_meaning() {
        let sql = "SELECT (SELECT count(*) FROM t WHERE a = (SELECT c.oid FROM pg_catalog.pg_class AS c WHERE c.relname = 'x'))";
        assert_eq!(rewritten(sql), sql);
        let correlated = "SELECT u.name, (SELECT count(*) FROM o WHERE o.k = u.k) AS n FROM u WHERE u.name LIKE 'pg_%'";
        assert_eq!(rewritten(correlated), correlated);
        // Correlated in a query of the catalog only: NULL, as clients' need.
        let catalog = "SELECT a.attname, (SELECT c.collname FROM pg_catalog.pg_collation AS c WHERE c.oid = a.attcollation) FROM pg_catalog.pg_attribute AS a";
        assert_eq!(rewritten(catalog), "SELECT a.attname, NULL FROM pg_catalog.pg_attribute AS a");
        // Except over the defaults, which FoamDB keeps.
        let defaults = "SELECT a.attname, (SELECT d.adbin FROM pg_catalog.pg_attrdef AS d WHERE d.adrelid = a.attrelid) FROM pg_catalog.pg_attribute AS a";
        assert_eq!(rewritten(defaults), defaults);
        // The other rules still apply: a regclass cast becomes a lookup.
        assert!(rewritten("SELECT 'pg_proc'::regclass").contains("parse_ident"), "{}", rewritten("SELECT 'pg_proc'::regclass"));
    }
}
