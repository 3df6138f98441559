//! Policy versions, and the release of the steps an older version blocked.

use super::executor::recompute_state;
use super::{PgResult, PgStore, append_events, lock_workflow, transaction};
use crate::intent::{EventKind, Millis, NewEvent, WorkflowId};
use crate::store::{NewPolicy, PolicyStore, StoreResult, StoredPolicy};
use sqlx::postgres::PgConnection;

use crate::store::rows::{POLICY_COLUMNS as COLUMNS, policy};

async fn latest_on(conn: &mut PgConnection) -> PgResult<Option<StoredPolicy>> {
    let row = sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT {COLUMNS} FROM policies ORDER BY version DESC LIMIT 1"
    )))
    .fetch_optional(&mut *conn)
    .await?;
    Ok(row.as_ref().map(policy).transpose()?)
}

async fn deploy_tx(conn: &mut PgConnection, p: NewPolicy) -> PgResult<(StoredPolicy, bool)> {
    // One deployer at a time: versions count up without gaps or twins.
    sqlx::query("LOCK TABLE policies IN SHARE ROW EXCLUSIVE MODE")
        .execute(&mut *conn)
        .await?;
    let latest = latest_on(conn).await?;
    if let Some(same) = latest.as_ref().filter(|l| l.digest == p.digest) {
        return Ok((same.clone(), false));
    }
    let stored = StoredPolicy {
        version: latest.map_or(1, |l| l.version + 1),
        digest: p.digest,
        document: p.document,
        author: p.author,
        deployed_at: p.now,
    };
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "INSERT INTO policies ({COLUMNS}) VALUES ($1, $2, $3, $4, $5)"
    )))
    .bind(i64::from(stored.version))
    .bind(&stored.digest)
    .bind(&stored.document)
    .bind(&stored.author)
    .bind(stored.deployed_at as i64)
    .execute(&mut *conn)
    .await?;
    Ok((stored, true))
}

async fn release_tx(conn: &mut PgConnection, version: u32, now: Millis) -> PgResult<u64> {
    let blocked: Vec<(String, String)> = sqlx::query_as(
        "SELECT workflow_id, step FROM steps
         WHERE state = 'blocked' AND (blocked::jsonb ->> 'reason') = 'policy_denied'
           AND (blocked::jsonb ->> 'policy_version')::BIGINT < $1
         ORDER BY workflow_id",
    )
    .bind(i64::from(version))
    .fetch_all(&mut *conn)
    .await?;
    for (workflow_id, step) in &blocked {
        let id = WorkflowId(workflow_id.clone());
        // The workflow row first, as every step change of a workflow takes it.
        let (state, cancelled) = lock_workflow(conn, &id).await?;
        sqlx::query(
            "UPDATE steps SET state = 'ready', ready_at = $1, blocked = NULL, note = NULL
             WHERE workflow_id = $2 AND step = $3 AND state = 'blocked'",
        )
        .bind(now as i64)
        .bind(workflow_id)
        .bind(step)
        .execute(&mut *conn)
        .await?;
        let event = NewEvent::step(
            EventKind::Action,
            step,
            None::<&crate::intent::AttemptId>,
            format!(
                "Policy version {version} is in force: {step} is judged again by its next attempt"
            ),
        );
        append_events(conn, &id, now, &[event]).await?;
        recompute_state(conn, &id, state, cancelled, now).await?;
    }
    Ok(blocked.len() as u64)
}

impl PolicyStore for PgStore {
    async fn deploy_policy(&self, policy: NewPolicy) -> StoreResult<(StoredPolicy, bool)> {
        transaction!(self.pool, |conn| deploy_tx(conn, policy.clone()))
    }

    async fn policies(&self) -> StoreResult<Vec<StoredPolicy>> {
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {COLUMNS} FROM policies ORDER BY version DESC"
        )))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(policy).collect()
    }

    async fn latest_policy(&self) -> StoreResult<Option<StoredPolicy>> {
        let mut conn = self.pool.acquire().await?;
        Ok(latest_on(&mut conn).await?)
    }

    async fn release_policy_blocks(&self, version: u32, now: Millis) -> StoreResult<u64> {
        transaction!(self.pool, |conn| release_tx(conn, version, now))
    }
}
