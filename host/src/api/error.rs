//! The one error type of the API and its JSON form.
//!
//! Every refusal is `{"error": {"code", "message", "details"}}` with a `snake_case` code
//! of the API's list and a message that says what was wrong (quoting the value) and how to fix
//! it. Failures inside the host (store, stored definitions) are logged here with their
//! cause and answered with a generic message: internals never reach the client.

use crate::catalog::DeployError;
use crate::store::{Retry, StoreError};
use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// What went wrong, as a client reads it; each code has one HTTP status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    /// 400: the `Idempotency-Key` is malformed.
    InvalidKey,
    /// 400: the body is not JSON.
    InvalidJson,
    /// 400: the body is JSON of the wrong shape.
    InvalidRequest,
    /// 400: a required header or query parameter is missing.
    MissingParameter,
    /// 400: a query parameter has a bad value.
    InvalidParameter,
    /// 401: no or an unknown bearer token.
    Unauthorized,
    /// 403: authenticated, but the role may not do this.
    Forbidden,
    /// 404: nothing here, or nothing this caller may see.
    NotFound,
    /// 405: the path exists, the method does not.
    MethodNotAllowed,
    /// 409: the key is already used with a different input.
    KeyConflict,
    /// 409: an operator action the step's state or the adapter's contract does not allow.
    InvalidTransition,
    /// 409: a correction after a consequential effect: it must be a new request.
    RevisionRefused,
    /// 409: a migration the plan or the workflow does not allow (details name each reason).
    MigrationRefused,
    /// 409: an approval of a consequence that is no longer the one asked about (details
    /// name the current digest).
    ConsequenceChanged,
    /// 413: the body is over the configured limit.
    PayloadTooLarge,
    /// 422: the input does not satisfy the definition's schema.
    InvalidInput,
    /// 422: a policy or definition document is invalid (details name line and column).
    InvalidDocument,
    /// 500: a fault inside the host; the log has the cause.
    Internal,
    /// 503: the database is unavailable; nothing was changed, retry later.
    Unavailable,
    /// 421: open mode answers only to loopback names.
    Misdirected,
    /// 429: too many failed authentications from this client.
    TooManyRequests,
}

impl ErrorCode {
    /// Every code, for the API's description.
    pub const ALL: &'static [ErrorCode] = &[
        ErrorCode::InvalidKey,
        ErrorCode::InvalidJson,
        ErrorCode::InvalidRequest,
        ErrorCode::MissingParameter,
        ErrorCode::InvalidParameter,
        ErrorCode::Unauthorized,
        ErrorCode::Forbidden,
        ErrorCode::NotFound,
        ErrorCode::MethodNotAllowed,
        ErrorCode::KeyConflict,
        ErrorCode::InvalidTransition,
        ErrorCode::RevisionRefused,
        ErrorCode::MigrationRefused,
        ErrorCode::ConsequenceChanged,
        ErrorCode::PayloadTooLarge,
        ErrorCode::InvalidInput,
        ErrorCode::InvalidDocument,
        ErrorCode::Internal,
        ErrorCode::Unavailable,
        ErrorCode::Misdirected,
        ErrorCode::TooManyRequests,
    ];

    /// The `snake_case` code on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidKey => "invalid_key",
            ErrorCode::InvalidJson => "invalid_json",
            ErrorCode::InvalidRequest => "invalid_request",
            ErrorCode::MissingParameter => "missing_parameter",
            ErrorCode::InvalidParameter => "invalid_parameter",
            ErrorCode::Unauthorized => "unauthorized",
            ErrorCode::Forbidden => "forbidden",
            ErrorCode::Misdirected => "misdirected",
            ErrorCode::TooManyRequests => "too_many_requests",
            ErrorCode::NotFound => "not_found",
            ErrorCode::MethodNotAllowed => "method_not_allowed",
            ErrorCode::KeyConflict => "key_conflict",
            ErrorCode::InvalidTransition => "invalid_transition",
            ErrorCode::ConsequenceChanged => "consequence_changed",
            ErrorCode::RevisionRefused => "revision_refused",
            ErrorCode::MigrationRefused => "migration_refused",
            ErrorCode::PayloadTooLarge => "payload_too_large",
            ErrorCode::InvalidInput => "invalid_input",
            ErrorCode::InvalidDocument => "invalid_document",
            ErrorCode::Internal => "internal",
            ErrorCode::Unavailable => "unavailable",
        }
    }

    /// The HTTP status that goes with the code.
    pub fn status(self) -> StatusCode {
        match self {
            ErrorCode::InvalidKey
            | ErrorCode::InvalidJson
            | ErrorCode::InvalidRequest
            | ErrorCode::MissingParameter
            | ErrorCode::InvalidParameter => StatusCode::BAD_REQUEST,
            ErrorCode::Unauthorized => StatusCode::UNAUTHORIZED,
            ErrorCode::Forbidden => StatusCode::FORBIDDEN,
            ErrorCode::Misdirected => StatusCode::MISDIRECTED_REQUEST,
            ErrorCode::TooManyRequests => StatusCode::TOO_MANY_REQUESTS,
            ErrorCode::NotFound => StatusCode::NOT_FOUND,
            ErrorCode::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ErrorCode::KeyConflict => StatusCode::CONFLICT,
            ErrorCode::InvalidTransition
            | ErrorCode::RevisionRefused
            | ErrorCode::MigrationRefused
            | ErrorCode::ConsequenceChanged => StatusCode::CONFLICT,
            ErrorCode::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ErrorCode::InvalidInput | ErrorCode::InvalidDocument => {
                StatusCode::UNPROCESSABLE_ENTITY
            }
            ErrorCode::Internal => StatusCode::INTERNAL_SERVER_ERROR,
            ErrorCode::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        }
    }
}

