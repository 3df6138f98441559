//! Checks against the host's world: which components exist in which versions and
//! worlds, and what the operator's config allows each adapter.
//!
//! [`CheckEnv`] is what the host (or `docket workflow check` with a config) provides;
//! [`StaticEnv`] is a plain in-memory implementation for tests and tools.

use std::collections::{BTreeMap, BTreeSet};

use semver::Version;
use serde_spanned::Spanned;

use super::StepKind;
use super::diagnostics::{Diagnostic, closest, list};
use super::raw::StepToml;
use super::step::host_problem;
use super::values::TomlVersionReq;

/// The world a component was built against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ComponentWorld {
    /// Causes external side effects (`invoke`, `query`, `compensate`).
    Adapter,
    /// Pure step computation (`run`).
    Handler,
}

impl ComponentWorld {
    /// The step kind that may use a component of this world.
    pub fn step_kind(self) -> StepKind {
        match self {
            ComponentWorld::Adapter => StepKind::Adapter,
            ComponentWorld::Handler => StepKind::Handler,
        }
    }
}

/// What a definition is checked against beyond its own file.
pub trait CheckEnv {
    /// Names of all known components (for "did you mean" and listing).
    fn components(&self) -> Vec<String>;
    /// The known versions of `component` and each one's world; empty if unknown.
    fn versions(&self, component: &str) -> Vec<(Version, ComponentWorld)>;
    /// Whether the operator's config allows `component` the outbound host `host`, as
    /// written in the definition (`scheme://host:port`, `host:port` or `$setting`).
    fn allows_host(&self, component: &str, host: &str) -> bool;
    /// Whether the operator's config allows `component` the secret `secret`.
    fn allows_secret(&self, component: &str, secret: &str) -> bool;
    /// Whether the operator's config has an `[adapters.<component>]` section at all.
    fn has_allowance(&self, component: &str) -> bool;
    /// Whether version `version` of `component` declares compensation; `None` when its
    /// contract is not known here.
    fn declares_compensation(&self, component: &str, version: &Version) -> Option<bool>;
}

/// An in-memory [`CheckEnv`]: listed components and exact-match allowances.
#[derive(Debug, Clone, Default)]
pub struct StaticEnv {
    components: BTreeMap<String, Vec<(Version, ComponentWorld)>>,
    hosts: BTreeMap<String, BTreeSet<String>>,
    secrets: BTreeMap<String, BTreeSet<String>>,
    compensation: BTreeMap<(String, Version), bool>,
}

impl StaticEnv {
    /// An environment that knows nothing and allows nothing.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a component version.
    pub fn component(mut self, name: &str, version: Version, world: ComponentWorld) -> Self {
        self.components
            .entry(name.to_string())
            .or_default()
            .push((version, world));
        self
    }

    /// Allows `component` the outbound host `host` (matched exactly).
    pub fn allow_host(mut self, component: &str, host: &str) -> Self {
        self.hosts
            .entry(component.to_string())
            .or_default()
            .insert(host.to_string());
        self
    }

    /// Allows `component` the secret `secret`.
    pub fn allow_secret(mut self, component: &str, secret: &str) -> Self {
        self.secrets
            .entry(component.to_string())
            .or_default()
            .insert(secret.to_string());
        self
    }

    /// Records whether a version's contract declares compensation.
    pub fn compensation(mut self, component: &str, version: Version, declared: bool) -> Self {
        self.compensation
            .insert((component.to_string(), version), declared);
        self
    }
}

impl CheckEnv for StaticEnv {
    fn components(&self) -> Vec<String> {
        self.components.keys().cloned().collect()
    }

    fn versions(&self, component: &str) -> Vec<(Version, ComponentWorld)> {
        self.components.get(component).cloned().unwrap_or_default()
    }

    fn allows_host(&self, component: &str, host: &str) -> bool {
        self.hosts.get(component).is_some_and(|h| h.contains(host))
    }

    fn allows_secret(&self, component: &str, secret: &str) -> bool {
        self.secrets
            .get(component)
            .is_some_and(|s| s.contains(secret))
    }

    fn has_allowance(&self, component: &str) -> bool {
        self.hosts.contains_key(component) || self.secrets.contains_key(component)
    }

