-- A workflow's input lives in a table of its own: the workflow row is written at every
-- step's transition (its counters, its next timeline number), and an input held in it — a
-- batch's list of ten thousand recipients — would be copied again by each of those writes.
CREATE TABLE workflow_inputs (
    workflow_id TEXT PRIMARY KEY,
    input       TEXT NOT NULL
);
INSERT INTO workflow_inputs (workflow_id, input) SELECT workflow_id, input FROM workflows;
ALTER TABLE workflows DROP COLUMN input;
