//! What this host can run and under which rules: the component catalog ([`Components`]:
//! the components loaded, resolution of a step's component and its grant), the deployed
//! definitions ([`Deployments`]), the adapter registry's operations ([`registry`]: stage,
//! activate, roll back, verify) and the policy in force ([`Governance`]).
//!
//! The scheduler, the interfaces and the operator read the catalog; the catalog reads the
//! store and the runtime and never the scheduler.

pub mod components;
pub mod definitions;
mod governance;
pub mod registry;

pub use components::{Components, ResolveError, SyncError};
pub use definitions::{DeployError, DeployedDef, Deployments};
pub use governance::{DEFAULT_ENVIRONMENT, Governance};

use crate::intent::Millis;
use crate::store::{BudgetStore, ComponentStore, PolicyStore};

/// One catch-up with the adapter registry and the policy: activations and rollbacks made
/// elsewhere (another host, `docket adapter activate`) and newer policy versions take
/// effect here, and deadlines that draw near are told. A failure is logged and the next
/// catch-up tries again.
pub async fn catch_up<S: ComponentStore + PolicyStore + BudgetStore>(
    components: &Components,
    store: &S,
    now: Millis,
) {
    match components.sync(store).await {
        Ok(changes) => {
            for change in changes {
                tracing::info!("registry: {change}");
            }
        }
        Err(e) => tracing::warn!("catching up with the registry failed: {e}"),
    }
    // A newer policy version: steps an older one blocked are judged again.
    match components.governance().refresh(store).await {
        Ok(Some(version)) => {
            tracing::info!("policy version {version} is in force");
            match store.release_policy_blocks(version, now).await {
                Ok(0) => {}
                Ok(n) => tracing::info!("{n} steps blocked by an older policy are ready again"),
                Err(e) => tracing::warn!("releasing steps an older policy blocked failed: {e}"),
            }
        }
        Ok(None) => {}
        Err(e) => tracing::warn!("reading the policy in force failed: {e}"),
    }
    // Workflows waiting for a person as their deadline draws near are told about, once.
    match store.warn_deadlines(now).await {
        Ok(0) => {}
        Ok(n) => tracing::info!("{n} workflows waiting for review are near their deadline"),
        Err(e) => tracing::warn!("looking for deadlines that draw near failed: {e}"),
    }
}
