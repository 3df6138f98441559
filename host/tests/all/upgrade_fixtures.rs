//! Upgrades from every earlier release: each directory of `host/tests/fixtures/upgrade/`
//! holds a database made at one schema version (named by its last migration) — a SQLite
//! file and a PostgreSQL dump — with the provider simulator's world saved beside each, and
//! `fixture.json` naming the workflows it holds paused and what each must become.
//!
//! The current binary opens every fixture, migrates it, and each workflow continues or
//! recovers as its state says, the provider's record showing no second delivery; `docket
//! check` passes. The host's and the provider's clocks start where the fixture's stopped
//! (`DOCKET_TEST_CLOCK_START_MS`), so leases, deadlines and key retention are as they were.
//!
//! `the_generator_makes_a_fixture_this_release_opens` runs the generator in the suite (into
//! a scratch directory); `bash scripts/make-upgrade-fixture.sh` keeps what it makes. Every migration adds its fixture, and
//! `every_migration_has_its_upgrade_fixture` fails until it has one.

use crate::host_process::{Contract, HostOptions, HostProcess, PROVIDER_TOKEN, document};
use crate::postgres::TestDatabase;
use docket::intent::{WorkflowId, external_idempotency_key};
use docket::sim::{ProviderSim, RunningSim, SimConfig, WorldSnapshot};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Leases of the generating hosts: long enough that no later host of the generation takes
/// over a step an earlier one left mid-attempt.
const LEASE: &str = "10m";
/// What the upgraded host moves its clock by first: past every lease left behind.
const PAST_THE_LEASES_MS: u64 = 11 * 60 * 1000;
/// The idempotency namespace every `http-delivery` variant declares.
const NAMESPACE: &str = "reference-provider";
/// Longest the workflows of one fixture may take to settle after the upgrade.
const SETTLE: Duration = Duration::from_secs(120);

fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn fixtures_dir() -> PathBuf {
    manifest_dir().join("tests/fixtures/upgrade")
}

/// The number of the last migration: the schema version this release writes.
fn current_schema() -> u32 {
    std::fs::read_dir(manifest_dir().join("../migrations/sqlite"))
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            name.split('_').next()?.parse().ok()
        })
        .max()
        .expect("migrations")
}

/// One workflow a fixture holds: how it was left, and what it must become.
struct Held {
    key: &'static str,
    workflow: &'static str,
    /// How the generation left it.
    held: &'static str,
    /// Its state once the upgraded host has done what it can.
    state: &'static str,
    /// The state of its `deliver` step then.
    deliver: &'static str,
    /// Deliveries the provider holds for it then (never more than one).
    deliveries: usize,
    /// Its approval step waits for a person, who approves (the digest the upgraded host
    /// shows) once the host is up.
    approve: bool,
}

const IDEMPOTENT: &str = "delivery-idempotent";
const FIRE_AND_FORGET: &str = "delivery-fire-and-forget";
const TIGHT_BUDGET: &str = "delivery-tight-budget";
const GUARDED: &str = "delivery-guarded";
const APPROVED: &str = "approved-delivery";

/// The policy in force in the fixtures: deliveries of [`GUARDED`] are denied.
const POLICY: &str = "[[rules]]\nworkflows = [\"delivery-guarded\"]\neffect = \"deny\"\nreason = \"deliveries of this kind are paused\"\n\n[[rules]]\neffect = \"allow\"\n";

