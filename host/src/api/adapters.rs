//! The adapter registry over HTTP: list versions and their contracts, deploy (stage) a
//! component, activate a version, roll back. The same operations as `docket adapter
//! deploy|activate|rollback|list`; every change is recorded with its author.

use super::error::{ApiError, ApiResult, ErrorCode, quote};
use super::intents::read_body;
use super::time::rfc3339;
use super::{ApiStore, Ctx};
use crate::api::auth::{Caller, Principal, Role};
use crate::runtime::ComponentKind;
use crate::scheduler::Components;
use crate::store::{ActiveChange, ActiveTarget, NewComponent, StoreError};
use crate::workflow::StepKind;
use axum::Json;
use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use std::sync::Arc;

/// Components are larger than intents: the upload limit of `POST /v1/adapters`.
pub const MAX_COMPONENT_BYTES: usize = 64 << 20;

fn components<S: ApiStore>(ctx: &Ctx<S>) -> ApiResult<&Arc<Components>> {
    ctx.components.as_ref().ok_or_else(|| {
        ApiError::new(
            ErrorCode::Unavailable,
            "this host runs no components, so it has no registry to change; ask a host that runs steps",
        )
    })
}

fn operator(caller: &Principal, what: &str) -> ApiResult<()> {
    if caller.role != Role::Operator {
        return Err(ApiError::new(
            ErrorCode::Forbidden,
            format!("{what} needs the operator role; use an operator token"),
        ));
    }
    Ok(())
}

