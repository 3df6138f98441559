//! The scheduler's operations: claims, fenced writes, release of dependents, recovery.

use super::backends::Store;
use super::fixtures::*;
use docket::intent::Millis;
use docket::intent::WorkflowId;
use docket::intent::{AttemptOutcome, EventKind, NewEvent, StepState, Trigger, WorkflowState};
use docket::store::{
    AdapterGate, AdapterPause, AttemptFacts, AttemptResult, Claimed, LateEvidence, RenewRequest,
    StepTransition, StoreError,
};
use serde_json::json;

/// `a` one-step workflows of team-a, then `b` of team-b, admitted a millisecond apart from
/// `at`; each remembered in `subjects` with its subject and its place in its round.
async fn one_step_workflows<S: Store>(
    s: &S,
    subjects: &mut std::collections::HashMap<docket::intent::WorkflowId, (&'static str, usize)>,
    round: &str,
    a: usize,
    b: usize,
    at: Millis,
) {
    let each = std::iter::repeat_n("team-a", a).chain(std::iter::repeat_n("team-b", b));
    for (i, subject) in each.enumerate() {
        let key = format!("{round}-{subject}-{i}");
        let w = create(
            s,
            admit(
                scope(subject, &key),
                json!({"key": key}),
                &[("only", &[])],
                at + i as u64,
            ),
        )
        .await;
        subjects.insert(w.workflow_id, (subject, i));
    }
}

/// Six intents of team-a (weight 2), then two of team-b: claims alternate by weight rather
/// than taking team-a's burst first, oldest first within each subject; once team-b has
/// nothing ready, team-a takes every claim. A claim of several steps shares the same way.
pub async fn claims_are_shared_between_subjects_by_weight<S: Store>(s: S) {
    s.share_claims(std::collections::BTreeMap::from([(
        "team-a".to_string(),
        2,
    )]));
    let mut subjects = std::collections::HashMap::new();
    one_step_workflows(&s, &mut subjects, "first", 6, 2, T0).await;
    let mut order = Vec::new();
    for _ in 0..8 {
        let claimed = claim(&s, "w1", T0 + 100, 1).await;
        assert_eq!(claimed.len(), 1);
        order.push(subjects[&claimed[0].fence.workflow_id]);
    }
    let names: Vec<&str> = order.iter().map(|(s, _)| *s).collect();
    assert_eq!(
        names,
        [
            "team-a", "team-b", "team-a", "team-a", "team-b", "team-a", "team-a", "team-a"
        ]
    );
    let team_a: Vec<usize> = order
        .iter()
        .filter(|(s, _)| *s == "team-a")
        .map(|(_, i)| *i)
        .collect();
    assert_eq!(team_a, [0, 1, 2, 3, 4, 5], "oldest first within a subject");

    // Eight more of each, claimed four at a time: each claim shares by weight too.
    one_step_workflows(&s, &mut subjects, "again", 8, 8, T0 + 200).await;
    let claimed = claim(&s, "w1", T0 + 300, 6).await;
    let b = claimed
        .iter()
        .filter(|c| subjects[&c.fence.workflow_id].0 == "team-b")
        .count();
    assert_eq!(
        (claimed.len() - b, b),
        (4, 2),
        "two of team-a's for one of team-b's"
    );
}

/// A one-step workflow whose step calls `adapter` (`None`: a handler), ready at `at`.
async fn calling<S: Store>(s: &S, key: &str, adapter: Option<&str>, at: Millis) -> WorkflowId {
    let mut req = admit(
        scope("team-a", key),
        json!({"key": key}),
        &[("only", &[])],
        at,
    );
    req.create.as_mut().unwrap().steps[0].adapter = adapter.map(str::to_string);
    create(s, req).await.workflow_id
}

fn mail(max_in_flight: Option<u32>, rate_room: Option<u32>) -> Vec<AdapterGate> {
    vec![AdapterGate {
        adapter: "mail".into(),
        max_in_flight,
        rate_room,
    }]
}

/// Hosts count one adapter's attempts in flight together: each claims its steps only while
/// the count is under its own limit (the oldest first, before other work), a host with a
/// larger limit claims up to it, and a host's rate room bounds its own claims. A pause
/// holds every host's claims of the adapter, whatever their configuration, until it ends;
/// other work goes on meanwhile.
pub async fn an_adapter_is_claimed_under_its_limit_on_every_host_and_paused_for_all<S: Store>(
    s: S,
) {
    let mut mails = Vec::new();
    for i in 0..4 {
        mails.push(calling(&s, &format!("mail-{i}"), Some("mail"), T0 + i).await);
    }
    let plain = [
        calling(&s, "plain-0", None, T0 + 10).await,
        calling(&s, "plain-1", Some("sms"), T0 + 11).await,
    ];
    let ids = |c: &[Claimed]| -> Vec<WorkflowId> {
        let mut v: Vec<WorkflowId> = c.iter().map(|c| c.fence.workflow_id.clone()).collect();
        v.sort();
        v
    };
    let sorted = |v: &[WorkflowId]| {
        let mut v = v.to_vec();
        v.sort();
        v
    };

    // Two of mail's four (the oldest), and everything else.
    let first = claim_gated(&s, "h1", T0 + 20, 10, mail(Some(2), None)).await;
    let mut expect = vec![mails[0].clone(), mails[1].clone()];
    expect.extend(plain.iter().cloned());
    assert_eq!(ids(&first), sorted(&expect));
    assert!(first.iter().any(|c| c.adapter.as_deref() == Some("mail")));
    let states = s.adapter_states(T0 + 20).await.unwrap();
    let flying = |a: &str| states.iter().find(|s| s.adapter == a).map(|s| s.in_flight);
    assert_eq!((flying("mail"), flying("sms")), (Some(2), Some(1)));

    // Another host under the same limit finds no room, until one ends.
    assert!(
        claim_gated(&s, "h2", T0 + 21, 10, mail(Some(2), None))
            .await
            .is_empty()
    );
    let ended = first
        .iter()
        .find(|c| c.fence.workflow_id == mails[0])
        .unwrap();
    succeed(&s, ended, T0 + 22).await;
    let second = claim_gated(&s, "h2", T0 + 23, 10, mail(Some(2), None)).await;
    assert_eq!(ids(&second), vec![mails[2].clone()]);
    // Hosts that disagree: one configured for three claims up to three.
    assert!(
        claim_gated(&s, "h2", T0 + 24, 10, mail(Some(2), None))
            .await
            .is_empty()
    );
    let third = claim_gated(&s, "h3", T0 + 24, 10, mail(Some(3), None)).await;
    assert_eq!(ids(&third), vec![mails[3].clone()]);

    // A rate's room bounds this host's claims of the adapter.
    let more = [
        calling(&s, "mail-4", Some("mail"), T0 + 30).await,
        calling(&s, "mail-5", Some("mail"), T0 + 31).await,
    ];
    assert!(
        claim_gated(&s, "h1", T0 + 32, 10, mail(None, Some(0)))
            .await
            .is_empty()
    );
    let paced = claim_gated(&s, "h1", T0 + 32, 10, mail(None, Some(1))).await;
    assert_eq!(ids(&paced), vec![more[0].clone()]);

    // A pause holds every host, configured or not, and the pause's end is due.
    let pause = |until: Millis, reason: &str| AdapterPause {
        adapter: "mail".into(),
        until,
        cause: "rate_limited".into(),
        reason: reason.into(),
        host: "h1".into(),
        at: T0 + 40,
    };
    s.pause_adapter(pause(T0 + 2_040, "429 retry after 2 s"))
        .await
        .unwrap();
    // An earlier end never shortens it.
    s.pause_adapter(pause(T0 + 1_040, "429 retry after 1 s"))
        .await
        .unwrap();
    let other = calling(&s, "plain-2", None, T0 + 41).await;
    let held = claim(&s, "h4", T0 + 2_039, 10).await;
    assert_eq!(ids(&held), vec![other], "only work of other adapters");
    assert_eq!(s.next_due(T0 + 2_039).await.unwrap(), Some(T0 + 2_040));
    let states = s.adapter_states(T0 + 2_039).await.unwrap();
    let paused = states.iter().find(|s| s.adapter == "mail").unwrap();
    assert_eq!(paused.in_flight, 4);
    assert_eq!(
        paused.pause.as_ref().map(|p| (p.until, p.reason.as_str())),
        Some((T0 + 2_040, "429 retry after 2 s"))
    );
    let resumed = claim(&s, "h4", T0 + 2_040, 10).await;
    assert_eq!(ids(&resumed), vec![more[1].clone()]);
    let states = s.adapter_states(T0 + 2_040).await.unwrap();
    assert!(states.iter().all(|s| s.pause.is_none()), "{states:?}");
}

pub async fn claims_respect_limit_readiness_and_carry_context<S: Store>(s: S) {
    let a = workflow(&s, "a", &[("render", &[]), ("deliver", &["render"])], T0).await;
    let b = workflow(&s, "b", &[("only", &[])], T0 + 1).await;
    let later = workflow(&s, "later", &[("only", &[])], T0 + 100).await;

    // The batch limit holds, and the oldest ready step goes first.
    let first = claim(&s, "w1", T0 + 50, 1).await;
    assert_eq!(first.len(), 1);
    assert_eq!(
        (&first[0].fence.workflow_id, first[0].fence.step.as_str()),
        (&a, "render")
    );
    let second = claim(&s, "w1", T0 + 50, 10).await;
    assert_eq!(second.len(), 1, "only b's step is ready at T0+50");
    assert_eq!(second[0].fence.workflow_id, b);
    assert!(claim(&s, "w1", T0 + 99, 10).await.is_empty());
    let third = claim(&s, "w2", T0 + 100, 10).await;
    assert_eq!(third.len(), 1);
    assert_eq!(third[0].fence.workflow_id, later);

    let c = &first[0];
    assert_eq!((c.attempt_number, c.trigger), (1, Trigger::Initial));
    assert_eq!((c.workflow.as_str(), c.definition_version), ("letters", 1));
    assert_eq!(c.lease_expires_at, T0 + 50 + LEASE);
    assert_eq!(c.deadline_at, T0 + 3_600_000);
    assert_eq!(
        (c.attempts_used, c.external_calls_used, c.runtime_used_ms),
        (1, 0, 0)
    );
    assert_eq!(c.uncertain_since, None);
    assert_eq!(*c.context.input, json!({"key": "a"}));
    assert!(c.context.receipts.is_empty());
    assert!(!c.fence.lease_token.is_empty());
    assert_ne!(c.fence.lease_token, second[0].fence.lease_token);

    let step = &s.steps(&a).await.unwrap()[0];
    assert_eq!(step.state, StepState::Running);
    assert_eq!(step.attempts, 1);
    assert_eq!(step.lease_owner.as_deref(), Some("w1"));
    assert_eq!(step.lease_expires_at, Some(T0 + 50 + LEASE));
    let attempt = &s.attempts(&a, "render", 0, 10).await.unwrap()[0];
    assert_eq!(attempt.attempt_id, c.attempt_id);
    assert_eq!(
        (attempt.checkpoint, attempt.outcome),
        (1, AttemptOutcome::InProgress)
    );
    assert_eq!(
        (attempt.trigger, attempt.started_at),
        (Trigger::Initial, T0 + 50)
    );
    assert_eq!(attempt.log, json!([]));
    let started = s.timeline(&a, 2, 10).await.unwrap();
    assert_eq!(started.len(), 1);
    assert_eq!(started[0].text, "Attempt 1 started (initial) by w1");
    assert_eq!(started[0].kind, EventKind::Action);
    assert_eq!(
        started[0].attempt_id.as_deref(),
        Some(c.attempt_id.as_str())
    );
    assert_eq!(s.workflow(&a).await.unwrap().unwrap().attempts_used, 1);

    // The next step's claim carries the receipts so far.
    let done = succeed(&s, c, T0 + 60).await;
    assert_eq!(done.released, vec!["deliver".to_string()]);
    let next = claim(&s, "w1", T0 + 60, 10).await;
    assert_eq!(next.len(), 1);
    assert_eq!(next[0].fence.step, "deliver");
    assert_eq!(next[0].attempts_used, 2);
    let receipts = &next[0].context.receipts;
    assert_eq!(receipts.len(), 1);
    assert_eq!(receipts[0].step, "render");
    assert_eq!(receipts[0].attempt_id.as_ref(), Some(&c.attempt_id));
    assert_eq!(receipts[0].output, json!({"step": "render"}));
    assert_eq!(receipts, &s.receipts(&a).await.unwrap());
}

pub async fn a_claim_carries_only_the_receipts_its_step_reads<S: Store>(s: S) {
    // a → b → c → d: c reads a's receipt only, d says nothing (reads every receipt), and
    // b reads none.
    let mut req = admit(
        scope("alice", "reads"),
        json!({"key": "reads"}),
        &[("a", &[]), ("b", &["a"]), ("c", &["b"]), ("d", &["c"])],
        T0,
    );
    for step in &mut req.create.as_mut().unwrap().steps {
        step.reads = match step.id.as_str() {
            "b" => Some(vec![]),
            "c" => Some(vec!["a".to_string()]),
            _ => None,
        };
    }
    let id = create(&s, req).await.workflow_id;
    let mut now = T0;
    let mut seen = Vec::new();
    for _ in 0..4 {
        let c = claim(&s, "w1", now, 10).await.remove(0);
        let steps: Vec<String> = c.context.receipts.iter().map(|r| r.step.clone()).collect();
        seen.push((c.fence.step.clone(), steps));
        now += 10;
        succeed(&s, &c, now).await;
    }
    let expect = |step: &str, reads: &[&str]| {
        (
            step.to_string(),
            reads.iter().map(|r| r.to_string()).collect::<Vec<_>>(),
        )
    };
    assert_eq!(
        seen,
        vec![
            expect("a", &[]),
            expect("b", &[]),
            expect("c", &["a"]),
            expect("d", &["a", "b", "c"]),
        ]
    );
    assert_eq!(
        s.workflow(&id).await.unwrap().unwrap().state,
        WorkflowState::Completed
    );
}

pub async fn fenced_writes_refuse_a_stale_lease<S: Store>(s: S) {
    let id = workflow(&s, "k", &[("only", &[])], T0).await;
    let c = claim(&s, "w1", T0, 10).await.remove(0);
    let lost = |r: Result<_, StoreError>| match r {
        Err(StoreError::LeaseLost { workflow_id, step }) => {
            assert_eq!((workflow_id, step.as_str()), (id.clone(), "only"))
        }
        other => panic!("expected LeaseLost, got {other:?}"),
    };

    s.renew(RenewRequest {
        fence: c.fence.clone(),
        now: T0 + 500,
        lease_ms: LEASE,
    })
    .await
    .unwrap();
    assert_eq!(
        s.steps(&id).await.unwrap()[0].lease_expires_at,
        Some(T0 + 1_500)
    );

    let mut stale = c.clone();
    stale.fence.lease_token = "not-the-token".into();
    lost(
        s.renew(RenewRequest {
            fence: stale.fence.clone(),
            now: T0 + 600,
            lease_ms: LEASE,
        })
        .await,
    );
    lost(
        s.checkpoint(checkpoint(&stale, 2, AttemptFacts::default(), 1, T0 + 600))
            .await,
    );
    lost(
        s.finish(finish_request(
            &stale,
            StepTransition::Terminal(StepState::FailedTerminal),
            T0 + 600,
        ))
        .await
        .map(|_| ()),
    );
    // Recovery may not take over a lease that has not run out.
    let mut recovery = finish_request(&c, retry(T0 + 700, Trigger::RecoveryQuery, None), T0 + 600);
    recovery.expired_before = Some(T0 + 600);
    lost(s.finish(recovery).await.map(|_| ()));
    // None of the refused writes left a trace.
    assert_eq!(s.timeline(&id, 0, 100).await.unwrap().len(), 3);
    assert_eq!(s.steps(&id).await.unwrap()[0].state, StepState::Running);

    s.checkpoint(checkpoint(
        &c,
        3,
        facts("sent", AttemptOutcome::InProgress),
        1,
        T0 + 700,
    ))
    .await
    .unwrap();
    let attempt = &s.attempts(&id, "only", 0, 10).await.unwrap()[0];
    assert_eq!(attempt.checkpoint, 3);
    let provenance = attempt
        .provenance
        .as_ref()
        .expect("recorded at checkpoint 2");
    assert_eq!(provenance.component, "http-delivery");
    assert_eq!(provenance.input_digest, "sha256:1234");
    assert_eq!(attempt.request_identity.as_deref(), Some("dk-1"));
    assert_eq!(attempt.observation.as_deref(), Some("sent"));
    assert_eq!(
        s.workflow(&id).await.unwrap().unwrap().external_calls_used,
        1
    );
    // A later checkpoint with fewer facts keeps what was recorded; checkpoints never go back.
    s.checkpoint(checkpoint(&c, 2, AttemptFacts::default(), 0, T0 + 710))
        .await
        .unwrap();
    let attempt = &s.attempts(&id, "only", 0, 10).await.unwrap()[0];
    assert_eq!(
        (attempt.checkpoint, attempt.observation.as_deref()),
        (3, Some("sent"))
    );

    let out = s
        .finish(finish_request(
            &c,
            retry(T0 + 2_000, Trigger::Retry, Some(T0 + 700)),
            T0 + 800,
        ))
        .await
        .unwrap();
    assert_eq!(out.workflow_state, WorkflowState::Running);
    let step = &s.steps(&id).await.unwrap()[0];
    assert_eq!(step.state, StepState::FailedRetryable);
    assert_eq!(step.ready_at, Some(T0 + 2_000));
    assert_eq!(
        (step.lease_owner.as_deref(), step.lease_expires_at),
        (None, None)
    );
    assert_eq!(step.note.as_deref(), Some("finished"));
    assert_eq!(s.workflow(&id).await.unwrap().unwrap().runtime_used_ms, 7);
    // The finished lease is gone for good.
    lost(
        s.renew(RenewRequest {
            fence: c.fence.clone(),
            now: T0 + 900,
            lease_ms: LEASE,
        })
        .await,
    );
    lost(
        s.checkpoint(checkpoint(&c, 4, AttemptFacts::default(), 0, T0 + 900))
            .await,
    );

    assert!(claim(&s, "w2", T0 + 1_999, 10).await.is_empty());
    let c2 = claim(&s, "w2", T0 + 2_000, 10).await.remove(0);
    assert_eq!((c2.attempt_number, c2.trigger), (2, Trigger::Retry));
    assert_eq!(c2.uncertain_since, Some(T0 + 700));
    assert_eq!(c2.external_calls_used, 1);
    // The first lease's token does not fence the second attempt.
    lost(
        s.finish(finish_request(
            &c,
            StepTransition::Terminal(StepState::FailedTerminal),
            T0 + 2_001,
        ))
        .await
        .map(|_| ()),
    );
    let out = end(&s, &c2, StepState::FailedTerminal, T0 + 2_002).await;
    assert_eq!(out.workflow_state, WorkflowState::Failed);
    let w = s.workflow(&id).await.unwrap().unwrap();
    assert_eq!(
        (w.state, w.ended_at, w.attempts_used),
        (WorkflowState::Failed, Some(T0 + 2_002), 2)
    );
}

pub async fn success_releases_dependents_and_derives_the_workflow_state<S: Store>(s: S) {
    let id = workflow(
        &s,
        "diamond",
        &[("a", &[]), ("b", &[]), ("c", &["a", "b"])],
        T0,
    )
    .await;
    let mut claimed = claim(&s, "w1", T0 + 1, 10).await;
    claimed.sort_by(|x, y| x.fence.step.cmp(&y.fence.step));
    assert_eq!(
        claimed
            .iter()
            .map(|c| c.fence.step.as_str())
            .collect::<Vec<_>>(),
        vec!["a", "b"]
    );
    let out = succeed(&s, &claimed[0], T0 + 2).await;
    assert_eq!(
        (out.workflow_state, out.released.len()),
        (WorkflowState::Running, 0)
    );
    assert_eq!(s.steps(&id).await.unwrap()[2].state, StepState::Pending);
    let out = succeed(&s, &claimed[1], T0 + 3).await;
    assert_eq!(out.released, vec!["c".to_string()]);
    let c = &s.steps(&id).await.unwrap()[2];
    assert_eq!((c.state, c.ready_at), (StepState::Ready, Some(T0 + 3)));
    let texts: Vec<_> = s
        .timeline(&id, 0, 100)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.text)
        .collect();
    assert!(
        texts.contains(&"Released c after its dependencies succeeded".to_string()),
        "{texts:?}"
    );

    let last = claim(&s, "w1", T0 + 4, 10).await.remove(0);
    let out = end(&s, &last, StepState::OutcomeUnknown, T0 + 5).await;
    assert_eq!(out.workflow_state, WorkflowState::NeedsReview);
    let w = s.workflow(&id).await.unwrap().unwrap();
    // Needing review is not an end: no end time, and the key stays reserved.
    assert_eq!((w.state, w.ended_at), (WorkflowState::NeedsReview, None));
    assert_eq!(
        s.lookup_key(&scope("alice", "diamond"), T0 + 5)
            .await
            .unwrap()
            .unwrap()
            .expires_at,
        None
    );
    let timeline = s.timeline(&id, 0, 100).await.unwrap();
    let conclusion = timeline.last().unwrap();
    assert_eq!(conclusion.kind, EventKind::Conclusion);
    assert_eq!(
        conclusion.text,
        "Workflow needs review: a person must decide how to continue"
    );
    assert_eq!(
        conclusion.data,
        json!({"from": "running", "to": "needs_review"})
    );
    // Numbering has no gaps.
    assert_eq!(
        timeline.iter().map(|e| e.seq).collect::<Vec<_>>(),
        (1..=timeline.len() as u64).collect::<Vec<_>>()
    );

    let done = workflow(&s, "single", &[("only", &[])], T0 + 10).await;
    let c = claim(&s, "w1", T0 + 10, 10).await.remove(0);
    let out = succeed(&s, &c, T0 + 11).await;
    assert_eq!(
        (out.workflow_state, out.released.len()),
        (WorkflowState::Completed, 0)
    );
    let step = &s.steps(&done).await.unwrap()[0];
    let receipts = s.receipts(&done).await.unwrap();
    assert_eq!(step.receipt_id.as_ref(), Some(&receipts[0].receipt_id));
    assert_eq!(receipts[0].recorded_at, T0 + 11);
    assert_eq!(receipts[0].external_reference.as_deref(), Some("ext-only"));
}

