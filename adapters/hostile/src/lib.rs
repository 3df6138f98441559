//! The `hostile` adapter: misbehaves on request so the host's sandbox tests can check that
//! each misbehaviour ends only the attempt and that nothing outside the grant is reachable.
//!
//! The input `{"do": "<mode>", ...}` picks the behaviour:
//! - `loop`: spins forever; `alloc`: allocates and touches 1 GiB; `panic`: panics;
//! - `read-file`, `env`, `socket` (`"addr"`), `http` (`"url"`): try to reach the outside
//!   and report what they saw in the receipt output, e.g. `{"mode":"read-file","error":...}`
//!   (`http` returns the client's typed error instead, so a denial arrives as `not-sent`);
//! - `leak-secret`: reads secret `api_token` and pushes it into a log line, stderr and the
//!   error message, for the redaction tests;
//! - `flood`: writes 100,000 log lines and 10 MiB to stdout, then succeeds;
//! - `big-output`: returns a receipt whose output is 1 MiB;
//! - `fields-bomb`: fills `wasi:http` fields with 8 KiB, then clones and changes clones in
//!   a loop, holding every one: host memory, not guest memory;
//! - `table-bomb`: holds ever more host resources (clock pollables);
//! - `request-flood` (`"authority"`, `"path"`): starts 40 plain-HTTP requests without
//!   waiting for any, then reports how many were answered and how many refused;
//! - `ok`: behaves, so tests can check the host still serves calls.
//!
//! Built with feature `describe-bomb`, `describe()` itself probes the secret `api_token`
//! (panicking if it is readable) and then builds `wasi:http` fields in a loop; with
//! `describe-spin` it never returns.

use std::hint::black_box;
use std::io::Write as _;

use docket_guest::{
    Adapter, Contract, EffectError, Inbound, Observation, ObserveError, Observer, Receipt, Request,
    http, log, secrets,
};
use serde_json::{Value, json};

/// Files a sandboxed component must not be able to read.
const PROBED_FILES: &[&str] = &[
    "/etc/passwd",
    "/etc/hostname",
    "/proc/self/environ",
    "Cargo.toml",
];

/// Directories a sandboxed component must not be able to list.
const PROBED_DIRS: &[&str] = &["/", "."];

/// The adapter; stateless like every docket plugin.
struct Hostile;

impl Adapter for Hostile {
    fn describe() -> Contract {
        #[cfg(feature = "describe-bomb")]
        describe_bomb();
        #[cfg(feature = "describe-spin")]
        spin();
        #[allow(unreachable_code)]
        Contract::new("hostile", "1.0.0")
            .namespace("hostile")
            .secret("api_token")
            .observes()
    }

    fn invoke(request: Request) -> Result<Receipt, EffectError> {
        let input: Value = request.parse_input()?;
        let mode = input.get("do").and_then(Value::as_str).unwrap_or_default();
        let key = request.idempotency_key.clone();
        let output = match mode {
            "loop" => spin(),
            "alloc" => allocate(),
            "panic" => panic!("hostile adapter panics on purpose (key {key})"),
            "read-file" => read_files(),
            "env" => environment(),
            "socket" => connect(input.get("addr").and_then(Value::as_str)),
            "http" => fetch(input.get("url").and_then(Value::as_str))?,
            "leak-secret" => return Err(leak_secret()?),
            "flood" => flood(),
            "big-output" => json!({ "mode": "big-output", "filler": "x".repeat(1 << 20) }),
            "fields-bomb" => fields_bomb(),
            "table-bomb" => table_bomb(),
            "request-flood" => request_flood(
                input
                    .get("authority")
                    .and_then(Value::as_str)
                    .unwrap_or("127.0.0.1:80"),
                input.get("path").and_then(Value::as_str).unwrap_or("/"),
            ),
            "ok" => json!({ "mode": "ok", "attempt": request.attempt }),
            // What the sandbox says the time is (WASI's wall clock).
            "now" => json!({ "now_ms": now_ms() }),
            other => {
                return Err(EffectError::rejected(
                    "unknown_mode",
                    format!(
                        "`do` is {other:?}; expected one of loop, alloc, panic, read-file, \
                         env, socket, http, leak-secret, flood, big-output, fields-bomb, \
                         table-bomb, request-flood, ok, now"
                    ),
                ));
            }
        };
        Ok(Receipt::new(key, output.to_string()))
    }
}

