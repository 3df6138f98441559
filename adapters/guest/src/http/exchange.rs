//! One request's trip through `wasi:http`: build, hand to the host, stream the body,
//! wait for the answer with a backstop timer, read the whole response.

use core::time::Duration;

use wasip2::clocks::monotonic_clock;
use wasip2::http::outgoing_handler;
use wasip2::http::types::{
    Fields, FutureIncomingResponse, IncomingBody, IncomingResponse, OutgoingBody, OutgoingRequest,
    RequestOptions,
};
use wasip2::io::poll::{self, Pollable};
use wasip2::io::streams::{InputStream, OutputStream, StreamError};

use super::error::describe_code;
use super::url::parse_url;
use super::{ErrorCode, HttpError, Method, Request, Response};

/// Extra time the client waits on its own before giving up, so the host's typed timeout
/// errors (which tell "never connected" from "no answer") normally arrive first.
const BACKSTOP_GRACE: Duration = Duration::from_secs(1);

/// Largest chunk read from a response body at once.
const READ_CHUNK: u64 = 64 * 1024;

/// One request's trip through the host, with the context for its error messages.
pub(super) struct Exchange<'a> {
    /// `METHOD url`, for messages.
    what: &'a str,
    /// How long any single wait may last before the client gives up on its own.
    backstop: Duration,
}

impl<'a> Exchange<'a> {
    /// An exchange for the request described by `what` (`METHOD url`). The host applies
    /// `timeout` to each phase; the client's own backstop allows two phases plus a grace.
    pub(super) fn new(what: &'a str, timeout: Duration) -> Self {
        Exchange {
            what,
            backstop: timeout.saturating_mul(2).saturating_add(BACKSTOP_GRACE),
        }
    }

    pub(super) fn run(&self, request: Request) -> Result<Response, HttpError> {
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
        if bytes.is_empty() {
            // With `content-length: 0` the host closes the stream at once; nothing to write.
            return Ok(());
        }
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
        // Every byte is handed over. The host may close the stream once `content-length`
        // bytes have arrived, so from here on `closed` means done.
        match stream.flush() {
            Ok(()) => {}
            Err(StreamError::Closed) => return Ok(()),
            Err(e) => return Err(stream_error(&e)),
        }
        // A flush completes when check-write succeeds again.
        loop {
            match stream.check_write() {
                Ok(0) => {
                    if !wait_ready(&stream.subscribe(), self.backstop) {
                        return Err("timed out flushing the request body".to_string());
                    }
                }
                Ok(_) | Err(StreamError::Closed) => return Ok(()),
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
