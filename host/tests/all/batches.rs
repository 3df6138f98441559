//! Batch steps against real `docket serve` processes, the provider simulator and a real
//! database, on both stores: each item of a `for_each` step is an effect intent of its own
//! — its own key, attempts and receipt — and the step gathers them.

use crate::host_process::{HostOptions, HostProcess, PROVIDER_TOKEN};
use docket::intent::{WorkflowId, external_idempotency_key};
use docket::sim::{ProviderSim, SimConfig};
use serde_json::{Value, json};
use std::time::Duration;

const SETTLED: &[&str] = &["completed", "needs_review", "failed", "cancelled"];

/// A mailing: one document delivered to each recipient, `max_parallel` at a time.
fn mailing(max_parallel: u32) -> String {
    mailing_with(max_parallel, "")
}

/// [`mailing`] whose deliveries a cancellation withdraws, item by item.
fn withdrawn_mailing(max_parallel: u32) -> String {
    mailing_with(
        max_parallel,
        "\n[steps.compensation]\non = \"workflow_cancelled\"\n",
    )
}

fn mailing_with(max_parallel: u32, extra: &str) -> String {
    format!(
        r#"
name = "mailing"
version = 1
deadline = "1h"

# Each item's attempts and calls count: room for a thousand items and their recoveries.
[budget]
max_attempts = 5000
max_external_calls = 5000

[input_schema]
type = "object"
required = ["document", "recipients"]
properties.document.type = "string"
properties.recipients.type = "array"

[[steps]]
id = "deliver"
label = "Deliver to each recipient"
kind = "adapter"
component = "http-delivery"
version = "^1"
for_each = "$input.recipients"
item_key = "$item.email"
max_parallel = {max_parallel}
timeout = "30s"
outputs = ["id", "client_reference", "status", "replayed"]

[steps.input]
recipient = "$item.email"
document = "$input.document"
document_digest = "$input.document"

# Lookups inside the adapter's visibility window (5 s, asked again each second) count as
# attempts: enough are left for a same-key retry after it.
[steps.retry]
max_attempts = 10
initial_backoff = "100ms"
max_backoff = "1s"

[steps.capabilities]
outbound_hosts = ["$base_url"]
secrets = ["provider_token"]
{extra}"#
    )
}

fn recipients(n: usize) -> Vec<Value> {
    (0..n)
        .map(|i| json!({"email": format!("person{i:02}@example.com")}))
        .collect()
}

fn step<'a>(wf: &'a Value, id: &str) -> &'a Value {
    wf["steps"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["id"] == id))
        .unwrap_or_else(|| panic!("no step {id}: {wf:#}"))
}

/// The projection once no item of `deliver` is pending or running.
async fn items_settled(host: &HostProcess, id: &str) -> Value {
    crate::wait::until("every item to settle", Duration::from_secs(90), || async {
        let (_, wf) = host.get(&format!("/v1/workflows/{id}")).await;
        let items = &step(&wf, "deliver")["items"];
        if items["pending"] == 0 && items["running"] == 0 {
            Ok(wf)
        } else {
            Err(format!("{items}"))
        }
    })
    .await
}

/// A console page as an operator signed in to this open (tokenless) host sees it.
async fn console_page(host: &HostProcess, path: &str) -> String {
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
    let cookie = signed
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok()?.split(';').next().map(str::to_string))
        .collect::<Vec<_>>()
        .join("; ");
    assert!(!cookie.is_empty(), "no session: {}", signed.status());
    let page = client
        .get(format!("{}{path}", host.url))
        .header("cookie", cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    page.text().await.unwrap()
}

/// A row id as one path segment.
fn urlencoding(text: &str) -> String {
    text.replace('[', "%5B")
        .replace(']', "%5D")
        .replace('@', "%40")
}

/// The key an item's request is sent under: derived from its own identity.
fn key_of(id: &str, item: &str) -> String {
    external_idempotency_key(
        &WorkflowId(id.to_string()),
        &docket::workflow::item_identity("deliver", item),
        "reference-provider",
        Some(docket::catalog::DEFAULT_ENVIRONMENT),
    )
}

