//! Budgets' statements in PostgreSQL's dialect (see [`super::Sql`]).

pub(crate) const SQL: super::Sql = super::Sql {
    workflow: "SELECT workflow_id, workflow, definition_version, subject, idempotency_key,
                   input, input_digest, state, created_at, ended_at, deadline_at, attempts_used,
                   external_calls_used, runtime_used_ms, cost_used, recovery_queries_used,
                   budget_added, deadline_warned_at, next_seq, input_revision, replaces,
                   replaced_by, cancel_on, policy_at_admission, policy_current
               FROM workflows WHERE workflow_id = $1",
    set_added: "UPDATE workflows SET budget_added = $1 WHERE workflow_id = $2",
    blocked_by_budget: "SELECT step, (blocked::jsonb ->> 'limit') AS lim FROM steps
                        WHERE workflow_id = $1 AND state = 'blocked'
                          AND (blocked::jsonb ->> 'reason') = $2",
    release: "UPDATE steps SET state = 'ready', ready_at = $1, blocked = NULL, note = NULL
              WHERE workflow_id = $2 AND step = $3 AND state = 'blocked'",
    warn_due: "UPDATE workflows SET deadline_warned_at = $1
               WHERE state = 'needs_review' AND deadline_warned_at IS NULL
                 AND $1 < deadline_at AND $1 >= deadline_at - (deadline_at - created_at) / 5
               RETURNING workflow_id, deadline_at",
};
