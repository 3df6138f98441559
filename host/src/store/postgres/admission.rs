//! Admission: new intents written many to one statement, a known key answered from what
//! it names.
//!
//! A new intent's rows (its key, the workflow, its steps and their dependencies, its
//! first timeline entries, its notification) are written by one statement of
//! data-modifying `WITH` clauses, which is its own transaction. Every statement is a round
//! trip, and most of what PostgreSQL spends on one (binding, starting the executor on
//! seven tables, the commit) does not depend on how many rows it writes; so a host's
//! admissions go through one queue, and a writer takes what has queued up and writes it
//! all in one statement of multi-row clauses (`UNNEST` over one array per column).
//!
//! Taking the key decides, per intent: the key's insert waits for a concurrent admission
//! holding the same key, and only the intents whose keys it took (new, or past their
//! retention) get the other clauses' rows. The others are answered from their key. A batch
//! holds at most one intent per key (and per replaced workflow), its keys in order, so
//! concurrent batches wait on each other's keys in one direction only.
//!
//! A batch refused by the database wrote nothing: each of its intents is written again on
//! its own, so only the one at fault fails. A batch whose answer was lost may have been
//! committed: each of its intents hears so.

use super::gather::Gather;
use super::tx::PgTx;
use super::{Fail, PgResult, PgStore, plan, rows};
use crate::intent::{StepState, WorkflowId};
use crate::store::admission;
use crate::store::{AdmitOutcome, AdmitRequest, Retry, StoreError, StoreResult};
use sqlx::PgPool;
use std::collections::{HashMap, HashSet};
use std::hash::BuildHasher;
use std::sync::{Arc, LazyLock};
use tokio::sync::{Mutex, mpsc, oneshot};

/// How often an admission starts over after losing a race for its key (or a deadlock); a
/// race is lost at most once in practice (the second try sees the winner's key).
const ADMIT_TRIES: usize = 8;

/// Most intents in one statement; bounds what one batch adds to the first one's wait.
const MAX_BATCH: usize = 64;

/// Batches in flight at once: one is being written while the next gathers and is sent.
const WRITERS: usize = 2;

/// Admits an intent: a new one is written with whatever else is waiting (see the module's
/// documentation); a known key is answered from what it names.
pub(super) async fn admit(store: &PgStore, mut req: AdmitRequest) -> StoreResult<AdmitOutcome> {
    let mut reuse = false;
    for _ in 0..ADMIT_TRIES {
        if req.create.is_some() {
            let (back, written) = store.admissions.create(req, reuse).await?;
            req = back;
            match written? {
                Written::Took => {
                    store.notifier.poke();
                    let new = req.create.as_ref().expect("a created intent");
                    return Ok(AdmitOutcome::Created(
                        crate::store::admission::plan::created(&req, new),
                    ));
                }
                // The key is held: answer from it below.
                Written::KeyHeld => {}
                Written::Again => continue,
                Written::Outdated => return Ok(AdmitOutcome::Outdated),
            }
        }
        let mut conn = store.pool.acquire().await?;
        let mut tx = PgTx::on(&mut conn);
        let key = admission::key_in_scope(&mut tx, &req.scope).await?;
        if let Some(outcome) = admission::answer_from_key(&mut tx, &req, key).await? {
            return Ok(outcome);
        }
        // The key ran out (or was freed) between the two statements: take it now.
        reuse = true;
    }
    Err(StoreError::safe(format!(
        "admission under key `{}` kept losing races for the key; retry",
        req.scope.key
    )))
}

/// What became of one intent of a batch.
enum Written {
    /// Its key was taken and its rows written.
    Took,
    /// Its key is held (by another intent): nothing of it was written.
    KeyHeld,
    /// Its definition version is no longer the newest: nothing of it was written.
    Outdated,
    /// PostgreSQL rolled the batch back to break a deadlock: write it again.
    Again,
}

struct Job {
    req: AdmitRequest,
    /// Whether its key was found expired: a batch holding it takes over expired keys.
    reuse: bool,
    reply: oneshot::Sender<(AdmitRequest, StoreResult<Written>)>,
}

/// The queue of a host's new intents (see the module's documentation). Cheap to clone;
/// the writers stop when the last clone is dropped.
#[derive(Clone)]
pub(crate) struct Admissions {
    queue: mpsc::Sender<Job>,
}

