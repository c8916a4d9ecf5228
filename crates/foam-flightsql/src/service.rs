//! The Flight SQL service: what each Flight SQL command does with a
//! session.
//!
//! A query runs when the client asks for its `FlightInfo` (so errors come
//! back there, and it is planned once); its rows wait in the session for
//! the one ticket the answer carries, and stream from `DoGet` as Arrow
//! record batches, unconverted. Updates run in `DoPut`. A prepared
//! statement's rows of bound parameters run one execution each, inside one
//! transaction (the session's block if it has one): all rows apply or none.
//! `BeginTransaction` and `EndTransaction` open and end the session's
//! transaction block, as BEGIN and COMMIT or ROLLBACK do. The metadata
//! commands (catalogs, schemas, tables, primary keys, SQL info) answer
//! from the catalog.

use std::pin::Pin;
use std::sync::{Arc, OnceLock};

use arrow::array::{Int32Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::ipc::writer::IpcWriteOptions;
use arrow_flight::decode::FlightRecordBatchStream;
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::error::FlightError;
use arrow_flight::sql::metadata::{SqlInfoData, SqlInfoDataBuilder};
use arrow_flight::sql::server::{FlightSqlService, PeekableFlightDataStream};
use arrow_flight::sql::{
    ActionBeginTransactionRequest, ActionBeginTransactionResult, ActionClosePreparedStatementRequest, ActionCreatePreparedStatementRequest,
    ActionEndTransactionRequest, ActionCreatePreparedStatementResult, Any, CommandGetCatalogs,
    CommandGetDbSchemas, CommandGetPrimaryKeys, CommandGetSqlInfo, CommandGetTableTypes, CommandGetTables, CommandPreparedStatementQuery,
    CommandPreparedStatementUpdate, CommandStatementQuery, CommandStatementUpdate, DoPutPreparedStatementResult, ProstMessageExt, SqlInfo,
    TicketStatementQuery,
};
use arrow_flight::{Action, FlightDescriptor, FlightEndpoint, FlightInfo, HandshakeRequest, HandshakeResponse, IpcMessage, SchemaAsIpc, Ticket};
use base64::Engine;
use datafusion::common::ParamValues;
use foam_common::{FoamError, FoamResult};
use foam_query::StatementOutput;
use futures::{Stream, StreamExt, TryStreamExt};
use prost::Message;
use tonic::metadata::MetadataValue;
use tonic::{Request, Response, Status, Streaming};

use crate::sessions::{FlightSession, Sessions};
use crate::status::status;

/// The catalog and schema FoamDB's tables are in, as Flight SQL names them.
const CATALOG: &str = "foam";
const SCHEMA: &str = foam_query::catalog::provider::SCHEMA_NAME;

/// The transaction id `BeginTransaction` answers: a session has one block
/// at a time, so the id names the session's.
const TRANSACTION_ID: &str = "block";

type DoGetStream = Pin<Box<dyn Stream<Item = Result<arrow_flight::FlightData, Status>> + Send + 'static>>;

/// The Flight SQL service of one node.
pub struct FoamFlightSql {
    pub(crate) sessions: Arc<Sessions>,
}

impl FoamFlightSql {
    /// The session the call's bearer token names.
    fn session<T>(&self, request: &Request<T>) -> Result<Arc<FlightSession>, Status> {
        let header = request.metadata().get("authorization").and_then(|value| value.to_str().ok()).unwrap_or_default();
        let Some(token) = header.strip_prefix("Bearer ") else {
            return Err(Status::unauthenticated("no bearer token: authenticate with a handshake first (user and password, as on the SQL port) (SQLSTATE 28000)"));
        };
        self.sessions.session(token.trim()).map_err(|e| status(&e))
    }

    /// Runs `sql` in `session`, one statement.
    async fn run(&self, session: &FlightSession, sql: &str) -> FoamResult<StatementOutput> {
        let _turn = session.turn.lock().await;
        let prepared = session.session.prepare(sql).await?;
        session.session.execute(&prepared, None, None).await
    }

    /// A `FlightInfo` whose one ticket fetches `output`, kept in `session`.
    fn answer(&self, session: &FlightSession, output: StatementOutput, descriptor: FlightDescriptor) -> Result<FlightInfo, Status> {
        let (schema, records) = match &output {
            StatementOutput::Rows { schema, .. } | StatementOutput::Returned { schema, .. } => (client_schema(schema), -1),
            StatementOutput::Command { rows, .. } => (Arc::new(Schema::empty()), rows.map_or(-1, |n| n as i64)),
            StatementOutput::CopyIn(_) | StatementOutput::CopyOut { .. } => {
                return Err(status(&FoamError::FeatureNotSupported {
                    feature: "COPY over Flight SQL (a query's rows come back as Arrow; load rows with INSERT and bound parameters)".into(),
                }));
            }
        };
        let handle = session.keep_result(output);
        let ticket = Ticket::new(TicketStatementQuery { statement_handle: handle.to_string().into() }.as_any().encode_to_vec());
        let info = FlightInfo::new()
            .try_with_schema(&schema)
            .map_err(|e| Status::internal(e.to_string()))?
            .with_endpoint(FlightEndpoint::new().with_ticket(ticket))
            .with_descriptor(descriptor)
            .with_total_records(records)
            .with_ordered(true);
        Ok(info)
    }

    /// A `FlightInfo` whose ticket is the metadata command itself.
    fn metadata_info(&self, command: Any, schema: &Schema, descriptor: FlightDescriptor) -> Result<Response<FlightInfo>, Status> {
        let info = FlightInfo::new()
            .try_with_schema(schema)
            .map_err(|e| Status::internal(e.to_string()))?
            .with_endpoint(FlightEndpoint::new().with_ticket(Ticket::new(command.encode_to_vec())))
            .with_descriptor(descriptor);
        Ok(Response::new(info))
    }

    /// The rows of parameters a `DoPut` sends, or those bound before.
    async fn bound_rows(&self, session: &FlightSession, handle: u64, request: Request<PeekableFlightDataStream>) -> Result<Vec<ParamValues>, Status> {
        let prepared = session.prepared(handle).map_err(|e| status(&e))?;
        let batches: Vec<RecordBatch> = FlightRecordBatchStream::new_from_flight_data(request.into_inner().map_err(FlightError::from))
            .try_collect()
            .await
            .map_err(Status::from)?;
        if batches.is_empty() {
            return Ok(prepared.bound);
        }
        let types = prepared.statement.parameter_types().map_err(|e| status(&e))?;
        crate::params::rows(&batches, &types).map_err(|e| status(&e))
    }
}

/// A result's schema as the client sees it (`select_names.rs`).
fn client_schema(schema: &SchemaRef) -> SchemaRef {
    Arc::new(foam_query::frontend::select_names::client_schema(schema))
}

/// `batches` as a `DoGet` answer.
fn flight_stream(schema: SchemaRef, batches: impl Stream<Item = Result<RecordBatch, FlightError>> + Send + 'static) -> Response<DoGetStream> {
    let stream = FlightDataEncoderBuilder::new().with_schema(schema).build(batches).map_err(Status::from);
    Response::new(Box::pin(stream))
}

/// One metadata batch as a `DoGet` answer.
fn one_batch<E: std::fmt::Display>(batch: Result<RecordBatch, E>) -> Result<Response<DoGetStream>, Status> {
    let batch = batch.map_err(|e| Status::internal(e.to_string()))?;
    Ok(flight_stream(batch.schema(), futures::stream::once(async { Ok(batch) })))
}

/// What `GetSqlInfo` answers.
fn sql_info() -> &'static SqlInfoData {
    static INFO: OnceLock<SqlInfoData> = OnceLock::new();
    INFO.get_or_init(|| {
        let mut builder = SqlInfoDataBuilder::new();
        builder.append(SqlInfo::FlightSqlServerName, "FoamDB");
        builder.append(SqlInfo::FlightSqlServerVersion, env!("CARGO_PKG_VERSION"));
        // The Arrow format version of Schema.fbs.
        builder.append(SqlInfo::FlightSqlServerArrowVersion, "1.3");
        builder.append(SqlInfo::FlightSqlServerReadOnly, false);
        builder.append(SqlInfo::FlightSqlServerSql, true);
        builder.append(SqlInfo::FlightSqlServerSubstrait, false);
        // Transactions (the session's BEGIN ... COMMIT block); savepoints
        // only in SQL.
        builder.append(SqlInfo::FlightSqlServerTransaction, arrow_flight::sql::SqlSupportedTransaction::Transaction as i32);
        builder.append(SqlInfo::FlightSqlServerCancel, false);
        builder.append(SqlInfo::SqlDdlCatalog, false);
        builder.append(SqlInfo::SqlDdlSchema, false);
        builder.append(SqlInfo::SqlDdlTable, true);
        builder.append(SqlInfo::SqlIdentifierQuoteChar, "\"");
        builder.append(SqlInfo::SqlIdentifierCase, 2i32); // lowercase, as PostgreSQL folds
        builder.append(SqlInfo::SqlQuotedIdentifierCase, 3i32); // case sensitive
        builder.build().expect("fixed SQL info builds")
    })
}

