//! Deploys, admissions with idempotency keys, and the read projections.

use super::backends::Store;
use super::fixtures::*;
use docket::intent::{AttemptOutcome, StepState, Subject, Trigger, WorkflowState, sha256_digest};
use docket::store::{
    AdmitOutcome, AdmitRequest, DeployOutcome, KeyRecord, NewDefinition, StoreError, WorkflowFilter,
};
use serde_json::json;
use std::collections::HashSet;

fn definition(version: u32, source: &str) -> NewDefinition {
    NewDefinition {
        name: "letters".into(),
        version,
        digest: sha256_digest(source.as_bytes()),
        source: source.into(),
        deployed_at: T0 + version as u64,
    }
}

pub async fn deploy_is_idempotent_per_version<S: Store>(s: S) {
    assert_eq!(
        s.deploy_definition(definition(1, "a")).await.unwrap(),
        DeployOutcome::Deployed
    );
    assert_eq!(
        s.deploy_definition(definition(1, "a")).await.unwrap(),
        DeployOutcome::Unchanged
    );
    match s.deploy_definition(definition(1, "b")).await {
        Err(StoreError::DefinitionChanged {
            name,
            version,
            existing,
            new,
        }) => {
            assert_eq!((name.as_str(), version), ("letters", 1));
            assert_eq!(existing, sha256_digest(b"a"));
            assert_eq!(new, sha256_digest(b"b"));
        }
        other => panic!("a changed digest under version 1 must be refused, got {other:?}"),
    }
    assert_eq!(
        s.deploy_definition(definition(2, "b")).await.unwrap(),
        DeployOutcome::Deployed
    );
    let v1 = s.definition("letters", 1).await.unwrap().unwrap();
    assert_eq!(
        (v1.version, v1.source.as_str(), v1.deployed_at),
        (1, "a", T0 + 1)
    );
    assert_eq!(v1.digest, sha256_digest(b"a"));
    let latest = s.latest_definition("letters").await.unwrap().unwrap();
    assert_eq!((latest.version, latest.source.as_str()), (2, "b"));
    assert_eq!(s.definition("letters", 3).await.unwrap(), None);
    assert_eq!(s.latest_definition("parcels").await.unwrap(), None);
    let mut parcels = definition(1, "p");
    parcels.name = "parcels".into();
    s.deploy_definition(parcels).await.unwrap();
    let all: Vec<(String, u32)> = s
        .latest_definitions()
        .await
        .unwrap()
        .into_iter()
        .map(|d| (d.name, d.version))
        .collect();
    assert_eq!(
        all,
        [("letters".to_string(), 2), ("parcels".to_string(), 1)]
    );
}

