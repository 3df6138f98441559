//! The statements of [`super::Sql`] that PostgreSQL writes its own way; the rest are
//! [`super::SQL`]'s.

pub(crate) const SQL: super::Sql = super::Sql {
    // Many hosts claim and expire at once: each skips the rows another holds.
    claim: claim!(" FOR UPDATE SKIP LOCKED"),
    expire: expire!(" FOR UPDATE SKIP LOCKED"),
    ..super::SQL
};