const HELD: &[Held] = &[
    Held {
        key: "completed",
        workflow: IDEMPOTENT,
        held: "completed",
        state: "completed",
        deliver: "succeeded",
        deliveries: 1,
        approve: false,
    },
    Held {
        key: "review",
        workflow: FIRE_AND_FORGET,
        held: "needs_review: the answer was lost and nothing may prove or repeat it",
        state: "needs_review",
        deliver: "outcome_unknown",
        deliveries: 1,
        approve: false,
    },
    Held {
        key: "blocked-budget",
        workflow: TIGHT_BUDGET,
        held: "needs_review: the step blocked by its budget after a refused attempt",
        state: "needs_review",
        deliver: "blocked",
        deliveries: 0,
        approve: false,
    },
    Held {
        key: "blocked-policy",
        workflow: GUARDED,
        held: "needs_review: the step blocked by the policy in force",
        state: "needs_review",
        deliver: "blocked",
        deliveries: 0,
        approve: false,
    },
    Held {
        key: "contradicted",
        workflow: IDEMPOTENT,
        held: "needs_review: a provider that forgot the key delivered twice, the late answer naming the first",
        state: "needs_review",
        deliver: "contradicted",
        deliveries: 2,
        approve: false,
    },
    Held {
        key: "compensating",
        workflow: IDEMPOTENT,
        held: "withdrawn, its compensation's host dead at checkpoint 4 (the cancel sent)",
        state: "cancelled",
        deliver: "compensated",
        deliveries: 1,
        approve: false,
    },
    Held {
        key: "crash-1",
        workflow: IDEMPOTENT,
        held: "running: its host died at checkpoint 1",
        state: "completed",
        deliver: "succeeded",
        deliveries: 1,
        approve: false,
    },
    Held {
        key: "crash-2",
        workflow: IDEMPOTENT,
        held: "running: its host died at checkpoint 2",
        state: "completed",
        deliver: "succeeded",
        deliveries: 1,
        approve: false,
    },
    Held {
        key: "crash-3",
        workflow: IDEMPOTENT,
        held: "running, outcome unknown: its host died at checkpoint 3 (identity recorded)",
        state: "completed",
        deliver: "succeeded",
        deliveries: 1,
        approve: false,
    },
    Held {
        key: "crash-4",
        workflow: IDEMPOTENT,
        held: "running, outcome unknown: its host died at checkpoint 4 (the provider committed)",
        state: "completed",
        deliver: "succeeded",
        deliveries: 1,
        approve: false,
    },
    Held {
        key: "crash-5",
        workflow: IDEMPOTENT,
        held: "running: its host died at checkpoint 5 (the result stored)",
        state: "completed",
        deliver: "succeeded",
        deliveries: 1,
        approve: false,
    },
    Held {
        key: "crash-6",
        workflow: IDEMPOTENT,
        held: "running: its host died at checkpoint 6 (the receipt committed)",
        state: "completed",
        deliver: "succeeded",
        deliveries: 1,
        approve: false,
    },
    Held {
        key: "running",
        workflow: IDEMPOTENT,
        held: "running: admitted, nothing run yet",
        state: "completed",
        deliver: "succeeded",
        deliveries: 1,
        approve: false,
    },
    Held {
        key: "cancelled",
        workflow: IDEMPOTENT,
        held: "cancelled before anything ran",
        state: "cancelled",
        deliver: "cancelled",
        deliveries: 0,
        approve: false,
    },
    Held {
        key: "approval",
        workflow: APPROVED,
        held: "running: its approval step waits for a person (approved after the upgrade)",
        state: "completed",
        deliver: "succeeded",
        deliveries: 1,
        approve: true,
    },
];

