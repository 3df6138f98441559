//! Reading workflows: the projection, its timeline, a step's attempts, and the list.
//!
//! A client sees only workflows of its own subject; for anything else it gets the same
//! `404` as for a workflow that does not exist. Each workflow is projected with its own
//! definition version; if that can no longer be read, the projection is still served
//! (labels fall back to step ids) and the problem is logged.

use super::Ctx;
use super::auth::Caller;
use super::error::{ApiError, ApiResult, ErrorCode, quote};
use super::pagination::{Cursor, Page, page_request};
use crate::access::{Principal, Role};
use crate::catalog::DeployedDef;
use crate::intent::{WorkflowId, WorkflowState};
use crate::store::{WorkflowFilter, WorkflowRecord};
use crate::view::{AttemptView, SummaryView, TimelineView, summary_view, workflow_view};
use axum::Json;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

pub(super) type Params = Result<Query<HashMap<String, String>>, QueryRejection>;

pub(super) fn params(query: Params) -> ApiResult<HashMap<String, String>> {
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
pub(super) async fn visible<S: crate::store::ReadStore>(
    ctx: &Ctx<S>,
    caller: &Principal,
    id: &str,
) -> ApiResult<WorkflowRecord> {
    super::auth::require(
        caller,
        &[Role::Client, Role::Operator],
        "reading a workflow",
    )?;
    let record = ctx.store.workflow(&WorkflowId(id.to_string())).await?;
    record.filter(|r| caller.can_see(&r.subject)).ok_or_else(|| {
        ApiError::not_found(format!(
            "there is no workflow `{}` that you can see; check the id (as returned in `workflow_id`)",
            quote(id)
        ))
    })
}

/// The workflow `id` if the caller may read it: as [`visible`] says, or as an approver of
/// one of its approval steps (an approver reads the workflows it may approve, only those).
pub(super) async fn readable<S: crate::store::ReadStore + crate::store::DefinitionStore>(
    ctx: &Ctx<S>,
    caller: &Principal,
    id: &str,
) -> ApiResult<WorkflowRecord> {
    let seen = visible(ctx, caller, id).await;
    if seen.is_ok() || !caller.has(Role::Approver) {
        return seen;
    }
    let Some(record) = ctx.store.workflow(&WorkflowId(id.to_string())).await? else {
        return seen;
    };
    let approves = definition(ctx, &record).await.is_some_and(|d| {
        d.def
            .steps
            .iter()
            .filter_map(|s| s.approval.as_ref())
            .any(|a| a.approvers.is_empty() || a.approvers.contains(&caller.subject.0))
    });
    if approves { Ok(record) } else { seen }
}

/// The workflow's own definition version, or `None` (logged) if it cannot be read.
async fn definition<S: crate::store::DefinitionStore>(
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

/// A revision from `If-None-Match` (`"12"`, `W/"12"` or a list of them): the first that
/// parses.
fn if_none_match(headers: &HeaderMap) -> Option<u64> {
    headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|tag| {
            let tag = tag.trim();
            let tag = tag.strip_prefix("W/").unwrap_or(tag);
            tag.trim_matches('"').parse::<u64>().ok()
        })
        .next()
}

/// A whole-number query parameter within `range`.
fn number_param(
    params: &HashMap<String, String>,
    name: &str,
    range: std::ops::RangeInclusive<u64>,
) -> ApiResult<Option<u64>> {
    let Some(text) = params.get(name).filter(|t| !t.is_empty()) else {
        return Ok(None);
    };
    match text.parse::<u64>() {
        Ok(n) if range.contains(&n) => Ok(Some(n)),
        _ => Err(ApiError::invalid_parameter(
            name,
            text,
            &format!(
                "it must be a whole number from {} to {}",
                range.start(),
                range.end()
            ),
        )),
    }
}

/// `GET /v1/workflows/{id}[?wait=<1–60 s>&after=<revision>]`: the projection, with its
/// revision as `ETag`. With `wait`, answers as soon as the revision exceeds `after` (by
/// default the revision the caller's `If-None-Match` names, else the current one), or
/// with the current projection when the wait ends. `If-None-Match` naming the current
/// revision answers `304`.
pub(super) async fn projection<
    S: crate::store::DefinitionStore
        + crate::store::ReadStore
        + crate::store::ComponentStore
        + crate::store::ApprovalStore,
>(
    State(ctx): State<Ctx<S>>,
    Caller(caller): Caller,
    id: Result<Path<String>, PathRejection>,
    query: Params,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let params = params(query)?;
    let wait = number_param(&params, "wait", 1..=60)?;
    let after = number_param(&params, "after", 0..=u64::MAX)?;
    let seen = if_none_match(&headers);
    let id = path(id)?;
    let mut record = readable(&ctx, &caller, &id).await?;
    if let Some(wait) = wait {
        let after = after.or(seen).unwrap_or(record.revision);
        if let Some(moved) = ctx
            .workflow_after(&record.workflow_id, after, Duration::from_secs(wait))
            .await?
        {
            record = moved;
        }
    }
    let etag = HeaderValue::from_str(&format!("\"{}\"", record.revision))
        .map_err(|e| ApiError::internal(e.to_string()))?;
    if seen == Some(record.revision) {
        let mut response = StatusCode::NOT_MODIFIED.into_response();
        response.headers_mut().insert(header::ETAG, etag);
        return Ok(response);
    }
    let def = definition(&ctx, &record).await;
    let steps = ctx.store.steps(&record.workflow_id).await?;
    let receipts = ctx.store.receipts(&record.workflow_id).await?;
    let mut view = workflow_view(&record, def.as_ref().map(|d| &d.def), &steps, &receipts);
    if let Some(def) = &def {
        with_contracts(&ctx.store, &mut view, &def.def, &steps).await?;
        if def.def.steps.iter().any(|s| s.approval.is_some()) {
            let approvals = ctx.store.approvals(&record.workflow_id).await?;
            crate::view::ApprovalView::fill(&mut view, &approvals);
        }
    }
    let mut response = Json(view).into_response();
    response.headers_mut().insert(header::ETAG, etag);
    Ok(response)
}

/// Each adapter step that ran gets the contract of its latest attempt's version and that
/// version's latest verdict: what recovery of the step relies on, and whether it was proven.
async fn with_contracts<S: crate::store::ReadStore + crate::store::ComponentStore>(
    store: &S,
    view: &mut crate::view::WorkflowView,
    def: &crate::workflow::WorkflowDef,
    steps: &[crate::store::StepRecord],
) -> ApiResult<()> {
    let ran: Vec<&crate::store::StepRecord> = steps
        .iter()
        .filter(|s| s.attempts > 0)
        .filter(|s| {
            def.step(&s.step)
                .is_some_and(|d| d.kind == crate::workflow::StepKind::Adapter)
        })
        .collect();
    if ran.is_empty() {
        return Ok(());
    }
    let verified = store.verifications().await?;
    for step in ran {
        let latest = store
            .attempts(&step.workflow_id, &step.step, step.attempts - 1, 1)
            .await?;
        let Some(provenance) = latest.into_iter().rev().find_map(|a| a.provenance) else {
            continue;
        };
        let verdict = verified
            .iter()
            .find(|v| v.digest == provenance.component_digest);
        if let Some(shown) = view.steps.iter_mut().find(|v| v.id == step.step) {
            shown.contract = Some(crate::view::ContractView::of(&provenance, verdict));
        }
    }
    Ok(())
}

/// `GET /v1/workflows/{id}/timeline`, oldest first.
pub(super) async fn timeline<S: crate::store::ReadStore>(
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

/// `GET /v1/workflows/{id}/steps/{step}/items/{item_key}/attempts`: the attempts of one
/// item of a batch step (its row `<step>[<item key>]`), oldest first.
pub(super) async fn item_attempts<S: crate::store::ReadStore>(
    state: State<Ctx<S>>,
    caller: Caller,
    ids: Result<Path<(String, String, String)>, PathRejection>,
    query: Params,
) -> ApiResult<Json<Page<AttemptView>>> {
    let (id, step, key) = path(ids)?;
    let row = crate::workflow::item_identity(&step, &key);
    attempts(state, caller, Ok(Path((id, row))), query).await
}

/// `GET /v1/workflows/{id}/steps/{step}/attempts`, oldest first.
pub(super) async fn attempts<S: crate::store::ReadStore>(
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

/// `GET /v1/workflows/{id}/steps/{step}/items?state=&limit=&cursor=`: a batch step's
/// items in the list's order, those in `state` only when it is given.
pub(super) async fn items<S: crate::store::ReadStore>(
    State(ctx): State<Ctx<S>>,
    Caller(caller): Caller,
    ids: Result<Path<(String, String)>, PathRejection>,
    query: Params,
) -> ApiResult<Json<Page<crate::view::ItemView>>> {
    let params = params(query)?;
    let page = page_request(
        params.get("limit").map(String::as_str),
        params.get("cursor").map(String::as_str),
        |c| match c {
            Cursor::Item(n) => Some(n),
            _ => None,
        },
    )?;
    let state = match params.get("state").filter(|s| !s.is_empty()) {
        None => None,
        Some(text) => Some(
            text.parse::<crate::intent::StepState>()
                .map_err(|e| ApiError::invalid_parameter("state", text, &e.to_string()))?,
        ),
    };
    let (id, step) = path(ids)?;
    let record = visible(&ctx, &caller, &id).await?;
    let steps = ctx.store.steps(&record.workflow_id).await?;
    if !steps.iter().any(|s| s.step == step && s.items.is_some()) {
        let batches: Vec<&str> = steps
            .iter()
            .filter(|s| s.items.is_some())
            .map(|s| s.step.as_str())
            .collect();
        return Err(ApiError::not_found(format!(
            "workflow {} has no batch step `{}` whose items exist; {}",
            record.workflow_id,
            quote(&step),
            if batches.is_empty() {
                "none of its steps has items (yet)".to_string()
            } else {
                format!("its batch steps with items are: {}", batches.join(", "))
            }
        )));
    }
    let receipts = ctx.store.receipts(&record.workflow_id).await?;
    let start = page.after.map_or(0, |after| after + 1);
    let rows: Vec<crate::view::ItemView> = crate::view::ItemView::of(&step, &steps, &receipts)
        .into_iter()
        .filter(|i| i.index >= start && state.is_none_or(|s| i.state == s))
        .take(page.limit as usize + 1)
        .collect();
    Ok(Json(Page::from_probe(
        rows,
        page.limit,
        |i| Cursor::Item(i.index),
        |i| i,
    )))
}

/// `GET /v1/workflows?state=&workflow=&limit=&cursor=`, newest first.
pub(super) async fn list<S: crate::store::DefinitionStore + crate::store::ReadStore>(
    State(ctx): State<Ctx<S>>,
    Caller(caller): Caller,
    query: Params,
) -> ApiResult<Json<Page<SummaryView>>> {
    super::auth::require(
        &caller,
        &[Role::Client, Role::Operator],
        "listing workflows",
    )?;
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
        subject: (!caller.has(Role::Operator)).then(|| caller.subject.clone()),
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
