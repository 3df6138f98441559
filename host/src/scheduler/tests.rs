//! The scheduler driven tick by tick on a real SQLite store in a temporary directory, with
//! the built `http-delivery` component and the provider simulator on loopback: no
//! background loop runs, so each test says exactly when the host looks.

use super::{Scheduler, SchedulerConfig, Tick};
use crate::capabilities::{AdapterPolicy, HostPolicy, HostRule, SecretSource};
use crate::catalog::{Components, Deployments};
use crate::clock::{Clock, SystemClock};
use crate::context::Context;
use crate::intent::{StepState, WorkflowId};
use crate::runtime::{Runtime, RuntimeConfig};
use crate::sim::{ProviderSim, RunningSim, SimConfig};
use crate::store::sqlite::SqliteStore;
use crate::store::{
    ActiveChange, ActiveTarget, ClaimRequest, ComponentStore, ExecutorStore, NewComponent,
    ReadStore,
};
use axum::body::Body;
use axum::http::Request;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tower::ServiceExt;

use crate::wait;

/// One adapter step delivering through the provider simulator.
const DEFINITION: &str = r#"
name = "courier"
version = 1
deadline = "1h"

[input_schema]
type = "object"

[[steps]]
id = "deliver"
label = "Deliver the letter"
kind = "adapter"
component = "http-delivery"
version = "^1"
timeout = "60s"

[steps.input]
recipient = "$input.recipient"
document = "$input.document"
document_digest = "$input.document_digest"

[steps.capabilities]
outbound_hosts = ["$base_url"]
secrets = ["provider_token"]
"#;

/// A lease short enough that renewals happen within a test (one every 200 ms).
const LEASE: Duration = Duration::from_millis(600);

struct Harness {
    _dir: tempfile::TempDir,
    store: SqliteStore,
    scheduler: Arc<Scheduler<SqliteStore>>,
    deployments: Arc<Deployments<SqliteStore>>,
    components: Arc<Components>,
    clock: Arc<SystemClock>,
    api: axum::Router,
    sim: RunningSim,
}

/// One handler step that may be attempted once: any failure of its plugin ends it.
const ONE_TRY: &str = r#"
name = "one-try"
version = 1
deadline = "1h"

[input_schema]
type = "object"

[[steps]]
id = "validate"
label = "Validate"
kind = "handler"
component = "validate-document"
version = "^1"
timeout = "30s"
outputs = ["title", "recipient", "body"]

[steps.input]
title = "$input.title"
recipient = "$input.recipient"
body = "$input.body"

[steps.retry]
max_attempts = 1
"#;

/// Two handler steps, the second reading the first's receipt.
const PAIR: &str = r#"
name = "pair"
version = 1
deadline = "1h"

[input_schema]
type = "object"

[[steps]]
id = "validate"
label = "Validate"
kind = "handler"
component = "validate-document"
version = "^1"
timeout = "30s"
outputs = ["title", "recipient", "body"]

[steps.input]
title = "$input.title"
recipient = "$input.recipient"
body = "$input.body"

[[steps]]
id = "again"
label = "Validate again"
kind = "handler"
component = "validate-document"
version = "^1"
after = ["validate"]
timeout = "30s"
outputs = ["title"]

[steps.input]
title = "$steps.validate.output.title"
recipient = "$steps.validate.output.recipient"
body = "$steps.validate.output.body"
"#;

impl Harness {
    async fn new() -> Self {
        Self::with(RuntimeConfig::default().max_instances).await
    }

    /// The harness with room for `max_instances` calls at once in the runtime.
    async fn with(max_instances: u32) -> Self {
        Self::build(max_instances, SchedulerConfig::default().max_concurrent).await
    }

