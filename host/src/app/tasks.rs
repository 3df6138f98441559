//! What a host runs beside its API, and how: the scheduler's loop, the listeners, and the
//! periodic rounds — registry catch-up, the notification outbox, the consistency check and
//! retention. Each round is a tick over what it needs and `now`, run by
//! [`Supervisor::every`] and counted in the host's ticks, so a test runs one round at a
//! time on a clock it holds instead of waiting for a loop.

use super::Supervisor;
use super::listener::{self, Deadlines, Incoming};
use crate::catalog::Components;
use crate::clock::Clock;
use crate::intent::{Millis, WorkflowId};
use crate::metrics::Metrics;
use crate::scheduler::evidence::EvidenceReader;
use crate::scheduler::notifier::Notifier;
use crate::scheduler::{Scheduler, Tick};
use crate::store::{
    BudgetStore, ComponentStore, DefinitionStore, ExecutorStore, MetricsStore, NotificationStore,
    PolicyStore, ReadStore, RetentionStore, StoreResult,
};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// How often a host catches up with the registry: the bound within which every host picks
/// up an activation or rollback made elsewhere (plus, for a version new to the host, the
/// time to compile it once).
pub const REGISTRY_POLL: Duration = Duration::from_secs(1);

/// How often the host looks for ended workflows past the retention.
const RETENTION_POLL: Duration = Duration::from_secs(2);

/// Most workflows one purge deletes (one write).
const PURGE_BATCH: u32 = 100;

/// The pause between two workflows of the host's own consistency check.
const CHECK_PACE: Duration = Duration::from_millis(5);

/// The scheduler's loop; with execution paused, a task that only waits for the stop (a
/// scheduler that ended at once would look dead to the supervisor).
pub(super) fn scheduler<S>(tasks: &mut Supervisor, scheduler: Arc<Scheduler<S>>, paused: bool)
where
    S: ExecutorStore + DefinitionStore + ComponentStore + Clone + 'static,
{
    let stop = tasks.stopper();
    if paused {
        tracing::warn!(
            "step execution is paused (--pause-execution): intents are admitted but no step runs"
        );
        tasks.spawn("scheduler", async move {
            stop.cancelled().await;
            Ok(())
        });
    } else {
        tasks.spawn("scheduler", async move {
            scheduler.run(stop).await;
            Ok(())
        });
    }
}

/// Serves `router` on `incoming` under `name` until the stop, then finishes the requests
/// under way.
pub(super) fn server(
    tasks: &mut Supervisor,
    name: &'static str,
    incoming: Incoming,
    router: axum::Router,
    deadlines: Deadlines,
) {
    let stop = tasks.stopper();
    tasks.spawn(name, async move {
        listener::serve(incoming, router, deadlines, stop).await;
        Ok(())
    });
}

/// Registry changes made elsewhere (another host, `docket adapter activate`) reach this
/// host within [`REGISTRY_POLL`]: [`crate::catalog::catch_up`] is its tick.
pub(super) fn registry<S>(
    tasks: &mut Supervisor,
    components: Arc<Components>,
    store: S,
    clock: Arc<dyn Clock>,
) where
    S: ComponentStore + PolicyStore + BudgetStore + crate::store::ApprovalStore + Clone + 'static,
{
    tasks.every("registry", REGISTRY_POLL, Tick::Registry, move || {
        let (components, store, now) = (components.clone(), store.clone(), clock.now_ms());
        async move {
            crate::catalog::catch_up(&components, &store, now).await;
            approvals_due(&store, now).await;
        }
    });
}

/// Approvals nobody decided in time fail their step, as a rejection would, and those with a
/// fifth of their wait left are told, once: run with the registry's round, whose pace (a
/// second) is the precision an approval's expiry needs.
async fn approvals_due<S: crate::store::ApprovalStore>(store: &S, now: Millis) {
    match store.expire_approvals(now).await {
        Ok((expired, warned)) => {
            if expired > 0 {
                tracing::info!("{expired} approvals expired before anyone decided them");
            }
            if warned > 0 {
                tracing::info!("{warned} approvals have a fifth of their time left");
            }
        }
        Err(e) => tracing::warn!("expiring approvals failed: {e}"),
    }
}

/// How often a host looks for providers' deliveries nobody read (one it received itself
/// wakes the round at once).
const EVIDENCE_POLL: Duration = Duration::from_millis(500);

