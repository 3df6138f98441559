//! What a newcomer and an adapter author meet first: the `docket` binary on its own, away
//! from this source tree.

use crate::host_process::free_port;
use serde_json::{Value, json};
use std::path::Path;
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
