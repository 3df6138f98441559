//! Runs one scenario in-process: the real scheduler, store (a SQLite file in a temporary
//! directory), runtime and components, on a simulated clock, with the scenario's scripted
//! providers answering the adapters' requests.
//!
//! The run settles, acts, and lets time pass, in that order, until every intent's workflow
//! has ended or waits for a person and no event is left:
//! - *settle*: recovery and claims run until neither finds anything, each claimed attempt
//!   running to its end, to a checkpoint an event waits at, or to an answer a provider
//!   holds;
//! - *act*: the next event fires — an event without `at` once the run has settled, one with
//!   `at` while an attempt of that step stands at that checkpoint;
//! - *let time pass*: with nothing to do, the clock moves to the next instant anything
//!   waits for (a retry, a lease's end, a held answer, a renewal), within `run_for`.
//!
//! A kill ends the attempt's task right after its checkpoint and the host with it: its
//! lease is left to run out, and a new host (another scheduler instance on the same store)
//! recovers the step.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::http::Request;
use serde_json::{Value, json};
use tower::ServiceExt;

use crate::capabilities::{AdapterPolicy, HostPolicy, HostRule, SecretSource};
use crate::catalog::{Components, Deployments};
use crate::clock::{Clock, ManualClock};
use crate::context::Context;
use crate::intent::WorkflowId;
use crate::runtime::{Runtime, RuntimeConfig, ScriptedAnswer, ScriptedHosts, ScriptedRequest};
use crate::scheduler::{AtCheckpoint, CheckpointHook, CheckpointSeen, Scheduler, SchedulerConfig};
use crate::store::sqlite::SqliteStore;
use crate::store::{
    ActiveChange, ActiveTarget, ComponentStore, ExecutorStore, NewComponent, ReadStore,
};

use super::file::{Event, EventAction, Kill, Scenario};
use super::provider::ScriptedProviders;

mod events;
mod expect;
mod operator;
mod settle;

/// Where every run's clock starts: 2026-01-01T00:00:00Z, so runs compare.
pub const START_MS: u64 = 1_767_225_600_000;

/// The longest a run may wait, in real time, for its attempts to settle.
const SETTLE_LIMIT: Duration = Duration::from_secs(120);

/// Most times the clock may move on its own in one run.
const MAX_CLOCK_MOVES: usize = 10_000;

/// Why a run could not be made at all (as opposed to a scenario that fails).
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("{0}")]
    Setup(String),
}

/// The components and definitions every case of one invocation runs with.
pub struct Bench {
    runtime: Runtime,
    switchboard: Arc<Switchboard>,
    /// Component bytes by name (highest version wins the first activation).
    components: Vec<Vec<u8>>,
    /// A migrated store holding every component, copied to start each run.
    template: SqliteStore,
    _template_dir: tempfile::TempDir,
    /// Definition files by workflow name: file, source.
    definitions: BTreeMap<String, (String, String)>,
    /// (name, version) of each loaded component, sorted.
    names: Vec<(String, String)>,
    /// The hosts retry unknown outcomes blindly (exploring a deliberately broken host).
    blind_retry: bool,
}