pub async fn expired_leases_report_checkpoint_and_stored_result<S: Store>(s: S) {
    let id = workflow(&s, "k", &[("only", &[])], T0).await;
    let c = claim(&s, "w1", T0, 10).await.remove(0);
    assert_eq!(c.fence.workflow_id, id);
    s.checkpoint(checkpoint(
        &c,
        2,
        facts("loaded", AttemptOutcome::InProgress),
        0,
        T0 + 1,
    ))
    .await
    .unwrap();
    let decided = stored_result(T0 + 2, "only");
    let mut at5 = checkpoint(&c, 5, AttemptFacts::default(), 1, T0 + 2);
    at5.facts.result = Some(decided.clone());
    s.checkpoint(at5).await.unwrap();

    // A lease runs out strictly after its expiry time.
    assert!(s.expired_leases(T0 + LEASE, 10).await.unwrap().is_empty());
    let expired = s.expired_leases(T0 + LEASE + 1, 10).await.unwrap();
    assert_eq!(expired.len(), 1);
    let e = &expired[0];
    assert_eq!(e.fence, c.fence);
    assert_eq!(
        (e.lease_owner.as_str(), e.lease_expires_at),
        ("w1", T0 + LEASE)
    );
    assert_eq!(e.attempt_id.as_ref(), Some(&c.attempt_id));
    assert_eq!(
        (e.checkpoint, e.attempt_number, e.attempt_started_at),
        (5, 1, T0)
    );
    assert_eq!(e.trigger, Trigger::Initial);
    assert_eq!(e.component.as_deref(), Some("http-delivery"));
    assert_eq!(e.component_version.as_deref(), Some("1.0.0"));
    assert_eq!((e.workflow.as_str(), e.definition_version), ("letters", 1));
    assert_eq!(e.uncertain_since, None);
    assert_eq!(e.result.as_ref(), Some(&decided));
    assert!(
        s.expired_leases(T0 + LEASE + 1, 0)
            .await
            .unwrap()
            .is_empty()
    );

    // Recovery resumes from the stored result, fenced by the expiry.
    let mut resume = finish_request(&c, decided.transition.clone(), T0 + LEASE + 2);
    resume.expired_before = Some(T0 + LEASE + 1);
    resume.events = decided.events.clone();
    let out = s.finish(resume).await.unwrap();
    assert_eq!(out.workflow_state, WorkflowState::Completed);
    assert!(
        s.expired_leases(T0 + 10 * LEASE, 10)
            .await
            .unwrap()
            .is_empty()
    );
    let lost = s
        .renew(RenewRequest {
            fence: c.fence.clone(),
            now: T0 + LEASE + 3,
            lease_ms: LEASE,
        })
        .await;
    assert!(
        matches!(lost, Err(StoreError::LeaseLost { .. })),
        "{lost:?}"
    );

    // Several expired leases come oldest first, up to the limit.
    let mut ids = Vec::new();
    for i in 0..3u64 {
        ids.push(workflow(&s, &format!("many{i}"), &[("only", &[])], T0 + 100 + i).await);
        claim(&s, "w2", T0 + 100 + i, 1).await;
    }
    let expired = s.expired_leases(T0 + 10 * LEASE, 2).await.unwrap();
    assert_eq!(
        expired
            .iter()
            .map(|e| e.fence.workflow_id.clone())
            .collect::<Vec<_>>(),
        ids[..2].to_vec()
    );
    assert!(
        expired
            .iter()
            .all(|e| e.checkpoint == 1 && e.result.is_none())
    );
}

