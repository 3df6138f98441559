//! Finishes of many steps in one PostgreSQL transaction, in a handful of statements.
//!
//! Every statement is a round trip to another process and every commit an fsync, so a
//! finish on its own (some eight statements and a commit) costs the host and the database
//! far more than the work it records. A host's finishes go through one queue instead: a
//! writer takes what has queued up and records it all in one transaction of multi-row
//! statements — the fenced step transitions with the attempts' facts, the workflows' locks
//! in id order, the receipts with the release of their dependents, the counters with the
//! timeline, the steps' states. What is rare (a policy decision to note, a workflow whose
//! state changes, a compensation done) runs per finish inside the same transaction.
//!
//! These statements are planned at every run (not kept prepared): a plan kept from when
//! the tables were small (a fresh database, before autovacuum first analyzes it) scans
//! whole tables, while a fresh plan sees how many rows each array holds and how large the
//! tables are now. Planning costs a fraction of a millisecond per batch.
//!
//! A batch holds at most one finish per workflow, so each workflow's story reads as if
//! its finishes ran one after another; a second one waits for the next batch.
//!
//! A finish whose fence fails writes nothing and hears `LeaseLost`; the batch goes on. A
//! batch that fails otherwise rolled back whole, so each of its finishes runs again in a
//! transaction of its own and only the one at fault fails. A commit whose answer was lost
//! is reported to every finish of the batch: it may have committed.

use super::executor::{self, PgQuery};
use super::gather::Gather;
use super::tx::PgTx;
use super::{PgResult, transaction};
use crate::course;
use crate::intent::{NewEvent, StepRole, StepState, WorkflowState};
use crate::store::executor as shared;
use crate::store::metrics::{TALLY_SHARDS, Tallies};
use crate::store::plan::Param;
use crate::store::rows::{Columns, parse};
use crate::store::{FinishOutcome, FinishRequest, Retry, StepTransition, StoreError, StoreResult};
use sqlx::PgPool;
use sqlx::postgres::PgConnection;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use tokio::sync::{Mutex, mpsc, oneshot};

/// Most finishes in one transaction; bounds what one commit adds to the first one's wait.
const MAX_BATCH: usize = 256;

/// Batches in flight at once: one is being written while the next gathers and is sent.
const WRITERS: usize = 2;

struct Job {
    req: FinishRequest,
    reply: oneshot::Sender<StoreResult<FinishOutcome>>,
}

/// The queue of a host's finishes (see the module's documentation). Cheap to clone; the
/// writers stop when the last clone is dropped.
#[derive(Clone)]
pub(crate) struct Finishes {
    queue: mpsc::Sender<Job>,
}

impl Finishes {
    pub(crate) fn start(pool: PgPool) -> Self {
        let (queue, jobs) = mpsc::channel(4 * MAX_BATCH);
        let jobs = Arc::new(Mutex::new(jobs));
        for _ in 0..WRITERS {
            // Each writer adds its workflows' ends to a shard of the tallies of its own
            // (chosen at random: other hosts' writers have theirs), so that concurrent
            // batches rarely wait on one tally row.
            let shard = {
                use std::hash::BuildHasher;
                std::hash::RandomState::new().hash_one(0u8) % TALLY_SHARDS
            } as i32;
            tokio::spawn(write(pool.clone(), jobs.clone(), shard));
        }
        Self { queue }
    }

    /// Records `req` with whatever else is waiting; answers once the batch committed.
    pub(crate) async fn finish(&self, req: FinishRequest) -> StoreResult<FinishOutcome> {
        let (reply, answer) = oneshot::channel();
        self.queue
            .send(Job { req, reply })
            .await
            .map_err(|_| StoreError::safe("the store is closed"))?;
        answer
            .await
            .map_err(|_| StoreError::unknown("the finish's writer stopped before it answered"))?
    }
}

/// One writer: takes a batch (held-over finishes first), writes it, and again.
async fn write(pool: PgPool, jobs: Arc<Mutex<mpsc::Receiver<Job>>>, shard: i32) {
    let mut gather = Gather::new(jobs);
    loop {
        let mut workflows: HashSet<String> = HashSet::new();
        let fits = |job: &Job| workflows.insert(job.req.fence.workflow_id.as_str().to_string());
        let Some(batch) = gather.next(MAX_BATCH, fits).await else {
            return;
        };
        write_batch(&pool, batch, shard).await;
    }
}

