//! What a write does, decided once in pure code for both backends; each backend only
//! executes the plan in its own SQL. The timeline's wording is the domain's
//! ([`NewEvent`]'s constructors), never the store's. Two backends that each decided for themselves would
//! drift apart (they did: a revived workflow kept its end on one and not the other).

use super::{
    AdmitRequest, AttemptFacts, KeyRecord, NewReceipt, NewWorkflow, StepTransition, StoreError,
    StoreResult, WorkflowRecord,
};
use crate::course::{CourseStep, Settlement};
use crate::intent::{
    AttemptId, AttemptOutcome, Millis, NewEvent, StepRole, StepState, WorkflowId, WorkflowState,
};

/// A step's `reads` column: the JSON array of the steps whose receipts its input reads.
pub(crate) fn reads_text(reads: Option<&[String]>) -> StoreResult<Option<String>> {
    reads
        .map(|r| {
            serde_json::to_string(r)
                .map_err(|e| StoreError::never(format!("encoding a step's reads: {e}")))
        })
        .transpose()
}

/// A claimed step's `reads` column, back as step ids (see [`reads_text`]).
pub(crate) fn reads_list(text: Option<&str>) -> StoreResult<Option<Vec<String>>> {
    text.map(|t| {
        serde_json::from_str(t).map_err(|e| StoreError::Corrupt(format!("a step's reads: {e}")))
    })
    .transpose()
}

/// What a new cancellation records, or the refusal to store under its key.
pub(crate) fn cancellation(
    req: &super::CancelRequest,
    state: WorkflowState,
    steps: &[CourseStep],
) -> Result<super::CancellationRecord, super::StoredRefusal> {
    let (outcome, consequences) = crate::course::decide_cancel(state, req.withdraw, steps)
        .map_err(|message| super::StoredRefusal {
            code: "invalid_transition".into(),
            message,
            details: Vec::new(),
        })?;
    let label = |id: &str| {
        req.labels
            .get(id)
            .cloned()
            .unwrap_or_else(|| id.to_string())
    };
    let message = crate::course::cancel_message(outcome, steps, &consequences, &label);
    Ok(super::CancellationRecord {
        cancellation_id: req.cancellation_id.clone(),
        workflow_id: req.scope.workflow_id.clone(),
        requested_by: req.scope.subject.0.clone(),
        requested_at: req.now,
        reason: req.reason.clone(),
        withdraw: req.withdraw,
        outcome,
        message,
        consequences,
    })
}

/// The timeline's record of a cancellation.
pub(crate) fn cancellation_event(c: &super::CancellationRecord) -> NewEvent {
    let what = if c.withdraw {
        "Withdrawal"
    } else {
        "Cancellation"
    };
    NewEvent::workflow(
        crate::intent::EventKind::Action,
        format!(
            "{what} {} requested by {}: {}. {}",
            c.cancellation_id, c.requested_by, c.reason, c.message
        ),
    )
    .with_data(serde_json::json!({
        "cancellation_id": c.cancellation_id,
        "outcome": c.outcome,
        "consequences": c.consequences,
    }))
}

/// The answer stored under a cancel request's key.
pub(crate) fn cancel_answer_text(
    created: bool,
    c: &super::CancellationRecord,
) -> StoreResult<String> {
    serde_json::to_string(&super::StoredCancel {
        created,
        cancellation: c.clone(),
    })
    .map_err(|e| StoreError::Corrupt(format!("cancellation answer: {e}")))
}

/// Whether the workflow is still as a revision's plan saw it.
pub(crate) fn unmoved(
    seen: &super::RevisionSnapshot,
    state: WorkflowState,
    input_revision: u32,
    steps: &[(String, StepState, u32)],
) -> bool {
    let mut now: Vec<&(String, StepState, u32)> = steps.iter().collect();
    let mut then: Vec<&(String, StepState, u32)> = seen.steps.iter().collect();
    now.sort_by(|a, b| a.0.cmp(&b.0));
    then.sort_by(|a, b| a.0.cmp(&b.0));
    seen.state == state && seen.input_revision == input_revision && now == then
}

/// The record of an applied revision.
pub(crate) fn revision_record(
    req: &super::ReviseRequest,
    plan: &crate::course::RevisionPlan,
) -> super::RevisionRecord {
    super::RevisionRecord {
        workflow_id: req.scope.workflow_id.clone(),
        input_revision: req.seen.input_revision + 1,
        prior_digest: req.seen.input_digest.clone(),
        input_digest: req.input.digest.clone(),
        author: req.scope.subject.0.clone(),
        reason: req.reason.clone(),
        at: req.now,
        invalidated_steps: plan.invalidated.clone(),
        kept_receipts: plan.kept_receipts.clone(),
    }
}

