-- Evidence from providers: each delivery a provider posted to `POST /v1/evidence/{adapter}`,
-- kept once its signature was verified (once per adapter and `webhook-id`, so a replay is
-- recorded once), until a host has read it with the adapter's `observe`; and each
-- observation read from one, with the step it was matched to and what it did there.
CREATE TABLE evidence_deliveries (
    delivery_id   BIGSERIAL PRIMARY KEY,
    adapter       TEXT    NOT NULL,
    webhook_id    TEXT    NOT NULL,
    received_at   BIGINT NOT NULL,
    -- The request as the provider sent it: method, path, headers (JSON pairs), body.
    method        TEXT    NOT NULL,
    path          TEXT    NOT NULL,
    headers       TEXT    NOT NULL,
    body          BYTEA   NOT NULL,
    -- pending until read; read (its observations are kept) or unreadable (error says why).
    state         TEXT    NOT NULL,
    lease_owner   TEXT,
    lease_expires_at BIGINT,
    read_at       BIGINT,
    -- The adapter version that read it.
    component_version TEXT,
    error         TEXT,
    UNIQUE (adapter, webhook_id)
);
CREATE INDEX evidence_deliveries_pending ON evidence_deliveries (received_at)
    WHERE state = 'pending';

CREATE TABLE observations (
    observation_id     TEXT    PRIMARY KEY,
    delivery_id        BIGINT NOT NULL,
    adapter            TEXT    NOT NULL,
    -- The provider's own id of the event, when it gives one: an event is kept once.
    event_id           TEXT,
    external_reference TEXT,
    idempotency_key    TEXT,
    -- in_effect, reversed or refused; NULL for an unreadable delivery.
    effect_status      TEXT,
    provider_status    TEXT    NOT NULL,
    observed_at        BIGINT,
    output             TEXT,
    recorded_at        BIGINT NOT NULL,
    -- The step it was matched to (NULL: nothing matched; it waits in the inbox).
    workflow_id        TEXT,
    step               TEXT,
    -- What it did: settled, contradicted, reversed, review, kept, held (its step's attempt
    -- was under way; judged again once it ends) or unmatched.
    verdict            TEXT    NOT NULL,
    -- The receipt it made, when it settled a step.
    receipt_id         TEXT,
    -- What it did, in words (an unreadable delivery's reason).
    note               TEXT
);
CREATE UNIQUE INDEX observations_event ON observations (adapter, event_id)
    WHERE event_id IS NOT NULL;
CREATE INDEX observations_by_verdict ON observations (verdict, recorded_at);
CREATE INDEX observations_by_workflow ON observations (workflow_id, recorded_at);

-- Matching an observation to its step: by the reference a receipt holds, else by the
-- request identity an attempt sent.
CREATE INDEX receipts_by_reference ON receipts (external_reference)
    WHERE external_reference IS NOT NULL;
CREATE INDEX attempts_by_identity ON attempts (request_identity)
    WHERE request_identity IS NOT NULL;
