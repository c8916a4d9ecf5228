//! One client connection's SQL session: splits a query string into statements,
//! sends FoamDB's own statements (DDL, COPY, transaction control, EXPLAIN) to
//! their handlers and everything else through DataFusion's planner with the
//! distributed planner attached.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use arrow::array::{ArrayRef, StringArray, UInt64Array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use datafusion::common::ParamValues;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::logical_expr::LogicalPlan;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::prelude::SessionContext;
use datafusion::sql::parser::Statement as DataFusionStatement;
use datafusion::sql::sqlparser::ast::{
    CopyLegacyOption, CopyOption, CopySource, CopyTarget, DiscardObject, Expr, ObjectType, Set, Statement, Value,
};
use foam_catalog::CatalogCommand;
use foam_catalog::model::CommandOutcome;
use foam_common::{FoamError, FoamResult};
use foam_rpc::NodeRequest;
use futures::StreamExt;
use futures::channel::oneshot;

use crate::context::NodeContext;
use crate::write::copy::CopyOptions;
use crate::frontend::ddl;
use crate::frontend::privileges::{self, Acting, Need};
use crate::frontend::statement::{self, FoamStatement, StatementTokens};
use crate::frontend::interrupt::{Interrupt, STATEMENT_TIMEOUT, parse_statement_timeout, show_statement_timeout};
use crate::frontend::transaction_block::{Admission, Block, StatementClass};
use crate::write::TableWriter;
use crate::write::transaction::{OpenTransaction, ReadSnapshot, Transaction};

/// While a query waits for its first batch, how often it checks that no node
/// it uses was marked down (a stopped peer never answers, it does not fail).
const QUERY_NODE_WATCH_MS: u64 = 1_000;

/// How many times a statement that failed because the cluster changed under
/// it runs again, and the first wait before it does (doubling each time, so
/// ten retries wait about 4 s in all: longer than a copy's switch-in fence).
const STATEMENT_RETRIES_MAX: u32 = 10;
const STATEMENT_RETRY_BACKOFF_MS: u64 = 20;

/// The isolation level every transaction block runs at (transaction_block.rs),
/// as `SHOW transaction_isolation` answers it.
const ISOLATION_LEVEL: &str = "read committed";
/// What `SHOW transaction_isolation` answers in a REPEATABLE READ block.
const REPEATABLE_READ: &str = "repeatable read";

/// The tag `ROLLBACK TO SAVEPOINT` completes with inside FoamDB; clients see
/// `ROLLBACK` (foam-pgwire), and their transaction block goes on.
pub const ROLLBACK_TO_TAG: &str = "ROLLBACK TO";
const TRANSACTION_ISOLATION: &str = "transaction_isolation";
/// The setting `SET ROLE` changes, as `SHOW role` names it.
const ROLE_SETTING: &str = "role";
const DEFAULT_TRANSACTION_ISOLATION: &str = "default_transaction_isolation";

/// What a statement gives back to the client.
pub enum StatementOutput {
    Rows { schema: SchemaRef, stream: SendableRecordBatchStream },
    /// A command tag such as `CREATE TABLE`, with a row count for `INSERT 0 n`,
    /// `COPY n`.
    Command { tag: String, rows: Option<u64> },
    /// `COPY ... FROM STDIN`: the client is to send the rows for this table.
    CopyIn(CopyInTarget),
    /// `COPY ... TO STDOUT`: a query's rows, to be sent in COPY's format.
    CopyOut { schema: SchemaRef, stream: SendableRecordBatchStream, options: CopyOptions },
    /// The rows a write's RETURNING gave, one per row changed, and the
    /// write's command tag (`INSERT`, `UPDATE`, `DELETE`).
    Returned { tag: &'static str, schema: SchemaRef, stream: SendableRecordBatchStream },
}

/// A message a statement sends the client besides its answer, as
/// PostgreSQL's NoticeResponse: `DROP TABLE IF EXISTS` of no table, `BEGIN`
/// in a block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    /// `NOTICE` or `WARNING`.
    pub severity: &'static str,
    pub sqlstate: foam_common::SqlState,
    pub message: String,
}

pub struct CopyInTarget {
    pub table: foam_catalog::TableDef,
    pub options: CopyOptions,
}

/// What a planned statement writes.
#[derive(Clone, Debug, PartialEq, Eq)]
enum PlanWrite {
    /// INSERT: DataFusion's plan ends in FoamDB's sink.
    Insert,
    /// UPDATE or DELETE: the plan is the query of the rows they change
    /// (`modify.rs`).
    Modify(crate::frontend::modify::Modify),
}

/// A write's RETURNING query and its plan over the written table.
#[derive(Clone)]
struct ReturningPlan {
    returning: crate::frontend::returning::Returning,
    plan: LogicalPlan,
    /// CHAR(n) widths of its columns (`char_columns.rs`).
    chars: Vec<Option<u32>>,
}

/// A statement parsed and, for queries, planned; ready to execute (again) with
/// parameter values.
#[derive(Clone)]
pub struct PreparedStatement {
    /// The statement as the client wrote it (for messages).
    pub text: String,
    kind: Kind,
    /// What its role must hold to run it (`privileges.rs`), checked at
    /// every run.
    needs: Vec<Need>,
}

#[derive(Clone)]
enum Kind {
    /// Planned by DataFusion from `statement` with catalog version
    /// `catalog_version` (a newer catalog may place partitions elsewhere:
    /// the plan is then made again from `statement`); may have `$n`
    /// parameters.
    /// `chars` is each result column's CHAR width, for its description
    /// (`char_columns.rs`).
    Plan {
        statement: Box<Statement>,
        plan: LogicalPlan,
        write: Option<PlanWrite>,
        catalog_version: u64,
        chars: Vec<Option<u32>>,
        /// A write's RETURNING query, planned (`returning.rs`).
        returning: Option<Box<ReturningPlan>>,
    },
    /// FoamDB's own statement, run by this module, with a CREATE TABLE's
    /// `DISTRIBUTED ...` clause.
    Own(Box<Statement>, Option<foam_catalog::model::DistributionSpec>),
    /// A catalog command FoamDB parsed itself (`ALTER CLUSTER ...`, a role
    /// statement), with its command tag.
    Catalog { command: CatalogCommand, tag: &'static str },
    /// `COPY ... TO STDOUT`: the query it sends (a `Plan`), and its format.
    CopyOut { query: Box<PreparedStatement>, options: CopyOptions },
    /// `ALTER TABLE [IF EXISTS] table ADD PRIMARY KEY | UNIQUE`: the key is
    /// checked against the stored rows (`write/keys.rs`).
    AddKey { table: String, if_exists: bool, key: foam_catalog::model::UniqueKeyDef },
    /// `ALTER TABLE [IF EXISTS] table ADD [CONSTRAINT name] CHECK (expr)`:
    /// the constraint is checked against the stored rows (`add_check`).
    AddCheck(Box<crate::frontend::check_constraints::AddCheck>),
    /// `CHECKPOINT`: every up node writes its memtables to segments.
    Checkpoint,
    /// VACUUM or ANALYZE: deleted rows are folded away by flushes and by
    /// rewriting much-deleted segments as deletions accumulate (as autovacuum
    /// would, `foam_storage::partition::Partition::flush`), and plans use
    /// statistics read from the partitions when they are made, so neither
    /// has work left to do; each checks that its tables exist.
    Maintenance { tag: &'static str, tables: Vec<String> },
    /// Nothing to do (an empty statement).
    Empty,
}

impl PreparedStatement {
    /// What the statement is to a transaction block: a write changes rows,
    /// and what changes the catalog or a node is not transactional, except
    /// a change of a table or sequence the block created (`created`), which
    /// ROLLBACK takes back with it.
    fn class(&self, created: &dyn Fn(&str) -> bool) -> StatementClass {
        match &self.kind {
            Kind::Plan { write: Some(_), .. } => StatementClass::Write,
            Kind::Plan { .. } | Kind::Empty => StatementClass::Read,
            Kind::Catalog { command, .. } if changed_relation(command).is_some_and(created) => StatementClass::Write,
            Kind::Catalog { tag, .. } => StatementClass::NotTransactional(tag),
            Kind::AddKey { .. } | Kind::AddCheck(_) => StatementClass::NotTransactional("ALTER TABLE"),
            Kind::CopyOut { .. } => StatementClass::Read,
            Kind::Checkpoint => StatementClass::NotTransactional("CHECKPOINT"),
            Kind::Maintenance { tag: "VACUUM", .. } => StatementClass::NotTransactional("VACUUM"),
            Kind::Maintenance { .. } => StatementClass::Read,
            Kind::Own(statement, _) => match statement.as_ref() {
                Statement::StartTransaction { .. } => StatementClass::Begin,
                Statement::Commit { .. } => StatementClass::Commit,
                Statement::Rollback { savepoint: Some(_), .. } => StatementClass::RollbackTo,
                Statement::Rollback { .. } => StatementClass::Rollback,
                Statement::Savepoint { .. } | Statement::ReleaseSavepoint { .. } => StatementClass::Savepoint,
                // A block undoes them on ROLLBACK (block_ddl.rs).
                Statement::CreateTable(_) | Statement::CreateView(_) | Statement::CreateSequence { .. } | Statement::Drop { .. } => StatementClass::Write,
                Statement::Copy { to: false, .. } | Statement::Truncate(_) => StatementClass::Write,
                Statement::Declare { .. } | Statement::Fetch { .. } | Statement::Close { .. } => StatementClass::Read,
                Statement::Explain { analyze: true, statement, .. } if !matches!(statement.as_ref(), Statement::Query(_)) => {
                    StatementClass::NotTransactional("EXPLAIN ANALYZE of a write")
                }
                _ => StatementClass::Read,
            },
        }
    }

    /// Parameter types, in `$1, $2, ...` order; `None` where DataFusion could not infer one.
    pub fn parameter_types(&self) -> FoamResult<Vec<Option<DataType>>> {
        let Kind::Plan { plan, returning, .. } = &self.kind else { return Ok(Vec::new()) };
        let mut types = plan.get_parameter_types().map_err(FoamError::from)?;
        let mut cast = cast_parameter_types(plan);
        // RETURNING may use parameters of its own (`RETURNING v + $3`).
        if let Some(returning) = returning {
            for (name, t) in returning.plan.get_parameter_types().map_err(FoamError::from)? {
                let known = types.entry(name).or_insert(None);
                *known = known.take().or(t);
            }
            for (name, t) in cast_parameter_types(&returning.plan) {
                cast.entry(name).or_insert(t);
            }
        }
        let mut ordered: Vec<(usize, Option<DataType>)> = types
            .into_iter()
            .map(|(name, t)| {
                let t = t.or_else(|| cast.get(&name).cloned());
                (name, t)
            })
            .filter_map(|(name, t)| name.trim_start_matches('$').parse::<usize>().ok().map(|i| (i, t)))
            .collect();
        ordered.sort_by_key(|(i, _)| *i);
        let count = ordered.last().map(|(i, _)| *i).unwrap_or(0);
        let mut result = vec![None; count];
        for (index, data_type) in ordered {
            result[index - 1] = data_type;
        }
        Ok(result)
    }

    /// Schema of the rows the statement returns, if it returns rows.
    pub fn result_schema(&self) -> Option<SchemaRef> {
        match &self.kind {
            Kind::Plan { plan, write: None, chars, .. } if returns_rows(plan) => {
                let schema = Arc::new(plan.schema().as_arrow().clone());
                Some(crate::frontend::char_columns::mark(&schema, chars).unwrap_or(schema))
            }
            Kind::Plan { returning: Some(returning), .. } => {
                let schema = Arc::new(returning.plan.schema().as_arrow().clone());
                Some(crate::frontend::char_columns::mark(&schema, &returning.chars).unwrap_or(schema))
            }
            Kind::Own(statement, _) if matches!(**statement, Statement::Explain { .. }) => Some(explain_schema()),
            _ => None,
        }
    }
}

/// The types of the parameters `plan` casts as they stand (`$1::int`,
/// `CAST($1 AS DATE)`) or passes to a function of one signature, which
/// DataFusion leaves untyped: PostgreSQL types a parameter so used as the
/// cast's type or the function's argument type.
fn cast_parameter_types(plan: &LogicalPlan) -> std::collections::HashMap<String, DataType> {
    use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
    use datafusion::logical_expr::{Cast, Expr, TryCast, TypeSignature, expr::Placeholder};
    let mut types = std::collections::HashMap::new();
    let _ = plan.apply_with_subqueries(|node| {
        node.apply_expressions(|expr| {
            expr.apply(|expr| {
                if let Expr::Cast(Cast { expr: inner, field }) | Expr::TryCast(TryCast { expr: inner, field }) = expr
                    && let Expr::Placeholder(Placeholder { id, field: None }) = inner.as_ref()
                {
                    types.entry(id.clone()).or_insert_with(|| field.data_type().clone());
                }
                // An argument of a function of one signature takes its type
                // (`to_regtype($1)`), as PostgreSQL types it.
                if let Expr::ScalarFunction(call) = expr
                    && let TypeSignature::Exact(argument_types) = &call.func.signature().type_signature
                {
                    for (argument, data_type) in call.args.iter().zip(argument_types) {
                        if let Expr::Placeholder(Placeholder { id, field: None }) = argument {
                            types.entry(id.clone()).or_insert_with(|| data_type.clone());
                        }
                    }
                }
                Ok(TreeNodeRecursion::Continue)
            })
        })
    });
    types
}

/// The setting's name (lowercase) and value (a string literal's text) of
/// `SET [SESSION|LOCAL] name = value, ...` or `... TO value`.
fn set_name_and_value(set: &Set) -> Option<(String, String)> {
    if let Set::SetTimeZone { value, .. } = set {
        let value = match value {
            Expr::Value(literal) => match &literal.value {
                Value::SingleQuotedString(text) => text.clone(),
                other => other.to_string(),
            },
            other => other.to_string(),
        };
        return Some((crate::frontend::time_zone::TIME_ZONE.to_string(), value));
    }
    let Set::SingleAssignment { variable, values, .. } = set else { return None };
    let value = values
        .iter()
        .map(|value| match value {
            Expr::Value(literal) => match &literal.value {
                Value::SingleQuotedString(text) => text.clone(),
                other => other.to_string(),
            },
            other => other.to_string(),
        })
        .collect::<Vec<_>>()
        .join(", ");
    Some((variable.to_string().to_lowercase(), value))
}

/// Remakes the functions that read the session's options when they are
/// made (`now()` takes its zone so), as DataFusion's own SET does.
fn refresh_config_functions(ctx: &SessionContext) {
    let state = ctx.state_ref();
    let mut state = state.write();
    let options = state.config().options().clone();
    let updated: Vec<_> = state.scalar_functions().values().filter_map(|udf| udf.inner().with_updated_config(&options).map(Arc::new)).collect();
    for udf in updated {
        if let Err(error) = datafusion::execution::FunctionRegistry::register_udf(&mut *state, udf) {
            tracing::warn!(%error, "a function not remade for the session's options");
        }
    }
}

/// `statement` as DataFusion's planner takes it. `RESET name` is DataFusion's
/// own statement (its parser, not sqlparser's, reads it from text).
fn datafusion_statement(statement: Statement) -> DataFusionStatement {
    use datafusion::sql::parser::ResetStatement as DataFusionReset;
    use datafusion::sql::sqlparser::ast::{Ident, ObjectName, Reset};
    match statement {
        Statement::Reset(reset) => DataFusionStatement::Reset(DataFusionReset::Variable(match reset.reset {
            Reset::ConfigurationParameter(name) => name,
            Reset::ALL => ObjectName::from(vec![Ident::new("ALL")]),
        })),
        other => DataFusionStatement::Statement(Box::new(other)),
    }
}

/// The codecs `distributed.compression` takes (see
/// `distributed::EXCHANGE_COMPRESSION`). DataFusion stores any string there
/// and the stages would refuse it only when the next query runs, so an
/// unknown one is refused by the SET itself.
const EXCHANGE_CODECS: [&str; 3] = ["none", "lz4", "zstd"];

fn check_exchange_compression(set: &Set) -> FoamResult<()> {
    match set_name_and_value(set) {
        Some((name, value)) if name == "distributed.compression" && !EXCHANGE_CODECS.contains(&value.as_str()) => {
            Err(FoamError::InvalidParameter {
                message: format!("distributed.compression must be one of {}, not \"{value}\"", EXCHANGE_CODECS.join(", ")),
            })
        }
        _ => Ok(()),
    }
}

/// The settings that belong to the node, not to a session: DataFusion's
/// `datafusion.runtime.*` would replace the node's query memory pool
/// (`memory_limit`) or send its spill files to any directory
/// (`temp_directory`).
const NODE_SETTINGS_PREFIX: &str = "datafusion.runtime";

/// DataFusion settings that would make a name resolve otherwise than as
/// PostgreSQL resolves it (and otherwise than privileges are checked).
const NAME_RESOLUTION_SETTINGS: [&str; 2] = ["datafusion.sql_parser.enable_ident_normalization", "datafusion.catalog."];

/// Refuses a `SET` or `RESET` of a node's setting with 42501, and of a
/// name-resolution setting with 0A000.
/// Whether any node of `plan` is one `test` accepts.
/// The rewrites of a query's expressions into what DataFusion plans as
/// PostgreSQL would (`spellings.rs`, literals, casts, subscripts, AT TIME
/// ZONE), for a query FoamDB writes itself over a constraint's expression.
fn rewrite_expressions(query: &mut Statement) -> FoamResult<()> {
    crate::frontend::spellings::rewrite(query)?;
    crate::frontend::numeric_literals::rewrite(query);
    crate::frontend::datetime_literals::rewrite(query)?;
    crate::frontend::char_casts::rewrite(query);
    crate::frontend::subscripts::rewrite(query)?;
    crate::frontend::at_time_zone::rewrite(query);
    crate::optimizer::logical::quoted_literals::typed_by_planner(query);
    Ok(())
}

fn plan_holds(plan: &LogicalPlan, test: impl Fn(&LogicalPlan) -> bool) -> FoamResult<bool> {
    let mut found = false;
    datafusion::common::tree_node::TreeNode::apply(plan, |node| {
        found |= test(node);
        Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
    })?;
    Ok(found)
}

/// Whether `plan` calls a volatile function.
fn is_volatile(plan: &LogicalPlan) -> FoamResult<bool> {
    plan_holds(plan, |node| node.expressions().iter().any(|e| e.is_volatile()))
}

fn check_not_node_setting(statement: &Statement) -> FoamResult<()> {
    let text = match statement {
        Statement::Set(_) | Statement::Reset(_) => statement.to_string().to_lowercase(),
        _ => return Ok(()),
    };
    if let Some(setting) = NAME_RESOLUTION_SETTINGS.iter().find(|s| text.contains(*s)) {
        return Err(FoamError::FeatureNotSupported { feature: format!("changing {setting}* (FoamDB resolves names as PostgreSQL does)") });
    }
    if text.contains(NODE_SETTINGS_PREFIX) {
        return Err(FoamError::InsufficientPrivilege {
            message: format!("{NODE_SETTINGS_PREFIX}.* settings belong to the node (its memory pool and spill directory); a session may not change them"),
        });
    }
    Ok(())
}

fn returns_rows(plan: &LogicalPlan) -> bool {
    !matches!(plan, LogicalPlan::Statement(_) | LogicalPlan::Ddl(_) | LogicalPlan::Dml(_) | LogicalPlan::Copy(_))
}

/// The setting that sizes batches sent between nodes, and its largest value.
const EXCHANGE_BATCH_ROWS: &str = "foam.exchange_batch_rows";
const EXCHANGE_BATCH_ROWS_MAX: usize = 16 * 1024 * 1024;
/// The setting that caps batches sent between nodes by bytes, and the size
/// assumed for a string or binary value when turning it into rows.
const EXCHANGE_BATCH_BYTES: &str = "foam.exchange_batch_bytes";
const STRING_BYTES_ESTIMATE: usize = 32;

/// Whether datafusion-distributed sends each task's metrics back.
fn set_collect_metrics(ctx: &SessionContext, on: bool) {
    let state = ctx.state_ref();
    let mut state = state.write();
    if let Err(error) = state.config_mut().options_mut().set("distributed.collect_metrics", if on { "true" } else { "false" }) {
        tracing::warn!(%error, "cannot set distributed.collect_metrics");
    }
}

/// Estimated bytes of one row of `schema` in Arrow buffers.
fn row_bytes_estimate(schema: &arrow::datatypes::Schema) -> usize {
    schema
        .fields()
        .iter()
        .map(|f| match f.data_type() {
            DataType::Boolean => 1,
            t => t.primitive_width().unwrap_or(STRING_BYTES_ESTIMATE),
        })
        .sum::<usize>()
        .max(1)
}

pub struct FoamSession {
    node: Arc<NodeContext>,
    ctx: SessionContext,
    /// Client settings FoamDB accepts but that do not change its behaviour
    /// (client_encoding, DateStyle, ...), so `SHOW` can answer them.
    settings: Mutex<BTreeMap<String, String>>,
    /// The TimeZone the client was last told of (ParameterStatus).
    reported_zone: Mutex<String>,
    /// NOTICEs and WARNINGs statements raised, for the protocol layer to
    /// send (`take_notices`).
    notices: Mutex<Vec<Notice>>,
    /// Whether the session is inside `BEGIN ... COMMIT` (transaction_block.rs).
    block: Mutex<Block>,
    /// The block's transaction (`write/transaction.rs`); also in the
    /// session's config, where the INSERT sink and scans find it.
    open: Arc<OpenTransaction>,
    /// The block was opened `READ ONLY`: its writes are refused (25006).
    read_only: std::sync::atomic::AtomicBool,
    /// The running statement's snapshot; also in the session's config,
    /// where table scans find it.
    snapshot: Arc<ReadSnapshot>,
    /// The CHECK constraints planned for the table the running statement
    /// writes; also in the session's config, where the INSERT sink finds them.
    checks: Arc<crate::write::checks::StatementChecks>,
    /// The role the client authenticated as.
    session_user: String,
    /// `SET ROLE`: the role statements run as instead, until `RESET ROLE`.
    role: Arc<Mutex<Option<String>>>,
    /// The node lets anyone connect as anyone (`--insecure`): a name no
    /// role has acts as a superuser.
    insecure: bool,
    /// The client settings and DataFusion's options the session started
    /// with, which `RESET ALL` and `DISCARD ALL` go back to.
    initial_settings: BTreeMap<String, String>,
    initial_options: datafusion::config::ConfigOptions,
    /// SQL-level prepared statements (`PREPARE name AS ...`), which
    /// DataFusion keeps where they cannot be listed, by normalized name: the
    /// name as written (`DEALLOCATE ALL` deallocates each) and what an
    /// EXECUTE of it needs of its role.
    sql_prepared: Mutex<BTreeMap<String, (String, Vec<Need>)>>,
    /// What the open block's end puts back (`SET` inside a block).
    block_settings: Mutex<BlockSettings>,
    /// What the open block's end undoes or finishes of its DDL.
    block_ddl: Mutex<crate::frontend::block_ddl::BlockDdl>,
    /// Open SQL cursors (`DECLARE`), by name.
    cursors: crate::frontend::cursors::Cursors,
}

impl Drop for FoamSession {
    /// A block its connection left open undoes its DDL (its rows go with
    /// its transaction: see `Transaction`'s `Drop`).
    fn drop(&mut self) {
        let ddl = std::mem::take(&mut *self.block_ddl());
        if !ddl.is_empty()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            let node = self.node.clone();
            runtime.spawn(async move { ddl.undo(&node).await });
        }
    }
}

/// The settings a `BEGIN ... COMMIT` block may have to put back, as in
/// PostgreSQL: a ROLLBACK (or the end of a failed block) undoes the block's
/// `SET`s, `SET ROLE`s and `RESET`s; `SET LOCAL` lasts until the block
/// ends either way; `ROLLBACK TO SAVEPOINT` undoes those made since the
/// savepoint.
#[derive(Default)]
struct BlockSettings {
    /// What BEGIN found.
    at_begin: Option<SettingsAt>,
    /// Each setting `SET LOCAL` changed, with its value before (the first
    /// time only).
    local: Vec<(String, String)>,
    /// Each open savepoint, oldest first: its name, what it found and the
    /// `SET LOCAL`s made before it.
    savepoints: Vec<(String, SettingsAt, Vec<(String, String)>)>,
}

/// The client settings, DataFusion options and role at one point.
type SettingsAt = (BTreeMap<String, String>, datafusion::config::ConfigOptions, Option<String>);

impl crate::frontend::setting_functions::SessionSettings for FoamSession {
    fn get(&self, name: &str) -> FoamResult<String> {
        self.setting(name)
    }
    fn set(&self, name: String, value: String, local: bool) -> FoamResult<()> {
        if self.note_block_setting(&name, local) { self.set_setting(name, value) } else { Ok(()) }
    }
    fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.settings.lock().unwrap_or_else(|p| p.into_inner()).keys().cloned().collect();
        names.extend([TRANSACTION_ISOLATION, DEFAULT_TRANSACTION_ISOLATION, "transaction_read_only", ROLE_SETTING, "is_superuser"].map(String::from));
        names.sort();
        names.dedup();
        names
    }
}

