//! Changes of a workflow's course, written once for every backend: its cancellation
//! (under a key, with the course settled in the same transaction), its input's revisions,
//! its move to another definition version ([`migration`]), and the answers remembered
//! under an operator's key.

pub(crate) mod migration;
pub(crate) mod plan;
pub(crate) mod sqlite;

use super::actions::{self, lock_workflow, store_answer};
use super::plan::values;
use super::rows::{self, Columns};
use super::tx::{Backend, Tx};
use super::{
    ActionAnswer, ActionRecord, ActionScope, CancelAnswer, CancelRequest, CancellationRecord,
    CourseStore, MigrateAnswer, MigrateRequest, MigrationRecord, ReviseAnswer, ReviseRequest,
    RevisionRecord, StoreResult,
};
use crate::course;
use crate::intent::{Millis, StepState, WorkflowId};

/// The statements of a workflow's course. Parameters, in order:
/// - `cancellation`, `course_steps`, `running_checkpoints`, `revision_facts`,
///   `step_revisions`: workflow id;
/// - `insert_cancellation`: the columns [`rows::cancellation`] reads, in its order;
/// - `set_cancel_on`: triggers, workflow id;
/// - `set_input`: input digest, input revision, workflow id;
/// - `set_input_text`: input, workflow id;
/// - `keep_admitted`: workflow id, the reason revision 1 gives;
/// - `revisions`: workflow id, the reason revision 1 gives;
/// - `insert_revision`: the columns [`rows::revision`] reads, in its order, then the input;
/// - `rerun`: state, ready at (when ready), workflow id, step;
/// - `supersede_receipts`, `supersede_attempts`: revision, workflow id, step.
pub(crate) struct Sql {
    pub cancellation: &'static str,
    pub course_steps: &'static str,
    pub running_checkpoints: &'static str,
    pub insert_cancellation: &'static str,
    pub set_cancel_on: &'static str,
    pub revision_facts: &'static str,
    pub step_revisions: &'static str,
    pub set_input: &'static str,
    pub set_input_text: &'static str,
    pub keep_admitted: &'static str,
    pub insert_revision: &'static str,
    pub rerun: &'static str,
    pub supersede_receipts: &'static str,
    pub supersede_attempts: &'static str,
    pub revisions: &'static str,
}

/// The statements as both databases run them (see [`super::tx`] on placeholders); a
/// backend's module beside this one replaces the few that backend writes its own way.
pub(crate) const SQL: Sql = Sql {
    cancellation: "SELECT cancellation_id, workflow_id, requested_by, requested_at, reason,
                       withdraw, outcome, message, consequences
                   FROM cancellations WHERE workflow_id = $1",
    // `ord` is the step's place in its definition.
    course_steps: "SELECT s.step, s.role, s.state, s.uncertain_since, s.compensate_on,
                       s.receipt_id, s.items, r.external_reference
                   FROM steps s LEFT JOIN receipts r ON r.receipt_id = s.receipt_id
                   WHERE s.workflow_id = $1 ORDER BY s.ord",
    running_checkpoints: "SELECT a.step, a.checkpoint FROM steps s JOIN attempts a
                              ON a.workflow_id = s.workflow_id AND a.step = s.step
                                 AND a.number = s.attempts
                          WHERE s.workflow_id = $1 AND s.state = 'running'",
    insert_cancellation: "INSERT INTO cancellations (cancellation_id, workflow_id, requested_by,
                              requested_at, reason, withdraw, outcome, message, consequences)
                          VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
    set_cancel_on: "UPDATE workflows SET cancel_on = $1 WHERE workflow_id = $2",
    revision_facts: "SELECT input_revision FROM workflows WHERE workflow_id = $1",
    step_revisions: "SELECT step, state, attempts FROM steps WHERE workflow_id = $1",
    set_input: "UPDATE workflows SET input_digest = $1, input_revision = $2
                WHERE workflow_id = $3",
    set_input_text: "UPDATE workflow_inputs SET input = $1 WHERE workflow_id = $2",
    // Revision 1 is kept in the workflow row until a revision replaces it there.
    keep_admitted: "INSERT INTO revisions (workflow_id, input_revision, prior_digest,
                        input_digest, author, reason, at, invalidated_steps, kept_receipts,
                        input)
                    SELECT w.workflow_id, 1, NULL, w.input_digest, w.subject, $2, w.created_at,
                        '[]', '[]', i.input
                    FROM workflows w JOIN workflow_inputs i ON i.workflow_id = w.workflow_id
                    WHERE w.workflow_id = $1 AND w.input_revision = 1",
    insert_revision: "INSERT INTO revisions (workflow_id, input_revision, prior_digest,
                          input_digest, author, reason, at, invalidated_steps, kept_receipts,
                          input)
                      VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
    rerun: "UPDATE steps SET state = $1, ready_at = $2, receipt_id = NULL,
                next_trigger = 'initial', note = NULL, uncertain_since = NULL, escalated = NULL,
                input_digest = NULL, key_sent_at = NULL, key_remembered_until = NULL,
                retention_warned_at = NULL
            WHERE workflow_id = $3 AND step = $4",
    supersede_receipts: "UPDATE receipts SET superseded_by = $1
                         WHERE workflow_id = $2 AND step = $3 AND superseded_by IS NULL",
    supersede_attempts: "UPDATE attempts SET superseded_by = $1
                         WHERE workflow_id = $2 AND step = $3 AND superseded_by IS NULL",
    // A workflow never revised has its revision 1 in its own row only.
    revisions: "SELECT workflow_id, input_revision, prior_digest, input_digest, author, reason,
                    at, invalidated_steps, kept_receipts, input
                FROM revisions WHERE workflow_id = $1
                UNION ALL
                SELECT w.workflow_id, 1, NULL, w.input_digest, w.subject, $2, w.created_at, '[]',
                    '[]', i.input
                FROM workflows w JOIN workflow_inputs i ON i.workflow_id = w.workflow_id
                WHERE w.workflow_id = $1 AND w.input_revision = 1
                ORDER BY input_revision",
};

