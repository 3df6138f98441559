//! What one claim takes, decided once for both stores: first the steps of each gated
//! adapter with room (at most its room), then the rest shared between the subjects with
//! ready work ([`FairShare`]), then any turns they could not use for the longest-waiting
//! step of anyone. A backend runs each [`Pick`] the plan hands out and says how many steps
//! it took.

use super::fairness::{FairShare, ReadySubject};
use super::gates::Rooms;

/// Up to `n` of the longest-waiting ready steps: of `adapter` alone, or of `subject`
/// alone, or of anyone; never of an adapter in `excluded`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Pick {
    pub adapter: Option<String>,
    pub subject: Option<String>,
    pub n: usize,
}

impl Pick {
    /// The pick's conditions after the ready ones: its adapter's or subject's, then (when
    /// `excluding`, and the pick names no adapter) none of the excluded adapters, as the
    /// dialect writes a value not in a list (`none_of`). Its parameters are numbered from
    /// `first` as the dialect writes them (`param`), in that order.
    pub(crate) fn filter(
        &self,
        excluding: bool,
        first: usize,
        param: impl Fn(usize) -> String,
        none_of: impl Fn(String) -> String,
    ) -> String {
        let mut sql = String::new();
        let mut n = first;
        let named = match (&self.adapter, &self.subject) {
            (Some(_), _) => Some("adapter"),
            (None, Some(_)) => Some("subject"),
            (None, None) => None,
        };
        if let Some(column) = named {
            sql.push_str(&format!(" AND {column} = {}", param(n)));
            n += 1;
        }
        if excluding && self.adapter.is_none() {
            sql.push_str(&format!(" AND (adapter IS NULL OR {})", none_of(param(n))));
        }
        sql
    }
}

#[derive(Debug)]
enum Stage {
    Adapters,
    Subjects,
    Anyone,
    Done,
}

/// One claim's picks, handed out one at a time.
#[derive(Debug)]
pub(crate) struct ClaimPlan<'f> {
    fair: &'f FairShare,
    ready: Vec<ReadySubject>,
    rooms: Rooms,
    limit: usize,
    taken: usize,
    stage: Stage,
    queued: std::collections::VecDeque<Pick>,
}

impl<'f> ClaimPlan<'f> {
    /// A claim of up to `limit` steps with the subjects of `ready` to share between and
    /// the adapter gates of `rooms`.
    pub(crate) fn new(
        fair: &'f FairShare,
        ready: Vec<ReadySubject>,
        rooms: Rooms,
        limit: usize,
    ) -> Self {
        Self {
            fair,
            ready,
            rooms,
            limit,
            taken: 0,
            stage: Stage::Adapters,
            queued: Default::default(),
        }
    }

    /// The adapters the picks of subjects and of anyone leave alone.
    pub(crate) fn excluded(&self) -> &[String] {
        &self.rooms.gated
    }

    /// The next pick to run, `None` once the claim is full or nothing is left to try.
    pub(crate) fn next(&mut self) -> Option<Pick> {
        loop {
            let left = self.limit.saturating_sub(self.taken);
            if left == 0 {
                return None;
            }
            if let Some(mut p) = self.queued.pop_front() {
                if p.adapter.is_some() {
                    p.n = p.n.min(left);
                }
                return Some(p);
            }
            match self.stage {
                Stage::Adapters => {
                    self.queued = self
                        .rooms
                        .open
                        .iter()
                        .map(|(adapter, n)| Pick {
                            adapter: Some(adapter.clone()),
                            subject: None,
                            n: *n,
                        })
                        .collect();
                    self.stage = Stage::Subjects;
                }
                Stage::Subjects => {
                    // One subject takes the plain oldest-first pick below.
                    if self.ready.len() > 1 {
                        self.queued = self
                            .fair
                            .plan(&self.ready, left)
                            .into_iter()
                            .map(|(subject, n)| Pick {
                                adapter: None,
                                subject: Some(subject),
                                n,
                            })
                            .collect();
                    }
                    self.stage = Stage::Anyone;
                }
                Stage::Anyone => {
                    self.stage = Stage::Done;
                    return Some(Pick {
                        adapter: None,
                        subject: None,
                        n: left,
                    });
                }
                Stage::Done => return None,
            }
        }
    }