/// Late evidence without a reference (here: an observation of the old worker) fills gaps
/// on its attempt and moves nothing; what a reference does is the next case's.
pub async fn late_evidence_fills_gaps_and_moves_nothing<S: Store>(s: S) {
    let id = workflow(&s, "k", &[("only", &[])], T0).await;
    let c = claim(&s, "w1", T0, 10).await.remove(0);
    let mut sent = checkpoint(&c, 3, AttemptFacts::default(), 0, T0 + 1);
    sent.facts.request_identity = Some("dk-1".into());
    s.checkpoint(sent).await.unwrap();

    // Recovery concludes first: the outcome is unknown, a query will follow.
    let mut recovery = finish_request(
        &c,
        retry(T0 + 5_000, Trigger::RecoveryQuery, Some(T0 + 1)),
        T0 + 2_000,
    );
    recovery.expired_before = Some(T0 + 2_000);
    recovery.facts = AttemptFacts {
        observation: Some("lease expired after the request was sent".into()),
        outcome: Some(AttemptOutcome::Interrupted),
        ..AttemptFacts::default()
    };
    recovery.events = Vec::new();
    s.finish(recovery).await.unwrap();
    let before = s.steps(&id).await.unwrap();
    let seq_before = s.timeline(&id, 0, 100).await.unwrap().len() as u64;

    // Then the old worker's answer arrives.
    s.late_evidence(LateEvidence {
        workflow_id: id.clone(),
        attempt_id: c.attempt_id.clone(),
        facts: AttemptFacts {
            observation: Some("the connection dropped".into()),
            outcome: Some(AttemptOutcome::TransportFailed),
            ..AttemptFacts::default()
        },
        events: vec![NewEvent::step(
            EventKind::Observation,
            "only",
            Some(&c.attempt_id),
            "A late result arrived",
        )],
        now: T0 + 2_100,
    })
    .await
    .unwrap();
    let attempt = &s.attempts(&id, "only", 0, 10).await.unwrap()[0];
    assert_eq!(
        attempt.observation.as_deref(),
        Some("lease expired after the request was sent")
    );
    assert_eq!(attempt.outcome, AttemptOutcome::Interrupted);
    assert_eq!(attempt.request_identity.as_deref(), Some("dk-1"));
    assert_eq!(
        s.steps(&id).await.unwrap(),
        before,
        "late evidence never moves the step"
    );
    let late = s.timeline(&id, seq_before, 10).await.unwrap();
    assert_eq!(late.len(), 1);
    assert_eq!((late[0].seq, late[0].at), (seq_before + 1, T0 + 2_100));
    assert_eq!(late[0].text, "A late result arrived");

    // An attempt still in progress takes the late outcome; a result fills a gap only once.
    let c2 = claim(&s, "w2", T0 + 5_000, 10).await.remove(0);
    let first = stored_result(T0 + 5_001, "only");
    for (outcome, result) in [
        (AttemptOutcome::LookupFound, first.clone()),
        (
            AttemptOutcome::LookupAbsent,
            stored_result(T0 + 5_002, "only"),
        ),
    ] {
        s.late_evidence(LateEvidence {
            workflow_id: id.clone(),
            attempt_id: c2.attempt_id.clone(),
            facts: AttemptFacts {
                outcome: Some(outcome),
                result: Some(result),
                ..AttemptFacts::default()
            },
            events: Vec::new(),
            now: T0 + 5_001,
        })
        .await
        .unwrap();
    }
    let attempt = &s.attempts(&id, "only", 1, 10).await.unwrap()[0];
    assert_eq!(attempt.outcome, AttemptOutcome::LookupFound);
    let step = &s.steps(&id).await.unwrap()[0];
    assert_eq!((step.state, step.attempts), (StepState::Running, 2));
    // The stored result is the first one: recovery would resume from it.
    let expired = s.expired_leases(T0 + 5_000 + LEASE + 1, 10).await.unwrap();
    assert_eq!(expired[0].result.as_ref(), Some(&first));
}

