//! The statements of [`super::Sql`] that SQLite writes its own way; the rest are
//! [`super::SQL`]'s.

pub(crate) const SQL: super::Sql = super::Sql {
    // One writer: its transaction already excludes every other deployer.
    lock: None,
    blocked_before: "SELECT workflow_id, step FROM steps
                     WHERE state = 'blocked' AND json_extract(blocked, '$.reason') = $1
                       AND json_extract(blocked, '$.policy_version') < $2
                     ORDER BY workflow_id",
    ..super::SQL
};
