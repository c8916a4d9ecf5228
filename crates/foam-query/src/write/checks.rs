//! CHECK constraints on the rows a statement writes.
//!
//! The session plans a table's constraints once per statement as the select
//! list of a query over the table (`SELECT (check) AS c0, ... FROM t`), with
//! the same rewrites and analyzer rules as any query (CHAR(n) comparisons,
//! checked arithmetic, PostgreSQL's casts), and [`TableChecks::from_plan`]
//! makes physical expressions of them over the table's rows. `RowRouter::write` (every INSERT,
//! UPDATE, upsert and COPY row, after NOT NULL and lengths) evaluates them:
//! a row for which one is false fails the statement with 23514, true or NULL
//! passes, as in PostgreSQL. A table with constraints whose writer was given
//! none, or ones planned for another version of the table, fails the write:
//! a row is never stored unchecked.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::{DataType, SchemaRef};
use datafusion::execution::SessionState;
use datafusion::prelude::SessionConfig;
use datafusion::logical_expr::LogicalPlan;
use datafusion::logical_expr::simplify::SimplifyContext;
use datafusion::optimizer::simplify_expressions::ExprSimplifier;
use datafusion::physical_expr::PhysicalExpr;
use foam_catalog::model::CheckDef;
use foam_catalog::{Catalog, TableDef};
use foam_common::limits::KEY_VALIDATION_WAIT_MS;
use foam_common::{FoamError, FoamResult, PartitionId, SqlState, TableId};
use foam_rpc::NodeRequest;

use crate::context::NodeContext;

/// A table's CHECK constraints, ready to evaluate on its rows.
pub struct TableChecks {
    table: String,
    /// The constraints these were planned from.
    defs: Vec<CheckDef>,
    /// The row the expressions read: the table's columns in the types the
    /// probe query gave them (strings as text).
    input: SchemaRef,
    exprs: Vec<Arc<dyn PhysicalExpr>>,
}

impl std::fmt::Debug for TableChecks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TableChecks({}: {})", self.table, self.defs.iter().map(|d| d.name.as_str()).collect::<Vec<_>>().join(", "))
    }
}

impl TableChecks {
    /// The constraints `defs` of `table` (of `width` columns) from `plan`,
    /// the session's plan of their query: a projection of one boolean per
    /// constraint over the table's columns. Time functions (`now()`) read
    /// the time of planning, the statement's start.
    pub fn from_plan(table: &str, width: usize, defs: Vec<CheckDef>, plan: LogicalPlan, state: &SessionState) -> FoamResult<Self> {
        let refuse = |why: &str| FoamError::FeatureNotSupported { feature: format!("a CHECK constraint of \"{table}\" that {why}") };
        let plan = state.analyzer().execute_and_check(plan, state.config_options(), |_, _| {}).map_err(FoamError::from)?;
        let LogicalPlan::Projection(projection) = &plan else { return Err(refuse("does not plan as an expression of the row")) };
        let input = projection.input.schema();
        if projection.expr.len() != defs.len() || input.fields().len() != width {
            return Err(refuse("does not plan as an expression of the row"));
        }
        let context = SimplifyContext::builder().with_schema(input.clone()).with_config_options(Arc::clone(state.config_options())).with_current_time().build();
        let simplifier = ExprSimplifier::new(context);
        let mut exprs = Vec::with_capacity(defs.len());
        for (def, expr) in defs.iter().zip(&projection.expr) {
            let expr = simplifier.coerce(expr.clone().unalias(), input).and_then(|e| simplifier.simplify(e)).map_err(FoamError::from)?;
            let physical = state.create_physical_expr(expr, input).map_err(FoamError::from)?;
            match physical.data_type(input.as_arrow()).map_err(FoamError::from)? {
                DataType::Boolean | DataType::Null => exprs.push(physical),
                other => {
                    return Err(FoamError::Query {
                        message: format!("argument of CHECK must be type boolean, not type {other} (constraint \"{}\")", def.name),
                        sqlstate: SqlState::DatatypeMismatch,
                    });
                }
            }
        }
        Ok(TableChecks { table: table.to_string(), defs, input: Arc::new(input.as_arrow().clone()), exprs })
    }

    /// Whether these were planned from `table`'s constraints as they are.
    pub fn planned_for(&self, table: &TableDef) -> bool {
        self.table == table.name && self.defs == table.checks
    }

