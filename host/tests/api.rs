//! The HTTP API's admission and read contract (API.md), over real HTTP on loopback.
//!
//! Each test serves the router on 127.0.0.1:0 with its own SQLite file and a deployed
//! definition, and talks to it with reqwest. No scheduler runs: where a test needs a
//! workflow to move, it claims and finishes steps through the executor store, as the
//! scheduler would.

use docket::api::{ApiContext, ApiLimits, Auth, Principal, Role, router};
use docket::clock::{Clock, SystemClock};
use docket::intent::{AttemptOutcome, EvidenceKind, ReceiptId, Subject};
use docket::scheduler::Deployments;
use docket::store::sqlite::SqliteStore;
use docket::store::{
    AttemptFacts, ClaimRequest, ExecutorStore, FinishRequest, NewReceipt, StepTransition,
};
use docket::workflow::{ComponentWorld, StaticEnv};
use reqwest::StatusCode;
use reqwest::header::HeaderMap;
use serde_json::{Value, json};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

/// A small two-step definition: prepare, then deliver.
const DEFINITION: &str = r#"
name = "letters"
version = 1
deadline = "1h"

[input_schema]
type = "object"
required = ["title", "copies"]
additionalProperties = false
properties.title = { type = "string", minLength = 1 }
properties.copies = { type = "number", minimum = 1 }
properties.tags = { type = "object" }

[[steps]]
id = "prepare"
label = "Prepare letter"
kind = "handler"
component = "prepare-letter"
version = "^1"
milestone = "Letter prepared"
outputs = ["title"]
[steps.input]
title = "$input.title"

[[steps]]
id = "deliver"
label = "Deliver letter"
kind = "handler"
component = "deliver-letter"
version = "^1"
after = ["prepare"]
milestone = "Delivery verified"
[steps.input]
title = "$steps.prepare.output.title"
"#;

const RETENTION: Duration = Duration::from_secs(24 * 60 * 60);

struct Host {
    base: String,
    http: reqwest::Client,
    store: SqliteStore,
    clock: Arc<SystemClock>,
    _dir: tempfile::TempDir,
}

fn principal(subject: &str, role: Role) -> Principal {
    Principal {
        subject: Subject(subject.to_string()),
        role,
    }
}

/// alice and bob are clients, ops is an operator.
fn tokens() -> Auth {
    Auth::with_tokens([
        ("alice-token".to_string(), principal("alice", Role::Client)),
        ("bob-token".to_string(), principal("bob", Role::Client)),
        ("ops-token".to_string(), principal("ops", Role::Operator)),
    ])
}

async fn start(auth: Auth, test_controls: bool) -> Host {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join("docket.db"))
        .await
        .unwrap();
    let clock = SystemClock::new();
    let deployments = Arc::new(Deployments::new(store.clone()));
    let env = StaticEnv::new()
        .component(
            "prepare-letter",
            semver::Version::new(1, 0, 0),
            ComponentWorld::Handler,
        )
        .component(
            "deliver-letter",
            semver::Version::new(1, 2, 0),
            ComponentWorld::Handler,
        );
    deployments
        .deploy("letters.toml", DEFINITION, &env, clock.now_ms())
        .await
        .unwrap_or_else(|e| panic!("deploy: {e}"));
    let mut ctx = ApiContext::new(store.clone(), deployments, clock.clone());
    ctx.auth = auth;
    ctx.limits = ApiLimits {
        max_body_bytes: ApiLimits::DEFAULT_MAX_BODY_BYTES,
        key_retention: RETENTION,
    };
    ctx.test_controls = test_controls;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router(ctx)).await });
    Host {
        base: format!("http://{addr}"),
        http: reqwest::Client::new(),
        store,
        clock,
        _dir: dir,
    }
}

struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: Value,
}

impl Answer {
    fn code(&self) -> &str {
        self.body["error"]["code"]
            .as_str()
            .unwrap_or("<no error code>")
    }

    fn message(&self) -> &str {
        self.body["error"]["message"].as_str().unwrap_or("")
    }

