//! Evidence that arrives after its attempt ended (a provider's answer to a query, a late
//! reply), written once for every backend: kept on its attempt, and judged against the step
//! it belongs to — an unknown outcome it settles, a standing receipt it contradicts.

pub(crate) mod plan;
use super::actions::lock_workflow;
use super::plan::values;
use super::rows::{self, Columns};
use super::tx::{Tx, Write};
use super::{LateEvidence, StoreResult};
use crate::intent::{AttemptOutcome, NewEvent, StepRole, StepState};

/// The statements of late evidence. Parameters, in order:
/// - `keep` (what the attempt had not recorded yet): observation, outcome, result, attempt
///   id;
/// - `step_of`: attempt id; `step`: workflow id, step;
/// - `settle`: receipt id, workflow id, step, the state the verdict saw;
/// - `contradict`: blocked (JSON), note, workflow id, step.
pub(crate) struct Sql {
    pub keep: &'static str,
    pub step_of: &'static str,
    pub step: &'static str,
    pub settle: &'static str,
    pub contradict: &'static str,
}

/// The statements as both databases run them (see [`super::tx`] on placeholders).
pub(crate) const SQL: Sql = Sql {
    keep: "UPDATE attempts SET observation = COALESCE(observation, $1),
               outcome = CASE WHEN outcome = 'in_progress' THEN COALESCE($2, outcome)
                              ELSE outcome END,
               result = COALESCE(result, $3)
           WHERE attempt_id = $4",
    step_of: "SELECT step FROM attempts WHERE attempt_id = $1",
    step: "SELECT s.state, s.role, s.uncertain_since, s.receipt_id, r.external_reference
           FROM steps s LEFT JOIN receipts r ON r.receipt_id = s.receipt_id
           WHERE s.workflow_id = $1 AND s.step = $2",
    settle: "UPDATE steps SET state = 'succeeded', ready_at = NULL, uncertain_since = NULL,
                 receipt_id = $1, note = NULL, blocked = NULL
             WHERE workflow_id = $2 AND step = $3 AND state = $4",
    contradict: "UPDATE steps SET state = 'contradicted', blocked = $1, note = $2
                 WHERE workflow_id = $3 AND step = $4",
};

/// Records late evidence on its attempt and judges it ([`plan::late_verdict`]).
pub(crate) async fn evidence<T: Tx>(tx: &mut T, late: &LateEvidence) -> StoreResult<()> {
    // The workflow row's lock first, as every step change takes it: the late result may
    // move its step.
    let (current, cancelled) = lock_workflow(tx, &late.workflow_id).await?;
    let result = crate::store::executor::plan::result_text(&late.facts)?;
    let keep = tx.sql().late.keep;
    tx.exec(
        keep,
        &values![
            late.facts.observation.as_deref(),
            late.facts.outcome.map(AttemptOutcome::as_str),
            result.as_deref(),
            late.attempt_id.as_str(),
        ],
    )
    .await?;
    tx.apply(Write::AppendEvents {
        workflow: &late.workflow_id,
        now: late.now,
        events: &late.events,
    })
    .await?;
    let Some(events) = judge(tx, late).await? else {
        return Ok(());
    };
    tx.tell_and_settle(&late.workflow_id, late.now, &events, current, cancelled)
        .await?;
    Ok(())
}

/// What the late result does to its step: the timeline's entries when it moved it.
async fn judge<T: Tx>(tx: &mut T, late: &LateEvidence) -> StoreResult<Option<Vec<NewEvent>>> {
    let id = &late.workflow_id;
    let sql = &tx.sql().late;
    let (step_of, step_sql, settle, contradict) =
        (sql.step_of, sql.step, sql.settle, sql.contradict);
    let Some(step) = tx
        .row(step_of, &values![late.attempt_id.as_str()], |r| {
            r.text("step")
        })
        .await?
    else {
        return Ok(None);
    };
    let Some((state, found)) = tx
        .row(step_sql, &values![id.as_str(), step.as_str()], |r| {
            let state = r.parsed::<StepState>("state")?;
            let found = plan::LateStep {
                state,
                role: r
                    .opt_text("role")?
                    .map(|t| rows::parse::<StepRole>(&t))
                    .transpose()?,
                uncertain: r.opt_int("uncertain_since")?.is_some(),
                receipt: r
                    .opt_text("receipt_id")?
                    .map(|_| r.opt_text("external_reference"))
                    .transpose()?,
            };
            Ok((state, found))
        })
        .await?
    else {
        return Ok(None);
    };
    let now = late.now;
    Ok(Some(match plan::late_verdict(&late.facts, &found) {
        plan::LateVerdict::Kept => return Ok(None),
        plan::LateVerdict::Settles(receipt) => {
            let output = receipt.output.to_string();
            let values = crate::store::executor::plan::receipt_params(
                &receipt,
                id,
                &step,
                Some(&late.attempt_id),
                &output,
                now,
            );
            super::executor::insert_receipt(tx, &values).await?;
            tx.exec(
                settle,
                &values![
                    receipt.receipt_id.as_str(),
                    id.as_str(),
                    step.as_str(),
                    state.as_str(),
                ],
            )
            .await?;
            let released = super::executor::release_dependents(tx, id, now).await?;
            let mut events = vec![NewEvent::settled_late(
                &step,
                &late.attempt_id,
                receipt.external_reference.as_deref().unwrap_or_default(),
            )];
            events.extend(NewEvent::released(&released));
            events
        }
        plan::LateVerdict::Contradicts {
            standing,
            late: named,
        } => {
            let blocked = plan::contradiction(&standing, &named);
            let text = crate::store::executor::plan::blocked_text(Some(&blocked))?;
            tx.exec(
                contradict,
                &values![
                    text.as_deref(),
                    &blocked.message,
                    id.as_str(),
                    step.as_str()
                ],
            )
            .await?;
            vec![NewEvent::contradicted(
                &step,
                &late.attempt_id,
                &standing,
                &named,
            )]
        }
    }))
}
