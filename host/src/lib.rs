//! docket: a durable workflow host whose plugins are WebAssembly components.
//!
//! Architecture map — dependencies point inward, never outward:
//!
//! - Pure domain, no I/O: [`clock`] (the one source of "now"), [`contract`] (what plugins
//!   declare and return), [`intent`] (ids, states, records, canonical input),
//!   [`workflow`] (TOML definitions → validated types, with file:line:col errors) and
//!   [`capabilities`] (grants, allowed hosts, secret scoping and redaction), [`course`]
//!   (what a cancellation and compensations do to a workflow's steps) and [`policy`] (the
//!   versioned rules that allow or deny an effect at the side-effect boundary) and
//!   [`budget`] (limits as spent and extended, what an attempt may draw on) and [`notify`]
//!   (which transitions are told, Standard Webhooks signatures, the retry schedule) and
//!   [`metrics`] (this host's counters and the Prometheus text of a scrape) and [`health`]
//!   (whether the supervised tasks run and the host is stopping) and [`entropy`] (the
//!   randomness of ids and jitter, seedable by a simulation).
//! - [`check`]: the invariants a workflow's records must keep — the check itself pure, its
//!   sweep reading the records through the store's traits.
//! - [`outbound`]: the host's own HTTP client (notifications, the CLI): HTTPS through
//!   rustls, an optional CA file, no redirects.
//! - [`telemetry`]: where spans go (the log, and OTLP when asked for) and how a workflow's
//!   trace travels with it.
//! - [`store`]: durable state behind traits split by consumer, with two backends —
//!   SQLite (the embedded default) and PostgreSQL (many hosts on one database); the only
//!   module that touches the database drivers (sqlx, and rusqlite for the SQLite writer and
//!   point reads). It never reads a clock.
//! - [`runtime`]: the only module that touches wasmtime. Loads, checks and runs components
//!   under an effective grant, a deadline and a memory cap, and returns typed outcomes; it
//!   never touches the store.
//! - [`catalog`]: what this host can run — the components loaded and how a step's
//!   component is resolved and granted, the deployed definitions, the adapter registry's
//!   operations and the policy in force; it reads the store and the runtime, never the
//!   scheduler.
//! - [`scheduler`]: claims ready steps under leases, runs them through the runtime,
//!   records outcomes through the store, and recovers expired leases (resume from a stored
//!   result, query, same-key retry, or review, as the adapter's contract allows); its
//!   notifier delivers the notification outbox.
//! - Below the interfaces: [`access`] (tokens, subjects, roles), [`view`] (what a workflow
//!   looks like to people and clients: projections, status text, milestones), [`intake`]
//!   (what a new intent is created with), [`context`]
//!   (what the interfaces share) and [`operator`] (operator actions on a step as domain
//!   decisions: a typed order, `decide` → plan or refusal, applied by the store).
//! - [`api`]: the axum HTTP API over the store and the deployed definitions; it renders
//!   operator actions as JSON.
//! - [`console`]: the operator's recovery console, server-rendered pages on the API's
//!   listener; it renders the same operator actions as pages and never imports [`api`].
//! - [`sim`]: the provider simulator (the reference delivery protocol with fault
//!   injection), used by tests, `docket serve` and adapter authors.
//! - [`config`]: the operator's `docket.toml`, validated with errors that say how to fix it.
//! - [`app`]: the composition root — builds a host from its configuration and runs its
//!   parts as named, supervised tasks (a task that dies stops the host); each periodic
//!   round is a tick run every period ([`app::tasks`]).
//! - [`scenario`]: rehearsals — like [`app`], a composition of the parts (store, runtime,
//!   scheduler, API) in one process, on a simulated clock, with scripted providers answered
//!   inside the runtime and expectations checked at the end.
//! - [`cli`]: the clap commands; the only place `anyhow` is used.

pub mod access;
pub mod api;
pub mod app;
pub mod budget;
pub mod capabilities;
pub mod catalog;
pub mod check;
pub mod cli;
pub mod clock;
pub mod config;
pub mod console;
pub mod context;
pub mod contract;
pub mod course;
pub mod entropy;
pub mod health;
pub mod intake;
pub mod intent;
pub mod metrics;
pub mod notify;
pub mod operator;
pub mod outbound;
pub mod policy;
pub mod runtime;
pub mod scenario;
pub mod scheduler;
pub mod sim;
pub mod store;
pub mod telemetry;
pub mod view;
pub mod workflow;

#[cfg(test)]
mod fuzz;

/// Bounded polls for tests, shared with the integration suite.
#[cfg(test)]
#[path = "../tests/support/wait.rs"]
mod wait;

/// The example and test components, built from `adapters/` by the build script (their
/// paths, and the examples' bytes as part of the binary), and the shipped definitions.
pub mod guests {
    include!(concat!(env!("OUT_DIR"), "/guests.rs"));

    /// The bytes of an example by name, as embedded in this binary.
    pub fn embedded(name: &str) -> Option<&'static [u8]> {
        EMBEDDED.iter().find(|(n, _)| *n == name).map(|(_, b)| *b)
    }

    /// The path of a built component by name (e.g. `http-delivery`, `http-delivery-2`).
    pub fn path(name: &str) -> Option<&'static str> {
        ALL.iter()
            .chain(VERSIONS)
            .find(|(n, _)| *n == name)
            .map(|(_, p)| *p)
    }
}
