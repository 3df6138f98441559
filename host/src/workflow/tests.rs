//! Tests of parsing and checking whole definitions. The rendered text of each kind of
//! error is locked in by the golden files under `host/tests/ui/`; these tests cover
//! the parsed values and the collection of several problems.

use std::time::Duration;

use semver::Version;
use serde_json::json;

use super::*;

const DOCUMENT_DELIVERY: &str = include_str!("../../../workflows/document-delivery.toml");

fn env() -> StaticEnv {
    StaticEnv::new()
        .component(
            "validate-document",
            Version::new(1, 0, 0),
            ComponentWorld::Handler,
        )
        .component(
            "render-document",
            Version::new(1, 0, 0),
            ComponentWorld::Handler,
        )
        .component(
            "http-delivery",
            Version::new(1, 0, 0),
            ComponentWorld::Adapter,
        )
        .allow_host("http-delivery", "$base_url")
        .allow_secret("http-delivery", "provider_token")
}

fn parse_ok(source: &str) -> WorkflowDef {
    match parse("test.toml", source) {
        Ok(def) => def,
        Err(diags) => panic!("{diags}"),
    }
}

fn errors(source: &str) -> Vec<Diagnostic> {
    parse("test.toml", source).unwrap_err().items().to_vec()
}

/// A minimal valid definition, with `steps` appended.
fn minimal(steps: &str) -> String {
    format!(
        "name = \"w\"\nversion = 1\ndeadline = \"1m\"\n[input_schema]\ntype = \"object\"\n{steps}"
    )
}

const STEP: &str = "[[steps]]\nid = \"a\"\nlabel = \"A\"\nkind = \"handler\"\ncomponent = \"c\"\nversion = \"^1\"\n";

#[test]
fn parses_the_shipped_definition() {
    let def = match check("document-delivery.toml", DOCUMENT_DELIVERY, &env()) {
        Ok(def) => def,
        Err(diags) => panic!("{diags}"),
    };
    assert_eq!(def.name.as_str(), "document-delivery");
    assert_eq!(def.version, 1);
    assert_eq!(def.deadline, Duration::from_secs(3600));
    assert_eq!(def.source_digest, source_digest(DOCUMENT_DELIVERY));
    assert!(def.source_digest.starts_with("sha256:") && def.source_digest.len() == 71);
    assert_eq!(
        def.milestones(),
        [
            "Request recorded",
            "Input validated",
            "Document prepared",
            "Delivery verified",
            "Completion recorded"
        ]
    );
    let order: Vec<&str> = def
        .topological_order()
        .iter()
        .map(|s| s.id.as_str())
        .collect();
    assert_eq!(order, ["validate", "render", "deliver"]);

    let deliver = def.step("deliver").unwrap();
    assert_eq!(deliver.kind, StepKind::Adapter);
    assert_eq!(deliver.capabilities.outbound_hosts, ["$base_url"]);
    assert_eq!(deliver.capabilities.secrets, ["provider_token"]);
    assert_eq!(deliver.retry.max_attempts, 5);
    assert_eq!(deliver.retry.initial_backoff, Duration::from_millis(500));
    assert_eq!(deliver.retry.multiplier, RetryPolicy::DEFAULT_MULTIPLIER);
    assert!(deliver.version_req.matches(&Version::new(1, 4, 0)));
}

#[test]
fn each_action_asks_for_its_own_table_or_else_the_steps() {
    let text = DOCUMENT_DELIVERY.replace(
        "secrets = [\"provider_token\"]\n",
        "secrets = [\"provider_token\"]\n[steps.capabilities.query]\noutbound_hosts = [\"https://status.example.com\"]\n",
    );
    assert!(text.contains("[steps.capabilities.query]"));
    let def = parse_ok(&text);
    let caps = &def.step("deliver").unwrap().capabilities;
    let (hosts, secrets) = caps.of(AdapterAction::Query);
    assert_eq!(hosts, ["https://status.example.com"]);
    assert!(
        secrets.is_empty(),
        "a query table replaces the step's secrets too"
    );
    let (hosts, secrets) = caps.of(AdapterAction::Compensate);
    assert_eq!(
        (hosts, secrets),
        (&caps.outbound_hosts[..], &caps.secrets[..])
    );
    assert_eq!(caps.of(AdapterAction::Invoke).0, ["$base_url"]);
    // A stored definition without action tables reads and writes as before.
    let json = serde_json::to_value(&parse_ok(DOCUMENT_DELIVERY).steps[2].capabilities).unwrap();
    assert_eq!(
        json,
        serde_json::json!({"outbound_hosts": ["$base_url"], "secrets": ["provider_token"]})
    );
}

