//! Fairness across subjects, as users see it: while one subject's burst of intents runs,
//! how long does another subject's single intent take? End to end over HTTP against a
//! real `docket serve` (release build, SQLite with fsync on every commit), the 10-step
//! handler chain of `chain_http`.
//!
//! 1. Unloaded: the quiet subject submits intents one at a time and follows each to its
//!    completion (the projection's long-poll): its latency p50 and p99.
//! 2. Loaded: the busy subject submits BURST intents from 32 keep-alive connections; while
//!    they run, the quiet subject goes on submitting one intent at a time. Its latency
//!    p50 and p99, and the ratio of that p99 to the unloaded one.
//! 3. The same load, the single intents submitted under the busy subject's own token: what
//!    they would wait without a share of their own (oldest-ready first across the host).
//!
//! Run: `cargo bench --bench fair_http [-- BURST]` (default 10000).

#[path = "support/chain.rs"]
mod chain;
#[path = "support/http.rs"]
mod http;

use chain::{CHAIN_STEPS, chain_definition, input};
use http::{Conn, Host, pct};
use std::time::{Duration, Instant};

const CLIENTS: usize = 32;
const BUSY: &str = "busy-team-token-7f3a9c2e5b8d1f4a6c0e";
const QUIET: &str = "quiet-team-token-2b9e4d7a1c8f3e6b5a0d";

/// Submits one workflow as `conn`'s subject and follows it until it completes.
async fn one(conn: &mut Conn, key: &str, i: usize) -> Duration {
    let started = Instant::now();
    let body = loop {
        let (status, body) = conn.submit("chain", key, &input(i)).await;
        match status {
            201 => break body,
            // The writer's queue was full: the host says try again (counted in the latency).
            503 | 429 => tokio::time::sleep(Duration::from_millis(20)).await,
            _ => panic!("{status} {}", String::from_utf8_lossy(&body)),
        }
    };
    let answer: serde_json::Value = serde_json::from_slice(&body).unwrap();
    conn.follow(answer["workflow_id"].as_str().unwrap()).await;
    started.elapsed()
}

/// The burst under the busy subject; returns when every intent was accepted.
async fn burst(addr: String, prefix: String, total: usize) -> Duration {
    let start = Instant::now();
    let per = total / CLIENTS;
    let mut set = tokio::task::JoinSet::new();
    for c in 0..CLIENTS {
        let (addr, prefix) = (addr.clone(), prefix.clone());
        set.spawn(async move {
            let mut conn = Conn::open_as(&addr, BUSY).await;
            for k in 0..per {
                let i = c * per + k;
                loop {
                    let (status, body) = conn
                        .submit("chain", &format!("{prefix}-{i}"), &input(i))
                        .await;
                    match status {
                        201 => break,
                        // The writer's queue was full: the host says try again.
                        503 | 429 => tokio::time::sleep(Duration::from_millis(20)).await,
                        _ => panic!("{status} {}", String::from_utf8_lossy(&body)),
                    }
                }
            }
        });
    }
    while let Some(r) = set.join_next().await {
        r.unwrap();
    }
    start.elapsed()
}

/// Runs a burst and, beside it, single intents as `quiet_token` until the burst's last
/// intent completed; returns their latencies, sorted, and the burst's duration.
async fn loaded(
    addr: &str,
    db: &std::path::Path,
    round: &str,
    total: usize,
    quiet_token: &str,
) -> (Vec<Duration>, Duration) {
    let start = Instant::now();
    let burst = tokio::spawn(burst(addr.to_string(), format!("{round}-burst"), total));
    let mut conn = Conn::open_as(addr, quiet_token).await;
    let mut latencies = Vec::new();
    let want = (total / CLIENTS) * CLIENTS;
    let mut i = 0;
    // Single intents for as long as the burst has work left.
    while completed(db, &format!("{round}-burst-")) < want {
        latencies.push(one(&mut conn, &format!("{round}-quiet-{i}"), i).await);
        i += 1;
        assert!(
            start.elapsed() < Duration::from_secs(900),
            "the burst did not end"
        );
    }
    burst.await.unwrap();
    latencies.sort();
    (latencies, start.elapsed())
}

/// Completed workflows whose key starts with `prefix`, read without writing.
fn completed(db: &std::path::Path, prefix: &str) -> usize {
    http::read_only(db)
        .query_row(
            "SELECT count(*) FROM workflows
             WHERE state = 'completed' AND idempotency_key >= ?1 AND idempotency_key < ?2",
            rusqlite::params![prefix, format!("{prefix}\u{10FFFF}")],
            |r| r.get::<_, i64>(0),
        )
        .unwrap() as usize
}

fn main() {
    let mut args = std::env::args().skip(1).filter(|a| a != "--bench");
    let total: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(10_000);
    let dir = tempfile::tempdir().unwrap();
    let workflows = dir.path().join("workflows");
    std::fs::create_dir(&workflows).unwrap();
    std::fs::write(workflows.join("chain.toml"), chain_definition()).unwrap();
    let config = dir.path().join("docket.toml");
    std::fs::write(
        &config,
        format!(
            "[[tokens]]\ntoken = \"{BUSY}\"\nsubject = \"busy-team\"\nrole = \"client\"\n\
             [[tokens]]\ntoken = \"{QUIET}\"\nsubject = \"quiet-team\"\nrole = \"client\"\n"
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
    let addr = host.addr.clone();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut conn = Conn::open_as(&addr, QUIET).await;
        for i in 0..20 {
            one(&mut conn, &format!("warm-{i}"), i).await;
        }
        let mut unloaded = Vec::new();
        for i in 0..100 {
            unloaded.push(one(&mut conn, &format!("solo-{i}"), i).await);
        }
        unloaded.sort();
        println!(
            "fairness over HTTP: docket serve (release), SQLite fsync on, the {CHAIN_STEPS}-step chain; a burst of {total} intents from {CLIENTS} connections"
        );
        println!(
            "  unloaded, one at a time          p50 {:6.1} ms   p99 {:6.1} ms ({} intents)",
            pct(&unloaded, 0.5),
            pct(&unloaded, 0.99),
            unloaded.len()
        );
        for (round, token, name) in [
            ("fair", QUIET, "another subject's intents"),
            ("same", BUSY, "the busy subject's own intents"),
        ] {
            let (latencies, took) = loaded(&addr, &db, round, total, token).await;
            println!(
                "  during the burst, {name:30} p50 {:6.1} ms   p99 {:6.1} ms ({} intents; p99 {:.1}× unloaded; the burst took {:.1} s)",
                pct(&latencies, 0.5),
                pct(&latencies, 0.99),
                latencies.len(),
                pct(&latencies, 0.99) / pct(&unloaded, 0.99),
                took.as_secs_f64()
            );
        }
    });
    drop(host);
}
