//! The command line: the outermost layer, and the only place `anyhow` is used.
//!
//! Each subcommand parses its flags, builds what it needs from the inner modules, and
//! turns their typed errors into messages and exit codes.

mod adapter;
mod approvals;
mod check;
mod client;
mod demo;
mod export;
mod migrate;
mod policy;
mod registry;
mod scaffold;
mod scenario;
pub mod serve;
mod verify;
mod workflow;

use clap::{Args, Parser, Subcommand};
use std::net::SocketAddr;
use std::process::ExitCode;

/// The database a command works on, as `docket serve` chooses it: `--db`, else the `db`
/// of `--config`, else `.docket/docket.db`.
#[derive(Debug, Args)]
pub(crate) struct DbArgs {
    /// A SQLite file path (or `sqlite://PATH`), or `postgres://USER:PASSWORD@HOST/DB`.
    #[arg(long)]
    db: Option<String>,
    /// The host's `docket.toml`, whose `db` is used when `--db` is not given.
    #[arg(long)]
    config: Option<std::path::PathBuf>,
}

/// Where a host's database is when nothing says otherwise.
pub(crate) const DEFAULT_DB: &str = crate::app::DEFAULT_DB;

impl DbArgs {
    pub(crate) fn database(&self) -> anyhow::Result<String> {
        if let Some(db) = &self.db {
            return Ok(db.clone());
        }
        let from_config = match &self.config {
            Some(path) => crate::config::HostConfig::load(Some(path))?.db,
            None => None,
        };
        Ok(from_config.unwrap_or_else(|| DEFAULT_DB.into()))
    }
}

