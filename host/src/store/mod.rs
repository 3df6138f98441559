//! Durable state: the only module that touches the database drivers.
//!
//! Two backends implement every trait with the same meaning: [`sqlite`] (one file, the
//! embedded default) and [`postgres`] (many hosts sharing one database).
//!
//! The store is split by who uses it — [`DefinitionStore`] (deploys), [`AdmissionStore`]
//! (the API's writes), [`ReadStore`] (projections), [`ExecutorStore`] (the scheduler),
//! [`OperatorStore`] (operator actions), [`CourseStore`] (cancellations and revisions),
//! [`BudgetStore`] (extensions and deadline warnings), [`PolicyStore`] (policy versions),
//! [`ComponentStore`] (component bytes and the registry), [`NotificationStore`] (the
//! outbox), [`MetricsStore`] (tallies, sweeps, the consistency check's repair),
//! [`RetentionStore`] (ended workflows past their retention) and [`SessionStore`] (console
//! sessions) — and both backends implement the same traits, so no caller knows which one it
//! has. The store never reads a clock: every method that needs "now" takes it in its
//! request. Every write after a claim is fenced by the lease token; a lost lease is
//! [`StoreError::LeaseLost`], never a silent overwrite.
//!
//! A transaction is written once, by concept (`actions`, `budgets`, `course`, `policies`,
//! `sessions`, …), over [`tx::Tx`]: it reads facts, decides in pure code (the domain's
//! modules and `plan`), and writes through statements kept beside it or typed writes each
//! backend applies ([`tx::Write`]); the reads whose statements differ only in dialect are
//! written once over sqlx (`reads`), and `rows` maps every driver's rows. What each backend
//! still carries on its own is its connection set-up, its statements' dialect and the
//! executor's hot path (docs/architecture.md, "The store"). A failure says whether
//! repeating it is safe ([`Retry`]).

mod actions;
mod admission;
mod approvals;
mod batches;
mod budgets;
mod claims;
mod components;
mod course;
mod definitions;
mod evidence;
mod executor;
mod fairness;
mod gates;
mod late;
mod leases;
mod metrics;
mod notifications;
mod plan;
mod policies;
pub mod postgres;
mod reads;
mod records;
mod rows;
mod sessions;
mod settings;
pub mod sqlite;
mod tx;

pub use components::GRANDFATHERED;
pub use evidence::DELIVERY_LEASE_MS;
pub use fairness::FairShare;
pub use records::*;

use crate::intent::{Millis, WorkflowId};
use std::future::Future;

/// Why a store operation failed, by what the caller does next.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The caller's lease on the step was taken over or released: stop working on it.
    #[error("the lease on step `{step}` of {workflow_id} is no longer held by this worker")]
    LeaseLost {
        workflow_id: WorkflowId,
        step: String,
    },
    /// The workflow has a cancellation, so no new effect may start: checkpoint 3 of a
    /// step's attempt is fenced (a compensation's is not).
    #[error("workflow {workflow_id} has a cancellation: no new effect may start")]
    Cancelled { workflow_id: WorkflowId },
    /// The mapped input an attempt would send differs from the one the step's request was
    /// first recorded with (checkpoint 3): an adapter never sends another input under the
    /// same identity (docs/architecture.md, invariant 3).
    #[error(
        "the input this attempt would send ({attempt}) differs from the one recorded for the step's request ({step}); another input is never sent under the same identity"
    )]
    InputChanged { step: String, attempt: String },
    /// The named thing does not exist.
    #[error("{0} not found")]
    NotFound(String),
    /// A definition version already exists with other content.
    #[error(
        "workflow `{name}` version {version} is already deployed with digest {existing}, and this file has digest {new}; a deployed version never changes: give the changed definition a new `version`"
    )]
    DefinitionChanged {
        name: String,
        version: u32,
        existing: String,
        new: String,
    },
    /// The database requires a passing `docket adapter verify` verdict before a version
    /// becomes active, and this one has none: verify it first.
    #[error(
        "`{name}@{version}` has no passing `docket adapter verify` verdict, and this database runs only verified versions (require_verified, the default with environment = \"production\"); run `docket adapter verify` against the database first"
    )]
    Unverified { name: String, version: String },
    /// The host is configured for another environment than the one the database records:
    /// a copied database pointed at another provider would reuse live idempotency keys.
    #[error(
        "this database serves environment `{recorded}`, and this host is configured for `{configured}`: a copy of a database pointed at another environment's provider would reuse its live idempotency keys. Set environment = \"{recorded}\" in docket.toml, or start with --adopt-environment to move the database to `{configured}` (recorded on the timeline of every unfinished workflow; keys already derived stay as they are)"
    )]
    EnvironmentChanged {
        recorded: String,
        configured: String,
    },
    /// Stored data could not be read back; a bug or manual tampering.
    #[error("stored data is inconsistent: {0}")]
    Corrupt(String),
    /// The database failed (I/O, busy, connection lost, a refused statement); `retry` says
    /// what is known of the write and so whether repeating it is safe.
    #[error("database error ({}): {cause}", retry.describe())]
    Backend { retry: Retry, cause: String },
}

