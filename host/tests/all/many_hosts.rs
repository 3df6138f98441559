//! Several `docket serve` processes on one PostgreSQL database: one key is one workflow
//! whichever host hears it, hosts wake each other, any host runs any step (components come
//! from the database), and hosts killed with SIGKILL lose their leases to the others
//! without a second delivery.

use crate::host_process::{HostOptions, HostProcess, PROVIDER_TOKEN, document};
use crate::postgres::TestDatabase;
use crate::wait;
use docket::sim::{ProviderSim, SimConfig};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

/// A host on `db` delivering through the provider at `provider`, with identity `id`.
async fn host_on(
    db: &str,
    provider: &str,
    id: &str,
    extra: &str,
    dir: Option<tempfile::TempDir>,
) -> HostProcess {
    HostProcess::start(HostOptions {
        db: Some(db.to_string()),
        provider: Some(provider.to_string()),
        config: format!("host_id = {id:?}\n{extra}"),
        dir,
        ..HostOptions::default()
    })
    .await
}

async fn submit(url: &str, key: &str, input: &Value) -> Result<(u16, Value), reqwest::Error> {
    let r = reqwest::Client::new()
        .post(format!("{url}/v1/intents"))
        .header("Idempotency-Key", key)
        .timeout(Duration::from_secs(20))
        .json(&json!({"workflow": "document-delivery", "input": input}))
        .send()
        .await?;
    Ok((r.status().as_u16(), r.json().await?))
}

/// One try to have intent `i` admitted by the host at `url` (`None`: a host being restarted).
async fn submit_to(url: Option<String>, i: usize, input: &Value) -> Result<String, String> {
    let Some(url) = url else {
        return Err("a host being restarted".into());
    };
    match submit(&url, &format!("statement-{i}"), input).await {
        Ok((201 | 200, body)) => Ok(body["workflow_id"].as_str().unwrap().to_string()),
        Ok((status, body)) => panic!("intent {i}: {status} {body}"),
        Err(e) => Err(format!("{url}: {e}")),
    }
}

fn recipient(i: usize) -> String {
    format!("reader-{i}@example.com")
}

