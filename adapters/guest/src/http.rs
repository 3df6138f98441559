//! A blocking HTTP client over raw `wasi:http/outgoing-handler` (adapter world only).
//!
//! It keeps the host's `wasi:http` [`ErrorCode`] and sorts every failure into
//! [`HttpError::NotSent`] (nothing left the guest, so a retry cannot duplicate the effect)
//! or [`HttpError::MaybeSent`] (the server may have received and acted on the request).
//! When a code does not prove that nothing was sent, it counts as maybe sent.
//!
//! ```ignore
//! use docket_guest::http::Request;
//!
//! let response = Request::post("http://127.0.0.1:8080/v1/things")
//!     .header("authorization", format!("Bearer {token}"))
//!     .body(r#"{"a":1}"#)
//!     .header("content-type", "application/json")
//!     .timeout(std::time::Duration::from_secs(5))
//!     .send()?; // HttpError converts to EffectError
//! ```

use core::fmt;
use core::time::Duration;

use wasip2::clocks::monotonic_clock;
use wasip2::http::outgoing_handler;
use wasip2::http::types::{
    Fields, FutureIncomingResponse, IncomingBody, IncomingResponse, OutgoingBody, OutgoingRequest,
    RequestOptions, Scheme,
};
use wasip2::io::poll::{self, Pollable};
use wasip2::io::streams::{InputStream, OutputStream, StreamError};

use crate::EffectError;

pub use wasip2::http::types::{ErrorCode, Method};

/// Used when a request sets no timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// Responses larger than this are refused unless [`Request::max_response_bytes`] says otherwise.
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 8 << 20;

/// Extra time the client waits on its own before giving up, so the host's typed timeout
/// errors (which tell "never connected" from "no answer") normally arrive first.
const BACKSTOP_GRACE: Duration = Duration::from_secs(1);

/// Largest chunk read from a response body at once.
const READ_CHUNK: u64 = 64 * 1024;

/// An outgoing HTTP request, built with chained setters and sent with [`Request::send`].
#[derive(Clone)]
pub struct Request {
    method: Method,
    url: String,
    headers: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
    timeout: Duration,
    max_response_bytes: usize,
}

impl fmt::Debug for Request {
    // Header values are left out: they usually carry credentials.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Request")
            .field("method", &method_name(&self.method))
            .field("url", &self.url)
            .field(
                "headers",
                &self.headers.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            )
            .field("body_len", &self.body.len())
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl Request {
    /// A request with no headers, an empty body and [`DEFAULT_TIMEOUT`].
    ///
    /// `url` is `http://` or `https://`, an authority (`host:port`), then an optional path
    /// and query, already percent-encoded (see [`encode_query_component`]).
    pub fn new(method: Method, url: impl Into<String>) -> Self {
        Request {
            method,
            url: url.into(),
            headers: Vec::new(),
            body: Vec::new(),
            timeout: DEFAULT_TIMEOUT,
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
        }
    }

    /// A `GET` request.
    pub fn get(url: impl Into<String>) -> Self {
        Self::new(Method::Get, url)
    }

    /// A `POST` request.
    pub fn post(url: impl Into<String>) -> Self {
        Self::new(Method::Post, url)
    }

    /// Adds a header; repeated names are sent as repeated fields.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into().into_bytes()));
        self
    }

    /// Sets the body. `content-length` is set from it when the request is sent.
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self
    }

    /// Sets a JSON body and `content-type: application/json`.
    #[cfg(feature = "json")]
    pub fn json(self, value: &serde_json::Value) -> Self {
        self.header("content-type", "application/json")
            .body(value.to_string())
    }

    /// Sets the timeout the host applies to connecting, to the first response byte, and
    /// between response body bytes.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Sets the largest response body accepted; a larger one fails as maybe sent.
    pub fn max_response_bytes(mut self, limit: usize) -> Self {
        self.max_response_bytes = limit;
        self
    }

    /// Sends the request and reads the whole response.
    ///
    /// Any status is a successful exchange; only transport failures are errors.
    pub fn send(self) -> Result<Response, HttpError> {
        let what = format!("{} {}", method_name(&self.method), self.url);
        let exchange = Exchange {
            what: &what,
            backstop: self
                .timeout
                .saturating_mul(2)
                .saturating_add(BACKSTOP_GRACE),
        };
        exchange.run(self)
    }
}

/// A complete HTTP response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The status code, e.g. 201.
    pub status: u16,
    /// Header fields in the order received; names are lower case.
    pub headers: Vec<(String, Vec<u8>)>,
    /// The whole body.
    pub body: Vec<u8>,
}

