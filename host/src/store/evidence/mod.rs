//! Evidence from providers, written once for every backend: a verified delivery kept once
//! per adapter and `webhook-id`, claimed by one host at a time to be read by its adapter,
//! and each observation read from it kept once per event id, matched to its step (by the
//! external reference a receipt holds, else by the request identity an attempt sent) and
//! applied under the evidence order ([`plan::judge`]) in the same transaction that ends
//! the delivery — so a delivery's reading is applied exactly once, whichever host read it
//! and however often one died on the way.

pub(crate) mod plan;

use super::actions::lock_workflow;
use super::plan::values;
use super::rows::{self, Columns};
use super::tx::{Backend, Tx, Write};
use super::{
    ClaimedDelivery, DeliveryReading, EvidenceFilter, EvidenceStore, NewDelivery, NewReceipt,
    ObservationRecord, ReadDelivery, StoreError, StoreResult,
};
use crate::contract::{EffectStatus, Inbound, Observation};
use crate::intent::{
    AttemptId, EventKind, EvidenceKind, Millis, NewEvent, ObservationId, ObservationVerdict,
    Provenance, ReceiptId, StepState, WorkflowId,
};
use plan::{Judged, Matched, Target};

/// The statements of evidence. Parameters, in order:
/// - `receive`: adapter, webhook id, received at, method, path, headers (JSON), body;
/// - `due` (a delivery to read): now; `held_due` (a held observation whose step's attempt
///   ended): none;
/// - `claim`: owner, lease until, now, limit;
/// - `finish` (only under this host's claim, once): state, read at, component version,
///   error, delivery id, owner;
/// - `seen_event`: adapter, event id;
/// - `by_reference`: reference, adapter; `by_identity`: key, adapter;
/// - `target`: workflow id, step; `sender` (the step's latest attempt that sent): workflow
///   id, step;
/// - `insert`: the sixteen columns of an observation but its delivery's webhook id;
/// - `held`: limit; `rejudge`: verdict, step, receipt id, note, observation id;
/// - `review`: note, workflow id, step, the state the verdict saw;
/// - `list`: matched (0 any, 1 matched, 2 the inbox), adapter, workflow id, after, limit.
pub(crate) struct Sql {
    pub receive: &'static str,
    pub due: &'static str,
    pub held_due: &'static str,
    pub claim: &'static str,
    pub finish: &'static str,
    pub seen_event: &'static str,
    pub by_reference: &'static str,
    pub by_identity: &'static str,
    pub target: &'static str,
    pub sender: &'static str,
    pub insert: &'static str,
    pub held: &'static str,
    pub rejudge: &'static str,
    pub review: &'static str,
    pub list: &'static str,
}

/// An observation's columns, as `o`, with its delivery's webhook id.
macro_rules! observation_columns {
    () => {
        "o.observation_id, o.delivery_id, o.adapter, d.webhook_id, o.event_id,
         o.external_reference, o.idempotency_key, o.effect_status, o.provider_status,
         o.observed_at, o.output, o.recorded_at, o.workflow_id, o.step, o.verdict,
         o.receipt_id, o.note"
    };
}

