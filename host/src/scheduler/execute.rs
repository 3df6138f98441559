//! Running one claimed attempt to its end: checkpoints, the call, the typed outcome.
//!
//! A handler attempt has two durable points: the claim (checkpoint 1) and the finish. An
//! adapter attempt passes all six checkpoints, each durable before the
//! attempt moves on: claim (1), budget and policy validated (2), request identity recorded
//! (3), the call (4, nothing written), result or uncertainty stored (5), receipt and
//! release of dependents (6).

mod adapter;
mod approval;
mod batch;
mod preflight;
#[cfg(test)]
mod tests;

use super::Scheduler;
use super::recovery::{Cause, Conclusion, Told, Uncertainty, conclude};
use crate::budget::{self, AttemptKind, Charge};
use crate::catalog::{DeployError, ResolveError};
use crate::contract::{
    CompensationRequest, Contract, EffectError, EffectRequest, EffectStatus, Lookup, PluginReceipt,
};
use crate::intent::{
    AttemptOutcome, EventKind, EvidenceKind, Millis, NewEvent, Provenance, ReceiptId, StepState,
    Trigger, external_idempotency_key,
};
use crate::runtime::{CallEnv, CallFailure, CallLimits, CallReport, Prepared};
use crate::store::{
    AttemptFacts, AttemptResult, CheckpointRequest, Claimed, DefinitionStore, ExecutorStore,
    FinishRequest, NewReceipt, StepTransition, StoreError,
};
use crate::workflow::{ReceiptView, StepDef, StepKind};
use std::sync::Arc;

/// Why a step is blocked when only verified versions run and the one it needs is not.
pub const UNVERIFIED_COMPONENT: &str = "unverified_component";
pub use approval::{APPROVAL_MISMATCH, approval_note};
use std::time::{Duration, Instant};

/// How one attempt ended, before it is written down.
pub(crate) struct Ending {
    pub checkpoint: u8,
    pub facts: AttemptFacts,
    pub transition: StepTransition,
    pub note: Option<String>,
    pub log: serde_json::Value,
    pub events: Vec<NewEvent>,
    /// Whether an adapter ran (its checkpoint 6 is a failpoint; a handler's is not).
    pub adapter: bool,
    /// Why the step is blocked, when this attempt blocks it.
    pub blocked: Option<crate::store::Blocked>,
    /// What the attempt draws on (an attempt that blocks the step draws on nothing).
    pub charge: crate::budget::Charge,
}

impl Ending {
    /// An ending whose checkpoint is 6 when a receipt is recorded, else `reached`; the
    /// outcome and the note become the attempt's facts.
    fn settled(
        reached: u8,
        mut facts: AttemptFacts,
        outcome: AttemptOutcome,
        transition: StepTransition,
        note: Option<String>,
        log: serde_json::Value,
        events: Vec<NewEvent>,
    ) -> Self {
        facts.outcome = Some(outcome);
        facts.observation = note.clone();
        let checkpoint = if matches!(transition, StepTransition::Succeeded(_)) {
            6
        } else {
            reached
        };
        Self {
            checkpoint,
            facts,
            transition,
            note,
            log,
            events,
            adapter: false,
            blocked: None,
            charge: Charge::Attempt,
        }
    }

    /// An attempt refused before its call: the step ends in `state`, and the timeline
    /// says why it could not start.
    fn cannot_start(
        claimed: &Claimed,
        step: &StepDef,
        state: StepState,
        reason: impl std::fmt::Display,
    ) -> Self {
        let note = format!("{} cannot start: {reason}", step.label);
        let event = NewEvent::step(
            EventKind::Conclusion,
            step.id.as_str(),
            Some(&claimed.attempt_id),
            note.clone(),
        );
        Self::terminal(state, AttemptOutcome::Rejected, note, event)
    }

    fn terminal(state: StepState, outcome: AttemptOutcome, note: String, event: NewEvent) -> Self {
        Self::stopped(AttemptFacts::default(), state, outcome, note, event)
    }

    /// An attempt that stops at checkpoint 2, before anything is sent: `facts` with the
    /// outcome and the note as observation, the step left in `state`, one timeline event.
    fn stopped(
        mut facts: AttemptFacts,
        state: StepState,
        outcome: AttemptOutcome,
        note: String,
        event: NewEvent,
    ) -> Self {
        facts.outcome = Some(outcome);
        facts.observation = Some(note.clone());
        Self {
            checkpoint: 2,
            facts,
            transition: StepTransition::Terminal(state),
            note: Some(note),
            log: serde_json::Value::Array(vec![]),
            events: vec![event],
            adapter: false,
            blocked: None,
            charge: crate::budget::Charge::Attempt,
        }
    }
}

