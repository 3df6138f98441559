//! The simulator's world: every delivery ever created, the idempotency keys, the fault
//! settings, and the decisions the protocol makes over them.
//!
//! Everything here is synchronous and takes `now` from the caller, so the protocol is tested
//! without sockets or sleeps. The HTTP layer (`server.rs`) only parses headers, holds the lock
//! around one call, and turns the returned decision into bytes, a delay, or a dropped
//! connection.
//!
//! Invariants: deliveries are only appended, never removed (the world is the ground truth for
//! "how many times did the effect happen"); ids are `dlv_<n>` with `n` counting from 1 in
//! creation order; a request answered `429`, `503`, `400`, `409` or `422` creates nothing; a
//! cancel answered `503` or `404` cancels nothing, and a cancel never uncancels.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::SimError;
use super::faults::{FaultState, Faults, Roll};

/// One delivery as the provider records it and answers it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delivery {
    /// `dlv_<n>`, numbered from 1 in creation order.
    pub id: String,
    /// The caller's stable reference (docket sends its external idempotency key here).
    pub client_reference: String,
    /// The address the document was delivered to.
    pub recipient: String,
    /// `sha256:<hex>` of the document, as sent by the caller.
    pub document_digest: String,
    /// Current status; cancelling changes it in place.
    pub status: DeliveryStatus,
    /// Creation time, RFC 3339 in UTC.
    pub created_at: String,
    /// When the first cancel took effect, RFC 3339 in UTC; `null` while not cancelled. Later
    /// cancels leave it unchanged, so it shows the cancel took effect once.
    pub cancelled_at: Option<String>,
    /// Every cancel request received for this delivery with the right token, whatever the
    /// answer: applied, repeated, answered `503`, or with its response lost. The world's
    /// bookkeeping for tests (`/v1/_world`); lookups do not show it.
    pub cancel_requests: u32,
}

/// The status of a delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeliveryStatus {
    /// Created and not cancelled.
    Accepted,
    /// Cancelled by `POST /v1/deliveries/{id}/cancel`.
    Cancelled,
}

/// The body of a `201` (and of the `200` replay of the same key).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Accepted {
    pub id: String,
    pub client_reference: String,
    pub status: DeliveryStatus,
}

/// The fields of a create request the provider needs; extra fields are tolerated, as a real
/// provider would.
#[derive(Debug, Deserialize)]
struct CreateBody {
    client_reference: String,
    recipient: String,
    document_digest: String,
    /// Parsed only so that a non-string document is a `400`; the provider keeps the digest.
    #[serde(default, rename = "document")]
    _document: Option<String>,
}

/// A create request as the HTTP layer hands it over, after the token check.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CreateRequest<'a> {
    /// The `Idempotency-Key` header, if sent.
    pub idempotency_key: Option<&'a str>,
    /// The raw body.
    pub body: &'a [u8],
}

/// What the protocol answers to a create request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CreateOutcome {
    /// `503`; nothing created.
    Unavailable,
    /// `429` with `Retry-After`; nothing created.
    RateLimited { retry_after_s: u64 },
    /// `400`: not JSON, or a required field missing or of the wrong type.
    BadRequest { message: String },
    /// `422 invalid_recipient`.
    InvalidRecipient,
    /// `409 idempotency_key_reused`.
    KeyReused,
    /// `201`: a new delivery.
    Created(Accepted),
    /// `200`: the key was already used with an equal body; nothing new was created.
    Replayed(Accepted),
}

/// The outcome plus the transport faults to apply when answering it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CreateDecision {
    pub outcome: CreateOutcome,
    /// Close the connection without answering (only ever set for `Created`/`Replayed`).
    pub lose: bool,
    /// Answer only after this delay (never set when `lose` is).
    pub delay: Option<Duration>,
}

/// The most items one bulk create may carry.
pub const MAX_BATCH_ITEMS: usize = 100;

/// What the protocol answers to a bulk create: the batch refused as a whole (as a single
/// create would be), or each item's answer in order (`RateLimited` never appears for an
/// item; `Unavailable` does, for an item the provider did not take).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum BatchOutcome {
    /// `503`; nothing created.
    Unavailable,
    /// `429` with `Retry-After`; nothing created.
    RateLimited { retry_after_s: u64 },
    /// `400`: not JSON, no `items`, or too many or none.
    BadRequest { message: String },
    /// `200` with one answer per item.
    Items(Vec<CreateOutcome>),
}

