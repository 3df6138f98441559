//! `POST /v1/workflows/{id}/budget`: an operator adds to a workflow's limits, recorded with
//! its author and reason; the answer is the workflow's `budget` block afterwards.

use super::Ctx;
use super::auth::Caller;
use super::course::{object, workflow_path};
use super::error::{ApiError, ApiResult, ErrorCode};
use super::intents::{key_from_headers, read_body};
use crate::budget::BudgetView;
use crate::operator::{AMOUNTS, ExtendOrder, extend_budget};
use axum::Json;
use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use serde_json::{Value, json};

fn invalid(message: String, pointer: &str) -> ApiError {
    ApiError::new(ErrorCode::InvalidRequest, message)
        .with_details(vec![json!({"pointer": pointer})])
}

/// `{"add": {...}, "reason"}` read into an order: every amount a non-negative integer.
fn order(bytes: &[u8]) -> ApiResult<ExtendOrder> {
    let fields = object(bytes)?;
    let add = match fields.get("add") {
        Some(Value::Object(add)) => add,
        _ => {
            return Err(invalid(
                format!(
                    "`add` is required and must be an object of amounts, any of {}",
                    AMOUNTS.join(", ")
                ),
                "/add",
            ));
        }
    };
    let mut amounts = Vec::with_capacity(add.len());
    for (key, value) in add {
        let n = value.as_u64().ok_or_else(|| {
            invalid(
                format!("`add.{key}` must be a non-negative integer"),
                &format!("/add/{key}"),
            )
        })?;
        amounts.push((key.as_str(), n));
    }
    let reason = match fields.get("reason") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.as_str()),
        Some(_) => return Err(invalid("`reason` must be a string".into(), "/reason")),
    };
    ExtendOrder::new(amounts, reason).map_err(|e| invalid(e.message, &format!("/{}", e.field)))
}

/// `POST /v1/workflows/{id}/budget`.
pub(super) async fn extend<
    S: crate::store::DefinitionStore + crate::store::ReadStore + crate::store::BudgetStore,
>(
    State(ctx): State<Ctx<S>>,
    Caller(caller): Caller,
    id: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Json<BudgetView>> {
    let id = workflow_path(id)?;
    let key = key_from_headers(&headers)?;
    let bytes = read_body(&headers, body, ctx.limits.max_body_bytes).await?;
    let order = order(&bytes)?;
    Ok(Json(extend_budget(&ctx, &caller, &id, order, key).await?))
}
