//! The notification outbox, written once for every backend: rows claimed under a lease
//! (on PostgreSQL, by many hosts at once, each skipping the rows another holds), settled by
//! their holder, listed, expired and pruned.

pub(crate) mod plan;
/// The claim's statement, `$lock` the lock a backend takes on the rows.
macro_rules! claim {
    ($lock:literal) => {
        concat!(
            "UPDATE outbox SET lease_owner = $1, lease_until = $2
            WHERE seq IN (
                SELECT seq FROM outbox
                WHERE state = 'pending' AND next_at <= $3
                  AND (lease_until IS NULL OR lease_until < $3)
                ORDER BY next_at LIMIT $4",
            $lock,
            ")
            RETURNING seq, id, workflow_id, type, revision, body, state, attempts,
                created_at, next_at, delivered_to, last_error, finished_at"
        )
    };
}

/// The expiry's statement, `$lock` the lock a backend takes on the rows.
macro_rules! expire {
    ($lock:literal) => {
        concat!(
            "UPDATE outbox SET state = 'failed', finished_at = $1, last_error = $2
             WHERE seq IN (
                 SELECT seq FROM outbox
                 WHERE state = 'pending' AND created_at < $3
                   AND (lease_until IS NULL OR lease_until < $1)
                 LIMIT $4",
            $lock,
            ")"
        )
    };
}

pub(crate) mod postgres;

use super::plan::values;
use super::rows;
use super::tx::{Backend, Tx};
use super::{
    NotificationFilter, NotificationRecord, NotificationStore, NotificationUpdate, StoreError,
    StoreResult, WorkflowRecord,
};
use crate::intent::{Millis, WorkflowId};

/// The statements of the outbox. Parameters, in order:
/// - `due` (whether any row is due): now;
/// - `claim` (returns the claimed rows): owner, lease until, now, limit;
/// - `settle` (only a row still pending and held by the owner): state, next at, delivered
///   to, last error, finished at, attempts added, seq, owner;
/// - `expire`: now, the reason, created before, limit;
/// - `list`: workflow id or NULL, state or NULL, after seq, limit;
/// - `prune`: finished before, limit.
pub(crate) struct Sql {
    pub due: &'static str,
    pub claim: &'static str,
    pub settle: &'static str,
    pub expire: &'static str,
    pub list: &'static str,
    pub prune: &'static str,
}

/// The statements as both databases run them (see [`super::tx`] on placeholders); a
/// backend's module beside this one replaces the few that backend writes its own way.
pub(crate) const SQL: Sql = Sql {
    due: "SELECT 1 AS due FROM outbox WHERE state = 'pending' AND next_at <= $1
            AND (lease_until IS NULL OR lease_until < $1) LIMIT 1",
    claim: claim!(""),
    settle: "UPDATE outbox SET state = $1, next_at = COALESCE($2, next_at),
                 delivered_to = COALESCE($3, delivered_to), last_error = $4, finished_at = $5,
                 attempts = attempts + $6, lease_owner = NULL, lease_until = NULL
             WHERE seq = $7 AND lease_owner = $8 AND state = 'pending'",
    expire: expire!(""),
    list: "SELECT seq, id, workflow_id, type, revision, body, state, attempts,
               created_at, next_at, delivered_to, last_error, finished_at
           FROM outbox
           WHERE (CAST($1 AS TEXT) IS NULL OR workflow_id = $1)
             AND (CAST($2 AS TEXT) IS NULL OR state = $2)
             AND seq > $3
           ORDER BY seq LIMIT $4",
    prune: "DELETE FROM outbox WHERE seq IN (
                SELECT seq FROM outbox
                WHERE state <> 'pending' AND finished_at < $1 LIMIT $2)",
};

async fn due<T: Tx>(tx: &mut T, now: &Millis) -> StoreResult<bool> {
    let sql = tx.sql().notifications.due;
    Ok(tx
        .row(sql, &values![*now as i64], |_| Ok(()))
        .await?
        .is_some())
}

async fn claim<T: Tx>(
    tx: &mut T,
    (owner, now, lease_ms, limit): &(String, Millis, u64, u32),
) -> StoreResult<Vec<NotificationRecord>> {
    let sql = tx.sql().notifications.claim;
    let mut found = tx
        .rows(
            sql,
            &values![
                owner,
                (now + lease_ms) as i64,
                *now as i64,
                i64::from(*limit),
            ],
            |r| rows::notification(r),
        )
        .await?;
    found.sort_by_key(|n| n.seq);
    Ok(found)
}

async fn settle<T: Tx>(
    tx: &mut T,
    (owner, updates, now): &(String, Vec<(u64, NotificationUpdate)>, Millis),
) -> StoreResult<u64> {
    let sql = tx.sql().notifications.settle;
    let mut settled = 0;
    for (seq, update) in updates {
        let c = notification_columns(update, *now);
        settled += tx
            .exec(
                sql,
                &values![
                    c.state,
                    c.next_at,
                    c.delivered_to.as_deref(),
                    c.last_error.as_deref(),
                    c.finished_at,
                    c.attempts,
                    *seq as i64,
                    owner,
                ],
            )
            .await?;
    }
    Ok(settled)
}

async fn expire<T: Tx>(
    tx: &mut T,
    (before, now, limit): &(Millis, Millis, u32),
) -> StoreResult<u64> {
    let sql = tx.sql().notifications.expire;
    tx.exec(
        sql,
        &values![*now as i64, EXPIRED, *before as i64, i64::from(*limit)],
    )
    .await
}

async fn list<T: Tx>(
    tx: &mut T,
    filter: &NotificationFilter,
) -> StoreResult<Vec<NotificationRecord>> {
    let sql = tx.sql().notifications.list;
    tx.rows(
        sql,
        &values![
            filter.workflow_id.as_ref().map(|w| w.as_str()),
            filter.state.as_deref(),
            filter.after.unwrap_or(0) as i64,
            i64::from(filter.limit),
        ],
        |r| rows::notification(r),
    )
    .await
}

async fn prune<T: Tx>(tx: &mut T, (before, limit): &(Millis, u32)) -> StoreResult<u64> {
    let sql = tx.sql().notifications.prune;
    tx.exec(sql, &values![*before as i64, i64::from(*limit)])
        .await
}

/// The insert of one outbox row, in [`plan::NewNotification`]'s order (its time is also
/// the first try's).
static OUTBOX_ROW: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "{} VALUES ($1, $2, $3, $4, $5, $6, $6)",
        plan::OUTBOX_INSERT
    )
});

