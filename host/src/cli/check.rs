//! `docket check [--repair]`: every workflow's records read back, its projection rebuilt
//! from them and the invariants checked ([`crate::check`]); a table of what was found, and
//! exit status 1 while anything is broken. `--repair` rebuilds what a rebuild can fix (a
//! stored state its steps contradict), once, and tells it on the workflow's timeline.

use crate::app::is_postgres;
use crate::check::{Invariant, Violation, derived_state};
use crate::store::postgres::PgStore;
use crate::store::sqlite::SqliteStore;
use crate::store::{DefinitionStore, MetricsStore, ReadStore};
use anyhow::bail;
use std::path::PathBuf;
use std::process::ExitCode;

pub async fn run(db: &str, repair: bool) -> anyhow::Result<ExitCode> {
    if is_postgres(db) {
        return on(&PgStore::connect(db).await?, repair).await;
    }
    let path = PathBuf::from(db.strip_prefix("sqlite://").unwrap_or(db));
    if !path.exists() {
        bail!(
            "there is no database at {}; start `docket serve` once, or pass --db",
            path.display()
        );
    }
    on(&SqliteStore::open(&path).await?, repair).await
}

async fn on<S: ReadStore + DefinitionStore + MetricsStore>(
    store: &S,
    repair: bool,
) -> anyhow::Result<ExitCode> {
    let mut found: Vec<Violation> = Vec::new();
    let mut repaired = Vec::new();
    let workflows = crate::check::sweep(store, std::time::Duration::ZERO, |records, violations| {
        found.extend(
            violations
                .iter()
                .filter(|v| !(repair && v.invariant.repairable()))
                .cloned(),
        );
        if repair && violations.iter().any(|v| v.invariant.repairable()) {
            repaired.push(records.clone());
        }
    })
    .await?;
    // Repairs once the walk is over: a workflow repaired is never read twice.
    let mut told = Vec::new();
    for records in repaired {
        let stored = records.workflow.state;
        let id = &records.workflow.workflow_id;
        match store
            .rebuild_state(id, stored, "docket check --repair", super::registry::now())
            .await?
        {
            Some(state) => told.push(format!(
                "{id}: stored as {}, rebuilt as {} (its steps say {})",
                stored.as_str(),
                state.as_str(),
                derived_state(&records).as_str()
            )),
            // It moved meanwhile: what it is now is for the next run to judge.
            None => found.push(Violation {
                invariant: Invariant::ProjectionMatches,
                workflow_id: id.to_string(),
                step: None,
                detail: "it changed while it was checked and was not repaired; run the check again"
                    .into(),
            }),
        }
    }
    let repaired = told;
    println!("checked {workflows} workflows");
    println!("{:<26} {:>10}", "invariant", "violations");
    for invariant in Invariant::ALL {
        let n = found.iter().filter(|v| v.invariant == invariant).count();
        println!("{:<26} {:>10}", invariant.as_str(), n);
    }
    for v in &found {
        println!(
            "{} {}{}: {}",
            v.invariant.as_str(),
            v.workflow_id,
            v.step
                .as_deref()
                .map(|s| format!(" step {s}"))
                .unwrap_or_default(),
            v.detail
        );
    }
    for r in &repaired {
        println!("repaired {r}");
    }
    if found.is_empty() {
        Ok(ExitCode::SUCCESS)
    } else {
        if !repair && found.iter().any(|v| v.invariant.repairable()) {
            println!("`docket check --repair` rebuilds the states marked projection_matches");
        }
        Ok(ExitCode::from(1))
    }
}
