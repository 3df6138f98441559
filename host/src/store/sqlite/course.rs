//! Changes of a workflow's course: its cancellation, under a key, with the course settled
//! in the same transaction.

use super::actions::{action_tx, reserve_key, store_answer};
use super::executor::recompute_state;
use super::{SqliteStore, append_events};
use crate::course;
use crate::intent::{Millis, StepState, WorkflowId, WorkflowState};
use crate::store::plan;
use crate::store::rows::{self, CANCELLATION_COLUMNS, Columns, REVISION_COLUMNS, parse};
use crate::store::{
    ActionAnswer, ActionRecord, ActionScope, CancelAnswer, CancelRequest, CancellationRecord,
    CourseStore, ReviseAnswer, ReviseRequest, RevisionRecord, StoreError, StoreResult,
};
use rusqlite::{Connection, OptionalExtension, params};

fn cancellation_tx(conn: &Connection, id: &WorkflowId) -> StoreResult<Option<CancellationRecord>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {CANCELLATION_COLUMNS} FROM cancellations WHERE workflow_id = ?"
    ))?;
    let mut found = stmt.query([id.as_str()])?;
    found.next()?.map(rows::cancellation).transpose()
}

/// The workflow's rows as the course sees them, with the checkpoint of each running attempt.
fn course_steps(conn: &Connection, id: &WorkflowId) -> StoreResult<Vec<course::CourseStep>> {
    let mut steps = Vec::new();
    {
        let mut stmt = conn.prepare_cached(&format!(
            "{} WHERE s.workflow_id = ? ORDER BY s.rowid",
            plan::COURSE_SELECT
        ))?;
        let mut found = stmt.query([id.as_str()])?;
        while let Some(r) = found.next()? {
            steps.push(rows::course_step(r)?);
        }
    }
    let mut stmt = conn.prepare_cached(
        "SELECT a.step, a.checkpoint FROM steps s JOIN attempts a
           ON a.workflow_id = s.workflow_id AND a.step = s.step AND a.number = s.attempts
         WHERE s.workflow_id = ? AND s.state = 'running'",
    )?;
    let running = stmt.query_map([id.as_str()], |r| {
        Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?))
    })?;
    for found in running {
        let (step, checkpoint) = found?;
        if let Some(s) = steps.iter_mut().find(|s| s.id == step) {
            s.checkpoint = Some(rows::fits("checkpoint", checkpoint)?);
        }
    }
    Ok(steps)
}

