//! Notifications of meaningful transitions, against real `docket serve` processes and a
//! webhook receiver on loopback that counts what it gets and checks every signature with
//! an independent implementation of Standard Webhooks (the `standardwebhooks` crate): one
//! notification per transition however many retries a step takes, the same `webhook-id`
//! on every delivery attempt, a review settled before its turn recorded `suppressed`, and
//! each notification delivered once by three hosts on one PostgreSQL database.

use crate::host_process::{HOOK_SECRET, HostOptions, HostProcess, PROVIDER_TOKEN, document};
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One request the receiver got.
#[derive(Debug, Clone)]
struct Delivery {
    webhook_id: String,
    body: Value,
    /// What the independent verifier said of its signature.
    verified: Result<(), String>,
}

#[derive(Clone)]
struct Receiver {
    url: String,
    got: Arc<Mutex<Vec<Delivery>>>,
    /// Requests still to be answered 500.
    failing: Arc<AtomicU32>,
}

impl Receiver {
    /// A receiver at `http://127.0.0.1:<port>/hook` that answers its first `fail` requests
    /// with 500 and the rest with 204.
    async fn start(fail: u32) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let receiver = Receiver {
            url: format!("http://{}/hook", listener.local_addr().unwrap()),
            got: Arc::default(),
            failing: Arc::new(AtomicU32::new(fail)),
        };
        let app = Router::new()
            .route("/hook", post(receive))
            .with_state(receiver.clone());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        receiver
    }

    fn got(&self) -> Vec<Delivery> {
        self.got.lock().unwrap().clone()
    }

    fn of(&self, workflow_id: &str) -> Vec<Delivery> {
        self.got()
            .into_iter()
            .filter(|d| d.body["workflow_id"] == workflow_id)
            .collect()
    }
}

async fn receive(State(r): State<Receiver>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let verified = standardwebhooks::Webhook::new(HOOK_SECRET)
        .unwrap()
        .verify(&body, &headers)
        .map_err(|e| e.to_string());
    r.got.lock().unwrap().push(Delivery {
        webhook_id: headers
            .get("webhook-id")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string(),
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
        verified,
    });
    let fail = r
        .failing
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok();
    if fail {
        StatusCode::INTERNAL_SERVER_ERROR
    } else {
        StatusCode::NO_CONTENT
    }
}

/// `[[notifications]]` for `url`, signed with `hook_secret`.
fn endpoint(url: &str, events: &[&str], extra: &str) -> String {
    let events = if events.is_empty() {
        String::new()
    } else {
        format!("events = {events:?}\n")
    };
    format!("[[notifications]]\nurl = {url:?}\n{events}secret = \"hook_secret\"\n{extra}")
}

fn secrets() -> String {
    format!("[secrets]\nvalues = {{ hook_secret = {HOOK_SECRET:?} }}\n")
}

/// The workflow's notifications as `GET /v1/notifications` lists them.
async fn listed(host: &HostProcess, id: &str) -> Vec<Value> {
    let (status, page) = host
        .get(&format!("/v1/notifications?workflow_id={id}"))
        .await;
    assert_eq!(status, 200, "{page}");
    page["data"].as_array().unwrap().clone()
}

/// Waits until none of the workflow's notifications is pending; returns them.
async fn settled(host: &HostProcess, id: &str, count: usize) -> Vec<Value> {
    crate::wait::until(
        "the workflow's notifications to settle",
        Duration::from_secs(30),
        || async {
            let rows = listed(host, id).await;
            if rows.len() == count && rows.iter().all(|n| n["state"] != "pending") {
                Ok(rows)
            } else {
                Err(format!("{rows:#?}"))
            }
        },
    )
    .await
}

