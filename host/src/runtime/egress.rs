//! Outbound HTTP for plugins: every request is checked against the call's grant.
//!
//! The check runs twice: on the request's scheme, host and port before anything is
//! resolved, and on each address the host name resolves to, before connecting. The
//! connection then goes to exactly the checked address — for HTTP with the `Host` header
//! naming the host, for HTTPS through docket's own TLS client with the granted name for the
//! certificate — so a second DNS answer cannot route around the grant. No redirect is ever followed (the plugin sees the 3xx), and
//! every request carries explicit timeouts instead of `wasi:http`'s 600 s defaults.

use crate::capabilities::{AddressDecision, Grant, Scheme, check_resolved_address};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use wasmtime_wasi_http::{Error as HttpError, RequestOptions, WasiBody, WasiHttpHooks};

/// Longest a plugin may wait to connect, whatever it asks for.
const MAX_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Most outbound requests one call may have open at once (sent, or answered with a body
/// not yet dropped): each costs a socket, buffers and possibly a blocking name lookup.
pub(super) const MAX_CONCURRENT_REQUESTS: usize = 8;

/// Refusal reasons kept per call; later refusals are only counted.
const MAX_DENIAL_REASONS: usize = 8;

/// The refusals of one call: the first few reasons and a count of the rest, so a guest
/// that asks in a loop costs bounded memory and one log line.
#[derive(Debug, Clone, Default)]
pub(super) struct Denials {
    reasons: Vec<String>,
    more: usize,
}

impl Denials {
    fn push(&mut self, reason: String) {
        if self.reasons.len() < MAX_DENIAL_REASONS {
            self.reasons.push(reason);
        } else {
            self.more += 1;
        }
    }

    /// The first reason, if any request was refused.
    pub(super) fn first(&self) -> Option<&str> {
        self.reasons.first().map(String::as_str)
    }

    /// How many requests were refused in all.
    pub(super) fn count(&self) -> usize {
        self.reasons.len() + self.more
    }

    /// The kept reasons, with a last line counting those not kept.
    pub(super) fn into_reasons(mut self) -> Vec<String> {
        if self.more > 0 {
            self.reasons.push(format!(
                "{} further refused requests are not listed",
                self.more
            ));
        }
        self.reasons
    }
}

/// How a plugin's outbound host names become addresses.
#[derive(Clone, Default)]
pub enum Resolver {
    /// The system's resolver.
    #[default]
    System,
    /// Fixed answers, name → addresses (a test's own resolver; an unknown name fails).
    Static(Arc<std::collections::BTreeMap<String, Vec<std::net::IpAddr>>>),
}

impl std::fmt::Debug for Resolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Resolver::System => f.write_str("System"),
            Resolver::Static(map) => write!(f, "Static({} names)", map.len()),
        }
    }
}

impl Resolver {
    async fn resolve(&self, name: &str, port: u16) -> Result<Vec<SocketAddr>, HttpError> {
        match self {
            Resolver::System => {
                match tokio::time::timeout(
                    MAX_CONNECT_TIMEOUT,
                    tokio::net::lookup_host((name, port)),
                )
                .await
                {
                    Ok(Ok(addrs)) => Ok(addrs.collect()),
                    Ok(Err(e)) => Err(HttpError::DnsError {
                        rcode: Some(e.to_string()),
                        info_code: None,
                    }),
                    Err(_) => Err(HttpError::DnsTimeout),
                }
            }
            Resolver::Static(map) => {
                if let Ok(ip) = name.parse::<std::net::IpAddr>() {
                    return Ok(vec![SocketAddr::new(ip, port)]);
                }
                map.get(name)
                    .map(|ips| ips.iter().map(|ip| SocketAddr::new(*ip, port)).collect())
                    .ok_or(HttpError::DnsError {
                        rcode: Some(format!("{name} is not known to the resolver")),
                        info_code: None,
                    })
            }
        }
    }
}

/// An outbound request as an [`EgressTap`] sees it, once the grant allowed it.
#[derive(Debug, Clone)]
pub struct TappedRequest {
    pub method: String,
    pub url: String,
    pub body: bytes::Bytes,
}

/// The provider's answer to a tapped request, or why there was none.
#[derive(Debug, Clone)]
pub struct TappedAnswer {
    pub status: Option<u16>,
    pub body: bytes::Bytes,
    /// The transport failure, when there was no answer.
    pub error: Option<String>,
}

