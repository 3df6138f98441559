//! Operator actions (`query`, `retry`, `resolve`, `escalate`) against a real `docket serve`
//! and its provider simulator: each decided by the step's state and the adapter's contract,
//! each idempotent under its key, each told on the timeline with author, evidence and reason.

use crate::host_process::{Contract, HostOptions, HostProcess, document};
use crate::wait;
use serde_json::{Value, json};
use std::time::Duration;

const ENDED: &[&str] = &["completed", "needs_review", "failed"];

/// POSTs an action with an explicit key (and optionally a bearer token).
async fn act(
    host: &HostProcess,
    id: &str,
    action: &str,
    key: &str,
    body: Value,
    token: Option<&str>,
) -> (u16, Value) {
    let mut request = reqwest::Client::new()
        .post(format!(
            "{}/v1/workflows/{id}/steps/deliver/{action}",
            host.url
        ))
        .header("Idempotency-Key", key)
        .json(&body);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let r = request.send().await.unwrap();
    (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
}

fn deliver(wf: &Value) -> Value {
    wf["steps"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["id"] == "deliver"))
        .cloned()
        .unwrap_or_else(|| panic!("no deliver step: {wf:#}"))
}

/// A fire-and-forget delivery whose response was lost: it waits for review.
async fn stuck_fire_and_forget(host: &HostProcess, key: &str) -> String {
    host.faults(json!({"lose_next": 1})).await;
    let (status, created) = host
        .submit(Contract::FireAndForget.workflow(), key, document(key))
        .await;
    assert_eq!(status, 201, "{created}");
    let id = created["workflow_id"].as_str().unwrap().to_string();
    let wf = host.wait_for(&id, ENDED, Duration::from_secs(30)).await;
    assert_eq!(wf["state"], "needs_review", "{wf:#}");
    assert_eq!(deliver(&wf)["state"], "outcome_unknown", "{wf:#}");
    id
}

#[tokio::test(flavor = "multi_thread")]
async fn resolve_with_evidence_completes_a_stuck_step_and_acts_once_per_key() {
    let host = HostProcess::start(HostOptions {
        workflows: vec![Contract::FireAndForget.definition()],
        ..HostOptions::default()
    })
    .await;
    let id = stuck_fire_and_forget(&host, "resolve-1").await;
    let delivery = host.world().await[0]["id"].as_str().unwrap().to_string();

    // The contract allows neither a lookup nor a same-key retry: both are refused, and say why.
    let (status, body) = act(&host, &id, "query", "q-1", json!({}), None).await;
    assert_eq!(status, 409, "{body:#}");
    assert_eq!(body["error"]["code"], "invalid_transition");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("does not declare lookups")
    );
    let (status, body) = act(&host, &id, "retry", "r-1", json!({}), None).await;
    assert_eq!(status, 409, "{body:#}");
    assert_eq!(body["error"]["code"], "invalid_transition");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("does not declare idempotency")
    );

    // No resolution without evidence and a reason.
    let (status, body) = act(
        &host,
        &id,
        "resolve",
        "res-0",
        json!({"outcome": "succeeded", "reason": "seen"}),
        None,
    )
    .await;
    assert_eq!(status, 400, "{body:#}");
    assert_eq!(body["error"]["code"], "invalid_request");
    assert_eq!(body["error"]["details"][0]["pointer"], "/evidence");

    let resolution = json!({
        "outcome": "succeeded",
        "evidence": format!("provider dashboard lists {delivery} for this recipient"),
        "reason": "the provider confirmed the delivery by phone",
        "external_reference": delivery,
    });
    let (status, first) = act(&host, &id, "resolve", "res-1", resolution.clone(), None).await;
    assert_eq!(status, 200, "{first:#}");
    assert_eq!(first["state"], "succeeded", "{first:#}");
    let receipt = &first["receipt"];
    assert_eq!(receipt["evidence_kind"], "manual");
    assert_eq!(receipt["author"], "local");
    assert_eq!(
        receipt["reason"],
        "the provider confirmed the delivery by phone"
    );
    assert_eq!(receipt["external_reference"], delivery.as_str());
    assert!(receipt["evidence"].as_str().unwrap().contains(&delivery));

    let wf = host.wait_for(&id, ENDED, Duration::from_secs(10)).await;
    assert_eq!(wf["state"], "completed", "{wf:#}");
    assert!(
        wf["milestones"]
            .as_array()
            .unwrap()
            .iter()
            .all(|m| !m["reached_at"].is_null()),
        "{wf:#}"
    );

    // The same key and body: the stored answer, and nothing acts twice.
    let (status, again) = act(&host, &id, "resolve", "res-1", resolution.clone(), None).await;
    assert_eq!(status, 200);
    assert_eq!(again, first);
    let timeline = host.timeline_text(&id).await;
    assert_eq!(
        timeline.matches("resolved by local as succeeded").count(),
        1,
        "{timeline}"
    );
    assert!(timeline.contains("reconciled the step with manual evidence"));
    // The same key with another body is a conflict; a new key finds the step settled.
    let mut other = resolution.clone();
    other["reason"] = json!("another reason");
    let (status, body) = act(&host, &id, "resolve", "res-1", other, None).await;
    assert_eq!(status, 409, "{body:#}");
    assert_eq!(body["error"]["code"], "key_conflict");
    let (status, body) = act(&host, &id, "resolve", "res-2", resolution.clone(), None).await;
    assert_eq!(status, 409, "{body:#}");
    assert_eq!(body["error"]["code"], "invalid_transition");
    // A refusal is an answer too: repeating it returns it, even if things change.
    let (status, again) = act(&host, &id, "resolve", "res-2", resolution, None).await;
    assert_eq!((status, again), (409, body));

    // One delivery at the provider, the one the receipt names; the evidence is on the timeline.
    let world = host.world().await;
    assert_eq!(world.len(), 1, "{world:#?}");
    let (_, events) = host
        .get(&format!("/v1/workflows/{id}/timeline?limit=500"))
        .await;
    let conclusion = events["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "conclusion" && e["data"]["action"] == "resolve")
        .cloned()
        .expect("a resolve conclusion");
    assert_eq!(conclusion["data"]["author"], "local");
    assert_eq!(conclusion["data"]["outcome"], "succeeded");
    assert!(conclusion["data"]["evidence"].is_string());
    assert!(conclusion["data"]["reason"].is_string());
}

