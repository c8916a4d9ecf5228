//! `pg_catalog.pg_stat_activity`: this node's client connections (the
//! node's [`Connections`](crate::connections::Connections)), with
//! PostgreSQL 15's columns; what FoamDB does not track (wait events,
//! transaction ids) is NULL. As in PostgreSQL, a statement's text shows
//! only to its own role and to superusers (to everyone with
//! `--insecure`); others read `<insufficient privilege>`. Other nodes'
//! connections are theirs to list.

use std::ops::ControlFlow;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use arrow::array::{ArrayRef, Int32Array, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use async_trait::async_trait;
use datafusion::catalog::{MemTable, Session, TableProvider};
use datafusion::datasource::TableType;
use datafusion::error::Result;
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::sql::sqlparser::ast::{Ident, ObjectName, ObjectNamePart, Statement, TableFactor, VisitMut, VisitorMut};

use crate::context::NodeContext;

pub const NAME: &str = "pg_stat_activity";
/// What another role's statement reads as.
const HIDDEN: &str = "<insufficient privilege>";

/// Who is looking: the session's login role, its `SET ROLE` (shared with
/// the session), and whether the node lets anyone be anyone.
#[derive(Clone, Debug)]
pub struct Viewer {
    pub session_user: String,
    pub role: Arc<Mutex<Option<String>>>,
    pub insecure: bool,
}

impl Viewer {
    /// Whether `viewer` may read statements of connections of `user`.
    fn sees(&self, node: &NodeContext, user: &str) -> bool {
        let current = self.role.lock().unwrap_or_else(|p| p.into_inner()).clone().unwrap_or_else(|| self.session_user.clone());
        self.insecure || current == user || node.catalog.current().roles.get(&current).is_some_and(|r| r.superuser)
    }
}

/// Names an unqualified `pg_stat_activity` (or another catalog table
/// FoamDB adds, `pg_missing.rs`) in `statement` as `pg_catalog`'s, as PostgreSQL's search path finds it there (for the
/// pg_catalog tables it knows, datafusion-pg-catalog does the same), unless
/// `user_relation` says the user has a table or view of that name.
pub fn qualify(statement: &mut Statement, user_relation: impl Fn(&str) -> bool) {
    struct Qualify<F>(F);
    impl<F: Fn(&str) -> bool> VisitorMut for Qualify<F> {
        type Break = ();
        fn pre_visit_table_factor(&mut self, factor: &mut TableFactor) -> ControlFlow<()> {
            if let TableFactor::Table { name, .. } = factor
                && let [ObjectNamePart::Identifier(ident)] = name.0.as_slice()
                && ident.quote_style.is_none()
                && let Some(catalog_table) = std::iter::once(NAME).chain(crate::catalog::pg_missing::MISSING_TABLES).find(|n| ident.value.eq_ignore_ascii_case(n))
                && !(self.0)(catalog_table)
            {
                *name = ObjectName(vec![ObjectNamePart::Identifier(Ident::new("pg_catalog")), ObjectNamePart::Identifier(Ident::new(catalog_table))]);
            }
            ControlFlow::Continue(())
        }
    }
    let _ = statement.visit(&mut Qualify(user_relation));
}

fn micros(at: SystemTime) -> i64 {
    at.duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_micros() as i64).unwrap_or_default()
}

/// The view for `viewer`: its rows are read when it is scanned, so a
/// statement sees itself running, and a prepared one sees the present.
pub fn table(node: Arc<NodeContext>, viewer: Viewer) -> Arc<dyn TableProvider> {
    Arc::new(Activity { node, viewer, schema: schema() })
}

#[derive(Debug)]
struct Activity {
    node: Arc<NodeContext>,
    viewer: Viewer,
    schema: SchemaRef,
}

