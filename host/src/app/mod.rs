//! The composition root: [`App::build`] assembles a host from its configuration — store,
//! runtime, components, definitions, scheduler, API and console — and [`App::run`] runs it
//! as a set of named, supervised tasks until it is told to stop. This file builds the parts
//! and hands them over; what runs and how often is [`tasks`], SIGHUP is `reload`, the
//! listeners are [`listener`].
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
mod reload;
mod supervisor;
pub mod tasks;

pub use supervisor::{Supervisor, TaskEnd};
pub use tasks::REGISTRY_POLL;

use crate::access::Auth;
use crate::capabilities::{AdapterPolicy, HostRule};
use crate::catalog::{Components, Deployments};
use crate::clock::{Clock, SystemClock};
use crate::config::HostConfig;
use crate::context::{Context, ContextStore, Limits};
use crate::runtime::{Runtime, RuntimeConfig};
use crate::scheduler::evidence::EvidenceReader;
use crate::scheduler::notifier::Notifier;
use crate::scheduler::{Scheduler, SchedulerConfig, Ticks};
use crate::sim::{ProviderSim, RunningSim, SimConfig};
use crate::store::postgres::PgStore;
use crate::store::sqlite::SqliteStore;
use crate::store::{
    ActiveChange, ActiveTarget, ComponentStore, DefinitionStore, ExecutorStore, NewComponent,
};
use reload::Reload;
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

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
    /// Move the database to the configured environment when it records another.
    pub adopt_environment: bool,
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
            adopt_environment: false,
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
    /// Completed ticks (claim, recovery, lease renewal, and each periodic task's rounds).
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
        if let Some(start) = clock_start(options)? {
            clock.start_at(start);
            tracing::warn!(
                "the clock starts at {} (DOCKET_TEST_CLOCK_START_MS)",
                crate::intent::rfc3339(start)
            );
        }
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
    if config.secrets.get(SIM_WEBHOOK_SECRET).is_none() {
        use base64::Engine;
        use rand::Rng;
        let key: [u8; 24] = rand::rng().random();
        let secret = format!(
            "whsec_{}",
            base64::engine::general_purpose::STANDARD.encode(key)
        );
        config.secrets.insert(SIM_WEBHOOK_SECRET, secret.as_str());
    }
    point_at_simulator(config, &url, &token)?;
    Ok(Some(running))
}

/// The secret the embedded simulator signs its events with, generated when it starts.
pub(super) const SIM_WEBHOOK_SECRET: &str = "provider_webhook_secret";

/// Points the embedded simulator's events at this host's `POST /v1/evidence/http-delivery`,
/// once the host listens at `addr`: in development, the provider's own evidence arrives as
/// it would in production.
fn simulator_posts_here(sim: &RunningSim, config: &HostConfig, addr: SocketAddr) {
    let Some(secret) = config.secrets.get(SIM_WEBHOOK_SECRET) else {
        return;
    };
    let patch = serde_json::json!({
        "webhook_url": format!("http://{addr}/v1/evidence/http-delivery"),
        "webhook_secret": secret.expose(),
    });
    if let Err(e) = sim.sim().set_faults(patch) {
        tracing::warn!("the built-in provider simulator posts no events: {e}");
    }
}

/// Gives the delivery adapters the simulator at `url` as their provider (and `token`,
/// unless the operator configured one), and takes its signed events.
fn point_at_simulator(config: &mut HostConfig, url: &str, token: &str) -> Result<(), AppError> {
    let rule = url
        .parse::<HostRule>()
        .setup(|| format!("the simulator's address {url}"))?;
    // The simulator's events are taken by every delivery adapter it stands behind.
    let webhook_key = config
        .secrets
        .get(SIM_WEBHOOK_SECRET)
        .and_then(|s| crate::notify::signing_key(s.expose()).ok())
        .map(crate::capabilities::WebhookKey);
    for name in SIM_ADAPTERS {
        config.policy.adapters.insert(
            name.to_string(),
            AdapterPolicy {
                allow_hosts: vec![rule.clone()],
                allow_secrets: ["provider_token".to_string()].into(),
                settings: [("base_url".to_string(), url.to_string())].into(),
                digests: Default::default(),
                allow_private: false,
                webhook_key: webhook_key.clone(),
            },
        );
    }
    if config.secrets.get("provider_token").is_none() {
        config.secrets.insert("provider_token", token);
    }
    Ok(())
}

