//! What to do when an effect's outcome is unknown: evidence before action.
//!
//! Evidence comes before action: a queryable adapter is asked first, by the stable reference;
//! an empty lookup inside the visibility window is asked again later (one absence proves
//! nothing); when lookups cannot settle it, an idempotent adapter is retried with the
//! SAME key while the provider still remembers it (retention); otherwise a person decides.
//! [`decide`] is pure, so the rules are tested without clocks or stores.

use crate::contract::{Contract, SameKeyRetry};
use crate::intent::Millis;

/// How long to wait before asking again inside the visibility window.
const REQUERY_DELAY_MS: u64 = 1_000;

/// What is known when deciding.
#[derive(Debug, Clone, Copy)]
pub struct Uncertainty {
    /// When the effect first became uncertain (its request identity was recorded).
    pub since: Millis,
    pub now: Millis,
    /// True when a lookup has just come back empty.
    pub lookup_absent: bool,
    /// Whether the step's retry policy allows another same-key attempt.
    pub attempts_left: bool,
}

/// The recovery verb chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Query the provider by the stable reference at `at`.
    Query { at: Millis },
    /// Retry with the same key at `at`.
    RetrySameKey { at: Millis },
    /// No automatic action is safe: the step waits for a person, with the reason.
    Review { reason: String },
}

/// Chooses the next verb for an effect whose outcome is unknown.
pub fn decide(contract: &Contract, u: Uncertainty) -> Verdict {
    let window_end = u.since.saturating_add(contract.query.visibility_window_ms);
    if contract.query.supported {
        if !u.lookup_absent {
            return Verdict::Query { at: u.now };
        }
        if u.now < window_end {
            return Verdict::Query {
                at: (u.now + REQUERY_DELAY_MS).min(window_end),
            };
        }
    }
    match contract.same_key_retry(u.since, u.now) {
        SameKeyRetry::Safe { .. } if u.attempts_left => Verdict::RetrySameKey { at: u.now },
        SameKeyRetry::Safe { .. } => Verdict::Review {
            reason: "the step has used all its attempts and the outcome is still unknown".into(),
        },
        SameKeyRetry::Forgotten { .. } => Verdict::Review {
            reason: format!(
                "the provider no longer remembers the key (retention of {} s ended), so a retry could duplicate the effect",
                contract.idempotency.retention_seconds
            ),
        },
        SameKeyRetry::NotIdempotent => {
            let why = if contract.query.supported {
                "lookups found nothing after the visibility window, and the adapter does not declare idempotency, so a retry could duplicate the effect"
            } else {
                "the adapter declares neither lookups nor idempotency, so nothing can prove or safely repeat the effect"
            };
            Verdict::Review { reason: why.into() }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::{CompensationClaim, DeclaredCapabilities, IdempotencyClaim, QueryClaim};

    fn contract(idempotent: bool, query: bool) -> Contract {
        Contract {
            name: "a".into(),
            version: "1.0.0".into(),
            idempotency: IdempotencyClaim {
                supported: idempotent,
                retention_seconds: 100,
                namespace: "ns".into(),
            },
            query: QueryClaim {
                supported: query,
                visibility_window_ms: 5_000,
            },
            compensation: CompensationClaim { supported: false },
            capabilities: DeclaredCapabilities::default(),
        }
    }

    fn u(now: Millis, lookup_absent: bool) -> Uncertainty {
        Uncertainty {
            since: 1_000,
            now,
            lookup_absent,
            attempts_left: true,
        }
    }

    #[test]
    fn queryable_asks_first_and_again_inside_the_window() {
        let c = contract(false, true);
        assert_eq!(decide(&c, u(1_000, false)), Verdict::Query { at: 1_000 });
        assert_eq!(decide(&c, u(2_000, true)), Verdict::Query { at: 3_000 });
        assert_eq!(decide(&c, u(5_500, true)), Verdict::Query { at: 6_000 });
        // After the window, without idempotency: review.
        assert!(matches!(decide(&c, u(6_000, true)), Verdict::Review { .. }));
    }

    #[test]
    fn idempotent_retries_with_the_same_key_within_retention_only() {
        let c = contract(true, false);
        assert_eq!(
            decide(&c, u(2_000, false)),
            Verdict::RetrySameKey { at: 2_000 }
        );
        let Verdict::Review { reason } = decide(&c, u(101_000, false)) else {
            panic!("past retention must go to review")
        };
        assert!(reason.contains("retention"), "{reason}");
        let mut no_attempts = u(2_000, false);
        no_attempts.attempts_left = false;
        assert!(matches!(decide(&c, no_attempts), Verdict::Review { .. }));
    }

    #[test]
    fn queryable_and_idempotent_falls_back_to_same_key_after_the_window() {
        let c = contract(true, true);
        assert_eq!(decide(&c, u(1_000, false)), Verdict::Query { at: 1_000 });
        assert_eq!(
            decide(&c, u(7_000, true)),
            Verdict::RetrySameKey { at: 7_000 }
        );
    }

    #[test]
    fn fire_and_forget_goes_to_review() {
        let Verdict::Review { reason } = decide(&contract(false, false), u(1_000, false)) else {
            panic!("fire-and-forget must go to review")
        };
        assert!(reason.contains("neither"), "{reason}");
    }
}