/// `GET /v1/adapters`: every stored version by name, which one is active, the declared
/// contracts, and the registry's latest changes.
pub(super) async fn list<S: ApiStore>(
    State(ctx): State<Ctx<S>>,
    Caller(_caller): Caller,
) -> ApiResult<Json<Value>> {
    let stored = ctx.store.stored_components().await?;
    let active = ctx.store.active_components().await?;
    let loaded = ctx.components.as_ref().map(|c| c.all()).unwrap_or_default();
    let mut names: Vec<&str> = stored.iter().map(|c| c.name.as_str()).collect();
    names.dedup();
    names.sort();
    names.dedup();
    let data: Vec<Value> = names
        .iter()
        .map(|name| {
            let active = active.iter().find(|a| a.name == *name);
            let mut versions: Vec<_> = stored.iter().filter(|c| c.name == *name).collect();
            versions.sort_by(|a, b| {
                let parse = |v: &str| semver::Version::parse(v).ok();
                parse(&a.version).cmp(&parse(&b.version))
            });
            json!({
                "name": name,
                "active_version": active.map(|a| a.version.clone()),
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
/// adapter or handler world, declares a sane contract) and stores it as a staged version.
pub(super) async fn deploy<S: ApiStore>(
    State(ctx): State<Ctx<S>>,
    Caller(caller): Caller,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    operator(&caller, "deploying a component")?;
    let components = components(&ctx)?;
    let bytes = read_body(&headers, body, MAX_COMPONENT_BYTES).await?;
    let loaded = components.load_bytes(&bytes).await.map_err(|e| {
        ApiError::new(
            ErrorCode::InvalidRequest,
            format!("the body is not a component this host can run: {e}"),
        )
    })?;
    if let Some(contract) = loaded.contract() {
        contract.check().map_err(|e| {
            ApiError::new(
                ErrorCode::InvalidRequest,
                format!(
                    "`{}@{}` declares an unusable contract: {e}",
                    loaded.name(),
                    loaded.version()
                ),
            )
        })?;
    }
    // Every step of a current definition that would run this version must be able to:
    // its effective grant (the step's request within the operator's allowance) has to
    // cover the component's imports and declared needs.
    let version = semver::Version::parse(loaded.version()).ok();
    let definitions = ctx
        .deployments
        .all_latest()
        .await
        .map_err(ApiError::internal)?;
    for deployed in definitions {
        let def = &deployed.def;
        for step in def.steps.iter().filter(|s| {
            s.component == loaded.name()
                && version.as_ref().is_some_and(|v| s.version_req.matches(v))
        }) {
            let world_fits = matches!(
                (step.kind, &loaded.kind),
                (StepKind::Adapter, ComponentKind::Adapter { .. })
                    | (StepKind::Handler, ComponentKind::Handler { .. })
            );
            let refused = if world_fits {
                components
                    .prepare(&loaded, step)
                    .err()
                    .map(|e| e.to_string())
            } else {
                Some(format!(
                    "the step is {} step and this is {} component",
                    if step.kind == StepKind::Adapter {
                        "an adapter"
                    } else {
                        "a handler"
                    },
                    if loaded.contract().is_some() {
                        "an adapter"
                    } else {
                        "a handler"
                    },
                ))
            };
            if let Some(reason) = refused {
                return Err(ApiError::new(
                    ErrorCode::InvalidRequest,
                    format!(
                        "`{}@{}` would not run in step `{}` of workflow `{}` version {}, whose requirement `{}` it meets: {reason}. Grant what it needs in the definition (and the operator config), or give it a version outside that requirement",
                        loaded.name(),
                        loaded.version(),
                        step.id.as_str(),
                        def.name,
                        def.version,
                        step.version_req
                    ),
                ));
            }
        }
    }
    if let Some(other) = ctx.store.stored_components().await?.into_iter().find(|c| {
        c.name == loaded.name() && c.version == loaded.version() && c.digest != loaded.digest
    }) {
        return Err(ApiError::new(
            ErrorCode::InvalidTransition,
            format!(
                "`{}@{}` is already deployed with digest {}, and these bytes have digest {}; a deployed version never changes: give the changed component a new version",
                loaded.name(),
                loaded.version(),
                other.digest,
                loaded.digest
            ),
        ));
    }
    let added = ctx
        .store
        .store_component(NewComponent {
            digest: loaded.digest.clone(),
            name: loaded.name().to_string(),
            version: loaded.version().to_string(),
            kind: loaded.world_name().to_string(),
            bytes: bytes.to_vec(),
            registered_at: ctx.clock_now(),
            author: caller.subject.0.clone(),
        })
        .await?;
    let active = ctx.store.active_components().await?;
    let state = if active.iter().any(|a| a.digest == loaded.digest) {
        "active"
    } else {
        "staged"
    };
    let status = if added {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((
        status,
        Json(json!({
            "name": loaded.name(),
            "version": loaded.version(),
            "digest": loaded.digest,
            "world": loaded.world_name(),
            "state": state,
            "declared": loaded.kind,
        })),
    )
        .into_response())
}

/// `POST /v1/adapters/{name}/activate` with `{"version": "2.0.0"}`, or
/// `POST /v1/adapters/{name}/rollback`.
pub(super) async fn change<S: ApiStore>(
    State(ctx): State<Ctx<S>>,
    Caller(caller): Caller,
    path: Result<Path<(String, String)>, PathRejection>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Json<Value>> {
    let (name, verb) = path
        .map(|Path(p)| p)
        .map_err(|e| ApiError::not_found(format!("{e}; check the path")))?;
    operator(&caller, "changing the active version")?;
    let target =
        match verb.as_str() {
            "activate" => {
                let bytes = read_body(&headers, body, ctx.limits.max_body_bytes).await?;
                let version = serde_json::from_slice::<Value>(&bytes)
                    .ok()
                    .and_then(|v| v.get("version").and_then(Value::as_str).map(str::to_string))
                    .ok_or_else(|| {
                        ApiError::new(
                            ErrorCode::InvalidRequest,
                            "send the version to activate as {\"version\": \"2.0.0\"}",
                        )
                    })?;
                let stored = ctx.store.stored_components().await?;
                let found = stored
                .iter()
                .find(|c| c.name == name && c.version == version)
                .ok_or_else(|| {
                    let known: Vec<&str> = stored
                        .iter()
                        .filter(|c| c.name == name)
                        .map(|c| c.version.as_str())
                        .collect();
                    ApiError::not_found(format!(
                        "there is no deployed version {} of `{}` (deployed: {}); deploy it first",
                        quote(&version),
                        quote(&name),
                        if known.is_empty() { "none".to_string() } else { known.join(", ") }
                    ))
                })?;
                ActiveTarget::Digest(found.digest.clone())
            }
            "rollback" => ActiveTarget::Previous,
            other => {
                return Err(ApiError::not_found(format!(
                    "there is no adapter action `{}`; the actions are activate and rollback",
                    quote(other)
                )));
            }
        };
    let outcome = ctx
        .store
        .set_active(ActiveChange {
            name: name.clone(),
            target,
            author: caller.subject.0.clone(),
            now: ctx.clock_now(),
        })
        .await
        .map_err(|e| match e {
            StoreError::NotFound(what) => ApiError::new(
                ErrorCode::InvalidTransition,
                format!("cannot change `{}`: no {what}", quote(&name)),
            ),
            other => other.into(),
        })?;
    // This host at once; the others within their registry poll.
    if let Some(components) = &ctx.components
        && let Err(e) = components.sync(&ctx.store).await
    {
        tracing::warn!("catching up with the registry failed: {e}");
    }
    Ok(Json(json!({
        "name": name,
        "active_version": outcome.active.version,
        "digest": outcome.active.digest,
        "previous_digest": outcome.previous,
        "changed": outcome.changed,
    })))
}
