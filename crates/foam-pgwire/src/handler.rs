//! pgwire handlers over a `FoamSession`.

use std::fmt::Debug;
use std::io::Write;
use std::sync::{Arc, Mutex};

use arrow_pg::datatypes::{arrow_schema_to_pg_fields, encode_recordbatch, into_pg_type};
use async_trait::async_trait;
use datafusion::arrow::datatypes::DataType;
use datafusion::execution::runtime_env::RuntimeEnv;
use foam_common::FoamError;
use foam_query::frontend::session::{CopyInTarget, PreparedStatement};
use foam_query::{FoamSession, NodeContext, StatementOutput};
use futures::{FutureExt, Sink, SinkExt, StreamExt};
use pgwire::api::cancel::{CancelHandler, DefaultCancelHandler};
use pgwire::api::copy::CopyHandler;
use pgwire::api::portal::{Format, Portal};
use pgwire::api::query::{ExtendedQueryHandler, SimpleQueryHandler};
use pgwire::api::results::{CopyResponse, DescribePortalResponse, FieldInfo, QueryResponse, Response, Tag};
use pgwire::api::stmt::{QueryParser, StoredStatement};
use pgwire::api::store::PortalStore;
use pgwire::api::{ClientInfo, ClientPortalStore, ConnectionManager, PgWireServerHandlers, Type};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::PgWireBackendMessage;
use pgwire::api::store::Entry;
use pgwire::messages::copy::{CopyData, CopyDone, CopyFail};
use pgwire::messages::data::{NoData, ParameterDescription};
use pgwire::messages::extendedquery::{Describe, Parse, ParseComplete, TARGET_TYPE_BYTE_PORTAL, TARGET_TYPE_BYTE_STATEMENT};
use pgwire::types::format::FormatOptions;
use tokio::net::TcpListener;

use crate::activity::{Running, SqlActivity};
use crate::startup::{CancelKey, ClientAuth, FoamStartup, Tls};

