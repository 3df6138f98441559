//! `docket serve`: assemble a host — store, runtime, components, definitions, scheduler,
//! API — and run it until interrupted.

use crate::api::ApiStore;
use crate::api::{ApiContext, ApiLimits, Auth, Principal, Role};
use crate::capabilities::{AdapterPolicy, HostRule};
use crate::clock::{Clock, SystemClock};
use crate::config::{HostConfig, RoleToml};
use crate::runtime::{Runtime, RuntimeConfig};
use crate::scheduler::{Components, Deployments, Scheduler, SchedulerConfig};
use crate::sim::{ProviderSim, RunningSim, SimConfig};
use crate::store::postgres::PgStore;
use crate::store::sqlite::SqliteStore;
use crate::store::{
    ActiveChange, ActiveTarget, ComponentStore, DefinitionStore, ExecutorStore, NewComponent,
};
use anyhow::{Context, bail};
use clap::Args;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::sync::Notify;

/// How often a host catches up with the registry: the bound within which every host picks
/// up an activation or rollback made elsewhere (plus, for a version new to the host, the
/// time to compile it once).
pub const REGISTRY_POLL: std::time::Duration = std::time::Duration::from_secs(1);

/// Adapters pointed at the built-in provider simulator when nothing else is configured.
const SIM_ADAPTERS: &[&str] = &[
    "http-delivery",
    "http-delivery-query-only",
    "http-delivery-fire-and-forget",
    "http-delivery-lying",
];

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address of the API (default 127.0.0.1:8080).
    #[arg(long)]
    pub listen: Option<SocketAddr>,
    /// Database: a SQLite file path or `sqlite://PATH` (default `.docket/docket.db`), or
    /// `postgres://USER:PASSWORD@HOST/DB` for many hosts on one database.
    #[arg(long)]
    pub db: Option<String>,
    /// Host configuration file (`docket.toml`).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Enable the test controls: the API's clock and `DOCKET_FAILPOINT`; refused unless
    /// listening on loopback.
    #[arg(long)]
    pub test_controls: bool,
    /// Where the embedded provider simulator listens when it is used (default: any free
    /// loopback port).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub sim_listen: SocketAddr,
    /// Admit and serve reads, but run no steps (for measuring admission alone).
    #[arg(long)]
    pub pause_execution: bool,
}

/// Everything that makes up a running host.
pub struct Host {
    pub addr: SocketAddr,
    pub sim: Option<RunningSim>,
    /// The clock every part of the host reads; in-process callers (the demo) may move it.
    pub clock: Arc<SystemClock>,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
    scheduler: tokio::task::JoinHandle<()>,
    registry: tokio::task::JoinHandle<()>,
    /// Waits (up to the grace) for the attempts under way, then ends this host's leases.
    drain: Option<Drain>,
    grace: std::time::Duration,
}

type Drain = Box<
    dyn FnOnce(
            std::time::Duration,
        ) -> std::pin::Pin<
            Box<dyn std::future::Future<Output = Result<u64, crate::store::StoreError>> + Send>,
        > + Send,
>;

impl Host {
    /// Stops the scheduler and the API at once.
    pub fn stop(&self) {
        self.scheduler.abort();
        self.registry.abort();
        self.server.abort();
    }

    /// Stops claiming and serving, lets the attempts under way finish (up to the configured
    /// grace), then ends this host's remaining leases so recovery can take them at once.
    pub async fn shutdown(mut self) {
        self.stop();
        if let Some(drain) = self.drain.take() {
            match drain(self.grace).await {
                Ok(n) => tracing::info!("shut down; ended {n} leases still held"),
                Err(e) => tracing::error!("shut down; ending the leases failed: {e}"),
            }
        }
    }
}

fn sqlite_path(db: &str) -> PathBuf {
    PathBuf::from(db.strip_prefix("sqlite://").unwrap_or(db))
}

/// Builds and starts a host from the arguments and the config file.
pub async fn start(args: &ServeArgs) -> anyhow::Result<Host> {
    let config = HostConfig::load(args.config.as_deref())?;
    start_with(args, config).await
}

