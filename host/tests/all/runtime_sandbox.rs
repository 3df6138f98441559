//! Hostile plugins end only their own call, with a clear, typed outcome, and the same
//! runtime serves the next call normally.

use crate::common::{env, grant, load, runtime, settings};
use docket::contract::{EffectError, EffectRequest, PluginReceipt};
use docket::runtime::{CallFailure, CallLimits, CallReport, Prepared, Runtime};
use docket::sim::{ProviderSim, RunningSim, SimConfig};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

struct Sandbox {
    rt: Runtime,
    hostile: Arc<Prepared>,
    granted: RunningSim,
    other: RunningSim,
}

/// The hostile adapter, granted its secret and one loopback server (`granted`); a second
/// loopback server (`other`) is listening but not granted.
async fn sandbox() -> Sandbox {
    let granted = ProviderSim::start(SimConfig::new("t"), "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let other = ProviderSim::start(SimConfig::new("t"), "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let rt = runtime();
    let component = load(&rt, "hostile").await;
    let g = grant(&[&granted.base_url()], &["api_token"]);
    let hostile = rt
        .prepare(&component, &g, &settings(&[]))
        .expect("prepare hostile");
    Sandbox {
        rt,
        hostile,
        granted,
        other,
    }
}

async fn call(
    s: &Sandbox,
    input: Value,
    timeout: Duration,
) -> CallReport<Result<PluginReceipt, EffectError>> {
    let request = EffectRequest {
        idempotency_key: "k".into(),
        input: input.to_string(),
        attempt: 1,
    };
    s.rt.invoke(
        &s.hostile,
        env(settings(&[]), &[("api_token", "tok-123456")]),
        CallLimits { timeout },
        &request,
    )
    .await
}

fn output(report: CallReport<Result<PluginReceipt, EffectError>>) -> Value {
    let receipt = report
        .outcome
        .expect("call completed")
        .expect("plugin returned a receipt");
    serde_json::from_str(&receipt.output).unwrap()
}

/// The next call on the same runtime works.
async fn still_serves(s: &Sandbox) {
    let out = output(call(s, json!({"do": "ok"}), Duration::from_secs(5)).await);
    assert_eq!(out["mode"], "ok");
}

#[tokio::test(flavor = "multi_thread")]
async fn infinite_loop_is_stopped_at_its_deadline() {
    let s = sandbox().await;
    let report = call(&s, json!({"do": "loop"}), Duration::from_millis(300)).await;
    assert!(
        matches!(report.outcome, Err(CallFailure::Timeout { limit_ms: 300 })),
        "{:?}",
        report.outcome
    );
    assert!(
        report.elapsed < Duration::from_secs(3),
        "stopped late: {:?}",
        report.elapsed
    );
    still_serves(&s).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn memory_bomb_fails_at_the_cap() {
    let s = sandbox().await;
    let report = call(&s, json!({"do": "alloc"}), Duration::from_secs(10)).await;
    match report.outcome {
        Err(CallFailure::MemoryCap {
            cap_bytes,
            requested_bytes,
        }) => {
            assert_eq!(cap_bytes, 64 << 20);
            assert!(requested_bytes > cap_bytes);
        }
        other => panic!("expected MemoryCap, got {other:?}"),
    }
    still_serves(&s).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn panic_is_reported_as_a_trap_with_its_message() {
    let s = sandbox().await;
    let report = call(&s, json!({"do": "panic"}), Duration::from_secs(5)).await;
    match &report.outcome {
        Err(CallFailure::Trap { panic: Some(p), .. }) => {
            assert!(p.contains("panics on purpose"), "{p}")
        }
        other => panic!("expected a trap with a panic message, got {other:?}"),
    }
    assert!(
        report.log.iter().any(|l| l.message.contains("panicked at")),
        "{:?}",
        report.log
    );
    still_serves(&s).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn files_and_environment_find_nothing() {
    let s = sandbox().await;
    let files = output(call(&s, json!({"do": "read-file"}), Duration::from_secs(5)).await);
    assert_eq!(files["found"], false, "{files}");
    assert!(files["error"].is_string(), "{files}");
    let vars = output(call(&s, json!({"do": "env"}), Duration::from_secs(5)).await);
    assert_eq!(vars["count"], 0, "{vars}");
    assert_eq!(vars["home_visible"], false);
    assert_eq!(vars["path_visible"], false);
    still_serves(&s).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn socket_open_fails_even_to_a_listening_loopback_port() {
    let s = sandbox().await;
    let addr = s.granted.addr().to_string();
    let out = output(
        call(
            &s,
            json!({"do": "socket", "addr": addr}),
            Duration::from_secs(5),
        )
        .await,
    );
    assert_eq!(out["connected"], false, "{out}");
    still_serves(&s).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn only_granted_http_hosts_answer() {
    let s = sandbox().await;
    let allowed = format!("{}/v1/_world", s.granted.base_url());
    let out = output(
        call(
            &s,
            json!({"do": "http", "url": allowed}),
            Duration::from_secs(5),
        )
        .await,
    );
    assert_eq!(out["status"], 200, "{out}");

    let denied = format!("{}/v1/_world", s.other.base_url());
    let report = call(
        &s,
        json!({"do": "http", "url": denied}),
        Duration::from_secs(5),
    )
    .await;
    match report.outcome {
        Ok(Err(EffectError::NotSent { message })) => {
            assert!(message.to_lowercase().contains("denied"), "{message}")
        }
        other => panic!("expected a guest-visible denial, got {other:?}"),
    }
    assert!(
        report
            .denials
            .iter()
            .any(|d| d.contains(&s.other.addr().port().to_string())),
        "{:?}",
        report.denials
    );
    still_serves(&s).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn hostile_calls_in_parallel_do_not_disturb_a_normal_one() {
    let s = Arc::new(sandbox().await);
    let mut tasks = Vec::new();
    for mode in ["loop", "alloc", "panic"] {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            call(&s, json!({"do": mode}), Duration::from_millis(500))
                .await
                .outcome
                .is_err()
        }));
    }
    still_serves(&s).await;
    for t in tasks {
        assert!(t.await.unwrap(), "a hostile call did not fail");
    }
    still_serves(&s).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn redirects_are_never_followed() {
    // A granted loopback server that redirects to the (not granted) `other` server.
    let s = sandbox().await;
    let target = format!("{}/v1/_world", s.other.base_url());
    let app = axum::Router::new().route(
        "/go",
        axum::routing::get(move || {
            let target = target.clone();
            async move {
                (
                    axum::http::StatusCode::FOUND,
                    [(axum::http::header::LOCATION, target)],
                )
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let rt = &s.rt;
    let component = load(rt, "hostile").await;
    let g = grant(&[&format!("http://{addr}")], &["api_token"]);
    let prepared = rt.prepare(&component, &g, &settings(&[])).unwrap();
    let request = EffectRequest {
        idempotency_key: "k".into(),
        input: json!({"do": "http", "url": format!("http://{addr}/go")}).to_string(),
        attempt: 1,
    };
    let report = rt
        .invoke(
            &prepared,
            env(settings(&[]), &[("api_token", "token-for-redirect-test")]),
            CallLimits::default(),
            &request,
        )
        .await;
    let out = output(report);
    // The plugin sees the 302 itself; the host did not follow it to the other server.
    assert_eq!(out["status"], 302, "{out}");
}

/// A plugin that floods its log and stdout ends normally with a bounded log: the host kept
/// at most 200 lines and counted the rest, and stdout past its capacity was dropped (no
/// trap after the effect).
#[tokio::test(flavor = "multi_thread")]
async fn a_log_flood_is_bounded_and_never_traps() {
    let s = sandbox().await;
    let report = call(&s, json!({"do": "flood"}), Duration::from_secs(60)).await;
    let lines = report.log.len();
    let last = report
        .log
        .last()
        .map(|l| l.message.clone())
        .unwrap_or_default();
    assert_eq!(output(report)["mode"], "flood");
    assert!(lines <= 201, "{lines} lines kept");
    assert!(last.contains("further log lines were dropped"), "{last}");
    still_serves(&s).await;
}

/// A receipt too large to keep is no evidence: the outcome is unknown (recovery asks the
/// provider), never a receipt of a megabyte.
#[tokio::test(flavor = "multi_thread")]
async fn an_oversized_output_is_an_unknown_outcome_not_a_receipt() {
    let s = sandbox().await;
    let report = call(&s, json!({"do": "big-output"}), Duration::from_secs(30)).await;
    match report.outcome {
        Ok(Err(EffectError::OutcomeUnknown { observation })) => {
            assert!(
                observation.contains("over the limit of 65536"),
                "{observation}"
            );
        }
        other => panic!("expected an unknown outcome, got {other:?}"),
    }
    still_serves(&s).await;
}

/// Addresses no granted host name may reach, one of each range, in IPv4 and in the IPv6
/// forms that carry an IPv4 address.
const NOT_PUBLIC: &[&str] = &[
    "10.1.2.3",
    "172.16.0.9",
    "192.168.1.1",
    "100.64.0.1",
    "0.1.2.3",
    "198.18.0.1",
    "240.0.0.1",
    "127.0.0.1",
    "169.254.169.254",
    "fc00::1",
    "fd12:3456::1",
    "::ffff:10.0.0.1",
    "::10.0.0.1",
    "64:ff9b::a00:1",
    "2002:a00:1::1",
    "fe80::1",
    "::1",
];

/// A granted host name that resolves to a private or otherwise non-public address is
/// refused before anything connects, whatever range or IPv6 form it hides in; a resolver
/// the test controls gives the answers.
#[tokio::test(flavor = "multi_thread")]
async fn a_granted_name_never_reaches_a_non_public_address() {
    let answers: std::collections::BTreeMap<String, Vec<std::net::IpAddr>> = NOT_PUBLIC
        .iter()
        .enumerate()
        .map(|(i, ip)| (format!("r{i}.example"), vec![ip.parse().unwrap()]))
        .collect();
    let (rt, component) = resolving(answers.clone()).await;
    let hosts: Vec<String> = answers.keys().map(|n| format!("http://{n}:8080")).collect();
    let g = grant(
        &hosts.iter().map(String::as_str).collect::<Vec<_>>(),
        &["api_token"],
    );
    let hostile = rt.prepare(&component, &g, &settings(&[])).unwrap();
    for (name, ips) in &answers {
        let report = fetch(&rt, &hostile, &format!("http://{name}:8080/")).await;
        assert!(
            matches!(report.outcome, Ok(Err(EffectError::NotSent { .. }))),
            "{name} → {:?}: {:?}",
            ips,
            report.outcome
        );
        assert!(
            report.denials.iter().any(|d| d.contains("resolved to")),
            "{name} → {ips:?}: {:?}",
            report.denials
        );
    }
}

/// `allow_private = true` lets an adapter's granted names into a private network: the same
/// name that is refused without it reaches the service.
#[tokio::test(flavor = "multi_thread")]
async fn allow_private_lets_a_granted_name_reach_a_private_service() {
    let sim = ProviderSim::start(SimConfig::new("t"), "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let port = sim.addr().port();
    let answers = std::collections::BTreeMap::from([(
        "svc.internal".to_string(),
        vec!["127.0.0.1".parse().unwrap()],
    )]);
    let (rt, component) = resolving(answers).await;
    let url = format!("http://svc.internal:{port}/v1/_world");
    for private in [false, true] {
        let g = grant(&[&format!("http://svc.internal:{port}")], &["api_token"])
            .allowing_private(private);
        let hostile = rt.prepare(&component, &g, &settings(&[])).unwrap();
        let report = fetch(&rt, &hostile, &url).await;
        if private {
            assert_eq!(output(report)["status"], 200);
        } else {
            assert!(
                matches!(report.outcome, Ok(Err(EffectError::NotSent { .. }))),
                "{:?}",
                report.outcome
            );
        }
    }
}

/// An HTTPS request goes to exactly the address the granted name was checked at, with the
/// name for the certificate: a TLS server the test runs sees the handshake for that name,
/// though no system resolver knows it (a second lookup by name would have failed).
#[tokio::test(flavor = "multi_thread")]
async fn https_connects_to_the_checked_address_with_the_granted_name() {
    let cert = rcgen::generate_simple_self_signed(vec!["secure.test".into()]).unwrap();
    let server = std::sync::Arc::new(
        tokio_rustls::rustls::ServerConfig::builder_with_provider(std::sync::Arc::new(
            tokio_rustls::rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.cert.der().clone()],
            tokio_rustls::rustls::pki_types::PrivateKeyDer::Pkcs8(
                cert.key_pair.serialize_der().into(),
            ),
        )
        .unwrap(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (seen_tx, mut seen) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (server, seen_tx) = (server.clone(), seen_tx.clone());
            tokio::spawn(async move {
                let acceptor = tokio_rustls::LazyConfigAcceptor::new(
                    tokio_rustls::rustls::server::Acceptor::default(),
                    tcp,
                );
                if let Ok(start) = acceptor.await {
                    let name = start.client_hello().server_name().map(str::to_string);
                    let _ = seen_tx.send(name);
                    let _ = start.into_stream(server).await;
                }
            });
        }
    });
    let answers = std::collections::BTreeMap::from([(
        "secure.test".to_string(),
        vec!["127.0.0.1".parse().unwrap()],
    )]);
    let (rt, component) = resolving(answers).await;
    let g = grant(&[&format!("https://secure.test:{port}")], &["api_token"]).allowing_private(true);
    let hostile = rt.prepare(&component, &g, &settings(&[])).unwrap();
    let report = fetch(&rt, &hostile, &format!("https://secure.test:{port}/")).await;
    // The certificate is self-signed: the plugin's request fails, after the handshake
    // reached the checked address under the granted name.
    assert!(report.outcome.is_ok(), "{:?}", report.outcome);
    let name = tokio::time::timeout(Duration::from_secs(5), seen.recv())
        .await
        .expect("the TLS server saw a handshake")
        .unwrap();
    assert_eq!(name.as_deref(), Some("secure.test"));
}

/// A refused request is reported without the secrets the call could see, even when the
/// plugin put one in the URL.
#[tokio::test(flavor = "multi_thread")]
async fn a_denial_never_quotes_a_secret() {
    let s = sandbox().await;
    // A host that is not granted: the denial names the host it refused.
    let url = "http://tok-123456.example/report";
    let report = call(
        &s,
        json!({"do": "http", "url": url}),
        Duration::from_secs(5),
    )
    .await;
    assert!(!report.denials.is_empty(), "{:?}", report.outcome);
    for d in &report.denials {
        assert!(!d.contains("tok-123456"), "{d}");
    }
    for line in &report.log {
        assert!(!line.message.contains("tok-123456"), "{}", line.message);
    }
}

/// A runtime whose plugins' host names resolve only as `answers` say, and the hostile
/// adapter loaded in it.
async fn resolving(
    answers: std::collections::BTreeMap<String, Vec<std::net::IpAddr>>,
) -> (Runtime, Arc<docket::runtime::LoadedComponent>) {
    let rt = Runtime::new(docket::runtime::RuntimeConfig {
        memory_cap_bytes: 64 << 20,
        max_instances: 8,
        resolver: docket::runtime::Resolver::Static(Arc::new(answers)),
        ..docket::runtime::RuntimeConfig::default()
    })
    .unwrap();
    let component = load(&rt, "hostile").await;
    (rt, component)
}

/// The hostile adapter's `http` call to `url`, with its secret.
async fn fetch(
    rt: &Runtime,
    hostile: &Prepared,
    url: &str,
) -> CallReport<Result<PluginReceipt, EffectError>> {
    let request = EffectRequest {
        idempotency_key: "k".into(),
        input: json!({"do": "http", "url": url}).to_string(),
        attempt: 1,
    };
    rt.invoke(
        hostile,
        env(settings(&[]), &[("api_token", "tok-123456")]),
        CallLimits {
            timeout: Duration::from_secs(5),
        },
        &request,
    )
    .await
}

/// A plugin that clones and grows `wasi:http` fields in a loop — host memory, not its own —
/// is stopped at the resource table's cap; each map was held to its size limit on the way.
#[tokio::test(flavor = "multi_thread")]
async fn a_fields_bomb_ends_at_the_host_resource_cap() {
    let s = sandbox().await;
    let report = call(&s, json!({"do": "fields-bomb"}), Duration::from_secs(20)).await;
    match report.outcome {
        Err(CallFailure::HostResources { what }) => {
            assert!(what.contains("more than 256"), "{what}")
        }
        other => panic!("expected the host resource cap, got {other:?}"),
    }
    still_serves(&s).await;
}

/// A plugin that holds ever more host resources (pollables) is stopped at the table's cap,
/// not after a million entries.
#[tokio::test(flavor = "multi_thread")]
async fn a_table_bomb_ends_at_the_host_resource_cap() {
    let s = sandbox().await;
    let started = std::time::Instant::now();
    let report = call(&s, json!({"do": "table-bomb"}), Duration::from_secs(20)).await;
    assert!(
        matches!(report.outcome, Err(CallFailure::HostResources { .. })),
        "{:?}",
        report.outcome
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    still_serves(&s).await;
}

/// A plugin that fires 40 requests without waiting gets at most 8 open at once; the rest
/// are refused, and the call reports the first few reasons and a count, not 32 lines.
#[tokio::test(flavor = "multi_thread")]
async fn a_request_flood_holds_at_most_eight_requests_open() {
    let s = sandbox().await;
    let authority = s.granted.addr().to_string();
    let report = call(
        &s,
        json!({"do": "request-flood", "authority": authority, "path": "/v1/_world"}),
        Duration::from_secs(20),
    )
    .await;
    let denials = report.denials.clone();
    let out = output(report);
    assert_eq!(out["answered"], 8, "{out}");
    assert_eq!(out["denied"], 32, "{out}");
    assert_eq!(denials.len(), 9, "{denials:?}");
    assert!(denials[0].contains("8 requests open"), "{}", denials[0]);
    assert_eq!(denials[8], "24 further refused requests are not listed");
    still_serves(&s).await;
}

/// A component whose `describe()` turns hostile is refused at load: `secrets` answers
/// `not-granted` and `wasi:http` traps, so it neither reads a secret nor pins host memory.
#[tokio::test(flavor = "multi_thread")]
async fn a_hostile_describe_is_refused_at_load() {
    let rt = runtime();
    let err = match rt
        .load_file(docket::guests::HOSTILE_DESCRIBE_BOMB.as_ref())
        .await
    {
        Ok(_) => panic!("a hostile describe() was accepted"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("`describe()` failed"), "{err}");
    assert!(!err.contains("read the secret"), "{err}");
    // The same runtime loads a well-behaved component afterwards.
    load(&rt, "hostile").await;
}

/// A `describe()` that never returns runs out of fuel well before its 5 s deadline.
#[tokio::test(flavor = "multi_thread")]
async fn a_spinning_describe_runs_out_of_fuel() {
    let rt = runtime();
    let started = std::time::Instant::now();
    let err = match rt
        .load_file(docket::guests::HOSTILE_DESCRIBE_SPIN.as_ref())
        .await
    {
        Ok(_) => panic!("a spinning describe() was accepted"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("fuel"), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

/// The peak resident memory of this process, in bytes (`VmHWM`).
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/self/status");
    kib * 1024
}

/// The most the host's resident memory may reach while every host-memory bomb runs: the
/// test binary's own footprint with a runtime, and the calls' bounded reserves.
const HOST_RSS_BOUND: u64 = 200 << 20;

/// Every way a plugin could pin host memory outside its linear memory — fields, the
/// resource table, open requests, a hostile `describe()` — run in a process of their own
/// (so no other test's memory counts), several calls at once: each call ends on its own,
/// and the process's peak resident memory stays under [`HOST_RSS_BOUND`].
#[test]
fn host_memory_bombs_stay_within_a_stated_bound() {
    const CHILD: &str = "DOCKET_TEST_HOST_MEMORY_CHILD";
    if std::env::var_os(CHILD).is_none() {
        let output = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "runtime_sandbox::host_memory_bombs_stay_within_a_stated_bound",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD, "1")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&output.stdout).into_owned()
            + &String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "the child failed:\n{text}");
        assert!(text.contains("peak resident memory"), "{text}");
        return;
    }
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            let s = Arc::new(sandbox().await);
            let authority = s.granted.addr().to_string();
            let mut tasks = Vec::new();
            for round in 0..4 {
                for mode in ["fields-bomb", "table-bomb", "request-flood"] {
                    let s = s.clone();
                    let input = json!({"do": mode, "authority": authority, "path": "/v1/_world"});
                    tasks.push(tokio::spawn(async move {
                        (
                            mode,
                            round,
                            call(&s, input, Duration::from_secs(30)).await.outcome,
                        )
                    }));
                }
            }
            for task in tasks {
                let (mode, round, outcome) = task.await.unwrap();
                match (mode, outcome) {
                    ("request-flood", Ok(Ok(_))) => {}
                    (_, Err(CallFailure::HostResources { .. })) if mode != "request-flood" => {}
                    (mode, other) => panic!("{mode} (round {round}) ended with {other:?}"),
                }
            }
            for _ in 0..4 {
                assert!(
                    s.rt.load_file(docket::guests::HOSTILE_DESCRIBE_BOMB.as_ref())
                        .await
                        .is_err()
                );
            }
            still_serves(&s).await;
        });
    let peak = peak_rss();
    println!("peak resident memory: {} MiB", peak >> 20);
    assert!(
        peak < HOST_RSS_BOUND,
        "peak resident memory {} MiB over the bound of {} MiB",
        peak >> 20,
        HOST_RSS_BOUND >> 20
    );
}