/// A late accepted answer settles a step whose outcome is uncertain, with a receipt from
/// it; one naming another reference than the step's receipt makes the step contradicted,
/// keeping both references, and the workflow waits for a person.
pub async fn late_references_settle_or_contradict<S: Store>(s: S) {
    // Settles: recovery left the step uncertain (a query to follow).
    let id = workflow(&s, "settles", &[("only", &[])], T0).await;
    let c = claim(&s, "w1", T0, 10).await.remove(0);
    s.checkpoint(checkpoint(&c, 3, AttemptFacts::default(), 0, T0 + 1))
        .await
        .unwrap();
    let mut recovery = finish_request(
        &c,
        retry(T0 + 5_000, Trigger::RecoveryQuery, Some(T0 + 1)),
        T0 + 2_000,
    );
    recovery.expired_before = Some(T0 + 2_000);
    s.finish(recovery).await.unwrap();
    let late = |c: &Claimed, result: AttemptResult, now: Millis| LateEvidence {
        workflow_id: c.fence.workflow_id.clone(),
        attempt_id: c.attempt_id.clone(),
        facts: AttemptFacts {
            outcome: Some(AttemptOutcome::Accepted),
            result: Some(result),
            ..AttemptFacts::default()
        },
        events: Vec::new(),
        now,
    };
    s.late_evidence(late(&c, stored_result(T0 + 2_100, "only"), T0 + 2_100))
        .await
        .unwrap();
    let step = &s.steps(&id).await.unwrap()[0];
    assert_eq!(step.state, StepState::Succeeded, "{step:#?}");
    let receipts = s.receipts(&id).await.unwrap();
    assert_eq!(receipts.len(), 1);
    assert_eq!(step.receipt_id.as_ref(), Some(&receipts[0].receipt_id));
    assert_eq!(receipts[0].external_reference.as_deref(), Some("ext-only"));
    assert_eq!(receipts[0].attempt_id.as_ref(), Some(&c.attempt_id));
    let wf = s.workflow(&id).await.unwrap().unwrap();
    assert_eq!(wf.state, WorkflowState::Completed);
    let timeline = s.timeline(&id, 0, 100).await.unwrap();
    assert!(
        timeline
            .iter()
            .any(|e| e.text.starts_with("Settled by the provider's late answer")),
        "{timeline:#?}"
    );

    // Contradicts: a retry under the same key succeeded on another reference first.
    let id = workflow(&s, "contradicts", &[("only", &[])], T0).await;
    let c1 = claim(&s, "w1", T0, 10).await.remove(0);
    s.checkpoint(checkpoint(&c1, 3, AttemptFacts::default(), 0, T0 + 1))
        .await
        .unwrap();
    let mut recovery = finish_request(
        &c1,
        retry(T0 + 3_000, Trigger::Retry, Some(T0 + 1)),
        T0 + 2_000,
    );
    recovery.expired_before = Some(T0 + 2_000);
    s.finish(recovery).await.unwrap();
    let c2 = claim(&s, "w2", T0 + 3_000, 10).await.remove(0);
    let mut second = receipt(T0 + 3_100, "only");
    second.external_reference = Some("ext-second".into());
    s.finish(finish_request(
        &c2,
        StepTransition::Succeeded(Box::new(second)),
        T0 + 3_100,
    ))
    .await
    .unwrap();
    s.late_evidence(late(&c1, stored_result(T0 + 3_200, "only"), T0 + 3_200))
        .await
        .unwrap();
    let step = &s.steps(&id).await.unwrap()[0];
    assert_eq!(step.state, StepState::Contradicted, "{step:#?}");
    assert_eq!(
        step.blocked.as_ref().map(|b| b.references.clone()),
        Some(vec!["ext-second".to_string(), "ext-only".to_string()])
    );
    let wf = s.workflow(&id).await.unwrap().unwrap();
    assert_eq!(wf.state, WorkflowState::NeedsReview);
    // The same reference again changes nothing more.
    let before = s.steps(&id).await.unwrap();
    s.late_evidence(late(&c1, stored_result(T0 + 3_300, "only"), T0 + 3_300))
        .await
        .unwrap();
    assert_eq!(s.steps(&id).await.unwrap(), before);
}

