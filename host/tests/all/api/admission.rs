//! `POST /v1/intents`: creation, replay, conflicts, refusals, concurrency and key retention.

use super::common::*;
use docket::access::Auth;
use docket::context::Limits;
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::collections::HashSet;
use std::sync::Arc;

pub async fn a_new_key_creates_a_workflow_and_an_equivalent_resubmission_replays_it() {
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
    let raw = r#"{"input": {"tags": {"b": 2, "a": 1.0}, "copies": 2.0, "title": "Hello"},
                  "workflow": "letters"}"#;
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
            {"id": "prepare", "label": "Prepare letter", "state": "ready", "attempts": 0,
             "escalated": null, "receipt": null, "blocked": null, "contradicted": null, "compensation": null,
             "superseded_receipts": [], "retention_deadline": null, "contract": null,
             "approval": null, "items": null},
            {"id": "deliver", "label": "Deliver letter", "state": "pending", "attempts": 0,
             "escalated": null, "receipt": null, "blocked": null, "contradicted": null, "compensation": null,
             "superseded_receipts": [], "retention_deadline": null, "contract": null,
             "approval": null, "items": null},
        ])
    );
    // The projection's course: its revision (two timeline events so far), the command as
    // sent, and what the caller may do now.
    assert_eq!(v["revision"], 2);
    assert_eq!(v["input_revision"], 1);
    assert_eq!(v["actions"][0]["action"], "cancel");
    assert_eq!(v["actions"][0]["label"], "Cancel request");

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

pub async fn a_key_reused_with_another_input_conflicts_and_changes_nothing() {
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

pub async fn malformed_requests_are_refused_in_the_documented_order() {
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
    // The host's own key prefixes are reserved: a client cannot take the key of an
    // operator's replacement before the operator does.
    for reserved in [
        "replacement:wf_0123",
        "Replacement:wf_0123",
        "docket:anything",
    ] {
        let refused = host.post_raw(None, Some(reserved), good.clone()).await;
        assert_eq!(
            (refused.status, refused.code()),
            (StatusCode::BAD_REQUEST, "invalid_key"),
            "{reserved:?}"
        );
        assert!(
            refused.message().contains("reserved"),
            "{}",
            refused.message()
        );
    }
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

/// I-JSON: a body whose object names a member twice has no one meaning, so it is refused
/// (`400 invalid_json`, naming the member and where it is) on every JSON body — an intent,
/// its input, a revision, a cancellation — and nothing is written.
pub async fn a_member_named_twice_is_refused_on_every_json_body() {
    let host = start(Auth::open(), true).await;
    let twice = r#"{"workflow": "letters", "workflow": "letters", "input": {}}"#;
    let refused = host.post_raw(None, Some("dup-1"), twice).await;
    assert_eq!(
        (refused.status, refused.code()),
        (StatusCode::BAD_REQUEST, "invalid_json")
    );
    assert!(
        refused
            .message()
            .contains("the member `workflow` appears twice in the object at ``"),
        "{}",
        refused.message()
    );
    let inner = r#"{"workflow": "letters", "input": {"title": "t", "title": "u"}}"#;
    let refused = host.post_raw(None, Some("dup-2"), inner).await;
    assert_eq!(refused.code(), "invalid_json");
    assert!(
        refused
            .message()
            .contains("`title` appears twice in the object at `/input`"),
        "{}",
        refused.message()
    );
    // Nothing was admitted under either key.
    for key in ["dup-1", "dup-2"] {
        let found = host
            .get(None, &format!("/v1/intents/{key}?workflow=letters"))
            .await;
        assert_eq!(found.status, StatusCode::NOT_FOUND, "{key}");
    }
    // The same on a workflow's revision and cancellation bodies.
    let created = host.submit(None, "dup-3", letter()).await;
    let id = created.body["workflow_id"].as_str().unwrap().to_string();
    for (path, body) in [
        (
            format!("/v1/workflows/{id}/revisions"),
            r#"{"input": {"a": 1}, "input": {"a": 2}, "reason": "r"}"#,
        ),
        (
            format!("/v1/workflows/{id}/cancel"),
            r#"{"reason": "r", "reason": "s"}"#,
        ),
    ] {
        let response = host
            .http
            .post(format!("{}{path}", host.base))
            .header("Idempotency-Key", "dup-course")
            .body(body)
            .send()
            .await
            .unwrap();
        let refused = checked_answer("POST", response).await;
        assert_eq!(
            (refused.status, refused.code()),
            (StatusCode::BAD_REQUEST, "invalid_json"),
            "{path}: {}",
            refused.body
        );
        assert!(refused.message().contains("appears twice"), "{path}");
    }
    let revisions = host
        .get(None, &format!("/v1/workflows/{id}/revisions"))
        .await;
    assert_eq!(revisions.status, StatusCode::OK);
    let cancellation = host
        .get(None, &format!("/v1/workflows/{id}/cancellation"))
        .await;
    assert_eq!(
        cancellation.status,
        StatusCode::NOT_FOUND,
        "{}",
        cancellation.body
    );
}

pub async fn a_quoted_key_is_the_same_key() {
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

pub async fn an_unknown_workflow_is_not_found() {
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

pub async fn a_body_over_the_limit_is_too_large() {
    let host = start(Auth::open(), true).await;
    let filler = "x".repeat(Limits::DEFAULT_MAX_BODY_BYTES);
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

pub async fn an_input_against_the_schema_is_unprocessable_with_pointers() {
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

pub async fn concurrent_submissions_of_one_key_create_one_workflow() {
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

pub async fn a_key_is_retained_while_the_workflow_runs_and_for_the_retention_after_it_ends() {
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
