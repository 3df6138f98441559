//! The course's statements in SQLite's dialect (see [`super::Sql`]).

pub(crate) const SQL: super::Sql = super::Sql {
    cancellation: "SELECT cancellation_id, workflow_id, requested_by, requested_at, reason,
                       withdraw, outcome, message, consequences
                   FROM cancellations WHERE workflow_id = ?1",
    // Definition order is the order the steps were inserted in.
    course_steps: "SELECT s.step, s.role, s.state, s.uncertain_since, s.compensate_on,
                       s.receipt_id, r.external_reference
                   FROM steps s LEFT JOIN receipts r ON r.receipt_id = s.receipt_id
                   WHERE s.workflow_id = ?1 ORDER BY s.rowid",
    running_checkpoints: "SELECT a.step, a.checkpoint FROM steps s JOIN attempts a
                              ON a.workflow_id = s.workflow_id AND a.step = s.step
                                 AND a.number = s.attempts
                          WHERE s.workflow_id = ?1 AND s.state = 'running'",
    insert_cancellation: "INSERT INTO cancellations (cancellation_id, workflow_id, requested_by,
                              requested_at, reason, withdraw, outcome, message, consequences)
                          VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
    set_cancel_on: "UPDATE workflows SET cancel_on = ?1 WHERE workflow_id = ?2",
    revision_facts: "SELECT input_revision FROM workflows WHERE workflow_id = ?1",
    step_revisions: "SELECT step, state, attempts FROM steps WHERE workflow_id = ?1",
    set_input: "UPDATE workflows SET input = ?1, input_digest = ?2, input_revision = ?3
                WHERE workflow_id = ?4",
    insert_revision: "INSERT INTO revisions (workflow_id, input_revision, prior_digest,
                          input_digest, author, reason, at, invalidated_steps, kept_receipts,
                          input)
                      VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
    rerun: "UPDATE steps SET state = ?1, ready_at = ?2, receipt_id = NULL,
                next_trigger = 'initial', note = NULL, uncertain_since = NULL, escalated = NULL,
                input_digest = NULL
            WHERE workflow_id = ?3 AND step = ?4",
    supersede_receipts: "UPDATE receipts SET superseded_by = ?1
                         WHERE workflow_id = ?2 AND step = ?3 AND superseded_by IS NULL",
    supersede_attempts: "UPDATE attempts SET superseded_by = ?1
                         WHERE workflow_id = ?2 AND step = ?3 AND superseded_by IS NULL",
    revisions: "SELECT workflow_id, input_revision, prior_digest, input_digest, author, reason,
                    at, invalidated_steps, kept_receipts
                FROM revisions WHERE workflow_id = ?1 ORDER BY input_revision",
};
