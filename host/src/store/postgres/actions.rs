//! Operator actions: the key, the guarded step change, the receipt and the timeline, in
//! one transaction.

use super::executor::{insert_receipt, recompute_state, release_dependents};
use super::{PgResult, PgStore, append_events, lock_workflow, transaction};
use crate::intent::{AttemptId, NewEvent};
use crate::store::{
    ActionAnswer, ActionOutcome, ActionRecord, ActionRequest, ActionScope, OperatorStore,
    StepChange, StoreResult,
};
use crate::store::{plan, rows};
use sqlx::postgres::PgConnection;

pub(super) async fn action_on(
    conn: &mut PgConnection,
    scope: &ActionScope,
) -> PgResult<Option<ActionRecord>> {
    let row = sqlx::query(
        "SELECT request_digest, refusal, answer, refusal_details FROM operator_actions
         WHERE subject = $1 AND workflow_id = $2 AND step = $3 AND action = $4 AND key = $5",
    )
    .bind(&scope.subject.0)
    .bind(scope.workflow_id.as_str())
    .bind(&scope.step)
    .bind(&scope.action)
    .bind(&scope.key)
    .fetch_optional(&mut *conn)
    .await?;
    Ok(row.as_ref().map(rows::action_record).transpose()?)
}

pub(super) async fn store_answer(
    conn: &mut PgConnection,
    scope: &ActionScope,
    answer: &ActionAnswer,
) -> PgResult<()> {
    let (refusal, text, details) = rows::answer_columns(answer);
    sqlx::query(
        "UPDATE operator_actions SET refusal = $1, answer = $2, refusal_details = $8
         WHERE subject = $3 AND workflow_id = $4 AND step = $5 AND action = $6 AND key = $7
           AND answer IS NULL",
    )
    .bind(refusal)
    .bind(text)
    .bind(&scope.subject.0)
    .bind(scope.workflow_id.as_str())
    .bind(&scope.step)
    .bind(&scope.action)
    .bind(&scope.key)
    .bind(details)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Takes a key for a request, unless a racing twin holds it: the primary key decides, the
/// twin waiting for the first transaction and, once it commits, finding the key taken.
/// Returns whether this request took it.
pub(super) async fn reserve_key(
    conn: &mut PgConnection,
    scope: &ActionScope,
    request_digest: &str,
    now: crate::intent::Millis,
) -> PgResult<bool> {
    Ok(sqlx::query(
        "INSERT INTO operator_actions (subject, workflow_id, step, action, key, request_digest, created_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING",
    )
    .bind(&scope.subject.0)
    .bind(scope.workflow_id.as_str())
    .bind(&scope.step)
    .bind(&scope.action)
    .bind(&scope.key)
    .bind(request_digest)
    .bind(now as i64)
    .execute(&mut *conn)
    .await?
    .rows_affected()
        == 1)
}

async fn act_tx(conn: &mut PgConnection, req: ActionRequest) -> PgResult<ActionOutcome> {
    // The primary key decides who owns the key: a racing twin waits for the first
    // transaction and, once it commits, finds the key taken.
    let inserted = reserve_key(conn, &req.scope, &req.request_digest, req.now).await?;
    if !inserted {
        let existing = action_on(conn, &req.scope).await?.ok_or_else(|| {
            crate::store::StoreError::Corrupt("an operator action key vanished".into())
        })?;
        return Ok(if existing.request_digest == req.request_digest {
            ActionOutcome::Replayed(existing)
        } else {
            ActionOutcome::KeyConflict
        });
    }
    let change = match req.change {
        Ok(change) => change,
        Err(refusal) => {
            store_answer(conn, &req.scope, &ActionAnswer::Refused(refusal.clone())).await?;
            return Ok(ActionOutcome::Refused(refusal));
        }
    };
    let workflow_id = req.scope.workflow_id.as_str();
    let step = req.scope.step.as_str();
    let expected = req.expected_state.as_str();
    // Every change is guarded by the state the decision saw, and never touches a leased step.
    let moved = match &change {
        StepChange::Ready {
            trigger,
            settle_uncertainty,
        } => sqlx::query(
            "UPDATE steps SET state = 'ready', ready_at = $4, next_trigger = $5, note = NULL,
                 uncertain_since = CASE WHEN $6 THEN NULL ELSE uncertain_since END
             WHERE workflow_id = $1 AND step = $2 AND state = $3 AND lease_token IS NULL",
        )
        .bind(workflow_id)
        .bind(step)
        .bind(expected)
        .bind(req.now as i64)
        .bind(trigger.as_str())
        .bind(*settle_uncertainty),
        StepChange::Succeed(receipt) => sqlx::query(
            "UPDATE steps SET state = 'succeeded', receipt_id = $4, note = NULL, uncertain_since = NULL
             WHERE workflow_id = $1 AND step = $2 AND state = $3 AND lease_token IS NULL",
        )
        .bind(workflow_id)
        .bind(step)
        .bind(expected)
        .bind(receipt.receipt_id.as_str()),
        StepChange::Terminal { state, note } => sqlx::query(
            "UPDATE steps SET state = $4, note = $5
             WHERE workflow_id = $1 AND step = $2 AND state = $3 AND lease_token IS NULL",
        )
        .bind(workflow_id)
        .bind(step)
        .bind(expected)
        .bind(state.as_str())
        .bind(note.as_str()),
        StepChange::Escalate(value) => sqlx::query(
            "UPDATE steps SET escalated = $4
             WHERE workflow_id = $1 AND step = $2 AND state = $3 AND lease_token IS NULL",
        )
        .bind(workflow_id)
        .bind(step)
        .bind(expected)
        .bind(value.to_string()),
        StepChange::Exception(grant) => sqlx::query(
            "UPDATE steps SET state = 'ready', ready_at = $4, next_trigger = 'manual_retry',
                 note = NULL, blocked = NULL, policy_exception = $5
             WHERE workflow_id = $1 AND step = $2 AND state = $3 AND lease_token IS NULL",
        )
        .bind(workflow_id)
        .bind(step)
        .bind(expected)
        .bind(req.now as i64)
        .bind(
            serde_json::to_string(grant)
                .map_err(|e| crate::store::StoreError::Corrupt(e.to_string()))?,
        ),
        // The compensation's row is created with the move, in one statement.
        StepChange::Compensate { id } => sqlx::query(
            "WITH moved AS (
                 UPDATE steps SET state = 'compensating'
                 WHERE workflow_id = $1 AND step = $2 AND state = $3 AND lease_token IS NULL
                 RETURNING workflow_id)
             INSERT INTO steps (workflow_id, step, state, ready_at, role, next_trigger)
             SELECT workflow_id, $4, 'ready', $5, 'compensation', 'compensation' FROM moved",
        )
        .bind(workflow_id)
        .bind(step)
        .bind(expected)
        .bind(id.as_str())
        .bind(req.now as i64),
    }
    .execute(&mut *conn)
    .await?
    .rows_affected();
    if moved == 0 {
        store_answer(conn, &req.scope, &ActionAnswer::Refused(req.stale.clone())).await?;
        return Ok(ActionOutcome::Refused(req.stale));
    }
    // From here on the transaction sees every committed step change of the workflow.
    let (current, cancelled) = lock_workflow(conn, &req.scope.workflow_id).await?;
    let mut events = req.events;
    if let StepChange::Succeed(r) = &change {
        let latest: Option<String> = sqlx::query_scalar(
            "SELECT attempt_id FROM attempts WHERE workflow_id = $1 AND step = $2 ORDER BY number DESC LIMIT 1",
        )
        .bind(workflow_id)
        .bind(step)
        .fetch_optional(&mut *conn)
        .await?;
        let latest = latest.map(AttemptId);
        let output = r.output.to_string();
        let values = plan::receipt_params(
            r,
            &req.scope.workflow_id,
            step,
            latest.as_ref(),
            &output,
            req.now,
        );
        insert_receipt(conn, &values).await?;
        let released = release_dependents(conn, &req.scope.workflow_id, req.now).await?;
        events.extend(NewEvent::released(&released));
    }
    append_events(conn, &req.scope.workflow_id, req.now, &events).await?;
    let workflow_state =
        recompute_state(conn, &req.scope.workflow_id, current, cancelled, req.now).await?;
    Ok(ActionOutcome::Applied { workflow_state })
}

impl OperatorStore for PgStore {
    async fn action(&self, scope: &ActionScope) -> StoreResult<Option<ActionRecord>> {
        let mut conn = self.pool.acquire().await?;
        Ok(action_on(&mut conn, scope).await?)
    }

    async fn act(&self, request: ActionRequest) -> StoreResult<ActionOutcome> {
        // A step made ready (query, retry) or dependents released: any host may take them.
        let wakes = matches!(
            request.change,
            Ok(StepChange::Ready { .. } | StepChange::Succeed(_))
        );
        let outcome = transaction!(self.pool, |conn| act_tx(conn, request.clone()))?;
        if wakes && matches!(outcome, ActionOutcome::Applied { .. }) {
            self.notifier.poke();
        }
        Ok(outcome)
    }

    async fn answer(&self, scope: &ActionScope, applied: String) -> StoreResult<()> {
        let mut conn = self.pool.acquire().await?;
        Ok(store_answer(&mut conn, scope, &ActionAnswer::Applied(applied)).await?)
    }
}
