//! The statements of [`super::Sql`] that PostgreSQL writes its own way; the rest are
//! [`super::SQL`]'s.

pub(crate) const SQL: super::Sql = super::Sql {
    // Many hosts claim at once: each skips the rows another is claiming.
    claim: "UPDATE outbox SET lease_owner = $1, lease_until = $2
            WHERE seq IN (
                SELECT seq FROM outbox
                WHERE state = 'pending' AND next_at <= $3
                  AND (lease_until IS NULL OR lease_until < $3)
                ORDER BY next_at LIMIT $4
                FOR UPDATE SKIP LOCKED)
            RETURNING seq, id, workflow_id, type, revision, body, state, attempts,
                created_at, next_at, delivered_to, last_error, finished_at",
    expire: "UPDATE outbox SET state = 'failed', finished_at = $1, last_error = $2
             WHERE seq IN (
                 SELECT seq FROM outbox
                 WHERE state = 'pending' AND created_at < $3
                   AND (lease_until IS NULL OR lease_until < $1)
                 LIMIT $4
                 FOR UPDATE SKIP LOCKED)",
    ..super::SQL
};
