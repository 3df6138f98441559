//! Running one call: a fresh store, limits, a deadline, and a typed report.
//!
//! The deadline is a wall-clock `tokio` timeout; the engine's epoch makes running guest
//! code yield every tick, so even a tight loop is cancelled on time. Whatever happens, the
//! report carries the call's redacted log and every egress denial.

use super::Runtime;
use super::bindings::adapter::docket::plugin0_3_0::types as wit;
use super::legacy::{AnyAdapter, AnyAdapterPre};
use super::load::{PreKind, Prepared};
use super::state::{CallEnv, HostState, LogLevel, LogLine, LogSource};
use crate::capabilities::{Grant, Redactor};
use crate::contract::{
    BatchRequest, CompensationRequest, EffectError, EffectRequest, EffectStatus, HandlerError,
    Inbound, Lookup, Observation, ObserveError, PluginReceipt,
};
use std::sync::Arc;
use std::time::{Duration, Instant};
use wasmtime::{Store, Trap};

/// Limits of one call.
#[derive(Debug, Clone, Copy)]
pub struct CallLimits {
    /// Wall-clock time the call may take, instantiation included.
    pub timeout: Duration,
}

impl Default for CallLimits {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(30),
        }
    }
}

/// Why a call ended without the plugin returning a value. Each ends only that call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, serde::Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum CallFailure {
    /// The call outlasted its deadline and was stopped.
    #[error("the plugin did not finish within its {limit_ms} ms deadline and was stopped")]
    Timeout { limit_ms: u64 },
    /// The plugin tried to grow its memory past the cap. Both figures count the host's
    /// reserve for the call's resources besides the plugin's linear memory.
    #[error(
        "the plugin tried to grow its memory so that the call would use {requested_bytes} bytes (its memory and the host's reserve for its resources), over the cap of {cap_bytes} bytes, and was stopped"
    )]
    MemoryCap {
        cap_bytes: usize,
        requested_bytes: usize,
    },
    /// The plugin trapped (a panic, `unreachable`, an out-of-bounds access).
    #[error("the plugin trapped: {message}{}", panic.as_ref().map(|p| format!(" ({p})")).unwrap_or_default())]
    Trap {
        message: String,
        panic: Option<String>,
    },
    /// The plugin held more host resources (streams, `wasi:http` fields, requests) than a
    /// call may, and was stopped.
    #[error("the plugin held more host resources than a call may ({what}) and was stopped")]
    HostResources { what: String },
    /// The component could not be instantiated for this call.
    #[error("the plugin could not be started: {message}")]
    Instantiate { message: String },
    /// The host had no room for another instance (its pool is full): nothing ran, and the
    /// same call may start once another ends.
    #[error("the host had no room to start the plugin: {message}")]
    Capacity { message: String },
    /// The operation does not exist for this kind of component.
    #[error("{message}")]
    NotSupported { message: String },
}

/// What one call returned, with its bounded, redacted log.
#[derive(Debug, Clone)]
pub struct CallReport<T> {
    pub outcome: Result<T, CallFailure>,
    pub log: Vec<LogLine>,
    /// Reasons for every outbound request the host refused during the call.
    pub denials: Vec<String>,
    pub elapsed: Duration,
}

impl<T> CallReport<T> {
    fn not_supported(message: String) -> Self {
        Self {
            outcome: Err(CallFailure::NotSupported { message }),
            log: Vec::new(),
            denials: Vec::new(),
            elapsed: Duration::ZERO,
        }
    }
}

/// Fuel of a call whose time alone is bounded (its deadline): in effect, no metering.
const UNMETERED: u64 = u64::MAX;

impl Runtime {
    /// Runs `f` against a fresh instance of `pre` under `grant`, `env` and `limits`.
    pub(super) async fn call<R>(
        &self,
        pre: &PreKind,
        grant: Arc<Grant>,
        env: CallEnv,
        limits: CallLimits,
        f: impl AsyncFnOnce(&mut Store<HostState>, &PreKind) -> wasmtime::Result<R>,
        redact: impl FnOnce(R, &Redactor) -> R,
    ) -> CallReport<R> {
        self.call_with_fuel(pre, grant, env, limits, UNMETERED, f, redact)
            .await
    }

