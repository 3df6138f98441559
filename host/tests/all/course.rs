//! Changing a workflow's course against a real `docket serve`, its provider simulator and
//! a real database: a cancellation is an intent of its own, decided by what it finds, acted
//! on once however often it is pressed, and never claiming more than is known; the
//! projection carries its revision for `ETag`s and long-polls. Each case runs on a SQLite
//! file (`sqlite::<case>`) and a PostgreSQL database of its own (`postgres::<case>`).

use crate::host_process::{Contract, HostOptions, HostProcess, document};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

const SETTLED: &[&str] = &["completed", "needs_review", "failed", "cancelled"];

/// The owner (a client) and an operator, by token.
const TOKENS: &str = r#"
[[tokens]]
token = "owner-token-0123456789"
subject = "team-a"
role = "client"
[[tokens]]
token = "stranger-token-0123456789"
subject = "team-b"
role = "client"
[[tokens]]
token = "ops-token-0123456789abcd"
subject = "alice"
role = "operator"
"#;

/// A POST with a key and (optionally) a bearer token.
async fn post(
    host: &HostProcess,
    path: &str,
    key: &str,
    token: Option<&str>,
    body: Value,
) -> (u16, Value) {
    let mut request = reqwest::Client::new()
        .post(format!("{}{path}", host.url))
        .header("Idempotency-Key", key)
        .json(&body);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let r = request.send().await.unwrap();
    (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
}

async fn get(host: &HostProcess, path: &str, token: Option<&str>) -> (u16, Value) {
    let mut request = reqwest::Client::new().get(format!("{}{path}", host.url));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let r = request.send().await.unwrap();
    (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
}

/// The names of the projection's `actions`.
fn actions(wf: &Value) -> Vec<&str> {
    wf["actions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["action"].as_str().unwrap())
        .collect()
}

fn step<'a>(wf: &'a Value, id: &str) -> &'a Value {
    wf["steps"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["id"] == id))
        .unwrap_or_else(|| panic!("no step {id}: {wf:#}"))
}

