//! The periodic rounds run one at a time on a real SQLite store in a temporary directory,
//! at times a manual clock gives: no task runs, so each test says when the host looks.
//! Intents are admitted and cancelled through the API, whose clock is the host's.

use super::{check_tick, retention_tick};
use crate::catalog::Deployments;
use crate::clock::{Clock, ManualClock, SystemClock};
use crate::context::Context;
use crate::intent::WorkflowId;
use crate::metrics::{Metrics, Snapshot};
use crate::scheduler::notifier::Notifier;
use crate::store::sqlite::SqliteStore;
use crate::store::{ClaimRequest, ExecutorStore, ReadStore};
use crate::workflow::{ComponentWorld, StaticEnv};
use axum::body::Body;
use axum::http::Request;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tower::ServiceExt;

/// One handler step: nothing runs here, so it stays ready until claimed or cancelled.
const DEFINITION: &str = r#"
name = "notes"
version = 1
deadline = "1h"

[input_schema]
type = "object"

[[steps]]
id = "write"
label = "Write the note"
kind = "handler"
component = "write-note"
version = "^1"
[steps.input]
text = "$input.text"
"#;

const HOUR_MS: u64 = 60 * 60 * 1000;

struct Host {
    _dir: tempfile::TempDir,
    store: SqliteStore,
    /// The host's clock, as the API reads it.
    clock: Arc<SystemClock>,
    api: axum::Router,
}

impl Host {
    async fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("docket.db"))
            .await
            .unwrap();
        let clock = SystemClock::new();
        let deployments = Arc::new(Deployments::new(store.clone()));
        let env = StaticEnv::new().component(
            "write-note",
            semver::Version::new(1, 0, 0),
            ComponentWorld::Handler,
        );
        deployments
            .deploy("notes.toml", DEFINITION, &env, clock.now_ms())
            .await
            .unwrap();
        let api = crate::api::router(Context::new(store.clone(), deployments, clock.clone()));
        Self {
            _dir: dir,
            store,
            clock,
            api,
        }
    }

    async fn post(&self, path: &str, key: &str, body: Value) -> (u16, Value) {
        let request = Request::post(path)
            .header("Idempotency-Key", key)
            .body(Body::from(body.to_string()))
            .unwrap();
        let response = self.api.clone().oneshot(request).await.unwrap();
        let status = response.status().as_u16();
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        (status, serde_json::from_slice(&bytes).unwrap())
    }

    /// Admits one note; returns its workflow id.
    async fn submit(&self, key: &str) -> WorkflowId {
        let body = json!({"workflow": "notes", "input": {"text": key}});
        let (status, created) = self.post("/v1/intents", key, body).await;
        assert_eq!(status, 201, "{created}");
        WorkflowId(created["workflow_id"].as_str().unwrap().to_string())
    }

    /// Admits one note and cancels it before it runs: it ends now, by the host's clock.
    async fn ended(&self, key: &str) -> WorkflowId {
        let id = self.submit(key).await;
        let body = json!({"reason": "not needed"});
        let path = format!("/v1/workflows/{id}/cancel");
        let (status, answer) = self.post(&path, &format!("{key}-cancel"), body).await;
        assert!(status < 300, "{status}: {answer}");
        let workflow = self.store.workflow(&id).await.unwrap().unwrap();
        assert!(
            workflow.ended_at.is_some(),
            "{key} did not end: {workflow:?}"
        );
        id
    }

    async fn exists(&self, id: &WorkflowId) -> bool {
        self.store.workflow(id).await.unwrap().is_some()
    }
}

/// A gauge line of the scrape, as `/metrics` would show it.
fn gauge(metrics: &Metrics, invariant: &str) -> String {
    let text = metrics.render(&Snapshot::default(), 0);
    let series = format!("docket_consistency_violations{{invariant=\"{invariant}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&series))
        .unwrap_or_else(|| panic!("no {series} in:\n{text}"))
        .to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_check_tick_counts_each_invariant_broken_and_sets_the_gauge() {
    let host = Host::new().await;
    let id = host.submit("check-1").await;
    let metrics = Metrics::default();

    let clean = check_tick(&host.store, &metrics, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(clean.workflows, 1);
    assert_eq!(clean.found.len(), crate::check::Invariant::ALL.len());
    assert!(clean.found.values().all(|n| *n == 0), "{clean:?}");
    assert_eq!(gauge(&metrics, "lease_recovered"), "0");

    // A host claims the step and goes away; another host's complete recovery sweep after
    // the lease ran out leaves it running (as a lost recovery would).
    let clock = ManualClock::new(host.clock.now_ms());
    let claimed = host
        .store
        .claim(ClaimRequest {
            owner: "gone-host".into(),
            now: clock.now_ms(),
            lease_ms: 1_000,
            limit: 1,
            gates: Vec::new(),
            urgent: false,
        })
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    clock.advance(5_000);
    host.store
        .record_sweep("other-host", clock.now_ms())
        .await
        .unwrap();

    let found = check_tick(&host.store, &metrics, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(found.workflows, 1);
    assert_eq!(found.found["lease_recovered"], 1, "{found:?} in {id}");
    assert_eq!(found.found.values().sum::<u64>(), 1, "{found:?}");
    assert_eq!(gauge(&metrics, "lease_recovered"), "1");
    assert_eq!(gauge(&metrics, "projection_matches"), "0");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_retention_tick_purges_exactly_what_is_past_the_retention_and_the_key() {
    let host = Host::new().await;
    let retention = Duration::from_millis(HOUR_MS);
    let old = [host.ended("old-1").await, host.ended("old-2").await];
    let clock = ManualClock::new(host.clock.now_ms());

    // Past the retention, but the keys are kept for a day after the end: nothing goes.
    clock.advance(90 * 60 * 1000);
    assert!(
        retention_tick(&host.store, retention, clock.now_ms())
            .await
            .is_empty()
    );

    // A day later the old keys have expired; one more note ends then.
    host.clock.advance(25 * HOUR_MS);
    let young = host.ended("young-1").await;
    clock.advance(25 * HOUR_MS);
    // Their notifications are still to be sent (no endpoint took them): kept.
    assert!(
        retention_tick(&host.store, retention, clock.now_ms())
            .await
            .is_empty()
    );

    // The outbox's tick records `failed` what no endpoint took within its window; then
    // the old ones go, and the young one, whose key is still kept, stays.
    let notifier = Notifier::new(
        host.store.clone(),
        Vec::new(),
        clock.clone(),
        "unit-host".into(),
        Duration::from_secs(7 * 24 * 60 * 60),
        reqwest::Client::new(),
    );
    notifier.tick(clock.now_ms()).await;
    let mut purged = retention_tick(&host.store, retention, clock.now_ms()).await;
    purged.sort_by(|a, b| a.0.cmp(&b.0));
    let mut expected = old.to_vec();
    expected.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(purged, expected);
    for id in &old {
        assert!(!host.exists(id).await, "{id} is still stored");
    }
    assert!(host.exists(&young).await, "the young note went");

    // Nothing is left to purge: the next tick finds nothing.
    assert!(
        retention_tick(&host.store, retention, clock.now_ms())
            .await
            .is_empty()
    );
}