    fn id(&self) -> String {
        self.body["workflow_id"]
            .as_str()
            .expect("workflow_id")
            .to_string()
    }
}

async fn answer(response: reqwest::Response) -> Answer {
    let status = response.status();
    let headers = response.headers().clone();
    let text = response.text().await.unwrap();
    let body = serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
    Answer {
        status,
        headers,
        body,
    }
}

impl Host {
    /// `POST /v1/intents` with a raw body.
    async fn post_raw(
        &self,
        token: Option<&str>,
        key: Option<&str>,
        body: impl Into<reqwest::Body>,
    ) -> Answer {
        let mut request = self
            .http
            .post(format!("{}/v1/intents", self.base))
            .header("content-type", "application/json")
            .body(body);
        if let Some(t) = token {
            request = request.bearer_auth(t);
        }
        if let Some(k) = key {
            request = request.header("Idempotency-Key", k);
        }
        answer(request.send().await.unwrap()).await
    }

    /// `POST /v1/intents` for the `letters` workflow.
    async fn submit(&self, token: Option<&str>, key: &str, input: Value) -> Answer {
        let body = json!({"workflow": "letters", "input": input}).to_string();
        self.post_raw(token, Some(key), body).await
    }

    async fn get(&self, token: Option<&str>, path: &str) -> Answer {
        let mut request = self.http.get(format!("{}{path}", self.base));
        if let Some(t) = token {
            request = request.bearer_auth(t);
        }
        answer(request.send().await.unwrap()).await
    }

    async fn advance(&self, ms: u64) -> Answer {
        let request = self
            .http
            .post(format!("{}/v1/_test/clock", self.base))
            .json(&json!({"advance_ms": ms}));
        answer(request.send().await.unwrap()).await
    }

    /// Runs every ready step to success, as the scheduler would, until none is left.
    async fn finish_ready_steps(&self) -> usize {
        let mut finished = 0;
        loop {
            let now = self.clock.now_ms();
            let claimed = self
                .store
                .claim(ClaimRequest {
                    owner: "test-worker".into(),
                    now,
                    lease_ms: 60_000,
                    limit: 10,
                })
                .await
                .unwrap();
            if claimed.is_empty() {
                return finished;
            }
            for c in claimed {
                let identity = format!("{}:{}:letters-ns", c.fence.workflow_id, c.fence.step);
                self.store
                    .finish(FinishRequest {
                        attempt_id: c.attempt_id.clone(),
                        checkpoint: 6,
                        facts: AttemptFacts {
                            component: Some("prepare-letter".into()),
                            component_version: Some("1.0.0".into()),
                            component_digest: Some("sha256:abcd".into()),
                            input_digest: Some("sha256:1234".into()),
                            request_identity: Some(identity),
                            observation: Some("done".into()),
                            outcome: Some(AttemptOutcome::Accepted),
                        },
                        transition: StepTransition::Succeeded(NewReceipt {
                            receipt_id: ReceiptId::new(now),
                            evidence_kind: EvidenceKind::Response,
                            component: "prepare-letter".into(),
                            component_version: "1.0.0".into(),
                            component_digest: "sha256:abcd".into(),
                            input_digest: "sha256:1234".into(),
                            external_reference: Some(format!("ext-{}", c.fence.step)),
                            output: json!({"title": "Hello"}),
                            author: None,
                            reason: None,
                            evidence: None,
                        }),
                        fence: c.fence,
                        note: None,
                        log: json!([]),
                        runtime_ms: 1,
                        events: Vec::new(),
                        now,
                        expired_before: None,
                    })
                    .await
                    .unwrap();
                finished += 1;
            }
        }
    }
}

fn letter() -> Value {
    json!({"title": "Hello", "copies": 2, "tags": {"a": 1, "b": 2}})
}

