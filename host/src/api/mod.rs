//! The HTTP JSON API: admitting intents, reading workflows, and the test clock.
//!
//! [`router`] builds the whole API from an [`ApiContext`] without binding a socket, so
//! tests and the CLI serve the same router. Handlers only parse, authorise and shape:
//! admission is one store transaction ([`AdmissionStore::admit`]), reads go through
//! [`ReadStore`], and the API never sees sqlx or wasmtime types.
//!
//! Invariants defended here:
//! - checks run in a fixed order (auth → key syntax → body syntax → key lookup →
//!   definition → schema → commit), so a known key answers from what was stored even if
//!   the definition changed or disappeared since;
//! - a client sees only its own subject's intents and workflows; anything else is `404`,
//!   indistinguishable from absence;
//! - every refusal is an [`ApiError`]; internal causes are logged, never sent.

pub(crate) mod actions;
mod adapters;
mod auth;
mod controls;
mod error;
mod intents;
mod pagination;
mod projection;
mod status;
mod time;
mod workflows;

pub use auth::{Auth, Caller, Principal, Role};
pub use error::{ApiError, ApiResult, ErrorCode};
pub use intents::{MAX_KEY_LEN, parse_idempotency_key};
pub use pagination::{Cursor, DEFAULT_LIMIT, MAX_LIMIT, Page};
pub use projection::{
    AttemptView, IntentView, MilestoneView, ReceiptView, StepView, SummaryView, TimelineView,
    WorkflowView, shorten_identity, workflow_view,
};
pub use status::{Milestone, NextAction, StepStatus, milestones, next_action, status_text};
pub use time::rfc3339;

use crate::clock::Clock;
use crate::clock::SystemClock;
use crate::scheduler::Components;
use crate::scheduler::Deployments;
use crate::store::{
    AdmissionStore, ComponentStore, DefinitionStore, OperatorStore, ReadStore, SessionStore,
};
use axum::Router;
use axum::http::{Method, Uri};
use axum::routing::{get, post};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

/// The store capabilities the API needs.
pub trait ApiStore:
    AdmissionStore
    + ReadStore
    + DefinitionStore
    + OperatorStore
    + ComponentStore
    + SessionStore
    + Clone
    + Send
    + Sync
    + 'static
{
}

impl<S> ApiStore for S where
    S: AdmissionStore
        + ReadStore
        + DefinitionStore
        + OperatorStore
        + ComponentStore
        + SessionStore
        + Clone
        + Send
        + Sync
        + 'static
{
}

/// Size and retention limits of the API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiLimits {
    /// Request bodies over this many bytes are refused with `413` (default 1 MiB).
    pub max_body_bytes: usize,
    /// How long an idempotency key stays reserved after its workflow ends (default 24 h).
    pub key_retention: Duration,
}

impl ApiLimits {
    /// The default body limit: 1 MiB.
    pub const DEFAULT_MAX_BODY_BYTES: usize = 1 << 20;
    /// The default key retention: 24 hours after the workflow ends.
    pub const DEFAULT_KEY_RETENTION: Duration = Duration::from_secs(24 * 60 * 60);
}

impl Default for ApiLimits {
    fn default() -> Self {
        Self {
            max_body_bytes: Self::DEFAULT_MAX_BODY_BYTES,
            key_retention: Self::DEFAULT_KEY_RETENTION,
        }
    }
}

/// Everything the handlers use.
pub struct ApiContext<S> {
    pub store: S,
    /// Deployed definitions; new intents run the latest version of their workflow.
    pub deployments: Arc<Deployments<S>>,
    /// The host's clock (advanced by the test control).
    pub clock: Arc<SystemClock>,
    pub auth: Auth,
    pub limits: ApiLimits,
    /// Serve `POST /v1/_test/clock` (never in production).
    pub test_controls: bool,
    /// Notified after an intent is created or the clock moves, so the scheduler looks for
    /// work at once instead of at its next poll.
    pub wake: Arc<Notify>,
    /// Loaded components, for the contracts operator actions are judged by (`None`: every
    /// action that needs a contract is refused).
    pub components: Option<Arc<Components>>,
}

impl<S> ApiContext<S> {
    /// A context with open auth, default limits, no test controls and a fresh `wake`.
    pub fn new(store: S, deployments: Arc<Deployments<S>>, clock: Arc<SystemClock>) -> Self {
        Self {
            store,
            deployments,
            clock,
            auth: Auth::open(),
            limits: ApiLimits::default(),
            test_controls: false,
            wake: Arc::new(Notify::new()),
            components: None,
        }
    }

    pub(crate) fn clock_now(&self) -> crate::intent::Millis {
        self.clock.now_ms()
    }
}

/// The shared state of the router.
pub(crate) type Ctx<S> = Arc<ApiContext<S>>;

/// The API's routes, ready to serve (`axum::serve`) or to call directly in tests.
pub fn router<S: ApiStore>(ctx: ApiContext<S>) -> Router {
    shared_router(Arc::new(ctx))
}

/// [`router`] over a context shared with other routers (the console).
pub fn shared_router<S: ApiStore>(ctx: Arc<ApiContext<S>>) -> Router {
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
            "/v1/adapters",
            get(adapters::list::<S>).post(adapters::deploy::<S>),
        )
        .route("/v1/adapters/{name}/{action}", post(adapters::change::<S>));
    if test_controls {
        routes = routes.route("/v1/_test/clock", post(controls::advance_clock::<S>));
    }
    routes
        .fallback(no_route)
        .method_not_allowed_fallback(wrong_method)
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
