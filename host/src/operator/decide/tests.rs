//! Every step state × every order × every kind of step and contract × whether a request
//! may have been sent, against a table written from the API's rules rather than from the
//! code.

use super::*;
use crate::contract::{CompensationClaim, DeclaredCapabilities, IdempotencyClaim, QueryClaim};
use crate::intent::{AttemptOutcome, WorkflowId};

/// Who ran (or would run) the step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Runner {
    Handler,
    /// An adapter step whose version cannot be loaded here.
    AdapterNotLoaded,
    FireAndForget,
    QueryOnly,
    /// Idempotent (100 s retention) and queryable.
    Idempotent,
}

const RUNNERS: [Runner; 5] = [
    Runner::Handler,
    Runner::AdapterNotLoaded,
    Runner::FireAndForget,
    Runner::QueryOnly,
    Runner::Idempotent,
];

/// When the first request may have reached the provider, relative to the decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sent {
    Never,
    /// Within the provider's key retention.
    Recently,
    /// Longer ago than the key retention.
    LongAgo,
}

const NOW: Millis = 1_000_000;
const RETENTION_S: u64 = 100;

fn contract(runner: Runner) -> Option<Contract> {
    let (idempotent, query) = match runner {
        Runner::Handler | Runner::AdapterNotLoaded => return None,
        Runner::FireAndForget => (false, false),
        Runner::QueryOnly => (false, true),
        Runner::Idempotent => (true, true),
    };
    Some(Contract {
        name: "courier".into(),
        version: "1.0.0".into(),
        idempotency: IdempotencyClaim {
            supported: idempotent,
            retention_seconds: RETENTION_S,
            namespace: "courier".into(),
        },
        query: QueryClaim {
            supported: query,
            visibility_window_ms: 5_000,
        },
        // As the shipped variants: queryable adapters can cancel a delivery.
        compensation: CompensationClaim { supported: query },
        capabilities: DeclaredCapabilities::default(),
        observes: false,
        batch: None,
    })
}

fn attempt(sent: Sent) -> Option<AttemptRecord> {
    let started_at = match sent {
        Sent::Never => NOW - 10,
        Sent::Recently => NOW - RETENTION_S * 1000 / 2,
        Sent::LongAgo => NOW - RETENTION_S * 1000 - 1,
    };
    Some(AttemptRecord {
        attempt_id: AttemptId("att_1".into()),
        workflow_id: WorkflowId("wf_1".into()),
        step: "deliver".into(),
        number: 1,
        trigger: Trigger::Initial,
        lease_owner: "host-a".into(),
        provenance: Some(crate::intent::Provenance {
            component: "courier".into(),
            component_version: "1.0.0".into(),
            component_digest: "sha256:c".into(),
            input_digest: "sha256:i".into(),
        }),
        request_identity: (sent != Sent::Never).then(|| "key-1".into()),
        checkpoint: if sent == Sent::Never { 2 } else { 5 },
        observation: None,
        outcome: AttemptOutcome::TimedOut,
        started_at,
        finished_at: Some(started_at + 5),
        log: Value::Null,
        superseded_by: None,
        input_revision: 1,
        policy: None,
    })
}

fn orders() -> Vec<Order> {
    let mut all = vec![Order::Query, Order::Retry];
    for outcome in Resolution::ALL {
        all.push(
            Order::resolve(
                Some(outcome.as_str()),
                Some("provider dashboard"),
                Some("confirmed by phone"),
                Some("dlv_42"),
                None,
            )
            .unwrap(),
        );
    }
    all.push(Order::escalate(Some("ask the provider")).unwrap());
    all.push(Order::compensate(Some("withdrawn by the client")).unwrap());
    all.push(Order::exception(Some("approved by the audit"), Some("ticket 42")).unwrap());
    all.push(Order::approve(Some(DIGEST), Some("looks right")).unwrap());
    all.push(Order::reject(Some("wrong recipient")).unwrap());
    all
}

/// The digest of the consequence an approval step asks about, in these tests.
const DIGEST: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";

/// A failed workflow: where a compensation by hand is allowed.
const FAILED: CourseFacts = CourseFacts {
    workflow: crate::intent::WorkflowState::Failed,
    cancelled: false,
    compensation_started: false,
    policy_block: None,
};

