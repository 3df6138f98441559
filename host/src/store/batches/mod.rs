//! A batch step's items as rows of their own, written once for every backend: the rows
//! its claim expands into, the release of the next items as earlier ones end (never more
//! than `max_parallel` at once), and the batch step's own row judged from its items
//! ([`crate::course::batch::judge`]) — in review when an item needs a person, succeeded with
//! the list of its items' receipts when every item has one.

use super::plan::values;
use super::rows::Columns;
use super::tx::{Tx, Write};
use super::{ExpandBatch, StoreResult};
use crate::course::batch::{self, BatchVerdict, ItemTally};
use crate::intent::{
    AttemptOutcome, EventKind, EvidenceKind, Millis, NewEvent, Provenance, ReceiptId, StepState,
    WorkflowId,
};

/// The statements of batch steps. Parameters, in order:
/// - `expanded` (the claim's fence): items, max parallel, the item set's digest, note,
///   workflow id, step, lease token;
/// - `insert_item`: workflow id, item row id, state, ready at, key suffix (`[<key>]`),
///   item key, item (JSON), index, batch step;
/// - `end_expansion`: observation, outcome, finished at, attempt id;
/// - `batch_step`, `in_flight`, `pending_left`, `needs_person`, `succeeded`,
///   `item_receipts`: workflow id, batch step (`next_pending` and `needs_person` then a
///   limit);
/// - `release_item`: now, workflow id, item row id;
/// - `set_batch_step`: state, receipt id, note, workflow id, batch step.
pub(crate) struct Sql {
    pub expanded: &'static str,
    pub insert_item: &'static str,
    pub end_expansion: &'static str,
    pub batch_step: &'static str,
    pub in_flight: &'static str,
    pub next_pending: &'static str,
    pub pending_left: &'static str,
    pub needs_person: &'static str,
    pub succeeded: &'static str,
    pub item_receipts: &'static str,
    pub release_item: &'static str,
    pub set_batch_step: &'static str,
}

/// The statements as both databases run them (see [`super::tx`] on placeholders). Every
/// read of items is a range of the index `(workflow_id, batch_of, state, item_index)`, so an
/// item's end costs the same in a batch of ten and of ten thousand.
pub(crate) const SQL: Sql = Sql {
    // The claim's lease is the fence; the row keeps running, without a lease, while its
    // items run (recovery reads only leases that expire).
    expanded: "UPDATE steps SET items = $1, max_parallel = $2,
                   input_digest = COALESCE(input_digest, $3), note = $4,
                   lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL
               WHERE workflow_id = $5 AND step = $6 AND lease_token = $7 AND state = 'running'",
    // An item takes its step's role, compensation triggers and reads; its key derives from
    // its step's identity (which a migration may have kept from an earlier id).
    insert_item: "INSERT INTO steps (workflow_id, step, state, ready_at, role, compensate_on,
                      reads, key_step, batch_of, item_key, item, item_index, subject,
                      adapter)
                  SELECT workflow_id, $2, $3, $4, role, compensate_on, reads,
                         key_step || $5, step, $6, $7, $8, subject, adapter
                  FROM steps WHERE workflow_id = $1 AND step = $9",
    end_expansion: "UPDATE attempts SET observation = $1, outcome = $2, finished_at = $3
                    WHERE attempt_id = $4",
    batch_step: "SELECT state, items, max_parallel, input_digest FROM steps
                 WHERE workflow_id = $1 AND step = $2",
    in_flight: "SELECT COUNT(*) AS n FROM steps
                WHERE workflow_id = $1 AND batch_of = $2
                  AND state IN ('ready', 'running', 'failed_retryable')",
    next_pending: "SELECT step FROM steps
                   WHERE workflow_id = $1 AND batch_of = $2 AND state = 'pending'
                   ORDER BY item_index LIMIT $3",
    pending_left: "SELECT COUNT(*) AS n FROM (SELECT 1 FROM steps
                       WHERE workflow_id = $1 AND batch_of = $2 AND state = 'pending'
                       LIMIT 1) p",
    needs_person: "SELECT item_key, state FROM steps
                   WHERE workflow_id = $1 AND batch_of = $2
                     AND state IN ('failed_terminal', 'outcome_unknown', 'waiting_for_review',
                                   'blocked', 'contradicted')
                   ORDER BY item_index LIMIT $3",
    succeeded: "SELECT COUNT(*) AS n FROM steps
                WHERE workflow_id = $1 AND batch_of = $2 AND state = 'succeeded'",
    item_receipts: "SELECT s.item_key, r.external_reference, r.output, r.component,
                        r.component_version, r.component_digest
                    FROM steps s JOIN receipts r ON r.receipt_id = s.receipt_id
                    WHERE s.workflow_id = $1 AND s.batch_of = $2 ORDER BY s.item_index",
    release_item: "UPDATE steps SET state = 'ready', ready_at = $1
                   WHERE workflow_id = $2 AND step = $3 AND state = 'pending'",
    set_batch_step: "UPDATE steps SET state = $1, receipt_id = COALESCE($2, receipt_id),
                         note = $3, ready_at = NULL
                     WHERE workflow_id = $4 AND step = $5",
};

