//! What plugins declare and return, as plain host types.
//!
//! These mirror the records of `wit/docket.wit` one to one, so the rest of the host never
//! sees generated bindings. They serialise as `snake_case` JSON for the CLI and the API.

use crate::intent::Millis;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// An adapter's declared contract (`describe()`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Contract {
    pub name: String,
    pub version: String,
    pub idempotency: IdempotencyClaim,
    pub query: QueryClaim,
    pub compensation: CompensationClaim,
    pub capabilities: DeclaredCapabilities,
    /// The adapter reads its provider's own deliveries (webhooks): it exports `observer`.
    #[serde(default)]
    pub observes: bool,
    /// The most items one batch call takes, when the adapter exports `batcher`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<u32>,
}

impl Contract {
    /// Whether the declaration can be relied on: a semantic version, a namespace for the
    /// keys (docket derives every external key from it), and a retention when the adapter
    /// claims idempotency (a key remembered for no time protects nothing). The message
    /// names the fix.
    pub fn check(&self) -> Result<(), ContractError> {
        if semver::Version::parse(&self.version).is_err() {
            return Err(ContractError::Version(self.version.clone()));
        }
        if self.idempotency.namespace.trim().is_empty() {
            return Err(ContractError::EmptyNamespace);
        }
        if self.idempotency.supported && self.idempotency.retention_seconds == 0 {
            return Err(ContractError::NoRetention);
        }
        Ok(())
    }

    /// Until when the provider remembers the key of a request first sent at `since`: after
    /// it, the provider may take the same key for a new request. `None` when the adapter
    /// does not declare idempotency, so it remembers no key at all.
    pub fn remembered_until(&self, since: Millis) -> Option<Millis> {
        self.idempotency
            .supported
            .then(|| since.saturating_add(self.idempotency.retention_seconds.saturating_mul(1000)))
    }

    /// Whether repeating, at `now`, a request first sent at `since` under the same key is
    /// safe: only while the provider still remembers the key can it not make a second
    /// effect (invariant 4).
    pub fn same_key_retry(&self, since: Millis, now: Millis) -> SameKeyRetry {
        self.same_key_retry_until(None, since, now)
    }

    /// As [`Contract::same_key_retry`], with the deadline recorded when the request was
    /// first sent (checkpoint 3) taking precedence over one computed from `since`: the
    /// one date the step shows, warns of and recovers by.
    pub fn same_key_retry_until(
        &self,
        recorded: Option<Millis>,
        since: Millis,
        now: Millis,
    ) -> SameKeyRetry {
        let until = self
            .remembered_until(since)
            .map(|computed| recorded.unwrap_or(computed));
        match until {
            None => SameKeyRetry::NotIdempotent,
            Some(until) if now >= until => SameKeyRetry::Forgotten { at: until },
            Some(until) => SameKeyRetry::Safe { until },
        }
    }
}

/// Whether a retry under the key of an earlier request can make a second effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SameKeyRetry {
    /// The provider deduplicates the key until `until`.
    Safe { until: Millis },
    /// The adapter does not declare idempotency: a retry would be a new request.
    NotIdempotent,
    /// The provider forgot the key at `at`: a retry could duplicate the effect.
    Forgotten { at: Millis },
}

/// Why a declared contract is unusable; each message names the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ContractError {
    #[error("version `{0}` is not semantic versioning; declare e.g. `1.0.0`")]
    Version(String),
    #[error(
        "the idempotency namespace is empty; declare the provider's deduplication domain, e.g. `.namespace(\"my-provider\")`"
    )]
    EmptyNamespace,
    #[error(
        "it claims idempotency with a retention of 0 seconds; declare how long the provider remembers a key"
    )]
    NoRetention,
}

/// Whether the provider deduplicates requests by key, for how long, and in which namespace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdempotencyClaim {
    pub supported: bool,
    pub retention_seconds: u64,
    pub namespace: String,
}

impl IdempotencyClaim {
    /// How long the provider remembers a key.
    pub fn retention(&self) -> Duration {
        Duration::from_secs(self.retention_seconds)
    }
}

/// Whether an earlier request can be looked up by its stable reference.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueryClaim {
    pub supported: bool,
    pub visibility_window_ms: u64,
}

