//! The consistency check: a workflow's stored projection rebuilt from its records, and the
//! invariants its records must keep (docs/architecture.md, "The invariants", where records
//! can show them). [`check`] is pure; [`records_of`] and [`sweep`] read the records
//! through the store's traits for `docket check` and the host's periodic run. A repair is
//! the store's ([`crate::store::MetricsStore::rebuild_state`]).

use crate::intent::{Receipt, StepRole, StepState, TimelineEvent, WorkflowState};
use crate::store::{
    AttemptRecord, DefinitionStore, MetricsStore, ReadStore, StepRecord, StoreResult,
    WorkflowFilter, WorkflowRecord,
};
use std::collections::{BTreeMap, BTreeSet};

/// What a violation breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Invariant {
    /// Every succeeded step has its receipt.
    ReceiptForSuccess,
    /// No step began before the receipts of the steps it depends on.
    DependentAfterReceipt,
    /// No lease that expired before the last complete recovery sweep is left unrecovered.
    LeaseRecovered,
    /// No one-effect step projects clean success on two external references.
    OneExternalReference,
    /// Every attempt not superseded carries its step's mapped-input digest.
    AttemptInputDigest,
    /// A timeline only grows: its entries are numbered 1, 2, 3… with no gap.
    TimelineGrows,
    /// The workflow's stored state is what its steps say.
    ProjectionMatches,
}

impl Invariant {
    pub const ALL: [Invariant; 7] = [
        Invariant::ReceiptForSuccess,
        Invariant::DependentAfterReceipt,
        Invariant::LeaseRecovered,
        Invariant::OneExternalReference,
        Invariant::AttemptInputDigest,
        Invariant::TimelineGrows,
        Invariant::ProjectionMatches,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Invariant::ReceiptForSuccess => "receipt_for_success",
            Invariant::DependentAfterReceipt => "dependent_after_receipt",
            Invariant::LeaseRecovered => "lease_recovered",
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
    /// The latest complete recovery sweep of any host, if one was recorded.
    pub last_sweep: Option<crate::intent::Millis>,
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
        if step.state == StepState::Running
            && let (Some(expired), Some(swept)) = (step.lease_expires_at, records.last_sweep)
            && expired < swept
        {
            violation(
                Invariant::LeaseRecovered,
                Some(name),
                format!(
                    "its lease (held by {}) expired at {}, before the recovery sweep of {}, and is still running",
                    step.lease_owner.as_deref().unwrap_or("nobody"),
                    crate::intent::rfc3339(expired),
                    crate::intent::rfc3339(swept)
                ),
            );
        }
        let references: BTreeSet<&str> = receipts
            .iter()
            .filter_map(|r| r.external_reference.as_deref())
            .collect();
        // A person's resolution is a decision on the record, not a clean success.
        let decided_by_a_person = receipts
            .iter()
            .any(|r| Some(&r.receipt_id) == step.receipt_id.as_ref() && r.author.is_some());
        if step.role.unwrap_or(StepRole::Adapter) == StepRole::Adapter
            && step.state == StepState::Succeeded
            && !decided_by_a_person
            && references.len() > 1
        {
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

/// Everything stored of `workflow`, with its definition's dependencies.
pub async fn records_of<S: ReadStore + DefinitionStore>(
    store: &S,
    workflow: WorkflowRecord,
    last_sweep: Option<crate::intent::Millis>,
) -> StoreResult<Records> {
    let id = &workflow.workflow_id;
    let steps = store.steps(id).await?;
    let receipts = store.receipts(id).await?;
    let mut attempts = Vec::new();
    for step in &steps {
        let mut after = 0;
        loop {
            let page = store.attempts(id, &step.step, after, 500).await?;
            let Some(last) = page.last() else { break };
            after = last.number;
            let full = page.len() == 500;
            attempts.extend(page);
            if !full {
                break;
            }
        }
    }
    let mut timeline = Vec::new();
    loop {
        let after = timeline
            .last()
            .map_or(0, |e: &crate::intent::TimelineEvent| e.seq);
        let page = store.timeline(id, after, 1000).await?;
        let full = page.len() == 1000;
        timeline.extend(page);
        if !full {
            break;
        }
    }
    let after = match store
        .definition(&workflow.workflow, workflow.definition_version)
        .await?
    {
        Some(def) => crate::workflow::parse(&def.name, &def.source)
            .map(|d| {
                d.steps
                    .iter()
                    .map(|s| {
                        (
                            s.id.as_str().to_string(),
                            s.after.iter().map(|a| a.as_str().to_string()).collect(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default(),
        None => BTreeMap::new(),
    };
    Ok(Records {
        workflow,
        steps,
        receipts,
        attempts,
        timeline,
        after,
        last_sweep,
    })
}

/// Workflows read per page of a sweep.
const PAGE: u32 = 200;

/// Checks every workflow, newest first, pausing `pace` between workflows (so a host's
/// periodic run stays light); `each` sees every workflow's records and what they break.
/// Returns how many workflows were checked.
pub async fn sweep<S: ReadStore + DefinitionStore + MetricsStore>(
    store: &S,
    pace: std::time::Duration,
    mut each: impl FnMut(&Records, &[Violation]),
) -> StoreResult<u64> {
    let last_sweep = store.last_sweep().await?;
    let mut checked = 0;
    let mut before = None;
    loop {
        let page = store
            .list_workflows(&WorkflowFilter {
                before: before.clone(),
                limit: PAGE,
                ..WorkflowFilter::default()
            })
            .await?;
        let Some(last) = page.last() else { break };
        before = Some((last.created_at, last.workflow_id.clone()));
        let full = page.len() == PAGE as usize;
        for workflow in page {
            let records = records_of(store, workflow, last_sweep).await?;
            each(&records, &check(&records));
            checked += 1;
            if !pace.is_zero() {
                tokio::time::sleep(pace).await;
            }
        }
        if !full {
            break;
        }
    }
    Ok(checked)
}
