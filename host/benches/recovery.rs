//! Recovery after SIGKILL: 1,000 `document-delivery` workflows are in flight — every
//! delivery committed at the provider, every answer still pending — when the host is killed.
//! The bench restarts it on the same database and measures how long until every workflow
//! progresses again (its delivery step is taken over by recovery) and until every one is
//! completed, each by a query that finds the committed delivery.
//!
//! The dead host's leases would expire on their own after the lease duration (30 s by
//! default); the bench moves the restarted host's clock past them at once (test controls),
//! so the figure is the host's own recovery work, not the lease wait.
//!
//! Run: `cargo bench --bench recovery` (optional argument: workflows, default 1000).

use docket::sim::{ProviderSim, SimConfig};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const TOKEN: &str = "bench-provider-token";
const CLIENTS: usize = 32;

fn spawn(dir: &Path, port: u16) -> Child {
    let mut child = Command::new(env!("CARGO_BIN_EXE_docket"))
        .args([
            "serve",
            "--test-controls",
            "--listen",
            &format!("127.0.0.1:{port}"),
        ])
        .args(["--db", &dir.join("bench.db").display().to_string()])
        .args(["--config", &dir.join("docket.toml").display().to_string()])
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .env("DOCKET_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let line = BufReader::new(stdout).lines().next().unwrap().unwrap();
    assert!(line.starts_with("docket listening on"), "{line}");
    child
}

/// How many workflows are completed (following the list's pages).
async fn completed(client: &reqwest::Client, base: &str) -> usize {
    let mut count = 0;
    let mut cursor: Option<String> = None;
    loop {
        let mut url = format!("{base}/v1/workflows?state=completed&limit=500");
        if let Some(c) = &cursor {
            url.push_str(&format!("&cursor={c}"));
        }
        let page: Value = client.get(&url).send().await.unwrap().json().await.unwrap();
        count += page["data"].as_array().unwrap().len();
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => return count,
        }
    }
}

fn main() {
    let total: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let sim = ProviderSim::start(SimConfig::new(TOKEN), "127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let provider = sim.base_url();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("docket.toml"),
            format!(
                "workflows = \"workflows\"\n\
                 [secrets]\nvalues = {{ provider_token = {TOKEN:?} }}\n\
                 [adapters.http-delivery]\nallow_hosts = [{provider:?}]\nallow_secrets = [\"provider_token\"]\n\
                 settings = {{ base_url = {provider:?} }}\n\
                 [limits]\nmax_concurrent = {}\n",
                total + 64
            ),
        )
        .unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let base = format!("http://127.0.0.1:{port}");
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(CLIENTS)
            .build()
            .unwrap();

        // Every delivery is committed at once and answered only after ten minutes.
        sim.sim()
            .set_faults(json!({"slow": 1.0, "slow_ms": 600_000}))
            .unwrap();
        let mut host = spawn(dir.path(), port);
        let mut set = tokio::task::JoinSet::new();
        for c in 0..CLIENTS {
            let client = client.clone();
            let url = format!("{base}/v1/intents");
            set.spawn(async move {
                for i in (c..total).step_by(CLIENTS) {
                    let r = client
                        .post(&url)
                        .header("Idempotency-Key", format!("rec-{i}"))
                        .json(&json!({"workflow": "document-delivery",
                            "input": {"title": format!("Doc {i}"), "recipient": "a@example.com", "body": "x"}}))
                        .send()
                        .await
                        .unwrap();
                    assert_eq!(r.status(), 201);
                }
            });
        }
        while set.join_next().await.is_some() {}
        let filling = Instant::now();
        while sim.sim().world().len() < total {
            assert!(
                filling.elapsed() < Duration::from_secs(300),
                "only {} of {total} deliveries reached the provider",
                sim.sim().world().len()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // All in flight: SIGKILL.
        host.kill().unwrap();
        host.wait().unwrap();
        sim.sim().set_faults(json!({})).unwrap();
        println!(
            "recovery after SIGKILL: {total} workflows in flight (delivery committed, answer pending)"
        );

        let restart = Instant::now();
        let mut host = spawn(dir.path(), port);
        let listening = restart.elapsed();
        let r = client
            .post(format!("{base}/v1/_test/clock"))
            .header("Idempotency-Key", "clock-1")
            .json(&json!({"advance_ms": 31_000}))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "{}", r.text().await.unwrap());
        let mut first = None;
        loop {
            let completed = completed(&client, &base).await;
            if completed > 0 && first.is_none() {
                first = Some(restart.elapsed());
            }
            if completed >= total {
                break;
            }
            assert!(
                restart.elapsed() < Duration::from_secs(600),
                "{completed} of {total} completed"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let all = restart.elapsed();
        host.kill().unwrap();
        host.wait().unwrap();
        assert_eq!(sim.sim().world().len(), total, "a delivery was duplicated");
        println!("  restart until listening           {:>8.0} ms", listening.as_secs_f64() * 1e3);
        println!(
            "  restart until first completion    {:>8.0} ms",
            first.unwrap().as_secs_f64() * 1e3
        );
        println!("  restart until all {total} completed {:>8.0} ms", all.as_secs_f64() * 1e3);
        println!(
            "  provider record: {} deliveries for {total} intents (none duplicated)",
            sim.sim().world().len()
        );
    });
}
