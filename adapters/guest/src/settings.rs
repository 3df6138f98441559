//! Read-only values from the operator's configuration for this adapter (adapter world only).

use crate::EffectError;

/// The value of setting `name`, or `None` when the operator did not set it.
pub fn get(name: &str) -> Option<String> {
    crate::bindings::world::docket::plugin0_3_0::settings::get(name)
}

/// The value of setting `name`; a missing or blank value is a `rejected` error with code
/// `missing_setting` that tells the operator what to add.
pub fn require(name: &str) -> Result<String, EffectError> {
    match get(name) {
        Some(value) if !value.trim().is_empty() => Ok(value),
        _ => Err(EffectError::rejected(
            "missing_setting",
            format!(
                "setting `{name}` is not set for this adapter; \
                 add it to the adapter's settings in the host configuration"
            ),
        )),
    }
}
