//! Admission over HTTP: intents per second and latency percentiles with 64 concurrent
//! loopback clients (a minimal keep-alive HTTP/1.1 client on one thread, so the load
//! generator is not the bottleneck) against a real `docket serve` process (release build, SQLite with
//! fsync, step execution paused so only admission is measured), then the latency of
//! replaying a known key.
//!
//! Run: `cargo bench --bench admission_http [-- INTENTS [POSTGRES_ADMIN_URL]]` (default
//! 8000 intents on SQLite). With a PostgreSQL URL (a role that may create databases) the
//! host runs on a fresh database there, dropped afterwards.

#[path = "support/http.rs"]
mod http;
#[path = "support/pg.rs"]
mod pg;

use http::{Conn, Host, cpu_time, pct};
use std::path::Path;
use std::time::Instant;

const CLIENTS: usize = 64;

/// Runs `sql` (creating or dropping the bench's database) through `admin`.
fn pg_admin(admin: &str, sql: String) {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(pg::admin(admin, &sql));
}

fn main() {
    let mut args = std::env::args().skip(1).filter(|a| a != "--bench");
    let total: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(8000);
    let postgres = args.next();
    let dir = tempfile::tempdir().unwrap();
    let (db, backend, cleanup) = match &postgres {
        None => (
            dir.path().join("bench.db").display().to_string(),
            "SQLite fsync on",
            None,
        ),
        Some(admin) => {
            let name = format!("docket_bench_{:08x}", rand::random::<u32>());
            pg_admin(admin, format!("CREATE DATABASE {name}"));
            let url = format!("{}/{name}", admin.rsplit_once('/').unwrap().0);
            (
                url,
                "PostgreSQL",
                Some(format!("DROP DATABASE {name} WITH (FORCE)")),
            )
        }
    };
    let host = Host::start(
        &["--pause-execution", "--db", &db],
        Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/..")),
    );
    let server = host.pid();
    let addr = host.addr.clone();

    // One thread for the load generator: the host gets the rest of the machine.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        // Warm up connections and caches.
        let mut warm = Conn::open(&addr).await;
        for i in 0..CLIENTS {
            assert_eq!(submit(&mut warm, &format!("warm-{i}"), i).await, 201);
        }
        let per = total / CLIENTS;
        let mut conns = Vec::with_capacity(CLIENTS);
        for _ in 0..CLIENTS {
            conns.push(Conn::open(&addr).await);
        }
        let server_cpu = cpu_time(server);
        let start = Instant::now();
        let mut set = tokio::task::JoinSet::new();
        for (c, mut conn) in conns.into_iter().enumerate() {
            set.spawn(async move {
                let mut lat = Vec::with_capacity(per);
                for k in 0..per {
                    let i = c * per + k;
                    let t = Instant::now();
                    assert_eq!(submit(&mut conn, &format!("k-{i}"), i).await, 201);
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
        let server_cpu = cpu_time(server) - server_cpu;
        all.sort();
        println!(
            "admission over HTTP: {} intents, {CLIENTS} concurrent loopback clients, {backend}",
            all.len()
        );
        println!(
            "  throughput  {:>8.0} intents/s",
            all.len() as f64 / elapsed.as_secs_f64()
        );
        println!(
            "  latency     p50 {:.2} ms   p90 {:.2} ms   p99 {:.2} ms",
            pct(&all, 0.5),
            pct(&all, 0.9),
            pct(&all, 0.99)
        );
        println!(
            "  host CPU    {:.0} µs per intent ({:.2} of the 2 cores while measuring)",
            server_cpu.as_secs_f64() * 1e6 / all.len() as f64,
            server_cpu.as_secs_f64() / elapsed.as_secs_f64()
        );

        // Replays of a known key (one client, sequential), on a new connection: the
        // host closes one left idle as long as the run above.
        let mut warm = Conn::open(&addr).await;
        let mut replay = Vec::new();
        for _ in 0..500 {
            let t = Instant::now();
            assert_eq!(submit(&mut warm, "k-0", 0).await, 200);
            replay.push(t.elapsed());
        }
        replay.sort();
        println!(
            "  replay of a known key: p50 {:.2} ms   p99 {:.2} ms",
            pct(&replay, 0.5),
            pct(&replay, 0.99)
        );
    });
    drop(host);
    if let (Some(admin), Some(sql)) = (&postgres, cleanup) {
        pg_admin(admin, sql);
    }
}

/// Submits document intent `i` under `key`; returns the status.
async fn submit(conn: &mut Conn, key: &str, i: usize) -> u16 {
    let input = format!(r#"{{"title":"Doc {i}","recipient":"a@example.com","body":"x"}}"#);
    conn.submit("document-delivery", key, &input).await.0
}
