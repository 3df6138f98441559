//! Runs workflows: claims ready steps in bounded batches under leases, executes them
//! through the runtime, records outcomes, and recovers expired leases.
//!
//! The background loop is a thin spawn around two ticks over (store, now): [`Scheduler::claim_tick`]
//! and [`Scheduler::recovery_tick`]; registry catch-up is [`crate::catalog::catch_up`]. Tests
//! drive the ticks with a controlled clock, and every completed tick is counted in
//! [`Ticks`] so that a test can wait for the host to have looked.

mod bulk;
pub mod evidence;
mod execute;
pub mod notifier;
pub(crate) use execute::step_of;
mod pace;
mod progress;
pub mod recovery;
#[cfg(test)]
mod tests;
mod ticks;

pub use execute::{APPROVAL_MISMATCH, approval_note, short};
pub use pace::{AdapterLimit, Pacer, Rate};
pub use progress::Progress;
pub use ticks::{Tick, TickCounts, Ticks};

use crate::capabilities::SecretSource;
use crate::catalog::{Components, DeployError, Deployments};
use crate::clock::Clock;
use crate::intent::{AttemptOutcome, EventKind, Millis, NewEvent, StepState, Trigger};
use crate::store::{
    AttemptFacts, AttemptResult, ClaimRequest, ComponentStore, DefinitionStore, ExecutorStore,
    ExpiredLease, FinishRequest, StepTransition, StoreError,
};
use recovery::{Uncertainty, decide};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Notify, Semaphore};
use tokio_util::sync::CancellationToken;

/// Plugin calls at once on a host unless configured otherwise.
pub const DEFAULT_MAX_CONCURRENT: usize = 128;

/// Steps a host holds claimed at once, per plugin call it may run at once. A step is held
/// from its claim's commit to its finish's — two group commits of a loaded writer, some
/// 10–20 ms — while its call takes a fraction of that: when a step's slot was its call's,
/// 128 slots held the end-to-end chain to ~6,000 steps/s with the writer and both cores
/// partly idle, and 1,024 let it reach ~7,500/s (BENCHMARKS.md). Calls, which hold a plugin
/// instance and its memory, stay bounded by `max_concurrent`.
pub const HELD_PER_CALL: usize = 8;

/// Steps a subject holds on a host at most to count as quiet beside a burst.
const QUIET_HELD: usize = 8;

/// Steps the other subjects hold on a host at least to count as a burst.
const BURST_HELD: usize = 64;

/// Whether `subject` holds few of the steps `held` counts per subject while the others
/// hold many.
fn quiet_among(held: &std::collections::HashMap<String, usize>, subject: &str) -> bool {
    let mine = held.get(subject).copied().unwrap_or(0);
    let others: usize = held.values().sum::<usize>() - mine;
    mine <= QUIET_HELD && others >= BURST_HELD
}

/// Plugin calls a host keeps, beyond `max_concurrent`, for quiet subjects' steps (see
/// [`Scheduler::quiet`]): with every call busy with a burst, a quiet subject's step would
/// otherwise wait behind the burst's queue of steps for one.
pub const QUIET_CALLS: usize = 8;

/// Gives back a subject's held step when an attempt's task ends.
struct HeldBy<S>(Arc<Scheduler<S>>, String);

impl<S> Drop for HeldBy<S> {
    fn drop(&mut self) {
        let mut all = self.0.held.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = all.get_mut(&self.1) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                all.remove(&self.1);
            }
        }
    }
}

