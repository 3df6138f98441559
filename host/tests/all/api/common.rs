//! The harness: a served router over a fresh database (SQLite file or PostgreSQL database,
//! by the backend the case runs on), and request helpers.

use docket::access::{Auth, Principal, Role};
use docket::api::router;
use docket::catalog::Deployments;
use docket::clock::{Clock, SystemClock};
use docket::context::{Context, ContextStore, Limits};
use docket::intent::{AttemptOutcome, EvidenceKind, ReceiptId};
use docket::store::postgres::PgStore;
use docket::store::sqlite::SqliteStore;
use docket::store::{
    AttemptFacts, ClaimRequest, DefinitionStore, ExecutorStore, FinishRequest, NewReceipt,
    StepTransition,
};
use docket::workflow::{ComponentWorld, StaticEnv};
use reqwest::StatusCode;
use reqwest::header::HeaderMap;
use serde_json::{Value, json};
use std::future::Future;
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

/// The key retention of every test host.
pub const RETENTION: Duration = Duration::from_secs(24 * 60 * 60);

/// The backend a case runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendKind {
    Sqlite,
    Postgres,
}

tokio::task_local! {
    /// The PostgreSQL URL of the running case's database; unset on SQLite.
    static POSTGRES_URL: Option<String>;
}

/// Runs `case` on `kind`; on PostgreSQL in a database of its own, dropped afterwards (also
/// when the case fails).
pub async fn on(kind: BackendKind, case: impl Future<Output = ()>) {
    if kind == BackendKind::Sqlite {
        return POSTGRES_URL.scope(None, case).await;
    }
    let database = DropOnExit(crate::postgres::TestDatabase::create().await);
    POSTGRES_URL.scope(Some(database.0.url.clone()), case).await;
}

/// Drops the test database when it goes out of scope, also while a failing case unwinds.
struct DropOnExit(crate::postgres::TestDatabase);

impl Drop for DropOnExit {
    fn drop(&mut self) {
        self.0.drop_blocking();
    }
}

/// The store under the served router.
#[derive(Clone)]
pub enum Store {
    Sqlite(SqliteStore),
    Postgres(PgStore),
}

pub struct Host {
    pub base: String,
    pub http: reqwest::Client,
    pub store: Store,
    pub clock: Arc<SystemClock>,
    _dir: tempfile::TempDir,
}

pub fn principal(subject: &str, role: Role) -> Principal {
    Principal::new(subject, role)
}

/// alice and bob are clients, ops is an operator.
pub fn tokens() -> Auth {
    Auth::with_tokens([
        ("alice-token".to_string(), principal("alice", Role::Client)),
        ("bob-token".to_string(), principal("bob", Role::Client)),
        ("ops-token".to_string(), principal("ops", Role::Operator)),
    ])
}

pub async fn start(auth: Auth, test_controls: bool) -> Host {
    let dir = tempfile::tempdir().unwrap();
    let clock = SystemClock::new();
    let url = POSTGRES_URL
        .try_with(Clone::clone)
        .expect("cases run through `common::on`");
    let (store, base) = match url {
        None => {
            let store = SqliteStore::open(&dir.path().join("docket.db"))
                .await
                .unwrap();
            let base = serve(store.clone(), auth, test_controls, clock.clone()).await;
            (Store::Sqlite(store), base)
        }
        Some(url) => {
            let store = PgStore::connect(&url).await.unwrap();
            let base = serve(store.clone(), auth, test_controls, clock.clone()).await;
            (Store::Postgres(store), base)
        }
    };
    Host {
        base,
        http: reqwest::Client::new(),
        store,
        clock,
        _dir: dir,
    }
}

/// Deploys `letters` and serves the API over `store` on a loopback port; returns its URL.
async fn serve<S: ContextStore + DefinitionStore>(
    store: S,
    auth: Auth,
    test_controls: bool,
    clock: Arc<SystemClock>,
) -> String {
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
    let mut ctx = Context::new(store, deployments, clock);
    ctx.auth = auth;
    ctx.limits = Limits {
        key_retention: RETENTION,
        ..Limits::default()
    };
    ctx.test_controls = test_controls;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router(ctx)).await });
    format!("http://{addr}")
}

pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Value,
}

impl Answer {
    pub fn code(&self) -> &str {
        self.body["error"]["code"]
            .as_str()
            .unwrap_or("<no error code>")
    }