/// Milliseconds since the Unix epoch by the wall clock the host gives the sandbox.
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Never returns; `black_box` keeps the optimiser from proving the loop useless.
fn spin() -> ! {
    let mut counter: u64 = 0;
    loop {
        counter = black_box(counter.wrapping_add(1));
    }
}

/// Allocates 1 GiB and writes to every page, so the memory is really committed.
fn allocate() -> Value {
    const SIZE: usize = 1 << 30;
    const PAGE: usize = 64 * 1024;
    let mut block = vec![1u8; SIZE];
    for offset in (0..SIZE).step_by(PAGE) {
        block[offset] = black_box(offset as u8);
    }
    let checksum = block
        .iter()
        .step_by(PAGE)
        .map(|&b| u64::from(b))
        .sum::<u64>();
    json!({ "mode": "alloc", "allocated_bytes": SIZE, "checksum": black_box(checksum) })
}

fn read_files() -> Value {
    let files: Vec<Value> = PROBED_FILES
        .iter()
        .map(|path| match std::fs::read_to_string(path) {
            Ok(content) => json!({
                "path": path,
                "found": true,
                "bytes": content.len(),
                "start": content.chars().take(80).collect::<String>(),
            }),
            Err(err) => json!({ "path": path, "found": false, "error": err.to_string() }),
        })
        .collect();
    let dirs: Vec<Value> = PROBED_DIRS
        .iter()
        .map(|path| match std::fs::read_dir(path) {
            Ok(entries) => json!({
                "path": path,
                "found": true,
                "entries": entries.filter_map(Result::ok).count(),
            }),
            Err(err) => json!({ "path": path, "found": false, "error": err.to_string() }),
        })
        .collect();
    let found = files
        .iter()
        .chain(&dirs)
        .any(|probe| probe["found"] == true);
    json!({
        "mode": "read-file",
        "found": found,
        // The first probe's error, for tests that look at one path.
        "error": files[0].get("error").cloned().unwrap_or(Value::Null),
        "files": files,
        "dirs": dirs,
    })
}

fn environment() -> Value {
    let vars: serde_json::Map<String, Value> = std::env::vars()
        .map(|(name, value)| (name, Value::String(value)))
        .collect();
    json!({
        "mode": "env",
        "count": vars.len(),
        "home_visible": std::env::var_os("HOME").is_some(),
        "path_visible": std::env::var_os("PATH").is_some(),
        "args": std::env::args().collect::<Vec<_>>(),
        "cwd": std::env::current_dir().map(|p| p.display().to_string()).ok(),
        "vars": vars,
    })
}

fn connect(addr: Option<&str>) -> Value {
    let addr = addr.unwrap_or("127.0.0.1:80");
    match std::net::TcpStream::connect(addr) {
        Ok(stream) => json!({
            "mode": "socket",
            "addr": addr,
            "connected": true,
            "peer": stream.peer_addr().map(|a| a.to_string()).ok(),
        }),
        Err(err) => json!({
            "mode": "socket",
            "addr": addr,
            "connected": false,
            "error": err.to_string(),
        }),
    }
}

/// A plain GET through docket-guest's client; a transport failure becomes the client's
/// typed error (`not-sent` for a host denial).
fn fetch(url: Option<&str>) -> Result<Value, EffectError> {
    let url = url.ok_or_else(|| {
        EffectError::rejected("invalid_input", "mode `http` needs a `url` string")
    })?;
    let response = http::Request::get(url).send()?;
    Ok(json!({
        "mode": "http",
        "url": url,
        "status": response.status,
        "body_bytes": response.body.len(),
    }))
}

/// Pushes the secret everywhere a plugin could: a log line, stderr, and the error.
/// Floods every channel a plugin has into the host: log lines and stdout.
fn flood() -> Value {
    for i in 0..100_000 {
        log::info(format!("flood line {i}"));
    }
    let mut stdout = std::io::stdout();
    let chunk = vec![b'y'; 64 * 1024];
    for _ in 0..160 {
        let _ = stdout.write_all(&chunk);
    }
    let _ = stdout.flush();
    json!({ "mode": "flood" })
}

