//! Reading workflows: the projection, its timeline, a step's attempts, and the list.
//!
//! A client sees only workflows of its own subject; for anything else it gets the same
//! `404` as for a workflow that does not exist. Each workflow is projected with its own
//! definition version; if that can no longer be read, the projection is still served
//! (labels fall back to step ids) and the problem is logged.

use super::auth::Caller;
use super::error::{ApiError, ApiResult, ErrorCode, quote};
use super::pagination::{Cursor, Page, page_request};
use super::{ContextStore, Ctx};
use crate::access::{Principal, Role};
use crate::intent::{WorkflowId, WorkflowState};
use crate::scheduler::DeployedDef;
use crate::store::{WorkflowFilter, WorkflowRecord};
use crate::view::{
    AttemptView, SummaryView, TimelineView, WorkflowView, summary_view, workflow_view,
};
use axum::Json;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use std::collections::HashMap;
use std::sync::Arc;

type Params = Result<Query<HashMap<String, String>>, QueryRejection>;

fn params(query: Params) -> ApiResult<HashMap<String, String>> {
    query.map(|Query(p)| p).map_err(|e| {
        ApiError::new(
            ErrorCode::InvalidParameter,
            format!("{e}; check the query string"),
        )
    })
}

fn path<T>(path: Result<Path<T>, PathRejection>) -> ApiResult<T> {
    path.map(|Path(p)| p)
        .map_err(|e| ApiError::not_found(format!("{e}; check the path")))
}

/// The workflow `id` if the caller may see it.
async fn visible<S: ContextStore>(
    ctx: &Ctx<S>,
    caller: &Principal,
    id: &str,
) -> ApiResult<WorkflowRecord> {
    let record = ctx.store.workflow(&WorkflowId(id.to_string())).await?;
    record.filter(|r| caller.can_see(&r.subject)).ok_or_else(|| {
        ApiError::not_found(format!(
            "there is no workflow `{}` that you can see; check the id (as returned in `workflow_id`)",
            quote(id)
        ))
    })
}

/// The workflow's own definition version, or `None` (logged) if it cannot be read.
async fn definition<S: ContextStore>(
    ctx: &Ctx<S>,
    record: &WorkflowRecord,
) -> Option<Arc<DeployedDef>> {
    match ctx
        .deployments
        .get(&record.workflow, record.definition_version)
        .await
    {
        Ok(Some(def)) => Some(def),
        Ok(None) => {
            tracing::warn!(workflow = %record.workflow, version = record.definition_version,
                "definition of a stored workflow is missing; projecting without labels");
            None
        }
        Err(e) => {
            tracing::warn!(workflow = %record.workflow, version = record.definition_version, error = %e,
                "definition of a stored workflow cannot be read; projecting without labels");
            None
        }
    }
}

/// `GET /v1/workflows/{id}`.
pub(super) async fn projection<S: ContextStore>(
    State(ctx): State<Ctx<S>>,
    Caller(caller): Caller,
    id: Result<Path<String>, PathRejection>,
) -> ApiResult<Json<WorkflowView>> {
    let record = visible(&ctx, &caller, &path(id)?).await?;
    let def = definition(&ctx, &record).await;
    let steps = ctx.store.steps(&record.workflow_id).await?;
    let receipts = ctx.store.receipts(&record.workflow_id).await?;
    Ok(Json(workflow_view(
        &record,
        def.as_ref().map(|d| &d.def),
        &steps,
        &receipts,
    )))
}