#[tonic::async_trait]
impl FlightSqlService for FoamFlightSql {
    type FlightService = FoamFlightSql;

    async fn do_handshake(
        &self,
        request: Request<Streaming<HandshakeRequest>>,
    ) -> Result<Response<Pin<Box<dyn Stream<Item = Result<HandshakeResponse, Status>> + Send>>>, Status> {
        let header = request.metadata().get("authorization").and_then(|value| value.to_str().ok()).unwrap_or_default();
        let Some(encoded) = header.strip_prefix("Basic ") else {
            return Err(Status::unauthenticated("the handshake needs basic authentication: a user and password, as on the SQL port (SQLSTATE 28000)"));
        };
        // Go's Flight client sends the credentials unpadded, others padded.
        let engine = base64::engine::GeneralPurpose::new(
            &base64::alphabet::STANDARD,
            base64::engine::GeneralPurposeConfig::new().with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
        );
        let decoded = engine.decode(encoded.trim()).ok().and_then(|bytes| String::from_utf8(bytes).ok());
        let Some((user, password)) = decoded.as_deref().and_then(|text| text.split_once(':')) else {
            return Err(Status::invalid_argument("the basic authentication header is not base64 of user:password (SQLSTATE 28000)"));
        };
        let token = self.sessions.log_in(user, password).await.map_err(|e| status(&e))?;
        tracing::info!(user, "Flight SQL session opened");
        let bearer = MetadataValue::try_from(format!("Bearer {token}")).map_err(|e| Status::internal(e.to_string()))?;
        let answer = HandshakeResponse { protocol_version: 0, payload: token.into() };
        let mut response: Response<Pin<Box<dyn Stream<Item = Result<HandshakeResponse, Status>> + Send>>> =
            Response::new(Box::pin(futures::stream::once(async { Ok(answer) })));
        response.metadata_mut().insert("authorization", bearer);
        Ok(response)
    }