async fn cancellation<T: Tx>(
    tx: &mut T,
    id: &WorkflowId,
) -> StoreResult<Option<CancellationRecord>> {
    let sql = tx.sql().course.cancellation;
    tx.row(sql, &values![id.as_str()], |r| rows::cancellation(r))
        .await
}

/// The workflow's rows as the course sees them, with the checkpoint of each running attempt.
async fn course_steps<T: Tx>(tx: &mut T, id: &WorkflowId) -> StoreResult<Vec<course::CourseStep>> {
    let sql = &tx.sql().course;
    let (steps_sql, running_sql) = (sql.course_steps, sql.running_checkpoints);
    let mut steps = tx
        .rows(steps_sql, &values![id.as_str()], |r| rows::course_step(r))
        .await?;
    let running = tx
        .rows(running_sql, &values![id.as_str()], |r| {
            Ok((r.text("step")?, r.small::<u8>("checkpoint")?))
        })
        .await?;
    for (step, checkpoint) in running {
        if let Some(s) = steps.iter_mut().find(|s| s.id == step) {
            s.checkpoint = Some(checkpoint);
        }
    }
    Ok(steps)
}

async fn cancel<T: Tx>(tx: &mut T, req: &CancelRequest) -> StoreResult<CancelAnswer> {
    let s = &req.scope;
    if let Err(existing) = actions::take(tx, s, &req.request_digest, req.now).await? {
        return Ok(if existing.request_digest == req.request_digest {
            CancelAnswer::Replayed(existing)
        } else {
            CancelAnswer::KeyConflict
        });
    }
    let id = &s.workflow_id;
    // The workflow row's lock orders this against every step change and checkpoint 3.
    let (state, cancelled) = lock_workflow(tx, id).await?;
    if cancelled && let Some(existing) = cancellation(tx, id).await? {
        let text = plan::cancel_answer_text(false, &existing)?;
        store_answer(tx, s, &ActionAnswer::Applied(text)).await?;
        return Ok(CancelAnswer::Existing(existing));
    }
    let steps = course_steps(tx, id).await?;
    let record = match plan::cancellation(req, state, &steps) {
        Ok(record) => record,
        Err(refusal) => {
            store_answer(tx, s, &ActionAnswer::Refused(refusal.clone())).await?;
            return Ok(CancelAnswer::Refused(refusal));
        }
    };
    let consequences = crate::store::plan::json_text(&record.consequences)?;
    let sql = &tx.sql().course;
    let (insert, set_cancel_on) = (sql.insert_cancellation, sql.set_cancel_on);
    tx.exec(
        insert,
        &values![
            record.cancellation_id.as_str(),
            id.as_str(),
            &record.requested_by,
            record.requested_at as i64,
            &record.reason,
            i64::from(record.withdraw),
            record.outcome.as_str(),
            &record.message,
            &consequences,
        ],
    )
    .await?;
    let triggers = rows::triggers_text(course::CANCELLATION_TRIGGERS);
    tx.exec(set_cancel_on, &values![triggers.as_deref(), id.as_str()])
        .await?;
    let events = [plan::cancellation_event(&record)];
    tx.tell_and_settle(id, req.now, &events, state, true)
        .await?;
    let text = plan::cancel_answer_text(true, &record)?;
    store_answer(tx, s, &ActionAnswer::Applied(text)).await?;
    Ok(CancelAnswer::Created(record))
}

