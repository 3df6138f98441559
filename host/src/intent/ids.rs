//! Opaque, prefixed identifiers (`wf_…`, `att_…`, `rcp_…`, `cnl_…`, `ntf_…`, `obs_…`).
//!
//! Ids start with the creation time in hex so they sort by age, then carry 64 random bits
//! so two hosts never collide (drawn from [`crate::entropy`], so a simulation's ids repeat).

use serde::{Deserialize, Serialize};
use std::fmt;

fn new_id(prefix: &str, now_ms: u64) -> String {
    let random = crate::entropy::u64();
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
id_type!(
    /// One observation a provider's delivery carried.
    ObservationId,
    "obs"
);
id_type!(
    /// A workflow's cancellation: an intent of its own.
    CancellationId,
    "cnl"
);
id_type!(
    /// A notification: its `webhook-id`, the same on every delivery attempt.
    NotificationId,
    "ntf"
);

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

/// The external idempotency key of one logical effect: derived from (workflow id, step id,
/// adapter idempotency namespace, the environment the workflow was admitted in) only, so
/// every attempt and every worker sends the same key, and two adapter versions with the
/// same namespace do too — while a copy of the database in another environment (staging
/// pointed at production's provider, or the reverse) never reuses a live key.
///
/// `environment` is `None` for workflows admitted before the database recorded one: their
/// keys are derived as they were then, so a request already sent keeps its identity.
pub fn external_idempotency_key(
    workflow_id: &WorkflowId,
    step: &str,
    namespace: &str,
    environment: Option<&str>,
) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for part in [workflow_id.as_str(), step, namespace]
        .into_iter()
        .chain(environment)
    {
        h.update((part.len() as u64).to_be_bytes());
        h.update(part.as_bytes());
    }
    format!("dk-{}", &hex::encode(h.finalize())[..40])
}

#[cfg(test)]
mod key_tests {
    use super::*;

    #[test]
    fn the_environment_scopes_the_key_and_its_absence_keeps_the_earlier_derivation() {
        let wf = WorkflowId("wf_1".into());
        let prod = external_idempotency_key(&wf, "deliver", "ns", Some("production"));
        let staging = external_idempotency_key(&wf, "deliver", "ns", Some("staging"));
        let legacy = external_idempotency_key(&wf, "deliver", "ns", None);
        assert_ne!(prod, staging);
        assert_ne!(prod, legacy);
        // A key sent before environments were recorded: the derivation of that release.
        assert_eq!(legacy, "dk-2296ca26525fd772ebc8d344282d77b164218588");
        assert_eq!(
            external_idempotency_key(&wf, "deliver", "ns", Some("")),
            external_idempotency_key(&wf, "deliver", "ns", Some("")),
        );
        assert_ne!(
            external_idempotency_key(&wf, "deliver", "ns", Some("")),
            legacy
        );
    }

    #[test]
    fn the_external_key_depends_on_workflow_step_and_namespace_only() {
        let wf = WorkflowId("wf_1".into());
        let k = external_idempotency_key(&wf, "deliver", "ns", None);
        assert_eq!(k, external_idempotency_key(&wf, "deliver", "ns", None));
        assert_ne!(k, external_idempotency_key(&wf, "deliver", "other", None));
        assert_ne!(k, external_idempotency_key(&wf, "render", "ns", None));
        assert_ne!(
            k,
            external_idempotency_key(&WorkflowId("wf_2".into()), "deliver", "ns", None)
        );
        // Parts are length-prefixed, so shifting text between them changes the key.
        assert_ne!(
            external_idempotency_key(&WorkflowId("a".into()), "bc", "d", None),
            external_idempotency_key(&WorkflowId("ab".into()), "c", "d", None)
        );
    }
}
