//! `docket adapter …`: tools for adapter authors — inspect a component, invoke it once,
//! verify its declared claims (`verify.rs`).

use crate::capabilities::{Grant, HostRule, SecretSource};
use crate::clock::SystemClock;
use crate::contract::{CompensationRequest, EffectRequest, PluginReceipt};
use crate::runtime::{
    CallEnv, CallLimits, CallReport, ComponentKind, LoadedComponent, Runtime, RuntimeConfig,
};
use anyhow::{Context, anyhow, bail};
use clap::{Args, Subcommand, ValueEnum};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Subcommand)]
pub enum AdapterCommand {
    /// Make a standalone crate for a new adapter (or handler) in DIR/NAME: the guest helper
    /// and the WIT vendored, a README, a test through `docket adapter invoke`, and a
    /// `verify.toml`. It builds with `cargo build --target wasm32-wasip2 --release`.
    New {
        /// The component's name (lower-case letters, digits and `-`).
        name: String,
        /// A handler (pure step computation) instead of an adapter.
        #[arg(long)]
        handler: bool,
        /// The directory to make it in (default: the current one).
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Print a component's declared contract, imports and exports.
    Inspect {
        /// A `.wasm` component, or the name of a built example (e.g. `http-delivery`).
        component: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Run one call of a component and print its typed result.
    Invoke(InvokeArgs),
    /// Check, claim by claim, that an adapter's declared idempotency, query and compensation
    /// hold against a provider — the built-in simulator, or the one `verify.toml` names —
    /// through docket's egress (duplicate request, response lost after commit, changed input
    /// under one key, two attempts at once, a request delivered twice, a restarted worker,
    /// eventual visibility (simulator only), compensating twice, a compensation's answer
    /// lost). Exits non-zero when a declared claim does not hold.
    Verify {
        /// A `.wasm` component, or the name of a built example (e.g. `http-delivery`).
        component: String,
        /// The sample inputs and the provider (default: `./verify.toml` when there is one;
        /// without it, the simulator and the reference delivery protocol's inputs).
        #[arg(long)]
        file: Option<PathBuf>,
        /// Deadline of each call.
        #[arg(long, default_value_t = 10_000)]
        timeout_ms: u64,
        /// Record the verdicts in this database (SQLite path or `postgres://…`), where the
        /// console's adapters page shows them.
        #[arg(long)]
        db: Option<String>,
    },
    /// Check a component and store it in the registry as a staged version.
    Deploy {
        /// A `.wasm` component, or the name of a built example (e.g. `http-delivery-2`).
        component: String,
        #[command(flatten)]
        target: super::DbArgs,
    },
    /// Make a deployed version the one new attempts use (running hosts pick it up).
    Activate {
        /// `NAME@VERSION`, e.g. `http-delivery@2.0.0`.
        version: String,
        #[command(flatten)]
        target: super::DbArgs,
    },
    /// Go back to the version that was active before the current one.
    Rollback {
        name: String,
        #[command(flatten)]
        target: super::DbArgs,
    },
    /// Deployed versions, which is active, and the latest changes with their authors.
    List {
        #[command(flatten)]
        target: super::DbArgs,
    },
}

#[derive(Debug, Args)]
pub struct InvokeArgs {
    /// A `.wasm` component, or the name of a built example (e.g. `http-delivery`).
    component: String,
    /// The input (adapters: `invoke` and `compensate`; handlers: `run`), as JSON.
    #[arg(long, default_value = "{}")]
    input: String,
    /// Which export to call (handlers always `run`).
    #[arg(long, value_enum, default_value_t = Operation::Invoke)]
    op: Operation,
    /// The idempotency key for `invoke` and `compensate` (the compensation's own key), the
    /// reference for `query`.
    #[arg(long, default_value = "cli-key-1")]
    key: String,
    /// For `compensate`: the external reference of the original receipt to reverse.
    #[arg(long)]
    receipt: Option<String>,
    /// For `compensate`: the original receipt's output, as JSON.
    #[arg(long, default_value = "{}")]
    receipt_output: String,
    /// The attempt number passed to `invoke` or `compensate`.
    #[arg(long, default_value_t = 1)]
    attempt: u32,
    /// Grant outbound HTTP to this destination (`http://host:port`); repeatable.
    #[arg(long = "allow-host")]
    allow_hosts: Vec<String>,
    /// Grant a secret and give its value: `NAME=VALUE`; repeatable.
    #[arg(long = "secret")]
    secrets: Vec<String>,
    /// An adapter setting: `NAME=VALUE` (e.g. `base_url=http://127.0.0.1:8090`); repeatable.
    #[arg(long = "setting")]
    settings: Vec<String>,
    /// Deadline of the call.
    #[arg(long, default_value_t = 10_000)]
    timeout_ms: u64,
    /// Memory cap of the call, in MiB (the plugin's memory and the host's 8 MiB reserve
    /// for its resources).
    #[arg(long, default_value_t = 128, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(16..=16384))]
    memory_mib: usize,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Operation {
    Invoke,
    Query,
    Compensate,
}

pub async fn run(cmd: AdapterCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        AdapterCommand::New { name, handler, dir } => {
            super::scaffold::run(super::scaffold::Scaffold { name, handler, dir })
        }
        AdapterCommand::Inspect { component, json } => inspect(&component, json).await,
        AdapterCommand::Invoke(args) => invoke(args).await,
        AdapterCommand::Verify {
            component,
            file,
            timeout_ms,
            db,
        } => super::verify::verify(&component, timeout_ms, db.as_deref(), file.as_deref()).await,
        AdapterCommand::Deploy { component, target } => {
            let op = super::registry::Operation::Deploy(component);
            super::registry::run(op, &target.database()?).await
        }
        AdapterCommand::Activate { version, target } => {
            let op = super::registry::Operation::Activate(version);
            super::registry::run(op, &target.database()?).await
        }
        AdapterCommand::Rollback { name, target } => {
            let op = super::registry::Operation::Rollback(name);
            super::registry::run(op, &target.database()?).await
        }
        AdapterCommand::List { target } => {
            super::registry::run(super::registry::Operation::List, &target.database()?).await
        }
    }
}

/// The bytes of a component file as given, or of the example of that name (embedded in
/// this binary), with what to call it in messages.
pub(crate) fn read_component(given: &str) -> anyhow::Result<(String, Vec<u8>)> {
    let path = Path::new(given);
    if path.exists() {
        let bytes = std::fs::read(path).with_context(|| format!("reading {given}"))?;
        return Ok((given.to_string(), bytes));
    }
    if let Some(bytes) = crate::guests::embedded(given) {
        return Ok((format!("the example `{given}`"), bytes.to_vec()));
    }
    // Later versions of the examples are not embedded; they exist beside a source build.
    if let Some(p) = crate::guests::path(given) {
        let bytes = std::fs::read(p).with_context(|| format!("reading {p}"))?;
        return Ok((p.to_string(), bytes));
    }
    let names: Vec<&str> = crate::guests::ALL.iter().map(|(n, _)| *n).collect();
    bail!(
        "`{given}` is neither a file nor a built example; pass a path to a .wasm component or one of: {}",
        names.join(", ")
    )
}

pub(crate) fn cache_dir() -> Option<PathBuf> {
    crate::app::component_cache_dir()
}

async fn load(
    component: &str,
    memory_mib: usize,
) -> anyhow::Result<(Runtime, Arc<LoadedComponent>)> {
    let (origin, bytes) = read_component(component)?;
    let runtime = Runtime::new(RuntimeConfig {
        memory_cap_bytes: memory_mib << 20,
        max_instances: 16,
        cache_dir: cache_dir(),
        ..RuntimeConfig::default()
    })?;
    let loaded = runtime
        .load(&bytes)
        .await
        .with_context(|| format!("loading {origin}"))?;
    Ok((runtime, loaded))
}

async fn inspect(component: &str, json: bool) -> anyhow::Result<ExitCode> {
    let (_, c) = load(component, 128).await?;
    if json {
        let doc = serde_json::json!({
            "digest": c.digest,
            "size_bytes": c.size_bytes,
            "kind": c.kind,
            "imports": c.imports,
            "exports": c.exports,
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!("{}@{}  ({} bytes)", c.name(), c.version(), c.size_bytes);
    println!("digest:  {}", c.digest);
    match &c.kind {
        ComponentKind::Adapter { contract } => {
            println!("world:   adapter");
            let i = &contract.idempotency;
            println!(
                "  idempotency:  {}",
                if i.supported {
                    format!(
                        "yes — retention {} s, namespace `{}`",
                        i.retention_seconds, i.namespace
                    )
                } else {
                    "no".into()
                }
            );
            println!(
                "  query:        {}",
                if contract.query.supported {
                    format!(
                        "yes — visibility window {} ms",
                        contract.query.visibility_window_ms
                    )
                } else {
                    "no".into()
                }
            );
            println!(
                "  compensation: {}",
                if contract.compensation.supported {
                    "yes"
                } else {
                    "no"
                }
            );
            println!(
                "  outbound:     [{}]",
                contract.capabilities.outbound_hosts.join(", ")
            );
            println!(
                "  secrets:      [{}]",
                contract.capabilities.secrets.join(", ")
            );
        }
        ComponentKind::Handler { .. } => println!("world:   handler"),
    }
    println!("imports:");
    for i in &c.imports {
        println!("  {i}");
    }
    println!("exports:");
    for e in &c.exports {
        println!("  {e}");
    }
    Ok(ExitCode::SUCCESS)
}

fn pairs(items: &[String], flag: &str) -> anyhow::Result<Vec<(String, String)>> {
    items
        .iter()
        .map(|s| {
            s.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .ok_or_else(|| anyhow!("{flag} `{s}` must be NAME=VALUE"))
        })
        .collect()
}

async fn invoke(args: InvokeArgs) -> anyhow::Result<ExitCode> {
    serde_json::from_str::<serde_json::Value>(&args.input).context("--input is not valid JSON")?;
    let (runtime, component) = load(&args.component, args.memory_mib).await?;
    let hosts = args
        .allow_hosts
        .iter()
        .map(|h| h.parse::<HostRule>())
        .collect::<Result<Vec<_>, _>>()?;
    let secrets = pairs(&args.secrets, "--secret")?;
    let settings: BTreeMap<String, String> =
        pairs(&args.settings, "--setting")?.into_iter().collect();
    let grant = Grant::new(hosts, secrets.iter().map(|(k, _)| k.clone()));
    let prepared = runtime.prepare(&component, &grant, &settings)?;
    let env = CallEnv {
        settings: Arc::new(settings),
        secrets: Arc::new(SecretSource::from_pairs(secrets)),
        clock: SystemClock::new(),
        label: format!("cli/{}", component.name()).into(),
    };
    let limits = CallLimits {
        timeout: Duration::from_millis(args.timeout_ms),
    };
    let value = match (&component.kind, args.op) {
        (ComponentKind::Handler { .. }, _) => {
            let report = runtime
                .run_handler(&prepared, env, limits, &args.input)
                .await;
            print_report(report, |r| match r {
                Ok(out) => (
                    "ok",
                    serde_json::from_str(&out).unwrap_or(serde_json::Value::String(out)),
                ),
                Err(e) => ("handler_error", serde_json::to_value(e).unwrap()),
            })
        }
        (ComponentKind::Adapter { .. }, Operation::Invoke) => {
            let request = EffectRequest {
                idempotency_key: args.key.clone(),
                input: args.input.clone(),
                attempt: args.attempt,
            };
            let report = runtime.invoke(&prepared, env, limits, &request).await;
            print_report(report, effect_json)
        }
        (ComponentKind::Adapter { .. }, Operation::Query) => {
            let report = runtime.query(&prepared, env, limits, &args.key).await;
            print_report(report, |r| match r {
                Ok(l) => ("ok", serde_json::to_value(l).unwrap()),
                Err(e) => ("effect_error", serde_json::to_value(e).unwrap()),
            })
        }
        (ComponentKind::Adapter { .. }, Operation::Compensate) => {
            let reference = args
                .receipt
                .clone()
                .ok_or_else(|| anyhow!("--op compensate needs --receipt EXTERNAL_REFERENCE"))?;
            serde_json::from_str::<serde_json::Value>(&args.receipt_output)
                .context("--receipt-output is not valid JSON")?;
            let request = CompensationRequest {
                idempotency_key: args.key.clone(),
                input: args.input.clone(),
                original_receipt: PluginReceipt {
                    external_reference: reference,
                    output: args.receipt_output.clone(),
                },
                attempt: args.attempt,
            };
            let report = runtime.compensate(&prepared, env, limits, &request).await;
            print_report(report, effect_json)
        }
    };
    Ok(value)
}

fn effect_json(
    r: Result<PluginReceipt, crate::contract::EffectError>,
) -> (&'static str, serde_json::Value) {
    match r {
        Ok(receipt) => ("ok", serde_json::to_value(receipt).unwrap()),
        Err(e) => ("effect_error", serde_json::to_value(e).unwrap()),
    }
}

/// Prints the call's log to stderr and its typed result as JSON to stdout.
/// Exit code: 0 success, 1 typed plugin error, 2 the call itself failed.
fn print_report<T>(
    report: CallReport<T>,
    render: impl FnOnce(T) -> (&'static str, serde_json::Value),
) -> ExitCode {
    for line in &report.log {
        eprintln!("[{:?} {:?}] {}", line.source, line.level, line.message);
    }
    for d in &report.denials {
        eprintln!("[host denial] {d}");
    }
    let (label, value, code) = match report.outcome {
        Ok(inner) => {
            let (label, value) = render(inner);
            let code = if label == "ok" { 0 } else { 1 };
            (label, value, code)
        }
        Err(failure) => ("call_failure", serde_json::to_value(failure).unwrap(), 2),
    };
    let doc = serde_json::json!({ label: value, "elapsed_ms": report.elapsed.as_millis() as u64 });
    println!("{}", serde_json::to_string_pretty(&doc).unwrap());
    ExitCode::from(code)
}
