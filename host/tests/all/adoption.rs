//! What a newcomer and an adapter author meet first: the `docket` binary on its own, away
//! from this source tree.

use crate::cli_adapter::verdicts;
use crate::host_process::free_port;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A host process that is killed when dropped.
struct Served(Child);

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A copy of the built binary in a directory of its own, started with no flags but the
/// port from an empty directory: it runs its embedded examples and shipped definitions.
#[tokio::test(flavor = "multi_thread")]
async fn a_copied_binary_serves_its_examples_from_any_directory() {
    let place = tempfile::tempdir().unwrap();
    let bin = place.path().join("docket");
    std::fs::copy(env!("CARGO_BIN_EXE_docket"), &bin).unwrap();
    let cwd = tempfile::tempdir().unwrap();
    assert!(!cwd.path().join("workflows").exists());

    let port = free_port();
    let log = cwd.path().join("host.log");
    let child = Command::new(&bin)
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .current_dir(cwd.path())
        .env("DOCKET_CACHE_DIR", cwd.path().join("cache"))
        .env("RUST_LOG", "info")
        .stdout(Stdio::from(std::fs::File::create(&log).unwrap()))
        .stderr(Stdio::from(
            std::fs::File::options().append(true).open(&log).unwrap(),
        ))
        .spawn()
        .unwrap();
    let _served = Served(child);
    let url = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();
    let log_text = || std::fs::read_to_string(&log).unwrap_or_default();
    crate::wait::until(
        "the copied host listens",
        Duration::from_secs(60),
        || async {
            let text = log_text();
            if text.contains("docket listening on") {
                Ok(())
            } else {
                Err(text)
            }
        },
    )
    .await;
    assert!(
        log_text().contains("deploying the definitions shipped with docket"),
        "{}",
        log_text()
    );

    let submitted: Value = client
        .post(format!("{url}/v1/intents"))
        .header("Idempotency-Key", "anywhere-1")
        .json(&json!({"workflow": "document-delivery", "input": crate::host_process::document("From anywhere")}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = submitted["workflow_id"].as_str().unwrap().to_string();
    crate::wait::until(
        "the workflow completes",
        Duration::from_secs(60),
        || async {
            let v: Value = client
                .get(format!("{url}/v1/workflows/{id}"))
                .send()
                .await
                .map_err(|e| e.to_string())?
                .json()
                .await
                .map_err(|e| e.to_string())?;
            if v["state"] == "completed" {
                Ok(())
            } else {
                Err(v.to_string())
            }
        },
    )
    .await;
    // Its database is where it was started.
    assert!(Path::new(&cwd.path().join(".docket/docket.db")).exists());

    // The command-line tools find the examples in the binary too.
    let out = Command::new(&bin)
        .args(["adapter", "inspect", "http-delivery"])
        .current_dir(cwd.path())
        .env("DOCKET_CACHE_DIR", cwd.path().join("cache"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("http-delivery@1.0.0"));
}

/// The built `docket` binary as a command, with the suite's compiled-component cache.
fn docket() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_docket"));
    command.env(
        "DOCKET_CACHE_DIR",
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../target/test-component-cache"
        ),
    );
    command
}

fn output_text(out: &std::process::Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A simulator process, killed when dropped.
fn simulator(args: &[&str]) -> (Served, String) {
    let port = free_port();
    let address = format!("127.0.0.1:{port}");
    let child = docket()
        .args(args)
        .args(["--listen", &address])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    crate::wait::until_blocking(
        &format!("{args:?} to listen"),
        Duration::from_secs(30),
        || {
            std::net::TcpStream::connect(&address)
                .map(drop)
                .map_err(|e| e.to_string())
        },
    );
    (Served(child), format!("http://{address}"))
}

/// `verify` judges adapters of two protocols by what they observe, against providers
/// given only as URLs in `verify.toml`: the honest ones hold every claim, and each lying
/// variant fails exactly its false claim, with the provider's answers as evidence.
#[test]
fn verify_judges_any_adapter_against_a_provider_named_in_verify_toml() {
    let (_delivery, delivery_url) = simulator(&["sim-provider"]);
    let (_ledger, ledger_url) = simulator(&["sim-ledger"]);
    let dir = tempfile::tempdir().unwrap();
    let delivery_toml = dir.path().join("delivery.toml");
    std::fs::write(
        &delivery_toml,
        format!(
            r#"
input = {{ recipient = "verify@example.com", document = "one", document_digest = "sha256:1" }}
other_input = {{ recipient = "verify@example.com", document = "two", document_digest = "sha256:2" }}
[provider]
url = "{delivery_url}"
secrets = {{ provider_token = "$DELIVERY_TOKEN" }}
"#
        ),
    )
    .unwrap();
    let ledger_toml = dir.path().join("ledger.toml");
    std::fs::write(
        &ledger_toml,
        format!(
            r#"
input = {{ account = "acc-1", amount_cents = 1250, memo = "verify" }}
other_input = {{ account = "acc-1", amount_cents = 9900, memo = "verify" }}
[provider]
url = "{ledger_url}"
secrets = {{ ledger_api_key = "docket-ledger-key" }}
"#
        ),
    )
    .unwrap();
    let verify = |component: &str, file: &Path| {
        let out = docket()
            .args(["adapter", "verify", component, "--file"])
            .arg(file)
            .env("DELIVERY_TOKEN", "docket-sim-token")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        (out.status.code(), stdout, output_text(&out))
    };
    let held = |claim: &str| (claim.to_string(), "held".to_string());
    // A real provider's clock cannot be moved: the key's retention is said to be unproven
    // there, and the claim holds where it could be proven.
    let held_where_provable = (
        "idempotency".to_string(),
        "held where it could be proven (see `unproven` above)".to_string(),
    );

    let (code, stdout, all) = verify("http-delivery", &delivery_toml);
    assert_eq!(code, Some(0), "{all}");
    assert!(
        stdout.contains(&format!("against the provider at {delivery_url}")),
        "{stdout}"
    );
    assert_eq!(
        verdicts(&stdout),
        [
            held_where_provable.clone(),
            held("query"),
            held("compensation")
        ]
    );
    let line = |scenario: &str| {
        stdout
            .lines()
            .find(|l| l.contains(scenario))
            .unwrap_or_else(|| panic!("no {scenario:?} in:\n{stdout}"))
            .to_string()
    };
    let retention = line("the key kept for its retention");
    assert!(
        retention.contains("unproven")
            && retention.contains("not provable against an external provider"),
        "{retention}"
    );
    // Visibility is proven against any provider, by asking again until the effect shows.
    let visibility = line("eventual visibility in lookups");
    assert!(
        visibility.contains(" held ") && visibility.contains("asked again until it showed"),
        "{visibility}"
    );
    // Evidence: what the provider answered, a lost answer marked as such.
    assert!(
        stdout.contains("provider: POST /v1/deliveries → 201"),
        "{stdout}"
    );
    assert!(stdout.contains("[not passed on]"), "{stdout}");

    let (code, stdout, all) = verify("ledger", &ledger_toml);
    assert_eq!(code, Some(0), "{all}");
    assert_eq!(
        verdicts(&stdout),
        [
            held_where_provable.clone(),
            held("query"),
            held("compensation")
        ]
    );
    assert!(
        stdout.contains("POST /api/v2/entries → 200 {\"entry\""),
        "{stdout}"
    );
    assert!(stdout.contains("/reversals → 200"), "{stdout}");

    let (code, stdout, all) = verify("http-delivery-lying", &delivery_toml);
    assert_eq!(code, Some(1), "{all}");
    let v = verdicts(&stdout);
    assert!(v[0].1.starts_with("FAILED"), "{stdout}");
    assert_eq!(v[1..], [held("query"), held("compensation")], "{stdout}");
    // The duplicate shows in the answers: two creations, two references.
    let duplicate = stdout
        .lines()
        .find(|l| l.contains("duplicate request"))
        .unwrap();
    assert_eq!(duplicate.matches("→ 201").count(), 2, "{duplicate}");

    let (code, stdout, all) = verify("ledger-lying", &ledger_toml);
    assert_eq!(code, Some(1), "{all}");
    let v = verdicts(&stdout);
    assert_eq!(
        v[..2],
        [held_where_provable.clone(), held("query")],
        "{stdout}"
    );
    assert!(v[2].1.starts_with("FAILED"), "{stdout}");
    assert!(
        stdout.contains("declared claims that did not hold: compensation\n"),
        "{stdout}"
    );
    // Its own lookup says the entry still stands.
    assert!(
        stdout.contains("in effect, provider says `posted`"),
        "{stdout}"
    );

    // A secret the adapter reads but verify.toml does not give is named.
    let bare = dir.path().join("bare.toml");
    std::fs::write(
        &bare,
        format!("input = {{ account = \"a\" }}\n[provider]\nurl = \"{ledger_url}\"\n"),
    )
    .unwrap();
    let (code, _, all) = verify("ledger", &bare);
    assert_eq!(code, Some(1), "{all}");
    assert!(all.contains("reads the secret `ledger_api_key`"), "{all}");
}

/// An adapter author's path, outside this repository: `docket adapter new`, the crate's own
/// test (it builds the component with `cargo build --target wasm32-wasip2 --release` and runs
/// it through `docket adapter invoke`), `inspect`, and `verify` with its `verify.toml`.
#[test]
fn a_scaffolded_adapter_builds_invokes_and_verifies_outside_the_repository() {
    let place = tempfile::tempdir().unwrap();
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    assert!(!place.path().starts_with(repo.canonicalize().unwrap()));
    let out = docket()
        .args(["adapter", "new", "acme-mailer", "--dir"])
        .arg(place.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", output_text(&out));
    let crate_dir = place.path().join("acme-mailer");
    for file in [
        "Cargo.toml",
        "README.md",
        "verify.toml",
        "src/lib.rs",
        "tests/invoke.rs",
        "scenarios/lost-answer-recovered-by-query.toml",
        "scenarios/rate-limited-then-delivered.toml",
        "workflows/acme-mailer-delivery.toml",
        "wit/docket.wit",
        "vendor/docket-guest/Cargo.toml",
    ] {
        assert!(crate_dir.join(file).is_file(), "no {file}");
    }
    // Making it again would overwrite the author's work: refused.
    let again = docket()
        .args(["adapter", "new", "acme-mailer", "--dir"])
        .arg(place.path())
        .output()
        .unwrap();
    assert!(!again.status.success());
    assert!(output_text(&again).contains("already exists"));

    let mut test = Command::new(env!("CARGO"));
    test.args(["test", "--quiet"])
        .current_dir(&crate_dir)
        .env("DOCKET", env!("CARGO_BIN_EXE_docket"));
    // Nothing of this build may leak into the scaffolded crate's.
    for var in [
        "CARGO_TARGET_DIR",
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_BUILD_RUSTFLAGS",
    ] {
        test.env_remove(var);
    }
    let out = test.output().unwrap();
    assert!(out.status.success(), "{}", output_text(&out));
    // Its tests are the invocation and the scenarios (which fail unless both cases pass).
    assert!(
        output_text(&out).contains("test result: ok. 2 passed"),
        "{}",
        output_text(&out)
    );

    let wasm = crate_dir.join("target/component-test/wasm32-wasip2/release/acme_mailer.wasm");
    let out = docket()
        .args(["adapter", "inspect"])
        .arg(&wasm)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", output_text(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("acme-mailer@0.1.0"));

    // From its directory, verify reads its verify.toml (no [provider]: the simulator).
    let out = docket()
        .args(["adapter", "verify"])
        .arg(&wasm)
        .current_dir(&crate_dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", output_text(&out));
    assert!(stdout.contains("using ./verify.toml"), "{stdout}");
    assert!(stdout.contains("every declared claim held"), "{stdout}");

    // A handler, built with the plain command (sharing the compiled dependencies above).
    let out = docket()
        .args(["adapter", "new", "greeter", "--handler", "--dir"])
        .arg(place.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", output_text(&out));
    let handler_dir = place.path().join("greeter");
    assert!(!handler_dir.join("verify.toml").exists());
    let mut build = Command::new(env!("CARGO"));
    build
        .args(["build", "--quiet", "--target", "wasm32-wasip2", "--release"])
        .current_dir(&handler_dir)
        .env("CARGO_TARGET_DIR", crate_dir.join("target/component-test"));
    for var in [
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_BUILD_RUSTFLAGS",
    ] {
        build.env_remove(var);
    }
    let out = build.output().unwrap();
    assert!(out.status.success(), "{}", output_text(&out));
    let out = docket()
        .args(["adapter", "invoke"])
        .arg(crate_dir.join("target/component-test/wasm32-wasip2/release/greeter.wasm"))
        .args(["--input", r#"{"name": "Ada"}"#])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", output_text(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("Hello, Ada!"));
}