/// The host on a given store: components, definitions, scheduler and API, each started as
/// a supervised task.
async fn assemble<S>(parts: Parts<'_>, store: S, cache_dir: PathBuf) -> Result<App, AppError>
where
    S: ContextStore
        + ExecutorStore
        + ComponentStore
        + crate::store::NotificationStore
        + crate::store::SettingsStore,
{
    let Parts {
        options,
        config,
        sim,
        clock,
        listen,
    } = parts;
    let owner = config
        .host_id
        .clone()
        .unwrap_or_else(crate::scheduler::default_owner);
    tracing::info!("host identity (lease owner): {owner}");
    store.share_claims(config.fairness_weights.clone());
    record_environment(&store, options, &config, &clock, &owner).await?;
    let components = catalog(&config, &store, &clock, cache_dir, &owner).await?;
    let deployments = deploy(&config, &store, &components, &clock).await?;
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
            failpoint: failpoint(options),
            adapter_limits: config.adapter_limits.clone(),
            ..SchedulerConfig::default()
        },
        wake.clone(),
    );
    let (ticks, metrics) = (scheduler.ticks(), scheduler.metrics());
    let mut tasks = Supervisor::new(CancellationToken::new(), ticks.clone());

    tasks::scheduler(&mut tasks, scheduler.clone(), options.pause_execution);
    tasks::registry(&mut tasks, components.clone(), store.clone(), clock.clone());
    let evidence_wake = Arc::new(Notify::new());
    let reader = EvidenceReader::new(
        store.clone(),
        components.clone(),
        clock.clone(),
        owner.clone(),
        failpoint(options),
    );
    tasks::evidence(&mut tasks, reader, clock.clone(), evidence_wake.clone());
    let notifier = notifier(&config, &store, &clock, owner, metrics.clone())?;
    tasks::notifier(&mut tasks, notifier, clock.clone());
    tasks::checker(
        &mut tasks,
        store.clone(),
        metrics.clone(),
        config.check_interval,
    );
    tasks::retention(
        &mut tasks,
        store.clone(),
        clock.clone(),
        config.workflow_retention,
    );

    let base = Context::new(store, deployments, clock.clone());
    let health = tasks.health();
    let mut ctx = context(
        base,
        &config,
        options,
        &scheduler,
        &components,
        wake,
        health,
    );
    ctx.evidence_wake = evidence_wake;
    if let Some(path) = options.config_path.clone() {
        // SIGHUP rotates tokens and secrets and changes allowances without a restart.
        let secrets = scheduler.live_secrets();
        let reload = Reload::new(path, &config, &ctx.auth, secrets, components, sim.as_ref());
        reload::on_hangup(&mut tasks, reload)?;
    }
    let served = serve(&mut tasks, Arc::new(ctx), &config, listen).await?;
    if let Some(sim) = &sim {
        simulator_posts_here(sim, &config, served.addr);
    }
    let draining = scheduler.clone();
    let drain: Drain =
        Box::new(move |grace| Box::pin(async move { draining.shutdown(grace).await }));
    Ok(App {
        addr: served.addr,
        metrics_addr: served.metrics_addr,
        https: served.https,
        clock,
        ticks,
        sim,
        stop: tasks.stopper(),
        tasks,
        drain,
        grace: config.shutdown_grace,
    })
}

/// What the API and the console share: the host's parts and the configured limits.
fn context<S>(
    base: Context<S>,
    config: &HostConfig,
    options: &Options,
    scheduler: &Arc<Scheduler<S>>,
    components: &Arc<Components>,
    wake: Arc<Notify>,
    health: Arc<crate::health::Health>,
) -> Context<S>
where
    S: ContextStore + ExecutorStore,
{
    let mut ctx = base;
    ctx.metrics = scheduler.metrics();
    ctx.health = health;
    ctx.auth = auth(config);
    // Cookies only travel over TLS (here, or at a proxy in front).
    ctx.secure_cookies = config.tls.is_some() || config.behind_tls_proxy;
    ctx.limits = Limits {
        max_body_bytes: config.max_body_bytes,
        key_retention: config.key_retention,
        api_uploads: config.api_uploads,
    };
    ctx.test_controls = options.test_controls;
    ctx.wake = wake;
    if !options.pause_execution {
        ctx.starter = Some(scheduler.starter());
    }
    ctx.components = Some(components.clone());
    ctx.ticks = scheduler.ticks();
    ctx.progress = scheduler.progress();
    ctx
}

