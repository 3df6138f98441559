//! The `docket` binary: logging set-up, then the command line.

// jemalloc serves every allocation of the process, SQLite's included (its symbols replace
// the C library's): glibc's malloc took ~18 % of the host's CPU in a restart with 10,000
// workflows to recover (BENCHMARKS.md).
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read before `main`: two arenas (one per core of a small machine
/// rather than four per core, which holds memory apart per thread), freed pages given back
/// after a second. `MALLOC_CONF` in the environment still overrides them.
#[unsafe(export_name = "malloc_conf")]
static MALLOC_CONF: &[u8; 47] = b"narenas:2,dirty_decay_ms:1000,muzzy_decay_ms:0\0";

fn main() -> std::process::ExitCode {
    // The demo's story and the verifier's and scenarios' tables are on stdout; routine logs of the host and
    // the plugin would only bury them.
    let args: Vec<String> = std::env::args().skip(1).take(2).collect();
    let quiet = matches!(
        args.iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .as_slice(),
        ["demo", ..] | ["adapter", "verify"] | ["scenario", ..]
    );
    let default = if quiet { "error" } else { "info" };
    // Kept to the end: dropping it flushes the spans still to be exported.
    let _telemetry = docket::telemetry::init(default);
    docket::cli::run()
}
