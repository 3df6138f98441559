//! The operator's recovery console: server-rendered pages under `/console` on the API's
//! listener. Every page works without JavaScript.
//!
//! It owns operator sessions (sign in with an operator token, then a cookie), the
//! protection of its forms (a per-session token against cross-site requests, and an
//! idempotency key per rendered form so that pressing twice acts once) and the pages. The
//! actions themselves are the API's ([`crate::api::actions::perform`]): the console only
//! turns a form into the same request.

mod pages;
mod session;

use crate::api::actions::{Action, perform};
use crate::api::{ApiContext, ApiStore};
use axum::Router;
use axum::extract::{Form, Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use maud::Markup;
use serde::Deserialize;
use std::collections::HashMap;
use std::sync::Arc;

pub use pages::render_workflow_page;

/// What the console's handlers share.
pub struct Console<S> {
    pub(crate) api: Arc<ApiContext<S>>,
}

type Shared<S> = Arc<Console<S>>;

/// The console's routes, over the API's context.
pub fn router<S: ApiStore>(api: Arc<ApiContext<S>>) -> Router {
    let console = Arc::new(Console { api });
    Router::new()
        .route(
            "/console",
            get(|| async { Redirect::to("/console/workflows") }),
        )
        .route(
            "/console/sign-in",
            get(sign_in_page::<S>).post(sign_in::<S>),
        )
        .route("/console/sign-out", post(sign_out::<S>))
        .route("/console/workflows", get(workflows::<S>))
        .route("/console/workflows/{id}", get(workflow::<S>))
        .route("/console/workflows/{id}/steps/{step}", get(step::<S>))
        .route(
            "/console/workflows/{id}/steps/{step}/{action}",
            post(act::<S>),
        )
        .route("/console/adapters", get(adapters::<S>))
        .with_state(console)
}

fn html(status: StatusCode, page: Markup) -> Response {
    let mut r = (status, page.into_string()).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        "text/html; charset=utf-8".parse().expect("a valid header"),
    );
    // Pages carry per-render form keys and personal data: never from a cache.
    r.headers_mut().insert(
        header::CACHE_CONTROL,
        "no-store".parse().expect("a valid header"),
    );
    r
}

/// The signed-in operator, or a redirect to the sign-in page.
async fn signed_in<S: ApiStore>(
    console: &Console<S>,
    headers: &HeaderMap,
) -> Result<session::Session, Box<Response>> {
    let api = &console.api;
    match session::of_request(&api.store, &api.auth, headers, api.clock_now()).await {
        Ok(Some(who)) => Ok(who),
        Ok(None) => Err(Box::new(Redirect::to("/console/sign-in").into_response())),
        Err(e) => Err(Box::new(store_down(api, e))),
    }
}

/// A page that could not be rendered: 400 with the fix, or 503 with the cause logged.
fn page_error(who: &session::Session, e: pages::PageError) -> Response {
    let status = match &e {
        pages::PageError::BadRequest(_) => StatusCode::BAD_REQUEST,
        pages::PageError::Store(inner) => {
            tracing::warn!("console page: {inner}");
            StatusCode::SERVICE_UNAVAILABLE
        }
    };
    html(status, pages::problem(who, &e.to_string()))
}

/// The sign-in page with the reason, when sessions cannot be read or written.
fn store_down<S: ApiStore>(api: &ApiContext<S>, e: crate::store::StoreError) -> Response {
    tracing::warn!("console sessions: {e}");
    html(
        StatusCode::SERVICE_UNAVAILABLE,
        pages::sign_in(
            api.auth.is_open(),
            Some("docket cannot reach its database to check the session; try again shortly."),
        ),
    )
}

async fn sign_in_page<S: ApiStore>(State(c): State<Shared<S>>) -> Response {
    html(StatusCode::OK, pages::sign_in(c.api.auth.is_open(), None))
}

#[derive(Deserialize)]
struct SignInForm {
    #[serde(default)]
    token: String,
}

async fn sign_in<S: ApiStore>(
    State(c): State<Shared<S>>,
    Form(form): Form<SignInForm>,
) -> Response {
    let mut headers = HeaderMap::new();
    if let Ok(v) = format!("Bearer {}", form.token.trim()).parse() {
        headers.insert(header::AUTHORIZATION, v);
    }
    let principal = match c.api.auth.authenticate(&headers) {
        Ok(p) => p,
        Err(_) => {
            return html(
                StatusCode::UNAUTHORIZED,
                pages::sign_in(
                    c.api.auth.is_open(),
                    Some("That token is not one of this host's tokens; check docket.toml."),
                ),
            );
        }
    };
    if principal.role != crate::api::Role::Operator {
        return html(
            StatusCode::FORBIDDEN,
            pages::sign_in(
                c.api.auth.is_open(),
                Some("That is a client token; the console needs an operator token."),
            ),
        );
    }
    let cookie = match session::start(&c.api.store, &principal, c.api.clock_now()).await {
        Ok(cookie) => cookie,
        Err(e) => return store_down(&c.api, e),
    };
    let mut r = Redirect::to("/console/workflows").into_response();
    r.headers_mut()
        .insert(header::SET_COOKIE, cookie.parse().expect("a valid cookie"));
    r
}

async fn sign_out<S: ApiStore>(State(c): State<Shared<S>>, headers: HeaderMap) -> Response {
    if let Err(e) = session::end(&c.api.store, &headers, c.api.clock_now()).await {
        return store_down(&c.api, e);
    }
    let mut r = Redirect::to("/console/sign-in").into_response();
    r.headers_mut().insert(
        header::SET_COOKIE,
        session::CLEAR_COOKIE.parse().expect("a valid cookie"),
    );
    r
}