/// What the step becomes, in a word, when the action is accepted.
fn change_kind(change: &StepChange) -> &'static str {
    match change {
        StepChange::Ready {
            trigger: Trigger::RecoveryQuery,
            settle_uncertainty: false,
        } => "query",
        StepChange::Ready {
            trigger: Trigger::ManualRetry,
            settle_uncertainty: false,
        } => "retry",
        StepChange::Ready {
            trigger: Trigger::ManualRetry,
            settle_uncertainty: true,
        } => "ready_settled",
        StepChange::Ready { .. } => "other_ready",
        StepChange::Succeed(_) => "manual_receipt",
        StepChange::Terminal {
            state: StepState::FailedTerminal,
            ..
        } => "abandoned",
        StepChange::Terminal { .. } => "other_terminal",
        StepChange::Escalate(_) => "escalated",
        StepChange::Compensate { .. } => "compensate",
        StepChange::Exception(_) => "exception",
    }
}

/// The rules, as the API states them: `Ok(change)` or `Err(refusal code)`.
fn expected(
    state: StepState,
    order: &Order,
    runner: Runner,
    sent: Sent,
) -> Result<&'static str, &'static str> {
    use StepState::*;
    let settleable = matches!(
        state,
        OutcomeUnknown | WaitingForReview | Blocked | FailedRetryable | FailedTerminal
    ) || (state == Contradicted && matches!(order, Order::Resolve { .. }));
    match order {
        // The steps of this table ask no approval (see the dedicated test).
        Order::Approve { .. } | Order::Reject { .. } => Err("not_an_approval"),
        // No policy blocked the step in this table (see the dedicated test).
        Order::Exception { .. } => match state {
            Blocked => Err("not_policy_blocked"),
            _ => Err("state_forbids"),
        },
        Order::Compensate { .. } => match (state, runner) {
            (Succeeded, Runner::Handler | Runner::FireAndForget) => Err("cannot_compensate"),
            (Succeeded, Runner::AdapterNotLoaded) => Err("contract_unavailable"),
            (Succeeded, Runner::QueryOnly | Runner::Idempotent) => Ok("compensate"),
            _ => Err("state_forbids"),
        },
        Order::Escalate { .. } => {
            if matches!(state, Succeeded | Compensated | Cancelled) {
                Err("state_forbids")
            } else {
                Ok("escalated")
            }
        }
        _ if !settleable => Err("state_forbids"),
        Order::Query => match runner {
            Runner::Handler => Err("no_provider"),
            Runner::AdapterNotLoaded => Err("contract_unavailable"),
            Runner::FireAndForget => Err("no_lookups"),
            Runner::QueryOnly | Runner::Idempotent => Ok("query"),
        },
        Order::Retry => match (runner, sent) {
            (Runner::Handler, _) | (_, Sent::Never) => Ok("retry"),
            (Runner::AdapterNotLoaded, _) => Err("contract_unavailable"),
            (Runner::FireAndForget | Runner::QueryOnly, _) => Err("not_idempotent"),
            (Runner::Idempotent, Sent::Recently) => Ok("retry"),
            (Runner::Idempotent, Sent::LongAgo) => Err("key_forgotten"),
        },
        Order::Resolve { outcome, .. } => Ok(match outcome {
            Resolution::Succeeded => "manual_receipt",
            Resolution::NotHappened => "ready_settled",
            Resolution::Abandon => "abandoned",
        }),
    }
}

