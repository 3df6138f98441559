//! Test controls: `POST /v1/_test/clock` moves the host's clock forward, and
//! `GET /v1/_test/ticks` counts the host's completed ticks.
//!
//! The route exists only when the host runs with test controls (the router does not add
//! it otherwise, so it answers `404`). Leases, backoff, key retention and deadlines all
//! read the same clock, so tests move time instead of sleeping. Advancing is not
//! idempotent and does not use an `Idempotency-Key`: it is a test instrument, not a
//! business request.

use super::Ctx;
use super::auth::Caller;
use super::error::{ApiError, ApiResult, ErrorCode, quote};
use crate::access::Role;
use crate::scheduler::TickCounts;
use crate::view::rfc3339;
use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use serde_json::{Value, json};

const SHAPE: &str = r#"send {"advance_ms": <milliseconds, a whole number ≥ 0>}"#;

/// `POST /v1/_test/clock` `{"advance_ms": N}` → `{"now": "<RFC 3339>", "now_ms": N}`.
pub(super) async fn advance_clock<S>(
    State(ctx): State<Ctx<S>>,
    Caller(caller): Caller,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    if !caller.has(Role::Operator) {
        return Err(ApiError::new(
            ErrorCode::Forbidden,
            "moving the clock needs the `operator` role; use an operator's token",
        ));
    }
    let value: Value = crate::intent::parse_json(&body).map_err(|e| {
        ApiError::new(
            ErrorCode::InvalidJson,
            format!("the body is not valid JSON: {e}; {SHAPE}"),
        )
    })?;
    let advance = value
        .as_object()
        .filter(|o| o.len() == 1)
        .and_then(|o| o.get("advance_ms"))
        .and_then(Value::as_u64)
        .ok_or_else(|| {
            ApiError::new(
                ErrorCode::InvalidRequest,
                format!("the body is `{}`; {SHAPE}", quote(&value.to_string())),
            )
        })?;
    // Times are stored as signed 64-bit milliseconds: a clock past the year 2286 would
    // not be a time any more.
    const LATEST: u64 = 10_000_000_000_000;
    if ctx.clock.now_ms().saturating_add(advance) > LATEST {
        return Err(ApiError::new(
            ErrorCode::InvalidRequest,
            format!(
                "advancing by {advance} ms would move the clock past {}; advance by less",
                rfc3339(LATEST)
            ),
        ));
    }
    ctx.clock.advance(advance);
    // Timers may have come due: let the scheduler look now.
    ctx.wake.notify_one();
    let now = ctx.clock.now_ms();
    Ok(Json(json!({"now": rfc3339(now), "now_ms": now})))
}

/// `GET /v1/_test/ticks` → `{"claim": N, "recovery": N, "registry": N, "lease_renewal": N,
/// "retention": N, "checker": N, "notifier": N}`: completed ticks, so a test can wait for the
/// host to look before asserting an absence.
pub(super) async fn ticks<S>(
    State(ctx): State<Ctx<S>>,
    Caller(caller): Caller,
) -> ApiResult<Json<TickCounts>> {
    if !caller.has(Role::Operator) {
        return Err(ApiError::new(
            ErrorCode::Forbidden,
            "reading the tick counts needs the `operator` role; use an operator's token",
        ));
    }
    Ok(Json(ctx.ticks.snapshot()))
}
