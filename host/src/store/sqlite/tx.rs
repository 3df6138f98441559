//! The shared transactions ([`crate::store::tx`]) on SQLite: statements run on the writer
//! thread inside its group commit (or on a point-read connection), so a transaction body
//! never waits and is run to its end at once.

use super::SqliteStore;
use crate::store::StoreError;
use crate::store::plan::Param;
use crate::store::tx::{Backend, Statements, Tx, TxArg, TxBody, TxOut, Write, run_now};
use crate::store::{
    AdmitOutcome, AdmitRequest, ClaimRequest, Claimed, FinishOutcome, FinishRequest, StoreResult,
    actions, admission, approvals, batches, budgets, components, course, definitions, evidence,
    executor, late, leases, metrics, notifications, policies, sessions, settings,
};
use rusqlite::Connection;

/// SQLite's statements.
static STATEMENTS: Statements = Statements {
    approvals: approvals::SQL,
    batches: batches::SQL,
    admission: admission::SQL,
    actions: actions::SQL,
    budgets: budgets::sqlite::SQL,
    components: components::sqlite::SQL,
    course: course::sqlite::SQL,
    definitions: definitions::SQL,
    evidence: evidence::SQL,
    gates: crate::store::gates::SQL,
    executor: executor::sqlite::SQL,
    late: late::SQL,
    leases: leases::SQL,
    metrics: metrics::SQL,
    migration: course::migration::SQLITE,
    notifications: notifications::SQL,
    policies: policies::sqlite::SQL,
    sessions: sessions::SQL,
    settings: settings::SQL,
};

/// The names SQLite gives the numbered placeholders of the shared statements.
const PLACEHOLDERS: [&str; 32] = [
    "$1", "$2", "$3", "$4", "$5", "$6", "$7", "$8", "$9", "$10", "$11", "$12", "$13", "$14", "$15",
    "$16", "$17", "$18", "$19", "$20", "$21", "$22", "$23", "$24", "$25", "$26", "$27", "$28",
    "$29", "$30", "$31", "$32",
];

/// Binds `params` to `stmt`'s `$1`, `$2`, …, each by name: SQLite numbers named
/// placeholders by first appearance, and `UPDATE … SET a = $4 WHERE b = $1` names `$4` first.
/// Every placeholder is bound each time, so no value is left from the statement's last use.
fn bind(stmt: &mut rusqlite::Statement<'_>, params: &[Param<'_>]) -> StoreResult<()> {
    if stmt.parameter_count() != params.len() || params.len() > PLACEHOLDERS.len() {
        return Err(StoreError::never(format!(
            "a statement with {} placeholders was given {} values",
            stmt.parameter_count(),
            params.len()
        )));
    }
    for (i, (value, name)) in params.iter().zip(PLACEHOLDERS).enumerate() {
        // Most statements name their placeholders in order: `$n` is then the n-th, and
        // the lookup by name (a scan of the statement's names) is not needed.
        let index = if stmt.parameter_name(i + 1) == Some(name) {
            Some(i + 1)
        } else {
            stmt.parameter_index(name)?
        };
        let Some(index) = index else {
            return Err(StoreError::never(format!(
                "a statement has no placeholder {name}"
            )));
        };
        stmt.raw_bind_parameter(index, value)?;
    }
    Ok(())
}

/// A write transaction on the writer's connection, or a read on a point-read connection.
pub(crate) struct SqliteTx<'c> {
    conn: &'c mut Connection,
}

impl Tx for SqliteTx<'_> {
    type Row<'r> = rusqlite::Row<'r>;

    const SQL: &'static Statements = &STATEMENTS;

    async fn rows<T: Send>(
        &mut self,
        sql: &'static str,
        params: &[Param<'_>],
        mut map: impl FnMut(&rusqlite::Row<'_>) -> StoreResult<T> + Send,
    ) -> StoreResult<Vec<T>> {
        let mut stmt = self.conn.prepare_cached(sql)?;
        bind(&mut stmt, params)?;
        let mut found = stmt.raw_query();
        let mut out = Vec::new();
        while let Some(r) = found.next()? {
            out.push(map(r)?);
        }
        Ok(out)
    }

    async fn exec(&mut self, sql: &'static str, params: &[Param<'_>]) -> StoreResult<u64> {
        let mut stmt = self.conn.prepare_cached(sql)?;
        bind(&mut stmt, params)?;
        Ok(stmt.raw_execute()? as u64)
    }

    async fn apply(&mut self, write: Write<'_>) -> StoreResult<()> {
        let conn = &*self.conn;
        match write {
            Write::AppendEvents {
                workflow,
                now,
                events,
            } => super::append_events(conn, workflow, now, events),
            Write::InsertEvents {
                workflow,
                first,
                now,
                events,
            } => super::insert_events(conn, workflow, first, now, events),
            Write::InsertSteps { new, subject, now } => {
                super::insert_steps(conn, new, subject, now)
            }
            Write::AddTallies { tallies, shard } => add_tallies(conn, tallies, shard),
        }
    }
}

