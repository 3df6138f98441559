-- Component bytes, content-addressed by digest, so that any host on this database can run
-- any step: a host loads what it lacks from here. Rows are never changed, only added.
CREATE TABLE components (
    digest        TEXT    PRIMARY KEY,
    name          TEXT    NOT NULL,
    version       TEXT    NOT NULL,
    -- `adapter` or `handler`: the world the component was built against.
    kind          TEXT    NOT NULL,
    bytes         BYTEA   NOT NULL,
    size_bytes    BIGINT  NOT NULL,
    registered_at BIGINT  NOT NULL
);
CREATE INDEX components_by_name ON components (name, version);
