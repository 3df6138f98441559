//! The scheduler's writes: claims, renewals, checkpoints and finishes, all fenced.

use super::{MultiRow, SqliteStore, append_events};
use crate::course;
use crate::intent::{AttemptId, Millis, NewEvent, StepRole, StepState, WorkflowId, WorkflowState};
use crate::store::leases;
use crate::store::plan;
use crate::store::rows::{self, Columns, parse};
use crate::store::tx::Backend;
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

/// Queues a notification of a meaningful transition of workflow `id`, in the caller's
/// transaction (after the transition's own writes: the body tells the workflow as it is).
pub(crate) fn outbox(
    conn: &Connection,
    id: &WorkflowId,
    event: crate::notify::EventType,
    now: Millis,
) -> StoreResult<()> {
    let record = conn
        .prepare_cached(&format!(
            "SELECT {} FROM workflows WHERE workflow_id = ?",
            rows::WORKFLOW_COLUMNS
        ))?
        .query_row([id.as_str()], |r| Ok(rows::workflow(r)))??;
    outbox_for(conn, &record, event, now)
}

/// [`outbox`] for a workflow record already at hand.
pub(crate) fn outbox_for(
    conn: &Connection,
    record: &crate::store::WorkflowRecord,
    event: crate::notify::EventType,
    now: Millis,
) -> StoreResult<()> {
    let n = plan::notification(record, event, now);
    conn.prepare_cached(&format!(
        "{} VALUES (?, ?, ?, ?, ?, ?, ?)",
        plan::OUTBOX_INSERT
    ))?
    .execute(params![
        n.id,
        n.workflow_id,
        n.event,
        n.revision,
        n.body,
        n.at,
        n.at
    ])?;
    Ok(())
}

/// Notes on the workflow the policy version an attempt was judged by; an exception it went
/// through is used up.
fn note_policy(conn: &Connection, fence: &Fence, facts: &AttemptFacts) -> StoreResult<()> {
    if let Some(p) = &facts.policy {
        conn.prepare_cached(
            "UPDATE workflows SET policy_current = MAX(policy_current, ?) WHERE workflow_id = ?",
        )?
        .execute(params![i64::from(p.version), fence.workflow_id.as_str()])?;
        if p.decision == crate::store::PolicyVerdict::Exception {
            conn.prepare_cached(
                "UPDATE steps SET policy_exception = NULL WHERE workflow_id = ? AND step = ?",
            )?
            .execute(params![fence.workflow_id.as_str(), &fence.step])?;
        }
    }
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
    let result = plan::result_text(facts)?;
    let policy = plan::policy_text(facts)?;
    let log = log.map(|l| l.to_string());
    conn.prepare_cached(
        "UPDATE attempts SET checkpoint = MAX(checkpoint, ?),
             component = COALESCE(?, component), component_version = COALESCE(?, component_version),
             component_digest = COALESCE(?, component_digest), input_digest = COALESCE(?, input_digest),
             request_identity = COALESCE(?, request_identity), observation = COALESCE(?, observation),
             outcome = COALESCE(?, outcome), finished_at = COALESCE(?, finished_at),
             log = COALESCE(?, log), result = COALESCE(?, result), policy = COALESCE(?, policy)
         WHERE attempt_id = ?",
    )?
    .execute(rusqlite::params_from_iter(plan::facts_params(
        attempt,
        checkpoint,
        facts,
        finished_at,
        log.as_deref(),
        result.as_deref(),
        policy.as_deref(),
    )))?;
    Ok(())
}

