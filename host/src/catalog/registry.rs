//! The adapter registry's operations — deploy (stage) a version, find a deployed version,
//! activate one or roll back — with their checks, in one place for the HTTP API and the
//! CLI, which differ only in how they read their input and show the result.

use super::components::Components;
use super::definitions::DeployedDef;
use crate::intent::Millis;
use crate::runtime::{ComponentKind, LoadedComponent};
use crate::store::{ActiveChange, ActiveOutcome, ActiveTarget, ComponentStore, NewComponent};
use crate::store::{StoreError, StoredComponent};
use crate::workflow::StepKind;
use std::sync::Arc;

/// Why a registry operation was refused, by what the caller does next.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// The component itself is unusable: fix the component.
    #[error("`{name}@{version}` declares an unusable contract: {reason}")]
    UnusableContract {
        name: String,
        version: String,
        reason: String,
    },
    /// A current definition would choose this version and could not run it: change the
    /// grant or the version.
    #[error("{0}")]
    WouldNotRun(Box<StepRefusal>),
    /// The version exists with other bytes: give the changed component a new version.
    #[error(
        "`{name}@{version}` is already deployed with digest {deployed}, and these bytes have digest {offered}; a deployed version never changes: give the changed component a new version"
    )]
    VersionChanged {
        name: String,
        version: String,
        deployed: String,
        offered: String,
    },
    /// No such deployed version: deploy it first.
    #[error(
        "there is no deployed version {version} of `{name}` (deployed: {known}); deploy it first"
    )]
    UnknownVersion {
        name: String,
        version: String,
        known: String,
    },
    /// The change has nothing to act on (e.g. no earlier version to roll back to).
    #[error("cannot change `{name}`: no {what}")]
    NoTarget { name: String, what: String },
    #[error(transparent)]
    Store(StoreError),
}

/// Which step of which definition could not run a component, and why.
#[derive(Debug, thiserror::Error)]
#[error(
    "`{name}@{version}` would not run in step `{step}` of workflow `{workflow}` version {workflow_version}, whose requirement `{requirement}` it meets: {reason}. Grant what it needs in the definition (and the operator config), or give it a version outside that requirement"
)]
pub struct StepRefusal {
    pub name: String,
    pub version: String,
    pub step: String,
    pub workflow: String,
    pub workflow_version: u32,
    pub requirement: String,
    pub reason: String,
}

/// A version the registry holds after [`deploy`].
pub struct Deployed {
    pub component: Arc<LoadedComponent>,
    /// False when these exact bytes were deployed before.
    pub added: bool,
    /// Whether this version is the active one.
    pub active: bool,
}

/// Checks a loaded component and stores it as a staged version.
///
/// The checks: its contract is sane; every step of a current definition whose version
/// requirement it meets is of its world and — when `grants` gives the host's policy —
/// can link it under the step's effective grant; the version is not deployed with other
/// bytes.
pub async fn deploy<S: ComponentStore>(
    store: &S,
    component: Arc<LoadedComponent>,
    bytes: Vec<u8>,
    definitions: &[Arc<DeployedDef>],
    grants: Option<&Components>,
    author: String,
    now: Millis,
) -> Result<Deployed, RegistryError> {
    let (name, version) = (component.name(), component.version());
    if let Some(contract) = component.contract()
        && let Err(e) = contract.check()
    {
        return Err(RegistryError::UnusableContract {
            name: name.into(),
            version: version.into(),
            reason: e.to_string(),
        });
    }
    check_steps(&component, definitions, grants)?;
    let stored = store
        .stored_components()
        .await
        .map_err(RegistryError::Store)?;
    if let Some(other) = stored
        .iter()
        .find(|c| c.name == name && c.version == version && c.digest != component.digest)
    {
        return Err(RegistryError::VersionChanged {
            name: name.into(),
            version: version.into(),
            deployed: other.digest.clone(),
            offered: component.digest.clone(),
        });
    }
    let added = store
        .store_component(NewComponent {
            digest: component.digest.clone(),
            name: name.to_string(),
            version: version.to_string(),
            kind: component.world_name().to_string(),
            bytes,
            registered_at: now,
            author,
        })
        .await
        .map_err(RegistryError::Store)?;
    let active = store
        .active_components()
        .await
        .map_err(RegistryError::Store)?
        .iter()
        .any(|a| a.digest == component.digest);
    Ok(Deployed {
        component,
        added,
        active,
    })
}

