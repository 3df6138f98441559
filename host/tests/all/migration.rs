//! Running workflows moved to a new definition version by an explicit plan, against real
//! `docket serve` processes, a provider simulator of the test's own (its record outlives
//! the hosts) and a real database, on both stores.
//!
//! Workflows are left in every state a person migrates — never begun, an outcome unknown
//! that waits for a person, blocked by policy or by budget, running (its host killed
//! mid-call) — and a
//! paused host moves them from v1 to a v2 that relabels a step, renames `deliver` to `send`,
//! adds `archive` and drops the pending `notify`. The allowed ones finish on v2 with their
//! receipts and the keys their requests were sent under (the provider's record shows one
//! delivery each); the refused ones (a running step; a changed input under a kept identity)
//! say why and are unchanged; a dry run changes nothing; `docket check` passes after.

use crate::host_process::{HostOptions, HostProcess, PROVIDER_TOKEN, document, repo_root};
use docket::intent::{WorkflowId, external_idempotency_key};
use docket::sim::{ProviderSim, SimConfig};
use serde_json::{Value, json};
use std::path::Path;
use std::time::Duration;

const SETTLED: &[&str] = &["completed", "needs_review", "failed", "cancelled"];

/// The shipped delivery, named `moving`, whose delivery is tried once (an outcome its
/// lookups cannot prove waits for a person), with a `notify` step after it.
fn v1() -> String {
    let shipped =
        std::fs::read_to_string(repo_root().join("workflows/document-delivery.toml")).unwrap();
    let text = shipped
        .replace("name = \"document-delivery\"", "name = \"moving\"")
        .replace(
            "[steps.retry]\nmax_attempts = 5\ninitial_backoff",
            "[steps.retry]\nmax_attempts = 1\ninitial_backoff",
        );
    assert!(
        text.contains("max_attempts = 1")
            && text.trim_end().ends_with("secrets = [\"provider_token\"]"),
        "the shipped definition changed shape"
    );
    // A withdrawal reverses the delivery.
    format!(
        "{text}\n[steps.compensation]\non = \"workflow_cancelled\"\n{}",
        rendered_after("notify", "Notify", "deliver")
    )
}

/// A handler step `id` after `after` that renders the validated document again.
fn rendered_after(id: &str, label: &str, after: &str) -> String {
    format!(
        r#"
[[steps]]
id = "{id}"
label = "{label}"
kind = "handler"
component = "render-document"
version = "^1"
after = ["{after}"]
timeout = "5s"
outputs = ["recipient", "document", "document_digest"]

[steps.input]
title = "$steps.validate.output.title"
recipient = "$steps.validate.output.recipient"
body = "$steps.validate.output.body"
"#
    )
}

/// v2: `render` relabelled, `deliver` renamed `send` (the same request), `archive` added
/// after it, `notify` dropped.
fn v2() -> String {
    let v1 = v1();
    let without_notify = &v1[..v1.find("\n[[steps]]\nid = \"notify\"").unwrap()];
    let text = without_notify
        .replace("version = 1\n", "version = 2\n")
        .replace(
            "label = \"Prepare document\"",
            "label = \"Prepare the document\"",
        )
        .replace("id = \"deliver\"", "id = \"send\"");
    assert!(text.contains("id = \"send\"") && text.contains("Prepare the document"));
    format!("{text}\n{}", rendered_after("archive", "Archive", "send"))
}

/// v3: the delivery keeps its id but would send another document under the same key.
fn v3() -> String {
    let text = v1().replace("version = 1\n", "version = 3\n").replace(
        "document = \"$steps.render.output.document\"",
        "document = \"$steps.render.output.document_digest\"",
    );
    assert!(text.contains("output.document_digest\"\ndocument_digest"));
    text
}

const PLAN: &str = r#"
reason = "deliver is now send; archive added; notify dropped"
drop = ["notify"]
[steps]
deliver = "send"
"#;

const DENY_DELIVERIES: &str = r#"
[[rules]]
steps = ["deliver"]
actions = ["invoke"]
effect = "deny"
reason = "deliveries are held for the audit"

[[rules]]
effect = "allow"
"#;

fn step<'a>(wf: &'a Value, id: &str) -> &'a Value {
    wf["steps"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["id"] == id))
        .unwrap_or_else(|| panic!("no step {id}: {wf:#}"))
}

