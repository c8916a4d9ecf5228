//! The Flight service every node serves on its node address, delegating
//! requests to the node's [`NodeHandler`].

use std::pin::Pin;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::error::FlightError;
use arrow_flight::flight_service_server::{FlightService, FlightServiceServer};
use arrow_flight::{
    Action, ActionType, Criteria, Empty, FlightData, FlightDescriptor, FlightInfo, HandshakeRequest,
    HandshakeResponse, PollInfo, PutResult, SchemaResult, Ticket,
};
use async_trait::async_trait;
use bytes::Bytes;
use foam_common::limits::RPC_MESSAGE_BYTES_MAX;
use foam_common::{FoamError, FoamResult};
use futures::stream::BoxStream;
use futures::{Stream, StreamExt, TryStreamExt};
use tonic::{Request, Response, Status, Streaming};

use crate::frame;
use crate::messages::{NodeRequest, NodeResponse, ScanRequest, SegmentPart};

/// The name of the one Flight action FoamDB uses; the body says what is asked.
pub const ACTION_TYPE: &str = "foam";

pub type BatchStream = BoxStream<'static, FoamResult<RecordBatch>>;

#[async_trait]
pub trait NodeHandler: Send + Sync + 'static {
    async fn handle(&self, request: NodeRequest, payload: Bytes) -> FoamResult<(NodeResponse, Bytes)>;
    async fn scan(&self, request: ScanRequest) -> FoamResult<(SchemaRef, BatchStream)>;
    /// A stream opened by `request` (a bulk loader's `StageSegment`) whose
    /// `parts` follow; the answer goes back when the stream is done.
    async fn put(&self, request: NodeRequest, parts: BoxStream<'static, FoamResult<SegmentPart>>) -> FoamResult<NodeResponse>;
}

pub fn node_flight_server<H: NodeHandler>(handler: Arc<H>) -> FlightServiceServer<FlightAdapter<H>> {
    FlightServiceServer::new(FlightAdapter { handler })
        .max_decoding_message_size(RPC_MESSAGE_BYTES_MAX)
        .max_encoding_message_size(RPC_MESSAGE_BYTES_MAX)
}

pub struct FlightAdapter<H> {
    handler: Arc<H>,
}

/// Carries a FoamError to the peer with its SQLSTATE (see FoamError::to_wire).
pub fn status_of(error: &FoamError) -> Status {
    Status::internal(error.to_wire())
}

type ResultStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

fn malformed_put(what: &str) -> FoamError {
    FoamError::InvalidParameter { message: format!("malformed segment stream: {what}") }
}

fn unsupported<T>(what: &str) -> Result<T, Status> {
    Err(Status::unimplemented(format!("FoamDB nodes do not serve Flight {what}")))
}

#[async_trait]
impl<H: NodeHandler> FlightService for FlightAdapter<H> {
    type HandshakeStream = ResultStream<HandshakeResponse>;
    type ListFlightsStream = ResultStream<FlightInfo>;
    type DoGetStream = ResultStream<FlightData>;
    type DoPutStream = ResultStream<PutResult>;
    type DoExchangeStream = ResultStream<FlightData>;
    type DoActionStream = ResultStream<arrow_flight::Result>;
    type ListActionsStream = ResultStream<ActionType>;

    async fn handshake(&self, _: Request<Streaming<HandshakeRequest>>) -> Result<Response<Self::HandshakeStream>, Status> {
        unsupported("handshake")
    }

    async fn list_flights(&self, _: Request<Criteria>) -> Result<Response<Self::ListFlightsStream>, Status> {
        unsupported("list_flights")
    }

    async fn get_flight_info(&self, _: Request<FlightDescriptor>) -> Result<Response<FlightInfo>, Status> {
        unsupported("get_flight_info")
    }

    async fn poll_flight_info(&self, _: Request<FlightDescriptor>) -> Result<Response<PollInfo>, Status> {
        unsupported("poll_flight_info")
    }

    async fn get_schema(&self, _: Request<FlightDescriptor>) -> Result<Response<SchemaResult>, Status> {
        unsupported("get_schema")
    }

