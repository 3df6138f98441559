//! Operations against a real `docket serve`: the metrics a scraper reads move by exactly
//! what happened, readiness follows the store and the tasks, and the metrics listener
//! serves scrapers that hold no token.

use crate::host_process::{HostOptions, HostProcess, PROVIDER_TOKEN, document, free_port};
use docket::sim::{ProviderSim, SimConfig};
use serde_json::json;
use std::collections::BTreeMap;
use std::time::Duration;

/// A workflow of one call to the hostile test plugin, doing what its input says.
const HOSTILE: &str = r#"
name = "hostile-call"
version = 1
deadline = "1h"

[input_schema]
type = "object"
required = ["do"]

[[steps]]
id = "call"
label = "Call the hostile plugin"
kind = "adapter"
component = "hostile"
version = "^1"
timeout = "5s"

[steps.input]
do = "$input.do"

[steps.retry]
max_attempts = 1

[steps.capabilities]
outbound_hosts = ["http://127.0.0.1:9"]
secrets = ["api_token"]
"#;

const HOSTILE_ALLOWANCE: &str = r#"
[adapters.hostile]
allow_hosts = ["http://127.0.0.1:9"]
allow_secrets = ["api_token"]
"#;

/// The samples of a Prometheus text page: `name{labels}` → value.
pub fn samples(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            Some((series.to_string(), value.parse().ok()?))
        })
        .collect()
}

/// The sum of every sample of `name` whose labels include each of `labels`.
fn sum(samples: &BTreeMap<String, f64>, name: &str, labels: &[&str]) -> f64 {
    samples
        .iter()
        .filter(|(series, _)| {
            series.split_once('{').map_or(series.as_str(), |(n, _)| n) == name
                && labels.iter().all(|l| series.contains(l))
        })
        .map(|(_, v)| v)
        .sum()
}

async fn scrape(url: &str) -> BTreeMap<String, f64> {
    let r = reqwest::get(format!("{url}/metrics")).await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let kind = r.headers()["content-type"].to_str().unwrap().to_string();
    assert!(kind.starts_with("application/openmetrics-text"), "{kind}");
    let text = r.text().await.unwrap();
    assert!(text.ends_with("# EOF\n"), "{text}");
    samples(&text)
}

