//! What pg_dump and other tools read from `pg_catalog` that
//! datafusion-pg-catalog lacks: the `tableoid` system column, two catalog
//! tables, and the `pg_options_to_table` table function.
//!
//! Every PostgreSQL table has a hidden `tableoid` column, the OID of the
//! table a row lives in; pg_dump selects it from each catalog it reads
//! (`SELECT tableoid, oid, ... FROM pg_type`) to name objects by (catalog,
//! OID). datafusion-pg-catalog's tables have no such column, so
//! [`with_system_columns`] wraps each catalog table PostgreSQL 15 gives a fixed
//! OID with one more column holding it. DataFusion has no hidden columns,
//! so unlike PostgreSQL's system column `SELECT *` shows it, as the
//! table's last column.
//!
//! The same wrapper adds the columns PostgreSQL's catalogs have and
//! datafusion-pg-catalog's lack (`pg_class.relacl`, `reloptions`), NULL,
//! and gives the array columns it holds as text, NULL in every row, their
//! array types, so that the queries tools send over them plan.
//!
//! [`without_foreign_rows`] serves `pg_rewrite` without the rules of
//! PostgreSQL's own system views, which name relations FoamDB's `pg_class`
//! lacks, and `pg_init_privs` without the initial privileges of relations.
//!
//! [`missing_table`] answers the catalogs pg_dump reads that
//! datafusion-pg-catalog does not have: `pg_transform` (FoamDB has no
//! procedural languages to transform for) and `pg_seclabels` (no security
//! labels), both empty, with PostgreSQL 15's columns.
//!
//! `pg_options_to_table(options)` turns an options array (`{a=1,b=2}`) into
//! rows; pg_dump calls it in a correlated subquery on catalog columns
//! (`attfdwoptions`, `srvoptions`), which DataFusion's table functions
//! cannot take. Those columns are NULL in every FoamDB catalog row (no
//! foreign data, no storage options), for which the function gives no
//! rows: [`empty_options_tables`] puts an empty relation of its two columns
//! in place of a call on a column. A call on anything else is left to fail.

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use async_trait::async_trait;
use datafusion::catalog::{MemTable, Session, TableProvider};
use datafusion::common::ScalarValue;
use datafusion::datasource::TableType;
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::Expr;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::{Column, Literal};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::sql::sqlparser::ast::{Expr as SqlExpr, FunctionArg, FunctionArgExpr, Statement, TableFactor, VisitMut, VisitorMut};

/// The system column.
pub const TABLEOID: &str = "tableoid";

/// PostgreSQL 15's fixed OIDs of the catalog tables, by name (its
/// `pg_class.oid` for each, as `'pg_type'::regclass::oid` gives them).
const CATALOG_OIDS: [(&str, i32); 56] = [
    ("pg_aggregate", 2600), ("pg_am", 2601), ("pg_amop", 2602), ("pg_amproc", 2603), ("pg_attrdef", 2604),
    ("pg_attribute", 1249), ("pg_auth_members", 1261), ("pg_authid", 1260), ("pg_cast", 2605), ("pg_class", 1259),
    ("pg_collation", 3456), ("pg_constraint", 2606), ("pg_conversion", 2607), ("pg_database", 1262),
    ("pg_db_role_setting", 2964), ("pg_default_acl", 826), ("pg_depend", 2608), ("pg_description", 2609),
    ("pg_enum", 3501), ("pg_event_trigger", 3466), ("pg_extension", 3079), ("pg_foreign_data_wrapper", 2328),
    ("pg_foreign_server", 1417), ("pg_foreign_table", 3118), ("pg_index", 2610), ("pg_inherits", 2611),
    ("pg_init_privs", 3394), ("pg_language", 2612), ("pg_largeobject", 2613), ("pg_largeobject_metadata", 2995),
    ("pg_namespace", 2615), ("pg_opclass", 2616), ("pg_operator", 2617), ("pg_opfamily", 2753),
    ("pg_partitioned_table", 3350), ("pg_policy", 3256), ("pg_proc", 1255), ("pg_publication", 6104),
    ("pg_publication_namespace", 6237), ("pg_publication_rel", 6106), ("pg_range", 3541),
    ("pg_replication_origin", 6000), ("pg_rewrite", 2618), ("pg_seclabel", 3596), ("pg_sequence", 2224),
    ("pg_shdepend", 1214), ("pg_shdescription", 2396), ("pg_statistic", 2619), ("pg_statistic_ext", 3381),
    ("pg_subscription", 6100), ("pg_tablespace", 1213), ("pg_transform", 3576), ("pg_trigger", 2620),
    ("pg_ts_config", 3602), ("pg_ts_dict", 3600), ("pg_ts_parser", 3601),
];

