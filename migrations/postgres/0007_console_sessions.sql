-- Operator sessions of the console, in the database so that any host behind one address
-- knows them. Keyed by the digest of the cookie's value: the table holds nothing a reader
-- could present as a cookie.
CREATE TABLE console_sessions (
    id_digest  TEXT    PRIMARY KEY,
    subject    TEXT    NOT NULL,
    role       TEXT    NOT NULL,
    -- The token every form of the session carries back (against cross-site requests).
    csrf       TEXT    NOT NULL,
    started_at BIGINT  NOT NULL,
    expires_at BIGINT  NOT NULL
);
CREATE INDEX console_sessions_by_expiry ON console_sessions (expires_at);
