//! A correction of a workflow's input, asked by its owner or an operator: a new input
//! revision while nothing consequential was sent, else a refusal that points to a
//! replacement (a correction after a consequential effect is a new request). Which steps it
//! invalidates is the course's ([`crate::course::plan_revision`]); the store applies the
//! plan only if the workflow is still as the plan saw it, and the desk plans again if not.

use super::{DeskError, InvalidOrder, required};
use crate::access::Principal;
use crate::context::Context;
use crate::course::{RevisionStep, plan_revision};
use crate::intent::{WorkflowState, canonicalize};
use crate::store::{
    ActionAnswer, ActionScope, ReviseAnswer, ReviseRequest, RevisionRecord, RevisionSnapshot,
    StoreError, StoredRefusal,
};
use serde_json::{Value, json};
use std::sync::Arc;

/// The action name a revision's key is scoped by.
pub const REVISE: &str = "revise";

/// How often a revision is planned again when the workflow moved under it.
const ATTEMPTS: usize = 5;

/// A revision request's body.
#[derive(Debug, Clone, PartialEq)]
pub struct ReviseOrder {
    pub input: Value,
    pub reason: String,
}

impl ReviseOrder {
    /// The input must be a JSON object; the reason is required.
    pub fn new(input: Option<Value>, reason: Option<&str>) -> Result<Self, InvalidOrder> {
        let input = super::input_object(input)?;
        Ok(Self {
            input,
            reason: required("reason", reason, "say why the input is corrected")?,
        })
    }
}

/// What a revision request came to.
#[derive(Debug, Clone, PartialEq)]
pub enum ReviseResult {
    Applied(RevisionRecord),
    /// Refused, nothing changed: `invalid_transition` (the workflow ended, has a
    /// cancellation or a replacement) or `revision_refused` (details name the steps).
    Refused(StoredRefusal),
}

fn refused(code: &str, message: String, details: Vec<Value>) -> StoredRefusal {
    StoredRefusal {
        code: code.into(),
        message,
        details,
    }
}

/// Corrects the input of workflow `workflow_id` for `caller` under `key`.
pub async fn revise<
    S: crate::store::DefinitionStore
        + crate::store::ReadStore
        + crate::store::OperatorStore
        + crate::store::CourseStore,
