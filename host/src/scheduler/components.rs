//! The components this host can run, and how a step's component is resolved and granted.
//!
//! Components come from files (the built examples, the configured ones) or from the
//! database, where every host keeps the bytes of what it loaded so that any host can run
//! any step: name and version from `describe()`, digest from the bytes. A step runs the
//! highest loaded version that satisfies its definition's requirement, linked under the
//! effective grant (definition request ∩ operator allowance).

use crate::capabilities::{HostPolicy, PolicyError};
use crate::runtime::{ComponentKind, LoadError, LoadedComponent, Prepared, Runtime};
use crate::workflow::{CheckEnv, ComponentWorld, StepDef};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

/// Why a step's component cannot run.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    #[error(
        "no loaded version of component `{component}` satisfies `{requirement}` (loaded: {loaded})"
    )]
    NoMatch {
        component: String,
        requirement: String,
        loaded: String,
    },
    #[error(transparent)]
    Policy(#[from] PolicyError),
    #[error(transparent)]
    Load(#[from] LoadError),
}

/// Loaded components by name, newest version last, plus the operator's policy.
pub struct Components {
    runtime: Runtime,
    policy: HostPolicy,
    by_name: BTreeMap<String, Vec<(semver::Version, Arc<LoadedComponent>)>>,
}

impl Components {
    pub fn new(runtime: Runtime, policy: HostPolicy) -> Self {
        Self {
            runtime,
            policy,
            by_name: BTreeMap::new(),
        }
    }

    /// Loads one component file and makes it available by its declared name and version.
    pub async fn load_file(&mut self, path: &Path) -> Result<Arc<LoadedComponent>, LoadError> {
        let loaded = self.runtime.load_file(path).await?;
        self.add(loaded)
    }

    /// Loads a component from its bytes (a file's, or the database's).
    pub async fn load_bytes(&mut self, bytes: &[u8]) -> Result<Arc<LoadedComponent>, LoadError> {
        let loaded = self.runtime.load(bytes).await?;
        self.add(loaded)
    }

    /// Whether a component with this digest is loaded.
    pub fn has_digest(&self, digest: &str) -> bool {
        self.all().any(|c| c.digest == digest)
    }

    fn add(&mut self, loaded: Arc<LoadedComponent>) -> Result<Arc<LoadedComponent>, LoadError> {
        let version = semver::Version::parse(loaded.version()).map_err(|e| LoadError::Compile {
            reason: format!(
                "`{}` declares version `{}`, which is not semantic versioning ({e}); declare e.g. `1.0.0`",
                loaded.name(),
                loaded.version()
            ),
        })?;
        let versions = self.by_name.entry(loaded.name().to_string()).or_default();
        versions.retain(|(v, _)| *v != version);
        versions.push((version, loaded.clone()));
        versions.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(loaded)
    }

    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    pub fn policy(&self) -> &HostPolicy {
        &self.policy
    }

    /// Every loaded component.
    pub fn all(&self) -> impl Iterator<Item = &Arc<LoadedComponent>> {
        self.by_name.values().flat_map(|v| v.iter().map(|(_, c)| c))
    }

    /// A loaded component by exact name and version (to recover an attempt on the version
    /// it started with).
    pub fn exact(&self, name: &str, version: &str) -> Option<Arc<LoadedComponent>> {
        self.by_name
            .get(name)?
            .iter()
            .find(|(v, _)| v.to_string() == version)
            .map(|(_, c)| c.clone())
    }

    /// The highest loaded version of the step's component that satisfies its requirement.
    pub fn resolve(&self, step: &StepDef) -> Result<Arc<LoadedComponent>, ResolveError> {
        let versions = self
            .by_name
            .get(&step.component)
            .map(Vec::as_slice)
            .unwrap_or_default();
        versions
            .iter()
            .rev()
            .find(|(v, _)| step.version_req.matches(v))
            .map(|(_, c)| c.clone())
            .ok_or_else(|| ResolveError::NoMatch {
                component: step.component.clone(),
                requirement: step.version_req.to_string(),
                loaded: if versions.is_empty() {
                    "none".into()
                } else {
                    versions
                        .iter()
                        .map(|(v, _)| v.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                },
            })
    }

    /// Links `component` for `step` under the effective grant.
    pub fn prepare(
        &self,
        component: &Arc<LoadedComponent>,
        step: &StepDef,
    ) -> Result<Arc<Prepared>, ResolveError> {
        let caps = &step.capabilities;
        let grant =
            self.policy
                .effective_grant(component.name(), &caps.outbound_hosts, &caps.secrets)?;
        let settings = self.policy.adapter(component.name()).settings;
        Ok(self.runtime.prepare(component, &grant, &settings)?)
    }

    /// The operator settings of an adapter.
    pub fn settings(&self, component: &str) -> BTreeMap<String, String> {
        self.policy.adapter(component).settings
    }
}

impl CheckEnv for Components {
    fn components(&self) -> Vec<String> {
        self.by_name.keys().cloned().collect()
    }

    fn versions(&self, component: &str) -> Vec<(semver::Version, ComponentWorld)> {
        self.by_name
            .get(component)
            .map(|v| {
                v.iter()
                    .map(|(version, c)| {
                        let world = match c.kind {
                            ComponentKind::Adapter { .. } => ComponentWorld::Adapter,
                            ComponentKind::Handler { .. } => ComponentWorld::Handler,
                        };
                        (version.clone(), world)
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    fn allows_host(&self, component: &str, host: &str) -> bool {
        self.policy.allows_host(component, host)
    }

    fn allows_secret(&self, component: &str, secret: &str) -> bool {
        self.policy.allows_secret(component, secret)
    }
}