impl Bench {
    /// Compiles `components` once (cached in `cache_dir` across invocations) for every case:
    /// each with whether it is one of docket's examples, which is left out when this
    /// engine refuses it (the hostile test plugins) where a file of the team's is an error.
    pub async fn new(
        components: Vec<(Vec<u8>, bool)>,
        definitions: BTreeMap<String, (String, String)>,
        cache_dir: Option<PathBuf>,
    ) -> Result<Self, EngineError> {
        let switchboard = Arc::new(Switchboard::default());
        let runtime = Runtime::new(RuntimeConfig {
            cache_dir,
            max_instances: 16,
            scripted: Some(switchboard.clone()),
            ..RuntimeConfig::default()
        })
        .map_err(|e| EngineError::Setup(e.to_string()))?;
        let probe = Components::new(runtime.clone(), HostPolicy::default());
        let mut names = Vec::new();
        let mut usable = Vec::new();
        for (bytes, example) in components {
            match probe.load_bytes(&bytes).await {
                Ok(c) => {
                    names.push((c.name().to_string(), c.version().to_string()));
                    usable.push(bytes);
                }
                Err(_) if example => {}
                Err(e) => return Err(EngineError::Setup(format!("loading a component: {e}"))),
            }
        }
        let components = usable;
        names.sort();
        names.dedup();
        let setup =
            |what: &str, e: &dyn std::fmt::Display| EngineError::Setup(format!("{what}: {e}"));
        let template_dir = scratch_dir().map_err(|e| setup("making a directory", &e))?;
        let template = SqliteStore::open(&template_dir.path().join("template.db"))
            .await
            .map_err(|e| setup("opening the store", &e))?;
        for bytes in &components {
            let c = probe
                .load_bytes(bytes)
                .await
                .map_err(|e| setup("loading a component", &e))?;
            template
                .store_component(NewComponent {
                    digest: c.digest.clone(),
                    name: c.name().to_string(),
                    version: c.version().to_string(),
                    kind: c.world_name().to_string(),
                    bytes: bytes.clone(),
                    registered_at: START_MS,
                    author: "scenario".into(),
                })
                .await
                .map_err(|e| setup("storing a component", &e))?;
        }
        Ok(Self {
            runtime,
            switchboard,
            components,
            template,
            _template_dir: template_dir,
            definitions,
            names,
            blind_retry: false,
        })
    }

    /// Makes every host of later runs a broken one that retries unknown outcomes without
    /// asking the contract (a test control: exploring must find it).
    pub fn break_host_with_blind_retries(&mut self) {
        self.blind_retry = true;
    }

    /// The loaded components as (name, version).
    pub fn components(&self) -> &[(String, String)] {
        &self.names
    }
}

/// The runtime's scripted hosts: the current case's providers.
#[derive(Debug, Default)]
struct Switchboard(Mutex<Option<ScriptedProviders>>);

impl ScriptedHosts for Switchboard {
    fn answers(&self, host: &str) -> bool {
        self.0
            .lock()
            .unwrap()
            .as_ref()
            .is_some_and(|p| p.answers(host))
    }

    fn answer(
        &self,
        request: ScriptedRequest,
    ) -> std::pin::Pin<Box<dyn Future<Output = ScriptedAnswer> + Send>> {
        match self.0.lock().unwrap().clone() {
            Some(p) => p.answer(request),
            None => Box::pin(async { ScriptedAnswer::Lost }),
        }
    }
}

/// One host's view of the run's clock: while the host is paused its timers (a lease's
/// renewal) do not end, though the clock moves on for everyone else.
struct HostClock {
    clock: Arc<ManualClock>,
    paused: tokio::sync::watch::Sender<bool>,
}

impl Clock for HostClock {
    fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    fn advance(&self, ms: u64) {
        self.clock.advance(ms)
    }

    fn sleep_until(&self, at_ms: u64) -> crate::clock::Sleep {
        let sleep = self.clock.sleep_until(at_ms);
        let mut paused = self.paused.subscribe();
        Box::pin(async move {
            sleep.await;
            // A paused host wakes only once it goes on.
            let _ = paused.wait_for(|p| !*p).await;
        })
    }
}

/// A host of the run: its scheduler and its view of the clock.
struct Host {
    scheduler: Arc<Scheduler<SqliteStore>>,
    clock: Arc<HostClock>,
    owner: String,
}

/// How one case ended.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub name: String,
    pub file: String,
    /// Every assertion that did not hold (empty: passed).
    pub failures: Vec<String>,
    /// Each intent's timeline, as text.
    pub timelines: Vec<String>,
    /// The providers' world record.
    pub world: Value,
    /// Each intent's projection.
    pub projections: Vec<Value>,
    /// What the run did, in order (events fired, kills, clock moves).
    pub log: Vec<String>,
    pub real_ms: u64,
}

impl Outcome {
    pub fn passed(&self) -> bool {
        self.failures.is_empty()
    }
}

/// An attempt standing at a checkpoint an event waits for.
struct Parked {
    seen: CheckpointSeen,
    release: tokio::sync::oneshot::Sender<AtCheckpoint>,
}

