-- Settings that belong to the database rather than to one host's configuration, so every
-- path that writes the registry (each host's API, `docket adapter activate|rollback`, the
-- activation at start-up) applies the same rule: `require_verified` ('true' or 'false'),
-- written by the host that started last.
CREATE TABLE store_settings (
    name   TEXT    PRIMARY KEY,
    value  TEXT    NOT NULL,
    set_at BIGINT NOT NULL
);
