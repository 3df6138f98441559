//! Changing a workflow's course over HTTP: `POST …/cancel` and `GET …/cancellation`,
//! `POST …/revisions` and `GET …/revisions`, `POST …/replacement`.
//!
//! The decisions and their application are [`crate::operator`]'s and the store's; these
//! handlers read the key and the body into an order and render the answer. A cancel answers
//! `202` for the cancellation this request created, `200` for the one the workflow already
//! had (pressing twice acts once); a revision `201`, or `409 revision_refused` pointing to
//! the replacement; a replacement `201` for the new workflow, `200` for the one there
//! already is (a workflow has at most one).

use super::auth::Caller;
use super::error::{ApiError, ApiResult, ErrorCode};
use super::intents::{key_from_headers, read_body};
use super::{ContextStore, Ctx};
use crate::clock::Clock;
use crate::intent::{WorkflowId, canonicalize};
use crate::operator::{CancelOrder, CancelResult, ReviseOrder, ReviseResult, cancel, revise};
use crate::store::{
    ActionAnswer, ActionScope, AdmitOutcome, AdmitRequest, KeyScope, StoredRefusal,
};
use crate::view::{CancellationView, RevisionView};
use axum::Json;
use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

fn invalid(message: String, pointer: &str) -> ApiError {
    ApiError::new(ErrorCode::InvalidRequest, message)
        .with_details(vec![json!({"pointer": pointer})])
}

/// The fields of a JSON object body; an empty body is an empty object.
pub(super) fn object(bytes: &[u8]) -> ApiResult<serde_json::Map<String, Value>> {
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
    match value {
        Value::Object(fields) => Ok(fields),
        _ => Err(invalid("the body must be a JSON object".into(), "")),
    }
}

fn order(bytes: &[u8]) -> ApiResult<CancelOrder> {
    let fields = object(bytes)?;
    let reason = match fields.get("reason") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.as_str()),
        Some(_) => return Err(invalid("`reason` must be a string".into(), "/reason")),
    };
    let withdraw = match fields.get("withdraw") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            return Err(invalid(
                "`withdraw` must be true or false".into(),
                "/withdraw",
            ));
        }
    };
    CancelOrder::new(reason, withdraw).map_err(|e| invalid(e.message, &format!("/{}", e.field)))
}

/// `POST /v1/workflows/{id}/cancel`.
pub(super) async fn cancel_workflow<S: ContextStore>(
    State(ctx): State<Ctx<S>>,
    Caller(caller): Caller,
    id: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    let id = id
        .map(|Path(p)| p)
        .map_err(|e| ApiError::not_found(format!("{e}; check the path")))?;
    let key = key_from_headers(&headers)?;
    let bytes = read_body(&headers, body, ctx.limits.max_body_bytes).await?;
    let order = order(&bytes)?;
    Ok(match cancel(&ctx, &caller, &id, order, key).await? {
        CancelResult::Created(c) => {
            (StatusCode::ACCEPTED, Json(CancellationView::new(&c))).into_response()
        }
        CancelResult::Existing(c) => {
            (StatusCode::OK, Json(CancellationView::new(&c))).into_response()
        }
        CancelResult::Refused(refusal) => {
            ApiError::new(ErrorCode::InvalidTransition, refusal.message).into_response()
        }
    })
}

/// `GET /v1/workflows/{id}/cancellation`: the cancellation and its progress.
pub(super) async fn cancellation<S: ContextStore>(
    State(ctx): State<Ctx<S>>,
    Caller(caller): Caller,
    id: Result<Path<String>, PathRejection>,
) -> ApiResult<Json<CancellationView>> {
    let id = id
        .map(|Path(p)| p)
        .map_err(|e| ApiError::not_found(format!("{e}; check the path")))?;
    let record = super::workflows::visible(&ctx, &caller, &id).await?;
    let Some(c) = ctx.store.cancellation(&WorkflowId(id.clone())).await? else {
        return Err(ApiError::not_found(format!(
            "workflow {id} has no cancellation; ask for one with POST /v1/workflows/{id}/cancel"
        )));
    };
    let steps = ctx.store.steps(&record.workflow_id).await?;
    let receipts = ctx.store.receipts(&record.workflow_id).await?;
    Ok(Json(CancellationView::with_progress(
        &c, &record, &steps, &receipts,
    )))
}