/// What a failed store operation left behind, and so what its caller may do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// Nothing was written: the operation may be repeated as it is.
    Safe,
    /// The write may or may not have committed (its acknowledgement was lost): read what
    /// is stored, or repeat an idempotent request, before assuming either way.
    Unknown,
    /// Repeating cannot help (a refused statement, a broken setup): the cause must be fixed.
    Never,
}

impl Retry {
    fn describe(self) -> &'static str {
        match self {
            Retry::Safe => "nothing was written; safe to retry",
            Retry::Unknown => "the write may have been committed",
            Retry::Never => "retrying will not help",
        }
    }
}

impl StoreError {
    /// A failure that left nothing written.
    pub fn safe(cause: impl Into<String>) -> Self {
        StoreError::Backend {
            retry: Retry::Safe,
            cause: cause.into(),
        }
    }

    /// A failure after which the write may have committed.
    pub fn unknown(cause: impl Into<String>) -> Self {
        StoreError::Backend {
            retry: Retry::Unknown,
            cause: cause.into(),
        }
    }

    /// A failure that repeating will not cure.
    pub fn never(cause: impl Into<String>) -> Self {
        StoreError::Backend {
            retry: Retry::Never,
            cause: cause.into(),
        }
    }

    /// Whether the database may answer differently in a moment (a backend failure that is
    /// not [`Retry::Never`]).
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            StoreError::Backend {
                retry: Retry::Safe | Retry::Unknown,
                ..
            }
        )
    }
}

impl From<sqlx::Error> for StoreError {
    /// Outside a commit: a statement that failed changed nothing (the transaction is rolled
    /// back), so only the kind of failure decides whether repeating may help.
    fn from(e: sqlx::Error) -> Self {
        use sqlx::Error as E;
        match e {
            E::RowNotFound => StoreError::NotFound("row".into()),
            E::ColumnDecode { .. }
            | E::Decode(_)
            | E::ColumnNotFound(_)
            | E::ColumnIndexOutOfBounds { .. }
            | E::TypeNotFound { .. } => StoreError::Corrupt(e.to_string()),
            E::Io(_)
            | E::Tls(_)
            | E::PoolTimedOut
            | E::PoolClosed
            | E::WorkerCrashed
            | E::Protocol(_) => StoreError::safe(e.to_string()),
            E::Database(ref db) => {
                // Class 08 (connection), 40 (rolled back: serialization, deadlock), 53
                // (insufficient resources), 57P (operator intervention, e.g. a restart),
                // SQLite BUSY (5) and LOCKED (6): the database may answer in a moment.
                let transient = db.code().is_some_and(|c| {
                    c.starts_with("08")
                        || c.starts_with("40")
                        || c.starts_with("53")
                        || c.starts_with("57P")
                        || c == "5"
                        || c == "6"
                });
                if transient {
                    StoreError::safe(e.to_string())
                } else {
                    StoreError::never(e.to_string())
                }
            }
            other => StoreError::never(other.to_string()),
        }
    }
}

/// A database URL fit for a log line: the password replaced by `***`.
pub fn without_password(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &url[scheme + 3..at];
            match userinfo.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme + 3], &url[at..]),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    }
}

/// Results of store operations.
pub type StoreResult<T> = Result<T, StoreError>;

