//! Reads for projections ([`ReadStore`]), and the reads the writes share.

use super::{PgResult, PgStore};
use crate::intent::{WorkflowId, WorkflowState};
use crate::store::reads::ReadSql;
use crate::store::rows::{self, WORKFLOW_COLUMNS};
use crate::store::{ReadStore, StoreResult, WorkflowFilter, WorkflowRecord};
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

/// The shared reads in PostgreSQL's dialect; ids compare bytewise ("C"), as in SQLite.
pub(crate) const SQL: ReadSql = ReadSql {
    steps: "SELECT * FROM steps WHERE workflow_id = $1 ORDER BY ord",
    receipts: "SELECT * FROM receipts WHERE workflow_id = $1 ORDER BY recorded_at, receipt_id COLLATE \"C\"",
    timeline: "SELECT * FROM timeline WHERE workflow_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
    timeline_latest: "SELECT * FROM timeline WHERE workflow_id = $1
               AND ($2::TEXT IS NULL OR step = $2) AND ($3::BIGINT IS NULL OR seq < $3)
             ORDER BY seq DESC LIMIT $4",
    attempts: "SELECT * FROM attempts WHERE workflow_id = $1 AND step = $2 AND number > $3
             ORDER BY number LIMIT $4",
};

impl ReadStore for PgStore {
    async fn workflow(&self, id: &WorkflowId) -> StoreResult<Option<WorkflowRecord>> {
        let mut conn = self.pool.acquire().await?;
        Ok(workflow_on(&mut conn, id).await?)
    }

    crate::store::reads::shared_read_methods!(pool, SQL);

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
