//! Durable steps per second: many intents of a 4-step pure-handler workflow run to
//! completion on SQLite with fsync on every commit (WAL, synchronous=FULL), or on
//! PostgreSQL with one or more hosts. Also the unloaded latency of one workflow from
//! admission to completion.
//!
//! Run: `cargo bench --bench durable_steps [-- INTENTS [POSTGRES_ADMIN_URL [HOSTS]]]`
//! (default 2000 intents on SQLite). With a PostgreSQL URL (a role that may create
//! databases) the run gets a fresh database, dropped afterwards; HOSTS schedulers (one by
//! default) share it, each with its own connection pool, lease owner and wake-ups
//! (LISTEN/NOTIFY), as separate hosts would; they share one process and its compiled
//! components.

#[path = "support/pg.rs"]
mod pg;

use docket::capabilities::{HostPolicy, SecretSource};
use docket::catalog::{Components, Deployments};
use docket::clock::{Clock, SystemClock};
use docket::intent::{EventKind, NewEvent, Subject, WorkflowId, WorkflowState, canonicalize};
use docket::runtime::{Runtime, RuntimeConfig};
use docket::scheduler::{Scheduler, SchedulerConfig};
use docket::store::postgres::PgStore;
use docket::store::sqlite::SqliteStore;
use docket::store::{
    AdmissionStore, AdmitRequest, ComponentStore, DefinitionStore, ExecutorStore, KeyScope,
    NewWorkflow, ReadStore,
};
use sqlx::{Connection, Executor};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Notify;

const DEFINITION: &str = r#"
name = "four-handlers"
version = 1
deadline = "1h"
[budget]
max_attempts = 100
[input_schema]
type = "object"
[[steps]]
id = "validate"
label = "Validate"
kind = "handler"
component = "validate-document"
version = "^1"
outputs = ["title", "recipient", "body"]
[steps.input]
title = "$input.title"
recipient = "$input.recipient"
body = "$input.body"
[[steps]]
id = "render"
label = "Render"
kind = "handler"
component = "render-document"
version = "^1"
after = ["validate"]
[steps.input]
title = "$steps.validate.output.title"
recipient = "$steps.validate.output.recipient"
body = "$steps.validate.output.body"
[[steps]]
id = "revalidate"
label = "Validate again"
kind = "handler"
component = "validate-document"
version = "^1"
after = ["render"]
outputs = ["title", "recipient", "body"]
[steps.input]
title = "$input.title"
recipient = "$input.recipient"
body = "$input.body"
[[steps]]
id = "rerender"
label = "Render again"
kind = "handler"
component = "render-document"
version = "^1"
after = ["revalidate"]
[steps.input]
title = "$steps.revalidate.output.title"
recipient = "$steps.revalidate.output.recipient"
body = "$steps.revalidate.output.body"
"#;

trait Store:
    AdmissionStore + ReadStore + ExecutorStore + DefinitionStore + ComponentStore + Clone + 'static
{
}
impl<T> Store for T where
    T: AdmissionStore
        + ReadStore
        + ExecutorStore
        + DefinitionStore
        + ComponentStore
        + Clone
        + 'static
{
}

#[derive(Clone)]
struct Bench<S> {
    store: S,
    clock: Arc<SystemClock>,
    deployed: Arc<docket::catalog::DeployedDef>,
    wake: Arc<Notify>,
}

/// Starts one scheduler per store (a host each) and returns the bench on the first store.
async fn setup<S: Store>(stores: Vec<S>, cache: &Path) -> Bench<S> {
    let runtime = Runtime::new(RuntimeConfig {
        max_instances: 300 * stores.len() as u32,
        cache_dir: Some(cache.to_path_buf()),
        ..RuntimeConfig::default()
    })
    .unwrap();
    let components = Components::new(runtime, HostPolicy::default());
    for name in ["validate-document", "render-document"] {
        components
            .load_file(Path::new(docket::guests::path(name).unwrap()))
            .await
            .unwrap();
    }
    let components = Arc::new(components);
    let clock = SystemClock::new();
    let mut first = None;
    for (n, store) in stores.into_iter().enumerate() {
        let deployments = Arc::new(Deployments::new(store.clone()));
        let (deployed, _) = deployments
            .deploy(
                "bench.toml",
                DEFINITION,
                components.as_ref(),
                clock.now_ms(),
            )
            .await
            .unwrap();
        let wake = Arc::new(Notify::new());
        let scheduler = Scheduler::new(
            store.clone(),
            deployments,
            components.clone(),
            Arc::new(SecretSource::default()),
            clock.clone(),
            SchedulerConfig {
                owner: format!("bench-host-{n}"),
                ..SchedulerConfig::default()
            },
            wake.clone(),
        );
        tokio::spawn(scheduler.run(tokio_util::sync::CancellationToken::new()));
        first.get_or_insert(Bench {
            store,
            clock: clock.clone(),
            deployed,
            wake,
        });
    }
    first.unwrap()
}