/// Graceful shutdown: a host ends its own leases at once; others' stay.
pub async fn a_host_ends_only_its_own_leases<S: Store>(s: S) {
    workflow(&s, "a1", &[("only", &[])], T0).await;
    workflow(&s, "a2", &[("only", &[])], T0).await;
    workflow(&s, "b1", &[("only", &[])], T0).await;
    let mine = claim(&s, "host-a", T0, 2).await;
    assert_eq!(mine.len(), 2);
    let theirs = claim(&s, "host-b", T0, 10).await;
    assert_eq!(theirs.len(), 1);
    assert!(s.expired_leases(T0 + 10, 10).await.unwrap().is_empty());

    assert_eq!(s.release_leases("host-a", T0 + 10).await.unwrap(), 2);
    let expired = s.expired_leases(T0 + 10, 10).await.unwrap();
    assert_eq!(expired.len(), 2, "{expired:#?}");
    assert!(expired.iter().all(|e| e.lease_owner == "host-a"));
    // Once ended, nothing more to end; the other host's lease is untouched.
    assert_eq!(s.release_leases("host-a", T0 + 11).await.unwrap(), 0);
    assert_eq!(s.release_leases("host-c", T0 + 11).await.unwrap(), 0);
    assert!(
        s.expired_leases(T0 + 10, 10)
            .await
            .unwrap()
            .iter()
            .all(|e| e.fence != theirs[0].fence)
    );
}

