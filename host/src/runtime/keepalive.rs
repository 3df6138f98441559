//! Kept-alive HTTP/1.1 connections for plugins' plain-HTTP requests, by checked address.
//!
//! A connection per request costs both ends a TCP handshake, an accept and a close — a
//! measurable share of a delivery step's CPU, and of the provider's. Connections are kept by
//! the socket address the request was checked against (egress checks run before a
//! connection is chosen, so reuse cannot route around a grant), and a request goes out on an
//! idle one only when the request could be handed back unsent if that connection turned out
//! closed: a reused connection never turns a request that was not sent into an unknown
//! outcome, and a request that may have been sent is never sent again.

use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::client::conn::http1::SendRequest;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};
use wasmtime_wasi_http::{Error as HttpError, RequestOptions, WasiBody};

/// How long an idle connection is kept: below the idle timeouts of common servers (5 s
/// and more), so that a server rarely closes a connection as it is being reused.
const IDLE: Duration = Duration::from_secs(4);

/// Longest wait for a kept connection to be ready for the next request.
const READY: Duration = Duration::from_millis(100);

/// Most idle connections kept per address.
const MOST_IDLE: usize = 256;

type Sender = SendRequest<WasiBody>;

/// Whether an idle connection is worth keeping: open, and not idle for too long.
fn kept((sender, since): &(Sender, Instant)) -> bool {
    since.elapsed() < IDLE && !sender.is_closed()
}

/// A runtime's idle connections by address, newest last. Connections idle for [`IDLE`] are
/// closed by a sweeper task that runs while any are kept.
#[derive(Default)]
pub(super) struct Pool {
    idle: Mutex<HashMap<SocketAddr, Vec<(Sender, Instant)>>>,
    sweeping: AtomicBool,
}

impl Pool {
    /// Closes the connections idle for too long; answers how many are still kept.
    fn sweep(&self) -> usize {
        let mut idle = self.idle.lock().unwrap();
        idle.retain(|_, list| {
            list.retain(kept);
            !list.is_empty()
        });
        idle.values().map(Vec::len).sum()
    }

    /// Starts the sweeper unless it runs; it ends once nothing is kept (or the pool is gone).
    fn start_sweeping(self: &Arc<Self>) {
        if self.sweeping.swap(true, Ordering::AcqRel) {
            return;
        }
        let pool: Weak<Self> = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(IDLE / 2).await;
                let Some(pool) = pool.upgrade() else { return };
                if pool.sweep() > 0 {
                    continue;
                }
                pool.sweeping.store(false, Ordering::Release);
                // A connection kept after the sweep found none did not start a sweeper.
                if pool.sweep() == 0 || pool.sweeping.swap(true, Ordering::AcqRel) {
                    return;
                }
            }
        });
    }

    /// The newest idle connection to `addr` that is still open, if any.
    fn take(&self, addr: SocketAddr) -> Option<Sender> {
        let mut idle = self.idle.lock().unwrap();
        let list = idle.get_mut(&addr)?;
        while let Some(entry) = list.pop() {
            if kept(&entry) {
                return Some(entry.0);
            }
        }
        None
    }

    fn put(self: &Arc<Self>, addr: SocketAddr, sender: Sender) {
        if sender.is_closed() {
            return;
        }
        {
            let mut idle = self.idle.lock().unwrap();
            let list = idle.entry(addr).or_default();
            // Stale entries are passed over by `take` and closed by the sweeper; looking
            // through the list on every put cost a clock read per kept connection.
            if list.len() >= MOST_IDLE {
                list.retain(kept);
                if list.len() >= MOST_IDLE {
                    return;
                }
            }
            list.push((sender, Instant::now()));
        }
        self.start_sweeping();
    }
}

/// The response and, as `wasi:http` expects, the connection's own future (the connection
/// is driven by a task of its own, so that one is already done).
pub(super) type Sent = (
    http::Response<WasiBody>,
    Box<dyn Future<Output = Result<(), HttpError>> + Send>,
);

