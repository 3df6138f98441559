use super::*;
use CompensationTrigger::*;
use StepState::*;

fn step(id: &str, role: StepRole, state: StepState) -> CourseStep {
    CourseStep {
        id: id.into(),
        role: Some(role),
        state,
        uncertain: false,
        receipt: None,
        compensate_on: vec![],
        checkpoint: None,
        batch: false,
    }
}

fn delivered(id: &str, on: &[CompensationTrigger]) -> CourseStep {
    CourseStep {
        receipt: Some(Some(format!("dlv_{id}"))),
        compensate_on: on.to_vec(),
        ..step(id, StepRole::Adapter, Succeeded)
    }
}

fn deps(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

#[test]
fn compensation_ids_name_their_step() {
    assert_eq!(compensation_id("deliver"), "deliver.compensate");
    assert_eq!(compensated_step("deliver.compensate"), Some("deliver"));
    assert_eq!(compensated_step("deliver"), None);
}

#[test]
fn the_first_outcome_that_holds_is_the_answer() {
    let handler = |s| step("render", StepRole::Handler, s);
    let adapter = |s| step("deliver", StepRole::Adapter, s);
    assert_eq!(
        cancel_outcome(&[handler(Succeeded), adapter(Pending)]),
        CancelOutcome::Cancelled
    );
    assert_eq!(
        cancel_outcome(&[handler(Running), adapter(Pending)]),
        CancelOutcome::Stopping
    );
    // Before checkpoint 3 nothing was sent: the attempt is fenced, the step cancelled.
    let before = CourseStep {
        checkpoint: Some(2),
        ..adapter(Running)
    };
    assert_eq!(cancel_outcome(&[before]), CancelOutcome::Cancelled);
    let sent = CourseStep {
        checkpoint: Some(3),
        ..adapter(Running)
    };
    assert_eq!(
        cancel_outcome(&[handler(Running), sent.clone()]),
        CancelOutcome::AwaitingOutcome
    );
    assert_eq!(awaited(&[sent]), ["deliver"]);
    let recovering = CourseStep {
        uncertain: true,
        ..adapter(FailedRetryable)
    };
    assert_eq!(
        cancel_outcome(&[recovering]),
        CancelOutcome::AwaitingOutcome
    );
    assert_eq!(
        cancel_outcome(&[adapter(OutcomeUnknown), delivered("other", &[])]),
        CancelOutcome::Compensating
    );
}

#[test]
fn a_cancellation_ends_what_had_no_effect_and_leaves_what_may_have() {
    let retrying = step("a", StepRole::Adapter, FailedRetryable);
    let recovering = CourseStep {
        uncertain: true,
        ..step("b", StepRole::Adapter, FailedRetryable)
    };
    let steps = [
        step("v", StepRole::Handler, Succeeded),
        retrying,
        recovering,
        step("c", StepRole::Handler, Running),
        step("d", StepRole::Handler, Pending),
        step("e", StepRole::Adapter, OutcomeUnknown),
    ];
    let s = settle(true, &steps, &[]);
    assert_eq!(s.cancel, ["a", "d"]);
    assert!(s.start.is_empty());
    assert_eq!(
        s.events.last().unwrap().text,
        "Cancelled before they had any effect: a, d"
    );
    assert!(settle(false, &steps, &[]).is_empty());
}

#[test]
fn effects_are_compensated_on_their_triggers_in_reverse_dependency_order() {
    let steps = [
        delivered("reserve", &[WorkflowCancelled]),
        delivered("charge", &[WorkflowNotCompleted]),
        delivered("notify", &[WorkflowFailed]),
        delivered("ship", &[WorkflowCancelled]),
    ];
    let graph = deps(&[
        ("charge", "reserve"),
        ("notify", "charge"),
        ("ship", "notify"),
    ]);
    let s = settle(true, &steps, &graph);
    let started: Vec<(&str, Vec<String>)> = s
        .start
        .iter()
        .map(|c| (c.of.as_str(), c.after.clone()))
        .collect();
    // `notify` is compensated only on failure; `reserve` waits for both later reversals.
    assert_eq!(
        started,
        [
            (
                "reserve",
                vec!["charge.compensate".into(), "ship.compensate".into()]
            ),
            ("charge", vec!["ship.compensate".into()]),
            ("ship", vec![]),
        ]
    );
    assert_eq!(
        s.events[0].text,
        "Compensation reserve.compensate scheduled to reverse the effect of reserve (dlv_reserve), after charge.compensate, ship.compensate"
    );
}

#[test]
fn a_terminal_failure_compensates_and_a_retryable_one_never_does() {
    let failed = [
        delivered("deliver", &[WorkflowFailed]),
        step("archive", StepRole::Handler, FailedTerminal),
    ];
    let s = settle(false, &failed, &[]);
    assert_eq!(s.start.len(), 1);
    assert_eq!(s.start[0].id, "deliver.compensate");
    let retrying = [
        delivered("deliver", &[WorkflowFailed]),
        step("archive", StepRole::Handler, FailedRetryable),
    ];
    assert!(settle(false, &retrying, &[]).is_empty());
    // An uncertain effect is never compensated: only a receipt says it happened.
    let unknown = [CourseStep {
        compensate_on: vec![WorkflowCancelled],
        ..step("deliver", StepRole::Adapter, OutcomeUnknown)
    }];
    assert!(settle(true, &unknown, &[]).start.is_empty());
}

#[test]
fn a_committed_compensation_marks_its_original_compensated_once() {
    let mut original = delivered("deliver", &[WorkflowCancelled]);
    original.state = Compensating;
    let comp = step("deliver.compensate", StepRole::Compensation, Succeeded);
    let s = settle(true, &[original.clone(), comp.clone()], &[]);
    assert_eq!(s.compensated, ["deliver"]);
    assert!(s.start.is_empty());
    original.state = Compensated;
    assert!(settle(true, &[original, comp], &[]).is_empty());
}

#[test]
fn consequences_list_the_effects_made_and_whether_they_are_reversed() {
    let steps = [
        step("validate", StepRole::Handler, Succeeded),
        delivered("deliver", &[WorkflowCancelled]),
        delivered("notify", &[WorkflowFailed]),
    ];
    let c = consequences(&steps, CANCELLATION_TRIGGERS);
    assert_eq!(c.len(), 2);
    assert_eq!(c[0].compensation, Compensability::WillCompensate);
    assert_eq!(c[0].external_reference.as_deref(), Some("dlv_deliver"));
    assert_eq!(c[1].compensation, Compensability::CannotCompensate);
}

#[test]
fn a_cancellation_is_refused_where_it_has_nothing_to_do() {
    let done = [delivered("deliver", &[])];
    assert!(decide_cancel(WorkflowState::Failed, false, &done).is_err());
    assert!(
        decide_cancel(WorkflowState::Completed, false, &done)
            .unwrap_err()
            .contains("\"withdraw\": true")
    );
    // Nothing of it can be reversed: a withdrawal would claim what it cannot do.
    assert!(
        decide_cancel(WorkflowState::Completed, true, &done)
            .unwrap_err()
            .contains("nothing to withdraw")
    );
    let compensable = [delivered("deliver", &[WorkflowCancelled])];
    let (outcome, consequences) =
        decide_cancel(WorkflowState::Completed, true, &compensable).unwrap();
    assert_eq!(outcome, CancelOutcome::Compensating);
    let label = |id: &str| format!("<{id}>");
    assert_eq!(
        cancel_message(outcome, &compensable, &consequences, &label),
        "Stopping remaining work; reversing <deliver> (dlv_deliver)"
    );
    let waiting = [CourseStep {
        checkpoint: Some(4),
        ..step("deliver", StepRole::Adapter, Running)
    }];
    let (outcome, c) = decide_cancel(WorkflowState::Running, false, &waiting).unwrap();
    assert!(
        cancel_message(outcome, &waiting, &c, &label)
            .starts_with("Cancel requested; awaiting the outcome of <deliver>")
    );
}

#[test]
fn a_cancellation_fences_only_a_steps_request_leaving() {
    assert!(super::fenced_by_cancellation(3, "deliver"));
    for checkpoint in [1, 2, 4, 5, 6] {
        assert!(!super::fenced_by_cancellation(checkpoint, "deliver"));
    }
    // A compensation reverses an effect: no cancellation stops it.
    assert!(!super::fenced_by_cancellation(
        3,
        &super::compensation_id("deliver")
    ));
}
