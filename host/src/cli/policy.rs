//! `docket policy deploy FILE` and `docket policy list`: policy versions, straight on the
//! database (as `docket adapter deploy` is). Running hosts enforce a new version within
//! [`crate::app::REGISTRY_POLL`]; the HTTP API offers the same operations.

use super::registry::author;
use crate::app::is_postgres;
use crate::intent::sha256_digest;
use crate::policy::PolicyDoc;
use crate::store::postgres::PgStore;
use crate::store::sqlite::SqliteStore;
use crate::store::{NewPolicy, PolicyStore};
use anyhow::{Context, bail};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// A policy operation.
pub enum Operation {
    Deploy(PathBuf),
    List,
}

pub async fn run(op: Operation, db: &str) -> anyhow::Result<ExitCode> {
    // A document is checked before the database is touched.
    let document = match &op {
        Operation::Deploy(file) => Some(read_checked(file)?),
        Operation::List => None,
    };
    if is_postgres(db) {
        return on(&PgStore::connect(db).await?, document).await;
    }
    let path = PathBuf::from(db.strip_prefix("sqlite://").unwrap_or(db));
    if !path.exists() {
        bail!(
            "there is no database at {}; start `docket serve` once, or pass --db",
            path.display()
        );
    }
    on(&SqliteStore::open(&path).await?, document).await
}

/// The document in `file`, if it is a valid policy; else every problem at file:line:col.
fn read_checked(file: &Path) -> anyhow::Result<String> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?;
    if let Err(problems) = PolicyDoc::parse(&text) {
        let listed: Vec<String> = problems
            .iter()
            .map(|p| format!("{}:{}:{}: {}", file.display(), p.line, p.column, p.message))
            .collect();
        bail!("the policy is invalid:\n{}", listed.join("\n"));
    }
    Ok(text)
}

async fn on<S: PolicyStore>(store: &S, document: Option<String>) -> anyhow::Result<ExitCode> {
    match document {
        Some(document) => {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis() as u64)
                .unwrap_or(0);
            let (stored, new) = store
                .deploy_policy(NewPolicy {
                    digest: sha256_digest(document.as_bytes()),
                    document,
                    author: author(),
                    now,
                })
                .await?;
            if new {
                println!(
                    "policy version {} deployed ({}); running hosts enforce it within {:?}",
                    stored.version,
                    stored.digest,
                    crate::app::REGISTRY_POLL
                );
            } else {
                println!(
                    "policy version {} already has this document ({}); nothing changed",
                    stored.version, stored.digest
                );
            }
        }
        None => {
            let all = store.policies().await?;
            if all.is_empty() {
                println!("no policy deployed: version 0 allows everything");
            }
            for p in all {
                println!(
                    "version {:>3}  {}  by {}  at {}",
                    p.version,
                    p.digest,
                    p.author,
                    crate::view::rfc3339(p.deployed_at)
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
