//! RETURNING: the rows a write changed, read back by a query of them.
//!
//! ```text
//!  UPDATE t AS a SET v = v + 1 WHERE p RETURNING a.k, v * 2
//!  ──▶ the UPDATE without RETURNING            (modify.rs, run as before)
//!    + SELECT a.k, v * 2 FROM t AS a           (the returning query)
//! ```
//! The returning query is planned as any query is, with the statement: its
//! columns get PostgreSQL's names and types, its reads need SELECT on the
//! table, and a client's Describe sees its row shape. Once the write has
//! staged its rows, the query's scan of the table is pointed at those rows
//! ([`over_rows`]): an INSERT's inserted rows, an UPDATE's new rows, a
//! DELETE's old rows, an upsert's inserted and updated rows, as PostgreSQL
//! returns them. The rows are read before the write commits, so an error in
//! a RETURNING expression leaves nothing written.

use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::catalog::MemTable;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::datasource::provider_as_source;
use datafusion::logical_expr::{LogicalPlan, TableScan, TableScanBuilder};
use datafusion::sql::sqlparser::ast::{FromTable, SelectItem, Statement, TableObject};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;
use foam_common::{FoamError, FoamResult};

use crate::frontend::ddl;

/// A write's RETURNING clause as a query of the table it writes.
#[derive(Debug, Clone, PartialEq)]
pub struct Returning {
    /// The table written (its catalog name).
    pub table: String,
    /// `SELECT <items> FROM <table> [AS alias]`, items named as PostgreSQL names them.
    pub query: Statement,
}

/// Takes the RETURNING clause off an INSERT, UPDATE or DELETE, as a query of
/// its table under the statement's name for it; `None` without one.
pub fn take(statement: &mut Statement) -> FoamResult<Option<Returning>> {
    let (items, relation) = match statement {
        Statement::Insert(insert) => {
            // The alias names the table for RETURNING and ON CONFLICT
            // only; without ON CONFLICT it is taken off here (DataFusion
            // refuses an INSERT with one), RETURNING's query keeping it.
            let alias = match insert.on {
                Some(_) => insert.table_alias.clone(),
                None => insert.table_alias.take(),
            };
            let Some(items) = insert.returning.take() else { return Ok(None) };
            let TableObject::TableName(name) = &insert.table else {
                return Err(FoamError::FeatureNotSupported { feature: "INSERT into a table function".into() });
            };
            let alias = alias.map(|alias| format!(" AS {}", alias.alias)).unwrap_or_default();
            (items, (name.clone(), format!("{name}{alias}")))
        }
        Statement::Update(update) => {
            let Some(items) = update.returning.take() else { return Ok(None) };
            refuse_other_tables_rows(&items, update.from.is_some())?;
            (items, named_relation(&update.table.relation)?)
        }
        Statement::Delete(delete) => {
            let Some(items) = delete.returning.take() else { return Ok(None) };
            refuse_other_tables_rows(&items, delete.using.is_some())?;
            let (FromTable::WithFromKeyword(from) | FromTable::WithoutKeyword(from)) = &delete.from;
            let Some(target) = from.first() else { return Err(FoamError::Syntax { message: "DELETE without a table".into() }) };
            (items, named_relation(&target.relation)?)
        }
        _ => return Ok(None),
    };
    let (name, relation) = relation;
    let items: Vec<String> = items.iter().map(SelectItem::to_string).collect();
    let sql = format!("SELECT {} FROM {relation}", items.join(", "));
    let mut query = Parser::parse_sql(&PostgreSqlDialect {}, &sql)
        .map_err(|e| FoamError::Syntax { message: e.to_string() })?
        .pop()
        .ok_or_else(|| FoamError::internal(format!("RETURNING's query did not parse: {sql}")))?;
    crate::frontend::select_names::name_select_items(&mut query);
    Ok(Some(Returning { table: ddl::table_name(&name)?, query }))
}

/// RETURNING `*` of an UPDATE ... FROM or DELETE ... USING, which in
/// PostgreSQL also gives the columns of the other tables' matching row:
/// refused (0A000) rather than answered with the target's alone.
fn refuse_other_tables_rows(items: &[SelectItem], other_tables: bool) -> FoamResult<()> {
    if other_tables && items.iter().any(|item| matches!(item, SelectItem::Wildcard(_))) {
        return Err(FoamError::FeatureNotSupported {
            feature: "RETURNING * of UPDATE ... FROM or DELETE ... USING (name the target's columns, or target.*)".into(),
        });
    }
    Ok(())
}

