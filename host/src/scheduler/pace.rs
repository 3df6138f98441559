//! The limits a host claims one adapter's steps under (`[adapters.X] max_in_flight` and
//! `rate`): what it asks of each claim ([`Pacer::gates`]), and its own pacing of the rate,
//! a bucket per adapter refilled at the configured rate on the scheduler's clock. The
//! in-flight count and the pauses providers ask for live in the store, shared by every
//! host ([`crate::store::AdapterGate`]).

use crate::intent::Millis;
use crate::store::{AdapterGate, Claimed};
use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

/// One adapter's limits on this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdapterLimit {
    /// The adapter component's name.
    pub adapter: String,
    /// Claim only while fewer of its attempts are in flight, counted on every host.
    pub max_in_flight: Option<u32>,
    /// Start at most this many of its attempts per period on this host.
    pub rate: Option<Rate>,
}

/// `n` per `per`, e.g. `100/s`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    pub n: u32,
    pub per: Duration,
}

impl std::str::FromStr for Rate {
    type Err = String;

    /// `<n>/s`, `<n>/m`, `<n>/h`, or `<n>/<duration>` (`5/2s`, `20/500ms`).
    fn from_str(text: &str) -> Result<Self, String> {
        let bad = || {
            format!(
                "{text:?} is not a rate; write `<count>/<period>`, e.g. \"100/s\", \"600/m\" or \"5/2s\""
            )
        };
        let (n, per) = text.trim().split_once('/').ok_or_else(bad)?;
        let n: u32 = n.trim().parse().map_err(|_| bad())?;
        let per = match per.trim() {
            "s" => Duration::from_secs(1),
            "m" => Duration::from_secs(60),
            "h" => Duration::from_secs(3600),
            other => humantime::parse_duration(other).map_err(|_| bad())?,
        };
        if n == 0 || per.is_zero() {
            return Err(format!(
                "{text:?}: a rate needs a count and a period above zero (to stop an adapter, deactivate its versions)"
            ));
        }
        Ok(Rate { n, per })
    }
}

/// A bucket of claims: full at `n`, refilled at `n` per `per`.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Millis,
}

/// This host's adapter limits, and the buckets of those with a rate.
#[derive(Debug, Default)]
pub struct Pacer {
    limits: Vec<AdapterLimit>,
    buckets: Mutex<HashMap<String, Bucket>>,
}

impl Pacer {
    pub fn new(limits: Vec<AdapterLimit>) -> Self {
        Self {
            limits,
            buckets: Mutex::default(),
        }
    }

    /// Whether `adapter` is claimed under a limit here.
    pub fn limits(&self, adapter: &str) -> bool {
        self.limits.iter().any(|l| l.adapter == adapter)
    }

    /// What a claim at `now` asks of each limited adapter.
    pub fn gates(&self, now: Millis) -> Vec<AdapterGate> {
        let mut buckets = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        self.limits
            .iter()
            .map(|l| AdapterGate {
                adapter: l.adapter.clone(),
                max_in_flight: l.max_in_flight,
                rate_room: l.rate.map(|rate| {
                    let b = Self::refilled(&mut buckets, &l.adapter, rate, now);
                    b.tokens.floor() as u32
                }),
            })
            .collect()
    }

    /// Takes a token for each claimed step of an adapter with a rate.
    pub fn took(&self, claimed: &[Claimed], now: Millis) {
        self.took_of(claimed.iter().filter_map(|c| c.adapter.as_deref()), now)
    }

    fn took_of<'a>(&self, adapters: impl Iterator<Item = &'a str>, now: Millis) {
        let mut buckets = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        for adapter in adapters {
            let Some(rate) = self
                .limits
                .iter()
                .find(|l| l.adapter == adapter)
                .and_then(|l| l.rate)
            else {
                continue;
            };
            let b = Self::refilled(&mut buckets, adapter, rate, now);
            b.tokens = (b.tokens - 1.0).max(0.0);
        }
    }

    /// How long until an adapter whose bucket is empty may claim again: an idle scheduler
    /// looks again then rather than at its next poll.
    pub fn next_token(&self, now: Millis) -> Option<Duration> {
        let mut buckets = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        self.limits
            .iter()
            .filter_map(|l| {
                let rate = l.rate?;
                let b = Self::refilled(&mut buckets, &l.adapter, rate, now);
                (b.tokens < 1.0).then(|| {
                    let per_token = rate.per.as_secs_f64() / f64::from(rate.n);
                    Duration::from_secs_f64((1.0 - b.tokens) * per_token)
                        .max(Duration::from_millis(1))
                })
            })
            .min()
    }

    fn refilled<'b>(
        buckets: &'b mut HashMap<String, Bucket>,
        adapter: &str,
        rate: Rate,
        now: Millis,
    ) -> &'b mut Bucket {
        let full = f64::from(rate.n);
        let b = buckets.entry(adapter.to_string()).or_insert(Bucket {
            tokens: full,
            at: now,
        });
        let elapsed = now.saturating_sub(b.at) as f64 / 1000.0;
        b.tokens = (b.tokens + elapsed * full / rate.per.as_secs_f64()).min(full);
        b.at = b.at.max(now);
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_read_as_written_and_bad_ones_say_how_to_write_them() {
        assert_eq!(
            "100/s".parse::<Rate>().unwrap(),
            Rate {
                n: 100,
                per: Duration::from_secs(1)
            }
        );
        assert_eq!(
            "600/m".parse::<Rate>().unwrap().per,
            Duration::from_secs(60)
        );
        assert_eq!("5/2s".parse::<Rate>().unwrap().per, Duration::from_secs(2));
        let err = "100 per second".parse::<Rate>().unwrap_err();
        assert!(err.contains("\"100/s\""), "{err}");
        let err = "0/s".parse::<Rate>().unwrap_err();
        assert!(err.contains("above zero"), "{err}");
    }

    #[test]
    fn a_rate_allows_its_count_per_period_and_refills_on_the_clock() {
        let pacer = Pacer::new(vec![AdapterLimit {
            adapter: "mail".into(),
            max_in_flight: Some(5),
            rate: Some("10/s".parse().unwrap()),
        }]);
        let gate = |now| pacer.gates(now)[0].clone();
        assert_eq!(gate(0).rate_room, Some(10));
        assert_eq!(gate(0).max_in_flight, Some(5));
        pacer.took_of(std::iter::repeat_n("mail", 10), 0);
        assert_eq!(gate(0).rate_room, Some(0));
        // One token every 100 ms.
        assert_eq!(pacer.next_token(0), Some(Duration::from_millis(100)));
        assert_eq!(gate(250).rate_room, Some(2));
        // Never more than one period's worth saved up.
        assert_eq!(gate(60_000).rate_room, Some(10));
        assert_eq!(pacer.next_token(60_000), None);
        // Other adapters are not paced.
        pacer.took_of(std::iter::repeat_n("sms", 3), 60_000);
        assert_eq!(gate(60_000).rate_room, Some(10));
        assert!(pacer.limits("mail") && !pacer.limits("sms"));
    }
}
