//! The provider connection (settings, token, timeout) and the mapping of its answers to
//! the contract's typed errors.

use core::time::Duration;

use docket_guest::http::{self, Method, Response};
use docket_guest::{EffectError, secrets, settings};
use serde_json::{Map, Value};

/// The secret holding the provider's bearer token.
pub const TOKEN_SECRET: &str = "provider_token";

/// Used when the operator sets no `timeout_ms`.
const DEFAULT_TIMEOUT_MS: u64 = 10_000;

/// Used when a 429 carries no usable `Retry-After`.
const DEFAULT_RETRY_AFTER_MS: u64 = 1_000;

/// How much of an error body goes into a message.
const SNIPPET_CHARS: usize = 200;

/// Where and how to reach the provider for one call.
pub struct Provider {
    base_url: String,
    timeout: Duration,
    token: String,
}

impl Provider {
    /// Reads `base_url`, `timeout_ms` and the token from the host.
    pub fn from_host() -> Result<Self, EffectError> {
        let base_url = match settings::get("base_url") {
            Some(url) if !url.trim().is_empty() => url.trim().trim_end_matches('/').to_string(),
            _ => {
                return Err(EffectError::rejected(
                    "missing_setting",
                    "setting `base_url` is not set; add the provider's base URL to this \
                     adapter's settings in the host configuration \
                     (e.g. base_url = \"http://127.0.0.1:8080\")",
                ));
            }
        };
        let timeout_ms = match settings::get("timeout_ms") {
            None => DEFAULT_TIMEOUT_MS,
            Some(raw) => match raw.trim().parse::<u64>() {
                Ok(ms) if ms > 0 => ms,
                _ => {
                    return Err(EffectError::rejected(
                        "invalid_setting",
                        format!(
                            "setting `timeout_ms` is {raw:?}; expected a positive whole \
                             number of milliseconds (e.g. \"5000\")"
                        ),
                    ));
                }
            },
        };
        let token = secrets::get(TOKEN_SECRET)?;
        Ok(Provider {
            base_url,
            timeout: Duration::from_millis(timeout_ms),
            token,
        })
    }

    /// A request to `path` (starting with `/`) carrying the bearer token and the timeout.
    pub fn request(&self, method: Method, path: &str) -> http::Request {
        http::Request::new(method, format!("{}{path}", self.base_url))
            .header("authorization", format!("Bearer {}", self.token))
            .header("accept", "application/json")
            .timeout(self.timeout)
    }
}

/// Parses a delivery object that must carry a string `id`; the error completes a sentence.
pub fn delivery(body: &[u8]) -> Result<Map<String, Value>, String> {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(delivery)) => check_delivery(delivery),
        Ok(_) => Err("the body is not a JSON object".to_string()),
        Err(err) => Err(format!("the body is not JSON ({err})")),
    }
}

/// The first delivery of a lookup answer `{"data": [...]}`, if any.
pub fn first_listed(body: &[u8]) -> Result<Option<Map<String, Value>>, String> {
    let answer: Value =
        serde_json::from_slice(body).map_err(|err| format!("the body is not JSON ({err})"))?;
    let Some(Value::Array(list)) = answer.get("data") else {
        return Err("the body has no `data` list".to_string());
    };
    match list.first() {
        None => Ok(None),
        Some(Value::Object(delivery)) => check_delivery(delivery.clone()).map(Some),
        Some(_) => Err("a listed delivery is not a JSON object".to_string()),
    }
}

fn check_delivery(delivery: Map<String, Value>) -> Result<Map<String, Value>, String> {
    match delivery.get("id") {
        Some(Value::String(id)) if !id.is_empty() => Ok(delivery),
        _ => Err("the delivery has no `id`".to_string()),
    }
}

/// The provider's status word of a cancelled delivery.
pub const CANCELLED: &str = "cancelled";

/// The `status` of a delivery, or `unknown` when the provider sent none.
pub fn delivery_status(delivery: &Map<String, Value>) -> &str {
    delivery
        .get("status")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .unwrap_or("unknown")
}