/// Settings FoamDB has one value of: SET to another is refused (0A000),
/// not taken and ignored. FoamDB's tables have one storage (SQLAlchemy's
/// reflection asks for `default_table_access_method`).
const FIXED_SETTINGS: [(&str, &str); 4] =
    [("standard_conforming_strings", "on"), ("integer_datetimes", "on"), ("server_encoding", "UTF8"), ("default_table_access_method", "heap")];

impl FoamSession {
    /// A session of the role `user`, authenticated already (or anyone's,
    /// when the node is `insecure`).
    pub fn new(node: Arc<NodeContext>, runtime: Arc<RuntimeEnv>, user: &str, insecure: bool) -> Self {
        let state = crate::distributed::coordinator_state_builder(node.clone(), runtime.clone())
            .with_catalog_list(crate::catalog::provider::catalog_list(node.clone(), runtime))
            .build();
        let open = Arc::new(OpenTransaction::default());
        let ctx = SessionContext::new_with_state(state);
        ctx.state_ref().write().config_mut().set_extension(open.clone());
        let snapshot = Arc::new(ReadSnapshot::default());
        ctx.state_ref().write().config_mut().set_extension(snapshot.clone());
        let checks = Arc::new(crate::write::checks::StatementChecks::default());
        ctx.state_ref().write().config_mut().set_extension(checks.clone());
        ctx.register_udf(crate::catalog::system_tables::ClusterStatsReset::udf(node.clone()));
        // Per-task metrics travel back only for EXPLAIN ANALYZE: collecting
        // them for every query cost 5-10% of small distributed queries.
        set_collect_metrics(&ctx, false);
        let role = Arc::new(Mutex::new(None));
        // psql's backslash commands query pg_catalog; datafusion-pg-catalog
        // emulates it over our catalog.
        let viewer = crate::catalog::pg_stat_activity::Viewer { session_user: user.to_string(), role: role.clone(), insecure };
        if let Err(error) = datafusion_pg_catalog::setup_pg_catalog(
            &ctx,
            crate::catalog::provider::CATALOG_NAME,
            crate::frontend::pg_access::CatalogRoles(node.clone()),
        ) {
            tracing::warn!(%error, "pg_catalog emulation unavailable");
        } else if let Err(error) = crate::catalog::pg_columns::declare_types(&ctx, node.clone(), viewer) {
            tracing::warn!(%error, "pg_attribute without declared types");
        }
        ctx.register_udf(crate::catalog::pg_defaults::pg_get_expr_udf());
        let sequences = crate::exec::sequences::SessionSequences::new(user, role.clone(), insecure);
        for udf in crate::exec::sequences::session_udfs(node.clone(), Arc::new(sequences)) {
            ctx.register_udf(udf);
        }
        ctx.register_udf(crate::exec::sequences::serial_sequence_udf(node.clone()));
        for udf in crate::frontend::pg_access::udfs(&node, user, &role, insecure) {
            ctx.register_udf(udf);
        }
        crate::optimizer::register_statement_functions(&ctx);
        for udf in crate::catalog::functions::catalog_inquiry_udfs() {
            ctx.register_udf(udf);
        }
        ctx.register_udf(crate::frontend::setting_functions::set_config_of_rows_udf());
        for udf in crate::catalog::pg_keys::definition_udfs(node.clone()) {
            ctx.register_udf(udf);
        }
        if let Some(pg_catalog) = ctx.catalog(crate::catalog::provider::CATALOG_NAME).and_then(|c| c.schema("pg_catalog")) {
            for udf in crate::catalog::pg_functions::function_udfs(pg_catalog.clone()) {
                ctx.register_udf(udf);
            }
            for udf in crate::catalog::pg_sizes::size_udfs(node.clone(), pg_catalog) {
                ctx.register_udf(udf);
            }
        }
        let settings = BTreeMap::from([
            ("server_version".to_string(), format!("{} (FoamDB)", crate::catalog::functions::POSTGRES_VERSION)),
            ("server_version_num".to_string(), crate::catalog::functions::POSTGRES_VERSION_NUM.to_string()),
            ("client_encoding".to_string(), "UTF8".to_string()),
            ("datestyle".to_string(), "ISO, MDY".to_string()),
            (STATEMENT_TIMEOUT.to_string(), show_statement_timeout(0)),
            (crate::frontend::time_zone::TIME_ZONE.to_string(), crate::frontend::time_zone::DEFAULT_ZONE.to_string()),
            (crate::frontend::setting_functions::SESSION_AUTHORIZATION.to_string(), user.to_string()),
        ])
        .into_iter()
        .chain(FIXED_SETTINGS.iter().map(|(name, value)| (name.to_string(), value.to_string())))
        .collect::<BTreeMap<_, _>>();
        if let Ok(zone) = crate::frontend::time_zone::parse(crate::frontend::time_zone::DEFAULT_ZONE) {
            ctx.state_ref().write().config_mut().options_mut().execution.time_zone = Some(zone.datafusion);
            refresh_config_functions(&ctx);
        }
        let initial_options = ctx.state().config().options().as_ref().clone();
        FoamSession {
            node,
            ctx,
            initial_settings: settings.clone(),
            initial_options,
            sql_prepared: Default::default(),
            block_settings: Default::default(),
            block_ddl: Default::default(),
            cursors: Default::default(),
            settings: Mutex::new(settings),
            reported_zone: Mutex::new(crate::frontend::time_zone::DEFAULT_ZONE.to_string()),
            notices: Mutex::new(Vec::new()),
            block: Mutex::new(Block::Idle),
            open,
            read_only: Default::default(),
            snapshot,
            checks,
            session_user: user.to_string(),
            role,
            insecure,
        }
    }

    pub fn node(&self) -> &Arc<NodeContext> {
        &self.node
    }

    /// Runs every statement of a query string; stops at the first error, as
    /// PostgreSQL's simple query protocol does. Its reads stop with 57014 when
    /// `cancel` fires or the session's `statement_timeout` passes (one
    /// deadline for the whole string, as in PostgreSQL).
    pub async fn execute_all(&self, sql: &str, cancel: Option<oneshot::Receiver<()>>) -> Vec<FoamResult<StatementOutput>> {
        let statements = match statement::split(sql) {
            Ok(statements) => statements,
            Err(error) => return vec![Err(error)],
        };
        let interrupt = self.interrupt(cancel);
        let mut outputs = Vec::with_capacity(statements.len());
        let count = statements.len();
        for (index, tokens) in statements.into_iter().enumerate() {
            let mut result = match self.prepare_tokens(tokens).await {
                Ok(prepared) => self.run(&prepared, None, &interrupt).await,
                Err(error) => {
                    self.statement_failed();
                    Err(error)
                }
            };
            // A later statement must not run before this one's rows are read
            // (`SELECT count(*) FROM t; INSERT INTO t ...` counts the old rows).
            if index + 1 < count
                && let Ok(StatementOutput::Rows { schema, stream }) = result
            {
                result = datafusion::physical_plan::common::collect(stream)
                    .await
                    .map(|batches| rows_output(schema, batches))
                    .map_err(FoamError::from);
            }
            let failed = result.is_err();
            outputs.push(result);
            if failed {
                break;
            }
        }
        outputs
    }

    /// Parses and plans a single statement (extended protocol's Parse).
    pub async fn prepare(&self, sql: &str) -> FoamResult<PreparedStatement> {
        let mut statements = statement::split(sql)?;
        let prepared = match statements.len() {
            0 => Ok(PreparedStatement { text: String::new(), kind: Kind::Empty, needs: Vec::new() }),
            1 => self.prepare_tokens(statements.remove(0)).await,
            _ => Err(FoamError::Syntax { message: "cannot insert multiple commands into a prepared statement".into() }),
        };
        if prepared.is_err() {
            self.statement_failed();
        }
        prepared
    }

    /// Whether a transaction block is open (BEGIN without COMMIT or
    /// ROLLBACK yet), failed or not.
    pub fn in_block(&self) -> bool {
        *self.block() != Block::Idle
    }

    fn block(&self) -> std::sync::MutexGuard<'_, Block> {
        self.block.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A statement failed: inside a block, the block fails and its
    /// transaction's rows are discarded now (dropping the last handle of a
    /// transaction aborts it; see `Transaction`'s `Drop`).
    pub fn statement_failed(&self) {
        let mut block = self.block();
        block.statement_failed();
        // A savepoint may resume the block; without one it can only end.
        if *block == Block::Failed && !self.open.get().is_some_and(|open| open.has_savepoints()) {
            drop(self.open.set(None));
        }
    }

    /// Runs COPY FROM STDIN's rows, spooled at `path`, as a statement of the
    /// session (of its transaction block, if one is open).
    pub async fn copy_in(&self, target: &CopyInTarget, path: String) -> FoamResult<u64> {
        let result =
            crate::write::copy::copy_from_file(self.node.clone(), target.table.clone(), path, target.options.clone(), self.open.get()).await;
        if result.is_err() {
            self.statement_failed();
        }
        result
    }

