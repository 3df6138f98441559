//! Carrying out an operator action against the store: gather the [`Situation`], decide,
//! apply the plan (or record the refusal) under the action's key, and for `query` and
//! `retry` wait for the attempt it started before answering.

use super::{Action, Order, Refusal, decide};
use super::{History, Situation};
use crate::access::{Principal, Role};
use crate::context::Context;
use crate::intent::{StepState, WorkflowId, canonicalize};
use crate::store::{
    ActionAnswer, ActionOutcome, ActionRequest, ActionScope, StoreError, StoredRefusal,
    WorkflowRecord,
};
use crate::view::{StepView, workflow_view};
use std::sync::Arc;
use std::time::Duration;

/// How long `query` and `retry` wait for the attempt they started to end.
const WAIT_FOR_ATTEMPT: Duration = Duration::from_secs(15);
/// How long a waiter trusts the wake-ups alone before it reads the store again: attempts
/// that end on another host are seen at the latest this late.
const FALLBACK_POLL: Duration = Duration::from_millis(250);

/// What an action came to, now or under an earlier use of its key; the API and the console
/// each render it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ActionResult {
    /// Done: the step's projection (JSON) once the action took effect.
    Applied(String),
    /// Refused; nothing changed.
    Refused(StoredRefusal),
}

/// Why an action could not be taken at all (as opposed to a [`Refusal`], which is an
/// answer stored under its key).
#[derive(Debug, thiserror::Error)]
pub enum DeskError {
    /// No such workflow visible to the caller, or no such step: check the address.
    #[error("{0}")]
    NotFound(String),
    /// The caller's role may not act on steps.
    #[error("acting on a step needs the operator role; ask an operator, or use an operator token")]
    Forbidden,
    /// The caller may not decide this approval (no approver role, or not among the
    /// approvers the step names); the message says which.
    #[error("{0}")]
    NotApprover(String),
    /// The caller holds neither role that may touch workflows (a deployer-only token).
    #[error(
        "changing a workflow's course needs the client role (for one's own) or the operator role; use such a token"
    )]
    NoWorkflowRole,
    /// The key was used for another order: use a new key.
    #[error(
        "Idempotency-Key `{}` was already used for `{}`{} with a different body; use a new key for a different request",
        .0.key.escape_debug(), .0.action,
        if .0.step.is_empty() { String::new() } else { format!(" on step `{}`", .0.step) }
    )]
    KeyConflict(Box<ActionScope>),
    /// The corrected input does not satisfy the definition's schema (`details` name the
    /// fields).
    #[error("{message}")]
    InvalidInput {
        message: String,
        details: Vec<serde_json::Value>,
    },
    /// The store failed; its error says whether a retry is safe.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Something that should not happen (a step vanished from its workflow).
    #[error("{0}")]
    Internal(String),
}

/// The address of an action.
#[derive(Debug, Clone)]
pub struct Target {
    pub workflow_id: String,
    pub step: String,
}

/// The workflow `id` if `caller` may see it; else the same `NotFound` as for one that does
/// not exist.
pub(super) async fn visible<S: crate::store::ReadStore>(
    ctx: &Context<S>,
    caller: &Principal,
    id: &str,
) -> Result<WorkflowRecord, DeskError> {
    if !caller.has(Role::Client) && !caller.has(Role::Operator) {
        return Err(DeskError::NoWorkflowRole);
    }
    ctx.store
        .workflow(&WorkflowId(id.to_string()))
        .await?
        .filter(|r| caller.can_see(&r.subject))
        .ok_or_else(|| {
            DeskError::NotFound(format!(
                "there is no workflow `{}` that you can see; check the id",
                id.escape_debug()
            ))
        })
}