/// The name of a written table, and the relation (`t AS a`) as written.
fn named_relation(relation: &datafusion::sql::sqlparser::ast::TableFactor) -> FoamResult<(datafusion::sql::sqlparser::ast::ObjectName, String)> {
    match relation {
        datafusion::sql::sqlparser::ast::TableFactor::Table { name, .. } => Ok((name.clone(), relation.to_string())),
        _ => Err(FoamError::FeatureNotSupported { feature: "UPDATE or DELETE of something other than a table".into() }),
    }
}

/// `plan` (the returning query's plan) reading `rows` where it scans the
/// written table. The query names one table in its FROM, so the scan found
/// outside subqueries is that one; a subquery of RETURNING still reads the
/// table itself.
pub fn over_rows(plan: LogicalPlan, rows: Vec<RecordBatch>) -> FoamResult<LogicalPlan> {
    let mut scans = 0;
    let replaced = plan
        .transform_up(|node| {
            let LogicalPlan::TableScan(scan) = node else {
                // Nodes above the scan take its schema afresh.
                return Ok(Transformed::yes(node.recompute_schema()?));
            };
            scans += 1;
            let schema = scan.source.schema();
            // The written rows have the table's column types; read as the
            // table's scan reads them (nullability included).
            let rows = rows
                .iter()
                .map(|batch| {
                    let cast = crate::write::cast_to(&schema, batch.clone()).map_err(|e| datafusion::error::DataFusionError::External(Box::new(e)))?;
                    Ok(RecordBatch::try_new(schema.clone(), cast.columns().to_vec())?)
                })
                .collect::<datafusion::error::Result<Vec<_>>>()?;
            let source = provider_as_source(Arc::new(MemTable::try_new(schema, vec![rows])?));
            let TableScan { table_name, projection, filters, fetch, .. } = scan;
            let scan = TableScanBuilder::new(table_name, source).with_projection(projection).with_filters(filters).with_fetch(fetch).build()?;
            Ok(Transformed::yes(LogicalPlan::TableScan(scan)))
        })
        .map_err(FoamError::from)?
        .data;
    match scans {
        1 => Ok(replaced),
        n => Err(FoamError::internal(format!("RETURNING's query scans {n} tables outside its subqueries"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taken(sql: &str) -> (String, Option<Returning>) {
        let mut statement = Parser::parse_sql(&PostgreSqlDialect {}, sql).unwrap().remove(0);
        let returning = take(&mut statement).unwrap();
        (statement.to_string(), returning)
    }

    #[test]
    fn returning_becomes_a_query_of_the_table_under_the_statements_name() {
        let (write, returning) = taken("UPDATE public.t AS a SET v = v + 1 WHERE k = 2 RETURNING a.k, v * 2, upper(s)");
        assert_eq!(write, "UPDATE public.t AS a SET v = v + 1 WHERE k = 2");
        let returning = returning.unwrap();
        assert_eq!(returning.table, "t");
        assert_eq!(returning.query.to_string(), "SELECT a.k, v * 2 AS \"?column?\", upper(s) AS \"upper\" FROM public.t AS a");

        let (write, returning) = taken("INSERT INTO t AS x (k) VALUES (1) ON CONFLICT (k) DO NOTHING RETURNING *");
        assert_eq!(write, "INSERT INTO t AS x (k) VALUES (1) ON CONFLICT(k) DO NOTHING");
        assert_eq!(returning.unwrap().query.to_string(), "SELECT * FROM t AS x");

        let (write, returning) = taken("DELETE FROM \"T\" WHERE k > 1 RETURNING k");
        assert_eq!(write, "DELETE FROM \"T\" WHERE k > 1");
        assert_eq!(returning.unwrap().table, "T");

        assert!(taken("INSERT INTO t VALUES (1)").1.is_none());
        let (write, returning) = taken("INSERT INTO t AS x SELECT 1 RETURNING x.k");
        assert_eq!((write.as_str(), returning.unwrap().query.to_string()), ("INSERT INTO t SELECT 1", "SELECT x.k FROM t AS x".to_string()));
        assert!(taken("SELECT 1").1.is_none());
    }
}