    async fn prepare_tokens(&self, tokens: StatementTokens) -> FoamResult<PreparedStatement> {
        self.node.catalog.refresh().await?;
        let text = tokens.text.clone();
        let prepared = |kind: Kind| Ok(PreparedStatement { needs: needs_of(&kind, &[]), text: text.clone(), kind });
        let recursion_limit = self.ctx.state().config().options().sql_parser.recursion_limit.get();
        let (mut statement, distribution) = match tokens.parse(recursion_limit)? {
            FoamStatement::Empty => return prepared(Kind::Empty),
            FoamStatement::Checkpoint => return prepared(Kind::Checkpoint),
            FoamStatement::Maintenance { tag, tables } => return prepared(Kind::Maintenance { tag, tables }),
            FoamStatement::AlterCluster(command) => return prepared(Kind::Catalog { command, tag: "ALTER CLUSTER" }),
            FoamStatement::Role { command, tag } => return prepared(Kind::Catalog { command, tag }),
            FoamStatement::AlterSequence { name, if_exists, change } => return prepared(self.alter_sequence(name, if_exists, change)?),
            FoamStatement::AddIdentity { statement, sequence } => {
                let kind = self.alter_column(&statement, Some(sequence)).await?;
                return prepared(kind.ok_or_else(|| FoamError::FeatureNotSupported { feature: "SEQUENCE NAME outside ALTER TABLE ... ADD GENERATED".into() })?);
            }
            FoamStatement::Sql { statement, distribution } => (statement, distribution),
        };
        // Catalog queries from psql and drivers use PostgreSQL-only forms
        // (`'t'::regclass`, `OPERATOR(pg_catalog.~)`); rewrite those, and only
        // those, into forms DataFusion plans. The compatibility parser reads
        // the text again: it matches whole queries by their tokens.
        crate::frontend::sequence_ddl::names_as_text(&mut statement);
        let catalog_query = text.contains("pg_");
        if catalog_query {
            crate::frontend::pg_compatibility::rewrite(&mut statement, &text);
        }
        // `information_schema.columns` is a view over `pg_catalog`, as in
        // PostgreSQL (after the rewrite above, which reads `text` again).
        if crate::frontend::information_schema::rewrite(&mut statement) || catalog_query {
            crate::catalog::pg_missing::rewrite_catalog_query(&mut statement);
            let catalog = self.node.catalog.current();
            crate::catalog::pg_stat_activity::qualify(&mut statement, |name| catalog.tables.contains_key(name) || catalog.views.contains_key(name));
        }
        // Select items named as PostgreSQL names them, repeats allowed (a
        // client reads `prsstart::oid` by the name `prsstart`).
        crate::frontend::select_names::name_select_items(&mut statement);
        crate::frontend::grouping_sets::rewrite(&mut statement);
        // A default may be pg_dump's `nextval('s'::regclass)`.
        if crate::frontend::column_defaults::fill(&mut statement, &self.node.catalog.current())? {
            crate::frontend::sequence_ddl::names_as_text(&mut statement);
        }
        crate::frontend::spellings::rewrite(&mut statement)?;
        crate::frontend::numeric_literals::rewrite(&mut statement);
        crate::frontend::datetime_literals::rewrite(&mut statement)?;
        crate::frontend::char_casts::rewrite(&mut statement);
        crate::frontend::array_subquery::rewrite(&mut statement)?;
        crate::frontend::subscripts::rewrite(&mut statement)?;
        crate::frontend::function_tables::rewrite(&mut statement)?;
        crate::frontend::at_time_zone::rewrite(&mut statement);
        crate::optimizer::logical::quoted_literals::typed_by_planner(&mut statement);
        {
            // Read in place: `state()` would copy the whole session state.
            let state = self.ctx.state_ref();
            let state = state.read();
            let catalog = self.node.catalog.current();
            let exact_column = |table: &str, column: &str| -> Option<bool> {
                let def = catalog.tables.get(table)?;
                let column = def.columns.iter().find(|c| c.name == column)?;
                Some(!matches!(column.sql_type, foam_catalog::SqlType::Real | foam_catalog::SqlType::Double | foam_catalog::SqlType::Char { .. }))
            };
            let names = crate::frontend::lateral_limit::Names { is_aggregate: &|name| state.aggregate_functions().contains_key(name), exact_column: &exact_column };
            crate::frontend::lateral_limit::rewrite(&mut statement, &names);
            crate::frontend::scalar_subquery::rewrite(&mut statement, &|name| state.aggregate_functions().contains_key(name));
        }
        check_not_node_setting(&statement)?;
        let copy_out = crate::frontend::copy_statement::copy_out_query(&statement)?.map(|(query, options)| {
            *statement = query;
            options
        });
        if let Some((command, tag)) = privileges::grant_command(&statement, &self.node.catalog.current())? {
            return prepared(Kind::Catalog { command, tag });
        }
        // EXPLAIN runs what DataFusion plans as a statement (SET, DDL).
        if let Statement::Explain { statement: explained, .. } = &*statement
            && !matches!(**explained, Statement::Query(_) | Statement::Insert(_) | Statement::Update(_) | Statement::Delete(_))
        {
            return Err(FoamError::FeatureNotSupported { feature: "EXPLAIN of a statement other than SELECT, INSERT, UPDATE or DELETE".into() });
        }
        let own = matches!(
            *statement,
            Statement::CreateTable(_)
                | Statement::CreateView(_)
                | Statement::Drop { .. }
                | Statement::CreateSequence { .. }
                | Statement::Copy { .. }
                | Statement::StartTransaction { .. }
                | Statement::Commit { .. }
                | Statement::Rollback { .. }
                | Statement::Savepoint { .. }
                | Statement::ReleaseSavepoint { .. }
                | Statement::Explain { .. }
                | Statement::Declare { .. }
                | Statement::Fetch { .. }
                | Statement::Close { .. }
                | Statement::Lock(_)
        ) || matches!(&*statement, Statement::Truncate(truncate) if truncate.table_names.len() > 1)
            || is_reset_foamdb_runs(&statement)
            || matches!(*statement, Statement::Discard { .. })
            || is_deallocate_all(&statement)
            || self.is_client_setting(&statement);
        if own {
            return prepared(Kind::Own(statement, distribution));
        }
        let catalog = self.node.catalog.current();
        let returning = crate::frontend::returning::take(&mut statement)?;
        let modify = crate::frontend::modify::as_query(&statement, &catalog)?;
        let modify_reads = modify.as_ref().map(|(_, modify)| privileges::modify_read_needs(&statement, modify.table(), &catalog));
        if let Some((query, _)) = &modify {
            *statement = query.clone();
        }
        if let Some((relation, if_exists, owner)) = crate::frontend::ddl::alter_owner(&statement, &self.current_user(), &self.session_user)? {
            if if_exists && !catalog.relation_exists(&relation) {
                // Nothing to do, as for a missing relation under IF EXISTS.
                return prepared(Kind::Maintenance { tag: "ALTER TABLE", tables: Vec::new() });
            }
            return prepared(Kind::Catalog { command: CatalogCommand::AlterOwner { relation, owner }, tag: "ALTER TABLE" });
        }
        if let Some(owner) = crate::frontend::ddl::alter_schema_owner(&statement, &self.current_user(), &self.session_user)? {
            // `public` is the bootstrap role's: naming that role changes nothing.
            return match crate::catalog::pg_owners::schema_owner(&catalog) {
                Some(current) if current == owner => prepared(Kind::Maintenance { tag: "ALTER SCHEMA", tables: Vec::new() }),
                current => Err(FoamError::FeatureNotSupported {
                    feature: format!("changing the owner of schema public (it belongs to {})", current.unwrap_or("the first superuser")),
                }),
            };
        }
        if let Some(kind) = self.alter_column(&statement, None).await? {
            return prepared(kind);
        }
        if let Some(add) = crate::frontend::check_constraints::alter_add_check(&statement)? {
            return prepared(Kind::AddCheck(Box::new(add)));
        }
        if let Some((table, if_exists, name, constraint_if_exists)) = crate::frontend::check_constraints::alter_drop_constraint(&statement)? {
            if if_exists && !catalog.tables.contains_key(&table) {
                return prepared(Kind::Maintenance { tag: "ALTER TABLE", tables: Vec::new() });
            }
            let command = CatalogCommand::DropConstraint { table, name, if_exists: constraint_if_exists };
            return prepared(Kind::Catalog { command, tag: "ALTER TABLE" });
        }
        if let Statement::AlterTable(_) = *statement {
            let (table, if_exists, key) = crate::frontend::ddl::alter_table_key(&statement)?;
            return prepared(Kind::AddKey { table, if_exists, key });
        }
        if let Statement::CreateIndex(_) = *statement {
            let feature = text.split_whitespace().take(2).collect::<Vec<_>>().join(" ").to_uppercase();
            return Err(FoamError::FeatureNotSupported { feature });
        }
        if let Statement::Set(set) = &*statement {
            check_exchange_compression(set)?;
        }
        let catalog_version = catalog.version;
        let reads = match (modify_reads, &*statement) {
            (Some(reads), _) => reads,
            (None, Statement::Prepare { statement: prepared, .. }) => privileges::read_needs(prepared, &catalog),
            (None, statement) => privileges::read_needs(statement, &catalog),
        };
        // set_config takes effect as the statement is planned: a statement
        // its role may not run must not get that far.
        if crate::frontend::setting_functions::calls_set_config(&statement) {
            self.check_privileges(&reads)?;
        }
        let mut plan = self.plan(&statement).await?;
        if text.contains("pg_") {
            plan = crate::catalog::pg_missing::lenient_catalog_casts(plan)?;
        }
        if let LogicalPlan::Ddl(_) = plan {
            return Err(FoamError::FeatureNotSupported { feature: format!("\"{text}\"") });
        }
        let write = match modify {
            Some((_, modify)) => Some(PlanWrite::Modify(modify)),
            None => matches!(plan, LogicalPlan::Dml(_)).then_some(PlanWrite::Insert),
        };
        let mut reads = reads;
        if let Statement::Execute { name: Some(name), .. } = &*statement
            && let Ok(name) = ddl::table_name(name)
            && let Some((_, needs)) = self.sql_prepared.lock().unwrap_or_else(|p| p.into_inner()).get(&name)
        {
            reads.extend(needs.iter().cloned());
        }
        let chars = crate::frontend::char_columns::widths(&plan, &catalog);
        let returning = match returning {
            Some(returning) => {
                reads.extend(privileges::read_needs(&returning.query, &catalog));
                let plan = self.plan(&returning.query).await?;
                let chars = crate::frontend::char_columns::widths(&plan, &catalog);
                Some(Box::new(ReturningPlan { returning, plan, chars }))
            }
            None => None,
        };
        let kind = Kind::Plan { statement, plan, write, catalog_version, chars, returning };
        let needs = needs_of(&kind, &reads);
        match copy_out {
            Some(options) => prepared(Kind::CopyOut { query: Box::new(PreparedStatement { text: text.clone(), kind, needs }), options }),
            None => Ok(PreparedStatement { text, kind, needs }),
        }
    }

    /// DataFusion's logical plan of a parsed statement, its calls of
    /// `current_setting` and `set_config` evaluated first.
    async fn plan(&self, statement: &Statement) -> FoamResult<LogicalPlan> {
        match self.plan_once(statement, false).await? {
            // A name a wildcard brings in repeats one of the other items
            // (`SELECT *, a`): planned again with every item's name marked
            // unique (`select_names.rs`); the first error stands if that fails.
            Err(error) if crate::frontend::select_names::is_repeated_name_error(&error) => {
                self.plan_once(statement, true).await?.map_err(|_| FoamError::from(error))
            }
            planned => planned.map_err(FoamError::from),
        }
    }

    /// DataFusion's plan of `statement` with its setting calls evaluated
    /// (their errors are the outer ones), and with every select item's name
    /// marked unique when `mark_names`.
    async fn plan_once(&self, statement: &Statement, mark_names: bool) -> FoamResult<datafusion::error::Result<LogicalPlan>> {
        let mut statement = statement.clone();
        crate::frontend::setting_functions::evaluate(&mut statement, self)?;
        if mark_names {
            crate::frontend::select_names::mark_every_item(&mut statement);
        }
        let planned = self.ctx.state().statement_to_plan(datafusion_statement(statement)).await;
        Ok(planned.and_then(|plan| crate::frontend::bpchar_operands::rewrite(plan, &self.node.catalog.current())))
    }

    /// `SET`/`SHOW` of a setting DataFusion does not know: a client setting.
    fn is_client_setting(&self, statement: &Statement) -> bool {
        let name = match statement {
            Statement::Set(set) => set.to_string(),
            Statement::ShowVariable { variable } => variable.iter().map(|i| i.value.clone()).collect::<Vec<_>>().join("."),
            _ => return false,
        };
        let name = name.to_lowercase();
        !(name.contains("datafusion.") || name.contains("distributed."))
    }

    /// Executes a statement prepared earlier (extended protocol's Execute):
    /// the catalog may have changed since, so it is refreshed first. A read
    /// stops as `execute_all`'s do.
    pub async fn execute(
        &self,
        prepared: &PreparedStatement,
        params: Option<ParamValues>,
        cancel: Option<oneshot::Receiver<()>>,
    ) -> FoamResult<StatementOutput> {
        self.node.catalog.refresh().await?;
        self.run(prepared, params, &self.interrupt(cancel)).await
    }

    /// What stops this session's next statement: its `statement_timeout`, and
    /// the client's cancel request.
    fn interrupt(&self, cancel: Option<oneshot::Receiver<()>>) -> Interrupt {
        let timeout_ms = self
            .settings
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(STATEMENT_TIMEOUT)
            .and_then(|shown| parse_statement_timeout(shown).ok())
            .unwrap_or(0);
        Interrupt::new((timeout_ms > 0).then(|| std::time::Duration::from_millis(timeout_ms)), cancel)
    }

    /// Runs a statement if the session's transaction block admits it
    /// (transaction_block.rs), and moves the block on.
    async fn run(&self, prepared: &PreparedStatement, params: Option<ParamValues>, interrupt: &Interrupt) -> FoamResult<StatementOutput> {
        let class = prepared.class(&|name| self.block_ddl().created_since_savepoint(name));
        let admission = self.block().admit(class);
        if let Admission::Refuse { sqlstate, message } = admission {
            self.statement_failed();
            return Err(FoamError::Query { message, sqlstate });
        }
        if let Err(error) = self.check_privileges(&prepared.needs) {
            self.statement_failed();
            return Err(error);
        }
        let open = self.open.get();
        if let Some(open) = &open {
            open.next_statement();
            if class == StatementClass::Write && self.read_only.load(std::sync::atomic::Ordering::Relaxed) {
                self.statement_failed();
                return Err(FoamError::Query {
                    message: "cannot write in a read-only transaction".into(),
                    sqlstate: foam_common::SqlState::ReadOnlySqlTransaction,
                });
            }
        }
        let result = match class {
            StatementClass::Begin => self.begin(prepared).await,
            StatementClass::Savepoint | StatementClass::RollbackTo => self.savepoint_statement(prepared).await,
            StatementClass::Commit | StatementClass::Rollback => {
                if let Kind::Own(statement, _) = &prepared.kind
                    && let Err(error) = crate::frontend::transaction_block::check_end(statement)
                {
                    self.statement_failed();
                    return Err(error);
                }
                if *self.block() == Block::Idle {
                    self.notice("WARNING", foam_common::SqlState::NoActiveSqlTransaction, "there is no transaction in progress".into());
                }
                let result = self.end_transaction(class == StatementClass::Commit).await;
                // The block ends however the end went.
                let tag = self.block().after(class, result.is_ok());
                self.end_block_settings(class == StatementClass::Commit && result.is_ok() && tag != Some("ROLLBACK"));
                return result.map(|_| StatementOutput::Command { tag: tag.unwrap_or("ROLLBACK").into(), rows: None });
            }
            _ => {
                let mut result = self.run_admitted(prepared, params, interrupt).await;
                // A PREPARE that ran (DataFusion refuses a name taken) is
                // what an EXECUTE of its name runs: its needs go with it.
                if result.is_ok()
                    && let Kind::Plan { statement, .. } = &prepared.kind
                    && let Statement::Prepare { name, .. } = &**statement
                {
                    let entry = (name.to_string(), prepared.needs.clone());
                    self.sql_prepared.lock().unwrap_or_else(|p| p.into_inner()).insert(ddl::normalize_ident(&name.value, name.quote_style), entry);
                    // A command, as in PostgreSQL: no rows, the tag PREPARE.
                    result = Ok(StatementOutput::Command { tag: "PREPARE".into(), rows: None });
                }
                if result.is_ok()
                    && let Kind::Plan { statement, .. } = &prepared.kind
                    && let Statement::Deallocate { name, .. } = &**statement
                {
                    self.sql_prepared.lock().unwrap_or_else(|p| p.into_inner()).remove(&ddl::normalize_ident(&name.value, name.quote_style));
                    result = Ok(StatementOutput::Command { tag: "DEALLOCATE".into(), rows: None });
                }
                // Scans took the snapshot as they were planned; a statement
                // that takes none reads the newest rows, never an old snapshot.
                self.snapshot.set(None);
                result
            }
        };
        if result.is_err() {
            self.statement_failed();
        }
        let commit_tag = self.block().after(class, result.is_ok());
        match (commit_tag, result) {
            (Some(tag), Ok(StatementOutput::Command { .. })) => Ok(StatementOutput::Command { tag: tag.into(), rows: None }),
            (_, result) => result,
        }
    }