impl Admissions {
    pub(crate) fn start(pool: PgPool) -> Self {
        let (queue, jobs) = mpsc::channel(4 * MAX_BATCH);
        let jobs = Arc::new(Mutex::new(jobs));
        for _ in 0..WRITERS {
            tokio::spawn(write(pool.clone(), jobs.clone()));
        }
        Self { queue }
    }

    /// Writes `req`'s intent with whatever else is waiting; hands the request back with
    /// what became of it once the batch committed.
    async fn create(
        &self,
        req: AdmitRequest,
        reuse: bool,
    ) -> StoreResult<(AdmitRequest, StoreResult<Written>)> {
        let (reply, answer) = oneshot::channel();
        self.queue
            .send(Job { req, reuse, reply })
            .await
            .map_err(|_| StoreError::safe("the store is closed"))?;
        answer
            .await
            .map_err(|_| StoreError::unknown("the admission's writer stopped before it answered"))
    }
}

/// One writer: takes a batch (held-over intents first), writes it, and again.
async fn write(pool: PgPool, jobs: Arc<Mutex<mpsc::Receiver<Job>>>) {
    // What a batch may hold once: a key, a replaced workflow (hashed; a collision only
    // holds an intent over to the next batch).
    let hasher = std::hash::RandomState::new();
    let mut gather = Gather::new(jobs);
    loop {
        let mut once: HashSet<u64> = HashSet::new();
        let fits = |job: &Job| {
            let s = &job.req.scope;
            let key = hasher.hash_one((0u8, &s.subject.0, &s.workflow, &s.key));
            let replaces = job
                .req
                .create
                .as_ref()
                .and_then(|n| n.replaces.as_ref())
                .map(|r| hasher.hash_one((1u8, r.as_str())));
            let fits = !once.contains(&key) && replaces.is_none_or(|r| !once.contains(&r));
            if fits {
                once.insert(key);
                once.extend(replaces);
            }
            fits
        };
        let Some(batch) = gather.next(MAX_BATCH, fits).await else {
            return;
        };
        write_batch(&pool, batch).await;
    }
}

async fn write_batch(pool: &PgPool, mut batch: Vec<Job>) {
    batch.sort_by(|a, b| {
        let (a, b) = (&a.req.scope, &b.req.scope);
        (&a.subject.0, &a.workflow, &a.key).cmp(&(&b.subject.0, &b.workflow, &b.key))
    });
    let reuse = batch.iter().any(|j| j.reuse);
    let (reqs, replies): (Vec<AdmitRequest>, Vec<_>) =
        batch.into_iter().map(|j| (j.req, j.reply)).unzip();
    let answers: Vec<StoreResult<Written>> = match create_all(pool, &reqs, reuse).await {
        Ok(written) => written.into_iter().map(Ok).collect(),
        Err(f) if f.retryable() => reqs.iter().map(|_| Ok(Written::Again)).collect(),
        Err(f) => {
            let e = StoreError::from(f);
            let unknown = matches!(
                e,
                StoreError::Backend {
                    retry: Retry::Unknown,
                    ..
                }
            );
            if reqs.len() == 1 || unknown {
                reqs.iter().map(|_| Err(e.clone())).collect()
            } else {
                tracing::debug!(
                    "a batch of {} admissions failed ({e}); writing each alone",
                    reqs.len()
                );
                let mut alone = Vec::with_capacity(reqs.len());
                for req in &reqs {
                    alone.push(
                        match create_all(pool, std::slice::from_ref(req), reuse).await {
                            Ok(mut written) => written.pop().ok_or_else(|| {
                                StoreError::never("an admission written alone gave no answer")
                            }),
                            Err(f) if f.retryable() => Ok(Written::Again),
                            Err(f) => Err(f.into()),
                        },
                    );
                }
                alone
            }
        }
    };
    for ((reply, req), answer) in replies.into_iter().zip(reqs).zip(answers) {
        let _ = reply.send((req, answer));
    }
}

/// A failure of a statement that is its own transaction: refused by the database, it
/// wrote nothing; with its answer lost on the way, it may have committed.
fn autocommit(e: sqlx::Error) -> Fail {
    match e {
        sqlx::Error::Database(_) | sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed => {
            Fail::Db(e)
        }
        other => Fail::commit(other),
    }
}

