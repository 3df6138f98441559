//! Operator actions, written once for every backend: the action's key (taken in the
//! action's own transaction, its answer stored once known), the change guarded by the
//! state the decision saw, the receipt and the timeline.

pub(crate) mod postgres;

use super::plan::{self, Param, values};
use super::rows::{self, Columns};
use super::tx::{Backend, Tx};
use super::{
    ActionAnswer, ActionOutcome, ActionRecord, ActionRequest, ActionScope, OperatorStore,
    StepChange, StoreError, StoreResult,
};
use crate::intent::{AttemptId, Millis, NewEvent, WorkflowState};

/// The statements of operator actions. Parameters, in order:
/// - `find`: subject, workflow id, step, action, key;
/// - `reserve` (does nothing when the key is taken): subject, workflow id, step, action,
///   key, request digest, created at;
/// - `remember` (does nothing when the key is taken): `reserve`'s, then refusal code,
///   answer, refusal details;
/// - `answer` (only an unanswered key): refusal code, answer, refusal details, then
///   `find`'s;
/// - `lock_workflow` (locks the row where the database can), `workflow`: workflow id;
/// - `latest_attempt`: workflow id, step;
/// - every step change: workflow id, step, the state the decision saw (and the step not
///   leased), then its own values: `ready` ready at, trigger, whether the uncertainty is
///   settled; `succeed` receipt id; `terminal` state, note; `escalate` the escalation;
///   `exception` ready at, the grant; `compensating` none; `insert_compensation` (its own
///   parameters) workflow id, compensation step id, ready at, the step it compensates.
pub(crate) struct Sql {
    pub find: &'static str,
    pub reserve: &'static str,
    pub remember: &'static str,
    pub answer: &'static str,
    pub lock_workflow: &'static str,
    pub workflow: &'static str,
    pub latest_attempt: &'static str,
    pub ready: &'static str,
    pub succeed: &'static str,
    pub terminal: &'static str,
    pub escalate: &'static str,
    pub exception: &'static str,
    pub compensating: &'static str,
    pub insert_compensation: &'static str,
}

/// The statements as both databases run them (see [`super::tx`] on placeholders); a
/// backend's module beside this one replaces the few that backend writes its own way.
pub(crate) const SQL: Sql = Sql {
    find: "SELECT request_digest, refusal, answer, refusal_details FROM operator_actions
           WHERE subject = $1 AND workflow_id = $2 AND step = $3 AND action = $4 AND key = $5",
    reserve: "INSERT INTO operator_actions
                  (subject, workflow_id, step, action, key, request_digest, created_at)
              VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING",
    remember: "INSERT INTO operator_actions (subject, workflow_id, step, action, key,
                   request_digest, created_at, refusal, answer, refusal_details)
               VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) ON CONFLICT DO NOTHING",
    answer: "UPDATE operator_actions SET refusal = $1, answer = $2, refusal_details = $3
             WHERE subject = $4 AND workflow_id = $5 AND step = $6 AND action = $7 AND key = $8
               AND answer IS NULL",
    // SQLite has one writer, whose transaction already excludes every other.
    lock_workflow: "SELECT state, cancel_on FROM workflows WHERE workflow_id = $1",
    workflow: "SELECT workflow_id, workflow, definition_version, subject, idempotency_key,
                   (SELECT i.input FROM workflow_inputs i
                    WHERE i.workflow_id = workflows.workflow_id) AS input,
                   input_digest, state, created_at, ended_at, deadline_at, attempts_used,
                   external_calls_used, runtime_used_ms, cost_used, recovery_queries_used,
                   budget_added, deadline_warned_at, next_seq, input_revision, replaces,
                   replaced_by, cancel_on, policy_at_admission, policy_current, migrated_from
               FROM workflows WHERE workflow_id = $1",
    latest_attempt: "SELECT attempt_id FROM attempts WHERE workflow_id = $1 AND step = $2
                     ORDER BY number DESC LIMIT 1",
    ready: "UPDATE steps SET state = 'ready', ready_at = $4, next_trigger = $5, note = NULL,
                uncertain_since = CASE WHEN $6 THEN NULL ELSE uncertain_since END
            WHERE workflow_id = $1 AND step = $2 AND state = $3 AND lease_token IS NULL",
    succeed: "UPDATE steps SET state = 'succeeded', receipt_id = $4, note = NULL,
                  uncertain_since = NULL
              WHERE workflow_id = $1 AND step = $2 AND state = $3 AND lease_token IS NULL",
    terminal: "UPDATE steps SET state = $4, note = $5
               WHERE workflow_id = $1 AND step = $2 AND state = $3 AND lease_token IS NULL",
    escalate: "UPDATE steps SET escalated = $4
               WHERE workflow_id = $1 AND step = $2 AND state = $3 AND lease_token IS NULL",
    exception: "UPDATE steps SET state = 'ready', ready_at = $4, next_trigger = 'manual_retry',
                    note = NULL, blocked = NULL, policy_exception = $5
                WHERE workflow_id = $1 AND step = $2 AND state = $3 AND lease_token IS NULL",
    compensating: "UPDATE steps SET state = 'compensating'
                   WHERE workflow_id = $1 AND step = $2 AND state = $3 AND lease_token IS NULL",
    // A compensation's identity follows its original's (see `Claimed::identity`).
    insert_compensation:
        "INSERT INTO steps (workflow_id, step, state, ready_at, role, next_trigger, key_step,
                            subject, adapter)
         SELECT $1, $2, 'ready', $3, 'compensation', 'compensation',
                o.key_step || '.compensate', o.subject, o.adapter
         FROM steps o WHERE o.workflow_id = $1 AND o.step = $4",
};