/// The timeline's record of a revision.
pub(crate) fn revision_event(r: &super::RevisionRecord) -> NewEvent {
    let invalidated = if r.invalidated_steps.is_empty() {
        "no step runs again".to_string()
    } else {
        format!("runs again: {}", r.invalidated_steps.join(", "))
    };
    NewEvent::workflow(
        crate::intent::EventKind::Action,
        format!(
            "Input revision {} by {}: {} ({} → {}); {invalidated}",
            r.input_revision, r.author, r.reason, r.prior_digest, r.input_digest
        ),
    )
    .with_data(serde_json::json!({
        "input_revision": r.input_revision,
        "prior_digest": r.prior_digest,
        "input_digest": r.input_digest,
        "invalidated_steps": r.invalidated_steps,
        "kept_receipts": r.kept_receipts,
    }))
}

/// JSON text of a value the store keeps (an answer, a list).
pub(crate) fn json_text(value: &impl serde::Serialize) -> StoreResult<String> {
    serde_json::to_string(value).map_err(|e| StoreError::Corrupt(format!("stored JSON: {e}")))
}

/// The rows after a settlement, as the workflow's state is derived from them.
pub(crate) fn settled(steps: &[CourseStep], s: &Settlement) -> Vec<(Option<StepRole>, StepState)> {
    let mut out: Vec<(Option<StepRole>, StepState)> = steps
        .iter()
        .map(|step| {
            let state = if s.cancel.contains(&step.id) {
                StepState::Cancelled
            } else if s.compensated.contains(&step.id) {
                StepState::Compensated
            } else if s.start.iter().any(|c| c.of == step.id) {
                StepState::Compensating
            } else {
                step.state
            };
            (step.role, state)
        })
        .collect();
    out.extend(s.start.iter().map(|c| {
        let state = if c.after.is_empty() {
            StepState::Ready
        } else {
            StepState::Pending
        };
        (Some(StepRole::Compensation), state)
    }));
    out
}

/// The step columns an attempt's end writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TransitionColumns<'a> {
    pub state: StepState,
    pub ready_at: Option<i64>,
    pub next_trigger: Option<&'a str>,
    /// Set once, when the effect first became uncertain; cleared by a receipt.
    pub uncertain_since: Option<i64>,
    pub receipt_id: Option<&'a str>,
}

impl StepTransition {
    pub(crate) fn columns(&self) -> TransitionColumns<'_> {
        match self {
            StepTransition::Succeeded(r) => TransitionColumns {
                state: StepState::Succeeded,
                ready_at: None,
                next_trigger: None,
                uncertain_since: None,
                receipt_id: Some(r.receipt_id.as_str()),
            },
            StepTransition::Retry {
                ready_at,
                next_trigger,
                uncertain_since,
            } => TransitionColumns {
                state: StepState::FailedRetryable,
                ready_at: Some(*ready_at as i64),
                next_trigger: Some(next_trigger.as_str()),
                uncertain_since: uncertain_since.map(|v| v as i64),
                receipt_id: None,
            },
            StepTransition::Terminal(state) => TransitionColumns {
                state: *state,
                ready_at: None,
                next_trigger: None,
                uncertain_since: None,
                receipt_id: None,
            },
        }
    }
}

/// The workflow's move to another state, and everything that goes with it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct StateChange {
    pub next: WorkflowState,
    /// `ended_at`: set when the workflow ends, cleared when an operator revives it.
    pub ended_at: Option<i64>,
    /// Whether the key's retention changes: it starts counting at the end and stops when
    /// the workflow is revived (its key is reserved again while it runs).
    pub restart_key_retention: bool,
    /// The timeline's conclusion.
    pub event: NewEvent,
    /// The notification to queue, if the new state is one people are told about.
    pub notify: Option<crate::notify::EventType>,
}

/// Plans the workflow's state from its rows (with their roles; a row stored without one
/// reads as an adapter): `None` when it stays as it is.
pub(crate) fn state_change(
    current: WorkflowState,
    cancelled: bool,
    steps: impl IntoIterator<Item = (Option<StepRole>, StepState)>,
    now: Millis,
) -> Option<StateChange> {
    let steps = steps
        .into_iter()
        .map(|(role, state)| (role.unwrap_or(StepRole::Adapter), state));
    let next = WorkflowState::derive(cancelled, steps);
    if next == current {
        return None;
    }
    Some(StateChange {
        next,
        ended_at: next.is_ended().then_some(now as i64),
        restart_key_retention: next.is_ended() || current.is_ended(),
        event: NewEvent::workflow_state_changed(current, next),
        notify: crate::notify::EventType::of_state(next),
    })
}

