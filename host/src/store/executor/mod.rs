//! The scheduler's writes, written once for every backend: checkpoints and finishes (all
//! fenced by the lease token), renewals, the release of a stopping host's leases, and what
//! recovery reads. A backend keeps only its claim, and may run finishes its own batched
//! way ([`Backend::finish`]); the rules — the fence, cancellation fencing, the first
//! request's input digest, the budget's counters, the release of dependents — are here.

mod checkpoint;
pub(crate) mod plan;
mod settle;
pub(crate) mod sqlite;

pub(crate) use checkpoint::checkpoint;
pub(crate) use settle::{recompute_state, recompute_state_tallying};

use super::StepTransition;
use super::leases;
use super::plan::{Param, values};
use super::rows::{self, Columns};
use super::tx::{Backend, Tx, Write};
use super::{
    AttemptFacts, CheckpointRequest, ClaimRequest, Claimed, ExecutorStore, ExpiredLease, Fence,
    FinishOutcome, FinishRequest, LateEvidence, RenewRequest, StoreError, StoreResult,
};
use crate::intent::{AttemptId, Millis, NewEvent, WorkflowId, WorkflowState};
use std::sync::LazyLock;

/// The statements of the scheduler's writes. Parameters, in order:
/// - `hold`, `hold_with_workflow` (the step's lease, with its input digest, the attempt's
///   and the workflow's `cancel_on`; the second also holds the workflow row): workflow id,
///   step, lease token, attempt id;
/// - `facts`: the values of [`plan::facts_params`];
/// - `keep_input_digest`: digest, workflow id, step, when the key was sent, until when the
///   provider remembers it;
/// - `count_call`: workflow id, cost;
/// - `note_policy`: policy version, workflow id; `spend_exception`: workflow id, step;
/// - `finish_step`: state, ready at, next trigger, uncertain since, receipt id, note,
///   workflow id, step, lease token, expired before, blocked, decided at, attempt id;
/// - `counters` (holding the workflow's row): workflow id; `charge`: runtime, events, workflow id, attempts given back,
///   queries from the reserve;
/// - `pending`: workflow id; `after`: workflow id, step; `release`: now, workflow id, step;
/// - `roles`, `deps`: workflow id; `set_step_state`: state, workflow id, step;
///   `insert_compensation`: workflow id, step, state, ready at, the step it compensates;
///   `insert_dep`: workflow id,
///   step, depends on;
/// - `set_state`: state, ended at, workflow id; `changed`: workflow id;
///   `key_retention`: ended at, workflow id.
pub(crate) struct Sql {
    pub hold: &'static str,
    pub hold_with_workflow: &'static str,
    pub facts: &'static str,
    pub keep_input_digest: &'static str,
    pub count_call: &'static str,
    pub note_policy: &'static str,
    pub spend_exception: &'static str,
    pub finish_step: &'static str,
    pub counters: &'static str,
    pub charge: &'static str,
    pub pending: &'static str,
    pub after: &'static str,
    pub release: &'static str,
    pub roles: &'static str,
    pub deps: &'static str,
    pub set_step_state: &'static str,
    pub insert_compensation: &'static str,
    pub insert_dep: &'static str,
    pub set_state: &'static str,
    pub changed: &'static LazyLock<String>,
    pub key_retention: &'static str,
    pub expired: &'static LazyLock<String>,
}

/// The fence's read; the caller appends the lock its database takes.
macro_rules! hold {
    ($lock:literal) => {
        concat!(
            "SELECT s.input_digest AS step_digest, a.input_digest AS attempt_digest, w.cancel_on
             FROM steps s JOIN workflows w ON w.workflow_id = s.workflow_id
             LEFT JOIN attempts a ON a.attempt_id = $4
             WHERE s.workflow_id = $1 AND s.step = $2 AND s.lease_token = $3
               AND s.state = 'running'",
            $lock
        )
    };
}
pub(crate) use hold;

/// The facts' write; `$greatest` is the database's two-argument maximum.
macro_rules! facts {
    ($greatest:literal) => {
        concat!(
            "UPDATE attempts SET checkpoint = ",
            $greatest,
            "(checkpoint, $1),
             component = COALESCE($2, component), component_version = COALESCE($3, component_version),
             component_digest = COALESCE($4, component_digest), input_digest = COALESCE($5, input_digest),
             request_identity = COALESCE($6, request_identity), observation = COALESCE($7, observation),
             outcome = COALESCE($8, outcome), finished_at = COALESCE($9, finished_at),
             log = COALESCE($10, log), result = COALESCE($11, result), policy = COALESCE($12, policy)
             WHERE attempt_id = $13"
        )
    };
}
pub(crate) use facts;