/// One intent replayed twice and conflicting once, one step that takes three attempts, one
/// lease expiry, one trap and one review: each moves its series by exactly that much.
#[tokio::test(flavor = "multi_thread")]
async fn each_metric_moves_by_what_happened() {
    let sim = ProviderSim::start(
        SimConfig::new(PROVIDER_TOKEN),
        "127.0.0.1:0".parse().unwrap(),
    )
    .await
    .unwrap();
    let metrics_port = free_port();
    let options = |dir, failpoint: bool| HostOptions {
        config: format!(
            "metrics_listen = \"127.0.0.1:{metrics_port}\"\n[limits]\nlease = \"500ms\"\n{HOSTILE_ALLOWANCE}"
        ),
        workflows: vec![("hostile-call.toml".into(), HOSTILE.into())],
        env: if failpoint {
            vec![("DOCKET_FAILPOINT".into(), "checkpoint-2".into())]
        } else {
            Vec::new()
        },
        dir,
        provider: Some(sim.base_url()),
        ..HostOptions::default()
    };

    // A host dies holding the lease of a delivery; the next host's recovery closes it.
    let mut crashing = HostProcess::start(options(None, true)).await;
    let (status, crashed) = crashing
        .submit("document-delivery", "crashed", document("Crashed"))
        .await;
    assert_eq!(status, 201, "{crashed}");
    crashing.wait_exit(Duration::from_secs(60)).await;
    let dir = crashing.kill();
    let host = HostProcess::start(options(Some(dir), false)).await;
    let crashed = crashed["workflow_id"].as_str().unwrap();
    host.wait_for(crashed, &["completed"], Duration::from_secs(30))
        .await;
    let metrics_url = format!("http://127.0.0.1:{metrics_port}");
    let before = scrape(&metrics_url).await;
    assert_eq!(sum(&before, "docket_lease_expiries_total", &[]), 1.0);

    // One intent: created once, replayed twice, in conflict once; its delivery is refused
    // twice by an unavailable provider and accepted the third time.
    sim.sim()
        .set_faults(json!({"unavailable_next": 2, "retry_after_s": 0}))
        .unwrap();
    let (status, created) = host.submit("document-delivery", "m-1", document("M")).await;
    assert_eq!(status, 201, "{created}");
    for _ in 0..2 {
        let (status, _) = host.submit("document-delivery", "m-1", document("M")).await;
        assert_eq!(status, 200);
    }
    let (status, _) = host
        .submit("document-delivery", "m-1", document("Other"))
        .await;
    assert_eq!(status, 409);
    let id = created["workflow_id"].as_str().unwrap();
    let wf = host
        .wait_for(id, &["completed"], Duration::from_secs(60))
        .await;
    assert_eq!(wf["steps"][2]["attempts"], 3, "{wf:#}");

    // A plugin that panics: a trap, and (its effect unknown) a workflow in review.
    let (status, hostile) = host
        .submit("hostile-call", "trap-1", json!({"do": "panic"}))
        .await;
    assert_eq!(status, 201, "{hostile}");
    let hostile = host
        .wait_for(
            hostile["workflow_id"].as_str().unwrap(),
            &["needs_review", "failed"],
            Duration::from_secs(30),
        )
        .await;
    assert_eq!(hostile["state"], "needs_review", "{hostile:#}");

    let after = scrape(&metrics_url).await;
    let moved =
        |name: &str, labels: &[&str]| sum(&after, name, labels) - sum(&before, name, labels);
    assert_eq!(moved("docket_intents_total", &["result=\"created\""]), 2.0);
    assert_eq!(moved("docket_intents_total", &["result=\"replayed\""]), 2.0);
    assert_eq!(moved("docket_intents_total", &["result=\"conflict\""]), 1.0);
    assert_eq!(
        moved(
            "docket_attempts_total",
            &["workflow=\"document-delivery\"", "step=\"deliver\""]
        ),
        3.0
    );
    assert_eq!(
        moved(
            "docket_attempts_total",
            &["step=\"deliver\"", "outcome=\"accepted\""]
        ),
        1.0
    );
    assert_eq!(
        moved("docket_attempts_total", &["workflow=\"hostile-call\""]),
        1.0
    );
    assert_eq!(moved("docket_plugin_traps_total", &["kind=\"trap\""]), 1.0);
    assert_eq!(moved("docket_lease_expiries_total", &[]), 0.0);
    assert_eq!(sum(&after, "docket_review_queue", &[]), 1.0);
    assert_eq!(
        sum(&after, "docket_workflows", &["state=\"needs_review\""]),
        1.0
    );
    assert_eq!(sum(&after, "docket_outcome_unknown_steps", &[]), 1.0);
    // Ended workflows are tallied by the store: the crashed one and m-1.
    assert_eq!(
        sum(
            &after,
            "docket_workflows_ended_total",
            &["workflow=\"document-delivery\"", "state=\"completed\""]
        ),
        2.0
    );
    assert_eq!(moved("docket_time_to_outcome_seconds_count", &[]), 1.0);
    assert_eq!(sum(&after, "docket_attempts_per_workflow_count", &[]), 2.0);
    // m-1 used five attempts (validate, render, three deliveries): in the `le="5.0"`
    // bucket and not below.
    assert_eq!(
        moved("docket_attempts_per_workflow_bucket", &["le=\"5.0\""])
            - moved("docket_attempts_per_workflow_bucket", &["le=\"4.0\""]),
        1.0
    );
    // The host's log names the workflow, step and attempt of each line an attempt logs, and
    // never the external request identity in full.
    let attempts = host.attempts(id, "deliver").await;
    let identity = attempts[0]["request_identity"].as_str().unwrap();
    let log = host.log_text();
    let line = log
        .lines()
        .find(|l| l.contains("creating delivery with key") && l.contains(id))
        .unwrap_or_else(|| panic!("no delivery line of {id} in:\n{log}"));
    for field in ["attempt", "step", "workflow"] {
        assert!(line.contains(field), "{field} missing: {line}");
    }
    assert!(
        line.contains(&attempts[0]["attempt_id"].as_str().unwrap()[..8]),
        "{line}"
    );
    assert!(
        !log.contains(identity),
        "the full identity {identity} is in the log"
    );
    // The API's /metrics serves the same series to its operators (open mode: local).
    let (status, _) = host.get("/healthz").await;
    assert_eq!(status, 200);
    let api = scrape(&host.url).await;
    assert!(api.contains_key("docket_review_queue"));
}