/// How many items a review note names before it says "and N more".
const NAMED: i64 = 5;

/// Writes the items of a claimed batch step as rows of their own — the first
/// `max_parallel` ready, the rest pending, in the list's order — and leaves the step
/// running without a lease while they run. Returns the items released.
pub(crate) async fn expand<T: Tx>(tx: &mut T, req: &ExpandBatch) -> StoreResult<Vec<String>> {
    let sql = &tx.sql().batches;
    let (fence, now) = (&req.fence, req.now);
    let id = fence.workflow_id.as_str();
    let total = req.items.len();
    let parallel = req.max_parallel.max(1) as usize;
    let note = format!("{total} items, each an effect of its own; at most {parallel} run at once");
    let moved = tx
        .exec(
            sql.expanded,
            &values![
                total as i64,
                parallel as i64,
                req.digest.as_str(),
                note.as_str(),
                id,
                fence.step.as_str(),
                fence.lease_token.as_str(),
            ],
        )
        .await?;
    if moved == 0 {
        return Err(fence.lost());
    }
    let mut released = Vec::with_capacity(parallel.min(total));
    for (index, (key, item)) in req.items.iter().enumerate() {
        let row = crate::workflow::item_identity(&fence.step, key);
        let ready = index < parallel;
        let state = if ready {
            StepState::Ready
        } else {
            StepState::Pending
        };
        let suffix = format!("[{key}]");
        tx.exec(
            sql.insert_item,
            &values![
                id,
                row.as_str(),
                state.as_str(),
                ready.then_some(now as i64),
                suffix.as_str(),
                key.as_str(),
                item.as_str(),
                index as i64,
                fence.step.as_str(),
            ],
        )
        .await?;
        if ready {
            released.push(row);
        }
    }
    let observation = format!("Expanded into {total} items, each an effect of its own");
    tx.exec(
        sql.end_expansion,
        &values![
            observation.as_str(),
            AttemptOutcome::Accepted.as_str(),
            now as i64,
            req.attempt_id.as_str(),
        ],
    )
    .await?;
    let mut events = vec![NewEvent::step(
        EventKind::Action,
        &fence.step,
        Some(&req.attempt_id),
        format!(
            "Batch of {total} items started ({} released; at most {parallel} at once)",
            released.len()
        ),
    )];
    events.extend(NewEvent::released(&released));
    tx.apply(Write::AppendEvents {
        workflow: &fence.workflow_id,
        now,
        events: &events,
    })
    .await?;
    Ok(released)
}

/// What settling a batch step did.
#[derive(Debug, Default)]
pub(crate) struct BatchSettled {
    /// Items made ready, and steps released by the batch step's success.
    pub released: Vec<String>,
    /// The batch step's new state, when it moved.
    pub moved: Option<StepState>,
}