/// Accepts PostgreSQL connections on `listener` until the process ends,
/// authenticating clients as `auth` says, at most `max_connections` at once
/// (the `max_connections` of `activity`, which records what they do).
pub async fn serve(listener: TcpListener, node: Arc<NodeContext>, runtime: Arc<RuntimeEnv>, auth: ClientAuth, tls: Tls, activity: Arc<SqlActivity>) {
    let max_connections = activity.max_connections();
    let handler = Arc::new(FoamPgHandler { node, runtime, insecure: auth == ClientAuth::Insecure, activity });
    let connections = Arc::new(ConnectionManager::new());
    let slots = Arc::new(tokio::sync::Semaphore::new(max_connections));
    loop {
        match listener.accept().await {
            Ok((socket, peer)) => {
                let _ = socket.set_nodelay(true);
                // A client past the limit is told so at its startup message
                // (53300); its factory holds no slot.
                let slot = slots.clone().try_acquire_owned().ok();
                let factory = Arc::new(HandlerFactory {
                    handler: handler.clone(),
                    connections: connections.clone(),
                    auth,
                    tls_required_off_host: tls.required_off_host,
                    slot,
                    max_connections,
                });
                let acceptor = tls.acceptor.clone();
                tokio::spawn(async move {
                    // pgwire 0.41's decoders panic on some malformed messages
                    // (a length shorter than the body it declares); the panic
                    // ends this connection only, and is reported as what it is.
                    let served = std::panic::AssertUnwindSafe(pgwire::tokio::process_socket(socket, Some(acceptor), factory));
                    match futures::FutureExt::catch_unwind(served).await {
                        Ok(Err(error)) => tracing::debug!(%peer, %error, "client connection ended with an error"),
                        Ok(Ok(())) => {}
                        Err(_) => tracing::warn!(%peer, "closed a client connection whose malformed message the protocol decoder could not read"),
                    }
                });
            }
            Err(error) => {
                tracing::warn!(%error, "accepting a SQL connection failed");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        }
    }
}

struct HandlerFactory {
    handler: Arc<FoamPgHandler>,
    /// This node's connections by cancel key: a cancel request (sent on a
    /// connection of its own) finds the statement to stop here.
    connections: Arc<ConnectionManager>,
    auth: ClientAuth,
    tls_required_off_host: bool,
    /// This connection's place among the node's `max_connections`, given
    /// back when the connection ends; `None` past the limit.
    slot: Option<tokio::sync::OwnedSemaphorePermit>,
    max_connections: usize,
}

impl PgWireServerHandlers for HandlerFactory {
    fn simple_query_handler(&self) -> Arc<impl SimpleQueryHandler> {
        self.handler.clone()
    }

    fn extended_query_handler(&self) -> Arc<impl ExtendedQueryHandler> {
        self.handler.clone()
    }

    fn startup_handler(&self) -> Arc<impl pgwire::api::auth::StartupHandler> {
        let over_limit = self.slot.is_none().then_some(self.max_connections);
        Arc::new(FoamStartup::new(self.auth, self.tls_required_off_host, over_limit, &self.handler.node, self.connections.clone()))
    }

    fn cancel_handler(&self) -> Arc<impl CancelHandler> {
        Arc::new(DefaultCancelHandler::new(self.connections.clone()))
    }

    fn copy_handler(&self) -> Arc<impl CopyHandler> {
        self.handler.clone()
    }
}

/// Arms the connection's cancel key for the statement about to run: a cancel
/// request from now on stops it (a later one stops the next statement).
async fn cancel_signal<C: ClientInfo>(client: &C) -> Option<futures::channel::oneshot::Receiver<()>> {
    let key = client.session_extensions().get::<CancelKey>()?;
    Some(key.handle.start_query().await)
}

pub struct FoamPgHandler {
    node: Arc<NodeContext>,
    runtime: Arc<RuntimeEnv>,
    /// Anyone connects as anyone (`--insecure`).
    insecure: bool,
    activity: Arc<SqlActivity>,
}

/// Rows of a `COPY ... FROM STDIN` being received, spooled to a file in
/// the node's staging directory. The file goes when the COPY ends however
/// it ends, its client disconnecting included; one left by a crash goes at
/// the node's next start, with the rest of the staging directory.
struct PendingCopy {
    target: CopyInTarget,
    path: std::path::PathBuf,
    file: Option<std::fs::File>,
    error: Option<String>,
}

impl Drop for PendingCopy {
    fn drop(&mut self) {
        drop(self.file.take());
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The names of the protocol's prepared statements on this connection:
/// pgwire keeps the statements where they cannot be listed, and `DISCARD
/// ALL` and `DEALLOCATE ALL` drop every one.
#[derive(Default)]
struct StatementNames(Mutex<std::collections::BTreeSet<String>>);

/// After `DISCARD ALL` or `DEALLOCATE ALL` (the session did its part):
/// drops the connection's protocol statements and portals, as PostgreSQL
/// does, so a pooled connection's next client finds none of the last one's.
fn forget_statements<C>(client: &C, output: &StatementOutput)
where
    C: ClientInfo + ClientPortalStore,
    C::PortalStore: PortalStore,
{
    if !matches!(output, StatementOutput::Command { tag, .. } if tag == "DISCARD ALL" || tag == "DEALLOCATE ALL") {
        return;
    }
    let names = client.session_extensions().get_or_insert_with(StatementNames::default);
    for name in std::mem::take(&mut *names.0.lock().unwrap_or_else(|p| p.into_inner())) {
        client.portal_store().rm_statement(&name);
    }
    client.portal_store().clear_portals();
}

/// A connection's pending COPY, if any.
#[derive(Default)]
struct CopyState(Mutex<Option<PendingCopy>>);

impl FoamPgHandler {
    fn session<C: ClientInfo>(&self, client: &C) -> Arc<FoamSession> {
        session_of(client, &self.node, &self.runtime, self.insecure)
    }

    /// Marks the connection running `sql` (see [`SqlActivity::start`]).
    fn start<C: ClientInfo>(&self, client: &C, sql: &str) -> Arc<Running> {
        let registration = client.session_extensions().get_or_insert_with(|| {
            let metadata = client.metadata();
            let value = |key: &str| metadata.get(key).map(String::as_str).unwrap_or_default();
            self.activity.connect(value(pgwire::api::METADATA_USER), value(pgwire::api::METADATA_DATABASE), value("application_name"), client.socket_addr())
        });
        self.activity.start(registration.pid, sql)
    }

    /// Counts a statement's outcome.
    fn record(&self, result: &Result<StatementOutput, FoamError>, sql: &str) {
        match result {
            Ok(StatementOutput::Command { tag, .. }) if tag.is_empty() => {}
            Ok(StatementOutput::Command { tag, .. }) => self.activity.succeeded(Some(tag), sql),
            Ok(StatementOutput::Rows { .. }) => self.activity.succeeded(None, sql),
            Ok(StatementOutput::Returned { tag, .. }) => self.activity.succeeded(Some(tag), sql),
            Ok(StatementOutput::CopyIn(_) | StatementOutput::CopyOut { .. }) => self.activity.succeeded(Some("COPY"), sql),
            Err(error) => self.activity.failed(error.sqlstate().code()),
        }
    }

    /// Turns a statement's output into a pgwire response; rows keep
    /// `running` until the last is sent.
    fn respond<C: ClientInfo>(&self, client: &C, output: StatementOutput, format: &Format, running: &Arc<Running>) -> PgWireResult<Response> {
        match output {
            StatementOutput::Command { tag, rows } => {
                Ok(match (tag.as_str(), rows) {
                    ("", _) => Response::EmptyQuery,
                    ("BEGIN", _) => Response::TransactionStart(Tag::new("BEGIN")),
                    ("COMMIT" | "ROLLBACK", _) => Response::TransactionEnd(Tag::new(&tag)),
                    // pgwire 0.41 cannot report a failed block resumed by
                    // ROLLBACK TO as in progress again: its ReadyForQuery
                    // says failed until the block ends, while FoamDB runs
                    // the block's statements (docs/LIMITS.md).
                    (foam_query::frontend::session::ROLLBACK_TO_TAG, _) => Response::Execution(Tag::new("ROLLBACK")),
                    ("INSERT", Some(rows)) => Response::Execution(Tag::new("INSERT").with_oid(0).with_rows(rows as usize)),
                    (name, Some(rows)) => Response::Execution(Tag::new(name).with_rows(rows as usize)),
                    (name, None) => Response::Execution(Tag::new(name)),
                })
            }
            StatementOutput::Returned { tag, schema, stream } => {
                let mut response = rows_response(client, schema, stream, format, running)?;
                // pgwire adds the row count: `INSERT 0 n`, `UPDATE n`.
                response.set_command_tag(if tag == "INSERT" { "INSERT 0" } else { tag });
                Ok(Response::Query(response))
            }
            StatementOutput::Rows { schema, stream } => Ok(Response::Query(rows_response(client, schema, stream, format, running)?)),
            StatementOutput::CopyIn(target) => {
                let columns = target.options.columns.as_ref().map_or(target.table.columns.len(), Vec::len);
                let format = if target.options.format == foam_query::write::copy::CopyFormat::Binary { 1 } else { 0 };
                let path = self.node.storage.incoming_dir().join(format!("copy-spool-{}.data", uuid::Uuid::new_v4().simple()));
                let file = std::fs::File::create(&path).map_err(|e| user_error(&FoamError::io(&path, e)))?;
                let state = client.session_extensions().get_or_insert_with(CopyState::default);
                *state.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(PendingCopy { target, path, file: Some(file), error: None });
                Ok(Response::CopyIn(CopyResponse::new(format, columns, futures::stream::empty())))
            }
            StatementOutput::CopyOut { schema, stream, options } => crate::copy_out::copy_out_response(schema, stream, options),
        }
    }
}

/// Rows as pgwire sends them; they keep `running` until the last is sent.
fn rows_response<C: ClientInfo>(
    client: &C,
    schema: datafusion::arrow::datatypes::SchemaRef,
    stream: datafusion::execution::SendableRecordBatchStream,
    format: &Format,
    running: &Arc<Running>,
) -> PgWireResult<QueryResponse> {
    let options = Arc::new(FormatOptions::from_client_metadata(client.metadata()));
    let fields = Arc::new(pg_fields(&schema, format, Some(options))?);
    let row_fields = fields.clone();
    let running = running.clone();
    let rows = stream
        .map(move |batch| {
            let _ = &running;
            let rows: Box<dyn Iterator<Item = PgWireResult<pgwire::messages::data::DataRow>> + Send + Sync> = match batch {
                Ok(batch) => {
                    let (batch, encode_fields) = crate::text_values::postgres_text(batch, &row_fields);
                    encode_recordbatch(encode_fields, batch)
                }
                Err(error) => Box::new(std::iter::once(Err(user_error(&FoamError::from(error))))),
            };
            futures::stream::iter(rows)
        })
        .flatten();
    Ok(QueryResponse::new(fields, rows))
}

/// The fields a result's RowDescription gives: arrow-pg's for the Arrow
/// types, with CHAR(n) columns (`char_columns.rs`) as `bpchar` of their
/// length, as PostgreSQL describes them; `json` columns as `json`, and
/// `int2vector`/`oidvector` ones as `text`, their values as PostgreSQL
/// prints them.
fn pg_fields(schema: &datafusion::arrow::datatypes::Schema, format: &Format, options: Option<Arc<FormatOptions>>) -> PgWireResult<Vec<FieldInfo>> {
    use foam_query::frontend::char_columns::marked_width;
    let shown = foam_query::frontend::select_names::client_schema(schema);
    let mut fields = arrow_schema_to_pg_fields(&crate::text_values::described(&shown), format, options)?;
    if let Some(binary) = fields
        .iter()
        .zip(shown.fields())
        .find(|(info, field)| info.format() == pgwire::api::results::FieldFormat::Binary && crate::text_values::is_nested_array(field.data_type()))
    {
        return Err(binary_nested_array(binary.0.name()));
    }
    for (info, field) in fields.iter_mut().zip(schema.fields()) {
        let marked = match field.metadata().get(foam_query::exec::json_build::PG_TYPE_METADATA).map(String::as_str) {
            Some("json") => Some(Type::JSON),
            // Sent as text (`1 2`): pgwire quotes a text value of a
            // vector type (an array kind) as an array element ("1 2").
            Some("int2vector" | "oidvector") => Some(Type::TEXT),
            _ => None,
        };
        if let Some(pg_type) = marked {
            *info = FieldInfo::new(info.name().to_string(), info.table_id(), info.column_id(), pg_type, info.format()).with_format_options(info.format_options().clone());
        }
        if let Some(n) = marked_width(field) {
            *info = FieldInfo::new(info.name().to_string(), info.table_id(), info.column_id(), Type::BPCHAR, info.format())
                .with_format_options(info.format_options().clone())
                .with_type_size(-1)
                .with_type_modifier(n as i32 + foam_query::catalog::pg_columns::TYPMOD_HEADER);
        }
    }
    Ok(fields)
}

/// The refusal of an array of arrays in binary format (0A000).
pub(crate) fn binary_nested_array(column: &str) -> PgWireError {
    let message = format!("column \"{column}\" is an array of arrays, which FoamDB sends in text format only");
    user_error(&FoamError::Query { message, sqlstate: foam_common::SqlState::FeatureNotSupported })
}

/// A FoamDB error as the client sees it: SQLSTATE plus message.
pub(crate) fn user_error(error: &FoamError) -> PgWireError {
    PgWireError::UserError(Box::new(ErrorInfo::new("ERROR".into(), error.sqlstate().code().into(), error.to_string())))
}

#[async_trait]
impl SimpleQueryHandler for FoamPgHandler {
    async fn do_query<C>(&self, client: &mut C, query: &str) -> PgWireResult<Vec<Response>>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let session = self.session(client);
        let running = self.start(client, query);
        let cancel = cancel_signal(client).await;
        let mut responses = Vec::new();
        let results = std::panic::AssertUnwindSafe(session.execute_all(query, cancel)).catch_unwind().await;
        let results = results.unwrap_or_else(|payload| vec![Err(statement_panicked(payload.as_ref()))]);
        // Before the statements' answers (PostgreSQL sends each before its
        // own; the statements of one query string have all run here).
        send_notices(client, &session).await?;
        for result in results {
            self.record(&result, query);
            let response = result.map_err(|e| user_error(&e)).and_then(|output| {
                forget_statements(client, &output);
                self.respond(client, output, &Format::UnifiedText, &running)
            });
            match response {
                Ok(response) => responses.push(response),
                Err(PgWireError::UserError(info)) => {
                    responses.push(Response::Error(info));
                    break;
                }
                Err(other) => return Err(other),
            }
        }
        report_changes(client, &session).await?;
        Ok(responses)
    }
}

/// A NoticeResponse for each NOTICE or WARNING the session's statements
/// raised (`DROP TABLE IF EXISTS` of no table, `BEGIN` in a block).
async fn send_notices<C>(client: &mut C, session: &FoamSession) -> PgWireResult<()>
where
    C: Sink<PgWireBackendMessage> + Unpin + Send,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    for notice in session.take_notices() {
        let info = ErrorInfo::new(notice.severity.to_string(), notice.sqlstate.code().to_string(), notice.message);
        client.send(PgWireBackendMessage::NoticeResponse(info.into())).await?;
    }
    Ok(())
}

/// A ParameterStatus for each reported setting a statement changed
/// (`SET TIME ZONE`), as PostgreSQL sends them before ReadyForQuery.
async fn report_changes<C>(client: &mut C, session: &FoamSession) -> PgWireResult<()>
where
    C: Sink<PgWireBackendMessage> + Unpin + Send,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    for (name, value) in session.changed_reports() {
        client.send(PgWireBackendMessage::ParameterStatus(pgwire::messages::startup::ParameterStatus::new(name.to_string(), value))).await?;
    }
    Ok(())
}

