//! The operator's recovery console: server-rendered pages under `/console` on the API's
//! listener. Every page works without JavaScript.
//!
//! It owns operator sessions (sign in with an operator token, then a cookie), the
//! protection of its forms (a per-session token against cross-site requests, and an
//! idempotency key per rendered form so that pressing twice acts once) and the pages. The
//! actions themselves are [`crate::operator`]'s, as for the API: the console turns a form
//! into the same typed order and renders the same result as a page.

mod approvals;
mod evidence;
mod pages;
mod session;

use crate::context::{Context, ContextStore};
use crate::operator::{Action, ActionResult, DeskError, Order, Target, perform};
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
    pub(crate) ctx: Arc<Context<S>>,
}

type Shared<S> = Arc<Console<S>>;

/// The console's routes, over the API's context.
pub fn router<S: ContextStore>(ctx: Arc<Context<S>>) -> Router {
    let console = Arc::new(Console { ctx });
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
        .route(
            "/console/workflows/{id}/course/{action}",
            post(change_course::<S>),
        )
        .route("/console/workflows/{id}/steps/{step}", get(step::<S>))
        .route(
            "/console/workflows/{id}/steps/{step}/{action}",
            post(act::<S>),
        )
        .route("/console/adapters", get(adapters::<S>))
        .route("/console/evidence", get(evidence_page::<S>))
        .route("/console/approvals", get(approval_list::<S>))
        .route(
            "/console/workflows/{id}/approvals/{step}",
            get(approval_page::<S>),
        )
        .layer(axum::middleware::from_fn_with_state(
            console.clone(),
            guard::<S>,
        ))
        .with_state(console)
}

