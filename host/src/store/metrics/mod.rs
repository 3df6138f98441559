//! What health checks and metrics scrapes read, the consistency check's repair, and the
//! purge of ended workflows past their retention, written once for every backend.

/// The purgeable workflows' statement, `$lock` the lock a backend takes on them.
macro_rules! purgeable {
    ($lock:literal) => {
        concat!(
            "SELECT workflow_id FROM workflows w
                             WHERE ended_at IS NOT NULL AND ended_at < $1
                               AND state IN ('completed', 'failed', 'cancelled')
                               AND NOT EXISTS (SELECT 1 FROM intent_keys k WHERE k.workflow_id = w.workflow_id
                                                 AND (k.expires_at IS NULL OR k.expires_at >= $2))
                               AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.workflow_id = w.workflow_id
                                                 AND o.state = 'pending')
                             ORDER BY ended_at LIMIT $3",
            $lock
        )
    };
}

pub(crate) mod postgres;

use super::actions::{self, lock_workflow};
use super::plan::values;
use super::rows::Columns;
use super::tx::{Backend, Tx};
use super::{MetricsStore, RetentionStore, StoreResult};
use crate::intent::{Millis, NewEvent, WorkflowId, WorkflowState};
use crate::metrics::{ReadyQueue, Snapshot, Tally};

/// The statements of metrics and retention. Parameters, in order:
/// - `ping`, `live`, `unknown`, `tallies`, `last_sweep`: none; `ready`: now;
/// - `purgeable` (ended workflows past the retention, their key expired, no notification
///   pending; locked where the database can, skipping those another host holds): ended
///   before, now, limit;
/// - `purge` (a workflow's story, children first): workflow id.
pub(crate) struct Sql {
    pub ping: &'static str,
    pub live: &'static str,
    pub unknown: &'static str,
    pub ready: &'static str,
    pub tallies: &'static str,
    pub last_sweep: &'static str,
    pub approvals_pending: &'static str,
    pub purgeable: &'static str,
    pub purge: &'static [&'static str],
}

/// The statements as both databases run them (see [`super::tx`] on placeholders); a
/// backend's module beside this one replaces the few that backend writes its own way.
pub(crate) const SQL: Sql = Sql {
    ping: "SELECT 1 AS one",
    live: "SELECT state, COUNT(*) AS n FROM workflows
           WHERE state IN ('running', 'needs_review') GROUP BY state ORDER BY state",
    unknown: "SELECT COUNT(*) AS n, MIN(uncertain_since) AS since FROM steps
              WHERE state = 'outcome_unknown'",
    ready: "SELECT COALESCE(role, 'adapter') AS kind, COUNT(*) AS n, MIN(ready_at) AS oldest
            FROM steps
            WHERE state IN ('ready', 'failed_retryable') AND ready_at <= $1
            GROUP BY COALESCE(role, 'adapter')",
    tallies: "SELECT metric, workflow, state, CAST(bucket AS BIGINT) AS bucket,
                  CAST(SUM(n) AS BIGINT) AS n, CAST(SUM(total) AS BIGINT) AS total
              FROM outcome_tallies GROUP BY metric, workflow, state, bucket",
    last_sweep: "SELECT MAX(swept_before) AS at FROM recovery_sweeps",
    approvals_pending: "SELECT COUNT(*) AS n FROM approvals a
                        JOIN steps s ON s.workflow_id = a.workflow_id AND s.step = a.step
                        WHERE a.outcome IS NULL AND s.state = 'awaiting_approval'",
    purgeable: purgeable!(""),
    purge: &[
        "DELETE FROM timeline WHERE workflow_id = $1",
        "DELETE FROM attempts WHERE workflow_id = $1",
        "DELETE FROM receipts WHERE workflow_id = $1",
        "DELETE FROM step_deps WHERE workflow_id = $1",
        "DELETE FROM steps WHERE workflow_id = $1",
        "DELETE FROM operator_actions WHERE workflow_id = $1",
        "DELETE FROM cancellations WHERE workflow_id = $1",
        "DELETE FROM revisions WHERE workflow_id = $1",
        "DELETE FROM migrations WHERE workflow_id = $1",
        "DELETE FROM approvals WHERE workflow_id = $1",
        "DELETE FROM outbox WHERE workflow_id = $1",
        "DELETE FROM intent_keys WHERE workflow_id = $1",
        "DELETE FROM workflow_inputs WHERE workflow_id = $1",
        "DELETE FROM workflows WHERE workflow_id = $1",
    ],
};