/// The workflow record a change of state is told from, with the number of its entry.
static CHANGED: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT {}, next_seq - 1 AS event_seq FROM workflows WHERE workflow_id = $1",
        rows::WORKFLOW_COLUMNS
    )
});

/// The expired leases' read; `$order` breaks ties of expiry its database's way.
macro_rules! expired {
    ($order:literal) => {
        std::sync::LazyLock::new(|| {
            format!(
                "SELECT {}
                 FROM steps s JOIN workflows w ON w.workflow_id = s.workflow_id
                 LEFT JOIN attempts a
                   ON a.workflow_id = s.workflow_id AND a.step = s.step AND a.number = s.attempts
                 WHERE s.state = 'running' AND s.lease_expires_at < $1
                 ORDER BY s.lease_expires_at{} LIMIT $2",
                $crate::store::rows::EXPIRED_LEASE_COLUMNS,
                $order
            )
        })
    };
}
pub(crate) use expired;

static EXPIRED: LazyLock<String> = expired!(", s.ord");

/// The statements as both databases run them (see [`super::tx`] on placeholders); a
/// backend's module beside this one replaces the few that backend writes its own way.
pub(crate) const SQL: Sql = Sql {
    // The step's row is held to the commit, so recovery cannot take the lease over in
    // between; the workflow's too when a cancellation fences the checkpoint or a call is
    // counted, so a cancellation commits either before (and is seen) or after.
    hold: hold!(" FOR UPDATE OF s"),
    hold_with_workflow: hold!(" FOR UPDATE OF s, w"),
    facts: facts!("GREATEST"),
    // The step's first request: its input and, for a provider that deduplicates, how long
    // its key is remembered.
    keep_input_digest: "UPDATE steps SET input_digest = $1, key_sent_at = $4,
                            key_remembered_until = $5
                        WHERE workflow_id = $2 AND step = $3 AND input_digest IS NULL",
    count_call: "UPDATE workflows SET external_calls_used = external_calls_used + 1,
                     cost_used = cost_used + $2
                 WHERE workflow_id = $1",
    note_policy: "UPDATE workflows SET policy_current = GREATEST(policy_current, $1)
                  WHERE workflow_id = $2",
    spend_exception: "UPDATE steps SET policy_exception = NULL WHERE workflow_id = $1 AND step = $2",
    // The step's transition doubles as the fence: no row means the lease is gone.
    finish_step: "UPDATE steps SET state = $1, ready_at = $2, next_trigger = COALESCE($3, next_trigger),
                      uncertain_since = CASE WHEN $1 = 'succeeded' THEN NULL
                                             ELSE COALESCE(uncertain_since, $4) END,
                      receipt_id = COALESCE($5, receipt_id), note = $6, blocked = $11,
                      lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL
                  WHERE workflow_id = $7 AND step = $8 AND lease_token = $9 AND state = 'running'
                    AND ($10 IS NULL OR lease_expires_at < $10)
                    AND ($12 IS NULL
                         OR (SELECT checkpoint FROM attempts WHERE attempt_id = $13) = $12)",
    counters: "SELECT next_seq, state, cancel_on FROM workflows WHERE workflow_id = $1 FOR UPDATE",
    charge: "UPDATE workflows SET runtime_used_ms = runtime_used_ms + $1,
                 next_seq = next_seq + $2, attempts_used = attempts_used - $4,
                 recovery_queries_used = recovery_queries_used + $5
             WHERE workflow_id = $3",
    pending: "SELECT step FROM steps WHERE workflow_id = $1 AND state = 'pending' ORDER BY ord",
    after: "SELECT step FROM step_deps WHERE workflow_id = $1 AND depends_on = $2 ORDER BY step",
    release: "UPDATE steps SET state = 'ready', ready_at = $1
              WHERE workflow_id = $2 AND step = $3 AND state = 'pending' AND NOT EXISTS (
                  SELECT 1 FROM step_deps d JOIN steps s2
                    ON s2.workflow_id = d.workflow_id AND s2.step = d.depends_on
                  WHERE d.workflow_id = $2 AND d.step = $3 AND s2.state <> 'succeeded')",
    // A workflow's own rows: a batch step's items are judged through their step.
    roles: "SELECT step, role, state, items FROM steps
            WHERE workflow_id = $1 AND batch_of IS NULL",
    deps: "SELECT step, depends_on FROM step_deps WHERE workflow_id = $1",
    set_step_state: "UPDATE steps SET state = $1, ready_at = NULL WHERE workflow_id = $2 AND step = $3",
    // A compensation's identity follows its original's (see `Claimed::identity`).
    // An item's compensation reads its item, as the item did.
    insert_compensation: "INSERT INTO steps (workflow_id, step, state, ready_at, role,
                              next_trigger, key_step, item, subject, adapter)
                          SELECT $1, $2, $3, $4, 'compensation', 'compensation',
                                 o.key_step || '.compensate', o.item, o.subject, o.adapter
                          FROM steps o WHERE o.workflow_id = $1 AND o.step = $5",
    insert_dep: "INSERT INTO step_deps (workflow_id, step, depends_on) VALUES ($1, $2, $3)",
    set_state: "UPDATE workflows SET state = $1, ended_at = $2, next_seq = next_seq + 1
                WHERE workflow_id = $3",
    changed: &CHANGED,
    key_retention: "UPDATE intent_keys
                    SET expires_at = $1 + (SELECT key_retention_ms FROM workflows WHERE workflow_id = $2)
                    WHERE workflow_id = $2",
    expired: &EXPIRED,
};

