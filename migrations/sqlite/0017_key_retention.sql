-- How long the provider remembers the idempotency key a step's request was first sent
-- under (checkpoint 3 of an adapter that declares idempotency): when it was sent and
-- until when a same-key retry stays safe. A person deciding an unknown outcome sees the
-- deadline and is told once when a fifth of the window is left (retention_warned_at).
ALTER TABLE steps ADD COLUMN key_sent_at INTEGER;
ALTER TABLE steps ADD COLUMN key_remembered_until INTEGER;
ALTER TABLE steps ADD COLUMN retention_warned_at INTEGER;
