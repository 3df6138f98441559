//! Changes of a workflow's course: its cancellation, under a key, with the course settled
//! in the same transaction.

use super::actions::{action_on, store_answer};
use super::executor::recompute_state;
use super::{PgResult, PgStore, append_events, lock_workflow, transaction};
use crate::course;
use crate::intent::WorkflowId;
use crate::store::plan;
use crate::store::rows::{self, CANCELLATION_COLUMNS, Columns};
use crate::store::{
    ActionAnswer, CancelAnswer, CancelRequest, CancellationRecord, CourseStore, StoreError,
    StoreResult,
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
    // The primary key decides who owns the key: a racing twin waits for the first
    // transaction and, once it commits, finds the key taken.
    let inserted = sqlx::query(
        "INSERT INTO operator_actions (subject, workflow_id, step, action, key, request_digest, created_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING",
    )
    .bind(&s.subject.0)
    .bind(s.workflow_id.as_str())
    .bind(&s.step)
    .bind(&s.action)
    .bind(&s.key)
    .bind(&req.request_digest)
    .bind(req.now as i64)
    .execute(&mut *conn)
    .await?
    .rows_affected();
    if inserted == 0 {
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

impl CourseStore for PgStore {
    async fn cancel(&self, request: CancelRequest) -> StoreResult<CancelAnswer> {
        transaction!(self.pool, |conn| cancel_tx(conn, request.clone()))
    }

    async fn cancellation(&self, id: &WorkflowId) -> StoreResult<Option<CancellationRecord>> {
        let mut conn = self.pool.acquire().await?;
        Ok(cancellation_on(&mut conn, id).await?)
    }
}
