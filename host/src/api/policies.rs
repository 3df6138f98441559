//! Policy versions over HTTP: `POST /v1/policies` deploys a document (a deployer; the
//! accepting host enforces it before it answers, every other host within a second) and
//! `GET /v1/policies` lists the versions, newest first (operators and deployers).

use super::Ctx;
use super::auth::{Caller, require};
use super::error::{ApiError, ApiResult, ErrorCode};
use super::intents::{key_from_headers, read_body};
use super::keyed;
use crate::access::Role;
use crate::intent::{canonicalize, sha256_digest};
use crate::policy::PolicyDoc;
use crate::store::{NewPolicy, StoredPolicy};
use crate::view::rfc3339;
use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::{Value, json};

fn summary(p: &StoredPolicy) -> Value {
    json!({
        "version": p.version,
        "digest": p.digest,
        "author": p.author,
        "deployed_at": rfc3339(p.deployed_at),
    })
}

/// `POST /v1/policies` with `{"document": "<TOML>"}`.
pub(super) async fn deploy<
    S: crate::store::OperatorStore + crate::store::CourseStore + crate::store::PolicyStore,
>(
    State(ctx): State<Ctx<S>>,
    Caller(caller): Caller,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    require(&caller, &[Role::Deployer], "deploying a policy")?;
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
    let request_digest = canonicalize(&json!({"document": document}))
        .map_err(ApiError::internal)?
        .digest;
    let fresh = match keyed::lookup(&ctx, &caller, "deploy_policy", key, request_digest).await? {
        Ok(answer) => return Ok(answer),
        Err(fresh) => fresh,
    };
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
    keyed::keep(&ctx, fresh, StatusCode::CREATED, summary(&stored)).await
}

/// `GET /v1/policies`, newest first, each with its document.
pub(super) async fn list<S: crate::store::PolicyStore>(
    State(ctx): State<Ctx<S>>,
    Caller(caller): Caller,
) -> ApiResult<Json<Value>> {
    require(
        &caller,
        &[Role::Operator, Role::Deployer],
        "reading the policy versions",
    )?;
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
