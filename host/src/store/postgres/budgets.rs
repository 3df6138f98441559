//! Budget extensions (the steps they free), and the deadline warnings of workflows that
//! wait for a person.

use super::actions::{action_on, reserve_key, store_answer};
use super::executor::{outbox, recompute_state};
use super::{PgResult, PgStore, append_events, lock_workflow, transaction};
use crate::intent::{Millis, WorkflowId};
use crate::store::rows::{self, Columns};
use crate::store::{
    ActionAnswer, BudgetStore, ExtendAnswer, ExtendRequest, StoreError, StoreResult, plan,
};
use sqlx::postgres::PgConnection;

async fn extend_tx(conn: &mut PgConnection, req: ExtendRequest) -> PgResult<ExtendAnswer> {
    let s = &req.scope;
    if !reserve_key(conn, s, &req.request_digest, req.now).await? {
        let existing = action_on(conn, s)
            .await?
            .ok_or_else(|| StoreError::Corrupt("an extension's key vanished".into()))?;
        return Ok(if existing.request_digest == req.request_digest {
            ExtendAnswer::Replayed(existing)
        } else {
            ExtendAnswer::KeyConflict
        });
    }
    let id = &s.workflow_id;
    // The workflow row's lock orders this against every step change and every charge.
    lock_workflow(conn, id).await?;
    let row = sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT {} FROM workflows WHERE workflow_id = $1",
        rows::WORKFLOW_COLUMNS
    )))
    .bind(id.as_str())
    .fetch_one(&mut *conn)
    .await?;
    let record = rows::workflow(&row)?;
    let added = plan::added(&record.budget_added, &req.add);
    sqlx::query("UPDATE workflows SET budget_added = $1 WHERE workflow_id = $2")
        .bind(serde_json::to_string(&added).map_err(|e| StoreError::Corrupt(e.to_string()))?)
        .bind(id.as_str())
        .execute(&mut *conn)
        .await?;
    let used = record.budget_used();
    let stays = plan::still_exhausted(&req.base, &added, &used);
    let blocked = sqlx::query(
        "SELECT step, (blocked::jsonb ->> 'limit') AS lim FROM steps
         WHERE workflow_id = $1 AND state = 'blocked'
           AND (blocked::jsonb ->> 'reason') = 'budget_exhausted'",
    )
    .bind(id.as_str())
    .fetch_all(&mut *conn)
    .await?;
    let mut released = Vec::new();
    for r in &blocked {
        let limit = r.opt_text("lim")?.unwrap_or_default();
        if !stays.contains(&limit.as_str()) {
            released.push(r.text("step")?);
        }
    }
    if !released.is_empty() {
        sqlx::query(
            "UPDATE steps SET state = 'ready', ready_at = $1, blocked = NULL, note = NULL
             WHERE workflow_id = $2 AND step = ANY($3) AND state = 'blocked'",
        )
        .bind(req.now as i64)
        .bind(id.as_str())
        .bind(&released)
        .execute(&mut *conn)
        .await?;
    }
    append_events(conn, id, req.now, &[plan::extension_event(&req, &released)]).await?;
    recompute_state(conn, id, record.state, record.cancelled, req.now).await?;
    let answer = plan::extension_answer(&req.base, &added, &used)?;
    store_answer(conn, s, &ActionAnswer::Applied(answer.clone())).await?;
    Ok(ExtendAnswer::Applied(answer))
}

async fn warn_tx(conn: &mut PgConnection, now: Millis) -> PgResult<u64> {
    let due: Vec<(String, i64)> = sqlx::query_as(
        "UPDATE workflows SET deadline_warned_at = $1
         WHERE state = 'needs_review' AND deadline_warned_at IS NULL
           AND $1 < deadline_at AND $1 >= deadline_at - (deadline_at - created_at) / 5
         RETURNING workflow_id, deadline_at",
    )
    .bind(now as i64)
    .fetch_all(&mut *conn)
    .await?;
    for (workflow_id, deadline_at) in &due {
        let id = WorkflowId(workflow_id.clone());
        append_events(conn, &id, now, &[plan::deadline_event(*deadline_at as u64)]).await?;
        outbox(
            conn,
            &id,
            crate::notify::EventType::DeadlineApproaching,
            now,
        )
        .await?;
    }
    Ok(due.len() as u64)
}

impl BudgetStore for PgStore {
    async fn extend_budget(&self, request: ExtendRequest) -> StoreResult<ExtendAnswer> {
        transaction!(self.pool, |conn| extend_tx(conn, request.clone()))
    }

    async fn warn_deadlines(&self, now: Millis) -> StoreResult<u64> {
        transaction!(self.pool, |conn| warn_tx(conn, now))
    }
}