/// Sends `request` (its target in origin form) to exactly `addr` over HTTP/1.1, on an idle
/// connection to `addr` when there is one, else on a new one kept afterwards.
pub(super) async fn send(
    pool: &Arc<Pool>,
    addr: SocketAddr,
    mut request: http::Request<WasiBody>,
    options: &RequestOptions,
    connect_timeout: Duration,
) -> Result<Sent, HttpError> {
    let first_byte = options.first_byte_timeout.unwrap_or(connect_timeout);
    let between_bytes = options
        .between_bytes_timeout
        .unwrap_or(first_byte)
        .max(Duration::from_nanos(1));
    while let Some(mut sender) = pool.take(addr) {
        // A connection is ready again once it has read the end of its last response; one
        // that closes meanwhile is passed over.
        match tokio::time::timeout(READY, sender.ready()).await {
            Ok(Ok(())) => {}
            _ => continue,
        }
        match tokio::time::timeout(first_byte, sender.try_send_request(request)).await {
            Err(_) => return Err(HttpError::ConnectionReadTimeout),
            Ok(Ok(response)) => return Ok(answer(pool, addr, sender, response, between_bytes)),
            Ok(Err(mut failed)) => match failed.take_message() {
                // Not sent: the connection was closing. Try the next one.
                Some(unsent) => request = unsent,
                // It may have been sent: its outcome is unknown, never sent again.
                None => return Err(HttpError::from(failed.into_error())),
            },
        }
    }
    let tcp = tokio::time::timeout(connect_timeout, tokio::net::TcpStream::connect(addr))
        .await
        .map_err(|_| HttpError::ConnectionTimeout)?
        .map_err(HttpError::Connect)?;
    let _ = tcp.set_nodelay(true);
    let (mut sender, connection) = tokio::time::timeout(
        connect_timeout,
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp)),
    )
    .await
    .map_err(|_| HttpError::ConnectionTimeout)??;
    // Ends when the connection closes: when the server closes it, or when every handle to
    // it (the pool's, a response body's) is dropped.
    tokio::spawn(async move {
        let _ = connection.await;
    });
    let response = tokio::time::timeout(first_byte, sender.send_request(request))
        .await
        .map_err(|_| HttpError::ConnectionReadTimeout)??;
    Ok(answer(pool, addr, sender, response, between_bytes))
}

fn answer(
    pool: &Arc<Pool>,
    addr: SocketAddr,
    sender: Sender,
    response: http::Response<Incoming>,
    between_bytes: Duration,
) -> Sent {
    use http_body_util::BodyExt;
    let response = response.map(|incoming| {
        let mut timeout = tokio::time::interval(between_bytes);
        timeout.reset();
        ResponseBody {
            incoming,
            timeout,
            back: Some((pool.clone(), addr, sender)),
        }
        .boxed_unsync()
    });
    (
        response,
        Box::new(async { Ok(()) }) as Box<dyn Future<Output = Result<(), HttpError>> + Send>,
    )
}

/// A response body with `wasi:http`'s between-bytes timeout that gives its connection back
/// to the pool once it was read to the end (a body dropped earlier closes it).
struct ResponseBody {
    incoming: Incoming,
    timeout: tokio::time::Interval,
    back: Option<(Arc<Pool>, SocketAddr, Sender)>,
}

impl Body for ResponseBody {
    type Data = bytes::Bytes;
    type Error = HttpError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        match Pin::new(&mut self.incoming).poll_frame(cx) {
            Poll::Ready(None) => {
                if let Some((pool, addr, sender)) = self.back.take() {
                    pool.put(addr, sender);
                }
                Poll::Ready(None)
            }
            Poll::Ready(Some(Err(e))) => {
                self.back = None;
                Poll::Ready(Some(Err(if e.is_timeout() {
                    HttpError::HttpResponseTimeout
                } else {
                    HttpError::from(e)
                })))
            }
            Poll::Ready(Some(Ok(frame))) => {
                self.timeout.reset();
                // A reader may stop at the last frame without asking for the end.
                if self.incoming.is_end_stream()
                    && let Some((pool, addr, sender)) = self.back.take()
                {
                    pool.put(addr, sender);
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Pending => {
                ready!(self.timeout.poll_tick(cx));
                self.back = None;
                Poll::Ready(Some(Err(HttpError::ConnectionReadTimeout)))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.incoming.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.incoming.size_hint()
    }
}
