//! The composition root: [`App::build`] assembles a host from its configuration — store,
//! runtime, components, definitions, scheduler, API and console — and [`App::run`] runs it
//! as a set of named, supervised tasks until it is told to stop.
//!
//! Supervision: every long-running part is a task of one [`Supervisor`]. The first task to
//! end while the host should be running — by returning, failing or panicking — stops the
//! whole host, and [`App::run`] returns [`AppError::TaskEnded`] naming it, so the process
//! exits non-zero and a service manager restarts it. A host that kept admitting work with a
//! dead scheduler would accept intents it never runs.
//!
//! Stopping is a drain, not an abort: the server stops accepting and finishes the requests
//! under way, the scheduler stops claiming and lets attempts finish (up to the configured
//! grace), then the host ends its remaining leases so another host recovers them at once.

pub mod listener;
mod supervisor;

pub use supervisor::{Supervisor, TaskEnd};

use crate::access::Auth;
use crate::capabilities::{AdapterPolicy, HostRule};
use crate::catalog::{Components, Deployments};
use crate::clock::{Clock, SystemClock};
use crate::config::HostConfig;
use crate::context::{Context, ContextStore, Limits};
use crate::runtime::{Runtime, RuntimeConfig};
use crate::scheduler::{Scheduler, SchedulerConfig, Ticks};
use crate::sim::{ProviderSim, RunningSim, SimConfig};
use crate::store::postgres::PgStore;
use crate::store::sqlite::SqliteStore;
use crate::store::{
    ActiveChange, ActiveTarget, ComponentStore, DefinitionStore, ExecutorStore, NewComponent,
};
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// How often a host catches up with the registry: the bound within which every host picks
/// up an activation or rollback made elsewhere (plus, for a version new to the host, the
/// time to compile it once).
pub const REGISTRY_POLL: Duration = Duration::from_secs(1);

/// Where a host's database is when nothing says otherwise.
pub const DEFAULT_DB: &str = ".docket/docket.db";

/// How long, past the shutdown grace, the HTTP server may take to finish its requests
/// before they are cut.
const SERVER_DRAIN_MARGIN: Duration = Duration::from_secs(5);

/// Adapters pointed at the built-in provider simulator when nothing else is configured.
const SIM_ADAPTERS: &[&str] = &[
    "http-delivery",
    "http-delivery-query-only",
    "http-delivery-fire-and-forget",
    "http-delivery-lying",
];

/// What the command line adds to the configuration file.
#[derive(Debug, Clone)]
pub struct Options {
    /// The API's address; else the config's `listen`, else `127.0.0.1:8080`.
    pub listen: Option<SocketAddr>,
    /// The database; else the config's `db`, else [`DEFAULT_DB`].
    pub db: Option<String>,
    /// Serve the test controls and honour `DOCKET_FAILPOINT` (loopback only).
    pub test_controls: bool,
    /// Where the embedded provider simulator listens when it is used.
    pub sim_listen: SocketAddr,
    /// Admit and serve reads, but run no steps.
    pub pause_execution: bool,
    /// The configuration file, read again on SIGHUP (tokens, secrets, allowances).
    pub config_path: Option<PathBuf>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            listen: None,
            db: None,
            test_controls: false,
            sim_listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            pause_execution: false,
            config_path: None,
        }
    }
}

/// Why a host could not start, or why it stopped on its own.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// The configuration asks for something the host refuses: fix it and start again.
    #[error("{0}")]
    Refused(String),
    /// A part of the host could not be set up; the message says which and why.
    #[error("{context}: {cause}")]
    Setup { context: String, cause: String },
    /// A supervised task ended while the host should have been running.
    #[error("the `{task}` task ended unexpectedly ({how}); the host stopped")]
    TaskEnded { task: &'static str, how: TaskEnd },
}

/// Adds what was being set up to an error.
trait SetupContext<T> {
    fn setup(self, context: impl FnOnce() -> String) -> Result<T, AppError>;
}

impl<T, E: std::fmt::Display> SetupContext<T> for Result<T, E> {
    fn setup(self, context: impl FnOnce() -> String) -> Result<T, AppError> {
        self.map_err(|e| AppError::Setup {
            context: context(),
            cause: e.to_string(),
        })
    }
}