async fn write_batch(pool: &PgPool, batch: Vec<Job>, shard: i32) {
    let (reqs, replies): (Vec<FinishRequest>, Vec<_>) =
        batch.into_iter().map(|j| (j.req, j.reply)).unzip();
    match transaction!(pool, |conn| finish_batch_tx(conn, &reqs, shard)) {
        Ok(outcomes) => {
            for (reply, outcome) in replies.into_iter().zip(outcomes) {
                let _ = reply.send(outcome);
            }
        }
        Err(e)
            if reqs.len() == 1
                || matches!(
                    e,
                    StoreError::Backend {
                        retry: Retry::Unknown,
                        ..
                    }
                ) =>
        {
            for reply in replies {
                let _ = reply.send(Err(e.clone()));
            }
        }
        Err(e) => {
            tracing::debug!(
                "a batch of {} finishes failed ({e}); writing each alone",
                reqs.len()
            );
            for (req, reply) in reqs.into_iter().zip(replies) {
                let alone = transaction!(pool, |conn| finish_batch_tx(
                    conn,
                    std::slice::from_ref(&req),
                    shard
                ));
                let _ = reply.send(alone.and_then(|mut o| {
                    o.pop().unwrap_or_else(|| {
                        Err(StoreError::never("a finish written alone gave no answer"))
                    })
                }));
            }
        }
    }
}

/// What a finish's statements bind that the request holds only as values.
struct Texts {
    log: String,
    result: Option<String>,
    policy: Option<String>,
    blocked: Option<String>,
    output: Option<String>,
}

impl Texts {
    fn of(req: &FinishRequest) -> StoreResult<Self> {
        Ok(Self {
            log: req.log.to_string(),
            result: crate::store::executor::plan::result_text(&req.facts)?,
            policy: crate::store::executor::plan::policy_text(&req.facts)?,
            blocked: crate::store::executor::plan::blocked_text(req.blocked.as_ref())?,
            output: match &req.transition {
                StepTransition::Succeeded(r) => Some(r.output.to_string()),
                _ => None,
            },
        })
    }
}

