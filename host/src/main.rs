//! The `docket` binary: logging set-up, then the command line.

fn main() -> std::process::ExitCode {
    // The demo's story and the verifier's table are on stdout; routine logs of the host and
    // the plugin would only bury them.
    let args: Vec<String> = std::env::args().skip(1).take(2).collect();
    let quiet = matches!(
        args.iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .as_slice(),
        ["demo", ..] | ["adapter", "verify"]
    );
    let default = if quiet { "warn" } else { "info" };
    // Kept to the end: dropping it flushes the spans still to be exported.
    let _telemetry = docket::telemetry::init(default);
    docket::cli::run()
}
