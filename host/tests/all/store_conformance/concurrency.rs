//! Races: several workers and clients on one store at once.

use super::actions::{action_scope, request};
use super::backends::Store;
use super::fixtures::*;
use docket::intent::{StepState, Trigger, WorkflowId, WorkflowState};
use docket::store::{ActionOutcome, AdmitOutcome, StepChange, WorkflowFilter, WorkflowRecord};
use serde_json::json;
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

const CLAIMERS: usize = 4;

/// Asserts the workflow's timeline is numbered 1..=n with no gap or duplicate.
async fn assert_gapless<S: Store>(s: &S, id: &WorkflowId) -> usize {
    let timeline = s.timeline(id, 0, 10_000).await.unwrap();
    let seqs: Vec<u64> = timeline.iter().map(|e| e.seq).collect();
    assert_eq!(
        seqs,
        (1..=seqs.len() as u64).collect::<Vec<_>>(),
        "timeline of {id}"
    );
    seqs.len()
}

pub async fn concurrent_claims_take_each_step_exactly_once<S: Store>(s: S) {
    let steps: Vec<String> = (0..5).map(|i| format!("s{i}")).collect();
    let shape: Vec<(&str, &[&str])> = steps.iter().map(|s| (s.as_str(), &[][..])).collect();
    let mut ids = Vec::new();
    for w in 0..40 {
        ids.push(workflow(&s, &format!("k{w}"), &shape, T0).await);
    }
    let total = ids.len() * steps.len();
    let mut tasks = Vec::new();
    for worker in 0..CLAIMERS {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            loop {
                let batch = claim(&s, &format!("w{worker}"), T0 + 1, 7).await;
                assert!(batch.len() <= 7);
                if batch.is_empty() {
                    return mine;
                }
                mine.extend(batch);
            }
        }));
    }
    let mut seen = HashSet::new();
    let mut tokens = HashSet::new();
    for task in tasks {
        for c in task.await.unwrap() {
            assert_eq!(c.attempt_number, 1, "{c:?}");
            assert!(tokens.insert(c.fence.lease_token.clone()));
            assert!(
                seen.insert((c.fence.workflow_id.clone(), c.fence.step.clone())),
                "{}/{} was claimed twice",
                c.fence.workflow_id,
                c.fence.step
            );
        }
    }
    // Claimers stop at their first empty batch; whatever a racing transaction skipped was
    // claimed by another, so nothing is left.
    assert!(claim(&s, "late", T0 + 1, 100).await.is_empty());
    assert_eq!(seen.len(), total);
    for id in &ids {
        let w = s.workflow(id).await.unwrap().unwrap();
        assert_eq!(w.attempts_used, 5);
        assert!(
            s.steps(id)
                .await
                .unwrap()
                .iter()
                .all(|st| st.state == StepState::Running && st.attempts == 1)
        );
        // Two admission events and one per claim.
        assert_eq!(assert_gapless(&s, id).await, 2 + 5);
    }
}

