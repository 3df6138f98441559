//! `docket export WF_ID`: a workflow's whole story as one JSON document — the intent, its
//! steps, every attempt, receipt and timeline entry, its cancellation, revisions, approvals
//! and notifications — straight from the database, for archiving before retention purges it.

use crate::app::is_postgres;
use crate::intent::WorkflowId;
use crate::store::postgres::PgStore;
use crate::store::sqlite::SqliteStore;
use crate::store::{
    ApprovalStore, CourseStore, DefinitionStore, NotificationFilter, NotificationStore, ReadStore,
};
use anyhow::bail;
use serde_json::json;
use std::path::PathBuf;
use std::process::ExitCode;

pub async fn run(db: &str, id: &str) -> anyhow::Result<ExitCode> {
    let id = WorkflowId(id.to_string());
    if is_postgres(db) {
        return on(&PgStore::connect(db).await?, &id).await;
    }
    let path = PathBuf::from(db.strip_prefix("sqlite://").unwrap_or(db));
    if !path.exists() {
        bail!(
            "there is no database at {}; start `docket serve` once, or pass --db",
            path.display()
        );
    }
    on(&SqliteStore::open(&path).await?, &id).await
}

async fn on<S>(store: &S, id: &WorkflowId) -> anyhow::Result<ExitCode>
where
    S: ReadStore + DefinitionStore + CourseStore + NotificationStore + ApprovalStore,
{
    let Some(workflow) = store.workflow(id).await? else {
        bail!(
            "there is no workflow {id} in this database (it may have been purged past the retention); `docket check` lists what is there"
        );
    };
    let records = crate::check::records_of(store, workflow, None).await?;
    let cancellation = store.cancellation(id).await?;
    let revisions = store.revisions(id).await?;
    let approvals = store.approvals(id).await?;
    let mut notifications = Vec::new();
    loop {
        let page = store
            .notifications(NotificationFilter {
                workflow_id: Some(id.clone()),
                state: None,
                after: notifications
                    .last()
                    .map(|n: &crate::store::NotificationRecord| n.seq),
                limit: 500,
            })
            .await?;
        let full = page.len() == 500;
        notifications.extend(page);
        if !full {
            break;
        }
    }
    let story = json!({
        "format": "docket.workflow-export/1",
        "workflow": records.workflow,
        "steps": records.steps,
        "receipts": records.receipts,
        "attempts": records.attempts,
        "timeline": records.timeline,
        "cancellation": cancellation,
        "revisions": revisions,
        "approvals": approvals,
        "notifications": notifications,
    });
    println!("{}", serde_json::to_string_pretty(&story)?);
    Ok(ExitCode::SUCCESS)
}
