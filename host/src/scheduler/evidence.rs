//! Reads the deliveries providers posted: a round claims the kept deliveries under a
//! lease, runs each adapter's `observe` on its own (sandboxed, nothing granted, under the
//! usual limits — a hostile `observe` costs only its own delivery, and never the HTTP path
//! that answered `202`), and hands the reading to the store, which applies it once
//! ([`crate::store::EvidenceStore::read_delivery`]); then judges again the observations
//! held while their step's attempt was under way.

use super::Failpoint;
use crate::catalog::Components;
use crate::clock::Clock;
use crate::intent::Millis;
use crate::runtime::{CallEnv, CallLimits};
use crate::store::{ClaimedDelivery, DeliveryReading, EvidenceStore, ReadDelivery};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// Most deliveries one round claims.
const CLAIM_BATCH: u32 = 16;

/// The time one `observe` call may take.
const OBSERVE_TIMEOUT: Duration = Duration::from_secs(10);

/// The reader of one host.
pub struct EvidenceReader<S> {
    store: S,
    components: Arc<Components>,
    clock: Arc<dyn Clock>,
    owner: String,
    failpoint: Option<Failpoint>,
}

impl<S: EvidenceStore> EvidenceReader<S> {
    pub fn new(
        store: S,
        components: Arc<Components>,
        clock: Arc<dyn Clock>,
        owner: String,
        failpoint: Option<Failpoint>,
    ) -> Self {
        Self {
            store,
            components,
            clock,
            owner,
            failpoint,
        }
    }

    /// One round: reads what is due at `now`.
    pub async fn tick(&self, now: Millis) {
        if let Err(e) = self.round(now).await {
            tracing::warn!("reading providers' deliveries failed: {e}");
        }
    }

    async fn round(&self, now: Millis) -> crate::store::StoreResult<()> {
        if !self.store.evidence_due(now).await? {
            return Ok(());
        }
        let claimed = self
            .store
            .claim_deliveries(&self.owner, now, CLAIM_BATCH)
            .await?;
        for delivery in claimed {
            let reading = self.read(&delivery).await;
            if self.failpoint == Some(Failpoint::EvidenceRead) {
                eprintln!("docket: failpoint evidence-read reached; aborting");
                std::process::abort();
            }
            let (adapter, webhook_id) = (delivery.adapter.clone(), delivery.webhook_id.clone());
            let kept = self
                .store
                .read_delivery(ReadDelivery {
                    delivery,
                    owner: self.owner.clone(),
                    reading,
                    now: self.clock.now_ms(),
                })
                .await?;
            for o in &kept {
                tracing::info!(
                    adapter = %adapter,
                    webhook_id = %webhook_id,
                    observation = %o.observation_id,
                    verdict = o.verdict.as_str(),
                    workflow = o.workflow_id.as_ref().map(|w| w.as_str()).unwrap_or("-"),
                    "provider observation applied"
                );
            }
        }
        let judged = self.store.rejudge_held(self.clock.now_ms()).await?;
        if judged > 0 {
            tracing::info!("{judged} held observations judged now that their attempts ended");
        }
        Ok(())
    }

    /// Runs the adapter's `observe` on one delivery.
    async fn read(&self, delivery: &ClaimedDelivery) -> DeliveryReading {
        let (component, prepared) = match self.components.observer(&delivery.adapter) {
            Ok(found) => found,
            Err(error) => {
                return DeliveryReading::Unreadable {
                    component_version: None,
                    error,
                };
            }
        };
        let version = component.version().to_string();
        let env = CallEnv {
            settings: Arc::new(BTreeMap::new()),
            secrets: Arc::default(),
            clock: self.clock.clone(),
            label: format!("evidence/{}/{}", delivery.adapter, delivery.webhook_id).into(),
        };
        let limits = CallLimits {
            timeout: OBSERVE_TIMEOUT,
        };
        let report = self
            .components
            .runtime()
            .observe(&prepared, env, limits, &delivery.inbound)
            .await;
        match report.outcome {
            Ok(Ok(observations)) => DeliveryReading::Read {
                component_version: version,
                observations,
            },
            Ok(Err(refused)) => DeliveryReading::Unreadable {
                component_version: Some(version),
                error: refused.to_string(),
            },
            Err(failure) => DeliveryReading::Unreadable {
                component_version: Some(version),
                error: format!("the adapter's observe failed: {failure}"),
            },
        }
    }
}