/// 50 items: the provider loses two answers (recovered by contract) and rejects one
/// recipient; the step waits for a person with 49 delivered and 1 failed, each accepted
/// item delivered exactly once; a person's `resolve` of the failed item completes it.
async fn a_batch_delivers_each_item_once_and_a_person_settles_the_rejected_one(db: Option<String>) {
    let sim = ProviderSim::start(
        SimConfig::new(PROVIDER_TOKEN),
        "127.0.0.1:0".parse().unwrap(),
    )
    .await
    .unwrap();
    let host = HostProcess::start(HostOptions {
        db: db.clone(),
        workflows: vec![("mailing.toml".into(), mailing(4))],
        provider: Some(sim.base_url()),
        ..HostOptions::default()
    })
    .await;
    // A batch that cannot fit the budget's external calls is refused before anything runs.
    let (status, refused) = host
        .submit(
            "mailing",
            "too-many",
            json!({"document": "December", "recipients": recipients(5001)}),
        )
        .await;
    assert_eq!(status, 422, "{refused}");
    assert_eq!(
        refused["error"]["details"][0]["limit"],
        "max_external_calls"
    );
    assert_eq!(refused["error"]["details"][0]["needed"], 5001);
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("`deliver` has 5001 items"),
        "{refused}"
    );
    let mut people = recipients(50);
    // The provider refuses an address without `@` for good.
    people[17] = json!({"email": "nobody-at-example.com"});
    // Two answers lost after the provider committed: one delivery the lookup then finds
    // (recovered by query), one it never sees (recovered by a same-key retry, which the
    // provider answers from its record).
    sim.sim()
        .set_faults(json!({
            "lose_for": ["person05@example.com", "person30@example.com"],
            "hidden_for": ["person30@example.com"],
        }))
        .unwrap();
    let (status, created) = host
        .submit(
            "mailing",
            "newsletter",
            json!({"document": "December", "recipients": people}),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let id = created["workflow_id"].as_str().unwrap().to_string();
    // The rejected item puts the step in review at once; the other items run on.
    let wf = host.wait_for(&id, SETTLED, Duration::from_secs(90)).await;
    assert_eq!(wf["state"], "needs_review", "{wf:#}");
    let wf = items_settled(&host, &id).await;
    assert_eq!(wf["state"], "needs_review", "{wf:#}");
    let deliver = step(&wf, "deliver");
    assert_eq!(deliver["state"], "waiting_for_review", "{wf:#}");
    assert_eq!(
        deliver["items"],
        json!({"total": 50, "pending": 0, "running": 0, "succeeded": 49,
               "outcome_unknown": 0, "failed": 1, "cancelled": 0, "compensated": 0}),
        "{wf:#}"
    );
    // Items are not steps of the workflow's own.
    assert_eq!(wf["steps"].as_array().unwrap().len(), 1, "{wf:#}");

    // One delivery per accepted item, each under the item's own key.
    let world = sim.sim().world();
    assert_eq!(world.len(), 49, "{world:?}");
    for (i, p) in people.iter().enumerate() {
        if i == 17 {
            continue;
        }
        let key = key_of(&id, p["email"].as_str().unwrap());
        let sent = world.iter().filter(|d| d.client_reference == key).count();
        assert_eq!(sent, 1, "item {i}: {world:?}");
    }

    // Each lost answer was recovered on the item alone, by the contract's means.
    let recovered = |item: &str| {
        let host = &host;
        let path = format!("/v1/workflows/{id}/steps/deliver/items/{item}/attempts");
        async move {
            let (status, page) = host.get(&path).await;
            assert_eq!(status, 200, "{page}");
            page["data"].as_array().unwrap().clone()
        }
    };
    let by_query = recovered("person05@example.com").await;
    assert!(
        by_query
            .iter()
            .any(|a| a["trigger"] == "recovery_query" && a["outcome"] == "lookup_found"),
        "{by_query:#?}"
    );
    let by_retry = recovered("person30@example.com").await;
    let keys: Vec<&Value> = by_retry.iter().map(|a| &a["request_identity"]).collect();
    assert!(
        by_retry.iter().any(|a| a["outcome"] == "lookup_absent")
            && by_retry.last().unwrap()["outcome"] == "accepted"
            && keys.iter().filter(|k| k.is_string()).all(|k| *k == keys[0]),
        "{by_retry:#?}"
    );

    // The failed item, paged by state, and its resolution.
    let (status, failed) = host
        .get(&format!(
            "/v1/workflows/{id}/steps/deliver/items?state=failed_terminal"
        ))
        .await;
    assert_eq!(status, 200, "{failed}");
    assert_eq!(
        failed["data"][0]["item_key"], "nobody-at-example.com",
        "{failed}"
    );
    // The step itself is acted on through its items (a retry of it retries those
    // unresolved, below).
    let (status, refused) = host
        .post_with_key(
            &format!("/v1/workflows/{id}/steps/deliver/query"),
            "query-all",
            json!({}),
        )
        .await;
    assert_eq!(status, 409, "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("batch step") && message.contains("/items/{item_key}/query"),
        "{refused}"
    );
    // The console's page of the step shows the counts and the items, the one waiting for
    // a person named first.
    let page = console_page(&host, &format!("/console/workflows/{id}/steps/deliver")).await;
    assert!(
        page.contains("50 items, each an effect of its own: 49 succeeded")
            && page.contains("Waiting for a person: ")
            && page.contains("nobody-at-example.com")
            && page.contains("person49@example.com")
            && page.contains("A batch step is acted on item by item")
            && page.contains("Retry the unresolved items"),
        "{page}"
    );
    let later = console_page(
        &host,
        &format!("/console/workflows/{id}/steps/deliver?items_from=40"),
    )
    .await;
    assert!(
        later.contains(">person40@example.com</a>") && !later.contains(">person39@example.com</a>"),
        "{later}"
    );
    let (status, resolved) = host
        .post_with_key(
            &format!("/v1/workflows/{id}/steps/deliver/items/nobody-at-example.com/resolve"),
            "resolve-17",
            json!({
                "outcome": "succeeded",
                "evidence": "delivered by hand to the corrected address",
                "reason": "the address had a typo",
                "external_reference": "manual-17",
                "output": {"id": "manual-17", "client_reference": "-", "status": "delivered",
                           "replayed": false},
            }),
        )
        .await;
    assert_eq!(status, 200, "{resolved}\n{}", host.log_tail(30));
    let wf = host
        .wait_for(&id, &["completed"], Duration::from_secs(30))
        .await;
    let deliver = step(&wf, "deliver");
    assert_eq!(deliver["items"]["succeeded"], 50, "{wf:#}");

    assert_eq!(sim.sim().world().len(), 49);
    let database = db.unwrap_or_else(|| host.path().join("docket.db").display().to_string());
    let (code, out) = crate::operations::docket_check(&database, false);
    assert_eq!(code, 0, "{out}");
}