#[test]
fn every_state_action_and_contract_is_decided_as_the_rules_say() {
    let actor = Subject("ops".into());
    let mut cases = 0;
    for state in StepState::ALL {
        for order in orders() {
            for runner in RUNNERS {
                for sent in [Sent::Never, Sent::Recently, Sent::LongAgo] {
                    let contract = contract(runner);
                    let attempts: Vec<AttemptRecord> = attempt(sent).into_iter().collect();
                    let situation = Situation {
                        order: &order,
                        actor: &actor,
                        step: "deliver",
                        state: *state,
                        label: "Deliver the document",
                        is_adapter: runner != Runner::Handler,
                        is_approval: false,
                        approval: None,
                        outputs: &[],
                        contract: contract.as_ref(),
                        history: History::of(&attempts),
                        course: FAILED,
                        now: NOW,
                    };
                    let got = decide(&situation);
                    let want = expected(*state, &order, runner, sent);
                    let what = format!("{state:?} × {order:?} × {runner:?} × {sent:?}");
                    match (&got, want) {
                        (Ok(plan), Ok(kind)) => {
                            assert_eq!(change_kind(&plan.change), kind, "{what}");
                            assert!(!plan.events.is_empty(), "{what}: no timeline entry");
                            assert!(
                                plan.events
                                    .iter()
                                    .all(|e| e.step.as_deref() == Some("deliver")
                                        && e.data["author"] == "ops"),
                                "{what}: {:?}",
                                plan.events
                            );
                        }
                        (Err(refusal), Err(code)) => {
                            assert_eq!(refusal.code(), code, "{what}: {refusal}");
                            assert!(!refusal.to_string().is_empty());
                        }
                        (got, want) => panic!("{what}: got {got:?}, want {want:?}"),
                    }
                    cases += 1;
                }
            }
        }
    }
    assert_eq!(
        cases,
        StepState::ALL.len() * orders().len() * RUNNERS.len() * 3
    );
}

#[test]
fn a_manual_receipt_names_its_author_evidence_and_the_latest_attempts_provenance() {
    let actor = Subject("ops".into());
    let order = Order::resolve(
        Some("succeeded"),
        Some("provider dashboard lists dlv_42"),
        Some("confirmed by phone"),
        Some(" dlv_42 "),
        None,
    )
    .unwrap();
    let attempts: Vec<AttemptRecord> = attempt(Sent::Recently).into_iter().collect();
    let plan = decide(&Situation {
        order: &order,
        actor: &actor,
        step: "deliver",
        state: StepState::OutcomeUnknown,
        label: "Deliver the document",
        is_adapter: true,
        is_approval: false,
        approval: None,
        outputs: &[],
        contract: None,
        history: History::of(&attempts),
        course: FAILED,
        now: NOW,
    })
    .unwrap();
    let StepChange::Succeed(receipt) = plan.change else {
        panic!("{:?}", plan.change)
    };
    assert_eq!(receipt.evidence_kind, EvidenceKind::Manual);
    assert_eq!(receipt.author.as_deref(), Some("ops"));
    assert_eq!(
        receipt.evidence.as_deref(),
        Some("provider dashboard lists dlv_42")
    );
    assert_eq!(receipt.reason.as_deref(), Some("confirmed by phone"));
    assert_eq!(receipt.external_reference.as_deref(), Some("dlv_42"));
    assert_eq!(receipt.provenance.component, "courier");
    assert_eq!(receipt.provenance.component_digest, "sha256:c");
    assert_eq!(receipt.provenance.input_digest, "sha256:i");
}

#[test]
fn refusals_say_what_to_do_instead() {
    let forgotten = Refusal::KeyForgotten {
        forgotten_at: 0,
        retention_seconds: 100,
    };
    assert!(
        forgotten
            .to_string()
            .contains("use `resolve` with evidence")
    );
    let forbidden = Refusal::StateForbids {
        step: "deliver".into(),
        state: StepState::Succeeded,
        action: Action::Retry,
    };
    assert_eq!(
        forbidden.to_string(),
        "step `deliver` is `succeeded`, so it cannot be retried now; a retry is possible in: \
         outcome_unknown, waiting_for_review, blocked, failed_retryable, failed_terminal"
    );
}

#[test]
fn orders_missing_what_they_need_name_the_field() {
    let e = Order::resolve(Some("done"), Some("e"), Some("r"), None, None).unwrap_err();
    assert_eq!(e.field, "outcome");
    assert!(e.message.contains("`done`"), "{e}");
    let e = Order::resolve(None, Some("e"), Some("r"), None, None).unwrap_err();
    assert_eq!(e.field, "outcome");
    let e = Order::resolve(Some("abandon"), Some("  "), Some("r"), None, None).unwrap_err();
    assert_eq!(e.field, "evidence");
    let e = Order::resolve(Some("abandon"), Some("e"), None, None, None).unwrap_err();
    assert_eq!(e.field, "reason");
    let e = Order::escalate(Some("")).unwrap_err();
    assert_eq!(e.field, "note");
    let blank_reference =
        Order::resolve(Some("abandon"), Some("e"), Some("r"), Some(" "), None).unwrap();
    assert_eq!(
        blank_reference.to_json(),
        serde_json::json!({"outcome": "abandon", "evidence": "e", "reason": "r"})
    );
}

