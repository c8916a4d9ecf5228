//! Clients for other nodes' RPC endpoints, one cached gRPC channel per address.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arrow_flight::decode::FlightRecordBatchStream;
use arrow_flight::error::FlightError;
use arrow_flight::flight_service_client::FlightServiceClient;
use arrow_flight::{Action, FlightData, FlightDescriptor, Ticket};
use bytes::Bytes;
use foam_common::limits::{
    PEER_CONNECT_TIMEOUT_MS, PEER_KEEPALIVE_INTERVAL_MS, PEER_KEEPALIVE_TIMEOUT_MS, RPC_FRAME_BYTES_MAX, RPC_MESSAGE_BYTES_MAX,
};
use foam_common::{FoamError, FoamResult, NodeId};
use futures::{StreamExt, TryStreamExt};
use tonic::transport::Endpoint;

use crate::auth::{ClusterSecret, SecretChannel, with_secret};

use crate::frame;
use crate::messages::{NodeRequest, NodeResponse, ScanRequest, SegmentPart};
use crate::server::{ACTION_TYPE, BatchStream};
use crate::traffic::{CountedStream, Traffic};

/// How this node connects to a peer at `url` (`http://host:port`), for its
/// RPC calls and for the query workers' exchanges alike: a bounded connect
/// time, pings that find a vanished peer within seconds, no Nagle delay, and
/// frames up to [`RPC_FRAME_BYTES_MAX`].
pub fn peer_endpoint(url: &str) -> FoamResult<Endpoint> {
    Ok(Endpoint::from_shared(url.to_string())
        .map_err(|e| FoamError::InvalidParameter { message: format!("bad node address {url}: {e}") })?
        .connect_timeout(Duration::from_millis(PEER_CONNECT_TIMEOUT_MS))
        .http2_keep_alive_interval(Duration::from_millis(PEER_KEEPALIVE_INTERVAL_MS))
        .keep_alive_timeout(Duration::from_millis(PEER_KEEPALIVE_TIMEOUT_MS))
        .keep_alive_while_idle(true)
        .tcp_nodelay(true)
        .max_frame_size(RPC_FRAME_BYTES_MAX))
}

#[derive(Clone)]
pub struct NodeClient {
    node_id: NodeId,
    addr: String,
    inner: FlightServiceClient<SecretChannel>,
    /// Where calls to this peer are counted; `None` for calls to this node itself.
    traffic: Option<Arc<Traffic>>,
}

impl NodeClient {
    /// A client for `addr`, sending `secret` with every call (`None` only
    /// for nodes started `--insecure`); connects lazily, so creating one
    /// never blocks.
    pub fn new(node_id: NodeId, addr: &str, secret: Option<&ClusterSecret>) -> FoamResult<Self> {
        let endpoint = peer_endpoint(&format!("http://{addr}"))?;
        let inner = FlightServiceClient::new(with_secret(endpoint.connect_lazy(), secret))
            .max_decoding_message_size(RPC_MESSAGE_BYTES_MAX)
            .max_encoding_message_size(RPC_MESSAGE_BYTES_MAX);
        Ok(NodeClient { node_id, addr: addr.to_string(), inner, traffic: None })
    }

    /// Counts this client's calls in `traffic`.
    pub fn with_traffic(mut self, traffic: Arc<Traffic>) -> Self {
        self.traffic = Some(traffic);
        self
    }

    pub fn addr(&self) -> &str {
        &self.addr
    }

    pub async fn call(&self, request: &NodeRequest, payload: &[u8]) -> FoamResult<(NodeResponse, Bytes)> {
        self.call_encoded(request, frame::encode(request, payload)?).await
    }

    /// Sends `message`, already framed from `request` and its payload (one
    /// encoding shared by every peer a message goes to).
    pub async fn call_encoded(&self, request: &NodeRequest, message: Bytes) -> FoamResult<(NodeResponse, Bytes)> {
        let timeout = request.timeout();
        match tokio::time::timeout(timeout, self.call_raw(message)).await {
            Ok(result) => result,
            Err(_) => Err(FoamError::NodeUnavailable {
                node_id: self.node_id,
                addr: self.addr.clone(),
                message: format!("no answer within {} ms", timeout.as_millis()),
            }),
        }
    }

