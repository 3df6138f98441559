//! A budget extension's event and answer, and the deadline warning's event.

use crate::intent::{Millis, NewEvent};
use crate::store::{StoreError, StoreResult};

/// The timeline entry of an extension: who added what, why, and which steps it freed.
pub(crate) fn extension_event(req: &crate::store::ExtendRequest, released: &[String]) -> NewEvent {
    let freed = match released {
        [] => String::new(),
        steps => format!("; {} may run again", steps.join(", ")),
    };
    NewEvent::workflow(
        crate::intent::EventKind::Action,
        format!(
            "Budget extended by {}: {} added ({}){freed}",
            req.scope.subject.0,
            req.add.describe(),
            req.reason
        ),
    )
    .with_data(serde_json::json!({
        "author": req.scope.subject.0,
        "add": req.add,
        "reason": req.reason,
        "released": released,
    }))
}

/// The stored answer of an extension: the workflow's `budget` block afterwards.
pub(crate) fn extension_answer(
    base: &crate::workflow::Budget,
    added: &crate::budget::Amounts,
    used: &crate::budget::Amounts,
) -> StoreResult<String> {
    let limits = crate::budget::Limits::of(base, added);
    serde_json::to_string(&crate::budget::BudgetView::new(&limits, used))
        .map_err(|e| StoreError::Corrupt(e.to_string()))
}

/// The timeline entry of a deadline that draws near while the workflow waits for a person.
/// The timeline's note that a step waiting for a person is near the end of its provider's
/// memory of the key: after it, a same-key retry could make a second effect.
pub(crate) fn retention_event(step: &str, remembered_until: Millis) -> NewEvent {
    NewEvent::step(
        crate::intent::EventKind::Observation,
        step,
        None,
        format!(
            "Retention deadline approaching: the provider remembers the idempotency key of this request until {}; a retry with the same key is safe only until then",
            crate::intent::rfc3339(remembered_until)
        ),
    )
}

pub(crate) fn deadline_event(deadline_at: Millis) -> NewEvent {
    NewEvent::workflow(
        crate::intent::EventKind::Observation,
        format!(
            "Deadline approaching: the workflow waits for review and its deadline is {}",
            crate::intent::rfc3339(deadline_at)
        ),
    )
}
