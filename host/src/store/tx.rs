//! One transaction as the store's shared code sees it, so that each rule is written once:
//! a transaction reads facts through [`Tx::rows`], decides in pure code, and writes
//! through [`Tx::exec`] (a statement from its backend's table, named the same in both) or
//! [`Tx::apply`] (a [`Write`] whose execution differs between the databases in more than
//! its text). [`Backend`] runs such a transaction on its database — on SQLite's writer
//! thread inside its group commit, or in a PostgreSQL transaction that runs again when the
//! database aborts it to break a deadlock — so the store's traits are implemented once,
//! for every backend.
//!
//! The statements live by concept (`store/<concept>/mod.rs`), written once in the form both
//! databases run, with numbered placeholders (`$1`, `$2`, …); a backend's module beside them
//! (`store/<concept>/{sqlite,postgres}.rs`) replaces only those it writes its own way. SQLite
//! reads `$1` as a named placeholder (numbered by first appearance, not by its digits), so
//! its transactions bind each value by name.

use super::plan::Param;
use super::rows::Columns;
use super::{StoreError, StoreResult};
use crate::intent::{Millis, NewEvent, WorkflowId, WorkflowState};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

/// Every statement the shared transactions run, in one database's dialect.
pub(crate) struct Statements {
    pub admission: super::admission::Sql,
    pub actions: super::actions::Sql,
    pub approvals: super::approvals::Sql,
    pub batches: super::batches::Sql,
    pub budgets: super::budgets::Sql,
    pub components: super::components::Sql,
    pub course: super::course::Sql,
    pub definitions: super::definitions::Sql,
    pub evidence: super::evidence::Sql,
    pub gates: super::gates::Sql,
    pub executor: super::executor::Sql,
    pub late: super::late::Sql,
    pub leases: super::leases::Sql,
    pub metrics: super::metrics::Sql,
    pub migration: super::course::migration::Sql,
    pub notifications: super::notifications::Sql,
    pub policies: super::policies::Sql,
    pub sessions: super::sessions::Sql,
    pub settings: super::settings::Sql,
}

/// A write whose execution is the backend's own: a multi-row insert each dialect writes
/// its own way.
pub(crate) enum Write<'a> {
    /// Numbers `events` from the workflow's counter and appends them to its timeline.
    AppendEvents {
        workflow: &'a WorkflowId,
        now: Millis,
        events: &'a [NewEvent],
    },
    /// Appends `events` to the workflow's timeline numbered from `first` (the caller has
    /// moved the counter past them).
    InsertEvents {
        workflow: &'a WorkflowId,
        first: u64,
        now: Millis,
        events: &'a [NewEvent],
    },
    /// Inserts a new workflow's steps, ready or pending, and their dependencies.
    InsertSteps {
        new: &'a super::NewWorkflow,
        /// The workflow's subject, which each step row carries for fair claims.
        subject: &'a str,
        now: Millis,
    },
    /// Adds ended workflows to the metrics' tallies, in `shard`, in key order.
    AddTallies {
        tallies: &'a super::metrics::Tallies,
        shard: i32,
    },
}

/// One open transaction (or, for a read, one connection) of a backend.
pub(crate) trait Tx: Send {
    /// A row as the driver hands it over.
    type Row<'r>: Columns;

    /// This backend's statements.
    const SQL: &'static Statements;

