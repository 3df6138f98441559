//! The PostgreSQL backend: many hosts on one database.
//!
//! It implements the same traits with the same meaning as the SQLite backend; only the
//! means of keeping concurrent hosts apart differ. SQLite has one writer, so every write
//! sees the one before it; here transactions from several hosts overlap, and these rules
//! keep them correct under `READ COMMITTED`:
//!
//! - A claim picks steps with `FOR UPDATE SKIP LOCKED`, so racing claimers never take the
//!   same step and never wait for each other's rows.
//! - Every write that reads a workflow's steps to decide something (releasing dependents,
//!   deriving the workflow's state) first locks the workflow row, so it sees every step
//!   change committed before it. Rows are always locked step first, then workflow, and a
//!   claim locks its workflows in id order, so transactions never wait in a cycle.
//! - Timeline numbers come from `workflows.next_seq` under that row lock: per workflow,
//!   no gaps and no duplicates.
//! - Keys (intent keys, operator action keys) rely on their primary key: a racing
//!   duplicate waits for the first transaction, then finds its key and answers as a replay.
//!   An admission written on its own ([`PgStore::one_at_a_time`]) holds its key first, by
//!   a lock that lasts until its commit.
//!
//! sqlx types stay in this module; [`PgStore::connect`] applies `migrations/postgres`.

mod admission;
mod batch;
mod executor;
mod gather;
mod read;
mod tx;

use super::plan;
use super::rows;
use super::{StoreError, StoreResult};
use crate::intent::{Millis, NewEvent, StepState, WorkflowId};
use sqlx::PgPool;
use sqlx::postgres::{PgConnection, PgPoolOptions};
use std::time::Duration;

/// How often a transaction runs again after PostgreSQL aborted it to break a deadlock.
pub(crate) const DEADLOCK_TRIES: usize = 8;

/// A failure inside a transaction: a store error, or a database error kept whole so that
/// a deadlock (or serialization failure) can be told apart and the transaction run again.
pub(crate) enum Fail {
    Store(StoreError),
    Db(sqlx::Error),
    /// A shared transaction's statement failed on a conflict PostgreSQL broke by aborting
    /// the transaction ([`tx::PgTx::outcome`]).
    Conflict(StoreError),
}

pub(crate) type PgResult<T> = Result<T, Fail>;

impl From<sqlx::Error> for Fail {
    fn from(e: sqlx::Error) -> Self {
        Fail::Db(e)
    }
}

impl From<StoreError> for Fail {
    fn from(e: StoreError) -> Self {
        Fail::Store(e)
    }
}

impl From<Fail> for StoreError {
    fn from(f: Fail) -> Self {
        match f {
            Fail::Store(e) | Fail::Conflict(e) => e,
            Fail::Db(e) => e.into(),
        }
    }
}

impl Fail {
    /// A failed `COMMIT`: a conflict (class 40) rolled it back, and may run again; any other
    /// failure (the connection lost on the way) leaves unknown whether it committed.
    pub(crate) fn commit(e: sqlx::Error) -> Self {
        match &e {
            sqlx::Error::Database(db) if db.code().is_some_and(|c| c.starts_with("40")) => {
                Fail::Db(e)
            }
            _ => Fail::Store(StoreError::unknown(format!(
                "the commit's answer was lost ({e}); it may have been committed"
            ))),
        }
    }

    /// Whether PostgreSQL rolled the transaction back to resolve a conflict with another
    /// one (SQLSTATE 40P01 deadlock, 40001 serialization): running it again is safe.
    pub(crate) fn retryable(&self) -> bool {
        match self {
            Fail::Db(sqlx::Error::Database(e)) => {
                matches!(e.code().as_deref(), Some("40P01") | Some("40001"))
            }
            Fail::Conflict(_) => true,
            _ => false,
        }
    }
}

/// Runs `$body` (with `$conn: &mut PgConnection`) in a transaction and commits it; if
/// PostgreSQL aborts it to break a deadlock, the whole transaction runs again. Lock order
/// (step, attempt, workflow) avoids most cycles, but an operator action on a pending step
/// can still meet a concurrent release of that step.
macro_rules! transaction {
    ($pool:expr, |$conn:ident| $body:expr) => {{
        let mut tries = 0;
        loop {
            tries += 1;
            let run: $crate::store::postgres::PgResult<_> = async {
                let mut tx = $pool.begin().await?;
                let value = {
                    let $conn: &mut sqlx::postgres::PgConnection = &mut tx;
                    $body.await?
                };
                tx.commit()
                    .await
                    .map_err($crate::store::postgres::Fail::commit)?;
                Ok(value)
            }
            .await;
            match run {
                Err(f) if f.retryable() && tries < $crate::store::postgres::DEADLOCK_TRIES => {
                    tracing::debug!(
                        "a transaction was aborted to break a deadlock; running it again"
                    );
                }
                other => break other.map_err($crate::store::StoreError::from),
            }
        }
    }};
}
pub(crate) use transaction;

