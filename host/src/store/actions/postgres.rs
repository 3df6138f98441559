//! The statements of [`super::Sql`] that PostgreSQL writes its own way; the rest are
//! [`super::SQL`]'s.

pub(crate) const SQL: super::Sql = super::Sql {
    // The lock orders a change of course against every step change of the workflow.
    lock_workflow: "SELECT state, cancel_on FROM workflows WHERE workflow_id = $1 FOR UPDATE",
    ..super::SQL
};