/// Settles the workflow's course (see [`crate::course::settle`]) and recomputes its state
/// from its steps; on a change, stamps the end, starts the key's retention, tells the
/// timeline and queues a notification.
pub(crate) fn recompute_state(
    conn: &Connection,
    id: &WorkflowId,
    current: WorkflowState,
    cancelled: bool,
    now: Millis,
) -> StoreResult<WorkflowState> {
    let steps = settle_course(conn, id, cancelled, now)?;
    let Some(change) = plan::state_change(current, cancelled, steps, now) else {
        return Ok(current);
    };
    // The state moves and the change's timeline entry is numbered; the record the
    // notification and the tallies are made of is then read back.
    conn.prepare_cached(
        "UPDATE workflows SET state = ?1, ended_at = ?2, next_seq = next_seq + 1
         WHERE workflow_id = ?3",
    )?
    .execute(params![change.next.as_str(), change.ended_at, id.as_str()])?;
    let (record, retention, seq) = conn
        .prepare_cached(&format!(
            "SELECT {}, key_retention_ms, next_seq - 1 AS event_seq
             FROM workflows WHERE workflow_id = ?1",
            rows::WORKFLOW_COLUMNS
        ))?
        .query_row([id.as_str()], |r| {
            Ok((
                rows::workflow(r),
                r.get::<_, i64>("key_retention_ms")?,
                r.get::<_, i64>("event_seq")?,
            ))
        })?;
    let record = record?;
    if change.restart_key_retention {
        conn.prepare_cached("UPDATE intent_keys SET expires_at = ?1 WHERE workflow_id = ?2")?
            .execute(params![
                change.ended_at.map(|end| end + retention),
                id.as_str()
            ])?;
    }
    super::insert_events(
        conn,
        id,
        seq as u64,
        now,
        std::slice::from_ref(&change.event),
    )?;
    if let Some(event) = change.notify {
        outbox_for(conn, &record, event, now)?;
    }
    if change.next.is_ended() {
        tally_end(conn, &record, change.next, now)?;
    }
    Ok(change.next)
}

/// Adds an ended workflow to the metrics' tallies (see [`crate::metrics`]).
fn tally_end(
    conn: &Connection,
    record: &crate::store::WorkflowRecord,
    state: WorkflowState,
    now: Millis,
) -> StoreResult<()> {
    let [(m1, b1, v1), (m2, b2, v2)] =
        crate::metrics::tallies_of_end(record.created_at, now, u64::from(record.attempts_used));
    conn.prepare_cached(
        "INSERT INTO outcome_tallies (metric, workflow, state, bucket, shard, n, total)
         VALUES (?1, ?3, ?4, ?2, 0, 1, ?5), (?6, ?3, ?4, ?7, 0, 1, ?8)
         ON CONFLICT (metric, workflow, state, bucket, shard)
         DO UPDATE SET n = n + 1, total = total + excluded.total",
    )?
    .execute(params![
        m1.as_str(),
        b1,
        &record.workflow,
        state.as_str(),
        v1 as i64,
        m2.as_str(),
        b2,
        v2 as i64
    ])?;
    Ok(())
}