/// A refusal as the API answers it: `revision_refused` links to the replacement.
fn refusal_error(id: &str, r: StoredRefusal) -> ApiError {
    if r.code == "revision_refused" {
        ApiError::new(ErrorCode::RevisionRefused, r.message)
            .with_details(r.details)
            .with_links(json!({"replacement": format!("/v1/workflows/{id}/replacement")}))
    } else {
        ApiError::new(ErrorCode::InvalidTransition, r.message).with_details(r.details)
    }
}

fn text_field<'a>(
    fields: &'a serde_json::Map<String, Value>,
    name: &str,
) -> ApiResult<Option<&'a str>> {
    match fields.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.as_str())),
        Some(_) => Err(invalid(
            format!("`{name}` must be a string"),
            &format!("/{name}"),
        )),
    }
}

/// `POST /v1/workflows/{id}/revisions`.
pub(super) async fn revise_workflow<S: ContextStore>(
    State(ctx): State<Ctx<S>>,
    Caller(caller): Caller,
    id: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    let id = id
        .map(|Path(p)| p)
        .map_err(|e| ApiError::not_found(format!("{e}; check the path")))?;
    let key = key_from_headers(&headers)?;
    let bytes = read_body(&headers, body, ctx.limits.max_body_bytes).await?;
    let fields = object(&bytes)?;
    let order = ReviseOrder::new(fields.get("input").cloned(), text_field(&fields, "reason")?)
        .map_err(|e| invalid(e.message, &format!("/{}", e.field)))?;
    Ok(match revise(&ctx, &caller, &id, order, key).await? {
        ReviseResult::Applied(r) => {
            (StatusCode::CREATED, Json(RevisionView::from(&r))).into_response()
        }
        ReviseResult::Refused(r) => refusal_error(&id, r).into_response(),
    })
}

/// `GET /v1/workflows/{id}/revisions`, oldest first.
pub(super) async fn revisions<S: ContextStore>(
    State(ctx): State<Ctx<S>>,
    Caller(caller): Caller,
    id: Result<Path<String>, PathRejection>,
) -> ApiResult<Json<Value>> {
    let id = id
        .map(|Path(p)| p)
        .map_err(|e| ApiError::not_found(format!("{e}; check the path")))?;
    let record = super::workflows::visible(&ctx, &caller, &id).await?;
    let data: Vec<RevisionView> = ctx
        .store
        .revisions(&record.workflow_id)
        .await?
        .iter()
        .map(RevisionView::from)
        .collect();
    Ok(Json(json!({"data": data, "next_cursor": null})))
}

/// The action name a replacement's key is scoped by.
const REPLACE: &str = "replace";