impl Response {
    /// The first value of header `name` (case-insensitive), if present and valid UTF-8.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .and_then(|(_, v)| core::str::from_utf8(v).ok())
    }

    /// The body as text, with invalid UTF-8 replaced.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body parsed as JSON.
    #[cfg(feature = "json")]
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_slice(&self.body)
    }

    /// True for 2xx statuses.
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

/// Why an exchange produced no response, sorted by whether the server may have seen it.
#[derive(Debug, Clone)]
pub enum HttpError {
    /// Nothing left the guest (DNS failure, connection refused, host denied, invalid
    /// request): retrying cannot duplicate anything.
    NotSent {
        /// The `wasi:http` error code the host reported (or the closest code for a request
        /// the client refused to build).
        code: ErrorCode,
        /// What happened, naming the request.
        message: String,
    },
    /// The request may have reached the server and been acted on (connection lost after
    /// sending, timeout waiting for the answer, broken response, anything unrecognised).
    MaybeSent {
        /// The `wasi:http` error code the host reported (or the closest code for a failure
        /// the client detected itself, such as its own deadline).
        code: ErrorCode,
        /// What happened, naming the request.
        message: String,
    },
}

impl HttpError {
    /// Sorts a host-reported code: only codes that prove nothing was sent are `NotSent`.
    pub fn from_code(code: ErrorCode, context: &str) -> Self {
        let message = format!("{context}: {}", describe_code(&code));
        if proves_not_sent(&code) {
            HttpError::NotSent {
                code,
                message: format!("{message}; the request was not sent"),
            }
        } else {
            HttpError::MaybeSent {
                code,
                message: format!("{message}; the request may have reached the server"),
            }
        }
    }

    /// The `wasi:http` error code.
    pub fn code(&self) -> &ErrorCode {
        match self {
            HttpError::NotSent { code, .. } | HttpError::MaybeSent { code, .. } => code,
        }
    }

    /// What happened.
    pub fn message(&self) -> &str {
        match self {
            HttpError::NotSent { message, .. } | HttpError::MaybeSent { message, .. } => message,
        }
    }

    /// True when nothing left the guest.
    pub fn is_not_sent(&self) -> bool {
        matches!(self, HttpError::NotSent { .. })
    }
}

impl fmt::Display for HttpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())
    }
}

impl std::error::Error for HttpError {}

/// `NotSent` becomes `not-sent` (safe to retry); `MaybeSent` becomes `outcome-unknown`
/// (the host recovers through the contract).
impl From<HttpError> for EffectError {
    fn from(err: HttpError) -> Self {
        match err {
            HttpError::NotSent { message, .. } => EffectError::NotSent(message),
            HttpError::MaybeSent { message, .. } => EffectError::OutcomeUnknown(message),
        }
    }
}

/// True for codes that arise before any request byte leaves: name resolution, connecting,
/// certificate validation, the host's egress policy, and request validation. Everything
/// else (including codes a future host might add) may follow a sent request.
pub fn proves_not_sent(code: &ErrorCode) -> bool {
    matches!(
        code,
        ErrorCode::DnsTimeout
            | ErrorCode::DnsError(_)
            | ErrorCode::DestinationNotFound
            | ErrorCode::DestinationUnavailable
            | ErrorCode::DestinationIpProhibited
            | ErrorCode::DestinationIpUnroutable
            | ErrorCode::ConnectionRefused
            | ErrorCode::ConnectionTimeout
            | ErrorCode::TlsCertificateError
            | ErrorCode::HttpRequestDenied
            | ErrorCode::HttpRequestMethodInvalid
            | ErrorCode::HttpRequestUriInvalid
            | ErrorCode::HttpRequestUriTooLong
    )
}

/// Percent-encodes `value` for use as a query-string name or value.
pub fn encode_query_component(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(byte as char)
            }
            _ => out.push_str(&format!("%{byte:02X}")),
        }
    }
    out
}

/// One request's trip through the host, with the context for its error messages.
struct Exchange<'a> {
    /// `METHOD url`, for messages.
    what: &'a str,
    /// How long any single wait may last before the client gives up on its own.
    backstop: Duration,
}

