//! PostgreSQL's claim (many hosts claim at once, each skipping the rows another holds),
//! and the statements over arrays a batch of finishes writes its workflows' changes with.

use super::PgResult;
use super::tx::PgTx;
use crate::intent::{Millis, NewEvent, Receipt, WorkflowId};
use crate::store::claims::{ClaimPlan, Pick};
use crate::store::fairness::{self, FairShare, ReadySubject};
use crate::store::gates;
use crate::store::metrics::Tallies;
use crate::store::plan;
use crate::store::rows::{self, Columns, fits};
use crate::store::{ClaimRequest, Claimed, StepContext, StoreError, StoreResult};
use sqlx::postgres::{PgConnection, PgRow};
use std::collections::HashMap;

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

/// Binds one planned value.
pub(crate) fn bind<'q>(query: PgQuery<'q>, value: plan::Param<'q>) -> PgQuery<'q> {
    match value {
        plan::Param::Text(t) => query.bind(t),
        plan::Param::Int(i) => query.bind(i),
        plan::Param::Flag(b) => query.bind(b),
        plan::Param::Bytes(b) => query.bind(b),
    }
}

/// A workflow's change of state, planned from its steps read under its lock.
pub(crate) struct Planned<'a> {
    pub id: &'a WorkflowId,
    pub change: crate::store::executor::plan::StateChange,
    pub now: Millis,
}