    /// BEGIN: opens the block's transaction (inside a block, nothing
    /// changes, as in PostgreSQL, which only warns).
    async fn begin(&self, prepared: &PreparedStatement) -> FoamResult<StatementOutput> {
        let Kind::Own(statement, _) = &prepared.kind else { return Err(FoamError::internal("BEGIN is not a statement of its own")) };
        let Statement::StartTransaction { modes, .. } = statement.as_ref() else {
            return Err(FoamError::internal("BEGIN is not a START TRANSACTION"));
        };
        let modes = crate::frontend::transaction_block::modes(modes)?;
        if *self.block() != Block::Idle {
            self.notice("WARNING", foam_common::SqlState::ActiveSqlTransaction, "there is already a transaction in progress".into());
        }
        if *self.block() == Block::Idle {
            *self.block_settings.lock().unwrap_or_else(|p| p.into_inner()) = BlockSettings { at_begin: Some(self.settings_now()), ..BlockSettings::default() };
            self.read_only.store(modes.read_only.unwrap_or(false), std::sync::atomic::Ordering::Relaxed);
            let transaction = Transaction::begin(self.node.clone());
            transaction.set_repeatable_read(modes.repeatable_read.unwrap_or(false))?;
            self.open.set(Some(transaction));
        }
        Ok(StatementOutput::Command { tag: "BEGIN".into(), rows: None })
    }

    /// SAVEPOINT, RELEASE SAVEPOINT and ROLLBACK TO SAVEPOINT, in a block.
    async fn savepoint_statement(&self, prepared: &PreparedStatement) -> FoamResult<StatementOutput> {
        let command = |tag: &str| Ok(StatementOutput::Command { tag: tag.into(), rows: None });
        let Kind::Own(statement, _) = &prepared.kind else { return Err(FoamError::internal("a savepoint is not a statement of its own")) };
        // A failed block without savepoints has ended its transaction: it has
        // no savepoint to go back to.
        let open = self.open.get().ok_or_else(|| FoamError::Query {
            message: "savepoint does not exist".into(),
            sqlstate: foam_common::SqlState::InvalidSavepointSpecification,
        })?;
        let name = |ident: &datafusion::sql::sqlparser::ast::Ident| ddl::normalize_ident(&ident.value, ident.quote_style);
        match statement.as_ref() {
            Statement::Savepoint { name: ident } => {
                open.savepoint(&name(ident));
                self.block_ddl().savepoint(&name(ident));
                let now = self.settings_now();
                let mut block_settings = self.block_settings.lock().unwrap_or_else(|p| p.into_inner());
                let local = block_settings.local.clone();
                block_settings.savepoints.push((name(ident), now, local));
                command("SAVEPOINT")
            }
            Statement::ReleaseSavepoint { name: ident } => {
                open.release(&name(ident))?;
                self.block_ddl().release(&name(ident));
                // It and every savepoint after it are gone; settings stay.
                let mut block_settings = self.block_settings.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(at) = block_settings.savepoints.iter().rposition(|(n, ..)| *n == name(ident)) {
                    block_settings.savepoints.truncate(at);
                }
                command("RELEASE")
            }
            Statement::Rollback { savepoint: Some(ident), .. } => {
                open.rollback_to(&name(ident)).await?;
                let undone = self.block_ddl().rollback_to(&name(ident));
                undone.undo(&self.node).await;
                // The savepoint stays; those after it are gone, and so are
                // the settings made since it.
                let back = {
                    let mut block_settings = self.block_settings.lock().unwrap_or_else(|p| p.into_inner());
                    let at = block_settings.savepoints.iter().rposition(|(n, ..)| *n == name(ident));
                    at.map(|at| {
                        block_settings.savepoints.truncate(at + 1);
                        let (_, found, local) = block_settings.savepoints[at].clone();
                        block_settings.local = local;
                        found
                    })
                };
                if let Some(found) = back {
                    self.put_back(found);
                }
                // Tagged ROLLBACK as PostgreSQL does; named apart so the
                // protocol layer does not report the block as ended.
                command(ROLLBACK_TO_TAG)
            }
            other => Err(FoamError::internal(format!("not a savepoint statement: {other}"))),
        }
    }

    /// COMMIT or ROLLBACK of the block's transaction; a failed block's
    /// transaction was aborted when it failed. Outside a block, nothing to
    /// do (PostgreSQL warns).
    async fn end_transaction(&self, commit: bool) -> FoamResult<()> {
        let committing = commit && *self.block() == Block::InBlock;
        let ddl = std::mem::take(&mut *self.block_ddl());
        let result = match self.open.set(None) {
            None => Ok(()),
            Some(open) if committing => open.commit().await,
            Some(open) => {
                open.abort().await;
                Ok(())
            }
        };
        self.cursors.end_block().await;
        // The block's DDL goes as its rows went.
        if committing && result.is_ok() {
            ddl.commit(&self.node).await;
        } else {
            ddl.undo(&self.node).await;
        }
        result
    }

    fn block_ddl(&self) -> std::sync::MutexGuard<'_, crate::frontend::block_ddl::BlockDdl> {
        self.block_ddl.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Executes a statement against the catalog this node has.
    async fn run_admitted(&self, prepared: &PreparedStatement, params: Option<ParamValues>, interrupt: &Interrupt) -> FoamResult<StatementOutput> {
        match &prepared.kind {
            Kind::Empty => Ok(StatementOutput::Command { tag: String::new(), rows: None }),
            Kind::Plan { statement, plan, write, catalog_version, returning, .. } => {
                let is_write = write.is_some();
                let mut retries = 0;
                loop {
                    self.take_snapshot().await?;
                    let planned_with = self.node.catalog.current();
                    let plan = if planned_with.version == *catalog_version && retries == 0 {
                        plan.clone()
                    } else {
                        self.plan(statement).await?
                    };
                    let bound = bind(plan, params.clone())?;
                    let returning = match returning {
                        Some(returning) => {
                            let plan = if planned_with.version == *catalog_version && retries == 0 {
                                returning.plan.clone()
                            } else {
                                self.plan(&returning.returning.query).await?
                            };
                            Some((bind(plan, params.clone())?, returning.chars.as_slice()))
                        }
                        None => None,
                    };
                    let result = if let Some(PlanWrite::Modify(modify)) = write {
                        self.run_modify(modify, bound, returning).await
                    } else if let Some(returning) = returning {
                        self.run_insert_returning(bound, returning).await
                    } else if is_write {
                        self.run_insert(bound).await
                    } else {
                        interrupt
                            .guard(self.run_query(bound, &planned_with))
                            .await
                            .map(|output| match output {
                                StatementOutput::Rows { schema, stream } => {
                                    StatementOutput::Rows { schema, stream: interrupt.guard_stream(stream) }
                                }
                                other => other,
                            })
                    };
                    // A write in a block may have staged some rows under the
                    // block's transaction: running it again would stage them twice.
                    let retry = !(is_write && self.open.get().is_some());
                    // An UPDATE or DELETE on its own whose rows another
                    // transaction changed first (40001) reads them again.
                    let changed_under_it = matches!(write, Some(PlanWrite::Modify(_)))
                        && error_is(&result, foam_common::SqlState::SerializationFailure)
                        && retries < STATEMENT_RETRIES_MAX;
                    let error = match result {
                        Err(error) if retry && (changed_under_it || self.worth_retrying(&error, &planned_with, is_write, retries).await) => error,
                        result => return result,
                    };
                    tracing::info!(%error, retries, "the statement failed as the cluster changed under it; running it again on the new placement");
                    let backoff = STATEMENT_RETRY_BACKOFF_MS << retries.min(5);
                    tokio::time::sleep(std::time::Duration::from_millis(backoff)).await;
                    retries += 1;
                }
            }
            Kind::Own(statement, _) if matches!(**statement, Statement::Declare { .. } | Statement::Fetch { .. } | Statement::Close { .. }) => {
                interrupt.guard(Box::pin(self.cursor_statement(statement))).await
            }
            Kind::Own(statement, distribution) => {
                // Those that read rows; SET and SHOW must not need the clock.
                if matches!(**statement, Statement::CreateTable(_) | Statement::Truncate(_) | Statement::Explain { analyze: true, .. }) {
                    self.take_snapshot().await?;
                }
                self.execute_own(statement, distribution).await
            }
            Kind::Catalog { command, tag } => {
                self.node.catalog.apply(command.clone()).await?;
                Ok(StatementOutput::Command { tag: tag.to_string(), rows: None })
            }
            Kind::CopyOut { query, options } => match Box::pin(self.run_admitted(query, params, interrupt)).await? {
                StatementOutput::Rows { schema, mut stream } => {
                    // Once COPY data flows, an error can only cut it short: one
                    // in the first batch (most are) is reported cleanly instead.
                    let first = stream.next().await.transpose().map_err(FoamError::from)?;
                    let stream = futures::stream::iter(first.map(Ok)).chain(stream);
                    let stream = Box::pin(RecordBatchStreamAdapter::new(schema.clone(), stream));
                    Ok(StatementOutput::CopyOut { schema, stream, options: options.clone() })
                }
                _ => Err(FoamError::internal("COPY ... TO's query did not return rows")),
            },
            Kind::AddKey { table, if_exists, key } => {
                let exists = self.node.catalog.current().tables.contains_key(table);
                if exists || !if_exists {
                    crate::write::keys::add_unique_key(&self.node, table.clone(), key.clone()).await?;
                }
                Ok(StatementOutput::Command { tag: "ALTER TABLE".into(), rows: None })
            }
            Kind::AddCheck(add) => {
                let Some(def) = self.node.catalog.current().tables.get(&add.table).cloned() else {
                    return match add.if_exists {
                        true => Ok(StatementOutput::Command { tag: "ALTER TABLE".into(), rows: None }),
                        false => Err(FoamError::UndefinedTable { name: add.table.clone() }),
                    };
                };
                self.add_check(def, add.name.clone(), &add.expr, add.not_valid).await?;
                Ok(StatementOutput::Command { tag: "ALTER TABLE".into(), rows: None })
            }
            Kind::Maintenance { tag, tables } => {
                let catalog = self.node.catalog.current();
                for table in tables {
                    catalog.table(table)?;
                }
                Ok(StatementOutput::Command { tag: tag.to_string(), rows: None })
            }
            Kind::Checkpoint => {
                self.checkpoint().await?;
                Ok(StatementOutput::Command { tag: "CHECKPOINT".into(), rows: None })
            }
        }
    }

    /// Sets the snapshot the statement about to run reads at (MVCC): the
    /// block's own under REPEATABLE READ, else a new one from the cluster
    /// clock, so it sees every transaction committed before it started.
    async fn take_snapshot(&self) -> FoamResult<()> {
        let open = self.open.get();
        let ts = match open.as_ref().and_then(|open| open.kept_snapshot()) {
            Some(kept) => kept,
            None => {
                let fresh = self.node.catalog.timestamp().await?;
                open.map_or(fresh, |open| open.statement_snapshot(fresh))
            }
        };
        self.snapshot.set(Some(ts));
        Ok(())
    }

    /// A statement failed without any of it taking effect (a write aborts
    /// everywhere; a read has sent no row): worth running again if the
    /// cluster changed under it. A write refused by a copy being switched in
    /// (40001) waits for the switch and is retried up to
    /// [`STATEMENT_RETRIES_MAX`] times; any other failure is retried once if
    /// the catalog leader, asked now, marked a node down or a copy out of service.
    async fn worth_retrying(&self, error: &FoamError, planned_with: &foam_catalog::Catalog, is_write: bool, retries: u32) -> bool {
        // A refusal from a peer arrives as `Remote`, with its code.
        if is_write && error.is_placement_change() {
            return retries < STATEMENT_RETRIES_MAX;
        }
        if retries > 0 || error.sqlstate().is_the_statements_fault() {
            return false;
        }
        match self.node.catalog.check_nodes().await {
            Ok(catalog) => catalog.version != planned_with.version,
            Err(_) => false,
        }
    }

    /// Runs an UPDATE or DELETE: `plan` reads the rows it changes (old
    /// rows, then for UPDATE their new versions), which the write path deletes
    /// and adds as one transaction (or as a statement of the session's block).
    async fn run_modify(
        &self,
        modify: &crate::frontend::modify::Modify,
        plan: LogicalPlan,
        returning: Option<(LogicalPlan, &[Option<u32>])>,
    ) -> FoamResult<StatementOutput> {
        let restart = matches!(modify, crate::frontend::modify::Modify::Truncate { restart: true, .. });
        if restart {
            self.refuse_restart_in_block()?;
        }
        let output = self.run_modify_in(modify, plan, self.open.get(), returning).await?;
        if restart {
            self.restart_identity(&[modify.table()]).await?;
        }
        Ok(output)
    }

    /// `TRUNCATE ... RESTART IDENTITY` sets sequences, which a block's
    /// ROLLBACK could not undo.
    fn refuse_restart_in_block(&self) -> FoamResult<()> {
        match self.open.get() {
            Some(_) => Err(FoamError::FeatureNotSupported { feature: "TRUNCATE ... RESTART IDENTITY inside a transaction block".into() }),
            None => Ok(()),
        }
    }

    /// The sequences of `tables`' SERIAL and identity columns start again.
    async fn restart_identity(&self, tables: &[&str]) -> FoamResult<()> {
        let catalog = self.node.catalog.current();
        let owned = catalog.sequences.values().filter(|s| s.owned_by.as_ref().is_some_and(|(t, _)| tables.contains(&t.as_str())));
        for sequence in owned {
            let command = CatalogCommand::SetSequence { name: sequence.name.clone(), value: sequence.start, is_called: false };
            self.node.catalog.apply(command).await?;
        }
        Ok(())
    }

    /// [`Self::run_modify`] as a statement of `transaction` (committed by
    /// its owner), or on its own when `None`; with `returning`, the rows it
    /// deleted (DELETE) or wrote (UPDATE, upsert) are kept for that query.
    async fn run_modify_in(
        &self,
        modify: &crate::frontend::modify::Modify,
        plan: LogicalPlan,
        transaction: Option<Arc<Transaction>>,
        returning: Option<(LogicalPlan, &[Option<u32>])>,
    ) -> FoamResult<StatementOutput> {
        use crate::frontend::modify::Modify;
        let mut returned_rows = Vec::new();
        let keep = returning.is_some();
        let table = self.node.catalog.current().table(modify.table())?.clone();
        let schema = table.arrow_schema();
        let width = table.columns.len();
        let frame = self.ctx.execute_logical_plan(plan).await.map_err(FoamError::from)?;
        let mut rows = crate::exec::panic_safe::panic_safe(frame.execute_stream().await.map_err(FoamError::from)?);
        let checks = match modify {
            Modify::Update { .. } | Modify::Upsert(_) => self.table_checks(&table).await?,
            _ => None,
        };
        let mut writer = TableWriter::begin_in(self.node.clone(), table.clone(), transaction, checks.clone())?;
        if let crate::frontend::modify::Modify::Upsert(upsert) = modify {
            // Proposed rows are decided in order: all of them first.
            let written = async {
                let mut batches = Vec::new();
                while let Some(batch) = rows.next().await {
                    batches.push(batch.map_err(FoamError::from)?);
                }
                let changes = crate::frontend::upsert::changes(upsert, &table, &batches, checks.as_deref())?;
                if let Some(deletes) = changes.deletes {
                    writer.write_deletes(deletes).await?;
                }
                for inserts in changes.inserts {
                    let inserts = crate::write::cast_to(&schema, inserts)?;
                    if keep {
                        returned_rows.push(inserts.clone());
                    }
                    writer.write(inserts).await?;
                }
                Ok::<_, FoamError>(changes.count)
            }
            .await;
            let output = match (written, returning) {
                (Ok(_), Some((plan, chars))) => self.returned(modify.tag(), plan, returned_rows, chars).await,
                (written, _) => written.map(|count| StatementOutput::Command { tag: modify.tag().into(), rows: Some(count) }),
            };
            return settle(writer, output).await;
        }
        while let Some(batch) = rows.next().await {
            let written = async {
                let batch = batch.map_err(FoamError::from)?;
                let project = |columns: std::ops::Range<usize>| {
                    batch.project(&columns.collect::<Vec<_>>()).map_err(|e| FoamError::internal(format!("rows of an {}: {e}", modify.tag())))
                };
                let old = project(0..width)?;
                if keep && !matches!(modify, Modify::Update { .. }) {
                    returned_rows.push(old.clone());
                }
                writer.write_deletes(old).await?;
                if let Modify::Update { .. } = modify {
                    let new = crate::write::cast_to(&schema, project(width..2 * width)?)?;
                    if keep {
                        returned_rows.push(new.clone());
                    }
                    writer.write(new).await?;
                }
                Ok::<_, FoamError>(())
            }
            .await;
            if let Err(error) = written {
                writer.abort().await;
                return Err(error);
            }
        }
        let output = match returning {
            // Read before the commit: an error in RETURNING writes nothing.
            Some((plan, chars)) => self.returned(modify.tag(), plan, returned_rows, chars).await,
            None => {
                // PostgreSQL's TRUNCATE reports no row count.
                let rows = (!matches!(modify, Modify::Truncate { .. })).then_some(writer.deleted());
                Ok(StatementOutput::Command { tag: modify.tag().into(), rows })
            }
        };
        settle(writer, output).await
    }