#[tokio::test]
async fn a_new_key_creates_a_workflow_and_an_equivalent_resubmission_replays_it() {
    let host = start(Auth::open(), true).await;
    let created = host.submit(None, "order-1", letter()).await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    let id = created.id();
    assert!(id.starts_with("wf_"));
    assert_eq!(
        created.headers["location"],
        format!("/v1/workflows/{id}").as_str()
    );
    assert_eq!(created.body["workflow"], "letters");
    assert_eq!(created.body["definition_version"], 1);
    assert_eq!(created.body["state"], "running");
    assert_eq!(created.body["replayed"], false);
    assert!(created.body["created_at"].as_str().unwrap().ends_with('Z'));

    // Keys in another order and 2.0 for 2: the same canonical input.
    let raw = r#"{"input": {"tags": {"b": 2, "a": 1.0}, "copies": 2.0, "title": "Hello"}, "workflow": "letters"}"#;
    let replay = host.post_raw(None, Some("order-1"), raw).await;
    assert_eq!(replay.status, StatusCode::OK, "{}", replay.body);
    assert_eq!(replay.id(), id);
    assert_eq!(replay.body["replayed"], true);
    assert_eq!(replay.body["created_at"], created.body["created_at"]);
    assert_eq!(
        replay.headers["location"],
        format!("/v1/workflows/{id}").as_str()
    );

    // The same input under another key is another intent.
    let other = host.submit(None, "order-2", letter()).await;
    assert_eq!(other.status, StatusCode::CREATED);
    assert_ne!(other.id(), id);

    let view = host.get(None, &format!("/v1/workflows/{id}")).await;
    assert_eq!(view.status, StatusCode::OK, "{}", view.body);
    let v = &view.body;
    assert_eq!(v["subject"], "local");
    assert_eq!(v["idempotency_key"], "order-1");
    assert!(v["input_digest"].as_str().unwrap().starts_with("sha256:"));
    assert_eq!(v["state"], "running");
    assert_eq!(v["ended_at"], Value::Null);
    assert_eq!(v["status_text"], "Waiting to start: Prepare letter");
    assert_eq!(v["next_action"], Value::Null);
    let milestones: Vec<(&str, bool)> = v["milestones"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["name"].as_str().unwrap(), !m["reached_at"].is_null()))
        .collect();
    assert_eq!(
        milestones,
        [
            ("Request recorded", true),
            ("Letter prepared", false),
            ("Delivery verified", false),
            ("Completion recorded", false)
        ]
    );
    assert_eq!(v["milestones"][0]["reached_at"], v["created_at"]);
    assert_eq!(
        v["steps"],
        json!([
            {"id": "prepare", "label": "Prepare letter", "state": "ready", "attempts": 0, "escalated": null, "receipt": null},
            {"id": "deliver", "label": "Deliver letter", "state": "pending", "attempts": 0, "escalated": null, "receipt": null},
        ])
    );

    let timeline = host
        .get(None, &format!("/v1/workflows/{id}/timeline"))
        .await;
    assert_eq!(timeline.status, StatusCode::OK);
    let entries = timeline.body["data"].as_array().unwrap();
    assert_eq!(entries.len(), 2, "{}", timeline.body);
    assert_eq!(entries[0]["seq"], 1);
    assert_eq!(entries[0]["kind"], "observation");
    assert!(
        entries[0]["text"]
            .as_str()
            .unwrap()
            .starts_with("Request recorded")
    );
    assert_eq!(entries[1]["kind"], "action");
    assert_eq!(entries[1]["text"], "Scheduled Prepare letter");
    assert_eq!(entries[1]["data"], json!({"steps": ["prepare"]}));
    assert_eq!(timeline.body["next_cursor"], Value::Null);
}

