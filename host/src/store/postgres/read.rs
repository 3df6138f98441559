//! Reads for projections ([`ReadStore`]), and the reads the writes share.

use super::{PgResult, PgStore};
use crate::intent::{Receipt, TimelineEvent, WorkflowId, WorkflowState};
use crate::store::rows::{self, WORKFLOW_COLUMNS};
use crate::store::{
    AttemptRecord, ReadStore, StepRecord, StoreResult, WorkflowFilter, WorkflowRecord,
};
use sqlx::postgres::PgConnection;

/// One workflow, on any connection (inside a transaction or not).
pub(crate) async fn workflow_on(
    conn: &mut PgConnection,
    id: &WorkflowId,
) -> PgResult<Option<WorkflowRecord>> {
    let row = sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT {WORKFLOW_COLUMNS} FROM workflows WHERE workflow_id = $1"
    )))
    .bind(id.as_str())
    .fetch_optional(&mut *conn)
    .await?;
    Ok(row.as_ref().map(rows::workflow).transpose()?)
}

/// A workflow's receipts, in the order SQLite returns them.
async fn receipts_on(conn: &mut PgConnection, id: &WorkflowId) -> PgResult<Vec<Receipt>> {
    let rows = sqlx::query(
        "SELECT * FROM receipts WHERE workflow_id = $1 ORDER BY recorded_at, receipt_id COLLATE \"C\"",
    )
    .bind(id.as_str())
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows.iter().map(rows::receipt).collect::<StoreResult<_>>()?)
}

impl ReadStore for PgStore {
    async fn workflow(&self, id: &WorkflowId) -> StoreResult<Option<WorkflowRecord>> {
        let mut conn = self.pool.acquire().await?;
        Ok(workflow_on(&mut conn, id).await?)
    }

    async fn steps(&self, id: &WorkflowId) -> StoreResult<Vec<StepRecord>> {
        let rows = sqlx::query("SELECT * FROM steps WHERE workflow_id = $1 ORDER BY ord")
            .bind(id.as_str())
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(rows::step).collect()
    }

    async fn receipts(&self, id: &WorkflowId) -> StoreResult<Vec<Receipt>> {
        let mut conn = self.pool.acquire().await?;
        Ok(receipts_on(&mut conn, id).await?)
    }

    async fn timeline(
        &self,
        id: &WorkflowId,
        after: u64,
        limit: u32,
    ) -> StoreResult<Vec<TimelineEvent>> {
        let rows = sqlx::query(
            "SELECT * FROM timeline WHERE workflow_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
        )
        .bind(id.as_str())
        .bind(after as i64)
        .bind(limit as i64)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(rows::timeline_event).collect()
    }

    async fn timeline_latest(
        &self,
        id: &WorkflowId,
        step: Option<&str>,
        before: Option<u64>,
        limit: u32,
    ) -> StoreResult<Vec<TimelineEvent>> {
        let rows = sqlx::query(
            "SELECT * FROM timeline WHERE workflow_id = $1
               AND ($2::TEXT IS NULL OR step = $2) AND ($3::BIGINT IS NULL OR seq < $3)
             ORDER BY seq DESC LIMIT $4",
        )
        .bind(id.as_str())
        .bind(step)
        .bind(before.map(|b| b as i64))
        .bind(limit as i64)
        .fetch_all(&self.pool)
        .await?;
        // Read newest first to take the latest; shown oldest first.
        rows.iter().rev().map(rows::timeline_event).collect()
    }

    async fn attempts(
        &self,
        id: &WorkflowId,
        step: &str,
        after: u32,
        limit: u32,
    ) -> StoreResult<Vec<AttemptRecord>> {
        let rows = sqlx::query(
            "SELECT * FROM attempts WHERE workflow_id = $1 AND step = $2 AND number > $3 ORDER BY number LIMIT $4",
        )
        .bind(id.as_str())
        .bind(step)
        .bind(after as i64)
        .bind(limit as i64)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(rows::attempt).collect()
    }

    async fn list_workflows(&self, filter: &WorkflowFilter) -> StoreResult<Vec<WorkflowRecord>> {
        // Absent filters are NULL parameters, so one statement serves every combination.
        // Ids compare bytewise ("C") as in SQLite, whatever the database's locale.
        let (before_at, before_id) = match &filter.before {
            Some((at, id)) => (Some(*at as i64), Some(id.0.clone())),
            None => (None, None),
        };
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {WORKFLOW_COLUMNS} FROM workflows
             WHERE ($1::TEXT IS NULL OR subject = $1)
               AND ($2::TEXT IS NULL OR state = $2)
               AND ($3::TEXT IS NULL OR workflow = $3)
               AND ($4::BIGINT IS NULL OR created_at < $4
                    OR (created_at = $4 AND workflow_id COLLATE \"C\" < $5::TEXT))
             ORDER BY created_at DESC, workflow_id COLLATE \"C\" DESC LIMIT $6"
        )))
        .bind(filter.subject.as_ref().map(|s| s.0.clone()))
        .bind(filter.state.map(WorkflowState::as_str))
        .bind(filter.workflow.clone())
        .bind(before_at)
        .bind(before_id)
        .bind(filter.limit as i64)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(rows::workflow).collect()
    }
}