/// `POST /v1/workflows/{id}/replacement`: a new workflow of the same definition for the
/// original's subject, under the key `replacement:<original id>`, linked both ways; with
/// `cancel_original`, the original is cancelled as `POST …/cancel` would.
pub(super) async fn replace_workflow<S: ContextStore>(
    State(ctx): State<Ctx<S>>,
    Caller(caller): Caller,
    id: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    let id = id
        .map(|Path(p)| p)
        .map_err(|e| ApiError::not_found(format!("{e}; check the path")))?;
    let key = key_from_headers(&headers)?;
    let bytes = read_body(&headers, body, ctx.limits.max_body_bytes).await?;
    let fields = object(&bytes)?;
    let input = match fields.get("input") {
        Some(v @ Value::Object(_)) => v.clone(),
        _ => {
            return Err(invalid(
                "`input` is required and must be a JSON object: the corrected input".into(),
                "/input",
            ));
        }
    };
    let reason = match text_field(&fields, "reason")? {
        Some(r) if !r.trim().is_empty() => r.to_string(),
        _ => {
            return Err(invalid(
                "`reason` is required and must not be empty: say why the request is replaced"
                    .into(),
                "/reason",
            ));
        }
    };
    let cancel_original = match fields.get("cancel_original") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            return Err(invalid(
                "`cancel_original` must be true or false".into(),
                "/cancel_original",
            ));
        }
    };
    let original = super::workflows::visible(&ctx, &caller, &id).await?;
    let digest = canonicalize(
        &json!({"input": input, "reason": reason, "cancel_original": cancel_original}),
    )
    .map_err(ApiError::internal)?
    .digest;
    let scope = ActionScope {
        subject: caller.subject.clone(),
        workflow_id: original.workflow_id.clone(),
        step: String::new(),
        action: REPLACE.into(),
        key,
    };
    // The same key and body answer as before; another body is a conflict.
    if let Some(known) = ctx.store.action(&scope).await? {
        if known.request_digest != digest {
            return Err(crate::operator::DeskError::KeyConflict(Box::new(scope)).into());
        }
        if let Some(ActionAnswer::Applied(text)) = known.answer {
            let stored: Value = serde_json::from_str(&text).map_err(ApiError::internal)?;
            let status = StatusCode::from_u16(stored["status"].as_u64().unwrap_or(200) as u16)
                .unwrap_or(StatusCode::OK);
            return Ok((status, Json(stored["body"].clone())).into_response());
        }
    }
    let canonical = canonicalize(&input).map_err(|e| {
        ApiError::new(
            ErrorCode::InvalidRequest,
            format!("{e}; send plain JSON values"),
        )
        .with_details(vec![json!({"pointer": "/input"})])
    })?;
    let derived = KeyScope {
        subject: original.subject.clone(),
        workflow: original.workflow.clone(),
        key: format!("replacement:{}", original.workflow_id),
    };
    let now = ctx.clock.now_ms();
    let (status, record) = match &original.replaced_by {
        // At most one replacement: another request answers with it.
        Some(existing) => (
            StatusCode::OK,
            ctx.store
                .workflow(existing)
                .await?
                .ok_or_else(|| ApiError::internal(format!("replacement {existing} is missing")))?,
        ),
        None => {
            let new = super::intents::new_workflow(
                &ctx,
                &derived,
                &input,
                &canonical,
                now,
                Some(original.workflow_id.clone()),
            )
            .await??;
            let request = AdmitRequest {
                scope: derived.clone(),
                input: canonical,
                now,
                create: Some(new),
            };
            match ctx.store.admit(request).await? {
                AdmitOutcome::Created(record) => {
                    ctx.wake.notify_one();
                    (StatusCode::CREATED, record)
                }
                AdmitOutcome::Replayed(record) => (StatusCode::OK, record),
                AdmitOutcome::Conflict { workflow_id } => (
                    StatusCode::OK,
                    ctx.store.workflow(&workflow_id).await?.ok_or_else(|| {
                        ApiError::internal(format!("replacement {workflow_id} is missing"))
                    })?,
                ),
                AdmitOutcome::KeyFree => {
                    return Err(ApiError::internal(
                        "the store created nothing although an intent was given",
                    ));
                }
            }
        }
    };
    let cancellation = if cancel_original {
        let order = CancelOrder::new(Some(&reason), false)
            .map_err(|e| invalid(e.message, &format!("/{}", e.field)))?;
        let key = format!("replacement:{}", original.workflow_id);
        Some(match cancel(&ctx, &caller, &id, order, key).await {
            Ok(CancelResult::Created(c) | CancelResult::Existing(c)) => {
                serde_json::to_value(CancellationView::new(&c)).map_err(ApiError::internal)?
            }
            Ok(CancelResult::Refused(r)) => json!({"refused": r.message}),
            // Another body under the derived key: the original's cancellation was asked for
            // with another reason before; it stands as it is.
            Err(crate::operator::DeskError::KeyConflict(_)) => Value::Null,
            Err(e) => return Err(e.into()),
        })
    } else {
        None
    };
    let mut body = serde_json::to_value(crate::view::IntentView::new(
        &record,
        Some(status == StatusCode::OK),
    ))
    .map_err(ApiError::internal)?;
    body["replaces"] = json!(original.workflow_id);
    if let Some(c) = cancellation {
        body["cancellation"] = c;
    }
    let stored = json!({"status": status.as_u16(), "body": body});
    ctx.store
        .remember(
            scope,
            digest,
            ActionAnswer::Applied(stored.to_string()),
            now,
        )
        .await?;
    let location =
        axum::http::HeaderValue::from_str(&format!("/v1/workflows/{}", record.workflow_id))
            .map_err(ApiError::internal)?;
    let mut response = (status, Json(body)).into_response();
    response
        .headers_mut()
        .insert(axum::http::header::LOCATION, location);
    Ok(response)
}
