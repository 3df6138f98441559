//! The scheduler's writes: claims, renewals, checkpoints and finishes, all fenced.

use super::{SqliteStore, append_events};
use crate::intent::{
    AttemptId, AttemptOutcome, EventKind, Millis, NewEvent, StepState, Trigger, WorkflowId,
    WorkflowState,
};
use crate::store::rows::{self, EXPIRED_LEASE_COLUMNS, parse};
use crate::store::{
    AttemptFacts, CheckpointRequest, ClaimRequest, Claimed, ExecutorStore, ExpiredLease, Fence,
    FinishOutcome, FinishRequest, LateEvidence, RenewRequest, StepContext, StepTransition,
    StoreError, StoreResult,
};
use rusqlite::{Connection, OptionalExtension, params};

/// Fails with [`StoreError::LeaseLost`] unless the fence's lease is still held.
fn check_fence(
    conn: &Connection,
    fence: &Fence,
    expired_before: Option<Millis>,
) -> StoreResult<()> {
    let held: Option<i64> = conn
        .prepare_cached(
            "SELECT 1 FROM steps WHERE workflow_id = ? AND step = ? AND lease_token = ? AND state = 'running'
               AND (?4 IS NULL OR lease_expires_at < ?4)",
        )?
        .query_row(
            params![
                fence.workflow_id.as_str(),
                &fence.step,
                &fence.lease_token,
                expired_before.map(|v| v as i64)
            ],
            |r| r.get(0),
        )
        .optional()?;
    match held {
        Some(_) => Ok(()),
        None => Err(lease_lost(fence)),
    }
}

fn lease_lost(fence: &Fence) -> StoreError {
    StoreError::LeaseLost {
        workflow_id: fence.workflow_id.clone(),
        step: fence.step.clone(),
    }
}

/// Queues a notification of a meaningful transition, in the caller's transaction.
pub(crate) fn outbox(
    conn: &Connection,
    id: &WorkflowId,
    event: &str,
    now: Millis,
) -> StoreResult<()> {
    conn.prepare_cached(
        "INSERT INTO outbox (workflow_id, event, payload, created_at) VALUES (?, ?, ?, ?)",
    )?
    .execute(params![
        id.as_str(),
        event,
        serde_json::json!({ "workflow_id": id, "event": event }).to_string(),
        now as i64
    ])?;
    Ok(())
}

fn apply_facts(
    conn: &Connection,
    attempt: &AttemptId,
    checkpoint: u8,
    facts: &AttemptFacts,
    finished_at: Option<Millis>,
    log: Option<&serde_json::Value>,
) -> StoreResult<()> {
    let result = facts
        .result
        .as_ref()
        .map(serde_json::to_string)
        .transpose()
        .map_err(|e| StoreError::Corrupt(format!("attempt result: {e}")))?;
    conn.prepare_cached(
        "UPDATE attempts SET checkpoint = MAX(checkpoint, ?),
             component = COALESCE(?, component), component_version = COALESCE(?, component_version),
             component_digest = COALESCE(?, component_digest), input_digest = COALESCE(?, input_digest),
             request_identity = COALESCE(?, request_identity), observation = COALESCE(?, observation),
             outcome = COALESCE(?, outcome), finished_at = COALESCE(?, finished_at),
             log = COALESCE(?, log), result = COALESCE(?, result)
         WHERE attempt_id = ?",
    )?
    .execute(params![
        checkpoint as i64,
        facts.component.as_deref(),
        facts.component_version.as_deref(),
        facts.component_digest.as_deref(),
        facts.input_digest.as_deref(),
        facts.request_identity.as_deref(),
        facts.observation.as_deref(),
        facts.outcome.map(AttemptOutcome::as_str),
        finished_at.map(|v| v as i64),
        log.map(|l| l.to_string()),
        result,
        attempt.as_str(),
    ])?;
    Ok(())
}