/// The record of a workflow just admitted.
pub(crate) fn created(req: &AdmitRequest, new: &NewWorkflow) -> WorkflowRecord {
    WorkflowRecord {
        workflow_id: new.workflow_id.clone(),
        workflow: req.scope.workflow.clone(),
        definition_version: new.definition_version,
        subject: req.scope.subject.clone(),
        idempotency_key: req.scope.key.clone(),
        input: req.input.text.clone(),
        input_digest: req.input.digest.clone(),
        state: WorkflowState::Running,
        created_at: req.now,
        ended_at: None,
        deadline_at: new.deadline_at,
        attempts_used: 0,
        external_calls_used: 0,
        runtime_used_ms: 0,
        cost_used: 0,
        recovery_queries_used: 0,
        budget_added: Default::default(),
        revision: new.events.len() as u64,
        input_revision: 1,
        replaces: new.replaces.clone(),
        replaced_by: None,
        cancelled: false,
        policy_at_admission: new.policy_version,
        policy_current: new.policy_version,
        deadline_warned_at: None,
    }
}

/// A key that still reserves its scope at `now` (it has not expired).
pub(crate) fn live(key: Option<KeyRecord>, now: Millis) -> Option<KeyRecord> {
    key.filter(|k| k.expires_at.is_none_or(|e| e > now))
}

/// A notification's outbox row for `record` (as it stands after the transition): its
/// `webhook-id` and its body, fixed now, `{"id", "type", "workflow_id", "revision",
/// "occurred_at", "workflow": <summary>}`.
pub(crate) fn notification(
    record: &WorkflowRecord,
    event: crate::notify::EventType,
    now: Millis,
) -> NewNotification {
    let id = crate::intent::NotificationId::new(now);
    // Written straight from borrowed fields (keys in the order a JSON object sorts them,
    // as the body has always been written): no tree of values on the writer's path.
    #[derive(serde::Serialize)]
    struct Body<'a> {
        id: &'a str,
        occurred_at: String,
        revision: u64,
        #[serde(rename = "type")]
        kind: &'a str,
        workflow: Summary<'a>,
        workflow_id: &'a str,
    }
    #[derive(serde::Serialize)]
    struct Summary<'a> {
        created_at: String,
        definition_version: u32,
        ended_at: Option<String>,
        state: &'a str,
        subject: &'a str,
        workflow: &'a str,
        workflow_id: &'a str,
    }
    let body = serde_json::to_string(&Body {
        id: &id.0,
        occurred_at: crate::intent::rfc3339(now),
        revision: record.revision,
        kind: event.as_str(),
        workflow: Summary {
            created_at: crate::intent::rfc3339(record.created_at),
            definition_version: record.definition_version,
            ended_at: record.ended_at.map(crate::intent::rfc3339),
            state: record.state.as_str(),
            subject: &record.subject.0,
            workflow: &record.workflow,
            workflow_id: &record.workflow_id.0,
        },
        workflow_id: &record.workflow_id.0,
    })
    .expect("a notification body serializes");
    NewNotification {
        id: id.0,
        workflow_id: record.workflow_id.0.clone(),
        event: event.as_str(),
        revision: record.revision as i64,
        body,
        at: now as i64,
    }
}

/// An outbox row to insert.
pub(crate) struct NewNotification {
    pub id: String,
    pub workflow_id: String,
    pub event: &'static str,
    pub revision: i64,
    pub body: String,
    pub at: i64,
}

/// The columns an outbox insert writes, in [`NewNotification`]'s order.
pub(crate) const OUTBOX_INSERT: &str =
    "INSERT INTO outbox (id, workflow_id, type, revision, body, created_at, next_at)";

/// A value for a statement parameter, as both drivers bind it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Param<'a> {
    Text(Option<&'a str>),
    Int(Option<i64>),
    Flag(bool),
    Bytes(&'a [u8]),
}

impl<'a> From<&'a [u8]> for Param<'a> {
    fn from(v: &'a [u8]) -> Self {
        Param::Bytes(v)
    }
}

impl<'a> From<&'a Vec<u8>> for Param<'a> {
    fn from(v: &'a Vec<u8>) -> Self {
        Param::Bytes(v)
    }
}