/// A host, built and serving, until [`App::run`] ends.
pub struct App {
    /// The address the API and the console listen on.
    pub addr: SocketAddr,
    /// The metrics listener's address (`metrics_listen`), if it has one.
    pub metrics_addr: Option<SocketAddr>,
    /// Whether it speaks HTTPS (`[tls]`).
    pub https: bool,
    /// The clock every part of the host reads; in-process callers (the demo) may move it.
    pub clock: Arc<SystemClock>,
    /// Completed scheduler ticks (claim, recovery, registry, lease renewal).
    pub ticks: Arc<Ticks>,
    sim: Option<RunningSim>,
    tasks: Supervisor,
    stop: CancellationToken,
    /// Waits (up to the grace) for the attempts under way, then ends this host's leases.
    drain: Drain,
    grace: Duration,
}

type Drain = Box<
    dyn FnOnce(
            Duration,
        ) -> std::pin::Pin<
            Box<dyn Future<Output = Result<u64, crate::store::StoreError>> + Send>,
        > + Send,
>;

impl App {
    /// Builds a host from the options and a loaded configuration and starts its tasks; the
    /// API answers from the moment this returns.
    pub async fn build(options: &Options, mut config: HostConfig) -> Result<App, AppError> {
        let listen = options
            .listen
            .or(config.listen)
            .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 8080)));
        if !listen.ip().is_loopback() && config.tls.is_none() && !config.behind_tls_proxy {
            return Err(AppError::Refused(format!(
                "refusing to serve plain HTTP on {listen}: tokens and sessions would cross the network in the clear; configure [tls] cert and key, or set behind_tls_proxy = true when a proxy terminates TLS in front of the host"
            )));
        }
        if config.tokens.is_empty() && !listen.ip().is_loopback() {
            return Err(AppError::Refused(format!(
                "refusing to listen on {listen} without API tokens: anyone could act as an operator; configure [[tokens]] in docket.toml or listen on 127.0.0.1"
            )));
        }
        if config.tokens.is_empty()
            && let Some(metrics) = config.metrics_listen
            && !metrics.ip().is_loopback()
        {
            return Err(AppError::Refused(format!(
                "refusing to serve metrics on {metrics} without API tokens: an open host's listeners stay on loopback; configure [[tokens]] in docket.toml or set metrics_listen to 127.0.0.1"
            )));
        }
        if options.test_controls && !listen.ip().is_loopback() {
            return Err(AppError::Refused(format!(
                "--test-controls is refused unless the host listens on loopback (it was {listen})"
            )));
        }
        let clock = SystemClock::new();
        let sim = embed_simulator(options, &mut config, &clock, listen).await?;
        let db = options
            .db
            .clone()
            .or(config.db.clone())
            .unwrap_or_else(|| DEFAULT_DB.into());
        let parts = Parts {
            options,
            config,
            sim,
            clock,
            listen,
        };
        if is_postgres(&db) {
            if parts.sim.is_some() {
                tracing::warn!(
                    "this host embeds its own provider simulator; other hosts on this database embed theirs, so a step recovered on another host would ask another provider. With several hosts, run one `docket sim-provider` and point [adapters.http-delivery] at it"
                );
            }
            let store = PgStore::connect(&db).await.setup(|| {
                format!(
                    "connecting to PostgreSQL at {}",
                    crate::store::without_password(&db)
                )
            })?;
            tracing::info!(
                "database: PostgreSQL at {}",
                crate::store::without_password(&db)
            );
            // Compiled components are this host's own cache (DOCKET_CACHE_DIR, else the
            // user's cache directory); the database holds the truth.
            let cache_dir =
                component_cache_dir().unwrap_or_else(|| PathBuf::from(".docket/components"));
            return assemble(parts, store, cache_dir).await;
        }
        let db_path = sqlite_path(&db);
        if let Some(dir) = db_path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).setup(|| format!("creating {}", dir.display()))?;
        }
        let store = SqliteStore::open(&db_path)
            .await
            .setup(|| format!("opening the SQLite database {}", db_path.display()))?;
        tracing::info!("database: SQLite at {}", db_path.display());
        let cache_dir = db_path
            .parent()
            .unwrap_or(Path::new("."))
            .join("components");
        assemble(parts, store, cache_dir).await
    }

    /// The embedded provider simulator, when this host runs one.
    pub fn simulator(&self) -> Option<&RunningSim> {
        self.sim.as_ref()
    }

    /// A token that stops the host when cancelled, as the `shutdown` future of
    /// [`App::run`] does.
    pub fn stopper(&self) -> CancellationToken {
        self.stop.clone()
    }

    /// The names of the host's tasks still running (not yet returned): after a stop, what
    /// has yet to see it.
    pub fn unfinished_tasks(&self) -> Vec<&'static str> {
        self.tasks.unfinished()
    }

    /// Runs until `shutdown` completes (or the [`stopper`](Self::stopper) is cancelled),
    /// then drains; or until a task ends on its own, then stops the rest and returns
    /// [`AppError::TaskEnded`] naming it.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send) -> Result<(), AppError> {
        let App {
            mut tasks,
            stop,
            drain,
            grace,
            sim,
            ..
        } = self;
        // A task that returns because the stop was asked (before `run`, say, as the demo
        // does) ended as told: only a task ending on its own is a failure.
        let died = tokio::select! {
            _ = shutdown => None,
            _ = stop.cancelled() => None,
            ended = tasks.next_end() => ended.filter(|_| !stop.is_cancelled()),
        };
        // Readiness fails from here on, so a load balancer sends nothing new meanwhile.
        if let Some((task, how)) = &died {
            tracing::error!("the `{task}` task ended unexpectedly ({how}); stopping the host");
            tasks
                .health()
                .stopping(format!("the `{task}` task ended unexpectedly"));
        } else {
            tracing::info!("shutting down: finishing the requests and attempts under way");
            tasks.health().stopping("shutting down");
        }
        stop.cancel();
        // The server finishes its requests and the scheduler its claims meanwhile.
        let cut = tasks.wait_all(grace + SERVER_DRAIN_MARGIN).await;
        for task in cut {
            tracing::warn!("the `{task}` task did not finish in time and was cut");
        }
        match drain(grace).await {
            Ok(n) => tracing::info!("shut down; ended {n} leases still held"),
            Err(e) => tracing::error!("shut down; ending the leases failed: {e}"),
        }
        drop(sim);
        match died {
            Some((task, how)) => Err(AppError::TaskEnded { task, how }),
            None => Ok(()),
        }
    }
}