/// A TCP proxy the test can cut: cutting closes every connection through it and refuses
/// new ones until it is restored, as a database that went away would.
struct CuttableProxy {
    addr: std::net::SocketAddr,
    state: std::sync::Arc<std::sync::Mutex<tokio_util::sync::CancellationToken>>,
    cut: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl CuttableProxy {
    async fn start(upstream: std::net::SocketAddr) -> Self {
        use std::sync::atomic::Ordering;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = std::sync::Arc::new(std::sync::Mutex::new(
            tokio_util::sync::CancellationToken::new(),
        ));
        let cut = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (accept_state, accept_cut) = (state.clone(), cut.clone());
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                if accept_cut.load(Ordering::SeqCst) {
                    continue;
                }
                let token = accept_state.lock().unwrap().clone();
                tokio::spawn(async move {
                    let Ok(mut server) = tokio::net::TcpStream::connect(upstream).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                        _ = token.cancelled() => {}
                    }
                });
            }
        });
        Self { addr, state, cut }
    }

    fn cut(&self) {
        self.cut.store(true, std::sync::atomic::Ordering::SeqCst);
        self.state.lock().unwrap().cancel();
    }

    fn restore(&self) {
        *self.state.lock().unwrap() = tokio_util::sync::CancellationToken::new();
        self.cut.store(false, std::sync::atomic::Ordering::SeqCst);
    }
}

