-- Claims share the hosts between subjects (weighted round-robin over the subjects with
-- ready work, oldest ready first within each), so a step row carries its workflow's
-- subject and ready steps are found by it without reading every other subject's.
ALTER TABLE steps ADD COLUMN subject TEXT NOT NULL DEFAULT '';
UPDATE steps SET subject = COALESCE(
    (SELECT w.subject FROM workflows w WHERE w.workflow_id = steps.workflow_id), '');
CREATE INDEX steps_claimable_by_subject ON steps (subject, ready_at)
    WHERE state IN ('ready', 'failed_retryable');
