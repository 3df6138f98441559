//! The simulator over real loopback HTTP with a real client: every protocol answer and every
//! fault mode as a caller (an adapter) sees it.

use std::time::Duration;

use reqwest::{Client, StatusCode};
use serde_json::{Value, json};

use super::*;

use crate::wait;

const TOKEN: &str = "test-token";

async fn start(faults: Faults) -> (RunningSim, Client) {
    let config = SimConfig {
        faults,
        ..SimConfig::new(TOKEN)
    };
    let running = ProviderSim::start(config, "127.0.0.1:0".parse().unwrap())
        .await
        .expect("bind a loopback port");
    (running, Client::new())
}

fn delivery(reference: &str, recipient: &str) -> Value {
    json!({
        "client_reference": reference,
        "recipient": recipient,
        "document_digest": "sha256:ab12",
        "document": "hello",
    })
}

async fn post_raw(
    client: &Client,
    sim: &RunningSim,
    key: Option<&str>,
    body: String,
) -> reqwest::Result<reqwest::Response> {
    let mut request = client
        .post(format!("{}/v1/deliveries", sim.base_url()))
        .bearer_auth(TOKEN)
        .header("content-type", "application/json")
        .body(body);
    if let Some(key) = key {
        request = request.header("Idempotency-Key", key);
    }
    request.send().await
}

async fn post(
    client: &Client,
    sim: &RunningSim,
    key: Option<&str>,
    body: &Value,
) -> reqwest::Result<reqwest::Response> {
    post_raw(client, sim, key, body.to_string()).await
}

async fn lookup(client: &Client, sim: &RunningSim, reference: &str) -> reqwest::Response {
    client
        .get(format!("{}/v1/deliveries", sim.base_url()))
        .query(&[("client_reference", reference)])
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
}

async fn cancel(client: &Client, sim: &RunningSim, id: &str) -> reqwest::Response {
    client
        .post(format!("{}/v1/deliveries/{id}/cancel", sim.base_url()))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
}