/// How a scheduler runs.
#[derive(Debug, Clone)]
pub struct SchedulerConfig {
    /// This host's identity, recorded as lease owner on every attempt.
    pub owner: String,
    /// How long a claim holds a step without renewal.
    pub lease: Duration,
    /// Most steps claimed in one commit.
    pub batch: u32,
    /// Most plugin calls running at once on this host; [`HELD_PER_CALL`] times as many steps
    /// may be claimed and under way (waiting for a call or for their commits).
    pub max_concurrent: usize,
    /// The longest an idle scheduler sleeps without a wake-up: the safety net for a missed
    /// notification. It wakes earlier for known deadlines (retry times, lease expiries).
    pub poll: Duration,
    /// A fault to inject (test controls only; see [`failpoint_from_env`]). `None` in
    /// production.
    pub failpoint: Option<Failpoint>,
    /// Told of every checkpoint an adapter attempt passes (`docket scenario`); `None` in a
    /// host.
    pub checkpoints: Option<CheckpointHook>,
    /// The progress signal to move, shared with other schedulers of the process
    /// (`docket scenario`'s hosts tell one API); `None`: one of its own.
    pub progress: Option<Arc<Progress>>,
    /// The adapters claimed under limits (`[adapters.X] max_in_flight`, `rate`).
    pub adapter_limits: Vec<AdapterLimit>,
}

/// What a simulation does with an attempt standing at a checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtCheckpoint {
    /// The attempt goes on.
    Continue,
    /// The host dies here: the attempt's task ends without writing anything more, and
    /// its lease runs out for recovery to find.
    Kill,
}

/// An attempt standing at a checkpoint, as a [`CheckpointHook`] is told of it.
#[derive(Debug, Clone)]
pub struct CheckpointSeen {
    /// The scheduler's owner name.
    pub owner: String,
    pub workflow_id: String,
    /// The step, `<step>.compensate` for a compensation.
    pub step: String,
    pub checkpoint: u8,
}

/// Told of each checkpoint an adapter attempt passes, once it is durable; the attempt
/// waits for the answer, so a simulation can act while it stands there.
#[derive(Clone)]
pub struct CheckpointHook(pub Arc<dyn Fn(CheckpointSeen) -> AtCheckpointFuture + Send + Sync>);

/// What a [`CheckpointHook`] answers, once it has decided.
pub type AtCheckpointFuture = std::pin::Pin<Box<dyn Future<Output = AtCheckpoint> + Send>>;

impl std::fmt::Debug for CheckpointHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CheckpointHook")
    }
}

/// The panic payload with which a simulated host's attempt ends at a kill.
#[derive(Debug)]
pub struct HostKilled;

impl Default for SchedulerConfig {
    fn default() -> Self {
        Self {
            owner: default_owner(),
            lease: Duration::from_secs(30),
            batch: 512,
            max_concurrent: DEFAULT_MAX_CONCURRENT,
            poll: Duration::from_secs(1),
            failpoint: None,
            checkpoints: None,
            progress: None,
            adapter_limits: Vec::new(),
        }
    }
}

/// `<hostname>-<pid>`: unique per process, readable in attempts.
pub fn default_owner() -> String {
    let host = std::fs::read_to_string("/etc/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "local".into());
    format!("{host}-{}", std::process::id())
}

/// A fault injected by the test controls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failpoint {
    /// Abort the process right after this checkpoint (1–6) of the next adapter attempt of
    /// a step (not of a compensation).
    Checkpoint(u8),
    /// Abort the process right after this checkpoint (1–6) of the next attempt of a
    /// compensation (`<step>.compensate`).
    CompensationCheckpoint(u8),
    /// Panic the scheduler's task when it first claims a step: how a test shows that a
    /// dead task stops the host.
    SchedulerPanic,
    /// Abort the process once a provider's delivery was read, before its reading is
    /// applied: the delivery was answered `202` and kept, and nothing of it applied.
    EvidenceRead,
    /// A deliberately broken host: every unknown outcome is retried at once without asking
    /// the adapter's contract (`docket scenario explore --broken-host blind-retry` shows
    /// that exploring finds it).
    BlindRetry,
}

impl Failpoint {
    /// The verdict on an unknown outcome: the contract's, unless the host is broken.
    pub(crate) fn verdict(
        failpoint: Option<Failpoint>,
        contract: &crate::contract::Contract,
        u: Uncertainty,
    ) -> recovery::Verdict {
        if failpoint == Some(Failpoint::BlindRetry) {
            return recovery::Verdict::RetrySameKey { at: u.now };
        }
        decide(contract, u)
    }
}

