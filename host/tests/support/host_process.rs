//! A real `docket serve` process for end-to-end tests: its own temp directory, database,
//! ports and config; killed when dropped. Its waits are bounded polls (`crate::wait`), and
//! an absence is asserted only after the host's tick counts moved ([`HostProcess::wait_ticks`]).

use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

/// The bearer token of the provider simulators the tests start themselves.
pub const PROVIDER_TOKEN: &str = "crash-test-token";
/// The secret `hook_secret` that signs notifications, in the Standard Webhooks form.
pub const HOOK_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// The delivery adapter contracts, each a build of `http-delivery`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Contract {
    /// Idempotent (sends `Idempotency-Key`) and queryable.
    Idempotent,
    /// Queryable, no idempotency claim.
    QueryOnly,
    /// Neither: an uncertain outcome can only go to a person.
    FireAndForget,
}

impl Contract {
    pub fn component(self) -> &'static str {
        match self {
            Contract::Idempotent => "http-delivery",
            Contract::QueryOnly => "http-delivery-query-only",
            Contract::FireAndForget => "http-delivery-fire-and-forget",
        }
    }

    /// The name of the workflow that delivers through this contract.
    pub fn workflow(self) -> &'static str {
        match self {
            Contract::Idempotent => "delivery-idempotent",
            Contract::QueryOnly => "delivery-query-only",
            Contract::FireAndForget => "delivery-fire-and-forget",
        }
    }

    /// The shipped `document-delivery` definition renamed, delivering through this contract:
    /// (file name, text), for [`HostOptions::workflows`].
    pub fn definition(self) -> (String, String) {
        let shipped =
            std::fs::read_to_string(repo_root().join("workflows/document-delivery.toml")).unwrap();
        let text = shipped
            .replace(
                "name = \"document-delivery\"",
                &format!("name = {:?}", self.workflow()),
            )
            .replace(
                "component = \"http-delivery\"",
                &format!("component = {:?}", self.component()),
            );
        assert!(
            text.contains(self.component()) && text.contains(self.workflow()),
            "the shipped definition changed shape; update Contract::definition"
        );
        (format!("{}.toml", self.workflow()), text)
    }
}

/// `docket.toml` text pointing every delivery adapter at the provider at `base`, each
/// taking the provider's events signed with `hook_secret`.
pub fn provider_config(base: &str) -> String {
    provider_config_with(base, "")
}

/// [`provider_config`] with `extra` lines in each adapter's table (e.g. its limits).
pub fn provider_config_with(base: &str, extra: &str) -> String {
    let mut text = format!(
        // `api_token` is the hostile test plugin's, for tests that run it in a host.
        "[secrets]\nvalues = {{ provider_token = {PROVIDER_TOKEN:?}, hook_secret = {HOOK_SECRET:?}, api_token = \"hostile-api-token\" }}\n"
    );
    for contract in [
        Contract::Idempotent,
        Contract::QueryOnly,
        Contract::FireAndForget,
    ] {
        text.push_str(&format!(
            "[adapters.{}]\nallow_hosts = [{base:?}]\nallow_secrets = [\"provider_token\"]\nsettings = {{ base_url = {base:?} }}\nwebhook_secret = \"hook_secret\"\n{extra}",
            contract.component()
        ));
    }
    text
}