    /// This backend's statements (as a method, for the shared code's brevity).
    fn sql(&self) -> &'static Statements {
        Self::SQL
    }

    /// The rows `sql` returns for `params`, each mapped by `map`.
    fn rows<T: Send>(
        &mut self,
        sql: &'static str,
        params: &[Param<'_>],
        map: impl FnMut(&Self::Row<'_>) -> StoreResult<T> + Send,
    ) -> impl Future<Output = StoreResult<Vec<T>>> + Send;

    /// Runs `sql` for `params`; how many rows it changed.
    fn exec(
        &mut self,
        sql: &'static str,
        params: &[Param<'_>],
    ) -> impl Future<Output = StoreResult<u64>> + Send;

    /// Applies one of the writes each backend executes its own way.
    fn apply(&mut self, write: Write<'_>) -> impl Future<Output = StoreResult<()>> + Send;

    /// Appends `events` to the workflow's timeline, then settles its course and moves its
    /// state as its steps now say: how every change of a workflow's steps ends.
    fn tell_and_settle(
        &mut self,
        workflow: &WorkflowId,
        now: Millis,
        events: &[NewEvent],
        current: WorkflowState,
        cancelled: bool,
    ) -> impl Future<Output = StoreResult<WorkflowState>> + Send
    where
        Self: Sized,
    {
        async move {
            self.apply(Write::AppendEvents {
                workflow,
                now,
                events,
            })
            .await?;
            super::executor::recompute_state(self, workflow, current, cancelled, now).await
        }
    }

    /// The first row `sql` returns, if any.
    fn row<T: Send>(
        &mut self,
        sql: &'static str,
        params: &[Param<'_>],
        map: impl FnMut(&Self::Row<'_>) -> StoreResult<T> + Send,
    ) -> impl Future<Output = StoreResult<Option<T>>> + Send {
        async move { Ok(self.rows(sql, params, map).await?.into_iter().next()) }
    }
}

/// A transaction's body as a backend runs it: the shared code's `async fn`, boxed.
pub(crate) type TxFuture<'t, R> = Pin<Box<dyn Future<Output = StoreResult<R>> + Send + 't>>;

/// A transaction's body over backend `B`'s transactions, taking its argument `A`.
pub(crate) type TxBody<B, A, R> =
    for<'t, 'c> fn(&'t mut <B as Backend>::Tx<'c>, &'t A) -> TxFuture<'t, R>;

/// What a transaction's body takes: borrowed by each run of the body, which may run on
/// another thread.
pub(crate) trait TxArg: Send + Sync + 'static {}
impl<T: Send + Sync + 'static> TxArg for T {}

/// What a transaction's body answers, handed back across threads.
pub(crate) trait TxOut: Send + 'static {}
impl<T: Send + 'static> TxOut for T {}

/// A database that runs the shared transactions.
pub(crate) trait Backend: Send + Sync {
    type Tx<'t>: Tx + 't;

    /// Runs `body` over `arg` in one write transaction, answered after its commit. The body
    /// may run more than once (PostgreSQL runs a transaction it aborted again), so it
    /// borrows its argument.
    fn write<A: TxArg, R: TxOut>(
        &self,
        arg: A,
        body: TxBody<Self, A, R>,
    ) -> impl Future<Output = StoreResult<R>> + Send;

    /// [`Backend::write`] for new work: where writes queue, refused at once (rather than
    /// waiting for room) when the queue is full, so that a flood of new intents meets a
    /// clear "try again" while the work already admitted still records its ends.
    fn write_new<A: TxArg, R: TxOut>(
        &self,
        arg: A,
        body: TxBody<Self, A, R>,
    ) -> impl Future<Output = StoreResult<R>> + Send {
        self.write(arg, body)
    }

    /// Runs `body` over `arg` on a read connection (no transaction).
    fn read<A: TxArg, R: TxOut>(
        &self,
        arg: A,
        body: TxBody<Self, A, R>,
    ) -> impl Future<Output = StoreResult<R>> + Send;

    /// Tells the hosts sharing the database that work became ready (a committed write
    /// made a step ready): a no-op where one host owns the database.
    fn poke(&self);

    /// How this host's claims are shared between subjects.
    fn fairness(&self) -> &super::fairness::FairShare;

    /// Tells the hosts sharing the database at once, not at the notifier's next round
    /// (a stopping host's released leases: its notifier may not get to run).
    fn announce(&self) -> impl Future<Output = StoreResult<()>> + Send {
        async { Ok(()) }
    }

    /// [`super::AdmissionStore::key_read_first`]: by default, yes.
    fn key_read_first(&self) -> bool {
        true
    }

    /// Admits one intent ([`super::AdmissionStore::admit`]); by default in a transaction
    /// of its own.
    fn admit(
        &self,
        req: super::AdmitRequest,
    ) -> impl Future<Output = StoreResult<super::AdmitOutcome>> + Send {
        self.write_new(req, |tx, req| Box::pin(super::admission::admit(tx, req)))
    }

    /// [`super::AdmissionStore::admit_and_claim`]; by default the store declines the claim.
    fn admit_and_claim(
        &self,
        req: super::AdmitRequest,
        next: super::ClaimRequest,
    ) -> impl Future<Output = StoreResult<(super::AdmitOutcome, Option<super::Claimed>)>> + Send
    {
        let _ = next;
        async move { Ok((Backend::admit(self, req).await?, None)) }
    }

    /// Claims up to `req.limit` ready steps ([`super::ExecutorStore::claim`]): each
    /// database picks and leases them its own way.
    fn claim(
        &self,
        req: super::ClaimRequest,
    ) -> impl Future<Output = StoreResult<Vec<super::Claimed>>> + Send;

    /// Ends an attempt ([`super::ExecutorStore::finish`]); by default in a transaction of
    /// its own.
    fn finish(
        &self,
        req: super::FinishRequest,
    ) -> impl Future<Output = StoreResult<super::FinishOutcome>> + Send {
        self.write(req, |tx, req| Box::pin(super::executor::finish(tx, req)))
    }

    /// [`super::ExecutorStore::finish_and_claim`]; by default the store declines the claim.
    fn finish_and_claim(
        &self,
        req: super::FinishRequest,
        next: super::ClaimRequest,
    ) -> impl Future<Output = StoreResult<(super::FinishOutcome, Option<super::Claimed>)>> + Send
    {
        let _ = next;
        async move { Ok((Backend::finish(self, req).await?, None)) }
    }

    /// [`super::ExecutorStore::watch`].
    fn watch(
        &self,
        wake: std::sync::Arc<tokio::sync::Notify>,
    ) -> impl Future<Output = StoreResult<bool>> + Send;

    /// A renewal a test makes fail before it reaches the database; none by default.
    fn renewal_refused(&self) -> StoreResult<()> {
        Ok(())
    }
}

/// Runs a transaction body that never waits (SQLite's: every statement runs on the
/// calling thread) to its end.
pub(crate) fn run_now<R>(body: TxFuture<'_, R>) -> StoreResult<R> {
    let mut body = body;
    match body.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(result) => result,
        Poll::Pending => Err(StoreError::never(
            "a SQLite transaction waited, which it never does",
        )),
    }
}