/// Refuses a component that a step of a current definition would choose and could not run.
fn check_steps(
    component: &Arc<LoadedComponent>,
    definitions: &[Arc<DeployedDef>],
    grants: Option<&Components>,
) -> Result<(), RegistryError> {
    let Ok(version) = semver::Version::parse(component.version()) else {
        return Ok(());
    };
    let world = |adapter: bool| if adapter { "an adapter" } else { "a handler" };
    for deployed in definitions {
        let def = &deployed.def;
        let choosing = def
            .steps
            .iter()
            .filter(|s| s.component == component.name() && s.version_req.matches(&version));
        for step in choosing {
            let is_adapter = matches!(component.kind, ComponentKind::Adapter { .. });
            let refused = if (step.kind == StepKind::Adapter) != is_adapter {
                Some(format!(
                    "the step is {} step and this is {} component",
                    world(step.kind == StepKind::Adapter),
                    world(is_adapter)
                ))
            } else {
                grants.and_then(|g| g.prepare(component, step).err().map(|e| e.to_string()))
            };
            if let Some(reason) = refused {
                return Err(RegistryError::WouldNotRun(Box::new(StepRefusal {
                    name: component.name().into(),
                    version: component.version().into(),
                    step: step.id.as_str().into(),
                    workflow: def.name.to_string(),
                    workflow_version: def.version,
                    requirement: step.version_req.to_string(),
                    reason,
                })));
            }
        }
    }
    Ok(())
}

/// The digest of deployed version `version` of `name`.
pub async fn find_version<S: ComponentStore>(
    store: &S,
    name: &str,
    version: &str,
) -> Result<String, RegistryError> {
    let stored = store
        .stored_components()
        .await
        .map_err(RegistryError::Store)?;
    if let Some(found) = stored
        .iter()
        .find(|c| c.name == name && c.version == version)
    {
        return Ok(found.digest.clone());
    }
    let known: Vec<&str> = stored
        .iter()
        .filter(|c| c.name == name)
        .map(|c| c.version.as_str())
        .collect();
    Err(RegistryError::UnknownVersion {
        name: name.into(),
        version: version.into(),
        known: if known.is_empty() {
            "none".into()
        } else {
            known.join(", ")
        },
    })
}

/// Makes `target` the active version of `name`, recording who did it.
pub async fn change<S: ComponentStore>(
    store: &S,
    name: &str,
    target: ActiveTarget,
    author: String,
    now: Millis,
) -> Result<ActiveOutcome, RegistryError> {
    store
        .set_active(ActiveChange {
            name: name.to_string(),
            target,
            author,
            now,
        })
        .await
        .map_err(|e| match e {
            StoreError::NotFound(what) => RegistryError::NoTarget {
                name: name.to_string(),
                what,
            },
            other => RegistryError::Store(other),
        })
}

/// Stored versions grouped by name (names in order), each group oldest version first.
pub fn by_name(stored: &[StoredComponent]) -> Vec<(&str, Vec<&StoredComponent>)> {
    let mut names: Vec<&str> = stored.iter().map(|c| c.name.as_str()).collect();
    names.sort();
    names.dedup();
    names
        .into_iter()
        .map(|name| {
            let mut versions: Vec<_> = stored.iter().filter(|c| c.name == name).collect();
            versions.sort_by_key(|c| semver::Version::parse(&c.version).ok());
            (name, versions)
        })
        .collect()
}
