//! The policy in force on this host and the environment it judges in. The newest deployed
//! version is taken up with the registry tick, so a deploy anywhere is enforced here within
//! a second; the host that accepts a deploy takes it up before it answers.

use crate::intent::sha256_digest;
use crate::policy::{DocumentError, InForce, PolicyDoc};
use crate::store::{PolicyStore, StoreResult, StoredPolicy};
use std::sync::{Arc, RwLock};

/// The environment a host judges in when its config names none.
pub const DEFAULT_ENVIRONMENT: &str = "development";

/// The policy in force here.
#[derive(Debug)]
pub struct Governance {
    environment: String,
    in_force: RwLock<Arc<InForce>>,
}

impl Default for Governance {
    fn default() -> Self {
        Self::new(DEFAULT_ENVIRONMENT)
    }
}

impl Governance {
    /// Version 0 (everything allowed) in `environment`, until a version is taken up.
    pub fn new(environment: &str) -> Self {
        Self {
            environment: environment.to_string(),
            in_force: RwLock::new(Arc::new(InForce::none())),
        }
    }

    pub fn environment(&self) -> &str {
        &self.environment
    }

    /// The version in force now.
    pub fn in_force(&self) -> Arc<InForce> {
        self.in_force
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Takes up `stored` if it is newer than the version in force; returns whether it was.
    /// A stored document that no longer parses is refused (it was checked when deployed).
    pub fn take(&self, stored: &StoredPolicy) -> Result<bool, Vec<DocumentError>> {
        if stored.version <= self.in_force().version {
            return Ok(false);
        }
        let doc = PolicyDoc::parse(&stored.document)?;
        let mut current = self.in_force.write().unwrap_or_else(|e| e.into_inner());
        if stored.version <= current.version {
            return Ok(false);
        }
        *current = Arc::new(InForce {
            version: stored.version,
            doc: Some(doc),
        });
        Ok(true)
    }

    /// Takes up the newest deployed version; returns it when it is new here.
    pub async fn refresh<S: PolicyStore>(&self, store: &S) -> StoreResult<Option<u32>> {
        let Some(latest) = store.latest_policy().await? else {
            return Ok(None);
        };
        match self.take(&latest) {
            Ok(true) => Ok(Some(latest.version)),
            Ok(false) => Ok(None),
            Err(problems) => {
                tracing::error!(
                    version = latest.version,
                    digest = %sha256_digest(latest.document.as_bytes()),
                    "stored policy version no longer parses, keeping version {}: {problems:?}",
                    self.in_force().version
                );
                Ok(None)
            }
        }
    }
}