/// A database failure before anything was sent decides nothing: the attempt is left
/// unfinished, its lease lapses, and recovery makes the step ready again.
fn transient(claimed: &Claimed, e: &StoreError) -> Option<Ending> {
    tracing::warn!(workflow = %claimed.fence.workflow_id, step = %claimed.fence.step, "the database failed before the attempt could start; it runs again once the lease lapses: {e}");
    None
}

/// How long a step waits when the host had no room to start its plugin.
const NO_ROOM_WAIT_MS: Millis = 100;

/// A task that is aborted when its handle is dropped (awaiting it awaits the task).
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl<T> std::future::Future for AbortOnDrop<T> {
    type Output = Result<T, tokio::task::JoinError>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        std::pin::Pin::new(&mut self.0).poll(cx)
    }
}

fn log_json<T>(report: &CallReport<T>) -> serde_json::Value {
    serde_json::to_value(&report.log).unwrap_or_default()
}

impl<S> Scheduler<S>
where
    S: ExecutorStore + DefinitionStore + crate::store::ComponentStore + Clone + 'static,
{
    /// Runs one claimed attempt and records its end; returns the dependent claimed in the
    /// same commit as that end, for this worker to run next. Errors are logged: the lease
    /// expiry and recovery take care of anything left half-done.
    pub(crate) async fn execute(self: Arc<Self>, claimed: Claimed) -> Option<Claimed> {
        // Everything logged while the attempt runs names it: workflow, step and attempt.
        let span = tracing::info_span!(
            "attempt",
            workflow = %claimed.fence.workflow_id,
            step = %claimed.fence.step,
            attempt = %claimed.attempt_id,
            number = claimed.attempt_number,
            trigger = claimed.trigger.as_str(),
        );
        // A child of the workflow's trace, whichever host admitted it.
        if let Some(parent) = &claimed.trace_parent {
            crate::telemetry::adopt(&span, parent);
        }
        tracing::Instrument::instrument(self.run_attempt(claimed), span).await
    }

    async fn run_attempt(self: Arc<Self>, claimed: Claimed) -> Option<Claimed> {
        let started = Instant::now();
        // Dropped, by the end of the attempt or a panic in it, the renewal stops: a lease
        // is kept only while its attempt lives.
        let mut renewer = AbortOnDrop(self.clone().keep_lease(claimed.fence.clone()));
        // A lost lease ends the attempt at once: recovery owns the step, and a call that went
        // on would only spend a slot (and, for an adapter, keep a request open) for nothing.
        let ending = tokio::select! {
            // The call's permit is held while the plugin runs, not while the end is recorded.
            // The call's state is allocated only once it starts: a step waiting for a call
            // costs its host a small task, not room for the whole call.
            ending = async {
                // A quiet subject's step may take one of the calls kept for them, so that it
                // does not wait behind a burst's queue of steps for a call.
                let _call = if self.quiet(&claimed.subject.0) {
                    tokio::select! {
                        call = self.calls.acquire() => call,
                        call = self.quiet_calls.acquire() => call,
                    }
                } else {
                    self.calls.acquire().await
                }
                .expect("semaphore open");
                Box::pin(self.attempt(&claimed)).await
            } => ending,
            lost = &mut renewer => {
                let why = lost.unwrap_or_else(|e| format!("the lease's renewal failed ({e})"));
                self.record_cancelled(&claimed, why).await;
                return None;
            }
        };
        drop(renewer);
        self.freed();
        let ending = ending?;
        let receipt_of_adapter = ending.adapter && ending.checkpoint == 6;
        let outcome = ending.facts.outcome;
        let now = self.clock.now_ms();
        let request = FinishRequest {
            fence: claimed.fence.clone(),
            attempt_id: claimed.attempt_id.clone(),
            checkpoint: ending.checkpoint,
            facts: ending.facts,
            transition: ending.transition,
            note: ending.note,
            log: ending.log,
            runtime_ms: started.elapsed().as_millis() as u64,
            events: ending.events,
            now,
            expired_before: None,
            decided_at: None,
            blocked: ending.blocked,
            charge: ending.charge,
        };
        let finished = if self.stopping.load(std::sync::atomic::Ordering::Acquire) {
            self.store.finish(request).await.map(|f| (f, None))
        } else {
            let next = self.next_claim(now, self.quiet(&claimed.subject.0));
            self.store.finish_and_claim(request, next).await
        };
        self.progress.advance_workflow(&claimed.fence.workflow_id.0);
        match finished {
            Ok((finished, next)) => {
                self.metrics.attempt(
                    &claimed.workflow,
                    claimed.fence.step.as_str(),
                    outcome.map_or("none", AttemptOutcome::as_str),
                );
                // Checkpoint 6: the receipt and the release of dependents are durable.
                if receipt_of_adapter {
                    self.failpoint(6, &claimed).await;
                }
                // Released steps this worker does not run next are the loop's.
                if finished.released.len() > usize::from(next.is_some()) {
                    self.wake.notify_one();
                }
                next
            }
            Err(StoreError::LeaseLost { .. }) => {
                tracing::warn!(workflow = %claimed.fence.workflow_id, step = %claimed.fence.step, "lease lost before the attempt could be recorded; recovery owns the step now");
                None
            }
            Err(e) => {
                tracing::error!(workflow = %claimed.fence.workflow_id, step = %claimed.fence.step, "recording the attempt failed: {e}");
                None
            }
        }
    }

    /// Renews the lease every third of its duration while the attempt runs; ends, saying
    /// why, only when the lease is gone.
    fn keep_lease(self: Arc<Self>, fence: crate::store::Fence) -> tokio::task::JoinHandle<String> {
        tokio::spawn(async move {
            let lease_ms = self.config.lease.as_millis() as u64;
            let period = Duration::from_millis((lease_ms / 3).max(10));
            // The claim holds the lease for one duration from (about) now.
            let mut held_until = self.clock.now_ms().saturating_add(lease_ms);
            let mut next = self.clock.sleep(period);
            loop {
                next.await;
                // Counted from its wake-up until the next sleep is set, so a simulation
                // knows when this host has done what the clock's move asked of it.
                let renewing = Renewing::start(&self.renewing);
                let renewed = self.renew_tick(&fence, held_until).await;
                self.ticks.done(super::Tick::LeaseRenewal);
                match renewed {
                    Ok(until) => held_until = until,
                    Err(why) => {
                        tracing::warn!(workflow = %fence.workflow_id, step = %fence.step, "the attempt lost its lease: {why}");
                        return why;
                    }
                }
                next = self.clock.sleep(period);
                drop(renewing);
            }
        })
    }

    /// One renewal of a lease held until `held_until` (host time): a transient store failure
    /// is tried again, with growing pauses, while the lease still has a tenth of its duration
    /// left. Returns the new expiry, or why the lease is gone.
    pub(crate) async fn renew_tick(
        &self,
        fence: &crate::store::Fence,
        held_until: Millis,
    ) -> Result<Millis, String> {
        let lease_ms = self.config.lease.as_millis() as u64;
        let margin = (lease_ms / 10).max(1);
        let mut pause = Duration::from_millis((lease_ms / 20).clamp(5, 100));
        loop {
            let now = self.clock.now_ms();
            let request = crate::store::RenewRequest {
                fence: fence.clone(),
                now,
                lease_ms,
            };
            match self.store.renew(request).await {
                Ok(()) => return Ok(now.saturating_add(lease_ms)),
                Err(e @ StoreError::LeaseLost { .. }) => return Err(e.to_string()),
                Err(e) => {
                    if self.clock.now_ms().saturating_add(margin) >= held_until {
                        return Err(format!(
                            "the lease ran out while renewing it kept failing ({e})"
                        ));
                    }
                    tracing::debug!(workflow = %fence.workflow_id, step = %fence.step, "lease renewal failed, trying again: {e}");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_millis((lease_ms / 5).max(10)));
                }
            }
        }
    }

    /// Records on the attempt that it was cancelled when its lease was lost; the step is
    /// left to recovery, which decides it by the attempt's last checkpoint.
    async fn record_cancelled(&self, claimed: &Claimed, why: String) {
        let note = format!(
            "lost its lease while running ({why}); the call was cancelled and recovery decides the step by its last checkpoint"
        );
        let evidence = crate::store::LateEvidence {
            workflow_id: claimed.fence.workflow_id.clone(),
            attempt_id: claimed.attempt_id.clone(),
            facts: AttemptFacts {
                outcome: Some(AttemptOutcome::Interrupted),
                observation: Some(note.clone()),
                ..AttemptFacts::default()
            },
            events: vec![NewEvent::step(
                EventKind::Observation,
                &claimed.fence.step,
                Some(&claimed.attempt_id),
                format!("Attempt {} {note}", claimed.attempt_number),
            )],
            now: self.clock.now_ms(),
        };
        if let Err(e) = self.store.late_evidence(evidence).await {
            tracing::error!(workflow = %claimed.fence.workflow_id, step = %claimed.fence.step, "recording the cancelled attempt failed: {e}");
        }
        self.progress.advance_workflow(&claimed.fence.workflow_id.0);
    }

    /// Everything between the claim and the finish. `None` when the attempt must not be
    /// finished by this worker (its lease is gone).
    async fn attempt(&self, claimed: &Claimed) -> Option<Ending> {
        let fence = &claimed.fence;
        let deployed = match self
            .deployments
            .get(&claimed.workflow, claimed.definition_version)
            .await
        {
            Ok(Some(d)) => d,
            Ok(None) => {
                let note = format!(
                    "definition {} v{} is not deployed",
                    claimed.workflow, claimed.definition_version
                );
                return Some(self.blocked(claimed, note));
            }
            Err(DeployError::Store(e)) => return transient(claimed, &e),
            Err(e) => return Some(self.blocked(claimed, e.to_string())),
        };
        let reverses = crate::course::compensated_step(&fence.step);
        let Some(step) = step_of(&deployed.def, &fence.step) else {
            let note = format!(
                "step `{}` is not in definition v{}",
                fence.step, claimed.definition_version
            );
            return Some(self.blocked(claimed, note));
        };
        let step = &step;
        // An approval step runs nothing: it asks a person, and waits.
        if step.kind == StepKind::Approval {
            return self.ask_approval(claimed, step, &deployed.def).await;
        }
        // A batch step calls nothing itself: its items, each an effect of its own, do.
        if let (Some(batch), None) = (&step.batch, reverses) {
            return self.expand_batch(claimed, step, batch, &deployed.def).await;
        }
        // Checkpoint 1 (the claim) is durable; only adapter attempts have the failpoints.
        if step.kind == StepKind::Adapter {
            self.failpoint(1, claimed).await;
        }
        // A definition deployed by another host may ask for an adapter this host was given
        // no allowance for: it is not this host's to run, and never with an empty grant.
        if step.kind == StepKind::Adapter
            && step.capabilities.requests_any()
            && !self.components.has_allowance(&step.component)
        {
            let message = format!(
                "host {} has no [adapters.{}] section, so it may not run `{}`; add the allowance to its docket.toml, or leave the step to a host that has it, then retry",
                self.config.owner, step.component, step.component
            );
            return Some(self.missing_allowance(claimed, step, message));
        }
        // A recovery query only gathers evidence about an effect that may already have
        // happened: once the attempts are spent it draws on a reserve, so an outcome is not
        // left unasked. A compensation reverses an effect: a budget never refuses one.
        let kind = match (reverses, claimed.trigger) {
            (Some(_), _) => AttemptKind::Compensation,
            (None, Trigger::RecoveryQuery) => AttemptKind::RecoveryQuery,
            (None, _) => AttemptKind::Work,
        };
        let limits = budget::Limits::of(&deployed.def.budget, &claimed.budget_added);
        let deadline = match kind {
            AttemptKind::Work => budget::deadline_passed(claimed.deadline_at, self.clock.now_ms()),
            _ => None,
        };
        let charge = match deadline.map_or_else(
            || budget::admit_attempt(&limits, &claimed.budget_used(), kind),
            Err,
        ) {
            Ok(charge) => charge,
            Err(exhausted) => return Some(self.budget_exceeded(claimed, exhausted)),
        };
        // An attempt that blocks the step (the budget at checkpoint 3, the policy), or that
        // the host had no room to start, is refused before it starts: it draws on nothing.
        let charged = move |ending: Ending| Ending {
            charge: if ending.blocked.is_some() || ending.charge == Charge::Nothing {
                Charge::Nothing
            } else {
                charge
            },
            ..ending
        };
        // Only committed receipts are in the context: a dependent never sees a result that
        // could still be rolled back.
        let context = &claimed.context;
        let mapped = step
            .input
            .resolve_item(&context.input, claimed.item.as_ref(), |id| {
                context
                    .receipts
                    .iter()
                    .find(|r| r.step == id)
                    .map(|r| ReceiptView {
                        output: r.output.clone(),
                        external_reference: r.external_reference.clone(),
                    })
            });
        let mapped = match mapped {
            Ok(v) => v,
            Err(e) => {
                let event = NewEvent::step(
                    EventKind::Conclusion,
                    step.id.as_str(),
                    Some(&claimed.attempt_id),
                    format!("{} cannot start: {e}", step.label),
                );
                return Some(Ending::terminal(
                    StepState::FailedTerminal,
                    AttemptOutcome::Rejected,
                    e.to_string(),
                    event,
                ));
            }
        };
        let input = match crate::intent::canonicalize(&mapped) {
            Ok(input) => input,
            Err(e) => {
                return Some(Ending::cannot_start(
                    claimed,
                    step,
                    StepState::FailedTerminal,
                    e,
                ));
            }
        };
        // What an approved step sends must be what was approved.
        if let Some(approval) = deployed.def.approval_of(step.id.as_str())
            && let Some(ending) = self.approval_mismatch(claimed, step, approval, &input.digest)
        {
            return Some(ending);
        }
        let component = match self
            .components
            .resolve_or_stored(&self.store, step)
            .await
            .and_then(|c| Ok((self.components.prepare(&c, step)?, c)))
        {
            Ok((prepared, _)) => prepared,
            Err(ResolveError::Store(e)) => return transient(claimed, &e),
            Err(ResolveError::Policy(e @ crate::capabilities::PolicyError::NotPinned { .. })) => {
                return Some(self.missing_allowance(claimed, step, e.to_string()));
            }
            Err(e @ ResolveError::Unverified { .. }) => {
                return Some(self.blocked_for(claimed, step, UNVERIFIED_COMPONENT, e.to_string()));
            }
            Err(e) => return Some(self.blocked(claimed, e.to_string())),
        };
        match step.kind {
            StepKind::Handler => Some(self.run_handler(claimed, step, &component, &input).await),
            // Dispatched before the component is resolved: an approval runs none.
            StepKind::Approval => None,
            StepKind::Adapter => self
                .run_adapter(
                    claimed,
                    step,
                    &component,
                    &input,
                    (kind == AttemptKind::Work).then_some(limits),
                )
                .await
                .map(|ending| Ending {
                    adapter: true,
                    ..ending
                }),
        }
        .map(charged)
    }

    fn blocked(&self, claimed: &Claimed, note: String) -> Ending {
        let event = NewEvent::step(
            EventKind::Conclusion,
            &claimed.fence.step,
            Some(&claimed.attempt_id),
            format!("Blocked: {note}"),
        );
        Ending::terminal(StepState::Blocked, AttemptOutcome::Interrupted, note, event)
    }

    /// The step stays uncertain and goes to review: the version that would recover it
    /// has another idempotency namespace than the one that may have sent the request.
    fn namespace_changed(
        &self,
        claimed: &Claimed,
        step: &StepDef,
        prepared: &Prepared,
        contract: &crate::contract::Contract,
        input: &crate::intent::CanonicalInput,
        sent: &str,
    ) -> Ending {
        let note = format!(
            "outcome unknown: the request may have been sent under key {} by a version with another idempotency namespace; the active version {}@{} declares namespace `{}`, whose key the provider would take for a new request, so docket sends nothing. Activate a version with the namespace that sent it, or resolve the step",
            short(sent),
            contract.name,
            contract.version,
            contract.idempotency.namespace
        );
        let event = NewEvent::step(
            EventKind::Conclusion,
            step.id.as_str(),
            Some(&claimed.attempt_id),
            format!("{} waits for review: {note}", step.label),
        );
        let facts = Self::facts(prepared, &input.digest);
        Ending::stopped(
            facts,
            StepState::OutcomeUnknown,
            AttemptOutcome::Interrupted,
            note,
            event,
        )
    }

    /// The step is blocked: this host gives the adapter no allowance (no
    /// `[adapters.<component>]` section, or one pinned to other digests).
    fn missing_allowance(&self, claimed: &Claimed, step: &StepDef, message: String) -> Ending {
        self.blocked_for(claimed, step, "missing_allowance", message)
    }

    /// The step is blocked for `reason` (a person's change makes it runnable; a retry
    /// then runs it), told with `message`.
    fn blocked_for(
        &self,
        claimed: &Claimed,
        step: &StepDef,
        reason: &str,
        message: String,
    ) -> Ending {
        let event = NewEvent::step(
            EventKind::Conclusion,
            step.id.as_str(),
            Some(&claimed.attempt_id),
            format!("{} blocked: {message}", step.label),
        );
        Ending {
            blocked: Some(crate::store::Blocked {
                references: Vec::new(),
                reason: reason.into(),
                limit: None,
                policy_version: None,
                message: message.clone(),
            }),
            charge: Charge::Nothing,
            ..Ending::terminal(
                StepState::Blocked,
                AttemptOutcome::Interrupted,
                message,
                event,
            )
        }
    }

    /// The attempt is refused before it starts and the step is blocked, naming the limit;
    /// an operator's extension makes it ready again.
    fn budget_exceeded(&self, claimed: &Claimed, exhausted: budget::Exhausted) -> Ending {
        let event = NewEvent::step(
            EventKind::Conclusion,
            &claimed.fence.step,
            Some(&claimed.attempt_id),
            format!(
                "Blocked by budget ({}): {}",
                exhausted.limit.as_str(),
                exhausted.message
            ),
        );
        Ending {
            blocked: Some(crate::store::Blocked {
                references: Vec::new(),
                reason: crate::budget::BLOCKED_REASON.into(),
                limit: Some(exhausted.limit.as_str().into()),
                policy_version: None,
                message: exhausted.message.clone(),
            }),
            charge: Charge::Nothing,
            ..Ending::terminal(
                StepState::Blocked,
                AttemptOutcome::BudgetExceeded,
                exhausted.message,
                event,
            )
        }
    }

    fn env(&self, claimed: &Claimed, component: &str) -> CallEnv {
        CallEnv {
            settings: Arc::new(self.components.settings(component)),
            secrets: self.secrets.current(),
            clock: self.clock.clone(),
            label: format!(
                "{}/{}/{}",
                claimed.fence.workflow_id, claimed.fence.step, claimed.attempt_id
            )
            .into(),
        }
    }

    /// Which version of which component runs, on which input.
    fn provenance(prepared: &Prepared, input_digest: &str) -> Provenance {
        Provenance {
            component: prepared.component.name().to_string(),
            component_version: prepared.component.version().to_string(),
            component_digest: prepared.component.digest.clone(),
            input_digest: input_digest.to_string(),
        }
    }

    fn facts(prepared: &Prepared, input_digest: &str) -> AttemptFacts {
        AttemptFacts {
            provenance: Some(Self::provenance(prepared, input_digest)),
            ..AttemptFacts::default()
        }
    }

    fn receipt(
        prepared: &Prepared,
        input_digest: &str,
        kind: EvidenceKind,
        reference: Option<String>,
        output: serde_json::Value,
        now: Millis,
    ) -> NewReceipt {
        NewReceipt {
            receipt_id: ReceiptId::new(now),
            evidence_kind: kind,
            provenance: Self::provenance(prepared, input_digest),
            external_reference: reference,
            output,
            author: None,
            reason: None,
            evidence: None,
        }
    }

    async fn run_handler(
        &self,
        claimed: &Claimed,
        step: &StepDef,
        prepared: &Prepared,
        input: &crate::intent::CanonicalInput,
    ) -> Ending {
        let limits = CallLimits {
            timeout: step.timeout,
        };
        let report = self
            .components
            .runtime()
            .run_handler(
                prepared,
                self.env(claimed, prepared.component.name()),
                limits,
                &input.text,
            )
            .await;
        let log = log_json(&report);
        let facts = Self::facts(prepared, &input.digest);
        let now = self.clock.now_ms();
        let (transition, outcome, note, events) = match report.outcome {
            Ok(Ok(output)) => match step.output_of(&output) {
                Ok(value) => {
                    let receipt = Self::receipt(
                        prepared,
                        &input.digest,
                        EvidenceKind::Response,
                        None,
                        value,
                        now,
                    );
                    let event = NewEvent::step(
                        EventKind::Conclusion,
                        step.id.as_str(),
                        Some(&claimed.attempt_id),
                        format!("{} succeeded: receipt {}", step.label, receipt.receipt_id),
                    );
                    (
                        StepTransition::Succeeded(Box::new(receipt)),
                        AttemptOutcome::Accepted,
                        None,
                        vec![event],
                    )
                }
                // Pure code: running it again may give another answer; no effect to keep.
                Err(mismatch) => {
                    let why = format!("the handler's output {mismatch}");
                    let (t, e) = retry_or_fail(
                        claimed,
                        step,
                        None,
                        why.clone(),
                        now,
                        crate::entropy::unit(),
                    );
                    (t, AttemptOutcome::Rejected, Some(why), vec![e])
                }
            },
            Ok(Err(crate::contract::HandlerError::InvalidInput { message })) => {
                let event = NewEvent::step(
                    EventKind::Conclusion,
                    step.id.as_str(),
                    Some(&claimed.attempt_id),
                    format!("{} rejected its input: {message}", step.label),
                );
                (
                    StepTransition::Terminal(StepState::FailedTerminal),
                    AttemptOutcome::Rejected,
                    Some(message),
                    vec![event],
                )
            }
            Ok(Err(crate::contract::HandlerError::Failed { message })) => {
                let (t, e) = retry_or_fail(
                    claimed,
                    step,
                    None,
                    message.clone(),
                    now,
                    crate::entropy::unit(),
                );
                (t, AttemptOutcome::Rejected, Some(message), vec![e])
            }
            Err(failure @ CallFailure::Capacity { .. }) => {
                return self.no_room(claimed, step, facts, log, &failure);
            }
            Err(failure) => {
                let outcome = self.failure_outcome(&failure);
                let why = failure.to_string();
                let (t, e) = retry_or_fail(
                    claimed,
                    step,
                    None,
                    why.clone(),
                    now,
                    crate::entropy::unit(),
                );
                (t, outcome, Some(why), vec![e])
            }
        };
        Ending::settled(2, facts, outcome, transition, note, log, events)
    }

    /// The host had no room to start the plugin: nothing ran, so the step is ready again
    /// shortly, whatever its retry policy allows, and the attempt is not charged to the
    /// budget — the host's capacity is not the workflow's failure.
    fn no_room(
        &self,
        claimed: &Claimed,
        step: &StepDef,
        facts: AttemptFacts,
        log: serde_json::Value,
        failure: &CallFailure,
    ) -> Ending {
        let outcome = self.failure_outcome(failure);
        let why = failure.to_string();
        let ready_at = self.clock.now_ms().saturating_add(NO_ROOM_WAIT_MS);
        let event = NewEvent::step(
            EventKind::Action,
            step.id.as_str(),
            Some(&claimed.attempt_id),
            format!("Ready again in {NO_ROOM_WAIT_MS} ms, not charged to the budget: {why}"),
        );
        let transition = StepTransition::Retry {
            ready_at,
            next_trigger: claimed.trigger,
            uncertain_since: claimed.uncertain_since,
        };
        Ending {
            charge: Charge::Nothing,
            ..Ending::settled(2, facts, outcome, transition, Some(why), log, vec![event])
        }
    }

    /// Records a result that arrived after the attempt's lease was lost.
    async fn record_late(&self, claimed: &Claimed, facts: AttemptFacts, events: Vec<NewEvent>) {
        let step = claimed.fence.step.as_str();
        let mut told: Vec<NewEvent> = events
            .into_iter()
            .map(|e| {
                let text = format!(
                    "Late result of attempt {} (its lease had expired; recovery owns the step): {}",
                    claimed.attempt_number, e.text
                );
                NewEvent::step(
                    EventKind::Observation,
                    step,
                    Some(&claimed.attempt_id),
                    text,
                )
                .with_data(e.data)
            })
            .collect();
        if told.is_empty() {
            told.push(NewEvent::step(
                EventKind::Observation,
                step,
                Some(&claimed.attempt_id),
                format!("Late result of attempt {}", claimed.attempt_number),
            ));
        }
        let late = crate::store::LateEvidence {
            workflow_id: claimed.fence.workflow_id.clone(),
            attempt_id: claimed.attempt_id.clone(),
            facts,
            events: told,
            now: self.clock.now_ms(),
        };
        if let Err(e) = self.store.late_evidence(late).await {
            tracing::error!(workflow = %claimed.fence.workflow_id, step, "recording a late result failed: {e}");
        }
    }
}

