//! `docket serve`: the command's flags, and running the host ([`crate::app::App`]) until
//! Ctrl-C or SIGTERM.

use crate::app::{App, Options};
use crate::config::HostConfig;
use clap::Args;
use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address of the API (default 127.0.0.1:8080).
    #[arg(long)]
    pub listen: Option<SocketAddr>,
    /// Database: a SQLite file path or `sqlite://PATH` (default `.docket/docket.db`), or
    /// `postgres://USER:PASSWORD@HOST/DB` for many hosts on one database.
    #[arg(long)]
    pub db: Option<String>,
    /// Host configuration file (`docket.toml`).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Enable the test controls: the API's clock and tick counts, and `DOCKET_FAILPOINT`;
    /// refused unless listening on loopback.
    #[arg(long)]
    pub test_controls: bool,
    /// Where the embedded provider simulator listens when it is used (default: any free
    /// loopback port).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub sim_listen: SocketAddr,
    /// Admit and serve reads, but run no steps (for measuring admission alone).
    #[arg(long)]
    pub pause_execution: bool,
    /// Start even though the database serves another environment than the configured one,
    /// and move it to the configured one: workflows admitted from then on derive their
    /// idempotency keys in it; every unfinished workflow keeps its keys and is told on its
    /// timeline.
    #[arg(long)]
    pub adopt_environment: bool,
}

impl ServeArgs {
    /// What these flags add to the configuration file.
    pub fn options(&self) -> Options {
        Options {
            listen: self.listen,
            db: self.db.clone(),
            test_controls: self.test_controls,
            sim_listen: self.sim_listen,
            pause_execution: self.pause_execution,
            config_path: self.config.clone(),
            adopt_environment: self.adopt_environment,
        }
    }
}

/// A line on stdout. A reader that went away (a closed pipe) must not stop a running host,
/// as `println!` would by panicking.
fn say(line: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}").and_then(|()| out.flush());
}

/// Runs the host until Ctrl-C or SIGTERM (a graceful stop: exit 0), or until one of its
/// tasks ends on its own (exit 1, naming the task).
pub async fn serve(args: ServeArgs) -> anyhow::Result<std::process::ExitCode> {
    let config = HostConfig::load(args.config.as_deref())?;
    let app = App::build(&args.options(), config).await?;
    // Ctrl-C or SIGTERM (what service managers send): a graceful stop. Listened for before
    // the banner, so a signal sent as soon as it is seen is never the default (a kill).
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let interrupt = tokio::signal::ctrl_c();
    // A line on stdout that scripts (and tests) can wait for.
    let scheme = if app.https { "https" } else { "http" };
    say(format_args!("docket listening on {scheme}://{}", app.addr));
    if let Some(sim) = app.simulator() {
        say(format_args!(
            "development mode: deliveries go to the built-in provider simulator at {} (configure [adapters.http-delivery] for a real provider)",
            sim.base_url()
        ));
    }
    let signalled = async move {
        tokio::select! {
            _ = interrupt => {}
            _ = terminate.recv() => {}
        }
    };
    app.run(signalled).await?;
    Ok(std::process::ExitCode::SUCCESS)
}
