//! The `http-delivery` adapter: sends a rendered document to a delivery provider that
//! speaks the reference provider protocol (`POST /v1/deliveries`, lookup by
//! `client_reference`, cancel), and maps every answer to the contract's typed errors.
//!
//! The host-derived idempotency key travels as `client_reference` on every attempt, and as
//! the `Idempotency-Key` header in the variants that send it; a compensation cancels the
//! original delivery and sends its own key the same way. A lookup reports a cancelled
//! delivery as reversed, any other as in effect. Cargo features build the
//! contract variants that `docket adapter verify` tells apart (see [`VARIANT`]).
//!
//! Operator settings: `base_url` (required, e.g. `http://127.0.0.1:8080`) and `timeout_ms`
//! (optional). Secret: `provider_token`, sent as a bearer token.

mod provider;

use docket_guest::http::Method;
use docket_guest::{
    Adapter, CompensationRequest, Contract, EffectError, EffectStatus, Inbound, Lookup,
    Observation, ObserveError, Receipt, Request, log,
};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::provider::Provider;

#[cfg(any(
    all(feature = "query-only", feature = "fire-and-forget"),
    all(feature = "query-only", feature = "lying"),
    all(feature = "fire-and-forget", feature = "lying"),
))]
compile_error!(
    "features `query-only`, `fire-and-forget` and `lying` each build a different \
     contract variant: enable at most one"
);

/// What one build of the adapter claims and how it talks to the provider.
pub struct Variant {
    /// The adapter name reported by `describe`.
    pub name: &'static str,
    /// Claims that same-key retries are deduplicated by the provider.
    pub idempotent: bool,
    /// Claims lookup by `client_reference`.
    pub queryable: bool,
    /// Claims cancel as compensation.
    pub compensable: bool,
    /// Sends the key as the `Idempotency-Key` header (it always goes as `client_reference`).
    pub sends_idempotency_key: bool,
}

/// The honest adapter: every claim matches a provider running with idempotency and query on.
#[cfg(not(any(feature = "query-only", feature = "fire-and-forget", feature = "lying")))]
pub const VARIANT: Variant = Variant {
    name: "http-delivery",
    idempotent: true,
    queryable: true,
    compensable: true,
    sends_idempotency_key: true,
};

/// Makes no idempotency claim: recovery goes through lookup by reference.
#[cfg(feature = "query-only")]
pub const VARIANT: Variant = Variant {
    name: "http-delivery-query-only",
    idempotent: false,
    queryable: true,
    compensable: true,
    sends_idempotency_key: false,
};

/// Claims nothing: an uncertain outcome can only go to a person.
#[cfg(feature = "fire-and-forget")]
pub const VARIANT: Variant = Variant {
    name: "http-delivery-fire-and-forget",
    idempotent: false,
    queryable: false,
    compensable: false,
    sends_idempotency_key: false,
};

/// Declares what the honest adapter declares but never sends `Idempotency-Key`, so its
/// idempotency claim is false; `docket adapter verify` must catch it.
#[cfg(feature = "lying")]
pub const VARIANT: Variant = Variant {
    name: "http-delivery-lying",
    idempotent: true,
    queryable: true,
    compensable: true,
    sends_idempotency_key: false,
};

/// Version reported by every contract variant; `version-2` and `other-namespace` build
/// later versions of the honest adapter.
#[cfg(not(any(
    feature = "version-2",
    feature = "other-namespace",
    feature = "batching"
)))]
const VERSION: &str = "1.0.0";
#[cfg(all(feature = "version-2", not(feature = "other-namespace")))]
const VERSION: &str = "2.0.0";
/// Version 1.1.0 of the honest adapter also sends deliveries in batches (`batching`).
#[cfg(all(
    feature = "batching",
    not(feature = "version-2"),
    not(feature = "other-namespace")
))]
const VERSION: &str = "1.1.0";
#[cfg(feature = "other-namespace")]
const VERSION: &str = "3.0.0";
/// The provider's deduplication domain; shared by the variants because they talk to the
/// same provider with the same keys. Version 3 claims another one (as if it spoke to
/// another region of the provider), which makes its keys different from the others'.
#[cfg(not(feature = "other-namespace"))]
const NAMESPACE: &str = "reference-provider";
#[cfg(feature = "other-namespace")]
const NAMESPACE: &str = "reference-provider-eu";
/// The reference provider remembers keys for 24 h by default.
const RETENTION_SECONDS: u64 = 86_400;
/// How long a new delivery may stay invisible to lookups.
const VISIBILITY_WINDOW_MS: u64 = 5_000;
/// The most deliveries one batch call sends: the provider's limit per bulk create.
#[cfg(feature = "batching")]
const BATCH_ITEMS: u32 = 100;

