//! What the host's interfaces — the HTTP API and the console — share: the store, the
//! deployed definitions, the clock, who may call, the limits, the loaded components and the
//! scheduler's signals. Both take an `Arc<Context>`; neither depends on the other.

use crate::access::Auth;
use crate::catalog::{Components, Deployments};
use crate::clock::Clock;
use crate::scheduler::{Progress, Ticks};
use crate::store::{
    AdmissionStore, BudgetStore, ComponentStore, CourseStore, DefinitionStore, NotificationStore,
    OperatorStore, PolicyStore, ReadStore, SessionStore,
};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

/// Every store role the interfaces use, together: what their routers are built over. Each
/// operation and handler names only the roles it uses (`S: ReadStore + OperatorStore`, …).
pub trait ContextStore:
    AdmissionStore
    + ReadStore
    + DefinitionStore
    + OperatorStore
    + crate::store::ApprovalStore
    + crate::store::EvidenceStore
    + CourseStore
    + PolicyStore
    + BudgetStore
    + NotificationStore
    + crate::store::MetricsStore
    + crate::store::RetentionStore
    + ComponentStore
    + SessionStore
    + Clone
    + Send
    + Sync
    + 'static
{
}

impl<S> ContextStore for S where
    S: AdmissionStore
        + ReadStore
        + DefinitionStore
        + OperatorStore
        + crate::store::ApprovalStore
        + crate::store::EvidenceStore
        + CourseStore
        + PolicyStore
        + BudgetStore
        + NotificationStore
        + crate::store::MetricsStore
        + crate::store::RetentionStore
        + ComponentStore
        + SessionStore
        + Clone
        + Send
        + Sync
        + 'static
{
}

/// Size and retention limits of the API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Request bodies over this many bytes are refused with `413` (default 1 MiB).
    pub max_body_bytes: usize,
    /// How long an idempotency key stays reserved after its workflow ends (default 24 h).
    pub key_retention: Duration,
    /// Whether components may be uploaded over HTTP.
    pub api_uploads: bool,
}

impl Limits {
    /// The default body limit: 1 MiB.
    pub const DEFAULT_MAX_BODY_BYTES: usize = 1 << 20;
    /// The default key retention: 24 hours after the workflow ends.
    pub const DEFAULT_KEY_RETENTION: Duration = Duration::from_secs(24 * 60 * 60);
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_body_bytes: Self::DEFAULT_MAX_BODY_BYTES,
            key_retention: Self::DEFAULT_KEY_RETENTION,
            api_uploads: true,
        }
    }
}

/// Everything the handlers use.
pub struct Context<S> {
    pub store: S,
    /// Deployed definitions; new intents run the latest version of their workflow.
    pub deployments: Arc<Deployments<S>>,
    /// The host's clock (advanced by the test control).
    pub clock: Arc<dyn Clock>,
    pub auth: Auth,
    pub limits: Limits,
    /// Whether clients reach the host over TLS (here or at a proxy): cookies are `Secure`.
    pub secure_cookies: bool,
    /// Serve `POST /v1/_test/clock` (never in production).
    pub test_controls: bool,
    /// Notified after an intent is created or the clock moves, so the scheduler looks for
    /// work at once instead of at its next poll.
    pub wake: Arc<Notify>,
    /// Starts an admitted workflow's first step at once when the admission could claim it
    /// (`None`: the scheduler's loop claims it after `wake`).
    pub starter: Option<crate::scheduler::Starter>,
    /// Loaded components, for the contracts operator actions are judged by (`None`: every
    /// action that needs a contract is refused).
    pub components: Option<Arc<Components>>,
    /// The scheduler's completed ticks, for `GET /v1/_test/ticks`.
    pub ticks: Arc<Ticks>,
    /// Advanced whenever an attempt ends (here, or on another host as far as this one
    /// hears of it), for those who wait on an attempt they started.
    pub progress: Arc<Progress>,
    /// This host's counters, for `GET /metrics`.
    pub metrics: Arc<crate::metrics::Metrics>,
    /// The supervised tasks and the stop, for `GET /readyz`.
    pub health: Arc<crate::health::Health>,
    /// Uploads being compiled, by deployer: one at a time each.
    pub uploads: Arc<Uploads>,
    /// Notified after a provider's delivery is kept, so the host reads it at once.
    pub evidence_wake: Arc<Notify>,
}