#[test]
fn the_shipped_mappings_chain_the_handlers() {
    let def = parse_ok(DOCUMENT_DELIVERY);
    let input = json!({"title": " Hello ", "recipient": "a@example.com", "body": "World"});
    assert_eq!(def.validate_input(&input), Ok(()));

    let validate = def
        .step("validate")
        .unwrap()
        .input
        .resolve(&input, |_| None)
        .unwrap();
    assert_eq!(validate, input);

    let validated = ReceiptView {
        output: json!({"title": "Hello", "recipient": "a@example.com", "body": "World", "valid": true}),
        external_reference: None,
    };
    let rendered = ReceiptView {
        output: json!({"recipient": "a@example.com", "document": "Hello\n\nWorld\n", "document_digest": "sha256:x"}),
        external_reference: None,
    };
    let receipts = |step: &str| match step {
        "validate" => Some(validated.clone()),
        "render" => Some(rendered.clone()),
        _ => None,
    };
    let render_input = def
        .step("render")
        .unwrap()
        .input
        .resolve(&input, receipts)
        .unwrap();
    assert_eq!(
        render_input,
        json!({"title": "Hello", "recipient": "a@example.com", "body": "World"})
    );
    let deliver_input = def
        .step("deliver")
        .unwrap()
        .input
        .resolve(&input, receipts)
        .unwrap();
    assert_eq!(deliver_input, rendered.output);
}

#[test]
fn the_shipped_schema_rejects_bad_input() {
    let def = parse_ok(DOCUMENT_DELIVERY);
    let errors = def
        .validate_input(&json!({"title": "", "recipient": "nobody", "body": "x"}))
        .unwrap_err();
    let pointers: Vec<&str> = errors.iter().map(|e| e.pointer.as_str()).collect();
    assert_eq!(pointers, ["/recipient", "/title"]);
}

#[test]
fn stores_and_reloads_as_json() {
    let def = parse_ok(DOCUMENT_DELIVERY);
    let stored = serde_json::to_value(&def).unwrap();
    assert_eq!(stored["deadline"], "1h");
    assert_eq!(
        stored["steps"][2]["input"]["document"],
        "$steps.render.output.document"
    );
    assert_eq!(stored["steps"][0]["version_req"], "^1");
    let reloaded: WorkflowDef = serde_json::from_value(stored).unwrap();
    assert_eq!(reloaded, def);
}

#[test]
fn applies_defaults() {
    let def = parse_ok(&minimal(STEP));
    assert_eq!(def.budget, Budget::default());
    assert_eq!(def.description, "");
    let step = &def.steps[0];
    assert_eq!(step.retry, RetryPolicy::default());
    assert_eq!(step.timeout, DEFAULT_TIMEOUT);
    assert!(step.input.is_empty());
    assert_eq!(def.milestones(), [REQUEST_RECORDED, COMPLETION_RECORDED]);
    // The default timeout never exceeds the deadline.
    let short = minimal(STEP).replace("deadline = \"1m\"", "deadline = \"10s\"");
    assert_eq!(parse_ok(&short).steps[0].timeout, Duration::from_secs(10));
}