/// Deployed workflow definitions.
pub trait DefinitionStore: Send + Sync {
    /// Stores a definition version; the same content again is a no-op, other content under
    /// an existing version is [`StoreError::DefinitionChanged`].
    fn deploy_definition(
        &self,
        def: NewDefinition,
    ) -> impl Future<Output = StoreResult<DeployOutcome>> + Send;
    /// One stored version.
    fn definition(
        &self,
        name: &str,
        version: u32,
    ) -> impl Future<Output = StoreResult<Option<StoredDefinition>>> + Send;
    /// The highest deployed version of `name` (new intents use it).
    fn latest_definition(
        &self,
        name: &str,
    ) -> impl Future<Output = StoreResult<Option<StoredDefinition>>> + Send;
    /// The highest deployed version of every definition, by name.
    fn latest_definitions(&self)
    -> impl Future<Output = StoreResult<Vec<StoredDefinition>>> + Send;
}

/// Component bytes, content-addressed, so that any host on the database can run any step,
/// and the registry of which version is active.
pub trait ComponentStore: Send + Sync {
    /// Every adapter with attempts in flight or a pause on record, as of `now`.
    fn adapter_states(
        &self,
        now: Millis,
    ) -> impl Future<Output = StoreResult<Vec<AdapterState>>> + Send;
    /// Keeps a component's bytes; the same digest again is a no-op. Returns whether it was
    /// new.
    fn store_component(
        &self,
        component: NewComponent,
    ) -> impl Future<Output = StoreResult<bool>> + Send;
    /// Every stored component, oldest first, without bytes.
    fn stored_components(&self) -> impl Future<Output = StoreResult<Vec<StoredComponent>>> + Send;
    /// The bytes stored under `digest`.
    fn component_bytes(
        &self,
        digest: &str,
    ) -> impl Future<Output = StoreResult<Option<Vec<u8>>>> + Send;
    /// Changes which version of a component new attempts use, and records the change with
    /// its author. [`StoreError::NotFound`] names what is missing: an unknown digest (or
    /// one stored under another name), or no earlier version to roll back to.
    fn set_active(
        &self,
        change: ActiveChange,
    ) -> impl Future<Output = StoreResult<ActiveOutcome>> + Send;
    /// The active version of every component name.
    fn active_components(&self) -> impl Future<Output = StoreResult<Vec<ActiveComponent>>> + Send;
    /// Records the outcome of verifying a component's claims.
    fn record_verification(
        &self,
        verification: Verification,
    ) -> impl Future<Output = StoreResult<()>> + Send;
    /// The latest verification of each verified digest.
    fn verifications(&self) -> impl Future<Output = StoreResult<Vec<Verification>>> + Send;
    /// Records whether making a version active needs its latest verdict to have passed
    /// (for every path that writes the registry); when this turns it on, each active
    /// version never verified is recorded `grandfathered` (returned): it keeps running,
    /// never counted as verified.
    fn require_verified(
        &self,
        on: bool,
        author: String,
        now: Millis,
    ) -> impl Future<Output = StoreResult<Vec<ActiveComponent>>> + Send;
    /// The registry's history, newest first, optionally of one name.
    fn component_events(
        &self,
        name: Option<&str>,
        limit: u32,
    ) -> impl Future<Output = StoreResult<Vec<ComponentEvent>>> + Send;
}

/// What a starting host found of the database's environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnvironmentRecord {
    /// None was recorded: the host's is, from now on.
    First,
    /// The host's is the recorded one.
    Same,
    /// The host was told to adopt its own over `from`; `workflows` unfinished workflows
    /// were told on their timelines.
    Adopted { from: String, workflows: usize },
}

/// Settings of the database itself, shared by every host on it.
pub trait SettingsStore: Send + Sync {
    /// Records `configured` as the database's environment at a host's start: the first
    /// host's is kept; another is refused ([`StoreError::EnvironmentChanged`]) unless
    /// `adopt`, which moves the database to it and tells every unfinished workflow.
    /// Workflows admitted from then on derive their idempotency keys in it.
    fn record_environment(
        &self,
        configured: String,
        adopt: bool,
        host: String,
        now: Millis,
    ) -> impl Future<Output = StoreResult<EnvironmentRecord>> + Send;
    /// The environment the database records, if any host has started on it.
    fn environment(&self) -> impl Future<Output = StoreResult<Option<String>>> + Send;
}

