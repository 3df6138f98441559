//! The scheduler's writes: claims, renewals, checkpoints and finishes, all fenced.

use super::{PgResult, PgStore, append_events, transaction};
use crate::course;
use crate::intent::{Millis, NewEvent, Receipt, StepRole, StepState, WorkflowId, WorkflowState};
use crate::store::leases;
use crate::store::plan;
use crate::store::rows::{self, Columns, fits};
use crate::store::tx::Backend;
use crate::store::{
    CheckpointRequest, ClaimRequest, Claimed, ExecutorStore, ExpiredLease, Fence, FinishOutcome,
    FinishRequest, LateEvidence, RenewRequest, StepContext, StepTransition, StoreError,
    StoreResult,
};
use sqlx::postgres::PgConnection;
use std::collections::HashMap;

pub(super) fn lease_lost(fence: &Fence) -> StoreError {
    StoreError::LeaseLost {
        workflow_id: fence.workflow_id.clone(),
        step: fence.step.clone(),
    }
}

/// Queues a notification of a meaningful transition of workflow `id`, in the caller's
/// transaction (after the transition's own writes: the body tells the workflow as it is).
pub(crate) async fn outbox(
    conn: &mut PgConnection,
    id: &WorkflowId,
    event: crate::notify::EventType,
    now: Millis,
) -> PgResult<()> {
    let row = sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT {} FROM workflows WHERE workflow_id = $1",
        rows::WORKFLOW_COLUMNS
    )))
    .bind(id.as_str())
    .fetch_one(&mut *conn)
    .await?;
    outbox_for(conn, &rows::workflow(&row)?, event, now).await
}

/// [`outbox`] for a workflow record already at hand.
pub(crate) async fn outbox_for(
    conn: &mut PgConnection,
    record: &crate::store::WorkflowRecord,
    event: crate::notify::EventType,
    now: Millis,
) -> PgResult<()> {
    let n = plan::notification(record, event, now);
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "{} VALUES ($1, $2, $3, $4, $5, $6, $6)",
        plan::OUTBOX_INSERT
    )))
    .bind(n.id)
    .bind(n.workflow_id)
    .bind(n.event)
    .bind(n.revision)
    .bind(n.body)
    .bind(n.at)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Writes an attempt's facts (`$1`–`$11`) to attempt `$12`, as a statement for a `WITH`
/// clause: the caller appends its guard (`AND …`) and binds the rest from `$14` on.
const APPLY_FACTS: &str = "UPDATE attempts SET checkpoint = GREATEST(checkpoint, $1),
     component = COALESCE($2, component), component_version = COALESCE($3, component_version),
     component_digest = COALESCE($4, component_digest), input_digest = COALESCE($5, input_digest),
     request_identity = COALESCE($6, request_identity), observation = COALESCE($7, observation),
     outcome = COALESCE($8, outcome), finished_at = COALESCE($9, finished_at),
     log = COALESCE($10, log), result = COALESCE($11, result), policy = COALESCE($12, policy)
     WHERE attempt_id = $13";

/// Timeline entries as one array per column, bound in the order `kind, step, attempt_id,
/// text, data` (a batch statement's `UNNEST`).
#[derive(Default)]
pub(super) struct EventColumns<'a> {
    kinds: Vec<&'static str>,
    steps: Vec<Option<&'a str>>,
    attempts: Vec<Option<&'a str>>,
    texts: Vec<&'a str>,
    data: Vec<String>,
}

impl<'a> EventColumns<'a> {
    pub(super) fn push(&mut self, e: &'a NewEvent) {
        self.kinds.push(e.kind.as_str());
        self.steps.push(e.step.as_deref());
        self.attempts.push(e.attempt_id.as_deref());
        self.texts.push(e.text.as_str());
        self.data.push(e.data.to_string());
    }

    pub(super) fn bind<'q>(self, query: PgQuery<'q>) -> PgQuery<'q>
    where
        'a: 'q,
    {
        query
            .bind(self.kinds)
            .bind(self.steps)
            .bind(self.attempts)
            .bind(self.texts)
            .bind(self.data)
    }
}

pub(super) type PgQuery<'q> = sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>;

