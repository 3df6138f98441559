//! The statements of [`super::Sql`] that PostgreSQL writes its own way; the rest are
//! [`super::SQL`]'s.

pub(crate) const SQL: super::Sql = super::Sql {
    // Claims on several hosts count one adapter's attempts one after another: each sees
    // what the one before committed.
    hold_adapter: "SELECT pg_advisory_xact_lock(hashtextextended('docket.adapter/' || $1, 0))",
    ..super::SQL
};
