//! Store-level admission: intents committed per second through the SQLite writer (group
//! commit, fsync on every commit), with 1 and with 64 concurrent callers, no scheduler.
//!
//! Run: `cargo bench --bench store_admit`

use docket::intent::{EventKind, NewEvent, StepRole, Subject, WorkflowId, canonicalize};
use docket::store::sqlite::SqliteStore;
use docket::store::{AdmissionStore, AdmitRequest, KeyScope, NewStep, NewWorkflow};
use std::time::Instant;

fn request(key: usize) -> AdmitRequest {
    let now = 1_700_000_000_000 + key as u64;
    AdmitRequest {
        scope: KeyScope {
            subject: Subject("bench".into()),
            workflow: "w".into(),
            key: format!("k-{key}"),
        },
        input: canonicalize(&serde_json::json!({"n": key})).unwrap(),
        now,
        create: Some(NewWorkflow {
            workflow_id: WorkflowId::new(now),
            definition_version: 1,
            steps: ["a", "b", "c", "d"]
                .iter()
                .enumerate()
                .map(|(i, s)| NewStep {
                    id: s.to_string(),
                    depends_on: if i == 0 {
                        vec![]
                    } else {
                        vec![["a", "b", "c"][i - 1].to_string()]
                    },
                    role: StepRole::Handler,
                    compensate_on: vec![],
                    reads: None,
                    adapter: None,
                })
                .collect(),
            deadline_at: now + 3_600_000,
            key_retention_ms: 1000,
            replaces: None,
            policy_version: 0,
            trace_parent: None,
            events: vec![
                NewEvent::workflow(EventKind::Observation, "Request recorded"),
                NewEvent::workflow(EventKind::Action, "Scheduled a"),
            ],
        }),
    }
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("admit.db"))
            .await
            .unwrap();
        let n = 500;
        let start = Instant::now();
        for k in 0..n {
            store.admit(request(k)).await.unwrap();
        }
        let one = start.elapsed();
        println!(
            "1 caller:   {n} admissions in {:.0} ms = {:.0}/s ({:.2} ms each)",
            one.as_secs_f64() * 1e3,
            n as f64 / one.as_secs_f64(),
            one.as_secs_f64() * 1e3 / n as f64
        );

        let n = 4000;
        let start = Instant::now();
        let mut set = tokio::task::JoinSet::new();
        let per = n / 64;
        for c in 0..64 {
            let store = store.clone();
            set.spawn(async move {
                for k in 0..per {
                    store.admit(request(10_000 + c * per + k)).await.unwrap();
                }
            });
        }
        while set.join_next().await.is_some() {}
        let many = start.elapsed();
        println!(
            "64 callers: {n} admissions in {:.0} ms = {:.0}/s",
            many.as_secs_f64() * 1e3,
            n as f64 / many.as_secs_f64()
        );
    });
}