/// A panic while a statement was planned or run (DataFusion's, or a bug of
/// FoamDB's) as that statement's XX000 error: the client keeps its
/// connection, as PostgreSQL answers an internal error.
fn statement_panicked(payload: &(dyn std::any::Any + Send)) -> FoamError {
    tracing::error!("a statement panicked; answered with an internal error");
    FoamError::from(foam_query::exec::panic_safe::panic_error(payload))
}

/// The connection's session, made on its first statement, of the role the
/// startup exchange authenticated.
fn session_of<C: ClientInfo>(client: &C, node: &Arc<NodeContext>, runtime: &Arc<RuntimeEnv>, insecure: bool) -> Arc<FoamSession> {
    client.session_extensions().get_or_insert_with(|| {
        let user = client.metadata().get(pgwire::api::METADATA_USER).cloned().unwrap_or_default();
        let mut session = FoamSession::new(node.clone(), runtime.clone(), &user, insecure);
        // pgjdbc sends its JVM's zone, libpq PGTZ's, as PostgreSQL takes them.
        if let Some(zone) = crate::startup::startup_time_zone(client)
            && let Err(error) = session.start_in_time_zone(&zone)
        {
            tracing::debug!(%error, "startup TimeZone not taken");
        }
        session
    })
}

/// A prepared statement as pgwire stores it.
#[derive(Clone)]
pub struct FoamStatement(Arc<PreparedStatement>);

