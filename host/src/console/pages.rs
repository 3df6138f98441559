//! The console's pages (maud templates): sign-in, workflows, one workflow, a stuck step,
//! adapters. Reads go through the same store traits and projections as the API.

use super::session::{Session, random_token};
use crate::catalog::registry;
use crate::context::Context;
use crate::contract::Contract;
use crate::intent::{EventKind, StepState, WorkflowId, WorkflowState};
use crate::store::{AttemptRecord, WorkflowFilter};
use crate::view::{rfc3339, shorten_identity, workflow_view};
use maud::{DOCTYPE, Markup, PreEscaped, html};
use std::collections::HashMap;

/// Why a page could not be rendered, by what the operator does next.
#[derive(Debug, thiserror::Error)]
pub enum PageError {
    /// A filter or parameter the operator can correct; the message says how.
    #[error("{0}")]
    BadRequest(String),
    /// The database failed: the details go to the log, not the page.
    #[error("docket cannot read its database right now; try again shortly")]
    Store(#[from] crate::store::StoreError),
}

/// The latest events of one step its page shows (a stuck step's story is seldom longer).
const STEP_EVENTS: u32 = 500;

/// Items of a batch step shown per page of its step page.
const ITEMS_PAGE: usize = 50;

/// Events shown per page of a workflow's timeline.
pub const EVENTS_PER_PAGE: usize = 50;
/// Workflows per page of the list.
const WORKFLOWS_PER_PAGE: u32 = 50;
/// Log lines shown per attempt, and characters per line.
const LOG_LINES: usize = 20;
const LOG_LINE_CHARS: usize = 240;

const STYLE: &str = r#"
body{font:15px/1.45 system-ui,sans-serif;margin:0;color:#1b1f24;background:#f6f7f9}
header{background:#1f2933;color:#fff;padding:.6em 1.2em;display:flex;gap:1.2em;align-items:center}
header a{color:#fff;text-decoration:none}header .who{margin-left:auto;opacity:.85}
header form{display:inline}header button{background:none;border:1px solid #fff6;color:#fff;border-radius:4px;cursor:pointer}
main{max-width:1100px;margin:1.2em auto;padding:0 1.2em}
h1{font-size:1.4em;margin:.2em 0}h2{font-size:1.15em;margin:1.4em 0 .4em}
table{border-collapse:collapse;width:100%;background:#fff}td,th{padding:.35em .5em;border-bottom:1px solid #e3e6ea;text-align:left;vertical-align:top}
th{font-weight:600;background:#eef0f3}
.state{display:inline-block;padding:0 .45em;border-radius:3px;font-size:.85em;background:#e3e6ea}
.state.needs_review,.state.outcome_unknown,.state.waiting_for_review,.state.blocked{background:#fde68a}
.state.awaiting_approval{background:#bfdbfe}.state.completed,.state.succeeded{background:#bbf7d0}.state.failed,.state.failed_terminal{background:#fecaca}
.kind{font-size:.8em;text-transform:uppercase;letter-spacing:.04em;padding:0 .35em;border-radius:3px}
.kind.observation{background:#dbeafe}.kind.action{background:#ede9fe}.kind.conclusion{background:#dcfce7}
.box{background:#fff;border:1px solid #e3e6ea;border-radius:6px;padding:.8em 1em;margin:.6em 0}
.next{border-left:4px solid #f59e0b}.notice{border-left:4px solid #16a34a}.error{border-left:4px solid #dc2626}
.muted{color:#5b6570}code{font-size:.9em}ol.milestones{padding-left:1.4em}
form.action{margin:.4em 0}label{display:block;margin:.3em 0 .1em}
input[type=text],textarea,select{width:100%;max-width:40em;padding:.3em;box-sizing:border-box}
button.go{margin-top:.5em;padding:.35em .9em}details{margin:.4em 0}summary{cursor:pointer}
pre{white-space:pre-wrap;word-break:break-all;background:#f1f3f5;padding:.5em;margin:0}
"#;

/// A URL path segment: ids and step names are plain, but never trust that.
pub fn path_part(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn short(text: &str) -> String {
    match text.split_once(':') {
        Some((algo, hex)) if hex.len() > 12 => format!("{algo}:{}…", &hex[..12]),
        _ => text.to_string(),
    }
}

/// Refreshes a workflow page in place when its revision moves (a long-poll of the same page),
/// unless the operator is typing in one of its forms. Without JavaScript the page is the
/// same, reloaded by hand.
const REFRESH: &str = r#"(function(){var m=document.querySelector('main[data-revision]');
if(!m||!window.fetch||!window.DOMParser)return;
function poll(){fetch(m.dataset.poll+'?wait=25&after='+m.dataset.revision,{credentials:'same-origin'})
.then(function(r){return r.ok?r.text():Promise.reject(r.status)})
.then(function(t){var n=new DOMParser().parseFromString(t,'text/html').querySelector('main[data-revision]');
var typing=document.activeElement&&m.contains(document.activeElement)&&document.activeElement.form;
if(n&&n.dataset.revision!==m.dataset.revision&&!typing){m.innerHTML=n.innerHTML;m.dataset.revision=n.dataset.revision;}
poll();}).catch(function(){setTimeout(poll,5000)});}
poll();})();"#;

pub(super) fn layout(who: Option<&Session>, title: &str, body: Markup) -> Markup {
    layout_at(who, title, body, None)
}

/// A page; with `refresh` (the workflow page's path and the revision shown), one that
/// refreshes itself when the workflow's revision moves.
fn layout_at(
    who: Option<&Session>,
    title: &str,
    body: Markup,
    refresh: Option<(String, u64)>,
) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · docket" }
                style { (PreEscaped(STYLE)) }
            }
            body {
                header {
                    strong { "docket" }
                    @if let Some(who) = who {
                        @if who.principal.has(crate::access::Role::Operator) {
                            a href="/console/workflows?state=needs_review" { "Needs review" }
                            a href="/console/workflows" { "Workflows" }
                            a href="/console/adapters" { "Adapters" }
                            a href="/console/evidence" { "Evidence" }
                        }
                        @if who.principal.has(crate::access::Role::Approver) {
                            a href="/console/approvals" { "Approvals" }
                        }
                        span.who {
                            "Signed in as " strong { (who.principal.subject.0) } " "
                            form method="post" action="/console/sign-out" {
                                button type="submit" { "Sign out" }
                            }
                        }
                    }
                }
                @if let Some((path, revision)) = refresh {
                    main data-poll=(path) data-revision=(revision) { (body) }
                    script { (PreEscaped(REFRESH)) }
                } @else {
                    main { (body) }
                }
            }
        }
    }
}

pub fn sign_in(open: bool, error: Option<&str>) -> Markup {
    layout(
        None,
        "Sign in",
        html! {
            h1 { "Sign in to the recovery console" }
            @if let Some(e) = error { div.box.error { (e) } }
            form.box method="post" action="/console/sign-in" {
                @if open {
                    p.muted { "This host has no API tokens configured and listens on loopback only: you act as the local operator." }
                    input type="hidden" name="token" value="";
                } @else {
                    label for="token" { "Operator token" }
                    input #token type="password" name="token" autocomplete="off" required;
                }
                button.go type="submit" { "Sign in" }
            }
        },
    )
}

/// A request refused before anyone signed in (another site's page, a rebound name).
pub fn refused(message: &str) -> Markup {
    layout(
        None,
        "Refused",
        html! {
            h1 { "Refused" }
            div.box.error { (message) }
        },
    )
}

pub fn problem(who: &Session, message: &str) -> Markup {
    let (back, label) = if who.principal.has(crate::access::Role::Operator) {
        ("/console/workflows", "Back to the workflows")
    } else {
        ("/console/approvals", "Back to the approvals")
    };
    layout(
        Some(who),
        "Problem",
        html! { div.box.error { (message) } p { a href=(back) { (label) } } },
    )
}

pub(super) fn state_badge(state: &str) -> Markup {
    html! { span class={ "state " (state) } { (state.replace('_', " ")) } }
}

fn kind_badge(kind: EventKind) -> Markup {
    html! { span class={ "kind " (kind.as_str()) } { (kind.as_str()) } }
}

/// The workflows list: the needs-review queue first, then every workflow newest first,
/// filtered by state, definition and age, paginated.
pub async fn workflows<S: crate::store::ReadStore>(
    ctx: &Context<S>,
    who: &Session,
    q: &HashMap<String, String>,
) -> Result<Markup, PageError> {
    let state = match q.get("state").filter(|s| !s.is_empty()) {
        Some(s) => Some(
            s.parse::<WorkflowState>()
                .map_err(|e| PageError::BadRequest(e.to_string()))?,
        ),
        None => None,
    };
    let definition = q.get("workflow").filter(|s| !s.is_empty()).cloned();
    let age = q.get("age").filter(|s| !s.is_empty()).cloned();
    let max_age_ms = match age.as_deref() {
        None | Some("all") => None,
        Some(a) => Some(
            humantime::parse_duration(a)
                .map_err(|e| PageError::BadRequest(format!("age `{a}`: {e}; write e.g. 2h or 7d")))?
                .as_millis() as u64,
        ),
    };
    let before = q.get("cursor").and_then(|c| {
        let (at, id) = c.split_once('~')?;
        Some((at.parse().ok()?, WorkflowId(id.to_string())))
    });
    let now = ctx.clock_now();
    let mut rows = ctx
        .store
        .list_workflows(&WorkflowFilter {
            subject: None,
            state,
            workflow: definition.clone(),
            before,
            limit: WORKFLOWS_PER_PAGE + 1,
        })
        .await?;
    if let Some(max) = max_age_ms {
        rows.retain(|w| now.saturating_sub(w.created_at) <= max);
    }
    let more = rows.len() > WORKFLOWS_PER_PAGE as usize;
    rows.truncate(WORKFLOWS_PER_PAGE as usize);
    let review = if state.is_none() && q.get("cursor").is_none() {
        ctx.store
            .list_workflows(&WorkflowFilter {
                subject: None,
                state: Some(WorkflowState::NeedsReview),
                workflow: definition.clone(),
                before: None,
                limit: 100,
            })
            .await?
    } else {
        Vec::new()
    };
    let next = rows.last().filter(|_| more).map(|w| {
        let mut params = vec![format!(
            "cursor={}~{}",
            w.created_at,
            path_part(w.workflow_id.as_str())
        )];
        if let Some(s) = state {
            params.push(format!("state={}", s.as_str()));
        }
        if let Some(d) = &definition {
            params.push(format!("workflow={}", path_part(d)));
        }
        if let Some(a) = &age {
            params.push(format!("age={}", path_part(a)));
        }
        format!("/console/workflows?{}", params.join("&"))
    });
    let row = |w: &crate::store::WorkflowRecord| {
        html! {
            tr {
                td { a href={ "/console/workflows/" (path_part(w.workflow_id.as_str())) } { code { (w.workflow_id.as_str()) } } }
                td { (w.workflow) " v" (w.definition_version) }
                td { (state_badge(w.state.as_str())) }
                td { (rfc3339(w.created_at)) }
                td { code { (w.idempotency_key) } }
            }
        }
    };
    Ok(layout(
        Some(who),
        "Workflows",
        html! {
            @if !review.is_empty() {
                h1 { "Needs review (" (review.len()) ")" }
                p.muted { "These wait for a person's decision; open one to see what is known and what is safe to do." }
                table { tr { th { "Workflow" } th { "Definition" } th { "State" } th { "Created" } th { "Key" } }
                    @for w in &review { (row(w)) } }
            }
            h1 { "Workflows" }
            form.box method="get" action="/console/workflows" {
                label for="state" { "State" }
                select #state name="state" {
                    option value="" selected[state.is_none()] { "any" }
                    @for s in WorkflowState::ALL {
                        option value=(s.as_str()) selected[state == Some(*s)] { (s.as_str().replace('_', " ")) }
                    }
                }
                label for="workflow" { "Definition" }
                input #workflow type="text" name="workflow" value=(definition.clone().unwrap_or_default()) placeholder="e.g. document-delivery";
                label for="age" { "Created within" }
                select #age name="age" {
                    @for (v, text) in [("all", "any time"), ("1h", "the last hour"), ("24h", "the last day"), ("7d", "the last week")] {
                        option value=(v) selected[age.as_deref().unwrap_or("all") == v] { (text) }
                    }
                }
                button.go type="submit" { "Filter" }
            }
            @if rows.is_empty() {
                p.muted { "No workflows match." }
            } @else {
                table { tr { th { "Workflow" } th { "Definition" } th { "State" } th { "Created" } th { "Key" } }
                    @for w in &rows { (row(w)) } }
            }
            @if let Some(next) = next { p { a href=(next) { "Older workflows →" } } }
        },
    ))
}

fn attempt_rows(attempts: &[AttemptRecord]) -> Markup {
    html! {
        table {
            tr { th { "#" } th { "Trigger" } th { "Lease owner" } th { "Adapter version" } th { "Input digest" } th { "Request identity" } th { "Checkpoint" } th { "Outcome" } th { "Observation" } }
            @for a in attempts {
                tr {
                    td { (a.number) }
                    td { (a.trigger.as_str().replace('_', " ")) }
                    td { code { (a.lease_owner) } }
                    td {
                        @if let Some(p) = &a.provenance {
                            (p.component) "@" (p.component_version) br;
                            code.muted title=(p.component_digest) { (short(&p.component_digest)) }
                        }
                    }
                    td { @if let Some(p) = &a.provenance { code title=(p.input_digest) { (short(&p.input_digest)) } } }
                    td { @if let Some(r) = &a.request_identity { code { (shorten_identity(r)) } } @else { span.muted { "not sent" } } }
                    td { (a.checkpoint) }
                    td { (a.outcome.as_str().replace('_', " ")) }
                    td {
                        @if let Some(o) = &a.observation { (o) }
                        @if let Some(lines) = a.log.as_array().filter(|l| !l.is_empty()) {
                            details { summary { "log (" (lines.len()) " lines)" }
                                pre { @for line in lines.iter().take(LOG_LINES) {
                                    (line.as_str().map(str::to_string).unwrap_or_else(|| line.to_string()).chars().take(LOG_LINE_CHARS).collect::<String>()) "\n"
                                } @if lines.len() > LOG_LINES { "… " (lines.len() - LOG_LINES) " more lines" } }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// One workflow: what it is for, where it stands in words, milestones, the next action a
/// person must take, the timeline (latest events first page, observations, actions and
/// conclusions told apart), and the attempts folded under technical details.
pub async fn render_workflow_page<
    S: crate::store::DefinitionStore
        + crate::store::CourseStore
        + crate::store::NotificationStore
        + crate::store::ReadStore,
>(
    ctx: &Context<S>,
    who: &Session,
    id: &str,
    events_before: Option<u64>,
) -> Result<Option<Markup>, PageError> {
    let wid = WorkflowId(id.to_string());
    let Some(record) = ctx.store.workflow(&wid).await.map_err(PageError::from)? else {
        return Ok(None);
    };
    workflow_page(ctx, who, record, events_before, None, None)
        .await
        .map(Some)
}

/// The workflow page of `record`, with a notice or an error from a change just asked for.
pub async fn workflow_page<
    S: crate::store::DefinitionStore
        + crate::store::NotificationStore
        + crate::store::CourseStore
        + crate::store::ReadStore,
>(
    ctx: &Context<S>,
    who: &Session,
    record: crate::store::WorkflowRecord,
    events_before: Option<u64>,
    notice: Option<String>,
    error: Option<String>,
) -> Result<Markup, PageError> {
    let id = record.workflow_id.as_str();
    let wid = record.workflow_id.clone();
    let cancellation = if record.cancelled {
        ctx.store
            .cancellation(&wid)
            .await
            .map_err(PageError::from)?
    } else {
        None
    };
    let revisions = if record.input_revision > 1 {
        ctx.store.revisions(&wid).await.map_err(PageError::from)?
    } else {
        Vec::new()
    };
    let def = ctx
        .deployments
        .get(&record.workflow, record.definition_version)
        .await
        .ok()
        .flatten();
    let steps = ctx.store.steps(&wid).await.map_err(PageError::from)?;
    let receipts = ctx.store.receipts(&wid).await.map_err(PageError::from)?;
    let view = workflow_view(&record, def.as_ref().map(|d| &d.def), &steps, &receipts);
    let notifications: Vec<crate::view::NotificationView> = ctx
        .store
        .notifications(crate::store::NotificationFilter {
            workflow_id: Some(wid.clone()),
            limit: 100,
            ..Default::default()
        })
        .await
        .map_err(PageError::from)?
        .into_iter()
        .map(Into::into)
        .collect();
    // One more than a page tells whether older events exist.
    let mut page = ctx
        .store
        .timeline_latest(&wid, None, events_before, EVENTS_PER_PAGE as u32 + 1)
        .await
        .map_err(PageError::from)?;
    let older = page.len() > EVENTS_PER_PAGE;
    if older {
        page.remove(0);
    }
    let mut attempts = Vec::new();
    for s in &view.steps {
        attempts.push((
            s.label.clone(),
            ctx.store
                .attempts(&wid, &s.id, 0, 10_000)
                .await
                .map_err(PageError::from)?,
        ));
        if let Some(c) = &s.compensation {
            attempts.push((
                format!("Compensation of {}", s.label),
                ctx.store
                    .attempts(&wid, &c.id, 0, 10_000)
                    .await
                    .map_err(PageError::from)?,
            ));
        }
    }
    let base = format!("/console/workflows/{}", path_part(id));
    let label_of = |step: &str| {
        view.steps
            .iter()
            .find(|s| s.id == step)
            .map_or(step.to_string(), |s| s.label.clone())
    };
    let course_form = |action: &str,
                       title: &str,
                       consequences: &[crate::course::Consequence],
                       fields: Markup| {
        html! {
            form.action.box method="post" action={ (base) "/course/" (action) } {
                h3 { (title) }
                p.muted { (course_consequence(action)) }
                @if !consequences.is_empty() {
                    p { "Effects already made:" }
                    ul {
                        @for c in consequences {
                            li {
                                (label_of(&c.step))
                                @if let Some(r) = &c.external_reference { " (" code { (r) } ")" }
                                " — "
                                @if c.compensation == crate::course::Compensability::WillCompensate {
                                    "will be reversed by a compensation"
                                } @else {
                                    "cannot be reversed and stays"
                                }
                            }
                        }
                    }
                }
                input type="hidden" name="csrf" value=(who.csrf);
                input type="hidden" name="key" value=(random_token());
                (fields)
                button.go type="submit" name="go" value=(action) { (title) }
            }
        }
    };
    let reason_field = html! {
        label { "Reason" }
        textarea name="reason" rows="2" required {}
    };
    Ok(layout_at(
        Some(who),
        &format!("{} {}", record.workflow, id),
        html! {
            p.muted { a href="/console/workflows" { "← Workflows" } }
            h1 { (record.workflow) " v" (record.definition_version) " " (state_badge(view.state.as_str())) }
            p { code { (id) } " · key " code { (record.idempotency_key) } " · by " (record.subject.0) " · created " (view.created_at)
                @if record.input_revision > 1 { " · input revision " (record.input_revision) }
                @if let Some(v) = record.migrated_from { " · migrated from v" (v) }
                @if let Some(r) = &record.replaces { " · replaces " a href={ "/console/workflows/" (path_part(r.as_str())) } { (r) } }
                @if let Some(r) = &record.replaced_by { " · replaced by " a href={ "/console/workflows/" (path_part(r.as_str())) } { (r) } }
            }
            @if let Some(n) = &notice { div.box.notice { (n) } }
            @if let Some(err) = &error { div.box.error { "Refused: " (err) } }
            div.box { strong { (view.status_text) } }
            @if let Some(c) = &cancellation {
                div.box {
                    (if c.withdraw { "Withdrawal " } else { "Cancellation " }) code { (c.cancellation_id) }
                    " requested by " strong { (c.requested_by) } " at " (rfc3339(c.requested_at)) ": " (c.reason)
                    p.muted { (c.message) }
                }
            }
            @if let Some(next) = &view.next_action {
                @let label = view.steps.iter().find(|s| s.id == next.step).map(|s| s.label.clone()).unwrap_or_else(|| next.step.clone());
                div.box.next {
                    @if next.kind == "approval" {
                        "A person must approve: " strong { (label) } " waits for a decision on its consequence. "
                        a href={ (base) "/approvals/" (path_part(&next.step)) } { "Open the approval →" }
                    } @else {
                        "A person must decide: " strong { (label) } " waits for review. "
                        a href={ (base) "/steps/" (path_part(&next.step)) } { "Open the step to decide →" }
                    }
                }
            }
            h2 { "Milestones" }
            ol.milestones {
                @for m in &view.milestones {
                    li { @if let Some(at) = &m.reached_at { "✓ " (m.name) span.muted { " — " (at) } } @else { span.muted { "○ " (m.name) " — not yet" } } }
                }
            }
            h2 { "Steps" }
            table {
                tr { th { "Step" } th { "State" } th { "Attempts" } th { "Receipt" } }
                @for s in &view.steps {
                    tr {
                        td { a href={ (base) "/steps/" (path_part(&s.id)) } { (s.label) } }
                        td { (state_badge(s.state.as_str())) }
                        td { (s.attempts) }
                        td { @if let Some(r) = &s.receipt {
                            (r.evidence_kind.as_str().replace('_', " ")) " · " (r.provenance.component) "@" (r.provenance.component_version)
                            @if let Some(x) = &r.external_reference { " · " code { (x) } }
                            @if let Some(a) = &r.author { " · by " (a) }
                        }
                        @if let Some(until) = &s.retention_deadline {
                            span.muted { "key remembered until " (until) }
                        }
                        @if !s.superseded_receipts.is_empty() {
                            details {
                                summary { "Superseded receipts (" (s.superseded_receipts.len()) ")" }
                                ul {
                                    @for r in &s.superseded_receipts {
                                        li { code { (r.receipt_id) } " · superseded by input revision " (r.superseded_by.unwrap_or_default()) " · input " code { (short(&r.provenance.input_digest)) } }
                                    }
                                }
                            }
                        } }
                    }
                    // A compensation beside the effect it reverses.
                    @if let Some(c) = &s.compensation {
                        tr.compensation {
                            td { "↳ " a href={ (base) "/steps/" (path_part(&c.id)) } { "Compensation of " (s.label) } }
                            td { (state_badge(c.state.as_str())) }
                            td { (c.attempts) }
                            td { @if let Some(r) = &c.receipt {
                                (r.evidence_kind.as_str().replace('_', " ")) " · reversed "
                                @if let Some(x) = &r.external_reference { code { (x) } }
                            } }
                        }
                    }
                }
            }
            @if let Some(b) = &view.budget {
                h2 { "Budget" }
                (budget_section(who, id, b, !record.state.is_ended()))
            }
            @if !revisions.is_empty() {
                h2 { "Input revisions" }
                table {
                    tr { th { "Revision" } th { "By" } th { "When" } th { "Reason" } th { "Input" } th { "Runs again" } }
                    @for r in &revisions {
                        tr {
                            td { (r.input_revision) }
                            td { (r.author) }
                            td { (rfc3339(r.at)) }
                            td { (r.reason) }
                            td {
                                code title=(r.input_digest) { (short(&r.input_digest)) }
                                @if let Some(input) = &r.input {
                                    details { summary { "as recorded" } pre { (input) } }
                                } @else {
                                    " (text not kept)"
                                }
                            }
                            td { (r.invalidated_steps.join(", ")) }
                        }
                    }
                }
            }
            @if !view.actions.is_empty() {
                h2 { "Change of course" }
                @for a in &view.actions {
                    @match a.action {
                        "cancel" => (course_form("cancel", a.label, &a.consequences, reason_field.clone())),
                        "withdraw" => (course_form("withdraw", a.label, &a.consequences, reason_field.clone())),
                        "revise" => (course_form("revise", a.label, &[], html! {
                            label { "Corrected input (JSON)" }
                            textarea name="input" rows="4" required { (record.input) }
                            (reason_field.clone())
                        })),
                        "replace" => (course_form("replace", a.label, &a.consequences, html! {
                            label { "Corrected input (JSON)" }
                            textarea name="input" rows="4" required { (record.input) }
                            (reason_field.clone())
                            @if !record.cancelled && !record.state.is_ended() {
                                label { input type="checkbox" name="cancel_original" value="true"; " Cancel this workflow too" }
                            }
                        })),
                        _ => {}
                    }
                }
            }
            @if !notifications.is_empty() {
                h2 { "Notifications" }
                table.notifications {
                    tr { th { "Event" } th { "State" } th { "Attempts" } th { "Written" } th { "Delivered to" } th { "Last error" } }
                    @for n in &notifications {
                        tr {
                            td { code { (n.kind) } }
                            td { (state_badge(&n.state)) }
                            td { (n.attempts) }
                            td { (n.created_at) }
                            td { (n.delivered_to.join(", ")) }
                            td { @if let Some(e) = &n.last_error { (e) } }
                        }
                    }
                }
            }
            h2 { "Timeline" }
            p.muted { "Latest " (page.len()) " events, oldest first. Observations are what docket saw, actions what it did, conclusions what it decided." }
            @if older {
                @if let Some(first) = page.first() {
                    p { a href={ (base) "?events_before=" (first.seq) } { "← Older events" } }
                }
            }
            table {
                tr { th { "#" } th { "When" } th { "Kind" } th { "Step" } th { "What" } }
                @for ev in &page {
                    tr class={ "event " (ev.kind.as_str()) } {
                        td { (ev.seq) }
                        td { (rfc3339(ev.at)) }
                        td { (kind_badge(ev.kind)) }
                        td { (ev.step.clone().unwrap_or_default()) }
                        td { (ev.text) }
                    }
                }
            }
            @if events_before.is_some() { p { a href=(base) { "Latest events →" } } }
            h2 { "Technical details" }
            @for (label, list) in &attempts {
                details.attempts {
                    summary { "Attempts of " (label) " (" (list.len()) ")" }
                    (attempt_rows(list))
                }
            }
        },
        // An older page of the timeline stays as it is; the latest refreshes itself.
        events_before.is_none().then(|| {
            (
                format!("/console/workflows/{}", path_part(id)),
                record.revision,
            )
        }),
    ))
}

/// What a change of course would do, in words.
/// The `budget` block as a table, with the form that extends it (operators, on a workflow
/// that has not ended).
fn budget_section(
    who: &Session,
    workflow_id: &str,
    budget: &crate::budget::BudgetView,
    open: bool,
) -> Markup {
    let row = |name: &str, u: &crate::budget::UsedOf| {
        html! { tr { td { (name) } td { (u.used) } td { (u.limit) } } }
    };
    html! {
        table.budget {
            tr { th { "Budget" } th { "Used" } th { "Limit" } }
            (row("Attempts", &budget.attempts))
            (row("Runtime (ms)", &budget.runtime_ms))
            (row("External calls", &budget.external_calls))
            @if let Some(c) = &budget.cost { (row("Cost units", c)) }
            tr { td { "Recovery room" } td colspan="2" { (budget.recovery_queries_left) " recovery queries left once the attempts are spent" } }
        }
        @if open && who.principal.has(crate::access::Role::Operator) {
            form.action.box method="post" action={ "/console/workflows/" (path_part(workflow_id)) "/course/budget" } {
                h3 { "Extend the budget" }
                p.muted { (course_consequence("budget")) }
                input type="hidden" name="csrf" value=(who.csrf);
                input type="hidden" name="key" value=(random_token());
                @for (key, label) in [("attempts", "Attempts"), ("runtime_ms", "Runtime (ms)"), ("external_calls", "External calls"), ("cost", "Cost units"), ("recovery_queries", "Recovery queries")] {
                    label for={ "add-" (key) } { "Add " (label) }
                    input id={ "add-" (key) } type="number" min="0" name={ "add_" (key) } value="0";
                }
                label for="budget-reason" { "Reason" }
                textarea #budget-reason name="reason" rows="2" required {}
                button.go type="submit" name="go" value="budget" { "Extend the budget" }
            }
        }
    }
}

fn course_consequence(action: &str) -> &'static str {
    match action {
        "cancel" => {
            "A cancellation of its own, recorded with your name and reason. Steps that had no effect end at once; a request whose outcome is unknown is investigated first; effects the definition compensates are reversed."
        }
        "withdraw" => {
            "The completed workflow is withdrawn: each effect it can reverse gets a compensation of its own, and the original receipts stay."
        }
        "revise" => {
            "A new input revision. Steps whose input changes run again with it; their earlier attempts and receipts stay, marked superseded."
        }
        "budget" => {
            "The amounts are added to the workflow's limits, recorded with your name and reason. Steps blocked by a limit the workflow is no longer over become ready at once."
        }
        "replace" => {
            "A new request of the same workflow with the corrected input, linked to this one both ways. With the box ticked, this one is cancelled as a cancellation would (the effects listed are reversed where they can be)."
        }
        _ => "",
    }
}

/// What an action would change, in words.
fn consequence(action: &str) -> &'static str {
    match action {
        "query" => {
            "docket asks the provider, by the request's stable reference, whether it received the request. If it did, the step succeeds with a verified receipt; if not, the step waits for you again. Nothing is sent."
        }
        "retry" => {
            "docket sends the same request again under the same idempotency key. The provider recognises the key and does not act twice while it remembers it."
        }
        "resolve" => {
            "You record the outcome yourself. The step ends with a receipt that names you, your evidence and your reason; dependents run if you say it succeeded."
        }
        "escalate" => {
            "Nothing changes in the step; your note goes to the timeline and the step is marked for the next person."
        }
        "exception" => {
            "Exactly one attempt goes through despite the policy; it is recorded with your name, reason and evidence. A later attempt is judged by the policy again."
        }
        "compensate" => {
            "docket asks the adapter to reverse this effect, as a compensation of its own with its own key, attempts and receipt. The step's receipt stays; the step becomes compensated when the reversal is confirmed."
        }
        _ => "",
    }
}

/// A stuck step: what docket intended to request, what evidence exists, which actions are
/// safe now and what each would change. Every form carries a fresh idempotency key.
pub async fn step<
    S: crate::store::DefinitionStore + crate::store::ReadStore + crate::store::ComponentStore,
>(
    ctx: &Context<S>,
    who: &Session,
    id: &str,
    step: &str,
    notice: Option<String>,
    error: Option<String>,
    // A batch step's items are listed a page at a time, from this place in its list.
    items_from: u64,
) -> Result<Option<Markup>, PageError> {
    let wid = WorkflowId(id.to_string());
    let Some(record) = ctx.store.workflow(&wid).await.map_err(PageError::from)? else {
        return Ok(None);
    };
    let steps = ctx.store.steps(&wid).await.map_err(PageError::from)?;
    let Some(rec) = steps.iter().find(|s| s.step == step) else {
        return Ok(None);
    };
    let def = ctx
        .deployments
        .get(&record.workflow, record.definition_version)
        .await
        .ok()
        .flatten();
    // A compensation (`<step>.compensate`) is shown like a step, with its step's adapter.
    let step_def = def
        .as_ref()
        .and_then(|d| crate::scheduler::step_of(&d.def, step));
    let step_def = step_def.as_ref();
    let fields_read = def
        .as_ref()
        .map(|d| d.def.fields_read(step))
        .unwrap_or_default();
    let label = step_def.map_or(step.to_string(), |s| s.label.clone());
    let attempts = ctx
        .store
        .attempts(&wid, step, 0, 10_000)
        .await
        .map_err(PageError::from)?;
    let receipts = ctx.store.receipts(&wid).await.map_err(PageError::from)?;
    let receipt = rec
        .receipt_id
        .as_ref()
        .and_then(|id| receipts.iter().find(|r| &r.receipt_id == id))
        .or_else(|| {
            receipts
                .iter()
                .find(|r| r.step == step && r.superseded_by.is_none())
        });
    // A reversal by hand: an effect that stands on a workflow that will not complete.
    let can_compensate = rec.state == StepState::Succeeded
        && (record.cancelled
            || matches!(
                record.state,
                WorkflowState::Failed | WorkflowState::Cancelled
            ))
        && crate::course::compensated_step(step).is_none()
        && !steps
            .iter()
            .any(|s| s.step == crate::course::compensation_id(step));
    let sent = attempts.iter().rev().find(|a| a.request_identity.is_some());
    let latest = attempts.last();
    let verified = ctx.store.verifications().await.map_err(PageError::from)?;
    let contract: Option<Contract> = ctx.components.as_ref().and_then(|c| {
        latest
            .and_then(|a| a.provenance.as_ref())
            .and_then(|p| c.exact(&p.component, &p.component_version))
            .or_else(|| step_def.and_then(|s| c.resolve(s).ok()))
            .and_then(|c| c.contract().cloned())
    });
    let events = ctx
        .store
        .timeline_latest(&wid, Some(step), None, STEP_EVENTS)
        .await
        .map_err(PageError::from)?;
    // A batch step is acted on item by item.
    let stuck = rec.items.is_none()
        && (rec.state.needs_review()
            || matches!(
                rec.state,
                StepState::FailedTerminal | StepState::FailedRetryable
            ));
    let counts = crate::view::ItemCounts::of(step, &steps);
    let items = if counts.is_some() {
        crate::view::ItemView::of(step, &steps, &receipts)
    } else {
        Vec::new()
    };
    let waiting: Vec<&crate::view::ItemView> = items
        .iter()
        .filter(|i| crate::course::batch::item_needs_person(i.state))
        .take(ITEMS_PAGE)
        .collect();
    let page: Vec<&crate::view::ItemView> = items
        .iter()
        .filter(|i| i.index >= items_from)
        .take(ITEMS_PAGE)
        .collect();
    let next_page = items
        .iter()
        .find(|i| i.index >= items_from + ITEMS_PAGE as u64)
        .map(|i| i.index);
    let item_link = |i: &crate::view::ItemView| {
        format!(
            "/console/workflows/{}/steps/{}",
            path_part(id),
            path_part(&i.step)
        )
    };
    let base = format!(
        "/console/workflows/{}/steps/{}",
        path_part(id),
        path_part(step)
    );
    let form = |action: &'static str, title: &str, fields: Markup| {
        html! {
            form.action.box method="post" action={ (base) "/" (action) } {
                h3 { (title) }
                p.muted { (consequence(action)) }
                input type="hidden" name="csrf" value=(who.csrf);
                // A fresh key per rendered form: pressing twice sends the same key, and the
                // action happens once.
                input type="hidden" name="key" value=(random_token());
                (fields)
                button.go type="submit" name="go" value=(action) { (title) }
            }
        }
    };
    let (can_query, can_retry) = match &contract {
        Some(c) => (c.query.supported, c.idempotency.supported),
        None => (false, false),
    };
    Ok(Some(layout(
        Some(who),
        &format!("{label} · {id}"),
        html! {
            p.muted { a href={ "/console/workflows/" (path_part(id)) } { "← " (record.workflow) " " (id) } }
            h1 { (label) " " (state_badge(rec.state.as_str())) }
            @if let Some(n) = &notice { div.box.notice { (n) } }
            @if let Some(err) = &error { div.box.error { "Refused: " (err) } }
            @if let Some(note) = &rec.note { div.box { (note) } }

            @if let Some(c) = &counts {
                h2 { "Items" }
                div.box {
                    p { (c.total) " items, each an effect of its own: "
                        (c.succeeded) " succeeded · " (c.running) " running · " (c.pending) " not begun · "
                        (c.outcome_unknown) " outcome unknown · " (c.failed) " failed · "
                        (c.cancelled) " cancelled · " (c.compensated) " compensated" }
                    @if !waiting.is_empty() {
                        p { strong { "Waiting for a person: " }
                            @for (n, i) in waiting.iter().enumerate() {
                                @if n > 0 { ", " }
                                a href=(item_link(i)) { (i.item_key) } " (" (i.state.as_str().replace('_', " ")) ")"
                            }
                        }
                    }
                    table {
                        tr { th { "#" } th { "Item" } th { "State" } th { "Attempts" } }
                        @for i in &page {
                            tr {
                                td { (i.index) }
                                td { a href=(item_link(i)) { (i.item_key) } }
                                td { (state_badge(i.state.as_str())) }
                                td { (i.attempts) }
                            }
                        }
                    }
                    @if let Some(next) = next_page {
                        p { a href={ (base) "?items_from=" (next) } { "Next " (ITEMS_PAGE) " items →" } }
                    }
                }
            }

            h2 { "What docket intended to request" }
            div.box {
                @if let Some(s) = step_def {
                    p { (if s.kind == crate::workflow::StepKind::Adapter { "Adapter" } else { "Handler" }) " step using " code { (s.component) " " (s.version_req.to_string()) } }
                }
                @if let Some(a) = sent.or(latest) {
                    @if let Some(p) = &a.provenance {
                        p { "Adapter version: " code { (p.component) "@" (p.component_version) } }
                        @if step_def.is_some_and(|s| s.kind == crate::workflow::StepKind::Adapter) {
                            p { "Its contract: " (verdict(verified.iter().find(|v| v.digest == p.component_digest))) }
                        }
                        p { "Input digest: " code { (p.input_digest) } }
                    }
                }
                @if let Some(a) = sent {
                    p { "External request identity: " code { (shorten_identity(a.request_identity.as_deref().unwrap_or(""))) } span.muted { " (shortened; the full key is never shown)" } }
                    @if let Some(until) = crate::view::retention_deadline(rec) {
                        p { "Retention deadline: " strong { (rfc3339(until)) } span.muted { " — the provider remembers this key until then, so a retry with the same key cannot make a second effect; after it, it could" } }
                    }
                } @else {
                    p.muted { "No attempt reached the point of sending a request." }
                }
                details { summary { "The workflow's input" } pre { (record.input.chars().take(4000).collect::<String>()) } }
            }

            h2 { "What evidence exists" }
            div.box {
                @if let Some(r) = receipt {
                    p { strong { "Receipt: " } (r.evidence_kind.as_str().replace('_', " ")) " from " (r.provenance.component) "@" (r.provenance.component_version)
                        @if let Some(x) = &r.external_reference { " · provider reference " code { (x) } } }
                    @if let Some(a) = &r.author { p { "Resolved by " strong { (a) } } }
                    @if let Some(ev) = &r.evidence { p { "Evidence: " (ev) } }
                    @if let Some(why) = &r.reason { p { "Reason: " (why) } }
                } @else {
                    p.muted { "No receipt: nothing has proven the outcome yet." }
                }
                ul {
                    @for a in &attempts {
                        li {
                            "Attempt " (a.number) " (" (a.trigger.as_str().replace('_', " ")) ", " (a.lease_owner) "): "
                            @if a.checkpoint >= 3 { "the request may have reached the provider; " } @else { "nothing was sent; " }
                            (a.outcome.as_str().replace('_', " "))
                            @if let Some(o) = &a.observation { " — " (o) }
                        }
                    }
                }
                @for ev in events.iter().filter(|ev| ev.kind == EventKind::Observation).rev().take(10) {
                    p { (kind_badge(ev.kind)) " " (ev.text) }
                }
            }

            h2 { "Which actions are safe now" }
            @if can_compensate {
                @if contract.as_ref().is_some_and(|c| c.compensation.supported) {
                    (form("compensate", "Reverse this effect", html! {
                        label for="reason" { "Reason" }
                        textarea #reason name="reason" rows="2" required {}
                    }))
                } @else {
                    p.muted { "Reverse: not possible — this adapter does not declare compensation." }
                }
            }
            @if let Some(n) = counts.as_ref().map(|c| c.outcome_unknown + c.failed) {
                p.muted { "A batch step is acted on item by item: open an item above." }
                @if n > 0 {
                    (form("retry", "Retry the unresolved items", html! {
                        p.muted { "Each item whose outcome is unknown, or that is blocked or failed, is retried on its own, with its own key; completed items stay complete." }
                    }))
                }
            } @else if !stuck {
                p.muted { "Nothing to decide: the step is " (rec.state.as_str().replace('_', " ")) "." }
            } @else {
                @if can_query {
                    (form("query", "Query the provider", html! {}))
                } @else {
                    p.muted { "Query: not possible — this adapter cannot look a request up." }
                }
                @if can_retry {
                    (form("retry", "Retry with the same key", html! {}))
                } @else {
                    p.muted { "Retry: not offered — this adapter does not claim idempotency, so sending again could act twice." }
                }
                (form("resolve", "Resolve with a manual receipt", html! {
                    fieldset {
                        legend { "Outcome" }
                        label { input type="radio" name="outcome" value="succeeded" required; " It happened (the step succeeds)" }
                        label { input type="radio" name="outcome" value="not_happened"; " It did not happen (the step can be retried)" }
                        label { input type="radio" name="outcome" value="abandon"; " Abandon the step" }
                    }
                    label for="evidence" { "Evidence (what shows the outcome)" }
                    textarea #evidence name="evidence" rows="2" required {}
                    label for="reason" { "Reason" }
                    textarea #reason name="reason" rows="2" required {}
                    label for="external_reference" { "Provider reference (optional)" }
                    input #external_reference type="text" name="external_reference";
                    @if !fields_read.is_empty() {
                        label for="output" { "Receipt output (JSON; later steps read " (fields_read.iter().map(|f| format!("`{f}`")).collect::<Vec<_>>().join(", ")) ")" }
                        textarea #output name="output" rows="3" placeholder=(serde_json::Value::Object(fields_read.iter().map(|f| (f.clone(), serde_json::json!("…"))).collect()).to_string()) {}
                    }
                }))
                @if let Some(b) = rec.blocked.as_ref().filter(|b| b.reason == crate::policy::BLOCKED_REASON) {
                    div.box {
                        "Blocked under policy " strong { (b.policy_version.unwrap_or_default()) } ": " (b.message)
                        " (the workflow was recorded under policy " (record.policy_at_admission) ")"
                    }
                    (form("exception", "Let one attempt through", html! {
                        label for="exception-reason" { "Reason" }
                        textarea #exception-reason name="reason" rows="2" required {}
                        label for="exception-evidence" { "Evidence (what authorises it)" }
                        textarea #exception-evidence name="evidence" rows="2" required {}
                    }))
                }
                @if let Some(b) = rec.blocked.as_ref().filter(|b| b.reason == crate::budget::BLOCKED_REASON) {
                    div.box {
                        "Blocked by the budget: " strong { (b.limit.as_deref().unwrap_or("budget")) } " — " (b.message)
                    }
                    @if let Some(d) = def.as_ref() {
                        (budget_section(who, id, &crate::budget::BudgetView::new(
                            &crate::budget::Limits::of(&d.def.budget, &record.budget_added),
                            &record.budget_used(),
                        ), !record.state.is_ended()))
                    }
                }
                (form("escalate", "Escalate", html! {
                    label for="note" { "Note for the next person" }
                    textarea #note name="note" rows="2" required {}
                }))
            }

            h2 { "Timeline of this step" }
            table {
                @for ev in &events {
                    tr { td { (rfc3339(ev.at)) } td { (kind_badge(ev.kind)) } td { (ev.text) } }
                }
            }
        },
    )))
}

/// Adapters: versions, which one is active, declared contracts, the registry's history.
pub async fn adapters<S: crate::store::ComponentStore>(
    ctx: &Context<S>,
    who: &Session,
) -> Result<Markup, PageError> {
    let stored = ctx
        .store
        .stored_components()
        .await
        .map_err(PageError::from)?;
    let active = ctx
        .store
        .active_components()
        .await
        .map_err(PageError::from)?;
    let events = ctx
        .store
        .component_events(None, 50)
        .await
        .map_err(PageError::from)?;
    let verified = ctx.store.verifications().await.map_err(PageError::from)?;
    let loaded = ctx.components.as_ref().map(|c| c.all()).unwrap_or_default();
    Ok(layout(
        Some(who),
        "Adapters",
        html! {
            h1 { "Adapters and handlers" }
            p.muted { "Deploy, activate and roll back with " code { "docket adapter" } " or " code { "/v1/adapters" } ". Check a component's claims with " code { "docket adapter verify FILE.wasm --db …" } "; the verdicts show here." }
            @for (name, versions) in registry::by_name(&stored) {
                h2 { (name) }
                table {
                    tr { th { "Version" } th { "State" } th { "Digest" } th { "Declared contract" } th { "Verification" } }
                    @for c in versions {
                        @let is_active = active.iter().any(|a| a.digest == c.digest);
                        tr {
                            td { (c.version) }
                            td { (state_badge(if is_active { "active" } else { "staged" })) }
                            td { code title=(c.digest) { (short(&c.digest)) } }
                            td {
                                @match loaded.iter().find(|l| l.digest == c.digest).and_then(|l| l.contract()) {
                                    Some(k) => {
                                        "idempotency: " @if k.idempotency.supported { "yes, keys kept " (k.idempotency.retention_seconds) " s" } @else { "no" }
                                        " · namespace " code { (k.idempotency.namespace) }
                                        br;
                                        "query: " @if k.query.supported { "yes, visible within " (k.query.visibility_window_ms) " ms" } @else { "no" }
                                        " · compensation: " @if k.compensation.supported { "yes" } @else { "no" }
                                    }
                                    None => { span.muted { (c.kind) @if c.kind == "adapter" { " (not loaded on this host)" } } }
                                }
                            }
                            td {
                                @if c.kind == "adapter" || verified.iter().any(|v| v.digest == c.digest) {
                                    (verdict(verified.iter().find(|v| v.digest == c.digest)))
                                }
                            }
                        }
                    }
                }
            }
            h2 { "Changes" }
            table {
                tr { th { "When" } th { "Change" } th { "Version" } th { "By" } }
                @for ev in &events {
                    tr { td { (rfc3339(ev.at)) } td { (ev.action.replace('_', " ")) } td { (ev.name) "@" (ev.version) } td { (ev.author) } }
                }
            }
        },
    ))
}

/// The latest `docket adapter verify` verdict of a component version, as a person reads it:
/// held, failed, grandfathered (active when verification came to be required, never
/// verified), or none.
fn verdict(v: Option<&crate::store::Verification>) -> Markup {
    let grandfathered = v.is_some_and(|v| {
        v.verdicts
            .iter()
            .any(|(claim, _)| claim == crate::store::GRANDFATHERED)
    });
    html! {
        @match v {
            Some(v) if grandfathered => {
                strong { "grandfathered" } " — never verified; it was active when verification came to be required"
                br; span.muted { "recorded by " (v.author) ", " (rfc3339(v.verified_at)) }
            }
            Some(v) => {
                strong { @if v.passed { "every declared claim held" } @else { "a declared claim FAILED" } }
                @for (claim, verdict) in &v.verdicts { br; (claim) ": " (verdict) }
                br; span.muted { "by " (v.author) ", " (rfc3339(v.verified_at)) }
            }
            None => { span.muted { "not verified" } }
        }
    }
}
