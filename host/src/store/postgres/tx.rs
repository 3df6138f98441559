//! The shared transactions ([`crate::store::tx`]) on PostgreSQL: each runs in a database
//! transaction, run again whole when PostgreSQL aborts it to break a deadlock or a
//! serialization conflict.

use super::{DEADLOCK_TRIES, Fail, PgStore};
use crate::store::plan::Param;
use crate::store::tx::{Backend, Statements, Tx, TxArg, TxBody, TxOut, Write};
use crate::store::{
    AdmitOutcome, AdmitRequest, ClaimRequest, Claimed, FinishOutcome, FinishRequest, StoreError,
    StoreResult, actions, admission, approvals, batches, budgets, components, course, definitions,
    evidence, executor, late, leases, metrics, notifications, policies, sessions, settings,
};
use sqlx::postgres::{PgConnection, PgRow};

/// PostgreSQL's statements.
static STATEMENTS: Statements = Statements {
    approvals: approvals::SQL,
    batches: batches::SQL,
    admission: admission::postgres::SQL,
    actions: actions::postgres::SQL,
    budgets: budgets::SQL,
    components: components::SQL,
    course: course::SQL,
    definitions: definitions::SQL,
    evidence: evidence::SQL,
    gates: crate::store::gates::POSTGRES,
    executor: executor::SQL,
    late: late::SQL,
    leases: leases::SQL,
    metrics: metrics::postgres::SQL,
    migration: course::migration::SQL,
    notifications: notifications::postgres::SQL,
    policies: policies::SQL,
    sessions: sessions::SQL,
    settings: settings::SQL,
};

/// An open transaction (or, for a read, a pooled connection).
pub(crate) struct PgTx<'c> {
    conn: &'c mut PgConnection,
    /// A statement failed on a conflict PostgreSQL resolved by aborting the transaction:
    /// running it again is safe.
    conflict: bool,
}

impl PgTx<'_> {
    fn failed(&mut self, f: Fail) -> StoreError {
        self.conflict |= f.retryable();
        f.into()
    }

    fn query<'q>(
        sql: &'static str,
        params: &'q [Param<'q>],
    ) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
        let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
        for value in params {
            query = super::executor::bind(query, *value);
        }
        query
    }
}

impl Tx for PgTx<'_> {
    type Row<'r> = PgRow;

    const SQL: &'static Statements = &STATEMENTS;

    async fn rows<T: Send>(
        &mut self,
        sql: &'static str,
        params: &[Param<'_>],
        mut map: impl FnMut(&PgRow) -> StoreResult<T> + Send,
    ) -> StoreResult<Vec<T>> {
        let found = Self::query(sql, params).fetch_all(&mut *self.conn).await;
        let found = found.map_err(|e| self.failed(Fail::Db(e)))?;
        found.iter().map(&mut map).collect()
    }

    async fn exec(&mut self, sql: &'static str, params: &[Param<'_>]) -> StoreResult<u64> {
        let done = Self::query(sql, params).execute(&mut *self.conn).await;
        Ok(done.map_err(|e| self.failed(Fail::Db(e)))?.rows_affected())
    }

    async fn apply(&mut self, write: Write<'_>) -> StoreResult<()> {
        let conn = &mut *self.conn;
        let applied = match write {
            Write::AppendEvents {
                workflow,
                now,
                events,
            } => super::append_events(conn, workflow, now, events).await,
            Write::InsertEvents {
                workflow,
                first,
                now,
                events,
            } => super::insert_events(conn, workflow, first, now, events).await,
            Write::InsertSteps { new, subject, now } => {
                super::insert_steps(conn, new, subject, now).await
            }
            Write::AddTallies { tallies, shard } => {
                super::executor::add_tallies(conn, tallies, shard).await
            }
        };
        applied.map_err(|f| self.failed(f))
    }
}

impl<'c> PgTx<'c> {
    /// The shared transactions' view of a transaction this backend opened itself (a batch).
    pub(super) fn on(conn: &'c mut PgConnection) -> Self {
        Self {
            conn,
            conflict: false,
        }
    }

    /// What a shared transaction's `result` means to the batch that ran it: a conflict
    /// PostgreSQL broke stays one, so that the batch runs again.
    pub(super) fn outcome<T>(&self, result: StoreResult<T>) -> super::PgResult<T> {
        result.map_err(|e| {
            if self.conflict {
                Fail::Conflict(e)
            } else {
                Fail::Store(e)
            }
        })
    }
}

impl Backend for PgStore {
    type Tx<'t> = PgTx<'t>;

    async fn write<A: TxArg, R: TxOut>(&self, arg: A, body: TxBody<Self, A, R>) -> StoreResult<R> {
        let mut tries = 0;
        loop {
            tries += 1;
            let run: Result<R, (StoreError, bool)> = async {
                let mut db = self
                    .pool
                    .begin()
                    .await
                    .map_err(|e| (StoreError::from(e), false))?;
                let mut tx = PgTx {
                    conn: &mut db,
                    conflict: false,
                };
                let value = body(&mut tx, &arg).await;
                let conflict = tx.conflict;
                let value = value.map_err(|e| (e, conflict))?;
                db.commit().await.map_err(|e| {
                    let f = Fail::commit(e);
                    let retry = f.retryable();
                    (StoreError::from(f), retry)
                })?;
                Ok(value)
            }
            .await;
            match run {
                Err((_, true)) if tries < DEADLOCK_TRIES => {
                    tracing::debug!(
                        "a transaction was aborted to break a deadlock; running it again"
                    );
                }
                other => return other.map_err(|(e, _)| e),
            }
        }
    }

    async fn read<A: TxArg, R: TxOut>(&self, arg: A, body: TxBody<Self, A, R>) -> StoreResult<R> {
        let mut conn = self.pool.acquire().await?;
        let mut tx = PgTx {
            conn: &mut conn,
            conflict: false,
        };
        body(&mut tx, &arg).await
    }

    fn poke(&self) {
        self.notifier.poke();
    }

    fn fairness(&self) -> &crate::store::fairness::FairShare {
        &self.fair
    }

    /// Sent directly, as a stopping host's notifier task may not get to run.
    async fn announce(&self) -> StoreResult<()> {
        sqlx::query("SELECT pg_notify($1, '')")
            .bind(super::WORK_CHANNEL)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// The batch statement finds a known key itself.
    fn key_read_first(&self) -> bool {
        false
    }

    /// Batched with the admissions of other intents ([`super::admission`]).
    async fn admit(&self, req: AdmitRequest) -> StoreResult<AdmitOutcome> {
        if !self.batched {
            let admitted = self
                .write(req, |tx, req| Box::pin(admission::admit(tx, req)))
                .await?;
            if matches!(admitted, AdmitOutcome::Created(_)) {
                self.notifier.poke();
            }
            return Ok(admitted);
        }
        super::admission::admit(self, req).await
    }

    async fn claim(&self, req: ClaimRequest) -> StoreResult<Vec<Claimed>> {
        let fair = &self.fair;
        super::transaction!(self.pool, |conn| super::executor::claim_tx(
            conn, &req, fair
        ))
    }

    /// Batched with the finishes of other workflows ([`super::batch`]).
    async fn finish(&self, req: FinishRequest) -> StoreResult<FinishOutcome> {
        if !self.batched {
            return self
                .write(req, |tx, req| Box::pin(executor::finish(tx, req)))
                .await;
        }
        self.finishes.finish(req).await
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
}
