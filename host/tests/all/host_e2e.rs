//! End to end against a real `docket serve` process, its embedded provider simulator and
//! a real database: admission, execution, retries, leases, definition versions, secrets.
//! Each case runs on a SQLite file (`sqlite::<case>`) and on a PostgreSQL database of its
//! own (`postgres::<case>`).

use crate::host_process::{HostOptions, HostProcess, document};
use serde_json::{Value, json};
use std::time::Duration;

/// A one-step workflow that hands its input straight to an adapter (no validation), so
/// tests can make the provider itself refuse or stall.
fn raw_delivery(version: u32, adapter: &str, label: &str) -> String {
    format!(
        r#"
name = "raw-delivery"
version = {version}
description = "Deliver the input as it is"
deadline = "1h"

[input_schema]
type = "object"

[[steps]]
id = "deliver"
label = "{label}"
kind = "adapter"
component = "{adapter}"
version = "^1"
milestone = "Delivery verified"
timeout = "20s"

[steps.input]
recipient = "$input.recipient"
document = "$input.document"
document_digest = "$input.document_digest"

[steps.retry]
max_attempts = 5
initial_backoff = "100ms"

[steps.capabilities]
outbound_hosts = ["$base_url"]
secrets = ["provider_token"]
"#
    )
}

fn raw_input(recipient: &str) -> Value {
    json!({"recipient": recipient, "document": "Hi", "document_digest": "sha256:00"})
}

async fn attempts(host: &HostProcess, id: &str, step: &str) -> Vec<Value> {
    let (status, page) = host
        .get(&format!("/v1/workflows/{id}/steps/{step}/attempts"))
        .await;
    assert_eq!(status, 200, "{page}");
    page["data"].as_array().unwrap().clone()
}

async fn timeline_text(host: &HostProcess, id: &str) -> String {
    let (_, page) = host
        .get(&format!("/v1/workflows/{id}/timeline?limit=500"))
        .await;
    page["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            format!(
                "{} {} {}\n",
                e["kind"].as_str().unwrap(),
                e["step"].as_str().unwrap_or("-"),
                e["text"].as_str().unwrap()
            )
        })
        .collect()
}

async fn document_delivery_completes_with_exactly_one_delivery(db: Option<String>) {
    let host = HostProcess::start(HostOptions {
        db: db.clone(),
        ..HostOptions::default()
    })
    .await;
    let (status, created) = host
        .submit("document-delivery", "order-1", document("Quarterly report"))
        .await;
    assert_eq!(status, 201, "{created}");
    let id = created["workflow_id"].as_str().unwrap();
    let wf = host
        .wait_for(id, &["completed"], Duration::from_secs(30))
        .await;

    let milestones: Vec<&str> = wf["milestones"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        milestones,
        [
            "Request recorded",
            "Input validated",
            "Document prepared",
            "Delivery verified",
            "Completion recorded"
        ]
    );
    assert!(
        wf["milestones"]
            .as_array()
            .unwrap()
            .iter()
            .all(|m| m["reached_at"].is_string()),
        "{wf:#}"
    );
    for step in wf["steps"].as_array().unwrap() {
        let r = &step["receipt"];
        assert!(
            r["input_digest"].as_str().unwrap().starts_with("sha256:"),
            "{step:#}"
        );
        assert!(
            r["component_digest"]
                .as_str()
                .unwrap()
                .starts_with("sha256:"),
            "{step:#}"
        );
        assert_eq!(r["component_version"], "1.0.0", "{step:#}");
    }
    let deliver = &wf["steps"][2];
    assert_eq!(deliver["receipt"]["component"], "http-delivery");
    assert_eq!(deliver["receipt"]["evidence_kind"], "response");
    let world = host.world().await;
    assert_eq!(world.len(), 1, "{world:#?}");
    assert_eq!(deliver["receipt"]["external_reference"], world[0]["id"]);

    // A replay of the same intent changes nothing.
    let (status, replay) = host
        .submit("document-delivery", "order-1", document("Quarterly report"))
        .await;
    assert_eq!(status, 200);
    assert_eq!(replay["replayed"], true);
    assert_eq!(replay["state"], "completed");
    assert_eq!(host.world().await.len(), 1);

    // The external request identity is shown shortened, never as the reusable key.
    let a = attempts(&host, id, "deliver").await;
    let shown = a[0]["request_identity"].as_str().unwrap();
    assert!(shown.len() < 20 && shown.ends_with('…'), "{shown}");
}

