//! The API's listener: accepts connections up to a limit, and speaks TLS when the host has
//! a certificate. A TLS handshake runs on its own task with a deadline, so a client that
//! stalls in it holds one connection slot, never the accept loop.

use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls;
use tokio_rustls::server::TlsStream;

/// Longest a TLS handshake may take.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// A server TLS configuration from PEM files: the certificate chain and its private key.
pub fn tls_config(cert: &Path, key: &Path) -> Result<Arc<rustls::ServerConfig>, String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs = CertificateDer::pem_file_iter(cert)
        .and_then(|i| i.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("[tls] cert {}: {e}", cert.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "[tls] cert {} holds no PEM certificate",
            cert.display()
        ));
    }
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| format!("[tls] key {}: {e}", key.display()))?;
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| format!("TLS: {e}"))?
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .map_err(|e| format!("[tls]: the certificate and key do not make a server identity: {e}"))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// One accepted connection, holding its slot until it closes.
pub struct Conn {
    stream: Stream,
    _slot: OwnedSemaphorePermit,
}

enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

/// Connections as `axum::serve` takes them.
pub struct Incoming {
    rx: mpsc::Receiver<(Conn, SocketAddr)>,
    local: SocketAddr,
}

/// Accepts on `listener` (at most `max_connections` open at once) on a task of its own,
/// with TLS when `tls` is given; the task ends when the [`Incoming`] is dropped.
pub fn incoming(
    listener: TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    max_connections: usize,
) -> io::Result<Incoming> {
    let local = listener.local_addr()?;
    let (tx, rx) = mpsc::channel(64);
    let slots = Arc::new(Semaphore::new(max_connections));
    let acceptor = tls.map(TlsAcceptor::from);
    tokio::spawn(async move {
        loop {
            let Ok(slot) = slots.clone().acquire_owned().await else {
                return;
            };
            let (tcp, addr) = match listener.accept().await {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors and the like: pause, then accept again.
                    tracing::warn!("accepting a connection failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let _ = tcp.set_nodelay(true);
            match &acceptor {
                None => {
                    let conn = Conn {
                        stream: Stream::Plain(tcp),
                        _slot: slot,
                    };
                    if tx.send((conn, addr)).await.is_err() {
                        return;
                    }
                }
                Some(acceptor) => {
                    let (acceptor, tx) = (acceptor.clone(), tx.clone());
                    tokio::spawn(async move {
                        match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                            Ok(Ok(tls)) => {
                                let conn = Conn {
                                    stream: Stream::Tls(Box::new(tls)),
                                    _slot: slot,
                                };
                                let _ = tx.send((conn, addr)).await;
                            }
                            Ok(Err(e)) => tracing::debug!(%addr, "TLS handshake failed: {e}"),
                            Err(_) => tracing::debug!(%addr, "TLS handshake timed out"),
                        }
                    });
                }
            }
        }
    });
    Ok(Incoming { rx, local })
}

impl axum::serve::Listener for Incoming {
    type Io = Conn;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Conn, SocketAddr) {
        match self.rx.recv().await {
            Some(accepted) => accepted,
            // The accept task is gone: nothing will come any more.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.local)
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match &mut self.get_mut().stream {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().stream {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().stream {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().stream {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// Each connection's client address, for the handlers (`ConnectInfo<ClientAddr>`).
impl axum::extract::connect_info::Connected<axum::serve::IncomingStream<'_, Incoming>>
    for crate::access::ClientAddr
{
    fn connect_info(stream: axum::serve::IncomingStream<'_, Incoming>) -> Self {
        Self(*stream.remote_addr())
    }
}
