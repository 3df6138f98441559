//! The provider simulator: an implementation of the reference delivery protocol
//! (create with an idempotency key, look up by key, cancel) with fault injection.
//!
//! It is the *world* of docket's end-to-end tests: its record of deliveries
//! ([`ProviderSim::world`], `GET /v1/_world`) is the ground truth for "did the effect happen,
//! and how many times". Adapter authors test against it, `docket serve` embeds it, and crash
//! tests check its record.
//!
//! Layout:
//! - `faults.rs`: [`Faults`], the settings, and the seeded dice that apply shares and counters;
//! - `state.rs`: the world and the protocol decisions, synchronous and clock-free (callers
//!   pass `now`), so they are tested without sockets;
//! - `server.rs`: the axum routes and the connection loop. Connections are served with hyper
//!   directly so that "lost response after commit" can close a connection without writing a
//!   single HTTP byte.
//!
//! `POST /v1/deliveries/batch` creates up to [`MAX_BATCH_ITEMS`] deliveries at once, each
//! under its own `idempotency_key` (`{"items": [<delivery request + key>, …]}`), and answers
//! `200` with each item's answer in order — `{"code", "delivery"}` or `{"code", "error"}`,
//! the status a single create would have had. Transport efficiency never merges
//! consequences: an item and a single create with the same key and body replay each other.
//! The request-level faults (`503`, `429`, a lost or slow answer) apply to a batch as to one
//! request; `item_unavailable` / `item_unavailable_next` answer single items `503`, a
//! provider that takes part of a batch.
//!
//! Shares and the plain `*_next` counters apply to the create endpoints only. Cancels
//! (`POST /v1/deliveries/{id}/cancel`) have their own counters: `lose_next_cancel` applies
//! the cancel and then loses its response, `unavailable_next_cancel` answers `503` and
//! cancels nothing. Lookups always answer (subject to the token and the `query` switch), so
//! tests can inspect the provider while it misbehaves; a cancelled delivery shows there with
//! `"status": "cancelled"` and its `cancelled_at`.
//!
//! With `webhook_url` and `webhook_secret` set, the provider posts its own events — a
//! delivery accepted, a delivery cancelled — signed per Standard Webhooks, late or twice on
//! request (`webhooks.rs`).
//!
//! In `/v1/_world` every delivery also carries `cancel_requests`: each cancel request received
//! for it with the right token, whatever the answer. With `cancelled_at` (set by the first
//! cancel that took effect, never changed after) a test can tell "cancelled once, asked
//! twice" from "never asked".

mod faults;
pub mod ledger;
mod server;
mod state;
#[cfg(test)]
mod tests;
mod webhooks;

use std::fmt;
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use http::HeaderMap;
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

pub use faults::Faults;
pub use state::{Delivery, DeliveryStatus, KeySnapshot, MAX_BATCH_ITEMS, WorldSnapshot};

use state::World;

/// A source of the current time, for `created_at`, `cancelled_at`, key retention and
/// eventual visibility.
pub type Clock = Arc<dyn Fn() -> SystemTime + Send + Sync>;

/// Errors of the simulator's own API (fault settings); protocol answers are HTTP statuses.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The patch was valid JSON but not an object.
    #[error(
        "fault settings must be a JSON object such as {{\"lose\": 0.3, \"query\": false}}, \
         got {found}"
    )]
    FaultsNotAnObject {
        /// The patch as received.
        found: String,
    },
    /// An unknown field or a value of the wrong type.
    #[error("invalid fault setting `{field}`: {reason}")]
    InvalidFaults {
        /// The field as named in the patch.
        field: String,
        /// What was wrong with it; for an unknown field this lists the known ones.
        reason: String,
    },
    /// A saved world that cannot be loaded.
    #[error("the saved world cannot be loaded: {0}")]
    Snapshot(String),
    /// A share that is not a probability.
    #[error("fault setting `{field}` is {value}, but a share must be a number from 0 to 1")]
    ShareOutOfRange {
        /// The share's field name.
        field: &'static str,
        /// The value given.
        value: f64,
    },
}

/// How to start a simulator.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// The bearer token every protocol request must carry.
    pub token: String,
    /// The fault settings at start; change them later with [`ProviderSim::set_faults`].
    pub faults: Faults,
    /// How long an idempotency key is remembered; after that the same key creates again.
    pub key_retention: Duration,
    /// Whether `POST /v1/_faults` is served (a host's embedded simulator serves it only
    /// with `--test-controls`).
    pub fault_endpoint: bool,
    /// The development simulator a host embeds: it answers only to loopback names (a page
    /// that rebinds its DNS name to this machine reads nothing), and — unless its fault
    /// endpoint is served (a test host) — `GET /v1/_world` needs the token like the
    /// protocol's routes.
    pub guarded: bool,
}