fn step_ids(wf: &Value) -> Vec<&str> {
    wf["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect()
}

async fn submit(host: &HostProcess, key: &str) -> String {
    let (status, created) = host.submit("moving", key, document(key)).await;
    assert_eq!(status, 201, "{created}");
    created["workflow_id"].as_str().unwrap().to_string()
}

async fn projection(host: &HostProcess, id: &str) -> Value {
    let (status, wf) = host.get(&format!("/v1/workflows/{id}")).await;
    assert_eq!(status, 200, "{wf}");
    wf
}

async fn deploy_policy(host: &HostProcess, key: &str, document: &str) {
    let (status, body) = host
        .post_with_key("/v1/policies", key, json!({"document": document}))
        .await;
    assert_eq!(status, 201, "{body}");
    let version = body["version"].clone();
    crate::wait::until(
        &format!("the host to enforce policy {version}"),
        Duration::from_secs(5),
        || async {
            let (_, p) = host.get("/v1/policies").await;
            if p["in_force_here"] == version {
                Ok(())
            } else {
                Err(format!("{p}"))
            }
        },
    )
    .await;
}

/// `docket` with `args`: exit code and output.
fn docket(args: &[&str]) -> (i32, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_docket"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

/// The request identities the attempts of `step` were sent under (checkpoint 3 or later).
async fn identities(host: &HostProcess, id: &str, step: &str) -> Vec<String> {
    host.attempts(id, step)
        .await
        .iter()
        .filter_map(|a| a["request_identity"].as_str().map(str::to_string))
        .collect()
}

/// The key a workflow's delivery is sent under: derived from the step's first id.
fn key_of(id: &str) -> String {
    external_idempotency_key(
        &WorkflowId(id.to_string()),
        "deliver",
        "reference-provider",
        Some(docket::catalog::DEFAULT_ENVIRONMENT),
    )
}

async fn workflows_in_every_state_move_as_the_plan_allows(db: Option<String>) {
    let sim = ProviderSim::start(
        SimConfig::new(PROVIDER_TOKEN),
        "127.0.0.1:0".parse().unwrap(),
    )
    .await
    .unwrap();
    let options = |dir, pause_execution| HostOptions {
        db: db.clone(),
        workflows: vec![("moving.toml".into(), v1())],
        provider: Some(sim.base_url()),
        dir,
        pause_execution,
        ..HostOptions::default()
    };
    let host = HostProcess::start(options(None, false)).await;

    // An outcome the lookups cannot prove (the delivery stays invisible to them), with no
    // attempt left for a same-key retry: it waits for a person.
    sim.sim()
        .set_faults(json!({"lose_next": 1, "visibility_delay_ms": 3_600_000}))
        .unwrap();
    let unknown = submit(&host, "unknown").await;
    let wf = host
        .wait_for(&unknown, SETTLED, Duration::from_secs(30))
        .await;
    assert_eq!(step(&wf, "deliver")["state"], "outcome_unknown", "{wf:#}");
    assert_eq!(step(&wf, "notify")["state"], "pending", "{wf:#}");
    let sent_under = identities(&host, &unknown, "deliver").await;
    assert!(
        !sent_under.is_empty(),
        "the lost request's identity was recorded"
    );

    // Running: its request reached the provider, whose answer is slow; the host is killed.
    sim.sim()
        .set_faults(json!({"slow_next": 1, "slow_ms": 120_000, "visibility_delay_ms": 0}))
        .unwrap();
    let running = submit(&host, "running").await;
    crate::wait::until(
        "the running delivery to reach the provider",
        Duration::from_secs(30),
        || async {
            let world = sim.sim().world();
            if world.iter().any(|d| d.client_reference == key_of(&running)) {
                Ok(())
            } else {
                Err(format!("{world:?}"))
            }
        },
    )
    .await;
    let dir = host.kill();

    // Blocked by the policy in force when it was about to be sent (a second host: the
    // first one's killed attempt keeps its lease meanwhile). The policy stays.
    let host = HostProcess::start(options(Some(dir), false)).await;
    deploy_policy(&host, "deny", DENY_DELIVERIES).await;
    let blocked = submit(&host, "blocked").await;
    let wf = host
        .wait_for(&blocked, SETTLED, Duration::from_secs(30))
        .await;
    assert_eq!(step(&wf, "deliver")["state"], "blocked", "{wf:#}");

    let dir = host.kill();

    // A paused host: nothing runs, so every workflow stays as it was left. One more is
    // admitted and never begins.
    let host = HostProcess::start(options(Some(dir), true)).await;
    let pending = submit(&host, "pending").await;
    let wf = projection(&host, &running).await;
    assert_eq!(step(&wf, "deliver")["state"], "running", "{wf:#}");

    // v2 and v3 are deployed next to v1.
    let files = tempfile::tempdir().unwrap();
    let config = host.path().join("docket.toml").display().to_string();
    let database = db
        .clone()
        .unwrap_or_else(|| host.path().join("docket.db").display().to_string());
    let v2_file = write(files.path(), "moving-v2.toml", &v2());
    let v3_file = write(files.path(), "moving-v3.toml", &v3());
    let (code, out) = docket(&[
        "workflow", "deploy", &v2_file, &v3_file, "--db", &database, "--config", &config,
    ]);
    assert_eq!(code, 0, "{out}");

    let everyone = [&unknown, &blocked, &running, &pending];
    let mut before = Vec::new();
    for id in everyone {
        before.push(projection(&host, id).await);
    }

    // A changed input under a kept identity is refused, and changes nothing.
    let (status, refused) = host
        .post_with_key(
            &format!("/v1/workflows/{unknown}/migration"),
            "to-v3",
            json!({"to_version": 3, "reason": "another document"}),
        )
        .await;
    assert_eq!(status, 409, "{refused}");
    assert_eq!(refused["error"]["code"], "migration_refused", "{refused}");
    let reason = refused["error"]["details"][0]["reason"].as_str().unwrap();
    assert!(
        reason.contains("a changed input under a kept identity"),
        "{refused}"
    );
    assert_eq!(refused["error"]["details"][0]["step"], "deliver");
    // The same key and body answer the same; another body under the key is a conflict.
    let (status, again) = host
        .post_with_key(
            &format!("/v1/workflows/{unknown}/migration"),
            "to-v3",
            json!({"to_version": 3, "reason": "another document"}),
        )
        .await;
    assert_eq!((status, &again), (409, &refused));
    let (status, conflict) = host
        .post_with_key(
            &format!("/v1/workflows/{unknown}/migration"),
            "to-v3",
            json!({"to_version": 2, "reason": "another document"}),
        )
        .await;
    assert_eq!(status, 409, "{conflict}");
    assert_eq!(conflict["error"]["code"], "key_conflict", "{conflict}");

    // A dry run of the whole version answers for each workflow and changes nothing.
    let plan = write(files.path(), "plan.toml", PLAN);
    let server = host.url.clone();
    let migrate = |dry_run: bool| {
        let mut args = vec![
            "migrate",
            "--workflow",
            "moving",
            "--from",
            "1",
            "--to",
            "2",
            "--plan",
            &plan,
            "--server",
            &server,
        ];
        if dry_run {
            args.push("--dry-run");
        }
        docket(&args)
    };
    let (code, table) = migrate(true);
    assert_eq!(code, 1, "one workflow would be refused:\n{table}");
    let line = |id: &str| {
        table
            .lines()
            .find(|l| l.starts_with(id))
            .unwrap_or_else(|| panic!("no line for {id}:\n{table}"))
            .to_string()
    };
    for id in [&unknown, &blocked, &pending] {
        assert!(line(id).contains("would move"), "{table}");
        assert!(
            line(id).contains("deliver → send; added archive; dropped notify"),
            "{table}"
        );
    }
    assert!(
        line(&running).contains("would be refused")
            && line(&running).contains("`deliver` is running"),
        "{table}"
    );
    assert!(table.contains("(dry run: nothing changed)"), "{table}");
    for (id, was) in everyone.iter().zip(&before) {
        assert_eq!(&projection(&host, id).await, was, "a dry run changed {id}");
    }

    // The migration itself.
    let (code, table) = migrate(false);
    assert_eq!(code, 1, "the running workflow is refused:\n{table}");
    for id in [&unknown, &blocked, &pending] {
        let row = table.lines().find(|l| l.starts_with(id.as_str()));
        assert!(row.is_some_and(|r| r.contains("moved")), "{table}");
    }
    let row = table
        .lines()
        .find(|l| l.starts_with(running.as_str()))
        .unwrap();
    assert!(
        row.contains("refused") && row.contains("`deliver` is running"),
        "{table}"
    );
    // The refused workflow is as it was.
    assert_eq!(projection(&host, &running).await, before[2]);
    // Once moved, a workflow is no longer at v1: the same command lists only the refused one.
    let (code, again) = migrate(false);
    assert_eq!(code, 1, "{again}");
    assert!(
        !again.contains(unknown.as_str()) && again.contains(running.as_str()),
        "{again}"
    );

    let wf = projection(&host, &unknown).await;
    assert_eq!(wf["definition_version"], 2, "{wf:#}");
    assert_eq!(wf["migrated_from_version"], 1, "{wf:#}");
    assert_eq!(
        step_ids(&wf),
        ["validate", "render", "send", "archive"],
        "{wf:#}"
    );
    assert_eq!(
        step(&wf, "render")["label"],
        "Prepare the document",
        "{wf:#}"
    );
    assert_eq!(step(&wf, "send")["state"], "outcome_unknown", "{wf:#}");
    assert_eq!(step(&wf, "archive")["state"], "pending", "{wf:#}");
    // Its history followed the renamed step, under the identity it was sent with.
    assert_eq!(identities(&host, &unknown, "send").await, sent_under);
    let (_, migrations) = host
        .get(&format!("/v1/workflows/{unknown}/migrations"))
        .await;
    let m = &migrations["data"][0];
    assert_eq!(
        (m["from_version"].clone(), m["to_version"].clone()),
        (json!(1), json!(2))
    );
    assert_eq!(
        m["moved"][2],
        json!({"from": "deliver", "to": "send", "state": "outcome_unknown", "key_step": "deliver"}),
        "{m:#}"
    );
    assert_eq!(m["added"], json!(["archive"]));
    assert_eq!(m["dropped"], json!(["notify"]));
    let timeline = host.timeline_text(&unknown).await;
    assert!(
        timeline.contains("Migrated from definition v1 to v2")
            && timeline.contains("deliver → send; added archive; dropped notify"),
        "{timeline}"
    );
    let wf = projection(&host, &pending).await;
    assert_eq!(
        step_ids(&wf),
        ["validate", "render", "send", "archive"],
        "{wf:#}"
    );

    // Everything runs again.
    let dir = host.kill();
    let host = HostProcess::start(options(Some(dir), false)).await;
    // The killed host's lease ends; its request is found by lookup and the workflow ends
    // on v1, as it began.
    host.advance_clock(10 * 60 * 1000).await;
    let wf = host
        .wait_for(&running, &["completed"], Duration::from_secs(60))
        .await;
    assert_eq!(wf["definition_version"], 1, "{wf:#}");
    assert_eq!(step(&wf, "notify")["state"], "succeeded", "{wf:#}");
    // The never-begun workflow runs v2 from the start.
    let wf = host
        .wait_for(&pending, &["completed"], Duration::from_secs(60))
        .await;
    assert_eq!(step(&wf, "archive")["state"], "succeeded", "{wf:#}");
    // The lost answer: a person retries the renamed step, which sends the same key again;
    // the provider answers with the delivery it made for it (a new key would make another).
    let (status, body) = host
        .post_with_key(
            &format!("/v1/workflows/{unknown}/steps/send/retry"),
            "again",
            json!({"reason": "the provider deduplicates by key"}),
        )
        .await;
    assert!(status == 200 || status == 202, "{status}: {body}");
    let wf = host
        .wait_for(&unknown, &["completed"], Duration::from_secs(60))
        .await;
    assert_eq!(step(&wf, "archive")["state"], "succeeded", "{wf:#}");
    let sent_again = identities(&host, &unknown, "send").await;
    assert!(sent_again.len() > sent_under.len(), "{sent_again:?}");
    assert!(
        sent_again.iter().all(|k| k == &sent_under[0]),
        "{sent_again:?}"
    );
    // The blocked delivery is retried: the policy that blocked it, still in force, names
    // `deliver`, which the step no longer is.
    let (status, body) = host
        .post_with_key(
            &format!("/v1/workflows/{blocked}/steps/send/retry"),
            "again",
            json!({"reason": "the audit is over"}),
        )
        .await;
    assert!(status == 200 || status == 202, "{status}: {body}");
    host.wait_for(&blocked, &["completed"], Duration::from_secs(60))
        .await;

    // One delivery per workflow at the provider: nothing was sent twice.
    let world = sim.sim().world();
    assert_eq!(world.len(), 4, "{world:#?}");
    for id in everyone {
        // Every delivery, renamed or not, went out under the key of the step's first id.
        let key = key_of(id);
        let made = world.iter().filter(|d| d.client_reference == key).count();
        assert_eq!(made, 1, "{id}: {world:#?}");
    }

    // A withdrawal of a workflow moved before it ran: the compensation's answer is lost,
    // and its lookup asks by the key the delivery was sent under, the step's first id's.
    sim.sim()
        .set_faults(json!({"lose_next_cancel": 1}))
        .unwrap();
    let (status, answer) = host
        .post_with_key(
            &format!("/v1/workflows/{pending}/cancel"),
            "withdraw",
            json!({"reason": "withdrawn", "withdraw": true}),
        )
        .await;
    assert_eq!(status, 202, "{answer}");
    let wf = host
        .wait_for(&pending, SETTLED, Duration::from_secs(60))
        .await;
    assert_eq!(wf["state"], "cancelled", "{wf:#}");
    let compensation = &step(&wf, "send")["compensation"];
    assert_eq!(compensation["receipt"]["evidence_kind"], "query", "{wf:#}");
    let reversed: Vec<_> = sim
        .sim()
        .world()
        .into_iter()
        .filter(|d| d.client_reference == key_of(&pending))
        .collect();
    assert_eq!(reversed.len(), 1, "{reversed:#?}");
    assert_eq!(reversed[0].status, docket::sim::DeliveryStatus::Cancelled);

    let (code, out) = crate::operations::docket_check(&database, false);
    assert_eq!(code, 0, "docket check after the migrations:\n{out}");
}

/// `text` (v1 or v2) with room for one external call only, and the delivery's own retries.
fn one_call_only(text: &str) -> String {
    let out = text
        .replace("max_external_calls = 10", "max_external_calls = 1")
        .replace(
            "[steps.retry]\nmax_attempts = 1\ninitial_backoff",
            "[steps.retry]\nmax_attempts = 5\ninitial_backoff",
        );
    assert!(out.contains("max_external_calls = 1\n") && out.contains("max_attempts = 5"));
    out
}

/// A workflow blocked by its budget (its delivery's request was refused `503` and the
/// retry would be a second external call) moves to v2: the renamed step stays blocked with
/// its limit, an extension of the budget lets it go on, and the retry is sent under the key
/// of the step's first id — one delivery at the provider.
async fn a_workflow_blocked_by_its_budget_moves_and_goes_on_under_its_key(db: Option<String>) {
    let sim = ProviderSim::start(
        SimConfig::new(PROVIDER_TOKEN),
        "127.0.0.1:0".parse().unwrap(),
    )
    .await
    .unwrap();
    let host = HostProcess::start(HostOptions {
        db: db.clone(),
        workflows: vec![("moving.toml".into(), one_call_only(&v1()))],
        provider: Some(sim.base_url()),
        ..HostOptions::default()
    })
    .await;
    sim.sim()
        .set_faults(json!({"unavailable_next": 1}))
        .unwrap();
    let id = submit(&host, "budget").await;
    let wf = host.wait_for(&id, SETTLED, Duration::from_secs(30)).await;
    let deliver = step(&wf, "deliver");
    assert_eq!(deliver["state"], "blocked", "{wf:#}");
    assert_eq!(deliver["blocked"]["reason"], "budget_exhausted", "{wf:#}");
    assert_eq!(deliver["blocked"]["limit"], "external_calls", "{wf:#}");

    let files = tempfile::tempdir().unwrap();
    let database = db
        .clone()
        .unwrap_or_else(|| host.path().join("docket.db").display().to_string());
    let config = host.path().join("docket.toml").display().to_string();
    let v2_file = write(files.path(), "moving-v2.toml", &one_call_only(&v2()));
    let (code, out) = docket(&[
        "workflow", "deploy", &v2_file, "--db", &database, "--config", &config,
    ]);
    assert_eq!(code, 0, "{out}");
    let (status, moved) = host
        .post_with_key(
            &format!("/v1/workflows/{id}/migration"),
            "budget-to-v2",
            json!({"to_version": 2, "steps": {"deliver": "send", "notify": null},
                   "reason": "deliver is now send"}),
        )
        .await;
    assert_eq!(status, 201, "{moved}");
    let wf = projection(&host, &id).await;
    let send = step(&wf, "send");
    assert_eq!(send["state"], "blocked", "{wf:#}");
    assert_eq!(send["blocked"]["limit"], "external_calls", "{wf:#}");

    let (status, extended) = host
        .post_with_key(
            &format!("/v1/workflows/{id}/budget"),
            "one-more-call",
            json!({"add": {"external_calls": 2}, "reason": "the provider is back"}),
        )
        .await;
    assert_eq!(status, 200, "{extended}");
    let wf = host
        .wait_for(&id, &["completed"], Duration::from_secs(60))
        .await;
    assert_eq!(wf["definition_version"], 2, "{wf:#}");
    assert_eq!(step(&wf, "archive")["state"], "succeeded", "{wf:#}");
    let world = sim.sim().world();
    assert_eq!(world.len(), 1, "{world:#?}");
    assert_eq!(world[0].client_reference, key_of(&id), "{world:#?}");
    let (code, out) = crate::operations::docket_check(&database, false);
    assert_eq!(code, 0, "{out}");
}

on_both_stores!(
    workflows_in_every_state_move_as_the_plan_allows,
    a_workflow_blocked_by_its_budget_moves_and_goes_on_under_its_key,
);

/// The README's example, as written: version 2 of the shipped delivery deployed beside a
/// running host, its plan moving a workflow that has not run yet, which then finishes on it.
#[tokio::test(flavor = "multi_thread")]
async fn the_readme_example_moves_a_delivery_to_version_2() {
    let host = HostProcess::start(HostOptions {
        pause_execution: true,
        ..HostOptions::default()
    })
    .await;
    let (status, created) = host
        .submit("document-delivery", "readme", document("Moved"))
        .await;
    assert_eq!(status, 201, "{created}");
    let id = created["workflow_id"].as_str().unwrap().to_string();
    let examples = repo_root().join("docs/examples/migration");
    let v2 = examples
        .join("document-delivery-v2.toml")
        .display()
        .to_string();
    let plan = examples.join("plan.toml").display().to_string();
    let database = host.path().join("docket.db").display().to_string();
    let config = host.path().join("docket.toml").display().to_string();
    let (code, out) = docket(&[
        "workflow", "deploy", &v2, "--db", &database, "--config", &config,
    ]);
    assert_eq!(code, 0, "{out}");
    let migrate = |extra: &[&str]| {
        let mut args = vec![
            "migrate",
            "--workflow",
            "document-delivery",
            "--from",
            "1",
            "--to",
            "2",
            "--plan",
            &plan,
            "--server",
            &host.url,
        ];
        args.extend(extra);
        docket(&args)
    };
    let (code, table) = migrate(&["--dry-run"]);
    assert_eq!(code, 0, "{table}");
    assert!(
        table.contains(&format!("{id}  running"))
            && table.contains("would move")
            && table.contains("deliver → send; added archive"),
        "{table}"
    );
    let (code, table) = migrate(&[]);
    assert_eq!(code, 0, "{table}");
    assert!(
        table.contains("moved") && table.contains("1 moved to v2"),
        "{table}"
    );
    let wf = projection(&host, &id).await;
    assert_eq!(wf["definition_version"], 2, "{wf:#}");
    assert_eq!(step_ids(&wf), ["validate", "render", "send", "archive"]);
    // The console says so too, and its timeline tells the plan.
    let (client, cookie) = crate::course::console_session(&host).await;
    let html =
        crate::course::console_page(&host, &client, &cookie, &format!("/console/workflows/{id}"))
            .await;
    assert!(
        html.contains("document-delivery v2") && html.contains("migrated from v1"),
        "{html}"
    );
    assert!(html.contains("Migrated from definition v1 to v2"), "{html}");

    let dir = host.kill();
    let host = HostProcess::start(HostOptions {
        dir: Some(dir),
        ..HostOptions::default()
    })
    .await;
    let wf = host
        .wait_for(&id, &["completed"], Duration::from_secs(60))
        .await;
    assert_eq!(step(&wf, "archive")["state"], "succeeded", "{wf:#}");
    assert_eq!(host.world().await.len(), 1);
}