/// A retry after backoff if the step's retry policy allows another attempt that can start
/// before the workflow's deadline, else a terminal failure. Pure: the caller supplies `now`
/// and the backoff's `jitter_sample` (uniform in `0.0..=1.0`).
fn retry_or_fail(
    claimed: &Claimed,
    step: &StepDef,
    retry_after: Option<Duration>,
    why: String,
    now: Millis,
    jitter_sample: f64,
) -> (StepTransition, NewEvent) {
    let wait = step
        .retry
        .backoff(claimed.attempt_number, retry_after, jitter_sample);
    // A provider's retry-after is its number: a wait past the workflow's deadline
    // means no retry in time, not an overflowing clock.
    let ready_at = now.saturating_add(u64::try_from(wait.as_millis()).unwrap_or(u64::MAX));
    let why = if ready_at > claimed.deadline_at {
        format!("{why}; the next attempt could not start before the workflow's deadline")
    } else {
        why
    };
    if step.retry.allows_another(claimed.attempt_number) && ready_at <= claimed.deadline_at {
        let event = NewEvent::step(
            EventKind::Action,
            step.id.as_str(),
            Some(&claimed.attempt_id),
            format!("Retry scheduled in {} ms after: {why}", wait.as_millis()),
        );
        let transition = StepTransition::Retry {
            ready_at,
            next_trigger: Trigger::Retry,
            uncertain_since: None,
        };
        (transition, event)
    } else {
        let event = NewEvent::step(
            EventKind::Conclusion,
            step.id.as_str(),
            Some(&claimed.attempt_id),
            format!(
                "{} failed after {} attempts: {why}",
                step.label, claimed.attempt_number
            ),
        );
        (StepTransition::Terminal(StepState::FailedTerminal), event)
    }
}

