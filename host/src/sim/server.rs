//! The HTTP side of the simulator: axum routes over [`ProviderSim`], and a connection loop
//! that serves them with hyper.
//!
//! Handlers hold the world's lock only for one synchronous call into `state.rs`, never across
//! an await. "Lost response after commit" works like this: the create (or cancel) handler
//! commits, then returns a response carrying the [`LoseResponse`] marker; the per-connection
//! service sees the marker and fails instead of answering, and hyper then closes the
//! connection without writing anything. The caller sees a transport error, exactly like a
//! crash between commit and answer.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::{Service, service_fn};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tracing::{debug, info, warn};

use super::ProviderSim;
use super::state::{BatchOutcome, CancelOutcome, CreateOutcome, CreateRequest};

/// Marks a response that must not be sent: the connection is closed instead.
#[derive(Debug, Clone, Copy)]
struct LoseResponse;

/// The error the connection service returns for a [`LoseResponse`]; hyper answers a service
/// error by closing the connection.
#[derive(Debug, thiserror::Error)]
#[error("response deliberately lost after commit")]
struct LostResponse;

/// The protocol's routes, with the simulator as state.
pub(crate) fn router(sim: ProviderSim) -> Router {
    let mut routes = Router::new()
        .route("/v1/deliveries", post(create).get(lookup))
        .route("/v1/deliveries/batch", post(create_batch))
        .route("/v1/deliveries/{id}/cancel", post(cancel))
        .route("/v1/_world", get(world));
    if sim.shared.fault_endpoint {
        routes = routes.route("/v1/_faults", post(patch_faults));
    }
    if sim.shared.guarded {
        routes = routes.layer(axum::middleware::from_fn(loopback_names_only));
    }
    routes.with_state(sim)
}

/// A guarded simulator answers only requests addressed to a loopback name.
async fn loopback_names_only(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or_default();
    if !crate::access::is_loopback_host(host) {
        return (
            StatusCode::MISDIRECTED_REQUEST,
            Json(json!({"error": "misdirected", "message": "the development simulator answers only to loopback names"})),
        )
            .into_response();
    }
    next.run(request).await
}