    async fn get_flight_info_statement(&self, query: CommandStatementQuery, request: Request<FlightDescriptor>) -> Result<Response<FlightInfo>, Status> {
        let session = self.session(&request)?;
        let output = self.run(&session, &query.query).await.map_err(|e| status(&e))?;
        Ok(Response::new(self.answer(&session, output, request.into_inner())?))
    }

    async fn get_flight_info_prepared_statement(
        &self,
        query: CommandPreparedStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let session = self.session(&request)?;
        let prepared = session.prepared(handle(&query.prepared_statement_handle)?).map_err(|e| status(&e))?;
        let params = match prepared.bound.len() {
            0 => None,
            1 => prepared.bound.into_iter().next(),
            n => {
                return Err(status(&FoamError::FeatureNotSupported { feature: format!("a query with {n} rows of parameters (bind one row per execution)") }));
            }
        };
        let output = {
            let _turn = session.turn.lock().await;
            session.session.execute(&prepared.statement, params, None).await.map_err(|e| status(&e))?
        };
        Ok(Response::new(self.answer(&session, output, request.into_inner())?))
    }

    async fn do_get_statement(&self, ticket: TicketStatementQuery, request: Request<Ticket>) -> Result<Response<DoGetStream>, Status> {
        let session = self.session(&request)?;
        let handle = handle(&ticket.statement_handle)?;
        match session.take_result(handle).map_err(|e| status(&e))? {
            StatementOutput::Rows { schema, stream } | StatementOutput::Returned { schema, stream, .. } => {
                let shown = client_schema(&schema);
                let relabelled = shown.clone();
                let batches = stream.map(move |batch| {
                    batch
                        .and_then(|batch| Ok(RecordBatch::try_new(relabelled.clone(), batch.columns().to_vec())?))
                        .map_err(|e| FlightError::Tonic(Box::new(status(&FoamError::from(e)))))
                });
                Ok(flight_stream(shown, batches))
            }
            _ => Ok(flight_stream(Arc::new(Schema::empty()), futures::stream::empty())),
        }
    }