impl SimConfig {
    /// The key retention the protocol states by default: 24 hours.
    pub const DEFAULT_KEY_RETENTION: Duration = Duration::from_secs(24 * 60 * 60);

    /// The token of [`SimConfig::default`]; a test fixture, not a secret.
    pub const DEFAULT_TOKEN: &str = "docket-sim-token";

    /// A well-behaved provider (default [`Faults`], 24 h key retention) with this token.
    pub fn new(token: impl Into<String>) -> Self {
        Self {
            token: token.into(),
            faults: Faults::default(),
            key_retention: Self::DEFAULT_KEY_RETENTION,
            fault_endpoint: true,
            guarded: false,
        }
    }
}

impl Default for SimConfig {
    /// [`SimConfig::new`] with [`SimConfig::DEFAULT_TOKEN`].
    fn default() -> Self {
        Self::new(Self::DEFAULT_TOKEN)
    }
}

/// A handle to one simulator's shared state; cloning it is cheap and every clone sees the
/// same world.
#[derive(Clone)]
pub struct ProviderSim {
    shared: Arc<Shared>,
}

struct Shared {
    token: String,
    fault_endpoint: bool,
    guarded: bool,
    clock: Clock,
    world: Mutex<World>,
    /// Connections accepted so far (a client that keeps connections alive opens few).
    connections: std::sync::atomic::AtomicU64,
    /// Connections open now.
    open: std::sync::atomic::AtomicU64,
    /// Create requests being handled now, the most ever at once, and those refused for
    /// being beyond `max_concurrent`.
    creating: std::sync::atomic::AtomicU64,
    peak_creating: std::sync::atomic::AtomicU64,
    busy_refusals: std::sync::atomic::AtomicU64,
    /// The client that posts the provider's events.
    events: reqwest::Client,
}

/// A create request being handled (see [`ProviderSim::creating`]).
struct Creating(Arc<Shared>);

impl Drop for Creating {
    fn drop(&mut self) {
        self.0
            .creating
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

impl fmt::Debug for ProviderSim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The token is a credential of sorts; keep it out of logs.
        f.debug_struct("ProviderSim")
            .field("faults", &self.faults())
            .field("key_retention", &self.key_retention())
            .finish_non_exhaustive()
    }
}

impl ProviderSim {
    /// A simulator on the real clock. Shares outside 0..=1 are not rejected here (a share
    /// above 1 always fires, below 0 never); call [`Faults::validate`] on untrusted input.
    pub fn new(config: SimConfig) -> Self {
        Self::with_clock(config, Arc::new(SystemTime::now))
    }

    /// A simulator whose `created_at`, key retention and visibility follow `clock`.
    pub fn with_clock(config: SimConfig, clock: Clock) -> Self {
        let world = World::new(config.faults, config.key_retention);
        Self {
            shared: Arc::new(Shared {
                token: config.token,
                fault_endpoint: config.fault_endpoint,
                guarded: config.guarded,
                clock,
                world: Mutex::new(world),
                connections: Default::default(),
                open: Default::default(),
                creating: Default::default(),
                peak_creating: Default::default(),
                busy_refusals: Default::default(),
                events: reqwest::Client::new(),
            }),
        }
    }

    /// Serves the protocol on `listener` until this future is dropped or its task aborted;
    /// dropping it also ends every open connection.
    ///
    /// # Errors
    ///
    /// None in practice: failed accepts are logged and retried, so this only ends by being
    /// dropped. The `Result` leaves room for fatal listener errors.
    pub async fn serve(self, listener: TcpListener) -> io::Result<()> {
        server::serve(self, listener).await
    }

    /// Binds `addr` (port 0 picks a free port) and serves on a new tokio task.
    ///
    /// # Errors
    ///
    /// The bind error, e.g. when the port is taken.
    pub async fn start(config: SimConfig, addr: SocketAddr) -> io::Result<RunningSim> {
        ProviderSim::new(config).spawn(addr).await
    }

