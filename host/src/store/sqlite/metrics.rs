//! What health checks and metrics scrapes read from SQLite, and the consistency check's
//! repair.

use super::SqliteStore;
use super::executor::recompute_state;
use super::read::workflow_tx;
use crate::intent::{Millis, NewEvent, WorkflowId, WorkflowState};
use crate::metrics::{ReadyQueue, Snapshot, Tally};
use crate::store::{MetricsStore, RetentionStore, STORY_TABLES, StoreError, StoreResult};
use rusqlite::params;

impl RetentionStore for SqliteStore {
    async fn purge_ended(
        &self,
        ended_before: Millis,
        now: Millis,
        limit: u32,
    ) -> StoreResult<Vec<WorkflowId>> {
        let due = self.points.with(|conn| {
            super::each_row(
                &mut *conn.prepare_cached(PURGEABLE)?,
                params![ended_before as i64, now as i64, i64::from(limit)],
                |r| Ok(r.get::<_, String>(0)?),
            )
        })?;
        if due.is_empty() {
            return Ok(Vec::new());
        }
        // Each one is looked at again inside the write: it may have been revived meanwhile.
        self.writer
            .write(move |conn| {
                let mut purged = Vec::new();
                for id in due {
                    let still: bool = conn
                        .prepare_cached(
                            "SELECT EXISTS (SELECT 1 FROM workflows WHERE workflow_id = ?1
                                AND ended_at IS NOT NULL AND ended_at < ?2)",
                        )?
                        .query_row(params![id, ended_before as i64], |r| r.get(0))?;
                    if !still {
                        continue;
                    }
                    for table in STORY_TABLES {
                        conn.prepare_cached(&format!("DELETE FROM {table} WHERE workflow_id = ?"))?
                            .execute([&id])?;
                    }
                    purged.push(WorkflowId(id));
                }
                Ok(purged)
            })
            .await
    }
}

/// Ended workflows past the retention, their key expired, no notification pending.
const PURGEABLE: &str = "SELECT workflow_id FROM workflows w
     WHERE ended_at IS NOT NULL AND ended_at < ?1
       AND state IN ('completed', 'failed', 'cancelled')
       AND NOT EXISTS (SELECT 1 FROM intent_keys k WHERE k.workflow_id = w.workflow_id
                         AND (k.expires_at IS NULL OR k.expires_at >= ?2))
       AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.workflow_id = w.workflow_id
                         AND o.state = 'pending')
     ORDER BY ended_at LIMIT ?3";

impl MetricsStore for SqliteStore {
    async fn ping(&self) -> StoreResult<()> {
        self.points.with(|conn| {
            conn.prepare_cached("SELECT 1")?
                .query_row([], |_| Ok(()))
                .map_err(StoreError::from)
        })
    }

    async fn snapshot(&self, now: Millis) -> StoreResult<Snapshot> {
        self.points.with(|conn| {
            let live_workflows = super::each_row(
                &mut *conn.prepare_cached(
                    "SELECT state, COUNT(*) FROM workflows
                     WHERE state IN ('running', 'needs_review') GROUP BY state ORDER BY state",
                )?,
                [],
                |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)? as u64)),
            )?;
            let (outcome_unknown, since): (i64, Option<i64>) = conn
                .prepare_cached(
                    "SELECT COUNT(*), MIN(uncertain_since) FROM steps WHERE state = 'outcome_unknown'",
                )?
                .query_row([], |r| Ok((r.get(0)?, r.get(1)?)))?;
            let ready = super::each_row(
                &mut *conn.prepare_cached(
                    "SELECT COALESCE(role, 'adapter'), COUNT(*), MIN(ready_at) FROM steps
                     WHERE state IN ('ready', 'failed_retryable') AND ready_at <= ?
                     GROUP BY COALESCE(role, 'adapter')",
                )?,
                [now as i64],
                |r| {
                    Ok(ReadyQueue {
                        kind: r.get(0)?,
                        count: r.get::<_, i64>(1)? as u64,
                        oldest_ready_at: r.get::<_, i64>(2)? as Millis,
                    })
                },
            )?;
            let tallies = super::each_row(
                &mut *conn.prepare_cached(
                    "SELECT metric, workflow, state, bucket, SUM(n), SUM(total) FROM outcome_tallies
                     GROUP BY metric, workflow, state, bucket",
                )?,
                [],
                |r| {
                    let metric: String = r.get(0)?;
                    Ok((
                        metric,
                        r.get::<_, String>(1)?,
                        r.get::<_, String>(2)?,
                        r.get::<_, i64>(3)?,
                        r.get::<_, i64>(4)?,
                        r.get::<_, i64>(5)?,
                    ))
                },
            )?;
            Ok(Snapshot {
                live_workflows,
                outcome_unknown: outcome_unknown as u64,
                outcome_unknown_since: since.map(|s| s as Millis),
                ready,
                tallies: tallies
                    .into_iter()
                    .filter_map(|(metric, workflow, state, bucket, n, total)| {
                        Tally::from_row(&metric, workflow, state, bucket, n, total)
                    })
                    .collect(),
            })
        })
    }

    async fn last_sweep(&self) -> StoreResult<Option<Millis>> {
        self.points.with(|conn| {
            let at: Option<i64> = conn
                .prepare_cached("SELECT MAX(swept_before) FROM recovery_sweeps")?
                .query_row([], |r| r.get(0))?;
            Ok(at.map(|a| a as Millis))
        })
    }

    async fn rebuild_state(
        &self,
        id: &WorkflowId,
        stored: WorkflowState,
        by: &str,
        now: Millis,
    ) -> StoreResult<Option<WorkflowState>> {
        let (id, by) = (id.clone(), by.to_string());
        self.writer
            .write(move |conn| {
                let Some(record) = workflow_tx(conn, &id)? else {
                    return Err(StoreError::NotFound(format!("workflow {id}")));
                };
                if record.state != stored {
                    return Ok(None);
                }
                super::append_events(conn, &id, now, &[NewEvent::repaired(stored, &by)])?;
                recompute_state(conn, &id, record.state, record.cancelled, now).map(Some)
            })
            .await
    }
}