/// The workflow `id` if `caller` may decide approval step `step` of it (the approver role,
/// and a place on the step's `approvers` when it names them) or, for any other step, see
/// it; else why not. An approver who may not see the workflow otherwise hears `NotFound`
/// unless the step is one they may decide.
pub async fn approver_of<S: crate::store::ReadStore + crate::store::DefinitionStore>(
    ctx: &Context<S>,
    caller: &Principal,
    id: &str,
    step: &str,
) -> Result<(WorkflowRecord, Arc<crate::catalog::DeployedDef>), DeskError> {
    let not_found = || {
        DeskError::NotFound(format!(
            "there is no workflow `{}` that you can see; check the id",
            id.escape_debug()
        ))
    };
    let record = ctx
        .store
        .workflow(&WorkflowId(id.to_string()))
        .await?
        .ok_or_else(not_found)?;
    let sees =
        (caller.has(Role::Client) || caller.has(Role::Operator)) && caller.can_see(&record.subject);
    let def = required_definition(ctx, &record).await?;
    let approval = def.def.step(step).and_then(|s| s.approval.as_ref());
    match approval {
        None if sees => Ok((record, def)),
        None => Err(not_found()),
        Some(_) if !caller.has(Role::Approver) => Err(if sees {
            DeskError::NotApprover(format!(
                "deciding approval step `{step}` needs the approver role; ask an approver, or use an approver token"
            ))
        } else {
            not_found()
        }),
        Some(a) if !a.approvers.is_empty() && !a.approvers.contains(&caller.subject.0) => {
            Err(DeskError::NotApprover(format!(
                "approval step `{step}` may be decided only by {}; `{}` is not among them",
                a.approvers.join(", "),
                caller.subject.0.escape_debug()
            )))
        }
        Some(_) => Ok((record, def)),
    }
}

/// The definition version `record` was admitted under, if it can be read.
pub(super) async fn definition_of<S: crate::store::DefinitionStore>(
    ctx: &Context<S>,
    record: &WorkflowRecord,
) -> Result<Option<Arc<crate::catalog::DeployedDef>>, DeskError> {
    ctx.deployments
        .get(&record.workflow, record.definition_version)
        .await
        .map_err(|e| match e {
            crate::catalog::DeployError::Store(e) => DeskError::Store(e),
            other => DeskError::Internal(other.to_string()),
        })
}

/// [`definition_of`], for an order that cannot be decided without it.
pub(super) async fn required_definition<S: crate::store::DefinitionStore>(
    ctx: &Context<S>,
    record: &WorkflowRecord,
) -> Result<Arc<crate::catalog::DeployedDef>, DeskError> {
    definition_of(ctx, record).await?.ok_or_else(|| {
        DeskError::Internal(format!(
            "definition {} v{} of workflow {} is not deployed",
            record.workflow, record.definition_version, record.workflow_id
        ))
    })
}

/// Carries out `order` on the target step for `caller` under `key`; a query or retry
/// answers once its attempt has ended (or after a bounded wait).
pub async fn perform<
    S: crate::store::DefinitionStore
        + crate::store::ReadStore
        + crate::store::ComponentStore
        + crate::store::OperatorStore
        + crate::store::ApprovalStore
        + crate::store::CourseStore
        + 'static,
>(
    ctx: &Arc<Context<S>>,
    caller: &Principal,
    target: Target,
    order: Order,
    key: String,
) -> Result<ActionResult, DeskError> {
    perform_waiting(ctx, caller, target, order, key, true).await
}

/// [`perform`]; with `wait` false a query or retry answers at once, with the step as the
/// action left it.
async fn perform_waiting<
    S: crate::store::DefinitionStore
        + crate::store::ReadStore
        + crate::store::ComponentStore
        + crate::store::OperatorStore
        + crate::store::ApprovalStore
        + crate::store::CourseStore
        + 'static,
