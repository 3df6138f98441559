//! Changes of a workflow's course: its cancellation, under a key, with the course settled
//! in the same transaction.

use super::actions::{action_on, reserve_key, store_answer};
use super::executor::recompute_state;
use super::{PgResult, PgStore, append_events, lock_workflow, transaction};
use crate::course;
use crate::intent::{Millis, StepState, WorkflowId};
use crate::store::plan;
use crate::store::rows::{self, CANCELLATION_COLUMNS, Columns, REVISION_COLUMNS};
use crate::store::{
    ActionAnswer, ActionRecord, ActionScope, CancelAnswer, CancelRequest, CancellationRecord,
    CourseStore, ReviseAnswer, ReviseRequest, RevisionRecord, StoreError, StoreResult,
};
use sqlx::postgres::PgConnection;

async fn cancellation_on(
    conn: &mut PgConnection,
    id: &WorkflowId,
) -> PgResult<Option<CancellationRecord>> {
    let row = sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT {CANCELLATION_COLUMNS} FROM cancellations WHERE workflow_id = $1"
    )))
    .bind(id.as_str())
    .fetch_optional(&mut *conn)
    .await?;
    Ok(row.as_ref().map(rows::cancellation).transpose()?)
}

/// The workflow's rows as the course sees them, with the checkpoint of each running attempt.
async fn course_steps(
    conn: &mut PgConnection,
    id: &WorkflowId,
) -> PgResult<Vec<course::CourseStep>> {
    let found = sqlx::query(sqlx::AssertSqlSafe(format!(
        "{} WHERE s.workflow_id = $1 ORDER BY s.ord",
        plan::COURSE_SELECT
    )))
    .bind(id.as_str())
    .fetch_all(&mut *conn)
    .await?;
    let mut steps = found
        .iter()
        .map(rows::course_step)
        .collect::<StoreResult<Vec<_>>>()?;
    let running = sqlx::query(
        "SELECT a.step, a.checkpoint FROM steps s JOIN attempts a
           ON a.workflow_id = s.workflow_id AND a.step = s.step AND a.number = s.attempts
         WHERE s.workflow_id = $1 AND s.state = 'running'",
    )
    .bind(id.as_str())
    .fetch_all(&mut *conn)
    .await?;
    for r in &running {
        let step = r.text("step")?;
        if let Some(s) = steps.iter_mut().find(|s| s.id == step) {
            s.checkpoint = Some(r.small::<u8>("checkpoint")?);
        }
    }
    Ok(steps)
}

async fn cancel_tx(conn: &mut PgConnection, req: CancelRequest) -> PgResult<CancelAnswer> {
    let s = &req.scope;
    let inserted = reserve_key(conn, s, &req.request_digest, req.now).await?;
    if !inserted {
        let existing = action_on(conn, s)
            .await?
            .ok_or_else(|| StoreError::Corrupt("a cancellation key vanished".into()))?;
        return Ok(if existing.request_digest == req.request_digest {
            CancelAnswer::Replayed(existing)
        } else {
            CancelAnswer::KeyConflict
        });
    }
    let id = &s.workflow_id;
    // The workflow row's lock orders this against every step change and checkpoint 3.
    let (state, cancelled) = lock_workflow(conn, id).await?;
    if cancelled && let Some(existing) = cancellation_on(conn, id).await? {
        let text = plan::cancel_answer_text(false, &existing)?;
        store_answer(conn, s, &ActionAnswer::Applied(text)).await?;
        return Ok(CancelAnswer::Existing(existing));
    }
    let steps = course_steps(conn, id).await?;
    let record = match plan::cancellation(&req, state, &steps) {
        Ok(record) => record,
        Err(refusal) => {
            store_answer(conn, s, &ActionAnswer::Refused(refusal.clone())).await?;
            return Ok(CancelAnswer::Refused(refusal));
        }
    };
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "INSERT INTO cancellations ({CANCELLATION_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)"
    )))
    .bind(record.cancellation_id.as_str())
    .bind(id.as_str())
    .bind(&record.requested_by)
    .bind(record.requested_at as i64)
    .bind(&record.reason)
    .bind(i64::from(record.withdraw))
    .bind(record.outcome.as_str())
    .bind(&record.message)
    .bind(
        serde_json::to_string(&record.consequences)
            .map_err(|e| StoreError::Corrupt(e.to_string()))?,
    )
    .execute(&mut *conn)
    .await?;
    sqlx::query("UPDATE workflows SET cancel_on = $1 WHERE workflow_id = $2")
        .bind(rows::triggers_text(course::CANCELLATION_TRIGGERS))
        .bind(id.as_str())
        .execute(&mut *conn)
        .await?;
    append_events(conn, id, req.now, &[plan::cancellation_event(&record)]).await?;
    recompute_state(conn, id, state, true, req.now).await?;
    let text = plan::cancel_answer_text(true, &record)?;
    store_answer(conn, s, &ActionAnswer::Applied(text)).await?;
    Ok(CancelAnswer::Created(record))
}