/// The statements as both databases run them (see [`super::tx`] on placeholders).
pub(crate) const SQL: Sql = Sql {
    receive: "INSERT INTO evidence_deliveries
                  (adapter, webhook_id, received_at, method, path, headers, body, state)
              VALUES ($1, $2, $3, $4, $5, $6, $7, 'pending')
              ON CONFLICT (adapter, webhook_id) DO NOTHING",
    due: "SELECT delivery_id FROM evidence_deliveries
          WHERE state = 'pending' AND (lease_expires_at IS NULL OR lease_expires_at <= $1)
          LIMIT 1",
    held_due: "SELECT o.observation_id FROM observations o
               JOIN steps s ON s.workflow_id = o.workflow_id AND s.step = o.step
               WHERE o.verdict = 'held' AND s.lease_token IS NULL LIMIT 1",
    // The lease is checked again outside the choice, so that of two hosts choosing the
    // same delivery at once, the second's update finds it taken.
    claim: "UPDATE evidence_deliveries SET lease_owner = $1, lease_expires_at = $2
            WHERE state = 'pending' AND (lease_expires_at IS NULL OR lease_expires_at <= $3)
              AND delivery_id IN (
                  SELECT delivery_id FROM evidence_deliveries
                  WHERE state = 'pending'
                    AND (lease_expires_at IS NULL OR lease_expires_at <= $3)
                  ORDER BY delivery_id LIMIT $4)
            RETURNING delivery_id, adapter, webhook_id, received_at, method, path, headers,
                      body",
    finish: "UPDATE evidence_deliveries SET state = $1, read_at = $2, component_version = $3,
                 error = $4, lease_owner = NULL, lease_expires_at = NULL
             WHERE delivery_id = $5 AND lease_owner = $6 AND state = 'pending'",
    seen_event: "SELECT observation_id FROM observations WHERE adapter = $1 AND event_id = $2",
    by_reference: "SELECT workflow_id, step FROM receipts
                   WHERE external_reference = $1 AND component = $2
                   ORDER BY recorded_at LIMIT 1",
    by_identity: "SELECT workflow_id, step FROM attempts
                  WHERE request_identity = $1 AND component = $2
                  ORDER BY started_at LIMIT 1",
    target: "SELECT s.step, s.state, s.lease_token, s.uncertain_since, s.receipt_id,
                    r.external_reference, r.recorded_at
             FROM steps s LEFT JOIN receipts r ON r.receipt_id = s.receipt_id
             WHERE s.workflow_id = $1 AND s.step = $2",
    sender: "SELECT attempt_id, component, component_version, component_digest, input_digest
             FROM attempts
             WHERE workflow_id = $1 AND step = $2 AND request_identity IS NOT NULL
               AND component_digest IS NOT NULL
             ORDER BY number DESC LIMIT 1",
    insert: "INSERT INTO observations
                 (observation_id, delivery_id, adapter, event_id, external_reference,
                  idempotency_key, effect_status, provider_status, observed_at, output,
                  recorded_at, workflow_id, step, verdict, receipt_id, note)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)",
    held: concat!(
        "SELECT ",
        observation_columns!(),
        " FROM observations o
         JOIN evidence_deliveries d ON d.delivery_id = o.delivery_id
         JOIN steps s ON s.workflow_id = o.workflow_id AND s.step = o.step
         WHERE o.verdict = 'held' AND s.lease_token IS NULL
         ORDER BY o.observation_id LIMIT $1"
    ),
    rejudge: "UPDATE observations SET verdict = $1, step = $2, receipt_id = $3, note = $4
              WHERE observation_id = $5 AND verdict = 'held'",
    review: "UPDATE steps SET state = 'waiting_for_review', ready_at = NULL, note = $1
             WHERE workflow_id = $2 AND step = $3 AND state = $4 AND lease_token IS NULL",
    list: concat!(
        "SELECT ",
        observation_columns!(),
        " FROM observations o
         JOIN evidence_deliveries d ON d.delivery_id = o.delivery_id
         WHERE ($1 = 0
                OR ($1 = 1 AND o.verdict NOT IN ('unmatched', 'unreadable'))
                OR ($1 = 2 AND o.verdict IN ('unmatched', 'unreadable')))
           AND ($2 IS NULL OR o.adapter = $2)
           AND ($3 IS NULL OR o.workflow_id = $3)
           AND ($4 IS NULL OR o.observation_id > $4)
         ORDER BY o.observation_id LIMIT $5"
    ),
};

/// How long a claim on a delivery holds: its `observe` call's limit and more, so a
/// reading is never taken over while it runs; a host that died holding one loses it then.
pub const DELIVERY_LEASE_MS: Millis = 60_000;

/// An observation's row.
fn record(r: &impl Columns) -> StoreResult<ObservationRecord> {
    Ok(ObservationRecord {
        observation_id: ObservationId(r.text("observation_id")?),
        delivery_id: r.int("delivery_id")?,
        adapter: r.text("adapter")?,
        webhook_id: r.text("webhook_id")?,
        event_id: r.opt_text("event_id")?,
        external_reference: r.opt_text("external_reference")?,
        idempotency_key: r.opt_text("idempotency_key")?,
        effect_status: r
            .opt_text("effect_status")?
            .map(|t| rows::parse::<EffectStatus>(&t))
            .transpose()?,
        provider_status: r.text("provider_status")?,
        observed_at: r.opt_uint("observed_at")?,
        output: r.opt_text("output")?,
        recorded_at: r.uint("recorded_at")?,
        workflow_id: r.opt_text("workflow_id")?.map(WorkflowId),
        step: r.opt_text("step")?,
        verdict: r.parsed("verdict")?,
        receipt_id: r.opt_text("receipt_id")?.map(ReceiptId),
        note: r.opt_text("note")?,
    })
}