fn leak_secret() -> Result<EffectError, EffectError> {
    let token = secrets::get("api_token")?;
    log::info(format!("leaking api_token={token}"));
    let mut stderr = std::io::stderr();
    let _ = writeln!(stderr, "leaking api_token={token}");
    let _ = stderr.flush();
    Ok(EffectError::rejected(
        "leak",
        format!("the secret is {token}"),
    ))
}

/// Fills one `fields` map with 8 KiB of headers, then clones it and grows each clone (a
/// deep copy on the host) forever, holding them all.
fn fields_bomb() -> Value {
    use wasip2::http::types::Fields;
    let value = vec![b'v'; 1024];
    let full = Fields::new();
    for i in 0..8 {
        let _ = full.append(&format!("x-bomb-{i}"), &value);
    }
    let mut held = vec![full];
    loop {
        let copy = held[held.len() - 1].clone();
        let _ = copy.append("x-more", b"1");
        let _ = copy.delete("x-more");
        held.push(copy);
        if held.len() == 10_000_000 {
            return json!({ "mode": "fields-bomb", "held": held.len() });
        }
    }
}

/// Holds ever more host resources: each pollable is an entry of the host's table.
fn table_bomb() -> Value {
    let mut held = Vec::new();
    loop {
        held.push(wasip2::clocks::monotonic_clock::subscribe_duration(1 << 40));
        if held.len() == 10_000_000 {
            return json!({ "mode": "table-bomb", "held": held.len() });
        }
    }
}

/// Starts 40 requests to `http://{authority}{path}` at once, holding every answer, and
/// counts the answered and the refused.
fn request_flood(authority: &str, path: &str) -> Value {
    use wasip2::http::outgoing_handler;
    use wasip2::http::types::{ErrorCode, Fields, OutgoingRequest, Scheme};
    let mut pending = Vec::new();
    let mut refused_at_once = 0;
    for _ in 0..40 {
        let request = OutgoingRequest::new(Fields::new());
        let _ = request.set_scheme(Some(&Scheme::Http));
        let _ = request.set_authority(Some(authority));
        let _ = request.set_path_with_query(Some(path));
        match outgoing_handler::handle(request, None) {
            Ok(future) => pending.push(future),
            Err(_) => refused_at_once += 1,
        }
    }
    let (mut answered, mut denied, mut failed) = (0, 0, 0);
    let mut held = Vec::new();
    for future in &pending {
        future.subscribe().block();
        match future.get() {
            Some(Ok(Ok(response))) => {
                answered += 1;
                // Held, body and all: the request stays open.
                held.push(response);
            }
            Some(Ok(Err(ErrorCode::HttpRequestDenied))) => denied += 1,
            _ => failed += 1,
        }
    }
    json!({
        "mode": "request-flood",
        "answered": answered,
        "denied": denied + refused_at_once,
        "failed": failed,
    })
}

/// `describe()` gone hostile: a secret must not be readable, then `wasi:http` fields are
/// built and cloned in a loop.
#[cfg(feature = "describe-bomb")]
fn describe_bomb() {
    if let Ok(token) = secrets::get("api_token") {
        panic!(
            "describe() read the secret api_token ({} bytes)",
            token.len()
        );
    }
    fields_bomb();
}

/// Reads a delivery's body as `{"do": <mode>}`: `loop`, `alloc` and `panic` misbehave as
/// `invoke` does; anything else is refused as unrecognized.
impl Observer for Hostile {
    fn observe(delivery: Inbound) -> Result<Vec<Observation>, ObserveError> {
        let body: Value = serde_json::from_slice(&delivery.body)
            .map_err(|e| ObserveError::Malformed(format!("not JSON: {e}")))?;
        match body.get("do").and_then(Value::as_str).unwrap_or_default() {
            "loop" => spin(),
            "alloc" => {
                allocate();
                Ok(Vec::new())
            }
            "panic" => panic!("hostile observe panics on purpose"),
            other => Err(ObserveError::Unrecognized(format!(
                "`do` is {other:?}; expected loop, alloc or panic"
            ))),
        }
    }
}

docket_guest::export_observing_adapter!(Hostile);