/// Everything decided before the store is open.
struct Parts<'a> {
    options: &'a Options,
    config: HostConfig,
    sim: Option<RunningSim>,
    clock: Arc<SystemClock>,
    listen: SocketAddr,
}

/// Whether the built-in provider simulator may stand in for a delivery service nobody
/// configured: only in the zero-config development mode — no tokens, a loopback listener,
/// environment `development` — never on a host that could be production.
pub fn simulator_allowed(config: &HostConfig, listen: SocketAddr) -> bool {
    config.tokens.is_empty()
        && listen.ip().is_loopback()
        && config.environment == crate::catalog::DEFAULT_ENVIRONMENT
}

/// The embedded provider simulator stands in for a delivery service nobody configured, in
/// the development mode only ([`simulator_allowed`]). It reads the host's clock, so moving
/// that clock (test controls) moves the provider's time too: key retention and eventual
/// visibility stay consistent with the host's. It never replaces a secret the operator
/// configured (it takes that token), and serves its fault endpoint only with
/// `--test-controls`.
async fn embed_simulator(
    options: &Options,
    config: &mut HostConfig,
    clock: &Arc<SystemClock>,
    listen: SocketAddr,
) -> Result<Option<RunningSim>, AppError> {
    if config.policy.adapters.contains_key("http-delivery") || !simulator_allowed(config, listen) {
        return Ok(None);
    }
    let host_clock = clock.clone();
    let sim_clock: crate::sim::Clock =
        Arc::new(move || std::time::UNIX_EPOCH + Duration::from_millis(host_clock.now_ms()));
    let token = config
        .secrets
        .get("provider_token")
        .map(|t| t.expose().to_string())
        .unwrap_or_else(|| SimConfig::DEFAULT_TOKEN.to_string());
    let sim_config = SimConfig {
        fault_endpoint: options.test_controls,
        // Loopback names only, always; its world readable without the token only to a
        // test host (`--test-controls`), as its faults are.
        guarded: true,
        ..SimConfig::new(token.clone())
    };
    let running = ProviderSim::with_clock(sim_config, sim_clock)
        .spawn(options.sim_listen)
        .await
        .setup(|| "starting the built-in provider simulator".into())?;
    let url = running.base_url();
    tracing::warn!(
        "development mode: no delivery service configured, so http-delivery (and its variants) point at the built-in provider simulator at {url}; nothing leaves this machine"
    );
    point_at_simulator(config, &url, &token)?;
    Ok(Some(running))
}

