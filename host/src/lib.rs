//! docket: a durable workflow host whose plugins are WebAssembly components.
//!
//! Architecture map (dependencies point inward, never outward):
//!
//! - [`clock`] and [`contract`]: pure domain — the host's notion of time, and what plugins
//!   declare and return.
//! - [`capabilities`]: pure grant policy (allowed hosts, secret scoping, redaction). No wasmtime.
//! - [`runtime`]: the only module that touches wasmtime. Loads, checks and runs components
//!   under an effective grant, a CPU deadline and a memory cap, and returns typed outcomes.
//! - [`sim`]: the provider simulator, an implementation of the reference delivery protocol
//!   with fault injection, used by tests, `docket serve` and `docket adapter verify`.
//! - [`cli`]: clap commands; the only place `anyhow` is used.

pub mod api;
pub mod capabilities;
pub mod cli;
pub mod clock;
pub mod config;
pub mod contract;
pub mod intent;
pub mod runtime;
pub mod scheduler;
pub mod sim;
pub mod store;
pub mod workflow;

/// Paths of the example and test components, built from `adapters/` by the build script.
pub mod guests {
    include!(concat!(env!("OUT_DIR"), "/guests.rs"));

    /// The path of a built component by name (e.g. `http-delivery`).
    pub fn path(name: &str) -> Option<&'static str> {
        ALL.iter().find(|(n, _)| *n == name).map(|(_, p)| *p)
    }
}
