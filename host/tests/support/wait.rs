//! Waiting in tests without guessing: for a condition to hold (a bounded poll that fails
//! with the last thing it saw), never a fixed sleep before an assertion. To assert that
//! something did *not* happen, wait for the host's tick count to move first
//! (`GET /v1/_test/ticks`): then the host has looked.

use std::future::Future;
use std::time::{Duration, Instant};

/// How often a condition is looked at again.
const EVERY: Duration = Duration::from_millis(25);

/// Calls `probe` until it answers `Ok`, for at most `within`; fails the test with the last
/// `Err` it gave (what was seen instead).
///
/// A probe is a closure returning a future (`|| async { … }`), not an async closure: the
/// compiler cannot yet prove an async closure's future `Send`, which a spawned task needs.
#[allow(dead_code)]
pub async fn until<T, F>(what: &str, within: Duration, probe: impl FnMut() -> F) -> T
where
    F: Future<Output = Result<T, String>>,
{
    match poll(within, EVERY, probe).await {
        Ok(found) => found,
        Err(seen) => panic!("{what}: not within {within:?}; last seen:\n{seen}"),
    }
}

/// Calls `probe` every `every` until it answers `Ok`, for at most `within`; the last `Err`
/// if it never did, for a caller that reports the failure itself (or for which running out
/// of time is an answer, not a failure).
#[allow(dead_code)]
pub async fn poll<T, F>(
    within: Duration,
    every: Duration,
    mut probe: impl FnMut() -> F,
) -> Result<T, String>
where
    F: Future<Output = Result<T, String>>,
{
    let start = Instant::now();
    loop {
        let seen = match probe().await {
            Ok(found) => return Ok(found),
            Err(seen) => seen,
        };
        if start.elapsed() >= within {
            return Err(seen);
        }
        tokio::time::sleep(every).await;
    }
}

/// [`until`] for code that cannot await: a blocking poll.
#[allow(dead_code)]
pub fn until_blocking<T>(
    what: &str,
    within: Duration,
    mut probe: impl FnMut() -> Result<T, String>,
) -> T {
    let start = Instant::now();
    loop {
        let seen = match probe() {
            Ok(found) => return found,
            Err(seen) => seen,
        };
        assert!(
            start.elapsed() < within,
            "{what}: not within {within:?}; last seen:\n{seen}"
        );
        std::thread::sleep(EVERY);
    }
}
