//! The Flight SQL port: gRPC over TLS or, from the node's own machine (or
//! anywhere unless `--require-tls`), plain TCP, told apart by a
//! connection's first byte (a TLS handshake record starts with 0x16, an
//! HTTP/2 preface with `P`). The certificate is the SQL port's.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use arrow_flight::flight_service_server::FlightServiceServer;
use datafusion::execution::runtime_env::RuntimeEnv;
use foam_query::NodeContext;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tonic::transport::server::Connected;

use crate::service::FoamFlightSql;
use crate::sessions::Sessions;

/// The first byte of a TLS handshake record.
const TLS_HANDSHAKE_RECORD: u8 = 0x16;

/// A client's first bytes (and its TLS handshake) must arrive within this.
const HANDSHAKE_SECS: u64 = 10;

/// Connections being set up (first byte, TLS handshake) at once.
const HANDSHAKES_MAX: usize = 64;

/// How the Flight SQL port takes clients.
pub struct FlightSqlConfig {
    /// Any password is taken (`--insecure`).
    pub insecure: bool,
    pub tls: TlsAcceptor,
    /// Refuse plain connections from other machines (`--require-tls`).
    pub tls_required_off_host: bool,
}

/// Serves Flight SQL on `listener` until the process ends.
pub async fn serve(listener: TcpListener, node: Arc<NodeContext>, runtime: Arc<RuntimeEnv>, config: FlightSqlConfig) -> Result<(), tonic::transport::Error> {
    let sessions = Arc::new(Sessions::new(node, runtime, config.insecure));
    let (sender, receiver) = tokio::sync::mpsc::channel::<std::io::Result<Connection>>(HANDSHAKES_MAX);
    let handshakes = Arc::new(tokio::sync::Semaphore::new(HANDSHAKES_MAX));
    let tls = config.tls;
    let required_off_host = config.tls_required_off_host;
    tokio::spawn(async move {
        loop {
            let (socket, peer) = match listener.accept().await {
                Ok(accepted) => accepted,
                Err(error) => {
                    tracing::warn!(%error, "Flight SQL accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    continue;
                }
            };
            let Ok(slot) = handshakes.clone().acquire_owned().await else { return };
            let (tls, sender) = (tls.clone(), sender.clone());
            tokio::spawn(async move {
                let _slot = slot;
                let _ = socket.set_nodelay(true);
                let deadline = std::time::Duration::from_secs(HANDSHAKE_SECS);
                match tokio::time::timeout(deadline, open(socket, &tls)).await {
                    Ok(Ok(connection)) if connection.is_tls() || !required_off_host || peer.ip().is_loopback() => {
                        let _ = sender.send(Ok(connection)).await;
                    }
                    Ok(Ok(_)) => tracing::info!(%peer, "Flight SQL client refused: plain TCP from another machine (--require-tls)"),
                    Ok(Err(error)) => tracing::debug!(%peer, %error, "Flight SQL connection failed to open"),
                    Err(_) => tracing::debug!(%peer, "Flight SQL connection sent nothing in time"),
                }
            });
        }
    });
    let service = FlightServiceServer::new(FoamFlightSql { sessions })
        .max_decoding_message_size(foam_common::limits::RPC_FRAME_BYTES_MAX as usize)
        .max_encoding_message_size(foam_common::limits::RPC_FRAME_BYTES_MAX as usize);
    tonic::transport::Server::builder()
        .add_service(service)
        .serve_with_incoming(tokio_stream::wrappers::ReceiverStream::new(receiver))
        .await
}

/// A plain or TLS connection, by its first byte.
async fn open(socket: TcpStream, tls: &TlsAcceptor) -> std::io::Result<Connection> {
    let mut first = [0u8; 1];
    let read = socket.peek(&mut first).await?;
    if read == 1 && first[0] == TLS_HANDSHAKE_RECORD {
        Ok(Connection::Tls(Box::new(tls.accept(socket).await?)))
    } else {
        Ok(Connection::Plain(socket))
    }
}

/// One client connection of the Flight SQL port.
enum Connection {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::server::TlsStream<TcpStream>>),
}

impl Connection {
    fn is_tls(&self) -> bool {
        matches!(self, Connection::Tls(_))
    }
}

impl Connected for Connection {
    type ConnectInfo = ();

    fn connect_info(&self) -> Self::ConnectInfo {}
}

impl AsyncRead for Connection {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Connection::Plain(socket) => Pin::new(socket).poll_read(cx, buf),
            Connection::Tls(stream) => Pin::new(stream.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Connection {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Connection::Plain(socket) => Pin::new(socket).poll_write(cx, buf),
            Connection::Tls(stream) => Pin::new(stream.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Connection::Plain(socket) => Pin::new(socket).poll_flush(cx),
            Connection::Tls(stream) => Pin::new(stream.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Connection::Plain(socket) => Pin::new(socket).poll_shutdown(cx),
            Connection::Tls(stream) => Pin::new(stream.as_mut()).poll_shutdown(cx),
        }
    }
}