/// The batch statement in its four forms: with the clause that links replaced workflows
/// only when a batch holds a replacement (rare; planned at each run, so its join sees how
/// few rows it has), and taking over expired keys only when an intent's key was found
/// expired. Otherwise a known key is left alone: `DO UPDATE … WHERE` would lock (and log)
/// the key's row even when it does not update it, so every replay would cost a commit.
///
/// An intent's key is taken only while its definition version is the newest deployed;
/// every other clause writes only the rows of intents whose key was taken (`IN (SELECT …
/// FROM taken)`); steps keep the definitions' order in `ord` (WITH ORDINALITY). An expired
/// key is taken over only if it expired by the batch's earliest `now`. The answer names
/// the intents that took their key, and those built on an outdated version.
static CREATE_ALL: LazyLock<[String; 4]> = LazyLock::new(|| {
    let replaced = "replaced AS (
             UPDATE workflows SET replaced_by = t.id
             FROM UNNEST($4::TEXT[], $13::TEXT[]) AS t(id, r)
             WHERE workflows.workflow_id = t.r AND workflows.replaced_by IS NULL
               AND t.id IN (SELECT workflow_id FROM taken)),";
    let reuse = "DO UPDATE
                 SET workflow_id = EXCLUDED.workflow_id, input_digest = EXCLUDED.input_digest,
                     expires_at = NULL
                 WHERE intent_keys.expires_at IS NOT NULL AND intent_keys.expires_at <= $6";
    let keep = "DO NOTHING";
    [
        create_all_sql("", keep),
        create_all_sql("", reuse),
        create_all_sql(replaced, keep),
        create_all_sql(replaced, reuse),
    ]
});

fn create_all_sql(replaced: &str, on_conflict: &str) -> String {
    format!(
        "WITH taken AS (
             INSERT INTO intent_keys (subject, workflow, key, workflow_id, input_digest, expires_at)
             SELECT s, w, k, id, d, NULL::BIGINT
             FROM UNNEST($1::TEXT[], $2::TEXT[], $3::TEXT[], $4::TEXT[], $5::TEXT[],
                     $7::BIGINT[]) WITH ORDINALITY AS t(s, w, k, id, d, v, n)
             WHERE NOT EXISTS (
                 SELECT 1 FROM definitions x WHERE x.name = t.w AND x.version > t.v)
             ORDER BY n
             ON CONFLICT (subject, workflow, key) {on_conflict}
             RETURNING workflow_id),
         workflow AS (
             INSERT INTO workflows (workflow_id, workflow, definition_version, subject,
                 idempotency_key, input_digest, state, created_at, deadline_at,
                 key_retention_ms, next_seq, replaces, policy_at_admission, policy_current,
                 trace_parent, environment)
             SELECT id, w, v, s, k, d, 'running', a, dl, kr, ns, r, p, p, tp,
                 (SELECT value FROM store_settings WHERE name = 'environment')
             FROM UNNEST($4::TEXT[], $2::TEXT[], $7::BIGINT[], $1::TEXT[], $3::TEXT[],
                     $8::TEXT[], $5::TEXT[], $9::BIGINT[], $10::BIGINT[], $11::BIGINT[],
                     $12::BIGINT[], $13::TEXT[], $14::BIGINT[], $15::TEXT[])
                  AS t(id, w, v, s, k, i, d, a, dl, kr, ns, r, p, tp)
             WHERE id IN (SELECT workflow_id FROM taken)),
         inputs AS (
             INSERT INTO workflow_inputs (workflow_id, input)
             SELECT id, i FROM UNNEST($4::TEXT[], $8::TEXT[]) AS t(id, i)
             WHERE id IN (SELECT workflow_id FROM taken)),
         {replaced}
         steps AS (
             INSERT INTO steps (workflow_id, step, state, ready_at, role, compensate_on, reads,
                 subject, adapter)
             SELECT t.id, s, st, r, ro, co, rd, sub.subject, ad
             FROM UNNEST($16::TEXT[], $17::TEXT[], $18::TEXT[], $19::BIGINT[], $20::TEXT[],
                     $21::TEXT[], $22::TEXT[], $38::TEXT[])
                  WITH ORDINALITY AS t(id, s, st, r, ro, co, rd, ad, n)
             JOIN UNNEST($4::TEXT[], $1::TEXT[]) AS sub(id, subject) ON sub.id = t.id
             WHERE t.id IN (SELECT workflow_id FROM taken)
             ORDER BY n),
         deps AS (
             INSERT INTO step_deps (workflow_id, step, depends_on)
             SELECT id, s, d FROM UNNEST($23::TEXT[], $24::TEXT[], $25::TEXT[]) AS t(id, s, d)
             WHERE id IN (SELECT workflow_id FROM taken)),
         events AS (
             INSERT INTO timeline (workflow_id, seq, at, kind, step, attempt_id, text, data)
             SELECT id, q, a, kd, s, at, tx, dt
             FROM UNNEST($26::TEXT[], $27::BIGINT[], $28::BIGINT[], $29::TEXT[], $30::TEXT[],
                     $31::TEXT[], $32::TEXT[], $33::TEXT[]) AS t(id, q, a, kd, s, at, tx, dt)
             WHERE id IN (SELECT workflow_id FROM taken)),
         told AS (
             {outbox} SELECT n, id, e, r, b, a, a
             FROM UNNEST($34::TEXT[], $4::TEXT[], $35::TEXT[], $36::BIGINT[], $37::TEXT[],
                     $9::BIGINT[]) AS t(n, id, e, r, b, a)
             WHERE id IN (SELECT workflow_id FROM taken))
         SELECT workflow_id, TRUE FROM taken
         UNION ALL
         SELECT t.id, FALSE FROM UNNEST($4::TEXT[], $2::TEXT[], $7::BIGINT[]) AS t(id, w, v)
         WHERE EXISTS (SELECT 1 FROM definitions x WHERE x.name = t.w AND x.version > t.v)",
        outbox = crate::store::notifications::plan::OUTBOX_INSERT
    )
}

