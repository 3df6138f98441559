//! The host's clock: the one that drives leases, backoff and deadlines, so tests can move
//! it. Prefer it to `wasi:clocks/wall-clock` for anything recorded.

/// Milliseconds since the Unix epoch, UTC, as the host sees it.
pub fn now_ms() -> u64 {
    crate::bindings::common::docket::plugin0_3_0::clock::now_ms()
}