async fn world(client: &Client, sim: &RunningSim) -> Vec<Value> {
    let body: Value = client
        .get(format!("{}/v1/_world", sim.base_url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    body["data"].as_array().unwrap().clone()
}

async fn patch(client: &Client, sim: &RunningSim, patch: &str) -> reqwest::Response {
    client
        .post(format!("{}/v1/_faults", sim.base_url()))
        .body(patch.to_owned())
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn create_replay_and_conflict() {
    let (sim, client) = start(Faults::default()).await;
    let body = delivery("ref-1", "a@example.com");
    let created = post(&client, &sim, Some("key-1"), &body).await.unwrap();
    assert_eq!(created.status(), StatusCode::CREATED);
    let created: Value = created.json().await.unwrap();
    assert_eq!(
        created,
        json!({"id": "dlv_1", "client_reference": "ref-1", "status": "accepted"})
    );

    // The same body with its keys in another order is a replay, not a conflict.
    let reordered = r#"{"document":"hello","document_digest":"sha256:ab12",
        "recipient":"a@example.com","client_reference":"ref-1"}"#;
    let replay = post_raw(&client, &sim, Some("key-1"), reordered.to_owned())
        .await
        .unwrap();
    assert_eq!(replay.status(), StatusCode::OK);
    assert_eq!(replay.json::<Value>().await.unwrap(), created);

    let other = delivery("ref-1", "b@example.com");
    let conflict = post(&client, &sim, Some("key-1"), &other).await.unwrap();
    assert_eq!(conflict.status(), StatusCode::CONFLICT);
    assert_eq!(
        conflict.json::<Value>().await.unwrap(),
        json!({"error": "idempotency_key_reused"})
    );

    let world = world(&client, &sim).await;
    assert_eq!(world.len(), 1);
    assert_eq!(world[0]["status"], "accepted");
    assert!(world[0]["created_at"].as_str().unwrap().ends_with('Z'));
}

#[tokio::test]
async fn invalid_recipient_is_422_and_malformed_json_is_400() {
    let (sim, client) = start(Faults::default()).await;
    for recipient in ["", "no-at-sign"] {
        let answer = post(&client, &sim, Some(recipient), &delivery("r", recipient))
            .await
            .unwrap();
        assert_eq!(answer.status(), StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(
            answer.json::<Value>().await.unwrap(),
            json!({"error": "invalid_recipient"})
        );
    }
    let answer = post_raw(&client, &sim, None, "{\"client_reference\":".to_owned())
        .await
        .unwrap();
    assert_eq!(answer.status(), StatusCode::BAD_REQUEST);
    assert!(world(&client, &sim).await.is_empty());
}

#[tokio::test]
async fn wrong_or_missing_token_is_401() {
    let (sim, client) = start(Faults::default()).await;
    let url = format!("{}/v1/deliveries", sim.base_url());
    let body = delivery("r", "a@b.c").to_string();
    let missing = client.post(&url).body(body.clone()).send().await.unwrap();
    assert_eq!(missing.status(), StatusCode::UNAUTHORIZED);
    let wrong = client
        .post(&url)
        .bearer_auth("nope")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    let lookup = client
        .get(format!("{url}?client_reference=r"))
        .send()
        .await
        .unwrap();
    assert_eq!(lookup.status(), StatusCode::UNAUTHORIZED);
    let cancel = client
        .post(format!("{url}/dlv_1/cancel"))
        .send()
        .await
        .unwrap();
    assert_eq!(cancel.status(), StatusCode::UNAUTHORIZED);
    assert!(world(&client, &sim).await.is_empty());
}

#[tokio::test]
async fn rate_limit_is_429_with_retry_after_and_creates_nothing() {
    let (sim, client) = start(Faults {
        rate_limit_next: 1,
        retry_after_s: 3,
        ..Faults::default()
    })
    .await;
    let body = delivery("r", "a@b.c");
    let limited = post(&client, &sim, Some("k"), &body).await.unwrap();
    assert_eq!(limited.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(limited.headers()["retry-after"], "3");
    assert!(world(&client, &sim).await.is_empty());
    // Nothing was remembered under the key either: the retry creates.
    let retry = post(&client, &sim, Some("k"), &body).await.unwrap();
    assert_eq!(retry.status(), StatusCode::CREATED);
}

#[tokio::test]
async fn unavailable_is_503_and_creates_nothing() {
    let (sim, client) = start(Faults {
        unavailable: 1.0,
        ..Faults::default()
    })
    .await;
    let answer = post(&client, &sim, Some("k"), &delivery("r", "a@b.c"))
        .await
        .unwrap();
    assert_eq!(answer.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(world(&client, &sim).await.is_empty());
}

/// The error and its sources, outermost first, as one line.
fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = vec![err.to_string()];
    let mut source = err.source();
    while let Some(cause) = source {
        parts.push(cause.to_string());
        source = cause.source();
    }
    parts.join(": ")
}

#[tokio::test]
async fn lost_response_is_a_transport_error_after_commit() {
    let (sim, client) = start(Faults {
        lose: 1.0,
        ..Faults::default()
    })
    .await;
    let err = post(&client, &sim, Some("k"), &delivery("r", "a@b.c"))
        .await
        .expect_err("the connection must close without an answer");
    // No status and no partial answer: hyper reports that the connection closed first.
    assert!(err.status().is_none() && !err.is_timeout(), "{err:?}");
    let chain = error_chain(&err);
    assert!(
        chain.contains("connection closed before message completed"),
        "{chain}"
    );
    let world = world(&client, &sim).await;
    assert_eq!(world.len(), 1);
    assert_eq!(world[0]["client_reference"], "r");
}

#[tokio::test]
async fn lose_next_affects_exactly_one_request() {
    let (sim, client) = start(Faults::default()).await;
    let settings = patch(&client, &sim, r#"{"lose_next": 1}"#).await;
    assert_eq!(settings.json::<Value>().await.unwrap()["lose_next"], 1);
    let body = delivery("r", "a@b.c");
    assert!(post(&client, &sim, Some("k"), &body).await.is_err());
    // The retry under the same key replays the committed delivery.
    let retry = post(&client, &sim, Some("k"), &body).await.unwrap();
    assert_eq!(retry.status(), StatusCode::OK);
    let next = post(&client, &sim, Some("k2"), &body).await.unwrap();
    assert_eq!(next.status(), StatusCode::CREATED);
    assert_eq!(world(&client, &sim).await.len(), 2);
    assert_eq!(sim.sim().faults().lose_next, 0);
}

#[tokio::test]
async fn slow_answer_outlasts_the_caller_but_commits() {
    let (sim, client) = start(Faults {
        slow_next: 1,
        slow_ms: 2_000,
        ..Faults::default()
    })
    .await;
    let err = client
        .post(format!("{}/v1/deliveries", sim.base_url()))
        .bearer_auth(TOKEN)
        .json(&delivery("r", "a@b.c"))
        .timeout(Duration::from_millis(200))
        .send()
        .await
        .expect_err("the answer comes after the client's timeout");
    assert!(err.is_timeout(), "{err:?}");
    assert_eq!(world(&client, &sim).await.len(), 1);
}

#[tokio::test]
async fn idempotency_off_creates_every_time() {
    let (sim, client) = start(Faults::default()).await;
    patch(&client, &sim, r#"{"idempotency": false}"#).await;
    let body = delivery("r", "a@b.c");
    for _ in 0..2 {
        let answer = post(&client, &sim, Some("same-key"), &body).await.unwrap();
        assert_eq!(answer.status(), StatusCode::CREATED);
    }
    let world = world(&client, &sim).await;
    assert_eq!(world.len(), 2);
    assert_eq!(world[0]["id"], "dlv_1");
    assert_eq!(world[1]["id"], "dlv_2");
}

#[tokio::test]
async fn query_off_is_404() {
    let (sim, client) = start(Faults {
        query: false,
        ..Faults::default()
    })
    .await;
    post(&client, &sim, Some("k"), &delivery("r", "a@b.c"))
        .await
        .unwrap();
    assert_eq!(
        lookup(&client, &sim, "r").await.status(),
        StatusCode::NOT_FOUND
    );
    patch(&client, &sim, r#"{"query": true}"#).await;
    let found: Value = lookup(&client, &sim, "r").await.json().await.unwrap();
    assert_eq!(found["data"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn visibility_delay_hides_then_shows() {
    let (sim, client) = start(Faults {
        visibility_delay_ms: 300,
        ..Faults::default()
    })
    .await;
    post(&client, &sim, Some("k"), &delivery("r", "a@b.c"))
        .await
        .unwrap();
    let early = lookup(&client, &sim, "r").await;
    assert_eq!(early.status(), StatusCode::OK);
    assert_eq!(early.json::<Value>().await.unwrap(), json!({"data": []}));
    // The world shows it at once; only lookups lag.
    assert_eq!(world(&client, &sim).await.len(), 1);
    // Shown once the delay has passed (looked at until then, never a fixed wait).
    let data = wait::until(
        "the delivery in lookups",
        Duration::from_secs(10),
        || async {
            let late: Value = lookup(&client, &sim, "r").await.json().await.unwrap();
            match late["data"].as_array() {
                Some(data) if data.len() == 1 => Ok(data.clone()),
                _ => Err(late.to_string()),
            }
        },
    )
    .await;
    assert_eq!(data[0]["id"], "dlv_1");
    assert_eq!(data[0]["recipient"], "a@b.c");
    assert_eq!(data[0]["document_digest"], "sha256:ab12");
}

#[tokio::test]
async fn cancel_twice_gives_the_same_answer() {
    let (sim, client) = start(Faults::default()).await;
    post(&client, &sim, Some("k"), &delivery("r", "a@b.c"))
        .await
        .unwrap();
    for _ in 0..2 {
        let answer = cancel(&client, &sim, "dlv_1").await;
        assert_eq!(answer.status(), StatusCode::OK);
        assert_eq!(
            answer.json::<Value>().await.unwrap(),
            json!({"id": "dlv_1", "status": "cancelled"})
        );
    }
    assert_eq!(
        cancel(&client, &sim, "dlv_9").await.status(),
        StatusCode::NOT_FOUND
    );
    let recorded = &world(&client, &sim).await[0];
    assert_eq!(recorded["status"], "cancelled");
    assert_eq!(recorded["cancel_requests"], 2, "{recorded}");
    assert!(recorded["cancelled_at"].is_string(), "{recorded}");
    assert_eq!(sim.sim().world()[0].status, DeliveryStatus::Cancelled);
    // A lookup shows the cancel, but not the world's request count.
    let found: Value = lookup(&client, &sim, "r").await.json().await.unwrap();
    assert_eq!(found["data"][0]["status"], "cancelled", "{found}");
    assert_eq!(found["data"][0]["cancelled_at"], recorded["cancelled_at"]);
    assert!(found["data"][0].get("cancel_requests").is_none(), "{found}");
}

#[tokio::test]
async fn a_cancel_can_lose_its_response_or_be_refused() {
    let (sim, client) = start(Faults::default()).await;
    post(&client, &sim, Some("k"), &delivery("r", "a@b.c"))
        .await
        .unwrap();
    patch(&client, &sim, r#"{"unavailable_next_cancel": 1}"#).await;
    assert_eq!(
        cancel(&client, &sim, "dlv_1").await.status(),
        StatusCode::SERVICE_UNAVAILABLE
    );
    assert_eq!(world(&client, &sim).await[0]["status"], "accepted");

    patch(&client, &sim, r#"{"lose_next_cancel": 1}"#).await;
    let lost = client
        .post(format!("{}/v1/deliveries/dlv_1/cancel", sim.base_url()))
        .bearer_auth(TOKEN)
        .send()
        .await;
    assert!(lost.is_err(), "the answer should be lost: {lost:?}");
    // The cancel took effect although nobody heard so; asking again changes nothing.
    let recorded = &world(&client, &sim).await[0];
    assert_eq!(recorded["status"], "cancelled", "{recorded}");
    let at = recorded["cancelled_at"].clone();
    assert_eq!(
        cancel(&client, &sim, "dlv_1").await.status(),
        StatusCode::OK
    );
    let recorded = &world(&client, &sim).await[0];
    assert_eq!(recorded["cancel_requests"], 3, "{recorded}");
    assert_eq!(recorded["cancelled_at"], at);
}

#[tokio::test]
async fn faults_patch_answers_settings_and_names_a_bad_field() {
    let (sim, client) = start(Faults::default()).await;
    let answer = patch(&client, &sim, r#"{"lose": 0.25, "query": false}"#).await;
    assert_eq!(answer.status(), StatusCode::OK);
    let settings: Faults = answer.json().await.unwrap();
    assert_eq!(
        settings,
        Faults {
            lose: 0.25,
            query: false,
            ..Faults::default()
        }
    );

    let typo = patch(&client, &sim, r#"{"loose": 1}"#).await;
    assert_eq!(typo.status(), StatusCode::BAD_REQUEST);
    let message = typo.json::<Value>().await.unwrap()["message"].to_string();
    assert!(message.contains("loose"), "{message}");
    let range = patch(&client, &sim, r#"{"lose": 2}"#).await;
    assert_eq!(range.status(), StatusCode::BAD_REQUEST);
    let garbage = patch(&client, &sim, "{lose").await;
    assert_eq!(garbage.status(), StatusCode::BAD_REQUEST);
    // Refused patches change nothing.
    assert_eq!(sim.sim().faults(), settings);
}

/// Outcome pattern of `n` creates: `true` where the response was lost.
async fn lost_pattern(client: &Client, sim: &RunningSim, run: &str, n: usize) -> Vec<bool> {
    let mut pattern = Vec::new();
    for i in 0..n {
        let key = format!("{run}-{i}");
        let answer = post(client, sim, Some(&key), &delivery(&key, "a@b.c")).await;
        pattern.push(answer.is_err());
    }
    pattern
}

#[tokio::test]
async fn seeded_shares_repeat() {
    let faults = Faults {
        lose: 0.5,
        seed: 7,
        ..Faults::default()
    };
    let (first_sim, client) = start(faults.clone()).await;
    let first = lost_pattern(&client, &first_sim, "a", 16).await;
    assert!(first.contains(&true) && first.contains(&false), "{first:?}");

    // Reseeding the same simulator repeats the sequence...
    patch(&client, &first_sim, r#"{"seed": 7}"#).await;
    let again = lost_pattern(&client, &first_sim, "b", 16).await;
    assert_eq!(first, again);

    // ...and so does a fresh simulator with the same settings.
    let (second_sim, client) = start(faults).await;
    let fresh = lost_pattern(&client, &second_sim, "c", 16).await;
    assert_eq!(first, fresh);

    // Every request committed, lost or not.
    assert_eq!(world(&client, &first_sim).await.len(), 32);
}

#[tokio::test]
async fn shutdown_stops_serving() {
    let (sim, client) = start(Faults::default()).await;
    let url = format!("{}/v1/_world", sim.base_url());
    assert!(client.get(&url).send().await.is_ok());
    sim.shutdown().await;
    // A fresh client, so no pooled connection outlives the server in the check.
    assert!(Client::new().get(&url).send().await.is_err());
}

#[tokio::test]
async fn injected_clock_drives_created_at_and_key_retention() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::UNIX_EPOCH;

    let secs = Arc::new(AtomicU64::new(1_700_000_000));
    let clock_secs = Arc::clone(&secs);
    let clock: Clock =
        Arc::new(move || UNIX_EPOCH + Duration::from_secs(clock_secs.load(Ordering::SeqCst)));
    let config = SimConfig {
        key_retention: Duration::from_secs(60),
        ..SimConfig::new(TOKEN)
    };
    let sim = ProviderSim::with_clock(config, clock)
        .spawn("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let client = Client::new();
    let body = delivery("r", "a@b.c");
    assert_eq!(
        post(&client, &sim, Some("k"), &body)
            .await
            .unwrap()
            .status(),
        StatusCode::CREATED
    );
    assert_eq!(sim.sim().world()[0].created_at, "2023-11-14T22:13:20.000Z");
    // After the retention the key is forgotten and the same request creates again.
    secs.fetch_add(60, Ordering::SeqCst);
    assert_eq!(
        post(&client, &sim, Some("k"), &body)
            .await
            .unwrap()
            .status(),
        StatusCode::CREATED
    );
    assert_eq!(sim.sim().world().len(), 2);
}

/// A receiver of the provider's events that checks each signature with an independent
/// implementation of Standard Webhooks: (webhook-id, type, delivery id, verified).
async fn event_receiver(
    secret: &'static str,
) -> (
    String,
    std::sync::Arc<std::sync::Mutex<Vec<(String, Value, bool)>>>,
) {
    use axum::routing::post;
    let got: std::sync::Arc<std::sync::Mutex<Vec<(String, Value, bool)>>> = Default::default();
    let kept = got.clone();
    let app = axum::Router::new().route(
        "/events",
        post(move |headers: http::HeaderMap, body: axum::body::Bytes| {
            let kept = kept.clone();
            async move {
                let verified = standardwebhooks::Webhook::new(secret)
                    .unwrap()
                    .verify(&body, &headers)
                    .is_ok();
                let id = headers
                    .get("webhook-id")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_string();
                let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                kept.lock().unwrap().push((id, body, verified));
                http::StatusCode::NO_CONTENT
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/events", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, got)
}

#[tokio::test]
async fn the_provider_posts_signed_events_late_and_twice_on_request() {
    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    let (url, got) = event_receiver(SECRET).await;
    let (sim, client) = start(Faults::default()).await;
    // A secret that is not one, or a URL without its secret, is refused.
    assert!(
        sim.sim()
            .set_faults(json!({"webhook_url": url, "webhook_secret": "nope"}))
            .is_err()
    );
    assert!(sim.sim().set_faults(json!({"webhook_url": url})).is_err());
    sim.sim()
        .set_faults(
            json!({"webhook_url": url, "webhook_secret": SECRET, "webhook_late_next": 1,
                           "webhook_late_ms": 600, "webhook_repeat_next": 0}),
        )
        .unwrap();
    // Created, then cancelled at once: the late `accepted` arrives after the `cancelled`.
    let created: Value = post(
        &client,
        &sim,
        Some("k-1"),
        &delivery("k-1", "a@example.com"),
    )
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    let id = created["id"].as_str().unwrap().to_string();
    let cancel = client
        .post(format!("{}/v1/deliveries/{id}/cancel", sim.base_url()))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(cancel.status(), StatusCode::OK);
    // A second cancel takes no effect, and makes no event.
    client
        .post(format!("{}/v1/deliveries/{id}/cancel", sim.base_url()))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    let events = wait::until("both events", Duration::from_secs(10), || async {
        let events = got.lock().unwrap().clone();
        if events.len() == 2 {
            Ok(events)
        } else {
            Err(format!("{events:?}"))
        }
    })
    .await;
    assert_eq!(events[0].1["type"], "delivery.cancelled", "{events:?}");
    assert_eq!(events[1].1["type"], "delivery.accepted", "{events:?}");
    assert!(
        events
            .iter()
            .all(|(_, body, verified)| *verified && body["data"]["id"] == id.as_str())
    );
    assert_eq!(events[0].1["data"]["status"], "cancelled");
    assert_eq!(events[1].0, "evt_1");
    assert_eq!(events[0].0, "evt_2");
    // A replay: the next event twice, under one id; a replayed create makes none.
    sim.sim()
        .set_faults(json!({"webhook_repeat_next": 1}))
        .unwrap();
    post(
        &client,
        &sim,
        Some("k-2"),
        &delivery("k-2", "b@example.com"),
    )
    .await
    .unwrap();
    post(
        &client,
        &sim,
        Some("k-2"),
        &delivery("k-2", "b@example.com"),
    )
    .await
    .unwrap();
    let events = wait::until("the repeated event", Duration::from_secs(10), || async {
        let events = got.lock().unwrap().clone();
        if events.len() == 4 {
            Ok(events)
        } else {
            Err(format!("{events:?}"))
        }
    })
    .await;
    assert_eq!(events[2].0, "evt_3");
    assert_eq!(events[3].0, "evt_3");
    assert_eq!(events[2].1, events[3].1);
    // The replayed create made no event: the next delivery's event is the fourth.
    post(
        &client,
        &sim,
        Some("k-3"),
        &delivery("k-3", "c@example.com"),
    )
    .await
    .unwrap();
    let next = wait::until(
        "the next delivery's event",
        Duration::from_secs(10),
        || async {
            let events = got.lock().unwrap().clone();
            match events
                .iter()
                .find(|(_, body, _)| body["data"]["id"] == "dlv_3")
            {
                Some((id, _, _)) => Ok(id.clone()),
                None => Err(format!("{events:?}")),
            }
        },
    )
    .await;
    assert_eq!(next, "evt_4", "the replayed create made no event");
}

async fn post_batch(
    client: &Client,
    sim: &RunningSim,
    items: &[Value],
) -> reqwest::Result<reqwest::Response> {
    client
        .post(format!("{}/v1/deliveries/batch", sim.base_url()))
        .bearer_auth(TOKEN)
        .json(&json!({ "items": items }))
        .send()
        .await
}

fn keyed(key: &str, reference: &str, recipient: &str) -> Value {
    let mut item = delivery(reference, recipient);
    item["idempotency_key"] = json!(key);
    item
}

#[tokio::test]
async fn a_bulk_create_answers_each_item_and_a_lost_answer_is_replayed_item_by_item() {
    let (sim, client) = start(Faults::default()).await;
    let items = vec![
        keyed("k1", "r1", "a@b.c"),
        keyed("k2", "r2", "nobody"),
        keyed("k3", "r3", "a@b.c"),
    ];
    // The provider takes part of the batch: the first item it does not take.
    patch(&client, &sim, r#"{"item_unavailable_next": 1}"#).await;
    let answer = post_batch(&client, &sim, &items).await.unwrap();
    assert_eq!(answer.status(), StatusCode::OK);
    let answer: Value = answer.json().await.unwrap();
    assert_eq!(
        answer,
        json!({"items": [
            {"code": 503, "error": "unavailable"},
            {"code": 422, "error": "invalid_recipient"},
            {"code": 201, "delivery": {"id": "dlv_1", "client_reference": "r3", "status": "accepted"}},
        ]})
    );
    // The batch again, its answer lost after commit: what it took is in the world.
    patch(&client, &sim, r#"{"lose_next": 1}"#).await;
    let err = post_batch(&client, &sim, &items)
        .await
        .expect_err("the answer is lost");
    assert!(err.status().is_none(), "{err:?}");
    assert_eq!(world(&client, &sim).await.len(), 2);
    // And once more: every item that was taken replays; nothing is made twice.
    let answer: Value = post_batch(&client, &sim, &items)
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let codes: Vec<&Value> = answer["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| &i["code"])
        .collect();
    assert_eq!(codes, [&json!(200), &json!(422), &json!(200)]);
    assert_eq!(world(&client, &sim).await.len(), 2);
    // A single create under an item's key replays the item's delivery.
    let single = post(&client, &sim, Some("k1"), &delivery("r1", "a@b.c"))
        .await
        .unwrap();
    assert_eq!(single.status(), StatusCode::OK);
    // A batch without a token, or over the limit, creates nothing.
    let anonymous = client
        .post(format!("{}/v1/deliveries/batch", sim.base_url()))
        .json(&json!({"items": items}))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);
    let many: Vec<Value> = (0..=crate::sim::MAX_BATCH_ITEMS)
        .map(|i| keyed(&format!("m{i}"), "m", "a@b.c"))
        .collect();
    let refused = post_batch(&client, &sim, &many).await.unwrap();
    assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
    assert_eq!(world(&client, &sim).await.len(), 2);
}
