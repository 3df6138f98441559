//! `docket adapter verify FILE.wasm`: checks, claim by claim, that what an adapter declares
//! (idempotency, query, compensation) holds when driven against the provider simulator.
//!
//! The adapter runs in the real runtime under a grant to the simulator only: every
//! `$setting` destination it declares points at the simulator, every secret it declares gets
//! the simulator's token. Each scenario then compares what the adapter answered with the
//! simulator's own record — the ground truth — so an adapter that claims idempotency but
//! never sends its key is caught by the duplicate it leaves behind. A claim the adapter does
//! not make is reported as such and not held against it.

use super::adapter::cache_dir;
use crate::capabilities::{Grant, HostRule, SecretSource};
use crate::clock::SystemClock;
use crate::contract::{
    CompensationRequest, Contract, EffectError, EffectRequest, EffectStatus, Lookup, PluginReceipt,
};
use crate::runtime::{CallEnv, CallLimits, ComponentKind, Prepared, Runtime, RuntimeConfig};
use crate::sim::{Delivery, DeliveryStatus, ProviderSim, RunningSim, SimConfig};
use anyhow::{Context, bail};
use indicatif::{ProgressBar, ProgressStyle};
use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One claim an adapter can make.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Claim {
    Idempotency,
    Query,
    Compensation,
}

impl Claim {
    fn name(self) -> &'static str {
        match self {
            Claim::Idempotency => "idempotency",
            Claim::Query => "query",
            Claim::Compensation => "compensation",
        }
    }

    fn declared(self, c: &Contract) -> bool {
        match self {
            Claim::Idempotency => c.idempotency.supported,
            Claim::Query => c.query.supported,
            Claim::Compensation => c.compensation.supported,
        }
    }
}

/// What one scenario showed about one claim.
struct Finding {
    claim: Claim,
    scenario: &'static str,
    held: bool,
    detail: String,
}

/// The adapter under test, wired to the simulator.
struct Subject {
    runtime: Runtime,
    prepared: Arc<Prepared>,
    settings: Arc<BTreeMap<String, String>>,
    secrets: Arc<SecretSource>,
    sim: RunningSim,
    timeout: Duration,
    input: String,
    other_input: String,
    name: String,
}

impl Subject {
    fn env(&self) -> CallEnv {
        CallEnv {
            settings: self.settings.clone(),
            secrets: self.secrets.clone(),
            clock: SystemClock::new(),
            label: format!("verify/{}", self.name).into(),
        }
    }

    fn limits(&self) -> CallLimits {
        CallLimits {
            timeout: self.timeout,
        }
    }

    async fn invoke(&self, key: &str, input: &str) -> Result<PluginReceipt, String> {
        invoke_on(
            &self.runtime,
            &self.prepared,
            self.env(),
            self.limits(),
            key,
            input,
        )
        .await
    }

    async fn query(&self, key: &str) -> Result<Lookup, String> {
        let report = self
            .runtime
            .query(&self.prepared, self.env(), self.limits(), key)
            .await;
        match report.outcome {
            Ok(Ok(lookup)) => Ok(lookup),
            Ok(Err(e)) => Err(e.to_string()),
            Err(f) => Err(f.to_string()),
        }
    }

    /// One `compensate` call reversing `original` under the compensation's own `key`.
    async fn compensate(
        &self,
        key: &str,
        original: &PluginReceipt,
        attempt: u32,
    ) -> Result<PluginReceipt, String> {
        let request = CompensationRequest {
            idempotency_key: key.to_string(),
            input: self.input.clone(),
            original_receipt: original.clone(),
            attempt,
        };
        let report = self
            .runtime
            .compensate(&self.prepared, self.env(), self.limits(), &request)
            .await;
        match report.outcome {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(e)) => Err(describe_error(&e)),
            Err(f) => Err(f.to_string()),
        }
    }

    /// The provider's record of the delivery with this id.
    fn delivery(&self, id: &str) -> Option<Delivery> {
        self.sim.sim().world().into_iter().find(|d| d.id == id)
    }

    /// Deliveries the provider recorded for this reference.
    fn recorded(&self, key: &str) -> usize {
        self.sim
            .sim()
            .world()
            .iter()
            .filter(|d| d.client_reference == key)
            .count()
    }

    fn faults(&self, patch: serde_json::Value) -> anyhow::Result<()> {
        self.sim
            .sim()
            .set_faults(patch)
            .map_err(|e| anyhow::anyhow!("setting the simulator's faults: {e}"))?;
        Ok(())
    }
}

