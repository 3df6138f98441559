-- docket's durable state (PostgreSQL). Times are milliseconds since the Unix epoch, UTC.
-- Mirrors migrations/sqlite version for version: same tables, columns and meaning. JSON
-- stays TEXT so both backends store the same bytes.

-- Deployed workflow definitions: a version never changes once deployed.
CREATE TABLE definitions (
    name        TEXT    NOT NULL,
    version     BIGINT  NOT NULL,
    digest      TEXT    NOT NULL,
    source      TEXT    NOT NULL,
    deployed_at BIGINT  NOT NULL,
    PRIMARY KEY (name, version)
);

-- One row per intent (= workflow). Appending to the timeline locks this row through
-- `next_seq`, which serialises numbering per workflow.
CREATE TABLE workflows (
    workflow_id         TEXT    PRIMARY KEY,
    workflow            TEXT    NOT NULL,
    definition_version  BIGINT  NOT NULL,
    subject             TEXT    NOT NULL,
    idempotency_key     TEXT    NOT NULL,
    input               TEXT    NOT NULL,
    input_digest        TEXT    NOT NULL,
    state               TEXT    NOT NULL,
    created_at          BIGINT  NOT NULL,
    ended_at            BIGINT,
    deadline_at         BIGINT  NOT NULL,
    key_retention_ms    BIGINT  NOT NULL,
    attempts_used       BIGINT  NOT NULL DEFAULT 0,
    external_calls_used BIGINT  NOT NULL DEFAULT 0,
    runtime_used_ms     BIGINT  NOT NULL DEFAULT 0,
    next_seq            BIGINT  NOT NULL DEFAULT 1
);
-- Ids sort bytewise ("C"), as in SQLite, whatever the database's locale.
CREATE INDEX workflows_by_age ON workflows (created_at DESC, workflow_id COLLATE "C" DESC);
CREATE INDEX workflows_by_subject ON workflows (subject, created_at DESC);
CREATE INDEX workflows_by_state ON workflows (state, created_at DESC);

-- Client idempotency keys in scope (subject, command type, key). A row outlives its
-- workflow's end by the retention; an expired row is replaced by the next submission.
CREATE TABLE intent_keys (
    subject       TEXT NOT NULL,
    workflow      TEXT NOT NULL,
    key           TEXT NOT NULL,
    workflow_id   TEXT NOT NULL REFERENCES workflows (workflow_id),
    input_digest  TEXT NOT NULL,
    expires_at    BIGINT,
    PRIMARY KEY (subject, workflow, key)
);
-- A workflow's end starts its key's retention; this finds the key without a scan.
CREATE INDEX intent_keys_by_workflow ON intent_keys (workflow_id);

-- Steps, with their lease (owner, token, expiry) while running. `ord` keeps the
-- definition's order, which SQLite gets from its rowid.
CREATE TABLE steps (
    ord              BIGINT  GENERATED ALWAYS AS IDENTITY,
    workflow_id      TEXT    NOT NULL REFERENCES workflows (workflow_id),
    step             TEXT    NOT NULL,
    state            TEXT    NOT NULL,
    attempts         BIGINT  NOT NULL DEFAULT 0,
    ready_at         BIGINT,
    next_trigger     TEXT    NOT NULL DEFAULT 'initial',
    -- When the step's effect first became uncertain (outcome unknown); drives recovery windows.
    uncertain_since  BIGINT,
    lease_owner      TEXT,
    lease_token      TEXT,
    lease_expires_at BIGINT,
    receipt_id       TEXT,
    note             TEXT,
    escalated        TEXT,
    PRIMARY KEY (workflow_id, step)
);
CREATE INDEX steps_claimable ON steps (ready_at, ord) WHERE state IN ('ready', 'failed_retryable');
CREATE INDEX steps_leased ON steps (lease_expires_at) WHERE state = 'running';

CREATE TABLE step_deps (
    workflow_id TEXT NOT NULL,
    step        TEXT NOT NULL,
    depends_on  TEXT NOT NULL,
    PRIMARY KEY (workflow_id, step, depends_on)
);

-- Attempts append; they never overwrite each other.
CREATE TABLE attempts (
    attempt_id        TEXT    PRIMARY KEY,
    workflow_id       TEXT    NOT NULL,
    step              TEXT    NOT NULL,
    number            BIGINT  NOT NULL,
    trigger           TEXT    NOT NULL,
    lease_owner       TEXT    NOT NULL,
    component         TEXT,
    component_version TEXT,
    component_digest  TEXT,
    input_digest      TEXT,
    request_identity  TEXT,
    checkpoint        BIGINT  NOT NULL,
    observation       TEXT,
    outcome           TEXT    NOT NULL,
    started_at        BIGINT  NOT NULL,
    finished_at       BIGINT,
    log               TEXT    NOT NULL DEFAULT '[]',
    UNIQUE (workflow_id, step, number)
);

CREATE TABLE receipts (
    receipt_id         TEXT    PRIMARY KEY,
    workflow_id        TEXT    NOT NULL,
    step               TEXT    NOT NULL,
    attempt_id         TEXT,
    evidence_kind      TEXT    NOT NULL,
    component          TEXT    NOT NULL,
    component_version  TEXT    NOT NULL,
    component_digest   TEXT    NOT NULL,
    input_digest       TEXT    NOT NULL,
    external_reference TEXT,
    output             TEXT    NOT NULL,
    recorded_at        BIGINT  NOT NULL,
    author             TEXT,
    reason             TEXT,
    evidence           TEXT
);
CREATE INDEX receipts_by_workflow ON receipts (workflow_id);

-- One story per intent: observations, actions and conclusions, in order.
CREATE TABLE timeline (
    workflow_id TEXT    NOT NULL,
    seq         BIGINT  NOT NULL,
    at          BIGINT  NOT NULL,
    kind        TEXT    NOT NULL,
    step        TEXT,
    attempt_id  TEXT,
    text        TEXT    NOT NULL,
    data        TEXT    NOT NULL DEFAULT 'null',
    PRIMARY KEY (workflow_id, seq)
);

-- Notifications of meaningful transitions, written in the same transaction as the
-- transition and delivered after commit.
CREATE TABLE outbox (
    id           BIGINT  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    workflow_id  TEXT    NOT NULL,
    event        TEXT    NOT NULL,
    payload      TEXT    NOT NULL,
    created_at   BIGINT  NOT NULL,
    delivered_at BIGINT
);
CREATE INDEX outbox_pending ON outbox (id) WHERE delivered_at IS NULL;
