//! The statements of [`super::Sql`] that SQLite writes its own way; the rest are
//! [`super::SQL`]'s.

pub(crate) const SQL: super::Sql = super::Sql {
    // Definition order is the order the steps were inserted in.
    course_steps: "SELECT s.step, s.role, s.state, s.uncertain_since, s.compensate_on,
                       s.receipt_id, s.items, r.external_reference
                   FROM steps s LEFT JOIN receipts r ON r.receipt_id = s.receipt_id
                   WHERE s.workflow_id = $1 ORDER BY s.rowid",
    ..super::SQL
};