/// The definitions the fixtures' workflows run: the idempotent delivery compensated when
/// withdrawn, the one that declares nothing, and one whose budget allows no retry.
fn definitions() -> Vec<(String, String)> {
    let (file, text) = Contract::Idempotent.definition();
    let idempotent = (
        file,
        format!("{text}\n[steps.compensation]\non = \"workflow_cancelled\"\n"),
    );
    let (_, text) = Contract::Idempotent.definition();
    let tight = text
        .replace(
            &format!("name = {IDEMPOTENT:?}"),
            &format!("name = {TIGHT_BUDGET:?}"),
        )
        .replace("max_attempts = 20", "max_attempts = 3");
    assert!(tight.contains("max_attempts = 3") && tight.contains(TIGHT_BUDGET));
    let guarded = text.replace(
        &format!("name = {IDEMPOTENT:?}"),
        &format!("name = {GUARDED:?}"),
    );
    let approved = std::fs::read_to_string(
        crate::host_process::repo_root().join("workflows/approved-delivery.toml"),
    )
    .unwrap();
    vec![
        idempotent,
        Contract::FireAndForget.definition(),
        (format!("{TIGHT_BUDGET}.toml"), tight),
        (format!("{GUARDED}.toml"), guarded),
        (format!("{APPROVED}.toml"), approved),
    ]
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    fn name(self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        }
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// What one generation made: the workflows' ids by key, and when it stopped.
struct Made {
    ids: serde_json::Map<String, Value>,
    made_at_ms: u64,
}

/// Runs the generation on `db` (a SQLite file in `dir`, or a PostgreSQL URL) against `sim`,
/// leaving every workflow of [`HELD`] as its `held` says.
async fn generate(sim: &RunningSim, db: Option<String>) -> (tempfile::TempDir, Made) {
    let provider = sim.base_url();
    let options = |dir, env: Vec<(&str, String)>, pause: bool| HostOptions {
        config: format!("[limits]\nlease = \"{LEASE}\"\n"),
        workflows: definitions(),
        env: env.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
        dir,
        provider: Some(provider.clone()),
        db: db.clone(),
        pause_execution: pause,
        ..HostOptions::default()
    };
    let mut ids = serde_json::Map::new();
    let faults = |patch: Value| sim.sim().set_faults(patch).unwrap();
    let submit = async |host: &HostProcess, workflow: &str, key: &str| {
        let (status, created) = host.submit(workflow, key, document(key)).await;
        assert_eq!(status, 201, "{key}: {created}");
        created["workflow_id"].as_str().unwrap().to_string()
    };
    let settled = &["completed", "needs_review", "failed", "cancelled"];

    // Settled workflows, and one completed to be withdrawn next.
    let host = HostProcess::start(options(None, vec![], false)).await;
    for (key, workflow, patch, state) in [
        ("completed", IDEMPOTENT, None, "completed"),
        (
            "review",
            FIRE_AND_FORGET,
            Some(json!({"lose_next": 1})),
            "needs_review",
        ),
        (
            "blocked-budget",
            TIGHT_BUDGET,
            Some(json!({"unavailable_next": 1})),
            "needs_review",
        ),
        ("compensating", IDEMPOTENT, None, "completed"),
    ] {
        if let Some(patch) = patch {
            faults(patch);
        }
        let id = submit(&host, workflow, key).await;
        let wf = host.wait_for(&id, settled, SETTLE).await;
        assert_eq!(wf["state"], state, "{key}: {wf:#}");
        ids.insert(key.into(), id.into());
    }
    // Waiting for a person's approval.
    let id = submit(&host, APPROVED, "approval").await;
    crate::wait::until("the approval asked", SETTLE, || async {
        let (_, wf) = host.get(&format!("/v1/workflows/{id}")).await;
        if wf["next_action"]["kind"] == "approval" {
            Ok(())
        } else {
            Err(format!("{wf:#}"))
        }
    })
    .await;
    ids.insert("approval".into(), id.into());
    // Blocked by the policy in force.
    let (status, answer) = host
        .post_with_key("/v1/policies", "policy-1", json!({"document": POLICY}))
        .await;
    assert_eq!(status, 201, "{answer}");
    let id = submit(&host, GUARDED, "blocked-policy").await;
    let wf = host.wait_for(&id, settled, SETTLE).await;
    assert_eq!(wf["state"], "needs_review", "{wf:#}");
    ids.insert("blocked-policy".into(), id.into());
    // Contradicted: a provider that forgot its idempotency delivers twice, and the first
    // call's late answer names the first delivery (the host's clock passes the call's
    // lease while the provider holds its answer: recovery sends again).
    faults(json!({
        "slow_next": 1, "slow_ms": 6000, "visibility_delay_ms": 600_000, "idempotency": false
    }));
    let id = submit(&host, IDEMPOTENT, "contradicted").await;
    crate::wait::until(
        "the first call under way",
        Duration::from_secs(20),
        || async {
            let attempts = host.attempts(&id, "deliver").await;
            match attempts.first() {
                Some(a) if a["checkpoint"] == 3 => Ok(()),
                _ => Err(format!("{attempts:#?}")),
            }
        },
    )
    .await;
    host.advance_clock(PAST_THE_LEASES_MS).await;
    let wf = crate::wait::until("the step contradicted", SETTLE, || async {
        let (_, wf) = host.get(&format!("/v1/workflows/{id}")).await;
        let deliver = &wf["steps"][2];
        // The projection reads the workflow's row before its steps: under load it can show
        // the step's change one read before the state's.
        if deliver["state"] == "contradicted" && wf["state"] == "needs_review" {
            Ok(wf)
        } else {
            Err(format!("{wf:#}"))
        }
    })
    .await;
    assert_eq!(wf["state"], "needs_review", "{wf:#}");
    faults(json!({"visibility_delay_ms": 0, "idempotency": true}));
    ids.insert("contradicted".into(), id.into());
    let dir = host.kill();

    // The withdrawal's compensation: its host dies once the cancel was sent.
    let env = vec![("DOCKET_FAILPOINT", "compensation-checkpoint-4".to_string())];
    let mut host = HostProcess::start(options(Some(dir), env, false)).await;
    let id = ids["compensating"].as_str().unwrap().to_string();
    let (status, answer) = host
        .post_with_key(
            &format!("/v1/workflows/{id}/cancel"),
            "withdraw",
            json!({"reason": "withdrawn", "withdraw": true}),
        )
        .await;
    assert_eq!(status, 202, "{answer}");
    let exit = host.wait_exit(Duration::from_secs(60)).await;
    assert!(exit.is_some_and(|s| !s.success()), "{}", host.log_tail(20));
    let mut dir = host.kill();

    // One host dying at each checkpoint of a delivery.
    for checkpoint in 1..=6 {
        let env = vec![("DOCKET_FAILPOINT", format!("checkpoint-{checkpoint}"))];
        let mut host = HostProcess::start(options(Some(dir), env, false)).await;
        let key = format!("crash-{checkpoint}");
        let id = submit(&host, IDEMPOTENT, &key).await;
        let exit = host.wait_exit(Duration::from_secs(60)).await;
        assert!(
            exit.is_some_and(|s| !s.success()),
            "{key}: {}",
            host.log_tail(20)
        );
        ids.insert(key, id.into());
        dir = host.kill();
    }

    // Admitted and not run; admitted and withdrawn before anything ran.
    let host = HostProcess::start(options(Some(dir), vec![], true)).await;
    let id = submit(&host, IDEMPOTENT, "running").await;
    ids.insert("running".into(), id.into());
    let id = submit(&host, IDEMPOTENT, "cancelled").await;
    let (status, answer) = host
        .post_with_key(
            &format!("/v1/workflows/{id}/cancel"),
            "cancel",
            json!({"reason": "not needed"}),
        )
        .await;
    assert!(status == 200 || status == 202, "{status} {answer}");
    let wf = host.wait_for(&id, &["cancelled"], SETTLE).await;
    assert_eq!(wf["state"], "cancelled", "{wf:#}");
    ids.insert("cancelled".into(), id.into());
    let dir = host.kill();
    (
        dir,
        Made {
            ids,
            made_at_ms: now_ms(),
        },
    )
}

/// The generator runs in the suite: it makes a fixture of the current schema on both
/// backends, which this release then opens and runs on. With
/// `DOCKET_MAKE_UPGRADE_FIXTURE=1` (`bash scripts/make-upgrade-fixture.sh`) it writes it to
/// `host/tests/fixtures/upgrade/<current schema>/` to be committed.
#[tokio::test(flavor = "multi_thread")]
async fn the_generator_makes_a_fixture_this_release_opens() {
    let schema = current_schema();
    let kept = std::env::var("DOCKET_MAKE_UPGRADE_FIXTURE").is_ok_and(|v| v == "1");
    let scratch = tempfile::tempdir().unwrap();
    let out = if kept {
        fixtures_dir().join(format!("{schema:04}"))
    } else {
        scratch.path().join(format!("{schema:04}"))
    };
    make(&out, schema).await;
    upgrade(&out, Backend::Sqlite).await;
    upgrade(&out, Backend::Postgres).await;
}

/// Writes a fixture of `schema` to `out`: both databases, their worlds, `fixture.json`.
async fn make(out: &Path, schema: u32) {
    std::fs::create_dir_all(out).unwrap();
    let mut manifest = json!({
        "schema": schema,
        "workflows": HELD.iter().map(|h| json!({
            "key": h.key, "workflow": h.workflow, "held": h.held,
            "expect": {"state": h.state, "deliver": h.deliver, "deliveries": h.deliveries},
        })).collect::<Vec<_>>(),
    });
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let sim = ProviderSim::start(
            SimConfig::new(PROVIDER_TOKEN),
            "127.0.0.1:0".parse().unwrap(),
        )
        .await
        .unwrap();
        let database = match backend {
            Backend::Sqlite => None,
            Backend::Postgres => Some(TestDatabase::create().await),
        };
        let (dir, made) = generate(&sim, database.as_ref().map(|d| d.url.clone())).await;
        match (&database, backend) {
            (None, _) => {
                use sqlx::{Connection, Executor};
                let target = out.join("sqlite.db");
                let _ = std::fs::remove_file(&target);
                let url = format!("sqlite://{}", dir.path().join("docket.db").display());
                let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
                // One file, without the write-ahead log beside it.
                let vacuum = format!("VACUUM INTO '{}'", target.display());
                conn.execute(sqlx::AssertSqlSafe(vacuum)).await.unwrap();
            }
            (Some(db), _) => {
                let dump = std::process::Command::new("pg_dump")
                    .args(["--inserts", "--no-owner", "--no-privileges", "--dbname"])
                    .arg(&db.url)
                    .output()
                    .expect("pg_dump (the PostgreSQL client) must be installed");
                assert!(
                    dump.status.success(),
                    "{}",
                    String::from_utf8_lossy(&dump.stderr)
                );
                std::fs::write(out.join("postgres.sql"), dump.stdout).unwrap();
            }
        }
        let world = serde_json::to_string_pretty(&sim.sim().snapshot()).unwrap();
        std::fs::write(out.join(format!("world-{}.json", backend.name())), world).unwrap();
        manifest[backend.name()] = json!({"made_at_ms": made.made_at_ms, "ids": made.ids});
    }
    std::fs::write(
        out.join("fixture.json"),
        serde_json::to_string_pretty(&manifest).unwrap() + "\n",
    )
    .unwrap();
}

