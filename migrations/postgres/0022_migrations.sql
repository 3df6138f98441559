-- Running workflows moved to another version of their definition by an explicit plan.
-- A step a migration renamed keeps the identity the provider saw: its external key derives
-- from `key_step` (NULL: the step's own id). A compensation's follows its original's.
ALTER TABLE steps ADD COLUMN key_step TEXT;
-- The version a workflow was last migrated from (NULL: never migrated).
ALTER TABLE workflows ADD COLUMN migrated_from BIGINT;
-- Each migration with its plan (JSON: moved, added and dropped steps).
CREATE TABLE migrations (
    workflow_id  TEXT    NOT NULL,
    number       BIGINT  NOT NULL,
    from_version BIGINT  NOT NULL,
    to_version   BIGINT  NOT NULL,
    plan         TEXT    NOT NULL,
    author       TEXT    NOT NULL,
    reason       TEXT    NOT NULL,
    at           BIGINT  NOT NULL,
    PRIMARY KEY (workflow_id, number)
);