/// Applies what the workflow's course asks for now (cancelled steps, compensations to
/// start, originals compensated); returns every row's role and state afterwards.
fn settle_course(
    conn: &Connection,
    id: &WorkflowId,
    cancelled: bool,
    now: Millis,
) -> StoreResult<Vec<(Option<StepRole>, StepState)>> {
    // Most finishes settle nothing: the roles and states decide that, read without the
    // receipts' join (a finish's second most costly statement when it was always read).
    if !cancelled {
        let mut stmt =
            conn.prepare_cached("SELECT role, state FROM steps WHERE workflow_id = ?")?;
        let mut rows = stmt.query([id.as_str()])?;
        let mut states = Vec::new();
        while let Some(r) = rows.next()? {
            let role: Option<String> = r.get(0)?;
            let state: String = r.get(1)?;
            states.push((
                role.map(|t| parse(&t)).transpose()?,
                parse::<StepState>(&state)?,
            ));
        }
        if !course::may_settle(false, states.iter().map(|(_, s)| s)) {
            return Ok(states);
        }
    }
    let steps = {
        let mut stmt = conn.prepare_cached(&format!(
            "{} WHERE s.workflow_id = ? ORDER BY s.rowid",
            plan::COURSE_SELECT
        ))?;
        let mut rows = stmt.query([id.as_str()])?;
        let mut steps = Vec::new();
        while let Some(r) = rows.next()? {
            steps.push(rows::course_step(r)?);
        }
        steps
    };
    if !course::may_settle(cancelled, steps.iter().map(|s| &s.state)) {
        return Ok(steps.iter().map(|s| (s.role, s.state)).collect());
    }
    let deps: Vec<(String, String)> = if steps.iter().any(|s| !s.compensate_on.is_empty()) {
        let mut stmt =
            conn.prepare_cached("SELECT step, depends_on FROM step_deps WHERE workflow_id = ?")?;
        stmt.query_map([id.as_str()], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<Result<_, _>>()?
    } else {
        Vec::new()
    };
    let settlement = course::settle(cancelled, &steps, &deps);
    if settlement.is_empty() {
        return Ok(steps.iter().map(|s| (s.role, s.state)).collect());
    }
    let mut set_state = conn.prepare_cached(
        "UPDATE steps SET state = ?1, ready_at = NULL WHERE workflow_id = ?2 AND step = ?3",
    )?;
    for step in &settlement.cancel {
        set_state.execute(params![StepState::Cancelled.as_str(), id.as_str(), step])?;
    }
    for step in &settlement.compensated {
        set_state.execute(params![StepState::Compensated.as_str(), id.as_str(), step])?;
    }
    let mut insert = conn.prepare_cached(
        "INSERT INTO steps (workflow_id, step, state, ready_at, role, next_trigger)
         VALUES (?, ?, ?, ?, 'compensation', 'compensation')",
    )?;
    let mut dep = conn
        .prepare_cached("INSERT INTO step_deps (workflow_id, step, depends_on) VALUES (?, ?, ?)")?;
    for c in &settlement.start {
        set_state.execute(params![
            StepState::Compensating.as_str(),
            id.as_str(),
            &c.of
        ])?;
        let ready = c.after.is_empty();
        let state = if ready {
            StepState::Ready
        } else {
            StepState::Pending
        };
        insert.execute(params![
            id.as_str(),
            &c.id,
            state.as_str(),
            ready.then_some(now as i64)
        ])?;
        for after in &c.after {
            dep.execute(params![id.as_str(), &c.id, after])?;
        }
    }
    append_events(conn, id, now, &settlement.events)?;
    Ok(plan::settled(&steps, &settlement))
}

/// Budget and identity of a workflow as a claim sees it.
struct ClaimedWorkflow {
    workflow: String,
    subject: String,
    definition_version: u32,
    deadline_at: u64,
    attempts_used: u32,
    external_calls_used: u32,
    runtime_used_ms: u64,
    cost_used: u64,
    recovery_queries_used: u32,
    budget_added: crate::budget::Amounts,
}

/// What a claim reads of each step it takes, with the new lease's token. The lease is
/// then written by rowid: a read and a one-row update cost less than an `UPDATE …
/// RETURNING`, whose returned rows SQLite gathers in a temporary table each time.
const CLAIM_SELECT: &str = "SELECT rowid, workflow_id, step, attempts + 1 AS attempts, \
    next_trigger, uncertain_since, lower(hex(randomblob(16))) AS lease_token, \
    policy_exception, reads FROM steps";

/// Claims up to `req.limit` ready steps, the longest-waiting first.
fn claim_tx(conn: &Connection, req: &ClaimRequest) -> StoreResult<Vec<Claimed>> {
    let mut stmt = conn.prepare_cached(&format!(
        "{CLAIM_SELECT} WHERE state IN ('ready', 'failed_retryable') AND ready_at <= ?1
         ORDER BY ready_at LIMIT ?2"
    ))?;
    let rows = stmt.query(params![req.now as i64, req.limit as i64])?;
    let (claimed, reads) = lease(conn, req, rows)?;
    start_attempts(conn, req, claimed, reads)
}

/// Claims one step made ready earlier in the same transaction (by an admission or a
/// finish), by its key: no scan of the ready steps.
pub(crate) fn claim_step(
    conn: &Connection,
    req: &ClaimRequest,
    workflow: &WorkflowId,
    step: &str,
) -> StoreResult<Option<Claimed>> {
    let mut stmt = conn.prepare_cached(&format!(
        "{CLAIM_SELECT} WHERE workflow_id = ?1 AND step = ?2 AND state = 'ready' AND ready_at <= ?3"
    ))?;
    let rows = stmt.query(params![workflow.as_str(), step, req.now as i64])?;
    let (claimed, reads) = lease(conn, req, rows)?;
    Ok(start_attempts(conn, req, claimed, reads)?.pop())
}

/// The receipts a step reads (`None`: all of them).
type Reads = Option<Vec<String>>;

/// Leases each step the claim read, and gathers the receipts each reads.
fn lease(
    conn: &Connection,
    req: &ClaimRequest,
    mut rows: rusqlite::Rows<'_>,
) -> StoreResult<(Vec<Claimed>, Vec<Reads>)> {
    let expires = req.now + req.lease_ms;
    let mut update = conn.prepare_cached(
        "UPDATE steps SET state = 'running', attempts = attempts + 1, lease_owner = ?1,
             lease_token = ?2, lease_expires_at = ?3, note = NULL
         WHERE rowid = ?4",
    )?;
    let (mut claimed, mut reads, mut rowids) = (Vec::new(), Vec::new(), Vec::new());
    while let Some(r) = rows.next()? {
        claimed.push(rows::claimed(r, req.now, expires)?);
        reads.push(plan::reads_list(r.opt_text("reads")?.as_deref())?);
        rowids.push(r.get::<_, i64>("rowid")?);
    }
    // Written once the read is done: an update must not move rows under its cursor.
    for (c, rowid) in claimed.iter().zip(rowids) {
        update.execute(params![
            &req.owner,
            &c.fence.lease_token,
            expires as i64,
            rowid
        ])?;
    }
    Ok((claimed, reads))
}

/// Starts an attempt of each claimed step and gathers what it needs to run.
fn start_attempts(
    conn: &Connection,
    req: &ClaimRequest,
    mut claimed: Vec<Claimed>,
    reads: Vec<Reads>,
) -> StoreResult<Vec<Claimed>> {
    if claimed.is_empty() {
        return Ok(claimed);
    }
    // One attempt and one timeline entry per claim; the workflow counts both.
    // Read, then counted (as they would be after): cheaper than `UPDATE … RETURNING`.
    let mut budget = conn.prepare_cached(
        "SELECT workflow, subject, definition_version, deadline_at,
                attempts_used + 1 AS attempts_used, external_calls_used, runtime_used_ms,
                cost_used, recovery_queries_used, budget_added, next_seq AS first_seq, input,
                trace_parent
         FROM workflows WHERE workflow_id = ?1",
    )?;
    let mut count = conn.prepare_cached(
        "UPDATE workflows SET attempts_used = attempts_used + 1, next_seq = next_seq + 1
         WHERE workflow_id = ?1",
    )?;
    static ATTEMPTS: std::sync::LazyLock<MultiRow> = std::sync::LazyLock::new(|| {
        MultiRow::new(
            "INSERT INTO attempts (attempt_id, workflow_id, step, number, trigger, lease_owner,
                 checkpoint, outcome, started_at) VALUES",
            9,
        )
    });
    // Each attempt's row and its timeline entry, written together after the loop.
    let mut started: Vec<(i64, i64, String)> = Vec::with_capacity(claimed.len());
    for (c, reads) in claimed.iter_mut().zip(reads) {
        let (wf, seq, input, trace_parent) = {
            let mut found = budget.query([c.fence.workflow_id.as_str()])?;
            let r = found.next()?.ok_or_else(|| {
                StoreError::Corrupt(format!("workflow {} vanished", c.fence.workflow_id))
            })?;
            (
                ClaimedWorkflow {
                    workflow: r.text("workflow")?,
                    subject: r.text("subject")?,
                    definition_version: r.small("definition_version")?,
                    deadline_at: r.uint("deadline_at")?,
                    attempts_used: r.small("attempts_used")?,
                    external_calls_used: r.small("external_calls_used")?,
                    runtime_used_ms: r.uint("runtime_used_ms")?,
                    cost_used: r.uint("cost_used")?,
                    recovery_queries_used: r.small("recovery_queries_used")?,
                    budget_added: rows::budget_added(r.opt_text("budget_added")?)?,
                },
                r.int("first_seq")?,
                r.text("input")?,
                r.opt_text("trace_parent")?,
            )
        };
        count.execute([c.fence.workflow_id.as_str()])?;
        c.trace_parent = trace_parent;
        c.workflow = wf.workflow;
        c.subject = crate::intent::Subject(wf.subject);
        c.definition_version = wf.definition_version;
        c.deadline_at = wf.deadline_at;
        c.attempts_used = wf.attempts_used;
        c.external_calls_used = wf.external_calls_used;
        c.runtime_used_ms = wf.runtime_used_ms;
        c.cost_used = wf.cost_used;
        c.recovery_queries_used = wf.recovery_queries_used;
        c.budget_added = wf.budget_added;
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
            receipts: match reads {
                Some(steps) => super::read::receipts_of_tx(conn, &c.fence.workflow_id, &steps)?,
                None => super::read::receipts_tx(conn, &c.fence.workflow_id)?,
            },
            sent_identity,
        };
        started.push((
            c.attempt_number as i64,
            seq,
            format!(
                "Attempt {} started ({}) by {}",
                c.attempt_number, c.trigger, req.owner
            ),
        ));
    }
    let (now, one, in_progress, action, null) =
        (req.now as i64, 1i64, "in_progress", "action", "null");
    let triggers: Vec<&str> = claimed.iter().map(|c| c.trigger.as_str()).collect();
    let mut attempts: Vec<&dyn rusqlite::ToSql> = Vec::with_capacity(9 * claimed.len());
    let mut events: Vec<&dyn rusqlite::ToSql> = Vec::with_capacity(8 * claimed.len());
    for ((c, (number, seq, text)), trigger) in claimed.iter().zip(&started).zip(&triggers) {
        attempts.extend([
            &c.attempt_id.0 as &dyn rusqlite::ToSql,
            &c.fence.workflow_id.0,
            &c.fence.step,
            number,
            trigger,
            &req.owner,
            &one,
            &in_progress,
            &now,
        ]);
        events.extend([
            &c.fence.workflow_id.0 as &dyn rusqlite::ToSql,
            seq,
            &now,
            &action,
            &c.fence.step,
            &c.attempt_id.0,
            text,
            &null,
        ]);
    }
    ATTEMPTS.insert(conn, &attempts)?;
    super::TIMELINE.insert(conn, &events)?;
    Ok(claimed)
}

