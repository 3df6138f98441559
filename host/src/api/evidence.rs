//! Evidence from providers over HTTP: `POST /v1/evidence/{adapter}` receives a provider's
//! delivery (a webhook) and `GET /v1/evidence` lists the observations read from them.
//!
//! The delivery endpoint is the provider's, not a client's: it takes no bearer token, no
//! `Idempotency-Key` and is not throttled by failed authentications. Its authentication is
//! the Standard Webhooks signature made with the adapter's `webhook_secret`: an unsigned or
//! forged body is `401` and kept nowhere. A verified one is kept once per `webhook-id` and
//! answered `202` at once; a host's evidence round reads it with the adapter's `observe`
//! (so a slow or hostile adapter never holds up the provider's request).

use super::Ctx;
use super::auth::Caller;
use super::error::{ApiError, ApiResult, ErrorCode, quote};
use super::intents::read_body;
use super::pagination::{Cursor, Page, page_request};
use super::workflows::{Params, params};
use crate::access::Role;
use crate::contract::Inbound;
use crate::intent::WorkflowId;
use crate::store::{EvidenceFilter, EvidenceStore, NewDelivery};
use crate::view::ObservationView;
use axum::Json;
use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};

/// The largest delivery a provider may post: events are small, and a body is kept whole.
pub const MAX_DELIVERY_BYTES: usize = 256 * 1024;

/// Headers never kept with a delivery: they may carry someone's credentials.
const NOT_KEPT: [&str; 3] = ["authorization", "cookie", "proxy-authorization"];

/// `POST /v1/evidence/{adapter}` → `202 {"adapter", "webhook_id", "replayed"}`.
pub(super) async fn receive<S: EvidenceStore>(
    State(ctx): State<Ctx<S>>,
    adapter: Result<Path<String>, PathRejection>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    let Path(adapter) = adapter.map_err(|e| ApiError::not_found(format!("{e}; check the path")))?;
    let key = ctx
        .components
        .as_ref()
        .and_then(|c| c.policy().adapter(&adapter).webhook_key)
        .ok_or_else(|| {
            ApiError::not_found(format!(
                "adapter `{0}` takes no deliveries on this host: give it a signing secret in docket.toml ([adapters.{0}] webhook_secret = \"<secret name>\")",
                quote(&adapter)
            ))
        })?;
    let bytes = read_body(&headers, body, MAX_DELIVERY_BYTES).await?;
    let now = ctx.clock_now();
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let webhook_id = crate::notify::verify(&key.0, header, &bytes, now / 1000).map_err(|e| {
        tracing::debug!(adapter = %adapter, "a delivery was refused: {e}");
        ApiError::new(
            ErrorCode::Unauthorized,
            format!(
                "the delivery is not signed with adapter `{}`'s webhook secret: {e}; the provider signs each delivery per Standard Webhooks (webhook-id, webhook-timestamp, webhook-signature)",
                quote(&adapter)
            ),
        )
    })?;
    let kept_headers = headers
        .iter()
        .filter(|(name, _)| !NOT_KEPT.contains(&name.as_str()))
        .filter_map(|(name, value)| Some((name.as_str().to_string(), value.to_str().ok()?.into())))
        .collect();
    let new = ctx
        .store
        .receive_delivery(NewDelivery {
            adapter: adapter.clone(),
            webhook_id: webhook_id.clone(),
            inbound: Inbound {
                method: method.to_string(),
                path: uri.path().to_string(),
                headers: kept_headers,
                body: bytes.to_vec(),
            },
            received_at: now,
        })
        .await?;
    if new {
        ctx.evidence_wake.notify_one();
    }
    let answer = serde_json::json!({
        "adapter": adapter,
        "webhook_id": webhook_id,
        "replayed": !new,
    });
    Ok((StatusCode::ACCEPTED, Json(answer)).into_response())
}

/// `GET /v1/evidence?matched=&adapter=&workflow_id=` (operators): kept observations,
/// oldest first; `matched=false` is the inbox of what matched no step or could not be
/// read.
pub(super) async fn list<S: EvidenceStore>(
    State(ctx): State<Ctx<S>>,
    Caller(caller): Caller,
    query: Params,
) -> ApiResult<Json<Page<ObservationView>>> {
    super::auth::require(&caller, &[Role::Operator], "reading providers' evidence")?;
    let params = params(query)?;
    let page = page_request(
        params.get("limit").map(String::as_str),
        params.get("cursor").map(String::as_str),
        |c| match c {
            Cursor::Observation(id) => Some(id),
            _ => None,
        },
    )?;
    let matched = match params.get("matched").map(String::as_str) {
        None | Some("") => None,
        Some("true") => Some(true),
        Some("false") => Some(false),
        Some(other) => {
            return Err(ApiError::invalid_parameter(
                "matched",
                other,
                "it must be `true` or `false`",
            ));
        }
    };
    let text = |name: &str| params.get(name).filter(|v| !v.is_empty()).cloned();
    let rows = ctx
        .store
        .observations(EvidenceFilter {
            matched,
            adapter: text("adapter"),
            workflow_id: text("workflow_id").map(WorkflowId),
            after: page.after,
            limit: page.limit + 1,
        })
        .await?;
    Ok(Json(Page::from_probe(
        rows,
        page.limit,
        |o| Cursor::Observation(o.observation_id.0.clone()),
        ObservationView::from,
    )))
}