    async fn do_get(&self, request: Request<Ticket>) -> Result<Response<Self::DoGetStream>, Status> {
        let scan: ScanRequest = serde_json::from_slice(&request.into_inner().ticket)
            .map_err(|e| status_of(&FoamError::InvalidParameter { message: format!("malformed scan ticket: {e}") }))?;
        let (schema, batches) = self.handler.scan(scan).await.map_err(|e| status_of(&e))?;
        let batches = batches.map_err(|e| FlightError::Tonic(Box::new(status_of(&e))));
        let encoded = FlightDataEncoderBuilder::new()
            .with_schema(schema)
            .with_max_flight_data_size(RPC_MESSAGE_BYTES_MAX / 4)
            .build(batches)
            .map_err(|e| match e {
                FlightError::Tonic(status) => *status,
                other => Status::internal(FoamError::internal(other.to_string()).to_wire()),
            });
        Ok(Response::new(Box::pin(encoded)))
    }

    /// A bulk loader's segment stream: the first message's descriptor holds the
    /// framed request, the data bodies that follow are the file's pieces, and a
    /// message with app metadata is its trailer (see `NodeClient::put_segment`).
    async fn do_put(&self, request: Request<Streaming<FlightData>>) -> Result<Response<Self::DoPutStream>, Status> {
        let mut messages = request.into_inner();
        let first = messages.message().await?.ok_or_else(|| status_of(&malformed_put("it is empty")))?;
        let header = first.flight_descriptor.map(|d| d.cmd).unwrap_or_default();
        let (request, _): (NodeRequest, Bytes) = frame::decode(&header).map_err(|e| status_of(&e))?;
        let parts = messages
            .map(|message| {
                let data = message.map_err(|status| malformed_put(&format!("it broke off: {}", status.message())))?;
                if data.app_metadata.is_empty() {
                    return Ok(SegmentPart::Chunk(data.data_body));
                }
                let trailer = serde_json::from_slice(&data.app_metadata).map_err(|e| malformed_put(&format!("bad trailer: {e}")))?;
                Ok(SegmentPart::End(trailer))
            })
            .boxed();
        let response = self.handler.put(request, parts).await.map_err(|e| status_of(&e))?;
        let app_metadata = frame::encode(&response, &[]).map_err(|e| status_of(&e))?;
        let result = PutResult { app_metadata };
        Ok(Response::new(Box::pin(futures::stream::once(async move { Ok(result) }))))
    }

    async fn do_exchange(&self, _: Request<Streaming<FlightData>>) -> Result<Response<Self::DoExchangeStream>, Status> {
        unsupported("do_exchange")
    }

    async fn do_action(&self, request: Request<Action>) -> Result<Response<Self::DoActionStream>, Status> {
        let action = request.into_inner();
        if action.r#type != ACTION_TYPE {
            return Err(status_of(&FoamError::InvalidParameter {
                message: format!("unknown action type \"{}\"", action.r#type),
            }));
        }
        let (request, payload): (NodeRequest, Bytes) = frame::decode(&action.body).map_err(|e| status_of(&e))?;
        let (response, payload) = self.handler.handle(request, payload).await.map_err(|e| status_of(&e))?;
        let body = frame::encode(&response, &payload).map_err(|e| status_of(&e))?;
        let result = arrow_flight::Result { body };
        Ok(Response::new(Box::pin(futures::stream::once(async move { Ok(result) }))))
    }

    async fn list_actions(&self, _: Request<Empty>) -> Result<Response<Self::ListActionsStream>, Status> {
        let action = ActionType { r#type: ACTION_TYPE.into(), description: "FoamDB node request".into() };
        Ok(Response::new(Box::pin(futures::stream::once(async move { Ok(action) }))))
    }
}

/// The connections a gRPC server accepts on `listener`, with Nagle's
/// algorithm off. tonic ignores its own `tcp_nodelay` setting for an incoming
/// stream, and a stage's small replies held back by Nagle against the peer's
/// delayed ACKs cost tens of milliseconds per exchange.
pub fn nodelay_incoming(
    listener: tokio::net::TcpListener,
) -> impl futures::Stream<Item = std::io::Result<tokio::net::TcpStream>> + Send + 'static {
    use futures::StreamExt;
    tokio_stream::wrappers::TcpListenerStream::new(listener).map(|stream| {
        let stream = stream?;
        stream.set_nodelay(true)?;
        Ok(stream)
    })
}
