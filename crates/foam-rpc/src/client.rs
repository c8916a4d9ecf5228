//! Clients for other nodes' RPC endpoints, one cached gRPC channel per address.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arrow_flight::decode::FlightRecordBatchStream;
use arrow_flight::error::FlightError;
use arrow_flight::flight_service_client::FlightServiceClient;
use arrow_flight::{Action, Ticket};
use bytes::Bytes;
use foam_common::limits::{PEER_CONNECT_TIMEOUT_MS, RPC_MESSAGE_BYTES_MAX};
use foam_common::{FoamError, FoamResult, NodeId};
use futures::{StreamExt, TryStreamExt};
use tonic::transport::{Channel, Endpoint};

use crate::frame;
use crate::messages::{NodeRequest, NodeResponse, ScanRequest};
use crate::server::{ACTION_TYPE, BatchStream};

#[derive(Clone)]
pub struct NodeClient {
    node_id: NodeId,
    addr: String,
    inner: FlightServiceClient<Channel>,
}

impl NodeClient {
    /// A client for `addr`; connects lazily, so creating one never blocks.
    pub fn new(node_id: NodeId, addr: &str) -> FoamResult<Self> {
        let endpoint = Endpoint::from_shared(format!("http://{addr}"))
            .map_err(|e| FoamError::InvalidParameter { message: format!("bad node address {addr}: {e}") })?
            .connect_timeout(Duration::from_millis(PEER_CONNECT_TIMEOUT_MS))
            .tcp_nodelay(true);
        let inner = FlightServiceClient::new(endpoint.connect_lazy())
            .max_decoding_message_size(RPC_MESSAGE_BYTES_MAX)
            .max_encoding_message_size(RPC_MESSAGE_BYTES_MAX);
        Ok(NodeClient { node_id, addr: addr.to_string(), inner })
    }

    pub fn addr(&self) -> &str {
        &self.addr
    }

    pub async fn call(&self, request: &NodeRequest, payload: &[u8]) -> FoamResult<(NodeResponse, Bytes)> {
        self.call_raw(frame::encode(request, payload)?).await
    }

    /// Sends an already framed request body (tests use it to send garbage).
    pub async fn call_raw(&self, body: Bytes) -> FoamResult<(NodeResponse, Bytes)> {
        let action = Action { r#type: ACTION_TYPE.into(), body };
        let mut client = self.inner.clone();
        let mut results = client.do_action(action).await.map_err(|s| self.error_of(s))?.into_inner();
        let result = results
            .message()
            .await
            .map_err(|s| self.error_of(s))?
            .ok_or_else(|| FoamError::internal(format!("node {} sent an empty reply", self.node_id)))?;
        frame::decode(&result.body)
    }

    /// Streams the committed rows of one partition from this node.
    pub async fn scan(&self, request: &ScanRequest) -> FoamResult<BatchStream> {
        let ticket = serde_json::to_vec(request).map_err(|e| FoamError::internal(e.to_string()))?;
        let mut client = self.inner.clone();
        let stream = client
            .do_get(Ticket { ticket: ticket.into() })
            .await
            .map_err(|s| self.error_of(s))?
            .into_inner();
        let this = self.clone();
        let batches = FlightRecordBatchStream::new_from_flight_data(stream.map_err(|s| FlightError::Tonic(Box::new(s))))
            .map(move |item| {
                item.map_err(|e| match e {
                    FlightError::Tonic(status) => this.error_of(*status),
                    other => FoamError::internal(format!("scan from node {}: {other}", this.node_id)),
                })
            });
        Ok(batches.boxed())
    }

    /// Rebuilds the error a peer sent, or names the peer when it could not be reached.
    fn error_of(&self, status: tonic::Status) -> FoamError {
        match status.code() {
            tonic::Code::Internal if status.message().contains('|') => FoamError::from_wire(status.message()),
            tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::Cancelled | tonic::Code::DeadlineExceeded => {
                FoamError::NodeUnavailable {
                    node_id: self.node_id,
                    addr: self.addr.clone(),
                    message: status.message().to_string(),
                }
            }
            _ => FoamError::Remote { sqlstate: "XX000".into(), message: status.message().to_string() },
        }
    }
}

/// The clients of all peers, created on first use and reused after.
#[derive(Default)]
pub struct NodeClients {
    clients: Mutex<HashMap<(NodeId, String), NodeClient>>,
}

impl NodeClients {
    pub fn get(&self, node_id: NodeId, addr: &str) -> FoamResult<NodeClient> {
        let mut clients = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(client) = clients.get(&(node_id, addr.to_string())) {
            return Ok(client.clone());
        }
        let client = NodeClient::new(node_id, addr)?;
        clients.insert((node_id, addr.to_string()), client.clone());
        Ok(client)
    }
}

pub type SharedClients = Arc<NodeClients>;
