//! `__name__`: a docket adapter, scaffolded by `docket adapter new`.
//!
//! As generated it speaks the reference delivery protocol of docket's built-in provider
//! simulator (`POST /v1/deliveries`, lookup by `client_reference`, cancel), so it builds,
//! runs and verifies at once; replace the paths and fields with your provider's. It
//! declares idempotency, query and compensation, and `docket adapter verify` checks each.
//!
//! Settings: `base_url` (the provider). Secret: `provider_token` (a bearer token).

use docket_guest::http::{self, Response};
use docket_guest::{
    Adapter, CompensationRequest, Contract, EffectError, Lookup, Receipt, Request, secrets,
    settings,
};
use serde_json::{Map, Value, json};

/// The secret sent as the bearer token.
const TOKEN: &str = "provider_token";

/// The adapter; stateless like every docket plugin.
struct Plugin;

impl Adapter for Plugin {
    fn describe() -> Contract {
        Contract::new("__name__", "0.1.0")
            // The provider's deduplication domain: adapters sharing it share keys.
            .namespace("__name__")
            // The provider remembers idempotency keys for a day…
            .idempotent(86_400)
            // …can be asked about a request by its key (visible within 5 s)…
            .queryable(5_000)
            // …and can undo an effect.
            .compensable()
            .outbound_host("$base_url")
            .secret(TOKEN)
    }

    fn invoke(request: Request) -> Result<Receipt, EffectError> {
        let mut body: Map<String, Value> = request.parse_input()?;
        // The key goes with every attempt of the step: the provider deduplicates by it and
        // finds the request by it.
        body.insert("client_reference".into(), json!(request.idempotency_key));
        let response = provider(http::Request::post(url("/v1/deliveries")?))?
            .header("idempotency-key", request.idempotency_key.as_str())
            .json(&Value::Object(body))
            // A failure before the request left is `not-sent`; after, `outcome-unknown`.
            .send()?
            // 429/503 are retried, 409 is a conflict, 401/403 unauthorized, other 4xx
            // rejected, anything else an unknown outcome: never a refusal taken for success.
            .error_for_status()?;
        receipt(&response)
    }

    fn query(reference: String) -> Result<Lookup, EffectError> {
        let path = format!(
            "/v1/deliveries?client_reference={}",
            http::encode_query_component(&reference)
        );
        let response = provider(http::Request::get(url(&path)?))?
            .send()?
            .error_for_status()?;
        let found: Value = response
            .json()
            .map_err(|e| EffectError::unavailable(format!("unreadable lookup: {e}")))?;
        let Some(first) = found["data"].get(0) else {
            return Ok(Lookup::Absent);
        };
        let id = first["id"]
            .as_str()
            .ok_or_else(|| EffectError::unavailable("a lookup result without an id"))?;
        let status = first["status"].as_str().unwrap_or("unknown");
        let receipt = Receipt::new(id, first.to_string());
        Ok(if status == "cancelled" {
            Lookup::reversed(receipt, status)
        } else {
            Lookup::in_effect(receipt, status)
        })
    }

    fn compensate(request: CompensationRequest) -> Result<Receipt, EffectError> {
        let id = &request.original_receipt.external_reference;
        let path = format!("/v1/deliveries/{}/cancel", http::encode_query_component(id));
        let response = provider(http::Request::post(url(&path)?))?
            .header("idempotency-key", request.idempotency_key.as_str())
            .send()?
            .error_for_status()?;
        receipt(&response)
    }
}

/// `path` on the provider named by the `base_url` setting.
fn url(path: &str) -> Result<String, EffectError> {
    let base = settings::require("base_url")?;
    Ok(format!("{}{path}", base.trim_end_matches('/')))
}

/// A request to the provider, with its token.
fn provider(request: http::Request) -> Result<http::Request, EffectError> {
    Ok(request.header("authorization", format!("Bearer {}", secrets::get(TOKEN)?)))
}

/// The receipt of an accepted answer: its `id` is the external reference.
fn receipt(response: &Response) -> Result<Receipt, EffectError> {
    let answer: Value = response.json().map_err(|e| {
        EffectError::outcome_unknown(format!("accepted, but the answer is unreadable: {e}"))
    })?;
    let id = answer["id"]
        .as_str()
        .ok_or_else(|| EffectError::outcome_unknown("accepted, but the answer names no id"))?;
    Ok(Receipt::new(id, response.text()))
}

docket_guest::export_adapter!(Plugin);