/// Gives the delivery adapters the simulator at `url` as their provider (and `token`,
/// unless the operator configured one).
fn point_at_simulator(config: &mut HostConfig, url: &str, token: &str) -> Result<(), AppError> {
    let rule = url
        .parse::<HostRule>()
        .setup(|| format!("the simulator's address {url}"))?;
    for name in SIM_ADAPTERS {
        config.policy.adapters.insert(
            name.to_string(),
            AdapterPolicy {
                allow_hosts: vec![rule.clone()],
                allow_secrets: ["provider_token".to_string()].into(),
                settings: [("base_url".to_string(), url.to_string())].into(),
                digests: Default::default(),
                allow_private: false,
            },
        );
    }
    if config.secrets.get("provider_token").is_none() {
        config.secrets.insert("provider_token", token);
    }
    Ok(())
}

/// How often the host looks for ended workflows past the retention.
const RETENTION_POLL: Duration = Duration::from_secs(2);

/// Most workflows one purge deletes (one write).
const PURGE_BATCH: u32 = 100;

/// The pause between two workflows of the host's own consistency check.
const CHECK_PACE: Duration = Duration::from_millis(5);

/// What a SIGHUP reloads, and from where.
struct Reload {
    path: PathBuf,
    auth: Auth,
    secrets: crate::capabilities::LiveSecrets,
    components: Arc<Components>,
    /// The embedded simulator's address and token, which a reload keeps pointing at.
    sim: Option<(String, String)>,
}

impl Reload {
    /// Reads the configuration again and puts its tokens, secrets and allowances in force;
    /// a configuration that does not load, or that would switch between open mode and
    /// tokens (which needs a restart), changes nothing.
    fn apply(&self) -> Result<String, String> {
        let mut config = HostConfig::load(Some(&self.path)).map_err(|e| e.to_string())?;
        if config.tokens.is_empty() != self.auth.is_open() {
            return Err(
                "the reloaded configuration switches between open mode and tokens; restart the host for that"
                    .into(),
            );
        }
        if let Some((url, token)) = &self.sim
            && !config.policy.adapters.contains_key("http-delivery")
        {
            point_at_simulator(&mut config, url, token).map_err(|e| e.to_string())?;
        }
        self.auth.replace(&auth(&config));
        self.secrets.replace(config.secrets.clone());
        self.components.set_policy(config.policy.clone());
        Ok(format!(
            "reloaded {}: {} tokens, the secrets and the allowances of {} adapters are in force",
            self.path.display(),
            config.tokens.len(),
            config.policy.adapters.len()
        ))
    }
}

