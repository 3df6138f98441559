//! Policy versions, and the release of the steps an older version blocked, written once
//! for every backend.

pub(crate) mod sqlite;

use super::actions::lock_workflow;
use super::plan::values;
use super::rows::{self, Columns};
use super::tx::{Backend, Tx};
use super::{NewPolicy, PolicyStore, StoreResult, StoredPolicy};
use crate::intent::{AttemptId, EventKind, Millis, NewEvent, WorkflowId};
use crate::policy::BLOCKED_REASON;

/// The statements of policies. Parameters, in order:
/// - `lock` (where the database needs one: one deployer at a time, so versions count up
///   without gaps or twins), `latest`, `all`: none;
/// - `insert`: version, digest, document, author, deployed at;
/// - `blocked_before`: the blocked reason of a policy denial, version;
/// - `release`: ready at, workflow id, step.
pub(crate) struct Sql {
    pub lock: Option<&'static str>,
    pub latest: &'static str,
    pub all: &'static str,
    pub insert: &'static str,
    pub blocked_before: &'static str,
    pub release: &'static str,
}

/// The statements as both databases run them (see [`super::tx`] on placeholders); a
/// backend's module beside this one replaces the few that backend writes its own way.
pub(crate) const SQL: Sql = Sql {
    lock: Some("LOCK TABLE policies IN SHARE ROW EXCLUSIVE MODE"),
    latest: "SELECT version, digest, document, author, deployed_at FROM policies
             ORDER BY version DESC LIMIT 1",
    all: "SELECT version, digest, document, author, deployed_at FROM policies
          ORDER BY version DESC",
    insert: "INSERT INTO policies (version, digest, document, author, deployed_at)
             VALUES ($1, $2, $3, $4, $5)",
    blocked_before: "SELECT workflow_id, step FROM steps
                     WHERE state = 'blocked' AND (blocked::jsonb ->> 'reason') = $1
                       AND (blocked::jsonb ->> 'policy_version')::BIGINT < $2
                     ORDER BY workflow_id",
    release: "UPDATE steps SET state = 'ready', ready_at = $1, blocked = NULL, note = NULL
              WHERE workflow_id = $2 AND step = $3 AND state = 'blocked'",
};

async fn latest<T: Tx>(tx: &mut T, _: &()) -> StoreResult<Option<StoredPolicy>> {
    let sql = tx.sql().policies.latest;
    tx.row(sql, &[], |r| rows::policy(r)).await
}

async fn all<T: Tx>(tx: &mut T, _: &()) -> StoreResult<Vec<StoredPolicy>> {
    let sql = tx.sql().policies.all;
    tx.rows(sql, &[], |r| rows::policy(r)).await
}

async fn deploy<T: Tx>(tx: &mut T, p: &NewPolicy) -> StoreResult<(StoredPolicy, bool)> {
    if let Some(lock) = tx.sql().policies.lock {
        tx.exec(lock, &[]).await?;
    }
    let latest = latest(tx, &()).await?;
    if let Some(same) = latest.as_ref().filter(|l| l.digest == p.digest) {
        return Ok((same.clone(), false));
    }
    let stored = StoredPolicy {
        version: latest.map_or(1, |l| l.version + 1),
        digest: p.digest.clone(),
        document: p.document.clone(),
        author: p.author.clone(),
        deployed_at: p.now,
    };
    let sql = tx.sql().policies.insert;
    tx.exec(
        sql,
        &values![
            i64::from(stored.version),
            &stored.digest,
            &stored.document,
            &stored.author,
            stored.deployed_at as i64,
        ],
    )
    .await?;
    Ok((stored, true))
}

async fn release<T: Tx>(tx: &mut T, &(version, now): &(u32, Millis)) -> StoreResult<u64> {
    let sql = &tx.sql().policies;
    let (blocked_before, release) = (sql.blocked_before, sql.release);
    let blocked = tx
        .rows(
            blocked_before,
            &values![BLOCKED_REASON, i64::from(version)],
            |r| Ok((WorkflowId(r.text("workflow_id")?), r.text("step")?)),
        )
        .await?;
    for (id, step) in &blocked {
        // The workflow row first, as every step change of a workflow takes it.
        let (state, cancelled) = lock_workflow(tx, id).await?;
        tx.exec(release, &values![now as i64, id.as_str(), step.as_str()])
            .await?;
        let events = [NewEvent::step(
            EventKind::Action,
            step,
            None::<&AttemptId>,
            format!(
                "Policy version {version} is in force: {step} is judged again by its next attempt"
            ),
        )];
        tx.tell_and_settle(id, now, &events, state, cancelled)
            .await?;
    }
    Ok(blocked.len() as u64)
}

impl<B: Backend> PolicyStore for B {
    async fn deploy_policy(&self, policy: NewPolicy) -> StoreResult<(StoredPolicy, bool)> {
        self.write(policy, |tx, p| Box::pin(deploy(tx, p))).await
    }

    async fn policies(&self) -> StoreResult<Vec<StoredPolicy>> {
        self.read((), |tx, a| Box::pin(all(tx, a))).await
    }

    async fn latest_policy(&self) -> StoreResult<Option<StoredPolicy>> {
        self.read((), |tx, a| Box::pin(latest(tx, a))).await
    }

    async fn release_policy_blocks(&self, version: u32, now: Millis) -> StoreResult<u64> {
        self.write((version, now), |tx, a| Box::pin(release(tx, a)))
            .await
    }
}