#[test]
fn a_compensation_by_hand_needs_a_workflow_that_will_not_complete() {
    let actor = Subject("ops".into());
    let order = Order::compensate(Some("the client withdrew")).unwrap();
    let contract = contract(Runner::Idempotent);
    let situation = |course: CourseFacts| Situation {
        order: &order,
        actor: &actor,
        step: "deliver",
        state: StepState::Succeeded,
        label: "Deliver the document",
        is_adapter: true,
        is_approval: false,
        approval: None,
        outputs: &[],
        contract: contract.as_ref(),
        history: History::default(),
        course,
        now: NOW,
    };
    let running = CourseFacts {
        workflow: crate::intent::WorkflowState::Completed,
        ..FAILED
    };
    let refused = decide(&situation(running)).unwrap_err();
    assert_eq!(refused.code(), "cannot_compensate");
    assert!(
        refused
            .to_string()
            .contains("cancel it (or withdraw it) first")
    );
    let cancelled = CourseFacts {
        cancelled: true,
        ..running
    };
    let plan = decide(&situation(cancelled)).unwrap();
    assert_eq!(
        plan.change,
        StepChange::Compensate {
            id: "deliver.compensate".into()
        }
    );
    let twice = CourseFacts {
        compensation_started: true,
        ..cancelled
    };
    assert_eq!(
        decide(&situation(twice)).unwrap_err().code(),
        "cannot_compensate"
    );
}

#[test]
fn an_exception_lets_one_attempt_through_the_policy_that_blocked_it() {
    let actor = Subject("ops".into());
    let order = Order::exception(Some("approved by the audit"), Some("ticket 42")).unwrap();
    let blocked = CourseFacts {
        policy_block: Some(4),
        ..FAILED
    };
    let plan = decide(&Situation {
        order: &order,
        actor: &actor,
        step: "deliver",
        state: StepState::Blocked,
        label: "Deliver the document",
        is_adapter: true,
        is_approval: false,
        approval: None,
        outputs: &[],
        contract: None,
        history: History::default(),
        course: blocked,
        now: NOW,
    })
    .unwrap();
    let StepChange::Exception(grant) = plan.change else {
        panic!("{:?}", plan.change)
    };
    assert_eq!(grant.author, "ops");
    assert!(plan.events[0].text.contains("exception to policy 4"));
}