async fn submit(host: &HostProcess, workflow: &str, key: &str, token: Option<&str>) -> String {
    let (status, created) = post(
        host,
        "/v1/intents",
        key,
        token,
        json!({"workflow": workflow, "input": document(key)}),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    created["workflow_id"].as_str().unwrap().to_string()
}

/// A fire-and-forget delivery whose response was lost: it waits for review.
async fn unknown_outcome(host: &HostProcess, key: &str) -> String {
    host.faults(json!({"lose_next": 1})).await;
    let id = submit(host, Contract::FireAndForget.workflow(), key, None).await;
    let wf = host.wait_for(&id, SETTLED, Duration::from_secs(30)).await;
    assert_eq!(step(&wf, "deliver")["state"], "outcome_unknown", "{wf:#}");
    id
}

/// Before any step ran: every step is cancelled at once, nothing reaches the provider, and
/// pressing again — with the same key, another key, or by another caller at the same
/// moment — answers with the one cancellation.
async fn a_cancellation_before_any_effect_ends_every_step_once(db: Option<String>) {
    let host = HostProcess::start(HostOptions {
        db,
        config: TOKENS.into(),
        pause_execution: true,
        ..HostOptions::default()
    })
    .await;
    let id = submit(
        &host,
        "document-delivery",
        "cancel-early",
        Some("owner-token-0123456789"),
    )
    .await;
    let (_, wf) = get(
        &host,
        &format!("/v1/workflows/{id}"),
        Some("owner-token-0123456789"),
    )
    .await;
    assert_eq!(wf["actions"][0]["action"], "cancel", "{wf:#}");
    assert_eq!(wf["actions"][0]["label"], "Cancel request");
    assert_eq!(wf["actions"][0]["consequences"], json!([]));
    assert_eq!(actions(&wf), ["cancel", "revise", "replace"]);
    let path = format!("/v1/workflows/{id}/cancel");

    // Another client cannot see the workflow; a cancellation needs a reason.
    let (status, _) = post(
        &host,
        &path,
        "c-0",
        Some("stranger-token-0123456789"),
        json!({"reason": "x"}),
    )
    .await;
    assert_eq!(status, 404);
    let (status, body) = post(
        &host,
        &path,
        "c-0",
        Some("owner-token-0123456789"),
        json!({}),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["details"][0]["pointer"], "/reason");

    // The owner and an operator press at the same moment, under different keys.
    let reason = json!({"reason": "ordered by mistake"});
    let (a, b) = tokio::join!(
        post(
            &host,
            &path,
            "c-1",
            Some("owner-token-0123456789"),
            reason.clone()
        ),
        post(
            &host,
            &path,
            "c-2",
            Some("ops-token-0123456789abcd"),
            json!({"reason": "asked by phone"})
        ),
    );
    let mut answers = [a, b];
    answers.sort_by_key(|(status, _)| *status);
    assert_eq!(answers[0].0, 200, "{answers:?}");
    assert_eq!(answers[1].0, 202, "{answers:?}");
    let created = answers[1].1.clone();
    assert_eq!(
        answers[0].1["cancellation_id"], created["cancellation_id"],
        "{answers:?}"
    );
    assert!(
        created["cancellation_id"]
            .as_str()
            .unwrap()
            .starts_with("cnl_")
    );
    assert_eq!(created["outcome"], "cancelled", "{created:#}");
    assert_eq!(created["workflow_id"], id.as_str());
    assert!(created["requested_at"].as_str().unwrap().ends_with('Z'));

    // The same key again answers as it did; a third key answers with the same one.
    let creator = if created["requested_by"] == "team-a" {
        ("c-1", "owner-token-0123456789", reason.clone())
    } else {
        (
            "c-2",
            "ops-token-0123456789abcd",
            json!({"reason": "asked by phone"}),
        )
    };
    let (status, again) = post(&host, &path, creator.0, Some(creator.1), creator.2).await;
    assert_eq!(status, 202, "{again}");
    assert_eq!(again, created);
    let (status, other) = post(
        &host,
        &path,
        "c-3",
        Some("ops-token-0123456789abcd"),
        reason.clone(),
    )
    .await;
    assert_eq!(status, 200, "{other}");
    assert_eq!(other["cancellation_id"], created["cancellation_id"]);
    // The same key with another body is a conflict, and changes nothing.
    let (status, conflict) = post(
        &host,
        &path,
        creator.0,
        Some(creator.1),
        json!({"reason": "something else"}),
    )
    .await;
    assert_eq!(status, 409, "{conflict}");
    assert_eq!(conflict["error"]["code"], "key_conflict");

    let (_, wf) = get(
        &host,
        &format!("/v1/workflows/{id}"),
        Some("ops-token-0123456789abcd"),
    )
    .await;
    assert_eq!(wf["state"], "cancelled", "{wf:#}");
    assert!(wf["ended_at"].is_string(), "{wf:#}");
    assert_eq!(wf["status_text"], "Cancelled");
    // Only a new request is left: a replacement.
    assert_eq!(actions(&wf), ["replace"]);
    for s in ["validate", "render", "deliver"] {
        assert_eq!(step(&wf, s)["state"], "cancelled", "{wf:#}");
    }
    let (status, progress) = get(
        &host,
        &format!("/v1/workflows/{id}/cancellation"),
        Some("owner-token-0123456789"),
    )
    .await;
    assert_eq!(status, 200, "{progress}");
    assert_eq!(progress["progress"]["settled"], true);
    assert_eq!(progress["progress"]["workflow_state"], "cancelled");
    let (_, page) = get(
        &host,
        &format!("/v1/workflows/{id}/timeline?limit=500"),
        Some("ops-token-0123456789abcd"),
    )
    .await;
    let timeline = page.to_string();
    assert_eq!(
        timeline.matches("Cancellation cnl_").count(),
        1,
        "{timeline}"
    );
    assert!(
        timeline.contains("Cancelled before they had any effect: validate, render, deliver"),
        "{timeline}"
    );
    // A cancelled workflow's cancellation answers again, whatever the key.
    let (status, _) = post(&host, &path, "c-4", Some("owner-token-0123456789"), reason).await;
    assert_eq!(status, 200);
    assert!(host.world().await.is_empty());
}

/// While an outcome is unknown the cancellation waits for it and says so; settled as "it
/// did not happen", the step is cancelled; settled as "it happened", the effect stays (this
/// adapter cannot compensate) and the workflow ends cancelled with it.
async fn a_cancellation_during_an_unknown_outcome_awaits_it_and_settles_both_ways(
    db: Option<String>,
) {
    let host = HostProcess::start(HostOptions {
        db,
        workflows: vec![Contract::FireAndForget.definition()],
        ..HostOptions::default()
    })
    .await;
    for (key, outcome) in [("await-no", "not_happened"), ("await-yes", "succeeded")] {
        let id = unknown_outcome(&host, key).await;
        let (status, cancel) = post(
            &host,
            &format!("/v1/workflows/{id}/cancel"),
            &format!("{key}-cancel"),
            None,
            json!({"reason": "no longer needed"}),
        )
        .await;
        assert_eq!(status, 202, "{cancel}");
        assert_eq!(cancel["outcome"], "awaiting_outcome", "{cancel:#}");
        let (_, wf) = host.get(&format!("/v1/workflows/{id}")).await;
        assert_eq!(wf["state"], "needs_review", "{wf:#}");
        assert_eq!(
            wf["status_text"],
            "Cancel requested; awaiting the outcome of Deliver document"
        );
        assert_eq!(step(&wf, "deliver")["state"], "outcome_unknown");
        let (_, progress) = host.get(&format!("/v1/workflows/{id}/cancellation")).await;
        assert_eq!(progress["progress"]["awaiting"], json!(["deliver"]));

        let reference = host.world().await.last().unwrap()["id"].clone();
        let (status, resolved) = post(
            &host,
            &format!("/v1/workflows/{id}/steps/deliver/resolve"),
            &format!("{key}-resolve"),
            None,
            json!({"outcome": outcome, "evidence": "the provider's dashboard",
                   "reason": "checked", "external_reference": reference}),
        )
        .await;
        assert_eq!(status, 200, "{resolved}");
        let wf = host.wait_for(&id, SETTLED, Duration::from_secs(10)).await;
        assert_eq!(wf["state"], "cancelled", "{wf:#}");
        let expected = if outcome == "succeeded" {
            "succeeded"
        } else {
            "cancelled"
        };
        assert_eq!(step(&wf, "deliver")["state"], expected, "{wf:#}");
    }
    // The provider's record: one delivery each (the lost response's), never a second.
    assert_eq!(host.world().await.len(), 2);
}

/// A completed workflow is withdrawn only on request and only if an effect of it can be
/// compensated; a failed one has nothing to stop.
async fn completed_and_failed_workflows_refuse_what_cannot_be_done(db: Option<String>) {
    let host = HostProcess::start(HostOptions {
        db,
        workflows: vec![Contract::FireAndForget.definition()],
        ..HostOptions::default()
    })
    .await;
    let done = submit(&host, "document-delivery", "done-1", None).await;
    let wf = host.wait_for(&done, SETTLED, Duration::from_secs(30)).await;
    assert_eq!(wf["state"], "completed", "{wf:#}");
    // Nothing in this definition compensates the delivery: no withdrawal is offered.
    assert_eq!(actions(&wf), ["replace"], "{wf:#}");
    let path = format!("/v1/workflows/{done}/cancel");
    let (status, body) = post(&host, &path, "d-1", None, json!({"reason": "late"})).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "invalid_transition");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("\"withdraw\": true")
    );
    let (status, body) = post(
        &host,
        &path,
        "d-2",
        None,
        json!({"reason": "late", "withdraw": true}),
    )
    .await;
    assert_eq!(status, 409, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("nothing to withdraw")
    );
    // The refusal is stored under its key.
    let (status, again) = post(
        &host,
        &path,
        "d-2",
        None,
        json!({"reason": "late", "withdraw": true}),
    )
    .await;
    assert_eq!((status, &again), (409, &body));
    let (status, _) = host
        .get(&format!("/v1/workflows/{done}/cancellation"))
        .await;
    assert_eq!(status, 404);

    let failed = unknown_outcome(&host, "failed-1").await;
    let (status, _) = post(
        &host,
        &format!("/v1/workflows/{failed}/steps/deliver/resolve"),
        "abandon-1",
        None,
        json!({"outcome": "abandon", "evidence": "none", "reason": "gave up"}),
    )
    .await;
    assert_eq!(status, 200);
    let wf = host
        .wait_for(&failed, SETTLED, Duration::from_secs(10))
        .await;
    assert_eq!(wf["state"], "failed", "{wf:#}");
    let (status, body) = post(
        &host,
        &format!("/v1/workflows/{failed}/cancel"),
        "f-1",
        None,
        json!({"reason": "late"}),
    )
    .await;
    assert_eq!(status, 409, "{body}");
    let (_, wf) = host.get(&format!("/v1/workflows/{done}")).await;
    assert_eq!(wf["state"], "completed", "nothing changed: {wf:#}");
}