/// Binds `$1`–`$13` of [`APPLY_FACTS`].
fn bind_facts<'q>(mut query: PgQuery<'q>, values: [plan::Param<'q>; 13]) -> PgQuery<'q> {
    for value in values {
        query = bind(query, value);
    }
    query
}

/// Binds one planned value.
pub(crate) fn bind<'q>(query: PgQuery<'q>, value: plan::Param<'q>) -> PgQuery<'q> {
    match value {
        plan::Param::Text(t) => query.bind(t),
        plan::Param::Int(i) => query.bind(i),
        plan::Param::Flag(b) => query.bind(b),
        plan::Param::Bytes(b) => query.bind(b),
    }
}

/// Settles the workflow's course (see [`crate::course::settle`]) and recomputes its state
/// from its steps; on a change, stamps the end, starts the key's retention, tells the
/// timeline and queues a notification. The caller holds the workflow row's lock, so the
/// steps read here include every committed change.
pub(crate) async fn recompute_state(
    conn: &mut PgConnection,
    id: &WorkflowId,
    current: WorkflowState,
    cancelled: bool,
    now: Millis,
) -> PgResult<WorkflowState> {
    let mut ends = Tallies::default();
    let state = recompute_state_tallying(conn, id, current, cancelled, now, &mut ends).await?;
    ends.write(conn, shard_of(id)).await?;
    Ok(state)
}

/// [`recompute_state`], adding an end to `ends` rather than to the tallies, so that a
/// caller ending many workflows writes their tallies at once.
pub(crate) async fn recompute_state_tallying(
    conn: &mut PgConnection,
    id: &WorkflowId,
    current: WorkflowState,
    cancelled: bool,
    now: Millis,
    ends: &mut Tallies,
) -> PgResult<WorkflowState> {
    let steps = settle_course(conn, id, cancelled, now).await?;
    let Some(change) = plan::state_change(current, cancelled, steps, now) else {
        return Ok(current);
    };
    sqlx::query("UPDATE workflows SET state = $1, ended_at = $2 WHERE workflow_id = $3")
        .bind(change.next.as_str())
        .bind(change.ended_at)
        .bind(id.as_str())
        .execute(&mut *conn)
        .await?;
    if change.restart_key_retention {
        sqlx::query(
            "UPDATE intent_keys SET expires_at = $1 + (SELECT key_retention_ms FROM workflows WHERE workflow_id = $2)
             WHERE workflow_id = $2",
        )
        .bind(change.ended_at)
        .bind(id.as_str())
        .execute(&mut *conn)
        .await?;
    }
    append_events(conn, id, now, std::slice::from_ref(&change.event)).await?;
    if let Some(event) = change.notify {
        outbox(conn, id, event, now).await?;
    }
    if change.next.is_ended() {
        let (workflow, created_at, attempts): (String, i64, i64) = sqlx::query_as(
            "SELECT workflow, created_at, attempts_used FROM workflows WHERE workflow_id = $1",
        )
        .bind(id.as_str())
        .fetch_one(&mut *conn)
        .await?;
        for (metric, bucket, value) in
            crate::metrics::tallies_of_end(created_at as Millis, now, attempts as u64)
        {
            ends.add(
                metric.as_str(),
                workflow.clone(),
                change.next,
                bucket,
                value,
            );
        }
    }
    Ok(change.next)
}

/// A workflow's change of state, planned from its steps read under its lock.
pub(crate) struct Planned<'a> {
    pub id: &'a WorkflowId,
    pub change: plan::StateChange,
    pub now: Millis,
}

