//! The adapter registry on a running host: deploy a new version (HTTP), activate it while
//! workflows run, roll back (CLI, picked up by the running host), with every receipt naming
//! the version that produced it and no delivery twice.

use crate::host_process::{HostOptions, HostProcess};
use crate::wait;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// `document-delivery` renamed, delivering through any `http-delivery` from 1 to 2.
fn swap_definition() -> (String, String) {
    definition_requiring(">=1, <3")
}

/// `document-delivery` renamed `swap-delivery`, delivering through `http-delivery` versions
/// matching `requirement`.
fn definition_requiring(requirement: &str) -> (String, String) {
    let shipped = std::fs::read_to_string(
        crate::host_process::repo_root().join("workflows/document-delivery.toml"),
    )
    .unwrap();
    let text = shipped
        .replace("name = \"document-delivery\"", "name = \"swap-delivery\"")
        .replace(
            "component = \"http-delivery\"\nversion = \"^1\"",
            &format!("component = \"http-delivery\"\nversion = \"{requirement}\""),
        );
    assert!(
        text.contains(requirement),
        "the shipped definition changed shape"
    );
    ("swap-delivery.toml".into(), text)
}

async fn request(
    method: reqwest::Method,
    url: String,
    body: Option<reqwest::Body>,
) -> (u16, Value) {
    // Every POST under /v1/ names itself; each call here is a new request.
    static KEYS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let key = (method == reqwest::Method::POST).then(|| {
        let n = KEYS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        format!("registry-{n}")
    });
    let body = body.map(|b| b.as_bytes().expect("the tests send whole bodies").to_vec());
    // A connection the loaded machine dropped before the answer is sent again under the
    // same key: the same request, answered once.
    let mut tries = 0;
    loop {
        let mut r = reqwest::Client::new().request(method.clone(), url.clone());
        if let Some(key) = &key {
            r = r.header("Idempotency-Key", key);
        }
        if let Some(b) = &body {
            r = r.body(b.clone());
        }
        match r.send().await {
            Ok(r) => return (r.status().as_u16(), r.json().await.unwrap_or(Value::Null)),
            Err(e) if tries < 3 && (e.is_request() || e.is_connect()) => tries += 1,
            Err(e) => panic!("{method} {url}: {e}"),
        }
    }
}

