//! What health checks and metrics scrapes read from PostgreSQL, and the consistency
//! check's repair.

use super::executor::recompute_state;
use super::{PgResult, PgStore, append_events, lock_workflow, transaction};
use crate::intent::{Millis, NewEvent, WorkflowId, WorkflowState};
use crate::metrics::{ReadyQueue, Snapshot, Tally};
use crate::store::rows;
use crate::store::{MetricsStore, RetentionStore, STORY_TABLES, StoreResult};
use sqlx::postgres::PgConnection;

impl RetentionStore for PgStore {
    async fn purge_ended(
        &self,
        ended_before: Millis,
        now: Millis,
        limit: u32,
    ) -> StoreResult<Vec<WorkflowId>> {
        transaction!(self.pool, |conn| purge_tx(conn, ended_before, now, limit))
    }
}

/// Deletes a batch of purgeable workflows. Rows are locked and skipped if another host
/// holds them, so hosts share the work and none waits on another.
async fn purge_tx(
    conn: &mut PgConnection,
    ended_before: Millis,
    now: Millis,
    limit: u32,
) -> PgResult<Vec<WorkflowId>> {
    let due: Vec<String> = sqlx::query_scalar(
        "SELECT workflow_id FROM workflows w
         WHERE ended_at IS NOT NULL AND ended_at < $1
           AND state IN ('completed', 'failed', 'cancelled')
           AND NOT EXISTS (SELECT 1 FROM intent_keys k WHERE k.workflow_id = w.workflow_id
                             AND (k.expires_at IS NULL OR k.expires_at >= $2))
           AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.workflow_id = w.workflow_id
                             AND o.state = 'pending')
         ORDER BY ended_at LIMIT $3
         FOR UPDATE SKIP LOCKED",
    )
    .bind(ended_before as i64)
    .bind(now as i64)
    .bind(i64::from(limit))
    .fetch_all(&mut *conn)
    .await?;
    for table in STORY_TABLES {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "DELETE FROM {table} WHERE workflow_id = ANY($1)"
        )))
        .bind(&due)
        .execute(&mut *conn)
        .await?;
    }
    Ok(due.into_iter().map(WorkflowId).collect())
}

impl MetricsStore for PgStore {
    async fn ping(&self) -> StoreResult<()> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    async fn snapshot(&self, now: Millis) -> StoreResult<Snapshot> {
        let live_workflows: Vec<(String, i64)> = sqlx::query_as(
            "SELECT state, COUNT(*) FROM workflows
             WHERE state IN ('running', 'needs_review') GROUP BY state ORDER BY state",
        )
        .fetch_all(&self.pool)
        .await?;
        let (outcome_unknown, since): (i64, Option<i64>) = sqlx::query_as(
            "SELECT COUNT(*), MIN(uncertain_since) FROM steps WHERE state = 'outcome_unknown'",
        )
        .fetch_one(&self.pool)
        .await?;
        let ready: Vec<(String, i64, i64)> = sqlx::query_as(
            "SELECT COALESCE(role, 'adapter'), COUNT(*), MIN(ready_at) FROM steps
             WHERE state IN ('ready', 'failed_retryable') AND ready_at <= $1
             GROUP BY COALESCE(role, 'adapter')",
        )
        .bind(now as i64)
        .fetch_all(&self.pool)
        .await?;
        let tallies: Vec<(String, String, String, i32, i64, i64)> = sqlx::query_as(
            "SELECT metric, workflow, state, bucket, SUM(n)::BIGINT, SUM(total)::BIGINT
             FROM outcome_tallies GROUP BY metric, workflow, state, bucket",
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(Snapshot {
            live_workflows: live_workflows
                .into_iter()
                .map(|(state, n)| (state, n as u64))
                .collect(),
            outcome_unknown: outcome_unknown as u64,
            outcome_unknown_since: since.map(|s| s as Millis),
            ready: ready
                .into_iter()
                .map(|(kind, count, oldest)| ReadyQueue {
                    kind,
                    count: count as u64,
                    oldest_ready_at: oldest as Millis,
                })
                .collect(),
            tallies: tallies
                .into_iter()
                .filter_map(|(metric, workflow, state, bucket, n, total)| {
                    Tally::from_row(&metric, workflow, state, i64::from(bucket), n, total)
                })
                .collect(),
        })
    }

    async fn last_sweep(&self) -> StoreResult<Option<Millis>> {
        let at: Option<i64> = sqlx::query_scalar("SELECT MAX(swept_before) FROM recovery_sweeps")
            .fetch_one(&self.pool)
            .await?;
        Ok(at.map(|a| a as Millis))
    }

    async fn rebuild_state(
        &self,
        id: &WorkflowId,
        stored: WorkflowState,
        by: &str,
        now: Millis,
    ) -> StoreResult<Option<WorkflowState>> {
        let (id, by) = (id.clone(), by.to_string());
        transaction!(self.pool, |conn| rebuild_tx(conn, &id, stored, &by, now))
    }
}

async fn rebuild_tx(
    conn: &mut PgConnection,
    id: &WorkflowId,
    stored: WorkflowState,
    by: &str,
    now: Millis,
) -> PgResult<Option<WorkflowState>> {
    // The workflow row's lock orders this against every step change.
    lock_workflow(conn, id).await?;
    let row = sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT {} FROM workflows WHERE workflow_id = $1",
        rows::WORKFLOW_COLUMNS
    )))
    .bind(id.as_str())
    .fetch_one(&mut *conn)
    .await?;
    let record = rows::workflow(&row)?;
    if record.state != stored {
        return Ok(None);
    }
    append_events(conn, id, now, &[NewEvent::repaired(stored, by)]).await?;
    recompute_state(conn, id, record.state, record.cancelled, now)
        .await
        .map(Some)
}