impl Fence {
    /// The refusal of a write whose lease is no longer held.
    pub(crate) fn lost(&self) -> StoreError {
        StoreError::LeaseLost {
            workflow_id: self.workflow_id.clone(),
            step: self.step.clone(),
        }
    }
}

/// Writes an attempt's facts; a value not known leaves what was recorded.
pub(super) async fn record_facts<T: Tx>(
    tx: &mut T,
    attempt: &AttemptId,
    checkpoint: u8,
    facts: &AttemptFacts,
    finished_at: Option<Millis>,
    log: Option<&serde_json::Value>,
) -> StoreResult<()> {
    let result = plan::result_text(facts)?;
    let policy = plan::policy_text(facts)?;
    let log = log.map(|l| l.to_string());
    let values = plan::facts_params(
        attempt,
        checkpoint,
        facts,
        finished_at,
        log.as_deref(),
        result.as_deref(),
        policy.as_deref(),
    );
    tx.exec(tx.sql().executor.facts, &values).await?;
    Ok(())
}

/// Notes on the workflow the policy version an attempt was judged by; an exception it went
/// through is used up.
pub(crate) async fn note_policy<T: Tx>(
    tx: &mut T,
    fence: &Fence,
    facts: &AttemptFacts,
) -> StoreResult<()> {
    let Some(p) = &facts.policy else {
        return Ok(());
    };
    let sql = &tx.sql().executor;
    let id = fence.workflow_id.as_str();
    tx.exec(sql.note_policy, &values![i64::from(p.version), id])
        .await?;
    if p.decision == super::PolicyVerdict::Exception {
        tx.exec(sql.spend_exception, &values![id, fence.step.as_str()])
            .await?;
    }
    Ok(())
}

