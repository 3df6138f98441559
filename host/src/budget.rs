//! A workflow's budget as spent and as extended: the limits (the definition's `[budget]`
//! plus what operators added), whether the next attempt or external call may start, what
//! an attempt draws on, and the `budget` block people see.
//!
//! Crossing a limit never cuts an attempt in the middle: the checks here run before an
//! attempt starts (its checkpoint 2) and before a call leaves (its checkpoint 3). A
//! recovery query only asks what happened, so it draws on a reserve once the attempts are
//! spent; a compensation reverses an effect, so no budget ever refuses it.

use crate::intent::{Millis, rfc3339};
use crate::workflow::Budget;
use serde::{Deserialize, Serialize};

/// Amounts of each budget: what a workflow used, or what operators added.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Amounts {
    pub attempts: u64,
    pub runtime_ms: u64,
    pub external_calls: u64,
    pub cost: u64,
    pub recovery_queries: u64,
}

/// The `reason` of a step blocked because its workflow's budget is spent.
pub const BLOCKED_REASON: &str = "budget_exhausted";

impl Amounts {
    /// These amounts with `add` added to each (saturating: an extension never wraps).
    pub fn plus(&self, add: &Amounts) -> Amounts {
        Amounts {
            attempts: self.attempts.saturating_add(add.attempts),
            runtime_ms: self.runtime_ms.saturating_add(add.runtime_ms),
            external_calls: self.external_calls.saturating_add(add.external_calls),
            cost: self.cost.saturating_add(add.cost),
            recovery_queries: self.recovery_queries.saturating_add(add.recovery_queries),
        }
    }

    /// Whether nothing is in it.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// "3 attempts, 2 external calls": the non-zero amounts, for a timeline.
    pub fn describe(&self) -> String {
        let parts: Vec<String> = [
            (self.attempts, "attempts"),
            (self.runtime_ms, "ms of runtime"),
            (self.external_calls, "external calls"),
            (self.cost, "cost units"),
            (self.recovery_queries, "recovery queries"),
        ]
        .into_iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, what)| format!("{n} {what}"))
        .collect();
        parts.join(", ")
    }
}

/// One budget, named by its key in the projection's `budget` block (and in `add`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Limit {
    Attempts,
    RuntimeMs,
    ExternalCalls,
    Cost,
    RecoveryQueries,
    /// Not a budget an operator extends: the workflow's deadline.
    Deadline,
}

impl Limit {
    /// The key, as in the projection and in `blocked.limit`.
    pub fn as_str(self) -> &'static str {
        match self {
            Limit::Attempts => "attempts",
            Limit::RuntimeMs => "runtime_ms",
            Limit::ExternalCalls => "external_calls",
            Limit::Cost => "cost",
            Limit::RecoveryQueries => "recovery_queries",
            Limit::Deadline => "deadline",
        }
    }
}

/// The limits in force for a workflow: its definition's budget plus what was added.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub attempts: u64,
    pub runtime_ms: u64,
    pub external_calls: u64,
    pub cost: Option<u64>,
    pub recovery_queries: u64,
}

impl Limits {
    pub fn of(budget: &Budget, added: &Amounts) -> Self {
        Self {
            attempts: u64::from(budget.max_attempts).saturating_add(added.attempts),
            runtime_ms: (budget.max_runtime.as_millis() as u64).saturating_add(added.runtime_ms),
            external_calls: u64::from(budget.max_external_calls)
                .saturating_add(added.external_calls),
            cost: budget
                .max_cost
                .map(|c| u64::from(c).saturating_add(added.cost)),
            recovery_queries: u64::from(budget.recovery_queries)
                .saturating_add(added.recovery_queries),
        }
    }

    /// The limits `used` has reached: the next attempt of any kind they govern would be
    /// refused. A step blocked by a limit not in this list may run again.
    /// The limits (by name) that still hold a step blocked after an extension: those
    /// `used` exhausts, and the deadline, which no extension of amounts lifts.
    pub fn still_exhausted(&self, used: &Amounts) -> Vec<&'static str> {
        let mut out: Vec<&'static str> = self
            .exhausted(used)
            .into_iter()
            .map(Limit::as_str)
            .collect();
        out.push(Limit::Deadline.as_str());
        out
    }

    pub fn exhausted(&self, used: &Amounts) -> Vec<Limit> {
        let mut out = Vec::new();
        if used.attempts >= self.attempts {
            out.push(Limit::Attempts);
        }
        if used.runtime_ms >= self.runtime_ms {
            out.push(Limit::RuntimeMs);
        }
        if used.external_calls >= self.external_calls {
            out.push(Limit::ExternalCalls);
        }
        if self.cost.is_some_and(|c| used.cost >= c) {
            out.push(Limit::Cost);
        }
        if used.recovery_queries >= self.recovery_queries {
            out.push(Limit::RecoveryQueries);
        }
        out
    }
}

