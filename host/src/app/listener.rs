//! The API's listener and server loop: accepts connections up to a limit, speaks TLS when
//! the host has a certificate, and serves HTTP/1.1 on each. A TLS handshake runs on its own
//! task with a deadline, so a client that stalls in it holds one connection slot, never the
//! accept loop; a client that does not send a request's headers in time is disconnected,
//! one whose body does not arrive in time gets an error for it, and one address holds at
//! most its share of the connections.

use axum::extract::ConnectInfo;
use hyper::{Request, body};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
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
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

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

/// One accepted connection, holding its slots until it closes.
pub struct Conn {
    stream: Stream,
    _slot: OwnedSemaphorePermit,
    _peer: Option<PeerSlot>,
}

/// How many connections each client address holds now.
type PeerCounts = Arc<std::sync::Mutex<std::collections::HashMap<std::net::IpAddr, usize>>>;

/// One of a client address's connections; its count goes down when this drops.
struct PeerSlot {
    counts: PeerCounts,
    ip: std::net::IpAddr,
}

impl PeerSlot {
    /// A slot for `ip`, unless it holds `max` connections already.
    fn take(counts: &PeerCounts, ip: std::net::IpAddr, max: usize) -> Option<Self> {
        let mut all = counts.lock().unwrap_or_else(|e| e.into_inner());
        let n = all.entry(ip).or_insert(0);
        if *n >= max {
            return None;
        }
        *n += 1;
        Some(Self {
            counts: counts.clone(),
            ip,
        })
    }
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let mut all = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = all.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                all.remove(&self.ip);
            }
        }
    }
}

/// How long a client may take over a request's headers, and then over its body.
#[derive(Debug, Clone, Copy)]
pub struct Deadlines {
    pub header: Duration,
    pub body: Duration,
}

/// What a listener holds its clients to.
#[derive(Clone)]
pub struct ConnLimits {
    /// Connections open at once.
    pub max_connections: usize,
    /// Connections one address holds at once (a trusted proxy is not held to it).
    pub max_per_client: usize,
    /// Whose connections carry many clients'.
    pub proxies: Arc<crate::access::ProxyTrust>,
}

enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

/// The accepted connections, in order.
pub struct Incoming {
    rx: mpsc::Receiver<(Conn, SocketAddr)>,
}

/// Accepts on `listener` (at most `max_connections` open at once) on a task of its own,
/// with TLS when `tls` is given; the task ends when the [`Incoming`] is dropped.
pub fn incoming(
    listener: TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    limits: ConnLimits,
) -> io::Result<Incoming> {
    let (tx, rx) = mpsc::channel(64);
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let peers = PeerCounts::default();
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
            // A trusted proxy carries many clients' connections; anyone else gets a share.
            let peer = if limits.proxies.is_trusted(addr.ip()) {
                None
            } else {
                match PeerSlot::take(&peers, addr.ip().to_canonical(), limits.max_per_client) {
                    Some(peer) => Some(peer),
                    None => {
                        tracing::debug!(%addr, "connection refused: this address holds its share of connections");
                        continue;
                    }
                }
            };
            match &acceptor {
                None => {
                    let conn = Conn {
                        stream: Stream::Plain(tcp),
                        _slot: slot,
                        _peer: peer,
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
                                    _peer: peer,
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
    Ok(Incoming { rx })
}

/// Serves `router` on the accepted connections until `stop`; then accepts no more and
/// waits while each connection finishes the request under way.
pub async fn serve(
    mut incoming: Incoming,
    router: axum::Router,
    deadlines: Deadlines,
    stop: CancellationToken,
) {
    let Deadlines {
        header: header_read_timeout,
        body: body_read_timeout,
    } = deadlines;
    let mut http = hyper::server::conn::http1::Builder::new();
    // Without a deadline on the headers, clients that open connections and send nothing
    // (or a byte at a time) would hold every slot.
    http.timer(TokioTimer::new())
        .header_read_timeout(header_read_timeout);
    let graceful = GracefulShutdown::new();
    loop {
        let (conn, addr) = tokio::select! {
            accepted = incoming.rx.recv() => match accepted {
                Some(accepted) => accepted,
                None => break,
            },
            () = stop.cancelled() => break,
        };
        let router = router.clone();
        let service = hyper::service::service_fn(move |mut request: Request<body::Incoming>| {
            // The client's address: repeated failed authentications from it are slowed.
            request
                .extensions_mut()
                .insert(ConnectInfo(crate::access::ClientAddr(addr)));
            // The body has a deadline of its own from here: a client that sends headers
            // and then a byte a minute frees its connection when the time is up.
            let request = request.map(|body| Deadline::new(body, body_read_timeout));
            router.clone().oneshot(request)
        });
        let connection = graceful.watch(http.serve_connection(TokioIo::new(conn), service));
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(%addr, "connection ended: {e}");
            }
        });
    }
    drop(incoming);
    graceful.shutdown().await;
}

/// A request body that fails once its deadline passes before it has all arrived.
pub struct Deadline {
    inner: body::Incoming,
    timer: Pin<Box<tokio::time::Sleep>>,
    limit: Duration,
}

impl Deadline {
    fn new(inner: body::Incoming, limit: Duration) -> Self {
        Self {
            inner,
            timer: Box::pin(tokio::time::sleep(limit)),
            limit,
        }
    }
}

/// Why a body stopped arriving.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive within {} s; send it faster, or in a smaller request", .0.as_secs())]
pub struct BodyTimedOut(Duration);

impl hyper::body::Body for Deadline {
    type Data = bytes::Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        let this = self.get_mut();
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        if this.timer.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Some(Err(Box::new(BodyTimedOut(this.limit)))));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
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
