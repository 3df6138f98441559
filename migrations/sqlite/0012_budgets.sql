-- Budgets people can see and extend: cost units spent by external calls, recovery queries
-- drawn from the reserve once the attempts were spent, and what operators added to each
-- limit (JSON {"attempts", "runtime_ms", "external_calls", "cost", "recovery_queries"};
-- NULL until the first extension).
ALTER TABLE workflows ADD COLUMN cost_used INTEGER NOT NULL DEFAULT 0;
ALTER TABLE workflows ADD COLUMN recovery_queries_used INTEGER NOT NULL DEFAULT 0;
ALTER TABLE workflows ADD COLUMN budget_added TEXT;
-- When a workflow waiting for a person was first seen with a fifth of its deadline left
-- (told on its timeline and notified once); NULL otherwise.
ALTER TABLE workflows ADD COLUMN deadline_warned_at INTEGER;
