//! The statements of [`super::Sql`] that PostgreSQL writes its own way; the rest are
//! [`super::SQL`]'s.

pub(crate) const SQL: super::Sql = super::Sql {
    // Hosts share the purge: each skips the workflows another is purging.
    purgeable: purgeable!(" FOR UPDATE SKIP LOCKED"),
    ..super::SQL
};
