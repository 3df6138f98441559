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

    async fn settle_notification(
        &self,
        seq: u64,
        owner: &str,
        update: NotificationUpdate,
        now: Millis,
    ) -> StoreResult<bool> {
        let c = plan::notification_columns(&update, now);
        let moved = sqlx::query(
            "UPDATE outbox SET state = $1, next_at = COALESCE($2, next_at),
                 delivered_to = COALESCE($3, delivered_to), last_error = $4, finished_at = $5,
                 attempts = attempts + $6, lease_owner = NULL, lease_until = NULL
             WHERE seq = $7 AND lease_owner = $8 AND state = 'pending'",
        )
        .bind(c.state)
        .bind(c.next_at)
        .bind(c.delivered_to)
        .bind(c.last_error)
        .bind(c.finished_at)
        .bind(c.attempts)
        .bind(seq as i64)
        .bind(owner)
        .execute(&self.pool)
        .await?;
        Ok(moved.rows_affected() == 1)
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
