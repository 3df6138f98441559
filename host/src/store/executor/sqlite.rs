//! The statements of [`super::Sql`] that SQLite writes its own way; the rest are
//! [`super::SQL`]'s.

use std::sync::LazyLock;

static EXPIRED: LazyLock<String> = super::expired!("");

pub(crate) const SQL: super::Sql = super::Sql {
    // One writer at a time: a row read in the write transaction stays as read.
    hold: super::hold!(""),
    hold_with_workflow: super::hold!(""),
    facts: super::facts!("MAX"),
    note_policy: "UPDATE workflows SET policy_current = MAX(policy_current, $1)
                  WHERE workflow_id = $2",
    // Definition order is the order the steps were inserted in.
    pending: "SELECT step FROM steps WHERE workflow_id = $1 AND state = 'pending' ORDER BY rowid",
    counters: "SELECT next_seq, state, cancel_on FROM workflows WHERE workflow_id = $1",
    expired: &EXPIRED,
    ..super::SQL
};
