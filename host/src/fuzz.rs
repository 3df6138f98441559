//! Property-based fuzzing of every parser that reads text from outside the host: workflow
//! definitions, policy documents, `docket.toml`, admission bodies and idempotency keys,
//! canonical JSON, and the values guests return. Each property runs on random input and on
//! random mutations of real documents; a parser may refuse anything, but never panic, and
//! its errors point inside the text. `PROPTEST_CASES` sets the run's length (CI runs the
//! default; README records a long run); any failure proptest finds is kept under
//! `proptest-regressions/` and replayed first on every run.

use proptest::prelude::*;
use serde_json::Value;

/// A real document with up to eight random edits: a character inserted, deleted or
/// replaced at a random place.
fn mutated(base: &'static str) -> impl Strategy<Value = String> {
    prop::collection::vec((any::<usize>(), any::<char>(), 0u8..3), 0..8).prop_map(move |edits| {
        let mut text: Vec<char> = base.chars().collect();
        for (at, c, op) in edits {
            let at = if text.is_empty() { 0 } else { at % text.len() };
            match op {
                0 => text.insert(at, c),
                1 if !text.is_empty() => {
                    text.remove(at);
                }
                _ if !text.is_empty() => text[at] = c,
                _ => text.push(c),
            }
        }
        text.into_iter().collect()
    })
}

/// Random text, or a mutated real document.
fn text_or(base: &'static str) -> impl Strategy<Value = String> {
    prop_oneof![".{0,400}", mutated(base)]
}

const DEFINITION: &str = include_str!("../../workflows/document-delivery.toml");
const POLICY: &str = r#"
[[rules]]
subjects = ["billing-service"]
workflows = ["document-delivery"]
steps = ["deliver"]
adapters = ["namespace:reference-provider"]
actions = ["invoke", "compensate"]
environments = ["production"]
effect = "deny"
reason = "paused"

[[rules]]
effect = "allow"
"#;
const CONFIG: &str = r#"
listen = "127.0.0.1:8080"
environment = "production"
[[tokens]]
token = "0123456789abcdef-token"
subject = "alice"
roles = ["operator", "deployer"]
[secrets]
values = { provider_token = "abcdefgh-ijkl", hooks = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw" }
[adapters.http-delivery]
allow_hosts = ["https://delivery.example.com"]
allow_secrets = ["provider_token"]
settings = { base_url = "https://delivery.example.com" }
[limits]
lease = "5s"
[[notifications]]
url = "https://hooks.example.com/docket"
secret = "hooks"
"#;
const SUBMISSION: &str = r#"{"workflow": "document-delivery", "input": {"title": "T", "recipient": "a@b", "body": "x"}}"#;

/// Any JSON value, nested a few levels.
fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        ".{0,20}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 64, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
            prop::collection::btree_map(".{0,8}", inner, 0..8)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn lines(text: &str) -> usize {
    text.lines().count() + 1
}

proptest! {
    #[test]
    fn definitions_never_panic_and_point_inside_the_file(text in text_or(DEFINITION)) {
        if let Err(diagnostics) = crate::workflow::parse("fuzz.toml", &text) {
            for d in diagnostics.located() {
                if let Some(line) = d.line {
                    prop_assert!(line >= 1 && line <= lines(&text), "{d:?}");
                    prop_assert!(d.column.unwrap_or(1) >= 1, "{d:?}");
                }
                prop_assert!(!d.message.is_empty());
            }
            // Rendering quotes the text around each span: it must not panic either.
            let _ = diagnostics.to_string();
        }
    }

    #[test]
    fn policies_never_panic_and_point_inside_the_document(text in text_or(POLICY)) {
        if let Err(problems) = crate::policy::PolicyDoc::parse(&text) {
            prop_assert!(!problems.is_empty());
            for p in problems {
                prop_assert!(p.line >= 1 && p.line <= lines(&text), "{p:?}");
                prop_assert!(p.column >= 1, "{p:?}");
            }
        }
    }

    #[test]
    fn host_configs_never_panic(text in text_or(CONFIG)) {
        if let Ok(raw) = crate::config::HostConfig::parse_toml("fuzz.toml", &text) {
            let _ = crate::config::HostConfig::from_toml("fuzz.toml", raw);
        }
    }

    #[test]
    fn keys_and_submissions_never_panic(
        key in prop::collection::vec(any::<u8>(), 0..300),
        body in prop_oneof![
            prop::collection::vec(any::<u8>(), 0..300),
            mutated(SUBMISSION).prop_map(String::into_bytes),
        ],
    ) {
        // A key that is accepted is accepted again as itself.
        if let Ok(k) = crate::api::parse_idempotency_key(&key) {
            prop_assert_eq!(crate::api::parse_idempotency_key(k.as_bytes()), Ok(k.clone()));
        }
        let _ = crate::api::parse_submission(&body);
    }

    #[test]
    fn canonical_json_is_a_fixed_point(value in json()) {
        if let Ok(first) = crate::intent::canonicalize(&value) {
            let again: Value = serde_json::from_str(&first.text).unwrap();
            let second = crate::intent::canonicalize(&again).unwrap();
            prop_assert_eq!(&first.text, &second.text);
            prop_assert_eq!(first.digest, second.digest);
        }
    }

    #[test]
    fn guest_values_are_bounded(
        output_len in 0usize..200_000,
        reference in ".{0,40}",
        reference_len in 0usize..3_000,
        text in ".{0,5000}",
    ) {
        let receipt = crate::contract::PluginReceipt {
            external_reference: reference.repeat(reference_len / reference.len().max(1)),
            output: "x".repeat(output_len),
        };
        let fits = receipt.output.len() <= crate::runtime::MAX_OUTPUT_BYTES
            && receipt.external_reference.len() <= crate::runtime::MAX_REFERENCE_BYTES;
        prop_assert_eq!(crate::runtime::bounded(&receipt).is_ok(), fits);
        let cut = crate::runtime::cut_text(text.clone());
        prop_assert!(cut.len() <= crate::runtime::MAX_TEXT_BYTES + '…'.len_utf8());
        prop_assert!(text.starts_with(cut.trim_end_matches('…')));
    }
}
