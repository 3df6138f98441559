//! Reads whose statements differ between the databases only in their text (placeholders,
//! casts, collation), written once over sqlx's `Database`: each backend passes its own
//! [`ReadSql`] and its pool, and the binding and row mapping are shared.

use super::rows::{self, Columns};
use super::tx::Tx;
use super::{AttemptRecord, StepRecord, StoreError, StoreResult, WorkflowFilter, WorkflowRecord};
use crate::intent::{Receipt, TimelineEvent, WorkflowId};
use sqlx::{Database, Encode, Executor, IntoArguments, Pool, Type};

/// The statements of the shared reads, in one database's dialect. Parameters, in order:
/// - `steps`: workflow id;
/// - `receipts`: workflow id;
/// - `timeline`: workflow id, after (seq), limit;
/// - `timeline_latest`: workflow id, step (or NULL), before (seq, or NULL), limit;
/// - `attempts`: workflow id, step, after (number), limit.
pub(crate) struct ReadSql {
    /// How ids are compared: bytewise, as SQLite does (PostgreSQL's "C" collation).
    pub ids: &'static str,
    pub steps: &'static str,
    pub receipts: &'static str,
    pub timeline: &'static str,
    pub timeline_latest: &'static str,
    pub attempts: &'static str,
}

/// The shared reads, for any database that can bind and decode what they use; the
/// bounds are the trait's, so the bodies are written once.
pub(crate) trait SharedReads: Database + Sized
where
    Self::Row: Columns,
    <Self as Database>::Arguments: IntoArguments<Self>,
    for<'c> &'c mut Self::Connection: Executor<'c, Database = Self>,
    for<'q> i64: Encode<'q, Self> + Type<Self>,
    for<'q> Option<i64>: Encode<'q, Self> + Type<Self>,
    for<'q> &'q str: Encode<'q, Self> + Type<Self>,
    for<'q> Option<&'q str>: Encode<'q, Self> + Type<Self>,
{
    /// A workflow's steps, in definition order.
    async fn steps(
        pool: &Pool<Self>,
        sql: &ReadSql,
        id: &WorkflowId,
    ) -> StoreResult<Vec<StepRecord>> {
        let found = sqlx::query::<Self>(sqlx::AssertSqlSafe(sql.steps))
            .bind(id.as_str())
            .fetch_all(pool)
            .await
            .map_err(StoreError::from)?;
        found.iter().map(rows::step).collect()
    }

    /// A workflow's receipts, oldest first.
    async fn receipts(
        pool: &Pool<Self>,
        sql: &ReadSql,
        id: &WorkflowId,
    ) -> StoreResult<Vec<Receipt>> {
        let found = sqlx::query::<Self>(sqlx::AssertSqlSafe(sql.receipts))
            .bind(id.as_str())
            .fetch_all(pool)
            .await
            .map_err(StoreError::from)?;
        found.iter().map(rows::receipt).collect()
    }

    /// A page of the timeline after `after`.
    async fn timeline(
        pool: &Pool<Self>,
        sql: &ReadSql,
        id: &WorkflowId,
        after: u64,
        limit: u32,
    ) -> StoreResult<Vec<TimelineEvent>> {
        let found = sqlx::query::<Self>(sqlx::AssertSqlSafe(sql.timeline))
            .bind(id.as_str())
            .bind(after as i64)
            .bind(limit as i64)
            .fetch_all(pool)
            .await
            .map_err(StoreError::from)?;
        found.iter().map(rows::timeline_event).collect()
    }

    /// The latest `limit` events before `before` (of one step, if given), oldest first.
    async fn timeline_latest(
        pool: &Pool<Self>,
        sql: &ReadSql,
        id: &WorkflowId,
        step: Option<&str>,
        before: Option<u64>,
        limit: u32,
    ) -> StoreResult<Vec<TimelineEvent>> {
        let found = sqlx::query::<Self>(sqlx::AssertSqlSafe(sql.timeline_latest))
            .bind(id.as_str())
            .bind(step)
            .bind(before.map(|b| b as i64))
            .bind(limit as i64)
            .fetch_all(pool)
            .await
            .map_err(StoreError::from)?;
        // Read newest first to take the latest; shown oldest first.
        found.iter().rev().map(rows::timeline_event).collect()
    }

    /// A page of a step's attempts after attempt number `after`.
    async fn attempts(
        pool: &Pool<Self>,
        sql: &ReadSql,
        id: &WorkflowId,
        step: &str,
        after: u32,
        limit: u32,
    ) -> StoreResult<Vec<AttemptRecord>> {
        let found = sqlx::query::<Self>(sqlx::AssertSqlSafe(sql.attempts))
            .bind(id.as_str())
            .bind(step)
            .bind(after as i64)
            .bind(limit as i64)
            .fetch_all(pool)
            .await
            .map_err(StoreError::from)?;
        found.iter().map(rows::attempt).collect()
    }

    /// A page of workflows, newest first, filtered as `filter` says. Only the filters
    /// given are in the statement, so each can use its index.
    async fn list_workflows(
        pool: &Pool<Self>,
        sql: &ReadSql,
        filter: &WorkflowFilter,
    ) -> StoreResult<Vec<WorkflowRecord>> {
        let mut text = format!(
            "SELECT {} FROM workflows WHERE 1 = 1",
            rows::WORKFLOW_COLUMNS
        );
        let mut n = 0;
        let mut next = || {
            n += 1;
            format!("${n}")
        };
        for (given, column) in [
            (filter.subject.is_some(), "subject"),
            (filter.state.is_some(), "state"),
            (filter.workflow.is_some(), "workflow"),
        ] {
            if given {
                text.push_str(&format!(" AND {column} = {}", next()));
            }
        }
        if filter.before.is_some() {
            let (at, id) = (next(), next());
            text.push_str(&format!(
                " AND (created_at < {at} OR (created_at = {at} AND workflow_id{} < {id}))",
                sql.ids
            ));
        }
        text.push_str(&format!(
            " ORDER BY created_at DESC, workflow_id{} DESC LIMIT {}",
            sql.ids,
            next()
        ));
        let mut query = sqlx::query::<Self>(sqlx::AssertSqlSafe(text));
        if let Some(s) = &filter.subject {
            query = query.bind(s.0.as_str());
        }
        if let Some(s) = filter.state {
            query = query.bind(s.as_str());
        }
        if let Some(w) = &filter.workflow {
            query = query.bind(w.as_str());
        }
        if let Some((at, id)) = &filter.before {
            query = query.bind(*at as i64).bind(id.as_str());
        }
        let found = query
            .bind(i64::from(filter.limit))
            .fetch_all(pool)
            .await
            .map_err(StoreError::from)?;
        found.iter().map(rows::workflow).collect()
    }
}

