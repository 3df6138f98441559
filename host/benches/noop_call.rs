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
const ROUNDS: usize = 5;

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
        let mut medians = Vec::new();
        for round in 0..ROUNDS {
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
            let pct = |p: f64| samples[((samples.len() as f64 - 1.0) * p) as usize].as_secs_f64() * 1e6;
            let total: Duration = samples.iter().sum();
            println!(
                "round {round}: median {:>6.1} µs  p90 {:>6.1} µs  p99 {:>6.1} µs  sustained {:>6.0} calls/s",
                pct(0.5),
                pct(0.9),
                pct(0.99),
                CALLS as f64 / total.as_secs_f64()
            );
            medians.push(pct(0.5));
        }
        medians.sort_by(f64::total_cmp);
        let m = medians[ROUNDS / 2];
        println!("noop per-call overhead (instantiate from cached InstancePre + invoke), {ROUNDS} rounds x {CALLS} calls, one core");
        println!("  median of round medians {m:.1} µs  ({:.0} calls/s); best round {:.1} µs, worst {:.1} µs", 1e6 / m, medians[0], medians[ROUNDS - 1]);
    });
}