/// What the checkpoint hook shares with the run.
#[derive(Default)]
struct Shared {
    /// The kill still to happen.
    kill: Option<Kill>,
    /// The `at` of the next event, if it has one.
    waiting_at: Option<Kill>,
    parked: Vec<Parked>,
    /// Owners that died.
    dead: Vec<String>,
    log: Vec<String>,
}

/// One case's host: store, scheduler(s), API.
struct Run {
    store: SqliteStore,
    clock: Arc<ManualClock>,
    providers: ScriptedProviders,
    api: axum::Router,
    /// The hosts' registry (one for all: they share the process).
    components: Arc<Components>,
    /// What the API notifies when an action made work ready.
    wake: Arc<tokio::sync::Notify>,
    /// Moves whenever an attempt of any host ends.
    ended: tokio::sync::Mutex<tokio::sync::watch::Receiver<u64>>,
    hosts: Vec<Host>,
    make: Box<dyn Fn(usize) -> Host + Send + Sync>,
    /// Hosts paused now, by owner.
    paused: Vec<String>,
    /// How many hosts share the store and take turns looking for work.
    want_hosts: usize,
    /// Whose turn it is.
    turn: usize,
    shared: Arc<Mutex<Shared>>,
    workflows: Vec<WorkflowId>,
    /// Each key submitted, with the workflow its admission answered.
    submitted: Vec<(String, Option<WorkflowId>)>,
    adapters_hosts: BTreeMap<String, String>,
    workflow: String,
    /// Exploring: an event that cannot happen any more is skipped, and a refused action is
    /// noted, not a failure (a schedule is drawn, not written).
    lenient: bool,
}

/// Runs `scenario`; an error only when the run could not be set up.
pub async fn run(bench: &Bench, scenario: &Scenario) -> Result<Outcome, EngineError> {
    run_with(bench, scenario, false).await
}

/// Runs a drawn schedule and checks the invariants every run must keep (see
/// [`super::explore`]); the outcome's failures are the broken invariants.
pub async fn explore(bench: &Bench, scenario: &Scenario) -> Result<Outcome, EngineError> {
    run_with(bench, scenario, true).await
}

async fn run_with(
    bench: &Bench,
    scenario: &Scenario,
    lenient: bool,
) -> Result<Outcome, EngineError> {
    let started = std::time::Instant::now();
    let dir = scratch_dir().map_err(|e| EngineError::Setup(e.to_string()))?;
    let mut run = Run::start(bench, scenario, dir.path()).await?;
    run.lenient = lenient;
    let mut failures = Vec::new();
    for intent in &scenario.intents {
        match run.submit(&intent.key, &intent.input).await {
            Ok(id) => {
                run.submitted.push((intent.key.clone(), Some(id.clone())));
                run.workflows.push(id);
            }
            Err(e) => failures.push(e),
        }
    }
    if failures.is_empty()
        && let Err(e) = run.drive(scenario).await
    {
        failures.push(e);
    }
    let (projections, timelines) = run.read_back().await;
    if failures.is_empty() {
        if lenient {
            failures.extend(run.invariants(&projections).await);
        } else {
            failures.extend(run.check(scenario, &projections, &timelines).await);
        }
    }
    let world = run.providers.world();
    // An attempt may still wait for an answer held past the run's end (one whose step
    // another host recovered): its answer is lost now, and the run waits for it to end, so
    // that nothing of this run acts during the next one.
    run.providers.close();
    if let Err(e) = run.wind_down().await {
        failures.push(e);
    }
    bench.switchboard.0.lock().unwrap().take();
    let log = std::mem::take(&mut run.shared.lock().unwrap().log);
    Ok(Outcome {
        name: scenario.name.clone(),
        file: scenario.file.clone(),
        failures,
        timelines,
        world,
        projections,
        log,
        real_ms: started.elapsed().as_millis() as u64,
    })
}

