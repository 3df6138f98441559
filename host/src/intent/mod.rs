//! The durable-intent domain: identities, states and records, with no I/O.
//!
//! One client action with an idempotency key is one **workflow** (the intent); each node of
//! its definition is a **step** with one identity across all its **attempts**; a
//! **receipt** is the evidence that closed a step. The store persists these types; the
//! scheduler moves them between states; the API projects them. Every enumeration is written
//! `snake_case` on the wire and in the database.

mod ids;
mod json;
mod states;

pub use ids::{
    AttemptId, CancellationId, NotificationId, ObservationId, ReceiptId, WorkflowId,
    external_idempotency_key,
};
/// JSON text parsed as I-JSON (each object names a member once).
pub use json::parse as parse_json;
pub use json::{CanonicalInput, InputError, canonicalize, sha256_digest};
pub use states::{
    ApprovalOutcome, AttemptOutcome, CompensationTrigger, EventKind, EvidenceKind,
    ObservationVerdict, StepRole, StepState, Trigger, WorkflowState,
};

use serde::{Deserialize, Serialize};

/// Milliseconds since the Unix epoch, UTC: the unit of every stored time.
pub type Millis = u64;

/// Key prefixes the host derives keys of its own under (a replacement's admission and
/// the cancellation of its original): a client's key may not start with one, so no caller
/// can claim the key of an operator's action before the operator does.
pub const RESERVED_KEY_PREFIXES: &[&str] = &["replacement:", "docket:"];

/// The reserved prefix `key` starts with, if any (case-insensitively).
pub fn reserved_key_prefix(key: &str) -> Option<&'static str> {
    RESERVED_KEY_PREFIXES.iter().copied().find(|p| {
        key.len() >= p.len() && key.as_bytes()[..p.len()].eq_ignore_ascii_case(p.as_bytes())
    })
}

/// Who made a request, from the token that authenticated it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Subject(pub String);

/// One entry of a workflow's timeline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TimelineEvent {
    pub seq: u64,
    pub at: Millis,
    pub kind: EventKind,
    pub step: Option<String>,
    pub attempt_id: Option<String>,
    pub text: String,
    pub data: serde_json::Value,
}

/// A timeline entry to append (the store assigns `seq`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewEvent {
    pub kind: EventKind,
    pub step: Option<String>,
    pub attempt_id: Option<String>,
    pub text: String,
    pub data: serde_json::Value,
}

impl NewEvent {
    /// A workflow-level event.
    pub fn workflow(kind: EventKind, text: impl Into<String>) -> Self {
        Self {
            kind,
            step: None,
            attempt_id: None,
            text: text.into(),
            data: serde_json::Value::Null,
        }
    }

    /// The conclusion told when a workflow moves from `from` to `to`.
    pub fn workflow_state_changed(from: WorkflowState, to: WorkflowState) -> Self {
        let text = match to {
            WorkflowState::Completed => "Workflow completed: every step has a receipt",
            WorkflowState::Failed => "Workflow ended without completion: a step failed permanently",
            WorkflowState::NeedsReview => {
                "Workflow needs review: a person must decide how to continue"
            }
            WorkflowState::Running => "Workflow running again",
            WorkflowState::Cancelled => "Workflow cancelled",
        };
        Self::workflow(EventKind::Conclusion, text)
            .with_data(serde_json::json!({"from": from, "to": to}))
    }

    /// The action told when a receipt released dependent steps; `None` when it released none.
    pub fn released(steps: &[String]) -> Option<Self> {
        (!steps.is_empty()).then(|| {
            Self::workflow(
                EventKind::Action,
                format!(
                    "Released {} after its dependencies succeeded",
                    steps.join(", ")
                ),
            )
        })
    }

    /// The conclusion told when the consistency check's repair (by `by`) rebuilt a state
    /// its steps contradicted.
    pub fn repaired(stored: WorkflowState, by: &str) -> Self {
        Self::workflow(
            EventKind::Conclusion,
            format!(
                "Repaired by {by}: the workflow was stored as {}; its state is rebuilt from its steps",
                stored.as_str()
            ),
        )
    }

    /// The conclusion told when a late response settles a step whose outcome was unknown.
    pub fn settled_late(step: &str, attempt: &AttemptId, reference: &str) -> Self {
        Self::step(
            EventKind::Conclusion,
            step,
            Some(attempt),
            format!(
                "Settled by the provider's late answer: it accepted the request as {reference}; the receipt records that evidence"
            ),
        )
    }

    /// The conclusion told when a late result names another external reference than the
    /// one the step stands on.
    pub fn contradicted(step: &str, attempt: &AttemptId, standing: &str, late: &str) -> Self {
        Self::step(
            EventKind::Conclusion,
            step,
            Some(attempt),
            format!(
                "Contradicted: the step stands on {standing}, but a late result names {late}; two external references for one effect — a person decides which stands"
            ),
        )
        .with_data(serde_json::json!({"references": [standing, late]}))
    }

    /// A step-level event, optionally tied to an attempt.
    pub fn step(
        kind: EventKind,
        step: &str,
        attempt: Option<&AttemptId>,
        text: impl Into<String>,
    ) -> Self {
        Self {
            kind,
            step: Some(step.to_string()),
            attempt_id: attempt.map(|a| a.0.clone()),
            text: text.into(),
            data: serde_json::Value::Null,
        }
    }

    /// Attaches structured data.
    pub fn with_data(mut self, data: serde_json::Value) -> Self {
        self.data = data;
        self
    }
}

/// Which code ran, on which input: what an attempt records at checkpoint 2 and a receipt
/// carries, so a result can always be traced to the component version and the mapped
/// input that produced it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Provenance {
    pub component: String,
    pub component_version: String,
    /// The digest of the component's bytes (`sha256:…`).
    pub component_digest: String,
    /// The digest of the step's mapped input in canonical form.
    pub input_digest: String,
}

/// Evidence that a step completed, as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Receipt {
    pub receipt_id: ReceiptId,
    pub workflow_id: WorkflowId,
    pub step: String,
    pub attempt_id: Option<AttemptId>,
    pub evidence_kind: EvidenceKind,
    #[serde(flatten)]
    pub provenance: Provenance,
    pub external_reference: Option<String>,
    pub output: serde_json::Value,
    pub recorded_at: Millis,
    /// Manual receipts only: who resolved, on what evidence, why.
    pub author: Option<String>,
    pub reason: Option<String>,
    pub evidence: Option<String>,
    /// The input revision that invalidated the step this receipt closed; the receipt
    /// stays, but no longer stands.
    pub superseded_by: Option<u32>,
}

/// `ms` since the Unix epoch as RFC 3339 UTC with milliseconds, as times are shown.
pub fn rfc3339(ms: Millis) -> String {
    humantime::format_rfc3339_millis(std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms))
        .to_string()
}
