//! The consistency check: a workflow's stored projection rebuilt from its records, and the
//! invariants its records must keep (API.md, "Operations"; DESIGN.md's invariants where
//! records can show them). Pure: the records are read by the caller (`docket check`, the
//! host's periodic run), and a repair is the store's.

use crate::intent::{Receipt, StepRole, StepState, TimelineEvent, WorkflowState};
use crate::store::{AttemptRecord, StepRecord, WorkflowRecord};
use std::collections::{BTreeMap, BTreeSet};

/// What a violation breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Invariant {
    /// Every succeeded step has its receipt.
    ReceiptForSuccess,
    /// No step began before the receipts of the steps it depends on.
    DependentAfterReceipt,
    /// No one-effect step stands on two external references.
    OneExternalReference,
    /// Every attempt not superseded carries its step's mapped-input digest.
    AttemptInputDigest,
    /// A timeline only grows: its entries are numbered 1, 2, 3… with no gap.
    TimelineGrows,
    /// The workflow's stored state is what its steps say.
    ProjectionMatches,
}

impl Invariant {
    pub const ALL: [Invariant; 6] = [
        Invariant::ReceiptForSuccess,
        Invariant::DependentAfterReceipt,
        Invariant::OneExternalReference,
        Invariant::AttemptInputDigest,
        Invariant::TimelineGrows,
        Invariant::ProjectionMatches,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Invariant::ReceiptForSuccess => "receipt_for_success",
            Invariant::DependentAfterReceipt => "dependent_after_receipt",
            Invariant::OneExternalReference => "one_external_reference",
            Invariant::AttemptInputDigest => "attempt_input_digest",
            Invariant::TimelineGrows => "timeline_grows",
            Invariant::ProjectionMatches => "projection_matches",
        }
    }

    /// Whether rebuilding the projection from the records repairs it.
    pub fn repairable(self) -> bool {
        self == Invariant::ProjectionMatches
    }
}

/// One broken invariant, where, and what was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub invariant: Invariant,
    pub workflow_id: String,
    pub step: Option<String>,
    pub detail: String,
}

/// Everything stored of one workflow, and what its definition says of its steps.
#[derive(Debug, Clone)]
pub struct Records {
    pub workflow: WorkflowRecord,
    pub steps: Vec<StepRecord>,
    pub receipts: Vec<Receipt>,
    pub attempts: Vec<AttemptRecord>,
    pub timeline: Vec<TimelineEvent>,
    /// Each step's dependencies, from its definition.
    pub after: BTreeMap<String, Vec<String>>,
}

/// What the records say the workflow's state is.
pub fn derived_state(records: &Records) -> WorkflowState {
    WorkflowState::derive(
        records.workflow.cancelled,
        records
            .steps
            .iter()
            .map(|s| (s.role.unwrap_or(StepRole::Adapter), s.state)),
    )
}

/// Every invariant the records of one workflow break.
pub fn check(records: &Records) -> Vec<Violation> {
    let id = records.workflow.workflow_id.to_string();
    let mut found = Vec::new();
    let mut violation = |invariant, step: Option<&str>, detail: String| {
        found.push(Violation {
            invariant,
            workflow_id: id.clone(),
            step: step.map(str::to_string),
            detail,
        })
    };
    // The receipts that stand, by step.
    let standing: BTreeMap<&str, Vec<&Receipt>> = records
        .receipts
        .iter()
        .filter(|r| r.superseded_by.is_none())
        .fold(BTreeMap::new(), |mut m, r| {
            m.entry(r.step.as_str()).or_default().push(r);
            m
        });

    for step in &records.steps {
        let name = step.step.as_str();
        let receipts = standing.get(name).cloned().unwrap_or_default();
        if step.state == StepState::Succeeded {
            let has = step
                .receipt_id
                .as_ref()
                .is_some_and(|id| receipts.iter().any(|r| &r.receipt_id == id));
            if !has {
                violation(
                    Invariant::ReceiptForSuccess,
                    Some(name),
                    format!(
                        "the step is succeeded but {}",
                        match &step.receipt_id {
                            Some(r) => format!("its receipt {r} is not among the receipts"),
                            None => "it names no receipt".into(),
                        }
                    ),
                );
            }
        }
        let references: BTreeSet<&str> = receipts
            .iter()
            .filter_map(|r| r.external_reference.as_deref())
            .collect();
        if step.role.unwrap_or(StepRole::Adapter) == StepRole::Adapter && references.len() > 1 {
            violation(
                Invariant::OneExternalReference,
                Some(name),
                format!(
                    "receipts stand on {} external references: {}",
                    references.len(),
                    references.into_iter().collect::<Vec<_>>().join(", ")
                ),
            );
        }
        let digests: BTreeSet<&str> = receipts
            .iter()
            .map(|r| r.provenance.input_digest.as_str())
            .collect();
        for attempt in records
            .attempts
            .iter()
            .filter(|a| a.step == name && a.superseded_by.is_none())
        {
            if let Some(p) = &attempt.provenance
                && !digests.is_empty()
                && !digests.contains(p.input_digest.as_str())
            {
                violation(
                    Invariant::AttemptInputDigest,
                    Some(name),
                    format!(
                        "attempt {} ran on input {} but the step's receipt is for {}",
                        attempt.number,
                        p.input_digest,
                        digests.iter().copied().collect::<Vec<_>>().join(", ")
                    ),
                );
            }
        }
        for dependency in records.after.get(name).into_iter().flatten() {
            let Some(ready_at) = standing
                .get(dependency.as_str())
                .and_then(|rs| rs.iter().map(|r| r.recorded_at).min())
            else {
                continue;
            };
            for attempt in records
                .attempts
                .iter()
                .filter(|a| a.step == name && a.superseded_by.is_none())
                .filter(|a| a.started_at < ready_at)
            {
                violation(
                    Invariant::DependentAfterReceipt,
                    Some(name),
                    format!(
                        "attempt {} started at {} before {dependency}'s receipt at {}",
                        attempt.number,
                        crate::intent::rfc3339(attempt.started_at),
                        crate::intent::rfc3339(ready_at)
                    ),
                );
            }
        }
    }

    if let Some((i, e)) = records
        .timeline
        .iter()
        .enumerate()
        .find(|(i, e)| e.seq != *i as u64 + 1)
    {
        violation(
            Invariant::TimelineGrows,
            None,
            format!("entry {} of the timeline is numbered {}", i + 1, e.seq),
        );
    }

    let derived = derived_state(records);
    if derived != records.workflow.state {
        violation(
            Invariant::ProjectionMatches,
            None,
            format!(
                "stored as {} but its steps say {}",
                records.workflow.state.as_str(),
                derived.as_str()
            ),
        );
    }
    found
}
