//! Policy versions, and the release of the steps an older version blocked.

use super::executor::recompute_state;
use super::{SqliteStore, append_events};
use crate::intent::{EventKind, Millis, NewEvent, WorkflowId, WorkflowState};
use crate::store::rows::parse;
use crate::store::{NewPolicy, PolicyStore, StoreResult, StoredPolicy};
use rusqlite::{Connection, OptionalExtension, params};

use crate::store::rows::{POLICY_COLUMNS as COLUMNS, policy};

fn latest_tx(conn: &Connection) -> StoreResult<Option<StoredPolicy>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM policies ORDER BY version DESC LIMIT 1"
    ))?;
    let mut found = stmt.query([])?;
    found.next()?.map(policy).transpose()
}

fn deploy_tx(conn: &Connection, p: NewPolicy) -> StoreResult<(StoredPolicy, bool)> {
    let latest = latest_tx(conn)?;
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
    conn.prepare_cached(&format!(
        "INSERT INTO policies ({COLUMNS}) VALUES (?, ?, ?, ?, ?)"
    ))?
    .execute(params![
        i64::from(stored.version),
        &stored.digest,
        &stored.document,
        &stored.author,
        stored.deployed_at as i64
    ])?;
    Ok((stored, true))
}

fn release_tx(conn: &Connection, version: u32, now: Millis) -> StoreResult<u64> {
    let blocked: Vec<(String, String)> = {
        let mut stmt = conn.prepare_cached(
            "SELECT workflow_id, step FROM steps
             WHERE state = 'blocked' AND json_extract(blocked, '$.reason') = 'policy_denied'
               AND json_extract(blocked, '$.policy_version') < ?",
        )?;
        stmt.query_map([i64::from(version)], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<Result<_, _>>()?
    };
    for (workflow_id, step) in &blocked {
        conn.prepare_cached(
            "UPDATE steps SET state = 'ready', ready_at = ?, blocked = NULL, note = NULL
             WHERE workflow_id = ? AND step = ? AND state = 'blocked'",
        )?
        .execute(params![now as i64, workflow_id, step])?;
        let id = WorkflowId(workflow_id.clone());
        let event = NewEvent::step(
            EventKind::Action,
            step,
            None::<&crate::intent::AttemptId>,
            format!(
                "Policy version {version} is in force: {step} is judged again by its next attempt"
            ),
        );
        append_events(conn, &id, now, &[event])?;
        let (state, cancel_on): (String, Option<String>) = conn
            .prepare_cached("SELECT state, cancel_on FROM workflows WHERE workflow_id = ?")?
            .query_row([workflow_id], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?
            .unwrap_or_else(|| (WorkflowState::Running.as_str().into(), None));
        recompute_state(conn, &id, parse(&state)?, cancel_on.is_some(), now)?;
    }
    Ok(blocked.len() as u64)
}

impl PolicyStore for SqliteStore {
    async fn deploy_policy(&self, policy: NewPolicy) -> StoreResult<(StoredPolicy, bool)> {
        self.writer.write(move |conn| deploy_tx(conn, policy)).await
    }

    async fn policies(&self) -> StoreResult<Vec<StoredPolicy>> {
        self.points.with(|conn| {
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {COLUMNS} FROM policies ORDER BY version DESC"
            ))?;
            super::each_row(&mut stmt, [], |r| policy(r))
        })
    }

    async fn latest_policy(&self) -> StoreResult<Option<StoredPolicy>> {
        self.points.with(|conn| latest_tx(conn))
    }

    async fn release_policy_blocks(&self, version: u32, now: Millis) -> StoreResult<u64> {
        self.writer
            .write(move |conn| release_tx(conn, version, now))
            .await
    }
}
