//! A workflow moved to another version of its definition, written once for every backend:
//! in one transaction, if the workflow is as the plan saw it, its step rows are rewritten
//! in the new version's order (each moved row keeps its attempts, receipt and key), the
//! rows of renamed steps' attempts, receipts, approvals and observations follow them, the
//! new steps start pending, and the move is recorded with its plan and told on the
//! timeline.

use super::super::actions::{self, lock_workflow, store_answer};
use super::super::plan::values;
use super::super::rows::{self, Columns};
use super::super::tx::Tx;
use super::super::{
    ActionAnswer, MigrateAnswer, MigrateRequest, MigrationRecord, StoreError, StoreResult,
};
use crate::intent::{EventKind, NewEvent, StepState, WorkflowId};

/// The prefix a row's step id carries while the rows are rewritten: a definition's step
/// id never contains `:`.
const PARKED: &str = "migrating:";

/// The statements of a migration. Parameters, in order:
/// - `migration_facts`, `lock_steps`, `migration_count`, `park_steps`, `drop_parked`,
///   `clear_deps`, `migrations`, `unready_pending`: workflow id;
/// - `move_step`: workflow id, new id, state, role, compensate-on triggers, reads, key
///   step, parked old id, adapter;
/// - `move_items`: workflow id, new batch step id, role, compensate-on triggers, reads, old
///   batch step id, adapter;
/// - `add_step`: workflow id, step, role, compensate-on triggers, reads, adapter;
/// - `renames`: workflow id, from, to; `item_renames`: workflow id, the batch step's id
///   from, to (every item of it follows);
/// - `set_version`: version, migrated from, workflow id;
/// - `insert_migration`: the columns [`rows::migration`] reads, in its order.
pub(crate) struct Sql {
    pub migration_facts: &'static str,
    pub lock_steps: &'static str,
    pub migration_count: &'static str,
    pub park_steps: &'static str,
    pub move_step: &'static str,
    pub move_items: &'static str,
    pub add_step: &'static str,
    pub drop_parked: &'static str,
    pub unready_pending: &'static str,
    pub clear_deps: &'static str,
    pub renames: [&'static str; 4],
    pub item_renames: [&'static str; 4],
    pub set_version: &'static str,
    pub insert_migration: &'static str,
    pub migrations: &'static str,
}

/// The statements as both databases run them.
pub(crate) const SQL: Sql = Sql {
    migration_facts: "SELECT definition_version FROM workflows WHERE workflow_id = $1",
    // The rows are locked before they are compared with the plan's view: a claim that
    // has not committed yet skips them, one that has is seen.
    lock_steps: "SELECT step, state, attempts FROM steps WHERE workflow_id = $1 FOR UPDATE",
    migration_count: "SELECT COUNT(*) AS n FROM migrations WHERE workflow_id = $1",
    park_steps: "UPDATE steps SET step = 'migrating:' || step WHERE workflow_id = $1",
    // Every column of a step row but the role, triggers and reads the new version gives it.
    // `every_step_column_is_carried_by_a_migration` keeps this list whole.
    move_step: "INSERT INTO steps (workflow_id, step, state, attempts, ready_at, next_trigger,
                    uncertain_since, lease_owner, lease_token, lease_expires_at, receipt_id,
                    note, escalated, role, compensate_on, blocked, policy_exception,
                    input_digest, reads, key_sent_at, key_remembered_until,
                    retention_warned_at, key_step, batch_of, item_key, item, item_index,
                    items, max_parallel, subject, adapter)
                SELECT workflow_id, $2, $3, attempts, ready_at, next_trigger, uncertain_since,
                    lease_owner, lease_token, lease_expires_at, receipt_id, note, escalated, $4,
                    $5, blocked, policy_exception, input_digest, $6, key_sent_at,
                    key_remembered_until, retention_warned_at, $7, batch_of, item_key, item,
                    item_index, items, max_parallel, subject, $9
                FROM steps WHERE workflow_id = $1 AND step = $8",
    // A batch step's parked items under its new id, `<to>[<key>]`: a renamed item's key
    // still derives from the identity it was first sent under (its parked id unparked;
    // `migrating:` is 10 characters).
    move_items: "INSERT INTO steps (workflow_id, step, state, attempts, ready_at, next_trigger,
                     uncertain_since, lease_owner, lease_token, lease_expires_at, receipt_id,
                     note, escalated, role, compensate_on, blocked, policy_exception,
                     input_digest, reads, key_sent_at, key_remembered_until,
                     retention_warned_at, key_step, batch_of, item_key, item, item_index,
                     items, max_parallel, subject, adapter)
                 SELECT workflow_id, $2 || '[' || item_key || ']', state, attempts, ready_at,
                     next_trigger, uncertain_since, lease_owner, lease_token, lease_expires_at,
                     receipt_id, note, escalated, $3, $4, blocked, policy_exception,
                     input_digest, $5, key_sent_at, key_remembered_until, retention_warned_at,
                     CASE WHEN $2 = $6 THEN key_step
                          ELSE COALESCE(key_step, substr(step, 11)) END,
                     $2, item_key, item, item_index, items, max_parallel, subject, $7
                 FROM steps
                 WHERE workflow_id = $1 AND batch_of = $6 AND substr(step, 1, 10) = 'migrating:'",
    add_step: "INSERT INTO steps (workflow_id, step, state, role, compensate_on, reads, subject,
                   adapter)
               SELECT $1, $2, 'pending', $3, $4, $5, subject, $6
               FROM workflows WHERE workflow_id = $1",
    drop_parked: "DELETE FROM steps WHERE workflow_id = $1 AND step LIKE 'migrating:%'",
    unready_pending: "UPDATE steps SET ready_at = NULL WHERE workflow_id = $1 AND state = 'pending'",
    clear_deps: "DELETE FROM step_deps WHERE workflow_id = $1",
    renames: [
        "UPDATE attempts SET step = $3 WHERE workflow_id = $1 AND step = $2",
        "UPDATE receipts SET step = $3 WHERE workflow_id = $1 AND step = $2",
        "UPDATE approvals SET step = $3 WHERE workflow_id = $1 AND step = $2",
        "UPDATE observations SET step = $3 WHERE workflow_id = $1 AND step = $2",
    ],
    item_renames: [
        "UPDATE attempts SET step = $3 || substr(step, length($2) + 1)
         WHERE workflow_id = $1 AND substr(step, 1, length($2) + 1) = $2 || '['",
        "UPDATE receipts SET step = $3 || substr(step, length($2) + 1)
         WHERE workflow_id = $1 AND substr(step, 1, length($2) + 1) = $2 || '['",
        "UPDATE approvals SET step = $3 || substr(step, length($2) + 1)
         WHERE workflow_id = $1 AND substr(step, 1, length($2) + 1) = $2 || '['",
        "UPDATE observations SET step = $3 || substr(step, length($2) + 1)
         WHERE workflow_id = $1 AND substr(step, 1, length($2) + 1) = $2 || '['",
    ],
    set_version: "UPDATE workflows SET definition_version = $1, migrated_from = $2
                  WHERE workflow_id = $3",
    insert_migration: "INSERT INTO migrations (workflow_id, number, from_version, to_version,
                           plan, author, reason, at)
                       VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
    migrations: "SELECT workflow_id, number, from_version, to_version, plan, author, reason, at
                 FROM migrations WHERE workflow_id = $1 ORDER BY number",
};

