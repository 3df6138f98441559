//! Approvals over HTTP: `GET /v1/approvals` (what the caller may decide, oldest first) and
//! `GET /v1/workflows/{id}/steps/{step}/consequence` (what an approval step asks consent
//! to). Approving and rejecting are step actions (`POST …/steps/{step}/approve|reject`,
//! [`super::actions`]).

use super::Ctx;
use super::auth::Caller;
use super::error::{ApiError, ApiResult, ErrorCode, quote};
use crate::access::Role;
use crate::operator::approver_of;
use crate::view::rfc3339;
use axum::Json;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// Most approvals one list answers.
const LIST_LIMIT: u32 = 500;

/// `GET /v1/workflows/{id}/steps/{step}/consequence`: the latest consequence the approval
/// step asked about, its digest (what an approval must name), until when it waits, and its
/// decision once made.
pub(super) async fn consequence<
    S: crate::store::DefinitionStore + crate::store::ReadStore + crate::store::ApprovalStore,
>(
    State(ctx): State<Ctx<S>>,
    Caller(caller): Caller,
    ids: Result<Path<(String, String)>, PathRejection>,
) -> ApiResult<Response> {
    let (id, step) = ids
        .map(|Path(p)| p)
        .map_err(|e| ApiError::not_found(format!("{e}; check the path")))?;
    let (record, def) = approver_of(&ctx, &caller, &id, &step).await?;
    let Some(step_def) = def.def.step(&step).filter(|s| s.approval.is_some()) else {
        return Err(ApiError::not_found(format!(
            "step `{}` of workflow {} is not an approval step, so it asks no consent",
            quote(&step),
            record.workflow_id
        )));
    };
    let steps = ctx.store.steps(&record.workflow_id).await?;
    let row = steps
        .iter()
        .find(|s| s.step == step)
        .ok_or_else(|| ApiError::internal(format!("step {step} vanished from its workflow")))?;
    let state = row.state;
    let approvals = ctx.store.approvals(&record.workflow_id).await?;
    let Some(latest) = approvals.iter().rfind(|a| a.step == step) else {
        return Err(ApiError::new(
            ErrorCode::InvalidTransition,
            format!(
                "approval step `{}` is `{state}` and has not asked yet: it asks once the steps it runs after have receipts",
                quote(&step)
            ),
        ));
    };
    let view = crate::view::ApprovalView::of(latest);
    Ok(Json(json!({
        "workflow_id": record.workflow_id,
        "step": step,
        "state": state,
        "summary": crate::scheduler::approval_note(&def.def, step_def, row.note.as_deref()),
        "digest": latest.digest,
        "consequence": latest.consequence,
        "asked_at": rfc3339(latest.asked_at),
        "expires_at": rfc3339(latest.expires_at),
        "outcome": view.outcome,
        "decided_by": view.by,
        "decided_at": view.decided_at,
    }))
    .into_response())
}

/// `GET /v1/approvals`: every approval waiting for a decision that the caller may give
/// (the approver role; where a step names approvers, only they), oldest first.
pub(super) async fn list<
    S: crate::store::DefinitionStore + crate::store::ReadStore + crate::store::ApprovalStore,
>(
    State(ctx): State<Ctx<S>>,
    Caller(caller): Caller,
) -> ApiResult<Response> {
    super::auth::require(&caller, &[Role::Approver], "listing approvals")?;
    let pending = ctx.store.pending_approvals(LIST_LIMIT).await?;
    let mut out = Vec::with_capacity(pending.len());
    for p in pending {
        let Ok(Some(def)) = ctx.deployments.get(&p.workflow, p.definition_version).await else {
            continue;
        };
        let Some(step) = def.def.step(&p.record.step) else {
            continue;
        };
        let may = step
            .approval
            .as_ref()
            .is_some_and(|a| a.approvers.is_empty() || a.approvers.contains(&caller.subject.0));
        if !may {
            continue;
        }
        out.push(json!({
            "workflow_id": p.record.workflow_id,
            "workflow": p.workflow,
            "subject": p.subject.0,
            "step": p.record.step,
            "label": step.label,
            "summary": crate::scheduler::approval_note(&def.def, step, p.note.as_deref()),
            "digest": p.record.digest,
            "asked_at": rfc3339(p.record.asked_at),
            "expires_at": rfc3339(p.record.expires_at),
        }));
    }
    Ok(Json(json!({ "approvals": out })).into_response())
}
