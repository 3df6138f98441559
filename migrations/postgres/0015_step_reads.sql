-- The steps whose receipts a step's input reads, as a JSON array of step ids (NULL: every
-- receipt of its workflow, as for compensations). A claim reads only those, by step, so a
-- step of a long workflow does not read every receipt before it.
ALTER TABLE steps ADD COLUMN reads TEXT;
CREATE INDEX receipts_by_step ON receipts (workflow_id, step);
-- Its leading column serves every lookup by workflow the old index served.
DROP INDEX receipts_by_workflow;
