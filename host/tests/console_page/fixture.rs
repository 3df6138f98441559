//! A workflow with a long story — 50 attempts of one step and more than 200 timeline
//! events — behind the console, served in-process (for the page test and the render
//! benchmark).

use axum::Router;
use axum::body::Body;
use axum::http::{Request, header};
use docket::api::shared_router;
use docket::catalog::Deployments;
use docket::clock::{Clock, SystemClock};
use docket::context::Context;
use docket::intent::{
    AttemptOutcome, EventKind, NewEvent, StepRole, StepState, Subject, Trigger, WorkflowId,
    canonicalize,
};
use docket::store::sqlite::SqliteStore;
use docket::store::{
    AdmissionStore, AdmitRequest, AttemptFacts, ClaimRequest, ExecutorStore, FinishRequest,
    KeyScope, NewStep, NewWorkflow, StepTransition,
};
use docket::workflow::{ComponentWorld, StaticEnv};
use std::sync::Arc;
use tower::ServiceExt;

const DEFINITION: &str = r#"
name = "persistent"
version = 1
deadline = "30d"
[input_schema]
type = "object"
[[steps]]
id = "work"
label = "Keep trying"
kind = "handler"
component = "worker"
version = "^1"
milestone = "Work done"
"#;

pub const ATTEMPTS: u32 = 50;

/// The console over a fresh SQLite store holding one long workflow; returns the app, the
/// workflow id, a signed-in session cookie and the directory to keep alive.
pub async fn long_story() -> (Router, WorkflowId, String, tempfile::TempDir) {
    long_story_and(0).await
}

/// [`long_story`] (begun two hours ago) and `running` fresh one-step workflows, admitted
/// a millisecond apart just now.
pub async fn long_story_and(running: usize) -> (Router, WorkflowId, String, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join("docket.db"))
        .await
        .unwrap();
    let clock = SystemClock::new();
    let deployments = Arc::new(Deployments::new(store.clone()));
    let env = StaticEnv::new().component(
        "worker",
        semver::Version::new(1, 0, 0),
        ComponentWorld::Handler,
    );
    deployments
        .deploy("persistent.toml", DEFINITION, &env, clock.now_ms())
        .await
        .unwrap();
    let mut now = clock.now_ms() - 2 * 3_600_000;
    let id = WorkflowId::new(now);
    store
        .admit(AdmitRequest {
            scope: KeyScope {
                subject: Subject("local".into()),
                workflow: "persistent".into(),
                key: "long-story".into(),
            },
            input: canonicalize(&serde_json::json!({"job": "long"})).unwrap(),
            now,
            create: Some(NewWorkflow {
                workflow_id: id.clone(),
                definition_version: 1,
                steps: vec![NewStep {
                    id: "work".into(),
                    depends_on: vec![],
                    role: StepRole::Handler,
                    compensate_on: vec![],
                    reads: None,
                    adapter: None,
                }],
                deadline_at: now + 30 * 86_400_000,
                key_retention_ms: 86_400_000,
                replaces: None,
                policy_version: 0,
                trace_parent: None,
                events: vec![NewEvent::workflow(
                    EventKind::Observation,
                    "Request recorded",
                )],
            }),
        })
        .await
        .unwrap();
    for n in 1..=ATTEMPTS {
        now += 1_000;
        let claimed = store
            .claim(ClaimRequest {
                owner: format!("host-{}", n % 3),
                now,
                lease_ms: 30_000,
                limit: 1,
                gates: Vec::new(),
                urgent: false,
            })
            .await
            .unwrap();
        let c = claimed.into_iter().next().expect("the step is ready");
        let last = n == ATTEMPTS;
        let events = vec![
            NewEvent::step(
                EventKind::Observation,
                "work",
                Some(&c.attempt_id),
                format!("Attempt {n}: the worker answered `busy`"),
            ),
            NewEvent::step(
                EventKind::Action,
                "work",
                Some(&c.attempt_id),
                format!("Backing off before attempt {}", n + 1),
            ),
            NewEvent::step(
                EventKind::Conclusion,
                "work",
                Some(&c.attempt_id),
                if last {
                    "Keep trying is blocked: out of attempts".to_string()
                } else {
                    format!("Attempt {n} failed; retry scheduled")
                },
            ),
        ];
        store
            .finish(FinishRequest {
                attempt_id: c.attempt_id.clone(),
                checkpoint: 2,
                facts: AttemptFacts {
                    provenance: Some(docket::intent::Provenance {
                        component: "worker".into(),
                        component_version: "1.0.0".into(),
                        component_digest: "sha256:0f0f0f0f0f0f0f0f0f0f0f0f0f0f".into(),
                        input_digest: "sha256:abababababababababababababab".into(),
                    }),
                    request_identity: None,
                    observation: Some(format!("busy (attempt {n})")),
                    outcome: Some(AttemptOutcome::Rejected),
                    result: None,
                    policy: None,
                },
                transition: if last {
                    StepTransition::Terminal(StepState::Blocked)
                } else {
                    StepTransition::Retry {
                        ready_at: now + 500,
                        next_trigger: Trigger::Retry,
                        uncertain_since: None,
                    }
                },
                fence: c.fence,
                note: last.then(|| "out of attempts".to_string()),
                log: serde_json::json!(["asked the worker", "the worker answered busy"]),
                runtime_ms: 3,
                events,
                now: now + 10,
                expired_before: None,
                decided_at: None,
                blocked: None,
                charge: Default::default(),
            })
            .await
            .unwrap();
    }
    let fresh = clock.now_ms();
    for i in 0..running {
        let at = fresh + i as u64;
        store
            .admit(AdmitRequest {
                scope: KeyScope {
                    subject: Subject("local".into()),
                    workflow: "persistent".into(),
                    key: format!("fresh-{i}"),
                },
                input: canonicalize(&serde_json::json!({"job": i})).unwrap(),
                now: at,
                create: Some(NewWorkflow {
                    workflow_id: WorkflowId::new(at),
                    definition_version: 1,
                    steps: vec![NewStep {
                        id: "work".into(),
                        depends_on: vec![],
                        role: StepRole::Handler,
                        compensate_on: vec![],
                        reads: None,
                        adapter: None,
                    }],
                    deadline_at: at + 86_400_000,
                    key_retention_ms: 86_400_000,
                    replaces: None,
                    policy_version: 0,
                    trace_parent: None,
                    events: vec![NewEvent::workflow(
                        EventKind::Observation,
                        "Request recorded",
                    )],
                }),
            })
            .await
            .unwrap();
    }
    let mut ctx = Context::new(store, deployments, clock);
    ctx.test_controls = false;
    let ctx = Arc::new(ctx);
    let app = docket::console::router(ctx.clone()).merge(shared_router(ctx));
    let signed_in = app
        .clone()
        .oneshot(
            Request::post("/console/sign-in")
                .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
                .body(Body::from("token="))
                .unwrap(),
        )
        .await
        .unwrap();
    let cookie = signed_in.headers()[header::SET_COOKIE]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_string();
    (app, id, cookie, dir)
}

/// `GET path` with the session cookie; returns status and body.
pub async fn get(app: &Router, cookie: &str, path: &str) -> (u16, String) {
    let r = app
        .clone()
        .oneshot(
            Request::get(path)
                .header(header::COOKIE, cookie)
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    let status = r.status().as_u16();
    let bytes = axum::body::to_bytes(r.into_body(), 64 << 20).await.unwrap();
    (status, String::from_utf8(bytes.to_vec()).unwrap())
}
