//! Recovery after SIGKILL: 1,000 `document-delivery` workflows are in flight — every
//! delivery committed at the provider, every answer still pending — when the host is killed.
//! The bench restarts it on the same database and measures how long until every workflow
//! progresses again (an attempt begun since the restart: its delivery step taken over by
//! recovery, read from the database without writing) and until every one is
//! completed, each by a query that finds the committed delivery.
//!
//! The dead host's leases would expire on their own after the lease duration (30 s by
//! default); the bench moves the restarted host's clock past them at once (test controls),
//! so the figure is the host's own recovery work, not the lease wait.
//!
//! Run: `cargo bench --bench recovery` (optional argument: workflows, default 1000).

#[path = "support/adapters.rs"]
mod adapters;

use docket::sim::{ProviderSim, SimConfig};
use serde_json::json;
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

/// Read from the host's database without writing: the attempts recorded before the restart
/// (up to `max_rowid`) that have been decided, the workflows that have made progress (an
/// attempt begun after those, or completed), and the completed ones.
fn progress(db: &Path, max_rowid: i64) -> (usize, usize, usize) {
    let conn = rusqlite::Connection::open_with_flags(
        db,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .unwrap();
    conn.query_row(
        "SELECT
           (SELECT count(*) FROM attempts WHERE rowid <= ?1 AND outcome != 'in_progress'),
           (SELECT count(*) FROM workflows w WHERE w.state = 'completed' OR EXISTS
              (SELECT 1 FROM attempts a WHERE a.workflow_id = w.workflow_id AND a.rowid > ?1)),
           (SELECT count(*) FROM workflows WHERE state = 'completed')",
        [max_rowid],
        |r| {
            let n = |i: usize| r.get::<_, i64>(i).map(|n| n as usize);
            Ok((n(0)?, n(1)?, n(2)?))
        },
    )
    .unwrap()
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
        let adapters = adapters::delivery(&provider);
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("docket.toml"),
            format!(
                "workflows = \"workflows\"\n\
                 [secrets]\nvalues = {{ provider_token = {TOKEN:?} }}\n\
                 {adapters}\
                 [limits]\nmax_concurrent = {}\n",
                (total + 64).min(10_000)
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

        let db = dir.path().join("bench.db");
        let (max_rowid, in_flight): (i64, i64) = rusqlite::Connection::open(&db)
            .unwrap()
            .query_row(
                "SELECT coalesce(max(rowid), 0), count(*) FILTER (WHERE outcome = 'in_progress')
                 FROM attempts",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        let in_flight = in_flight as usize;
        // Some may have completed before the kill (an answer that timed out while the others
        // were still being sent, and a query that found the delivery): nothing left to do.
        let (decided_before, _, done_before) = progress(&db, max_rowid);
        println!(
            "  at the kill: {in_flight} attempts in flight, {done_before} workflows completed"
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
        let (mut first, mut decided, mut progressing) = (None, None, None);
        let mut shown = Duration::ZERO;
        loop {
            let (settled, moved, completed) = progress(&db, max_rowid);
            let settled = settled - decided_before;
            if restart.elapsed() >= shown {
                eprintln!(
                    "  {:>6.0} ms: {settled} leases decided, {moved} progressing, {completed} completed",
                    restart.elapsed().as_secs_f64() * 1e3
                );
                shown += Duration::from_millis(500);
            }
            if completed > 0 && first.is_none() {
                first = Some(restart.elapsed());
            }
            if settled >= in_flight && decided.is_none() {
                decided = Some(restart.elapsed());
            }
            if moved >= total && progressing.is_none() {
                progressing = Some(restart.elapsed());
            }
            if completed >= total {
                break;
            }
            assert!(
                restart.elapsed() < Duration::from_secs(600),
                "{completed} of {total} completed"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
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
        println!(
            "  restart until every lease decided {:>8.0} ms",
            decided.unwrap().as_secs_f64() * 1e3
        );
        println!(
            "  restart until all {total} progressing {:>8.0} ms",
            progressing.unwrap().as_secs_f64() * 1e3
        );
        println!("  restart until all {total} completed {:>8.0} ms", all.as_secs_f64() * 1e3);
        println!(
            "  provider record: {} deliveries for {total} intents (none duplicated)",
            sim.sim().world().len()
        );
    });
}