/// Accepts connections until dropped; dropping also aborts every connection task.
pub(crate) async fn serve(sim: ProviderSim, listener: TcpListener) -> io::Result<()> {
    // The protocol has the provider state its key retention at start.
    info!(
        addr = %listener.local_addr()?,
        key_retention_s = sim.key_retention().as_secs(),
        faults = ?sim.faults(),
        "provider simulator listening"
    );
    let router_sim = sim.clone();
    let router = router(sim);
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let shared = router_sim.shared.clone();
                    shared.connections.fetch_add(1, Ordering::Relaxed);
                    shared.open.fetch_add(1, Ordering::Relaxed);
                    let router = router.clone();
                    connections.spawn(async move {
                        serve_connection(stream, peer, router).await;
                        shared.open.fetch_sub(1, Ordering::Relaxed);
                    });
                }
                // Accept errors (a reset before accept, too many open files) concern one
                // connection or are transient; pause briefly instead of spinning or giving up.
                Err(err) => {
                    warn!(error = %err, "provider simulator failed to accept a connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            // Reap finished connections so the set does not grow with every request.
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

async fn serve_connection(stream: TcpStream, peer: SocketAddr, router: Router) {
    // Answers are tiny; do not let Nagle hold them back.
    let _ = stream.set_nodelay(true);
    let app = TowerToHyperService::new(router);
    let service = service_fn(move |request: http::Request<Incoming>| {
        let method = request.method().clone();
        let uri = request.uri().clone();
        let answer = app.call(request);
        async move {
            let response = match answer.await {
                Ok(response) => response,
                Err(never) => match never {},
            };
            if response.extensions().get::<LoseResponse>().is_some() {
                debug!(%method, %uri, "provider request: response dropped");
                return Err(LostResponse);
            }
            debug!(%method, %uri, status = %response.status(), "provider request");
            Ok(response)
        }
    });
    let connection = http1::Builder::new()
        .timer(TokioTimer::new())
        .serve_connection(TokioIo::new(stream), service);
    if let Err(err) = connection.await {
        debug!(%peer, error = %err, "provider connection closed with an error");
    }
}

/// Answers that are not protocol decisions of the world.
#[derive(Debug)]
enum ApiError {
    Unauthorized,
    NotFound(&'static str),
    BadRequest(String),
    InvalidFaults(String),
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, body) = match self {
            ApiError::Unauthorized => (
                StatusCode::UNAUTHORIZED,
                json!({"error": "unauthorized", "message": "expected `Authorization: Bearer <token>` with the simulator's token"}),
            ),
            ApiError::NotFound(what) => (
                StatusCode::NOT_FOUND,
                json!({"error": "not_found", "message": what}),
            ),
            ApiError::BadRequest(message) => (
                StatusCode::BAD_REQUEST,
                json!({"error": "bad_request", "message": message}),
            ),
            ApiError::InvalidFaults(message) => (
                StatusCode::BAD_REQUEST,
                json!({"error": "invalid_faults", "message": message}),
            ),
        };
        (status, Json(body)).into_response()
    }
}

fn require_token(sim: &ProviderSim, headers: &HeaderMap) -> Result<(), ApiError> {
    if sim.authorized(headers) {
        Ok(())
    } else {
        Err(ApiError::Unauthorized)
    }
}

/// `POST /v1/deliveries`.
async fn create(
    State(sim): State<ProviderSim>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    require_token(&sim, &headers)?;
    let (_creating, at_once) = sim.creating();
    let faults = sim.faults();
    if faults.max_concurrent > 0 && at_once > u64::from(faults.max_concurrent) {
        sim.shared
            .busy_refusals
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        info!(
            at_once,
            "beyond max_concurrent: 429 rate limited, nothing created"
        );
        return Ok(answer(CreateOutcome::RateLimited {
            retry_after_s: faults.retry_after_s,
        }));
    }
    let idempotency_key = match headers.get("idempotency-key") {
        None => None,
        Some(value) => Some(value.to_str().map_err(|_| {
            ApiError::BadRequest("Idempotency-Key must be visible ASCII".to_owned())
        })?),
    };
    let now = sim.now();
    let decision = sim.lock().create(
        CreateRequest {
            idempotency_key,
            body: &body,
        },
        now,
    );
    let outcome = decision.outcome;
    if let CreateOutcome::Created(accepted) = &outcome {
        sim.emit("delivery.accepted", &accepted.id);
    }
    match &outcome {
        CreateOutcome::Unavailable => info!("injected fault: 503 unavailable, nothing created"),
        CreateOutcome::RateLimited { retry_after_s } => {
            info!(
                retry_after_s,
                "injected fault: 429 rate limited, nothing created"
            );
        }
        _ => {}
    }
    if decision.lose {
        info!(?outcome, "injected fault: response lost after commit");
        let mut lost = StatusCode::OK.into_response();
        lost.extensions_mut().insert(LoseResponse);
        return Ok(lost);
    }
    if let Some(delay) = decision.delay {
        info!(
            delay_ms = delay.as_millis(),
            ?outcome,
            "injected fault: slow answer"
        );
        tokio::time::sleep(delay).await;
    }
    Ok(answer(outcome))
}

fn answer(outcome: CreateOutcome) -> Response {
    let error = |status: StatusCode, code: &str| (status, Json(json!({"error": code})));
    match outcome {
        CreateOutcome::Unavailable => {
            error(StatusCode::SERVICE_UNAVAILABLE, "unavailable").into_response()
        }
        CreateOutcome::RateLimited { retry_after_s } => {
            let mut response = error(StatusCode::TOO_MANY_REQUESTS, "rate_limited").into_response();
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(retry_after_s));
            response
        }
        CreateOutcome::BadRequest { message } => ApiError::BadRequest(message).into_response(),
        CreateOutcome::InvalidRecipient => {
            error(StatusCode::UNPROCESSABLE_ENTITY, "invalid_recipient").into_response()
        }
        CreateOutcome::KeyReused => {
            error(StatusCode::CONFLICT, "idempotency_key_reused").into_response()
        }
        CreateOutcome::Created(accepted) => (StatusCode::CREATED, Json(accepted)).into_response(),
        CreateOutcome::Replayed(accepted) => (StatusCode::OK, Json(accepted)).into_response(),
    }
}

/// `POST /v1/deliveries/batch`: up to [`super::state::MAX_BATCH_ITEMS`] deliveries, each
/// under its own `idempotency_key`; `200` with each item's answer in order.
async fn create_batch(
    State(sim): State<ProviderSim>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    require_token(&sim, &headers)?;
    let now = sim.now();
    let decision = sim.lock().create_batch(&body, now);
    let outcome = decision.outcome;
    let items = match outcome {
        BatchOutcome::Unavailable => {
            info!("injected fault: 503 unavailable, nothing of the batch created");
            return Ok(answer(CreateOutcome::Unavailable));
        }
        BatchOutcome::RateLimited { retry_after_s } => {
            return Ok(answer(CreateOutcome::RateLimited { retry_after_s }));
        }
        BatchOutcome::BadRequest { message } => return Err(ApiError::BadRequest(message)),
        BatchOutcome::Items(items) => items,
    };
    for item in &items {
        if let CreateOutcome::Created(accepted) = item {
            sim.emit("delivery.accepted", &accepted.id);
        }
    }
    if decision.lose {
        info!(
            items = items.len(),
            "injected fault: batch response lost after commit"
        );
        let mut lost = StatusCode::OK.into_response();
        lost.extensions_mut().insert(LoseResponse);
        return Ok(lost);
    }
    if let Some(delay) = decision.delay {
        info!(
            delay_ms = delay.as_millis(),
            "injected fault: slow batch answer"
        );
        tokio::time::sleep(delay).await;
    }
    let answers: Vec<Value> = items.into_iter().map(item_answer).collect();
    Ok((StatusCode::OK, Json(json!({"items": answers}))).into_response())
}

