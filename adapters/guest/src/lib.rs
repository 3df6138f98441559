//! Helper library for docket plugins: the contract types, the host imports and an HTTP
//! client, so an adapter or handler crate contains only its own logic.
//!
//! An adapter (a component that causes an external side effect) implements [`Adapter`] and
//! exports itself with [`export_adapter!`]; a handler (pure step computation) implements
//! [`Handler`] and uses [`export_handler!`]. Both build as `cdylib` crates for
//! `wasm32-wasip2`.
//!
//! ```text
//! use docket_guest::{Adapter, Contract, EffectError, Receipt, Request};
//!
//! struct Echo;
//!
//! impl Adapter for Echo {
//!     fn describe() -> Contract {
//!         Contract::new("echo", "1.0.0").namespace("echo").idempotent(86_400)
//!     }
//!
//!     fn invoke(request: Request) -> Result<Receipt, EffectError> {
//!         docket_guest::log::info(format!("attempt {}", request.attempt));
//!         Ok(Receipt::new(request.idempotency_key, request.input))
//!     }
//! }
//!
//! docket_guest::export_adapter!(Echo);
//! ```
//!
//! Enable the crate's `adapter` or `handler` feature to match the world the plugin
//! implements (one per plugin crate). The default `json` feature adds serde helpers.
//!
//! A component imports only what it calls: an adapter that never uses [`http`] or
//! [`secrets`] does not import `wasi:http` or `docket:plugin/secrets`, so the host can
//! load it without granting either.

#[doc(hidden)]
pub mod bindings;
pub mod clock;
mod contract;
#[cfg(any(
    feature = "adapter",
    feature = "observing-adapter",
    feature = "full-adapter"
))]
pub mod http;
#[cfg(feature = "json")]
pub mod json;
pub mod log;
#[cfg(any(
    feature = "adapter",
    feature = "observing-adapter",
    feature = "full-adapter"
))]
pub mod secrets;
#[cfg(any(
    feature = "adapter",
    feature = "observing-adapter",
    feature = "full-adapter"
))]
pub mod settings;

pub use bindings::common::docket::plugin0_3_0::types::{
    BatchItem, BatchRequest, Inbound, Observation, ObserveError,
};
pub use bindings::common::docket::plugin0_3_0::types::{
    Capabilities, CompensationRequest, CompensationSupport, Contract, EffectError, EffectStatus,
    FoundEffect, HandlerContract, HandlerError, Idempotency, Json, Lookup, QuerySupport, RateLimit,
    Receipt, Rejection, Request, Unavailability,
};

/// A component that causes an external side effect (the WIT `adapter` world).
///
/// The functions take no `self`: the host may give every call a fresh instance, so an
/// adapter keeps no state between calls.
#[cfg(any(
    feature = "adapter",
    feature = "observing-adapter",
    feature = "full-adapter"
))]
pub trait Adapter {
    /// The declared contract. Must be cheap and deterministic: the host calls it at load
    /// time and records the answer with every attempt.
    fn describe() -> Contract;

    /// Cause the effect once. `request.idempotency_key` must reach the provider.
    fn invoke(request: Request) -> Result<Receipt, EffectError>;

    /// Look up an earlier effect by the idempotency key the host sent with the original
    /// `invoke`, and say where it stands: build the answer with [`Lookup::found`] (or
    /// [`Lookup::in_effect`] / [`Lookup::reversed`]) or [`Lookup::Absent`]. The host also
    /// recovers an uncertain compensation this way, so report a reversed effect as
    /// [`EffectStatus::Reversed`]. The host calls it only when the contract declares query
    /// support; the default refuses.
    fn query(reference: String) -> Result<Lookup, EffectError> {
        let _ = reference;
        Err(EffectError::rejected(
            "query_unsupported",
            "this adapter does not support query by reference",
        ))
    }

    /// Reverse the effect named by `request.original_receipt`, once, and return the
    /// compensation's own receipt. `request.idempotency_key` is the compensation's own key
    /// and must reach the provider; `request.input` is its mapped input and
    /// `request.attempt` counts the compensation's attempts from 1. The host calls it only
    /// when the contract declares compensation support; the default refuses.
    fn compensate(request: CompensationRequest) -> Result<Receipt, EffectError> {
        let _ = request;
        Err(EffectError::rejected(
            "compensation_unsupported",
            "this adapter does not support compensation",
        ))
    }
}

/// An adapter that reads the deliveries its provider posts (webhooks): the WIT
/// `observing-adapter` world's `observer`. Its contract says `observes`. Pure: it reads the
/// delivery and nothing else.
#[cfg(any(feature = "observing-adapter", feature = "full-adapter"))]
pub trait Observer {
    /// The observations one delivery carries, or why it carries none.
    fn observe(delivery: Inbound) -> Result<Vec<Observation>, ObserveError>;
}

/// An adapter that sends many effects in one call (the WIT `full-adapter` world's
/// `batcher`): each item is an effect of its own, with its own key and its own answer. Its
/// contract gives the most items one call takes ([`Contract::batches`]).
#[cfg(feature = "full-adapter")]
pub trait Batcher {
    /// One answer per item, in the items' order; an error of the whole call means no item
    /// has an answer (each is as uncertain as the error says).
    fn invoke_batch(
        request: BatchRequest,
    ) -> Result<Vec<Result<Receipt, EffectError>>, EffectError>;
}

