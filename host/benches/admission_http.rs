//! Admission over HTTP: intents per second and latency percentiles with 64 concurrent
//! loopback clients (a minimal keep-alive HTTP/1.1 client on one thread, so the load
//! generator is not the bottleneck) against a real `docket serve` process (release build, SQLite with
//! fsync, step execution paused so only admission is measured), then the latency of
//! replaying a known key.
//!
//! Run: `cargo bench --bench admission_http [-- INTENTS [POSTGRES_ADMIN_URL]]` (default
//! 8000 intents on SQLite). With a PostgreSQL URL (a role that may create databases) the
//! host runs on a fresh database there, dropped afterwards.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const CLIENTS: usize = 64;

fn pct(sorted: &[Duration], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p) as usize].as_secs_f64() * 1e3
}

/// CPU time (user + system) the process `pid` has used so far.
fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name, which is in parentheses and may contain spaces.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields.get(11).and_then(|u| u.parse().ok()).unwrap_or(0)
        + fields.get(12).and_then(|s| s.parse().ok()).unwrap_or(0);
    // Linux reports in clock ticks of 1/100 s.
    Duration::from_millis(ticks * 10)
}

/// Creates (or, with `drop`, drops) the bench database `name` through `admin`.
fn pg_admin(admin: &str, sql: String) {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            use sqlx::{Connection, Executor};
            let mut conn = sqlx::PgConnection::connect(admin).await.unwrap();
            conn.execute(sqlx::AssertSqlSafe(sql)).await.unwrap();
        });
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
        .args(["--db", &db])
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .env("DOCKET_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let server = child.id();
    let stdout = child.stdout.take().unwrap();
    let line = BufReader::new(stdout).lines().next().unwrap().unwrap();
    assert!(line.starts_with("docket listening on"), "{line}");
    let addr = format!("127.0.0.1:{port}");

    // One thread for the load generator: the host gets the rest of the machine.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        // Warm up connections and caches.
        let mut warm = Conn::open(&addr).await;
        for i in 0..CLIENTS {
            assert_eq!(warm.submit(&format!("warm-{i}"), i).await, 201);
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
                    assert_eq!(conn.submit(&format!("k-{i}"), i).await, 201);
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

        // Replays of a known key (one client, sequential).
        let mut replay = Vec::new();
        for _ in 0..500 {
            let t = Instant::now();
            assert_eq!(warm.submit("k-0", 0).await, 200);
            replay.push(t.elapsed());
        }
        replay.sort();
        println!(
            "  replay of a known key: p50 {:.2} ms   p99 {:.2} ms",
            pct(&replay, 0.5),
            pct(&replay, 0.99)
        );
    });
    let _ = child.kill();
    let _ = child.wait();
    if let (Some(admin), Some(sql)) = (&postgres, cleanup) {
        pg_admin(admin, sql);
    }
}

/// A minimal keep-alive HTTP/1.1 client: writes a prepared request and reads the status and
/// the `Content-Length` body, so that generating load costs the host's machine little.
struct Conn {
    stream: tokio::net::TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    async fn open(addr: &str) -> Self {
        let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream.set_nodelay(true).unwrap();
        Self {
            stream,
            buf: Vec::with_capacity(4096),
        }
    }

    /// Submits intent `i` under `key`; returns the status.
    async fn submit(&mut self, key: &str, i: usize) -> u16 {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let body = format!(
            r#"{{"workflow":"document-delivery","input":{{"title":"Doc {i}","recipient":"a@example.com","body":"x"}}}}"#
        );
        let request = format!(
            "POST /v1/intents HTTP/1.1\r\nHost: localhost\r\nIdempotency-Key: {key}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        self.stream.write_all(request.as_bytes()).await.unwrap();
        self.buf.clear();
        loop {
            let mut chunk = [0u8; 4096];
            let n = self.stream.read(&mut chunk).await.unwrap();
            assert!(n > 0, "the host closed the connection");
            self.buf.extend_from_slice(&chunk[..n]);
            let Some(end) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                continue;
            };
            let head = std::str::from_utf8(&self.buf[..end]).unwrap();
            let status: u16 = head[9..12].parse().unwrap();
            let length: usize = head
                .lines()
                .find_map(|l| {
                    let (name, value) = l.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse().ok())?
                })
                .unwrap_or(0);
            if self.buf.len() >= end + 4 + length {
                return status;
            }
        }
    }
}
