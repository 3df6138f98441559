//! `docket adapter inspect`, `invoke` and `verify`, run as real processes.

use docket::sim::{ProviderSim, SimConfig};
use std::process::{Command, Output};

fn docket(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_docket"))
        .args(args)
        .env(
            "DOCKET_CACHE_DIR",
            concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../target/test-component-cache"
            ),
        )
        .output()
        .expect("run docket")
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn inspect_prints_contract_imports_and_exports() {
    let out = docket(&["adapter", "inspect", "http-delivery"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    for want in [
        "http-delivery@1.0.0",
        "digest:  sha256:",
        "idempotency:  yes — retention 86400 s, namespace `reference-provider`",
        "query:        yes",
        "wasi:http/outgoing-handler@0.2.12",
        "docket:plugin/secrets@0.3.0",
        "invoke",
    ] {
        assert!(stdout.contains(want), "missing {want:?} in:\n{stdout}");
    }

    let out = docket(&["adapter", "inspect", "--json", "render-document"]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(doc["kind"]["world"], "handler");
    assert_eq!(doc["kind"]["contract"]["name"], "render-document");
}

#[test]
fn inspect_refuses_a_forbidden_import_by_name() {
    let out = docket(&["adapter", "inspect", "hostile-import"]);
    let (_, stderr) = text(&out);
    assert!(!out.status.success());
    assert!(stderr.contains("evil:spy/exfiltrate"), "{stderr}");
}

#[test]
fn inspect_explains_a_wrong_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notes.wasm");
    std::fs::write(&path, "not wasm").unwrap();
    let out = docket(&["adapter", "inspect", path.to_str().unwrap()]);
    let (_, stderr) = text(&out);
    assert!(!out.status.success());
    assert!(stderr.contains("not a WebAssembly binary"), "{stderr}");
    let out = docket(&["adapter", "inspect", "no-such-thing"]);
    let (_, stderr) = text(&out);
    assert!(
        stderr.contains("neither a file nor a built example"),
        "{stderr}"
    );
}

#[test]
fn invoke_runs_a_handler_and_prints_its_output() {
    let out = docket(&[
        "adapter",
        "invoke",
        "render-document",
        "--input",
        r#"{"title": "Hi", "recipient": "a@example.com", "body": "Text"}"#,
    ]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    let doc: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert!(
        doc["ok"]["document_digest"]
            .as_str()
            .unwrap()
            .starts_with("sha256:"),
        "{doc}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn invoke_delivers_through_a_granted_host_with_a_secret() {
    let sim = ProviderSim::start(SimConfig::new("cli-token"), "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let base = sim.base_url();
    let args = [
        "adapter",
        "invoke",
        "http-delivery",
        "--key",
        "cli-1",
        "--input",
        r#"{"recipient": "a@example.com", "document": "Hi", "document_digest": "sha256:00"}"#,
        "--setting",
        &format!("base_url={base}"),
        "--allow-host",
        &base,
        "--secret",
        "provider_token=cli-token",
    ];
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let out = tokio::task::spawn_blocking(move || {
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        docket(&refs)
    })
    .await
    .unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("\"external_reference\": \"dlv_1\""),
        "{stdout}"
    );
    assert!(
        !stdout.contains("cli-token") && !stderr.contains("cli-token"),
        "secret printed"
    );
    assert_eq!(sim.sim().world().len(), 1);

    // Without --allow-host the component is refused before it runs, naming the import.
    let out = docket(&[
        "adapter",
        "invoke",
        "http-delivery",
        "--secret",
        "provider_token=x",
    ]);
    let (_, stderr) = text(&out);
    assert!(!out.status.success());
    assert!(stderr.contains("wasi:http/"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread")]
async fn invoke_compensates_and_queries_with_the_new_shapes() {
    let sim = ProviderSim::start(SimConfig::new("cli-token"), "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let base = sim.base_url();
    let run = move |extra: &[&str]| {
        let mut args: Vec<String> = ["adapter", "invoke", "http-delivery"]
            .iter()
            .chain(extra)
            .map(|s| s.to_string())
            .collect();
        args.extend([
            "--setting".to_string(),
            format!("base_url={base}"),
            "--allow-host".to_string(),
            base.clone(),
            "--secret".to_string(),
            "provider_token=cli-token".to_string(),
        ]);
        tokio::task::spawn_blocking(move || {
            let refs: Vec<&str> = args.iter().map(String::as_str).collect();
            docket(&refs)
        })
    };
    let input =
        r#"{"recipient": "a@example.com", "document": "Hi", "document_digest": "sha256:00"}"#;
    let out = run(&["--key", "cli-c", "--input", input]).await.unwrap();
    assert!(out.status.success(), "{:?}", text(&out));

    let out = run(&[
        "--op",
        "compensate",
        "--key",
        "cli-c.compensate",
        "--receipt",
        "dlv_1",
        "--input",
        input,
    ])
    .await
    .unwrap();
    let (stdout, stderr) = text(&out);
    assert!(
        out.status.success(),
        "{stdout}
{stderr}"
    );
    let doc: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(doc["ok"]["external_reference"], "dlv_1", "{doc}");
    assert!(stderr.contains("cli-c.compensate"), "{stderr}");
    assert_eq!(sim.sim().world()[0].cancel_requests, 1);

    let out = run(&["--op", "query", "--key", "cli-c"]).await.unwrap();
    let (stdout, stderr) = text(&out);
    assert!(
        out.status.success(),
        "{stdout}
{stderr}"
    );
    let doc: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(doc["ok"]["lookup"], "found", "{doc}");
    assert_eq!(doc["ok"]["status"], "reversed", "{doc}");
    assert_eq!(doc["ok"]["provider_status"], "cancelled", "{doc}");
}

/// The verdict lines of `adapter verify`: claim name → verdict.
pub(crate) fn verdicts(stdout: &str) -> Vec<(String, String)> {
    stdout
        .lines()
        .filter_map(|l| {
            let (claim, rest) = l.split_once(' ')?;
            ["idempotency", "query", "compensation"]
                .contains(&claim)
                .then(|| rest.trim())
                .filter(|rest| !rest.starts_with("yes") && !rest.starts_with("no "))
                .map(|rest| (claim.to_string(), rest.to_string()))
        })
        .collect()
}

#[test]
fn verify_passes_the_honest_adapter() {
    let out = docket(&["adapter", "verify", "http-delivery"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert_eq!(
        verdicts(&stdout),
        [
            ("idempotency".to_string(), "held".to_string()),
            ("query".to_string(), "held".to_string()),
            ("compensation".to_string(), "held".to_string()),
        ],
        "{stdout}"
    );
    for scenario in [
        "duplicate request",
        "response lost after commit",
        "changed input under one key",
        "two attempts at once",
        "a request delivered twice",
        "a restarted worker",
        "the key kept for its retention",
        "eventual visibility in lookups",
        "compensating twice, one key",
        "compensation answer lost",
    ] {
        assert!(stdout.contains(scenario), "no {scenario:?} in:\n{stdout}");
    }
    assert!(!stdout.contains("FAILED"), "{stdout}");
    // The declared retention is proven by moving the simulator's clock to its last second.
    assert!(
        stdout.contains("86399 s later (declared retention 86400 s) named the same effect"),
        "{stdout}"
    );
    // The evidence is what the provider answered, and what the adapter's own lookup says.
    assert!(stdout.contains("/cancel → 200"), "{stdout}");
    assert!(
        stdout.contains("(reversed, provider says `cancelled`)"),
        "{stdout}"
    );
}

#[test]
fn verify_fails_the_lying_adapter_on_exactly_the_idempotency_claim() {
    let out = docket(&["adapter", "verify", "http-delivery-lying"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    let verdicts = verdicts(&stdout);
    assert_eq!(verdicts.len(), 3, "{stdout}");
    assert!(verdicts[0].1.starts_with("FAILED"), "{stdout}");
    assert_eq!(verdicts[1].1, "held", "{stdout}");
    assert_eq!(verdicts[2].1, "held", "{stdout}");
    assert!(
        stdout.contains("declared claims that did not hold: idempotency\n"),
        "{stdout}"
    );
    // The evidence is the provider's answers: two creations where one was claimed.
    let duplicate = stdout
        .lines()
        .find(|l| l.contains("duplicate request"))
        .unwrap();
    assert_eq!(duplicate.matches("→ 201").count(), 2, "{duplicate}");
}

#[test]
fn verify_does_not_hold_undeclared_claims_against_an_adapter() {
    let out = docket(&["adapter", "verify", "http-delivery-fire-and-forget"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("idempotency   not declared"), "{stdout}");
    assert!(stdout.contains("query         not declared"), "{stdout}");
}
