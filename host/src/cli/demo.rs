//! `docket demo`: a guided tour of recovery on a real host and the real provider simulator,
//! both embedded in this process.
//!
//! Nothing printed is canned: every workflow state, timeline line and attempt comes from the
//! running host's API, and every delivery count from the simulator's own record. The tour
//! makes the simulator lose one response after committing the delivery, so the host must
//! recover by asking the provider; then it does the same with an adapter that can neither
//! be asked nor safely retried, which must end in review. These two scenes run with the
//! simulator's own events turned off, so the host has only its own means; the third scene
//! turns them back on for that same adapter, and the provider's signed event settles the
//! lost answer that would otherwise wait for a person.

use crate::app::{App, Options};
use crate::config::HostConfig;
use crate::sim::ProviderSim;
use anyhow::{Context, bail};
use clap::Args;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// The shipped definition the tour submits to.
const DOCUMENT_DELIVERY: &str = include_str!("../../../workflows/document-delivery.toml");
/// The same definition delivering through the adapter that claims nothing.
const FIRE_AND_FORGET: &str = "document-delivery-fire-and-forget";
/// How long one workflow may take before the tour gives up (it normally takes a second).
const PATIENCE: Duration = Duration::from_secs(40);

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Directory for the demo's database and compiled components. The database is recreated
    /// on every run; the compiled components are kept so later runs start fast.
    #[arg(long, default_value = ".docket/demo")]
    pub dir: PathBuf,
}

/// The host's API as the tour reads it.
struct Api {
    base: String,
    client: reqwest::Client,
}

impl Api {
    async fn get(&self, path: &str) -> anyhow::Result<Value> {
        let response = self
            .client
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .with_context(|| format!("GET {path}"))?;
        let status = response.status();
        let body: Value = response.json().await.context("the answer is not JSON")?;
        if !status.is_success() {
            bail!("GET {path} answered {status}: {body}");
        }
        Ok(body)
    }

    async fn submit(&self, workflow: &str, key: &str, input: Value) -> anyhow::Result<Value> {
        let response = self
            .client
            .post(format!("{}/v1/intents", self.base))
            .header("Idempotency-Key", key)
            .json(&json!({"workflow": workflow, "input": input}))
            .send()
            .await
            .context("POST /v1/intents")?;
        let status = response.status();
        let body: Value = response.json().await.context("the answer is not JSON")?;
        if status.as_u16() != 201 {
            bail!("submitting to {workflow} answered {status}: {body}");
        }
        Ok(body)
    }