async fn rate_limits_and_unavailability_are_retried_with_backoff_and_422_is_not(
    db: Option<String>,
) {
    let host = HostProcess::start(HostOptions {
        workflows: vec![(
            "raw.toml".into(),
            raw_delivery(1, "http-delivery", "Deliver document"),
        )],
        db: db.clone(),
        ..HostOptions::default()
    })
    .await;
    // The provider answers 503 first, then 429 with Retry-After: 1, then accepts.
    host.faults(json!({"unavailable_next": 1, "rate_limit_next": 1, "retry_after_s": 1}))
        .await;
    let (status, created) = host
        .submit("raw-delivery", "retry-1", raw_input("a@example.com"))
        .await;
    assert_eq!(status, 201, "{created}");
    let id = created["workflow_id"].as_str().unwrap();
    host.wait_for(id, &["completed"], Duration::from_secs(30))
        .await;
    let a = attempts(&host, id, "deliver").await;
    let outcomes: Vec<&str> = a.iter().map(|x| x["outcome"].as_str().unwrap()).collect();
    assert_eq!(outcomes, ["rejected", "rejected", "accepted"], "{a:#?}");
    assert!(
        a[0]["observation"]
            .as_str()
            .unwrap()
            .contains("unavailable"),
        "{a:#?}"
    );
    assert!(
        a[1]["observation"]
            .as_str()
            .unwrap()
            .contains("rate limited"),
        "{a:#?}"
    );
    assert_eq!(a[2]["trigger"], "retry");
    // Retry-After was honoured: the third attempt started at least 1 s after the provider's
    // answer, which came after the second attempt started. (Its recorded end may come later
    // still: on a loaded machine the record waits for the writer, not the retry's clock.)
    let second = humantime::parse_rfc3339(a[1]["started_at"].as_str().unwrap()).unwrap();
    let started = humantime::parse_rfc3339(a[2]["started_at"].as_str().unwrap()).unwrap();
    assert!(
        started.duration_since(second).unwrap() >= Duration::from_millis(1000),
        "{a:#?}"
    );
    let text = timeline_text(&host, id).await;
    assert_eq!(text.matches("Retry scheduled").count(), 2, "{text}");
    assert_eq!(host.world().await.len(), 1);

    // A permanent refusal (422) ends the step without a retry.
    let (_, created) = host
        .submit("raw-delivery", "reject-1", raw_input("no-at-sign"))
        .await;
    let id = created["workflow_id"].as_str().unwrap();
    let wf = host
        .wait_for(id, &["failed"], Duration::from_secs(30))
        .await;
    assert_eq!(wf["steps"][0]["state"], "failed_terminal", "{wf:#}");
    assert!(wf["ended_at"].is_string());
    let a = attempts(&host, id, "deliver").await;
    assert_eq!(a.len(), 1, "{a:#?}");
    assert_eq!(a[0]["outcome"], "rejected");
    assert!(timeline_text(&host, id).await.contains("invalid_recipient"));

    // A Retry-After past the workflow's deadline (ten years against one hour) ends the
    // step: no retry could start in time.
    host.faults(json!({"rate_limit_next": 1, "retry_after_s": 315_360_000u64}))
        .await;
    let (_, created) = host
        .submit("raw-delivery", "late-1", raw_input("b@example.com"))
        .await;
    let id = created["workflow_id"].as_str().unwrap();
    let wf = host
        .wait_for(id, &["failed"], Duration::from_secs(30))
        .await;
    assert_eq!(wf["steps"][0]["state"], "failed_terminal", "{wf:#}");
    assert_eq!(attempts(&host, id, "deliver").await.len(), 1);
    let text = timeline_text(&host, id).await;
    assert!(
        text.contains("could not start before the workflow's deadline"),
        "{text}"
    );
}