/// Records every finish of `reqs` (at most one per workflow, see [`write`]); the answer of
/// each is its outcome, or `LeaseLost` when its fence failed and it wrote nothing.
pub(crate) async fn finish_batch_tx(
    conn: &mut PgConnection,
    reqs: &[FinishRequest],
    shard: i32,
) -> PgResult<Vec<StoreResult<FinishOutcome>>> {
    let texts = reqs
        .iter()
        .map(Texts::of)
        .collect::<StoreResult<Vec<_>>>()?;
    executor::no_table_scans(conn).await?;
    let moved = fence(conn, reqs, &texts).await?;
    let done: Vec<usize> = (0..reqs.len()).filter(|&i| moved[i]).collect();
    if done.is_empty() {
        return Ok(reqs.iter().map(|r| Err(r.fence.lost())).collect());
    }
    let id = |i: usize| reqs[i].fence.workflow_id.as_str();

    // The workflows' rows, locked in id order as claims lock them (steps first, then
    // workflows), so that no two transactions wait for each other in a cycle; from here
    // on every step change of these workflows committed by others is visible.
    let mut ids: Vec<&str> = done.iter().map(|&i| id(i)).collect();
    ids.sort_unstable();
    ids.dedup();
    let mut current: HashMap<String, (WorkflowState, bool)> = HashMap::new();
    for r in sqlx::query(
        "SELECT workflow_id, state, cancel_on FROM workflows
         WHERE workflow_id = ANY($1) ORDER BY workflow_id FOR UPDATE",
    )
    .persistent(false)
    .bind(&ids)
    .fetch_all(&mut *conn)
    .await?
    {
        let state = parse::<WorkflowState>(&r.text("state")?)?;
        current.insert(
            r.text("workflow_id")?,
            (state, r.opt_text("cancel_on")?.is_some()),
        );
    }
    for &i in &done {
        let mut tx = PgTx::on(conn);
        let noted = shared::note_policy(&mut tx, &reqs[i].fence, &reqs[i].facts).await;
        tx.outcome(noted)?;
    }

    let released = receipts_and_release(conn, reqs, &texts, &done).await?;

    // Which finish tells of each workflow's released steps: its last success here.
    let mut teller: HashMap<&str, usize> = HashMap::new();
    for &i in &done {
        if matches!(reqs[i].transition, StepTransition::Succeeded(_)) {
            teller.insert(id(i), i);
        }
    }
    let mut events: Vec<Vec<NewEvent>> = vec![Vec::new(); reqs.len()];
    for &i in &done {
        events[i] = reqs[i].events.clone();
        if teller.get(id(i)) == Some(&i) {
            events[i].extend(NewEvent::released(
                released.get(id(i)).map_or(&[][..], Vec::as_slice),
            ));
        }
    }
    counters_and_timeline(conn, reqs, &done, &events).await?;

    // An item's end moves its batch step: the next items released, the step judged (each
    // as alone; a batch holds one finish per workflow).
    let mut items_released: Vec<Vec<String>> = vec![Vec::new(); reqs.len()];
    let mut batch_moved: HashSet<&str> = HashSet::new();
    for &i in &done {
        if let Some((step, _)) = crate::workflow::item_of(&reqs[i].fence.step) {
            let mut tx = PgTx::on(conn);
            let settled = crate::store::batches::settle(
                &mut tx,
                &reqs[i].fence.workflow_id,
                step,
                reqs[i].now,
            )
            .await;
            let settled = tx.outcome(settled)?;
            if settled.moved.is_some() {
                batch_moved.insert(id(i));
            }
            items_released[i] = settled.released;
        }
    }

    // Each workflow's state from its steps: most finishes change nothing, and only those
    // that settle a course or change a state run the full recomputation.
    let mut steps: HashMap<String, Vec<(Option<StepRole>, StepState)>> = HashMap::new();
    // A batch step's items are judged through their step.
    for r in sqlx::query(
        "SELECT workflow_id, role, state FROM steps
         WHERE workflow_id = ANY($1) AND batch_of IS NULL",
    )
    .persistent(false)
    .bind(&ids)
    .fetch_all(&mut *conn)
    .await?
    {
        let role = r
            .opt_text("role")?
            .map(|t| parse::<StepRole>(&t))
            .transpose()?;
        steps
            .entry(r.text("workflow_id")?)
            .or_default()
            .push((role, parse::<StepState>(&r.text("state")?)?));
    }
    let mut state_of: HashMap<&str, WorkflowState> = HashMap::new();
    let mut ends = Tallies::default();
    let mut planned = Vec::new();
    for &i in &done {
        let wf = id(i);
        if state_of.contains_key(wf) {
            continue;
        }
        let (state, cancelled) = *current
            .get(wf)
            .ok_or_else(|| StoreError::Corrupt(format!("workflow {wf} vanished")))?;
        let now = reqs[i].now;
        let rows = steps.get(wf).map_or(&[][..], Vec::as_slice);
        let next = if batch_moved.contains(wf)
            || course::may_settle(cancelled, rows.iter().map(|(_, s)| s))
        {
            // A course to settle (compensations, a cancellation) first: as alone.
            let mut tx = PgTx::on(conn);
            let next = shared::recompute_state_tallying(
                &mut tx,
                &reqs[i].fence.workflow_id,
                state,
                cancelled,
                now,
                &mut ends,
            )
            .await;
            tx.outcome(next)?
        } else if let Some(change) =
            crate::store::executor::plan::state_change(state, cancelled, rows.iter().copied(), now)
        {
            // Planned from the rows in hand; written with the others' below.
            let next = change.next;
            planned.push(executor::Planned {
                id: &reqs[i].fence.workflow_id,
                change,
                now,
            });
            next
        } else {
            state
        };
        state_of.insert(wf, next);
    }
    executor::apply_state_changes(conn, &planned, &mut ends).await?;
    executor::add_tallies(conn, &ends, shard).await?;
    for &i in &done {
        let r = &reqs[i];
        if crate::store::executor::plan::compensated_now(&r.transition, &r.fence.step) {
            let mut tx = PgTx::on(conn);
            let told = crate::store::notifications::outbox(
                &mut tx,
                &r.fence.workflow_id,
                crate::notify::EventType::EffectCompensated,
                r.now,
            )
            .await;
            tx.outcome(told)?;
        }
    }

    Ok((0..reqs.len())
        .map(|i| {
            if !moved[i] {
                return Err(reqs[i].fence.lost());
            }
            Ok(FinishOutcome {
                workflow_state: state_of[id(i)],
                released: if teller.get(id(i)) == Some(&i) {
                    released.get(id(i)).cloned().unwrap_or_default()
                } else {
                    Vec::new()
                }
                .into_iter()
                .chain(items_released[i].iter().cloned())
                .collect(),
            })
        })
        .collect())
}

