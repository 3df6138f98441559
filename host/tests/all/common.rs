//! Shared set-up: a runtime with a test-wide compile cache, call environments, the simulator.

use docket::capabilities::{Grant, HostRule, SecretSource};
use docket::clock::SystemClock;
use docket::runtime::{CallEnv, LoadedComponent, Runtime, RuntimeConfig};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

/// A runtime with a small pool and the shared on-disk compile cache.
pub fn runtime() -> Runtime {
    runtime_with_cap(64 << 20)
}

pub fn runtime_with_cap(memory_cap_bytes: usize) -> Runtime {
    Runtime::new(RuntimeConfig {
        memory_cap_bytes,
        max_instances: 32,
        cache_dir: Some(cache_dir()),
        ..RuntimeConfig::default()
    })
    .expect("engine")
}

fn cache_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/test-component-cache")
}

/// Loads a built example by name.
pub async fn load(rt: &Runtime, name: &str) -> Arc<LoadedComponent> {
    let path = docket::guests::path(name).unwrap_or_else(|| panic!("no built component `{name}`"));
    rt.load_file(path.as_ref())
        .await
        .unwrap_or_else(|e| panic!("load {name}: {e}"))
}

pub fn rule(s: &str) -> HostRule {
    s.parse().unwrap()
}

pub fn grant(hosts: &[&str], secrets: &[&str]) -> Grant {
    Grant::new(
        hosts.iter().map(|h| rule(h)),
        secrets.iter().map(|s| s.to_string()),
    )
}

pub fn settings(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

pub fn env(settings: BTreeMap<String, String>, secrets: &[(&str, &str)]) -> CallEnv {
    CallEnv {
        settings: Arc::new(settings),
        secrets: Arc::new(SecretSource::from_pairs(
            secrets.iter().map(|(k, v)| (*k, *v)),
        )),
        clock: SystemClock::new(),
        label: "test".into(),
    }
}