/// Ends an attempt under its lease: the step's transition, the attempt's facts, the
/// receipt and the dependents it releases, the budget's counters, the timeline, and the
/// workflow's state as its steps now say.
pub(crate) async fn finish<T: Tx>(tx: &mut T, req: &FinishRequest) -> StoreResult<FinishOutcome> {
    let sql = &tx.sql().executor;
    let (fence, now) = (&req.fence, req.now);
    let id = fence.workflow_id.as_str();
    let cols = req.transition.columns();
    let blocked = plan::blocked_text(req.blocked.as_ref())?;
    let moved = tx
        .exec(
            sql.finish_step,
            &values![
                cols.state.as_str(),
                cols.ready_at,
                cols.next_trigger,
                cols.uncertain_since,
                cols.receipt_id,
                req.note.as_deref(),
                id,
                fence.step.as_str(),
                fence.lease_token.as_str(),
                req.expired_before.map(|v| v as i64),
                blocked.as_deref(),
                req.decided_at.map(i64::from),
                req.attempt_id.as_str(),
            ],
        )
        .await?;
    if moved == 0 {
        return Err(fence.lost());
    }
    record_facts(
        tx,
        &req.attempt_id,
        req.checkpoint,
        &req.facts,
        Some(now),
        Some(&req.log),
    )
    .await?;
    note_policy(tx, fence, &req.facts).await?;
    // The workflow's row is held from here (PostgreSQL), so the dependents' check below
    // sees every step a concurrent finish of this workflow committed.
    let (first, current, cancelled) = tx
        .row(sql.counters, &values![id], |r| {
            Ok((
                r.int("next_seq")?,
                rows::parse::<WorkflowState>(&r.text("state")?)?,
                r.opt_text("cancel_on")?.is_some(),
            ))
        })
        .await?
        .ok_or_else(|| StoreError::Corrupt(format!("workflow {id} vanished")))?;
    let mut released = Vec::new();
    if let StepTransition::Succeeded(r) = &req.transition {
        let output = r.output.to_string();
        let values = plan::receipt_params(
            r,
            &fence.workflow_id,
            &fence.step,
            Some(&req.attempt_id),
            &output,
            now,
        );
        insert_receipt(tx, &values).await?;
        released = release_dependents_of(tx, &fence.workflow_id, &fence.step, now).await?;
    }
    let mut events = req.events.clone();
    events.extend(NewEvent::released(&released));
    tx.exec(
        sql.charge,
        &values![
            req.runtime_ms as i64,
            events.len() as i64,
            id,
            plan::uncharged(req.charge),
            plan::from_reserve(req.charge),
        ],
    )
    .await?;
    if !events.is_empty() {
        tx.apply(Write::InsertEvents {
            workflow: &fence.workflow_id,
            first: first as u64,
            now,
            events: &events,
        })
        .await?;
    }
    // An item's end moves its batch step, when it moves it; the workflow's state is derived
    // from its own steps, so an item's end that leaves its batch step as it was (and no
    // cancellation to settle) leaves the workflow as it was too, and reads none of its rows.
    let batch = match crate::workflow::item_of(&fence.step) {
        Some((step, _)) => {
            let settled = super::batches::settle(tx, &fence.workflow_id, step, now).await?;
            released.extend(settled.released);
            Some(settled.moved)
        }
        None => None,
    };
    let workflow_state = match batch {
        Some(None) if !cancelled => current,
        _ => recompute_state(tx, &fence.workflow_id, current, cancelled, now).await?,
    };
    if plan::compensated_now(&req.transition, &fence.step) {
        super::notifications::outbox(
            tx,
            &fence.workflow_id,
            crate::notify::EventType::EffectCompensated,
            now,
        )
        .await?;
    }
    Ok(FinishOutcome {
        workflow_state,
        released,
    })
}

/// The receipt's insert, with one placeholder per value of [`plan::receipt_params`].
static RECEIPT_INSERT: LazyLock<String> = LazyLock::new(|| {
    let placeholders: Vec<String> = (1..=RECEIPT_VALUES).map(|i| format!("${i}")).collect();
    format!(
        "INSERT INTO receipts ({}) VALUES ({})",
        plan::RECEIPT_INSERT_COLUMNS,
        placeholders.join(", ")
    )
});

/// How many values a receipt row takes.
const RECEIPT_VALUES: usize = 15;