/// The host on a given store: components, definitions, scheduler and API, each started as
/// a supervised task.
async fn assemble<S>(parts: Parts<'_>, store: S, cache_dir: PathBuf) -> Result<App, AppError>
where
    S: ContextStore + ExecutorStore + ComponentStore + crate::store::NotificationStore,
{
    let Parts {
        options,
        config,
        sim,
        clock,
        listen,
    } = parts;
    let runtime = Runtime::new(RuntimeConfig {
        memory_cap_bytes: config.memory_cap_bytes,
        max_instances: (config.max_concurrent as u32 + 16).max(32),
        cache_dir: Some(cache_dir),
        ..RuntimeConfig::default()
    })
    .setup(|| "starting the WebAssembly runtime".into())?;
    let owner = config
        .host_id
        .clone()
        .unwrap_or_else(crate::scheduler::default_owner);
    tracing::info!("host identity (lease owner): {owner}");
    let author = format!("host {owner}");
    let mut components =
        Components::new(runtime, config.policy.clone()).with_environment(&config.environment);
    components.unload_idle = config.unload_idle;
    load_components(&config, &components, &store, &clock, &author).await?;
    // Before serving: run what the registry made active, not only what this host loaded.
    for change in components
        .sync(&store)
        .await
        .setup(|| "reading the adapter registry".into())?
    {
        tracing::info!("{change}");
    }
    // …and judge by the newest policy version from the first attempt on.
    if let Some(version) = components
        .governance()
        .refresh(&store)
        .await
        .setup(|| "reading the policy in force".into())?
    {
        tracing::info!(
            "policy version {version} is in force (environment `{}`)",
            config.environment
        );
    }
    let components = Arc::new(components);

    let deployments = Arc::new(Deployments::new(store.clone()));
    let shipped = config.examples
        && !config.workflows_configured
        && !tokio::fs::try_exists(&config.workflows)
            .await
            .unwrap_or(true);
    if shipped {
        // A copied or installed binary started anywhere still runs its own examples.
        tracing::info!(
            "no {}/ here: deploying the definitions shipped with docket",
            config.workflows.display()
        );
        deploy_texts(
            &deployments,
            crate::guests::SHIPPED_WORKFLOWS
                .iter()
                .map(|(name, text)| (format!("shipped {name}"), text.to_string())),
            components.as_ref(),
            clock.now_ms(),
        )
        .await?;
    } else {
        deploy_dir(
            &deployments,
            &config.workflows,
            components.as_ref(),
            clock.now_ms(),
        )
        .await?;
    }

    // Failpoints are a test control: a stray variable must not crash a production host.
    let failpoint = crate::scheduler::failpoint_from_env();
    if failpoint.is_some() && !options.test_controls {
        tracing::warn!("DOCKET_FAILPOINT is ignored: failpoints need --test-controls");
    }
    let failpoint = failpoint.filter(|_| options.test_controls);
    let wake = Arc::new(Notify::new());
    let scheduler = Scheduler::new(
        store.clone(),
        deployments.clone(),
        components.clone(),
        Arc::new(config.secrets.clone()),
        clock.clone(),
        SchedulerConfig {
            owner: owner.clone(),
            lease: config.lease,
            poll: config.idle_poll,
            max_concurrent: config.max_concurrent,
            failpoint,
            ..SchedulerConfig::default()
        },
        wake.clone(),
    );
    let ticks = scheduler.ticks();
    let stop = CancellationToken::new();
    let mut tasks = Supervisor::default();

    if options.pause_execution {
        tracing::warn!(
            "step execution is paused (--pause-execution): intents are admitted but no step runs"
        );
        // A scheduler that ended at once would look dead to the supervisor.
        let stop = stop.clone();
        tasks.spawn("scheduler", async move {
            stop.cancelled().await;
            Ok(())
        });
    } else {
        let (scheduler, stop) = (scheduler.clone(), stop.clone());
        tasks.spawn("scheduler", async move {
            scheduler.run(stop).await;
            Ok(())
        });
    }
    {
        // Registry changes made elsewhere (another host, `docket adapter activate`) reach
        // this host within REGISTRY_POLL.
        let (components, store, ticks, stop, clock) = (
            components.clone(),
            store.clone(),
            ticks.clone(),
            stop.clone(),
            clock.clone(),
        );
        tasks.spawn("registry", async move {
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return Ok(()),
                    _ = tokio::time::sleep(REGISTRY_POLL) => {}
                }
                crate::catalog::catch_up(&components, &store, clock.now_ms()).await;
                ticks.done(crate::scheduler::Tick::Registry);
            }
        });
    }

    {
        // Notifications are delivered after their transitions commit, by every host: rows
        // are claimed under a lease, so each goes out once.
        let mut notifier = crate::scheduler::notifier::Notifier::new(
            store.clone(),
            config.notifications.clone(),
            clock.clone(),
            owner.clone(),
            config.notification_retention,
            crate::outbound::client(
                config.outbound_ca_file.as_deref(),
                Some(crate::scheduler::notifier::SEND_TIMEOUT),
            )
            .setup(|| "the notifications' HTTP client".into())?,
        );
        notifier.metrics = scheduler.metrics();
        let stop = stop.clone();
        tasks.spawn("notifier", async move {
            notifier.run(stop).await;
            Ok(())
        });
    }

    {
        // The host's own consistency check: a light walk over every workflow, each
        // interval; what it finds is `docket_consistency_violations`.
        let (store, metrics, stop) = (store.clone(), scheduler.metrics(), stop.clone());
        let interval = config.check_interval;
        tasks.spawn("checker", async move {
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return Ok(()),
                    _ = tokio::time::sleep(interval) => {}
                }
                let mut found: std::collections::BTreeMap<&'static str, u64> =
                    crate::check::Invariant::ALL
                        .iter()
                        .map(|i| (i.as_str(), 0))
                        .collect();
                let swept = crate::check::sweep(&store, CHECK_PACE, |_, violations| {
                    for v in violations {
                        *found.entry(v.invariant.as_str()).or_default() += 1;
                    }
                });
                let checked = tokio::select! {
                    _ = stop.cancelled() => return Ok(()),
                    checked = swept => checked,
                };
                match checked {
                    Ok(n) => {
                        let total: u64 = found.values().sum();
                        if total > 0 {
                            tracing::warn!(
                                "the consistency check of {n} workflows found {total} violations; `docket check` lists them"
                            );
                        }
                        metrics.violations(found);
                    }
                    Err(e) => tracing::warn!("the consistency check stopped: {e}"),
                }
            }
        });
    }

    {
        // Ended workflows go once past the retention (and their key's), a bounded batch
        // per write, so the writer is never held long.
        let (store, stop, clock, ticks) =
            (store.clone(), stop.clone(), clock.clone(), ticks.clone());
        let retention = config.workflow_retention.as_millis() as u64;
        tasks.spawn("retention", async move {
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return Ok(()),
                    _ = tokio::time::sleep(RETENTION_POLL) => {}
                }
                let now = clock.now_ms();
                loop {
                    match store
                        .purge_ended(now.saturating_sub(retention), now, PURGE_BATCH)
                        .await
                    {
                        Ok(purged) if purged.is_empty() => break,
                        Ok(purged) => {
                            tracing::info!(
                                "purged {} ended workflows past the retention",
                                purged.len()
                            );
                            tokio::task::yield_now().await;
                        }
                        Err(e) => {
                            tracing::warn!("purging ended workflows failed: {e}");
                            break;
                        }
                    }
                }
                ticks.done(crate::scheduler::Tick::Retention);
            }
        });
    }

    let mut ctx = Context::new(store, deployments, clock.clone());
    ctx.metrics = scheduler.metrics();
    ctx.health = tasks.health();
    ctx.auth = auth(&config);
    // Cookies only travel over TLS (here, or at a proxy in front).
    ctx.secure_cookies = config.tls.is_some() || config.behind_tls_proxy;
    if let Some(path) = options.config_path.clone() {
        // SIGHUP rotates tokens and secrets and changes allowances without a restart.
        let reload = Reload {
            path,
            auth: ctx.auth.clone(),
            secrets: scheduler.live_secrets(),
            components: components.clone(),
            sim: sim.as_ref().map(|s| {
                let token = config
                    .secrets
                    .get("provider_token")
                    .map(|t| t.expose().to_string())
                    .unwrap_or_default();
                (s.base_url(), token)
            }),
        };
        let stop = stop.clone();
        // Listened for before the host announces itself: a SIGHUP is never the default (a
        // kill).
        let mut hangups = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
            .setup(|| "listening for SIGHUP".into())?;
        tasks.spawn("reload", async move {
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return Ok(()),
                    _ = hangups.recv() => {}
                }
                match reload.apply() {
                    Ok(done) => tracing::info!("{done}"),
                    Err(e) => tracing::error!(
                        "SIGHUP: the configuration was not reloaded, the one in force stays: {e}"
                    ),
                }
            }
        });
    }
    ctx.limits = Limits {
        max_body_bytes: config.max_body_bytes,
        key_retention: config.key_retention,
        api_uploads: config.api_uploads,
        require_verified: config.require_verified,
    };
    ctx.test_controls = options.test_controls;
    ctx.wake = wake;
    if !options.pause_execution {
        ctx.starter = Some(scheduler.starter());
    }
    ctx.components = Some(components.clone());
    ctx.ticks = ticks.clone();
    ctx.progress = scheduler.progress();
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .setup(|| format!("cannot listen on {listen}"))?;
    let addr = listener
        .local_addr()
        .setup(|| format!("reading the address bound for {listen}"))?;
    let tls = match &config.tls {
        Some(files) => {
            Some(listener::tls_config(&files.cert, &files.key).map_err(AppError::Refused)?)
        }
        None => None,
    };
    let scheme = if tls.is_some() { "https" } else { "http" };
    let conn_limits = listener::ConnLimits {
        max_connections: config.max_connections,
        max_per_client: config.max_connections_per_client,
        proxies: Arc::new(config.proxies.clone()),
    };
    let deadlines = listener::Deadlines {
        header: config.header_read_timeout,
        body: config.body_read_timeout,
    };
    let incoming = listener::incoming(listener, tls, conn_limits.clone())
        .setup(|| format!("listening on {listen}"))?;
    // The console shares the API's context and listener.
    let ctx = Arc::new(ctx);
    let metrics_addr = match config.metrics_listen {
        Some(at) => {
            let listener = tokio::net::TcpListener::bind(at)
                .await
                .setup(|| format!("cannot listen for metrics on {at}"))?;
            let bound = listener
                .local_addr()
                .setup(|| format!("reading the address bound for {at}"))?;
            let limits = listener::ConnLimits {
                max_connections: 64,
                max_per_client: 16,
                ..conn_limits.clone()
            };
            let incoming = listener::incoming(listener, None, limits)
                .setup(|| format!("listening for metrics on {at}"))?;
            let (router, stop) = (crate::api::metrics_router(ctx.clone()), stop.clone());
            tasks.spawn("metrics", async move {
                listener::serve(incoming, router, deadlines, stop).await;
                Ok(())
            });
            tracing::info!("metrics are served on http://{bound}/metrics");
            Some(bound)
        }
        None => None,
    };
    let router = crate::console::router(ctx.clone()).merge(crate::api::shared_router(ctx));
    {
        let stop = stop.clone();
        tasks.spawn("server", async move {
            listener::serve(incoming, router, deadlines, stop).await;
            Ok(())
        });
    }
    tracing::info!("docket is serving on {scheme}://{addr}");
    let draining = scheduler.clone();
    let drain: Drain =
        Box::new(move |grace| Box::pin(async move { draining.shutdown(grace).await }));
    Ok(App {
        addr,
        metrics_addr,
        https: scheme == "https",
        clock,
        ticks,
        sim,
        tasks,
        stop,
        drain,
        grace: config.shutdown_grace,
    })
}

