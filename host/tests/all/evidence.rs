//! Evidence from providers against a real `docket serve`, its provider simulator posting
//! signed events, and a real database: a lost answer settled by the provider's own event
//! with no second delivery; a forged or unsigned delivery refused and kept nowhere; a
//! replay kept once; an unmatched or unreadable delivery waiting in the inbox; another
//! reference contradicting a receipt; a delayed "accepted" after a reversal changing
//! nothing; and a host killed between the `202` and the application applying it once after
//! its restart. Store cases run on a SQLite file (`sqlite::<case>`) and a PostgreSQL
//! database of their own (`postgres::<case>`).

use crate::host_process::{
    Contract, HOOK_SECRET, HostOptions, HostProcess, PROVIDER_TOKEN, document,
};
use docket::sim::{ProviderSim, SimConfig};
use serde_json::{Value, json};
use std::time::Duration;

/// The development host's simulator signs its events with this secret when it is given.
const EVENTS_SECRET: &str = "whsec_c2lnbmluZy1rZXktb2YtdGhlLXRlc3Qtc2ltdWxhdG9y";

const SETTLED: &[&str] = &["completed", "needs_review", "failed", "cancelled"];

/// A development host (its own simulator) whose simulator signs events with
/// [`EVENTS_SECRET`].
async fn start(db: Option<String>, workflows: Vec<(String, String)>) -> HostProcess {
    HostProcess::start(HostOptions {
        db,
        config: format!("[secrets]\nvalues = {{ provider_webhook_secret = {EVENTS_SECRET:?} }}\n"),
        workflows,
        ..HostOptions::default()
    })
    .await
}

/// Posts `body` to `POST /v1/evidence/{adapter}` signed with `secret` at `timestamp` (now
/// when `None`).
async fn deliver(
    host: &HostProcess,
    adapter: &str,
    webhook_id: &str,
    body: &str,
    secret: &str,
    timestamp: Option<u64>,
) -> (u16, Value) {
    let key = docket::notify::signing_key(secret).unwrap();
    let timestamp = timestamp.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
    });
    let signature = docket::notify::signature(&key, webhook_id, timestamp, body);
    let path = format!("/v1/evidence/{adapter}");
    let r = reqwest::Client::new()
        .post(format!("{}{path}", host.url))
        .header("content-type", "application/json")
        .header("webhook-id", webhook_id)
        .header("webhook-timestamp", timestamp.to_string())
        .header("webhook-signature", signature)
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    answered("POST", &path, r).await
}

async fn answered(method: &str, path: &str, r: reqwest::Response) -> (u16, Value) {
    let status = r.status().as_u16();
    let body: Option<Value> = r.json().await.ok();
    crate::openapi_check::check(method, path, status, body.as_ref());
    (status, body.unwrap_or(Value::Null))
}

/// A provider event about delivery `id`, as the simulator writes them.
fn event(event_id: &str, kind: &str, id: &str, client_reference: &str) -> String {
    json!({
        "id": event_id,
        "type": kind,
        "occurred_at": "2026-12-06T00:00:00.000Z",
        "data": {"id": id, "client_reference": client_reference, "status": "accepted"},
    })
    .to_string()
}

/// The observations kept, by query string.
async fn observations(host: &HostProcess, query: &str) -> Vec<Value> {
    let (status, page) = host.get(&format!("/v1/evidence?{query}")).await;
    assert_eq!(status, 200, "{page}");
    page["data"].as_array().unwrap().clone()
}

/// Waits until `query` lists `n` observations, none of them held.
async fn wait_observations(host: &HostProcess, query: &str, n: usize) -> Vec<Value> {
    let found = crate::wait::poll(
        Duration::from_secs(30),
        Duration::from_millis(50),
        || async {
            let found = observations(host, query).await;
            if found.len() == n && found.iter().all(|o| o["verdict"] != "held") {
                Ok(found)
            } else {
                Err(format!("{found:#?}"))
            }
        },
    )
    .await;
    found.unwrap_or_else(|last| panic!("not {n} observations for {query}: {last}"))
}

fn step<'a>(wf: &'a Value, id: &str) -> &'a Value {
    wf["steps"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["id"] == id))
        .unwrap_or_else(|| panic!("no step {id}: {wf:#}"))
}

