//! `docket workflow check`, `docket workflow deploy` and `docket workflow schema`.

use crate::capabilities::HostPolicy;
use crate::catalog::{Components, Deployments};
use crate::config::HostConfig;
use crate::runtime::{Runtime, RuntimeConfig};
use crate::store::DefinitionStore;
use crate::store::postgres::PgStore;
use crate::store::sqlite::SqliteStore;
use anyhow::Context;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The components and policy definitions are checked against: the built examples and the
/// config's components, with the config's allowances (the built-in simulator's when the
/// config says nothing about `http-delivery`, as `docket serve` would).
async fn check_env(config: Option<&Path>) -> anyhow::Result<Components> {
    let mut config = HostConfig::load(config)?;
    if !config.policy.adapters.contains_key("http-delivery") {
        let stand_in = "http://127.0.0.1:1";
        for name in [
            "http-delivery",
            "http-delivery-query-only",
            "http-delivery-fire-and-forget",
            "http-delivery-lying",
        ] {
            config.policy.adapters.insert(
                name.into(),
                crate::capabilities::AdapterPolicy {
                    allow_hosts: vec![stand_in.parse()?],
                    allow_secrets: ["provider_token".to_string()].into(),
                    settings: [("base_url".to_string(), stand_in.to_string())].into(),
                    digests: Default::default(),
                    allow_private: false,
                    webhook_key: None,
                },
            );
        }
    }
    let runtime = Runtime::new(RuntimeConfig {
        max_instances: 16,
        cache_dir: super::adapter::cache_dir(),
        ..RuntimeConfig::default()
    })?;
    let policy: HostPolicy = config.policy.clone();
    let components = Components::new(runtime, policy);
    for (_, bytes) in crate::guests::EMBEDDED {
        let _ = components.load_bytes(bytes).await;
    }
    for path in &config.components {
        components.load_file(path).await?;
    }
    Ok(components)
}

/// Prints the JSON Schema of definition files.
pub async fn schema() -> anyhow::Result<ExitCode> {
    let schema = crate::workflow::definition_schema();
    println!("{}", serde_json::to_string_pretty(&schema)?);
    Ok(ExitCode::SUCCESS)
}

/// Validates each file without a host; prints every problem with file:line:col.
pub async fn check(files: &[PathBuf], config: Option<&Path>) -> anyhow::Result<ExitCode> {
    let env = check_env(config).await?;
    let mut failed = false;
    for file in files {
        let source =
            std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
        match crate::workflow::check(&file.display().to_string(), &source, &env) {
            Ok(def) => println!(
                "{}: ok ({} v{}, {} steps)",
                file.display(),
                def.name,
                def.version,
                def.steps.len()
            ),
            Err(diagnostics) => {
                failed = true;
                eprintln!("{diagnostics}");
            }
        }
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// Deploys each file into the database.
pub async fn deploy(
    files: &[PathBuf],
    db: &str,
    config: Option<&Path>,
) -> anyhow::Result<ExitCode> {
    let env = check_env(config).await?;
    // Definitions may name any version in the database's registry, not only the examples.
    if crate::app::is_postgres(db) {
        let store = PgStore::connect(db).await?;
        env.sync(&store).await?;
        return deploy_to(Deployments::new(store), files, &env).await;
    }
    let path = PathBuf::from(db.strip_prefix("sqlite://").unwrap_or(db));
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let store = SqliteStore::open(&path).await?;
    env.sync(&store).await?;
    deploy_to(Deployments::new(store), files, &env).await
}

async fn deploy_to<S: DefinitionStore>(
    deployments: Deployments<S>,
    files: &[PathBuf],
    env: &(dyn crate::workflow::CheckEnv + Sync),
) -> anyhow::Result<ExitCode> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis() as u64;
    let mut failed = false;
    for file in files {
        let source =
            std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
        match deployments
            .deploy(&file.display().to_string(), &source, env, now)
            .await
        {
            Ok((d, outcome)) => println!(
                "{}: {} v{} {:?}",
                file.display(),
                d.def.name,
                d.def.version,
                outcome
            ),
            Err(e) => {
                failed = true;
                eprintln!("{}: {e}", file.display());
            }
        }
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