/// Records a receipt ([`plan::receipt_params`]).
pub(crate) async fn insert_receipt<T: Tx>(
    tx: &mut T,
    values: &[Param<'_>; RECEIPT_VALUES],
) -> StoreResult<()> {
    tx.exec(&RECEIPT_INSERT, values).await?;
    Ok(())
}

/// Makes ready every pending step of the workflow whose dependencies have all succeeded,
/// in definition order.
pub(crate) async fn release_dependents<T: Tx>(
    tx: &mut T,
    id: &WorkflowId,
    now: Millis,
) -> StoreResult<Vec<String>> {
    let pending = tx
        .rows(tx.sql().executor.pending, &values![id.as_str()], |r| {
            r.text("step")
        })
        .await?;
    release_ready(tx, id, pending, now).await
}

/// [`release_dependents`] after `step` succeeded: only the steps that run after it can
/// have become ready, so only they are looked at (a workflow's other steps are not read).
pub(crate) async fn release_dependents_of<T: Tx>(
    tx: &mut T,
    id: &WorkflowId,
    step: &str,
    now: Millis,
) -> StoreResult<Vec<String>> {
    let after = tx
        .rows(tx.sql().executor.after, &values![id.as_str(), step], |r| {
            r.text("step")
        })
        .await?;
    release_ready(tx, id, after, now).await
}

/// Makes ready each of `steps` that is pending and whose dependencies have all succeeded;
/// returns those it released, in order. One-row updates by key: SQLite gathers an `IN`
/// list and returned rows in temporary tables, which cost more than the update itself.
async fn release_ready<T: Tx>(
    tx: &mut T,
    id: &WorkflowId,
    steps: Vec<String>,
    now: Millis,
) -> StoreResult<Vec<String>> {
    let release = tx.sql().executor.release;
    let mut released = Vec::with_capacity(steps.len());
    for step in steps {
        if tx
            .exec(release, &values![now as i64, id.as_str(), step.as_str()])
            .await?
            == 1
        {
            released.push(step);
        }
    }
    Ok(released)
}

/// Steps whose lease expired before `now`, the longest expired first.
async fn expired_leases<T: Tx>(tx: &mut T, a: &(Millis, u32)) -> StoreResult<Vec<ExpiredLease>> {
    let (now, limit) = *a;
    tx.rows(
        tx.sql().executor.expired.as_str(),
        &values![now as i64, i64::from(limit)],
        |r| rows::expired_lease(r),
    )
    .await
}

/// Released dependents and scheduled retries concern every host: a retry's time may be
/// earlier than what an idle host is sleeping towards.
fn tell_others(backend: &impl Backend, retry: bool, outcome: &FinishOutcome) {
    if retry || !outcome.released.is_empty() {
        backend.poke();
    }
}

impl<B: Backend> ExecutorStore for B {
    async fn claim(&self, req: ClaimRequest) -> StoreResult<Vec<Claimed>> {
        Backend::claim(self, req).await
    }

    fn share_claims(&self, weights: std::collections::BTreeMap<String, u32>) {
        self.fairness().set_weights(weights);
    }

    async fn renew(&self, req: RenewRequest) -> StoreResult<()> {
        self.renewal_refused()?;
        self.write(req, |tx, req| Box::pin(leases::renew(tx, req)))
            .await
    }

    async fn checkpoint(&self, req: CheckpointRequest) -> StoreResult<()> {
        self.write(req, |tx, req| Box::pin(checkpoint(tx, req)))
            .await
    }

    async fn finish(&self, req: FinishRequest) -> StoreResult<FinishOutcome> {
        let retry = matches!(req.transition, StepTransition::Retry { .. });
        let outcome = Backend::finish(self, req).await?;
        tell_others(self, retry, &outcome);
        Ok(outcome)
    }

    async fn finish_and_claim(
        &self,
        req: FinishRequest,
        next: ClaimRequest,
    ) -> StoreResult<(FinishOutcome, Option<Claimed>)> {
        let retry = matches!(req.transition, StepTransition::Retry { .. });
        let (outcome, claimed) = Backend::finish_and_claim(self, req, next).await?;
        tell_others(self, retry, &outcome);
        Ok((outcome, claimed))
    }

    async fn ask_approval(&self, request: super::AskApproval) -> StoreResult<()> {
        self.write(request, |tx, req| Box::pin(super::approvals::ask(tx, req)))
            .await
    }

    async fn expand_batch(&self, request: super::ExpandBatch) -> StoreResult<Vec<String>> {
        let released = self
            .write(request, |tx, req| Box::pin(super::batches::expand(tx, req)))
            .await?;
        if !released.is_empty() {
            self.poke();
        }
        Ok(released)
    }

    async fn late_evidence(&self, late: LateEvidence) -> StoreResult<()> {
        self.write(late, |tx, late| Box::pin(super::late::evidence(tx, late)))
            .await
    }

    async fn release_leases(&self, owner: &str, now: Millis) -> StoreResult<u64> {
        let done = self
            .write((owner.to_string(), now), |tx, a| {
                Box::pin(leases::release(tx, a))
            })
            .await?;
        // The other hosts recover these at once rather than at their next poll.
        if done > 0 {
            self.announce().await?;
        }
        Ok(done)
    }

    async fn expired_leases(&self, now: Millis, limit: u32) -> StoreResult<Vec<ExpiredLease>> {
        self.read((now, limit), |tx, a| Box::pin(expired_leases(tx, a)))
            .await
    }

    async fn next_due(&self, now: Millis) -> StoreResult<Option<Millis>> {
        self.read(now, |tx, now| Box::pin(leases::next_due(tx, now)))
            .await
    }

    async fn pause_adapter(&self, pause: super::AdapterPause) -> StoreResult<()> {
        self.write(pause, |tx, p| Box::pin(super::gates::pause(tx, p)))
            .await?;
        // Other hosts learn of it at their next claim; one that sleeps wakes at its end.
        Ok(())
    }

    async fn record_sweep(&self, owner: &str, before: Millis) -> StoreResult<()> {
        self.write((owner.to_string(), before), |tx, a| {
            Box::pin(leases::record_sweep(tx, a))
        })
        .await
    }

    async fn watch(&self, wake: std::sync::Arc<tokio::sync::Notify>) -> StoreResult<bool> {
        Backend::watch(self, wake).await
    }
}
