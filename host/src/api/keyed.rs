//! `POST`s that change the host's configuration (adapter versions, policies) under an
//! `Idempotency-Key`, as every `POST` under `/v1/` is: the key is looked up first — the same
//! key and body get the stored answer, another body `409 key_conflict` — and only then does
//! the request act; its answer is kept under the key.

use super::Ctx;
use super::error::{ApiError, ApiResult};
use crate::access::Principal;
use crate::intent::WorkflowId;
use crate::store::{ActionAnswer, ActionScope};
use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// A request whose key was new: what [`keep`] stores its answer under.
pub(super) struct Fresh {
    scope: ActionScope,
    digest: String,
}

/// The stored answer for `key`, if it has one for this request; `Err` with `409` if the
/// key was used for another request.
pub(super) async fn lookup<S: crate::store::OperatorStore>(
    ctx: &Ctx<S>,
    caller: &Principal,
    action: &str,
    key: String,
    request_digest: String,
) -> ApiResult<Result<Response, Fresh>> {
    let scope = ActionScope {
        subject: caller.subject.clone(),
        workflow_id: WorkflowId(String::new()),
        step: String::new(),
        action: action.to_string(),
        key,
    };
    match ctx.store.action(&scope).await? {
        Some(known) if known.request_digest != request_digest => {
            Err(crate::operator::DeskError::KeyConflict(Box::new(scope)).into())
        }
        Some(known) => match known.answer {
            Some(ActionAnswer::Applied(text)) => Ok(Ok(stored(&text)?)),
            // Refusals are not kept: the request is judged again, as it would be.
            _ => Ok(Err(Fresh {
                scope,
                digest: request_digest,
            })),
        },
        None => Ok(Err(Fresh {
            scope,
            digest: request_digest,
        })),
    }
}

/// Keeps `status` and `body` under the fresh key; answers with what the key holds (a
/// request that raced this one under the same key may have stored first).
pub(super) async fn keep<S: crate::store::CourseStore>(
    ctx: &Ctx<S>,
    fresh: Fresh,
    status: StatusCode,
    body: Value,
) -> ApiResult<Response> {
    let text = json!({"status": status.as_u16(), "body": body}).to_string();
    let held = ctx
        .store
        .remember(
            fresh.scope,
            fresh.digest,
            ActionAnswer::Applied(text),
            ctx.clock_now(),
        )
        .await?;
    match held.answer {
        Some(ActionAnswer::Applied(text)) => stored(&text),
        _ => Ok((status, Json(body)).into_response()),
    }
}

/// A stored answer as a response. Answers kept before statuses were stored are a bare
/// `201` body.
fn stored(text: &str) -> ApiResult<Response> {
    let value: Value = serde_json::from_str(text).map_err(ApiError::internal)?;
    let (status, body) = match (
        value.get("status").and_then(Value::as_u64),
        value.get("body"),
    ) {
        (Some(status), Some(body)) => (
            StatusCode::from_u16(status as u16).map_err(ApiError::internal)?,
            body.clone(),
        ),
        _ => (StatusCode::CREATED, value),
    };
    Ok((status, Json(body)).into_response())
}
