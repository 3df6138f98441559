//! State enumerations and the rule that derives a workflow's state from its steps.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// An unknown enumeration value read from storage or the wire.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{value}` is not a valid {what}; expected one of: {expected}")]
pub struct UnknownVariant {
    pub what: &'static str,
    pub value: String,
    pub expected: &'static str,
}

macro_rules! snake_enum {
    ($(#[$doc:meta])* $name:ident, $what:literal { $($(#[$vdoc:meta])* $variant:ident = $text:literal),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
        #[serde(rename_all = "snake_case")]
        pub enum $name {
            $($(#[$vdoc])* $variant),+
        }

        impl $name {
            /// Every variant, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The `snake_case` name.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text),+
                }
            }
        }

        impl FromStr for $name {
            type Err = UnknownVariant;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s {
                    $($text => Ok($name::$variant),)+
                    _ => Err(UnknownVariant {
                        what: $what,
                        value: s.to_string(),
                        expected: concat!($($text, " "),+),
                    }),
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

snake_enum!(
    /// The state of a whole workflow, derived from its steps ([`WorkflowState::derive`]).
    WorkflowState, "workflow state" {
        Running = "running",
        NeedsReview = "needs_review",
        Completed = "completed",
        Failed = "failed",
        Cancelled = "cancelled",
    }
);

snake_enum!(
    /// The state of one step.
    StepState, "step state" {
        /// Waiting for dependencies.
        Pending = "pending",
        /// May be claimed (at or after its `ready_at`).
        Ready = "ready",
        /// Claimed under a lease.
        Running = "running",
        Succeeded = "succeeded",
        /// Will be ready again after a backoff.
        FailedRetryable = "failed_retryable",
        FailedTerminal = "failed_terminal",
        /// The effect may have happened; recovery by contract or a person decides.
        OutcomeUnknown = "outcome_unknown",
        WaitingForReview = "waiting_for_review",
        /// Stopped by policy or budget.
        Blocked = "blocked",
        /// An approval step waiting for a person to approve or reject the consequence it
        /// was asked with.
        AwaitingApproval = "awaiting_approval",
        /// Two observations name different external references for one effect: a person
        /// decides which stands.
        Contradicted = "contradicted",
        Compensating = "compensating",
        Compensated = "compensated",
        Cancelled = "cancelled",
    }
);

snake_enum!(
    /// What one attempt came to.
    AttemptOutcome, "attempt outcome" {
        InProgress = "in_progress",
        Accepted = "accepted",
        Rejected = "rejected",
        TimedOut = "timed_out",
        TransportFailed = "transport_failed",
        LookupFound = "lookup_found",
        LookupAbsent = "lookup_absent",
        Interrupted = "interrupted",
        Trapped = "trapped",
        BudgetExceeded = "budget_exceeded",
    }
);

snake_enum!(
    /// Why an attempt was started.
    Trigger, "attempt trigger" {
        Initial = "initial",
        Retry = "retry",
        RecoveryQuery = "recovery_query",
        ManualRetry = "manual_retry",
        Compensation = "compensation",
    }
);

snake_enum!(
    /// What a row of a workflow's steps is: a step of the definition (its kind), or the
    /// compensation of one (`<step>.compensate`), a step of its own.
    StepRole, "step role" {
        Handler = "handler",
        Adapter = "adapter",
        Compensation = "compensation",
        Approval = "approval",
    }
);

snake_enum!(
    /// When a definition compensates a step's effect.
    CompensationTrigger, "compensation trigger" {
        /// A step of the workflow ended `failed_terminal`.
        WorkflowFailed = "workflow_failed",
        /// A cancellation of the workflow took effect (a withdrawal included).
        WorkflowCancelled = "workflow_cancelled",
        /// The workflow will not complete: cancelled, withdrawn or failed.
        WorkflowNotCompleted = "workflow_not_completed",
    }
);

snake_enum!(
    /// What a timeline entry is: something seen, something done, or something decided.
    EventKind, "event kind" {
        Observation = "observation",
        Action = "action",
        Conclusion = "conclusion",
    }
);

snake_enum!(
    /// What closed a step: the adapter's answer, a lookup, or a person.
    EvidenceKind, "evidence kind" {
        Response = "response",
        Query = "query",
        Manual = "manual",
        /// A person approved the consequence (an approval step's receipt).
        Approval = "approval",
        /// The provider's own event, posted to the host, read by the adapter's `observe`.
        Observation = "observation",
        /// A batch step's list of its items' receipts (each item keeps its own).
        Items = "items",
    }
);

snake_enum!(
    /// What a provider's observation did to the step it was matched to.
    ObservationVerdict, "observation verdict" {
        /// It settled the step's unknown outcome with a receipt.
        Settled = "settled",
        /// It named another reference than the step's receipt, or said the effect did
        /// not happen while a receipt stands: a person decides.
        Contradicted = "contradicted",
        /// It settled the step's running compensation.
        Reversed = "reversed",
        /// The provider refused the request whose outcome was unknown: a person decides.
        Review = "review",
        /// Kept as evidence: stronger evidence already stands, or the step waits on
        /// nothing it could settle.
        Kept = "kept",
        /// The step's attempt was under way: judged again once it ends.
        Held = "held",
        /// No step of this host's database sent the effect it names: in the inbox.
        Unmatched = "unmatched",
        /// The adapter could not read the delivery: in the inbox, with its reason.
        Unreadable = "unreadable",
    }
);

snake_enum!(
    /// How an asked approval was closed.
    ApprovalOutcome, "approval outcome" {
        /// A person approved the consequence as asked.
        Approved = "approved",
        /// A person rejected it: the approval step failed.
        Rejected = "rejected",
        /// Nobody decided before it expired: the approval step failed.
        Expired = "expired",
        /// A revision changed the consequence, which was asked again.
        Superseded = "superseded",
    }
);

impl StepState {
    /// A state a person has to look at.
    pub fn needs_review(self) -> bool {
        matches!(
            self,
            StepState::OutcomeUnknown
                | StepState::WaitingForReview
                | StepState::Blocked
                | StepState::Contradicted
        )
    }

    /// A state nothing automatic will leave.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            StepState::Succeeded
                | StepState::FailedTerminal
                | StepState::Compensated
                | StepState::Cancelled
        )
    }
}

impl WorkflowState {
    /// The workflow's state from its rows (each with its role), in the order the API
    /// defines: `cancelled` (a cancellation took effect and nothing runs, compensates or
    /// waits for a person), `needs_review`, `failed` (nothing runs or compensates any more),
    /// `completed`, `running`.
    pub fn derive(
        cancelled: bool,
        steps: impl IntoIterator<Item = (StepRole, StepState)>,
    ) -> WorkflowState {
        let steps: Vec<(StepRole, StepState)> = steps.into_iter().collect();
        let compensation = |r: &StepRole| *r == StepRole::Compensation;
        let active = steps.iter().any(|(r, s)| match s {
            StepState::Ready
            | StepState::Running
            | StepState::FailedRetryable
            | StepState::AwaitingApproval => true,
            StepState::Pending => compensation(r),
            _ => false,
        });
        let review = steps
            .iter()
            .any(|(r, s)| s.needs_review() || (compensation(r) && *s == StepState::FailedTerminal));
        if cancelled && !active && !review {
            return WorkflowState::Cancelled;
        }
        if review {
            return WorkflowState::NeedsReview;
        }
        let failed = steps
            .iter()
            .any(|(r, s)| !compensation(r) && *s == StepState::FailedTerminal);
        if failed && !active {
            return WorkflowState::Failed;
        }
        let mut own = steps.iter().filter(|(r, _)| !compensation(r)).peekable();
        if !cancelled && own.peek().is_some() && own.all(|(_, s)| *s == StepState::Succeeded) {
            return WorkflowState::Completed;
        }
        WorkflowState::Running
    }

    /// Whether the workflow has ended (its key's retention starts counting).
    pub fn is_ended(self) -> bool {
        matches!(
            self,
            WorkflowState::Completed | WorkflowState::Failed | WorkflowState::Cancelled
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use StepState::*;

    #[test]
    fn names_round_trip() {
        for s in StepState::ALL {
            assert_eq!(s.as_str().parse::<StepState>().unwrap(), *s);
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
        }
        let err = "done".parse::<WorkflowState>().unwrap_err();
        assert!(err.to_string().contains("`done`") && err.to_string().contains("needs_review"));
    }

    fn own(states: &[StepState]) -> Vec<(StepRole, StepState)> {
        states.iter().map(|s| (StepRole::Adapter, *s)).collect()
    }

    #[test]
    fn workflow_state_follows_the_api_order() {
        let derive =
            |cancelled, states: &[StepState]| WorkflowState::derive(cancelled, own(states));
        assert_eq!(
            derive(true, &[Succeeded, Cancelled]),
            WorkflowState::Cancelled
        );
        // A cancellation never claims more than it knows: an unknown outcome is reviewed.
        assert_eq!(
            derive(true, &[OutcomeUnknown, Cancelled]),
            WorkflowState::NeedsReview
        );
        assert_eq!(derive(true, &[Running, Cancelled]), WorkflowState::Running);
        assert_eq!(
            derive(false, &[FailedTerminal, OutcomeUnknown]),
            WorkflowState::NeedsReview
        );
        assert_eq!(
            derive(false, &[FailedTerminal, Pending]),
            WorkflowState::Failed
        );
        assert_eq!(
            derive(false, &[FailedTerminal, Running]),
            WorkflowState::Running
        );
        assert_eq!(
            derive(false, &[Succeeded, OutcomeUnknown]),
            WorkflowState::NeedsReview
        );
        assert_eq!(
            derive(false, &[Succeeded, Blocked]),
            WorkflowState::NeedsReview
        );
        assert_eq!(
            derive(false, &[Succeeded, Succeeded]),
            WorkflowState::Completed
        );
        assert_eq!(
            derive(false, &[Succeeded, Running, Pending]),
            WorkflowState::Running
        );
    }

    #[test]
    fn compensations_keep_a_workflow_running_and_a_failed_one_in_review() {
        let comp = |s| (StepRole::Compensation, s);
        let steps = |c| vec![(StepRole::Adapter, Compensating), comp(c)];
        assert_eq!(
            WorkflowState::derive(true, steps(Pending)),
            WorkflowState::Running
        );
        assert_eq!(
            WorkflowState::derive(true, steps(Running)),
            WorkflowState::Running
        );
        assert_eq!(
            WorkflowState::derive(true, steps(FailedTerminal)),
            WorkflowState::NeedsReview
        );
        assert_eq!(
            WorkflowState::derive(
                true,
                vec![(StepRole::Adapter, Compensated), comp(Succeeded)]
            ),
            WorkflowState::Cancelled
        );
        let failed = vec![
            (StepRole::Adapter, Compensated),
            (StepRole::Handler, FailedTerminal),
            comp(Succeeded),
        ];
        assert_eq!(WorkflowState::derive(false, failed), WorkflowState::Failed);
    }
}