    async fn do_put_statement_update(&self, command: CommandStatementUpdate, request: Request<PeekableFlightDataStream>) -> Result<i64, Status> {
        let session = self.session(&request)?;
        match self.run(&session, &command.query).await.map_err(|e| status(&e))? {
            StatementOutput::Command { rows, .. } => Ok(rows.map_or(-1, |n| n as i64)),
            StatementOutput::Rows { mut stream, .. } => {
                // A query sent as an update: run to its end, nothing to count.
                while let Some(batch) = stream.next().await {
                    batch.map_err(|e| status(&FoamError::from(e)))?;
                }
                Ok(-1)
            }
            StatementOutput::Returned { mut stream, .. } => {
                // A write with RETURNING sent as an update: one row per row changed.
                let mut rows = 0;
                while let Some(batch) = stream.next().await {
                    rows += batch.map_err(|e| status(&FoamError::from(e)))?.num_rows() as i64;
                }
                Ok(rows)
            }
            _ => Err(status(&FoamError::FeatureNotSupported { feature: "COPY over Flight SQL".into() })),
        }
    }

    async fn do_action_create_prepared_statement(
        &self,
        query: ActionCreatePreparedStatementRequest,
        request: Request<Action>,
    ) -> Result<ActionCreatePreparedStatementResult, Status> {
        let session = self.session(&request)?;
        let prepared = {
            let _turn = session.turn.lock().await;
            session.session.prepare(&query.query).await.map_err(|e| status(&e))?
        };
        let dataset = prepared.result_schema().map(|schema| client_schema(&schema)).unwrap_or_else(|| Arc::new(Schema::empty()));
        let parameters = crate::params::schema(&prepared.parameter_types().map_err(|e| status(&e))?);
        let handle = session.keep_prepared(prepared).map_err(|e| status(&e))?;
        Ok(ActionCreatePreparedStatementResult {
            prepared_statement_handle: handle.to_string().into(),
            dataset_schema: ipc_schema(&dataset)?,
            parameter_schema: ipc_schema(&parameters)?,
        })
    }

    async fn do_action_close_prepared_statement(&self, query: ActionClosePreparedStatementRequest, request: Request<Action>) -> Result<(), Status> {
        let session = self.session(&request)?;
        session.close_prepared(handle(&query.prepared_statement_handle)?).map_err(|e| status(&e))
    }

