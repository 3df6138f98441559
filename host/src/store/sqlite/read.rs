//! Reads for projections ([`ReadStore`]), and the reads the writer shares.

use super::SqliteStore;
use crate::intent::{Receipt, WorkflowId};
use crate::store::reads::ReadSql;
use crate::store::rows::{self, RECEIPT_COLUMNS, WORKFLOW_COLUMNS};
use crate::store::{ReadStore, StoreResult, WorkflowFilter, WorkflowRecord};

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

/// A workflow's standing receipts (none superseded), read inside a write transaction.
pub(crate) fn receipts_tx(
    conn: &rusqlite::Connection,
    id: &WorkflowId,
) -> StoreResult<Vec<Receipt>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {RECEIPT_COLUMNS} FROM receipts WHERE workflow_id = ? AND superseded_by IS NULL
         ORDER BY recorded_at, receipt_id"
    ))?;
    super::each_row(&mut stmt, [id.as_str()], |r| rows::receipt(r))
}

/// The standing receipts of `steps` of a workflow, read inside a write transaction (what a
/// claimed step's input reads; found by step, whatever the workflow's length).
pub(crate) fn receipts_of_tx(
    conn: &rusqlite::Connection,
    id: &WorkflowId,
    steps: &[String],
) -> StoreResult<Vec<Receipt>> {
    let mut receipts = Vec::new();
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {RECEIPT_COLUMNS} FROM receipts
         WHERE workflow_id = ? AND step = ? AND superseded_by IS NULL"
    ))?;
    for step in steps {
        receipts.extend(super::each_row(
            &mut stmt,
            rusqlite::params![id.as_str(), step],
            |r| rows::receipt(r),
        )?);
    }
    // In the order of the full read.
    receipts.sort_by(|a, b| {
        (a.recorded_at, a.receipt_id.as_str()).cmp(&(b.recorded_at, b.receipt_id.as_str()))
    });
    Ok(receipts)
}

/// The shared reads in SQLite's dialect.
pub(crate) const SQL: ReadSql = ReadSql {
    steps: "SELECT * FROM steps WHERE workflow_id = ? ORDER BY rowid",
    receipts: "SELECT * FROM receipts WHERE workflow_id = ? ORDER BY recorded_at, receipt_id",
    timeline: "SELECT * FROM timeline WHERE workflow_id = ? AND seq > ? ORDER BY seq LIMIT ?",
    timeline_latest: "SELECT * FROM timeline WHERE workflow_id = ?1
               AND (?2 IS NULL OR step = ?2) AND (?3 IS NULL OR seq < ?3)
             ORDER BY seq DESC LIMIT ?4",
    attempts: "SELECT * FROM attempts WHERE workflow_id = ? AND step = ? AND number > ?
             ORDER BY number LIMIT ?",
};

impl ReadStore for SqliteStore {
    async fn workflow(&self, id: &WorkflowId) -> StoreResult<Option<WorkflowRecord>> {
        self.points.with(|conn| workflow_tx(conn, id))
    }

    crate::store::reads::shared_read_methods!(read, SQL);

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
