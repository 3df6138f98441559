//! An intent's course after admission changes only by explicit transitions: a
//! cancellation (an intent of its own, never a signal to a process), compensations (new
//! effects, each a step of its own addressed `<step>.compensate`, never an erasure) and
//! corrections (a new input revision while nothing consequential was sent, else a
//! replacement: [`plan_revision`]).
//!
//! What a transition does to the steps is decided here, in pure code, once for both
//! stores: which steps a cancellation ends at once, which effects are compensated and in
//! which order, and what a cancellation answers. The stores call [`settle`] inside every
//! transaction that moves a step of a workflow with a course to settle, so a fact learned
//! later (an uncertain outcome settled, a step failing for good) is acted on when it
//! commits — never from a stale read.

use crate::intent::{CompensationTrigger, EventKind, NewEvent, StepRole, StepState, WorkflowState};
use serde::{Deserialize, Serialize};

/// The suffix of a compensation's step id; a definition's step id never contains `.`.
const COMPENSATION_SUFFIX: &str = ".compensate";

/// The step id of the compensation of `step`.
pub fn compensation_id(step: &str) -> String {
    format!("{step}{COMPENSATION_SUFFIX}")
}

/// The step a compensation id reverses (`deliver.compensate` → `deliver`), if it is one.
pub fn compensated_step(id: &str) -> Option<&str> {
    id.strip_suffix(COMPENSATION_SUFFIX)
}

/// Whether checkpoint `checkpoint` of step `step` starts a new effect that a cancellation
/// must stop: checkpoint 3, the request leaving, of a step — never of a compensation, which
/// reverses an effect and which no cancellation stops.
pub fn fenced_by_cancellation(checkpoint: u8, step: &str) -> bool {
    checkpoint == 3 && compensated_step(step).is_none()
}

/// The triggers a cancellation fires (a withdrawal too: the workflow no longer completes).
pub const CANCELLATION_TRIGGERS: &[CompensationTrigger] = &[
    CompensationTrigger::WorkflowCancelled,
    CompensationTrigger::WorkflowNotCompleted,
];

/// The triggers a step ending `failed_terminal` fires.
pub const FAILURE_TRIGGERS: &[CompensationTrigger] = &[
    CompensationTrigger::WorkflowFailed,
    CompensationTrigger::WorkflowNotCompleted,
];

/// One row of a workflow's steps, as the course needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CourseStep {
    pub id: String,
    /// `None` for rows stored before roles were recorded: read as an adapter, the cautious
    /// reading (its receipt may name an effect).
    pub role: Option<StepRole>,
    pub state: StepState,
    /// The step's effect became uncertain and is still being investigated.
    pub uncertain: bool,
    /// The step has a receipt, with the provider's reference when it names one.
    pub receipt: Option<Option<String>>,
    /// The triggers on which the definition compensates this step's effect.
    pub compensate_on: Vec<CompensationTrigger>,
    /// For a running step: the checkpoint its attempt reached.
    pub checkpoint: Option<u8>,
    /// A batch step's own row once its items exist: its items carry the effects, each
    /// compensated on its own, so the row itself has none.
    pub batch: bool,
}

impl CourseStep {
    fn is_compensation(&self) -> bool {
        self.role == Some(StepRole::Compensation)
    }

    /// A step that may cause an external effect.
    fn is_adapter(&self) -> bool {
        matches!(self.role, None | Some(StepRole::Adapter))
    }

    /// The effect is known to have happened.
    fn has_effect(&self) -> bool {
        self.is_adapter() && self.receipt.is_some() && !self.batch
    }

    /// An item of a batch step (`<step>[<item key>]`).
    fn is_item(&self) -> bool {
        crate::workflow::item_of(&self.id).is_some()
    }

    /// The step's effect may have happened and nobody knows yet: a request past
    /// checkpoint 3 without a stored result, or a recovery under way, or a review.
    fn outcome_pending(&self) -> bool {
        if self.is_compensation() || !self.is_adapter() {
            return false;
        }
        match self.state {
            StepState::OutcomeUnknown => true,
            StepState::Running => self.uncertain || self.checkpoint.is_some_and(|c| c >= 3),
            StepState::Ready | StepState::FailedRetryable => self.uncertain,
            _ => false,
        }
    }

