//! The evidence order: what one provider observation does to the step it was matched to,
//! decided in pure code for both backends. Stronger evidence is never reversed by weaker
//! or older evidence: a receipt stands against a repeated or delayed "in effect", a
//! compensation's receipt against a delayed "accepted", and only a step still waiting on
//! an unknown outcome is settled by what the provider says.

use crate::contract::EffectStatus;
use crate::intent::{Millis, ObservationVerdict, StepState};

/// A step an observation may act on, as the store found it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Target {
    pub step: String,
    pub state: StepState,
    /// An attempt holds its lease: what it finds will be recorded first.
    pub leased: bool,
    /// Its effect became uncertain and is still being investigated.
    pub uncertain: bool,
    /// The reference its receipt stands on, and when the receipt was recorded.
    pub receipt: Option<(Option<String>, Millis)>,
}

/// What an observation meets: the effect step it names and, when one was started, that
/// step's compensation.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Matched {
    pub forward: Target,
    pub compensation: Option<Target>,
}

/// The observation's verdict, with the step it concerns.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Judged {
    pub verdict: ObservationVerdict,
    /// The step the verdict is about: the compensation for a reversal, else the effect.
    pub step: String,
    /// What happened, in words (the timeline's and the inbox's).
    pub note: String,
    /// The contradiction's references (standing, observed), when it contradicts.
    pub references: Option<(String, String)>,
}

/// States an unknown outcome waits in, which an observation may settle or send to review.
fn waits_on_outcome(t: &Target) -> bool {
    t.receipt.is_none()
        && (t.state == StepState::OutcomeUnknown
            || (t.uncertain
                && matches!(
                    t.state,
                    StepState::Ready | StepState::FailedRetryable | StepState::WaitingForReview
                )))
}

/// Judges one observation (`status`, naming `reference`, seen by the provider at
/// `observed_at` when it says) against the step it matched.
pub(crate) fn judge(
    status: EffectStatus,
    reference: Option<&str>,
    provider_status: &str,
    observed_at: Option<Millis>,
    m: &Matched,
) -> Judged {
    let f = &m.forward;
    let said = if provider_status.is_empty() {
        String::new()
    } else {
        format!(" (\"{provider_status}\")")
    };
    let about = |t: &Target, verdict, note: String| Judged {
        verdict,
        step: t.step.clone(),
        note,
        references: None,
    };
    // Evidence the provider had before the receipt was recorded is older than it.
    let older = |t: &Target| match (&t.receipt, observed_at) {
        (Some((_, recorded)), Some(at)) => at < *recorded,
        _ => false,
    };
    match status {
        EffectStatus::InEffect => {
            if f.leased {
                return about(f, ObservationVerdict::Held, held(f));
            }
            match (&f.receipt, reference) {
                (Some((Some(standing), _)), Some(named)) if standing != named && !older(f) => {
                    Judged {
                        verdict: ObservationVerdict::Contradicted,
                        step: f.step.clone(),
                        note: format!(
                            "the step stands on {standing}, but the provider reports {named} in effect{said}: two external references for one effect; a person decides which stands"
                        ),
                        references: Some((standing.clone(), named.to_string())),
                    }
                }
                (Some(_), _) => about(
                    f,
                    ObservationVerdict::Kept,
                    format!(
                        "the provider reports it in effect{said}; kept as evidence beside the receipt the step stands on"
                    ),
                ),
                (None, Some(named)) if waits_on_outcome(f) => about(
                    f,
                    ObservationVerdict::Settled,
                    format!(
                        "the provider reports {named} in effect{said}; its event settles the unknown outcome with a receipt"
                    ),
                ),
                _ => about(
                    f,
                    ObservationVerdict::Kept,
                    format!(
                        "the provider reports it in effect{said}; kept as evidence (the step is `{}` and waits on no unknown outcome)",
                        f.state
                    ),
                ),
            }
        }
        EffectStatus::Reversed => {
            let Some(c) = &m.compensation else {
                return about(
                    f,
                    ObservationVerdict::Kept,
                    format!(
                        "the provider reports the effect reversed{said}, which no compensation of this workflow asked for; kept as evidence"
                    ),
                );
            };
            if c.leased {
                return about(c, ObservationVerdict::Held, held(c));
            }
            if c.receipt.is_some() {
                return about(
                    c,
                    ObservationVerdict::Kept,
                    format!(
                        "the provider reports the effect reversed{said}; kept as evidence beside the compensation's receipt"
                    ),
                );
            }
            if waits_on_outcome(c) {
                return about(
                    c,
                    ObservationVerdict::Reversed,
                    format!(
                        "the provider reports the effect reversed{said}; its event settles the compensation with a receipt"
                    ),
                );
            }
            about(
                c,
                ObservationVerdict::Kept,
                format!(
                    "the provider reports the effect reversed{said}; kept as evidence (the compensation is `{}`)",
                    c.state
                ),
            )
        }
        EffectStatus::Refused => {
            if f.leased {
                return about(f, ObservationVerdict::Held, held(f));
            }
            if f.receipt.is_some() && !older(f) {
                let standing = f
                    .receipt
                    .as_ref()
                    .and_then(|(r, _)| r.clone())
                    .unwrap_or_else(|| "its receipt".into());
                return Judged {
                    verdict: ObservationVerdict::Contradicted,
                    step: f.step.clone(),
                    note: format!(
                        "the step stands on {standing}, but the provider says the request did not take effect{said}; a person decides which stands"
                    ),
                    references: Some((standing, reference.unwrap_or("refused").to_string())),
                };
            }
            if waits_on_outcome(f) {
                return about(
                    f,
                    ObservationVerdict::Review,
                    format!(
                        "the provider says the request did not take effect{said}; a person decides (docket never retries on the provider's word alone)"
                    ),
                );
            }
            about(
                f,
                ObservationVerdict::Kept,
                format!(
                    "the provider says the request did not take effect{said}; kept as evidence"
                ),
            )
        }
    }
}

