-- The registry: which stored component version new attempts use (one active version per
-- component name), and every change to it with its author. Rollback goes back to the
-- version that was active before the current one, found in this history.
CREATE TABLE active_components (
    name   TEXT    PRIMARY KEY,
    digest TEXT    NOT NULL REFERENCES components (digest),
    since  BIGINT  NOT NULL
);

CREATE TABLE component_events (
    seq     BIGINT  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name    TEXT    NOT NULL,
    version TEXT    NOT NULL,
    digest  TEXT    NOT NULL,
    -- `deployed`, `activated` or `rolled_back`.
    action  TEXT    NOT NULL,
    author  TEXT    NOT NULL,
    at      BIGINT  NOT NULL
);
CREATE INDEX component_events_by_name ON component_events (name, seq);