    /// Like [`ProviderSim::start`] for an existing handle, e.g. one made
    /// [`with_clock`](ProviderSim::with_clock) or with faults already set.
    ///
    /// # Errors
    ///
    /// The bind error, e.g. when the port is taken.
    pub async fn spawn(self, addr: SocketAddr) -> io::Result<RunningSim> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(self.clone().serve(listener));
        Ok(RunningSim {
            addr,
            sim: self,
            task,
        })
    }

    /// How many connections the simulator has accepted.
    pub fn connections(&self) -> u64 {
        self.shared
            .connections
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// How many connections are open now.
    pub fn open_connections(&self) -> u64 {
        self.shared.open.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The most create requests it has handled at once (those refused included).
    pub fn peak_concurrent(&self) -> u64 {
        self.shared
            .peak_creating
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// How many create requests it refused with `429` for being beyond `max_concurrent`.
    pub fn busy_refusals(&self) -> u64 {
        self.shared
            .busy_refusals
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Counts a create request in until the guard is dropped; answers how many are being
    /// handled with it.
    fn creating(&self) -> (Creating, u64) {
        use std::sync::atomic::Ordering::SeqCst;
        let now = self.shared.creating.fetch_add(1, SeqCst) + 1;
        self.shared.peak_creating.fetch_max(now, SeqCst);
        (Creating(self.shared.clone()), now)
    }

    /// Every delivery ever created, in creation order, with its current status.
    pub fn world(&self) -> Vec<Delivery> {
        self.lock().deliveries()
    }

    /// Merges `patch` (a JSON object naming some [`Faults`] fields) into the settings and
    /// returns the full new settings. A patch naming `seed` restarts the share sequence.
    ///
    /// # Errors
    ///
    /// As [`Faults::patched`]; on error nothing changes.
    pub fn set_faults(&self, patch: Value) -> Result<Faults, SimError> {
        let faults = self.lock().patch_faults(&patch)?;
        // The events' signing secret stays out of the log.
        let mut shown_patch = patch;
        if let Some(fields) = shown_patch.as_object_mut()
            && fields.contains_key("webhook_secret")
        {
            fields.insert("webhook_secret".into(), Value::from("<redacted>"));
        }
        let mut shown = faults.clone();
        if shown.webhook_secret.is_some() {
            shown.webhook_secret = Some("<redacted>".into());
        }
        tracing::info!(patch = %shown_patch, faults = ?shown, "provider fault settings changed");
        Ok(faults)
    }

    /// The current fault settings, including what is left of the `*_next` counters.
    pub fn faults(&self) -> Faults {
        self.lock().faults().clone()
    }

    /// What the provider holds, to save and load again ([`ProviderSim::restore`]).
    pub fn snapshot(&self) -> WorldSnapshot {
        self.lock().snapshot()
    }

    /// Replaces what the provider holds with a saved world.
    ///
    /// # Errors
    ///
    /// [`SimError::Snapshot`] when the deliveries are not numbered in order.
    pub fn restore(&self, snapshot: WorldSnapshot) -> Result<(), SimError> {
        self.lock().restore(snapshot)
    }

    /// How long idempotency keys are remembered.
    pub fn key_retention(&self) -> Duration {
        self.lock().key_retention()
    }

    fn lock(&self) -> MutexGuard<'_, World> {
        // Nothing panics while holding the lock with the world half-updated, so a poisoned
        // lock still guards a consistent world.
        self.shared
            .world
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn now(&self) -> SystemTime {
        (self.shared.clock)()
    }

    /// Posts the event `kind` of delivery `id`, when events are configured.
    fn emit(&self, kind: &'static str, id: &str) {
        let now = self.now();
        let event = self.lock().event(kind, id, now);
        if let Some(event) = event {
            webhooks::post(self.shared.events.clone(), event, now);
        }
    }

    /// Whether the request carries `Authorization: Bearer <token>`.
    fn authorized(&self, headers: &HeaderMap) -> bool {
        headers
            .get(http::header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.strip_prefix("Bearer "))
            .is_some_and(|token| token == self.shared.token)
    }
}

/// A simulator serving on its own task; dropping it (or [`RunningSim::shutdown`]) stops the
/// server and closes its connections.
#[derive(Debug)]
pub struct RunningSim {
    addr: SocketAddr,
    sim: ProviderSim,
    task: JoinHandle<io::Result<()>>,
}

impl RunningSim {
    /// The address actually bound.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://<addr>`, with an unspecified bind address (`0.0.0.0`, `::`) replaced by
    /// loopback so the URL can be dialled.
    pub fn base_url(&self) -> String {
        let mut addr = self.addr;
        if addr.ip().is_unspecified() {
            addr.set_ip(match addr {
                SocketAddr::V4(_) => Ipv4Addr::LOCALHOST.into(),
                SocketAddr::V6(_) => Ipv6Addr::LOCALHOST.into(),
            });
        }
        format!("http://{addr}")
    }

    /// The handle to the served state.
    pub fn sim(&self) -> &ProviderSim {
        &self.sim
    }

    /// Stops the server and waits until its task has ended.
    pub async fn shutdown(mut self) {
        self.task.abort();
        // The task ends cancelled (or with the accept error that ended it); either way it
        // no longer serves, which is all a caller waits for.
        let _ = (&mut self.task).await;
    }
}

impl Drop for RunningSim {
    fn drop(&mut self) {
        self.task.abort();
    }
}