pub async fn concurrent_workers_run_dependent_steps_exactly_once<S: Store>(s: S) {
    // Diamonds: a and b race to release c.
    let mut ids = Vec::new();
    for w in 0..30 {
        ids.push(
            workflow(
                &s,
                &format!("k{w}"),
                &[("a", &[]), ("b", &[]), ("c", &["a", "b"])],
                T0,
            )
            .await,
        );
    }
    let total = ids.len() * 3;
    // Steps finished so far; a worker that finds nothing to claim waits for it to move (a
    // finished step may have released another).
    let (done, _) = tokio::sync::watch::channel(0usize);
    let mut tasks = Vec::new();
    for worker in 0..CLAIMERS {
        let (s, done, mut finished) = (s.clone(), done.clone(), done.subscribe());
        tasks.push(tokio::spawn(async move {
            let started = Instant::now();
            let mut mine = Vec::new();
            let mut released = Vec::new();
            while *finished.borrow_and_update() < total {
                let batch = claim(&s, &format!("w{worker}"), T0 + 20, 4).await;
                if batch.is_empty() {
                    // Nothing ready now: the others hold what is left.
                    let left = Duration::from_secs(60).saturating_sub(started.elapsed());
                    let moved = tokio::time::timeout(left, finished.changed()).await;
                    assert!(moved.is_ok(), "workers stalled");
                    continue;
                }
                for c in batch {
                    let out = succeed(&s, &c, T0 + 20).await;
                    released.extend(
                        out.released
                            .into_iter()
                            .map(|r| (c.fence.workflow_id.clone(), r)),
                    );
                    mine.push((
                        c.fence.workflow_id.clone(),
                        c.fence.step.clone(),
                        c.attempt_number,
                    ));
                    done.send_modify(|n| *n += 1);
                }
            }
            (mine, released)
        }));
    }
    let mut runs = HashMap::new();
    let mut releases = Vec::new();
    for task in tasks {
        let (mine, released) = task.await.unwrap();
        for (id, step, number) in mine {
            assert_eq!(number, 1);
            *runs.entry((id, step)).or_insert(0) += 1;
        }
        releases.extend(released);
    }
    assert_eq!(runs.len(), total);
    assert!(runs.values().all(|n| *n == 1), "a step ran twice: {runs:?}");
    // Each c was released exactly once, by whichever of a and b finished last.
    releases.sort();
    let mut expected: Vec<_> = ids.iter().map(|id| (id.clone(), "c".to_string())).collect();
    expected.sort();
    assert_eq!(releases, expected);
    for id in &ids {
        let w = s.workflow(id).await.unwrap().unwrap();
        assert_eq!(w.state, WorkflowState::Completed);
        assert_eq!(s.receipts(id).await.unwrap().len(), 3);
        assert_gapless(&s, id).await;
    }
}