/// The simulator's events go to the fire-and-forget adapter's endpoint.
fn to_fire_and_forget(host: &HostProcess) -> Value {
    json!({"webhook_url": format!("{}/v1/evidence/{}", host.url, Contract::FireAndForget.component())})
}

/// A lost answer with a query-less, non-idempotent adapter (which alone would wait for a
/// person) is settled by the provider's own event: one delivery, one attempt, a receipt
/// whose evidence is the observation, and the event the provider posted twice kept once.
async fn a_lost_answer_is_settled_by_the_providers_event(db: Option<String>) {
    let host = start(db, vec![Contract::FireAndForget.definition()]).await;
    let mut faults = to_fire_and_forget(&host);
    faults["lose_next"] = json!(1);
    faults["webhook_repeat_next"] = json!(1);
    host.faults(faults).await;
    let (status, created) = host
        .submit(
            Contract::FireAndForget.workflow(),
            "settled-by-event",
            document("Lost answer"),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let id = created["workflow_id"].as_str().unwrap().to_string();
    // Outcome unknown for a moment, perhaps, until the event is read.
    let wf = host
        .wait_for(&id, &["completed"], Duration::from_secs(60))
        .await;
    let world = host.world().await;
    assert_eq!(world.len(), 1, "one delivery, never a second: {world:#?}");
    let deliver = step(&wf, "deliver");
    assert_eq!(deliver["receipt"]["evidence_kind"], "observation", "{wf:#}");
    assert_eq!(deliver["receipt"]["external_reference"], world[0]["id"]);
    let attempts = host.attempts(&id, "deliver").await;
    assert_eq!(attempts.len(), 1, "{attempts:#?}");

    let found = wait_observations(&host, &format!("workflow_id={id}"), 1).await;
    assert_eq!(found[0]["verdict"], "settled", "{found:#?}");
    assert_eq!(found[0]["step"], "deliver");
    assert_eq!(found[0]["receipt_id"], deliver["receipt"]["receipt_id"]);
    assert_eq!(found[0]["effect_status"], "in_effect");
    assert_eq!(found[0]["provider_status"], "accepted");
    // The replay the provider sent is kept once, even after more rounds.
    host.wait_ticks("evidence", 2).await;
    assert_eq!(observations(&host, "").await.len(), 1);
    let timeline = host.timeline_text(&id).await;
    assert!(
        timeline.contains("Settled by the provider's event"),
        "{timeline}"
    );
}

/// Only a delivery signed with the adapter's secret is kept: forged, unsigned and stale
/// ones are `401` and kept nowhere, an adapter without a secret takes none, an oversized
/// body is `413`; a replayed `webhook-id` is kept once; what matches no step, or cannot be
/// read, waits in the inbox.
async fn only_signed_deliveries_are_kept_and_the_unmatched_wait_in_the_inbox(db: Option<String>) {
    let host = start(db, vec![]).await;
    let body = event("evt_x1", "delivery.accepted", "dlv_999", "dk-nobody");
    let forged = "whsec_Zm9yZ2VkLWtleS1ub2JvZHktY29uZmlndXJlZA==";
    let (status, refused) = deliver(&host, "http-delivery", "wh-1", &body, forged, None).await;
    assert_eq!(status, 401, "{refused}");
    assert_eq!(refused["error"]["code"], "unauthorized");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("webhook-signature")
            || refused["error"]["message"]
                .as_str()
                .unwrap()
                .contains("signature"),
        "{refused}"
    );
    let stale = Some(1_000_000_000);
    let (status, _) = deliver(&host, "http-delivery", "wh-1", &body, EVENTS_SECRET, stale).await;
    assert_eq!(status, 401);
    let r = reqwest::Client::new()
        .post(format!("{}/v1/evidence/http-delivery", host.url))
        .body(body.clone())
        .send()
        .await
        .unwrap();
    let (status, unsigned) = answered("POST", "/v1/evidence/http-delivery", r).await;
    assert_eq!(status, 401, "{unsigned}");
    assert!(
        unsigned["error"]["message"]
            .as_str()
            .unwrap()
            .contains("webhook-id"),
        "{unsigned}"
    );
    // Nothing of them was kept.
    host.wait_ticks("evidence", 2).await;
    assert!(observations(&host, "").await.is_empty());

    let (status, none) = deliver(&host, "ledger", "wh-2", &body, EVENTS_SECRET, None).await;
    assert_eq!(status, 404, "{none}");
    assert!(
        none["error"]["message"]
            .as_str()
            .unwrap()
            .contains("webhook_secret"),
        "{none}"
    );
    let huge = "x".repeat(300 * 1024);
    let (status, _) = deliver(&host, "http-delivery", "wh-3", &huge, EVENTS_SECRET, None).await;
    assert_eq!(status, 413);

    // A signed delivery naming no effect of this database: kept once, in the inbox.
    let (status, kept) = deliver(&host, "http-delivery", "wh-4", &body, EVENTS_SECRET, None).await;
    assert_eq!(status, 202, "{kept}");
    assert_eq!(kept["replayed"], false);
    assert_eq!(kept["webhook_id"], "wh-4");
    let (status, again) = deliver(&host, "http-delivery", "wh-4", &body, EVENTS_SECRET, None).await;
    assert_eq!(status, 202, "{again}");
    assert_eq!(again["replayed"], true);
    let inbox = wait_observations(&host, "matched=false", 1).await;
    assert_eq!(inbox[0]["verdict"], "unmatched", "{inbox:#?}");
    assert_eq!(inbox[0]["matched"], false);
    assert_eq!(inbox[0]["external_reference"], "dlv_999");
    assert_eq!(inbox[0]["webhook_id"], "wh-4");
    // The same event under another webhook id is the same event: kept once.
    let (status, _) = deliver(&host, "http-delivery", "wh-5", &body, EVENTS_SECRET, None).await;
    assert_eq!(status, 202);
    // A delivery the adapter cannot read waits there too, with its reason.
    let (status, _) = deliver(
        &host,
        "http-delivery",
        "wh-6",
        "this is not JSON",
        EVENTS_SECRET,
        None,
    )
    .await;
    assert_eq!(status, 202);
    let inbox = wait_observations(&host, "matched=false", 2).await;
    assert_eq!(inbox[1]["verdict"], "unreadable", "{inbox:#?}");
    assert!(
        inbox[1]["note"].as_str().unwrap().contains("not JSON"),
        "{inbox:#?}"
    );
    assert!(observations(&host, "matched=true").await.is_empty());
    let (status, bad) = host.get("/v1/evidence?matched=maybe").await;
    assert_eq!(status, 400, "{bad}");
}

