//! The `docket` binary: logging set-up, then the command line.

fn main() -> std::process::ExitCode {
    // The demo's story is on stdout; its host's routine logs would only bury it.
    let default = if std::env::args().nth(1).as_deref() == Some("demo") {
        "warn"
    } else {
        "info"
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("DOCKET_LOG")
                .unwrap_or_else(|_| default.into()),
        )
        .with_writer(std::io::stderr)
        .init();
    docket::cli::run()
}
