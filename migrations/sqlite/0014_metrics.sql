-- What a metrics scrape, the consistency check and retention read without scanning history.

-- Ended workflows, tallied in the transaction that ends them: per metric ('outcome_ms',
-- admission to the end; 'attempts', attempts the workflow used), workflow, ended state and
-- histogram bucket (an index into the metric's bounds; one past the last is +Inf), how
-- many ended there and the sum of their values. `shard` spreads concurrent ends over rows
-- (always 0 here: SQLite has one writer). Kept when workflows are purged.
CREATE TABLE outcome_tallies (
    metric   TEXT    NOT NULL,
    workflow TEXT    NOT NULL,
    state    TEXT    NOT NULL,
    bucket   INTEGER NOT NULL,
    shard    INTEGER NOT NULL,
    n        INTEGER NOT NULL,
    total    INTEGER NOT NULL,
    PRIMARY KEY (metric, workflow, state, bucket, shard)
);

-- Steps whose outcome is unknown, oldest first.
CREATE INDEX steps_unknown ON steps (uncertain_since) WHERE state = 'outcome_unknown';

-- Each host's latest complete recovery sweep: every lease that expired before
-- `swept_before` was decided by it. A lease still running past the latest sweep of any
-- host was missed (what `docket check` looks for).
CREATE TABLE recovery_sweeps (
    owner        TEXT   PRIMARY KEY,
    swept_before INTEGER NOT NULL
);

-- Retention: ended workflows, oldest end first, and what to delete with each.
CREATE INDEX workflows_by_end ON workflows (ended_at) WHERE ended_at IS NOT NULL;
CREATE INDEX operator_actions_by_workflow ON operator_actions (workflow_id);
CREATE INDEX intent_keys_by_workflow ON intent_keys (workflow_id);

-- The workflow's trace (a W3C traceparent): the admission's span, parent of every attempt's.
ALTER TABLE workflows ADD COLUMN trace_parent TEXT;