/// The failpoint asked for by the environment: `DOCKET_FAILPOINT=checkpoint-N`,
/// `compensation-checkpoint-N`, `scheduler-panic` or `evidence-read`. The caller decides whether test
/// controls allow it; `None` when unset or malformed.
pub fn failpoint_from_env() -> Option<Failpoint> {
    let value = std::env::var("DOCKET_FAILPOINT").ok()?;
    if value == "scheduler-panic" {
        return Some(Failpoint::SchedulerPanic);
    }
    if value == "evidence-read" {
        return Some(Failpoint::EvidenceRead);
    }
    let number = |prefix: &str| {
        value
            .strip_prefix(prefix)
            .and_then(|n| n.parse::<u8>().ok())
            .filter(|n| (1..=6).contains(n))
    };
    if let Some(n) = number("compensation-checkpoint-") {
        return Some(Failpoint::CompensationCheckpoint(n));
    }
    if let Some(n) = number("checkpoint-") {
        return Some(Failpoint::Checkpoint(n));
    }
    tracing::error!(
        "DOCKET_FAILPOINT={value:?} is not checkpoint-1 … checkpoint-6, compensation-checkpoint-1 … 6, scheduler-panic or evidence-read; ignored"
    );
    None
}

/// Most expired leases one recovery tick decides.
const SWEEP_BATCH: u32 = 256;

/// How often a complete recovery sweep is recorded in the store.
const SWEEP_TOLD_EVERY_MS: Millis = 1_000;

/// Starts, on this host's scheduler, a step claimed outside its loop: an admission that
/// claimed its workflow's first step in its own commit hands the step over here, so an
/// unloaded workflow starts without waiting for the loop to wake and claim it.
#[derive(Clone)]
pub struct Starter {
    reserve: Arc<dyn Fn(Millis) -> Option<Slot> + Send + Sync>,
}

impl Starter {
    /// A free slot for one attempt, with the claim to make for it; `None` when every slot
    /// is busy or the host is stopping. Dropped unused, the slot is free again.
    pub fn reserve(&self, now: Millis) -> Option<Slot> {
        (self.reserve)(now)
    }
}

/// A slot reserved by [`Starter::reserve`].
pub struct Slot {
    /// The claim to make for the step this slot will run.
    pub claim: ClaimRequest,
    start: Box<dyn FnOnce(crate::store::Claimed) + Send>,
}

impl Slot {
    /// Runs the claimed step in this slot, as the loop runs the steps it claims.
    pub fn start(self, claimed: crate::store::Claimed) {
        (self.start)(claimed)
    }
}

/// The scheduler of one host.
pub struct Scheduler<S> {
    store: S,
    deployments: Arc<Deployments<S>>,
    components: Arc<Components>,
    secrets: crate::capabilities::LiveSecrets,
    clock: Arc<dyn Clock>,
    config: SchedulerConfig,
    wake: Arc<Notify>,
    /// Steps claimed and not yet finished.
    slots: Arc<Semaphore>,
    /// Plugin calls under way.
    calls: Arc<Semaphore>,
    /// Calls beyond `calls` that only quiet subjects' steps take ([`QUIET_CALLS`]).
    quiet_calls: Semaphore,
    /// Set when a claim found every slot busy; the next attempt to end wakes the loop.
    starved: std::sync::atomic::AtomicBool,
    /// Set by [`Scheduler::shutdown`]: a finishing attempt no longer claims its dependent.
    stopping: std::sync::atomic::AtomicBool,
    ticks: Arc<Ticks>,
    /// Lease renewals under way (see [`Scheduler::renewing`]).
    renewing: std::sync::atomic::AtomicUsize,
    progress: Arc<Progress>,
    /// This host's counters of attempts, traps and recovered leases.
    metrics: Arc<crate::metrics::Metrics>,
    /// When this host last told the store of a complete recovery sweep.
    sweep_told: std::sync::atomic::AtomicU64,
    /// Items of batch steps gathering into `invoke-batch` calls.
    bulk: bulk::Bulk,
    /// The limits this host claims adapters' steps under.
    pacer: Pacer,
    /// Steps held (claimed, not finished) per subject.
    held: std::sync::Mutex<std::collections::HashMap<String, usize>>,
}