/// Every schema this release can write has the fixture that proves an upgrade from it.
#[test]
fn every_migration_has_its_upgrade_fixture() {
    let schema = current_schema();
    let dir = fixtures_dir().join(format!("{schema:04}"));
    assert!(
        dir.join("fixture.json").is_file(),
        "migration {schema:04} has no upgrade fixture: run `bash scripts/make-upgrade-fixture.sh` \
         (it writes host/tests/fixtures/upgrade/{schema:04}/) and commit it with the migration"
    );
}

/// Restores a PostgreSQL dump into a fresh database.
async fn restore(db: &TestDatabase, dump: &str) {
    use sqlx::{Connection, Executor};
    // psql's meta-commands (`\restrict` in newer dumps) are not SQL.
    let sql: String = dump
        .lines()
        .filter(|l| !l.starts_with('\\'))
        .map(|l| format!("{l}\n"))
        .collect();
    let mut conn = sqlx::PgConnection::connect(&db.url).await.unwrap();
    // The dump is a checked-in fixture of this repository.
    conn.execute(sqlx::raw_sql(sqlx::AssertSqlSafe(sql)))
        .await
        .unwrap();
}

/// Opens one fixture's database with this release and lets it run.
async fn upgrade(fixture: &Path, backend: Backend) {
    let manifest: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture.join("fixture.json")).unwrap())
            .unwrap();
    let made = &manifest[backend.name()];
    let made_at = made["made_at_ms"].as_u64().unwrap();
    let world: WorldSnapshot = serde_json::from_str(
        &std::fs::read_to_string(fixture.join(format!("world-{}.json", backend.name()))).unwrap(),
    )
    .unwrap();
    // The provider's clock runs on from where the fixture's stopped.
    let started = Instant::now();
    let clock: docket::sim::Clock =
        Arc::new(move || UNIX_EPOCH + Duration::from_millis(made_at) + started.elapsed());
    let sim = ProviderSim::with_clock(SimConfig::new(PROVIDER_TOKEN), clock);
    sim.restore(world).unwrap();
    let before = sim.world();
    let sim = sim.spawn("127.0.0.1:0".parse().unwrap()).await.unwrap();

    let dir = tempfile::tempdir().unwrap();
    let database = match backend {
        Backend::Sqlite => {
            std::fs::copy(fixture.join("sqlite.db"), dir.path().join("docket.db")).unwrap();
            None
        }
        Backend::Postgres => {
            let db = TestDatabase::create().await;
            restore(
                &db,
                &std::fs::read_to_string(fixture.join("postgres.sql")).unwrap(),
            )
            .await;
            Some(db)
        }
    };
    let db_url = database.as_ref().map(|d| d.url.clone());
    let host = HostProcess::start(HostOptions {
        dir: Some(dir),
        db: db_url.clone(),
        provider: Some(sim.base_url()),
        // The database carries its definitions and components.
        no_workflow_files: true,
        env: vec![(
            "DOCKET_TEST_CLOCK_START_MS".into(),
            (made_at + 1_000).to_string(),
        )],
        ..HostOptions::default()
    })
    .await;
    host.advance_clock(PAST_THE_LEASES_MS).await;

    let ids = &made["ids"];
    let id_of = |key: &str| ids[key].as_str().unwrap().to_string();
    // What this fixture holds: a fixture of an older schema holds fewer kinds of workflow.
    let held: Vec<&Held> = HELD.iter().filter(|h| ids.get(h.key).is_some()).collect();
    // A person approves what waits for it, by the digest the upgraded host shows.
    for h in held.iter().filter(|h| h.approve) {
        let id = id_of(h.key);
        let (status, asked) = host
            .get(&format!("/v1/workflows/{id}/steps/approve/consequence"))
            .await;
        assert_eq!(status, 200, "{}: {asked}", h.key);
        let (status, answer) = host
            .post_with_key(
                &format!("/v1/workflows/{id}/steps/approve/approve"),
                "approve-after-upgrade",
                json!({"digest": asked["digest"]}),
            )
            .await;
        assert_eq!(status, 200, "{}: {answer}", h.key);
    }
    let deadline = Instant::now() + SETTLE;
    let mut pending: Vec<&Held> = held.clone();
    while !pending.is_empty() {
        let mut still = Vec::new();
        for h in pending {
            let (_, wf) = host.get(&format!("/v1/workflows/{}", id_of(h.key))).await;
            let deliver = wf["steps"]
                .as_array()
                .and_then(|s| s.iter().find(|s| s["id"] == "deliver"))
                .map(|s| s["state"].clone())
                .unwrap_or(Value::Null);
            if !(wf["state"] == h.state && deliver == h.deliver) {
                still.push(h);
            }
        }
        pending = still;
        if pending.is_empty() {
            break;
        }
        if Instant::now() > deadline {
            let mut report = String::new();
            for h in &pending {
                let id = id_of(h.key);
                let (_, wf) = host.get(&format!("/v1/workflows/{id}")).await;
                report.push_str(&format!(
                    "--- {} (held: {}), expected {} / deliver {}:\n{wf:#}\n{}\n",
                    h.key,
                    h.held,
                    h.state,
                    h.deliver,
                    host.timeline_text(&id).await
                ));
            }
            panic!(
                "{} ({:?}): workflows did not go on as their states say:\n{report}\n--- host log:\n{}",
                fixture.display(),
                backend,
                host.log_tail(40)
            );
        }
        // Time moves for retries and visibility windows; nothing sleeps for it.
        host.advance_clock(1_000).await;
        host.wait_scheduler_looked().await;
    }

    // The provider's record: what each workflow says, never a second delivery.
    let world = sim.sim().world();
    for h in &held {
        let key = external_idempotency_key(
            &WorkflowId(id_of(h.key)),
            "deliver",
            NAMESPACE,
            Some(docket::catalog::DEFAULT_ENVIRONMENT),
        );
        let made: Vec<_> = world.iter().filter(|d| d.client_reference == key).collect();
        assert_eq!(made.len(), h.deliveries, "{}: {made:#?}", h.key);
        if h.key == "compensating" {
            assert_eq!(made[0].status, docket::sim::DeliveryStatus::Cancelled);
        }
    }
    assert!(world.len() >= before.len());

    // And the record holds together.
    let db = db_url.unwrap_or_else(|| host.path().join("docket.db").display().to_string());
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_docket"))
        .args(["check", "--db", &db])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "docket check on the upgraded {backend:?} fixture: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    drop(host);
    drop(database);
}

