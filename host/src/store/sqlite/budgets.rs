//! Budget extensions (the steps they free), and the deadline warnings of workflows that
//! wait for a person.

use super::actions::{action_tx, reserve_key, store_answer};
use super::executor::{outbox, recompute_state};
use super::{SqliteStore, append_events};
use crate::intent::{Millis, WorkflowId};
use crate::store::rows;
use crate::store::{
    ActionAnswer, BudgetStore, ExtendAnswer, ExtendRequest, StoreError, StoreResult, plan,
};
use rusqlite::{Connection, OptionalExtension, params};

fn extend_tx(conn: &Connection, req: ExtendRequest) -> StoreResult<ExtendAnswer> {
    if let Some(existing) = action_tx(conn, &req.scope)? {
        return Ok(if existing.request_digest == req.request_digest {
            ExtendAnswer::Replayed(existing)
        } else {
            ExtendAnswer::KeyConflict
        });
    }
    let id = &req.scope.workflow_id;
    let record = conn
        .prepare_cached(&format!(
            "SELECT {} FROM workflows WHERE workflow_id = ?",
            rows::WORKFLOW_COLUMNS
        ))?
        .query_row([id.as_str()], |r| Ok(rows::workflow(r)))
        .optional()?
        .transpose()?
        .ok_or_else(|| StoreError::NotFound(format!("workflow {id}")))?;
    reserve_key(conn, &req.scope, &req.request_digest, req.now)?;
    let added = plan::added(&record.budget_added, &req.add);
    conn.prepare_cached("UPDATE workflows SET budget_added = ? WHERE workflow_id = ?")?
        .execute(params![
            serde_json::to_string(&added).map_err(|e| StoreError::Corrupt(e.to_string()))?,
            id.as_str()
        ])?;
    let used = record.budget_used();
    let stays = plan::still_exhausted(&req.base, &added, &used);
    let blocked: Vec<(String, String)> = {
        let mut stmt = conn.prepare_cached(
            "SELECT step, json_extract(blocked, '$.limit') FROM steps
             WHERE workflow_id = ? AND state = 'blocked'
               AND json_extract(blocked, '$.reason') = 'budget_exhausted'",
        )?;
        stmt.query_map([id.as_str()], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<Result<_, _>>()?
    };
    let released: Vec<String> = blocked
        .into_iter()
        .filter(|(_, limit)| !stays.contains(&limit.as_str()))
        .map(|(step, _)| step)
        .collect();
    for step in &released {
        conn.prepare_cached(
            "UPDATE steps SET state = 'ready', ready_at = ?, blocked = NULL, note = NULL
             WHERE workflow_id = ? AND step = ? AND state = 'blocked'",
        )?
        .execute(params![req.now as i64, id.as_str(), step])?;
    }
    append_events(conn, id, req.now, &[plan::extension_event(&req, &released)])?;
    recompute_state(conn, id, record.state, record.cancelled, req.now)?;
    let answer = plan::extension_answer(&req.base, &added, &used)?;
    store_answer(conn, &req.scope, &ActionAnswer::Applied(answer.clone()))?;
    Ok(ExtendAnswer::Applied(answer))
}

fn warn_tx(conn: &Connection, now: Millis) -> StoreResult<u64> {
    let due: Vec<(String, i64)> = {
        let mut stmt = conn.prepare_cached(
            "UPDATE workflows SET deadline_warned_at = ?1
             WHERE state = 'needs_review' AND deadline_warned_at IS NULL
               AND ?1 < deadline_at AND ?1 >= deadline_at - (deadline_at - created_at) / 5
             RETURNING workflow_id, deadline_at",
        )?;
        stmt.query_map([now as i64], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<Result<_, _>>()?
    };
    for (workflow_id, deadline_at) in &due {
        let id = WorkflowId(workflow_id.clone());
        append_events(conn, &id, now, &[plan::deadline_event(*deadline_at as u64)])?;
        outbox(
            conn,
            &id,
            crate::notify::EventType::DeadlineApproaching,
            now,
        )?;
    }
    Ok(due.len() as u64)
}

impl BudgetStore for SqliteStore {
    async fn extend_budget(&self, request: ExtendRequest) -> StoreResult<ExtendAnswer> {
        self.writer
            .write(move |conn| extend_tx(conn, request))
            .await
    }

    async fn warn_deadlines(&self, now: Millis) -> StoreResult<u64> {
        self.writer.write(move |conn| warn_tx(conn, now)).await
    }
}