/// One item's answer in a batch: the status a single create would have had (`code`), with
/// the delivery or the error it would have carried.
fn item_answer(outcome: CreateOutcome) -> Value {
    let error = |code: u16, error: &str| json!({"code": code, "error": error});
    match outcome {
        CreateOutcome::Created(accepted) => json!({"code": 201, "delivery": accepted}),
        CreateOutcome::Replayed(accepted) => json!({"code": 200, "delivery": accepted}),
        CreateOutcome::Unavailable => error(503, "unavailable"),
        CreateOutcome::InvalidRecipient => error(422, "invalid_recipient"),
        CreateOutcome::KeyReused => error(409, "idempotency_key_reused"),
        CreateOutcome::BadRequest { message } => {
            json!({"code": 400, "error": "bad_request", "message": message})
        }
        CreateOutcome::RateLimited { .. } => error(429, "rate_limited"),
    }
}

#[derive(Debug, Deserialize)]
struct LookupParams {
    client_reference: Option<String>,
}

/// `GET /v1/deliveries?client_reference=<ref>`.
async fn lookup(
    State(sim): State<ProviderSim>,
    headers: HeaderMap,
    Query(params): Query<LookupParams>,
) -> Result<Response, ApiError> {
    require_token(&sim, &headers)?;
    let now = sim.now();
    // Check the switch before the parameter: with query off the endpoint does not exist.
    let reference = params.client_reference.unwrap_or_default();
    let found = sim
        .lock()
        .lookup(&reference, now)
        .ok_or(ApiError::NotFound(
            "the lookup endpoint is switched off (query: false)",
        ))?;
    if reference.is_empty() {
        return Err(ApiError::BadRequest(
            "expected the query parameter client_reference=<reference>".to_owned(),
        ));
    }
    // The request count is the world's bookkeeping for tests, not part of a delivery.
    let found: Vec<Value> = found
        .into_iter()
        .map(|delivery| {
            let mut value = json!(delivery);
            if let Some(fields) = value.as_object_mut() {
                fields.remove("cancel_requests");
            }
            value
        })
        .collect();
    Ok(Json(json!({"data": found})).into_response())
}

/// `POST /v1/deliveries/{id}/cancel`.
async fn cancel(
    State(sim): State<ProviderSim>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    require_token(&sim, &headers)?;
    let now = sim.now();
    let decision = sim.lock().cancel(&id, now);
    let cancelled = match decision.outcome {
        CancelOutcome::Unavailable => {
            info!(%id, "injected fault: cancel answered 503, nothing cancelled");
            return Ok((
                StatusCode::SERVICE_UNAVAILABLE,
                Json(json!({"error": "unavailable"})),
            )
                .into_response());
        }
        CancelOutcome::UnknownDelivery => {
            return Err(ApiError::NotFound("no delivery with this id"));
        }
        CancelOutcome::Cancelled(delivery) => delivery,
    };
    if decision.took_effect {
        sim.emit("delivery.cancelled", &cancelled.id);
    }
    if decision.lose {
        info!(id = %cancelled.id, "injected fault: cancel response lost after commit");
        let mut lost = StatusCode::OK.into_response();
        lost.extensions_mut().insert(LoseResponse);
        return Ok(lost);
    }
    info!(id = %cancelled.id, requests = cancelled.cancel_requests, "delivery cancelled");
    Ok(Json(json!({"id": cancelled.id, "status": cancelled.status})).into_response())
}

/// `GET /v1/_world`: the test hook; a guarded (development) simulator wants the token,
/// unless it is a test host's (its fault endpoint is served, `--test-controls`).
async fn world(State(sim): State<ProviderSim>, headers: HeaderMap) -> Result<Response, ApiError> {
    if sim.shared.guarded && !sim.shared.fault_endpoint {
        require_token(&sim, &headers)?;
    }
    Ok(Json(json!({"data": sim.world()})).into_response())
}

/// `POST /v1/_faults`: the test hook, no token.
async fn patch_faults(State(sim): State<ProviderSim>, body: Bytes) -> Result<Response, ApiError> {
    let patch: Value = serde_json::from_slice(&body)
        .map_err(|err| ApiError::BadRequest(format!("fault settings are not valid JSON: {err}")))?;
    let faults = sim
        .set_faults(patch)
        .map_err(|err| ApiError::InvalidFaults(err.to_string()))?;
    Ok(Json(faults).into_response())
}