impl Run {
    async fn start(
        bench: &Bench,
        scenario: &Scenario,
        dir: &std::path::Path,
    ) -> Result<Run, EngineError> {
        let setup =
            |what: &str, e: &dyn std::fmt::Display| EngineError::Setup(format!("{what}: {e}"));
        // Migrated, with the components stored: a copy of the bench's template.
        let path = dir.join("docket.db");
        bench
            .template
            .copy_into(&path)
            .await
            .map_err(|e| setup("copying the prepared store", &e))?;
        let store = SqliteStore::open(&path)
            .await
            .map_err(|e| setup("opening the store", &e))?;
        let clock = ManualClock::new(START_MS);
        let providers = ScriptedProviders::new(
            scenario
                .adapters
                .values()
                .filter_map(|a| a.provider.clone())
                .collect(),
            clock.clone(),
        );
        *bench.switchboard.0.lock().unwrap() = Some(providers.clone());
        let mut policy = HostPolicy::default();
        let mut secrets = SecretSource::default();
        let mut adapters_hosts = BTreeMap::new();
        for (name, a) in &scenario.adapters {
            let mut hosts: Vec<HostRule> = Vec::new();
            for value in a.settings.values() {
                if value.contains("://")
                    && let Ok(rule) = value.parse::<HostRule>()
                {
                    hosts.push(rule);
                }
            }
            if let Some(p) = &a.provider {
                adapters_hosts.insert(name.clone(), p.host.clone());
                for url in [format!("https://{}", p.host), format!("http://{}", p.host)] {
                    if let Ok(rule) = url.parse::<HostRule>() {
                        hosts.push(rule);
                    }
                }
            }
            for (k, v) in &a.secrets {
                secrets.insert(k.clone(), v.clone());
            }
            policy.adapters.insert(
                name.clone(),
                AdapterPolicy {
                    allow_hosts: hosts,
                    allow_secrets: a.secrets.keys().cloned().collect(),
                    settings: a.settings.clone(),
                    digests: Default::default(),
                    allow_private: false,
                    webhook_key: None,
                },
            );
        }
        let components = Components::new(bench.runtime.clone(), policy);
        // The version a scenario names is active at the start; otherwise the highest.
        let mut highest: BTreeMap<String, (semver::Version, String)> = BTreeMap::new();
        let mut pinned: BTreeMap<String, String> = BTreeMap::new();
        for bytes in &bench.components {
            let c = components
                .load_bytes(bytes)
                .await
                .map_err(|e| setup("loading a component", &e))?;
            if scenario
                .adapters
                .get(c.name())
                .and_then(|a| a.version.as_deref())
                == Some(c.version())
            {
                pinned.insert(c.name().to_string(), c.digest.clone());
            }
            if let Ok(v) = semver::Version::parse(c.version()) {
                let entry = highest
                    .entry(c.name().to_string())
                    .or_insert((v.clone(), c.digest.clone()));
                if v > entry.0 {
                    *entry = (v, c.digest.clone());
                }
            }
        }
        for (name, (_, highest)) in highest {
            let digest = pinned.remove(&name).unwrap_or(highest);
            store
                .set_active(ActiveChange {
                    name,
                    target: ActiveTarget::IfNone(digest),
                    author: "scenario".into(),
                    now: clock.now_ms(),
                })
                .await
                .map_err(|e| setup("activating a component", &e))?;
        }
        let components = Arc::new(components);
        components
            .sync(&store)
            .await
            .map_err(|e| setup("taking over the active versions", &e))?;
        let deployments = Arc::new(Deployments::new(store.clone()));
        // Only the scenario's own workflow: the others may use adapters it sets up nothing for.
        if let Some((file, text)) = bench.definitions.get(&scenario.workflow) {
            deployments
                .deploy(file, text, components.as_ref(), clock.now_ms())
                .await
                .map_err(|e| setup(&format!("deploying {file}"), &e))?;
        }
        let shared = Arc::new(Mutex::new(Shared {
            kill: scenario.kill.clone(),
            ..Shared::default()
        }));
        let hook = {
            let shared = shared.clone();
            CheckpointHook(Arc::new(move |seen: CheckpointSeen| {
                let shared = shared.clone();
                Box::pin(async move { at_checkpoint(&shared, seen).await })
            }))
        };
        let secrets = Arc::new(secrets);
        // One progress signal for every host and the API, as in one host process: an
        // operator's query or retry answers once the attempt it asked for has ended.
        let progress = Arc::new(crate::scheduler::Progress::default());
        let lease = scenario.lease;
        let failpoint = bench
            .blind_retry
            .then_some(crate::scheduler::Failpoint::BlindRetry);
        let make = {
            let store = store.clone();
            let deployments = deployments.clone();
            let components = components.clone();
            let clock = clock.clone();
            let progress = progress.clone();
            Box::new(move |n: usize| {
                let owner = format!("host-{n}");
                let host_clock = Arc::new(HostClock {
                    clock: clock.clone(),
                    paused: tokio::sync::watch::Sender::new(false),
                });
                let scheduler = Scheduler::new(
                    store.clone(),
                    deployments.clone(),
                    components.clone(),
                    secrets.clone(),
                    host_clock.clone(),
                    SchedulerConfig {
                        owner: owner.clone(),
                        lease,
                        max_concurrent: 16,
                        checkpoints: Some(hook.clone()),
                        failpoint,
                        progress: Some(progress.clone()),
                        ..SchedulerConfig::default()
                    },
                    Arc::new(tokio::sync::Notify::new()),
                );
                Host {
                    scheduler,
                    clock: host_clock,
                    owner,
                }
            }) as Box<dyn Fn(usize) -> Host + Send + Sync>
        };
        let mut context = Context::new(store.clone(), deployments.clone(), clock.clone());
        context.components = Some(components.clone());
        let ended = tokio::sync::Mutex::new(progress.subscribe());
        context.progress = progress;
        let wake = context.wake.clone();
        let components = components.clone();
        let api = crate::api::router(context);
        let first = make(1);
        Ok(Run {
            store,
            clock,
            providers,
            api,
            components,
            wake,
            ended,
            hosts: vec![first],
            make,
            paused: Vec::new(),
            want_hosts: scenario.hosts.max(1),
            turn: 0,
            shared,
            workflows: Vec::new(),
            submitted: Vec::new(),
            adapters_hosts,
            lenient: false,
            workflow: scenario.workflow.clone(),
        })
    }

