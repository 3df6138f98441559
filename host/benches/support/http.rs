//! What the end-to-end benches share: a minimal keep-alive HTTP/1.1 client (so that
//! generating load costs the measured machine little), the host process's CPU time and
//! peak memory from `/proc`, and percentiles.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A `docket serve` process of the bench (the release build), killed when dropped — also
/// when the bench panics, so no host outlives it.
pub struct Host {
    child: Child,
    /// `127.0.0.1:<port>`.
    pub addr: String,
}

impl Host {
    /// Starts `docket serve --listen 127.0.0.1:<free port>` with `args`, in `dir`, and waits
    /// until it says it listens.
    pub fn start(args: &[&str], dir: &Path) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr = format!("127.0.0.1:{port}");
        // DOCKET_BENCH_HOST runs another build's host under this load (before/after
        // comparisons in one sitting).
        let host = std::env::var_os("DOCKET_BENCH_HOST")
            .unwrap_or_else(|| env!("CARGO_BIN_EXE_docket").into());
        let mut child = Command::new(host)
            .args(["serve", "--listen", &addr])
            .args(args)
            .current_dir(dir)
            .env("DOCKET_LOG", "warn")
            .stdout(Stdio::piped())
            // DOCKET_BENCH_HOST_LOG=<file> keeps what the host says (why it failed a bench).
            .stderr(match std::env::var_os("DOCKET_BENCH_HOST_LOG") {
                Some(file) => std::fs::File::create(file).unwrap().into(),
                None => Stdio::null(),
            })
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut lines = BufReader::new(stdout).lines();
        let line = lines.next().unwrap().unwrap();
        // The rest is read until the host exits: a host writing to a closed pipe may die.
        std::thread::spawn(move || lines.for_each(drop));
        let host = Self { child, addr };
        assert!(line.starts_with("docket listening on"), "{line}");
        host
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The `p` quantile of sorted durations, in milliseconds.
pub fn pct(sorted: &[Duration], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p) as usize].as_secs_f64() * 1e3
}

/// CPU time (user + system) the process `pid` has used so far.
pub fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name, which is in parentheses and may contain spaces.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields.get(11).and_then(|u| u.parse().ok()).unwrap_or(0)
        + fields.get(12).and_then(|s| s.parse().ok()).unwrap_or(0);
    // Linux reports in clock ticks of 1/100 s.
    Duration::from_millis(ticks * 10)
}

/// The peak resident memory of the process `pid`, in MiB (`VmHWM`).
pub fn peak_rss_mib(pid: u32) -> f64 {
    status_mib(pid, "VmHWM:")
}

/// The resident memory of the process `pid` now, in MiB (`VmRSS`).
pub fn rss_mib(pid: u32) -> f64 {
    status_mib(pid, "VmRSS:")
}

/// A size in `/proc/<pid>/status`, in MiB.
fn status_mib(pid: u32, field: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kib| kib / 1024.0)
}

/// The host's SQLite database opened read-only: a bench watches progress without writing.
pub fn read_only(db: &Path) -> rusqlite::Connection {
    rusqlite::Connection::open_with_flags(
        db,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .unwrap()
}

/// A minimal keep-alive HTTP/1.1 client: writes a prepared request and reads the status and
/// the `Content-Length` body.
pub struct Conn {
    stream: tokio::net::TcpStream,
    buf: Vec<u8>,
    /// The `Authorization` header line each request carries, or nothing.
    auth: String,
}

impl Conn {
    pub async fn open(addr: &str) -> Self {
        let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream.set_nodelay(true).unwrap();
        Self {
            stream,
            buf: Vec::with_capacity(4096),
            auth: String::new(),
        }
    }

    /// A connection whose requests present `token`.
    pub async fn open_as(addr: &str, token: &str) -> Self {
        let mut conn = Self::open(addr).await;
        conn.auth = format!("Authorization: Bearer {token}\r\n");
        conn
    }

    /// Submits `input` to `workflow` under `key`; returns the status and the body.
    pub async fn submit(&mut self, workflow: &str, key: &str, input: &str) -> (u16, Vec<u8>) {
        let body = format!(r#"{{"workflow":"{workflow}","input":{input}}}"#);
        let request = format!(
            "POST /v1/intents HTTP/1.1\r\nHost: localhost\r\n{}Idempotency-Key: {key}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            self.auth,
            body.len()
        );
        self.exchange(&request).await
    }

    /// Follows workflow `id`'s projection (its long-poll) until it completes; any other
    /// end fails the bench.
    pub async fn follow(&mut self, id: &str) {
        let mut revision = 0;
        loop {
            let (status, body) = self
                .get(&format!("/v1/workflows/{id}?wait=30&after={revision}"))
                .await;
            assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
            let view: serde_json::Value = serde_json::from_slice(&body).unwrap();
            match view["state"].as_str() {
                Some("completed") => return,
                Some("running") => revision = view["revision"].as_u64().unwrap(),
                other => panic!("workflow {id} ended {other:?}: {view}"),
            }
        }
    }

    /// `GET path`; returns the status and the body.
    pub async fn get(&mut self, path: &str) -> (u16, Vec<u8>) {
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: localhost\r\n{}\r\n",
            self.auth
        );
        self.exchange(&request).await
    }

    async fn exchange(&mut self, request: &str) -> (u16, Vec<u8>) {
        self.stream.write_all(request.as_bytes()).await.unwrap();
        self.buf.clear();
        loop {
            let mut chunk = [0u8; 8192];
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
                return (status, self.buf[end + 4..end + 4 + length].to_vec());
            }
        }
    }
}