/// A provider event naming another reference than the receipt makes the step
/// `contradicted` (a person decides); the event the step already stands on is kept as
/// evidence and changes nothing.
async fn another_reference_contradicts_the_receipt(db: Option<String>) {
    let host = start(db, vec![]).await;
    let (status, created) = host
        .submit("document-delivery", "contradicted", document("Twice?"))
        .await;
    assert_eq!(status, 201, "{created}");
    let id = created["workflow_id"].as_str().unwrap().to_string();
    let wf = host.wait_for(&id, SETTLED, Duration::from_secs(60)).await;
    assert_eq!(wf["state"], "completed", "{wf:#}");
    // The simulator's own event about the delivery: kept beside the receipt.
    let found = wait_observations(&host, &format!("workflow_id={id}"), 1).await;
    assert_eq!(found[0]["verdict"], "kept", "{found:#?}");
    let world = host.world().await;
    let key = world[0]["client_reference"].as_str().unwrap();
    let standing = world[0]["id"].as_str().unwrap();
    let body = event("evt_other", "delivery.accepted", "dlv_other", key);
    let (status, _) = deliver(
        &host,
        "http-delivery",
        "wh-other",
        &body,
        EVENTS_SECRET,
        None,
    )
    .await;
    assert_eq!(status, 202);
    let wf = host
        .wait_for(&id, &["needs_review"], Duration::from_secs(30))
        .await;
    let deliver_step = step(&wf, "deliver");
    assert_eq!(deliver_step["state"], "contradicted", "{wf:#}");
    assert_eq!(
        deliver_step["contradicted"]["references"],
        json!([standing, "dlv_other"]),
        "{wf:#}"
    );
    let found = observations(&host, &format!("workflow_id={id}")).await;
    assert_eq!(found.len(), 2, "{found:#?}");
    assert_eq!(found[1]["verdict"], "contradicted");
}