fn scope_values(s: &ActionScope) -> [Param<'_>; 5] {
    values![
        s.subject.0.as_str(),
        s.workflow_id.as_str(),
        s.step.as_str(),
        s.action.as_str(),
        s.key.as_str()
    ]
}

/// The action stored under `scope`'s key.
pub(crate) async fn find<T: Tx>(
    tx: &mut T,
    scope: &ActionScope,
) -> StoreResult<Option<ActionRecord>> {
    let sql = tx.sql().actions.find;
    tx.row(sql, &scope_values(scope), |r| rows::action_record(r))
        .await
}

/// Takes `scope`'s key for a request, unless a racing twin holds it (the primary key
/// decides; on PostgreSQL the twin waits for the first transaction and then finds the key
/// taken). Whether this request took it.
pub(crate) async fn reserve<T: Tx>(
    tx: &mut T,
    scope: &ActionScope,
    request_digest: &str,
    now: Millis,
) -> StoreResult<bool> {
    let [a, b, c, d, e] = scope_values(scope);
    let sql = tx.sql().actions.reserve;
    let taken = tx
        .exec(
            sql,
            &[a, b, c, d, e, request_digest.into(), (now as i64).into()],
        )
        .await?;
    Ok(taken == 1)
}

/// Takes `scope`'s key, or answers what it already holds: `Err(existing)` when another
/// request (or this one, earlier) has it.
pub(crate) async fn take<T: Tx>(
    tx: &mut T,
    scope: &ActionScope,
    request_digest: &str,
    now: Millis,
) -> StoreResult<Result<(), ActionRecord>> {
    if reserve(tx, scope, request_digest, now).await? {
        return Ok(Ok(()));
    }
    let existing = find(tx, scope)
        .await?
        .ok_or_else(|| StoreError::Corrupt("an operator action's key vanished".into()))?;
    Ok(Err(existing))
}