impl SharedReads for sqlx::Sqlite {}
impl SharedReads for sqlx::Postgres {}

/// One workflow's record, if there is one.
pub(crate) async fn workflow<T: Tx>(
    tx: &mut T,
    id: &WorkflowId,
) -> StoreResult<Option<WorkflowRecord>> {
    let sql = tx.sql().actions.workflow;
    tx.row(sql, &super::plan::values![id.as_str()], |r| {
        rows::workflow(r)
    })
    .await
}

/// The [`crate::store::ReadStore`] methods that [`SharedReads`] serves, for an impl whose
/// pool is the field `$pool` and whose dialect is the constant `$sql`.
macro_rules! shared_read_methods {
    ($pool:ident, $sql:expr) => {
        async fn workflow(
            &self,
            id: &$crate::intent::WorkflowId,
        ) -> $crate::store::StoreResult<Option<$crate::store::WorkflowRecord>> {
            $crate::store::tx::Backend::read(self, id.clone(), |tx, id| {
                Box::pin($crate::store::reads::workflow(tx, id))
            })
            .await
        }

        async fn list_workflows(
            &self,
            filter: &$crate::store::WorkflowFilter,
        ) -> $crate::store::StoreResult<Vec<$crate::store::WorkflowRecord>> {
            $crate::store::reads::SharedReads::list_workflows(&self.$pool, &$sql, filter).await
        }

        async fn steps(
            &self,
            id: &$crate::intent::WorkflowId,
        ) -> $crate::store::StoreResult<Vec<$crate::store::StepRecord>> {
            $crate::store::reads::SharedReads::steps(&self.$pool, &$sql, id).await
        }

        async fn receipts(
            &self,
            id: &$crate::intent::WorkflowId,
        ) -> $crate::store::StoreResult<Vec<$crate::intent::Receipt>> {
            $crate::store::reads::SharedReads::receipts(&self.$pool, &$sql, id).await
        }

        async fn timeline(
            &self,
            id: &$crate::intent::WorkflowId,
            after: u64,
            limit: u32,
        ) -> $crate::store::StoreResult<Vec<$crate::intent::TimelineEvent>> {
            $crate::store::reads::SharedReads::timeline(&self.$pool, &$sql, id, after, limit).await
        }

        async fn timeline_latest(
            &self,
            id: &$crate::intent::WorkflowId,
            step: Option<&str>,
            before: Option<u64>,
            limit: u32,
        ) -> $crate::store::StoreResult<Vec<$crate::intent::TimelineEvent>> {
            $crate::store::reads::SharedReads::timeline_latest(
                &self.$pool,
                &$sql,
                id,
                step,
                before,
                limit,
            )
            .await
        }

        async fn attempts(
            &self,
            id: &$crate::intent::WorkflowId,
            step: &str,
            after: u32,
            limit: u32,
        ) -> $crate::store::StoreResult<Vec<$crate::store::AttemptRecord>> {
            $crate::store::reads::SharedReads::attempts(&self.$pool, &$sql, id, step, after, limit)
                .await
        }
    };
}
pub(crate) use shared_read_methods;
