//! The statements of [`super::Sql`] that SQLite writes its own way; the rest are
//! [`super::SQL`]'s.

pub(crate) const SQL: super::Sql = super::Sql {
    blocked_by_budget: "SELECT step, json_extract(blocked, '$.limit') AS lim FROM steps
                        WHERE workflow_id = $1 AND state = 'blocked'
                          AND json_extract(blocked, '$.reason') = $2",
    ..super::SQL
};