/// Adds ended workflows to the tallies, in one statement (an end is two rows).
fn add_tallies(conn: &Connection, tallies: &metrics::Tallies, shard: i32) -> StoreResult<()> {
    static TALLIES: std::sync::LazyLock<super::MultiRow> = std::sync::LazyLock::new(|| {
        super::MultiRow::with_tail(
            "INSERT INTO outcome_tallies (metric, workflow, state, bucket, shard, n, total) VALUES",
            7,
            " ON CONFLICT (metric, workflow, state, bucket, shard)
             DO UPDATE SET n = n + excluded.n, total = total + excluded.total",
        )
    });
    let rows: Vec<metrics::TallyRow<'_>> = tallies.rows().collect();
    let mut values: Vec<&dyn rusqlite::ToSql> = Vec::with_capacity(7 * rows.len());
    for (metric, workflow, state, bucket, n, total) in &rows {
        values.extend([
            metric as &dyn rusqlite::ToSql,
            workflow,
            state,
            bucket,
            &shard,
            n,
            total,
        ]);
    }
    TALLIES.insert(conn, &values)
}

impl<'c> SqliteTx<'c> {
    /// A transaction on the writer's connection, inside the writer's current job.
    pub(super) fn on(conn: &'c mut Connection) -> Self {
        Self { conn }
    }
}

impl rusqlite::ToSql for Param<'_> {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        match self {
            Param::Text(t) => t.to_sql(),
            Param::Int(i) => i.to_sql(),
            Param::Flag(b) => b.to_sql(),
            Param::Bytes(b) => b.to_sql(),
        }
    }
}

impl Backend for SqliteStore {
    type Tx<'t> = SqliteTx<'t>;

    async fn write<A: TxArg, R: TxOut>(&self, arg: A, body: TxBody<Self, A, R>) -> StoreResult<R> {
        self.writer
            .write(move |conn| {
                let mut tx = SqliteTx { conn };
                run_now(body(&mut tx, &arg))
            })
            .await
    }

    /// New work is refused at once when the writer is saturated; work already admitted
    /// waits for its turn.
    async fn write_new<A: TxArg, R: TxOut>(
        &self,
        arg: A,
        body: TxBody<Self, A, R>,
    ) -> StoreResult<R> {
        self.writer
            .try_write(move |conn| {
                let mut tx = SqliteTx { conn };
                run_now(body(&mut tx, &arg))
            })
            .await
    }

    async fn read<A: TxArg, R: TxOut>(&self, arg: A, body: TxBody<Self, A, R>) -> StoreResult<R> {
        self.points.with(|conn| {
            let mut tx = SqliteTx { conn };
            run_now(body(&mut tx, &arg))
        })
    }

    /// One host owns a SQLite database, and its scheduler is woken in-process.
    fn poke(&self) {}

    fn fairness(&self) -> &crate::store::fairness::FairShare {
        &self.fair
    }

    async fn claim(&self, req: ClaimRequest) -> StoreResult<Vec<Claimed>> {
        let fair = self.fair.clone();
        self.writer
            .write(move |conn| super::executor::claim_tx(conn, &req, &fair))
            .await
    }

    async fn finish_and_claim(
        &self,
        req: FinishRequest,
        next: ClaimRequest,
    ) -> StoreResult<(FinishOutcome, Option<Claimed>)> {
        let urgent = next.urgent;
        let job = move |conn: &mut rusqlite::Connection| {
            super::executor::finish_and_claim(conn, &req, &next)
        };
        if urgent {
            self.writer.write_urgent(job).await
        } else {
            self.writer.write(job).await
        }
    }

    async fn admit_and_claim(
        &self,
        req: AdmitRequest,
        next: ClaimRequest,
    ) -> StoreResult<(AdmitOutcome, Option<Claimed>)> {
        self.writer
            .try_write(move |conn| super::executor::admit_and_claim(conn, &req, &next))
            .await
    }

    async fn watch(&self, _wake: std::sync::Arc<tokio::sync::Notify>) -> StoreResult<bool> {
        // One host per file: every write comes from this process, which wakes itself.
        Ok(false)
    }

    fn renewal_refused(&self) -> StoreResult<()> {
        let injected = self.failing_renewals.fetch_update(
            std::sync::atomic::Ordering::AcqRel,
            std::sync::atomic::Ordering::Acquire,
            |n| n.checked_sub(1),
        );
        match injected {
            Ok(_) => Err(StoreError::safe("database is locked (injected by a test)")),
            Err(_) => Ok(()),
        }
    }
}