#[test]
fn collects_several_problems() {
    let source = minimal(&format!(
        "{STEP}timeout = \"0s\"\nafter = [\"b\"]\n[steps.retry]\njitter = 1.5\n\
         {}\n[steps.input]\nx = \"$input.y\"\nz = \"$steps.a.output\"\n",
        STEP.replace("\"a\"", "\"b\"")
    ));
    let messages: Vec<String> = errors(&source).into_iter().map(|d| d.message).collect();
    assert!(
        messages.iter().any(|m| m.contains("timeout is zero")),
        "{messages:#?}"
    );
    assert!(
        messages.iter().any(|m| m.contains("jitter")),
        "{messages:#?}"
    );
    assert!(
        messages
            .iter()
            .any(|m| m.contains("but does not run after `a`")),
        "{messages:#?}"
    );
    assert_eq!(messages.len(), 3, "{messages:#?}");
}

#[test]
fn reports_every_syntax_error() {
    let diags = parse("f.toml", "name = \nversion = = 1\n").unwrap_err();
    assert!(diags.len() >= 2, "{diags}");
    assert!(
        diags.items()[0].message.starts_with("invalid TOML"),
        "{diags}"
    );
}

#[test]
fn checks_the_budget_against_the_steps() {
    let source = minimal(&format!(
        "[budget]\nmax_attempts = 1\n{STEP}{}",
        STEP.replace("\"a\"", "\"b\"")
    ));
    let messages: Vec<String> = errors(&source).into_iter().map(|d| d.message).collect();
    assert_eq!(
        messages,
        ["budget `max_attempts` is 1, but the workflow has 2 steps"]
    );
}

#[test]
fn located_diagnostics_have_positions() {
    let diags = parse("f.toml", "name = \"w\"\nversion = 0\n").unwrap_err();
    let located = diags.located();
    assert_eq!(located[0].file, "f.toml");
    assert!(located[0].line.is_some());
}

#[test]
fn a_batch_step_names_its_list_its_item_key_and_how_many_run_at_once() {
    let source = include_str!("../../tests/good/batch.toml");
    let def = check("batch.toml", source, &env()).unwrap_or_else(|d| panic!("{d}"));
    let batch = def.steps[0].batch.as_ref().expect("a batch step");
    assert_eq!(batch.for_each.to_string(), "$input.recipients");
    assert_eq!(
        batch.item_key.as_ref().map(ToString::to_string).as_deref(),
        Some("$item.email")
    );
    assert_eq!(batch.max_parallel, 4);
    // The input reads the item; a plain resolution has none.
    let input = json!({"recipients": [{"email": "a@example.com"}], "subject": "Hi"});
    let item = json!({"email": "a@example.com"});
    let mapped = def.steps[0]
        .input
        .resolve_item(&input, Some(&item), |_| None)
        .unwrap();
    assert_eq!(mapped["recipient"], "a@example.com");
    let err = def.steps[0].input.resolve(&input, |_| None).unwrap_err();
    assert_eq!(
        err.to_string(),
        "input mapping reads `$item.email`, but only a step with `for_each` has an item"
    );
    // Without `max_parallel`, 8 at a time.
    let default = source.replace("max_parallel = 4\n", "");
    let def = check("batch.toml", &default, &env()).unwrap();
    assert_eq!(def.steps[0].batch.as_ref().unwrap().max_parallel, 8);
    // A list read from an earlier receipt: the claim of the batch step reads that receipt.
    let from_receipt = source
        .replace(
            "[[steps]]\nid = \"deliver\"",
            "[[steps]]\nid = \"pick\"\nlabel = \"Pick\"\nkind = \"handler\"\ncomponent = \"validate-document\"\nversion = \"^1\"\noutputs = [\"people\"]\n[steps.input]\nall = \"$input.recipients\"\n\n[[steps]]\nid = \"deliver\"\nafter = [\"pick\"]",
        )
        .replace("for_each = \"$input.recipients\"", "for_each = \"$steps.pick.output.people\"");
    let def = check("batch.toml", &from_receipt, &env()).unwrap_or_else(|d| panic!("{d}"));
    assert_eq!(
        def.reads("deliver").into_iter().collect::<Vec<_>>(),
        ["pick"]
    );
}
