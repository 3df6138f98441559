//! `docket check [--repair]`: every workflow's records read back, its projection rebuilt
//! from them and the invariants checked ([`crate::check`]); a table of what was found, and
//! exit status 1 while anything is broken. `--repair` rebuilds what a rebuild can fix (a
//! stored state its steps contradict), once, and tells it on the workflow's timeline.

use crate::app::is_postgres;
use crate::check::{Invariant, Records, Violation, check, derived_state};
use crate::store::postgres::PgStore;
use crate::store::sqlite::SqliteStore;
use crate::store::{DefinitionStore, MetricsStore, ReadStore, StoreResult, WorkflowFilter};
use anyhow::bail;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

/// Workflows read per page.
const PAGE: u32 = 200;

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

/// Everything stored of `workflow`, with its definition's dependencies.
pub async fn records_of<S: ReadStore + DefinitionStore>(
    store: &S,
    workflow: crate::store::WorkflowRecord,
) -> StoreResult<Records> {
    let id = &workflow.workflow_id;
    let steps = store.steps(id).await?;
    let receipts = store.receipts(id).await?;
    let mut attempts = Vec::new();
    for step in &steps {
        let mut after = 0;
        loop {
            let page = store.attempts(id, &step.step, after, 500).await?;
            let Some(last) = page.last() else { break };
            after = last.number;
            let full = page.len() == 500;
            attempts.extend(page);
            if !full {
                break;
            }
        }
    }
    let mut timeline = Vec::new();
    loop {
        let after = timeline
            .last()
            .map_or(0, |e: &crate::intent::TimelineEvent| e.seq);
        let page = store.timeline(id, after, 1000).await?;
        let full = page.len() == 1000;
        timeline.extend(page);
        if !full {
            break;
        }
    }
    let after = match store
        .definition(&workflow.workflow, workflow.definition_version)
        .await?
    {
        Some(def) => crate::workflow::parse(&def.name, &def.source)
            .map(|d| {
                d.steps
                    .iter()
                    .map(|s| {
                        (
                            s.id.as_str().to_string(),
                            s.after.iter().map(|a| a.as_str().to_string()).collect(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default(),
        None => BTreeMap::new(),
    };
    Ok(Records {
        workflow,
        steps,
        receipts,
        attempts,
        timeline,
        after,
    })
}

async fn on<S: ReadStore + DefinitionStore + MetricsStore>(
    store: &S,
    repair: bool,
) -> anyhow::Result<ExitCode> {
    let mut found: Vec<Violation> = Vec::new();
    let mut repaired = Vec::new();
    let mut workflows = 0u64;
    let mut before = None;
    loop {
        let page = store
            .list_workflows(&WorkflowFilter {
                before: before.clone(),
                limit: PAGE,
                ..WorkflowFilter::default()
            })
            .await?;
        let Some(last) = page.last() else { break };
        before = Some((last.created_at, last.workflow_id.clone()));
        let full = page.len() == PAGE as usize;
        for workflow in page {
            workflows += 1;
            let records = records_of(store, workflow).await?;
            let mut violations = check(&records);
            if repair && violations.iter().any(|v| v.invariant.repairable()) {
                let stored = records.workflow.state;
                let now = super::registry::now();
                if let Some(state) = store
                    .rebuild_state(
                        &records.workflow.workflow_id,
                        stored,
                        "docket check --repair",
                        now,
                    )
                    .await?
                {
                    repaired.push(format!(
                        "{}: stored as {}, rebuilt as {} (its steps say {})",
                        records.workflow.workflow_id,
                        stored.as_str(),
                        state.as_str(),
                        derived_state(&records).as_str()
                    ));
                    violations.retain(|v| !v.invariant.repairable());
                }
            }
            found.extend(violations);
        }
        if !full {
            break;
        }
    }
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
