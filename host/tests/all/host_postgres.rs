//! A real `docket serve --db postgres://…`: the same behaviour as on SQLite, end to end.

use crate::host_process::{HostOptions, HostProcess, document};
use crate::postgres::TestDatabase;
use serde_json::json;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread")]
async fn document_delivery_runs_on_postgres_and_one_key_is_one_workflow() {
    let database = TestDatabase::create().await;
    let host = HostProcess::start(HostOptions {
        db: Some(database.url.clone()),
        ..HostOptions::default()
    })
    .await;
    assert!(
        host.log_text().contains("database: PostgreSQL at"),
        "{}",
        host.log_tail(20)
    );
    assert!(
        !host.log_text().contains(":docket@"),
        "the password is logged"
    );

    // Concurrent submissions of one key: exactly one 201, one workflow.
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..20 {
        let url = format!("{}/v1/intents", host.url);
        set.spawn(async move {
            let r = reqwest::Client::new()
                .post(url)
                .header("Idempotency-Key", "pg-1")
                .json(&json!({"workflow": "document-delivery", "input": document("On PostgreSQL")}))
                .send()
                .await
                .unwrap();
            let status = r.status().as_u16();
            let body: serde_json::Value = r.json().await.unwrap();
            (status, body["workflow_id"].as_str().unwrap().to_string())
        });
    }
    let mut answers = Vec::new();
    while let Some(a) = set.join_next().await {
        answers.push(a.unwrap());
    }
    assert_eq!(
        answers.iter().filter(|(s, _)| *s == 201).count(),
        1,
        "{answers:?}"
    );
    assert!(
        answers.iter().all(|(s, _)| *s == 201 || *s == 200),
        "{answers:?}"
    );
    let id = answers[0].1.clone();
    assert!(answers.iter().all(|(_, w)| *w == id), "{answers:?}");

    let wf = host
        .wait_for(
            &id,
            &["completed", "needs_review", "failed"],
            Duration::from_secs(30),
        )
        .await;
    assert_eq!(
        wf["state"],
        "completed",
        "{wf:#}\n{}",
        host.timeline_text(&id).await
    );
    assert_eq!(host.world().await.len(), 1);
    for step in wf["steps"].as_array().unwrap() {
        let receipt = &step["receipt"];
        assert!(
            receipt["component_digest"]
                .as_str()
                .unwrap()
                .starts_with("sha256:")
        );
        assert!(
            receipt["input_digest"]
                .as_str()
                .unwrap()
                .starts_with("sha256:")
        );
    }
    let (status, list) = host.get("/v1/workflows?state=completed").await;
    assert_eq!(status, 200);
    assert_eq!(list["data"].as_array().unwrap().len(), 1, "{list:#}");
    drop(host);
    database.drop_now().await;
}
