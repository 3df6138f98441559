//! `docket adapter deploy|activate|rollback|list`: the registry, straight on the database
//! (as `docket workflow deploy` is). Running hosts pick changes up within
//! [`super::serve::REGISTRY_POLL`]; the HTTP API offers the same operations.

use super::adapter::{cache_dir, resolve_component};
use super::serve::is_postgres;
use crate::runtime::{Runtime, RuntimeConfig};
use crate::store::postgres::PgStore;
use crate::store::sqlite::SqliteStore;
use crate::store::{ActiveChange, ActiveTarget, ComponentStore, NewComponent, StoreError};
use anyhow::{Context, bail};
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

fn now() -> u64 {
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

async fn on<S: ComponentStore>(store: &S, op: Operation) -> anyhow::Result<ExitCode> {
    match op {
        Operation::Deploy(file) => deploy(store, &file).await,
        Operation::Activate(spec) => {
            let Some((name, version)) = spec.split_once('@') else {
                bail!(
                    "`{spec}` is not NAME@VERSION; e.g. `docket adapter activate http-delivery@2.0.0`"
                );
            };
            let stored = store.stored_components().await?;
            let Some(found) = stored
                .iter()
                .find(|c| c.name == name && c.version == version)
            else {
                let known: Vec<&str> = stored
                    .iter()
                    .filter(|c| c.name == name)
                    .map(|c| c.version.as_str())
                    .collect();
                bail!(
                    "there is no deployed version {version} of `{name}` (deployed: {}); deploy it first with `docket adapter deploy FILE.wasm`",
                    if known.is_empty() {
                        "none".into()
                    } else {
                        known.join(", ")
                    }
                );
            };
            change(store, name, ActiveTarget::Digest(found.digest.clone())).await
        }
        Operation::Rollback(name) => change(store, &name, ActiveTarget::Previous).await,
        Operation::List => list(store).await,
    }
}

async fn deploy<S: ComponentStore>(store: &S, file: &str) -> anyhow::Result<ExitCode> {
    let path = resolve_component(file)?;
    let bytes = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
    let runtime = Runtime::new(RuntimeConfig {
        max_instances: 4,
        cache_dir: cache_dir(),
        ..RuntimeConfig::default()
    })?;
    // The same checks as a host's: it compiles, targets a docket world, and describes itself.
    let c = runtime
        .load(&bytes)
        .await
        .with_context(|| format!("{} is not a component docket can run", path.display()))?;
    if let Some(contract) = c.contract()
        && let Err(e) = contract.check()
    {
        bail!(
            "{}: `{}@{}` declares an unusable contract: {e}",
            path.display(),
            c.name(),
            c.version()
        );
    }
    if let Some(other) = store
        .stored_components()
        .await?
        .into_iter()
        .find(|s| s.name == c.name() && s.version == c.version() && s.digest != c.digest)
    {
        bail!(
            "`{}@{}` is already deployed with digest {}, and {} has digest {}; a deployed version never changes: give the changed component a new version",
            c.name(),
            c.version(),
            other.digest,
            path.display(),
            c.digest
        );
    }
    let added = store
        .store_component(NewComponent {
            digest: c.digest.clone(),
            name: c.name().to_string(),
            version: c.version().to_string(),
            kind: c.world_name().to_string(),
            bytes,
            registered_at: now(),
            author: author(),
        })
        .await?;
    println!(
        "{}@{} ({}) {}; activate it with `docket adapter activate {}@{}`",
        c.name(),
        c.version(),
        c.digest,
        if added {
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
    let outcome = store
        .set_active(ActiveChange {
            name: name.to_string(),
            target,
            author: author(),
            now: now(),
        })
        .await
        .map_err(|e| match e {
            StoreError::NotFound(what) => {
                anyhow::anyhow!("cannot change `{name}`: no {what}")
            }
            other => other.into(),
        })?;
    if outcome.changed {
        println!(
            "{}@{} ({}) is now active; running hosts pick it up within {:?}",
            name,
            outcome.active.version,
            outcome.active.digest,
            super::serve::REGISTRY_POLL
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
    let mut rows: Vec<_> = stored.iter().collect();
    rows.sort_by(|a, b| {
        a.name.cmp(&b.name).then_with(|| {
            semver::Version::parse(&a.version)
                .ok()
                .cmp(&semver::Version::parse(&b.version).ok())
        })
    });
    for c in rows {
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
    let events = store.component_events(None, 20).await?;
    if !events.is_empty() {
        println!("\nLatest changes:");
        for e in events {
            println!(
                "  {}  {:<11} {}@{}  by {}",
                crate::api::rfc3339(e.at),
                e.action,
                e.name,
                e.version,
                e.author
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
