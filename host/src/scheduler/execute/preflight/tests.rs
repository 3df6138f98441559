//! Every answer of [`preflight`], and the order of its rules, from plain facts.

use super::*;
use crate::budget::Limit;
use crate::contract::{CompensationClaim, DeclaredCapabilities, IdempotencyClaim, QueryClaim};
use crate::intent::{EvidenceKind, Provenance, ReceiptId, WorkflowId};
use crate::policy::PolicyDoc;
use crate::scheduler::execute::compensation_def;
use crate::scheduler::execute::tests::{claimed, step};
use crate::store::PolicyException;

/// Invoke by `billing-service` is denied; everything else is allowed.
const DOC: &str = r#"
[[rules]]
subjects = ["billing-service"]
actions = ["invoke"]
effect = "deny"
reason = "billing may not deliver documents"

[[rules]]
effect = "allow"
"#;

fn contract(compensation: bool) -> Contract {
    Contract {
        name: "courier".into(),
        version: "1.2.0".into(),
        idempotency: IdempotencyClaim {
            supported: true,
            retention_seconds: 100,
            namespace: "courier".into(),
        },
        query: QueryClaim {
            supported: true,
            visibility_window_ms: 5_000,
        },
        compensation: CompensationClaim {
            supported: compensation,
        },
        capabilities: DeclaredCapabilities::default(),
        observes: false,
        batch: None,
    }
}

fn limits(external_calls: u64) -> Limits {
    Limits {
        attempts: 10,
        runtime_ms: 60_000,
        external_calls,
        cost: None,
        recovery_queries: 1,
    }
}

fn key(step: &str) -> String {
    external_idempotency_key(&WorkflowId("wf_1".into()), step, "courier", None)
}

/// The receipt of `deliver`: the effect a compensation reverses.
fn delivered() -> Receipt {
    Receipt {
        receipt_id: ReceiptId("rcp_1".into()),
        workflow_id: WorkflowId("wf_1".into()),
        step: "deliver".into(),
        attempt_id: None,
        evidence_kind: EvidenceKind::Response,
        provenance: Provenance::default(),
        external_reference: Some("dlv_1".into()),
        output: serde_json::json!({}),
        recorded_at: 0,
        author: None,
        reason: None,
        evidence: None,
        superseded_by: None,
    }
}

/// The facts of one attempt, owned; [`Case::decide`] lends them to [`preflight`].
struct Case {
    claimed: Claimed,
    step: StepDef,
    contract: Option<Contract>,
    limits: Option<Limits>,
    policy: InForce,
}

impl Case {
    /// The first attempt of `deliver`, within its budget, with no policy deployed.
    fn invoke() -> Self {
        Self {
            claimed: claimed(1, 1_000_000),
            step: step(),
            contract: Some(contract(true)),
            limits: Some(limits(10)),
            policy: InForce::none(),
        }
    }

    /// The first attempt of `deliver.compensate`, with `deliver`'s receipt in its context.
    fn compensate() -> Self {
        let mut case = Self::invoke();
        case.claimed.fence.step = "deliver.compensate".into();
        case.claimed.context.receipts = vec![delivered()];
        case.step = compensation_def(&step());
        case.limits = None;
        case
    }

    fn query(mut self) -> Self {
        self.claimed.trigger = Trigger::RecoveryQuery;
        self.limits = None;
        self
    }

    fn under_policy(mut self) -> Self {
        self.policy = InForce {
            version: 3,
            doc: Some(PolicyDoc::parse(DOC).unwrap()),
        };
        self
    }

    fn decide(&self) -> Preflight<'_> {
        preflight(&PreflightFacts {
            claimed: &self.claimed,
            step: &self.step,
            component: ("courier", "1.2.0"),
            contract: self.contract.as_ref(),
            limits: self.limits,
            policy: &self.policy,
            environment: "production",
        })
    }
}

fn judged(decision: PolicyVerdict, author: Option<&str>) -> Option<AttemptPolicy> {
    Some(AttemptPolicy {
        version: 3,
        decision,
        author: author.map(str::to_string),
    })
}

#[test]
fn an_attempt_with_nothing_against_it_invokes_under_the_steps_key() {
    let case = Case::invoke();
    assert_eq!(
        case.decide(),
        Preflight::Proceed {
            contract: case.contract.as_ref().unwrap(),
            key: key("deliver"),
            call: Call::Invoke,
            policy: None,
        }
    );
}

#[test]
fn a_handler_version_cannot_run_an_adapter_step() {
    let case = Case {
        contract: None,
        ..Case::invoke()
    };
    assert_eq!(
        case.decide(),
        Preflight::Block {
            reason: "`courier@1.2.0` is a handler, and this is an adapter step; activate an adapter version".into()
        }
    );
}

