//! `docket adapter deploy|activate|rollback|list`: the registry, straight on the database
//! (as `docket workflow deploy` is). Running hosts pick changes up within
//! [`crate::app::REGISTRY_POLL`]; the HTTP API offers the same operations.

use super::adapter::{cache_dir, read_component};
use crate::app::is_postgres;
use crate::catalog::Deployments;
use crate::catalog::registry;
use crate::runtime::{Runtime, RuntimeConfig};
use crate::store::postgres::PgStore;
use crate::store::sqlite::SqliteStore;
use crate::store::{ActiveTarget, ComponentStore, DefinitionStore};
use anyhow::{Context, anyhow, bail};
use std::path::PathBuf;
use std::process::ExitCode;

/// A registry operation.
pub enum Operation {
    Deploy(String),
    Activate(String),
    Rollback(String),
    List,
}

/// Who makes a change from this shell: `$USER` on this machine.
pub(crate) fn author() -> String {
    let user = std::env::var("USER").unwrap_or_else(|_| "unknown".into());
    let host = std::fs::read_to_string("/etc/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "localhost".into());
    format!("{user}@{host} (cli)")
}

pub(crate) fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Stores a verification's verdicts in `db`.
pub(crate) async fn record_verification(
    db: &str,
    verification: crate::store::Verification,
) -> anyhow::Result<()> {
    if is_postgres(db) {
        PgStore::connect(db)
            .await?
            .record_verification(verification)
            .await?;
    } else {
        let path = PathBuf::from(db.strip_prefix("sqlite://").unwrap_or(db));
        SqliteStore::open(&path)
            .await?
            .record_verification(verification)
            .await?;
    }
    Ok(())
}

pub async fn run(op: Operation, db: &str) -> anyhow::Result<ExitCode> {
    if is_postgres(db) {
        let store = PgStore::connect(db).await?;
        return on(&store, op).await;
    }
    let path = PathBuf::from(db.strip_prefix("sqlite://").unwrap_or(db));
    if !path.exists() {
        bail!(
            "there is no database at {}; start `docket serve` once, or pass --db",
            path.display()
        );
    }
    let store = SqliteStore::open(&path).await?;
    on(&store, op).await
}

async fn on<S: ComponentStore + DefinitionStore + Clone>(
    store: &S,
    op: Operation,
) -> anyhow::Result<ExitCode> {
    match op {
        Operation::Deploy(file) => deploy(store, &file).await,
        Operation::Activate(spec) => {
            let Some((name, version)) = spec.split_once('@') else {
                bail!(
                    "`{spec}` is not NAME@VERSION; e.g. `docket adapter activate http-delivery@2.0.0`"
                );
            };
            let digest = registry::find_version(store, name, version)
                .await
                .map_err(|e| anyhow!("{e} with `docket adapter deploy FILE.wasm`"))?;
            change(store, name, ActiveTarget::Digest(digest)).await
        }
        Operation::Rollback(name) => change(store, &name, ActiveTarget::Previous).await,
        Operation::List => list(store).await,
    }
}

async fn deploy<S: ComponentStore + DefinitionStore + Clone>(
    store: &S,
    file: &str,
) -> anyhow::Result<ExitCode> {
    let (origin, bytes) = read_component(file)?;
    let runtime = Runtime::new(RuntimeConfig {
        max_instances: 4,
        cache_dir: cache_dir(),
        ..RuntimeConfig::default()
    })?;
    let loaded = runtime
        .load(&bytes)
        .await
        .with_context(|| format!("{origin} is not a component docket can run"))?;
    // The host's grants come from its config, which this shell does not have: the steps
    // are checked for the world here, and for grants by `POST /v1/adapters`.
    let definitions = Deployments::new(store.clone()).all_latest().await?;
    let deployed = registry::deploy(store, loaded, bytes, &definitions, None, author(), now())
        .await
        .with_context(|| format!("deploying {origin}"))?;
    let c = &deployed.component;
    println!(
        "{}@{} ({}) {}; activate it with `docket adapter activate {}@{}`",
        c.name(),
        c.version(),
        c.digest,
        if deployed.added {
            "deployed (staged)"
        } else {
            "was already deployed"
        },
        c.name(),
        c.version()
    );
    Ok(ExitCode::SUCCESS)
}

async fn change<S: ComponentStore>(
    store: &S,
    name: &str,
    target: ActiveTarget,
) -> anyhow::Result<ExitCode> {
    let outcome = registry::change(store, name, target, author(), now()).await?;
    if outcome.changed {
        println!(
            "{}@{} ({}) is now active; running hosts pick it up within {:?}",
            name,
            outcome.active.version,
            outcome.active.digest,
            crate::app::REGISTRY_POLL
        );
    } else {
        println!(
            "{}@{} was already active; nothing changed",
            name, outcome.active.version
        );
    }
    Ok(ExitCode::SUCCESS)
}

async fn list<S: ComponentStore>(store: &S) -> anyhow::Result<ExitCode> {
    let stored = store.stored_components().await?;
    let active = store.active_components().await?;
    println!(
        "{:<34} {:<9} {:<8} {:<8} DIGEST",
        "NAME", "VERSION", "WORLD", "STATE"
    );
    for (_, versions) in registry::by_name(&stored) {
        for c in versions {
            let state = if active.iter().any(|a| a.digest == c.digest) {
                "active"
            } else {
                "staged"
            };
            println!(
                "{:<34} {:<9} {:<8} {:<8} {}",
                c.name, c.version, c.kind, state, c.digest
            );
        }
    }
    let events = store.component_events(None, 20).await?;
    if !events.is_empty() {
        println!("\nLatest changes:");
        for e in events {
            println!(
                "  {}  {:<11} {}@{}  by {}",
                crate::view::rfc3339(e.at),
                e.action,
                e.name,
                e.version,
                e.author
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