pub struct FoamQueryParser {
    handler: Arc<FoamPgHandlerRef>,
}

/// The parser needs the handler to find the session; a thin shared reference.
struct FoamPgHandlerRef {
    node: Arc<NodeContext>,
    runtime: Arc<RuntimeEnv>,
    insecure: bool,
    activity: Arc<SqlActivity>,
}

#[async_trait]
impl QueryParser for FoamQueryParser {
    type Statement = FoamStatement;

    async fn parse_sql<C>(&self, client: &C, sql: &str, _types: &[Option<Type>]) -> PgWireResult<Option<Self::Statement>>
    where
        C: ClientInfo + Unpin + Send + Sync,
    {
        let session = session_of(client, &self.handler.node, &self.handler.runtime, self.handler.insecure);
        let prepared = session.prepare(sql).await.map_err(|e| {
            self.handler.activity.failed(e.sqlstate().code());
            user_error(&e)
        })?;
        Ok(Some(FoamStatement(Arc::new(prepared))))
    }

    fn get_parameter_types(&self, statement: &Self::Statement) -> PgWireResult<Vec<Type>> {
        let types = statement.0.parameter_types().map_err(|e| user_error(&e))?;
        types.iter().map(|t| t.as_ref().map(into_pg_type).unwrap_or(Ok(Type::UNKNOWN))).collect()
    }

