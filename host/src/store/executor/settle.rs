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

/// One of a workflow's own rows (never a batch step's item), as its state is derived.
struct Row {
    id: String,
    role: Option<StepRole>,
    state: StepState,
    /// A batch step whose items exist: its state is judged from them.
    batch: bool,
}

/// Applies what the workflow's course asks for now (cancelled steps, compensations to
/// start, originals compensated), then moves each batch step as its items say; returns
/// the role and state of every row of the workflow's own afterwards.
async fn settle_course<T: Tx>(
    tx: &mut T,
    id: &WorkflowId,
    cancelled: bool,
    now: Millis,
) -> StoreResult<Vec<(Option<StepRole>, StepState)>> {
    let mut rows = settle_steps(tx, id, cancelled, now).await?;
    for row in rows.iter_mut().filter(|r| r.batch) {
        if matches!(row.state, StepState::Running | StepState::WaitingForReview)
            && let Some(state) = crate::store::batches::settle(tx, id, &row.id, now)
                .await?
                .moved
        {
            row.state = state;
        }
    }
    Ok(rows.into_iter().map(|r| (r.role, r.state)).collect())
}

/// The course's part of [`settle_course`].
async fn settle_steps<T: Tx>(
    tx: &mut T,
    id: &WorkflowId,
    cancelled: bool,
    now: Millis,
) -> StoreResult<Vec<Row>> {
    let sql = &tx.sql().executor;
    let wf = id.as_str();
    // Most finishes settle nothing: the roles and states decide that, read without the
    // receipts' join (a finish's second most costly statement when it was always read).
    if !cancelled {
        let rows = tx
            .rows(sql.roles, &values![wf], |r| {
                Ok(Row {
                    id: r.text("step")?,
                    role: r.opt_text("role")?.map(|t| parse(&t)).transpose()?,
                    state: parse::<StepState>(&r.text("state")?)?,
                    batch: r.opt_int("items")?.is_some(),
                })
            })
            .await?;
        if !course::may_settle(false, rows.iter().map(|r| &r.state)) {
            return Ok(rows);
        }
    }
    let steps = tx
        .rows(tx.sql().course.course_steps, &values![wf], |r| {
            rows::course_step(r)
        })
        .await?;
    let own = |steps: &[course::CourseStep]| -> Vec<Row> {
        steps
            .iter()
            .filter(|s| crate::workflow::item_of(&s.id).is_none())
            .map(|s| Row {
                id: s.id.clone(),
                role: s.role,
                state: s.state,
                batch: s.batch,
            })
            .collect()
    };
    if !course::may_settle(cancelled, steps.iter().map(|s| &s.state)) {
        return Ok(own(&steps));
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
        return Ok(own(&steps));
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
    Ok(crate::store::course::plan::settled(&steps, &settlement)
        .into_iter()
        .filter(|(id, _, _)| crate::workflow::item_of(id).is_none())
        .map(|(id, role, state)| Row {
            batch: steps.iter().any(|s| s.id == id && s.batch),
            id,
            role,
            state,
        })
        .collect())
}
