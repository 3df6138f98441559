//! Builds the component and runs it through `docket adapter invoke` against docket's
//! provider simulator (`docket sim-provider`): the call it makes, and the receipt it gives.

use std::net::TcpListener;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// `docket`: where `DOCKET` points, or on `PATH`.
fn docket() -> Command {
    Command::new(std::env::var("DOCKET").unwrap_or_else(|_| "docket".into()))
}

/// Builds the component for `wasm32-wasip2` (in a target directory of its own, so this
/// does not wait for the lock `cargo test` holds) and returns its path.
fn component() -> String {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/target/component-test");
    let status = Command::new(env!("CARGO"))
        .args(["build", "--target", "wasm32-wasip2", "--release"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("CARGO_TARGET_DIR", dir)
        .status()
        .expect("cargo runs");
    assert!(status.success(), "the component did not build");
    format!("{dir}/wasm32-wasip2/release/__crate__.wasm")
}

struct Simulator(Child);

impl Drop for Simulator {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn invoke_creates_one_delivery_and_answers_with_its_receipt() {
    let wasm = component();
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let address = format!("127.0.0.1:{port}");
    let _sim = Simulator(
        docket()
            .args(["sim-provider", "--listen", &address])
            .stderr(Stdio::null())
            .spawn()
            .expect("docket sim-provider starts"),
    );
    let started = Instant::now();
    while std::net::TcpStream::connect(&address).is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the simulator did not listen"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let base = format!("http://{address}");
    let invoke = |key: &str| {
        docket()
            .args(["adapter", "invoke", &wasm, "--key", key])
            .args(["--input", r#"{"recipient": "reader@example.com", "document": "Hello", "document_digest": "sha256:1"}"#])
            .args(["--setting", &format!("base_url={base}"), "--allow-host", &base])
            .args(["--secret", "provider_token=docket-sim-token"])
            .output()
            .expect("docket adapter invoke runs")
    };
    let first = invoke("scaffold-test-1");
    assert!(first.status.success(), "{}", text(&first));
    let receipt: serde_json::Value = serde_json::from_slice(&first.stdout).expect("JSON");
    let reference = receipt["ok"]["external_reference"].clone();
    assert!(reference.is_string(), "{receipt}");

    // The same key again: the provider deduplicates, the same delivery answers.
    let again = invoke("scaffold-test-1");
    let receipt: serde_json::Value = serde_json::from_slice(&again.stdout).expect("JSON");
    assert_eq!(receipt["ok"]["external_reference"], reference);
}

/// The rehearsals in `scenarios/`: the workflow in `workflows/` with this component, against
/// a scripted provider, host kills and a simulated clock (`docket scenario run`).
#[test]
fn the_scenarios_pass() {
    let wasm = component();
    let out = docket()
        .args(["scenario", "run", "scenarios", "--workflows", "workflows", "--components"])
        .arg(&wasm)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("docket runs");
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("2 cases: 2 passed, 0 failed"),
        "{}",
        text(&out)
    );
}