/// SQLite's: its one writer's transaction already excludes every other.
pub(crate) const SQLITE: Sql = Sql {
    lock_steps: "SELECT step, state, attempts FROM steps WHERE workflow_id = $1",
    ..SQL
};

/// Moves the workflow as `req` plans, if it is still as the plan saw it.
pub(super) async fn migrate<T: Tx>(tx: &mut T, req: &MigrateRequest) -> StoreResult<MigrateAnswer> {
    let s = &req.scope;
    if let Some(existing) = actions::find(tx, s).await? {
        return Ok(if existing.request_digest == req.request_digest {
            MigrateAnswer::Replayed(existing)
        } else {
            MigrateAnswer::KeyConflict
        });
    }
    let id = &s.workflow_id;
    // The workflow row's lock orders this against every step change and every claim.
    let (state, _) = lock_workflow(tx, id).await?;
    let (facts, steps_sql) = (
        tx.sql().migration.migration_facts,
        tx.sql().migration.lock_steps,
    );
    let version = tx
        .row(facts, &values![id.as_str()], |r| {
            r.small::<u32>("definition_version")
        })
        .await?
        .ok_or_else(|| StoreError::NotFound(format!("workflow {id}")))?;
    let mut steps = tx
        .rows(steps_sql, &values![id.as_str()], |r| {
            Ok((
                r.text("step")?,
                r.parsed::<StepState>("state")?,
                r.small::<u32>("attempts")?,
            ))
        })
        .await?;
    let mut seen = req.seen.steps.clone();
    steps.sort_by(|a, b| a.0.cmp(&b.0));
    seen.sort_by(|a, b| a.0.cmp(&b.0));
    if req.seen.state != state || req.seen.definition_version != version || steps != seen {
        return Ok(MigrateAnswer::Moved);
    }
    if !actions::reserve(tx, s, &req.request_digest, req.now).await? {
        // A twin under the same key committed first: answer as it did.
        return Ok(MigrateAnswer::Moved);
    }
    let change = match &req.change {
        Ok(change) => change,
        Err(refusal) => {
            store_answer(tx, s, &ActionAnswer::Refused(refusal.clone())).await?;
            return Ok(MigrateAnswer::Refused(refusal.clone()));
        }
    };
    let plan = &change.plan;
    let sql = &tx.sql().migration;
    let count_sql = sql.migration_count;
    let number = tx
        .row(count_sql, &values![id.as_str()], |r| r.uint("n"))
        .await?
        .unwrap_or(0)
        + 1;
    let record = MigrationRecord {
        workflow_id: id.clone(),
        number: u32::try_from(number).unwrap_or(u32::MAX),
        plan: plan.clone(),
        author: s.subject.0.clone(),
        reason: req.reason.clone(),
        at: req.now,
    };
    rewrite_steps(tx, id, req).await?;
    rename_history(tx, id, plan).await?;
    let sql = &tx.sql().migration;
    let (set_version, insert) = (sql.set_version, sql.insert_migration);
    tx.exec(
        set_version,
        &values![
            i64::from(plan.to_version),
            i64::from(plan.from_version),
            id.as_str()
        ],
    )
    .await?;
    let plan_text = crate::store::plan::json_text(plan)?;
    tx.exec(
        insert,
        &values![
            id.as_str(),
            i64::from(record.number),
            i64::from(plan.from_version),
            i64::from(plan.to_version),
            &plan_text,
            &record.author,
            &record.reason,
            record.at as i64,
        ],
    )
    .await?;
    // A new step whose dependencies all succeeded can run at once.
    crate::store::executor::release_dependents(tx, id, req.now).await?;
    let events = [event(&record)];
    tx.tell_and_settle(id, req.now, &events, state, false)
        .await?;
    store_answer(
        tx,
        s,
        &ActionAnswer::Applied(crate::store::plan::json_text(&record)?),
    )
    .await?;
    Ok(MigrateAnswer::Applied(record))
}

