//! Builds the component and runs it through `docket adapter invoke`.

use std::process::Command;

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

#[test]
fn run_greets_by_name() {
    let wasm = component();
    let out = docket()
        .args(["adapter", "invoke", &wasm, "--input", r#"{"name": "Ada"}"#])
        .output()
        .expect("docket adapter invoke runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("Hello, Ada!"), "{stdout}");
}
