-- Corrections: a workflow's input in revisions. The workflow row holds the current input;
-- the key's row keeps the digest of revision 1 (the command as sent), which replays of the
-- key compare against.
CREATE TABLE revisions (
    workflow_id       TEXT    NOT NULL REFERENCES workflows (workflow_id),
    input_revision    BIGINT  NOT NULL,
    prior_digest      TEXT    NOT NULL,
    input_digest      TEXT    NOT NULL,
    input             TEXT    NOT NULL,
    author            TEXT    NOT NULL,
    reason            TEXT    NOT NULL,
    at                BIGINT  NOT NULL,
    -- JSON arrays: the steps that run again, and the receipts that stand.
    invalidated_steps TEXT    NOT NULL,
    kept_receipts     TEXT    NOT NULL,
    PRIMARY KEY (workflow_id, input_revision)
);

-- Receipts and attempts of an invalidated step stay, marked with the revision that
-- superseded them.
ALTER TABLE receipts ADD COLUMN superseded_by BIGINT;
ALTER TABLE attempts ADD COLUMN superseded_by BIGINT;

-- The digest of the mapped input a step's request was first recorded with (checkpoint 3):
-- an adapter never sends another input under the same identity.
ALTER TABLE steps ADD COLUMN input_digest TEXT;

-- A refusal that names what stopped it (a revision refused by the steps whose requests may
-- have left) keeps those details for every repeat of its key (JSON array).
ALTER TABLE operator_actions ADD COLUMN refusal_details TEXT;
