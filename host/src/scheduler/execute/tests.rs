//! The attempt's pure decisions, with fixed times and samples: what a retryable failure
//! does to the step (`retry_or_fail`). The claim and the step built here serve the
//! preflight's tests too.

use super::*;
use crate::intent::{AttemptId, Subject, WorkflowId};
use crate::workflow::{InputMapping, RequestedCapabilities, RetryPolicy, StepId};

/// The claim of attempt `number` of step `deliver`, in a workflow due at `deadline_at`.
pub(super) fn claimed(number: u32, deadline_at: Millis) -> Claimed {
    Claimed {
        fence: crate::store::Fence {
            workflow_id: WorkflowId("wf_1".into()),
            step: "deliver".into(),
            lease_token: "lease".into(),
        },
        attempt_id: AttemptId("att_1".into()),
        attempt_number: number,
        trigger: Trigger::Initial,
        workflow: "document-delivery".into(),
        subject: Subject("billing-service".into()),
        definition_version: 1,
        lease_expires_at: 0,
        deadline_at,
        attempts_used: number,
        external_calls_used: 0,
        runtime_used_ms: 0,
        cost_used: 0,
        recovery_queries_used: 0,
        budget_added: crate::budget::Amounts::default(),
        uncertain_since: None,
        key_remembered_until: None,
        policy_exception: None,
        trace_parent: None,
        environment: None,
        key_step: None,
        adapter: None,
        item: None,
        context: crate::store::StepContext::default(),
    }
}

/// The adapter step `deliver` ("Deliver"), under the default retry policy: 5 attempts,
/// 200 ms first, doubling, jitter 0.2.
pub(super) fn step() -> StepDef {
    StepDef {
        id: StepId::new("deliver").unwrap(),
        label: "Deliver".into(),
        kind: StepKind::Adapter,
        component: "http-delivery".into(),
        version_req: semver::VersionReq::STAR,
        after: Vec::new(),
        input: InputMapping::default(),
        outputs: Vec::new(),
        retry: RetryPolicy::default(),
        timeout: Duration::from_secs(1),
        capabilities: RequestedCapabilities::default(),
        milestone: None,
        compensation: None,
        cost: 1,
        approval: None,
        batch: None,
    }
}

const NOW: Millis = 10_000;
const FAR: Millis = 1_000_000;

fn retry_at(ready_at: Millis) -> StepTransition {
    StepTransition::Retry {
        ready_at,
        next_trigger: Trigger::Retry,
        uncertain_since: None,
    }
}

#[test]
fn a_retryable_failure_is_retried_after_the_backoff_from_now() {
    let (t, event) = retry_or_fail(&claimed(1, FAR), &step(), None, "boom".into(), NOW, 0.0);
    assert_eq!(t, retry_at(NOW + 200));
    assert_eq!(event.kind, EventKind::Action);
    assert_eq!(event.step.as_deref(), Some("deliver"));
    assert_eq!(event.attempt_id.as_deref(), Some("att_1"));
    assert_eq!(event.text, "Retry scheduled in 200 ms after: boom");
    // The sample shortens the wait by up to the jitter; the attempt number grows it.
    let (t, _) = retry_or_fail(&claimed(1, FAR), &step(), None, "boom".into(), NOW, 1.0);
    assert_eq!(t, retry_at(NOW + 160));
    let (t, _) = retry_or_fail(&claimed(3, FAR), &step(), None, "boom".into(), NOW, 0.0);
    assert_eq!(t, retry_at(NOW + 800));
}

#[test]
fn a_providers_retry_after_is_a_floor() {
    let after = Some(Duration::from_secs(5));
    let (t, event) = retry_or_fail(&claimed(1, FAR), &step(), after, "slow".into(), NOW, 0.5);
    assert_eq!(t, retry_at(NOW + 5_000));
    assert_eq!(event.text, "Retry scheduled in 5000 ms after: slow");
}

#[test]
fn a_rate_limit_or_an_unavailability_that_says_when_gives_the_floor() {
    use crate::contract::EffectError;
    let limited = EffectError::RateLimited {
        retry_after_ms: 1_500,
        message: "slow down".into(),
    };
    let later = EffectError::Unavailable {
        message: "maintenance".into(),
        retry_after_ms: Some(30_000),
    };
    let unsaid = EffectError::Unavailable {
        message: "busy".into(),
        retry_after_ms: None,
    };
    assert_eq!(
        super::adapter::retry_after_of(&limited),
        Some(Duration::from_millis(1_500))
    );
    assert_eq!(
        super::adapter::retry_after_of(&later),
        Some(Duration::from_secs(30))
    );
    assert_eq!(super::adapter::retry_after_of(&unsaid), None);
}

#[test]
fn the_last_attempt_fails_the_step_for_good() {
    let (t, event) = retry_or_fail(&claimed(5, FAR), &step(), None, "boom".into(), NOW, 0.0);
    assert_eq!(t, StepTransition::Terminal(StepState::FailedTerminal));
    assert_eq!(event.kind, EventKind::Conclusion);
    assert_eq!(event.text, "Deliver failed after 5 attempts: boom");
}

#[test]
fn a_retry_that_could_not_start_before_the_deadline_fails_the_step() {
    // Due exactly when the retry would start: still in time.
    let (t, _) = retry_or_fail(
        &claimed(1, NOW + 200),
        &step(),
        None,
        "boom".into(),
        NOW,
        0.0,
    );
    assert_eq!(t, retry_at(NOW + 200));
    let (t, event) = retry_or_fail(
        &claimed(1, NOW + 199),
        &step(),
        None,
        "boom".into(),
        NOW,
        0.0,
    );
    assert_eq!(t, StepTransition::Terminal(StepState::FailedTerminal));
    assert_eq!(
        event.text,
        "Deliver failed after 1 attempts: boom; the next attempt could not start before the workflow's deadline"
    );
    // A provider's enormous retry-after is no retry in time, not an overflow.
    let after = Some(Duration::from_millis(u64::MAX));
    let (t, _) = retry_or_fail(&claimed(1, FAR), &step(), after, "later".into(), NOW, 0.0);
    assert_eq!(t, StepTransition::Terminal(StepState::FailedTerminal));
}

/// An item row runs its batch step's adapter on its own item, under its own id; its
/// compensation reverses it under `<step>[<key>].compensate`; a row that names an item of a
/// step without `for_each` is not a step of the definition.
#[test]
fn an_item_row_runs_its_batch_steps_adapter_under_its_own_id() {
    let source = include_str!("../../../tests/good/batch.toml");
    let def = crate::workflow::parse("batch.toml", source).unwrap();
    let item = step_of(&def, "deliver[a@example.com]").expect("an item of `deliver`");
    assert_eq!(item.id.as_str(), "deliver[a@example.com]");
    assert_eq!(item.component, "http-delivery");
    assert!(item.batch.is_none(), "an item is one effect");
    let compensation = step_of(&def, "deliver[a@example.com].compensate").expect("its reversal");
    assert_eq!(
        compensation.id.as_str(),
        "deliver[a@example.com].compensate"
    );
    let plain = crate::workflow::parse(
        "plain.toml",
        &source
            .replace("for_each = \"$input.recipients\"\n", "")
            .replace("item_key = \"$item.email\"\n", "")
            .replace("max_parallel = 4\n", "")
            .replace("\"$item.email\"", "\"$input.subject\""),
    )
    .unwrap();
    assert!(step_of(&plain, "deliver[a@example.com]").is_none());
}
