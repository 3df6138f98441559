//! Holds the answers the integration suite receives against the API's OpenAPI document:
//! the test helpers that talk to a host ([`crate::host_process::HostProcess`]'s requests and
//! the API harness's) pass every answer through [`check`], so a response whose shape the
//! document does not describe fails the test that received it.

use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// The document the host serves at `GET /v1/openapi.json`.
fn document() -> &'static Value {
    docket::api::openapi::document()
}

/// The operation documented for `method` on a concrete `path`, with its path template:
/// the template with the most literal segments wins (`…/attempts` before `…/{action}`).
fn operation(method: &str, path: &str) -> Option<(&'static str, &'static Value)> {
    let segments: Vec<&str> = path.trim_end_matches('/').split('/').collect();
    let mut best: Option<(usize, &'static str, &'static Value)> = None;
    for (template, item) in document()["paths"].as_object()? {
        let parts: Vec<&str> = template.split('/').collect();
        if parts.len() != segments.len() {
            continue;
        }
        let mut literal = 0;
        let fits = parts.iter().zip(&segments).all(|(t, s)| {
            if t.starts_with('{') {
                !s.is_empty()
            } else {
                literal += 1;
                t == s
            }
        });
        let Some(op) = item.get(method.to_lowercase()) else {
            continue;
        };
        if fits && best.is_none_or(|(n, _, _)| literal > n) {
            best = Some((literal, template.as_str(), op));
        }
    }
    best.map(|(_, t, op)| (t, op))
}

/// A validator for `schema`, whose `$ref`s point into the document's components.
fn validator(schema: &Value) -> &'static jsonschema::Validator {
    static CACHE: OnceLock<Mutex<HashMap<String, &'static jsonschema::Validator>>> =
        OnceLock::new();
    let key = schema.to_string();
    let mut cache = CACHE.get_or_init(Default::default).lock().unwrap();
    if let Some(v) = cache.get(&key) {
        return v;
    }
    let mut root = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "components": document()["components"].clone(),
    });
    for (k, v) in schema.as_object().expect("a schema object") {
        root[k] = v.clone();
    }
    let built = jsonschema::validator_for(&root)
        .unwrap_or_else(|e| panic!("the OpenAPI document holds a bad schema ({e}): {schema}"));
    let leaked: &'static jsonschema::Validator = Box::leak(Box::new(built));
    cache.insert(key, leaked);
    leaked
}

/// Panics, naming the operation and the mismatch, unless the document describes an
/// answer of `status` with `body` (`None`: not JSON, or empty) to `method path`.
pub fn check(method: &str, path_and_query: &str, status: u16, body: Option<&Value>) {
    let path = path_and_query.split('?').next().unwrap_or_default();
    // The console's pages are HTML for people, not part of the API.
    if path.starts_with("/console") {
        return;
    }
    let (template, response) = match operation(method, path) {
        Some((template, op)) => {
            let responses = &op["responses"];
            let documented = responses.get(status.to_string());
            (
                template,
                documented.unwrap_or(&responses["default"]).clone(),
            )
        }
        // No such route: the fallback's refusal, in the error envelope.
        None => (
            "(no route)",
            json!({"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}),
        ),
    };
    let schema = &response["content"]["application/json"]["schema"];
    let what = format!("{method} {path} ({template}) answered {status}");
    match (schema.is_null(), body) {
        (true, None) => {}
        (true, Some(body)) => {
            panic!("{what} with a JSON body the OpenAPI document does not describe: {body}")
        }
        (false, None) => panic!("{what} without the JSON body the OpenAPI document describes"),
        (false, Some(body)) => {
            let errors: Vec<String> = validator(schema)
                .iter_errors(body)
                .map(|e| format!("{e} (at {})", e.instance_path()))
                .collect();
            assert!(
                errors.is_empty(),
                "{what}, a body that does not match docs/openapi.json:\n{}\nbody: {body}",
                errors.join("\n")
            );
        }
    }
}

/// The check is not vacuous: a body that lacks a documented field, a field of the wrong
/// type, an undocumented status and a JSON body where none is documented all fail.
#[test]
fn answers_the_document_does_not_describe_fail() {
    let fails = |method: &str, path: &str, status: u16, body: Option<Value>| {
        std::panic::catch_unwind(|| check(method, path, status, body.as_ref())).is_err()
    };
    let intent = json!({
        "workflow_id": "wf_1", "workflow": "letters", "definition_version": 1,
        "state": "running", "replayed": false, "created_at": "2026-01-01T00:00:00Z"
    });
    assert!(!fails("POST", "/v1/intents", 201, Some(intent.clone())));
    let mut missing = intent.clone();
    missing.as_object_mut().unwrap().remove("state");
    assert!(fails("POST", "/v1/intents", 201, Some(missing)));
    let mut wrong = intent.clone();
    wrong["state"] = json!("sleeping");
    assert!(fails("POST", "/v1/intents", 201, Some(wrong)));
    // 202 is not an answer admission gives: only the error envelope would do.
    assert!(fails("POST", "/v1/intents", 202, Some(intent)));
    assert!(fails("GET", "/metrics", 200, Some(json!({"a": 1}))));
    let refusal = json!({"error": {"code": "not_found", "message": "no", "details": []}});
    assert!(!fails(
        "GET",
        "/v1/workflows/wf_9",
        404,
        Some(refusal.clone())
    ));
    assert!(!fails("GET", "/v1/nothing/here", 404, Some(refusal)));
    assert!(fails(
        "GET",
        "/v1/nothing/here",
        404,
        Some(json!({"error": {"code": "no_such_code", "message": "", "details": []}}))
    ));
}
