//! The query workers' connections to every node: one HTTP/2 channel per node,
//! opened on first use and shared by every query and session of this node.
//!
//! The exchanges between stages (`NetworkShuffleExec`, `NetworkCoalesceExec`)
//! and the plans sent to each task ride on these channels. They use the same
//! endpoint settings as the node's RPC clients (`foam_rpc::peer_endpoint`):
//! datafusion-distributed's own channels would keep HTTP/2's 16 KiB frames,
//! and a node receiving a shuffle would read its socket 16 KiB at a time.
//!
//! ```text
//!   FoamChannelResolver (mod.rs) ──▶ WorkerChannels::get(node, url) ──▶ tonic Channel ──▶ peer's worker
//! ```
//! A failed connect is not kept: the next query to that node tries again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use foam_common::{FoamError, FoamResult, NodeId};
use tokio::sync::OnceCell;
use foam_rpc::ClusterSecret;
use foam_rpc::auth::SecretChannel;
use url::Url;

/// One lazily opened channel per worker URL, each sending the cluster
/// secret with every request.
#[derive(Default)]
pub struct WorkerChannels {
    channels: Mutex<HashMap<Url, Arc<OnceCell<SecretChannel>>>>,
    secret: Option<ClusterSecret>,
}

impl WorkerChannels {
    /// Channels that send `secret` (`None` for nodes started `--insecure`).
    pub fn new(secret: Option<ClusterSecret>) -> Self {
        WorkerChannels { channels: Mutex::default(), secret }
    }

    /// The channel to the worker at `url` (of node `node_id`, `None` for a
    /// node no longer in the catalog), connecting first if no query has yet.
    /// Concurrent first calls wait for one connect.
    pub async fn get(&self, node_id: Option<NodeId>, url: &Url) -> FoamResult<SecretChannel> {
        let cell = self.channels.lock().expect("worker channel map poisoned").entry(url.clone()).or_default().clone();
        let channel = cell
            .get_or_try_init(|| async {
                let endpoint = foam_rpc::peer_endpoint(url.as_str())?;
                let channel = endpoint.connect().await.map_err(|e| match node_id {
                    Some(node_id) => FoamError::NodeUnavailable {
                        node_id,
                        addr: url.to_string(),
                        message: format!("cannot connect to its query worker: {e}"),
                    },
                    None => FoamError::PlacementChanged {
                        message: format!("the query worker at {url}, of a node that left the cluster, is unreachable: {e}"),
                    },
                })?;
                Ok::<_, FoamError>(foam_rpc::auth::with_secret(channel, self.secret.as_ref()))
            })
            .await?;
        Ok(channel.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_unreachable_worker_is_a_node_unavailable_error_and_is_tried_again() {
        // A port nothing listens on: bind one, note it, close it.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = Url::parse(&format!("http://{}", listener.local_addr().unwrap())).unwrap();
        drop(listener);

        let channels = WorkerChannels::default();
        let error = channels.get(Some(7), &url).await.unwrap_err();
        assert_eq!(error.sqlstate(), "08006", "{error}");
        assert!(error.to_string().contains("query worker"), "{error}");
        // A node gone from the catalog: the statement may be run again.
        let error = channels.get(None, &url).await.unwrap_err();
        assert_eq!(error.sqlstate(), "40001", "{error}");
        assert!(error.to_string().contains("left the cluster"), "{error}");

        // The failure is not cached: once something listens there, it connects
        // (the kernel completes the TCP handshake and takes HTTP/2's preface).
        let _listener = std::net::TcpListener::bind(url.socket_addrs(|| None).unwrap()[0]).unwrap();
        channels.get(Some(7), &url).await.expect("connects once the worker listens");
    }
}
