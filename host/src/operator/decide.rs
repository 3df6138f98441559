//! The decision of an operator action, as a pure function of what the step shows: its
//! state, its attempts, whether it is an adapter step and what that adapter's contract
//! declares. No I/O: the caller gathers the [`Situation`], the store applies the [`Plan`].

use super::{Action, Order, Resolution};
use crate::contract::{Contract, SameKeyRetry};
use crate::intent::{
    AttemptId, EventKind, EvidenceKind, Millis, NewEvent, ReceiptId, StepState, Subject, Trigger,
};
use crate::store::{AttemptRecord, NewReceipt, StepChange};
use serde_json::{Value, json};

/// States from which a person may act on a step's outcome.
pub const SETTLEABLE: [StepState; 6] = [
    StepState::OutcomeUnknown,
    StepState::WaitingForReview,
    StepState::Blocked,
    StepState::Contradicted,
    StepState::FailedRetryable,
    StepState::FailedTerminal,
];

/// What the step's attempts say: the latest one, and when the request may first have
/// reached the provider (checkpoint 3 or later).
#[derive(Debug, Clone, Copy, Default)]
pub struct History<'a> {
    pub latest: Option<&'a AttemptRecord>,
    /// The latest attempt of the current input that ran (got past checkpoint 2): the one an
    /// attempt a block ended before it ran has no provenance to give.
    pub ran: Option<&'a AttemptRecord>,
    pub first_sent_at: Option<Millis>,
}

impl<'a> History<'a> {
    pub fn of(attempts: &'a [AttemptRecord]) -> Self {
        Self {
            latest: attempts.iter().max_by_key(|a| a.number),
            ran: attempts
                .iter()
                .filter(|a| a.provenance.is_some() && a.superseded_by.is_none())
                .max_by_key(|a| a.number),
            first_sent_at: attempts
                .iter()
                .filter(|a| a.checkpoint >= 3 && a.request_identity.is_some())
                .map(|a| a.started_at)
                .min(),
        }
    }
}

/// Everything a decision looks at.
#[derive(Debug, Clone, Copy)]
pub struct Situation<'a> {
    pub order: &'a Order,
    /// Who acts (recorded on the timeline and on a manual receipt).
    pub actor: &'a Subject,
    pub step: &'a str,
    pub state: StepState,
    /// The step's label in the definition (its id when the definition is gone).
    pub label: &'a str,
    pub is_adapter: bool,
    /// The step is an approval step: a person approves or rejects it, nothing else.
    pub is_approval: bool,
    /// An approval step's question still waiting for a decision.
    pub approval: Option<&'a crate::store::ApprovalRecord>,
    /// The fields of the step's receipt that later steps read (empty when the definition
    /// is gone): a receipt written by hand must hold them.
    pub outputs: &'a [String],
    /// The contract of the adapter version that ran the step (or would run it); `None`
    /// when no such version can be loaded.
    pub contract: Option<&'a Contract>,
    pub history: History<'a>,
    /// Where the workflow's course stands (a compensation by hand depends on it).
    pub course: CourseFacts,
    pub now: Millis,
}

/// What a compensation by hand looks at beyond the step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CourseFacts {
    pub workflow: crate::intent::WorkflowState,
    /// The workflow has a cancellation.
    pub cancelled: bool,
    /// The step's compensation was already started.
    pub compensation_started: bool,
    /// The policy version that blocked the step, when a policy did.
    pub policy_block: Option<u32>,
}

/// What an accepted action does: the step's change and the timeline's entries, applied
/// together in one transaction.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub change: StepChange,
    pub events: Vec<NewEvent>,
}