pub async fn admission_creates_once_then_replays_or_conflicts<S: Store>(s: S) {
    let steps: &[(&str, &[&str])] = &[("render", &[]), ("deliver", &["render"])];
    let first = admit(
        scope("alice", "k1"),
        json!({"to": "ada", "n": 1}),
        steps,
        T0,
    );
    let id = first.create.as_ref().unwrap().workflow_id.clone();
    let created = create(&s, first).await;
    assert_eq!(created.workflow_id, id);
    assert_eq!(created.state, WorkflowState::Running);
    assert_eq!((created.created_at, created.ended_at), (T0, None));
    assert_eq!(created.idempotency_key, "k1");
    assert_eq!(created.input, r#"{"n":1,"to":"ada"}"#);
    assert_eq!(s.workflow(&id).await.unwrap(), Some(created.clone()));

    // The same command again (keys in another order): the stored workflow, nothing new.
    let again = admit(
        scope("alice", "k1"),
        json!({"n": 1, "to": "ada"}),
        steps,
        T0 + 5,
    );
    assert_eq!(
        s.admit(again).await.unwrap(),
        AdmitOutcome::Replayed(created.clone())
    );
    // Another command under the key: a conflict naming the stored workflow.
    let other = admit(scope("alice", "k1"), json!({"to": "bob"}), steps, T0 + 6);
    assert_eq!(
        s.admit(other).await.unwrap(),
        AdmitOutcome::Conflict {
            workflow_id: id.clone()
        }
    );
    // A known key answers from what was stored even if the caller would refuse.
    let refused_known = AdmitRequest {
        create: None,
        ..admit(
            scope("alice", "k1"),
            json!({"to": "ada", "n": 1}),
            steps,
            T0 + 7,
        )
    };
    assert_eq!(
        s.admit(refused_known).await.unwrap(),
        AdmitOutcome::Replayed(created.clone())
    );
    // A free key with nothing to create changes nothing.
    let refused_free = AdmitRequest {
        create: None,
        ..admit(scope("alice", "k2"), json!({}), steps, T0 + 8)
    };
    assert_eq!(s.admit(refused_free).await.unwrap(), AdmitOutcome::KeyFree);
    assert_eq!(
        s.lookup_key(&scope("alice", "k2"), T0 + 9).await.unwrap(),
        None
    );
    // Keys are scoped by subject.
    assert_eq!(
        s.lookup_key(&scope("bob", "k1"), T0 + 9).await.unwrap(),
        None
    );
    assert_eq!(
        s.lookup_key(&scope("alice", "k1"), T0 + 9).await.unwrap(),
        Some(KeyRecord {
            workflow_id: id.clone(),
            input_digest: input(json!({"to": "ada", "n": 1})).digest,
            expires_at: None,
        })
    );

    let stored = s.steps(&id).await.unwrap();
    let shape: Vec<_> = stored
        .iter()
        .map(|st| (st.step.as_str(), st.state, st.ready_at, st.attempts))
        .collect();
    assert_eq!(
        shape,
        vec![
            ("render", StepState::Ready, Some(T0), 0),
            ("deliver", StepState::Pending, None, 0)
        ]
    );
    assert!(
        stored
            .iter()
            .all(|st| st.lease_owner.is_none() && st.receipt_id.is_none())
    );
    let timeline = s.timeline(&id, 0, 100).await.unwrap();
    let seqs: Vec<_> = timeline
        .iter()
        .map(|e| (e.seq, e.at, e.text.as_str()))
        .collect();
    assert_eq!(
        seqs,
        vec![(1, T0, "Request recorded"), (2, T0, "Scheduled")]
    );
    let all = s
        .list_workflows(&WorkflowFilter {
            limit: 10,
            ..WorkflowFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(all, vec![created]);
}

/// An intent built on a version since superseded (deployed by another host or process) is
/// refused with `Outdated` and writes nothing, not even its key.
pub async fn an_intent_of_a_superseded_version_writes_nothing<S: Store>(s: S) {
    s.deploy_definition(definition(1, "a")).await.unwrap();
    s.deploy_definition(definition(2, "b")).await.unwrap();
    let steps: &[(&str, &[&str])] = &[("only", &[])];
    let old = admit(scope("alice", "k"), json!({"to": "ada"}), steps, T0);
    assert_eq!(s.admit(old).await.unwrap(), AdmitOutcome::Outdated);
    assert_eq!(s.lookup_key(&scope("alice", "k"), T0).await.unwrap(), None);
    let all = first_workflows(&s, 10).await;
    assert!(all.is_empty(), "{all:?}");
    let mut current = admit(scope("alice", "k"), json!({"to": "ada"}), steps, T0);
    current.create.as_mut().unwrap().definition_version = 2;
    assert_eq!(create(&s, current).await.definition_version, 2);
}

pub async fn an_expired_key_is_free_again<S: Store>(s: S) {
    let steps: &[(&str, &[&str])] = &[("only", &[])];
    let old = create(&s, admit(scope("alice", "k"), json!({"v": 1}), steps, T0)).await;
    let c = claim(&s, "w1", T0 + 1, 10).await;
    assert_eq!(
        succeed(&s, &c[0], T0 + 10).await.workflow_state,
        WorkflowState::Completed
    );
    let ended = s.workflow(&old.workflow_id).await.unwrap().unwrap();
    assert_eq!(
        (ended.state, ended.ended_at),
        (WorkflowState::Completed, Some(T0 + 10))
    );
    // Retention (10 s) starts when the workflow ends.
    let key = s
        .lookup_key(&scope("alice", "k"), T0 + 10)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(key.expires_at, Some(T0 + 10_010));
    assert!(
        s.lookup_key(&scope("alice", "k"), T0 + 10_009)
            .await
            .unwrap()
            .is_some()
    );
    assert_eq!(
        s.lookup_key(&scope("alice", "k"), T0 + 10_010)
            .await
            .unwrap(),
        None
    );

    // Refusing a new intent under an expired key leaves the old key alone.
    let refused = AdmitRequest {
        create: None,
        ..admit(scope("alice", "k"), json!({"v": 2}), steps, T0 + 20_000)
    };
    assert_eq!(s.admit(refused).await.unwrap(), AdmitOutcome::KeyFree);
    assert_eq!(
        s.lookup_key(&scope("alice", "k"), T0 + 10)
            .await
            .unwrap()
            .unwrap()
            .workflow_id,
        old.workflow_id
    );

    let new = create(
        &s,
        admit(scope("alice", "k"), json!({"v": 2}), steps, T0 + 20_000),
    )
    .await;
    assert_ne!(new.workflow_id, old.workflow_id);
    assert_eq!(
        s.lookup_key(&scope("alice", "k"), T0 + 20_000)
            .await
            .unwrap(),
        Some(KeyRecord {
            workflow_id: new.workflow_id.clone(),
            input_digest: input(json!({"v": 2})).digest,
            expires_at: None,
        })
    );
    let replay = admit(scope("alice", "k"), json!({"v": 2}), steps, T0 + 20_001);
    assert_eq!(s.admit(replay).await.unwrap(), AdmitOutcome::Replayed(new));
    assert_eq!(s.workflow(&old.workflow_id).await.unwrap(), Some(ended));
}

pub async fn reads_filter_and_page<S: Store>(s: S) {
    let steps: &[(&str, &[&str])] = &[("only", &[])];
    // Five workflows; the last two share a creation time, so the cursor's tie-break counts.
    let mut made = Vec::new();
    for (i, (subject, at)) in [
        ("alice", 0),
        ("bob", 10),
        ("alice", 20),
        ("bob", 30),
        ("alice", 30),
    ]
    .into_iter()
    .enumerate()
    {
        let mut req = admit(
            scope(subject, &format!("k{i}")),
            json!({"i": i}),
            steps,
            T0 + at,
        );
        if i == 1 {
            req.scope.workflow = "parcels".into();
        }
        made.push(create(&s, req).await);
    }
    let mut newest_first = made.clone();
    newest_first
        .sort_by(|a, b| (b.created_at, &b.workflow_id).cmp(&(a.created_at, &a.workflow_id)));
    let filter = |f: WorkflowFilter| WorkflowFilter { limit: 10, ..f };
    assert_eq!(
        s.list_workflows(&filter(WorkflowFilter::default()))
            .await
            .unwrap(),
        newest_first
    );
    let bobs = s
        .list_workflows(&filter(WorkflowFilter {
            subject: Some(Subject("bob".into())),
            ..WorkflowFilter::default()
        }))
        .await
        .unwrap();
    assert_eq!(
        bobs.iter().map(|w| w.created_at).collect::<Vec<_>>(),
        vec![T0 + 30, T0 + 10]
    );
    let parcels = s
        .list_workflows(&filter(WorkflowFilter {
            workflow: Some("parcels".into()),
            ..WorkflowFilter::default()
        }))
        .await
        .unwrap();
    assert_eq!(parcels, vec![made[1].clone()]);

    // Complete the oldest workflow; the state filter finds it and only it.
    let c = claim(&s, "w1", T0 + 40, 1).await;
    assert_eq!(c[0].fence.workflow_id, made[0].workflow_id);
    succeed(&s, &c[0], T0 + 41).await;
    let completed = s
        .list_workflows(&filter(WorkflowFilter {
            state: Some(WorkflowState::Completed),
            subject: Some(Subject("alice".into())),
            ..WorkflowFilter::default()
        }))
        .await
        .unwrap();
    assert_eq!(
        completed.iter().map(|w| &w.workflow_id).collect::<Vec<_>>(),
        vec![&made[0].workflow_id]
    );

    // Pages of two, following the cursor, cover every workflow once, newest first.
    let mut seen = Vec::new();
    let mut before = None;
    loop {
        let page = s
            .list_workflows(&WorkflowFilter {
                before: before.clone(),
                limit: 2,
                ..WorkflowFilter::default()
            })
            .await
            .unwrap();
        assert!(page.len() <= 2);
        let Some(last) = page.last() else { break };
        before = Some((last.created_at, last.workflow_id.clone()));
        seen.extend(page.into_iter().map(|w| w.workflow_id));
    }
    assert_eq!(
        seen,
        newest_first
            .iter()
            .map(|w| w.workflow_id.clone())
            .collect::<Vec<_>>()
    );

    // Timeline pages: `after` is exclusive, `limit` bounds the page.
    let id = &made[1].workflow_id;
    let c = claim(&s, "w1", T0 + 50, 10).await;
    let mine = c.iter().find(|c| &c.fence.workflow_id == id).unwrap();
    s.checkpoint(checkpoint(
        mine,
        2,
        facts("sent", AttemptOutcome::InProgress),
        4,
        T0 + 51,
    ))
    .await
    .unwrap();
    let all = s.timeline(id, 0, 100).await.unwrap();
    assert_eq!(
        all.iter().map(|e| e.seq).collect::<Vec<_>>(),
        (1..=7).collect::<Vec<_>>()
    );
    assert_eq!(all[2].attempt_id.as_deref(), Some(mine.attempt_id.as_str()));
    assert_eq!(all[2].step.as_deref(), Some("only"));
    let page: Vec<_> = s
        .timeline(id, 2, 3)
        .await
        .unwrap()
        .iter()
        .map(|e| e.seq)
        .collect();
    assert_eq!(page, vec![3, 4, 5]);
    assert!(s.timeline(id, 7, 10).await.unwrap().is_empty());
    // Latest pages, going back: `before` is exclusive; a step filter keeps its own events.
    let seqs = |events: Vec<docket::intent::TimelineEvent>| {
        events.iter().map(|e| e.seq).collect::<Vec<_>>()
    };
    assert_eq!(
        seqs(s.timeline_latest(id, None, None, 3).await.unwrap()),
        vec![5, 6, 7]
    );
    assert_eq!(
        seqs(s.timeline_latest(id, None, Some(5), 2).await.unwrap()),
        vec![3, 4]
    );
    assert!(
        s.timeline_latest(id, None, Some(1), 5)
            .await
            .unwrap()
            .is_empty()
    );
    let of_step: Vec<u64> = all
        .iter()
        .filter(|e| e.step.as_deref() == Some("only"))
        .map(|e| e.seq)
        .collect();
    assert!(!of_step.is_empty() && of_step.len() < all.len());
    assert_eq!(
        seqs(
            s.timeline_latest(id, Some("only"), None, 100)
                .await
                .unwrap()
        ),
        of_step
    );

    // Attempt pages: a retry makes a second attempt of the same step.
    s.finish(finish_request(
        mine,
        retry(T0 + 60, Trigger::Retry, None),
        T0 + 52,
    ))
    .await
    .unwrap();
    let again = claim(&s, "w2", T0 + 60, 10).await;
    let again = again.iter().find(|c| &c.fence.workflow_id == id).unwrap();
    assert_eq!((again.attempt_number, again.trigger), (2, Trigger::Retry));
    let attempts = s.attempts(id, "only", 0, 10).await.unwrap();
    assert_eq!(
        attempts.iter().map(|a| a.number).collect::<Vec<_>>(),
        vec![1, 2]
    );
    assert_eq!(attempts[0].attempt_id, mine.attempt_id);
    assert_eq!(attempts[0].lease_owner, "w1");
    assert_eq!(attempts[0].log, json!(["a line"]));
    assert_eq!(attempts[0].finished_at, Some(T0 + 52));
    assert_eq!(attempts[1].lease_owner, "w2");
    assert_eq!(attempts[1].outcome, AttemptOutcome::InProgress);
    let second: Vec<_> = s.attempts(id, "only", 1, 10).await.unwrap();
    assert_eq!(second.iter().map(|a| a.number).collect::<Vec<_>>(), vec![2]);
    assert_eq!(s.attempts(id, "only", 0, 1).await.unwrap().len(), 1);
    assert!(s.attempts(id, "missing", 0, 10).await.unwrap().is_empty());
    let ids: HashSet<_> = made.iter().map(|w| w.workflow_id.clone()).collect();
    assert_eq!(ids.len(), 5);
}