/// Builds and starts a host from the arguments and an already loaded configuration.
pub async fn start_with(args: &ServeArgs, mut config: HostConfig) -> anyhow::Result<Host> {
    let listen = args
        .listen
        .or(config.listen)
        .unwrap_or_else(|| "127.0.0.1:8080".parse().unwrap());
    if config.tokens.is_empty() && !listen.ip().is_loopback() {
        bail!(
            "refusing to listen on {listen} without API tokens: anyone could act as an operator; configure [[tokens]] in docket.toml or listen on 127.0.0.1"
        );
    }
    if args.test_controls && !listen.ip().is_loopback() {
        bail!("--test-controls is refused unless the host listens on loopback (it was {listen})");
    }

    let clock = SystemClock::new();
    // The embedded provider simulator stands in for a delivery service nobody configured.
    // It reads the host's clock, so moving that clock (test controls) moves the provider's
    // time too: key retention and eventual visibility stay consistent with the host's.
    let mut sim = None;
    if !config.policy.adapters.contains_key("http-delivery") {
        let host_clock = clock.clone();
        let sim_clock: crate::sim::Clock = Arc::new(move || {
            std::time::UNIX_EPOCH + std::time::Duration::from_millis(host_clock.now_ms())
        });
        let running = ProviderSim::with_clock(SimConfig::default(), sim_clock)
            .spawn(args.sim_listen)
            .await
            .context("starting the built-in provider simulator")?;
        let url = running.base_url();
        tracing::warn!(
            "no delivery service configured: http-delivery (and its variants) point at the built-in provider simulator at {url}"
        );
        for name in SIM_ADAPTERS {
            config.policy.adapters.insert(
                name.to_string(),
                AdapterPolicy {
                    allow_hosts: vec![url.parse::<HostRule>()?],
                    allow_secrets: ["provider_token".to_string()].into(),
                    settings: [("base_url".to_string(), url.clone())].into(),
                },
            );
        }
        config
            .secrets
            .insert("provider_token", SimConfig::DEFAULT_TOKEN);
        sim = Some(running);
    }

    let db = args
        .db
        .clone()
        .or(config.db.clone())
        .unwrap_or_else(|| super::DEFAULT_DB.into());
    if is_postgres(&db) {
        if sim.is_some() {
            tracing::warn!(
                "this host embeds its own provider simulator; other hosts on this database embed theirs, so a step recovered on another host would ask another provider. With several hosts, run one `docket sim-provider` and point [adapters.http-delivery] at it"
            );
        }
        let store = PgStore::connect(&db)
            .await
            .with_context(|| format!("connecting to PostgreSQL at {}", without_password(&db)))?;
        tracing::info!("database: PostgreSQL at {}", without_password(&db));
        // Compiled components are this host's own cache (DOCKET_CACHE_DIR, else the user's
        // cache directory); the database holds the truth.
        let cache_dir =
            super::adapter::cache_dir().unwrap_or_else(|| PathBuf::from(".docket/components"));
        return launch(args, config, store, cache_dir, sim, clock, listen).await;
    }
    let db_path = sqlite_path(&db);
    if let Some(dir) = db_path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let store = SqliteStore::open(&db_path).await?;
    tracing::info!("database: SQLite at {}", db_path.display());
    let cache_dir = db_path
        .parent()
        .unwrap_or(Path::new("."))
        .join("components");
    launch(args, config, store, cache_dir, sim, clock, listen).await
}

/// Whether `db` names a PostgreSQL database rather than a SQLite file.
pub(crate) fn is_postgres(db: &str) -> bool {
    db.starts_with("postgres://") || db.starts_with("postgresql://")
}

/// A database URL fit for a log line: the password replaced by `***`.
pub(crate) fn without_password(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &url[scheme + 3..at];
            match userinfo.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme + 3], &url[at..]),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    }
}