impl Exchange<'_> {
    fn run(&self, request: Request) -> Result<Response, HttpError> {
        let outgoing = self.build(&request)?;
        let body = outgoing
            .body()
            .map_err(|()| self.not_sent_local("the request body was already taken"))?;
        let options = request_options(request.timeout);
        let future = outgoing_handler::handle(outgoing, Some(options))
            .map_err(|code| HttpError::from_code(code, self.what))?;

        // Write after `handle` so a body larger than the host's buffer cannot stall. If the
        // host failed the request, writing fails too and the future carries the real code.
        let written = self.write_body(&body, &request.body);
        let finished = OutgoingBody::finish(body, None);

        let response = self.await_response(&future)?;
        if let Err(problem) = written {
            log_client_issue(self.what, &problem);
        }
        if let Err(code) = finished {
            log_client_issue(self.what, &describe_code(&code));
        }
        self.read_response(response, request.max_response_bytes)
    }

    fn build(&self, request: &Request) -> Result<OutgoingRequest, HttpError> {
        let target = parse_url(&request.url).map_err(|problem| HttpError::NotSent {
            code: ErrorCode::HttpRequestUriInvalid,
            message: format!(
                "{}: invalid URL: {problem}; the request was not sent",
                self.what
            ),
        })?;

        let headers = Fields::new();
        for (name, value) in &request.headers {
            headers.append(name, value).map_err(|err| {
                self.not_sent_local(&format!("header `{name}` was refused by the host: {err:?}"))
            })?;
        }
        let has_length = request
            .headers
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case("content-length"));
        if !has_length && (!request.body.is_empty() || sends_body(&request.method)) {
            // An explicit length avoids chunked encoding, which some servers refuse.
            let length = request.body.len().to_string();
            headers
                .append("content-length", length.as_bytes())
                .map_err(|err| {
                    self.not_sent_local(&format!("content-length was refused by the host: {err:?}"))
                })?;
        }

        let outgoing = OutgoingRequest::new(headers);
        outgoing
            .set_method(&request.method)
            .map_err(|()| HttpError::NotSent {
                code: ErrorCode::HttpRequestMethodInvalid,
                message: format!("{}: invalid method; the request was not sent", self.what),
            })?;
        let invalid_uri = |part: &str| HttpError::NotSent {
            code: ErrorCode::HttpRequestUriInvalid,
            message: format!("{}: invalid {part}; the request was not sent", self.what),
        };
        outgoing
            .set_scheme(Some(&target.scheme))
            .map_err(|()| invalid_uri("scheme"))?;
        outgoing
            .set_authority(Some(&target.authority))
            .map_err(|()| invalid_uri("authority"))?;
        outgoing
            .set_path_with_query(Some(&target.path_and_query))
            .map_err(|()| invalid_uri("path or query"))?;
        Ok(outgoing)
    }

    /// Writes the whole body; on failure says why (the response future has the real code).
    fn write_body(&self, body: &OutgoingBody, bytes: &[u8]) -> Result<(), String> {
        let stream = body
            .write()
            .map_err(|()| "the body stream was already taken".to_string())?;
        let result = self.write_all(&stream, bytes);
        drop(stream); // The stream must go before the body is finished.
        result
    }

    fn write_all(&self, stream: &OutputStream, mut rest: &[u8]) -> Result<(), String> {
        while !rest.is_empty() {
            let permitted = stream.check_write().map_err(|e| stream_error(&e))?;
            if permitted == 0 {
                if !wait_ready(&stream.subscribe(), self.backstop) {
                    return Err("timed out writing the request body".to_string());
                }
                continue;
            }
            let n = rest
                .len()
                .min(usize::try_from(permitted).unwrap_or(usize::MAX));
            stream.write(&rest[..n]).map_err(|e| stream_error(&e))?;
            rest = &rest[n..];
        }
        stream.flush().map_err(|e| stream_error(&e))?;
        // A flush completes when check-write succeeds again.
        loop {
            match stream.check_write() {
                Ok(0) => {
                    if !wait_ready(&stream.subscribe(), self.backstop) {
                        return Err("timed out flushing the request body".to_string());
                    }
                }
                Ok(_) => return Ok(()),
                Err(e) => return Err(stream_error(&e)),
            }
        }
    }

    fn await_response(
        &self,
        future: &FutureIncomingResponse,
    ) -> Result<IncomingResponse, HttpError> {
        loop {
            match future.get() {
                Some(Ok(Ok(response))) => return Ok(response),
                Some(Ok(Err(code))) => return Err(HttpError::from_code(code, self.what)),
                Some(Err(())) => {
                    return Err(self.maybe_sent_local(
                        ErrorCode::InternalError(Some("response already taken".to_string())),
                        "the response was already taken",
                    ));
                }
                None => {
                    if !wait_ready(&future.subscribe(), self.backstop) {
                        return Err(self.maybe_sent_local(
                            ErrorCode::HttpResponseTimeout,
                            &format!("no response within {} ms", self.backstop.as_millis()),
                        ));
                    }
                }
            }
        }
    }

    fn read_response(
        &self,
        response: IncomingResponse,
        limit: usize,
    ) -> Result<Response, HttpError> {
        let status = response.status();
        let headers = response.headers().entries();
        let incoming = response.consume().map_err(|()| {
            self.maybe_sent_local(
                ErrorCode::InternalError(Some("response body already taken".to_string())),
                "the response body was already taken",
            )
        })?;
        let body = self.read_body(&incoming, limit);
        // Child resources go before their parents: the stream inside `read_body`, then
        // the body, then the response.
        drop(incoming);
        drop(response);
        Ok(Response {
            status,
            headers,
            body: body?,
        })
    }

    fn read_body(&self, incoming: &IncomingBody, limit: usize) -> Result<Vec<u8>, HttpError> {
        let stream: InputStream = incoming.stream().map_err(|()| {
            self.maybe_sent_local(
                ErrorCode::InternalError(Some("response stream already taken".to_string())),
                "the response stream was already taken",
            )
        })?;
        let mut body = Vec::new();
        loop {
            match stream.read(READ_CHUNK) {
                Ok(chunk) if chunk.is_empty() => {
                    if !wait_ready(&stream.subscribe(), self.backstop) {
                        return Err(self.maybe_sent_local(
                            ErrorCode::ConnectionReadTimeout,
                            "timed out reading the response body",
                        ));
                    }
                }
                Ok(chunk) => {
                    if body.len() + chunk.len() > limit {
                        return Err(self.maybe_sent_local(
                            ErrorCode::HttpResponseBodySize(Some(limit as u64)),
                            &format!("the response body exceeds {limit} bytes"),
                        ));
                    }
                    body.extend_from_slice(&chunk);
                }
                Err(StreamError::Closed) => return Ok(body),
                Err(StreamError::LastOperationFailed(err)) => {
                    let code = wasip2::http::types::http_error_code(&err)
                        .unwrap_or(ErrorCode::HttpResponseIncomplete);
                    // The server answered, so it has seen the request whatever the code says.
                    return Err(HttpError::MaybeSent {
                        message: format!(
                            "{}: the response body broke off ({}); \
                             the request may have reached the server",
                            self.what,
                            describe_code(&code)
                        ),
                        code,
                    });
                }
            }
        }
    }

    /// A request the client refused to build: nothing was sent.
    fn not_sent_local(&self, problem: &str) -> HttpError {
        HttpError::NotSent {
            code: ErrorCode::InternalError(Some(problem.to_string())),
            message: format!("{}: {problem}; the request was not sent", self.what),
        }
    }

    /// A failure the client detected itself after handing the request to the host.
    fn maybe_sent_local(&self, code: ErrorCode, problem: &str) -> HttpError {
        HttpError::MaybeSent {
            code,
            message: format!(
                "{}: {problem}; the request may have reached the server",
                self.what
            ),
        }
    }
}

