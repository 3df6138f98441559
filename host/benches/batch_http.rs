//! A batch step as users see it, end to end over HTTP against a real `docket serve`
//! (release build, SQLite with fsync on every commit, the embedded provider simulator):
//! one workflow whose `deliver` step has ITEMS items (default 10,000), each an effect of
//! its own, sent through `http-delivery` 1.1.0 — whose contract takes up to 100 items per
//! `invoke-batch` call — with `max_parallel = 100`. Timed from the submission until the
//! store shows the workflow completed; items per second, the host's CPU per item and its
//! peak resident memory (the embedded simulator included). RUNS workflows (default 3), one
//! after another, on one host; the median is reported.
//!
//! Run: `cargo bench --bench batch_http [-- ITEMS [RUNS]]`.
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

fn main() {
    let mut args = std::env::args().skip(1).filter(|a| a != "--bench");
    let items: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(10_000);
    let runs: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(3);
    let dir = tempfile::tempdir().unwrap();
    let workflows = dir.path().join("workflows");
    std::fs::create_dir(&workflows).unwrap();
    std::fs::write(workflows.join("mailing.toml"), mailing(items)).unwrap();
    let db = dir.path().join("bench.db");
    let db_arg = db.display().to_string();
    let host = Host::start(&["--db", &db_arg], dir.path());
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
            "end to end over HTTP: docket serve (release), SQLite fsync on, embedded simulator; one workflow of {items} items, max_parallel = {MAX_PARALLEL}, http-delivery 1.1.0 (up to 100 items per call)"
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
}