fn docket(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_docket"))
        .args(args)
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_new_version_is_activated_and_rolled_back_under_load_without_a_failed_attempt() {
    let host = HostProcess::start(HostOptions {
        workflows: vec![swap_definition()],
        // Versions neither active nor running leave memory a second after their last use.
        config: "[limits]\nunload_idle = \"1s\"\n".into(),
        ..HostOptions::default()
    })
    .await;
    let db = host.path().join("docket.db").display().to_string();

    // The examples registered themselves: 1.0.0 is active.
    let (status, listed) = request(
        reqwest::Method::GET,
        format!("{}/v1/adapters", host.url),
        None,
    )
    .await;
    assert_eq!(status, 200, "{listed}");
    let delivery = |listed: &Value| -> Value {
        listed["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["name"] == "http-delivery")
            .cloned()
            .unwrap()
    };
    assert_eq!(delivery(&listed)["active_version"], "1.0.0", "{listed:#}");

    // Deploy 2.0.0 over HTTP: staged, not active.
    let v2 = std::fs::read(docket::guests::path("http-delivery-2").unwrap()).unwrap();
    let (status, deployed) = request(
        reqwest::Method::POST,
        format!("{}/v1/adapters", host.url),
        Some(v2.clone().into()),
    )
    .await;
    assert_eq!(status, 201, "{deployed}");
    assert_eq!(
        (deployed["version"].as_str(), deployed["state"].as_str()),
        (Some("2.0.0"), Some("staged"))
    );
    assert_eq!(
        deployed["declared"]["contract"]["idempotency"]["namespace"],
        "reference-provider"
    );
    // An upload does not pin the staged version's compiled code in the host's memory.
    host.wait_for_log("http-delivery@2.0.0 (sha256:", Duration::from_secs(10))
        .await;
    host.wait_for_log(
        "is staged: not kept loaded until it is needed",
        Duration::from_secs(10),
    )
    .await;
    let (status, again) = request(
        reqwest::Method::POST,
        format!("{}/v1/adapters", host.url),
        Some(v2.into()),
    )
    .await;
    assert_eq!(status, 200, "the same bytes again change nothing: {again}");
    // Bytes that are no component are refused with the reason.
    let (status, refused) = request(
        reqwest::Method::POST,
        format!("{}/v1/adapters", host.url),
        Some(b"not wasm".to_vec().into()),
    )
    .await;
    assert_eq!(status, 400, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not a component"),
        "{refused}"
    );

    // 200 workflows at a steady pace; 2.0.0 activated a third of the way, rolled back at
    // two thirds (from the CLI, straight on the database: the host picks it up itself).
    let mut ids: Vec<String> = Vec::new();
    let started = Instant::now();
    // One submission every 10 ms: a rate of load, not a wait for anything.
    let mut pace = tokio::time::interval(Duration::from_millis(10));
    pace.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    for i in 0..200 {
        pace.tick().await;
        if i == 65 {
            // Workflow 65's delivery is held by the provider across the activation: it
            // started on 1.0.0 and must finish on it.
            host.wait_for(&ids[64], &["completed"], Duration::from_secs(30))
                .await;
            host.faults(json!({"slow_next": 1, "slow_ms": 2500})).await;
        }
        if i == 66 {
            wait::until(
                "workflow 65 delivering",
                Duration::from_secs(20),
                || async {
                    let attempts = host.attempts(&ids[65], "deliver").await;
                    if attempts.is_empty() {
                        Err("no attempt of `deliver` yet".into())
                    } else {
                        Ok(())
                    }
                },
            )
            .await;
            let (status, body) = request(
                reqwest::Method::POST,
                format!("{}/v1/adapters/http-delivery/activate", host.url),
                Some(json!({"version": "2.0.0"}).to_string().into()),
            )
            .await;
            assert_eq!(status, 200, "{body}");
            assert_eq!(body["active_version"], "2.0.0");
        }
        if i == 133 {
            // Some of the workflows admitted since the activation ran on 2.0.0 before it is
            // rolled back.
            wait::until("a delivery on 2.0.0", Duration::from_secs(30), || async {
                for id in &ids[66..] {
                    let attempts = host.attempts(id, "deliver").await;
                    if attempts.iter().any(|a| a["component_version"] == "2.0.0") {
                        return Ok(());
                    }
                }
                Err("every delivery since the activation ran on 1.0.0 so far".into())
            })
            .await;
            let out = docket(&["adapter", "rollback", "http-delivery", "--db", &db]);
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(text.contains("http-delivery@1.0.0"), "{text}");
            // The running host takes it up at its next registry tick.
            host.wait_ticks("registry", 2).await;
        }
        let (status, created) = host
            .submit(
                "swap-delivery",
                &format!("swap-{i}"),
                json!({"title": format!("Letter {i}"), "recipient": format!("swap-{i}@example.com"), "body": "b"}),
            )
            .await;
        assert_eq!(status, 201, "{created}");
        ids.push(created["workflow_id"].as_str().unwrap().to_string());
    }
    assert!(started.elapsed() < Duration::from_secs(60));

    let mut by_version = BTreeMap::<String, usize>::new();
    let mut digests = BTreeMap::<String, BTreeSet<String>>::new();
    for (i, id) in ids.iter().enumerate() {
        let wf = host
            .wait_for(
                id,
                &["completed", "needs_review", "failed"],
                Duration::from_secs(60),
            )
            .await;
        assert_eq!(wf["state"], "completed", "{}", host.timeline_text(id).await);
        let receipt = &wf["steps"][2]["receipt"];
        let version = receipt["component_version"].as_str().unwrap().to_string();
        digests
            .entry(version.clone())
            .or_default()
            .insert(receipt["component_digest"].as_str().unwrap().to_string());
        // Before the activation only 1.0.0 can have run (65 included, whose call was under way
        // during the activation); after the rollback took effect, too.
        if !(66..134).contains(&i) {
            assert_eq!(version, "1.0.0", "workflow {i} ran on {version}");
        }
        *by_version.entry(version).or_default() += 1;
        // No attempt failed because of the swap: one attempt each, accepted.
        let attempts = host.attempts(id, "deliver").await;
        assert_eq!(attempts.len(), 1, "{attempts:#?}");
        assert_eq!(
            attempts[0]["component_version"],
            wf["steps"][2]["receipt"]["component_version"]
        );
    }
    assert!(
        by_version.get("2.0.0").copied().unwrap_or(0) > 0,
        "nothing ran on 2.0.0: {by_version:?}"
    );
    // Each version has exactly one digest, and they differ.
    assert!(digests.values().all(|d| d.len() == 1), "{digests:?}");
    assert_ne!(digests["1.0.0"], digests["2.0.0"]);

    // Nothing runs on 2.0.0 any more: the host unloads it (and keeps 1.0.0).
    host.wait_for_log("unloaded http-delivery@2.0.0", Duration::from_secs(10))
        .await;
    assert!(!host.log_text().contains("unloaded http-delivery@1.0.0"));

    // The provider's own record: one delivery per intent.
    let world = host.world().await;
    assert_eq!(world.len(), 200);
    let recipients: BTreeSet<&str> = world
        .iter()
        .map(|d| d["recipient"].as_str().unwrap())
        .collect();
    assert_eq!(recipients.len(), 200);

    // The history, with authors: registered by the host, activated over HTTP (the local
    // operator), rolled back from the CLI.
    let (_, listed) = request(
        reqwest::Method::GET,
        format!("{}/v1/adapters", host.url),
        None,
    )
    .await;
    assert_eq!(delivery(&listed)["active_version"], "1.0.0");
    let events: Vec<(String, String, String)> = listed["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == "http-delivery")
        .map(|e| {
            (
                e["action"].as_str().unwrap().to_string(),
                e["version"].as_str().unwrap().to_string(),
                e["author"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let actions: Vec<(&str, &str)> = events
        .iter()
        .map(|(a, v, _)| (a.as_str(), v.as_str()))
        .collect();
    assert_eq!(
        actions,
        [
            ("rolled_back", "1.0.0"),
            ("activated", "2.0.0"),
            ("deployed", "2.0.0"),
            ("activated", "1.0.0"),
            ("deployed", "1.0.0"),
        ],
        "{events:?}"
    );
    assert!(events[0].2.contains("(cli)"), "{events:?}");
    assert!(events[3].2.starts_with("host "), "{events:?}");

    // The CLI's list says the same.
    let out = docket(&["adapter", "list", "--db", &db]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let line = |version: &str| {
        text.lines()
            .find(|l| l.starts_with("http-delivery ") && l.contains(version))
            .unwrap_or_else(|| panic!("no line for {version}:\n{text}"))
            .to_string()
    };
    assert!(line("1.0.0").contains("active"), "{text}");
    assert!(line("2.0.0").contains("staged"), "{text}");
    assert!(text.contains("rolled_back"), "{text}");

    // Rolling back past the first version is refused with the reason.
    let out = docket(&["adapter", "rollback", "noop", "--db", &db]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no earlier active version of `noop` to roll back to"),
        "{err}"
    );
}

/// Runs one `swap-delivery` intent on a host that aborts right after the provider
/// committed its delivery (failpoint 4), so the step's outcome is unknown; returns the
/// workflow id and the host's directory.
async fn crash_after_sending(
    key: &str,
    provider: &str,
    dir: Option<tempfile::TempDir>,
) -> (String, tempfile::TempDir) {
    let mut host = HostProcess::start(HostOptions {
        workflows: vec![definition_requiring(">=1, <4")],
        config: "[limits]\nlease = \"2s\"\n".into(),
        provider: Some(provider.to_string()),
        env: vec![("DOCKET_FAILPOINT".into(), "checkpoint-4".into())],
        dir,
        ..HostOptions::default()
    })
    .await;
    let (status, created) = host
        .submit(
            "swap-delivery",
            key,
            json!({"title": key, "recipient": format!("{key}@example.com"), "body": "b"}),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    assert!(
        host.wait_exit(Duration::from_secs(30)).await.is_some(),
        "the failpoint did not abort the host:\n{}",
        host.log_tail(20)
    );
    (
        created["workflow_id"].as_str().unwrap().to_string(),
        host.kill(),
    )
}

async fn restart(provider: &str, dir: tempfile::TempDir) -> HostProcess {
    HostProcess::start(HostOptions {
        workflows: vec![definition_requiring(">=1, <4")],
        config: "[limits]\nlease = \"2s\"\n".into(),
        provider: Some(provider.to_string()),
        dir: Some(dir),
        ..HostOptions::default()
    })
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn an_uncertain_request_is_recovered_only_through_a_version_with_its_namespace() {
    let sim = docket::sim::ProviderSim::start(
        docket::sim::SimConfig::new(crate::host_process::PROVIDER_TOKEN),
        "127.0.0.1:0".parse().unwrap(),
    )
    .await
    .unwrap();
    let provider = sim.base_url();
    let deliveries = |recipient: &str| {
        sim.sim()
            .world()
            .iter()
            .filter(|d| d.recipient == recipient)
            .count()
    };

    // Sent under 1.0.0, outcome unknown; meanwhile 3.0.0 (another namespace) is activated.
    let (first, dir) = crash_after_sending("ns-1", &provider, None).await;
    assert_eq!(deliveries("ns-1@example.com"), 1);
    let db = dir.path().join("docket.db").display().to_string();
    for args in [
        &[
            "adapter",
            "deploy",
            "http-delivery-3-other-namespace",
            "--db",
            &db,
        ][..],
        &["adapter", "deploy", "http-delivery-2", "--db", &db][..],
        &["adapter", "activate", "http-delivery@3.0.0", "--db", &db][..],
    ] {
        let out = docket(args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let host = restart(&provider, dir).await;
    let wf = host
        .wait_for(
            &first,
            &["completed", "needs_review", "failed"],
            Duration::from_secs(30),
        )
        .await;
    let timeline = host.timeline_text(&first).await;
    assert_eq!(wf["state"], "needs_review", "{wf:#}\n{timeline}");
    let deliver = &wf["steps"][2];
    assert_eq!(deliver["state"], "outcome_unknown", "{deliver:#}");
    assert!(
        timeline.contains("another idempotency namespace")
            && timeline.contains("reference-provider-eu"),
        "the reason is not on the timeline:\n{timeline}"
    );
    let attempts = host.attempts(&first, "deliver").await;
    let last = attempts.last().unwrap();
    assert_eq!(last["component_version"], "3.0.0", "{attempts:#?}");
    assert!(
        last["request_identity"].is_null(),
        "3.0.0 sent something: {last:#}"
    );
    assert_eq!(deliveries("ns-1@example.com"), 1);

    // 2.0.0 (the namespace that sent) becomes active: the intent stays in review until a
    // person decides; a retry then goes through 2.0.0 under the same key, and the provider
    // answers with the delivery it already has.
    let (status, body) = request(
        reqwest::Method::POST,
        format!("{}/v1/adapters/http-delivery/activate", host.url),
        Some(json!({"version": "2.0.0"}).to_string().into()),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    // The host has caught up with the registry and its scheduler looked again since.
    host.wait_ticks("registry", 2).await;
    host.wait_scheduler_looked().await;
    let (_, still) = host.get(&format!("/v1/workflows/{first}")).await;
    assert_eq!(still["state"], "needs_review", "{still:#}");
    let r = reqwest::Client::new()
        .post(format!(
            "{}/v1/workflows/{first}/steps/deliver/retry",
            host.url
        ))
        .header("Idempotency-Key", "retry-ns-1")
        .json(&json!({"reason": "2.0.0 shares the namespace that sent the request"}))
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let answer: Value = r.json().await.unwrap_or(Value::Null);
    assert!(status == 200 || status == 202, "{status} {answer}");
    let wf = host
        .wait_for(&first, &["completed", "failed"], Duration::from_secs(30))
        .await;
    assert_eq!(
        wf["state"],
        "completed",
        "{}",
        host.timeline_text(&first).await
    );
    assert_eq!(wf["steps"][2]["receipt"]["component_version"], "2.0.0");
    assert_eq!(deliveries("ns-1@example.com"), 1);

    // Sent under 1.0.0 again, and 2.0.0 (same namespace) active when the host comes back:
    // recovery proceeds through 2.0.0 by itself, with no second delivery.
    let out = docket(&["adapter", "activate", "http-delivery@1.0.0", "--db", &db]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The running host takes the activation up at its next registry tick.
    host.wait_ticks("registry", 2).await;
    let dir = host.kill();
    let (second, dir) = crash_after_sending("ns-2", &provider, Some(dir)).await;
    assert_eq!(deliveries("ns-2@example.com"), 1);
    let out = docket(&["adapter", "activate", "http-delivery@2.0.0", "--db", &db]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let host = restart(&provider, dir).await;
    let wf = host
        .wait_for(
            &second,
            &["completed", "needs_review", "failed"],
            Duration::from_secs(30),
        )
        .await;
    let timeline = host.timeline_text(&second).await;
    assert_eq!(wf["state"], "completed", "{timeline}");
    let attempts = host.attempts(&second, "deliver").await;
    assert_eq!(attempts[0]["component_version"], "1.0.0", "{attempts:#?}");
    assert_eq!(
        wf["steps"][2]["receipt"]["component_version"], "2.0.0",
        "{attempts:#?}"
    );
    assert_eq!(
        attempts.last().unwrap()["request_identity"],
        attempts[0]["request_identity"],
        "{attempts:#?}"
    );
    assert_eq!(deliveries("ns-2@example.com"), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_version_that_a_definition_using_it_cannot_grant_is_refused_at_deploy() {
    let host = HostProcess::start(HostOptions::default()).await;
    let db = host.path().join("docket.db").display().to_string();
    // 3.0.0 first: no definition asks for it, so it is staged.
    let v3 =
        std::fs::read(docket::guests::path("http-delivery-3-other-namespace").unwrap()).unwrap();
    let (status, body) = request(
        reqwest::Method::POST,
        format!("{}/v1/adapters", host.url),
        Some(v3.into()),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    // A definition for any version from 2 on, granting nothing: definitions are checked
    // against the registry, so 3.0.0 satisfies it.
    let bare = host.path().join("bare.toml");
    std::fs::write(
        &bare,
        r#"
name = "bare-delivery"
version = 1
deadline = "1h"
[input_schema]
type = "object"
[[steps]]
id = "deliver"
label = "Deliver without grants"
kind = "adapter"
component = "http-delivery"
version = ">=2"
[steps.input]
recipient = "$input.recipient"
document = "$input.document"
document_digest = "$input.document_digest"
"#,
    )
    .unwrap();
    let out = docket(&["workflow", "deploy", bare.to_str().unwrap(), "--db", &db]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // 2.0.0 would run in that step, which grants neither its secret nor outbound HTTP:
    // refused, with the step, the workflow and the need named.
    let v2 = std::fs::read(docket::guests::path("http-delivery-2").unwrap()).unwrap();
    let (status, body) = request(
        reqwest::Method::POST,
        format!("{}/v1/adapters", host.url),
        Some(v2.into()),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("would not run in step `deliver` of workflow `bare-delivery` version 1")
            && message.contains("which this step is not granted"),
        "{message}"
    );
    // Other bytes under a deployed version (here 1.0.0 with one more custom section):
    // refused, and never loaded.
    let mut changed = std::fs::read(docket::guests::path("http-delivery").unwrap()).unwrap();
    changed.extend(CUSTOM_SECTION);
    let (status, body) = request(
        reqwest::Method::POST,
        format!("{}/v1/adapters", host.url),
        Some(changed.clone().into()),
    )
    .await;
    assert_eq!(status, 409, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("a deployed version never changes"),
        "{message}"
    );
    // The refused bytes left no native code in the host's compiled-component cache.
    let refused = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&changed));
    let cached: Vec<String> = std::fs::read_dir(host.path().join("components"))
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with(&refused))
        .collect();
    assert!(cached.is_empty(), "{cached:?}");
    // Nothing was stored.
    let (_, listed) = request(
        reqwest::Method::GET,
        format!("{}/v1/adapters", host.url),
        None,
    )
    .await;
    let versions: Vec<&str> = listed["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == "http-delivery")
        .unwrap()["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["version"].as_str().unwrap())
        .collect();
    assert_eq!(versions, ["1.0.0", "3.0.0"]);
}

/// A custom section named `foo`: appended to a component, other bytes that load the same.
const CUSTOM_SECTION: [u8; 6] = [0, 4, 3, b'f', b'o', b'o'];

#[tokio::test(flavor = "multi_thread")]
async fn other_bytes_under_a_loaded_version_are_refused_and_never_run() {
    let components = docket::catalog::Components::new(
        crate::common::runtime(),
        docket::capabilities::HostPolicy::default(),
    );
    let honest = std::fs::read(docket::guests::path("http-delivery").unwrap()).unwrap();
    let first = components.load_bytes(&honest).await.unwrap();
    let mut changed = honest.clone();
    changed.extend(CUSTOM_SECTION);
    let Err(err) = components.load_bytes(&changed).await else {
        panic!("other bytes under a loaded version were loaded");
    };
    assert!(
        matches!(err, docket::runtime::LoadError::VersionTaken { .. }),
        "{err}"
    );
    assert!(err.to_string().contains("a version never changes"), "{err}");
    let loaded = components.all();
    assert_eq!(loaded.len(), 1);
    assert_eq!(loaded[0].digest, first.digest);
    // The same bytes again are the version already loaded.
    let again = components.load_bytes(&honest).await.unwrap();
    assert!(std::sync::Arc::ptr_eq(&again, &first));
}

#[test]
fn registry_commands_use_the_database_of_the_hosts_config() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("elsewhere.db");
    let config = dir.path().join("docket.toml");
    std::fs::write(&config, format!("db = {:?}\n", db.display().to_string())).unwrap();
    let shipped = crate::host_process::repo_root().join("workflows/document-delivery.toml");
    let config = config.to_str().unwrap();
    let out = docket(&[
        "workflow",
        "deploy",
        shipped.to_str().unwrap(),
        "--config",
        config,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(db.exists(), "the config's database was not used");
    let out = docket(&["adapter", "deploy", "http-delivery-2", "--config", config]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = docket(&["adapter", "list", "--config", config]);
    let listed = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && listed.contains("http-delivery") && listed.contains("2.0.0"),
        "{listed}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