/// Loads the example and configured components, stores each in the database so that every
/// host on it can run them, and makes a component's highest version active on its first
/// registration.
async fn load_components<S: ComponentStore>(
    config: &HostConfig,
    components: &Components,
    store: &S,
    clock: &Arc<SystemClock>,
    author: &str,
) -> Result<(), AppError> {
    // The examples are part of the binary; configured components are files.
    let mut sources: Vec<(String, Result<Vec<u8>, String>, bool)> = Vec::new();
    if config.examples {
        for (name, bytes) in crate::guests::EMBEDDED {
            sources.push((format!("the example `{name}`"), Ok(bytes.to_vec()), true));
        }
    }
    for path in &config.components {
        let bytes = read_file(path).await.map_err(|e| e.to_string());
        sources.push((path.display().to_string(), bytes, false));
    }
    for (origin, bytes, example) in sources {
        let loaded = match bytes {
            Ok(bytes) => components
                .load_bytes(&bytes)
                .await
                .map(|c| (c, bytes))
                .map_err(|e| e.to_string()),
            Err(e) => Err(e),
        };
        let (c, bytes) = match loaded {
            Ok(found) => found,
            // An example this host cannot run (its engine refuses it) is not an error; a
            // configured file is.
            Err(e) if example => {
                tracing::debug!("{origin} not loaded: {e}");
                continue;
            }
            Err(cause) => {
                return Err(AppError::Setup {
                    context: format!("loading component {origin}"),
                    cause,
                });
            }
        };
        tracing::info!(
            "component {}@{} ({}) from {origin}",
            c.name(),
            c.version(),
            c.digest
        );
        store
            .store_component(NewComponent {
                digest: c.digest.clone(),
                name: c.name().to_string(),
                version: c.version().to_string(),
                kind: c.world_name().to_string(),
                bytes,
                registered_at: clock.now_ms(),
                author: author.to_string(),
            })
            .await
            .setup(|| format!("storing component {}@{}", c.name(), c.version()))?;
    }
    // A component's first registration makes its highest version from these files active;
    // after that only the registry (`docket adapter activate`, the API) changes it.
    let mut highest: std::collections::BTreeMap<String, (semver::Version, String)> =
        Default::default();
    for c in components.all() {
        let Ok(v) = semver::Version::parse(c.version()) else {
            continue;
        };
        let entry = highest
            .entry(c.name().to_string())
            .or_insert((v.clone(), c.digest.clone()));
        if v > entry.0 {
            *entry = (v, c.digest.clone());
        }
    }
    for (name, (_, digest)) in highest {
        let what = format!("activating the first version of {name}");
        store
            .set_active(ActiveChange {
                name,
                target: ActiveTarget::IfNone(digest),
                author: author.to_string(),
                now: clock.now_ms(),
            })
            .await
            .setup(|| what)?;
    }
    Ok(())
}