    /// Polls the projection until the workflow leaves `running`.
    async fn settle(&self, id: &str) -> anyhow::Result<Value> {
        let start = Instant::now();
        loop {
            let wf = self.get(&format!("/v1/workflows/{id}")).await?;
            if wf["state"] != "running" {
                return Ok(wf);
            }
            if start.elapsed() > PATIENCE {
                bail!("workflow {id} was still running after {PATIENCE:?}: {wf}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn attempts(&self, id: &str, step: &str) -> anyhow::Result<Vec<Value>> {
        let page = self
            .get(&format!(
                "/v1/workflows/{id}/steps/{step}/attempts?limit=500"
            ))
            .await?;
        Ok(page["data"].as_array().cloned().unwrap_or_default())
    }

    async fn print_timeline(&self, id: &str) -> anyhow::Result<()> {
        let page = self
            .get(&format!("/v1/workflows/{id}/timeline?limit=500"))
            .await?;
        println!("   Timeline (GET /v1/workflows/{id}/timeline):");
        for event in page["data"].as_array().into_iter().flatten() {
            println!(
                "     {:>3} {:<11} {:<9} {}",
                event["seq"].as_u64().unwrap_or_default(),
                text(&event["kind"]),
                event["step"].as_str().unwrap_or("-"),
                text(&event["text"])
            );
        }
        Ok(())
    }

    async fn print_attempts(&self, id: &str, step: &str) -> anyhow::Result<Vec<Value>> {
        let attempts = self.attempts(id, step).await?;
        println!("   Attempts of `{step}`:");
        for a in &attempts {
            println!(
                "     #{} trigger {:<15} outcome {:<12} request {}",
                a["number"],
                text(&a["trigger"]),
                text(&a["outcome"]),
                a["request_identity"].as_str().unwrap_or("-")
            );
        }
        Ok(attempts)
    }
}

fn text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

/// The deliveries in the simulator's record that carry this attempt's request identity. The
/// API shows the identity shortened (`dk-…`), which is what an operator compares too.
fn deliveries_for(sim: &ProviderSim, attempts: &[Value]) -> Vec<crate::sim::Delivery> {
    let Some(prefix) = attempts
        .iter()
        .find_map(|a| a["request_identity"].as_str())
        .map(|s| s.trim_end_matches('…').to_string())
    else {
        return Vec::new();
    };
    sim.world()
        .into_iter()
        .filter(|d| d.client_reference.starts_with(&prefix))
        .collect()
}

/// Writes the definitions the tour uses and removes any earlier demo database.
fn prepare(dir: &Path) -> anyhow::Result<PathBuf> {
    let workflows = dir.join("workflows");
    std::fs::create_dir_all(&workflows)
        .with_context(|| format!("creating {}", workflows.display()))?;
    for name in ["docket.db", "docket.db-wal", "docket.db-shm"] {
        let path = dir.join(name);
        if path.exists() {
            std::fs::remove_file(&path).with_context(|| {
                format!("removing the previous demo database {}", path.display())
            })?;
        }
    }
    std::fs::write(workflows.join("document-delivery.toml"), DOCUMENT_DELIVERY)?;
    let fire_and_forget = DOCUMENT_DELIVERY
        .replace(
            "name = \"document-delivery\"",
            &format!("name = \"{FIRE_AND_FORGET}\""),
        )
        .replace(
            "component = \"http-delivery\"",
            "component = \"http-delivery-fire-and-forget\"",
        );
    std::fs::write(
        workflows.join(format!("{FIRE_AND_FORGET}.toml")),
        fire_and_forget,
    )?;
    Ok(workflows)
}

/// Runs the tour; fails if the host does not behave as the tour says it will.
pub async fn demo(args: DemoArgs) -> anyhow::Result<ExitCode> {
    let workflows = prepare(&args.dir)?;
    let mut config = HostConfig::load(None)?;
    config.workflows = workflows;
    let db = args.dir.join("docket.db");
    let options = Options {
        listen: Some("127.0.0.1:0".parse()?),
        db: Some(db.display().to_string()),
        ..Options::default()
    };
    let host = App::build(&options, config).await?;
    let result = tour(&host).await;
    // The tour is over: stop the host as a signal would.
    host.stopper().cancel();
    host.run(std::future::pending()).await?;
    result
}

async fn tour(host: &App) -> anyhow::Result<ExitCode> {
    let running = host
        .simulator()
        .context("the demo needs the built-in provider simulator")?;
    let sim = running.sim();
    let api = Api {
        base: format!("http://{}", host.addr),
        client: reqwest::Client::new(),
    };
    println!(
        "docket demo: a host at {} (SQLite), its delivery adapters pointed at the provider simulator at {}.",
        api.base,
        running.base_url()
    );
    let input = json!({
        "title": "Quarterly report",
        "recipient": "reader@example.com",
        "body": "Numbers are up."
    });

    // The first two scenes are about what the host does alone: the provider posts no events.
    let events = sim.faults();
    sim.set_faults(json!({"webhook_url": null, "webhook_secret": null}))?;

    // Part 1: the idempotent, queryable adapter; the provider commits and loses the answer.
    println!();
    println!("1. A lost response, with an adapter that can ask the provider (http-delivery)");
    let faults = sim.set_faults(json!({"lose_next": 1}))?;
    println!(
        "   The simulator will commit the next delivery and close the connection without answering (lose_next = {}).",
        faults.lose_next
    );
    completed_scene(
        &api,
        sim,
        "document-delivery",
        "demo-lost-response",
        input.clone(),
        "query",
    )
    .await?;

    // Part 2: an adapter that claims neither lookups nor idempotency.
    println!();
    println!(
        "2. The same lost response, with an adapter that can neither ask nor safely retry (http-delivery-fire-and-forget)"
    );
    sim.set_faults(json!({"lose_next": 1}))?;
    let created = api
        .submit(FIRE_AND_FORGET, "demo-fire-and-forget", input.clone())
        .await?;
    let id = text(&created["workflow_id"]);
    println!("   Submitted intent demo-fire-and-forget: workflow {id}");
    let wf = api.settle(&id).await?;
    let deliver = step(&wf, "deliver")?;
    println!(
        "   Workflow state: {} — {}; step `deliver`: {}; next action: {}",
        text(&wf["state"]),
        text(&wf["status_text"]),
        text(&deliver["state"]),
        text(&wf["next_action"])
    );
    api.print_timeline(&id).await?;
    // Move the host's clock a day ahead: nothing automatic may touch the step.
    let before = api.attempts(&id, "deliver").await?.len();
    host.clock.advance(24 * 3600 * 1000);
    tokio::time::sleep(Duration::from_millis(800)).await;
    let attempts = api.print_attempts(&id, "deliver").await?;
    let wf_after = api.get(&format!("/v1/workflows/{id}")).await?;
    println!(
        "   After moving the host's clock 24 h ahead: {} {} (was {before}), workflow {}: no automatic retry.",
        attempts.len(),
        if attempts.len() == 1 {
            "attempt"
        } else {
            "attempts"
        },
        text(&wf_after["state"])
    );
    let found = deliveries_for(sim, &attempts);
    println!(
        "   The provider's own record holds {} {} for this intent: a person decides (resolve, retry or escalate).",
        found.len(),
        plural(found.len())
    );
    if wf_after["state"] != "needs_review" || attempts.len() != before {
        bail!("expected the fire-and-forget step to wait for review; the host says: {wf_after}");
    }

    // Part 3: the adapter that cannot ask, but the provider posts its own signed event.
    println!();
    println!(
        "3. The same lost response with the same adapter, but the provider posts its own signed event (delivery.accepted)"
    );
    let Some(secret) = events.webhook_secret else {
        bail!("the simulator was not signing events for the host");
    };
    // The events go to the endpoint of the adapter that delivered them.
    let url = format!("{}/v1/evidence/http-delivery-fire-and-forget", api.base);
    sim.set_faults(json!({"lose_next": 1, "webhook_url": url, "webhook_secret": secret}))?;
    println!("   The simulator signs each event and posts it to {url}.");
    let id = completed_scene(
        &api,
        sim,
        FIRE_AND_FORGET,
        "demo-providers-event",
        input,
        "observation",
    )
    .await?;
    println!("   The provider's event itself: GET /v1/evidence?workflow_id={id}");
    println!();
    println!(
        "In total the provider recorded {} deliveries for 3 intents.",
        sim.world().len()
    );
    Ok(ExitCode::SUCCESS)
}

/// Submits `input` to `workflow` under `key`, prints how it settled (state, receipt,
/// timeline, attempts, the provider's record) and checks that it completed with a receipt
/// of `evidence` kind. Returns the workflow's id.
async fn completed_scene(
    api: &Api,
    sim: &ProviderSim,
    workflow: &str,
    key: &str,
    input: Value,
    evidence: &str,
) -> anyhow::Result<String> {
    let created = api.submit(workflow, key, input).await?;
    let id = text(&created["workflow_id"]);
    println!("   Submitted intent {key}: workflow {id}");
    let wf = api.settle(&id).await?;
    let deliver = step(&wf, "deliver")?;
    println!(
        "   Workflow state: {} — {}",
        text(&wf["state"]),
        text(&wf["status_text"])
    );
    println!(
        "   Receipt of `deliver`: evidence {} for {}",
        text(&deliver["receipt"]["evidence_kind"]),
        text(&deliver["receipt"]["external_reference"])
    );
    api.print_timeline(&id).await?;
    let attempts = api.print_attempts(&id, "deliver").await?;
    let found = deliveries_for(sim, &attempts);
    println!(
        "   The provider's own record holds {} {} for this intent ({}).",
        found.len(),
        plural(found.len()),
        found
            .iter()
            .map(|d| d.id.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    if wf["state"] != "completed" || deliver["receipt"]["evidence_kind"] != evidence {
        bail!("expected a receipt by {evidence} to complete the workflow; the host says: {wf}");
    }
    Ok(id)
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "delivery" } else { "deliveries" }
}

fn step<'a>(wf: &'a Value, id: &str) -> anyhow::Result<&'a Value> {
    wf["steps"]
        .as_array()
        .and_then(|steps| steps.iter().find(|s| s["id"] == id))
        .with_context(|| format!("the workflow has no step `{id}`: {wf}"))
}
