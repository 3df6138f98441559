//! The adapter registry over HTTP: list versions and their contracts, deploy (stage) a
//! component, activate a version, roll back. The same operations as `docket adapter
//! deploy|activate|rollback|list`; every change is recorded with its author.

use super::Ctx;
use super::auth::{Caller, require};
use super::error::{ApiError, ApiResult, ErrorCode, quote};
use super::intents::{key_from_headers, read_body};
use super::keyed;
use crate::access::Role;
use crate::catalog::Components;
use crate::catalog::registry::{self, RegistryError};
use crate::store::ActiveTarget;
use crate::view::rfc3339;
use axum::Json;
use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::{Value, json};
use std::sync::Arc;

/// Components are larger than intents: the upload limit of `POST /v1/adapters`.
pub const MAX_COMPONENT_BYTES: usize = 16 << 20;

fn components<S>(ctx: &Ctx<S>) -> ApiResult<&Arc<Components>> {
    ctx.components.as_ref().ok_or_else(|| {
        ApiError::new(
            ErrorCode::Unavailable,
            "this host runs no components, so it has no registry to change; ask a host that runs steps",
        )
    })
}

/// `GET /v1/adapters`: every stored version by name, which one is active, the declared
/// contracts, and the registry's latest changes.
pub(super) async fn list<S: crate::store::ComponentStore>(
    State(ctx): State<Ctx<S>>,
    Caller(caller): Caller,
) -> ApiResult<Json<Value>> {
    // It names subjects, hosts and secret names: not for clients.
    require(
        &caller,
        &[Role::Operator, Role::Deployer],
        "reading the adapter registry",
    )?;
    let stored = ctx.store.stored_components().await?;
    let active = ctx.store.active_components().await?;
    let loaded = ctx.components.as_ref().map(|c| c.all()).unwrap_or_default();
    let gates = ctx.store.adapter_states(ctx.clock_now()).await?;
    let data: Vec<Value> = registry::by_name(&stored)
        .into_iter()
        .map(|(name, versions)| {
            let active = active.iter().find(|a| a.name == name);
            let gate = gates.iter().find(|g| g.adapter == name);
            json!({
                "name": name,
                "active_version": active.map(|a| a.version.clone()),
                "in_flight": gate.map_or(0, |g| g.in_flight),
                "paused": gate.and_then(|g| g.pause.as_ref()).map(|p| json!({
                    "until": rfc3339(p.until),
                    "cause": p.cause,
                    "reason": p.reason,
                    "paused_by": p.host,
                    "paused_at": rfc3339(p.at),
                })),
                "versions": versions.iter().map(|c| {
                    let declared = loaded.iter().find(|l| l.digest == c.digest).map(|l| json!(l.kind));
                    json!({
                        "version": c.version,
                        "digest": c.digest,
                        "world": c.kind,
                        "size_bytes": c.size_bytes,
                        "deployed_at": rfc3339(c.registered_at),
                        "state": if active.is_some_and(|a| a.digest == c.digest) { "active" } else { "staged" },
                        "declared": declared,
                    })
                }).collect::<Vec<_>>(),
            })
        })
        .collect();
    let events = ctx.store.component_events(None, 100).await?;
    Ok(Json(json!({
        "data": data,
        "events": events.iter().map(|e| json!({
            "seq": e.seq,
            "name": e.name,
            "version": e.version,
            "digest": e.digest,
            "action": e.action,
            "author": e.author,
            "at": rfc3339(e.at),
        })).collect::<Vec<_>>(),
    })))
}

/// `POST /v1/adapters` with the component's bytes: checks it (it compiles, targets the
/// adapter or handler world, declares a sane contract, runs in every current step that
/// would choose it) and stores it as a staged version.
pub(super) async fn deploy<
    S: crate::store::DefinitionStore
        + crate::store::OperatorStore
        + crate::store::CourseStore
        + crate::store::ComponentStore,