/// Writes the planned state changes of many locked workflows — what
/// [`recompute_state_tallying`] writes for one: the state, the key's retention, the
/// timeline's conclusion, the notification, the tallies — in two statements for all.
pub(crate) async fn apply_state_changes(
    conn: &mut PgConnection,
    planned: &[Planned<'_>],
    ends: &mut Tallies,
) -> PgResult<()> {
    if planned.is_empty() {
        return Ok(());
    }
    let n = planned.len();
    let (mut ids, mut states, mut ended, mut keys, mut ats) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    let mut events = EventColumns::default();
    for p in planned {
        let (c, e) = (&p.change, &p.change.event);
        ids.push(p.id.as_str());
        states.push(c.next.as_str());
        ended.push(c.ended_at);
        keys.push(c.restart_key_retention);
        ats.push(p.now as i64);
        events.push(e);
    }
    // The change's columns are all named `c_…`, so that `RETURNING` names the workflow's.
    let query = sqlx::query(sqlx::AssertSqlSafe(format!(
        "WITH c AS (
             SELECT * FROM UNNEST($1::TEXT[], $2::TEXT[], $3::BIGINT[], $4::BOOLEAN[],
                 $5::BIGINT[], $6::TEXT[], $7::TEXT[], $8::TEXT[], $9::TEXT[], $10::TEXT[])
             AS c(c_id, c_state, c_ended, c_key, c_at, c_kind, c_step, c_attempt, c_text, c_data)),
         u AS (
             UPDATE workflows w SET state = c.c_state, ended_at = c.c_ended,
                 next_seq = w.next_seq + 1
             FROM c WHERE w.workflow_id = c.c_id
             RETURNING {}, key_retention_ms),
         keys AS (
             UPDATE intent_keys k SET expires_at = c.c_ended + u.key_retention_ms
             FROM u JOIN c ON c.c_id = u.workflow_id
             WHERE k.workflow_id = u.workflow_id AND c.c_key),
         events AS (
             INSERT INTO timeline (workflow_id, seq, at, kind, step, attempt_id, text, data)
             SELECT u.workflow_id, u.next_seq - 1, c.c_at, c.c_kind, c.c_step, c.c_attempt,
                 c.c_text, c.c_data
             FROM u JOIN c ON c.c_id = u.workflow_id)
         SELECT * FROM u",
        rows::WORKFLOW_COLUMNS
    )))
    .persistent(false)
    .bind(&ids)
    .bind(&states)
    .bind(&ended)
    .bind(&keys)
    .bind(&ats);
    let rows = events.bind(query).fetch_all(&mut *conn).await?;
    let by_id: HashMap<&str, &Planned> = planned.iter().map(|p| (p.id.as_str(), p)).collect();
    let mut told = Vec::new();
    for row in &rows {
        let record = rows::workflow(row)?;
        let p = by_id.get(record.workflow_id.as_str()).ok_or_else(|| {
            StoreError::Corrupt(format!("{} changed state unplanned", record.workflow_id))
        })?;
        if let Some(event) = p.change.notify {
            told.push(plan::notification(&record, event, p.now));
        }
        if p.change.next.is_ended() {
            for (metric, bucket, value) in crate::metrics::tallies_of_end(
                record.created_at,
                p.now,
                u64::from(record.attempts_used),
            ) {
                ends.add(
                    metric.as_str(),
                    record.workflow.clone(),
                    p.change.next,
                    bucket,
                    value,
                );
            }
        }
    }
    if rows.len() != n {
        return Err(StoreError::Corrupt(format!(
            "{} of {n} workflows changing state were found",
            rows.len()
        ))
        .into());
    }
    if !told.is_empty() {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "{} SELECT n, w, t, r, b, a, a
             FROM UNNEST($1::TEXT[], $2::TEXT[], $3::TEXT[], $4::BIGINT[], $5::TEXT[],
                 $6::BIGINT[]) AS x(n, w, t, r, b, a)",
            plan::OUTBOX_INSERT
        )))
        .persistent(false)
        .bind(told.iter().map(|t| t.id.as_str()).collect::<Vec<_>>())
        .bind(
            told.iter()
                .map(|t| t.workflow_id.as_str())
                .collect::<Vec<_>>(),
        )
        .bind(told.iter().map(|t| t.event).collect::<Vec<_>>())
        .bind(told.iter().map(|t| t.revision).collect::<Vec<_>>())
        .bind(told.iter().map(|t| t.body.as_str()).collect::<Vec<_>>())
        .bind(told.iter().map(|t| t.at).collect::<Vec<_>>())
        .execute(&mut *conn)
        .await?;
    }
    Ok(())
}

/// Rows each tally is spread over, so that concurrent ends rarely wait on one row's lock.
pub(crate) const TALLY_SHARDS: u64 = 16;

/// The shard of the tallies a lone end of workflow `id` adds to: any spread will do, and
/// the id's hash needs no random source.
fn shard_of(id: &WorkflowId) -> i32 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    id.as_str().hash(&mut h);
    (h.finish() % TALLY_SHARDS) as i32
}

/// Ended workflows to add to the metrics' tallies (see [`crate::metrics`]), summed by row.
#[derive(Default)]
pub(crate) struct Tallies {
    rows: std::collections::BTreeMap<(&'static str, String, &'static str, u32), (i64, i64)>,
}

impl Tallies {
    fn add(
        &mut self,
        metric: &'static str,
        workflow: String,
        state: WorkflowState,
        bucket: u32,
        value: u64,
    ) {
        let row = self
            .rows
            .entry((metric, workflow, state.as_str(), bucket))
            .or_default();
        row.0 += 1;
        row.1 += value as i64;
    }

