//! Fault settings of the provider simulator and the seeded dice that apply them.
//!
//! [`Faults`] is the one settings type: it is what `POST /v1/_faults` patches and answers,
//! and what a caller passes at start. Every field has a default, so a patch names only what it
//! changes; unknown fields are refused so a typo (`"loose": 1`) is an error, not a no-op.
//!
//! Shares (`lose`, `slow`, `rate_limit`, `unavailable`) are drawn from a ChaCha RNG seeded
//! with `seed`. Every create request draws one number per share, in a fixed order, whether
//! or not that share is in use, so the same request sequence with the same seed and settings
//! injects the same faults. `*_next` counters take precedence over shares and count down
//! only when the fault is actually injected.
//!
//! Cancels draw nothing: shares never apply to them (so adding cancels to a run does not
//! shift the faults its creates see), only the `*_next_cancel` counters do.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::SimError;

/// The fault settings of a running simulator.
///
/// Defaults describe a well-behaved provider: no injected faults, idempotency and the lookup
/// endpoint on, deliveries visible at once, seed 0.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Faults {
    /// Share (0..=1) of create requests that commit (or replay) and then lose the response:
    /// the connection is closed without any HTTP bytes.
    pub lose: f64,
    /// The next N committing create requests lose their response.
    pub lose_next: u32,
    /// Share (0..=1) of answered create requests that are answered after `slow_ms`.
    pub slow: f64,
    /// The next N answered create requests are answered after `slow_ms`.
    pub slow_next: u32,
    /// Delay of a slow answer, in milliseconds. The effect is committed before the delay, so
    /// a caller that times out has still caused it.
    pub slow_ms: u64,
    /// Share (0..=1) of create requests answered `429`; nothing is created.
    pub rate_limit: f64,
    /// The next N create requests are answered `429`.
    pub rate_limit_next: u32,
    /// Seconds sent in the `Retry-After` header of a `429`.
    pub retry_after_s: u64,
    /// Create requests handled at once beyond which another is answered `429` (with
    /// `retry_after_s`), nothing created: a provider's concurrency limit. 0: no limit.
    pub max_concurrent: u32,
    /// Share (0..=1) of create requests answered `503`; nothing is created.
    pub unavailable: f64,
    /// The next N create requests are answered `503`.
    pub unavailable_next: u32,
    /// The next N cancel requests for a known delivery cancel it (or find it cancelled)
    /// and then lose the response, like `lose_next` for creates.
    pub lose_next_cancel: u32,
    /// The next N cancel requests are answered `503`; nothing is cancelled.
    pub unavailable_next_cancel: u32,
    /// Share (0..=1) of the items of a bulk create answered `503` each (nothing created for
    /// them) while the rest of the batch is taken: a provider that accepts part of a batch.
    pub item_unavailable: f64,
    /// The next N items of bulk creates are answered `503` each; nothing is created for them.
    pub item_unavailable_next: u32,
    /// Whether `Idempotency-Key` is honoured; when false every create request creates.
    pub idempotency: bool,
    /// Whether the lookup endpoint exists; when false it answers `404`.
    pub query: bool,
    /// A created delivery appears in lookups only this many milliseconds after creation.
    pub visibility_delay_ms: u64,
    /// Seed of the RNG that draws shares. Setting it (at start or in a patch) restarts the
    /// sequence, which is how a test repeats a run.
    pub seed: u64,
    /// Where the provider posts its events (`delivery.accepted` when a delivery is
    /// created, `delivery.cancelled` when a cancel takes effect), signed per Standard
    /// Webhooks with `webhook_secret`; `null`: it posts none.
    pub webhook_url: Option<String>,
    /// The signing secret of the events, `whsec_<base64>`.
    pub webhook_secret: Option<String>,
    /// The next N events are posted `webhook_late_ms` late: after the events that follow
    /// them, when those come sooner (out of order).
    pub webhook_late_next: u32,
    /// How late a late event is posted, in milliseconds.
    pub webhook_late_ms: u64,
    /// The next N events are posted twice, under the same `webhook-id` (a replay).
    pub webhook_repeat_next: u32,
    /// Recipients whose next committing create loses its response, once each: a lost
    /// answer aimed at one item among many in flight.
    pub lose_for: Vec<String>,
    /// Recipients whose deliveries lookups never see (a visibility delay that never ends
    /// for them alone).
    pub hidden_for: Vec<String>,
}

