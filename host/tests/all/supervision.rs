//! The host as a supervisor sees it: a task that dies stops the process with a non-zero
//! status naming it, and SIGTERM drains the requests under way before the process exits.

use crate::host_process::{HostOptions, HostProcess, document};
use std::io::{Read, Write};
use std::time::Duration;

#[tokio::test]
async fn a_dead_scheduler_task_stops_the_host_naming_it() {
    let mut host = HostProcess::start(HostOptions {
        env: vec![("DOCKET_FAILPOINT".into(), "scheduler-panic".into())],
        ..HostOptions::default()
    })
    .await;
    // The scheduler panics when it claims the first step of this workflow.
    let (status, body) = host
        .submit("document-delivery", "doomed-1", document("Doomed"))
        .await;
    assert_eq!(status, 201, "{body}");
    let exit = host
        .wait_exit(Duration::from_secs(30))
        .await
        .unwrap_or_else(|| panic!("the host kept running:\n{}", host.log_tail(30)));
    assert_eq!(exit.code(), Some(1), "{}", host.log_tail(30));
    let log = host.log_text();
    assert!(
        log.contains("the `scheduler` task ended unexpectedly (it panicked"),
        "the log does not name the task:\n{}",
        host.log_tail(30)
    );
}

#[tokio::test]
async fn sigterm_lets_a_request_under_way_finish_before_the_host_exits() {
    let mut host = HostProcess::start(HostOptions::default()).await;
    let addr = host.url.trim_start_matches("http://").to_string();
    let body = serde_json::json!({"workflow": "document-delivery", "input": document("Drained")})
        .to_string();
    let mut stream = std::net::TcpStream::connect(&addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    // `Expect: 100-continue`: the server says `100 Continue` once the handler reads the body,
    // which proves the request is under way before the signal.
    write!(
        stream,
        "POST /v1/intents HTTP/1.1\r\nHost: {addr}\r\nIdempotency-Key: drained-1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nExpect: 100-continue\r\n\r\n",
        body.len()
    )
    .unwrap();
    let interim = read_until(&mut stream, "\r\n\r\n");
    assert!(interim.starts_with("HTTP/1.1 100"), "{interim}");

    host.terminate();
    host.wait_for_log("shutting down", Duration::from_secs(30))
        .await;
    stream.write_all(body.as_bytes()).unwrap();
    let answer = read_until(&mut stream, "}");
    assert!(
        answer.starts_with("HTTP/1.1 201"),
        "the request under way was not finished: {answer}\n{}",
        host.log_tail(30)
    );
    let exit = host
        .wait_exit(Duration::from_secs(60))
        .await
        .unwrap_or_else(|| panic!("the host did not exit:\n{}", host.log_tail(30)));
    assert!(exit.success(), "{exit:?}\n{}", host.log_tail(30));
}

/// Reads from `stream` until `end` has been seen (or the stream ends).
fn read_until(stream: &mut std::net::TcpStream, end: &str) -> String {
    let mut text = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&text).contains(end) {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => text.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8_lossy(&text).into_owned()
}

/// The banner goes to stdout; a reader that went away (a closed pipe) must not stop the host
/// when it writes its lines there.
#[test]
fn a_closed_stdout_does_not_stop_the_host() {
    let dir = tempfile::tempdir().unwrap();
    let port = crate::host_process::free_port();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_docket"))
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .current_dir(dir.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Closed before the host writes its banner.
    drop(child.stdout.take());
    let healthy = crate::wait::until_blocking("the host answers", Duration::from_secs(120), || {
        if let Some(exit) = child.try_wait().map_err(|e| e.to_string())? {
            panic!("the host exited ({exit}) with its stdout closed");
        }
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", port))
            .map_err(|e| format!("not listening yet: {e}"))?;
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        write!(
            stream,
            "GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
        )
        .map_err(|e| e.to_string())?;
        let mut answer = String::new();
        let _ = stream.read_to_string(&mut answer);
        Ok(answer)
    });
    assert!(healthy.starts_with("HTTP/1.1 200"), "{healthy}");
    // The banner is written between setting up the SIGTERM handler and running the host,
    // and only a host that ran exits 0 on SIGTERM: that exit shows it wrote every banner
    // line to the closed pipe and went on. The signal waits for the handler, or it would
    // kill the process outright.
    crate::wait::until_blocking(
        "the host to handle SIGTERM",
        Duration::from_secs(30),
        || {
            if let Some(exit) = child.try_wait().map_err(|e| e.to_string())? {
                panic!("the host exited ({exit}) with its stdout closed");
            }
            catches_sigterm(child.id())
        },
    );
    let status = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill: {status}");
    let exit = crate::wait::until_blocking("the host to exit", Duration::from_secs(60), || {
        child
            .try_wait()
            .map_err(|e| e.to_string())?
            .ok_or_else(|| "still running".to_string())
    });
    assert!(exit.success(), "the host stopped with {exit}");
}

/// `Ok` once process `pid` handles SIGTERM itself (its `SigCgt` mask in
/// `/proc/<pid>/status` has the signal's bit), instead of dying of it.
fn catches_sigterm(pid: u32) -> Result<(), String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|e| format!("reading the status of {pid}: {e}"))?;
    let caught = status
        .lines()
        .find_map(|l| l.strip_prefix("SigCgt:"))
        .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        .ok_or_else(|| format!("no SigCgt in:\n{status}"))?;
    // Signal n is bit n - 1.
    if caught & (1 << (libc::SIGTERM - 1)) != 0 {
        Ok(())
    } else {
        Err(format!("SigCgt {caught:#x} has no SIGTERM"))
    }
}