    /// The scheduler whose turn it is among the hosts that are neither dead nor paused;
    /// new hosts replace those that died, so `hosts` of them are up.
    fn host(&mut self) -> Arc<Scheduler<SqliteStore>> {
        let dead = self.shared.lock().unwrap().dead.clone();
        let up =
            |h: &Host, paused: &[String]| !dead.contains(&h.owner) && !paused.contains(&h.owner);
        while self.hosts.iter().filter(|h| up(h, &self.paused)).count() < self.want_hosts {
            let host = (self.make)(self.hosts.len() + 1);
            self.hosts.push(host);
        }
        let live: Vec<&Host> = self.hosts.iter().filter(|h| up(h, &self.paused)).collect();
        let chosen = live[self.turn % live.len()].scheduler.clone();
        self.turn += 1;
        chosen
    }

    async fn call(
        &self,
        method: &str,
        path: &str,
        key: Option<&str>,
        body: Option<Value>,
    ) -> (u16, Value) {
        call_api(self.api.clone(), method, path, key, body).await
    }

    /// A `POST` whose answer waits for an attempt it makes ready (an operator's query or
    /// retry): once the API has made the work ready, the hosts run it while the request
    /// waits, as the host loop would.
    async fn call_while_hosts_work(
        &mut self,
        path: &str,
        key: &str,
        body: Value,
    ) -> Result<(u16, Value), String> {
        let wake = self.wake.clone();
        // A wake-up stored by an earlier request (nobody waited for it) is not this one's.
        {
            let stale = wake.notified();
            tokio::pin!(stale);
            let _ = tokio::time::timeout(Duration::ZERO, stale).await;
        }
        let woken = wake.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        let mut call = tokio::spawn(call_api(
            self.api.clone(),
            "POST",
            path.to_string(),
            Some(key.to_string()),
            Some(body),
        ));
        tokio::select! {
            biased;
            done = &mut call => return done.map_err(|e| format!("the request ended abnormally: {e}")),
            _ = &mut woken => {}
        }
        // The hosts settle once, as they would on the wake-up (an attempt standing where an
        // event waits goes on); then the request is answered. Settling again while it is
        // answered would make how often the hosts looked depend on real time.
        while let Some(parked) = self.settle().await? {
            let _ = parked.release.send(AtCheckpoint::Continue);
            self.let_attempts_run().await?;
        }
        let limit = std::time::Instant::now() + SETTLE_LIMIT;
        while !call.is_finished() {
            if std::time::Instant::now() > limit {
                return Err(format!("{path} was not answered within {SETTLE_LIMIT:?}"));
            }
            self.nap().await;
        }
        call.await
            .map_err(|e| format!("the request ended abnormally: {e}"))
    }

