//! The `legacy-0-2` adapter: built against `docket:plugin@0.2.0` (the frozen package in
//! `wit/deps/docket-plugin-0.2.0`), as every adapter was before 0.3.0. It causes no effect,
//! logs through the 0.2.0 `log` interface, answers lookups as found, and is unavailable for
//! a request whose input says so, so the host's tests exercise each of its calls.

// The generated export of `compensate` takes its flattened request (9 core arguments).
#[allow(clippy::too_many_arguments)]
mod bindings {
    wit_bindgen::generate!({
        world: "docket:plugin/adapter@0.2.0",
        path: "../../wit",
        generate_all,
    });
}

use bindings::docket::plugin0_2_0::log::{Level, write};
use bindings::docket::plugin0_2_0::types::{
    Capabilities, CompensationRequest, CompensationSupport, Contract, EffectError, EffectStatus,
    FoundEffect, Idempotency, Lookup, QuerySupport, Receipt, Request,
};

struct Legacy;

impl bindings::Guest for Legacy {
    fn describe() -> Contract {
        Contract {
            name: "legacy-0-2".into(),
            version: "0.2.0".into(),
            idempotency: Idempotency {
                supported: true,
                retention_seconds: 86_400,
                namespace: "legacy".into(),
            },
            query: QuerySupport {
                supported: true,
                visibility_window_ms: 0,
            },
            compensation: CompensationSupport { supported: true },
            capabilities: Capabilities {
                outbound_hosts: Vec::new(),
                secrets: Vec::new(),
            },
        }
    }

    fn invoke(request: Request) -> Result<Receipt, EffectError> {
        write(Level::Info, &format!("invoked with {}", request.input));
        if request.input.contains("unavailable") {
            return Err(EffectError::Unavailable("try again later".into()));
        }
        Ok(Receipt {
            external_reference: format!("legacy-{}", request.attempt),
            output: format!("{{\"key\":\"{}\"}}", request.idempotency_key),
        })
    }

    fn query(reference: String) -> Result<Lookup, EffectError> {
        Ok(Lookup::Found(FoundEffect {
            receipt: Receipt {
                external_reference: "legacy-1".into(),
                output: format!("{{\"key\":\"{reference}\"}}"),
            },
            status: EffectStatus::InEffect,
            provider_status: "done".into(),
        }))
    }

    fn compensate(request: CompensationRequest) -> Result<Receipt, EffectError> {
        Ok(Receipt {
            external_reference: format!("undo-{}", request.original_receipt.external_reference),
            output: "{}".into(),
        })
    }
}

bindings::export!(Legacy with_types_in bindings);