fn cancel_tx(conn: &Connection, req: CancelRequest) -> StoreResult<CancelAnswer> {
    if let Some(existing) = action_tx(conn, &req.scope)? {
        return Ok(if existing.request_digest == req.request_digest {
            CancelAnswer::Replayed(existing)
        } else {
            CancelAnswer::KeyConflict
        });
    }
    let id = &req.scope.workflow_id;
    let (state, cancel_on): (String, Option<String>) = conn
        .prepare_cached("SELECT state, cancel_on FROM workflows WHERE workflow_id = ?")?
        .query_row([id.as_str()], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?
        .ok_or_else(|| StoreError::NotFound(format!("workflow {id}")))?;
    let s = &req.scope;
    reserve_key(conn, s, &req.request_digest, req.now)?;
    if cancel_on.is_some()
        && let Some(existing) = cancellation_tx(conn, id)?
    {
        let text = plan::cancel_answer_text(false, &existing)?;
        store_answer(conn, &req.scope, &ActionAnswer::Applied(text))?;
        return Ok(CancelAnswer::Existing(existing));
    }
    let state = parse::<WorkflowState>(&state)?;
    let steps = course_steps(conn, id)?;
    let record = match plan::cancellation(&req, state, &steps) {
        Ok(record) => record,
        Err(refusal) => {
            store_answer(conn, &req.scope, &ActionAnswer::Refused(refusal.clone()))?;
            return Ok(CancelAnswer::Refused(refusal));
        }
    };
    conn.prepare_cached(&format!(
        "INSERT INTO cancellations ({CANCELLATION_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
    ))?
    .execute(params![
        record.cancellation_id.as_str(),
        id.as_str(),
        &record.requested_by,
        record.requested_at as i64,
        &record.reason,
        i64::from(record.withdraw),
        record.outcome.as_str(),
        &record.message,
        serde_json::to_string(&record.consequences)
            .map_err(|e| StoreError::Corrupt(e.to_string()))?,
    ])?;
    conn.prepare_cached("UPDATE workflows SET cancel_on = ? WHERE workflow_id = ?")?
        .execute(params![
            rows::triggers_text(course::CANCELLATION_TRIGGERS),
            id.as_str()
        ])?;
    append_events(conn, id, req.now, &[plan::cancellation_event(&record)])?;
    recompute_state(conn, id, state, true, req.now)?;
    let text = plan::cancel_answer_text(true, &record)?;
    store_answer(conn, &req.scope, &ActionAnswer::Applied(text))?;
    Ok(CancelAnswer::Created(record))
}

fn revise_tx(conn: &Connection, req: ReviseRequest) -> StoreResult<ReviseAnswer> {
    if let Some(existing) = action_tx(conn, &req.scope)? {
        return Ok(if existing.request_digest == req.request_digest {
            ReviseAnswer::Replayed(existing)
        } else {
            ReviseAnswer::KeyConflict
        });
    }
    let id = &req.scope.workflow_id;
    let (state, input_revision): (String, i64) = conn
        .prepare_cached("SELECT state, input_revision FROM workflows WHERE workflow_id = ?")?
        .query_row([id.as_str()], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?
        .ok_or_else(|| StoreError::NotFound(format!("workflow {id}")))?;
    let steps: Vec<(String, StepState, u32)> = {
        let mut stmt =
            conn.prepare_cached("SELECT step, state, attempts FROM steps WHERE workflow_id = ?")?;
        let mut found = stmt.query([id.as_str()])?;
        let mut steps = Vec::new();
        while let Some(r) = found.next()? {
            steps.push((
                r.text("step")?,
                r.parsed::<StepState>("state")?,
                r.small::<u32>("attempts")?,
            ));
        }
        steps
    };
    let state = parse::<WorkflowState>(&state)?;
    if !plan::unmoved(
        &req.seen,
        state,
        rows::fits("input_revision", input_revision)?,
        &steps,
    ) {
        return Ok(ReviseAnswer::Moved);
    }
    let s = &req.scope;
    reserve_key(conn, s, &req.request_digest, req.now)?;
    let revision_plan = match &req.change {
        Ok(p) => p,
        Err(refusal) => {
            store_answer(conn, s, &ActionAnswer::Refused(refusal.clone()))?;
            return Ok(ReviseAnswer::Refused(refusal.clone()));
        }
    };
    let record = plan::revision_record(&req, revision_plan);
    let n = i64::from(record.input_revision);
    conn.prepare_cached(
        "UPDATE workflows SET input = ?, input_digest = ?, input_revision = ? WHERE workflow_id = ?",
    )?
    .execute(params![&req.input.text, &req.input.digest, n, id.as_str()])?;
    conn.prepare_cached(&format!(
        "INSERT INTO revisions ({REVISION_COLUMNS}, input) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    ))?
    .execute(params![
        id.as_str(),
        n,
        &record.prior_digest,
        &record.input_digest,
        &record.author,
        &record.reason,
        record.at as i64,
        plan::json_text(&record.invalidated_steps)?,
        plan::json_text(&record.kept_receipts)?,
        &req.input.text,
    ])?;
    for (step, again) in &revision_plan.rerun {
        conn.prepare_cached(
            "UPDATE steps SET state = ?1, ready_at = CASE WHEN ?1 = 'ready' THEN ?2 END,
                 receipt_id = NULL, next_trigger = 'initial', note = NULL, uncertain_since = NULL,
                 escalated = NULL, input_digest = NULL
             WHERE workflow_id = ?3 AND step = ?4",
        )?
        .execute(params![again.as_str(), req.now as i64, id.as_str(), step])?;
        for table in ["receipts", "attempts"] {
            conn.prepare_cached(&format!(
                "UPDATE {table} SET superseded_by = ? WHERE workflow_id = ? AND step = ? AND superseded_by IS NULL"
            ))?
            .execute(params![n, id.as_str(), step])?;
        }
    }
    append_events(conn, id, req.now, &[plan::revision_event(&record)])?;
    recompute_state(conn, id, state, false, req.now)?;
    store_answer(conn, s, &ActionAnswer::Applied(plan::json_text(&record)?))?;
    Ok(ReviseAnswer::Applied(record))
}

fn revisions_tx(conn: &Connection, id: &WorkflowId) -> StoreResult<Vec<RevisionRecord>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {REVISION_COLUMNS} FROM revisions WHERE workflow_id = ? ORDER BY input_revision"
    ))?;
    super::each_row(&mut stmt, [id.as_str()], |r| rows::revision(r))
}

impl CourseStore for SqliteStore {
    async fn cancel(&self, request: CancelRequest) -> StoreResult<CancelAnswer> {
        self.writer
            .write(move |conn| cancel_tx(conn, request))
            .await
    }

    async fn cancellation(&self, id: &WorkflowId) -> StoreResult<Option<CancellationRecord>> {
        self.points.with(|conn| cancellation_tx(conn, id))
    }

    async fn revise(&self, request: ReviseRequest) -> StoreResult<ReviseAnswer> {
        self.writer
            .write(move |conn| revise_tx(conn, request))
            .await
    }

    async fn remember(
        &self,
        scope: ActionScope,
        request_digest: String,
        answer: ActionAnswer,
        now: Millis,
    ) -> StoreResult<ActionRecord> {
        self.writer
            .write(move |conn| {
                let (refusal, text, details) = rows::answer_columns(&answer);
                conn.prepare_cached(
                    "INSERT OR IGNORE INTO operator_actions (subject, workflow_id, step, action, key,
                         request_digest, created_at, refusal, answer, refusal_details)
                     VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                )?
                .execute(params![
                    &scope.subject.0,
                    scope.workflow_id.as_str(),
                    &scope.step,
                    &scope.action,
                    &scope.key,
                    &request_digest,
                    now as i64,
                    refusal,
                    text,
                    details
                ])?;
                action_tx(conn, &scope)?
                    .ok_or_else(|| StoreError::Corrupt("a remembered key vanished".into()))
            })
            .await
    }

    async fn revisions(&self, id: &WorkflowId) -> StoreResult<Vec<RevisionRecord>> {
        self.points.with(|conn| revisions_tx(conn, id))
    }
}