/// The step rows again, in the new version's order: every old row parked, each moved row
/// copied to its new id with the new version's role, triggers and reads, each added step
/// inserted pending, the parked rows (and with them the dropped steps) deleted, and the
/// dependencies replaced by the new version's.
async fn rewrite_steps<T: Tx>(
    tx: &mut T,
    id: &WorkflowId,
    req: &MigrateRequest,
) -> StoreResult<()> {
    let Ok(change) = &req.change else {
        return Ok(());
    };
    let sql = &tx.sql().migration;
    let (park, move_step, move_items, add_step, drop_parked, unready, clear_deps) = (
        sql.park_steps,
        sql.move_step,
        sql.move_items,
        sql.add_step,
        sql.drop_parked,
        sql.unready_pending,
        sql.clear_deps,
    );
    let insert_dep = tx.sql().executor.insert_dep;
    tx.exec(park, &values![id.as_str()]).await?;
    for step in &change.steps {
        let triggers = rows::triggers_text(&step.compensate_on);
        let reads = crate::store::plan::reads_text(step.reads.as_deref())?;
        match change.plan.moved.iter().find(|m| m.to == step.id) {
            Some(m) => {
                let parked = format!("{PARKED}{}", m.from);
                tx.exec(
                    move_step,
                    &values![
                        id.as_str(),
                        step.id.as_str(),
                        m.state.as_str(),
                        step.role.as_str(),
                        triggers.as_deref(),
                        reads.as_deref(),
                        m.key_step.as_deref(),
                        parked.as_str(),
                        step.adapter.as_deref(),
                    ],
                )
                .await?;
                if m.items.is_some() {
                    tx.exec(
                        move_items,
                        &values![
                            id.as_str(),
                            step.id.as_str(),
                            step.role.as_str(),
                            triggers.as_deref(),
                            reads.as_deref(),
                            m.from.as_str(),
                            step.adapter.as_deref(),
                        ],
                    )
                    .await?;
                }
            }
            None => {
                tx.exec(
                    add_step,
                    &values![
                        id.as_str(),
                        step.id.as_str(),
                        step.role.as_str(),
                        triggers.as_deref(),
                        reads.as_deref(),
                        step.adapter.as_deref(),
                    ],
                )
                .await?;
            }
        }
    }
    tx.exec(drop_parked, &values![id.as_str()]).await?;
    tx.exec(unready, &values![id.as_str()]).await?;
    tx.exec(clear_deps, &values![id.as_str()]).await?;
    for step in &change.steps {
        for dep in &step.depends_on {
            tx.exec(
                insert_dep,
                &values![id.as_str(), step.id.as_str(), dep.as_str()],
            )
            .await?;
        }
    }
    Ok(())
}

