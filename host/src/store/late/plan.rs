//! Late evidence's verdict: what a result that arrived after its lease was lost settles,
//! contradicts or leaves as it was, decided in pure code for both backends.

use crate::intent::{StepRole, StepState};
use crate::store::{AttemptFacts, NewReceipt, StepTransition};

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
pub(crate) fn contradiction(standing: &str, late: &str) -> crate::store::Blocked {
    crate::store::Blocked {
        reason: "contradicted".into(),
        limit: None,
        policy_version: None,
        references: vec![standing.to_string(), late.to_string()],
        message: format!(
            "the step stands on {standing}, but a late result names {late}: two external references for one effect; a person decides which stands"
        ),
    }
}