/// A definition whose delivery is compensated when the workflow is cancelled.
fn withdrawable() -> (String, String) {
    let text = r#"
name = "withdrawable-delivery"
version = 1
deadline = "1h"

[input_schema]
type = "object"

[[steps]]
id = "deliver"
label = "Deliver document"
kind = "adapter"
component = "http-delivery"
version = "^1"
timeout = "20s"

[steps.input]
recipient = "$input.recipient"
document = "$input.document"
document_digest = "$input.document_digest"

[steps.capabilities]
outbound_hosts = ["$base_url"]
secrets = ["provider_token"]

[steps.compensation]
on = "workflow_cancelled"
"#;
    ("withdrawable-delivery.toml".into(), text.into())
}

/// The provider's "accepted", posted late — after the delivery was withdrawn and its
/// "cancelled" arrived — adds evidence and reopens nothing.
async fn a_late_accepted_after_a_reversal_changes_nothing(db: Option<String>) {
    let host = start(db, vec![withdrawable()]).await;
    host.faults(json!({"webhook_late_next": 1, "webhook_late_ms": 4_000}))
        .await;
    let input = json!({"recipient": "reader@example.com", "document": "Hi", "document_digest": "sha256:00"});
    let (status, created) = host
        .submit("withdrawable-delivery", "late-accepted", input)
        .await;
    assert_eq!(status, 201, "{created}");
    let id = created["workflow_id"].as_str().unwrap().to_string();
    let wf = host.wait_for(&id, SETTLED, Duration::from_secs(60)).await;
    assert_eq!(wf["state"], "completed", "{wf:#}");
    let (status, answer) = host
        .post_with_key(
            &format!("/v1/workflows/{id}/cancel"),
            "withdraw",
            json!({"reason": "sent to the wrong reader", "withdraw": true}),
        )
        .await;
    assert_eq!(status, 202, "{answer}");
    let wf = host.wait_for(&id, SETTLED, Duration::from_secs(60)).await;
    assert_eq!(wf["state"], "cancelled", "{wf:#}");
    // The cancellation's event first, then the late acceptance: both kept, nothing moved.
    let found = wait_observations(&host, &format!("workflow_id={id}"), 2).await;
    let statuses: Vec<&str> = found
        .iter()
        .map(|o| o["effect_status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["reversed", "in_effect"], "{found:#?}");
    assert!(found.iter().all(|o| o["verdict"] == "kept"), "{found:#?}");
    let after = host.get(&format!("/v1/workflows/{id}")).await.1;
    assert_eq!(after["state"], "cancelled", "{after:#}");
    let deliver_step = step(&after, "deliver");
    assert_eq!(deliver_step["state"], "compensated", "{after:#}");
    assert_eq!(deliver_step["compensation"]["state"], "succeeded");
    let world = host.world().await;
    assert_eq!(world.len(), 1);
    assert_eq!(world[0]["status"], "cancelled", "{world:#?}");
}

/// A host killed after answering a provider's delivery `202` and before applying it: the
/// delivery was kept, so the restarted host applies it — exactly once.
async fn a_delivery_answered_before_a_kill_is_applied_once_after_the_restart(db: Option<String>) {
    let sim = ProviderSim::start(
        SimConfig::new(PROVIDER_TOKEN),
        "127.0.0.1:0".parse().unwrap(),
    )
    .await
    .unwrap();
    let options = |dir, failpoint: bool| HostOptions {
        workflows: vec![Contract::FireAndForget.definition()],
        env: if failpoint {
            vec![("DOCKET_FAILPOINT".into(), "evidence-read".into())]
        } else {
            vec![]
        },
        dir,
        provider: Some(sim.base_url()),
        db: db.clone(),
        ..HostOptions::default()
    };
    let mut host = HostProcess::start(options(None, true)).await;
    let mut faults = to_fire_and_forget(&host);
    faults["webhook_secret"] = json!(HOOK_SECRET);
    faults["lose_next"] = json!(1);
    host.faults(faults).await;
    let (status, created) = host
        .submit(
            Contract::FireAndForget.workflow(),
            "killed-before-applied",
            document("Kill me"),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let id = created["workflow_id"].as_str().unwrap().to_string();
    let exit = host.wait_exit(Duration::from_secs(60)).await;
    assert!(
        exit.is_some_and(|s| !s.success())
            && host.log_text().contains("failpoint evidence-read reached"),
        "the host did not abort at the failpoint: {exit:?}\n{}",
        host.log_tail(40)
    );
    assert_eq!(sim.sim().world().len(), 1);

    // The same database, no failpoint: once the dead host's claims run out, the kept
    // delivery is read and applied.
    let dir = host.kill();
    let host = HostProcess::start(options(Some(dir), false)).await;
    host.advance_clock(docket::store::DELIVERY_LEASE_MS + 1_000)
        .await;
    let wf = host
        .wait_for(&id, &["completed"], Duration::from_secs(60))
        .await;
    assert_eq!(
        wf["state"],
        "completed",
        "{wf:#}\n{}",
        host.timeline_text(&id).await
    );
    assert_eq!(
        step(&wf, "deliver")["receipt"]["evidence_kind"],
        "observation"
    );
    let found = wait_observations(&host, "", 1).await;
    assert_eq!(found[0]["verdict"], "settled", "{found:#?}");
    host.wait_ticks("evidence", 2).await;
    assert_eq!(observations(&host, "").await.len(), 1);
    assert_eq!(sim.sim().world().len(), 1, "never a second delivery");
}

/// An adapter's `observe` that spins, panics or exhausts its memory ends only its own
/// delivery's reading, as unreadable in the inbox: the provider's requests are answered at
/// once meanwhile, and the host goes on running workflows.
#[tokio::test(flavor = "multi_thread")]
async fn a_hostile_observe_costs_only_its_own_delivery() {
    let host = HostProcess::start(HostOptions {
        config: format!(
            "[secrets]\nvalues = {{ provider_webhook_secret = {EVENTS_SECRET:?}, api_token = \"hostile-api-token\" }}\n\
             [limits]\nmemory_mib = 64\n\
             [adapters.hostile]\nallow_hosts = [\"http://127.0.0.1:9\"]\nallow_secrets = [\"api_token\"]\n\
             webhook_secret = \"provider_webhook_secret\"\n"
        ),
        ..HostOptions::default()
    })
    .await;
    for mode in ["loop", "panic", "alloc"] {
        let body = json!({"do": mode}).to_string();
        let (status, kept) = deliver(
            &host,
            "hostile",
            &format!("wh-{mode}"),
            &body,
            EVENTS_SECRET,
            None,
        )
        .await;
        assert_eq!(status, 202, "{kept}");
    }
    // While the first spins, the API answers and workflows run.
    let (status, created) = host
        .submit(
            "document-delivery",
            "beside-hostile",
            document("Still here"),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let id = created["workflow_id"].as_str().unwrap().to_string();
    host.wait_for(&id, &["completed"], Duration::from_secs(60))
        .await;
    let found = crate::wait::poll(
        Duration::from_secs(90),
        Duration::from_millis(200),
        || async {
            let found = observations(&host, "matched=false&adapter=hostile").await;
            if found.len() == 3 {
                Ok(found)
            } else {
                Err(format!("{found:#?}"))
            }
        },
    )
    .await
    .unwrap_or_else(|last| panic!("the hostile deliveries were not all read: {last}"));
    for o in &found {
        assert_eq!(o["verdict"], "unreadable", "{found:#?}");
        assert!(
            o["note"].as_str().unwrap().contains("observe failed"),
            "{found:#?}"
        );
    }
    let (status, _) = host.get("/readyz").await;
    assert_eq!(status, 200);
}

on_both_stores!(
    a_lost_answer_is_settled_by_the_providers_event,
    only_signed_deliveries_are_kept_and_the_unmatched_wait_in_the_inbox,
    another_reference_contradicts_the_receipt,
    a_late_accepted_after_a_reversal_changes_nothing,
    a_delivery_answered_before_a_kill_is_applied_once_after_the_restart,
);