/// The OID of catalog table `name`, if PostgreSQL has one of that name.
pub fn catalog_oid(name: &str) -> Option<i32> {
    let name = name.to_lowercase();
    CATALOG_OIDS.iter().chain(&[("pg_ts_template", 3764), ("pg_type", 1247), ("pg_user_mapping", 1418)]).find(|(n, _)| *n == name).map(|(_, oid)| *oid)
}

/// Columns of PostgreSQL's catalogs that datafusion-pg-catalog's lack,
/// each NULL in every FoamDB row, with their element types (each is an
/// array): a relation's ACL (FoamDB keeps privileges in its own catalog,
/// not as `aclitem`s) and storage options (FoamDB has none).
const MISSING_COLUMNS: [(&str, &str, DataType); 2] = [("pg_class", "relacl", DataType::Utf8), ("pg_class", "reloptions", DataType::Utf8)];

/// Columns datafusion-pg-catalog holds as text where PostgreSQL has an
/// array, NULL in every row it has: given their array type (an `unnest`,
/// `array_to_string` or `= ANY` over them plans), and checked to be NULL
/// when read.
const RETYPED_COLUMNS: [(&str, &str, DataType); 6] = [
    ("pg_attribute", "attoptions", DataType::Utf8),
    ("pg_partitioned_table", "partclass", DataType::Int32),
    ("pg_attribute", "attfdwoptions", DataType::Utf8),
    ("pg_event_trigger", "evttags", DataType::Utf8),
    ("pg_policy", "polroles", DataType::Int32),
    ("pg_publication_rel", "prattrs", DataType::Int16),
];

fn array_of(element: &DataType) -> DataType {
    DataType::List(Arc::new(Field::new_list_field(element.clone(), true)))
}

/// `table` with its system columns (see the module documentation): a
/// `tableoid` column when `name` is a catalog table with a fixed OID and
/// has none yet, the [`MISSING_COLUMNS`] of that table, and its
/// [`RETYPED_COLUMNS`] as arrays; any other table as it is.
pub fn with_system_columns(name: &str, table: Arc<dyn TableProvider>) -> Arc<dyn TableProvider> {
    let name = name.to_lowercase();
    let inner = table.schema();
    let mut extras = Vec::new();
    if let Some(oid) = catalog_oid(&name)
        && inner.column_with_name(TABLEOID).is_none()
    {
        extras.push((Field::new(TABLEOID, DataType::Int32, false), ScalarValue::Int32(Some(oid))));
    }
    for (_, column, element) in MISSING_COLUMNS.iter().filter(|(table, column, _)| *table == name && inner.column_with_name(column).is_none()) {
        let field = Field::new(*column, array_of(element), true);
        let null = ScalarValue::try_from(field.data_type()).unwrap_or(ScalarValue::Null);
        extras.push((field, null));
    }
    let mut retyped = Vec::new();
    let mut fields: Vec<Field> = inner
        .fields()
        .iter()
        .enumerate()
        .map(|(at, f)| match RETYPED_COLUMNS.iter().find(|(table, column, _)| *table == name && f.name() == column) {
            Some((_, _, element)) => {
                retyped.push(at);
                Field::new(f.name(), array_of(element), true)
            }
            None => f.as_ref().clone(),
        })
        .collect();
    if extras.is_empty() && retyped.is_empty() {
        return table;
    }
    fields.extend(extras.iter().map(|(field, _)| field.clone()));
    let schema = Arc::new(Schema::new_with_metadata(fields, inner.metadata().clone()));
    Arc::new(WithSystemColumns { inner: table, schema, extras: extras.into_iter().map(|(_, value)| value).collect(), retyped })
}

/// A catalog table with its system columns after its own.
#[derive(Debug)]
struct WithSystemColumns {
    inner: Arc<dyn TableProvider>,
    schema: SchemaRef,
    /// The value of each column after the inner table's.
    extras: Vec<ScalarValue>,
    /// The inner table's columns given an array type (all NULL).
    retyped: Vec<usize>,
}