/// Operator sessions of the console, shared by every host on the database.
pub trait SessionStore: Send + Sync {
    /// Records a new session, and forgets every session expired by its start.
    fn start_session(
        &self,
        session: ConsoleSession,
    ) -> impl Future<Output = StoreResult<()>> + Send;
    /// The session stored under `id_digest`, unless it expired by `now`.
    fn session(
        &self,
        id_digest: &str,
        now: Millis,
    ) -> impl Future<Output = StoreResult<Option<ConsoleSession>>> + Send;
    /// Ends the session stored under `id_digest`, and forgets every session expired by
    /// `now`.
    fn end_session(
        &self,
        id_digest: &str,
        now: Millis,
    ) -> impl Future<Output = StoreResult<()>> + Send;
}

/// The API's writes: admitting intents.
pub trait AdmissionStore: Send + Sync {
    /// Whether a submission should read its key before it prepares a new intent: where
    /// admissions queue behind one writer, a known key answers at once from a read; where
    /// the admission itself finds a known key as cheaply, that read is one more round trip
    /// per new intent (and is made only when a new intent would be refused).
    fn key_read_first(&self) -> bool {
        true
    }
    /// The live (not expired) key in scope, if any.
    fn lookup_key(
        &self,
        scope: &KeyScope,
        now: Millis,
    ) -> impl Future<Output = StoreResult<Option<KeyRecord>>> + Send;
    /// Creates the workflow, its steps and its first events in one transaction — unless the
    /// key became known meanwhile, which yields the replay or conflict answer instead, or
    /// the intent's definition version is no longer the newest deployed
    /// ([`AdmitOutcome::Outdated`]).
    fn admit(
        &self,
        request: AdmitRequest,
    ) -> impl Future<Output = StoreResult<AdmitOutcome>> + Send;
    /// [`admit`](Self::admit) and, when it creates the workflow and the store has nothing
    /// else to write at that moment, a claim of one of its first steps (under the lease
    /// `next` describes) in the same commit, for the caller to start at once (see
    /// [`ExecutorStore::finish_and_claim`]). By default a store always declines.
    fn admit_and_claim(
        &self,
        request: AdmitRequest,
        next: ClaimRequest,
    ) -> impl Future<Output = StoreResult<(AdmitOutcome, Option<Claimed>)>> + Send {
        let _ = next;
        async move { Ok((self.admit(request).await?, None)) }
    }
}

/// Projections for the API and the console.
pub trait ReadStore: Send + Sync {
    fn workflow(
        &self,
        id: &WorkflowId,
    ) -> impl Future<Output = StoreResult<Option<WorkflowRecord>>> + Send;
    fn steps(&self, id: &WorkflowId) -> impl Future<Output = StoreResult<Vec<StepRecord>>> + Send;
    fn receipts(
        &self,
        id: &WorkflowId,
    ) -> impl Future<Output = StoreResult<Vec<crate::intent::Receipt>>> + Send;
    /// Timeline entries with `seq > after`, oldest first.
    fn timeline(
        &self,
        id: &WorkflowId,
        after: u64,
        limit: u32,
    ) -> impl Future<Output = StoreResult<Vec<crate::intent::TimelineEvent>>> + Send;
    /// The latest `limit` timeline entries with `seq < before` (any, without `before`),
    /// only those of `step` when one is named; oldest first. How a long story is shown:
    /// its last page, then pages further back.
    fn timeline_latest(
        &self,
        id: &WorkflowId,
        step: Option<&str>,
        before: Option<u64>,
        limit: u32,
    ) -> impl Future<Output = StoreResult<Vec<crate::intent::TimelineEvent>>> + Send;
    /// Attempts of one step with `number > after`, oldest first.
    fn attempts(
        &self,
        id: &WorkflowId,
        step: &str,
        after: u32,
        limit: u32,
    ) -> impl Future<Output = StoreResult<Vec<AttemptRecord>>> + Send;
    /// Workflows newest first, filtered.
    fn list_workflows(
        &self,
        filter: &WorkflowFilter,
    ) -> impl Future<Output = StoreResult<Vec<WorkflowRecord>>> + Send;
}

