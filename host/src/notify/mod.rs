//! Notifications of a workflow's meaningful transitions: which transitions are told (never
//! one per attempt or retry), the endpoints that subscribe to them, the Standard Webhooks
//! signature, the retry schedule, and whether a transition still holds when its turn to be
//! sent comes. Delivery itself — claiming outbox rows, sending, recording — is the
//! scheduler's notifier ([`crate::scheduler::notifier`]), a supervised task of the host.
//!
//! The outbox row and its body are written by the store in the transaction that makes the
//! transition, so a notification exists exactly when its transition committed.

use crate::intent::WorkflowState;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use std::collections::BTreeSet;
use std::time::Duration;

/// How long a notification is retried before it is recorded `failed`.
pub const RETRY_WINDOW: Duration = Duration::from_secs(24 * 3600);

/// A transition people are told about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EventType {
    Recorded,
    NeedsReview,
    DeadlineApproaching,
    /// A step waits for a person while its provider's memory of the key runs out.
    RetentionDeadlineApproaching,
    Completed,
    /// Failed or cancelled (a withdrawal of a completed workflow included).
    Ended,
    EffectCompensated,
    /// An approval step asks a person to approve a consequence (with its digest and
    /// until when it waits).
    ApprovalRequired,
    /// A person approved or rejected it, or it expired.
    ApprovalDecided,
    /// A fifth of the time an approval may wait is left.
    ApprovalExpiring,
}

impl EventType {
    pub const ALL: [EventType; 10] = [
        EventType::Recorded,
        EventType::NeedsReview,
        EventType::DeadlineApproaching,
        EventType::RetentionDeadlineApproaching,
        EventType::Completed,
        EventType::Ended,
        EventType::EffectCompensated,
        EventType::ApprovalRequired,
        EventType::ApprovalDecided,
        EventType::ApprovalExpiring,
    ];

    /// The `type` of the body, e.g. `workflow.completed`.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Recorded => "workflow.recorded",
            EventType::NeedsReview => "workflow.needs_review",
            EventType::DeadlineApproaching => "workflow.deadline_approaching",
            EventType::RetentionDeadlineApproaching => "workflow.retention_deadline_approaching",
            EventType::Completed => "workflow.completed",
            EventType::Ended => "workflow.ended",
            EventType::EffectCompensated => "workflow.effect_compensated",
            EventType::ApprovalRequired => "workflow.approval_required",
            EventType::ApprovalDecided => "workflow.approval_decided",
            EventType::ApprovalExpiring => "workflow.approval_expiring",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.as_str() == text)
    }

    /// The notification of a workflow's change to `state`, if that change is told.
    pub fn of_state(state: WorkflowState) -> Option<Self> {
        match state {
            WorkflowState::Running => None,
            WorkflowState::NeedsReview => Some(EventType::NeedsReview),
            WorkflowState::Completed => Some(EventType::Completed),
            WorkflowState::Failed | WorkflowState::Cancelled => Some(EventType::Ended),
        }
    }

    /// Whether the transition still holds for a workflow now in `state`: a review that was
    /// settled (or a deadline warning for one) is no news any more. Every other transition
    /// is a fact once it happened.
    pub fn holds(self, state: WorkflowState) -> bool {
        match self {
            EventType::NeedsReview
            | EventType::DeadlineApproaching
            | EventType::RetentionDeadlineApproaching => state == WorkflowState::NeedsReview,
            // An approval asked of a workflow that ended is no longer wanted.
            EventType::ApprovalRequired | EventType::ApprovalExpiring => {
                state == WorkflowState::Running
            }
            _ => true,
        }
    }

    /// Whether a person would be alerted by it, so an endpoint's `review_hold` applies.
    pub fn is_alarm(self) -> bool {
        matches!(
            self,
            EventType::NeedsReview
                | EventType::DeadlineApproaching
                | EventType::RetentionDeadlineApproaching
        )
    }
}

