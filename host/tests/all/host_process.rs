//! A real `docket serve` process for end-to-end tests: its own temp directory, database,
//! ports and config; killed when dropped.

use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct HostProcess {
    child: Child,
    pub url: String,
    pub sim_url: String,
    pub dir: tempfile::TempDir,
    pub log: PathBuf,
    client: reqwest::Client,
}

/// A free loopback port (bound and released; good enough for tests on one machine).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Options of a host under test.
#[derive(Default)]
pub struct HostOptions {
    /// Extra `docket.toml` text (besides `workflows = <dir>/workflows`).
    pub config: String,
    /// Extra definition files (name, text) beside the shipped ones.
    pub workflows: Vec<(String, String)>,
    pub env: Vec<(String, String)>,
    /// Reuse this directory (restart on the same database).
    pub dir: Option<tempfile::TempDir>,
}

impl HostProcess {
    pub async fn start(options: HostOptions) -> Self {
        let dir = options.dir.unwrap_or_else(|| tempfile::tempdir().unwrap());
        let workflows = dir.path().join("workflows");
        std::fs::create_dir_all(&workflows).unwrap();
        let shipped = repo_root().join("workflows/document-delivery.toml");
        std::fs::copy(&shipped, workflows.join("document-delivery.toml")).unwrap();
        for (name, text) in &options.workflows {
            std::fs::write(workflows.join(name), text).unwrap();
        }
        let config = dir.path().join("docket.toml");
        std::fs::write(
            &config,
            format!(
                "workflows = {:?}\n{}",
                workflows.display().to_string(),
                options.config
            ),
        )
        .unwrap();
        let port = free_port();
        let sim_port = free_port();
        let log = dir.path().join(format!("serve-{port}.log"));
        let mut child = Command::new(env!("CARGO_BIN_EXE_docket"))
            .args([
                "serve",
                "--test-controls",
                "--listen",
                &format!("127.0.0.1:{port}"),
            ])
            .args(["--sim-listen", &format!("127.0.0.1:{sim_port}")])
            .args(["--db", &dir.path().join("docket.db").display().to_string()])
            .args(["--config", &config.display().to_string()])
            .envs(options.env.iter().map(|(k, v)| (k.clone(), v.clone())))
            .env("DOCKET_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("start docket serve");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if line.starts_with("docket listening on") {
                    let _ = tx.send(());
                }
            }
        });
        if rx.recv_timeout(Duration::from_secs(60)).is_err() {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            let _ = child.kill();
            panic!("docket serve did not start:\n{text}");
        }
        Self {
            child,
            url: format!("http://127.0.0.1:{port}"),
            sim_url: format!("http://127.0.0.1:{sim_port}"),
            dir,
            log,
            client: reqwest::Client::new(),
        }
    }

    /// Kills the process and hands back its directory (to restart on the same database).
    pub fn kill(mut self) -> tempfile::TempDir {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let dir = tempfile::tempdir().unwrap();
        std::mem::replace(&mut self.dir, dir)
    }

    pub async fn submit(&self, workflow: &str, key: &str, input: Value) -> (u16, Value) {
        let r = self
            .client
            .post(format!("{}/v1/intents", self.url))
            .header("Idempotency-Key", key)
            .json(&json!({"workflow": workflow, "input": input}))
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.json().await.unwrap())
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        let r = self
            .client
            .get(format!("{}{path}", self.url))
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
    }

    pub async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let r = self
            .client
            .post(format!("{}{path}", self.url))
            .json(&body)
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
    }

    /// Polls a workflow until its state is one of `states`.
    pub async fn wait_for(&self, id: &str, states: &[&str], within: Duration) -> Value {
        let start = Instant::now();
        loop {
            let (_, wf) = self.get(&format!("/v1/workflows/{id}")).await;
            if states.iter().any(|s| wf["state"] == *s) {
                return wf;
            }
            if start.elapsed() > within {
                let (_, timeline) = self
                    .get(&format!("/v1/workflows/{id}/timeline?limit=500"))
                    .await;
                panic!(
                    "workflow {id} did not reach {states:?} within {within:?}: {wf:#}\ntimeline: {timeline:#}"
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The provider simulator's own record of deliveries.
    pub async fn world(&self) -> Vec<Value> {
        let r: Value = self
            .client
            .get(format!("{}/v1/_world", self.sim_url))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        r["data"].as_array().unwrap().clone()
    }

    pub async fn faults(&self, patch: Value) {
        let r = self
            .client
            .post(format!("{}/v1/_faults", self.sim_url))
            .json(&patch)
            .send()
            .await
            .unwrap();
        assert!(
            r.status().is_success(),
            "faults: {}",
            r.text().await.unwrap()
        );
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for HostProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A valid document-delivery input.
pub fn document(title: &str) -> Value {
    json!({"title": title, "recipient": "reader@example.com", "body": "Hello from docket"})
}