    /// Adds every end to shard `shard`, in one statement and in key order, so that two
    /// transactions adding to the same rows never wait for each other in a cycle.
    pub(crate) async fn write(&self, conn: &mut PgConnection, shard: i32) -> PgResult<()> {
        if self.rows.is_empty() {
            return Ok(());
        }
        let mut metric = Vec::with_capacity(self.rows.len());
        let mut workflow = Vec::with_capacity(self.rows.len());
        let mut state = Vec::with_capacity(self.rows.len());
        let mut bucket = Vec::with_capacity(self.rows.len());
        let mut n = Vec::with_capacity(self.rows.len());
        let mut total = Vec::with_capacity(self.rows.len());
        for ((m, w, s, b), (count, sum)) in &self.rows {
            metric.push(*m);
            workflow.push(w.as_str());
            state.push(*s);
            bucket.push(*b as i32);
            n.push(*count);
            total.push(*sum);
        }
        sqlx::query(
            "INSERT INTO outcome_tallies (metric, workflow, state, bucket, shard, n, total)
             SELECT m, w, s, b, $7, n, t
             FROM UNNEST($1::TEXT[], $2::TEXT[], $3::TEXT[], $4::INT[], $5::BIGINT[], $6::BIGINT[])
                  WITH ORDINALITY AS x(m, w, s, b, n, t, i)
             ORDER BY i
             ON CONFLICT (metric, workflow, state, bucket, shard)
             DO UPDATE SET n = outcome_tallies.n + EXCLUDED.n,
                           total = outcome_tallies.total + EXCLUDED.total",
        )
        .persistent(false)
        .bind(&metric)
        .bind(&workflow)
        .bind(&state)
        .bind(&bucket)
        .bind(&n)
        .bind(&total)
        .bind(shard)
        .execute(&mut *conn)
        .await?;
        Ok(())
    }
}

/// Applies what the workflow's course asks for now (cancelled steps, compensations to
/// start, originals compensated); returns every row's role and state afterwards.
async fn settle_course(
    conn: &mut PgConnection,
    id: &WorkflowId,
    cancelled: bool,
    now: Millis,
) -> PgResult<Vec<(Option<StepRole>, StepState)>> {
    let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
        "{} WHERE s.workflow_id = $1 ORDER BY s.ord",
        plan::COURSE_SELECT
    )))
    .bind(id.as_str())
    .fetch_all(&mut *conn)
    .await?;
    let steps = rows
        .iter()
        .map(rows::course_step)
        .collect::<StoreResult<Vec<_>>>()?;
    if !course::may_settle(cancelled, steps.iter().map(|s| &s.state)) {
        return Ok(steps.iter().map(|s| (s.role, s.state)).collect());
    }
    let deps: Vec<(String, String)> = if steps.iter().any(|s| !s.compensate_on.is_empty()) {
        sqlx::query_as("SELECT step, depends_on FROM step_deps WHERE workflow_id = $1")
            .bind(id.as_str())
            .fetch_all(&mut *conn)
            .await?
    } else {
        Vec::new()
    };
    let settlement = course::settle(cancelled, &steps, &deps);
    if settlement.is_empty() {
        return Ok(steps.iter().map(|s| (s.role, s.state)).collect());
    }
    let mut changed: Vec<&str> = Vec::new();
    let mut states: Vec<&str> = Vec::new();
    for step in &settlement.cancel {
        changed.push(step);
        states.push(StepState::Cancelled.as_str());
    }
    for step in &settlement.compensated {
        changed.push(step);
        states.push(StepState::Compensated.as_str());
    }
    for c in &settlement.start {
        changed.push(&c.of);
        states.push(StepState::Compensating.as_str());
    }
    sqlx::query(
        "UPDATE steps s SET state = t.st, ready_at = NULL
         FROM UNNEST($2::TEXT[], $3::TEXT[]) AS t(step, st)
         WHERE s.workflow_id = $1 AND s.step = t.step",
    )
    .bind(id.as_str())
    .bind(&changed)
    .bind(&states)
    .execute(&mut *conn)
    .await?;
    for c in &settlement.start {
        let ready = c.after.is_empty();
        let state = if ready {
            StepState::Ready
        } else {
            StepState::Pending
        };
        sqlx::query(
            "INSERT INTO steps (workflow_id, step, state, ready_at, role, next_trigger)
             VALUES ($1, $2, $3, $4, 'compensation', 'compensation')",
        )
        .bind(id.as_str())
        .bind(&c.id)
        .bind(state.as_str())
        .bind(ready.then_some(now as i64))
        .execute(&mut *conn)
        .await?;
        if !c.after.is_empty() {
            sqlx::query(
                "INSERT INTO step_deps (workflow_id, step, depends_on)
                 SELECT $1, $2, d FROM UNNEST($3::TEXT[]) AS d",
            )
            .bind(id.as_str())
            .bind(&c.id)
            .bind(&c.after)
            .execute(&mut *conn)
            .await?;
        }
    }
    append_events(conn, id, now, &settlement.events).await?;
    Ok(plan::settled(&steps, &settlement))
}