/// The step input: what to deliver, as produced by `render-document`.
#[derive(Debug, Deserialize)]
struct DeliveryInput {
    recipient: String,
    document: String,
    document_digest: String,
}

/// The adapter; stateless like every docket plugin.
struct HttpDelivery;

impl Adapter for HttpDelivery {
    fn describe() -> Contract {
        let mut contract = Contract::new(VARIANT.name, VERSION)
            .namespace(NAMESPACE)
            .outbound_host("$base_url")
            .secret(provider::TOKEN_SECRET);
        if VARIANT.idempotent {
            contract = contract.idempotent(RETENTION_SECONDS);
        }
        if VARIANT.queryable {
            contract = contract.queryable(VISIBILITY_WINDOW_MS);
        }
        if VARIANT.compensable {
            contract = contract.compensable();
        }
        #[cfg(feature = "batching")]
        {
            contract = contract.batches(BATCH_ITEMS);
        }
        // Every variant reads the provider's events: the evidence arrives whatever the
        // variant claims of its calls.
        contract.observes()
    }

    fn invoke(request: Request) -> Result<Receipt, EffectError> {
        let input: DeliveryInput = request.parse_input()?;
        let provider = Provider::from_host()?;
        let key = &request.idempotency_key;
        let body = json!({
            "client_reference": key,
            "recipient": input.recipient,
            "document_digest": input.document_digest,
            "document": input.document,
        });
        let mut post = provider.request(Method::Post, "/v1/deliveries").json(&body);
        if VARIANT.sends_idempotency_key {
            post = post.header("idempotency-key", key.as_str());
        }
        log::info(format!(
            "creating delivery with key {key} (attempt {})",
            request.attempt
        ));
        let response = post.send()?;
        match response.status {
            status @ (200 | 201) => {
                let mut delivery = provider::delivery(&response.body).map_err(|problem| {
                    EffectError::outcome_unknown(format!(
                        "the provider answered HTTP {status} to the delivery but {problem}"
                    ))
                })?;
                let id = provider::delivery_id(&delivery).to_string();
                // 200 is a replay: the provider recognised the key and created nothing new.
                delivery.insert("replayed".to_string(), Value::Bool(status == 200));
                log::info(format!("delivery {id} for key {key} (HTTP {status})"));
                Ok(Receipt::new(id, Value::Object(delivery).to_string()))
            }
            _ => Err(fail(&response, "creating the delivery")),
        }
    }

    fn query(reference: String) -> Result<Lookup, EffectError> {
        if !VARIANT.queryable {
            return Err(EffectError::rejected(
                "query_unsupported",
                format!("{} does not declare query support", VARIANT.name),
            ));
        }
        let provider = Provider::from_host()?;
        let path = format!(
            "/v1/deliveries?client_reference={}",
            docket_guest::http::encode_query_component(&reference)
        );
        let response = provider.request(Method::Get, &path).send()?;
        match response.status {
            200 => {
                let found = provider::first_listed(&response.body).map_err(|problem| {
                    EffectError::unavailable(format!(
                        "the provider's lookup answer was not understood: {problem}"
                    ))
                })?;
                Ok(match found {
                    Some(delivery) => {
                        let id = provider::delivery_id(&delivery).to_string();
                        let word = provider::delivery_status(&delivery).to_string();
                        // Only a cancel reverses a delivery; every other word means it stands.
                        let status = if word == provider::CANCELLED {
                            EffectStatus::Reversed
                        } else {
                            EffectStatus::InEffect
                        };
                        log::info(format!(
                            "lookup of {reference}: found delivery {id} ({word})"
                        ));
                        // The receipt has the shape an accepted create gives (the step's
                        // declared outputs): this is the provider's record of an earlier
                        // request, as a replayed create would answer it.
                        let mut delivery = delivery;
                        delivery
                            .entry("replayed".to_string())
                            .or_insert(Value::Bool(true));
                        let receipt = Receipt::new(id, Value::Object(delivery).to_string());
                        Lookup::found(receipt, status, word)
                    }
                    None => {
                        log::info(format!("lookup of {reference}: no delivery yet"));
                        Lookup::Absent
                    }
                })
            }
            404 => Err(EffectError::rejected(
                "query_unsupported",
                "the provider answered HTTP 404 to the lookup, so it has lookups disabled; \
                 run it with query on, or use an adapter variant that does not declare \
                 query support",
            )),
            // A lookup changes nothing, so a server error is only a reason to ask again.
            status @ 500..=599 => Err(EffectError::unavailable(format!(
                "the provider failed the lookup with HTTP {status}"
            ))),
            _ => Err(fail(&response, "looking up the delivery")),
        }
    }