/// The API's request checks ([`crate::access::check_request`]) for the console's pages and
/// forms — sign-in and sign-out included — answered as a page.
async fn guard<S>(
    State(c): State<Shared<S>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    use crate::access::{RequestRefusal, check_request};
    match check_request(c.ctx.auth.is_open(), request.method(), request.headers()) {
        Ok(()) => {
            let mut response = next.run(request).await;
            let h = response.headers_mut();
            // No other site may frame the console (clickjacking) or sniff its responses;
            // forms post only to the console itself.
            for (name, value) in [
                (
                    header::CONTENT_SECURITY_POLICY,
                    "frame-ancestors 'none'; base-uri 'none'; object-src 'none'; form-action 'self'",
                ),
                (header::X_FRAME_OPTIONS, "DENY"),
                (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
                (header::REFERRER_POLICY, "same-origin"),
            ] {
                h.insert(name, axum::http::HeaderValue::from_static(value));
            }
            response
        }
        Err(refusal) => {
            let status = match refusal {
                RequestRefusal::Misdirected(_) => StatusCode::MISDIRECTED_REQUEST,
                RequestRefusal::CrossSite(_) => StatusCode::FORBIDDEN,
            };
            html(status, pages::refused(refusal.message()))
        }
    }
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

/// The signed-in operator: a redirect to the sign-in page without a session, a page that
/// says so for an approver who is no operator.
async fn operator_in<S: crate::store::SessionStore>(
    console: &Console<S>,
    headers: &HeaderMap,
) -> Result<session::Session, Box<Response>> {
    let who = signed_in(console, headers).await?;
    if who.principal.has(crate::access::Role::Operator) {
        return Ok(who);
    }
    Err(Box::new(html(
        StatusCode::FORBIDDEN,
        pages::problem(
            &who,
            "This page is an operator's; you hold the approver role. Your approvals are under Approvals.",
        ),
    )))
}

/// The signed-in operator or approver, or a redirect to the sign-in page.
async fn signed_in<S: crate::store::SessionStore>(
    console: &Console<S>,
    headers: &HeaderMap,
) -> Result<session::Session, Box<Response>> {
    let ctx = &console.ctx;
    match session::of_request(&ctx.store, &ctx.auth, headers, ctx.clock_now()).await {
        Ok(Some(who)) => Ok(who),
        Ok(None) => Err(Box::new(Redirect::to("/console/sign-in").into_response())),
        Err(e) => Err(Box::new(store_down(ctx, e))),
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
fn store_down<S>(ctx: &Context<S>, e: crate::store::StoreError) -> Response {
    tracing::warn!("console sessions: {e}");
    html(
        StatusCode::SERVICE_UNAVAILABLE,
        pages::sign_in(
            ctx.auth.is_open(),
            Some("docket cannot reach its database to check the session; try again shortly."),
        ),
    )
}

async fn sign_in_page<S>(State(c): State<Shared<S>>) -> Response {
    html(StatusCode::OK, pages::sign_in(c.ctx.auth.is_open(), None))
}

#[derive(Deserialize)]
struct SignInForm {
    #[serde(default)]
    token: String,
}

async fn sign_in<S: crate::store::SessionStore>(
    State(c): State<Shared<S>>,
    extensions: axum::http::Extensions,
    request_headers: HeaderMap,
    Form(form): Form<SignInForm>,
) -> Response {
    let peer = extensions
        .get::<axum::extract::ConnectInfo<crate::access::ClientAddr>>()
        .map(|c| c.0.0.ip());
    // The request's own headers (a trusted proxy's word on the client among them), with
    // the form's token as the credential.
    let mut headers = request_headers;
    headers.remove(header::AUTHORIZATION);
    if let Ok(v) = format!("Bearer {}", form.token.trim()).parse() {
        headers.insert(header::AUTHORIZATION, v);
    }
    let principal = match c.ctx.auth.authenticate_from(&headers, peer) {
        Ok(p) => p,
        Err(crate::access::AuthFailure::Throttled(_)) => {
            return html(
                StatusCode::TOO_MANY_REQUESTS,
                pages::sign_in(
                    c.ctx.auth.is_open(),
                    Some("Too many failed sign-ins from here; wait a minute and try again."),
                ),
            );
        }
        Err(crate::access::AuthFailure::Refused(_)) => {
            return html(
                StatusCode::UNAUTHORIZED,
                pages::sign_in(
                    c.ctx.auth.is_open(),
                    Some("That token is not one of this host's tokens; check docket.toml."),
                ),
            );
        }
    };
    if session::console_roles(principal.roles) == crate::access::Roles::default() {
        return html(
            StatusCode::FORBIDDEN,
            pages::sign_in(
                c.ctx.auth.is_open(),
                Some(
                    "That token holds neither the operator nor the approver role; the console needs one of them.",
                ),
            ),
        );
    }
    // An approver who is no operator has one page: the approvals.
    let home = if principal.has(crate::access::Role::Operator) {
        "/console/workflows"
    } else {
        "/console/approvals"
    };
    let cookie = match session::start(
        &c.ctx.store,
        &principal,
        c.ctx.clock_now(),
        c.ctx.secure_cookies,
    )
    .await
    {
        Ok(cookie) => cookie,
        Err(e) => return store_down(&c.ctx, e),
    };
    let mut r = Redirect::to(home).into_response();
    r.headers_mut()
        .insert(header::SET_COOKIE, cookie.parse().expect("a valid cookie"));
    r
}

async fn sign_out<S: crate::store::SessionStore>(
    State(c): State<Shared<S>>,
    headers: HeaderMap,
) -> Response {
    if let Err(e) = session::end(&c.ctx.store, &headers, c.ctx.clock_now()).await {
        return store_down(&c.ctx, e);
    }
    let mut r = Redirect::to("/console/sign-in").into_response();
    for clear in [session::CLEAR_COOKIE, session::CLEAR_SECURE_COOKIE] {
        r.headers_mut()
            .append(header::SET_COOKIE, clear.parse().expect("a valid cookie"));
    }
    r
}

async fn workflows<S: crate::store::SessionStore + crate::store::ReadStore>(
    State(c): State<Shared<S>>,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let who = match operator_in(&c, &headers).await {
        Ok(s) => s,
        Err(r) => return *r,
    };
    match pages::workflows(&c.ctx, &who, &q).await {
        Ok(page) => html(StatusCode::OK, page),
        Err(e) => page_error(&who, e),
    }
}

async fn workflow<
    S: crate::store::DefinitionStore
        + crate::store::CourseStore
        + crate::store::SessionStore
        + crate::store::NotificationStore
        + crate::store::ReadStore,
>(
    State(c): State<Shared<S>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let who = match operator_in(&c, &headers).await {
        Ok(s) => s,
        Err(r) => return *r,
    };
    let before = q.get("events_before").and_then(|v| v.parse().ok());
    // `?wait=&after=`: the page's own refresh waits for the workflow to move (at most a
    // minute), as the API's long-poll does.
    let wait = q
        .get("wait")
        .and_then(|v| v.parse::<u64>().ok())
        .map(|s| std::time::Duration::from_secs(s.clamp(1, 60)));
    let after = q.get("after").and_then(|v| v.parse::<u64>().ok());
    let wid = crate::intent::WorkflowId(id.clone());
    let record = match (wait, after) {
        (Some(wait), Some(after)) => c.ctx.workflow_after(&wid, after, wait).await,
        _ => c.ctx.store.workflow(&wid).await,
    };
    let page = match record {
        Ok(Some(record)) => pages::workflow_page(&c.ctx, &who, record, before, None, None).await,
        Ok(None) => {
            return html(
                StatusCode::NOT_FOUND,
                pages::problem(&who, &format!("There is no workflow {id}.")),
            );
        }
        Err(e) => Err(e.into()),
    };
    match page {
        Ok(page) => html(StatusCode::OK, page),
        Err(e) => page_error(&who, e),
    }
}

/// A form of the workflow page that changes its course.
#[derive(Deserialize)]
struct CourseForm {
    csrf: String,
    key: String,
    #[serde(default)]
    reason: String,
    #[serde(default)]
    input: String,
    #[serde(default)]
    cancel_original: Option<String>,
    // The budget extension's amounts (empty fields add nothing).
    #[serde(default)]
    add_attempts: String,
    #[serde(default)]
    add_runtime_ms: String,
    #[serde(default)]
    add_external_calls: String,
    #[serde(default)]
    add_cost: String,
    #[serde(default)]
    add_recovery_queries: String,
}

impl CourseForm {
    /// The extension's amounts by key; a field that is not a whole number is named.
    fn amounts(&self) -> Result<Vec<(&'static str, u64)>, String> {
        let fields = [
            ("attempts", &self.add_attempts),
            ("runtime_ms", &self.add_runtime_ms),
            ("external_calls", &self.add_external_calls),
            ("cost", &self.add_cost),
            ("recovery_queries", &self.add_recovery_queries),
        ];
        let mut out = Vec::new();
        for (key, text) in fields {
            let text = text.trim();
            if text.is_empty() {
                continue;
            }
            let n = text.parse::<u64>().map_err(|_| {
                format!("Add {key}: `{text}` is not a whole number; write 0 or more")
            })?;
            out.push((key, n));
        }
        Ok(out)
    }
}

/// `POST /console/workflows/{id}/course/{cancel|withdraw|revise|replace|budget}`: the same orders as the
/// API's, answered with the workflow page and what became of the request.
async fn change_course<
    S: crate::store::DefinitionStore
        + crate::store::SessionStore
        + crate::store::OperatorStore
        + crate::store::ApprovalStore
        + crate::store::NotificationStore
        + crate::store::AdmissionStore
        + crate::store::CourseStore
        + crate::store::BudgetStore
        + crate::store::ReadStore,
>(
    State(c): State<Shared<S>>,
    headers: HeaderMap,
    Path((id, action)): Path<(String, String)>,
    Form(form): Form<CourseForm>,
) -> Response {
    use crate::operator::{
        CancelOrder, CancelResult, ReplaceOrder, ReviseOrder, ReviseResult, cancel, replace, revise,
    };
    let who = match operator_in(&c, &headers).await {
        Ok(s) => s,
        Err(r) => return *r,
    };
    if !who.csrf_matches(&form.csrf) {
        return html(
            StatusCode::FORBIDDEN,
            pages::problem(
                &who,
                "This form did not come from this console (its security token does not match your session). Open the page again and submit from there.",
            ),
        );
    }
    let outcome: Result<String, (StatusCode, String)> = match action.as_str() {
        "cancel" | "withdraw" => match CancelOrder::new(Some(&form.reason), action == "withdraw") {
            Err(e) => Err((StatusCode::BAD_REQUEST, e.message)),
            Ok(order) => match cancel(&c.ctx, &who.principal, &id, order, form.key.clone()).await {
                Ok(CancelResult::Created(r) | CancelResult::Existing(r)) => Ok(r.message),
                Ok(CancelResult::Refused(r)) => Err((StatusCode::CONFLICT, r.message)),
                Err(e) => Err(desk_error(e)),
            },
        },
        "revise" => match form_json(&form.input) {
            Err(e) => Err(e),
            Ok(input) => match ReviseOrder::new(input, Some(&form.reason)) {
                Err(e) => Err((StatusCode::BAD_REQUEST, e.message)),
                Ok(order) => {
                    match revise(&c.ctx, &who.principal, &id, order, form.key.clone()).await {
                        Ok(ReviseResult::Applied(r)) => Ok(format!(
                            "Input revision {} recorded; runs again: {}",
                            r.input_revision,
                            if r.invalidated_steps.is_empty() {
                                "nothing".to_string()
                            } else {
                                r.invalidated_steps.join(", ")
                            }
                        )),
                        Ok(ReviseResult::Refused(r)) => Err((StatusCode::CONFLICT, r.message)),
                        Err(e) => Err(desk_error(e)),
                    }
                }
            },
        },
        "budget" => match form.amounts().and_then(|add| {
            crate::operator::ExtendOrder::new(add, Some(&form.reason)).map_err(|e| e.message)
        }) {
            Err(message) => Err((StatusCode::BAD_REQUEST, message)),
            Ok(order) => match crate::operator::extend_budget(
                &c.ctx,
                &who.principal,
                &id,
                order,
                form.key.clone(),
            )
            .await
            {
                Ok(b) => Ok(format!(
                    "Budget extended: {} of {} attempts used, {} recovery queries in reserve",
                    b.attempts.used, b.attempts.limit, b.recovery_queries_left
                )),
                Err(e) => Err(desk_error(e)),
            },
        },
        "replace" => match form_json(&form.input) {
            Err(e) => Err(e),
            Ok(input) => {
                let cancel_original = form.cancel_original.is_some();
                match ReplaceOrder::new(input, Some(&form.reason), cancel_original) {
                    Err(e) => Err((StatusCode::BAD_REQUEST, e.message)),
                    Ok(order) => {
                        match replace(&c.ctx, &who.principal, &id, order, form.key.clone()).await {
                            Ok(r) => Ok(format!(
                                "Replaced by workflow {}{}",
                                r.workflow_id,
                                if r.created {
                                    ""
                                } else {
                                    " (it was already replaced)"
                                }
                            )),
                            Err(e) => Err(desk_error(e)),
                        }
                    }
                }
            }
        },
        other => {
            return html(
                StatusCode::NOT_FOUND,
                pages::problem(&who, &format!("There is no change of course {other}.")),
            );
        }
    };
    let (status, notice, error) = match outcome {
        Ok(notice) => (StatusCode::OK, Some(notice), None),
        Err((status, error)) => (status, None, Some(error)),
    };
    let record = match c
        .ctx
        .store
        .workflow(&crate::intent::WorkflowId(id.clone()))
        .await
    {
        Ok(Some(record)) => record,
        Ok(None) => {
            return html(
                StatusCode::NOT_FOUND,
                pages::problem(&who, &format!("There is no workflow {id}.")),
            );
        }
        Err(e) => return page_error(&who, e.into()),
    };
    match pages::workflow_page(&c.ctx, &who, record, None, notice, error).await {
        Ok(page) => html(status, page),
        Err(e) => page_error(&who, e),
    }
}

async fn step<
    S: crate::store::DefinitionStore
        + crate::store::SessionStore
        + crate::store::ReadStore
        + crate::store::ComponentStore,
>(
    State(c): State<Shared<S>>,
    headers: HeaderMap,
    Path((id, step)): Path<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let who = match operator_in(&c, &headers).await {
        Ok(s) => s,
        Err(r) => return *r,
    };
    let notice = q
        .get("done")
        .map(|a| format!("The {a} action was recorded."));
    let items_from = q
        .get("items_from")
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    match pages::step(&c.ctx, &who, &id, &step, notice, None, items_from).await {
        Ok(Some(page)) => html(StatusCode::OK, page),
        _ => step_response(&c, &who, &id, &step, None, None, StatusCode::OK).await,
    }
}

async fn step_response<
    S: crate::store::DefinitionStore + crate::store::ReadStore + crate::store::ComponentStore,
>(
    c: &Console<S>,
    who: &session::Session,
    id: &str,
    step: &str,
    notice: Option<String>,
    error: Option<String>,
    status: StatusCode,
) -> Response {
    match pages::step(&c.ctx, who, id, step, notice, error, 0).await {
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
    /// A resolution's receipt output (JSON), optional.
    #[serde(default)]
    output: String,
    /// The digest of the consequence the person saw and approves.
    #[serde(default)]
    digest: String,
}

async fn act<
    S: crate::store::DefinitionStore
        + crate::store::SessionStore
        + crate::store::ReadStore
        + crate::store::ComponentStore
        + crate::store::OperatorStore
        + crate::store::ApprovalStore
        + crate::store::CourseStore
        + 'static,
>(
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
    let order = match action {
        Action::Query => Ok(Order::Query),
        Action::Retry => Ok(Order::Retry),
        Action::Resolve => match form_json(&form.output) {
            Ok(output) => Order::resolve(
                Some(&form.outcome),
                Some(&form.evidence),
                Some(&form.reason),
                Some(&form.external_reference),
                output,
            ),
            Err((_, message)) => Err(crate::operator::InvalidOrder {
                field: "output",
                message: message.replace("the input", "the receipt output"),
            }),
        },
        Action::Escalate => Order::escalate(Some(&form.note)),
        Action::Compensate => Order::compensate(Some(&form.reason)),
        Action::Exception => Order::exception(Some(&form.reason), Some(&form.evidence)),
        Action::Approve => Order::approve(Some(&form.digest), Some(&form.note)),
        Action::Reject => Order::reject(Some(&form.reason)),
    };
    let order = match order {
        Ok(order) => order,
        Err(e) => {
            return step_response(
                &c,
                &who,
                &id,
                &step,
                None,
                Some(e.message),
                StatusCode::BAD_REQUEST,
            )
            .await;
        }
    };
    let target = Target {
        workflow_id: id.clone(),
        step: step.clone(),
    };
    let decides = matches!(action, Action::Approve | Action::Reject);
    let page = if decides { "approvals" } else { "steps" };
    let (status, message) =
        match perform(&c.ctx, &who.principal, target, order, form.key.clone()).await {
            Ok(ActionResult::Applied(_)) => {
                return Redirect::to(&format!(
                    "/console/workflows/{}/{page}/{}?done={}",
                    pages::path_part(&id),
                    pages::path_part(&step),
                    action.as_str()
                ))
                .into_response();
            }
            Ok(ActionResult::Refused(refusal)) if refusal.code == "consequence_changed" => (
                StatusCode::CONFLICT,
                "The consequence changed since this page was opened (the request was revised): nothing was approved. Read the new consequence below; approve it if it is right.".to_string(),
            ),
            Ok(ActionResult::Refused(refusal)) => (StatusCode::CONFLICT, refusal.message),
            Err(e) => desk_error(e),
        };
    if decides {
        return approval_response(&c, &who, &id, &step, None, Some(message), status).await;
    }
    if !who.principal.has(crate::access::Role::Operator) {
        return html(status, pages::problem(&who, &message));
    }
    step_response(&c, &who, &id, &step, None, Some(message), status).await
}

/// `GET /console/approvals`: the approvals the signed-in person may decide.
async fn approval_list<
    S: crate::store::SessionStore + crate::store::ApprovalStore + crate::store::DefinitionStore,
>(
    State(c): State<Shared<S>>,
    headers: HeaderMap,
) -> Response {
    let who = match signed_in(&c, &headers).await {
        Ok(s) => s,
        Err(r) => return *r,
    };
    if !who.principal.has(crate::access::Role::Approver) {
        return html(
            StatusCode::FORBIDDEN,
            pages::problem(&who, "Deciding approvals needs the approver role."),
        );
    }
    match approvals::list(&c.ctx, &who).await {
        Ok(page) => html(StatusCode::OK, page),
        Err(e) => page_error(&who, e),
    }
}

/// `GET /console/workflows/{id}/approvals/{step}`: one approval and its forms.
async fn approval_page<
    S: crate::store::SessionStore
        + crate::store::ApprovalStore
        + crate::store::DefinitionStore
        + crate::store::ReadStore,
>(
    State(c): State<Shared<S>>,
    headers: HeaderMap,
    Path((id, step)): Path<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let who = match signed_in(&c, &headers).await {
        Ok(s) => s,
        Err(r) => return *r,
    };
    let notice = q.get("done").map(|a| match a.as_str() {
        "approve" => "Approved: the approved steps run now.".to_string(),
        "reject" => "Rejected: the step failed.".to_string(),
        other => format!("The {other} action was recorded."),
    });
    approval_response(&c, &who, &id, &step, notice, None, StatusCode::OK).await
}

async fn approval_response<
    S: crate::store::ApprovalStore + crate::store::DefinitionStore + crate::store::ReadStore,
>(
    c: &Console<S>,
    who: &session::Session,
    id: &str,
    step: &str,
    notice: Option<String>,
    error: Option<String>,
    status: StatusCode,
) -> Response {
    match approvals::page(&c.ctx, who, id, step, notice, error).await {
        Ok(Some(page)) => html(status, page),
        Ok(None) => html(
            StatusCode::NOT_FOUND,
            pages::problem(
                who,
                &format!("Workflow {id} has no approval step {step} that you may decide."),
            ),
        ),
        Err(e) => page_error(who, e),
    }
}

/// An action that could not be taken, as the status and message of the step page.
/// A form's JSON input: none when left empty, refused when it is not I-JSON (text, or an
/// object naming a member twice), with what is wrong.
fn form_json(text: &str) -> Result<Option<serde_json::Value>, (StatusCode, String)> {
    if text.trim().is_empty() {
        return Ok(None);
    }
    crate::intent::parse_json(text.as_bytes())
        .map(Some)
        .map_err(|e| {
            (
                StatusCode::BAD_REQUEST,
                format!("the input is not valid JSON: {e}"),
            )
        })
}

fn desk_error(e: DeskError) -> (StatusCode, String) {
    let status = match &e {
        DeskError::NotFound(_) => StatusCode::NOT_FOUND,
        DeskError::Forbidden | DeskError::NoWorkflowRole | DeskError::NotApprover(_) => {
            StatusCode::FORBIDDEN
        }
        DeskError::KeyConflict(_) => StatusCode::CONFLICT,
        DeskError::InvalidInput { .. } => StatusCode::UNPROCESSABLE_ENTITY,
        DeskError::Store(cause) => {
            tracing::warn!("console action: {cause}");
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                "docket cannot reach its database; the action may not have been recorded. Open the page again to see the step as it stands.".into(),
            );
        }
        DeskError::Internal(cause) => {
            tracing::error!("console action: {cause}");
            return (
                StatusCode::INTERNAL_SERVER_ERROR,
                "the action failed; the cause is in the host's log".into(),
            );
        }
    };
    (status, e.to_string())
}

async fn adapters<S: crate::store::SessionStore + crate::store::ComponentStore>(
    State(c): State<Shared<S>>,
    headers: HeaderMap,
) -> Response {
    let who = match operator_in(&c, &headers).await {
        Ok(s) => s,
        Err(r) => return *r,
    };
    match pages::adapters(&c.ctx, &who).await {
        Ok(page) => html(StatusCode::OK, page),
        Err(e) => page_error(&who, e),
    }
}

/// `GET /console/evidence`: what providers posted, the inbox first.
async fn evidence_page<S: crate::store::SessionStore + crate::store::EvidenceStore>(
    State(c): State<Shared<S>>,
    headers: HeaderMap,
) -> Response {
    let who = match operator_in(&c, &headers).await {
        Ok(s) => s,
        Err(r) => return *r,
    };
    match evidence::page(&c.ctx, &who).await {
        Ok(page) => html(StatusCode::OK, page),
        Err(e) => page_error(&who, e),
    }
}

/// Every console form decoded from `body` (as a browser would post it), and every order
/// the console builds from one: for the fuzzer, which holds that none of this panics.
#[cfg(test)]
pub(crate) fn orders_from_form(body: &[u8]) {
    use crate::operator::{CancelOrder, ExtendOrder, Order, ReplaceOrder, ReviseOrder};
    let _ = serde_urlencoded::from_bytes::<SignInForm>(body);
    if let Ok(form) = serde_urlencoded::from_bytes::<CourseForm>(body) {
        let _ = CancelOrder::new(Some(&form.reason), false);
        let input = form_json(&form.input).ok().flatten();
        let _ = ReviseOrder::new(input.clone(), Some(&form.reason));
        let _ = ReplaceOrder::new(input, Some(&form.reason), form.cancel_original.is_some());
        let _ = form
            .amounts()
            .and_then(|add| ExtendOrder::new(add, Some(&form.reason)).map_err(|e| e.message));
    }
    if let Ok(form) = serde_urlencoded::from_bytes::<ActionForm>(body) {
        let _ = Order::resolve(
            Some(&form.outcome),
            Some(&form.evidence),
            Some(&form.reason),
            Some(&form.external_reference),
            form_json(&form.output).ok().flatten(),
        );
        let _ = Order::escalate(Some(&form.note));
        let _ = Order::compensate(Some(&form.reason));
        let _ = Order::exception(Some(&form.reason), Some(&form.evidence));
    }
}