>(
    ctx: &Arc<Context<S>>,
    caller: &Principal,
    target: Target,
    order: Order,
    key: String,
    wait: bool,
) -> Result<ActionResult, DeskError> {
    let Target { workflow_id, step } = target;
    let decides_approval = matches!(order, Order::Approve { .. } | Order::Reject { .. });
    let record = if decides_approval {
        approver_of(ctx, caller, &workflow_id, &step).await?.0
    } else {
        let record = visible(ctx, caller, &workflow_id).await?;
        if !caller.has(Role::Operator) {
            return Err(DeskError::Forbidden);
        }
        record
    };
    let steps = ctx.store.steps(&record.workflow_id).await?;
    let Some(step_record) = steps.iter().find(|s| s.step == step) else {
        let known: Vec<&str> = steps.iter().map(|s| s.step.as_str()).collect();
        return Err(DeskError::NotFound(format!(
            "workflow {} has no step `{}`; its steps are: {}",
            record.workflow_id,
            step.escape_debug(),
            known.join(", ")
        )));
    };
    let action = order.action();
    let digest = canonicalize(&order.to_json())
        .map_err(|e| DeskError::Internal(e.to_string()))?
        .digest;
    let scope = ActionScope {
        subject: caller.subject.clone(),
        workflow_id: record.workflow_id.clone(),
        step: step.clone(),
        action: action.as_str().to_string(),
        key,
    };
    // A known key answers before anything is decided again.
    if let Some(existing) = ctx.store.action(&scope).await? {
        if existing.request_digest != digest {
            return Err(DeskError::KeyConflict(Box::new(scope)));
        }
        return replay(ctx, &scope, &record, existing.answer).await;
    }
    let def = definition_of(ctx, &record).await?;
    // A compensation (`<step>.compensate`) is acted on like any step, with its step's adapter.
    let step_def = def
        .as_ref()
        .and_then(|d| crate::scheduler::step_of(&d.def, &step));
    let step_def = step_def.as_ref();
    let label = step_def.map_or(step.as_str(), |s| s.label.as_str());
    let is_adapter = step_def.is_some_and(|s| s.kind == crate::workflow::StepKind::Adapter);
    let is_approval = step_def.is_some_and(|s| s.kind == crate::workflow::StepKind::Approval);
    let approvals = if is_approval {
        ctx.store.approvals(&record.workflow_id).await?
    } else {
        Vec::new()
    };
    let open = approvals
        .iter()
        .rfind(|a| a.step == step && a.outcome.is_none())
        .filter(|_| step_record.state == StepState::AwaitingApproval);
    let attempts = ctx
        .store
        .attempts(&record.workflow_id, &step, 0, 10_000)
        .await?;
    let history = History::of(&attempts);
    // The version the step last ran, from the database if this host has not loaded it
    // (with several hosts, another one may have run it).
    let mut loaded = None;
    if let Some(components) = &ctx.components {
        if let Some((name, version)) = history
            .latest
            .and_then(|a| a.provenance.as_ref())
            .map(|p| (p.component.as_str(), p.component_version.as_str()))
        {
            loaded = components
                .exact_or_stored(&ctx.store, name, version)
                .await?;
        }
        if loaded.is_none() {
            loaded = step_def.and_then(|s| components.resolve(s).ok());
        }
    }
    let read = def
        .as_ref()
        .map(|d| d.def.fields_read(&step))
        .unwrap_or_default();
    let now = ctx.clock_now();
    // A retry of a batch step retries its unresolved items, each an action of its own.
    if step_record.items.is_some() && action == Action::Retry {
        return retry_items(ctx, caller, &record, &steps, scope, order, digest).await;
    }
    // A batch step is otherwise acted on through its items; escalating it changes nothing
    // of them.
    let batch = step_record.items.is_some() && action != Action::Escalate;
    let decision = if batch {
        Err(super::Refusal::BatchStep {
            step: step.clone(),
            action,
        })
    } else {
        decide(&Situation {
            order: &order,
            actor: &caller.subject,
            step: &step,
            state: step_record.state,
            label,
            is_adapter,
            is_approval,
            approval: open,
            outputs: &read,
            contract: loaded.as_ref().and_then(|c| c.contract()),
            history,
            course: super::CourseFacts {
                workflow: record.state,
                cancelled: record.cancelled,
                compensation_started: steps
                    .iter()
                    .any(|s| s.step == crate::course::compensation_id(&step)),
                policy_block: step_record
                    .blocked
                    .as_ref()
                    .filter(|b| b.reason == crate::policy::BLOCKED_REASON)
                    .and_then(|b| b.policy_version),
            },
            now,
        })
    };
    let (change, events) = match decision {
        Ok(plan) => (Ok(plan.change), plan.events),
        Err(refusal) => (Err(stored(&refusal)), Vec::new()),
    };
    let request = ActionRequest {
        scope: scope.clone(),
        request_digest: digest,
        expected_state: step_record.state,
        change,
        stale: stored(&Refusal::StepMoved {
            step: step.clone(),
            was: step_record.state,
        }),
        events,
        now,
        approval: approval_decision(&order, open, &caller.subject, &step),
    };
    match ctx.store.act(request).await? {
        ActionOutcome::Refused(refusal) => Ok(ActionResult::Refused(refusal)),
        ActionOutcome::KeyConflict => Err(DeskError::KeyConflict(Box::new(scope))),
        ActionOutcome::Replayed(existing) => replay(ctx, &scope, &record, existing.answer).await,
        ActionOutcome::Applied { .. } => {
            ctx.wake.notify_one();
            // The answer is stored by a task of its own: a client that hangs up while the
            // attempt settles must not leave later replays of its key without one.
            let (ctx, attempts_before) = (ctx.clone(), step_record.attempts);
            let answered = tokio::spawn(async move {
                if wait && matches!(action, Action::Query | Action::Retry) {
                    settle(&ctx, &record.workflow_id, &scope.step, attempts_before).await;
                }
                let view = step_view(&ctx, &record, &scope.step).await?;
                let body =
                    serde_json::to_string(&view).map_err(|e| DeskError::Internal(e.to_string()))?;
                ctx.store.answer(&scope, body.clone()).await?;
                Ok::<_, DeskError>(body)
            });
            let body = answered
                .await
                .map_err(|e| DeskError::Internal(format!("answering the action failed: {e}")))??;
            Ok(ActionResult::Applied(body))
        }
    }
}

