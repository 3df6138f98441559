//! The statements of [`super::Sql`] that SQLite writes its own way; the rest are
//! [`super::SQL`]'s.

pub(crate) const SQL: super::Sql = super::Sql {
    // One writer: its transaction already excludes every other change.
    active: "SELECT digest, since FROM active_components WHERE name = $1",
    ..super::SQL
};
