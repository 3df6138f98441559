//! Reads and access: intents by key, projections, lists and pages, tokens and subjects,
//! the test clock, unknown paths.

use super::common::*;
use docket::access::Auth;
use docket::clock::Clock;
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::collections::HashSet;

pub async fn keys_are_scoped_per_subject_and_clients_see_only_their_own() {
    let host = start(tokens(), true).await;
    let alice = host
        .submit(Some("alice-token"), "shared-key", letter())
        .await;
    let bob = host.submit(Some("bob-token"), "shared-key", letter()).await;
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

pub async fn unknown_or_missing_tokens_are_unauthorized() {
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

pub async fn intents_are_read_back_by_key() {
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

pub async fn lists_filter_and_paginate_newest_first() {
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

pub async fn the_clock_control_exists_only_with_test_controls() {
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

pub async fn unknown_paths_and_methods_answer_json_errors() {
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
