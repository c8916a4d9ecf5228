//! TLS on the SQL port: the certificates a node serves and the acceptor
//! pgwire hands each connection that asks for TLS (`sslmode=require` and
//! up). A node uses the operator's certificate (`--tls-cert`, `--tls-key`);
//! without one it makes a CA of its own in `<data-dir>/tls` and a
//! certificate signed by it, so `sslmode=verify-full sslrootcert=<data-dir>/tls/ca.crt`
//! works from the first start. `foam local` makes one CA for its whole
//! cluster and signs every node's certificate with it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use foam_common::fs::write_with_mode;
use foam_common::{FoamError, FoamResult};
use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// The directory, in a data directory, of the certificates made there.
pub const TLS_DIR: &str = "tls";
/// The CA certificate clients verify nodes with (`sslrootcert`).
pub const CA_CERT_FILE: &str = "ca.crt";
const CA_KEY_FILE: &str = "ca.key";
/// A node's certificate (with its CA's after it) and key.
pub const NODE_CERT_FILE: &str = "node.crt";
pub const NODE_KEY_FILE: &str = "node.key";

/// The CA's name; a node certificate's issuer names it.
const CA_NAME: &str = "FoamDB cluster CA";

fn tls_error(what: &str, error: impl std::fmt::Display) -> FoamError {
    FoamError::InvalidParameter { message: format!("{what}: {error}") }
}

fn ca_params() -> CertificateParams {
    let mut params = CertificateParams::default();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, CA_NAME);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    params
}

/// Makes a CA in `dir` (`ca.crt`, and `ca.key` readable only by its owner)
/// unless one is there.
pub fn make_ca(dir: &Path) -> FoamResult<()> {
    if dir.join(CA_KEY_FILE).exists() {
        return Ok(());
    }
    foam_common::fs::create_dir_all(dir)?;
    let key = KeyPair::generate().map_err(|e| tls_error("making a CA key", e))?;
    let cert = ca_params().self_signed(&key).map_err(|e| tls_error("making a CA certificate", e))?;
    write_with_mode(&dir.join(CA_KEY_FILE), key.serialize_pem().as_bytes(), 0o600)?;
    Ok(write_with_mode(&dir.join(CA_CERT_FILE), cert.pem().as_bytes(), 0o644)?)
}

/// Makes a certificate for `hosts` (names or IP addresses) signed by the
/// CA in `ca_dir`, written to `out_dir` as `node.crt` (then the CA's
/// certificate) and `node.key`; returns their paths.
pub fn make_node_certificate(ca_dir: &Path, out_dir: &Path, hosts: &[String]) -> FoamResult<(PathBuf, PathBuf)> {
    let ca_key_pem = std::fs::read_to_string(ca_dir.join(CA_KEY_FILE)).map_err(|e| FoamError::io(ca_dir.join(CA_KEY_FILE), e))?;
    let ca_key = KeyPair::from_pem(&ca_key_pem).map_err(|e| tls_error("reading the CA key", e))?;
    let ca_cert = std::fs::read_to_string(ca_dir.join(CA_CERT_FILE)).map_err(|e| FoamError::io(ca_dir.join(CA_CERT_FILE), e))?;
    let issuer = Issuer::new(ca_params(), ca_key);
    let mut params = CertificateParams::new(hosts.to_vec()).map_err(|e| tls_error("naming the node's hosts", e))?;
    params.distinguished_name.push(DnType::CommonName, hosts.first().map(String::as_str).unwrap_or("foamdb"));
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let key = KeyPair::generate().map_err(|e| tls_error("making a node key", e))?;
    let cert = params.signed_by(&key, &issuer).map_err(|e| tls_error("signing the node certificate", e))?;
    foam_common::fs::create_dir_all(out_dir)?;
    let (cert_path, key_path) = (out_dir.join(NODE_CERT_FILE), out_dir.join(NODE_KEY_FILE));
    write_with_mode(&key_path, key.serialize_pem().as_bytes(), 0o600)?;
    write_with_mode(&cert_path, format!("{}{ca_cert}", cert.pem()).as_bytes(), 0o644)?;
    Ok((cert_path, key_path))
}

