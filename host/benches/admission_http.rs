//! Admission over HTTP: intents per second and latency percentiles with 64 concurrent
//! loopback clients against a real `docket serve` process (release build, SQLite with
//! fsync, step execution paused so only admission is measured), then the latency of
//! replaying a known key.
//!
//! Run: `cargo bench --bench admission_http` (optional argument: total intents, default 8000).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const CLIENTS: usize = 64;

fn pct(sorted: &[Duration], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p) as usize].as_secs_f64() * 1e3
}

fn main() {
    let total: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(8000);
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_docket"))
        .args([
            "serve",
            "--pause-execution",
            "--listen",
            &format!("127.0.0.1:{port}"),
        ])
        .args(["--db", &dir.path().join("bench.db").display().to_string()])
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .env("DOCKET_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let line = BufReader::new(stdout).lines().next().unwrap().unwrap();
    assert!(line.starts_with("docket listening on"), "{line}");
    let url = format!("http://127.0.0.1:{port}/v1/intents");

    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let client = reqwest::Client::builder().pool_max_idle_per_host(CLIENTS).build().unwrap();
        let body = |i: usize| {
            serde_json::json!({"workflow": "document-delivery",
                "input": {"title": format!("Doc {i}"), "recipient": "a@example.com", "body": "x"}})
        };
        // Warm up connections and caches.
        for i in 0..CLIENTS {
            let r = client.post(&url).header("Idempotency-Key", format!("warm-{i}")).json(&body(i)).send().await.unwrap();
            assert_eq!(r.status(), 201);
        }
        let per = total / CLIENTS;
        let start = Instant::now();
        let mut set = tokio::task::JoinSet::new();
        for c in 0..CLIENTS {
            let client = client.clone();
            let url = url.clone();
            set.spawn(async move {
                let mut lat = Vec::with_capacity(per);
                for k in 0..per {
                    let i = c * per + k;
                    let t = Instant::now();
                    let r = client.post(&url).header("Idempotency-Key", format!("k-{i}")).json(&body(i)).send().await.unwrap();
                    assert_eq!(r.status(), 201);
                    let _ = r.bytes().await;
                    lat.push(t.elapsed());
                }
                lat
            });
        }
        let mut all = Vec::with_capacity(total);
        while let Some(l) = set.join_next().await {
            all.extend(l.unwrap());
        }
        let elapsed = start.elapsed();
        all.sort();
        println!("admission over HTTP: {} intents, {CLIENTS} concurrent loopback clients, SQLite fsync on", all.len());
        println!("  throughput  {:>8.0} intents/s", all.len() as f64 / elapsed.as_secs_f64());
        println!("  latency     p50 {:.2} ms   p90 {:.2} ms   p99 {:.2} ms", pct(&all, 0.5), pct(&all, 0.9), pct(&all, 0.99));

        // Replays of a known key (one client, sequential).
        let mut replay = Vec::new();
        for _ in 0..500 {
            let t = Instant::now();
            let r = client.post(&url).header("Idempotency-Key", "k-0").json(&body(0)).send().await.unwrap();
            assert_eq!(r.status(), 200);
            let _ = r.bytes().await;
            replay.push(t.elapsed());
        }
        replay.sort();
        println!("  replay of a known key: p50 {:.2} ms   p99 {:.2} ms", pct(&replay, 0.5), pct(&replay, 0.99));
    });
    let _ = child.kill();
    let _ = child.wait();
}