/// Every statement of a claim or a batch of finishes reaches its rows by key. Without
/// statistics (autovacuum first analyzes a new database after a minute or more) the
/// planner prefers scanning whole tables, and keeps to it as they grow: not for the rest
/// of this transaction.
pub(crate) async fn no_table_scans(conn: &mut PgConnection) -> PgResult<()> {
    sqlx::query("SET LOCAL enable_seqscan = off")
        .execute(&mut *conn)
        .await?;
    Ok(())
}

async fn claim_tx(conn: &mut PgConnection, req: &ClaimRequest) -> PgResult<Vec<Claimed>> {
    no_table_scans(conn).await?;
    let expires = req.now + req.lease_ms;
    // SKIP LOCKED: a step another claimer is taking is left to it, without waiting.
    let rows = sqlx::query(
        "WITH picked AS (
             SELECT workflow_id, step FROM steps
             WHERE state IN ('ready', 'failed_retryable') AND ready_at <= $3
             ORDER BY ready_at, ord LIMIT $4
             FOR UPDATE SKIP LOCKED)
         UPDATE steps s SET state = 'running', attempts = s.attempts + 1, lease_owner = $1,
             lease_token = replace(gen_random_uuid()::text, '-', ''), lease_expires_at = $2,
             note = NULL
         FROM picked WHERE s.workflow_id = picked.workflow_id AND s.step = picked.step
         RETURNING s.workflow_id, s.step, s.attempts, s.next_trigger, s.uncertain_since,
                   s.policy_exception, s.reads,
                   s.lease_token, s.ready_at, s.ord",
    )
    .bind(&req.owner)
    .bind(expires as i64)
    .bind(req.now as i64)
    .bind(req.limit as i64)
    .fetch_all(&mut *conn)
    .await?;
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    // Workflow rows are locked in id order, so concurrent claims never wait in a cycle.
    let mut picked = rows
        .iter()
        .map(|r| {
            Ok((
                r.text("workflow_id")?,
                r.int("ord")?,
                rows::claimed(r, req.now, expires)?,
                plan::reads_list(r.opt_text("reads")?.as_deref())?,
            ))
        })
        .collect::<StoreResult<Vec<_>>>()?;
    picked.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
    let (mut claimed, reads): (Vec<Claimed>, Vec<Option<Vec<String>>>) =
        picked.into_iter().map(|(_, _, c, r)| (c, r)).unzip();
    // Each claim is one attempt and one timeline entry, which its workflow counts. The
    // workflows of the batch are locked in id order first (one row needs no order), so
    // concurrent claims never wait in a cycle; then one statement counts for all of them
    // and one reads their receipts. Statements over arrays are planned at every run (see
    // `batch`: a plan kept from a small table scans it whole once it has grown).
    let mut counts: Vec<(String, i64)> = Vec::new();
    for c in &claimed {
        match counts.last_mut() {
            Some((id, n)) if id == c.fence.workflow_id.as_str() => *n += 1,
            _ => counts.push((c.fence.workflow_id.as_str().to_string(), 1)),
        }
    }
    let (workflow_ids, per_workflow): (Vec<String>, Vec<i64>) = counts.into_iter().unzip();
    if workflow_ids.len() > 1 {
        sqlx::query(
            "SELECT 1 FROM workflows WHERE workflow_id = ANY($1) ORDER BY workflow_id FOR UPDATE",
        )
        .persistent(false)
        .bind(&workflow_ids)
        .execute(&mut *conn)
        .await?;
    }
    let counted = sqlx::query(
        "UPDATE workflows w SET attempts_used = w.attempts_used + c.n, next_seq = w.next_seq + c.n
         FROM UNNEST($1::TEXT[], $2::BIGINT[]) AS c(id, n)
         WHERE w.workflow_id = c.id
         RETURNING w.workflow_id, w.workflow, w.subject, w.definition_version, w.deadline_at,
                   w.attempts_used - c.n AS attempts_before, w.external_calls_used,
                   w.runtime_used_ms, w.cost_used, w.recovery_queries_used, w.budget_added,
                   w.next_seq - c.n AS first_seq, w.input, w.trace_parent",
    )
    .persistent(false)
    .bind(&workflow_ids)
    .bind(&per_workflow)
    .fetch_all(&mut *conn)
    .await?;
    let mut receipts: HashMap<String, Vec<Receipt>> = HashMap::new();
    for r in sqlx::query(
        "SELECT * FROM receipts WHERE workflow_id = ANY($1) AND superseded_by IS NULL
         ORDER BY recorded_at, receipt_id COLLATE \"C\"",
    )
    .persistent(false)
    .bind(&workflow_ids)
    .fetch_all(&mut *conn)
    .await?
    {
        let receipt = rows::receipt(&r)?;
        receipts
            .entry(receipt.workflow_id.as_str().to_string())
            .or_default()
            .push(receipt);
    }
    // Per workflow: its row, its input, and how many of its claims are numbered so far.
    let mut workflows: HashMap<String, (sqlx::postgres::PgRow, serde_json::Value, i64)> =
        HashMap::new();
    for r in counted {
        let input = r.json("input")?;
        workflows.insert(r.text("workflow_id")?, (r, input, 0));
    }
    let mut seqs = Vec::with_capacity(claimed.len());
    for (c, reads) in claimed.iter_mut().zip(reads) {
        let (r, input, taken) =
            workflows
                .get_mut(c.fence.workflow_id.as_str())
                .ok_or_else(|| {
                    StoreError::Corrupt(format!("workflow {} vanished", c.fence.workflow_id))
                })?;
        c.workflow = r.text("workflow")?;
        c.subject = crate::intent::Subject(r.text("subject")?);
        c.definition_version = r.small("definition_version")?;
        c.deadline_at = r.uint("deadline_at")?;
        c.attempts_used = fits("attempts_used", r.int("attempts_before")? + *taken + 1)?;
        c.external_calls_used = r.small("external_calls_used")?;
        c.runtime_used_ms = r.uint("runtime_used_ms")?;
        c.cost_used = r.uint("cost_used")?;
        c.recovery_queries_used = r.small("recovery_queries_used")?;
        c.trace_parent = r.opt_text("trace_parent")?;
        c.budget_added = rows::budget_added(r.opt_text("budget_added")?)?;
        seqs.push(r.int("first_seq")? + *taken);
        *taken += 1;
        // Only an uncertain step needs it; read before this claim's attempt row exists.
        let sent_identity: Option<String> = match c.uncertain_since {
            Some(_) => {
                sqlx::query_scalar(
                    "SELECT request_identity FROM attempts
                     WHERE workflow_id = $1 AND step = $2 AND checkpoint >= 3 AND request_identity IS NOT NULL
                     ORDER BY number DESC LIMIT 1",
                )
                .bind(c.fence.workflow_id.as_str())
                .bind(&c.fence.step)
                .fetch_optional(&mut *conn)
                .await?
            }
            None => None,
        };
        c.context = StepContext {
            input: input.clone(),
            // Only what the step's input reads, as the embedded store hands it.
            receipts: receipts
                .get(c.fence.workflow_id.as_str())
                .map(|all| match &reads {
                    Some(steps) => all
                        .iter()
                        .filter(|r| steps.contains(&r.step))
                        .cloned()
                        .collect(),
                    None => all.clone(),
                })
                .unwrap_or_default(),
            sent_identity,
        };
    }
    let ids: Vec<&str> = claimed.iter().map(|c| c.attempt_id.as_str()).collect();
    let workflows: Vec<&str> = claimed
        .iter()
        .map(|c| c.fence.workflow_id.as_str())
        .collect();
    let steps: Vec<&str> = claimed.iter().map(|c| c.fence.step.as_str()).collect();
    let numbers: Vec<i64> = claimed.iter().map(|c| c.attempt_number as i64).collect();
    let triggers: Vec<&str> = claimed.iter().map(|c| c.trigger.as_str()).collect();
    let texts: Vec<String> = claimed
        .iter()
        .map(|c| {
            format!(
                "Attempt {} started ({}) by {}",
                c.attempt_number, c.trigger, req.owner
            )
        })
        .collect();
    sqlx::query(
        "INSERT INTO attempts (attempt_id, workflow_id, step, number, trigger, lease_owner,
             checkpoint, outcome, started_at)
         SELECT a, w, s, n, t, $6, 1, 'in_progress', $7
         FROM UNNEST($1::TEXT[], $2::TEXT[], $3::TEXT[], $4::BIGINT[], $5::TEXT[]) AS x(a, w, s, n, t)",
    )
    .bind(&ids)
    .bind(&workflows)
    .bind(&steps)
    .bind(&numbers)
    .bind(&triggers)
    .bind(&req.owner)
    .bind(req.now as i64)
    .execute(&mut *conn)
    .await?;
    sqlx::query(
        "INSERT INTO timeline (workflow_id, seq, at, kind, step, attempt_id, text, data)
         SELECT w, q, $6, 'action', s, a, t, 'null'
         FROM UNNEST($1::TEXT[], $2::BIGINT[], $3::TEXT[], $4::TEXT[], $5::TEXT[]) AS x(w, q, s, a, t)",
    )
    .bind(&workflows)
    .bind(&seqs)
    .bind(&steps)
    .bind(&ids)
    .bind(&texts)
    .bind(req.now as i64)
    .execute(&mut *conn)
    .await?;
    Ok(claimed)
}