#[async_trait]
impl TableProvider for WithSystemColumns {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        self.inner.table_type()
    }

    async fn scan(&self, state: &dyn Session, projection: Option<&Vec<usize>>, filters: &[Expr], limit: Option<usize>) -> Result<Arc<dyn ExecutionPlan>> {
        if !self.retyped.is_empty() {
            let mut batches = Vec::new();
            for batch in crate::catalog::pg_columns::rows(&self.inner).await? {
                let rows = batch.num_rows();
                let mut columns = batch.columns().to_vec();
                for &at in &self.retyped {
                    if columns[at].null_count() != rows {
                        return Err(DataFusionError::Internal(format!("pg_catalog column {} read as an array holds text", self.schema.field(at).name())));
                    }
                    columns[at] = arrow::array::new_null_array(self.schema.field(at).data_type(), rows);
                }
                for value in &self.extras {
                    columns.push(value.to_array_of_size(rows)?);
                }
                batches.push(arrow::array::RecordBatch::try_new(self.schema.clone(), columns)?);
            }
            return MemTable::try_new(self.schema.clone(), vec![batches])?.scan(state, projection, filters, limit).await;
        }
        // Filters are not pushed down (the default), so the inner table
        // never sees one on a system column.
        let inner_count = self.schema.fields().len() - self.extras.len();
        let wanted: Vec<usize> = projection.cloned().unwrap_or_else(|| (0..self.schema.fields().len()).collect());
        let inner_columns: Vec<usize> = wanted.iter().copied().filter(|&i| i < inner_count).collect();
        let plan = self.inner.scan(state, Some(&inner_columns), filters, limit).await?;
        let mut exprs: Vec<(Arc<dyn PhysicalExpr>, String)> = Vec::with_capacity(wanted.len());
        let mut next_inner = 0;
        for &i in &wanted {
            let name = self.schema.field(i).name().clone();
            if i >= inner_count {
                exprs.push((Arc::new(Literal::new(self.extras[i - inner_count].clone())), name));
            } else {
                exprs.push((Arc::new(Column::new(&name, next_inner)), name));
                next_inner += 1;
            }
        }
        Ok(Arc::new(ProjectionExec::try_new(exprs, plan)?))
    }
}

/// An empty catalog table datafusion-pg-catalog lacks (see the module
/// documentation), or `None` for another name.
pub fn missing_table(name: &str) -> Option<Arc<dyn TableProvider>> {
    let oid = |name: &str| Field::new(name, DataType::Int32, true);
    let text = |name: &str| Field::new(name, DataType::Utf8, true);
    let fields = match name.to_lowercase().as_str() {
        "pg_transform" => vec![oid("oid"), oid("trftype"), oid("trflang"), oid("trffromsql"), oid("trftosql")],
        "pg_seclabels" => vec![
            oid("objoid"),
            oid("classoid"),
            Field::new("objsubid", DataType::Int32, true),
            text("objtype"),
            oid("objnamespace"),
            text("objname"),
            text("provider"),
            text("label"),
        ],
        _ => return None,
    };
    let schema = Arc::new(Schema::new(fields));
    MemTable::try_new(schema, vec![vec![]]).ok().map(|table| Arc::new(table) as Arc<dyn TableProvider>)
}

/// The names [`missing_table`] answers.
pub const MISSING_TABLES: [&str; 2] = ["pg_transform", "pg_seclabels"];

/// Which of a catalog's fixed rows (datafusion-pg-catalog's copy of a
/// PostgreSQL 15 database's) describe objects FoamDB does not have.
#[derive(Debug, Clone, Copy)]
enum ForeignRows {
    /// Every row.
    All,
    /// The rows whose `classoid` is the named catalog's.
    OfClass(&'static str),
}

/// The catalogs served without their [`ForeignRows`]:
/// - `pg_rewrite`, the rules of PostgreSQL's system views, which name
///   relations FoamDB's `pg_class` lacks (pg_dump stopped at "parent table
///   with OID 12000 of pg_rewrite entry with OID 12003 not found"); FoamDB
///   has no rules, and its views are not kept as rules.
/// - `pg_init_privs`' initial privileges of relations: they give
///   PostgreSQL's catalog tables and their columns initial ACLs, while
///   their `relacl` and `attacl` are NULL here (FoamDB keeps no ACLs on
///   them), so pg_dump, which dumps what differs from the initial
///   privileges, set out to revoke them all. Those of functions and
///   schemas stay.
const FOREIGN_ROWS: [(&str, ForeignRows); 2] = [("pg_rewrite", ForeignRows::All), ("pg_init_privs", ForeignRows::OfClass("pg_class"))];

/// `table` without its [`FOREIGN_ROWS`], left out when it is scanned; any
/// other table as it is.
pub fn without_foreign_rows(name: &str, table: Arc<dyn TableProvider>) -> Arc<dyn TableProvider> {
    match FOREIGN_ROWS.iter().find(|(catalog, _)| name.eq_ignore_ascii_case(catalog)) {
        Some((_, foreign)) => Arc::new(WithoutForeignRows { inner: table, foreign: *foreign }),
        None => table,
    }
}

/// A catalog table without the rows that describe objects FoamDB lacks.
#[derive(Debug)]
struct WithoutForeignRows {
    inner: Arc<dyn TableProvider>,
    foreign: ForeignRows,
}

#[async_trait]
impl TableProvider for WithoutForeignRows {
    fn schema(&self) -> SchemaRef {
        self.inner.schema()
    }