/// A bulk create's outcome plus the transport faults to apply when answering it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BatchDecision {
    pub outcome: BatchOutcome,
    /// Close the connection without answering (only when an item committed).
    pub lose: bool,
    /// Answer only after this delay (never set when `lose` is).
    pub delay: Option<Duration>,
}

/// What the protocol answers to a cancel request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CancelOutcome {
    /// `503`; nothing cancelled.
    Unavailable,
    /// `404`: no delivery with this id.
    UnknownDelivery,
    /// `200`: the delivery, cancelled now or earlier.
    Cancelled(Delivery),
}

/// The outcome plus the transport fault to apply when answering it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CancelDecision {
    pub outcome: CancelOutcome,
    /// Close the connection without answering (only ever set for `Cancelled`).
    pub lose: bool,
    /// This request's cancel took effect (the delivery was not cancelled before).
    pub took_effect: bool,
}

/// A delivery plus what the HTTP answers do not show.
#[derive(Debug)]
struct Record {
    delivery: Delivery,
    /// Lookups show the delivery from this time on (eventual visibility).
    visible_at: SystemTime,
}

/// What is remembered under one idempotency key.
#[derive(Debug)]
struct KeyEntry {
    /// The request body as parsed JSON; replays are compared with it, so key order and
    /// whitespace do not matter.
    body: Value,
    answer: Accepted,
    stored_at: SystemTime,
}

/// The whole mutable state of one simulator.
#[derive(Debug)]
pub(crate) struct World {
    records: Vec<Record>,
    /// The positions in `records` of each client reference's deliveries, in creation order:
    /// a lookup reads only its own, as a provider's index would (a scan of every delivery
    /// made the simulator, not the host, the cost of a recovery that queries thousands).
    by_reference: HashMap<String, Vec<usize>>,
    keys: HashMap<String, KeyEntry>,
    faults: FaultState,
    key_retention: Duration,
    /// Events made so far (their ids are `evt_<n>`).
    events: u64,
}

/// One event the provider posts to its webhook URL.
#[derive(Debug, Clone)]
pub(crate) struct Event {
    /// `evt_<n>`: the `webhook-id`, the same on a repeat.
    pub id: String,
    pub body: String,
    pub url: String,
    pub secret: String,
    /// Posted this late, when it is.
    pub late: Option<Duration>,
    /// Posted twice.
    pub repeat: bool,
}

impl World {
    pub fn new(faults: Faults, key_retention: Duration) -> Self {
        Self {
            records: Vec::new(),
            by_reference: HashMap::new(),
            keys: HashMap::new(),
            faults: FaultState::new(faults),
            key_retention,
            events: 0,
        }
    }

    /// Decides and applies one create request (the state changes before the answer is sent,
    /// which is what makes "lost response after commit" and "slow" meaningful).
    pub fn create(&mut self, request: CreateRequest<'_>, now: SystemTime) -> CreateDecision {
        let roll = self.faults.roll();
        let outcome = self.create_outcome(request, now, roll);
        let committed = matches!(
            outcome,
            CreateOutcome::Created(_) | CreateOutcome::Replayed(_)
        );
        let recipient = serde_json::from_slice::<Value>(request.body)
            .ok()
            .and_then(|b| b["recipient"].as_str().map(str::to_string));
        let lose = committed
            && (self.faults.take_lose_for(recipient.as_deref()) || self.faults.take_lose(roll));
        let delay = (!lose && self.faults.take_slow(roll))
            .then(|| Duration::from_millis(self.faults.faults.slow_ms));
        CreateDecision {
            outcome,
            lose,
            delay,
        }
    }

    fn create_outcome(
        &mut self,
        request: CreateRequest<'_>,
        now: SystemTime,
        roll: Roll,
    ) -> CreateOutcome {
        // Infrastructure faults come before any processing: the request never reached the
        // part of the provider that creates things.
        if self.faults.take_unavailable(roll) {
            return CreateOutcome::Unavailable;
        }
        if self.faults.take_rate_limit(roll) {
            return CreateOutcome::RateLimited {
                retry_after_s: self.faults.faults.retry_after_s,
            };
        }
        let body: Value = match serde_json::from_slice(request.body) {
            Ok(body) => body,
            Err(err) => {
                return CreateOutcome::BadRequest {
                    message: format!("request body is not valid JSON: {err}"),
                };
            }
        };
        self.take_create(body, request.idempotency_key, now)
    }