async fn a_call_longer_than_the_lease_keeps_it_by_renewal_and_runs_once(db: Option<String>) {
    let host = HostProcess::start(HostOptions {
        config: "[limits]\nlease = \"1s\"\n".into(),
        workflows: vec![(
            "raw.toml".into(),
            raw_delivery(1, "http-delivery", "Deliver document"),
        )],
        db: db.clone(),
        ..HostOptions::default()
    })
    .await;
    // The provider takes 3 s to answer: three lease durations.
    host.faults(json!({"slow_next": 1, "slow_ms": 3000})).await;
    let (_, created) = host
        .submit("raw-delivery", "slow-1", raw_input("a@example.com"))
        .await;
    let id = created["workflow_id"].as_str().unwrap();
    host.wait_for(id, &["completed"], Duration::from_secs(30))
        .await;
    let a = attempts(&host, id, "deliver").await;
    assert_eq!(a.len(), 1, "the step ran more than once: {a:#?}");
    assert_eq!(a[0]["outcome"], "accepted");
    assert_eq!(host.world().await.len(), 1);
    assert!(!timeline_text(&host, id).await.contains("expired"));
}

async fn definition_versions_never_change_under_running_workflows(db: Option<String>) {
    let host = HostProcess::start(HostOptions {
        workflows: vec![(
            "raw.toml".into(),
            raw_delivery(1, "http-delivery", "Deliver document"),
        )],
        db: db.clone(),
        ..HostOptions::default()
    })
    .await;
    // v1 running (the provider stalls it for a while).
    host.faults(json!({"slow_next": 1, "slow_ms": 2000})).await;
    let (_, first) = host
        .submit("raw-delivery", "v1-run", raw_input("a@example.com"))
        .await;
    assert_eq!(first["definition_version"], 1);

    // Deploy v2 into the same database while it runs.
    let v2 = host.path().join("raw-v2.toml");
    std::fs::write(&v2, raw_delivery(2, "http-delivery", "Send document")).unwrap();
    let db_arg = db
        .clone()
        .unwrap_or_else(|| host.path().join("docket.db").display().to_string());
    let deploy = |file: &std::path::Path| {
        std::process::Command::new(env!("CARGO_BIN_EXE_docket"))
            .args([
                "workflow",
                "deploy",
                file.to_str().unwrap(),
                "--db",
                &db_arg,
            ])
            .output()
            .unwrap()
    };
    let out = deploy(&v2);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // A changed file under the deployed version 1 is refused, with the fix.
    let changed = host.path().join("raw-v1-changed.toml");
    std::fs::write(&changed, raw_delivery(1, "http-delivery", "Renamed label")).unwrap();
    let out = deploy(&changed);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("already deployed") && err.contains("new `version`"),
        "{err}"
    );

    // New intents get v2; the running one finishes on v1.
    let (_, second) = host
        .submit("raw-delivery", "v2-run", raw_input("b@example.com"))
        .await;
    assert_eq!(second["definition_version"], 2, "{second}");
    let wf1 = host
        .wait_for(
            first["workflow_id"].as_str().unwrap(),
            &["completed"],
            Duration::from_secs(30),
        )
        .await;
    assert_eq!(wf1["definition_version"], 1);
    assert_eq!(wf1["steps"][0]["label"], "Deliver document");
    let wf2 = host
        .wait_for(
            second["workflow_id"].as_str().unwrap(),
            &["completed"],
            Duration::from_secs(30),
        )
        .await;
    assert_eq!(wf2["steps"][0]["label"], "Send document");

    // Restarting with the changed file under v1 is refused too, naming the file.
    let dir = host.kill();
    std::fs::write(
        dir.path().join("workflows/raw.toml"),
        raw_delivery(1, "http-delivery", "Renamed label"),
    )
    .unwrap();
    let port = crate::host_process::free_port();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_docket"))
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .args(["--db", &db_arg])
        .args(["--config", dir.path().join("docket.toml").to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("raw.toml") && err.contains("already deployed"),
        "{err}"
    );
}

