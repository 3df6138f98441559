//! The notification outbox on SQLite: claims under a lease, settlements, listings and
//! pruning.

use super::SqliteStore;
use crate::intent::Millis;
use crate::store::rows::{self, NOTIFICATION_COLUMNS};
use crate::store::{
    NotificationFilter, NotificationRecord, NotificationStore, NotificationUpdate, StoreResult,
    plan,
};
use rusqlite::{Connection, params};

fn claim_tx(
    conn: &Connection,
    owner: &str,
    now: Millis,
    lease_ms: u64,
    limit: u32,
) -> StoreResult<Vec<NotificationRecord>> {
    let mut stmt = conn.prepare_cached(&format!(
        "UPDATE outbox SET lease_owner = ?1, lease_until = ?2
         WHERE seq IN (
             SELECT seq FROM outbox
             WHERE state = 'pending' AND next_at <= ?3
               AND (lease_until IS NULL OR lease_until < ?3)
             ORDER BY next_at LIMIT ?4)
         RETURNING {NOTIFICATION_COLUMNS}"
    ))?;
    let mut found = super::each_row(
        &mut stmt,
        params![owner, (now + lease_ms) as i64, now as i64, i64::from(limit)],
        |r| rows::notification(r),
    )?;
    found.sort_by_key(|n| n.seq);
    Ok(found)
}

fn settle_tx(
    conn: &Connection,
    owner: &str,
    updates: &[(u64, NotificationUpdate)],
    now: Millis,
) -> StoreResult<u64> {
    let mut settled = 0;
    for (seq, update) in updates {
        settled += settle_one(conn, *seq, owner, update, now)? as u64;
    }
    Ok(settled)
}

fn settle_one(
    conn: &Connection,
    seq: u64,
    owner: &str,
    update: &NotificationUpdate,
    now: Millis,
) -> StoreResult<bool> {
    let c = plan::notification_columns(update, now);
    let moved = conn
        .prepare_cached(
            "UPDATE outbox SET state = ?1, next_at = COALESCE(?2, next_at),
                 delivered_to = COALESCE(?3, delivered_to), last_error = ?4, finished_at = ?5,
                 attempts = attempts + ?6, lease_owner = NULL, lease_until = NULL
             WHERE seq = ?7 AND lease_owner = ?8 AND state = 'pending'",
        )?
        .execute(params![
            c.state,
            c.next_at,
            c.delivered_to,
            c.last_error,
            c.finished_at,
            c.attempts,
            seq as i64,
            owner
        ])?;
    Ok(moved == 1)
}

impl NotificationStore for SqliteStore {
    async fn claim_notifications(
        &self,
        owner: &str,
        now: Millis,
        lease_ms: u64,
        limit: u32,
    ) -> StoreResult<Vec<NotificationRecord>> {
        // A read first: an idle outbox costs no write transaction.
        let due = self.points.with(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT 1 FROM outbox WHERE state = 'pending' AND next_at <= ?
                   AND (lease_until IS NULL OR lease_until < ?1) LIMIT 1",
            )?;
            Ok(stmt.exists([now as i64])?)
        })?;
        if !due {
            return Ok(Vec::new());
        }
        let owner = owner.to_string();
        self.writer
            .write(move |conn| claim_tx(conn, &owner, now, lease_ms, limit))
            .await
    }

    async fn settle_notifications(
        &self,
        owner: &str,
        updates: Vec<(u64, NotificationUpdate)>,
        now: Millis,
    ) -> StoreResult<u64> {
        let owner = owner.to_string();
        self.writer
            .write(move |conn| settle_tx(conn, &owner, &updates, now))
            .await
    }

    async fn expire_notifications(
        &self,
        before: Millis,
        now: Millis,
        limit: u32,
    ) -> StoreResult<u64> {
        self.writer
            .write(move |conn| {
                let n = conn
                    .prepare_cached(
                        "UPDATE outbox SET state = 'failed', finished_at = ?1, last_error = ?2
                         WHERE seq IN (
                             SELECT seq FROM outbox
                             WHERE state = 'pending' AND created_at < ?3
                               AND (lease_until IS NULL OR lease_until < ?1)
                             LIMIT ?4)",
                    )?
                    .execute(params![
                        now as i64,
                        plan::EXPIRED,
                        before as i64,
                        i64::from(limit)
                    ])?;
                Ok(n as u64)
            })
            .await
    }

    async fn notifications(
        &self,
        filter: NotificationFilter,
    ) -> StoreResult<Vec<NotificationRecord>> {
        self.points.with(|conn| {
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {NOTIFICATION_COLUMNS} FROM outbox
                 WHERE (?1 IS NULL OR workflow_id = ?1) AND (?2 IS NULL OR state = ?2)
                   AND seq > ?3
                 ORDER BY seq LIMIT ?4"
            ))?;
            super::each_row(
                &mut stmt,
                params![
                    filter.workflow_id.as_ref().map(|w| w.as_str()),
                    filter.state.as_deref(),
                    filter.after.unwrap_or(0) as i64,
                    i64::from(filter.limit)
                ],
                |r| rows::notification(r),
            )
        })
    }

    async fn prune_notifications(&self, before: Millis, limit: u32) -> StoreResult<u64> {
        self.writer
            .write(move |conn| {
                let n = conn
                    .prepare_cached(
                        "DELETE FROM outbox WHERE seq IN (
                             SELECT seq FROM outbox
                             WHERE state <> 'pending' AND finished_at < ? LIMIT ?)",
                    )?
                    .execute(params![before as i64, i64::from(limit)])?;
                Ok(n as u64)
            })
            .await
    }
}