/// Recomputes the workflow's state from its steps; on a change, stamps the end, starts the
/// key's retention, tells the timeline and queues a notification.
pub(crate) fn recompute_state(
    conn: &Connection,
    id: &WorkflowId,
    current: WorkflowState,
    now: Millis,
) -> StoreResult<WorkflowState> {
    let steps = {
        let mut stmt = conn.prepare_cached("SELECT state FROM steps WHERE workflow_id = ?")?;
        let states = stmt.query_map([id.as_str()], |r| r.get::<_, String>(0))?;
        let mut steps = Vec::new();
        for s in states {
            steps.push(parse::<StepState>(&s?)?);
        }
        steps
    };
    let next = WorkflowState::derive(current == WorkflowState::Cancelled, steps);
    if next == current {
        return Ok(next);
    }
    // A workflow an operator revives (a failed step retried) is not ended any more: its end
    // and its key's retention start again when it ends again.
    let ended = next.is_ended().then_some(now as i64);
    conn.prepare_cached("UPDATE workflows SET state = ?, ended_at = ? WHERE workflow_id = ?")?
        .execute(params![next.as_str(), ended, id.as_str()])?;
    if next.is_ended() || current.is_ended() {
        conn.prepare_cached(
            "UPDATE intent_keys SET expires_at = ?1 + (SELECT key_retention_ms FROM workflows WHERE workflow_id = ?2)
             WHERE workflow_id = ?2",
        )?
        .execute(params![ended, id.as_str()])?;
    }
    let text = match next {
        WorkflowState::Completed => "Workflow completed: every step has a receipt",
        WorkflowState::Failed => "Workflow ended without completion: a step failed permanently",
        WorkflowState::NeedsReview => "Workflow needs review: a person must decide how to continue",
        WorkflowState::Running => "Workflow running again",
        WorkflowState::Cancelled => "Workflow cancelled",
    };
    append_events(
        conn,
        id,
        now,
        &[NewEvent::workflow(EventKind::Conclusion, text)
            .with_data(serde_json::json!({"from": current, "to": next}))],
    )?;
    if next != WorkflowState::Running {
        outbox(conn, id, next.as_str(), now)?;
    }
    Ok(next)
}

/// Budget and identity of a workflow as a claim sees it.
struct ClaimedWorkflow {
    workflow: String,
    definition_version: u32,
    deadline_at: u64,
    attempts_used: u32,
    external_calls_used: u32,
    runtime_used_ms: u64,
}

