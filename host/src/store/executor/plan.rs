//! What an attempt's end writes: the step's columns, the workflow's change of state, the
//! attempt's facts and the receipt's values, decided in pure code for both backends. The
//! timeline's wording is the domain's ([`NewEvent`]'s constructors), never the store's: two
//! backends that each decided for themselves would drift apart (they did: a revived
//! workflow kept its end on one and not the other).

use crate::intent::{
    AttemptId, AttemptOutcome, Millis, NewEvent, StepRole, StepState, WorkflowId, WorkflowState,
};
use crate::store::plan::Param;
use crate::store::{AttemptFacts, NewReceipt, StepTransition, StoreError, StoreResult};

/// The step columns an attempt's end writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TransitionColumns<'a> {
    pub state: StepState,
    pub ready_at: Option<i64>,
    pub next_trigger: Option<&'a str>,
    /// Set once, when the effect first became uncertain; cleared by a receipt.
    pub uncertain_since: Option<i64>,
    pub receipt_id: Option<&'a str>,
}

impl StepTransition {
    pub(crate) fn columns(&self) -> TransitionColumns<'_> {
        match self {
            StepTransition::Succeeded(r) => TransitionColumns {
                state: StepState::Succeeded,
                ready_at: None,
                next_trigger: None,
                uncertain_since: None,
                receipt_id: Some(r.receipt_id.as_str()),
            },
            StepTransition::Retry {
                ready_at,
                next_trigger,
                uncertain_since,
            } => TransitionColumns {
                state: StepState::FailedRetryable,
                ready_at: Some(*ready_at as i64),
                next_trigger: Some(next_trigger.as_str()),
                uncertain_since: uncertain_since.map(|v| v as i64),
                receipt_id: None,
            },
            StepTransition::Terminal(state) => TransitionColumns {
                state: *state,
                ready_at: None,
                next_trigger: None,
                uncertain_since: None,
                receipt_id: None,
            },
        }
    }
}

/// The workflow's move to another state, and everything that goes with it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct StateChange {
    pub next: WorkflowState,
    /// `ended_at`: set when the workflow ends, cleared when an operator revives it.
    pub ended_at: Option<i64>,
    /// Whether the key's retention changes: it starts counting at the end and stops when
    /// the workflow is revived (its key is reserved again while it runs).
    pub restart_key_retention: bool,
    /// The timeline's conclusion.
    pub event: NewEvent,
    /// The notification to queue, if the new state is one people are told about.
    pub notify: Option<crate::notify::EventType>,
}

/// Plans the workflow's state from its rows (with their roles; a row stored without one
/// reads as an adapter): `None` when it stays as it is.
pub(crate) fn state_change(
    current: WorkflowState,
    cancelled: bool,
    steps: impl IntoIterator<Item = (Option<StepRole>, StepState)>,
    now: Millis,
) -> Option<StateChange> {
    let steps = steps
        .into_iter()
        .map(|(role, state)| (role.unwrap_or(StepRole::Adapter), state));
    let next = WorkflowState::derive(cancelled, steps);
    if next == current {
        return None;
    }
    Some(StateChange {
        next,
        ended_at: next.is_ended().then_some(now as i64),
        restart_key_retention: next.is_ended() || current.is_ended(),
        event: NewEvent::workflow_state_changed(current, next),
        notify: crate::notify::EventType::of_state(next),
    })
}

/// An attempt's stored result as JSON text.
pub(crate) fn result_text(facts: &AttemptFacts) -> StoreResult<Option<String>> {
    facts
        .result
        .as_ref()
        .map(serde_json::to_string)
        .transpose()
        .map_err(|e| StoreError::Corrupt(format!("attempt result: {e}")))
}

/// The values that record an attempt's facts, in the order both backends' statements take
/// them: checkpoint, component, component version, component digest, input digest, request
/// identity, observation, outcome, finished at, log, result (JSON text), policy (JSON text),
/// attempt id. A value that is `None` leaves what was recorded.
pub(crate) fn facts_params<'a>(
    attempt: &'a AttemptId,
    checkpoint: u8,
    facts: &'a AttemptFacts,
    finished_at: Option<Millis>,
    log: Option<&'a str>,
    result: Option<&'a str>,
    policy: Option<&'a str>,
) -> [Param<'a>; 13] {
    use Param::{Int, Text};
    let p = facts.provenance.as_ref();
    [
        Int(Some(i64::from(checkpoint))),
        Text(p.map(|p| p.component.as_str())),
        Text(p.map(|p| p.component_version.as_str())),
        Text(p.map(|p| p.component_digest.as_str())),
        Text(p.map(|p| p.input_digest.as_str())),
        Text(facts.request_identity.as_deref()),
        Text(facts.observation.as_deref()),
        Text(facts.outcome.map(AttemptOutcome::as_str)),
        Int(finished_at.map(|v| v as i64)),
        Text(log),
        Text(result),
        Text(policy),
        Text(Some(attempt.as_str())),
    ]
}