    /// An INSERT with RETURNING: `plan` (DataFusion's INSERT) is run up to
    /// the rows it inserts, which are written here, as its sink would, and
    /// read by the RETURNING query before they commit.
    async fn run_insert_returning(&self, plan: LogicalPlan, (returning, chars): (LogicalPlan, &[Option<u32>])) -> FoamResult<StatementOutput> {
        let LogicalPlan::Dml(insert) = plan else { return Err(FoamError::internal("an INSERT ... RETURNING did not plan as an INSERT")) };
        let table = self.node.catalog.current().table(insert.table_name.table())?.clone();
        let schema = table.arrow_schema();
        let frame = self.ctx.execute_logical_plan(Arc::unwrap_or_clone(insert.input)).await.map_err(FoamError::from)?;
        let mut rows = crate::exec::panic_safe::panic_safe(frame.execute_stream().await.map_err(FoamError::from)?);
        let checks = self.table_checks(&table).await?;
        let mut writer = TableWriter::begin_in(self.node.clone(), table, self.open.get(), checks)?;
        let mut inserted = Vec::new();
        let written = async {
            while let Some(batch) = rows.next().await {
                let batch = crate::write::cast_to(&schema, batch.map_err(FoamError::from)?)?;
                inserted.push(batch.clone());
                writer.write(batch).await?;
            }
            self.returned("INSERT", returning, inserted, chars).await
        }
        .await;
        settle(writer, written).await
    }

    /// The RETURNING query `plan` run over the rows a write (of command
    /// `tag`) changed, all read now, before the write commits.
    async fn returned(&self, tag: &'static str, plan: LogicalPlan, rows: Vec<RecordBatch>, chars: &[Option<u32>]) -> FoamResult<StatementOutput> {
        let plan = crate::frontend::returning::over_rows(plan, rows)?;
        self.pass_execution_options()?;
        let frame = self.ctx.execute_logical_plan(plan).await.map_err(FoamError::from)?;
        let physical = frame.clone().create_physical_plan().await.map_err(FoamError::from)?;
        let schema = physical.schema();
        let mut batches = datafusion::physical_plan::collect(physical, Arc::new(frame.task_ctx())).await.map_err(FoamError::from)?;
        let schema = match self.session_zone().and_then(|zone| crate::frontend::time_zone::session_schema(&schema, &zone)) {
            Some(zoned) => {
                batches = batches.into_iter().map(|batch| crate::frontend::time_zone::in_session_zone(&zoned, batch)).collect::<Result<_, _>>().map_err(|e| FoamError::internal(e.to_string()))?;
                zoned
            }
            None => schema,
        };
        let schema = crate::frontend::char_columns::mark(&schema, chars).unwrap_or(schema);
        let stream = futures::stream::iter(batches.into_iter().map(Ok)).boxed();
        Ok(StatementOutput::Returned { tag, schema: schema.clone(), stream: Box::pin(RecordBatchStreamAdapter::new(schema, stream)) })
    }

    /// TRUNCATE of several tables: each table's rows deleted as one
    /// TRUNCATE of it does, all in one transaction (the block's, or one of
    /// the statement's own), so every table is emptied or none is.
    async fn truncate_tables(&self, truncate: &datafusion::sql::sqlparser::ast::Truncate) -> FoamResult<StatementOutput> {
        let catalog = self.node.catalog.current();
        // One single-table TRUNCATE per table, each table once.
        let mut each: Vec<(Statement, crate::frontend::modify::Modify)> = Vec::new();
        for target in &truncate.table_names {
            let one = Statement::Truncate(datafusion::sql::sqlparser::ast::Truncate { table_names: vec![target.clone()], ..truncate.clone() });
            let Some((query, modify)) = crate::frontend::modify::as_query(&one, &catalog)? else {
                return Err(FoamError::internal("TRUNCATE is not a modification"));
            };
            if !each.iter().any(|(_, m)| m.table() == modify.table()) {
                each.push((query, modify));
            }
        }
        let restart = matches!(truncate.identity, Some(datafusion::sql::sqlparser::ast::TruncateIdentityOption::Restart));
        if restart {
            self.refuse_restart_in_block()?;
        }
        let block = self.open.get();
        let transaction = block.clone().unwrap_or_else(|| {
            let own = Transaction::begin(self.node.clone());
            own.next_statement();
            own
        });
        for (query, modify) in &each {
            let done = async { self.run_modify_in(modify, self.plan(query).await?, Some(transaction.clone()), None).await }.await;
            if let Err(error) = done {
                if block.is_none() {
                    transaction.abort().await;
                }
                return Err(error);
            }
        }
        if block.is_none() {
            transaction.commit().await?;
        }
        if restart {
            self.restart_identity(&each.iter().map(|(_, m)| m.table()).collect::<Vec<_>>()).await?;
        }
        Ok(StatementOutput::Command { tag: "TRUNCATE TABLE".into(), rows: None })
    }

    async fn run_insert(&self, plan: LogicalPlan) -> FoamResult<StatementOutput> {
        self.plan_sink_checks(&plan).await?;
        let frame = self.ctx.execute_logical_plan(plan).await.map_err(FoamError::from)?;
        let batches = frame.collect().await.map_err(FoamError::from)?;
        let rows = batches
            .first()
            .and_then(|b| b.column(0).as_any().downcast_ref::<UInt64Array>().map(|a| a.value(0)))
            .unwrap_or(0);
        Ok(StatementOutput::Command { tag: "INSERT".into(), rows: Some(rows) })
    }

    /// Runs a query up to its first batch, so a node failing before any row
    /// reached the client can still be retried. A peer that stops answering
    /// (stopped, not crashed) is noticed when the failure detector marks it down.
    async fn run_query(&self, plan: LogicalPlan, planned_with: &foam_catalog::Catalog) -> FoamResult<StatementOutput> {
        let running = self.node.traffic.query_started();
        self.pass_execution_options()?;
        let char_widths = crate::frontend::char_columns::widths(&plan, planned_with);
        let frame = self.ctx.execute_logical_plan(plan).await.map_err(FoamError::from)?;
        let physical = frame.clone().create_physical_plan().await.map_err(FoamError::from)?;
        // The rows' own types: the logical plan's schema is the one before
        // type coercion, so a UNION of INT and rank() (coerced to
        // DECIMAL(20,0)) was described to the client as int4 and its
        // values failed to encode.
        let schema = physical.schema();
        self.apply_exchange_batch_bytes(&physical)?;
        let task_ctx = Arc::new(frame.task_ctx());
        let mut stream = crate::exec::panic_safe::panic_safe(datafusion::physical_plan::execute_stream(physical, task_ctx).map_err(FoamError::from)?);
        let first = {
            let mut watch = tokio::time::interval(std::time::Duration::from_millis(QUERY_NODE_WATCH_MS));
            watch.tick().await;
            loop {
                tokio::select! {
                    batch = stream.next() => break batch,
                    _ = watch.tick() => {
                        if let Some(node) = self.newly_down(planned_with).await {
                            return Err(node);
                        }
                    }
                }
            }
        };
        let first = match first {
            Some(Ok(batch)) => Some(Ok(batch)),
            Some(Err(error)) => return Err(FoamError::from(error)),
            None => None,
        };
        // CHAR(n) columns leave padded, described as such; timestamptz
        // columns in the session's TimeZone.
        let zoned = self.session_zone().and_then(|zone| crate::frontend::time_zone::session_schema(&schema, &zone));
        let schema = zoned.clone().unwrap_or(schema);
        let chars = crate::frontend::char_columns::mark(&schema, &char_widths);
        let schema = chars.clone().unwrap_or(schema);
        // The query counts as active until its rows are consumed or dropped.
        let stream = futures::stream::iter(first).chain(stream).map(move |batch| {
            let _ = &running;
            let batch = match &zoned {
                Some(zoned) => batch.and_then(|batch| crate::frontend::time_zone::in_session_zone(zoned, batch).map_err(Into::into)),
                None => batch,
            };
            match &chars {
                Some(marked) => batch.and_then(|batch| crate::frontend::char_columns::pad(marked, batch).map_err(Into::into)),
                None => batch,
            }
        });
        let stream = Box::pin(datafusion::physical_plan::stream::RecordBatchStreamAdapter::new(schema.clone(), stream));
        Ok(StatementOutput::Rows { schema, stream })
    }

    /// Sends this session's changed `datafusion.execution` settings with the
    /// next query's tasks (see `distributed::EXECUTION_OPTIONS_HEADER`).
    fn pass_execution_options(&self) -> FoamResult<()> {
        let state = self.ctx.state_ref();
        let mut state = state.write();
        crate::distributed::pass_execution_options(state.config_mut()).map_err(FoamError::from)
    }

    /// A node that was up when the query was planned and is down now.
    async fn newly_down(&self, planned_with: &foam_catalog::Catalog) -> Option<FoamError> {
        let catalog = self.node.catalog.refresh().await.ok()?;
        let down = catalog.nodes.values().find(|n| {
            n.state == foam_catalog::model::NodeState::Down
                && planned_with.nodes.get(&n.id).is_some_and(|before| before.state == foam_catalog::model::NodeState::Up)
        })?;
        Some(FoamError::NodeUnavailable { node_id: down.id, addr: down.node_addr.clone(), message: "marked down while the query ran".into() })
    }

    /// DECLARE, FETCH and CLOSE of a cursor (`cursors.rs`).
    async fn cursor_statement(&self, statement: &Statement) -> FoamResult<StatementOutput> {
        use datafusion::sql::sqlparser::ast::{CloseCursor, DeclareType};
        let command = |tag: &str| Ok(StatementOutput::Command { tag: tag.into(), rows: None });
        let name = |ident: &datafusion::sql::sqlparser::ast::Ident| ddl::normalize_ident(&ident.value, ident.quote_style);
        match statement {
            Statement::Declare { stmts } => {
                let [declare] = stmts.as_slice() else { return Err(FoamError::FeatureNotSupported { feature: "DECLARE of several cursors".into() }) };
                let (Some(query), Some(DeclareType::Cursor), [ident]) = (&declare.for_query, &declare.declare_type, declare.names.as_slice()) else {
                    return Err(FoamError::FeatureNotSupported { feature: format!("{statement}") });
                };
                if declare.scroll == Some(true) {
                    return Err(FoamError::FeatureNotSupported { feature: "SCROLL cursors (FoamDB cursors move forward only)".into() });
                }
                let hold = declare.hold == Some(true);
                if !hold && self.open.get().is_none() {
                    return Err(FoamError::Query {
                        message: "DECLARE CURSOR can only be used in transaction blocks".into(),
                        sqlstate: foam_common::SqlState::NoActiveSqlTransaction,
                    });
                }
                let prepared = self.prepare(&query.to_string()).await?;
                self.check_privileges(&prepared.needs)?;
                // FETCH guards its own reading; the query outlives DECLARE.
                let unguarded = Interrupt::new(None, None);
                match Box::pin(self.run_admitted(&prepared, None, &unguarded)).await? {
                    StatementOutput::Rows { schema, stream } => self.cursors.declare(name(ident), schema, stream, hold).await?,
                    _ => {
                        return Err(FoamError::Query { message: "cursor query must be a SELECT".into(), sqlstate: foam_common::SqlState::SyntaxError });
                    }
                }
                command("DECLARE CURSOR")
            }
            Statement::Fetch { name: ident, direction, into: None, .. } => {
                let count = crate::frontend::cursors::fetch_count(direction)?;
                let (schema, stream) = self.cursors.fetch(&name(ident), count).await?;
                Ok(StatementOutput::Rows { schema, stream })
            }
            Statement::Close { cursor: CloseCursor::All } => {
                self.cursors.close(None).await?;
                command("CLOSE CURSOR ALL")
            }
            Statement::Close { cursor: CloseCursor::Specific { name: ident } } => {
                self.cursors.close(Some(&name(ident))).await?;
                command("CLOSE CURSOR")
            }
            other => Err(FoamError::FeatureNotSupported { feature: format!("{other}") }),
        }
    }

    /// The columns of open cursor `name`, for a Describe of its portal.
    pub async fn cursor_schema(&self, name: &str) -> Option<SchemaRef> {
        self.cursors.schema(name).await
    }

    /// `ALTER SEQUENCE` as the catalog command it is.
    fn alter_sequence(&self, name: String, if_exists: bool, change: crate::frontend::sequence_ddl::SequenceChange) -> FoamResult<Kind> {
        use crate::frontend::sequence_ddl::SequenceChange;
        let catalog = self.node.catalog.current();
        if catalog.tables.contains_key(&name) || catalog.views.contains_key(&name) {
            return Err(FoamError::Query { message: format!("\"{name}\" is not a sequence"), sqlstate: foam_common::SqlState::WrongObjectType });
        }
        if !catalog.sequences.contains_key(&name) {
            if if_exists {
                return Ok(Kind::Maintenance { tag: "ALTER SEQUENCE", tables: Vec::new() });
            }
            return Err(FoamError::Query { message: format!("relation \"{name}\" does not exist"), sqlstate: foam_common::SqlState::UndefinedTable });
        }
        let command = match change {
            SequenceChange::OwnedBy(owned_by) => CatalogCommand::SetSequenceOwnedBy { name, owned_by },
            SequenceChange::OwnerTo(owner) => {
                CatalogCommand::AlterOwner { relation: name, owner: ddl::owner_named(&owner, &self.current_user(), &self.session_user) }
            }
            SequenceChange::Alter(alter) => CatalogCommand::AlterSequence { name, alter },
        };
        Ok(Kind::Catalog { command, tag: "ALTER SEQUENCE" })
    }

    /// `ALTER TABLE ... ALTER COLUMN c SET DEFAULT | DROP DEFAULT | ADD
    /// GENERATED ... AS IDENTITY` as the catalog command it is, the default
    /// checked as CREATE TABLE checks one; `None` for another statement.
    /// `sequence` names an identity column's sequence (`SEQUENCE NAME`).
    async fn alter_column(&self, statement: &Statement, sequence: Option<String>) -> FoamResult<Option<Kind>> {
        use crate::frontend::ddl::ColumnChange;
        let Some((table, if_exists, column, change)) = ddl::alter_column(statement)? else { return Ok(None) };
        let catalog = self.node.catalog.current();
        let Some(def) = catalog.tables.get(&table) else {
            if if_exists {
                return Ok(Some(Kind::Maintenance { tag: "ALTER TABLE", tables: Vec::new() }));
            }
            return Err(FoamError::UndefinedTable { name: table });
        };
        let Some(column_def) = def.columns.iter().find(|c| c.name == column) else {
            return Err(FoamError::UndefinedColumn { table, column });
        };
        // The owner's alone, before a default is planned or run.
        self.check_privileges(&[Need::Owner(table.clone())])?;
        let command = match change {
            ColumnChange::SetDefault(default) => {
                let default = self.checked_default(&catalog, foam_catalog::model::ColumnDef { default: Some(default), ..column_def.clone() }, &[]).await?;
                CatalogCommand::SetColumnDefault { table, column, default: default.default }
            }
            ColumnChange::DropDefault => CatalogCommand::SetColumnDefault { table, column, default: None },
            ColumnChange::AddIdentity { identity, options } => {
                let mut new = crate::frontend::sequence_ddl::column_sequence(&table, &column, &column_def.sql_type, &options)?;
                new.name = match sequence {
                    Some(name) => name,
                    None => crate::frontend::sequence_ddl::free_name(&table, &column, |name| catalog.relation_exists(name)),
                };
                check_not_system_table(&new.name)?;
                CatalogCommand::AddIdentity { table, column, identity, sequence: new }
            }
        };
        Ok(Some(Kind::Catalog { command, tag: "ALTER TABLE" }))
    }

    /// `column` with its default checked (see [`Self::check_default`]) and,
    /// where it is just `nextval('s')`, written as PostgreSQL prints it: the
    /// sequence must exist, or be among `coming` (made with the table).
    async fn checked_default(
        &self,
        catalog: &foam_catalog::Catalog,
        mut column: foam_catalog::model::ColumnDef,
        coming: &[foam_catalog::sequences::SequenceDef],
    ) -> FoamResult<foam_catalog::model::ColumnDef> {
        self.check_default(&column).await?;
        if let Some(sequence) = column.default.as_deref().and_then(crate::frontend::sequence_ddl::nextval_of) {
            if !catalog.sequences.contains_key(&sequence) && !coming.iter().any(|s| s.name == sequence) {
                return Err(FoamError::Query { message: format!("relation \"{sequence}\" does not exist"), sqlstate: foam_common::SqlState::UndefinedTable });
            }
            column.default = Some(crate::frontend::sequence_ddl::nextval_default(&sequence));
        }
        Ok(column)
    }