    /// [`Runtime::call`] with at most `fuel` units of guest work besides the deadline.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn call_with_fuel<R>(
        &self,
        pre: &PreKind,
        grant: Arc<Grant>,
        env: CallEnv,
        limits: CallLimits,
        fuel: u64,
        f: impl AsyncFnOnce(&mut Store<HostState>, &PreKind) -> wasmtime::Result<R>,
        redact: impl FnOnce(R, &Redactor) -> R,
    ) -> CallReport<R> {
        let started = Instant::now();
        let state = HostState::new(
            env,
            grant,
            self.inner.config.memory_cap_bytes,
            limits.timeout,
            &self.inner.config,
            self.inner.connections.clone(),
        );
        let mut store = Store::new(&self.inner.engine, state);
        store.limiter(|s| &mut s.limits);
        store.set_epoch_deadline(1);
        store.epoch_deadline_async_yield_and_update(1);
        store
            .set_fuel(fuel)
            .expect("the engine is configured to consume fuel");

        let result = tokio::time::timeout(limits.timeout, f(&mut store, pre)).await;
        store.data_mut().drain_pipes();
        let outcome = match result {
            Err(_) => Err(CallFailure::Timeout {
                limit_ms: limits.timeout.as_millis() as u64,
            }),
            Ok(Ok(value)) => Ok(redact(value, &store.data().redactor)),
            Ok(Err(e)) => Err(classify(&e, store.data())),
        };
        let state = store.data_mut();
        if let Err(failure) = &outcome {
            let text = state.redactor.redact(&failure.to_string()).into_owned();
            state.push_log(LogLevel::Error, LogSource::Host, &text);
        }
        if state.dropped_lines > 0 {
            let n = state.dropped_lines;
            state.log.push(LogLine {
                level: LogLevel::Warn,
                source: LogSource::Host,
                message: format!("{n} further log lines were dropped"),
            });
        }
        let outcome = outcome.map_err(|f| redact_failure(f, &state.redactor));
        let denials = state.denials();
        if denials.count() > 0 {
            // One line per call, however many requests the guest tried.
            tracing::warn!(
                call = %state.label(),
                refused = denials.count(),
                "outbound requests refused: {}",
                denials.first().unwrap_or_default()
            );
        }
        CallReport {
            outcome,
            log: std::mem::take(&mut state.log),
            denials: denials.into_reasons(),
            elapsed: started.elapsed(),
        }
    }

    /// Calls an adapter's `invoke` once.
    pub async fn invoke(
        &self,
        prepared: &Prepared,
        env: CallEnv,
        limits: CallLimits,
        request: &EffectRequest,
    ) -> CallReport<Result<PluginReceipt, EffectError>> {
        if !matches!(prepared.pre, PreKind::Adapter(_)) {
            return CallReport::not_supported(format!(
                "{} is a handler; only adapters have `invoke`",
                prepared.name()
            ));
        }
        let request = wit::Request {
            idempotency_key: request.idempotency_key.clone(),
            input: request.input.clone(),
            attempt: request.attempt,
        };
        self.call(
            &prepared.pre,
            prepared.grant.clone(),
            env,
            limits,
            async move |store, pre| {
                store.data_mut().identity = Some(request.idempotency_key.clone());
                let instance = adapter_instance(store, pre).await?;
                let result = instance.call_invoke(&mut *store, &request).await?;
                Ok(effect_from_wit(result))
            },
            redact_effect,
        )
        .await
    }

    /// Calls an adapter's `query` for the given stable reference.
    pub async fn query(
        &self,
        prepared: &Prepared,
        env: CallEnv,
        limits: CallLimits,
        reference: &str,
    ) -> CallReport<Result<Lookup, EffectError>> {
        if !matches!(prepared.pre, PreKind::Adapter(_)) {
            return CallReport::not_supported(format!(
                "{} is a handler; only adapters have `query`",
                prepared.name()
            ));
        }
        let reference = reference.to_string();
        self.call(
            &prepared.pre,
            prepared.query_grant.clone(),
            env,
            limits,
            async move |store, pre| {
                store.data_mut().identity = Some(reference.clone());
                let instance = adapter_instance(store, pre).await?;
                let result = instance.call_query(&mut *store, &reference).await?;
                Ok(match result.map(lookup_from_wit) {
                    // A found effect whose evidence is unusable is no answer: ask again later.
                    Ok(Lookup::Found { receipt, .. }) if bounded(&receipt).is_err() => {
                        Err(EffectError::Unavailable {
                            message: bounded(&receipt).unwrap_err(),
                            retry_after_ms: None,
                        })
                    }
                    Ok(found) => Ok(found),
                    Err(e) => Err(effect_error_from_wit(e)),
                })
            },
            |r, red| match r {
                Ok(Lookup::Found {
                    receipt,
                    status,
                    provider_status,
                }) => Ok(Lookup::Found {
                    receipt: redact_receipt(receipt, red),
                    status,
                    provider_status: red.redact(&provider_status).into_owned(),
                }),
                other => redact_effect_err(other, red),
            },
        )
        .await
    }

    /// Calls an adapter's `compensate` once, to reverse `request.original_receipt`. The
    /// answer is the compensation's own receipt; errors are typed as for `invoke`.
    pub async fn compensate(
        &self,
        prepared: &Prepared,
        env: CallEnv,
        limits: CallLimits,
        request: &CompensationRequest,
    ) -> CallReport<Result<PluginReceipt, EffectError>> {
        if !matches!(prepared.pre, PreKind::Adapter(_)) {
            return CallReport::not_supported(format!(
                "{} is a handler; only adapters have `compensate`",
                prepared.name()
            ));
        }
        let request = wit::CompensationRequest {
            idempotency_key: request.idempotency_key.clone(),
            input: request.input.clone(),
            original_receipt: wit::Receipt {
                external_reference: request.original_receipt.external_reference.clone(),
                output: request.original_receipt.output.clone(),
            },
            attempt: request.attempt,
        };
        self.call(
            &prepared.pre,
            prepared.compensate_grant.clone(),
            env,
            limits,
            async move |store, pre| {
                store.data_mut().identity = Some(request.idempotency_key.clone());
                let instance = adapter_instance(store, pre).await?;
                let result = instance.call_compensate(&mut *store, &request).await?;
                Ok(effect_from_wit(result))
            },
            redact_effect,
        )
        .await
    }

    /// Calls an adapter's `invoke-batch` once: one answer per item, in the items' order,
    /// each typed as `invoke`'s; an error of the whole call leaves every item as uncertain
    /// as the error says. An adapter that answers another number of items than it was
    /// given has left them all uncertain.
    pub async fn invoke_batch(
        &self,
        prepared: &Prepared,
        env: CallEnv,
        limits: CallLimits,
        request: &BatchRequest,
    ) -> CallReport<BatchAnswer> {
        let Some(indices) = prepared.batcher.clone() else {
            return CallReport::not_supported(format!(
                "{} exports no `batcher`; only an adapter whose contract gives `batch` takes many items in one call",
                prepared.name()
            ));
        };
        let count = request.items.len();
        let request = wit::BatchRequest {
            batch_key: request.batch_key.clone(),
            items: request
                .items
                .iter()
                .map(|i| wit::BatchItem {
                    idempotency_key: i.idempotency_key.clone(),
                    input: i.input.clone(),
                })
                .collect(),
            attempt: request.attempt,
        };
        self.call(
            &prepared.pre,
            prepared.grant.clone(),
            env,
            limits,
            async move |store, pre| {
                store.data_mut().identity = Some(request.batch_key.clone());
                let PreKind::Adapter(AnyAdapterPre::Current(pre)) = pre else {
                    return Err(wasmtime::format_err!("not an adapter of the current contract"));
                };
                let instance = pre.instance_pre().instantiate_async(&mut *store).await?;
                let batcher = indices.load(&mut *store, &instance)?;
                let result = batcher.call_invoke_batch(&mut *store, &request).await?;
                Ok(match result {
                    Ok(items) if items.len() != count => Err(EffectError::OutcomeUnknown {
                        observation: format!(
                            "the adapter answered {} items of a batch of {count}: each may have happened",
                            items.len()
                        ),
                    }),
                    Ok(items) => Ok(items.into_iter().map(effect_from_wit).collect::<Vec<_>>()),
                    Err(e) => Err(effect_error_from_wit(e)),
                })
            },
            |r, red| match r {
                Ok(items) => Ok(items.into_iter().map(|i| redact_effect(i, red)).collect()),
                Err(e) => Err(e.map_text(|s| red.redact(&s).into_owned())),
            },
        )
        .await
    }

    /// Calls an adapter's `observe` on one delivery its provider posted. It runs with
    /// nothing granted (reading a delivery needs no network and no secret), under the
    /// usual limits.
    pub async fn observe(
        &self,
        prepared: &Prepared,
        env: CallEnv,
        limits: CallLimits,
        delivery: &Inbound,
    ) -> CallReport<Result<Vec<Observation>, ObserveError>> {
        let Some(indices) = prepared.observer.clone() else {
            return CallReport::not_supported(format!(
                "{} exports no `observer`; only an adapter whose contract says `observes` reads its provider's deliveries",
                prepared.name()
            ));
        };
        let inbound = wit::Inbound {
            method: delivery.method.clone(),
            path: delivery.path.clone(),
            headers: delivery.headers.clone(),
            body: delivery.body.clone(),
        };
        self.call(
            &prepared.pre,
            Arc::new(Grant::none()),
            env,
            limits,
            async move |store, pre| {
                let PreKind::Adapter(AnyAdapterPre::Current(pre)) = pre else {
                    return Err(wasmtime::format_err!("not an adapter of the current contract"));
                };
                let instance = pre.instance_pre().instantiate_async(&mut *store).await?;
                let observer = indices.load(&mut *store, &instance)?;
                let result = observer.call_observe(&mut *store, &inbound).await?;
                Ok(match result {
                    Ok(found) if found.len() > MAX_OBSERVATIONS => Err(ObserveError::Malformed {
                        message: format!(
                            "the adapter read {} observations from one delivery, over the limit of {MAX_OBSERVATIONS}",
                            found.len()
                        ),
                    }),
                    Ok(found) => Ok(found.into_iter().map(observation_from_wit).collect()),
                    Err(wit::ObserveError::Unrecognized(message)) => {
                        Err(ObserveError::Unrecognized {
                            message: cut_text(message),
                        })
                    }
                    Err(wit::ObserveError::Malformed(message)) => Err(ObserveError::Malformed {
                        message: cut_text(message),
                    }),
                })
            },
            |r, _| r,
        )
        .await
    }

    /// Calls a handler's `run` on a JSON input.
    pub async fn run_handler(
        &self,
        prepared: &Prepared,
        env: CallEnv,
        limits: CallLimits,
        input: &str,
    ) -> CallReport<Result<String, HandlerError>> {
        let PreKind::Handler(_) = &prepared.pre else {
            return CallReport::not_supported(format!(
                "{} is an adapter; only handlers have `run`",
                prepared.name()
            ));
        };
        let input = input.to_string();
        self.call(
            &prepared.pre,
            prepared.grant.clone(),
            env,
            limits,
            async move |store, pre| {
                let PreKind::Handler(pre) = pre else {
                    unreachable!("checked above")
                };
                let instance = pre.instantiate_async(&mut *store).await?;
                let result = instance.call_run(&mut *store, &input).await?;
                Ok(match result {
                    Ok(out) if out.len() > MAX_OUTPUT_BYTES => Err(HandlerError::Failed {
                        message: format!(
                            "the handler's output has {} bytes, over the limit of {MAX_OUTPUT_BYTES}",
                            out.len()
                        ),
                    }),
                    Ok(out) => Ok(out),
                    Err(wit::HandlerError::InvalidInput(message)) => Err(HandlerError::InvalidInput {
                        message: cut_text(message),
                    }),
                    Err(wit::HandlerError::Failed(message)) => Err(HandlerError::Failed {
                        message: cut_text(message),
                    }),
                })
            },
            |r, red| match r {
                Ok(out) => Ok(red.redact(&out).into_owned()),
                Err(HandlerError::InvalidInput { message }) => Err(HandlerError::InvalidInput {
                    message: red.redact(&message).into_owned(),
                }),
                Err(HandlerError::Failed { message }) => Err(HandlerError::Failed {
                    message: red.redact(&message).into_owned(),
                }),
            },
        )
        .await
    }
}