    /// The harness with `max_instances` in the runtime and a scheduler that runs at most
    /// `max_concurrent` calls at once.
    async fn build(max_instances: u32, max_concurrent: usize) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("docket.db"))
            .await
            .unwrap();
        let clock = SystemClock::new();
        let sim = ProviderSim::new(SimConfig::default())
            .spawn("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let url = sim.base_url();
        let mut policy = HostPolicy::default();
        policy.adapters.insert(
            "http-delivery".into(),
            AdapterPolicy {
                allow_hosts: vec![url.parse::<HostRule>().unwrap()],
                allow_secrets: ["provider_token".to_string()].into(),
                settings: [("base_url".to_string(), url.clone())].into(),
                digests: Default::default(),
                allow_private: false,
                webhook_key: None,
            },
        );
        let mut secrets = SecretSource::default();
        secrets.insert("provider_token", SimConfig::DEFAULT_TOKEN);
        let cache =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/test-unit-component-cache");
        let runtime = Runtime::new(RuntimeConfig {
            cache_dir: Some(cache),
            max_instances,
            ..RuntimeConfig::default()
        })
        .unwrap();
        let components = Components::new(runtime, policy);
        for name in ["http-delivery", "validate-document"] {
            components
                .load_file(std::path::Path::new(crate::guests::path(name).unwrap()))
                .await
                .unwrap();
        }
        let components = Arc::new(components);
        let deployments = Arc::new(Deployments::new(store.clone()));
        for (file, text) in [
            ("courier.toml", DEFINITION),
            ("one-try.toml", ONE_TRY),
            ("pair.toml", PAIR),
        ] {
            deployments
                .deploy(file, text, components.as_ref(), clock.now_ms())
                .await
                .unwrap();
        }
        let scheduler = Scheduler::new(
            store.clone(),
            deployments.clone(),
            components.clone(),
            Arc::new(secrets),
            clock.clone(),
            SchedulerConfig {
                owner: "unit-host".into(),
                lease: LEASE,
                max_concurrent,
                ..SchedulerConfig::default()
            },
            Arc::new(tokio::sync::Notify::new()),
        );
        let api = crate::api::router(Context::new(
            store.clone(),
            deployments.clone(),
            clock.clone(),
        ));
        Self {
            _dir: dir,
            store,
            scheduler,
            deployments,
            components,
            clock,
            api,
            sim,
        }
    }

    /// Admits one delivery through the API; returns its workflow id.
    async fn submit(&self, key: &str) -> WorkflowId {
        let input = json!({
            "recipient": "reader@example.com", "document": "Dear reader", "document_digest": "sha256:0"});
        self.submit_to("courier", key, input).await
    }

    /// Admits one intent of `workflow` through the API; returns its workflow id.
    async fn submit_to(&self, workflow: &str, key: &str, input: Value) -> WorkflowId {
        let body = json!({"workflow": workflow, "input": input});
        let request = Request::post("/v1/intents")
            .header("Idempotency-Key", key)
            .body(Body::from(body.to_string()))
            .unwrap();
        let response = self.api.clone().oneshot(request).await.unwrap();
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        let created: Value = serde_json::from_slice(&bytes).unwrap();
        WorkflowId(
            created["workflow_id"]
                .as_str()
                .expect("admitted")
                .to_string(),
        )
    }

    /// Cancels the workflow through the API; returns the status and the answer.
    async fn cancel(&self, id: &WorkflowId, key: &str) -> (u16, Value) {
        let request = Request::post(format!("/v1/workflows/{id}/cancel"))
            .header("Idempotency-Key", key)
            .body(Body::from(json!({"reason": "changed my mind"}).to_string()))
            .unwrap();
        let response = self.api.clone().oneshot(request).await.unwrap();
        let status = response.status().as_u16();
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        (status, serde_json::from_slice(&bytes).unwrap())
    }

    async fn timeline(&self, id: &WorkflowId) -> String {
        self.store
            .timeline(id, 0, 1000)
            .await
            .unwrap()
            .iter()
            .map(|e| format!("{}\n", e.text))
            .collect()
    }

    async fn deliver_state(&self, id: &WorkflowId) -> StepState {
        self.store.steps(id).await.unwrap()[0].state
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn transient_renewal_failures_do_not_lose_the_lease() {
    let h = Harness::new().await;
    // The provider takes 1.5 s to answer: the attempt needs several renewals.
    h.sim
        .sim()
        .set_faults(json!({"slow_next": 1, "slow_ms": 1500}))
        .unwrap();
    let id = h.submit("transient-1").await;
    // The first two renewals fail as a busy database would.
    h.store.fail_next_renewals(2);
    let claimed = h
        .scheduler
        .clone()
        .claim_tick(h.clock.now_ms())
        .await
        .unwrap();
    assert_eq!(claimed, 1);
    // Past the first lease (600 ms) the lease must still be this host's: recovery takes
    // nothing.
    let ticks = h.scheduler.ticks();
    wait::until("three renewal rounds", Duration::from_secs(20), || async {
        let n = ticks.get(Tick::LeaseRenewal);
        if n >= 3 {
            Ok(())
        } else {
            Err(format!("{n} rounds"))
        }
    })
    .await;
    assert_eq!(
        h.scheduler.recovery_tick(h.clock.now_ms()).await.unwrap(),
        0
    );
    let state = wait::until("the delivery to end", Duration::from_secs(30), || async {
        match h.deliver_state(&id).await {
            StepState::Running | StepState::Ready => Err("still running".into()),
            other => Ok(other),
        }
    })
    .await;
    let timeline = h.timeline(&id).await;
    assert_eq!(state, StepState::Succeeded, "{timeline}");
    assert!(!timeline.contains("lost its lease"), "{timeline}");
    assert_eq!(h.sim.sim().world().len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lost_lease_cancels_the_running_call_and_the_attempt_says_so() {
    let h = Harness::new().await;
    // The provider commits at once and answers after 20 s: long after the lease is lost.
    h.sim
        .sim()
        .set_faults(json!({"slow_next": 1, "slow_ms": 20_000}))
        .unwrap();
    let id = h.submit("lost-1").await;
    assert_eq!(
        h.scheduler
            .clone()
            .claim_tick(h.clock.now_ms())
            .await
            .unwrap(),
        1
    );
    // Once the request has reached the provider, the lease is taken away (as a host that
    // lost contact finds when it comes back): it ends as of now, and recovery takes over.
    wait::until(
        "the request at the provider",
        Duration::from_secs(20),
        || async {
            let n = h.sim.sim().world().len();
            if n == 1 {
                Ok(())
            } else {
                Err(format!("{n} deliveries"))
            }
        },
    )
    .await;
    h.store
        .release_leases("unit-host", h.clock.now_ms())
        .await
        .unwrap();
    assert_eq!(
        h.scheduler
            .recovery_tick(h.clock.now_ms() + 1)
            .await
            .unwrap(),
        1
    );
    // The next renewal finds the lease gone and cancels the call, well before the provider
    // would answer.
    let timeline = wait::until(
        "the cancellation on the timeline",
        Duration::from_secs(10),
        || async {
            let timeline = h.timeline(&id).await;
            if timeline.contains("the call was cancelled") {
                Ok(timeline)
            } else {
                Err(timeline)
            }
        },
    )
    .await;
    assert!(
        timeline.contains("Attempt 1 lost its lease while running"),
        "{timeline}"
    );
    let attempts = h.store.attempts(&id, "deliver", 0, 10).await.unwrap();
    assert_eq!(attempts.len(), 1);
    assert!(
        attempts[0]
            .observation
            .as_deref()
            .is_some_and(|o| o.contains("expired") || o.contains("cancelled")),
        "{:?}",
        attempts[0].observation
    );
    // Recovery decided the step by the contract (a query), and nothing was sent twice.
    assert!(
        timeline.contains("query by the stable reference"),
        "{timeline}"
    );
    assert!(matches!(
        h.deliver_state(&id).await,
        StepState::Ready | StepState::FailedRetryable
    ));
    assert_eq!(h.sim.sim().world().len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lease_that_expired_before_anything_was_sent_makes_the_step_ready_again() {
    let h = Harness::new().await;
    let id = h.submit("expired-1").await;
    // A claim whose worker never gets to run (it died right after claiming).
    let now = h.clock.now_ms();
    let claimed = h
        .store
        .claim(ClaimRequest {
            owner: "gone-host".into(),
            now,
            lease_ms: 1_000,
            limit: 10,
            gates: Vec::new(),
            urgent: false,
        })
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    // Before the lease runs out, recovery leaves it alone.
    assert_eq!(h.scheduler.recovery_tick(now + 999).await.unwrap(), 0);
    assert_eq!(h.deliver_state(&id).await, StepState::Running);
    // After it, the step is ready again: nothing was sent, so nothing is uncertain.
    assert_eq!(h.scheduler.recovery_tick(now + 1_001).await.unwrap(), 1);
    let step = &h.store.steps(&id).await.unwrap()[0];
    assert!(
        matches!(step.state, StepState::Ready | StepState::FailedRetryable),
        "{step:?}"
    );
    let timeline = h.timeline(&id).await;
    assert!(
        timeline.contains("nothing was sent, the step is ready again"),
        "{timeline}"
    );
    assert_eq!(h.scheduler.ticks().get(Tick::Recovery), 2);
    assert!(h.sim.sim().world().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_registry_tick_takes_up_an_activation_made_elsewhere() {
    let h = Harness::new().await;
    let path = crate::guests::path("http-delivery-2").expect("built");
    let bytes = tokio::fs::read(path).await.unwrap();
    let digest = crate::intent::sha256_digest(&bytes);
    // Another host (or `docket adapter deploy` and `activate`) stored and activated 2.0.0.
    h.store
        .store_component(NewComponent {
            digest: digest.clone(),
            name: "http-delivery".into(),
            version: "2.0.0".into(),
            kind: "adapter".into(),
            bytes,
            registered_at: h.clock.now_ms(),
            author: "deployer".into(),
        })
        .await
        .unwrap();
    h.store
        .set_active(ActiveChange {
            name: "http-delivery".into(),
            target: ActiveTarget::Digest(digest.clone()),
            author: "deployer".into(),
            now: h.clock.now_ms(),
        })
        .await
        .unwrap();
    assert_ne!(
        h.components.active_digest("http-delivery"),
        Some(digest.clone())
    );
    let ticks = h.scheduler.ticks();
    crate::catalog::catch_up(&h.components, &h.store, h.clock.now_ms()).await;
    ticks.done(Tick::Registry);
    assert_eq!(h.components.active_digest("http-delivery"), Some(digest));
    assert_eq!(ticks.get(Tick::Registry), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_registry_tick_warns_once_of_a_deadline_drawing_near_a_workflow_in_review() {
    let h = Harness::new().await;
    let id = h.submit("near-1").await;
    let c = h
        .store
        .claim(ClaimRequest {
            owner: "unit-host".into(),
            now: h.clock.now_ms(),
            lease_ms: 60_000,
            limit: 1,
            gates: Vec::new(),
            urgent: false,
        })
        .await
        .unwrap()
        .remove(0);
    // The attempt ends with its outcome unknown and nothing automatic left: a person decides.
    h.store
        .finish(crate::store::FinishRequest {
            fence: c.fence.clone(),
            attempt_id: c.attempt_id.clone(),
            checkpoint: 3,
            facts: Default::default(),
            transition: crate::store::StepTransition::Terminal(StepState::OutcomeUnknown),
            note: None,
            log: json!(null),
            runtime_ms: 0,
            events: vec![],
            now: h.clock.now_ms(),
            expired_before: None,
            decided_at: None,
            blocked: None,
            charge: Default::default(),
        })
        .await
        .unwrap();
    let wf = h.store.workflow(&id).await.unwrap().unwrap();
    assert_eq!(wf.state, crate::intent::WorkflowState::NeedsReview);
    let warned = |timeline: &str| timeline.matches("Deadline approaching").count();
    // Early in its one hour: nothing to tell.
    crate::catalog::catch_up(&h.components, &h.store, h.clock.now_ms()).await;
    assert_eq!(warned(&h.timeline(&id).await), 0);
    // Within the last fifth of its span: told once, however often the tick runs.
    h.clock.advance(49 * 60 * 1000);
    for _ in 0..2 {
        crate::catalog::catch_up(&h.components, &h.store, h.clock.now_ms()).await;
    }
    let timeline = h.timeline(&id).await;
    assert_eq!(warned(&timeline), 1, "{timeline}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cancellation_fences_an_attempt_before_its_request_leaves() {
    let h = Harness::new().await;
    let id = h.submit("fence-1").await;
    // Claimed (checkpoint 1), then the cancellation commits before the attempt runs on.
    let mut claimed = h
        .store
        .claim(ClaimRequest {
            owner: "unit-host".into(),
            now: h.clock.now_ms(),
            lease_ms: 60_000,
            limit: 1,
            gates: Vec::new(),
            urgent: false,
        })
        .await
        .unwrap();
    let (status, answer) = h.cancel(&id, "fence-cancel").await;
    assert_eq!(status, 202, "{answer}");
    // Before checkpoint 3 nothing was sent: the cancellation takes effect at once.
    assert_eq!(answer["outcome"], "cancelled", "{answer:#}");
    h.scheduler.clone().execute(claimed.remove(0)).await;
    let timeline = h.timeline(&id).await;
    assert_eq!(
        h.deliver_state(&id).await,
        StepState::Cancelled,
        "{timeline}"
    );
    assert!(
        timeline.contains("stopped it before its request was sent (checkpoint 3)"),
        "{timeline}"
    );
    let attempt = &h.store.attempts(&id, "deliver", 0, 10).await.unwrap()[0];
    assert_eq!(attempt.outcome, crate::intent::AttemptOutcome::Interrupted);
    assert_eq!(attempt.checkpoint, 2);
    let wf = h.store.workflow(&id).await.unwrap().unwrap();
    assert_eq!(wf.state, crate::intent::WorkflowState::Cancelled);
    assert!(h.sim.sim().world().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cancellation_after_the_request_left_awaits_its_outcome() {
    let h = Harness::new().await;
    // The provider commits at once and answers after 1.5 s.
    h.sim
        .sim()
        .set_faults(json!({"slow_next": 1, "slow_ms": 1500}))
        .unwrap();
    let id = h.submit("await-1").await;
    h.scheduler
        .clone()
        .claim_tick(h.clock.now_ms())
        .await
        .unwrap();
    wait::until(
        "the request at the provider",
        Duration::from_secs(20),
        || async {
            let n = h.sim.sim().world().len();
            if n == 1 {
                Ok(())
            } else {
                Err(format!("{n} deliveries"))
            }
        },
    )
    .await;
    let (status, answer) = h.cancel(&id, "await-cancel").await;
    assert_eq!(status, 202, "{answer}");
    assert_eq!(answer["outcome"], "awaiting_outcome", "{answer:#}");
    assert!(
        answer["message"]
            .as_str()
            .unwrap()
            .starts_with("Cancel requested; awaiting the outcome of Deliver the letter"),
        "{answer:#}"
    );
    // The answer arrives: the effect happened, and (nothing compensates it here) it stays,
    // told as an effect the cancellation could not reverse.
    let state = wait::until("the delivery to end", Duration::from_secs(30), || async {
        match h.deliver_state(&id).await {
            StepState::Running | StepState::Ready => Err("still running".into()),
            other => Ok(other),
        }
    })
    .await;
    assert_eq!(state, StepState::Succeeded, "{}", h.timeline(&id).await);
    let wf = h.store.workflow(&id).await.unwrap().unwrap();
    assert_eq!(wf.state, crate::intent::WorkflowState::Cancelled);
    assert_eq!(h.sim.sim().world().len(), 1);
}

/// With every instance of the pool taken, a handler's attempt cannot start: the host's lack
/// of room ends neither the step (allowed one attempt) nor anything else — the step is ready
/// again and runs once there is room, and the refused attempt is not charged to the budget.
#[tokio::test(flavor = "multi_thread")]
async fn a_host_without_room_for_the_plugin_does_not_fail_the_step() {
    let h = Harness::with(1).await;
    let input = json!({"title": "T", "recipient": "a@example.com", "body": "x"});
    let id = h.submit_to("one-try", "no-room", input).await;

    // Fill the pool (the call's instance and the two kept for uploads) with spinning calls.
    let runtime = h.components.runtime().clone();
    let hostile = runtime
        .load_file(std::path::Path::new(
            crate::guests::path("hostile").unwrap(),
        ))
        .await
        .unwrap();
    let hostile = runtime
        .prepare(
            &hostile,
            &crate::capabilities::Grant::new(
                ["http://127.0.0.1:9".parse().unwrap()],
                ["api_token".to_string()],
            ),
            &Default::default(),
        )
        .unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let mut spinners = tokio::task::JoinSet::new();
    for _ in 0..3 {
        let (runtime, hostile, stop) = (runtime.clone(), hostile.clone(), stop.clone());
        spinners.spawn(async move {
            let request = crate::contract::EffectRequest {
                idempotency_key: "k".into(),
                input: r#"{"do": "loop"}"#.into(),
                attempt: 1,
            };
            let env = crate::runtime::CallEnv {
                settings: Arc::new(Default::default()),
                secrets: Arc::new(SecretSource::default()),
                clock: crate::clock::ManualClock::new(0),
                label: "spinner".into(),
            };
            let limits = crate::runtime::CallLimits {
                timeout: Duration::from_secs(60),
            };
            tokio::select! {
                _ = runtime.invoke(&hostile, env, limits, &request) => {}
                _ = stop.cancelled() => {}
            }
        });
    }
    wait::until(
        "the spinning calls to fill the pool",
        Duration::from_secs(20),
        || async {
            let (used, room) = (runtime.instances_in_use(), runtime.instance_capacity());
            if used >= room {
                Ok(())
            } else {
                Err(format!("{used} of {room} instances in use"))
            }
        },
    )
    .await;

    let now = h.clock.now_ms();
    assert_eq!(h.scheduler.clone().claim_tick(now).await.unwrap(), 1);
    let state = wait::until(
        "the refused attempt to end",
        Duration::from_secs(10),
        || async {
            match h.store.steps(&id).await.unwrap()[0].state {
                StepState::Running => Err("still running".into()),
                other => Ok(other),
            }
        },
    )
    .await;
    assert!(
        matches!(state, StepState::Ready | StepState::FailedRetryable),
        "{state:?}: {}",
        h.timeline(&id).await
    );
    let timeline = h.timeline(&id).await;
    assert!(
        timeline.contains("no room to start the plugin")
            && timeline.contains("not charged to the budget"),
        "{timeline}"
    );
    let workflow = h.store.workflow(&id).await.unwrap().unwrap();
    assert_eq!(workflow.attempts_used, 0, "{workflow:?}");
    let scrape = h
        .scheduler
        .metrics()
        .render(&crate::metrics::Snapshot::default(), h.clock.now_ms());
    assert!(
        scrape.contains(r#"docket_plugin_traps_total{kind="capacity"} 1"#),
        "{scrape}"
    );

    // Room again: the step runs and the workflow completes.
    stop.cancel();
    while spinners.join_next().await.is_some() {}
    wait::until(
        "the step to run once there is room",
        Duration::from_secs(10),
        || async {
            let now = h.clock.now_ms();
            h.scheduler.clone().claim_tick(now).await.unwrap();
            match h.store.steps(&id).await.unwrap()[0].state {
                StepState::Succeeded => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unloaded_workflow_runs_its_next_step_in_the_same_worker_without_another_claim() {
    let h = Harness::new().await;
    let input = json!({"title": "T", "recipient": "a@example.com", "body": "x"});
    let id = h.submit_to("pair", "chained", input).await;
    let ticks = h.scheduler.ticks();
    assert_eq!(
        h.scheduler
            .clone()
            .claim_tick(h.clock.now_ms())
            .await
            .unwrap(),
        1
    );
    // No loop runs: only the first step's finish can have claimed the second.
    wait::until(
        "the workflow to complete",
        Duration::from_secs(20),
        || async {
            let workflow = h.store.workflow(&id).await.unwrap().unwrap();
            match workflow.state {
                crate::intent::WorkflowState::Completed => Ok(()),
                other => Err(format!("{other:?}: {}", h.timeline(&id).await)),
            }
        },
    )
    .await;
    assert_eq!(ticks.get(Tick::Claim), 1);
    let steps = h.store.steps(&id).await.unwrap();
    assert!(
        steps
            .iter()
            .all(|s| s.state == StepState::Succeeded && s.attempts == 1),
        "{steps:?}"
    );
    let timeline = h.timeline(&id).await;
    assert_eq!(
        timeline
            .matches("Attempt 1 started (initial) by unit-host")
            .count(),
        2,
        "{timeline}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_admission_with_a_free_slot_starts_its_first_step_without_the_loop() {
    let mut h = Harness::new().await;
    let mut ctx = Context::new(h.store.clone(), h.deployments.clone(), h.clock.clone());
    ctx.starter = Some(h.scheduler.starter());
    h.api = crate::api::router(ctx);
    let input = json!({"title": "T", "recipient": "a@example.com", "body": "x"});
    let id = h.submit_to("pair", "started", input).await;
    // No loop runs and no claim tick is driven: the admission claimed the first step and
    // the first step's finish the second.
    wait::until(
        "the workflow to complete",
        Duration::from_secs(20),
        || async {
            let workflow = h.store.workflow(&id).await.unwrap().unwrap();
            match workflow.state {
                crate::intent::WorkflowState::Completed => Ok(()),
                other => Err(format!("{other:?}: {}", h.timeline(&id).await)),
            }
        },
    )
    .await;
    assert_eq!(h.scheduler.ticks().get(Tick::Claim), 0);
    let timeline = h.timeline(&id).await;
    assert_eq!(
        timeline
            .matches("Attempt 1 started (initial) by unit-host")
            .count(),
        2,
        "{timeline}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_starter_hands_out_only_free_slots_and_none_once_the_host_stops() {
    let h = Harness::new().await;
    let starter = h.scheduler.starter();
    let now = h.clock.now_ms();
    let held = SchedulerConfig::default().max_concurrent * super::HELD_PER_CALL;
    let all: Vec<_> = (0..held)
        .map(|_| starter.reserve(now).expect("a free slot"))
        .collect();
    assert!(starter.reserve(now).is_none(), "every slot is reserved");
    drop(all);
    assert!(
        starter.reserve(now).is_some(),
        "slots dropped unused are free again"
    );
    h.scheduler
        .shutdown(Duration::from_millis(10))
        .await
        .unwrap();
    assert!(
        starter.reserve(now).is_none(),
        "a stopping host starts nothing"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_host_claims_no_more_steps_than_it_has_calls_free() {
    let h = Harness::build(RuntimeConfig::default().max_instances, 1).await;
    // The provider takes a second to answer the first delivery.
    h.sim
        .sim()
        .set_faults(json!({"slow_next": 1, "slow_ms": 1000}))
        .unwrap();
    let first = h.submit("held-1").await;
    let second = h.submit("held-2").await;
    let claim = || async {
        h.scheduler
            .clone()
            .claim_tick(h.clock.now_ms())
            .await
            .unwrap()
    };
    // One call at a time: one step is claimed, and while its call runs no other is (a step
    // waiting for a call would hold a lease and memory for nothing).
    assert_eq!(claim().await, 1);
    wait::until("the first request", Duration::from_secs(20), || async {
        match h.sim.sim().world().len() {
            1 => Ok(()),
            n => Err(format!("{n} deliveries")),
        }
    })
    .await;
    assert_eq!(claim().await, 0);
    let waiting = if h.deliver_state(&first).await == StepState::Ready {
        &first
    } else {
        &second
    };
    assert_eq!(h.deliver_state(waiting).await, StepState::Ready);
    // Once the call ends, the other step is claimed and both deliveries succeed.
    wait::until(
        "the second step to be claimed",
        Duration::from_secs(20),
        || async {
            match claim().await {
                1 => Ok(()),
                n => Err(format!("{n} claimed")),
            }
        },
    )
    .await;
    for id in [&first, &second] {
        wait::until("the delivery to end", Duration::from_secs(20), || async {
            match h.deliver_state(id).await {
                StepState::Succeeded => Ok(()),
                other => Err(format!("{other:?}")),
            }
        })
        .await;
    }
    assert_eq!(h.sim.sim().world().len(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_providers_retry_after_pauses_every_claim_of_its_adapter_for_that_long() {
    let h = Harness::new().await;
    // The provider's next create is answered `429` with `Retry-After: 2`.
    h.sim
        .sim()
        .set_faults(json!({"rate_limit_next": 1, "retry_after_s": 2}))
        .unwrap();
    let limited = h.submit("limited-1").await;
    assert_eq!(
        h.scheduler
            .clone()
            .claim_tick(h.clock.now_ms())
            .await
            .unwrap(),
        1
    );
    wait::until(
        "the rate-limited attempt to end",
        Duration::from_secs(20),
        || async {
            match h.deliver_state(&limited).await {
                StepState::FailedRetryable => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    // The pause is the store's, for every host: two seconds from the answer.
    let states = h.store.adapter_states(h.clock.now_ms()).await.unwrap();
    let pause = states
        .iter()
        .find(|s| s.adapter == "http-delivery")
        .and_then(|s| s.pause.clone())
        .unwrap_or_else(|| panic!("no pause in {states:?}"));
    assert_eq!(pause.until - pause.at, 2_000, "{pause:?}");
    assert_eq!(pause.cause, "rate_limited");
    assert_eq!(pause.host, "unit-host");
    assert!(pause.reason.contains("rate"), "{pause:?}");
    // Another workflow's step is ready, and waits with the one answered so.
    let other = h.submit("other-1").await;
    for at in [pause.at, pause.until - 1] {
        assert_eq!(
            h.scheduler.clone().claim_tick(at).await.unwrap(),
            0,
            "claimed at {at}, the pause ends at {}",
            pause.until
        );
    }
    // An idle host sleeps until the pause ends rather than to its next poll.
    assert_eq!(
        h.store.next_due(pause.until - 1).await.unwrap(),
        Some(pause.until)
    );
    // `/metrics` says so, and why.
    let request = Request::get("/metrics").body(Body::empty()).unwrap();
    let response = h.api.clone().oneshot(request).await.unwrap();
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap();
    let metrics = String::from_utf8(bytes.to_vec()).unwrap();
    assert!(
        metrics
            .contains("docket_adapter_paused{adapter=\"http-delivery\",cause=\"rate_limited\"} 1"),
        "{metrics}"
    );
    // From its end, both run: the other one first (it has waited longest).
    assert!(h.scheduler.clone().claim_tick(pause.until).await.unwrap() >= 1);
    wait::until("the other delivery", Duration::from_secs(20), || async {
        match h.deliver_state(&other).await {
            StepState::Succeeded => Ok(()),
            s => Err(format!("{s:?}")),
        }
    })
    .await;
    let far = pause.until + 600_000;
    h.scheduler.clone().claim_tick(far).await.unwrap();
    wait::until(
        "the limited delivery's retry",
        Duration::from_secs(20),
        || async {
            match h.deliver_state(&limited).await {
                StepState::Succeeded => Ok(()),
                s => Err(format!("{s:?}")),
            }
        },
    )
    .await;
    assert_eq!(h.sim.sim().world().len(), 2, "one delivery each");
}

#[test]
fn a_subject_holding_few_steps_beside_a_burst_is_quiet() {
    use std::collections::HashMap;
    let held = |pairs: &[(&str, usize)]| -> HashMap<String, usize> {
        pairs.iter().map(|(s, n)| (s.to_string(), *n)).collect()
    };
    let quiet = super::quiet_among;
    assert!(
        !quiet(&held(&[("single", 1), ("burst", 63)]), "single"),
        "no burst yet"
    );
    assert!(quiet(&held(&[("single", 1), ("burst", 64)]), "single"));
    assert!(quiet(&held(&[("burst", 64)]), "newcomer"));
    assert!(
        !quiet(&held(&[("single", 1), ("burst", 640)]), "burst"),
        "the burst itself"
    );
    assert!(
        !quiet(&held(&[("several", 9), ("burst", 640)]), "several"),
        "nine is not few"
    );
}