    /// Fails (23514) when a constraint is false for a row of `batch` (rows
    /// in the table's column types).
    pub fn check(&self, batch: &RecordBatch) -> FoamResult<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let row = foam_storage::segment::cast_to_schema(&self.input, batch)?;
        for (def, expr) in self.defs.iter().zip(&self.exprs) {
            let values = expr.evaluate(&row).and_then(|v| v.into_array(row.num_rows())).map_err(FoamError::from)?;
            if values.data_type() == &DataType::Null {
                continue;
            }
            let Some(values) = values.as_boolean_opt() else {
                return Err(FoamError::internal(format!("CHECK constraint \"{}\" gave {}", def.name, values.data_type())));
            };
            if (0..values.len()).any(|i| values.is_valid(i) && !values.value(i)) {
                return Err(violated(&self.table, &def.name));
            }
        }
        Ok(())
    }
}

/// PostgreSQL's error for a written row that breaks a CHECK.
pub fn violated(table: &str, constraint: &str) -> FoamError {
    FoamError::Query {
        message: format!("new row for relation \"{table}\" violates check constraint \"{constraint}\""),
        sqlstate: SqlState::CheckViolation,
    }
}

/// Fails unless rows of `table` may be written with `checks`: a table with
/// constraints needs them, planned for its constraints as they are, and
/// constraints given are those of the table.
pub fn ensure_planned(table: &TableDef, checks: Option<&TableChecks>) -> FoamResult<()> {
    match checks {
        None if table.checks.is_empty() => Ok(()),
        Some(checks) if checks.planned_for(table) => Ok(()),
        // As a copy refuses a write planned before a constraint was added:
        // the statement is planned and run again (40001).
        Some(_) => Err(FoamError::PlacementChanged { message: format!("the CHECK constraints of \"{}\" changed while the statement ran", table.name) }),
        None => Err(FoamError::internal(format!("rows written to \"{}\" without its CHECK constraints", table.name))),
    }
}

/// The CHECK constraints a session planned for the tables its statements
/// write, by table: a session config extension, where the INSERT sink
/// (which DataFusion runs without the session) finds them.
#[derive(Default)]
/// One table's at a time: a session writes one table per statement.
pub struct StatementChecks(Mutex<Option<(TableId, Arc<TableChecks>)>>);

impl StatementChecks {
    /// The constraints planned for `table` in the session `config` belongs to.
    pub fn of(config: &SessionConfig, table: &TableDef) -> Option<Arc<TableChecks>> {
        let checks = config.get_extension::<StatementChecks>()?;
        let planned = checks.0.lock().unwrap_or_else(|p| p.into_inner());
        planned.as_ref().filter(|(id, _)| *id == table.id).map(|(_, checks)| checks.clone())
    }

    /// Keeps `checks`, planned for `table` (`None`: it has none), for the
    /// statement about to run, and forgets any planned before.
    pub fn set(&self, table: &TableDef, checks: Option<Arc<TableChecks>>) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = checks.map(|checks| (table.id, checks));
    }
}

/// `ALTER TABLE ... ADD CHECK`, after the catalog holds the constraint (at
/// `catalog.version`): every live copy of every partition of `table` refuses
/// the writes planned before (which did not check it) and waits for the
/// ones prepared before to be decided. A read of the table afterwards sees
/// every row not checked against the constraint.
pub async fn fence_every_copy(node: &Arc<NodeContext>, catalog: &Catalog, table: &str) -> FoamResult<()> {
    let request = |table_id, partition, catalog_version| NodeRequest::FenceForConstraint { table_id, partition, catalog_version };
    let local = |node: Arc<NodeContext>, request: NodeRequest| async move {
        let NodeRequest::FenceForConstraint { table_id, partition, catalog_version } = request else { unreachable!("a fence's request") };
        fence_for_constraint(&node, table_id, partition, catalog_version).await
    };
    let errors = super::keys::on_every_copy(node, catalog, table, "check the constraint on", request, local).await?;
    errors.into_iter().next().map_or(Ok(()), Err)
}

/// On a node holding a copy: brings its catalog to `catalog_version`, then
/// fences the copy at it (`StorageEngine::raise_write_fence`).
pub async fn fence_for_constraint(node: &Arc<NodeContext>, table_id: TableId, partition: PartitionId, catalog_version: u64) -> FoamResult<()> {
    let catalog = super::keys::catalog_at(node, catalog_version).await?;
    let version = catalog.table_by_id(table_id).map(|t| t.placement_version(partition)).unwrap_or(catalog_version);
    let storage = node.storage.clone();
    let wait = Duration::from_millis(KEY_VALIDATION_WAIT_MS);
    Ok(tokio::task::spawn_blocking(move || storage.raise_write_fence(table_id, partition, version, wait))
        .await
        .map_err(|e| FoamError::internal(e.to_string()))??)
}
