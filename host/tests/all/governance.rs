//! Governance at the side-effect boundary against a real `docket serve` and its provider
//! simulator: policy versions deployed over HTTP or from the command line, judged at
//! checkpoint 2 of every attempt that may cause an effect. Each case runs on a SQLite file
//! (`sqlite::<case>`) and on a PostgreSQL database of its own (`postgres::<case>`).

use crate::host_process::{HostOptions, HostProcess, document};
use crate::postgres::TestDatabase;
use serde_json::{Value, json};
use std::time::Duration;

const ALLOW_ALL: &str = "[[rules]]\neffect = \"allow\"\n";

const PAUSE_DELIVERIES: &str = r#"
[[rules]]
steps = ["deliver"]
adapters = ["namespace:reference-provider"]
actions = ["invoke"]
environments = ["development"]
effect = "deny"
reason = "deliveries are paused for the audit"

[[rules]]
effect = "allow"
"#;

async fn deploy(host: &HostProcess, key: &str, document: &str) -> (u16, Value) {
    let r = reqwest::Client::new()
        .post(format!("{}/v1/policies", host.url))
        .header("Idempotency-Key", key)
        .json(&json!({"document": document}))
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
}

/// Waits (at most 5 s) until `host` enforces policy `version`.
async fn wait_in_force(host: &HostProcess, version: u64) {
    crate::wait::until(
        &format!("the host to enforce policy version {version}"),
        Duration::from_secs(5),
        || async {
            let (_, listed) = host.get("/v1/policies").await;
            if listed["in_force_here"] == version {
                Ok(())
            } else {
                Err(format!("{listed}"))
            }
        },
    )
    .await;
}

fn step<'a>(wf: &'a Value, id: &str) -> &'a Value {
    wf["steps"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["id"] == id))
        .unwrap_or_else(|| panic!("no step {id}: {wf:#}"))
}

