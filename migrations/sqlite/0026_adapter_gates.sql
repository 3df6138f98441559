-- An adapter's in-flight attempts are counted in the store, so that every host on one
-- database claims under the same count, and a provider's rate limit pauses that adapter's
-- claims on every host for the period it asked. A step row carries its adapter (NULL for
-- handlers and approvals); rows written before this migration carry none and are not
-- counted.
ALTER TABLE steps ADD COLUMN adapter TEXT;
CREATE INDEX steps_running_by_adapter ON steps (adapter) WHERE state = 'running';
CREATE INDEX steps_claimable_by_adapter ON steps (adapter, ready_at)
    WHERE state IN ('ready', 'failed_retryable');
CREATE TABLE adapter_pauses (
    adapter      TEXT    PRIMARY KEY,
    -- No claim of the adapter's steps before this time, on any host.
    paused_until INTEGER NOT NULL,
    -- `rate_limited` or `unavailable`: what kind of answer paused it.
    cause        TEXT    NOT NULL,
    -- What the provider answered, for people.
    reason       TEXT    NOT NULL,
    -- The host whose attempt was answered so, and when.
    paused_by    TEXT    NOT NULL,
    paused_at    INTEGER NOT NULL
);
