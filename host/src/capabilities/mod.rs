//! Pure capability policy: what one step's plugin may reach.
//!
//! A workflow definition *requests* capabilities per step; the operator's config *allows*
//! them per adapter; the effective [`Grant`] is the intersection, so neither side can widen
//! the other. This module decides — without wasmtime, sockets or clocks — whether a
//! destination or a resolved address is inside a grant, which secret names resolve, and how
//! secret values are redacted from anything the host writes down.

mod hosts;
mod imports;
mod policy;
mod secrets;

pub use hosts::{AddressDecision, HostRule, HostRuleError, Scheme, check_resolved_address};
pub use imports::{ImportVerdict, WASI_BASELINE, check_import};
pub use policy::{AdapterPolicy, HostPolicy, PolicyError, WebhookKey};
pub use secrets::{LiveSecrets, Redactor, SecretSource, SecretValue};

use std::collections::BTreeSet;

/// The capabilities one call may use: outbound HTTP destinations and secret names.
///
/// Built by intersecting what a definition requests with what the operator allows
/// ([`Grant::intersect`]); an empty grant allows nothing beyond the WASI baseline.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Grant {
    /// Outbound HTTP destinations, sorted and deduplicated.
    hosts: Vec<HostRule>,
    /// Secret names the plugin may resolve.
    secrets: BTreeSet<String>,
    /// Whether a granted name may resolve to a private or otherwise non-public address
    /// (the operator's `allow_private = true`); a literal address is always what it says.
    allow_private: bool,
}

impl Grant {
    /// A grant of exactly these hosts and secret names.
    pub fn new(
        hosts: impl IntoIterator<Item = HostRule>,
        secrets: impl IntoIterator<Item = String>,
    ) -> Self {
        let mut hosts: Vec<HostRule> = hosts.into_iter().collect();
        hosts.sort();
        hosts.dedup();
        Self {
            hosts,
            secrets: secrets.into_iter().collect(),
            allow_private: false,
        }
    }

    /// This grant, with names allowed to reach non-public addresses.
    pub fn allowing_private(mut self, allow: bool) -> Self {
        self.allow_private = allow;
        self
    }

    /// Whether names may reach non-public addresses.
    pub fn allows_private(&self) -> bool {
        self.allow_private
    }

    /// The grant that allows nothing.
    pub fn none() -> Self {
        Self::default()
    }

    /// What both sides agree on: a host is granted only if both the request and the
    /// operator's allowance cover it, and likewise for secret names.
    pub fn intersect(requested: &Grant, allowed: &Grant) -> Grant {
        let hosts = requested
            .hosts
            .iter()
            .filter(|h| allowed.hosts.iter().any(|a| a.covers(h)))
            .cloned();
        let secrets = requested.secrets.intersection(&allowed.secrets).cloned();
        Grant::new(hosts, secrets)
    }

    /// Granted outbound destinations.
    pub fn hosts(&self) -> &[HostRule] {
        &self.hosts
    }

    /// Granted secret names.
    pub fn secrets(&self) -> &BTreeSet<String> {
        &self.secrets
    }

    /// True when `wasi:http` must be linked for this grant.
    pub fn allows_http(&self) -> bool {
        !self.hosts.is_empty()
    }

    /// True when docket's `secrets` interface must be linked for this grant.
    pub fn allows_secrets(&self) -> bool {
        !self.secrets.is_empty()
    }

    /// Whether a request to `scheme://host:port` is inside the grant.
    pub fn allows_destination(&self, scheme: Scheme, host: &str, port: u16) -> bool {
        self.hosts.iter().any(|h| h.matches(scheme, host, port))
    }

    /// A stable text form, used to key caches of linked components per grant.
    pub fn fingerprint(&self) -> String {
        let hosts: Vec<String> = self.hosts.iter().map(ToString::to_string).collect();
        let secrets: Vec<&str> = self.secrets.iter().map(String::as_str).collect();
        format!(
            "hosts=[{}];secrets=[{}];private={}",
            hosts.join(","),
            secrets.join(","),
            self.allow_private
        )
    }
}

