//! Reads for projections ([`ReadStore`]), and the reads the writer shares.

use super::SqliteStore;
use crate::intent::{Receipt, TimelineEvent, WorkflowId};
use crate::store::rows::{self, RECEIPT_COLUMNS, WORKFLOW_COLUMNS};
use crate::store::{
    AttemptRecord, ReadStore, StepRecord, StoreResult, WorkflowFilter, WorkflowRecord,
};
use sqlx::SqliteConnection;

/// One workflow (inside a write transaction, or on a point-read connection).
pub(crate) fn workflow_tx(
    conn: &rusqlite::Connection,
    id: &WorkflowId,
) -> StoreResult<Option<WorkflowRecord>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {WORKFLOW_COLUMNS} FROM workflows WHERE workflow_id = ?"
    ))?;
    let mut found = stmt.query([id.as_str()])?;
    found.next()?.map(rows::workflow).transpose()
}

/// A workflow's receipts, read inside a write transaction.
pub(crate) fn receipts_tx(
    conn: &rusqlite::Connection,
    id: &WorkflowId,
) -> StoreResult<Vec<Receipt>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {RECEIPT_COLUMNS} FROM receipts WHERE workflow_id = ? ORDER BY recorded_at, receipt_id"
    ))?;
    super::each_row(&mut stmt, [id.as_str()], |r| rows::receipt(r))
}

pub(crate) async fn receipts_on(
    conn: &mut SqliteConnection,
    id: &WorkflowId,
) -> StoreResult<Vec<Receipt>> {
    let rows = sqlx::query(
        "SELECT * FROM receipts WHERE workflow_id = ? ORDER BY recorded_at, receipt_id",
    )
    .bind(id.as_str())
    .fetch_all(&mut *conn)
    .await?;
    rows.iter().map(rows::receipt).collect()
}

impl ReadStore for SqliteStore {
    async fn workflow(&self, id: &WorkflowId) -> StoreResult<Option<WorkflowRecord>> {
        self.points.with(|conn| workflow_tx(conn, id))
    }

    async fn steps(&self, id: &WorkflowId) -> StoreResult<Vec<StepRecord>> {
        let rows = sqlx::query("SELECT * FROM steps WHERE workflow_id = ? ORDER BY rowid")
            .bind(id.as_str())
            .fetch_all(&self.read)
            .await?;
        rows.iter().map(rows::step).collect()
    }

    async fn receipts(&self, id: &WorkflowId) -> StoreResult<Vec<Receipt>> {
        let mut conn = self.read.acquire().await?;
        receipts_on(&mut conn, id).await
    }

    async fn timeline(
        &self,
        id: &WorkflowId,
        after: u64,
        limit: u32,
    ) -> StoreResult<Vec<TimelineEvent>> {
        let rows = sqlx::query(
            "SELECT * FROM timeline WHERE workflow_id = ? AND seq > ? ORDER BY seq LIMIT ?",
        )
        .bind(id.as_str())
        .bind(after as i64)
        .bind(limit as i64)
        .fetch_all(&self.read)
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
            "SELECT * FROM timeline WHERE workflow_id = ?1
               AND (?2 IS NULL OR step = ?2) AND (?3 IS NULL OR seq < ?3)
             ORDER BY seq DESC LIMIT ?4",
        )
        .bind(id.as_str())
        .bind(step)
        .bind(before.map(|b| b as i64))
        .bind(limit as i64)
        .fetch_all(&self.read)
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
        let rows =
            sqlx::query("SELECT * FROM attempts WHERE workflow_id = ? AND step = ? AND number > ? ORDER BY number LIMIT ?")
                .bind(id.as_str())
                .bind(step)
                .bind(after as i64)
                .bind(limit as i64)
                .fetch_all(&self.read)
                .await?;
        rows.iter().map(rows::attempt).collect()
    }

    async fn list_workflows(&self, filter: &WorkflowFilter) -> StoreResult<Vec<WorkflowRecord>> {
        let mut sql = format!("SELECT {WORKFLOW_COLUMNS} FROM workflows WHERE 1 = 1");
        if filter.subject.is_some() {
            sql.push_str(" AND subject = ?");
        }
        if filter.state.is_some() {
            sql.push_str(" AND state = ?");
        }
        if filter.workflow.is_some() {
            sql.push_str(" AND workflow = ?");
        }
        if filter.before.is_some() {
            sql.push_str(" AND (created_at < ? OR (created_at = ? AND workflow_id < ?))");
        }
        sql.push_str(" ORDER BY created_at DESC, workflow_id DESC LIMIT ?");
        let mut q = sqlx::query(sqlx::AssertSqlSafe(sql));
        if let Some(s) = &filter.subject {
            q = q.bind(s.0.clone());
        }
        if let Some(s) = filter.state {
            q = q.bind(s.as_str());
        }
        if let Some(w) = &filter.workflow {
            q = q.bind(w.clone());
        }
        if let Some((at, id)) = &filter.before {
            q = q.bind(*at as i64).bind(*at as i64).bind(id.0.clone());
        }
        let rows = q.bind(filter.limit as i64).fetch_all(&self.read).await?;
        rows.iter().map(rows::workflow).collect()
    }
}