/// docket: a durable workflow host whose plugins are WebAssembly components.
#[derive(Debug, Parser)]
#[command(name = "docket", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Work with adapter and handler components: inspect, invoke, verify, and the registry
    /// (deploy, activate, rollback, list).
    #[command(subcommand)]
    Adapter(adapter::AdapterCommand),
    /// Run the host: API, scheduler, store (SQLite by default) and components.
    Serve(serve::ServeArgs),
    /// A guided tour of recovery: a host and the provider simulator in this process, a lost
    /// response recovered by query, and a fire-and-forget delivery that ends in review.
    Demo(demo::DemoArgs),
    /// Submit an intent to a running host.
    Submit {
        /// The workflow definition name.
        #[arg(long)]
        workflow: String,
        /// The client idempotency key: the same key and input give the same workflow.
        #[arg(long)]
        key: String,
        /// The workflow input as JSON.
        #[arg(long)]
        input: String,
        #[command(flatten)]
        server: client::Server,
    },
    /// Show a workflow's projection.
    Status {
        workflow_id: String,
        #[command(flatten)]
        server: client::Server,
    },
    /// Cancel a workflow (or, with --withdraw, withdraw a completed one): a request of its
    /// own, answered with what it does first.
    Cancel {
        workflow_id: String,
        /// Why: recorded with the cancellation.
        #[arg(long)]
        reason: String,
        /// Reverse the effects of a completed workflow (its compensable ones).
        #[arg(long)]
        withdraw: bool,
        /// Idempotency key (default: a new one); a workflow has at most one cancellation
        /// whatever the key.
        #[arg(long)]
        key: Option<String>,
        #[command(flatten)]
        server: client::Server,
    },
    /// Correct a workflow's input: a new input revision while nothing consequential was
    /// sent (the answer names what runs again), else a refusal that points to a replacement.
    Revise {
        workflow_id: String,
        /// The corrected input as JSON.
        #[arg(long)]
        input: String,
        /// Why: recorded with the revision.
        #[arg(long)]
        reason: String,
        /// Idempotency key (default: a new one).
        #[arg(long)]
        key: Option<String>,
        #[command(flatten)]
        server: client::Server,
    },
    /// Move every running workflow of one definition version to another by a plan file
    /// (`[steps] old = "new"`, `drop = […]`, `reason`): a table of what moved and what was
    /// refused and why. A step keeps its receipt and the key its requests were sent under.
    ///
    /// Example: docket migrate --workflow document-delivery --from 1 --to 2 --plan plan.toml --dry-run
    Migrate {
        /// The workflow definition name.
        #[arg(long)]
        workflow: String,
        /// The version the workflows run now.
        #[arg(long)]
        from: u32,
        /// The version to move them to (deployed already).
        #[arg(long)]
        to: u32,
        /// The plan file (TOML).
        #[arg(long)]
        plan: std::path::PathBuf,
        /// Judge each workflow and print what would happen; change nothing.
        #[arg(long)]
        dry_run: bool,
        #[command(flatten)]
        server: client::Server,
    },
    /// List the approvals waiting for you (the approver role), oldest first.
    Approvals {
        #[command(flatten)]
        server: client::Server,
    },
    /// Approve the consequence an approval step asks about, by the digest you saw
    /// (`docket approvals`, or GET …/steps/STEP/consequence): another digest is refused
    /// with the current one.
    Approve {
        workflow_id: String,
        step: String,
        /// The consequence's digest (`sha256:…`).
        #[arg(long)]
        digest: String,
        /// A note kept with the approval.
        #[arg(long)]
        note: Option<String>,
        /// Idempotency key (default: a new one).
        #[arg(long)]
        key: Option<String>,
        #[command(flatten)]
        server: client::Server,
    },
    /// Reject the consequence an approval step asks about: the step fails, and so does the
    /// workflow (compensating earlier effects that ask for it).
    Reject {
        workflow_id: String,
        step: String,
        /// Why: recorded with the rejection.
        #[arg(long)]
        reason: String,
        /// Idempotency key (default: a new one).
        #[arg(long)]
        key: Option<String>,
        #[command(flatten)]
        server: client::Server,
    },
    /// Show a workflow's timeline.
    Timeline {
        workflow_id: String,
        #[command(flatten)]
        server: client::Server,
    },
    /// Check or deploy workflow definitions.
    #[command(subcommand)]
    Workflow(WorkflowCommand),
    /// Rehearse workflows against scripted providers, host kills and a simulated clock.
    #[command(subcommand)]
    Scenario(ScenarioCommand),
    /// Deploy or list policy versions (the rules at the side-effect boundary).
    #[command(subcommand)]
    Policy(PolicyCommand),
    /// Check every workflow's records against the invariants and its stored projection;
    /// exits 1 on a violation.
    Check {
        /// Rebuild what a rebuild can fix (a stored state its steps contradict), and tell it
        /// on the workflow's timeline.
        #[arg(long)]
        repair: bool,
        #[command(flatten)]
        target: DbArgs,
    },
    /// Print a workflow's whole story (intent, steps, attempts, receipts, timeline,
    /// cancellation, revisions, notifications) as JSON, for archiving.
    Export {
        workflow_id: String,
        #[command(flatten)]
        target: DbArgs,
    },
    /// The ledger simulator: a second provider protocol (entries, lookup by reference,
    /// reversals), which the `ledger` example adapter speaks.
    SimLedger {
        /// Address to listen on.
        #[arg(long, default_value = "127.0.0.1:8091")]
        listen: SocketAddr,
        /// The `X-Api-Key` the ledger expects.
        #[arg(long, default_value = crate::sim::ledger::DEFAULT_KEY)]
        key: String,
    },
    /// Run the provider simulator: the reference delivery protocol with fault injection.
    SimProvider {
        /// Address to listen on.
        #[arg(long, default_value = "127.0.0.1:8090")]
        listen: SocketAddr,
        /// Bearer token the simulator expects.
        #[arg(long, default_value = crate::sim::SimConfig::DEFAULT_TOKEN)]
        token: String,
        /// Initial fault settings as JSON, e.g. '{"lose": 0.3, "seed": 7}'.
        #[arg(long)]
        faults: Option<String>,
        /// A saved world to start from (deliveries and remembered keys, as
        /// `host/tests/fixtures/upgrade/*/world-*.json` hold them).
        #[arg(long)]
        world: Option<std::path::PathBuf>,
    },
}

#[derive(Debug, Subcommand)]
enum PolicyCommand {
    /// Deploy a policy document as the next version (errors point at file:line:col).
    Deploy {
        file: std::path::PathBuf,
        #[command(flatten)]
        target: DbArgs,
    },
    /// List the deployed versions, newest first.
    List {
        #[command(flatten)]
        target: DbArgs,
    },
}

#[derive(Debug, Subcommand)]
enum ScenarioCommand {
    /// Run scenario files (`scenarios/*.toml`) in-process on a temporary SQLite store and
    /// report each case; exit status 1 if any fails.
    Run(scenario::RunArgs),
    /// Explore seeded fault schedules of a workflow (host kills, lost, slow and refused
    /// answers, pauses, clock jumps, duplicate submissions, cancellations) and check the
    /// invariants after each; a failing seed prints its schedule and the replay command.
    Explore(scenario::ExploreArgs),
}

#[derive(Debug, Subcommand)]
enum WorkflowCommand {
    /// Validate definition files without a host (errors point at file:line:col).
    Check {
        files: Vec<std::path::PathBuf>,
        /// Host configuration whose allowances and components to check against.
        #[arg(long)]
        config: Option<std::path::PathBuf>,
    },
    /// Deploy definition files into the database.
    Deploy {
        files: Vec<std::path::PathBuf>,
        #[command(flatten)]
        target: DbArgs,
    },
    /// Print the JSON Schema of definition files (for editors: Taplo / Even Better TOML
    /// read it from a `#:schema <path-or-url>` first line).
    Schema,
}