    /// The plan of one row holding a column default cast to the column's type.
    async fn default_plan(&self, default: &str, sql_type: &foam_catalog::SqlType) -> FoamResult<LogicalPlan> {
        let mut probe = crate::frontend::modify::parse_query(&format!("SELECT CAST(({default}) AS {})", sql_type.cast_name()))?;
        crate::frontend::numeric_literals::rewrite(&mut probe);
        crate::frontend::datetime_literals::rewrite(&mut probe)?;
        crate::frontend::char_casts::rewrite(&mut probe);
        crate::frontend::sequence_ddl::names_as_text(&mut probe);
        self.plan(&probe).await
    }

    /// `ALTER TABLE ... ADD CHECK`, as ADD PRIMARY KEY (`write/keys.rs`):
    /// the constraint goes into the catalog first, marked validating, so
    /// every write planned from then on checks it; the copies then refuse
    /// the writes planned before and wait for those already prepared
    /// (`checks::fence_every_copy`); then the stored rows are read. The
    /// constraint is kept when none breaks it, else dropped again (23514).
    async fn add_check(&self, table: foam_catalog::TableDef, name: Option<String>, expr: &Expr, not_valid: bool) -> FoamResult<()> {
        use crate::frontend::check_constraints;
        if not_valid {
            return Err(FoamError::FeatureNotSupported { feature: "ADD CONSTRAINT ... NOT VALID".into() });
        }
        // A generated name avoids every constraint name of the schema, as in PostgreSQL.
        let names_in_use: Vec<String> = self.node.catalog.current().tables.values().flat_map(check_constraints::taken_names).collect();
        let check = check_constraints::check_def(&table.name, &table.columns, name, expr, &names_in_use)?;
        // Refused now (a type, a column) before the catalog changes.
        self.plan_checks(&table.name, &table.columns, vec![check.clone()], true).await?;
        let add = CatalogCommand::AddCheck { table: table.name.clone(), check: check.clone() };
        let (catalog, _) = self.node.catalog.apply(add).await?;
        let checked = async {
            crate::write::checks::fence_every_copy(&self.node, &catalog, &table.name).await?;
            self.take_snapshot().await?;
            let broken = self.rows_breaking(&table.name, &check.expr).await;
            self.snapshot.set(None);
            match broken? {
                false => Ok(()),
                true => Err(FoamError::Query {
                    message: format!("check constraint \"{}\" of relation \"{}\" is violated by some row", check.name, table.name),
                    sqlstate: foam_common::SqlState::CheckViolation,
                }),
            }
        }
        .await;
        let finish = CatalogCommand::FinishCheck { table: table.name.clone(), name: check.name.clone(), keep: checked.is_ok() };
        let finished = self.node.catalog.apply(finish).await;
        checked?;
        finished.map(|_| ())
    }

    /// Whether a stored row of `table` makes `expr` false.
    async fn rows_breaking(&self, table: &str, expr: &str) -> FoamResult<bool> {
        let quoted = format!("\"{}\"", table.replace('"', "\"\""));
        let mut query = crate::frontend::modify::parse_query(&format!("SELECT 1 FROM {quoted} WHERE NOT ({expr}) LIMIT 1"))?;
        rewrite_expressions(&mut query)?;
        let plan = self.plan(&query).await?;
        let batches = self.ctx.execute_logical_plan(plan).await.map_err(FoamError::from)?.collect().await.map_err(FoamError::from)?;
        Ok(batches.iter().any(|b| b.num_rows() > 0))
    }

    /// The CHECK constraints of the table an INSERT in `plan` writes, for
    /// the INSERT sink, which finds them in the session's config (any
    /// planned for an earlier statement are forgotten).
    async fn plan_sink_checks(&self, plan: &LogicalPlan) -> FoamResult<()> {
        let mut target = None;
        datafusion::common::tree_node::TreeNode::apply(plan, |node| {
            if let LogicalPlan::Dml(dml) = node
                && matches!(dml.op, datafusion::logical_expr::WriteOp::Insert(_))
            {
                target = Some(dml.table_name.table().to_string());
                return Ok(datafusion::common::tree_node::TreeNodeRecursion::Stop);
            }
            Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
        })?;
        let Some(name) = target else { return Ok(()) };
        let Ok(table) = self.node.catalog.current().table(&name).cloned() else { return Ok(()) };
        let checks = self.table_checks(&table).await?;
        self.checks.set(&table, checks);
        Ok(())
    }

    /// `table`'s CHECK constraints planned for a statement writing it;
    /// `None` for a table without any.
    async fn table_checks(&self, table: &foam_catalog::TableDef) -> FoamResult<Option<Arc<crate::write::checks::TableChecks>>> {
        if table.checks.is_empty() {
            return Ok(None);
        }
        Ok(Some(Arc::new(self.plan_checks(&table.name, &table.columns, table.checks.clone(), true).await?)))
    }

    /// The constraints `checks` of a table `name` with `columns`, planned as
    /// a query's select list over the table (`over_table`), or over a row of
    /// the columns' types for a table still being created, with the
    /// rewrites of any query; refused where PostgreSQL refuses them: not
    /// boolean (42804), an aggregate (42803), a window (42P20), a
    /// set-returning function (0A000), an unknown column (42703).
    async fn plan_checks(
        &self,
        name: &str,
        columns: &[foam_catalog::ColumnDef],
        checks: Vec<foam_catalog::model::CheckDef>,
        over_table: bool,
    ) -> FoamResult<crate::write::checks::TableChecks> {
        use crate::frontend::check_constraints::{probe_query, table_query};
        let exprs: Vec<&str> = checks.iter().map(|c| c.expr.as_str()).collect();
        let sql = if over_table { table_query(name, &exprs) } else { probe_query(name, columns, &exprs) };
        let mut probe = crate::frontend::modify::parse_query(&sql)?;
        rewrite_expressions(&mut probe)?;
        let plan = self.plan(&probe).await?;
        let refused = [
            (plan_holds(&plan, |node| matches!(node, LogicalPlan::Aggregate(_)))?, "aggregate functions are", foam_common::SqlState::GroupingError),
            (plan_holds(&plan, |node| matches!(node, LogicalPlan::Window(_)))?, "window functions are", foam_common::SqlState::WindowingError),
            (plan_holds(&plan, |node| matches!(node, LogicalPlan::Unnest(_)))?, "set-returning functions are", foam_common::SqlState::FeatureNotSupported),
        ];
        if let Some((_, what, sqlstate)) = refused.into_iter().find(|(found, _, _)| *found) {
            return Err(FoamError::Query { message: format!("{what} not allowed in check constraints (table \"{name}\")"), sqlstate });
        }
        let state = self.ctx.state_ref();
        let state = state.read();
        crate::write::checks::TableChecks::from_plan(name, columns.len(), checks, plan, &state)
    }

    /// A column's default is a value the column can take: it plans as a
    /// cast to the column's type, without aggregates or windows (42804 or
    /// 42803 where PostgreSQL refuses it as well).
    async fn check_default(&self, column: &foam_catalog::model::ColumnDef) -> FoamResult<()> {
        let Some(default) = &column.default else { return Ok(()) };
        let plan = self.default_plan(default, &column.sql_type).await.map_err(|error| FoamError::Query {
            message: format!("column \"{}\" is of type {} but its default {default} is not: {error}", column.name, column.sql_type.sql_name()),
            sqlstate: foam_common::SqlState::DatatypeMismatch,
        })?;
        let (grouped, volatile) = (plan_holds(&plan, |node| matches!(node, LogicalPlan::Aggregate(_) | LogicalPlan::Window(_)))?, is_volatile(&plan)?);
        if grouped {
            return Err(FoamError::Query {
                message: format!("aggregate and window functions are not allowed in the default of column \"{}\"", column.name),
                sqlstate: foam_common::SqlState::GroupingError,
            });
        }
        // Evaluated once, as PostgreSQL folds a constant default: `DEFAULT
        // 'abc'` for an integer is refused here, not at the first INSERT.
        // A volatile one (`nextval`, `setval`, `random()`) is not run.
        if !volatile {
            let frame = self.ctx.execute_logical_plan(plan).await.map_err(FoamError::from)?;
            frame.collect().await.map_err(FoamError::from)?;
        }
        Ok(())
    }

    /// The values COPY gives the columns of `table` its data leaves out
    /// (`filled` are those it has), one per column with a default: a
    /// sequence's values (`nextval('s')`, SERIAL), or a value evaluated
    /// once. Any other volatile default (one PostgreSQL evaluates per row,
    /// `random()`) is refused rather than repeated on every row.
    async fn copy_defaults(&self, table: &foam_catalog::TableDef, filled: &[usize]) -> FoamResult<Vec<(usize, crate::write::copy::ColumnFill)>> {
        let mut values = Vec::new();
        for (at, column) in table.columns.iter().enumerate() {
            let Some(default) = column.default.as_ref().filter(|_| !filled.contains(&at)) else { continue };
            if let Some(name) = crate::frontend::sequence_ddl::nextval_of(default) {
                // As INSERT: a SERIAL's sequence needs USAGE, an identity column's not.
                if column.identity.is_none() {
                    self.check_privileges(&[Need::Sequence { name: name.clone(), any_of: &[foam_catalog::privileges::Privilege::Usage, foam_catalog::privileges::Privilege::Update] }])?;
                }
                values.push((at, crate::write::copy::ColumnFill::Sequence { name, node: self.node.clone() }));
                continue;
            }
            let plan = self.default_plan(default, &column.sql_type).await?;
            if is_volatile(&plan)? {
                return Err(FoamError::FeatureNotSupported {
                    feature: format!("COPY that leaves out column \"{}\", whose default {default} is volatile (name the column, or INSERT)", column.name),
                });
            }
            let batches = self.ctx.execute_logical_plan(plan).await.map_err(FoamError::from)?.collect().await.map_err(FoamError::from)?;
            let value = match batches.iter().find(|b| b.num_rows() > 0) {
                Some(batch) => datafusion::common::ScalarValue::try_from_array(batch.column(0), 0).map_err(FoamError::from)?,
                None => return Err(FoamError::internal("a column default gave no row")),
            };
            values.push((at, crate::write::copy::ColumnFill::Value(value)));
        }
        Ok(values)
    }

