//! The scheduler's writes: claims, renewals, checkpoints and finishes, all fenced.

use super::read::{parse, receipts_on, workflow_on};
use super::{SqliteStore, append_events};
use crate::intent::{
    AttemptId, AttemptOutcome, EventKind, Millis, NewEvent, StepState, Trigger, WorkflowId,
    WorkflowState,
};
use crate::store::{
    AttemptFacts, CheckpointRequest, ClaimRequest, Claimed, ExecutorStore, ExpiredLease, Fence,
    FinishOutcome, FinishRequest, RenewRequest, StepContext, StepTransition, StoreError,
    StoreResult,
};
use sqlx::{Row, SqliteConnection};

/// Fails with [`StoreError::LeaseLost`] unless the fence's lease is still held.
async fn check_fence(
    conn: &mut SqliteConnection,
    fence: &Fence,
    expired_before: Option<Millis>,
) -> StoreResult<()> {
    let held: Option<i64> = sqlx::query_scalar(
        "SELECT 1 FROM steps WHERE workflow_id = ? AND step = ? AND lease_token = ? AND state = 'running'
           AND (?4 IS NULL OR lease_expires_at < ?4)",
    )
    .bind(fence.workflow_id.as_str())
    .bind(&fence.step)
    .bind(&fence.lease_token)
    .bind(expired_before.map(|v| v as i64))
    .fetch_optional(&mut *conn)
    .await?;
    match held {
        Some(_) => Ok(()),
        None => Err(StoreError::LeaseLost {
            workflow_id: fence.workflow_id.clone(),
            step: fence.step.clone(),
        }),
    }
}