/// A retry of batch step `scope.step`: each of its unresolved items (outcome unknown, blocked,
/// failed) is retried under a key derived from the step's (`<key>:<item key>`), so a replay
/// retries none twice; items that completed stay as they are. The step's view, with the
/// items' counts, is kept under the step's key and answers its replays.
async fn retry_items<
    S: crate::store::DefinitionStore
        + crate::store::ReadStore
        + crate::store::ComponentStore
        + crate::store::OperatorStore
        + crate::store::ApprovalStore
        + crate::store::CourseStore
        + 'static,
>(
    ctx: &Arc<Context<S>>,
    caller: &Principal,
    record: &crate::store::WorkflowRecord,
    steps: &[crate::store::StepRecord],
    scope: ActionScope,
    order: Order,
    digest: String,
) -> Result<ActionResult, DeskError> {
    let unresolved: Vec<&crate::store::StepRecord> = steps
        .iter()
        .filter(|s| s.batch_of.as_deref() == Some(scope.step.as_str()))
        .filter(|s| {
            matches!(
                s.state,
                StepState::OutcomeUnknown
                    | StepState::Blocked
                    | StepState::FailedRetryable
                    | StepState::FailedTerminal
            )
        })
        .collect();
    if unresolved.is_empty() {
        return Ok(ActionResult::Refused(stored(&Refusal::NothingToRetry {
            step: scope.step.clone(),
        })));
    }
    for item in unresolved {
        let key = format!(
            "{}:{}",
            scope.key,
            item.item_key.as_deref().unwrap_or(item.step.as_str())
        );
        let target = Target {
            workflow_id: record.workflow_id.to_string(),
            step: item.step.clone(),
        };
        // An item another person settled meanwhile refuses on its own; the rest go on.
        // Each item's attempt runs in its own time: the step's answer does not wait for it.
        Box::pin(perform_waiting(
            ctx,
            caller,
            target,
            order.clone(),
            key,
            false,
        ))
        .await?;
    }
    let view = step_view(ctx, record, &scope.step).await?;
    let body = serde_json::to_string(&view).map_err(|e| DeskError::Internal(e.to_string()))?;
    let kept = ctx
        .store
        .remember(scope, digest, ActionAnswer::Applied(body), ctx.clock_now())
        .await?;
    Ok(match kept.answer {
        Some(ActionAnswer::Applied(body)) => ActionResult::Applied(body),
        Some(ActionAnswer::Refused(r)) => ActionResult::Refused(r),
        None => {
            return Err(DeskError::Internal(
                "a remembered retry has no answer".into(),
            ));
        }
    })
}

fn stored(refusal: &Refusal) -> StoredRefusal {
    let details = match refusal {
        Refusal::ConsequenceChanged { current, .. } => {
            vec![serde_json::json!({"current_digest": current})]
        }
        _ => Vec::new(),
    };
    StoredRefusal {
        code: refusal.code().to_string(),
        message: refusal.to_string(),
        details,
    }
}

/// The approval decision an approve or reject carries, applied only while `open` is still
/// the step's question.
fn approval_decision(
    order: &Order,
    open: Option<&crate::store::ApprovalRecord>,
    by: &crate::intent::Subject,
    step: &str,
) -> Option<crate::store::ApprovalDecision> {
    let (digest, outcome, text) = match order {
        Order::Approve { digest, note } => (
            digest.clone(),
            crate::intent::ApprovalOutcome::Approved,
            note.clone(),
        ),
        Order::Reject { reason } => (
            open?.digest.clone(),
            crate::intent::ApprovalOutcome::Rejected,
            Some(reason.clone()),
        ),
        _ => return None,
    };
    let changed = stored(&Refusal::ConsequenceChanged {
        step: step.to_string(),
        current: "another consequence".into(),
    });
    Some(crate::store::ApprovalDecision {
        asked_at: open.map_or(0, |o| o.asked_at),
        digest,
        outcome,
        by: by.clone(),
        text,
        changed: StoredRefusal {
            details: Vec::new(),
            ..changed
        },
    })
}