fn fixtures() -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(fixtures_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("fixture.json").is_file())
        .collect();
    found.sort();
    found
}

#[tokio::test(flavor = "multi_thread")]
async fn every_sqlite_fixture_opens_and_its_workflows_go_on_as_their_states_say() {
    let found = fixtures();
    assert!(!found.is_empty(), "no upgrade fixtures");
    for fixture in found {
        upgrade(&fixture, Backend::Sqlite).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn every_postgres_fixture_opens_and_its_workflows_go_on_as_their_states_say() {
    let found = fixtures();
    assert!(!found.is_empty(), "no upgrade fixtures");
    for fixture in found {
        upgrade(&fixture, Backend::Postgres).await;
    }
}

/// `docket sim-provider --world FILE` starts from a saved world: the deliveries are there,
/// and a key it remembers is replayed, not delivered again.
#[tokio::test(flavor = "multi_thread")]
async fn the_simulator_starts_from_a_saved_world() {
    // A world with one delivery made under a key just now, saved as the fixtures save it.
    let maker = ProviderSim::start(
        SimConfig::new(SimConfig::DEFAULT_TOKEN),
        "127.0.0.1:0".parse().unwrap(),
    )
    .await
    .unwrap();
    let body = json!({"client_reference": "k-1", "recipient": "a@example.com",
                      "document_digest": "sha256:1", "document": "Hello"});
    let made = reqwest::Client::new()
        .post(format!("{}/v1/deliveries", maker.base_url()))
        .bearer_auth(SimConfig::DEFAULT_TOKEN)
        .header("Idempotency-Key", "k-1")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(made.status(), 201);
    let saved = maker.sim().snapshot();
    assert_eq!((saved.deliveries.len(), saved.keys.len()), (1, 1));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("world.json");
    std::fs::write(&path, serde_json::to_string(&saved).unwrap()).unwrap();
    let port = crate::host_process::free_port();
    let mut sim = std::process::Command::new(env!("CARGO_BIN_EXE_docket"))
        .args([
            "sim-provider",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--world",
        ])
        .arg(&path)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let url = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();
    let world: Vec<docket::sim::Delivery> = crate::wait::until(
        "the simulator to listen",
        Duration::from_secs(30),
        || async {
            let r = client
                .get(format!("{url}/v1/_world"))
                .bearer_auth(SimConfig::DEFAULT_TOKEN)
                .send()
                .await
                .map_err(|e| e.to_string())?;
            let body: Value = r.json().await.map_err(|e| e.to_string())?;
            serde_json::from_value(body["data"].clone()).map_err(|e| e.to_string())
        },
    )
    .await;
    assert_eq!(world, saved.deliveries);
    // The same request under a remembered key names the delivery it made.
    let known = &saved.keys[0];
    let answer = client
        .post(format!("{url}/v1/deliveries"))
        .bearer_auth(SimConfig::DEFAULT_TOKEN)
        .header("Idempotency-Key", &known.key)
        .json(&known.body)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200, "a replay, not a new delivery");
    let _ = sim.kill();
    let _ = sim.wait();
}

/// The clock's start is a test control: a host without `--test-controls` refuses it.
#[test]
fn a_clock_start_is_refused_without_the_test_controls() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_docket"))
        .args(["serve", "--listen", "127.0.0.1:0", "--db"])
        .arg(dir.path().join("docket.db"))
        .env("DOCKET_TEST_CLOCK_START_MS", "1700000000000")
        .env("DOCKET_CACHE_DIR", dir.path().join("cache"))
        .current_dir(dir.path())
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("DOCKET_TEST_CLOCK_START_MS needs --test-controls"),
        "{text}"
    );
}
