//! Reads for projections ([`ReadStore`]) in SQLite's dialect, and the receipts a claim reads.

use super::SqliteStore;
use crate::intent::{Receipt, WorkflowId};
use crate::store::reads::ReadSql;
use crate::store::rows::{self, RECEIPT_COLUMNS};
use crate::store::{ReadStore, StoreResult};

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
    ids: "",
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
    crate::store::reads::shared_read_methods!(read, SQL);
}
