//! Components built against `docket:plugin@0.2.0`: their imports are served by the
//! current implementations, and their exports are called through the 0.2.0 bindings and
//! mapped onto the current types, so the rest of the runtime sees one kind of adapter and
//! one kind of handler whichever version a component was built for.

use super::bindings::adapter::docket::plugin0_3_0::{clock, log, secrets, settings, types};
use super::bindings::adapter::{Adapter, AdapterPre};
use super::bindings::adapter_0_2::docket::plugin0_2_0 as v2;
use super::bindings::adapter_0_2::{Adapter as AdapterV2, AdapterPre as AdapterPreV2};
use super::bindings::handler::{Handler, HandlerPre};
use super::bindings::handler_0_2::{Handler as HandlerV2, HandlerPre as HandlerPreV2};
use super::state::HostState;
use wasmtime::Store;
use wasmtime::component::{HasSelf, Linker};

/// An adapter ready to instantiate, of either version.
pub(super) enum AnyAdapterPre {
    Current(AdapterPre<HostState>),
    V0_2(AdapterPreV2<HostState>),
}

/// An instantiated adapter, of either version; its calls answer in the current types.
pub(super) enum AnyAdapter {
    Current(Adapter),
    V0_2(AdapterV2),
}

/// A handler ready to instantiate, of either version.
pub(super) enum AnyHandlerPre {
    Current(HandlerPre<HostState>),
    V0_2(HandlerPreV2<HostState>),
}

/// An instantiated handler, of either version.
pub(super) enum AnyHandler {
    Current(Handler),
    V0_2(HandlerV2),
}

impl AnyAdapterPre {
    pub async fn instantiate_async(
        &self,
        store: &mut Store<HostState>,
    ) -> wasmtime::Result<AnyAdapter> {
        Ok(match self {
            AnyAdapterPre::Current(pre) => AnyAdapter::Current(pre.instantiate_async(store).await?),
            AnyAdapterPre::V0_2(pre) => AnyAdapter::V0_2(pre.instantiate_async(store).await?),
        })
    }
}

impl AnyHandlerPre {
    pub async fn instantiate_async(
        &self,
        store: &mut Store<HostState>,
    ) -> wasmtime::Result<AnyHandler> {
        Ok(match self {
            AnyHandlerPre::Current(pre) => AnyHandler::Current(pre.instantiate_async(store).await?),
            AnyHandlerPre::V0_2(pre) => AnyHandler::V0_2(pre.instantiate_async(store).await?),
        })
    }
}

impl AnyAdapter {
    pub async fn call_describe(
        &self,
        store: &mut Store<HostState>,
    ) -> wasmtime::Result<types::Contract> {
        Ok(match self {
            AnyAdapter::Current(a) => a.call_describe(store).await?,
            AnyAdapter::V0_2(a) => contract(a.call_describe(store).await?),
        })
    }

    pub async fn call_invoke(
        &self,
        store: &mut Store<HostState>,
        request: &types::Request,
    ) -> wasmtime::Result<Result<types::Receipt, types::EffectError>> {
        Ok(match self {
            AnyAdapter::Current(a) => a.call_invoke(store, request).await?,
            AnyAdapter::V0_2(a) => {
                let request = v2::types::Request {
                    idempotency_key: request.idempotency_key.clone(),
                    input: request.input.clone(),
                    attempt: request.attempt,
                };
                effect(a.call_invoke(store, &request).await?)
            }
        })
    }

    pub async fn call_query(
        &self,
        store: &mut Store<HostState>,
        reference: &str,
    ) -> wasmtime::Result<Result<types::Lookup, types::EffectError>> {
        Ok(match self {
            AnyAdapter::Current(a) => a.call_query(store, reference).await?,
            AnyAdapter::V0_2(a) => match a.call_query(store, reference).await? {
                Ok(v2::types::Lookup::Found(f)) => Ok(types::Lookup::Found(types::FoundEffect {
                    receipt: receipt(f.receipt),
                    status: match f.status {
                        v2::types::EffectStatus::InEffect => types::EffectStatus::InEffect,
                        v2::types::EffectStatus::Reversed => types::EffectStatus::Reversed,
                    },
                    provider_status: f.provider_status,
                })),
                Ok(v2::types::Lookup::Absent) => Ok(types::Lookup::Absent),
                Err(e) => Err(effect_error(e)),
            },
        })
    }

    pub async fn call_compensate(
        &self,
        store: &mut Store<HostState>,
        request: &types::CompensationRequest,
    ) -> wasmtime::Result<Result<types::Receipt, types::EffectError>> {
        Ok(match self {
            AnyAdapter::Current(a) => a.call_compensate(store, request).await?,
            AnyAdapter::V0_2(a) => {
                let request = v2::types::CompensationRequest {
                    idempotency_key: request.idempotency_key.clone(),
                    input: request.input.clone(),
                    original_receipt: v2::types::Receipt {
                        external_reference: request.original_receipt.external_reference.clone(),
                        output: request.original_receipt.output.clone(),
                    },
                    attempt: request.attempt,
                };
                effect(a.call_compensate(store, &request).await?)
            }
        })
    }
}

impl AnyHandler {
    pub async fn call_describe(
        &self,
        store: &mut Store<HostState>,
    ) -> wasmtime::Result<types::HandlerContract> {
        Ok(match self {
            AnyHandler::Current(h) => h.call_describe(store).await?,
            AnyHandler::V0_2(h) => {
                let c = h.call_describe(store).await?;
                types::HandlerContract {
                    name: c.name,
                    version: c.version,
                }
            }
        })
    }

