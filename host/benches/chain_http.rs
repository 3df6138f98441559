//! What users see, end to end over HTTP against a real `docket serve` (release build,
//! SQLite with fsync on every commit, the embedded provider simulator):
//!
//! - a 10-step chain of pure handler steps: the unloaded latency of one workflow from
//!   admission to completion (sequential, observed through the projection's long-poll),
//!   then throughput — WORKFLOWS workflows submitted by 32 keep-alive clients, timed until
//!   all are completed — as durable steps per second;
//! - the shipped 3-step `document-delivery` (two handlers and one adapter call through
//!   `http-delivery` to the simulator), the same way, as workflows per second;
//! - the host's CPU per step and its peak resident memory.
//!
//! Completion is watched by a read-only count in the host's SQLite file every 50 ms, which
//! costs the host nothing: no polling loop competes with it for the two cores.
//!
//! With HISTORY, the store first holds that many ended workflows with every row they leave
//! behind (`support/history.rs`), so the same load runs on a store that has been in use.
//!
//! With CLIENTS = `python` (or `both`), the load also comes from an ordinary client as a
//! user would write one: `support/client.py`, 32 threads of Python's standard library
//! `http.client` on the same machine, timed from its first submission until the store shows
//! every intent completed. Both report the host's CPU per step, which is what such a client
//! changes: its requests arrive fewer at a time, so the host does more wake-ups and smaller
//! commits per step.
//!
//! Run: `cargo bench --bench chain_http [-- WORKFLOWS [HISTORY [rust|python|both]]]`
//! (default 2000, 0 and rust).
//! `DOCKET_BENCH_HOST=<path>` runs another build's `docket` under the same load.

#[path = "support/chain.rs"]
mod chain;
#[path = "support/history.rs"]
mod history;
#[path = "support/http.rs"]
mod http;

use chain::{CHAIN_STEPS, chain_definition, input};
use http::{Conn, Host, cpu_time, pct, peak_rss_mib};
use std::path::Path;
use std::time::{Duration, Instant};

const CLIENTS: usize = 32;

/// Completed workflows of `workflow` created since `since` (ms), read from the host's
/// database without writing; the index range leaves history out of the count.
fn completed(db: &Path, workflow: &str, since: u64) -> usize {
    http::read_only(db)
        .query_row(
            "SELECT count(*) FROM workflows
         WHERE state = 'completed' AND created_at >= ?2 AND workflow = ?1",
            rusqlite::params![workflow, since as i64],
            |r| r.get::<_, i64>(0),
        )
        .unwrap() as usize
}

/// Submits one workflow and follows its projection's long-poll until it completes.
async fn one(conn: &mut Conn, workflow: &str, key: &str, input: &str) -> Duration {
    let started = Instant::now();
    let (status, body) = conn.submit(workflow, key, input).await;
    assert_eq!(status, 201, "{}", String::from_utf8_lossy(&body));
    let answer: serde_json::Value = serde_json::from_slice(&body).unwrap();
    conn.follow(answer["workflow_id"].as_str().unwrap()).await;
    started.elapsed()
}

/// Which load generator submits the workflows.
#[derive(Clone, Copy, PartialEq)]
enum Client {
    /// CLIENTS keep-alive connections on one thread of this process.
    Rust,
    /// `support/client.py`: CLIENTS Python threads, each with its own `http.client`.
    Python,
}

impl Client {
    fn name(self) -> &'static str {
        match self {
            Client::Rust => "Rust client",
            Client::Python => "Python http.client pool",
        }
    }
}

fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// `total` workflows from CLIENTS Python threads; the time from their first submission
/// until all are completed.
async fn load_python(
    addr: &str,
    db: &Path,
    since: u64,
    workflow: &str,
    prefix: &str,
    total: usize,
) -> Duration {
    use std::io::BufRead;
    let already = completed(db, workflow, since);
    let mut child = std::process::Command::new("python3")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/benches/support/client.py"
        ))
        .args([
            addr,
            workflow,
            prefix,
            &total.to_string(),
            &CLIENTS.to_string(),
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3 runs the ordinary client");
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    let started: f64 = first
        .strip_prefix("started ")
        .unwrap_or_else(|| panic!("{first}"))
        .parse()
        .unwrap();
    until_completed(db, workflow, since, already + (total / CLIENTS) * CLIENTS).await;
    let elapsed = Duration::from_secs_f64(now() - started);
    let status = child.wait().unwrap();
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    assert!(status.success(), "the Python client failed: {rest:?}");
    elapsed
}

/// `total` workflows from CLIENTS keep-alive clients; the time until all are completed.
async fn load(
    addr: &str,
    db: &Path,
    since: u64,
    workflow: &str,
    prefix: &str,
    total: usize,
) -> Duration {
    let already = completed(db, workflow, since);
    let per = total / CLIENTS;
    let mut conns = Vec::with_capacity(CLIENTS);
    for _ in 0..CLIENTS {
        conns.push(Conn::open(addr).await);
    }
    let start = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for (c, mut conn) in conns.into_iter().enumerate() {
        let workflow = workflow.to_string();
        let prefix = prefix.to_string();
        set.spawn(async move {
            for k in 0..per {
                let i = c * per + k;
                let (status, body) = conn
                    .submit(&workflow, &format!("{prefix}-{i}"), &input(i))
                    .await;
                assert_eq!(status, 201, "{}", String::from_utf8_lossy(&body));
            }
        });
    }
    while let Some(done) = set.join_next().await {
        done.unwrap();
    }
    until_completed(db, workflow, since, already + per * CLIENTS).await;
    start.elapsed()
}

/// Waits until `want` workflows of `workflow` created since `since` have completed.
async fn until_completed(db: &Path, workflow: &str, since: u64, want: usize) {
    let watch = Instant::now();
    while completed(db, workflow, since) < want {
        assert!(
            watch.elapsed() < Duration::from_secs(600),
            "not all {workflow} workflows completed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn main() {
    let mut args = std::env::args().skip(1).filter(|a| a != "--bench");
    let total: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(2000);
    let ended: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(0);
    let clients = match args.next().as_deref() {
        None | Some("rust") => vec![Client::Rust],
        Some("python") => vec![Client::Python],
        Some("both") => vec![Client::Rust, Client::Python],
        Some(other) => panic!("clients are rust, python or both, not {other:?}"),
    };
    let dir = tempfile::tempdir().unwrap();
    let workflows = dir.path().join("workflows");
    std::fs::create_dir(&workflows).unwrap();
    std::fs::write(workflows.join("chain.toml"), chain_definition()).unwrap();
    std::fs::copy(
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../workflows/document-delivery.toml"
        ),
        workflows.join("document-delivery.toml"),
    )
    .unwrap();
    let db = dir.path().join("bench.db");
    let filling = Instant::now();
    history::fill(&db, ended);
    if ended > 0 {
        println!(
            "history: {ended} ended workflows with their keys, steps, attempts, receipts, timeline and notifications ({:.0} s to write)",
            filling.elapsed().as_secs_f64()
        );
    }
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let host = Host::start(&["--db", &db.display().to_string()], dir.path());
    let server = host.pid();
    let addr = host.addr.clone();

    // One thread for the load generator: the host gets the rest of the machine.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut conn = Conn::open(&addr).await;
        // Warm up: components compiled and instantiated, connections open.
        for i in 0..10 {
            one(&mut conn, "chain", &format!("warm-{i}"), &input(i)).await;
            one(&mut conn, "document-delivery", &format!("warm-{i}"), &input(i)).await;
        }
        println!(
            "end to end over HTTP: docket serve (release), SQLite fsync on, {CLIENTS} keep-alive loopback clients"
        );
        for (workflow, steps) in [("chain", CHAIN_STEPS), ("document-delivery", 3)] {
            // A connection idle through a long load would be closed by the host's header-read
            // timeout: each phase opens its own.
            let mut conn = Conn::open(&addr).await;
            let mut unloaded = Vec::new();
            for i in 0..30 {
                unloaded.push(one(&mut conn, workflow, &format!("solo-{i}"), &input(i)).await);
            }
            unloaded.sort();
            println!("{workflow} ({steps} steps):");
            println!(
                "  unloaded     p50 {:.1} ms   p90 {:.1} ms (admission to completion, one at a time)",
                pct(&unloaded, 0.5),
                pct(&unloaded, 0.9)
            );
            for (round, &client) in clients.iter().enumerate() {
                let prefix = format!("load-{round}");
                let cpu = cpu_time(server);
                let elapsed = match client {
                    Client::Rust => load(&addr, &db, since, workflow, &prefix, total).await,
                    Client::Python => {
                        load_python(&addr, &db, since, workflow, &prefix, total).await
                    }
                };
                let cpu = cpu_time(server) - cpu;
                let done = (total / CLIENTS) * CLIENTS;
                println!("  {}:", client.name());
                println!(
                    "    throughput {:.0} workflows/s = {:.0} durable steps/s ({done} workflows in {:.2} s)",
                    done as f64 / elapsed.as_secs_f64(),
                    (done * steps) as f64 / elapsed.as_secs_f64(),
                    elapsed.as_secs_f64()
                );
                println!(
                    "    host CPU   {:.0} µs per step ({:.2} of the 2 cores)",
                    cpu.as_secs_f64() * 1e6 / (done * steps) as f64,
                    cpu.as_secs_f64() / elapsed.as_secs_f64()
                );
            }
        }
        println!("  peak resident memory of the host: {:.0} MiB", peak_rss_mib(server));
    });
    drop(host);
}