    /// `pick` took `n` steps: a subject's turns it could not use are given back.
    pub(crate) fn took(&mut self, pick: &Pick, n: usize) {
        self.taken += n;
        if let Some(subject) = &pick.subject {
            self.fair.unused(subject, pick.n.saturating_sub(n));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subjects(names: &[&str]) -> Vec<ReadySubject> {
        names
            .iter()
            .enumerate()
            .map(|(i, s)| ReadySubject {
                subject: s.to_string(),
                oldest: i as i64,
            })
            .collect()
    }

    /// Runs a plan where each pick takes what `takes` says (at most what it asks).
    fn run(plan: &mut ClaimPlan<'_>, takes: impl Fn(&Pick) -> usize) -> Vec<(Pick, usize)> {
        let mut seen = Vec::new();
        while let Some(p) = plan.next() {
            let n = takes(&p).min(p.n);
            plan.took(&p, n);
            seen.push((p, n));
        }
        seen
    }

    #[test]
    fn one_subject_and_no_gates_is_one_pick_of_anyone() {
        let fair = FairShare::default();
        let mut plan = ClaimPlan::new(&fair, subjects(&["a"]), Rooms::default(), 10);
        let seen = run(&mut plan, |p| p.n);
        assert_eq!(seen.len(), 1);
        assert_eq!(
            seen[0].0,
            Pick {
                adapter: None,
                subject: None,
                n: 10
            }
        );
        assert!(plan.excluded().is_empty());
    }

    #[test]
    fn gated_adapters_take_their_room_first_and_the_rest_leave_them_alone() {
        let fair = FairShare::default();
        let rooms = Rooms {
            open: vec![("mail".into(), 3)],
            gated: vec!["mail".into(), "sms".into()],
        };
        let mut plan = ClaimPlan::new(&fair, subjects(&["a", "b"]), rooms, 10);
        assert_eq!(plan.excluded(), ["mail".to_string(), "sms".to_string()]);
        // mail has 2 ready steps; a has plenty, b one.
        let seen = run(&mut plan, |p| match (&p.adapter, &p.subject) {
            (Some(_), _) => 2,
            (None, Some(s)) if s == "b" => 1,
            _ => p.n,
        });
        let asked: Vec<String> = seen
            .iter()
            .map(|(p, n)| {
                let who = p
                    .adapter
                    .clone()
                    .or(p.subject.clone())
                    .unwrap_or("*".into());
                format!("{who}:{}/{n}", p.n)
            })
            .collect();
        // mail's room of 3 took 2; a and b share the other 8, b gives back 3 of its 4; the
        // last pick takes what is left from anyone.
        assert_eq!(asked, ["mail:3/2", "a:4/4", "b:4/1", "*:3/3"]);
    }

    #[test]
    fn a_pick_s_conditions_number_their_parameters_in_order() {
        let pg = |p: &Pick, excluding| {
            p.filter(
                excluding,
                5,
                |n| format!("${n}"),
                |v| format!("adapter <> ALL({v})"),
            )
        };
        let of = |adapter: Option<&str>, subject: Option<&str>| Pick {
            adapter: adapter.map(Into::into),
            subject: subject.map(Into::into),
            n: 1,
        };
        assert_eq!(pg(&of(None, None), false), "");
        assert_eq!(
            pg(&of(None, Some("a")), true),
            " AND subject = $5 AND (adapter IS NULL OR adapter <> ALL($6))"
        );
        assert_eq!(
            pg(&of(None, None), true),
            " AND (adapter IS NULL OR adapter <> ALL($5))"
        );
        // A gated adapter's own pick is not excluded from itself.
        assert_eq!(pg(&of(Some("mail"), None), true), " AND adapter = $5");
    }

    #[test]
    fn a_full_adapter_room_ends_the_claim() {
        let fair = FairShare::default();
        let rooms = Rooms {
            open: vec![("mail".into(), 5)],
            gated: vec!["mail".into()],
        };
        let mut plan = ClaimPlan::new(&fair, subjects(&["a"]), rooms, 2);
        let seen = run(&mut plan, |p| p.n);
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0].0.n, 2, "a pick never asks beyond the claim's limit");
    }
}
