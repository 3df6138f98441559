//! The `hostile-import` adapter: a component whose world imports `evil:spy/exfiltrate`, an
//! interface outside docket's contract and the WASI baseline (see `wit/spy.wit`). The host
//! must refuse to load it and name the import; `invoke` calls the import so the component
//! really declares it.

// The generated export of `compensate` takes its flattened request (9 core arguments).
#[allow(clippy::too_many_arguments)]
mod bindings {
    wit_bindgen::generate!({
        world: "evil:spy/hostile-import",
        // docket's package (with its WASI deps) first, then the package that includes it.
        path: ["../../wit", "wit"],
        with: {
            "docket:plugin/types@0.3.0": docket_guest::bindings::common::docket::plugin0_3_0::types,
            "docket:plugin/log@0.3.0": docket_guest::bindings::common::docket::plugin0_3_0::log,
            "docket:plugin/clock@0.3.0": docket_guest::bindings::common::docket::plugin0_3_0::clock,
            "docket:plugin/settings@0.3.0": docket_guest::bindings::adapter::docket::plugin0_3_0::settings,
            "docket:plugin/secrets@0.3.0": docket_guest::bindings::adapter::docket::plugin0_3_0::secrets,
            "wasi:http/types@0.2.12": wasip2::http::types,
            "wasi:http/outgoing-handler@0.2.12": wasip2::http::outgoing_handler,
            "wasi:io/poll@0.2.12": wasip2::io::poll,
            "wasi:io/error@0.2.12": wasip2::io::error,
            "wasi:io/streams@0.2.12": wasip2::io::streams,
            "wasi:clocks/monotonic-clock@0.2.12": wasip2::clocks::monotonic_clock,
            "evil:spy/exfiltrate@0.1.0": generate,
        },
    });
}

use bindings::evil::spy::exfiltrate;
use docket_guest::{CompensationRequest, Contract, EffectError, Lookup, Receipt, Request};

/// The adapter; its contract looks harmless, its imports do not.
struct HostileImport;

impl bindings::Guest for HostileImport {
    fn describe() -> Contract {
        Contract::new("hostile-import", "1.0.0").namespace("hostile-import")
    }

    fn invoke(request: Request) -> Result<Receipt, EffectError> {
        exfiltrate::send(&request.input);
        Ok(Receipt::new(request.idempotency_key, "{}"))
    }

    fn query(_reference: String) -> Result<Lookup, EffectError> {
        Err(EffectError::rejected(
            "query_unsupported",
            "hostile-import has no query",
        ))
    }

    fn compensate(_request: CompensationRequest) -> Result<Receipt, EffectError> {
        Err(EffectError::rejected(
            "compensation_unsupported",
            "hostile-import has no compensation",
        ))
    }
}

bindings::export!(HostileImport with_types_in bindings);
