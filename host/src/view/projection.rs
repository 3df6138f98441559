//! The JSON shapes of workflows built from stored records: the workflow projection, list
//! summaries, timeline entries and attempts.
//!
//! Building a view is pure: the handlers read the records, these functions shape them.
//! Times become RFC 3339 text here. An attempt's external request identity is a reusable
//! idempotency key, so only a recognisable prefix of it is ever shown.

use super::course::{CourseActionView, course_actions, course_steps};
use super::status::{self, NextAction, StepStatus};
use super::time::{rfc3339, rfc3339_opt};
use crate::intent::{
    AttemptOutcome, EventKind, EvidenceKind, Provenance, Receipt, StepRole, StepState,
    TimelineEvent, Trigger, WorkflowState,
};
use crate::store::{AttemptRecord, StepRecord, WorkflowRecord};
use crate::workflow::WorkflowDef;
use serde::Serialize;
use serde_json::Value;

/// The answer of `POST /v1/intents` and `GET /v1/intents/{key}`.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct IntentView {
    pub workflow_id: String,
    pub workflow: String,
    pub definition_version: u32,
    pub state: WorkflowState,
    /// Present on `POST` answers only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replayed: Option<bool>,
    pub created_at: String,
}

impl IntentView {
    /// The intent behind `record`; `replayed` is `None` for reads by key.
    pub fn new(record: &WorkflowRecord, replayed: Option<bool>) -> Self {
        Self {
            workflow_id: record.workflow_id.to_string(),
            workflow: record.workflow.clone(),
            definition_version: record.definition_version,
            state: record.state,
            replayed,
            created_at: rfc3339(record.created_at),
        }
    }
}

/// `GET /v1/workflows/{id}`.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct WorkflowView {
    pub workflow_id: String,
    pub workflow: String,
    pub definition_version: u32,
    /// The version it ran before its last migration (`GET …/migrations` has each);
    /// absent if it never moved.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub migrated_from_version: Option<u32>,
    pub subject: String,
    pub idempotency_key: String,
    pub input_digest: String,
    pub state: WorkflowState,
    pub created_at: String,
    pub ended_at: Option<String>,
    pub status_text: String,
    pub next_action: Option<NextAction>,
    pub milestones: Vec<MilestoneView>,
    pub steps: Vec<StepView>,
    /// Grows with every timeline event; the response's `ETag`.
    pub revision: u64,
    pub input_revision: u32,
    pub replaces: Option<String>,
    pub replaced_by: Option<String>,
    /// The changes of course the caller may ask for now.
    pub actions: Vec<CourseActionView>,
    /// The policy version in force at admission, and the one last evaluated for it.
    pub policy: PolicyView,
    /// Used and limit of each budget (`null` when the definition cannot be read).
    pub budget: Option<crate::budget::BudgetView>,
    /// The deadline, and whether a workflow waiting for a person is near it.
    pub deadline: DeadlineView,
}

/// A workflow's deadline as people see it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct DeadlineView {
    pub at: String,
    /// Waiting for a person with a fifth of the deadline or less left (recorded on the
    /// timeline when first seen, so the projection changes with its revision).
    pub approaching: bool,
}

/// Which policy versions a workflow met.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct PolicyView {
    pub at_admission: u32,
    pub current: u32,
}

/// A milestone on the wire.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct MilestoneView {
    pub name: String,
    pub reached_at: Option<String>,
}

/// One step of the projection.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct StepView {
    pub id: String,
    pub label: String,
    pub state: StepState,
    pub attempts: u32,
    /// `{"note", "by", "at"}` once escalated.
    pub escalated: Option<Value>,
    pub receipt: Option<ReceiptView>,
    /// Why the step is blocked, when it is.
    pub blocked: Option<Value>,
    /// `{"references": [standing, later], "message"}` while the step is contradicted.
    pub contradicted: Option<Value>,
    /// The compensation of the step's effect, once one was started.
    pub compensation: Option<CompensationView>,
    /// Receipts a correction of the input superseded (each names its revision), oldest
    /// first.
    pub superseded_receipts: Vec<ReceiptView>,
    /// While the step's outcome is unknown and its provider deduplicates: until when the
    /// provider remembers the key its request was sent under, so a same-key retry is safe.
    pub retention_deadline: Option<String>,
    /// For an adapter step that ran: the adapter version of its latest attempt, and whether
    /// its declared contract (what recovery relies on) was verified.
    pub contract: Option<ContractView>,
    /// For an approval step once asked: the consequence's digest, until when it waits, and
    /// how it was decided.
    pub approval: Option<ApprovalView>,
    /// For a batch step whose items exist: how many stand where (each item is an effect
    /// of its own; `GET …/steps/{step}/items` pages them).
    pub items: Option<ItemCounts>,
}