fn checkpoint_tx(conn: &Connection, req: CheckpointRequest) -> StoreResult<()> {
    check_fence(conn, &req.fence, None)?;
    if course::fenced_by_cancellation(req.checkpoint, &req.fence.step) {
        let cancel_on: Option<String> = conn
            .prepare_cached("SELECT cancel_on FROM workflows WHERE workflow_id = ?")?
            .query_row([req.fence.workflow_id.as_str()], |r| r.get(0))?;
        if cancel_on.is_some() {
            return Err(StoreError::Cancelled {
                workflow_id: req.fence.workflow_id.clone(),
            });
        }
    }
    if req.checkpoint == 3 {
        // The input the attempt recorded at checkpoint 2 against the step's: the first
        // request's digest is kept, and another is refused.
        let (step, attempt): (Option<String>, Option<String>) = conn
            .prepare_cached(
                "SELECT s.input_digest, a.input_digest FROM steps s, attempts a
                 WHERE s.workflow_id = ?1 AND s.step = ?2 AND a.attempt_id = ?3",
            )?
            .query_row(
                params![
                    req.fence.workflow_id.as_str(),
                    &req.fence.step,
                    req.attempt_id.as_str()
                ],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )?;
        if let (Some(step), Some(attempt)) = (&step, &attempt)
            && step != attempt
        {
            return Err(StoreError::InputChanged {
                step: step.clone(),
                attempt: attempt.clone(),
            });
        }
        if step.is_none() && attempt.is_some() {
            conn.prepare_cached(
                "UPDATE steps SET input_digest = ? WHERE workflow_id = ? AND step = ?",
            )?
            .execute(params![
                attempt,
                req.fence.workflow_id.as_str(),
                &req.fence.step
            ])?;
        }
    }
    apply_facts(
        conn,
        &req.attempt_id,
        req.checkpoint,
        &req.facts,
        None,
        None,
    )?;
    note_policy(conn, &req.fence, &req.facts)?;
    if let Some(cost) = req.external_call {
        conn.prepare_cached(
            "UPDATE workflows SET external_calls_used = external_calls_used + 1,
                 cost_used = cost_used + ?2
             WHERE workflow_id = ?1",
        )?
        .execute(params![req.fence.workflow_id.as_str(), i64::from(cost)])?;
    }
    append_events(conn, &req.fence.workflow_id, req.now, &req.events)
}

