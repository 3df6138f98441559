//! The statements of [`super::Sql`] that PostgreSQL writes its own way; the rest are
//! [`super::SQL`]'s.

pub(crate) const SQL: super::Sql = super::Sql {
    // Hosts share the purge: each skips the workflows another is purging.
    purgeable: "SELECT workflow_id FROM workflows w
                WHERE ended_at IS NOT NULL AND ended_at < $1
                  AND state IN ('completed', 'failed', 'cancelled')
                  AND NOT EXISTS (SELECT 1 FROM intent_keys k WHERE k.workflow_id = w.workflow_id
                                    AND (k.expires_at IS NULL OR k.expires_at >= $2))
                  AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.workflow_id = w.workflow_id
                                    AND o.state = 'pending')
                ORDER BY ended_at LIMIT $3
                FOR UPDATE SKIP LOCKED",
    ..super::SQL
};