/// One item of a batch step: an effect intent of its own.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct ItemView {
    pub item_key: String,
    /// Its place in the step's list (from 0).
    pub index: u64,
    /// The row its attempts, receipt and actions are under (`<step>[<item key>]`):
    /// `…/steps/{step}/items/{item_key}/{action}` acts on it.
    pub step: String,
    pub state: StepState,
    pub attempts: u32,
    /// Why it stands where it does, when it was said.
    pub note: Option<String>,
    pub receipt: Option<ReceiptView>,
}

impl ItemView {
    /// The items of batch step `step`, in the list's order.
    pub fn of(step: &str, steps: &[StepRecord], receipts: &[Receipt]) -> Vec<ItemView> {
        let mut items: Vec<ItemView> = steps
            .iter()
            .filter(|s| s.batch_of.as_deref() == Some(step))
            .map(|s| ItemView {
                item_key: s.item_key.clone().unwrap_or_default(),
                index: s.item_index.unwrap_or_default(),
                step: s.step.clone(),
                state: s.state,
                attempts: s.attempts,
                note: s.note.clone(),
                receipt: receipt_of(s, receipts).map(ReceiptView::from),
            })
            .collect();
        items.sort_by_key(|i| i.index);
        items
    }
}

/// A batch step's items by where they stand.
#[derive(Debug, Clone, Default, PartialEq, Serialize, schemars::JsonSchema)]
pub struct ItemCounts {
    pub total: u64,
    /// Not released yet (at most `max_parallel` run at once).
    pub pending: u64,
    /// Ready, running or waiting to retry.
    pub running: u64,
    pub succeeded: u64,
    /// Unknown or contradicted: a person decides.
    pub outcome_unknown: u64,
    /// Ended terminally, blocked or waiting for review: a person decides.
    pub failed: u64,
    pub cancelled: u64,
    /// Compensating or compensated.
    pub compensated: u64,
}

impl ItemCounts {
    /// Counts the items of batch step `step` among a workflow's rows.
    pub fn of(step: &str, steps: &[StepRecord]) -> Option<Self> {
        let parent = steps.iter().find(|s| s.step == step)?;
        let total = parent.items?;
        let mut counts = ItemCounts {
            total,
            ..ItemCounts::default()
        };
        for item in steps.iter().filter(|s| s.batch_of.as_deref() == Some(step)) {
            let slot = match item.state {
                StepState::Pending => &mut counts.pending,
                StepState::Ready
                | StepState::Running
                | StepState::FailedRetryable
                | StepState::AwaitingApproval => &mut counts.running,
                StepState::Succeeded => &mut counts.succeeded,
                StepState::OutcomeUnknown | StepState::Contradicted => &mut counts.outcome_unknown,
                StepState::FailedTerminal | StepState::Blocked | StepState::WaitingForReview => {
                    &mut counts.failed
                }
                StepState::Cancelled => &mut counts.cancelled,
                StepState::Compensating | StepState::Compensated => &mut counts.compensated,
            };
            *slot += 1;
        }
        Some(counts)
    }
}

/// An approval step's latest question and its decision.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct ApprovalView {
    /// The digest of the consequence asked about (`sha256:…`).
    pub digest: String,
    pub asked_at: String,
    pub expires_at: String,
    /// `approved`, `rejected` or `expired` once decided; `null` while it waits.
    pub outcome: Option<String>,
    /// Who decided (`docket` for an expiry).
    pub by: Option<String>,
    /// The approver's note.
    pub note: Option<String>,
    /// Why it was rejected, or that it expired.
    pub reason: Option<String>,
    pub decided_at: Option<String>,
}

impl ApprovalView {
    /// The view of one question and its decision.
    pub fn of(a: &crate::store::ApprovalRecord) -> Self {
        use crate::intent::ApprovalOutcome;
        let (note, reason) = match a.outcome {
            Some(ApprovalOutcome::Approved) => (a.decision_text.clone(), None),
            Some(_) => (None, a.decision_text.clone()),
            None => (None, None),
        };
        Self {
            digest: a.digest.clone(),
            asked_at: rfc3339(a.asked_at),
            expires_at: rfc3339(a.expires_at),
            outcome: a.outcome.map(|o| o.as_str().to_string()),
            by: a.decided_by.clone(),
            note,
            reason,
            decided_at: a.decided_at.map(rfc3339),
        }
    }