/// Notes on the workflow the policy version an attempt was judged by.
pub(super) async fn note_policy(
    conn: &mut PgConnection,
    fence: &Fence,
    facts: &crate::store::AttemptFacts,
) -> PgResult<()> {
    if let Some(p) = &facts.policy {
        sqlx::query(
            "UPDATE workflows SET policy_current = GREATEST(policy_current, $1) WHERE workflow_id = $2",
        )
        .bind(i64::from(p.version))
        .bind(fence.workflow_id.as_str())
        .execute(&mut *conn)
        .await?;
        // An exception the attempt went through is used up.
        if p.decision == crate::store::PolicyVerdict::Exception {
            sqlx::query(
                "UPDATE steps SET policy_exception = NULL WHERE workflow_id = $1 AND step = $2",
            )
            .bind(fence.workflow_id.as_str())
            .bind(&fence.step)
            .execute(&mut *conn)
            .await?;
        }
    }
    Ok(())
}

async fn checkpoint_tx(conn: &mut PgConnection, req: CheckpointRequest) -> PgResult<()> {
    // The fence and the facts in one round trip: the step row is locked until commit (so
    // recovery cannot take the lease over in between), and the facts are written only
    // under the lease.
    let query = sqlx::query(sqlx::AssertSqlSafe(format!(
        "WITH held AS (
             SELECT 1 FROM steps WHERE workflow_id = $14 AND step = $15 AND lease_token = $16
               AND state = 'running' FOR UPDATE),
         applied AS ({APPLY_FACTS} AND EXISTS (SELECT 1 FROM held) RETURNING 1)
         SELECT (SELECT count(*) FROM held) AS held"
    )));
    let result = plan::result_text(&req.facts)?;
    let policy = plan::policy_text(&req.facts)?;
    let values = plan::facts_params(
        &req.attempt_id,
        req.checkpoint,
        &req.facts,
        None,
        None,
        result.as_deref(),
        policy.as_deref(),
    );
    let held: i64 = bind_facts(query, values)
        .bind(req.fence.workflow_id.as_str())
        .bind(&req.fence.step)
        .bind(&req.fence.lease_token)
        .fetch_one(&mut *conn)
        .await?
        .int("held")?;
    if held == 0 {
        return Err(lease_lost(&req.fence).into());
    }
    note_policy(conn, &req.fence, &req.facts).await?;
    if req.external_call.is_some()
        || course::fenced_by_cancellation(req.checkpoint, &req.fence.step)
    {
        // Locks the workflow row, so a cancellation commits either before (and fences this
        // checkpoint, the transaction rolled back) or after (and sees it).
        let cancel_on: Option<String> = sqlx::query_scalar(
            "UPDATE workflows SET external_calls_used = external_calls_used + $2,
                 cost_used = cost_used + $3
             WHERE workflow_id = $1 RETURNING cancel_on",
        )
        .bind(req.fence.workflow_id.as_str())
        .bind(i64::from(req.external_call.is_some()))
        .bind(i64::from(req.external_call.unwrap_or(0)))
        .fetch_one(&mut *conn)
        .await?;
        if cancel_on.is_some() && course::fenced_by_cancellation(req.checkpoint, &req.fence.step) {
            return Err(StoreError::Cancelled {
                workflow_id: req.fence.workflow_id.clone(),
            }
            .into());
        }
    }
    if req.checkpoint == 3 {
        // The input the attempt recorded at checkpoint 2 against the step's: the first
        // request's digest is kept, and another is refused (the transaction rolls back).
        let (step, attempt): (Option<String>, Option<String>) = sqlx::query_as(
            "WITH a AS (SELECT input_digest FROM attempts WHERE attempt_id = $3),
                  before AS (SELECT input_digest FROM steps WHERE workflow_id = $1 AND step = $2),
                  kept AS (UPDATE steps SET input_digest = (SELECT input_digest FROM a)
                           WHERE workflow_id = $1 AND step = $2 AND input_digest IS NULL)
             SELECT (SELECT input_digest FROM before), (SELECT input_digest FROM a)",
        )
        .bind(req.fence.workflow_id.as_str())
        .bind(&req.fence.step)
        .bind(req.attempt_id.as_str())
        .fetch_one(&mut *conn)
        .await?;
        if let (Some(step), Some(attempt)) = (step, attempt)
            && step != attempt
        {
            return Err(StoreError::InputChanged { step, attempt }.into());
        }
    }
    append_events(conn, &req.fence.workflow_id, req.now, &req.events).await
}