    async fn submit(&self, key: &str, input: &Value) -> Result<WorkflowId, String> {
        let workflow = self.definition_name();
        let (status, answer) = self
            .call(
                "POST",
                "/v1/intents",
                Some(key),
                Some(json!({"workflow": workflow, "input": input})),
            )
            .await;
        match answer["workflow_id"].as_str() {
            Some(id) if status < 300 => Ok(WorkflowId(id.to_string())),
            _ => Err(format!(
                "submitting intent `{key}` was answered {status}: {answer}"
            )),
        }
    }

    fn definition_name(&self) -> String {
        self.workflow.clone()
    }

    /// Settles, acts and lets time pass until every workflow rests and no event is left.
    async fn drive(&mut self, scenario: &Scenario) -> Result<(), String> {
        let mut next = 0;
        let horizon = START_MS.saturating_add(scenario.run_for.as_millis() as u64);
        let mut moves = 0;
        loop {
            self.shared.lock().unwrap().waiting_at =
                scenario.events.get(next).and_then(|e| e.at.clone());
            let parked = self.settle().await?;
            if let Some(parked) = parked {
                // An attempt stands where the next event waits: it fires, with any that
                // follow at the same place, and the attempt goes on.
                if let EventAction::Pause(pause) = scenario.events[next].action {
                    next += 1;
                    self.pause(parked, pause).await?;
                    continue;
                }
                let at = scenario.events[next].at.clone();
                self.note(format!(
                    "{} {}'s attempt of `{}` stands at checkpoint {}",
                    crate::intent::rfc3339(self.clock.now_ms()),
                    parked.seen.owner,
                    parked.seen.step,
                    parked.seen.checkpoint
                ));
                while let Some(event) = scenario.events.get(next).filter(|e| e.at == at) {
                    self.fire(event).await?;
                    next += 1;
                }
                let _ = parked.release.send(AtCheckpoint::Continue);
                self.let_attempts_run().await?;
                continue;
            }
            if let Some(event) = scenario.events.get(next)
                && event.at.is_none()
                && (!event.at_rest || self.all_rest().await)
            {
                self.fire(event).await?;
                next += 1;
                continue;
            }
            let waiting_event = next < scenario.events.len();
            if self.all_rest().await {
                if !waiting_event {
                    return Ok(());
                }
                if self.lenient {
                    // Nothing is under way: an event waiting for a checkpoint cannot happen.
                    self.note(format!(
                        "skipped: {} (the run had already come to rest)",
                        describe_at(&scenario.events[next])
                    ));
                    next += 1;
                    continue;
                }
            }
            // Nothing to do now: the clock moves to the next instant anything waits for.
            let now = self.clock.now_ms();
            let due = self
                .store
                .next_due(now)
                .await
                .map_err(|e| format!("reading the next deadline: {e}"))?;
            let wake = [due, self.clock.next_wake()].into_iter().flatten().min();
            match wake {
                Some(at) if at <= horizon && moves < MAX_CLOCK_MOVES => {
                    moves += 1;
                    self.clock.advance_to(at.max(now + 1));
                }
                _ if waiting_event && self.lenient => {
                    // A drawn event that cannot happen any more; the invariants judge
                    // where the run stands.
                    self.note(format!(
                        "skipped: {} (nothing was left to do)",
                        describe_at(&scenario.events[next])
                    ));
                    next += 1;
                }
                _ if waiting_event => {
                    let e = &scenario.events[next];
                    return Err(format!(
                        "the event at line {} never happened: {} (nothing was left to do by {})",
                        e.line,
                        describe_at(e),
                        crate::intent::rfc3339(now)
                    ));
                }
                _ => return Ok(()),
            }
        }
    }