pub async fn concurrent_admissions_of_one_key_create_one_workflow<S: Store>(s: S) {
    let steps: &[(&str, &[&str])] = &[("a", &[]), ("b", &["a"])];
    let mut tasks = Vec::new();
    for i in 0..16 {
        let s = s.clone();
        // A few submissions carry another command under the same key.
        let value = if i % 5 == 4 {
            json!({"to": "other"})
        } else {
            json!({"to": "ada"})
        };
        tasks.push(tokio::spawn(async move {
            s.admit(admit(scope("alice", "shared"), value, steps, T0))
                .await
                .unwrap()
        }));
    }
    let mut outcomes = Vec::new();
    for task in tasks {
        outcomes.push(task.await.unwrap());
    }
    let created: Vec<_> = outcomes
        .iter()
        .filter_map(|o| match o {
            AdmitOutcome::Created(w) => Some(w.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(created.len(), 1, "{outcomes:?}");
    let winner = &created[0];
    for o in &outcomes {
        match o {
            AdmitOutcome::Created(_) => {}
            AdmitOutcome::Replayed(w) => assert_eq!(w, winner),
            AdmitOutcome::Conflict { workflow_id } => assert_eq!(workflow_id, &winner.workflow_id),
            AdmitOutcome::KeyFree | AdmitOutcome::Outdated => panic!("nothing was refused"),
        }
    }
    let all = s
        .list_workflows(&WorkflowFilter {
            limit: 100,
            ..WorkflowFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(all, vec![winner.clone()]);
    assert_eq!(s.steps(&winner.workflow_id).await.unwrap().len(), 2);
    assert_eq!(assert_gapless(&s, &winner.workflow_id).await, 2);
}

pub async fn concurrent_reuse_of_an_expired_key_creates_one_workflow<S: Store>(s: S) {
    let steps: &[(&str, &[&str])] = &[("only", &[])];
    let old = create(&s, admit(scope("alice", "k"), json!({"v": 0}), steps, T0)).await;
    let c = claim(&s, "w1", T0, 1).await.remove(0);
    succeed(&s, &c, T0 + 1).await;
    let later = T0 + 1 + 10_000 + 1;
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            s.admit(admit(scope("alice", "k"), json!({"v": 1}), steps, later))
                .await
                .unwrap()
        }));
    }
    let mut created = Vec::new();
    let mut replayed = 0;
    for task in tasks {
        match task.await.unwrap() {
            AdmitOutcome::Created(w) => created.push(w),
            AdmitOutcome::Replayed(_) => replayed += 1,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!((created.len(), replayed), (1, 7));
    assert_ne!(created[0].workflow_id, old.workflow_id);
    let key = s
        .lookup_key(&scope("alice", "k"), later)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(key.workflow_id, created[0].workflow_id);
    let all = s
        .list_workflows(&WorkflowFilter {
            limit: 100,
            ..WorkflowFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(all.len(), 2);
}

pub async fn concurrent_timeline_appends_number_without_gaps<S: Store>(s: S) {
    let names: Vec<String> = (0..8).map(|i| format!("s{i}")).collect();
    let shape: Vec<(&str, &[&str])> = names.iter().map(|s| (s.as_str(), &[][..])).collect();
    let id = workflow(&s, "k", &shape, T0).await;
    let claimed = claim(&s, "w1", T0, 100).await;
    assert_eq!(claimed.len(), 8);
    let mut tasks = Vec::new();
    for c in claimed {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            for n in 2..=4u8 {
                s.checkpoint(checkpoint(&c, n, Default::default(), 3, T0 + n as u64))
                    .await
                    .unwrap();
            }
            s.finish(finish_request(
                &c,
                retry(T0 + 100, Trigger::Retry, None),
                T0 + 5,
            ))
            .await
            .unwrap();
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    // 2 admission events, 8 claims, 8 × 3 checkpoints × 3 events, 8 finishes.
    assert_eq!(assert_gapless(&s, &id).await, 2 + 8 + 72 + 8);
    assert_eq!(
        s.workflow(&id).await.unwrap().unwrap().external_calls_used,
        8
    );
}

pub async fn concurrent_operator_actions_under_one_key_act_once<S: Store>(s: S) {
    let id = workflow(&s, "k", &[("a", &[])], T0).await;
    let c = claim(&s, "w1", T0, 1).await.remove(0);
    end(&s, &c, StepState::OutcomeUnknown, T0 + 1).await;
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (s, id) = (s.clone(), id.clone());
        tasks.push(tokio::spawn(async move {
            s.act(request(
                action_scope(&id, "a", "retry", "once"),
                "d",
                StepState::OutcomeUnknown,
                Ok(StepChange::Ready {
                    trigger: Trigger::ManualRetry,
                    settle_uncertainty: false,
                }),
                T0 + 2,
            ))
            .await
            .unwrap()
        }));
    }
    let mut applied = 0;
    for task in tasks {
        match task.await.unwrap() {
            ActionOutcome::Applied { .. } => applied += 1,
            ActionOutcome::Replayed(r) => assert_eq!(r.request_digest, "d"),
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(applied, 1);
    let operator_events = s
        .timeline(&id, 0, 100)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.text == "Operator: retry")
        .count();
    assert_eq!(operator_events, 1);
    assert_gapless(&s, &id).await;
}

pub async fn operator_actions_race_the_release_of_their_step<S: Store>(s: S) {
    // Finishing a and b releases c while an operator escalates c: the two lock c and the
    // workflow in opposite orders, and every write must still succeed.
    let mut ids = Vec::new();
    for w in 0..20 {
        ids.push(
            workflow(
                &s,
                &format!("k{w}"),
                &[("a", &[]), ("b", &[]), ("c", &["a", "b"])],
                T0,
            )
            .await,
        );
    }
    let claimed = claim(&s, "w1", T0 + 1, 100).await;
    assert_eq!(claimed.len(), 40);
    let mut tasks = Vec::new();
    for c in claimed {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            succeed(&s, &c, T0 + 2).await;
        }));
    }
    let mut actions = Vec::new();
    for id in &ids {
        let (s, id) = (s.clone(), id.clone());
        actions.push(tokio::spawn(async move {
            s.act(request(
                action_scope(&id, "c", "escalate", "e"),
                "d",
                StepState::Pending,
                Ok(StepChange::Escalate(
                    json!({"note": "look", "by": "operator", "at": T0 + 2}),
                )),
                T0 + 2,
            ))
            .await
            .unwrap()
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    for (id, action) in ids.iter().zip(actions) {
        let outcome = action.await.unwrap();
        let c = &s.steps(id).await.unwrap()[2];
        assert_eq!(c.state, StepState::Ready, "c of {id} was released");
        match outcome {
            ActionOutcome::Applied { .. } => assert!(c.escalated.is_some()),
            ActionOutcome::Refused(refusal) => {
                assert_eq!(refusal.code, "step_moved");
                assert!(c.escalated.is_none());
            }
            other => panic!("unexpected {other:?}"),
        }
        assert_gapless(&s, id).await;
    }
}

/// Finishes that arrive together are written together (one transaction on both stores
/// when they queue up), and each is still fenced on its own: a stale token, a recovery of
/// a lease that has not run out and the second of two finishes of one lease are refused
/// and leave no trace, while the finishes beside them commit and release their dependents.
pub async fn finishes_written_together_are_fenced_one_by_one<S: Store>(s: S) {
    use docket::intent::EvidenceKind;
    use docket::store::{StepTransition, StoreError};
    let mut ids = Vec::new();
    for w in 0..32 {
        ids.push(workflow(&s, &format!("k{w}"), &[("a", &[]), ("b", &["a"])], T0).await);
    }
    let claimed = claim(&s, "w1", T0 + 10, 100).await;
    assert_eq!(claimed.len(), ids.len());
    let mut before = HashMap::new();
    for id in &ids {
        before.insert(id.clone(), assert_gapless(&s, id).await);
    }
    let now = T0 + 20;
    let success = |c: &docket::store::Claimed| {
        finish_request(
            c,
            StepTransition::Succeeded(Box::new(receipt(now, "a"))),
            now,
        )
    };
    // Every finish at once, so that they queue up behind each other.
    let mut tasks = Vec::new();
    for (n, c) in claimed.iter().enumerate() {
        let mut requests = Vec::new();
        match n % 4 {
            0 => requests.push(success(c)),
            1 => {
                let mut stale = success(c);
                stale.fence.lease_token = "not-the-token".into();
                requests.push(stale);
            }
            2 => {
                let mut early =
                    finish_request(c, retry(now + 5, Trigger::RecoveryQuery, None), now);
                early.expired_before = Some(now);
                requests.push(early);
            }
            _ => {
                requests.push(success(c));
                requests.push(finish_request(
                    c,
                    StepTransition::Terminal(StepState::FailedTerminal),
                    now,
                ));
            }
        }
        for req in requests {
            let s = s.clone();
            let id = c.fence.workflow_id.clone();
            tasks.push(tokio::spawn(async move { (n, id, s.finish(req).await) }));
        }
    }
    let mut won: HashMap<WorkflowId, usize> = HashMap::new();
    for task in tasks {
        let (n, id, result) = task.await.unwrap();
        match (n % 4, result) {
            (0, Ok(out)) => {
                assert_eq!(out.released, vec!["b".to_string()], "{id}");
                *won.entry(id).or_default() += 1;
            }
            (1 | 2, Err(StoreError::LeaseLost { workflow_id, step })) => {
                assert_eq!((workflow_id, step.as_str()), (id, "a"));
            }
            (3, Ok(_)) => *won.entry(id).or_default() += 1,
            (3, Err(StoreError::LeaseLost { .. })) => {}
            (kind, other) => panic!("finish of kind {kind} on {id}: {other:?}"),
        }
    }
    // Kinds go by claim order, which need not be the order of creation.
    let kind_of: HashMap<WorkflowId, usize> = claimed
        .iter()
        .enumerate()
        .map(|(n, c)| (c.fence.workflow_id.clone(), n % 4))
        .collect();
    for id in &ids {
        let steps = s.steps(id).await.unwrap();
        let state = |name: &str| steps.iter().find(|x| x.step == name).unwrap().state;
        let receipts = s.receipts(id).await.unwrap();
        let length = assert_gapless(&s, id).await;
        match kind_of[id] {
            1 | 2 => {
                assert_eq!(
                    (state("a"), state("b")),
                    (StepState::Running, StepState::Pending)
                );
                assert!(receipts.is_empty(), "{id}: {receipts:?}");
                assert_eq!(
                    length, before[id],
                    "a refused finish wrote to {id}'s timeline"
                );
            }
            kind => {
                assert_eq!(
                    won.get(id),
                    Some(&1),
                    "exactly one finish of {id}'s lease wins"
                );
                if state("a") == StepState::Succeeded {
                    assert_eq!(state("b"), StepState::Ready);
                    assert_eq!(receipts.len(), 1);
                    assert_eq!(receipts[0].evidence_kind, EvidenceKind::Response);
                } else {
                    assert_eq!(kind, 3, "{id}");
                    assert_eq!(
                        (state("a"), state("b")),
                        (StepState::FailedTerminal, StepState::Pending)
                    );
                    assert!(receipts.is_empty());
                }
                assert!(length > before[id]);
            }
        }
    }
}

/// PostgreSQL writes a host's finishes in batches: one that fails there (here a receipt
/// whose id is taken) fails alone, and the finishes it was batched with are written.
pub async fn a_finish_that_fails_in_a_batch_fails_alone<S: Store>(s: S) {
    use docket::store::{StepTransition, StoreError};
    let mut ids = Vec::new();
    for w in 0..12 {
        ids.push(workflow(&s, &format!("k{w}"), &[("a", &[])], T0).await);
    }
    let claimed = claim(&s, "w1", T0 + 10, 100).await;
    let now = T0 + 20;
    let shared = receipt(now, "a");
    let mut tasks = Vec::new();
    for (n, c) in claimed.iter().enumerate() {
        // The first two carry the same receipt id.
        let r = if n < 2 {
            shared.clone()
        } else {
            receipt(now, "a")
        };
        let req = finish_request(c, StepTransition::Succeeded(Box::new(r)), now);
        let s = s.clone();
        tasks.push(tokio::spawn(async move { (n, s.finish(req).await) }));
    }
    let mut refused = 0;
    for task in tasks {
        match task.await.unwrap() {
            (0 | 1, Err(StoreError::Backend { .. })) => refused += 1,
            (_, Ok(out)) => assert_eq!(out.workflow_state, WorkflowState::Completed),
            (n, other) => panic!("finish {n}: {other:?}"),
        }
    }
    assert_eq!(
        refused, 1,
        "one of the two finishes sharing a receipt id is refused"
    );
    let mut completed = 0;
    for id in &ids {
        if s.workflow(id).await.unwrap().unwrap().state == WorkflowState::Completed {
            completed += 1;
        }
        assert_gapless(&s, id).await;
    }
    assert_eq!(completed, ids.len() - 1);
}

/// Many admissions at once (which a store may write together): each gets its own answer —
/// one workflow per key, replays for the rest — and one the database refuses fails alone.
pub async fn many_admissions_at_once_each_get_their_own_answer<S: Store>(s: S) {
    let steps: &[(&str, &[&str])] = &[("a", &[]), ("b", &["a"])];
    let mut tasks = Vec::new();
    let keys = (0..40)
        .map(|i| format!("own-{i}"))
        .chain((0..8).map(|i| format!("shared-{}", i % 4)))
        // PostgreSQL refuses a NUL in text; SQLite stores it.
        .chain(["odd\0one".to_string()]);
    for key in keys {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            let req = admit(scope("alice", &key), json!({"to": "ada"}), steps, T0);
            (key, s.admit(req).await)
        }));
    }
    let mut created: Vec<(String, WorkflowRecord)> = Vec::new();
    let mut replayed: Vec<(String, WorkflowRecord)> = Vec::new();
    let mut odd_created = false;
    for task in tasks {
        match task.await.unwrap() {
            (key, Ok(AdmitOutcome::Created(w))) => {
                odd_created |= key.starts_with("odd");
                created.push((key, w));
            }
            (key, Ok(AdmitOutcome::Replayed(w))) => replayed.push((key, w)),
            (key, Err(e)) => assert!(key.starts_with("odd"), "{key}: {e}"),
            (key, Ok(other)) => panic!("{key}: unexpected {other:?}"),
        }
    }
    assert_eq!(
        created.len(),
        40 + 4 + usize::from(odd_created),
        "{created:?}"
    );
    assert_eq!(replayed.len(), 4);
    for (key, w) in &replayed {
        let winner = &created.iter().find(|(k, _)| k == key).unwrap().1;
        assert_eq!(w, winner, "{key}");
    }
    for (key, w) in &created {
        assert_eq!(w.idempotency_key, *key);
        assert_eq!(s.steps(&w.workflow_id).await.unwrap().len(), 2, "{key}");
        assert_eq!(assert_gapless(&s, &w.workflow_id).await, 2, "{key}");
        let k = s
            .lookup_key(&scope("alice", key), T0)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(k.workflow_id, w.workflow_id);
    }
    assert_eq!(first_workflows(&s, 100).await.len(), created.len());
}