fn claimed(r: &impl Columns) -> StoreResult<ClaimedDelivery> {
    let headers: Vec<(String, String)> = serde_json::from_value(r.json("headers")?)
        .map_err(|e| StoreError::Corrupt(format!("a delivery's headers: {e}")))?;
    Ok(ClaimedDelivery {
        delivery_id: r.int("delivery_id")?,
        adapter: r.text("adapter")?,
        webhook_id: r.text("webhook_id")?,
        received_at: r.uint("received_at")?,
        inbound: Inbound {
            method: r.text("method")?,
            path: r.text("path")?,
            headers,
            body: r.bytes("body")?,
        },
    })
}

async fn receive<T: Tx>(tx: &mut T, d: &NewDelivery) -> StoreResult<bool> {
    let sql = tx.sql().evidence.receive;
    let headers = super::plan::json_text(&d.inbound.headers)?;
    let added = tx
        .exec(
            sql,
            &values![
                d.adapter.as_str(),
                d.webhook_id.as_str(),
                d.received_at as i64,
                d.inbound.method.as_str(),
                d.inbound.path.as_str(),
                headers.as_str(),
                &d.inbound.body,
            ],
        )
        .await?;
    Ok(added > 0)
}

async fn claim<T: Tx>(
    tx: &mut T,
    (owner, now, limit): &(String, Millis, u32),
) -> StoreResult<Vec<ClaimedDelivery>> {
    let sql = tx.sql().evidence.claim;
    tx.rows(
        sql,
        &values![
            owner.as_str(),
            (now + DELIVERY_LEASE_MS) as i64,
            *now as i64,
            i64::from(*limit)
        ],
        |r| claimed(r),
    )
    .await
}

/// A matched step's row as an observation's target.
async fn target<T: Tx>(tx: &mut T, id: &WorkflowId, step: &str) -> StoreResult<Option<Target>> {
    let sql = tx.sql().evidence.target;
    tx.row(sql, &values![id.as_str(), step], |r| {
        let reference = r.opt_text("external_reference")?;
        Ok(Target {
            step: r.text("step")?,
            state: r.parsed::<StepState>("state")?,
            leased: r.opt_text("lease_token")?.is_some(),
            uncertain: r.opt_int("uncertain_since")?.is_some(),
            receipt: match r.opt_text("receipt_id")? {
                Some(_) => Some((reference, r.opt_uint("recorded_at")?.unwrap_or_default())),
                None => None,
            },
        })
    })
    .await
}

/// The workflow and effect step an observation names: by the external reference a
/// receipt of this adapter holds, else by the request identity an attempt of it sent. A
/// compensation's own row names the step it compensates.
async fn match_step<T: Tx>(
    tx: &mut T,
    adapter: &str,
    o: &ObservationFacts,
) -> StoreResult<Option<(WorkflowId, String)>> {
    let sql = &tx.sql().evidence;
    let (by_reference, by_identity) = (sql.by_reference, sql.by_identity);
    let found = |r: &T::Row<'_>| Ok((WorkflowId(r.text("workflow_id")?), r.text("step")?));
    let mut matched = None;
    if let Some(reference) = &o.external_reference {
        matched = tx
            .row(by_reference, &values![reference.as_str(), adapter], found)
            .await?;
    }
    if matched.is_none()
        && let Some(key) = &o.idempotency_key
    {
        matched = tx
            .row(by_identity, &values![key.as_str(), adapter], found)
            .await?;
    }
    Ok(matched.map(|(id, step)| {
        let forward = crate::course::compensated_step(&step)
            .map(str::to_string)
            .unwrap_or(step);
        (id, forward)
    }))
}