async fn revise_tx(conn: &mut PgConnection, req: ReviseRequest) -> PgResult<ReviseAnswer> {
    let s = &req.scope;
    if let Some(existing) = action_on(conn, s).await? {
        return Ok(if existing.request_digest == req.request_digest {
            ReviseAnswer::Replayed(existing)
        } else {
            ReviseAnswer::KeyConflict
        });
    }
    let id = &s.workflow_id;
    // The workflow row's lock orders this against every step change.
    let (state, _) = lock_workflow(conn, id).await?;
    let input_revision: i64 =
        sqlx::query_scalar("SELECT input_revision FROM workflows WHERE workflow_id = $1")
            .bind(id.as_str())
            .fetch_one(&mut *conn)
            .await?;
    let found = sqlx::query("SELECT step, state, attempts FROM steps WHERE workflow_id = $1")
        .bind(id.as_str())
        .fetch_all(&mut *conn)
        .await?;
    let mut steps = Vec::with_capacity(found.len());
    for r in &found {
        steps.push((
            r.text("step")?,
            r.parsed::<StepState>("state")?,
            r.small::<u32>("attempts")?,
        ));
    }
    if !plan::unmoved(
        &req.seen,
        state,
        rows::fits("input_revision", input_revision)?,
        &steps,
    ) {
        return Ok(ReviseAnswer::Moved);
    }
    let inserted = reserve_key(conn, s, &req.request_digest, req.now).await?;
    if !inserted {
        // A twin under the same key committed first: answer as it did.
        return Ok(ReviseAnswer::Moved);
    }
    let revision_plan = match &req.change {
        Ok(p) => p,
        Err(refusal) => {
            store_answer(conn, s, &ActionAnswer::Refused(refusal.clone())).await?;
            return Ok(ReviseAnswer::Refused(refusal.clone()));
        }
    };
    let record = plan::revision_record(&req, revision_plan);
    let n = i64::from(record.input_revision);
    sqlx::query(
        "UPDATE workflows SET input = $1, input_digest = $2, input_revision = $3 WHERE workflow_id = $4",
    )
    .bind(&req.input.text)
    .bind(&req.input.digest)
    .bind(n)
    .bind(id.as_str())
    .execute(&mut *conn)
    .await?;
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "INSERT INTO revisions ({REVISION_COLUMNS}, input) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"
    )))
    .bind(id.as_str())
    .bind(n)
    .bind(&record.prior_digest)
    .bind(&record.input_digest)
    .bind(&record.author)
    .bind(&record.reason)
    .bind(record.at as i64)
    .bind(plan::json_text(&record.invalidated_steps)?)
    .bind(plan::json_text(&record.kept_receipts)?)
    .bind(&req.input.text)
    .execute(&mut *conn)
    .await?;
    for (step, again) in &revision_plan.rerun {
        sqlx::query(
            "UPDATE steps SET state = $1, ready_at = CASE WHEN $1 = 'ready' THEN $2 END,
                 receipt_id = NULL, next_trigger = 'initial', note = NULL, uncertain_since = NULL,
                 escalated = NULL, input_digest = NULL
             WHERE workflow_id = $3 AND step = $4",
        )
        .bind(again.as_str())
        .bind(req.now as i64)
        .bind(id.as_str())
        .bind(step)
        .execute(&mut *conn)
        .await?;
        for table in ["receipts", "attempts"] {
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "UPDATE {table} SET superseded_by = $1
                 WHERE workflow_id = $2 AND step = $3 AND superseded_by IS NULL"
            )))
            .bind(n)
            .bind(id.as_str())
            .bind(step)
            .execute(&mut *conn)
            .await?;
        }
    }
    append_events(conn, id, req.now, &[plan::revision_event(&record)]).await?;
    recompute_state(conn, id, state, false, req.now).await?;
    store_answer(conn, s, &ActionAnswer::Applied(plan::json_text(&record)?)).await?;
    Ok(ReviseAnswer::Applied(record))
}

impl CourseStore for PgStore {
    async fn cancel(&self, request: CancelRequest) -> StoreResult<CancelAnswer> {
        transaction!(self.pool, |conn| cancel_tx(conn, request.clone()))
    }

    async fn cancellation(&self, id: &WorkflowId) -> StoreResult<Option<CancellationRecord>> {
        let mut conn = self.pool.acquire().await?;
        Ok(cancellation_on(&mut conn, id).await?)
    }

    async fn revise(&self, request: ReviseRequest) -> StoreResult<ReviseAnswer> {
        transaction!(self.pool, |conn| revise_tx(conn, request.clone()))
    }

    async fn remember(
        &self,
        scope: ActionScope,
        request_digest: String,
        answer: ActionAnswer,
        now: Millis,
    ) -> StoreResult<ActionRecord> {
        let (refusal, text, details) = rows::answer_columns(&answer);
        sqlx::query(
            "INSERT INTO operator_actions (subject, workflow_id, step, action, key, request_digest,
                 created_at, refusal, answer, refusal_details)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) ON CONFLICT DO NOTHING",
        )
        .bind(&scope.subject.0)
        .bind(scope.workflow_id.as_str())
        .bind(&scope.step)
        .bind(&scope.action)
        .bind(&scope.key)
        .bind(&request_digest)
        .bind(now as i64)
        .bind(refusal)
        .bind(text)
        .bind(details)
        .execute(&self.pool)
        .await?;
        let mut conn = self.pool.acquire().await?;
        action_on(&mut conn, &scope)
            .await?
            .ok_or_else(|| StoreError::Corrupt("a remembered key vanished".into()))
    }

    async fn revisions(&self, id: &WorkflowId) -> StoreResult<Vec<RevisionRecord>> {
        let found = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {REVISION_COLUMNS} FROM revisions WHERE workflow_id = $1 ORDER BY input_revision"
        )))
        .bind(id.as_str())
        .fetch_all(&self.pool)
        .await?;
        found.iter().map(rows::revision).collect()
    }
}
