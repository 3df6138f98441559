//! The host's clock: one source of "now" for leases, backoff, deadlines and plugins.
//!
//! Nothing in the host reads the system time directly (only the CLI stamps its own
//! records with it); it asks a [`Clock`], so tests can
//! move time forward instead of sleeping.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// A source of the current time in milliseconds since the Unix epoch (UTC).
pub trait Clock: Send + Sync + 'static {
    fn now_ms(&self) -> u64;
}

/// The real wall clock, shifted by an offset that test controls may advance (or, before a
/// test host starts, set to begin at a recorded instant).
#[derive(Debug, Default)]
pub struct SystemClock {
    offset_ms: AtomicI64,
}

impl SystemClock {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Moves this clock forward by `ms` (test controls only).
    pub fn advance(&self, ms: u64) {
        self.offset_ms
            .fetch_add(i64::try_from(ms).unwrap_or(i64::MAX), Ordering::SeqCst);
    }

    /// Makes this clock read `ms` now and run on from there (test controls only, before
    /// anything has read it): a stored database is resumed as of when it was saved.
    pub fn start_at(&self, ms: u64) {
        let offset = i64::try_from(ms).unwrap_or(i64::MAX) - real_ms() as i64;
        self.offset_ms.store(offset, Ordering::SeqCst);
    }
}

fn real_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        (real_ms() as i64)
            .saturating_add(self.offset_ms.load(Ordering::SeqCst))
            .max(0) as u64
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clock_started_in_the_past_runs_on_from_there_and_still_advances() {
        let clock = SystemClock::default();
        let then = 1_700_000_000_000;
        clock.start_at(then);
        let now = clock.now_ms();
        assert!((then..then + 60_000).contains(&now), "{now}");
        clock.advance(600_000);
        assert!(clock.now_ms() >= now + 600_000);
        assert!(clock.now_ms() < then + 700_000);
    }
}