    /// One create past the infrastructure: the body checked, the key looked up, the
    /// delivery made. A bulk create decides each of its items here too, so an item and a
    /// single create under the same key and body replay each other.
    fn take_create(&mut self, body: Value, key: Option<&str>, now: SystemTime) -> CreateOutcome {
        let fields: CreateBody = match serde_json::from_value(body.clone()) {
            Ok(fields) => fields,
            Err(err) => {
                return CreateOutcome::BadRequest {
                    message: format!(
                        "request body does not match {{\"client_reference\", \"recipient\", \
                         \"document_digest\", \"document\"}}: {err}"
                    ),
                };
            }
        };
        if !valid_recipient(&fields.recipient) {
            return CreateOutcome::InvalidRecipient;
        }
        let key = key.filter(|_| self.faults.faults.idempotency);
        if let Some(key) = key
            && let Some(entry) = self.keys.get(key)
            && !self.expired(entry, now)
        {
            return if entry.body == body {
                CreateOutcome::Replayed(entry.answer.clone())
            } else {
                CreateOutcome::KeyReused
            };
        }
        let answer = self.append(fields, now);
        if let Some(key) = key {
            // Also replaces an expired entry: after retention the key is free again.
            self.keys.insert(
                key.to_owned(),
                KeyEntry {
                    body,
                    answer: answer.clone(),
                    stored_at: now,
                },
            );
        }
        CreateOutcome::Created(answer)
    }

    /// Decides and applies one bulk create (`POST /v1/deliveries/batch`): the
    /// infrastructure faults and a lost or slow answer apply to the batch as to one request;
    /// each item is then decided on its own, under its own key, in order.
    pub fn create_batch(&mut self, body: &[u8], now: SystemTime) -> BatchDecision {
        let roll = self.faults.roll();
        let outcome = self.batch_outcome(body, now, roll);
        let committed = matches!(&outcome, BatchOutcome::Items(items)
            if items.iter().any(|i| matches!(i, CreateOutcome::Created(_) | CreateOutcome::Replayed(_))));
        let lose = committed && self.faults.take_lose(roll);
        let delay = (!lose && self.faults.take_slow(roll))
            .then(|| Duration::from_millis(self.faults.faults.slow_ms));
        BatchDecision {
            outcome,
            lose,
            delay,
        }
    }

    fn batch_outcome(&mut self, body: &[u8], now: SystemTime, roll: Roll) -> BatchOutcome {
        if self.faults.take_unavailable(roll) {
            return BatchOutcome::Unavailable;
        }
        if self.faults.take_rate_limit(roll) {
            return BatchOutcome::RateLimited {
                retry_after_s: self.faults.faults.retry_after_s,
            };
        }
        let bad = |message: String| BatchOutcome::BadRequest { message };
        let body: Value = match serde_json::from_slice(body) {
            Ok(body) => body,
            Err(err) => return bad(format!("request body is not valid JSON: {err}")),
        };
        let Some(items) = body.get("items").and_then(Value::as_array) else {
            return bad("request body must be {\"items\": [<delivery request>, …]}".into());
        };
        if items.is_empty() || items.len() > MAX_BATCH_ITEMS {
            return bad(format!(
                "a batch carries 1 to {MAX_BATCH_ITEMS} items; this one has {}",
                items.len()
            ));
        }
        let mut outcomes = Vec::with_capacity(items.len());
        for item in items {
            let mut item = item.clone();
            let key = match item.as_object_mut().map(|o| o.remove("idempotency_key")) {
                None => {
                    outcomes.push(CreateOutcome::BadRequest {
                        message: "an item must be a JSON object".into(),
                    });
                    continue;
                }
                Some(None | Some(Value::Null)) => None,
                Some(Some(Value::String(key))) => Some(key),
                Some(Some(_)) => {
                    outcomes.push(CreateOutcome::BadRequest {
                        message: "an item's `idempotency_key` must be a string".into(),
                    });
                    continue;
                }
            };
            // A provider taking part of a batch: this item never reached the part that
            // creates things.
            if self.faults.take_item_unavailable() {
                outcomes.push(CreateOutcome::Unavailable);
                continue;
            }
            outcomes.push(self.take_create(item, key.as_deref(), now));
        }
        BatchOutcome::Items(outcomes)
    }