/// Compiled components shared by every host the tests start, so that a fresh host directory
/// loads them instead of compiling them again.
fn shared_component_cache() -> PathBuf {
    let dir = repo_root().join("target/test-serve-component-cache");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Longest wait for tick counts to move: the scheduler looks at least once per idle poll
/// (1 s by default) and the registry once a second, on a machine that may be loaded.
const TICKS_WITHIN: Duration = Duration::from_secs(60);

pub struct HostProcess {
    child: Child,
    pub url: String,
    pub sim_url: String,
    pub dir: tempfile::TempDir,
    pub log: PathBuf,
    client: reqwest::Client,
    /// The provider a host with tokens delivers to, when the test gave none.
    _provider: Option<docket::sim::RunningSim>,
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

/// The secret a development host's simulator signs its events with; a test that configures
/// it is one where the provider posts events (see [`HostProcess::start`]).
pub const PROVIDER_EVENTS_SECRET: &str = "provider_webhook_secret";

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
    /// Base URL of a provider outside the process (see [`provider_config`]); the delivery
    /// adapters point at it and [`HostProcess::world`] reads it. Without it the host embeds
    /// its own simulator.
    pub provider: Option<String>,
    /// Run without `--test-controls` (no clock control, no failpoints).
    pub without_test_controls: bool,
    /// The database URL (`postgres://…`); default: a SQLite file in the host's directory.
    pub db: Option<String>,
    /// Admit and serve, but run no steps (`--pause-execution`).
    pub pause_execution: bool,
    /// Start with an empty workflows directory (definitions come from the database).
    pub no_workflow_files: bool,
    /// No provider allowance at all, even where the host embeds no simulator.
    pub no_provider: bool,
    /// Further arguments of `docket serve`.
    pub args: Vec<String>,
    /// The bearer token the helpers (`get`, `post`, `wait_for`, the clock) send, for a host
    /// with tokens.
    pub token: Option<String>,
    /// Further lines of each provider adapter's `[adapters.X]` table.
    pub adapter_settings: String,
}

impl HostProcess {
    pub async fn start(mut options: HostOptions) -> Self {
        // Only the zero-config development host embeds the provider simulator: a host with
        // tokens or another environment is given one of the test's own.
        let mut own_provider = None;
        let production_like =
            options.config.contains("[[tokens]]") || options.config.contains("environment =");
        if options.provider.is_none() && production_like && !options.no_provider {
            let sim = docket::sim::ProviderSim::start(
                docket::sim::SimConfig::new(PROVIDER_TOKEN),
                "127.0.0.1:0".parse().unwrap(),
            )
            .await
            .unwrap();
            options.provider = Some(sim.base_url());
            own_provider = Some(sim);
        }
        let dir = options.dir.unwrap_or_else(|| tempfile::tempdir().unwrap());
        let cache = dir.path().join("components");
        if !cache.exists() {
            std::os::unix::fs::symlink(shared_component_cache(), &cache).unwrap();
        }
        let workflows = dir.path().join("workflows");
        std::fs::create_dir_all(&workflows).unwrap();
        if !options.no_workflow_files {
            let shipped = repo_root().join("workflows/document-delivery.toml");
            std::fs::copy(&shipped, workflows.join("document-delivery.toml")).unwrap();
        }
        for (name, text) in &options.workflows {
            std::fs::write(workflows.join(name), text).unwrap();
        }
        let config = dir.path().join("docket.toml");
        let provider = options
            .provider
            .as_deref()
            .map(|base| provider_config_with(base, &options.adapter_settings))
            .unwrap_or_default();
        std::fs::write(
            &config,
            format!(
                "workflows = {:?}\n{}\n{provider}",
                workflows.display().to_string(),
                options.config
            ),
        )
        .unwrap();
        // A port chosen free may be taken by another test before the host binds it: then
        // the host is started again on other ports.
        let mut tries = 0;
        let (child, port, sim_port, log) = loop {
            tries += 1;
            let port = free_port();
            let sim_port = free_port();
            let log = dir.path().join(format!("serve-{port}.log"));
            let mut child = Command::new(env!("CARGO_BIN_EXE_docket"))
                .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
                .args((!options.without_test_controls).then_some("--test-controls"))
                .args(options.pause_execution.then_some("--pause-execution"))
                .args(&options.args)
                .args(["--sim-listen", &format!("127.0.0.1:{sim_port}")])
                .args([
                    "--db",
                    &options
                        .db
                        .clone()
                        .unwrap_or_else(|| dir.path().join("docket.db").display().to_string()),
                ])
                .env("DOCKET_CACHE_DIR", &cache)
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
                let _ = child.wait();
                if text.contains("Address already in use") && tries < 5 {
                    continue;
                }
                panic!("docket serve did not start:\n{text}");
            }
            break (child, port, sim_port, log);
        };
        let embeds_simulator = options.provider.is_none() && own_provider.is_none();
        let host = Self {
            child,
            url: format!("http://127.0.0.1:{port}"),
            sim_url: options
                .provider
                .unwrap_or_else(|| format!("http://127.0.0.1:{sim_port}")),
            dir,
            log,
            client: client_with(options.token.as_deref()),
            _provider: own_provider,
        };
        // A development host's simulator posts its signed events to the host, which settles
        // lost answers before any recovery query could. Only a test that names the events'
        // signing secret is about them; the others rehearse a provider that posts none. A
        // host whose config gives the adapters a provider embeds no simulator, and one
        // without test controls hides its fault settings: neither posts events to turn off.
        if embeds_simulator
            && !options.no_provider
            && !options.config.contains(PROVIDER_EVENTS_SECRET)
        {
            let _ = host
                .client
                .post(format!("{}/v1/_faults", host.sim_url))
                .json(&serde_json::json!({"webhook_url": null, "webhook_secret": null}))
                .send()
                .await;
        }
        host
    }

    /// Waits until the process exits by itself (e.g. a failpoint aborted it); `None` if it
    /// still runs after `within`.
    pub async fn wait_exit(&mut self, within: Duration) -> Option<ExitStatus> {
        let child = &mut self.child;
        crate::wait::poll(within, Duration::from_millis(25), || {
            let exited = child.try_wait().unwrap();
            async move { exited.ok_or_else(|| "still running".to_string()) }
        })
        .await
        .ok()
    }

    /// Waits until the process's log contains `needle`.
    pub async fn wait_for_log(&self, needle: &str, within: Duration) {
        crate::wait::until(&format!("the log saying {needle:?}"), within, || async {
            if self.log_text().contains(needle) {
                Ok(())
            } else {
                Err(self.log_tail(30))
            }
        })
        .await
    }

    /// The host's completed ticks since it started (test controls), by kind: `claim`,
    /// `recovery`, `registry`, `lease_renewal`, `retention`, `checker`, `notifier`.
    pub async fn ticks(&self) -> Value {
        let (status, counts) = self.get("/v1/_test/ticks").await;
        assert_eq!(status, 200, "reading the tick counts: {counts}");
        counts
    }

    /// Waits until the host's `kind` ticks moved by `by` since now. A tick under way now may
    /// have started before whatever the test just did, so `by` should be 2 to know that a
    /// whole tick ran after it; then an absence can be asserted.
    pub async fn wait_ticks(&self, kind: &str, by: u64) {
        self.wait_ticks_of(&[kind], by).await
    }

    /// The scheduler's loop looked again: its claim and its recovery ticks both moved by two
    /// since now, so whatever was ready or expired was claimed or recovered.
    pub async fn wait_scheduler_looked(&self) {
        self.wait_ticks_of(&["claim", "recovery"], 2).await
    }

    /// [`HostProcess::wait_ticks`] for several kinds at once, counted from one reading.
    pub async fn wait_ticks_of(&self, kinds: &[&str], by: u64) {
        let count = |counts: &Value, kind: &str| {
            counts[kind]
                .as_u64()
                .unwrap_or_else(|| panic!("no `{kind}` tick count in {counts}"))
        };
        let from = self.ticks().await;
        crate::wait::until(
            &format!("{kinds:?} ticks moving by {by} from {from}"),
            TICKS_WITHIN,
            || async {
                let now = self.ticks().await;
                if kinds.iter().all(|k| count(&now, k) >= count(&from, k) + by) {
                    Ok(())
                } else {
                    Err(now.to_string())
                }
            },
        )
        .await
    }

    /// Waits until the host has completed at least `n` ticks of `kind` since it started (the
    /// host has looked at least that often, e.g. once on start-up).
    pub async fn wait_ticks_reach(&self, kind: &str, n: u64) {
        crate::wait::until(
            &format!("{n} `{kind}` ticks since the start"),
            TICKS_WITHIN,
            || async {
                let now = self.ticks().await;
                match now[kind].as_u64() {
                    Some(count) if count >= n => Ok(()),
                    Some(_) => Err(now.to_string()),
                    None => panic!("no `{kind}` tick count in {now}"),
                }
            },
        )
        .await
    }

    /// Moves the host's clock forward (test controls).
    pub async fn advance_clock(&self, ms: u64) {
        let (status, body) = self
            .post("/v1/_test/clock", json!({"advance_ms": ms}))
            .await;
        assert_eq!(status, 200, "advancing the clock: {body}");
    }

    /// The attempts of one step, oldest first.
    pub async fn attempts(&self, id: &str, step: &str) -> Vec<Value> {
        let (status, page) = self
            .get(&format!(
                "/v1/workflows/{id}/steps/{step}/attempts?limit=500"
            ))
            .await;
        assert_eq!(status, 200, "{page}");
        page["data"].as_array().unwrap().clone()
    }

    /// The timeline as text, one `kind step text` line per event.
    pub async fn timeline_text(&self, id: &str) -> String {
        let (_, page) = self
            .get(&format!("/v1/workflows/{id}/timeline?limit=500"))
            .await;
        page["data"]
            .as_array()
            .map(|events| {
                events
                    .iter()
                    .map(|e| {
                        format!(
                            "{} {} {}\n",
                            e["kind"].as_str().unwrap_or("?"),
                            e["step"].as_str().unwrap_or("-"),
                            e["text"].as_str().unwrap_or("?")
                        )
                    })
                    .collect()
            })
            .unwrap_or_else(|| format!("(no timeline: {page})"))
    }

    /// The last `lines` lines of the process's log.
    pub fn log_tail(&self, lines: usize) -> String {
        tail(&self.log_text(), lines)
    }

    /// Asks the process to stop gracefully (SIGTERM, as a service manager would).
    pub fn terminate(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success());
    }

    /// Sends SIGHUP: the host reads its configuration again.
    pub fn hangup(&self) {
        let status = Command::new("kill")
            .args(["-HUP", &self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success());
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
        let (status, body) = checked("POST", r).await;
        (status, body.expect("a JSON answer"))
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        let r = self
            .client
            .get(format!("{}{path}", self.url))
            .send()
            .await
            .unwrap();
        let (status, body) = checked("GET", r).await;
        (status, body.unwrap_or(Value::Null))
    }

    pub async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let r = self
            .client
            .post(format!("{}{path}", self.url))
            .json(&body)
            .send()
            .await
            .unwrap();
        let (status, body) = checked("POST", r).await;
        (status, body.unwrap_or(Value::Null))
    }

    /// A POST with an `Idempotency-Key`.
    pub async fn post_with_key(&self, path: &str, key: &str, body: Value) -> (u16, Value) {
        let r = self
            .client
            .post(format!("{}{path}", self.url))
            .header("Idempotency-Key", key)
            .json(&body)
            .send()
            .await
            .unwrap();
        let (status, body) = checked("POST", r).await;
        (status, body.unwrap_or(Value::Null))
    }

    /// Polls a workflow until its state is one of `states`.
    pub async fn wait_for(&self, id: &str, states: &[&str], within: Duration) -> Value {
        let reached = crate::wait::poll(within, Duration::from_millis(50), || async {
            let (_, wf) = self.get(&format!("/v1/workflows/{id}")).await;
            if states.iter().any(|s| wf["state"] == *s) {
                Ok(wf)
            } else {
                Err(format!("{wf:#}"))
            }
        })
        .await;
        match reached {
            Ok(wf) => wf,
            Err(wf) => {
                let (_, timeline) = self
                    .get(&format!("/v1/workflows/{id}/timeline?limit=500"))
                    .await;
                panic!(
                    "workflow {id} did not reach {states:?} within {within:?}: {wf}\ntimeline: {timeline:#}\nthe host's log ends:\n{}",
                    self.log_tail(20)
                );
            }
        }
    }

    /// The provider simulator's own record of deliveries.
    pub async fn world(&self) -> Vec<Value> {
        let r: Value = self
            .client
            .get(format!("{}/v1/_world", self.sim_url))
            // A development host's simulator wants its token (a test host's does not ask).
            .bearer_auth(docket::sim::SimConfig::DEFAULT_TOKEN)
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

    /// The host process's id.
    pub fn pid(&self) -> u32 {
        self.child.id()
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

/// The last `lines` lines of `text`.
/// The status and JSON body (`None`: empty or not JSON) of an answer from the host's API,
/// held against its OpenAPI document.
async fn checked(method: &str, r: reqwest::Response) -> (u16, Option<Value>) {
    let status = r.status().as_u16();
    let path = match r.url().query() {
        Some(q) => format!("{}?{q}", r.url().path()),
        None => r.url().path().to_string(),
    };
    let text = r.text().await.unwrap_or_default();
    let body = serde_json::from_str::<Value>(&text).ok();
    crate::openapi_check::check(method, &path, status, body.as_ref());
    (status, body)
}

pub fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// A client that sends `token` as its bearer token, if given.
fn client_with(token: Option<&str>) -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    if let Some(token) = token {
        headers.insert(
            reqwest::header::AUTHORIZATION,
            format!("Bearer {token}").parse().unwrap(),
        );
    }
    reqwest::Client::builder()
        .default_headers(headers)
        .build()
        .unwrap()
}

/// A valid document-delivery input.
pub fn document(title: &str) -> Value {
    json!({"title": title, "recipient": "reader@example.com", "body": "Hello from docket"})
}
