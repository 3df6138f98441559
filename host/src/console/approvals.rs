//! The approver's pages: every approval the signed-in person may decide, oldest first,
//! and one approval — the consequence rendered step by step (destination, fields, cost),
//! its digest, and approve / reject forms that post the digest the person saw.

use super::pages::{PageError, layout, path_part, state_badge};
use super::session::{Session, random_token};
use crate::context::Context;
use crate::intent::{StepState, WorkflowId};
use crate::operator::approver_of;
use crate::view::rfc3339;
use maud::{Markup, html};
use serde_json::Value;

/// Most approvals the list shows.
const LIST_LIMIT: u32 = 500;

/// The approvals `who` may decide, oldest first.
pub async fn list<S: crate::store::ApprovalStore + crate::store::DefinitionStore>(
    ctx: &Context<S>,
    who: &Session,
) -> Result<Markup, PageError> {
    let pending = ctx.store.pending_approvals(LIST_LIMIT).await?;
    let mut rows = Vec::new();
    for p in pending {
        let Ok(Some(def)) = ctx.deployments.get(&p.workflow, p.definition_version).await else {
            continue;
        };
        let Some(step) = def.def.step(&p.record.step) else {
            continue;
        };
        let may = step.approval.as_ref().is_some_and(|a| {
            a.approvers.is_empty() || a.approvers.contains(&who.principal.subject.0)
        });
        if may {
            let summary = crate::scheduler::approval_note(&def.def, step, p.note.as_deref());
            rows.push((p, summary));
        }
    }
    Ok(layout(
        Some(who),
        "Approvals",
        html! {
            h1 { "Approvals waiting for you" }
            @if rows.is_empty() {
                div.box { "No approval waits for you." }
            } @else {
                table {
                    tr { th { "What" } th { "Workflow" } th { "Asked" } th { "Expires" } th { "For" } }
                    @for (p, summary) in &rows {
                        tr {
                            td {
                                a href={ "/console/workflows/" (path_part(&p.record.workflow_id.0)) "/approvals/" (path_part(&p.record.step)) } {
                                    (summary)
                                }
                            }
                            td { (p.workflow) br; code { (p.record.workflow_id.0) } }
                            td { (rfc3339(p.record.asked_at)) }
                            td { (rfc3339(p.record.expires_at)) }
                            td { (p.subject.0) }
                        }
                    }
                }
            }
        },
    ))
}

/// One approval: what it asks, and the forms that decide it. `None` when `who` may not
/// decide it or it is no approval step.
pub async fn page<
    S: crate::store::ApprovalStore + crate::store::DefinitionStore + crate::store::ReadStore,
>(
    ctx: &Context<S>,
    who: &Session,
    id: &str,
    step: &str,
    notice: Option<String>,
    error: Option<String>,
) -> Result<Option<Markup>, PageError> {
    let Ok((record, def)) = approver_of(ctx, &who.principal, id, step).await else {
        return Ok(None);
    };
    let Some(step_def) = def.def.step(step).filter(|s| s.approval.is_some()) else {
        return Ok(None);
    };
    let steps = ctx.store.steps(&WorkflowId(id.to_string())).await?;
    let row = steps.iter().find(|s| s.step == step);
    let state = row.map_or(StepState::Pending, |s| s.state);
    let approvals = ctx.store.approvals(&record.workflow_id).await?;
    let latest = approvals.iter().rfind(|a| a.step == step);
    let summary =
        crate::scheduler::approval_note(&def.def, step_def, row.and_then(|r| r.note.as_deref()));
    let waiting = state == StepState::AwaitingApproval;
    let action = |name: &str| {
        format!(
            "/console/workflows/{}/steps/{}/{name}",
            path_part(id),
            path_part(step)
        )
    };
    Ok(Some(layout(
        Some(who),
        &summary,
        html! {
            h1 { (summary) }
            p.muted {
                (def.def.name) " · " code { (record.workflow_id.0) } " · for " (record.subject.0)
                " · " (state_badge(state.as_str()))
            }
            @if let Some(n) = &notice { div.box.notice { (n) } }
            @if let Some(e) = &error { div.box.error #error { (e) } }
            @match latest {
                None => div.box { "Nothing is asked yet: the steps before it have not finished." },
                Some(asked) => {
                    div.box {
                        "Consequence " code #digest { (asked.digest) } br;
                        "Asked " (rfc3339(asked.asked_at)) "; expires " (rfc3339(asked.expires_at))
                        @if let Some(outcome) = asked.outcome {
                            br; strong { (outcome.as_str()) }
                            @if let Some(by) = &asked.decided_by { " by " (by) }
                            @if let Some(text) = &asked.decision_text { ": " (text) }
                        }
                    }
                    @for s in asked.consequence.get("steps").and_then(Value::as_array).into_iter().flatten() {
                        (consequence_step(&def.def, s))
                    }
                    @if waiting && asked.outcome.is_none() {
                        form.box.action #approve method="post" action=(action("approve")) {
                            input type="hidden" name="csrf" value=(who.csrf);
                            input type="hidden" name="key" value=(random_token());
                            input type="hidden" name="digest" value=(asked.digest);
                            label for="note" { "Note (optional)" }
                            input #note type="text" name="note";
                            button.go type="submit" { "Approve this consequence" }
                        }
                        form.box.action #reject method="post" action=(action("reject")) {
                            input type="hidden" name="csrf" value=(who.csrf);
                            input type="hidden" name="key" value=(random_token());
                            label for="reason" { "Why it must not happen" }
                            input #reason type="text" name="reason" required;
                            button.go type="submit" { "Reject" }
                        }
                    }
                }
            }
        },
    )))
}

/// How many of a batch's items the approval page lists; the API answers the whole set.
const CONSEQUENCE_ITEMS_SHOWN: usize = 200;

/// One approved step of a consequence: where it goes, what it sends, what it costs.
fn consequence_step(def: &crate::workflow::WorkflowDef, s: &Value) -> Markup {
    let id = s.get("step").and_then(Value::as_str).unwrap_or_default();
    let label = def.step(id).map_or(id, |d| d.label.as_str());
    let text = |v: &Value| match v {
        Value::String(t) => t.clone(),
        other => other.to_string(),
    };
    let hosts: Vec<String> = s
        .get("outbound_hosts")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(text)
        .collect();
    html! {
        div.box {
            h2 { (label) }
            p.muted {
                "Through " code { (text(&s["component"])) " " (text(&s["version"])) }
                " to " @if hosts.is_empty() { "no outside host" } @else { (hosts.join(", ")) }
                " · cost " (text(&s["cost"]))
            }
            @if let Some(items) = s.get("items").and_then(Value::as_array) {
                p { (items.len()) " items, each an effect of its own; approving binds the whole set." }
                table {
                    tr { th { "Item" } th { "Sends" } }
                    @for item in items.iter().take(CONSEQUENCE_ITEMS_SHOWN) {
                        tr { th { (text(&item["item_key"])) } td { pre { (text(&item["input"])) } } }
                    }
                }
                @if items.len() > CONSEQUENCE_ITEMS_SHOWN {
                    p.muted { "… and " (items.len() - CONSEQUENCE_ITEMS_SHOWN) " more: the whole set is in "
                        code { "GET /v1/workflows/{id}/steps/{step}/consequence" } "." }
                }
            } @else {
                table {
                    @for (field, value) in s.get("input").and_then(Value::as_object).into_iter().flatten() {
                        tr { th { (field) } td { pre { (text(value)) } } }
                    }
                }
            }
        }
    }
}
