//! History for the HTTP benches: a migrated SQLite store holding ended workflows with every
//! row a real one leaves behind (key, steps, attempts, receipts, timeline, notifications), so
//! that a bench measures the host on a store that has been in use, not an empty one.

use std::path::Path;

/// Steps, attempts and receipts per ended workflow.
const STEPS: u64 = 3;
/// Timeline entries per ended workflow.
const EVENTS: u64 = 8;

/// Migrates the store at `path` and fills it with `ended` completed workflows of
/// `document-delivery`, created two days ago, their keys (kept 24 hours) expired: what a
/// host keeps within the default 30-day retention. Ids sort before the ids the host makes
/// now, as older ids do.
pub fn fill(path: &Path, ended: u64) {
    // Without history the host migrates the store itself (it may be another build's).
    if ended == 0 {
        return;
    }
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            docket::store::sqlite::SqliteStore::open(path)
                .await
                .unwrap()
        });
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let base = now - 2 * 86_400_000;
    let series = |n: u64| {
        format!(
            "(WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {n}) SELECT i FROM n) n"
        )
    };
    let per = |k: u64| {
        format!(
            "(WITH RECURSIVE k(j) AS (SELECT 1 UNION ALL SELECT j + 1 FROM k WHERE j < {k}) SELECT j FROM k) k"
        )
    };
    let wf = "printf('wf_00%012d', i)";
    let statements = [
        format!(
            "INSERT INTO workflows (workflow_id, workflow, definition_version, subject,
                 idempotency_key, input_digest, state, created_at, ended_at, deadline_at,
                 key_retention_ms, attempts_used, next_seq)
             SELECT {wf}, 'document-delivery', 1, 'local', 'h-' || i, 'sha256:' || i, 'completed', {base} + i, {base} + i + 20, {base} + i + 3600000,
                 86400000, {STEPS}, {EVENTS} + 1
             FROM {}",
            series(ended)
        ),
        format!(
            "INSERT INTO workflow_inputs (workflow_id, input)
             SELECT {wf}, '{{\"title\":\"Doc\",\"recipient\":\"a@example.com\",\"body\":\"x\"}}'
             FROM {}",
            series(ended)
        ),
        format!(
            "INSERT INTO intent_keys (subject, workflow, key, workflow_id, input_digest, expires_at)
             SELECT 'local', 'document-delivery', 'h-' || i, {wf}, 'sha256:' || i,
                 {base} + i + 20 + 86400000
             FROM {}",
            series(ended)
        ),
        format!(
            "INSERT INTO steps (workflow_id, step, state, attempts, role, receipt_id, reads)
             SELECT {wf}, 'step-' || j, 'succeeded', 1, 'handler',
                 printf('rcp_00%012d%d', i, j), '[]'
             FROM {} CROSS JOIN {}",
            series(ended),
            per(STEPS)
        ),
        format!(
            "INSERT INTO attempts (attempt_id, workflow_id, step, number, trigger, lease_owner,
                 component, component_version, component_digest, input_digest, checkpoint,
                 outcome, started_at, finished_at)
             SELECT printf('att_00%012d%d', i, j), {wf}, 'step-' || j, 1, 'initial', 'history',
                 'validate-document', '1.0.0', 'sha256:c', 'sha256:' || i, 6, 'accepted',
                 {base} + i + j, {base} + i + j + 1
             FROM {} CROSS JOIN {}",
            series(ended),
            per(STEPS)
        ),
        format!(
            "INSERT INTO receipts (receipt_id, workflow_id, step, attempt_id, evidence_kind,
                 component, component_version, component_digest, input_digest, output,
                 recorded_at)
             SELECT printf('rcp_00%012d%d', i, j), {wf}, 'step-' || j,
                 printf('att_00%012d%d', i, j), 'response', 'validate-document', '1.0.0',
                 'sha256:c', 'sha256:' || i,
                 '{{\"title\":\"Doc\",\"recipient\":\"a@example.com\",\"body\":\"x\"}}',
                 {base} + i + j + 1
             FROM {} CROSS JOIN {}",
            series(ended),
            per(STEPS)
        ),
        format!(
            "INSERT INTO timeline (workflow_id, seq, at, kind, step, text)
             SELECT {wf}, j, {base} + i + j, 'action', NULL, 'history entry ' || j
             FROM {} CROSS JOIN {}",
            series(ended),
            per(EVENTS)
        ),
        format!(
            "INSERT INTO outbox (id, workflow_id, type, revision, body, state, attempts,
                 created_at, next_at, finished_at)
             SELECT printf('ntf_00%012d%d', i, j), {wf},
                 CASE j WHEN 1 THEN 'workflow.recorded' ELSE 'workflow.completed' END, j, '{{}}',
                 'delivered', 1, {base} + i, {base} + i, {base} + i + 1
             FROM {} CROSS JOIN {}",
            series(ended),
            per(2)
        ),
    ];
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.execute_batch("PRAGMA journal_mode = WAL; BEGIN")
        .unwrap();
    for sql in statements {
        conn.execute_batch(&sql).unwrap();
    }
    conn.execute_batch("COMMIT; ANALYZE; PRAGMA wal_checkpoint(TRUNCATE)")
        .unwrap();
}