async fn workflows<S: ApiStore>(
    State(c): State<Shared<S>>,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let who = match signed_in(&c, &headers).await {
        Ok(s) => s,
        Err(r) => return *r,
    };
    match pages::workflows(&c.api, &who, &q).await {
        Ok(page) => html(StatusCode::OK, page),
        Err(e) => page_error(&who, e),
    }
}

async fn workflow<S: ApiStore>(
    State(c): State<Shared<S>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let who = match signed_in(&c, &headers).await {
        Ok(s) => s,
        Err(r) => return *r,
    };
    let before = q.get("events_before").and_then(|v| v.parse().ok());
    match pages::render_workflow_page(&c.api, &who, &id, before).await {
        Ok(Some(page)) => html(StatusCode::OK, page),
        Ok(None) => html(
            StatusCode::NOT_FOUND,
            pages::problem(&who, &format!("There is no workflow {id}.")),
        ),
        Err(e) => page_error(&who, e),
    }
}

async fn step<S: ApiStore>(
    State(c): State<Shared<S>>,
    headers: HeaderMap,
    Path((id, step)): Path<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let who = match signed_in(&c, &headers).await {
        Ok(s) => s,
        Err(r) => return *r,
    };
    let notice = q
        .get("done")
        .map(|a| format!("The {a} action was recorded."));
    step_response(&c, &who, &id, &step, notice, None, StatusCode::OK).await
}

async fn step_response<S: ApiStore>(
    c: &Console<S>,
    who: &session::Session,
    id: &str,
    step: &str,
    notice: Option<String>,
    error: Option<String>,
    status: StatusCode,
) -> Response {
    match pages::step(&c.api, who, id, step, notice, error).await {
        Ok(Some(page)) => html(status, page),
        Ok(None) => html(
            StatusCode::NOT_FOUND,
            pages::problem(who, &format!("Workflow {id} has no step {step}.")),
        ),
        Err(e) => page_error(who, e),
    }
}

/// A form of the stuck-step page. Fields the action does not use are ignored.
#[derive(Deserialize)]
struct ActionForm {
    csrf: String,
    key: String,
    #[serde(default)]
    outcome: String,
    #[serde(default)]
    evidence: String,
    #[serde(default)]
    reason: String,
    #[serde(default)]
    note: String,
    #[serde(default)]
    external_reference: String,
}

async fn act<S: ApiStore>(
    State(c): State<Shared<S>>,
    headers: HeaderMap,
    Path((id, step, action)): Path<(String, String, String)>,
    Form(form): Form<ActionForm>,
) -> Response {
    let who = match signed_in(&c, &headers).await {
        Ok(s) => s,
        Err(r) => return *r,
    };
    // A form from another site cannot know the session's token.
    if !who.csrf_matches(&form.csrf) {
        return html(
            StatusCode::FORBIDDEN,
            pages::problem(
                &who,
                "This form did not come from this console (its security token does not match your session). Open the page again and submit from there.",
            ),
        );
    }
    let Some(action) = Action::parse(&action) else {
        return html(
            StatusCode::NOT_FOUND,
            pages::problem(&who, &format!("There is no action {action}.")),
        );
    };
    let body = match action {
        Action::Query | Action::Retry => serde_json::json!({}),
        Action::Resolve => {
            let mut b = serde_json::json!({
                "outcome": form.outcome,
                "evidence": form.evidence,
                "reason": form.reason,
            });
            if !form.external_reference.trim().is_empty() {
                b["external_reference"] = serde_json::json!(form.external_reference.trim());
            }
            b
        }
        Action::Escalate => serde_json::json!({"note": form.note}),
    };
    let bytes = body.to_string().into_bytes();
    let outcome = perform(
        &c.api,
        who.principal.clone(),
        id.clone(),
        step.clone(),
        action,
        form.key.clone(),
        &bytes,
    )
    .await;
    match outcome {
        Ok(r) if r.status().is_success() => Redirect::to(&format!(
            "/console/workflows/{}/steps/{}?done={}",
            pages::path_part(&id),
            pages::path_part(&step),
            action.as_str()
        ))
        .into_response(),
        Ok(r) => {
            let status = r.status();
            let message = refusal_text(r).await;
            step_response(&c, &who, &id, &step, None, Some(message), status).await
        }
        Err(e) => {
            let status = e.code.status();
            let message = e.body()["error"]["message"]
                .as_str()
                .unwrap_or("the action failed")
                .to_string();
            step_response(&c, &who, &id, &step, None, Some(message), status).await
        }
    }
}

/// The message of a refused action's JSON answer.
async fn refusal_text(r: Response) -> String {
    let bytes = axum::body::to_bytes(r.into_body(), 1 << 20)
        .await
        .unwrap_or_default();
    serde_json::from_slice::<serde_json::Value>(&bytes)
        .ok()
        .and_then(|v| v["error"]["message"].as_str().map(str::to_string))
        .unwrap_or_else(|| "the action was refused".into())
}

async fn adapters<S: ApiStore>(State(c): State<Shared<S>>, headers: HeaderMap) -> Response {
    let who = match signed_in(&c, &headers).await {
        Ok(s) => s,
        Err(r) => return *r,
    };
    match pages::adapters(&c.api, &who).await {
        Ok(page) => html(StatusCode::OK, page),
        Err(e) => page_error(&who, e),
    }
}
