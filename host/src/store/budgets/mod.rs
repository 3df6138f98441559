//! Budget extensions (the steps they free) and the deadline warnings of workflows that
//! wait for a person, written once for every backend.

pub(crate) mod plan;
pub(crate) mod sqlite;

use super::actions::{self, lock_workflow, store_answer};
use super::plan::values;
use super::rows::Columns;
use super::tx::{Backend, Tx, Write};
use super::{ActionAnswer, BudgetStore, ExtendAnswer, ExtendRequest, StoreResult};
use crate::budget::{BLOCKED_REASON, Limits};
use crate::intent::{Millis, WorkflowId};

/// The statements of budgets. Parameters, in order:
/// - `set_added`: the added amounts (JSON), workflow id;
/// - `blocked_by_budget`: workflow id, the blocked reason of an exhausted budget;
/// - `release`: ready at, workflow id, step;
/// - `warn_due` (marks and returns `workflow_id`, `deadline_at` of each workflow waiting
///   for review whose deadline is a fifth of its span away): now.
/// - `warn_retention_due` (marks and returns `workflow_id`, `step`, `key_remembered_until`
///   of each step waiting for a person whose provider forgets its key within a fifth of
///   the time it remembers it): now.
pub(crate) struct Sql {
    pub set_added: &'static str,
    pub blocked_by_budget: &'static str,
    pub release: &'static str,
    pub warn_due: &'static str,
    pub warn_retention_due: &'static str,
}

/// The statements as both databases run them (see [`super::tx`] on placeholders); a
/// backend's module beside this one replaces the few that backend writes its own way.
pub(crate) const SQL: Sql = Sql {
    set_added: "UPDATE workflows SET budget_added = $1 WHERE workflow_id = $2",
    blocked_by_budget: "SELECT step, (blocked::jsonb ->> 'limit') AS lim FROM steps
                        WHERE workflow_id = $1 AND state = 'blocked'
                          AND (blocked::jsonb ->> 'reason') = $2",
    release: "UPDATE steps SET state = 'ready', ready_at = $1, blocked = NULL, note = NULL
              WHERE workflow_id = $2 AND step = $3 AND state = 'blocked'",
    warn_due: "UPDATE workflows SET deadline_warned_at = $1
               WHERE state = 'needs_review' AND deadline_warned_at IS NULL
                 AND $1 < deadline_at AND $1 >= deadline_at - (deadline_at - created_at) / 5
               RETURNING workflow_id, deadline_at",
    warn_retention_due: "UPDATE steps SET retention_warned_at = $1
                         WHERE state = 'outcome_unknown' AND retention_warned_at IS NULL
                           AND key_remembered_until IS NOT NULL AND key_sent_at IS NOT NULL
                           AND $1 < key_remembered_until
                           AND $1 >= key_remembered_until
                                     - (key_remembered_until - key_sent_at) / 5
                         RETURNING workflow_id, step, key_remembered_until",
};

async fn extend<T: Tx>(tx: &mut T, req: &ExtendRequest) -> StoreResult<ExtendAnswer> {
    let s = &req.scope;
    if let Err(existing) = actions::take(tx, s, &req.request_digest, req.now).await? {
        return Ok(if existing.request_digest == req.request_digest {
            ExtendAnswer::Replayed(existing)
        } else {
            ExtendAnswer::KeyConflict
        });
    }
    let id = &s.workflow_id;
    // The workflow row's lock orders this against every step change and every charge.
    lock_workflow(tx, id).await?;
    let record = actions::workflow(tx, id).await?;
    let sql = &tx.sql().budgets;
    let (set_added, blocked, release) = (sql.set_added, sql.blocked_by_budget, sql.release);
    let added = record.budget_added.plus(&req.add);
    tx.exec(
        set_added,
        &values![&crate::store::plan::json_text(&added)?, id.as_str()],
    )
    .await?;
    let used = record.budget_used();
    let stays = Limits::of(&req.base, &added).still_exhausted(&used);
    let blocked = tx
        .rows(blocked, &values![id.as_str(), BLOCKED_REASON], |r| {
            Ok((r.text("step")?, r.opt_text("lim")?.unwrap_or_default()))
        })
        .await?;
    let released: Vec<String> = blocked
        .into_iter()
        .filter(|(_, limit)| !stays.contains(&limit.as_str()))
        .map(|(step, _)| step)
        .collect();
    for step in &released {
        tx.exec(
            release,
            &values![req.now as i64, id.as_str(), step.as_str()],
        )
        .await?;
    }
    let events = [plan::extension_event(req, &released)];
    tx.tell_and_settle(id, req.now, &events, record.state, record.cancelled)
        .await?;
    let answer = plan::extension_answer(&req.base, &added, &used)?;
    store_answer(tx, s, &ActionAnswer::Applied(answer.clone())).await?;
    Ok(ExtendAnswer::Applied(answer))
}

async fn warn<T: Tx>(tx: &mut T, now: &Millis) -> StoreResult<u64> {
    let sql = tx.sql().budgets.warn_due;
    let due = tx
        .rows(sql, &values![*now as i64], |r| {
            Ok((WorkflowId(r.text("workflow_id")?), r.uint("deadline_at")?))
        })
        .await?;
    for (id, deadline_at) in &due {
        let events = [plan::deadline_event(*deadline_at)];
        tx.apply(Write::AppendEvents {
            workflow: id,
            now: *now,
            events: &events,
        })
        .await?;
        super::notifications::outbox(tx, id, crate::notify::EventType::DeadlineApproaching, *now)
            .await?;
    }
    let sql = tx.sql().budgets.warn_retention_due;
    let retention = tx
        .rows(sql, &values![*now as i64], |r| {
            Ok((
                WorkflowId(r.text("workflow_id")?),
                r.text("step")?,
                r.uint("key_remembered_until")?,
            ))
        })
        .await?;
    for (id, step, until) in &retention {
        let events = [plan::retention_event(step, *until)];
        tx.apply(Write::AppendEvents {
            workflow: id,
            now: *now,
            events: &events,
        })
        .await?;
        super::notifications::outbox(
            tx,
            id,
            crate::notify::EventType::RetentionDeadlineApproaching,
            *now,
        )
        .await?;
    }
    Ok((due.len() + retention.len()) as u64)
}

impl<B: Backend> BudgetStore for B {
    async fn extend_budget(&self, request: ExtendRequest) -> StoreResult<ExtendAnswer> {
        self.write(request, |tx, req| Box::pin(extend(tx, req)))
            .await
    }

    async fn warn_deadlines(&self, now: Millis) -> StoreResult<u64> {
        self.write(now, |tx, now| Box::pin(warn(tx, now))).await
    }
}
