-- Approval steps: each time one is asked, the consequence it asked consent to (the
-- approved steps' mapped inputs, their adapters and hosts, their cost) and its digest,
-- until when it may wait, and how it was decided. A row is never rewritten but for its
-- decision; a revision that changes the consequence leaves the old row `superseded` and
-- asks again under a new one.
CREATE TABLE approvals (
    workflow_id   TEXT    NOT NULL,
    step          TEXT    NOT NULL,
    -- The attempt that asked.
    attempt_id    TEXT    NOT NULL,
    -- sha256:… of the canonical consequence document.
    digest        TEXT    NOT NULL,
    consequence   TEXT    NOT NULL,
    asked_at      INTEGER NOT NULL,
    expires_at    INTEGER NOT NULL,
    -- When the warning that a fifth of the time is left was queued.
    warned_at     INTEGER,
    -- approved, rejected, expired, superseded; NULL while it waits.
    outcome       TEXT,
    decided_by    TEXT,
    decided_at    INTEGER,
    -- The approver's note, or the reason of a rejection.
    decision_text TEXT,
    PRIMARY KEY (workflow_id, step, attempt_id)
);
CREATE INDEX approvals_open ON approvals (expires_at) WHERE outcome IS NULL;
CREATE INDEX approvals_by_step ON approvals (workflow_id, step, asked_at);