/// The workflow record a notification is made of.
static WORKFLOW: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "SELECT {} FROM workflows WHERE workflow_id = $1",
        rows::WORKFLOW_COLUMNS
    )
});

/// Queues a notification of a meaningful transition of workflow `id`, in the caller's
/// transaction (after the transition's own writes: the body tells the workflow as it is).
pub(crate) async fn outbox<T: Tx>(
    tx: &mut T,
    id: &WorkflowId,
    event: crate::notify::EventType,
    now: Millis,
) -> StoreResult<()> {
    let record = tx
        .row(WORKFLOW.as_str(), &values![id.as_str()], |r| {
            rows::workflow(r)
        })
        .await?
        .ok_or_else(|| StoreError::Corrupt(format!("workflow {id} vanished")))?;
    outbox_for(tx, &record, event, now).await
}

/// [`outbox`] for an approval, whose body also names it (`approval`).
pub(crate) async fn outbox_approval<T: Tx>(
    tx: &mut T,
    id: &WorkflowId,
    event: crate::notify::EventType,
    approval: &serde_json::Value,
    now: Millis,
) -> StoreResult<()> {
    let record = tx
        .row(WORKFLOW.as_str(), &values![id.as_str()], |r| {
            rows::workflow(r)
        })
        .await?
        .ok_or_else(|| StoreError::Corrupt(format!("workflow {id} vanished")))?;
    outbox_approval_for(tx, &record, event, approval, now).await
}

/// [`outbox_approval`] for a workflow record already at hand.
pub(crate) async fn outbox_approval_for<T: Tx>(
    tx: &mut T,
    record: &WorkflowRecord,
    event: crate::notify::EventType,
    approval: &serde_json::Value,
    now: Millis,
) -> StoreResult<()> {
    let n = plan::notification_with(record, event, now, Some(approval));
    insert(tx, &n).await
}

