//! Property-based fuzzing of every parser that reads text from outside the host: workflow
//! definitions, policy documents, `docket.toml`, admission bodies and idempotency keys,
//! canonical JSON, the values guests return, the `Host`/`Origin` checks, host rules and
//! `host:port` forms, forwarding headers, pagination cursors and the console's forms. Each property runs on random input and on
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

/// A `Host`, `Origin` or forwarding header as browsers, proxies and attackers write them.
fn header_text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[ -~]{0,60}",
        "(localhost|127\\.0\\.0\\.1|\\[::1\\]|rebound\\.example|[a-z]{1,8}\\.localhost)(:[0-9]{1,6})?\\.?",
        "(https?|null|file)://[ -~]{0,30}",
        "([0-9]{1,3}\\.){3}[0-9]{1,3}(:[0-9]{1,5})?(, ?([0-9]{1,3}\\.){3}[0-9]{1,3}){0,3}",
        ".{0,40}",
    ]
}

proptest! {
    /// The browser checks never panic; a loopback `Host` always passes a read in open
    /// mode, and a `Host` that is not loopback never does.
    #[test]
    fn host_and_origin_checks_never_panic(
        host in header_text(),
        origin in proptest::option::of(header_text()),
        fetch_site in proptest::option::of("[ -~]{0,20}"),
        post in any::<bool>(),
    ) {
        let mut headers = http::HeaderMap::new();
        if let Ok(v) = http::HeaderValue::from_str(&host) {
            headers.insert(http::header::HOST, v);
        }
        if let Some(o) = origin.as_deref().and_then(|o| http::HeaderValue::from_str(o).ok()) {
            headers.insert(http::header::ORIGIN, o);
        }
        if let Some(f) = fetch_site.as_deref().and_then(|f| http::HeaderValue::from_str(f).ok()) {
            headers.insert("sec-fetch-site", f);
        }
        let method = if post { http::Method::POST } else { http::Method::GET };
        let open = crate::access::check_request(true, &method, &headers);
        let _ = crate::access::check_request(false, &method, &headers);
        let loopback = crate::access::is_loopback_host(&host);
        if !post && headers.contains_key(http::header::HOST) {
            prop_assert_eq!(open.is_ok(), loopback, "{}", host);
        }
    }

    /// Host rules and `host:port` hops parse or refuse, never panic; a rule prints as text
    /// that parses back to the same rule.
    #[test]
    fn host_rules_and_hops_never_panic(text in header_text()) {
        if let Ok(rule) = text.parse::<crate::capabilities::HostRule>() {
            let again = rule.to_string().parse::<crate::capabilities::HostRule>();
            prop_assert_eq!(again.as_ref().ok(), Some(&rule), "{}", text);
        }
        let trust = crate::access::ProxyTrust::new(
            vec!["127.0.0.0/8".parse().unwrap()],
            http::HeaderName::from_static("x-forwarded-for"),
        );
        let mut headers = http::HeaderMap::new();
        if let Ok(v) = http::HeaderValue::from_str(&text) {
            headers.insert("x-forwarded-for", v);
        }
        let _ = trust.client_ip("127.0.0.1".parse().unwrap(), &headers);
    }

    /// A cursor decodes or is refused, never panics; every cursor the API writes decodes
    /// back to itself.
    #[test]
    fn cursors_never_panic_and_round_trip(
        text in prop_oneof!["[0-9a-f]{0,80}", ".{0,80}"],
        seq in 0u64..=i64::MAX as u64,
        id in "wf_[0-9a-z]{1,30}",
    ) {
        use crate::api::pagination::Cursor;
        let _ = Cursor::decode(&text);
        for cursor in [
            Cursor::Seq(seq),
            Cursor::Notification(seq),
            Cursor::Attempt(seq as u32),
            Cursor::Workflow(seq, crate::intent::WorkflowId(id.clone())),
        ] {
            prop_assert_eq!(Cursor::decode(&cursor.encode()), Some(cursor));
        }
    }

    /// The console's forms decode and build their orders, or are refused, never panic.
    #[test]
    fn console_forms_never_panic(
        body in prop_oneof![
            ".{0,200}",
            mutated("csrf=abc&key=k-1&reason=ordered+by+mistake&input=%7B%22title%22%3A1%7D&add_attempts=5&add_cost=&cancel_original=on"),
            mutated("csrf=abc&key=k-2&outcome=succeeded&evidence=dashboard&reason=phone&external_reference=dlv_1&note=n"),
        ],
    ) {
        crate::console::orders_from_form(body.as_bytes());
    }
}