pub(super) async fn adapter_instance(
    store: &mut Store<HostState>,
    pre: &PreKind,
) -> wasmtime::Result<AnyAdapter> {
    match pre {
        PreKind::Adapter(pre) => pre.instantiate_async(&mut *store).await,
        PreKind::Handler(_) => Err(wasmtime::format_err!("not an adapter")),
    }
}

/// Turns a wasmtime error into the failure a caller can act on.
fn classify(error: &wasmtime::Error, state: &HostState) -> CallFailure {
    if let Some(requested) = state.limits.refused {
        return CallFailure::MemoryCap {
            cap_bytes: state.limits.memory_cap,
            requested_bytes: requested,
        };
    }
    if let Some(trap) = error.downcast_ref::<Trap>() {
        if *trap == Trap::Interrupt {
            return CallFailure::Timeout { limit_ms: 0 };
        }
        let stderr = String::from_utf8_lossy(&state.stderr.contents()).into_owned();
        let panic = stderr
            .lines()
            .skip_while(|l| !l.contains("panicked at"))
            .take(3)
            .collect::<Vec<_>>()
            .join(" ");
        return CallFailure::Trap {
            message: trap.to_string(),
            panic: (!panic.is_empty()).then_some(panic),
        };
    }
    if let Some(wasmtime::component::ResourceTableError::Full) =
        error.downcast_ref::<wasmtime::component::ResourceTableError>()
    {
        return CallFailure::HostResources {
            what: format!(
                "more than {} streams, HTTP fields, requests and other resources at once",
                super::state::MAX_TABLE_ENTRIES
            ),
        };
    }
    if let Some(
        e @ (wasmtime_wasi_http::FieldMapError::TotalSizeTooBig
        | wasmtime_wasi_http::FieldMapError::TooManyFields),
    ) = error.downcast_ref::<wasmtime_wasi_http::FieldMapError>()
    {
        return CallFailure::HostResources {
            what: format!(
                "HTTP fields over {} bytes: {e}",
                super::state::MAX_FIELDS_BYTES
            ),
        };
    }
    if error.is::<wasmtime::PoolConcurrencyLimitError>() {
        return CallFailure::Capacity {
            message: format!("{error:#}"),
        };
    }
    CallFailure::Instantiate {
        message: format!("{error:#}"),
    }
}