/// One grant per adapter action: `invoke`, `query` and `compensate` each reach only what
/// their own grant holds, while the component is linked for what any of them needs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct ActionGrants {
    pub invoke: Grant,
    pub query: Grant,
    pub compensate: Grant,
}

impl ActionGrants {
    /// Every action under the same grant.
    pub fn same(grant: Grant) -> Self {
        Self {
            invoke: grant.clone(),
            query: grant.clone(),
            compensate: grant,
        }
    }

    /// What any action may use: the component's imports and declared needs are checked
    /// against it, since each need belongs to some action.
    pub fn union(&self) -> Grant {
        let all = [&self.invoke, &self.query, &self.compensate];
        let hosts = all.iter().flat_map(|g| g.hosts.iter().cloned());
        let secrets = all.iter().flat_map(|g| g.secrets.iter().cloned());
        Grant::new(hosts, secrets).allowing_private(all.iter().any(|g| g.allow_private))
    }

    /// A stable text form of all three, to key caches of linked components.
    pub fn fingerprint(&self) -> String {
        if self.query == self.invoke && self.compensate == self.invoke {
            return self.invoke.fingerprint();
        }
        format!(
            "invoke={{{}}};query={{{}}};compensate={{{}}}",
            self.invoke.fingerprint(),
            self.query.fingerprint(),
            self.compensate.fingerprint()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(s: &str) -> HostRule {
        s.parse().unwrap()
    }

    #[test]
    fn the_union_of_action_grants_holds_what_any_action_may_use() {
        let grants = ActionGrants {
            invoke: Grant::new([rule("http://a.example:80")], ["token".to_string()]),
            query: Grant::new([rule("http://b.example:80")], []),
            compensate: Grant::none(),
        };
        let union = grants.union();
        assert_eq!(
            union.hosts(),
            &[rule("http://a.example:80"), rule("http://b.example:80")]
        );
        assert_eq!(union.secrets().iter().collect::<Vec<_>>(), vec!["token"]);
        assert_ne!(
            grants.fingerprint(),
            ActionGrants::same(grants.invoke.clone()).fingerprint()
        );
        assert_eq!(
            ActionGrants::same(grants.invoke.clone()).fingerprint(),
            grants.invoke.fingerprint()
        );
    }

    #[test]
    fn intersection_never_widens_either_side() {
        let requested = Grant::new(
            [rule("http://127.0.0.1:8080"), rule("http://example.com:80")],
            ["token".to_string(), "other".to_string()],
        );
        let allowed = Grant::new([rule("http://127.0.0.1:8080")], ["token".to_string()]);
        let effective = Grant::intersect(&requested, &allowed);
        assert_eq!(effective.hosts(), &[rule("http://127.0.0.1:8080")]);
        assert_eq!(
            effective.secrets().iter().collect::<Vec<_>>(),
            vec!["token"]
        );

        // The operator allowing more than requested grants only what was requested.
        let effective = Grant::intersect(&allowed, &requested);
        assert_eq!(effective.hosts(), &[rule("http://127.0.0.1:8080")]);
    }

    #[test]
    fn destination_check_uses_scheme_host_and_port() {
        let g = Grant::new([rule("http://127.0.0.1:8080")], []);
        assert!(g.allows_destination(Scheme::Http, "127.0.0.1", 8080));
        assert!(!g.allows_destination(Scheme::Http, "127.0.0.1", 8081));
        assert!(!g.allows_destination(Scheme::Https, "127.0.0.1", 8080));
        assert!(!g.allows_destination(Scheme::Http, "127.0.0.2", 8080));
        assert!(!Grant::none().allows_http());
    }

    #[test]
    fn fingerprint_is_order_independent() {
        let a = Grant::new(
            [rule("a.example:1"), rule("b.example:2")],
            ["x".into(), "y".into()],
        );
        let b = Grant::new(
            [rule("b.example:2"), rule("a.example:1")],
            ["y".into(), "x".into()],
        );
        assert_eq!(a.fingerprint(), b.fingerprint());
    }
}
