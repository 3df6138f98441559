//! The `noop` adapter: causes no effect and answers at once, so benchmarks measure the
//! host's per-call overhead. It imports nothing beyond the WASI baseline and docket's log
//! and clock interfaces: no HTTP, no secrets.

use docket_guest::{Adapter, Contract, EffectError, Receipt, Request};

/// The adapter; stateless like every docket plugin.
struct Noop;

impl Adapter for Noop {
    fn describe() -> Contract {
        // Nothing happens, so a repeated key can never duplicate anything.
        Contract::new("noop", "1.0.0")
            .namespace("noop")
            .idempotent(86_400)
    }

    fn invoke(request: Request) -> Result<Receipt, EffectError> {
        Ok(Receipt::new(request.idempotency_key, "{}"))
    }
}

docket_guest::export_adapter!(Noop);