impl<'a> From<&'a str> for Param<'a> {
    fn from(v: &'a str) -> Self {
        Param::Text(Some(v))
    }
}

impl<'a> From<&'a String> for Param<'a> {
    fn from(v: &'a String) -> Self {
        Param::Text(Some(v))
    }
}

impl<'a> From<Option<&'a str>> for Param<'a> {
    fn from(v: Option<&'a str>) -> Self {
        Param::Text(v)
    }
}

impl From<i64> for Param<'_> {
    fn from(v: i64) -> Self {
        Param::Int(Some(v))
    }
}

impl From<Option<i64>> for Param<'_> {
    fn from(v: Option<i64>) -> Self {
        Param::Int(v)
    }
}

impl From<bool> for Param<'_> {
    fn from(v: bool) -> Self {
        Param::Flag(v)
    }
}

/// Statement parameters, in order, each converted to a [`Param`].
macro_rules! values {
    ($($value:expr),* $(,)?) => {
        [$($crate::store::plan::Param::from($value)),*]
    };
}
pub(crate) use values;

/// An attempt's stored result as JSON text.
pub(crate) fn result_text(facts: &AttemptFacts) -> StoreResult<Option<String>> {
    facts
        .result
        .as_ref()
        .map(serde_json::to_string)
        .transpose()
        .map_err(|e| StoreError::Corrupt(format!("attempt result: {e}")))
}

/// The values that record an attempt's facts, in the order both backends' statements take
/// them: checkpoint, component, component version, component digest, input digest, request
/// identity, observation, outcome, finished at, log, result (JSON text), policy (JSON text),
/// attempt id. A value that is `None` leaves what was recorded.
pub(crate) fn facts_params<'a>(
    attempt: &'a AttemptId,
    checkpoint: u8,
    facts: &'a AttemptFacts,
    finished_at: Option<Millis>,
    log: Option<&'a str>,
    result: Option<&'a str>,
    policy: Option<&'a str>,
) -> [Param<'a>; 13] {
    use Param::{Int, Text};
    let p = facts.provenance.as_ref();
    [
        Int(Some(i64::from(checkpoint))),
        Text(p.map(|p| p.component.as_str())),
        Text(p.map(|p| p.component_version.as_str())),
        Text(p.map(|p| p.component_digest.as_str())),
        Text(p.map(|p| p.input_digest.as_str())),
        Text(facts.request_identity.as_deref()),
        Text(facts.observation.as_deref()),
        Text(facts.outcome.map(AttemptOutcome::as_str)),
        Int(finished_at.map(|v| v as i64)),
        Text(log),
        Text(result),
        Text(policy),
        Text(Some(attempt.as_str())),
    ]
}

/// Why a step is blocked, as JSON text (`None` clears it).
pub(crate) fn blocked_text(blocked: Option<&super::Blocked>) -> StoreResult<Option<String>> {
    blocked
        .map(serde_json::to_string)
        .transpose()
        .map_err(|e| StoreError::Corrupt(format!("step blocked: {e}")))
}

/// An attempt's policy decision as JSON text.
pub(crate) fn policy_text(facts: &AttemptFacts) -> StoreResult<Option<String>> {
    facts
        .policy
        .as_ref()
        .map(serde_json::to_string)
        .transpose()
        .map_err(|e| StoreError::Corrupt(format!("attempt policy: {e}")))
}

/// The columns of a receipt row, in the order of [`receipt_params`].
pub(crate) const RECEIPT_INSERT_COLUMNS: &str = "receipt_id, workflow_id, step, attempt_id, \
     evidence_kind, component, component_version, component_digest, input_digest, \
     external_reference, output, recorded_at, author, reason, evidence";

/// The values of a receipt row; `output` is the receipt's output as JSON text.
pub(crate) fn receipt_params<'a>(
    r: &'a NewReceipt,
    workflow_id: &'a WorkflowId,
    step: &'a str,
    attempt_id: Option<&'a AttemptId>,
    output: &'a str,
    now: Millis,
) -> [Param<'a>; 15] {
    use Param::{Int, Text};
    [
        Text(Some(r.receipt_id.as_str())),
        Text(Some(workflow_id.as_str())),
        Text(Some(step)),
        Text(attempt_id.map(AttemptId::as_str)),
        Text(Some(r.evidence_kind.as_str())),
        Text(Some(&r.provenance.component)),
        Text(Some(&r.provenance.component_version)),
        Text(Some(&r.provenance.component_digest)),
        Text(Some(&r.provenance.input_digest)),
        Text(r.external_reference.as_deref()),
        Text(Some(output)),
        Int(Some(now as i64)),
        Text(r.author.as_deref()),
        Text(r.reason.as_deref()),
        Text(r.evidence.as_deref()),
    ]
}