    fn compensate(request: CompensationRequest) -> Result<Receipt, EffectError> {
        if !VARIANT.compensable {
            return Err(EffectError::rejected(
                "compensation_unsupported",
                format!("{} does not declare compensation support", VARIANT.name),
            ));
        }
        let id = request.original_receipt.external_reference;
        if id.is_empty() {
            return Err(EffectError::rejected(
                "invalid_receipt",
                "the receipt to compensate has no delivery id",
            ));
        }
        let provider = Provider::from_host()?;
        let path = format!(
            "/v1/deliveries/{}/cancel",
            docket_guest::http::encode_query_component(&id)
        );
        let key = &request.idempotency_key;
        let mut post = provider.request(Method::Post, &path);
        if VARIANT.sends_idempotency_key {
            post = post.header("idempotency-key", key.as_str());
        }
        log::info(format!(
            "cancelling delivery {id} with key {key} (attempt {})",
            request.attempt
        ));
        // Like a create, a failure after the request may have left is `outcome-unknown`:
        // the host then looks the delivery up to see whether it is cancelled.
        let response = post.send()?;
        match response.status {
            200 => {
                // Cancelling is idempotent at the provider; keep its answer as the output.
                let output = match serde_json::from_slice::<Value>(&response.body) {
                    Ok(Value::Object(body)) => Value::Object(body),
                    _ => {
                        let mut body = Map::new();
                        body.insert("id".to_string(), Value::String(id.clone()));
                        body.insert(
                            "status".to_string(),
                            Value::String(provider::CANCELLED.into()),
                        );
                        Value::Object(body)
                    }
                };
                Ok(Receipt::new(id, output.to_string()))
            }
            404 => Err(EffectError::rejected(
                "unknown_delivery",
                format!("the provider does not know delivery `{id}` (HTTP 404)"),
            )),
            _ => Err(fail(&response, "cancelling the delivery")),
        }
    }
}

/// Logs a non-success answer and maps it to its typed error.
fn fail(response: &docket_guest::http::Response, action: &str) -> EffectError {
    log::warn(format!("HTTP {} while {action}", response.status));
    provider::error_for(response, action)
}

/// The provider's events (reference protocol, as the simulator posts them): `{"id",
/// "type": "delivery.accepted" | "delivery.cancelled", "occurred_at", "data": <the
/// delivery>}`. An accepted delivery is in effect, a cancelled one reversed; the delivery's
/// `client_reference` is the key docket sent, its `id` the external reference.
impl docket_guest::Observer for HttpDelivery {
    fn observe(delivery: Inbound) -> Result<Vec<Observation>, ObserveError> {
        let event: Value = serde_json::from_slice(&delivery.body)
            .map_err(|e| ObserveError::Malformed(format!("the event is not JSON: {e}")))?;
        let status = match event.get("type").and_then(Value::as_str) {
            Some("delivery.accepted") => EffectStatus::InEffect,
            Some("delivery.cancelled") => EffectStatus::Reversed,
            Some(other) => {
                return Err(ObserveError::Unrecognized(format!(
                    "event type `{other}` is not one this adapter reads"
                )));
            }
            None => return Err(ObserveError::Malformed("the event has no `type`".into())),
        };
        let data = event
            .get("data")
            .and_then(Value::as_object)
            .ok_or_else(|| ObserveError::Malformed("the event has no `data` object".into()))?;
        let text = |field: &str| data.get(field).and_then(Value::as_str).map(str::to_string);
        let id = text("id").ok_or_else(|| {
            ObserveError::Malformed("the delivery in the event has no `id`".into())
        })?;
        // The receipt's shape is `invoke`'s answer: what later steps read.
        let output = json!({
            "id": id,
            "client_reference": text("client_reference"),
            "status": text("status"),
            "replayed": false,
        });
        Ok(vec![Observation {
            external_reference: Some(id),
            idempotency_key: text("client_reference"),
            event_id: event.get("id").and_then(Value::as_str).map(str::to_string),
            status,
            provider_status: text("status").unwrap_or_default(),
            observed_at_ms: None,
            output: Some(output.to_string()),
        }])
    }
}