/// Stores the answer of the request that holds `scope`'s key.
pub(crate) async fn store_answer<T: Tx>(
    tx: &mut T,
    scope: &ActionScope,
    answer: &ActionAnswer,
) -> StoreResult<()> {
    let (refusal, text, details) = rows::answer_columns(answer);
    let [a, b, c, d, e] = scope_values(scope);
    let sql = tx.sql().actions.answer;
    tx.exec(
        sql,
        &[
            refusal.into(),
            text.into(),
            details.as_deref().into(),
            a,
            b,
            c,
            d,
            e,
        ],
    )
    .await?;
    Ok(())
}

/// The workflow's state and whether it has a cancellation, its row locked where the
/// database can: the lock orders a change of course against every step change.
pub(crate) async fn lock_workflow<T: Tx>(
    tx: &mut T,
    id: &crate::intent::WorkflowId,
) -> StoreResult<(WorkflowState, bool)> {
    let sql = tx.sql().actions.lock_workflow;
    tx.row(sql, &values![id.as_str()], |r| {
        Ok((
            r.parsed::<WorkflowState>("state")?,
            r.opt_text("cancel_on")?.is_some(),
        ))
    })
    .await?
    .ok_or_else(|| StoreError::NotFound(format!("workflow {id}")))
}

/// The workflow's record, read in the caller's transaction.
pub(crate) async fn workflow<T: Tx>(
    tx: &mut T,
    id: &crate::intent::WorkflowId,
) -> StoreResult<super::WorkflowRecord> {
    let sql = tx.sql().actions.workflow;
    tx.row(sql, &values![id.as_str()], |r| rows::workflow(r))
        .await?
        .ok_or_else(|| StoreError::NotFound(format!("workflow {id}")))
}

async fn act<T: Tx>(tx: &mut T, req: &ActionRequest) -> StoreResult<ActionOutcome> {
    if let Err(existing) = take(tx, &req.scope, &req.request_digest, req.now).await? {
        return Ok(if existing.request_digest == req.request_digest {
            ActionOutcome::Replayed(existing)
        } else {
            ActionOutcome::KeyConflict
        });
    }
    let change = match &req.change {
        Ok(change) => change,
        Err(refusal) => {
            store_answer(tx, &req.scope, &ActionAnswer::Refused(refusal.clone())).await?;
            return Ok(ActionOutcome::Refused(refusal.clone()));
        }
    };
    let id = &req.scope.workflow_id;
    let step = req.scope.step.as_str();
    let now = req.now as i64;
    // An approval decision answers the question it saw: asked again since (a revision
    // changed the consequence), the person must see the new one first.
    if let Some(decision) = &req.approval
        && let Err(refusal) = super::approvals::check_decision(tx, id, step, decision).await?
    {
        store_answer(tx, &req.scope, &ActionAnswer::Refused(refusal.clone())).await?;
        return Ok(ActionOutcome::Refused(refusal));
    }
    // Every change is guarded by the state the decision saw, and never touches a leased step.
    let guard = values![id.as_str(), step, req.expected_state.as_str()];
    let sql = &tx.sql().actions;
    let grant;
    let escalation;
    let (statement, own): (&'static str, Vec<Param<'_>>) = match change {
        StepChange::Ready {
            trigger,
            settle_uncertainty,
        } => (
            sql.ready,
            values![now, trigger.as_str(), *settle_uncertainty].to_vec(),
        ),
        StepChange::Succeed(receipt) => {
            (sql.succeed, values![receipt.receipt_id.as_str()].to_vec())
        }
        StepChange::Terminal { state, note } => (
            sql.terminal,
            values![state.as_str(), note.as_str()].to_vec(),
        ),
        StepChange::Escalate(value) => {
            escalation = value.to_string();
            (sql.escalate, values![&escalation].to_vec())
        }
        StepChange::Exception(g) => {
            grant = plan::json_text(g)?;
            (sql.exception, values![now, &grant].to_vec())
        }
        StepChange::Compensate { .. } => (sql.compensating, Vec::new()),
    };
    let insert_compensation = sql.insert_compensation;
    let params: Vec<Param<'_>> = guard.iter().copied().chain(own).collect();
    let moved = tx.exec(statement, &params).await?;
    if moved == 0 {
        store_answer(tx, &req.scope, &ActionAnswer::Refused(req.stale.clone())).await?;
        return Ok(ActionOutcome::Refused(req.stale.clone()));
    }
    if let Some(decision) = &req.approval {
        super::approvals::record_decision(tx, id, step, decision, req.now).await?;
    }
    if let StepChange::Compensate { id: compensation } = change {
        tx.exec(
            insert_compensation,
            &values![id.as_str(), compensation.as_str(), now, step],
        )
        .await?;
    }
    // From here on the transaction sees every committed step change of the workflow.
    let (current, cancelled) = lock_workflow(tx, id).await?;
    let mut events = req.events.clone();
    if let StepChange::Succeed(r) = change {
        let sql = tx.sql().actions.latest_attempt;
        let latest = tx
            .row(sql, &values![id.as_str(), step], |r| r.text("attempt_id"))
            .await?
            .map(AttemptId);
        let output = r.output.to_string();
        let values = crate::store::executor::plan::receipt_params(
            r,
            id,
            step,
            latest.as_ref(),
            &output,
            req.now,
        );
        super::executor::insert_receipt(tx, &values).await?;
        let released = super::executor::release_dependents(tx, id, req.now).await?;
        events.extend(NewEvent::released(&released));
    }
    let workflow_state = tx
        .tell_and_settle(id, req.now, &events, current, cancelled)
        .await?;
    if let Some(decision) = &req.approval {
        super::approvals::tell_decision(tx, id, step, decision, req.now).await?;
    }
    Ok(ActionOutcome::Applied { workflow_state })
}

