//! Operator actions on a step: `query`, `retry`, `resolve`, `escalate`, each
//! idempotent under its key and decided by the step's state and the adapter's contract.
//!
//! Each action is decided here from the step's state, its attempts and the adapter's
//! declared contract, then applied by the store in one transaction that also records the
//! key — so a repeat with the same key and body acts once and gets the stored answer,
//! whatever it was, and a repeat with another body is `409 key_conflict`. The store moves
//! the step only if it is still in the state the decision saw and not leased; otherwise
//! the answer is `409 invalid_transition`.
//!
//! `query` and `retry` make the step claimable at once under their trigger and wait
//! (bounded) for that attempt to end, so the answer shows its result. A resolution needs
//! evidence and a reason and records who gave them; there is no way to mark a step
//! succeeded without them.

use super::error::{ApiError, ApiResult, ErrorCode, quote};
use super::intents::{key_from_headers, read_body};
use super::projection::{StepView, workflow_view};
use super::{ApiStore, Ctx};
use crate::api::auth::{Caller, Principal, Role};
use crate::contract::Contract;
use crate::intent::{
    AttemptId, EventKind, EvidenceKind, Millis, NewEvent, ReceiptId, StepState, Trigger,
    WorkflowId, canonicalize,
};
use crate::scheduler::recovery::retention_deadline;
use crate::store::{
    ActionOutcome, ActionRequest, ActionScope, AttemptRecord, NewReceipt, StepChange, StepRecord,
    WorkflowRecord,
};
use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use std::time::Duration;

/// How long `query` and `retry` wait for the attempt they started to end.
const WAIT_FOR_ATTEMPT: Duration = Duration::from_secs(15);
const POLL: Duration = Duration::from_millis(20);

/// The four actions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    Query,
    Retry,
    Resolve,
    Escalate,
}

impl Action {
    pub(crate) fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "query" => Self::Query,
            "retry" => Self::Retry,
            "resolve" => Self::Resolve,
            "escalate" => Self::Escalate,
            _ => return None,
        })
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Query => "query",
            Self::Retry => "retry",
            Self::Resolve => "resolve",
            Self::Escalate => "escalate",
        }
    }
}

/// A resolution's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Resolution {
    Succeeded,
    NotHappened,
    Abandon,
}

/// A checked action body.
#[derive(Debug, Clone, PartialEq)]
enum ActionBody {
    Empty,
    Resolve {
        outcome: Resolution,
        evidence: String,
        reason: String,
        external_reference: Option<String>,
    },
    Escalate {
        note: String,
    },
}

fn invalid(message: String, pointer: &str) -> ApiError {
    ApiError::new(ErrorCode::InvalidRequest, message)
        .with_details(vec![json!({"pointer": pointer})])
}

/// A required non-empty text field.
fn text(body: &Value, field: &str, why: &str) -> ApiResult<String> {
    match body.get(field) {
        Some(Value::String(s)) if !s.trim().is_empty() => Ok(s.clone()),
        Some(Value::String(_)) | None => Err(invalid(
            format!("`{field}` is required and must not be empty: {why}"),
            &format!("/{field}"),
        )),
        Some(_) => Err(invalid(
            format!("`{field}` must be a string: {why}"),
            &format!("/{field}"),
        )),
    }
}

fn parse_body(action: Action, bytes: &[u8]) -> ApiResult<(ActionBody, Value)> {
    let value: Value = if bytes.iter().all(u8::is_ascii_whitespace) {
        json!({})
    } else {
        serde_json::from_slice(bytes).map_err(|e| {
            ApiError::new(
                ErrorCode::InvalidJson,
                format!("the body is not JSON ({e}); send a JSON object"),
            )
        })?
    };
    if !value.is_object() {
        return Err(invalid("the body must be a JSON object".into(), ""));
    }
    let body = match action {
        Action::Query | Action::Retry => ActionBody::Empty,
        Action::Resolve => {
            let outcome = match value.get("outcome").and_then(Value::as_str) {
                Some("succeeded") => Resolution::Succeeded,
                Some("not_happened") => Resolution::NotHappened,
                Some("abandon") => Resolution::Abandon,
                other => {
                    return Err(invalid(
                        format!(
                            "`outcome` is {}, but it must be one of `succeeded`, `not_happened`, `abandon`",
                            other.map_or("missing".to_string(), |o| format!("`{}`", quote(o)))
                        ),
                        "/outcome",
                    ));
                }
            };
            let external_reference = match value.get("external_reference") {
                None | Some(Value::Null) => None,
                Some(Value::String(s)) => Some(s.clone()),
                Some(_) => {
                    return Err(invalid(
                        "`external_reference` must be a string when given".into(),
                        "/external_reference",
                    ));
                }
            };
            ActionBody::Resolve {
                outcome,
                evidence: text(
                    &value,
                    "evidence",
                    "say what shows the outcome (a provider record, a message, a call)",
                )?,
                reason: text(&value, "reason", "say why this resolution is right")?,
                external_reference,
            }
        }
        Action::Escalate => ActionBody::Escalate {
            note: text(&value, "note", "say what the next person should look at")?,
        },
    };
    Ok((body, value))
}