    async fn do_put_prepared_statement_query(
        &self,
        query: CommandPreparedStatementQuery,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<DoPutPreparedStatementResult, Status> {
        let session = self.session(&request)?;
        let handle_bytes = query.prepared_statement_handle.clone();
        let handle = handle(&handle_bytes)?;
        let rows = self.bound_rows(&session, handle, request).await?;
        session.bind(handle, rows).map_err(|e| status(&e))?;
        Ok(DoPutPreparedStatementResult { prepared_statement_handle: Some(handle_bytes) })
    }

    async fn do_put_prepared_statement_update(
        &self,
        query: CommandPreparedStatementUpdate,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<i64, Status> {
        let session = self.session(&request)?;
        let handle = handle(&query.prepared_statement_handle)?;
        let rows = self.bound_rows(&session, handle, request).await?;
        let prepared = session.prepared(handle).map_err(|e| status(&e))?;
        let _turn = session.turn.lock().await;
        let foam = &session.session;
        let executions: Vec<Option<ParamValues>> = if rows.is_empty() { vec![None] } else { rows.into_iter().map(Some).collect() };
        // Several rows are one transaction: all apply or none.
        let own_block = executions.len() > 1 && !foam.in_block();
        if own_block {
            first_error(foam.execute_all("BEGIN", None).await)?;
        }
        let mut changed = 0i64;
        for params in executions {
            match foam.execute(&prepared.statement, params, None).await {
                Ok(StatementOutput::Command { rows, .. }) => changed += rows.map_or(0, |n| n as i64),
                Ok(_) => {}
                Err(error) => {
                    if own_block {
                        let _ = foam.execute_all("ROLLBACK", None).await;
                    }
                    return Err(status(&error));
                }
            }
        }
        if own_block {
            first_error(foam.execute_all("COMMIT", None).await)?;
        }
        Ok(changed)
    }

    async fn get_flight_info_catalogs(&self, query: CommandGetCatalogs, request: Request<FlightDescriptor>) -> Result<Response<FlightInfo>, Status> {
        self.session(&request)?;
        let schema = query.clone().into_builder().schema();
        self.metadata_info(query.as_any(), &schema, request.into_inner())
    }

    async fn do_get_catalogs(&self, query: CommandGetCatalogs, request: Request<Ticket>) -> Result<Response<DoGetStream>, Status> {
        self.session(&request)?;
        let mut builder = query.into_builder();
        builder.append(CATALOG);
        one_batch(builder.build())
    }

    async fn get_flight_info_schemas(&self, query: CommandGetDbSchemas, request: Request<FlightDescriptor>) -> Result<Response<FlightInfo>, Status> {
        self.session(&request)?;
        let schema = query.clone().into_builder().schema();
        self.metadata_info(query.as_any(), &schema, request.into_inner())
    }

    async fn do_get_schemas(&self, query: CommandGetDbSchemas, request: Request<Ticket>) -> Result<Response<DoGetStream>, Status> {
        self.session(&request)?;
        let mut builder = query.into_builder();
        builder.append(CATALOG, SCHEMA);
        one_batch(builder.build())
    }

    async fn get_flight_info_tables(&self, query: CommandGetTables, request: Request<FlightDescriptor>) -> Result<Response<FlightInfo>, Status> {
        self.session(&request)?;
        let schema = query.clone().into_builder().schema();
        self.metadata_info(query.as_any(), &schema, request.into_inner())
    }

    async fn do_get_tables(&self, query: CommandGetTables, request: Request<Ticket>) -> Result<Response<DoGetStream>, Status> {
        let session = self.session(&request)?;
        let include_schema = query.include_schema;
        let catalog = session.session.node().catalog.current();
        let mut builder = query.into_builder();
        for table in catalog.tables.values().filter(|t| !is_set_aside(&t.name)) {
            builder.append(CATALOG, SCHEMA, &table.name, "TABLE", &table.arrow_schema()).map_err(|e| Status::internal(e.to_string()))?;
        }
        for view in catalog.views.values().filter(|v| !is_set_aside(&v.name)) {
            // A view's columns are those of its query, planned now (none
            // if this role cannot read it).
            let columns = if include_schema {
                let _turn = session.turn.lock().await;
                let sql = format!("SELECT * FROM {}", foam_query::frontend::modify::quoted(&view.name));
                session.session.prepare(&sql).await.ok().and_then(|p| p.result_schema()).map(|s| client_schema(&s))
            } else {
                None
            };
            let columns = columns.unwrap_or_else(|| Arc::new(Schema::empty()));
            builder.append(CATALOG, SCHEMA, &view.name, "VIEW", &columns).map_err(|e| Status::internal(e.to_string()))?;
        }
        one_batch(builder.build())
    }

    async fn get_flight_info_table_types(&self, query: CommandGetTableTypes, request: Request<FlightDescriptor>) -> Result<Response<FlightInfo>, Status> {
        self.session(&request)?;
        let schema = query.clone().into_builder().schema();
        self.metadata_info(query.as_any(), &schema, request.into_inner())
    }

    async fn do_get_table_types(&self, query: CommandGetTableTypes, request: Request<Ticket>) -> Result<Response<DoGetStream>, Status> {
        self.session(&request)?;
        let mut builder = query.into_builder();
        builder.append("TABLE");
        builder.append("VIEW");
        one_batch(builder.build())
    }

    async fn get_flight_info_primary_keys(&self, query: CommandGetPrimaryKeys, request: Request<FlightDescriptor>) -> Result<Response<FlightInfo>, Status> {
        self.session(&request)?;
        self.metadata_info(query.as_any(), &primary_keys_schema(), request.into_inner())
    }

    async fn do_get_primary_keys(&self, query: CommandGetPrimaryKeys, request: Request<Ticket>) -> Result<Response<DoGetStream>, Status> {
        let session = self.session(&request)?;
        let catalog = session.session.node().catalog.current();
        let mut rows: Vec<(String, String, String, i32)> = Vec::new();
        let named_here = query.catalog.as_deref().is_none_or(|c| c == CATALOG) && query.db_schema.as_deref().is_none_or(|s| s == SCHEMA);
        if let Some(table) = catalog.tables.get(&query.table).filter(|_| named_here) {
            for key in table.unique_keys.iter().filter(|k| k.primary && !k.validating) {
                for (at, column) in key.columns.iter().enumerate() {
                    rows.push((table.name.clone(), column.clone(), key.name.clone(), at as i32 + 1));
                }
            }
        }
        let n = rows.len();
        let batch = RecordBatch::try_new(
            Arc::new(primary_keys_schema()),
            vec![
                Arc::new(StringArray::from(vec![Some(CATALOG); n])),
                Arc::new(StringArray::from(vec![Some(SCHEMA); n])),
                Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.0.as_str()))),
                Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.1.as_str()))),
                Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.2.as_str()))),
                Arc::new(Int32Array::from_iter_values(rows.iter().map(|r| r.3))),
            ],
        );
        one_batch(batch)
    }

    async fn get_flight_info_sql_info(&self, query: CommandGetSqlInfo, request: Request<FlightDescriptor>) -> Result<Response<FlightInfo>, Status> {
        self.session(&request)?;
        let schema = query.clone().into_builder(sql_info()).schema();
        self.metadata_info(query.as_any(), &schema, request.into_inner())
    }

    async fn do_get_sql_info(&self, query: CommandGetSqlInfo, request: Request<Ticket>) -> Result<Response<DoGetStream>, Status> {
        self.session(&request)?;
        one_batch(query.into_builder(sql_info()).build())
    }

    async fn do_action_begin_transaction(&self, _query: ActionBeginTransactionRequest, request: Request<Action>) -> Result<ActionBeginTransactionResult, Status> {
        let session = self.session(&request)?;
        let _turn = session.turn.lock().await;
        first_error(session.session.execute_all("BEGIN", None).await)?;
        // The session holds one block at a time: its id names the session's.
        Ok(ActionBeginTransactionResult { transaction_id: TRANSACTION_ID.into() })
    }

    async fn do_action_end_transaction(&self, query: ActionEndTransactionRequest, request: Request<Action>) -> Result<(), Status> {
        use arrow_flight::sql::EndTransaction;
        let session = self.session(&request)?;
        let sql = match EndTransaction::try_from(query.action) {
            Ok(EndTransaction::Commit) => "COMMIT",
            Ok(EndTransaction::Rollback) => "ROLLBACK",
            _ => return Err(Status::invalid_argument("EndTransaction needs COMMIT or ROLLBACK (SQLSTATE 22023)")),
        };
        let _turn = session.turn.lock().await;
        first_error(session.session.execute_all(sql, None).await)
    }

    async fn register_sql_info(&self, _id: i32, _result: &SqlInfo) {}
}

