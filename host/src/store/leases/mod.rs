//! Leases beyond their claim, written once for every backend: a renewal (only by the
//! lease's holder), the release of a stopping host's leases, the record of a complete
//! recovery sweep, and when the next step falls due.

use super::plan::values;
use super::rows::Columns;
use super::tx::Tx;
use super::{RenewRequest, StoreError, StoreResult};
use crate::intent::Millis;

/// The statements of leases. Parameters, in order:
/// - `renew` (only the lease's holder, while the step runs): expires at, workflow id, step,
///   lease token;
/// - `release` (a stopping host's leases, expired at once): now, owner;
/// - `record_sweep` (never moves back): owner, swept before;
/// - `next_due` (the earliest retry time, lease expiry or adapter pause's end after now,
///   as `due`): now.
pub(crate) struct Sql {
    pub renew: &'static str,
    pub release: &'static str,
    pub record_sweep: &'static str,
    pub next_due: &'static str,
}

/// The statements as both databases run them (see [`super::tx`] on placeholders).
pub(crate) const SQL: Sql = Sql {
    renew: "UPDATE steps SET lease_expires_at = $1
            WHERE workflow_id = $2 AND step = $3 AND lease_token = $4 AND state = 'running'",
    release: "UPDATE steps SET lease_expires_at = $1 - 1
              WHERE state = 'running' AND lease_owner = $2 AND lease_expires_at >= $1",
    record_sweep: "INSERT INTO recovery_sweeps (owner, swept_before) VALUES ($1, $2)
                   ON CONFLICT (owner) DO UPDATE
                   SET swept_before = CASE
                       WHEN excluded.swept_before > recovery_sweeps.swept_before
                       THEN excluded.swept_before ELSE recovery_sweeps.swept_before END",
    // Two index range reads: the earliest retry time, the earliest lease expiry (a lease
    // is expired once `now` passes it, hence + 1).
    next_due: "SELECT MIN(t) AS due FROM (
                   SELECT MIN(ready_at) AS t FROM steps
                    WHERE state IN ('ready', 'failed_retryable') AND ready_at > $1
                   UNION ALL
                   SELECT MIN(lease_expires_at) + 1 AS t FROM steps
                    WHERE state = 'running' AND lease_expires_at >= $1
                   UNION ALL
                   SELECT MIN(paused_until) AS t FROM adapter_pauses
                    WHERE paused_until > $1) AS next",
};

/// Extends a lease; [`StoreError::LeaseLost`] when its holder no longer has it.
pub(crate) async fn renew<T: Tx>(tx: &mut T, req: &RenewRequest) -> StoreResult<()> {
    let sql = tx.sql().leases.renew;
    let f = &req.fence;
    let renewed = tx
        .exec(
            sql,
            &values![
                (req.now + req.lease_ms) as i64,
                f.workflow_id.as_str(),
                f.step.as_str(),
                f.lease_token.as_str(),
            ],
        )
        .await?;
    if renewed == 0 {
        return Err(StoreError::LeaseLost {
            workflow_id: f.workflow_id.clone(),
            step: f.step.clone(),
        });
    }
    Ok(())
}

/// Expires every lease `owner` holds, so that other hosts recover its steps at once.
pub(crate) async fn release<T: Tx>(
    tx: &mut T,
    (owner, now): &(String, Millis),
) -> StoreResult<u64> {
    let sql = tx.sql().leases.release;
    tx.exec(sql, &values![*now as i64, owner]).await
}

/// Records that `owner` has recovered every lease that expired before `before`.
pub(crate) async fn record_sweep<T: Tx>(
    tx: &mut T,
    (owner, before): &(String, Millis),
) -> StoreResult<()> {
    let sql = tx.sql().leases.record_sweep;
    tx.exec(sql, &values![owner, *before as i64]).await?;
    Ok(())
}

/// When the next step falls due after `now`: a retry's time or a lease's expiry.
pub(crate) async fn next_due<T: Tx>(tx: &mut T, now: &Millis) -> StoreResult<Option<Millis>> {
    let sql = tx.sql().leases.next_due;
    Ok(tx
        .row(sql, &values![*now as i64], |r| r.opt_uint("due"))
        .await?
        .flatten())
}