/// A refused request: code, message for people, structured details.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub code: ErrorCode,
    pub message: String,
    pub details: Vec<Value>,
    /// Where to go instead (e.g. `{"replacement": "/v1/workflows/…/replacement"}`).
    pub links: Option<Value>,
}

/// Results of handlers.
pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    /// An error without details.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            details: Vec::new(),
            links: None,
        }
    }

    /// Attaches links to where the caller should go instead.
    pub fn with_links(mut self, links: Value) -> Self {
        self.links = Some(links);
        self
    }

    /// Attaches structured details.
    pub fn with_details(mut self, details: Vec<Value>) -> Self {
        self.details = details;
        self
    }

    /// `404 not_found`.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::NotFound, message)
    }

    /// `400 invalid_parameter` for query parameter `name` with value `value`.
    pub fn invalid_parameter(name: &str, value: &str, expected: &str) -> Self {
        Self::new(
            ErrorCode::InvalidParameter,
            format!(
                "query parameter `{name}` is `{}`, but {expected}",
                quote(value)
            ),
        )
        .with_details(vec![json!({"parameter": name, "value": value})])
    }

    /// A fault inside the host: logs `cause` and answers `500 internal` without it.
    pub fn internal(cause: impl std::fmt::Display) -> Self {
        tracing::error!(error = %cause, "internal error while answering an API request");
        Self::new(
            ErrorCode::Internal,
            "the host failed while answering; nothing about the request was wrong. The host's log \
             has the cause; retry later, and report it if it persists",
        )
    }
}

/// Characters of a client's value quoted in a message before it is cut short.
const MAX_QUOTED: usize = 80;

/// A client-supplied value fit to quote in a message: control characters escaped, and
/// cut at 80 characters with "…".
pub fn quote(value: &str) -> String {
    let mut out = String::new();
    for (i, c) in value.chars().enumerate() {
        if i == MAX_QUOTED {
            out.push('…');
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Backend {
                retry: Retry::Safe,
                cause,
            } => {
                tracing::warn!(error = %cause, "database unavailable while answering an API request");
                ApiError::new(
                    ErrorCode::Unavailable,
                    "the database is unavailable or busy; nothing was changed. Retry the same request \
                     (with the same Idempotency-Key) in a moment",
                )
            }
            // The client must not be told that nothing changed: it may have.
            StoreError::Backend {
                retry: Retry::Unknown,
                cause,
            } => {
                tracing::error!(error = %cause, "a write's outcome is unknown while answering an API request");
                ApiError::new(
                    ErrorCode::Unavailable,
                    "the database did not confirm the change, so it may or may not have been recorded. \
                     Send the same request again with the same Idempotency-Key: it answers with what \
                     was recorded and never acts twice",
                )
            }
            e @ StoreError::Unverified { .. } => {
                ApiError::new(ErrorCode::InvalidTransition, e.to_string())
            }
            other => ApiError::internal(other),
        }
    }
}

impl From<DeployError> for ApiError {
    fn from(e: DeployError) -> Self {
        match e {
            DeployError::Store(store) => store.into(),
            other => ApiError::internal(other),
        }
    }
}

impl ApiError {
    /// The JSON envelope of this error.
    pub fn body(&self) -> Value {
        let mut error = json!({
            "code": self.code.as_str(),
            "message": self.message,
            "details": self.details,
        });
        if let Some(links) = &self.links {
            error["links"] = links.clone();
        }
        json!({ "error": error })
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = self.body();
        let mut response = (self.code.status(), Json(body)).into_response();
        match self.code {
            ErrorCode::Unavailable => {
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            }
            ErrorCode::TooManyRequests => {
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from_static("60"));
            }
            ErrorCode::Unauthorized => {
                response
                    .headers_mut()
                    .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            _ => {}
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn renders_the_error_envelope() {
        let response = ApiError::new(ErrorCode::KeyConflict, "used")
            .with_details(vec![json!({"workflow_id": "wf_1"})])
            .into_response();
        assert_eq!(response.status(), StatusCode::CONFLICT);
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 16)
            .await
            .unwrap();
        let body: Value = serde_json::from_slice(&bytes).unwrap();
        let details = json!([{"workflow_id": "wf_1"}]);
        assert_eq!(
            body,
            json!({"error": {"code": "key_conflict", "message": "used", "details": details}})
        );
    }

    #[test]
    fn quotes_are_short_and_printable() {
        assert_eq!(quote("a\tb"), "a\\tb");
        assert_eq!(quote(&"x".repeat(100)), format!("{}…", "x".repeat(80)));
    }

    #[test]
    fn backend_failures_are_unavailable_and_others_internal() {
        let e: ApiError = StoreError::safe("disk I/O error at /secret/path").into();
        assert_eq!(e.code, ErrorCode::Unavailable);
        assert!(!e.message.contains("/secret/path"));
        assert!(e.message.contains("nothing was changed"), "{}", e.message);
        // A write whose commit may have happened is never reported as "nothing changed".
        let e: ApiError = StoreError::unknown("connection lost at COMMIT").into();
        assert_eq!(e.code, ErrorCode::Unavailable);
        assert!(!e.message.contains("nothing was changed"), "{}", e.message);
        assert!(
            e.message.contains("may or may not have been recorded"),
            "{}",
            e.message
        );
        let e: ApiError = StoreError::never("constraint failed").into();
        assert_eq!(e.code, ErrorCode::Internal);
        let e: ApiError = StoreError::Corrupt("bad row".into()).into();
        assert_eq!(e.code, ErrorCode::Internal);
        assert!(!e.message.contains("bad row"));
    }
}