/// One `[[notifications]]` endpoint of the host's configuration.
#[derive(Clone)]
pub struct Endpoint {
    pub url: String,
    pub events: BTreeSet<EventType>,
    /// The secret's name, for messages.
    pub secret_name: String,
    /// The signing key: the bytes of the `whsec_…` secret.
    pub key: Vec<u8>,
    /// How long a review waits before it is told, so one settled at once never alarms.
    pub review_hold: Duration,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("url", &self.url)
            .field("events", &self.events)
            .field("secret_name", &self.secret_name)
            .field("review_hold", &self.review_hold)
            .finish_non_exhaustive()
    }
}

impl Endpoint {
    pub fn wants(&self, event: EventType) -> bool {
        self.events.contains(&event)
    }
}

/// The key bytes of a secret written as Standard Webhooks do: `whsec_<base64>`.
pub fn signing_key(secret: &str) -> Result<Vec<u8>, String> {
    let encoded = secret.strip_prefix("whsec_").ok_or_else(|| {
        "it must be written `whsec_<base64 of the key bytes>`, as Standard Webhooks secrets are"
            .to_string()
    })?;
    let key = STANDARD
        .decode(encoded)
        .map_err(|e| format!("the part after `whsec_` is not base64 ({e})"))?;
    if key.len() < 16 {
        return Err(format!(
            "the key has {} bytes; use at least 16 (24 to 64 are usual)",
            key.len()
        ));
    }
    Ok(key)
}

/// `webhook-signature`: `v1,<base64 HMAC-SHA256 of "id.timestamp.body">`.
pub fn signature(key: &[u8], id: &str, timestamp: u64, body: &str) -> String {
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(key).expect("HMAC takes any key length");
    mac.update(format!("{id}.{timestamp}.").as_bytes());
    mac.update(body.as_bytes());
    format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
}

/// How far a signed delivery's timestamp may be from the receiver's clock (Standard
/// Webhooks' tolerance): an older one is a replay, a later one forged or skewed.
pub const SIGNATURE_TOLERANCE_S: u64 = 5 * 60;

/// Why a signed delivery is not trusted; the message says which header or check failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("the delivery has no `{0}` header")]
    Missing(&'static str),
    #[error("`webhook-timestamp` is not a number of seconds")]
    BadTimestamp,
    #[error(
        "`webhook-timestamp` is {0} s away from this host's clock, more than the {SIGNATURE_TOLERANCE_S} s allowed"
    )]
    Stale(u64),
    #[error("no `v1` signature of the delivery matches the configured secret")]
    Mismatch,
}

/// Verifies a delivery signed per Standard Webhooks with `key`: `webhook-id`,
/// `webhook-timestamp` (within [`SIGNATURE_TOLERANCE_S`] of `now_s`) and one of the
/// space-separated `v1,<base64>` signatures in `webhook-signature` over
/// `"{id}.{timestamp}.{body}"`, compared in constant time.
pub fn verify(
    key: &[u8],
    header: impl Fn(&str) -> Option<String>,
    body: &[u8],
    now_s: u64,
) -> Result<String, SignatureError> {
    let id = header("webhook-id").ok_or(SignatureError::Missing("webhook-id"))?;
    let timestamp =
        header("webhook-timestamp").ok_or(SignatureError::Missing("webhook-timestamp"))?;
    let seconds: u64 = timestamp
        .trim()
        .parse()
        .map_err(|_| SignatureError::BadTimestamp)?;
    let skew = seconds.abs_diff(now_s);
    if skew > SIGNATURE_TOLERANCE_S {
        return Err(SignatureError::Stale(skew));
    }
    let given = header("webhook-signature").ok_or(SignatureError::Missing("webhook-signature"))?;
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(key).expect("HMAC takes any key length");
    mac.update(format!("{id}.{}.", timestamp.trim()).as_bytes());
    mac.update(body);
    let expected = mac.finalize().into_bytes();
    let matches = given.split_whitespace().any(|entry| {
        entry
            .strip_prefix("v1,")
            .and_then(|b64| STANDARD.decode(b64).ok())
            .is_some_and(|sig| {
                sig.len() == expected.len()
                    && sig
                        .iter()
                        .zip(expected.iter())
                        .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                        == 0
            })
    });
    if matches {
        Ok(id)
    } else {
        Err(SignatureError::Mismatch)
    }
}

