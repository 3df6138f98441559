//! The HTTP JSON API: admitting intents, reading workflows, and the test clock.
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
mod auth;
mod budgets;
mod controls;
mod course;
mod error;
mod intents;
#[cfg(test)]
pub(crate) use intents::parse_submission;
mod keyed;
mod notifications;
mod ops;
mod pagination;
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
use axum::routing::{get, post};
use std::sync::Arc;

/// The shared state of the router.
pub(crate) type Ctx<S> = Arc<Context<S>>;

/// The API's routes, ready to serve (`axum::serve`) or to call directly in tests.
pub fn router<S: ContextStore>(ctx: Context<S>) -> Router {
    shared_router(Arc::new(ctx))
}

/// [`router`] over a context shared with other routers (the console).
pub fn shared_router<S: ContextStore>(ctx: Arc<Context<S>>) -> Router {
    let test_controls = ctx.test_controls;
    let mut routes = Router::new()
        .route("/v1/intents", post(intents::submit::<S>))
        .route("/v1/intents/{key}", get(intents::by_key::<S>))
        .route("/v1/workflows", get(workflows::list::<S>))
        .route("/v1/workflows/{id}", get(workflows::projection::<S>))
        .route("/v1/workflows/{id}/timeline", get(workflows::timeline::<S>))
        .route(
            "/v1/workflows/{id}/steps/{step}/attempts",
            get(workflows::attempts::<S>),
        )
        .route(
            "/v1/workflows/{id}/steps/{step}/{action}",
            post(actions::act::<S>),
        )
        .route(
            "/v1/workflows/{id}/cancel",
            post(course::cancel_workflow::<S>),
        )
        .route(
            "/v1/workflows/{id}/cancellation",
            get(course::cancellation::<S>),
        )
        .route(
            "/v1/workflows/{id}/revisions",
            get(course::revisions::<S>).post(course::revise_workflow::<S>),
        )
        .route(
            "/v1/workflows/{id}/replacement",
            post(course::replace_workflow::<S>),
        )
        .route("/v1/workflows/{id}/budget", post(budgets::extend::<S>))
        .route(
            "/v1/adapters",
            get(adapters::list::<S>).post(adapters::deploy::<S>),
        )
        .route("/v1/adapters/{name}/{action}", post(adapters::change::<S>))
        .route("/v1/notifications", get(notifications::list::<S>))
        .route(
            "/v1/policies",
            get(policies::list::<S>).post(policies::deploy::<S>),
        )
        .route("/healthz", get(ops::healthz))
        .route("/readyz", get(ops::readyz::<S>))
        .route("/metrics", get(ops::metrics::<S>));
    if test_controls {
        routes = routes
            .route("/v1/_test/clock", post(controls::advance_clock::<S>))
            .route("/v1/_test/ticks", get(controls::ticks::<S>));
    }
    routes
        .fallback(no_route)
        .method_not_allowed_fallback(wrong_method)
        .layer(axum::middleware::from_fn_with_state(
            ctx.clone(),
            guard::<S>,
        ))
        .with_state(ctx)
}

/// Refuses what a browser's ambient authority could send before anything else is looked
/// at ([`crate::access::check_request`]): a rebound `Host` in open mode (`421`), a
/// state-changing request from another site (`403`).
async fn guard<S: ContextStore>(
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
        .with_state(ctx)
}

async fn no_route(uri: Uri) -> ApiError {
    ApiError::not_found(format!(
        "there is nothing at `{}`; the API's paths start with `/v1/intents`, `/v1/workflows` or `/v1/adapters`",
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