async fn admit<S: Store>(b: &Bench<S>, key: &str) -> WorkflowId {
    let input = canonicalize(&serde_json::json!({"title": "T", "recipient": "a@b.c", "body": "x"}))
        .unwrap();
    let id = WorkflowId::new(b.clock.now_ms());
    let steps = docket::intake::new_steps(&b.deployed.def);
    b.store
        .admit(AdmitRequest {
            scope: KeyScope {
                subject: Subject("bench".into()),
                workflow: "four-handlers".into(),
                key: key.into(),
            },
            input,
            now: b.clock.now_ms(),
            create: Some(NewWorkflow {
                workflow_id: id.clone(),
                definition_version: 1,
                steps,
                deadline_at: b.clock.now_ms() + 3_600_000,
                key_retention_ms: 1000,
                replaces: None,
                policy_version: 0,
                trace_parent: None,
                events: vec![NewEvent::workflow(
                    EventKind::Observation,
                    "Request recorded",
                )],
            }),
        })
        .await
        .unwrap();
    b.wake.notify_one();
    id
}

async fn wait_completed<S: Store>(b: &Bench<S>, ids: &[WorkflowId]) {
    for id in ids {
        loop {
            let wf = b.store.workflow(id).await.unwrap().unwrap();
            if wf.state == WorkflowState::Completed {
                break;
            }
            assert_eq!(
                wf.state,
                WorkflowState::Running,
                "{id} ended {:?}",
                wf.state
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
}

fn main() {
    let mut args = std::env::args().skip(1).filter(|a| a != "--bench");
    let intents: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(2000);
    let postgres = args.next();
    let hosts: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("cache");
        match postgres {
            None => {
                let store = SqliteStore::open(&dir.path().join("bench.db"))
                    .await
                    .unwrap();
                let b = setup(vec![store], &cache).await;
                run(&b, intents, "SQLite (WAL, synchronous=FULL), 1 host").await;
            }
            Some(admin) => {
                let name = format!("docket_bench_{:08x}", rand::random::<u32>());
                let mut conn = sqlx::PgConnection::connect(&admin).await.unwrap();
                conn.execute(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
                    .await
                    .unwrap();
                let url = format!("{}/{name}", admin.rsplit_once('/').unwrap().0);
                let mut stores = Vec::new();
                for _ in 0..hosts {
                    stores.push(PgStore::connect(&url).await.unwrap());
                }
                let b = setup(stores.clone(), &cache).await;
                let what = format!(
                    "PostgreSQL, {hosts} host{}",
                    if hosts == 1 { "" } else { "s" }
                );
                run(&b, intents, &what).await;
                for s in &stores {
                    s.close().await;
                }
                drop(conn);
                pg::admin(&admin, &format!("DROP DATABASE {name} WITH (FORCE)")).await;
            }
        }
    });
}

async fn run<S: Store>(b: &Bench<S>, intents: usize, what: &str) {
    {
        // Warm up: compile caches, first instances.
        let warm: Vec<_> = futures_join(b, 0..20).await;
        wait_completed(b, &warm).await;

        // Unloaded latency: one workflow at a time.
        let mut latencies = Vec::new();
        for i in 0..30 {
            let start = Instant::now();
            let id = admit(b, &format!("lat-{i}")).await;
            wait_completed(b, &[id]).await;
            latencies.push(start.elapsed());
        }
        latencies.sort();

        // Throughput: all intents admitted at once, steps run as fast as commits allow.
        let start = Instant::now();
        let ids = futures_join(b, 1000..1000 + intents).await;
        let admitted = start.elapsed();
        wait_completed(b, &ids).await;
        let total = start.elapsed();
        let steps = intents * 4;
        println!("durable steps: {intents} workflows x 4 handler steps on {what}");
        println!(
            "  admission of {intents} intents     {:>8.0} ms",
            admitted.as_secs_f64() * 1e3
        );
        println!(
            "  all {steps} steps completed in      {:>8.0} ms",
            total.as_secs_f64() * 1e3
        );
        println!(
            "  durable steps per second      {:>8.0}",
            steps as f64 / total.as_secs_f64()
        );
        println!(
            "  unloaded latency admission→completed: median {:.1} ms, p90 {:.1} ms (30 runs)",
            latencies[15].as_secs_f64() * 1e3,
            latencies[27].as_secs_f64() * 1e3
        );
    }
}

/// Admits intents with keys from `range`, 64 at a time.
async fn futures_join<S: Store>(b: &Bench<S>, range: std::ops::Range<usize>) -> Vec<WorkflowId> {
    let keys: Vec<usize> = range.collect();
    let mut ids = Vec::with_capacity(keys.len());
    for chunk in keys.chunks(64) {
        let mut set = tokio::task::JoinSet::new();
        for k in chunk {
            let key = format!("k-{k}");
            let b2 = b.clone();
            set.spawn(async move { admit(&b2, &key).await });
        }
        while let Some(id) = set.join_next().await {
            ids.push(id.unwrap());
        }
    }
    ids
}