    fn expired(&self, entry: &KeyEntry, now: SystemTime) -> bool {
        // A clock that went backwards keeps the key rather than freeing it early.
        now.duration_since(entry.stored_at)
            .is_ok_and(|age| age >= self.key_retention)
    }

    fn append(&mut self, fields: CreateBody, now: SystemTime) -> Accepted {
        let faults = &self.faults.faults;
        let visible_at = if faults.hidden_for.contains(&fields.recipient) {
            // Far enough never to come, near enough for any clock's arithmetic.
            now + Duration::from_secs(100 * 365 * 86_400)
        } else {
            now + Duration::from_millis(faults.visibility_delay_ms)
        };
        let id = format!("dlv_{}", self.records.len() + 1);
        let delivery = Delivery {
            id: id.clone(),
            client_reference: fields.client_reference,
            recipient: fields.recipient,
            document_digest: fields.document_digest,
            status: DeliveryStatus::Accepted,
            created_at: rfc3339(now),
            cancelled_at: None,
            cancel_requests: 0,
        };
        let answer = Accepted {
            id,
            client_reference: delivery.client_reference.clone(),
            status: delivery.status,
        };
        self.by_reference
            .entry(delivery.client_reference.clone())
            .or_default()
            .push(self.records.len());
        self.records.push(Record {
            delivery,
            visible_at,
        });
        answer
    }

    /// The lookup endpoint: `None` when query is off (the endpoint answers `404`), else the
    /// deliveries with this reference that are visible at `now`, in creation order.
    pub fn lookup(&self, client_reference: &str, now: SystemTime) -> Option<Vec<Delivery>> {
        if !self.faults.faults.query {
            return None;
        }
        let found = self
            .by_reference
            .get(client_reference)
            .into_iter()
            .flatten()
            .map(|&i| &self.records[i])
            .filter(|r| r.visible_at <= now)
            .map(|r| r.delivery.clone())
            .collect();
        Some(found)
    }

    /// Decides and applies one cancel request: counts it against the delivery, then (unless
    /// a `503` is injected) cancels it; cancelling again changes nothing but the count. The
    /// cancel is applied before the answer, so a lost answer hides an effect that happened.
    pub fn cancel(&mut self, id: &str, now: SystemTime) -> CancelDecision {
        let unavailable = self.faults.take_unavailable_cancel();
        let Some(record) = self.record_mut(id) else {
            let outcome = if unavailable {
                CancelOutcome::Unavailable
            } else {
                CancelOutcome::UnknownDelivery
            };
            return CancelDecision {
                outcome,
                lose: false,
                took_effect: false,
            };
        };
        let delivery = &mut record.delivery;
        delivery.cancel_requests += 1;
        if unavailable {
            return CancelDecision {
                outcome: CancelOutcome::Unavailable,
                lose: false,
                took_effect: false,
            };
        }
        let took_effect = delivery.status != DeliveryStatus::Cancelled;
        if took_effect {
            delivery.status = DeliveryStatus::Cancelled;
            delivery.cancelled_at = Some(rfc3339(now));
        }
        let outcome = CancelOutcome::Cancelled(delivery.clone());
        CancelDecision {
            outcome,
            lose: self.faults.take_lose_cancel(),
            took_effect,
        }
    }

    /// Every delivery ever created, in creation order, with its current status, visible or not.
    pub fn deliveries(&self) -> Vec<Delivery> {
        self.records.iter().map(|r| r.delivery.clone()).collect()
    }

    pub fn faults(&self) -> &Faults {
        &self.faults.faults
    }

    /// The delivery with id `id`: ids are `dlv_<position + 1>` (see `append`).
    fn record_mut(&mut self, id: &str) -> Option<&mut Record> {
        let position = id
            .strip_prefix("dlv_")
            .and_then(|n| n.parse::<usize>().ok())
            .and_then(|n| n.checked_sub(1))?;
        self.records
            .get_mut(position)
            .filter(|r| r.delivery.id == id)
    }