/// Parses the command line and runs the command.
pub fn run() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Adapter(cmd) => adapter::run(cmd).await,
            Command::Serve(args) => serve::serve(args).await,
            Command::Demo(args) => demo::demo(args).await,
            Command::Submit {
                workflow,
                key,
                input,
                server,
            } => client::submit(&server, &workflow, &key, &input).await,
            Command::Status {
                workflow_id,
                server,
            } => client::status(&server, &workflow_id).await,
            Command::Timeline {
                workflow_id,
                server,
            } => client::timeline(&server, &workflow_id).await,
            Command::Approvals { server } => approvals::list(&server).await,
            Command::Approve {
                workflow_id,
                step,
                digest,
                note,
                key,
                server,
            } => {
                approvals::approve(&server, &workflow_id, &step, &digest, note.as_deref(), key)
                    .await
            }
            Command::Reject {
                workflow_id,
                step,
                reason,
                key,
                server,
            } => approvals::reject(&server, &workflow_id, &step, &reason, key).await,
            Command::Migrate {
                workflow,
                from,
                to,
                plan,
                dry_run,
                server,
            } => {
                migrate::run(
                    &server,
                    migrate::Migration {
                        workflow: &workflow,
                        from,
                        to,
                        plan: &plan,
                        dry_run,
                    },
                )
                .await
            }
            Command::Cancel {
                workflow_id,
                reason,
                withdraw,
                key,
                server,
            } => client::cancel(&server, &workflow_id, &reason, withdraw, key).await,
            Command::Revise {
                workflow_id,
                input,
                reason,
                key,
                server,
            } => client::revise(&server, &workflow_id, &input, &reason, key).await,
            Command::Workflow(WorkflowCommand::Check { files, config }) => {
                workflow::check(&files, config.as_deref()).await
            }
            Command::Policy(PolicyCommand::Deploy { file, target }) => {
                policy::run(policy::Operation::Deploy(file), &target.database()?).await
            }
            Command::Policy(PolicyCommand::List { target }) => {
                policy::run(policy::Operation::List, &target.database()?).await
            }
            Command::Workflow(WorkflowCommand::Schema) => workflow::schema().await,
            Command::Scenario(ScenarioCommand::Run(args)) => scenario::run(args).await,
            Command::Scenario(ScenarioCommand::Explore(args)) => scenario::explore(args).await,
            Command::Workflow(WorkflowCommand::Deploy { files, target }) => {
                workflow::deploy(&files, &target.database()?, target.config.as_deref()).await
            }
            Command::Check { repair, target } => check::run(&target.database()?, repair).await,
            Command::Export {
                workflow_id,
                target,
            } => export::run(&target.database()?, &workflow_id).await,
            Command::SimProvider {
                listen,
                token,
                faults,
                world,
            } => sim_provider(listen, token, faults, world).await,
            Command::SimLedger { listen, key } => sim_ledger(listen, key).await,
        }
    });
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn sim_ledger(listen: SocketAddr, key: String) -> anyhow::Result<ExitCode> {
    let ledger = crate::sim::ledger::start(&key, listen)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {listen}: {e}"))?;
    println!("ledger simulator listening on {}", ledger.base_url());
    tokio::signal::ctrl_c().await?;
    Ok(ExitCode::SUCCESS)
}

async fn sim_provider(
    listen: SocketAddr,
    token: String,
    faults: Option<String>,
    world: Option<std::path::PathBuf>,
) -> anyhow::Result<ExitCode> {
    use crate::sim::{ProviderSim, SimConfig, WorldSnapshot};
    let sim = ProviderSim::new(SimConfig::new(token));
    if let Some(path) = world {
        let text = std::fs::read_to_string(&path)
            .map_err(|e| anyhow::anyhow!("cannot read --world {}: {e}", path.display()))?;
        let snapshot: WorldSnapshot = serde_json::from_str(&text)
            .map_err(|e| anyhow::anyhow!("--world {} is not a saved world: {e}", path.display()))?;
        let (deliveries, keys) = (snapshot.deliveries.len(), snapshot.keys.len());
        sim.restore(snapshot)
            .map_err(|e| anyhow::anyhow!("--world {}: {e}", path.display()))?;
        tracing::info!(
            "loaded {deliveries} deliveries and {keys} keys from {}",
            path.display()
        );
    }
    if let Some(faults) = faults {
        let patch: serde_json::Value = serde_json::from_str(&faults)
            .map_err(|e| anyhow::anyhow!("--faults is not valid JSON: {e}"))?;
        sim.set_faults(patch)
            .map_err(|e| anyhow::anyhow!("--faults: {e}"))?;
    }
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {listen}: {e}"))?;
    tracing::info!(
        "provider simulator listening on http://{}",
        listener.local_addr()?
    );
    sim.serve(listener).await?;
    Ok(ExitCode::SUCCESS)
}