    /// Each approval step of `view` gets its latest question of `approvals` (one that a
    /// revision superseded only while no later one was asked). Questions asked within the
    /// same millisecond are told apart by that: the one a revision superseded is the older.
    pub fn fill(view: &mut WorkflowView, approvals: &[crate::store::ApprovalRecord]) {
        use crate::intent::ApprovalOutcome::Superseded;
        for step in &mut view.steps {
            if let Some(latest) = approvals
                .iter()
                .filter(|a| a.step == step.id)
                .max_by_key(|a| (a.asked_at, a.outcome != Some(Superseded)))
            {
                step.approval = Some(Self::of(latest));
            }
        }
    }
}

/// The adapter version an adapter step last ran under, and the latest `docket adapter
/// verify` verdict of it. Read from the registry when the projection is served: a new
/// verdict does not move the workflow's revision.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct ContractView {
    pub component: String,
    pub version: String,
    pub digest: String,
    /// `held` (its latest verdict passed), `failed`, `grandfathered` (active when
    /// verification came to be required, never verified, never counted as verified) or
    /// `not_verified`.
    pub verification: String,
    /// Claim → verdict (`held`, `failed`, `not declared`, …) of the latest verification.
    pub verdicts: std::collections::BTreeMap<String, String>,
    pub verified_at: Option<String>,
    pub verified_by: Option<String>,
}

impl ContractView {
    /// The contract `ran` names, judged by its latest verification, if any.
    pub fn of(ran: &Provenance, latest: Option<&crate::store::Verification>) -> Self {
        let grandfathered = latest.is_some_and(|v| {
            v.verdicts
                .iter()
                .any(|(claim, _)| claim == crate::store::GRANDFATHERED)
        });
        let verification = match latest {
            None => "not_verified",
            Some(_) if grandfathered => "grandfathered",
            Some(v) if v.passed => "held",
            Some(_) => "failed",
        };
        Self {
            component: ran.component.clone(),
            version: ran.component_version.clone(),
            digest: ran.component_digest.clone(),
            verification: verification.to_string(),
            verdicts: latest
                .map(|v| v.verdicts.iter().cloned().collect())
                .unwrap_or_default(),
            verified_at: latest.map(|v| rfc3339(v.verified_at)),
            verified_by: latest.map(|v| v.author.clone()),
        }
    }
}

/// A compensation (`<step>.compensate`), nested under the step whose effect it reverses.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct CompensationView {
    pub id: String,
    pub state: StepState,
    pub attempts: u32,
    pub receipt: Option<ReceiptView>,
}

/// The receipt that closed a step.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct ReceiptView {
    pub receipt_id: String,
    pub attempt_id: Option<String>,
    pub evidence_kind: EvidenceKind,
    #[serde(flatten)]
    pub provenance: Provenance,
    pub external_reference: Option<String>,
    pub output: Value,
    pub recorded_at: String,
    pub author: Option<String>,
    pub reason: Option<String>,
    pub evidence: Option<String>,
    /// The input revision that superseded it, if one did.
    pub superseded_by: Option<u32>,
    /// For the effect of an approved step: the approval's receipt, whose consent it was
    /// caused under.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approved_in: Option<String>,
}

impl From<&Receipt> for ReceiptView {
    fn from(r: &Receipt) -> Self {
        Self {
            receipt_id: r.receipt_id.to_string(),
            attempt_id: r.attempt_id.as_ref().map(ToString::to_string),
            evidence_kind: r.evidence_kind,
            provenance: r.provenance.clone(),
            external_reference: r.external_reference.clone(),
            output: r.output.clone(),
            recorded_at: rfc3339(r.recorded_at),
            author: r.author.clone(),
            reason: r.reason.clone(),
            evidence: r.evidence.clone(),
            superseded_by: r.superseded_by,
            approved_in: None,
        }
    }
}

/// A summary in `GET /v1/workflows`.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct SummaryView {
    pub workflow_id: String,
    pub workflow: String,
    pub definition_version: u32,
    pub state: WorkflowState,
    pub status_text: String,
    pub created_at: String,
    pub ended_at: Option<String>,
}

/// A timeline entry.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct TimelineView {
    pub seq: u64,
    pub at: String,
    pub kind: EventKind,
    pub step: Option<String>,
    pub attempt_id: Option<String>,
    pub text: String,
    pub data: Value,
}