/// A file's bytes, read off the async threads.
async fn read_file(path: &Path) -> std::io::Result<Vec<u8>> {
    tokio::fs::read(path).await
}

/// The API's principals from the configured tokens; open (everyone is the `local`
/// operator) without any.
fn auth(config: &HostConfig) -> Auth {
    if config.tokens.is_empty() {
        return Auth::open();
    }
    Auth::with_digests(
        config
            .tokens
            .iter()
            .map(|t| (t.digest.clone(), t.principal.clone())),
    )
    .trusting(config.proxies.clone())
}

/// Deploys every `*.toml` in `dir`; a changed file under a deployed version stops the host.
async fn deploy_dir<S: DefinitionStore>(
    deployments: &Deployments<S>,
    dir: &Path,
    env: &Components,
    now: u64,
) -> Result<(), AppError> {
    let mut files: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "toml"))
            .collect(),
        Err(e) => {
            tracing::warn!("no workflow definitions loaded from {}: {e}", dir.display());
            return Ok(());
        }
    };
    files.sort();
    let mut texts = Vec::new();
    for file in files {
        let source = tokio::fs::read_to_string(&file)
            .await
            .setup(|| format!("reading {}", file.display()))?;
        texts.push((file.display().to_string(), source));
    }
    deploy_texts(deployments, texts, env, now).await
}

