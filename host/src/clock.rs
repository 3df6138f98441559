//! The host's clock: one source of "now" for leases, backoff, deadlines and plugins.
//!
//! Nothing in the host reads the system time directly (only the CLI stamps its own
//! records with it); it asks a [`Clock`], so tests can
//! move time forward instead of sleeping. Waits measured in host time (a lease's renewal
//! period) sleep on the clock too, so a simulation that moves a [`ManualClock`] also
//! decides when they end, and can ask it for the next instant anything waits for.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A wait on a clock.
pub type Sleep = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// A source of the current time in milliseconds since the Unix epoch (UTC).
pub trait Clock: Send + Sync + 'static {
    fn now_ms(&self) -> u64;

    /// Moves this clock forward by `ms` (test controls and simulations only).
    fn advance(&self, ms: u64);

    /// Ends once this clock reads at least `at_ms`.
    fn sleep_until(&self, at_ms: u64) -> Sleep;

    /// Ends once `duration` has passed on this clock.
    fn sleep(&self, duration: Duration) -> Sleep {
        self.sleep_until(
            self.now_ms()
                .saturating_add(duration.as_millis().min(u64::MAX as u128) as u64),
        )
    }
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

    fn advance(&self, ms: u64) {
        SystemClock::advance(self, ms)
    }

    /// Sleeps in real time; an [`SystemClock::advance`] meanwhile does not end it early.
    fn sleep_until(&self, at_ms: u64) -> Sleep {
        let wait = Duration::from_millis(at_ms.saturating_sub(self.now_ms()));
        Box::pin(tokio::time::sleep(wait))
    }
}

/// A clock that moves only when told to. Its sleepers end when it is moved past their
/// instant; [`ManualClock::next_wake`] tells a simulation when the next one is due.
#[derive(Debug)]
pub struct ManualClock {
    now_ms: AtomicU64,
    moved: tokio::sync::watch::Sender<u64>,
    /// Instants sleepers wait for, with how many wait for each.
    sleepers: Arc<Mutex<BTreeMap<u64, usize>>>,
}

impl ManualClock {
    pub fn new(start_ms: u64) -> Arc<Self> {
        Arc::new(Self {
            now_ms: AtomicU64::new(start_ms),
            moved: tokio::sync::watch::Sender::new(start_ms),
            sleepers: Arc::default(),
        })
    }

    pub fn advance(&self, ms: u64) {
        let now = self.now_ms.fetch_add(ms, Ordering::SeqCst) + ms;
        self.moved.send_replace(now);
    }

    /// Moves the clock to `at_ms` if that is later than now.
    pub fn advance_to(&self, at_ms: u64) {
        let now = self.now_ms.fetch_max(at_ms, Ordering::SeqCst).max(at_ms);
        self.moved.send_replace(now);
    }

    /// The earliest instant a sleeper waits for that has not come yet, if any.
    pub fn next_wake(&self) -> Option<u64> {
        let now = self.now_ms();
        self.sleepers
            .lock()
            .unwrap()
            .range(now.saturating_add(1)..)
            .next()
            .map(|(at, _)| *at)
    }

    /// Sleepers whose instant has come but whose task has not yet run on: a simulation
    /// waits for none to be left before it looks at what the move changed.
    pub fn woken(&self) -> usize {
        let now = self.now_ms();
        self.sleepers
            .lock()
            .unwrap()
            .range(..=now)
            .map(|(_, n)| *n)
            .sum()
    }
}

/// One sleeper's place in [`ManualClock::sleepers`], given up when the sleep ends or is
/// dropped.
struct Waiting {
    at: u64,
    sleepers: Arc<Mutex<BTreeMap<u64, usize>>>,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let mut sleepers = self.sleepers.lock().unwrap();
        if let Some(n) = sleepers.get_mut(&self.at) {
            *n -= 1;
            if *n == 0 {
                sleepers.remove(&self.at);
            }
        }
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.now_ms.load(Ordering::SeqCst)
    }

    fn advance(&self, ms: u64) {
        ManualClock::advance(self, ms)
    }

    fn sleep_until(&self, at_ms: u64) -> Sleep {
        let mut moved = self.moved.subscribe();
        if *moved.borrow() >= at_ms {
            return Box::pin(std::future::ready(()));
        }
        *self.sleepers.lock().unwrap().entry(at_ms).or_default() += 1;
        let waiting = Waiting {
            at: at_ms,
            sleepers: self.sleepers.clone(),
        };
        Box::pin(async move {
            let _waiting = waiting;
            // The sender lives as long as the clock; a dropped clock never wakes anyone.
            if moved.wait_for(|now| *now >= at_ms).await.is_err() {
                std::future::pending::<()>().await;
            }
        })
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

    #[tokio::test]
    async fn a_manual_clock_ends_its_sleepers_when_moved_past_them_and_names_the_next() {
        let clock = ManualClock::new(1_000);
        let early = tokio::spawn(clock.sleep_until(1_500));
        let late = tokio::spawn(clock.sleep(Duration::from_millis(2_000)));
        tokio::task::yield_now().await;
        assert_eq!(clock.next_wake(), Some(1_500));
        clock.advance_to(1_500);
        early.await.unwrap();
        assert_eq!(clock.next_wake(), Some(3_000));
        assert!(!late.is_finished());
        clock.advance(10_000);
        late.await.unwrap();
        assert_eq!(clock.next_wake(), None);
        // A sleep already due ends at once and waits for nothing.
        clock.sleep_until(5).await;
        assert_eq!(clock.next_wake(), None);
    }
}
