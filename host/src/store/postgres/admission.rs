//! Admission: a new intent in one statement, a known key answered from what it names.
//!
//! A new intent's rows (its key, the workflow, its steps and their dependencies, its
//! first timeline entries, its notification) are written by one statement of
//! data-modifying `WITH` clauses, which is its own transaction: one round trip and one
//! commit. Taking the key decides: the key's insert waits for a concurrent admission
//! holding the same key, and only when it took the key (new, or past its retention) do
//! the other clauses write anything. Otherwise the key is read and answered from.

use super::{EventColumns, Fail, PgResult, PgStore, plan, read, rows};
use crate::intent::{Millis, StepState, WorkflowId};
use crate::store::{
    AdmissionStore, AdmitOutcome, AdmitRequest, KeyRecord, KeyScope, NewWorkflow, StoreError,
    StoreResult,
};
use sqlx::postgres::PgConnection;

/// How often an admission starts over after losing a race for its key (or a deadlock); a
/// race is lost at most once in practice (the second try sees the winner's key).
const ADMIT_TRIES: usize = 8;

impl AdmissionStore for PgStore {
    async fn lookup_key(&self, scope: &KeyScope, now: Millis) -> StoreResult<Option<KeyRecord>> {
        let mut conn = self.pool.acquire().await?;
        Ok(plan::live(key_in_scope(&mut conn, scope).await?, now))
    }

    async fn admit(&self, req: AdmitRequest) -> StoreResult<AdmitOutcome> {
        for _ in 0..ADMIT_TRIES {
            if let Some(new) = &req.create {
                match create(&self.pool, &req, new).await {
                    Ok(true) => {
                        self.notifier.poke();
                        return Ok(AdmitOutcome::Created(plan::created(&req, new)));
                    }
                    // The key is held: answer from it below.
                    Ok(false) => {}
                    Err(f) if f.retryable() => continue,
                    Err(f) => return Err(f.into()),
                }
            }
            let mut conn = self.pool.acquire().await?;
            if let Some(outcome) = answer_from_key(&mut conn, &req).await? {
                return Ok(outcome);
            }
            // The key ran out (or was freed) between the two statements: take it now.
        }
        Err(StoreError::safe(format!(
            "admission under key `{}` kept losing races for the key; retry",
            req.scope.key
        )))
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

/// Writes the new intent if it takes its key; answers whether it did.
async fn create(pool: &sqlx::PgPool, req: &AdmitRequest, new: &NewWorkflow) -> PgResult<bool> {
    let id = new.workflow_id.as_str();
    let n = new.steps.len();
    let (mut steps, mut states, mut ready_at) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    let (mut roles, mut compensate_on, mut reads) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    for step in &new.steps {
        let ready = step.depends_on.is_empty();
        steps.push(step.id.as_str());
        roles.push(step.role.as_str());
        compensate_on.push(rows::triggers_text(&step.compensate_on));
        reads.push(plan::reads_text(step.reads.as_deref())?);
        states.push(
            if ready {
                StepState::Ready
            } else {
                StepState::Pending
            }
            .as_str(),
        );
        ready_at.push(ready.then_some(req.now as i64));
    }
    let (dep_steps, deps): (Vec<&str>, Vec<&str>) = new
        .steps
        .iter()
        .flat_map(|s| {
            s.depends_on
                .iter()
                .map(move |d| (s.id.as_str(), d.as_str()))
        })
        .unzip();
    let events = EventColumns::of(&new.events);
    let created = plan::created(req, new);
    let told = plan::notification(&created, crate::notify::EventType::Recorded, req.now);
    // Every clause but the key's writes only if the key was taken (`EXISTS (… taken)`);
    // steps keep the definition's order in `ord` (WITH ORDINALITY).
    let took: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "WITH taken AS (
             INSERT INTO intent_keys (subject, workflow, key, workflow_id, input_digest, expires_at)
             VALUES ($4, $2, $5, $1, $7, NULL)
             ON CONFLICT (subject, workflow, key) DO UPDATE
                 SET workflow_id = EXCLUDED.workflow_id, input_digest = EXCLUDED.input_digest,
                     expires_at = NULL
                 WHERE intent_keys.expires_at IS NOT NULL AND intent_keys.expires_at <= $8
             RETURNING 1),
         workflow AS (
             INSERT INTO workflows (workflow_id, workflow, definition_version, subject,
                 idempotency_key, input, input_digest, state, created_at, deadline_at,
                 key_retention_ms, next_seq, replaces, policy_at_admission, policy_current,
                 trace_parent)
             SELECT $1, $2, $3, $4, $5, $6, $7, 'running', $8, $9, $10, $11, $12, $13, $13, $14
             WHERE EXISTS (SELECT 1 FROM taken)),
         replaced AS (
             UPDATE workflows SET replaced_by = $1
             WHERE workflow_id = $12 AND replaced_by IS NULL AND EXISTS (SELECT 1 FROM taken)),
         steps AS (
             INSERT INTO steps (workflow_id, step, state, ready_at, role, compensate_on, reads)
             SELECT $1, s, st, r, ro, co, rd
             FROM UNNEST($15::TEXT[], $16::TEXT[], $17::BIGINT[], $18::TEXT[], $19::TEXT[],
                     $20::TEXT[]) WITH ORDINALITY AS t(s, st, r, ro, co, rd, n)
             WHERE EXISTS (SELECT 1 FROM taken)
             ORDER BY n),
         deps AS (
             INSERT INTO step_deps (workflow_id, step, depends_on)
             SELECT $1, d.s, d.d FROM UNNEST($21::TEXT[], $22::TEXT[]) AS d(s, d)
             WHERE EXISTS (SELECT 1 FROM taken)),
         events AS (
             INSERT INTO timeline (workflow_id, seq, at, kind, step, attempt_id, text, data)
             SELECT $1, x.i, $8, x.kind, x.step, x.attempt, x.text, x.data
             FROM UNNEST($23::TEXT[], $24::TEXT[], $25::TEXT[], $26::TEXT[], $27::TEXT[])
                  WITH ORDINALITY AS x(kind, step, attempt, text, data, i)
             WHERE EXISTS (SELECT 1 FROM taken)),
         told AS (
             {} SELECT $28, $1, $29, $30, $31, $32, $32 WHERE EXISTS (SELECT 1 FROM taken))
         SELECT count(*) FROM taken",
        plan::OUTBOX_INSERT
    )))
    .bind(id)
    .bind(&req.scope.workflow)
    .bind(new.definition_version as i64)
    .bind(&req.scope.subject.0)
    .bind(&req.scope.key)
    .bind(&req.input.text)
    .bind(&req.input.digest)
    .bind(req.now as i64)
    .bind(new.deadline_at as i64)
    .bind(new.key_retention_ms as i64)
    .bind(new.events.len() as i64 + 1)
    .bind(new.replaces.as_ref().map(WorkflowId::as_str))
    .bind(i64::from(new.policy_version))
    .bind(new.trace_parent.as_deref())
    .bind(&steps)
    .bind(&states)
    .bind(&ready_at)
    .bind(&roles)
    .bind(&compensate_on)
    .bind(&reads)
    .bind(&dep_steps)
    .bind(&deps)
    .bind(&events.kinds)
    .bind(&events.steps)
    .bind(&events.attempts)
    .bind(&events.texts)
    .bind(&events.data)
    .bind(&told.id)
    .bind(told.event)
    .bind(told.revision)
    .bind(&told.body)
    .bind(told.at)
    .fetch_one(pool)
    .await
    .map_err(autocommit)?;
    Ok(took > 0)
}