/// Deploys definitions given as (origin, text), in order.
async fn deploy_texts<S: DefinitionStore>(
    deployments: &Deployments<S>,
    texts: impl IntoIterator<Item = (String, String)>,
    env: &Components,
    now: u64,
) -> Result<(), AppError> {
    for (origin, source) in texts {
        let (deployed, outcome) = deployments
            .deploy(&origin, &source, env, now)
            .await
            .setup(|| format!("deploying {origin}"))?;
        tracing::info!(
            "workflow {} v{} ({:?}) from {origin}",
            deployed.def.name,
            deployed.def.version,
            outcome,
        );
    }
    Ok(())
}

fn sqlite_path(db: &str) -> PathBuf {
    PathBuf::from(db.strip_prefix("sqlite://").unwrap_or(db))
}

/// Whether `db` names a PostgreSQL database rather than a SQLite file.
pub fn is_postgres(db: &str) -> bool {
    db.starts_with("postgres://") || db.starts_with("postgresql://")
}

/// Where this host keeps compiled components when its database is not a file beside them:
/// `DOCKET_CACHE_DIR`, else `~/.cache/docket/components`.
pub fn component_cache_dir() -> Option<PathBuf> {
    std::env::var_os("DOCKET_CACHE_DIR")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/docket/components"))
        })
}
