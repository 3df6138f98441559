//! The randomness the host draws for its own records and decisions — id suffixes, retry
//! jitter — from the operating system's generator, or, in a simulation, from one source
//! seeded with the run's seed, so that a run repeats draw for draw.
//!
//! Secrets (session tokens, generated keys) never come from here: they always use the
//! operating system's generator.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::Mutex;

/// The seeded source, when a simulation installed one.
static SEEDED: Mutex<Option<ChaCha8Rng>> = Mutex::new(None);

/// Draws from a source seeded with `seed` from now on (`None`: the operating system's
/// generator again). Process-wide: only a simulation, which runs one schedule at a time,
/// sets it.
pub fn seed(seed: Option<u64>) {
    *SEEDED.lock().unwrap_or_else(|e| e.into_inner()) = seed.map(ChaCha8Rng::seed_from_u64);
}

/// A random `u64`.
pub fn u64() -> u64 {
    match SEEDED.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
        Some(rng) => rng.random(),
        None => rand::rng().random(),
    }
}

/// A uniform sample in `0.0..1.0`.
pub fn unit() -> f64 {
    match SEEDED.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
        Some(rng) => rng.random(),
        None => rand::rng().random(),
    }
}
