//! The host's clock: one source of "now" for leases, backoff, deadlines and plugins.
//!
//! Nothing in the host reads the system time directly (only the CLI stamps its own
//! records with it); it asks a [`Clock`], so tests can
//! move time forward instead of sleeping.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// A source of the current time in milliseconds since the Unix epoch (UTC).
pub trait Clock: Send + Sync + 'static {
    fn now_ms(&self) -> u64;
}

/// The real wall clock, shifted by an offset that test controls may advance.
#[derive(Debug, Default)]
pub struct SystemClock {
    offset_ms: AtomicU64,
}

impl SystemClock {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Moves this clock forward by `ms` (test controls only).
    pub fn advance(&self, ms: u64) {
        self.offset_ms.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        let real = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        real + self.offset_ms.load(Ordering::SeqCst)
    }
}

/// A clock that moves only when told to.
#[derive(Debug)]
pub struct ManualClock {
    now_ms: AtomicU64,
}

impl ManualClock {
    pub fn new(start_ms: u64) -> Arc<Self> {
        Arc::new(Self {
            now_ms: AtomicU64::new(start_ms),
        })
    }

    pub fn advance(&self, ms: u64) {
        self.now_ms.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.now_ms.load(Ordering::SeqCst)
    }
}