    /// Not begun, or begun without any effect that could have happened: a cancellation ends
    /// it at once.
    fn cancellable_now(&self) -> bool {
        if self.is_compensation() {
            return false;
        }
        match self.state {
            StepState::Pending | StepState::AwaitingApproval => true,
            StepState::Ready | StepState::FailedRetryable | StepState::Blocked => !self.uncertain,
            _ => false,
        }
    }

    fn compensated_on(&self, triggers: &[CompensationTrigger]) -> bool {
        self.compensate_on.iter().any(|t| triggers.contains(t))
    }
}

/// What a cancellation does first, by what it finds (docs/api.md, "Cancellation").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CancelOutcome {
    /// An effect is known to have happened: nothing new starts, and the effects the
    /// definition compensates are compensated, in reverse dependency order.
    Compensating,
    /// An effect's outcome is unknown: the investigation goes on; once settled, the rules
    /// apply again to what is then known.
    AwaitingOutcome,
    /// A handler is running: it may finish, nothing new starts.
    Stopping,
    /// Nothing had an effect: every unfinished step ended at once.
    Cancelled,
}

impl CancelOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            CancelOutcome::Compensating => "compensating",
            CancelOutcome::AwaitingOutcome => "awaiting_outcome",
            CancelOutcome::Stopping => "stopping",
            CancelOutcome::Cancelled => "cancelled",
        }
    }
}

/// The first outcome that holds for `steps`.
pub fn cancel_outcome(steps: &[CourseStep]) -> CancelOutcome {
    if steps.iter().any(CourseStep::has_effect) {
        CancelOutcome::Compensating
    } else if steps.iter().any(CourseStep::outcome_pending) {
        CancelOutcome::AwaitingOutcome
    } else if steps
        .iter()
        .any(|s| s.role == Some(StepRole::Handler) && s.state == StepState::Running)
    {
        CancelOutcome::Stopping
    } else {
        CancelOutcome::Cancelled
    }
}

/// The steps whose outcome a cancellation waits for.
pub fn awaited(steps: &[CourseStep]) -> Vec<&str> {
    steps
        .iter()
        .filter(|s| s.outcome_pending())
        .map(|s| s.id.as_str())
        .collect()
}

/// What a new cancellation does, or why it is refused (the message says what to do
/// instead): nothing to stop on a failed workflow; a completed one only by withdrawal, and
/// only when an effect of it can be compensated.
pub fn decide_cancel(
    state: WorkflowState,
    withdraw: bool,
    steps: &[CourseStep],
) -> Result<(CancelOutcome, Vec<Consequence>), String> {
    let consequences = consequences(steps, CANCELLATION_TRIGGERS);
    match state {
        WorkflowState::Failed => Err(
            "the workflow has failed, so a cancellation has nothing to stop; an operator can compensate an effect by hand (POST …/steps/{step}/compensate)"
                .into(),
        ),
        WorkflowState::Cancelled => Err("the workflow is already cancelled".into()),
        WorkflowState::Completed if !withdraw => Err(
            "the workflow is completed; to reverse its effects, request a withdrawal with \"withdraw\": true"
                .into(),
        ),
        WorkflowState::Completed => {
            if consequences
                .iter()
                .any(|c| c.compensation == Compensability::WillCompensate)
            {
                Ok((CancelOutcome::Compensating, consequences))
            } else {
                Err("the workflow is completed and none of its effects can be compensated, so there is nothing to withdraw".into())
            }
        }
        WorkflowState::Running | WorkflowState::NeedsReview => {
            Ok((cancel_outcome(steps), consequences))
        }
    }
}

