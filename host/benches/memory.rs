//! Resident memory of a real `docket serve` (release build, SQLite) holding many component
//! versions and many running workflows:
//!
//! 1. 50 versions of `http-delivery` are loaded: the shipped 1.0.0 and 49 more, each
//!    deployed over HTTP (`POST /v1/adapters`), activated, and run by one
//!    `document-delivery` workflow, so that every version has compiled code and linked
//!    instances in memory. `unload_idle` is an hour, so none is unloaded during the bench.
//!    The versions are the shipped component with its declared version rewritten in place
//!    (`1.0.0` → `1.a.b`, same length), so each has its own bytes and digest.
//! 2. RUNNING `document-delivery` workflows are submitted while the provider (a simulator
//!    in the bench process) holds every answer: each workflow stays `running`, its delivery
//!    in flight or waiting for a free slot (`max_concurrent`, default 128).
//!
//! The bench prints the host's resident memory (`VmRSS`) after each phase and its peak
//! (`VmHWM`), read from `/proc`.
//!
//! Run: `cargo bench --bench memory [-- RUNNING [MAX_CONCURRENT]]` (default 10000 and 128).

#[path = "support/adapters.rs"]
mod adapters;
#[path = "support/http.rs"]
mod http;

use docket::sim::{ProviderSim, SimConfig};
use http::{Conn, Host, peak_rss_mib, read_only, rss_mib};
use serde_json::{Value, json};
use std::path::Path;
use std::time::{Duration, Instant};

const TOKEN: &str = "bench-provider-token";
const VERSIONS: usize = 50;
const CLIENTS: usize = 32;

/// A count read from the host's database without writing.
fn count(db: &Path, sql: &str) -> usize {
    read_only(db)
        .query_row(sql, [], |r| r.get::<_, i64>(0))
        .unwrap() as usize
}

const RUNNING: &str = "SELECT count(*) FROM workflows WHERE state = 'running'";
/// Versions of `http-delivery` that have run an attempt.
const VERSIONS_RUN: &str =
    "SELECT count(DISTINCT component_digest) FROM attempts WHERE component = 'http-delivery'";

fn input(i: usize) -> String {
    format!(r#"{{"title":"Doc {i}","recipient":"a@example.com","body":"x"}}"#)
}

async fn post(client: &reqwest::Client, url: String, key: String, body: reqwest::Body) -> Value {
    let r = client
        .post(url)
        .header("Idempotency-Key", key)
        .header("Content-Type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    let status = r.status();
    let answer: Value = r.json().await.unwrap_or(Value::Null);
    assert!(status.is_success(), "{status}: {answer}");
    answer
}

fn main() {
    let mut args = std::env::args().skip(1).filter(|a| a != "--bench");
    let running: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(10_000);
    let max_concurrent: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(128);
    let shipped = std::fs::read(docket::guests::path("http-delivery").unwrap()).unwrap();
    assert_eq!(
        shipped.windows(5).filter(|w| w == b"1.0.0").count(),
        1,
        "the shipped http-delivery declares its version once"
    );
    let at = shipped.windows(5).position(|w| w == b"1.0.0").unwrap();

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let sim = ProviderSim::start(SimConfig::new(TOKEN), "127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let provider = sim.base_url();
        let adapters = adapters::delivery(&provider);
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("docket.toml");
        std::fs::write(
            &config,
            format!(
                "[secrets]\nvalues = {{ provider_token = {TOKEN:?} }}\n\
                 {adapters}\
                 [limits]\nmax_concurrent = {max_concurrent}\nunload_idle = \"1h\"\n"
            ),
        )
        .unwrap();
        let db = dir.path().join("bench.db");
        let host = Host::start(
            &[
                "--db",
                &db.display().to_string(),
                "--config",
                &config.display().to_string(),
            ],
            dir.path(),
        );
        let pid = host.pid();
        let base = format!("http://{}", host.addr);
        let client = reqwest::Client::new();
        let mut conn = Conn::open(&host.addr).await;
        println!("memory: {VERSIONS} versions of http-delivery, {running} running workflows, max_concurrent = {max_concurrent}");
        println!("  started                            {:>7.1} MiB", rss_mib(pid));

        // 1. Fifty versions, each run once.
        for v in 0..VERSIONS {
            let version = format!("1.{}.{}", v / 10, v % 10);
            if v > 0 {
                let mut patched = shipped.clone();
                patched[at..at + 5].copy_from_slice(version.as_bytes());
                let deployed = post(
                    &client,
                    format!("{base}/v1/adapters"),
                    format!("deploy-{v}"),
                    patched.into(),
                )
                .await;
                assert_eq!(deployed["version"], version.as_str(), "{deployed}");
                post(
                    &client,
                    format!("{base}/v1/adapters/http-delivery/activate"),
                    format!("activate-{v}"),
                    json!({ "version": version }).to_string().into(),
                )
                .await;
            }
            // Until a workflow has run this version (activation reaches the scheduler within a second).
            let waited = Instant::now();
            let mut n = 0;
            while count(&db, VERSIONS_RUN) <= v {
                let (status, body) = conn
                    .submit("document-delivery", &format!("version-{v}-{n}"), &input(n))
                    .await;
                assert_eq!(status, 201, "{}", String::from_utf8_lossy(&body));
                n += 1;
                assert!(waited.elapsed() < Duration::from_secs(30), "{version} never ran");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        let loaded = rss_mib(pid);
        println!("  {VERSIONS} versions loaded, each run     {loaded:>7.1} MiB");

        // 2. Running workflows whose deliveries are never answered.
        sim.sim()
            .set_faults(json!({"slow": 1.0, "slow_ms": 600_000}))
            .unwrap();
        let already = count(&db, RUNNING);
        let delivered = sim.sim().world().len();
        let mut set = tokio::task::JoinSet::new();
        for c in 0..CLIENTS {
            let addr = host.addr.clone();
            set.spawn(async move {
                let mut conn = Conn::open(&addr).await;
                for i in (c..running).step_by(CLIENTS) {
                    let (status, body) = conn
                        .submit("document-delivery", &format!("run-{i}"), &input(i))
                        .await;
                    assert_eq!(status, 201, "{}", String::from_utf8_lossy(&body));
                }
            });
        }
        while set.join_next().await.is_some() {}
        // Settled: every slot holds a delivery in flight (or every workflow has one).
        let in_flight = running.min(max_concurrent);
        let settling = Instant::now();
        while sim.sim().world().len() < delivered + in_flight {
            assert!(
                settling.elapsed() < Duration::from_secs(120),
                "only {} deliveries reached the provider",
                sim.sim().world().len()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now_running = count(&db, RUNNING);
        assert!(now_running >= running + already, "{now_running} running");
        println!(
            "  {now_running} running, {} deliveries in flight {:>7.1} MiB",
            sim.sim().world().len() - delivered,
            rss_mib(pid)
        );
        println!("  peak (VmHWM)                       {:>7.1} MiB", peak_rss_mib(pid));
        drop(host);
    });
}
