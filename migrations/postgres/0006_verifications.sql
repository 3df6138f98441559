-- Results of `docket adapter verify --db`: per claim whether the declared behaviour held,
-- for one component digest. The console shows the latest per digest.
CREATE TABLE component_verifications (
    seq         BIGINT  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    digest      TEXT    NOT NULL,
    name        TEXT    NOT NULL,
    version     TEXT    NOT NULL,
    passed      BOOLEAN NOT NULL,
    -- JSON object: claim → `held`, `failed` or `not declared`.
    verdicts    TEXT    NOT NULL,
    author      TEXT    NOT NULL,
    verified_at BIGINT  NOT NULL
);
CREATE INDEX component_verifications_by_digest ON component_verifications (digest, seq);
