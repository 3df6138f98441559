//! What is shown of a provider's observation: where it came from, what it said, the step
//! it was matched to and what it did there — for `GET /v1/evidence` and the console's
//! inbox.

use super::projection::shorten_identity;
use super::time::{rfc3339, rfc3339_opt};
use crate::intent::ObservationVerdict;
use crate::store::ObservationRecord;
use serde::Serialize;

/// One kept observation.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct ObservationView {
    pub observation_id: String,
    pub adapter: String,
    /// The delivery's `webhook-id`.
    pub webhook_id: String,
    /// The provider's id of the event.
    pub event_id: Option<String>,
    pub external_reference: Option<String>,
    /// The request identity the provider named, shortened (the full key is never shown).
    pub request_identity: Option<String>,
    /// `in_effect`, `reversed` or `refused`; `null` for an unreadable delivery.
    pub effect_status: Option<String>,
    /// The provider's own word.
    pub provider_status: String,
    pub observed_at: Option<String>,
    pub recorded_at: String,
    /// Whether it was matched to a step (unmatched and unreadable ones are the inbox).
    pub matched: bool,
    pub workflow_id: Option<String>,
    pub step: Option<String>,
    /// `settled`, `contradicted`, `reversed`, `review`, `kept`, `held`, `unmatched` or
    /// `unreadable`.
    pub verdict: String,
    /// The receipt it made, when it settled a step.
    pub receipt_id: Option<String>,
    /// What it did, in words; an unreadable delivery's reason.
    pub note: Option<String>,
}

impl From<ObservationRecord> for ObservationView {
    fn from(o: ObservationRecord) -> Self {
        Self {
            matched: !matches!(
                o.verdict,
                ObservationVerdict::Unmatched | ObservationVerdict::Unreadable
            ),
            observation_id: o.observation_id.0,
            adapter: o.adapter,
            webhook_id: o.webhook_id,
            event_id: o.event_id,
            external_reference: o.external_reference,
            request_identity: o.idempotency_key.as_deref().map(shorten_identity),
            effect_status: o.effect_status.map(|s| s.as_str().to_string()),
            provider_status: o.provider_status,
            observed_at: rfc3339_opt(o.observed_at),
            recorded_at: rfc3339(o.recorded_at),
            workflow_id: o.workflow_id.map(|w| w.0),
            step: o.step,
            verdict: o.verdict.as_str().to_string(),
            receipt_id: o.receipt_id.map(|r| r.0),
            note: o.note,
        }
    }
}