#[test]
fn an_uncertain_request_is_recovered_only_under_the_key_it_was_sent_with() {
    let mut case = Case::invoke();
    case.claimed.context.sent_identity = Some(key("deliver"));
    assert!(matches!(case.decide(), Preflight::Proceed { .. }));
    // Another namespace's key: a person decides, before the budget is even looked at.
    case.claimed.context.sent_identity = Some("other-namespace-key".into());
    case.claimed.external_calls_used = 10;
    assert_eq!(
        case.decide(),
        Preflight::NamespaceChanged {
            contract: case.contract.as_ref().unwrap(),
            sent: "other-namespace-key",
        }
    );
}

#[test]
fn a_spent_call_budget_refuses_the_call_but_never_a_query_or_a_compensation() {
    let mut case = Case::invoke();
    case.claimed.external_calls_used = 10;
    let Preflight::OverBudget(exhausted) = case.decide() else {
        panic!("{:?}", case.decide())
    };
    assert_eq!(exhausted.limit, Limit::ExternalCalls);
    // The caller passes no limits for a query or a compensation.
    let mut query = Case::invoke().query();
    query.claimed.external_calls_used = 10;
    assert!(matches!(query.decide(), Preflight::Proceed { .. }));
    let mut compensation = Case::compensate();
    compensation.claimed.external_calls_used = 10;
    assert!(matches!(compensation.decide(), Preflight::Proceed { .. }));
}

#[test]
fn a_compensation_needs_a_version_that_declares_it_and_an_effect_to_reverse() {
    let case = Case::compensate();
    let receipt = &case.claimed.context.receipts[0];
    assert_eq!(
        case.decide(),
        Preflight::Proceed {
            contract: case.contract.as_ref().unwrap(),
            key: key("deliver.compensate"),
            call: Call::Compensate { original: receipt },
            policy: None,
        }
    );
    let undeclared = Case {
        contract: Some(contract(false)),
        ..Case::compensate()
    };
    assert_eq!(
        undeclared.decide(),
        Preflight::Block {
            reason: "`courier@1.2.0` does not declare compensation; activate a version that does, or resolve the compensation".into()
        }
    );
    let mut nothing_to_reverse = Case::compensate();
    nothing_to_reverse.claimed.context.receipts.clear();
    assert_eq!(
        nothing_to_reverse.decide(),
        Preflight::Block {
            reason: "`deliver` has no receipt: there is no known effect to reverse".into()
        }
    );
}

#[test]
fn a_recovery_query_asks_by_the_reference_and_no_policy_judges_it() {
    // The policy would deny billing's invoke: a query causes no effect, so it is not asked.
    let case = Case::invoke().query().under_policy();
    assert_eq!(
        case.decide(),
        Preflight::Proceed {
            contract: case.contract.as_ref().unwrap(),
            key: key("deliver"),
            call: Call::Query {
                reference: key("deliver")
            },
            policy: None,
        }
    );
    // A compensation's query looks up the original effect, whose status says if it was
    // reversed.
    let case = Case::compensate().query();
    let Preflight::Proceed { key: own, call, .. } = case.decide() else {
        panic!("{:?}", case.decide())
    };
    assert_eq!(own, key("deliver.compensate"));
    assert_eq!(
        call,
        Call::Query {
            reference: key("deliver")
        }
    );
}

#[test]
fn the_policy_in_force_judges_an_attempt_that_may_cause_an_effect() {
    let denied = Case::invoke().under_policy();
    assert_eq!(
        denied.decide(),
        Preflight::Denied {
            policy: judged(PolicyVerdict::Deny, None).unwrap(),
            reason: "billing may not deliver documents".into(),
        }
    );
    let mut allowed = Case::invoke().under_policy();
    allowed.claimed.subject = crate::intent::Subject("reports".into());
    let Preflight::Proceed { call, policy, .. } = allowed.decide() else {
        panic!("{:?}", allowed.decide())
    };
    assert_eq!(call, Call::Invoke);
    assert_eq!(policy, judged(PolicyVerdict::Allow, None));
    // A compensation is judged as one: the rule that denies billing's invoke does not.
    let compensation = Case::compensate().under_policy();
    let Preflight::Proceed { call, policy, .. } = compensation.decide() else {
        panic!("{:?}", compensation.decide())
    };
    assert!(matches!(call, Call::Compensate { .. }));
    assert_eq!(policy, judged(PolicyVerdict::Allow, None));
}

#[test]
fn an_operators_exception_lets_the_denied_attempt_through_and_is_recorded() {
    let mut case = Case::invoke().under_policy();
    case.claimed.policy_exception = Some(PolicyException {
        author: "ops".into(),
        reason: "approved by phone".into(),
        evidence: "ticket 7".into(),
    });
    let Preflight::Proceed { call, policy, .. } = case.decide() else {
        panic!("{:?}", case.decide())
    };
    assert_eq!(call, Call::Invoke);
    assert_eq!(policy, judged(PolicyVerdict::Exception, Some("ops")));
    // An exception waiting for a denial changes nothing of an allowed attempt.
    case.claimed.subject = crate::intent::Subject("reports".into());
    let Preflight::Proceed { policy, .. } = case.decide() else {
        panic!("{:?}", case.decide())
    };
    assert_eq!(policy, judged(PolicyVerdict::Allow, None));
}
