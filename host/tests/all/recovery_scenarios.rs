//! Recovery from an uncertain outcome against a real `docket serve` and its provider
//! simulator: a response lost after the provider committed, eventual visibility of lookups,
//! and a provider that saw the key with a different request.
//!
//! The simulator's record is the ground truth: whatever the host concludes, the provider
//! must hold at most one delivery per intent.

use crate::host_process::{Contract, HostOptions, HostProcess, document};
use crate::wait;
use docket::intent::{WorkflowId, external_idempotency_key};
use docket::sim::SimConfig;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// The idempotency namespace every `http-delivery` variant declares.
const NAMESPACE: &str = "reference-provider";
const DAY_MS: u64 = 24 * 3600 * 1000;

async fn host_with(contract: Contract) -> HostProcess {
    HostProcess::start(HostOptions {
        workflows: vec![contract.definition()],
        ..HostOptions::default()
    })
    .await
}

fn deliver_step(wf: &Value) -> &Value {
    wf["steps"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["id"] == "deliver"))
        .unwrap_or_else(|| panic!("no deliver step: {wf:#}"))
}

fn field<'a>(attempts: &'a [Value], name: &str) -> Vec<&'a str> {
    attempts
        .iter()
        .map(|a| a[name].as_str().unwrap_or("-"))
        .collect()
}

/// Asserts that every attempt that reached checkpoint 3 carries the same request identity.
fn one_identity(attempts: &[Value]) {
    let mut identities: Vec<&str> = attempts
        .iter()
        .filter_map(|a| a["request_identity"].as_str())
        .collect();
    identities.dedup();
    assert_eq!(identities.len(), 1, "{attempts:#?}");
}

