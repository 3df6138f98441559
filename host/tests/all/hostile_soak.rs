//! The hostile-component soak: every hostile mode, over and over, beside ordinary
//! deliveries on one real host for a minute (`DOCKET_SOAK_SECS` to change it). The
//! deliveries complete, each exactly once at the provider, and the host's resident memory
//! stays under a stated bound the whole time.

use crate::host_process::{HostOptions, HostProcess, PROVIDER_TOKEN, document};
use serde_json::json;
use std::time::{Duration, Instant};

/// Every hostile mode the soak cycles through.
const MODES: &[&str] = &[
    "loop",
    "alloc",
    "panic",
    "flood",
    "big-output",
    "fields-bomb",
    "table-bomb",
    "request-flood",
    "leak-secret",
    "read-file",
    "socket",
];

/// The most resident memory the host may reach: its own ~100 MiB and the calls' budgets
/// (64 MiB each, a few at once), with room — far below what one unbounded bomb takes
/// (a fields bomb without the caps pinned 500 MiB in a second).
const RSS_BOUND_MIB: u64 = 384;

/// The resident memory of process `pid` now, in MiB.
fn rss_mib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kib| kib / 1024)
}

#[tokio::test(flavor = "multi_thread")]
async fn hostile_components_beside_normal_deliveries_for_a_minute() {
    let soak = Duration::from_secs(
        std::env::var("DOCKET_SOAK_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(60),
    );
    let sim = docket::sim::ProviderSim::start(
        docket::sim::SimConfig::new(PROVIDER_TOKEN),
        "127.0.0.1:0".parse().unwrap(),
    )
    .await
    .unwrap();
    let base = sim.base_url();
    let hostile = format!(
        r#"
name = "hostile-call"
version = 1
deadline = "1h"

[input_schema]
type = "object"
required = ["do"]

[[steps]]
id = "call"
label = "Call the hostile plugin"
kind = "adapter"
component = "hostile"
version = "^1"
timeout = "3s"

[steps.input]
do = "$input.do"
authority = "$input.authority"
path = "$input.path"

[steps.retry]
max_attempts = 1

[steps.capabilities]
outbound_hosts = ["{base}"]
secrets = ["api_token"]
"#
    );
    let host = HostProcess::start(HostOptions {
        provider: Some(base.clone()),
        config: format!(
            "[limits]\nmemory_mib = 64\n[adapters.hostile]\nallow_hosts = [\"{base}\"]\nallow_secrets = [\"api_token\"]\n"
        ),
        workflows: vec![("hostile-call.toml".into(), hostile)],
        ..HostOptions::default()
    })
    .await;
    let pid = host.pid();
    let authority = base.trim_start_matches("http://").to_string();
    let started = Instant::now();
    let (mut normal, mut hostile_ids, mut peak) = (Vec::new(), Vec::new(), 0u64);
    let mut round = 0usize;
    while started.elapsed() < soak {
        let mode = MODES[round % MODES.len()];
        let (status, created) = host
            .submit(
                "hostile-call",
                &format!("hostile-{round}"),
                json!({"do": mode, "authority": authority, "path": "/v1/_world"}),
            )
            .await;
        assert_eq!(status, 201, "{mode}: {created}");
        hostile_ids.push((mode, created["workflow_id"].as_str().unwrap().to_string()));
        let (status, created) = host
            .submit(
                "document-delivery",
                &format!("normal-{round}"),
                document(&format!("Normal {round}")),
            )
            .await;
        assert_eq!(status, 201, "{created}");
        normal.push(created["workflow_id"].as_str().unwrap().to_string());
        peak = peak.max(rss_mib(pid));
        round += 1;
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    for id in &normal {
        let wf = host
            .wait_for(
                id,
                &["completed", "needs_review", "failed"],
                Duration::from_secs(60),
            )
            .await;
        assert_eq!(wf["state"], "completed", "{wf:#}");
        peak = peak.max(rss_mib(pid));
    }
    let mut ends = std::collections::BTreeMap::<(String, String), usize>::new();
    for (mode, id) in &hostile_ids {
        // Each hostile call ends on its own: in review, failed or (the benign probes)
        // completed — never stuck running.
        let wf = host
            .wait_for(
                id,
                &["completed", "needs_review", "failed"],
                Duration::from_secs(60),
            )
            .await;
        let step = &wf["steps"][0];
        let how = step["state"].as_str().unwrap_or("?").to_string();
        *ends.entry((mode.to_string(), how)).or_default() += 1;
    }
    println!("soak: hostile calls by mode and step state: {ends:?}");
    for bomb in ["fields-bomb", "table-bomb", "alloc", "loop", "panic"] {
        assert!(
            ends.keys()
                .any(|(m, s)| m == bomb && s != "succeeded" && s != "completed"),
            "{bomb} did not end in failure or review: {ends:?}"
        );
    }
    peak = peak.max(rss_mib(pid));
    // Once each at the provider: as many deliveries as normal intents.
    let world = host.world().await;
    assert_eq!(world.len(), normal.len(), "{} deliveries", world.len());
    println!(
        "soak: {} rounds in {:?}, {} deliveries, host peak RSS {peak} MiB (bound {RSS_BOUND_MIB} MiB)",
        round,
        started.elapsed(),
        world.len()
    );
    assert!(peak < RSS_BOUND_MIB, "host RSS reached {peak} MiB");
    assert!(host.get("/healthz").await.0 == 200);
}