/// The attempts, receipts, approvals and observations of renamed steps follow them; in two
/// passes, so that two steps may trade names.
async fn rename_history<T: Tx>(
    tx: &mut T,
    id: &WorkflowId,
    plan: &crate::course::MigrationPlan,
) -> StoreResult<()> {
    let (renames, item_renames) = (tx.sql().migration.renames, tx.sql().migration.item_renames);
    let renamed: Vec<(&str, String, &str)> = plan
        .moved
        .iter()
        .filter(|m| m.from != m.to)
        .map(|m| (m.from.as_str(), format!("{PARKED}{}", m.to), m.to.as_str()))
        .collect();
    for (from, parked, _) in &renamed {
        for statement in renames.iter().chain(&item_renames) {
            tx.exec(statement, &values![id.as_str(), *from, parked.as_str()])
                .await?;
        }
    }
    for (_, parked, to) in &renamed {
        for statement in renames.iter().chain(&item_renames) {
            tx.exec(statement, &values![id.as_str(), parked.as_str(), *to])
                .await?;
        }
    }
    Ok(())
}

/// The timeline's record of a migration.
fn event(m: &MigrationRecord) -> NewEvent {
    let p = &m.plan;
    let mut parts: Vec<String> = p
        .moved
        .iter()
        .filter(|s| s.from != s.to)
        .map(|s| match s.items {
            Some(n) => format!("{} → {} (with its {n} items)", s.from, s.to),
            None => format!("{} → {}", s.from, s.to),
        })
        .collect();
    if !p.added.is_empty() {
        parts.push(format!("added {}", p.added.join(", ")));
    }
    if !p.dropped.is_empty() {
        parts.push(format!("dropped {}", p.dropped.join(", ")));
    }
    if parts.is_empty() {
        parts.push("every step kept".into());
    }
    NewEvent::workflow(
        EventKind::Action,
        format!(
            "Migrated from definition v{} to v{} by {}: {}. Reason: {}",
            p.from_version,
            p.to_version,
            m.author,
            parts.join("; "),
            m.reason
        ),
    )
    .with_data(serde_json::json!({
        "migration": m.number,
        "from_version": p.from_version,
        "to_version": p.to_version,
        "moved": p.moved,
        "added": p.added,
        "dropped": p.dropped,
    }))
}

/// The workflow's migrations, oldest first.
pub(super) async fn migrations<T: Tx>(
    tx: &mut T,
    id: &WorkflowId,
) -> StoreResult<Vec<MigrationRecord>> {
    let sql = tx.sql().migration.migrations;
    tx.rows(sql, &values![id.as_str()], |r| rows::migration(r))
        .await
}

#[cfg(test)]
mod tests {
    /// The columns of the `steps` table as the migrations of `backend` make it.
    fn step_columns(backend: &str) -> Vec<String> {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../migrations")
            .join(backend);
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        let mut columns = Vec::new();
        for file in files {
            let text = std::fs::read_to_string(file).unwrap();
            if let Some(start) = text.find("CREATE TABLE steps (") {
                let body = &text[start..text[start..].find("\n);").unwrap() + start];
                for line in body.lines().skip(1) {
                    let word = line.split_whitespace().next().unwrap_or("");
                    if !word.is_empty() && !word.starts_with("--") && word != "PRIMARY" {
                        columns.push(word.to_string());
                    }
                }
            }
            for line in text.lines() {
                if let Some(rest) = line.strip_prefix("ALTER TABLE steps ADD COLUMN ") {
                    columns.push(rest.split_whitespace().next().unwrap().to_string());
                }
            }
        }
        columns.retain(|c| c != "ord");
        columns.sort();
        columns
    }

    /// A migration rewrites each row by copying its columns: a column added to `steps`
    /// and not copied would be lost by every migration.
    #[test]
    fn every_step_column_is_carried_by_a_migration() {
        for sql in [super::SQL.move_step, super::SQL.move_items] {
            let listed = &sql[sql.find('(').unwrap() + 1..sql.find(')').unwrap()];
            let mut carried: Vec<String> =
                listed.split(',').map(|c| c.trim().to_string()).collect();
            carried.sort();
            for backend in ["sqlite", "postgres"] {
                assert_eq!(step_columns(backend), carried, "{backend}");
            }
        }
    }
}
