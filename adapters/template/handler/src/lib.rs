//! `__name__`: a docket handler (pure step computation), scaffolded by `docket adapter new
//! --handler`. The same input always gives the same output; a handler has no capabilities.
//!
//! As generated it greets: input `{"name": "…"}`, output `{"greeting": "Hello, …!"}`.

use docket_guest::{Handler, HandlerContract, HandlerError, Json};
use serde_json::{Value, json};

/// The handler; pure, like every docket handler.
struct Plugin;

impl Handler for Plugin {
    fn describe() -> HandlerContract {
        HandlerContract::new("__name__", "0.1.0")
    }

    fn run(input: Json) -> Result<Json, HandlerError> {
        let input: Value = serde_json::from_str(&input)
            .map_err(|e| HandlerError::invalid_input(format!("input is not JSON: {e}")))?;
        let name = input["name"].as_str().ok_or_else(|| {
            HandlerError::invalid_input("field `name` is missing; expected a string")
        })?;
        Ok(json!({"greeting": format!("Hello, {name}!")}).to_string())
    }
}

docket_guest::export_handler!(Plugin);
