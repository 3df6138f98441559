//! `docket adapter verify FILE.wasm`: checks, claim by claim, that what an adapter declares
//! (idempotency, query, compensation) holds when it is driven against a provider — docket's
//! built-in simulator by default, or the author's own sandbox named in `verify.toml`.
//!
//! The adapter runs in the real runtime under a grant to that provider only, and every
//! scenario goes through the runtime's egress tap ([`crate::runtime::EgressTap`]), which can
//! lose a response after the provider answered, hold requests so that two attempts meet, and
//! deliver one request twice. The verdicts use only what the adapter itself observes — the
//! reference each answer names, what its own `query` finds, the kind of each error — with
//! the provider's answers, as the tap saw them, printed as evidence. So the same command
//! judges any adapter of any protocol, and an adapter that claims idempotency but never
//! sends its key is caught by the second reference it is given. A claim the adapter does not
//! make is reported as such and not held against it.

use super::adapter::cache_dir;
use crate::capabilities::{Grant, HostRule, SecretSource};
use crate::clock::SystemClock;
use crate::contract::{
    CompensationRequest, Contract, EffectError, EffectRequest, EffectStatus, Lookup, PluginReceipt,
};
use crate::runtime::{
    CallEnv, CallLimits, ComponentKind, EgressTap, Prepared, Runtime, RuntimeConfig, TapAction,
    TappedAnswer, TappedRequest,
};
use crate::sim::{ProviderSim, RunningSim, SimConfig};
use anyhow::{Context, bail};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
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
    /// The scenario could not be run against this provider (said why in `detail`): it
    /// neither holds nor fails the claim.
    unproven: bool,
    detail: String,
}

/// `verify.toml`: the sample inputs and, optionally, the provider to verify against.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct VerifyFile {
    /// A request the adapter should accept.
    input: toml::Table,
    /// A different request: sent under a used key, it must be refused as a conflict.
    other_input: Option<toml::Table>,
    /// The provider; without it, the built-in simulator.
    provider: Option<ProviderFile>,
}

/// `[provider]` of `verify.toml`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProviderFile {
    /// What every destination named by a setting (`$base_url`) points at.
    url: String,
    /// Destinations to grant besides `url`.
    #[serde(default)]
    hosts: Vec<String>,
    /// Other settings the adapter reads.
    #[serde(default)]
    settings: BTreeMap<String, String>,
    /// Secret values by name; `"$NAME"` reads the environment variable `NAME`.
    #[serde(default)]
    secrets: BTreeMap<String, String>,
    /// Whether names may resolve to private addresses (a sandbox on the local network).
    #[serde(default)]
    allow_private: bool,
}

/// The tap's record: what the provider answered, and what to do with the next requests.
#[derive(Debug, Default)]
struct Wire {
    mode: Mode,
    answers: Vec<String>,
}

#[derive(Debug, Default, Clone)]
enum Mode {
    #[default]
    Pass,
    /// Lose the answer to the next request.
    DropNext,
    /// Deliver the next request twice.
    ReplayNext,
    /// Hold each request until the other of a pair arrives (or a while passes).
    Pair(Arc<tokio::sync::Barrier>),
}

/// The egress tap of a verification.
#[derive(Debug, Default)]
struct Tap(Mutex<Wire>);

impl Tap {
    fn set(&self, mode: Mode) {
        self.0.lock().unwrap().mode = mode;
    }

    /// The provider's answers since the last call, as evidence.
    fn take(&self) -> Vec<String> {
        std::mem::take(&mut self.0.lock().unwrap().answers)
    }
}

/// How much of an answer's body the evidence shows.
const EXCERPT: usize = 90;

impl EgressTap for Tap {
    fn request(&self, _: &TappedRequest) -> TapAction {
        let mut wire = self.0.lock().unwrap();
        match wire.mode.clone() {
            Mode::Pass => TapAction::Pass,
            Mode::DropNext => {
                wire.mode = Mode::Pass;
                TapAction::DropAnswer
            }
            Mode::ReplayNext => {
                wire.mode = Mode::Pass;
                TapAction::Replay
            }
            Mode::Pair(barrier) => TapAction::Hold(Box::pin(async move {
                let _ = tokio::time::timeout(Duration::from_secs(3), barrier.wait()).await;
            })),
        }
    }

