//! What a person sees of a workflow: the current state in words, the next action a person
//! must take, and the milestones reached.
//!
//! These are pure functions of the definition and the stored step states, so the API, the
//! console and notifications can say the same thing. Status texts name steps by their
//! display label and never give a percentage.

use crate::intent::{Millis, StepState, WorkflowState};
use crate::workflow::{COMPLETION_RECORDED, REQUEST_RECORDED, WorkflowDef};
use serde::Serialize;

/// A step as the status needs it, in definition order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepStatus<'a> {
    pub id: &'a str,
    pub label: &'a str,
    pub state: StepState,
    /// The step's note: what an approval step asks ("Needs your approval: …").
    pub note: Option<&'a str>,
}

/// The workflow's current meaningful state in a short sentence, e.g. "Deliver document in
/// progress", "Waiting to retry: Deliver document", "Deliver document: outcome unknown —
/// needs review", "Completed", "Ended without completion: Deliver document failed".
pub fn status_text(state: WorkflowState, steps: &[StepStatus<'_>]) -> String {
    let first = |pick: &dyn Fn(StepState) -> bool| steps.iter().find(|s| pick(s.state));
    let labels = |wanted: StepState| {
        let found: Vec<&str> = steps
            .iter()
            .filter(|s| s.state == wanted)
            .map(|s| s.label)
            .collect();
        (!found.is_empty()).then(|| join_labels(&found))
    };
    match state {
        WorkflowState::Completed => "Completed".to_string(),
        WorkflowState::Cancelled => "Cancelled".to_string(),
        WorkflowState::Failed => match first(&|s| s == StepState::FailedTerminal) {
            Some(step) => format!("Ended without completion: {} failed", step.label),
            None => "Ended without completion".to_string(),
        },
        WorkflowState::NeedsReview => match first(&StepState::needs_review) {
            Some(step) => review_text(step),
            None => "Needs review".to_string(),
        },
        WorkflowState::Running => {
            if let Some(review) = first(&StepState::needs_review) {
                // The stored state lags a step change: the step's own state is the news.
                return review_text(review);
            }
            if let Some(asking) = first(&|s| s == StepState::AwaitingApproval) {
                return asking.note.map_or_else(
                    || format!("Needs your approval: {}", asking.label),
                    str::to_string,
                );
            }
            if let Some(running) = labels(StepState::Running) {
                format!("{running} in progress")
            } else if let Some(compensating) = labels(StepState::Compensating) {
                format!("Undoing: {compensating}")
            } else if let Some(retrying) = labels(StepState::FailedRetryable) {
                format!("Waiting to retry: {retrying}")
            } else if let Some(ready) = labels(StepState::Ready) {
                format!("Waiting to start: {ready}")
            } else {
                "In progress".to_string()
            }
        }
    }
}

fn review_text(step: &StepStatus<'_>) -> String {
    match step.state {
        StepState::OutcomeUnknown => format!("{}: outcome unknown — needs review", step.label),
        StepState::Blocked => format!("{}: blocked by policy or budget — needs review", step.label),
        StepState::Contradicted => format!(
            "{}: contradicted — two external references, needs review",
            step.label
        ),
        _ => format!("{}: waiting for review", step.label),
    }
}

/// The milestone reached when every compensation a workflow started has succeeded.
pub const REVERSED: &str = "Reversed after partial completion";

/// The status while compensations run.
pub const REVERSING: &str = "Reversing earlier effects";

/// "A", "A and B", "A, B and C".
pub fn join_labels(labels: &[&str]) -> String {
    match labels {
        [] => String::new(),
        [one] => (*one).to_string(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

/// What a person should do next.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct NextAction {
    /// `review` (a step waits for a person's decision), `approval` (an approval step waits
    /// for a person to approve or reject its consequence) or `input`.
    pub kind: &'static str,
    /// The step's stable id.
    pub step: String,
}

/// The first step (in definition order) that waits for a person's review, else the first
/// approval step waiting for a decision, if any.
pub fn next_action(steps: &[StepStatus<'_>]) -> Option<NextAction> {
    let review = steps
        .iter()
        .find(|s| s.state.needs_review())
        .map(|s| ("review", s));
    let approval = || {
        steps
            .iter()
            .find(|s| s.state == StepState::AwaitingApproval)
            .map(|s| ("approval", s))
    };
    review.or_else(approval).map(|(kind, s)| NextAction {
        kind,
        step: s.id.to_string(),
    })
}

/// One milestone and when it was reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Milestone {
    pub name: String,
    pub reached_at: Option<Millis>,
}

/// The milestones of `def` in order. "Request recorded" is reached at `created_at`; a
/// step milestone when every step carrying it has a receipt (at the latest receipt's time,
/// from `receipt_at(step id)`); "Completion recorded" at `completed_at`. Without the
/// definition only the first and last are known.
pub fn milestones(
    def: Option<&WorkflowDef>,
    created_at: Millis,
    completed_at: Option<Millis>,
    receipt_at: impl Fn(&str) -> Option<Millis>,
) -> Vec<Milestone> {
    let names = def.map_or_else(
        || {
            vec![
                REQUEST_RECORDED.to_string(),
                COMPLETION_RECORDED.to_string(),
            ]
        },
        WorkflowDef::milestones,
    );
    names
        .into_iter()
        .map(|name| {
            let reached_at = if name == REQUEST_RECORDED {
                Some(created_at)
            } else if name == COMPLETION_RECORDED {
                completed_at
            } else {
                def.and_then(|d| {
                    let carriers = d
                        .steps
                        .iter()
                        .filter(|s| s.milestone.as_deref() == Some(name.as_str()));
                    carriers
                        .map(|s| receipt_at(s.id.as_str()))
                        .collect::<Option<Vec<_>>>()?
                        .into_iter()
                        .max()
                })
            };
            Milestone { name, reached_at }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use StepState::*;

    fn steps(states: &[(&'static str, StepState)]) -> Vec<StepStatus<'static>> {
        states
            .iter()
            .map(|(label, state)| StepStatus {
                note: None,
                id: label,
                label,
                state: *state,
            })
            .collect()
    }

    #[test]
    fn running_workflows_name_what_they_wait_on() {
        let s = steps(&[
            ("Validate document", Succeeded),
            ("Deliver document", Running),
        ]);
        assert_eq!(
            status_text(WorkflowState::Running, &s),
            "Deliver document in progress"
        );
        let s = steps(&[
            ("Validate document", Succeeded),
            ("Deliver document", FailedRetryable),
        ]);
        assert_eq!(
            status_text(WorkflowState::Running, &s),
            "Waiting to retry: Deliver document"
        );
        let s = steps(&[("Validate document", Ready), ("Deliver document", Pending)]);
        assert_eq!(
            status_text(WorkflowState::Running, &s),
            "Waiting to start: Validate document"
        );
        let s = steps(&[("A", Running), ("B", Running), ("C", Running)]);
        assert_eq!(
            status_text(WorkflowState::Running, &s),
            "A, B and C in progress"
        );
        let s = steps(&[("A", Running), ("B", FailedRetryable)]);
        assert_eq!(status_text(WorkflowState::Running, &s), "A in progress");
    }

    #[test]
    fn review_and_endings_are_said_in_words() {
        let s = steps(&[
            ("Validate document", Succeeded),
            ("Deliver document", OutcomeUnknown),
        ]);
        assert_eq!(
            status_text(WorkflowState::NeedsReview, &s),
            "Deliver document: outcome unknown — needs review"
        );
        let s = steps(&[("Deliver document", Blocked)]);
        assert!(status_text(WorkflowState::NeedsReview, &s).ends_with("needs review"));
        let s = steps(&[("Deliver document", WaitingForReview)]);
        assert_eq!(
            status_text(WorkflowState::NeedsReview, &s),
            "Deliver document: waiting for review"
        );
        let s = steps(&[
            ("Validate document", FailedTerminal),
            ("Deliver document", Pending),
        ]);
        assert_eq!(
            status_text(WorkflowState::Failed, &s),
            "Ended without completion: Validate document failed"
        );
        let s = steps(&[("A", Succeeded)]);
        assert_eq!(status_text(WorkflowState::Completed, &s), "Completed");
        for state in WorkflowState::ALL {
            assert!(!status_text(*state, &s).contains('%'));
        }
    }

    #[test]
    fn next_action_is_the_first_step_waiting_for_a_person() {
        let s = steps(&[("a", Succeeded), ("b", Blocked), ("c", OutcomeUnknown)]);
        assert_eq!(
            next_action(&s),
            Some(NextAction {
                kind: "review",
                step: "b".into()
            })
        );
        assert_eq!(next_action(&steps(&[("a", Running)])), None);
    }

    #[test]
    fn milestones_are_reached_by_receipts() {
        let source = r#"
            name = "w"
            version = 1
            deadline = "1h"
            [input_schema]
            type = "object"
            [[steps]]
            id = "a"
            label = "A"
            kind = "handler"
            component = "c"
            version = "^1"
            milestone = "Input validated"
            [[steps]]
            id = "b"
            label = "B"
            kind = "handler"
            component = "c"
            version = "^1"
            after = ["a"]
            milestone = "Input validated"
            [[steps]]
            id = "c"
            label = "C"
            kind = "handler"
            component = "c"
            version = "^1"
            after = ["b"]
            milestone = "Delivery verified"
        "#;
        let def = crate::workflow::parse("w.toml", source).unwrap();
        let at = |receipts: &'static [(&'static str, Millis)]| {
            move |id: &str| receipts.iter().find(|(s, _)| *s == id).map(|(_, t)| *t)
        };
        let reached = |m: Vec<Milestone>| {
            m.into_iter()
                .map(|m| (m.name, m.reached_at))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            reached(milestones(Some(&def), 10, None, at(&[("a", 20)]))),
            [
                (REQUEST_RECORDED.to_string(), Some(10)),
                ("Input validated".to_string(), None),
                ("Delivery verified".to_string(), None),
                (COMPLETION_RECORDED.to_string(), None),
            ]
        );
        assert_eq!(
            reached(milestones(
                Some(&def),
                10,
                Some(40),
                at(&[("a", 20), ("b", 30), ("c", 40)])
            )),
            [
                (REQUEST_RECORDED.to_string(), Some(10)),
                ("Input validated".to_string(), Some(30)),
                ("Delivery verified".to_string(), Some(40)),
                (COMPLETION_RECORDED.to_string(), Some(40)),
            ]
        );
        assert_eq!(milestones(None, 10, None, |_| None).len(), 2);
    }
}