/// Moves the clock far ahead, a day at a time, and asserts nothing new happens to the step
/// (each time once the scheduler has looked again).
async fn nothing_runs_again(host: &HostProcess, id: &str, deliveries: usize) {
    let before = host.attempts(id, "deliver").await.len();
    for _ in 0..3 {
        host.advance_clock(DAY_MS).await;
        host.wait_scheduler_looked().await;
    }
    let after = host.attempts(id, "deliver").await;
    assert_eq!(after.len(), before, "a new attempt appeared: {after:#?}");
    assert_eq!(host.world().await.len(), deliveries);
    let (_, wf) = host.get(&format!("/v1/workflows/{id}")).await;
    assert_eq!(wf["state"], "needs_review", "{wf:#}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lost_response_is_recovered_by_query_with_no_second_delivery() {
    let host = host_with(Contract::Idempotent).await;
    // The provider commits the delivery, then closes the connection without answering.
    host.faults(json!({"lose_next": 1})).await;
    let (status, created) = host
        .submit(
            Contract::Idempotent.workflow(),
            "lost-1",
            document("Lost answer"),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let id = created["workflow_id"].as_str().unwrap();
    let wf = host
        .wait_for(
            id,
            &["completed", "needs_review", "failed"],
            Duration::from_secs(30),
        )
        .await;
    let timeline = host.timeline_text(id).await;
    assert_eq!(wf["state"], "completed", "{wf:#}\n{timeline}");

    // The first attempt ended outcome-unknown with its uncertainty stored; the second asked.
    let attempts = host.attempts(id, "deliver").await;
    assert_eq!(
        field(&attempts, "trigger"),
        ["initial", "recovery_query"],
        "{attempts:#?}"
    );
    assert_eq!(
        field(&attempts, "outcome"),
        ["timed_out", "lookup_found"],
        "{attempts:#?}"
    );
    assert_eq!(attempts[0]["checkpoint"], 5, "{attempts:#?}");
    one_identity(&attempts);

    // A verified receipt from the query, naming the provider's one delivery.
    let world = host.world().await;
    assert_eq!(world.len(), 1, "{world:#?}");
    let receipt = &deliver_step(&wf)["receipt"];
    assert_eq!(receipt["evidence_kind"], "query", "{receipt:#}");
    assert_eq!(receipt["external_reference"], world[0]["id"]);
    assert_eq!(receipt["attempt_id"], attempts[1]["attempt_id"]);
    // The contract recovery relied on, as the projection shows it: never verified here.
    let contract = &deliver_step(&wf)["contract"];
    assert_eq!(contract["component"], "http-delivery", "{wf:#}");
    assert_eq!(contract["verification"], "not_verified", "{wf:#}");
    for text in [
        "outcome unknown",
        "query by the stable reference",
        // The recovery names the claim it relied on.
        "— relying on http-delivery",
        "declared lookups by reference (visible within",
        "Lookup by reference found",
        "verified by query",
    ] {
        assert!(timeline.contains(text), "no {text:?} in:\n{timeline}");
    }
    assert!(!timeline.contains("same idempotency key"), "{timeline}");
}

#[tokio::test(flavor = "multi_thread")]
async fn fire_and_forget_with_a_lost_response_waits_for_review_and_is_never_retried() {
    let host = host_with(Contract::FireAndForget).await;
    host.faults(json!({"lose_next": 1})).await;
    let (_, created) = host
        .submit(
            Contract::FireAndForget.workflow(),
            "lost-ff-1",
            document("Lost answer"),
        )
        .await;
    let id = created["workflow_id"].as_str().unwrap();
    let wf = host
        .wait_for(
            id,
            &["completed", "needs_review", "failed"],
            Duration::from_secs(30),
        )
        .await;
    let timeline = host.timeline_text(id).await;
    assert_eq!(wf["state"], "needs_review", "{wf:#}\n{timeline}");
    assert_eq!(deliver_step(&wf)["state"], "outcome_unknown", "{wf:#}");
    assert_eq!(
        wf["next_action"],
        json!({"kind": "review", "step": "deliver"})
    );
    assert!(
        timeline.contains("needs review, no automatic retry"),
        "{timeline}"
    );
    let attempts = host.attempts(id, "deliver").await;
    assert_eq!(field(&attempts, "outcome"), ["timed_out"], "{attempts:#?}");
    // The provider did deliver once; the host must not find out by trying again.
    assert_eq!(host.world().await.len(), 1);
    nothing_runs_again(&host, id, 1).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn eventual_visibility_is_queried_again_until_the_delivery_shows() {
    let host = host_with(Contract::QueryOnly).await;
    // Lookups see a new delivery only after 3 s: inside the adapter's 5 s visibility window.
    host.faults(json!({"lose_next": 1, "visibility_delay_ms": 3000}))
        .await;
    let started = Instant::now();
    let (_, created) = host
        .submit(
            Contract::QueryOnly.workflow(),
            "late-1",
            document("Seen late"),
        )
        .await;
    let id = created["workflow_id"].as_str().unwrap();
    let wf = host
        .wait_for(
            id,
            &["completed", "needs_review", "failed"],
            Duration::from_secs(30),
        )
        .await;
    let timeline = host.timeline_text(id).await;
    assert_eq!(wf["state"], "completed", "{wf:#}\n{timeline}");
    assert!(started.elapsed() >= Duration::from_secs(3));

    // Empty lookups were asked again later, never taken as proof, never followed by a retry.
    let attempts = host.attempts(id, "deliver").await;
    let triggers = field(&attempts, "trigger");
    let outcomes = field(&attempts, "outcome");
    assert!(attempts.len() >= 3, "{attempts:#?}");
    assert_eq!(triggers[0], "initial");
    assert!(
        triggers[1..].iter().all(|t| *t == "recovery_query"),
        "{attempts:#?}"
    );
    assert_eq!(outcomes[0], "timed_out");
    assert_eq!(
        outcomes[outcomes.len() - 1],
        "lookup_found",
        "{attempts:#?}"
    );
    assert!(
        outcomes[1..outcomes.len() - 1]
            .iter()
            .all(|o| *o == "lookup_absent"),
        "{attempts:#?}"
    );
    one_identity(&attempts);
    assert!(timeline.contains("found nothing (yet)"), "{timeline}");
    assert!(timeline.contains("verified by query"), "{timeline}");
    assert!(!timeline.contains("needs review"), "{timeline}");

    let world = host.world().await;
    assert_eq!(world.len(), 1, "{world:#?}");
    assert_eq!(
        deliver_step(&wf)["receipt"]["external_reference"],
        world[0]["id"]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_key_reused_with_another_request_goes_to_review_and_never_to_a_new_key() {
    let host = host_with(Contract::Idempotent).await;
    // The first delivery attempt is rate limited for ten minutes of host time (well inside the
    // workflow's 1 h deadline), which leaves room to make the provider remember the step's key
    // with a different request.
    host.faults(json!({"rate_limit_next": 1, "retry_after_s": 600}))
        .await;
    let (_, created) = host
        .submit(
            Contract::Idempotent.workflow(),
            "conflict-1",
            document("Conflict"),
        )
        .await;
    let id = created["workflow_id"].as_str().unwrap();
    wait::until(
        "the first attempt rate limited",
        Duration::from_secs(30),
        || async {
            let (_, wf) = host.get(&format!("/v1/workflows/{id}")).await;
            if deliver_step(&wf)["state"] == "failed_retryable" {
                Ok(())
            } else {
                Err(format!("{wf:#}"))
            }
        },
    )
    .await;
    // The host's environment (development, the default) is part of the key.
    let key = external_idempotency_key(
        &WorkflowId(id.to_string()),
        "deliver",
        NAMESPACE,
        Some(docket::catalog::DEFAULT_ENVIRONMENT),
    );
    let shown = host.attempts(id, "deliver").await[0]["request_identity"]
        .as_str()
        .unwrap()
        .trim_end_matches('…')
        .to_string();
    assert!(
        key.starts_with(&shown),
        "{key} is not the key shown as {shown}"
    );
    let planted = reqwest::Client::new()
        .post(format!("{}/v1/deliveries", host.sim_url))
        .bearer_auth(SimConfig::DEFAULT_TOKEN)
        .header("Idempotency-Key", &key)
        .json(&json!({
            "client_reference": key,
            "recipient": "someone-else@example.com",
            "document_digest": "sha256:00",
            "document": "another request"
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(planted.status().as_u16(), 201);

    host.advance_clock(600 * 1000 + 1000).await;
    let wf = host
        .wait_for(
            id,
            &["completed", "needs_review", "failed"],
            Duration::from_secs(30),
        )
        .await;
    let timeline = host.timeline_text(id).await;
    assert_eq!(wf["state"], "needs_review", "{wf:#}\n{timeline}");
    assert_eq!(
        deliver_step(&wf)["state"],
        "waiting_for_review",
        "{wf:#}\n{timeline}"
    );
    let attempts = host.attempts(id, "deliver").await;
    assert_eq!(
        field(&attempts, "trigger"),
        ["initial", "retry"],
        "{attempts:#?}"
    );
    assert_eq!(
        field(&attempts, "outcome"),
        ["rejected", "rejected"],
        "{attempts:#?}"
    );
    one_identity(&attempts);
    assert!(
        timeline.contains("never retried under a new key"),
        "{timeline}"
    );
    // Only the planted delivery exists: the host created nothing under any key.
    let world = host.world().await;
    assert_eq!(world.len(), 1, "{world:#?}");
    assert_eq!(world[0]["recipient"], "someone-else@example.com");
    nothing_runs_again(&host, id, 1).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_result_that_arrives_after_recovery_took_over_is_kept_as_evidence_and_changes_nothing() {
    let host = host_with(Contract::Idempotent).await;
    // The provider commits at once but answers only after 2.5 s.
    host.faults(json!({"slow_next": 1, "slow_ms": 2500})).await;
    let (_, created) = host
        .submit(
            Contract::Idempotent.workflow(),
            "late-answer-1",
            document("Slow answer"),
        )
        .await;
    let id = created["workflow_id"].as_str().unwrap().to_string();
    // Wait until the call is under way (checkpoint 3), then let the lease run out in host
    // time: recovery takes the step over while the call still waits for its answer.
    wait::until(
        "the first attempt at checkpoint 3",
        Duration::from_secs(20),
        || async {
            let attempts = host.attempts(&id, "deliver").await;
            if attempts.first().is_some_and(|a| a["checkpoint"] == 3) {
                Ok(())
            } else {
                Err(format!("{attempts:#?}"))
            }
        },
    )
    .await;
    host.advance_clock(31_000).await;
    let wf = host
        .wait_for(
            &id,
            &["completed", "needs_review", "failed"],
            Duration::from_secs(30),
        )
        .await;
    assert_eq!(wf["state"], "completed", "{wf:#}");
    let receipt = deliver_step(&wf)["receipt"].clone();
    assert_eq!(receipt["evidence_kind"], "query", "{receipt:#}");
    // The late answer arrives and is added to the first attempt's evidence.
    let timeline = wait::until(
        "the late result on the timeline",
        Duration::from_secs(10),
        || async {
            let timeline = host.timeline_text(&id).await;
            if timeline.contains("Late result of attempt 1") {
                Ok(timeline)
            } else {
                Err(timeline)
            }
        },
    )
    .await;
    assert!(timeline.contains("accepted the request"), "{timeline}");
    let attempts = host.attempts(&id, "deliver").await;
    assert_eq!(
        field(&attempts, "trigger"),
        ["initial", "recovery_query"],
        "{attempts:#?}"
    );
    // What recovery recorded stays: the late answer neither rewrites the first attempt's
    // observation nor touches the step or its receipt.
    assert!(
        attempts[0]["observation"]
            .as_str()
            .unwrap()
            .contains("expired at checkpoint 3"),
        "{attempts:#?}"
    );
    let (_, after) = host.get(&format!("/v1/workflows/{id}")).await;
    assert_eq!(deliver_step(&after)["receipt"], receipt);
    assert_eq!(after["state"], "completed");
    assert_eq!(host.world().await.len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_graceful_stop_ends_its_leases_so_recovery_need_not_wait_for_them() {
    use crate::host_process::PROVIDER_TOKEN;
    use docket::sim::ProviderSim;
    // The provider outlives the host: its record is the ground truth across the restart.
    let sim = ProviderSim::start(
        SimConfig::new(PROVIDER_TOKEN),
        "127.0.0.1:0".parse().unwrap(),
    )
    .await
    .unwrap();
    let options = |dir| HostOptions {
        config: "[limits]\nshutdown_grace = \"300ms\"\n".into(),
        workflows: vec![Contract::Idempotent.definition()],
        dir,
        provider: Some(sim.base_url()),
        ..HostOptions::default()
    };
    let mut host = HostProcess::start(options(None)).await;
    // Committed at once, answered only after a minute: the call is under way at the stop.
    sim.sim()
        .set_faults(json!({"slow_next": 1, "slow_ms": 60_000}))
        .unwrap();
    let (_, created) = host
        .submit(
            Contract::Idempotent.workflow(),
            "graceful-1",
            document("Stopping"),
        )
        .await;
    let id = created["workflow_id"].as_str().unwrap().to_string();
    wait::until(
        "the provider committing the delivery",
        Duration::from_secs(20),
        || async {
            if sim.sim().world().is_empty() {
                Err("no delivery at the provider".into())
            } else {
                Ok(())
            }
        },
    )
    .await;
    host.terminate();
    let exit = host.wait_exit(Duration::from_secs(20)).await;
    assert!(
        exit.is_some(),
        "the host did not stop: {}",
        host.log_tail(20)
    );
    assert!(
        host.log_text().contains("ended 1 leases still held"),
        "{}",
        host.log_tail(20)
    );

    // A new host on the same database takes the step over at once, without moving its
    // clock past the 30 s lease, and recovers it by query: one delivery.
    let restarted = Instant::now();
    let host = HostProcess::start(options(Some(host.kill()))).await;
    let wf = host
        .wait_for(
            &id,
            &["completed", "needs_review", "failed"],
            Duration::from_secs(20),
        )
        .await;
    let timeline = host.timeline_text(&id).await;
    assert_eq!(wf["state"], "completed", "{wf:#}\n{timeline}");
    assert!(restarted.elapsed() < Duration::from_secs(20));
    assert!(timeline.contains("expired at checkpoint 3"), "{timeline}");
    assert!(timeline.contains("verified by query"), "{timeline}");
    assert_eq!(sim.sim().world().len(), 1);
}

/// Waits until the first attempt of `id`'s delivery has sent its request (checkpoint 3).
async fn first_call_under_way(host: &HostProcess, id: &str) {
    wait::until(
        "the first attempt at checkpoint 3",
        Duration::from_secs(20),
        || async {
            let attempts = host.attempts(id, "deliver").await;
            if attempts.first().is_some_and(|a| a["checkpoint"] == 3) {
                Ok(())
            } else {
                Err(format!("{attempts:#?}"))
            }
        },
    )
    .await;
}

/// A query-only delivery whose lookups cannot see the delivery goes to review with its
/// outcome unknown; the provider's own late answer then settles it with a receipt from that
/// evidence, naming the delivery the provider holds.
async fn a_late_answer_settles_a_step_whose_outcome_was_unknown(db: Option<String>) {
    let host = HostProcess::start(HostOptions {
        workflows: vec![Contract::QueryOnly.definition()],
        db,
        ..HostOptions::default()
    })
    .await;
    // The provider commits at once, answers after 4 s, and its lookups see nothing for
    // ten minutes.
    host.faults(json!({"slow_next": 1, "slow_ms": 4000, "visibility_delay_ms": 600_000}))
        .await;
    let (_, created) = host
        .submit(
            Contract::QueryOnly.workflow(),
            "late-settles-1",
            document("Late"),
        )
        .await;
    let id = created["workflow_id"].as_str().unwrap().to_string();
    first_call_under_way(&host, &id).await;
    host.advance_clock(31_000).await;
    let wf = host
        .wait_for(&id, &["needs_review"], Duration::from_secs(30))
        .await;
    assert_eq!(deliver_step(&wf)["state"], "outcome_unknown", "{wf:#}");
    let wf = host
        .wait_for(&id, &["completed"], Duration::from_secs(30))
        .await;
    let world = host.world().await;
    assert_eq!(world.len(), 1, "{world:#?}");
    let receipt = &deliver_step(&wf)["receipt"];
    assert_eq!(receipt["evidence_kind"], "response", "{receipt:#}");
    assert_eq!(receipt["external_reference"], world[0]["id"], "{receipt:#}");
    let timeline = host.timeline_text(&id).await;
    assert!(
        timeline.contains("Settled by the provider's late answer"),
        "{timeline}"
    );
}

/// A delivery retried under the same key by a provider that forgot its idempotency makes a
/// second delivery and completes on it; the first call's late answer names the first: the
/// step is `contradicted`, with both references, and the workflow waits for a person —
/// two references never hide behind `completed`.
async fn a_late_answer_naming_another_reference_contradicts_the_step(db: Option<String>) {
    let host = HostProcess::start(HostOptions {
        workflows: vec![Contract::Idempotent.definition()],
        db,
        ..HostOptions::default()
    })
    .await;
    host.faults(json!({
        "slow_next": 1,
        "slow_ms": 6000,
        "visibility_delay_ms": 600_000,
        "idempotency": false
    }))
    .await;
    let (_, created) = host
        .submit(
            Contract::Idempotent.workflow(),
            "late-contradicts-1",
            document("Twice"),
        )
        .await;
    let id = created["workflow_id"].as_str().unwrap().to_string();
    first_call_under_way(&host, &id).await;
    host.advance_clock(31_000).await;
    let wf = host
        .wait_for(&id, &["completed"], Duration::from_secs(30))
        .await;
    let second = deliver_step(&wf)["receipt"]["external_reference"].clone();
    let wf = host
        .wait_for(&id, &["needs_review"], Duration::from_secs(30))
        .await;
    let deliver = deliver_step(&wf);
    assert_eq!(deliver["state"], "contradicted", "{wf:#}");
    let world = host.world().await;
    assert_eq!(world.len(), 2, "the provider holds both: {world:#?}");
    let references = &deliver["contradicted"]["references"];
    assert_eq!(references[0], second, "{deliver:#}");
    assert_ne!(references[1], second, "{deliver:#}");
    let held: Vec<&Value> = world.iter().map(|d| &d["id"]).collect();
    assert!(
        held.contains(&&references[0]) && held.contains(&&references[1]),
        "{world:#?}"
    );
    assert!(
        wf["status_text"].as_str().unwrap().contains("contradicted"),
        "{wf:#}"
    );
    // Asking again or retrying cannot choose between two references; a person can.
    let step = format!("/v1/workflows/{id}/steps/deliver");
    let (status, refused) = host
        .post_with_key(&format!("{step}/retry"), "retry-1", json!({}))
        .await;
    assert_eq!(status, 409, "{refused}");
    let (status, resolved) = host
        .post_with_key(
            &format!("{step}/resolve"),
            "resolve-1",
            json!({
                "outcome": "succeeded",
                "evidence": "both deliveries in the provider's record; the second is the one to keep",
                "reason": "the recipient confirmed the second",
                "external_reference": references[0],
            }),
        )
        .await;
    assert_eq!(status, 200, "{resolved}");
    let wf = host
        .wait_for(&id, &["completed"], Duration::from_secs(30))
        .await;
    assert_eq!(
        deliver_step(&wf)["receipt"]["evidence_kind"],
        "manual",
        "{wf:#}"
    );
}

on_both_stores!(
    a_late_answer_settles_a_step_whose_outcome_was_unknown,
    a_late_answer_naming_another_reference_contradicts_the_step
);

/// Least authority per action: a definition that grants `query` the provider's host but not
/// its token leaves the recovery lookup unable to read it — the lookup is refused at that
/// action, nothing is sent twice, and the step waits for a person.
#[tokio::test(flavor = "multi_thread")]
async fn a_query_is_held_to_its_own_grant_not_the_steps() {
    let (file, text) = Contract::Idempotent.definition();
    let text = text.replace(
        "[steps.capabilities]\noutbound_hosts = [\"$base_url\"]\nsecrets = [\"provider_token\"]\n",
        "[steps.capabilities]\noutbound_hosts = [\"$base_url\"]\nsecrets = [\"provider_token\"]\n\
         [steps.capabilities.query]\noutbound_hosts = [\"$base_url\"]\n",
    );
    assert!(text.contains("[steps.capabilities.query]"), "{text}");
    let host = HostProcess::start(HostOptions {
        workflows: vec![(file, text)],
        ..HostOptions::default()
    })
    .await;
    host.faults(json!({"lose_next": 1})).await;
    let (status, created) = host
        .submit(
            Contract::Idempotent.workflow(),
            "least-query-1",
            document("Lookup without the token"),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let id = created["workflow_id"].as_str().unwrap();
    let wf = host
        .wait_for(
            id,
            &["completed", "needs_review", "failed"],
            Duration::from_secs(30),
        )
        .await;
    let timeline = host.timeline_text(id).await;
    assert_eq!(wf["state"], "needs_review", "{wf:#}\n{timeline}");
    let attempts = host.attempts(id, "deliver").await;
    assert_eq!(
        field(&attempts, "trigger"),
        ["initial", "recovery_query"],
        "{attempts:#?}"
    );
    // `invoke` had the token (the provider took the delivery); the lookup did not.
    assert_eq!(host.world().await.len(), 1);
    assert!(
        timeline.contains("secret `provider_token` is not granted"),
        "{timeline}"
    );
    nothing_runs_again(&host, id, 1).await;
}