/// What the store keeps of one observation, whether read now or held and judged again.
#[derive(Debug, Clone)]
struct ObservationFacts {
    id: ObservationId,
    event_id: Option<String>,
    external_reference: Option<String>,
    idempotency_key: Option<String>,
    status: EffectStatus,
    provider_status: String,
    observed_at: Option<Millis>,
    output: Option<String>,
    webhook_id: String,
}

impl ObservationFacts {
    fn new(o: &Observation, webhook_id: &str, now: Millis) -> Self {
        Self {
            id: ObservationId::new(now),
            event_id: o.event_id.clone(),
            external_reference: o.external_reference.clone(),
            idempotency_key: o.idempotency_key.clone(),
            status: o.status,
            provider_status: o.provider_status.clone(),
            observed_at: o.observed_at_ms,
            output: o.output.clone(),
            webhook_id: webhook_id.to_string(),
        }
    }

    fn of_record(r: &ObservationRecord) -> Option<Self> {
        Some(Self {
            id: r.observation_id.clone(),
            event_id: r.event_id.clone(),
            external_reference: r.external_reference.clone(),
            idempotency_key: r.idempotency_key.clone(),
            status: r.effect_status?,
            provider_status: r.provider_status.clone(),
            observed_at: r.observed_at,
            output: r.output.clone(),
            webhook_id: r.webhook_id.clone(),
        })
    }
}

/// What applying one observation came to.
struct Applied {
    judged: Option<Judged>,
    workflow_id: Option<WorkflowId>,
    receipt_id: Option<ReceiptId>,
    /// A step moved: other hosts may have work.
    moved: bool,
}