#[tokio::test(flavor = "multi_thread")]
async fn query_action_verifies_a_delivery_that_became_visible_late() {
    let host = HostProcess::start(HostOptions {
        workflows: vec![Contract::QueryOnly.definition()],
        ..HostOptions::default()
    })
    .await;
    // The answer is lost and lookups see the delivery only after 60 s: far longer than the
    // adapter's 5 s visibility window. The embedded provider shares the host's clock, so the
    // test moves time instead of waiting for it.
    host.faults(json!({"lose_next": 1, "visibility_delay_ms": 60_000}))
        .await;
    let (_, created) = host
        .submit(Contract::QueryOnly.workflow(), "late-q", document("late"))
        .await;
    let id = created["workflow_id"].as_str().unwrap().to_string();
    // Empty lookups wait on time: the clock moves a second whenever the step waits.
    let wf = wait::until(
        "the delivery leaving `running`",
        Duration::from_secs(30),
        || async {
            let (_, wf) = host.get(&format!("/v1/workflows/{id}")).await;
            if wf["state"] != "running" {
                return Ok(wf);
            }
            if deliver(&wf)["state"] == "failed_retryable" {
                host.advance_clock(1_000).await;
            }
            Err(format!("{wf:#}"))
        },
    )
    .await;
    assert_eq!(wf["state"], "needs_review", "{wf:#}");
    assert_eq!(deliver(&wf)["state"], "outcome_unknown", "{wf:#}");
    let before = host.attempts(&id, "deliver").await.len();

    // Retry is refused (the adapter does not deduplicate); escalation only marks the step.
    let (status, body) = act(&host, &id, "retry", "r-1", json!({}), None).await;
    assert_eq!(
        (status, body["error"]["code"].clone()),
        (409, json!("invalid_transition"))
    );
    let (status, body) = act(
        &host,
        &id,
        "escalate",
        "e-1",
        json!({"note": "ask the provider's support desk"}),
        None,
    )
    .await;
    assert_eq!(status, 200, "{body:#}");
    assert_eq!(body["state"], "outcome_unknown");
    assert_eq!(body["escalated"]["note"], "ask the provider's support desk");
    assert_eq!(body["escalated"]["by"], "local");

    // Once the provider shows the delivery, the operator's query finds it.
    host.advance_clock(60_000).await;
    let (status, step) = act(&host, &id, "query", "q-1", json!({}), None).await;
    assert_eq!(status, 200, "{step:#}");
    assert_eq!(step["state"], "succeeded", "{step:#}");
    assert_eq!(step["receipt"]["evidence_kind"], "query");
    let world = host.world().await;
    assert_eq!(world.len(), 1, "{world:#?}");
    assert_eq!(step["receipt"]["external_reference"], world[0]["id"]);
    let attempts = host.attempts(&id, "deliver").await;
    assert_eq!(attempts.len(), before + 1, "{attempts:#?}");
    assert_eq!(attempts[before]["trigger"], "recovery_query");
    assert_eq!(attempts[before]["outcome"], "lookup_found");
    let wf = host.wait_for(&id, ENDED, Duration::from_secs(10)).await;
    assert_eq!(wf["state"], "completed", "{wf:#}");
    // Pressing again acts once: same answer, no new attempt.
    let (status, again) = act(&host, &id, "query", "q-1", json!({}), None).await;
    assert_eq!((status, &again), (200, &step));
    assert_eq!(host.attempts(&id, "deliver").await.len(), before + 1);
    let timeline = host.timeline_text(&id).await;
    assert!(
        timeline.contains("Operator local asked for a query"),
        "{timeline}"
    );
    assert!(timeline.contains("Escalated by local"), "{timeline}");
}