>(
    State(ctx): State<Ctx<S>>,
    Caller(caller): Caller,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    require(&caller, &[Role::Deployer], "deploying a component")?;
    if !ctx.limits.api_uploads {
        return Err(ApiError::new(
            ErrorCode::Forbidden,
            "this host takes no component uploads over HTTP (api_uploads = false); deploy with `docket adapter deploy FILE.wasm` where the database is",
        ));
    }
    let components = components(&ctx)?;
    let key = key_from_headers(&headers)?;
    let Some(_compiling) = ctx.uploads.begin(&caller.subject.0) else {
        return Err(ApiError::new(
            ErrorCode::TooManyRequests,
            "another upload of yours is being compiled; send this one when it has been answered",
        ));
    };
    let bytes = read_body(&headers, body, MAX_COMPONENT_BYTES).await?;
    let digest = crate::intent::sha256_digest(&bytes);
    let fresh = match keyed::lookup(&ctx, &caller, "deploy_component", key, digest.clone()).await? {
        Ok(answer) => return Ok(answer),
        Err(fresh) => fresh,
    };
    // Checked without registering: refused bytes must never become runnable here, nor stay
    // compiled in memory or on disk.
    let already = components.runtime().is_loaded(&digest);
    let loaded = components.runtime().load(&bytes).await.map_err(|e| {
        ApiError::new(
            ErrorCode::InvalidRequest,
            format!("the body is not a component this host can run: {e}"),
        )
    })?;
    let definitions = ctx
        .deployments
        .all_latest()
        .await
        .map_err(ApiError::internal)?;
    let deployed = match registry::deploy(
        &ctx.store,
        loaded,
        bytes.to_vec(),
        &definitions,
        Some(components),
        caller.subject.0.clone(),
        ctx.clock_now(),
    )
    .await
    {
        Ok(deployed) => deployed,
        Err(refused) => {
            if !already {
                components.runtime().forget(&digest);
            }
            return Err(refused.into());
        }
    };
    let c = &deployed.component;
    let status = if deployed.added {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    let answer = json!({
        "name": c.name(),
        "version": c.version(),
        "digest": c.digest,
        "world": c.world_name(),
        "state": if deployed.active { "active" } else { "staged" },
        "declared": c.kind,
    });
    // A staged version is not kept in memory for having been uploaded: the registry loads
    // it from the database when it is activated or a step needs it (its compiled form
    // stays on disk, so that is quick).
    let (digest, label) = (c.digest.clone(), format!("{}@{}", c.name(), c.version()));
    let staged = !deployed.active;
    drop(deployed);
    if staged && !already && components.runtime().unload_if_unused(&digest, 0) {
        tracing::info!("{label} ({digest}) is staged: not kept loaded until it is needed");
    }
    keyed::keep(&ctx, fresh, status, answer).await
}

/// `POST /v1/adapters/{name}/activate` with `{"version": "2.0.0"}`, or
/// `POST /v1/adapters/{name}/rollback`.
pub(super) async fn change<
    S: crate::store::OperatorStore + crate::store::CourseStore + crate::store::ComponentStore,
>(
    State(ctx): State<Ctx<S>>,
    Caller(caller): Caller,
    path: Result<Path<(String, String)>, PathRejection>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    let (name, verb) = path
        .map(|Path(p)| p)
        .map_err(|e| ApiError::not_found(format!("{e}; check the path")))?;
    require(&caller, &[Role::Deployer], "changing the active version")?;
    let key = key_from_headers(&headers)?;
    let bytes = read_body(&headers, body, ctx.limits.max_body_bytes).await?;
    let request = crate::intent::sha256_digest(
        format!("{name}\n{verb}\n{}", String::from_utf8_lossy(&bytes)).as_bytes(),
    );
    let fresh = match keyed::lookup(&ctx, &caller, "change_adapter", key, request).await? {
        Ok(answer) => return Ok(answer),
        Err(fresh) => fresh,
    };
    let target = match verb.as_str() {
        "activate" => {
            let body = if bytes.iter().all(u8::is_ascii_whitespace) {
                Value::Null
            } else {
                crate::intent::parse_json(&bytes).map_err(|e| {
                    ApiError::new(
                        ErrorCode::InvalidJson,
                        format!(
                            "the body is not valid JSON: {e}; send the version to activate \
                             as {{\"version\": \"2.0.0\"}}"
                        ),
                    )
                })?
            };
            let version = body
                .get("version")
                .and_then(Value::as_str)
                .map(str::to_string)
                .ok_or_else(|| {
                    ApiError::new(
                        ErrorCode::InvalidRequest,
                        "send the version to activate as {\"version\": \"2.0.0\"}",
                    )
                })?;
            ActiveTarget::Digest(registry::find_version(&ctx.store, &name, &version).await?)
        }
        "rollback" => ActiveTarget::Previous,
        other => {
            return Err(ApiError::not_found(format!(
                "there is no adapter action `{}`; the actions are activate and rollback",
                quote(other)
            )));
        }
    };
    if let ActiveTarget::Digest(digest) = &target {
        // The version about to receive this host's grants: pinned and verified as asked.
        if let Some(components) = &ctx.components {
            components
                .policy()
                .check_pinned(&name, digest)
                .map_err(|e| ApiError::new(ErrorCode::InvalidTransition, e.to_string()))?;
        }
    }
    let outcome = registry::change(
        &ctx.store,
        &name,
        target,
        caller.subject.0.clone(),
        ctx.clock_now(),
    )
    .await?;
    // This host at once; the others within their registry poll.
    if let Some(components) = &ctx.components
        && let Err(e) = components.sync(&ctx.store).await
    {
        tracing::warn!("catching up with the registry failed: {e}");
    }
    let answer = json!({
        "name": name,
        "active_version": outcome.active.version,
        "digest": outcome.active.digest,
        "previous_digest": outcome.previous,
        "changed": outcome.changed,
    });
    keyed::keep(&ctx, fresh, StatusCode::OK, answer).await
}

impl From<RegistryError> for ApiError {
    fn from(e: RegistryError) -> Self {
        // Names and versions here may come from the client: quote them safely.
        let (code, e) = match e {
            RegistryError::Store(inner) => return inner.into(),
            e @ (RegistryError::UnusableContract { .. } | RegistryError::WouldNotRun(_)) => {
                (ErrorCode::InvalidRequest, e)
            }
            e @ RegistryError::VersionChanged { .. } => (ErrorCode::InvalidTransition, e),
            RegistryError::NoTarget { name, what } => (
                ErrorCode::InvalidTransition,
                RegistryError::NoTarget {
                    name: quote(&name),
                    what,
                },
            ),
            RegistryError::UnknownVersion {
                name,
                version,
                known,
            } => (
                ErrorCode::NotFound,
                RegistryError::UnknownVersion {
                    name: quote(&name),
                    version: quote(&version),
                    known,
                },
            ),
        };
        ApiError::new(code, e.to_string())
    }
}