/// What a person reads about a cancellation's first outcome; `label` names a step.
pub fn cancel_message(
    outcome: CancelOutcome,
    steps: &[CourseStep],
    consequences: &[Consequence],
    label: &dyn Fn(&str) -> String,
) -> String {
    let effect = |c: &Consequence| match &c.external_reference {
        Some(r) => format!("{} ({r})", label(&c.step)),
        None => label(&c.step),
    };
    let list = |pick: Compensability| {
        consequences
            .iter()
            .filter(|c| c.compensation == pick)
            .map(effect)
            .collect::<Vec<_>>()
            .join(", ")
    };
    match outcome {
        CancelOutcome::Cancelled => {
            "Cancelled: no step had an effect, and every unfinished step ended".into()
        }
        CancelOutcome::Stopping => {
            let running: Vec<String> = steps
                .iter()
                .filter(|s| s.state == StepState::Running)
                .map(|s| label(&s.id))
                .collect();
            format!(
                "Stopping: {} may finish, and nothing new starts",
                running.join(", ")
            )
        }
        CancelOutcome::AwaitingOutcome => {
            let awaited: Vec<String> = awaited(steps).into_iter().map(label).collect();
            format!(
                "Cancel requested; awaiting the outcome of {}: the investigation goes on, and the cancellation applies to what it finds",
                awaited.join(", ")
            )
        }
        CancelOutcome::Compensating => {
            let reversed = list(Compensability::WillCompensate);
            let kept = list(Compensability::CannotCompensate);
            let mut text = String::from("Stopping remaining work");
            if !reversed.is_empty() {
                text.push_str(&format!("; reversing {reversed}"));
            }
            if !kept.is_empty() {
                text.push_str(&format!("; {kept} cannot be compensated and stays"));
            }
            text
        }
    }
}

/// Whether an effect will be reversed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Compensability {
    WillCompensate,
    /// The adapter cannot, or the definition does not compensate it on this trigger.
    CannotCompensate,
}

/// An effect already made, and what a change of course would do to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Consequence {
    pub step: String,
    pub external_reference: Option<String>,
    pub compensation: Compensability,
}

/// The effects already made (steps with a receipt that are not reversed), and whether a
/// course change firing `triggers` compensates each.
pub fn consequences(steps: &[CourseStep], triggers: &[CompensationTrigger]) -> Vec<Consequence> {
    steps
        .iter()
        .filter(|s| s.has_effect() && s.state == StepState::Succeeded)
        .map(|s| Consequence {
            step: s.id.clone(),
            external_reference: s.receipt.clone().flatten(),
            compensation: if s.compensated_on(triggers) {
                Compensability::WillCompensate
            } else {
                Compensability::CannotCompensate
            },
        })
        .collect()
}

/// A compensation to create: `<of>.compensate`, ready at once unless it must wait for the
/// compensations of steps that depend on `of` (`after`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewCompensation {
    pub id: String,
    pub of: String,
    pub after: Vec<String>,
}

/// What settling a workflow's course changes, in one transaction.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Settlement {
    /// Steps that end `cancelled` now.
    pub cancel: Vec<String>,
    /// Compensations to create (their originals become `compensating`).
    pub start: Vec<NewCompensation>,
    /// Originals whose compensation committed its receipt: they become `compensated`.
    pub compensated: Vec<String>,
    /// What the timeline says about it.
    pub events: Vec<NewEvent>,
}

impl Settlement {
    pub fn is_empty(&self) -> bool {
        self.cancel.is_empty() && self.start.is_empty() && self.compensated.is_empty()
    }
}

/// Whether a workflow's course may have something to settle: a cancellation, a terminal
/// failure, or a compensation. The stores skip [`settle`] (and its reads) otherwise.
pub fn may_settle<'a>(cancelled: bool, states: impl IntoIterator<Item = &'a StepState>) -> bool {
    cancelled
        || states.into_iter().any(|s| {
            matches!(
                s,
                StepState::FailedTerminal | StepState::Compensating | StepState::Compensated
            )
        })
}

