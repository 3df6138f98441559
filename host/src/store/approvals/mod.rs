//! Approvals, written once for every backend: an approval step asked under its lease (the
//! consequence kept, the step left waiting), the decision an operator action carries
//! (applied only while the approval it answers is still the one asked), the expiry of
//! approvals nobody decided, and what the API, the console and the CLI read of them.

use super::plan::values;
use super::rows::{self, Columns};
use super::tx::{Backend, Tx};
use super::{
    ApprovalDecision, ApprovalRecord, ApprovalStore, AskApproval, PendingApproval, StoreError,
    StoreResult, StoredRefusal,
};
use crate::intent::{
    ApprovalOutcome, AttemptId, AttemptOutcome, EventKind, Millis, NewEvent, Subject, WorkflowId,
};

/// The statements of approvals. Parameters, in order:
/// - `wait` (the asking attempt's lease is the fence): note, workflow id, step, lease token;
/// - `supersede` (every approval of the step still open): decided at, workflow id, step;
/// - `insert`: workflow id, step, attempt id, digest, consequence, asked at, expires at;
/// - `give_back` (asking draws on no attempt): workflow id;
/// - `open` (the step's approval still waiting, if it waits): workflow id, step;
/// - `decide` (only the open approval with this digest): outcome, decided by, decided at,
///   text, workflow id, step, digest;
/// - `of_workflow`: workflow id; `pending`: limit; `expired`: now, limit;
/// - `fail_step` (only a step still waiting): note, workflow id, step;
/// - `due` (any approval to expire or to warn about): now; `warn_due` (waiting, not yet
///   warned, a fifth of its wait or less left): now, limit; `mark_warned`: now, workflow
///   id, step, attempt id.
pub(crate) struct Sql {
    pub wait: &'static str,
    pub supersede: &'static str,
    pub insert: &'static str,
    pub give_back: &'static str,
    pub open: &'static str,
    pub decide: &'static str,
    pub of_workflow: &'static str,
    pub pending: &'static str,
    pub expired: &'static str,
    pub fail_step: &'static str,
    pub due: &'static str,
    pub warn_due: &'static str,
    pub mark_warned: &'static str,
}

/// An approval's columns, as `a`.
macro_rules! approval_columns {
    () => {
        "a.workflow_id, a.step, a.attempt_id, a.digest, a.consequence, a.asked_at,
         a.expires_at, a.warned_at, a.outcome, a.decided_by, a.decided_at, a.decision_text"
    };
}

