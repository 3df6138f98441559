//! The HTTP JSON API: admission, workflows and their changes of course, operator actions
//! and budgets, the adapter registry and policies, notifications, health and metrics, and
//! (for tests only) the clock.
//!
//! [`router`] builds the whole API from a [`Context`] without binding a socket, so
//! tests and the CLI serve the same router. Handlers only parse, authorise and shape:
//! admission is one store transaction ([`crate::store::AdmissionStore::admit`]), reads go
//! through [`crate::store::ReadStore`], and the API never sees sqlx or wasmtime types.
//!
//! Invariants defended here:
//! - checks run in a fixed order (auth → key syntax → body syntax → key lookup →
//!   definition → schema → commit), so a known key answers from what was stored even if
//!   the definition changed or disappeared since;
//! - a client sees only its own subject's intents and workflows; anything else is `404`,
//!   indistinguishable from absence;
//! - every refusal is an [`ApiError`]; internal causes are logged, never sent.

mod actions;
mod adapters;
mod approvals;
mod auth;
mod budgets;
mod controls;
mod course;
mod error;
mod evidence;
mod intents;
#[cfg(test)]
pub(crate) use intents::parse_submission;
mod keyed;
mod notifications;
pub mod openapi;
mod ops;
pub(crate) mod pagination;
mod policies;
#[cfg(test)]
mod tests;
mod workflows;

pub use auth::Caller;
pub use error::{ApiError, ApiResult, ErrorCode};
pub use intents::{MAX_KEY_LEN, parse_idempotency_key};
pub use pagination::{Cursor, DEFAULT_LIMIT, MAX_LIMIT, Page};

use crate::context::{Context, ContextStore};
use axum::Router;
use axum::http::{Method, Uri};
use axum::routing::{MethodRouter, get, post};
use std::sync::Arc;

/// The shared state of the router.
pub(crate) type Ctx<S> = Arc<Context<S>>;

/// The API's routes, ready to serve (`axum::serve`) or to call directly in tests.
pub fn router<S: ContextStore>(ctx: Context<S>) -> Router {
    shared_router(Arc::new(ctx))
}

/// [`router`] over a context shared with other routers (the console).
pub fn shared_router<S: ContextStore>(ctx: Arc<Context<S>>) -> Router {
    let mut router = Router::new();
    // One entry per method: the same path given twice merges its methods.
    for (_, path, handler) in routes::<S>(ctx.test_controls) {
        router = router.route(path, handler);
    }
    router
        .fallback(no_route)
        .method_not_allowed_fallback(wrong_method)
        .layer(axum::middleware::from_fn_with_state(
            ctx.clone(),
            guard::<S>,
        ))
        .with_state(ctx)
}

/// Every route of the API as (method, path, handler): the router is built from this list,
/// and the OpenAPI document ([`openapi::document`]) is checked against it.
pub fn route_table(test_controls: bool) -> Vec<(Method, &'static str)> {
    routes::<crate::store::sqlite::SqliteStore>(test_controls)
        .into_iter()
        .map(|(method, path, _)| (method, path))
        .collect()
}