>(
    ctx: &Arc<Context<S>>,
    caller: &Principal,
    workflow_id: &str,
    order: ReviseOrder,
    key: String,
) -> Result<ReviseResult, DeskError> {
    let first = super::desk::visible(ctx, caller, workflow_id).await?;
    let id = first.workflow_id.clone();
    let deployed = super::desk::required_definition(ctx, &first).await?;
    let scope = ActionScope {
        subject: caller.subject.clone(),
        workflow_id: id.clone(),
        step: String::new(),
        action: REVISE.into(),
        key,
    };
    let digest = canonicalize(&json!({"input": order.input, "reason": order.reason}))
        .map_err(|e| DeskError::Internal(e.to_string()))?
        .digest;
    // A known key answers before the input is judged again.
    if let Some(existing) = ctx.store.action(&scope).await? {
        if existing.request_digest != digest {
            return Err(DeskError::KeyConflict(Box::new(scope)));
        }
        return replay(existing.answer);
    }
    if let Err(errors) = deployed.validator.validate(&order.input) {
        return Err(DeskError::InvalidInput {
            message: format!(
                "the corrected input does not satisfy the input schema of `{}` v{}: {}; fix the fields listed in `details`",
                deployed.def.name,
                deployed.def.version,
                errors
                    .iter()
                    .map(|e| format!("`{}`: {}", e.pointer, e.message))
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
            details: errors
                .iter()
                .map(|e| json!({"pointer": e.pointer, "message": e.message}))
                .collect(),
        });
    }
    let input = canonicalize(&order.input).map_err(|e| DeskError::Internal(e.to_string()))?;
    for _ in 0..ATTEMPTS {
        let record = ctx
            .store
            .workflow(&id)
            .await?
            .ok_or_else(|| DeskError::Internal(format!("workflow {id} vanished")))?;
        let steps = ctx.store.steps(&id).await?;
        let receipts = ctx.store.receipts(&id).await?;
        let mut attempts = Vec::with_capacity(steps.len());
        for s in &steps {
            attempts.push(ctx.store.attempts(&id, &s.step, 0, 10_000).await?);
        }
        let change = if record.state.is_ended() || record.cancelled || record.replaced_by.is_some()
        {
            let why = if let Some(r) = &record.replaced_by {
                format!("it was replaced by {r}")
            } else if record.cancelled && !record.state.is_ended() {
                "it has a cancellation".to_string()
            } else {
                format!("it is {}", record.state)
            };
            Err(refused(
                "invalid_transition",
                format!(
                    "the input of workflow {id} cannot be corrected: {why}; a correction now is a new request (POST /v1/workflows/{id}/replacement)"
                ),
                Vec::new(),
            ))
        } else {
            let old: Value = serde_json::from_str(&record.input)
                .map_err(|e| DeskError::Store(StoreError::Corrupt(format!("stored input: {e}"))))?;
            let rows: Vec<RevisionStep<'_>> = steps
                .iter()
                .zip(&attempts)
                .map(|(s, tried)| {
                    let history = super::StepHistory::of(s, tried, &receipts);
                    RevisionStep {
                        id: s.step.as_str(),
                        state: s.state,
                        attempts: s.attempts,
                        sent: history.sent,
                        receipt: history.receipt,
                        ran_with: history.ran.map(|p| p.input_digest.as_str()),
                    }
                })
                .collect();
            plan_revision(&deployed.def, &old, &order.input, &rows).map_err(|blockers| {
                let named: Vec<String> = blockers
                    .iter()
                    .map(|b| match &b.external_reference {
                        Some(r) => format!("{} ({r})", b.step),
                        None => b.step.clone(),
                    })
                    .collect();
                refused(
                    "revision_refused",
                    format!(
                        "the correction would change what {} already sent or is running; a correction after a consequential effect is a new request: POST /v1/workflows/{id}/replacement",
                        named.join(", ")
                    ),
                    blockers
                        .iter()
                        .map(|b| serde_json::to_value(b).unwrap_or(Value::Null))
                        .collect(),
                )
            })
        };
        let seen = RevisionSnapshot {
            state: record.state,
            input_revision: record.input_revision,
            input_digest: record.input_digest.clone(),
            steps: steps
                .iter()
                .map(|s| (s.step.clone(), s.state, s.attempts))
                .collect(),
        };
        let request = ReviseRequest {
            scope: scope.clone(),
            request_digest: digest.clone(),
            input: input.clone(),
            reason: order.reason.clone(),
            seen,
            change,
            now: ctx.clock.now_ms(),
        };
        match ctx.store.revise(request).await? {
            ReviseAnswer::Applied(r) => {
                ctx.wake.notify_one();
                ctx.progress.advance_workflow(workflow_id);
                return Ok(ReviseResult::Applied(r));
            }
            ReviseAnswer::Refused(r) => return Ok(ReviseResult::Refused(r)),
            ReviseAnswer::KeyConflict => return Err(DeskError::KeyConflict(Box::new(scope))),
            ReviseAnswer::Replayed(stored) => return replay(stored.answer),
            ReviseAnswer::Moved => continue,
        }
    }
    Err(DeskError::Store(StoreError::safe(format!(
        "workflow {id} kept moving while the correction was planned ({ATTEMPTS} tries); nothing was changed"
    ))))
}

fn replay(answer: Option<ActionAnswer>) -> Result<ReviseResult, DeskError> {
    super::replayed(
        answer,
        "revision",
        ReviseResult::Applied,
        ReviseResult::Refused,
    )
}

/// Whether a workflow in `state` may still be corrected by a revision.
pub fn revisable(state: WorkflowState) -> bool {
    matches!(state, WorkflowState::Running | WorkflowState::NeedsReview)
}
