//! Operator actions' statements in PostgreSQL's dialect (see [`super::Sql`]).

pub(crate) const SQL: super::Sql = super::Sql {
    find: "SELECT request_digest, refusal, answer, refusal_details FROM operator_actions
           WHERE subject = $1 AND workflow_id = $2 AND step = $3 AND action = $4 AND key = $5",
    reserve: "INSERT INTO operator_actions
                  (subject, workflow_id, step, action, key, request_digest, created_at)
              VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING",
    remember: "INSERT INTO operator_actions (subject, workflow_id, step, action, key,
                   request_digest, created_at, refusal, answer, refusal_details)
               VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) ON CONFLICT DO NOTHING",
    answer: "UPDATE operator_actions SET refusal = $1, answer = $2, refusal_details = $3
             WHERE subject = $4 AND workflow_id = $5 AND step = $6 AND action = $7 AND key = $8
               AND answer IS NULL",
    lock_workflow: "SELECT state, cancel_on FROM workflows WHERE workflow_id = $1 FOR UPDATE",
    latest_attempt: "SELECT attempt_id FROM attempts WHERE workflow_id = $1 AND step = $2
                     ORDER BY number DESC LIMIT 1",
    ready: "UPDATE steps SET state = 'ready', ready_at = $4, next_trigger = $5, note = NULL,
                uncertain_since = CASE WHEN $6::BOOLEAN THEN NULL ELSE uncertain_since END
            WHERE workflow_id = $1 AND step = $2 AND state = $3 AND lease_token IS NULL",
    succeed: "UPDATE steps SET state = 'succeeded', receipt_id = $4, note = NULL,
                  uncertain_since = NULL
              WHERE workflow_id = $1 AND step = $2 AND state = $3 AND lease_token IS NULL",
    terminal: "UPDATE steps SET state = $4, note = $5
               WHERE workflow_id = $1 AND step = $2 AND state = $3 AND lease_token IS NULL",
    escalate: "UPDATE steps SET escalated = $4
               WHERE workflow_id = $1 AND step = $2 AND state = $3 AND lease_token IS NULL",
    exception: "UPDATE steps SET state = 'ready', ready_at = $4, next_trigger = 'manual_retry',
                    note = NULL, blocked = NULL, policy_exception = $5
                WHERE workflow_id = $1 AND step = $2 AND state = $3 AND lease_token IS NULL",
    compensating: "UPDATE steps SET state = 'compensating'
                   WHERE workflow_id = $1 AND step = $2 AND state = $3 AND lease_token IS NULL",
    insert_compensation:
        "INSERT INTO steps (workflow_id, step, state, ready_at, role, next_trigger)
                          VALUES ($1, $2, 'ready', $3, 'compensation', 'compensation')",
};