/// Records a receipt (see [`plan::receipt_params`]).
pub(crate) async fn insert_receipt(
    conn: &mut PgConnection,
    values: &[plan::Param<'_>],
) -> PgResult<()> {
    let placeholders: Vec<String> = (1..=values.len()).map(|i| format!("${i}")).collect();
    let sql = format!(
        "INSERT INTO receipts ({}) VALUES ({})",
        plan::RECEIPT_INSERT_COLUMNS,
        placeholders.join(", ")
    );
    let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
    for value in values {
        query = bind(query, *value);
    }
    query.execute(&mut *conn).await?;
    Ok(())
}

/// Makes ready every pending step of the workflow whose dependencies have all succeeded,
/// in definition order. The caller holds the workflow row's lock.
pub(crate) async fn release_dependents(
    conn: &mut PgConnection,
    id: &WorkflowId,
    now: Millis,
) -> PgResult<Vec<String>> {
    Ok(sqlx::query_scalar(
        "WITH released AS (
             UPDATE steps SET state = 'ready', ready_at = $1
             WHERE workflow_id = $2 AND state = 'pending' AND NOT EXISTS (
                 SELECT 1 FROM step_deps d JOIN steps s2
                   ON s2.workflow_id = d.workflow_id AND s2.step = d.depends_on
                 WHERE d.workflow_id = steps.workflow_id AND d.step = steps.step
                   AND s2.state <> 'succeeded')
             RETURNING step, ord)
         SELECT step FROM released ORDER BY ord",
    )
    .bind(now as i64)
    .bind(id.as_str())
    .fetch_all(&mut *conn)
    .await?)
}