fn finish_tx(conn: &Connection, mut req: FinishRequest) -> StoreResult<FinishOutcome> {
    let mut events = std::mem::take(&mut req.events);
    let (fence, now) = (&req.fence, req.now);
    let id = fence.workflow_id.as_str();
    // The step's transition doubles as the fence: no row means the lease is gone.
    let cols = req.transition.columns();
    let moved = conn
        .prepare_cached(
            "UPDATE steps SET state = ?1, ready_at = ?2, next_trigger = COALESCE(?3, next_trigger),
                 uncertain_since = CASE WHEN ?1 = 'succeeded' THEN NULL
                                        ELSE COALESCE(uncertain_since, ?4) END,
                 receipt_id = COALESCE(?5, receipt_id), note = ?6, blocked = ?11,
                 lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL
             WHERE workflow_id = ?7 AND step = ?8 AND lease_token = ?9 AND state = 'running'
               AND (?10 IS NULL OR lease_expires_at < ?10)
               AND (?12 IS NULL OR (SELECT checkpoint FROM attempts WHERE attempt_id = ?13) = ?12)",
        )?
        .execute(params![
            cols.state.as_str(),
            cols.ready_at,
            cols.next_trigger,
            cols.uncertain_since,
            cols.receipt_id,
            req.note.as_deref(),
            id,
            &fence.step,
            &fence.lease_token,
            req.expired_before.map(|v| v as i64),
            plan::blocked_text(req.blocked.as_ref())?,
            req.decided_at.map(i64::from),
            req.attempt_id.as_str(),
        ])?;
    if moved == 0 {
        return Err(lease_lost(fence));
    }
    apply_facts(
        conn,
        &req.attempt_id,
        req.checkpoint,
        &req.facts,
        Some(now),
        Some(&req.log),
    )?;
    note_policy(conn, fence, &req.facts)?;
    let mut released = Vec::new();
    if let StepTransition::Succeeded(r) = &req.transition {
        let output = r.output.to_string();
        insert_receipt(
            conn,
            &plan::receipt_params(
                r,
                &fence.workflow_id,
                &fence.step,
                Some(&req.attempt_id),
                &output,
                now,
            ),
        )?;
        released = release_dependents_of(conn, &fence.workflow_id, &fence.step, now)?;
    }
    events.extend(NewEvent::released(&released));
    let (first, current, cancel_on): (i64, String, Option<String>) = conn
        .prepare_cached("SELECT next_seq, state, cancel_on FROM workflows WHERE workflow_id = ?1")?
        .query_row([id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
    conn.prepare_cached(
        "UPDATE workflows SET runtime_used_ms = runtime_used_ms + ?1, next_seq = next_seq + ?2,
             attempts_used = attempts_used - ?4, recovery_queries_used = recovery_queries_used + ?5
         WHERE workflow_id = ?3",
    )?
    .execute(params![
        req.runtime_ms as i64,
        events.len() as i64,
        id,
        plan::uncharged(req.charge),
        plan::from_reserve(req.charge)
    ])?;
    if !events.is_empty() {
        super::insert_events(conn, &fence.workflow_id, first as u64, now, &events)?;
    }
    let current = parse::<WorkflowState>(&current)?;
    let workflow_state =
        recompute_state(conn, &fence.workflow_id, current, cancel_on.is_some(), now)?;
    if plan::compensated_now(&req.transition, &fence.step) {
        outbox(
            conn,
            &fence.workflow_id,
            crate::notify::EventType::EffectCompensated,
            now,
        )?;
    }
    Ok(FinishOutcome {
        workflow_state,
        released,
    })
}

/// Records a receipt (see [`plan::receipt_params`]).
pub(crate) fn insert_receipt(conn: &Connection, values: &[plan::Param<'_>]) -> StoreResult<()> {
    conn.prepare_cached(&format!(
        "INSERT INTO receipts ({}) VALUES ({})",
        plan::RECEIPT_INSERT_COLUMNS,
        vec!["?"; values.len()].join(", ")
    ))?
    .execute(rusqlite::params_from_iter(values))?;
    Ok(())
}

impl rusqlite::ToSql for plan::Param<'_> {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        match self {
            plan::Param::Text(t) => t.to_sql(),
            plan::Param::Int(i) => i.to_sql(),
            plan::Param::Flag(b) => b.to_sql(),
            plan::Param::Bytes(b) => b.to_sql(),
        }
    }
}

