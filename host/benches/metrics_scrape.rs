//! `/metrics` scrape time as a scraper sees it, over HTTP from a real `docket serve`
//! (release build), on an empty store and on one holding a million ended workflows (three
//! steps each, their tallies as the store keeps them) plus a thousand running ones: the
//! scrape reads the live rows and the tallies through indexes, so history must not show.
//!
//! Run: `cargo bench --bench metrics_scrape [-- WORKFLOWS [POSTGRES_ADMIN_URL]]` (default
//! 1,000,000 ended workflows on SQLite). With a PostgreSQL URL (a role that may create
//! databases) the stores are fresh databases there, dropped afterwards.

#[path = "support/pg.rs"]
mod pg;

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Scrapes per store.
const SCRAPES: usize = 200;

fn pct(sorted: &[Duration], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p) as usize].as_secs_f64() * 1e3
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

/// The statements that fill a migrated store with `ended` ended workflows (three succeeded
/// steps each, tallied) and 1,000 running ones. `series` is the SQL that yields `i` in
/// 1..=n as a table `n(i)`.
fn fill(ended: u64, series: impl Fn(u64) -> String) -> Vec<String> {
    let running = 1_000;
    let all = ended + running;
    vec![
        format!(
            "INSERT INTO workflows (workflow_id, workflow, definition_version, subject,
                 idempotency_key, input_digest, state, created_at, ended_at, deadline_at,
                 key_retention_ms, attempts_used)
             SELECT 'wf_' || i, 'document-delivery', 1, 'local', 'k-' || i, 'sha256:x',
                 CASE WHEN i <= {ended} THEN 'completed' ELSE 'running' END,
                 i, CASE WHEN i <= {ended} THEN i + 1000 ELSE NULL END, i + 3600000, 86400000,
                 CASE WHEN i <= {ended} THEN 3 ELSE 0 END
             FROM {}",
            series(all)
        ),
        format!(
            "INSERT INTO workflow_inputs (workflow_id, input) SELECT 'wf_' || i, '{{}}' FROM {}",
            series(all)
        ),
        format!(
            "INSERT INTO steps (workflow_id, step, state, attempts, role)
             SELECT 'wf_' || i, s.step,
                 CASE WHEN i <= {ended} THEN 'succeeded' ELSE 'pending' END, 1, s.role
             FROM {} CROSS JOIN (SELECT 'validate' AS step, 'handler' AS role
                 UNION ALL SELECT 'render', 'handler' UNION ALL SELECT 'deliver', 'adapter') s",
            series(all)
        ),
        format!(
            "INSERT INTO outcome_tallies (metric, workflow, state, bucket, shard, n, total)
             VALUES ('outcome_ms', 'document-delivery', 'completed', 2, 0, {ended}, {}),
                    ('attempts', 'document-delivery', 'completed', 2, 0, {ended}, {})",
            ended * 1000,
            ended * 3
        ),
    ]
}