    fn answered(&self, request: &TappedRequest, answer: &TappedAnswer, delivered: bool) {
        let path = request
            .url
            .split_once("://")
            .and_then(|(_, rest)| rest.find('/').map(|i| &rest[i..]))
            .unwrap_or(&request.url);
        let said = match answer.status {
            Some(status) => {
                let body = String::from_utf8_lossy(&answer.body);
                let body: String = body.chars().take(EXCERPT).collect();
                format!("{status} {body}")
            }
            None => answer.error.clone().unwrap_or_default(),
        };
        let lost = if delivered { "" } else { " [not passed on]" };
        self.0
            .lock()
            .unwrap()
            .answers
            .push(format!("{} {path} → {said}{lost}", request.method));
    }
}

/// Where the adapter is pointed.
enum Target {
    Simulator(RunningSim),
    Provider(String),
}

impl Target {
    fn url(&self) -> String {
        match self {
            Target::Simulator(sim) => sim.base_url(),
            Target::Provider(url) => url.clone(),
        }
    }

    fn describe(&self) -> String {
        match self {
            Target::Simulator(sim) => format!("the provider simulator at {}", sim.base_url()),
            Target::Provider(url) => format!("the provider at {url}"),
        }
    }
}

/// The adapter under test, wired to its provider through the tap.
struct Subject {
    runtime: Runtime,
    prepared: Arc<Prepared>,
    settings: Arc<BTreeMap<String, String>>,
    secrets: Arc<SecretSource>,
    tap: Arc<Tap>,
    target: Target,
    timeout: Duration,
    input: String,
    other_input: String,
    name: String,
    /// How far the simulator's clock is moved ahead of the real one, in ms.
    skew: Arc<AtomicU64>,
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

    async fn invoke(&self, key: &str, input: &str) -> Result<PluginReceipt, Failure> {
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
            Ok(Err(e)) => Err(describe_error(&e)),
            Err(f) => Err(f.to_string()),
        }
    }

    /// One `compensate` call reversing `original` under the compensation's own `key`.
    async fn compensate(
        &self,
        key: &str,
        original: &PluginReceipt,
        attempt: u32,
    ) -> Result<PluginReceipt, Failure> {
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
            Ok(Err(e)) => Err(Failure::of(&e)),
            Err(f) => Err(Failure::call(f.to_string())),
        }
    }

    /// The provider's answers since the last look, as one line of evidence.
    fn evidence(&self) -> String {
        let answers = self.tap.take();
        if answers.is_empty() {
            "the provider was not asked".into()
        } else {
            format!("provider: {}", answers.join("; "))
        }
    }
}

/// A call that did not give a receipt: the adapter's typed error, or the call's failure.
#[derive(Debug, Clone)]
struct Failure {
    /// `outcome_unknown`, `idempotency_conflict`, …; empty for a failed call.
    kind: String,
    text: String,
}

impl Failure {
    fn of(e: &EffectError) -> Self {
        Self {
            kind: e.kind().to_string(),
            text: describe_error(e),
        }
    }

    fn call(text: String) -> Self {
        Self {
            kind: String::new(),
            text,
        }
    }
}

async fn invoke_on(
    runtime: &Runtime,
    prepared: &Prepared,
    env: CallEnv,
    limits: CallLimits,
    key: &str,
    input: &str,
) -> Result<PluginReceipt, Failure> {
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
        Ok(Err(e)) => Err(Failure::of(&e)),
        Err(f) => Err(Failure::call(f.to_string())),
    }
}

fn describe_error(e: &EffectError) -> String {
    format!("{} ({})", e, e.kind())
}

