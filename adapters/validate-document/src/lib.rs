//! The `validate-document` handler: checks a document request and returns it normalised
//! (surrounding whitespace trimmed from `title` and `recipient`) with `"valid": true`.
//!
//! Input `{"title": non-empty string, "recipient": string containing '@', "body": string}`;
//! other fields are ignored. A bad field is an `invalid-input` error naming the field.

use docket_guest::{Handler, HandlerContract, HandlerError, Json};
use serde_json::{Map, Value, json};

/// The handler; pure, like every docket handler.
struct ValidateDocument;

impl Handler for ValidateDocument {
    fn describe() -> HandlerContract {
        HandlerContract::new("validate-document", "1.0.0")
    }

    fn run(input: Json) -> Result<Json, HandlerError> {
        let input: Value = serde_json::from_str(&input).map_err(|err| {
            HandlerError::invalid_input(format!("input is not valid JSON: {err}"))
        })?;
        let Value::Object(fields) = input else {
            return Err(HandlerError::invalid_input(
                "input must be a JSON object with `title`, `recipient` and `body`",
            ));
        };

        let title = string_field(&fields, "title")?.trim();
        if title.is_empty() {
            return Err(HandlerError::invalid_input(
                "field `title` is empty; expected a non-empty title",
            ));
        }
        let recipient = string_field(&fields, "recipient")?.trim();
        if !recipient.contains('@') {
            return Err(HandlerError::invalid_input(format!(
                "field `recipient` is {recipient:?}; expected an address containing '@'"
            )));
        }
        let body = string_field(&fields, "body")?;

        Ok(json!({
            "title": title,
            "recipient": recipient,
            "body": body,
            "valid": true,
        })
        .to_string())
    }
}

/// The string value of `name`, or an error that names the field and says what was found.
fn string_field<'a>(fields: &'a Map<String, Value>, name: &str) -> Result<&'a str, HandlerError> {
    match fields.get(name) {
        Some(Value::String(value)) => Ok(value),
        None => Err(HandlerError::invalid_input(format!(
            "field `{name}` is missing; expected a string"
        ))),
        Some(other) => Err(HandlerError::invalid_input(format!(
            "field `{name}` is {other}; expected a string"
        ))),
    }
}

docket_guest::export_handler!(ValidateDocument);