    pub fn message(&self) -> &str {
        self.body["error"]["message"].as_str().unwrap_or("")
    }

    pub fn id(&self) -> String {
        self.body["workflow_id"]
            .as_str()
            .expect("workflow_id")
            .to_string()
    }
}

pub async fn answer(response: reqwest::Response) -> Answer {
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

/// [`answer`], held against the API's OpenAPI document.
pub async fn checked_answer(method: &str, response: reqwest::Response) -> Answer {
    let path = response.url().path().to_string();
    let answer = answer(response).await;
    crate::openapi_check::check(method, &path, answer.status.as_u16(), Some(&answer.body));
    answer
}

impl Host {
    /// `POST /v1/intents` with a raw body.
    pub async fn post_raw(
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
        checked_answer("POST", request.send().await.unwrap()).await
    }

    /// `POST /v1/intents` for the `letters` workflow.
    pub async fn submit(&self, token: Option<&str>, key: &str, input: Value) -> Answer {
        let body = json!({"workflow": "letters", "input": input}).to_string();
        self.post_raw(token, Some(key), body).await
    }

    pub async fn get(&self, token: Option<&str>, path: &str) -> Answer {
        let mut request = self.http.get(format!("{}{path}", self.base));
        if let Some(t) = token {
            request = request.bearer_auth(t);
        }
        checked_answer("GET", request.send().await.unwrap()).await
    }

    pub async fn advance(&self, ms: u64) -> Answer {
        let request = self
            .http
            .post(format!("{}/v1/_test/clock", self.base))
            .json(&json!({"advance_ms": ms}));
        checked_answer("POST", request.send().await.unwrap()).await
    }

    /// Runs every ready step to success, as the scheduler would, until none is left.
    pub async fn finish_ready_steps(&self) -> usize {
        match &self.store {
            Store::Sqlite(s) => finish_ready_steps(s, &self.clock).await,
            Store::Postgres(s) => finish_ready_steps(s, &self.clock).await,
        }
    }
}

async fn finish_ready_steps<S: ExecutorStore>(store: &S, clock: &SystemClock) -> usize {
    {
        let mut finished = 0;
        loop {
            let now = clock.now_ms();
            let claimed = store
                .claim(ClaimRequest {
                    owner: "test-worker".into(),
                    now,
                    lease_ms: 60_000,
                    limit: 10,
                    gates: Vec::new(),
                    urgent: false,
                })
                .await
                .unwrap();
            if claimed.is_empty() {
                return finished;
            }
            for c in claimed {
                let identity = format!("{}:{}:letters-ns", c.fence.workflow_id, c.fence.step);
                store
                    .finish(FinishRequest {
                        attempt_id: c.attempt_id.clone(),
                        checkpoint: 6,
                        facts: AttemptFacts {
                            provenance: Some(docket::intent::Provenance {
                                component: "prepare-letter".into(),
                                component_version: "1.0.0".into(),
                                component_digest: "sha256:abcd".into(),
                                input_digest: "sha256:1234".into(),
                            }),
                            request_identity: Some(identity),
                            observation: Some("done".into()),
                            outcome: Some(AttemptOutcome::Accepted),
                            result: None,
                            policy: None,
                        },
                        transition: StepTransition::Succeeded(Box::new(NewReceipt {
                            receipt_id: ReceiptId::new(now),
                            evidence_kind: EvidenceKind::Response,
                            provenance: docket::intent::Provenance {
                                component: "prepare-letter".into(),
                                component_version: "1.0.0".into(),
                                component_digest: "sha256:abcd".into(),
                                input_digest: "sha256:1234".into(),
                            },
                            external_reference: Some(format!("ext-{}", c.fence.step)),
                            output: json!({"title": "Hello"}),
                            author: None,
                            reason: None,
                            evidence: None,
                        })),
                        fence: c.fence,
                        note: None,
                        log: json!([]),
                        runtime_ms: 1,
                        events: Vec::new(),
                        now,
                        expired_before: None,
                        decided_at: None,
                        blocked: None,
                        charge: Default::default(),
                    })
                    .await
                    .unwrap();
                finished += 1;
            }
        }
    }
}

/// A valid input of `letters`.
pub fn letter() -> Value {
    json!({"title": "Hello", "copies": 2, "tags": {"a": 1, "b": 2}})
}