/// [`outbox`] for a workflow record already at hand.
pub(crate) async fn outbox_for<T: Tx>(
    tx: &mut T,
    record: &WorkflowRecord,
    event: crate::notify::EventType,
    now: Millis,
) -> StoreResult<()> {
    let n = plan::notification(record, event, now);
    insert(tx, &n).await
}

/// Inserts one outbox row.
async fn insert<T: Tx>(tx: &mut T, n: &plan::NewNotification) -> StoreResult<()> {
    tx.exec(
        OUTBOX_ROW.as_str(),
        &values![
            n.id.as_str(),
            n.workflow_id.as_str(),
            n.event,
            n.revision,
            n.body.as_str(),
            n.at,
        ],
    )
    .await?;
    Ok(())
}

impl<B: Backend> NotificationStore for B {
    async fn claim_notifications(
        &self,
        owner: &str,
        now: Millis,
        lease_ms: u64,
        limit: u32,
    ) -> StoreResult<Vec<NotificationRecord>> {
        // A read first: an idle outbox costs no write transaction.
        if !self.read(now, |tx, now| Box::pin(due(tx, now))).await? {
            return Ok(Vec::new());
        }
        self.write((owner.to_string(), now, lease_ms, limit), |tx, a| {
            Box::pin(claim(tx, a))
        })
        .await
    }

    async fn settle_notifications(
        &self,
        owner: &str,
        updates: Vec<(u64, NotificationUpdate)>,
        now: Millis,
    ) -> StoreResult<u64> {
        self.write((owner.to_string(), updates, now), |tx, a| {
            Box::pin(settle(tx, a))
        })
        .await
    }

    async fn expire_notifications(
        &self,
        before: Millis,
        now: Millis,
        limit: u32,
    ) -> StoreResult<u64> {
        self.write((before, now, limit), |tx, a| Box::pin(expire(tx, a)))
            .await
    }

    async fn notifications(
        &self,
        filter: NotificationFilter,
    ) -> StoreResult<Vec<NotificationRecord>> {
        self.read(filter, |tx, f| Box::pin(list(tx, f))).await
    }

    async fn prune_notifications(&self, before: Millis, limit: u32) -> StoreResult<u64> {
        self.write((before, limit), |tx, a| Box::pin(prune(tx, a)))
            .await
    }
}

/// Why a pending notification is recorded `failed` without a host's attempt.
const EXPIRED: &str = "not delivered within 24 hours: no endpoint of a running host took it";

/// The columns a notification's settlement writes.
struct NotificationColumns {
    state: &'static str,
    /// A retry's next time (kept otherwise).
    next_at: Option<i64>,
    /// JSON array of endpoints that answered (kept when `None`).
    delivered_to: Option<String>,
    last_error: Option<String>,
    finished_at: Option<i64>,
    /// Delivery attempts this settlement adds.
    attempts: i64,
}

fn notification_columns(update: &NotificationUpdate, now: Millis) -> NotificationColumns {
    use NotificationUpdate as U;
    let list = |to: &[String]| Some(serde_json::to_string(to).unwrap_or_else(|_| "[]".into()));
    let done = Some(now as i64);
    match update {
        U::Delivered { delivered_to } => NotificationColumns {
            state: "delivered",
            next_at: None,
            delivered_to: list(delivered_to),
            last_error: None,
            finished_at: done,
            attempts: i64::from(!delivered_to.is_empty()),
        },
        U::Suppressed { reason } => NotificationColumns {
            state: "suppressed",
            next_at: None,
            delivered_to: None,
            last_error: Some(reason.clone()),
            finished_at: done,
            attempts: 0,
        },
        U::Retry {
            next_at,
            error,
            delivered_to,
            attempted,
        } => NotificationColumns {
            state: "pending",
            next_at: Some(*next_at as i64),
            delivered_to: list(delivered_to),
            last_error: Some(error.clone()),
            finished_at: None,
            attempts: i64::from(*attempted),
        },
        U::Failed {
            error,
            delivered_to,
        } => NotificationColumns {
            state: "failed",
            next_at: None,
            delivered_to: list(delivered_to),
            last_error: Some(error.clone()),
            finished_at: done,
            attempts: 1,
        },
    }
}