#[async_trait]
impl TableProvider for Activity {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::View
    }

    async fn scan(&self, state: &dyn Session, projection: Option<&Vec<usize>>, filters: &[Expr], limit: Option<usize>) -> Result<Arc<dyn ExecutionPlan>> {
        let batch = rows(&self.node, &self.viewer, self.schema.clone())?;
        MemTable::try_new(self.schema.clone(), vec![vec![batch]])?.scan(state, projection, filters, limit).await
    }
}

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("datid", DataType::Int32, true),
        Field::new("datname", DataType::Utf8, true),
        Field::new("pid", DataType::Int32, true),
        Field::new("leader_pid", DataType::Int32, true),
        Field::new("usesysid", DataType::Int32, true),
        Field::new("usename", DataType::Utf8, true),
        Field::new("application_name", DataType::Utf8, true),
        Field::new("client_addr", DataType::Utf8, true),
        Field::new("client_hostname", DataType::Utf8, true),
        Field::new("client_port", DataType::Int32, true),
        Field::new("backend_start", DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())), true),
        Field::new("xact_start", DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())), true),
        Field::new("query_start", DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())), true),
        Field::new("state_change", DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())), true),
        Field::new("wait_event_type", DataType::Utf8, true),
        Field::new("wait_event", DataType::Utf8, true),
        Field::new("state", DataType::Utf8, true),
        Field::new("backend_xid", DataType::Utf8, true),
        Field::new("backend_xmin", DataType::Utf8, true),
        Field::new("query_id", DataType::Int64, true),
        Field::new("query", DataType::Utf8, true),
        Field::new("backend_type", DataType::Utf8, true),
    ]))
}

/// The view's rows as of now, for `viewer`.
fn rows(node: &NodeContext, viewer: &Viewer, schema: SchemaRef) -> Result<RecordBatch> {
    let connections = node.connections.list();
    let n = connections.len();
    let timestamp = |values: Vec<Option<i64>>| -> ArrayRef { Arc::new(TimestampMicrosecondArray::from(values).with_timezone("UTC")) };
    let text = |values: Vec<Option<String>>| -> ArrayRef { Arc::new(StringArray::from(values)) };
    let none_text = || -> ArrayRef { Arc::new(StringArray::from(vec![None::<&str>; n])) };
    let none_int = || -> ArrayRef { Arc::new(Int32Array::from(vec![None; n])) };
    let visible: Vec<bool> = connections.iter().map(|c| viewer.sees(node, &c.user)).collect();
    let columns: Vec<ArrayRef> = vec![
        none_int(),
        text(connections.iter().map(|c| Some(c.database.clone())).collect()),
        Arc::new(Int32Array::from_iter_values(connections.iter().map(|c| c.pid as i32))),
        none_int(),
        none_int(),
        text(connections.iter().map(|c| Some(c.user.clone())).collect()),
        text(connections.iter().map(|c| Some(c.application_name.clone())).collect()),
        text(connections.iter().map(|c| Some(c.client.ip().to_string())).collect()),
        none_text(),
        Arc::new(Int32Array::from_iter_values(connections.iter().map(|c| i32::from(c.client.port())))),
        timestamp(connections.iter().map(|c| Some(micros(c.connected))).collect()),
        timestamp(vec![None; n]),
        timestamp(connections.iter().map(|c| c.query_start.map(micros)).collect()),
        timestamp(connections.iter().map(|c| Some(micros(c.state_change))).collect()),
        none_text(),
        none_text(),
        text(connections.iter().map(|c| Some(if c.running_since.is_some() { "active" } else { "idle" }.to_string())).collect()),
        none_text(),
        none_text(),
        Arc::new(Int64Array::from(vec![None; n])),
        text(connections.iter().zip(&visible).map(|(c, seen)| Some(if *seen { c.query.clone() } else { HIDDEN.to_string() })).collect()),
        text(vec![Some("client backend".to_string()); n]),
    ];
    Ok(RecordBatch::try_new(schema, columns)?)
}