/// `ETag` is the revision; `If-None-Match` with it is `304`; a long-poll answers as soon
/// as the revision moves past `after`, and with the current projection when the wait ends.
async fn the_projection_revision_drives_etags_and_long_polls(db: Option<String>) {
    let host = HostProcess::start(HostOptions {
        db,
        pause_execution: true,
        ..HostOptions::default()
    })
    .await;
    let id = submit(&host, "document-delivery", "revision-1", None).await;
    let client = reqwest::Client::new();
    let url = format!("{}/v1/workflows/{id}", host.url);
    let r = client.get(&url).send().await.unwrap();
    let etag = r.headers()["etag"].to_str().unwrap().to_string();
    let wf: Value = r.json().await.unwrap();
    let revision = wf["revision"].as_u64().unwrap();
    assert_eq!(etag, format!("\"{revision}\""));
    assert_eq!(wf["input_revision"], 1);
    assert_eq!(wf["replaces"], Value::Null);
    assert_eq!(wf["replaced_by"], Value::Null);
    let r = client
        .get(&url)
        .header("If-None-Match", &etag)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 304);

    // Nothing moves: the long-poll answers when its wait ends, with the same revision.
    let started = Instant::now();
    let r = client
        .get(format!("{url}?wait=1&after={revision}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert!(started.elapsed() >= Duration::from_millis(900));
    let same: Value = r.json().await.unwrap();
    assert_eq!(same["revision"], revision);

    // A cancellation moves it: the waiting poll answers well before its 30 s.
    let poll = tokio::spawn({
        let url = format!("{url}?wait=30&after={revision}");
        async move {
            let started = Instant::now();
            let wf: Value = reqwest::get(url).await.unwrap().json().await.unwrap();
            (started.elapsed(), wf)
        }
    });
    let (status, _) = post(
        &host,
        &format!("/v1/workflows/{id}/cancel"),
        "rev-cancel",
        None,
        json!({"reason": "moving on"}),
    )
    .await;
    assert_eq!(status, 202);
    let (waited, moved) = poll.await.unwrap();
    assert!(waited < Duration::from_secs(10), "{waited:?}");
    assert!(moved["revision"].as_u64().unwrap() > revision, "{moved:#}");
    assert_eq!(moved["state"], "cancelled");
    let (status, body) = host.get(&format!("/v1/workflows/{id}?wait=61")).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "invalid_parameter");
}

/// Before the delivery, a corrected title reaches it through the handlers that prepare it:
/// the provider receives the corrected document only, and the revision is on record.
async fn a_revision_before_the_side_effect_reaches_the_delivery(db: Option<String>) {
    let host = HostProcess::start(HostOptions {
        db: db.clone(),
        pause_execution: true,
        ..HostOptions::default()
    })
    .await;
    let typo =
        json!({"title": "Qaurterly report", "recipient": "reader@example.com", "body": "Hello"});
    let (status, created) = post(
        &host,
        "/v1/intents",
        "revise-early",
        None,
        json!({"workflow": "document-delivery", "input": typo}),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    let id = created["workflow_id"].as_str().unwrap().to_string();
    let path = format!("/v1/workflows/{id}/revisions");
    // Before any correction, revision 1 is the command as admitted.
    let (_, admitted) = host.get(&format!("/v1/workflows/{id}")).await;
    let (_, listed) = host.get(&path).await;
    let first = json!({
        "input_revision": 1,
        "prior_digest": null,
        "input_digest": admitted["input_digest"],
        "input": typo,
        "author": "local",
        "reason": "the command as admitted",
        "at": admitted["created_at"],
        "invalidated_steps": [],
        "kept_receipts": [],
    });
    assert_eq!(listed["data"], json!([first]), "{listed}");
    // The corrected input is checked against the workflow's own schema.
    let (status, body) = post(
        &host,
        &path,
        "r-0",
        None,
        json!({"input": {"title": ""}, "reason": "typo"}),
    )
    .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["code"], "invalid_input");
    let fixed =
        json!({"title": "Quarterly report", "recipient": "reader@example.com", "body": "Hello"});
    let revision = json!({"input": fixed, "reason": "typo in the title"});
    let (status, revised) = post(&host, &path, "r-1", None, revision.clone()).await;
    assert_eq!(status, 201, "{revised}");
    assert_eq!(revised["input_revision"], 2);
    assert_eq!(
        revised["invalidated_steps"],
        json!(["validate", "render", "deliver"])
    );
    assert_ne!(revised["prior_digest"], revised["input_digest"]);
    // The same key and body answer as before, and act once.
    let (status, again) = post(&host, &path, "r-1", None, revision).await;
    assert_eq!((status, &again), (201, &revised));
    assert_eq!(revised["input"], fixed);
    assert_eq!(revised["prior_digest"], admitted["input_digest"]);
    // Every revision keeps its own text: the correction did not erase the command.
    let (_, listed) = host.get(&path).await;
    assert_eq!(listed["data"], json!([first, revised]), "{listed}");
    // The original key still names the command as sent (revision 1).
    let (status, replay) = post(
        &host,
        "/v1/intents",
        "revise-early",
        None,
        json!({"workflow": "document-delivery", "input": typo}),
    )
    .await;
    assert_eq!(status, 200, "{replay}");
    assert_eq!(replay["workflow_id"], id.as_str());

    // The host runs the work now: the delivery carries the corrected document only.
    let dir = host.kill();
    let host = HostProcess::start(HostOptions {
        db: db.clone(),
        dir: Some(dir),
        ..HostOptions::default()
    })
    .await;
    let wf = host.wait_for(&id, SETTLED, Duration::from_secs(30)).await;
    assert_eq!(wf["state"], "completed", "{wf:#}");
    assert_eq!(wf["input_revision"], 2);
    assert_eq!(wf["input_digest"], revised["input_digest"]);
    let rendered = &step(&wf, "render")["receipt"]["output"];
    assert!(
        rendered["document"]
            .as_str()
            .unwrap()
            .contains("Quarterly report"),
        "{rendered}"
    );
    let world = host.world().await;
    assert_eq!(world.len(), 1, "{world:?}");
    assert_eq!(world[0]["document_digest"], rendered["document_digest"]);
    // Every attempt names the revision it ran on.
    for s in ["validate", "render", "deliver"] {
        let (_, attempts) = host
            .get(&format!("/v1/workflows/{id}/steps/{s}/attempts"))
            .await;
        assert_eq!(attempts["data"][0]["input_revision"], 2, "{attempts}");
    }
    // The archive tells the whole story: both revisions, each with its text.
    let database = db.unwrap_or_else(|| host.path().join("docket.db").display().to_string());
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_docket"))
        .args(["export", &id, "--db", &database])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let story: Value = serde_json::from_slice(&out.stdout).unwrap();
    let revisions = story["revisions"].as_array().unwrap();
    assert_eq!(revisions.len(), 2, "{story:#}");
    assert_eq!(revisions[0]["input"], typo.to_string().as_str());
    assert_eq!(revisions[1]["input"], fixed.to_string().as_str());
    assert!(
        story["attempts"]
            .as_array()
            .unwrap()
            .iter()
            .all(|a| a["input_revision"] == 2),
        "{story:#}"
    );
}