fn claim_tx(conn: &Connection, req: &ClaimRequest) -> StoreResult<Vec<Claimed>> {
    let expires = req.now + req.lease_ms;
    let mut claimed = Vec::new();
    {
        let mut stmt = conn.prepare_cached(
            "UPDATE steps SET state = 'running', attempts = attempts + 1, lease_owner = ?1,
                 lease_token = lower(hex(randomblob(16))), lease_expires_at = ?2, note = NULL
             WHERE rowid IN (
                 SELECT rowid FROM steps
                 WHERE state IN ('ready', 'failed_retryable') AND ready_at <= ?3
                 ORDER BY ready_at LIMIT ?4)
             RETURNING workflow_id, step, attempts, next_trigger, uncertain_since, lease_token",
        )?;
        let mut rows = stmt.query(params![
            &req.owner,
            expires as i64,
            req.now as i64,
            req.limit as i64
        ])?;
        while let Some(r) = rows.next()? {
            let trigger: String = r.get(3)?;
            claimed.push(Claimed {
                fence: Fence {
                    workflow_id: WorkflowId(r.get(0)?),
                    step: r.get(1)?,
                    lease_token: r.get(5)?,
                },
                attempt_id: AttemptId::new(req.now),
                attempt_number: r.get::<_, i64>(2)? as u32,
                trigger: parse::<Trigger>(&trigger)?,
                workflow: String::new(),
                definition_version: 0,
                lease_expires_at: expires,
                deadline_at: 0,
                attempts_used: 0,
                external_calls_used: 0,
                runtime_used_ms: 0,
                uncertain_since: r.get::<_, Option<i64>>(4)?.map(|v| v as u64),
                context: StepContext::default(),
            });
        }
    }
    if claimed.is_empty() {
        return Ok(claimed);
    }
    // One attempt and one timeline entry per claim; the workflow counts both.
    let mut budget = conn.prepare_cached(
        "UPDATE workflows SET attempts_used = attempts_used + 1, next_seq = next_seq + 1
         WHERE workflow_id = ?1
         RETURNING workflow, definition_version, deadline_at, attempts_used,
                   external_calls_used, runtime_used_ms, next_seq - 1, input",
    )?;
    let mut attempt = conn.prepare_cached(
        "INSERT INTO attempts (attempt_id, workflow_id, step, number, trigger, lease_owner,
             checkpoint, outcome, started_at) VALUES (?, ?, ?, ?, ?, ?, 1, 'in_progress', ?)",
    )?;
    let mut event = conn.prepare_cached(
        "INSERT INTO timeline (workflow_id, seq, at, kind, step, attempt_id, text, data)
         VALUES (?, ?, ?, 'action', ?, ?, ?, 'null')",
    )?;
    for c in &mut claimed {
        let (wf, seq, input) = budget.query_row([c.fence.workflow_id.as_str()], |r| {
            Ok((
                ClaimedWorkflow {
                    workflow: r.get(0)?,
                    definition_version: r.get::<_, i64>(1)? as u32,
                    deadline_at: r.get::<_, i64>(2)? as u64,
                    attempts_used: r.get::<_, i64>(3)? as u32,
                    external_calls_used: r.get::<_, i64>(4)? as u32,
                    runtime_used_ms: r.get::<_, i64>(5)? as u64,
                },
                r.get::<_, i64>(6)?,
                r.get::<_, String>(7)?,
            ))
        })?;
        c.workflow = wf.workflow;
        c.definition_version = wf.definition_version;
        c.deadline_at = wf.deadline_at;
        c.attempts_used = wf.attempts_used;
        c.external_calls_used = wf.external_calls_used;
        c.runtime_used_ms = wf.runtime_used_ms;
        // Only an uncertain step needs it; read before this claim's attempt row exists.
        let sent_identity = match c.uncertain_since {
            Some(_) => conn
                .prepare_cached(
                    "SELECT request_identity FROM attempts
                     WHERE workflow_id = ? AND step = ? AND checkpoint >= 3 AND request_identity IS NOT NULL
                     ORDER BY number DESC LIMIT 1",
                )?
                .query_row(params![c.fence.workflow_id.as_str(), &c.fence.step], |r| r.get(0))
                .optional()?,
            None => None,
        };
        c.context = StepContext {
            input: serde_json::from_str(&input)
                .map_err(|e| StoreError::Corrupt(format!("stored input: {e}")))?,
            receipts: super::read::receipts_tx(conn, &c.fence.workflow_id)?,
            sent_identity,
        };
        attempt.execute(params![
            c.attempt_id.as_str(),
            c.fence.workflow_id.as_str(),
            &c.fence.step,
            c.attempt_number as i64,
            c.trigger.as_str(),
            &req.owner,
            req.now as i64,
        ])?;
        event.execute(params![
            c.fence.workflow_id.as_str(),
            seq,
            req.now as i64,
            &c.fence.step,
            c.attempt_id.as_str(),
            format!(
                "Attempt {} started ({}) by {}",
                c.attempt_number, c.trigger, req.owner
            ),
        ])?;
    }
    Ok(claimed)
}

fn checkpoint_tx(conn: &Connection, req: CheckpointRequest) -> StoreResult<()> {
    check_fence(conn, &req.fence, None)?;
    apply_facts(
        conn,
        &req.attempt_id,
        req.checkpoint,
        &req.facts,
        None,
        None,
    )?;
    if req.external_call {
        conn.prepare_cached(
            "UPDATE workflows SET external_calls_used = external_calls_used + 1 WHERE workflow_id = ?",
        )?
        .execute([req.fence.workflow_id.as_str()])?;
    }
    append_events(conn, &req.fence.workflow_id, req.now, &req.events)
}

