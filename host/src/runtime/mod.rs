//! The component runtime: the only module that touches wasmtime.
//!
//! It loads components (compiled once, cached on disk by digest), tells adapters from
//! handlers, asks them to `describe()` themselves, refuses any whose imports or declared
//! needs exceed the step's effective grant, and runs calls. Each call gets a fresh store
//! with an empty WASI context, a memory cap and a deadline, instantiated from an
//! `InstancePre` cached per (component digest, grant). A trap, panic, loop or memory bomb
//! ends only that call, reported as a [`CallFailure`]; the runtime never touches the store
//! of durable state — callers record what it returns.

mod bindings;
mod cache;
mod call;
mod egress;
mod keepalive;
mod legacy;
mod load;
mod pipe;
mod state;
#[cfg(test)]
mod tests;

pub use bindings::PLUGIN_PACKAGE_VERSION;
pub use call::{
    BatchAnswer, CallFailure, CallLimits, CallReport, MAX_OUTPUT_BYTES, MAX_REFERENCE_BYTES,
    MAX_TEXT_BYTES,
};
#[cfg(test)]
pub(crate) use call::{bounded, cut_text};
pub use load::{ComponentKind, LoadError, LoadedComponent, Prepared, World};
pub use state::{CallEnv, LogLevel, LogLine, LogSource};

use cache::DiskCache;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

/// How often the engine's epoch advances; the granularity of call deadlines.
const EPOCH_TICK: Duration = Duration::from_millis(10);

pub use egress::{
    EgressTap, Resolver, ScriptedAnswer, ScriptedHosts, ScriptedRequest, TapAction, TappedAnswer,
    TappedRequest,
};

/// Most components compiled at once.
const MAX_COMPILES: usize = 2;

/// Settings of the runtime, fixed for the life of a host.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// Most linear memory one instance may grow to, in bytes.
    pub memory_cap_bytes: usize,
    /// Most calls alive at once: the pooling allocator holds this many instances for calls,
    /// and its own few for `describe()` besides.
    pub max_instances: u32,
    /// Where compiled components are cached; `None` disables the disk cache.
    pub cache_dir: Option<PathBuf>,
    /// How plugins' outbound host names are resolved (the system's resolver by default).
    pub resolver: Resolver,
    /// Watches and steers every outbound request (`docket adapter verify`); none in a host.
    pub tap: Option<Arc<dyn EgressTap>>,
    /// Providers answered in place of the network (`docket scenario`); none in a host.
    pub scripted: Option<Arc<dyn ScriptedHosts>>,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self {
            memory_cap_bytes: 128 << 20,
            max_instances: 256,
            cache_dir: None,
            resolver: Resolver::System,
            tap: None,
            scripted: None,
        }
    }
}

/// Why the runtime could not start.
#[derive(Debug, thiserror::Error)]
#[error("could not configure the WebAssembly engine: {0}")]
pub struct EngineError(String);

/// The engine, its caches and the epoch ticker. Cheap to clone.
#[derive(Clone)]
pub struct Runtime {
    inner: Arc<Inner>,
}

struct Inner {
    engine: Engine,
    config: RuntimeConfig,
    disk: Option<Arc<DiskCache>>,
    /// Loaded components by digest.
    loaded: Mutex<HashMap<String, Arc<LoadedComponent>>>,
    /// Linked, pre-instantiated components by (digest, grant fingerprint).
    prepared: Mutex<HashMap<(String, String), Arc<Prepared>>>,
    /// Compilations at once, each with its `describe()`: uploads must take neither every
    /// core nor the pool's instances from the attempts.
    compiles: tokio::sync::Semaphore,
    stop_ticker: Arc<AtomicBool>,
    /// Plugins' kept-alive outbound connections.
    connections: Arc<keepalive::Pool>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.stop_ticker.store(true, Ordering::Relaxed);
    }
}

impl Runtime {
    /// An engine with the component model, async calls, epoch deadlines and a pooling
    /// allocator sized by `config`.
    pub fn new(config: RuntimeConfig) -> Result<Self, EngineError> {
        // `describe()` runs under a compile permit, so at most `MAX_COMPILES` of its instances
        // are alive at once: the pool holds them beside the calls', and an upload can never
        // take an instance an attempt needs.
        let instances = config.max_instances + MAX_COMPILES as u32;
        let mut pool = PoolingAllocationConfig::new();
        pool.total_component_instances(instances)
            .total_core_instances(instances * 4)
            .total_memories(instances * 2)
            .total_tables(instances * 4)
            // Every async call runs on a pooled fiber stack; the default of 1,000 would refuse
            // calls past it long before `max_concurrent` (up to 10,000) is reached.
            .total_stacks(instances)
            .max_memory_size(config.memory_cap_bytes)
            // Rust guests have one memory and a handful of core instances per component.
            .max_memories_per_component(4)
            .max_core_instances_per_component(16)
            // Reset memory by scanning for dirty pages (Linux 6.7+) and memset-ing only those,
            // instead of an madvise per instance: the per-call cost drops by two thirds.
            .pagemap_scan(wasmtime::Enabled::Auto)
            .linear_memory_keep_resident(2 << 20)
            .table_keep_resident(64 << 10);
        let mut wasm = Config::new();
        wasm.epoch_interruption(true)
            // Metered only where a call sets a budget (`describe()`); every other call is
            // bounded by its deadline and given all the fuel there is.
            .consume_fuel(true)
            .wasm_component_model(true)
            // Reserve only what the cap allows, so the pool's address space stays modest.
            .memory_reservation(config.memory_cap_bytes as u64)
            .memory_guard_size(64 << 10)
            .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        let engine = Engine::new(&wasm).map_err(|e| EngineError(format!("{e:#}")))?;

        let stop = Arc::new(AtomicBool::new(false));
        let ticker_engine = engine.weak();
        let ticker_stop = stop.clone();
        std::thread::Builder::new()
            .name("docket-epoch".into())
            .spawn(move || {
                while !ticker_stop.load(Ordering::Relaxed) {
                    std::thread::sleep(EPOCH_TICK);
                    match ticker_engine.upgrade() {
                        Some(engine) => engine.increment_epoch(),
                        None => break,
                    }
                }
            })
            .map_err(|e| EngineError(format!("cannot start the epoch thread: {e}")))?;

        let disk = config
            .cache_dir
            .as_deref()
            .map(|d| Arc::new(DiskCache::new(d, &engine)));
        Ok(Self {
            inner: Arc::new(Inner {
                engine,
                config,
                disk,
                loaded: Mutex::default(),
                compiles: tokio::sync::Semaphore::new(MAX_COMPILES),
                connections: Arc::default(),
                prepared: Mutex::default(),
                stop_ticker: stop,
            }),
        })
    }

    /// The runtime's settings.
    pub fn config(&self) -> &RuntimeConfig {
        &self.inner.config
    }

    /// Instances of the pool alive now, calls' and `describe()`'s alike: a call holds one
    /// from its instantiation until it ends, so this shows that calls have started (tests
    /// wait on it instead of sleeping).
    pub fn instances_in_use(&self) -> u64 {
        self.inner
            .engine
            .pooling_allocator_metrics()
            .map_or(0, |pool| pool.component_instances())
    }

    /// The most instances the pool holds at once: `max_instances` for calls, and one for
    /// each `describe()` a compile permit lets run beside them.
    pub fn instance_capacity(&self) -> u64 {
        u64::from(self.inner.config.max_instances) + MAX_COMPILES as u64
    }
}
