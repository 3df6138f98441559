//! Canonical JSON (RFC 8785) and digests.
//!
//! The canonical form of an input decides whether a resubmission under the same key is the
//! same command: key order and number spelling do not matter, anything else does. No
//! defaults are injected before digesting.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// An input in canonical form with its digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CanonicalInput {
    /// RFC 8785 text.
    pub text: String,
    /// `sha256:<hex>` of `text`.
    pub digest: String,
}

/// Why a value has no canonical form.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the input cannot be canonicalized: {0}")]
pub struct InputError(String);

/// RFC 8785 canonical text and digest of `value`.
pub fn canonicalize(value: &Value) -> Result<CanonicalInput, InputError> {
    let text = serde_jcs::to_string(value).map_err(|e| InputError(e.to_string()))?;
    let digest = sha256_digest(text.as_bytes());
    Ok(CanonicalInput { text, digest })
}

/// `sha256:<hex>` of `bytes`.
pub fn sha256_digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn key_order_and_number_spelling_do_not_change_the_digest() {
        let a: Value =
            serde_json::from_str(r#"{"b": 1.0, "a": [1, "x"], "c": {"z": 1, "y": 2}}"#).unwrap();
        let b: Value =
            serde_json::from_str(r#"{"c": {"y": 2, "z": 1}, "a": [1, "x"], "b": 1}"#).unwrap();
        assert_eq!(canonicalize(&a).unwrap(), canonicalize(&b).unwrap());
        assert_eq!(
            canonicalize(&b).unwrap().text,
            r#"{"a":[1,"x"],"b":1,"c":{"y":2,"z":1}}"#
        );
    }

    #[test]
    fn different_values_differ() {
        let a = canonicalize(&json!({"a": 1})).unwrap();
        let b = canonicalize(&json!({"a": "1"})).unwrap();
        assert_ne!(a.digest, b.digest);
        assert!(a.digest.starts_with("sha256:"));
    }
}