/// The host's connect, first-byte and between-bytes timeouts, all set to `timeout`.
fn request_options(timeout: Duration) -> RequestOptions {
    let options = RequestOptions::new();
    let nanos = u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX);
    // A host that does not support an option refuses it; the client's own backstop
    // still bounds the wait, so the refusal is not an error.
    let _ = options.set_connect_timeout(Some(nanos));
    let _ = options.set_first_byte_timeout(Some(nanos));
    let _ = options.set_between_bytes_timeout(Some(nanos));
    options
}

/// Blocks until `pollable` is ready or `limit` passes; false on timeout.
fn wait_ready(pollable: &Pollable, limit: Duration) -> bool {
    let nanos = u64::try_from(limit.as_nanos()).unwrap_or(u64::MAX);
    let timer = monotonic_clock::subscribe_duration(nanos);
    poll::poll(&[pollable, &timer]).contains(&0)
}

fn stream_error(err: &StreamError) -> String {
    match err {
        StreamError::Closed => "the stream was closed".to_string(),
        StreamError::LastOperationFailed(err) => err.to_debug_string(),
    }
}

/// Write/finish problems are secondary once the response future has answered; keep them
/// for diagnosis without failing the exchange.
fn log_client_issue(what: &str, problem: &str) {
    crate::log::debug(format!("{what}: while sending the body: {problem}"));
}

fn sends_body(method: &Method) -> bool {
    matches!(method, Method::Post | Method::Put | Method::Patch)
}

fn method_name(method: &Method) -> &str {
    match method {
        Method::Get => "GET",
        Method::Head => "HEAD",
        Method::Post => "POST",
        Method::Put => "PUT",
        Method::Delete => "DELETE",
        Method::Connect => "CONNECT",
        Method::Options => "OPTIONS",
        Method::Trace => "TRACE",
        Method::Patch => "PATCH",
        Method::Other(other) => other,
    }
}