async fn revise<T: Tx>(tx: &mut T, req: &ReviseRequest) -> StoreResult<ReviseAnswer> {
    let s = &req.scope;
    if let Some(existing) = actions::find(tx, s).await? {
        return Ok(if existing.request_digest == req.request_digest {
            ReviseAnswer::Replayed(existing)
        } else {
            ReviseAnswer::KeyConflict
        });
    }
    let id = &s.workflow_id;
    // The workflow row's lock orders this against every step change.
    let (state, _) = lock_workflow(tx, id).await?;
    let sql = &tx.sql().course;
    let (facts_sql, steps_sql) = (sql.revision_facts, sql.step_revisions);
    let input_revision = tx
        .row(facts_sql, &values![id.as_str()], |r| {
            r.small::<u32>("input_revision")
        })
        .await?
        .ok_or_else(|| super::StoreError::NotFound(format!("workflow {id}")))?;
    let steps = tx
        .rows(steps_sql, &values![id.as_str()], |r| {
            Ok((
                r.text("step")?,
                r.parsed::<StepState>("state")?,
                r.small::<u32>("attempts")?,
            ))
        })
        .await?;
    if !plan::unmoved(&req.seen, state, input_revision, &steps) {
        return Ok(ReviseAnswer::Moved);
    }
    if !actions::reserve(tx, s, &req.request_digest, req.now).await? {
        // A twin under the same key committed first: answer as it did.
        return Ok(ReviseAnswer::Moved);
    }
    let revision_plan = match &req.change {
        Ok(p) => p,
        Err(refusal) => {
            store_answer(tx, s, &ActionAnswer::Refused(refusal.clone())).await?;
            return Ok(ReviseAnswer::Refused(refusal.clone()));
        }
    };
    let record = plan::revision_record(req, revision_plan);
    let n = i64::from(record.input_revision);
    let (invalidated, kept) = (
        crate::store::plan::json_text(&record.invalidated_steps)?,
        crate::store::plan::json_text(&record.kept_receipts)?,
    );
    let sql = &tx.sql().course;
    let (set_input, insert_revision, rerun) = (sql.set_input, sql.insert_revision, sql.rerun);
    let keep_admitted = sql.keep_admitted;
    let supersede = [sql.supersede_receipts, sql.supersede_attempts];
    // The command as admitted leaves the workflow row now: it is kept as revision 1.
    tx.exec(
        keep_admitted,
        &values![id.as_str(), crate::course::ADMITTED],
    )
    .await?;
    tx.exec(set_input, &values![&req.input.digest, n, id.as_str()])
        .await?;
    tx.exec(sql.set_input_text, &values![&req.input.text, id.as_str()])
        .await?;
    tx.exec(
        insert_revision,
        &values![
            id.as_str(),
            n,
            record.prior_digest.as_deref(),
            &record.input_digest,
            &record.author,
            &record.reason,
            record.at as i64,
            &invalidated,
            &kept,
            &req.input.text,
        ],
    )
    .await?;
    for (step, again) in &revision_plan.rerun {
        let ready_at = (*again == StepState::Ready).then_some(req.now as i64);
        tx.exec(
            rerun,
            &values![again.as_str(), ready_at, id.as_str(), step.as_str()],
        )
        .await?;
        for statement in supersede {
            tx.exec(statement, &values![n, id.as_str(), step.as_str()])
                .await?;
        }
    }
    let events = [plan::revision_event(&record)];
    tx.tell_and_settle(id, req.now, &events, state, false)
        .await?;
    store_answer(
        tx,
        s,
        &ActionAnswer::Applied(crate::store::plan::json_text(&record)?),
    )
    .await?;
    Ok(ReviseAnswer::Applied(record))
}

async fn revisions<T: Tx>(tx: &mut T, id: &WorkflowId) -> StoreResult<Vec<RevisionRecord>> {
    let sql = tx.sql().course.revisions;
    tx.rows(sql, &values![id.as_str(), crate::course::ADMITTED], |r| {
        rows::revision(r)
    })
    .await
}

impl<B: Backend> CourseStore for B {
    async fn cancel(&self, request: CancelRequest) -> StoreResult<CancelAnswer> {
        self.write(request, |tx, req| Box::pin(cancel(tx, req)))
            .await
    }

    async fn cancellation(&self, id: &WorkflowId) -> StoreResult<Option<CancellationRecord>> {
        self.read(id.clone(), |tx, id| Box::pin(cancellation(tx, id)))
            .await
    }

    async fn revise(&self, request: ReviseRequest) -> StoreResult<ReviseAnswer> {
        self.write(request, |tx, req| Box::pin(revise(tx, req)))
            .await
    }

    async fn remember(
        &self,
        scope: ActionScope,
        request_digest: String,
        answer: ActionAnswer,
        now: Millis,
    ) -> StoreResult<ActionRecord> {
        actions::remember_on(self, scope, request_digest, answer, now).await
    }

    async fn revisions(&self, id: &WorkflowId) -> StoreResult<Vec<RevisionRecord>> {
        self.read(id.clone(), |tx, id| Box::pin(revisions(tx, id)))
            .await
    }

    async fn migrate(&self, request: MigrateRequest) -> StoreResult<MigrateAnswer> {
        self.write(request, |tx, req| Box::pin(migration::migrate(tx, req)))
            .await
    }

    async fn migrations(&self, id: &WorkflowId) -> StoreResult<Vec<MigrationRecord>> {
        self.read(id.clone(), |tx, id| Box::pin(migration::migrations(tx, id)))
            .await
    }
}