impl<S> Scheduler<S>
where
    S: ExecutorStore + DefinitionStore + ComponentStore + Clone + 'static,
{
    pub fn new(
        store: S,
        deployments: Arc<Deployments<S>>,
        components: Arc<Components>,
        secrets: Arc<SecretSource>,
        clock: Arc<dyn Clock>,
        config: SchedulerConfig,
        wake: Arc<Notify>,
    ) -> Arc<Self> {
        let progress = config.progress.clone().unwrap_or_default();
        let slots = Arc::new(Semaphore::new(config.max_concurrent * HELD_PER_CALL));
        let calls = Arc::new(Semaphore::new(config.max_concurrent));
        let pacer = Pacer::new(config.adapter_limits.clone());
        Arc::new(Self {
            store,
            deployments,
            components,
            secrets: crate::capabilities::LiveSecrets::new(secrets),
            clock,
            config,
            wake,
            slots,
            calls,
            quiet_calls: Semaphore::new(QUIET_CALLS),
            starved: std::sync::atomic::AtomicBool::new(false),
            stopping: std::sync::atomic::AtomicBool::new(false),
            ticks: Arc::default(),
            renewing: Default::default(),
            progress,
            metrics: Arc::default(),
            sweep_told: std::sync::atomic::AtomicU64::new(0),
            bulk: bulk::Bulk::default(),
            pacer,
            held: Default::default(),
        })
    }

    /// The signal that moves whenever one of this host's attempts ends, a lease is
    /// recovered, or another host reports work.
    /// The secrets calls are given, replaced whole by a configuration reload.
    pub fn live_secrets(&self) -> crate::capabilities::LiveSecrets {
        self.secrets.clone()
    }

    pub fn progress(&self) -> Arc<Progress> {
        self.progress.clone()
    }

    /// This host's counters (shared with the API's `/metrics`).
    pub fn metrics(&self) -> Arc<crate::metrics::Metrics> {
        self.metrics.clone()
    }

    /// The counts of this scheduler's completed ticks.
    pub fn ticks(&self) -> Arc<Ticks> {
        self.ticks.clone()
    }

    /// Lease renewals under way: woken by the clock and not yet asleep again (a simulation
    /// waits for them before it moves the clock on).
    pub fn renewing(&self) -> usize {
        self.renewing.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Steps claimed by this scheduler and not yet finished (a simulation waits for them).
    pub fn busy(&self) -> usize {
        self.config.max_concurrent * HELD_PER_CALL - self.slots.available_permits()
    }

    /// Graceful shutdown, once the run loop has stopped claiming: waits up to `grace` for
    /// the attempts under way to finish, then ends this host's remaining leases at once so
    /// recovery need not wait for them to run out. Returns how many leases were ended.
    pub async fn shutdown(&self, grace: Duration) -> Result<u64, StoreError> {
        self.stopping
            .store(true, std::sync::atomic::Ordering::Release);
        let all = (self.config.max_concurrent * HELD_PER_CALL) as u32;
        // Every slot free means no attempt is running; the permits are dropped at once.
        let _ = tokio::time::timeout(grace, self.slots.acquire_many(all)).await;
        self.store
            .release_leases(&self.config.owner, self.clock.now_ms())
            .await
    }

    /// At checkpoint `n` of an adapter attempt, once it is durable: aborts the process if
    /// the failpoint names it (test controls only), and tells the checkpoint hook, which may
    /// end the attempt's task as a host's death would.
    async fn failpoint(&self, n: u8, claimed: &crate::store::Claimed) {
        let compensation = crate::course::compensated_step(&claimed.fence.step).is_some();
        let hit = match self.config.failpoint {
            Some(Failpoint::Checkpoint(at)) => at == n && !compensation,
            Some(Failpoint::CompensationCheckpoint(at)) => at == n && compensation,
            _ => false,
        };
        if hit {
            let kind = if compensation { "compensation-" } else { "" };
            eprintln!("docket: failpoint {kind}checkpoint-{n} reached; aborting");
            std::process::abort();
        }
        if let Some(hook) = &self.config.checkpoints {
            let seen = CheckpointSeen {
                owner: self.config.owner.clone(),
                workflow_id: claimed.fence.workflow_id.to_string(),
                step: claimed.fence.step.to_string(),
                checkpoint: n,
            };
            if (hook.0)(seen).await == AtCheckpoint::Kill {
                // Unwinds the attempt's task alone (no panic message: it is no bug).
                std::panic::resume_unwind(Box::new(HostKilled));
            }
        }
    }

    /// Runs until `stop` is cancelled: recovery, then claims, then waits for a wake-up.
    /// Attempts under way go on; [`Scheduler::shutdown`] waits for them.
    ///
    /// An idle scheduler does not poll the database in a tight loop: it sleeps until the
    /// next known deadline (a retry time, a lease expiry) or a wake-up — from this host's
    /// own admissions and finished steps, or from other hosts through the store's
    /// [`ExecutorStore::watch`] — and at most [`SchedulerConfig::poll`] in case a wake-up
    /// was missed.
    pub async fn run(self: Arc<Self>, stop: CancellationToken) {
        match self.store.watch(self.wake.clone()).await {
            Ok(true) => tracing::info!("listening for work made ready by other hosts"),
            Ok(false) => {}
            Err(e) => tracing::warn!(
                "cannot listen for other hosts' work ({e}); polling every {:?} instead",
                self.config.poll
            ),
        }
        while !stop.is_cancelled() {
            let now = self.clock.now_ms();
            // Recovery and claims run together and share the writer's commits. What a sweep
            // makes ready is claimed by the next iteration, which the sweep's wake-up starts
            // at once.
            let (recovered, claimed) =
                tokio::join!(self.recovery_tick(now), self.clone().claim_tick(now));
            if let Err(e) = recovered {
                tracing::error!("recovery tick failed: {e}");
            }
            let claimed = match claimed {
                Ok(n) => n,
                Err(e) => {
                    tracing::error!("claim tick failed: {e}");
                    0
                }
            };
            if claimed > 0 {
                continue;
            }
            let mut idle = self.config.poll;
            if self.room() > 0 {
                match self.store.next_due(now).await {
                    Ok(Some(due)) => {
                        idle = idle.min(Duration::from_millis(due.saturating_sub(now).max(1)));
                    }
                    Ok(None) => {}
                    Err(e) => tracing::error!("looking for the next deadline failed: {e}"),
                }
            }
            if let Some(token) = self.pacer.next_token(now) {
                idle = idle.min(token);
            }
            // With every slot busy, the next attempt to end wakes the loop (`starved`).
            tokio::select! {
                // Possibly another host's work ended: let waiters look.
                _ = self.wake.notified() => self.progress.advance(),
                _ = tokio::time::sleep(idle) => {}
                _ = stop.cancelled() => {}
            }
        }
    }

    /// Claims what free slots allow and starts each attempt; returns how many were claimed.
    pub async fn claim_tick(self: Arc<Self>, now: Millis) -> Result<usize, StoreError> {
        let ticks = self.ticks.clone();
        let claimed = self.claim(now).await;
        ticks.done(Tick::Claim);
        claimed
    }

    /// How many steps may be claimed now: free slots, and no more than the calls free to run
    /// them — a step is held for its commits, not queued for a call (it would cost memory
    /// while it waits).
    fn room(&self) -> usize {
        self.slots
            .available_permits()
            .min(self.calls.available_permits())
    }

    /// A slot or a call is free again: if the loop found no room, it may claim now.
    fn freed(&self) {
        if self
            .starved
            .swap(false, std::sync::atomic::Ordering::AcqRel)
        {
            self.wake.notify_one();
        }
    }

    async fn claim(self: Arc<Self>, now: Millis) -> Result<usize, StoreError> {
        let free = self.room().min(self.config.batch as usize);
        if free == 0 {
            self.starved
                .store(true, std::sync::atomic::Ordering::Release);
            // An attempt that ended just before the flag was set did not see it.
            if self.room() > 0 {
                self.wake.notify_one();
            }
            return Ok(0);
        }
        let claimed = self
            .store
            .claim(ClaimRequest {
                owner: self.config.owner.clone(),
                now,
                lease_ms: self.config.lease.as_millis() as u64,
                limit: free as u32,
                gates: self.pacer.gates(now),
                urgent: false,
            })
            .await?;
        self.pacer.took(&claimed, now);
        let n = claimed.len();
        if n > 0 && self.config.failpoint == Some(Failpoint::SchedulerPanic) {
            panic!("failpoint scheduler-panic: the scheduler task dies on its first claim");
        }
        for c in claimed {
            let permit = self
                .slots
                .clone()
                .acquire_owned()
                .await
                .expect("semaphore open");
            self.clone().spawn_attempt(c, permit);
        }
        Ok(n)
    }

    /// Runs a claimed step in the slot `permit` holds, and then each dependent its finish
    /// claimed, in one task.
    fn spawn_attempt(
        self: Arc<Self>,
        claimed: crate::store::Claimed,
        permit: tokio::sync::OwnedSemaphorePermit,
    ) {
        let subject = claimed.subject.0.clone();
        self.hold(&subject);
        tokio::spawn(async move {
            // Given back however the task ends.
            let _held = HeldBy(self.clone(), subject);
            let mut next = Some(claimed);
            while let Some(c) = next {
                let limited = c.adapter.as_deref().is_some_and(|a| self.pacer.limits(a));
                next = self.clone().execute(c).await;
                // Its end makes room under the adapter's limit: the loop may claim.
                if limited {
                    self.wake.notify_one();
                }
            }
            drop(permit);
            self.freed();
        });
    }

    /// Counts a step of `subject` held by this host ([`HeldBy`] gives it back).
    fn hold(&self, subject: &str) {
        let mut all = self.held.lock().unwrap_or_else(|e| e.into_inner());
        *all.entry(subject.to_string()).or_default() += 1;
    }

    /// Whether `subject` holds few of this host's steps while others hold many: its
    /// writes then go ahead of the queue ([`ClaimRequest::urgent`]).
    fn quiet(&self, subject: &str) -> bool {
        quiet_among(
            &self.held.lock().unwrap_or_else(|e| e.into_inner()),
            subject,
        )
    }

    /// The claim a finishing or admitting write makes for the step it readied; `urgent`
    /// for a quiet subject's (see [`Scheduler::quiet`]).
    fn next_claim(&self, now: Millis, urgent: bool) -> ClaimRequest {
        ClaimRequest {
            owner: self.config.owner.clone(),
            now,
            lease_ms: self.config.lease.as_millis() as u64,
            limit: 1,
            // Named so that the store leaves their steps to the loop's claim.
            gates: self.pacer.gates(now),
            urgent,
        }
    }

    /// Hands out slots to admissions (see [`Starter`]).
    pub fn starter(self: &Arc<Self>) -> Starter {
        let me = self.clone();
        Starter {
            reserve: Arc::new(move |now| {
                // The scheduler-panic failpoint fires on the loop's claim: the loop claims all.
                if me.stopping.load(std::sync::atomic::Ordering::Acquire)
                    || me.config.failpoint == Some(Failpoint::SchedulerPanic)
                {
                    return None;
                }
                let permit = me.slots.clone().try_acquire_owned().ok()?;
                let runner = me.clone();
                Some(Slot {
                    claim: me.next_claim(now, false),
                    start: Box::new(move |claimed| runner.spawn_attempt(claimed, permit)),
                })
            }),
        }
    }

    /// Finds leases that expired before `now` and decides each by its last checkpoint:
    /// before 3 (or a handler) the step is simply ready again; at 3–5 the adapter's contract
    /// decides — query, same-key retry, or review. Returns how many steps were recovered.
    pub async fn recovery_tick(&self, now: Millis) -> Result<usize, StoreError> {
        let recovered = self.recover_expired(now).await;
        self.ticks.done(Tick::Recovery);
        recovered
    }

    async fn recover_expired(&self, now: Millis) -> Result<usize, StoreError> {
        let expired = self.store.expired_leases(now, SWEEP_BATCH).await?;
        // Every lease expired before `now` is decided by this tick unless the batch was full
        // or a decision had to wait.
        let mut complete = expired.len() < SWEEP_BATCH as usize;
        // Decide every lease first, then write them all at once so they share commits.
        let mut writes = tokio::task::JoinSet::new();
        for lease in expired {
            let request = match &lease.result {
                Some(result) if lease.checkpoint >= 5 => Self::resume(&lease, result.clone(), now),
                _ => match self.recover(&lease, now).await {
                    Ok(request) => request,
                    // Decided on the next tick, once the database answers again.
                    Err(e) => {
                        tracing::warn!(workflow = %lease.fence.workflow_id, step = %lease.fence.step, "recovery deferred: {e}");
                        complete = false;
                        continue;
                    }
                },
            };
            let store = self.store.clone();
            let counted = (
                lease.workflow.clone(),
                lease.fence.step.as_str().to_string(),
                request.facts.outcome.map_or("none", AttemptOutcome::as_str),
            );
            writes.spawn(async move { store.finish(request).await.map(|_| counted) });
        }
        let mut recovered = 0;
        let mut failure = None;
        while let Some(done) = writes.join_next().await {
            match done.map_err(|e| StoreError::never(format!("a recovery write panicked: {e}")))? {
                Ok((workflow, step, outcome)) => {
                    recovered += 1;
                    self.metrics.attempt(&workflow, &step, outcome);
                    self.metrics.lease_expiries(1);
                }
                // Renewed or finished meanwhile: nothing to recover.
                Err(StoreError::LeaseLost { .. }) => {}
                Err(e) => failure = Some(e),
            }
        }
        if let Some(e) = failure {
            return Err(e);
        }
        if recovered > 0 {
            self.wake.notify_one();
            self.progress.advance();
        }
        // Told to the store at most once a second: what `docket check` holds leases to.
        let told = self.sweep_told.load(std::sync::atomic::Ordering::Relaxed);
        if complete && (now >= told.saturating_add(SWEEP_TOLD_EVERY_MS) || now < told) {
            match self.store.record_sweep(&self.config.owner, now).await {
                Ok(()) => self
                    .sweep_told
                    .store(now, std::sync::atomic::Ordering::Relaxed),
                Err(e) => tracing::warn!("recording the recovery sweep failed: {e}"),
            }
        }
        Ok(recovered)
    }

    /// Resumes from checkpoint 5: the result is durable, so it is applied as stored and
    /// nothing is sent or asked again.
    fn resume(lease: &ExpiredLease, result: AttemptResult, now: Millis) -> FinishRequest {
        let att = lease.attempt_id.as_ref();
        let mut events = vec![NewEvent::step(
            EventKind::Action,
            &lease.fence.step,
            att,
            format!(
                "Lease of {} expired after checkpoint 5: resuming from the stored result; nothing is sent again",
                lease.lease_owner
            ),
        )];
        events.extend(result.events);
        let checkpoint = if matches!(result.transition, StepTransition::Succeeded(_)) {
            6
        } else {
            5
        };
        FinishRequest {
            fence: lease.fence.clone(),
            attempt_id: lease
                .attempt_id
                .clone()
                .unwrap_or_else(|| crate::intent::AttemptId("att_unknown".into())),
            checkpoint,
            facts: AttemptFacts {
                outcome: Some(result.outcome),
                ..AttemptFacts::default()
            },
            transition: result.transition,
            note: result.note,
            log: serde_json::Value::Array(vec![]),
            runtime_ms: 0,
            events,
            now,
            expired_before: Some(now),
            decided_at: Some(lease.checkpoint),
            blocked: None,
            charge: crate::budget::Charge::Attempt,
        }
    }

    /// Decides an expired lease without a stored result by its last checkpoint.
    async fn recover(
        &self,
        lease: &ExpiredLease,
        now: Millis,
    ) -> Result<FinishRequest, StoreError> {
        let (transition, note, event, outcome) = self.recovery_for(lease, now).await?;
        // From checkpoint 5 on, the attempt already holds what the call returned (or its
        // uncertainty); that evidence stays, and the expiry is told by the timeline.
        let facts = if lease.checkpoint >= 5 {
            AttemptFacts::default()
        } else {
            AttemptFacts {
                outcome: Some(outcome),
                observation: Some(format!(
                    "lease of {} expired at checkpoint {}",
                    lease.lease_owner, lease.checkpoint
                )),
                ..AttemptFacts::default()
            }
        };
        Ok(FinishRequest {
            fence: lease.fence.clone(),
            attempt_id: lease
                .attempt_id
                .clone()
                .unwrap_or_else(|| crate::intent::AttemptId("att_unknown".into())),
            checkpoint: lease.checkpoint,
            facts,
            transition,
            note: Some(note),
            log: serde_json::Value::Array(vec![]),
            runtime_ms: 0,
            events: vec![event],
            now,
            expired_before: Some(now),
            decided_at: Some(lease.checkpoint),
            blocked: None,
            charge: crate::budget::Charge::Attempt,
        })
    }

    async fn recovery_for(
        &self,
        lease: &ExpiredLease,
        now: Millis,
    ) -> Result<(StepTransition, String, NewEvent, AttemptOutcome), StoreError> {
        let step = &lease.fence.step;
        let att = lease.attempt_id.as_ref();
        let expired_text = format!(
            "Lease of {} expired at checkpoint {} (the worker stopped or lost contact)",
            lease.lease_owner, lease.checkpoint
        );
        let simple = |trigger: Trigger| {
            (
                StepTransition::Retry {
                    ready_at: now,
                    next_trigger: trigger,
                    uncertain_since: None,
                },
                "interrupted before any request was sent; ready again".to_string(),
                NewEvent::step(
                    EventKind::Action,
                    step,
                    att,
                    format!("{expired_text}: nothing was sent, the step is ready again"),
                ),
                AttemptOutcome::Interrupted,
            )
        };
        if lease.checkpoint < 3 && lease.trigger != Trigger::RecoveryQuery {
            return Ok(simple(Trigger::Retry));
        }
        // An adapter attempt that may have sent its request: the contract decides.
        let sender = match lease
            .component
            .as_ref()
            .zip(lease.component_version.as_ref())
        {
            Some((name, version)) => {
                self.components
                    .exact_or_stored(&self.store, name, version)
                    .await?
            }
            None => None,
        };
        let contract = sender.and_then(|c| c.contract().cloned());
        let Some(contract) = contract else {
            if lease.checkpoint < 3 {
                return Ok(simple(Trigger::RecoveryQuery));
            }
            let reason = "the adapter version that sent the request is not loaded on this host";
            return Ok((
                StepTransition::Terminal(StepState::OutcomeUnknown),
                format!("outcome unknown: {reason}"),
                NewEvent::step(
                    EventKind::Conclusion,
                    step,
                    att,
                    format!("{expired_text}; outcome unknown — needs review: {reason}"),
                ),
                AttemptOutcome::Interrupted,
            ));
        };
        let attempts_left = match self
            .deployments
            .get(&lease.workflow, lease.definition_version)
            .await
        {
            Ok(Some(d)) => execute::step_of(&d.def, step)
                .is_some_and(|s| s.retry.allows_another(lease.attempt_number)),
            Ok(None) => false,
            Err(DeployError::Store(e)) => return Err(e),
            Err(_) => false,
        };
        let u = Uncertainty {
            since: lease.uncertain_since.unwrap_or(lease.attempt_started_at),
            now,
            lookup_absent: false,
            ask_again_after: 0,
            attempts_left,
            remembered_until: lease.key_remembered_until,
        };
        let told = recovery::Told {
            step,
            attempt: att,
            cause: recovery::Cause::LeaseExpired {
                expired: &expired_text,
            },
        };
        let verdict = Failpoint::verdict(self.config.failpoint, &contract, u);
        let c = recovery::conclude(&contract, u, verdict, told);
        Ok((c.transition, c.note, c.event, AttemptOutcome::Interrupted))
    }
}