/// Writes the planned state changes of many locked workflows — what
/// [`crate::store::executor::recompute_state_tallying`] writes for one: the state, the key's retention, the
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
             UPDATE workflows SET state = c.c_state, ended_at = c.c_ended,
                 next_seq = workflows.next_seq + 1
             FROM c WHERE workflows.workflow_id = c.c_id
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
            told.push(crate::store::notifications::plan::notification(
                &record, event, p.now,
            ));
        }
        if p.change.next.is_ended() {
            ends.end(&record, p.change.next, p.now);
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
            crate::store::notifications::plan::OUTBOX_INSERT
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

/// Adds ended workflows to the tallies (see [`crate::metrics`]) in shard `shard`, in one
/// statement and in key order, so that two transactions adding to the same rows never
/// wait for each other in a cycle.
pub(crate) async fn add_tallies(
    conn: &mut PgConnection,
    tallies: &Tallies,
    shard: i32,
) -> PgResult<()> {
    if tallies.is_empty() {
        return Ok(());
    }
    let n = tallies.len();
    let (mut metric, mut workflow, mut state) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    let (mut bucket, mut count, mut total) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    for (m, w, s, b, c, t) in tallies.rows() {
        metric.push(m);
        workflow.push(w);
        state.push(s);
        bucket.push(b as i32);
        count.push(c);
        total.push(t);
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
    .bind(&count)
    .bind(&total)
    .bind(shard)
    .execute(&mut *conn)
    .await?;
    Ok(())
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

/// The statement of one [`Pick`]: leases up to `$4` ready steps, of one adapter or one
/// subject (`$5`) when named, never of the excluded adapters (the last parameter), the
/// longest-waiting first. SKIP LOCKED: a step another claimer is taking is left to it,
/// without waiting.
fn pick_sql(pick: &Pick, excluding: bool) -> String {
    let filter = pick.filter(
        excluding,
        5,
        |n| format!("${n}"),
        |list| format!("adapter <> ALL({list}::TEXT[])"),
    );
    format!(
        "WITH picked AS (
             SELECT workflow_id, step FROM steps
             WHERE state IN ('ready', 'failed_retryable') AND ready_at <= $3{filter}
             ORDER BY ready_at, ord LIMIT $4
             FOR UPDATE SKIP LOCKED)
         UPDATE steps s SET state = 'running', attempts = s.attempts + 1, lease_owner = $1,
             lease_token = replace(gen_random_uuid()::text, '-', ''), lease_expires_at = $2,
             note = NULL
         FROM picked WHERE s.workflow_id = picked.workflow_id AND s.step = picked.step
         RETURNING s.workflow_id, s.step, s.attempts, s.next_trigger, s.uncertain_since,
                   s.key_remembered_until, s.policy_exception, s.reads, s.key_step, s.item,
                   s.adapter, s.lease_token, s.ready_at, s.ord"
    )
}

/// Runs one pick of a claim.
async fn pick(
    conn: &mut PgConnection,
    req: &ClaimRequest,
    pick: &Pick,
    excluded: &[String],
) -> PgResult<Vec<PgRow>> {
    // Each kind of pick, with and without excluded adapters: six statements, written once.
    static PICKS: std::sync::LazyLock<Vec<String>> = std::sync::LazyLock::new(|| {
        let mut all = Vec::new();
        for (adapter, subject) in [
            (None, None),
            (Some(String::new()), None),
            (None, Some(String::new())),
        ] {
            for excluding in [false, true] {
                let p = Pick {
                    adapter: adapter.clone(),
                    subject: subject.clone(),
                    n: 0,
                };
                all.push(pick_sql(&p, excluding));
            }
        }
        all
    });
    let kind = if pick.adapter.is_some() {
        1
    } else if pick.subject.is_some() {
        2
    } else {
        0
    };
    let sql: &'static str = PICKS[kind * 2 + usize::from(!excluded.is_empty())].as_str();
    let mut query = sqlx::query(sql)
        .bind(&req.owner)
        .bind((req.now + req.lease_ms) as i64)
        .bind(req.now as i64)
        .bind(pick.n as i64);
    if let Some(named) = pick.adapter.as_ref().or(pick.subject.as_ref()) {
        query = query.bind(named);
    }
    if !excluded.is_empty() && pick.adapter.is_none() {
        query = query.bind(excluded);
    }
    Ok(query.fetch_all(&mut *conn).await?)
}

/// Claims up to `req.limit` ready steps as [`ClaimPlan`] shares them: gated adapters
/// within their room, then the subjects by `fair`, the longest-waiting first within each.
pub(super) async fn claim_tx(
    conn: &mut PgConnection,
    req: &ClaimRequest,
    fair: &FairShare,
) -> PgResult<Vec<Claimed>> {
    no_table_scans(conn).await?;
    let expires = req.now + req.lease_ms;
    let rooms = {
        let mut tx = PgTx::on(conn);
        let rooms = gates::rooms(&mut tx, req).await;
        tx.outcome(rooms)?
    };
    let ready: Vec<ReadySubject> = sqlx::query(fairness::READY_SUBJECTS)
        .bind(req.now as i64)
        .bind(fairness::SUBJECTS_PER_CLAIM)
        .fetch_all(&mut *conn)
        .await?
        .iter()
        .map(|r| {
            Ok(ReadySubject {
                subject: r.text("subject")?,
                oldest: r.int("oldest")?,
            })
        })
        .collect::<StoreResult<_>>()?;
    let mut plan = ClaimPlan::new(fair, ready, rooms, req.limit as usize);
    let excluded = plan.excluded().to_vec();
    let mut rows = Vec::new();
    while let Some(p) = plan.next() {
        // A step leased by an earlier pick is `running` now, so not taken twice.
        let taken = pick(conn, req, &p, &excluded).await?;
        plan.took(&p, taken.len());
        rows.extend(taken);
    }
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
                   w.next_seq - c.n AS first_seq,
                   (SELECT i.input FROM workflow_inputs i WHERE i.workflow_id = w.workflow_id)
                       AS input,
                   w.input_revision, w.trace_parent,
                   w.environment",
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
    let mut workflows: HashMap<
        String,
        (
            sqlx::postgres::PgRow,
            std::sync::Arc<serde_json::Value>,
            i64,
        ),
    > = HashMap::new();
    for r in counted {
        let input = std::sync::Arc::new(r.json("input")?);
        workflows.insert(r.text("workflow_id")?, (r, input, 0));
    }
    let mut seqs = Vec::with_capacity(claimed.len());
    let mut revisions: Vec<i64> = Vec::with_capacity(claimed.len());
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
        c.environment = r.opt_text("environment")?;
        c.budget_added = rows::budget_added(r.opt_text("budget_added")?)?;
        seqs.push(r.int("first_seq")? + *taken);
        revisions.push(r.int("input_revision")?);
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
             checkpoint, outcome, started_at, input_revision)
         SELECT a, w, s, n, t, $6, 1, 'in_progress', $7, v
         FROM UNNEST($1::TEXT[], $2::TEXT[], $3::TEXT[], $4::BIGINT[], $5::TEXT[], $8::BIGINT[])
              AS x(a, w, s, n, t, v)",
    )
    .bind(&ids)
    .bind(&workflows)
    .bind(&steps)
    .bind(&numbers)
    .bind(&triggers)
    .bind(&req.owner)
    .bind(req.now as i64)
    .bind(&revisions)
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
