//! JSON input and output helpers (feature `json`).
//!
//! A malformed input is the caller's fault, so [`InputError`] converts to `rejected`
//! (adapters) or `invalid-input` (handlers) with serde's description of what was wrong.

use core::fmt;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::{CompensationRequest, EffectError, HandlerError, Request};

pub use serde_json;

/// The input is not the JSON document the plugin expects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputError {
    message: String,
}

impl InputError {
    /// An input error with a message that names the offending field or value.
    pub fn new(message: impl Into<String>) -> Self {
        InputError {
            message: message.into(),
        }
    }

    /// What was wrong with the input.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for InputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for InputError {}

impl From<InputError> for EffectError {
    fn from(err: InputError) -> Self {
        EffectError::rejected("invalid_input", err.message)
    }
}

impl From<InputError> for HandlerError {
    fn from(err: InputError) -> Self {
        HandlerError::InvalidInput(err.message)
    }
}

/// The output could not be serialized (a bug in the plugin, not in its input).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputError {
    message: String,
}

impl fmt::Display for OutputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for OutputError {}

impl From<OutputError> for HandlerError {
    fn from(err: OutputError) -> Self {
        HandlerError::Failed(err.message)
    }
}

/// Parses `input` into `T`, describing what was wrong (e.g. ``missing field `recipient` ``).
pub fn parse<T: DeserializeOwned>(input: &str) -> Result<T, InputError> {
    serde_json::from_str(input)
        .map_err(|err| InputError::new(format!("input is not the expected JSON document: {err}")))
}

/// Serializes `value` as a JSON document for a receipt or a handler's output.
pub fn to_string<T: Serialize + ?Sized>(value: &T) -> Result<String, OutputError> {
    serde_json::to_string(value).map_err(|err| OutputError {
        message: format!("output could not be serialized as JSON: {err}"),
    })
}

impl Request {
    /// Parses the request's input into `T`; use `?` to turn a failure into `rejected`.
    pub fn parse_input<T: DeserializeOwned>(&self) -> Result<T, InputError> {
        parse(&self.input)
    }
}

impl CompensationRequest {
    /// Parses the compensation's input into `T`; use `?` to turn a failure into `rejected`.
    pub fn parse_input<T: DeserializeOwned>(&self) -> Result<T, InputError> {
        parse(&self.input)
    }

    /// Parses the original receipt's output (what the original step returned) into `T`.
    pub fn parse_original_output<T: DeserializeOwned>(&self) -> Result<T, InputError> {
        serde_json::from_str(&self.original_receipt.output).map_err(|err| {
            InputError::new(format!(
                "the original receipt's output is not the expected JSON document: {err}"
            ))
        })
    }
}
