//! Operator actions: idempotent under their key, guarded by the state the decision saw.

use super::backends::Store;
use super::fixtures::*;
use docket::intent::{
    EventKind, EvidenceKind, NewEvent, StepState, Subject, Trigger, WorkflowId, WorkflowState,
};
use docket::store::{
    ActionAnswer, ActionOutcome, ActionRecord, ActionRequest, ActionScope, StepChange,
    StoredRefusal,
};
use serde_json::json;

pub fn action_scope(id: &WorkflowId, step: &str, action: &str, key: &str) -> ActionScope {
    ActionScope {
        subject: Subject("operator".into()),
        workflow_id: id.clone(),
        step: step.into(),
        action: action.into(),
        key: key.into(),
    }
}

pub fn request(
    scope: ActionScope,
    digest: &str,
    expected_state: StepState,
    change: Result<StepChange, StoredRefusal>,
    now: u64,
) -> ActionRequest {
    ActionRequest {
        events: vec![NewEvent::step(
            EventKind::Action,
            &scope.step,
            None,
            format!("Operator: {}", scope.action),
        )],
        scope,
        request_digest: digest.into(),
        expected_state,
        change,
        stale: stale(),
        now,
        approval: None,
    }
}

fn stale() -> StoredRefusal {
    StoredRefusal {
        code: "step_moved".into(),
        message: "the step moved".into(),
        details: vec![],
    }
}

fn manual_retry() -> StepChange {
    StepChange::Ready {
        trigger: Trigger::ManualRetry,
        settle_uncertainty: true,
    }
}