/// After a request may have left, a correction is a new request: `409 revision_refused`
/// names the step and links to the replacement, which creates a new workflow linked both
/// ways and cancels the original.
async fn a_revision_after_the_side_effect_is_refused_and_replaced(db: Option<String>) {
    let host = HostProcess::start(HostOptions {
        db,
        workflows: vec![Contract::FireAndForget.definition()],
        ..HostOptions::default()
    })
    .await;
    let id = unknown_outcome(&host, "replace-1").await;
    let (_, wf) = host.get(&format!("/v1/workflows/{id}")).await;
    assert!(!actions(&wf).contains(&"revise"), "{wf:#}");
    let fixed = document("replace-1 corrected");
    let (status, refused) = post(
        &host,
        &format!("/v1/workflows/{id}/revisions"),
        "rev-late",
        None,
        json!({"input": fixed, "reason": "wrong title"}),
    )
    .await;
    assert_eq!(status, 409, "{refused}");
    assert_eq!(refused["error"]["code"], "revision_refused");
    assert_eq!(refused["error"]["details"], json!([{"step": "deliver"}]));
    let link = format!("/v1/workflows/{id}/replacement");
    assert_eq!(refused["error"]["links"]["replacement"], link.as_str());

    let body = json!({"input": fixed, "reason": "wrong title", "cancel_original": true});
    let (status, replacement) = post(&host, &link, "rep-1", None, body.clone()).await;
    assert_eq!(status, 201, "{replacement}");
    let new_id = replacement["workflow_id"].as_str().unwrap().to_string();
    assert_ne!(new_id, id);
    assert_eq!(replacement["replaces"], id.as_str());
    assert_eq!(replacement["cancellation"]["outcome"], "awaiting_outcome");
    // Once: the same key answers the same; another key returns the one replacement.
    let (status, again) = post(&host, &link, "rep-1", None, body).await;
    assert_eq!(
        (status, &again["workflow_id"]),
        (201, &replacement["workflow_id"])
    );
    let (status, other) = post(
        &host,
        &link,
        "rep-2",
        None,
        json!({"input": fixed, "reason": "pressed again"}),
    )
    .await;
    assert_eq!(status, 200, "{other}");
    assert_eq!(other["workflow_id"], new_id.as_str());

    let (_, original) = host.get(&format!("/v1/workflows/{id}")).await;
    assert_eq!(original["replaced_by"], new_id.as_str());
    assert_eq!(
        original["status_text"],
        "Cancel requested; awaiting the outcome of Deliver document"
    );
    let replaced = host
        .wait_for(&new_id, SETTLED, Duration::from_secs(30))
        .await;
    assert_eq!(replaced["state"], "completed", "{replaced:#}");
    assert_eq!(replaced["replaces"], id.as_str());
    assert_eq!(replaced["idempotency_key"], format!("replacement:{id}"));
    // The provider: the original's (lost) delivery and the replacement's.
    assert_eq!(host.world().await.len(), 2);
}

/// Waits until the provider holds `n` deliveries (a request reached it).
async fn wait_deliveries(host: &HostProcess, n: usize) {
    crate::wait::until(
        "the delivery at the provider",
        Duration::from_secs(30),
        || async {
            let held = host.world().await.len();
            if held == n {
                Ok(())
            } else {
                Err(format!("{held} deliveries"))
            }
        },
    )
    .await;
}

/// A delivery through `adapter` compensated on `on`, optionally followed by a notice through
/// the same provider (`notice`: its retry table) that can fail on its own.
fn compensated(name: &str, adapter: &str, on: &str, notice: Option<&str>) -> (String, String) {
    let mut text = format!(
        r#"
name = "{name}"
version = 1
deadline = "1h"

[input_schema]
type = "object"

[[steps]]
id = "deliver"
label = "Deliver document"
kind = "adapter"
component = "{adapter}"
version = "^1"
milestone = "Delivery verified"
timeout = "20s"

[steps.input]
recipient = "$input.recipient"
document = "$input.document"
document_digest = "$input.document_digest"

[steps.capabilities]
outbound_hosts = ["$base_url"]
secrets = ["provider_token"]

[steps.compensation]
on = "{on}"
"#
    );
    if let Some(retry) = notice {
        text.push_str(&format!(
            r#"
[[steps]]
id = "notify"
label = "Send the notice"
kind = "adapter"
component = "{adapter}"
version = "^1"
after = ["deliver"]
timeout = "20s"

[steps.input]
recipient = "$input.recipient"
document = "Your document was sent"
document_digest = "sha256:01"

[steps.retry]
{retry}

[steps.capabilities]
outbound_hosts = ["$base_url"]
secrets = ["provider_token"]
"#
        ));
    }
    (format!("{name}.toml"), text)
}