/// The scheduler's operations. Every write but `claim` is fenced by the lease token.
pub trait ExecutorStore: Send + Sync {
    /// Claims up to `limit` steps that are ready at `now`: each gets a lease and a new
    /// attempt (checkpoint 1), in one commit, and comes with what it needs to run (the
    /// workflow input and the receipts so far). With ready work of several subjects, the
    /// claims are shared between them by weight ([`FairShare`]), the longest-waiting step
    /// of each first.
    fn claim(
        &self,
        request: ClaimRequest,
    ) -> impl Future<Output = StoreResult<Vec<Claimed>>> + Send;
    /// Sets the subjects' weights in this host's share of claims (`[fairness] weights`);
    /// a subject not named weighs 1.
    fn share_claims(&self, weights: std::collections::BTreeMap<String, u32>);
    /// Extends a lease the caller still holds.
    fn renew(&self, request: RenewRequest) -> impl Future<Output = StoreResult<()>> + Send;
    /// Records that an attempt reached a checkpoint (2–5), with what is known so far.
    fn checkpoint(
        &self,
        request: CheckpointRequest,
    ) -> impl Future<Output = StoreResult<()>> + Send;
    /// Ends an attempt: outcome, the step's next state, the receipt if any; releases
    /// dependents and recomputes the workflow's state, in one commit.
    fn finish(
        &self,
        request: FinishRequest,
    ) -> impl Future<Output = StoreResult<FinishOutcome>> + Send;
    /// [`finish`](Self::finish) and, when the store has nothing else to write at that
    /// moment, a claim of one dependent the finish released (under the lease `next`
    /// describes) in the same commit, for the finishing worker to run next: an unloaded
    /// workflow moves one step per commit without a trip through the scheduler's loop.
    /// Under load the store declines (`None`) and the loop claims released steps in
    /// batches, which cost less per step. By default a store always declines.
    fn finish_and_claim(
        &self,
        request: FinishRequest,
        next: ClaimRequest,
    ) -> impl Future<Output = StoreResult<(FinishOutcome, Option<Claimed>)>> + Send {
        let _ = next;
        async move { Ok((self.finish(request).await?, None)) }
    }
    /// Records an approval step's question under the asking attempt's lease: the step
    /// waits in `awaiting_approval`, its lease released, the consequence kept (an earlier
    /// open question of the step superseded), the attempt given back to the budget;
    /// [`StoreError::LeaseLost`] if the lease is gone.
    fn ask_approval(&self, request: AskApproval) -> impl Future<Output = StoreResult<()>> + Send;
    /// Writes a claimed batch step's items as rows of their own under its lease, the
    /// first `max_parallel` ready; the step runs on, without a lease, until its items say
    /// how it ends. Returns the items released; [`StoreError::LeaseLost`] if the lease is
    /// gone.
    fn expand_batch(
        &self,
        request: ExpandBatch,
    ) -> impl Future<Output = StoreResult<Vec<String>>> + Send;
    /// Adds what an attempt learned after losing its lease (a late result) to its evidence:
    /// fills only what the attempt has not recorded and appends the events; the step is
    /// untouched, so a late observation never reverses what recovery concluded meanwhile.
    fn late_evidence(&self, evidence: LateEvidence)
    -> impl Future<Output = StoreResult<()>> + Send;
    /// Ends every lease `owner` holds, at once (graceful shutdown): each is expired as of
    /// `now`, so recovery — on this host after a restart, or on another — decides it by its
    /// last checkpoint without waiting for it to run out. Returns how many were ended.
    fn release_leases(
        &self,
        owner: &str,
        now: Millis,
    ) -> impl Future<Output = StoreResult<u64>> + Send;
    /// Steps whose lease expired before `now` (owner crashed or lost contact).
    fn expired_leases(
        &self,
        now: Millis,
        limit: u32,
    ) -> impl Future<Output = StoreResult<Vec<ExpiredLease>>> + Send;
    /// The earliest time after `now` at which something becomes due without anyone
    /// writing: a step waiting for its retry time, or a lease running out. An idle
    /// scheduler sleeps until then instead of polling.
    fn next_due(&self, now: Millis) -> impl Future<Output = StoreResult<Option<Millis>>> + Send;
    /// Pauses every host's claims of an adapter until `pause.until` (its provider answered
    /// with a rate limit); a pause already longer stays as it is.
    fn pause_adapter(&self, pause: AdapterPause) -> impl Future<Output = StoreResult<()>> + Send;
    /// Records that `owner` decided every lease that expired before `before` (a complete
    /// recovery sweep); only ever moves forward.
    fn record_sweep(
        &self,
        owner: &str,
        before: Millis,
    ) -> impl Future<Output = StoreResult<()>> + Send;
    /// Wakes `wake` whenever another host may have made work ready (new intents, released
    /// dependents, retries, operator actions, ended leases). Returns `false` when the
    /// backend has no other writers to hear from (SQLite: one host per file), and then does
    /// nothing.
    fn watch(
        &self,
        wake: std::sync::Arc<tokio::sync::Notify>,
    ) -> impl Future<Output = StoreResult<bool>> + Send;
}

