-- Operator actions on steps, idempotent under their key. The scope is (subject, workflow,
-- step, action, key); a repeat with the same request gets the stored answer and acts once.
CREATE TABLE operator_actions (
    subject        TEXT    NOT NULL,
    workflow_id    TEXT    NOT NULL,
    step           TEXT    NOT NULL,
    action         TEXT    NOT NULL,
    key            TEXT    NOT NULL,
    request_digest TEXT    NOT NULL,
    -- The answer once known (HTTP status and JSON body); NULL while the action runs.
    status         BIGINT,
    answer         TEXT,
    created_at     BIGINT  NOT NULL,
    PRIMARY KEY (subject, workflow_id, step, action, key)
);