    /// Sends an already framed request body (tests use it to send garbage).
    pub async fn call_raw(&self, body: Bytes) -> FoamResult<(NodeResponse, Bytes)> {
        if let Some(traffic) = &self.traffic {
            traffic.sent(self.node_id, 1, body.len() as u64);
        }
        let action = Action { r#type: ACTION_TYPE.into(), body };
        let mut client = self.inner.clone();
        let mut results = match client.do_action(action.clone()).await {
            Err(status) if never_sent(&status) => client.do_action(action).await,
            other => other,
        }
        .map_err(|s| self.error_of(s))?
        .into_inner();
        let result = results
            .message()
            .await
            .map_err(|s| self.error_of(s))?
            .ok_or_else(|| FoamError::internal(format!("node {} sent an empty reply", self.node_id)))?;
        if let Some(traffic) = &self.traffic {
            traffic.received(self.node_id, 1, result.body.len() as u64);
        }
        frame::decode(&result.body)
    }

    /// Streams one segment file to this node: `request` (a `StageSegment`)
    /// opens the stream, then come `parts`, the file's pieces and its trailer.
    /// Returns the node's answer once it has checked and staged the file. No
    /// overall timeout, unlike [`NodeClient::call`]: the stream lasts as long
    /// as the loader takes to build the segment, and a peer that dies is
    /// noticed by the connection's keepalive.
    pub async fn put_segment(
        &self,
        request: &NodeRequest,
        parts: impl futures::Stream<Item = SegmentPart> + Send + 'static,
    ) -> FoamResult<NodeResponse> {
        let header = frame::encode(request, &[])?;
        let (traffic, node_id) = (self.traffic.clone(), self.node_id);
        let count = move |data: &FlightData| {
            if let Some(traffic) = &traffic {
                let descriptor = data.flight_descriptor.as_ref().map_or(0, |d| d.cmd.len());
                traffic.sent(node_id, 1, (descriptor + data.data_body.len() + data.app_metadata.len()) as u64);
            }
        };
        let first = FlightData { flight_descriptor: Some(FlightDescriptor::new_cmd(header)), ..Default::default() };
        let messages = futures::stream::once(async move { first })
            .chain(parts.map(|part| match part {
                SegmentPart::Chunk(bytes) => FlightData { data_body: bytes, ..Default::default() },
                // A trailer of plain numbers always encodes.
                SegmentPart::End(trailer) => {
                    FlightData { app_metadata: serde_json::to_vec(&trailer).unwrap_or_default().into(), ..Default::default() }
                }
            }))
            .inspect(count);
        let mut client = self.inner.clone();
        let mut results = client.do_put(messages).await.map_err(|s| self.error_of(s))?.into_inner();
        let result = results
            .message()
            .await
            .map_err(|s| self.error_of(s))?
            .ok_or_else(|| FoamError::internal(format!("node {} sent no answer to a segment", self.node_id)))?;
        let (response, _): (NodeResponse, Bytes) = frame::decode(&result.app_metadata)?;
        Ok(response)
    }

    /// Streams the committed rows of one partition from this node.
    pub async fn scan(&self, request: &ScanRequest) -> FoamResult<BatchStream> {
        let ticket = serde_json::to_vec(request).map_err(|e| FoamError::internal(e.to_string()))?;
        let mut client = self.inner.clone();
        let ticket = Ticket { ticket: ticket.into() };
        let stream = match client.do_get(ticket.clone()).await {
            Err(status) if never_sent(&status) => client.do_get(ticket).await,
            other => other,
        }
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
        Ok(match &self.traffic {
            Some(traffic) => CountedStream::new(batches.boxed(), traffic.clone(), self.node_id).boxed(),
            None => batches.boxed(),
        })
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
            tonic::Code::Unauthenticated => FoamError::Remote {
                sqlstate: foam_common::SqlState::InvalidAuthorization,
                message: format!("node {} at {} refused this process: {}", self.node_id, self.addr, status.message()),
            },
            _ => FoamError::Remote { sqlstate: foam_common::SqlState::InternalError, message: status.message().to_string() },
        }
    }
}

/// A call that failed before it reached the peer: the channel's last
/// connection attempt failed (tonic reports that once, on the next call, even
/// when the peer is back), so the call can be sent again whatever it does.
fn never_sent(status: &tonic::Status) -> bool {
    status.code() == tonic::Code::Unavailable && status.message().contains("tcp connect error")
}

/// The clients of all peers, created on first use and reused after.
pub struct NodeClients {
    clients: Mutex<HashMap<(NodeId, String), NodeClient>>,
    /// This node and its traffic counters, when calls are counted.
    counted: Option<(NodeId, Arc<Traffic>)>,
    /// What every call carries (`auth.rs`).
    secret: Option<ClusterSecret>,
}

impl NodeClients {
    /// Clients whose calls carry `secret`.
    pub fn new(secret: Option<ClusterSecret>) -> Self {
        NodeClients { clients: Mutex::default(), counted: None, secret }
    }

    /// Clients of `local`'s peers whose calls are counted in `traffic`.
    pub fn counted(local: NodeId, traffic: Arc<Traffic>, secret: Option<ClusterSecret>) -> Self {
        NodeClients { clients: Mutex::default(), counted: Some((local, traffic)), secret }
    }

    /// The secret these clients send.
    pub fn secret(&self) -> Option<&ClusterSecret> {
        self.secret.as_ref()
    }

    /// The traffic counters these clients feed, if any.
    pub fn traffic(&self) -> Option<&Arc<Traffic>> {
        self.counted.as_ref().map(|(_, t)| t)
    }

    pub fn get(&self, node_id: NodeId, addr: &str) -> FoamResult<NodeClient> {
        let mut clients = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(client) = clients.get(&(node_id, addr.to_string())) {
            return Ok(client.clone());
        }
        let mut client = NodeClient::new(node_id, addr, self.secret.as_ref())?;
        if let Some((local, traffic)) = &self.counted
            && *local != node_id
        {
            client = client.with_traffic(traffic.clone());
        }
        clients.insert((node_id, addr.to_string()), client.clone());
        Ok(client)
    }
}

pub type SharedClients = Arc<NodeClients>;