#[tokio::test]
async fn a_key_reused_with_another_input_conflicts_and_changes_nothing() {
    let host = start(Auth::open(), true).await;
    let created = host.submit(None, "order-1", letter()).await;
    let id = created.id();
    let before = host.get(None, &format!("/v1/workflows/{id}")).await.body;
    let timeline_before = host
        .get(None, &format!("/v1/workflows/{id}/timeline"))
        .await
        .body;

    let mut changed = letter();
    changed["copies"] = json!(3);
    let conflict = host.submit(None, "order-1", changed).await;
    assert_eq!(conflict.status, StatusCode::CONFLICT, "{}", conflict.body);
    assert_eq!(conflict.code(), "key_conflict");
    assert_eq!(
        conflict.body["error"]["details"],
        json!([{"workflow_id": id}])
    );
    assert!(
        conflict.message().contains("`order-1`"),
        "{}",
        conflict.message()
    );

    let after = host.get(None, &format!("/v1/workflows/{id}")).await.body;
    assert_eq!(after["input_digest"], before["input_digest"]);
    assert_eq!(after, before);
    assert_eq!(
        host.get(None, &format!("/v1/workflows/{id}/timeline"))
            .await
            .body,
        timeline_before
    );
    let list = host.get(None, "/v1/workflows").await;
    assert_eq!(list.body["data"].as_array().unwrap().len(), 1);

    // The original input still replays.
    assert_eq!(
        host.submit(None, "order-1", letter()).await.status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn malformed_requests_are_refused_in_the_documented_order() {
    let host = start(Auth::open(), true).await;
    let good = json!({"workflow": "letters", "input": letter()}).to_string();

    let missing = host.post_raw(None, None, good.clone()).await;
    assert_eq!(
        (missing.status, missing.code()),
        (StatusCode::BAD_REQUEST, "missing_parameter")
    );
    assert!(missing.message().contains("Idempotency-Key"));
    // Key before body: a missing key wins over a bad body.
    assert_eq!(
        host.post_raw(None, None, "{").await.code(),
        "missing_parameter"
    );

    let too_long = "k".repeat(256);
    for bad in ["", too_long.as_str(), "a\tb", "a b", "\"abc", "\"\""] {
        let refused = host.post_raw(None, Some(bad), good.clone()).await;
        assert_eq!(
            (refused.status, refused.code()),
            (StatusCode::BAD_REQUEST, "invalid_key"),
            "{bad:?}"
        );
        assert!(
            refused.message().contains("0x21–0x7E"),
            "{}",
            refused.message()
        );
    }
    assert_eq!(
        host.post_raw(None, Some("a\tb"), "{").await.code(),
        "invalid_key"
    );
    let longest = "k".repeat(255);
    assert_eq!(
        host.post_raw(None, Some(&longest), good.clone())
            .await
            .status,
        StatusCode::CREATED
    );

    for not_json in ["", "{", "workflow=letters", "{\"workflow\": \"letters\", }"] {
        let refused = host.post_raw(None, Some("json"), not_json).await;
        assert_eq!(
            (refused.status, refused.code()),
            (StatusCode::BAD_REQUEST, "invalid_json"),
            "{not_json:?}"
        );
    }
    // Body syntax before the definition: bad JSON for an unknown workflow is invalid_json.
    assert_eq!(
        host.post_raw(None, Some("json"), "{\"workflow\": \"nope\"")
            .await
            .code(),
        "invalid_json"
    );

    for wrong in [
        json!([]),
        json!({"input": {}}),
        json!({"workflow": "", "input": {}}),
        json!({"workflow": 7, "input": {}}),
        json!({"workflow": "letters"}),
        json!({"workflow": "letters", "input": [1]}),
        json!({"workflow": "letters", "input": "x"}),
        json!({"workflow": "letters", "input": {}, "extra": true}),
    ] {
        let refused = host.post_raw(None, Some("shape"), wrong.to_string()).await;
        assert_eq!(
            (refused.status, refused.code()),
            (StatusCode::BAD_REQUEST, "invalid_request"),
            "{wrong}"
        );
    }

    // Any Content-Type: the body is JSON regardless.
    let request = host
        .http
        .post(format!("{}/v1/intents", host.base))
        .header("content-type", "text/plain")
        .header("Idempotency-Key", "plain")
        .body(good.clone());
    assert_eq!(
        answer(request.send().await.unwrap()).await.status,
        StatusCode::CREATED
    );
}

#[tokio::test]
async fn a_quoted_key_is_the_same_key() {
    let host = start(Auth::open(), true).await;
    let created = host.submit(None, "\"abc\"", letter()).await;
    assert_eq!(created.status, StatusCode::CREATED);
    let replay = host.submit(None, "abc", letter()).await;
    assert_eq!(replay.status, StatusCode::OK);
    assert_eq!(replay.id(), created.id());
    let view = host
        .get(None, &format!("/v1/workflows/{}", created.id()))
        .await;
    assert_eq!(view.body["idempotency_key"], "abc");
    for path in [
        "/v1/intents/abc?workflow=letters",
        "/v1/intents/%22abc%22?workflow=letters",
    ] {
        let found = host.get(None, path).await;
        assert_eq!(found.status, StatusCode::OK, "{path}: {}", found.body);
        assert_eq!(found.id(), created.id());
    }
}

#[tokio::test]
async fn an_unknown_workflow_is_not_found() {
    let host = start(Auth::open(), true).await;
    let body = json!({"workflow": "parcels", "input": {}}).to_string();
    let refused = host.post_raw(None, Some("k1"), body).await;
    assert_eq!(
        (refused.status, refused.code()),
        (StatusCode::NOT_FOUND, "not_found")
    );
    assert!(
        refused.message().contains("`parcels`"),
        "{}",
        refused.message()
    );
}

#[tokio::test]
async fn a_body_over_the_limit_is_too_large() {
    let host = start(Auth::open(), true).await;
    let filler = "x".repeat(ApiLimits::DEFAULT_MAX_BODY_BYTES);
    let body = json!({"workflow": "letters", "input": {"title": filler, "copies": 1}}).to_string();
    let refused = host.post_raw(None, Some("big"), body).await;
    assert_eq!(
        (refused.status, refused.code()),
        (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large")
    );
    // Nothing was recorded under the key.
    assert_eq!(
        host.submit(None, "big", letter()).await.status,
        StatusCode::CREATED
    );
}

#[tokio::test]
async fn an_input_against_the_schema_is_unprocessable_with_pointers() {
    let host = start(Auth::open(), true).await;
    let refused = host
        .submit(None, "k1", json!({"title": 5, "colour": "red"}))
        .await;
    assert_eq!(
        (refused.status, refused.code()),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid_input")
    );
    let pointers: Vec<&str> = refused.body["error"]["details"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            assert!(d["message"].as_str().is_some_and(|m| !m.is_empty()), "{d}");
            d["pointer"].as_str().unwrap()
        })
        .collect();
    assert_eq!(
        pointers,
        ["/colour", "/copies", "/title"],
        "{}",
        refused.body
    );
    // A refused input reserves nothing: the key is still free.
    assert_eq!(
        host.submit(None, "k1", letter()).await.status,
        StatusCode::CREATED
    );
}

#[tokio::test]
async fn keys_are_scoped_per_subject_and_clients_see_only_their_own() {
    let host = start(tokens(), true).await;
    let alice = host
        .submit(Some("alice-token"), "shared-key", letter())
        .await;
    let bob = host
        .submit(
            Some("bob-token"),
            "shared-key",
            json!({"title": "Other", "copies": 1}),
        )
        .await;
    assert_eq!(alice.status, StatusCode::CREATED);
    assert_eq!(
        bob.status,
        StatusCode::CREATED,
        "the same key under another subject is another intent"
    );
    assert_ne!(alice.id(), bob.id());
    let alice_only = host
        .submit(Some("alice-token"), "alice-only", letter())
        .await;

    let alice_path = format!("/v1/workflows/{}", alice.id());
    assert_eq!(
        host.get(Some("alice-token"), &alice_path).await.body["subject"],
        "alice"
    );
    for path in [
        alice_path.clone(),
        format!("{alice_path}/timeline"),
        format!("{alice_path}/steps/prepare/attempts"),
        "/v1/intents/alice-only?workflow=letters".to_string(),
    ] {
        let hidden = host.get(Some("bob-token"), &path).await;
        assert_eq!(
            (hidden.status, hidden.code()),
            (StatusCode::NOT_FOUND, "not_found"),
            "{path}"
        );
    }
    // Bob's own intent under the shared key is bob's.
    let by_key = host
        .get(Some("bob-token"), "/v1/intents/shared-key?workflow=letters")
        .await;
    assert_eq!(by_key.id(), bob.id());

    let ids = |a: &Answer| -> HashSet<String> {
        a.body["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w["workflow_id"].as_str().unwrap().to_string())
            .collect()
    };
    let alices = host.get(Some("alice-token"), "/v1/workflows").await;
    assert_eq!(ids(&alices), HashSet::from([alice.id(), alice_only.id()]));
    let all = host.get(Some("ops-token"), "/v1/workflows").await;
    assert_eq!(
        ids(&all),
        HashSet::from([alice.id(), alice_only.id(), bob.id()])
    );
    let operator_view = host.get(Some("ops-token"), &alice_path).await;
    assert_eq!(operator_view.status, StatusCode::OK);
}

#[tokio::test]
async fn unknown_or_missing_tokens_are_unauthorized() {
    let host = start(tokens(), true).await;
    for token in [None, Some("wrong-token")] {
        let refused = host.get(token, "/v1/workflows").await;
        assert_eq!(
            (refused.status, refused.code()),
            (StatusCode::UNAUTHORIZED, "unauthorized")
        );
        assert_eq!(refused.headers["www-authenticate"], "Bearer");
        // Auth comes first: a missing key is not even looked at.
        let refused = host.post_raw(token, None, "{").await;
        assert_eq!(refused.code(), "unauthorized");
    }
    // The clock control needs an operator.
    let request = host
        .http
        .post(format!("{}/v1/_test/clock", host.base))
        .bearer_auth("alice-token")
        .json(&json!({"advance_ms": 1}));
    assert_eq!(
        answer(request.send().await.unwrap()).await.code(),
        "forbidden"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_submissions_of_one_key_create_one_workflow() {
    let host = Arc::new(start(Auth::open(), true).await);
    let tasks: Vec<_> = (0..100)
        .map(|_| {
            let host = host.clone();
            tokio::spawn(async move {
                let a = host.submit(None, "burst", letter()).await;
                (a.status, a.id())
            })
        })
        .collect();
    let mut created = 0;
    let mut replayed = 0;
    let mut ids = HashSet::new();
    for task in tasks {
        let (status, id) = task.await.unwrap();
        match status {
            StatusCode::CREATED => created += 1,
            StatusCode::OK => replayed += 1,
            other => panic!("unexpected {other}"),
        }
        ids.insert(id);
    }
    assert_eq!((created, replayed), (1, 99));
    assert_eq!(ids.len(), 1);
    let list = host.get(None, "/v1/workflows").await;
    assert_eq!(list.body["data"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn a_key_is_retained_while_the_workflow_runs_and_for_the_retention_after_it_ends() {
    let host = start(Auth::open(), true).await;
    let first = host.submit(None, "monthly", letter()).await;
    assert_eq!(first.status, StatusCode::CREATED);
    let id = first.id();

    // Running: retention has not started, however much time passes.
    let moved = host.advance(RETENTION.as_millis() as u64 * 2).await;
    assert_eq!(moved.status, StatusCode::OK, "{}", moved.body);
    assert!(moved.body["now"].as_str().unwrap().ends_with('Z'));
    assert_eq!(
        host.submit(None, "monthly", letter()).await.status,
        StatusCode::OK
    );

    assert_eq!(host.finish_ready_steps().await, 2);
    let done = host.get(None, &format!("/v1/workflows/{id}")).await.body;
    assert_eq!(done["state"], "completed");
    assert_eq!(done["status_text"], "Completed");
    assert!(done["ended_at"].is_string());
    assert!(
        done["milestones"]
            .as_array()
            .unwrap()
            .iter()
            .all(|m| m["reached_at"].is_string()),
        "{done}"
    );
    assert_eq!(done["milestones"][3]["reached_at"], done["ended_at"]);
    let receipt = &done["steps"][1]["receipt"];
    assert_eq!(receipt["evidence_kind"], "response");
    assert_eq!(receipt["external_reference"], "ext-deliver");
    assert_eq!(receipt["component_version"], "1.0.0");
    assert!(receipt["receipt_id"].as_str().unwrap().starts_with("rcp_"));
    assert!(receipt["attempt_id"].as_str().unwrap().starts_with("att_"));
    assert_eq!(receipt["author"], Value::Null);

    let attempts = host
        .get(None, &format!("/v1/workflows/{id}/steps/deliver/attempts"))
        .await;
    assert_eq!(attempts.status, StatusCode::OK, "{}", attempts.body);
    let attempt = &attempts.body["data"][0];
    assert_eq!(attempt["number"], 1);
    assert_eq!(attempt["trigger"], "initial");
    assert_eq!(attempt["outcome"], "accepted");
    assert_eq!(attempt["checkpoint"], 6);
    assert_eq!(attempt["lease_owner"], "test-worker");
    let identity = attempt["request_identity"].as_str().unwrap();
    assert!(
        identity.ends_with('…') && identity.chars().count() <= 9,
        "{identity}"
    );
    assert!(!attempts.body.to_string().contains(":deliver:letters-ns"));
    let unknown = host
        .get(None, &format!("/v1/workflows/{id}/steps/ship/attempts"))
        .await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND);

    // Ended: retained until the retention passes, with a conflict for another input.
    host.advance(RETENTION.as_millis() as u64 - 1_000).await;
    assert_eq!(
        host.submit(None, "monthly", letter()).await.status,
        StatusCode::OK
    );
    assert_eq!(
        host.submit(None, "monthly", json!({"title": "New", "copies": 1}))
            .await
            .code(),
        "key_conflict"
    );
    assert_eq!(
        host.get(None, "/v1/intents/monthly?workflow=letters")
            .await
            .status,
        StatusCode::OK
    );

    // Past retention: the key is free and names a new workflow.
    host.advance(2_000).await;
    assert_eq!(
        host.get(None, "/v1/intents/monthly?workflow=letters")
            .await
            .status,
        StatusCode::NOT_FOUND
    );
    let again = host.submit(None, "monthly", letter()).await;
    assert_eq!(again.status, StatusCode::CREATED, "{}", again.body);
    assert_ne!(again.id(), id);
    let by_key = host.get(None, "/v1/intents/monthly?workflow=letters").await;
    assert_eq!(by_key.id(), again.id());
}

#[tokio::test]
async fn intents_are_read_back_by_key() {
    let host = start(Auth::open(), true).await;
    let created = host.submit(None, "order/7", letter()).await;
    let found = host
        .get(None, "/v1/intents/order%2F7?workflow=letters")
        .await;
    assert_eq!(found.status, StatusCode::OK, "{}", found.body);
    let expected = json!({
        "workflow_id": created.id(),
        "workflow": "letters",
        "definition_version": 1,
        "state": "running",
        "created_at": created.body["created_at"],
    });
    assert_eq!(found.body, expected);

    let missing = host.get(None, "/v1/intents/order%2F7").await;
    assert_eq!(
        (missing.status, missing.code()),
        (StatusCode::BAD_REQUEST, "missing_parameter")
    );
    for path in [
        "/v1/intents/order-8?workflow=letters",
        "/v1/intents/order%2F7?workflow=parcels",
    ] {
        let unknown = host.get(None, path).await;
        assert_eq!(
            (unknown.status, unknown.code()),
            (StatusCode::NOT_FOUND, "not_found"),
            "{path}"
        );
    }
}

#[tokio::test]
async fn lists_filter_and_paginate_newest_first() {
    let host = start(Auth::open(), true).await;
    let mut created = Vec::new();
    for i in 0..5 {
        created.push(host.submit(None, &format!("k{i}"), letter()).await.id());
        // Distinct creation times, so "newest first" has one answer.
        host.advance(5).await;
    }
    created.reverse();

    let mut seen = Vec::new();
    let mut path = "/v1/workflows?limit=2".to_string();
    loop {
        let page = host.get(None, &path).await;
        assert_eq!(page.status, StatusCode::OK, "{}", page.body);
        let data = page.body["data"].as_array().unwrap();
        assert!(data.len() <= 2);
        for w in data {
            assert_eq!(w["status_text"], "Waiting to start: Prepare letter");
            assert_eq!(w["ended_at"], Value::Null);
            seen.push(w["workflow_id"].as_str().unwrap().to_string());
        }
        match page.body["next_cursor"].as_str() {
            Some(cursor) => path = format!("/v1/workflows?limit=2&cursor={cursor}"),
            None => break,
        }
    }
    assert_eq!(seen, created, "newest first, each once");

    let count = |body: &Value| body["data"].as_array().unwrap().len();
    assert_eq!(
        count(&host.get(None, "/v1/workflows?state=running").await.body),
        5
    );
    assert_eq!(
        count(&host.get(None, "/v1/workflows?state=completed").await.body),
        0
    );
    assert_eq!(
        count(
            &host
                .get(None, "/v1/workflows?workflow=letters&limit=500")
                .await
                .body
        ),
        5
    );
    assert_eq!(
        count(&host.get(None, "/v1/workflows?workflow=parcels").await.body),
        0
    );

    let timeline = host
        .get(
            None,
            &format!("/v1/workflows/{}/timeline?limit=1", created[0]),
        )
        .await;
    assert_eq!(count(&timeline.body), 1);
    let cursor = timeline.body["next_cursor"].as_str().unwrap().to_string();
    let rest = host
        .get(
            None,
            &format!(
                "/v1/workflows/{}/timeline?limit=1&cursor={cursor}",
                created[0]
            ),
        )
        .await;
    assert_eq!(rest.body["data"][0]["seq"], 2);

    for bad in [
        "state=done",
        "limit=0",
        "limit=501",
        "limit=ten",
        "cursor=nonsense",
        &format!("cursor={cursor}"), // a timeline cursor is not a list cursor
    ] {
        let refused = host.get(None, &format!("/v1/workflows?{bad}")).await;
        assert_eq!(
            (refused.status, refused.code()),
            (StatusCode::BAD_REQUEST, "invalid_parameter"),
            "{bad}"
        );
    }
    let refused = host.get(None, "/v1/workflows?state=done").await;
    assert!(refused.message().contains("`done`") && refused.message().contains("needs_review"));
}

#[tokio::test]
async fn the_clock_control_exists_only_with_test_controls() {
    let host = start(Auth::open(), false).await;
    let refused = host.advance(1_000).await;
    assert_eq!(
        (refused.status, refused.code()),
        (StatusCode::NOT_FOUND, "not_found")
    );

    let host = start(Auth::open(), true).await;
    let before = host.clock.now_ms();
    let moved = host.advance(60_000).await;
    assert!(moved.body["now_ms"].as_u64().unwrap() >= before + 60_000);
    let bad = host
        .http
        .post(format!("{}/v1/_test/clock", host.base))
        .json(&json!({"advance_ms": -5}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer(bad).await.code(), "invalid_request");
}

#[tokio::test]
async fn unknown_paths_and_methods_answer_json_errors() {
    let host = start(Auth::open(), true).await;
    let missing = host.get(None, "/v2/things").await;
    assert_eq!(
        (missing.status, missing.code()),
        (StatusCode::NOT_FOUND, "not_found")
    );
    let unknown = host.get(None, "/v1/workflows/wf_nothing").await;
    assert_eq!(
        (unknown.status, unknown.code()),
        (StatusCode::NOT_FOUND, "not_found")
    );
    let wrong = answer(
        host.http
            .delete(format!("{}/v1/intents", host.base))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(wrong.status, StatusCode::METHOD_NOT_ALLOWED);
}