/// Whether an effect can be undone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompensationClaim {
    pub supported: bool,
}

/// Capabilities an adapter says it needs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeclaredCapabilities {
    /// `scheme://host:port`, `host:port`, or `$setting` naming a setting that holds a base URL.
    pub outbound_hosts: Vec<String>,
    pub secrets: Vec<String>,
}

/// A handler's declaration (`describe()` of the handler world).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandlerContract {
    pub name: String,
    pub version: String,
}

/// One side-effect request handed to an adapter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EffectRequest {
    pub idempotency_key: String,
    /// JSON text of the step's mapped input.
    pub input: String,
    pub attempt: u32,
}

/// One item of a batch call: an effect of its own, under its own key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchItem {
    pub idempotency_key: String,
    /// JSON text of the item's mapped input.
    pub input: String,
}

/// Many effects sent in one `invoke-batch` call (an adapter whose contract gives `batch`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchRequest {
    /// The batch's own key: the same for every attempt of the same set of items.
    pub batch_key: String,
    pub items: Vec<BatchItem>,
    pub attempt: u32,
}

/// A request to reverse an effect that is known to have happened (`compensate`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompensationRequest {
    /// The compensation's own external key, derived for the step id `<step>.compensate`:
    /// not the original step's key.
    pub idempotency_key: String,
    /// JSON text of the compensation's mapped input.
    pub input: String,
    /// The original step's receipt: the effect to reverse.
    pub original_receipt: PluginReceipt,
    /// 1 for the compensation's first attempt.
    pub attempt: u32,
}

/// An adapter's evidence that an effect happened.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PluginReceipt {
    pub external_reference: String,
    /// JSON text of the structured result.
    pub output: String,
}

/// Where a found effect stands, in the terms the host acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EffectStatus {
    /// It happened and has not been reversed.
    InEffect,
    /// A compensation took effect.
    Reversed,
    /// The provider says the request did not take effect: a person decides, never an
    /// automatic retry.
    Refused,
}

impl EffectStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            EffectStatus::InEffect => "in_effect",
            EffectStatus::Reversed => "reversed",
            EffectStatus::Refused => "refused",
        }
    }
}

impl std::str::FromStr for EffectStatus {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [
            EffectStatus::InEffect,
            EffectStatus::Reversed,
            EffectStatus::Refused,
        ]
        .into_iter()
        .find(|e| e.as_str() == s)
        .ok_or_else(|| format!("`{s}` is not an effect status (in_effect, reversed, refused)"))
    }
}

/// A delivery a provider posted to the host (a webhook), its signature verified, as the
/// adapter's `observe` reads it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inbound {
    pub method: String,
    pub path: String,
    /// Lower-case names, in the order received.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// One piece of evidence a provider's delivery carries about one effect.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Observation {
    pub external_reference: Option<String>,
    /// The idempotency key the host sent for the effect, when the delivery carries it back.
    pub idempotency_key: Option<String>,
    /// The provider's id of the event: seen twice, recorded once.
    pub event_id: Option<String>,
    pub status: EffectStatus,
    /// The provider's own word: recorded and shown, never interpreted.
    pub provider_status: String,
    pub observed_at_ms: Option<Millis>,
    /// JSON text of the effect's output, when the delivery holds it.
    pub output: Option<String>,
}

/// Why a provider's delivery yields no observation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ObserveError {
    /// Not a delivery the adapter understands (another event type, another shape).
    #[error("not a delivery this adapter reads: {message}")]
    Unrecognized { message: String },
    /// A delivery of the right kind that cannot be read.
    #[error("a malformed delivery: {message}")]
    Malformed { message: String },
}

/// The answer of a lookup by stable reference.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "lookup", rename_all = "snake_case")]
pub enum Lookup {
    Found {
        receipt: PluginReceipt,
        status: EffectStatus,
        /// The provider's own word (e.g. `cancelled`): recorded and shown, never interpreted.
        provider_status: String,
    },
    Absent,
}

