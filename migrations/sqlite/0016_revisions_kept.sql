-- The command is immutable evidence: every input revision keeps its canonical text,
-- revision 1 (the command as admitted) included, and every attempt names the revision it
-- ran on.
--
-- Revision 1's row is written when a workflow is first revised (until then the workflow
-- row holds it). Its `prior_digest` is null; `input` is null only for a workflow revised
-- before this migration, whose revision 1 text was overwritten then: its digest survives
-- as revision 2's `prior_digest`, and its reason says so. SQLite cannot drop NOT NULL in
-- place, so the table is rebuilt.
CREATE TABLE revisions_kept (
    workflow_id       TEXT    NOT NULL REFERENCES workflows (workflow_id),
    input_revision    INTEGER NOT NULL,
    prior_digest      TEXT,
    input_digest      TEXT    NOT NULL,
    input             TEXT,
    author            TEXT    NOT NULL,
    reason            TEXT    NOT NULL,
    at                INTEGER NOT NULL,
    invalidated_steps TEXT    NOT NULL,
    kept_receipts     TEXT    NOT NULL,
    PRIMARY KEY (workflow_id, input_revision)
);
INSERT INTO revisions_kept (workflow_id, input_revision, prior_digest, input_digest, input,
                            author, reason, at, invalidated_steps, kept_receipts)
SELECT workflow_id, input_revision, prior_digest, input_digest, input, author, reason, at,
       invalidated_steps, kept_receipts
FROM revisions;
INSERT INTO revisions_kept (workflow_id, input_revision, prior_digest, input_digest, input,
                            author, reason, at, invalidated_steps, kept_receipts)
SELECT r.workflow_id, 1, NULL, r.prior_digest, NULL, w.subject,
       'the command as admitted; its text was overwritten by revision 2 before docket kept every revision, so only its digest remains',
       w.created_at, '[]', '[]'
FROM revisions r JOIN workflows w ON w.workflow_id = r.workflow_id
WHERE r.input_revision = 2;
DROP TABLE revisions;
ALTER TABLE revisions_kept RENAME TO revisions;

-- The revision each attempt ran on. Attempts made before this migration are given the
-- latest revision recorded at or before they started (the input a claim reads is the
-- current one, and a revision never changes the input of a running step).
ALTER TABLE attempts ADD COLUMN input_revision INTEGER NOT NULL DEFAULT 1;
UPDATE attempts SET input_revision = (
    SELECT MAX(r.input_revision) FROM revisions r
    WHERE r.workflow_id = attempts.workflow_id AND r.at <= attempts.started_at
)
WHERE workflow_id IN (SELECT workflow_id FROM workflows WHERE input_revision > 1)
  AND EXISTS (
    SELECT 1 FROM revisions r
    WHERE r.workflow_id = attempts.workflow_id AND r.at <= attempts.started_at
  );
