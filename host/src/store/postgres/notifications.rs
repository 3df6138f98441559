//! The notification outbox on PostgreSQL: many hosts claim disjoint rows (`SKIP LOCKED`)
//! under a lease, so each notification is delivered by one host at a time.

use super::PgStore;
use crate::intent::Millis;
use crate::store::rows::{self, NOTIFICATION_COLUMNS};
use crate::store::{
    NotificationFilter, NotificationRecord, NotificationStore, NotificationUpdate, StoreResult,
    plan,
};

impl NotificationStore for PgStore {
    async fn claim_notifications(
        &self,
        owner: &str,
        now: Millis,
        lease_ms: u64,
        limit: u32,
    ) -> StoreResult<Vec<NotificationRecord>> {
        let found = sqlx::query(sqlx::AssertSqlSafe(format!(
            "UPDATE outbox SET lease_owner = $1, lease_until = $2
             WHERE seq IN (
                 SELECT seq FROM outbox
                 WHERE state = 'pending' AND next_at <= $3
                   AND (lease_until IS NULL OR lease_until < $3)
                 ORDER BY next_at LIMIT $4
                 FOR UPDATE SKIP LOCKED)
             RETURNING {NOTIFICATION_COLUMNS}"
        )))
        .bind(owner)
        .bind((now + lease_ms) as i64)
        .bind(now as i64)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        let mut out = found
            .iter()
            .map(rows::notification)
            .collect::<StoreResult<Vec<_>>>()?;
        out.sort_by_key(|n| n.seq);
        Ok(out)
    }

    async fn settle_notifications(
        &self,
        owner: &str,
        updates: Vec<(u64, NotificationUpdate)>,
        now: Millis,
    ) -> StoreResult<u64> {
        // One statement for the batch: each row's columns as parallel arrays.
        let cols: Vec<_> = updates
            .iter()
            .map(|(seq, u)| (*seq as i64, plan::notification_columns(u, now)))
            .collect();
        let seqs: Vec<i64> = cols.iter().map(|(s, _)| *s).collect();
        let states: Vec<&str> = cols.iter().map(|(_, c)| c.state).collect();
        let next_at: Vec<Option<i64>> = cols.iter().map(|(_, c)| c.next_at).collect();
        let delivered_to: Vec<Option<&str>> = cols
            .iter()
            .map(|(_, c)| c.delivered_to.as_deref())
            .collect();
        let errors: Vec<Option<&str>> = cols.iter().map(|(_, c)| c.last_error.as_deref()).collect();
        let finished_at: Vec<Option<i64>> = cols.iter().map(|(_, c)| c.finished_at).collect();
        let attempts: Vec<i64> = cols.iter().map(|(_, c)| c.attempts).collect();
        let moved = sqlx::query(
            "UPDATE outbox o SET state = u.state, next_at = COALESCE(u.next_at, o.next_at),
                 delivered_to = COALESCE(u.delivered_to, o.delivered_to),
                 last_error = u.last_error, finished_at = u.finished_at,
                 attempts = o.attempts + u.attempts, lease_owner = NULL, lease_until = NULL
             FROM UNNEST($1::BIGINT[], $2::TEXT[], $3::BIGINT[], $4::TEXT[], $5::TEXT[],
                         $6::BIGINT[], $7::BIGINT[])
                  AS u(seq, state, next_at, delivered_to, last_error, finished_at, attempts)
             WHERE o.seq = u.seq AND o.lease_owner = $8 AND o.state = 'pending'",
        )
        .bind(&seqs)
        .bind(&states)
        .bind(&next_at)
        .bind(&delivered_to)
        .bind(&errors)
        .bind(&finished_at)
        .bind(&attempts)
        .bind(owner)
        .execute(&self.pool)
        .await?;
        Ok(moved.rows_affected())
    }

    async fn expire_notifications(
        &self,
        before: Millis,
        now: Millis,
        limit: u32,
    ) -> StoreResult<u64> {
        let done = sqlx::query(
            "UPDATE outbox SET state = 'failed', finished_at = $1, last_error = $2
             WHERE seq IN (
                 SELECT seq FROM outbox
                 WHERE state = 'pending' AND created_at < $3
                   AND (lease_until IS NULL OR lease_until < $1)
                 LIMIT $4
                 FOR UPDATE SKIP LOCKED)",
        )
        .bind(now as i64)
        .bind(plan::EXPIRED)
        .bind(before as i64)
        .bind(i64::from(limit))
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected())
    }

    async fn notifications(
        &self,
        filter: NotificationFilter,
    ) -> StoreResult<Vec<NotificationRecord>> {
        let found = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {NOTIFICATION_COLUMNS} FROM outbox
             WHERE ($1::TEXT IS NULL OR workflow_id = $1) AND ($2::TEXT IS NULL OR state = $2)
               AND seq > $3
             ORDER BY seq LIMIT $4"
        )))
        .bind(filter.workflow_id.as_ref().map(|w| w.as_str()))
        .bind(filter.state.as_deref())
        .bind(filter.after.unwrap_or(0) as i64)
        .bind(i64::from(filter.limit))
        .fetch_all(&self.pool)
        .await?;
        found.iter().map(rows::notification).collect()
    }

    async fn prune_notifications(&self, before: Millis, limit: u32) -> StoreResult<u64> {
        let done = sqlx::query(
            "DELETE FROM outbox WHERE seq IN (
                 SELECT seq FROM outbox
                 WHERE state <> 'pending' AND finished_at < $1 LIMIT $2)",
        )
        .bind(before as i64)
        .bind(i64::from(limit))
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected())
    }
}