    fn declares_compensation(&self, component: &str, version: &Version) -> Option<bool> {
        self.compensation
            .get(&(component.to_string(), version.clone()))
            .copied()
    }
}

/// A step that names the component that runs it, and which versions may.
struct Runs<'a> {
    step: &'a StepToml,
    component: &'a Spanned<String>,
    version: &'a Spanned<TomlVersionReq>,
}

/// Checks each step's component, version requirement and capabilities against `env`.
pub(super) fn check_steps(steps: &[StepToml], env: &dyn CheckEnv, diags: &mut Vec<Diagnostic>) {
    for step in steps {
        // An approval step runs no component; a missing one was reported already.
        let (Some(component), Some(version)) = (&step.component, &step.version) else {
            continue;
        };
        if *step.kind.get_ref() == StepKind::Approval {
            continue;
        }
        let run = Runs {
            step,
            component,
            version,
        };
        // Allowances are per component, so they mean nothing for an unknown one.
        if check_component(&run, env, diags) {
            check_capabilities(&run, env, diags);
            check_compensation(&run, env, diags);
        }
    }
}

/// Reports problems with the step's component; false when the component is unknown.
fn check_component(run: &Runs<'_>, env: &dyn CheckEnv, diags: &mut Vec<Diagnostic>) -> bool {
    let id = run.step.id.get_ref();
    let name = run.component.get_ref().as_str();
    let kind = *run.step.kind.get_ref();
    let versions = env.versions(name);
    if versions.is_empty() {
        let known = env.components();
        let help = match closest(name, known.iter().map(String::as_str)) {
            Some(near) => format!(
                "did you mean `{near}`? The known components are {}",
                list(&known)
            ),
            None => format!(
                "the known components are {}; deploy `{name}` first, or fix the name",
                list(&known)
            ),
        };
        diags.push(
            Diagnostic::new(format!("step `{id}` uses unknown component `{name}`"))
                .at(run.component.span())
                .help(help),
        );
        return false;
    }
    let mut matching: Vec<&Version> = versions
        .iter()
        .filter(|(_, world)| world.step_kind() == kind)
        .map(|(v, _)| v)
        .collect();
    if matching.is_empty() {
        let other = match kind {
            StepKind::Adapter => StepKind::Handler,
            StepKind::Handler | StepKind::Approval => StepKind::Adapter,
        };
        diags.push(
            Diagnostic::new(format!(
                "step `{id}` is {} step, but `{name}` is {} component",
                article(kind),
                article(other)
            ))
            .at(run.step.kind.span())
            .help(format!(
                "set kind = \"{}\", or use {} component",
                other.as_str(),
                article(kind)
            )),
        );
        return true;
    }
    let req = &run.version.get_ref().0;
    if !matching.iter().any(|v| req.matches(v)) {
        matching.sort();
        matching.dedup();
        let newest = matching.last().map_or_else(String::new, |v| match v.major {
            0 => format!("\"={v}\""),
            major => format!("\"^{major}\""),
        });
        diags.push(
            Diagnostic::new(format!(
                "no version of `{name}` satisfies `{req}`; available: {}",
                matching.iter().map(|v| v.to_string()).collect::<Vec<_>>().join(", ")
            ))
            .at(run.version.span())
            .help(format!(
                "change the requirement to match a deployed version, e.g. version = {newest}, or deploy a matching version of `{name}`"
            )),
        );
    }
    true
}

/// Where a step's missing allowance is reported: its `component`.
fn ctx_span(run: &Runs<'_>) -> std::ops::Range<usize> {
    run.component.span()
}

fn check_capabilities(run: &Runs<'_>, env: &dyn CheckEnv, diags: &mut Vec<Diagnostic>) {
    let Some(caps) = &run.step.capabilities else {
        return;
    };
    if *run.step.kind.get_ref() != StepKind::Adapter {
        return; // A handler's request is refused by the file checks.
    }
    let name = run.component.get_ref();
    let actions = [caps.query.as_ref(), caps.compensate.as_ref()];
    let lists = std::iter::once((&caps.outbound_hosts, &caps.secrets)).chain(
        actions
            .into_iter()
            .flatten()
            .map(|a| (&a.get_ref().outbound_hosts, &a.get_ref().secrets)),
    );
    let lists: Vec<_> = lists.collect();
    let requests_any = lists
        .iter()
        .any(|(hosts, secrets)| !(hosts.is_empty() && secrets.is_empty()));
    if requests_any && !env.has_allowance(name) {
        diags.push(
            Diagnostic::new(format!(
                "the host config has no [adapters.{name}] section, so `{name}` may reach no host and read no secret"
            ))
            .at(ctx_span(run))
            .help(format!(
                "add [adapters.{name}] with allow_hosts, allow_secrets and settings to docket.toml (the built-in provider simulator stands in only in development mode: no tokens, a loopback listener, environment = \"development\")"
            )),
        );
        return;
    }
    for (hosts, secrets) in lists {
        check_allowed(name, hosts, secrets, env, diags);
    }
}