/// Why an action is refused. Every refusal leaves the step as it was; the message says
/// what to do instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The step's state does not allow this action.
    #[error("step `{step}` is `{}`, so it cannot be {} now; {}", state.as_str(), action.past(), allowed(*action))]
    StateForbids {
        step: String,
        state: StepState,
        action: Action,
    },
    /// A query on a pure handler: there is no provider to ask.
    #[error(
        "step `{step}` is a pure handler: it has no provider to ask; use `retry` to run it again"
    )]
    NoProvider { step: String },
    /// A query on an adapter that declares no lookups.
    #[error(
        "the adapter `{adapter}` does not declare lookups by reference, so there is nothing to ask; use `resolve` with the evidence you have"
    )]
    NoLookups { adapter: String },
    /// The contract that would judge the action cannot be loaded on this host.
    #[error("the adapter version that ran step `{step}` is not loaded on this host, so {what}")]
    ContractUnavailable { step: String, what: &'static str },
    /// A retry could repeat an effect that may have happened: no idempotency declared.
    #[error(
        "the request of step `{step}` may have reached {adapter} and the adapter does not declare idempotency, so a retry could do it twice; use `query` or `resolve`"
    )]
    NotIdempotent { step: String, adapter: String },
    /// A retry could repeat an effect: the provider has forgotten the key.
    #[error(
        "the provider's memory of the idempotency key ended at {} ({retention_seconds} s after the first request), so a retry could do it twice; use `resolve` with evidence",
        crate::intent::rfc3339(*forgotten_at)
    )]
    KeyForgotten {
        forgotten_at: Millis,
        retention_seconds: u64,
    },
    /// A compensation by hand is not possible now.
    #[error("the effect of step `{step}` cannot be compensated by hand: {why}")]
    CannotCompensate { step: String, why: String },
    /// An exception to a policy for a step no policy blocked.
    #[error(
        "step `{step}` is blocked, but not by the policy; an exception lets only a policy's denial through"
    )]
    NotPolicyBlocked { step: String },
    /// A resolution as succeeded whose output lacks a field later steps read.
    #[error(
        "later steps read the output field{} {} of step `{step}`, so a resolution as succeeded must give {} in `output` (a JSON object), e.g. {example}",
        if missing.len() == 1 { "" } else { "s" },
        missing.iter().map(|f| format!("`{f}`")).collect::<Vec<_>>().join(", "),
        if missing.len() == 1 { "it" } else { "them" },
    )]
    OutputIncomplete {
        step: String,
        missing: Vec<String>,
        example: String,
    },
    /// An action other than approve or reject on an approval step.
    #[error(
        "step `{step}` is an approval step: a person approves it (POST …/steps/{step}/approve with the consequence's digest) or rejects it (POST …/steps/{step}/reject with a reason); it cannot be {}",
        action.past()
    )]
    ApprovalStep { step: String, action: Action },
    /// Approve or reject on a step that asks no approval.
    #[error("step `{step}` is not an approval step, so there is nothing to {}", action.as_str())]
    NotAnApproval { step: String, action: Action },
    /// The consequence was asked again since the person saw it (a revision changed it).
    #[error(
        "the consequence changed: step `{step}` now asks approval of {current}, not of the digest given; read GET …/steps/{step}/consequence and approve what it shows"
    )]
    ConsequenceChanged { step: String, current: String },
    /// An action on a batch step itself: each of its items is an effect of its own.
    #[error(
        "step `{step}` is a batch step: each of its items is an effect of its own, so it is {} item by item (POST …/steps/{step}/items/{{item_key}}/{}; GET …/steps/{step}/items?state=failed_terminal lists those waiting)",
        action.past(),
        action.as_str()
    )]
    BatchStep { step: String, action: Action },
    /// A retry of a batch step none of whose items is unresolved.
    #[error(
        "no item of batch step `{step}` is unresolved (outcome unknown, blocked or failed): there is nothing to retry"
    )]
    NothingToRetry { step: String },
    /// The step moved while the action was being decided.
    #[error(
        "step `{step}` changed while the action was being decided (it was `{}`); read it again and decide anew",
        was.as_str()
    )]
    StepMoved { step: String, was: StepState },
}

impl Refusal {
    /// The stable code of this refusal, as stored under the action's key.
    pub fn code(&self) -> &'static str {
        match self {
            Refusal::StateForbids { .. } => "state_forbids",
            Refusal::NoProvider { .. } => "no_provider",
            Refusal::NoLookups { .. } => "no_lookups",
            Refusal::ContractUnavailable { .. } => "contract_unavailable",
            Refusal::NotIdempotent { .. } => "not_idempotent",
            Refusal::KeyForgotten { .. } => "key_forgotten",
            Refusal::CannotCompensate { .. } => "cannot_compensate",
            Refusal::NotPolicyBlocked { .. } => "not_policy_blocked",
            Refusal::OutputIncomplete { .. } => "output_incomplete",
            Refusal::StepMoved { .. } => "step_moved",
            Refusal::ApprovalStep { .. } => "approval_step",
            Refusal::NotAnApproval { .. } => "not_an_approval",
            Refusal::ConsequenceChanged { .. } => "consequence_changed",
            Refusal::BatchStep { .. } => "batch_step",
            Refusal::NothingToRetry { .. } => "nothing_to_retry",
        }
    }
}