fn finish_tx(conn: &Connection, req: FinishRequest) -> StoreResult<FinishOutcome> {
    let FinishRequest {
        fence,
        attempt_id,
        checkpoint,
        facts,
        transition,
        note,
        log,
        runtime_ms,
        mut events,
        now,
        expired_before,
    } = req;
    let id = fence.workflow_id.as_str();
    // The step's transition doubles as the fence: no row means the lease is gone.
    let (state, ready_at, next_trigger, uncertain, receipt_id) = match &transition {
        StepTransition::Succeeded(r) => (
            StepState::Succeeded,
            None,
            None,
            None,
            Some(r.receipt_id.as_str()),
        ),
        StepTransition::Retry {
            ready_at,
            next_trigger,
            uncertain_since,
        } => (
            StepState::FailedRetryable,
            Some(*ready_at as i64),
            Some(next_trigger.as_str()),
            uncertain_since.map(|v| v as i64),
            None,
        ),
        StepTransition::Terminal(state) => (*state, None, None, None, None),
    };
    let moved = conn
        .prepare_cached(
            "UPDATE steps SET state = ?1, ready_at = ?2, next_trigger = COALESCE(?3, next_trigger),
                 uncertain_since = CASE WHEN ?1 = 'succeeded' THEN NULL
                                        ELSE COALESCE(uncertain_since, ?4) END,
                 receipt_id = COALESCE(?5, receipt_id), note = ?6,
                 lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL
             WHERE workflow_id = ?7 AND step = ?8 AND lease_token = ?9 AND state = 'running'
               AND (?10 IS NULL OR lease_expires_at < ?10)",
        )?
        .execute(params![
            state.as_str(),
            ready_at,
            next_trigger,
            uncertain,
            receipt_id,
            note.as_deref(),
            id,
            &fence.step,
            &fence.lease_token,
            expired_before.map(|v| v as i64),
        ])?;
    if moved == 0 {
        return Err(lease_lost(&fence));
    }
    apply_facts(conn, &attempt_id, checkpoint, &facts, Some(now), Some(&log))?;
    let mut released = Vec::new();
    if let StepTransition::Succeeded(r) = &transition {
        conn.prepare_cached(
            "INSERT INTO receipts (receipt_id, workflow_id, step, attempt_id, evidence_kind,
                 component, component_version, component_digest, input_digest,
                 external_reference, output, recorded_at, author, reason, evidence)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )?
        .execute(params![
            r.receipt_id.as_str(),
            id,
            &fence.step,
            attempt_id.as_str(),
            r.evidence_kind.as_str(),
            &r.component,
            &r.component_version,
            &r.component_digest,
            &r.input_digest,
            r.external_reference.as_deref(),
            r.output.to_string(),
            now as i64,
            r.author.as_deref(),
            r.reason.as_deref(),
            r.evidence.as_deref(),
        ])?;
        released = release_dependents(conn, &fence.workflow_id, now)?;
    }
    if !released.is_empty() {
        let text = format!(
            "Released {} after its dependencies succeeded",
            released.join(", ")
        );
        events.push(NewEvent::workflow(EventKind::Action, text));
    }
    let (first, current): (i64, String) = conn
        .prepare_cached(
            "UPDATE workflows SET runtime_used_ms = runtime_used_ms + ?1, next_seq = next_seq + ?2
             WHERE workflow_id = ?3 RETURNING next_seq - ?2, state",
        )?
        .query_row(params![runtime_ms as i64, events.len() as i64, id], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })?;
    if !events.is_empty() {
        super::insert_events(conn, &fence.workflow_id, first as u64, now, &events)?;
    }
    let current = parse::<WorkflowState>(&current)?;
    let workflow_state = recompute_state(conn, &fence.workflow_id, current, now)?;
    Ok(FinishOutcome {
        workflow_state,
        released,
    })
}

/// Makes ready every pending step of the workflow whose dependencies have all succeeded.
pub(crate) fn release_dependents(
    conn: &Connection,
    id: &WorkflowId,
    now: Millis,
) -> StoreResult<Vec<String>> {
    let mut stmt = conn.prepare_cached(
        "UPDATE steps SET state = 'ready', ready_at = ?1
         WHERE workflow_id = ?2 AND state = 'pending' AND NOT EXISTS (
             SELECT 1 FROM step_deps d JOIN steps s2
               ON s2.workflow_id = d.workflow_id AND s2.step = d.depends_on
             WHERE d.workflow_id = steps.workflow_id AND d.step = steps.step
               AND s2.state != 'succeeded')
         RETURNING step",
    )?;
    let rows = stmt.query_map(params![now as i64, id.as_str()], |r| r.get::<_, String>(0))?;
    Ok(rows.collect::<Result<Vec<_>, _>>()?)
}

impl ExecutorStore for SqliteStore {
    async fn claim(&self, req: ClaimRequest) -> StoreResult<Vec<Claimed>> {
        self.writer.write(move |conn| claim_tx(conn, &req)).await
    }