    fn get_result_schema(&self, statement: &Self::Statement, column_format: Option<&Format>) -> PgWireResult<Vec<FieldInfo>> {
        match statement.0.result_schema() {
            Some(schema) => pg_fields(&schema, column_format.unwrap_or(&Format::UnifiedText), None),
            None => Ok(Vec::new()),
        }
    }
}

#[async_trait]
impl ExtendedQueryHandler for FoamPgHandler {
    type Statement = FoamStatement;
    type QueryParser = FoamQueryParser;

    fn query_parser(&self) -> Arc<Self::QueryParser> {
        Arc::new(FoamQueryParser {
            handler: Arc::new(FoamPgHandlerRef {
                node: self.node.clone(),
                runtime: self.runtime.clone(),
                insecure: self.insecure,
                activity: self.activity.clone(),
            }),
        })
    }

    /// pgwire's Parse, with the statement's name kept for `DISCARD ALL`.
    async fn on_parse<C>(&self, client: &mut C, message: Parse) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let name = message.name.clone().unwrap_or_else(|| pgwire::api::DEFAULT_NAME.to_owned());
        match StoredStatement::parse(client, &message, self.query_parser()).await? {
            Some(statement) => client.portal_store().put_statement(Arc::new(statement)),
            None => client.portal_store().put_empty_statement(&name),
        }
        client.session_extensions().get_or_insert_with(StatementNames::default).0.lock().unwrap_or_else(|p| p.into_inner()).insert(name);
        client.send(PgWireBackendMessage::ParseComplete(ParseComplete::new())).await?;
        Ok(())
    }

    /// Describe of a statement that returns no rows (INSERT, UPDATE, SET ...)
    /// answers its ParameterDescription and NoData, as PostgreSQL does.
    /// pgwire 0.41 sends NoData only when the statement also has no
    /// parameters, and an empty RowDescription otherwise, which pgjdbc takes
    /// for a query returning rows (its executeBatch then counts 0 updates).
    async fn on_describe<C>(&self, client: &mut C, message: Describe) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let name = message.name.as_deref().unwrap_or(pgwire::api::DEFAULT_NAME);
        if message.target_type == TARGET_TYPE_BYTE_STATEMENT
            && let Some(Entry::Value(statement)) = client.portal_store().get_statement(name)
        {
            let described = self.do_describe_statement(client, &statement).await?;
            if described.fields.is_empty() {
                let types = described.parameters.iter().map(|t| t.oid()).collect();
                client.send(PgWireBackendMessage::ParameterDescription(ParameterDescription::new(types))).await?;
                client.send(PgWireBackendMessage::NoData(NoData::new())).await?;
                return Ok(());
            }
        }
        // A cursor DECLARE opened is a portal to PostgreSQL's clients:
        // psycopg 3 describes its server-side cursor's portal by name.
        if message.target_type == TARGET_TYPE_BYTE_PORTAL
            && client.portal_store().get_portal(name).is_none()
            && let Some(schema) = self.session(client).cursor_schema(name).await
        {
            let fields = pg_fields(&schema, &Format::UnifiedText, None)?;
            return pgwire::api::query::send_describe_response(client, &DescribePortalResponse::new(fields)).await;
        }
        self._on_describe(client, message).await
    }

    async fn do_query<C>(&self, client: &mut C, portal: &Portal<Self::Statement>, _max_rows: usize) -> PgWireResult<Response>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let session = self.session(client);
        let prepared = portal.statement.statement.0.clone();
        let running = self.start(client, &prepared.text);
        let types = prepared.parameter_types().map_err(|e| user_error(&e))?;
        let params = if types.is_empty() && portal.parameter_len() == 0 {
            None
        } else {
            // A parameter neither the plan nor the client types (Parse's
            // OIDs; psycopg 3 declares its booleans) cannot be read.
            let declared = |i: usize| portal.statement.parameter_types.get(i).cloned().flatten().is_some_and(|t| t != Type::UNKNOWN);
            if types.iter().enumerate().any(|(i, t)| t.is_none() && !declared(i)) {
                return Err(user_error(&FoamError::InvalidParameter {
                    message: "could not determine the type of every parameter; add casts such as $1::int".into(),
                }));
            }
            let inferred: Vec<Option<&DataType>> = types.iter().map(|t| t.as_ref()).collect();
            Some(text_as_inferred(arrow_pg::datatypes::df::deserialize_parameters(portal, &inferred)?, &inferred))
        };
        let cancel = cancel_signal(client).await;
        let output = std::panic::AssertUnwindSafe(session.execute(&prepared, params, cancel))
            .catch_unwind()
            .await
            .unwrap_or_else(|payload| Err(statement_panicked(payload.as_ref())));
        self.record(&output, &prepared.text);
        send_notices(client, &session).await?;
        let output = output.map_err(|e| user_error(&e))?;
        forget_statements(client, &output);
        report_changes(client, &session).await?;
        self.respond(client, output, &portal.result_column_format, &running)
    }
}

