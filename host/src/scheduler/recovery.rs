//! What to do when an effect's outcome is unknown: evidence before action.
//!
//! Evidence comes before action: a queryable adapter is asked first, by the stable reference;
//! an empty lookup inside the visibility window is asked again later (one absence proves
//! nothing); when lookups cannot settle it, an idempotent adapter is retried with the
//! SAME key while the provider still remembers it (retention); otherwise a person decides.
//! [`decide`] is pure, so the rules are tested without clocks or stores; so is [`conclude`],
//! which turns its verdict into what the step becomes and what the timeline says, the same
//! for an attempt whose own call left the outcome unknown and for an expired lease.

use crate::contract::{Contract, SameKeyRetry};
use crate::intent::{AttemptId, EventKind, Millis, NewEvent, StepState, Trigger};
use crate::store::StepTransition;

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
    /// How long to wait before asking again when a lookup has just failed (the provider
    /// down or erring): a provider that is down is not asked again at once.
    pub ask_again_after: Millis,
    /// Whether the step's retry policy allows another same-key attempt.
    pub attempts_left: bool,
    /// Until when the provider remembers the key, as recorded when the request was first
    /// sent (`None` for requests recorded before it was kept: computed from `since`).
    pub remembered_until: Option<Millis>,
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
            return Verdict::Query {
                at: u.now.saturating_add(u.ask_again_after),
            };
        }
        if u.now < window_end {
            return Verdict::Query {
                at: (u.now + REQUERY_DELAY_MS).min(window_end),
            };
        }
    }
    match contract.same_key_retry_until(u.remembered_until, u.since, u.now) {
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

/// How the outcome became unknown: the timeline tells it.
#[derive(Debug, Clone, Copy)]
pub enum Cause<'a> {
    /// The attempt's own call or lookup left it unknown; a conclusion names the step by
    /// its `label`.
    Call { label: &'a str },
    /// The attempt's lease expired once its request may have been sent; `expired` says
    /// whose lease, at which checkpoint.
    LeaseExpired { expired: &'a str },
}

/// Whose uncertainty is concluded, and how it arose.
#[derive(Debug, Clone, Copy)]
pub struct Told<'a> {
    pub step: &'a str,
    pub attempt: Option<&'a AttemptId>,
    pub cause: Cause<'a>,
}

/// What a verdict does to the step: its transition, the note kept on it, the timeline's
/// entry. The attempt's outcome is not the verdict's: it is what the call observed, or
/// `interrupted` for an expired lease.
#[derive(Debug, Clone, PartialEq)]
pub struct Conclusion {
    pub transition: StepTransition,
    pub note: String,
    pub event: NewEvent,
}

/// Carries out `verdict`, chosen by [`decide`] from `u`: a query or a same-key retry makes
/// the step ready again at the verdict's time, still uncertain since `u.since`; a review
/// leaves it `outcome_unknown` for a person.
pub fn conclude(
    contract: &Contract,
    u: Uncertainty,
    verdict: Verdict,
    told: Told<'_>,
) -> Conclusion {
    let retry = |ready_at: Millis, next_trigger: Trigger| StepTransition::Retry {
        ready_at,
        next_trigger,
        uncertain_since: Some(u.since),
    };
    let (transition, note, kind, text) = match verdict {
        Verdict::Query { at } => (
            retry(at, Trigger::RecoveryQuery),
            "outcome unknown; asking the provider by reference".to_string(),
            EventKind::Action,
            match told.cause {
                Cause::Call { .. } => format!(
                    "Outcome unknown: query by the stable reference scheduled in {} ms",
                    at.saturating_sub(u.now)
                ),
                Cause::LeaseExpired { expired } => format!(
                    "{expired}; the request may have been sent: query by the stable reference"
                ),
            },
        ),
        Verdict::RetrySameKey { at } => (
            retry(at, Trigger::Retry),
            "outcome unknown; retrying with the same idempotency key".to_string(),
            EventKind::Action,
            match told.cause {
                Cause::Call { .. } => format!(
                    "Outcome unknown: retry with the same idempotency key (the provider deduplicates it){}",
                    remembered(contract, u)
                ),
                Cause::LeaseExpired { expired } => format!(
                    "{expired}; the request may have been sent: retry with the same idempotency key{}",
                    remembered(contract, u)
                ),
            },
        ),
        Verdict::Review { reason } => (
            StepTransition::Terminal(StepState::OutcomeUnknown),
            format!("outcome unknown: {reason}"),
            EventKind::Conclusion,
            match told.cause {
                Cause::Call { label } => {
                    format!("{label}: outcome unknown — needs review, no automatic retry: {reason}")
                }
                Cause::LeaseExpired { expired } => format!(
                    "{expired}; outcome unknown — needs review, no automatic retry: {reason}"
                ),
            },
        ),
    };
    let (claim, relied) = relied_on(contract, verdict_claim(&transition));
    let text = match &relied {
        Some(words) => format!("{text} — relying on {words}"),
        None => text,
    };
    Conclusion {
        transition,
        note,
        event: NewEvent::step(kind, told.step, told.attempt, text).with_data(serde_json::json!({
            "relied_on": claim,
            "adapter": format!("{}@{}", contract.name, contract.version),
        })),
    }
}

/// Which declared claim a transition acts on: a recovery query on lookups, a same-key
/// retry on idempotency, a review on none.
fn verdict_claim(transition: &StepTransition) -> Option<&'static str> {
    match transition {
        StepTransition::Retry {
            next_trigger: Trigger::RecoveryQuery,
            ..
        } => Some("query"),
        StepTransition::Retry { .. } => Some("idempotency"),
        _ => None,
    }
}

