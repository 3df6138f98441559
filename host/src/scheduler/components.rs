//! The components this host can run, and how a step's component is resolved and granted.
//!
//! Components come from files (the built examples, the configured ones) or from the
//! database, where every host keeps the bytes of what it loaded so that any host can run
//! any step: name and version from `describe()`, digest from the bytes. A step runs the
//! highest loaded version that satisfies its definition's requirement, linked under the
//! effective grant (definition request ∩ operator allowance).

use crate::capabilities::{HostPolicy, PolicyError};
use crate::runtime::{ComponentKind, LoadError, LoadedComponent, Prepared, Runtime};
use crate::store::{ComponentStore, StoreError};
use crate::workflow::{CheckEnv, ComponentWorld, StepDef};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, RwLock};

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

/// Loaded versions of one component name, lowest first.
type Versions = Vec<(semver::Version, Arc<LoadedComponent>)>;

/// Loaded components by name, newest version last, which version of each is active, and
/// the operator's policy. Shared by the scheduler and the API; the registry changes it
/// while attempts run, and an attempt keeps the `Arc` of the version it started with.
pub struct Components {
    runtime: Runtime,
    policy: HostPolicy,
    by_name: RwLock<BTreeMap<String, Versions>>,
    /// Name → digest of the active version (the registry's choice for new attempts).
    active: RwLock<BTreeMap<String, String>>,
}

impl Components {
    pub fn new(runtime: Runtime, policy: HostPolicy) -> Self {
        Self {
            runtime,
            policy,
            by_name: RwLock::new(BTreeMap::new()),
            active: RwLock::new(BTreeMap::new()),
        }
    }

    /// Loads one component file and makes it available by its declared name and version.
    pub async fn load_file(&self, path: &Path) -> Result<Arc<LoadedComponent>, LoadError> {
        let loaded = self.runtime.load_file(path).await?;
        self.add(loaded)
    }

    /// Loads a component from its bytes (a file's, or the database's).
    pub async fn load_bytes(&self, bytes: &[u8]) -> Result<Arc<LoadedComponent>, LoadError> {
        let loaded = self.runtime.load(bytes).await?;
        self.add(loaded)
    }

    /// Whether a component with this digest is loaded.
    pub fn has_digest(&self, digest: &str) -> bool {
        self.all().iter().any(|c| c.digest == digest)
    }

    fn add(&self, loaded: Arc<LoadedComponent>) -> Result<Arc<LoadedComponent>, LoadError> {
        let version = semver::Version::parse(loaded.version()).map_err(|e| LoadError::Compile {
            reason: format!(
                "`{}` declares version `{}`, which is not semantic versioning ({e}); declare e.g. `1.0.0`",
                loaded.name(),
                loaded.version()
            ),
        })?;
        let mut by_name = self.by_name.write().unwrap_or_else(|e| e.into_inner());
        let versions = by_name.entry(loaded.name().to_string()).or_default();
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
    pub fn all(&self) -> Vec<Arc<LoadedComponent>> {
        let by_name = self.by_name.read().unwrap_or_else(|e| e.into_inner());
        by_name
            .values()
            .flat_map(|v| v.iter().map(|(_, c)| c.clone()))
            .collect()
    }

    /// Makes these versions (name → digest) the active ones.
    pub fn set_active(&self, active: BTreeMap<String, String>) {
        *self.active.write().unwrap_or_else(|e| e.into_inner()) = active;
    }

    /// The digest of a name's active version, if the registry chose one.
    pub fn active_digest(&self, name: &str) -> Option<String> {
        self.active
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned()
    }

    /// Brings this host up to date with the registry in `store`: loads the components other
    /// hosts (or `docket adapter deploy`) stored since, and takes over the active versions.
    /// Returns a line per change of an active version, for the log.
    pub async fn sync<S: ComponentStore>(&self, store: &S) -> Result<Vec<String>, SyncError> {
        for stored in store.stored_components().await? {
            if self.has_digest(&stored.digest) {
                continue;
            }
            if let Some(local) = self.exact(&stored.name, &stored.version) {
                tracing::warn!(
                    "component {}@{} in the database has digest {}, but this host loaded other bytes under that version ({}); keeping this host's. Give changed code a new version",
                    stored.name,
                    stored.version,
                    stored.digest,
                    local.digest
                );
                continue;
            }
            let Some(bytes) = store.component_bytes(&stored.digest).await? else {
                continue;
            };
            let c = self.load_bytes(&bytes).await.map_err(|e| SyncError::Load {
                component: format!("{}@{} ({})", stored.name, stored.version, stored.digest),
                reason: e.to_string(),
            })?;
            tracing::info!(
                "component {}@{} ({}) from the database",
                c.name(),
                c.version(),
                c.digest
            );
        }
        let active: BTreeMap<String, String> = store
            .active_components()
            .await?
            .into_iter()
            .map(|a| (a.name, a.digest))
            .collect();
        let mut changes = Vec::new();
        {
            let before = self.active.read().unwrap_or_else(|e| e.into_inner());
            for (name, digest) in &active {
                if before.get(name) != Some(digest) {
                    let version = self
                        .all()
                        .into_iter()
                        .find(|c| c.digest == *digest)
                        .map(|c| c.version().to_string())
                        .unwrap_or_else(|| "?".into());
                    changes.push(format!("{name}@{version} ({digest}) is now active"));
                }
            }
        }
        self.set_active(active);
        Ok(changes)
    }

    /// A loaded component by exact name and version (to recover an attempt on the version
    /// it started with).
    pub fn exact(&self, name: &str, version: &str) -> Option<Arc<LoadedComponent>> {
        let by_name = self.by_name.read().unwrap_or_else(|e| e.into_inner());
        by_name
            .get(name)?
            .iter()
            .find(|(v, _)| v.to_string() == version)
            .map(|(_, c)| c.clone())
    }

    /// The version a new attempt of `step` runs: the active version when it satisfies the
    /// step's requirement, otherwise the highest loaded version that does.
    pub fn resolve(&self, step: &StepDef) -> Result<Arc<LoadedComponent>, ResolveError> {
        let active = self.active_digest(&step.component);
        let by_name = self.by_name.read().unwrap_or_else(|e| e.into_inner());
        let versions = by_name
            .get(&step.component)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let satisfying =
            |(v, _): &&(semver::Version, Arc<LoadedComponent>)| step.version_req.matches(v);
        let chosen = active
            .and_then(|d| versions.iter().find(|(_, c)| c.digest == d))
            .filter(|entry| satisfying(entry))
            .or_else(|| versions.iter().rev().find(satisfying));
        chosen
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

/// Why this host could not catch up with the registry; it keeps what it has and tries again.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("cannot load component {component} from the database: {reason}")]
    Load { component: String, reason: String },
}

impl CheckEnv for Components {
    fn components(&self) -> Vec<String> {
        let by_name = self.by_name.read().unwrap_or_else(|e| e.into_inner());
        by_name.keys().cloned().collect()
    }

    fn versions(&self, component: &str) -> Vec<(semver::Version, ComponentWorld)> {
        let by_name = self.by_name.read().unwrap_or_else(|e| e.into_inner());
        by_name
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