/// Checkpoint 3 keeps the first request's input digest and refuses another under the same
/// identity (docs/architecture.md, invariant 3); a cancellation fences it.
pub async fn checkpoint_three_keeps_one_input_and_honours_a_cancellation<S: Store>(s: S) {
    let id = workflow(&s, "identity", &[("deliver", &[])], T0).await;
    let with_input = |digest: &str| {
        let mut f = facts("about to send", AttemptOutcome::InProgress);
        f.provenance.as_mut().unwrap().input_digest = digest.to_string();
        f.outcome = None;
        f
    };
    let first = claim(&s, "w1", T0 + 1, 1).await.remove(0);
    s.checkpoint(checkpoint(&first, 2, with_input("sha256:aa"), 0, T0 + 2))
        .await
        .unwrap();
    s.checkpoint(checkpoint(&first, 3, AttemptFacts::default(), 1, T0 + 3))
        .await
        .unwrap();
    s.finish(finish_request(
        &first,
        retry(T0 + 4, Trigger::Retry, None),
        T0 + 4,
    ))
    .await
    .unwrap();
    let second = claim(&s, "w1", T0 + 5, 1).await.remove(0);
    s.checkpoint(checkpoint(&second, 2, with_input("sha256:bb"), 0, T0 + 6))
        .await
        .unwrap();
    let refused = s
        .checkpoint(checkpoint(&second, 3, AttemptFacts::default(), 1, T0 + 7))
        .await
        .unwrap_err();
    assert!(
        matches!(&refused, StoreError::InputChanged { step, attempt } if step == "sha256:aa" && attempt == "sha256:bb"),
        "{refused:?}"
    );
    // Refused, nothing was written: the attempt is still at checkpoint 2.
    let attempts = s.attempts(&id, "deliver", 0, 10).await.unwrap();
    assert_eq!(attempts[1].checkpoint, 2);

    // A cancellation committed after the claim fences checkpoint 3 of a step.
    let other = workflow(&s, "fenced", &[("deliver", &[])], T0 + 10).await;
    let claimed = claim(&s, "w1", T0 + 11, 1).await.remove(0);
    assert_eq!(claimed.fence.workflow_id, other);
    let answer = s
        .cancel(docket::store::CancelRequest {
            scope: docket::store::ActionScope {
                subject: docket::intent::Subject("alice".into()),
                workflow_id: other.clone(),
                step: String::new(),
                action: "cancel".into(),
                key: "c-1".into(),
            },
            request_digest: "sha256:c".into(),
            cancellation_id: docket::intent::CancellationId::new(T0 + 12),
            reason: "no longer needed".into(),
            withdraw: false,
            labels: Default::default(),
            now: T0 + 12,
        })
        .await
        .unwrap();
    assert!(
        matches!(&answer, docket::store::CancelAnswer::Created(c) if c.outcome == docket::course::CancelOutcome::Cancelled),
        "{answer:?}"
    );
    s.checkpoint(checkpoint(&claimed, 2, with_input("sha256:cc"), 0, T0 + 13))
        .await
        .unwrap();
    let fenced = s
        .checkpoint(checkpoint(&claimed, 3, AttemptFacts::default(), 1, T0 + 14))
        .await
        .unwrap_err();
    assert!(matches!(fenced, StoreError::Cancelled { .. }), "{fenced:?}");
    let record = s.workflow(&other).await.unwrap().unwrap();
    assert!(record.cancelled);
    assert_eq!(record.state, WorkflowState::Running, "its step still runs");
    let ended = end(&s, &claimed, StepState::Cancelled, T0 + 15).await;
    assert_eq!(ended.workflow_state, WorkflowState::Cancelled);
}

