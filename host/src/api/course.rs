//! Changing a workflow's course over HTTP: `POST /v1/workflows/{id}/cancel` and `GET
//! /v1/workflows/{id}/cancellation`.
//!
//! The decision and its application are [`crate::operator::cancel`]'s and the store's; this
//! handler reads the key and the body into a [`CancelOrder`] and renders the answer:
//! `202` for the cancellation this request created, `200` for the one the workflow already
//! had (pressing twice acts once), `409 invalid_transition` for a refusal.

use super::auth::Caller;
use super::error::{ApiError, ApiResult, ErrorCode};
use super::intents::{key_from_headers, read_body};
use super::{ContextStore, Ctx};
use crate::intent::WorkflowId;
use crate::operator::{CancelOrder, CancelResult, cancel};
use crate::view::CancellationView;
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