/// Providers' deliveries are read by every host: each is claimed under a lease, so it is
/// read by one host and applied once. [`EvidenceReader::tick`] is its tick.
pub(super) fn evidence<S>(
    tasks: &mut Supervisor,
    reader: EvidenceReader<S>,
    clock: Arc<dyn Clock>,
    wake: Arc<tokio::sync::Notify>,
) where
    S: crate::store::EvidenceStore + 'static,
{
    let reader = Arc::new(reader);
    tasks.every_or_woken("evidence", EVIDENCE_POLL, Tick::Evidence, wake, move || {
        let (reader, now) = (reader.clone(), clock.now_ms());
        async move { reader.tick(now).await }
    });
}

/// Notifications are delivered after their transitions commit, by every host: rows are
/// claimed under a lease, so each goes out once. [`Notifier::tick`] is its tick.
pub(super) fn notifier<S>(tasks: &mut Supervisor, notifier: Notifier<S>, clock: Arc<dyn Clock>)
where
    S: NotificationStore + ReadStore + Clone + 'static,
{
    let period = notifier.poll;
    let notifier = Arc::new(notifier);
    tasks.every("notifier", period, Tick::Notifier, move || {
        let (notifier, now) = (notifier.clone(), clock.now_ms());
        async move { notifier.tick(now).await }
    });
}

/// The host's own consistency check, every `interval`: [`check_tick`]. A sweep is long (it
/// paces itself), reads only and is safe to drop, so a stop cuts it short.
pub(super) fn checker<S>(
    tasks: &mut Supervisor,
    store: S,
    metrics: Arc<Metrics>,
    interval: Duration,
) where
    S: ReadStore + DefinitionStore + MetricsStore + Clone + 'static,
{
    let stop = tasks.stopper();
    tasks.every("checker", interval, Tick::Checker, move || {
        let (store, metrics, stop) = (store.clone(), metrics.clone(), stop.clone());
        async move {
            tokio::select! {
                _ = stop.cancelled() => {}
                _ = check_tick(&store, &metrics, CHECK_PACE) => {}
            }
        }
    });
}

/// Ended workflows go once past `retention` (and their key's): [`retention_tick`], every
/// [`RETENTION_POLL`].
pub(super) fn retention<S>(
    tasks: &mut Supervisor,
    store: S,
    clock: Arc<dyn Clock>,
    retention: Duration,
) where
    S: RetentionStore + Clone + 'static,
{
    tasks.every("retention", RETENTION_POLL, Tick::Retention, move || {
        let (store, now) = (store.clone(), clock.now_ms());
        async move {
            retention_tick(&store, retention, now).await;
        }
    });
}

/// What one run of the consistency check found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    /// The workflows checked.
    pub workflows: u64,
    /// Violations by invariant; every invariant is named, found or not, so a gauge that
    /// counted one goes back to zero once it is repaired.
    pub found: BTreeMap<&'static str, u64>,
}

/// One run of the host's own consistency check: a light walk over every workflow, `pace`
/// apart; what it finds is `docket_consistency_violations` in `metrics`. A failure is
/// logged, leaves the gauge as it was, and the next run tries again.
pub async fn check_tick<S>(store: &S, metrics: &Metrics, pace: Duration) -> StoreResult<Checked>
where
    S: ReadStore + DefinitionStore + MetricsStore,
{
    let mut found: BTreeMap<&'static str, u64> = crate::check::Invariant::ALL
        .iter()
        .map(|i| (i.as_str(), 0))
        .collect();
    let swept = crate::check::sweep(store, pace, |_, violations| {
        for v in violations {
            *found.entry(v.invariant.as_str()).or_default() += 1;
        }
    })
    .await;
    let workflows = match swept {
        Ok(n) => n,
        Err(e) => {
            tracing::warn!("the consistency check stopped: {e}");
            return Err(e);
        }
    };
    let total: u64 = found.values().sum();
    if total > 0 {
        tracing::warn!(
            "the consistency check of {workflows} workflows found {total} violations; `docket check` lists them"
        );
    }
    metrics.violations(found.clone());
    Ok(Checked { workflows, found })
}

/// One look for ended workflows past `retention` at `now`: purges them a bounded batch per
/// write, so the writer is never held long, until none is left; returns the ids purged. A
/// failure is logged and ends the look; the next one tries again.
pub async fn retention_tick<S: RetentionStore>(
    store: &S,
    retention: Duration,
    now: Millis,
) -> Vec<WorkflowId> {
    let before = now.saturating_sub(retention.as_millis() as u64);
    let mut all = Vec::new();
    loop {
        match store.purge_ended(before, now, PURGE_BATCH).await {
            Ok(purged) if purged.is_empty() => break,
            Ok(purged) => {
                tracing::info!("purged {} ended workflows past the retention", purged.len());
                all.extend(purged);
                tokio::task::yield_now().await;
            }
            Err(e) => {
                tracing::warn!("purging ended workflows failed: {e}");
                break;
            }
        }
    }
    all
}

#[cfg(test)]
mod tests;