impl ExecutorStore for PgStore {
    async fn claim(&self, req: ClaimRequest) -> StoreResult<Vec<Claimed>> {
        transaction!(self.pool, |conn| claim_tx(conn, &req))
    }

    async fn renew(&self, req: RenewRequest) -> StoreResult<()> {
        self.write(req, |tx, req| Box::pin(leases::renew(tx, req)))
            .await
    }

    async fn checkpoint(&self, req: CheckpointRequest) -> StoreResult<()> {
        transaction!(self.pool, |conn| checkpoint_tx(conn, req.clone()))
    }

    async fn finish(&self, req: FinishRequest) -> StoreResult<FinishOutcome> {
        let retry = matches!(req.transition, StepTransition::Retry { .. });
        let outcome = self.finishes.finish(req).await?;
        // Released dependents and scheduled retries concern every host: a retry's time may
        // be earlier than what an idle host is sleeping towards.
        if retry || !outcome.released.is_empty() {
            self.notifier.poke();
        }
        Ok(outcome)
    }

    async fn late_evidence(&self, late: LateEvidence) -> StoreResult<()> {
        self.write(late, |tx, late| {
            Box::pin(crate::store::late::evidence(tx, late))
        })
        .await
    }

    async fn release_leases(&self, owner: &str, now: Millis) -> StoreResult<u64> {
        let done = self
            .write((owner.to_string(), now), |tx, a| {
                Box::pin(leases::release(tx, a))
            })
            .await?;
        // The other hosts recover these at once rather than at their next poll; sent
        // directly, as a stopping host's notifier task may not get to run.
        if done > 0 {
            sqlx::query("SELECT pg_notify($1, '')")
                .bind(super::WORK_CHANNEL)
                .execute(&self.pool)
                .await?;
        }
        Ok(done)
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

    async fn watch(&self, wake: std::sync::Arc<tokio::sync::Notify>) -> StoreResult<bool> {
        let mut listener = sqlx::postgres::PgListener::connect_with(&self.pool).await?;
        listener.listen(super::WORK_CHANNEL).await?;
        tokio::spawn(async move {
            loop {
                match listener.recv().await {
                    Ok(_) => wake.notify_one(),
                    // The store was closed: stop, and give the connection back.
                    Err(sqlx::Error::PoolClosed) => break,
                    // The listener reconnects on the next `recv`; what was sent meanwhile is
                    // lost, so wake once to look for it (the poll would find it too, later).
                    Err(e) => {
                        tracing::warn!(
                            "listening for work on PostgreSQL failed: {e}; reconnecting"
                        );
                        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                        wake.notify_one();
                    }
                }
            }
        });
        Ok(true)
    }

    async fn expired_leases(&self, now: Millis, limit: u32) -> StoreResult<Vec<ExpiredLease>> {
        use crate::store::reads::SharedReads;
        SharedReads::expired_leases(&self.pool, &super::read::SQL, now, limit).await
    }
}
