//! The adapter path of an attempt: checkpoints 2 to 5 around the call (invoke, compensate,
//! or a recovery query by the stable reference), in order around what [`preflight`]
//! decided, and what each typed result or uncertainty means for the step under the
//! adapter's contract.

use super::preflight::{Call, Preflight, PreflightFacts, preflight};
use super::*;

/// The provider's retry-after, when its answer gave one: a floor for the next attempt.
pub(super) fn retry_after_of(e: &EffectError) -> Option<Duration> {
    match e {
        EffectError::RateLimited { retry_after_ms, .. }
        | EffectError::Unavailable {
            retry_after_ms: Some(retry_after_ms),
            ..
        } => Some(Duration::from_millis(*retry_after_ms)),
        _ => None,
    }
}

/// Why an attempt stops at a checkpoint.
pub(super) enum Halt {
    /// The lease is gone: recovery owns the step.
    Gone,
    /// The workflow's cancellation fenced checkpoint 3: the request must not leave.
    Cancelled,
    /// The input differs from the one the step's request was recorded with (why).
    InputChanged(String),
}

/// A request about to leave (checkpoint 3): what it costs, and the contract of the
/// provider it goes to (how long that provider remembers its key).
#[derive(Clone, Copy)]
pub(super) struct Sent<'a> {
    cost: u32,
    contract: &'a crate::contract::Contract,
    /// When the request's identity is recorded: the provider's memory of the key, and the
    /// step's uncertainty, count from it.
    at: Millis,
}

