//! The command line: the outermost layer, and the only place `anyhow` is used.
//!
//! Each subcommand parses its flags, builds what it needs from the inner modules, and
//! turns their typed errors into messages and exit codes.

mod adapter;

use clap::{Parser, Subcommand};
use std::net::SocketAddr;
use std::process::ExitCode;

/// docket: a durable workflow host whose plugins are WebAssembly components.
#[derive(Debug, Parser)]
#[command(name = "docket", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Work with adapter and handler components: inspect, invoke.
    #[command(subcommand)]
    Adapter(adapter::AdapterCommand),
    /// Run the provider simulator: the reference delivery protocol with fault injection.
    SimProvider {
        /// Address to listen on.
        #[arg(long, default_value = "127.0.0.1:8090")]
        listen: SocketAddr,
        /// Bearer token the simulator expects.
        #[arg(long, default_value = "sim-token")]
        token: String,
        /// Initial fault settings as JSON, e.g. '{"lose": 0.3, "seed": 7}'.
        #[arg(long)]
        faults: Option<String>,
    },
}

/// Parses the command line and runs the command.
pub fn run() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Adapter(cmd) => adapter::run(cmd).await,
            Command::SimProvider { listen, token, faults } => sim_provider(listen, token, faults).await,
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

async fn sim_provider(listen: SocketAddr, token: String, faults: Option<String>) -> anyhow::Result<ExitCode> {
    use crate::sim::{ProviderSim, SimConfig};
    let sim = ProviderSim::new(SimConfig::new(token));
    if let Some(faults) = faults {
        let patch: serde_json::Value =
            serde_json::from_str(&faults).map_err(|e| anyhow::anyhow!("--faults is not valid JSON: {e}"))?;
        sim.set_faults(patch).map_err(|e| anyhow::anyhow!("--faults: {e}"))?;
    }
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {listen}: {e}"))?;
    tracing::info!("provider simulator listening on http://{}", listener.local_addr()?);
    sim.serve(listener).await?;
    Ok(ExitCode::SUCCESS)
}