    fn table_type(&self) -> TableType {
        self.inner.table_type()
    }

    async fn scan(&self, state: &dyn Session, projection: Option<&Vec<usize>>, filters: &[Expr], limit: Option<usize>) -> Result<Arc<dyn ExecutionPlan>> {
        let mut batches = Vec::new();
        if let ForeignRows::OfClass(class) = self.foreign {
            let class = catalog_oid(class).map(i64::from);
            for batch in crate::catalog::pg_columns::rows(&self.inner).await? {
                let classes = crate::catalog::pg_columns::oid_column(&batch, "classoid")?;
                let keep: arrow::array::BooleanArray = classes.iter().map(|of| Some(*of != class)).collect();
                batches.push(arrow::compute::filter_record_batch(&batch, &keep)?);
            }
        }
        MemTable::try_new(self.schema(), vec![batches])?.scan(state, projection, filters, limit).await
    }
}

/// `plan` with each cast of a text column to an OID made a `TRY_CAST`
/// (NULL where the text is no number) when `plan` reads nothing but
/// `pg_catalog` and `information_schema` tables; any other plan as it is.
///
/// datafusion-pg-catalog holds PostgreSQL's `regproc` columns
/// (`pg_am.amhandler`, `pg_operator.oprcode`, `pg_ts_parser.prsstart`, ...)
/// as function names, and maps `regproc` to an OID, so pg_dump's
/// `amhandler::regproc` and `prsstart::oid` failed on every row of the
/// system's own objects, which it then skips. Those columns read as NULL
/// instead; a user table's column still fails as PostgreSQL's would.
pub fn lenient_catalog_casts(plan: datafusion::logical_expr::LogicalPlan) -> Result<datafusion::logical_expr::LogicalPlan> {
    use datafusion::common::ExprSchema;
    use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
    use datafusion::logical_expr::{Cast, LogicalPlan, TryCast};
    // Every row must come from a catalog table: a VALUES list or a user's
    // table (even in a query that also reads the catalog) keeps its casts.
    let (mut catalog_scans, mut other_rows) = (0, false);
    plan.apply_with_subqueries(|node| {
        match node {
            LogicalPlan::TableScan(scan) if matches!(scan.table_name.schema(), Some("pg_catalog" | "information_schema")) => catalog_scans += 1,
            LogicalPlan::TableScan(_) | LogicalPlan::Values(_) => {
                other_rows = true;
                return Ok(TreeNodeRecursion::Stop);
            }
            _ => {}
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    if other_rows || catalog_scans == 0 {
        return Ok(plan);
    }
    plan.transform_up_with_subqueries(|node| {
        let inputs: Vec<datafusion::common::DFSchemaRef> = node.inputs().iter().map(|input| input.schema().clone()).collect();
        let is_text_column = |expr: &datafusion::logical_expr::Expr| match expr {
            datafusion::logical_expr::Expr::Column(column) => {
                inputs.iter().any(|schema| schema.field_from_column(column).is_ok_and(|field| field.data_type() == &DataType::Utf8))
            }
            _ => false,
        };
        node.map_expressions(|expr| {
            expr.transform(|expr| match expr {
                datafusion::logical_expr::Expr::Cast(Cast { expr, field }) if field.data_type() == &DataType::Int32 && is_text_column(&expr) => {
                    Ok(Transformed::yes(datafusion::logical_expr::Expr::TryCast(TryCast { expr, field })))
                }
                other => Ok(Transformed::no(other)),
            })
        })
    })
    .map(|transformed| transformed.data)
}

/// Catalogs of features FoamDB does not have (event triggers, row
/// security policies, publications), empty in every FoamDB database.
const FEATURELESS_CATALOGS: [&str; 3] = ["pg_event_trigger", "pg_policy", "pg_publication_rel"];

/// The rewrites of a query of the catalog (`pg_` in its text) before it
/// is planned: [`empty_options_tables`], casts to PostgreSQL's one-byte
/// `"char"` read as casts to text (its values are one character),
/// [`name_subscript`], [`view_definition`], [`catalog_tables_first`], and a
/// query that inner-joins a [`FEATURELESS_CATALOGS`] table answered by no
/// rows of the same column names. DataFusion cannot plan what pg_dump
/// computes over those tables' rows (`unnest` of a correlated column,
/// `generate_series` to a correlated bound), and there are no rows.
pub fn rewrite_catalog_query(statement: &mut Statement) {
    empty_options_tables(statement);
    let _ = statement.visit(&mut CatalogTablesFirst);
    let _ = datafusion::sql::sqlparser::ast::visit_expressions_mut(statement, |expr| {
        if let SqlExpr::Cast { data_type, .. } = expr
            && let datafusion::sql::sqlparser::ast::DataType::Custom(name, modifiers) = data_type
            && modifiers.is_empty()
            && let [part] = name.0.as_slice()
            && part.as_ident().is_some_and(|ident| ident.value == "char" && ident.quote_style == Some('"'))
        {
            *data_type = datafusion::sql::sqlparser::ast::DataType::Text;
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
    let _ = datafusion::sql::sqlparser::ast::visit_expressions_mut(statement, |expr| {
        if let Some(replacement) = name_subscript(expr).or_else(|| view_definition(expr)) {
            *expr = replacement;
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
    if let Statement::Query(query) = statement {
        answer_featureless_with_no_rows(query);
    }
}

fn parse_expr(sql: &str) -> Option<SqlExpr> {
    let dialect = datafusion::sql::sqlparser::dialect::PostgreSqlDialect {};
    datafusion::sql::sqlparser::parser::Parser::new(&dialect).try_with_sql(sql).ok()?.parse_expr().ok()
}

/// `'pg_proc'::regclass`: PostgreSQL looks an unqualified name up in
/// `pg_catalog` before the current schema. datafusion-pg-catalog's
/// lookup (a query of `pg_class` joined to the operand's
/// `parse_ident(...) AS parts`) tries the current schema only, so the
/// catalog tables pg_dump compares `classoid` with were NULL: where the
/// operand is the name of a catalog table ([`catalog_oid`]), the lookup
/// is made in `pg_catalog`.
struct CatalogTablesFirst;

impl VisitorMut for CatalogTablesFirst {
    type Break = ();

    fn pre_visit_query(&mut self, query: &mut datafusion::sql::sqlparser::ast::Query) -> std::ops::ControlFlow<()> {
        use datafusion::sql::sqlparser::ast::{BinaryOperator, SetExpr, Value};
        let SetExpr::Select(select) = query.body.as_mut() else { return std::ops::ControlFlow::Continue(()) };
        let looked_up = select.from.iter().flat_map(|from| from.joins.iter().map(|join| &join.relation)).find_map(|relation| {
            let TableFactor::Derived { subquery, .. } = relation else { return None };
            let SetExpr::Select(inner) = subquery.body.as_ref() else { return None };
            let [datafusion::sql::sqlparser::ast::SelectItem::ExprWithAlias { expr: SqlExpr::Function(function), alias }] = inner.projection.as_slice() else {
                return None;
            };
            if alias.value != "parts" || !function.name.to_string().eq_ignore_ascii_case("parse_ident") {
                return None;
            }
            let datafusion::sql::sqlparser::ast::FunctionArguments::List(list) = &function.args else { return None };
            let [FunctionArg::Unnamed(FunctionArgExpr::Expr(operand))] = list.args.as_slice() else { return None };
            let operand = match operand {
                SqlExpr::Cast { expr, .. } => expr.as_ref(),
                other => other,
            };
            match operand {
                SqlExpr::Value(value) => match &value.value {
                    Value::SingleQuotedString(name) => Some(name.clone()),
                    _ => None,
                },
                _ => None,
            }
        });
        if !looked_up.is_some_and(|name| catalog_oid(&name).is_some()) {
            return std::ops::ControlFlow::Continue(());
        }
        if let Some(selection) = select.selection.as_mut() {
            let _ = datafusion::sql::sqlparser::ast::visit_expressions_mut(selection, |expr| {
                if let SqlExpr::BinaryOp { left, op: BinaryOperator::Eq, right } = expr
                    && matches!(left.as_ref(), SqlExpr::CompoundIdentifier(parts) if parts.last().is_some_and(|p| p.value == "nspname"))
                    && matches!(right.as_ref(), SqlExpr::Function(f) if f.name.to_string().eq_ignore_ascii_case("current_schema"))
                {
                    **right = SqlExpr::Value(Value::SingleQuotedString("pg_catalog".into()).into());
                }
                std::ops::ControlFlow::<()>::Continue(())
            });
        }
        std::ops::ControlFlow::Continue(())
    }
}

/// `typname[0]`: PostgreSQL subscripts a `name` as the characters it holds
/// (pg_dump tests `typname[0] = '_'` for array types); the same character
/// of the text. Only a column whose name ends in `name` is taken.
fn name_subscript(expr: &SqlExpr) -> Option<SqlExpr> {
    use datafusion::sql::sqlparser::ast::{AccessExpr, Subscript, Value};
    let SqlExpr::CompoundFieldAccess { root, access_chain } = expr else { return None };
    let column = match root.as_ref() {
        SqlExpr::Identifier(ident) => ident,
        SqlExpr::CompoundIdentifier(parts) => parts.last()?,
        _ => return None,
    };
    let [AccessExpr::Subscript(Subscript::Index { index: SqlExpr::Value(index) })] = access_chain.as_slice() else { return None };
    let Value::Number(index, _) = &index.value else { return None };
    let index: i64 = index.parse().ok()?;
    if !column.value.to_lowercase().ends_with("name") || !(0..64).contains(&index) {
        return None;
    }
    parse_expr(&format!("substr({root}, {}, 1)", index + 1))
}

/// `pg_get_viewdef(oid [, pretty])`: the view's definition from `pg_views`
/// (FoamDB's views, `pg_owners.rs`), found by its `pg_class` OID.
fn view_definition(expr: &SqlExpr) -> Option<SqlExpr> {
    use datafusion::sql::sqlparser::ast::{FunctionArgumentList, FunctionArguments};
    let SqlExpr::Function(function) = expr else { return None };
    if !function.name.0.last()?.as_ident()?.value.eq_ignore_ascii_case("pg_get_viewdef") {
        return None;
    }
    let FunctionArguments::List(FunctionArgumentList { args, .. }) = &function.args else { return None };
    let (FunctionArg::Unnamed(FunctionArgExpr::Expr(oid)), 1..=2) = (args.first()?, args.len()) else { return None };
    parse_expr(&format!(
        "(SELECT v.definition FROM pg_catalog.pg_views v JOIN pg_catalog.pg_class c ON c.relname = v.viewname AND c.relkind = 'v' \
         WHERE v.schemaname = 'public' AND c.oid = {oid})"
    ))
}

fn answer_featureless_with_no_rows(query: &mut datafusion::sql::sqlparser::ast::Query) {
    use datafusion::sql::sqlparser::ast::{JoinOperator, SelectItem, SetExpr};
    let SetExpr::Select(select) = query.body.as_ref() else { return };
    let featureless = |factor: &TableFactor| match factor {
        TableFactor::Table { name, args: None, .. } => name
            .0
            .last()
            .and_then(|part| part.as_ident())
            .is_some_and(|ident| FEATURELESS_CATALOGS.iter().any(|c| ident.value.eq_ignore_ascii_case(c))),
        _ => false,
    };
    let inner_joins_one = select.from.iter().any(|from| {
        featureless(&from.relation)
            || from.joins.iter().any(|join| matches!(join.join_operator, JoinOperator::Join(_) | JoinOperator::Inner(_)) && featureless(&join.relation))
    });
    if !inner_joins_one {
        return;
    }
    let names: Option<Vec<String>> = select
        .projection
        .iter()
        .map(|item| match item {
            SelectItem::ExprWithAlias { alias, .. } => Some(alias.value.clone()),
            SelectItem::UnnamedExpr(SqlExpr::Identifier(ident)) => Some(ident.value.clone()),
            SelectItem::UnnamedExpr(SqlExpr::CompoundIdentifier(parts)) => parts.last().map(|ident| ident.value.clone()),
            _ => None,
        })
        .collect();
    let Some(names) = names else { return };
    let columns: Vec<String> = names.iter().map(|name| format!("CAST(NULL AS TEXT) AS {}", crate::frontend::modify::quoted(name))).collect();
    let empty = format!("SELECT {} WHERE false", columns.join(", "));
    let dialect = datafusion::sql::sqlparser::dialect::PostgreSqlDialect {};
    if let Ok(Some(Statement::Query(replacement))) = datafusion::sql::sqlparser::parser::Parser::parse_sql(&dialect, &empty).map(|mut s| s.pop()) {
        *query = *replacement;
    }
}

/// The function whose calls [`empty_options_tables`] replaces.
const OPTIONS_TO_TABLE: &str = "pg_options_to_table";

/// The catalogs' options columns, NULL in every FoamDB catalog row: an
/// `unnest` of one gives no rows (psql's `\d+` unnests `reloptions`).
const OPTIONS_COLUMNS: [&str; 7] = ["reloptions", "attoptions", "attfdwoptions", "srvoptions", "umoptions", "ftoptions", "spcoptions"];

/// Puts an empty relation with `pg_options_to_table`'s columns in place of
/// each call of it on a column in `statement` (see the module
/// documentation), and an empty relation of one column in place of each
/// `unnest` of one of the [`OPTIONS_COLUMNS`].
fn empty_options_tables(statement: &mut Statement) {
    let _ = statement.visit(&mut OptionsTables);
}

struct OptionsTables;

impl VisitorMut for OptionsTables {
    type Break = ();

    fn pre_visit_table_factor(&mut self, factor: &mut TableFactor) -> std::ops::ControlFlow<()> {
        let TableFactor::Table { name, alias, args: Some(args), .. } = factor else { return std::ops::ControlFlow::Continue(()) };
        let Some(function) = name.0.last().and_then(|part| part.as_ident()).map(|ident| ident.value.to_lowercase()) else {
            return std::ops::ControlFlow::Continue(());
        };
        let column = match args.args.as_slice() {
            [FunctionArg::Unnamed(FunctionArgExpr::Expr(SqlExpr::Identifier(ident)))] => ident.value.to_lowercase(),
            [FunctionArg::Unnamed(FunctionArgExpr::Expr(SqlExpr::CompoundIdentifier(parts)))] => parts.last().map(|p| p.value.to_lowercase()).unwrap_or_default(),
            _ => return std::ops::ControlFlow::Continue(()),
        };
        let empty = if function == OPTIONS_TO_TABLE {
            "SELECT CAST(NULL AS TEXT) AS option_name, CAST(NULL AS TEXT) AS option_value WHERE false".to_string()
        } else if function == "unnest" && OPTIONS_COLUMNS.contains(&column.as_str()) {
            // The one column is named by the alias, as a function's is.
            let named = alias.as_ref().map_or("unnest".to_string(), |a| a.columns.first().map_or(a.name.value.clone(), |c| c.name.value.clone()));
            format!("SELECT CAST(NULL AS TEXT) AS {} WHERE false", crate::frontend::modify::quoted(&named))
        } else {
            return std::ops::ControlFlow::Continue(());
        };
        let dialect = datafusion::sql::sqlparser::dialect::PostgreSqlDialect {};
        let Ok(Some(Statement::Query(subquery))) = datafusion::sql::sqlparser::parser::Parser::parse_sql(&dialect, &empty).map(|mut s| s.pop()) else {
            return std::ops::ControlFlow::Continue(());
        };
        let alias = alias.take().or_else(|| {
            Some(datafusion::sql::sqlparser::ast::TableAlias {
                explicit: true,
                name: datafusion::sql::sqlparser::ast::Ident::new(function.clone()),
                columns: Vec::new(),
                at: None,
            })
        });
        *factor = TableFactor::Derived { lateral: false, subquery, alias, sample: None };
        std::ops::ControlFlow::Continue(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `sql` parsed, rewritten by `rewrite`, and printed.
    fn rewritten(sql: &str, rewrite: fn(&mut Statement)) -> String {
        let dialect = datafusion::sql::sqlparser::dialect::PostgreSqlDialect {};
        let mut statement = datafusion::sql::sqlparser::parser::Parser::parse_sql(&dialect, sql).unwrap().remove(0);
        rewrite(&mut statement);
        statement.to_string()
    }

    #[tokio::test]
    async fn catalog_rows_carry_their_tables_oid_in_any_projection() {
        let schema = Arc::new(Schema::new(vec![Field::new("oid", DataType::Int32, false), Field::new("typname", DataType::Utf8, false)]));
        let batch = arrow::array::RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(arrow::array::Int32Array::from(vec![23, 25])), Arc::new(arrow::array::StringArray::from(vec!["int4", "text"]))],
        )
        .unwrap();
        let table: Arc<dyn TableProvider> = Arc::new(MemTable::try_new(schema, vec![vec![batch]]).unwrap());
        let ctx = datafusion::prelude::SessionContext::new();
        ctx.register_table("pg_type", with_system_columns("pg_type", table)).unwrap();
        for (sql, want) in [
            ("SELECT tableoid, oid, typname FROM pg_type ORDER BY oid", vec!["1247|23|int4", "1247|25|text"]),
            ("SELECT typname, tableoid FROM pg_type WHERE tableoid = 1247 AND oid > 23", vec!["text|1247"]),
            ("SELECT count(*) FROM pg_type", vec!["2"]),
            ("SELECT * FROM pg_type ORDER BY oid", vec!["23|int4|1247", "25|text|1247"]),
        ] {
            let batches = ctx.sql(sql).await.unwrap().collect().await.unwrap();
            let mut rows = Vec::new();
            for batch in &batches {
                for row in 0..batch.num_rows() {
                    let cells: Vec<String> =
                        batch.columns().iter().map(|c| arrow::util::display::array_value_to_string(c, row).unwrap()).collect();
                    rows.push(cells.join("|"));
                }
            }
            assert_eq!(rows, want, "{sql}");
        }
        assert_eq!(catalog_oid("PG_CLASS"), Some(1259));
        assert_eq!(catalog_oid("pg_tables"), None);
        assert!(missing_table("pg_transform").is_some() && missing_table("pg_class").is_none());
    }

    #[test]
    fn featureless_catalogs_answer_no_rows_and_char_casts_read_as_text() {
        let rewrite = |sql: &str| rewritten(sql, rewrite_catalog_query);
        assert_eq!(
            rewrite("SELECT pol.oid, pol.polname AS name FROM unnest('{1}'::oid[]) AS src(tbloid) JOIN pg_catalog.pg_policy pol ON (src.tbloid = pol.polrelid) ORDER BY 1"),
            "SELECT CAST(NULL AS TEXT) AS \"oid\", CAST(NULL AS TEXT) AS \"name\" WHERE false"
        );
        // A LEFT JOIN keeps the other side's rows; another catalog is left.
        let left = "SELECT c.oid FROM pg_class AS c LEFT JOIN pg_policy AS p ON p.polrelid = c.oid";
        assert_eq!(rewrite(left), left);
        assert_eq!(rewrite("SELECT 'r'::\"char\""), "SELECT 'r'::TEXT");
        assert_eq!(rewrite("SELECT typname[0] = '_' FROM pg_type"), "SELECT SUBSTR(typname, 1, 1) = '_' FROM pg_type");
        assert_eq!(rewrite("SELECT a[0] FROM t"), "SELECT a[0] FROM t");
        let viewdef = rewrite("SELECT pg_catalog.pg_get_viewdef('16390'::pg_catalog.oid) AS viewdef");
        assert!(viewdef.contains("pg_catalog.pg_views") && viewdef.contains("'16390'") && !viewdef.contains("pg_get_viewdef"), "{viewdef}");
    }

    #[test]
    fn options_of_a_column_read_as_no_rows_and_of_a_literal_are_left() {
        let rewrite = |sql: &str| rewritten(sql, empty_options_tables);
        let dumped = rewrite("SELECT ARRAY(SELECT option_name FROM pg_catalog.pg_options_to_table(a.attfdwoptions) ORDER BY option_name) FROM pg_attribute a");
        assert!(dumped.contains("FROM (SELECT CAST(NULL AS TEXT) AS option_name, CAST(NULL AS TEXT) AS option_value WHERE false) AS pg_options_to_table ORDER BY"), "{dumped}");
        let literal = "SELECT * FROM pg_options_to_table(ARRAY['a=1'])";
        assert_eq!(rewrite(literal), literal);
        // psql's \d+: an unnest of an options column, its one column named by the alias.
        let psql = rewrite("SELECT array(SELECT 'toast.' || x FROM pg_catalog.unnest(tc.reloptions) x) FROM pg_class tc");
        assert!(psql.contains("FROM (SELECT CAST(NULL AS TEXT) AS \"x\" WHERE false) x)"), "{psql}");
        let other = "SELECT * FROM pg_catalog.unnest(t.tags) AS x";
        assert_eq!(rewrite(other), other);
    }
}