#[test]
fn a_resolution_as_succeeded_gives_every_output_field_later_steps_read() {
    let actor = Subject("ops".into());
    let outputs = vec!["tracking_number".to_string()];
    let on = |order: &Order| {
        decide(&Situation {
            order,
            actor: &actor,
            step: "deliver",
            state: StepState::WaitingForReview,
            label: "Deliver the document",
            is_adapter: true,
            is_approval: false,
            approval: None,
            outputs: &outputs,
            contract: None,
            history: History::default(),
            course: FAILED,
            now: NOW,
        })
    };
    let resolve = |outcome: &str, output: Option<Value>| {
        Order::resolve(Some(outcome), Some("e"), Some("r"), None, output).unwrap()
    };
    let refusal = on(&resolve("succeeded", None)).unwrap_err();
    assert_eq!(refusal.code(), "output_incomplete");
    assert!(
        refusal.to_string().contains("`tracking_number`")
            && refusal.to_string().contains(r#"{"tracking_number":"…"}"#),
        "{refusal}"
    );
    let partial = resolve("succeeded", Some(json!({"other": 1})));
    assert_eq!(on(&partial).unwrap_err().code(), "output_incomplete");
    let full = resolve("succeeded", Some(json!({"tracking_number": "T-1"})));
    let StepChange::Succeed(receipt) = on(&full).unwrap().change else {
        panic!("a full output writes the receipt")
    };
    assert_eq!(receipt.output, json!({"tracking_number": "T-1"}));
    // Only a receipt needs the fields.
    assert!(on(&resolve("not_happened", None)).is_ok());
    // An output is an object of fields.
    let e = Order::resolve(
        Some("succeeded"),
        Some("e"),
        Some("r"),
        None,
        Some(json!(3)),
    )
    .unwrap_err();
    assert_eq!(e.field, "output");
}

/// An approval step: only approve and reject decide it (escalate marks it), and only
/// while it waits with a question; the digest approved must be the question's.
#[test]
fn an_approval_step_is_decided_only_by_approve_or_reject_of_its_question() {
    let actor = Subject("carol".into());
    let open = crate::store::ApprovalRecord {
        workflow_id: crate::intent::WorkflowId("wf_1".into()),
        step: "approve".into(),
        attempt_id: AttemptId("att_1".into()),
        digest: DIGEST.into(),
        consequence: serde_json::json!({"approval": "approve", "steps": [
            {"step": "deliver", "input_digest": "sha256:2222"}
        ]}),
        asked_at: NOW - 10,
        expires_at: NOW + 1_000,
        warned_at: None,
        outcome: None,
        decided_by: None,
        decided_at: None,
        decision_text: None,
    };
    for state in StepState::ALL {
        for order in orders() {
            let waiting = *state == StepState::AwaitingApproval;
            let got = decide(&Situation {
                order: &order,
                actor: &actor,
                step: "approve",
                state: *state,
                label: "Approve delivery",
                is_adapter: false,
                is_approval: true,
                approval: waiting.then_some(&open),
                outputs: &[],
                contract: None,
                history: History::default(),
                course: FAILED,
                now: NOW,
            });
            let what = format!("{state:?} × {order:?}");
            match (&order, waiting) {
                (Order::Approve { .. }, true) => {
                    let plan = got.unwrap_or_else(|e| panic!("{what}: {e}"));
                    let StepChange::Succeed(receipt) = plan.change else {
                        panic!("{what}: {:?}", plan.change)
                    };
                    assert_eq!(receipt.evidence_kind, EvidenceKind::Approval);
                    assert_eq!(receipt.output["approver"], "carol");
                    assert_eq!(receipt.output["consequence_digest"], DIGEST);
                    assert_eq!(receipt.output["inputs"]["deliver"], "sha256:2222");
                    assert_eq!(receipt.provenance.input_digest, DIGEST);
                }
                (Order::Reject { .. }, true) => {
                    let plan = got.unwrap_or_else(|e| panic!("{what}: {e}"));
                    assert!(
                        matches!(
                            plan.change,
                            StepChange::Terminal {
                                state: StepState::FailedTerminal,
                                ..
                            }
                        ),
                        "{what}: {:?}",
                        plan.change
                    );
                }
                (Order::Approve { .. } | Order::Reject { .. }, false) => {
                    assert_eq!(got.unwrap_err().code(), "state_forbids", "{what}");
                }
                (Order::Escalate { .. }, _) => {
                    let finished = matches!(
                        state,
                        StepState::Succeeded | StepState::Compensated | StepState::Cancelled
                    );
                    assert_eq!(got.is_ok(), !finished, "{what}");
                }
                _ => {
                    let refusal = got.unwrap_err();
                    assert_eq!(refusal.code(), "approval_step", "{what}");
                    assert!(refusal.to_string().contains("/approve"), "{refusal}");
                }
            }
        }
    }
    // Another digest than the question's: the consequence changed, naming the current one.
    let stale = Order::approve(Some("sha256:9999"), None).unwrap();
    let refusal = decide(&Situation {
        order: &stale,
        actor: &actor,
        step: "approve",
        state: StepState::AwaitingApproval,
        label: "Approve delivery",
        is_adapter: false,
        is_approval: true,
        approval: Some(&open),
        outputs: &[],
        contract: None,
        history: History::default(),
        course: FAILED,
        now: NOW,
    })
    .unwrap_err();
    assert_eq!(refusal.code(), "consequence_changed");
    assert!(refusal.to_string().contains(DIGEST), "{refusal}");
}
