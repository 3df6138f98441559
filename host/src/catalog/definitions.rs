//! Deployed definitions as this host sees them: parsed once per (name, version), deployed
//! from files, and never reinterpreted — a running workflow always reads its own version.

use crate::intent::Millis;
use crate::store::{DefinitionStore, DeployOutcome, NewDefinition, StoreError};
use crate::workflow::{CheckEnv, Diagnostics, InputValidator, WorkflowDef};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// A parsed definition version with its compiled input schema.
pub struct DeployedDef {
    pub def: WorkflowDef,
    pub validator: InputValidator,
}

/// Why a definition could not be deployed or read.
#[derive(Debug, thiserror::Error)]
pub enum DeployError {
    /// The file is invalid; the diagnostics point at file:line:col.
    #[error("{0}")]
    Invalid(Diagnostics),
    /// The store refused it (e.g. a changed file under a deployed version) or failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A stored definition no longer parses (written by an incompatible docket).
    #[error("stored definition {name} v{version} cannot be read: {reason}")]
    Unreadable {
        name: String,
        version: u32,
        reason: String,
    },
}

/// Parsed definitions by (name, version), loaded from the store on first use.
pub struct Deployments<S> {
    store: S,
    cache: Mutex<HashMap<(String, u32), Arc<DeployedDef>>>,
    /// The newest version seen per name, answered from memory: an admission built on a
    /// version since superseded is refused by the store ([`AdmitOutcome::Outdated`]), and
    /// its caller then calls [`Self::forget_newest`].
    ///
    /// [`AdmitOutcome::Outdated`]: crate::store::AdmitOutcome::Outdated
    newest: Mutex<HashMap<String, Arc<DeployedDef>>>,
}

impl<S: DefinitionStore> Deployments<S> {
    pub fn new(store: S) -> Self {
        Self {
            store,
            cache: Mutex::default(),
            newest: Mutex::default(),
        }
    }

    /// Validates `source` against `env` and stores it as a deployed version.
    pub async fn deploy(
        &self,
        file_name: &str,
        source: &str,
        env: &(dyn CheckEnv + Sync),
        now: Millis,
    ) -> Result<(Arc<DeployedDef>, DeployOutcome), DeployError> {
        let def = crate::workflow::check(file_name, source, env).map_err(DeployError::Invalid)?;
        let outcome = self
            .store
            .deploy_definition(NewDefinition {
                name: def.name.to_string(),
                version: def.version,
                digest: def.source_digest.clone(),
                source: source.to_string(),
                deployed_at: now,
            })
            .await?;
        let deployed = self.remember(def, file_name)?;
        self.forget_newest(deployed.def.name.as_str());
        Ok((deployed, outcome))
    }

    /// One version, parsed from the store.
    pub async fn get(
        &self,
        name: &str,
        version: u32,
    ) -> Result<Option<Arc<DeployedDef>>, DeployError> {
        if let Some(found) = self.cache.lock().unwrap().get(&(name.to_string(), version)) {
            return Ok(Some(found.clone()));
        }
        let Some(stored) = self.store.definition(name, version).await? else {
            return Ok(None);
        };
        self.parse_stored(stored).map(Some)
    }

    /// The newest deployed version of every definition.
    pub async fn all_latest(&self) -> Result<Vec<Arc<DeployedDef>>, DeployError> {
        let mut all = Vec::new();
        for stored in self.store.latest_definitions().await? {
            let cached = self
                .cache
                .lock()
                .unwrap()
                .get(&(stored.name.clone(), stored.version))
                .cloned();
            all.push(match cached {
                Some(found) => found,
                None => self.parse_stored(stored)?,
            });
        }
        Ok(all)
    }

    /// The newest deployed version of `name` — what a new intent runs: the one last read,
    /// until an admission finds it outdated.
    pub async fn latest(&self, name: &str) -> Result<Option<Arc<DeployedDef>>, DeployError> {
        if let Some(found) = self.newest.lock().unwrap().get(name) {
            return Ok(Some(found.clone()));
        }
        let Some(stored) = self.store.latest_definition(name).await? else {
            return Ok(None);
        };
        let cached = self
            .cache
            .lock()
            .unwrap()
            .get(&(stored.name.clone(), stored.version))
            .cloned();
        let found = match cached {
            Some(found) => found,
            None => self.parse_stored(stored)?,
        };
        let mut newest = self.newest.lock().unwrap();
        // A concurrent read may have remembered a newer version meanwhile.
        if newest
            .get(name)
            .is_none_or(|n| n.def.version < found.def.version)
        {
            newest.insert(name.to_string(), found.clone());
        }
        drop(newest);
        Ok(Some(found))
    }

    /// Forgets the newest version remembered for `name`: the next [`Self::latest`] reads it.
    pub fn forget_newest(&self, name: &str) {
        self.newest.lock().unwrap().remove(name);
    }

    fn parse_stored(
        &self,
        stored: crate::store::StoredDefinition,
    ) -> Result<Arc<DeployedDef>, DeployError> {
        let file = format!("<stored {} v{}>", stored.name, stored.version);
        let def =
            crate::workflow::parse(&file, &stored.source).map_err(|d| DeployError::Unreadable {
                name: stored.name.clone(),
                version: stored.version,
                reason: d.to_string(),
            })?;
        self.remember(def, &file)
    }

    fn remember(&self, def: WorkflowDef, file: &str) -> Result<Arc<DeployedDef>, DeployError> {
        let validator =
            InputValidator::new(&def.input_schema).map_err(|e| DeployError::Unreadable {
                name: def.name.to_string(),
                version: def.version,
                reason: format!("{file}: input schema: {e}"),
            })?;
        let key = (def.name.to_string(), def.version);
        let deployed = Arc::new(DeployedDef { def, validator });
        self.cache.lock().unwrap().insert(key, deployed.clone());
        Ok(deployed)
    }
}