    /// The event that `delivery`'s change makes, if events are configured: numbered,
    /// its body fixed, and how it is to be posted (late, twice) by the counters.
    pub fn event(&mut self, kind: &'static str, id: &str, now: SystemTime) -> Option<Event> {
        let faults = &self.faults.faults;
        let (url, secret) = (faults.webhook_url.clone()?, faults.webhook_secret.clone()?);
        let delivery = self.record_mut(id)?.delivery.clone();
        let faults = &mut self.faults.faults;
        self.events += 1;
        let late = (faults.webhook_late_next > 0).then(|| {
            faults.webhook_late_next -= 1;
            Duration::from_millis(faults.webhook_late_ms)
        });
        let repeat = faults.webhook_repeat_next > 0;
        if repeat {
            faults.webhook_repeat_next -= 1;
        }
        let mut data = serde_json::json!(&delivery);
        if let Some(fields) = data.as_object_mut() {
            fields.remove("cancel_requests");
        }
        let id = format!("evt_{}", self.events);
        let body = serde_json::json!({
            "id": id,
            "type": kind,
            "occurred_at": rfc3339(now),
            "data": data,
        })
        .to_string();
        Some(Event {
            id,
            body,
            url,
            secret,
            late,
            repeat,
        })
    }

    pub fn patch_faults(&mut self, patch: &Value) -> Result<Faults, SimError> {
        self.faults.patch(patch)
    }

    pub fn key_retention(&self) -> Duration {
        self.key_retention
    }

    /// What the provider holds, to save beside a database and load again later: every
    /// delivery (visible from then on) and every key with when it was stored.
    pub fn snapshot(&self) -> WorldSnapshot {
        let mut keys: Vec<KeySnapshot> = self
            .keys
            .iter()
            .map(|(key, e)| KeySnapshot {
                key: key.clone(),
                body: e.body.clone(),
                answer: e.answer.clone(),
                stored_at_ms: millis(e.stored_at),
            })
            .collect();
        keys.sort_by(|a, b| a.key.cmp(&b.key));
        WorldSnapshot {
            deliveries: self.deliveries(),
            keys,
        }
    }

    /// Replaces what the provider holds with `snapshot`; faults and retention stay.
    pub fn restore(&mut self, snapshot: WorldSnapshot) -> Result<(), SimError> {
        let mut by_reference: HashMap<String, Vec<usize>> = HashMap::new();
        for (i, d) in snapshot.deliveries.iter().enumerate() {
            if d.id != format!("dlv_{}", i + 1) {
                return Err(SimError::Snapshot(format!(
                    "delivery {} is at position {}; deliveries are numbered dlv_1, dlv_2, … in order",
                    d.id,
                    i + 1
                )));
            }
            by_reference
                .entry(d.client_reference.clone())
                .or_default()
                .push(i);
        }
        self.records = snapshot
            .deliveries
            .into_iter()
            .map(|delivery| Record {
                delivery,
                visible_at: UNIX_EPOCH,
            })
            .collect();
        self.by_reference = by_reference;
        self.keys = snapshot
            .keys
            .into_iter()
            .map(|k| {
                let entry = KeyEntry {
                    body: k.body,
                    answer: k.answer,
                    stored_at: UNIX_EPOCH + Duration::from_millis(k.stored_at_ms),
                };
                (k.key, entry)
            })
            .collect();
        Ok(())
    }
}

/// A provider's world as saved to a file (`docket sim-provider --world FILE` loads one).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorldSnapshot {
    pub deliveries: Vec<Delivery>,
    pub keys: Vec<KeySnapshot>,
}

/// One remembered idempotency key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeySnapshot {
    pub key: String,
    /// The request body first sent under it (a replay must match it).
    pub body: Value,
    answer: Accepted,
    pub stored_at_ms: u64,
}

fn millis(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The provider's notion of a deliverable address; anything else is a permanent `422`.
fn valid_recipient(recipient: &str) -> bool {
    !recipient.trim().is_empty() && recipient.contains('@')
}

/// Formats a time as RFC 3339 in UTC with milliseconds, e.g. `2023-11-14T22:13:20.000Z`.
pub(crate) fn rfc3339(time: SystemTime) -> String {
    // Times before 1970 do not occur with a real or test clock; clamp rather than panic.
    let since_epoch = time.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since_epoch.as_secs();
    let (year, month, day) = civil_from_days(secs / 86_400);
    let rem = secs % 86_400;
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3_600,
        rem % 3_600 / 60,
        rem % 60,
        since_epoch.subsec_millis()
    )
}

/// Days since 1970-01-01 to (year, month, day) in the proleptic Gregorian calendar
/// (Howard Hinnant's `civil_from_days`, restricted to dates after the epoch).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
#[path = "state_tests.rs"]
mod tests;
