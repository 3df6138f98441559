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

    #[test]
    fn retries_back_off_to_ten_minutes() {
        assert_eq!(backoff(1), Duration::from_secs(1));
        assert_eq!(backoff(2), Duration::from_secs(2));
        assert_eq!(backoff(30), Duration::from_secs(600));
    }
}