impl Default for Faults {
    fn default() -> Self {
        Self {
            lose: 0.0,
            lose_next: 0,
            slow: 0.0,
            slow_next: 0,
            // Longer than any sensible client timeout in tests, short enough not to hang them.
            slow_ms: 5_000,
            rate_limit: 0.0,
            rate_limit_next: 0,
            retry_after_s: 1,
            max_concurrent: 0,
            unavailable: 0.0,
            unavailable_next: 0,
            lose_next_cancel: 0,
            unavailable_next_cancel: 0,
            item_unavailable: 0.0,
            item_unavailable_next: 0,
            idempotency: true,
            query: true,
            visibility_delay_ms: 0,
            seed: 0,
            webhook_url: None,
            webhook_secret: None,
            webhook_late_next: 0,
            webhook_late_ms: 2_000,
            webhook_repeat_next: 0,
            lose_for: Vec::new(),
            hidden_for: Vec::new(),
        }
    }
}

impl Faults {
    /// Returns these settings with `patch` (a JSON object of some fields) merged in.
    ///
    /// # Errors
    ///
    /// Fails, leaving nothing changed, when the patch is not an object, names an unknown
    /// field, has a value of the wrong type, or puts a share outside 0..=1.
    pub fn patched(&self, patch: &Value) -> Result<Faults, SimError> {
        let Value::Object(fields) = patch else {
            return Err(SimError::FaultsNotAnObject {
                found: patch.to_string(),
            });
        };
        // A struct of plain fields always serializes to an object.
        let Ok(Value::Object(mut merged)) = serde_json::to_value(self) else {
            unreachable!("Faults serializes to a JSON object")
        };
        let mut faults = self.clone();
        // One field at a time, because serde's type errors do not say which field failed.
        for (name, value) in fields {
            merged.insert(name.clone(), value.clone());
            faults = serde_json::from_value(Value::Object(merged.clone())).map_err(|err| {
                SimError::InvalidFaults {
                    field: name.clone(),
                    reason: err.to_string(),
                }
            })?;
        }
        faults.validate()?;
        Ok(faults)
    }

    /// Checks what the types alone cannot: every share is a number in 0..=1.
    ///
    /// # Errors
    ///
    /// [`SimError::ShareOutOfRange`] naming the first share outside 0..=1.
    pub fn validate(&self) -> Result<(), SimError> {
        let shares = [
            ("lose", self.lose),
            ("slow", self.slow),
            ("rate_limit", self.rate_limit),
            ("unavailable", self.unavailable),
            ("item_unavailable", self.item_unavailable),
        ];
        for (field, value) in shares {
            if !(0.0..=1.0).contains(&value) {
                return Err(SimError::ShareOutOfRange { field, value });
            }
        }
        if let Some(secret) = &self.webhook_secret {
            crate::notify::signing_key(secret).map_err(|reason| SimError::InvalidFaults {
                field: "webhook_secret".into(),
                reason,
            })?;
        }
        if self.webhook_url.is_some() != self.webhook_secret.is_some() {
            return Err(SimError::InvalidFaults {
                field: "webhook_url".into(),
                reason: "give `webhook_url` and `webhook_secret` together (or neither)".into(),
            });
        }
        Ok(())
    }
}

/// Which shares came up for one create request. Counters are not consulted yet: that happens
/// only when the request reaches the point where the fault could apply.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Roll {
    pub unavailable: bool,
    pub rate_limit: bool,
    pub lose: bool,
    pub slow: bool,
}

/// The current settings plus the RNG that draws their shares.
#[derive(Debug)]
pub(crate) struct FaultState {
    pub faults: Faults,
    rng: ChaCha8Rng,
}

impl FaultState {
    pub fn new(faults: Faults) -> Self {
        let rng = ChaCha8Rng::seed_from_u64(faults.seed);
        Self { faults, rng }
    }

    /// Merges a patch into the settings; a patch that names `seed` restarts the RNG, even when
    /// the value is unchanged, so a test can replay a sequence.
    pub fn patch(&mut self, patch: &Value) -> Result<Faults, SimError> {
        let faults = self.faults.patched(patch)?;
        if patch.get("seed").is_some() {
            self.rng = ChaCha8Rng::seed_from_u64(faults.seed);
        }
        self.faults = faults;
        Ok(self.faults.clone())
    }

    /// Draws one number per share, always all four and always in this order, so the RNG
    /// stream depends only on the number of create requests.
    pub fn roll(&mut self) -> Roll {
        let f = &self.faults;
        let draws: [f64; 4] = [
            self.rng.random(),
            self.rng.random(),
            self.rng.random(),
            self.rng.random(),
        ];
        Roll {
            unavailable: draws[0] < f.unavailable,
            rate_limit: draws[1] < f.rate_limit,
            lose: draws[2] < f.lose,
            slow: draws[3] < f.slow,
        }
    }

    /// Whether one item of a bulk create is answered `503`: consumes one
    /// `item_unavailable_next` first, else draws the item's own share.
    pub fn take_item_unavailable(&mut self) -> bool {
        let drawn = self.faults.item_unavailable > 0.0
            && self.rng.random::<f64>() < self.faults.item_unavailable;
        take(&mut self.faults.item_unavailable_next, drawn)
    }