/// The PostgreSQL store. Cheap to clone.
#[derive(Clone)]
pub struct PgStore {
    pool: PgPool,
    notifier: std::sync::Arc<Notifier>,
    finishes: batch::Finishes,
    admissions: admission::Admissions,
    /// Whether finishes and new intents are written in batches (the default).
    batched: bool,
    /// How this host's claims are shared between subjects.
    fair: std::sync::Arc<crate::store::fairness::FairShare>,
}

impl PgStore {
    /// Connects to `url` (`postgres://user:password@host:port/database`) and applies the
    /// migrations.
    pub async fn connect(url: &str) -> StoreResult<Self> {
        Self::connect_with(url, 16).await
    }

    /// Like [`PgStore::connect`], with at most `max_connections` connections in the pool.
    pub async fn connect_with(url: &str, max_connections: u32) -> StoreResult<Self> {
        let pool = PgPoolOptions::new()
            .max_connections(max_connections)
            .acquire_timeout(Duration::from_secs(30))
            .connect(url)
            .await
            .map_err(|e| {
                StoreError::safe(format!(
                    "cannot connect to `{}`: {e}",
                    super::without_password(url)
                ))
            })?;
        sqlx::migrate!("../migrations/postgres")
            .run(&pool)
            .await
            .map_err(|e| {
                StoreError::never(format!("migrating `{}`: {e}", super::without_password(url)))
            })?;
        let notifier = Notifier::start(pool.clone());
        let finishes = batch::Finishes::start(pool.clone());
        let admissions = admission::Admissions::start(pool.clone());
        Ok(Self {
            pool,
            notifier,
            finishes,
            admissions,
            batched: true,
            fair: Default::default(),
        })
    }

    /// This store, writing each finish and each new intent in a transaction of its own
    /// through the rules every backend shares, rather than in batches with other
    /// workflows' (the store conformance suite holds the batches to the same answers).
    pub fn one_at_a_time(mut self) -> Self {
        self.batched = false;
        self
    }

    /// Closes every connection of the pool (and stops listening and notifying).
    pub async fn close(&self) {
        self.pool.close().await;
        self.notifier.poke();
    }
}

/// The channel on which hosts hear that work may be ready (see [`Notifier`]).
pub(crate) const WORK_CHANNEL: &str = "docket_work";

/// Tells the other hosts that work may be ready, after the commit that made it so.
///
/// A `NOTIFY` inside the writing transaction would take PostgreSQL's notification lock at
/// every commit, which serialises the commits of all hosts. Instead a committed write
/// pokes this notifier, and one task per store sends one notification for all the pokes
/// that arrived while the previous one was on its way. A host that dies between its commit
/// and the notification only delays the others until their next poll.
pub(crate) struct Notifier {
    poke: tokio::sync::Notify,
}

impl Notifier {
    fn start(pool: PgPool) -> std::sync::Arc<Self> {
        let notifier = std::sync::Arc::new(Self {
            poke: tokio::sync::Notify::new(),
        });
        let me = notifier.clone();
        // Ends with the pool (`PgStore::close`).
        tokio::spawn(async move {
            loop {
                me.poke.notified().await;
                if pool.is_closed() {
                    break;
                }
                if let Err(e) = sqlx::query("SELECT pg_notify($1, '')")
                    .bind(WORK_CHANNEL)
                    .execute(&pool)
                    .await
                {
                    tracing::debug!("notifying the other hosts failed: {e}; they will poll");
                }
            }
        });
        notifier
    }

    /// Work may be ready: tell the other hosts soon.
    pub(crate) fn poke(&self) {
        self.poke.notify_one();
    }
}

/// Appends events to a workflow's timeline, numbering them from its counter (which locks
/// the workflow row).
pub(crate) async fn append_events(
    conn: &mut PgConnection,
    workflow_id: &WorkflowId,
    now: Millis,
    events: &[NewEvent],
) -> PgResult<()> {
    if events.is_empty() {
        return Ok(());
    }
    // The numbers and the rows in one statement: the update takes the next numbers (and
    // the workflow row's lock), the insert numbers the events from the first of them.
    timeline_insert(
        conn,
        "WITH taken AS (
             UPDATE workflows SET next_seq = next_seq + $3 WHERE workflow_id = $1
             RETURNING next_seq - $3 AS first)
         INSERT INTO timeline (workflow_id, seq, at, kind, step, attempt_id, text, data)
         SELECT $1, taken.first + x.i - 1, $2, x.kind, x.step, x.attempt, x.text, x.data
         FROM taken, UNNEST($4::TEXT[], $5::TEXT[], $6::TEXT[], $7::TEXT[], $8::TEXT[])
              WITH ORDINALITY AS x(kind, step, attempt, text, data, i)",
        (workflow_id, now, events.len() as i64),
        events,
    )
    .await
}