pub async fn operator_actions_are_idempotent_and_guarded<S: Store>(s: S) {
    let id = workflow(&s, "k", &[("a", &[])], T0).await;
    let c = claim(&s, "w1", T0, 10).await.remove(0);
    s.finish(finish_request(
        &c,
        retry(T0 + 10_000, Trigger::Retry, Some(T0 + 1)),
        T0 + 1,
    ))
    .await
    .unwrap();
    // Park the step as outcome unknown through a second attempt.
    let c = claim(&s, "w1", T0 + 10_000, 10).await.remove(0);
    assert_eq!(
        end(&s, &c, StepState::OutcomeUnknown, T0 + 10_001)
            .await
            .workflow_state,
        WorkflowState::NeedsReview
    );

    let retry_k1 = action_scope(&id, "a", "retry", "k1");
    assert_eq!(s.action(&retry_k1).await.unwrap(), None);
    let applied = s
        .act(request(
            retry_k1.clone(),
            "d1",
            StepState::OutcomeUnknown,
            Ok(manual_retry()),
            T0 + 20_000,
        ))
        .await
        .unwrap();
    assert_eq!(
        applied,
        ActionOutcome::Applied {
            workflow_state: WorkflowState::Running
        }
    );
    let step = &s.steps(&id).await.unwrap()[0];
    assert_eq!(
        (step.state, step.ready_at, step.note.as_deref()),
        (StepState::Ready, Some(T0 + 20_000), None)
    );
    let timeline = s.timeline(&id, 0, 100).await.unwrap();
    let texts: Vec<_> = timeline
        .iter()
        .rev()
        .take(2)
        .map(|e| e.text.as_str())
        .collect();
    assert_eq!(texts, vec!["Workflow running again", "Operator: retry"]);
    assert_eq!(
        timeline.iter().map(|e| e.seq).collect::<Vec<_>>(),
        (1..=timeline.len() as u64).collect::<Vec<_>>()
    );

    // The answer is stored once; a repeat gets it back and acts no more.
    assert_eq!(
        s.action(&retry_k1).await.unwrap(),
        Some(ActionRecord {
            request_digest: "d1".into(),
            answer: None
        })
    );
    s.answer(&retry_k1, r#"{"ok":true}"#.into()).await.unwrap();
    s.answer(&retry_k1, "{}".into()).await.unwrap();
    let stored = ActionRecord {
        request_digest: "d1".into(),
        answer: Some(ActionAnswer::Applied(r#"{"ok":true}"#.into())),
    };
    assert_eq!(s.action(&retry_k1).await.unwrap(), Some(stored.clone()));
    let events_before = s.timeline(&id, 0, 100).await.unwrap().len();
    assert_eq!(
        s.act(request(
            retry_k1.clone(),
            "d1",
            StepState::OutcomeUnknown,
            Ok(manual_retry()),
            T0 + 20_001
        ))
        .await
        .unwrap(),
        ActionOutcome::Replayed(stored)
    );
    assert_eq!(
        s.act(request(
            retry_k1.clone(),
            "d2",
            StepState::OutcomeUnknown,
            Ok(manual_retry()),
            T0 + 20_002
        ))
        .await
        .unwrap(),
        ActionOutcome::KeyConflict
    );
    assert_eq!(s.timeline(&id, 0, 100).await.unwrap().len(), events_before);

    // The manual retry is claimed as such, and the uncertainty is settled.
    let c = claim(&s, "w2", T0 + 20_000, 10).await.remove(0);
    assert_eq!(
        (c.trigger, c.attempt_number, c.uncertain_since),
        (Trigger::ManualRetry, 3, None)
    );

    // A leased step is never touched: the stale answer is stored.
    let k2 = action_scope(&id, "a", "resolve", "k2");
    let stale = s
        .act(request(
            k2.clone(),
            "d",
            StepState::Running,
            Ok(StepChange::Terminal {
                state: StepState::FailedTerminal,
                note: "given up".into(),
            }),
            T0 + 20_003,
        ))
        .await
        .unwrap();
    assert_eq!(stale, ActionOutcome::Refused(self::stale()));
    assert_eq!(
        s.action(&k2).await.unwrap().unwrap().answer,
        Some(ActionAnswer::Refused(self::stale()))
    );
    assert_eq!(s.steps(&id).await.unwrap()[0].state, StepState::Running);
    end(&s, &c, StepState::WaitingForReview, T0 + 20_004).await;

    // A step that moved since the decision: stale as well.
    let k3 = action_scope(&id, "a", "retry", "k3");
    let stale = s
        .act(request(
            k3.clone(),
            "d",
            StepState::OutcomeUnknown,
            Ok(manual_retry()),
            T0 + 20_005,
        ))
        .await
        .unwrap();
    assert!(
        matches!(&stale, ActionOutcome::Refused(r) if r.code == "step_moved"),
        "{stale:?}"
    );
    assert_eq!(
        s.steps(&id).await.unwrap()[0].state,
        StepState::WaitingForReview
    );

    // A refusal is stored under its key and changes nothing.
    let k4 = action_scope(&id, "a", "retry", "k4");
    let refusal = StoredRefusal {
        code: "not_idempotent".into(),
        message: "a retry could do it twice".into(),
        details: vec![serde_json::json!({"step": "a"})],
    };
    assert_eq!(
        s.act(request(
            k4.clone(),
            "d",
            StepState::WaitingForReview,
            Err(refusal.clone()),
            T0 + 20_006
        ))
        .await
        .unwrap(),
        ActionOutcome::Refused(refusal.clone())
    );
    assert_eq!(
        s.action(&k4).await.unwrap(),
        Some(ActionRecord {
            request_digest: "d".into(),
            answer: Some(ActionAnswer::Refused(refusal.clone()))
        })
    );
    assert_eq!(
        s.act(request(
            k4,
            "d",
            StepState::WaitingForReview,
            Ok(manual_retry()),
            T0 + 20_007
        ))
        .await
        .unwrap(),
        ActionOutcome::Replayed(ActionRecord {
            request_digest: "d".into(),
            answer: Some(ActionAnswer::Refused(refusal))
        })
    );

    // Escalation marks the step for someone else and leaves its state alone.
    let mark = json!({"note": "please look", "by": "operator", "at": T0 + 20_008});
    let escalated = s
        .act(request(
            action_scope(&id, "a", "escalate", "k5"),
            "d",
            StepState::WaitingForReview,
            Ok(StepChange::Escalate(mark.clone())),
            T0 + 20_008,
        ))
        .await
        .unwrap();
    assert_eq!(
        escalated,
        ActionOutcome::Applied {
            workflow_state: WorkflowState::NeedsReview
        }
    );
    let step = &s.steps(&id).await.unwrap()[0];
    assert_eq!(
        (step.state, step.escalated.as_ref()),
        (StepState::WaitingForReview, Some(&mark))
    );

    // Giving up ends the workflow, and starts the key's retention.
    let failed = s
        .act(request(
            action_scope(&id, "a", "resolve", "k6"),
            "d",
            StepState::WaitingForReview,
            Ok(StepChange::Terminal {
                state: StepState::FailedTerminal,
                note: "given up".into(),
            }),
            T0 + 20_009,
        ))
        .await
        .unwrap();
    assert_eq!(
        failed,
        ActionOutcome::Applied {
            workflow_state: WorkflowState::Failed
        }
    );
    let step = &s.steps(&id).await.unwrap()[0];
    assert_eq!(
        (step.state, step.note.as_deref()),
        (StepState::FailedTerminal, Some("given up"))
    );
    let w = s.workflow(&id).await.unwrap().unwrap();
    assert_eq!(w.ended_at, Some(T0 + 20_009));
    assert_eq!(
        s.lookup_key(&scope("alice", "k"), T0 + 20_009)
            .await
            .unwrap()
            .unwrap()
            .expires_at,
        Some(T0 + 20_009 + 10_000)
    );
}

pub async fn a_manual_receipt_releases_dependents<S: Store>(s: S) {
    let id = workflow(&s, "k", &[("a", &[]), ("b", &["a"])], T0).await;
    let c = claim(&s, "w1", T0, 10).await.remove(0);
    end(&s, &c, StepState::OutcomeUnknown, T0 + 1).await;
    let mut manual = receipt(T0 + 2, "a");
    manual.evidence_kind = EvidenceKind::Manual;
    manual.author = Some("operator".into());
    manual.reason = Some("the provider confirmed by phone".into());
    manual.evidence = Some("ticket 42".into());
    let applied = s
        .act(request(
            action_scope(&id, "a", "resolve", "k1"),
            "d",
            StepState::OutcomeUnknown,
            Ok(StepChange::Succeed(Box::new(manual.clone()))),
            T0 + 2,
        ))
        .await
        .unwrap();
    assert_eq!(
        applied,
        ActionOutcome::Applied {
            workflow_state: WorkflowState::Running
        }
    );
    let steps = s.steps(&id).await.unwrap();
    assert_eq!(steps[0].state, StepState::Succeeded);
    assert_eq!(steps[0].receipt_id.as_ref(), Some(&manual.receipt_id));
    assert_eq!(
        (steps[1].state, steps[1].ready_at),
        (StepState::Ready, Some(T0 + 2))
    );
    let receipts = s.receipts(&id).await.unwrap();
    assert_eq!(receipts.len(), 1);
    // The manual receipt names the step's latest attempt.
    assert_eq!(receipts[0].attempt_id.as_ref(), Some(&c.attempt_id));
    assert_eq!(receipts[0].evidence_kind, EvidenceKind::Manual);
    assert_eq!(receipts[0].author.as_deref(), Some("operator"));
    assert_eq!(receipts[0].evidence.as_deref(), Some("ticket 42"));
    let texts: Vec<_> = s
        .timeline(&id, 0, 100)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.text)
        .collect();
    assert!(
        texts.contains(&"Released b after its dependencies succeeded".to_string()),
        "{texts:?}"
    );
    let next = claim(&s, "w1", T0 + 3, 10).await.remove(0);
    assert_eq!(next.fence.step, "b");
    assert_eq!(next.context.receipts, receipts);
    assert_eq!(
        succeed(&s, &next, T0 + 4).await.workflow_state,
        WorkflowState::Completed
    );
}