/// Makes ready every pending step of the workflow whose dependencies have all succeeded.
pub(crate) fn release_dependents(
    conn: &Connection,
    id: &WorkflowId,
    now: Millis,
) -> StoreResult<Vec<String>> {
    let pending: Vec<String> = conn
        .prepare_cached(
            "SELECT step FROM steps WHERE workflow_id = ?1 AND state = 'pending' ORDER BY step",
        )?
        .query_map([id.as_str()], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    release_ready(conn, id, pending, now)
}

/// [`release_dependents`] after `step` succeeded: only the steps that run after it can
/// have become ready, so only they are looked at (a workflow's other steps are not read).
fn release_dependents_of(
    conn: &Connection,
    id: &WorkflowId,
    step: &str,
    now: Millis,
) -> StoreResult<Vec<String>> {
    let after: Vec<String> = conn
        .prepare_cached(
            "SELECT step FROM step_deps WHERE workflow_id = ?1 AND depends_on = ?2 ORDER BY step",
        )?
        .query_map(params![id.as_str(), step], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    release_ready(conn, id, after, now)
}

/// Makes ready each of `steps` that is pending and whose dependencies have all succeeded;
/// returns those it released, in order. One-row updates by key without `RETURNING`: SQLite
/// gathers an `IN` list and returned rows in temporary tables, which cost more than the
/// update itself.
fn release_ready(
    conn: &Connection,
    id: &WorkflowId,
    steps: Vec<String>,
    now: Millis,
) -> StoreResult<Vec<String>> {
    let mut release = conn.prepare_cached(
        "UPDATE steps SET state = 'ready', ready_at = ?1
         WHERE workflow_id = ?2 AND step = ?3 AND state = 'pending' AND NOT EXISTS (
             SELECT 1 FROM step_deps d JOIN steps s2
               ON s2.workflow_id = d.workflow_id AND s2.step = d.depends_on
             WHERE d.workflow_id = ?2 AND d.step = ?3 AND s2.state != 'succeeded')",
    )?;
    let mut released = Vec::with_capacity(steps.len());
    for step in steps {
        if release.execute(params![now as i64, id.as_str(), &step])? == 1 {
            released.push(step);
        }
    }
    Ok(released)
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
        self.write(req, |tx, req| Box::pin(leases::renew(tx, req)))
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

    async fn finish_and_claim(
        &self,
        req: FinishRequest,
        next: ClaimRequest,
    ) -> StoreResult<(FinishOutcome, Option<Claimed>)> {
        self.writer
            .write(move |conn| {
                let workflow = req.fence.workflow_id.clone();
                let finished = finish_tx(conn, req)?;
                // Only a commit of this one job: a single-row claim costs the writer more
                // than its share of the loop's batched claims, so it is made only when the
                // writer has nothing else to do.
                let claimed = match finished.released.first() {
                    Some(step) if super::writer::alone() => {
                        claim_step(conn, &next, &workflow, step)?
                    }
                    _ => None,
                };
                Ok((finished, claimed))
            })
            .await
    }

    async fn late_evidence(&self, late: LateEvidence) -> StoreResult<()> {
        self.write(late, |tx, late| {
            Box::pin(crate::store::late::evidence(tx, late))
        })
        .await
    }

    async fn release_leases(&self, owner: &str, now: Millis) -> StoreResult<u64> {
        self.write((owner.to_string(), now), |tx, a| {
            Box::pin(leases::release(tx, a))
        })
        .await
    }

    async fn expired_leases(&self, now: Millis, limit: u32) -> StoreResult<Vec<ExpiredLease>> {
        // Inline, on a point-read connection: one indexed range of at most a sweep's leases.
        // Handed to the pool's connection thread, each sweep waited for that thread to get a
        // core behind the attempts it recovers — the longest part of a restart's sweep.
        static STATEMENT: std::sync::LazyLock<String> =
            std::sync::LazyLock::new(|| crate::store::reads::expired_leases_sql(&super::read::SQL));
        self.points.with(|conn| {
            let mut stmt = conn.prepare_cached(&STATEMENT)?;
            super::each_row(&mut stmt, params![now as i64, i64::from(limit)], |r| {
                rows::expired_lease(r)
            })
        })
    }

    async fn record_sweep(&self, owner: &str, before: Millis) -> StoreResult<()> {
        self.write((owner.to_string(), before), |tx, a| {
            Box::pin(leases::record_sweep(tx, a))
        })
        .await
    }

    async fn next_due(&self, now: Millis) -> StoreResult<Option<Millis>> {
        self.read(now, |tx, now| Box::pin(leases::next_due(tx, now)))
            .await
    }

    async fn watch(&self, _wake: std::sync::Arc<tokio::sync::Notify>) -> StoreResult<bool> {
        // One host per file: every write comes from this process, which wakes itself.
        Ok(false)
    }
}