/// Moves every step whose lease still holds and records its attempt's facts, in one
/// statement; answers which finishes moved. A step whose lease is gone (or, for recovery,
/// was renewed, or whose attempt went on past the decision) is left as it is.
async fn fence(
    conn: &mut PgConnection,
    reqs: &[FinishRequest],
    texts: &[Texts],
) -> PgResult<Vec<bool>> {
    let n = reqs.len();
    let mut wf = Vec::with_capacity(n);
    let mut step = Vec::with_capacity(n);
    let mut token = Vec::with_capacity(n);
    let mut state = Vec::with_capacity(n);
    let mut ready_at = Vec::with_capacity(n);
    let mut trigger = Vec::with_capacity(n);
    let mut uncertain = Vec::with_capacity(n);
    let mut receipt = Vec::with_capacity(n);
    let mut note = Vec::with_capacity(n);
    let mut blocked = Vec::with_capacity(n);
    let mut expired = Vec::with_capacity(n);
    let mut decided = Vec::with_capacity(n);
    let mut facts = Vec::with_capacity(n);
    for (r, t) in reqs.iter().zip(texts) {
        let c = r.transition.columns();
        wf.push(r.fence.workflow_id.as_str());
        step.push(r.fence.step.as_str());
        token.push(r.fence.lease_token.as_str());
        state.push(c.state.as_str());
        ready_at.push(c.ready_at);
        trigger.push(c.next_trigger);
        uncertain.push(c.uncertain_since);
        receipt.push(c.receipt_id);
        note.push(r.note.as_deref());
        blocked.push(t.blocked.as_deref());
        expired.push(r.expired_before.map(|v| v as i64));
        decided.push(r.decided_at.map(i64::from));
        facts.push(crate::store::executor::plan::facts_params(
            &r.attempt_id,
            r.checkpoint,
            &r.facts,
            Some(r.now),
            Some(&t.log),
            t.result.as_deref(),
            t.policy.as_deref(),
        ));
    }
    let query = sqlx::query(
        "WITH x AS (
             SELECT * FROM UNNEST($1::TEXT[], $2::TEXT[], $3::TEXT[], $4::TEXT[], $5::BIGINT[],
                 $6::TEXT[], $7::BIGINT[], $8::TEXT[], $9::TEXT[], $10::TEXT[], $11::BIGINT[],
                 $12::BIGINT[], $13::BIGINT[], $14::TEXT[], $15::TEXT[], $16::TEXT[], $17::TEXT[],
                 $18::TEXT[], $19::TEXT[], $20::TEXT[], $21::BIGINT[], $22::TEXT[], $23::TEXT[],
                 $24::TEXT[], $25::TEXT[])
             WITH ORDINALITY AS x(wf, step, token, state, ready_at, next_trigger, uncertain_since,
                 receipt_id, note, blocked, expired_before, decided_at, checkpoint, component,
                 component_version, component_digest, input_digest, request_identity,
                 observation, outcome, finished_at, log, result, policy, attempt_id, i)),
         moved AS (
             UPDATE steps s SET state = x.state, ready_at = x.ready_at,
                 next_trigger = COALESCE(x.next_trigger, s.next_trigger),
                 uncertain_since = CASE WHEN x.state = 'succeeded' THEN NULL
                                        ELSE COALESCE(s.uncertain_since, x.uncertain_since) END,
                 receipt_id = COALESCE(x.receipt_id, s.receipt_id), note = x.note,
                 blocked = x.blocked, lease_owner = NULL, lease_token = NULL,
                 lease_expires_at = NULL
             FROM x
             WHERE s.workflow_id = x.wf AND s.step = x.step AND s.lease_token = x.token
               AND s.state = 'running'
               AND (x.expired_before IS NULL OR s.lease_expires_at < x.expired_before)
               AND (x.decided_at IS NULL
                    OR (SELECT a.checkpoint FROM attempts a WHERE a.attempt_id = x.attempt_id)
                       = x.decided_at)
             RETURNING x.i),
         applied AS (
             UPDATE attempts a SET checkpoint = GREATEST(a.checkpoint, x.checkpoint),
                 component = COALESCE(x.component, a.component),
                 component_version = COALESCE(x.component_version, a.component_version),
                 component_digest = COALESCE(x.component_digest, a.component_digest),
                 input_digest = COALESCE(x.input_digest, a.input_digest),
                 request_identity = COALESCE(x.request_identity, a.request_identity),
                 observation = COALESCE(x.observation, a.observation),
                 outcome = COALESCE(x.outcome, a.outcome),
                 finished_at = COALESCE(x.finished_at, a.finished_at),
                 log = COALESCE(x.log, a.log), result = COALESCE(x.result, a.result),
                 policy = COALESCE(x.policy, a.policy)
             FROM x JOIN moved ON moved.i = x.i
             WHERE a.attempt_id = x.attempt_id)
         SELECT i FROM moved",
    )
    .persistent(false)
    .bind(wf)
    .bind(step)
    .bind(token)
    .bind(state)
    .bind(ready_at)
    .bind(trigger)
    .bind(uncertain)
    .bind(receipt)
    .bind(note)
    .bind(blocked)
    .bind(expired)
    .bind(decided);
    let mut moved = vec![false; n];
    for r in bind_columns(query, &facts).fetch_all(&mut *conn).await? {
        let i = r.int("i")?;
        let slot = usize::try_from(i - 1)
            .ok()
            .and_then(|i| moved.get_mut(i))
            .ok_or_else(|| StoreError::Corrupt(format!("finish {i} of {n} moved")))?;
        *slot = true;
    }
    Ok(moved)
}