/// What happens to a tapped request on its way out.
pub enum TapAction {
    /// Sent once; the plugin gets the answer.
    Pass,
    /// Sent once; the answer is recorded, and the plugin gets a broken connection instead,
    /// as when a response is lost after the provider committed.
    DropAnswer,
    /// Sent twice, as a network that delivers a request twice would; the plugin gets the
    /// second answer.
    Replay,
    /// Held until the future resolves, then sent (two attempts made to meet at the
    /// provider).
    Hold(std::pin::Pin<Box<dyn Future<Output = ()> + Send>>),
}

/// Watches and steers a runtime's outbound HTTP: `docket adapter verify` uses it to lose a
/// response after the provider committed, to hold requests so that attempts meet, and to
/// deliver one twice, and keeps what the provider answered as evidence. The grant is checked
/// before the tap sees anything; bodies are buffered whole.
pub trait EgressTap: Send + Sync + std::fmt::Debug {
    /// Decides what happens to `request`.
    fn request(&self, request: &TappedRequest) -> TapAction;
    /// Each answer the provider gave (one per sending), and whether the plugin got it.
    fn answered(&self, request: &TappedRequest, answer: &TappedAnswer, delivered: bool);
}

/// An outbound request as a [`ScriptedHosts`] provider receives it, once the grant allowed it.
#[derive(Debug, Clone)]
pub struct ScriptedRequest {
    pub method: String,
    /// The host name as the plugin wrote it (lower case).
    pub host: String,
    /// The path with its query, e.g. `/v1/deliveries?client_reference=k`.
    pub path_and_query: String,
    /// Header names in lower case, in the order sent.
    pub headers: Vec<(String, String)>,
    pub body: bytes::Bytes,
    /// The call's own time limit: an answer slower than this reaches the plugin as a timeout.
    pub call_timeout: Duration,
}

/// How a scripted provider answers.
#[derive(Debug, Clone)]
pub enum ScriptedAnswer {
    /// An HTTP response.
    Response {
        status: u16,
        headers: Vec<(String, String)>,
        body: bytes::Bytes,
    },
    /// The connection closes without a byte of answer.
    Lost,
    /// No answer before the call's time limit: the plugin's read times out.
    TimedOut,
}

/// Providers answered inside the runtime instead of over the network (`docket scenario`): a
/// request to a host name one of them claims is answered here, after the grant check, with
/// no name lookup and no connection, so a component runs unchanged — HTTPS and fixed host
/// names included — within its grants.
pub trait ScriptedHosts: Send + Sync + std::fmt::Debug {
    /// Whether requests to `host` are answered here.
    fn answers(&self, host: &str) -> bool;
    /// The answer to `request`.
    fn answer(
        &self,
        request: ScriptedRequest,
    ) -> std::pin::Pin<Box<dyn Future<Output = ScriptedAnswer> + Send>>;
}

/// The egress policy of one call, installed as the `wasi:http` hooks of its store.
pub(super) struct Egress {
    grant: Arc<Grant>,
    resolver: Resolver,
    /// A denial quotes the request: a secret a plugin put in a URL must not be written down.
    redactor: crate::capabilities::Redactor,
    /// The call's overall time limit; no single wait may be longer.
    call_timeout: Duration,
    /// Human-readable reasons for refused requests, reported with the call.
    denials: Arc<Mutex<Denials>>,
    /// Requests open at once ([`MAX_CONCURRENT_REQUESTS`]).
    open_requests: Arc<tokio::sync::Semaphore>,
    label: Arc<str>,
    tap: Option<Arc<dyn EgressTap>>,
    scripted: Option<Arc<dyn ScriptedHosts>>,
    connections: Arc<super::keepalive::Pool>,
}

impl Egress {
    pub(super) fn new(
        grant: Arc<Grant>,
        call_timeout: Duration,
        label: Arc<str>,
        redactor: crate::capabilities::Redactor,
        outbound: &super::RuntimeConfig,
        connections: Arc<super::keepalive::Pool>,
    ) -> Self {
        Self {
            scripted: outbound.scripted.clone(),
            connections,
            grant,
            resolver: outbound.resolver.clone(),
            redactor,
            call_timeout,
            denials: Arc::default(),
            open_requests: Arc::new(tokio::sync::Semaphore::new(MAX_CONCURRENT_REQUESTS)),
            label,
            tap: outbound.tap.clone(),
        }
    }

    pub(super) fn denials(&self) -> Arc<Mutex<Denials>> {
        self.denials.clone()
    }

    /// Records a refusal; the call's one summary line is logged when it ends.
    fn deny(&self, reason: String) -> HttpError {
        let reason = self.redactor.redact(&reason).into_owned();
        tracing::debug!(call = %self.label, "outbound request denied: {reason}");
        self.denials.lock().unwrap().push(reason);
        HttpError::HttpRequestDenied
    }