async fn remember<T: Tx>(
    tx: &mut T,
    (scope, request_digest, answer, now): &(ActionScope, String, ActionAnswer, Millis),
) -> StoreResult<ActionRecord> {
    let (refusal, text, details) = rows::answer_columns(answer);
    let [a, b, c, d, e] = scope_values(scope);
    let sql = tx.sql().actions.remember;
    let params = [
        a,
        b,
        c,
        d,
        e,
        request_digest.into(),
        (*now as i64).into(),
        refusal.into(),
        text.into(),
        details.as_deref().into(),
    ];
    tx.exec(sql, &params).await?;
    find(tx, scope)
        .await?
        .ok_or_else(|| StoreError::Corrupt("a remembered key vanished".into()))
}

impl<B: Backend> OperatorStore for B {
    async fn action(&self, scope: &ActionScope) -> StoreResult<Option<ActionRecord>> {
        self.read(scope.clone(), |tx, scope| Box::pin(find(tx, scope)))
            .await
    }

    async fn act(&self, request: ActionRequest) -> StoreResult<ActionOutcome> {
        // A step made ready (query, retry) or dependents released: any host may take them.
        let wakes = matches!(
            request.change,
            Ok(StepChange::Ready { .. } | StepChange::Succeed(_))
        );
        let outcome = self
            .write(request, |tx, req| Box::pin(act(tx, req)))
            .await?;
        if wakes && matches!(outcome, ActionOutcome::Applied { .. }) {
            self.poke();
        }
        Ok(outcome)
    }

    async fn answer(&self, scope: &ActionScope, applied: String) -> StoreResult<()> {
        self.write(
            (scope.clone(), ActionAnswer::Applied(applied)),
            |tx, (scope, answer)| Box::pin(store_answer(tx, scope, answer)),
        )
        .await
    }
}

/// [`super::CourseStore::remember`], written once.
pub(crate) async fn remember_on<B: Backend>(
    store: &B,
    scope: ActionScope,
    request_digest: String,
    answer: ActionAnswer,
    now: Millis,
) -> StoreResult<ActionRecord> {
    store
        .write((scope, request_digest, answer, now), |tx, arg| {
            Box::pin(remember(tx, arg))
        })
        .await
}