impl<S> Scheduler<S>
where
    S: ExecutorStore + DefinitionStore + crate::store::ComponentStore + Clone + 'static,
{
    /// Writes a checkpoint; `Err` if the attempt must stop: its lease is gone (another
    /// worker owns the step) or, at checkpoint 3, the workflow's cancellation fences it.
    pub(super) async fn checkpoint(
        &self,
        claimed: &Claimed,
        n: u8,
        facts: AttemptFacts,
        sent: Option<Sent<'_>>,
        events: Vec<NewEvent>,
    ) -> Result<(), Halt> {
        let now = self.clock.now_ms();
        let request = CheckpointRequest {
            fence: claimed.fence.clone(),
            attempt_id: claimed.attempt_id.clone(),
            checkpoint: n,
            facts,
            external_call: sent.map(|s| s.cost),
            remembered_until: sent.and_then(|s| s.contract.remembered_until(s.at)),
            events,
            now,
        };
        let late = (n == 5).then(|| (request.facts.clone(), request.events.clone()));
        match self.store.checkpoint(request).await {
            Ok(()) => {
                self.failpoint(n, claimed).await;
                Ok(())
            }
            Err(StoreError::Cancelled { .. }) => Err(Halt::Cancelled),
            Err(e @ StoreError::InputChanged { .. }) => Err(Halt::InputChanged(e.to_string())),
            Err(StoreError::LeaseLost { .. }) if late.is_some() => {
                // The call returned after recovery took the step over: what it returned is
                // still evidence, kept on the attempt and told on the timeline.
                let (facts, events) = late.expect("checked");
                self.record_late(claimed, facts, events).await;
                Err(Halt::Gone)
            }
            Err(e) => {
                tracing::warn!(workflow = %claimed.fence.workflow_id, step = %claimed.fence.step, "checkpoint {n} not recorded: {e}");
                Err(Halt::Gone)
            }
        }
    }

    /// The policy in force denies the attempt: it ends before checkpoint 3, and the step is
    /// blocked (never a receipt) until a newer version allows it or an operator makes an
    /// exception.
    fn policy_denied(
        &self,
        claimed: &Claimed,
        step: &StepDef,
        facts: AttemptFacts,
        version: u32,
        reason: String,
    ) -> Ending {
        let note = format!("blocked under policy {version}: {reason}");
        let event = NewEvent::step(
            EventKind::Conclusion,
            step.id.as_str(),
            Some(&claimed.attempt_id),
            format!("{} {note}", step.label),
        );
        Ending {
            adapter: true,
            blocked: Some(crate::store::Blocked {
                references: Vec::new(),
                reason: crate::policy::BLOCKED_REASON.into(),
                limit: None,
                policy_version: Some(version),
                message: reason,
            }),
            ..Ending::stopped(
                facts,
                StepState::Blocked,
                AttemptOutcome::Interrupted,
                note,
                event,
            )
        }
    }

    /// The attempt's request never leaves: the workflow's cancellation fenced checkpoint
    /// 3. A step with no earlier uncertainty ends `cancelled`; one whose earlier request
    /// may have been sent stays for review (a same-key retry now could make the effect the
    /// client cancelled).
    fn fenced(
        &self,
        claimed: &Claimed,
        step: &StepDef,
        prepared: &Prepared,
        input: &crate::intent::CanonicalInput,
    ) -> Ending {
        let (state, note) = match claimed.uncertain_since {
            None => (
                StepState::Cancelled,
                "the workflow's cancellation stopped it before its request was sent (checkpoint 3)"
                    .to_string(),
            ),
            Some(_) => (
                StepState::OutcomeUnknown,
                "outcome unknown: an earlier request may have been sent, and the workflow's cancellation stopped a same-key retry that could make the effect now; query the provider or resolve the step".to_string(),
            ),
        };
        let event = NewEvent::step(
            EventKind::Conclusion,
            step.id.as_str(),
            Some(&claimed.attempt_id),
            format!("{}: {note}", step.label),
        );
        let facts = Self::facts(prepared, &input.digest);
        Ending {
            adapter: true,
            ..Ending::stopped(facts, state, AttemptOutcome::Interrupted, note, event)
        }
    }

    /// Checkpoint 3 found the step's request recorded with another input (`why`): nothing
    /// is sent under the step's identity, and a person decides (invariant 3).
    fn input_changed(
        &self,
        claimed: &Claimed,
        step: &StepDef,
        prepared: &Prepared,
        input: &crate::intent::CanonicalInput,
        why: String,
    ) -> Ending {
        let event = NewEvent::step(
            EventKind::Conclusion,
            step.id.as_str(),
            Some(&claimed.attempt_id),
            format!("{} waits for review: {why}", step.label),
        );
        let facts = Self::facts(prepared, &input.digest);
        Ending {
            adapter: true,
            ..Ending::stopped(
                facts,
                StepState::WaitingForReview,
                AttemptOutcome::Interrupted,
                why,
                event,
            )
        }
    }

    /// The attempt's request, in order: what [`preflight`] decides from what was read,
    /// checkpoint 2, the query or checkpoint 3 and the call (4), then its outcome (5).
    pub(super) async fn run_adapter(
        &self,
        claimed: &Claimed,
        step: &StepDef,
        prepared: &Prepared,
        input: &crate::intent::CanonicalInput,
        // `None` for a compensation or a query, which no call budget refuses.
        limits: Option<crate::budget::Limits>,
    ) -> Option<Ending> {
        let governance = self.components.governance();
        let in_force = governance.in_force();
        let decided = preflight(&PreflightFacts {
            claimed,
            step,
            component: (prepared.component.name(), prepared.component.version()),
            contract: prepared.component.contract(),
            limits,
            policy: &in_force,
            environment: governance.environment(),
        });
        let (contract, key, call, policy) = match decided {
            Preflight::Proceed {
                contract,
                key,
                call,
                policy,
            } => (contract, key, call, policy),
            Preflight::Block { reason } => {
                return Some(Ending::cannot_start(
                    claimed,
                    step,
                    StepState::Blocked,
                    reason,
                ));
            }
            Preflight::OverBudget(exhausted) => {
                return Some(self.budget_exceeded(claimed, exhausted));
            }
            Preflight::NamespaceChanged { contract, sent } => {
                return Some(
                    self.namespace_changed(claimed, step, prepared, contract, input, sent),
                );
            }
            Preflight::Denied { policy, reason } => {
                let version = policy.version;
                let facts = AttemptFacts {
                    policy: Some(policy),
                    ..Self::facts(prepared, &input.digest)
                };
                return Some(self.policy_denied(claimed, step, facts, version, reason));
            }
        };
        // Checkpoint 2: state, policy and budget validated; what will run is recorded.
        let facts = AttemptFacts {
            policy,
            ..Self::facts(prepared, &input.digest)
        };
        self.checkpoint(claimed, 2, facts, None, vec![])
            .await
            .ok()?;
        let env = self.env(claimed, prepared.component.name());
        let limits = CallLimits {
            timeout: step.timeout,
        };
        let original = match call {
            Call::Query { reference } => {
                let report = self
                    .components
                    .runtime()
                    .query(prepared, env, limits, &reference)
                    .await;
                return Some(self.after_query(claimed, step, prepared, contract, input, report));
            }
            Call::Invoke => None,
            Call::Compensate { original } => Some(original),
        };
        // Checkpoint 3: from here on the effect may have happened.
        let event = NewEvent::step(
            EventKind::Action,
            step.id.as_str(),
            Some(&claimed.attempt_id),
            // Written before the call: it may still never leave (a crash right here).
            format!(
                "Sending the request to {} with idempotency key {}…",
                prepared.component.name(),
                short(&key)
            ),
        );
        let identity = AttemptFacts {
            request_identity: Some(key.clone()),
            ..AttemptFacts::default()
        };
        let sent = Sent {
            cost: step.cost,
            contract,
            at: self.clock.now_ms(),
        };
        match self
            .checkpoint(claimed, 3, identity, Some(sent), vec![event])
            .await
        {
            Ok(()) => {}
            Err(Halt::Cancelled) => return Some(self.fenced(claimed, step, prepared, input)),
            Err(Halt::InputChanged(why)) => {
                return Some(self.input_changed(claimed, step, prepared, input, why));
            }
            Err(Halt::Gone) => return None,
        }
        let report = match original {
            // An item of a batch step whose adapter takes many items in one call: sent with
            // the other items of its batch that are at this point now.
            None if contract.batch.is_some_and(|n| n > 1)
                && prepared.batches()
                && crate::workflow::item_of(&claimed.fence.step).is_some() =>
            {
                let (batch, _) = crate::workflow::item_of(&claimed.fence.step).unwrap_or_default();
                let item = crate::contract::BatchItem {
                    idempotency_key: key,
                    input: input.text.clone(),
                };
                self.bulk
                    .invoke(
                        self.components.runtime(),
                        prepared,
                        env,
                        limits,
                        format!("{}\u{0}{batch}", claimed.fence.workflow_id),
                        item,
                        contract.batch.unwrap_or(1) as usize,
                        claimed.attempt_number,
                    )
                    .await
            }
            None => {
                let request = EffectRequest {
                    idempotency_key: key,
                    input: input.text.clone(),
                    attempt: claimed.attempt_number,
                };
                self.components
                    .runtime()
                    .invoke(prepared, env, limits, &request)
                    .await
            }
            Some(receipt) => {
                let request = CompensationRequest {
                    idempotency_key: key,
                    input: input.text.clone(),
                    original_receipt: PluginReceipt {
                        external_reference: receipt.external_reference.clone().unwrap_or_default(),
                        output: receipt.output.to_string(),
                    },
                    attempt: claimed.attempt_number,
                };
                self.components
                    .runtime()
                    .compensate(prepared, env, limits, &request)
                    .await
            }
        };
        // Checkpoint 4 is the call itself: nothing is written before it returns.
        self.failpoint(4, claimed).await;
        self.after_invoke(claimed, step, prepared, sent, input, report)
            .await
    }

    pub(super) async fn after_invoke(
        &self,
        claimed: &Claimed,
        step: &StepDef,
        prepared: &Prepared,
        sent: Sent<'_>,
        input: &crate::intent::CanonicalInput,
        report: CallReport<Result<PluginReceipt, EffectError>>,
    ) -> Option<Ending> {
        let (contract, sent_at) = (sent.contract, sent.at);
        let now = self.clock.now_ms();
        let log = log_json(&report);
        let id = step.id.as_str();
        let att = Some(&claimed.attempt_id);
        let (outcome, observation) = match &report.outcome {
            Ok(Ok(r)) => (
                AttemptOutcome::Accepted,
                format!(
                    "{} accepted the request: {}",
                    contract.name, r.external_reference
                ),
            ),
            Ok(Err(e @ EffectError::NotSent { .. })) => {
                (AttemptOutcome::TransportFailed, e.to_string())
            }
            Ok(Err(e @ EffectError::OutcomeUnknown { .. })) => {
                (AttemptOutcome::TimedOut, e.to_string())
            }
            Ok(Err(e)) => (AttemptOutcome::Rejected, e.to_string()),
            Err(f) => (self.failure_outcome(f), f.to_string()),
        };
        let mut facts = Self::facts(prepared, &input.digest);
        facts.outcome = Some(outcome);
        let ending = |transition: StepTransition,
                      note: Option<String>,
                      events: Vec<NewEvent>,
                      checkpoint: u8| Ending {
            checkpoint,
            facts: facts.clone(),
            transition,
            note,
            log: log.clone(),
            events,
            adapter: true,
            blocked: None,
            charge: crate::budget::Charge::Attempt,
        };
        // A step that nothing automatic will run again, with why, told as a conclusion.
        let terminal = |state: StepState, note: String, headline: &str| {
            let text = format!("{} {headline}: {note}", step.label);
            let event = NewEvent::step(EventKind::Conclusion, id, att, text);
            ending(StepTransition::Terminal(state), Some(note), vec![event], 5)
        };
        let ending = match report.outcome {
            Ok(Ok(r)) => {
                let output = match step.output_of(&r.output) {
                    Ok(output) => output,
                    Err(mismatch) => {
                        let (note, event) = unusable_answer(
                            step,
                            att,
                            &contract.name,
                            &r.external_reference,
                            &r.output,
                            &mismatch,
                        );
                        return self
                            .conclude_call(
                                claimed,
                                ending(
                                    StepTransition::Terminal(StepState::WaitingForReview),
                                    Some(note),
                                    vec![event],
                                    5,
                                ),
                                outcome,
                                observation,
                            )
                            .await;
                    }
                };
                let receipt = Self::receipt(
                    prepared,
                    &input.digest,
                    EvidenceKind::Response,
                    Some(r.external_reference.clone()),
                    output,
                    now,
                );
                let event = NewEvent::step(
                    EventKind::Conclusion,
                    id,
                    att,
                    format!(
                        "{} succeeded: receipt {} for {}",
                        step.label, receipt.receipt_id, r.external_reference
                    ),
                );
                ending(
                    StepTransition::Succeeded(Box::new(receipt)),
                    None,
                    vec![event],
                    6,
                )
            }
            Ok(Err(EffectError::Rejected { code, message })) => terminal(
                StepState::FailedTerminal,
                format!("rejected ({code}): {message}"),
                "failed permanently",
            ),
            Ok(Err(EffectError::Unauthorized { message })) => terminal(
                StepState::Blocked,
                format!("unauthorized: {message}; check the adapter's credentials and policy"),
                "blocked",
            ),
            Ok(Err(EffectError::IdempotencyConflict { message })) => terminal(
                StepState::WaitingForReview,
                format!(
                    "the provider saw this key with a different request: {message}; never retried under a new key"
                ),
                "needs review",
            ),
            Ok(Err(
                e @ (EffectError::RateLimited { .. }
                | EffectError::Unavailable { .. }
                | EffectError::NotSent { .. }),
            )) => {
                let retry_after = retry_after_of(&e);
                if let Some(after) = retry_after.filter(|d| !d.is_zero()) {
                    self.pause_adapter(claimed, step, after, &e, now).await;
                }
                let (t, event) = retry_or_fail(
                    claimed,
                    step,
                    retry_after,
                    e.to_string(),
                    now,
                    crate::entropy::unit(),
                );
                ending(t, Some(e.to_string()), vec![event], 5)
            }
            // The effect may have happened: recover by the contract, evidence before action.
            Ok(Err(EffectError::OutcomeUnknown { .. })) | Err(_) => {
                // Uncertain since the request's identity was first recorded.
                let since = claimed.uncertain_since.unwrap_or(sent_at);
                let c = self.uncertain(claimed, step, contract, since, false);
                ending(c.transition, Some(c.note), vec![c.event], 5)
            }
        };
        self.conclude_call(claimed, ending, outcome, observation)
            .await
    }

    /// A provider asked to wait `after`: every host's claims of the adapter wait with this
    /// step, rather than each step backing off alone while the others keep calling.
    async fn pause_adapter(
        &self,
        claimed: &Claimed,
        step: &StepDef,
        after: Duration,
        answer: &EffectError,
        now: Millis,
    ) {
        let pause = crate::store::AdapterPause {
            adapter: claimed
                .adapter
                .clone()
                .unwrap_or_else(|| step.component.clone()),
            until: now.saturating_add(after.as_millis() as u64),
            cause: match answer {
                EffectError::RateLimited { .. } => "rate_limited",
                _ => "unavailable",
            }
            .into(),
            reason: answer.to_string(),
            host: self.config.owner.clone(),
            at: now,
        };
        // The step's own retry waits as long; a pause not recorded costs only calls.
        if let Err(e) = self.store.pause_adapter(pause).await {
            tracing::warn!("could not record the pause of {}: {e}", step.component);
        }
    }

    /// Checkpoint 5 of a call: the result, or the uncertainty, is stored before anything
    /// follows.
    async fn conclude_call(
        &self,
        claimed: &Claimed,
        ending: Ending,
        outcome: AttemptOutcome,
        observation: String,
    ) -> Option<Ending> {
        let id = claimed.fence.step.as_str();
        let att = Some(&claimed.attempt_id);
        let result_facts = AttemptFacts {
            observation: Some(observation.clone()),
            outcome: Some(outcome),
            result: Some(AttemptResult {
                outcome,
                transition: ending.transition.clone(),
                note: ending.note.clone(),
                events: ending.events.clone(),
            }),
            ..AttemptFacts::default()
        };
        let seen = NewEvent::step(EventKind::Observation, id, att, observation);
        self.checkpoint(claimed, 5, result_facts, None, vec![seen])
            .await
            .ok()?;
        Some(ending)
    }

    pub(super) fn after_query(
        &self,
        claimed: &Claimed,
        step: &StepDef,
        prepared: &Prepared,
        contract: &Contract,
        input: &crate::intent::CanonicalInput,
        report: CallReport<Result<Lookup, EffectError>>,
    ) -> Ending {
        let now = self.clock.now_ms();
        let log = log_json(&report);
        let mut facts = Self::facts(prepared, &input.digest);
        facts.request_identity = Some(external_idempotency_key(
            &claimed.fence.workflow_id,
            claimed.identity(),
            &contract.idempotency.namespace,
            claimed.environment.as_deref(),
        ));
        let id = step.id.as_str();
        let att = Some(&claimed.attempt_id);
        let since = claimed.uncertain_since.unwrap_or(now);
        // A compensation asks about the original effect: only its reversal closes it.
        let compensating = crate::course::compensated_step(&claimed.fence.step).is_some();
        let (transition, note, events, outcome) = match report.outcome {
            Ok(Ok(Lookup::Found {
                status,
                provider_status,
                ..
            })) if compensating && status != EffectStatus::Reversed => {
                let seen = NewEvent::step(
                    EventKind::Observation,
                    id,
                    att,
                    format!(
                        "Lookup of the original effect at {} shows it still in effect ({provider_status}): not reversed (yet)",
                        contract.name
                    ),
                );
                let c = self.uncertain(claimed, step, contract, since, true);
                (
                    c.transition,
                    Some(c.note),
                    vec![seen, c.event],
                    AttemptOutcome::LookupAbsent,
                )
            }
            Ok(Ok(Lookup::Found {
                status: EffectStatus::Refused,
                provider_status,
                ..
            })) => {
                let note = format!(
                    "the provider says the request did not take effect ({provider_status}); a person decides: docket never retries on this alone"
                );
                let event = NewEvent::step(
                    EventKind::Conclusion,
                    id,
                    att,
                    format!("{} waits for review: {note}", step.label),
                );
                (
                    StepTransition::Terminal(StepState::WaitingForReview),
                    Some(note),
                    vec![event],
                    AttemptOutcome::LookupFound,
                )
            }
            Ok(Ok(Lookup::Found { receipt, .. })) if step.output_of(&receipt.output).is_err() => {
                let mismatch = step
                    .output_of(&receipt.output)
                    .expect_err("checked by the guard");
                let (note, event) = unusable_answer(
                    step,
                    att,
                    &contract.name,
                    &receipt.external_reference,
                    &receipt.output,
                    &mismatch,
                );
                (
                    StepTransition::Terminal(StepState::WaitingForReview),
                    Some(note),
                    vec![event],
                    AttemptOutcome::LookupFound,
                )
            }
            Ok(Ok(Lookup::Found {
                receipt,
                provider_status,
                ..
            })) => {
                let output = step
                    .output_of(&receipt.output)
                    .expect("a mismatch is taken by the arm before");
                let r = Self::receipt(
                    prepared,
                    &input.digest,
                    EvidenceKind::Query,
                    Some(receipt.external_reference.clone()),
                    output,
                    now,
                );
                let seen = NewEvent::step(
                    EventKind::Observation,
                    id,
                    att,
                    if compensating {
                        format!(
                            "Lookup of the original effect at {} shows {} reversed ({provider_status})",
                            contract.name, receipt.external_reference
                        )
                    } else {
                        format!(
                            "Lookup by reference found {} at {}",
                            receipt.external_reference, contract.name
                        )
                    },
                );
                let done = NewEvent::step(
                    EventKind::Conclusion,
                    id,
                    att,
                    format!(
                        "{} verified by query: receipt {} for {}",
                        step.label, r.receipt_id, receipt.external_reference
                    ),
                );
                (
                    StepTransition::Succeeded(Box::new(r)),
                    None,
                    vec![seen, done],
                    AttemptOutcome::LookupFound,
                )
            }
            Ok(Ok(Lookup::Absent)) => {
                let seen = NewEvent::step(
                    EventKind::Observation,
                    id,
                    att,
                    format!(
                        "Lookup by reference at {} found nothing (yet)",
                        contract.name
                    ),
                );
                let c = self.uncertain(claimed, step, contract, since, true);
                (
                    c.transition,
                    Some(c.note),
                    vec![seen, c.event],
                    AttemptOutcome::LookupAbsent,
                )
            }
            // A lookup refused for its credentials (a secret its grant lacks, a token the
            // provider turned down) will not succeed by asking again: a person looks.
            Ok(Err(e @ EffectError::Unauthorized { .. })) => {
                let seen = NewEvent::step(
                    EventKind::Observation,
                    id,
                    att,
                    format!("Lookup refused: {e}"),
                );
                let c = self.refused_lookup(claimed, step, contract, since, &e);
                (
                    c.transition,
                    Some(c.note),
                    vec![seen, c.event],
                    AttemptOutcome::TransportFailed,
                )
            }
            Ok(Err(e)) => {
                let seen = NewEvent::step(
                    EventKind::Observation,
                    id,
                    att,
                    format!("Lookup failed: {e}"),
                );
                let c = self.uncertain_after_failed_lookup(claimed, step, contract, since);
                (
                    c.transition,
                    Some(c.note),
                    vec![seen, c.event],
                    AttemptOutcome::TransportFailed,
                )
            }
            Err(f) => {
                let seen = NewEvent::step(
                    EventKind::Observation,
                    id,
                    att,
                    format!("Lookup did not complete: {f}"),
                );
                let c = self.uncertain_after_failed_lookup(claimed, step, contract, since);
                (
                    c.transition,
                    Some(c.note),
                    vec![seen, c.event],
                    self.failure_outcome(&f),
                )
            }
        };
        Ending::settled(5, facts, outcome, transition, note, log, events)
    }

    /// The step stays uncertain and goes to review: its lookup was refused, and nothing
    /// automatic may prove or repeat the effect in its place.
    fn refused_lookup(
        &self,
        claimed: &Claimed,
        step: &StepDef,
        contract: &Contract,
        since: Millis,
        refusal: &EffectError,
    ) -> Conclusion {
        let u = Uncertainty {
            since,
            now: self.clock.now_ms(),
            lookup_absent: false,
            ask_again_after: 0,
            attempts_left: false,
            remembered_until: claimed.key_remembered_until,
        };
        let told = Told {
            step: step.id.as_str(),
            attempt: Some(&claimed.attempt_id),
            cause: Cause::Call { label: &step.label },
        };
        let reason = format!(
            "the lookup by reference was refused ({refusal}); fix the lookup's credentials or grant, then query again, or resolve the step from the provider's own record"
        );
        conclude(
            contract,
            u,
            crate::scheduler::recovery::Verdict::Review { reason },
            told,
        )
    }

    /// The step's next state when its effect's outcome is unknown: the contract decides,
    /// evidence before action.
    pub(crate) fn uncertain(
        &self,
        claimed: &Claimed,
        step: &StepDef,
        contract: &Contract,
        since: Millis,
        lookup_absent: bool,
    ) -> Conclusion {
        self.uncertain_after(claimed, step, contract, since, lookup_absent, 0)
    }

    /// [`Self::uncertain`] after a lookup that failed: asked again only after the step's
    /// backoff for this attempt, so a provider that is down is not asked in a tight loop.
    fn uncertain_after_failed_lookup(
        &self,
        claimed: &Claimed,
        step: &StepDef,
        contract: &Contract,
        since: Millis,
    ) -> Conclusion {
        let wait = step.retry.backoff(claimed.attempt_number, None, 0.0);
        let wait = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
        self.uncertain_after(claimed, step, contract, since, false, wait)
    }

    fn uncertain_after(
        &self,
        claimed: &Claimed,
        step: &StepDef,
        contract: &Contract,
        since: Millis,
        lookup_absent: bool,
        ask_again_after: Millis,
    ) -> Conclusion {
        let u = Uncertainty {
            since,
            now: self.clock.now_ms(),
            lookup_absent,
            ask_again_after,
            attempts_left: step.retry.allows_another(claimed.attempt_number),
            remembered_until: claimed.key_remembered_until,
        };
        let told = Told {
            step: step.id.as_str(),
            attempt: Some(&claimed.attempt_id),
            cause: Cause::Call { label: &step.label },
        };
        let verdict = super::super::Failpoint::verdict(self.config.failpoint, contract, u);
        conclude(contract, u, verdict, told)
    }
}

/// A provider's answer that is not the receipt its step declares (not JSON, or without a
/// field later steps read): the effect happened, so it is kept as evidence on the timeline
/// and the step waits for a person, never a receipt that would release dependents which
/// then fail on the missing field (and could compensate an effect that was fine).
fn unusable_answer(
    step: &StepDef,
    attempt: Option<&crate::intent::AttemptId>,
    provider: &str,
    reference: &str,
    answer: &str,
    mismatch: &crate::workflow::OutputMismatch,
) -> (String, NewEvent) {
    let note = format!(
        "the provider's answer {mismatch}; resolve the step as succeeded with the fields in `output`, or retry with the same key"
    );
    let event = NewEvent::step(
        EventKind::Conclusion,
        step.id.as_str(),
        attempt,
        format!(
            "{} needs review: {provider} accepted the request ({reference}), but the provider's answer {mismatch}",
            step.label
        ),
    )
    .with_data(serde_json::json!({
        "external_reference": reference,
        "answer": answer,
    }));
    (note, event)
}
