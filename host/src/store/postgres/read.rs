//! Reads for projections ([`ReadStore`]) and row mapping shared with the writes.

use super::{PgResult, PgStore, u};
use crate::intent::{
    AttemptId, EventKind, EvidenceKind, Receipt, ReceiptId, StepState, Subject, TimelineEvent,
    WorkflowId, WorkflowState,
};
use crate::store::{
    AttemptRecord, ReadStore, StepRecord, StoreError, StoreResult, WorkflowFilter, WorkflowRecord,
};
use sqlx::Row;
use sqlx::postgres::{PgConnection, PgRow};

/// Parses a stored enumeration, turning a bad value into [`StoreError::Corrupt`].
pub(crate) fn parse<T: std::str::FromStr>(text: &str) -> StoreResult<T>
where
    T::Err: std::fmt::Display,
{
    text.parse::<T>()
        .map_err(|e| StoreError::Corrupt(e.to_string()))
}

pub(crate) fn json(text: &str) -> StoreResult<serde_json::Value> {
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt(format!("stored JSON: {e}")))
}

fn opt_u64(r: &PgRow, col: &str) -> Option<u64> {
    r.get::<Option<i64>, _>(col).map(u)
}

const WORKFLOW_COLUMNS: &str =
    "workflow_id, workflow, definition_version, subject, idempotency_key, input, input_digest,
     state, created_at, ended_at, deadline_at, attempts_used, external_calls_used, runtime_used_ms";

fn workflow_from_row(r: &PgRow) -> StoreResult<WorkflowRecord> {
    Ok(WorkflowRecord {
        workflow_id: WorkflowId(r.get("workflow_id")),
        workflow: r.get("workflow"),
        definition_version: r.get::<i64, _>("definition_version") as u32,
        subject: Subject(r.get("subject")),
        idempotency_key: r.get("idempotency_key"),
        input: r.get("input"),
        input_digest: r.get("input_digest"),
        state: parse::<WorkflowState>(r.get("state"))?,
        created_at: u(r.get("created_at")),
        ended_at: opt_u64(r, "ended_at"),
        deadline_at: u(r.get("deadline_at")),
        attempts_used: r.get::<i64, _>("attempts_used") as u32,
        external_calls_used: r.get::<i64, _>("external_calls_used") as u32,
        runtime_used_ms: u(r.get("runtime_used_ms")),
    })
}

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
    Ok(row.as_ref().map(workflow_from_row).transpose()?)
}

fn step_from_row(r: &PgRow) -> StoreResult<StepRecord> {
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

fn receipt_from_row(r: &PgRow) -> StoreResult<Receipt> {
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
        recorded_at: u(r.get("recorded_at")),
        author: r.get("author"),
        reason: r.get("reason"),
        evidence: r.get("evidence"),
    })
}

fn attempt_from_row(r: &PgRow) -> StoreResult<AttemptRecord> {
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
        started_at: u(r.get("started_at")),
        finished_at: opt_u64(r, "finished_at"),
        log: json(r.get("log"))?,
    })
}

/// A workflow's receipts, in the order SQLite returns them.
pub(crate) async fn receipts_on(
    conn: &mut PgConnection,
    id: &WorkflowId,
) -> PgResult<Vec<Receipt>> {
    let rows = sqlx::query(
        "SELECT * FROM receipts WHERE workflow_id = $1 ORDER BY recorded_at, receipt_id COLLATE \"C\"",
    )
    .bind(id.as_str())
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows
        .iter()
        .map(receipt_from_row)
        .collect::<StoreResult<_>>()?)
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
        rows.iter().map(step_from_row).collect()
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
        rows.iter()
            .map(|r| {
                Ok(TimelineEvent {
                    seq: u(r.get("seq")),
                    at: u(r.get("at")),
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
        let rows = sqlx::query(
            "SELECT * FROM attempts WHERE workflow_id = $1 AND step = $2 AND number > $3 ORDER BY number LIMIT $4",
        )
        .bind(id.as_str())
        .bind(step)
        .bind(after as i64)
        .bind(limit as i64)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(attempt_from_row).collect()
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
        rows.iter().map(workflow_from_row).collect()
    }
}
