//! Reads for projections ([`ReadStore`]) and row mapping shared with the writer.

use super::SqliteStore;
use crate::intent::{
    AttemptId, EventKind, EvidenceKind, Receipt, ReceiptId, StepState, Subject, TimelineEvent,
    WorkflowId, WorkflowState,
};
use crate::store::{
    AttemptRecord, ReadStore, StepRecord, StoreError, StoreResult, WorkflowFilter, WorkflowRecord,
};
use sqlx::sqlite::SqliteRow;
use sqlx::{Row, SqliteConnection};

/// Parses a stored enumeration, turning a bad value into [`StoreError::Corrupt`].
pub(crate) fn parse<T: std::str::FromStr>(text: &str) -> StoreResult<T>
where
    T::Err: std::fmt::Display,
{
    text.parse::<T>()
        .map_err(|e| StoreError::Corrupt(e.to_string()))
}

fn json(text: &str) -> StoreResult<serde_json::Value> {
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt(format!("stored JSON: {e}")))
}

fn opt_u64(r: &SqliteRow, col: &str) -> Option<u64> {
    r.get::<Option<i64>, _>(col).map(|v| v as u64)
}

pub(crate) fn workflow_from_row(r: &SqliteRow) -> StoreResult<WorkflowRecord> {
    Ok(WorkflowRecord {
        workflow_id: WorkflowId(r.get("workflow_id")),
        workflow: r.get("workflow"),
        definition_version: r.get::<i64, _>("definition_version") as u32,
        subject: Subject(r.get("subject")),
        idempotency_key: r.get("idempotency_key"),
        input: r.get("input"),
        input_digest: r.get("input_digest"),
        state: parse::<WorkflowState>(r.get("state"))?,
        created_at: r.get::<i64, _>("created_at") as u64,
        ended_at: opt_u64(r, "ended_at"),
        deadline_at: r.get::<i64, _>("deadline_at") as u64,
        attempts_used: r.get::<i64, _>("attempts_used") as u32,
        external_calls_used: r.get::<i64, _>("external_calls_used") as u32,
        runtime_used_ms: r.get::<i64, _>("runtime_used_ms") as u64,
    })
}

const WORKFLOW_COLUMNS: &str =
    "workflow_id, workflow, definition_version, subject, idempotency_key, input, input_digest,
     state, created_at, ended_at, deadline_at, attempts_used, external_calls_used, runtime_used_ms";

/// One workflow (inside a write transaction, or on a point-read connection).
pub(crate) fn workflow_tx(
    conn: &rusqlite::Connection,
    id: &WorkflowId,
) -> StoreResult<Option<WorkflowRecord>> {
    use rusqlite::OptionalExtension;
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {WORKFLOW_COLUMNS} FROM workflows WHERE workflow_id = ?"
    ))?;
    let row = stmt
        .query_row([id.as_str()], |r| {
            Ok((
                WorkflowRecord {
                    workflow_id: WorkflowId(r.get(0)?),
                    workflow: r.get(1)?,
                    definition_version: r.get::<_, i64>(2)? as u32,
                    subject: Subject(r.get(3)?),
                    idempotency_key: r.get(4)?,
                    input: r.get(5)?,
                    input_digest: r.get(6)?,
                    state: WorkflowState::Running,
                    created_at: r.get::<_, i64>(8)? as u64,
                    ended_at: r.get::<_, Option<i64>>(9)?.map(|v| v as u64),
                    deadline_at: r.get::<_, i64>(10)? as u64,
                    attempts_used: r.get::<_, i64>(11)? as u32,
                    external_calls_used: r.get::<_, i64>(12)? as u32,
                    runtime_used_ms: r.get::<_, i64>(13)? as u64,
                },
                r.get::<_, String>(7)?,
            ))
        })
        .optional()?;
    row.map(|(mut w, state)| {
        w.state = parse(&state)?;
        Ok(w)
    })
    .transpose()
}

fn step_from_row(r: &SqliteRow) -> StoreResult<StepRecord> {
    Ok(StepRecord {
        workflow_id: WorkflowId(r.get("workflow_id")),
        step: r.get("step"),
        state: parse::<StepState>(r.get("state"))?,
        attempts: r.get::<i64, _>("attempts") as u32,
        ready_at: opt_u64(r, "ready_at"),
        lease_owner: r.get("lease_owner"),
        lease_expires_at: opt_u64(r, "lease_expires_at"),
        receipt_id: r.get::<Option<String>, _>("receipt_id").map(ReceiptId),
        note: r.get("note"),
        escalated: r
            .get::<Option<String>, _>("escalated")
            .map(|s| json(&s))
            .transpose()?,
    })
}

