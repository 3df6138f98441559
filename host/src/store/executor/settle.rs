//! How every change of a workflow's steps ends, written once for every backend: its course
//! settled ([`crate::course::settle`]) and its state derived from its steps, with the
//! timeline's entry, the notification and the tallies of a change.

use crate::course;
use crate::intent::{Millis, StepRole, StepState, WorkflowId, WorkflowState};
use crate::store::metrics::Tallies;
use crate::store::plan::values;
use crate::store::rows::{self, Columns, parse};
use crate::store::tx::{Tx, Write};
use crate::store::{StoreError, StoreResult};

/// Settles the workflow's course and recomputes its state from its steps; on a change,
/// stamps the end, starts the key's retention, tells the timeline, queues a notification
/// and adds an end to the tallies. On PostgreSQL the caller holds the workflow row's lock,
/// so the steps read here include every committed change.
pub(crate) async fn recompute_state<T: Tx>(
    tx: &mut T,
    id: &WorkflowId,
    current: WorkflowState,
    cancelled: bool,
    now: Millis,
) -> StoreResult<WorkflowState> {
    let mut ends = Tallies::default();
    let state = recompute_state_tallying(tx, id, current, cancelled, now, &mut ends).await?;
    if !ends.is_empty() {
        tx.apply(Write::AddTallies {
            tallies: &ends,
            shard: crate::store::metrics::shard_of(id),
        })
        .await?;
    }
    Ok(state)
}

/// [`recompute_state`], adding an end to `ends` rather than to the tallies, so that a
/// caller ending many workflows writes their tallies at once.
pub(crate) async fn recompute_state_tallying<T: Tx>(
    tx: &mut T,
    id: &WorkflowId,
    current: WorkflowState,
    cancelled: bool,
    now: Millis,
    ends: &mut Tallies,
) -> StoreResult<WorkflowState> {
    let steps = settle_course(tx, id, cancelled, now).await?;
    let Some(change) = super::plan::state_change(current, cancelled, steps, now) else {
        return Ok(current);
    };
    let sql = &tx.sql().executor;
    // The state moves and the change's timeline entry is numbered; the record the
    // notification and the tallies are made of is then read back.
    tx.exec(
        sql.set_state,
        &values![change.next.as_str(), change.ended_at, id.as_str()],
    )
    .await?;
    let (record, seq) = tx
        .row(sql.changed.as_str(), &values![id.as_str()], |r| {
            Ok((rows::workflow(r)?, r.int("event_seq")?))
        })
        .await?
        .ok_or_else(|| StoreError::Corrupt(format!("workflow {id} vanished")))?;
    if change.restart_key_retention {
        tx.exec(sql.key_retention, &values![change.ended_at, id.as_str()])
            .await?;
    }
    tx.apply(Write::InsertEvents {
        workflow: id,
        first: seq as u64,
        now,
        events: std::slice::from_ref(&change.event),
    })
    .await?;
    if let Some(event) = change.notify {
        crate::store::notifications::outbox_for(tx, &record, event, now).await?;
    }
    if change.next.is_ended() {
        ends.end(&record, change.next, now);
    }
    Ok(change.next)
}

/// Applies what the workflow's course asks for now (cancelled steps, compensations to
/// start, originals compensated); returns every row's role and state afterwards.
async fn settle_course<T: Tx>(
    tx: &mut T,
    id: &WorkflowId,
    cancelled: bool,
    now: Millis,
) -> StoreResult<Vec<(Option<StepRole>, StepState)>> {
    let sql = &tx.sql().executor;
    let wf = id.as_str();
    // Most finishes settle nothing: the roles and states decide that, read without the
    // receipts' join (a finish's second most costly statement when it was always read).
    if !cancelled {
        let states = tx
            .rows(sql.roles, &values![wf], |r| {
                Ok((
                    r.opt_text("role")?.map(|t| parse(&t)).transpose()?,
                    parse::<StepState>(&r.text("state")?)?,
                ))
            })
            .await?;
        if !course::may_settle(false, states.iter().map(|(_, s)| s)) {
            return Ok(states);
        }
    }
    let steps = tx
        .rows(tx.sql().course.course_steps, &values![wf], |r| {
            rows::course_step(r)
        })
        .await?;
    if !course::may_settle(cancelled, steps.iter().map(|s| &s.state)) {
        return Ok(steps.iter().map(|s| (s.role, s.state)).collect());
    }
    let deps = if steps.iter().any(|s| !s.compensate_on.is_empty()) {
        tx.rows(sql.deps, &values![wf], |r| {
            Ok((r.text("step")?, r.text("depends_on")?))
        })
        .await?
    } else {
        Vec::new()
    };
    let settlement = course::settle(cancelled, &steps, &deps);
    if settlement.is_empty() {
        return Ok(steps.iter().map(|s| (s.role, s.state)).collect());
    }
    let moved = (settlement.cancel.iter().map(|s| (s, StepState::Cancelled)))
        .chain((settlement.compensated.iter()).map(|s| (s, StepState::Compensated)))
        .chain((settlement.start.iter()).map(|c| (&c.of, StepState::Compensating)));
    for (step, state) in moved {
        tx.exec(
            sql.set_step_state,
            &values![state.as_str(), wf, step.as_str()],
        )
        .await?;
    }
    for c in &settlement.start {
        let ready = c.after.is_empty();
        let state = if ready {
            StepState::Ready
        } else {
            StepState::Pending
        };
        tx.exec(
            sql.insert_compensation,
            &values![
                wf,
                c.id.as_str(),
                state.as_str(),
                ready.then_some(now as i64),
                crate::course::compensated_step(&c.id).unwrap_or(&c.id),
            ],
        )
        .await?;
        for after in &c.after {
            tx.exec(sql.insert_dep, &values![wf, c.id.as_str(), after.as_str()])
                .await?;
        }
    }
    tx.apply(Write::AppendEvents {
        workflow: id,
        now,
        events: &settlement.events,
    })
    .await?;
    Ok(crate::store::course::plan::settled(&steps, &settlement))
}