/// A relation `block_ddl.rs` set aside until its block ends.
fn is_set_aside(name: &str) -> bool {
    name.starts_with("foam_dropped_")
}

/// `GetPrimaryKeys`' fixed schema (Flight SQL's `CommandGetPrimaryKeys`).
fn primary_keys_schema() -> Schema {
    Schema::new(vec![
        Field::new("catalog_name", DataType::Utf8, true),
        Field::new("db_schema_name", DataType::Utf8, true),
        Field::new("table_name", DataType::Utf8, false),
        Field::new("column_name", DataType::Utf8, false),
        Field::new("key_name", DataType::Utf8, true),
        Field::new("key_sequence", DataType::Int32, false),
    ])
}

/// A handle this service gave out (a decimal number).
fn handle(bytes: &[u8]) -> Result<u64, Status> {
    std::str::from_utf8(bytes)
        .ok()
        .and_then(|text| text.parse().ok())
        .ok_or_else(|| Status::invalid_argument("not a handle this node gave out (SQLSTATE 26000)"))
}

/// `schema` as the IPC message Flight SQL carries it in.
fn ipc_schema(schema: &Schema) -> Result<bytes::Bytes, Status> {
    let IpcMessage(bytes) = SchemaAsIpc::new(schema, &IpcWriteOptions::default()).try_into().map_err(|e: arrow::error::ArrowError| Status::internal(e.to_string()))?;
    Ok(bytes)
}

/// The first error of statements run for the client's sake.
fn first_error(outputs: Vec<FoamResult<StatementOutput>>) -> Result<(), Status> {
    match outputs.into_iter().find_map(Result::err) {
        Some(error) => Err(status(&error)),
        None => Ok(()),
    }
}
