//! How one host's claims are shared between subjects: weighted round-robin over the
//! subjects that have ready work, oldest ready first within each.
//!
//! Each subject has a virtual time that every step claimed for it advances by
//! `1 / weight`; a claim goes to the subject furthest behind (ties to the one whose oldest
//! ready step waited longest). A subject that comes back after being idle resumes at the
//! virtual time of the last claim handed out, so idleness is not saved up as a later
//! burst. A
//! subject submitting ten thousand intents therefore takes its share of the claims, not
//! all of them, and a subject with weight 2 takes twice the share of one with weight 1.
//!
//! The shares are per host (the state lives in memory and is not coordinated): hosts on
//! one database each share their own claims the same way, so the whole is fair too.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, PoisonError};

/// Subjects remembered at most; beyond it, only those with ready work are kept.
const REMEMBERED: usize = 4096;

/// Subjects a claim shares between at most (the first by name): a bound on its reads.
pub(crate) const SUBJECTS_PER_CLAIM: i64 = 1024;

/// The subjects with steps ready at `$1` (at most `$2`), each with when its
/// longest-waiting one became ready. A skip along the index of ready steps by subject: one
/// probe per subject, never a read of every ready step (a burst of ten thousand is one
/// subject's). Both databases run it as written.
pub(crate) const READY_SUBJECTS: &str = "WITH RECURSIVE heads(subject) AS (
        SELECT (SELECT min(subject) FROM steps WHERE state IN ('ready', 'failed_retryable'))
        UNION ALL
        SELECT (SELECT min(s.subject) FROM steps s
                WHERE s.state IN ('ready', 'failed_retryable') AND s.subject > heads.subject)
        FROM heads WHERE heads.subject IS NOT NULL)
    SELECT subject, oldest FROM (
        SELECT subject,
               (SELECT min(s.ready_at) FROM steps s
                WHERE s.state IN ('ready', 'failed_retryable') AND s.subject = heads.subject)
                   AS oldest
        FROM heads WHERE subject IS NOT NULL) r
    WHERE oldest <= $1
    LIMIT $2";

/// A subject with ready work, as a claim sees it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ReadySubject {
    pub subject: String,
    /// When its longest-waiting ready step became ready.
    pub oldest: i64,
}

/// One host's shares of claims between subjects.
#[derive(Debug, Default)]
pub struct FairShare {
    weights: Mutex<BTreeMap<String, u32>>,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Each subject's virtual time.
    virtual_time: HashMap<String, f64>,
    /// The start of the last claim handed out: where a returning subject resumes.
    now: f64,
}

impl FairShare {
    /// Sets the subjects' weights (`[fairness] weights`); a subject not named weighs 1.
    pub fn set_weights(&self, weights: BTreeMap<String, u32>) {
        *self.weights.lock().unwrap_or_else(PoisonError::into_inner) = weights;
    }

    fn weight(weights: &BTreeMap<String, u32>, subject: &str) -> f64 {
        f64::from(weights.get(subject).copied().unwrap_or(1).max(1))
    }

    /// How many of `limit` claims each subject of `ready` gets, in the order they are
    /// handed out; each subject is charged for them now ([`FairShare::unused`] gives back
    /// what it could not take).
    pub(crate) fn plan(&self, ready: &[ReadySubject], limit: usize) -> Vec<(String, usize)> {
        let weights = self
            .weights
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let floor = state.now;
        let mut times: Vec<f64> = ready
            .iter()
            .map(|r| {
                let t = state.virtual_time.get(&r.subject).copied().unwrap_or(floor);
                t.max(floor)
            })
            .collect();
        let mut plan: Vec<(String, usize)> = Vec::new();
        for _ in 0..limit {
            let Some(i) = (0..ready.len()).min_by(|&a, &b| {
                times[a]
                    .total_cmp(&times[b])
                    .then(ready[a].oldest.cmp(&ready[b].oldest))
            }) else {
                break;
            };
            let subject = &ready[i].subject;
            state.now = state.now.max(times[i]);
            times[i] += 1.0 / Self::weight(&weights, subject);
            match plan.iter_mut().find(|(s, _)| s == subject) {
                Some((_, n)) => *n += 1,
                None => plan.push((subject.clone(), 1)),
            }
        }
        if state.virtual_time.len() > REMEMBERED {
            state
                .virtual_time
                .retain(|s, _| ready.iter().any(|r| &r.subject == s));
        }
        for (r, t) in ready.iter().zip(times) {
            state.virtual_time.insert(r.subject.clone(), t);
        }
        plan
    }

    /// Gives back `n` claims `subject` was planned but did not take (its ready steps were
    /// fewer, or another host took them).
    pub(crate) fn unused(&self, subject: &str, n: usize) {
        if n == 0 {
            return;
        }
        let weight = Self::weight(
            &self.weights.lock().unwrap_or_else(PoisonError::into_inner),
            subject,
        );
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(t) = state.virtual_time.get_mut(subject) {
            *t -= n as f64 / weight;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ready(subjects: &[(&str, i64)]) -> Vec<ReadySubject> {
        subjects
            .iter()
            .map(|(s, oldest)| ReadySubject {
                subject: s.to_string(),
                oldest: *oldest,
            })
            .collect()
    }

    /// The subjects of `claims` claims of one step each.
    fn one_at_a_time(share: &FairShare, subjects: &[(&str, i64)], claims: usize) -> String {
        let ready = ready(subjects);
        (0..claims)
            .map(|_| share.plan(&ready, 1)[0].0.clone())
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn equal_weights_take_turns_the_longest_waiting_first() {
        let share = FairShare::default();
        assert_eq!(
            one_at_a_time(&share, &[("a", 1), ("b", 5)], 6),
            "a b a b a b"
        );
        // Within one claim too.
        let share = FairShare::default();
        assert_eq!(
            share.plan(&ready(&[("a", 1), ("b", 5), ("c", 3)]), 7),
            vec![("a".into(), 3), ("c".into(), 2), ("b".into(), 2)]
        );
    }

    #[test]
    fn a_weight_of_two_takes_twice_the_share() {
        let share = FairShare::default();
        share.set_weights(BTreeMap::from([("team-a".into(), 2)]));
        assert_eq!(
            one_at_a_time(&share, &[("team-a", 1), ("team-b", 2)], 9),
            "team-a team-b team-a team-a team-b team-a team-a team-b team-a"
        );
    }

    #[test]
    fn an_idle_subject_does_not_save_up_its_turns() {
        let share = FairShare::default();
        // a runs alone for a long while...
        one_at_a_time(&share, &[("a", 1)], 100);
        // ...then b arrives: it takes turns with a, not a hundred claims in a row.
        assert_eq!(
            one_at_a_time(&share, &[("a", 1), ("b", 200)], 6),
            "b a b a b a"
        );
    }

    #[test]
    fn claims_a_subject_could_not_take_are_given_back() {
        let share = FairShare::default();
        let both = ready(&[("a", 1), ("b", 2)]);
        assert_eq!(share.plan(&both, 2), vec![("a".into(), 1), ("b".into(), 1)]);
        // b had nothing ready after all: its turn is not spent.
        share.unused("b", 1);
        assert_eq!(share.plan(&both, 1), vec![("b".into(), 1)]);
    }
}