type Route<S> = (Method, &'static str, MethodRouter<Ctx<S>>);

fn routes<S: ContextStore>(test_controls: bool) -> Vec<Route<S>> {
    let mut routes: Vec<Route<S>> = vec![
        (Method::POST, "/v1/intents", post(intents::submit::<S>)),
        (Method::GET, "/v1/intents/{key}", get(intents::by_key::<S>)),
        (Method::GET, "/v1/workflows", get(workflows::list::<S>)),
        (
            Method::GET,
            "/v1/workflows/{id}",
            get(workflows::projection::<S>),
        ),
        (
            Method::GET,
            "/v1/workflows/{id}/timeline",
            get(workflows::timeline::<S>),
        ),
        (
            Method::GET,
            "/v1/workflows/{id}/steps/{step}/attempts",
            get(workflows::attempts::<S>),
        ),
        (
            Method::GET,
            "/v1/workflows/{id}/steps/{step}/consequence",
            get(approvals::consequence::<S>),
        ),
        (
            Method::POST,
            "/v1/workflows/{id}/steps/{step}/{action}",
            post(actions::act::<S>),
        ),
        (
            Method::GET,
            "/v1/workflows/{id}/steps/{step}/items",
            get(workflows::items::<S>),
        ),
        (
            Method::GET,
            "/v1/workflows/{id}/steps/{step}/items/{item_key}/attempts",
            get(workflows::item_attempts::<S>),
        ),
        (
            Method::POST,
            "/v1/workflows/{id}/steps/{step}/items/{item_key}/{action}",
            post(actions::act_on_item::<S>),
        ),
        (Method::GET, "/v1/approvals", get(approvals::list::<S>)),
        (
            Method::POST,
            "/v1/evidence/{adapter}",
            post(evidence::receive::<S>),
        ),
        (Method::GET, "/v1/evidence", get(evidence::list::<S>)),
        (
            Method::POST,
            "/v1/workflows/{id}/cancel",
            post(course::cancel_workflow::<S>),
        ),
        (
            Method::GET,
            "/v1/workflows/{id}/cancellation",
            get(course::cancellation::<S>),
        ),
        (
            Method::GET,
            "/v1/workflows/{id}/revisions",
            get(course::revisions::<S>),
        ),
        (
            Method::POST,
            "/v1/workflows/{id}/revisions",
            post(course::revise_workflow::<S>),
        ),
        (
            Method::POST,
            "/v1/workflows/{id}/replacement",
            post(course::replace_workflow::<S>),
        ),
        (
            Method::POST,
            "/v1/workflows/{id}/migration",
            post(course::migrate_workflow::<S>),
        ),
        (
            Method::GET,
            "/v1/workflows/{id}/migrations",
            get(course::migrations::<S>),
        ),
        (
            Method::POST,
            "/v1/workflows/{id}/budget",
            post(budgets::extend::<S>),
        ),
        (Method::GET, "/v1/adapters", get(adapters::list::<S>)),
        (Method::POST, "/v1/adapters", post(adapters::deploy::<S>)),
        (
            Method::POST,
            "/v1/adapters/{name}/{action}",
            post(adapters::change::<S>),
        ),
        (
            Method::GET,
            "/v1/notifications",
            get(notifications::list::<S>),
        ),
        (Method::GET, "/v1/policies", get(policies::list::<S>)),
        (Method::POST, "/v1/policies", post(policies::deploy::<S>)),
        (Method::GET, "/v1/openapi.json", get(openapi::serve)),
        (Method::GET, "/healthz", get(ops::healthz)),
        (Method::GET, "/readyz", get(ops::readyz::<S>)),
        (Method::GET, "/metrics", get(ops::metrics::<S>)),
    ];
    if test_controls {
        routes.push((
            Method::POST,
            "/v1/_test/clock",
            post(controls::advance_clock::<S>),
        ));
        routes.push((Method::GET, "/v1/_test/ticks", get(controls::ticks::<S>)));
    }
    routes
}

/// Refuses what a browser's ambient authority could send before anything else is looked
/// at ([`crate::access::check_request`]): a rebound `Host` in open mode (`421`), a
/// state-changing request from another site (`403`).
async fn guard<S>(
    axum::extract::State(ctx): axum::extract::State<Ctx<S>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use crate::access::{RequestRefusal, check_request};
    use axum::response::IntoResponse;
    match check_request(ctx.auth.is_open(), request.method(), request.headers()) {
        Ok(()) => {
            let mut response = next.run(request).await;
            // JSON stays JSON: no browser may sniff it into something it would run.
            response.headers_mut().insert(
                axum::http::header::X_CONTENT_TYPE_OPTIONS,
                axum::http::HeaderValue::from_static("nosniff"),
            );
            response
        }
        Err(RequestRefusal::Misdirected(m)) => {
            ApiError::new(ErrorCode::Misdirected, m).into_response()
        }
        Err(RequestRefusal::CrossSite(m)) => ApiError::new(ErrorCode::Forbidden, m).into_response(),
    }
}

/// The metrics listener's routes: `GET /metrics` with no authentication (only scrapers
/// reach that listener), and the health checks.
pub fn metrics_router<S: ContextStore>(ctx: Arc<Context<S>>) -> Router {
    Router::new()
        .route("/metrics", get(ops::open_metrics::<S>))
        .route("/healthz", get(ops::healthz))
        .route("/readyz", get(ops::readyz::<S>))
        .fallback(no_route)
        // The same `Host` check as the API's: an open host's metrics answer only to
        // loopback names, so a page that rebinds its DNS name here reads nothing.
        .layer(axum::middleware::from_fn_with_state(
            ctx.clone(),
            guard::<S>,
        ))
        .with_state(ctx)
}

async fn no_route(uri: Uri) -> ApiError {
    ApiError::not_found(format!(
        "there is nothing at `{}`; the API's paths start with `/v1/intents`, `/v1/workflows`, `/v1/policies`, `/v1/adapters` or `/v1/notifications` (the whole list: `/v1/openapi.json`)",
        error::quote(uri.path())
    ))
}

async fn wrong_method(method: Method, uri: Uri) -> ApiError {
    ApiError::new(
        ErrorCode::MethodNotAllowed,
        format!(
            "`{}` does not accept {method}; see the API reference for the methods of each path",
            error::quote(uri.path())
        ),
    )
}