async fn ping<T: Tx>(tx: &mut T, _: &()) -> StoreResult<()> {
    let sql = tx.sql().metrics.ping;
    tx.rows(sql, &[], |_| Ok(())).await?;
    Ok(())
}

async fn snapshot<T: Tx>(tx: &mut T, now: &Millis) -> StoreResult<Snapshot> {
    let sql = &tx.sql().metrics;
    let (live, unknown, ready, tallies) = (sql.live, sql.unknown, sql.ready, sql.tallies);
    let live_workflows = tx
        .rows(live, &[], |r| Ok((r.text("state")?, r.uint("n")?)))
        .await?;
    let (outcome_unknown, outcome_unknown_since) = tx
        .row(unknown, &[], |r| Ok((r.uint("n")?, r.opt_uint("since")?)))
        .await?
        .unwrap_or_default();
    let ready = tx
        .rows(ready, &values![*now as i64], |r| {
            Ok(ReadyQueue {
                kind: r.text("kind")?,
                count: r.uint("n")?,
                oldest_ready_at: r.uint("oldest")?,
            })
        })
        .await?;
    let tallies = tx
        .rows(tallies, &[], |r| {
            Ok(Tally::from_row(
                &r.text("metric")?,
                r.text("workflow")?,
                r.text("state")?,
                r.int("bucket")?,
                r.int("n")?,
                r.int("total")?,
            ))
        })
        .await?;
    let pending = tx.sql().metrics.approvals_pending;
    let approvals_pending = tx
        .row(pending, &[], |r| r.uint("n"))
        .await?
        .unwrap_or_default();
    let adapters = super::gates::view(tx, now)
        .await?
        .into_iter()
        .map(|a| crate::metrics::AdapterGauge {
            adapter: a.adapter,
            in_flight: a.in_flight,
            paused: a.pause.map(|p| p.cause),
        })
        .collect();
    Ok(Snapshot {
        adapters,
        live_workflows,
        outcome_unknown,
        outcome_unknown_since,
        ready,
        tallies: tallies.into_iter().flatten().collect(),
        approvals_pending,
    })
}

async fn last_sweep<T: Tx>(tx: &mut T, _: &()) -> StoreResult<Option<Millis>> {
    let sql = tx.sql().metrics.last_sweep;
    Ok(tx.row(sql, &[], |r| r.opt_uint("at")).await?.flatten())
}

async fn rebuild<T: Tx>(
    tx: &mut T,
    (id, stored, by, now): &(WorkflowId, WorkflowState, String, Millis),
) -> StoreResult<Option<WorkflowState>> {
    // The workflow row's lock orders this against every step change.
    lock_workflow(tx, id).await?;
    let record = actions::workflow(tx, id).await?;
    if record.state != *stored {
        return Ok(None);
    }
    let events = [NewEvent::repaired(*stored, by)];
    let state = tx
        .tell_and_settle(id, *now, &events, record.state, record.cancelled)
        .await?;
    Ok(Some(state))
}

async fn purgeable<T: Tx>(
    tx: &mut T,
    &(ended_before, now, limit): &(Millis, Millis, u32),
) -> StoreResult<Vec<WorkflowId>> {
    let sql = tx.sql().metrics.purgeable;
    tx.rows(
        sql,
        &values![ended_before as i64, now as i64, i64::from(limit)],
        |r| Ok(WorkflowId(r.text("workflow_id")?)),
    )
    .await
}

/// Deletes a batch of purgeable workflows, each judged again inside the write (one may have
/// been revived since it was seen).
async fn purge<T: Tx>(tx: &mut T, arg: &(Millis, Millis, u32)) -> StoreResult<Vec<WorkflowId>> {
    let due = purgeable(tx, arg).await?;
    let statements = tx.sql().metrics.purge;
    for id in &due {
        for statement in statements {
            tx.exec(statement, &values![id.as_str()]).await?;
        }
    }
    Ok(due)
}

