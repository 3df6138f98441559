-- Policy at the side-effect boundary: documents in versions (counting up from 1; version 0,
-- none deployed, allows everything), the version each workflow was admitted and last
-- evaluated under, each attempt's decision, and why a step is blocked.
CREATE TABLE policies (
    version     BIGINT PRIMARY KEY,
    digest      TEXT    NOT NULL,
    document    TEXT    NOT NULL,
    author      TEXT    NOT NULL,
    deployed_at BIGINT NOT NULL
);

ALTER TABLE workflows ADD COLUMN policy_at_admission BIGINT NOT NULL DEFAULT 0;
ALTER TABLE workflows ADD COLUMN policy_current BIGINT NOT NULL DEFAULT 0;
-- JSON {"version", "decision": "allow" | "deny" | "exception", "author"?}.
ALTER TABLE attempts ADD COLUMN policy TEXT;
-- JSON {"reason", "limit"?, "policy_version"?, "message"} while the step is blocked.
ALTER TABLE steps ADD COLUMN blocked TEXT;
-- An operator's exception to the policy, waiting for the one attempt it lets through
-- (JSON {"author", "reason", "evidence"}); that attempt's checkpoint 2 consumes it.
ALTER TABLE steps ADD COLUMN policy_exception TEXT;