/// Short leases: the restarted host's clock is moved past the dead one's.
const LEASE_MS: u64 = 3_000;

/// A host aborts at checkpoint `checkpoint` of the first item's attempt (one item runs at
/// a time); restarted on the same database, it recovers that item alone, by the contract,
/// and the batch ends with one delivery per item.
async fn crash_at(db: Option<String>, checkpoint: u8) {
    let sim = ProviderSim::start(
        SimConfig::new(PROVIDER_TOKEN),
        "127.0.0.1:0".parse().unwrap(),
    )
    .await
    .unwrap();
    let options = |dir, failpoint: bool| HostOptions {
        config: format!("[limits]\nlease = \"{LEASE_MS}ms\"\n"),
        workflows: vec![("mailing.toml".into(), mailing(1))],
        env: if failpoint {
            vec![(
                "DOCKET_FAILPOINT".into(),
                format!("checkpoint-{checkpoint}"),
            )]
        } else {
            Vec::new()
        },
        dir,
        provider: Some(sim.base_url()),
        db: db.clone(),
        ..HostOptions::default()
    };
    let mut host = HostProcess::start(options(None, true)).await;
    let people = recipients(3);
    let (status, created) = host
        .submit(
            "mailing",
            &format!("crash-{checkpoint}"),
            json!({"document": "December", "recipients": people}),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let id = created["workflow_id"].as_str().unwrap().to_string();
    let exit = host.wait_exit(Duration::from_secs(60)).await;
    assert!(
        exit.is_some_and(|s| !s.success())
            && host
                .log_text()
                .contains(&format!("failpoint checkpoint-{checkpoint} reached")),
        "checkpoint {checkpoint}: the host did not abort at the failpoint ({exit:?})"
    );
    let at_death = sim.sim().world().len();
    assert!(
        at_death <= 1,
        "checkpoint {checkpoint}: {at_death} deliveries"
    );

    let host = HostProcess::start(options(Some(host.kill()), false)).await;
    host.advance_clock(LEASE_MS + 1_000).await;
    let wf = crate::wait::until(
        &format!("checkpoint {checkpoint}: the batch to complete"),
        Duration::from_secs(90),
        || async {
            let (_, wf) = host.get(&format!("/v1/workflows/{id}")).await;
            if wf["state"] == "completed" {
                return Ok(wf);
            }
            // Recovery waits on time (a lookup asked again, a backoff): moved on while no
            // item is running or about to be claimed (moving the clock under a running
            // attempt on a loaded machine can end its lease).
            let mut idle = true;
            for state in ["running", "ready"] {
                let (_, items) = host
                    .get(&format!(
                        "/v1/workflows/{id}/steps/deliver/items?state={state}"
                    ))
                    .await;
                idle &= items["data"].as_array().is_some_and(Vec::is_empty);
            }
            if idle {
                host.advance_clock(1_000).await;
            }
            Err(format!("{wf}"))
        },
    )
    .await;
    assert_eq!(step(&wf, "deliver")["items"]["succeeded"], 3, "{wf:#}");
    let world = sim.sim().world();
    assert_eq!(world.len(), 3, "checkpoint {checkpoint}: {world:?}");
    for (i, p) in people.iter().enumerate() {
        let key = key_of(&id, p["email"].as_str().unwrap());
        assert_eq!(
            world.iter().filter(|d| d.client_reference == key).count(),
            1,
            "checkpoint {checkpoint}, item {i}: {world:?}"
        );
        let row = docket::workflow::item_identity("deliver", p["email"].as_str().unwrap());
        let attempts = host.attempts(&id, &urlencoding(&row)).await;
        // The crashed item alone was recovered; each other one sent its request once and
        // needed no recovery (one claimed in the crashed finish's commit, at checkpoint 1,
        // had sent nothing). At checkpoint 6 the crashed item's receipt had committed, with
        // the release of the next item, which may have run before the process died: that
        // one was in flight too, and the crashed item itself needs nothing.
        if checkpoint == 6 && i == 0 {
            assert_eq!(attempts.len(), 1, "checkpoint 6, item 0: {attempts:#?}");
        }
        let in_flight_at_death = checkpoint == 6 && i == 1;
        if i > 0 && !in_flight_at_death {
            let sent = attempts
                .iter()
                .filter(|a| a["checkpoint"].as_u64() >= Some(3))
                .count();
            assert!(
                sent == 1 && attempts.iter().all(|a| a["trigger"] != "recovery_query"),
                "checkpoint {checkpoint}, item {i}: {attempts:#?}"
            );
        }
        let identities: std::collections::BTreeSet<&str> = attempts
            .iter()
            .filter_map(|a| a["request_identity"].as_str())
            .collect();
        assert!(identities.len() <= 1, "{attempts:#?}");
    }
    let database = db
        .clone()
        .unwrap_or_else(|| host.path().join("docket.db").display().to_string());
    let (code, out) = crate::operations::docket_check(&database, false);
    assert_eq!(code, 0, "checkpoint {checkpoint}: {out}");
}

async fn a_crash_at_each_checkpoint_of_an_item_recovers_that_item_only(db: Option<String>) {
    for checkpoint in 1..=6 {
        crash_at(db.clone(), checkpoint).await;
    }
}

/// A cancellation in the middle of a batch: the items not begun end `cancelled`, every item
/// that delivered is withdrawn once (its own compensation), and the workflow ends
/// `cancelled`.
async fn a_cancelled_batch_cancels_what_has_not_begun_and_withdraws_each_delivery_once(
    db: Option<String>,
) {
    let sim = ProviderSim::start(
        SimConfig::new(PROVIDER_TOKEN),
        "127.0.0.1:0".parse().unwrap(),
    )
    .await
    .unwrap();
    let host = HostProcess::start(HostOptions {
        db: db.clone(),
        workflows: vec![("mailing.toml".into(), withdrawn_mailing(2))],
        provider: Some(sim.base_url()),
        ..HostOptions::default()
    })
    .await;
    // Each answer takes a while, so the cancellation finds the batch under way.
    sim.sim()
        .set_faults(json!({"slow": 1.0, "slow_ms": 300}))
        .unwrap();
    let people = recipients(40);
    let (status, created) = host
        .submit(
            "mailing",
            "to-withdraw",
            json!({"document": "December", "recipients": people}),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let id = created["workflow_id"].as_str().unwrap().to_string();
    crate::wait::until("a few deliveries", Duration::from_secs(30), || async {
        let (_, wf) = host.get(&format!("/v1/workflows/{id}")).await;
        let succeeded = step(&wf, "deliver")["items"]["succeeded"]
            .as_u64()
            .unwrap_or(0);
        if succeeded >= 3 {
            Ok(())
        } else {
            Err(format!("{wf}"))
        }
    })
    .await;
    let (status, cancel) = host
        .post_with_key(
            &format!("/v1/workflows/{id}/cancel"),
            "stop",
            json!({"reason": "the newsletter was sent by mistake"}),
        )
        .await;
    assert_eq!(status, 202, "{cancel}");
    let wf = host
        .wait_for(&id, &["cancelled"], Duration::from_secs(60))
        .await;
    let deliver = step(&wf, "deliver");
    assert_eq!(deliver["state"], "cancelled", "{wf:#}");
    let items = &deliver["items"];
    let world = sim.sim().world();
    let delivered = world.len() as u64;
    assert!((3..40).contains(&delivered), "{world:?}");
    assert_eq!(items["compensated"], delivered, "{wf:#}");
    assert_eq!(items["cancelled"], 40 - delivered, "{wf:#}");
    // Each delivery withdrawn once, none twice, none delivered after the cancellation.
    for d in &world {
        assert_eq!(d.status, docket::sim::DeliveryStatus::Cancelled, "{d:?}");
        assert_eq!(d.cancel_requests, 1, "{d:?}");
    }
    let database = db.unwrap_or_else(|| host.path().join("docket.db").display().to_string());
    let (code, out) = crate::operations::docket_check(&database, false);
    assert_eq!(code, 0, "{out}");
}

/// `http-delivery` 1.1.0, whose contract takes up to 100 items per call, deployed and made
/// active on `host`.
async fn activate_batching(host: &HostProcess) {
    let bytes = std::fs::read(docket::guests::path("http-delivery-batching").unwrap()).unwrap();
    let client = reqwest::Client::new();
    let deployed = client
        .post(format!("{}/v1/adapters", host.url))
        .header("Idempotency-Key", "deploy-batching")
        .body(bytes)
        .send()
        .await
        .unwrap();
    assert_eq!(deployed.status(), 201, "{:?}", deployed.text().await);
    let (status, active) = host
        .post_with_key(
            "/v1/adapters/http-delivery/activate",
            "activate-batching",
            json!({"version": "1.1.0"}),
        )
        .await;
    assert_eq!(status, 200, "{active}");
}

/// 1,000 items through an adapter that sends up to 100 per call: the provider takes only
/// part of one call (five items answered `503`, retried on their own) and the answer of
/// another is lost after it committed (each of its items recovered by its own lookup).
/// The provider's record holds exactly one delivery per item.
async fn a_thousand_items_go_in_calls_of_a_hundred_and_each_is_delivered_once(db: Option<String>) {
    let sim = ProviderSim::start(
        SimConfig::new(PROVIDER_TOKEN),
        "127.0.0.1:0".parse().unwrap(),
    )
    .await
    .unwrap();
    let host = HostProcess::start(HostOptions {
        db: db.clone(),
        workflows: vec![("mailing.toml".into(), mailing(100))],
        provider: Some(sim.base_url()),
        ..HostOptions::default()
    })
    .await;
    activate_batching(&host).await;
    sim.sim()
        .set_faults(json!({"item_unavailable_next": 5, "lose_next": 1}))
        .unwrap();
    let people = recipients(1000);
    let (status, created) = host
        .submit(
            "mailing",
            "thousand",
            json!({"document": "December", "recipients": people}),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let id = created["workflow_id"].as_str().unwrap().to_string();
    let wf = host
        .wait_for(&id, &["completed"], Duration::from_secs(300))
        .await;
    assert_eq!(step(&wf, "deliver")["items"]["succeeded"], 1000, "{wf:#}");
    let page = console_page(&host, &format!("/console/workflows/{id}/steps/deliver")).await;
    assert!(
        page.contains("1000 items, each an effect of its own: 1000 succeeded")
            && page.contains("?items_from=50")
            && page.contains("Next 50 items"),
        "{page}"
    );
    let world = sim.sim().world();
    assert_eq!(world.len(), 1000);
    let mut keys: Vec<&str> = world.iter().map(|d| d.client_reference.as_str()).collect();
    keys.sort_unstable();
    keys.dedup();
    assert_eq!(keys.len(), 1000, "one delivery per item");
    let faults = sim.sim().faults();
    assert_eq!((faults.item_unavailable_next, faults.lose_next), (0, 0));
    // Sent in calls of many, never more than a call takes: the adapter logs each call. (How
    // many gather depends on how the items' ends come: in bursts from SQLite's group
    // commit, one at a time from PostgreSQL's, which records one finish per workflow per
    // transaction.)
    let log = host.log_text();
    let sizes: Vec<usize> = log
        .lines()
        .filter_map(|l| {
            let rest = l.split("creating ").nth(1)?;
            let (n, rest) = rest.split_once(' ')?;
            rest.starts_with("deliveries in one batch")
                .then(|| n.parse().ok())
                .flatten()
        })
        .collect();
    let sent: usize = sizes.iter().sum();
    assert!(
        sent >= 1000
            && sizes.len() < sent
            && sizes.iter().any(|&n| n > 1)
            && sizes.iter().all(|&n| n <= 100),
        "{} calls carried {sent} items: {sizes:?}",
        sizes.len()
    );
    let database = db.unwrap_or_else(|| host.path().join("docket.db").display().to_string());
    let (code, out) = crate::operations::docket_check(&database, false);
    assert_eq!(code, 0, "{out}");
}

/// A workflow whose batch step has items moves to a version that renames the step: the
/// items follow it (`deliver[k]` becomes `send[k]`) with their attempts, receipts and the
/// keys their requests were sent under; a retry after the move sends under the first key,
/// a person settles the failed item under the new name, and the provider's record shows
/// one delivery per accepted item.
async fn a_batch_moves_to_a_new_version_with_its_items(db: Option<String>) {
    let sim = ProviderSim::start(
        SimConfig::new(PROVIDER_TOKEN),
        "127.0.0.1:0".parse().unwrap(),
    )
    .await
    .unwrap();
    let host = HostProcess::start(HostOptions {
        db: db.clone(),
        workflows: vec![("mailing.toml".into(), mailing(2))],
        provider: Some(sim.base_url()),
        ..HostOptions::default()
    })
    .await;
    let people = json!([
        {"email": "ann@example.com"}, {"email": "nobody-at-example.com"},
        {"email": "bob@example.com"}, {"email": "cy@example.com"},
    ]);
    let (status, created) = host
        .submit(
            "mailing",
            "moving-mailing",
            json!({"document": "December", "recipients": people}),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let id = created["workflow_id"].as_str().unwrap().to_string();
    let wf = items_settled(&host, &id).await;
    assert_eq!(
        step(&wf, "deliver")["state"],
        "waiting_for_review",
        "{wf:#}"
    );

    // v2 renames the batch step; the running host reads it from the store.
    let v2 = mailing(2)
        .replace("version = 1\n", "version = 2\n")
        .replace("id = \"deliver\"", "id = \"send\"")
        .replace("Deliver to each recipient", "Send to each recipient");
    let files = tempfile::tempdir().unwrap();
    let v2_file = files.path().join("mailing-v2.toml");
    std::fs::write(&v2_file, v2).unwrap();
    let database = db
        .clone()
        .unwrap_or_else(|| host.path().join("docket.db").display().to_string());
    let config = host.path().join("docket.toml").display().to_string();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_docket"))
        .args(["workflow", "deploy"])
        .arg(&v2_file)
        .args(["--db", &database, "--config", &config])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (status, moved) = host
        .post_with_key(
            &format!("/v1/workflows/{id}/migration"),
            "to-v2",
            json!({"to_version": 2, "steps": {"deliver": "send"}, "reason": "deliver is now send"}),
        )
        .await;
    assert!(status < 300, "{status} {moved}");
    assert_eq!(moved["moved"][0]["items"], 4, "{moved:#}");
    let wf = host.get(&format!("/v1/workflows/{id}")).await.1;
    assert_eq!(wf["definition_version"], 2, "{wf:#}");
    let send = step(&wf, "send");
    assert_eq!(
        (
            send["items"]["total"].as_u64(),
            send["items"]["succeeded"].as_u64()
        ),
        (Some(4), Some(3)),
        "{wf:#}"
    );
    // Each item kept its history under its new name, and the key it was sent under.
    let attempts = |item: &'static str| {
        let (host, id) = (&host, &id);
        async move {
            let path = format!("/v1/workflows/{id}/steps/send/items/{item}/attempts");
            let (status, page) = host.get(&path).await;
            assert_eq!(status, 200, "{page}");
            page["data"].as_array().unwrap().clone()
        }
    };
    let ann = attempts("ann@example.com").await;
    assert_eq!(ann.len(), 1, "{ann:#?}");
    // The API shows a key's first characters: enough to tell `deliver[…]`'s from `send[…]`'s.
    let shown = |key: String| format!("{}…", &key[..8]);
    assert_eq!(
        ann[0]["request_identity"],
        shown(key_of(&id, "ann@example.com"))
    );
    // A retry of the step retries its unresolved items only: the failed one, under a key
    // of its own derived from this one; the delivered ones stay complete.
    let retry_all = format!("/v1/workflows/{id}/steps/send/retry");
    let body = json!({"reason": "once more, after the move"});
    let (status, retried) = host
        .post_with_key(&retry_all, "retry-unresolved", body.clone())
        .await;
    assert_eq!(status, 200, "{retried}");
    assert_eq!(retried["id"], "send", "{retried:#}");
    let first_key = shown(key_of(&id, "nobody-at-example.com"));
    // The retried item is rejected again, and waits for a person as before.
    let failed = format!("/v1/workflows/{id}/steps/send/items?state=failed_terminal");
    let tried = crate::wait::until("the retry to end", Duration::from_secs(30), || async {
        let tried = attempts("nobody-at-example.com").await;
        let (_, page) = host.get(&failed).await;
        let waiting = page["data"]
            .as_array()
            .is_some_and(|d| d.iter().any(|i| i["item_key"] == "nobody-at-example.com"));
        if tried.len() >= 2 && waiting {
            Ok(tried)
        } else {
            Err(format!("{page:#}\n{tried:#?}"))
        }
    })
    .await;
    for a in tried.iter().filter(|a| a["request_identity"].is_string()) {
        assert_eq!(a["request_identity"], first_key.as_str(), "{a:#}");
    }
    // The same request again answers as it did and retries nothing twice.
    let (status, again) = host
        .post_with_key(&retry_all, "retry-unresolved", body)
        .await;
    assert_eq!((status, &again), (200, &retried));
    assert_eq!(attempts("nobody-at-example.com").await.len(), tried.len());
    assert_eq!(attempts("ann@example.com").await.len(), 1);
    let (status, resolved) = host
        .post_with_key(
            &format!("/v1/workflows/{id}/steps/send/items/nobody-at-example.com/resolve"),
            "resolve-nobody",
            json!({
                "outcome": "succeeded",
                "evidence": "delivered by hand",
                "reason": "the address had a typo",
                "external_reference": "manual-1",
                "output": {"id": "manual-1", "client_reference": "-", "status": "delivered",
                           "replayed": false},
            }),
        )
        .await;
    assert_eq!(status, 200, "{resolved}");
    let wf = host
        .wait_for(&id, &["completed"], Duration::from_secs(30))
        .await;
    assert_eq!(step(&wf, "send")["items"]["succeeded"], 4, "{wf:#}");
    // Once every item is complete there is nothing left to retry.
    let (status, refused) = host
        .post_with_key(&retry_all, "retry-again", json!({"reason": "again"}))
        .await;
    assert_eq!(status, 409, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("nothing to retry"),
        "{refused}"
    );
    let world = sim.sim().world();
    assert_eq!(world.len(), 3, "{world:?}");
    for person in ["ann@example.com", "bob@example.com", "cy@example.com"] {
        let key = key_of(&id, person);
        assert_eq!(
            world.iter().filter(|d| d.client_reference == key).count(),
            1,
            "{person}: {world:?}"
        );
    }
    let (code, out) = crate::operations::docket_check(&database, false);
    assert_eq!(code, 0, "{out}");
}

on_both_stores!(
    a_batch_delivers_each_item_once_and_a_person_settles_the_rejected_one,
    a_crash_at_each_checkpoint_of_an_item_recovers_that_item_only,
    a_cancelled_batch_cancels_what_has_not_begun_and_withdraws_each_delivery_once,
    a_thousand_items_go_in_calls_of_a_hundred_and_each_is_delivered_once,
    a_batch_moves_to_a_new_version_with_its_items,
);