/// `batching`: every item of a batch is a delivery of its own, sent under its own key in
/// one bulk create (`POST /v1/deliveries/batch`) and answered on its own. A lost answer
/// leaves every item uncertain; an item the provider did not take is unavailable (nothing
/// was created for it), one it refused is rejected.
#[cfg(feature = "batching")]
impl docket_guest::Batcher for HttpDelivery {
    fn invoke_batch(
        request: docket_guest::BatchRequest,
    ) -> Result<Vec<Result<Receipt, EffectError>>, EffectError> {
        let mut answers: Vec<Option<Result<Receipt, EffectError>>> = Vec::new();
        let mut sent = Vec::new();
        let mut keys = Vec::new();
        for item in &request.items {
            let key = &item.idempotency_key;
            match serde_json::from_str::<DeliveryInput>(&item.input) {
                Ok(input) => {
                    sent.push(json!({
                        "idempotency_key": key,
                        "client_reference": key,
                        "recipient": input.recipient,
                        "document_digest": input.document_digest,
                        "document": input.document,
                    }));
                    keys.push(key.clone());
                    answers.push(None);
                }
                Err(e) => answers.push(Some(Err(EffectError::rejected(
                    "invalid_input",
                    format!("the item's input is not a delivery: {e}"),
                )))),
            }
        }
        if sent.is_empty() {
            return Ok(answers.into_iter().flatten().collect());
        }
        let provider = Provider::from_host()?;
        log::info(format!(
            "creating {} deliveries in one batch {} (attempt {})",
            sent.len(),
            request.batch_key,
            request.attempt
        ));
        let response = provider
            .request(Method::Post, "/v1/deliveries/batch")
            .json(&json!({ "items": sent }))
            .send()?;
        if response.status != 200 {
            return Err(fail(&response, "creating the batch of deliveries"));
        }
        let body: Value = serde_json::from_slice(&response.body).map_err(|e| {
            EffectError::outcome_unknown(format!(
                "the provider's answer to the batch is not JSON ({e}); it may have created them"
            ))
        })?;
        let items = body
            .get("items")
            .and_then(Value::as_array)
            .filter(|items| items.len() == keys.len())
            .ok_or_else(|| {
                EffectError::outcome_unknown(format!(
                    "the provider answered the batch of {} without one answer per item; it may have created them",
                    keys.len()
                ))
            })?;
        let mut answered = items
            .iter()
            .zip(&keys)
            .map(|(item, key)| item_answer(item, key));
        Ok(answers
            .into_iter()
            .map(|a| a.unwrap_or_else(|| answered.next().expect("one answer per sent item")))
            .collect())
    }
}

/// One item's answer in a batch, as a single create's answer would be mapped.
#[cfg(feature = "batching")]
fn item_answer(item: &Value, key: &str) -> Result<Receipt, EffectError> {
    let code = item.get("code").and_then(Value::as_u64).unwrap_or(0);
    let error = item
        .get("error")
        .and_then(Value::as_str)
        .unwrap_or("unknown")
        .to_string();
    match code {
        200 | 201 => {
            let Some(Value::Object(delivery)) = item.get("delivery").cloned() else {
                return Err(EffectError::outcome_unknown(format!(
                    "the provider took item {key} of the batch but named no delivery"
                )));
            };
            let mut delivery = delivery;
            let id = provider::delivery_id(&delivery).to_string();
            delivery.insert("replayed".to_string(), Value::Bool(code == 200));
            Ok(Receipt::new(id, Value::Object(delivery).to_string()))
        }
        409 => Err(EffectError::idempotency_conflict(format!(
            "the provider refused item {key}: the key was already used with a different request"
        ))),
        422 => Err(EffectError::rejected(
            error.clone(),
            format!("the provider rejected item {key}: {error}"),
        )),
        503 => Err(EffectError::unavailable(format!(
            "the provider did not take item {key} of the batch; nothing was created for it"
        ))),
        400..=499 => Err(EffectError::rejected(
            format!("http_{code}"),
            format!("the provider refused item {key}: {error}"),
        )),
        _ => Err(EffectError::outcome_unknown(format!(
            "the provider gave item {key} an unexpected answer ({code}); it may have created it"
        ))),
    }
}

#[cfg(not(feature = "batching"))]
docket_guest::export_observing_adapter!(HttpDelivery);
#[cfg(feature = "batching")]
docket_guest::export_full_adapter!(HttpDelivery);
