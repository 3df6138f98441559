//! A workflow's course as shown: its cancellation (with its progress) and the changes of
//! course the caller may ask for now, each with the effects already made.

use super::time::rfc3339;
use crate::course::{self, Compensability, Consequence, CourseStep};
use crate::intent::{Receipt, StepRole, StepState, WorkflowState};
use crate::store::{CancellationRecord, StepRecord, WorkflowRecord};
use serde::Serialize;

/// `POST …/cancel` and `GET …/cancellation`.
#[derive(Debug, Clone, PartialEq, Serialize)]
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
#[derive(Debug, Clone, PartialEq, Serialize)]
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
#[derive(Debug, Clone, PartialEq, Serialize)]
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
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CourseActionView {
    /// `cancel` or `withdraw`.
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
        })
        .collect()
}

/// What may be done to the workflow's course now: cancel it while it runs or waits
/// (`Cancel request` until an external effect was accepted, then `Stop remaining work`), or
/// withdraw it once completed when an effect of it can be compensated.
pub fn course_actions(
    record: &WorkflowRecord,
    steps: &[StepRecord],
    receipts: &[Receipt],
) -> Vec<CourseActionView> {
    if record.cancelled {
        return Vec::new();
    }
    let rows = course_steps(steps, receipts);
    let consequences = course::consequences(&rows, course::CANCELLATION_TRIGGERS);
    let effect_made = rows
        .iter()
        .any(|s| matches!(s.role, None | Some(StepRole::Adapter)) && s.receipt.is_some());
    match record.state {
        WorkflowState::Running | WorkflowState::NeedsReview => vec![CourseActionView {
            action: "cancel",
            label: if effect_made {
                "Stop remaining work"
            } else {
                "Cancel request"
            },
            consequences,
        }],
        WorkflowState::Completed
            if consequences
                .iter()
                .any(|c| c.compensation == Compensability::WillCompensate) =>
        {
            vec![CourseActionView {
                action: "withdraw",
                label: "Request withdrawal",
                consequences,
            }]
        }
        _ => Vec::new(),
    }
}
