//! The host's own outbound HTTP client — webhook notifications, and every CLI command that
//! talks to a host: HTTPS through rustls, checked against the public web roots plus an
//! optional CA file, and never following a redirect (a signed webhook or a bearer token
//! goes only where it was addressed).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Why the client could not be built; each names the file and what to fix.
#[derive(Debug, thiserror::Error)]
pub enum OutboundError {
    #[error("cannot read the CA file {path}: {reason}; give a PEM file of CA certificates")]
    CaFile { path: PathBuf, reason: String },
    #[error(
        "the CA file {path} holds no certificate; give a PEM file with at least one `BEGIN CERTIFICATE` block"
    )]
    NoCertificate { path: PathBuf },
    #[error("the CA file {path} has a certificate rustls refuses: {reason}")]
    BadCertificate { path: PathBuf, reason: String },
    #[error("cannot build the HTTP client: {0}")]
    Client(String),
}

/// TLS for the host's own requests: the public web roots, and the CA file's certificates
/// besides when one is given (a private CA, or a test's).
pub fn tls_config(ca_file: Option<&Path>) -> Result<rustls::ClientConfig, OutboundError> {
    let mut roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    if let Some(path) = ca_file {
        use rustls::pki_types::CertificateDer;
        use rustls::pki_types::pem::PemObject;
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
            .and_then(|certs| certs.collect::<Result<_, _>>())
            .map_err(|e| OutboundError::CaFile {
                path: path.to_path_buf(),
                reason: e.to_string(),
            })?;
        if certs.is_empty() {
            return Err(OutboundError::NoCertificate {
                path: path.to_path_buf(),
            });
        }
        for cert in certs {
            roots.add(cert).map_err(|e| OutboundError::BadCertificate {
                path: path.to_path_buf(),
                reason: e.to_string(),
            })?;
        }
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| OutboundError::Client(e.to_string()))?
    .with_root_certificates(roots)
    .with_no_client_auth();
    Ok(config)
}

/// A client speaking HTTP and HTTPS ([`tls_config`]) that follows no redirect, with an
/// overall `timeout` per request when given.
pub fn client(
    ca_file: Option<&Path>,
    timeout: Option<Duration>,
) -> Result<reqwest::Client, OutboundError> {
    let mut builder = reqwest::Client::builder()
        .use_preconfigured_tls(tls_config(ca_file)?)
        .redirect(reqwest::redirect::Policy::none());
    if let Some(timeout) = timeout {
        builder = builder.timeout(timeout);
    }
    builder
        .build()
        .map_err(|e| OutboundError::Client(e.to_string()))
}
