//! A workflow's course as shown: its cancellation (with its progress) and the changes of
//! course the caller may ask for now, each with the effects already made.

use super::time::rfc3339;
use crate::course::{self, Compensability, Consequence, CourseStep};
use crate::intent::{Receipt, StepRole, StepState, WorkflowState};
use crate::store::{CancellationRecord, StepRecord, WorkflowRecord};
use serde::Serialize;

/// `POST …/cancel` and `GET …/cancellation`.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct CancellationView {
    pub cancellation_id: String,
    pub workflow_id: String,
    pub requested_by: String,
    pub requested_at: String,
    pub reason: String,
    pub withdraw: bool,
    pub outcome: course::CancelOutcome,
    pub message: String,
    pub consequences: Vec<Consequence>,
    /// Where it stands now (`GET …/cancellation` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub progress: Option<CancellationProgress>,
}

/// How far a cancellation has come.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct CancellationProgress {
    pub workflow_state: WorkflowState,
    /// Steps whose outcome it still waits for.
    pub awaiting: Vec<String>,
    /// Every compensation it started, with its state.
    pub compensations: Vec<CompensationProgress>,
    /// True once nothing runs, compensates or waits any more.
    pub settled: bool,
}

/// One compensation and its state.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct CompensationProgress {
    pub id: String,
    pub step: String,
    pub state: StepState,
}

impl CancellationView {
    /// The cancellation as recorded.
    pub fn new(c: &CancellationRecord) -> Self {
        Self {
            cancellation_id: c.cancellation_id.to_string(),
            workflow_id: c.workflow_id.to_string(),
            requested_by: c.requested_by.clone(),
            requested_at: rfc3339(c.requested_at),
            reason: c.reason.clone(),
            withdraw: c.withdraw,
            outcome: c.outcome,
            message: c.message.clone(),
            consequences: c.consequences.clone(),
            progress: None,
        }
    }

    /// The cancellation with its progress, from the workflow's current records.
    pub fn with_progress(
        c: &CancellationRecord,
        record: &WorkflowRecord,
        steps: &[StepRecord],
        receipts: &[Receipt],
    ) -> Self {
        let rows = course_steps(steps, receipts);
        let compensations = steps
            .iter()
            .filter_map(|s| {
                course::compensated_step(&s.step).map(|of| CompensationProgress {
                    id: s.step.clone(),
                    step: of.to_string(),
                    state: s.state,
                })
            })
            .collect();
        Self {
            progress: Some(CancellationProgress {
                workflow_state: record.state,
                awaiting: course::awaited(&rows)
                    .into_iter()
                    .map(str::to_string)
                    .collect(),
                compensations,
                settled: record.state.is_ended(),
            }),
            ..Self::new(c)
        }
    }
}

/// A change of course the caller may ask for now.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct CourseActionView {
    /// `cancel`, `withdraw`, `revise` or `replace`.
    pub action: &'static str,
    /// The words a person sees.
    pub label: &'static str,
    /// The effects already made, and whether this action reverses each.
    pub consequences: Vec<Consequence>,
}

/// The course as the store reads it, from a workflow's step records and receipts.
pub fn course_steps(steps: &[StepRecord], receipts: &[Receipt]) -> Vec<CourseStep> {
    steps
        .iter()
        .map(|s| CourseStep {
            id: s.step.clone(),
            role: s.role,
            state: s.state,
            uncertain: s.uncertain,
            receipt: s.receipt_id.as_ref().map(|id| {
                receipts
                    .iter()
                    .find(|r| &r.receipt_id == id)
                    .and_then(|r| r.external_reference.clone())
            }),
            compensate_on: s.compensate_on.clone(),
            checkpoint: None,
            batch: s.items.is_some(),
        })
        .collect()
}

