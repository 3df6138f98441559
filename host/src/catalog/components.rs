//! The components this host can run, and how a step's component is resolved and granted.
//!
//! Components come from files (the built examples, the configured ones) or from the
//! database, where every host keeps the bytes of what it loaded so that any host can run
//! any step: name and version from `describe()`, digest from the bytes. A step runs the
//! active version when it satisfies the definition's requirement (otherwise the highest
//! version that does), linked under the effective grant (definition request ∩ operator
//! allowance). A version's bytes never change: other bytes under a loaded version are
//! refused, as is a component whose contract is unusable.

use crate::capabilities::{ActionGrants, HostPolicy, PolicyError};
use crate::runtime::{ComponentKind, LoadError, LoadedComponent, Prepared, Runtime};
use crate::store::{ComponentStore, StoreError, StoredComponent};
use crate::workflow::{AdapterAction, CheckEnv, ComponentWorld, StepDef};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

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
    /// Only verified versions run here, and the version the step would need has no passing
    /// verdict (nor is it the active one).
    #[error(
        "{component}@{version} would run this step, but it has no passing `docket adapter verify` verdict and this host runs only verified versions (require_verified); verify it and activate it, then retry the step"
    )]
    Unverified { component: String, version: String },
    /// The database could not be read: nothing is decided, the caller tries again later.
    #[error("reading the registry failed: {0}")]
    Store(#[from] StoreError),
}

/// Loaded versions of one component name, lowest first.
type Versions = Vec<(semver::Version, Arc<LoadedComponent>)>;

/// Loaded components by name, newest version last, which version of each is active, and
/// the operator's policy. Shared by the scheduler and the API; the registry changes it
/// while attempts run, and an attempt keeps the `Arc` of the version it started with.
pub struct Components {
    runtime: Runtime,
    /// The operator's allowances, replaced whole by a configuration reload.
    policy: RwLock<Arc<HostPolicy>>,
    by_name: RwLock<BTreeMap<String, Versions>>,
    /// Name → digest of the active version (the registry's choice for new attempts).
    active: RwLock<BTreeMap<String, String>>,
    /// When each version was last chosen for an attempt: a version stays loaded this long
    /// after its last use, so a definition pinned to it does not reload it every time.
    last_used: Mutex<HashMap<String, Instant>>,
    /// How long a version that is neither active nor running stays loaded.
    pub unload_idle: Duration,
    /// Every version this host has seen, loaded or not (from files and the registry).
    known: RwLock<BTreeMap<String, BTreeMap<semver::Version, ComponentWorld>>>,
    /// Stored digests that failed to load here: reported once, not tried at every sync.
    unloadable: Mutex<BTreeSet<String>>,
    /// The deployed policy in force, refreshed with the registry.
    governance: super::governance::Governance,
    /// Whether a version other than the active one runs only with a passing verdict.
    require_verified: std::sync::atomic::AtomicBool,
    /// Digests whose latest verdict passed, refreshed with the registry.
    verified: RwLock<BTreeSet<String>>,
}

impl Components {
    pub fn new(runtime: Runtime, policy: HostPolicy) -> Self {
        Self {
            runtime,
            policy: RwLock::new(Arc::new(policy)),
            governance: super::governance::Governance::default(),
            by_name: RwLock::new(BTreeMap::new()),
            active: RwLock::new(BTreeMap::new()),
            last_used: Mutex::new(HashMap::new()),
            unload_idle: Duration::from_secs(60),
            known: RwLock::new(BTreeMap::new()),
            unloadable: Mutex::new(BTreeSet::new()),
            require_verified: std::sync::atomic::AtomicBool::new(false),
            verified: RwLock::new(BTreeSet::new()),
        }
    }