/// Changes of a workflow's course, idempotent per key.
pub trait CourseStore: Send + Sync {
    /// Cancels a workflow under a key, in one transaction: the key is looked up first; a
    /// workflow that already has a cancellation answers with it; otherwise the refusal, or
    /// the cancellation recorded and the workflow's course settled
    /// ([`crate::course::settle`]). Every answer is stored under the key.
    fn cancel(
        &self,
        request: CancelRequest,
    ) -> impl Future<Output = StoreResult<CancelAnswer>> + Send;
    /// The workflow's cancellation, if it has one.
    fn cancellation(
        &self,
        id: &WorkflowId,
    ) -> impl Future<Output = StoreResult<Option<CancellationRecord>>> + Send;
    /// Corrects a workflow's input under a key, in one transaction, if the workflow is as
    /// the plan saw it ([`ReviseAnswer::Moved`] otherwise, with nothing written): the new
    /// revision recorded, invalidated steps made to run again, their receipts and attempts
    /// marked superseded. Every answer but `Moved` is stored under the key.
    fn revise(
        &self,
        request: ReviseRequest,
    ) -> impl Future<Output = StoreResult<ReviseAnswer>> + Send;
    /// Keeps `answer` under a key not used before, for a request whose effect is
    /// idempotent by itself (a replacement's admission under its derived key); a key used
    /// before keeps what it had. Returns what the key holds now.
    fn remember(
        &self,
        scope: ActionScope,
        request_digest: String,
        answer: ActionAnswer,
        now: Millis,
    ) -> impl Future<Output = StoreResult<ActionRecord>> + Send;
    /// The workflow's input revisions after the first, oldest first.
    fn revisions(
        &self,
        id: &WorkflowId,
    ) -> impl Future<Output = StoreResult<Vec<RevisionRecord>>> + Send;
    /// Moves a workflow to another definition version under a key, in one transaction, if
    /// the workflow is as the plan saw it ([`MigrateAnswer::Moved`] otherwise, with nothing
    /// written): its step rows rewritten in the new version's order, the history of
    /// renamed steps following them, the migration recorded and told. Every answer but
    /// `Moved` is stored under the key.
    fn migrate(
        &self,
        request: MigrateRequest,
    ) -> impl Future<Output = StoreResult<MigrateAnswer>> + Send;
    /// The workflow's migrations, oldest first.
    fn migrations(
        &self,
        id: &WorkflowId,
    ) -> impl Future<Output = StoreResult<Vec<MigrationRecord>>> + Send;
}

/// Policy documents in versions, and the steps they block.
pub trait PolicyStore: Send + Sync {
    /// Stores a new version (the newest plus one), unless the newest has the same digest:
    /// then that one. Returns the version and whether it is new.
    fn deploy_policy(
        &self,
        policy: NewPolicy,
    ) -> impl Future<Output = StoreResult<(StoredPolicy, bool)>> + Send;
    /// Every version, newest first.
    fn policies(&self) -> impl Future<Output = StoreResult<Vec<StoredPolicy>>> + Send;
    /// The newest version, if any.
    fn latest_policy(&self) -> impl Future<Output = StoreResult<Option<StoredPolicy>>> + Send;
    /// Makes every step blocked by a policy older than `version` ready again (its next
    /// attempt is judged by the newer version), tells each workflow's timeline, and
    /// recomputes its state. Returns how many steps moved.
    fn release_policy_blocks(
        &self,
        version: u32,
        now: Millis,
    ) -> impl Future<Output = StoreResult<u64>> + Send;
}