/// The `id` of a delivery accepted by [`delivery`] or [`first_listed`].
pub fn delivery_id(delivery: &Map<String, Value>) -> &str {
    delivery
        .get("id")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// Maps a non-success answer to the typed error that tells the host what to do next.
/// `action` completes "while ..." in messages.
pub fn error_for(response: &Response, action: &str) -> EffectError {
    let status = response.status;
    let reason = error_code(response);
    let detail = reason.clone().unwrap_or_else(|| snippet(&response.text()));
    match status {
        409 => EffectError::idempotency_conflict(format!(
            "the provider refused {action}: the idempotency key was already used with a \
             different request ({detail}, HTTP 409)"
        )),
        422 => EffectError::rejected(
            reason.unwrap_or_else(|| "unprocessable".to_string()),
            format!("the provider rejected {action}: {detail} (HTTP 422)"),
        ),
        401 | 403 => EffectError::unauthorized(format!(
            "the provider refused the credentials while {action} (HTTP {status}); \
             check secret `{TOKEN_SECRET}`"
        )),
        429 => {
            let retry_after_ms = retry_after_ms(response);
            EffectError::rate_limited(
                retry_after_ms,
                format!(
                    "the provider rate-limited {action}; retry after {retry_after_ms} ms \
                     (HTTP 429)"
                ),
            )
        }
        502..=504 => EffectError::unavailable(format!(
            "the provider is unavailable while {action} (HTTP {status})"
        )),
        500..=599 => EffectError::outcome_unknown(format!(
            "the provider failed while {action} and may have acted: {detail} (HTTP {status})"
        )),
        400..=499 => EffectError::rejected(
            format!("http_{status}"),
            format!("the provider refused {action}: {detail} (HTTP {status})"),
        ),
        _ => EffectError::outcome_unknown(format!(
            "the provider gave an unexpected answer while {action}: {detail} (HTTP {status})"
        )),
    }
}

/// The provider's machine-readable reason, from `{"error": "..."}`.
fn error_code(response: &Response) -> Option<String> {
    let body: Value = serde_json::from_slice(&response.body).ok()?;
    match body.get("error")? {
        Value::String(code) if !code.is_empty() => Some(code.clone()),
        _ => None,
    }
}

/// `Retry-After` in whole or fractional seconds, as milliseconds. HTTP dates and absent or
/// malformed values fall back to a default.
fn retry_after_ms(response: &Response) -> u64 {
    response
        .header("retry-after")
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|secs| secs.is_finite() && *secs >= 0.0)
        // Float-to-int `as` saturates, so a huge value cannot wrap.
        .map(|secs| (secs * 1000.0).ceil() as u64)
        .unwrap_or(DEFAULT_RETRY_AFTER_MS)
}

fn snippet(text: &str) -> String {
    let text = text.trim();
    if text.is_empty() {
        return "no body".to_string();
    }
    let mut cut: String = text.chars().take(SNIPPET_CHARS).collect();
    if cut.len() < text.len() {
        cut.push('…');
    }
    cut
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn maps_statuses_to_typed_errors() {
        let e = |status, body| error_for(&response(status, &[], body), "x");
        assert!(matches!(
            e(409, r#"{"error":"idempotency_key_reused"}"#),
            EffectError::IdempotencyConflict(_)
        ));
        assert!(
            matches!(e(422, r#"{"error":"invalid_recipient"}"#), EffectError::Rejected(r) if r.code == "invalid_recipient")
        );
        assert!(matches!(e(401, ""), EffectError::Unauthorized(_)));
        assert!(matches!(e(503, ""), EffectError::Unavailable(_)));
        assert!(matches!(e(500, ""), EffectError::OutcomeUnknown(_)));
        assert!(matches!(e(418, ""), EffectError::Rejected(r) if r.code == "http_418"));
    }

    #[test]
    fn reads_retry_after() {
        let limited = |headers: &[(&str, &str)]| retry_after_ms(&response(429, headers, ""));
        assert_eq!(limited(&[("Retry-After", "3")]), 3_000);
        assert_eq!(limited(&[("retry-after", "0.5")]), 500);
        assert_eq!(limited(&[]), DEFAULT_RETRY_AFTER_MS);
        assert_eq!(
            limited(&[("retry-after", "Wed, 21 Oct 2015 07:28:00 GMT")]),
            1_000
        );
    }

    #[test]
    fn reads_lookup_answers() {
        assert_eq!(first_listed(br#"{"data":[]}"#), Ok(None));
        let found = first_listed(br#"{"data":[{"id":"dlv_1"},{"id":"dlv_2"}]}"#).unwrap();
        assert_eq!(delivery_id(&found.unwrap()), "dlv_1");
        assert!(first_listed(br#"{"nope":1}"#).is_err());
        assert!(delivery(br#"{"status":"accepted"}"#).is_err());
        let cancelled = delivery(br#"{"id":"dlv_1","status":"cancelled"}"#).unwrap();
        assert_eq!(delivery_status(&cancelled), CANCELLED);
        assert_eq!(
            delivery_status(&delivery(br#"{"id":"dlv_1"}"#).unwrap()),
            "unknown"
        );
    }
}