/// The states an action is possible in, in words.
fn allowed(action: Action) -> String {
    match action {
        Action::Escalate => "only unfinished steps can be escalated".into(),
        Action::Compensate => "only a step that succeeded has an effect to reverse".into(),
        Action::Exception => "only a step blocked by the policy can be let through".into(),
        Action::Approve | Action::Reject => {
            "only an approval step awaiting approval can be approved or rejected".into()
        }
        other => format!(
            "{} is possible in: {}",
            other.noun(),
            settleable(other)
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// The states a query, retry or resolution may act on. A contradicted step only by a
/// person's resolution: asking again or retrying cannot choose between two references.
fn settleable(action: Action) -> impl Iterator<Item = StepState> {
    SETTLEABLE
        .into_iter()
        .filter(move |s| action == Action::Resolve || *s != StepState::Contradicted)
}

/// Decides an action: the plan to apply, or why not.
pub fn decide(s: &Situation<'_>) -> Result<Plan, Refusal> {
    let action = s.order.action();
    let decides_approval = matches!(action, Action::Approve | Action::Reject);
    if s.is_approval && !decides_approval && action != Action::Escalate {
        return Err(Refusal::ApprovalStep {
            step: s.step.to_string(),
            action,
        });
    }
    if decides_approval && !s.is_approval {
        return Err(Refusal::NotAnApproval {
            step: s.step.to_string(),
            action,
        });
    }
    let allowed_now = match action {
        Action::Approve | Action::Reject => {
            s.state == StepState::AwaitingApproval && s.approval.is_some()
        }
        Action::Escalate => !matches!(
            s.state,
            StepState::Succeeded | StepState::Compensated | StepState::Cancelled
        ),
        Action::Compensate => s.state == StepState::Succeeded,
        Action::Exception => s.state == StepState::Blocked,
        _ => settleable(action).any(|st| st == s.state),
    };
    if !allowed_now {
        return Err(Refusal::StateForbids {
            step: s.step.to_string(),
            state: s.state,
            action,
        });
    }
    let by = &s.actor.0;
    let event = |kind: EventKind, text: String, data: Value| {
        NewEvent::step(kind, s.step, None::<&AttemptId>, text).with_data(data)
    };
    match s.order {
        Order::Query => {
            if !s.is_adapter {
                return Err(Refusal::NoProvider {
                    step: s.step.to_string(),
                });
            }
            let contract = s.contract.ok_or_else(|| Refusal::ContractUnavailable {
                step: s.step.to_string(),
                what: "it cannot be asked",
            })?;
            if !contract.query.supported {
                return Err(Refusal::NoLookups {
                    adapter: contract.name.clone(),
                });
            }
            Ok(Plan {
                change: StepChange::Ready {
                    trigger: Trigger::RecoveryQuery,
                    settle_uncertainty: false,
                },
                events: vec![event(
                    EventKind::Action,
                    format!("Operator {by} asked for a query by the stable reference"),
                    json!({"action": "query", "author": by}),
                )],
            })
        }
        Order::Retry => {
            if s.is_adapter
                && let Some(sent_at) = s.history.first_sent_at
            {
                let contract = s.contract.ok_or_else(|| Refusal::ContractUnavailable {
                    step: s.step.to_string(),
                    what: "a retry cannot be judged safe",
                })?;
                match contract.same_key_retry(sent_at, s.now) {
                    SameKeyRetry::NotIdempotent => {
                        return Err(Refusal::NotIdempotent {
                            step: s.step.to_string(),
                            adapter: contract.name.clone(),
                        });
                    }
                    SameKeyRetry::Forgotten { at } => {
                        return Err(Refusal::KeyForgotten {
                            forgotten_at: at,
                            retention_seconds: contract.idempotency.retention_seconds,
                        });
                    }
                    SameKeyRetry::Safe { .. } => {}
                }
            }
            Ok(Plan {
                change: StepChange::Ready {
                    trigger: Trigger::ManualRetry,
                    settle_uncertainty: false,
                },
                events: vec![event(
                    EventKind::Action,
                    format!("Operator {by} ordered a retry with the same idempotency key"),
                    json!({"action": "retry", "author": by}),
                )],
            })
        }
        Order::Resolve {
            outcome,
            evidence,
            reason,
            external_reference,
            output,
        } => {
            let given = output.clone().unwrap_or_else(|| json!({}));
            let missing: Vec<String> = s
                .outputs
                .iter()
                .filter(|f| given.get(f.as_str()).is_none())
                .cloned()
                .collect();
            if *outcome == Resolution::Succeeded && !missing.is_empty() {
                let example = serde_json::Value::Object(
                    missing.iter().map(|f| (f.clone(), json!("…"))).collect(),
                )
                .to_string();
                return Err(Refusal::OutputIncomplete {
                    step: s.step.to_string(),
                    missing,
                    example,
                });
            }
            let data = json!({
                "action": "resolve",
                "author": by,
                "outcome": outcome.as_str(),
                "evidence": evidence,
                "reason": reason,
                "external_reference": external_reference,
            });
            let label = s.label;
            Ok(match outcome {
                Resolution::Succeeded => {
                    let receipt = manual_receipt(s, evidence, reason, external_reference, given);
                    let text = format!(
                        "{label} resolved by {by} as succeeded: manual receipt {} (evidence: {evidence}; reason: {reason})",
                        receipt.receipt_id
                    );
                    Plan {
                        change: StepChange::Succeed(Box::new(receipt)),
                        events: vec![
                            event(
                                EventKind::Action,
                                format!("Operator {by} reconciled the step with manual evidence"),
                                data.clone(),
                            ),
                            event(EventKind::Conclusion, text, data),
                        ],
                    }
                }
                Resolution::NotHappened => Plan {
                    change: StepChange::Ready {
                        trigger: Trigger::ManualRetry,
                        settle_uncertainty: true,
                    },
                    events: vec![event(
                        EventKind::Conclusion,
                        format!(
                            "{label} resolved by {by}: it did not happen (evidence: {evidence}; reason: {reason}); \
                             ready again under the same identity"
                        ),
                        data,
                    )],
                },
                Resolution::Abandon => Plan {
                    change: StepChange::Terminal {
                        state: StepState::FailedTerminal,
                        note: format!("abandoned by {by}: {reason}"),
                    },
                    events: vec![event(
                        EventKind::Conclusion,
                        format!(
                            "{label} abandoned by {by} (evidence: {evidence}; reason: {reason})"
                        ),
                        data,
                    )],
                },
            })
        }
        Order::Compensate { reason } => {
            let cannot = |why: String| Refusal::CannotCompensate {
                step: s.step.to_string(),
                why,
            };
            let course = s.course;
            let open_for_it = course.cancelled
                || matches!(
                    course.workflow,
                    crate::intent::WorkflowState::Failed | crate::intent::WorkflowState::Cancelled
                );
            if !open_for_it {
                return Err(cannot(format!(
                    "the workflow is {} without a cancellation; cancel it (or withdraw it) first",
                    course.workflow
                )));
            }
            if !s.is_adapter {
                return Err(cannot(
                    "it is a pure handler and had no external effect".into(),
                ));
            }
            if course.compensation_started || crate::course::compensated_step(s.step).is_some() {
                return Err(cannot("its compensation was already started".into()));
            }
            let contract = s.contract.ok_or_else(|| Refusal::ContractUnavailable {
                step: s.step.to_string(),
                what: "its compensation cannot be judged",
            })?;
            if !contract.compensation.supported {
                return Err(cannot(format!(
                    "the adapter `{}` does not declare compensation",
                    contract.name
                )));
            }
            let id = crate::course::compensation_id(s.step);
            Ok(Plan {
                change: StepChange::Compensate { id: id.clone() },
                events: vec![event(
                    EventKind::Action,
                    format!(
                        "Operator {by} ordered the compensation of {} ({id}): {reason}",
                        s.label
                    ),
                    json!({"action": "compensate", "author": by, "reason": reason}),
                )],
            })
        }
        Order::Exception { reason, evidence } => {
            let Some(version) = s.course.policy_block else {
                return Err(Refusal::NotPolicyBlocked {
                    step: s.step.to_string(),
                });
            };
            Ok(Plan {
                change: StepChange::Exception(crate::store::PolicyException {
                    author: by.clone(),
                    reason: reason.clone(),
                    evidence: evidence.clone(),
                }),
                events: vec![event(
                    EventKind::Action,
                    format!(
                        "Operator {by} made an exception to policy {version} for {}: one attempt may go through (reason: {reason}; evidence: {evidence})",
                        s.label
                    ),
                    json!({"action": "exception", "author": by, "policy_version": version,
                           "reason": reason, "evidence": evidence}),
                )],
            })
        }
        Order::Approve { digest, note } => {
            let Some(open) = s.approval else {
                return Err(Refusal::StateForbids {
                    step: s.step.to_string(),
                    state: s.state,
                    action,
                });
            };
            if *digest != open.digest {
                return Err(Refusal::ConsequenceChanged {
                    step: s.step.to_string(),
                    current: open.digest.clone(),
                });
            }
            let receipt = approval_receipt(s, open, note.as_deref());
            let data = json!({
                "action": "approve",
                "author": by,
                "approval": {"outcome": "approved", "by": by, "digest": digest, "note": note},
            });
            Ok(Plan {
                change: StepChange::Succeed(Box::new(receipt)),
                events: vec![event(
                    EventKind::Conclusion,
                    format!(
                        "{} approved by {by}: consequence {digest}{}",
                        s.label,
                        note.as_deref()
                            .map(|n| format!(" (note: {n})"))
                            .unwrap_or_default()
                    ),
                    data,
                )],
            })
        }
        Order::Reject { reason } => {
            let digest = s.approval.map(|a| a.digest.as_str());
            Ok(Plan {
                change: StepChange::Terminal {
                    state: StepState::FailedTerminal,
                    note: format!("rejected by {by}: {reason}"),
                },
                events: vec![event(
                    EventKind::Conclusion,
                    format!("{} rejected by {by}: {reason}; the step failed", s.label),
                    json!({
                        "action": "reject",
                        "author": by,
                        "approval": {"outcome": "rejected", "by": by, "reason": reason, "digest": digest},
                    }),
                )],
            })
        }
        Order::Escalate { note } => Ok(Plan {
            change: StepChange::Escalate(json!({"note": note, "by": by, "at": s.now})),
            events: vec![event(
                EventKind::Action,
                format!("Escalated by {by}: {note}"),
                json!({"action": "escalate", "author": by, "note": note}),
            )],
        }),
    }
}

/// The receipt of an approval: who approved which consequence, with each approved step's
/// input digest (what checkpoint 2 of that step compares), the note and the time.
fn approval_receipt(
    s: &Situation<'_>,
    open: &crate::store::ApprovalRecord,
    note: Option<&str>,
) -> NewReceipt {
    let inputs: serde_json::Map<String, Value> = open
        .consequence
        .get("steps")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|step| {
            Some((
                step.get("step")?.as_str()?.to_string(),
                step.get("input_digest")?.clone(),
            ))
        })
        .collect();
    NewReceipt {
        receipt_id: ReceiptId::new(s.now),
        evidence_kind: EvidenceKind::Approval,
        provenance: crate::intent::Provenance {
            input_digest: open.digest.clone(),
            ..crate::workflow::approval_provenance()
        },
        external_reference: None,
        output: json!({
            "approver": s.actor.0,
            "consequence_digest": open.digest,
            "inputs": inputs,
            "note": note,
            "approved_at": crate::intent::rfc3339(s.now),
        }),
        author: Some(s.actor.0.clone()),
        reason: note.map(str::to_string),
        evidence: Some(format!("approval of consequence {}", open.digest)),
    }
}

/// The receipt of a step a person resolved as succeeded: their evidence and reason, and
/// the provenance of the latest attempt that ran (what the step's attempts ran on, which
/// `docket check` holds the receipt to).
fn manual_receipt(
    s: &Situation<'_>,
    evidence: &str,
    reason: &str,
    external_reference: &Option<String>,
    output: Value,
) -> NewReceipt {
    NewReceipt {
        receipt_id: ReceiptId::new(s.now),
        evidence_kind: EvidenceKind::Manual,
        provenance: s
            .history
            .ran
            .and_then(|a| a.provenance.clone())
            .unwrap_or_default(),
        external_reference: external_reference.clone(),
        output,
        author: Some(s.actor.0.clone()),
        reason: Some(reason.to_string()),
        evidence: Some(evidence.to_string()),
    }
}

#[cfg(test)]
mod tests;