#[tokio::test(flavor = "multi_thread")]
async fn three_hosts_share_one_database_through_kills_without_a_second_delivery() {
    let database = TestDatabase::create().await;
    let sim = ProviderSim::start(
        SimConfig::new(PROVIDER_TOKEN),
        "127.0.0.1:0".parse().unwrap(),
    )
    .await
    .unwrap();
    let provider = sim.base_url();
    // Short leases: a killed host's steps go to the others within seconds.
    let limits = "[limits]\nlease = \"3s\"\n";
    let mut hosts = Vec::new();
    for name in ["a", "b", "c"] {
        hosts.push(host_on(&database.url, &provider, &format!("{name}-1"), limits, None).await);
    }

    // One key sent to all three hosts at once: one workflow.
    let mut set = tokio::task::JoinSet::new();
    for i in 0..30 {
        let url = hosts[i % 3].url.clone();
        set.spawn(async move {
            submit(&url, "spread-key", &document("Spread over three hosts"))
                .await
                .unwrap()
        });
    }
    let mut answers = Vec::new();
    while let Some(a) = set.join_next().await {
        answers.push(a.unwrap());
    }
    let created = answers.iter().filter(|(s, _)| *s == 201).count();
    assert_eq!(created, 1, "{answers:?}");
    let ids: BTreeSet<&str> = answers
        .iter()
        .map(|(_, b)| b["workflow_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 1, "{answers:?}");

    // The provider loses one response in ten after committing, and is sometimes slow.
    sim.sim()
        .set_faults(json!({"lose": 0.1, "slow": 0.05, "slow_ms": 1500, "seed": 11}))
        .unwrap();

    // 500 intents, submitted at a steady pace to whichever hosts are up; a submission
    // that meets a dead host is sent again, under the same key, to another one.
    let live: Arc<RwLock<Vec<Option<String>>>> = Arc::new(RwLock::new(
        hosts.iter().map(|h| Some(h.url.clone())).collect(),
    ));
    const INTENTS: usize = 500;
    // Intents admitted so far: the hosts are killed at points of the run, not of the clock.
    let admitted = Arc::new(AtomicUsize::new(0));
    let submitter = {
        let (live, admitted) = (live.clone(), admitted.clone());
        tokio::spawn(async move {
            let mut tasks = tokio::task::JoinSet::new();
            // One intent every 16 ms: a rate of load, not a wait for anything.
            let mut pace = tokio::time::interval(Duration::from_millis(16));
            pace.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            for i in 0..INTENTS {
                pace.tick().await;
                let (live, admitted) = (live.clone(), admitted.clone());
                tasks.spawn(async move {
                    let input = json!({
                        "title": format!("Statement {i}"),
                        "recipient": recipient(i),
                        "body": "Your statement is attached."
                    });
                    let mut turn = i;
                    let id = wait::until(
                        &format!("intent {i} admitted by a live host"),
                        Duration::from_secs(120),
                        || {
                            // Each try goes to the next host.
                            let url = live.read().unwrap()[turn % 3].clone();
                            turn += 1;
                            submit_to(url, i, &input)
                        },
                    )
                    .await;
                    admitted.fetch_add(1, Ordering::SeqCst);
                    (i, id)
                });
            }
            let mut ids = BTreeMap::new();
            while let Some(r) = tasks.join_next().await {
                let (i, id) = r.unwrap();
                ids.insert(i, id);
            }
            ids
        })
    };

    // One host after another dies mid-run (SIGKILL) and comes back as a new process: each
    // once another 150 intents were admitted since the last one came back (or all were) and
    // while it takes part (its claim ticks move).
    let mut killed = Vec::new();
    for (n, name) in ["a", "b", "c"].iter().enumerate() {
        let due = (admitted.load(Ordering::SeqCst) + 150).min(INTENTS);
        wait::until(
            &format!("{due} intents admitted"),
            Duration::from_secs(120),
            async || match admitted.load(Ordering::SeqCst) {
                count if count >= due => Ok(()),
                count => Err(format!("{count} admitted")),
            },
        )
        .await;
        hosts[n].wait_ticks("claim", 2).await;
        live.write().unwrap()[n] = None;
        let host = hosts.remove(n);
        let dir = host.kill();
        killed.push(format!("{name}-1"));
        let back = host_on(
            &database.url,
            &provider,
            &format!("{name}-2"),
            limits,
            Some(dir),
        )
        .await;
        live.write().unwrap()[n] = Some(back.url.clone());
        hosts.insert(n, back);
    }
    let ids = submitter.await.unwrap();
    assert_eq!(ids.len(), INTENTS);
    let distinct: BTreeSet<&String> = ids.values().collect();
    assert_eq!(distinct.len(), INTENTS, "two intents share a workflow");

    // Every intent ends completed or in review.
    let reader = &hosts[0];
    let start = Instant::now();
    let mut ends = BTreeMap::<String, usize>::new();
    let mut workflows = Vec::new();
    for id in ids.values() {
        let left = Duration::from_secs(180).saturating_sub(start.elapsed());
        let wf = reader
            .wait_for(id, &["completed", "needs_review", "failed"], left)
            .await;
        *ends
            .entry(wf["state"].as_str().unwrap().to_string())
            .or_default() += 1;
        workflows.push(wf);
    }
    assert!(
        ends.keys().all(|s| s == "completed" || s == "needs_review"),
        "{ends:?}"
    );

    // The provider's own record: at most one delivery per intent.
    let world = reader.world().await;
    let mut per_recipient = BTreeMap::<String, usize>::new();
    for d in &world {
        *per_recipient
            .entry(d["recipient"].as_str().unwrap().to_string())
            .or_default() += 1;
    }
    let twice: Vec<_> = per_recipient.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "delivered more than once: {twice:?}");
    assert_eq!(
        ends.get("completed").copied().unwrap_or(0),
        workflows
            .iter()
            .filter(|w| w["state"] == "completed")
            .count()
    );

    // Where a host died holding a lease, the step's next attempt has a new owner; lost
    // responses were settled by asking the provider, not by sending again.
    let mut takeovers = Vec::new();
    let mut queried = 0;
    for wf in &workflows {
        let id = wf["workflow_id"].as_str().unwrap();
        for step in wf["steps"].as_array().unwrap() {
            if step["attempts"].as_u64().unwrap_or(0) < 2 {
                continue;
            }
            let name = step["id"].as_str().unwrap();
            let attempts = reader.attempts(id, name).await;
            queried += attempts
                .iter()
                .filter(|a| a["trigger"] == "recovery_query")
                .count();
            for pair in attempts.windows(2) {
                let before = pair[0]["lease_owner"].as_str().unwrap();
                let after = pair[1]["lease_owner"].as_str().unwrap();
                if killed.iter().any(|k| k == before) && after != before {
                    takeovers.push(format!("{id}/{name}: {before} → {after}"));
                }
            }
        }
    }
    assert!(queried > 0, "no lost response was recovered by query");
    assert!(
        !takeovers.is_empty(),
        "no attempt shows a takeover from a killed host ({killed:?}); ends {ends:?}"
    );
    eprintln!(
        "three hosts: {ends:?}, {} deliveries, {queried} recovery queries, {} takeovers, e.g. {}",
        world.len(),
        takeovers.len(),
        takeovers[0]
    );
    // The records the kills and recoveries left keep every invariant.
    let (code, out) = crate::operations::docket_check(&database.url, false);
    assert_eq!(code, 0, "{out}");
    drop(hosts);
    database.drop_now().await;
}

/// Host A admits but runs nothing; host B has no example components and no workflow files,
/// and polls only once a minute. B runs A's intent at once: woken by A's notification, with
/// the definition and the component bytes from the database.
#[tokio::test(flavor = "multi_thread")]
async fn a_host_is_woken_by_another_and_runs_components_it_only_has_from_the_database() {
    let database = TestDatabase::create().await;
    let sim = ProviderSim::start(
        SimConfig::new(PROVIDER_TOKEN),
        "127.0.0.1:0".parse().unwrap(),
    )
    .await
    .unwrap();
    let provider = sim.base_url();
    let a = HostProcess::start(HostOptions {
        db: Some(database.url.clone()),
        provider: Some(provider.clone()),
        config: "host_id = \"admitting\"\n".into(),
        pause_execution: true,
        ..HostOptions::default()
    })
    .await;
    let b = HostProcess::start(HostOptions {
        db: Some(database.url.clone()),
        provider: Some(provider.clone()),
        config: "host_id = \"running\"\nexamples = false\n[limits]\nidle_poll = \"60s\"\n".into(),
        no_workflow_files: true,
        ..HostOptions::default()
    })
    .await;
    let log = b.log_text();
    assert!(
        log.contains("component http-delivery@1.0.0") && log.contains("from the database"),
        "{}",
        b.log_tail(30)
    );
    assert!(!log.contains("built example"), "{}", b.log_tail(30));
    // The scheduler starts listening just after the API is up.
    b.wait_for_log(
        "listening for work made ready by other hosts",
        Duration::from_secs(10),
    )
    .await;
    // B has looked once on start-up and is idle now: its next look without a wake-up is a
    // minute away.
    b.wait_ticks_reach("claim", 1).await;

    let (status, created) = a
        .submit("document-delivery", "woken-1", document("Wake up"))
        .await;
    assert_eq!(status, 201, "{created}");
    let id = created["workflow_id"].as_str().unwrap();
    let wf = a
        .wait_for(
            id,
            &["completed", "needs_review", "failed"],
            Duration::from_secs(15),
        )
        .await;
    assert_eq!(wf["state"], "completed", "{}", a.timeline_text(id).await);
    for step in ["validate", "render", "deliver"] {
        let attempts = a.attempts(id, step).await;
        assert_eq!(attempts.len(), 1, "{attempts:#?}");
        assert_eq!(attempts[0]["lease_owner"], "running", "{attempts:#?}");
    }
    // Both hosts name the same bytes.
    let deliver = &wf["steps"][2]["receipt"];
    assert!(
        a.log_text()
            .contains(deliver["component_digest"].as_str().unwrap()),
        "B ran other bytes than A loaded: {deliver:#}"
    );
    assert_eq!(a.world().await.len(), 1);
    drop((a, b));
    database.drop_now().await;
}

/// Waits until `host`'s log has a line containing every one of `parts`; returns how long
/// that took.
async fn log_line(host: &HostProcess, parts: &[&str], within: Duration) -> Duration {
    let start = Instant::now();
    wait::until(&format!("a log line with {parts:?}"), within, || async {
        if host
            .log_text()
            .lines()
            .any(|l| parts.iter().all(|p| l.contains(p)))
        {
            Ok(())
        } else {
            Err(host.log_tail(30))
        }
    })
    .await;
    start.elapsed()
}

/// An activation and a rollback made through one host reach another within the registry
/// poll (1 s, plus compiling a version new to that host), and its next attempts use them.
#[tokio::test(flavor = "multi_thread")]
async fn every_host_picks_up_an_activation_and_a_rollback_within_the_bound() {
    let database = TestDatabase::create().await;
    let sim = ProviderSim::start(
        SimConfig::new(PROVIDER_TOKEN),
        "127.0.0.1:0".parse().unwrap(),
    )
    .await
    .unwrap();
    let provider = sim.base_url();
    let definition = std::fs::read_to_string(
        crate::host_process::repo_root().join("workflows/document-delivery.toml"),
    )
    .unwrap()
    .replace("name = \"document-delivery\"", "name = \"any-delivery\"")
    .replace(
        "component = \"http-delivery\"\nversion = \"^1\"",
        "component = \"http-delivery\"\nversion = \">=1, <3\"",
    );
    let admitting = HostProcess::start(HostOptions {
        db: Some(database.url.clone()),
        provider: Some(provider.clone()),
        workflows: vec![("any-delivery.toml".into(), definition)],
        pause_execution: true,
        ..HostOptions::default()
    })
    .await;
    let running = HostProcess::start(HostOptions {
        db: Some(database.url.clone()),
        provider: Some(provider.clone()),
        config: "host_id = \"runner\"\n".into(),
        no_workflow_files: true,
        ..HostOptions::default()
    })
    .await;
    let client = reqwest::Client::new();
    let v2 = std::fs::read(docket::guests::path("http-delivery-2").unwrap()).unwrap();
    let r = client
        .post(format!("{}/v1/adapters", admitting.url))
        .header("Idempotency-Key", "deploy-v2")
        .body(v2)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 201, "{}", r.text().await.unwrap());

    let deliver_with = |host: &HostProcess, key: &'static str| {
        let url = host.url.clone();
        async move {
            let r = reqwest::Client::new()
                .post(format!("{url}/v1/intents"))
                .header("Idempotency-Key", key)
                .json(&json!({"workflow": "any-delivery", "input": document(key)}))
                .send()
                .await
                .unwrap();
            let body: Value = r.json().await.unwrap();
            body["workflow_id"].as_str().unwrap().to_string()
        }
    };

    for (action, body, version, key) in [
        (
            "activate",
            json!({"version": "2.0.0"}),
            "2.0.0",
            "after-activate",
        ),
        ("rollback", json!({}), "1.0.0", "after-rollback"),
    ] {
        let r = client
            .post(format!(
                "{}/v1/adapters/http-delivery/{action}",
                admitting.url
            ))
            .header("Idempotency-Key", action)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 200, "{}", r.text().await.unwrap());
        let took = log_line(
            &running,
            &[
                "registry:",
                &format!("http-delivery@{version}"),
                "is now active",
            ],
            Duration::from_secs(10),
        )
        .await;
        // The documented bound: the registry poll (1 s) plus compiling a new version; the
        // margin is for a loaded machine.
        assert!(
            took < Duration::from_secs(3),
            "{action} took {took:?} to arrive"
        );
        let id = deliver_with(&admitting, key).await;
        let wf = admitting
            .wait_for(
                &id,
                &["completed", "needs_review", "failed"],
                Duration::from_secs(30),
            )
            .await;
        assert_eq!(
            wf["state"],
            "completed",
            "{}",
            admitting.timeline_text(&id).await
        );
        assert_eq!(
            wf["steps"][2]["receipt"]["component_version"], version,
            "{wf:#}"
        );
        let attempts = admitting.attempts(&id, "deliver").await;
        assert_eq!(attempts[0]["lease_owner"], "runner");
    }
    drop((admitting, running));
    database.drop_now().await;
}