/// A stored answer as an HTTP response.
fn respond(status: u16, body: String) -> Response {
    let mut response =
        (StatusCode::from_u16(status).unwrap_or(StatusCode::OK), body).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

fn refusal(message: String) -> (u16, String) {
    let e = ApiError::new(ErrorCode::InvalidTransition, message);
    (e.code.status().as_u16(), e.body().to_string())
}

/// States from which a person may act on a step's outcome.
const SETTLEABLE: [StepState; 5] = [
    StepState::OutcomeUnknown,
    StepState::WaitingForReview,
    StepState::Blocked,
    StepState::FailedRetryable,
    StepState::FailedTerminal,
];

fn settleable_text() -> String {
    SETTLEABLE
        .iter()
        .map(|s| s.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// What the step's attempts say: the latest one, and when the request may first have
/// reached the provider (checkpoint 3 or later).
struct History<'a> {
    latest: Option<&'a AttemptRecord>,
    first_sent_at: Option<Millis>,
}

impl<'a> History<'a> {
    fn of(attempts: &'a [AttemptRecord]) -> Self {
        Self {
            latest: attempts.iter().max_by_key(|a| a.number),
            first_sent_at: attempts
                .iter()
                .filter(|a| a.checkpoint >= 3 && a.request_identity.is_some())
                .map(|a| a.started_at)
                .min(),
        }
    }
}

/// Everything a decision looks at.
struct Situation<'a> {
    caller: &'a Principal,
    step: &'a StepRecord,
    label: &'a str,
    is_adapter: bool,
    contract: Option<&'a Contract>,
    history: History<'a>,
    now: Millis,
}

type Decision = Result<(StepChange, Vec<NewEvent>), (u16, String)>;

fn decide(action: Action, body: &ActionBody, s: &Situation<'_>) -> Decision {
    let step = &s.step.step;
    let state = s.step.state;
    let by = &s.caller.subject.0;
    let not_now = |what: &str, allowed: &str| {
        Err(refusal(format!(
            "step `{step}` is `{}`, so it cannot be {what} now; {allowed}",
            state.as_str()
        )))
    };
    let event = |kind: EventKind, text: String, data: Value| {
        NewEvent::step(kind, step, None::<&AttemptId>, text).with_data(data)
    };
    match (action, body) {
        (Action::Query, _) => {
            if !SETTLEABLE.contains(&state) {
                return not_now(
                    "queried",
                    &format!("a query is possible in: {}", settleable_text()),
                );
            }
            if !s.is_adapter {
                return Err(refusal(format!(
                    "step `{step}` is a pure handler: it has no provider to ask; use `retry` to run it again"
                )));
            }
            match s.contract {
                Some(c) if c.query.supported => {}
                Some(c) => {
                    return Err(refusal(format!(
                        "the adapter `{}` does not declare lookups by reference, so there is nothing to ask; \
                         use `resolve` with the evidence you have",
                        c.name
                    )));
                }
                None => {
                    return Err(refusal(format!(
                        "the adapter version that ran step `{step}` is not loaded on this host, so it cannot be asked"
                    )));
                }
            }
            Ok((
                StepChange::Ready {
                    trigger: Trigger::RecoveryQuery,
                    settle_uncertainty: false,
                },
                vec![event(
                    EventKind::Action,
                    format!("Operator {by} asked for a query by the stable reference"),
                    json!({"action": "query", "author": by}),
                )],
            ))
        }
        (Action::Retry, _) => {
            if !SETTLEABLE.contains(&state) {
                return not_now(
                    "retried",
                    &format!("a retry is possible in: {}", settleable_text()),
                );
            }
            if s.is_adapter
                && let Some(sent_at) = s.history.first_sent_at
            {
                let Some(contract) = s.contract else {
                    return Err(refusal(format!(
                        "the adapter version that ran step `{step}` is not loaded on this host; a retry \
                         cannot be judged safe"
                    )));
                };
                match retention_deadline(contract, sent_at) {
                    None => {
                        return Err(refusal(format!(
                            "the request of step `{step}` may have reached {} and the adapter does not \
                             declare idempotency, so a retry could do it twice; use `query` or `resolve`",
                            contract.name
                        )));
                    }
                    Some(deadline) if s.now >= deadline => {
                        return Err(refusal(format!(
                            "the provider's memory of the idempotency key ended at {} ({} s after the \
                             first request), so a retry could do it twice; use `resolve` with evidence",
                            super::time::rfc3339(deadline),
                            contract.idempotency.retention_seconds
                        )));
                    }
                    Some(_) => {}
                }
            }
            Ok((
                StepChange::Ready {
                    trigger: Trigger::ManualRetry,
                    settle_uncertainty: false,
                },
                vec![event(
                    EventKind::Action,
                    format!("Operator {by} ordered a retry with the same idempotency key"),
                    json!({"action": "retry", "author": by}),
                )],
            ))
        }
        (
            Action::Resolve,
            ActionBody::Resolve {
                outcome,
                evidence,
                reason,
                external_reference,
            },
        ) => {
            if !SETTLEABLE.contains(&state) {
                return not_now(
                    "resolved",
                    &format!("a resolution is possible in: {}", settleable_text()),
                );
            }
            let data = json!({
                "action": "resolve",
                "author": by,
                "outcome": match outcome {
                    Resolution::Succeeded => "succeeded",
                    Resolution::NotHappened => "not_happened",
                    Resolution::Abandon => "abandon",
                },
                "evidence": evidence,
                "reason": reason,
                "external_reference": external_reference,
            });
            let label = s.label;
            match outcome {
                Resolution::Succeeded => {
                    let latest = s.history.latest;
                    let receipt = NewReceipt {
                        receipt_id: ReceiptId::new(s.now),
                        evidence_kind: EvidenceKind::Manual,
                        component: latest.and_then(|a| a.component.clone()).unwrap_or_default(),
                        component_version: latest
                            .and_then(|a| a.component_version.clone())
                            .unwrap_or_default(),
                        component_digest: latest
                            .and_then(|a| a.component_digest.clone())
                            .unwrap_or_default(),
                        input_digest: latest
                            .and_then(|a| a.input_digest.clone())
                            .unwrap_or_default(),
                        external_reference: external_reference.clone(),
                        output: json!({}),
                        author: Some(by.clone()),
                        reason: Some(reason.clone()),
                        evidence: Some(evidence.clone()),
                    };
                    let text = format!(
                        "{label} resolved by {by} as succeeded: manual receipt {} (evidence: {evidence}; reason: {reason})",
                        receipt.receipt_id
                    );
                    Ok((
                        StepChange::Succeed(Box::new(receipt)),
                        vec![
                            event(
                                EventKind::Action,
                                format!("Operator {by} reconciled the step with manual evidence"),
                                data.clone(),
                            ),
                            event(EventKind::Conclusion, text, data),
                        ],
                    ))
                }
                Resolution::NotHappened => Ok((
                    StepChange::Ready {
                        trigger: Trigger::ManualRetry,
                        settle_uncertainty: true,
                    },
                    vec![event(
                        EventKind::Conclusion,
                        format!(
                            "{label} resolved by {by}: it did not happen (evidence: {evidence}; reason: {reason}); \
                             ready again under the same identity"
                        ),
                        data,
                    )],
                )),
                Resolution::Abandon => Ok((
                    StepChange::Terminal {
                        state: StepState::FailedTerminal,
                        note: format!("abandoned by {by}: {reason}"),
                    },
                    vec![event(
                        EventKind::Conclusion,
                        format!(
                            "{label} abandoned by {by} (evidence: {evidence}; reason: {reason})"
                        ),
                        data,
                    )],
                )),
            }
        }
        (Action::Escalate, ActionBody::Escalate { note }) => {
            if matches!(
                state,
                StepState::Succeeded | StepState::Compensated | StepState::Cancelled
            ) {
                return not_now("escalated", "only unfinished steps can be escalated");
            }
            Ok((
                StepChange::Escalate(json!({"note": note, "by": by, "at": s.now})),
                vec![event(
                    EventKind::Action,
                    format!("Escalated by {by}: {note}"),
                    json!({"action": "escalate", "author": by, "note": note}),
                )],
            ))
        }
        _ => unreachable!("the body was parsed for its action"),
    }
}

/// The step's projection as the answer of an action.
async fn step_view<S: ApiStore>(
    ctx: &Ctx<S>,
    record: &WorkflowRecord,
    step: &str,
) -> ApiResult<StepView> {
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
    view.steps
        .into_iter()
        .find(|s| s.id == step)
        .ok_or_else(|| ApiError::internal(format!("step {step} vanished from its workflow")))
}

/// Waits until the step has left `ready`/`running` after the action (bounded).
async fn settle<S: ApiStore>(ctx: &Ctx<S>, id: &WorkflowId, step: &str, attempts_before: u32) {
    let deadline = tokio::time::Instant::now() + WAIT_FOR_ATTEMPT;
    while tokio::time::Instant::now() < deadline {
        if let Ok(steps) = ctx.store.steps(id).await
            && let Some(s) = steps.iter().find(|s| s.step == step)
            && s.attempts > attempts_before
            && !matches!(s.state, StepState::Ready | StepState::Running)
        {
            return;
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Waits for the answer of the same action running elsewhere (bounded).
async fn stored_answer<S: ApiStore>(ctx: &Ctx<S>, scope: &ActionScope) -> Option<(u16, String)> {
    let deadline = tokio::time::Instant::now() + WAIT_FOR_ATTEMPT + Duration::from_secs(1);
    while tokio::time::Instant::now() < deadline {
        if let Ok(Some(rec)) = ctx.store.action(scope).await
            && rec.answer.is_some()
        {
            return rec.answer;
        }
        tokio::time::sleep(POLL).await;
    }
    None
}

/// The answer stored under a repeated key; if the first request is still acting, its answer
/// once stored, or (after waiting) the step as it stands.
async fn replay<S: ApiStore>(
    ctx: &Ctx<S>,
    scope: &ActionScope,
    record: &WorkflowRecord,
    answer: Option<(u16, String)>,
) -> ApiResult<Response> {
    let answer = match answer {
        Some(answer) => Some(answer),
        None => stored_answer(ctx, scope).await,
    };
    Ok(match answer {
        Some((status, body)) => respond(status, body),
        None => respond(
            200,
            serde_json::to_string(&step_view(ctx, record, &scope.step).await?)
                .map_err(ApiError::internal)?,
        ),
    })
}

fn key_conflict(scope: &ActionScope) -> ApiError {
    ApiError::new(
        ErrorCode::KeyConflict,
        format!(
            "Idempotency-Key `{}` was already used for `{}` on step `{}` with a different body; \
             use a new key for a different request",
            quote(&scope.key),
            scope.action,
            scope.step
        ),
    )
    .with_details(vec![json!({"workflow_id": scope.workflow_id})])
}

/// `POST /v1/workflows/{id}/steps/{step}/{action}`.
pub(super) async fn act<S: ApiStore>(
    State(ctx): State<Ctx<S>>,
    Caller(caller): Caller,
    ids: Result<Path<(String, String, String)>, PathRejection>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    let (id, step, action_text) = ids
        .map(|Path(p)| p)
        .map_err(|e| ApiError::not_found(format!("{e}; check the path")))?;
    let action = Action::parse(&action_text).ok_or_else(|| {
        ApiError::not_found(format!(
            "there is no step action `{}`; the actions are query, retry, resolve and escalate",
            quote(&action_text)
        ))
    })?;
    let key = key_from_headers(&headers)?;
    let bytes = read_body(&headers, body, ctx.limits.max_body_bytes).await?;
    perform(&ctx, caller, id, step, action, key, &bytes).await
}

/// One operator action, as the API and the console both run it: `bytes` is the JSON body.
pub(crate) async fn perform<S: ApiStore>(
    ctx: &Ctx<S>,
    caller: Principal,
    id: String,
    step: String,
    action: Action,
    key: String,
    bytes: &[u8],
) -> ApiResult<Response> {
    let (parsed, value) = parse_body(action, bytes)?;
    let record = ctx
        .store
        .workflow(&WorkflowId(id.clone()))
        .await?
        .filter(|r| caller.can_see(&r.subject))
        .ok_or_else(|| {
            ApiError::not_found(format!(
                "there is no workflow `{}` that you can see; check the id",
                quote(&id)
            ))
        })?;
    if caller.role != Role::Operator {
        return Err(ApiError::new(
            ErrorCode::Forbidden,
            "acting on a step needs the operator role; ask an operator, or use an operator token",
        ));
    }
    let steps = ctx.store.steps(&record.workflow_id).await?;
    let Some(step_record) = steps.iter().find(|s| s.step == step) else {
        let known: Vec<&str> = steps.iter().map(|s| s.step.as_str()).collect();
        return Err(ApiError::not_found(format!(
            "workflow {} has no step `{}`; its steps are: {}",
            record.workflow_id,
            quote(&step),
            known.join(", ")
        )));
    };
    let canonical = canonicalize(&value).map_err(ApiError::internal)?;
    let scope = ActionScope {
        subject: caller.subject.clone(),
        workflow_id: record.workflow_id.clone(),
        step: step.clone(),
        action: action.as_str().to_string(),
        key,
    };
    // A known key answers before anything is decided again.
    if let Some(existing) = ctx.store.action(&scope).await? {
        if existing.request_digest != canonical.digest {
            return Err(key_conflict(&scope));
        }
        return replay(ctx, &scope, &record, existing.answer).await;
    }
    let def = ctx
        .deployments
        .get(&record.workflow, record.definition_version)
        .await?;
    let step_def = def.as_ref().and_then(|d| d.def.step(&step));
    let label = step_def.map_or(step.as_str(), |s| s.label.as_str());
    let is_adapter = step_def.is_some_and(|s| s.kind == crate::workflow::StepKind::Adapter);
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
            .and_then(|a| a.component.as_deref().zip(a.component_version.as_deref()))
        {
            loaded = components
                .exact_or_stored(&ctx.store, name, version)
                .await?;
        }
        if loaded.is_none() {
            loaded = step_def.and_then(|s| components.resolve(s).ok());
        }
    }
    let contract = loaded.as_ref().and_then(|c| c.contract());
    let now = ctx.clock_now();
    let situation = Situation {
        caller: &caller,
        step: step_record,
        label,
        is_adapter,
        contract,
        history,
        now,
    };
    let decision = decide(action, &parsed, &situation);
    let (change, events) = match decision {
        Ok((change, events)) => (Ok(change), events),
        Err(answer) => (Err(answer), Vec::new()),
    };
    let request = ActionRequest {
        scope: scope.clone(),
        request_digest: canonical.digest,
        expected_state: step_record.state,
        change,
        stale_answer: refusal(format!(
            "step `{step}` changed while the action was being decided (it was `{}`); read it again and decide anew",
            step_record.state.as_str()
        )),
        events,
        now,
    };
    match ctx.store.act(request).await? {
        ActionOutcome::Refused { answer } => Ok(respond(answer.0, answer.1)),
        ActionOutcome::KeyConflict => Err(key_conflict(&scope)),
        ActionOutcome::Replayed(existing) => replay(ctx, &scope, &record, existing.answer).await,
        ActionOutcome::Applied { .. } => {
            ctx.wake.notify_one();
            // The answer is stored by a task of its own: a client that hangs up while the
            // attempt settles must not leave later replays of its key without one.
            let (ctx, attempts_before) = (ctx.clone(), step_record.attempts);
            let answered = tokio::spawn(async move {
                if matches!(action, Action::Query | Action::Retry) {
                    settle(&ctx, &record.workflow_id, &step, attempts_before).await;
                }
                let view = step_view(&ctx, &record, &step).await?;
                let body = serde_json::to_string(&view).map_err(ApiError::internal)?;
                ctx.store.answer(&scope, 200, body.clone()).await?;
                Ok::<_, ApiError>(body)
            });
            let body = answered.await.map_err(ApiError::internal)??;
            Ok(respond(200, body))
        }
    }
}