/// Checks the configured environment against the one the database serves: the first host
/// records its own; another is refused unless told to adopt its own (`--adopt-environment`).
async fn record_environment<S: crate::store::SettingsStore>(
    store: &S,
    options: &Options,
    config: &HostConfig,
    clock: &Arc<SystemClock>,
    owner: &str,
) -> Result<(), AppError> {
    use crate::store::{EnvironmentRecord, StoreError};
    let recorded = store
        .record_environment(
            config.environment.clone(),
            options.adopt_environment,
            owner.to_string(),
            clock.now_ms(),
        )
        .await;
    match recorded {
        Ok(EnvironmentRecord::First) => tracing::info!(
            "this database now serves environment `{}`: idempotency keys are derived in it",
            config.environment
        ),
        Ok(EnvironmentRecord::Same) => {}
        Ok(EnvironmentRecord::Adopted { from, workflows }) => tracing::warn!(
            "adopted this database for environment `{}` (it served `{from}`); {workflows} unfinished workflows keep the keys they were admitted with, each told on its timeline",
            config.environment
        ),
        Err(e @ StoreError::EnvironmentChanged { .. }) => {
            return Err(AppError::Refused(e.to_string()));
        }
        Err(e) => {
            return Err(AppError::Setup {
                context: "recording the environment in the database".into(),
                cause: e.to_string(),
            });
        }
    }
    Ok(())
}

/// The runtime and the components this host can run: the ones it loads (stored for every
/// host on the database), then what the registry made active and the policy in force.
async fn catalog<S: ContextStore>(
    config: &HostConfig,
    store: &S,
    clock: &Arc<SystemClock>,
    cache_dir: PathBuf,
    owner: &str,
) -> Result<Arc<Components>, AppError> {
    let runtime = Runtime::new(RuntimeConfig {
        memory_cap_bytes: config.memory_cap_bytes,
        // The calls quiet subjects may take beyond `max_concurrent` have instances too.
        max_instances: (config.max_concurrent as u32 + crate::scheduler::QUIET_CALLS as u32 + 16)
            .max(32),
        cache_dir: Some(cache_dir),
        ..RuntimeConfig::default()
    })
    .setup(|| "starting the WebAssembly runtime".into())?;
    let author = format!("host {owner}");
    let mut components =
        Components::new(runtime, config.policy.clone()).with_environment(&config.environment);
    components.unload_idle = config.unload_idle;
    load_components(config, &components, store, clock, &author).await?;
    // Before serving: run what the registry made active, not only what this host loaded.
    for change in components
        .sync(store)
        .await
        .setup(|| "reading the adapter registry".into())?
    {
        tracing::info!("{change}");
    }
    // …and judge by the newest policy version from the first attempt on.
    if let Some(version) = components
        .governance()
        .refresh(store)
        .await
        .setup(|| "reading the policy in force".into())?
    {
        tracing::info!(
            "policy version {version} is in force (environment `{}`)",
            config.environment
        );
    }
    Ok(Arc::new(components))
}

/// Deploys the configured definitions, or, with none configured and no workflow directory
/// here, the ones shipped with docket.
async fn deploy<S: ContextStore>(
    config: &HostConfig,
    store: &S,
    components: &Components,
    clock: &Arc<SystemClock>,
) -> Result<Arc<Deployments<S>>, AppError> {
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
        let texts = crate::guests::SHIPPED_WORKFLOWS
            .iter()
            .map(|(name, text)| (format!("shipped {name}"), text.to_string()));
        deploy_texts(&deployments, texts, components, clock.now_ms()).await?;
    } else {
        deploy_dir(&deployments, &config.workflows, components, clock.now_ms()).await?;
    }
    Ok(deployments)
}