/// Appends events to a workflow's timeline numbered from `first` (the caller moved the
/// counter past them).
pub(crate) async fn insert_events(
    conn: &mut PgConnection,
    workflow_id: &WorkflowId,
    first: u64,
    now: Millis,
    events: &[NewEvent],
) -> PgResult<()> {
    timeline_insert(
        conn,
        "INSERT INTO timeline (workflow_id, seq, at, kind, step, attempt_id, text, data)
         SELECT $1, $3 + x.i - 1, $2, x.kind, x.step, x.attempt, x.text, x.data
         FROM UNNEST($4::TEXT[], $5::TEXT[], $6::TEXT[], $7::TEXT[], $8::TEXT[])
              WITH ORDINALITY AS x(kind, step, attempt, text, data, i)",
        (workflow_id, now, first as i64),
        events,
    )
    .await
}

/// Runs a timeline insert `sql` that takes the workflow, the time and a number (`$1`–`$3`),
/// then the events as one array per column.
async fn timeline_insert(
    conn: &mut PgConnection,
    sql: &'static str,
    (workflow_id, now, number): (&WorkflowId, Millis, i64),
    events: &[NewEvent],
) -> PgResult<()> {
    let c = EventColumns::of(events);
    sqlx::query(sql)
        .bind(workflow_id.as_str())
        .bind(now as i64)
        .bind(number)
        .bind(&c.kinds)
        .bind(&c.steps)
        .bind(&c.attempts)
        .bind(&c.texts)
        .bind(&c.data)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// Inserts a new workflow's steps (ready when they depend on nothing), in definition order,
/// and their dependencies.
pub(crate) async fn insert_steps(
    conn: &mut PgConnection,
    new: &crate::store::NewWorkflow,
    subject: &str,
    now: Millis,
) -> PgResult<()> {
    let n = new.steps.len();
    let (mut steps, mut states, mut ready_at) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    let (mut roles, mut triggers, mut reads, mut adapters) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    let (mut dep_steps, mut depends_on) = (Vec::new(), Vec::new());
    for step in &new.steps {
        let ready = step.depends_on.is_empty();
        steps.push(step.id.as_str());
        states.push(
            if ready {
                StepState::Ready
            } else {
                StepState::Pending
            }
            .as_str(),
        );
        ready_at.push(ready.then_some(now as i64));
        roles.push(step.role.as_str());
        triggers.push(rows::triggers_text(&step.compensate_on));
        reads.push(plan::reads_text(step.reads.as_deref())?);
        adapters.push(step.adapter.as_deref());
        for d in &step.depends_on {
            dep_steps.push(step.id.as_str());
            depends_on.push(d.as_str());
        }
    }
    sqlx::query(
        "WITH steps AS (
             INSERT INTO steps (workflow_id, step, state, ready_at, role, compensate_on, reads,
                 subject, adapter)
             SELECT $1, s, st, r, ro, co, rd, $10, ad
             FROM UNNEST($2::TEXT[], $3::TEXT[], $4::BIGINT[], $5::TEXT[], $6::TEXT[],
                     $7::TEXT[], $11::TEXT[]) WITH ORDINALITY AS t(s, st, r, ro, co, rd, ad, n)
             ORDER BY n)
         INSERT INTO step_deps (workflow_id, step, depends_on)
         SELECT $1, s, d FROM UNNEST($8::TEXT[], $9::TEXT[]) AS t(s, d)",
    )
    .bind(new.workflow_id.as_str())
    .bind(&steps)
    .bind(&states)
    .bind(&ready_at)
    .bind(&roles)
    .bind(&triggers)
    .bind(&reads)
    .bind(&dep_steps)
    .bind(&depends_on)
    .bind(subject)
    .bind(&adapters)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Events as the columns of a multi-row `UNNEST` insert.
pub(crate) struct EventColumns<'e> {
    pub kinds: Vec<&'e str>,
    pub steps: Vec<Option<&'e str>>,
    pub attempts: Vec<Option<&'e str>>,
    pub texts: Vec<&'e str>,
    pub data: Vec<String>,
}

impl<'e> EventColumns<'e> {
    pub(crate) fn of(events: &'e [NewEvent]) -> Self {
        Self {
            kinds: events.iter().map(|e| e.kind.as_str()).collect(),
            steps: events.iter().map(|e| e.step.as_deref()).collect(),
            attempts: events.iter().map(|e| e.attempt_id.as_deref()).collect(),
            texts: events.iter().map(|e| e.text.as_str()).collect(),
            data: events.iter().map(|e| e.data.to_string()).collect(),
        }
    }
}
