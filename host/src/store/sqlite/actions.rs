//! Operator actions: the key, the guarded step change, the receipt and the timeline, in
//! one transaction.

use super::executor::{insert_receipt, recompute_state, release_dependents};
use super::{SqliteStore, append_events};
use crate::intent::WorkflowState;
use crate::intent::{AttemptId, NewEvent};
use crate::store::plan;
use crate::store::rows;
use crate::store::rows::parse;
use crate::store::{
    ActionAnswer, ActionOutcome, ActionRecord, ActionRequest, ActionScope, OperatorStore,
    StepChange, StoreError, StoreResult,
};
use rusqlite::{Connection, OptionalExtension, params};

fn scope_params(s: &ActionScope) -> [&str; 5] {
    [
        &s.subject.0,
        s.workflow_id.as_str(),
        &s.step,
        &s.action,
        &s.key,
    ]
}

pub(super) fn action_tx(
    conn: &Connection,
    scope: &ActionScope,
) -> StoreResult<Option<ActionRecord>> {
    let mut statement = conn.prepare_cached(
        "SELECT request_digest, refusal, answer, refusal_details FROM operator_actions
         WHERE subject = ? AND workflow_id = ? AND step = ? AND action = ? AND key = ?",
    )?;
    let mut found = statement.query(scope_params(scope))?;
    found.next()?.map(rows::action_record).transpose()
}

pub(super) fn store_answer(
    conn: &Connection,
    scope: &ActionScope,
    answer: &ActionAnswer,
) -> StoreResult<()> {
    let [subject, workflow_id, step, action, key] = scope_params(scope);
    let (refusal, text, details) = rows::answer_columns(answer);
    conn.prepare_cached(
        "UPDATE operator_actions SET refusal = ?, answer = ?, refusal_details = ?
         WHERE subject = ? AND workflow_id = ? AND step = ? AND action = ? AND key = ? AND answer IS NULL",
    )?
    .execute(params![refusal, text, details, subject, workflow_id, step, action, key])?;
    Ok(())
}

/// Takes a key for a request (its answer is stored once known), in the caller's transaction.
pub(super) fn reserve_key(
    conn: &Connection,
    scope: &ActionScope,
    request_digest: &str,
    now: crate::intent::Millis,
) -> StoreResult<()> {
    let [subject, workflow_id, step, action, key] = scope_params(scope);
    conn.prepare_cached(
        "INSERT INTO operator_actions (subject, workflow_id, step, action, key, request_digest, created_at)
         VALUES (?, ?, ?, ?, ?, ?, ?)",
    )?
    .execute(params![subject, workflow_id, step, action, key, request_digest, now as i64])?;
    Ok(())
}