/// Queues a notification of a meaningful transition, in the caller's transaction.
pub(crate) async fn outbox(
    conn: &mut SqliteConnection,
    id: &WorkflowId,
    event: &str,
    now: Millis,
) -> StoreResult<()> {
    sqlx::query("INSERT INTO outbox (workflow_id, event, payload, created_at) VALUES (?, ?, ?, ?)")
        .bind(id.as_str())
        .bind(event)
        .bind(serde_json::json!({ "workflow_id": id, "event": event }).to_string())
        .bind(now as i64)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

async fn apply_facts(
    conn: &mut SqliteConnection,
    attempt: &AttemptId,
    checkpoint: u8,
    facts: &AttemptFacts,
    finished_at: Option<Millis>,
    log: Option<&serde_json::Value>,
) -> StoreResult<()> {
    sqlx::query(
        "UPDATE attempts SET checkpoint = MAX(checkpoint, ?),
             component = COALESCE(?, component), component_version = COALESCE(?, component_version),
             component_digest = COALESCE(?, component_digest), input_digest = COALESCE(?, input_digest),
             request_identity = COALESCE(?, request_identity), observation = COALESCE(?, observation),
             outcome = COALESCE(?, outcome), finished_at = COALESCE(?, finished_at),
             log = COALESCE(?, log)
         WHERE attempt_id = ?",
    )
    .bind(checkpoint as i64)
    .bind(facts.component.as_deref())
    .bind(facts.component_version.as_deref())
    .bind(facts.component_digest.as_deref())
    .bind(facts.input_digest.as_deref())
    .bind(facts.request_identity.as_deref())
    .bind(facts.observation.as_deref())
    .bind(facts.outcome.map(AttemptOutcome::as_str))
    .bind(finished_at.map(|v| v as i64))
    .bind(log.map(|l| l.to_string()))
    .bind(attempt.as_str())
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Recomputes the workflow's state from its steps; on a change, stamps the end, starts the
/// key's retention, tells the timeline and queues a notification.
async fn recompute_state(
    conn: &mut SqliteConnection,
    id: &WorkflowId,
    current: WorkflowState,
    now: Millis,
) -> StoreResult<WorkflowState> {
    let states: Vec<String> = sqlx::query_scalar("SELECT state FROM steps WHERE workflow_id = ?")
        .bind(id.as_str())
        .fetch_all(&mut *conn)
        .await?;
    let steps = states
        .iter()
        .map(|s| parse::<StepState>(s))
        .collect::<StoreResult<Vec<_>>>()?;
    let next = WorkflowState::derive(current == WorkflowState::Cancelled, steps);
    if next == current {
        return Ok(next);
    }
    let ended = next.is_ended().then_some(now as i64);
    sqlx::query(
        "UPDATE workflows SET state = ?, ended_at = COALESCE(?, ended_at) WHERE workflow_id = ?",
    )
    .bind(next.as_str())
    .bind(ended)
    .bind(id.as_str())
    .execute(&mut *conn)
    .await?;
    if next.is_ended() {
        sqlx::query(
            "UPDATE intent_keys SET expires_at = ?1 + (SELECT key_retention_ms FROM workflows WHERE workflow_id = ?2)
             WHERE workflow_id = ?2",
        )
        .bind(now as i64)
        .bind(id.as_str())
        .execute(&mut *conn)
        .await?;
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
    )
    .await?;
    if next != WorkflowState::Running {
        outbox(conn, id, next.as_str(), now).await?;
    }
    Ok(next)
}

impl ExecutorStore for SqliteStore {
    async fn claim(&self, req: ClaimRequest) -> StoreResult<Vec<Claimed>> {
        // A handful of statements for the whole batch, whatever its size: each statement
        // is a round trip to the connection's thread.
        self.writer
            .write(move |conn| {
                Box::pin(async move {
                    let expires = req.now + req.lease_ms;
                    let steps = sqlx::query(
                        "UPDATE steps SET state = 'running', attempts = attempts + 1, lease_owner = ?1,
                             lease_token = lower(hex(randomblob(16))), lease_expires_at = ?2, note = NULL
                         WHERE rowid IN (
                             SELECT rowid FROM steps
                             WHERE state IN ('ready', 'failed_retryable') AND ready_at <= ?3
                             ORDER BY ready_at LIMIT ?4)
                         RETURNING workflow_id, step, attempts, next_trigger, uncertain_since, lease_token",
                    )
                    .bind(&req.owner)
                    .bind(expires as i64)
                    .bind(req.now as i64)
                    .bind(req.limit as i64)
                    .fetch_all(&mut *conn)
                    .await?;
                    if steps.is_empty() {
                        return Ok(Vec::new());
                    }
                    // Count attempts per workflow and reserve one timeline entry per claim.
                    let mut per_workflow: std::collections::BTreeMap<String, i64> = Default::default();
                    for r in &steps {
                        *per_workflow.entry(r.get::<String, _>("workflow_id")).or_default() += 1;
                    }
                    let mut workflows: std::collections::HashMap<String, sqlx::sqlite::SqliteRow> = Default::default();
                    for (id, n) in &per_workflow {
                        let row = sqlx::query(
                            "UPDATE workflows SET attempts_used = attempts_used + ?1, next_seq = next_seq + ?1
                             WHERE workflow_id = ?2
                             RETURNING workflow_id, workflow, definition_version, deadline_at, attempts_used,
                                       external_calls_used, runtime_used_ms, next_seq - ?1 AS first_seq",
                        )
                        .bind(n)
                        .bind(id)
                        .fetch_one(&mut *conn)
                        .await?;
                        workflows.insert(id.clone(), row);
                    }
                    let mut claimed = Vec::with_capacity(steps.len());
                    let mut used: std::collections::HashMap<String, i64> = Default::default();
                    for r in &steps {
                        let workflow_id: String = r.get("workflow_id");
                        let wf = &workflows[&workflow_id];
                        let offset = used.entry(workflow_id.clone()).or_default();
                        let seq = wf.get::<i64, _>("first_seq") + *offset;
                        *offset += 1;
                        let trigger: Trigger = parse(r.get("next_trigger"))?;
                        claimed.push((
                            seq,
                            Claimed {
                                fence: Fence {
                                    workflow_id: WorkflowId(workflow_id),
                                    step: r.get("step"),
                                    lease_token: r.get("lease_token"),
                                },
                                attempt_id: AttemptId::new(req.now),
                                attempt_number: r.get::<i64, _>("attempts") as u32,
                                trigger,
                                workflow: wf.get("workflow"),
                                definition_version: wf.get::<i64, _>("definition_version") as u32,
                                lease_expires_at: expires,
                                deadline_at: wf.get::<i64, _>("deadline_at") as u64,
                                attempts_used: wf.get::<i64, _>("attempts_used") as u32,
                                external_calls_used: wf.get::<i64, _>("external_calls_used") as u32,
                                runtime_used_ms: wf.get::<i64, _>("runtime_used_ms") as u64,
                                uncertain_since: r.get::<Option<i64>, _>("uncertain_since").map(|v| v as u64),
                            },
                        ));
                    }
                    let rows = vec!["(?, ?, ?, ?, ?, ?, 1, 'in_progress', ?)"; claimed.len()].join(", ");
                    let sql = format!(
                        "INSERT INTO attempts (attempt_id, workflow_id, step, number, trigger, lease_owner,
                             checkpoint, outcome, started_at) VALUES {rows}"
                    );
                    let mut q = sqlx::query(sqlx::AssertSqlSafe(sql));
                    for (_, c) in &claimed {
                        q = q
                            .bind(c.attempt_id.as_str())
                            .bind(c.fence.workflow_id.as_str())
                            .bind(&c.fence.step)
                            .bind(c.attempt_number as i64)
                            .bind(c.trigger.as_str())
                            .bind(&req.owner)
                            .bind(req.now as i64);
                    }
                    q.execute(&mut *conn).await?;
                    let rows = vec!["(?, ?, ?, 'action', ?, ?, ?, 'null')"; claimed.len()].join(", ");
                    let sql = format!(
                        "INSERT INTO timeline (workflow_id, seq, at, kind, step, attempt_id, text, data) VALUES {rows}"
                    );
                    let mut q = sqlx::query(sqlx::AssertSqlSafe(sql));
                    for (seq, c) in &claimed {
                        q = q
                            .bind(c.fence.workflow_id.as_str())
                            .bind(*seq)
                            .bind(req.now as i64)
                            .bind(&c.fence.step)
                            .bind(c.attempt_id.as_str())
                            .bind(format!("Attempt {} started ({}) by {}", c.attempt_number, c.trigger, req.owner));
                    }
                    q.execute(&mut *conn).await?;
                    Ok(claimed.into_iter().map(|(_, c)| c).collect())
                })
            })
            .await
    }

    async fn renew(&self, req: RenewRequest) -> StoreResult<()> {
        self.writer
            .write(move |conn| {
                Box::pin(async move {
                    let done = sqlx::query(
                        "UPDATE steps SET lease_expires_at = ?
                         WHERE workflow_id = ? AND step = ? AND lease_token = ? AND state = 'running'",
                    )
                    .bind((req.now + req.lease_ms) as i64)
                    .bind(req.fence.workflow_id.as_str())
                    .bind(&req.fence.step)
                    .bind(&req.fence.lease_token)
                    .execute(&mut *conn)
                    .await?;
                    if done.rows_affected() == 0 {
                        return Err(StoreError::LeaseLost {
                            workflow_id: req.fence.workflow_id,
                            step: req.fence.step,
                        });
                    }
                    Ok(())
                })
            })
            .await
    }

    async fn checkpoint(&self, req: CheckpointRequest) -> StoreResult<()> {
        self.writer
            .write(move |conn| {
                Box::pin(async move {
                    check_fence(conn, &req.fence, None).await?;
                    apply_facts(conn, &req.attempt_id, req.checkpoint, &req.facts, None, None).await?;
                    if req.external_call {
                        sqlx::query(
                            "UPDATE workflows SET external_calls_used = external_calls_used + 1 WHERE workflow_id = ?",
                        )
                        .bind(req.fence.workflow_id.as_str())
                        .execute(&mut *conn)
                        .await?;
                    }
                    append_events(conn, &req.fence.workflow_id, req.now, &req.events).await
                })
            })
            .await
    }

    async fn finish(&self, req: FinishRequest) -> StoreResult<FinishOutcome> {
        self.writer
            .write(move |conn| {
                Box::pin(async move {
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
                        StepTransition::Succeeded(r) => {
                            (StepState::Succeeded, None, None, None, Some(r.receipt_id.as_str()))
                        }
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
                    let moved = sqlx::query(
                        "UPDATE steps SET state = ?1, ready_at = ?2, next_trigger = COALESCE(?3, next_trigger),
                             uncertain_since = CASE WHEN ?1 = 'succeeded' THEN NULL
                                                    ELSE COALESCE(uncertain_since, ?4) END,
                             receipt_id = COALESCE(?5, receipt_id), note = ?6,
                             lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL
                         WHERE workflow_id = ?7 AND step = ?8 AND lease_token = ?9 AND state = 'running'
                           AND (?10 IS NULL OR lease_expires_at < ?10)",
                    )
                    .bind(state.as_str())
                    .bind(ready_at)
                    .bind(next_trigger)
                    .bind(uncertain)
                    .bind(receipt_id)
                    .bind(note.as_deref())
                    .bind(id)
                    .bind(&fence.step)
                    .bind(&fence.lease_token)
                    .bind(expired_before.map(|v| v as i64))
                    .execute(&mut *conn)
                    .await?;
                    if moved.rows_affected() == 0 {
                        return Err(StoreError::LeaseLost {
                            workflow_id: fence.workflow_id,
                            step: fence.step,
                        });
                    }
                    apply_facts(conn, &attempt_id, checkpoint, &facts, Some(now), Some(&log)).await?;
                    let mut released = Vec::new();
                    if let StepTransition::Succeeded(r) = &transition {
                        sqlx::query(
                            "INSERT INTO receipts (receipt_id, workflow_id, step, attempt_id, evidence_kind,
                                 component, component_version, component_digest, input_digest,
                                 external_reference, output, recorded_at, author, reason, evidence)
                             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        )
                        .bind(r.receipt_id.as_str())
                        .bind(id)
                        .bind(&fence.step)
                        .bind(attempt_id.as_str())
                        .bind(r.evidence_kind.as_str())
                        .bind(&r.component)
                        .bind(&r.component_version)
                        .bind(&r.component_digest)
                        .bind(&r.input_digest)
                        .bind(r.external_reference.as_deref())
                        .bind(r.output.to_string())
                        .bind(now as i64)
                        .bind(r.author.as_deref())
                        .bind(r.reason.as_deref())
                        .bind(r.evidence.as_deref())
                        .execute(&mut *conn)
                        .await?;
                        released = sqlx::query_scalar(
                            "UPDATE steps SET state = 'ready', ready_at = ?1
                             WHERE workflow_id = ?2 AND state = 'pending' AND NOT EXISTS (
                                 SELECT 1 FROM step_deps d JOIN steps s2
                                   ON s2.workflow_id = d.workflow_id AND s2.step = d.depends_on
                                 WHERE d.workflow_id = steps.workflow_id AND d.step = steps.step
                                   AND s2.state != 'succeeded')
                             RETURNING step",
                        )
                        .bind(now as i64)
                        .bind(id)
                        .fetch_all(&mut *conn)
                        .await?;
                    }
                    if !released.is_empty() {
                        let text = format!("Released {} after its dependencies succeeded", released.join(", "));
                        events.push(NewEvent::workflow(EventKind::Action, text));
                    }
                    let row = sqlx::query(
                        "UPDATE workflows SET runtime_used_ms = runtime_used_ms + ?1, next_seq = next_seq + ?2
                         WHERE workflow_id = ?3 RETURNING next_seq - ?2 AS first_seq, state",
                    )
                    .bind(runtime_ms as i64)
                    .bind(events.len() as i64)
                    .bind(id)
                    .fetch_one(&mut *conn)
                    .await?;
                    if !events.is_empty() {
                        let first = row.get::<i64, _>("first_seq") as u64;
                        super::insert_events(conn, &fence.workflow_id, first, now, &events).await?;
                    }
                    let current = parse::<WorkflowState>(row.get("state"))?;
                    let workflow_state = recompute_state(conn, &fence.workflow_id, current, now).await?;
                    Ok(FinishOutcome {
                        workflow_state,
                        released,
                    })
                })
            })
            .await
    }

    async fn step_context(&self, id: &WorkflowId) -> StoreResult<StepContext> {
        let mut conn = self.read.acquire().await?;
        let wf = workflow_on(&mut conn, id)
            .await?
            .ok_or_else(|| StoreError::NotFound(format!("workflow {id}")))?;
        let input = serde_json::from_str(&wf.input)
            .map_err(|e| StoreError::Corrupt(format!("stored input: {e}")))?;
        Ok(StepContext {
            input,
            receipts: receipts_on(&mut conn, id).await?,
        })
    }

    async fn expired_leases(&self, now: Millis, limit: u32) -> StoreResult<Vec<ExpiredLease>> {
        let rows = sqlx::query(
            "SELECT s.workflow_id, s.step, s.lease_owner, s.lease_token, s.lease_expires_at, s.uncertain_since,
                    s.attempts, s.next_trigger, a.attempt_id, a.checkpoint, a.started_at, a.trigger,
                    a.component, a.component_version, w.workflow, w.definition_version
             FROM steps s JOIN workflows w ON w.workflow_id = s.workflow_id
             LEFT JOIN attempts a
               ON a.workflow_id = s.workflow_id AND a.step = s.step AND a.number = s.attempts
             WHERE s.state = 'running' AND s.lease_expires_at < ?
             ORDER BY s.lease_expires_at LIMIT ?",
        )
        .bind(now as i64)
        .bind(limit as i64)
        .fetch_all(&self.read)
        .await?;
        rows.iter()
            .map(|r| {
                let trigger: Option<String> = r.get("trigger");
                Ok(ExpiredLease {
                    fence: Fence {
                        workflow_id: WorkflowId(r.get("workflow_id")),
                        step: r.get("step"),
                        lease_token: r
                            .get::<Option<String>, _>("lease_token")
                            .unwrap_or_default(),
                    },
                    lease_owner: r
                        .get::<Option<String>, _>("lease_owner")
                        .unwrap_or_default(),
                    lease_expires_at: r.get::<Option<i64>, _>("lease_expires_at").unwrap_or(0)
                        as u64,
                    attempt_id: r.get::<Option<String>, _>("attempt_id").map(AttemptId),
                    checkpoint: r.get::<Option<i64>, _>("checkpoint").unwrap_or(0) as u8,
                    attempt_number: r.get::<i64, _>("attempts") as u32,
                    attempt_started_at: r.get::<Option<i64>, _>("started_at").unwrap_or(0) as u64,
                    trigger: parse(trigger.as_deref().unwrap_or("initial"))?,
                    component: r.get("component"),
                    component_version: r.get("component_version"),
                    workflow: r.get("workflow"),
                    definition_version: r.get::<i64, _>("definition_version") as u32,
                    uncertain_since: r.get::<Option<i64>, _>("uncertain_since").map(|v| v as u64),
                })
            })
            .collect()
    }
}