/// Rows each tally is spread over, so that concurrent ends rarely wait on one row's lock
/// (PostgreSQL; the tallies are read summed over them).
pub(crate) const TALLY_SHARDS: u64 = 16;

/// The shard of the tallies a lone end of workflow `id` adds to: any spread will do, and
/// the id's hash needs no random source.
pub(crate) fn shard_of(id: &WorkflowId) -> i32 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    id.as_str().hash(&mut h);
    (h.finish() % TALLY_SHARDS) as i32
}

/// Ended workflows to add to the metrics' tallies (see [`crate::metrics`]), summed by row
/// and kept in key order, so that two transactions adding to the same rows never wait for
/// each other in a cycle.
#[derive(Debug, Default)]
pub(crate) struct Tallies {
    rows: std::collections::BTreeMap<(&'static str, String, &'static str, u32), (i64, i64)>,
}

/// One row of [`Tallies`]: metric, workflow, state, bucket, count, total.
pub(crate) type TallyRow<'a> = (&'static str, &'a str, &'static str, u32, i64, i64);

impl Tallies {
    /// Adds the end of `record` in `state` at `now`.
    pub(crate) fn end(
        &mut self,
        record: &super::WorkflowRecord,
        state: WorkflowState,
        now: Millis,
    ) {
        let ends =
            crate::metrics::tallies_of_end(record.created_at, now, u64::from(record.attempts_used));
        for (metric, bucket, value) in ends {
            let row = self
                .rows
                .entry((
                    metric.as_str(),
                    record.workflow.clone(),
                    state.as_str(),
                    bucket,
                ))
                .or_default();
            row.0 += 1;
            row.1 += value as i64;
        }
    }

    /// Adds an approval of a `workflow` decided with `outcome` after waiting `wait_ms`.
    pub(crate) fn approval(&mut self, workflow: &str, outcome: &'static str, wait_ms: u64) {
        let metric = crate::metrics::TallyMetric::ApprovalWaitMs;
        let row = self
            .rows
            .entry((
                metric.as_str(),
                workflow.to_string(),
                outcome,
                metric.bucket(wait_ms),
            ))
            .or_default();
        row.0 += 1;
        row.1 += wait_ms as i64;
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    pub(crate) fn len(&self) -> usize {
        self.rows.len()
    }

    /// The rows to add, in key order.
    pub(crate) fn rows(&self) -> impl Iterator<Item = TallyRow<'_>> {
        self.rows
            .iter()
            .map(|((m, w, s, b), (n, t))| (*m, w.as_str(), *s, *b, *n, *t))
    }
}

impl<B: Backend> MetricsStore for B {
    async fn ping(&self) -> StoreResult<()> {
        self.read((), |tx, a| Box::pin(ping(tx, a))).await
    }

    async fn snapshot(&self, now: Millis) -> StoreResult<Snapshot> {
        self.read(now, |tx, now| Box::pin(snapshot(tx, now))).await
    }

    async fn last_sweep(&self) -> StoreResult<Option<Millis>> {
        self.read((), |tx, a| Box::pin(last_sweep(tx, a))).await
    }

    async fn rebuild_state(
        &self,
        id: &WorkflowId,
        stored: WorkflowState,
        by: &str,
        now: Millis,
    ) -> StoreResult<Option<WorkflowState>> {
        self.write((id.clone(), stored, by.to_string(), now), |tx, a| {
            Box::pin(rebuild(tx, a))
        })
        .await
    }
}

impl<B: Backend> RetentionStore for B {
    async fn purge_ended(
        &self,
        ended_before: Millis,
        now: Millis,
        limit: u32,
    ) -> StoreResult<Vec<WorkflowId>> {
        let arg = (ended_before, now, limit);
        // A read first: a retention tick with nothing to purge costs no write transaction.
        if self
            .read(arg, |tx, a| Box::pin(purgeable(tx, a)))
            .await?
            .is_empty()
        {
            return Ok(Vec::new());
        }
        self.write(arg, |tx, a| Box::pin(purge(tx, a))).await
    }
}
