//! Counts of completed ticks, by kind: what a test waits on before it asserts that
//! something did *not* happen (the host has looked at least once since), instead of
//! sleeping and hoping the host looked.
//!
//! A tick that was under way when a count was read may have started before the event
//! the test cares about; a count that moved by two since then proves a whole tick ran
//! after it.

use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};

/// Completed ticks of one host since it started.
#[derive(Debug, Default)]
pub struct Ticks {
    claim: AtomicU64,
    recovery: AtomicU64,
    registry: AtomicU64,
    lease_renewal: AtomicU64,
    retention: AtomicU64,
    checker: AtomicU64,
    notifier: AtomicU64,
    evidence: AtomicU64,
}

/// The kinds of tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tick {
    /// A look for ready steps (claimed or not).
    Claim,
    /// A look for expired leases (recovered or not).
    Recovery,
    /// A catch-up with the adapter registry.
    Registry,
    /// One renewal round of one running attempt's lease.
    LeaseRenewal,
    /// A look for ended workflows past the retention (purged or not).
    Retention,
    /// A run of the host's own consistency check over every workflow (violations or not).
    Checker,
    /// A round of the notification outbox (sent or not).
    Notifier,
    /// A round of providers' deliveries (read or not).
    Evidence,
}

/// A snapshot of [`Ticks`], as `GET /v1/_test/ticks` answers it.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize, schemars::JsonSchema,
)]
pub struct TickCounts {
    pub claim: u64,
    pub recovery: u64,
    pub registry: u64,
    pub lease_renewal: u64,
    #[serde(default)]
    pub retention: u64,
    #[serde(default)]
    pub checker: u64,
    #[serde(default)]
    pub notifier: u64,
    #[serde(default)]
    pub evidence: u64,
}

impl Ticks {
    fn counter(&self, tick: Tick) -> &AtomicU64 {
        match tick {
            Tick::Claim => &self.claim,
            Tick::Recovery => &self.recovery,
            Tick::Registry => &self.registry,
            Tick::LeaseRenewal => &self.lease_renewal,
            Tick::Retention => &self.retention,
            Tick::Checker => &self.checker,
            Tick::Notifier => &self.notifier,
            Tick::Evidence => &self.evidence,
        }
    }

    /// Counts one completed tick.
    pub fn done(&self, tick: Tick) {
        self.counter(tick).fetch_add(1, Ordering::AcqRel);
    }

    /// The completed ticks of one kind.
    pub fn get(&self, tick: Tick) -> u64 {
        self.counter(tick).load(Ordering::Acquire)
    }

    /// Every count at once.
    pub fn snapshot(&self) -> TickCounts {
        TickCounts {
            claim: self.get(Tick::Claim),
            recovery: self.get(Tick::Recovery),
            registry: self.get(Tick::Registry),
            lease_renewal: self.get(Tick::LeaseRenewal),
            retention: self.get(Tick::Retention),
            checker: self.get(Tick::Checker),
            notifier: self.get(Tick::Notifier),
            evidence: self.get(Tick::Evidence),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_counts_apart() {
        let ticks = Ticks::default();
        ticks.done(Tick::Claim);
        ticks.done(Tick::Claim);
        ticks.done(Tick::Registry);
        ticks.done(Tick::Checker);
        assert_eq!(
            ticks.snapshot(),
            TickCounts {
                claim: 2,
                recovery: 0,
                registry: 1,
                lease_renewal: 0,
                retention: 0,
                checker: 1,
                notifier: 0,
                evidence: 0,
            }
        );
    }
}
