//! The `ledger` adapter: posts one entry to a ledger that speaks the ledger simulator's
//! protocol (`docket sim-ledger`) — a second provider protocol beside the reference delivery
//! one, with its own paths, fields and status codes.
//!
//! The host-derived key goes as `X-Request-Id` (the ledger deduplicates by it) and as the
//! entry's `reference` (the ledger is looked up by it); a compensation posts a reversal of
//! the entry. The ledger answers `200` for a new entry and for a replay, and `422
//! request_id_reused` where other providers say `409`, so the adapter maps that code itself
//! before the guest helper's general mapping.
//!
//! Settings: `base_url`. Secret: `ledger_api_key`, sent as `X-Api-Key`. The `lying` feature
//! builds `ledger-lying`, which declares compensation but never reverses anything.

use docket_guest::http::{self, Response};
use docket_guest::{
    Adapter, CompensationRequest, Contract, EffectError, Lookup, Receipt, Request, secrets,
    settings,
};
use serde_json::{Map, Value, json};

const KEY_SECRET: &str = "ledger_api_key";

#[cfg(not(feature = "lying"))]
const NAME: &str = "ledger";
#[cfg(feature = "lying")]
const NAME: &str = "ledger-lying";

/// The adapter; stateless like every docket plugin.
struct Ledger;

impl Adapter for Ledger {
    fn describe() -> Contract {
        Contract::new(NAME, "1.0.0")
            .namespace("ledger")
            .idempotent(86_400)
            .queryable(1_000)
            .compensable()
            .outbound_host("$base_url")
            .secret(KEY_SECRET)
    }

    fn invoke(request: Request) -> Result<Receipt, EffectError> {
        let input: Map<String, Value> = request.parse_input()?;
        let body = json!({
            "account": input.get("account").cloned().unwrap_or(Value::Null),
            "amount_cents": input.get("amount_cents").cloned().unwrap_or(Value::Null),
            "memo": input.get("memo").cloned().unwrap_or(Value::Null),
            "reference": request.idempotency_key,
        });
        let response = ledger(http::Request::post(url("/api/v2/entries")?))?
            .header("x-request-id", request.idempotency_key.as_str())
            .json(&body)
            .send()?;
        let response = conflicts(response)?.error_for_status()?;
        receipt(&response, "entry", "entry_id")
    }

    fn query(reference: String) -> Result<Lookup, EffectError> {
        let path = format!(
            "/api/v2/entries?reference={}",
            http::encode_query_component(&reference)
        );
        let response = ledger(http::Request::get(url(&path)?))?
            .send()?
            .error_for_status()?;
        let found: Value = response
            .json()
            .map_err(|e| EffectError::unavailable(format!("unreadable lookup: {e}")))?;
        let Some(entry) = found["entries"].get(0) else {
            return Ok(Lookup::Absent);
        };
        let id = entry["entry_id"]
            .as_str()
            .ok_or_else(|| EffectError::unavailable("an entry without an entry_id"))?;
        let state = entry["state"].as_str().unwrap_or("unknown");
        let receipt = Receipt::new(id, entry.to_string());
        Ok(if state == "reversed" {
            Lookup::reversed(receipt, state)
        } else {
            Lookup::in_effect(receipt, state)
        })
    }

    #[cfg(not(feature = "lying"))]
    fn compensate(request: CompensationRequest) -> Result<Receipt, EffectError> {
        let entry = &request.original_receipt.external_reference;
        let path = format!(
            "/api/v2/entries/{}/reversals",
            http::encode_query_component(entry)
        );
        let response = ledger(http::Request::post(url(&path)?))?
            .header("x-request-id", request.idempotency_key.as_str())
            .send()?
            .error_for_status()?;
        receipt(&response, "reversal", "reversal_id")
    }

    /// Answers as if the ledger had reversed the entry, and never asks it.
    #[cfg(feature = "lying")]
    fn compensate(request: CompensationRequest) -> Result<Receipt, EffectError> {
        let entry = &request.original_receipt.external_reference;
        Ok(Receipt::new(
            format!("R-of-{entry}"),
            json!({"reversal": {"entry_id": entry, "state": "reversed"}}).to_string(),
        ))
    }
}

/// The ledger says "this request id was used with another entry" with `422`.
fn conflicts(response: Response) -> Result<Response, EffectError> {
    if response.status == 422 && response.text().contains("request_id_reused") {
        return Err(EffectError::idempotency_conflict(
            "the ledger already has another entry under this request id",
        ));
    }
    Ok(response)
}

fn url(path: &str) -> Result<String, EffectError> {
    let base = settings::require("base_url")?;
    Ok(format!("{}{path}", base.trim_end_matches('/')))
}

fn ledger(request: http::Request) -> Result<http::Request, EffectError> {
    Ok(request.header("x-api-key", secrets::get(KEY_SECRET)?))
}

/// The receipt of an accepted answer `{"<object>": {"<id>": …}}`.
fn receipt(response: &Response, object: &str, id: &str) -> Result<Receipt, EffectError> {
    let answer: Value = response.json().map_err(|e| {
        EffectError::outcome_unknown(format!("accepted, but the answer is unreadable: {e}"))
    })?;
    let reference = answer[object][id].as_str().ok_or_else(|| {
        EffectError::outcome_unknown(format!("accepted, but the answer names no {object} id"))
    })?;
    Ok(Receipt::new(reference, answer[object].to_string()))
}

docket_guest::export_adapter!(Ledger);