/// The sample inputs of the reference delivery protocol, for an adapter verified without a
/// `verify.toml` (the examples speak it).
fn default_inputs() -> (String, String) {
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

/// Reads `verify.toml`, naming what is wrong in it.
fn read_file(path: &Path) -> anyhow::Result<VerifyFile> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    toml::from_str(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

/// The value of a secret given in `verify.toml`.
fn secret_value(name: &str, given: &str) -> anyhow::Result<String> {
    match given.strip_prefix('$') {
        Some(var) => std::env::var(var).with_context(|| {
            format!("verify.toml gives secret `{name}` as `${var}`, but {var} is not set")
        }),
        None => Ok(given.to_string()),
    }
}

/// What the adapter runs with: settings, secrets as (name, value), and its grant.
type Wiring = (BTreeMap<String, String>, Vec<(String, String)>, Grant);

/// What the adapter runs with against the provider at `url`: its settings (every declared
/// destination named by a setting points at `url`), its secrets, and its grant.
fn wiring(
    contract: &Contract,
    provider: Option<&ProviderFile>,
    url: &str,
) -> anyhow::Result<Wiring> {
    let mut settings = provider.map(|p| p.settings.clone()).unwrap_or_default();
    for host in &contract.capabilities.outbound_hosts {
        match host.strip_prefix('$') {
            Some(setting) => {
                settings.insert(setting.to_string(), url.to_string());
            }
            // A fixed destination must be among the granted hosts of verify.toml.
            None if provider.is_some() => {}
            None => bail!(
                "{} declares the fixed destination `{host}`; to verify it, name the provider in \
                 verify.toml ([provider] url and hosts)",
                contract.name
            ),
        }
    }
    let mut secrets = Vec::new();
    for name in &contract.capabilities.secrets {
        let value = match provider {
            None => SimConfig::DEFAULT_TOKEN.to_string(),
            Some(p) => match p.secrets.get(name) {
                Some(given) => secret_value(name, given)?,
                None => bail!(
                    "{} reads the secret `{name}`; give it in verify.toml: [provider] secrets = \
                     {{ {name} = \"…\" }}",
                    contract.name
                ),
            },
        };
        secrets.push((name.clone(), value));
    }
    let mut hosts = vec![
        url.parse::<HostRule>()
            .with_context(|| format!("the provider URL `{url}`"))?,
    ];
    for host in provider.map(|p| p.hosts.as_slice()).unwrap_or_default() {
        hosts.push(
            host.parse::<HostRule>()
                .with_context(|| format!("verify.toml hosts: `{host}`"))?,
        );
    }
    let grant = Grant::new(hosts, secrets.iter().map(|(k, _)| k.clone()))
        .allowing_private(provider.is_some_and(|p| p.allow_private));
    Ok((settings, secrets, grant))
}

/// Verifies `component` against the provider of `file` (default: `./verify.toml` when there
/// is one, else the built-in simulator with the reference protocol's inputs); prints the
/// table; exits non-zero if a declared claim failed. With `db`, records the verdicts there
/// for the console.
pub async fn verify(
    component: &str,
    timeout_ms: u64,
    db: Option<&str>,
    file: Option<&Path>,
) -> anyhow::Result<ExitCode> {
    let file = match file {
        Some(path) => Some(read_file(path)?),
        None if Path::new("verify.toml").is_file() => {
            println!("using ./verify.toml");
            Some(read_file(Path::new("verify.toml"))?)
        }
        None => None,
    };
    let (origin, bytes) = super::adapter::read_component(component)?;
    let tap = Arc::new(Tap::default());
    let config = |max_instances| RuntimeConfig {
        max_instances,
        cache_dir: cache_dir(),
        tap: Some(tap.clone() as Arc<dyn EgressTap>),
        ..RuntimeConfig::default()
    };
    let runtime = Runtime::new(config(16))?;
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
    let (input, other_input) = match &file {
        Some(f) => {
            let other = f.other_input.clone().unwrap_or_else(|| {
                let mut other = f.input.clone();
                other.insert("docket_verify_other".into(), toml::Value::Boolean(true));
                other
            });
            (
                serde_json::to_string(&f.input)?,
                serde_json::to_string(&other)?,
            )
        }
        None => default_inputs(),
    };
    let provider = file.as_ref().and_then(|f| f.provider.as_ref());
    // The simulator's clock can be moved, to prove a key's retention without waiting it out.
    let skew = Arc::new(AtomicU64::new(0));
    let target = match provider {
        Some(p) => Target::Provider(p.url.trim_end_matches('/').to_string()),
        None => Target::Simulator(
            simulator(SimConfig::new(SimConfig::DEFAULT_TOKEN), skew.clone())
                .await
                .context("starting the provider simulator")?,
        ),
    };
    let url = target.url();
    let (settings, secrets, grant) = wiring(&contract, provider, &url)?;
    let prepared = runtime.prepare(&loaded, &grant, &settings)?;
    let subject = Subject {
        runtime,
        prepared,
        settings: Arc::new(settings),
        secrets: Arc::new(SecretSource::from_pairs(secrets)),
        tap: tap.clone(),
        target,
        timeout: Duration::from_millis(timeout_ms),
        input,
        other_input,
        name: contract.name.clone(),
        skew,
    };

    println!(
        "verifying {}@{} ({}) against {}",
        contract.name,
        contract.version,
        loaded.digest,
        subject.target.describe()
    );
    let scenarios: [&str; 10] = [
        DUPLICATE,
        LOST,
        CHANGED,
        CONCURRENT,
        TWICE_DELIVERED,
        RESTARTED,
        RETENTION,
        VISIBILITY,
        COMPENSATED_TWICE,
        COMPENSATION_LOST,
    ];
    let bar = ProgressBar::new(scenarios.len() as u64);
    bar.set_style(
        ProgressStyle::with_template("{bar:28} {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut findings = Vec::new();
    for (i, name) in scenarios.iter().enumerate() {
        bar.set_message(name.to_string());
        let key = format!("verify-{i}-{}-{}", std::process::id(), now_ms());
        subject.tap.set(Mode::Pass);
        subject.tap.take();
        let found = match *name {
            DUPLICATE => duplicate_request(&subject, &key).await,
            LOST => lost_response(&subject, &contract, &key).await,
            CHANGED => changed_input(&subject, &key).await,
            CONCURRENT => concurrent(&subject, &key).await,
            TWICE_DELIVERED => delivered_twice(&subject, &key).await,
            RESTARTED => {
                let fresh = Runtime::new(config(4))?;
                restarted_worker(&subject, &key, &fresh, &bytes, &grant).await?
            }
            RETENTION => key_retention(&subject, &contract, &key).await,
            VISIBILITY => eventual_visibility(&subject, &contract, &key).await?,
            COMPENSATED_TWICE => compensated_twice(&subject, &contract, &key).await,
            _ => compensation_lost(&subject, &contract, &key).await,
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
            verified_at: now_ms(),
        };
        super::registry::record_verification(db, verification).await?;
        println!("recorded in {}", crate::store::without_password(db));
    }
    Ok(code)
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

const DUPLICATE: &str = "duplicate request";
const LOST: &str = "response lost after commit";
const CHANGED: &str = "changed input under one key";
const CONCURRENT: &str = "two attempts at once";
const TWICE_DELIVERED: &str = "a request delivered twice";
const RESTARTED: &str = "a restarted worker";
const RETENTION: &str = "the key kept for its retention";
const VISIBILITY: &str = "eventual visibility in lookups";
const COMPENSATED_TWICE: &str = "compensating twice, one key";
const COMPENSATION_LOST: &str = "compensation answer lost";

fn finding(claim: Claim, scenario: &'static str, held: bool, detail: String) -> Finding {
    Finding {
        claim,
        scenario,
        held,
        unproven: false,
        detail,
    }
}

/// A scenario this provider does not allow to run, and why.
fn unproven(claim: Claim, scenario: &'static str, detail: String) -> Finding {
    Finding {
        claim,
        scenario,
        held: false,
        unproven: true,
        detail,
    }
}

/// Both answers name one effect.
fn same_reference(a: &Result<PluginReceipt, Failure>, b: &Result<PluginReceipt, Failure>) -> bool {
    matches!((a, b), (Ok(a), Ok(b)) if a.external_reference == b.external_reference)
}

async fn duplicate_request(s: &Subject, key: &str) -> Vec<Finding> {
    let first = s.invoke(key, &s.input).await;
    let second = s.invoke(key, &s.input).await;
    vec![finding(
        Claim::Idempotency,
        DUPLICATE,
        same_reference(&first, &second),
        format!(
            "the same request twice under one key: {} then {}; {}",
            brief(&first),
            brief(&second),
            s.evidence()
        ),
    )]
}

/// The provider commits and its answer is lost: the adapter must say the outcome is
/// unknown; its `query` must find the effect; a retry under the key must name the effect the
/// provider made (the one its lost answer named, or the one the lookup found).
async fn lost_response(s: &Subject, contract: &Contract, key: &str) -> Vec<Finding> {
    s.tap.set(Mode::DropNext);
    let lost = s.invoke(key, &s.input).await;
    let lost_answers = s.tap.take();
    let lost_text = lost_answers.join("; ");
    let unknown = matches!(&lost, Err(f) if f.kind == "outcome_unknown");
    let lookup = s.query(key).await;
    let found = match &lookup {
        Ok(Lookup::Found {
            receipt,
            status: EffectStatus::InEffect,
            ..
        }) => Some(receipt.external_reference.clone()),
        _ => None,
    };
    let query_evidence = s.evidence();
    let mut out = Vec::new();
    if contract.query.supported {
        out.push(finding(
            Claim::Query,
            LOST,
            unknown && found.is_some(),
            format!(
                "the answer was lost ({}); lookup by the key: {}; provider: {lost_text}; {query_evidence}",
                brief(&lost),
                brief_lookup(&lookup)
            ),
        ));
    }
    let again = s.invoke(key, &s.input).await;
    let names_the_effect = match &again {
        Ok(r) => match &found {
            Some(reference) => *reference == r.external_reference,
            None => lost_text.contains(&r.external_reference),
        },
        Err(_) => false,
    };
    out.push(finding(
        Claim::Idempotency,
        LOST,
        unknown && names_the_effect,
        format!(
            "after the lost answer ({}), the same key again: {}; {}",
            brief(&lost),
            brief(&again),
            s.evidence()
        ),
    ));
    out
}

async fn changed_input(s: &Subject, key: &str) -> Vec<Finding> {
    let first = s.invoke(key, &s.input).await;
    let changed = s.invoke(key, &s.other_input).await;
    let refused = matches!(&changed, Err(f) if f.kind == "idempotency_conflict");
    vec![finding(
        Claim::Idempotency,
        CHANGED,
        first.is_ok() && refused,
        format!(
            "another request under a used key: {}; {}",
            brief(&changed),
            s.evidence()
        ),
    )]
}

/// Two attempts held at the egress until both have sent, then let through together.
async fn concurrent(s: &Subject, key: &str) -> Vec<Finding> {
    s.tap
        .set(Mode::Pair(Arc::new(tokio::sync::Barrier::new(2))));
    let (a, b) = tokio::join!(s.invoke(key, &s.input), s.invoke(key, &s.input));
    s.tap.set(Mode::Pass);
    vec![finding(
        Claim::Idempotency,
        CONCURRENT,
        same_reference(&a, &b),
        format!(
            "two calls at once under one key: {} and {}; {}",
            brief(&a),
            brief(&b),
            s.evidence()
        ),
    )]
}

/// The network delivers the request twice; the adapter hears the second answer, which
/// must name the effect the first one made.
async fn delivered_twice(s: &Subject, key: &str) -> Vec<Finding> {
    s.tap.set(Mode::ReplayNext);
    let answer = s.invoke(key, &s.input).await;
    let answers = s.tap.take();
    let first = answers.first().cloned().unwrap_or_default();
    let held = matches!(&answer, Ok(r) if first.contains(&r.external_reference));
    vec![finding(
        Claim::Idempotency,
        TWICE_DELIVERED,
        held,
        format!(
            "one request delivered twice: the adapter heard {}; provider: {}",
            brief(&answer),
            answers.join("; ")
        ),
    )]
}

async fn restarted_worker(
    s: &Subject,
    key: &str,
    runtime: &Runtime,
    bytes: &[u8],
    grant: &Grant,
) -> anyhow::Result<Vec<Finding>> {
    let first = s.invoke(key, &s.input).await;
    // A new engine and instance: nothing survives in memory, only the key.
    let loaded = runtime.load(bytes).await?;
    let prepared = runtime.prepare(&loaded, grant, &s.settings)?;
    let second = invoke_on(runtime, &prepared, s.env(), s.limits(), key, &s.input).await;
    Ok(vec![finding(
        Claim::Idempotency,
        RESTARTED,
        same_reference(&first, &second),
        format!(
            "the same key from a fresh worker: {} then {}; {}",
            brief(&first),
            brief(&second),
            s.evidence()
        ),
    )])
}

/// Only the simulator can hide a new effect from lookups; against another provider this
/// scenario is not run.
/// A simulator whose clock runs `skew` ms ahead of the real one.
async fn simulator(config: SimConfig, skew: Arc<AtomicU64>) -> std::io::Result<RunningSim> {
    let clock: crate::sim::Clock = Arc::new(move || {
        std::time::SystemTime::now() + Duration::from_millis(skew.load(Ordering::Relaxed))
    });
    ProviderSim::with_clock(config, clock)
        .spawn("127.0.0.1:0".parse().expect("a loopback address"))
        .await
}

/// The provider remembers a key at least as long as the adapter declares: just before the
/// declared retention ends, the same request under the same key names the same effect and
/// creates nothing. Proven against the simulator by moving its clock; a real provider's
/// clock cannot be moved, and waiting out a retention of hours is no check.
async fn key_retention(s: &Subject, contract: &Contract, key: &str) -> Vec<Finding> {
    if !contract.idempotency.supported {
        return Vec::new();
    }
    let declared = contract.idempotency.retention_seconds;
    let Target::Simulator(sim) = &s.target else {
        return vec![unproven(
            Claim::Idempotency,
            RETENTION,
            format!(
                "not provable against an external provider: proving a retention of {declared} s means waiting that long or moving the provider's clock, which docket cannot do; run verify without [provider] to prove the adapter's side against the simulator, and take the provider's retention from its documentation"
            ),
        )];
    };
    let first = s.invoke(key, &s.input).await;
    let made = sim.sim().world().len();
    // One second before the declared retention ends (at once for a retention under 2 s).
    let at = declared.saturating_sub(1);
    s.skew.store(at * 1000, Ordering::Relaxed);
    let again = s.invoke(key, &s.input).await;
    s.skew.store(0, Ordering::Relaxed);
    let created = sim.sim().world().len() - made;
    let held = first.is_ok() && same_reference(&first, &again) && created == 0;
    let detail = if held {
        format!(
            "the same request {at} s later (declared retention {declared} s) named the same effect: {} then {}; {}",
            brief(&first),
            brief(&again),
            s.evidence()
        )
    } else {
        format!(
            "the provider no longer knew the key {at} s later, within the declared {declared} s: {} then {} ({created} new effect(s)); {}",
            brief(&first),
            brief(&again),
            s.evidence()
        )
    };
    vec![finding(Claim::Idempotency, RETENTION, held, detail)]
}

/// An effect becomes visible to lookups within the declared window. Against the simulator
/// it is hidden for half the window first; against any provider the lookups are repeated
/// until it shows, and it must show before the window ends.
async fn eventual_visibility(
    s: &Subject,
    contract: &Contract,
    key: &str,
) -> anyhow::Result<Vec<Finding>> {
    if !contract.query.supported {
        return Ok(Vec::new());
    }
    let window = contract.query.visibility_window_ms;
    let faults = |sim: &RunningSim, patch| {
        sim.sim()
            .set_faults(patch)
            .map_err(|e| anyhow::anyhow!("setting the simulator's faults: {e}"))
    };
    // Hidden for half the declared window: an honest lookup finds it before the window ends.
    let delay = match &s.target {
        Target::Simulator(sim) => {
            let delay = window / 2;
            faults(sim, serde_json::json!({"visibility_delay_ms": delay}))?;
            Some(delay)
        }
        Target::Provider(_) => None,
    };
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
    let took = started.elapsed().as_millis();
    if let Target::Simulator(sim) = &s.target {
        faults(sim, serde_json::json!({"visibility_delay_ms": 0}))?;
    }
    let same = matches!((&created, &outcome), (Ok(c), Ok(found)) if c.external_reference == *found);
    s.tap.take();
    let hidden = match delay {
        Some(delay) => format!("hidden for {delay} ms of the declared {window} ms window"),
        None => format!("asked again until it showed, within the declared {window} ms window"),
    };
    Ok(vec![finding(
        Claim::Query,
        VISIBILITY,
        same,
        match (outcome, &created) {
            (Ok(reference), _) if same => {
                format!("{hidden}: {absent} empty lookups, then found {reference} after {took} ms")
            }
            (Ok(reference), c) => format!(
                "{hidden}: found {reference}, but the request made {}",
                brief(c)
            ),
            (Err(e), _) => format!("{hidden}: {e}"),
        },
    )])
}

/// An effect to undo, made under `key`.
async fn an_effect(s: &Subject, key: &str) -> Result<PluginReceipt, String> {
    s.invoke(key, &s.input)
        .await
        .map_err(|f| format!("could not make an effect to undo: {}", f.text))
}

/// What the adapter's own lookup says of the effect made under `key`, when it can look.
async fn reversed_by_its_own_lookup(s: &Subject, contract: &Contract, key: &str) -> (bool, String) {
    if !contract.query.supported {
        return (true, "no lookup declared to confirm it".into());
    }
    let lookup = s.query(key).await;
    let reversed = matches!(
        lookup,
        Ok(Lookup::Found {
            status: EffectStatus::Reversed,
            ..
        })
    );
    (reversed, format!("its lookup: {}", brief_lookup(&lookup)))
}

/// Compensation is a new effect with its own key: asked twice under that key it answers
/// with one reversal, and the adapter's own lookup then reports the effect reversed.
async fn compensated_twice(s: &Subject, contract: &Contract, key: &str) -> Vec<Finding> {
    let receipt = match an_effect(s, key).await {
        Ok(r) => r,
        Err(e) => return vec![finding(Claim::Compensation, COMPENSATED_TWICE, false, e)],
    };
    let compensation_key = format!("{key}.compensate");
    let first = s.compensate(&compensation_key, &receipt, 1).await;
    let second = s.compensate(&compensation_key, &receipt, 2).await;
    let (reversed, lookup) = reversed_by_its_own_lookup(s, contract, key).await;
    vec![finding(
        Claim::Compensation,
        COMPENSATED_TWICE,
        same_reference(&first, &second) && reversed,
        format!(
            "undo {} twice under one key: {} then {}; {lookup}; {}",
            receipt.external_reference,
            brief(&first),
            brief(&second),
            s.evidence()
        ),
    )]
}

/// The provider applies a compensation and its answer is lost: the adapter must say the
/// outcome is unknown, and its lookup must show the effect reversed (how docket recovers).
async fn compensation_lost(s: &Subject, contract: &Contract, key: &str) -> Vec<Finding> {
    let receipt = match an_effect(s, key).await {
        Ok(r) => r,
        Err(e) => return vec![finding(Claim::Compensation, COMPENSATION_LOST, false, e)],
    };
    s.tap.take();
    s.tap.set(Mode::DropNext);
    let lost = s
        .compensate(&format!("{key}.compensate"), &receipt, 1)
        .await;
    s.tap.set(Mode::Pass);
    let evidence = s.evidence();
    let unknown = matches!(&lost, Err(f) if f.kind == "outcome_unknown");
    let (reversed, lookup) = reversed_by_its_own_lookup(s, contract, key).await;
    s.tap.take();
    vec![finding(
        Claim::Compensation,
        COMPENSATION_LOST,
        unknown && reversed,
        format!(
            "undo {} while its answer is lost: {}; {lookup}; {evidence}",
            receipt.external_reference,
            brief(&lost),
        ),
    )]
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
                EffectStatus::Refused => "refused",
            }
        ),
        Ok(Lookup::Absent) => "absent".into(),
        Err(e) => format!("failed: {e}"),
    }
}

fn brief(r: &Result<PluginReceipt, Failure>) -> String {
    match r {
        Ok(receipt) => format!("ok {}", receipt.external_reference),
        Err(f) => f.text.clone(),
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
            let result = match (declared, f.held, f.unproven) {
                (false, _, _) => "n/a",
                (true, _, true) => "unproven",
                (true, true, false) => "held",
                (true, false, false) => "FAILED",
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
        if declared
            && findings
                .iter()
                .any(|f| f.claim == claim && !f.held && !f.unproven)
        {
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
        } else if findings.iter().any(|f| f.claim == claim && f.unproven) {
            (
                "held where it could be proven (see `unproven` above)",
                "held; partly unproven here",
            )
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capabilities::Scheme;

    fn contract(hosts: &[&str], secrets: &[&str]) -> Contract {
        use crate::contract::{
            CompensationClaim, DeclaredCapabilities, IdempotencyClaim, QueryClaim,
        };
        Contract {
            name: "acme".into(),
            version: "1.0.0".into(),
            idempotency: IdempotencyClaim {
                supported: true,
                retention_seconds: 60,
                namespace: "acme".into(),
            },
            query: QueryClaim {
                supported: false,
                visibility_window_ms: 0,
            },
            compensation: CompensationClaim { supported: false },
            capabilities: DeclaredCapabilities {
                outbound_hosts: hosts.iter().map(ToString::to_string).collect(),
                secrets: secrets.iter().map(ToString::to_string).collect(),
            },
            observes: false,
            batch: None,
        }
    }

    fn provider(text: &str) -> ProviderFile {
        let file: VerifyFile =
            toml::from_str(&format!("input = {{}}\n[provider]\n{text}")).unwrap();
        file.provider.unwrap()
    }

    /// Every field of `[provider]` reaches the adapter: settings, hosts, secrets (from the
    /// environment too) and `allow_private`.
    #[test]
    fn the_provider_of_verify_toml_is_what_the_adapter_is_given() {
        // SAFETY: this test alone reads this variable.
        unsafe { std::env::set_var("DOCKET_VERIFY_TEST_TOKEN", "from-the-environment") };
        let p = provider(
            r#"
url = "http://127.0.0.1:9001"
hosts = ["https://auth.example.com"]
settings = { region = "eu", base_url = "overridden" }
secrets = { token = "$DOCKET_VERIFY_TEST_TOKEN", other = "plain" }
allow_private = true
"#,
        );
        let c = contract(
            &["$base_url", "https://auth.example.com"],
            &["token", "other"],
        );
        let (settings, secrets, grant) = wiring(&c, Some(&p), "http://127.0.0.1:9001").unwrap();
        assert_eq!(settings["base_url"], "http://127.0.0.1:9001");
        assert_eq!(settings["region"], "eu");
        assert_eq!(
            secrets,
            [
                ("token".to_string(), "from-the-environment".to_string()),
                ("other".to_string(), "plain".to_string())
            ]
        );
        assert!(grant.allows_destination(Scheme::Https, "auth.example.com", 443));
        assert!(grant.allows_destination(Scheme::Http, "127.0.0.1", 9001));
        assert!(grant.allows_private());
    }

    /// The retention scenario against a simulator that forgets keys after an hour: the
    /// honest adapter declares a day, so the claim fails — and holds against the protocol's
    /// day. The clock is moved, nothing waits.
    #[tokio::test(flavor = "multi_thread")]
    async fn a_provider_that_forgets_a_key_before_the_declared_retention_fails_the_claim() {
        let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
        let path = crate::guests::path("http-delivery").expect("the delivery adapter is built");
        let loaded = runtime.load_file(Path::new(path)).await.unwrap();
        let ComponentKind::Adapter { contract } = &loaded.kind else {
            panic!("an adapter")
        };
        assert_eq!(contract.idempotency.retention_seconds, 86_400);
        let (input, other_input) = default_inputs();
        for (retention, held) in [(3_600, false), (86_400, true)] {
            let skew = Arc::new(AtomicU64::new(0));
            let mut config = SimConfig::new(SimConfig::DEFAULT_TOKEN);
            config.key_retention = Duration::from_secs(retention);
            let sim = simulator(config, skew.clone()).await.unwrap();
            let (settings, secrets, grant) = wiring(contract, None, &sim.base_url()).unwrap();
            let subject = Subject {
                prepared: runtime.prepare(&loaded, &grant, &settings).unwrap(),
                runtime: runtime.clone(),
                settings: Arc::new(settings),
                secrets: Arc::new(SecretSource::from_pairs(secrets)),
                tap: Arc::new(Tap::default()),
                target: Target::Simulator(sim),
                timeout: Duration::from_secs(5),
                input: input.clone(),
                other_input: other_input.clone(),
                name: contract.name.clone(),
                skew,
            };
            let found = key_retention(&subject, contract, &format!("k-{retention}")).await;
            assert_eq!(found.len(), 1);
            assert_eq!(found[0].held, held, "{}", found[0].detail);
            let Target::Simulator(sim) = &subject.target else {
                unreachable!()
            };
            let made = sim.sim().world().len();
            if held {
                assert!(
                    found[0]
                        .detail
                        .contains("86399 s later (declared retention 86400 s)"),
                    "{}",
                    found[0].detail
                );
                assert_eq!(made, 1);
            } else {
                assert!(
                    found[0]
                        .detail
                        .contains("no longer knew the key 86399 s later"),
                    "{}",
                    found[0].detail
                );
                assert_eq!(made, 2, "the forgotten key made a second effect");
            }
            assert_eq!(
                subject.skew.load(Ordering::Relaxed),
                0,
                "the clock is put back"
            );
        }
    }

    #[test]
    fn what_verify_toml_lacks_is_named() {
        let p = provider("url = \"http://127.0.0.1:9001\"");
        let c = contract(&["$base_url"], &["token"]);
        let e = wiring(&c, Some(&p), "http://127.0.0.1:9001").unwrap_err();
        assert!(e.to_string().contains("reads the secret `token`"), "{e}");
        let p = provider(
            "url = \"http://127.0.0.1:9001\"\nsecrets = { token = \"$DOCKET_UNSET_FOR_SURE\" }",
        );
        let e = wiring(&c, Some(&p), "http://127.0.0.1:9001").unwrap_err();
        assert!(
            e.to_string().contains("DOCKET_UNSET_FOR_SURE is not set"),
            "{e}"
        );
        let e = toml::from_str::<VerifyFile>("input = {}\n[provider]\nurl = \"x\"\nhost = []")
            .unwrap_err();
        assert!(e.to_string().contains("unknown field `host`"), "{e}");
        // Against the simulator, a fixed destination cannot be pointed anywhere.
        let c = contract(&["https://api.example.com"], &[]);
        let e = wiring(&c, None, "http://127.0.0.1:9001").unwrap_err();
        assert!(e.to_string().contains("fixed destination"), "{e}");
    }
}