/// Pure step computation (the WIT `handler` world): the same input always gives the same
/// output.
#[cfg(feature = "handler")]
pub trait Handler {
    /// The handler's name and version.
    fn describe() -> HandlerContract;

    /// Compute the step's output (a JSON document) from its mapped input.
    fn run(input: Json) -> Result<Json, HandlerError>;
}

#[cfg(feature = "adapter")]
impl<T: Adapter> bindings::adapter::Guest for T {
    fn describe() -> Contract {
        <T as Adapter>::describe()
    }

    fn invoke(request: Request) -> Result<Receipt, EffectError> {
        <T as Adapter>::invoke(request)
    }

    fn query(reference: String) -> Result<Lookup, EffectError> {
        <T as Adapter>::query(reference)
    }

    fn compensate(request: CompensationRequest) -> Result<Receipt, EffectError> {
        <T as Adapter>::compensate(request)
    }
}

#[cfg(all(feature = "observing-adapter", not(feature = "full-adapter")))]
impl<T: Adapter> bindings::observing_adapter::Guest for T {
    fn describe() -> Contract {
        <T as Adapter>::describe()
    }

    fn invoke(request: Request) -> Result<Receipt, EffectError> {
        <T as Adapter>::invoke(request)
    }

    fn query(reference: String) -> Result<Lookup, EffectError> {
        <T as Adapter>::query(reference)
    }

    fn compensate(request: CompensationRequest) -> Result<Receipt, EffectError> {
        <T as Adapter>::compensate(request)
    }
}

#[cfg(all(feature = "observing-adapter", not(feature = "full-adapter")))]
impl<T: Observer> bindings::observing_adapter::exports::docket::plugin0_3_0::observer::Guest for T {
    fn observe(delivery: Inbound) -> Result<Vec<Observation>, ObserveError> {
        <T as Observer>::observe(delivery)
    }
}

#[cfg(feature = "full-adapter")]
impl<T: Adapter> bindings::full_adapter::Guest for T {
    fn describe() -> Contract {
        <T as Adapter>::describe()
    }

    fn invoke(request: Request) -> Result<Receipt, EffectError> {
        <T as Adapter>::invoke(request)
    }

    fn query(reference: String) -> Result<Lookup, EffectError> {
        <T as Adapter>::query(reference)
    }

    fn compensate(request: CompensationRequest) -> Result<Receipt, EffectError> {
        <T as Adapter>::compensate(request)
    }
}

#[cfg(feature = "full-adapter")]
impl<T: Observer> bindings::full_adapter::exports::docket::plugin0_3_0::observer::Guest for T {
    fn observe(delivery: Inbound) -> Result<Vec<Observation>, ObserveError> {
        <T as Observer>::observe(delivery)
    }
}

#[cfg(feature = "full-adapter")]
impl<T: Batcher> bindings::full_adapter::exports::docket::plugin0_3_0::batcher::Guest for T {
    fn invoke_batch(
        request: BatchRequest,
    ) -> Result<Vec<Result<Receipt, EffectError>>, EffectError> {
        <T as Batcher>::invoke_batch(request)
    }
}

#[cfg(feature = "handler")]
impl<T: Handler> bindings::handler::Guest for T {
    fn describe() -> HandlerContract {
        <T as Handler>::describe()
    }

    fn run(input: Json) -> Result<Json, HandlerError> {
        <T as Handler>::run(input)
    }
}

/// Exports a type implementing [`Adapter`] as the component's `adapter` world.
///
/// Call it once, at the crate root of a `cdylib` crate: `docket_guest::export_adapter!(MyAdapter);`
#[cfg(feature = "adapter")]
#[macro_export]
macro_rules! export_adapter {
    ($ty:ident) => {
        $crate::bindings::adapter::__export_adapter_world!(
            $ty with_types_in $crate::bindings::adapter
        );
    };
}

/// Exports a type implementing [`Adapter`] and [`Observer`] as the component's
/// `observing-adapter` world.
#[cfg(all(feature = "observing-adapter", not(feature = "full-adapter")))]
#[macro_export]
macro_rules! export_observing_adapter {
    ($ty:ident) => {
        $crate::bindings::observing_adapter::__export_observing_adapter_world!(
            $ty with_types_in $crate::bindings::observing_adapter
        );
    };
}

/// Exports a type implementing [`Adapter`], [`Observer`] and [`Batcher`] as the
/// component's `full-adapter` world.
#[cfg(feature = "full-adapter")]
#[macro_export]
macro_rules! export_full_adapter {
    ($ty:ident) => {
        $crate::bindings::full_adapter::__export_full_adapter_world!(
            $ty with_types_in $crate::bindings::full_adapter
        );
    };
}

/// Exports a type implementing [`Handler`] as the component's `handler` world.
///
/// Call it once, at the crate root of a `cdylib` crate: `docket_guest::export_handler!(MyHandler);`
#[cfg(feature = "handler")]
#[macro_export]
macro_rules! export_handler {
    ($ty:ident) => {
        $crate::bindings::handler::__export_handler_world!(
            $ty with_types_in $crate::bindings::handler
        );
    };
}