/// The statements as both databases run them (see [`super::tx`] on placeholders).
pub(crate) const SQL: Sql = Sql {
    wait: "UPDATE steps SET state = 'awaiting_approval', ready_at = NULL, note = $1,
               blocked = NULL, lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL
           WHERE workflow_id = $2 AND step = $3 AND lease_token = $4 AND state = 'running'",
    supersede: "UPDATE approvals SET outcome = 'superseded', decided_at = $1
                WHERE workflow_id = $2 AND step = $3 AND outcome IS NULL",
    insert: "INSERT INTO approvals
                 (workflow_id, step, attempt_id, digest, consequence, asked_at, expires_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
    give_back: "UPDATE workflows SET attempts_used = attempts_used - 1 WHERE workflow_id = $1",
    open: concat!(
        "SELECT ",
        approval_columns!(),
        " FROM approvals a JOIN steps s ON s.workflow_id = a.workflow_id AND s.step = a.step
         WHERE a.workflow_id = $1 AND a.step = $2 AND a.outcome IS NULL
           AND s.state = 'awaiting_approval'
         ORDER BY a.asked_at DESC LIMIT 1"
    ),
    decide: "UPDATE approvals SET outcome = $1, decided_by = $2, decided_at = $3,
                 decision_text = $4
             WHERE workflow_id = $5 AND step = $6 AND digest = $7 AND outcome IS NULL",
    of_workflow: concat!(
        "SELECT ",
        approval_columns!(),
        " FROM approvals a WHERE a.workflow_id = $1 ORDER BY a.asked_at, a.attempt_id"
    ),
    pending: concat!(
        "SELECT ",
        approval_columns!(),
        ", w.workflow, w.definition_version, w.subject, s.note
         FROM approvals a
         JOIN steps s ON s.workflow_id = a.workflow_id AND s.step = a.step
         JOIN workflows w ON w.workflow_id = a.workflow_id
         WHERE a.outcome IS NULL AND s.state = 'awaiting_approval'
         ORDER BY a.asked_at, a.workflow_id, a.step LIMIT $1"
    ),
    expired: concat!(
        "SELECT ",
        approval_columns!(),
        " FROM approvals a JOIN steps s ON s.workflow_id = a.workflow_id AND s.step = a.step
         WHERE a.outcome IS NULL AND s.state = 'awaiting_approval' AND a.expires_at <= $1
         ORDER BY a.expires_at LIMIT $2"
    ),
    fail_step: "UPDATE steps SET state = 'failed_terminal', note = $1
                WHERE workflow_id = $2 AND step = $3 AND state = 'awaiting_approval'
                  AND lease_token IS NULL",
    due: "SELECT a.step FROM approvals a
          WHERE a.outcome IS NULL
            AND (a.expires_at <= $1
                 OR (a.warned_at IS NULL AND $1 >= a.expires_at - (a.expires_at - a.asked_at) / 5))
          LIMIT 1",
    warn_due: concat!(
        "SELECT ",
        approval_columns!(),
        ", w.deadline_at, w.deadline_warned_at
         FROM approvals a JOIN steps s ON s.workflow_id = a.workflow_id AND s.step = a.step
         JOIN workflows w ON w.workflow_id = a.workflow_id
         WHERE a.outcome IS NULL AND a.warned_at IS NULL AND s.state = 'awaiting_approval'
           AND $1 < a.expires_at AND $1 >= a.expires_at - (a.expires_at - a.asked_at) / 5
         ORDER BY a.expires_at LIMIT $2"
    ),
    mark_warned: "UPDATE approvals SET warned_at = $1
                  WHERE workflow_id = $2 AND step = $3 AND attempt_id = $4 AND warned_at IS NULL",
};

/// An approval's row.
fn record(r: &impl Columns) -> StoreResult<ApprovalRecord> {
    Ok(ApprovalRecord {
        workflow_id: WorkflowId(r.text("workflow_id")?),
        step: r.text("step")?,
        attempt_id: AttemptId(r.text("attempt_id")?),
        digest: r.text("digest")?,
        consequence: r.json("consequence")?,
        asked_at: r.uint("asked_at")?,
        expires_at: r.uint("expires_at")?,
        warned_at: r.opt_uint("warned_at")?,
        outcome: r
            .opt_text("outcome")?
            .map(|t| rows::parse::<ApprovalOutcome>(&t))
            .transpose()?,
        decided_by: r.opt_text("decided_by")?,
        decided_at: r.opt_uint("decided_at")?,
        decision_text: r.opt_text("decision_text")?,
    })
}

/// Records an approval step's question under the lease of the attempt that asked it: the
/// step waits, the consequence is kept (an earlier question of the step is superseded),
/// and the attempt draws on nothing.
pub(crate) async fn ask<T: Tx>(tx: &mut T, req: &AskApproval) -> StoreResult<()> {
    let sql = &tx.sql().approvals;
    let (id, step) = (req.fence.workflow_id.as_str(), req.fence.step.as_str());
    let (wait, supersede, insert, give_back) = (sql.wait, sql.supersede, sql.insert, sql.give_back);
    let moved = tx
        .exec(
            wait,
            &values![req.note.as_str(), id, step, req.fence.lease_token.as_str()],
        )
        .await?;
    if moved == 0 {
        return Err(req.fence.lost());
    }
    let facts = super::AttemptFacts {
        provenance: Some(crate::intent::Provenance {
            input_digest: req.digest.clone(),
            ..crate::workflow::approval_provenance()
        }),
        observation: Some(req.note.clone()),
        outcome: Some(AttemptOutcome::Accepted),
        ..Default::default()
    };
    super::executor::record_facts(tx, &req.attempt_id, 2, &facts, Some(req.now), None).await?;
    let now = req.now as i64;
    tx.exec(supersede, &values![now, id, step]).await?;
    let consequence = super::plan::json_text(&req.consequence)?;
    tx.exec(
        insert,
        &values![
            id,
            step,
            req.attempt_id.as_str(),
            req.digest.as_str(),
            consequence.as_str(),
            now,
            req.expires_at as i64
        ],
    )
    .await?;
    tx.exec(give_back, &values![id]).await?;
    let (current, cancelled) = super::actions::lock_workflow(tx, &req.fence.workflow_id).await?;
    tx.tell_and_settle(
        &req.fence.workflow_id,
        req.now,
        &req.events,
        current,
        cancelled,
    )
    .await?;
    let told = serde_json::json!({
        "step": step,
        "digest": req.digest,
        "expires_at": crate::intent::rfc3339(req.expires_at),
    });
    super::notifications::outbox_approval(
        tx,
        &req.fence.workflow_id,
        crate::notify::EventType::ApprovalRequired,
        &told,
        req.now,
    )
    .await
}

/// The step's approval still waiting for a decision, if it waits.
pub(crate) async fn open<T: Tx>(
    tx: &mut T,
    id: &WorkflowId,
    step: &str,
) -> StoreResult<Option<ApprovalRecord>> {
    let sql = tx.sql().approvals.open;
    tx.row(sql, &values![id.as_str(), step], |r| record(r))
        .await
}

/// Whether `decision` answers the step's open approval; if not, the refusal to store,
/// naming the digest that is open now.
pub(crate) async fn check_decision<T: Tx>(
    tx: &mut T,
    id: &WorkflowId,
    step: &str,
    decision: &ApprovalDecision,
) -> StoreResult<Result<(), StoredRefusal>> {
    let open = open(tx, id, step).await?;
    Ok(match open {
        Some(open) if open.digest == decision.digest => Ok(()),
        open => {
            let mut refusal = decision.changed.clone();
            refusal.details = vec![serde_json::json!({
                "current_digest": open.map(|o| o.digest),
            })];
            Err(refusal)
        }
    })
}

/// Closes the step's open approval with `decision`.
pub(crate) async fn record_decision<T: Tx>(
    tx: &mut T,
    id: &WorkflowId,
    step: &str,
    decision: &ApprovalDecision,
    now: Millis,
) -> StoreResult<()> {
    let sql = tx.sql().approvals.decide;
    let closed = tx
        .exec(
            sql,
            &values![
                decision.outcome.as_str(),
                decision.by.0.as_str(),
                now as i64,
                decision.text.as_deref(),
                id.as_str(),
                step,
                decision.digest.as_str()
            ],
        )
        .await?;
    if closed == 0 {
        return Err(StoreError::Corrupt(format!(
            "the approval of step {step} of {id} was checked open and then not found"
        )));
    }
    Ok(())
}

/// Queues the notification that the step's approval was decided (after the decision's
/// transition, so its body tells the workflow as it now is).
pub(crate) async fn tell_decision<T: Tx>(
    tx: &mut T,
    id: &WorkflowId,
    step: &str,
    decision: &ApprovalDecision,
    now: Millis,
) -> StoreResult<()> {
    let record = super::actions::workflow(tx, id).await?;
    // The wait is tallied with the decision, so the metrics count each decision once,
    // whichever host made it, and survive restarts.
    let mut tallies = super::metrics::Tallies::default();
    tallies.approval(
        &record.workflow,
        decision.outcome.as_str(),
        now.saturating_sub(decision.asked_at),
    );
    tx.apply(super::tx::Write::AddTallies {
        tallies: &tallies,
        shard: super::metrics::shard_of(id),
    })
    .await?;
    let told = serde_json::json!({
        "step": step,
        "digest": decision.digest,
        "outcome": decision.outcome.as_str(),
        "by": decision.by.0,
    });
    super::notifications::outbox_approval_for(
        tx,
        &record,
        crate::notify::EventType::ApprovalDecided,
        &told,
        now,
    )
    .await
}

/// Ends every approval nobody decided before it expired: the step fails (and the
/// workflow's course settles, compensating what asks for it), the approval is closed
/// `expired`. Returns how many expired.
async fn expire<T: Tx>(tx: &mut T, (now, limit): &(Millis, u32)) -> StoreResult<u64> {
    let sql = tx.sql().approvals.expired;
    let due = tx
        .rows(sql, &values![*now as i64, i64::from(*limit)], |r| record(r))
        .await?;
    let mut expired = 0;
    for approval in due {
        let note = format!(
            "the approval expired at {} before anyone approved it",
            crate::intent::rfc3339(approval.expires_at)
        );
        let fail = tx.sql().approvals.fail_step;
        let moved = tx
            .exec(
                fail,
                &values![
                    note.as_str(),
                    approval.workflow_id.as_str(),
                    approval.step.as_str()
                ],
            )
            .await?;
        if moved == 0 {
            continue;
        }
        let decision = ApprovalDecision {
            asked_at: approval.asked_at,
            digest: approval.digest.clone(),
            outcome: ApprovalOutcome::Expired,
            by: Subject("docket".into()),
            text: Some(note.clone()),
            changed: StoredRefusal {
                code: String::new(),
                message: String::new(),
                details: Vec::new(),
            },
        };
        record_decision(tx, &approval.workflow_id, &approval.step, &decision, *now).await?;
        let event = NewEvent::step(
            EventKind::Conclusion,
            &approval.step,
            Some(&approval.attempt_id),
            format!("Approval expired: {note}; the step failed"),
        )
        .with_data(serde_json::json!({
            "approval": {"outcome": "expired", "digest": approval.digest},
        }));
        let (current, cancelled) = super::actions::lock_workflow(tx, &approval.workflow_id).await?;
        tx.tell_and_settle(&approval.workflow_id, *now, &[event], current, cancelled)
            .await?;
        tell_decision(tx, &approval.workflow_id, &approval.step, &decision, *now).await?;
        expired += 1;
    }
    Ok(expired)
}

/// Warns, once each, of the approvals with a fifth of their wait or less left: the
/// timeline says so and the notification is queued. Returns how many.
async fn warn<T: Tx>(tx: &mut T, (now, limit): &(Millis, u32)) -> StoreResult<u64> {
    let sql = tx.sql().approvals.warn_due;
    let due = tx
        .rows(sql, &values![*now as i64, i64::from(*limit)], |r| {
            // An approval that waits until the workflow's deadline, of a workflow already
            // warned of that deadline, is not warned of twice.
            let coincides = r.opt_uint("deadline_warned_at")?.is_some()
                && r.uint("deadline_at")? == r.uint("expires_at")?;
            Ok((record(r)?, coincides))
        })
        .await?;
    let mut warned = 0;
    for (approval, coincides) in due {
        let mark = tx.sql().approvals.mark_warned;
        let marked = tx
            .exec(
                mark,
                &values![
                    *now as i64,
                    approval.workflow_id.as_str(),
                    approval.step.as_str(),
                    approval.attempt_id.as_str()
                ],
            )
            .await?;
        if marked == 0 {
            continue;
        }
        let expires_at = crate::intent::rfc3339(approval.expires_at);
        let text = if coincides {
            format!(
                "The approval expires with the workflow's deadline at {expires_at}, of which the workflow was warned"
            )
        } else {
            format!("The approval expires at {expires_at}: a fifth of its time is left")
        };
        let event = NewEvent::step(
            EventKind::Observation,
            &approval.step,
            Some(&approval.attempt_id),
            text,
        );
        tx.apply(super::tx::Write::AppendEvents {
            workflow: &approval.workflow_id,
            now: *now,
            events: std::slice::from_ref(&event),
        })
        .await?;
        if coincides {
            continue;
        }
        let told = serde_json::json!({
            "step": approval.step,
            "digest": approval.digest,
            "expires_at": expires_at,
        });
        super::notifications::outbox_approval(
            tx,
            &approval.workflow_id,
            crate::notify::EventType::ApprovalExpiring,
            &told,
            *now,
        )
        .await?;
        warned += 1;
    }
    Ok(warned)
}

/// Expires what is due, then warns of what draws near.
async fn expire_and_warn<T: Tx>(tx: &mut T, a: &(Millis, u32)) -> StoreResult<(u64, u64)> {
    let expired = expire(tx, a).await?;
    let warned = warn(tx, a).await?;
    Ok((expired, warned))
}

async fn of_workflow<T: Tx>(tx: &mut T, id: &WorkflowId) -> StoreResult<Vec<ApprovalRecord>> {
    let sql = tx.sql().approvals.of_workflow;
    tx.rows(sql, &values![id.as_str()], |r| record(r)).await
}

async fn pending<T: Tx>(tx: &mut T, limit: &u32) -> StoreResult<Vec<PendingApproval>> {
    let sql = tx.sql().approvals.pending;
    tx.rows(sql, &values![i64::from(*limit)], |r| {
        Ok(PendingApproval {
            record: record(r)?,
            workflow: r.text("workflow")?,
            definition_version: r.small("definition_version")?,
            subject: Subject(r.text("subject")?),
            note: r.opt_text("note")?,
        })
    })
    .await
}

impl<B: Backend> ApprovalStore for B {
    async fn approvals(&self, id: &WorkflowId) -> StoreResult<Vec<ApprovalRecord>> {
        self.read(id.clone(), |tx, id| Box::pin(of_workflow(tx, id)))
            .await
    }

    async fn pending_approvals(&self, limit: u32) -> StoreResult<Vec<PendingApproval>> {
        self.read(limit, |tx, limit| Box::pin(pending(tx, limit)))
            .await
    }

    async fn expire_approvals(&self, now: Millis) -> StoreResult<(u64, u64)> {
        // A read first: with nothing due, no write transaction.
        let due = self
            .read(now, |tx, now| {
                Box::pin(async move {
                    let sql = tx.sql().approvals.due;
                    Ok(!tx
                        .rows(sql, &values![*now as i64], |r| r.text("step"))
                        .await?
                        .is_empty())
                })
            })
            .await?;
        if !due {
            return Ok((0, 0));
        }
        let (expired, warned) = self
            .write((now, 100), |tx, a| Box::pin(expire_and_warn(tx, a)))
            .await?;
        if expired > 0 {
            self.poke();
        }
        Ok((expired, warned))
    }
}