/// What may be done to the workflow's course now: cancel it while it runs or waits
/// (`Cancel request` until an external effect was accepted, then `Stop remaining work`), or
/// withdraw it once completed when an effect of it can be compensated; correct its input
/// while no adapter request may have left, else replace it with a new request.
pub fn course_actions(
    record: &WorkflowRecord,
    steps: &[StepRecord],
    receipts: &[Receipt],
) -> Vec<CourseActionView> {
    let rows = course_steps(steps, receipts);
    let consequences = course::consequences(&rows, course::CANCELLATION_TRIGGERS);
    let adapter = |s: &CourseStep| matches!(s.role, None | Some(StepRole::Adapter));
    let effect_made = rows.iter().any(|s| adapter(s) && s.receipt.is_some());
    // A request may have left: a receipt, an uncertainty, a call under way, a conflict.
    let may_have_sent = rows.iter().any(|s| {
        adapter(s)
            && (s.receipt.is_some()
                || s.uncertain
                || matches!(
                    s.state,
                    StepState::Running
                        | StepState::OutcomeUnknown
                        | StepState::WaitingForReview
                        | StepState::Contradicted
                ))
    });
    let open = matches!(
        record.state,
        WorkflowState::Running | WorkflowState::NeedsReview
    );
    let mut actions = Vec::new();
    if !record.cancelled && open {
        actions.push(CourseActionView {
            action: "cancel",
            label: if effect_made {
                "Stop remaining work"
            } else {
                "Cancel request"
            },
            consequences: consequences.clone(),
        });
    }
    if !record.cancelled
        && record.state == WorkflowState::Completed
        && consequences
            .iter()
            .any(|c| c.compensation == Compensability::WillCompensate)
    {
        actions.push(CourseActionView {
            action: "withdraw",
            label: "Request withdrawal",
            consequences: consequences.clone(),
        });
    }
    if record.replaced_by.is_none() {
        if !record.cancelled && open && !may_have_sent {
            actions.push(CourseActionView {
                action: "revise",
                label: "Correct the request",
                consequences: Vec::new(),
            });
        }
        actions.push(CourseActionView {
            action: "replace",
            label: "Replace with a corrected request",
            consequences,
        });
    }
    actions
}

/// An input revision on the wire (`POST …/revisions` answers one; `GET` lists them, the
/// command as admitted first).
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct RevisionView {
    pub input_revision: u32,
    /// `null` for revision 1.
    pub prior_digest: Option<String>,
    pub input_digest: String,
    /// The input as recorded (canonical JSON); `null` only where its text was lost before
    /// every revision was kept, which `reason` then says.
    pub input: Option<serde_json::Value>,
    pub author: String,
    pub reason: String,
    pub at: String,
    pub invalidated_steps: Vec<String>,
    pub kept_receipts: Vec<String>,
}

impl From<&crate::store::RevisionRecord> for RevisionView {
    fn from(r: &crate::store::RevisionRecord) -> Self {
        Self {
            input_revision: r.input_revision,
            prior_digest: r.prior_digest.clone(),
            input_digest: r.input_digest.clone(),
            // Stored as canonical JSON: it parses.
            input: r
                .input
                .as_deref()
                .and_then(|text| serde_json::from_str(text).ok()),
            author: r.author.clone(),
            reason: r.reason.clone(),
            at: rfc3339(r.at),
            invalidated_steps: r.invalidated_steps.clone(),
            kept_receipts: r.kept_receipts.clone(),
        }
    }
}

/// A step a migration carried to the new version, on the wire.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct MovedStepView {
    pub from: String,
    pub to: String,
    /// Its state after the move (a step that never began waits for its new dependencies).
    pub state: StepState,
    /// The id its external key still derives from, when not `to`: the identity its
    /// requests were sent under.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_step: Option<String>,
    /// The receipt it keeps.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub receipt_id: Option<String>,
    /// A batch step's items that move with it, each keeping its own identity.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub items: Option<u64>,
}

/// What a migration does, on the wire: in the new version's order, the steps moved, the
/// steps added (they start pending) and the old steps dropped (none had begun).
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct MigrationPlanView {
    pub from_version: u32,
    pub to_version: u32,
    pub moved: Vec<MovedStepView>,
    pub added: Vec<String>,
    pub dropped: Vec<String>,
}

impl From<&crate::course::MigrationPlan> for MigrationPlanView {
    fn from(p: &crate::course::MigrationPlan) -> Self {
        Self {
            from_version: p.from_version,
            to_version: p.to_version,
            moved: p
                .moved
                .iter()
                .map(|m| MovedStepView {
                    from: m.from.clone(),
                    to: m.to.clone(),
                    state: m.state,
                    key_step: m.key_step.clone(),
                    receipt_id: m.receipt_id.clone(),
                    items: m.items,
                })
                .collect(),
            added: p.added.clone(),
            dropped: p.dropped.clone(),
        }
    }
}

/// A workflow's migration (`POST …/migration` answers one; `GET …/migrations` lists them).
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct MigrationView {
    pub workflow_id: String,
    /// 1 for the workflow's first migration.
    pub number: u32,
    #[serde(flatten)]
    pub plan: MigrationPlanView,
    pub author: String,
    pub reason: String,
    pub at: String,
}

impl From<&crate::store::MigrationRecord> for MigrationView {
    fn from(m: &crate::store::MigrationRecord) -> Self {
        Self {
            workflow_id: m.workflow_id.to_string(),
            number: m.number,
            plan: MigrationPlanView::from(&m.plan),
            author: m.author.clone(),
            reason: m.reason.clone(),
            at: rfc3339(m.at),
        }
    }
}