/// A cancellation while a handler runs: it may finish, its dependents never start, and the
/// workflow ends cancelled once it has.
pub async fn a_cancellation_lets_a_running_handler_finish_and_starts_nothing_new<S: Store>(s: S) {
    let id = workflow(
        &s,
        "stopping",
        &[("render", &[]), ("deliver", &["render"])],
        T0,
    )
    .await;
    let running = claim(&s, "w1", T0 + 1, 1).await.remove(0);
    assert_eq!(running.fence.step, "render");
    let answer = s
        .cancel(docket::store::CancelRequest {
            scope: docket::store::ActionScope {
                subject: docket::intent::Subject("alice".into()),
                workflow_id: id.clone(),
                step: String::new(),
                action: "cancel".into(),
                key: "stop-1".into(),
            },
            request_digest: "sha256:s".into(),
            cancellation_id: docket::intent::CancellationId::new(T0 + 2),
            reason: "no longer needed".into(),
            withdraw: false,
            labels: [("render".to_string(), "Render".to_string())].into(),
            now: T0 + 2,
        })
        .await
        .unwrap();
    let docket::store::CancelAnswer::Created(c) = &answer else {
        panic!("{answer:?}")
    };
    assert_eq!(c.outcome, docket::course::CancelOutcome::Stopping);
    assert_eq!(
        c.message,
        "Stopping: Render may finish, and nothing new starts"
    );
    let steps = s.steps(&id).await.unwrap();
    assert_eq!(
        steps.iter().map(|s| s.state).collect::<Vec<_>>(),
        [StepState::Running, StepState::Cancelled]
    );
    assert_eq!(
        s.workflow(&id).await.unwrap().unwrap().state,
        WorkflowState::Running
    );
    // The handler finishes: nothing is released, the workflow is cancelled.
    let finished = succeed(&s, &running, T0 + 3).await;
    assert!(finished.released.is_empty());
    assert_eq!(finished.workflow_state, WorkflowState::Cancelled);
    assert!(claim(&s, "w1", T0 + 4, 10).await.is_empty());
}