async fn the_admission_contract_holds_against_the_real_process(db: Option<String>) {
    let host = HostProcess::start(HostOptions {
        db: db.clone(),
        ..HostOptions::default()
    })
    .await;
    let input = json!({"title": "T", "recipient": "r@example.com", "body": "b"});
    let reordered: Value =
        serde_json::from_str(r#"{"body": "b", "recipient": "r@example.com", "title": "T"}"#)
            .unwrap();
    let (s1, a) = host
        .submit("document-delivery", "adm-1", input.clone())
        .await;
    let (s2, b) = host.submit("document-delivery", "adm-1", reordered).await;
    assert_eq!((s1, s2), (201, 200));
    assert_eq!(a["workflow_id"], b["workflow_id"]);
    assert_eq!(b["replayed"], true);
    let (s3, c) = host
        .submit(
            "document-delivery",
            "adm-1",
            json!({"title": "Other", "recipient": "r@example.com", "body": "b"}),
        )
        .await;
    assert_eq!(s3, 409);
    assert_eq!(c["error"]["code"], "key_conflict");
    let id = a["workflow_id"].as_str().unwrap();
    host.wait_for(id, &["completed"], Duration::from_secs(30))
        .await;

    // Concurrent submissions of one new key: exactly one 201.
    let mut tasks = Vec::new();
    for _ in 0..50 {
        let url = host.url.clone();
        tasks.push(tokio::spawn(async move {
            reqwest::Client::new()
                .post(format!("{url}/v1/intents"))
                .header("Idempotency-Key", "burst-1")
                .json(&json!({"workflow": "document-delivery", "input": document("burst")}))
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }));
    }
    let mut codes = Vec::new();
    for t in tasks {
        codes.push(t.await.unwrap());
    }
    assert_eq!(codes.iter().filter(|c| **c == 201).count(), 1, "{codes:?}");
    assert_eq!(codes.iter().filter(|c| **c == 200).count(), 49, "{codes:?}");

    // Key retention with the host's test clock: 24 h after the workflow ended, the key is free.
    let (status, _) = host
        .post("/v1/_test/clock", json!({"advance_ms": 23 * 3600 * 1000}))
        .await;
    assert_eq!(status, 200);
    let (s, again) = host
        .submit("document-delivery", "adm-1", input.clone())
        .await;
    assert_eq!((s, again["workflow_id"].as_str()), (200, Some(id)));
    host.post("/v1/_test/clock", json!({"advance_ms": 2 * 3600 * 1000}))
        .await;
    let (s, fresh) = host.submit("document-delivery", "adm-1", input).await;
    assert_eq!(s, 201, "{fresh}");
    assert_ne!(fresh["workflow_id"].as_str(), Some(id));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_secret_occurs_nowhere_in_the_database_or_the_logs() {
    const SECRET: &str = "prov-SECRET-7f3a9c21";
    let sim = docket::sim::ProviderSim::start(
        docket::sim::SimConfig::new(SECRET),
        "127.0.0.1:0".parse().unwrap(),
    )
    .await
    .unwrap();
    let base = sim.base_url();
    let host = HostProcess::start(HostOptions {
        config: format!(
            "[secrets]\nenv_prefix = \"DOCKET_TEST_SECRET_\"\n[adapters.http-delivery]\nallow_hosts = [\"{base}\"]\nallow_secrets = [\"provider_token\"]\nsettings = {{ base_url = \"{base}\" }}\n"
        ),
        env: vec![("DOCKET_TEST_SECRET_PROVIDER_TOKEN".into(), SECRET.into())],
        ..HostOptions::default()
    })
    .await;
    let (_, created) = host
        .submit("document-delivery", "secret-1", document("Secret test"))
        .await;
    let id = created["workflow_id"].as_str().unwrap();
    host.wait_for(id, &["completed"], Duration::from_secs(30))
        .await;
    // The secret was used: the provider accepted the bearer token.
    assert_eq!(sim.sim().world().len(), 1);
    let log = host.log_text();
    let dir = host.kill();
    let dir = dir.path();
    assert!(!log.contains(SECRET), "the secret is in the host log");
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with("docket.db")
        {
            let bytes = std::fs::read(&path).unwrap();
            let found = bytes.windows(SECRET.len()).any(|w| w == SECRET.as_bytes());
            assert!(!found, "the secret is in {}", path.display());
        }
    }
}

on_both_stores!(
    document_delivery_completes_with_exactly_one_delivery,
    rate_limits_and_unavailability_are_retried_with_backoff_and_422_is_not,
    a_call_longer_than_the_lease_keeps_it_by_renewal_and_runs_once,
    definition_versions_never_change_under_running_workflows,
    the_admission_contract_holds_against_the_real_process,
);