fn raw_input(recipient: &str) -> Value {
    json!({"recipient": recipient, "document": "Hi", "document_digest": "sha256:00"})
}

async fn submit_raw(host: &HostProcess, workflow: &str, key: &str) -> String {
    let (status, created) = host
        .submit(workflow, key, raw_input("reader@example.com"))
        .await;
    assert_eq!(status, 201, "{created}");
    created["workflow_id"].as_str().unwrap().to_string()
}

/// A completed delivery is withdrawn on request: the compensation is a step of its own
/// with its own attempts and receipt, the provider cancels the delivery once, the original
/// receipt stays, and the timeline tells both effects.
async fn a_withdrawal_reverses_a_completed_delivery_once(db: Option<String>) {
    let host = HostProcess::start(HostOptions {
        db,
        workflows: vec![compensated(
            "withdrawable",
            "http-delivery",
            "workflow_cancelled",
            None,
        )],
        ..HostOptions::default()
    })
    .await;
    let id = submit_raw(&host, "withdrawable", "withdraw-1").await;
    let wf = host.wait_for(&id, SETTLED, Duration::from_secs(30)).await;
    assert_eq!(wf["state"], "completed", "{wf:#}");
    let delivery = host.world().await[0]["id"].as_str().unwrap().to_string();
    let withdraw = wf["actions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["action"] == "withdraw")
        .unwrap_or_else(|| panic!("no withdrawal offered: {wf:#}"))
        .clone();
    assert_eq!(withdraw["label"], "Request withdrawal");
    assert_eq!(
        withdraw["consequences"],
        json!([{"step": "deliver", "external_reference": delivery, "compensation": "will_compensate"}])
    );
    let path = format!("/v1/workflows/{id}/cancel");
    let (status, answer) = post(
        &host,
        &path,
        "w-1",
        None,
        json!({"reason": "sent to the wrong reader", "withdraw": true}),
    )
    .await;
    assert_eq!(status, 202, "{answer}");
    assert_eq!(answer["outcome"], "compensating", "{answer:#}");
    assert_eq!(answer["withdraw"], true);
    let (status, again) = post(
        &host,
        &path,
        "w-2",
        None,
        json!({"reason": "again", "withdraw": true}),
    )
    .await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["cancellation_id"], answer["cancellation_id"]);

    let wf = host
        .wait_for(
            &id,
            &["cancelled", "needs_review", "failed"],
            Duration::from_secs(30),
        )
        .await;
    assert_eq!(wf["state"], "cancelled", "{wf:#}");
    let deliver = step(&wf, "deliver");
    assert_eq!(deliver["state"], "compensated", "{wf:#}");
    assert_eq!(deliver["receipt"]["external_reference"], delivery.as_str());
    let compensation = &deliver["compensation"];
    assert_eq!(compensation["id"], "deliver.compensate");
    assert_eq!(compensation["state"], "succeeded", "{wf:#}");
    assert_eq!(compensation["receipt"]["evidence_kind"], "response");
    let reversed = wf["milestones"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "Reversed after partial completion")
        .unwrap_or_else(|| panic!("no reversal milestone: {wf:#}"));
    assert!(reversed["reached_at"].is_string(), "{wf:#}");
    // The notifications written: recorded, completed, the effect reversed, and the end.
    let (_, told) = host
        .get(&format!("/v1/notifications?workflow_id={id}"))
        .await;
    let mut types: Vec<&str> = told["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["type"].as_str().unwrap())
        .collect();
    types.sort();
    assert_eq!(
        types,
        [
            "workflow.completed",
            "workflow.effect_compensated",
            "workflow.ended",
            "workflow.recorded"
        ],
        "{told:#}"
    );
    // The compensation's attempts are its own.
    let attempts = host.attempts(&id, "deliver.compensate").await;
    assert_eq!(attempts.len(), 1, "{attempts:?}");
    assert_eq!(attempts[0]["trigger"], "compensation");
    assert_eq!(attempts[0]["checkpoint"], 6);
    // The provider's record: the delivery was made once and cancelled once.
    let world = host.world().await;
    assert_eq!(world.len(), 1, "{world:?}");
    assert_eq!(world[0]["status"], "cancelled");
    assert_eq!(world[0]["cancel_requests"], 1);
    let timeline = host.timeline_text(&id).await;
    assert!(
        timeline.contains("Deliver document succeeded"),
        "{timeline}"
    );
    assert!(
        timeline.contains("Compensation of Deliver document succeeded"),
        "{timeline}"
    );
    assert!(timeline.contains("deliver compensated"), "{timeline}");
}

/// A compensation whose answer was lost is recovered by looking up the original effect:
/// it shows as reversed, so no second cancel is sent.
async fn a_compensation_whose_answer_was_lost_is_recovered_by_query(db: Option<String>) {
    let host = HostProcess::start(HostOptions {
        db,
        workflows: vec![compensated(
            "withdrawable-query-only",
            "http-delivery-query-only",
            "workflow_not_completed",
            None,
        )],
        ..HostOptions::default()
    })
    .await;
    let id = submit_raw(&host, "withdrawable-query-only", "lost-cancel").await;
    host.wait_for(&id, SETTLED, Duration::from_secs(30)).await;
    host.faults(json!({"lose_next_cancel": 1})).await;
    let (status, answer) = post(
        &host,
        &format!("/v1/workflows/{id}/cancel"),
        "lc-1",
        None,
        json!({"reason": "withdrawn", "withdraw": true}),
    )
    .await;
    assert_eq!(status, 202, "{answer}");
    let wf = host
        .wait_for(
            &id,
            &["cancelled", "needs_review", "failed"],
            Duration::from_secs(30),
        )
        .await;
    assert_eq!(wf["state"], "cancelled", "{wf:#}");
    let compensation = &step(&wf, "deliver")["compensation"];
    assert_eq!(compensation["receipt"]["evidence_kind"], "query", "{wf:#}");
    let world = host.world().await;
    assert_eq!(world[0]["cancel_requests"], 1, "{world:?}");
    assert_eq!(world[0]["status"], "cancelled");
    let attempts = host.attempts(&id, "deliver.compensate").await;
    let triggers: Vec<&str> = attempts
        .iter()
        .map(|a| a["trigger"].as_str().unwrap())
        .collect();
    assert_eq!(triggers, ["compensation", "recovery_query"], "{attempts:?}");
}

/// While an effect stands and later work is only waiting to retry, a cancellation stops
/// the rest and reverses the effect — or, where the definition does not compensate it on
/// cancellation, says so and leaves it standing.
async fn a_cancellation_after_an_accepted_effect_stops_the_rest_and_compensates(
    db: Option<String>,
) {
    let retry = "max_attempts = 3\ninitial_backoff = \"30m\"\nmax_backoff = \"30m\"";
    let host = HostProcess::start(HostOptions {
        db,
        workflows: vec![
            compensated(
                "noticed",
                "http-delivery",
                "workflow_cancelled",
                Some(retry),
            ),
            compensated(
                "noticed-kept",
                "http-delivery",
                "workflow_failed",
                Some(retry),
            ),
        ],
        ..HostOptions::default()
    })
    .await;
    for (workflow, reversed) in [("noticed", true), ("noticed-kept", false)] {
        // The delivery is committed at once and answered late; meanwhile the provider is
        // set to refuse the next request — the notice's, which then waits 30 minutes.
        host.faults(json!({"slow_next": 1, "slow_ms": 1500})).await;
        let before = host.world().await.len();
        let id = submit_raw(&host, workflow, workflow).await;
        wait_deliveries(&host, before + 1).await;
        host.faults(json!({"unavailable_next": 1})).await;
        let wf = crate::wait::until(
            "the notice to wait for its retry",
            Duration::from_secs(30),
            || async {
                let (_, wf) = host.get(&format!("/v1/workflows/{id}")).await;
                if step(&wf, "notify")["state"] == "failed_retryable" {
                    Ok(wf)
                } else {
                    Err(format!("{wf:#}"))
                }
            },
        )
        .await;
        let delivery = host.world().await[before]["id"].clone();
        let expected = if reversed {
            "will_compensate"
        } else {
            "cannot_compensate"
        };
        let cancel = wf["actions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["action"] == "cancel")
            .cloned()
            .unwrap();
        assert_eq!(cancel["label"], "Stop remaining work");
        let consequences =
            json!([{"step": "deliver", "external_reference": delivery, "compensation": expected}]);
        assert_eq!(cancel["consequences"], consequences);
        let (status, answer) = post(
            &host,
            &format!("/v1/workflows/{id}/cancel"),
            &format!("{workflow}-cancel"),
            None,
            json!({"reason": "no longer needed"}),
        )
        .await;
        assert_eq!(status, 202, "{answer}");
        assert_eq!(answer["outcome"], "compensating", "{answer:#}");
        assert_eq!(answer["consequences"], consequences);
        let wf = host
            .wait_for(
                &id,
                &["cancelled", "needs_review", "failed"],
                Duration::from_secs(30),
            )
            .await;
        assert_eq!(wf["state"], "cancelled", "{wf:#}");
        assert_eq!(step(&wf, "notify")["state"], "cancelled");
        let world = host.world().await;
        if reversed {
            assert_eq!(step(&wf, "deliver")["state"], "compensated");
            assert_eq!(world[before]["status"], "cancelled", "{world:?}");
            assert_eq!(world[before]["cancel_requests"], 1);
        } else {
            assert_eq!(step(&wf, "deliver")["state"], "succeeded");
            assert_eq!(step(&wf, "deliver")["compensation"], Value::Null);
            assert_eq!(world[before]["cancel_requests"], 0, "{world:?}");
            assert!(
                answer["message"]
                    .as_str()
                    .unwrap()
                    .contains("cannot be compensated and stays"),
                "{answer:#}"
            );
        }
    }
}

/// A cancellation during the call: the outcome is awaited, and once the delivery is known
/// to have happened it is reversed — once.
async fn a_cancellation_during_an_adapter_call_awaits_then_compensates(db: Option<String>) {
    let host = HostProcess::start(HostOptions {
        db,
        workflows: vec![compensated(
            "withdrawable",
            "http-delivery",
            "workflow_cancelled",
            None,
        )],
        ..HostOptions::default()
    })
    .await;
    host.faults(json!({"slow_next": 1, "slow_ms": 1500})).await;
    let id = submit_raw(&host, "withdrawable", "mid-call").await;
    wait_deliveries(&host, 1).await;
    let (status, answer) = post(
        &host,
        &format!("/v1/workflows/{id}/cancel"),
        "mid-call-cancel",
        None,
        json!({"reason": "changed my mind"}),
    )
    .await;
    assert_eq!(status, 202, "{answer}");
    assert_eq!(answer["outcome"], "awaiting_outcome", "{answer:#}");
    let (_, wf) = host.get(&format!("/v1/workflows/{id}")).await;
    assert_eq!(
        wf["status_text"], "Cancel requested; awaiting the outcome of Deliver document",
        "{wf:#}"
    );
    let wf = host
        .wait_for(
            &id,
            &["cancelled", "needs_review", "failed"],
            Duration::from_secs(30),
        )
        .await;
    assert_eq!(wf["state"], "cancelled", "{wf:#}");
    assert_eq!(step(&wf, "deliver")["state"], "compensated");
    let world = host.world().await;
    assert_eq!(world.len(), 1);
    assert_eq!(world[0]["status"], "cancelled");
    assert_eq!(world[0]["cancel_requests"], 1);
}

/// `on = "workflow_failed"`: a later step that fails for good compensates the delivery;
/// while it only waits to retry, nothing is compensated.
async fn a_terminal_failure_compensates_and_a_retryable_one_does_not(db: Option<String>) {
    let host = HostProcess::start(HostOptions {
        db,
        workflows: vec![compensated(
            "failing-notice",
            "http-delivery",
            "workflow_failed",
            Some("max_attempts = 2\ninitial_backoff = \"200ms\""),
        )],
        ..HostOptions::default()
    })
    .await;
    // The delivery is committed at once and answered late; meanwhile the provider is set to
    // refuse the next two requests — the notice's two attempts.
    host.faults(json!({"slow_next": 1, "slow_ms": 1500})).await;
    let id = submit_raw(&host, "failing-notice", "fail-later").await;
    wait_deliveries(&host, 1).await;
    host.faults(json!({"unavailable_next": 2})).await;
    let wf = host
        .wait_for(
            &id,
            &["failed", "needs_review", "cancelled"],
            Duration::from_secs(30),
        )
        .await;
    assert_eq!(wf["state"], "failed", "{wf:#}");
    assert_eq!(step(&wf, "notify")["state"], "failed_terminal");
    assert_eq!(step(&wf, "deliver")["state"], "compensated", "{wf:#}");
    let timeline = host.timeline_text(&id).await;
    let retry = timeline.find("Retry scheduled").expect("a retry");
    let failed = timeline
        .find("Send the notice failed after 2 attempts")
        .expect("the failure");
    let scheduled = timeline
        .find("Compensation deliver.compensate scheduled")
        .expect("a compensation");
    assert!(retry < failed && failed < scheduled, "{timeline}");
    let world = host.world().await;
    assert_eq!(world.len(), 1, "{world:?}");
    assert_eq!(world[0]["cancel_requests"], 1);
}

/// On a failed workflow an operator reverses an effect by hand; a compensation that keeps
/// failing waits for a person, who acts on it like on any step (`deliver.compensate`).
async fn an_operator_compensates_by_hand_and_acts_on_the_compensation(db: Option<String>) {
    let host = HostProcess::start(HostOptions {
        db,
        workflows: vec![compensated(
            "by-hand",
            "http-delivery",
            "workflow_cancelled",
            Some("max_attempts = 2\ninitial_backoff = \"200ms\""),
        )],
        ..HostOptions::default()
    })
    .await;
    host.faults(json!({"slow_next": 1, "slow_ms": 1500})).await;
    let id = submit_raw(&host, "by-hand", "by-hand-1").await;
    wait_deliveries(&host, 1).await;
    host.faults(json!({"unavailable_next": 2})).await;
    let wf = host
        .wait_for(&id, &["failed", "needs_review"], Duration::from_secs(30))
        .await;
    assert_eq!(wf["state"], "failed", "{wf:#}");
    // Compensated on cancellation only: the failure left the delivery standing.
    assert_eq!(step(&wf, "deliver")["state"], "succeeded");
    let steps = format!("/v1/workflows/{id}/steps");
    let (status, refused) = post(
        &host,
        &format!("{steps}/notify/compensate"),
        "m-0",
        None,
        json!({"reason": "undo"}),
    )
    .await;
    assert_eq!(status, 409, "{refused}");
    // The provider refuses cancels for a while: the compensation fails and waits for review.
    host.faults(json!({"unavailable_next_cancel": 5})).await;
    let (status, started) = post(
        &host,
        &format!("{steps}/deliver/compensate"),
        "m-1",
        None,
        json!({"reason": "the client withdrew by phone"}),
    )
    .await;
    assert_eq!(status, 200, "{started}");
    assert_eq!(started["state"], "compensating", "{started:#}");
    let wf = host
        .wait_for(&id, &["needs_review"], Duration::from_secs(30))
        .await;
    assert_eq!(
        step(&wf, "deliver")["compensation"]["state"],
        "failed_terminal",
        "{wf:#}"
    );
    // The provider answers again: a same-key retry of the compensation settles it.
    host.faults(json!({"unavailable_next_cancel": 0})).await;
    let (status, retried) = post(
        &host,
        &format!("{steps}/deliver.compensate/retry"),
        "m-2",
        None,
        json!({}),
    )
    .await;
    assert_eq!(status, 200, "{retried}");
    let wf = host
        .wait_for(&id, &["failed"], Duration::from_secs(30))
        .await;
    assert_eq!(step(&wf, "deliver")["state"], "compensated", "{wf:#}");
    let world = host.world().await;
    assert_eq!(world[0]["status"], "cancelled", "{world:?}");
    assert_eq!(world[0]["cancel_requests"], 6);
    let timeline = host.timeline_text(&id).await;
    assert!(
        timeline.contains("Operator local ordered the compensation of Deliver document"),
        "{timeline}"
    );
    // The console shows the compensation beside its effect, and its own page.
    let (client, cookie) = console_session(&host).await;
    let get = |path: String| {
        let (client, cookie) = (client.clone(), cookie.clone());
        async move {
            let r = client
                .get(path)
                .header("cookie", cookie)
                .send()
                .await
                .unwrap();
            (r.status().as_u16(), r.text().await.unwrap())
        }
    };
    let (status, html) = get(format!("{}/console/workflows/{id}", host.url)).await;
    assert_eq!(status, 200, "{html}");
    assert!(html.contains("↳ <a href=\"/console/workflows/"), "{html}");
    let (status, html) = get(format!(
        "{}/console/workflows/{id}/steps/deliver.compensate",
        host.url
    ))
    .await;
    assert_eq!(status, 200, "{html}");
    assert!(html.contains("Compensation of Deliver document"), "{html}");
}

on_both_stores!(
    a_cancellation_before_any_effect_ends_every_step_once,
    a_cancellation_during_an_unknown_outcome_awaits_it_and_settles_both_ways,
    completed_and_failed_workflows_refuse_what_cannot_be_done,
    the_projection_revision_drives_etags_and_long_polls,
    a_revision_before_the_side_effect_reaches_the_delivery,
    a_revision_after_the_side_effect_is_refused_and_replaced,
    a_withdrawal_reverses_a_completed_delivery_once,
    a_compensation_whose_answer_was_lost_is_recovered_by_query,
    a_cancellation_after_an_accepted_effect_stops_the_rest_and_compensates,
    a_cancellation_during_an_adapter_call_awaits_then_compensates,
    a_terminal_failure_compensates_and_a_retryable_one_does_not,
    an_operator_compensates_by_hand_and_acts_on_the_compensation,
);

/// `docket cancel` asks the running host and prints its answer; a second run answers with
/// the same cancellation.
#[tokio::test(flavor = "multi_thread")]
async fn docket_cancel_and_revise_ask_the_host_and_print_its_answer() {
    let host = HostProcess::start(HostOptions {
        pause_execution: true,
        ..HostOptions::default()
    })
    .await;
    let id = submit(&host, "document-delivery", "cli-cancel", None).await;
    let run = |extra: &[&str]| {
        let mut args = vec!["cancel", id.as_str(), "--server", host.url.as_str()];
        args.extend_from_slice(extra);
        std::process::Command::new(env!("CARGO_BIN_EXE_docket"))
            .args(args)
            .output()
            .unwrap()
    };
    let first = run(&["--reason", "typo in the title"]);
    assert!(first.status.success(), "{first:?}");
    let answer: Value = serde_json::from_slice(&first.stdout).unwrap();
    assert_eq!(answer["outcome"], "cancelled", "{answer:#}");
    assert_eq!(answer["reason"], "typo in the title");
    let second = run(&["--reason", "pressed again", "--key", "another"]);
    assert!(second.status.success(), "{second:?}");
    let again: Value = serde_json::from_slice(&second.stdout).unwrap();
    assert_eq!(again["cancellation_id"], answer["cancellation_id"]);
    // `docket revise` on a cancelled workflow: refused, and the exit code says so.
    let revise = std::process::Command::new(env!("CARGO_BIN_EXE_docket"))
        .args([
            "revise",
            id.as_str(),
            "--input",
            r#"{"title": "T", "recipient": "r@example.com", "body": "B"}"#,
            "--reason",
            "typo",
            "--server",
            host.url.as_str(),
        ])
        .output()
        .unwrap();
    assert!(!revise.status.success(), "{revise:?}");
    let refused: Value = serde_json::from_slice(&revise.stdout).unwrap();
    assert_eq!(refused["error"]["code"], "invalid_transition", "{refused}");
    let bad = std::process::Command::new(env!("CARGO_BIN_EXE_docket"))
        .args(["cancel", "wf/../x", "--reason", "r", "--server", &host.url])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("is not a workflow id"));
    // On a workflow that has not started, the correction is a new revision.
    let other = submit(&host, "document-delivery", "cli-revise", None).await;
    let revised = std::process::Command::new(env!("CARGO_BIN_EXE_docket"))
        .args([
            "revise",
            other.as_str(),
            "--input",
            r#"{"title": "Corrected", "recipient": "r@example.com", "body": "B"}"#,
            "--reason",
            "typo",
            "--server",
            host.url.as_str(),
        ])
        .output()
        .unwrap();
    assert!(revised.status.success(), "{revised:?}");
    let answer: Value = serde_json::from_slice(&revised.stdout).unwrap();
    assert_eq!(answer["input_revision"], 2, "{answer}");
}

/// A console session on an open host: a client that does not follow redirects, and the
/// session cookie.
pub(crate) async fn console_session(host: &HostProcess) -> (reqwest::Client, String) {
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let signed = client
        .post(format!("{}/console/sign-in", host.url))
        .form(&[("token", "")])
        .send()
        .await
        .unwrap();
    let cookie = signed.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_string();
    (client, cookie)
}

/// A console page as the session `cookie` sees it.
pub(crate) async fn console_page(
    host: &HostProcess,
    client: &reqwest::Client,
    cookie: &str,
    path: &str,
) -> String {
    client
        .get(format!("{}{path}", host.url))
        .header("cookie", cookie)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// The `csrf` and `key` hidden fields of the form on `html` that posts to `action`.
pub(crate) fn form_keys(html: &str, action: &str) -> (String, String) {
    let form = html
        .split(&format!("action=\"{action}\""))
        .nth(1)
        .unwrap_or_else(|| panic!("no form for {action}: {html}"));
    let value = |name: &str| {
        form.split(&format!("name=\"{name}\" value=\""))
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap()
            .to_string()
    };
    (value("csrf"), value("key"))
}

/// The console changes a workflow's course with plain forms (no JavaScript): a revision,
/// then a replacement that cancels the original, each answered on the workflow page.
#[tokio::test(flavor = "multi_thread")]
async fn the_console_revises_and_replaces_with_plain_forms() {
    let host = HostProcess::start(HostOptions {
        pause_execution: true,
        ..HostOptions::default()
    })
    .await;
    let id = submit(&host, "document-delivery", "console-course", None).await;
    let (client, cookie) = console_session(&host).await;
    let fields = |html: &str, action: &str| {
        form_keys(html, &format!("/console/workflows/{id}/course/{action}"))
    };
    let html = console_page(&host, &client, &cookie, &format!("/console/workflows/{id}")).await;
    assert!(html.contains("Change of course"), "{html}");
    assert!(html.contains("Correct the request"), "{html}");
    let (csrf, key) = fields(&html, "revise");
    let corrected = r#"{"title": "Corrected", "recipient": "reader@example.com", "body": "Hi"}"#;
    let answered = client
        .post(format!("{}/console/workflows/{id}/course/revise", host.url))
        .header("cookie", &cookie)
        .form(&[
            ("csrf", csrf.as_str()),
            ("key", key.as_str()),
            ("input", corrected),
            ("reason", "typo in the title"),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(answered.status().as_u16(), 200);
    let html = answered.text().await.unwrap();
    assert!(html.contains("Input revision 2 recorded"), "{html}");
    assert!(html.contains("Input revisions"), "{html}");

    let (csrf, key) = fields(&html, "replace");
    let answered = client
        .post(format!(
            "{}/console/workflows/{id}/course/replace",
            host.url
        ))
        .header("cookie", &cookie)
        .form(&[
            ("csrf", csrf.as_str()),
            ("key", key.as_str()),
            ("input", corrected),
            ("reason", "start over"),
            ("cancel_original", "true"),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(answered.status().as_u16(), 200);
    let html = answered.text().await.unwrap();
    assert!(html.contains("Replaced by workflow wf_"), "{html}");
    let (_, wf) = host.get(&format!("/v1/workflows/{id}")).await;
    assert_eq!(wf["state"], "cancelled", "{wf:#}");
    let replacement = wf["replaced_by"].as_str().unwrap().to_string();
    let (_, new) = host.get(&format!("/v1/workflows/{replacement}")).await;
    assert_eq!(new["replaces"], id.as_str());
    // A form that did not come from the session is refused, and changes nothing.
    let forged = client
        .post(format!(
            "{}/console/workflows/{replacement}/course/cancel",
            host.url
        ))
        .header("cookie", &cookie)
        .form(&[("csrf", "forged"), ("key", "k"), ("reason", "x")])
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status().as_u16(), 403);
    let (_, new) = host.get(&format!("/v1/workflows/{replacement}")).await;
    assert_eq!(new["state"], "running");
}