/// Answers from the key the admission's scope names: the workflow it points at (a replay,
/// or a conflict when the input differs), `KeyFree` when it is free and nothing may be
/// created, `None` when it is free and the intent may take it.
async fn answer_from_key(
    conn: &mut PgConnection,
    req: &AdmitRequest,
) -> PgResult<Option<AdmitOutcome>> {
    let Some(k) = plan::live(key_in_scope(conn, &req.scope).await?, req.now) else {
        return Ok(req.create.is_none().then_some(AdmitOutcome::KeyFree));
    };
    if k.input_digest != req.input.digest {
        return Ok(Some(AdmitOutcome::Conflict {
            workflow_id: k.workflow_id,
        }));
    }
    let record = read::workflow_on(conn, &k.workflow_id)
        .await?
        .ok_or_else(|| StoreError::Corrupt(format!("key points at missing {}", k.workflow_id)))?;
    Ok(Some(AdmitOutcome::Replayed(record)))
}

/// The key in scope, expired or not.
async fn key_in_scope(conn: &mut PgConnection, scope: &KeyScope) -> PgResult<Option<KeyRecord>> {
    let row = sqlx::query(
        "SELECT workflow_id, input_digest, expires_at FROM intent_keys
         WHERE subject = $1 AND workflow = $2 AND key = $3",
    )
    .bind(&scope.subject.0)
    .bind(&scope.workflow)
    .bind(&scope.key)
    .fetch_optional(&mut *conn)
    .await?;
    Ok(row.as_ref().map(rows::key_record).transpose()?)
}