/// How long after its `attempts`-th failed delivery a notification is tried again: 1 s,
/// doubling, at most 10 minutes.
pub fn backoff(attempts: u32) -> Duration {
    let secs = 1u64 << attempts.saturating_sub(1).min(10);
    Duration::from_secs(secs.min(600))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transitions_map_to_the_events_api_md_names() {
        assert_eq!(EventType::of_state(WorkflowState::Running), None);
        assert_eq!(
            EventType::of_state(WorkflowState::Cancelled),
            Some(EventType::Ended)
        );
        for t in EventType::ALL {
            assert_eq!(EventType::parse(t.as_str()), Some(t));
        }
        assert!(!EventType::NeedsReview.holds(WorkflowState::Running));
        assert!(EventType::Completed.holds(WorkflowState::Cancelled));
    }

    #[test]
    fn the_signature_is_the_standard_webhooks_one() {
        // The example of the Standard Webhooks specification.
        let key = signing_key("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let body = r#"{"test": 2432232314}"#;
        assert_eq!(
            signature(&key, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
        assert!(signing_key("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").is_err());
        assert!(signing_key("whsec_!!").is_err());
    }

    /// What the independent implementation signs verifies; anything else does not, and
    /// says why.
    #[test]
    fn a_delivery_signed_per_standard_webhooks_verifies_and_nothing_else_does() {
        const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let key = signing_key(SECRET).unwrap();
        let body = br#"{"type": "delivery.accepted"}"#;
        let now = 1_700_000_000u64;
        let signed = standardwebhooks::Webhook::new(SECRET)
            .unwrap()
            .sign("evt_1", now as i64, body)
            .unwrap();
        let headers = |id: &str, ts: u64, sig: &str| {
            let map = [
                ("webhook-id", id.to_string()),
                ("webhook-timestamp", ts.to_string()),
                ("webhook-signature", sig.to_string()),
            ];
            move |name: &str| map.iter().find(|(n, _)| *n == name).map(|(_, v)| v.clone())
        };
        assert_eq!(
            verify(&key, headers("evt_1", now, &signed), body, now + 60),
            Ok("evt_1".into())
        );
        // Several signatures (a rotated secret): one match is enough.
        let rotated = format!("v1,AAAA {signed}");
        assert!(verify(&key, headers("evt_1", now, &rotated), body, now).is_ok());
        // Our own signer agrees with theirs.
        let ours = signature(&key, "evt_1", now, std::str::from_utf8(body).unwrap());
        assert_eq!(ours, signed);
        // Forged: another body, another id, another secret.
        assert_eq!(
            verify(&key, headers("evt_1", now, &signed), b"{}", now),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            verify(&key, headers("evt_2", now, &signed), body, now),
            Err(SignatureError::Mismatch)
        );
        let other = signing_key("whsec_dGhpcyBpcyBhbm90aGVyIGtleSBvZiAzMiBieXRlcw==").unwrap();
        assert_eq!(
            verify(&other, headers("evt_1", now, &signed), body, now),
            Err(SignatureError::Mismatch)
        );
        // A replay from long ago, a missing header, a timestamp that is no number.
        assert_eq!(
            verify(&key, headers("evt_1", now, &signed), body, now + 3_600),
            Err(SignatureError::Stale(3_600))
        );
        assert_eq!(
            verify(&key, |_: &str| None, body, now),
            Err(SignatureError::Missing("webhook-id"))
        );
        let bad = |name: &str| match name {
            "webhook-timestamp" => Some("soon".to_string()),
            other => headers("evt_1", now, &signed)(other),
        };
        assert_eq!(
            verify(&key, bad, body, now),
            Err(SignatureError::BadTimestamp)
        );
    }

    #[test]
    fn retries_back_off_to_ten_minutes() {
        assert_eq!(backoff(1), Duration::from_secs(1));
        assert_eq!(backoff(2), Duration::from_secs(2));
        assert_eq!(backoff(30), Duration::from_secs(600));
    }
}
