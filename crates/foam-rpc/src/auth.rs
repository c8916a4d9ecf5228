//! The cluster secret: what a node's port asks of every request (RPC, Raft
//! and the query workers alike), so that only processes given the secret —
//! the cluster's nodes and its bulk loaders — can write rows, vote or run
//! plans there. A new cluster's first node makes it and keeps it in its
//! data directory (mode 0600); a node joining is given the file.
//!
//! The secret rides in a header of every request. Without TLS between
//! nodes it is as visible on the wire as the data is: it keeps out whoever
//! reaches the port, not whoever can read the network.
//!
//! ```text
//!   NodeClient / worker channel ──request + x-foam-cluster-secret──▶ node port
//!                                                  check (constant time) ─┴─▶ 16 UNAUTHENTICATED, or the service
//! ```

use std::path::Path;

use foam_common::{FoamError, FoamResult};
use tonic::body::Body;
use tonic::metadata::{AsciiMetadataValue, MetadataValue};
use tonic::transport::Channel;

/// The header that carries the secret.
pub const SECRET_HEADER: &str = "x-foam-cluster-secret";

/// The file in a node's data directory holding the cluster secret.
pub const CLUSTER_SECRET_FILE: &str = "cluster-secret";

/// Random bytes in a secret (hex-encoded in the file and the header).
const SECRET_BYTES: usize = 32;

/// A channel that sends the cluster secret with every request.
pub type SecretChannel = tower::util::BoxCloneSyncService<http::Request<Body>, http::Response<Body>, tonic::transport::Error>;

/// The shared secret of one cluster.
#[derive(Clone)]
pub struct ClusterSecret(AsciiMetadataValue);

impl std::fmt::Debug for ClusterSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClusterSecret(..)")
    }
}

impl ClusterSecret {
    /// A new random secret.
    pub fn generate() -> FoamResult<ClusterSecret> {
        let mut bytes = [0u8; SECRET_BYTES];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes)
            .map_err(|_| FoamError::internal("the system's random number generator failed"))?;
        ClusterSecret::parse(&bytes.iter().map(|b| format!("{b:02x}")).collect::<String>())
    }

    fn parse(text: &str) -> FoamResult<ClusterSecret> {
        let text = text.trim();
        if text.len() < 2 * SECRET_BYTES || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(FoamError::InvalidParameter {
                message: format!("a cluster secret is {} hexadecimal digits (the cluster-secret file of a node of the cluster)", 2 * SECRET_BYTES),
            });
        }
        MetadataValue::try_from(text).map(ClusterSecret).map_err(|e| FoamError::internal(e.to_string()))
    }

    /// The secret in `path` (a `cluster-secret` file).
    pub fn load(path: &Path) -> FoamResult<ClusterSecret> {
        let text = std::fs::read_to_string(path).map_err(|e| FoamError::io(path, e))?;
        ClusterSecret::parse(&text).map_err(|e| FoamError::InvalidParameter { message: format!("{}: {e}", path.display()) })
    }

    /// Writes the secret to a file only its owner may read.
    pub fn save(&self, path: &Path) -> FoamResult<()> {
        let text = self.0.to_str().map_err(|e| FoamError::internal(e.to_string()))?;
        Ok(foam_common::fs::write_with_mode(path, format!("{text}\n").as_bytes(), 0o600)?)
    }

    /// Whether `given` is this secret, compared in constant time.
    fn admits(&self, given: Option<&AsciiMetadataValue>) -> bool {
        let Some(given) = given else { return false };
        let (expected, given) = (self.0.as_bytes(), given.as_bytes());
        expected.len() == given.len() && expected.iter().zip(given).fold(0u8, |diff, (a, b)| diff | (a ^ b)) == 0
    }
}

/// `channel`, sending `secret` (if any) with every request.
pub fn with_secret(channel: Channel, secret: Option<&ClusterSecret>) -> SecretChannel {
    let header = secret.map(|s| http::HeaderValue::from_bytes(s.0.as_bytes()).expect("an ASCII metadata value is a header value"));
    SecretChannel::new(tower::ServiceBuilder::new().map_request(move |mut request: http::Request<Body>| {
        if let Some(header) = &header {
            request.headers_mut().insert(SECRET_HEADER, header.clone());
        }
        request
    }).service(channel))
}

/// The check a node's port makes of every request: the cluster secret, or
/// nothing with `--insecure` (`None`).
#[derive(Clone)]
pub struct SecretCheck(pub Option<ClusterSecret>);

impl tonic::service::Interceptor for SecretCheck {
    fn call(&mut self, request: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        match &self.0 {
            Some(secret) if !secret.admits(request.metadata().get(SECRET_HEADER)) => {
                Err(tonic::Status::unauthenticated("this node accepts only requests carrying its cluster's secret"))
            }
            _ => Ok(request),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use tonic::service::Interceptor;

    fn request(header: Option<&str>) -> tonic::Request<()> {
        let mut request = tonic::Request::new(());
        if let Some(value) = header {
            request.metadata_mut().insert(SECRET_HEADER, value.parse().unwrap());
        }
        request
    }

    #[test]
    fn only_requests_with_the_secret_pass() {
        let secret = ClusterSecret::generate().unwrap();
        let text = secret.0.to_str().unwrap().to_string();
        let mut check = SecretCheck(Some(secret));
        assert!(check.call(request(Some(&text))).is_ok());
        for wrong in [None, Some(""), Some(&text[1..]), Some(&format!("{text}0"))] {
            let refused = check.call(request(wrong)).unwrap_err();
            assert_eq!(refused.code(), tonic::Code::Unauthenticated, "{wrong:?}");
        }
        let other = ClusterSecret::generate().unwrap();
        assert!(check.call(request(Some(other.0.to_str().unwrap()))).is_err());
        assert!(SecretCheck(None).call(request(None)).is_ok(), "--insecure asks nothing");
    }

    #[test]
    fn a_secret_survives_its_file_and_a_bad_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(CLUSTER_SECRET_FILE);
        let secret = ClusterSecret::generate().unwrap();
        secret.save(&path).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        assert!(SecretCheck(Some(ClusterSecret::load(&path).unwrap())).call(request(Some(secret.0.to_str().unwrap()))).is_ok());
        std::fs::write(&path, "short").unwrap();
        let error = ClusterSecret::load(&path).unwrap_err();
        assert!(error.to_string().contains("cluster-secret"), "{error}");
    }
}