    fn options(&self, asked: Option<RequestOptions>) -> RequestOptions {
        let clamp = |asked: Option<Duration>, max: Duration| asked.map_or(max, |d| d.min(max));
        let asked = asked.unwrap_or_default();
        RequestOptions {
            connect_timeout: Some(clamp(
                asked.connect_timeout,
                MAX_CONNECT_TIMEOUT.min(self.call_timeout),
            )),
            first_byte_timeout: Some(clamp(asked.first_byte_timeout, self.call_timeout)),
            between_bytes_timeout: Some(clamp(asked.between_bytes_timeout, self.call_timeout)),
        }
    }
}

type SendFuture = Box<
    dyn Future<
            Output = Result<
                (
                    http::Response<WasiBody>,
                    Box<dyn Future<Output = Result<(), HttpError>> + Send>,
                ),
                HttpError,
            >,
        > + Send,
>;

impl WasiHttpHooks for Egress {
    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        _fut: Box<dyn Future<Output = Result<(), HttpError>> + Send>,
    ) -> SendFuture {
        let uri = request.uri().clone();
        let scheme = match uri.scheme_str() {
            Some("http") => Scheme::Http,
            Some("https") => Scheme::Https,
            other => {
                let err = self.deny(format!("scheme {other:?} of {uri} is not http or https"));
                return Box::new(async move { Err(err) });
            }
        };
        let Some(host) = uri.host().map(str::to_string) else {
            let err = self.deny(format!("request {uri} names no host"));
            return Box::new(async move { Err(err) });
        };
        let port = uri.port_u16().unwrap_or(scheme.default_port());
        if !self.grant.allows_destination(scheme, &host, port) {
            let granted: Vec<String> = self.grant.hosts().iter().map(ToString::to_string).collect();
            let err = self.deny(format!(
                "{scheme:?}://{host}:{port} is not granted to this step (granted: [{}])",
                granted.join(", ")
            ));
            return Box::new(async move { Err(err) });
        }
        // Taken before anything is resolved or opened, and held until the answer's body is
        // dropped: a guest that fires requests without waiting holds at most this many.
        let Ok(permit) = self.open_requests.clone().try_acquire_owned() else {
            let err = self.deny(format!(
                "request to {scheme:?}://{host}:{port} refused: the call already has \
                 {MAX_CONCURRENT_REQUESTS} requests open"
            ));
            return Box::new(async move { Err(err) });
        };
        if let Some(scripted) = self.scripted.clone()
            && scripted.answers(&host.to_ascii_lowercase())
        {
            let call_timeout = self.call_timeout;
            return Box::new(async move {
                let response = answer_scripted(request, scripted.as_ref(), call_timeout).await?;
                Ok((holding(response, permit), done()))
            });
        }
        let options = self.options(options);
        let denials = self.denials.clone();
        let label = self.label.clone();
        let resolver = self.resolver.clone();
        let redactor = self.redactor.clone();
        let allow_private = self.grant.allows_private();
        let tap = self.tap.clone();
        let connections = self.connections.clone();
        Box::new(async move {
            let bare = host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_string();
            let resolved = resolver.resolve(&bare, port).await?;
            let mut chosen = None;
            for addr in &resolved {
                let decision = match check_resolved_address(&bare, addr.ip()) {
                    // The operator allowed this adapter's names into private networks.
                    AddressDecision::Deny(_) if allow_private => AddressDecision::Allow,
                    other => other,
                };
                match decision {
                    AddressDecision::Allow => {
                        chosen = Some(*addr);
                        break;
                    }
                    AddressDecision::Deny(reason) => {
                        let reason = redactor.redact(&reason).into_owned();
                        tracing::debug!(call = %label, "outbound address refused: {reason}");
                        denials.lock().unwrap().push(reason);
                    }
                }
            }
            let Some(addr) = chosen else {
                return Err(HttpError::DestinationIpProhibited);
            };
            let destination = Destination {
                scheme,
                addr,
                name: bare,
                options,
                connections,
            };
            let (response, io) = match tap {
                None => destination.send(request).await,
                Some(tap) => tapped(&destination, request, tap.as_ref()).await,
            }?;
            Ok((holding(response, permit), io))
        })
    }

    fn p2_outgoing_body_buffer_chunks(&mut self) -> usize {
        1
    }

    fn p2_outgoing_body_chunk_size(&mut self) -> usize {
        super::state::OUTGOING_CHUNK_BYTES
    }
}

/// The connection future of an answer that used no connection.
fn done() -> Box<dyn Future<Output = Result<(), HttpError>> + Send> {
    Box::new(async { Ok(()) })
}

