//! A blocking HTTP client over raw `wasi:http/outgoing-handler` (adapter world only).
//!
//! It keeps the host's `wasi:http` [`ErrorCode`] and sorts every failure into
//! [`HttpError::NotSent`] (nothing left the guest, so a retry cannot duplicate the effect)
//! or [`HttpError::MaybeSent`] (the server may have received and acted on the request).
//! When a code does not prove that nothing was sent, it counts as maybe sent.
//!
//! ```text
//! use docket_guest::http::Request;
//!
//! let response = Request::post("http://127.0.0.1:8080/v1/things")
//!     .header("authorization", format!("Bearer {token}"))
//!     .body(r#"{"a":1}"#)
//!     .header("content-type", "application/json")
//!     .timeout(std::time::Duration::from_secs(5))
//!     .send()? // HttpError converts to EffectError
//!     .error_for_status()?; // a refusal or a failure is never a receipt
//! ```

mod error;
mod exchange;
mod url;

use core::fmt;
use core::time::Duration;

pub use self::error::{HttpError, proves_not_sent};
pub use self::url::encode_query_component;
pub use wasip2::http::types::{ErrorCode, Method};

/// Used when a request sets no timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// Responses larger than this are refused unless [`Request::max_response_bytes`] says otherwise.
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 8 << 20;

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
        exchange::Exchange::new(&what, self.timeout).run(self)
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

    /// The response if its status is 2xx; otherwise what the status tells the host:
    /// 429 (with `Retry-After`, default 1 s) is rate-limited and 503 unavailable — both
    /// retried, nothing was created; 409 is an idempotency conflict; 401 and 403 are
    /// unauthorized; another 4xx is rejected; and anything else (500, 502, 504, an
    /// unexpected 1xx or 3xx) came after the request may have been acted on, so the outcome
    /// is unknown. Never turns a refusal into a receipt.
    pub fn error_for_status(self) -> Result<Response, crate::EffectError> {
        use crate::EffectError;
        let excerpt = || {
            let text = self.text();
            let cut: String = text.chars().take(200).collect();
            if cut.is_empty() {
                format!("HTTP {}", self.status)
            } else {
                format!("HTTP {}: {cut}", self.status)
            }
        };
        match self.status {
            200..=299 => Ok(self),
            429 => {
                let retry_after_ms = self
                    .header("retry-after")
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .map_or(1_000, |s| s.saturating_mul(1_000));
                Err(EffectError::rate_limited(retry_after_ms, excerpt()))
            }
            503 => Err(EffectError::unavailable(excerpt())),
            409 => Err(EffectError::idempotency_conflict(excerpt())),
            401 | 403 => Err(EffectError::unauthorized(excerpt())),
            400..=499 => Err(EffectError::rejected(
                format!("http_{}", self.status),
                excerpt(),
            )),
            _ => Err(EffectError::outcome_unknown(excerpt())),
        }
    }
}

/// The method's name as sent on the wire.
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

#[cfg(test)]
mod tests {
    use super::Response;
    use crate::EffectError;

    fn response(status: u16, headers: &[(&str, &str)], body: &str) -> Response {
        Response {
            status,
            headers: headers
                .iter()
                .map(|(n, v)| (n.to_string(), v.as_bytes().to_vec()))
                .collect(),
            body: body.as_bytes().to_vec(),
        }
    }

    #[test]
    fn each_status_says_what_the_host_does_next() {
        assert!(response(201, &[], "{}").error_for_status().is_ok());
        assert!(response(204, &[], "").error_for_status().is_ok());
        let err = |status, headers: &[(&str, &str)]| {
            response(status, headers, "no")
                .error_for_status()
                .expect_err("not a success")
        };
        match err(429, &[("Retry-After", "7")]) {
            EffectError::RateLimited(r) => assert_eq!(r.retry_after_ms, 7_000),
            other => panic!("429: {other:?}"),
        }
        match err(429, &[]) {
            EffectError::RateLimited(r) => assert_eq!(r.retry_after_ms, 1_000),
            other => panic!("429 without Retry-After: {other:?}"),
        }
        assert!(matches!(err(503, &[]), EffectError::Unavailable(_)));
        assert!(matches!(err(409, &[]), EffectError::IdempotencyConflict(_)));
        assert!(matches!(err(401, &[]), EffectError::Unauthorized(_)));
        assert!(matches!(err(403, &[]), EffectError::Unauthorized(_)));
        match err(422, &[]) {
            EffectError::Rejected(r) => {
                assert_eq!(r.code, "http_422");
                assert_eq!(r.message, "HTTP 422: no");
            }
            other => panic!("422: {other:?}"),
        }
        assert!(matches!(err(404, &[]), EffectError::Rejected(_)));
        for status in [500, 502, 504, 302, 100] {
            assert!(
                matches!(err(status, &[]), EffectError::OutcomeUnknown(_)),
                "{status}"
            );
        }
    }
}
