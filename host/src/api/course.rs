//! Changing a workflow's course over HTTP: `POST …/cancel` and `GET …/cancellation`,
//! `POST …/revisions` and `GET …/revisions`, `POST …/replacement`, `POST …/migration` and
//! `GET …/migrations`.
//!
//! The decisions and their application are [`crate::operator`]'s and the store's; these
//! handlers read the key and the body into an order and render the answer. A cancel answers
//! `202` for the cancellation this request created, `200` for the one the workflow already
//! had (pressing twice acts once); a revision `201`, or `409 revision_refused` pointing to
//! the replacement; a replacement `201` for the new workflow, `200` for the one there
//! already is (a workflow has at most one); a migration `201` with its record, `200` with
//! what a dry run would do, or `409 migration_refused` naming each reason.

use super::Ctx;
use super::auth::Caller;
use super::error::{ApiError, ApiResult, ErrorCode};
use super::intents::{key_from_headers, read_body};
use crate::intent::WorkflowId;
use crate::operator::{
    CancelOrder, CancelResult, MigrateOrder, MigrateResult, ReplaceOrder, ReviseOrder,
    ReviseResult, cancel, migrate, replace, revise,
};
use crate::store::StoredRefusal;
use crate::view::{CancellationView, MigrationPlanView, MigrationView, RevisionView};
use axum::Json;
use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// The workflow id in the path.
pub(super) fn workflow_path(id: Result<Path<String>, PathRejection>) -> ApiResult<String> {
    id.map(|Path(p)| p)
        .map_err(|e| ApiError::not_found(format!("{e}; check the path")))
}

fn invalid(message: String, pointer: &str) -> ApiError {
    ApiError::new(ErrorCode::InvalidRequest, message)
        .with_details(vec![json!({"pointer": pointer})])
}