/// Asks a scripted provider for the answer to `request`.
async fn answer_scripted(
    request: http::Request<WasiBody>,
    scripted: &dyn ScriptedHosts,
    call_timeout: Duration,
) -> Result<http::Response<WasiBody>, HttpError> {
    use http_body_util::BodyExt;
    let (parts, body) = request.into_parts();
    let body = body.collect().await?.to_bytes();
    let seen = ScriptedRequest {
        method: parts.method.to_string(),
        host: parts.uri.host().unwrap_or_default().to_ascii_lowercase(),
        path_and_query: parts
            .uri
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_string(),
        headers: parts
            .headers
            .iter()
            .map(|(name, value)| {
                (
                    name.as_str().to_string(),
                    String::from_utf8_lossy(value.as_bytes()).into_owned(),
                )
            })
            .collect(),
        body,
        call_timeout,
    };
    match scripted.answer(seen).await {
        ScriptedAnswer::Response {
            status,
            headers,
            body,
        } => {
            let mut response = http::Response::new(whole_body(body));
            *response.status_mut() =
                http::StatusCode::from_u16(status).map_err(|_| HttpError::HttpProtocolError)?;
            for (name, value) in headers {
                if let (Ok(name), Ok(value)) = (
                    http::HeaderName::from_bytes(name.as_bytes()),
                    http::HeaderValue::from_str(&value),
                ) {
                    response.headers_mut().append(name, value);
                }
            }
            Ok(response)
        }
        ScriptedAnswer::Lost => Err(HttpError::ConnectionTerminated),
        ScriptedAnswer::TimedOut => Err(HttpError::ConnectionReadTimeout),
    }
}

/// The response with `permit` held by its body: the request counts as open until the
/// guest drops the body (or the whole response).
fn holding(
    response: http::Response<WasiBody>,
    permit: tokio::sync::OwnedSemaphorePermit,
) -> http::Response<WasiBody> {
    use http_body_util::BodyExt;
    response.map(|body| {
        body.map_frame(move |frame| {
            let _open = &permit;
            frame
        })
        .boxed_unsync()
    })
}

/// Where a checked request goes: exactly the address that was checked.
struct Destination {
    scheme: Scheme,
    addr: SocketAddr,
    name: String,
    options: RequestOptions,
    connections: Arc<super::keepalive::Pool>,
}

type Sent = (
    http::Response<WasiBody>,
    Box<dyn Future<Output = Result<(), HttpError>> + Send>,
);

impl Destination {
    async fn send(&self, mut request: http::Request<WasiBody>) -> Result<Sent, HttpError> {
        to_origin_form(&mut request)?;
        if self.scheme == Scheme::Https {
            // Connect to the address just checked, with the granted name for the
            // certificate: a second DNS answer cannot route around the grant.
            return send_https(request, self.addr, &self.name, &self.options).await;
        }
        let connect = self.options.connect_timeout.unwrap_or(MAX_CONNECT_TIMEOUT);
        super::keepalive::send(
            &self.connections,
            self.addr,
            request,
            &self.options,
            connect,
        )
        .await
    }
}

/// HTTP/1.1 on a connection of our own to the checked address: the target in origin form,
/// the requested host in `Host`.
fn to_origin_form(request: &mut http::Request<WasiBody>) -> Result<(), HttpError> {
    if let Some(authority) = request.uri().authority().map(|a| a.to_string())
        && !request.headers().contains_key(http::header::HOST)
    {
        let value = http::HeaderValue::from_str(&authority)
            .map_err(|_| HttpError::HttpRequestUriInvalid)?;
        request.headers_mut().insert(http::header::HOST, value);
    }
    let target = request
        .uri()
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .parse()
        .map_err(|_| HttpError::HttpRequestUriInvalid)?;
    *request.uri_mut() = target;
    Ok(())
}

fn whole_body(bytes: bytes::Bytes) -> WasiBody {
    use http_body_util::BodyExt;
    http_body_util::Full::new(bytes)
        .map_err(|never| match never {})
        .boxed_unsync()
}