/// A readable form of a code, e.g. `connection-refused` or `dns-error (rcode NXDOMAIN)`.
fn describe_code(code: &ErrorCode) -> String {
    match code {
        ErrorCode::DnsTimeout => "DNS timeout".to_string(),
        ErrorCode::DnsError(payload) => format!(
            "DNS error (rcode {}, info code {})",
            payload.rcode.as_deref().unwrap_or("none"),
            payload
                .info_code
                .map_or_else(|| "none".to_string(), |c| c.to_string())
        ),
        ErrorCode::DestinationNotFound => "destination not found".to_string(),
        ErrorCode::DestinationUnavailable => "destination unavailable".to_string(),
        ErrorCode::DestinationIpProhibited => "destination IP prohibited".to_string(),
        ErrorCode::DestinationIpUnroutable => "destination IP unroutable".to_string(),
        ErrorCode::ConnectionRefused => "connection refused".to_string(),
        ErrorCode::ConnectionTerminated => "connection terminated".to_string(),
        ErrorCode::ConnectionTimeout => "connection timeout".to_string(),
        ErrorCode::ConnectionReadTimeout => "read timeout".to_string(),
        ErrorCode::ConnectionWriteTimeout => "write timeout".to_string(),
        ErrorCode::HttpRequestDenied => "denied by the host's outbound policy".to_string(),
        ErrorCode::HttpResponseIncomplete => "incomplete response".to_string(),
        ErrorCode::HttpResponseTimeout => "response timeout".to_string(),
        ErrorCode::HttpProtocolError => "HTTP protocol error".to_string(),
        ErrorCode::InternalError(Some(detail)) => format!("internal error: {detail}"),
        other => format!("{other:?}"),
    }
}

/// The parts of an absolute `http`/`https` URL that `wasi:http` takes separately.
#[derive(Debug)]
struct Target {
    scheme: Scheme,
    authority: String,
    path_and_query: String,
}

fn parse_url(url: &str) -> Result<Target, String> {
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| format!("`{url}` has no scheme; expected http://host:port/path"))?;
    let scheme = match scheme.to_ascii_lowercase().as_str() {
        "http" => Scheme::Http,
        "https" => Scheme::Https,
        other => {
            return Err(format!(
                "scheme `{other}` is not supported; use http or https"
            ));
        }
    };
    let rest = rest.split_once('#').map_or(rest, |(before, _)| before);
    let split = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, path_and_query) = rest.split_at(split);
    if authority.is_empty() {
        return Err(format!("`{url}` has no host"));
    }
    if authority.contains('@') {
        return Err(format!(
            "`{url}` carries credentials; send them in a header instead"
        ));
    }
    let path_and_query = match path_and_query.chars().next() {
        None => "/".to_string(),
        Some('?') => format!("/{path_and_query}"),
        Some(_) => path_and_query.to_string(),
    };
    Ok(Target {
        scheme,
        authority: authority.to_string(),
        path_and_query,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_urls() {
        let t = parse_url("http://127.0.0.1:8080/v1/deliveries?client_reference=a").unwrap();
        assert!(matches!(t.scheme, Scheme::Http));
        assert_eq!(t.authority, "127.0.0.1:8080");
        assert_eq!(t.path_and_query, "/v1/deliveries?client_reference=a");
        assert_eq!(parse_url("https://h").unwrap().path_and_query, "/");
        assert_eq!(parse_url("http://h?x=1#f").unwrap().path_and_query, "/?x=1");
        assert!(parse_url("ftp://h/").is_err());
        assert!(parse_url("127.0.0.1:8080/x").is_err());
        assert!(parse_url("http://user:pw@h/").is_err());
    }

    #[test]
    fn only_pre_send_codes_prove_not_sent() {
        assert!(proves_not_sent(&ErrorCode::ConnectionRefused));
        assert!(proves_not_sent(&ErrorCode::HttpRequestDenied));
        assert!(!proves_not_sent(&ErrorCode::ConnectionReadTimeout));
        assert!(!proves_not_sent(&ErrorCode::ConnectionTerminated));
        assert!(!proves_not_sent(&ErrorCode::HttpResponseIncomplete));
        assert!(!proves_not_sent(&ErrorCode::HttpProtocolError));
        assert!(!proves_not_sent(&ErrorCode::InternalError(None)));
    }

    #[test]
    fn encodes_query_components() {
        assert_eq!(
            encode_query_component("a b/c?d=é"),
            "a%20b%2Fc%3Fd%3D%C3%A9"
        );
        assert_eq!(encode_query_component("wf-1_step.2~"), "wf-1_step.2~");
    }
}
