-- A step's every change of state rewrites its entries in each index whose condition it
-- meets. The adapter indexes now hold only steps that have an adapter (all a claim by
-- adapter and the in-flight count look for), so a handler's steps, most of a workflow's,
-- no longer pass through them.
DROP INDEX steps_running_by_adapter;
CREATE INDEX steps_running_by_adapter ON steps (adapter)
    WHERE state = 'running' AND adapter IS NOT NULL;
DROP INDEX steps_claimable_by_adapter;
CREATE INDEX steps_claimable_by_adapter ON steps (adapter, ready_at)
    WHERE state IN ('ready', 'failed_retryable') AND adapter IS NOT NULL;