/// Each host and secret one action asks for must be allowed by the operator's config.
fn check_allowed(
    name: &str,
    hosts: &[Spanned<String>],
    secrets: &[Spanned<String>],
    env: &dyn CheckEnv,
    diags: &mut Vec<Diagnostic>,
) {
    for host in hosts {
        let host_text = host.get_ref();
        // A malformed entry is reported by the file checks; asking about it adds nothing.
        if host_problem(host_text).is_none() && !env.allows_host(name, host_text) {
            diags.push(
                Diagnostic::new(format!(
                    "the operator config does not allow outbound host `{host_text}` for `{name}`"
                ))
                .at(host.span())
                .help(format!(
                    "remove it from `outbound_hosts`, or ask the operator to allow it for `{name}` in the host config"
                )),
            );
        }
    }
    for secret in secrets {
        let secret_name = secret.get_ref();
        if !env.allows_secret(name, secret_name) {
            diags.push(
                Diagnostic::new(format!(
                    "the operator config does not allow secret `{secret_name}` for `{name}`"
                ))
                .at(secret.span())
                .help(format!(
                    "remove it from `secrets`, or ask the operator to allow it for `{name}` in the host config"
                )),
            );
        }
    }
}

/// A compensated step's adapter must declare compensation in every version that may run it.
fn check_compensation(run: &Runs<'_>, env: &dyn CheckEnv, diags: &mut Vec<Diagnostic>) {
    let Some(compensation) = &run.step.compensation else {
        return;
    };
    if *run.step.kind.get_ref() != StepKind::Adapter {
        return; // A handler's compensation is refused by the file checks.
    }
    let name = run.component.get_ref();
    let req = &run.version.get_ref().0;
    let mut lacking: Vec<Version> = env
        .versions(name)
        .into_iter()
        .filter(|(v, world)| *world == ComponentWorld::Adapter && req.matches(v))
        .filter(|(v, _)| env.declares_compensation(name, v) == Some(false))
        .map(|(v, _)| v)
        .collect();
    if lacking.is_empty() {
        return;
    }
    lacking.sort();
    let versions = lacking
        .iter()
        .map(|v| v.to_string())
        .collect::<Vec<_>>()
        .join(", ");
    diags.push(
        Diagnostic::new(format!(
            "step `{}` is compensated, but `{name}` {versions} does not declare compensation in its contract",
            run.step.id.get_ref()
        ))
        .at(compensation.span())
        .help(format!(
            "remove [steps.compensation], or require a version of `{name}` whose contract declares compensation"
        )),
    );
}

fn article(kind: StepKind) -> &'static str {
    match kind {
        StepKind::Adapter => "an adapter",
        StepKind::Handler => "a handler",
        StepKind::Approval => "an approval",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn static_env_answers_exactly() {
        let env = StaticEnv::new()
            .component(
                "http-delivery",
                Version::new(1, 0, 0),
                ComponentWorld::Adapter,
            )
            .component(
                "http-delivery",
                Version::new(1, 1, 0),
                ComponentWorld::Adapter,
            )
            .allow_host("http-delivery", "$base_url")
            .allow_secret("http-delivery", "provider_token");
        assert_eq!(env.components(), ["http-delivery"]);
        assert_eq!(env.versions("http-delivery").len(), 2);
        assert!(env.versions("nope").is_empty());
        assert!(env.allows_host("http-delivery", "$base_url"));
        assert!(!env.allows_host("http-delivery", "evil.example:443"));
        assert!(!env.allows_host("other", "$base_url"));
        assert!(env.allows_secret("http-delivery", "provider_token"));
        assert!(!env.allows_secret("http-delivery", "root_password"));
    }
}