/// A policy change between admission and the delivery: the step is blocked with both
/// versions shown and nothing reaches the provider; a newer, allowing version releases it.
async fn a_policy_change_blocks_the_delivery_until_a_newer_version_allows_it(db: Option<String>) {
    let host = HostProcess::start(HostOptions {
        db: db.clone(),
        pause_execution: true,
        ..HostOptions::default()
    })
    .await;
    // A bad document is refused where it is wrong, and changes nothing.
    let (status, refused) = deploy(&host, "p-0", "[[rules]]\neffect = \"perhaps\"\n").await;
    assert_eq!(status, 422, "{refused}");
    assert_eq!(refused["error"]["code"], "invalid_document");
    assert_eq!(refused["error"]["details"][0]["line"], 2);
    assert_eq!(refused["error"]["details"][0]["column"], 10);
    let (status, v1) = deploy(&host, "p-1", ALLOW_ALL).await;
    assert_eq!(status, 201, "{v1}");
    assert_eq!(v1["version"], 1);
    let (status, created) = host
        .submit("document-delivery", "policy-change", document("Audited"))
        .await;
    assert_eq!(status, 201, "{created}");
    let id = created["workflow_id"].as_str().unwrap().to_string();
    let (_, created) = host
        .submit(
            "document-delivery",
            "policy-exception",
            document("Approved"),
        )
        .await;
    let excepted = created["workflow_id"].as_str().unwrap().to_string();
    let (status, v2) = deploy(&host, "p-2", PAUSE_DELIVERIES).await;
    assert_eq!(status, 201, "{v2}");
    assert_eq!(v2["version"], 2);
    // The same key and document answer as before.
    let (status, again) = deploy(&host, "p-2", PAUSE_DELIVERIES).await;
    assert_eq!((status, &again), (201, &v2));

    // The work runs now, under version 2.
    let dir = host.kill();
    let host = HostProcess::start(HostOptions {
        db,
        dir: Some(dir),
        ..HostOptions::default()
    })
    .await;
    let wf = host
        .wait_for(&id, &["needs_review", "completed"], Duration::from_secs(30))
        .await;
    assert_eq!(wf["state"], "needs_review", "{wf:#}");
    let deliver = step(&wf, "deliver");
    assert_eq!(deliver["state"], "blocked", "{wf:#}");
    assert_eq!(
        deliver["blocked"],
        json!({"reason": "policy_denied", "policy_version": 2,
               "message": "deliveries are paused for the audit"})
    );
    assert_eq!(
        deliver["receipt"],
        Value::Null,
        "a block is never a receipt"
    );
    assert_eq!(wf["policy"], json!({"at_admission": 1, "current": 2}));
    assert_eq!(
        wf["status_text"],
        "Recorded under policy 1; Deliver document blocked under policy 2: deliveries are paused for the audit"
    );
    let attempts = host.attempts(&id, "deliver").await;
    assert_eq!(
        attempts.last().unwrap()["policy"],
        json!({"version": 2, "decision": "deny"})
    );
    assert_eq!(attempts.last().unwrap()["checkpoint"], 2);
    // A denied attempt is refused before it starts: it spends none of the budget.
    assert_eq!(wf["budget"]["attempts"]["used"], 2, "{wf:#}");
    let render = host.attempts(&id, "render").await;
    assert_eq!(
        render[0]["policy"],
        Value::Null,
        "a handler has no effect to judge"
    );
    assert!(host.world().await.is_empty());
    // The console's stuck-step page shows both versions and offers the exception.
    let (client, cookie) = crate::course::console_session(&host).await;
    let page = crate::course::console_page(
        &host,
        &client,
        &cookie,
        &format!("/console/workflows/{id}/steps/deliver"),
    )
    .await;
    assert!(
        page.contains(
            "Blocked under policy <strong>2</strong>: deliveries are paused for the audit"
        ),
        "{page}"
    );
    assert!(
        page.contains("(the workflow was recorded under policy 1)"),
        "{page}"
    );
    assert!(
        page.contains(&format!(
            "action=\"/console/workflows/{id}/steps/deliver/exception\""
        )),
        "{page}"
    );

    // An operator's exception lets exactly one attempt of the other workflow through.
    let blocked = host
        .wait_for(&excepted, &["needs_review"], Duration::from_secs(30))
        .await;
    assert_eq!(step(&blocked, "deliver")["state"], "blocked");
    let r = reqwest::Client::new()
        .post(format!(
            "{}/v1/workflows/{excepted}/steps/deliver/exception",
            host.url
        ))
        .header("Idempotency-Key", "x-1")
        .json(&json!({"reason": "approved by the audit", "evidence": "ticket AUD-7"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let wf = host
        .wait_for(
            &excepted,
            &["completed", "needs_review"],
            Duration::from_secs(30),
        )
        .await;
    assert_eq!(wf["state"], "completed", "{wf:#}");
    let attempts = host.attempts(&excepted, "deliver").await;
    assert_eq!(
        attempts.last().unwrap()["policy"],
        json!({"version": 2, "decision": "exception", "author": "local"})
    );
    let timeline = host.timeline_text(&excepted).await;
    assert!(
        timeline.contains("Operator local made an exception to policy 2 for Deliver document"),
        "{timeline}"
    );
    assert_eq!(host.world().await.len(), 1);
    // The step that was not excepted is still blocked: an exception is for one attempt.
    let (_, still) = host.get(&format!("/v1/workflows/{id}")).await;
    assert_eq!(step(&still, "deliver")["state"], "blocked", "{still:#}");

    // Version 3 allows it again: the step is judged again and the delivery made.
    let (status, v3) = deploy(
        &host,
        "p-3",
        ALLOW_ALL
            .replace("allow", "allow\"\nreason = \"audit done")
            .as_str(),
    )
    .await;
    assert_eq!(status, 201, "{v3}");
    assert_eq!(v3["version"], 3);
    let wf = host
        .wait_for(&id, &["completed", "failed"], Duration::from_secs(30))
        .await;
    assert_eq!(wf["state"], "completed", "{wf:#}");
    assert_eq!(wf["policy"], json!({"at_admission": 1, "current": 3}));
    // Judged again under version 3 without spending an attempt on the judgement: only
    // validate, render and the one delivery count.
    assert_eq!(wf["budget"]["attempts"]["used"], 3, "{wf:#}");
    assert_eq!(host.world().await.len(), 2);
    let timeline = host.timeline_text(&id).await;
    assert!(timeline.contains("blocked under policy 2"), "{timeline}");
    assert!(
        timeline.contains("Policy version 3 is in force: deliver is judged again"),
        "{timeline}"
    );
    let (_, listed) = host.get("/v1/policies").await;
    let versions: Vec<u64> = listed["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["version"].as_u64().unwrap())
        .collect();
    assert_eq!(versions, [3, 2, 1]);
}

/// `docket policy deploy` checks the file first (file:line:col) and then stores the next
/// version; a running host enforces it within a second.
async fn docket_policy_deploys_from_the_command_line(db: Option<String>) {
    let host = HostProcess::start(HostOptions {
        db: db.clone(),
        ..HostOptions::default()
    })
    .await;
    let database = db.unwrap_or_else(|| host.path().join("docket.db").display().to_string());
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[[rules]]\neffect = \"allow\"\nsubject = [\"x\"]\n").unwrap();
    let run = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_docket"))
            .args(args)
            .output()
            .unwrap()
    };
    let out = run(&["policy", "deploy", bad.to_str().unwrap(), "--db", &database]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.toml:3:1"), "{err}");
    let good = dir.path().join("pause.toml");
    std::fs::write(&good, PAUSE_DELIVERIES).unwrap();
    let out = run(&[
        "policy",
        "deploy",
        good.to_str().unwrap(),
        "--db",
        &database,
    ]);
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("policy version 1 deployed"));
    // The running host enforces it within its registry poll (a second), without a restart.
    let started = std::time::Instant::now();
    wait_in_force(&host, 1).await;
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    let (_, created) = host
        .submit("document-delivery", "cli-policy", document("Paused"))
        .await;
    let id = created["workflow_id"].as_str().unwrap().to_string();
    let wf = host
        .wait_for(&id, &["needs_review", "completed"], Duration::from_secs(30))
        .await;
    assert_eq!(step(&wf, "deliver")["state"], "blocked", "{wf:#}");
    let out = run(&["policy", "list", "--db", &database]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("version   1"),
        "{out:?}"
    );
}

on_both_stores!(
    a_policy_change_blocks_the_delivery_until_a_newer_version_allows_it,
    docket_policy_deploys_from_the_command_line,
);

/// Two hosts on one PostgreSQL database: a version deployed through one is enforced by the
/// other within a second, without a restart.
#[tokio::test(flavor = "multi_thread")]
async fn a_policy_deployed_on_one_host_is_enforced_by_another_within_a_second() {
    let database = TestDatabase::create().await;
    let first = HostProcess::start(HostOptions {
        db: Some(database.url.clone()),
        config: "host_id = \"first\"\n".into(),
        ..HostOptions::default()
    })
    .await;
    let second = HostProcess::start(HostOptions {
        db: Some(database.url.clone()),
        config: "host_id = \"second\"\n".into(),
        ..HostOptions::default()
    })
    .await;
    let (status, v1) = deploy(&first, "many-1", PAUSE_DELIVERIES).await;
    assert_eq!(status, 201, "{v1}");
    let started = std::time::Instant::now();
    wait_in_force(&second, 1).await;
    // The bound is a second (the registry poll); allow for a busy machine.
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    drop(first);
    drop(second);
    database.drop_now().await;
}

/// A compensation is an effect too: the policy judges it (`compensate`), and a denial
/// blocks it before anything reaches the provider.
#[tokio::test(flavor = "multi_thread")]
async fn a_compensation_is_judged_by_the_policy() {
    let (file, text) = crate::host_process::Contract::Idempotent.definition();
    let host = HostProcess::start(HostOptions {
        workflows: vec![(
            file,
            format!("{text}\n[steps.compensation]\non = \"workflow_cancelled\"\n"),
        )],
        ..HostOptions::default()
    })
    .await;
    let no_reversals = "[[rules]]\nactions = [\"compensate\"]\neffect = \"deny\"\nreason = \"reversals need the finance team\"\n\n[[rules]]\neffect = \"allow\"\n";
    let (status, _) = deploy(&host, "c-1", no_reversals).await;
    assert_eq!(status, 201);
    let (_, created) = host
        .submit(
            crate::host_process::Contract::Idempotent.workflow(),
            "judged-reversal",
            document("Kept"),
        )
        .await;
    let id = created["workflow_id"].as_str().unwrap().to_string();
    host.wait_for(&id, &["completed"], Duration::from_secs(30))
        .await;
    let r = reqwest::Client::new()
        .post(format!("{}/v1/workflows/{id}/cancel", host.url))
        .header("Idempotency-Key", "w-1")
        .json(&json!({"reason": "withdrawn", "withdraw": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 202);
    let wf = host
        .wait_for(&id, &["needs_review", "cancelled"], Duration::from_secs(30))
        .await;
    assert_eq!(wf["state"], "needs_review", "{wf:#}");
    let compensation = &step(&wf, "deliver")["compensation"];
    assert_eq!(compensation["state"], "blocked", "{wf:#}");
    assert_eq!(
        wf["status_text"],
        "Recorded under policy 1; Compensation of Deliver document blocked under policy 1: reversals need the finance team"
    );
    let attempts = host.attempts(&id, "deliver.compensate").await;
    assert_eq!(
        attempts.last().unwrap()["policy"],
        json!({"version": 1, "decision": "deny"})
    );
    let world = host.world().await;
    assert_eq!(world[0]["cancel_requests"], 0, "{world:?}");
}
