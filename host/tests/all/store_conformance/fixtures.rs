//! Request builders shared by the cases.

use super::backends::Store;
use docket::intent::{
    AttemptOutcome, CanonicalInput, EventKind, EvidenceKind, Millis, NewEvent, ReceiptId, StepRole,
    StepState, Subject, Trigger, WorkflowId, canonicalize,
};
use docket::store::{
    AdmitOutcome, AdmitRequest, AttemptFacts, AttemptResult, CheckpointRequest, ClaimRequest,
    Claimed, FinishOutcome, FinishRequest, KeyScope, NewReceipt, NewStep, NewWorkflow,
    StepTransition, WorkflowFilter, WorkflowRecord,
};
use serde_json::{Value, json};

/// The simulated start of every case.
pub const T0: Millis = 1_700_000_000_000;
/// The default lease.
pub const LEASE: u64 = 1_000;

pub fn scope(subject: &str, key: &str) -> KeyScope {
    KeyScope {
        subject: Subject(subject.into()),
        workflow: "letters".into(),
        key: key.into(),
    }
}

pub fn input(value: Value) -> CanonicalInput {
    canonicalize(&value).expect("a canonical input")
}

/// An admission creating a workflow with `steps` as (id, dependencies). A step named
/// `render…` is a handler, every other an adapter.
pub fn admit(
    scope: KeyScope,
    value: Value,
    steps: &[(&str, &[&str])],
    now: Millis,
) -> AdmitRequest {
    AdmitRequest {
        scope,
        input: input(value),
        now,
        create: Some(NewWorkflow {
            workflow_id: WorkflowId::new(now),
            definition_version: 1,
            steps: steps
                .iter()
                .map(|(id, deps)| NewStep {
                    id: id.to_string(),
                    depends_on: deps.iter().map(|d| d.to_string()).collect(),
                    role: if id.starts_with("render") {
                        StepRole::Handler
                    } else {
                        StepRole::Adapter
                    },
                    compensate_on: vec![],
                    reads: None,
                    adapter: None,
                })
                .collect(),
            deadline_at: now + 3_600_000,
            key_retention_ms: 10_000,
            replaces: None,
            policy_version: 0,
            trace_parent: None,
            events: vec![
                NewEvent::workflow(EventKind::Observation, "Request recorded"),
                NewEvent::workflow(EventKind::Action, "Scheduled"),
            ],
        }),
    }
}

/// Admits a new workflow that must be created, and returns it.
pub async fn create<S: Store>(s: &S, req: AdmitRequest) -> WorkflowRecord {
    match s.admit(req).await.expect("admission") {
        AdmitOutcome::Created(w) => w,
        other => panic!("expected a new workflow, got {other:?}"),
    }
}

/// A workflow with `steps` under a fresh key.
pub async fn workflow<S: Store>(
    s: &S,
    key: &str,
    steps: &[(&str, &[&str])],
    now: Millis,
) -> WorkflowId {
    create(
        s,
        admit(scope("alice", key), json!({"key": key}), steps, now),
    )
    .await
    .workflow_id
}

pub async fn claim<S: Store>(s: &S, owner: &str, now: Millis, limit: u32) -> Vec<Claimed> {
    claim_gated(s, owner, now, limit, Vec::new()).await
}

/// A claim by a host with limits on some adapters.
pub async fn claim_gated<S: Store>(
    s: &S,
    owner: &str,
    now: Millis,
    limit: u32,
    gates: Vec<docket::store::AdapterGate>,
) -> Vec<Claimed> {
    s.claim(ClaimRequest {
        owner: owner.into(),
        now,
        lease_ms: LEASE,
        limit,
        gates,
        urgent: false,
    })
    .await
    .expect("claim")
}

pub fn receipt(now: Millis, step: &str) -> NewReceipt {
    NewReceipt {
        receipt_id: ReceiptId::new(now),
        evidence_kind: EvidenceKind::Response,
        provenance: docket::intent::Provenance {
            component: "http-delivery".into(),
            component_version: "1.0.0".into(),
            component_digest: "sha256:abcd".into(),
            input_digest: "sha256:1234".into(),
        },
        external_reference: Some(format!("ext-{step}")),
        output: json!({"step": step}),
        author: None,
        reason: None,
        evidence: None,
    }
}