/// The claim a recovery relied on, named with what the adapter declared, so the timeline
/// says on whose word the step was queried or sent again.
fn relied_on(
    contract: &Contract,
    claim: Option<&'static str>,
) -> (Option<&'static str>, Option<String>) {
    let adapter = format!("{}@{}", contract.name, contract.version);
    let words = claim.map(|c| match c {
        "query" => format!(
            "{adapter}'s declared lookups by reference (visible within {} ms)",
            contract.query.visibility_window_ms
        ),
        _ => format!(
            "{adapter}'s declared idempotency (keys kept {} s in namespace `{}`)",
            contract.idempotency.retention_seconds, contract.idempotency.namespace
        ),
    });
    (claim, words)
}

/// "; it remembers the key until …" when the provider deduplicates: the timeline says how
/// long a same-key retry stays safe.
fn remembered(contract: &Contract, u: Uncertainty) -> String {
    contract
        .remembered_until(u.since)
        .map(|computed| u.remembered_until.unwrap_or(computed))
        .map(|d| format!("; it remembers the key until {}", crate::intent::rfc3339(d)))
        .unwrap_or_default()
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
            observes: false,
            batch: None,
        }
    }

    fn u(now: Millis, lookup_absent: bool) -> Uncertainty {
        Uncertainty {
            since: 1_000,
            now,
            lookup_absent,
            ask_again_after: 0,
            attempts_left: true,
            remembered_until: None,
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

    const ATTEMPT: &str = "att_1";

    fn told(cause: Cause<'_>) -> Told<'_> {
        Told {
            step: "deliver",
            attempt: None,
            cause,
        }
    }

    const CALL: Cause<'static> = Cause::Call { label: "Deliver" };
    const EXPIRED: Cause<'static> = Cause::LeaseExpired {
        expired: "Lease of host-a expired at checkpoint 3 (the worker stopped or lost contact)",
    };

    #[test]
    fn a_query_makes_the_step_ready_at_its_time_still_uncertain() {
        let c = contract(false, true);
        for cause in [CALL, EXPIRED] {
            let done = conclude(
                &c,
                u(2_000, true),
                Verdict::Query { at: 3_000 },
                told(cause),
            );
            assert_eq!(
                done.transition,
                StepTransition::Retry {
                    ready_at: 3_000,
                    next_trigger: Trigger::RecoveryQuery,
                    uncertain_since: Some(1_000),
                }
            );
            assert_eq!(
                done.note,
                "outcome unknown; asking the provider by reference"
            );
            assert_eq!(done.event.kind, EventKind::Action);
            assert_eq!(done.event.step.as_deref(), Some("deliver"));
        }
        let call = conclude(&c, u(2_000, true), Verdict::Query { at: 3_000 }, told(CALL));
        assert_eq!(
            call.event.text,
            "Outcome unknown: query by the stable reference scheduled in 1000 ms — relying on a@1.0.0's declared lookups by reference (visible within 5000 ms)"
        );
        assert_eq!(
            call.event.data,
            serde_json::json!({"relied_on": "query", "adapter": "a@1.0.0"})
        );
        let expired = conclude(
            &c,
            u(2_000, true),
            Verdict::Query { at: 3_000 },
            told(EXPIRED),
        );
        assert_eq!(
            expired.event.text,
            "Lease of host-a expired at checkpoint 3 (the worker stopped or lost contact); the request may have been sent: query by the stable reference — relying on a@1.0.0's declared lookups by reference (visible within 5000 ms)"
        );
    }

    /// The deadline recorded at the first request's checkpoint 3 is the one recovery goes
    /// by and tells, not one computed again from when the step became uncertain.
    #[test]
    fn the_recorded_retention_deadline_decides_and_is_told() {
        let c = contract(true, false);
        // Computed from `since` (1 s), the key would be kept until 101 s; recorded: 50 s.
        let recorded = |now| Uncertainty {
            remembered_until: Some(50_000),
            ..u(now, false)
        };
        assert_eq!(
            decide(&c, u(60_000, false)),
            Verdict::RetrySameKey { at: 60_000 }
        );
        assert!(matches!(
            decide(&c, recorded(60_000)),
            Verdict::Review { reason } if reason.contains("no longer remembers the key")
        ));
        let done = conclude(&c, recorded(2_000), decide(&c, recorded(2_000)), told(CALL));
        assert!(
            done.event
                .text
                .contains("it remembers the key until 1970-01-01T00:00:50.000Z"),
            "{}",
            done.event.text
        );
    }

    #[test]
    fn a_same_key_retry_says_until_when_the_provider_remembers_the_key() {
        let c = contract(true, false);
        let attempt = AttemptId(ATTEMPT.into());
        let call = Told {
            attempt: Some(&attempt),
            ..told(CALL)
        };
        let done = conclude(
            &c,
            u(2_000, false),
            Verdict::RetrySameKey { at: 2_000 },
            call,
        );
        assert_eq!(
            done.transition,
            StepTransition::Retry {
                ready_at: 2_000,
                next_trigger: Trigger::Retry,
                uncertain_since: Some(1_000),
            }
        );
        assert_eq!(
            done.note,
            "outcome unknown; retrying with the same idempotency key"
        );
        assert_eq!(done.event.kind, EventKind::Action);
        assert_eq!(done.event.attempt_id.as_deref(), Some(ATTEMPT));
        // Retention of 100 s from the first request at 1 s.
        assert_eq!(
            done.event.text,
            "Outcome unknown: retry with the same idempotency key (the provider deduplicates it); it remembers the key until 1970-01-01T00:01:41.000Z — relying on a@1.0.0's declared idempotency (keys kept 100 s in namespace `ns`)"
        );
        assert_eq!(done.event.data["relied_on"], "idempotency");
        let expired = conclude(
            &c,
            u(2_000, false),
            Verdict::RetrySameKey { at: 2_000 },
            told(EXPIRED),
        );
        assert_eq!(expired.transition, done.transition);
        assert!(
            expired.event.text.ends_with(
                "; the request may have been sent: retry with the same idempotency key; it remembers the key until 1970-01-01T00:01:41.000Z — relying on a@1.0.0's declared idempotency (keys kept 100 s in namespace `ns`)"
            ),
            "{}",
            expired.event.text
        );
    }

    #[test]
    fn a_review_leaves_the_step_outcome_unknown_with_the_reason() {
        let c = contract(false, false);
        let review = || Verdict::Review {
            reason: "nothing can prove it".into(),
        };
        let call = conclude(&c, u(2_000, false), review(), told(CALL));
        assert_eq!(
            call.transition,
            StepTransition::Terminal(StepState::OutcomeUnknown)
        );
        assert_eq!(call.note, "outcome unknown: nothing can prove it");
        assert_eq!(call.event.kind, EventKind::Conclusion);
        assert_eq!(
            call.event.text,
            "Deliver: outcome unknown — needs review, no automatic retry: nothing can prove it"
        );
        let expired = conclude(&c, u(2_000, false), review(), told(EXPIRED));
        assert_eq!(expired.transition, call.transition);
        assert_eq!(expired.note, call.note);
        assert_eq!(
            expired.event.text,
            "Lease of host-a expired at checkpoint 3 (the worker stopped or lost contact); outcome unknown — needs review, no automatic retry: nothing can prove it"
        );
    }
}
