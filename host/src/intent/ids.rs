//! Opaque, prefixed identifiers (`wf_…`, `att_…`, `rcp_…`).
//!
//! Ids start with the creation time in hex so they sort by age, then carry 64 random bits
//! so two hosts never collide.

use rand::Rng;
use serde::{Deserialize, Serialize};
use std::fmt;

fn new_id(prefix: &str, now_ms: u64) -> String {
    let random: u64 = rand::rng().random();
    format!("{prefix}_{now_ms:012x}{random:016x}")
}

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident, $prefix:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub String);

        impl $name {
            /// A new id created at `now_ms`.
            pub fn new(now_ms: u64) -> Self {
                Self(new_id($prefix, now_ms))
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

id_type!(
    /// A workflow: one intent.
    WorkflowId,
    "wf"
);
id_type!(
    /// One attempt of one step.
    AttemptId,
    "att"
);
id_type!(
    /// One receipt.
    ReceiptId,
    "rcp"
);

/// A fresh lease token: proof of ownership that every fenced write must present.
pub fn new_lease_token() -> String {
    let random: u128 = rand::rng().random();
    format!("{random:032x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_sort_by_creation_time_and_do_not_collide() {
        let a = WorkflowId::new(1_000);
        let b = WorkflowId::new(2_000);
        assert!(a < b);
        assert!(a.as_str().starts_with("wf_"));
        assert_ne!(WorkflowId::new(5), WorkflowId::new(5));
    }
}
