-- Changing course: a cancellation is an intent of its own, a compensation a step of its own
-- (`<step>.compensate`), and a correction a new input revision or a replacement workflow.

-- What a row is ('handler', 'adapter', or 'compensation'; NULL for rows stored before
-- roles were kept, read as an adapter) and, for an adapter step the definition
-- compensates, the triggers it is compensated on (comma-separated).
ALTER TABLE steps ADD COLUMN role TEXT;
ALTER TABLE steps ADD COLUMN compensate_on TEXT;

-- The triggers of the workflow's cancellation (NULL without one): read with the workflow
-- row by every transaction that settles its course.
ALTER TABLE workflows ADD COLUMN cancel_on TEXT;
ALTER TABLE workflows ADD COLUMN input_revision INTEGER NOT NULL DEFAULT 1;
ALTER TABLE workflows ADD COLUMN replaces TEXT;
ALTER TABLE workflows ADD COLUMN replaced_by TEXT;

-- At most one cancellation per workflow: pressing twice never starts two compensation paths.
CREATE TABLE cancellations (
    workflow_id     TEXT    PRIMARY KEY REFERENCES workflows (workflow_id),
    cancellation_id TEXT    NOT NULL UNIQUE,
    requested_by    TEXT    NOT NULL,
    requested_at    INTEGER NOT NULL,
    reason          TEXT    NOT NULL,
    withdraw        INTEGER NOT NULL,
    -- What the cancellation did first, its message and the effects it found (JSON).
    outcome         TEXT    NOT NULL,
    message         TEXT    NOT NULL,
    consequences    TEXT    NOT NULL
);
