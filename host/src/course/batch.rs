//! Where a batch step stands, judged from its items: each item is an effect intent of its
//! own, and the step only gathers them. Pure: the store counts, this decides.
//!
//! The step succeeds only when every item has a receipt. An item that needs a person
//! (ended terminally, uncertain, blocked, contradicted) puts the step in review at once —
//! never `failed_terminal` while other items delivered, which would compensate good effects
//! before anyone looked — and its items that still run go on.

use crate::intent::StepState;

/// How a batch's items stand, by state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ItemTally {
    /// Items the host is still working on: pending, ready, running or waiting to retry.
    pub in_flight: u64,
    /// Items a person has to look at.
    pub needs_person: u64,
    /// Items with a receipt.
    pub succeeded: u64,
    /// How many items the batch has.
    pub total: u64,
}

/// What a batch step's own row becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchVerdict {
    /// Items are in flight and none needs a person.
    Running,
    /// An item needs a person; the step waits for review.
    Review,
    /// Every item has a receipt.
    Succeeded,
    /// Nothing is in flight and the rest were cancelled (or are being compensated).
    Cancelled,
}

impl BatchVerdict {
    /// The step state of the verdict.
    pub fn state(self) -> StepState {
        match self {
            BatchVerdict::Running => StepState::Running,
            BatchVerdict::Review => StepState::WaitingForReview,
            BatchVerdict::Succeeded => StepState::Succeeded,
            BatchVerdict::Cancelled => StepState::Cancelled,
        }
    }
}

/// Whether an item in `state` is still the host's to move.
pub fn item_in_flight(state: StepState) -> bool {
    matches!(
        state,
        StepState::Pending | StepState::Ready | StepState::Running | StepState::FailedRetryable
    )
}

/// Whether an item in `state` waits for a person (`failed_terminal` included: the step
/// never fails while other items may have delivered).
pub fn item_needs_person(state: StepState) -> bool {
    state.needs_review() || state == StepState::FailedTerminal
}

/// The batch step's state from its items.
pub fn judge(tally: ItemTally) -> BatchVerdict {
    if tally.needs_person > 0 {
        BatchVerdict::Review
    } else if tally.in_flight > 0 {
        BatchVerdict::Running
    } else if tally.succeeded == tally.total {
        BatchVerdict::Succeeded
    } else {
        BatchVerdict::Cancelled
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tally(in_flight: u64, needs_person: u64, succeeded: u64, total: u64) -> ItemTally {
        ItemTally {
            in_flight,
            needs_person,
            succeeded,
            total,
        }
    }

    #[test]
    fn a_batch_succeeds_only_when_every_item_has_a_receipt() {
        assert_eq!(judge(tally(0, 0, 50, 50)), BatchVerdict::Succeeded);
        assert_eq!(judge(tally(1, 0, 49, 50)), BatchVerdict::Running);
        // Cancelled items (a withdrawal) leave it cancelled, never succeeded.
        assert_eq!(judge(tally(0, 0, 30, 50)), BatchVerdict::Cancelled);
    }

    #[test]
    fn an_item_that_needs_a_person_puts_the_step_in_review_while_others_run() {
        assert_eq!(judge(tally(8, 1, 10, 50)), BatchVerdict::Review);
        assert_eq!(judge(tally(0, 1, 49, 50)), BatchVerdict::Review);
        assert!(item_needs_person(StepState::FailedTerminal));
        assert!(item_needs_person(StepState::OutcomeUnknown));
        assert!(!item_needs_person(StepState::FailedRetryable));
        assert!(item_in_flight(StepState::FailedRetryable));
        assert!(!item_in_flight(StepState::Succeeded));
    }
}