    async fn renew(&self, req: RenewRequest) -> StoreResult<()> {
        let injected = self.failing_renewals.fetch_update(
            std::sync::atomic::Ordering::AcqRel,
            std::sync::atomic::Ordering::Acquire,
            |n| n.checked_sub(1),
        );
        if injected.is_ok() {
            return Err(StoreError::safe("database is locked (injected by a test)"));
        }
        self.writer
            .write(move |conn| {
                let done = conn
                    .prepare_cached(
                        "UPDATE steps SET lease_expires_at = ?
                         WHERE workflow_id = ? AND step = ? AND lease_token = ? AND state = 'running'",
                    )?
                    .execute(params![
                        (req.now + req.lease_ms) as i64,
                        req.fence.workflow_id.as_str(),
                        &req.fence.step,
                        &req.fence.lease_token
                    ])?;
                if done == 0 {
                    return Err(lease_lost(&req.fence));
                }
                Ok(())
            })
            .await
    }

    async fn checkpoint(&self, req: CheckpointRequest) -> StoreResult<()> {
        self.writer
            .write(move |conn| checkpoint_tx(conn, req))
            .await
    }

    async fn finish(&self, req: FinishRequest) -> StoreResult<FinishOutcome> {
        self.writer.write(move |conn| finish_tx(conn, req)).await
    }

    async fn late_evidence(&self, late: LateEvidence) -> StoreResult<()> {
        self.writer
            .write(move |conn| {
                let result = late
                    .facts
                    .result
                    .as_ref()
                    .map(serde_json::to_string)
                    .transpose()
                    .map_err(|e| StoreError::Corrupt(format!("attempt result: {e}")))?;
                conn.prepare_cached(
                    "UPDATE attempts SET observation = COALESCE(observation, ?1),
                         outcome = CASE WHEN outcome = 'in_progress' THEN COALESCE(?2, outcome) ELSE outcome END,
                         result = COALESCE(result, ?3)
                     WHERE attempt_id = ?4",
                )?
                .execute(params![
                    late.facts.observation.as_deref(),
                    late.facts.outcome.map(AttemptOutcome::as_str),
                    result,
                    late.attempt_id.as_str(),
                ])?;
                append_events(conn, &late.workflow_id, late.now, &late.events)
            })
            .await
    }

    async fn release_leases(&self, owner: &str, now: Millis) -> StoreResult<u64> {
        let owner = owner.to_string();
        self.writer
            .write(move |conn| {
                Ok(conn
                    .prepare_cached(
                        "UPDATE steps SET lease_expires_at = ?1 - 1
                         WHERE state = 'running' AND lease_owner = ?2 AND lease_expires_at >= ?1",
                    )?
                    .execute(params![now as i64, owner])? as u64)
            })
            .await
    }

    async fn expired_leases(&self, now: Millis, limit: u32) -> StoreResult<Vec<ExpiredLease>> {
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {EXPIRED_LEASE_COLUMNS}
             FROM steps s JOIN workflows w ON w.workflow_id = s.workflow_id
             LEFT JOIN attempts a
               ON a.workflow_id = s.workflow_id AND a.step = s.step AND a.number = s.attempts
             WHERE s.state = 'running' AND s.lease_expires_at < ?
             ORDER BY s.lease_expires_at LIMIT ?"
        )))
        .bind(now as i64)
        .bind(limit as i64)
        .fetch_all(&self.read)
        .await?;
        rows.iter().map(rows::expired_lease).collect()
    }

    async fn next_due(&self, now: Millis) -> StoreResult<Option<Millis>> {
        self.points.with(|conn| {
            // Two index range reads: the earliest retry time, the earliest lease expiry
            // (a lease is expired once `now` passes it, hence + 1).
            let due: Option<i64> = conn
                .prepare_cached(
                    "SELECT MIN(t) FROM (
                       SELECT MIN(ready_at) AS t FROM steps
                        WHERE state IN ('ready', 'failed_retryable') AND ready_at > ?1
                       UNION ALL
                       SELECT MIN(lease_expires_at) + 1 FROM steps
                        WHERE state = 'running' AND lease_expires_at >= ?1)",
                )?
                .query_row(params![now as i64], |r| r.get(0))?;
            Ok(due.map(|t| t as Millis))
        })
    }

    async fn watch(&self, _wake: std::sync::Arc<tokio::sync::Notify>) -> StoreResult<bool> {
        // One host per file: every write comes from this process, which wakes itself.
        Ok(false)
    }
}