async fn invoke_on(
    runtime: &Runtime,
    prepared: &Prepared,
    env: CallEnv,
    limits: CallLimits,
    key: &str,
    input: &str,
) -> Result<PluginReceipt, String> {
    let request = EffectRequest {
        idempotency_key: key.to_string(),
        input: input.to_string(),
        attempt: 1,
    };
    match runtime
        .invoke(prepared, env, limits, &request)
        .await
        .outcome
    {
        Ok(Ok(r)) => Ok(r),
        Ok(Err(e)) => Err(describe_error(&e)),
        Err(f) => Err(f.to_string()),
    }
}

fn describe_error(e: &EffectError) -> String {
    format!("{} ({})", e, e.kind())
}

/// The sample input of the reference delivery protocol, and a different one.
fn sample_inputs() -> (String, String) {
    let doc = |text: &str| {
        serde_json::json!({
            "recipient": "verify@example.com",
            "document": text,
            "document_digest": crate::intent::sha256_digest(text.as_bytes()),
        })
        .to_string()
    };
    (
        doc("docket verify: first document"),
        doc("docket verify: a different document"),
    )
}

/// Runs every scenario and prints the table; non-zero exit if a declared claim failed.
/// Verifies `component`; with `db`, records the verdicts there for the console.
pub async fn verify(
    component: &str,
    timeout_ms: u64,
    db: Option<&str>,
) -> anyhow::Result<ExitCode> {
    let (origin, bytes) = super::adapter::read_component(component)?;
    let runtime = Runtime::new(RuntimeConfig {
        max_instances: 16,
        cache_dir: cache_dir(),
        ..RuntimeConfig::default()
    })?;
    let loaded = runtime
        .load(&bytes)
        .await
        .with_context(|| format!("loading {origin}"))?;
    let ComponentKind::Adapter { contract } = &loaded.kind else {
        bail!(
            "{origin} is a handler; `adapter verify` checks the claims of adapters (handlers make none)"
        );
    };
    let contract = contract.clone();
    let sim = ProviderSim::start(
        SimConfig::new(SimConfig::DEFAULT_TOKEN),
        "127.0.0.1:0".parse()?,
    )
    .await
    .context("starting the provider simulator")?;
    let base = sim.base_url();
    // Every declared destination that names a setting points at the simulator.
    let mut settings = BTreeMap::new();
    for host in &contract.capabilities.outbound_hosts {
        match host.strip_prefix('$') {
            Some(setting) => {
                settings.insert(setting.to_string(), base.clone());
            }
            None => bail!(
                "{} declares the fixed destination `{host}`; `adapter verify` can only point \
                 destinations named by a setting (`$name`) at the simulator",
                contract.name
            ),
        }
    }
    let secrets: Vec<(String, String)> = contract
        .capabilities
        .secrets
        .iter()
        .map(|s| (s.clone(), SimConfig::DEFAULT_TOKEN.to_string()))
        .collect();
    let grant = Grant::new(
        vec![base.parse::<HostRule>()?],
        secrets.iter().map(|(k, _)| k.clone()),
    );
    let prepared = runtime.prepare(&loaded, &grant, &settings)?;
    let (input, other_input) = sample_inputs();
    let subject = Subject {
        runtime,
        prepared,
        settings: Arc::new(settings),
        secrets: Arc::new(SecretSource::from_pairs(secrets)),
        sim,
        timeout: Duration::from_millis(timeout_ms),
        input,
        other_input,
        name: contract.name.clone(),
    };

    println!(
        "verifying {}@{} ({}) against the provider simulator at {base}",
        contract.name, contract.version, loaded.digest
    );
    let scenarios: [&str; 7] = [
        "duplicate request",
        "response lost after commit",
        "changed input under one key",
        "two attempts at once",
        "a restarted worker",
        "eventual visibility in lookups",
        "compensation",
    ];
    let bar = ProgressBar::new(scenarios.len() as u64);
    bar.set_style(
        ProgressStyle::with_template("{bar:28} {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut findings = Vec::new();
    for (i, name) in scenarios.iter().enumerate() {
        bar.set_message(name.to_string());
        let key = format!("verify-{i}-{}", std::process::id());
        let found = match i {
            0 => duplicate_request(&subject, &key).await,
            1 => lost_response(&subject, &key).await?,
            2 => changed_input(&subject, &key).await,
            3 => concurrent(&subject, &key).await,
            4 => restarted_worker(&subject, &key, &bytes, &grant).await?,
            5 => eventual_visibility(&subject, &contract, &key).await?,
            _ => compensation(&subject, &contract, &key).await?,
        };
        findings.extend(found);
        bar.inc(1);
    }
    bar.finish_and_clear();
    let (code, verdicts) = report(&contract, &findings);
    if let Some(db) = db {
        let verification = crate::store::Verification {
            digest: loaded.digest.clone(),
            name: contract.name.clone(),
            version: contract.version.clone(),
            passed: code == ExitCode::SUCCESS,
            verdicts,
            author: super::registry::author(),
            verified_at: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)?
                .as_millis() as u64,
        };
        super::registry::record_verification(db, verification).await?;
        println!("recorded in {}", crate::store::without_password(db));
    }
    Ok(code)
}

fn finding(claim: Claim, scenario: &'static str, held: bool, detail: String) -> Finding {
    Finding {
        claim,
        scenario,
        held,
        detail,
    }
}

async fn duplicate_request(s: &Subject, key: &str) -> Vec<Finding> {
    let first = s.invoke(key, &s.input).await;
    let second = s.invoke(key, &s.input).await;
    let n = s.recorded(key);
    let same =
        matches!((&first, &second), (Ok(a), Ok(b)) if a.external_reference == b.external_reference);
    vec![finding(
        Claim::Idempotency,
        "duplicate request",
        n == 1 && same,
        format!(
            "the same request twice under one key: {} recorded, answers {} and {}",
            deliveries(n),
            brief(&first),
            brief(&second)
        ),
    )]
}

async fn lost_response(s: &Subject, key: &str) -> anyhow::Result<Vec<Finding>> {
    s.faults(serde_json::json!({"lose_next": 1}))?;
    let lost = s.invoke(key, &s.input).await;
    s.faults(serde_json::json!({"lose_next": 0}))?;
    let mut out = Vec::new();
    let lookup = s.query(key).await;
    out.push(finding(
        Claim::Query,
        "response lost after commit",
        matches!(
            lookup,
            Ok(Lookup::Found {
                status: EffectStatus::InEffect,
                ..
            })
        ),
        format!(
            "the provider committed, the answer was lost ({}); lookup by reference: {}",
            brief(&lost),
            brief_lookup(&lookup)
        ),
    ));
    let again = s.invoke(key, &s.input).await;
    let n = s.recorded(key);
    out.push(finding(
        Claim::Idempotency,
        "response lost after commit",
        n == 1 && again.is_ok(),
        format!(
            "retried with the same key: {}, {} recorded",
            brief(&again),
            deliveries(n)
        ),
    ));
    Ok(out)
}

async fn changed_input(s: &Subject, key: &str) -> Vec<Finding> {
    let first = s.invoke(key, &s.input).await;
    let changed = s.invoke(key, &s.other_input).await;
    let n = s.recorded(key);
    let refused = matches!(&changed, Err(e) if e.contains("idempotency_conflict"));
    vec![finding(
        Claim::Idempotency,
        "changed input under one key",
        first.is_ok() && refused && n == 1,
        format!(
            "another request under a used key: {}, {} recorded",
            brief(&changed),
            deliveries(n)
        ),
    )]
}

async fn concurrent(s: &Subject, key: &str) -> Vec<Finding> {
    let (a, b) = tokio::join!(s.invoke(key, &s.input), s.invoke(key, &s.input));
    let n = s.recorded(key);
    vec![finding(
        Claim::Idempotency,
        "two attempts at once",
        n == 1,
        format!(
            "two calls at once under one key: {} and {}, {} recorded",
            brief(&a),
            brief(&b),
            deliveries(n)
        ),
    )]
}

async fn restarted_worker(
    s: &Subject,
    key: &str,
    bytes: &[u8],
    grant: &Grant,
) -> anyhow::Result<Vec<Finding>> {
    let first = s.invoke(key, &s.input).await;
    // A new engine and instance: nothing survives in memory, only the key.
    let runtime = Runtime::new(RuntimeConfig {
        max_instances: 4,
        cache_dir: cache_dir(),
        ..RuntimeConfig::default()
    })?;
    let loaded = runtime.load(bytes).await?;
    let prepared = runtime.prepare(&loaded, grant, &s.settings)?;
    let second = invoke_on(&runtime, &prepared, s.env(), s.limits(), key, &s.input).await;
    let n = s.recorded(key);
    Ok(vec![finding(
        Claim::Idempotency,
        "a restarted worker",
        n == 1 && second.is_ok(),
        format!(
            "the same key from a fresh worker: {} then {}, {} recorded",
            brief(&first),
            brief(&second),
            deliveries(n)
        ),
    )])
}

async fn eventual_visibility(
    s: &Subject,
    contract: &Contract,
    key: &str,
) -> anyhow::Result<Vec<Finding>> {
    let window = contract.query.visibility_window_ms;
    // Hidden for half the declared window: an honest lookup finds it before the window ends.
    let delay = window / 2;
    s.faults(serde_json::json!({"visibility_delay_ms": delay}))?;
    let created = s.invoke(key, &s.input).await;
    let started = Instant::now();
    let mut absent = 0;
    let outcome = loop {
        match s.query(key).await {
            Ok(Lookup::Found { receipt, .. }) => break Ok(receipt.external_reference),
            Ok(Lookup::Absent) => absent += 1,
            Err(e) => break Err(e),
        }
        if started.elapsed() > Duration::from_millis(window + 500) {
            break Err(format!(
                "still absent after the declared {window} ms window"
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    s.faults(serde_json::json!({"visibility_delay_ms": 0}))?;
    Ok(vec![finding(
        Claim::Query,
        "eventual visibility in lookups",
        created.is_ok() && outcome.is_ok(),
        match outcome {
            Ok(reference) => format!(
                "hidden for {delay} ms of the declared {window} ms window: {absent} empty lookups, then found {reference}"
            ),
            Err(e) => format!("hidden for {delay} ms: {e}"),
        },
    )])
}

/// Compensation is a new effect with its own key: asked twice under that key it takes effect
/// once, and when its answer is lost the adapter says the outcome is unknown and a lookup of
/// the original reference shows the effect reversed (the host's way to recover it).
async fn compensation(s: &Subject, contract: &Contract, key: &str) -> anyhow::Result<Vec<Finding>> {
    const TWICE: &str = "compensating twice, one key";
    const LOST: &str = "compensation answer lost";
    let mut out = Vec::new();
    let created = s.invoke(key, &s.input).await;
    let Ok(receipt) = created else {
        out.push(finding(
            Claim::Compensation,
            TWICE,
            false,
            format!("could not create a delivery to undo: {}", brief(&created)),
        ));
        return Ok(out);
    };
    let id = &receipt.external_reference;
    let compensation_key = format!("{key}.compensate");
    let first = s.compensate(&compensation_key, &receipt, 1).await;
    let after_first = s.delivery(id);
    let second = s.compensate(&compensation_key, &receipt, 2).await;
    let after_second = s.delivery(id);
    let cancelled_once = match (&after_first, &after_second) {
        (Some(a), Some(b)) => {
            b.status == DeliveryStatus::Cancelled
                && a.cancelled_at.is_some()
                && a.cancelled_at == b.cancelled_at
        }
        _ => false,
    };
    out.push(finding(
        Claim::Compensation,
        TWICE,
        first.is_ok() && second.is_ok() && cancelled_once,
        format!(
            "undo {id} twice under one key: {} and {}; the provider's record says {}",
            brief(&first),
            brief(&second),
            record(after_second.as_ref())
        ),
    ));

    // A second delivery, whose cancel commits and loses its answer.
    let lost_key = format!("{key}-lost");
    let created = s.invoke(&lost_key, &s.input).await;
    let Ok(receipt) = created else {
        out.push(finding(
            Claim::Compensation,
            LOST,
            false,
            format!("could not create a delivery to undo: {}", brief(&created)),
        ));
        return Ok(out);
    };
    let id = &receipt.external_reference;
    s.faults(serde_json::json!({"lose_next_cancel": 1}))?;
    let lost = s
        .compensate(&format!("{lost_key}.compensate"), &receipt, 1)
        .await;
    s.faults(serde_json::json!({"lose_next_cancel": 0}))?;
    let unknown = matches!(&lost, Err(e) if e.contains("outcome_unknown"));
    let (held, lookup) = if contract.query.supported {
        let lookup = s.query(&lost_key).await;
        let reversed = matches!(
            lookup,
            Ok(Lookup::Found {
                status: EffectStatus::Reversed,
                ..
            })
        );
        (unknown && reversed, brief_lookup(&lookup))
    } else {
        (
            unknown,
            "not declared, so recovery goes to review".to_string(),
        )
    };
    out.push(finding(
        Claim::Compensation,
        LOST,
        held,
        format!(
            "undo {id} while the provider loses the answer: {}; the provider's record says {}; lookup of the original reference: {lookup}",
            brief(&lost),
            record(s.delivery(id).as_ref())
        ),
    ));
    Ok(out)
}

/// A delivery's status and cancel history, as evidence.
fn record(delivery: Option<&Delivery>) -> String {
    let Some(d) = delivery else {
        return "nothing".to_string();
    };
    let status = format!("{:?}", d.status).to_lowercase();
    let requests = match d.cancel_requests {
        1 => "1 cancel request".to_string(),
        n => format!("{n} cancel requests"),
    };
    match &d.cancelled_at {
        Some(at) => format!("{status} at {at}, {requests}"),
        None => format!("{status}, {requests}"),
    }
}

fn brief_lookup(lookup: &Result<Lookup, String>) -> String {
    match lookup {
        Ok(Lookup::Found {
            receipt,
            status,
            provider_status,
        }) => format!(
            "found {} ({}, provider says `{provider_status}`)",
            receipt.external_reference,
            match status {
                EffectStatus::InEffect => "in effect",
                EffectStatus::Reversed => "reversed",
            }
        ),
        Ok(Lookup::Absent) => "absent".into(),
        Err(e) => format!("failed: {e}"),
    }
}

fn deliveries(n: usize) -> String {
    match n {
        1 => "1 delivery".into(),
        n => format!("{n} deliveries"),
    }
}

fn brief(r: &Result<PluginReceipt, String>) -> String {
    match r {
        Ok(receipt) => format!("ok {}", receipt.external_reference),
        Err(e) => e.clone(),
    }
}

/// Prints the table and the verdict per claim; the exit code is 1 if a declared claim
/// failed. Returns the verdicts too (claim → `held`, `failed` or `not declared`).
fn report(contract: &Contract, findings: &[Finding]) -> (ExitCode, Vec<(String, String)>) {
    let mut failed = Vec::new();
    println!();
    println!(
        "{:<13} {:<9} {:<31} {:<7} evidence",
        "claim", "declared", "scenario", "result"
    );
    println!("{}", "-".repeat(100));
    for claim in [Claim::Idempotency, Claim::Query, Claim::Compensation] {
        let declared = claim.declared(contract);
        for f in findings.iter().filter(|f| f.claim == claim) {
            let result = match (declared, f.held) {
                (true, true) => "held",
                (true, false) => "FAILED",
                (false, true) => "n/a",
                (false, false) => "n/a",
            };
            println!(
                "{:<13} {:<9} {:<31} {:<7} {}",
                claim.name(),
                if declared { "yes" } else { "no" },
                f.scenario,
                result,
                f.detail
            );
        }
        if declared && findings.iter().any(|f| f.claim == claim && !f.held) {
            failed.push(claim.name());
        }
    }
    println!();
    let mut verdicts = Vec::new();
    for claim in [Claim::Idempotency, Claim::Query, Claim::Compensation] {
        let (verdict, short) = if !claim.declared(contract) {
            (
                "not declared (not checked against the adapter)",
                "not declared",
            )
        } else if failed.contains(&claim.name()) {
            ("FAILED: the declared behaviour did not hold", "failed")
        } else {
            ("held", "held")
        };
        println!("{:<13} {verdict}", claim.name());
        verdicts.push((claim.name().to_string(), short.to_string()));
    }
    let code = if failed.is_empty() {
        println!("\n{}: every declared claim held", contract.name);
        ExitCode::SUCCESS
    } else {
        println!(
            "\n{}: declared claims that did not hold: {}",
            contract.name,
            failed.join(", ")
        );
        ExitCode::FAILURE
    };
    (code, verdicts)
}