/// The host on a given store: components, definitions, scheduler and API.
#[allow(clippy::too_many_arguments)]
async fn launch<S>(
    args: &ServeArgs,
    config: HostConfig,
    store: S,
    cache_dir: PathBuf,
    sim: Option<RunningSim>,
    clock: Arc<SystemClock>,
    listen: SocketAddr,
) -> anyhow::Result<Host>
where
    S: ApiStore + ExecutorStore + ComponentStore,
{
    let runtime = Runtime::new(RuntimeConfig {
        memory_cap_bytes: config.memory_cap_bytes,
        max_instances: (config.max_concurrent as u32 + 16).max(32),
        cache_dir: Some(cache_dir),
    })?;
    let owner = config
        .host_id
        .clone()
        .unwrap_or_else(crate::scheduler::default_owner);
    tracing::info!("host identity (lease owner): {owner}");
    let author = format!("host {owner}");
    let mut components = Components::new(runtime, config.policy.clone());
    components.unload_idle = config.unload_idle;
    let mut files: Vec<(String, PathBuf)> = Vec::new();
    if config.examples {
        for (name, path) in crate::guests::ALL {
            files.push((format!("the built example `{name}`"), PathBuf::from(path)));
        }
    }
    for path in &config.components {
        files.push((path.display().to_string(), path.clone()));
    }
    for (i, (origin, path)) in files.iter().enumerate() {
        let example = config.examples && i < crate::guests::ALL.len();
        let loaded = match std::fs::read(path) {
            Ok(bytes) => components
                .load_bytes(&bytes)
                .await
                .map(|c| (c, bytes))
                .map_err(anyhow::Error::from),
            Err(e) => Err(anyhow::Error::from(e)),
        };
        let (c, bytes) = match loaded {
            Ok(found) => found,
            // An example that was not built is not an error; a configured file is.
            Err(e) if example => {
                tracing::debug!("{origin} not loaded: {e}");
                continue;
            }
            Err(e) => return Err(e.context(format!("loading component {}", path.display()))),
        };
        tracing::info!(
            "component {}@{} ({}) from {origin}",
            c.name(),
            c.version(),
            c.digest
        );
        // Kept in the database so that every host on it can run this component.
        store
            .store_component(NewComponent {
                digest: c.digest.clone(),
                name: c.name().to_string(),
                version: c.version().to_string(),
                kind: c.world_name().to_string(),
                bytes,
                registered_at: clock.now_ms(),
                author: author.clone(),
            })
            .await
            .with_context(|| format!("storing component {}@{}", c.name(), c.version()))?;
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
        store
            .set_active(ActiveChange {
                name,
                target: ActiveTarget::IfNone(digest),
                author: author.clone(),
                now: clock.now_ms(),
            })
            .await?;
    }
    // Before serving: run what the registry made active, not only what this host loaded.
    for change in components.sync(&store).await? {
        tracing::info!("{change}");
    }
    let components = Arc::new(components);
    // Registry changes made elsewhere (another host, `docket adapter activate`) reach this
    // host within REGISTRY_POLL.
    let registry = {
        let (components, store) = (components.clone(), store.clone());
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(REGISTRY_POLL).await;
                match components.sync(&store).await {
                    Ok(changes) => {
                        for change in changes {
                            tracing::info!("registry: {change}");
                        }
                    }
                    Err(e) => tracing::warn!("catching up with the registry failed: {e}"),
                }
            }
        })
    };

    let deployments = Arc::new(Deployments::new(store.clone()));
    deploy_dir(
        &deployments,
        &config.workflows,
        components.as_ref(),
        clock.now_ms(),
    )
    .await?;

    // Failpoints are a test control: a stray variable must not crash a production host.
    let failpoint = crate::scheduler::failpoint_from_env();
    if failpoint.is_some() && !args.test_controls {
        tracing::warn!("DOCKET_FAILPOINT is ignored: failpoints need --test-controls");
    }
    let wake = Arc::new(Notify::new());
    let scheduler = Scheduler::new(
        store.clone(),
        deployments.clone(),
        components.clone(),
        Arc::new(config.secrets.clone()),
        clock.clone(),
        SchedulerConfig {
            owner,
            lease: config.lease,
            poll: config.idle_poll,
            max_concurrent: config.max_concurrent,
            failpoint: failpoint.filter(|_| args.test_controls),
            ..SchedulerConfig::default()
        },
        wake.clone(),
    );
    let draining = scheduler.clone();
    let drain: Drain =
        Box::new(move |grace| Box::pin(async move { draining.shutdown(grace).await }));
    let scheduler = if args.pause_execution {
        tracing::warn!(
            "step execution is paused (--pause-execution): intents are admitted but no step runs"
        );
        tokio::spawn(async {})
    } else {
        tokio::spawn(scheduler.run())
    };

    let auth = if config.tokens.is_empty() {
        Auth::open()
    } else {
        Auth::with_tokens(config.tokens.iter().map(|t| {
            let role = match t.role {
                RoleToml::Client => Role::Client,
                RoleToml::Operator => Role::Operator,
            };
            (
                t.token.clone(),
                Principal {
                    subject: crate::intent::Subject(t.subject.clone()),
                    role,
                },
            )
        }))
    };
    let mut ctx = ApiContext::new(store, deployments, clock.clone());
    ctx.auth = auth;
    ctx.limits = ApiLimits {
        max_body_bytes: config.max_body_bytes,
        key_retention: config.key_retention,
    };
    ctx.test_controls = args.test_controls;
    ctx.wake = wake;
    ctx.components = Some(components.clone());
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))?;
    let addr = listener.local_addr()?;
    // The console shares the API's context and listener.
    let ctx = Arc::new(ctx);
    let app = crate::console::router(ctx.clone()).merge(crate::api::shared_router(ctx));
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    tracing::info!("docket is serving on http://{addr}");
    Ok(Host {
        addr,
        sim,
        clock,
        server,
        scheduler,
        registry,
        drain: Some(drain),
        grace: config.shutdown_grace,
    })
}

/// Deploys every `*.toml` in `dir`; a changed file under a deployed version stops the host.
async fn deploy_dir<S: DefinitionStore>(
    deployments: &Deployments<S>,
    dir: &Path,
    env: &Components,
    now: u64,
) -> anyhow::Result<()> {
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
    for file in files {
        let source = std::fs::read_to_string(&file)
            .with_context(|| format!("reading {}", file.display()))?;
        let (deployed, outcome) = deployments
            .deploy(&file.display().to_string(), &source, env, now)
            .await
            .with_context(|| format!("deploying {}", file.display()))?;
        tracing::info!(
            "workflow {} v{} ({:?}) from {}",
            deployed.def.name,
            deployed.def.version,
            outcome,
            file.display()
        );
    }
    Ok(())
}

/// Runs the host until Ctrl-C or SIGTERM.
pub async fn serve(args: ServeArgs) -> anyhow::Result<std::process::ExitCode> {
    let host = start(&args).await?;
    // A line on stdout that scripts (and tests) can wait for.
    println!("docket listening on http://{}", host.addr);
    // Ctrl-C or SIGTERM (what service managers send): a graceful stop.
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r?,
        _ = terminate.recv() => {}
    }
    tracing::info!("shutting down");
    host.shutdown().await;
    Ok(std::process::ExitCode::SUCCESS)
}