    pub async fn call_run(
        &self,
        store: &mut Store<HostState>,
        input: &String,
    ) -> wasmtime::Result<Result<String, types::HandlerError>> {
        Ok(match self {
            AnyHandler::Current(h) => h.call_run(store, input).await?,
            AnyHandler::V0_2(h) => h.call_run(store, input).await?.map_err(|e| match e {
                v2::types::HandlerError::InvalidInput(m) => types::HandlerError::InvalidInput(m),
                v2::types::HandlerError::Failed(m) => types::HandlerError::Failed(m),
            }),
        })
    }
}

/// A 0.2.0 contract: it neither observes nor batches.
fn contract(c: v2::types::Contract) -> types::Contract {
    types::Contract {
        name: c.name,
        version: c.version,
        idempotency: types::Idempotency {
            supported: c.idempotency.supported,
            retention_seconds: c.idempotency.retention_seconds,
            namespace: c.idempotency.namespace,
        },
        query: types::QuerySupport {
            supported: c.query.supported,
            visibility_window_ms: c.query.visibility_window_ms,
        },
        compensation: types::CompensationSupport {
            supported: c.compensation.supported,
        },
        capabilities: types::Capabilities {
            outbound_hosts: c.capabilities.outbound_hosts,
            secrets: c.capabilities.secrets,
        },
        observes: false,
        batch: None,
    }
}

fn receipt(r: v2::types::Receipt) -> types::Receipt {
    types::Receipt {
        external_reference: r.external_reference,
        output: r.output,
    }
}

fn effect(
    r: Result<v2::types::Receipt, v2::types::EffectError>,
) -> Result<types::Receipt, types::EffectError> {
    r.map(receipt).map_err(effect_error)
}

/// A 0.2.0 error: `unavailable` carried no retry-after.
fn effect_error(e: v2::types::EffectError) -> types::EffectError {
    use types::EffectError as E;
    use v2::types::EffectError as Old;
    match e {
        Old::Rejected(r) => E::Rejected(types::Rejection {
            code: r.code,
            message: r.message,
        }),
        Old::Unauthorized(m) => E::Unauthorized(m),
        Old::RateLimited(r) => E::RateLimited(types::RateLimit {
            retry_after_ms: r.retry_after_ms,
            message: r.message,
        }),
        Old::Unavailable(message) => E::Unavailable(types::Unavailability {
            message,
            retry_after_ms: None,
        }),
        Old::NotSent(m) => E::NotSent(m),
        Old::IdempotencyConflict(m) => E::IdempotencyConflict(m),
        Old::OutcomeUnknown(m) => E::OutcomeUnknown(m),
    }
}

/// Links the 0.2.0 host interfaces every component may import, served by the current
/// implementations.
pub(super) fn add_to_linker(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    v2::log::add_to_linker::<HostState, HasSelf<HostState>>(linker, |s| s)?;
    v2::clock::add_to_linker::<HostState, HasSelf<HostState>>(linker, |s| s)?;
    v2::settings::add_to_linker::<HostState, HasSelf<HostState>>(linker, |s| s)?;
    v2::types::add_to_linker::<HostState, HasSelf<HostState>>(linker, |s| s)?;
    Ok(())
}

/// Links 0.2.0's `secrets` (when the grant names secrets).
pub(super) fn add_secrets(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    v2::secrets::add_to_linker::<HostState, HasSelf<HostState>>(linker, |s| s)
}

/// Links 0.2.0's `secrets` answering every name `not-granted` (for `describe()`).
pub(super) fn add_no_secrets(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    v2::secrets::add_to_linker::<HostState, NoSecrets>(linker, |_| NoSecrets)
}

/// 0.2.0's `secrets` during `describe()`: no name is granted.
struct NoSecrets;

impl wasmtime::component::HasData for NoSecrets {
    type Data<'a> = NoSecrets;
}

impl v2::secrets::Host for NoSecrets {
    fn get(&mut self, name: String) -> Result<String, v2::secrets::SecretError> {
        Err(v2::secrets::SecretError::NotGranted(name))
    }
}

impl v2::log::Host for HostState {
    fn write(&mut self, level: v2::log::Level, message: String) {
        let level = match level {
            v2::log::Level::Trace => log::Level::Trace,
            v2::log::Level::Debug => log::Level::Debug,
            v2::log::Level::Info => log::Level::Info,
            v2::log::Level::Warn => log::Level::Warn,
            v2::log::Level::Error => log::Level::Error,
        };
        log::Host::write(self, level, message);
    }
}

impl v2::clock::Host for HostState {
    fn now_ms(&mut self) -> u64 {
        clock::Host::now_ms(self)
    }
}

impl v2::settings::Host for HostState {
    fn get(&mut self, name: String) -> Option<String> {
        settings::Host::get(self, name)
    }
}

impl v2::secrets::Host for HostState {
    fn get(&mut self, name: String) -> Result<String, v2::secrets::SecretError> {
        secrets::Host::get(self, name).map_err(|e| match e {
            secrets::SecretError::NotGranted(n) => v2::secrets::SecretError::NotGranted(n),
            secrets::SecretError::NotFound(n) => v2::secrets::SecretError::NotFound(n),
        })
    }
}

impl v2::types::Host for HostState {}