/// After a change of the items of batch step `step`: releases pending items while fewer
/// than its `max_parallel` are in flight, and moves the step as its items now say.
pub(crate) async fn settle<T: Tx>(
    tx: &mut T,
    id: &WorkflowId,
    step: &str,
    now: Millis,
) -> StoreResult<BatchSettled> {
    let sql = &tx.sql().batches;
    let wf = id.as_str();
    let mut out = BatchSettled::default();
    let Some((state, total, parallel, digest)) = tx
        .row(sql.batch_step, &values![wf, step], |r| {
            Ok((
                r.parsed::<StepState>("state")?,
                r.opt_int("items")?,
                r.opt_int("max_parallel")?,
                r.opt_text("input_digest")?,
            ))
        })
        .await?
    else {
        return Ok(out);
    };
    let Some(total) = total else {
        return Ok(out);
    };
    if !matches!(state, StepState::Running | StepState::WaitingForReview) {
        return Ok(out);
    }
    let count = |r: &T::Row<'_>| r.int("n");
    let mut in_flight = tx
        .row(sql.in_flight, &values![wf, step], count)
        .await?
        .unwrap_or(0);
    let room = parallel.unwrap_or(1).max(1) - in_flight;
    if room > 0 {
        let next = tx
            .rows(sql.next_pending, &values![wf, step, room], |r| {
                r.text("step")
            })
            .await?;
        for item in next {
            if tx
                .exec(sql.release_item, &values![now as i64, wf, item.as_str()])
                .await?
                == 1
            {
                in_flight += 1;
                out.released.push(item);
            }
        }
    }
    in_flight += tx
        .row(sql.pending_left, &values![wf, step], count)
        .await?
        .unwrap_or(0);
    let waiting = tx
        .rows(sql.needs_person, &values![wf, step, NAMED + 1], |r| {
            Ok((r.text("item_key")?, r.parsed::<StepState>("state")?))
        })
        .await?;
    // Counted only once nothing is in flight: the whole batch is read once, at its end.
    let succeeded = if in_flight == 0 && waiting.is_empty() {
        tx.row(sql.succeeded, &values![wf, step], count)
            .await?
            .unwrap_or(0)
    } else {
        0
    };
    let verdict = batch::judge(ItemTally {
        in_flight: in_flight as u64,
        needs_person: waiting.len() as u64,
        succeeded: succeeded as u64,
        total: total as u64,
    });
    let mut events: Vec<NewEvent> = NewEvent::released(&out.released).into_iter().collect();
    if verdict.state() != state {
        let (receipt, note, event) = match verdict {
            BatchVerdict::Running => (
                None,
                None,
                format!("{step}: no item waits for a person; its items run on"),
            ),
            BatchVerdict::Review => {
                let named: Vec<String> = waiting
                    .iter()
                    .take(NAMED as usize)
                    .map(|(k, s)| format!("`{k}` {s}"))
                    .collect();
                let more = if waiting.len() > NAMED as usize {
                    ", and more"
                } else {
                    ""
                };
                let note = format!(
                    "items need a person: {}{more}; act on each at …/steps/{step}/items/{{item_key}}",
                    named.join(", ")
                );
                (
                    None,
                    Some(note.clone()),
                    format!("{step} waits for review: {note}"),
                )
            }
            BatchVerdict::Succeeded => {
                let receipt = batch_receipt(tx, id, step, digest.unwrap_or_default(), now).await?;
                (
                    Some(receipt),
                    None,
                    format!("All {total} items of {step} have receipts"),
                )
            }
            BatchVerdict::Cancelled => (
                None,
                Some(format!(
                    "{succeeded} of {total} items delivered before the cancellation"
                )),
                format!("{step} cancelled: {succeeded} of {total} items had delivered"),
            ),
        };
        tx.exec(
            sql.set_batch_step,
            &values![
                verdict.state().as_str(),
                receipt.as_ref().map(ReceiptId::as_str),
                note.as_deref(),
                wf,
                step,
            ],
        )
        .await?;
        events.push(NewEvent::step(EventKind::Conclusion, step, None, event));
        if verdict == BatchVerdict::Succeeded {
            let after = super::executor::release_dependents_of(tx, id, step, now).await?;
            events.extend(NewEvent::released(&after));
            out.released.extend(after);
        }
        out.moved = Some(verdict.state());
    }
    if !events.is_empty() {
        tx.apply(Write::AppendEvents {
            workflow: id,
            now,
            events: &events,
        })
        .await?;
    }
    Ok(out)
}

/// The batch step's receipt: its items' keys, references and outputs, in the list's
/// order — what `$steps.<step>.items` reads. Each item keeps its own receipt.
async fn batch_receipt<T: Tx>(
    tx: &mut T,
    id: &WorkflowId,
    step: &str,
    digest: String,
    now: Millis,
) -> StoreResult<ReceiptId> {
    let sql = &tx.sql().batches;
    let items = tx
        .rows(sql.item_receipts, &values![id.as_str(), step], |r| {
            let output = r.text("output")?;
            Ok((
                serde_json::json!({
                    "item_key": r.text("item_key")?,
                    "external_reference": r.opt_text("external_reference")?,
                    "output": serde_json::from_str::<serde_json::Value>(&output)
                        .unwrap_or(serde_json::Value::String(output)),
                }),
                (
                    r.text("component")?,
                    r.text("component_version")?,
                    r.text("component_digest")?,
                ),
            ))
        })
        .await?;
    let (component, component_version, component_digest) =
        items.first().map(|(_, p)| p.clone()).unwrap_or_default();
    let receipt = super::NewReceipt {
        receipt_id: ReceiptId::new(now),
        evidence_kind: EvidenceKind::Items,
        provenance: Provenance {
            component,
            component_version,
            component_digest,
            input_digest: digest,
        },
        external_reference: None,
        output: serde_json::json!({
            "items": items.into_iter().map(|(v, _)| v).collect::<Vec<_>>()
        }),
        author: None,
        reason: None,
        evidence: None,
    };
    let output = receipt.output.to_string();
    let params = super::executor::plan::receipt_params(&receipt, id, step, None, &output, now);
    super::executor::insert_receipt(tx, &params).await?;
    Ok(receipt.receipt_id)
}