/// The step's projection as the answer of an action.
async fn step_view<S: crate::store::DefinitionStore + crate::store::ReadStore>(
    ctx: &Context<S>,
    record: &WorkflowRecord,
    step: &str,
) -> Result<StepView, DeskError> {
    let def = ctx
        .deployments
        .get(&record.workflow, record.definition_version)
        .await
        .ok()
        .flatten();
    let record = ctx
        .store
        .workflow(&record.workflow_id)
        .await?
        .unwrap_or_else(|| record.clone());
    let steps = ctx.store.steps(&record.workflow_id).await?;
    let receipts = ctx.store.receipts(&record.workflow_id).await?;
    let view = workflow_view(&record, def.as_ref().map(|d| &d.def), &steps, &receipts);
    // A compensation is shown nested under the step whose effect it reverses, an item
    // under its batch step (with the step's counts of items).
    let shown = crate::course::compensated_step(step).unwrap_or(step);
    let shown = crate::workflow::item_of(shown).map_or(shown, |(batch, _)| batch);
    view.steps
        .into_iter()
        .find(|s| s.id == shown)
        .ok_or_else(|| DeskError::Internal(format!("step {step} vanished from its workflow")))
}

/// Waits for the next sign that an attempt ended, or at most [`FALLBACK_POLL`].
async fn next_sign(signs: &mut tokio::sync::watch::Receiver<u64>) {
    tokio::select! {
        _ = signs.changed() => {}
        _ = tokio::time::sleep(FALLBACK_POLL) => {}
    }
}

/// Waits (bounded) until the step has left `ready`/`running` after the action.
async fn settle<S: crate::store::ReadStore>(
    ctx: &Context<S>,
    id: &WorkflowId,
    step: &str,
    attempts_before: u32,
) {
    let mut signs = ctx.progress.subscribe();
    let deadline = tokio::time::Instant::now() + WAIT_FOR_ATTEMPT;
    while tokio::time::Instant::now() < deadline {
        if let Ok(steps) = ctx.store.steps(id).await
            && let Some(s) = steps.iter().find(|s| s.step == step)
            && s.attempts > attempts_before
            && !matches!(s.state, StepState::Ready | StepState::Running)
        {
            return;
        }
        next_sign(&mut signs).await;
    }
}

/// The answer stored under a repeated key; if the first request is still acting, its answer
/// once stored, or (after waiting) the step as it stands.
async fn replay<
    S: crate::store::DefinitionStore + crate::store::ReadStore + crate::store::OperatorStore,
>(
    ctx: &Context<S>,
    scope: &ActionScope,
    record: &WorkflowRecord,
    answer: Option<ActionAnswer>,
) -> Result<ActionResult, DeskError> {
    let answer = match answer {
        Some(answer) => Some(answer),
        None => stored_answer(ctx, scope).await,
    };
    Ok(match answer {
        Some(ActionAnswer::Applied(body)) => ActionResult::Applied(body),
        Some(ActionAnswer::Refused(refusal)) => ActionResult::Refused(refusal),
        None => ActionResult::Applied(
            serde_json::to_string(&step_view(ctx, record, &scope.step).await?)
                .map_err(|e| DeskError::Internal(e.to_string()))?,
        ),
    })
}

/// Waits (bounded) for the answer of the same action running elsewhere.
async fn stored_answer<S: crate::store::OperatorStore>(
    ctx: &Context<S>,
    scope: &ActionScope,
) -> Option<ActionAnswer> {
    let mut signs = ctx.progress.subscribe();
    let deadline = tokio::time::Instant::now() + WAIT_FOR_ATTEMPT + Duration::from_secs(1);
    while tokio::time::Instant::now() < deadline {
        if let Ok(Some(rec)) = ctx.store.action(scope).await
            && rec.answer.is_some()
        {
            return rec.answer;
        }
        next_sign(&mut signs).await;
    }
    None
}