#[tokio::test(flavor = "multi_thread")]
async fn actions_need_an_operator_and_abandon_ends_the_step() {
    let host = HostProcess::start(HostOptions {
        workflows: vec![Contract::FireAndForget.definition()],
        config: r#"
[[tokens]]
token = "client-a-token-0123456789"
subject = "team-a"
role = "client"
[[tokens]]
token = "client-b-token-0123456789"
subject = "team-b"
role = "client"
[[tokens]]
token = "ops-token-0123456789abcd"
subject = "alice"
role = "operator"
"#
        .into(),
        ..HostOptions::default()
    })
    .await;
    host.faults(json!({"lose_next": 1})).await;
    let r = reqwest::Client::new()
        .post(format!("{}/v1/intents", host.url))
        .bearer_auth("client-a-token-0123456789")
        .header("Idempotency-Key", "abandon-1")
        .json(&json!({"workflow": Contract::FireAndForget.workflow(), "input": document("x")}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 201);
    let created: Value = r.json().await.unwrap();
    let id = created["workflow_id"].as_str().unwrap().to_string();
    wait::until(
        "the workflow needing review",
        Duration::from_secs(30),
        || async {
            let r = reqwest::Client::new()
                .get(format!("{}/v1/workflows/{id}", host.url))
                .bearer_auth("ops-token-0123456789abcd")
                .send()
                .await
                .unwrap();
            let wf: Value = r.json().await.unwrap();
            if wf["state"] == "needs_review" {
                Ok(())
            } else {
                Err(format!("{wf:#}"))
            }
        },
    )
    .await;
    let abandon = json!({"outcome": "abandon", "evidence": "no trace at the provider",
                         "reason": "the customer withdrew the request"});
    // The owner is a client: forbidden. Another client cannot even see it.
    let (status, body) = act(
        &host,
        &id,
        "resolve",
        "a-1",
        abandon.clone(),
        Some("client-a-token-0123456789"),
    )
    .await;
    assert_eq!(
        (status, body["error"]["code"].clone()),
        (403, json!("forbidden"))
    );
    let (status, body) = act(
        &host,
        &id,
        "resolve",
        "a-1",
        abandon.clone(),
        Some("client-b-token-0123456789"),
    )
    .await;
    assert_eq!(
        (status, body["error"]["code"].clone()),
        (404, json!("not_found"))
    );
    let (status, body) = act(
        &host,
        &id,
        "resolve",
        "a-1",
        abandon.clone(),
        Some("ops-token-0123456789abcd"),
    )
    .await;
    assert_eq!(status, 200, "{body:#}");
    assert_eq!(body["state"], "failed_terminal");
    assert!(body["receipt"].is_null());
    let r = reqwest::Client::new()
        .get(format!("{}/v1/workflows/{id}", host.url))
        .bearer_auth("ops-token-0123456789abcd")
        .send()
        .await
        .unwrap();
    let wf: Value = r.json().await.unwrap();
    assert_eq!(wf["state"], "failed", "{wf:#}");
    // No key: refused before anything happens.
    let r = reqwest::Client::new()
        .post(format!(
            "{}/v1/workflows/{id}/steps/deliver/escalate",
            host.url
        ))
        .bearer_auth("ops-token-0123456789abcd")
        .json(&json!({"note": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
}

#[tokio::test(flavor = "multi_thread")]
async fn retry_sends_the_same_key_again_and_revives_a_failed_workflow() {
    let host = HostProcess::start(HostOptions::default()).await;
    // Five answers of 503: the delivery step uses up its five attempts and fails.
    host.faults(json!({"unavailable_next": 5})).await;
    let (_, created) = host
        .submit("document-delivery", "retry-1", document("retry"))
        .await;
    let id = created["workflow_id"].as_str().unwrap().to_string();
    let failed = wait::until(
        "the delivery using up its attempts",
        Duration::from_secs(60),
        || async {
            let (_, wf) = host.get(&format!("/v1/workflows/{id}")).await;
            if wf["state"] != "running" {
                return Ok(wf);
            }
            if deliver(&wf)["state"] == "failed_retryable" {
                // Skip the backoff in host time.
                host.advance_clock(60_000).await;
            }
            Err(format!("{wf:#}"))
        },
    )
    .await;
    assert_eq!(failed["state"], "failed", "{failed:#}");
    assert_eq!(deliver(&failed)["state"], "failed_terminal");
    assert!(!failed["ended_at"].is_null());
    assert_eq!(host.world().await.len(), 0);

    // The provider deduplicates and still remembers the key: a retry is safe.
    let (status, step) = act(&host, &id, "retry", "r-1", json!({}), None).await;
    assert_eq!(status, 200, "{step:#}");
    assert_eq!(step["state"], "succeeded", "{step:#}");
    assert_eq!(step["receipt"]["evidence_kind"], "response");
    let wf = host.wait_for(&id, ENDED, Duration::from_secs(10)).await;
    assert_eq!(wf["state"], "completed", "{wf:#}");
    let attempts = host.attempts(&id, "deliver").await;
    assert_eq!(attempts.len(), 6, "{attempts:#?}");
    assert_eq!(attempts[5]["trigger"], "manual_retry");
    let identities: std::collections::BTreeSet<&str> = attempts
        .iter()
        .filter_map(|a| a["request_identity"].as_str())
        .collect();
    assert_eq!(
        identities.len(),
        1,
        "one key for every attempt: {attempts:#?}"
    );
    assert_eq!(host.world().await.len(), 1);
    let timeline = host.timeline_text(&id).await;
    assert!(timeline.contains("ordered a retry with the same idempotency key"));
    assert!(timeline.contains("Workflow running again"), "{timeline}");
}

/// While an idempotent delivery's outcome is unknown, its step shows until when the
/// provider remembers the key — the first request's checkpoint 3 plus the retention the
/// adapter declares (a day) — in the API and on the console's step page; once the outcome
/// is known, it is gone.
#[tokio::test(flavor = "multi_thread")]
async fn an_unknown_outcome_shows_until_when_the_provider_remembers_the_key() {
    let host = HostProcess::start(HostOptions {
        workflows: vec![Contract::Idempotent.definition()],
        ..HostOptions::default()
    })
    .await;
    // The answer is lost and lookups see the delivery only after an hour: the step stays
    // uncertain while recovery asks (the host's clock moves only when the test moves it).
    host.faults(json!({"lose_next": 1, "visibility_delay_ms": 3_600_000}))
        .await;
    let (_, created) = host
        .submit(Contract::Idempotent.workflow(), "kept-1", document("kept"))
        .await;
    let id = created["workflow_id"].as_str().unwrap().to_string();
    let wf = wait::until(
        "the delivery's outcome unknown",
        Duration::from_secs(30),
        || async {
            let (_, wf) = host.get(&format!("/v1/workflows/{id}")).await;
            if !deliver(&wf)["retention_deadline"].is_null() {
                return Ok(wf);
            }
            Err(format!("{wf:#}"))
        },
    )
    .await;
    let attempts = host.attempts(&id, "deliver").await;
    let sent = humantime::parse_rfc3339(attempts[0]["started_at"].as_str().unwrap()).unwrap();
    let until =
        humantime::parse_rfc3339(deliver(&wf)["retention_deadline"].as_str().unwrap()).unwrap();
    // Checkpoint 3 comes a moment after the attempt starts.
    let remembered = until.duration_since(sent).unwrap();
    assert!(
        remembered >= Duration::from_secs(86_400) && remembered < Duration::from_secs(86_405),
        "{remembered:?}: {wf:#}"
    );
    let (client, cookie) = crate::course::console_session(&host).await;
    let page = client
        .get(format!("{}/console/workflows/{id}/steps/deliver", host.url))
        .header("cookie", cookie)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let shown = deliver(&wf)["retention_deadline"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        page.contains("Retention deadline: <strong>") && page.contains(&shown),
        "{page}"
    );

    // Past the visibility delay a lookup finds the delivery: known, and the deadline goes.
    let done = wait::until("the delivery found", Duration::from_secs(30), || async {
        host.advance_clock(600_000).await;
        let (_, wf) = host.get(&format!("/v1/workflows/{id}")).await;
        if wf["state"] == "completed" {
            return Ok(wf);
        }
        Err(format!("{wf:#}"))
    })
    .await;
    assert!(deliver(&done)["retention_deadline"].is_null(), "{done:#}");
    assert_eq!(host.world().await.len(), 1);
}

/// The shipped `document-delivery` definition as `name`, with `edit` applied to its text.
fn edited_delivery(name: &str, edit: impl Fn(String) -> String) -> (String, String) {
    let shipped = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../workflows/document-delivery.toml"),
    )
    .unwrap();
    let text = edit(shipped.replace("name = \"document-delivery\"", &format!("name = {name:?}")));
    assert!(text.contains(name), "the shipped definition changed shape");
    (format!("{name}.toml"), text)
}

/// A provider's answer without a field its step declares is not a receipt: the effect
/// happened, so the answer is kept as evidence and the step waits for a person — the step
/// that reads the field never runs on it and nothing is compensated. A person's resolution
/// gives the field (and is refused without it, naming it), and the later step reads it.
#[tokio::test(flavor = "multi_thread")]
async fn an_answer_without_a_declared_field_waits_for_a_person_who_supplies_it() {
    let strict = edited_delivery("delivery-strict", |text| {
        let text = text.replace(
            "outputs = [\"id\", \"client_reference\", \"status\", \"replayed\"]",
            "outputs = [\"id\", \"tracking_number\"]",
        );
        assert!(text.contains("tracking_number"));
        format!(
            "{text}\n[[steps]]\nid = \"confirm\"\nlabel = \"Prepare confirmation\"\nkind = \"handler\"\n\
             component = \"render-document\"\nversion = \"^1\"\nafter = [\"deliver\"]\n\
             outputs = [\"document\"]\n\n[steps.input]\ntitle = \"$steps.deliver.output.tracking_number\"\n\
             recipient = \"$steps.render.output.recipient\"\nbody = \"$input.body\"\n"
        )
    });
    let host = HostProcess::start(HostOptions {
        workflows: vec![strict],
        ..HostOptions::default()
    })
    .await;
    let (status, created) = host
        .submit("delivery-strict", "strict-1", document("strict"))
        .await;
    assert_eq!(status, 201, "{created}");
    let id = created["workflow_id"].as_str().unwrap().to_string();
    let wf = host.wait_for(&id, ENDED, Duration::from_secs(30)).await;
    assert_eq!(wf["state"], "needs_review", "{wf:#}");
    let step = deliver(&wf);
    assert_eq!(step["state"], "waiting_for_review", "{wf:#}");
    assert_eq!(step["receipt"], Value::Null, "{wf:#}");
    let world = host.world().await;
    assert_eq!(world.len(), 1, "the delivery happened once: {world:?}");
    let confirm = wf["steps"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(
        (confirm["id"].as_str(), confirm["state"].as_str()),
        (Some("confirm"), Some("pending"))
    );
    let timeline = host.timeline_text(&id).await;
    assert!(
        timeline.contains("but the provider's answer lacks the declared field `tracking_number`"),
        "{timeline}"
    );
    assert!(
        !timeline.contains("ompensat"),
        "nothing is reversed: {timeline}"
    );
    // The provider's answer is kept on the timeline as evidence.
    let (_, entries) = host.get(&format!("/v1/workflows/{id}/timeline")).await;
    let kept = entries["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| !e["data"]["answer"].is_null())
        .unwrap_or_else(|| panic!("no kept answer: {entries:#}"));
    let answer: Value = serde_json::from_str(kept["data"]["answer"].as_str().unwrap()).unwrap();
    assert_eq!(answer["id"], kept["data"]["external_reference"]);

    // Without the field, a resolution is refused and says which field to give.
    let resolve = |output: Option<Value>| {
        let mut body = json!({
            "outcome": "succeeded",
            "evidence": "the provider's dashboard shows tracking number T-1",
            "reason": "the answer left the tracking number out",
            "external_reference": answer["id"],
        });
        if let Some(o) = output {
            body["output"] = o;
        }
        body
    };
    let (status, body) = act(&host, &id, "resolve", "s-1", resolve(None), None).await;
    assert_eq!(status, 409, "{body:#}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("`tracking_number`"),
        "{body:#}"
    );
    let output = json!({"id": answer["id"], "tracking_number": "T-1"});
    let (status, body) = act(
        &host,
        &id,
        "resolve",
        "s-2",
        resolve(Some(output.clone())),
        None,
    )
    .await;
    assert_eq!(status, 200, "{body:#}");
    assert_eq!(body["receipt"]["output"], output, "{body:#}");
    let wf = host.wait_for(&id, ENDED, Duration::from_secs(30)).await;
    assert_eq!(wf["state"], "completed", "{wf:#}");
    let confirm = wf["steps"].as_array().unwrap().last().unwrap().clone();
    assert!(
        confirm["receipt"]["output"]["document"]
            .as_str()
            .unwrap()
            .contains("T-1"),
        "the later step read the field: {confirm:#}"
    );
    assert_eq!(host.world().await.len(), 1);
}

/// A handler's output without a declared field is retried (pure code may answer otherwise
/// next time) and then fails its step, before anything reads it.
#[tokio::test(flavor = "multi_thread")]
async fn a_handler_output_without_a_declared_field_fails_its_step_before_anything_reads_it() {
    let strict = edited_delivery("render-strict", |text| {
        let text = text.replace(
            "outputs = [\"recipient\", \"document\", \"document_digest\"]",
            "outputs = [\"recipient\", \"document\", \"document_digest\", \"page_count\"]",
        );
        assert!(text.contains("page_count"));
        text
    });
    let host = HostProcess::start(HostOptions {
        workflows: vec![strict],
        ..HostOptions::default()
    })
    .await;
    let (_, created) = host
        .submit("render-strict", "render-1", document("render"))
        .await;
    let id = created["workflow_id"].as_str().unwrap().to_string();
    let wf = wait::until(
        "the render step failing",
        Duration::from_secs(30),
        || async {
            let (_, wf) = host.get(&format!("/v1/workflows/{id}")).await;
            if wf["state"] != "running" {
                return Ok(wf);
            }
            // Skip the backoff between attempts in host time.
            host.advance_clock(60_000).await;
            Err(format!("{wf:#}"))
        },
    )
    .await;
    assert_eq!(wf["state"], "failed", "{wf:#}");
    let render = wf["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == "render")
        .unwrap()
        .clone();
    assert_eq!(render["state"], "failed_terminal", "{wf:#}");
    assert_eq!(render["attempts"], 3, "{wf:#}");
    assert_eq!(deliver(&wf)["attempts"], 0, "{wf:#}");
    let timeline = host.timeline_text(&id).await;
    assert!(
        timeline.contains("the handler's output lacks the declared field `page_count`"),
        "{timeline}"
    );
    assert_eq!(host.world().await.len(), 0);
}
