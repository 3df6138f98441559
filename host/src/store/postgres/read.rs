//! Reads for projections ([`ReadStore`]) in PostgreSQL's dialect.

use super::PgStore;
use crate::store::ReadStore;
use crate::store::reads::ReadSql;

/// The shared reads in PostgreSQL's dialect; ids compare bytewise ("C"), as in SQLite.
pub(crate) const SQL: ReadSql = ReadSql {
    ids: " COLLATE \"C\"",
    steps: "SELECT * FROM steps WHERE workflow_id = $1 ORDER BY ord",
    receipts: "SELECT * FROM receipts WHERE workflow_id = $1 ORDER BY recorded_at, receipt_id COLLATE \"C\"",
    timeline: "SELECT * FROM timeline WHERE workflow_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
    timeline_latest: "SELECT * FROM timeline WHERE workflow_id = $1
               AND ($2::TEXT IS NULL OR step = $2) AND ($3::BIGINT IS NULL OR seq < $3)
             ORDER BY seq DESC LIMIT $4",
    attempts: "SELECT * FROM attempts WHERE workflow_id = $1 AND step = $2 AND number > $3
             ORDER BY number LIMIT $4",
};

impl ReadStore for PgStore {
    crate::store::reads::shared_read_methods!(pool, SQL);
}
