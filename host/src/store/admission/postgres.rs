//! The statements of [`super::Sql`] that PostgreSQL writes its own way; the rest are
//! [`super::SQL`]'s.

pub(crate) const SQL: super::Sql = super::Sql {
    // Admissions under one key wait for each other (until the first commits) instead of
    // both finding the key free; a collision of the hash only makes two keys wait too.
    hold_key: "SELECT pg_advisory_xact_lock(hashtextextended($1 || '/' || $2 || '/' || $3, 0))",
    ..super::SQL
};