/// The failpoint to honour: a test control, so a stray variable never crashes a production
/// host.
/// `DOCKET_TEST_CLOCK_START_MS`: the instant a test host's clock starts at, so a database
/// saved earlier (the upgrade fixtures) resumes as of when it was saved. Test controls only.
fn clock_start(options: &Options) -> Result<Option<u64>, AppError> {
    let Ok(text) = std::env::var("DOCKET_TEST_CLOCK_START_MS") else {
        return Ok(None);
    };
    if !options.test_controls {
        return Err(AppError::Refused(
            "DOCKET_TEST_CLOCK_START_MS needs --test-controls; unset it to run on the real clock"
                .into(),
        ));
    }
    text.trim().parse().map(Some).map_err(|_| {
        AppError::Refused(format!(
            "DOCKET_TEST_CLOCK_START_MS is `{text}`; give milliseconds since the Unix epoch"
        ))
    })
}

fn failpoint(options: &Options) -> Option<crate::scheduler::Failpoint> {
    let failpoint = crate::scheduler::failpoint_from_env();
    if failpoint.is_some() && !options.test_controls {
        tracing::warn!("DOCKET_FAILPOINT is ignored: failpoints need --test-controls");
    }
    failpoint.filter(|_| options.test_controls)
}

/// The outbox's deliverer, sending to the configured endpoints through the host's own
/// HTTP client.
fn notifier<S: ContextStore>(
    config: &HostConfig,
    store: &S,
    clock: &Arc<SystemClock>,
    owner: String,
    metrics: Arc<crate::metrics::Metrics>,
) -> Result<Notifier<S>, AppError> {
    let client = crate::outbound::client(
        config.outbound_ca_file.as_deref(),
        Some(crate::scheduler::notifier::SEND_TIMEOUT),
    )
    .setup(|| "the notifications' HTTP client".into())?;
    let mut notifier = Notifier::new(
        store.clone(),
        config.notifications.clone(),
        clock.clone(),
        owner,
        config.notification_retention,
        client,
    );
    notifier.metrics = metrics;
    Ok(notifier)
}

/// Where the host answers, once its listeners are bound.
struct Served {
    addr: SocketAddr,
    metrics_addr: Option<SocketAddr>,
    https: bool,
}

/// Binds the API's listener (the console shares it) and the metrics listener, if one is
/// configured, and serves each as a task.
async fn serve<S: ContextStore>(
    tasks: &mut Supervisor,
    ctx: Arc<Context<S>>,
    config: &HostConfig,
    listen: SocketAddr,
) -> Result<Served, AppError> {
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
                ..conn_limits
            };
            let incoming = listener::incoming(listener, None, limits)
                .setup(|| format!("listening for metrics on {at}"))?;
            let router = crate::api::metrics_router(ctx.clone());
            tasks::server(tasks, "metrics", incoming, router, deadlines);
            tracing::info!("metrics are served on http://{bound}/metrics");
            Some(bound)
        }
        None => None,
    };
    let router = crate::console::router(ctx.clone()).merge(crate::api::shared_router(ctx));
    tasks::server(tasks, "server", incoming, router, deadlines);
    tracing::info!("docket is serving on {scheme}://{addr}");
    Ok(Served {
        addr,
        metrics_addr,
        https: scheme == "https",
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
    // The database keeps the rule, so every path that activates a version applies it.
    let grandfathered = store
        .require_verified(config.require_verified, author.to_string(), clock.now_ms())
        .await
        .setup(|| "recording require_verified in the database".to_string())?;
    for a in grandfathered {
        tracing::warn!(
            "{}@{} ({}) was active when require_verified came into force and was never verified: it keeps running, recorded as grandfathered; verify it with `docket adapter verify`",
            a.name,
            a.version,
            a.digest
        );
    }
    components.set_require_verified(config.require_verified);
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
        match store
            .set_active(ActiveChange {
                name,
                target: ActiveTarget::IfNone(digest),
                author: author.to_string(),
                now: clock.now_ms(),
            })
            .await
        {
            // Steps that need it stay blocked until a verified version is activated.
            Err(e @ crate::store::StoreError::Unverified { .. }) => {
                tracing::warn!("not activated: {e}");
            }
            other => {
                other.setup(|| what)?;
            }
        }
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
