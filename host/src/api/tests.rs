//! The API over a real SQLite store whose writer is made to fail: what a client is told
//! must match what is known of its write.

use super::router;
use crate::catalog::Deployments;
use crate::clock::{Clock, SystemClock};
use crate::context::Context;
use crate::store::sqlite::SqliteStore;
use crate::workflow::{ComponentWorld, StaticEnv};
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use serde_json::Value;
use std::sync::Arc;
use tower::ServiceExt;

const DEFINITION: &str = r#"
name = "notes"
version = 1
deadline = "1h"

[input_schema]
type = "object"
required = ["text"]
properties.text = { type = "string" }

[[steps]]
id = "write"
label = "Write the note"
kind = "handler"
component = "write-note"
version = "^1"
[steps.input]
text = "$input.text"
"#;

async fn host() -> (tempfile::TempDir, SqliteStore, axum::Router) {
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
    let app = router(Context::new(store.clone(), deployments, clock));
    (dir, store, app)
}

async fn submit(app: &axum::Router, key: &str) -> (StatusCode, Option<String>, Value) {
    let request = Request::post("/v1/intents")
        .header("Idempotency-Key", key)
        .body(Body::from(
            r#"{"workflow": "notes", "input": {"text": "hello"}}"#,
        ))
        .unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let retry_after = response
        .headers()
        .get(header::RETRY_AFTER)
        .map(|v| v.to_str().unwrap().to_string());
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap();
    (status, retry_after, serde_json::from_slice(&bytes).unwrap())
}

#[tokio::test]
async fn a_saturated_writer_refuses_admission_with_retry_after_and_nothing_is_recorded() {
    let (_dir, store, app) = host().await;
    let hold = store.saturate_writer().await;
    let (status, retry_after, body) = submit(&app, "busy-1").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["error"]["code"], "unavailable");
    assert!(retry_after.is_some(), "no Retry-After");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("nothing was changed"), "{message}");
    hold.release().await;
    // Nothing was recorded: the same request now creates the workflow.
    let (status, _, body) = submit(&app, "busy-1").await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["replayed"], false);
}

#[tokio::test]
async fn a_commit_whose_acknowledgement_is_lost_is_never_reported_as_nothing_changed() {
    let (_dir, store, app) = host().await;
    store.lose_next_acknowledgements(1);
    let (status, retry_after, body) = submit(&app, "lost-ack-1").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert!(retry_after.is_some(), "no Retry-After");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(!message.contains("nothing was changed"), "{message}");
    assert!(
        message.contains("may or may not have been recorded"),
        "{message}"
    );
    // It was recorded: the same request answers with that workflow.
    let (status, _, body) = submit(&app, "lost-ack-1").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["replayed"], true);
}