impl From<TimelineEvent> for TimelineView {
    fn from(e: TimelineEvent) -> Self {
        Self {
            seq: e.seq,
            at: rfc3339(e.at),
            kind: e.kind,
            step: e.step,
            attempt_id: e.attempt_id,
            text: e.text,
            data: e.data,
        }
    }
}

/// An attempt of a step.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct AttemptView {
    pub attempt_id: String,
    pub number: u32,
    pub trigger: Trigger,
    pub lease_owner: String,
    /// Which code ran on which input; every field `null` before checkpoint 2.
    #[serde(flatten)]
    pub provenance: ProvenanceView,
    /// A prefix of the external request identity, never the whole key.
    pub request_identity: Option<String>,
    pub checkpoint: u8,
    pub observation: Option<String>,
    pub outcome: AttemptOutcome,
    pub started_at: String,
    pub finished_at: Option<String>,
    /// The input revision that superseded it, if one did.
    pub superseded_by: Option<u32>,
    /// The input revision it ran on.
    pub input_revision: u32,
    /// The policy version it was judged by, and the decision.
    pub policy: Option<crate::store::AttemptPolicy>,
}

/// An attempt's [`Provenance`] as shown: each field `null` until it is recorded.
#[derive(Debug, Clone, Default, PartialEq, Serialize, schemars::JsonSchema)]
pub struct ProvenanceView {
    pub component: Option<String>,
    pub component_version: Option<String>,
    pub component_digest: Option<String>,
    pub input_digest: Option<String>,
}

impl From<Option<Provenance>> for ProvenanceView {
    fn from(p: Option<Provenance>) -> Self {
        match p {
            Some(p) => Self {
                component: Some(p.component),
                component_version: Some(p.component_version),
                component_digest: Some(p.component_digest),
                input_digest: Some(p.input_digest),
            },
            None => Self::default(),
        }
    }
}

impl From<AttemptRecord> for AttemptView {
    fn from(a: AttemptRecord) -> Self {
        Self {
            attempt_id: a.attempt_id.to_string(),
            number: a.number,
            trigger: a.trigger,
            lease_owner: a.lease_owner,
            provenance: a.provenance.into(),
            request_identity: a.request_identity.as_deref().map(shorten_identity),
            checkpoint: a.checkpoint,
            observation: a.observation,
            outcome: a.outcome,
            started_at: rfc3339(a.started_at),
            finished_at: rfc3339_opt(a.finished_at),
            superseded_by: a.superseded_by,
            input_revision: a.input_revision,
            policy: a.policy,
        }
    }
}

/// Enough of a request identity to recognise it — at most 8 characters and never more
/// than half of it — followed by "…", so the reusable key itself is never shown.
pub fn shorten_identity(identity: &str) -> String {
    let chars = identity.chars().count();
    let keep = (chars / 2).min(8);
    let mut out: String = identity.chars().take(keep).collect();
    out.push('…');
    out
}

/// Steps in definition order (steps the definition does not know, last), with labels.
fn ordered<'a>(
    def: Option<&'a WorkflowDef>,
    steps: &'a [StepRecord],
) -> Vec<(&'a StepRecord, &'a str)> {
    let label = |id: &'a str| {
        def.and_then(|d| d.step(id))
            .map_or(id, |s| s.label.as_str())
    };
    let index = |id: &str| {
        def.and_then(|d| d.steps.iter().position(|s| s.id.as_str() == id))
            .unwrap_or(usize::MAX)
    };
    let mut out: Vec<(&StepRecord, &str)> = steps
        .iter()
        // A batch step's items and compensations are told through their step.
        .filter(|s| s.role != Some(StepRole::Compensation) && s.batch_of.is_none())
        .map(|s| (s, label(&s.step)))
        .collect();
    // Stable: unknown steps keep their stored order.
    out.sort_by_key(|(s, _)| index(&s.step));
    out
}

fn statuses<'a>(ordered: &[(&'a StepRecord, &'a str)]) -> Vec<StepStatus<'a>> {
    ordered
        .iter()
        .map(|(s, label)| StepStatus {
            id: s.step.as_str(),
            label,
            state: s.state,
            note: s.note.as_deref(),
        })
        .collect()
}

/// The receipt of a step: the one it points at, else its latest that still stands.
fn receipt_of<'a>(step: &StepRecord, receipts: &'a [Receipt]) -> Option<&'a Receipt> {
    step.receipt_id
        .as_ref()
        .and_then(|id| receipts.iter().find(|r| &r.receipt_id == id))
        .or_else(|| {
            receipts
                .iter()
                .rev()
                .find(|r| r.step == step.step && r.superseded_by.is_none())
        })
}

