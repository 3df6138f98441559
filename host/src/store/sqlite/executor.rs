//! SQLite's claim: the ready steps it leases and the attempts it starts, read then written
//! by key on the writer's connection; and a finish that, when the writer has nothing else
//! to do, claims a step it released in the same commit.

use super::MultiRow;
use super::tx::SqliteTx;
use crate::intent::WorkflowId;
use crate::store::claims::{ClaimPlan, Pick};
use crate::store::fairness::{self, FairShare, ReadySubject};
use crate::store::gates;
use crate::store::plan;
use crate::store::rows::{self, Columns};
use crate::store::tx::run_now;
use crate::store::{
    AdmitOutcome, AdmitRequest, ClaimRequest, Claimed, FinishOutcome, FinishRequest, StepContext,
    StoreError, StoreResult,
};
use crate::store::{admission, executor};
use rusqlite::{Connection, OptionalExtension, params};

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
    next_trigger, uncertain_since, key_remembered_until, \
    lower(hex(randomblob(16))) AS lease_token, \
    policy_exception, reads, key_step, item, adapter FROM steps";

/// The statement of one [`Pick`]: of one adapter, of one subject, or of anyone; leaving
/// the excluded adapters alone. Parameters: now, limit, then the subject or adapter, then
/// the excluded adapters (a JSON array).
fn pick_sql(pick: &Pick, excluding: bool) -> String {
    let filter = pick.filter(
        excluding,
        3,
        |n| format!("?{n}"),
        |list| format!("adapter NOT IN (SELECT value FROM json_each({list}))"),
    );
    format!(
        "{CLAIM_SELECT} WHERE state IN ('ready', 'failed_retryable') AND ready_at <= ?1{filter}
         ORDER BY ready_at LIMIT ?2"
    )
}

/// Claims up to `req.limit` ready steps as [`ClaimPlan`] shares them: gated adapters
/// within their room, then the subjects by `fair`, the longest-waiting first within each.
pub(super) fn claim_tx(
    conn: &mut Connection,
    req: &ClaimRequest,
    fair: &FairShare,
) -> StoreResult<Vec<Claimed>> {
    let rooms = run_now(Box::pin(gates::rooms(&mut SqliteTx::on(conn), req)))?;
    let conn = &*conn;
    let ready = ready_subjects(conn, req.now)?;
    let mut plan = ClaimPlan::new(fair, ready, rooms, req.limit as usize);
    let excluded = serde_json::to_string(plan.excluded())
        .map_err(|e| StoreError::never(format!("adapter names as JSON: {e}")))?;
    let excluding = !plan.excluded().is_empty();
    let (mut claimed, mut reads) = (Vec::new(), Vec::new());
    while let Some(pick) = plan.next() {
        let mut stmt = conn.prepare_cached(&pick_sql(&pick, excluding))?;
        let (now, n) = (req.now as i64, pick.n as i64);
        let mut values: Vec<&dyn rusqlite::ToSql> = vec![&now, &n];
        if let Some(named) = pick.adapter.as_ref().or(pick.subject.as_ref()) {
            values.push(named);
        }
        if excluding && pick.adapter.is_none() {
            values.push(&excluded);
        }
        let rows = stmt.query(values.as_slice())?;
        let (c, r) = lease(conn, req, rows)?;
        plan.took(&pick, c.len());
        claimed.extend(c);
        reads.extend(r);
    }
    start_attempts(conn, req, claimed, reads)
}

/// [`fairness::READY_SUBJECTS`] at `now`.
fn ready_subjects(conn: &Connection, now: u64) -> StoreResult<Vec<ReadySubject>> {
    let mut stmt = conn.prepare_cached(fairness::READY_SUBJECTS)?;
    let mut rows = stmt.query(params![now as i64, fairness::SUBJECTS_PER_CLAIM])?;
    let mut ready = Vec::new();
    while let Some(r) = rows.next()? {
        ready.push(ReadySubject {
            subject: r.get(0)?,
            oldest: r.get(1)?,
        });
    }
    Ok(ready)
}

