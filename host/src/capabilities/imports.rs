//! Which component imports a grant covers.
//!
//! Every component may import the WASI baseline, which the runtime links with an empty
//! context (importable, grants nothing), and docket's harmless host interfaces (`log`,
//! `clock`, `settings`, `types`). `wasi:http` needs a granted outbound host and docket's
//! `secrets` a granted secret name. Anything else is refused by name before the
//! component runs.

use super::Grant;

/// WASI packages linked for every component, with nothing behind them.
pub const WASI_BASELINE: &[&str] = &[
    "wasi:io",
    "wasi:clocks",
    "wasi:random",
    "wasi:cli",
    "wasi:filesystem",
    "wasi:sockets",
];

/// docket interfaces linked for every component.
const DOCKET_ALWAYS: &[&str] = &[
    "docket:plugin/types",
    "docket:plugin/log",
    "docket:plugin/clock",
    "docket:plugin/settings",
];

/// The verdict on one import name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImportVerdict {
    /// Linked under this grant.
    Allowed,
    /// Provided by docket, but this grant does not include it; the text says how to grant it.
    NotGranted(String),
    /// Not something docket provides at all.
    Unknown,
}

/// Whether `import` (e.g. `wasi:http/outgoing-handler@0.2.12`) is covered by `grant`.
pub fn check_import(import: &str, grant: &Grant) -> ImportVerdict {
    let unversioned = import.split('@').next().unwrap_or(import);
    let package = unversioned.split('/').next().unwrap_or(unversioned);
    if WASI_BASELINE.contains(&package) || DOCKET_ALWAYS.contains(&unversioned) {
        return ImportVerdict::Allowed;
    }
    match (package, unversioned) {
        ("wasi:http", "wasi:http/types" | "wasi:http/outgoing-handler") => {
            if grant.allows_http() {
                ImportVerdict::Allowed
            } else {
                ImportVerdict::NotGranted(
                    "outbound HTTP is granted only when the step requests outbound hosts and the operator's config allows them for this adapter".into(),
                )
            }
        }
        (_, "docket:plugin/secrets") => {
            if grant.allows_secrets() {
                ImportVerdict::Allowed
            } else {
                ImportVerdict::NotGranted(
                    "secrets are granted only when the step requests secret names and the operator's config allows them for this adapter".into(),
                )
            }
        }
        _ => ImportVerdict::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capabilities::HostRule;

    #[test]
    fn baseline_is_always_allowed() {
        for i in [
            "wasi:io/poll@0.2.0",
            "wasi:cli/environment@0.2.12",
            "wasi:sockets/tcp@0.2.3",
            "docket:plugin/log@0.2.0",
        ] {
            assert_eq!(
                check_import(i, &Grant::none()),
                ImportVerdict::Allowed,
                "{i}"
            );
        }
    }

    #[test]
    fn http_and_secrets_need_a_grant() {
        let none = Grant::none();
        assert!(matches!(
            check_import("wasi:http/outgoing-handler@0.2.12", &none),
            ImportVerdict::NotGranted(_)
        ));
        assert!(matches!(
            check_import("docket:plugin/secrets@0.2.0", &none),
            ImportVerdict::NotGranted(_)
        ));
        let granted = Grant::new(
            ["127.0.0.1:1".parse::<HostRule>().unwrap()],
            ["t".to_string()],
        );
        assert_eq!(
            check_import("wasi:http/types@0.2.12", &granted),
            ImportVerdict::Allowed
        );
        assert_eq!(
            check_import("docket:plugin/secrets@0.2.0", &granted),
            ImportVerdict::Allowed
        );
    }

    #[test]
    fn anything_else_is_unknown() {
        let granted = Grant::new(
            ["127.0.0.1:1".parse::<HostRule>().unwrap()],
            ["t".to_string()],
        );
        for i in [
            "evil:spy/exfiltrate@0.1.0",
            "wasi:keyvalue/store@0.2.0",
            "wasi:http/incoming-handler@0.2.12",
        ] {
            assert_eq!(check_import(i, &granted), ImportVerdict::Unknown, "{i}");
        }
    }
}