/// The fields of a JSON object body; an empty body is an empty object.
pub(super) fn object(bytes: &[u8]) -> ApiResult<serde_json::Map<String, Value>> {
    let value: Value = if bytes.iter().all(u8::is_ascii_whitespace) {
        json!({})
    } else {
        crate::intent::parse_json(bytes).map_err(|e| {
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
pub(super) async fn cancel_workflow<
    S: crate::store::DefinitionStore + crate::store::ReadStore + crate::store::CourseStore,
>(
    State(ctx): State<Ctx<S>>,
    Caller(caller): Caller,
    id: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    let id = workflow_path(id)?;
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
pub(super) async fn cancellation<S: crate::store::ReadStore + crate::store::CourseStore>(
    State(ctx): State<Ctx<S>>,
    Caller(caller): Caller,
    id: Result<Path<String>, PathRejection>,
) -> ApiResult<Json<CancellationView>> {
    let id = workflow_path(id)?;
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
pub(super) async fn revise_workflow<
    S: crate::store::DefinitionStore
        + crate::store::ReadStore
        + crate::store::OperatorStore
        + crate::store::CourseStore,
>(
    State(ctx): State<Ctx<S>>,
    Caller(caller): Caller,
    id: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    let id = workflow_path(id)?;
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
pub(super) async fn revisions<S: crate::store::CourseStore + crate::store::ReadStore>(
    State(ctx): State<Ctx<S>>,
    Caller(caller): Caller,
    id: Result<Path<String>, PathRejection>,
) -> ApiResult<Json<Value>> {
    let id = workflow_path(id)?;
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

/// `POST /v1/workflows/{id}/replacement`: `201` with the new workflow, `200` with the one
/// there already is.
pub(super) async fn replace_workflow<
    S: crate::store::DefinitionStore
        + crate::store::ReadStore
        + crate::store::OperatorStore
        + crate::store::AdmissionStore
        + crate::store::CourseStore,
>(
    State(ctx): State<Ctx<S>>,
    Caller(caller): Caller,
    id: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    let id = workflow_path(id)?;
    let key = key_from_headers(&headers)?;
    let bytes = read_body(&headers, body, ctx.limits.max_body_bytes).await?;
    let fields = object(&bytes)?;
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
    let order = ReplaceOrder::new(
        fields.get("input").cloned(),
        text_field(&fields, "reason")?,
        cancel_original,
    )
    .map_err(|e| invalid(e.message, &format!("/{}", e.field)))?;
    let replaced = replace(&ctx, &caller, &id, order, key).await?;
    let status = if replaced.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    let location = HeaderValue::from_str(&format!("/v1/workflows/{}", replaced.workflow_id))
        .map_err(ApiError::internal)?;
    let mut response = (status, Json(replaced.body)).into_response();
    response.headers_mut().insert(header::LOCATION, location);
    Ok(response)
}

/// The plan's `steps`: old step id → new step id, or null to drop the step.
fn plan_steps(
    fields: &serde_json::Map<String, Value>,
) -> ApiResult<std::collections::BTreeMap<String, Option<String>>> {
    let mut steps = std::collections::BTreeMap::new();
    match fields.get("steps") {
        None | Some(Value::Null) => {}
        Some(Value::Object(map)) => {
            for (from, to) in map {
                let to = match to {
                    Value::Null => None,
                    Value::String(s) => Some(s.clone()),
                    _ => {
                        return Err(invalid(
                            format!(
                                "`steps.{from}` must be the new step id (a string) or null to drop the step"
                            ),
                            &format!("/steps/{from}"),
                        ));
                    }
                };
                steps.insert(from.clone(), to);
            }
        }
        Some(_) => {
            return Err(invalid(
                "`steps` must be an object: old step id → new step id, or null to drop it".into(),
                "/steps",
            ));
        }
    }
    Ok(steps)
}

/// `POST /v1/workflows/{id}/migration`: `201` with the migration, `200` with what a dry run
/// (`"dry_run": true`, no key needed) would do, `409 migration_refused` naming each reason.
pub(super) async fn migrate_workflow<S: crate::context::ContextStore>(
    State(ctx): State<Ctx<S>>,
    Caller(caller): Caller,
    id: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    let id = workflow_path(id)?;
    let bytes = read_body(&headers, body, ctx.limits.max_body_bytes).await?;
    let fields = object(&bytes)?;
    let dry_run = match fields.get("dry_run") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            return Err(invalid(
                "`dry_run` must be true or false".into(),
                "/dry_run",
            ));
        }
    };
    let key = if dry_run {
        None
    } else {
        Some(key_from_headers(&headers)?)
    };
    let to_version = match fields.get("to_version") {
        None | Some(Value::Null) => None,
        Some(v) => Some(v.as_u64().ok_or_else(|| {
            invalid(
                "`to_version` must be a definition version number, e.g. 2".into(),
                "/to_version",
            )
        })?),
    };
    let order = MigrateOrder::new(
        to_version,
        plan_steps(&fields)?,
        text_field(&fields, "reason")?,
        dry_run,
    )
    .map_err(|e| invalid(e.message, &format!("/{}", e.field)))?;
    Ok(match migrate(&ctx, &caller, &id, order, key).await? {
        MigrateResult::Applied(m) => {
            (StatusCode::CREATED, Json(MigrationView::from(&m))).into_response()
        }
        MigrateResult::WouldApply(plan) => (
            StatusCode::OK,
            Json(json!({
                "dry_run": true,
                "workflow_id": id,
                "would": "migrate",
                "plan": MigrationPlanView::from(&plan),
            })),
        )
            .into_response(),
        MigrateResult::Refused(r) if dry_run => (
            StatusCode::OK,
            Json(json!({
                "dry_run": true,
                "workflow_id": id,
                "would": "refuse",
                "message": r.message,
                "reasons": r.details,
            })),
        )
            .into_response(),
        MigrateResult::Refused(r) => ApiError::new(ErrorCode::MigrationRefused, r.message)
            .with_details(r.details)
            .into_response(),
    })
}

/// `GET /v1/workflows/{id}/migrations`, oldest first.
pub(super) async fn migrations<S: crate::store::CourseStore + crate::store::ReadStore>(
    State(ctx): State<Ctx<S>>,
    Caller(caller): Caller,
    id: Result<Path<String>, PathRejection>,
) -> ApiResult<Json<Value>> {
    let id = workflow_path(id)?;
    let record = super::workflows::visible(&ctx, &caller, &id).await?;
    let data: Vec<MigrationView> = ctx
        .store
        .migrations(&record.workflow_id)
        .await?
        .iter()
        .map(MigrationView::from)
        .collect();
    Ok(Json(json!({"data": data, "next_cursor": null})))
}
