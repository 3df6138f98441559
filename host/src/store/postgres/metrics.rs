//! What health checks and metrics scrapes read from PostgreSQL.

use super::PgStore;
use crate::intent::Millis;
use crate::metrics::{ReadyQueue, Snapshot, Tally, TallyMetric};
use crate::store::{MetricsStore, StoreResult};

impl MetricsStore for PgStore {
    async fn ping(&self) -> StoreResult<()> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    async fn snapshot(&self, now: Millis) -> StoreResult<Snapshot> {
        let live_workflows: Vec<(String, i64)> = sqlx::query_as(
            "SELECT state, COUNT(*) FROM workflows
             WHERE state IN ('running', 'needs_review') GROUP BY state ORDER BY state",
        )
        .fetch_all(&self.pool)
        .await?;
        let (outcome_unknown, since): (i64, Option<i64>) = sqlx::query_as(
            "SELECT COUNT(*), MIN(uncertain_since) FROM steps WHERE state = 'outcome_unknown'",
        )
        .fetch_one(&self.pool)
        .await?;
        let ready: Vec<(String, i64, i64)> = sqlx::query_as(
            "SELECT COALESCE(role, 'adapter'), COUNT(*), MIN(ready_at) FROM steps
             WHERE state IN ('ready', 'failed_retryable') AND ready_at <= $1
             GROUP BY COALESCE(role, 'adapter')",
        )
        .bind(now as i64)
        .fetch_all(&self.pool)
        .await?;
        let tallies: Vec<(String, String, String, i32, i64, i64)> = sqlx::query_as(
            "SELECT metric, workflow, state, bucket, SUM(n)::BIGINT, SUM(total)::BIGINT
             FROM outcome_tallies GROUP BY metric, workflow, state, bucket",
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(Snapshot {
            live_workflows: live_workflows
                .into_iter()
                .map(|(state, n)| (state, n as u64))
                .collect(),
            outcome_unknown: outcome_unknown as u64,
            outcome_unknown_since: since.map(|s| s as Millis),
            ready: ready
                .into_iter()
                .map(|(kind, count, oldest)| ReadyQueue {
                    kind,
                    count: count as u64,
                    oldest_ready_at: oldest as Millis,
                })
                .collect(),
            tallies: tallies
                .into_iter()
                .filter_map(|(metric, workflow, state, bucket, n, total)| {
                    Some(Tally {
                        metric: TallyMetric::parse(&metric)?,
                        workflow,
                        state,
                        bucket: bucket as u32,
                        n: n as u64,
                        total: total as u64,
                    })
                })
                .collect(),
        })
    }
}