/// Budgets operators extend, and deadlines people are told about.
pub trait BudgetStore: Send + Sync {
    /// Adds to a workflow's limits under a key, in one transaction: the additions kept,
    /// every step blocked by a limit the workflow is no longer over made ready, the
    /// extension told on the timeline with its author and reason, the state recomputed.
    /// [`StoreError::NotFound`] if there is no such workflow.
    fn extend_budget(
        &self,
        request: ExtendRequest,
    ) -> impl Future<Output = StoreResult<ExtendAnswer>> + Send;
    /// Marks every workflow waiting for review with a fifth of its deadline or less left,
    /// and every step waiting for a person whose provider forgets its key within a fifth
    /// of the time it remembers it (once each), telling the timeline and queueing the
    /// notification. Returns how many.
    fn warn_deadlines(&self, now: Millis) -> impl Future<Output = StoreResult<u64>> + Send;
}

/// What health checks and metrics scrapes read: a round trip, and cheap indexed reads of
/// the queues and of the tallies of ended workflows (never a scan of history).
pub trait MetricsStore: Send + Sync {
    /// One round trip to the database.
    fn ping(&self) -> impl Future<Output = StoreResult<()>> + Send;
    /// The store's series as of `now`.
    fn snapshot(
        &self,
        now: Millis,
    ) -> impl Future<Output = StoreResult<crate::metrics::Snapshot>> + Send;
    /// The latest complete recovery sweep of any host (see
    /// [`ExecutorStore::record_sweep`]).
    fn last_sweep(&self) -> impl Future<Output = StoreResult<Option<Millis>>> + Send;
    /// Rebuilds a workflow's state from its steps, in one transaction, if it still is
    /// `stored` (what the check saw): the change is told on its timeline, as repaired by
    /// `by`. Returns the state it has now, or `None` when it had moved meanwhile.
    fn rebuild_state(
        &self,
        id: &WorkflowId,
        stored: crate::intent::WorkflowState,
        by: &str,
        now: Millis,
    ) -> impl Future<Output = StoreResult<Option<crate::intent::WorkflowState>>> + Send;
}

/// Retention: ended workflows go, with everything stored of them, once they are past the
/// retention and their key's; the tallies of `/metrics` stay.
pub trait RetentionStore: Send + Sync {
    /// Deletes up to `limit` workflows that ended before `ended_before`, whose idempotency
    /// key expired by `now` and that have no notification still to send — each with its
    /// steps, attempts, receipts, timeline, operator actions, cancellation, revisions and
    /// notifications, in one transaction. Returns their ids.
    fn purge_ended(
        &self,
        ended_before: Millis,
        now: Millis,
        limit: u32,
    ) -> impl Future<Output = StoreResult<Vec<WorkflowId>>> + Send;
}

/// The notification outbox: rows written with their transitions, delivered once by one
/// host at a time, listed for operators, pruned after a retention.
pub trait NotificationStore: Send + Sync {
    /// Leases up to `limit` pending notifications due at `now` to `owner` for `lease_ms`
    /// (rows another host holds under a live lease are skipped), oldest due first.
    fn claim_notifications(
        &self,
        owner: &str,
        now: Millis,
        lease_ms: u64,
        limit: u32,
    ) -> impl Future<Output = StoreResult<Vec<NotificationRecord>>> + Send;
    /// Records what became of notifications `owner` holds, in one transaction; a row whose
    /// lease was lost (another host took it over) is left alone. Returns how many were
    /// recorded.
    fn settle_notifications(
        &self,
        owner: &str,
        updates: Vec<(u64, NotificationUpdate)>,
        now: Millis,
    ) -> impl Future<Output = StoreResult<u64>> + Send;
    /// Records `failed` every pending notification written before `before` that no host
    /// holds: no endpoint took it within the retry window. Returns how many.
    fn expire_notifications(
        &self,
        before: Millis,
        now: Millis,
        limit: u32,
    ) -> impl Future<Output = StoreResult<u64>> + Send;
    /// Notifications in `seq` order.
    fn notifications(
        &self,
        filter: NotificationFilter,
    ) -> impl Future<Output = StoreResult<Vec<NotificationRecord>>> + Send;
    /// Deletes up to `limit` delivered, suppressed or failed notifications finished before
    /// `before`; returns how many.
    fn prune_notifications(
        &self,
        before: Millis,
        limit: u32,
    ) -> impl Future<Output = StoreResult<u64>> + Send;
}