/// Records the receipts of the successes among `done` and makes ready every pending step
/// all of whose dependencies have now succeeded; answers the released steps by workflow,
/// in definition order.
async fn receipts_and_release(
    conn: &mut PgConnection,
    reqs: &[FinishRequest],
    texts: &[Texts],
    done: &[usize],
) -> PgResult<HashMap<String, Vec<String>>> {
    let mut receipts = Vec::new();
    let mut nows = Vec::new();
    for &i in done {
        let r = &reqs[i];
        if let (StepTransition::Succeeded(receipt), Some(output)) =
            (&r.transition, &texts[i].output)
        {
            receipts.push(crate::store::executor::plan::receipt_params(
                receipt,
                &r.fence.workflow_id,
                &r.fence.step,
                Some(&r.attempt_id),
                output,
                r.now,
            ));
            nows.push(r.now as i64);
        }
    }
    if receipts.is_empty() {
        return Ok(HashMap::new());
    }
    // Receipt columns 2 and 3 are the workflow and the step; the release reads them back
    // from the same arrays.
    let query = sqlx::query(sqlx::AssertSqlSafe(format!(
        "WITH recorded AS (
             INSERT INTO receipts ({})
             SELECT * FROM UNNEST($1::TEXT[], $2::TEXT[], $3::TEXT[], $4::TEXT[], $5::TEXT[],
                 $6::TEXT[], $7::TEXT[], $8::TEXT[], $9::TEXT[], $10::TEXT[], $11::TEXT[],
                 $12::BIGINT[], $13::TEXT[], $14::TEXT[], $15::TEXT[])),
         candidates AS (
             SELECT DISTINCT d.workflow_id, d.step, done.now FROM step_deps d
             JOIN UNNEST($2::TEXT[], $3::TEXT[], $16::BIGINT[]) AS done(wf, step, now)
               ON d.workflow_id = done.wf AND d.depends_on = done.step),
         released AS (
             UPDATE steps s SET state = 'ready', ready_at = c.now
             FROM candidates c
             WHERE s.workflow_id = c.workflow_id AND s.step = c.step AND s.state = 'pending'
               AND NOT EXISTS (
                   SELECT 1 FROM step_deps d JOIN steps s2
                     ON s2.workflow_id = d.workflow_id AND s2.step = d.depends_on
                   WHERE d.workflow_id = s.workflow_id AND d.step = s.step
                     AND s2.state <> 'succeeded')
             RETURNING s.workflow_id, s.step, s.ord)
         SELECT workflow_id, step FROM released ORDER BY workflow_id, ord",
        crate::store::executor::plan::RECEIPT_INSERT_COLUMNS
    )))
    .persistent(false);
    let mut released: HashMap<String, Vec<String>> = HashMap::new();
    for r in bind_columns(query, &receipts)
        .bind(nows)
        .fetch_all(&mut *conn)
        .await?
    {
        released
            .entry(r.text("workflow_id")?)
            .or_default()
            .push(r.text("step")?);
    }
    Ok(released)
}