/// Sends `request` as `tap` says, buffering both bodies, and tells it every answer.
async fn tapped(
    destination: &Destination,
    request: http::Request<WasiBody>,
    tap: &dyn EgressTap,
) -> Result<Sent, HttpError> {
    use http_body_util::BodyExt;
    let (parts, body) = request.into_parts();
    let body = body.collect().await?.to_bytes();
    let seen = TappedRequest {
        method: parts.method.to_string(),
        url: parts.uri.to_string(),
        body: body.clone(),
    };
    let action = tap.request(&seen);
    let drop_answer = matches!(action, TapAction::DropAnswer);
    let sendings = match action {
        TapAction::Replay => 2,
        TapAction::Hold(until) => {
            until.await;
            1
        }
        TapAction::Pass | TapAction::DropAnswer => 1,
    };
    let mut last = None;
    for n in 1..=sendings {
        let mut copy = http::Request::new(whole_body(body.clone()));
        *copy.method_mut() = parts.method.clone();
        *copy.uri_mut() = parts.uri.clone();
        *copy.version_mut() = parts.version;
        *copy.headers_mut() = parts.headers.clone();
        let delivered = n == sendings && !drop_answer;
        match destination.send(copy).await {
            Ok((response, io)) => {
                let (head, body) = response.into_parts();
                let bytes = body.collect().await.map(|b| b.to_bytes());
                let _ = Box::into_pin(io).await;
                let answer = TappedAnswer {
                    status: Some(head.status.as_u16()),
                    body: bytes.as_ref().cloned().unwrap_or_default(),
                    error: bytes.as_ref().err().map(|e| format!("{e:?}")),
                };
                tap.answered(&seen, &answer, delivered);
                let bytes = bytes?;
                last = Some(Ok((head, bytes)));
            }
            Err(e) => {
                let answer = TappedAnswer {
                    status: None,
                    body: bytes::Bytes::new(),
                    error: Some(format!("{e:?}")),
                };
                tap.answered(&seen, &answer, delivered);
                last = Some(Err(e));
            }
        }
    }
    if drop_answer {
        // The provider answered; the plugin never hears it.
        return Err(HttpError::ConnectionTerminated);
    }
    let (head, bytes) = last.expect("sent at least once")?;
    Ok((
        http::Response::from_parts(head, whole_body(bytes)),
        Box::new(async { Ok(()) }) as Box<dyn Future<Output = Result<(), HttpError>> + Send>,
    ))
}

/// The client TLS configuration of plugins' HTTPS requests: the public web roots, HTTP/1.1.
fn tls_client() -> Arc<tokio_rustls::rustls::ClientConfig> {
    use tokio_rustls::rustls;
    static CONFIG: std::sync::OnceLock<Arc<rustls::ClientConfig>> = std::sync::OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let roots = rustls::RootCertStore {
                roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
            };
            let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .expect("ring supports the default protocol versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
            config.alpn_protocols = vec![b"http/1.1".to_vec()];
            Arc::new(config)
        })
        .clone()
}

/// Sends `request` over TLS to exactly `addr`, verifying the certificate for `name`.
async fn send_https(
    request: http::Request<WasiBody>,
    addr: SocketAddr,
    name: &str,
    options: &RequestOptions,
) -> Result<
    (
        http::Response<WasiBody>,
        Box<dyn Future<Output = Result<(), HttpError>> + Send>,
    ),
    HttpError,
> {
    use http_body_util::BodyExt;
    let connect_timeout = options.connect_timeout.unwrap_or(MAX_CONNECT_TIMEOUT);
    let tcp = tokio::time::timeout(connect_timeout, tokio::net::TcpStream::connect(addr))
        .await
        .map_err(|_| HttpError::ConnectionTimeout)?
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::ConnectionRefused => HttpError::ConnectionRefused,
            _ => HttpError::DestinationUnavailable,
        })?;
    let server_name = tokio_rustls::rustls::pki_types::ServerName::try_from(name.to_string())
        .map_err(|_| HttpError::HttpRequestUriInvalid)?;
    let tls = tokio::time::timeout(
        connect_timeout,
        tokio_rustls::TlsConnector::from(tls_client()).connect(server_name, tcp),
    )
    .await
    .map_err(|_| HttpError::ConnectionTimeout)?
    .map_err(|_| HttpError::TlsCertificateError)?;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
            .await
            .map_err(|_| HttpError::HttpProtocolError)?;
    let first_byte = options.first_byte_timeout.unwrap_or(MAX_CONNECT_TIMEOUT);
    // The connection is driven while the request is sent and the response awaited.
    let driver = tokio::spawn(connection);
    let response = tokio::time::timeout(first_byte, sender.send_request(request))
        .await
        .map_err(|_| HttpError::ConnectionReadTimeout)?
        .map_err(|_| HttpError::HttpProtocolError)?;
    let io = async move {
        match driver.await {
            Ok(Ok(())) => Ok(()),
            _ => Err(HttpError::ConnectionTerminated),
        }
    };
    Ok((
        response.map(|body| {
            body.map_err(|_| HttpError::ConnectionTerminated)
                .boxed_unsync()
        }),
        Box::new(io),
    ))
}
