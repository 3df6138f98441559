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
    pub actions: super::actions::Sql,
    pub budgets: super::budgets::Sql,
    pub components: super::components::Sql,
    pub course: super::course::Sql,
    pub definitions: super::definitions::Sql,
    pub late: super::late::Sql,
    pub leases: super::leases::Sql,
    pub metrics: super::metrics::Sql,
    pub notifications: super::notifications::Sql,
    pub policies: super::policies::Sql,
    pub sessions: super::sessions::Sql,
}

/// A write whose execution is the backend's own (a multi-row insert written per dialect,
/// or a step of the executor still carried by each backend).
pub(crate) enum Write<'a> {
    /// Numbers `events` from the workflow's counter and appends them to its timeline.
    AppendEvents {
        workflow: &'a WorkflowId,
        now: Millis,
        events: &'a [NewEvent],
    },
    /// Records a receipt ([`super::plan::receipt_params`]).
    InsertReceipt(&'a [Param<'a>]),
    /// Makes ready every pending step whose dependencies have all succeeded.
    ReleaseDependents {
        workflow: &'a WorkflowId,
        now: Millis,
    },
    /// Puts a notification of `event` in the outbox, if the workflow's definition tells it.
    Notify {
        workflow: &'a WorkflowId,
        event: crate::notify::EventType,
        now: Millis,
    },
    /// Settles the workflow's course and moves its state as its steps now say, with the
    /// timeline entry, the notification and the tallies of the change.
    SettleState {
        workflow: &'a WorkflowId,
        current: WorkflowState,
        cancelled: bool,
        now: Millis,
    },
}

/// What an applied [`Write`] reports.
#[derive(Debug)]
pub(crate) enum Applied {
    Done,
    /// The steps made ready ([`Write::ReleaseDependents`]).
    Released(Vec<String>),
    /// The workflow's state after the write ([`Write::SettleState`]).
    State(WorkflowState),
}

impl Applied {
    pub(crate) fn released(self) -> StoreResult<Vec<String>> {
        match self {
            Applied::Released(steps) => Ok(steps),
            other => Err(StoreError::never(format!(
                "released steps expected, {other:?} applied"
            ))),
        }
    }

    pub(crate) fn state(self) -> StoreResult<WorkflowState> {
        match self {
            Applied::State(state) => Ok(state),
            other => Err(StoreError::never(format!(
                "a workflow state expected, {other:?} applied"
            ))),
        }
    }
}

/// One open transaction (or, for a read, one connection) of a backend.
pub(crate) trait Tx: Send {
    /// A row as the driver hands it over.
    type Row<'r>: Columns;

    /// This backend's statements.
    fn sql(&self) -> &'static Statements;

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
    fn apply(&mut self, write: Write<'_>) -> impl Future<Output = StoreResult<Applied>> + Send;

    /// Appends `events` to the workflow's timeline, then settles its course and moves its
    /// state as its steps now say: how every change of a workflow's steps ends.
    fn tell_and_settle(
        &mut self,
        workflow: &WorkflowId,
        now: Millis,
        events: &[NewEvent],
        current: WorkflowState,
        cancelled: bool,
    ) -> impl Future<Output = StoreResult<WorkflowState>> + Send {
        async move {
            self.apply(Write::AppendEvents {
                workflow,
                now,
                events,
            })
            .await?;
            self.apply(Write::SettleState {
                workflow,
                current,
                cancelled,
                now,
            })
            .await?
            .state()
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

/// A database that runs the shared transactions.
pub(crate) trait Backend: Send + Sync {
    type Tx<'t>: Tx + 't;

    /// Runs `body` over `arg` in one write transaction, answered after its commit. The body
    /// may run more than once (PostgreSQL runs a transaction it aborted again), so it
    /// borrows its argument.
    fn write<A, R>(
        &self,
        arg: A,
        body: TxBody<Self, A, R>,
    ) -> impl Future<Output = StoreResult<R>> + Send
    where
        A: Send + Sync + 'static,
        R: Send + 'static;

    /// Runs `body` over `arg` on a read connection (no transaction).
    fn read<A, R>(
        &self,
        arg: A,
        body: TxBody<Self, A, R>,
    ) -> impl Future<Output = StoreResult<R>> + Send
    where
        A: Send + Sync + 'static,
        R: Send + 'static;

    /// Tells the hosts sharing the database that work became ready (a committed write
    /// made a step ready): a no-op where one host owns the database.
    fn poke(&self);
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