/// The names a node's certificate covers: its SQL host (unless it listens
/// on every address), `localhost` and `127.0.0.1`.
pub fn node_hosts(sql_addr: &str) -> Vec<String> {
    let host = sql_addr.rsplit_once(':').map(|(h, _)| h.trim_matches(['[', ']'])).unwrap_or(sql_addr);
    let mut hosts = vec!["localhost".to_string(), "127.0.0.1".to_string()];
    if !["0.0.0.0", "::", "localhost", "127.0.0.1", ""].contains(&host) {
        hosts.insert(0, host.to_string());
    }
    hosts
}

/// The certificate and key a node serves: the operator's, else those in
/// `<data-dir>/tls`, made (with a CA of the node's own) on first start.
pub fn node_certificate(data_dir: &Path, sql_addr: &str, given: Option<(&Path, &Path)>) -> FoamResult<(PathBuf, PathBuf)> {
    if let Some((cert, key)) = given {
        return Ok((cert.to_path_buf(), key.to_path_buf()));
    }
    let dir = data_dir.join(TLS_DIR);
    let (cert, key) = (dir.join(NODE_CERT_FILE), dir.join(NODE_KEY_FILE));
    if cert.exists() && key.exists() {
        return Ok((cert, key));
    }
    make_ca(&dir)?;
    make_node_certificate(&dir, &dir, &node_hosts(sql_addr))
}

/// The TLS acceptor serving `cert` (a PEM chain) with `key`, offering the
/// application protocols `alpn` (gRPC clients ask for `h2`; the SQL port
/// offers none).
pub fn acceptor(cert: &Path, key: &Path, alpn: &[&[u8]]) -> FoamResult<TlsAcceptor> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<_, _>>())
        .map_err(|e| tls_error(&format!("reading {}", cert.display()), e))?;
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| tls_error(&format!("reading {}", key.display()), e))?;
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| tls_error("TLS versions", e))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| tls_error(&format!("the certificate {}", cert.display()), e))?;
    let mut config = config;
    config.alpn_protocols = alpn.iter().map(|protocol| protocol.to_vec()).collect();
    Ok(TlsAcceptor::from(Arc::new(config)))
}


#[cfg(test)]
mod tests {
    use super::*;
    use tokio_rustls::rustls::client::danger::ServerCertVerifier;

    #[test]
    fn a_node_certificate_is_signed_by_its_ca_and_names_its_host() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = node_certificate(dir.path(), "10.1.2.3:5433", None).unwrap();
        acceptor(&cert, &key, &[]).expect("rustls takes the chain and key");
        acceptor(&cert, &key, &[b"h2"]).expect("rustls takes the chain and key with ALPN");
        // Verified as a client would: the chain's first certificate, for
        // the node's address, against the CA.
        let ca = CertificateDer::from_pem_file(dir.path().join(TLS_DIR).join(CA_CERT_FILE)).unwrap();
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca).unwrap();
        let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), Arc::new(rustls::crypto::ring::default_provider()))
            .build()
            .unwrap();
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&cert).unwrap().map(|c| c.unwrap()).collect();
        let now = rustls::pki_types::UnixTime::now();
        for host in ["10.1.2.3", "127.0.0.1", "localhost"] {
            let name = rustls::pki_types::ServerName::try_from(host).unwrap();
            verifier.verify_server_cert(&chain[0], &chain[1..], &name, &[], now).unwrap_or_else(|e| panic!("{host}: {e}"));
        }
        let other = rustls::pki_types::ServerName::try_from("10.9.9.9").unwrap();
        assert!(verifier.verify_server_cert(&chain[0], &chain[1..], &other, &[], now).is_err());
        // Made once: a second start serves the same certificate.
        assert_eq!(node_certificate(dir.path(), "10.1.2.3:5433", None).unwrap(), (cert.clone(), key));
        let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(dir.path().join(TLS_DIR).join(CA_KEY_FILE)).unwrap().permissions());
        assert_eq!(mode & 0o777, 0o600);
    }
}