/// Matches one observation, judges it and applies the verdict to its step: the receipt
/// and the step's move, the timeline's entries and the workflow's course. A held
/// observation changes nothing yet.
async fn apply_one<T: Tx>(
    tx: &mut T,
    adapter: &str,
    o: &ObservationFacts,
    now: Millis,
) -> StoreResult<Applied> {
    let unmatched = Applied {
        judged: None,
        workflow_id: None,
        receipt_id: None,
        moved: false,
    };
    let Some((id, forward)) = match_step(tx, adapter, o).await? else {
        return Ok(unmatched);
    };
    // The workflow row's lock first, as every step change takes it.
    let (current, cancelled) = lock_workflow(tx, &id).await?;
    let Some(forward) = target(tx, &id, &forward).await? else {
        return Ok(unmatched);
    };
    let compensation = target(tx, &id, &format!("{}.compensate", forward.step)).await?;
    let matched = Matched {
        forward,
        compensation,
    };
    let judged = plan::judge(
        o.status,
        o.external_reference.as_deref(),
        &o.provider_status,
        o.observed_at,
        &matched,
    );
    let mut applied = Applied {
        judged: Some(judged.clone()),
        workflow_id: Some(id.clone()),
        receipt_id: None,
        moved: false,
    };
    if judged.verdict == ObservationVerdict::Held {
        return Ok(applied);
    }
    let seen = if judged.step == matched.forward.step {
        &matched.forward
    } else {
        matched.compensation.as_ref().unwrap_or(&matched.forward)
    };
    let mut events = vec![observed_event(o, &judged)];
    match judged.verdict {
        ObservationVerdict::Settled | ObservationVerdict::Reversed => {
            let Some((attempt, provenance)) = sender(tx, &id, &judged.step).await? else {
                // Nothing was sent under this step: there is no request to settle.
                tx.apply(Write::AppendEvents {
                    workflow: &id,
                    now,
                    events: &events,
                })
                .await?;
                applied.judged = Some(Judged {
                    verdict: ObservationVerdict::Kept,
                    ..judged
                });
                return Ok(applied);
            };
            let receipt = NewReceipt {
                receipt_id: ReceiptId::new(now),
                evidence_kind: EvidenceKind::Observation,
                provenance,
                external_reference: o.external_reference.clone(),
                output: o
                    .output
                    .as_deref()
                    .and_then(|t| serde_json::from_str(t).ok())
                    .unwrap_or_else(|| serde_json::json!({})),
                author: None,
                reason: None,
                evidence: Some(super::plan::json_text(&serde_json::json!({
                    "observation_id": o.id,
                    "event_id": o.event_id,
                    "webhook_id": o.webhook_id,
                    "provider_status": o.provider_status,
                }))?),
            };
            let output = receipt.output.to_string();
            let params = crate::store::executor::plan::receipt_params(
                &receipt,
                &id,
                &judged.step,
                Some(&attempt),
                &output,
                now,
            );
            super::executor::insert_receipt(tx, &params).await?;
            let settle = tx.sql().late.settle;
            let moved = tx
                .exec(
                    settle,
                    &values![
                        receipt.receipt_id.as_str(),
                        id.as_str(),
                        judged.step.as_str(),
                        seen.state.as_str(),
                    ],
                )
                .await?;
            if moved == 0 {
                return Err(StoreError::Corrupt(format!(
                    "step {} of {id} moved under the workflow's lock",
                    judged.step
                )));
            }
            let reference = o.external_reference.as_deref().unwrap_or("the effect");
            let text = if judged.verdict == ObservationVerdict::Settled {
                format!(
                    "Settled by the provider's event: it reports {reference} in effect; the receipt records that evidence"
                )
            } else {
                format!(
                    "Compensation settled by the provider's event: it reports {reference} reversed; the receipt records that evidence"
                )
            };
            events.push(NewEvent::step(
                EventKind::Conclusion,
                &judged.step,
                Some(&attempt),
                text,
            ));
            let released = super::executor::release_dependents(tx, &id, now).await?;
            events.extend(NewEvent::released(&released));
            applied.receipt_id = Some(receipt.receipt_id);
        }
        ObservationVerdict::Contradicted => {
            let (standing, named) = judged.references.clone().unwrap_or_default();
            let mut blocked = crate::store::late::plan::contradiction(&standing, &named);
            blocked.message = judged.note.clone();
            let text = crate::store::executor::plan::blocked_text(Some(&blocked))?;
            let contradict = tx.sql().late.contradict;
            tx.exec(
                contradict,
                &values![
                    text.as_deref(),
                    &blocked.message,
                    id.as_str(),
                    judged.step.as_str()
                ],
            )
            .await?;
            events.push(
                NewEvent::step(
                    EventKind::Conclusion,
                    &judged.step,
                    None,
                    format!("Contradicted: {}", judged.note),
                )
                .with_data(serde_json::json!({"references": [standing, named]})),
            );
        }
        ObservationVerdict::Review => {
            let review = tx.sql().evidence.review;
            let note = format!("The provider's event: {}", judged.note);
            let moved = tx
                .exec(
                    review,
                    &values![
                        note.as_str(),
                        id.as_str(),
                        judged.step.as_str(),
                        seen.state.as_str()
                    ],
                )
                .await?;
            if moved > 0 {
                events.push(NewEvent::step(
                    EventKind::Conclusion,
                    &judged.step,
                    None,
                    format!("Needs review: {}", judged.note),
                ));
            }
        }
        _ => {
            tx.apply(Write::AppendEvents {
                workflow: &id,
                now,
                events: &events,
            })
            .await?;
            return Ok(applied);
        }
    }
    tx.tell_and_settle(&id, now, &events, current, cancelled)
        .await?;
    applied.moved = true;
    Ok(applied)
}

/// The timeline's entry of an observation that met its step.
fn observed_event(o: &ObservationFacts, judged: &Judged) -> NewEvent {
    let event = o
        .event_id
        .as_deref()
        .map(|e| format!(" {e}"))
        .unwrap_or_default();
    NewEvent::step(
        EventKind::Observation,
        &judged.step,
        None,
        format!("Provider event{event}: {}", judged.note),
    )
    .with_data(serde_json::json!({
        "observation": {
            "observation_id": o.id,
            "event_id": o.event_id,
            "webhook_id": o.webhook_id,
            "effect_status": o.status.as_str(),
            "provider_status": o.provider_status,
            "external_reference": o.external_reference,
            "verdict": judged.verdict.as_str(),
        }
    }))
}