/// Claims one step made ready earlier in the same transaction (by an admission or a
/// finish), by its key: no scan of the ready steps.
pub(crate) fn claim_step(
    conn: &Connection,
    req: &ClaimRequest,
    workflow: &WorkflowId,
    step: &str,
) -> StoreResult<Option<Claimed>> {
    // A step of a gated or paused adapter is left to the loop's claim, which counts it.
    let mut stmt = conn.prepare_cached(&format!(
        "{CLAIM_SELECT} WHERE workflow_id = ?1 AND step = ?2 AND state = 'ready' AND ready_at <= ?3
             AND (adapter IS NULL
                  OR (adapter NOT IN (SELECT value FROM json_each(?4))
                      AND NOT EXISTS (SELECT 1 FROM adapter_pauses p
                                      WHERE p.adapter = steps.adapter AND p.paused_until > ?3)))"
    ))?;
    let gated: Vec<&str> = req.gates.iter().map(|g| g.adapter.as_str()).collect();
    let gated = serde_json::to_string(&gated)
        .map_err(|e| StoreError::never(format!("adapter names as JSON: {e}")))?;
    let rows = stmt.query(params![workflow.as_str(), step, req.now as i64, gated])?;
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
                cost_used, recovery_queries_used, budget_added, next_seq AS first_seq,
                input_revision, trace_parent, environment
         FROM workflows WHERE workflow_id = ?1",
    )?;
    let mut count = conn.prepare_cached(
        "UPDATE workflows SET attempts_used = attempts_used + 1, next_seq = next_seq + 1
         WHERE workflow_id = ?1",
    )?;
    static ATTEMPTS: std::sync::LazyLock<MultiRow> = std::sync::LazyLock::new(|| {
        MultiRow::new(
            "INSERT INTO attempts (attempt_id, workflow_id, step, number, trigger, lease_owner,
                 checkpoint, outcome, started_at, input_revision) VALUES",
            10,
        )
    });
    // Each attempt's row and its timeline entry, written together after the loop.
    let mut started: Vec<(i64, i64, String, i64)> = Vec::with_capacity(claimed.len());
    for (c, reads) in claimed.iter_mut().zip(reads) {
        let (wf, seq, input_revision, (trace_parent, environment)) = {
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
                r.int("input_revision")?,
                (r.opt_text("trace_parent")?, r.opt_text("environment")?),
            )
        };
        count.execute([c.fence.workflow_id.as_str()])?;
        c.trace_parent = trace_parent;
        c.environment = environment;
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
            input: inputs::read(conn, &c.fence.workflow_id, input_revision)?,
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
            input_revision,
        ));
    }
    let (now, one, in_progress, action, null) =
        (req.now as i64, 1i64, "in_progress", "action", "null");
    let triggers: Vec<&str> = claimed.iter().map(|c| c.trigger.as_str()).collect();
    let mut attempts: Vec<&dyn rusqlite::ToSql> = Vec::with_capacity(10 * claimed.len());
    let mut events: Vec<&dyn rusqlite::ToSql> = Vec::with_capacity(8 * claimed.len());
    for ((c, (number, seq, text, input_revision)), trigger) in
        claimed.iter().zip(&started).zip(&triggers)
    {
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
            input_revision,
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

/// Ends an attempt and, when this is the writer's only job, claims in the same commit a
/// step the finish released: a single-row claim costs the writer more than its share of
/// the loop's batched claims, so it is made only when the writer has nothing else to do —
/// or for a quiet subject beside another's burst ([`ClaimRequest::urgent`]), whose batched
/// claims its steps would otherwise queue behind.
pub(super) fn finish_and_claim(
    conn: &mut Connection,
    req: &FinishRequest,
    next: &ClaimRequest,
) -> StoreResult<(FinishOutcome, Option<Claimed>)> {
    let finished = run_now(Box::pin(executor::finish(&mut SqliteTx::on(conn), req)))?;
    let claimed = match finished.released.first() {
        Some(step) if super::writer::alone() || next.urgent => {
            claim_step(conn, next, &req.fence.workflow_id, step)?
        }
        _ => None,
    };
    Ok((finished, claimed))
}

/// Admits an intent and, when it creates the workflow and this is the writer's only job,
/// claims one of its first steps in the same commit (as [`finish_and_claim`] does).
pub(super) fn admit_and_claim(
    conn: &mut Connection,
    req: &AdmitRequest,
    next: &ClaimRequest,
) -> StoreResult<(AdmitOutcome, Option<Claimed>)> {
    let first = req.create.as_ref().and_then(|new| {
        let step = new.steps.iter().find(|s| s.depends_on.is_empty())?;
        Some((new.workflow_id.clone(), step.id.clone()))
    });
    let outcome = run_now(Box::pin(admission::admit(&mut SqliteTx::on(conn), req)))?;
    let claimed = match (&outcome, first) {
        (AdmitOutcome::Created(_), Some((workflow, step))) if super::writer::alone() => {
            claim_step(conn, next, &workflow, &step)?
        }
        _ => None,
    };
    Ok((outcome, claimed))
}

/// The workflow inputs claims read lately, parsed once: a batch's items, claimed one after
/// another, share their workflow's input rather than each reading and parsing all of it.
mod inputs {
    use crate::intent::WorkflowId;
    use crate::store::{StoreError, StoreResult};
    use rusqlite::Connection;
    use std::cell::RefCell;
    use std::sync::Arc;

    /// How many inputs are kept (the writer thread's own; a revision makes a new entry).
    const KEPT: usize = 8;

    type Entry = (String, i64, Arc<serde_json::Value>);

    thread_local! {
        static RECENT: RefCell<Vec<Entry>> = const { RefCell::new(Vec::new()) };
    }

    /// The input of revision `revision` of workflow `id`.
    pub(super) fn read(
        conn: &Connection,
        id: &WorkflowId,
        revision: i64,
    ) -> StoreResult<Arc<serde_json::Value>> {
        let hit = RECENT.with_borrow(|recent| {
            recent
                .iter()
                .find(|(w, r, _)| w == id.as_str() && *r == revision)
                .map(|(_, _, v)| v.clone())
        });
        if let Some(input) = hit {
            return Ok(input);
        }
        let text: String = conn
            .prepare_cached("SELECT input FROM workflow_inputs WHERE workflow_id = ?1")?
            .query_row([id.as_str()], |r| r.get(0))?;
        let input: Arc<serde_json::Value> = Arc::new(
            serde_json::from_str(&text)
                .map_err(|e| StoreError::Corrupt(format!("stored input: {e}")))?,
        );
        RECENT.with_borrow_mut(|recent| {
            if recent.len() == KEPT {
                recent.remove(0);
            }
            recent.push((id.as_str().to_string(), revision, input.clone()));
        });
        Ok(input)
    }
}
