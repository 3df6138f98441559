-- The environment a workflow's idempotency keys are derived in: the database's recorded
-- environment (`store_settings` 'environment', written by the first host to start) at the
-- workflow's admission. NULL for workflows admitted before environments were recorded:
-- their keys stay as they were derived then, so nothing already sent changes identity.
ALTER TABLE workflows ADD COLUMN environment TEXT;
