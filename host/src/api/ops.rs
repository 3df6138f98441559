//! Operations: `GET /healthz` (the process answers), `GET /readyz` (the store answers and
//! the supervised tasks run) and `GET /metrics` (Prometheus text; operators on the API's
//! listener, anyone who reaches the metrics listener).

use super::Ctx;
use super::auth::Caller;
use super::error::{ApiError, ApiResult, ErrorCode};
use crate::access::Role;
use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use std::time::Duration;

/// Longest a readiness check waits for the store.
const STORE_CHECK: Duration = Duration::from_secs(2);

/// The content type of the Prometheus text (OpenMetrics) format.
const METRICS_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

pub(super) async fn healthz() -> Json<serde_json::Value> {
    Json(json!({"status": "ok"}))
}

pub(super) async fn readyz<S: crate::store::MetricsStore>(State(ctx): State<Ctx<S>>) -> Response {
    let mut reasons = ctx.health.problems();
    let store = match tokio::time::timeout(STORE_CHECK, ctx.store.ping()).await {
        Ok(Ok(())) => "ok".to_string(),
        Ok(Err(e)) => {
            // The driver's text (addresses, users, database names) is for the host's log,
            // not for whoever can reach an unauthenticated health check.
            tracing::warn!("readiness check: the store does not answer: {e}");
            "the store does not answer; the host's log says why".to_string()
        }
        Err(_) => format!(
            "the store does not answer: no reply within {} s",
            STORE_CHECK.as_secs()
        ),
    };
    if store != "ok" {
        reasons.push(store.clone());
    }
    let status = if reasons.is_empty() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let body = json!({
        "ready": reasons.is_empty(),
        "store": store,
        "tasks": ctx.health.running(),
        "reasons": reasons,
    });
    (status, Json(body)).into_response()
}

/// `GET /metrics` on the API's listener: operators only.
pub(super) async fn metrics<S: crate::store::MetricsStore>(
    State(ctx): State<Ctx<S>>,
    Caller(caller): Caller,
) -> ApiResult<Response> {
    if !caller.has(Role::Operator) {
        return Err(ApiError::new(
            ErrorCode::Forbidden,
            "metrics are read by operators; use an operator token, or scrape the metrics listener (`metrics_listen`)",
        ));
    }
    scrape(&ctx).await
}

/// `GET /metrics` on the metrics listener, which only scrapers reach.
pub(super) async fn open_metrics<S: crate::store::MetricsStore>(
    State(ctx): State<Ctx<S>>,
) -> ApiResult<Response> {
    scrape(&ctx).await
}

async fn scrape<S: crate::store::MetricsStore>(ctx: &Ctx<S>) -> ApiResult<Response> {
    let now = ctx.clock_now();
    let snapshot = ctx.store.snapshot(now).await.map_err(ApiError::from)?;
    let text = ctx.metrics.render(&snapshot, now);
    Ok(([(header::CONTENT_TYPE, METRICS_TYPE)], text).into_response())
}
