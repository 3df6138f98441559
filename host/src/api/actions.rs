//! `POST /v1/workflows/{id}/steps/{step}/{action}`: the operator actions as JSON.
//!
//! The decision and its application are [`crate::operator`]'s; this handler only reads the
//! path, the key and the body into a typed [`Order`], and renders the result: the step's
//! projection (`200`), a refusal (`409 invalid_transition` with its message), or the error.

use super::Ctx;
use super::error::{ApiError, ApiResult, ErrorCode, quote};
use super::intents::{key_from_headers, read_body};
use crate::api::auth::Caller;
use crate::operator::{Action, ActionResult, DeskError, Order, Target, perform};
use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// The order a JSON body asks for.
fn order(action: Action, bytes: &[u8]) -> ApiResult<Order> {
    let fields = &super::course::object(bytes)?;
    // A field given with another type than text is named, not taken as missing.
    let text = |field: &str| -> ApiResult<Option<&str>> {
        match fields.get(field) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.as_str())),
            Some(_) => Err(invalid(
                format!("`{field}` must be a string"),
                &format!("/{field}"),
            )),
        }
    };
    let made = match action {
        Action::Query => Ok(Order::Query),
        Action::Retry => Ok(Order::Retry),
        Action::Resolve => Order::resolve(
            text("outcome")?,
            text("evidence")?,
            text("reason")?,
            text("external_reference")?,
            fields.get("output").filter(|v| !v.is_null()).cloned(),
        ),
        Action::Escalate => Order::escalate(text("note")?),
        Action::Compensate => Order::compensate(text("reason")?),
        Action::Exception => Order::exception(text("reason")?, text("evidence")?),
        Action::Approve => Order::approve(text("digest")?, text("note")?),
        Action::Reject => Order::reject(text("reason")?),
    };
    made.map_err(|e| invalid(e.message, &format!("/{}", e.field)))
}

fn invalid(message: String, pointer: &str) -> ApiError {
    ApiError::new(ErrorCode::InvalidRequest, message)
        .with_details(vec![json!({"pointer": pointer})])
}

fn json_response(status: StatusCode, body: String) -> Response {
    let mut response = (status, body).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

impl From<DeskError> for ApiError {
    fn from(e: DeskError) -> Self {
        match e {
            DeskError::NotFound(message) => ApiError::not_found(message),
            DeskError::Forbidden | DeskError::NoWorkflowRole | DeskError::NotApprover(_) => {
                ApiError::new(ErrorCode::Forbidden, e.to_string())
            }
            DeskError::KeyConflict(ref scope) => {
                let workflow_id = scope.workflow_id.clone();
                ApiError::new(ErrorCode::KeyConflict, e.to_string())
                    .with_details(vec![json!({"workflow_id": workflow_id})])
            }
            DeskError::InvalidInput { message, details } => {
                ApiError::new(ErrorCode::InvalidInput, message).with_details(details)
            }
            DeskError::Store(store) => store.into(),
            DeskError::Internal(message) => ApiError::internal(message),
        }
    }
}

/// `POST /v1/workflows/{id}/steps/{step}/{action}`.
pub(super) async fn act<
    S: crate::store::DefinitionStore
        + crate::store::ReadStore
        + crate::store::ComponentStore
        + crate::store::OperatorStore
        + crate::store::ApprovalStore
        + crate::store::CourseStore
        + 'static,
>(
    State(ctx): State<Ctx<S>>,
    Caller(caller): Caller,
    ids: Result<Path<(String, String, String)>, PathRejection>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    let (workflow_id, step, action_text) = ids
        .map(|Path(p)| p)
        .map_err(|e| ApiError::not_found(format!("{e}; check the path")))?;
    act_on(
        &ctx,
        &caller,
        workflow_id,
        step,
        &action_text,
        &headers,
        body,
    )
    .await
}

/// `POST /v1/workflows/{id}/steps/{step}/items/{item_key}/{action}`: an action on one item
/// of a batch step, with the same rules as on a step (the item is the row
/// `<step>[<item key>]`).
pub(super) async fn act_on_item<
    S: crate::store::DefinitionStore
        + crate::store::ReadStore
        + crate::store::ComponentStore
        + crate::store::OperatorStore
        + crate::store::ApprovalStore
        + crate::store::CourseStore
        + 'static,
>(
    State(ctx): State<Ctx<S>>,
    Caller(caller): Caller,
    ids: Result<Path<(String, String, String, String)>, PathRejection>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    let (workflow_id, step, item_key, action_text) = ids
        .map(|Path(p)| p)
        .map_err(|e| ApiError::not_found(format!("{e}; check the path")))?;
    let item = crate::workflow::item_identity(&step, &item_key);
    act_on(
        &ctx,
        &caller,
        workflow_id,
        item,
        &action_text,
        &headers,
        body,
    )
    .await
}

async fn act_on<
    S: crate::store::DefinitionStore
        + crate::store::ReadStore
        + crate::store::ComponentStore
        + crate::store::OperatorStore
        + crate::store::ApprovalStore
        + crate::store::CourseStore
        + 'static,
>(
    ctx: &Ctx<S>,
    caller: &crate::access::Principal,
    workflow_id: String,
    step: String,
    action_text: &str,
    headers: &HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    let action = Action::parse(action_text).ok_or_else(|| {
        ApiError::not_found(format!(
            "there is no step action `{}`; the actions are query, retry, resolve, escalate, compensate, exception, approve and reject",
            quote(action_text)
        ))
    })?;
    let key = key_from_headers(headers)?;
    let bytes = read_body(headers, body, ctx.limits.max_body_bytes).await?;
    let order = order(action, &bytes)?;
    let target = Target { workflow_id, step };
    Ok(match perform(ctx, caller, target, order, key).await? {
        ActionResult::Applied(view) => json_response(StatusCode::OK, view),
        ActionResult::Refused(refusal) if refusal.code == "consequence_changed" => {
            ApiError::new(ErrorCode::ConsequenceChanged, refusal.message)
                .with_details(refusal.details)
                .into_response()
        }
        ActionResult::Refused(refusal) => {
            ApiError::new(ErrorCode::InvalidTransition, refusal.message).into_response()
        }
    })
}