/// Attempts a finish gives back: the claim counted one that drew on the reserve or was
/// refused before it started.
pub(crate) fn uncharged(charge: crate::budget::Charge) -> i64 {
    i64::from(charge != crate::budget::Charge::Attempt)
}

/// Recovery queries a finish draws from the reserve.
pub(crate) fn from_reserve(charge: crate::budget::Charge) -> i64 {
    i64::from(charge == crate::budget::Charge::Reserve)
}

/// The timeline entry of an extension: who added what, why, and which steps it freed.
pub(crate) fn extension_event(req: &super::ExtendRequest, released: &[String]) -> NewEvent {
    let freed = match released {
        [] => String::new(),
        steps => format!("; {} may run again", steps.join(", ")),
    };
    NewEvent::workflow(
        crate::intent::EventKind::Action,
        format!(
            "Budget extended by {}: {} added ({}){freed}",
            req.scope.subject.0,
            req.add.describe(),
            req.reason
        ),
    )
    .with_data(serde_json::json!({
        "author": req.scope.subject.0,
        "add": req.add,
        "reason": req.reason,
        "released": released,
    }))
}

/// The stored answer of an extension: the workflow's `budget` block afterwards.
pub(crate) fn extension_answer(
    base: &crate::workflow::Budget,
    added: &crate::budget::Amounts,
    used: &crate::budget::Amounts,
) -> StoreResult<String> {
    let limits = crate::budget::Limits::of(base, added);
    serde_json::to_string(&crate::budget::BudgetView::new(&limits, used))
        .map_err(|e| StoreError::Corrupt(e.to_string()))
}

/// The timeline entry of a deadline that draws near while the workflow waits for a person.
pub(crate) fn deadline_event(deadline_at: Millis) -> NewEvent {
    NewEvent::workflow(
        crate::intent::EventKind::Observation,
        format!(
            "Deadline approaching: the workflow waits for review and its deadline is {}",
            crate::intent::rfc3339(deadline_at)
        ),
    )
}

/// Whether an attempt's end reverses an effect: a compensation's receipt.
pub(crate) fn compensated_now(transition: &StepTransition, step: &str) -> bool {
    matches!(transition, StepTransition::Succeeded(_))
        && crate::course::compensated_step(step).is_some()
}

/// A late result's step as the store found it.
#[derive(Debug, Clone)]
pub(crate) struct LateStep {
    pub state: StepState,
    pub role: Option<StepRole>,
    /// The step's effect became uncertain and is still being investigated.
    pub uncertain: bool,
    /// Whether a receipt stands for the step, and its external reference.
    pub receipt: Option<Option<String>>,
}

/// What a late result does to its step beyond the attempt's evidence. A later observation
/// never silently reverses a stronger one, and a stronger one settles a weaker state.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum LateVerdict {
    /// Nothing more: no reference, the one the step stands on, or a step not waiting on
    /// its outcome (a query or retry under the same key will see the same effect).
    Kept,
    /// The step waits on an unknown outcome and nothing else stands: the provider's own
    /// answer settles it.
    Settles(Box<NewReceipt>),
    /// The step stands on another reference: two references for one effect.
    Contradicts { standing: String, late: String },
}

/// Judges a late result of an effect step (see [`LateVerdict`]).
pub(crate) fn late_verdict(facts: &AttemptFacts, step: &LateStep) -> LateVerdict {
    let Some(receipt) = facts.result.as_ref().and_then(|r| match &r.transition {
        StepTransition::Succeeded(receipt) => Some(receipt),
        _ => None,
    }) else {
        return LateVerdict::Kept;
    };
    let Some(late) = receipt.external_reference.clone() else {
        return LateVerdict::Kept;
    };
    if !matches!(step.role, None | Some(StepRole::Adapter)) {
        return LateVerdict::Kept;
    }
    match &step.receipt {
        Some(Some(standing)) if *standing != late => LateVerdict::Contradicts {
            standing: standing.clone(),
            late,
        },
        Some(_) => LateVerdict::Kept,
        None if step.uncertain
            && matches!(
                step.state,
                StepState::Ready
                    | StepState::FailedRetryable
                    | StepState::OutcomeUnknown
                    | StepState::WaitingForReview
            ) =>
        {
            LateVerdict::Settles(receipt.clone())
        }
        None => LateVerdict::Kept,
    }
}