/// What an attempt is, as far as the budget cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptKind {
    /// A handler's run or an adapter's call that may cause an effect.
    Work,
    /// A lookup of what an earlier attempt did.
    RecoveryQuery,
    /// The reversal of an effect.
    Compensation,
}

/// What an attempt draws on. The claim counts every attempt; the finish corrects it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Charge {
    /// One of `max_attempts`.
    #[default]
    Attempt,
    /// One of the recovery-query reserve (the attempts are spent).
    Reserve,
    /// Nothing: refused before it started (by the budget or the policy).
    Nothing,
}

/// Why the next attempt or call may not start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exhausted {
    pub limit: Limit,
    pub message: String,
}

/// Whether an attempt may start, and what it draws on. `used.attempts` already counts
/// this attempt (the claim counted it).
pub fn admit_attempt(
    limits: &Limits,
    used: &Amounts,
    kind: AttemptKind,
) -> Result<Charge, Exhausted> {
    match kind {
        AttemptKind::Compensation => Ok(Charge::Attempt),
        AttemptKind::RecoveryQuery if used.attempts <= limits.attempts => Ok(Charge::Attempt),
        AttemptKind::RecoveryQuery if used.recovery_queries < limits.recovery_queries => {
            Ok(Charge::Reserve)
        }
        AttemptKind::RecoveryQuery => Err(Exhausted {
            limit: Limit::RecoveryQueries,
            message: format!(
                "the workflow's {} attempts and its reserve of {} recovery queries are used up",
                limits.attempts, limits.recovery_queries
            ),
        }),
        AttemptKind::Work if used.attempts > limits.attempts => Err(Exhausted {
            limit: Limit::Attempts,
            message: format!(
                "the workflow's budget of {} attempts is used up",
                limits.attempts
            ),
        }),
        AttemptKind::Work if used.runtime_ms >= limits.runtime_ms => Err(Exhausted {
            limit: Limit::RuntimeMs,
            message: format!(
                "the workflow's runtime budget of {} ms is used up ({} ms used)",
                limits.runtime_ms, used.runtime_ms
            ),
        }),
        AttemptKind::Work => Ok(Charge::Attempt),
    }
}

/// Whether one more external call costing `cost` units may leave.
pub fn admit_call(limits: &Limits, used: &Amounts, cost: u32) -> Result<(), Exhausted> {
    if used.external_calls >= limits.external_calls {
        return Err(Exhausted {
            limit: Limit::ExternalCalls,
            message: format!(
                "the workflow's budget of {} external calls is used up",
                limits.external_calls
            ),
        });
    }
    if let Some(max) = limits.cost
        && used.cost + u64::from(cost) > max
    {
        return Err(Exhausted {
            limit: Limit::Cost,
            message: format!(
                "the next call costs {cost} units and the workflow's cost budget has {} of {max} left",
                max.saturating_sub(used.cost)
            ),
        });
    }
    Ok(())
}

/// The deadline's refusal, once it has passed.
pub fn deadline_passed(deadline_at: Millis, now: Millis) -> Option<Exhausted> {
    (now > deadline_at).then(|| Exhausted {
        limit: Limit::Deadline,
        message: format!("the workflow's deadline passed at {}", rfc3339(deadline_at)),
    })
}

/// Whether a workflow that waits for a person should say its deadline is near: a fifth of
/// its time or less is left, and it has not passed.
pub fn deadline_approaching(created_at: Millis, deadline_at: Millis, now: Millis) -> bool {
    let total = deadline_at.saturating_sub(created_at);
    now < deadline_at && deadline_at - now <= total / 5
}

/// `{"used", "limit"}` of one budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct UsedOf {
    pub used: u64,
    pub limit: u64,
}