/// The escalation as stored, with a millisecond `at` written as RFC 3339.
fn escalation(value: &Value) -> Value {
    let mut value = value.clone();
    if let Some(at) = value.get_mut("at")
        && let Some(ms) = at.as_u64()
    {
        *at = Value::String(rfc3339(ms));
    }
    value
}

/// The projection of one workflow. `def` is its own definition version (`None` if it can
/// no longer be read: labels fall back to step ids).
pub fn workflow_view(
    record: &WorkflowRecord,
    def: Option<&WorkflowDef>,
    steps: &[StepRecord],
    receipts: &[Receipt],
) -> WorkflowView {
    let ordered = ordered(def, steps);
    let statuses = statuses(&ordered);
    let completed_at = record
        .ended_at
        .filter(|_| record.state == WorkflowState::Completed);
    let receipt_at = |id: &str| {
        steps
            .iter()
            .find(|s| s.step == id)
            .and_then(|s| receipt_of(s, receipts))
            .map(|r| r.recorded_at)
    };
    let compensations: Vec<&StepRecord> = steps
        .iter()
        .filter(|s| s.role == Some(StepRole::Compensation))
        .collect();
    let mut milestones = status::milestones(def, record.created_at, completed_at, receipt_at);
    if !compensations.is_empty() {
        // Reached when every compensation the workflow started has committed its receipt.
        let reached_at = compensations
            .iter()
            .map(|c| {
                (c.state == StepState::Succeeded)
                    .then(|| receipt_at(&c.step))
                    .flatten()
            })
            .collect::<Option<Vec<_>>>()
            .and_then(|at| at.into_iter().max());
        milestones.push(status::Milestone {
            name: status::REVERSED.to_string(),
            reached_at,
        });
    }
    let milestones = milestones
        .into_iter()
        .map(|m| MilestoneView {
            name: m.name,
            reached_at: rfc3339_opt(m.reached_at),
        })
        .collect();
    let compensation_of = |id: &str| {
        let cid = crate::course::compensation_id(id);
        compensations
            .iter()
            .find(|c| c.step == cid)
            .map(|c| CompensationView {
                id: c.step.clone(),
                state: c.state,
                attempts: c.attempts,
                receipt: receipt_of(c, receipts).map(ReceiptView::from),
            })
    };
    let mut view = WorkflowView {
        workflow_id: record.workflow_id.to_string(),
        workflow: record.workflow.clone(),
        definition_version: record.definition_version,
        migrated_from_version: record.migrated_from,
        subject: record.subject.0.clone(),
        idempotency_key: record.idempotency_key.clone(),
        input_digest: record.input_digest.clone(),
        state: record.state,
        created_at: rfc3339(record.created_at),
        ended_at: rfc3339_opt(record.ended_at),
        status_text: status_line(record, &ordered, steps, &statuses),
        next_action: status::next_action(&statuses),
        milestones,
        revision: record.revision,
        input_revision: record.input_revision,
        replaces: record.replaces.as_ref().map(ToString::to_string),
        replaced_by: record.replaced_by.as_ref().map(ToString::to_string),
        actions: course_actions(record, steps, receipts),
        policy: PolicyView {
            at_admission: record.policy_at_admission,
            current: record.policy_current,
        },
        budget: def.map(|d| {
            let limits = crate::budget::Limits::of(&d.budget, &record.budget_added);
            crate::budget::BudgetView::new(&limits, &record.budget_used())
        }),
        deadline: DeadlineView {
            at: rfc3339(record.deadline_at),
            approaching: deadline_approaching(record),
        },
        steps: ordered
            .iter()
            .map(|(s, label)| StepView {
                id: s.step.clone(),
                label: label.to_string(),
                state: s.state,
                attempts: s.attempts,
                escalated: s.escalated.as_ref().map(escalation),
                receipt: receipt_of(s, receipts).map(ReceiptView::from),
                blocked: s
                    .blocked
                    .as_ref()
                    .filter(|_| s.state == StepState::Blocked)
                    .and_then(|b| serde_json::to_value(b).ok()),
                contradicted: s
                    .blocked
                    .as_ref()
                    .filter(|_| s.state == StepState::Contradicted)
                    .map(|b| serde_json::json!({"references": b.references, "message": b.message})),
                compensation: compensation_of(&s.step),
                superseded_receipts: receipts
                    .iter()
                    .filter(|r| r.step == s.step && r.superseded_by.is_some())
                    .map(ReceiptView::from)
                    .collect(),
                retention_deadline: retention_deadline(s).map(rfc3339),
                contract: None,
                approval: None,
                items: ItemCounts::of(&s.step, steps),
            })
            .collect(),
    };
    if let Some(def) = def {
        link_approvals(&mut view, def);
    }
    view
}