#[async_trait]
impl CopyHandler for FoamPgHandler {
    async fn on_copy_data<C>(&self, client: &mut C, copy_data: CopyData) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        // Never fail here: pgwire would drop the rest of the stream silently.
        // Remember the first error and report it at CopyDone.
        let state = client.session_extensions().get_or_insert_with(CopyState::default);
        let mut pending = state.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(copy) = pending.as_mut()
            && copy.error.is_none()
            && let Some(file) = copy.file.as_mut()
            && let Err(error) = file.write_all(&copy_data.data)
        {
            copy.error = Some(error.to_string());
        }
        Ok(())
    }

    async fn on_copy_done<C>(&self, client: &mut C, _done: CopyDone) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let state = client.session_extensions().get_or_insert_with(CopyState::default);
        let pending = state.0.lock().unwrap_or_else(|p| p.into_inner()).take();
        let Some(mut copy) = pending else {
            return Err(user_error(&FoamError::internal("COPY data ended without a COPY statement")));
        };
        drop(copy.file.take());
        let result = match copy.error.take() {
            Some(message) => Err(FoamError::FileAccess { path: copy.path.display().to_string(), message }),
            None => {
                let path = copy.path.display().to_string();
                self.session(client).copy_in(&copy.target, path).await
            }
        };
        drop(copy);
        let rows = result.map_err(|e| user_error(&e))?;
        client.send(PgWireBackendMessage::CommandComplete(Tag::new("COPY").with_rows(rows as usize).into())).await?;
        Ok(())
    }

    async fn on_copy_fail<C>(&self, client: &mut C, fail: CopyFail) -> PgWireError
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let state = client.session_extensions().get_or_insert_with(CopyState::default);
        drop(state.0.lock().unwrap_or_else(|p| p.into_inner()).take());
        self.session(client).statement_failed();
        user_error(&FoamError::Query { message: format!("COPY from stdin failed: {}", fail.message), sqlstate: foam_common::SqlState::QueryCanceled })
    }
}

/// Text parameters as the string type the statement expects: `arrow_pg`
/// decodes text as `Utf8`, while FoamDB's text columns are `Utf8View`.
fn text_as_inferred(params: datafusion::common::ParamValues, inferred: &[Option<&DataType>]) -> datafusion::common::ParamValues {
    use datafusion::common::{ParamValues, ScalarValue};
    let ParamValues::List(mut values) = params else { return params };
    for (param, inferred) in values.iter_mut().zip(inferred) {
        if let (ScalarValue::Utf8(text), Some(DataType::Utf8View)) = (&param.value, inferred) {
            param.value = ScalarValue::Utf8View(text.clone());
        }
    }
    ParamValues::List(values)
}