/// The contradiction a person must settle, as the step keeps it.
pub(crate) fn contradiction(standing: &str, late: &str) -> super::Blocked {
    super::Blocked {
        reason: "contradicted".into(),
        limit: None,
        policy_version: None,
        references: vec![standing.to_string(), late.to_string()],
        message: format!(
            "the step stands on {standing}, but a late result names {late}: two external references for one effect; a person decides which stands"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use StepState::*;

    /// The body's bytes are what receivers verify the signature over: keys sorted, as a
    /// JSON object has always written them, and an open end as `null`.
    #[test]
    fn a_notification_body_is_written_with_sorted_keys() {
        let new = NewWorkflow {
            workflow_id: crate::intent::WorkflowId("wf_1".into()),
            definition_version: 2,
            steps: Vec::new(),
            deadline_at: 9_000,
            key_retention_ms: 1_000,
            replaces: None,
            policy_version: 0,
            trace_parent: None,
            events: vec![NewEvent::workflow(
                crate::intent::EventKind::Observation,
                "x",
            )],
        };
        let req = AdmitRequest {
            scope: crate::store::KeyScope {
                subject: crate::intent::Subject("team".into()),
                workflow: "delivery".into(),
                key: "k".into(),
            },
            input: crate::intent::canonicalize(&serde_json::json!({})).unwrap(),
            now: 1_000,
            create: None,
        };
        let mut record = created(&req, &new);
        let n = notification(&record, crate::notify::EventType::Recorded, 2_000);
        assert_eq!(
            n.body,
            format!(
                "{{\"id\":\"{}\",\"occurred_at\":\"1970-01-01T00:00:02.000Z\",\"revision\":1,\
                 \"type\":\"workflow.recorded\",\"workflow\":{{\"created_at\":\"1970-01-01T00:00:01.000Z\",\
                 \"definition_version\":2,\"ended_at\":null,\"state\":\"running\",\"subject\":\"team\",\
                 \"workflow\":\"delivery\",\"workflow_id\":\"wf_1\"}},\"workflow_id\":\"wf_1\"}}",
                n.id
            )
        );
        record.state = WorkflowState::Completed;
        record.ended_at = Some(3_000);
        let n = notification(&record, crate::notify::EventType::Completed, 3_000);
        assert!(
            n.body
                .contains("\"ended_at\":\"1970-01-01T00:00:03.000Z\",\"state\":\"completed\""),
            "{}",
            n.body
        );
    }

    fn rows(states: &[StepState]) -> Vec<(Option<StepRole>, StepState)> {
        states
            .iter()
            .map(|s| (Some(StepRole::Handler), *s))
            .collect()
    }

    #[test]
    fn a_revived_workflow_is_no_longer_ended_and_its_key_is_reserved_again() {
        let change = state_change(
            WorkflowState::Failed,
            false,
            rows(&[Ready, Succeeded]),
            1_000,
        )
        .unwrap();
        assert_eq!(change.next, WorkflowState::Running);
        assert_eq!(change.ended_at, None);
        assert!(change.restart_key_retention);
        assert_eq!(change.notify, None);
        assert_eq!(change.event.text, "Workflow running again");
    }

    #[test]
    fn an_end_is_stamped_notified_and_starts_the_keys_retention() {
        let change = state_change(
            WorkflowState::Running,
            false,
            rows(&[Succeeded, Succeeded]),
            1_000,
        )
        .unwrap();
        assert_eq!(change.next, WorkflowState::Completed);
        assert_eq!(change.ended_at, Some(1_000));
        assert!(change.restart_key_retention);
        assert_eq!(change.notify, Some(crate::notify::EventType::Completed));
        let review =
            state_change(WorkflowState::Running, false, rows(&[OutcomeUnknown]), 5).unwrap();
        assert_eq!(review.ended_at, None);
        assert!(!review.restart_key_retention);
        assert_eq!(review.notify, Some(crate::notify::EventType::NeedsReview));
        assert!(
            state_change(WorkflowState::Running, false, rows(&[Running, Pending]), 5).is_none()
        );
    }

    #[test]
    fn released_dependents_are_named_once_and_none_is_silent() {
        assert!(NewEvent::released(&[]).is_none());
        let e = NewEvent::released(&["b".into(), "c".into()]).unwrap();
        assert_eq!(e.text, "Released b, c after its dependencies succeeded");
    }
}
