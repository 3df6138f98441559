//! Waiting in tests without guessing: for a condition to hold (a bounded poll that fails
//! with the last thing it saw), never a fixed sleep before an assertion. To assert that
//! something did *not* happen, wait for the host's tick count to move first
//! (`GET /v1/_test/ticks`): then the host has looked.

use std::time::{Duration, Instant};

/// How often a condition is looked at again.
const EVERY: Duration = Duration::from_millis(25);

/// Calls `probe` until it answers `Ok`, for at most `within`; fails the test with the last
/// `Err` it gave (what was seen instead).
#[allow(dead_code)]
pub async fn until<T>(
    what: &str,
    within: Duration,
    mut probe: impl AsyncFnMut() -> Result<T, String>,
) -> T {
    let start = Instant::now();
    loop {
        let seen = match probe().await {
            Ok(found) => return found,
            Err(seen) => seen,
        };
        assert!(
            start.elapsed() < within,
            "{what}: not within {within:?}; last seen:\n{seen}"
        );
        tokio::time::sleep(EVERY).await;
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
