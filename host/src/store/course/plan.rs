//! The course's plans: a cancellation's answer and events, a revision's record, and the
//! rows after a settlement, decided in pure code for both backends.

use crate::course::{CourseStep, Settlement};
use crate::intent::{NewEvent, StepRole, StepState, WorkflowState};
use crate::store::{StoreError, StoreResult};

/// What a new cancellation records, or the refusal to store under its key.
pub(crate) fn cancellation(
    req: &crate::store::CancelRequest,
    state: WorkflowState,
    steps: &[CourseStep],
) -> Result<crate::store::CancellationRecord, crate::store::StoredRefusal> {
    let (outcome, consequences) = crate::course::decide_cancel(state, req.withdraw, steps)
        .map_err(|message| crate::store::StoredRefusal {
            code: "invalid_transition".into(),
            message,
            details: Vec::new(),
        })?;
    let label = |id: &str| {
        req.labels
            .get(id)
            .cloned()
            .unwrap_or_else(|| id.to_string())
    };
    let message = crate::course::cancel_message(outcome, steps, &consequences, &label);
    Ok(crate::store::CancellationRecord {
        cancellation_id: req.cancellation_id.clone(),
        workflow_id: req.scope.workflow_id.clone(),
        requested_by: req.scope.subject.0.clone(),
        requested_at: req.now,
        reason: req.reason.clone(),
        withdraw: req.withdraw,
        outcome,
        message,
        consequences,
    })
}

/// The timeline's record of a cancellation.
pub(crate) fn cancellation_event(c: &crate::store::CancellationRecord) -> NewEvent {
    let what = if c.withdraw {
        "Withdrawal"
    } else {
        "Cancellation"
    };
    NewEvent::workflow(
        crate::intent::EventKind::Action,
        format!(
            "{what} {} requested by {}: {}. {}",
            c.cancellation_id, c.requested_by, c.reason, c.message
        ),
    )
    .with_data(serde_json::json!({
        "cancellation_id": c.cancellation_id,
        "outcome": c.outcome,
        "consequences": c.consequences,
    }))
}

/// The answer stored under a cancel request's key.
pub(crate) fn cancel_answer_text(
    created: bool,
    c: &crate::store::CancellationRecord,
) -> StoreResult<String> {
    serde_json::to_string(&crate::store::StoredCancel {
        created,
        cancellation: c.clone(),
    })
    .map_err(|e| StoreError::Corrupt(format!("cancellation answer: {e}")))
}

/// Whether the workflow is still as a revision's plan saw it.
pub(crate) fn unmoved(
    seen: &crate::store::RevisionSnapshot,
    state: WorkflowState,
    input_revision: u32,
    steps: &[(String, StepState, u32)],
) -> bool {
    let mut now: Vec<&(String, StepState, u32)> = steps.iter().collect();
    let mut then: Vec<&(String, StepState, u32)> = seen.steps.iter().collect();
    now.sort_by(|a, b| a.0.cmp(&b.0));
    then.sort_by(|a, b| a.0.cmp(&b.0));
    seen.state == state && seen.input_revision == input_revision && now == then
}

/// The record of an applied revision.
pub(crate) fn revision_record(
    req: &crate::store::ReviseRequest,
    plan: &crate::course::RevisionPlan,
) -> crate::store::RevisionRecord {
    crate::store::RevisionRecord {
        workflow_id: req.scope.workflow_id.clone(),
        input_revision: req.seen.input_revision + 1,
        prior_digest: Some(req.seen.input_digest.clone()),
        input_digest: req.input.digest.clone(),
        input: Some(req.input.text.clone()),
        author: req.scope.subject.0.clone(),
        reason: req.reason.clone(),
        at: req.now,
        invalidated_steps: plan.invalidated.clone(),
        kept_receipts: plan.kept_receipts.clone(),
    }
}

/// The timeline's record of a revision.
pub(crate) fn revision_event(r: &crate::store::RevisionRecord) -> NewEvent {
    let invalidated = if r.invalidated_steps.is_empty() {
        "no step runs again".to_string()
    } else {
        format!("runs again: {}", r.invalidated_steps.join(", "))
    };
    NewEvent::workflow(
        crate::intent::EventKind::Action,
        format!(
            "Input revision {} by {}: {} ({} → {}); {invalidated}",
            r.input_revision,
            r.author,
            r.reason,
            r.prior_digest.as_deref().unwrap_or("none"),
            r.input_digest
        ),
    )
    .with_data(serde_json::json!({
        "input_revision": r.input_revision,
        "prior_digest": r.prior_digest,
        "input_digest": r.input_digest,
        "invalidated_steps": r.invalidated_steps,
        "kept_receipts": r.kept_receipts,
    }))
}

/// The rows after a settlement (id, role, state), as the workflow's state is derived
/// from them.
pub(crate) fn settled(
    steps: &[CourseStep],
    s: &Settlement,
) -> Vec<(String, Option<StepRole>, StepState)> {
    let mut out: Vec<(String, Option<StepRole>, StepState)> = steps
        .iter()
        .map(|step| {
            let state = if s.cancel.contains(&step.id) {
                StepState::Cancelled
            } else if s.compensated.contains(&step.id) {
                StepState::Compensated
            } else if s.start.iter().any(|c| c.of == step.id) {
                StepState::Compensating
            } else {
                step.state
            };
            (step.id.clone(), step.role, state)
        })
        .collect();
    out.extend(s.start.iter().map(|c| {
        let state = if c.after.is_empty() {
            StepState::Ready
        } else {
            StepState::Pending
        };
        (c.id.clone(), Some(StepRole::Compensation), state)
    }));
    out
}
