-- Notifications of meaningful transitions, written in the transaction of the transition
-- with their body fixed then, and delivered after commit by a supervised task. The rows of
-- the first outbox were never read (there was no delivery), so the table starts afresh.
DROP TABLE outbox;
CREATE TABLE outbox (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    -- ntf_…: the webhook-id, the same on every delivery attempt.
    id           TEXT    NOT NULL UNIQUE,
    workflow_id  TEXT    NOT NULL,
    -- workflow.recorded, workflow.needs_review, workflow.deadline_approaching,
    -- workflow.completed, workflow.ended, workflow.effect_compensated.
    type         TEXT    NOT NULL,
    revision     INTEGER NOT NULL,
    body         TEXT    NOT NULL,
    -- pending, delivered, suppressed, failed.
    state        TEXT    NOT NULL DEFAULT 'pending',
    attempts     INTEGER NOT NULL DEFAULT 0,
    created_at   INTEGER NOT NULL,
    next_at      INTEGER NOT NULL,
    -- The host delivering it now, until when (many hosts deliver each row once).
    lease_owner  TEXT,
    lease_until  INTEGER,
    -- JSON array of the endpoint URLs that answered 2xx (a retry skips them).
    delivered_to TEXT    NOT NULL DEFAULT '[]',
    last_error   TEXT,
    finished_at  INTEGER
);
CREATE INDEX outbox_due ON outbox (next_at) WHERE state = 'pending';
CREATE INDEX outbox_by_workflow ON outbox (workflow_id, seq);
CREATE INDEX outbox_finished ON outbox (finished_at) WHERE state <> 'pending';