/// Settles a workflow's course from its rows and dependencies (`(step, depends_on)`):
/// with a cancellation, steps that had no effect end at once; every effect known to have
/// happened whose definition compensates it on a fired trigger gets its compensation, in
/// reverse dependency order; an original whose compensation committed becomes
/// `compensated`. Never compensates what is merely retryable or unknown.
pub fn settle(cancelled: bool, steps: &[CourseStep], deps: &[(String, String)]) -> Settlement {
    let mut triggers: Vec<CompensationTrigger> = Vec::new();
    if cancelled {
        triggers.extend(CANCELLATION_TRIGGERS);
    }
    if steps
        .iter()
        .any(|s| !s.is_compensation() && !s.is_item() && s.state == StepState::FailedTerminal)
    {
        // An item that failed waits for a person (its batch step is in review): it
        // compensates nothing before anyone looked.
        triggers.extend(FAILURE_TRIGGERS);
    }
    let mut out = Settlement::default();
    if cancelled {
        out.cancel = steps
            .iter()
            .filter(|s| s.cancellable_now())
            .map(|s| s.id.clone())
            .collect();
    }
    let row = |id: &str| steps.iter().find(|s| s.id == id);
    let to_start: Vec<&CourseStep> = steps
        .iter()
        .filter(|s| {
            s.has_effect()
                && s.state == StepState::Succeeded
                && s.compensated_on(&triggers)
                && row(&compensation_id(&s.id)).is_none()
        })
        .collect();
    for s in &to_start {
        // Reverse dependency order: wait for the unfinished compensations of every step
        // that (transitively) depends on this one.
        let after: Vec<String> = dependents(&s.id, deps)
            .into_iter()
            .map(|d| compensation_id(&d))
            .filter(|c| {
                let existing = row(c).is_some_and(|r| r.state != StepState::Succeeded);
                let new = to_start.iter().any(|n| compensation_id(&n.id) == *c);
                existing || new
            })
            .collect();
        let reference = s.receipt.clone().flatten();
        let text = format!(
            "Compensation {} scheduled to reverse the effect of {}{}{}",
            compensation_id(&s.id),
            s.id,
            reference
                .as_deref()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default(),
            if after.is_empty() {
                String::new()
            } else {
                format!(", after {}", after.join(", "))
            }
        );
        out.events
            .push(NewEvent::step(EventKind::Action, &s.id, None, text));
        out.start.push(NewCompensation {
            id: compensation_id(&s.id),
            of: s.id.clone(),
            after,
        });
    }
    for c in steps
        .iter()
        .filter(|s| s.is_compensation() && s.state == StepState::Succeeded)
    {
        let Some(of) = compensated_step(&c.id) else {
            continue;
        };
        if row(of).is_some_and(|o| o.state == StepState::Compensating) {
            out.events.push(NewEvent::step(
                EventKind::Conclusion,
                of,
                None,
                format!(
                    "{of} compensated: its effect was reversed by {}; its receipt stays",
                    c.id
                ),
            ));
            out.compensated.push(of.to_string());
        }
    }
    if !out.cancel.is_empty() {
        let text = match out.cancel.as_slice() {
            [one] => format!("Cancelled before it had any effect: {one}"),
            many => format!("Cancelled before they had any effect: {}", many.join(", ")),
        };
        out.events
            .push(NewEvent::workflow(EventKind::Conclusion, text));
    }
    out
}

/// Every step that depends on `step`, directly or through others.
fn dependents(step: &str, deps: &[(String, String)]) -> Vec<String> {
    let mut found: Vec<String> = Vec::new();
    let mut frontier = vec![step.to_string()];
    while let Some(current) = frontier.pop() {
        for (s, on) in deps {
            if *on == current && !found.contains(s) {
                found.push(s.clone());
                frontier.push(s.clone());
            }
        }
    }
    found
}

pub mod batch;
mod migration;
mod revision;
#[cfg(test)]
mod tests;

pub use migration::{MigrationPlan, MigrationRefusal, MigrationStep, MovedStep, plan_migration};
pub use revision::{ADMITTED, Blocker, RevisionPlan, RevisionStep, plan_revision};