/// A provider that takes five create requests at once and answers `429` beyond them sees
/// no sixth from three hosts that count the adapter's attempts in flight together
/// (`max_in_flight = 5` on each), and each host's `/metrics` shows the count.
#[tokio::test(flavor = "multi_thread")]
async fn three_hosts_keep_an_adapter_within_its_providers_concurrency_together() {
    let database = TestDatabase::create().await;
    let sim = ProviderSim::start(
        SimConfig::new(PROVIDER_TOKEN),
        "127.0.0.1:0".parse().unwrap(),
    )
    .await
    .unwrap();
    // Each delivery takes the provider 150 ms, so attempts overlap whenever hosts allow.
    sim.sim()
        .set_faults(json!({"slow": 1.0, "slow_ms": 150, "max_concurrent": 5}))
        .unwrap();
    let provider = sim.base_url();
    let mut hosts = Vec::new();
    for name in ["a", "b", "c"] {
        hosts.push(
            HostProcess::start(HostOptions {
                db: Some(database.url.clone()),
                provider: Some(provider.clone()),
                config: format!("host_id = \"{name}-limits\"\n"),
                adapter_settings: "max_in_flight = 5\n".into(),
                ..HostOptions::default()
            })
            .await,
        );
    }
    const INTENTS: usize = 45;
    let mut set = tokio::task::JoinSet::new();
    for i in 0..INTENTS {
        let url = hosts[i % 3].url.clone();
        set.spawn(async move {
            let (status, body) = submit(&url, &format!("limited-{i}"), &document("Limited"))
                .await
                .unwrap();
            assert_eq!(status, 201, "{body}");
            body["workflow_id"].as_str().unwrap().to_string()
        });
    }
    let mut ids = Vec::new();
    while let Some(id) = set.join_next().await {
        ids.push(id.unwrap());
    }
    // While they run, every host reports the adapter's attempts in flight on all of them.
    let seen = wait::until(
        "the attempts in flight in /metrics",
        Duration::from_secs(30),
        || async {
            let text = reqwest::get(format!("{}/metrics", hosts[1].url))
                .await
                .map_err(|e| e.to_string())?
                .text()
                .await
                .map_err(|e| e.to_string())?;
            let line = text
                .lines()
                .find(|l| l.starts_with("docket_adapter_in_flight{adapter=\"http-delivery\"}"))
                .map(str::to_string);
            match line {
                Some(l) if !l.ends_with(" 0") => Ok(l),
                _ => Err(text),
            }
        },
    )
    .await;
    let n: u64 = seen.rsplit(' ').next().unwrap().parse().unwrap();
    assert!((1..=5).contains(&n), "{seen}");
    for (i, id) in ids.iter().enumerate() {
        hosts[i % 3]
            .wait_for(id, &["completed"], Duration::from_secs(120))
            .await;
    }
    let world = sim.sim().world();
    assert_eq!(world.len(), INTENTS, "one delivery per intent");
    let peak = sim.sim().peak_concurrent();
    assert!(peak <= 5, "the provider saw {peak} requests at once");
    assert_eq!(sim.sim().busy_refusals(), 0, "no request beyond the limit");
    // The limit was used, not merely kept: deliveries overlapped.
    assert!(peak >= 2, "the provider saw {peak} at most");
}