/// Why a step is blocked, as JSON text (`None` clears it).
pub(crate) fn blocked_text(blocked: Option<&crate::store::Blocked>) -> StoreResult<Option<String>> {
    blocked
        .map(serde_json::to_string)
        .transpose()
        .map_err(|e| StoreError::Corrupt(format!("step blocked: {e}")))
}

/// An attempt's policy decision as JSON text.
pub(crate) fn policy_text(facts: &AttemptFacts) -> StoreResult<Option<String>> {
    facts
        .policy
        .as_ref()
        .map(serde_json::to_string)
        .transpose()
        .map_err(|e| StoreError::Corrupt(format!("attempt policy: {e}")))
}

/// The columns of a receipt row, in the order of [`receipt_params`].
pub(crate) const RECEIPT_INSERT_COLUMNS: &str = "receipt_id, workflow_id, step, attempt_id, \
     evidence_kind, component, component_version, component_digest, input_digest, \
     external_reference, output, recorded_at, author, reason, evidence";

/// The values of a receipt row; `output` is the receipt's output as JSON text.
pub(crate) fn receipt_params<'a>(
    r: &'a NewReceipt,
    workflow_id: &'a WorkflowId,
    step: &'a str,
    attempt_id: Option<&'a AttemptId>,
    output: &'a str,
    now: Millis,
) -> [Param<'a>; 15] {
    use Param::{Int, Text};
    [
        Text(Some(r.receipt_id.as_str())),
        Text(Some(workflow_id.as_str())),
        Text(Some(step)),
        Text(attempt_id.map(AttemptId::as_str)),
        Text(Some(r.evidence_kind.as_str())),
        Text(Some(&r.provenance.component)),
        Text(Some(&r.provenance.component_version)),
        Text(Some(&r.provenance.component_digest)),
        Text(Some(&r.provenance.input_digest)),
        Text(r.external_reference.as_deref()),
        Text(Some(output)),
        Int(Some(now as i64)),
        Text(r.author.as_deref()),
        Text(r.reason.as_deref()),
        Text(r.evidence.as_deref()),
    ]
}

/// Attempts a finish gives back: the claim counted one that drew on the reserve or was
/// refused before it started.
pub(crate) fn uncharged(charge: crate::budget::Charge) -> i64 {
    i64::from(charge != crate::budget::Charge::Attempt)
}

/// Recovery queries a finish draws from the reserve.
pub(crate) fn from_reserve(charge: crate::budget::Charge) -> i64 {
    i64::from(charge == crate::budget::Charge::Reserve)
}

/// Whether an attempt's end reverses an effect: a compensation's receipt.
pub(crate) fn compensated_now(transition: &StepTransition, step: &str) -> bool {
    matches!(transition, StepTransition::Succeeded(_))
        && crate::course::compensated_step(step).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;
    use StepState::*;

    fn rows(states: &[StepState]) -> Vec<(Option<StepRole>, StepState)> {
        states
            .iter()
            .map(|s| (Some(StepRole::Handler), *s))
            .collect()
    }

    #[test]
    fn a_revived_workflow_is_no_longer_ended_and_its_key_is_reserved_again() {
        let change = state_change(
            WorkflowState::Failed,
            false,
            rows(&[Ready, Succeeded]),
            1_000,
        )
        .unwrap();
        assert_eq!(change.next, WorkflowState::Running);
        assert_eq!(change.ended_at, None);
        assert!(change.restart_key_retention);
        assert_eq!(change.notify, None);
        assert_eq!(change.event.text, "Workflow running again");
    }

    #[test]
    fn an_end_is_stamped_notified_and_starts_the_keys_retention() {
        let change = state_change(
            WorkflowState::Running,
            false,
            rows(&[Succeeded, Succeeded]),
            1_000,
        )
        .unwrap();
        assert_eq!(change.next, WorkflowState::Completed);
        assert_eq!(change.ended_at, Some(1_000));
        assert!(change.restart_key_retention);
        assert_eq!(change.notify, Some(crate::notify::EventType::Completed));
        let review =
            state_change(WorkflowState::Running, false, rows(&[OutcomeUnknown]), 5).unwrap();
        assert_eq!(review.ended_at, None);
        assert!(!review.restart_key_retention);
        assert_eq!(review.notify, Some(crate::notify::EventType::NeedsReview));
        assert!(
            state_change(WorkflowState::Running, false, rows(&[Running, Pending]), 5).is_none()
        );
    }

    #[test]
    fn released_dependents_are_named_once_and_none_is_silent() {
        assert!(NewEvent::released(&[]).is_none());
        let e = NewEvent::released(&["b".into(), "c".into()]).unwrap();
        assert_eq!(e.text, "Released b, c after its dependencies succeeded");
    }
}