/// Why an adapter call produced no receipt, typed by what the host does next.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum EffectError {
    /// Permanent: end the step, never retry.
    #[error("rejected ({code}): {message}")]
    Rejected { code: String, message: String },
    /// Block the step for credential or policy review.
    #[error("unauthorized: {message}")]
    Unauthorized { message: String },
    /// Retry after the delay; nothing was created.
    #[error("rate limited, retry after {retry_after_ms} ms: {message}")]
    RateLimited {
        retry_after_ms: u64,
        message: String,
    },
    /// Retry with backoff (no sooner than the provider's retry-after, when it gave one);
    /// nothing was created.
    #[error("unavailable: {message}")]
    Unavailable {
        message: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        retry_after_ms: Option<u64>,
    },
    /// The request never left: safe to retry.
    #[error("not sent: {message}")]
    NotSent { message: String },
    /// The provider saw the key with another request: review, never a new key.
    #[error("idempotency conflict: {message}")]
    IdempotencyConflict { message: String },
    /// The effect may have happened: recover by contract.
    #[error("outcome unknown: {observation}")]
    OutcomeUnknown { observation: String },
}

impl EffectError {
    /// The `snake_case` name of the variant, as written on the wire.
    pub fn kind(&self) -> &'static str {
        match self {
            EffectError::Rejected { .. } => "rejected",
            EffectError::Unauthorized { .. } => "unauthorized",
            EffectError::RateLimited { .. } => "rate_limited",
            EffectError::Unavailable { .. } => "unavailable",
            EffectError::NotSent { .. } => "not_sent",
            EffectError::IdempotencyConflict { .. } => "idempotency_conflict",
            EffectError::OutcomeUnknown { .. } => "outcome_unknown",
        }
    }

    /// Applies `f` to every free-text field (used for redaction).
    pub fn map_text(self, f: impl Fn(String) -> String) -> Self {
        match self {
            EffectError::Rejected { code, message } => EffectError::Rejected {
                code: f(code),
                message: f(message),
            },
            EffectError::Unauthorized { message } => EffectError::Unauthorized {
                message: f(message),
            },
            EffectError::RateLimited {
                retry_after_ms,
                message,
            } => EffectError::RateLimited {
                retry_after_ms,
                message: f(message),
            },
            EffectError::Unavailable {
                message,
                retry_after_ms,
            } => EffectError::Unavailable {
                message: f(message),
                retry_after_ms,
            },
            EffectError::NotSent { message } => EffectError::NotSent {
                message: f(message),
            },
            EffectError::IdempotencyConflict { message } => EffectError::IdempotencyConflict {
                message: f(message),
            },
            EffectError::OutcomeUnknown { observation } => EffectError::OutcomeUnknown {
                observation: f(observation),
            },
        }
    }
}

/// Why a handler produced no output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum HandlerError {
    /// The input cannot be processed; retrying cannot help.
    #[error("invalid input: {message}")]
    InvalidInput { message: String },
    #[error("failed: {message}")]
    Failed { message: String },
}

#[cfg(test)]
mod tests {
    use super::*;

    fn contract(idempotent: bool) -> Contract {
        Contract {
            name: "a".into(),
            version: "1.0.0".into(),
            idempotency: IdempotencyClaim {
                supported: idempotent,
                retention_seconds: 100,
                namespace: "ns".into(),
            },
            query: QueryClaim {
                supported: false,
                visibility_window_ms: 0,
            },
            compensation: CompensationClaim { supported: false },
            capabilities: DeclaredCapabilities::default(),
            observes: false,
            batch: None,
        }
    }

    #[test]
    fn a_key_is_remembered_for_the_retention_after_the_first_request() {
        assert_eq!(contract(true).remembered_until(1_000), Some(101_000));
        assert_eq!(
            contract(true).remembered_until(Millis::MAX),
            Some(Millis::MAX)
        );
        assert_eq!(contract(false).remembered_until(1_000), None);
    }

    #[test]
    fn a_same_key_retry_is_safe_only_before_the_key_is_forgotten() {
        let c = contract(true);
        assert_eq!(
            c.same_key_retry(1_000, 100_999),
            SameKeyRetry::Safe { until: 101_000 }
        );
        assert_eq!(
            c.same_key_retry(1_000, 101_000),
            SameKeyRetry::Forgotten { at: 101_000 }
        );
        assert_eq!(
            contract(false).same_key_retry(1_000, 1_000),
            SameKeyRetry::NotIdempotent
        );
    }
}