/// Recovery decides from the checkpoint it read: if the holder of the expired lease writes
/// its next checkpoint meanwhile, recovery's finish is refused and it decides again.
pub async fn recovery_never_finishes_on_a_checkpoint_that_moved<S: Store>(s: S) {
    let id = workflow(&s, "moved", &[("deliver", &[])], T0).await;
    let c = claim(&s, "w1", T0 + 1, 1).await.remove(0);
    s.checkpoint(checkpoint(
        &c,
        2,
        facts("judged", AttemptOutcome::InProgress),
        0,
        T0 + 2,
    ))
    .await
    .unwrap();
    // Recovery reads the expired lease at checkpoint 2…
    let expired = s.expired_leases(T0 + LEASE + 10, 10).await.unwrap();
    assert_eq!(expired[0].checkpoint, 2);
    // …the holder, not yet taken over, records that its request may have left…
    s.checkpoint(checkpoint(
        &c,
        3,
        AttemptFacts::default(),
        1,
        T0 + LEASE + 11,
    ))
    .await
    .unwrap();
    // …and "nothing was sent, ready again" is refused: it is no longer true.
    let mut stale = finish_request(
        &c,
        retry(T0 + LEASE + 12, Trigger::Retry, None),
        T0 + LEASE + 12,
    );
    stale.expired_before = Some(T0 + LEASE + 12);
    stale.decided_at = Some(2);
    let refused = s.finish(stale.clone()).await.unwrap_err();
    assert!(
        matches!(refused, StoreError::LeaseLost { .. }),
        "{refused:?}"
    );
    assert_eq!(s.steps(&id).await.unwrap()[0].state, StepState::Running);
    // Decided from checkpoint 3, it goes through.
    stale.decided_at = Some(3);
    s.finish(stale).await.unwrap();
}

/// Checkpoint 3 of an adapter that deduplicates keeps until when its provider remembers the
/// key, from the step's first request only; a person deciding the unknown outcome is told
/// once when a fifth of that window is left, on the timeline and by a notification.
pub async fn the_key_retention_is_kept_from_the_first_request_and_warned_once<S: Store>(s: S) {
    const HOUR: Millis = 3_600_000;
    let id = workflow(&s, "retention", &[("deliver", &[])], T0).await;
    let sent = |c: &Claimed, at: Millis| {
        let mut request = checkpoint(c, 3, AttemptFacts::default(), 0, at);
        request.remembered_until = Some(at + 10 * HOUR);
        request
    };
    // Checkpoint 2 records which input the request carries.
    let prepared = |c: &Claimed, at: Millis| {
        let mut f = facts("about to send", AttemptOutcome::InProgress);
        f.outcome = None;
        checkpoint(c, 2, f, 0, at)
    };
    let first = claim(&s, "w1", T0 + 1, 1).await.remove(0);
    s.checkpoint(prepared(&first, T0 + 1)).await.unwrap();
    s.checkpoint(sent(&first, T0 + 2)).await.unwrap();
    s.finish(finish_request(
        &first,
        retry(T0 + 3, Trigger::Retry, Some(T0 + 3)),
        T0 + 3,
    ))
    .await
    .unwrap();
    // The same-key retry sends again: the provider's memory still counts from the first.
    let second = claim(&s, "w1", T0 + 4, 1).await.remove(0);
    s.checkpoint(prepared(&second, T0 + 4)).await.unwrap();
    s.checkpoint(sent(&second, T0 + 5)).await.unwrap();
    end(&s, &second, StepState::OutcomeUnknown, T0 + 6).await;
    let step = s.steps(&id).await.unwrap().remove(0);
    assert_eq!(step.key_remembered_until, Some(T0 + 2 + 10 * HOUR));
    assert_eq!(
        docket::view::retention_deadline(&step),
        Some(T0 + 2 + 10 * HOUR)
    );

    let told = |s: &S| {
        let s = s.clone();
        let id = id.clone();
        async move {
            let timeline = s.timeline(&id, 0, 1_000).await.unwrap();
            let notes = timeline
                .iter()
                .filter(|e| e.text.starts_with("Retention deadline approaching"))
                .count();
            let sent = s
                .notifications(docket::store::NotificationFilter {
                    workflow_id: Some(id.clone()),
                    state: None,
                    after: None,
                    limit: 100,
                })
                .await
                .unwrap()
                .iter()
                .filter(|n| n.kind == "workflow.retention_deadline_approaching")
                .count();
            (notes, sent)
        }
    };
    // Early in the window: nothing to tell.
    assert_eq!(s.warn_deadlines(T0 + 7 * HOUR).await.unwrap(), 0);
    assert_eq!(told(&s).await, (0, 0));
    // Within its last fifth: told once, however often the tick runs.
    assert_eq!(s.warn_deadlines(T0 + 8 * HOUR + 10).await.unwrap(), 1);
    assert_eq!(s.warn_deadlines(T0 + 9 * HOUR).await.unwrap(), 0);
    assert_eq!(told(&s).await, (1, 1));
    let step = s.steps(&id).await.unwrap().remove(0);
    assert_eq!(step.retention_warned_at, Some(T0 + 8 * HOUR + 10));
}