/// The step's latest attempt that sent its request, with what it ran: the attempt an
/// observation's receipt belongs to.
async fn sender<T: Tx>(
    tx: &mut T,
    id: &WorkflowId,
    step: &str,
) -> StoreResult<Option<(AttemptId, Provenance)>> {
    let sql = tx.sql().evidence.sender;
    tx.row(sql, &values![id.as_str(), step], |r| {
        Ok((
            AttemptId(r.text("attempt_id")?),
            Provenance {
                component: r.text("component")?,
                component_version: r.text("component_version")?,
                component_digest: r.text("component_digest")?,
                input_digest: r.text("input_digest")?,
            },
        ))
    })
    .await
}

/// Ends a claimed delivery with its reading: its observations kept (each event once),
/// matched and applied. Nothing is applied when the claim is no longer this host's.
async fn read<T: Tx>(tx: &mut T, r: &ReadDelivery) -> StoreResult<(Vec<ObservationRecord>, bool)> {
    let (state, version, error) = match &r.reading {
        DeliveryReading::Read {
            component_version, ..
        } => ("read", Some(component_version.as_str()), None),
        DeliveryReading::Unreadable {
            component_version,
            error,
        } => (
            "unreadable",
            component_version.as_deref(),
            Some(error.as_str()),
        ),
    };
    let finish = tx.sql().evidence.finish;
    let ended = tx
        .exec(
            finish,
            &values![
                state,
                r.now as i64,
                version,
                error,
                r.delivery.delivery_id,
                r.owner.as_str()
            ],
        )
        .await?;
    if ended == 0 {
        return Ok((Vec::new(), false));
    }
    let d = &r.delivery;
    let mut kept = Vec::new();
    let mut moved = false;
    match &r.reading {
        DeliveryReading::Unreadable { error, .. } => {
            let row = ObservationRecord {
                observation_id: ObservationId::new(r.now),
                delivery_id: d.delivery_id,
                adapter: d.adapter.clone(),
                webhook_id: d.webhook_id.clone(),
                event_id: None,
                external_reference: None,
                idempotency_key: None,
                effect_status: None,
                provider_status: String::new(),
                observed_at: None,
                output: None,
                recorded_at: r.now,
                workflow_id: None,
                step: None,
                verdict: ObservationVerdict::Unreadable,
                receipt_id: None,
                note: Some(error.clone()),
            };
            insert(tx, &row).await?;
            kept.push(row);
        }
        DeliveryReading::Read { observations, .. } => {
            for o in observations {
                let seen_event = tx.sql().evidence.seen_event;
                if let Some(event) = &o.event_id
                    && tx
                        .row(
                            seen_event,
                            &values![d.adapter.as_str(), event.as_str()],
                            |r| r.text("observation_id"),
                        )
                        .await?
                        .is_some()
                {
                    continue;
                }
                let facts = ObservationFacts::new(o, &d.webhook_id, r.now);
                let applied = apply_one(tx, &d.adapter, &facts, r.now).await?;
                moved |= applied.moved;
                let row = ObservationRecord {
                    observation_id: facts.id.clone(),
                    delivery_id: d.delivery_id,
                    adapter: d.adapter.clone(),
                    webhook_id: d.webhook_id.clone(),
                    event_id: o.event_id.clone(),
                    external_reference: o.external_reference.clone(),
                    idempotency_key: o.idempotency_key.clone(),
                    effect_status: Some(o.status),
                    provider_status: o.provider_status.clone(),
                    observed_at: o.observed_at_ms,
                    output: o.output.clone(),
                    recorded_at: r.now,
                    workflow_id: applied.workflow_id,
                    step: applied.judged.as_ref().map(|j| j.step.clone()),
                    verdict: applied
                        .judged
                        .as_ref()
                        .map_or(ObservationVerdict::Unmatched, |j| j.verdict),
                    receipt_id: applied.receipt_id,
                    note: Some(applied.judged.map_or_else(
                        || {
                            "no step of this database sent the effect it names (by external reference or request identity)".to_string()
                        },
                        |j| j.note,
                    )),
                };
                insert(tx, &row).await?;
                kept.push(row);
            }
        }
    }
    Ok((kept, moved))
}