/// Approval steps: read by the API, the console and the CLI, expired when nobody decided
/// in time (the question is the scheduler's write, [`ExecutorStore::ask_approval`]). A decision is an operator action
/// ([`OperatorStore::act`] with [`ActionRequest::approval`]).
pub trait ApprovalStore: Send + Sync {
    /// Every time the workflow's approval steps were asked, oldest first.
    fn approvals(
        &self,
        id: &WorkflowId,
    ) -> impl Future<Output = StoreResult<Vec<ApprovalRecord>>> + Send;
    /// The approvals waiting for a decision, oldest first, at most `limit`.
    fn pending_approvals(
        &self,
        limit: u32,
    ) -> impl Future<Output = StoreResult<Vec<PendingApproval>>> + Send;
    /// Fails every approval step whose approval expired by `now` (closed `expired`, the
    /// course settled, the timeline told), then warns once of each approval with a fifth of
    /// its wait or less left; returns how many expired and how many were warned of.
    fn expire_approvals(&self, now: Millis)
    -> impl Future<Output = StoreResult<(u64, u64)>> + Send;
}

/// Evidence from providers: deliveries kept once verified, read by one host at a time,
/// and the observations read from them, each applied to its step once.
pub trait EvidenceStore: Send + Sync {
    /// Keeps a verified delivery, once per adapter and `webhook-id`: `false` when that
    /// delivery was already kept (a replay), which changes nothing.
    fn receive_delivery(
        &self,
        delivery: NewDelivery,
    ) -> impl Future<Output = StoreResult<bool>> + Send;
    /// Whether a delivery waits to be read, or a held observation to be judged again: a
    /// read, so an idle host's round writes nothing.
    fn evidence_due(&self, now: Millis) -> impl Future<Output = StoreResult<bool>> + Send;
    /// Claims up to `limit` deliveries waiting to be read, for [`DELIVERY_LEASE_MS`].
    fn claim_deliveries(
        &self,
        owner: &str,
        now: Millis,
        limit: u32,
    ) -> impl Future<Output = StoreResult<Vec<ClaimedDelivery>>> + Send;
    /// Ends a claimed delivery with its reading and applies its observations, in one
    /// transaction; nothing when the claim is no longer the owner's (another host read it).
    fn read_delivery(
        &self,
        reading: ReadDelivery,
    ) -> impl Future<Output = StoreResult<Vec<ObservationRecord>>> + Send;
    /// Judges again the observations held while their step's attempt was under way, now
    /// that it ended; returns how many were judged.
    fn rejudge_held(&self, now: Millis) -> impl Future<Output = StoreResult<u64>> + Send;
    /// Kept observations, oldest first.
    fn observations(
        &self,
        filter: EvidenceFilter,
    ) -> impl Future<Output = StoreResult<Vec<ObservationRecord>>> + Send;
}

/// Operator actions on steps (query, retry, resolve, escalate), idempotent per key.
pub trait OperatorStore: Send + Sync {
    /// The action stored under this key, if any.
    fn action(
        &self,
        scope: &ActionScope,
    ) -> impl Future<Output = StoreResult<Option<ActionRecord>>> + Send;
    /// Records the key and applies the change (or the refusal) in one transaction: the
    /// step moves only if it is still in the expected state and not leased; the events go
    /// to the timeline and the workflow's state is recomputed.
    fn act(
        &self,
        request: ActionRequest,
    ) -> impl Future<Output = StoreResult<ActionOutcome>> + Send;
    /// Stores the answer of an applied action, the step's projection once it was done
    /// (once; a stored answer is never replaced).
    fn answer(
        &self,
        scope: &ActionScope,
        applied: String,
    ) -> impl Future<Output = StoreResult<()>> + Send;
}