fn redact_failure(failure: CallFailure, red: &Redactor) -> CallFailure {
    let r = |s: String| red.redact(&s).into_owned();
    match failure {
        CallFailure::Trap { message, panic } => CallFailure::Trap {
            message: r(message),
            panic: panic.map(r),
        },
        CallFailure::Instantiate { message } => CallFailure::Instantiate {
            message: r(message),
        },
        CallFailure::NotSupported { message } => CallFailure::NotSupported {
            message: r(message),
        },
        other => other,
    }
}

/// The most bytes of a receipt's or a handler's output a plugin may return.
pub const MAX_OUTPUT_BYTES: usize = 64 * 1024;
/// The most bytes of an external reference.
pub const MAX_REFERENCE_BYTES: usize = 1024;
/// The most bytes of an error message or observation kept (longer text is cut).
pub const MAX_TEXT_BYTES: usize = 4096;

/// Why a receipt is unusable as evidence, if it is.
pub(crate) fn bounded(r: &PluginReceipt) -> Result<(), String> {
    if r.output.len() > MAX_OUTPUT_BYTES {
        return Err(format!(
            "the adapter's receipt output has {} bytes, over the limit of {MAX_OUTPUT_BYTES}",
            r.output.len()
        ));
    }
    if r.external_reference.len() > MAX_REFERENCE_BYTES {
        return Err(format!(
            "the adapter's external reference has {} bytes, over the limit of {MAX_REFERENCE_BYTES}",
            r.external_reference.len()
        ));
    }
    Ok(())
}

