//! An operator's extension of a workflow's budget: amounts added to its limits, recorded
//! with author and reason under an idempotency key; the store frees the steps that are no
//! longer over a limit in the same transaction.

use super::{DeskError, InvalidOrder, required};
use crate::access::{Principal, Role};
use crate::budget::{Amounts, BudgetView};
use crate::context::Context;
use crate::intent::canonicalize;
use crate::store::{ActionAnswer, ActionScope, ExtendAnswer, ExtendRequest, StoreError};
use serde_json::{Value, json};
use std::sync::Arc;

/// The action name an extension's key is scoped by.
pub const EXTEND: &str = "budget";

/// The amount keys an extension may add to, as in the projection's `budget` block.
pub const AMOUNTS: [&str; 5] = [
    "attempts",
    "runtime_ms",
    "external_calls",
    "cost",
    "recovery_queries",
];

/// The most one extension may add to any one amount: enough for any real correction
/// (a billion attempts, or eleven days of runtime), far from overflowing a stored total.
pub const MAX_EXTENSION: u64 = 1_000_000_000;

/// An extension's body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtendOrder {
    pub add: Amounts,
    pub reason: String,
}

impl ExtendOrder {
    /// `add` from `(key, amount)` pairs (a key named twice adds twice); at least one amount
    /// must be positive, every key known, and the reason given.
    pub fn new<'a>(
        add: impl IntoIterator<Item = (&'a str, u64)>,
        reason: Option<&str>,
    ) -> Result<Self, InvalidOrder> {
        let mut amounts = Amounts::default();
        for (key, n) in add {
            let slot = match key {
                "attempts" => &mut amounts.attempts,
                "runtime_ms" => &mut amounts.runtime_ms,
                "external_calls" => &mut amounts.external_calls,
                "cost" => &mut amounts.cost,
                "recovery_queries" => &mut amounts.recovery_queries,
                other => {
                    return Err(InvalidOrder {
                        field: "add",
                        message: format!(
                            "`add.{}` is not a budget; add to any of {}",
                            other.escape_debug(),
                            AMOUNTS.join(", ")
                        ),
                    });
                }
            };
            *slot = slot.saturating_add(n);
            if *slot > MAX_EXTENSION {
                return Err(InvalidOrder {
                    field: "add",
                    message: format!(
                        "`add.{key}` adds {}, over the most one extension may add ({MAX_EXTENSION}); add less, or several times with a reason each",
                        *slot
                    ),
                });
            }
        }
        if amounts.is_empty() {
            return Err(InvalidOrder {
                field: "add",
                message: format!(
                    "`add` adds nothing; give a positive amount for any of {}, e.g. {{\"attempts\": 5}}",
                    AMOUNTS.join(", ")
                ),
            });
        }
        Ok(Self {
            add: amounts,
            reason: required("reason", reason, "say why the workflow may spend more")?,
        })
    }

    fn to_json(&self) -> Value {
        json!({"add": self.add, "reason": self.reason})
    }
}

/// Adds `order` to the limits of workflow `workflow_id` for `caller` (an operator) under
/// `key`; returns the workflow's `budget` block afterwards (the stored one on a replay).
pub async fn extend_budget<
    S: crate::store::DefinitionStore + crate::store::ReadStore + crate::store::BudgetStore,
>(
    ctx: &Arc<Context<S>>,
    caller: &Principal,
    workflow_id: &str,
    order: ExtendOrder,
    key: String,
) -> Result<BudgetView, DeskError> {
    let record = super::desk::visible(ctx, caller, workflow_id).await?;
    if !caller.has(Role::Operator) {
        return Err(DeskError::Forbidden);
    }
    let def = super::desk::required_definition(ctx, &record).await?;
    let digest = canonicalize(&order.to_json())
        .map_err(|e| DeskError::Internal(e.to_string()))?
        .digest;
    let scope = ActionScope {
        subject: caller.subject.clone(),
        workflow_id: record.workflow_id.clone(),
        step: String::new(),
        action: EXTEND.to_string(),
        key,
    };
    let request = ExtendRequest {
        scope: scope.clone(),
        request_digest: digest,
        add: order.add,
        reason: order.reason,
        base: def.def.budget.clone(),
        now: ctx.clock.now_ms(),
    };
    let text = match ctx.store.extend_budget(request).await? {
        ExtendAnswer::Applied(text) => text,
        ExtendAnswer::KeyConflict => return Err(DeskError::KeyConflict(Box::new(scope))),
        ExtendAnswer::Replayed(stored) => match stored.answer {
            Some(ActionAnswer::Applied(text)) => text,
            _ => {
                return Err(DeskError::Store(StoreError::Corrupt(format!(
                    "the extension under key {} has no stored answer",
                    scope.key
                ))));
            }
        },
    };
    // Freed steps are ready now: wake the scheduler and anyone waiting on the projection.
    ctx.wake.notify_one();
    ctx.progress.advance_workflow(workflow_id);
    serde_json::from_str(&text)
        .map_err(|e| DeskError::Store(StoreError::Corrupt(format!("stored budget: {e}"))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_extension_names_what_is_wrong_with_it() {
        let ok = ExtendOrder::new([("attempts", 5), ("cost", 2)], Some("provider back")).unwrap();
        assert_eq!(ok.add.attempts, 5);
        assert_eq!(ok.add.cost, 2);
        let unknown = ExtendOrder::new([("money", 5)], Some("x")).unwrap_err();
        assert_eq!(unknown.field, "add");
        assert!(
            unknown.message.contains("`add.money`"),
            "{}",
            unknown.message
        );
        let nothing = ExtendOrder::new([("attempts", 0)], Some("x")).unwrap_err();
        assert!(
            nothing.message.contains("adds nothing"),
            "{}",
            nothing.message
        );
        let why = ExtendOrder::new([("attempts", 1)], None).unwrap_err();
        assert_eq!(why.field, "reason");
    }

    /// Amounts past the cap — or a key named twice to add up past it, or `u64::MAX` — are
    /// refused, never wrapped; the limits in force saturate whatever was stored.
    #[test]
    fn an_extension_never_overflows() {
        for add in [
            vec![("attempts", MAX_EXTENSION + 1)],
            vec![("cost", u64::MAX)],
            vec![("runtime_ms", MAX_EXTENSION), ("runtime_ms", MAX_EXTENSION)],
            vec![("attempts", u64::MAX), ("attempts", u64::MAX)],
        ] {
            let err = ExtendOrder::new(add.clone(), Some("x")).unwrap_err();
            assert!(
                err.message.contains("over the most one extension may add"),
                "{add:?}: {}",
                err.message
            );
        }
        assert!(ExtendOrder::new([("attempts", MAX_EXTENSION)], Some("x")).is_ok());
        let huge = Amounts {
            attempts: u64::MAX,
            runtime_ms: u64::MAX,
            external_calls: u64::MAX,
            cost: u64::MAX,
            recovery_queries: u64::MAX,
        };
        let limits = crate::budget::Limits::of(&crate::workflow::Budget::default(), &huge);
        assert_eq!(limits.attempts, u64::MAX);
    }

    #[test]
    fn a_stored_block_reads_back() {
        let view = BudgetView::new(
            &crate::budget::Limits::of(&crate::workflow::Budget::default(), &Amounts::default()),
            &Amounts::default(),
        );
        let text = serde_json::to_string(&view).unwrap();
        assert_eq!(serde_json::from_str::<BudgetView>(&text).unwrap(), view);
    }
}