/// Writes the intents of `reqs` (each with something to create, at most one per key) in
/// one statement, taking over expired keys if `reuse`; answers what became of each.
async fn create_all(pool: &PgPool, reqs: &[AdmitRequest], reuse: bool) -> PgResult<Vec<Written>> {
    let mut intents = Intents::default();
    let (mut steps, mut deps, mut events) = (Steps::default(), Deps::default(), Events::default());
    for req in reqs {
        let new = req
            .create
            .as_ref()
            .ok_or_else(|| StoreError::never("an admission with nothing to create was queued"))?;
        let id = new.workflow_id.as_str();
        let created = crate::store::admission::plan::created(req, new);
        let told = crate::store::notifications::plan::notification(
            &created,
            crate::notify::EventType::Recorded,
            req.now,
        );
        intents.subjects.push(req.scope.subject.0.as_str());
        intents.workflows.push(req.scope.workflow.as_str());
        intents.keys.push(req.scope.key.as_str());
        intents.ids.push(id);
        intents.digests.push(req.input.digest.as_str());
        intents.versions.push(i64::from(new.definition_version));
        intents.inputs.push(req.input.text.as_str());
        intents.nows.push(req.now as i64);
        intents.deadlines.push(new.deadline_at as i64);
        intents.retentions.push(new.key_retention_ms as i64);
        intents.next_seqs.push(new.events.len() as i64 + 1);
        intents
            .replaces
            .push(new.replaces.as_ref().map(WorkflowId::as_str));
        intents.policies.push(i64::from(new.policy_version));
        intents.traces.push(new.trace_parent.as_deref());
        intents.told_ids.push(told.id);
        intents.told_events.push(told.event);
        intents.told_revisions.push(told.revision);
        intents.told_bodies.push(told.body);
        for step in &new.steps {
            let ready = step.depends_on.is_empty();
            steps.ids.push(id);
            steps.steps.push(step.id.as_str());
            steps.states.push(
                if ready {
                    StepState::Ready
                } else {
                    StepState::Pending
                }
                .as_str(),
            );
            steps.ready_at.push(ready.then_some(req.now as i64));
            steps.roles.push(step.role.as_str());
            steps
                .compensate_on
                .push(rows::triggers_text(&step.compensate_on));
            steps.reads.push(plan::reads_text(step.reads.as_deref())?);
            steps.adapters.push(step.adapter.as_deref());
            for d in &step.depends_on {
                deps.ids.push(id);
                deps.steps.push(step.id.as_str());
                deps.depends_on.push(d.as_str());
            }
        }
        for (i, e) in new.events.iter().enumerate() {
            events.ids.push(id);
            events.seqs.push(i as i64 + 1);
            events.ats.push(req.now as i64);
            events.kinds.push(e.kind.as_str());
            events.steps.push(e.step.as_deref());
            events.attempts.push(e.attempt_id.as_deref());
            events.texts.push(e.text.as_str());
            events.data.push(e.data.to_string());
        }
    }
    let earliest = reqs.iter().map(|r| r.now).min().unwrap_or(0) as i64;
    let replacing = intents.replaces.iter().any(Option::is_some);
    let sql = &CREATE_ALL[usize::from(replacing) * 2 + usize::from(reuse)];
    let answers: Vec<(String, bool)> = sqlx::query_as(sql.as_str())
        .persistent(!replacing)
        .bind(&intents.subjects)
        .bind(&intents.workflows)
        .bind(&intents.keys)
        .bind(&intents.ids)
        .bind(&intents.digests)
        .bind(earliest)
        .bind(&intents.versions)
        .bind(&intents.inputs)
        .bind(&intents.nows)
        .bind(&intents.deadlines)
        .bind(&intents.retentions)
        .bind(&intents.next_seqs)
        .bind(&intents.replaces)
        .bind(&intents.policies)
        .bind(&intents.traces)
        .bind(&steps.ids)
        .bind(&steps.steps)
        .bind(&steps.states)
        .bind(&steps.ready_at)
        .bind(&steps.roles)
        .bind(&steps.compensate_on)
        .bind(&steps.reads)
        .bind(&deps.ids)
        .bind(&deps.steps)
        .bind(&deps.depends_on)
        .bind(&events.ids)
        .bind(&events.seqs)
        .bind(&events.ats)
        .bind(&events.kinds)
        .bind(&events.steps)
        .bind(&events.attempts)
        .bind(&events.texts)
        .bind(&events.data)
        .bind(&intents.told_ids)
        .bind(&intents.told_events)
        .bind(&intents.told_revisions)
        .bind(&intents.told_bodies)
        .bind(&steps.adapters)
        .fetch_all(pool)
        .await
        .map_err(autocommit)?;
    let answers: HashMap<&str, bool> = answers.iter().map(|(id, t)| (id.as_str(), *t)).collect();
    Ok(intents
        .ids
        .iter()
        .map(|id| match answers.get(id) {
            Some(true) => Written::Took,
            Some(false) => Written::Outdated,
            None => Written::KeyHeld,
        })
        .collect())
}