    async fn execute_own(&self, statement: &Statement, distribution: &Option<foam_catalog::model::DistributionSpec>) -> FoamResult<StatementOutput> {
        let command = |tag: &str| Ok(StatementOutput::Command { tag: tag.into(), rows: None });
        match statement {
            Statement::CreateTable(_) => {
                let catalog = self.node.catalog.current();
                let names_in_use: Vec<String> = catalog.tables.values().flat_map(crate::frontend::check_constraints::taken_names).collect();
                let mut create = ddl::create_table_command(statement, distribution.clone(), &names_in_use)?;
                crate::frontend::sequence_ddl::choose_names(&mut create, |name| catalog.relation_exists(name));
                if let CatalogCommand::CreateTable { name, owner, columns, sequences, .. } = &mut create {
                    check_not_system_table(name)?;
                    *owner = Some(self.current_user());
                    // As PostgreSQL resolves `nextval('s'::regclass)` when the
                    // table is made: the sequence must exist (or come with it).
                    for column in columns.iter_mut() {
                        *column = self.checked_default(&catalog, column.clone(), sequences).await?;
                    }
                }
                if let CatalogCommand::CreateTable { name, columns, checks, .. } = &create
                    && !checks.is_empty()
                {
                    self.plan_checks(name, columns, checks.clone(), false).await?;
                }
                // The default partition count depends on this node's worker threads.
                if let CatalogCommand::CreateTable { distribution: foam_catalog::model::DistributionSpec::Hash { partitions: partitions @ None, .. }, .. } = &mut create {
                    let nodes = self.node.catalog.current().placeable_nodes().len() as u32;
                    *partitions = Some(foam_common::limits::default_partition_count(nodes, crate::distributed::worker_threads()));
                }
                let name = match &create {
                    CatalogCommand::CreateTable { name, .. } => name.clone(),
                    _ => String::new(),
                };
                let (_, outcome) = self.node.catalog.apply(create).await?;
                if matches!(outcome, CommandOutcome::Skipped) {
                    self.notice("NOTICE", foam_common::SqlState::DuplicateTable, format!("relation \"{name}\" already exists, skipping"));
                } else if self.open.get().is_some() {
                    self.block_ddl().created(name);
                }
                command("CREATE TABLE")
            }
            Statement::CreateView(view) => {
                let name = ddl::table_name(&view.name)?;
                check_not_system_table(&name)?;
                if !view.columns.is_empty() {
                    return Err(FoamError::FeatureNotSupported { feature: "CREATE VIEW with a column list".into() });
                }
                let query_sql = view.query.to_string();
                self.check_view_not_recursive(&name, &view.query)?;
                // Plan the query now so a broken view is refused at creation.
                self.plan(&Statement::Query(view.query.clone())).await?;
                let replaced = self.node.catalog.current().views.get(&name).map(|old| old.query_sql.clone());
                let create = CatalogCommand::CreateView { name: name.clone(), query_sql, or_replace: view.or_replace, owner: Some(self.current_user()) };
                self.node.catalog.apply(create).await?;
                if self.open.get().is_some() {
                    match replaced {
                        Some(old) => self.block_ddl().replaced(name, old),
                        None => self.block_ddl().created(name),
                    }
                }
                command("CREATE VIEW")
            }
            Statement::Lock(lock) => {
                crate::frontend::lock_table::check(lock, &self.node.catalog.current(), self.open.get().is_some())?;
                command("LOCK TABLE")
            }
            Statement::CreateSequence { .. } | Statement::Drop { object_type: ObjectType::Sequence, .. } => {
                let commands = crate::frontend::sequence_ddl::commands(statement, &self.current_user())?.unwrap_or_default();
                if let Some(CatalogCommand::CreateSequence { sequence, .. }) = commands.first() {
                    check_not_system_table(&sequence.name)?;
                }
                // In a block, ROLLBACK drops what it created; what it did
                // not create it may not drop (no undo for that).
                let in_block = self.open.get().is_some();
                if in_block
                    && let Some(CatalogCommand::DropSequence { name, .. }) =
                        commands.iter().find(|c| matches!(c, CatalogCommand::DropSequence { name, if_exists } if !self.block_ddl().created_since_savepoint(name) && !(*if_exists && !self.node.catalog.current().sequences.contains_key(name))))
                {
                    return Err(FoamError::FeatureNotSupported {
                        feature: format!("DROP SEQUENCE {name} inside a transaction block (only of a sequence the block created)"),
                    });
                }
                // Every name is checked before any is dropped (owners are
                // checked with the statement's privileges).
                let catalog = self.node.catalog.current();
                for command in &commands {
                    if let CatalogCommand::DropSequence { name, if_exists: false } = command
                        && !catalog.sequences.contains_key(name)
                    {
                        return Err(FoamError::Query { message: format!("sequence \"{name}\" does not exist"), sqlstate: foam_common::SqlState::UndefinedTable });
                    }
                }
                for command in commands {
                    let (created, dropped) = match &command {
                        CatalogCommand::CreateSequence { sequence, .. } => (Some(sequence.name.clone()), None),
                        CatalogCommand::DropSequence { name, .. } => (None, Some(name.clone())),
                        _ => (None, None),
                    };
                    let (_, outcome) = self.node.catalog.apply(command).await?;
                    if matches!(outcome, CommandOutcome::Skipped) {
                        let message = match (&created, &dropped) {
                            (Some(name), _) => format!("relation \"{name}\" already exists, skipping"),
                            (_, Some(name)) => format!("sequence \"{name}\" does not exist, skipping"),
                            _ => String::new(),
                        };
                        let sqlstate = if created.is_some() { foam_common::SqlState::DuplicateTable } else { foam_common::SqlState::SuccessfulCompletion };
                        if !message.is_empty() {
                            self.notice("NOTICE", sqlstate, message);
                        }
                    } else if in_block {
                        match (created, dropped) {
                            (Some(name), _) => self.block_ddl().created(name),
                            (_, Some(name)) => {
                                self.block_ddl().forget_created(&name);
                            }
                            _ => {}
                        }
                    }
                }
                command(if matches!(statement, Statement::CreateSequence { .. }) { "CREATE SEQUENCE" } else { "DROP SEQUENCE" })
            }
            Statement::Drop { object_type, names, if_exists, cascade, .. } => {
                let (tag, is_table) = match object_type {
                    ObjectType::Table => ("DROP TABLE", true),
                    ObjectType::View => ("DROP VIEW", false),
                    other => return Err(FoamError::FeatureNotSupported { feature: format!("DROP {other}") }),
                };
                let names = names.iter().map(ddl::table_name).collect::<FoamResult<Vec<_>>>()?;
                // Every name is checked before any is dropped.
                let catalog = self.node.catalog.current();
                let kind = if is_table { "table" } else { "view" };
                let exists = |name: &String| if is_table { catalog.tables.contains_key(name) } else { catalog.views.contains_key(name) };
                if let Some(missing) = names.iter().find(|n| !exists(n)).filter(|_| !*if_exists) {
                    return Err(FoamError::Query { message: format!("{kind} \"{missing}\" does not exist"), sqlstate: foam_common::SqlState::UndefinedTable });
                }
                for missing in names.iter().filter(|n| !exists(n)) {
                    self.notice("NOTICE", foam_common::SqlState::SuccessfulCompletion, format!("{kind} \"{missing}\" does not exist, skipping"));
                }
                let names: Vec<String> = names.into_iter().filter(exists).collect();
                let dependents = ddl::dependent_views(&catalog, &names);
                // The first reads one of `names` (see `dependent_views`).
                if let Some((view, on)) = dependents.first().filter(|_| !*cascade) {
                    return Err(FoamError::Query {
                        message: format!("cannot drop {kind} {on} because other objects depend on it (view {view} depends on {kind} {on}); DROP ... CASCADE drops them too"),
                        sqlstate: foam_common::SqlState::DependentObjectsStillExist,
                    });
                }
                // The views that read them go first, as views.
                let dropping = dependents.into_iter().map(|(view, _)| (view, false)).chain(names.into_iter().map(|name| (name, is_table)));
                for (name, is_table) in dropping {
                    // In a block, what it did not create is set aside until it ends.
                    if let Some(open) = self.open.get()
                        && !self.block_ddl().forget_created(&name)
                    {
                        let aside = crate::frontend::block_ddl::aside_name(&name, open.id());
                        self.node.catalog.apply(CatalogCommand::RenameRelation { from: name.clone(), to: aside.clone() }).await?;
                        self.block_ddl().set_aside(name, aside);
                    } else if is_table {
                        let (_, outcome) = self.node.catalog.apply(CatalogCommand::DropTable { name, if_exists: *if_exists }).await?;
                        if let CommandOutcome::TableDropped { table } = outcome {
                            crate::frontend::block_ddl::drop_table_data(&self.node, table.id).await;
                        }
                    } else {
                        self.node.catalog.apply(CatalogCommand::DropView { name, if_exists: *if_exists }).await?;
                    }
                }
                command(tag)
            }
            Statement::Copy { source, to, target, options, legacy_options, .. } => {
                self.copy(source, *to, target, options, legacy_options).await
            }
            Statement::Truncate(truncate) => self.truncate_tables(truncate).await,
            Statement::StartTransaction { .. } => command("BEGIN"),
            Statement::Commit { .. } => command("COMMIT"),
            Statement::Rollback { .. } => command("ROLLBACK"),
            Statement::Explain { statement, analyze: true, .. } => self.explain_analyze(statement).await,
            Statement::Explain { statement, .. } => self.explain(statement).await,
            Statement::Set(Set::SetTransaction { modes, snapshot, session }) => {
                if snapshot.is_some() {
                    return Err(FoamError::FeatureNotSupported { feature: "SET TRANSACTION SNAPSHOT".into() });
                }
                let modes = crate::frontend::transaction_block::modes(modes)?;
                if *session && modes.read_only == Some(true) {
                    return Err(FoamError::FeatureNotSupported { feature: "read-only sessions (SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY)".into() });
                }
                if *session && modes.repeatable_read == Some(true) {
                    return Err(FoamError::FeatureNotSupported {
                        feature: "SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL REPEATABLE READ (use BEGIN ISOLATION LEVEL REPEATABLE READ)".into(),
                    });
                }
                // Outside a block PostgreSQL only warns that SET TRANSACTION has no effect.
                if !*session && *self.block() == Block::InBlock {
                    if let Some(read_only) = modes.read_only {
                        self.read_only.store(read_only, std::sync::atomic::Ordering::Relaxed);
                    }
                    if let (Some(repeatable_read), Some(open)) = (modes.repeatable_read, self.open.get()) {
                        open.set_repeatable_read(repeatable_read)?;
                    }
                }
                command("SET")
            }
            Statement::Set(Set::SetRole { context_modifier, role_name }) => {
                if matches!(context_modifier, Some(datafusion::sql::sqlparser::ast::ContextModifier::Local)) {
                    return Err(FoamError::FeatureNotSupported { feature: "SET LOCAL ROLE (use SET ROLE and RESET ROLE)".into() });
                }
                self.set_role(role_name.as_ref().map(|name| ddl::normalize_ident(&name.value, name.quote_style)))?;
                command("SET")
            }
            Statement::Set(Set::SetSessionAuthorization(_)) => {
                Err(FoamError::FeatureNotSupported { feature: "SET SESSION AUTHORIZATION (use SET ROLE)".into() })
            }
            Statement::Reset(reset) if matches!(reset.reset, datafusion::sql::sqlparser::ast::Reset::ALL) => {
                self.reset_all();
                command("RESET")
            }
            Statement::Reset(reset) => {
                let time_zone = matches!(&reset.reset, datafusion::sql::sqlparser::ast::Reset::ConfigurationParameter(name) if name.to_string().to_lowercase() != ROLE_SETTING);
                if time_zone {
                    let zone = self.initial_settings.get(crate::frontend::time_zone::TIME_ZONE).cloned().unwrap_or_else(|| crate::frontend::time_zone::DEFAULT_ZONE.into());
                    if self.note_block_setting(crate::frontend::time_zone::TIME_ZONE, false) {
                        self.set_setting(crate::frontend::time_zone::TIME_ZONE.to_string(), zone)?;
                    }
                } else {
                    self.set_role(None)?;
                }
                command("RESET")
            }
            // Only DEALLOCATE ALL is FoamDB's own; DataFusion deallocates by name.
            Statement::Deallocate { .. } => {
                self.deallocate_all().await;
                command("DEALLOCATE ALL")
            }
            // No plan is cached between statements, and FoamDB has neither
            // temporary tables nor sequences: those have nothing to discard.
            Statement::Discard { object_type: DiscardObject::PLANS } => command("DISCARD PLANS"),
            Statement::Discard { object_type: DiscardObject::TEMP } => command("DISCARD TEMP"),
            Statement::Discard { object_type: DiscardObject::SEQUENCES } => command("DISCARD SEQUENCES"),
            Statement::Discard { object_type: DiscardObject::ALL } => {
                if *self.block() != Block::Idle {
                    return Err(FoamError::Query {
                        message: "DISCARD ALL cannot run inside a transaction block".into(),
                        sqlstate: foam_common::SqlState::ActiveSqlTransaction,
                    });
                }
                // As PostgreSQL's: SET SESSION AUTHORIZATION DEFAULT, RESET
                // ALL, DEALLOCATE ALL (the protocol's statements go in
                // foam-pgwire, which sees this command's tag).
                self.set_role(None)?;
                self.reset_all();
                self.deallocate_all().await;
                command("DISCARD ALL")
            }
            Statement::Set(set) => {
                if let Some((name, value)) = set_name_and_value(set) {
                    let local = matches!(
                        set,
                        Set::SingleAssignment { scope: Some(datafusion::sql::sqlparser::ast::ContextModifier::Local), .. } | Set::SetTimeZone { local: true, .. }
                    );
                    if self.note_block_setting(&name, local) {
                        self.set_setting(name, value)?;
                    }
                }
                command("SET")
            }
            Statement::ShowVariable { variable } => {
                let name = variable.iter().map(|i| i.value.to_lowercase()).collect::<Vec<_>>().join(".");
                let name = match name.as_str() {
                    "transaction.isolation.level" => TRANSACTION_ISOLATION.to_string(),
                    "time.zone" => crate::frontend::time_zone::TIME_ZONE.to_string(),
                    _ => name,
                };
                let value = self.setting(&name)?;
                let column = if name == crate::frontend::time_zone::TIME_ZONE { crate::frontend::time_zone::TIME_ZONE_SHOWN.to_string() } else { name };
                let schema = Arc::new(Schema::new(vec![Field::new(column, DataType::Utf8, false)]));
                let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(StringArray::from(vec![value])) as ArrayRef])
                    .map_err(|e| FoamError::internal(e.to_string()))?;
                Ok(rows_output(schema, vec![batch]))
            }
            other => Err(FoamError::internal(format!("statement not handled: {other}"))),
        }
    }

    /// Makes `value` the zone the session starts in (and RESET goes back
    /// to), as a TimeZone in the startup message does.
    pub fn start_in_time_zone(&mut self, value: &str) -> FoamResult<()> {
        self.set_setting(crate::frontend::time_zone::TIME_ZONE.to_string(), value.to_string())?;
        let shown = self.setting(crate::frontend::time_zone::TIME_ZONE)?;
        self.initial_settings.insert(crate::frontend::time_zone::TIME_ZONE.to_string(), shown.clone());
        self.initial_options = self.ctx.state().config().options().as_ref().clone();
        *self.reported_zone.lock().unwrap_or_else(|p| p.into_inner()) = shown;
        Ok(())
    }

    /// The notices statements raised since the last call, oldest first.
    pub fn take_notices(&self) -> Vec<Notice> {
        std::mem::take(&mut *self.notices.lock().unwrap_or_else(|p| p.into_inner()))
    }

    fn notice(&self, severity: &'static str, sqlstate: foam_common::SqlState, message: String) {
        self.notices.lock().unwrap_or_else(|p| p.into_inner()).push(Notice { severity, sqlstate, message });
    }

    /// The reported settings (PostgreSQL's `GUC_REPORT` ones FoamDB changes:
    /// TimeZone) whose value changed since the client was last told, with
    /// their new values, for a ParameterStatus message each.
    pub fn changed_reports(&self) -> Vec<(&'static str, String)> {
        let Ok(zone) = self.setting(crate::frontend::time_zone::TIME_ZONE) else { return Vec::new() };
        let mut reported = self.reported_zone.lock().unwrap_or_else(|p| p.into_inner());
        if *reported == zone {
            return Vec::new();
        }
        *reported = zone.clone();
        vec![(crate::frontend::time_zone::TIME_ZONE_SHOWN, zone)]
    }

    /// The session's TimeZone as DataFusion names it.
    fn session_zone(&self) -> Option<String> {
        self.ctx.state_ref().read().config().options().execution.time_zone.clone()
    }

    /// A setting's value as `SHOW` and `current_setting` give it; 42704 for
    /// one this session does not know.
    fn setting(&self, name: &str) -> FoamResult<String> {
        let read_only = self.read_only.load(std::sync::atomic::Ordering::Relaxed) && *self.block() != Block::Idle;
        let value = match name {
            TRANSACTION_ISOLATION if self.open.get().is_some_and(|open| open.repeatable_read()) => Some(REPEATABLE_READ.to_string()),
            TRANSACTION_ISOLATION | DEFAULT_TRANSACTION_ISOLATION => Some(ISOLATION_LEVEL.to_string()),
            "transaction_read_only" => Some(if read_only { "on" } else { "off" }.to_string()),
            ROLE_SETTING => Some(self.role.lock().unwrap_or_else(|p| p.into_inner()).clone().unwrap_or_else(|| "none".into())),
            "is_superuser" => {
                let superuser = self.acting(&self.node.catalog.current()) == Acting::Superuser;
                Some(if superuser { "on" } else { "off" }.to_string())
            }
            _ => self.settings.lock().unwrap_or_else(|p| p.into_inner()).get(name).cloned(),
        };
        value.ok_or_else(|| FoamError::Query {
            message: format!("unrecognized configuration parameter \"{name}\""),
            sqlstate: foam_common::SqlState::UndefinedObject,
        })
    }

    /// `SET name = value` (and `set_config`) of a setting DataFusion does not
    /// plan: FoamDB's own, checked, and the client's, kept for `SHOW`.
    fn set_setting(&self, name: String, value: String) -> FoamResult<()> {
        if name == ROLE_SETTING {
            return self.set_role(Some(value).filter(|v| !v.eq_ignore_ascii_case("none") && !v.eq_ignore_ascii_case("default")));
        }
        if let Some((_, fixed)) = FIXED_SETTINGS.iter().find(|(fixed, _)| *fixed == name)
            && !value.eq_ignore_ascii_case(fixed)
        {
            return Err(FoamError::FeatureNotSupported { feature: format!("\"{name}\" other than \"{fixed}\"") });
        }
        if name == crate::frontend::setting_functions::SESSION_AUTHORIZATION || name == "is_superuser" {
            return Err(FoamError::Query { message: format!("parameter \"{name}\" cannot be set (use SET ROLE)"), sqlstate: foam_common::SqlState::InsufficientPrivilege });
        }
        if name == crate::frontend::time_zone::TIME_ZONE {
            let zone = crate::frontend::time_zone::parse(&value)?;
            self.ctx.state_ref().write().config_mut().options_mut().execution.time_zone = Some(zone.datafusion);
            refresh_config_functions(&self.ctx);
            self.settings.lock().unwrap_or_else(|p| p.into_inner()).insert(name, zone.shown);
            return Ok(());
        }
        if name == EXCHANGE_BATCH_ROWS {
            self.set_exchange_batch_rows(&value)?;
        } else if name == EXCHANGE_BATCH_BYTES {
            if !value.parse::<usize>().is_ok_and(|b| b > 0) {
                return Err(FoamError::InvalidParameter {
                    message: format!("{EXCHANGE_BATCH_BYTES} must be a positive whole number of bytes, not \"{value}\""),
                });
            }
        } else if name == STATEMENT_TIMEOUT {
            let shown = show_statement_timeout(parse_statement_timeout(&value)?);
            self.settings.lock().unwrap_or_else(|p| p.into_inner()).insert(name, shown);
            return Ok(());
        } else if name.starts_with("foam.") {
            // FoamDB's planner settings (options::FoamOptions).
            let state = self.ctx.state_ref();
            let mut state = state.write();
            state.config_mut().options_mut().set(&name, &value).map_err(|_| FoamError::Query {
                message: format!("unrecognized configuration parameter \"{name}\" or bad value \"{value}\""),
                sqlstate: foam_common::SqlState::UndefinedObject,
            })?;
        } else if name.starts_with("datafusion.") || name.starts_with("distributed.") {
            // Through SET only, which DataFusion plans and checks.
            return Err(FoamError::FeatureNotSupported { feature: format!("set_config of \"{name}\" (use SET)") });
        }
        self.settings.lock().unwrap_or_else(|p| p.into_inner()).insert(name, value);
        Ok(())
    }

    /// `SET foam.exchange_batch_rows = n`: rows per batch that stages send
    /// between nodes (datafusion-distributed sizes the batches its shuffles
    /// send with `distributed.shuffle_batch_size`).
    fn set_exchange_batch_rows(&self, value: &str) -> FoamResult<()> {
        let rows: usize = value.parse().ok().filter(|r| (1..=EXCHANGE_BATCH_ROWS_MAX).contains(r)).ok_or_else(|| {
            FoamError::InvalidParameter {
                message: format!("{EXCHANGE_BATCH_ROWS} must be a whole number from 1 to {EXCHANGE_BATCH_ROWS_MAX}, not \"{value}\""),
            }
        })?;
        let state = self.ctx.state_ref();
        let mut state = state.write();
        state.config_mut().options_mut().set("distributed.shuffle_batch_size", &rows.to_string()).map_err(FoamError::from)
    }

    /// `SET foam.exchange_batch_bytes = b`: caps the batches a query's stages
    /// send between nodes at about `b` bytes, by turning it into rows for this
    /// query from the widest row it shuffles (fixed-width columns at their
    /// width, strings and binaries at `STRING_BYTES_ESTIMATE`), and at most
    /// `foam.exchange_batch_rows` when that is set too.
    fn apply_exchange_batch_bytes(&self, plan: &Arc<dyn datafusion::physical_plan::ExecutionPlan>) -> FoamResult<()> {
        use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
        let (bytes, rows) = {
            let settings = self.settings.lock().unwrap_or_else(|p| p.into_inner());
            (settings.get(EXCHANGE_BATCH_BYTES).cloned(), settings.get(EXCHANGE_BATCH_ROWS).cloned())
        };
        let Some(bytes) = bytes else { return Ok(()) };
        let bytes: usize = bytes.parse().unwrap_or(usize::MAX);
        let mut widest = 1usize;
        let _ = plan.apply(|node| {
            if node.is::<datafusion::physical_plan::repartition::RepartitionExec>() {
                widest = widest.max(row_bytes_estimate(&node.schema()));
            }
            Ok(TreeNodeRecursion::Continue)
        });
        let cap = rows.and_then(|r| r.parse::<usize>().ok()).unwrap_or(EXCHANGE_BATCH_ROWS_MAX);
        let batch_rows = (bytes / widest).clamp(1, cap.min(EXCHANGE_BATCH_ROWS_MAX));
        let state = self.ctx.state_ref();
        let mut state = state.write();
        state.config_mut().options_mut().set("distributed.shuffle_batch_size", &batch_rows.to_string()).map_err(FoamError::from)
    }

    /// Notes a `SET name` about to run, and whether it is to run: `SET
    /// LOCAL` inside a block is put back when the block ends (outside one
    /// it does nothing, as in PostgreSQL, which warns); a plain `SET` makes
    /// the name the block's to keep at COMMIT.
    fn note_block_setting(&self, name: &str, local: bool) -> bool {
        let mut block_settings = self.block_settings.lock().unwrap_or_else(|p| p.into_inner());
        if *self.block() == Block::Idle {
            return !local;
        }
        if !local {
            block_settings.local.retain(|(n, _)| n != name);
        } else if !block_settings.local.iter().any(|(n, _)| n == name) {
            // A custom name not set before comes back empty, as in PostgreSQL.
            let before = self.setting(name).unwrap_or_default();
            block_settings.local.push((name.to_string(), before));
        }
        true
    }

    /// The block ended: `committed`, its `SET LOCAL`s are put back; rolled
    /// back (or failed), every setting and the role are as BEGIN found them.
    fn end_block_settings(&self, committed: bool) {
        let BlockSettings { at_begin, local, .. } = std::mem::take(&mut *self.block_settings.lock().unwrap_or_else(|p| p.into_inner()));
        if committed {
            for (name, before) in local {
                if let Err(error) = self.set_setting(name.clone(), before) {
                    tracing::warn!(%error, setting = name, "SET LOCAL not put back");
                }
            }
            return;
        }
        if let Some(found) = at_begin {
            self.put_back(found);
        }
    }

    /// The client settings, DataFusion options and role now.
    fn settings_now(&self) -> SettingsAt {
        let settings = self.settings.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let options = self.ctx.state().config().options().as_ref().clone();
        let role = self.role.lock().unwrap_or_else(|p| p.into_inner()).clone();
        (settings, options, role)
    }

    /// Puts the settings, options and role `found` back.
    fn put_back(&self, (settings, options, role): SettingsAt) {
        self.restore_settings(settings, options);
        *self.role.lock().unwrap_or_else(|p| p.into_inner()) = role;
    }

    /// `RESET ALL`: every setting back to what the session started with
    /// (the role stays, as in PostgreSQL).
    fn reset_all(&self) {
        self.restore_settings(self.initial_settings.clone(), self.initial_options.clone());
    }

    /// Puts the client settings and DataFusion's options back to `settings`
    /// and `options`.
    fn restore_settings(&self, settings: BTreeMap<String, String>, options: datafusion::config::ConfigOptions) {
        *self.settings.lock().unwrap_or_else(|p| p.into_inner()) = settings;
        *self.ctx.state_ref().write().config_mut().options_mut() = options;
        refresh_config_functions(&self.ctx);
    }

    /// Deallocates every SQL-level prepared statement.
    async fn deallocate_all(&self) {
        let names = std::mem::take(&mut *self.sql_prepared.lock().unwrap_or_else(|p| p.into_inner()));
        for (name, _) in names.into_values() {
            // One already deallocated by name is gone: its error is moot.
            let _ = self.ctx.sql(&format!("DEALLOCATE {name}")).await;
        }
    }

    /// The role statements run as: `SET ROLE`'s, else the session's.
    fn current_user(&self) -> String {
        self.role.lock().unwrap_or_else(|p| p.into_inner()).clone().unwrap_or_else(|| self.session_user.clone())
    }

    /// Who the session's statements run as, by `catalog`'s roles.
    fn acting(&self, catalog: &foam_catalog::Catalog) -> Acting {
        Acting::of(catalog, &self.current_user(), self.insecure)
    }

    /// What EXPLAIN's `statement`, planned as `plan`, needs: what running it would.
    fn explained_needs(&self, statement: &Statement, plan: &LogicalPlan) -> Vec<Need> {
        [privileges::read_needs(statement, &self.node.catalog.current()), privileges::write_needs(plan)].concat()
    }

    /// Refuses with 42501 what the current role may not do.
    fn check_privileges(&self, needs: &[Need]) -> FoamResult<()> {
        if needs.is_empty() {
            return Ok(());
        }
        let catalog = self.node.catalog.current();
        privileges::check(needs, &catalog, &self.acting(&catalog))
    }

    /// `SET ROLE name` (`None`: `RESET ROLE`, `SET ROLE NONE`). As in
    /// PostgreSQL, a session whose own role is a superuser may take any
    /// role, any other only its own (FoamDB has no role membership). A
    /// ROLLBACK of its block undoes it (`end_block_settings`). The
    /// privilege inquiry functions read the role from here.
    fn set_role(&self, name: Option<String>) -> FoamResult<()> {
        if let Some(name) = &name {
            let catalog = self.node.catalog.current();
            if !catalog.roles.contains_key(name) {
                return Err(FoamError::Query { message: format!("role \"{name}\" does not exist"), sqlstate: foam_common::SqlState::UndefinedObject });
            }
            if *name != self.session_user && Acting::of(&catalog, &self.session_user, self.insecure) != Acting::Superuser {
                return Err(FoamError::Query { message: format!("permission denied to set role \"{name}\""), sqlstate: foam_common::SqlState::InsufficientPrivilege });
            }
        }
        *self.role.lock().unwrap_or_else(|p| p.into_inner()) = name;
        Ok(())
    }

    /// Refuses a view that would reach itself through the views it reads
    /// (planning it would recurse forever).
    fn check_view_not_recursive(&self, name: &str, query: &datafusion::sql::sqlparser::ast::Query) -> FoamResult<()> {
        let catalog = self.node.catalog.current();
        let mut pending: Vec<String> = privileges::relations_of(query);
        let mut seen = std::collections::BTreeSet::new();
        while let Some(relation) = pending.pop() {
            if relation == name {
                return Err(FoamError::Query {
                    message: format!("infinite recursion detected: view \"{name}\" would read itself"),
                    sqlstate: foam_common::SqlState::InvalidObjectDefinition,
                });
            }
            if !seen.insert(relation.clone()) {
                continue;
            }
            if let Some(view) = catalog.views.get(&relation) {
                pending.extend(privileges::view_relations(view).unwrap_or_default());
            }
        }
        Ok(())
    }

    /// `CHECKPOINT`, as in PostgreSQL: every up node (this one included,
    /// through the same request) writes the rows its memtables hold
    /// (committed, and durable in its WAL already) to Parquet segments and
    /// starts a fresh WAL. Reads then decode segments on every node alike, and
    /// a restart replays nothing. Changes no row, so a node that fails fails
    /// the statement without undoing the others.
    async fn checkpoint(&self) -> FoamResult<()> {
        let catalog = self.node.catalog.current();
        for node in catalog.nodes.values().filter(|n| n.state == foam_catalog::model::NodeState::Up) {
            // A node that is down keeps the rows in its WAL.
            self.node.client(node)?.call(&NodeRequest::Checkpoint, &[]).await?;
        }
        Ok(())
    }

    async fn copy(
        &self,
        source: &CopySource,
        to: bool,
        target: &CopyTarget,
        options: &[CopyOption],
        legacy_options: &[CopyLegacyOption],
    ) -> FoamResult<StatementOutput> {
        if to {
            return Err(FoamError::FeatureNotSupported { feature: "COPY ... TO".into() });
        }
        let CopySource::Table { table_name, columns } = source else {
            return Err(FoamError::FeatureNotSupported { feature: "COPY from a query".into() });
        };
        let name = ddl::table_name(table_name)?;
        let table = self.node.catalog.current().table(&name)?.clone();
        let mut options = crate::frontend::copy_statement::copy_options(options, legacy_options)?;
        if !columns.is_empty() {
            let mut positions = Vec::with_capacity(columns.len());
            for column in columns {
                let name = ddl::normalize_ident(&column.value, column.quote_style);
                let position = table.columns.iter().position(|c| c.name == name).ok_or_else(|| FoamError::UndefinedColumn { table: table.name.clone(), column: name.clone() })?;
                if positions.contains(&position) {
                    return Err(FoamError::Query { message: format!("column \"{name}\" specified more than once"), sqlstate: foam_common::SqlState::DuplicateColumn });
                }
                positions.push(position);
            }
            options.defaults = self.copy_defaults(&table, &positions).await?;
            options.columns = Some(positions);
        }
        options.time_zone = self.session_zone();
        options.checks = self.table_checks(&table).await?;
        let path = match target {
            CopyTarget::File { filename } => crate::write::copy::server_file(self.node.copy_dir.as_deref(), filename)?.display().to_string(),
            CopyTarget::Stdin => return Ok(StatementOutput::CopyIn(CopyInTarget { table, options })),
            other => return Err(FoamError::FeatureNotSupported { feature: format!("COPY FROM {other}") }),
        };
        let rows = crate::write::copy::copy_from_file(self.node.clone(), table, path, options, self.open.get()).await?;
        Ok(StatementOutput::Command { tag: "COPY".into(), rows: Some(rows) })
    }

    /// EXPLAIN ANALYZE runs the query and shows the plan with each task's
    /// metrics (rows in and out per task; each task runs on the node named in
    /// its scan), then what crossed the network per node while it ran:
    /// messages and bytes sent and received, and time spent waiting on peers
    /// (other queries running at the same time are counted too).
    async fn explain_analyze(&self, statement: &Statement) -> FoamResult<StatementOutput> {
        self.pass_execution_options()?;
        set_collect_metrics(&self.ctx, true);
        let planned = async {
            let plan = self.plan(statement).await?;
            self.check_privileges(&self.explained_needs(statement, &plan))?;
            self.plan_sink_checks(&plan).await?;
            let frame = self.ctx.execute_logical_plan(plan).await?;
            let task_ctx = frame.task_ctx();
            Ok::<_, FoamError>((task_ctx, frame.create_physical_plan().await?))
        }
        .await;
        set_collect_metrics(&self.ctx, false);
        let (task_ctx, plan) = planned?;
        let before = crate::catalog::system_tables::traffic_snapshots(&self.node, false).await;
        let started = std::time::Instant::now();
        let batches = datafusion::physical_plan::collect(plan.clone(), Arc::new(task_ctx)).await.map_err(FoamError::from)?;
        let elapsed = started.elapsed();
        let after = crate::catalog::system_tables::traffic_snapshots(&self.node, false).await;
        let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
        let mut text = datafusion_distributed::explain_analyze(plan, datafusion_distributed::DistributedMetricsFormat::PerTask)
            .await
            .map_err(FoamError::from)?;
        text.push_str(&format!("\n{rows} rows in {:.1} ms\nPer node while it ran:\n", elapsed.as_secs_f64() * 1e3));
        text.push_str(&crate::catalog::system_tables::traffic_delta_lines(&before, &after).join("\n"));
        text.push('\n');
        explain_output("plan_with_metrics", text)
    }

    /// EXPLAIN shows the distributed plan (stages, tasks, and the nodes that
    /// run them) and every exchange between nodes, named by kind.
    async fn explain(&self, statement: &Statement) -> FoamResult<StatementOutput> {
        let plan = self.plan(statement).await?;
        self.check_privileges(&self.explained_needs(statement, &plan))?;
        let frame = self.ctx.execute_logical_plan(plan).await.map_err(FoamError::from)?;
        let plan = frame.create_physical_plan().await.map_err(FoamError::from)?;
        let mut text = datafusion_distributed::display_plan_ascii(plan.as_ref(), false);
        let exchanges = crate::frontend::explain::exchanges(&plan);
        text.push_str("\nExchanges between nodes:\n");
        if exchanges.is_empty() {
            text.push_str("  none\n");
        }
        for line in exchanges {
            text.push_str("  ");
            text.push_str(&line);
            text.push('\n');
        }
        explain_output("physical_plan", text)
    }
}

