//! Secrets by name, resolved by the host at call time (adapter world only).
//!
//! Only names in the step's grant resolve. Never log or return a value: the host redacts
//! what it sees, but a plugin should not rely on that.

use crate::EffectError;
pub use crate::bindings::world::docket::plugin0_3_0::secrets::SecretError;

/// The value of granted secret `name`.
pub fn get(name: &str) -> Result<String, SecretError> {
    crate::bindings::world::docket::plugin0_3_0::secrets::get(name)
}

/// A missing secret is a credentials problem: the host blocks the step for review.
impl From<SecretError> for EffectError {
    fn from(err: SecretError) -> Self {
        EffectError::unauthorized(match err {
            SecretError::NotGranted(name) => format!(
                "secret `{name}` is not granted to this step; \
                 allow it for this adapter in the host config and request it in the workflow"
            ),
            SecretError::NotFound(name) => format!(
                "secret `{name}` is granted but the host's secret source has no value for it"
            ),
        })
    }
}
