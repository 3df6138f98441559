//! Policy versions over HTTP: `POST /v1/policies` deploys a document (an operator; the
//! accepting host enforces it before it answers, every other host within a second) and
//! `GET /v1/policies` lists the versions, newest first.

use super::auth::Caller;
use super::error::{ApiError, ApiResult, ErrorCode};
use super::intents::{key_from_headers, read_body};
use super::{ContextStore, Ctx};
use crate::access::Role;
use crate::clock::Clock;
use crate::intent::{WorkflowId, canonicalize, sha256_digest};
use crate::policy::PolicyDoc;
use crate::store::{ActionAnswer, ActionScope, NewPolicy, StoredPolicy};
use crate::view::rfc3339;
use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

fn operator(caller: &crate::access::Principal) -> ApiResult<()> {
    if caller.role == Role::Operator {
        Ok(())
    } else {
        Err(ApiError::new(
            ErrorCode::Forbidden,
            "policies are deployed and read by operators; use an operator token",
        ))
    }
}

fn summary(p: &StoredPolicy) -> Value {
    json!({
        "version": p.version,
        "digest": p.digest,
        "author": p.author,
        "deployed_at": rfc3339(p.deployed_at),
    })
}

/// `POST /v1/policies` with `{"document": "<TOML>"}`.
pub(super) async fn deploy<S: ContextStore>(
    State(ctx): State<Ctx<S>>,
    Caller(caller): Caller,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    operator(&caller)?;
    let key = key_from_headers(&headers)?;
    let bytes = read_body(&headers, body, ctx.limits.max_body_bytes).await?;
    let fields = super::course::object(&bytes)?;
    let Some(Value::String(document)) = fields.get("document") else {
        return Err(ApiError::new(
            ErrorCode::InvalidRequest,
            "`document` is required: the policy's TOML text as a string",
        )
        .with_details(vec![json!({"pointer": "/document"})]));
    };
    let digest = sha256_digest(document.as_bytes());
    let scope = ActionScope {
        subject: caller.subject.clone(),
        workflow_id: WorkflowId(String::new()),
        step: String::new(),
        action: "deploy_policy".into(),
        key,
    };
    let request_digest = canonicalize(&json!({"document": document}))
        .map_err(ApiError::internal)?
        .digest;
    if let Some(known) = ctx.store.action(&scope).await? {
        if known.request_digest != request_digest {
            return Err(crate::operator::DeskError::KeyConflict(Box::new(scope)).into());
        }
        if let Some(ActionAnswer::Applied(text)) = known.answer {
            let body: Value = serde_json::from_str(&text).map_err(ApiError::internal)?;
            return Ok((StatusCode::CREATED, Json(body)).into_response());
        }
    }
    if let Err(problems) = PolicyDoc::parse(document) {
        return Err(ApiError::new(
            ErrorCode::InvalidDocument,
            format!(
                "the policy document is invalid: {}; fix it where `details` point",
                problems
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
        )
        .with_details(
            problems
                .iter()
                .map(|p| json!({"line": p.line, "column": p.column, "message": p.message}))
                .collect(),
        ));
    }
    let now = ctx.clock.now_ms();
    let (stored, _) = ctx
        .store
        .deploy_policy(NewPolicy {
            digest,
            document: document.clone(),
            author: caller.subject.0.clone(),
            now,
        })
        .await?;
    // This host enforces it before it answers; steps an older version blocked are judged
    // again.
    if let Some(components) = &ctx.components
        && matches!(components.governance().take(&stored), Ok(true))
    {
        ctx.store.release_policy_blocks(stored.version, now).await?;
        ctx.wake.notify_one();
    }
    let body = summary(&stored);
    ctx.store
        .remember(
            scope,
            request_digest,
            ActionAnswer::Applied(body.to_string()),
            now,
        )
        .await?;
    Ok((StatusCode::CREATED, Json(body)).into_response())
}

/// `GET /v1/policies`, newest first, each with its document.
pub(super) async fn list<S: ContextStore>(
    State(ctx): State<Ctx<S>>,
    Caller(caller): Caller,
) -> ApiResult<Json<Value>> {
    operator(&caller)?;
    let data: Vec<Value> = ctx
        .store
        .policies()
        .await?
        .iter()
        .map(|p| {
            let mut v = summary(p);
            v["document"] = json!(p.document);
            v
        })
        .collect();
    let in_force = ctx
        .components
        .as_ref()
        .map_or(0, |c| c.governance().in_force().version);
    Ok(Json(
        json!({"data": data, "next_cursor": null, "in_force_here": in_force}),
    ))
}