/// `RESET ROLE` and `RESET ALL`, which FoamDB runs (DataFusion resets its
/// own settings one by one).
fn is_reset_foamdb_runs(statement: &Statement) -> bool {
    use datafusion::sql::sqlparser::ast::Reset;
    match statement {
        Statement::Reset(reset) => match &reset.reset {
            Reset::ALL => true,
            Reset::ConfigurationParameter(name) => {
                let name = name.to_string().to_lowercase();
                name == ROLE_SETTING || name == crate::frontend::time_zone::TIME_ZONE || name == "time zone"
            }
        },
        _ => false,
    }
}

/// Refuses a table or view named as a system table, which it would hide.
fn check_not_system_table(name: &str) -> FoamResult<()> {
    if crate::catalog::system_tables::NAMES.contains(&name) {
        return Err(FoamError::DuplicateTable { name: name.to_string() });
    }
    Ok(())
}

/// `DEALLOCATE [PREPARE] ALL`.
fn is_deallocate_all(statement: &Statement) -> bool {
    matches!(statement, Statement::Deallocate { name, .. } if name.quote_style.is_none() && name.value.eq_ignore_ascii_case("all"))
}

/// What running a statement of `kind` needs of its role, given what a
/// planned statement reads.
/// The one table or sequence a catalog command changes whose ROLLBACK is
/// dropping it (ALTER TABLE or ALTER SEQUENCE of one a block created).
fn changed_relation(command: &CatalogCommand) -> Option<&str> {
    match command {
        CatalogCommand::SetSequenceOwnedBy { name, .. } | CatalogCommand::AlterSequence { name, .. } => Some(name),
        CatalogCommand::SetColumnDefault { table, .. } | CatalogCommand::AddIdentity { table, .. } => Some(table),
        CatalogCommand::AlterOwner { relation, .. } => Some(relation),
        CatalogCommand::DropConstraint { table, .. } => Some(table),
        _ => None,
    }
}

fn needs_of(kind: &Kind, reads: &[Need]) -> Vec<Need> {
    use foam_catalog::privileges::Privilege;
    match kind {
        Kind::Plan { write: Some(PlanWrite::Modify(modify)), .. } => {
            let privilege = match modify {
                crate::frontend::modify::Modify::Delete { .. } => Privilege::Delete,
                crate::frontend::modify::Modify::Update { .. } => Privilege::Update,
                crate::frontend::modify::Modify::Truncate { .. } => Privilege::Truncate,
                crate::frontend::modify::Modify::Upsert(upsert) => {
                    let mut needs = [reads.to_vec(), vec![Need::Privilege { relation: upsert.table.clone(), privilege: Privilege::Insert }]].concat();
                    if upsert.update {
                        needs.push(Need::Privilege { relation: upsert.table.clone(), privilege: Privilege::Update });
                    }
                    return needs;
                }
            };
            [reads.to_vec(), vec![Need::Privilege { relation: modify.table().to_string(), privilege }]].concat()
        }
        Kind::Plan { plan, .. } => [reads.to_vec(), privileges::write_needs(plan)].concat(),
        Kind::Own(statement, _) => privileges::own_needs(statement),
        Kind::Catalog { command, .. } => privileges::command_needs(command),
        Kind::CopyOut { query, .. } => query.needs.clone(),
        Kind::AddKey { table, .. } => vec![Need::Owner(table.clone())],
        Kind::AddCheck(add) => vec![Need::Owner(add.table.clone())],
        Kind::Checkpoint => vec![Need::Superuser("CHECKPOINT")],
        Kind::Maintenance { .. } | Kind::Empty => Vec::new(),
    }
}

/// A planned statement with its `$n` parameter values filled in.
/// Whether `result` failed with `state` (from this node or a peer).
fn error_is<T>(result: &FoamResult<T>, state: foam_common::SqlState) -> bool {
    matches!(result, Err(error) if error.sqlstate() == state)
}

/// Commits what `writer` wrote if the statement's `output` is one, else
/// takes it back.
async fn settle(writer: TableWriter, output: FoamResult<StatementOutput>) -> FoamResult<StatementOutput> {
    match output {
        Ok(output) => {
            writer.commit().await?;
            Ok(output)
        }
        Err(error) => {
            writer.abort().await;
            Err(error)
        }
    }
}

fn bind(plan: LogicalPlan, params: Option<ParamValues>) -> FoamResult<LogicalPlan> {
    match params {
        Some(params) => plan.with_param_values(params).map_err(FoamError::from),
        None => Ok(plan),
    }
}

fn explain_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new("plan_type", DataType::Utf8, false), Field::new("plan", DataType::Utf8, false)]))
}

/// EXPLAIN's one row: the kind of plan and its text, as DataFusion shows it.
fn explain_output(plan_type: &str, text: String) -> FoamResult<StatementOutput> {
    let schema = explain_schema();
    let columns: Vec<ArrayRef> = vec![Arc::new(StringArray::from(vec![plan_type])), Arc::new(StringArray::from(vec![text]))];
    let batch = RecordBatch::try_new(schema.clone(), columns).map_err(|e| FoamError::internal(e.to_string()))?;
    Ok(rows_output(schema, vec![batch]))
}

fn rows_output(schema: SchemaRef, batches: Vec<RecordBatch>) -> StatementOutput {
    let stream = futures::stream::iter(batches.into_iter().map(Ok)).boxed();
    StatementOutput::Rows { schema: schema.clone(), stream: Box::pin(RecordBatchStreamAdapter::new(schema, stream)) }
}