/// A workflow through a provider outage of several retries: the receiver is told it was
/// recorded and completed, once each, and nothing of the retries; a receiver that fails
/// twice gets the completion three times under one `webhook-id`; every signature verifies.
async fn one_notification_per_meaningful_transition_signed_and_retried_under_one_id(
    db: Option<String>,
) {
    let all = Receiver::start(0).await;
    let flaky = Receiver::start(2).await;
    let host = HostProcess::start(HostOptions {
        db,
        config: format!(
            "{}{}{}",
            secrets(),
            endpoint(&all.url, &[], ""),
            endpoint(&flaky.url, &["workflow.completed"], "")
        ),
        ..HostOptions::default()
    })
    .await;
    host.faults(json!({"unavailable_next": 3})).await;
    let (status, created) = host
        .submit("document-delivery", "told-once", document("Told once"))
        .await;
    assert_eq!(status, 201, "{created}");
    let id = created["workflow_id"].as_str().unwrap().to_string();
    let wf = host
        .wait_for(&id, &["completed"], Duration::from_secs(30))
        .await;
    let deliver = wf["steps"][2].clone();
    assert!(deliver["attempts"].as_u64().unwrap() >= 4, "{wf:#}");
    let rows = settled(&host, &id, 2).await;

    let told = all.of(&id);
    let types: Vec<&str> = told
        .iter()
        .map(|d| d.body["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        types,
        ["workflow.recorded", "workflow.completed"],
        "{told:#?}"
    );
    for d in all.got().iter().chain(flaky.got().iter()) {
        assert_eq!(d.verified, Ok(()), "{d:#?}");
        assert_eq!(d.body["id"], d.webhook_id.as_str(), "{d:#?}");
        assert!(d.webhook_id.starts_with("ntf_"), "{d:#?}");
    }
    let completed = &told[1];
    assert_eq!(completed.body["workflow"]["state"], "completed");
    assert_eq!(completed.body["workflow"]["workflow"], "document-delivery");
    assert!(
        completed.body["revision"].as_u64().unwrap() > told[0].body["revision"].as_u64().unwrap()
    );

    // The failing receiver: the same notification three times, the same id each time.
    let retried = flaky.of(&id);
    assert_eq!(retried.len(), 3, "{retried:#?}");
    assert!(retried.iter().all(|d| d.webhook_id == completed.webhook_id));
    assert!(
        retried.iter().all(|d| d.body == completed.body),
        "the body is fixed"
    );

    let completion = rows
        .iter()
        .find(|n| n["type"] == "workflow.completed")
        .unwrap();
    assert_eq!(completion["state"], "delivered", "{completion:#}");
    assert_eq!(completion["attempts"], 3, "{completion:#}");
    assert_eq!(
        completion["delivered_to"],
        json!([all.url, flaky.url]),
        "{completion:#}"
    );
    // Each round is counted once by the host that settled it.
    let text = reqwest::get(format!("{}/metrics", host.url))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let samples = crate::operations::samples(&text);
    assert_eq!(
        samples.get("docket_notifications_total{result=\"delivered\"}"),
        Some(&2.0),
        "{text}"
    );
    assert_eq!(
        samples.get("docket_notifications_total{result=\"retried\"}"),
        Some(&2.0),
        "{text}"
    );
    let (status, page) = host.get("/v1/notifications?state=bogus").await;
    assert_eq!(status, 400, "{page}");
    assert_eq!(page["error"]["code"], "invalid_parameter");
}

/// A review that is settled while its notification waits (the endpoint's `review_hold`)
/// is recorded `suppressed` and never sent.
async fn a_review_settled_before_its_notification_is_sent_is_suppressed(db: Option<String>) {
    let receiver = Receiver::start(0).await;
    let host = HostProcess::start(HostOptions {
        db,
        config: format!(
            "{}{}",
            secrets(),
            endpoint(
                &receiver.url,
                &["workflow.needs_review", "workflow.completed"],
                "review_hold = \"5s\"\n"
            )
        ),
        workflows: vec![crate::budgets::chain(
            "held-review",
            "max_attempts = 1",
            1,
            false,
        )],
        ..HostOptions::default()
    })
    .await;
    host.faults(json!({"unavailable_next": 1})).await;
    let (status, created) = host
        .submit(
            "held-review",
            "held-1",
            json!({"recipient": "reader@example.com"}),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let id = created["workflow_id"].as_str().unwrap().to_string();
    host.wait_for(&id, &["needs_review"], Duration::from_secs(30))
        .await;
    // Settled at once: the budget is extended and the step runs again.
    let (status, extended) = host
        .post_with_key(
            &format!("/v1/workflows/{id}/budget"),
            "extend-1",
            json!({"add": {"attempts": 1}, "reason": "one more try"}),
        )
        .await;
    assert_eq!(status, 200, "{extended}");
    host.wait_for(&id, &["completed"], Duration::from_secs(30))
        .await;
    let rows = settled(&host, &id, 3).await;
    let review = rows
        .iter()
        .find(|n| n["type"] == "workflow.needs_review")
        .unwrap();
    assert_eq!(review["state"], "suppressed", "{rows:#?}");
    assert_eq!(review["attempts"], 0, "{review:#}");
    assert!(
        review["last_error"]
            .as_str()
            .unwrap()
            .contains("no longer holds"),
        "{review:#}"
    );
    let types: Vec<String> = receiver
        .of(&id)
        .iter()
        .map(|d| d.body["type"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        types,
        ["workflow.completed"],
        "no alarm for a settled review"
    );
}

/// An endpoint that never answers 2xx: the notification is retried under its id until
/// 24 hours have passed, then recorded `failed`; finished notifications are pruned once
/// their retention has passed.
async fn a_notification_fails_after_a_day_and_finished_ones_are_pruned(db: Option<String>) {
    let receiver = Receiver::start(u32::MAX).await;
    let host = HostProcess::start(HostOptions {
        db,
        config: format!(
            "{}{}",
            secrets(),
            endpoint(&receiver.url, &["workflow.completed"], "")
        ),
        ..HostOptions::default()
    })
    .await;
    let (status, created) = host
        .submit("document-delivery", "unheard", document("Unheard"))
        .await;
    assert_eq!(status, 201, "{created}");
    let id = created["workflow_id"].as_str().unwrap().to_string();
    host.wait_for(&id, &["completed"], Duration::from_secs(30))
        .await;
    crate::wait::until("a failed delivery", Duration::from_secs(30), || async {
        if receiver.of(&id).is_empty() {
            Err("no request yet".to_string())
        } else {
            Ok(())
        }
    })
    .await;
    // A day later the next failure is the last.
    host.advance_clock(25 * 3600 * 1000).await;
    let rows = settled(&host, &id, 2).await;
    let completion = rows
        .iter()
        .find(|n| n["type"] == "workflow.completed")
        .unwrap();
    assert_eq!(completion["state"], "failed", "{rows:#?}");
    assert!(
        completion["last_error"]
            .as_str()
            .unwrap()
            .contains("answered 500"),
        "{completion:#}"
    );
    let ids: Vec<String> = receiver.of(&id).into_iter().map(|d| d.webhook_id).collect();
    assert!(
        ids.len() >= 2 && ids.iter().all(|i| *i == ids[0]),
        "{ids:?}"
    );
    // No endpoint asked for `workflow.recorded`: it was closed at once, sent to no one.
    let recorded = rows
        .iter()
        .find(|n| n["type"] == "workflow.recorded")
        .unwrap();
    assert_eq!(recorded["state"], "delivered", "{recorded:#}");
    assert_eq!(recorded["delivered_to"], json!([]));

    // Past the retention (7 days) both are pruned.
    host.advance_clock(8 * 24 * 3600 * 1000).await;
    crate::wait::until(
        "finished notifications to be pruned",
        Duration::from_secs(30),
        || async {
            let rows = listed(&host, &id).await;
            if rows.is_empty() {
                Ok(())
            } else {
                Err(format!("{rows:#?}"))
            }
        },
    )
    .await;
}

/// An approval is told when it is asked (with its digest and expiry), once when a fifth of
/// its wait is left, and when it is decided; `/metrics` counts what waits and what was
/// decided.
async fn an_approval_is_told_when_asked_when_it_draws_near_and_when_decided(db: Option<String>) {
    let all = Receiver::start(0).await;
    let shipped = std::fs::read_to_string(
        crate::host_process::repo_root().join("workflows/approved-delivery.toml"),
    )
    .unwrap()
    .replace("expires = \"24h\"", "expires = \"10m\"");
    let host = HostProcess::start(HostOptions {
        db,
        config: format!("{}{}", secrets(), endpoint(&all.url, &[], "")),
        workflows: vec![("approved-delivery.toml".into(), shipped)],
        ..HostOptions::default()
    })
    .await;
    let (status, created) = host
        .submit("approved-delivery", "told-approval", document("Approve"))
        .await;
    assert_eq!(status, 201, "{created}");
    let id = created["workflow_id"].as_str().unwrap().to_string();
    let path = format!("/v1/workflows/{id}/steps/approve/consequence");
    let consequence = crate::wait::until("the approval asked", Duration::from_secs(30), || async {
        let (status, c) = host.get(&path).await;
        if status == 200 {
            Ok(c)
        } else {
            Err(format!("{status} {c}"))
        }
    })
    .await;
    let digest = consequence["digest"].as_str().unwrap().to_string();
    let metrics = crate::wait::until("the approval counted", Duration::from_secs(10), || async {
        let text = reqwest::get(format!("{}/metrics", host.url))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        if text.contains("docket_approvals_pending 1") {
            Ok(text)
        } else {
            Err(text)
        }
    })
    .await;
    assert!(
        metrics.contains("docket_approvals_total{outcome=\"approved\"} 0"),
        "{metrics}"
    );
    // 9 of the 10 minutes pass: a fifth or less is left, told once however often looked at.
    host.advance_clock(9 * 60 * 1000).await;
    crate::wait::until("the warning", Duration::from_secs(30), || async {
        let types: Vec<String> = all
            .of(&id)
            .iter()
            .map(|d| d.body["type"].as_str().unwrap_or("").to_string())
            .collect();
        if types.iter().any(|t| t == "workflow.approval_expiring") {
            Ok(())
        } else {
            Err(format!("{types:?}"))
        }
    })
    .await;
    host.wait_ticks("registry", 2).await;
    let (status, _) = host
        .post_with_key(
            &format!("/v1/workflows/{id}/steps/approve/approve"),
            "told-approve",
            json!({"digest": digest}),
        )
        .await;
    assert_eq!(status, 200);
    host.wait_for(&id, &["completed"], Duration::from_secs(30))
        .await;
    settled(&host, &id, 5).await;
    // In the order they were queued (the last two leave together).
    let mut told = all.of(&id);
    told.sort_by_key(|d| d.body["revision"].as_u64());
    let types: Vec<&str> = told
        .iter()
        .map(|d| d.body["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        types,
        [
            "workflow.recorded",
            "workflow.approval_required",
            "workflow.approval_expiring",
            "workflow.approval_decided",
            "workflow.completed"
        ],
        "{told:#?}"
    );
    let required = &told[1].body["approval"];
    assert_eq!(required["step"], "approve", "{required}");
    assert_eq!(required["digest"], digest.as_str());
    assert_eq!(required["expires_at"], consequence["expires_at"]);
    assert_eq!(told[2].body["approval"]["digest"], digest.as_str());
    let decided = &told[3].body["approval"];
    assert_eq!(decided["outcome"], "approved", "{decided}");
    assert_eq!(decided["by"], "local");
    // Signed as always; those sent after the host's clock moved ahead carry a timestamp the
    // verifier finds in its future.
    assert!(
        told.iter().all(|d| match &d.verified {
            Ok(()) => true,
            Err(e) => e.contains("timestamp too far in future"),
        }),
        "{told:#?}"
    );
    let text = reqwest::get(format!("{}/metrics", host.url))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(text.contains("docket_approvals_pending 0"), "{text}");
    assert!(
        text.contains("docket_approvals_total{outcome=\"approved\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("docket_approval_wait_seconds_count 1"),
        "{text}"
    );
    // Nine minutes passed on the host's clock before the approval.
    assert!(
        text.contains("docket_approval_wait_seconds_bucket{le=\"300.0\"} 0"),
        "{text}"
    );
}

/// An approval that waits until the workflow's deadline, beside a step waiting for review:
/// the workflow's deadline warning is the one warning sent; the approval's is told on the
/// timeline only.
async fn an_approval_expiring_with_the_deadline_is_warned_of_once(db: Option<String>) {
    let all = Receiver::start(0).await;
    let input = r#"[steps.input]
recipient = "$input.recipient"
document = "$input.body"
document_digest = "$input.title"

[steps.capabilities]
outbound_hosts = ["$base_url"]
secrets = ["provider_token"]
"#;
    let definition = format!(
        r#"name = "approval-beside-review"
version = 1
deadline = "1h"

[input_schema]
type = "object"

[[steps]]
id = "notice"
label = "Send notice"
kind = "adapter"
component = "http-delivery-fire-and-forget"
version = "^1"
{input}
[[steps]]
id = "approve"
label = "Approve delivery"
kind = "approval"
approves = ["deliver"]

[[steps]]
id = "deliver"
label = "Deliver document"
kind = "adapter"
component = "http-delivery"
version = "^1"
after = ["approve"]
{input}"#
    );
    let host = HostProcess::start(HostOptions {
        db,
        config: format!("{}{}", secrets(), endpoint(&all.url, &[], "")),
        workflows: vec![("approval-beside-review.toml".into(), definition)],
        ..HostOptions::default()
    })
    .await;
    host.faults(json!({"lose_next": 1})).await;
    let (status, created) = host
        .submit(
            "approval-beside-review",
            "beside-review",
            document("Beside"),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let id = created["workflow_id"].as_str().unwrap().to_string();
    host.wait_for(&id, &["needs_review"], Duration::from_secs(30))
        .await;
    // The approval is asked beside the review, in its own time.
    let wf = crate::wait::until(
        "the approval to be asked",
        Duration::from_secs(30),
        || async {
            let (_, wf) = host.get(&format!("/v1/workflows/{id}")).await;
            let asked = wf["steps"]
                .as_array()
                .and_then(|s| s.iter().find(|s| s["id"] == "approve"))
                .is_some_and(|s| s["state"] == "awaiting_approval");
            if asked {
                Ok(wf)
            } else {
                Err(format!("{wf:#}"))
            }
        },
    )
    .await;
    let approval = wf["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == "approve")
        .unwrap();
    assert_eq!(approval["state"], "awaiting_approval", "{wf:#}");
    assert_eq!(
        approval["approval"]["expires_at"], wf["deadline"]["at"],
        "{wf:#}"
    );
    // 50 of the 60 minutes pass: both the workflow's and the approval's fifth are reached.
    host.advance_clock(50 * 60 * 1000).await;
    crate::wait::until("the deadline warning", Duration::from_secs(30), || async {
        let timeline = host.timeline_text(&id).await;
        if timeline.contains("expires with the workflow's deadline") {
            Ok(())
        } else {
            Err(timeline)
        }
    })
    .await;
    host.wait_ticks("registry", 2).await;
    host.wait_ticks("notifier", 2).await;
    let types: Vec<String> = all
        .of(&id)
        .iter()
        .map(|d| d.body["type"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(
        types
            .iter()
            .filter(|t| *t == "workflow.deadline_approaching")
            .count(),
        1,
        "{types:?}"
    );
    assert!(
        !types.iter().any(|t| t == "workflow.approval_expiring"),
        "{types:?}"
    );
}

on_both_stores!(
    an_approval_expiring_with_the_deadline_is_warned_of_once,
    an_approval_is_told_when_asked_when_it_draws_near_and_when_decided,
    one_notification_per_meaningful_transition_signed_and_retried_under_one_id,
    a_review_settled_before_its_notification_is_sent_is_suppressed,
    a_notification_fails_after_a_day_and_finished_ones_are_pruned,
);

/// Three hosts on one PostgreSQL database, each with the same endpoint: every notification
/// is delivered once.
#[tokio::test(flavor = "multi_thread")]
async fn three_postgres_hosts_deliver_each_notification_once() {
    let database = crate::postgres::TestDatabase::create().await;
    let sim = docket::sim::ProviderSim::start(
        docket::sim::SimConfig::new(PROVIDER_TOKEN),
        "127.0.0.1:0".parse().unwrap(),
    )
    .await
    .unwrap();
    let receiver = Receiver::start(0).await;
    let mut hosts = Vec::new();
    for name in ["a", "b", "c"] {
        hosts.push(
            HostProcess::start(HostOptions {
                db: Some(database.url.clone()),
                provider: Some(sim.base_url()),
                config: format!("host_id = {name:?}\n{}", endpoint(&receiver.url, &[], "")),
                ..HostOptions::default()
            })
            .await,
        );
    }
    let mut ids = Vec::new();
    for i in 0..9 {
        let (status, created) = hosts[i % 3]
            .submit(
                "document-delivery",
                &format!("spread-{i}"),
                document(&format!("Spread {i}")),
            )
            .await;
        assert_eq!(status, 201, "{created}");
        ids.push(created["workflow_id"].as_str().unwrap().to_string());
    }
    for id in &ids {
        hosts[0]
            .wait_for(id, &["completed"], Duration::from_secs(60))
            .await;
        settled(&hosts[0], id, 2).await;
    }
    let mut per_id: BTreeMap<String, usize> = BTreeMap::new();
    for d in receiver.got() {
        assert_eq!(d.verified, Ok(()), "{d:#?}");
        *per_id.entry(d.webhook_id).or_default() += 1;
    }
    assert_eq!(per_id.len(), 18, "{per_id:#?}");
    assert!(per_id.values().all(|n| *n == 1), "{per_id:#?}");
    drop(hosts);
    database.drop_now().await;
}

/// A receiver at `https://localhost:<port>/hook` with `cert` (answers 204), and the PEM file
/// of its certificate for `outbound_ca_file`.
async fn https_receiver(dir: &std::path::Path) -> (Receiver, std::path::PathBuf) {
    use tokio_rustls::rustls;
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    let pem = dir.join("receiver-ca.pem");
    std::fs::write(&pem, cert.cert.pem()).unwrap();
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(cert.key_pair.serialize_der().into());
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(vec![cert.cert.der().clone()], key)
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let receiver = Receiver {
        url: format!(
            "https://localhost:{}/hook",
            listener.local_addr().unwrap().port()
        ),
        got: Arc::default(),
        failing: Arc::new(AtomicU32::new(0)),
    };
    let app = Router::new()
        .route("/hook", post(receive))
        .with_state(receiver.clone());
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let (acceptor, app) = (acceptor.clone(), app.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let service = hyper_util::service::TowerToHyperService::new(app);
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    (receiver, pem)
}

/// Webhooks over HTTPS: a receiver whose certificate the host trusts through
/// `outbound_ca_file` gets every notification, signed; a receiver that redirects is never
/// followed — the target of its redirect gets nothing.
#[tokio::test(flavor = "multi_thread")]
async fn webhooks_go_over_https_and_never_follow_a_redirect() {
    let dir = tempfile::tempdir().unwrap();
    let (secure, ca) = https_receiver(dir.path()).await;
    let target = Receiver::start(0).await;
    let redirecting = {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        let to = target.url.clone();
        let app = Router::new().route(
            "/hook",
            post(move || {
                let to = to.clone();
                async move {
                    (
                        StatusCode::TEMPORARY_REDIRECT,
                        [(axum::http::header::LOCATION, to)],
                    )
                }
            }),
        );
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        url
    };
    let host = HostProcess::start(HostOptions {
        config: format!(
            "outbound_ca_file = {:?}\n{}{}{}",
            ca.display().to_string(),
            secrets(),
            endpoint(&secure.url, &[], ""),
            endpoint(&redirecting, &["workflow.completed"], "")
        ),
        ..HostOptions::default()
    })
    .await;
    let (status, created) = host
        .submit("document-delivery", "over-https", document("Over HTTPS"))
        .await;
    assert_eq!(status, 201, "{created}");
    let id = created["workflow_id"].as_str().unwrap().to_string();
    host.wait_for(&id, &["completed"], Duration::from_secs(30))
        .await;
    crate::wait::until(
        "both notifications over HTTPS",
        Duration::from_secs(30),
        || async {
            let got = secure.of(&id);
            if got.len() == 2 {
                Ok(got)
            } else {
                Err(format!("{got:#?}"))
            }
        },
    )
    .await;
    for d in secure.of(&id) {
        assert_eq!(d.verified, Ok(()), "{d:#?}");
    }
    // The redirect was answered with a retry schedule, never followed: once the host has
    // recorded the redirect as the completion's error, a request it followed would already
    // have reached the target (the error is recorded after every endpoint's answer).
    crate::wait::until(
        "the redirect recorded as the completion's error",
        Duration::from_secs(30),
        || async {
            let rows = listed(&host, &id).await;
            let redirected = rows.iter().any(|n| {
                n["type"] == "workflow.completed"
                    && n["last_error"]
                        .as_str()
                        .is_some_and(|e| e.contains(&format!("{redirecting}: answered 307")))
            });
            if redirected {
                Ok(())
            } else {
                Err(format!("{rows:#?}"))
            }
        },
    )
    .await;
    assert!(target.got().is_empty(), "{:#?}", target.got());
}