/// The deployers whose upload is being compiled now. Compiling cannot be stopped partway,
/// so one deployer holds at most one compile (and the runtime's two compile slots are
/// never all one caller's).
#[derive(Debug, Default)]
pub struct Uploads(std::sync::Mutex<std::collections::HashSet<String>>);

/// An upload under way; the deployer may start another once it is dropped.
pub struct UploadSlot {
    uploads: Arc<Uploads>,
    subject: String,
}

impl Uploads {
    /// A slot for `subject`, or `None` while another of its uploads compiles.
    pub fn begin(self: &Arc<Self>, subject: &str) -> Option<UploadSlot> {
        let mut busy = self.0.lock().unwrap_or_else(|e| e.into_inner());
        busy.insert(subject.to_string()).then(|| UploadSlot {
            uploads: self.clone(),
            subject: subject.to_string(),
        })
    }
}

impl Drop for UploadSlot {
    fn drop(&mut self) {
        self.uploads
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.subject);
    }
}

impl<S> Context<S> {
    /// A context with open auth, default limits, no test controls and a fresh `wake`.
    pub fn new(store: S, deployments: Arc<Deployments<S>>, clock: Arc<dyn Clock>) -> Self {
        Self {
            store,
            deployments,
            clock,
            auth: Auth::open(),
            limits: Limits::default(),
            secure_cookies: false,
            test_controls: false,
            wake: Arc::new(Notify::new()),
            starter: None,
            components: None,
            ticks: Arc::default(),
            progress: Arc::default(),
            metrics: Arc::default(),
            health: Arc::default(),
            uploads: Arc::default(),
            evidence_wake: Arc::default(),
        }
    }

    pub fn clock_now(&self) -> crate::intent::Millis {
        self.clock.now_ms()
    }
}

/// How often a long-poll reads the store again without a wake-up: changes made by another
/// host, or by writes that do not move the progress signal, are seen at the latest this late.
const LONG_POLL_RECHECK: Duration = Duration::from_millis(200);

impl<S: crate::store::ReadStore> Context<S> {
    /// The workflow `id` as soon as its revision exceeds `after`, or as it stands when
    /// `wait` ends (`None` if it does not exist). What `?wait=&after=` long-polls share.
    pub async fn workflow_after(
        &self,
        id: &crate::intent::WorkflowId,
        after: u64,
        wait: Duration,
    ) -> crate::store::StoreResult<Option<crate::store::WorkflowRecord>> {
        // Subscribed before the first read, so a change between the read and the wait wakes
        // it; to this workflow's moves only, so a thousand long-polls do not all wake on
        // every step of every workflow.
        let mut signal = self.progress.subscribe_workflow(&id.0);
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let record = self.store.workflow(id).await?;
            match &record {
                Some(r) if r.revision <= after => {}
                _ => return Ok(record),
            }
            tokio::select! {
                _ = tokio::time::sleep_until(deadline) => return Ok(record),
                _ = signal.changed() => {}
                _ = tokio::time::sleep(LONG_POLL_RECHECK) => {}
            }
        }
    }
}

#[cfg(test)]
mod upload_tests {
    use super::*;

    /// One compile per deployer at a time; another deployer is not held up, and the slot
    /// is free again once the first upload is answered.
    #[test]
    fn one_upload_per_deployer_compiles_at_a_time() {
        let uploads = Arc::new(Uploads::default());
        let first = uploads.begin("release-bot").expect("free");
        assert!(uploads.begin("release-bot").is_none());
        assert!(uploads.begin("other-bot").is_some());
        drop(first);
        assert!(uploads.begin("release-bot").is_some());
    }
}