pub(crate) fn receipt_from_row(r: &SqliteRow) -> StoreResult<Receipt> {
    Ok(Receipt {
        receipt_id: ReceiptId(r.get("receipt_id")),
        workflow_id: WorkflowId(r.get("workflow_id")),
        step: r.get("step"),
        attempt_id: r.get::<Option<String>, _>("attempt_id").map(AttemptId),
        evidence_kind: parse::<EvidenceKind>(r.get("evidence_kind"))?,
        component: r.get("component"),
        component_version: r.get("component_version"),
        component_digest: r.get("component_digest"),
        input_digest: r.get("input_digest"),
        external_reference: r.get("external_reference"),
        output: json(r.get("output"))?,
        recorded_at: r.get::<i64, _>("recorded_at") as u64,
        author: r.get("author"),
        reason: r.get("reason"),
        evidence: r.get("evidence"),
    })
}

fn attempt_from_row(r: &SqliteRow) -> StoreResult<AttemptRecord> {
    Ok(AttemptRecord {
        attempt_id: AttemptId(r.get("attempt_id")),
        workflow_id: WorkflowId(r.get("workflow_id")),
        step: r.get("step"),
        number: r.get::<i64, _>("number") as u32,
        trigger: parse(r.get("trigger"))?,
        lease_owner: r.get("lease_owner"),
        component: r.get("component"),
        component_version: r.get("component_version"),
        component_digest: r.get("component_digest"),
        input_digest: r.get("input_digest"),
        request_identity: r.get("request_identity"),
        checkpoint: r.get::<i64, _>("checkpoint") as u8,
        observation: r.get("observation"),
        outcome: parse(r.get("outcome"))?,
        started_at: r.get::<i64, _>("started_at") as u64,
        finished_at: opt_u64(r, "finished_at"),
        log: json(r.get("log"))?,
    })
}

/// A workflow's receipts, read inside a write transaction.
pub(crate) fn receipts_tx(
    conn: &rusqlite::Connection,
    id: &WorkflowId,
) -> StoreResult<Vec<Receipt>> {
    let mut stmt = conn.prepare_cached(
        "SELECT receipt_id, workflow_id, step, attempt_id, evidence_kind, component,
                component_version, component_digest, input_digest, external_reference, output,
                recorded_at, author, reason, evidence
         FROM receipts WHERE workflow_id = ? ORDER BY recorded_at, receipt_id",
    )?;
    let mut rows = stmt.query([id.as_str()])?;
    let mut out = Vec::new();
    while let Some(r) = rows.next()? {
        let kind: String = r.get(4)?;
        let output: String = r.get(10)?;
        out.push(Receipt {
            receipt_id: ReceiptId(r.get(0)?),
            workflow_id: WorkflowId(r.get(1)?),
            step: r.get(2)?,
            attempt_id: r.get::<_, Option<String>>(3)?.map(AttemptId),
            evidence_kind: parse::<EvidenceKind>(&kind)?,
            component: r.get(5)?,
            component_version: r.get(6)?,
            component_digest: r.get(7)?,
            input_digest: r.get(8)?,
            external_reference: r.get(9)?,
            output: json(&output)?,
            recorded_at: r.get::<_, i64>(11)? as u64,
            author: r.get(12)?,
            reason: r.get(13)?,
            evidence: r.get(14)?,
        });
    }
    Ok(out)
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
    rows.iter().map(receipt_from_row).collect()
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
        rows.iter().map(step_from_row).collect()
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
        rows.iter()
            .map(|r| {
                Ok(TimelineEvent {
                    seq: r.get::<i64, _>("seq") as u64,
                    at: r.get::<i64, _>("at") as u64,
                    kind: parse::<EventKind>(r.get("kind"))?,
                    step: r.get("step"),
                    attempt_id: r.get("attempt_id"),
                    text: r.get("text"),
                    data: json(r.get("data"))?,
                })
            })
            .collect()
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
        rows.iter().map(attempt_from_row).collect()
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
        rows.iter().map(workflow_from_row).collect()
    }
}
