//! The OpenAPI 3.1 description of the HTTP API, served at `GET /v1/openapi.json` and kept
//! at `docs/openapi.json`.
//!
//! The bodies the API builds from types (projections, timelines, attempts, cancellations,
//! revisions, notifications, budgets) take their schemas from those types (`schemars`, as
//! serialised); the few bodies built as JSON in a handler are described here beside the
//! operations. The operations are listed in one table that a test holds against
//! [`super::route_table`], and the integration suite validates the API's answers against
//! this document, so neither can drift from the router.

use super::error::ErrorCode;
use crate::budget::BudgetView;
use crate::scheduler::TickCounts;
use crate::view::{
    AttemptView, CancellationView, IntentView, MigrationPlanView, MigrationView, NotificationView,
    RevisionView, StepView, SummaryView, TimelineView, WorkflowView,
};
use axum::Json;
use axum::http::Method;
use schemars::JsonSchema;
use schemars::generate::{SchemaGenerator, SchemaSettings};
use serde_json::{Map, Value, json};
use std::sync::OnceLock;

/// `GET /v1/openapi.json`: open to anyone who can reach the API; it holds no data.
pub(super) async fn serve() -> Json<Value> {
    Json(document().clone())
}

/// The document, built once.
pub fn document() -> &'static Value {
    static DOCUMENT: OnceLock<Value> = OnceLock::new();
    DOCUMENT.get_or_init(build)
}

/// Who may call an operation (docs/api.md, "Who is calling"; docs/roles.md).
#[derive(Clone, Copy)]
enum Who {
    Anyone,
    Client,
    Operator,
    OperatorOrDeployer,
    Deployer,
    /// An operator, or for approve and reject an approver.
    OperatorOrApprover,
    Approver,
    /// A provider posting its own deliveries: a signature, not a token.
    Provider,
    TestControls,
}

impl Who {
    fn text(self) -> &'static str {
        match self {
            Who::Anyone => "No token needed.",
            Who::Client => {
                "Role `client` (to read or change a workflow, `client` or `operator`); a client sees only its own subject's intents and workflows (anything else is 404)."
            }
            Who::Operator => "Role `operator`.",
            Who::OperatorOrDeployer => "Role `operator` or `deployer`.",
            Who::Deployer => "Role `deployer`.",
            Who::OperatorOrApprover => {
                "Role `operator`; `approve` and `reject` need role `approver` instead (and, where the approval step names `approvers`, to be one of them)."
            }
            Who::Approver => {
                "Role `approver` (where the approval step names `approvers`, one of them); an approver who may not otherwise see the workflow hears 404 for any other step."
            }
            Who::Provider => {
                "No token: the provider signs the body per Standard Webhooks (`webhook-id`, `webhook-timestamp` within five minutes, `webhook-signature`) with the adapter's `[adapters.<name>] webhook_secret`. An unsigned or forged body is 401 and kept nowhere; no `Idempotency-Key` is needed (a replayed `webhook-id` is kept once) and failures are not throttled. The body (any media type, at most 256 KiB) is read by the adapter's `observe`."
            }
            Who::TestControls => "Only on a host started with `--test-controls` (loopback).",
        }
    }
}