/// A migrated store holding `ended` ended workflows: its `--db` argument, and what drops it.
fn store(ended: u64, postgres: Option<&str>, dir: &std::path::Path) -> (String, Option<String>) {
    match postgres {
        None => {
            let path = dir.join(format!("scrape-{ended}.db"));
            block_on(async {
                docket::store::sqlite::SqliteStore::open(&path)
                    .await
                    .unwrap()
            });
            let conn = rusqlite::Connection::open(&path).unwrap();
            conn.execute_batch("BEGIN").unwrap();
            for sql in fill(ended, |n| {
                format!(
                    "(WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {n}) SELECT i FROM n) n"
                )
            }) {
                conn.execute_batch(&sql).unwrap();
            }
            conn.execute_batch("COMMIT; ANALYZE").unwrap();
            (path.display().to_string(), None)
        }
        Some(admin) => {
            let name = format!("docket_bench_{:08x}", rand::random::<u32>());
            let url = format!("{}/{name}", admin.rsplit_once('/').unwrap().0);
            block_on(async {
                use sqlx::{Connection, Executor};
                let mut conn = sqlx::PgConnection::connect(admin).await.unwrap();
                conn.execute(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
                    .await
                    .unwrap();
                docket::store::postgres::PgStore::connect(&url)
                    .await
                    .unwrap();
                let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
                for sql in fill(ended, |n| format!("generate_series(1, {n}) AS n(i)")) {
                    conn.execute(sqlx::AssertSqlSafe(sql)).await.unwrap();
                }
                conn.execute("ANALYZE").await.unwrap();
            });
            (url, Some(format!("DROP DATABASE {name} WITH (FORCE)")))
        }
    }
}

/// Starts `docket serve` on `db` with a metrics listener; returns it and that address.
fn serve(db: &str) -> (std::process::Child, String) {
    let free = || {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    };
    let (port, metrics) = (free(), free());
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("docket.toml");
    std::fs::write(
        &config,
        format!("metrics_listen = \"127.0.0.1:{metrics}\"\n"),
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_docket"))
        .args(["serve", "--pause-execution", "--listen"])
        .arg(format!("127.0.0.1:{port}"))
        .args(["--db", db, "--config"])
        .arg(&config)
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .env("DOCKET_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let line = BufReader::new(stdout).lines().next().unwrap().unwrap();
    assert!(line.starts_with("docket listening on"), "{line}");
    // The config file must outlive the start only.
    drop(dir);
    (child, format!("127.0.0.1:{metrics}"))
}

/// One scrape on a kept-alive connection: the time to the whole body, and the body.
fn scrape(stream: &mut std::net::TcpStream) -> (Duration, String) {
    let start = Instant::now();
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut length = 0;
    let mut line = String::new();
    loop {
        line.clear();
        reader.read_line(&mut line).unwrap();
        if line == "\r\n" {
            break;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = v.trim().parse().unwrap();
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).unwrap();
    (start.elapsed(), String::from_utf8(body).unwrap())
}

fn measure(label: &str, db: &str, ended: u64) -> f64 {
    let (mut child, addr) = serve(db);
    let mut stream = std::net::TcpStream::connect(&addr).unwrap();
    stream.set_nodelay(true).unwrap();
    let (_, body) = scrape(&mut stream);
    let expected = format!(
        "docket_workflows_ended_total{{workflow=\"document-delivery\",state=\"completed\"}} {ended}"
    );
    assert!(
        ended == 0 || body.lines().any(|l| l == expected),
        "the scrape does not count the ended workflows:\n{body}"
    );
    let mut times: Vec<Duration> = (0..SCRAPES).map(|_| scrape(&mut stream).0).collect();
    times.sort();
    let median = pct(&times, 0.5);
    println!(
        "  {label:<34} p50 {median:>7.2} ms   p90 {:>7.2} ms   p99 {:>7.2} ms",
        pct(&times, 0.9),
        pct(&times, 0.99)
    );
    let _ = child.kill();
    let _ = child.wait();
    median
}

fn main() {
    let mut args = std::env::args().skip(1).filter(|a| a != "--bench");
    let ended: u64 = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let postgres = args.next();
    let dir = tempfile::tempdir().unwrap();
    let backend = if postgres.is_some() {
        "PostgreSQL"
    } else {
        "SQLite"
    };
    println!("/metrics over HTTP ({SCRAPES} scrapes each, one keep-alive connection), {backend}");
    let fill_start = Instant::now();
    let (empty, drop_empty) = store(0, postgres.as_deref(), dir.path());
    let (full, drop_full) = store(ended, postgres.as_deref(), dir.path());
    println!(
        "  (stores filled in {:.1} s)",
        fill_start.elapsed().as_secs_f64()
    );
    let base = measure("empty store", &empty, 0);
    let loaded = measure(&format!("{ended} ended + 1,000 running"), &full, ended);
    println!("  ratio (full / empty)               {:.2}×", loaded / base);
    if let Some(admin) = &postgres {
        for sql in [drop_empty, drop_full].into_iter().flatten() {
            block_on(pg::admin(admin, &sql));
        }
    }
}