/// `/readyz` answers `503` naming the store while PostgreSQL cannot be reached, and `200`
/// again once it can; `/healthz` answers throughout, and the host stays up.
#[tokio::test(flavor = "multi_thread")]
async fn readiness_follows_the_database() {
    let database = crate::postgres::TestDatabase::create().await;
    let url = reqwest::Url::parse(&database.url).unwrap();
    let upstream = format!("{}:{}", url.host_str().unwrap(), url.port().unwrap_or(5432));
    let proxy = CuttableProxy::start(upstream.parse().unwrap()).await;
    let proxied = database.url.replacen(&upstream, &proxy.addr.to_string(), 1);
    let host = HostProcess::start(HostOptions {
        db: Some(proxied),
        pause_execution: true,
        ..HostOptions::default()
    })
    .await;
    let (status, ready) = host.get("/readyz").await;
    assert_eq!(status, 200, "{ready}");
    assert_eq!(ready["store"], "ok");
    assert!(
        ready["tasks"]
            .as_array()
            .unwrap()
            .contains(&json!("scheduler")),
        "{ready}"
    );

    proxy.cut();
    crate::wait::until("readiness to fail", Duration::from_secs(20), || async {
        match host.get("/readyz").await {
            (503, body)
                if body["store"]
                    .as_str()
                    .unwrap_or("")
                    .contains("the store does not answer") =>
            {
                // The driver's error text stays in the host's log: no address, no port,
                // no database name for an unauthenticated caller.
                let text = body.to_string();
                assert!(
                    !text.contains(&proxy.addr.port().to_string()) && !text.contains("docket_"),
                    "{text}"
                );
                Ok(())
            }
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let (status, _) = host.get("/healthz").await;
    assert_eq!(status, 200);

    proxy.restore();
    crate::wait::until("readiness to return", Duration::from_secs(30), || async {
        match host.get("/readyz").await {
            (200, _) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    drop(host);
    database.drop_now().await;
}

/// On the API's listener `/metrics` is an operator's; the metrics listener serves any
/// scraper that reaches it, and the health checks need no token anywhere.
#[tokio::test(flavor = "multi_thread")]
async fn metrics_are_for_operators_or_the_metrics_listener() {
    let metrics_port = free_port();
    let host = HostProcess::start(HostOptions {
        config: format!(
            "metrics_listen = \"127.0.0.1:{metrics_port}\"\n[[tokens]]\ntoken = \"client-token-0123456789\"\nsubject = \"team-a\"\nrole = \"client\"\n[[tokens]]\ntoken = \"operator-token-0123456789\"\nsubject = \"alice\"\nrole = \"operator\"\n"
        ),
        pause_execution: true,
        ..HostOptions::default()
    })
    .await;
    let status = |url: String, token: Option<&'static str>| async move {
        let mut r = reqwest::Client::new().get(url);
        if let Some(t) = token {
            r = r.bearer_auth(t);
        }
        r.send().await.unwrap().status().as_u16()
    };
    let api = format!("{}/metrics", host.url);
    assert_eq!(status(api.clone(), None).await, 401);
    assert_eq!(
        status(api.clone(), Some("client-token-0123456789")).await,
        403
    );
    assert_eq!(status(api, Some("operator-token-0123456789")).await, 200);
    let listener = format!("http://127.0.0.1:{metrics_port}");
    assert_eq!(status(format!("{listener}/metrics"), None).await, 200);
    assert_eq!(status(format!("{listener}/readyz"), None).await, 200);
    assert_eq!(status(format!("{listener}/v1/workflows"), None).await, 404);
    assert_eq!(status(format!("{}/healthz", host.url), None).await, 200);
    assert_eq!(status(format!("{}/readyz", host.url), None).await, 200);
}

/// Runs a statement on the test's database (a SQLite file or PostgreSQL).
pub(crate) async fn corrupt(db: &str, sql: &str) {
    if db.starts_with("postgres") {
        let pool = sqlx::PgPool::connect(db).await.unwrap();
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_string()))
            .execute(&pool)
            .await
            .unwrap();
        pool.close().await;
    } else {
        let pool = sqlx::SqlitePool::connect(&format!("sqlite://{db}"))
            .await
            .unwrap();
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_string()))
            .execute(&pool)
            .await
            .unwrap();
        pool.close().await;
    }
}

/// `docket check` on `db`: its exit code and output.
pub fn docket_check(db: &str, repair: bool) -> (i32, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_docket"))
        .args(["check", "--db", db])
        .args(repair.then_some("--repair"))
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// The count a check's table gives `invariant`.
fn count(output: &str, invariant: &str) -> u64 {
    output
        .lines()
        .find_map(|l| {
            let mut parts = l.split_whitespace();
            (parts.next() == Some(invariant)).then(|| parts.next()?.parse().ok())?
        })
        .unwrap_or_else(|| panic!("no row for {invariant} in:\n{output}"))
}

/// `docket check` passes on a healthy store, finds each broken invariant, and `--repair`
/// rebuilds a contradicted state once, telling it on the timeline.
async fn check_finds_each_violation_and_repairs_once(db: Option<String>) {
    let host = HostProcess::start(HostOptions {
        db: db.clone(),
        ..HostOptions::default()
    })
    .await;
    let mut ids = Vec::new();
    for key in ["ok-1", "ok-2", "ok-3", "ok-4"] {
        let (status, created) = host.submit("document-delivery", key, document(key)).await;
        assert_eq!(status, 201, "{created}");
        let id = created["workflow_id"].as_str().unwrap().to_string();
        host.wait_for(&id, &["completed"], Duration::from_secs(30))
            .await;
        ids.push(id);
    }
    let dir = host.kill();
    let db = db.unwrap_or_else(|| dir.path().join("docket.db").display().to_string());

    let (code, out) = docket_check(&db, false);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("checked 4 workflows"), "{out}");

    let (one, two, three, four) = (&ids[0], &ids[1], &ids[2], &ids[3]);
    corrupt(
        &db,
        &format!(
            "UPDATE steps SET receipt_id = NULL WHERE workflow_id = '{one}' AND step = 'validate';
             UPDATE attempts SET input_digest = 'sha256:{zero}' WHERE workflow_id = '{one}' AND step = 'render';
             UPDATE attempts SET started_at = started_at - 3600000 WHERE workflow_id = '{two}' AND step = 'deliver';
             DELETE FROM timeline WHERE workflow_id = '{two}' AND seq = 2;
             INSERT INTO receipts (receipt_id, workflow_id, step, attempt_id, evidence_kind, component,
                 component_version, component_digest, input_digest, external_reference, output, recorded_at)
               SELECT 'rcp_second', workflow_id, step, attempt_id, evidence_kind, component,
                 component_version, component_digest, input_digest, 'dlv_other', output, recorded_at
               FROM receipts WHERE workflow_id = '{three}' AND step = 'deliver';
             UPDATE workflows SET state = 'running', ended_at = NULL WHERE workflow_id = '{three}';
             UPDATE steps SET state = 'running', lease_owner = 'ghost-host', lease_token = 'ghost',
                 lease_expires_at = 1000 WHERE workflow_id = '{four}' AND step = 'deliver';
             UPDATE workflows SET state = 'running', ended_at = NULL WHERE workflow_id = '{four}';",
            zero = "0".repeat(64)
        ),
    )
    .await;

    let (code, out) = docket_check(&db, false);
    assert_eq!(code, 1, "{out}");
    for invariant in [
        "receipt_for_success",
        "attempt_input_digest",
        "dependent_after_receipt",
        "timeline_grows",
        "one_external_reference",
        "projection_matches",
        "lease_recovered",
    ] {
        assert_eq!(count(&out, invariant), 1, "{invariant}:\n{out}");
    }
    assert!(out.contains("docket check --repair"), "{out}");

    // The repair rebuilds the contradicted state once; the rest cannot be rebuilt.
    let (code, out) = docket_check(&db, true);
    assert_eq!(code, 1, "{out}");
    assert_eq!(count(&out, "projection_matches"), 0, "{out}");
    assert!(
        out.contains(&format!(
            "repaired {three}: stored as running, rebuilt as completed"
        )),
        "{out}"
    );
    let (code, again) = docket_check(&db, true);
    assert_eq!(code, 1, "{again}");
    assert!(!again.contains("repaired"), "{again}");
    assert_eq!(count(&again, "projection_matches"), 0, "{again}");
    assert_eq!(count(&again, "one_external_reference"), 1, "{again}");

    // The repair is on the timeline, once.
    let host = HostProcess::start(HostOptions {
        db: db.starts_with("postgres").then(|| db.clone()),
        dir: Some(dir),
        pause_execution: true,
        ..HostOptions::default()
    })
    .await;
    let (_, timeline) = host
        .get(&format!("/v1/workflows/{three}/timeline?limit=500"))
        .await;
    let repairs = timeline["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| {
            e["text"]
                .as_str()
                .unwrap()
                .starts_with("Repaired by docket check --repair")
        })
        .count();
    assert_eq!(repairs, 1, "{timeline:#}");
}

