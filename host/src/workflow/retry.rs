//! A step's retry policy and its backoff: a small pure function with jitter.
//!
//! The policy only says how long to wait and how many attempts a step may make. Whether a
//! failure is retryable at all is decided by the kind of the adapter's typed error, and
//! the workflow's deadline and budget stop retries too; the scheduler combines the three.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::values::duration_text;

/// How one step retries: exponential backoff with jitter, up to `max_attempts` attempts.
///
/// Defaults (each field may be left out of `[steps.retry]`): 5 attempts, 200 ms initial
/// backoff, 30 s maximum backoff, multiplier 2.0, jitter 0.2.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryPolicy {
    /// Attempts the step may make in all, the first one included (at least 1).
    pub max_attempts: u32,
    /// The wait after the first failed attempt, before jitter.
    #[serde(with = "duration_text")]
    pub initial_backoff: Duration,
    /// The longest wait computed from the policy (a provider's retry-after may be longer).
    #[serde(with = "duration_text")]
    pub max_backoff: Duration,
    /// Growth of the wait per failed attempt (at least 1.0).
    pub multiplier: f64,
    /// Fraction (0.0–1.0) of each wait that is randomised away, so that steps failing
    /// together do not retry together.
    pub jitter: f64,
}

impl RetryPolicy {
    /// Attempts when `[steps.retry]` does not say.
    pub const DEFAULT_MAX_ATTEMPTS: u32 = 5;
    /// Initial backoff when `[steps.retry]` does not say.
    pub const DEFAULT_INITIAL_BACKOFF: Duration = Duration::from_millis(200);
    /// Maximum backoff when `[steps.retry]` does not say.
    pub const DEFAULT_MAX_BACKOFF: Duration = Duration::from_secs(30);
    /// Multiplier when `[steps.retry]` does not say.
    pub const DEFAULT_MULTIPLIER: f64 = 2.0;
    /// Jitter when `[steps.retry]` does not say.
    pub const DEFAULT_JITTER: f64 = 0.2;

    /// Whether a step that has made `attempts` attempts may make another one.
    pub fn allows_another(&self, attempts: u32) -> bool {
        attempts < self.max_attempts
    }

    /// How long to wait after attempt number `attempt` (1-based) failed retryably.
    ///
    /// The base wait is `initial_backoff * multiplier^(attempt - 1)`, capped at
    /// `max_backoff`; jitter then shortens it by up to `jitter` of itself, scaled by
    /// `jitter_sample` (a uniform sample in `0.0..=1.0` supplied by the caller, so this
    /// stays pure). Jitter only shortens, so `max_backoff` remains a true cap. A provider's
    /// `retry_after` is a floor: the result is never shorter than it, even above
    /// `max_backoff`, because retrying earlier would only be refused again.
    pub fn backoff(
        &self,
        attempt: u32,
        retry_after: Option<Duration>,
        jitter_sample: f64,
    ) -> Duration {
        let exponent = i32::try_from(attempt.saturating_sub(1)).unwrap_or(i32::MAX);
        let grown = self.initial_backoff.as_secs_f64() * self.multiplier.max(1.0).powi(exponent);
        let capped = grown.min(self.max_backoff.as_secs_f64());
        let sample = if jitter_sample.is_nan() {
            0.0
        } else {
            jitter_sample.clamp(0.0, 1.0)
        };
        let jittered = capped * (1.0 - self.jitter.clamp(0.0, 1.0) * sample);
        let wait = Duration::try_from_secs_f64(jittered).unwrap_or(self.max_backoff);
        match retry_after {
            Some(floor) => wait.max(floor),
            None => wait,
        }
    }
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: Self::DEFAULT_MAX_ATTEMPTS,
            initial_backoff: Self::DEFAULT_INITIAL_BACKOFF,
            max_backoff: Self::DEFAULT_MAX_BACKOFF,
            multiplier: Self::DEFAULT_MULTIPLIER,
            jitter: Self::DEFAULT_JITTER,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_jitter() -> RetryPolicy {
        RetryPolicy {
            jitter: 0.0,
            ..RetryPolicy::default()
        }
    }

    #[test]
    fn grows_exponentially_and_caps() {
        let policy = no_jitter();
        assert_eq!(policy.backoff(1, None, 0.5), Duration::from_millis(200));
        assert_eq!(policy.backoff(2, None, 0.5), Duration::from_millis(400));
        assert_eq!(policy.backoff(4, None, 0.5), Duration::from_millis(1600));
        assert_eq!(policy.backoff(20, None, 0.5), Duration::from_secs(30));
        assert_eq!(policy.backoff(u32::MAX, None, 0.5), Duration::from_secs(30));
        // Attempt 0 is treated like the first.
        assert_eq!(policy.backoff(0, None, 0.5), Duration::from_millis(200));
    }

    #[test]
    fn jitter_only_shortens() {
        let policy = RetryPolicy {
            jitter: 0.5,
            ..RetryPolicy::default()
        };
        assert_eq!(policy.backoff(1, None, 0.0), Duration::from_millis(200));
        assert_eq!(policy.backoff(1, None, 1.0), Duration::from_millis(100));
        assert_eq!(policy.backoff(20, None, 1.0), Duration::from_secs(15));
        // Out-of-range samples are clamped rather than trusted.
        assert_eq!(policy.backoff(1, None, 7.0), Duration::from_millis(100));
        assert_eq!(
            policy.backoff(1, None, f64::NAN),
            Duration::from_millis(200)
        );
    }

    #[test]
    fn retry_after_is_a_floor() {
        let policy = no_jitter();
        let later = Duration::from_secs(90);
        assert_eq!(policy.backoff(1, Some(later), 0.0), later);
        assert_eq!(
            policy.backoff(3, Some(Duration::from_millis(10)), 0.0),
            Duration::from_millis(800)
        );
    }

    #[test]
    fn counts_attempts() {
        let policy = RetryPolicy {
            max_attempts: 3,
            ..RetryPolicy::default()
        };
        assert!(policy.allows_another(1));
        assert!(policy.allows_another(2));
        assert!(!policy.allows_another(3));
    }
}