/// The projection's `budget` block.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct BudgetView {
    pub attempts: UsedOf,
    pub runtime_ms: UsedOf,
    pub external_calls: UsedOf,
    pub cost: Option<UsedOf>,
    /// The recovery room: queries that may still run once the attempts are spent.
    pub recovery_queries_left: u64,
}

impl BudgetView {
    pub fn new(limits: &Limits, used: &Amounts) -> Self {
        let of = |used, limit| UsedOf { used, limit };
        Self {
            attempts: of(used.attempts, limits.attempts),
            runtime_ms: of(used.runtime_ms, limits.runtime_ms),
            external_calls: of(used.external_calls, limits.external_calls),
            cost: limits.cost.map(|limit| of(used.cost, limit)),
            recovery_queries_left: limits
                .recovery_queries
                .saturating_sub(used.recovery_queries),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn limits() -> Limits {
        let budget = Budget {
            max_attempts: 4,
            max_runtime: Duration::from_secs(1),
            max_external_calls: 2,
            max_cost: Some(10),
            recovery_queries: 2,
        };
        Limits::of(&budget, &Amounts::default())
    }

    fn used(attempts: u64) -> Amounts {
        Amounts {
            attempts,
            ..Amounts::default()
        }
    }

    #[test]
    fn work_is_refused_past_each_limit_and_named() {
        let l = limits();
        assert_eq!(
            admit_attempt(&l, &used(4), AttemptKind::Work),
            Ok(Charge::Attempt)
        );
        let over = admit_attempt(&l, &used(5), AttemptKind::Work).unwrap_err();
        assert_eq!(over.limit, Limit::Attempts);
        let slow = Amounts {
            runtime_ms: 1000,
            ..used(1)
        };
        let over = admit_attempt(&l, &slow, AttemptKind::Work).unwrap_err();
        assert_eq!(over.limit, Limit::RuntimeMs);
        let calls = Amounts {
            external_calls: 2,
            ..used(1)
        };
        assert_eq!(
            admit_call(&l, &calls, 1).unwrap_err().limit,
            Limit::ExternalCalls
        );
        let spent = Amounts { cost: 8, ..used(1) };
        assert_eq!(admit_call(&l, &spent, 2), Ok(()));
        let over = admit_call(&l, &spent, 3).unwrap_err();
        assert_eq!(over.limit, Limit::Cost);
        assert!(over.message.contains("2 of 10 left"), "{}", over.message);
    }

    #[test]
    fn recovery_queries_draw_on_the_reserve_once_attempts_are_spent() {
        let l = limits();
        assert_eq!(
            admit_attempt(&l, &used(4), AttemptKind::RecoveryQuery),
            Ok(Charge::Attempt)
        );
        assert_eq!(
            admit_attempt(&l, &used(5), AttemptKind::RecoveryQuery),
            Ok(Charge::Reserve)
        );
        let drained = Amounts {
            recovery_queries: 2,
            ..used(5)
        };
        let over = admit_attempt(&l, &drained, AttemptKind::RecoveryQuery).unwrap_err();
        assert_eq!(over.limit, Limit::RecoveryQueries);
        // A compensation is never refused.
        assert_eq!(
            admit_attempt(&l, &drained, AttemptKind::Compensation),
            Ok(Charge::Attempt)
        );
    }

    #[test]
    fn an_extension_moves_the_limits_and_the_view_shows_the_room() {
        let budget = Budget {
            max_cost: None,
            ..Budget::default()
        };
        let added = Amounts {
            attempts: 5,
            recovery_queries: 1,
            ..Amounts::default()
        };
        let l = Limits::of(&budget, &added);
        assert_eq!(l.attempts, 25);
        assert_eq!(l.cost, None);
        let view = BudgetView::new(&l, &used(25));
        assert_eq!(
            view.attempts,
            UsedOf {
                used: 25,
                limit: 25
            }
        );
        assert_eq!(view.recovery_queries_left, 4);
        assert_eq!(l.exhausted(&used(25)), vec![Limit::Attempts]);
        assert!(l.exhausted(&used(24)).is_empty());
    }

    #[test]
    fn the_deadline_is_near_in_its_last_fifth() {
        assert!(!deadline_approaching(0, 100, 79));
        assert!(deadline_approaching(0, 100, 80));
        assert!(!deadline_approaching(0, 100, 100));
        assert!(deadline_passed(100, 101).is_some());
        assert!(deadline_passed(100, 100).is_none());
    }
}
