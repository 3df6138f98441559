//! The runtime with a built plugin: what the sandbox shows a guest of the host.

use super::{CallEnv, CallLimits, Runtime, RuntimeConfig};
use crate::capabilities::{Grant, SecretSource};
use crate::clock::ManualClock;
use crate::contract::EffectRequest;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

#[tokio::test]
async fn a_guest_reads_the_hosts_clock_as_its_wall_clock() {
    let cache =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/test-unit-component-cache");
    let rt = Runtime::new(RuntimeConfig {
        cache_dir: Some(cache),
        ..RuntimeConfig::default()
    })
    .unwrap();
    let path = crate::guests::path("hostile").expect("the hostile test plugin is built");
    let component = rt.load_file(std::path::Path::new(path)).await.unwrap();
    let prepared = rt
        .prepare(
            &component,
            // The hostile plugin imports outbound HTTP; a loopback host it never calls.
            &Grant::new(
                ["http://127.0.0.1:9".parse().unwrap()],
                ["api_token".to_string()],
            ),
            &BTreeMap::new(),
        )
        .unwrap();
    // A host clock far from the machine's: 2001-09-09T01:46:40Z.
    let clock = ManualClock::new(1_000_000_000_000);
    clock.advance(1_234);
    let env = CallEnv {
        settings: Arc::new(BTreeMap::new()),
        secrets: Arc::new(SecretSource::from_pairs([("api_token", "tok-123456")])),
        clock: clock.clone(),
        label: "clock-test".into(),
    };
    let request = EffectRequest {
        idempotency_key: "k".into(),
        input: r#"{"do": "now"}"#.into(),
        attempt: 1,
    };
    let report = rt
        .invoke(
            &prepared,
            env,
            CallLimits {
                timeout: Duration::from_secs(10),
            },
            &request,
        )
        .await;
    let receipt = report.outcome.unwrap().unwrap();
    let output: serde_json::Value = serde_json::from_str(&receipt.output).unwrap();
    assert_eq!(output["now_ms"], 1_000_000_001_234u64, "{output}");
}