/// One operation: what the table below says of it.
struct Op {
    method: Method,
    path: &'static str,
    id: &'static str,
    summary: &'static str,
    who: Who,
    /// Whether it needs an `Idempotency-Key`.
    keyed: bool,
    query: &'static [(&'static str, &'static str)],
    body: Option<Value>,
    /// (status, description, JSON schema of the body; `None`: no JSON body).
    responses: Vec<(u16, &'static str, Option<Value>)>,
}

/// Schemas named under `#/components/schemas/`.
fn named(name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

fn page(item: Value) -> Value {
    json!({
        "type": "object",
        "required": ["data", "next_cursor"],
        "properties": {
            "data": {"type": "array", "items": item},
            "next_cursor": {"type": ["string", "null"], "description": "Pass as `cursor` for the next page; `null` on the last."}
        }
    })
}

const PAGED: &[(&str, &str)] = &[
    ("limit", "Rows per page, 1–500 (default 50)."),
    ("cursor", "The `next_cursor` of the previous page."),
];

fn operations(s: &mut Schemas) -> Vec<Op> {
    let intent = s.of::<IntentView>();
    let workflow = s.of::<WorkflowView>();
    let step = s.of::<StepView>();
    let cancellation = s.of::<CancellationView>();
    let revision = s.of::<RevisionView>();
    let migration = s.of::<MigrationView>();
    let migration_plan = s.of::<MigrationPlanView>();
    let budget = s.of::<BudgetView>();
    let timeline = s.of::<TimelineView>();
    let attempt = s.of::<AttemptView>();
    let item = s.of::<crate::view::ItemView>();
    let summary = s.of::<SummaryView>();
    let notification = s.of::<NotificationView>();
    let observation = s.of::<crate::view::ObservationView>();
    let ticks = s.of::<TickCounts>();
    let input_body = json!({
        "type": "object",
        "required": ["input", "reason"],
        "properties": {"input": {"type": "object"}, "reason": {"type": "string", "minLength": 1}}
    });
    let component_version = json!({
        "type": "object",
        "required": ["name", "version", "digest", "world", "state", "declared"],
        "properties": {
            "name": {"type": "string"},
            "version": {"type": "string"},
            "digest": {"type": "string"},
            "world": {"enum": ["adapter", "handler"]},
            "state": {"enum": ["active", "staged"]},
            "declared": {"type": "object", "description": "The contract the component declares."}
        }
    });
    let policy_version = json!({
        "type": "object",
        "required": ["version", "digest", "author", "deployed_at"],
        "properties": {
            "version": {"type": "integer", "minimum": 1},
            "digest": {"type": "string"},
            "author": {"type": "string"},
            "deployed_at": {"type": "string", "format": "date-time"},
            "document": {"type": "string", "description": "The policy document (TOML); in lists only."}
        }
    });
    vec![
        Op {
            method: Method::POST,
            path: "/v1/intents",
            id: "submitIntent",
            summary: "Admit an intent: one key in scope and an equivalent input give one workflow",
            who: Who::Client,
            keyed: true,
            query: &[],
            body: Some(json!({
                "type": "object",
                "required": ["workflow", "input"],
                "properties": {
                    "workflow": {"type": "string", "description": "The definition's name."},
                    "input": {"description": "Checked against the definition's input schema."}
                }
            })),
            responses: vec![
                (201, "A new workflow.", Some(intent.clone())),
                (
                    200,
                    "The key was used with an equivalent input: the same workflow (`replayed: true`).",
                    Some(intent.clone()),
                ),
            ],
        },
        Op {
            method: Method::GET,
            path: "/v1/intents/{key}",
            id: "intentByKey",
            summary: "The caller's own intent under a key",
            who: Who::Client,
            keyed: false,
            query: &[("workflow", "The definition's name (required).")],
            body: None,
            responses: vec![(200, "The intent.", Some(intent.clone()))],
        },
        Op {
            method: Method::GET,
            path: "/v1/workflows",
            id: "listWorkflows",
            summary: "Workflow summaries, newest first",
            who: Who::Client,
            keyed: false,
            query: &[
                ("state", "Only workflows in this state."),
                ("workflow", "Only workflows of this definition."),
                ("limit", "Rows per page, 1–500 (default 50)."),
                ("cursor", "The `next_cursor` of the previous page."),
            ],
            body: None,
            responses: vec![(200, "A page of summaries.", Some(page(summary)))],
        },
        Op {
            method: Method::GET,
            path: "/v1/workflows/{id}",
            id: "getWorkflow",
            summary: "The workflow's projection (its `revision` is the `ETag`)",
            who: Who::Client,
            keyed: false,
            query: &[
                (
                    "wait",
                    "Long-poll: wait up to this many seconds (1–60) for a revision after `after` (or `If-None-Match`).",
                ),
                ("after", "The revision already seen."),
            ],
            body: None,
            responses: vec![
                (200, "The projection.", Some(workflow)),
                (304, "Unchanged since the `If-None-Match` revision.", None),
            ],
        },
        Op {
            method: Method::GET,
            path: "/v1/workflows/{id}/timeline",
            id: "getTimeline",
            summary: "Observations, actions and conclusions, oldest first",
            who: Who::Client,
            keyed: false,
            query: PAGED,
            body: None,
            responses: vec![(200, "A page of entries.", Some(page(timeline)))],
        },
        Op {
            method: Method::GET,
            path: "/v1/workflows/{id}/steps/{step}/attempts",
            id: "getAttempts",
            summary: "A step's attempts, oldest first",
            who: Who::Client,
            keyed: false,
            query: PAGED,
            body: None,
            responses: vec![(200, "A page of attempts.", Some(page(attempt.clone())))],
        },
        Op {
            method: Method::POST,
            path: "/v1/workflows/{id}/steps/{step}/{action}",
            id: "actOnStep",
            summary: "An action on a step: query, retry, resolve, escalate, compensate or exception; on an approval step approve or reject",
            who: Who::OperatorOrApprover,
            keyed: true,
            query: &[],
            body: Some(json!({
                "type": "object",
                "description": "`resolve`: {\"outcome\", \"evidence\", \"reason\", \"external_reference\"?, \"output\"?}; `escalate`: {\"note\"}; `compensate`: {\"reason\"}; `exception`: {\"reason\", \"evidence\"}; `query` and `retry`: {}; `approve`: {\"digest\", \"note\"?} (the consequence's digest as GET …/consequence answers it; another is 409 `consequence_changed` naming the current one in `details[0].current_digest`); `reject`: {\"reason\"}.",
                "properties": {
                    "outcome": {"type": "string"},
                    "evidence": {"type": "string"},
                    "reason": {"type": "string"},
                    "external_reference": {"type": "string"},
                    "note": {"type": "string"},
                    "output": {"type": "object"},
                    "digest": {"type": "string", "pattern": "^sha256:"}
                }
            })),
            responses: vec![(
                200,
                "The step once the action took effect.",
                Some(step.clone()),
            )],
        },
        Op {
            method: Method::GET,
            path: "/v1/workflows/{id}/steps/{step}/items",
            id: "getItems",
            summary: "A batch step's items, each an effect of its own, in the list's order",
            who: Who::Client,
            keyed: false,
            query: &[
                (
                    "state",
                    "Only items in this step state (`failed_terminal`, `outcome_unknown`, …).",
                ),
                ("limit", "Rows per page, 1–500 (default 50)."),
                ("cursor", "The `next_cursor` of the previous page."),
            ],
            body: None,
            responses: vec![(200, "A page of items.", Some(page(item)))],
        },
        Op {
            method: Method::GET,
            path: "/v1/workflows/{id}/steps/{step}/items/{item_key}/attempts",
            id: "getItemAttempts",
            summary: "One item's attempts, oldest first",
            who: Who::Client,
            keyed: false,
            query: PAGED,
            body: None,
            responses: vec![(200, "A page of attempts.", Some(page(attempt)))],
        },
        Op {
            method: Method::POST,
            path: "/v1/workflows/{id}/steps/{step}/items/{item_key}/{action}",
            id: "actOnItem",
            summary: "An action on one item of a batch step (query, retry, resolve, escalate, compensate or exception), with the same rules and body as on a step",
            who: Who::Operator,
            keyed: true,
            query: &[],
            body: Some(json!({
                "type": "object",
                "description": "As `POST …/steps/{step}/{action}`."
            })),
            responses: vec![(
                200,
                "The batch step once the action took effect, with its counts of items.",
                Some(step.clone()),
            )],
        },
        Op {
            method: Method::GET,
            path: "/v1/workflows/{id}/steps/{step}/consequence",
            id: "getConsequence",
            summary: "What an approval step asks consent to: the consequence, its digest, until when it waits",
            who: Who::Approver,
            keyed: false,
            query: &[],
            body: None,
            responses: vec![(
                200,
                "The latest consequence the approval step asked about.",
                Some(consequence_schema()),
            )],
        },
        Op {
            method: Method::GET,
            path: "/v1/approvals",
            id: "listApprovals",
            summary: "The approvals waiting for a decision the caller may give, oldest first",
            who: Who::Approver,
            keyed: false,
            query: &[],
            body: None,
            responses: vec![(200, "The approvals.", Some(approvals_schema()))],
        },
        Op {
            method: Method::POST,
            path: "/v1/evidence/{adapter}",
            id: "receiveEvidence",
            summary: "A provider's own delivery (a webhook) about the effects an adapter caused: verified, kept once, read by the adapter's `observe` and applied to the steps it names",
            who: Who::Provider,
            keyed: false,
            query: &[],
            body: None,
            responses: vec![(
                202,
                "Kept (or, for a replayed `webhook-id`, already kept: `replayed` is true); it is read and applied shortly.",
                Some(json!({
                    "type": "object",
                    "required": ["adapter", "webhook_id", "replayed"],
                    "properties": {
                        "adapter": {"type": "string"},
                        "webhook_id": {"type": "string"},
                        "replayed": {"type": "boolean"}
                    }
                })),
            )],
        },
        Op {
            method: Method::GET,
            path: "/v1/evidence",
            id: "listEvidence",
            summary: "Observations read from providers' deliveries, oldest first; `matched=false` is the inbox of those that matched no step or could not be read",
            who: Who::Operator,
            keyed: false,
            query: &[
                (
                    "matched",
                    "`false`: the inbox (unmatched and unreadable); `true`: those matched to a step.",
                ),
                ("adapter", "Only this adapter's."),
                ("workflow_id", "Only those matched to this workflow."),
                ("limit", "Rows per page, 1–500 (default 50)."),
                ("cursor", "The `next_cursor` of the previous page."),
            ],
            body: None,
            responses: vec![(200, "A page of observations.", Some(page(observation)))],
        },
        Op {
            method: Method::POST,
            path: "/v1/workflows/{id}/cancel",
            id: "cancelWorkflow",
            summary: "Cancel (or withdraw) a workflow: an intent of its own",
            who: Who::Client,
            keyed: true,
            query: &[],
            body: Some(json!({
                "type": "object",
                "required": ["reason"],
                "properties": {"reason": {"type": "string", "minLength": 1}, "withdraw": {"type": "boolean"}}
            })),
            responses: vec![
                (
                    202,
                    "The cancellation, recorded.",
                    Some(cancellation.clone()),
                ),
                (
                    200,
                    "The cancellation there already is.",
                    Some(cancellation.clone()),
                ),
            ],
        },
        Op {
            method: Method::GET,
            path: "/v1/workflows/{id}/cancellation",
            id: "getCancellation",
            summary: "The workflow's cancellation and its progress",
            who: Who::Client,
            keyed: false,
            query: &[],
            body: None,
            responses: vec![(200, "The cancellation.", Some(cancellation.clone()))],
        },
        Op {
            method: Method::GET,
            path: "/v1/workflows/{id}/revisions",
            id: "listRevisions",
            summary: "The workflow's input revisions, oldest first",
            who: Who::Client,
            keyed: false,
            query: &[],
            body: None,
            responses: vec![(200, "Every revision.", Some(page(revision.clone())))],
        },
        Op {
            method: Method::POST,
            path: "/v1/workflows/{id}/revisions",
            id: "reviseWorkflow",
            summary: "Correct the input of a workflow that has made no consequential effect",
            who: Who::Client,
            keyed: true,
            query: &[],
            body: Some(input_body.clone()),
            responses: vec![(201, "The revision.", Some(revision))],
        },
        Op {
            method: Method::POST,
            path: "/v1/workflows/{id}/migration",
            id: "migrateWorkflow",
            summary: "Move the workflow to another version of its definition by an explicit plan (operator); with `dry_run`, only say what would happen (no key needed)",
            who: Who::Operator,
            keyed: true,
            query: &[],
            body: Some(json!({
                "type": "object",
                "required": ["to_version", "reason"],
                "properties": {
                    "to_version": {"type": "integer", "minimum": 1},
                    "steps": {
                        "type": "object",
                        "description": "Old step id → the new version's step id, or null to drop a step that never began; an old step not named keeps its id.",
                        "additionalProperties": {"type": ["string", "null"]}
                    },
                    "reason": {"type": "string", "minLength": 1},
                    "dry_run": {"type": "boolean"}
                }
            })),
            responses: vec![
                (
                    201,
                    "The migration: the workflow runs the new version.",
                    Some(migration.clone()),
                ),
                (
                    200,
                    "A dry run's answer; nothing changed.",
                    Some(json!({
                        "type": "object",
                        "required": ["dry_run", "workflow_id", "would"],
                        "properties": {
                            "dry_run": {"const": true},
                            "workflow_id": {"type": "string"},
                            "would": {"enum": ["migrate", "refuse"]},
                            "plan": migration_plan,
                            "message": {"type": "string"},
                            "reasons": {
                                "type": "array",
                                "items": {
                                    "type": "object",
                                    "required": ["reason"],
                                    "properties": {"step": {"type": "string"}, "reason": {"type": "string"}}
                                }
                            }
                        }
                    })),
                ),
            ],
        },
        Op {
            method: Method::GET,
            path: "/v1/workflows/{id}/migrations",
            id: "listMigrations",
            summary: "The workflow's migrations to other definition versions, oldest first",
            who: Who::Client,
            keyed: false,
            query: &[],
            body: None,
            responses: vec![(200, "Every migration.", Some(page(migration)))],
        },
        Op {
            method: Method::POST,
            path: "/v1/workflows/{id}/replacement",
            id: "replaceWorkflow",
            summary: "A new workflow replacing this one (optionally cancelling it)",
            who: Who::Client,
            keyed: true,
            query: &[],
            body: Some(json!({
                "type": "object",
                "required": ["input", "reason"],
                "properties": {
                    "input": {"type": "object"},
                    "reason": {"type": "string", "minLength": 1},
                    "cancel_original": {"type": "boolean"}
                }
            })),
            responses: {
                let replacement = json!({
                    "allOf": [intent.clone()],
                    "required": ["replaces"],
                    "properties": {
                        "replaces": {"type": "string"},
                        "cancellation": cancellation
                    }
                });
                vec![
                    (
                        201,
                        "The new workflow (`Location` names it).",
                        Some(replacement.clone()),
                    ),
                    (200, "The replacement there already is.", Some(replacement)),
                ]
            },
        },
        Op {
            method: Method::POST,
            path: "/v1/workflows/{id}/budget",
            id: "extendBudget",
            summary: "Add to a workflow's budget",
            who: Who::Operator,
            keyed: true,
            query: &[],
            body: Some(json!({
                "type": "object",
                "required": ["add", "reason"],
                "properties": {
                    "add": {
                        "type": "object",
                        "additionalProperties": {"type": "integer", "minimum": 0, "maximum": 1000000000},
                        "description": "Amounts by limit: attempts, runtime_ms, external_calls, cost, recovery_queries; at least one positive, each at most 1e9."
                    },
                    "reason": {"type": "string", "minLength": 1}
                }
            })),
            responses: vec![(200, "The budget after the addition.", Some(budget))],
        },
        Op {
            method: Method::GET,
            path: "/v1/adapters",
            id: "listAdapters",
            summary: "Deployed component versions, which is active, and the latest changes",
            who: Who::OperatorOrDeployer,
            keyed: false,
            query: &[],
            body: None,
            responses: vec![(
                200,
                "The registry.",
                Some(json!({
                    "type": "object",
                    "required": ["data", "events"],
                    "properties": {
                        "data": {"type": "array", "items": {
                            "type": "object",
                            "required": ["name", "active_version", "in_flight", "paused", "versions"],
                            "properties": {
                                "name": {"type": "string"},
                                "active_version": {"type": ["string", "null"]},
                                "in_flight": {"type": "integer", "description": "Its attempts under a lease now, on every host of the store (`[adapters.X] max_in_flight` bounds it)."},
                                "paused": {
                                    "type": ["object", "null"],
                                    "description": "While a provider's retry-after pauses every host's claims of it: until when, why, and which host's attempt was answered so.",
                                    "required": ["until", "cause", "reason", "paused_by", "paused_at"],
                                    "properties": {
                                        "until": {"type": "string", "format": "date-time"},
                                        "cause": {"enum": ["rate_limited", "unavailable"]},
                                        "reason": {"type": "string"},
                                        "paused_by": {"type": "string"},
                                        "paused_at": {"type": "string", "format": "date-time"}
                                    }
                                },
                                "versions": {"type": "array", "items": {
                                    "type": "object",
                                    "required": ["version", "digest", "world", "size_bytes", "deployed_at", "state", "declared"],
                                    "properties": {
                                        "version": {"type": "string"},
                                        "digest": {"type": "string"},
                                        "world": {"enum": ["adapter", "handler"]},
                                        "size_bytes": {"type": "integer"},
                                        "deployed_at": {"type": "string", "format": "date-time"},
                                        "state": {"enum": ["active", "staged"]},
                                        "declared": {"type": ["object", "null"], "description": "The contract, when this host has the version loaded."}
                                    }
                                }}
                            }
                        }},
                        "events": {"type": "array", "items": {
                            "type": "object",
                            "required": ["seq", "name", "version", "digest", "action", "author", "at"],
                            "properties": {
                                "seq": {"type": "integer"},
                                "name": {"type": "string"},
                                "version": {"type": "string"},
                                "digest": {"type": "string"},
                                "action": {"type": "string"},
                                "author": {"type": "string"},
                                "at": {"type": "string", "format": "date-time"}
                            }
                        }}
                    }
                })),
            )],
        },
        Op {
            method: Method::POST,
            path: "/v1/adapters",
            id: "deployAdapter",
            summary: "Upload a component (`application/wasm`) as a staged version",
            who: Who::Deployer,
            keyed: true,
            query: &[],
            body: None,
            responses: vec![
                (201, "A new version.", Some(component_version.clone())),
                (
                    200,
                    "The same bytes were already deployed.",
                    Some(component_version),
                ),
            ],
        },
        Op {
            method: Method::POST,
            path: "/v1/adapters/{name}/{action}",
            id: "changeAdapter",
            summary: "`activate` a version (body {\"version\"}) or `rollback` to the previous one",
            who: Who::Deployer,
            keyed: true,
            query: &[],
            body: Some(json!({"type": "object", "properties": {"version": {"type": "string"}}})),
            responses: vec![(
                200,
                "The active version now.",
                Some(json!({
                    "type": "object",
                    "required": ["name", "active_version", "digest", "previous_digest", "changed"],
                    "properties": {
                        "name": {"type": "string"},
                        "active_version": {"type": "string"},
                        "digest": {"type": "string"},
                        "previous_digest": {"type": ["string", "null"]},
                        "changed": {"type": "boolean"}
                    }
                })),
            )],
        },
        Op {
            method: Method::GET,
            path: "/v1/notifications",
            id: "listNotifications",
            summary: "Notifications, oldest first",
            who: Who::Operator,
            keyed: false,
            query: &[
                ("workflow_id", "Only this workflow's."),
                ("state", "pending, delivered, suppressed or failed."),
                ("limit", "Rows per page, 1–500 (default 50)."),
                ("cursor", "The `next_cursor` of the previous page."),
            ],
            body: None,
            responses: vec![(200, "A page of notifications.", Some(page(notification)))],
        },
        Op {
            method: Method::GET,
            path: "/v1/policies",
            id: "listPolicies",
            summary: "Policy versions, newest first, each with its document",
            who: Who::OperatorOrDeployer,
            keyed: false,
            query: &[],
            body: None,
            responses: vec![(
                200,
                "Every version, and the one in force on this host.",
                Some(json!({
                    "type": "object",
                    "required": ["data", "next_cursor", "in_force_here"],
                    "properties": {
                        "data": {"type": "array", "items": policy_version.clone()},
                        "next_cursor": {"type": "null"},
                        "in_force_here": {"type": "integer", "minimum": 0}
                    }
                })),
            )],
        },
        Op {
            method: Method::POST,
            path: "/v1/policies",
            id: "deployPolicy",
            summary: "Deploy a policy document as the next version",
            who: Who::Deployer,
            keyed: true,
            query: &[],
            body: Some(json!({
                "type": "object",
                "required": ["document"],
                "properties": {"document": {"type": "string", "description": "The policy document (TOML)."}}
            })),
            responses: vec![(201, "The new version.", Some(policy_version))],
        },
        Op {
            method: Method::GET,
            path: "/v1/openapi.json",
            id: "getOpenApi",
            summary: "This document",
            who: Who::Anyone,
            keyed: false,
            query: &[],
            body: None,
            responses: vec![(
                200,
                "OpenAPI 3.1.",
                Some(json!({"type": "object", "required": ["openapi", "paths"]})),
            )],
        },
        Op {
            method: Method::GET,
            path: "/healthz",
            id: "healthz",
            summary: "Liveness: the process answers",
            who: Who::Anyone,
            keyed: false,
            query: &[],
            body: None,
            responses: vec![(
                200,
                "Alive.",
                Some(
                    json!({"type": "object", "required": ["status"], "properties": {"status": {"const": "ok"}}}),
                ),
            )],
        },
        Op {
            method: Method::GET,
            path: "/readyz",
            id: "readyz",
            summary: "Readiness: the store answers and every task runs",
            who: Who::Anyone,
            keyed: false,
            query: &[],
            body: None,
            responses: {
                let ready = json!({
                    "type": "object",
                    "required": ["ready", "store", "tasks", "reasons"],
                    "properties": {
                        "ready": {"type": "boolean"},
                        "store": {"type": "string", "description": "`ok`, or why the store does not answer."},
                        "tasks": {"type": "array", "items": {"type": "string"}},
                        "reasons": {"type": "array", "items": {"type": "string"}}
                    }
                });
                vec![
                    (200, "Ready.", Some(ready.clone())),
                    (503, "Not ready; `reasons` say why.", Some(ready)),
                ]
            },
        },
        Op {
            method: Method::GET,
            path: "/metrics",
            id: "metrics",
            summary: "Prometheus metrics (OpenMetrics text); the metrics listener serves it without a token",
            who: Who::Operator,
            keyed: false,
            query: &[],
            body: None,
            responses: vec![(200, "OpenMetrics text.", None)],
        },
        Op {
            method: Method::POST,
            path: "/v1/_test/clock",
            id: "advanceClock",
            summary: "Advance the host's clock",
            who: Who::TestControls,
            keyed: false,
            query: &[],
            body: Some(json!({
                "type": "object",
                "required": ["advance_ms"],
                "properties": {"advance_ms": {"type": "integer", "minimum": 0}}
            })),
            responses: vec![(
                200,
                "The clock now.",
                Some(json!({
                    "type": "object",
                    "required": ["now", "now_ms"],
                    "properties": {"now": {"type": "string", "format": "date-time"}, "now_ms": {"type": "integer"}}
                })),
            )],
        },
        Op {
            method: Method::GET,
            path: "/v1/_test/ticks",
            id: "ticks",
            summary: "How many times each periodic task has run",
            who: Who::TestControls,
            keyed: false,
            query: &[],
            body: None,
            responses: vec![(200, "The counts.", Some(ticks))],
        },
    ]
}

/// The error envelope every refusal has.
/// The answer of `GET …/steps/{step}/consequence`.
fn consequence_schema() -> Value {
    let text = json!({"type": "string"});
    let opt = json!({"type": ["string", "null"]});
    json!({
        "type": "object",
        "required": ["workflow_id", "step", "state", "summary", "digest", "consequence", "asked_at", "expires_at", "outcome", "decided_by", "decided_at"],
        "properties": {
            "workflow_id": text, "step": text,
            "state": {"type": "string", "description": "The approval step's state (`awaiting_approval` while it waits)."},
            "summary": {"type": "string", "description": "\"Needs your approval: …\", the labels of the approved steps."},
            "digest": {"type": "string", "description": "`sha256:` of the consequence's canonical JSON (RFC 8785): what `approve` must name."},
            "consequence": {
                "type": "object",
                "required": ["approval", "steps"],
                "properties": {
                    "approval": text,
                    "steps": {"type": "array", "items": {
                        "type": "object",
                        "required": ["step", "component", "version", "input_digest", "outbound_hosts", "cost"],
                        "properties": {
                            "step": text, "component": text,
                            "version": {"type": "string", "description": "The version requirement the definition names."},
                            "input": {"description": "The step's mapped input, as it will be sent (absent for a batch step)."},
                            "items": {"type": "array", "description": "A batch step's whole item set in the list's order, each with the input it will send; `input_digest` binds the set.", "items": {
                                "type": "object",
                                "required": ["item_key", "input"],
                                "properties": {"item_key": text, "input": {}}
                            }},
                            "item_count": {"type": "integer", "description": "A batch step's number of items."},
                            "input_digest": {"type": "string", "description": "`sha256:` of `input` (a batch step: of `items`)."},
                            "outbound_hosts": {"type": "array", "items": text, "description": "As the definition requests them (not a host's configuration)."},
                            "cost": {"type": "integer"}
                        }
                    }}
                }
            },
            "asked_at": text, "expires_at": text,
            "outcome": {"type": ["string", "null"], "enum": ["approved", "rejected", "expired", "superseded", null]},
            "decided_by": opt, "decided_at": opt
        }
    })
}

/// The answer of `GET /v1/approvals`.
fn approvals_schema() -> Value {
    let text = json!({"type": "string"});
    json!({
        "type": "object",
        "required": ["approvals"],
        "properties": {"approvals": {"type": "array", "items": {
            "type": "object",
            "required": ["workflow_id", "workflow", "subject", "step", "label", "summary", "digest", "asked_at", "expires_at"],
            "properties": {
                "workflow_id": text, "workflow": text, "subject": text, "step": text,
                "label": text, "summary": text, "digest": text, "asked_at": text, "expires_at": text
            }
        }}}
    })
}

fn error_schema() -> Value {
    let codes: Vec<&str> = ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
    json!({
        "type": "object",
        "required": ["error"],
        "properties": {
            "error": {
                "type": "object",
                "required": ["code", "message", "details"],
                "properties": {
                    "code": {"enum": codes},
                    "message": {"type": "string", "description": "For people: what was wrong and how to fix it."},
                    "details": {"type": "array", "items": {"type": "object"}},
                    "links": {"type": "object"}
                }
            }
        }
    })
}

/// Schemas of the API's types, collected as they are asked for.
struct Schemas(SchemaGenerator);

impl Schemas {
    fn new() -> Self {
        let settings = SchemaSettings::draft2020_12()
            .for_serialize()
            .with(|s| s.definitions_path = "/components/schemas".into());
        Self(settings.into_generator())
    }

    fn of<T: JsonSchema>(&mut self) -> Value {
        self.0.subschema_for::<T>().to_value()
    }

    fn into_components(mut self) -> Map<String, Value> {
        self.0.take_definitions(true)
    }
}

fn build() -> Value {
    let mut schemas = Schemas::new();
    let ops = operations(&mut schemas);
    let mut components = schemas.into_components();
    components.insert("Error".into(), error_schema());
    let mut paths = Map::new();
    for op in ops {
        let mut parameters: Vec<Value> = op
            .path
            .split('/')
            .filter_map(|seg| seg.strip_prefix('{')?.strip_suffix('}'))
            .map(|name| json!({"name": name, "in": "path", "required": true, "schema": {"type": "string"}}))
            .collect();
        parameters.extend(op.query.iter().map(|(name, text)| {
            json!({"name": name, "in": "query", "required": false, "description": text, "schema": {"type": "string"}})
        }));
        if op.keyed {
            parameters.push(json!({
                "name": "Idempotency-Key", "in": "header", "required": true,
                "description": "The request's idempotency key: the same key and body answer as before.",
                "schema": {"type": "string", "minLength": 1, "maxLength": super::MAX_KEY_LEN}
            }));
        }
        let mut responses = Map::new();
        for (status, description, schema) in op.responses {
            let mut response = json!({"description": description});
            if let Some(schema) = schema {
                response["content"] = json!({"application/json": {"schema": schema}});
            }
            responses.insert(status.to_string(), response);
        }
        responses.insert(
            "default".into(),
            json!({
                "description": "A refusal: the code says what the caller does next (docs/api.md, \"Errors\").",
                "content": {"application/json": {"schema": named("Error")}}
            }),
        );
        let mut operation = json!({
            "operationId": op.id,
            "summary": op.summary,
            "description": op.who.text(),
            "parameters": parameters,
            "responses": responses,
        });
        if let Some(body) = op.body {
            operation["requestBody"] =
                json!({"required": true, "content": {"application/json": {"schema": body}}});
        }
        if matches!(op.who, Who::Anyone | Who::Provider | Who::TestControls) {
            operation["security"] = json!([]);
        }
        let item = paths
            .entry(op.path.to_string())
            .or_insert_with(|| json!({}));
        item[op.method.as_str().to_lowercase()] = operation;
    }
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "docket",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "The HTTP API of a docket host: admitting intents, reading workflows' stories, changing their course, and governing and operating the host. In open mode (no tokens) every caller holds every role; otherwise a bearer token names the caller's subject and roles.",
        },
        "servers": [{"url": "http://127.0.0.1:8080"}],
        "security": [{"bearer": []}],
        "paths": paths,
        "components": {
            "schemas": components,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every route of the router is described, and nothing else is.
    #[test]
    fn every_route_is_described_and_only_those() {
        let doc = document();
        let mut routed: Vec<String> = super::super::route_table(true)
            .into_iter()
            .map(|(m, p)| format!("{m} {p}"))
            .collect();
        routed.sort();
        let mut described: Vec<String> = doc["paths"]
            .as_object()
            .unwrap()
            .iter()
            .flat_map(|(path, item)| {
                item.as_object()
                    .unwrap()
                    .keys()
                    .map(move |m| format!("{} {path}", m.to_uppercase()))
            })
            .collect();
        described.sort();
        assert_eq!(routed, described);
    }

    /// The document is valid JSON Schema where it holds schemas, and the committed copy is
    /// what the code builds.
    #[test]
    fn the_committed_copy_is_the_document() {
        let doc = document();
        for (name, schema) in doc["components"]["schemas"].as_object().unwrap() {
            assert!(
                jsonschema::meta::is_valid(schema),
                "components.schemas.{name} is not a valid JSON Schema"
            );
        }
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/openapi.json");
        let expected = format!("{}\n", serde_json::to_string_pretty(doc).unwrap());
        if std::env::var("DOCKET_BLESS").is_ok_and(|v| v == "1") {
            std::fs::write(path, &expected).unwrap();
        }
        let committed = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            committed == expected,
            "docs/openapi.json is not the document the code builds; run \
             `DOCKET_BLESS=1 cargo test --lib openapi` and commit the result"
        );
    }
}
