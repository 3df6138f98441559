//! The operator's side of a grant: what each adapter may use, and its settings.
//!
//! A step's effective grant is what its definition requests intersected with what the
//! operator allows for the adapter ([`HostPolicy::effective_grant`]). Requested hosts may
//! name a setting (`$base_url`), resolved against the adapter's settings here.

use super::{Grant, HostRule, HostRuleError};
use std::collections::{BTreeMap, BTreeSet};

/// What the operator allows one adapter, and the settings it reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AdapterPolicy {
    pub allow_hosts: Vec<HostRule>,
    pub allow_secrets: BTreeSet<String>,
    pub settings: BTreeMap<String, String>,
    /// When not empty, only components with one of these digests (`sha256:<hex>`) may use
    /// the allowance: a version uploaded under the name gets none of it.
    pub digests: BTreeSet<String>,
    /// Whether a granted host name may resolve to a private or otherwise non-public
    /// address (default: only the public internet).
    pub allow_private: bool,
    /// The key the provider signs its deliveries to `POST /v1/evidence/<adapter>` with
    /// (Standard Webhooks); `None`: the adapter takes no deliveries.
    pub webhook_key: Option<WebhookKey>,
}

/// A webhook signing key's bytes. Its `Debug` never shows them.
#[derive(Clone, PartialEq, Eq)]
pub struct WebhookKey(pub Vec<u8>);

impl std::fmt::Debug for WebhookKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WebhookKey(..)")
    }
}

/// Allowances for every adapter, by component name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostPolicy {
    pub adapters: BTreeMap<String, AdapterPolicy>,
}

/// Why a requested capability cannot be granted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error(
        "outbound host `{host}` names setting `{setting}`, which the operator config does not set for `{component}`; add it under [adapters.{component}.settings]"
    )]
    MissingSetting {
        component: String,
        host: String,
        setting: String,
    },
    #[error("outbound host of `{component}`: {source}")]
    BadHost {
        component: String,
        #[source]
        source: HostRuleError,
    },
    #[error(
        "the allowance for `{component}` is pinned to other digests ([adapters.{component}] digests); version digest {digest} gets none of it — add the digest, or activate a pinned version"
    )]
    NotPinned { component: String, digest: String },
}

impl HostPolicy {
    /// The policy of one adapter (empty when the operator said nothing about it).
    pub fn adapter(&self, component: &str) -> AdapterPolicy {
        self.adapters.get(component).cloned().unwrap_or_default()
    }

    /// Resolves a requested host (`scheme://host:port`, `host:port` or `$setting`).
    pub fn resolve_host(&self, component: &str, requested: &str) -> Result<HostRule, PolicyError> {
        let text = match requested.strip_prefix('$') {
            Some(setting) => self
                .adapters
                .get(component)
                .and_then(|a| a.settings.get(setting))
                .cloned()
                .ok_or_else(|| PolicyError::MissingSetting {
                    component: component.to_string(),
                    host: requested.to_string(),
                    setting: setting.to_string(),
                })?,
            None => requested.to_string(),
        };
        text.parse().map_err(|source| PolicyError::BadHost {
            component: component.to_string(),
            source,
        })
    }

    /// Whether the operator allows `component` to reach the requested host.
    pub fn allows_host(&self, component: &str, requested: &str) -> bool {
        let Ok(rule) = self.resolve_host(component, requested) else {
            return false;
        };
        self.adapter(component)
            .allow_hosts
            .iter()
            .any(|a| a.covers(&rule))
    }

    /// Whether the operator allows `component` the secret `name`.
    pub fn allows_secret(&self, component: &str, name: &str) -> bool {
        self.adapter(component).allow_secrets.contains(name)
    }

    /// Whether the allowance of `component` may go to a version with `digest`.
    pub fn check_pinned(&self, component: &str, digest: &str) -> Result<(), PolicyError> {
        let pinned = &self.adapter(component).digests;
        if pinned.is_empty() || pinned.contains(digest) {
            Ok(())
        } else {
            Err(PolicyError::NotPinned {
                component: component.to_string(),
                digest: digest.to_string(),
            })
        }
    }

    /// Requested ∩ allowed for one step of `component`.
    pub fn effective_grant(
        &self,
        component: &str,
        requested_hosts: &[String],
        requested_secrets: &[String],
    ) -> Result<Grant, PolicyError> {
        let hosts = requested_hosts
            .iter()
            .map(|h| self.resolve_host(component, h))
            .collect::<Result<Vec<_>, _>>()?;
        let requested = Grant::new(hosts, requested_secrets.iter().cloned());
        let policy = self.adapter(component);
        let allowed = Grant::new(policy.allow_hosts, policy.allow_secrets);
        Ok(Grant::intersect(&requested, &allowed).allowing_private(policy.allow_private))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> HostPolicy {
        let mut adapters = BTreeMap::new();
        adapters.insert(
            "http-delivery".to_string(),
            AdapterPolicy {
                allow_hosts: vec!["http://127.0.0.1:8090".parse().unwrap()],
                allow_secrets: ["provider_token".to_string()].into(),
                settings: [("base_url".to_string(), "http://127.0.0.1:8090".to_string())].into(),
                digests: Default::default(),
                allow_private: false,
                webhook_key: None,
            },
        );
        HostPolicy { adapters }
    }

    #[test]
    fn settings_resolve_requested_hosts() {
        let p = policy();
        assert!(p.allows_host("http-delivery", "$base_url"));
        assert!(!p.allows_host("http-delivery", "$other"));
        assert!(!p.allows_host("http-delivery", "http://127.0.0.1:9999"));
        assert!(!p.allows_host("noop", "$base_url"));
        let g = p
            .effective_grant(
                "http-delivery",
                &["$base_url".into()],
                &["provider_token".into(), "x".into()],
            )
            .unwrap();
        assert!(g.allows_destination(super::super::Scheme::Http, "127.0.0.1", 8090));
        assert_eq!(g.secrets().len(), 1);
    }

    #[test]
    fn a_missing_setting_is_named() {
        let err = policy().resolve_host("http-delivery", "$nope").unwrap_err();
        assert!(
            err.to_string().contains("`nope`")
                && err
                    .to_string()
                    .contains("[adapters.http-delivery.settings]")
        );
    }
}