/// Adds each finish's runtime and charges to its workflow, takes the timeline numbers its
/// events need and inserts them, in one statement.
async fn counters_and_timeline(
    conn: &mut PgConnection,
    reqs: &[FinishRequest],
    done: &[usize],
    events: &[Vec<NewEvent>],
) -> PgResult<()> {
    // Per workflow: runtime, attempts given back, reserve drawn, events.
    let mut order: Vec<&str> = Vec::new();
    let mut sums: HashMap<&str, [i64; 4]> = HashMap::new();
    let (mut e_wf, mut e_i, mut e_at) = (Vec::new(), Vec::new(), Vec::new());
    let mut columns = executor::EventColumns::default();
    for &i in done {
        let r = &reqs[i];
        let wf = r.fence.workflow_id.as_str();
        let sum = sums.entry(wf).or_insert_with(|| {
            order.push(wf);
            [0; 4]
        });
        sum[0] += r.runtime_ms as i64;
        sum[1] += crate::store::executor::plan::uncharged(r.charge);
        sum[2] += crate::store::executor::plan::from_reserve(r.charge);
        for e in &events[i] {
            sum[3] += 1;
            e_wf.push(wf);
            e_i.push(sum[3]);
            e_at.push(r.now as i64);
            columns.push(e);
        }
    }
    let column = |k: usize| order.iter().map(|wf| sums[wf][k]).collect::<Vec<i64>>();
    let query = sqlx::query(
        "WITH d AS (
             SELECT * FROM UNNEST($1::TEXT[], $2::BIGINT[], $3::BIGINT[], $4::BIGINT[],
                 $5::BIGINT[]) AS d(id, runtime, uncharged, reserve, n)),
         taken AS (
             UPDATE workflows w SET runtime_used_ms = w.runtime_used_ms + d.runtime,
                 attempts_used = w.attempts_used - d.uncharged,
                 recovery_queries_used = w.recovery_queries_used + d.reserve,
                 next_seq = w.next_seq + d.n
             FROM d WHERE w.workflow_id = d.id
             RETURNING w.workflow_id, w.next_seq - d.n AS first)
         INSERT INTO timeline (workflow_id, seq, at, kind, step, attempt_id, text, data)
         SELECT e.wf, taken.first + e.i - 1, e.at, e.kind, e.step, e.attempt, e.text, e.data
         FROM UNNEST($6::TEXT[], $7::BIGINT[], $8::BIGINT[], $9::TEXT[], $10::TEXT[],
                 $11::TEXT[], $12::TEXT[], $13::TEXT[])
              AS e(wf, i, at, kind, step, attempt, text, data)
         JOIN taken ON taken.workflow_id = e.wf",
    )
    .persistent(false)
    .bind(&order)
    .bind(column(0))
    .bind(column(1))
    .bind(column(2))
    .bind(column(3))
    .bind(e_wf)
    .bind(e_i)
    .bind(e_at);
    columns.bind(query).execute(&mut *conn).await?;
    Ok(())
}

/// Binds rows of planned values as one array per column (the statement's `UNNEST`): a
/// column's type is its values' (text or integer), the same in every row by construction.
fn bind_columns<'q, const N: usize>(
    mut query: PgQuery<'q>,
    rows: &[[Param<'q>; N]],
) -> PgQuery<'q> {
    for c in 0..N {
        query = match rows.first().map(|r| r[c]) {
            Some(Param::Int(_)) => query.bind(
                rows.iter()
                    .map(|r| match r[c] {
                        Param::Int(v) => v,
                        Param::Text(_) | Param::Flag(_) | Param::Bytes(_) => None,
                    })
                    .collect::<Vec<_>>(),
            ),
            _ => query.bind(
                rows.iter()
                    .map(|r| match r[c] {
                        Param::Text(v) => v,
                        Param::Int(_) | Param::Flag(_) | Param::Bytes(_) => None,
                    })
                    .collect::<Vec<_>>(),
            ),
        };
    }
    query
}