/// `GET /v1/workflows/{id}/timeline`, oldest first.
pub(super) async fn timeline<S: ContextStore>(
    State(ctx): State<Ctx<S>>,
    Caller(caller): Caller,
    id: Result<Path<String>, PathRejection>,
    query: Params,
) -> ApiResult<Json<Page<TimelineView>>> {
    let params = params(query)?;
    let page = page_request(
        params.get("limit").map(String::as_str),
        params.get("cursor").map(String::as_str),
        |c| match c {
            Cursor::Seq(seq) => Some(seq),
            _ => None,
        },
    )?;
    let record = visible(&ctx, &caller, &path(id)?).await?;
    let rows = ctx
        .store
        .timeline(&record.workflow_id, page.after.unwrap_or(0), page.limit + 1)
        .await?;
    Ok(Json(Page::from_probe(
        rows,
        page.limit,
        |e| Cursor::Seq(e.seq),
        TimelineView::from,
    )))
}

/// `GET /v1/workflows/{id}/steps/{step}/attempts`, oldest first.
pub(super) async fn attempts<S: ContextStore>(
    State(ctx): State<Ctx<S>>,
    Caller(caller): Caller,
    ids: Result<Path<(String, String)>, PathRejection>,
    query: Params,
) -> ApiResult<Json<Page<AttemptView>>> {
    let params = params(query)?;
    let page = page_request(
        params.get("limit").map(String::as_str),
        params.get("cursor").map(String::as_str),
        |c| match c {
            Cursor::Attempt(n) => Some(n),
            _ => None,
        },
    )?;
    let (id, step) = path(ids)?;
    let record = visible(&ctx, &caller, &id).await?;
    let steps = ctx.store.steps(&record.workflow_id).await?;
    if !steps.iter().any(|s| s.step == step) {
        let known: Vec<&str> = steps.iter().map(|s| s.step.as_str()).collect();
        return Err(ApiError::not_found(format!(
            "workflow {} has no step `{}`; its steps are: {}",
            record.workflow_id,
            quote(&step),
            known.join(", ")
        )));
    }
    let rows = ctx
        .store
        .attempts(
            &record.workflow_id,
            &step,
            page.after.unwrap_or(0),
            page.limit + 1,
        )
        .await?;
    Ok(Json(Page::from_probe(
        rows,
        page.limit,
        |a| Cursor::Attempt(a.number),
        AttemptView::from,
    )))
}

/// `GET /v1/workflows?state=&workflow=&limit=&cursor=`, newest first.
pub(super) async fn list<S: ContextStore>(
    State(ctx): State<Ctx<S>>,
    Caller(caller): Caller,
    query: Params,
) -> ApiResult<Json<Page<SummaryView>>> {
    let params = params(query)?;
    let page = page_request(
        params.get("limit").map(String::as_str),
        params.get("cursor").map(String::as_str),
        |c| match c {
            Cursor::Workflow(at, id) => Some((at, id)),
            _ => None,
        },
    )?;
    let state = match params.get("state").filter(|s| !s.is_empty()) {
        None => None,
        Some(text) => Some(text.parse::<WorkflowState>().map_err(|_| {
            let expected: Vec<&str> = WorkflowState::ALL.iter().map(|s| s.as_str()).collect();
            ApiError::invalid_parameter(
                "state",
                text,
                &format!("it must be one of: {}", expected.join(", ")),
            )
        })?),
    };
    let filter = WorkflowFilter {
        subject: (caller.role != Role::Operator).then(|| caller.subject.clone()),
        state,
        workflow: params.get("workflow").filter(|w| !w.is_empty()).cloned(),
        before: page.after,
        limit: page.limit + 1,
    };
    let mut rows = ctx.store.list_workflows(&filter).await?;
    let more = rows.len() > page.limit as usize;
    rows.truncate(page.limit as usize);
    let next_cursor = rows
        .last()
        .filter(|_| more)
        .map(|r| Cursor::Workflow(r.created_at, r.workflow_id.clone()).encode());
    let mut data = Vec::with_capacity(rows.len());
    for record in &rows {
        let def = definition(&ctx, record).await;
        let steps = ctx.store.steps(&record.workflow_id).await?;
        data.push(summary_view(record, def.as_ref().map(|d| &d.def), &steps));
    }
    Ok(Json(Page { data, next_cursor }))
}
