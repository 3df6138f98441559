//! Transport failures, sorted by whether the server may have seen the request.

use core::fmt;

use super::ErrorCode;
use crate::EffectError;

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

/// A readable form of a code for messages, e.g. "connection refused".
pub(super) fn describe_code(code: &ErrorCode) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