/// Each approved step's receipt names the receipt of the approval it was caused under.
fn link_approvals(view: &mut WorkflowView, def: &WorkflowDef) {
    let approvals: Vec<(String, String)> = view
        .steps
        .iter()
        .filter_map(|s| {
            let approval = def.approval_of(&s.id)?;
            let approved = view
                .steps
                .iter()
                .find(|a| a.id == approval.id.as_str())?
                .receipt
                .as_ref()?;
            Some((s.id.clone(), approved.receipt_id.clone()))
        })
        .collect();
    for (step, approval) in approvals {
        if let Some(r) = view
            .steps
            .iter_mut()
            .find(|s| s.id == step)
            .and_then(|s| s.receipt.as_mut())
        {
            r.approved_in = Some(approval);
        }
    }
}

/// Until when a step's provider remembers its key, while the step's outcome is unknown
/// (being recovered, or waiting for a person); afterwards it no longer matters.
pub fn retention_deadline(s: &StepRecord) -> Option<crate::intent::Millis> {
    let unknown =
        s.state == StepState::OutcomeUnknown || (s.uncertain && s.state != StepState::Succeeded);
    s.key_remembered_until.filter(|_| unknown)
}

/// Whether the workflow waits for a person and was seen near its deadline.
fn deadline_approaching(record: &WorkflowRecord) -> bool {
    record.state == WorkflowState::NeedsReview && record.deadline_warned_at.is_some()
}

/// The label of step `id` among `ordered` (its id when the definition is gone).
fn label_of(ordered: &[(&StepRecord, &str)], id: &str) -> String {
    ordered
        .iter()
        .find(|(s, _)| s.step == id)
        .map_or(id.to_string(), |(_, l)| l.to_string())
}