pub fn facts(observation: &str, outcome: AttemptOutcome) -> AttemptFacts {
    AttemptFacts {
        provenance: Some(docket::intent::Provenance {
            component: "http-delivery".into(),
            component_version: "1.0.0".into(),
            component_digest: "sha256:abcd".into(),
            input_digest: "sha256:1234".into(),
        }),
        request_identity: Some("dk-1".into()),
        observation: Some(observation.into()),
        outcome: Some(outcome),
        result: None,
        policy: None,
    }
}

/// Ends the claimed attempt with `transition`.
pub fn finish_request(c: &Claimed, transition: StepTransition, now: Millis) -> FinishRequest {
    let outcome = match &transition {
        StepTransition::Succeeded(_) => AttemptOutcome::Accepted,
        _ => AttemptOutcome::Rejected,
    };
    FinishRequest {
        fence: c.fence.clone(),
        attempt_id: c.attempt_id.clone(),
        checkpoint: 6,
        facts: facts("finished", outcome),
        transition,
        note: Some("finished".into()),
        log: json!(["a line"]),
        runtime_ms: 7,
        events: vec![NewEvent::step(
            EventKind::Conclusion,
            &c.fence.step,
            Some(&c.attempt_id),
            "Attempt finished",
        )],
        now,
        expired_before: None,
        decided_at: None,
        blocked: None,
        charge: Default::default(),
    }
}

/// Finishes the claimed attempt with a receipt.
pub async fn succeed<S: Store>(s: &S, c: &Claimed, now: Millis) -> FinishOutcome {
    s.finish(finish_request(
        c,
        StepTransition::Succeeded(Box::new(receipt(now, &c.fence.step))),
        now,
    ))
    .await
    .expect("finish")
}

/// Finishes the claimed attempt in a state nothing automatic leaves.
pub async fn end<S: Store>(s: &S, c: &Claimed, state: StepState, now: Millis) -> FinishOutcome {
    s.finish(finish_request(c, StepTransition::Terminal(state), now))
        .await
        .expect("finish")
}

pub fn checkpoint(
    c: &Claimed,
    number: u8,
    facts: AttemptFacts,
    events: usize,
    now: Millis,
) -> CheckpointRequest {
    CheckpointRequest {
        fence: c.fence.clone(),
        attempt_id: c.attempt_id.clone(),
        checkpoint: number,
        facts,
        external_call: (number == 3).then_some(1),
        remembered_until: None,
        events: (0..events)
            .map(|i| {
                NewEvent::step(
                    EventKind::Observation,
                    &c.fence.step,
                    Some(&c.attempt_id),
                    format!("checkpoint {number}, note {i}"),
                )
            })
            .collect(),
        now,
    }
}

/// A result as decided at checkpoint 5.
pub fn stored_result(now: Millis, step: &str) -> AttemptResult {
    AttemptResult {
        outcome: AttemptOutcome::Accepted,
        transition: StepTransition::Succeeded(Box::new(receipt(now, step))),
        note: Some("accepted by the provider".into()),
        events: vec![NewEvent::step(
            EventKind::Observation,
            step,
            None,
            "Provider accepted",
        )],
    }
}

/// Retry at `ready_at` with a given trigger.
pub fn retry(
    ready_at: Millis,
    next_trigger: Trigger,
    uncertain_since: Option<Millis>,
) -> StepTransition {
    StepTransition::Retry {
        ready_at,
        next_trigger,
        uncertain_since,
    }
}

/// The first `limit` workflows, newest first, unfiltered.
pub async fn first_workflows<S: Store>(s: &S, limit: u32) -> Vec<WorkflowRecord> {
    s.list_workflows(&WorkflowFilter {
        limit,
        ..WorkflowFilter::default()
    })
    .await
    .unwrap()
}