async fn insert<T: Tx>(tx: &mut T, o: &ObservationRecord) -> StoreResult<()> {
    let sql = tx.sql().evidence.insert;
    tx.exec(
        sql,
        &values![
            o.observation_id.as_str(),
            o.delivery_id,
            o.adapter.as_str(),
            o.event_id.as_deref(),
            o.external_reference.as_deref(),
            o.idempotency_key.as_deref(),
            o.effect_status.map(EffectStatus::as_str),
            o.provider_status.as_str(),
            o.observed_at.map(|t| t as i64),
            o.output.as_deref(),
            o.recorded_at as i64,
            o.workflow_id.as_ref().map(WorkflowId::as_str),
            o.step.as_deref(),
            o.verdict.as_str(),
            o.receipt_id.as_ref().map(ReceiptId::as_str),
            o.note.as_deref(),
        ],
    )
    .await?;
    Ok(())
}

/// Judges again the held observations whose step's attempt has ended.
async fn rejudge<T: Tx>(tx: &mut T, (now, limit): &(Millis, u32)) -> StoreResult<(u64, bool)> {
    let sql = tx.sql().evidence.held;
    let held = tx
        .rows(sql, &values![i64::from(*limit)], |r| record(r))
        .await?;
    let (mut judged, mut moved) = (0, false);
    for row in held {
        let Some(facts) = ObservationFacts::of_record(&row) else {
            continue;
        };
        let applied = apply_one(tx, &row.adapter, &facts, *now).await?;
        let Some(j) = applied.judged else {
            continue;
        };
        if j.verdict == ObservationVerdict::Held {
            continue;
        }
        moved |= applied.moved;
        let update = tx.sql().evidence.rejudge;
        tx.exec(
            update,
            &values![
                j.verdict.as_str(),
                j.step.as_str(),
                applied.receipt_id.as_ref().map(ReceiptId::as_str),
                j.note.as_str(),
                row.observation_id.as_str()
            ],
        )
        .await?;
        judged += 1;
    }
    Ok((judged, moved))
}

async fn list<T: Tx>(tx: &mut T, f: &EvidenceFilter) -> StoreResult<Vec<ObservationRecord>> {
    let sql = tx.sql().evidence.list;
    let matched: i64 = match f.matched {
        None => 0,
        Some(true) => 1,
        Some(false) => 2,
    };
    tx.rows(
        sql,
        &values![
            matched,
            f.adapter.as_deref(),
            f.workflow_id.as_ref().map(WorkflowId::as_str),
            f.after.as_deref(),
            i64::from(f.limit)
        ],
        |r| record(r),
    )
    .await
}

impl<B: Backend> EvidenceStore for B {
    async fn receive_delivery(&self, delivery: NewDelivery) -> StoreResult<bool> {
        self.write(delivery, |tx, d| Box::pin(receive(tx, d))).await
    }

    async fn evidence_due(&self, now: Millis) -> StoreResult<bool> {
        self.read(now, |tx, now| {
            Box::pin(async move {
                let sql = &tx.sql().evidence;
                let (due, held_due) = (sql.due, sql.held_due);
                if tx
                    .row(due, &values![*now as i64], |r| r.int("delivery_id"))
                    .await?
                    .is_some()
                {
                    return Ok(true);
                }
                Ok(tx
                    .row(held_due, &[], |r| r.text("observation_id"))
                    .await?
                    .is_some())
            })
        })
        .await
    }

    async fn claim_deliveries(
        &self,
        owner: &str,
        now: Millis,
        limit: u32,
    ) -> StoreResult<Vec<ClaimedDelivery>> {
        self.write((owner.to_string(), now, limit), |tx, a| {
            Box::pin(claim(tx, a))
        })
        .await
    }

    async fn read_delivery(&self, reading: ReadDelivery) -> StoreResult<Vec<ObservationRecord>> {
        let (kept, moved) = self.write(reading, |tx, r| Box::pin(read(tx, r))).await?;
        if moved {
            self.poke();
        }
        Ok(kept)
    }

    async fn rejudge_held(&self, now: Millis) -> StoreResult<u64> {
        let (judged, moved) = self
            .write((now, 100), |tx, a| Box::pin(rejudge(tx, a)))
            .await?;
        if moved {
            self.poke();
        }
        Ok(judged)
    }

    async fn observations(&self, filter: EvidenceFilter) -> StoreResult<Vec<ObservationRecord>> {
        self.read(filter, |tx, f| Box::pin(list(tx, f))).await
    }
}
