//! Per-call overhead of the `noop` adapter: a fresh store, instantiation from the cached
//! `InstancePre`, and one `invoke` — everything a real attempt pays besides the adapter's
//! own work. Runs on one core (a current-thread tokio runtime) and prints the median,
//! the 99th percentile and calls per second.
//!
//! Run: `cargo bench --bench noop_call`

use docket::capabilities::{Grant, SecretSource};
use docket::clock::SystemClock;
use docket::contract::EffectRequest;
use docket::runtime::{CallEnv, CallLimits, Runtime, RuntimeConfig};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

const WARMUP: usize = 2_000;
const CALLS: usize = 20_000;

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
        let path = docket::guests::path("noop").unwrap();
        let component = runtime.load_file(path.as_ref()).await.unwrap();
        let prepared = runtime.prepare(&component, &Grant::none(), &BTreeMap::new()).unwrap();
        let env = CallEnv {
            settings: Arc::new(BTreeMap::new()),
            secrets: Arc::new(SecretSource::default()),
            clock: SystemClock::new(),
            label: "bench".into(),
        };
        let request = EffectRequest {
            idempotency_key: "bench-key".into(),
            input: "{}".into(),
            attempt: 1,
        };
        let limits = CallLimits::default();
        let mut samples = Vec::with_capacity(CALLS);
        for i in 0..WARMUP + CALLS {
            let start = Instant::now();
            let report = runtime.invoke(&prepared, env.clone(), limits, &request).await;
            let took = start.elapsed();
            assert!(matches!(report.outcome, Ok(Ok(_))), "{:?}", report.outcome);
            if i >= WARMUP {
                samples.push(took);
            }
        }
        samples.sort();
        let pct = |p: f64| samples[((samples.len() as f64 - 1.0) * p) as usize];
        let median = pct(0.5);
        let total: Duration = samples.iter().sum();
        println!("noop per-call overhead (instantiate from cached InstancePre + invoke), {CALLS} calls, one core");
        println!("  median      {:>8.1} µs", median.as_secs_f64() * 1e6);
        println!("  p90         {:>8.1} µs", pct(0.9).as_secs_f64() * 1e6);
        println!("  p99         {:>8.1} µs", pct(0.99).as_secs_f64() * 1e6);
        println!("  calls/s     {:>8.0} (from the median)", 1.0 / median.as_secs_f64());
        println!("  calls/s     {:>8.0} (sustained: {CALLS} calls / total time)", CALLS as f64 / total.as_secs_f64());
    });
}