/// One array per column of the intents' own rows (key, workflow, notification).
#[derive(Default)]
struct Intents<'r> {
    subjects: Vec<&'r str>,
    workflows: Vec<&'r str>,
    keys: Vec<&'r str>,
    ids: Vec<&'r str>,
    digests: Vec<&'r str>,
    versions: Vec<i64>,
    inputs: Vec<&'r str>,
    nows: Vec<i64>,
    deadlines: Vec<i64>,
    retentions: Vec<i64>,
    next_seqs: Vec<i64>,
    replaces: Vec<Option<&'r str>>,
    policies: Vec<i64>,
    traces: Vec<Option<&'r str>>,
    told_ids: Vec<String>,
    told_events: Vec<&'static str>,
    told_revisions: Vec<i64>,
    told_bodies: Vec<String>,
}

#[derive(Default)]
struct Steps<'r> {
    ids: Vec<&'r str>,
    steps: Vec<&'r str>,
    states: Vec<&'static str>,
    ready_at: Vec<Option<i64>>,
    roles: Vec<&'static str>,
    compensate_on: Vec<Option<String>>,
    reads: Vec<Option<String>>,
    adapters: Vec<Option<&'r str>>,
}

#[derive(Default)]
struct Deps<'r> {
    ids: Vec<&'r str>,
    steps: Vec<&'r str>,
    depends_on: Vec<&'r str>,
}

#[derive(Default)]
struct Events<'r> {
    ids: Vec<&'r str>,
    seqs: Vec<i64>,
    ats: Vec<i64>,
    kinds: Vec<&'static str>,
    steps: Vec<Option<&'r str>>,
    attempts: Vec<Option<&'r str>>,
    texts: Vec<&'r str>,
    data: Vec<String>,
}