    /// Runs only verified versions (besides the active one, which an activation checked
    /// or which was grandfathered) when `on`.
    pub fn set_require_verified(&self, on: bool) {
        self.require_verified
            .store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether `c` may run here: a handler always (it is pure: nothing to verify); an
    /// adapter always when verification is not required, else when it is the active
    /// version of its name or its latest verdict passed.
    fn may_run(&self, c: &LoadedComponent) -> bool {
        let (name, digest) = (c.name(), c.digest.as_str());
        c.world_name() != "adapter"
            || !self
                .require_verified
                .load(std::sync::atomic::Ordering::Relaxed)
            || self.active_digest(name).as_deref() == Some(digest)
            || self
                .verified
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .contains(digest)
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
        // Wherever it comes from (a file, the database, a deploy), a component with an
        // unusable contract never runs.
        if let Some(contract) = loaded.contract()
            && let Err(reason) = contract.check()
        {
            return Err(LoadError::UnusableContract {
                name: loaded.name().into(),
                version: loaded.version().into(),
                reason: reason.to_string(),
            });
        }
        let world = match loaded.kind {
            ComponentKind::Adapter { .. } => ComponentWorld::Adapter,
            ComponentKind::Handler { .. } => ComponentWorld::Handler,
        };
        let mut by_name = self.by_name.write().unwrap_or_else(|e| e.into_inner());
        let versions = by_name.entry(loaded.name().to_string()).or_default();
        if let Some((_, other)) = versions.iter().find(|(v, _)| *v == version) {
            if other.digest != loaded.digest {
                return Err(LoadError::VersionTaken {
                    name: loaded.name().into(),
                    version: loaded.version().into(),
                    loaded: other.digest.clone(),
                    offered: loaded.digest.clone(),
                });
            }
            return Ok(other.clone());
        }
        versions.push((version.clone(), loaded.clone()));
        versions.sort_by(|a, b| a.0.cmp(&b.0));
        drop(by_name);
        self.known
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .entry(loaded.name().to_string())
            .or_default()
            .insert(version, world);
        Ok(loaded)
    }

    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    /// The operator's allowances in force.
    pub fn policy(&self) -> Arc<HostPolicy> {
        self.policy
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Puts new allowances in force for the attempts that start from now on.
    pub fn set_policy(&self, policy: HostPolicy) {
        *self.policy.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(policy);
    }

    /// The deployed policy in force on this host, and its environment.
    pub fn governance(&self) -> &super::governance::Governance {
        &self.governance
    }

    /// Judges in `environment` (the host config's `environment`).
    pub fn with_environment(mut self, environment: &str) -> Self {
        self.governance = super::governance::Governance::new(environment);
        self
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

    /// Brings this host up to date with the registry in `store`: loads each name's active
    /// version, takes over the active versions, and unloads versions that are not active,
    /// not used by a running attempt, and not resolved for [`Components::unload_idle`].
    /// (A step whose requirement the active version does not meet loads the version it
    /// needs again, see [`Components::resolve_or_stored`].) Returns a line per change, for
    /// the log.
    pub async fn sync<S: ComponentStore>(&self, store: &S) -> Result<Vec<String>, SyncError> {
        let stored = store.stored_components().await?;
        let verified: BTreeSet<String> = store
            .verifications()
            .await?
            .into_iter()
            .filter(|v| v.passed)
            .map(|v| v.digest)
            .collect();
        *self.verified.write().unwrap_or_else(|e| e.into_inner()) = verified;
        let active: BTreeMap<String, String> = store
            .active_components()
            .await?
            .into_iter()
            .map(|a| (a.name, a.digest))
            .collect();
        {
            let mut known = self.known.write().unwrap_or_else(|e| e.into_inner());
            for c in &stored {
                let world = if c.kind == "handler" {
                    ComponentWorld::Handler
                } else {
                    ComponentWorld::Adapter
                };
                if let Ok(v) = semver::Version::parse(&c.version) {
                    known.entry(c.name.clone()).or_default().insert(v, world);
                }
            }
        }
        // Each name's active version; every version of a name nobody activated.
        let needed: BTreeSet<String> = stored
            .iter()
            .filter(|c| active.get(&c.name).is_none_or(|d| *d == c.digest))
            .map(|c| c.digest.clone())
            .collect();
        let mut changes = Vec::new();
        for c in stored.iter().filter(|c| needed.contains(&c.digest)) {
            if self.has_digest(&c.digest)
                || self
                    .unloadable
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .contains(&c.digest)
            {
                continue;
            }
            // One version that cannot load must not keep the others, or the active
            // choice, from this host.
            match self.load_stored(store, c).await {
                Ok(_) => {}
                Err(e @ SyncError::Load { .. }) => {
                    self.unloadable
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(c.digest.clone());
                    changes.push(e.to_string());
                }
                Err(e) => return Err(e),
            }
        }
        {
            let before = self.active.read().unwrap_or_else(|e| e.into_inner());
            for (name, digest) in &active {
                if before.get(name) != Some(digest) {
                    let version = stored
                        .iter()
                        .find(|c| c.digest == *digest)
                        .map(|c| c.version.as_str())
                        .unwrap_or("?");
                    changes.push(format!("{name}@{version} ({digest}) is now active"));
                }
            }
        }
        self.set_active(active);
        // Only what the registry knows is unloaded: components this host loaded but the
        // database lacks (a store that failed) stay.
        let known: BTreeSet<&str> = stored.iter().map(|c| c.digest.as_str()).collect();
        let last_used = self
            .last_used
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let mut by_name = self.by_name.write().unwrap_or_else(|e| e.into_inner());
        for versions in by_name.values_mut() {
            versions.retain(|(v, c)| {
                if needed.contains(&c.digest) || !known.contains(c.digest.as_str()) {
                    return true;
                }
                let idle = last_used
                    .get(&c.digest)
                    .is_none_or(|t| t.elapsed() >= self.unload_idle);
                if !idle {
                    return true;
                }
                // This map's entry is the one reference the caller holds.
                if self.runtime.unload_if_unused(&c.digest, 1) {
                    changes.push(format!(
                        "unloaded {}@{v} ({}): not active, and no attempt uses it",
                        c.name(),
                        c.digest
                    ));
                    false
                } else {
                    true
                }
            });
        }
        Ok(changes)
    }

    /// Loads a stored component (`None` if its bytes are gone).
    async fn load_stored<S: ComponentStore>(
        &self,
        store: &S,
        c: &StoredComponent,
    ) -> Result<Option<Arc<LoadedComponent>>, SyncError> {
        if let Some(local) = self.exact(&c.name, &c.version) {
            if local.digest != c.digest {
                tracing::warn!(
                    "component {}@{} in the database has digest {}, but this host loaded other bytes under that version ({}); keeping this host's. Give changed code a new version",
                    c.name,
                    c.version,
                    c.digest,
                    local.digest
                );
            }
            return Ok(Some(local));
        }
        let Some(bytes) = store.component_bytes(&c.digest).await? else {
            return Ok(None);
        };
        let loaded = self.load_bytes(&bytes).await.map_err(|e| SyncError::Load {
            component: format!("{}@{} ({})", c.name, c.version, c.digest),
            reason: e.to_string(),
        })?;
        tracing::info!(
            "component {}@{} ({}) from the database",
            c.name,
            c.version,
            c.digest
        );
        Ok(Some(loaded))
    }

    /// A version by exact name and version, loaded from the database if this host does not
    /// hold it (recovery decides by the contract of the version that sent the request).
    pub async fn exact_or_stored<S: ComponentStore>(
        &self,
        store: &S,
        name: &str,
        version: &str,
    ) -> Result<Option<Arc<LoadedComponent>>, StoreError> {
        if let Some(c) = self.exact(name, version) {
            return Ok(Some(c));
        }
        let stored = store.stored_components().await?;
        let Some(c) = stored
            .iter()
            .find(|c| c.name == name && c.version == version)
        else {
            return Ok(None);
        };
        match self.load_stored(store, c).await {
            Ok(Some(found)) => Ok(Some(found)),
            Err(SyncError::Store(e)) => Err(e),
            // The host may have registered its own bytes under that version while the stored
            // ones compiled (a host starting with a cold cache): those are kept, as a sync
            // keeps them, and answer for the version.
            Ok(None) => Ok(self.exact(name, version)),
            Err(e) => {
                tracing::warn!("{e}");
                Ok(self.exact(name, version))
            }
        }
    }

    /// [`Components::resolve`], loading from the database the newest stored version that
    /// satisfies the step when no loaded one does (one unloaded as unused, say).
    pub async fn resolve_or_stored<S: ComponentStore>(
        &self,
        store: &S,
        step: &StepDef,
    ) -> Result<Arc<LoadedComponent>, ResolveError> {
        match self.resolve(step) {
            Err(ResolveError::NoMatch { .. }) => {}
            found => return found,
        }
        let stored = store.stored_components().await?;
        let best = stored
            .iter()
            .filter(|c| c.name == step.component)
            .filter_map(|c| semver::Version::parse(&c.version).ok().map(|v| (v, c)))
            .filter(|(v, _)| step.version_req.matches(v))
            .max_by(|a, b| a.0.cmp(&b.0));
        if let Some((_, c)) = best {
            match self.load_stored(store, c).await {
                Ok(_) => {}
                Err(SyncError::Store(e)) => return Err(e.into()),
                Err(e) => tracing::warn!("{e}"),
            }
        }
        self.resolve(step)
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
        let allowed = |(_, c): &&(semver::Version, Arc<LoadedComponent>)| self.may_run(c);
        let chosen = active
            .and_then(|d| versions.iter().find(|(_, c)| c.digest == d))
            .filter(|entry| satisfying(entry))
            .or_else(|| {
                versions
                    .iter()
                    .rev()
                    .find(|entry| satisfying(entry) && allowed(entry))
            });
        if chosen.is_none()
            && let Some((v, _)) = versions.iter().rev().find(satisfying)
        {
            return Err(ResolveError::Unverified {
                component: step.component.clone(),
                version: v.to_string(),
            });
        }
        if let Some((_, c)) = chosen {
            self.last_used
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(c.digest.clone(), Instant::now());
        }
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
        // A version under a pinned name that is not pinned gets none of the allowance.
        let policy = self.policy();
        policy.check_pinned(component.name(), &component.digest)?;
        let grant = |action| {
            let (hosts, secrets) = caps.of(action);
            policy.effective_grant(component.name(), hosts, secrets)
        };
        let grants = ActionGrants {
            invoke: grant(AdapterAction::Invoke)?,
            query: grant(AdapterAction::Query)?,
            compensate: grant(AdapterAction::Compensate)?,
        };
        let settings = policy.adapter(component.name()).settings;
        Ok(self
            .runtime
            .prepare_actions(component, &grants, &settings)?)
    }

    /// The version of `name` that reads its provider's deliveries: the active one, else the
    /// highest loaded. It is linked for the operator's allowance, as `observe` runs with
    /// nothing granted: reading a delivery reaches no network and no secret.
    pub fn observer(&self, name: &str) -> Result<(Arc<LoadedComponent>, Arc<Prepared>), String> {
        let active = self.active_digest(name);
        let component = {
            let by_name = self.by_name.read().unwrap_or_else(|e| e.into_inner());
            let versions = by_name.get(name).map(Vec::as_slice).unwrap_or_default();
            active
                .and_then(|d| versions.iter().find(|(_, c)| c.digest == d))
                .or_else(|| versions.last())
                .map(|(_, c)| c.clone())
        }
        .ok_or_else(|| format!("no version of adapter `{name}` is loaded on this host"))?;
        let allowance = self.policy().adapter(name);
        let grant = crate::capabilities::Grant::new(
            allowance.allow_hosts.clone(),
            allowance.allow_secrets.iter().cloned(),
        );
        let prepared = self
            .runtime
            .prepare(&component, &grant, &allowance.settings)
            .map_err(|e| format!("{name}@{} cannot be linked: {e}", component.version()))?;
        Ok((component, prepared))
    }

    /// Whether this host's config has an `[adapters.<component>]` section.
    pub fn has_allowance(&self, component: &str) -> bool {
        self.policy().adapters.contains_key(component)
    }

    /// The operator settings of an adapter.
    pub fn settings(&self, component: &str) -> BTreeMap<String, String> {
        self.policy().adapter(component).settings
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

/// Definitions are checked against every version the registry knows, loaded or not.
impl CheckEnv for Components {
    fn components(&self) -> Vec<String> {
        let known = self.known.read().unwrap_or_else(|e| e.into_inner());
        known.keys().cloned().collect()
    }

    fn versions(&self, component: &str) -> Vec<(semver::Version, ComponentWorld)> {
        let known = self.known.read().unwrap_or_else(|e| e.into_inner());
        known
            .get(component)
            .map(|v| v.iter().map(|(v, w)| (v.clone(), *w)).collect())
            .unwrap_or_default()
    }

    fn allows_host(&self, component: &str, host: &str) -> bool {
        self.policy().allows_host(component, host)
    }

    fn allows_secret(&self, component: &str, secret: &str) -> bool {
        self.policy().allows_secret(component, secret)
    }

    fn has_allowance(&self, component: &str) -> bool {
        self.policy().adapters.contains_key(component)
    }

    fn declares_compensation(&self, component: &str, version: &semver::Version) -> Option<bool> {
        let by_name = self.by_name.read().unwrap_or_else(|e| e.into_inner());
        by_name
            .get(component)?
            .iter()
            .find(|(v, _)| v == version)
            .and_then(|(_, c)| c.contract().map(|c| c.compensation.supported))
    }
}
