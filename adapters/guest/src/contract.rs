//! Constructors for the contract types, so plugins do not spell out every record field.

use crate::{
    Capabilities, CompensationSupport, Contract, EffectError, EffectStatus, FoundEffect,
    HandlerContract, HandlerError, Idempotency, Lookup, QuerySupport, RateLimit, Receipt,
    Rejection, Unavailability,
};

impl Contract {
    /// A contract that promises nothing: no idempotency, no query, no compensation, no
    /// capabilities, and an empty idempotency namespace. Add claims with the builder methods.
    pub fn new(name: impl Into<String>, version: impl Into<String>) -> Self {
        Contract {
            name: name.into(),
            version: version.into(),
            idempotency: Idempotency {
                supported: false,
                retention_seconds: 0,
                namespace: String::new(),
            },
            query: QuerySupport {
                supported: false,
                visibility_window_ms: 0,
            },
            compensation: CompensationSupport { supported: false },
            capabilities: Capabilities {
                outbound_hosts: Vec::new(),
                secrets: Vec::new(),
            },
            observes: false,
            batch: None,
        }
    }

    /// Claims that the adapter reads its provider's deliveries: it implements
    /// [`crate::Observer`] and is exported with `export_observing_adapter!`.
    pub fn observes(mut self) -> Self {
        self.observes = true;
        self
    }

    /// Claims that the adapter sends up to `max_items` effects in one `invoke-batch` call:
    /// it implements [`crate::Batcher`] and is exported with `export_full_adapter!`.
    pub fn batches(mut self, max_items: u32) -> Self {
        self.batch = Some(max_items);
        self
    }

    /// Sets the deduplication domain (typically the provider and account). The host derives
    /// the external key from it, so versions that share a namespace share keys.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.idempotency.namespace = namespace.into();
        self
    }

    /// Claims that the provider deduplicates requests under one key for `retention_seconds`.
    pub fn idempotent(mut self, retention_seconds: u64) -> Self {
        self.idempotency.supported = true;
        self.idempotency.retention_seconds = retention_seconds;
        self
    }

    /// Claims query by reference; a new effect may stay invisible for `visibility_window_ms`.
    pub fn queryable(mut self, visibility_window_ms: u64) -> Self {
        self.query.supported = true;
        self.query.visibility_window_ms = visibility_window_ms;
        self
    }

    /// Claims that `compensate` can undo an effect.
    pub fn compensable(mut self) -> Self {
        self.compensation.supported = true;
        self
    }

    /// Asks for an outbound HTTP destination (`scheme://host:port`, `host:port`, or `$setting`
    /// naming a setting whose value is the destination's base URL).
    pub fn outbound_host(mut self, host: impl Into<String>) -> Self {
        self.capabilities.outbound_hosts.push(host.into());
        self
    }

    /// Asks for a secret by name.
    pub fn secret(mut self, name: impl Into<String>) -> Self {
        self.capabilities.secrets.push(name.into());
        self
    }
}

impl HandlerContract {
    /// A handler's name and version.
    pub fn new(name: impl Into<String>, version: impl Into<String>) -> Self {
        HandlerContract {
            name: name.into(),
            version: version.into(),
        }
    }
}

impl Receipt {
    /// Evidence of an effect: the provider's identifier and a JSON output for later steps.
    pub fn new(external_reference: impl Into<String>, output: impl Into<String>) -> Self {
        Receipt {
            external_reference: external_reference.into(),
            output: output.into(),
        }
    }
}

impl Lookup {
    /// The provider knows the effect: its evidence, where it stands, and the provider's own
    /// word for its state (e.g. `"delivered"`, `"cancelled"`), which the host records as is.
    pub fn found(
        receipt: Receipt,
        status: EffectStatus,
        provider_status: impl Into<String>,
    ) -> Self {
        Lookup::Found(FoundEffect {
            receipt,
            status,
            provider_status: provider_status.into(),
        })
    }

    /// The provider knows the effect and it still stands.
    pub fn in_effect(receipt: Receipt, provider_status: impl Into<String>) -> Self {
        Lookup::found(receipt, EffectStatus::InEffect, provider_status)
    }

    /// The provider knows the effect and it was reversed (a compensation took effect).
    pub fn reversed(receipt: Receipt, provider_status: impl Into<String>) -> Self {
        Lookup::found(receipt, EffectStatus::Reversed, provider_status)
    }
}

impl EffectError {
    /// Invalid input or a permanent refusal: the host ends the step and never retries.
    pub fn rejected(code: impl Into<String>, message: impl Into<String>) -> Self {
        EffectError::Rejected(Rejection {
            code: code.into(),
            message: message.into(),
        })
    }

    /// Credentials or policy refused: the host blocks the step for review.
    pub fn unauthorized(message: impl Into<String>) -> Self {
        EffectError::Unauthorized(message.into())
    }

    /// Rate limited, nothing created: the host retries after `retry_after_ms`.
    pub fn rate_limited(retry_after_ms: u64, message: impl Into<String>) -> Self {
        EffectError::RateLimited(RateLimit {
            retry_after_ms,
            message: message.into(),
        })
    }

    /// Temporarily unavailable, nothing created: the host retries with backoff.
    pub fn unavailable(message: impl Into<String>) -> Self {
        EffectError::Unavailable(Unavailability {
            message: message.into(),
            retry_after_ms: None,
        })
    }

    /// Temporarily unavailable, nothing created, and the provider asked to wait
    /// `retry_after_ms`: the host retries no sooner.
    pub fn unavailable_for(retry_after_ms: u64, message: impl Into<String>) -> Self {
        EffectError::Unavailable(Unavailability {
            message: message.into(),
            retry_after_ms: Some(retry_after_ms),
        })
    }

    /// The request never left, so a retry cannot duplicate anything.
    pub fn not_sent(message: impl Into<String>) -> Self {
        EffectError::NotSent(message.into())
    }

    /// The provider saw this key with a different request: a person must review.
    pub fn idempotency_conflict(message: impl Into<String>) -> Self {
        EffectError::IdempotencyConflict(message.into())
    }

    /// The request may have been acted on but no answer arrived; the host recovers by the
    /// contract (query, same-key retry, or review).
    pub fn outcome_unknown(message: impl Into<String>) -> Self {
        EffectError::OutcomeUnknown(message.into())
    }
}

impl HandlerError {
    /// The input does not satisfy the handler's expectations; retrying cannot help.
    pub fn invalid_input(message: impl Into<String>) -> Self {
        HandlerError::InvalidInput(message.into())
    }

    /// The computation failed for another reason.
    pub fn failed(message: impl Into<String>) -> Self {
        HandlerError::Failed(message.into())
    }
}