/// The host checks its own records each `check_interval`: a contradicted state shows in
/// `docket_consistency_violations`.
#[tokio::test(flavor = "multi_thread")]
async fn the_hosts_own_check_feeds_the_violations_gauge() {
    let host = HostProcess::start(HostOptions {
        config: "[limits]\ncheck_interval = \"1s\"\n".into(),
        ..HostOptions::default()
    })
    .await;
    let (status, created) = host
        .submit("document-delivery", "gauge-1", document("Gauge"))
        .await;
    assert_eq!(status, 201, "{created}");
    let id = created["workflow_id"].as_str().unwrap();
    host.wait_for(id, &["completed"], Duration::from_secs(30))
        .await;
    let gauge = "docket_consistency_violations{invariant=\"projection_matches\"}";
    crate::wait::until("a clean check", Duration::from_secs(30), || async {
        match scrape(&host.url).await.get(gauge) {
            Some(0.0) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let db = host.path().join("docket.db").display().to_string();
    corrupt(
        &db,
        &format!(
            "UPDATE workflows SET state = 'running', ended_at = NULL WHERE workflow_id = '{id}'"
        ),
    )
    .await;
    crate::wait::until(
        "the violation to be counted",
        Duration::from_secs(30),
        || async {
            match scrape(&host.url).await.get(gauge) {
                Some(1.0) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
}

/// Retention purges exactly the ended workflows past it whose key expired too, with all
/// their records; `docket export` keeps a workflow's story before; `/metrics`, the API
/// and `docket check` stay correct after.
async fn retention_purges_exactly_what_is_past_it(db: Option<String>) {
    let host = HostProcess::start(HostOptions {
        db: db.clone(),
        config: "[limits]\nworkflow_retention = \"1h\"\nkey_retention = \"2h\"\n".into(),
        ..HostOptions::default()
    })
    .await;
    let settle = |key: &'static str| {
        let host = &host;
        async move {
            let (status, created) = host.submit("document-delivery", key, document(key)).await;
            assert_eq!(status, 201, "{created}");
            let id = created["workflow_id"].as_str().unwrap().to_string();
            host.wait_for(&id, &["completed"], Duration::from_secs(30))
                .await;
            id
        }
    };
    let old = [settle("old-1").await, settle("old-2").await];
    let database = db
        .clone()
        .unwrap_or_else(|| host.path().join("docket.db").display().to_string());

    // Archived first: the whole story as JSON.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_docket"))
        .args(["export", &old[0], "--db", &database])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let story: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(story["workflow"]["workflow_id"], old[0].as_str());
    assert_eq!(story["steps"].as_array().unwrap().len(), 3, "{story:#}");
    assert_eq!(story["receipts"].as_array().unwrap().len(), 3, "{story:#}");
    assert_eq!(story["attempts"].as_array().unwrap().len(), 3, "{story:#}");
    assert!(story["timeline"].as_array().unwrap().len() > 5, "{story:#}");

    // Past the retention but not past the key's: kept, so a replay still finds it.
    host.advance_clock(90 * 60 * 1000).await;
    host.wait_ticks("retention", 2).await;
    for id in &old {
        let (status, _) = host.get(&format!("/v1/workflows/{id}")).await;
        assert_eq!(status, 200, "{id} went before its key expired");
    }
    // Past both, and past the day in which their notifications were to be sent (no
    // endpoint took them): purged. A workflow that ended just now stays.
    host.advance_clock(24 * 60 * 60 * 1000).await;
    let young = settle("young-1").await;
    crate::wait::until(
        "the old workflows to go",
        Duration::from_secs(30),
        || async {
            let mut left = Vec::new();
            for id in &old {
                if host.get(&format!("/v1/workflows/{id}")).await.0 != 404 {
                    left.push(id.clone());
                }
            }
            if left.is_empty() {
                Ok(())
            } else {
                Err(format!("{left:?}"))
            }
        },
    )
    .await;
    host.wait_ticks("retention", 2).await;
    let (status, kept) = host.get(&format!("/v1/workflows/{young}")).await;
    assert_eq!(status, 200, "{kept}");
    let (_, listed) = host.get("/v1/workflows?limit=100").await;
    let ids: Vec<&str> = listed["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["workflow_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [young.as_str()], "{listed:#}");
    // The tallies of ended workflows outlive them.
    let metrics = scrape(&host.url).await;
    assert_eq!(
        metrics.get(
            "docket_workflows_ended_total{workflow=\"document-delivery\",state=\"completed\"}"
        ),
        Some(&3.0)
    );
    let (code, out) = docket_check(&database, false);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("checked 1 workflows"), "{out}");
    // Nothing of them is left in any table.
    let (status, _) = host
        .get(&format!("/v1/workflows/{}/timeline", old[0]))
        .await;
    assert_eq!(status, 404);
}

on_both_stores!(
    check_finds_each_violation_and_repairs_once,
    retention_purges_exactly_what_is_past_it,
    one_workflow_is_one_trace_with_each_attempt_a_span
);

/// Spans an in-process OTLP/HTTP (JSON) collector received.
#[derive(Clone, Default)]
struct Collector {
    spans: std::sync::Arc<std::sync::Mutex<Vec<serde_json::Value>>>,
}

impl Collector {
    async fn start() -> (Self, String) {
        let collector = Self::default();
        let kept = collector.clone();
        let app = axum::Router::new().route(
            "/v1/traces",
            axum::routing::post(move |body: axum::body::Bytes| {
                let kept = kept.clone();
                async move {
                    let request: serde_json::Value = serde_json::from_slice(&body).unwrap();
                    let mut spans = kept.spans.lock().unwrap();
                    for resource in request["resourceSpans"].as_array().into_iter().flatten() {
                        for scope in resource["scopeSpans"].as_array().into_iter().flatten() {
                            spans.extend(scope["spans"].as_array().into_iter().flatten().cloned());
                        }
                    }
                    "{}"
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        (collector, url)
    }

    fn spans(&self) -> Vec<serde_json::Value> {
        self.spans.lock().unwrap().clone()
    }
}

/// A span attribute's string value.
fn attribute<'a>(span: &'a serde_json::Value, key: &str) -> Option<&'a str> {
    span["attributes"]
        .as_array()?
        .iter()
        .find(|a| a["key"] == key)?["value"]["stringValue"]
        .as_str()
}

/// One workflow through a lost response and a recovery query is one trace under the
/// client's `traceparent`: the admission's span, and each attempt a span of its own under it
/// (the trace is kept with the workflow, so its claims carry it on either store).
async fn one_workflow_is_one_trace_with_each_attempt_a_span(db: Option<String>) {
    let (collector, endpoint) = Collector::start().await;
    let host = HostProcess::start(HostOptions {
        db,
        env: vec![
            ("OTEL_EXPORTER_OTLP_ENDPOINT".into(), endpoint),
            ("OTEL_EXPORTER_OTLP_PROTOCOL".into(), "http/json".into()),
            ("OTEL_BSP_SCHEDULE_DELAY".into(), "100".into()),
        ],
        ..HostOptions::default()
    })
    .await;
    host.faults(json!({"lose_next": 1})).await;
    let (trace, parent) = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
    let created: serde_json::Value = reqwest::Client::new()
        .post(format!("{}/v1/intents", host.url))
        .header("Idempotency-Key", "traced-1")
        .header("traceparent", format!("00-{trace}-{parent}-01"))
        .json(&json!({"workflow": "document-delivery", "input": document("Traced")}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = created["workflow_id"].as_str().unwrap().to_string();
    host.wait_for(&id, &["completed"], Duration::from_secs(30))
        .await;
    let attempts = host.attempts(&id, "deliver").await;
    assert!(attempts.len() >= 2, "{attempts:#?}");
    let spans = crate::wait::until(
        "the spans to be exported",
        Duration::from_secs(30),
        || async {
            let spans = collector.spans();
            let delivered = spans
                .iter()
                .filter(|s| s["name"] == "attempt" && attribute(s, "step") == Some("deliver"))
                .count();
            if delivered >= attempts.len() && spans.iter().any(|s| s["name"] == "admission") {
                Ok(spans)
            } else {
                Err(format!("{} spans so far", spans.len()))
            }
        },
    )
    .await;
    let admission = spans.iter().find(|s| s["name"] == "admission").unwrap();
    assert_eq!(admission["traceId"], trace, "{admission:#}");
    assert_eq!(admission["parentSpanId"], parent, "{admission:#}");
    let mine: Vec<&serde_json::Value> = spans
        .iter()
        .filter(|s| s["name"] == "attempt" && attribute(s, "workflow") == Some(id.as_str()))
        .collect();
    // validate, render and every delivery attempt: one trace, each a child of the admission.
    assert_eq!(mine.len(), 2 + attempts.len(), "{mine:#?}");
    for span in &mine {
        assert_eq!(span["traceId"], trace, "{span:#}");
        assert_eq!(span["parentSpanId"], admission["spanId"], "{span:#}");
    }
    let mut ids: Vec<&str> = mine.iter().map(|s| s["spanId"].as_str().unwrap()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), mine.len(), "each attempt is a span of its own");
    let triggers: Vec<&str> = mine
        .iter()
        .filter(|s| attribute(s, "step") == Some("deliver"))
        .filter_map(|s| attribute(s, "trigger"))
        .collect();
    assert!(
        triggers.contains(&"initial") && triggers.contains(&"recovery_query"),
        "{triggers:?}"
    );
}

/// The binary allocates with jemalloc, configured for a small machine in `host/src/main.rs`
/// (two arenas, freed pages given back after a second): jemalloc's statistics, printed at
/// exit when the environment asks, show those options in force.
#[test]
fn the_binary_allocates_with_jemalloc_and_its_built_in_options() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_docket"))
        .arg("--version")
        .env("MALLOC_CONF", "stats_print:true")
        .output()
        .unwrap();
    assert!(out.status.success());
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    for option in [
        "opt.narenas: 2",
        "opt.dirty_decay_ms: 1000",
        "opt.muzzy_decay_ms: 0",
    ] {
        assert!(printed.contains(option), "`{option}` not in:\n{printed}");
    }
}

/// A stop asked before the host runs (as `docket demo` asks it once its tour is over) is an
/// orderly shutdown, even when its tasks have already returned on seeing it. Four hosts:
/// the stop and a task's end were both ready, and one in three runs took the end.
#[tokio::test(flavor = "multi_thread")]
async fn a_stop_asked_before_the_host_runs_is_an_orderly_shutdown() {
    for round in 0..4 {
        let dir = tempfile::tempdir().unwrap();
        let mut config = docket::config::HostConfig::load(None).unwrap();
        config.workflows = dir.path().join("workflows");
        std::fs::create_dir_all(&config.workflows).unwrap();
        let options = docket::app::Options {
            listen: Some("127.0.0.1:0".parse().unwrap()),
            db: Some(dir.path().join("docket.db").display().to_string()),
            ..docket::app::Options::default()
        };
        let host = docket::app::App::build(&options, config).await.unwrap();
        host.stopper().cancel();
        // The tasks see the stop and return before the host is run.
        crate::wait::until(
            "every task to return on the stop",
            Duration::from_secs(30),
            || async {
                match host.unfinished_tasks() {
                    running if running.is_empty() => Ok(()),
                    running => Err(format!("still running: {running:?}")),
                }
            },
        )
        .await;
        tokio::time::timeout(Duration::from_secs(30), host.run(std::future::pending()))
            .await
            .expect("the host stops")
            .unwrap_or_else(|e| panic!("round {round}: an asked stop ended as a failure: {e}"));
    }
}