/// `text` cut to [`MAX_TEXT_BYTES`] on a character boundary.
pub(crate) fn cut_text(mut text: String) -> String {
    if text.len() > MAX_TEXT_BYTES {
        let mut end = MAX_TEXT_BYTES;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    text
}

/// `text` cut to at most `max` bytes on a character boundary, marked when cut.
pub(crate) fn cut_to(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// An effect's result: an oversized receipt says the effect was accepted but gives no
/// usable evidence of it, so the outcome is unknown (recovery asks the provider again);
/// texts are cut.
fn effect_from_wit(
    result: Result<wit::Receipt, wit::EffectError>,
) -> Result<PluginReceipt, EffectError> {
    match result {
        Ok(r) => {
            let receipt = receipt_from_wit(r);
            match bounded(&receipt) {
                Ok(()) => Ok(receipt),
                Err(why) => Err(EffectError::OutcomeUnknown {
                    observation: format!(
                        "{why}: the effect may have happened, and this receipt cannot show it"
                    ),
                }),
            }
        }
        Err(e) => Err(effect_error_from_wit(e)),
    }
}

/// Most observations one delivery may carry.
const MAX_OBSERVATIONS: usize = 100;

fn observation_from_wit(o: wit::Observation) -> Observation {
    Observation {
        external_reference: o.external_reference.map(cut_text),
        idempotency_key: o.idempotency_key.map(cut_text),
        event_id: o.event_id.map(cut_text),
        status: match o.status {
            wit::EffectStatus::InEffect => EffectStatus::InEffect,
            wit::EffectStatus::Reversed => EffectStatus::Reversed,
            wit::EffectStatus::Refused => EffectStatus::Refused,
        },
        provider_status: cut_text(o.provider_status),
        observed_at_ms: o.observed_at_ms,
        output: o.output,
    }
}

pub(super) fn receipt_from_wit(r: wit::Receipt) -> PluginReceipt {
    PluginReceipt {
        external_reference: r.external_reference,
        output: r.output,
    }
}

fn lookup_from_wit(l: wit::Lookup) -> Lookup {
    match l {
        wit::Lookup::Found(found) => Lookup::Found {
            receipt: receipt_from_wit(found.receipt),
            status: match found.status {
                wit::EffectStatus::InEffect => EffectStatus::InEffect,
                wit::EffectStatus::Reversed => EffectStatus::Reversed,
                wit::EffectStatus::Refused => EffectStatus::Refused,
            },
            // Written into timeline text: as bounded as any other guest text.
            provider_status: cut_text(found.provider_status),
        },
        wit::Lookup::Absent => Lookup::Absent,
    }
}

pub(super) fn effect_error_from_wit(e: wit::EffectError) -> EffectError {
    effect_error_texts(e).map_text(cut_text)
}

fn effect_error_texts(e: wit::EffectError) -> EffectError {
    match e {
        wit::EffectError::Rejected(r) => EffectError::Rejected {
            code: r.code,
            message: r.message,
        },
        wit::EffectError::Unauthorized(message) => EffectError::Unauthorized { message },
        wit::EffectError::RateLimited(r) => EffectError::RateLimited {
            retry_after_ms: r.retry_after_ms,
            message: r.message,
        },
        wit::EffectError::Unavailable(u) => EffectError::Unavailable {
            message: u.message,
            retry_after_ms: u.retry_after_ms,
        },
        wit::EffectError::NotSent(message) => EffectError::NotSent { message },
        wit::EffectError::IdempotencyConflict(message) => {
            EffectError::IdempotencyConflict { message }
        }
        wit::EffectError::OutcomeUnknown(observation) => {
            EffectError::OutcomeUnknown { observation }
        }
    }
}

fn redact_receipt(r: PluginReceipt, red: &Redactor) -> PluginReceipt {
    PluginReceipt {
        external_reference: red.redact(&r.external_reference).into_owned(),
        output: red.redact(&r.output).into_owned(),
    }
}

/// What an `invoke-batch` call answers: each item's answer in order, or the whole call's
/// error.
pub type BatchAnswer = Result<Vec<Result<PluginReceipt, EffectError>>, EffectError>;

fn redact_effect_err<T>(r: Result<T, EffectError>, red: &Redactor) -> Result<T, EffectError> {
    r.map_err(|e| e.map_text(|s| red.redact(&s).into_owned()))
}

fn redact_effect(
    r: Result<PluginReceipt, EffectError>,
    red: &Redactor,
) -> Result<PluginReceipt, EffectError> {
    redact_effect_err(r.map(|receipt| redact_receipt(receipt, red)), red)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A lookup's provider status is written into timeline text: a guest's megabyte is cut
    /// like every other text it returns.
    #[test]
    fn a_lookups_provider_status_is_cut() {
        let found = wit::Lookup::Found(wit::FoundEffect {
            receipt: wit::Receipt {
                external_reference: "ref".into(),
                output: "{}".into(),
            },
            status: wit::EffectStatus::InEffect,
            provider_status: "é".repeat(1 << 20),
        });
        let Lookup::Found {
            provider_status, ..
        } = lookup_from_wit(found)
        else {
            panic!("found stays found");
        };
        assert!(provider_status.len() <= MAX_TEXT_BYTES + '…'.len_utf8());
        assert!(provider_status.ends_with('…'));
    }
}