/// The status line: a change of course speaks first (compensations running, a
/// cancellation waiting on an outcome or on running work), else the steps' states.
fn status_line(
    record: &WorkflowRecord,
    ordered: &[(&StepRecord, &str)],
    steps: &[StepRecord],
    statuses: &[StepStatus<'_>],
) -> String {
    let line = course_line(record, ordered, steps, statuses);
    if deadline_approaching(record) {
        return format!(
            "{line} — deadline approaching ({})",
            rfc3339(record.deadline_at)
        );
    }
    line
}

/// [`status_line`] before the deadline speaks.
fn course_line(
    record: &WorkflowRecord,
    ordered: &[(&StepRecord, &str)],
    steps: &[StepRecord],
    statuses: &[StepStatus<'_>],
) -> String {
    let reversing = steps.iter().any(|s| {
        s.role == Some(StepRole::Compensation)
            && matches!(
                s.state,
                StepState::Pending
                    | StepState::Ready
                    | StepState::Running
                    | StepState::FailedRetryable
            )
    });
    if record.state == WorkflowState::Running && reversing {
        return status::REVERSING.to_string();
    }
    // A block by policy names both versions: the one the request was recorded under, and
    // the one that blocks it.
    let named = |id: &str| -> String {
        match crate::course::compensated_step(id) {
            Some(of) => format!("Compensation of {}", label_of(ordered, of)),
            None => label_of(ordered, id),
        }
    };
    if let Some((label, b)) = steps.iter().find_map(|s| {
        s.blocked
            .as_ref()
            .filter(|b| s.state == StepState::Blocked && b.reason == crate::budget::BLOCKED_REASON)
            .map(|b| (named(&s.step), b))
    }) {
        return format!(
            "{label} blocked: budget exhausted ({}): {}",
            b.limit.as_deref().unwrap_or("budget"),
            b.message
        );
    }
    if let Some((label, b)) = steps.iter().find_map(|s| {
        s.blocked
            .as_ref()
            .filter(|b| s.state == StepState::Blocked && b.reason == crate::policy::BLOCKED_REASON)
            .map(|b| (named(&s.step), b))
    }) {
        return format!(
            "Recorded under policy {}; {label} blocked under policy {}: {}",
            record.policy_at_admission,
            b.policy_version.unwrap_or_default(),
            b.message
        );
    }
    if record.cancelled && !record.state.is_ended() {
        let rows = course_steps(steps, &[]);
        let pending = crate::course::awaited(&rows);
        let label = |id: &str| label_of(ordered, id);
        // A running adapter call may have sent its request: its outcome is awaited too.
        let awaited: Vec<String> = ordered
            .iter()
            .filter(|(s, _)| {
                pending.contains(&s.step.as_str())
                    || (s.state == StepState::Running && s.role != Some(StepRole::Handler))
            })
            .map(|(s, _)| label(&s.step))
            .collect();
        if !awaited.is_empty() {
            return format!(
                "Cancel requested; awaiting the outcome of {}",
                status::join_labels(&awaited.iter().map(String::as_str).collect::<Vec<_>>())
            );
        }
        let running: Vec<&str> = ordered
            .iter()
            .filter(|(s, _)| s.state == StepState::Running)
            .map(|(_, l)| *l)
            .collect();
        if !running.is_empty() {
            return format!(
                "Cancel requested; {} may finish, nothing new starts",
                status::join_labels(&running)
            );
        }
    }
    status::status_text(record.state, statuses)
}

/// The list summary of one workflow.
pub fn summary_view(
    record: &WorkflowRecord,
    def: Option<&WorkflowDef>,
    steps: &[StepRecord],
) -> SummaryView {
    let ordered = ordered(def, steps);
    SummaryView {
        workflow_id: record.workflow_id.to_string(),
        workflow: record.workflow.clone(),
        definition_version: record.definition_version,
        state: record.state,
        status_text: status_line(record, &ordered, steps, &statuses(&ordered)),
        created_at: rfc3339(record.created_at),
        ended_at: rfc3339_opt(record.ended_at),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::intent::{Millis, ReceiptId, Subject, WorkflowId};
    use serde_json::json;

    fn record(state: WorkflowState, ended_at: Option<Millis>) -> WorkflowRecord {
        WorkflowRecord {
            workflow_id: WorkflowId("wf_1".into()),
            workflow: "w".into(),
            definition_version: 1,
            subject: Subject("alice".into()),
            idempotency_key: "k".into(),
            input: "{}".into(),
            input_digest: "sha256:00".into(),
            state,
            created_at: 0,
            ended_at,
            deadline_at: 1,
            attempts_used: 0,
            external_calls_used: 0,
            runtime_used_ms: 0,
            cost_used: 0,
            recovery_queries_used: 0,
            budget_added: Default::default(),
            revision: 3,
            input_revision: 1,
            replaces: None,
            replaced_by: None,
            cancelled: false,
            policy_at_admission: 0,
            policy_current: 0,
            deadline_warned_at: None,
            migrated_from: None,
        }
    }

    fn step(id: &str, state: StepState, receipt: Option<&str>) -> StepRecord {
        StepRecord {
            workflow_id: WorkflowId("wf_1".into()),
            step: id.into(),
            role: Some(StepRole::Adapter),
            state,
            uncertain: false,
            compensate_on: vec![],
            blocked: None,
            attempts: 1,
            ready_at: None,
            lease_owner: None,
            lease_expires_at: None,
            receipt_id: receipt.map(|r| ReceiptId(r.into())),
            note: None,
            escalated: None,
            key_remembered_until: None,
            retention_warned_at: None,
            key_step: None,
            batch_of: None,
            item_key: None,
            item_index: None,
            items: None,
        }
    }

    fn receipt(id: &str, step: &str, at: Millis) -> Receipt {
        Receipt {
            receipt_id: ReceiptId(id.into()),
            workflow_id: WorkflowId("wf_1".into()),
            step: step.into(),
            attempt_id: None,
            evidence_kind: EvidenceKind::Manual,
            provenance: Provenance {
                component: "c".into(),
                component_version: "1.0.0".into(),
                component_digest: "sha256:11".into(),
                input_digest: "sha256:22".into(),
            },
            external_reference: Some("ext-1".into()),
            output: json!({"ok": true}),
            recorded_at: at,
            author: Some("ops".into()),
            reason: Some("checked".into()),
            evidence: Some("provider portal".into()),
            superseded_by: None,
        }
    }

    #[test]
    fn request_identities_are_never_shown_whole() {
        assert_eq!(shorten_identity("wf_0123456789abcdef:deliver"), "wf_01234…");
        assert_eq!(shorten_identity("abcd"), "ab…");
        assert_eq!(shorten_identity("a"), "…");
    }

    #[test]
    fn a_contract_is_shown_held_failed_grandfathered_or_not_verified() {
        let ran = Provenance {
            component: "http-delivery".into(),
            component_version: "1.0.0".into(),
            component_digest: "sha256:abc".into(),
            input_digest: "sha256:in".into(),
        };
        let verdict = |passed: bool, verdicts: &[(&str, &str)]| crate::store::Verification {
            digest: "sha256:abc".into(),
            name: "http-delivery".into(),
            version: "1.0.0".into(),
            passed,
            verdicts: verdicts
                .iter()
                .map(|(c, v)| (c.to_string(), v.to_string()))
                .collect(),
            author: "ops".into(),
            verified_at: 0,
        };
        assert_eq!(ContractView::of(&ran, None).verification, "not_verified");
        let held = ContractView::of(&ran, Some(&verdict(true, &[("idempotency", "held")])));
        assert_eq!(held.verification, "held");
        assert_eq!(held.verdicts["idempotency"], "held");
        assert_eq!(held.verified_by.as_deref(), Some("ops"));
        let failed = verdict(false, &[("idempotency", "failed")]);
        assert_eq!(ContractView::of(&ran, Some(&failed)).verification, "failed");
        let old = verdict(false, &[(crate::store::GRANDFATHERED, "never verified")]);
        assert_eq!(
            ContractView::of(&ran, Some(&old)).verification,
            "grandfathered"
        );
    }

    #[test]
    fn the_retention_deadline_shows_only_while_the_outcome_is_unknown() {
        let mut s = step("deliver", StepState::OutcomeUnknown, None);
        s.key_remembered_until = Some(86_400_000);
        assert_eq!(retention_deadline(&s), Some(86_400_000));
        // Recovering by itself (a same-key retry scheduled): still unknown.
        s.state = StepState::FailedRetryable;
        s.uncertain = true;
        assert_eq!(retention_deadline(&s), Some(86_400_000));
        // Settled: the key no longer matters.
        s.state = StepState::Succeeded;
        assert_eq!(retention_deadline(&s), None);
        // An ordinary retry, nothing uncertain.
        s.state = StepState::FailedRetryable;
        s.uncertain = false;
        assert_eq!(retention_deadline(&s), None);
        let view = workflow_view(
            &record(WorkflowState::NeedsReview, None),
            None,
            &[step("deliver", StepState::OutcomeUnknown, None)],
            &[],
        );
        assert_eq!(view.steps[0].retention_deadline, None);
    }

    #[test]
    fn projects_without_a_definition() {
        let mut escalated = step("b", StepState::OutcomeUnknown, None);
        escalated.escalated = Some(json!({"note": "call them", "by": "ops", "at": 0}));
        let steps = [step("a", StepState::Succeeded, Some("rcp_1")), escalated];
        let receipts = [receipt("rcp_0", "a", 5), receipt("rcp_1", "a", 7)];
        let view = workflow_view(
            &record(WorkflowState::NeedsReview, None),
            None,
            &steps,
            &receipts,
        );
        let v = serde_json::to_value(&view).unwrap();
        assert_eq!(v["state"], "needs_review");
        assert_eq!(v["status_text"], "b: outcome unknown — needs review");
        assert_eq!(v["next_action"], json!({"kind": "review", "step": "b"}));
        assert_eq!(v["steps"][0]["receipt"]["receipt_id"], "rcp_1");
        assert_eq!(
            v["steps"][0]["receipt"]["recorded_at"],
            "1970-01-01T00:00:00.007Z"
        );
        assert_eq!(v["steps"][0]["receipt"]["evidence_kind"], "manual");
        assert_eq!(v["steps"][1]["receipt"], Value::Null);
        assert_eq!(v["steps"][1]["escalated"]["at"], "1970-01-01T00:00:00.000Z");
        assert_eq!(v["milestones"][0]["reached_at"], "1970-01-01T00:00:00.000Z");
        assert_eq!(v["milestones"][1]["reached_at"], Value::Null);
        assert_eq!(v["ended_at"], Value::Null);
    }

    #[test]
    fn completion_is_reached_only_when_completed() {
        let steps = [step("a", StepState::FailedTerminal, None)];
        let view = workflow_view(&record(WorkflowState::Failed, Some(9)), None, &steps, &[]);
        assert_eq!(view.milestones[1].reached_at, None);
        assert_eq!(view.ended_at.as_deref(), Some("1970-01-01T00:00:00.009Z"));
        assert_eq!(view.status_text, "Ended without completion: a failed");
        let summary = summary_view(&record(WorkflowState::Failed, Some(9)), None, &steps);
        assert_eq!(summary.status_text, view.status_text);
    }
}
