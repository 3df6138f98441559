//! Operations against a real `docket serve`: the metrics a scraper reads move by exactly
//! what happened, readiness follows the store and the tasks, and the metrics listener
//! serves scrapers that hold no token.

use crate::host_process::{HostOptions, HostProcess, PROVIDER_TOKEN, document, free_port};
use docket::sim::{ProviderSim, SimConfig};
use serde_json::json;
use std::collections::BTreeMap;
use std::time::Duration;

/// A workflow of one call to the hostile test plugin, doing what its input says.
const HOSTILE: &str = r#"
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
timeout = "5s"

[steps.input]
do = "$input.do"

[steps.retry]
max_attempts = 1

[steps.capabilities]
outbound_hosts = ["http://127.0.0.1:9"]
secrets = ["api_token"]
"#;

const HOSTILE_ALLOWANCE: &str = r#"
[adapters.hostile]
allow_hosts = ["http://127.0.0.1:9"]
allow_secrets = ["api_token"]
"#;

/// The samples of a Prometheus text page: `name{labels}` → value.
pub fn samples(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            Some((series.to_string(), value.parse().ok()?))
        })
        .collect()
}

/// The sum of every sample of `name` whose labels include each of `labels`.
fn sum(samples: &BTreeMap<String, f64>, name: &str, labels: &[&str]) -> f64 {
    samples
        .iter()
        .filter(|(series, _)| {
            series.split_once('{').map_or(series.as_str(), |(n, _)| n) == name
                && labels.iter().all(|l| series.contains(l))
        })
        .map(|(_, v)| v)
        .sum()
}

async fn scrape(url: &str) -> BTreeMap<String, f64> {
    let r = reqwest::get(format!("{url}/metrics")).await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let kind = r.headers()["content-type"].to_str().unwrap().to_string();
    assert!(kind.starts_with("application/openmetrics-text"), "{kind}");
    let text = r.text().await.unwrap();
    assert!(text.ends_with("# EOF\n"), "{text}");
    samples(&text)
}

/// One intent replayed twice and conflicting once, one step that takes three attempts, one
/// lease expiry, one trap and one review: each moves its series by exactly that much.
#[tokio::test(flavor = "multi_thread")]
async fn each_metric_moves_by_what_happened() {
    let sim = ProviderSim::start(
        SimConfig::new(PROVIDER_TOKEN),
        "127.0.0.1:0".parse().unwrap(),
    )
    .await
    .unwrap();
    let metrics_port = free_port();
    let options = |dir, failpoint: bool| HostOptions {
        config: format!(
            "metrics_listen = \"127.0.0.1:{metrics_port}\"\n[limits]\nlease = \"500ms\"\n{HOSTILE_ALLOWANCE}"
        ),
        workflows: vec![("hostile-call.toml".into(), HOSTILE.into())],
        env: if failpoint {
            vec![("DOCKET_FAILPOINT".into(), "checkpoint-2".into())]
        } else {
            Vec::new()
        },
        dir,
        provider: Some(sim.base_url()),
        ..HostOptions::default()
    };

    // A host dies holding the lease of a delivery; the next host's recovery closes it.
    let mut crashing = HostProcess::start(options(None, true)).await;
    let (status, crashed) = crashing
        .submit("document-delivery", "crashed", document("Crashed"))
        .await;
    assert_eq!(status, 201, "{crashed}");
    crashing.wait_exit(Duration::from_secs(60)).await;
    let dir = crashing.kill();
    let host = HostProcess::start(options(Some(dir), false)).await;
    let crashed = crashed["workflow_id"].as_str().unwrap();
    host.wait_for(crashed, &["completed"], Duration::from_secs(30))
        .await;
    let metrics_url = format!("http://127.0.0.1:{metrics_port}");
    let before = scrape(&metrics_url).await;
    assert_eq!(sum(&before, "docket_lease_expiries_total", &[]), 1.0);

    // One intent: created once, replayed twice, in conflict once; its delivery is refused
    // twice by an unavailable provider and accepted the third time.
    sim.sim()
        .set_faults(json!({"unavailable_next": 2, "retry_after_s": 0}))
        .unwrap();
    let (status, created) = host.submit("document-delivery", "m-1", document("M")).await;
    assert_eq!(status, 201, "{created}");
    for _ in 0..2 {
        let (status, _) = host.submit("document-delivery", "m-1", document("M")).await;
        assert_eq!(status, 200);
    }
    let (status, _) = host
        .submit("document-delivery", "m-1", document("Other"))
        .await;
    assert_eq!(status, 409);
    let id = created["workflow_id"].as_str().unwrap();
    let wf = host
        .wait_for(id, &["completed"], Duration::from_secs(60))
        .await;
    assert_eq!(wf["steps"][2]["attempts"], 3, "{wf:#}");

    // A plugin that panics: a trap, and (its effect unknown) a workflow in review.
    let (status, hostile) = host
        .submit("hostile-call", "trap-1", json!({"do": "panic"}))
        .await;
    assert_eq!(status, 201, "{hostile}");
    let hostile = host
        .wait_for(
            hostile["workflow_id"].as_str().unwrap(),
            &["needs_review", "failed"],
            Duration::from_secs(30),
        )
        .await;
    assert_eq!(hostile["state"], "needs_review", "{hostile:#}");

    let after = scrape(&metrics_url).await;
    let moved =
        |name: &str, labels: &[&str]| sum(&after, name, labels) - sum(&before, name, labels);
    assert_eq!(moved("docket_intents_total", &["result=\"created\""]), 2.0);
    assert_eq!(moved("docket_intents_total", &["result=\"replayed\""]), 2.0);
    assert_eq!(moved("docket_intents_total", &["result=\"conflict\""]), 1.0);
    assert_eq!(
        moved(
            "docket_attempts_total",
            &["workflow=\"document-delivery\"", "step=\"deliver\""]
        ),
        3.0
    );
    assert_eq!(
        moved(
            "docket_attempts_total",
            &["step=\"deliver\"", "outcome=\"accepted\""]
        ),
        1.0
    );
    assert_eq!(
        moved("docket_attempts_total", &["workflow=\"hostile-call\""]),
        1.0
    );
    assert_eq!(moved("docket_plugin_traps_total", &["kind=\"trap\""]), 1.0);
    assert_eq!(moved("docket_lease_expiries_total", &[]), 0.0);
    assert_eq!(sum(&after, "docket_review_queue", &[]), 1.0);
    assert_eq!(
        sum(&after, "docket_workflows", &["state=\"needs_review\""]),
        1.0
    );
    assert_eq!(sum(&after, "docket_outcome_unknown_steps", &[]), 1.0);
    // Ended workflows are tallied by the store: the crashed one and m-1.
    assert_eq!(
        sum(
            &after,
            "docket_workflows_ended_total",
            &["workflow=\"document-delivery\"", "state=\"completed\""]
        ),
        2.0
    );
    assert_eq!(moved("docket_time_to_outcome_seconds_count", &[]), 1.0);
    assert_eq!(sum(&after, "docket_attempts_per_workflow_count", &[]), 2.0);
    // m-1 used five attempts (validate, render, three deliveries): in the `le="5.0"`
    // bucket and not below.
    assert_eq!(
        moved("docket_attempts_per_workflow_bucket", &["le=\"5.0\""])
            - moved("docket_attempts_per_workflow_bucket", &["le=\"4.0\""]),
        1.0
    );
    // The API's /metrics serves the same series to its operators (open mode: local).
    let (status, _) = host.get("/healthz").await;
    assert_eq!(status, 200);
    let api = scrape(&host.url).await;
    assert!(api.contains_key("docket_review_queue"));
}