    fn note(&self, text: String) {
        self.shared.lock().unwrap().log.push(text);
    }

    async fn read_back(&self) -> (Vec<Value>, Vec<String>) {
        let mut projections = Vec::new();
        let mut timelines = Vec::new();
        for id in &self.workflows {
            let (_, wf) = self
                .call("GET", &format!("/v1/workflows/{id}"), None, None)
                .await;
            projections.push(wf);
            let text = match self.store.timeline(id, 0, 10_000).await {
                Ok(events) => events
                    .iter()
                    .map(|e| format!("{}  {}\n", crate::intent::rfc3339(e.at), e.text))
                    .collect(),
                Err(e) => format!("(the timeline could not be read: {e})"),
            };
            timelines.push(text);
        }
        (projections, timelines)
    }
}

fn describe_at(e: &Event) -> String {
    match &e.at {
        Some(k) => format!("an attempt of `{}` at checkpoint {}", k.step, k.checkpoint),
        None if e.at_rest => "once the run was at rest".into(),
        None => "once the run settled".into(),
    }
}

/// A run's temporary directory: in memory where the system has a RAM file system
/// (`/dev/shm`), since a run's store is thrown away with it and a commit's fsync there
/// costs nothing; otherwise the system's temporary directory.
fn scratch_dir() -> std::io::Result<tempfile::TempDir> {
    let shm = std::path::Path::new("/dev/shm");
    if shm.is_dir()
        && let Ok(dir) = tempfile::Builder::new()
            .prefix("docket-scenario-")
            .tempdir_in(shm)
    {
        return Ok(dir);
    }
    tempfile::tempdir()
}

/// One request to the in-process API: its status and JSON body.
async fn call_api(
    api: axum::Router,
    method: impl AsRef<str>,
    path: impl AsRef<str>,
    key: Option<impl AsRef<str>>,
    body: Option<Value>,
) -> (u16, Value) {
    let mut request = Request::builder()
        .method(method.as_ref())
        .uri(path.as_ref());
    if let Some(key) = key {
        request = request.header("Idempotency-Key", key.as_ref());
    }
    let request = request
        .body(body.map_or_else(Body::empty, |b| Body::from(b.to_string())))
        .expect("a request");
    let response = api.oneshot(request).await.expect("infallible");
    let status = response.status().as_u16();
    let bytes = axum::body::to_bytes(response.into_body(), 64 << 20)
        .await
        .unwrap_or_default();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// The checkpoint hook: kills where the scenario says, parks where the next event waits.
async fn at_checkpoint(shared: &Mutex<Shared>, seen: CheckpointSeen) -> AtCheckpoint {
    let wait = {
        let mut s = shared.lock().unwrap();
        let here = |k: &Kill| k.step == seen.step && k.checkpoint == seen.checkpoint;
        if s.kill.as_ref().is_some_and(here) {
            s.kill = None;
            s.dead.push(seen.owner.clone());
            s.log.push(format!(
                "{} killed after checkpoint {} of `{}`",
                seen.owner, seen.checkpoint, seen.step
            ));
            return AtCheckpoint::Kill;
        }
        if s.waiting_at.as_ref().is_some_and(here) {
            s.waiting_at = None;
            let (tx, rx) = tokio::sync::oneshot::channel();
            s.parked.push(Parked {
                seen: seen.clone(),
                release: tx,
            });
            Some(rx)
        } else {
            None
        }
    };
    match wait {
        Some(rx) => rx.await.unwrap_or(AtCheckpoint::Continue),
        None => AtCheckpoint::Continue,
    }
}