fn act_tx(conn: &Connection, req: ActionRequest) -> StoreResult<ActionOutcome> {
    if let Some(existing) = action_tx(conn, &req.scope)? {
        return Ok(if existing.request_digest == req.request_digest {
            ActionOutcome::Replayed(existing)
        } else {
            ActionOutcome::KeyConflict
        });
    }
    reserve_key(conn, &req.scope, &req.request_digest, req.now)?;
    let [_, workflow_id, step, _, _] = scope_params(&req.scope);
    let change = match req.change {
        Ok(change) => change,
        Err(refusal) => {
            store_answer(conn, &req.scope, &ActionAnswer::Refused(refusal.clone()))?;
            return Ok(ActionOutcome::Refused(refusal));
        }
    };
    let now = req.now as i64;
    // Every change is guarded by the state the decision saw, and never touches a leased step.
    let guard = "workflow_id = ?1 AND step = ?2 AND state = ?3 AND lease_token IS NULL";
    let base = params![workflow_id, step, req.expected_state.as_str()];
    let moved = match &change {
        StepChange::Ready {
            trigger,
            settle_uncertainty,
        } => conn
            .prepare_cached(&format!(
                "UPDATE steps SET state = 'ready', ready_at = ?4, next_trigger = ?5, note = NULL,
                     uncertain_since = CASE WHEN ?6 THEN NULL ELSE uncertain_since END
                 WHERE {guard}"
            ))?
            .execute(params![base[0], base[1], base[2], now, trigger.as_str(), settle_uncertainty])?,
        StepChange::Succeed(receipt) => conn
            .prepare_cached(&format!(
                "UPDATE steps SET state = 'succeeded', receipt_id = ?4, note = NULL, uncertain_since = NULL
                 WHERE {guard}"
            ))?
            .execute(params![base[0], base[1], base[2], receipt.receipt_id.as_str()])?,
        StepChange::Terminal { state, note } => conn
            .prepare_cached(&format!("UPDATE steps SET state = ?4, note = ?5 WHERE {guard}"))?
            .execute(params![base[0], base[1], base[2], state.as_str(), note])?,
        StepChange::Escalate(value) => conn
            .prepare_cached(&format!("UPDATE steps SET escalated = ?4 WHERE {guard}"))?
            .execute(params![base[0], base[1], base[2], value.to_string()])?,
        StepChange::Exception(grant) => conn
            .prepare_cached(&format!(
                "UPDATE steps SET state = 'ready', ready_at = ?4, next_trigger = 'manual_retry',
                     note = NULL, blocked = NULL, policy_exception = ?5
                 WHERE {guard}"
            ))?
            .execute(params![
                base[0],
                base[1],
                base[2],
                now,
                serde_json::to_string(grant).map_err(|e| StoreError::Corrupt(e.to_string()))?
            ])?,
        StepChange::Compensate { id } => {
            let moved = conn
                .prepare_cached(&format!(
                    "UPDATE steps SET state = 'compensating' WHERE {guard}"
                ))?
                .execute(params![base[0], base[1], base[2]])?;
            if moved == 1 {
                conn.prepare_cached(
                    "INSERT INTO steps (workflow_id, step, state, ready_at, role, next_trigger)
                     VALUES (?, ?, 'ready', ?, 'compensation', 'compensation')",
                )?
                .execute(params![workflow_id, id, now])?;
            }
            moved
        }
    };
    if moved == 0 {
        store_answer(conn, &req.scope, &ActionAnswer::Refused(req.stale.clone()))?;
        return Ok(ActionOutcome::Refused(req.stale));
    }
    let mut events = req.events;
    if let StepChange::Succeed(r) = &change {
        let latest: Option<String> = conn
            .prepare_cached(
                "SELECT attempt_id FROM attempts WHERE workflow_id = ? AND step = ? ORDER BY number DESC LIMIT 1",
            )?
            .query_row(params![workflow_id, step], |r| r.get(0))
            .optional()?;
        let output = r.output.to_string();
        insert_receipt(
            conn,
            &plan::receipt_params(
                r,
                &req.scope.workflow_id,
                step,
                latest.map(AttemptId).as_ref(),
                &output,
                req.now,
            ),
        )?;
        let released = release_dependents(conn, &req.scope.workflow_id, req.now)?;
        events.extend(NewEvent::released(&released));
    }
    append_events(conn, &req.scope.workflow_id, req.now, &events)?;
    let (current, cancel_on): (String, Option<String>) = conn
        .prepare_cached("SELECT state, cancel_on FROM workflows WHERE workflow_id = ?")?
        .query_row([workflow_id], |r| Ok((r.get(0)?, r.get(1)?)))?;
    let workflow_state = recompute_state(
        conn,
        &req.scope.workflow_id,
        parse::<WorkflowState>(&current)?,
        cancel_on.is_some(),
        req.now,
    )?;
    Ok(ActionOutcome::Applied { workflow_state })
}

impl OperatorStore for SqliteStore {
    async fn action(&self, scope: &ActionScope) -> StoreResult<Option<ActionRecord>> {
        let row = sqlx::query(
            "SELECT request_digest, refusal, answer, refusal_details FROM operator_actions
             WHERE subject = ? AND workflow_id = ? AND step = ? AND action = ? AND key = ?",
        )
        .bind(&scope.subject.0)
        .bind(scope.workflow_id.as_str())
        .bind(&scope.step)
        .bind(&scope.action)
        .bind(&scope.key)
        .fetch_optional(&self.read)
        .await?;
        row.as_ref().map(rows::action_record).transpose()
    }

    async fn act(&self, request: ActionRequest) -> StoreResult<ActionOutcome> {
        self.writer.write(move |conn| act_tx(conn, request)).await
    }

    async fn answer(&self, scope: &ActionScope, applied: String) -> StoreResult<()> {
        let scope = scope.clone();
        self.writer
            .write(move |conn| store_answer(conn, &scope, &ActionAnswer::Applied(applied)))
            .await
    }
}