/// What the row `id` of a workflow of `def` runs: a step of the definition, or the
/// compensation of one (`<step>.compensate`).
pub(crate) fn step_of(def: &crate::workflow::WorkflowDef, id: &str) -> Option<StepDef> {
    match crate::course::compensated_step(id) {
        Some(of) => step_of(def, of).map(|s| compensation_def(&s)),
        None => match crate::workflow::item_of(id) {
            // An item of a batch step runs the step's adapter on its own item.
            Some((of, key)) => def.step(of).filter(|s| s.batch.is_some()).map(|s| StepDef {
                id: s.id.item(key),
                batch: None,
                ..s.clone()
            }),
            None => def.step(id).cloned(),
        },
    }
}

/// The step a compensation row runs: the original step's adapter, under the id
/// `<step>.compensate`, with the compensation's input mapping (default: the step's own) and
/// retry policy.
fn compensation_def(step: &StepDef) -> StepDef {
    let (input, retry) = match &step.compensation {
        Some(c) => (
            c.input.clone().unwrap_or_else(|| step.input.clone()),
            c.retry.clone(),
        ),
        None => (step.input.clone(), crate::workflow::RetryPolicy::default()),
    };
    StepDef {
        id: step.id.compensation(),
        label: format!("Compensation of {}", step.label),
        input,
        outputs: Vec::new(),
        retry,
        milestone: None,
        compensation: None,
        ..step.clone()
    }
}