    /// Whether to answer `503`: consumes one `unavailable_next` first, else uses the roll.
    pub fn take_unavailable(&mut self, roll: Roll) -> bool {
        take(&mut self.faults.unavailable_next, roll.unavailable)
    }

    /// Whether to answer `429`: consumes one `rate_limit_next` first, else uses the roll.
    pub fn take_rate_limit(&mut self, roll: Roll) -> bool {
        take(&mut self.faults.rate_limit_next, roll.rate_limit)
    }

    /// Whether to lose the response: consumes one `lose_next` first, else uses the roll.
    pub fn take_lose(&mut self, roll: Roll) -> bool {
        take(&mut self.faults.lose_next, roll.lose)
    }

    /// Whether to lose the response of a create for `recipient`: consumes its `lose_for`
    /// entry.
    pub fn take_lose_for(&mut self, recipient: Option<&str>) -> bool {
        let list = &mut self.faults.lose_for;
        match recipient.and_then(|r| list.iter().position(|l| l == r)) {
            Some(at) => {
                list.remove(at);
                true
            }
            None => false,
        }
    }

    /// Whether to delay the answer: consumes one `slow_next` first, else uses the roll.
    pub fn take_slow(&mut self, roll: Roll) -> bool {
        take(&mut self.faults.slow_next, roll.slow)
    }

    /// Whether to answer a cancel `503`: consumes one `unavailable_next_cancel`.
    pub fn take_unavailable_cancel(&mut self) -> bool {
        take(&mut self.faults.unavailable_next_cancel, false)
    }

    /// Whether to lose a cancel's response: consumes one `lose_next_cancel`.
    pub fn take_lose_cancel(&mut self) -> bool {
        take(&mut self.faults.lose_next_cancel, false)
    }
}

/// A pending counter wins over the share; it counts down only when it fires.
fn take(next: &mut u32, drawn: bool) -> bool {
    if *next > 0 {
        *next -= 1;
        true
    } else {
        drawn
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn patch_merges_only_named_fields() {
        let faults = Faults::default()
            .patched(&json!({"lose": 0.3, "query": false}))
            .unwrap();
        assert_eq!(faults.lose, 0.3);
        assert!(!faults.query);
        assert!(faults.idempotency);
        assert_eq!(faults.slow_ms, Faults::default().slow_ms);
    }

    #[test]
    fn patch_names_an_unknown_field() {
        let err = Faults::default().patched(&json!({"loose": 1})).unwrap_err();
        assert!(err.to_string().contains("loose"), "{err}");
    }

    #[test]
    fn patch_refuses_wrong_types_and_out_of_range_shares() {
        assert!(
            Faults::default()
                .patched(&json!({"lose_next": -1}))
                .is_err()
        );
        let err = Faults::default()
            .patched(&json!({"query": "no"}))
            .unwrap_err();
        assert!(err.to_string().contains("`query`"), "{err}");
        let err = Faults::default()
            .patched(&json!({"lose": 1.5}))
            .unwrap_err();
        assert!(err.to_string().contains("lose"), "{err}");
        assert!(Faults::default().patched(&json!([1])).is_err());
    }

    #[test]
    fn counters_fire_before_shares_and_count_down() {
        let mut state = FaultState::new(Faults {
            lose_next: 2,
            ..Faults::default()
        });
        let roll = Roll::default();
        assert!(state.take_lose(roll));
        assert!(state.take_lose(roll));
        assert!(!state.take_lose(roll));
        assert_eq!(state.faults.lose_next, 0);
    }

    #[test]
    fn same_seed_same_rolls() {
        let faults = Faults {
            lose: 0.5,
            slow: 0.5,
            seed: 42,
            ..Faults::default()
        };
        let mut a = FaultState::new(faults.clone());
        let mut b = FaultState::new(faults);
        let rolls_a: Vec<Roll> = (0..50).map(|_| a.roll()).collect();
        let rolls_b: Vec<Roll> = (0..50).map(|_| b.roll()).collect();
        assert_eq!(rolls_a, rolls_b);
        assert!(rolls_a.iter().any(|r| r.lose) && rolls_a.iter().any(|r| !r.lose));
    }

    #[test]
    fn patching_the_seed_restarts_the_sequence() {
        let mut state = FaultState::new(Faults {
            lose: 0.5,
            ..Faults::default()
        });
        let first: Vec<Roll> = (0..20).map(|_| state.roll()).collect();
        state.patch(&json!({"seed": 0})).unwrap();
        let again: Vec<Roll> = (0..20).map(|_| state.roll()).collect();
        assert_eq!(first, again);
    }
}