fn held(t: &Target) -> String {
    format!(
        "an attempt of step `{}` is under way; the observation is judged once it ends",
        t.step
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(state: StepState, uncertain: bool, receipt: Option<&str>) -> Target {
        Target {
            step: "deliver".into(),
            state,
            leased: false,
            uncertain,
            receipt: receipt.map(|r| (Some(r.to_string()), 1_000)),
        }
    }

    fn only(forward: Target) -> Matched {
        Matched {
            forward,
            compensation: None,
        }
    }

    #[test]
    fn in_effect_settles_only_an_unknown_outcome_and_contradicts_another_reference() {
        let unknown = only(target(StepState::OutcomeUnknown, true, None));
        let j = judge(
            EffectStatus::InEffect,
            Some("d1"),
            "accepted",
            None,
            &unknown,
        );
        assert_eq!(j.verdict, ObservationVerdict::Settled);
        let same = only(target(StepState::Succeeded, false, Some("d1")));
        let j = judge(EffectStatus::InEffect, Some("d1"), "accepted", None, &same);
        assert_eq!(j.verdict, ObservationVerdict::Kept);
        let j = judge(EffectStatus::InEffect, Some("d2"), "accepted", None, &same);
        assert_eq!(j.verdict, ObservationVerdict::Contradicted);
        assert_eq!(j.references, Some(("d1".into(), "d2".into())));
        // Older than the receipt: kept, never a contradiction.
        let j = judge(
            EffectStatus::InEffect,
            Some("d2"),
            "accepted",
            Some(500),
            &same,
        );
        assert_eq!(j.verdict, ObservationVerdict::Kept);
        let mut running = target(StepState::Running, true, None);
        running.leased = true;
        let j = judge(EffectStatus::InEffect, Some("d1"), "", None, &only(running));
        assert_eq!(j.verdict, ObservationVerdict::Held);
        let fresh = only(target(StepState::Ready, false, None));
        let j = judge(EffectStatus::InEffect, Some("d1"), "", None, &fresh);
        assert_eq!(j.verdict, ObservationVerdict::Kept);
    }

    #[test]
    fn reversed_settles_a_compensation_and_a_late_accepted_changes_nothing() {
        let mut compensation = target(StepState::OutcomeUnknown, true, None);
        compensation.step = "deliver.compensate".into();
        let m = Matched {
            forward: target(StepState::Compensating, false, Some("d1")),
            compensation: Some(compensation.clone()),
        };
        let j = judge(EffectStatus::Reversed, Some("d1"), "cancelled", None, &m);
        assert_eq!(j.verdict, ObservationVerdict::Reversed);
        assert_eq!(j.step, "deliver.compensate");
        let done = Matched {
            forward: target(StepState::Compensated, false, Some("d1")),
            compensation: Some(target(StepState::Succeeded, false, Some("d1"))),
        };
        let j = judge(EffectStatus::InEffect, Some("d1"), "accepted", None, &done);
        assert_eq!(j.verdict, ObservationVerdict::Kept);
        let j = judge(EffectStatus::Reversed, Some("d1"), "cancelled", None, &done);
        assert_eq!(j.verdict, ObservationVerdict::Kept);
    }

    #[test]
    fn refused_sends_an_unknown_outcome_to_review_and_never_settles_it() {
        let unknown = only(target(StepState::OutcomeUnknown, true, None));
        let j = judge(
            EffectStatus::Refused,
            Some("d1"),
            "rejected",
            None,
            &unknown,
        );
        assert_eq!(j.verdict, ObservationVerdict::Review);
        assert!(j.note.contains("\"rejected\""), "{}", j.note);
        let standing = only(target(StepState::Succeeded, false, Some("d1")));
        let j = judge(
            EffectStatus::Refused,
            Some("d1"),
            "rejected",
            None,
            &standing,
        );
        assert_eq!(j.verdict, ObservationVerdict::Contradicted);
    }
}