impl<S> Scheduler<S> {
    /// The attempt outcome of a call that ended without a plugin value, counted by kind.
    pub(crate) fn failure_outcome(&self, f: &CallFailure) -> AttemptOutcome {
        match f {
            CallFailure::Timeout { .. } => {
                self.metrics.trap("timeout");
                AttemptOutcome::TimedOut
            }
            CallFailure::MemoryCap { .. } => {
                self.metrics.trap("memory_cap");
                AttemptOutcome::Trapped
            }
            CallFailure::Trap { .. } => {
                self.metrics.trap("trap");
                AttemptOutcome::Trapped
            }
            CallFailure::HostResources { .. } => {
                self.metrics.trap("host_resources");
                AttemptOutcome::Trapped
            }
            CallFailure::Instantiate { .. } => {
                self.metrics.trap("instantiate");
                AttemptOutcome::Interrupted
            }
            CallFailure::Capacity { .. } => {
                self.metrics.trap("capacity");
                AttemptOutcome::Interrupted
            }
            CallFailure::NotSupported { .. } => AttemptOutcome::Interrupted,
        }
    }
}

/// The first characters of a key: enough to recognise, not to reuse.
pub fn short(key: &str) -> String {
    key.chars().take(12).collect()
}

/// A lease renewal under way, counted while it lasts.
struct Renewing<'a>(&'a std::sync::atomic::AtomicUsize);

impl<'a> Renewing<'a> {
    fn start(count: &'a std::sync::atomic::AtomicUsize) -> Self {
        count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Self(count)
    }
}

impl Drop for Renewing<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}
