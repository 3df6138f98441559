//! A batch step as users see it, end to end over HTTP against a real `docket serve`
//! (release build, SQLite with fsync on every commit, the provider simulator as a process
//! of its own, `docket sim-provider`):
//! one workflow whose `deliver` step has ITEMS items (default 10,000), each an effect of
//! its own, sent through `http-delivery` 1.1.0 — whose contract takes up to 100 items per
//! `invoke-batch` call — with `max_parallel = 100`. Timed from the submission until the
//! store shows the workflow completed; items per second, the host's CPU per item and its
//! peak resident memory. RUNS workflows (default 3), one
//! after another, on one host; the median is reported.
//!
//! Run: `cargo bench --bench batch_http [-- ITEMS [RUNS [embedded]]]`; `embedded` runs
//! the host's built-in simulator instead (its work and record then count as the host's).
//! `DOCKET_BENCH_HOST=<path>` runs another build's `docket` under the same load.

#[path = "support/http.rs"]
mod http;

use http::{Conn, Host, cpu_time, peak_rss_mib};
use std::path::Path;
use std::time::{Duration, Instant};

const MAX_PARALLEL: usize = 100;

fn mailing(items: usize) -> String {
    format!(
        r#"name = "mailing"
version = 1
deadline = "1h"
# Each item's attempts and calls count.
[budget]
max_attempts = {budget}
max_external_calls = {budget}
max_runtime = "1h"
[input_schema]
type = "object"
[[steps]]
id = "deliver"
label = "Deliver to each recipient"
kind = "adapter"
component = "http-delivery"
version = "^1"
for_each = "$input.recipients"
item_key = "$item.email"
max_parallel = {MAX_PARALLEL}
outputs = ["id", "client_reference", "status", "replayed"]
[steps.input]
recipient = "$item.email"
document = "$input.document"
document_digest = "$input.document"
[steps.capabilities]
outbound_hosts = ["$base_url"]
secrets = ["provider_token"]
"#,
        budget = items * 3
    )
}

fn input(run: usize, items: usize) -> String {
    let recipients: Vec<String> = (0..items)
        .map(|i| format!(r#"{{"email":"r{run}-{i}@example.com"}}"#))
        .collect();
    format!(
        r#"{{"document":"December","recipients":[{}]}}"#,
        recipients.join(",")
    )
}

fn state(db: &Path, id: &str) -> String {
    http::read_only(db)
        .query_row(
            "SELECT state FROM workflows WHERE workflow_id = ?1",
            [id],
            |r| r.get::<_, String>(0),
        )
        .unwrap()
}

fn docket(args: &[&str]) {
    let host = std::env::var_os("DOCKET_BENCH_HOST")
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_docket").into());
    let out = std::process::Command::new(host)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "docket {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `docket sim-provider` on a free port, killed when dropped.
struct Provider {
    child: std::process::Child,
    url: String,
}

impl Provider {
    fn start() -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let listen = format!("127.0.0.1:{port}");
        let host = std::env::var_os("DOCKET_BENCH_HOST")
            .unwrap_or_else(|| env!("CARGO_BIN_EXE_docket").into());
        let child = std::process::Command::new(host)
            .args(["sim-provider", "--listen", &listen])
            .env("DOCKET_LOG", "warn")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let started = Instant::now();
        while std::net::TcpStream::connect(&listen).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "the provider simulator did not listen on {listen}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Self {
            child,
            url: format!("http://{listen}"),
        }
    }
}

impl Drop for Provider {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn main() {
    let mut args = std::env::args().skip(1).filter(|a| a != "--bench");
    let items: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(10_000);
    let runs: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(3);
    let embedded = args.next().as_deref() == Some("embedded");
    let dir = tempfile::tempdir().unwrap();
    let workflows = dir.path().join("workflows");
    std::fs::create_dir(&workflows).unwrap();
    std::fs::write(workflows.join("mailing.toml"), mailing(items)).unwrap();
    // The provider runs as a process of its own, as a real one does: the host's memory and
    // CPU below are the host's alone (the simulator's record of 10,000s of deliveries and
    // their keys would otherwise count as the host's). `embedded` measures the host with
    // its built-in simulator instead, as a development host runs.
    let provider = (!embedded).then(Provider::start);
    let config = dir.path().join("docket.toml");
    let settings = match &provider {
        Some(p) => format!(
            "[secrets]\nvalues = {{ provider_token = \"docket-sim-token\" }}\n\
             [adapters.http-delivery]\nallow_hosts = [{url:?}]\nallow_secrets = [\"provider_token\"]\n\
             settings = {{ base_url = {url:?} }}\n",
            url = p.url
        ),
        None => String::new(),
    };
    std::fs::write(&config, settings).unwrap();
    let db = dir.path().join("bench.db");
    let db_arg = db.display().to_string();
    let config_arg = config.display().to_string();
    let host = Host::start(&["--db", &db_arg, "--config", &config_arg], dir.path());
    let server = host.pid();
    // The bulk-capable version, deployed and made active (the host picks it up).
    docket(&[
        "adapter",
        "deploy",
        "http-delivery-batching",
        "--db",
        &db_arg,
    ]);
    docket(&[
        "adapter",
        "activate",
        "http-delivery@1.1.0",
        "--db",
        &db_arg,
    ]);
    std::thread::sleep(Duration::from_secs(2));

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        println!(
            "end to end over HTTP: docket serve (release), SQLite fsync on, provider simulator {}; one workflow of {items} items, max_parallel = {MAX_PARALLEL}, http-delivery 1.1.0 (up to 100 items per call)",
            if embedded { "embedded in the host" } else { "in its own process" }
        );
        let mut rates = Vec::new();
        let mut cpus = Vec::new();
        for run in 0..runs {
            let mut conn = Conn::open(&host.addr).await;
            let body = input(run, items);
            let cpu = cpu_time(server);
            let start = Instant::now();
            let (status, answer) = conn.submit("mailing", &format!("batch-{run}"), &body).await;
            assert_eq!(status, 201, "{}", String::from_utf8_lossy(&answer));
            let created: serde_json::Value = serde_json::from_slice(&answer).unwrap();
            let id = created["workflow_id"].as_str().unwrap().to_string();
            loop {
                match state(&db, &id).as_str() {
                    "completed" => break,
                    "running" => {}
                    other => panic!("the batch ended {other}"),
                }
                assert!(start.elapsed() < Duration::from_secs(600), "not completed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let elapsed = start.elapsed();
            let cpu = cpu_time(server) - cpu;
            let rate = items as f64 / elapsed.as_secs_f64();
            let per_item = cpu.as_secs_f64() * 1e6 / items as f64;
            println!(
                "  run {run}: {items} items in {:.2} s = {rate:.0} items/s; host CPU {per_item:.0} µs per item",
                elapsed.as_secs_f64()
            );
            rates.push(rate);
            cpus.push(per_item);
        }
        rates.sort_by(f64::total_cmp);
        cpus.sort_by(f64::total_cmp);
        println!(
            "  median {:.0} items/s, {:.0} µs of host CPU per item; peak resident memory of the host {:.0} MiB",
            rates[rates.len() / 2],
            cpus[cpus.len() / 2],
            peak_rss_mib(server)
        );
    });
    drop(host);
    drop(provider);
}
